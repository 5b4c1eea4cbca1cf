"""Prompt caching: a prompt that extends what the KV cache holds decodes only its new tokens,
and every output is the one an emptied cache gives (both models, real llama.cpp)."""

from __future__ import annotations

import numpy as np
import pytest

from localguide.engines.llamacpp.loop import logits_at
from localguide.engines.llamacpp.sampler import Sampling

SYSTEM = "You are a careful assistant. You answer in one short sentence.\n" * 3
QUESTIONS = ["Q: What colour is the sky?\nA:", "Q: Name a fruit.\nA:", "Q: What is ice made of?\nA:"]


def test_the_next_turn_decodes_only_its_new_tokens(model):
    model._reset()  # (an earlier test's cache would share the BOS)
    first = model.tokenize_prompt(SYSTEM + QUESTIONS[0])
    out = list(model.generate_tokens(first, None, 8, Sampling(temperature=0)))
    assert model.last_stats.cached_tokens == 0
    assert len(out) >= 2, "the test needs an answer of two tokens or more"
    new = model.tokenize_prompt(QUESTIONS[1])[1:]  # (no BOS in the middle)
    second = first + out + new
    list(model.generate_tokens(second, None, 4, Sampling(temperature=0)))
    # Everything but the last answer token was decoded during the first turn; the last one was
    # sampled, not decoded, so it is new to the cache.
    assert model.last_stats.cached_tokens == len(first) + len(out) - 1
    assert model.last_stats.prompt_tokens - model.last_stats.cached_tokens == len(new) + 1


def test_the_same_prompt_again_decodes_its_last_token_only(model):
    model.generate(SYSTEM + QUESTIONS[0], max_tokens=4, temperature=0, heal=False)
    model.generate(SYSTEM + QUESTIONS[0], max_tokens=4, temperature=0, heal=False)
    s = model.last_stats
    assert s.cached_tokens == s.prompt_tokens - 1


PROMPT_CASES = [None, r" [A-Z][a-z]+( [a-z]+){0,4}\."]


@pytest.mark.parametrize("regex", PROMPT_CASES)
def test_outputs_equal_those_of_an_empty_cache(model, regex):
    """A shared prefix, a changed question, a repeated one, a history that grows: at temperature 0
    each output is the one of an emptied cache (speculation on, so rejected drafts must leave
    nothing behind in the cache; a position's logits do not depend on the batch it was decoded in:
    ``localguide.engines.llamacpp.reproducible``)."""
    history = SYSTEM
    prompts = []
    for q in QUESTIONS + QUESTIONS[:1]:
        prompts.append(SYSTEM + q)
        history += q
        prompts.append(history)
        history += " Fine.\n"
    greedy = Sampling(temperature=0)
    index = model.compile(regex=regex) if regex else None
    cached, fresh, hits = [], [], 0
    for p in prompts:
        toks = model.tokenize_prompt(p)
        cached.append(list(model.generate_tokens(toks, index and index.guide(max_tokens=24), 24, greedy,
                                                 speculate=True)))
        hits += model.last_stats.cached_tokens > 0
    assert hits >= len(prompts) - 1
    for p in prompts:
        fresh.append(list(model.generate_tokens(model.tokenize_prompt(p), index and index.guide(max_tokens=24), 24,
                                                greedy, speculate=True, cache_prompt=False)))
        assert model.last_stats.cached_tokens == 0
    for p, a, b in zip(prompts, cached, fresh):
        assert a == b, p


