"""Opportunistic masking (DOMINO §3.5) gives the same text as full masking at temperature 0."""

import pytest


@pytest.mark.parametrize("grammar, prompt", [("arithmetic", "2+3*4 ="), ("json", "A JSON list of numbers:")])
def test_same_output_as_full_masking_at_temperature_0(model, grammar, prompt):
    full = model.generate(prompt, grammar=grammar, temperature=0, max_tokens=16, speculate=False)
    opportunistic = model.generate(prompt, grammar=grammar, temperature=0, max_tokens=16, opportunistic=True,
                                   speculate=False)
    assert opportunistic == full


@pytest.mark.parametrize("grammar, prompt", [("arithmetic", "2+3*4 ="), ("json", "A JSON list of numbers:")])
def test_same_output_with_speculation(smollm2, grammar, prompt):
    """Drafts verified with opportunistic masking: the same text (batched logits are bitwise those
    of one token, so speculation changes nothing at temperature 0)."""
    full = smollm2.generate(prompt, grammar=grammar, temperature=0, max_tokens=24, speculate=False)
    for _ in range(2):  # the second time with learned draft counts
        spec = smollm2.generate(prompt, grammar=grammar, temperature=0, max_tokens=24, opportunistic=True)
        assert spec == full


def test_opportunistic_output_is_in_the_language(model):
    from localguide import compile_grammar

    index = compile_grammar("arithmetic", model.vocabulary)
    for seed in range(3):
        text = model.generate("1+1 =", grammar="arithmetic", temperature=1.0, seed=seed, max_tokens=24,
                              opportunistic=True)
        assert index.is_prefix(text)
