"""The cycle collector is paused during compiles and restored exactly once."""

from __future__ import annotations

import gc
import threading

from localguide.runtime.gcpause import paused


def test_nested_and_restored():
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer one is still compiling
    assert gc.isenabled()


def test_restored_after_an_error():
    try:
        with paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_concurrent_compiles_reenable_once_at_the_end():
    inside, release = threading.Event(), threading.Event()

    def other():
        with paused():
            inside.set()
            release.wait(5)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(5)
    with paused():
        pass
    assert not gc.isenabled()  # the other thread's compile is still running
    release.set()
    t.join()
    assert gc.isenabled()


def test_compiles_leave_the_collector_on(smollm2_vocab):
    import localguide

    localguide.compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}}, smollm2_vocab)
    localguide.compile_grammar("arithmetic", smollm2_vocab)
    assert gc.isenabled()
