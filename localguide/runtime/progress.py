"""What localguide is doing when it takes a while: named stages, for logging and the CLI's status line.

Slow steps run inside ``stage("building the index")``; numba compiling one of localguide's
kernels is a stage too ("compiling localguide's kernels for this CPU, once"), seen through
numba's compile events, so it is reported only when it really compiles (never for a load
from the disk cache). Each stage is logged on the ``localguide`` logger at INFO when it
starts and at DEBUG when it ends; the library never prints. ``current()`` is the innermost
stage in progress in any thread (the CLI shows it after half a second).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager

logger = logging.getLogger("localguide")
COMPILING = "compiling localguide's kernels for this CPU, once"

_lock = threading.Lock()
_active: list[list] = []  # [what, since], innermost last, across threads


def current() -> tuple[str, float] | None:
    """(the innermost stage in progress, seconds it has run), or None."""
    with _lock:
        if not _active:
            return None
        what, since = _active[-1]
    return what, time.monotonic() - since


def _enter(what: str) -> list:
    entry = [what, time.monotonic()]
    with _lock:
        _active.append(entry)
    logger.info("%s", what)
    return entry


def _leave(entry: list) -> None:
    with _lock:
        for i in range(len(_active) - 1, -1, -1):
            if _active[i] is entry:
                del _active[i]
                break
    logger.debug("%s: done in %.2f s", entry[0], time.monotonic() - entry[1])


@contextmanager
def stage(what: str):
    """Run the block as the stage ``what`` (reported while it runs)."""
    entry = _enter(what)
    try:
        yield
    finally:
        _leave(entry)


def watch_kernel_compiles() -> None:
    """Report numba compiling localguide's kernels as the ``COMPILING`` stage (installed once, at import)."""
    from numba.core import event

    class _Compiles(event.Listener):
        def __init__(self):
            self.entries = threading.local()

        def _ours(self, ev) -> bool:
            d = (ev.data or {}).get("dispatcher")
            return getattr(getattr(d, "py_func", None), "__module__", "").startswith("localguide.")

        def on_start(self, ev):
            stack = self.entries.__dict__.setdefault("stack", [])
            outermost = not any(stack)  # a kernel's callees compile inside it: one stage for all
            stack.append(_enter(COMPILING) if outermost and self._ours(ev) else None)

        def on_end(self, ev):
            stack = self.entries.__dict__.setdefault("stack", [])
            entry = stack.pop() if stack else None
            if entry is not None:
                _leave(entry)

    event.register("numba:compile", _Compiles())
