"""Where numba keeps localguide's compiled kernels: under localguide's cache directory, never in the package.

numba's default keeps machine code in ``__pycache__`` beside each source file: inside
``site-packages`` for an installed localguide, where a later install does not remove it and
a leftover folder can shadow a checkout. Here every kernel of localguide is cached under
``<cache dir>/numba/<localguide version>-numba<version>-<CPU>/<source folder>_<stamp of the sources>/``,
so two localguide versions, numba versions, CPUs or differing sources never share entries, and two
installs of the same sources do. When the user sets ``NUMBA_CACHE_DIR``,
numba's own rule applies (that directory). Kernels of other packages are left alone.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # (localguide, the folder above runtime)
_installed: Path | None = None


def kernels_dir() -> Path:
    """The folder of this localguide's compiled kernels for this CPU (``NUMBA_CACHE_DIR`` aside).

    Decided once, when localguide is imported (numba picks each kernel's cache then): a later
    change of ``LOCALGUIDE_CACHE_DIR`` moves the Index cache, not the kernels."""
    if _installed is not None:
        return _installed
    import os

    if os.environ.get("_LOCALGUIDE_KERNELS_DIR"):  # (a warm-up process: its parent's folder)
        return Path(os.environ["_LOCALGUIDE_KERNELS_DIR"])
    import llvmlite.binding as llvm
    import numba

    from .._version import __version__
    from .cache import cache_dir

    return cache_dir() / "numba" / f"{__version__}-numba{numba.__version__}-{llvm.get_host_cpu_name()}"


def kernels_stamp() -> str:
    """A stamp of the contents of every kernel module (``*_kernels.py``) and of the package modules
    they import (helpers and constants that numba compiles into them), taken once. numba's own
    stamp is of a kernel's file alone: a helper inlined from another file stayed in the cache as it
    was compiled, and an install of a newer localguide of the same version ran it. Of contents, not
    times: two installs of the same sources (``pip install .``, then ``pip install -e .``) share
    one compile."""
    global _stamp
    if _stamp is None:
        import hashlib
        import re

        files = set(_PACKAGE.rglob("*_kernels.py"))
        for f in list(files):
            try:
                text = f.read_text("utf-8")
            except OSError:
                continue
            for dots, name in re.findall(r"^from (\.+)([\w.]*) import", text, re.M):
                base = f.parent
                for _ in range(len(dots) - 1):
                    base = base.parent
                target = base.joinpath(*name.split(".")) if name else base
                files.add(target.with_suffix(".py") if target.with_suffix(".py").is_file() else target / "__init__.py")
        h = hashlib.blake2b(digest_size=12)
        for f in sorted(files):
            try:
                data = f.read_bytes()
            except OSError:
                continue
            h.update(f"{f.relative_to(_PACKAGE).as_posix()}:{len(data)}\n".encode())
            h.update(data)
        _stamp = h.hexdigest()
    return _stamp


_stamp: str | None = None


def _relative(py_file: str) -> Path | None:
    try:
        return Path(py_file).resolve().relative_to(_PACKAGE)
    except (ValueError, OSError):
        return None


def install() -> None:
    """Send numba's cache of localguide's kernels to ``kernels_dir()`` (before any kernel module is imported)."""
    from numba.core import caching, config

    global _installed
    _installed = kernels_dir()

    class LocalguideCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            # Keyed by the sources' contents, not their path: installs of the same sources share the
            # entries (compiled once per machine and version), and two checkouts of different
            # sources keep apart instead of overwriting each other's.
            rel = _relative(py_file)
            folder = "_".join(rel.parent.parts) if rel is not None and rel.parent.parts else "localguide"
            self._cache_path = str(_installed / f"{folder}_{kernels_stamp()}")

        def get_cache_path(self):
            return self._cache_path

        def get_source_stamp(self):
            return kernels_stamp()  # (any kernel module or what it imports changed: compile again)

        @classmethod
        def from_function(cls, py_func, py_file):
            if config.CACHE_DIR or _relative(py_file) is None:
                return None  # NUMBA_CACHE_DIR wins; other packages' kernels keep numba's rule
            return super().from_function(py_func, py_file)

    locators = caching.CacheImpl._locator_classes
    if not any(c.__name__ == LocalguideCacheLocator.__name__ for c in locators):
        locators.insert(0, LocalguideCacheLocator)
