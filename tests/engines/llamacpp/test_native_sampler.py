"""The native sampler callbacks (numba cfuncs) agree with the Python Guide, token by token."""

import ctypes

import numpy as np
import pytest

import localguide
from localguide.index import native_block
from localguide.engines.llamacpp import native_kernels
from localguide.errors import TokenNotAllowedError

PATTERNS = [r"[a-z]+( [a-z]+)*", r"\d{4}-\d{2}-\d{2}", r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?", r"(ab|cd)*x?"]


class TokenDataArray(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t),
                ("selected", ctypes.c_int64), ("sorted", ctypes.c_bool)]


def candidates(vocab_size, rng):
    """A fresh llama.cpp candidate array in id order, with random logits."""
    data = np.zeros((vocab_size, 3), np.int32)
    data[:, 0] = np.arange(vocab_size)
    data[:, 1:2].view(np.float32)[:, 0] = rng.standard_normal(vocab_size).astype(np.float32)
    header = TokenDataArray(data.ctypes.data, vocab_size, -1, False)
    return data, header


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("budget", [None, 12])
def test_native_callbacks_match_python_guide(vocab, pattern, budget):
    index = localguide.compile_regex(pattern, vocab)
    rng = np.random.default_rng(0)
    for walk in range(5):
        py = index.guide(max_tokens=budget)
        block = py.copy().native_block()
        for _ in range(40):
            allowed = py.allowed_token_ids()
            data, header = candidates(vocab.size, rng)
            native_kernels.block_apply(block, ctypes.addressof(header))
            kept = data[: header.size]
            logits = kept[:, 1:2].view(np.float32)[:, 0]
            native_allowed = np.sort(kept[np.isfinite(logits), 0])
            assert np.array_equal(native_allowed, allowed)
            token = int(rng.choice(allowed))
            py.advance(token)
            native_kernels.block_accept(block, token)
            assert block[native_block.B_ERROR] == 0
            assert block[native_block.B_STATE] == py.state and bool(block[native_block.B_FINISHED]) == py.finished
            if py.finished:
                break


def test_native_accept_flags_disallowed_token(vocab):
    index = localguide.compile_regex(r"\d+", vocab)
    guide = index.guide()
    block = guide.native_block()
    bad = next(t for t in range(vocab.size) if t not in set(guide.allowed_token_ids().tolist()))
    native_kernels.block_accept(block, bad)
    with pytest.raises(TokenNotAllowedError):
        guide.sync_from_block(block)


def test_native_sampler_through_llama_cpp(model):
    """Through llama.cpp's own chain: outputs match at temperature 1, as with the Python path."""
    import re

    for seed in range(4):
        out = model.generate("Number:", regex=r"-?(0|[1-9]\d*)(\.\d+)?", temperature=1.0, seed=seed, max_tokens=12)
        assert re.fullmatch(r"-?(0|[1-9]\d*)(\.\d+)?", out)


@pytest.mark.parametrize("native", [True, False])
def test_guide_after_a_reordering_sampler_is_an_error_not_a_wrong_token(model, native):
    """The guide compacts llama.cpp's fresh id-ordered array in one pass; a sampler that
    reorders candidates before it (here top-k) is reported after that sample, never crashes."""
    import llama_cpp

    from localguide.errors import LocalguideError
    from localguide.engines.llamacpp.sampler import Sampling, SamplerChain

    guide = localguide.compile_regex(r"[a-z]+", model.vocabulary).guide()
    if not native:
        guide = PythonOnly(guide)
    top_k = llama_cpp.llama_sampler_init_top_k(5)
    model.llama.eval(model.llama.tokenize(b"Hello"))
    with SamplerChain(Sampling(temperature=0), guide, extra=[top_k]) as chain:
        with pytest.raises(LocalguideError, match="first in the llama.cpp sampler chain"):
            chain.sample(model.llama.ctx)
    model.llama.reset()


class PythonOnly:
    """A guide that declines the native block: the sampler takes the Python callback path."""

    def __init__(self, guide):
        self._g = guide

    def __getattr__(self, name):
        return getattr(self._g, name)

    def native_block(self):
        return None
