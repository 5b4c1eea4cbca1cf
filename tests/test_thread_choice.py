"""The thread choice (a pure function of what the caller set and what the machine reports) and
the wait policy llama.cpp's OpenMP really runs with, read back from libgomp in fresh processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from localguide.runtime.threads import Threads, choose


@pytest.mark.parametrize("cpus, passive, expected", [
    (1, True, (1, 1)), (2, True, (1, 2)), (8, True, (4, 8)), (16, True, (8, 16)),
    (1, False, (1, 1)), (2, False, (1, 1)), (8, False, (4, 4)), (3, False, (1, 1)),
])
def test_defaults_by_cpus_and_wait_policy(cpus, passive, expected):
    t = choose(cpus=cpus, passive=passive)
    assert (t.n_threads, t.n_threads_batch) == expected
    assert t.why


def _pair(t: Threads) -> tuple[int, int]:
    return t.n_threads, t.n_threads_batch


def test_what_the_caller_sets_stands():
    assert _pair(choose(3, 5, cpus=2, passive=False)) == (3, 5)
    assert _pair(choose(3, None, cpus=8, passive=False)) == (3, 3)
    assert _pair(choose(3, None, cpus=8, passive=True)) == (3, 8)
    assert _pair(choose(None, 7, cpus=8, passive=False)) == (4, 7)
    assert _pair(choose(6, None, cpus=2, passive=True)) == (6, 6)  # (never fewer batch threads than one token's)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_a_bad_count_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="positive integer"):
        choose(bad, cpus=2, passive=True)
    with pytest.raises(ValueError, match="n_threads_batch"):
        choose(None, bad, cpus=2, passive=True)


@given(st.one_of(st.none(), st.integers(1, 64)), st.one_of(st.none(), st.integers(1, 64)),
       st.integers(1, 256), st.booleans())
def test_choice_is_pure_and_sane(nt, ntb, cpus, passive):
    a = choose(nt, ntb, cpus=cpus, passive=passive)
    assert a == choose(nt, ntb, cpus=cpus, passive=passive)
    assert isinstance(a, Threads) and a.n_threads >= 1 and a.n_threads_batch >= 1
    assert a.n_threads == (nt if nt is not None else max(1, cpus // 2))
    if ntb is not None:
        assert a.n_threads_batch == ntb
    elif not passive:
        assert a.n_threads_batch == a.n_threads  # spinning workers: no batch on more threads
    else:
        assert a.n_threads_batch == max(a.n_threads, cpus)


_PROBE = r"""
import ctypes, os, sys
import localguide
from localguide import threads
model = localguide.load(sys.argv[1], n_ctx=256)
print("ENV", os.environ.get("OMP_WAIT_POLICY"), model.threads.n_threads, model.threads.n_threads_batch, flush=True)
ctypes.CDLL("libgomp.so.1").omp_display_env(1)  # (verbose: the spin count tells the policy)
"""


def _probe(smollm2_path, env: dict, first: str = "") -> tuple[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    e.update(env)
    r = subprocess.run([sys.executable, "-c", first + _PROBE, str(smollm2_path)], env=e, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    env_line = next(line for line in r.stdout.splitlines() if line.startswith("ENV"))
    policy = next(line for line in r.stderr.splitlines() if "GOMP_SPINCOUNT" in line)
    return env_line, policy


@pytest.fixture
def libgomp():
    import ctypes.util

    if not sys.platform.startswith("linux") or ctypes.util.find_library("gomp") is None:
        pytest.skip("llama.cpp's OpenMP here is not libgomp")


def test_llama_cpp_runs_with_passive_workers_and_the_environment_is_the_users_again(smollm2_path, libgomp):
    env_line, policy = _probe(smollm2_path, {})
    assert "'0'" in policy  # (passive: workers never spin)
    cpus = len(os.sched_getaffinity(0))
    assert env_line == f"ENV None {max(1, cpus // 2)} {cpus}"  # (children inherit no OMP_WAIT_POLICY)


def test_the_users_wait_policy_stands(smollm2_path, libgomp):
    env_line, policy = _probe(smollm2_path, {"OMP_WAIT_POLICY": "active"})
    assert "'30000000000'" in policy  # (active: libgomp's long spin)
    nt = max(1, len(os.sched_getaffinity(0)) // 2)
    assert env_line == f"ENV active {nt} {nt}"  # spinning: batches on as many threads as one token


def test_llama_cpp_loaded_first_keeps_its_policy_and_batches_get_one_tokens_threads(smollm2_path, libgomp):
    env_line, policy = _probe(smollm2_path, {}, first="import llama_cpp\n")
    assert "'300000'" in policy  # (libgomp's default: spin, then sleep)
    nt = max(1, len(os.sched_getaffinity(0)) // 2)
    assert env_line == f"ENV None {nt} {nt}"
