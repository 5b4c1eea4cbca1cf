"""Disk cache of compiled arrays: one ``.npz`` file per key, written atomically.

The directory is ``$LOCALGUIDE_CACHE_DIR`` or the user's cache directory. A file
that cannot be read is rebuilt, with a single warning per process. Large files are
written by a background thread, so a fresh compile returns as soon as it is built;
until the file is on disk, the same process is served the arrays from memory, and
the interpreter waits for the writes at exit (``flush()`` waits now).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import warnings
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__

_warned = False
_BACKGROUND_BYTES = 1 << 20  # smaller files are written at once: it costs less than a thread
_pending: dict[Path, tuple[threading.Thread, dict]] = {}
_lock = threading.Lock()


def cache_dir() -> Path:
    override = os.environ.get("LOCALGUIDE_CACHE_DIR")
    if override:
        return Path(override)
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "localguide"


def key_path(kind: str, *parts: str) -> Path:
    """The cache file for ``kind`` keyed by ``parts`` and the library version."""
    h = hashlib.sha256()
    for p in (__version__, kind, *parts):
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return cache_dir() / f"{kind}-{h.hexdigest()[:32]}.npz"


def save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically (readers never see a partial file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:  # a read-only or full disk costs speed, never correctness
        _warn(f"localguide: could not write cache file {path} ({e}); continuing without it")


def load(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays stored at ``path``; None if absent. A corrupt file is removed, with a warning."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
        _warn(f"localguide: cache file {path} is corrupt ({type(e).__name__}); rebuilding it")
        try:
            path.unlink()
        except OSError:
            pass
        return None


def cached(path: Path, build: Callable[[], dict[str, np.ndarray]],
           check: Callable[[dict], bool] = lambda arrays: True) -> dict[str, np.ndarray]:
    """Load the arrays at ``path``, or build and store them. ``check`` rejects a stale or broken load."""
    with _lock:
        pending = _pending.get(path)
    if pending is not None:
        return pending[1]
    arrays = load(path)
    if arrays is not None:
        try:
            if check(arrays):
                return arrays
        except (KeyError, ValueError, IndexError):
            pass
        _warn(f"localguide: cache file {path} is corrupt (unexpected content); rebuilding it")
    arrays = build()
    if sum(a.nbytes for a in arrays.values()) < _BACKGROUND_BYTES:
        save(path, arrays)
    else:
        _save_in_background(path, arrays)
    return arrays


def _save_in_background(path: Path, arrays: dict[str, np.ndarray]) -> None:
    def write():
        try:
            save(path, arrays)
        finally:
            with _lock:
                if _pending.get(path, (None,))[0] is thread:
                    del _pending[path]

    # Not a daemon: the interpreter joins it at exit, so the file is complete or absent.
    thread = threading.Thread(target=write, name="localguide-cache-write")
    with _lock:
        _pending[path] = (thread, arrays)
    thread.start()


def flush() -> None:
    """Wait until every background cache write has finished."""
    while True:
        with _lock:
            threads = [t for t, _ in _pending.values()]
        if not threads:
            return
        for t in threads:
            t.join()


def _warn(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)
