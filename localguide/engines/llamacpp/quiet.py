"""Silence llama.cpp while it reads or loads a model (its log lines are not the user's business).

llama.cpp logs through a callback: llama-cpp-python's prints each line to ``sys.stderr`` (an app's
replaced ``sys.stderr`` included) at a level it maps from an older ggml enum, so a warning passes
``Llama(verbose=False)`` as an error. Some of its C code writes to fd 2 directly. While any
thread is inside ``quiet_llama()``, the callback drops every line and fd 2 points at /dev/null;
the first thread in saves both, the last one out restores them.
"""

from __future__ import annotations

import ctypes
import os

from ...runtime.held import Held

_drop = None  # the dropping callback (llama.cpp holds a pointer to it: kept alive here)


def _silence() -> tuple:
    global _drop
    import llama_cpp

    log = None
    if hasattr(llama_cpp, "llama_log_get"):  # (an older llama-cpp-python may lack the getter: fd 2 only)
        if _drop is None:
            _drop = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
        callback, user_data = llama_cpp.llama_log_callback(), ctypes.c_void_p()
        llama_cpp.llama_log_get(ctypes.byref(callback), ctypes.byref(user_data))
        llama_cpp.llama_log_set(_drop, None)
        log = (callback, user_data)
    try:
        fd = os.dup(2)
    except OSError:
        fd = None
    else:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
    return fd, log


def _restore(saved: tuple) -> None:
    import llama_cpp

    fd, log = saved
    if fd is not None:
        os.dup2(fd, 2)
        os.close(fd)
    if log is not None:
        llama_cpp.llama_log_set(log[0], log[1])


# Run the block with llama.cpp's logging silenced (re-entrant, and across threads); while inside,
# ``_held.saved`` is (the fd 2 copy or None, the log callback and its user data, or None).
quiet_llama = _held = Held(_silence, _restore)


def stderr_fd() -> int | None:
    """A new fd on what fd 2 is outside ``quiet_llama()`` (the caller closes it), or None."""
    with _held.lock:
        saved = _held.saved
        try:
            return os.dup(saved[0] if saved is not None and saved[0] is not None else 2)
        except OSError:
            return None
