"""Grammar masks against brute force: the allowed set is exactly {t : text + t is a viable prefix}.

Two oracles: (1) for regular grammars, an independent DFA of the same language
(``localguide.regex``): a prefix is viable iff the trimmed DFA is still alive;
(2) for context-free grammars, the guide's own byte-level simulation, which shares
no code with the precomputed subterminal trees the masks come from.
"""

from __future__ import annotations

import os
import random
import tempfile

import numpy as np
import pytest

os.environ.setdefault("LOCALGUIDE_CACHE_DIR", tempfile.mkdtemp(prefix="localguide-test-"))

from localguide import TokenNotAllowedError, Vocabulary  # noqa: E402
from localguide.grammar import compile_grammar  # noqa: E402
from localguide import kernels  # noqa: E402
from localguide.regex import regex_to_dfa  # noqa: E402

JSONISH = r'''
start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
STRING: /"[a-z]*"/
NUMBER: /-?[0-9]+/
%ignore /[ \n]+/
'''
JSON_TOKENS = [b"<eos>", b"{", b"}", b"[", b"]", b",", b":", b'"', b'",', b'":', b"a", b"ab", b"true", b"tr",
               b"ue", b"1", b"-", b"12", b" ", b"  ", b"\n", b'{"', b"},", b"],", b'"a"', b"nul", b"l",
               b"null,", b"e", b" {", b", ", b"}}", b'":"', b'"}', b"1,", b"]]"]

# Keywords that are prefixes of names, names that may follow names, and an ignored separator.
KEYWORDS = r'''
start: stmt+
stmt: "if" NAME "then" NAME ";" | NAME "=" NAME ";" | "int" NAME ";"
NAME: /[a-z]+/
%ignore " "
'''
KW_TOKENS = [b"<eos>", b"i", b"f", b"if", b"int", b"in", b"t", b"then", b"the", b"n", b"x", b"xy", b";", b"=",
             b" ", b"  ", b"f ", b"x;", b";\n", b"intx", b"ift", b"n;", b" =", b"= ", b"hen", b"a"]

# GBNF with a recursive rule, left recursion and a nullable terminal.
GBNF = r'''
root ::= list
list ::= "(" ws items? ws ")"
items ::= items ws "," ws item | item
item ::= [0-9]+ | list
ws ::= [ ]?
'''
GBNF_TOKENS = [b"<eos>", b"(", b")", b"()", b"((", b"))", b"1", b"12", b",", b", ", b" ", b"(1", b"1)", b",(",
               b" )", b"0,", b"x"]


def brute_force(idx, tokens, text: bytes) -> list[int]:
    out = []
    for i, t in enumerate(tokens):
        if i == 0:
            if idx.matches(text):
                out.append(0)
        elif idx.is_prefix(text + t):
            out.append(i)
    return out


@pytest.mark.parametrize("grammar,tokens", [(JSONISH, JSON_TOKENS), (KEYWORDS, KW_TOKENS), (GBNF, GBNF_TOKENS)],
                         ids=["jsonish", "keywords", "gbnf"])
def test_masks_equal_brute_force(grammar, tokens):
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[0])
    idx = compile_grammar(grammar, vocab)
    rng = random.Random(1)
    for _ in range(150):
        g = idx.guide()
        text = b""
        for _ in range(10):
            allowed = g.allowed_token_ids()
            assert allowed.dtype == np.int32
            assert allowed.tolist() == brute_force(idx, tokens, text), text
            assert g.is_accepting() == (0 in allowed.tolist())
            if not len(allowed) or allowed.tolist() == [0]:
                break
            t = rng.choice(allowed.tolist())
            if t == 0:
                g.advance(0)
                assert g.is_finished()
                break
            g.advance(t)
            text += tokens[t]
        # anything outside the mask is rejected by advance
        if not g.is_finished():
            bad = sorted(set(range(len(tokens))) - set(g.allowed_token_ids().tolist()))
            for t in bad[:3]:
                with pytest.raises(TokenNotAllowedError):
                    g.copy().advance(t)


