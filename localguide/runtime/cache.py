"""Disk cache of compiled arrays: one file per key, written atomically.

A file is a small JSON header (names, dtypes, shapes, offsets, and a digest of the
data) followed by the raw arrays, each 64-byte aligned, so that large arrays are
memory-mapped on load instead of copied. Every load checks the digest of the whole data
first: the wrapping sum and the XOR of its 64-bit words (about 15 GB/s here; any single
flipped bit changes both). A damaged array is a corrupt file, rebuilt with a warning,
never a wrong mask or a native read out of bounds. Files are replaced, never
rewritten in place (a file truncated under a running process would take the mapped
pages away from it, as with any memory-mapped file).

The directory is ``$LOCALGUIDE_CACHE_DIR`` or the user's cache directory. A file
that cannot be read is rebuilt, with a single warning per process. The directory is
bounded: past ``$LOCALGUIDE_CACHE_MAX_BYTES`` (2 GiB by default) the files used least
recently go (a load marks a file used), checked after a write at most once a minute; a
``.tmp`` file older than an hour (a write whose process died) goes too. ``info()`` and
``clear()`` are ``localguide cache info`` and ``localguide cache clear``. Large files are
written by a background thread, so a fresh compile returns as soon as it is built;
until the file is on disk, the same process is served the arrays from memory, and
the interpreter waits for the writes at exit (``flush()`` waits now).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from .._version import __version__

_warned = False
_BACKGROUND_BYTES = 1 << 20  # smaller files are written at once: it costs less than a thread
_pending: dict[Path, tuple[threading.Thread, dict | None]] = {}  # arrays None: being computed
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
    return cache_dir() / f"{kind}-{h.hexdigest()[:32]}{SUFFIX}"


SUFFIX = ".lgarrays"
_MAGIC = b"LGARRAY3"  # (3: the header holds the data's digest)
_ALIGN = 64
_MMAP_BYTES = 1 << 20  # smaller arrays are read into memory: mapping them costs more


class CorruptFileError(ValueError):
    """A cache file that is not in this format, or is cut short."""


class StaleFileError(CorruptFileError):
    """A cache file of an earlier format: replaced without a warning."""


def _layout(arrays: dict[str, np.ndarray]) -> tuple[bytes, list[np.ndarray], str]:
    """(header bytes, arrays to write after it, in order, the data's digest)."""
    entries, data, offset = [], [], 0
    for name, a in arrays.items():
        a = np.asarray(a)
        a = a if a.flags.c_contiguous else a.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
        if a.dtype.hasobject:
            raise TypeError(f"cannot cache an object array ({name})")
        entries.append([name, a.dtype.str, list(a.shape), offset])
        data.append(a)
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    digest = _digest_of(data)
    body = json.dumps({"arrays": entries, "data_bytes": offset, "digest": digest}).encode()
    head = len(_MAGIC) + 8 + len(body)
    pad = -head % _ALIGN
    return _MAGIC + (head + pad).to_bytes(8, "little") + body + b" " * pad, data, digest


def _write(f, arrays: dict[str, np.ndarray]) -> str:
    """Write the file; its data's digest."""
    header, data, digest = _layout(arrays)
    f.write(header)
    for a in data:
        f.write(memoryview(a.reshape(-1)).cast("B"))
        f.write(b"\0" * (-a.nbytes % _ALIGN))
    return digest


def _read(path: Path) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        magic = f.read(len(_MAGIC))
        if magic != _MAGIC:
            if magic.startswith(b"LGARRAY"):
                raise StaleFileError("an earlier format")
            raise CorruptFileError("not a localguide cache file")
        start = int.from_bytes(f.read(8), "little")
        try:
            header = json.loads(f.read(start - len(_MAGIC) - 8))
        except (ValueError, UnicodeDecodeError):
            raise CorruptFileError("unreadable header") from None
        size = os.fstat(f.fileno()).st_size
        if not isinstance(header, dict) or size != start + header.get("data_bytes", -1):
            raise CorruptFileError("cut short or padded")
        # One read-only mapping of the whole file: the check reads it once, large arrays stay on it.
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > start else b""
        st = os.fstat(f.fileno())
        known = (st.st_dev, st.st_ino)
        if _verified.get(known) != (size, header.get("digest")):  # (this process wrote or checked it: no)
            data = memoryview(mapped)[start:] if size > start else memoryview(b"")
            try:
                if _digest(data) != header.get("digest"):
                    raise CorruptFileError("its data does not match its checksum")
            finally:
                data.release()
            _verified[known] = (size, header.get("digest"))
        _opened.identity = known + (size, header.get("digest"))
        out, end = {}, header["data_bytes"]
        for name, dtype, shape, offset in header["arrays"]:
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            nbytes = dt.itemsize * count
            if count < 0 or offset < 0 or offset + nbytes > end:
                raise CorruptFileError(f"array {name} lies outside the data")
            if nbytes == 0:
                out[name] = np.empty(shape, dt)
                continue
            a = np.frombuffer(mapped, dt, count, start + offset).reshape(shape)
            out[name] = a if nbytes >= _MMAP_BYTES else a.copy()
        return out


# Files this process wrote or checked, by (device, inode): (size, digest). A file replaced since has
# another inode; one damaged in place under a running process would change its mapped pages anyway.
_verified: dict = {}


# Files whose values this process wrote, or checked and accepted (``load_checked(..., trusting=True)``),
# by (device, inode, size, digest): a caller may skip checking them again. The identity is that of
# the file ``_read`` opened (``_opened``, per thread), never of a later ``stat``.
_accepted: set = set()
_opened = threading.local()


def _digest(data) -> str:
    """The wrapping sum and the XOR of ``data``'s 64-bit words (its length a multiple of 64)."""
    words = np.frombuffer(data, np.uint64)
    if len(words) == 0:
        return "0:0"
    return f"{int(words.sum(dtype=np.uint64)):x}:{int(np.bitwise_xor.reduce(words)):x}"


def _digest_of(arrays: list[np.ndarray]) -> str:
    """``_digest`` of the data as ``_write`` lays it out (each array padded to 64 bytes)."""
    total = x = 0
    for a in arrays:
        raw = memoryview(a.reshape(-1)).cast("B")
        if a.nbytes % 8:
            raw = bytes(raw) + b"\0" * (-a.nbytes % 8)  # (the padding's zero bytes add nothing)
        if len(raw):
            words = np.frombuffer(raw, np.uint64)
            total = (total + int(words.sum(dtype=np.uint64))) & 0xFFFFFFFFFFFFFFFF
            x ^= int(np.bitwise_xor.reduce(words))
    return f"{total:x}:{x:x}"


def save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically (readers never see a partial file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                digest = _write(f, arrays)
                f.flush()
                st = os.fstat(f.fileno())
            os.replace(tmp, path)
            _verified[(st.st_dev, st.st_ino)] = (st.st_size, digest)
            _accepted.add((st.st_dev, st.st_ino, st.st_size, digest))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:  # a read-only or full disk costs speed, never correctness
        _warn(f"localguide: could not write cache file {path} ({e}); continuing without it")
        return
    _maybe_prune(path.parent)


# -- the directory's bound ----------------------------------------------------------------------

DEFAULT_MAX_BYTES = 2 << 30
TMP_AGE = 3600.0  # seconds: an older .tmp file is a write whose process died
_last_prune = 0.0


def max_bytes() -> int:
    """The directory's bound: ``$LOCALGUIDE_CACHE_MAX_BYTES`` (bytes), else 2 GiB."""
    text = os.environ.get("LOCALGUIDE_CACHE_MAX_BYTES", "")
    try:
        return max(0, int(text)) if text.strip() else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


def _files(folder: Path) -> list[tuple[Path, float, int]]:
    """(path, last use, bytes) of the cache files in ``folder``."""
    out = []
    for p in folder.glob(f"*{SUFFIX}"):
        try:
            st = p.stat()
        except OSError:
            continue
        out.append((p, st.st_mtime, st.st_size))
    return out


def _maybe_prune(folder: Path) -> None:
    global _last_prune
    import time

    now = time.monotonic()
    if now - _last_prune < 60.0:
        return
    _last_prune = now
    try:
        prune(folder)
    except OSError:
        pass


def prune(folder: Path | None = None, limit: int | None = None) -> int:
    """Remove stale ``.tmp`` files, then the least recently used files until the folder holds at
    most ``limit`` bytes (default ``max_bytes()``; files this process is writing stay). The bytes removed."""
    import time

    folder = folder or cache_dir()
    limit = max_bytes() if limit is None else limit
    removed = 0
    for p in folder.glob("*.tmp"):
        try:
            st = p.stat()
            if time.time() - st.st_mtime > TMP_AGE:
                p.unlink()
                removed += st.st_size
        except OSError:
            pass
    files = sorted(_files(folder), key=lambda f: f[1])
    total = sum(size for _, _, size in files)
    with _lock:
        busy = set(_pending)
    for p, _, size in files:
        if total <= limit:
            break
        if p in busy:
            continue
        try:
            p.unlink()
        except OSError:
            continue
        total -= size
        removed += size
    return removed


def info() -> dict:
    """What the cache holds: its folder, its files and bytes (by kind), the bound, the kernels' bytes."""
    folder = cache_dir()
    kinds: dict[str, list[int]] = {}
    for p, _, size in _files(folder):
        k = kinds.setdefault(p.name.split("-")[0], [0, 0])
        k[0] += 1
        k[1] += size
    kernels = sum(f.stat().st_size for d in _kernel_folders(folder) for f in d.rglob("*") if f.is_file())
    return {"dir": folder, "files": sum(k[0] for k in kinds.values()), "bytes": sum(k[1] for k in kinds.values()),
            "kinds": kinds, "max_bytes": max_bytes(), "kernel_bytes": kernels}


def clear(kernels: bool = False) -> tuple[int, int]:
    """Remove every cache file (and ``kernels``: numba's compiled kernels): (files, bytes) removed."""
    import shutil

    folder = cache_dir()
    n = size = 0
    for p, _, b in _files(folder):
        try:
            p.unlink()
            n, size = n + 1, size + b
        except OSError:
            pass
    for p in folder.glob("*.tmp"):
        try:
            p.unlink()
        except OSError:
            pass
    if kernels:
        size += info()["kernel_bytes"]
        for d in _kernel_folders(folder):
            shutil.rmtree(d, ignore_errors=True)
    return n, size


def _kernel_folders(folder: Path) -> list[Path]:
    """The folders of localguide's compiled kernels: every version's under ``folder``, or with
    ``NUMBA_CACHE_DIR`` set, numba's folders of localguide's sources there."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return [d for d in user_kernel_folders() if d.is_dir()]
    return [folder / "numba"] if (folder / "numba").is_dir() else []


def user_kernel_folders() -> list[Path]:
    """With ``NUMBA_CACHE_DIR`` set, numba's folders there for each package folder holding kernels
    (numba's rule: the folder's name and a hash of its path)."""
    from numba.core import caching

    package = Path(__file__).resolve().parents[1]
    sources = {f.parent for f in package.rglob("*_kernels.py")} | {package / "runtime"}
    root = Path(os.environ["NUMBA_CACHE_DIR"])
    return sorted(root / caching._CacheLocator.get_suitable_cache_subpath(str(d / "x.py")) for d in sources)


def read(path: Path) -> dict[str, np.ndarray]:
    """The arrays stored at ``path``; raises ``FileNotFoundError``, or ``CorruptFileError`` (a
    ``ValueError``) and friends for a damaged file, which stays where it is."""
    return _read(path)


def load(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays stored at ``path``; None if absent. A corrupt file is removed, with a warning."""
    if not path.exists():
        return None
    try:
        arrays = _read(path)
        try:
            os.utime(path)  # (used now: the directory's bound removes the least recently used)
        except OSError:
            pass
        return arrays
    except StaleFileError:
        _unlink(path)
        return None
    except (OSError, ValueError, EOFError, KeyError, TypeError) as e:
        _warn(f"localguide: cache file {path} is corrupt ({type(e).__name__}); rebuilding it")
        try:
            path.unlink()
        except OSError:
            pass
        return None


def cached(path: Path, build: Callable[[], dict[str, np.ndarray]],
           check: Callable[..., bool] = lambda arrays: True, trusting: bool = False) -> dict[str, np.ndarray]:
    """Load the arrays at ``path``, or build and store them. ``check`` rejects a stale or broken load
    (with ``trusting``, it is called as ``check(arrays, trusted)``: see ``load_checked``)."""
    arrays = load_checked(path, check, trusting)
    if arrays is not None:
        return arrays
    arrays = build()
    store(path, arrays)
    return arrays


def store(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path``: at once when small, else in a background thread."""
    if sum(a.nbytes for a in arrays.values()) < _BACKGROUND_BYTES:
        save(path, arrays)
    else:
        _save_in_background(path, arrays)


def load_checked(path: Path, check: Callable[..., bool] = lambda arrays: True,
                 trusting: bool = False) -> dict[str, np.ndarray] | None:
    """The arrays at ``path`` if there and passing ``check`` (else None: a corrupt file is
    reported once and removed). A write still pending in this process is served from
    memory, or waited for while its arrays are being computed (``save_later``). With
    ``trusting``, ``check(arrays, trusted)`` is told whether this process wrote this very file
    or has accepted it before (so large arrays need not be read through again); a file it
    accepts is remembered as accepted."""
    with _lock:
        pending = _pending.get(path)
    if pending is not None:
        if pending[1] is not None:
            return pending[1]
        pending[0].join()
    _opened.identity = None
    arrays = load(path)
    if arrays is not None:
        identity = _opened.identity
        try:
            if trusting:
                ok = check(arrays, identity is not None and identity in _accepted)
            else:
                ok = check(arrays)
            if ok:
                if identity is not None:
                    _accepted.add(identity)
                return arrays
        except (KeyError, ValueError, IndexError, TypeError):  # (a check meeting arrays of the wrong shape)
            pass
        _warn(f"localguide: cache file {path} is corrupt (unexpected content); rebuilding it")
    return None


def save_later(path: Path, make: Callable[[], dict[str, np.ndarray]]) -> None:
    """Compute ``make()`` and store it at ``path``, in a background thread (``flush()`` waits for it).

    For an object that answers before it is complete (a lazy grammar index): its arrays
    are written once it is. An error in ``make`` leaves no file (the next process builds).
    """
    _save_in_background(path, None, make)


def available(path: Path) -> bool:
    """Whether ``cached(path, ...)`` would load rather than build (the file may still be corrupt)."""
    with _lock:
        if path in _pending:
            return True
    return path.exists()


def _save_in_background(path: Path, arrays: dict[str, np.ndarray] | None, make=None) -> None:
    def write():
        try:
            save(path, arrays if make is None else make())
        except Exception as e:  # the caller already has its object: only the file is lost
            _warn(f"localguide: could not prepare cache file {path} ({type(e).__name__}: {e})")
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


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _warn(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)
