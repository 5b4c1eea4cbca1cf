"""quiet_llama: llama.cpp's logging is silenced while any thread is inside, and restored after."""

from __future__ import annotations

import ctypes
import os
import threading

import llama_cpp
import pytest

from localguide.engines.llamacpp.quiet import quiet_llama, stderr_fd


def _callback() -> int | None:
    callback, user_data = llama_cpp.llama_log_callback(), ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(callback), ctypes.byref(user_data))
    return ctypes.cast(callback, ctypes.c_void_p).value


def _target(fd: int) -> tuple:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


@pytest.mark.skipif(not hasattr(llama_cpp, "llama_log_get"), reason="llama-cpp-python without llama_log_get")
def test_overlapping_threads_restore_the_callback_and_fd_2_once_the_last_leaves():
    before, where = _callback(), _target(2)
    with open(os.devnull, "rb") as f:
        null = _target(f.fileno())
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with quiet_llama():
            a_in.set()
            b_in.wait()
        a_out.set()

    def b():
        a_in.wait()
        with quiet_llama():
            b_in.set()
            a_out.wait()  # A left first: still silenced for B
            seen["inside"] = (_callback(), _target(2))
            fd = stderr_fd()
            seen["outside"] = _target(fd)
            os.close(fd)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["inside"][0] != before and seen["inside"][1] == null
    assert seen["outside"] == where
    assert (_callback(), _target(2)) == (before, where)
