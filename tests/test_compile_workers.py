"""Compile workers (``localguide.server.compile_workers``): a constraint compiled in a worker process
lands in the disk cache, where this process loads it without compiling; a compile's error comes
back as its own type; a compile past its deadline kills its worker, and a fresh one serves the
next compile. One real worker over SmolLM2's vocabulary."""

from __future__ import annotations

import pytest

from localguide.runtime import cache
from localguide.server.compile_workers import CompileTimeout, CompileWorkers
from localguide.constraint import compile_constraint
from localguide.errors import PatternError, SchemaError

SLOW = {"json_schema": {"type": "string", "minLength": 5000, "pattern": "^[a-z ]*$"}}


@pytest.fixture(scope="module")
def workers(smollm2_path):
    w = CompileWorkers(smollm2_path, 1)
    yield w
    w.close()
    assert not w._live


def _files() -> set:
    return {p.name for p in cache.cache_dir().glob(f"*{cache.SUFFIX}")}


def test_a_compile_lands_in_the_disk_cache_and_loads_here(workers, smollm2_vocab, monkeypatch):
    before = _files()
    workers.compile({"regex": "[0-9]{3}-[a-z]{5}"}, timeout=120)
    assert _files() - before  # (the worker wrote it)
    import localguide.index.index as index_module

    def build(*a, **k):
        raise AssertionError("compiled here: the worker's file was not used")

    monkeypatch.setattr(index_module, "build_arrays", build)
    idx = compile_constraint(smollm2_vocab, regex="[0-9]{3}-[a-z]{5}")
    assert idx.n_states > 1


def test_a_compile_error_comes_back_as_its_type(workers):
    with pytest.raises(PatternError, match="MAX_NESTING") as e:
        workers.compile({"regex": "(" * 200 + "a" + ")" * 200}, timeout=120)
    assert e.value.position is not None  # (its attributes too)
    with pytest.raises(SchemaError, match="MAX_MIN_COUNT"):
        workers.compile({"json_schema": {"type": "string", "minLength": 1_000_000_000}}, timeout=120)


def test_a_compile_past_its_deadline_kills_its_worker_and_another_serves(workers):
    (first,) = [w for w in workers._live]
    started = []
    with pytest.raises(CompileTimeout):
        workers.compile(SLOW, timeout=0.5, on_start=lambda: started.append(1))
    assert started == [1]
    assert first.process.wait(5) is not None  # (killed)
    workers.compile({"choice": ["yes", "no", "maybe"]}, timeout=120)  # (waits for the fresh worker)
    assert first not in workers._live and len(workers._live) == 1
