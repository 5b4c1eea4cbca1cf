"""How many threads llama.cpp decodes on, and how its OpenMP workers wait: defaults that hold
when another program wants a core.

llama.cpp's CPU backend splits each operation of a decode over its threads and meets them at a
barrier after it, hundreds of times a decode. OpenMP's workers spin at a barrier (libgomp's
default), so where another process holds the core of a worker the others spin until the
scheduler hands that core back: on 2 cores with one busy neighbour, a decode on 2 threads is
slower than on 1. With ``OMP_WAIT_POLICY=PASSIVE`` a waiting worker sleeps instead: beside a busy
neighbour a decode costs about what it does on 1 thread, and a quiet machine loses little. So:

- ``prepare()`` (from ``localguide/__init__``, before anything loads llama.cpp) asks libgomp for
  the passive policy through the environment, unless the user set ``OMP_WAIT_POLICY`` or
  ``GOMP_SPINCOUNT`` (theirs stands) or OpenMP was loaded already (it read the environment
  then); ``loaded()`` takes the variable back out once llama.cpp has loaded, so that child
  processes inherit the user's environment, not ours.
- ``choose()`` (pure) picks the threads: one-token decodes on half the CPUs (llama-cpp-python's
  default, which leaves the other half to the rest of the machine), batches on all of them
  where workers wait passively, else on as many as one-token decodes (spinning workers under
  contention are the collapse above; llama.cpp's own threadpool, without OpenMP, spins too).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
PASSIVE = "PASSIVE"

# What ``prepare`` found and did: "localguide" (set the policy), "user" (a wait variable of the
# user's stands), "late" (OpenMP or llama.cpp was loaded before localguide), None (not yet).
_prepared: str | None = None
_user_env: dict[str, str] = {}


@dataclass(frozen=True)
class Threads:
    """The threads of one-token decodes and of batches, and why (for ``localguide info``)."""

    n_threads: int
    n_threads_batch: int
    why: str


def cpus() -> int:
    """The CPUs this process may run on (its affinity; a container's limit shows there)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def choose(n_threads: int | None = None, n_threads_batch: int | None = None, *, cpus: int,
           passive: bool) -> Threads:
    """The threads for a model: what the caller set stands; the rest from ``cpus`` and whether
    llama.cpp's workers wait passively (``passive``)."""
    for name, value in (("n_threads", n_threads), ("n_threads_batch", n_threads_batch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    half = max(1, cpus // 2)
    nt = n_threads if n_threads is not None else half
    if n_threads_batch is not None:
        return Threads(nt, n_threads_batch, "both as given" if n_threads is not None else
                       f"batches as given; one token on half of the {cpus} CPUs")
    if passive:
        why = (f"one token on {'the given' if n_threads is not None else f'half of the {cpus} CPUs:'} {nt}, "
               f"batches on all {cpus}: OpenMP's workers wait passively, so a busy core costs a batch "
               "little")
        return Threads(nt, max(nt, cpus), why)
    why = (f"{'as given' if n_threads is not None else f'half of the {cpus} CPUs'}, batches alike: "
           "llama.cpp's workers spin while they wait, and a batch on more threads than that collapses "
           "when another program holds a core")
    return Threads(nt, nt, why)


def _openmp_loaded() -> bool | None:
    """Whether libgomp (or another OpenMP runtime) is mapped into this process; None where the
    process's maps cannot be read."""
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = f.read()
    except OSError:
        return None
    return any(name in maps for name in (b"libgomp", b"libomp", b"libiomp"))


def prepare() -> None:
    """Ask OpenMP for the passive wait policy before llama.cpp loads it (see the module)."""
    global _prepared
    if _prepared is not None:
        return
    _user_env.update({k: os.environ[k] for k in WAIT_VARS if k in os.environ})
    if _user_env:
        _prepared = "user"
    elif "llama_cpp" in sys.modules or _openmp_loaded():
        _prepared = "late"
    else:
        os.environ["OMP_WAIT_POLICY"] = PASSIVE
        _prepared = "localguide"


def loaded() -> None:
    """llama.cpp is loaded: the policy ``prepare`` set has been read; the environment is the
    user's again."""
    if _prepared == "localguide" and os.environ.get("OMP_WAIT_POLICY") == PASSIVE:
        del os.environ["OMP_WAIT_POLICY"]


def passive() -> tuple[bool, str]:
    """(whether llama.cpp's workers wait passively, what says so)."""
    openmp = _openmp_loaded()
    if openmp is False and "llama_cpp" in sys.modules:
        return False, "llama.cpp's own threadpool (no OpenMP in this build): its workers spin"
    if _prepared == "localguide":
        return True, "OMP_WAIT_POLICY=PASSIVE, set by localguide before llama.cpp loaded OpenMP"
    if _prepared == "user":
        policy = _user_env.get("OMP_WAIT_POLICY", "").strip().upper()
        said = ", ".join(f"{k}={v}" for k, v in _user_env.items())
        if policy == PASSIVE:
            return True, f"yours: {said}"
        return False, f"yours: {said} (workers spin)"
    return False, "OpenMP was loaded before localguide, with its default policy (workers spin)"


def for_model(n_threads: int | None = None, n_threads_batch: int | None = None) -> Threads:
    """``choose`` for this process and machine."""
    return choose(n_threads, n_threads_batch, cpus=cpus(), passive=passive()[0])
