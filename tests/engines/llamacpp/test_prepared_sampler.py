"""The prepared block: a guide's mask computed before the sample, applied by native callbacks.

Guides without an Index (grammars, healing, triggers) take this path once the kernels are
compiled; these tests hold it to its plain-Python twin, to the Python-callback path it
replaced (same tokens for the same seed, on both models), and to its errors.
"""

import ctypes

import numpy as np
import pytest

import localguide
from localguide.engines.llamacpp import native_kernels as nk
from localguide.engines.llamacpp import sampler as sampler_mod
from localguide.engines.llamacpp.sampler import GuideSampler, SamplerChain, Sampling
from localguide.protocol import Mask, MaskKind

from test_native_sampler import PythonOnly, candidates


def _block(kind: int, data: np.ndarray) -> np.ndarray:
    return np.array([kind, data.ctypes.data, len(data), -1, 0], np.int64)


def _masks(n: int, rng):
    """A mask of each kind over ``n`` tokens (dense and sparse), and the ids each allows."""
    for density in (0.02, 0.5, 0.97):
        allowed = np.flatnonzero(rng.random(n) < density).astype(np.int32)
        bits = np.zeros((n + 63) // 64, np.uint64)
        np.bitwise_or.at(bits, allowed // 64, np.uint64(1) << (allowed % 64).astype(np.uint64))
        excluded = np.setdiff1d(np.arange(n, dtype=np.int32), allowed)
        yield MaskKind.ALLOWED, allowed, allowed
        yield MaskKind.EXCLUDED, excluded, allowed
        yield MaskKind.BITS, bits, allowed


def _kept(data, header) -> np.ndarray:
    rows = data[: header.size]
    return np.sort(rows[np.isfinite(rows[:, 1:2].view(np.float32)[:, 0]), 0])


@pytest.mark.parametrize("apply", [nk.prepared_apply, nk.py_prepared_apply], ids=["kernel", "twin"])
def test_prepared_apply_keeps_exactly_the_mask(vocab, apply):
    rng = np.random.default_rng(7)
    for kind, mask, allowed in _masks(vocab.size, rng):
        data, header = candidates(vocab.size, rng)
        block = _block(int(kind), mask)
        apply(block, ctypes.addressof(header))
        assert block[nk.P_ERROR] == 0, kind
        assert np.array_equal(_kept(data, header), allowed), kind


@pytest.mark.parametrize("apply", [nk.prepared_apply, nk.py_prepared_apply], ids=["kernel", "twin"])
def test_prepared_apply_flags_what_it_cannot_apply(apply):
    """An empty mask, a missing one or an array out of id order is flagged; an empty array
    (which llama.cpp aborts on) is never left behind."""
    rng = np.random.default_rng(1)
    n = 300
    for kind, mask in ((MaskKind.BITS, np.zeros(5, np.uint64)), (MaskKind.ALLOWED, np.zeros(0, np.int32))):
        data, header = candidates(n, rng)
        block = _block(int(kind), mask)
        apply(block, ctypes.addressof(header))
        assert block[nk.P_ERROR] == nk.ERROR_EMPTY and header.size == n
    data, header = candidates(n, rng)
    block = _block(-1, np.zeros(1, np.int32))
    apply(block, ctypes.addressof(header))
    assert block[nk.P_ERROR] == nk.ERROR_UNPREPARED and header.size == n
    data, header = candidates(n, rng)
    data[[3, 4], 0] = data[[4, 3], 0]  # not llama.cpp's fresh id-ordered array
    block = _block(int(MaskKind.ALLOWED), np.array([3, 10], np.int32))
    apply(block, ctypes.addressof(header))
    assert block[nk.P_ERROR] == nk.ERROR_ORDER and header.size > 0


@pytest.mark.parametrize("accept", [nk.prepared_accept, nk.py_prepared_accept], ids=["kernel", "twin"])
def test_prepared_accept_records_the_token_once(accept):
    mask = np.array([2, 5], np.int32)
    block = _block(int(MaskKind.ALLOWED), mask)
    accept(block, np.int32(5))
    assert block[nk.P_TOKEN] == 5 and block[nk.P_KIND] == -1  # the mask has served
    block = _block(int(MaskKind.ALLOWED), mask)
    block[nk.P_ERROR] = nk.ERROR_ORDER
    accept(block, np.int32(5))
    assert block[nk.P_TOKEN] == -1  # not sampled under the mask: not taken


def test_grammar_guides_take_the_prepared_path(model):
    index = model.compile(grammar="json")
    assert GuideSampler(index.guide()).prepared is not None
    assert GuideSampler(localguide.compile_regex(r"\d+", model.vocabulary).guide()).block is not None


@pytest.mark.parametrize("grammar", ["json", "sql"])
def test_prepared_path_samples_as_the_python_callbacks(model, monkeypatch, grammar):
    """Same seed, same tokens: the prepared block and the Python callbacks sample alike, at
    temperature 1, budget-aware or not."""
    index = model.compile(grammar=grammar)
    prompt = model.tokenize_prompt("Write one example:\n")
    runs = {}
    for path in ("prepared", "python"):
        if path == "python":
            monkeypatch.setattr(sampler_mod, "_prepared_ready", lambda: False)
        runs[path] = [list(model.generate_tokens(prompt, index.guide(max_tokens=budget), 24,
                                                 Sampling(temperature=1.0, seed=seed)))
                      for seed in range(3) for budget in (None, 24)]
    assert runs["prepared"] == runs["python"]
    for tokens in runs["prepared"]:
        assert tokens


class EmptyMask(PythonOnly):
    """A guide whose mask allows nothing (a broken guide): an error, never an abort."""

    def mask(self):
        return Mask(MaskKind.BITS, np.zeros((self._g.index.vocab_size + 63) // 64, np.uint64))


@pytest.mark.parametrize("prepared", [True, False])
def test_a_mask_that_allows_nothing_is_an_error_not_an_abort(model, monkeypatch, prepared):
    if not prepared:
        monkeypatch.setattr(sampler_mod, "_prepared_ready", lambda: False)
    guide = EmptyMask(model.compile(grammar="json").guide())
    model.llama.eval(model.llama.tokenize(b"Hello"))
    try:
        with SamplerChain(Sampling(temperature=0.8, seed=1), guide) as chain:
            assert (chain.guide_sampler.prepared is not None) == prepared
            with pytest.raises(RuntimeError, match="allows no token"):
                chain.sample(model.llama.ctx)
    finally:
        model.llama.reset()


def test_applied_without_prepare_is_an_error(model):
    import llama_cpp

    from localguide.errors import LocalguideError

    sampler = GuideSampler(model.compile(grammar="json").guide())
    n = model.vocabulary.size
    data, header = candidates(n, np.random.default_rng(0))
    arr = ctypes.cast(ctypes.pointer(header), ctypes.POINTER(llama_cpp.llama_token_data_array))
    try:
        llama_cpp.llama_sampler_apply(sampler.pointer, arr)
        assert header.size == n  # left as it was
        with pytest.raises(LocalguideError, match="without prepare"):
            sampler.sync()
    finally:
        llama_cpp.llama_sampler_free(sampler.pointer)


def test_the_address_memo_is_bounded():
    """Mask addresses are kept for the arrays guides hand out again, within entries and bytes."""
    sampler_mod._ADDRESSES.clear()
    sampler_mod._addresses_bytes = 0
    big = [np.zeros(300_000, np.int32) for _ in range(40)]  # 1.2 MB each
    small = [np.zeros(700, np.uint64) for _ in range(2000)]
    for a in big + small:
        got = sampler_mod._address(MaskKind.ALLOWED if a.dtype == np.int32 else MaskKind.BITS, a)
        assert got[3] == a.ctypes.data and got[4] == len(a)
        assert len(sampler_mod._ADDRESSES) <= sampler_mod._ADDRESSES_MAX
        assert sum(g[1].nbytes for g in sampler_mod._ADDRESSES.values()) <= sampler_mod._ADDRESSES_MAX_BYTES
    assert sampler_mod._ADDRESSES.get(id(small[-1]))[0] is small[-1]  # the last one is kept
    converted = sampler_mod._address(MaskKind.ALLOWED, np.arange(5, dtype=np.int64)[::-1])
    assert converted[1].dtype == np.int32 and converted[1].flags.c_contiguous
