"""The grammar kernels, compiled in a background process while a first use goes on without them.

Compiling the grammar kernels takes about a minute on a laptop; numba's disk cache makes it a
once-per-install cost. Until they are compiled, a process does not wait for them: the scanner
comes from its twin (``lexer_kernels.py_scanner_closure``), the subterminal trees and the
unions of groups from numpy (``trees_numpy``), the masks from ``MaskEngine``'s Python walks,
all giving what the kernels give. ``start`` launches one detached process per kernel folder
(``rehearsal.main``) that compiles every grammar kernel on a small grammar
and writes a marker; ``ready`` turns true once the marker is there, and from the next mask on
the process loads the kernels (milliseconds) and takes them.

The warm-up compiles in two parts at once where the machine has the cores: the compiled mask
path (``ready(MASKS)``: the arena kernels and ``earley_masks``, about half of the compile) in a
helper process, everything else in the first; each takes the other's twins meanwhile.

``LOCALGUIDE_COMPILE=foreground`` (``numba_tools.COMPILE_MODE``) compiles them in the process
instead, at their first call.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

from . import numba_tools
from . import oldpaths as _oldpaths

MARKER = "grammar-kernels.done"
LOCK = "grammar-kernels.lock"
LOG = "grammar-kernels.log"
STALE_S = 30 * 60  # a lock older than this is a warm-up that died without removing it
_CHILD_ENV = "_LOCALGUIDE_WARMUP_CHILD"
_PART_ENV = "_LOCALGUIDE_WARMUP_PART"
MASKS, REST = "masks", "rest"  # the compiled mask path; every other grammar kernel
# In a warm-up process: the part it compiles (the other part's kernels are not taken there).
_part = os.environ.get(_PART_ENV) or None

_ready = False
_checked = 0.0
_started = False


# Every grammar kernel that Python calls (their callees are compiled into them), and the sampler's
# that apply grammar masks: named, not imported, so that this service imports no layer above it.
KERNELS = (
    ("localguide.grammar.lexer_kernels", "scanner_closure"), ("localguide.grammar.trees_kernels", "grammar_trees"),
    ("localguide.grammar.trees_kernels", "union_groups"), ("localguide.grammar.trees_kernels", "union_bits"),
    ("localguide.grammar.arena_kernels", "earley_intern"), ("localguide.grammar.arena_kernels", "earley_seed"),
    ("localguide.grammar.arena_kernels", "earley_rehash"), ("localguide.grammar.arena_kernels", "earley_restore"),
    ("localguide.engines.llamacpp.candidates_kernels", "mask_candidates_bits"),
    ("localguide.engines.llamacpp.candidates_kernels", "gather_bits"),
    ("localguide.engines.llamacpp.candidates_kernels", "gather_top"),
    ("localguide.grammar.masks_kernels", "earley_masks"),
    ("localguide.engines.llamacpp.native_kernels", "prepared_apply"),
    ("localguide.engines.llamacpp.native_kernels", "prepared_accept"),
)
_MARKER_KERNEL = ("localguide.grammar.masks_kernels", "earley_masks")  # (the folder numba keeps them in)


def _kernel(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def kernels() -> list:
    """The dispatchers of ``KERNELS``."""
    return [_kernel(m, n) for m, n in KERNELS]


def ready(part: str = REST) -> bool:
    """Whether this process takes the grammar kernels (of ``part``: ``MASKS`` asks for the compiled
    mask path): in the foreground mode (or ``kernels_only``), when they are loaded here, or once
    the warm-up's marker says numba's cache holds them all (looked at every quarter of a second
    at most). A warm-up process takes those of the part it compiles, and no others."""
    global _ready, _checked
    if _part is not None:
        return part == _part
    if _ready or numba_tools._KERNELS_ONLY:
        return True
    now = time.monotonic()
    if now - _checked < 0.25:
        return False
    _checked = now
    ks = kernels()
    if all(k.signatures for k in ks) or _marker_ok(ks):
        _ready = True
    return _ready


def _folder() -> Path | None:
    """Where numba keeps the grammar kernels (beside ``earley_masks``'s index)."""
    index = numba_tools.cache_index(_kernel(*_MARKER_KERNEL))
    return Path(index).parent if index else None


def _stamp(ks) -> str:
    """The kernels' source files as numba sees them (a new checkout or edit makes a new stamp)."""
    from .numba_cache import kernels_stamp

    files = sorted({k.py_func.__code__.co_filename for k in ks} | {numba_tools.__file__})
    parts = [kernels_stamp()]
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            return ""
        parts.append(f"{f}:{st.st_mtime_ns}:{st.st_size}")
    return "\n".join(parts)


def _marker_ok(ks) -> bool:
    folder = _folder()
    if folder is None:
        return False
    try:
        text = (folder / MARKER).read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return text == _stamp(ks) and all(numba_tools.compiled(k) for k in ks)


def start() -> None:
    """Compile the grammar kernels in a background process: once per process, unless they are
    ready, the foreground mode is on, or another process is compiling them already."""
    global _started
    if _started or numba_tools.COMPILE_MODE != "background" or os.environ.get(_CHILD_ENV) or ready():
        return
    _started = True
    folder = _folder()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = folder / LOCK
        if not _take(lock):
            return
        from .numba_cache import kernels_dir

        env = dict(os.environ, _LOCALGUIDE_WARMUP_CHILD="1", _LOCALGUIDE_KERNELS_DIR=str(kernels_dir()))
        code = "import sys; from localguide.engines.llamacpp.rehearsal import main; sys.exit(main(sys.argv[1:]))"
        with open(folder / LOG, "wb") as log:
            # (run from the folder that holds this localguide: the child imports this one)
            p = subprocess.Popen([sys.executable, "-c", code, str(lock)], cwd=Path(__file__).resolve().parents[2],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True, close_fds=True)
        lock.write_text(str(p.pid), "utf-8")
    except OSError:
        pass  # (a read-only cache folder: the first uses stay on the numpy and Python paths)


def _take(lock: Path) -> bool:
    """Create ``lock``; a lock whose process is gone, or that is older than ``STALE_S``, is taken over."""
    for _ in range(2):
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            try:
                old = time.time() - lock.stat().st_mtime > STALE_S
                pid = int(lock.read_text("utf-8") or 0)
            except (OSError, ValueError):
                old, pid = True, 0
            if not old and (pid == 0 or _alive(pid)):
                return False  # compiling now (or just starting)
            lock.unlink(missing_ok=True)
    return False


def _alive(pid: int) -> bool:
    if os.name == "nt":
        return True  # (os.kill would end it: the lock's age decides)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


__getattr__ = _oldpaths.getattr_of(__name__)  # (names that moved elsewhere)
