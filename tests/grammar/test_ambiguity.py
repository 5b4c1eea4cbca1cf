"""Lexically ambiguous grammars: followed, never refused, and a compiled grammar never raises
while generating. Readings that share a scanner state are pooled into one parser set, which
keeps the masks exact; tokens whose bytes cut into terminals in more ways than a tree holds
are walked byte by byte over their trie, each step memoized, and the masks stay exact."""

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


# Names and strings of the same letters: a token of n letters cuts into 2^n readings or more,
# past what a subterminal tree holds (``masks.MAX_READINGS``). Its language is the regex below.
WORDS = r"""
start: item+
item: NAME | STRING | NAME STRING
NAME: /[a-z]+/
STRING: /[a-z]+( [a-z]+)*/
"""
WORDS_REGEX = r"[a-z]+( [a-z]+)*"


def test_a_lexically_ambiguous_grammar_is_walked_with_exact_masks(vocab):
    index = localguide.compile_grammar(WORDS, vocab, lazy=False)
    walked = sum(len(u) for u in index.engine.unresolved.values())
    assert walked > 256  # (the tokens walked byte by byte: the path under test)
    regex = localguide.compile_regex(WORDS_REGEX, vocab)
    spaced = [i for i in range(vocab.size) if b" " in vocab[i] and vocab[i].strip(b" ").isalpha()]
    rng = np.random.default_rng(3)
    for _ in range(3):
        g, r = index.guide(), regex.guide()
        for step in range(20):
            got, want = g.allowed_token_ids(), r.allowed_token_ids()
            assert np.array_equal(got, want), f"step {step}: {len(np.setdiff1d(got, want))} too many, " \
                                              f"{len(np.setdiff1d(want, got))} missing"
            assert g.is_accepting() == r.is_accepting()
            pool = np.setdiff1d(want, vocab.stop_ids)
            with_space = np.intersect1d(spaced, pool)
            if len(with_space) and rng.random() < 0.5:
                pool = with_space
            t = int(rng.choice(pool))
            g.advance(t)
            r.advance(t)


def test_a_byte_walk_step_is_run_once(smollm2_vocab, monkeypatch):
    """Counted work: the walk of the tokens left to it runs each (configurations, byte) step
    once, far fewer steps than the bytes of the tokens walked; a second guide over the same
    text runs none; after a flush, the same steps again."""
    index = localguide.compile_grammar(WORDS, smollm2_vocab)
    index.flush()  # (a compiled grammar is shared: forget what other tests walked)
    runs = []
    run = index._run

    def counted(configs, data):
        runs.append((tuple(sorted((q.uid, c) for q, c in configs)), data))
        return run(configs, data)

    monkeypatch.setattr(index, "_run", counted)
    ids = {smollm2_vocab[i]: i for i in range(smollm2_vocab.size)}
    text = [ids[w] for w in (b"hello", b" world", b"again")]

    def walk():
        g = index.guide(max_tokens=64)
        for t in text:
            g.allowed_token_ids()
            g.advance(t)

    walk()
    steps = [x for x in runs if len(x[1]) == 1]
    walked = sum(len(smollm2_vocab[t]) for u in index.engine.unresolved.values() for t in u)
    assert 0 < len(steps) < walked // 10
    assert len(set(steps)) == len(steps)  # (no step run twice)
    first = len(runs)
    walk()
    assert len(runs) == first
    index.flush()
    runs.clear()
    walk()
    assert len(runs) == first


def test_budget_costs_of_walked_tokens_are_those_of_their_steps(monkeypatch):
    """The max_tokens budget reads a walked token's cost from the byte-step table's rows: the
    same cost as stepping the token through the guide state, also when the table is emptied
    at every walk."""
    from localguide import Vocabulary

    import itertools

    # words of 9 letters cut into names and strings in thousands of ways: left to the byte walk
    long = [bytes(w) for w in itertools.product(b"ab", repeat=9)][::3]
    pieces = [b"a", b"b", b"c", b"ab cd", b"a b", b"(", b")", b",", b"((", b"),", b"ab ", b" ba"] + long
    vocab = Vocabulary.from_tokens([b""] + pieces, [0])
    for small in (False, True):
        if small:
            monkeypatch.setattr(compiled, "MAX_BYTE_NODES", 3)
        index = localguide.compile_grammar(NESTED, vocab, lazy=False)
        index.flush()
        assert sum(len(u) for u in index.engine.unresolved.values())  # (the path under test)
        comp = index.completer
        rng = np.random.default_rng(5)
        g = index.guide(max_tokens=200)
        for _ in range(12):
            st = g.state
            _, pairs, _ = index.budget_info(st)
            walked = [(b, x) for b, x in pairs if x < 0]
            assert walked
            for b, x in walked:
                nxt = index.step_bytes(st, vocab[-1 - x])
                assert nxt is not None and b == comp.cost(comp.state_completion(nxt)), vocab[-1 - x]
            allowed = [t for t in g.allowed_token_ids().tolist() if t != 0]
            g.advance(int(rng.choice(allowed)))


# Ambiguous words nested in parentheses and lists: every depth is a new parser state, so the
# byte walk runs again there; generating stays exact (lark's Earley parser, every lexing) and
# the budget of max_tokens holds.
NESTED = r"""
start: e
e: item+ | "(" e ")" | e "," e
item: NAME | STRING | NAME STRING
NAME: /[a-z]+/
STRING: /[a-z]+( [a-z]+)*/
"""


def test_a_nested_ambiguous_grammar_generates_valid_text(model):
    import lark

    parser = lark.Lark(NESTED, parser="earley", lexer="dynamic_complete")
    for seed in (1, 2):
        out = model.generate("A list of lists of words: (", grammar=NESTED, max_tokens=40, seed=seed)
        parser.parse(out)


@pytest.mark.parametrize("name", ["json", "sql", "c"])
def test_shipped_grammars_leave_no_token_to_check_one_by_one(smollm2_vocab, name):
    index = localguide.compile_grammar(name, smollm2_vocab, lazy=False)
    assert sum(len(u) for u in index.engine.unresolved.values()) == 0
