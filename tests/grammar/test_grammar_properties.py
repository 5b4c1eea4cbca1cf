"""Grammar guides as properties (hypothesis), on both real vocabularies, against Lark itself.

* Completeness: sentences that hypothesis makes from each shipped Lark grammar
  (``grammar_sentences.sentences``: ``hypothesis.extra.lark.from_lark`` overruns on ``sql``
  and ends texts in ignored text), tokenized by the model's own tokenizer, are accepted token
  by token, and the stop tokens are allowed exactly where the text so far is a sentence (Lark
  parses it, and it does not end with ignored text).
* Soundness: walks that take any allowed token (hypothesis picks) until a stop token, within a
  token budget, end in text that Lark parses.
"""

from __future__ import annotations

import lark
import pytest
from conftest import random_walk, tokenize
from grammar_sentences import sentences
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from localguide.grammar import compile_grammar, list_grammars

GRAMMARS = ["json", "arithmetic", "sql", "c", "csv", "yaml"]
IGNORED_WS = {"json", "arithmetic", "sql", "c"}  # %ignore whitespace (csv and yaml ignore nothing)
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))

_PARSERS: dict = {}


def parser(name: str) -> lark.Lark:
    """Lark's own parser of shipped grammar ``name``, every tokenization considered (as ours)."""
    p = _PARSERS.get(name)
    if p is None:
        p = _PARSERS[name] = lark.Lark(list_grammars()[name].read_text(), parser="earley",
                                       lexer="dynamic_complete")
    return p


def is_sentence(name: str, data: bytes) -> bool:
    """Whether ``data`` is a sentence of this engine's language of ``name``: Lark parses it and
    it does not end with ignored text. (Runs of ignored text are not checked: ``sentences``
    keeps them within ``max_ignored_run``, and so do the prefixes of its texts.)"""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if name in IGNORED_WS and text != text.rstrip(" \t\r\n"):
        return False
    try:
        parser(name).parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


def has(bits, t: int) -> bool:
    return bool((int(bits[t >> 6]) >> (t & 63)) & 1)


@pytest.mark.parametrize("name", GRAMMARS)
def test_sentences_are_accepted_token_by_token(model, name):
    voc = model.vocabulary
    idx = compile_grammar(name, voc)
    stop = int(voc.stop_ids[0])

    # (sql: 15 sentences, each judged by Lark at up to 160 ms a prefix)
    @settings(max_examples=15 if name == "sql" else 25, **SETTINGS)
    @given(sentences(parser(name), depth=6), st.randoms(use_true_random=False))
    def check(text, rng):
        tokens = tokenize(model, text)
        # (a text the vocabulary cannot spell is no case: SmolLM2's has no token for byte 0xF1,
        # and its tokenizer drops it)
        assume(b"".join(voc[t] for t in tokens) == text.encode())
        # Lark (20 to 160 ms a prefix of sql) judges 4 prefixes, drawn anew for each text
        asked = set(rng.sample(range(len(tokens)), min(4, len(tokens))))
        g = idx.guide()
        done = b""
        for i, t in enumerate(tokens):
            _, bits = g.mask()
            assert has(bits, t), (text, done, voc[t])
            if i in asked:
                assert has(bits, stop) == is_sentence(name, done), (text, done)
            g.advance(t)
            done += voc[t]
        _, bits = g.mask()
        assert has(bits, stop) and g.is_accepting(), text

    check()


@pytest.mark.parametrize("name", GRAMMARS)
def test_walks_through_the_masks_parse_with_lark(model, name):
    voc = model.vocabulary
    idx = compile_grammar(name, voc)
    budget = 24

    @settings(max_examples=20, **SETTINGS)
    @given(st.randoms(use_true_random=False))
    def check(rng):
        g = idx.guide(max_tokens=budget)
        tokens, stopped = random_walk(g, voc, rng, p_stop=0.2, max_steps=budget + 1)
        assert stopped and len(tokens) <= budget
        text = voc.decode(tokens).decode("utf-8")
        if name in IGNORED_WS:
            assert text == text.rstrip(" \t\r\n"), text  # never ends with ignored text
        parser(name).parse(text)

    check()