def test_the_cache_holds_exactly_the_conversation(model):
    """Decoding the same tokens in the same batches on an emptied cache gives the same logits, bit
    for bit: the cache holds the prompt and the answer but its last token, nothing else."""
    from localguide.engines.llamacpp.loop import decode

    ctx, n = model.llama.ctx, model.vocabulary.size
    first = model.tokenize_prompt(SYSTEM + QUESTIONS[0])
    out = list(model.generate_tokens(first, None, 10, Sampling(temperature=0)))
    second = first + out + model.tokenize_prompt(QUESTIONS[1])[1:]
    cached = model._reuse(second)
    assert cached == len(first) + len(out) - 1
    decode(ctx, second[cached:])
    warm = logits_at(ctx, -1, n).copy()
    model._reset()
    decode(ctx, first)  # the batches the first turn decoded: the prompt, then one token at a time
    for t in out[:-1]:
        decode(ctx, [t])
    decode(ctx, second[cached:])
    assert np.array_equal(warm, logits_at(ctx, -1, n))
    model._reset()


def test_rejected_drafts_leave_nothing_in_the_cache(eager):
    """After a generation with speculation (drafts decoded, some rejected), the next prompt's
    logits are a fresh decode's, bitwise (a draft left behind moves them by several logits)."""
    from localguide.engines.llamacpp.loop import decode

    model = eager  # every draft that may be accepted is decoded: some are rejected
    ctx, n = model.llama.ctx, model.vocabulary.size
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer"}}, "required": ["name", "age"]}
    first = model.tokenize_prompt("A person as JSON:")
    guide = model.compile(json_schema=schema).guide(max_tokens=40)
    out = list(model.generate_tokens(first, guide, 40, Sampling(temperature=1.0, seed=3), speculate=True))
    assert model.last_stats.accepted < model.last_stats.drafted  # some drafts were rejected
    toks = first + out + model.tokenize_prompt("\nAnother person as JSON:")[1:]
    cached = model._reuse(toks)
    assert cached == len(first) + len(out) - 1
    decode(ctx, toks[cached:])
    warm = logits_at(ctx, -1, n).copy()
    model._reset()
    decode(ctx, toks)
    cold = logits_at(ctx, -1, n).copy()
    model._reset()
    assert np.array_equal(warm, cold)


def test_a_stream_closed_early_leaves_the_cache_consistent(model):
    prompt = SYSTEM + QUESTIONS[1]
    want = model.generate(prompt, max_tokens=16, temperature=0, cache_prompt=False)
    stream = model.stream(prompt, max_tokens=16, temperature=0)
    next(stream)
    stream.close()
    assert model.generate(prompt, max_tokens=16, temperature=0) == want
    assert model.last_stats.cached_tokens > 0


def test_an_error_empties_the_cache(model):
    from localguide.errors import TokenNotAllowedError

    prompt = SYSTEM + QUESTIONS[1]
    model.generate(prompt, max_tokens=4, temperature=0)
    guide = model.compile(regex="[0-9]+").guide()

    class Broken:  # a guide that refuses on its second token, as a bug elsewhere might
        cheap_masks = False

        def __init__(self):
            self.n = 0

        def __getattr__(self, name):
            return getattr(guide, name)

        def native_block(self):  # (driven through advance, not the native sampler)
            return None

        def advance(self, token):
            self.n += 1
            if self.n == 2:
                raise TokenNotAllowedError("refused")
            guide.advance(token)

    with pytest.raises(TokenNotAllowedError):
        list(model.generate_tokens(model.tokenize_prompt(prompt), Broken(), 8, Sampling(temperature=0)))
    assert model._kv == []
    model.generate(prompt, max_tokens=4, temperature=0)
    assert model.last_stats.cached_tokens == 0


def test_prompt_time_falls_with_the_cache(model):
    """Not a timing test: the decoded prompt tokens, which the time follows."""
    long = SYSTEM * 6 + QUESTIONS[0]
    model.generate(long, max_tokens=2, temperature=0)
    first = model.last_stats.prompt_tokens - model.last_stats.cached_tokens
    model.generate(long + " Blue.\n" + QUESTIONS[1], max_tokens=2, temperature=0)
    again = model.last_stats.prompt_tokens - model.last_stats.cached_tokens
    assert again < first / 5
    assert np.isfinite(model.last_stats.prompt_seconds)
