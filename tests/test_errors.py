"""Every error localguide raises: the right class, a message naming the problem, and the
position in the pattern where there is one."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import localguide
from localguide import (BudgetError, EmptyLanguageError, LocalguideError, ModelFileError, PatternError,
                        TokenNotAllowedError, UnsupportedPatternError, Vocabulary, compile_regex)
from localguide.regex import regex_to_dfa

# --- invalid syntax -------------------------------------------------------------------------

SYNTAX_ERRORS = [
    # pattern, position, words of the message
    ("a(b", 1, "missing ')'"),
    ("a)b", 1, "unmatched ')'"),
    ("[abc", 0, "missing ']'"),
    ("a**", 2, "nothing to repeat"),
    ("*a", 0, "nothing to repeat"),
    ("ab|+c", 3, "nothing to repeat"),
    ("a{1}{2}", 4, "nothing to repeat"),
    ("a{3,2}", 1, "out of order"),
    ("[z-a]", 1, "range out of order"),
    (r"\x4", 0, r"\x"),
    (r"\u12", 0, r"\u"),
    (r"\u{110000}", 0, r"\u{"),
    ("a\\", 1, "lone backslash"),
    ("(?<1a>x)", 0, "group name"),
    (r"\q", 0, "unknown escape"),
    (r"x\cé", 1, r"\c"),
]


@pytest.mark.parametrize("pattern,position,words", SYNTAX_ERRORS, ids=[c[0] for c in SYNTAX_ERRORS])
def test_invalid_syntax(pattern, position, words):
    with pytest.raises(PatternError) as info:
        regex_to_dfa(pattern)
    err = info.value
    assert not isinstance(err, UnsupportedPatternError)
    assert isinstance(err, ValueError) and isinstance(err, LocalguideError)
    assert err.position == position
    assert err.pattern == pattern
    assert words in str(err)
    assert f"position {position}" in str(err)
    # The caret line points at the position.
    lines = str(err).splitlines()
    assert lines[-2].strip() == pattern and lines[-1].index("^") - lines[-2].index(pattern[0]) == position


def test_invalid_syntax_through_compile_regex(smollm2_vocab):
    with pytest.raises(PatternError) as info:
        compile_regex("(19|20\\d{2}", smollm2_vocab)
    assert info.value.position == 0


# --- unsupported constructs ------------------------------------------------------------------

UNSUPPORTED = [
    ("a(?=(?!b))c", 4, "lookahead inside a lookahead"),
    ("a(?=b^)b", 1, "'^' is not supported inside a lookahead"),
    ("a(?=b$c)b", 1, "'$' is only supported at the end of a lookahead"),
    ("x(?<=a)b", 1, "lookbehind"),
    ("(?<!a)b", 0, "lookbehind"),
    (r"(a)\1", 3, "backreference"),
    (r"(?<n>a)\k<n>", 7, "backreference"),
    (r"a\bc", 1, "word boundary"),
    (r"a\Bc", 1, "word boundary"),
    ("a^b", 1, "'^'"),
    ("ab$c", 2, "'$'"),
    (r"\p{L}", 0, "Unicode property"),
    (r"x\P{Lu}", 1, "Unicode property"),
    (r"[a\p{L}]", 2, "Unicode property"),
    ("a{10001}", 1, "10000"),
    (r"\ud800", 0, "surrogate"),
]


@pytest.mark.parametrize("pattern,position,words", UNSUPPORTED, ids=[c[0] for c in UNSUPPORTED])
def test_unsupported_constructs(pattern, position, words):
    with pytest.raises(UnsupportedPatternError) as info:
        regex_to_dfa(pattern)
    err = info.value
    assert isinstance(err, PatternError)
    assert err.position == position
    assert words in err.reason


# --- empty language ---------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", ["[]", "a[]b", r"[^\s\S]", r"x[^\d\D]+"])
def test_empty_language(pattern, smollm2_vocab):
    with pytest.raises(EmptyLanguageError) as info:
        regex_to_dfa(pattern)
    assert repr(pattern) in str(info.value)
    with pytest.raises(EmptyLanguageError):
        compile_regex(pattern, smollm2_vocab)


def test_empty_language_for_the_vocabulary():
    vocab = Vocabulary.from_tokens([b"", b"a"], [0])
    with pytest.raises(EmptyLanguageError, match="no sequence of tokens"):
        compile_regex("b", vocab)


def test_empty_language_in_generate(smollm2):
    with pytest.raises(EmptyLanguageError):
        smollm2.generate("x", regex="[]")


# --- model files ---------------------------------------------------------------------------------

def test_missing_model_file(tmp_path):
    path = tmp_path / "nope.gguf"
    with pytest.raises(ModelFileError) as info:
        localguide.load(path)
    assert info.value.path == str(path)
    assert "not found" in str(info.value)
    assert isinstance(info.value, OSError)
    with pytest.raises(ModelFileError):
        Vocabulary.from_gguf(path)


def test_directory_is_not_a_model(tmp_path):
    with pytest.raises(ModelFileError):
        localguide.load(tmp_path)
    with pytest.raises(ModelFileError):
        Vocabulary.from_gguf(tmp_path)


def test_non_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("this is a text file, renamed .gguf\n" * 100)
    with pytest.raises(ModelFileError) as info:
        localguide.load(path)
    assert "GGUF" in str(info.value)
    with pytest.raises(ModelFileError):
        Vocabulary.from_gguf(path)


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_truncated_gguf_file(tmp_path, model_paths, name):
    src = model_paths[name]
    path = tmp_path / f"truncated-{name}.gguf"
    with open(src, "rb") as f:
        path.write_bytes(f.read(1 << 20))
    with pytest.raises(ModelFileError) as info:
        localguide.load(path)
    assert info.value.path == str(path)
    with pytest.raises(ModelFileError):
        Vocabulary.from_gguf(path)


def test_gguf_with_truncated_weights(tmp_path, smollm2_path):
    """The vocabulary may still be readable, but loading the weights must fail cleanly."""
    path = tmp_path / "half.gguf"
    with open(smollm2_path, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(smollm2_path.stat().st_size * 6 // 10))
    with pytest.raises(ModelFileError):
        localguide.load(path)


def test_model_file_errors_are_not_cached(tmp_path, smollm2_path):
    """A bad file, fixed in place, loads afterwards (no stale failure in the cache)."""
    path = tmp_path / "later.gguf"
    path.write_text("not yet a model")
    with pytest.raises(ModelFileError):
        Vocabulary.from_gguf(path)
    shutil.copyfile(smollm2_path, path)
    assert Vocabulary.from_gguf(path).size == 49152


# --- the guide -------------------------------------------------------------------------------------

def test_advancing_a_disallowed_token(vocab):
    index = compile_regex(r"(19|20)\d{2}", vocab)
    guide = index.guide()
    allowed = guide.allowed_token_ids()
    bad = int(np.setdiff1d(np.arange(vocab.size), allowed)[vocab.size // 2])
    with pytest.raises(TokenNotAllowedError) as info:
        guide.advance(bad)
    assert str(bad) in str(info.value)
    with pytest.raises(TokenNotAllowedError, match="stop token"):
        guide.advance(int(vocab.eos_id))
    # The guide is unchanged and still usable.
    assert guide.state == 0
    np.testing.assert_array_equal(guide.allowed_token_ids(), allowed)
    guide.advance(int(allowed[0]))


def test_advancing_after_the_end(vocab):
    guide = compile_regex("a", vocab).guide()
    a = [t for t in guide.allowed_token_ids().tolist() if vocab[t] == b"a"][0]
    guide.advance(a)
    guide.advance(int(vocab.eos_id))
    with pytest.raises(TokenNotAllowedError, match="finished"):
        guide.advance(a)


def test_token_over_budget(smollm2_vocab):
    vocab = smollm2_vocab
    guide = compile_regex(r"\d{4}", vocab).guide(max_tokens=4)
    digit = {vocab[t]: t for t in guide.allowed_token_ids().tolist()}
    guide.advance(digit[b"1"])
    assert guide.remaining == 3


# --- budgets -------------------------------------------------------------------------------------

def test_budget_error_before_generating(model, monkeypatch):
    def no_generation(*args, **kwargs):
        raise AssertionError("generation started although the budget is impossible")

    monkeypatch.setattr(model, "generate_tokens", no_generation)
    with pytest.raises(BudgetError) as info:
        model.generate("Fifty digits:", regex=r"\d{50}", max_tokens=3)
    assert "3" in str(info.value)
    with pytest.raises(BudgetError):
        next(iter(model.stream("Fifty digits:", regex=r"\d{50}", max_tokens=3)))


def test_negative_budget(smollm2_vocab):
    with pytest.raises(ValueError):
        compile_regex("a", smollm2_vocab).guide(max_tokens=-1)


# --- choice ----------------------------------------------------------------------------------------

def test_empty_choice(model):
    with pytest.raises(ValueError, match="at least one"):
        model.generate("Pick:", choice=[])


def test_empty_choice_compile(smollm2_vocab):
    with pytest.raises(ValueError):
        localguide.compile_choice([], smollm2_vocab)


def test_pattern_must_be_a_string():
    with pytest.raises(TypeError):
        regex_to_dfa(b"abc")


def test_prompt_plus_budget_beyond_the_context(smollm2):
    n_ctx = smollm2.llama.n_ctx()
    with pytest.raises(LocalguideError, match="context"):
        smollm2.generate("Hello", max_tokens=n_ctx + 10)
