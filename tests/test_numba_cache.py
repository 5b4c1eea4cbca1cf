"""numba's machine code for localguide's kernels lives under localguide's cache directory, keyed by
localguide's version, numba's version and the CPU; never inside the package; NUMBA_CACHE_DIR wins."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import localguide
from localguide.runtime import numba_cache
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


def test_the_stamp_covers_what_kernels_import(tmp_path, monkeypatch):
    """A kernel's cache entry is stale when a module it imports changes (numba's own stamp is of
    the kernel's file alone: a helper inlined from another file stayed as it was compiled)."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "a_kernels.py").write_text("from ..helpers import f\nfrom .b_kernels import g\n")
    (pkg / "sub" / "b_kernels.py").write_text("x = 1\n")
    (pkg / "helpers.py").write_text("def f(): return 1\n")
    (pkg / "unrelated.py").write_text("y = 1\n")
    monkeypatch.setattr(numba_cache, "_PACKAGE", pkg)

    def stamp():
        monkeypatch.setattr(numba_cache, "_stamp", None)
        return numba_cache.kernels_stamp()

    first = stamp()
    assert stamp() == first
    (pkg / "unrelated.py").write_text("y = 22\n")
    assert stamp() == first
    (pkg / "helpers.py").write_text("def f(): return 2 + 0\n")
    second = stamp()
    assert second != first
    (pkg / "sub" / "b_kernels.py").write_text("x = 12\n")
    assert stamp() != second
    monkeypatch.undo()
    numba_cache._stamp = None  # (the real one again)
    locator = build_kernels.distances._cache._impl._locator
    assert type(locator).__name__ == "LocalguideCacheLocator"
    assert locator.get_source_stamp() == numba_cache.kernels_stamp()


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
    env.pop("_LOCALGUIDE_KERNELS_DIR", None)
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
    env.pop("_LOCALGUIDE_KERNELS_DIR", None)
    # (a small regex needs no kernel; one of 300 states compiles the index kernels)
    code = ("import localguide; v = localguide.Vocabulary.from_gguf(localguide.default_model_path()); "
            "print(len(localguide.compile_regex(r'\\d{4}', v).guide().allowed_token_ids())); "
            "print(len(localguide.compile_regex(r'[a-z]{300}', v).guide().allowed_token_ids()))")
    subprocess.run([str(py), "-c", code], env=env, check=True, cwd=tmp_path)
    after = sorted(p.relative_to(site) for p in site.rglob("*"))
    assert after == before, sorted(set(after) - set(before))[:10]
    assert any((tmp_path / "cache" / "numba").rglob("*.nbi"))


def _readme_commands() -> list[str]:
    """The README's two commands for a fresh machine, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Fresh machine", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in section.split("```bash")[1:] for block in [block.split("```")[0]]]


@pytest.mark.slow
def test_the_readme_commands_in_order_leave_a_working_localguide(tmp_path):
    """The README's first command, then its second (pytest on one quick file, not the whole suite),
    in a fresh venv and a copy of the checkout; then ``localguide grammars`` and ``localguide run``
    still work (a first install must leave nothing that shadows the editable one)."""
    first, second = _readme_commands()
    assert first.startswith('pip install ".[model]"') and second.startswith('pip install -e ".[test]"')
    second = second.replace("python -m pytest -q", "python -m pytest -q tests/test_errors.py")
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    env = dict(os.environ, PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(env_dir),
               LOCALGUIDE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("_LOCALGUIDE_KERNELS_DIR", None)
    env.pop("PYTHONPATH", None)
    out = {}
    for command in (first, second, "localguide grammars", "localguide run --regex '[0-9]{3}' 'Three digits:'"):
        proc = subprocess.run(["bash", "-c", command], env=env, cwd=checkout, capture_output=True, text=True,
                              timeout=1800)
        assert proc.returncode == 0, (command, proc.stdout[-1000:], proc.stderr[-2000:])
        out[command] = proc.stdout
    assert "json" in out["localguide grammars"] and "sql" in out["localguide grammars"]
    assert re.fullmatch(r"[0-9]{3}", out["localguide run --regex '[0-9]{3}' 'Three digits:'"].strip())


def test_two_installs_of_the_same_sources_share_their_kernels(tmp_path):
    """``pip install .`` then ``pip install -e .`` (two folders of the same sources) compile once; a
    copy whose kernel sources differ keeps its own entries."""
    import shutil

    for name in ("a", "b", "c"):
        shutil.copytree(ROOT / "localguide", tmp_path / name / "localguide",
                        ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "c" / "localguide" / "index" / "build_kernels.py", "a") as f:
        f.write("\n# another version of the sources\n")
    env = dict(os.environ, LOCALGUIDE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("_LOCALGUIDE_KERNELS_DIR", None)
    where = {}
    for name in ("a", "b", "c"):
        code = ("import localguide, pathlib; from localguide.index import build_kernels as k; "
                "assert pathlib.Path(localguide.__file__).parent.parent.name == %r; "
                "print(k.distances._cache._cache_path)" % name)
        out = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=str(tmp_path / name)),
                             capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert out.returncode == 0, out.stderr
        where[name] = out.stdout.strip()
    assert where["a"] == where["b"] and where["a"] != where["c"]
    assert where["a"].startswith(str(tmp_path / "cache" / "numba"))
