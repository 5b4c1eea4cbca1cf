"""Real generation through llama.cpp, on both models: every sample fully matches.

Nothing here hard-codes what a model says: each output is checked against the
constraint (``re.fullmatch`` in ASCII mode), the budget, and the other APIs.
"""

from __future__ import annotations

import re

import pytest

import localguide
from localguide.engines.llamacpp.sampler import Sampling

from conftest import tokenize

PATTERNS = {
    "answer": (r"\s*([Yy]es|[Nn]o|[Nn]ever|[Aa]lways)", "Is the sky blue? Answer yes or no:"),
    "birth_year": (r"(19|20)\d{2}", "Albert Einstein was born in the year"),
    "date": (r"(19|20)\d{2}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", "Today's date in ISO format is"),
    "email": (r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}", "Contact me by email at"),
    "ipv4": (r"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)",
             "The server's IP address is"),
    "float": (r"[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?", "The value of pi is approximately"),
}
SEEDS = [1, 2, 3]


def fullmatch(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text, re.ASCII) is not None


def generated_tokens(model, prompt, pattern, max_tokens, seed, temperature=1.0):
    """The token ids generated under ``pattern`` (the loop behind generate and stream)."""
    guide = model.compile(regex=pattern).guide(max_tokens=max_tokens)
    sampling = Sampling(temperature=temperature, seed=seed)
    return list(model.generate_tokens(model.tokenize_prompt(prompt), guide, max_tokens, sampling))


@pytest.mark.parametrize("name", list(PATTERNS))
def test_samples_fully_match(model, name):
    pattern, prompt = PATTERNS[name]
    for seed in SEEDS:
        out = model.generate(prompt, regex=pattern, temperature=1.0, seed=seed, max_tokens=24)
        assert isinstance(out, str)
        assert fullmatch(pattern, out), (seed, out)


@pytest.mark.parametrize("seed", SEEDS)
def test_short_budget_still_fully_matches(model, seed):
    pattern, prompt = PATTERNS["email"]
    tokens = generated_tokens(model, prompt, pattern, max_tokens=6, seed=seed)
    assert 1 <= len(tokens) <= 6
    text = model.vocabulary.decode(tokens).decode("utf-8")
    assert fullmatch(pattern, text), text
    # generate() with the same seed produces exactly that text.
    assert model.generate(prompt, regex=pattern, max_tokens=6, temperature=1.0, seed=seed, speculate=False,
                          heal=False) == text  # (generate_tokens heals nothing: it takes the tokens as given)


@pytest.mark.parametrize("budget", [3, 4, 5])
def test_budget_is_never_exceeded(model, budget):
    pattern = r"[a-z]{3,}\.[a-z]{3,}"
    prompt = "A domain name:"
    for seed in SEEDS:
        tokens = generated_tokens(model, prompt, pattern, budget, seed)
        assert len(tokens) <= budget
        assert fullmatch(pattern, model.vocabulary.decode(tokens).decode("utf-8"))


def test_same_seed_same_output(model):
    pattern, prompt = PATTERNS["ipv4"]
    a = model.generate(prompt, regex=pattern, temperature=1.0, seed=42, max_tokens=24, speculate=False)
    b = model.generate(prompt, regex=pattern, temperature=1.0, seed=42, max_tokens=24, speculate=False)
    assert a == b


def test_greedy_generation_matches(model):
    pattern, prompt = PATTERNS["date"]
    out = model.generate(prompt, regex=pattern, temperature=0.0, max_tokens=16, speculate=False)
    assert fullmatch(pattern, out)
    assert out == model.generate(prompt, regex=pattern, temperature=0.0, max_tokens=16, speculate=False)


@pytest.mark.parametrize("pattern,prompt", [
    (PATTERNS["float"][0], PATTERNS["float"][1]),
    (r"[😀-🙏]{1,3}", "My mood in emoji:"),
    (r"日本語|中文", "Name a language in its own script:"),
    (r"[à-ÿ]{2,6}", "Some accented letters:"),
])
def test_stream_pieces_concatenate_to_generate(model, pattern, prompt):
    for seed in SEEDS[:2]:
        pieces = list(model.stream(prompt, regex=pattern, temperature=1.0, seed=seed, max_tokens=16,
                                   speculate=False))
        assert all(isinstance(p, str) and p for p in pieces)
        # Whole characters only: no piece holds a replacement character or a lone surrogate.
        for p in pieces:
            assert "\ufffd" not in p
            p.encode("utf-8")
        text = "".join(pieces)
        assert fullmatch(pattern, text), text
        assert text == model.generate(prompt, regex=pattern, temperature=1.0, seed=seed, max_tokens=16,
                                      speculate=False)


def test_stream_never_splits_multibyte_characters(model):
    """Each emoji takes several tokens in SmolLM2 (byte-level) and may in Gemma: each
    streamed piece is still made of whole emoji."""
    pattern = r"[😀-🙏]{2,3}"
    for seed in SEEDS:
        for piece in model.stream("Three emoji:", regex=pattern, temperature=1.0, seed=seed, max_tokens=16):
            assert re.fullmatch(r"[\U0001F600-\U0001F64F]+", piece), repr(piece)


@pytest.mark.parametrize("choices", [
    ["red", "green", "blue"],
    ["yes", "no", "yes, definitely"],
    ["C++", "a.b*c", "(x|y)", "naïve", "日本", "new\nline", "tab\there", "[0-9]", "$5"],
])
def test_choice_returns_one_of_the_choices(model, choices):
    for seed in SEEDS:
        out = model.generate("Pick one:", choice=choices, temperature=1.0, seed=seed, max_tokens=16)
        assert out in choices, out


def test_choice_with_chat_template(model):
    out = model.generate("Is water wet? Answer yes or no.", choice=["yes", "no"], chat=True,
                         temperature=1.0, seed=5, max_tokens=8)
    assert out in ("yes", "no")


def test_plain_generation(model):
    out = model.generate("Once upon a time", max_tokens=12, temperature=1.0, seed=3)
    assert isinstance(out, str) and len(out) > 0
    assert len(tokenize(model, out)) <= 2 * 12  # re-tokenization may differ, but not wildly
    pieces = list(model.stream("Once upon a time", max_tokens=12, temperature=1.0, seed=3))
    assert "".join(pieces) == out


def test_plain_generation_respects_max_tokens(model):
    tokens = list(model.generate_tokens(model.tokenize_prompt("Count: 1, 2, 3,"), None, 5,
                                        Sampling(temperature=1.0, seed=1)))
    assert 1 <= len(tokens) <= 5


def test_default_model_loads():
    model = localguide.load(n_ctx=512)
    assert model.vocabulary.size == 49152
    assert fullmatch(r"\d{3}", model.generate("Three digits:", regex=r"\d{3}", seed=1, max_tokens=8))


def test_regex_and_choice_together_are_rejected(smollm2):
    with pytest.raises(ValueError):
        smollm2.generate("x", regex="a", choice=["a"])
