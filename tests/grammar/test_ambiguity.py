"""Lexically ambiguous grammars (issue: reliability, item 4): a compiled grammar never raises
while generating. Readings that share a scanner state are pooled into one parser set, which
keeps the masks exact; a grammar whose terminals cut the start of a text in too many ways is
refused at compile time with an error that names them."""

from __future__ import annotations

import numpy as np
import pytest

import localguide
from localguide.grammar import compiled

# Every cut of a run of letters into one- and two-letter names, nested any way: the readings
# of a text of n letters grow like Fibonacci(n), each with its own parser set, and there were
# 90,720 of them after 60 letters before pooling (a GrammarError at 4,096).
CUTS = r"""
start: e
e: NAME | e e | "(" e ")"
NAME: /[a-z]{1,2}/
"""


def _viable(text: bytes) -> bool:
    """Whether ``text`` begins a sentence of CUTS: letters and balanced parentheses, none empty."""
    depth, prev = 0, 0
    for b in text:
        if b == ord("("):
            depth += 1
        elif b == ord(")"):
            if depth == 0 or prev == ord("("):
                return False
            depth -= 1
        elif not ord("a") <= b <= ord("z"):
            return False
        prev = b
    return True


def _complete(text: bytes) -> bool:
    return bool(text) and _viable(text) and text.count(b"(") == text.count(b")")


class Pieces:
    """The vocabulary's pieces, summarized so that ``_viable(text + piece)`` for all of them
    is a few numpy operations: each piece alone, its lowest running depth, its first byte."""

    def __init__(self, vocab):
        self.pieces = [vocab[i] for i in range(vocab.size)]
        n = len(self.pieces)
        self.alone = np.zeros(n, bool)  # viable by itself, given enough open parentheses before
        self.low = np.zeros(n, np.int64)
        self.first = np.zeros(n, np.int64)
        for i, p in enumerate(self.pieces):
            if not p:
                continue
            ok = b"()" not in p and all(b in b"()" or 97 <= b <= 122 for b in p)
            depth = low = 0
            for b in p:
                depth += (b == 40) - (b == 41)
                low = min(low, depth)
            self.alone[i], self.low[i], self.first[i] = ok, low, p[0]

    def expected(self, text: bytes) -> np.ndarray:
        depth = text.count(b"(") - text.count(b")")
        ok = self.alone & (self.low >= -depth)
        if text.endswith(b"("):
            ok &= self.first != 41
        return np.flatnonzero(ok)


def test_pooled_readings_give_the_exact_masks(vocab):
    index = localguide.compile_grammar(CUTS, vocab)
    summary = Pieces(vocab)
    pieces = summary.pieces
    stops = set(vocab.stop_ids.tolist())
    rng = np.random.default_rng(7)
    most = 0
    for _ in range(3):
        g = index.guide()
        text = b""
        for _ in range(24):
            allowed = set(g.allowed_token_ids().tolist())
            expected = set(summary.expected(text).tolist())
            if _complete(text):
                expected |= stops
            assert allowed == expected, f"after {text!r}: {len(allowed - expected)} too many, " \
                                        f"{len(expected - allowed)} missing"
            most = max(most, len(g.state.configs))
            text_ids = sorted(allowed - stops)
            parens = [i for i in text_ids if b"(" in pieces[i] or b")" in pieces[i]]
            t = int(rng.choice(parens if parens and rng.random() < 0.3 else text_ids))
            g.advance(t)
            text += pieces[t]
        assert len(text) > 40 and _viable(text)
    # pooled: at most one parser set per scanner state once there are many readings
    assert most <= compiled.MERGE_READINGS


def test_a_lexically_ambiguous_grammar_is_refused_at_compile_time(vocab):
    grammar = r"""
start: item+
item: NAME | STRING | NAME STRING
NAME: /[a-z]+/
STRING: /[a-z]+( [a-z]+)*/
"""
    with pytest.raises(localguide.GrammarError) as err:
        localguide.compile_grammar(grammar, vocab)
    msg = str(err.value)
    assert "lexically too ambiguous" in msg and "NAME" in msg and "STRING" in msg, msg
    assert f"more than {compiled.MAX_READINGS} ways" in msg


@pytest.mark.parametrize("name", ["json", "sql", "c"])
def test_shipped_grammars_leave_no_token_to_check_one_by_one(smollm2_vocab, name):
    index = localguide.compile_grammar(name, smollm2_vocab, lazy=False)
    assert sum(len(u) for u in index.engine.unresolved.values()) == 0
