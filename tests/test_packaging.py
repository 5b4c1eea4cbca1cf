"""The wheel carries every subpackage: ``pyproject.toml`` names each folder of ``localguide/``."""

from __future__ import annotations

import pytest

tomllib = pytest.importorskip("tomllib")
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(d.relative_to(ROOT).parts) for d in (ROOT / "localguide").rglob("*")
             if d.is_dir() and (d / "__init__.py").is_file()} | {"localguide"}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == {"localguide.grammars"}  # mapped from grammars/ by package-dir
    assert config["package-dir"]["localguide.grammars"] == "grammars"
