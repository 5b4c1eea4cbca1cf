"""Sampling from a candidate array built from the logits instead of llama.cpp's array of the
whole vocabulary: where the guide allows a few tokens, their records
(``SamplerChain._sample_allowed``); where it allows many and top-k (or greedy) comes first after
it, the k highest allowed logits (``SamplerChain._sample_top``).

Each must sample exactly as the guide sampler inside llama.cpp's chain does: the same tokens for
the same seed, on both models, for every kind of mask it takes (allowed ids, excluded ids, a
grammar's bitset), with and without a token budget; ``gather_bits`` and ``gather_top`` are held
to their twins.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from localguide.engines.llamacpp import candidates_kernels
from localguide.engines.llamacpp import sampler as sampler_mod
from localguide.engines.llamacpp.sampler import SamplerChain, Sampling

from kernel_strategies import SETTINGS, bitset


@SETTINGS
@given(st.integers(1, 700).flatmap(lambda n: st.tuples(
    st.just(n), st.sets(st.integers(0, n - 1), max_size=n), st.integers(0, n), st.integers(0, 2 ** 32 - 1))))
def test_gather_bits_equals_twin(case):
    n, ids, limit, seed = case
    words = bitset(sorted(ids), n)
    logits = np.random.default_rng(seed).normal(size=n).astype(np.float32)
    room = max(limit, 1)
    out = np.zeros(room, sampler_mod._TOKEN_DATA)
    twin = np.zeros(room, sampler_mod._TOKEN_DATA)
    k = candidates_kernels.gather_bits(words, logits.ctypes.data, n, out.ctypes.data, limit)
    assert k == candidates_kernels.py_gather_bits(words, logits, twin, limit)
    if len(ids) > limit:
        assert k == -1
        return
    assert k == len(ids)
    assert np.array_equal(out[:k], twin[:k])
    assert np.array_equal(out["id"][:k], sorted(ids))
    assert np.array_equal(out["logit"][:k], logits[sorted(ids)])


def test_the_direct_path_is_for_large_vocabularies(model):
    with SamplerChain(Sampling(seed=1), model.compile(regex=r"[0-9]+").guide()) as chain:
        assert chain._large(model.llama.ctx) == (model.vocabulary.size >= sampler_mod.DIRECT_MIN_VOCAB)
    assert sampler_mod.DIRECT_MIN_VOCAB > 49_152  # (SmolLM2 keeps llama.cpp's array: cheaper there)


def test_gather_bits_leaves_out_ids_past_the_vocabulary():
    words = bitset([3, 70, 127], 128)
    logits = np.arange(100, dtype=np.float32)
    out = np.zeros(4, sampler_mod._TOKEN_DATA)
    assert candidates_kernels.gather_bits(words, logits.ctypes.data, 100, out.ctypes.data, 4) == 2
    assert out["id"][:2].tolist() == [3, 70] and out["logit"][:2].tolist() == [3.0, 70.0]


CONSTRAINTS = {
    "regex": ({"regex": r"(19|20)[0-9]{2}-[0-9]{2}-[0-9]{2}, [0-9]{1,3}(\.[0-9]{1,3}){3}"}, "A date and an IP address: "),
    "choice": ({"choice": ["yes", "no", "maybe", "never"]}, "Is the sky green? "),
    "schema": ({"json_schema": {"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"},
                                                              "tag": {"enum": ["a", "bc", "def"]}},
                                "required": ["id", "ok", "tag"], "additionalProperties": False}}, "JSON:\n"),
    "grammar": ({"grammar": "json"}, "A JSON value:\n"),
}


def _bias(model):
    """An extra sampler before the guide: a logit bias (the stop tokens banned, the digit 7
    favoured), as the benchmarks use."""
    import llama_cpp

    tokens = model.vocabulary.stop_ids.tolist()
    seven = model.llama.tokenize(b"7", add_bos=False, special=False)
    biases = [float("-inf")] * len(tokens) + [2.0] * len(seven)
    arr = (llama_cpp.llama_logit_bias * len(biases))()
    for i, (t, b) in enumerate(zip(tokens + seven, biases)):
        arr[i].token, arr[i].bias = t, b
    return llama_cpp.llama_sampler_init_logit_bias(model.vocabulary.size, len(biases), arr)


def _counting(monkeypatch, path: str) -> list[int]:
    """[samples the chain's ``path`` method took, samples in all], counted from now on."""
    taken = [0, 0]
    method, original = getattr(SamplerChain, path), SamplerChain.sample

    def counted(self, *args):
        token = method(self, *args)
        taken[0] += token >= 0
        return token

    def sample(self, ctx, idx=-1):
        taken[1] += 1
        return original(self, ctx, idx)

    monkeypatch.setattr(SamplerChain, path, counted)
    monkeypatch.setattr(SamplerChain, "sample", sample)
    return taken


def _llama_cpp_only(monkeypatch) -> None:
    """Every sample from llama.cpp's candidate array of the whole vocabulary."""
    monkeypatch.setattr(SamplerChain, "_sample_allowed", lambda self, *a: -1)
    monkeypatch.setattr(SamplerChain, "_sample_top", lambda self, *a: -1)


@pytest.mark.parametrize("extra", [False, True], ids=["chain", "with a logit bias"])
@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_same_tokens_as_the_guide_sampler_in_the_chain(model, monkeypatch, kind, extra):
    """Same seed, same tokens, with the candidates built here or by llama.cpp, at temperatures
    1, 0.8 and 0 (greedy), with a token budget and without, with an extra sampler before the
    guide and without; and the direct path did sample."""
    monkeypatch.setattr(sampler_mod, "DIRECT_MIN_VOCAB", 0)  # (SmolLM2's vocabulary too)
    constraint, prompt = CONSTRAINTS[kind]
    index = model.compile(**constraint)
    if kind == "grammar":  # (its bitsets take the kernel, compiled by the warm-up)
        from localguide.runtime import warmup
        if not warmup.ready():
            candidates_kernels.gather_bits(np.zeros(1, np.uint64), np.zeros(1, np.float32).ctypes.data, 1,
                                           np.zeros(3, np.int32).ctypes.data, 1)
    prompt_tokens = model.tokenize_prompt(prompt)
    runs = {}
    for path in ("direct", "llama.cpp"):
        if path == "direct":
            taken = _counting(monkeypatch, "_sample_allowed")
        else:
            _llama_cpp_only(monkeypatch)
        runs[path] = [list(model.generate_tokens(prompt_tokens, index.guide(max_tokens=budget), 40,
                                                 Sampling(temperature=t, seed=seed),
                                                 extra_samplers=[_bias(model)] if extra else (),
                                                 speculate=False, cache_prompt=False))
                      for seed, t, budget in ((1, 1.0, None), (2, 0.8, None), (3, 1.0, 24), (4, 0.0, None))]
    assert runs["direct"] == runs["llama.cpp"]
    assert all(runs["direct"])
    assert taken[0] >= max(1, taken[1] // 10), taken  # (forced text, digits, keys: a few tokens allowed)


# --- the k highest allowed logits of a dense mask -------------------------------------------

KINDS = {"allowed": candidates_kernels.KIND_ALLOWED, "excluded": candidates_kernels.KIND_EXCLUDED,
         "bits": candidates_kernels.KIND_BITS}


def _top(kind: str, ids: list[int], n: int, logits: np.ndarray, k: int):
    """``gather_top`` and its twin on the mask allowing ``ids`` of ``n`` tokens, given as ``kind``."""
    if kind == "bits":
        mask = bitset(ids, n)
    elif kind == "excluded":
        mask = np.setdiff1d(np.arange(n), ids).astype(np.int32)
    else:
        mask = np.asarray(sorted(ids), np.int32)
    held = np.ascontiguousarray(mask) if len(mask) else np.zeros(1, mask.dtype)
    out = np.zeros(max(k, 1), sampler_mod._TOKEN_DATA)
    twin = np.zeros(max(k, 1), sampler_mod._TOKEN_DATA)
    got = candidates_kernels.gather_top(KINDS[kind], held.ctypes.data, len(mask), logits.ctypes.data, n, k,
                                        out.ctypes.data)
    return got, out, candidates_kernels.py_gather_top(KINDS[kind], mask, logits, k, twin), twin


@SETTINGS
@given(st.integers(1, 700).flatmap(lambda n: st.tuples(
    st.just(n), st.sets(st.integers(0, n - 1), max_size=n), st.integers(1, 50), st.integers(0, 2 ** 32 - 1),
    st.sampled_from(list(KINDS)), st.sampled_from(["normal", "few values", "rising", "nan"]))))
def test_gather_top_equals_twin(case):
    n, ids, k, seed, kind, values = case
    rng = np.random.default_rng(seed)
    if values == "few values":  # ties among the highest: llama.cpp's sort would decide them
        logits = rng.integers(0, 6, n).astype(np.float32)
    elif values == "rising":  # a new highest logit at every token
        logits = np.arange(n, dtype=np.float32)
    else:
        logits = rng.normal(size=n).astype(np.float32)
        if values == "nan":
            logits[rng.integers(0, n)] = np.nan
    got, out, want, twin = _top(kind, sorted(ids), n, logits, k)
    assert got == want
    if got < 0:
        allowed = logits[sorted(ids)]
        top = np.sort(allowed)[::-1][:k + 1]
        assert len(ids) <= k or np.isnan(allowed).any() or not (top[:-1] > top[1:]).all()
        return
    assert got == k
    assert np.array_equal(out[:k], twin[:k])
    kept = out["id"][:k]
    assert (np.diff(kept) > 0).all() and set(kept) <= set(ids)
    others = np.setdiff1d(sorted(ids), kept)
    assert logits[kept].min() > logits[others].max()


def test_gather_top_declines_where_it_would_be_slow():
    n = 262_144
    rising = np.arange(n, dtype=np.float32)  # each logit passes every one kept before it
    got, *_ = _top("excluded", list(range(n)), n, rising, 40)
    assert got == -1 and n > candidates_kernels.TOP_KEEPS
    got, out, *_ = _top("excluded", list(range(n)), n, rising[::-1].copy(), 40)
    assert got == 40 and out["id"][:40].tolist() == list(range(40))


DENSE = {  # masks that allow most of the vocabulary: free strings, a grammar's strings, letters
    "schema strings": ({"json_schema": {"type": "object", "properties": {"name": {"type": "string"},
                                                                          "note": {"type": "string"}},
                                        "required": ["name", "note"], "additionalProperties": False}},
                       "A JSON object describing a person:\n"),
    "grammar string": ({"grammar": 'start: "\\"" TEXT "\\""\nTEXT: /[^"\\\\\\n]{20,}/\n'},
                       "A quote from a famous book: "),
    "regex words": ({"regex": r"[A-Za-z ,.]{10,80}"}, "Write a sentence about the sea:"),
}


@pytest.mark.parametrize("kind", list(DENSE))
def test_top_k_of_a_dense_mask_samples_as_llama_cpp(model, monkeypatch, kind):
    """Same seed, same tokens with the k highest allowed logits gathered here or llama.cpp's
    array of the whole vocabulary, with top-k 40, 5 and 1, greedy, and top-k off (the path not
    taken); and the top path did sample."""
    monkeypatch.setattr(sampler_mod, "DIRECT_MIN_VOCAB", 0)  # (SmolLM2's vocabulary too)
    constraint, prompt = DENSE[kind]
    index = model.compile(**constraint)
    from localguide.runtime import warmup
    if not warmup.ready():  # (compiled by the grammar kernels' warm-up otherwise)
        one = np.zeros(1, np.int32)
        candidates_kernels.gather_top(0, one.ctypes.data, 1, np.zeros(1, np.float32).ctypes.data, 1, 1,
                                      np.zeros(3, np.int32).ctypes.data)
        if kind == "grammar string":
            candidates_kernels.gather_bits(np.zeros(1, np.uint64), np.zeros(1, np.float32).ctypes.data, 1,
                                           np.zeros(3, np.int32).ctypes.data, 1)
    prompt_tokens = model.tokenize_prompt(prompt)
    # (top-p and min-p off in the first two: a k-th token dropped or added changes the draws)
    settings = [Sampling(temperature=1.0, top_p=1.0, min_p=0.0, seed=1),
                Sampling(temperature=0.8, top_k=5, top_p=1.0, min_p=0.0, seed=2),
                Sampling(temperature=0.7, top_k=1, seed=3), Sampling(temperature=0.0, seed=4),
                Sampling(temperature=1.0, top_k=0, seed=5)]
    runs = {}
    for path in ("top", "llama.cpp"):
        if path == "top":
            taken = _counting(monkeypatch, "_sample_top")
        else:
            _llama_cpp_only(monkeypatch)
        runs[path] = [list(model.generate_tokens(prompt_tokens, index.guide(max_tokens=budget), 40, sampling,
                                                 speculate=False, cache_prompt=False))
                      for sampling, budget in zip(settings, (None, 30, None, None, None))]
        if path == "top":
            shares = taken[:]
    assert runs["top"] == runs["llama.cpp"]
    assert all(runs["top"])
    assert shares[0] >= max(1, shares[1] // 6), shares  # (top-k off: a fifth of the samples; keys: sparse)


def test_the_top_path_waits_for_its_kernel_and_starts_its_warm_up(monkeypatch):
    """Until ``gather_top`` is compiled, llama.cpp samples dense masks and the grammar kernels'
    warm-up (which compiles it) is started; once it is there, the top path is taken."""
    from localguide.runtime import warmup

    started = []
    ready = [False]
    monkeypatch.setattr(sampler_mod, "_TOP_READY", False)
    monkeypatch.setattr(sampler_mod, "_top_checked", 0.0)
    monkeypatch.setattr(sampler_mod, "compiled", lambda kernel: ready[0])
    monkeypatch.setattr(warmup, "start", lambda: started.append(True))
    assert not sampler_mod._top_ready() and started == [True]
    ready[0] = True
    assert not sampler_mod._top_ready()  # (looked at again a quarter of a second later at most)
    monkeypatch.setattr(sampler_mod, "_top_checked", 0.0)
    assert sampler_mod._top_ready() and sampler_mod._top_ready() and started == [True]
