"""The package as shipped: ``pyproject.toml`` names every subpackage; the masks are as recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(d.relative_to(ROOT).parts) for d in (ROOT / "localguide").rglob("*")
             if d.is_dir() and (d / "__init__.py").is_file()} | {"localguide"}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == {"localguide.grammars"}  # mapped from grammars/ by package-dir
    assert config["package-dir"]["localguide.grammars"] == "grammars"


@pytest.mark.slow
def test_golden_mask_hashes():
    """Every mask of tests/golden.py's walks is as recorded (a restructuring changes none)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(ROOT / "tests" / "golden.py"), "--check",
                        str(ROOT / "tests" / "golden_masks.json")], capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stdout[-4000:]
