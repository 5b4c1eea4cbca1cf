"""Sampling where the guide allows a few tokens: the candidate array built from their logits
(``SamplerChain._sample_allowed``) instead of llama.cpp's array of the whole vocabulary.

It must sample exactly as the guide sampler inside llama.cpp's chain does: the same tokens for
the same seed, on both models, for every kind of mask it takes (an Index's allowed ids, a
grammar's bitset), with and without a token budget; ``gather_bits`` is held to its twin.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from localguide.llama import candidates_kernels
from localguide.llama import sampler as sampler_mod
from localguide.llama.sampler import SamplerChain, Sampling

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


@pytest.mark.parametrize("extra", [False, True], ids=["chain", "with a logit bias"])
@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_same_tokens_as_the_guide_sampler_in_the_chain(model, monkeypatch, kind, extra):
    """Same seed, same tokens, with the candidates built here or by llama.cpp, at temperatures
    1, 0.8 and 0 (greedy), with a token budget and without, with an extra sampler before the
    guide and without; and the direct path did sample.
    (Each prompt decoded whole: a prompt decoded after a cached prefix is another batch, and
    Gemma 3's logits differ in their last bits by the batch.)"""
    monkeypatch.setattr(sampler_mod, "DIRECT_MIN_VOCAB", 0)  # (SmolLM2's vocabulary too)
    constraint, prompt = CONSTRAINTS[kind]
    index = model.compile(**constraint)
    if kind == "grammar":  # (its bitsets take the kernel, compiled by the warm-up)
        from localguide.grammar import warmup
        if not warmup.ready():
            candidates_kernels.gather_bits(np.zeros(1, np.uint64), np.zeros(1, np.float32).ctypes.data, 1,
                                           np.zeros(3, np.int32).ctypes.data, 1)
    prompt_tokens = model.tokenize_prompt(prompt)
    direct = SamplerChain._sample_allowed
    taken = [0, 0]  # samples through the direct path, samples in all

    def counted(self, *args):
        token = direct(self, *args)
        taken[0] += token >= 0
        return token

    def sample(self, ctx, idx=-1):
        taken[1] += 1
        return original(self, ctx, idx)

    original = SamplerChain.sample
    runs = {}
    for path in ("direct", "llama.cpp"):
        if path == "direct":
            monkeypatch.setattr(SamplerChain, "_sample_allowed", counted)
            monkeypatch.setattr(SamplerChain, "sample", sample)
        else:
            monkeypatch.setattr(SamplerChain, "_sample_allowed", lambda self, *a: -1)
        runs[path] = [list(model.generate_tokens(prompt_tokens, index.guide(max_tokens=budget), 40,
                                                 Sampling(temperature=t, seed=seed),
                                                 extra_samplers=[_bias(model)] if extra else (),
                                                 speculate=False, cache_prompt=False))
                      for seed, t, budget in ((1, 1.0, None), (2, 0.8, None), (3, 1.0, 24), (4, 0.0, None))]
    assert runs["direct"] == runs["llama.cpp"]
    assert all(runs["direct"])
    assert taken[0] >= max(1, taken[1] // 10), taken  # (forced text, digits, keys: a few tokens allowed)
