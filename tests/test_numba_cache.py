"""numba's machine code for localguide's kernels lives under localguide's cache directory, keyed by
localguide's version, numba's version and the CPU; never inside the package; NUMBA_CACHE_DIR wins."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import localguide
from localguide import numba_cache
from localguide.index import build_kernels

ROOT = Path(__file__).resolve().parents[1]


def test_kernel_cache_is_under_the_cache_dir_and_keyed():
    import llvmlite.binding as llvm
    import numba

    where = Path(build_kernels.distances._cache._cache_path)
    kd = numba_cache.kernels_dir()
    assert kd.parent.name == "numba"
    assert localguide.__version__ in kd.name and numba.__version__ in kd.name and llvm.get_host_cpu_name() in kd.name
    assert where.parent == kd and where.name.startswith("index_")
    package = Path(localguide.__file__).resolve().parent
    assert package not in where.parents


def test_numba_cache_dir_wins(tmp_path):
    code = ("from pathlib import Path; from localguide.index import build_kernels as k; "
            "print(k.distances._cache._cache_path)")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "nb"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, check=True)
    assert Path(out.stdout.strip()).is_relative_to(tmp_path / "nb")


def test_other_packages_keep_numbas_rule(tmp_path):
    """A kernel outside localguide is not sent to localguide's cache directory."""
    mod = tmp_path / "elsewhere.py"
    mod.write_text("from numba import njit\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    code = "import localguide, elsewhere; print(elsewhere.f._cache._cache_path)"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()) == tmp_path / "__pycache__"


@pytest.mark.slow
def test_an_installed_package_writes_nothing_under_site_packages(tmp_path):
    """A wheel installed into a fresh venv (pip's wheel cache makes it quick), used for a regex:
    site-packages/localguide holds exactly what pip installed."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, cwd=tmp_path)
    wheel = next(wheels.glob("localguide-*.whl"))
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"{wheel}[model]"], check=True, cwd=tmp_path)
    site = Path(subprocess.run([str(py), "-c", "import localguide, pathlib; print(pathlib.Path(localguide.__file__).parent)"],
                               capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip())
    before = sorted(p.relative_to(site) for p in site.rglob("*"))
    env = dict(os.environ, LOCALGUIDE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    code = ("import localguide; v = localguide.Vocabulary.from_gguf(localguide.default_model_path()); "
            "print(len(localguide.compile_regex(r'\\d{4}', v).guide().allowed_token_ids()))")
    subprocess.run([str(py), "-c", code], env=env, check=True, cwd=tmp_path)
    after = sorted(p.relative_to(site) for p in site.rglob("*"))
    assert after == before, sorted(set(after) - set(before))[:10]
    assert any((tmp_path / "cache" / "numba").rglob("*.nbi"))
