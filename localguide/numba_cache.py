"""Where numba keeps localguide's compiled kernels: under localguide's cache directory, never in the package.

numba's default keeps machine code in ``__pycache__`` beside each source file: inside
``site-packages`` for an installed localguide, where a later install does not remove it and
a leftover folder can shadow a checkout. Here every kernel of localguide is cached under
``<cache dir>/numba/<localguide version>-numba<version>-<CPU>/<source folder>_<hash of its path>/``,
so two localguide versions, numba versions, CPUs or installs never share entries. When the user sets ``NUMBA_CACHE_DIR``,
numba's own rule applies (that directory). Kernels of other packages are left alone.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
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

    from ._version import __version__
    from .cache import cache_dir

    return cache_dir() / "numba" / f"{__version__}-numba{numba.__version__}-{llvm.get_host_cpu_name()}"


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
            # Keyed by the source folder too (as numba's NUMBA_CACHE_DIR rule does): two checkouts
            # or installs of one version must not overwrite each other's entries.
            self._cache_path = str(_installed / self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            if config.CACHE_DIR or _relative(py_file) is None:
                return None  # NUMBA_CACHE_DIR wins; other packages' kernels keep numba's rule
            return super().from_function(py_func, py_file)

    locators = caching.CacheImpl._locator_classes
    if not any(c.__name__ == LocalguideCacheLocator.__name__ for c in locators):
        locators.insert(0, LocalguideCacheLocator)