REGULAR = r'''
start: item ("," item)*
item: WORD | NUMBER | WORD "=" NUMBER
WORD: /[a-c]+/
NUMBER: /[0-9]+(\.[0-9]+)?/
%ignore / +/
'''
REGULAR_REGEX = r" *(?:[a-c]+|[0-9]+(?:\.[0-9]+)?|[a-c]+ *= *[0-9]+(?:\.[0-9]+)?) *(?:, *(?:[a-c]+|[0-9]+(?:\.[0-9]+)?|[a-c]+ *= *[0-9]+(?:\.[0-9]+)?) *)*"


def test_regular_grammar_matches_independent_dfa():
    tokens = [b"<eos>", b"a", b"ab", b"abc", b"c", b"1", b"12", b".", b".5", b"1.", b",", b", ", b" ", b"=",
              b"a=", b"=1", b" =", b"a,", b"1,b", b"ba1"]
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[0])
    idx = compile_grammar(REGULAR, vocab)
    dfa = regex_to_dfa(REGULAR_REGEX)

    def oracle(text):
        out = []
        for i, t in enumerate(tokens):
            if i == 0:
                if dfa.matches(text):
                    out.append(0)
            elif dfa.run(text + t) >= 0:
                out.append(i)
        return out

    rng = random.Random(7)
    for _ in range(200):
        g = idx.guide()
        text = b""
        for _ in range(8):
            allowed = g.allowed_token_ids().tolist()
            assert allowed == oracle(text), text
            choices = [t for t in allowed if t != 0]
            if not choices:
                break
            t = rng.choice(choices)
            g.advance(t)
            text += tokens[t]


def test_kernel_matches_twin():
    vocab = Vocabulary.from_tokens(KW_TOKENS, stop_ids=[0])
    idx = compile_grammar(KEYWORDS, vocab)
    sc = idx.scanner
    live = idx.engine.live_tab
    tokens = {i: vocab[i] for i in range(vocab.size)}
    for c in range(sc.n_states):
        res = kernels.subterminal_walk(*vocab.trie.arrays, sc.trans, sc.acc_offsets, sc.acc_terms, sc.after,
                                       sc.is_ignore, live, sc.n_terminals, c, 256)
        out_tok, out_s, out_c, n, parent, term, n_seq, overflow = res
        assert overflow == 0

        def seq_of(s):
            seq = []
            while s > 0:
                seq.append(int(term[s]))
                s = int(parent[s])
            return tuple(reversed(seq))

        got = {(int(t), seq_of(int(s)), int(cc)) for t, s, cc in zip(out_tok, out_s, out_c)}
        want = kernels.py_subterminal_walk(tokens, sc.trans, sc.accept_lists, sc.after, sc.is_ignore, live, c)
        assert got == want


def test_tokens_spanning_terminals_and_ignored_whitespace():
    tokens = [b"<eos>", b'{"', b'a', b'":', b' 1', b'},', b'}', b'", "', b',', b' ', b'"b', b"1"]
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[0])
    idx = compile_grammar(JSONISH, vocab)
    g = idx.guide()
    for t in [1, 2, 3, 4]:  # {"a": 1
        assert t in g.allowed_token_ids()
        g.advance(t)
    assert 6 in g.allowed_token_ids() and 8 in g.allowed_token_ids()
    g.advance(6)
    assert g.is_accepting() and 0 in g.allowed_token_ids()


def test_lexical_ambiguity_never_commits():
    vocab = Vocabulary.from_tokens(KW_TOKENS, stop_ids=[0])
    idx = compile_grammar(KEYWORDS, vocab)
    # "int" may be the keyword or the start of a NAME ("intx = y;")
    assert idx.matches("int x;") and idx.matches("intx=y;") and idx.matches("inty;")
    assert idx.matches("if x then y;") and idx.matches("ifx theny;")
    assert not idx.matches("int;") and not idx.matches("if x then;")
