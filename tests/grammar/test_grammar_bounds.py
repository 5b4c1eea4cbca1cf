"""Every grammar parse is bounded (issue 51): nesting, rule chains, rule counts and repetition
counts are iterative or an error naming the bound and the line, never a RecursionError or a
MemoryError."""

from __future__ import annotations

import pytest

from localguide.errors import GrammarError
from localguide.grammar import compile_grammar
from localguide.grammar import lark_frontend
from localguide.grammar.gbnf import MAX_NESTING, MAX_RULES, gbnf_to_cfg


def _chain(n: int, twice: bool = False) -> str:
    body = "".join(f"r{i} ::= r{i + 1}{f' r{i + 1}' if twice else ''}\n" for i in range(n))
    return f'root ::= r0\n{body}r{n} ::= "a"\n'


def test_gbnf_parentheses_past_the_bound_name_it_and_the_column():
    with pytest.raises(GrammarError, match="MAX_NESTING") as e:
        gbnf_to_cfg("root ::= " + "(" * 200 + '"a"' + ")" * 200)
    assert (e.value.line, e.value.column) == (1, 10 + MAX_NESTING)


def test_a_long_chain_of_rules_compiles_to_the_same_language(smollm2_vocab):
    idx = compile_grammar(_chain(400), smollm2_vocab)
    g = idx.guide()
    a = next(t for t in g.allowed_token_ids().tolist() if smollm2_vocab[t] == b"a")
    g.advance(a)
    assert g.is_accepting()


def test_too_many_rules_and_exponential_inlining_are_errors():
    with pytest.raises(GrammarError, match="MAX_RULES") as e:
        gbnf_to_cfg(_chain(20_000))
    assert e.value.line == MAX_RULES + 1
    with pytest.raises(GrammarError, match="MAX_TERMINAL_STATES"):
        gbnf_to_cfg(_chain(30, twice=True))
    with pytest.raises(GrammarError, match="repetition count above") as e:
        gbnf_to_cfg('root ::= "a"{1000000000}')
    assert (e.value.line, e.value.column) == (1, 13)


def test_a_lark_terminal_nested_past_the_bound_is_a_grammar_error(smollm2_vocab):
    with pytest.raises(GrammarError, match="MAX_NESTING"):
        compile_grammar("start: A\nA: /" + "(" * 200 + "a" + ")" * 200 + "/", smollm2_vocab)


def _column_past(text: str, n: int) -> int:
    """The column of the opening bracket n + 1 deep in ``text`` (brackets only opening, then closing)."""
    return [i for i, c in enumerate(text) if c in "(["][n] + 1


@pytest.mark.parametrize("opened, closed", [("(", ")"), ("[", "]"), ('("b" [', "]) "), ("(", ")?")])
def test_a_lark_rule_nested_past_the_bound_names_it_and_the_place(smollm2_vocab, opened, closed):
    n = lark_frontend.MAX_NESTING
    deep = 'start: "x" ' + opened * 300 + '"a"' + closed * 300
    with pytest.raises(GrammarError, match="MAX_NESTING") as e:
        compile_grammar(deep, smollm2_vocab)
    assert (e.value.line, e.value.column) == (1, _column_past(deep, n))
    # (lark reads a rule nested as deep as the bound: the bound lies below lark's own recursion)
    k = n // sum(c in "([" for c in opened)
    lark_frontend.lark_to_cfg('start: "x" ' + opened * k + '"a"' + closed * k)


def test_brackets_in_lark_strings_regexes_and_comments_are_not_nesting():
    text = ('start: "(" A B // ' + "(" * 300 + "\n# " + "[" * 300 +
            '\nA: "' + "(" * 300 + '"\nB: /' + "[(]" * 300 + "/\n")
    lark_frontend.check_nesting(text)
    lark_frontend.lark_to_cfg(text)


@pytest.mark.parametrize("tilde", ["~2", "~ 2", "~1..2"])
def test_lark_repetitions_inside_one_another_past_the_bound_name_it_and_the_place(tilde):
    """``(("b")~2)~2``... lark writes out every copy: 2^14 of them is past the bound, refused at
    the ``~`` that crosses it (line 2), before lark reads the grammar."""
    n = 14
    text = "// nested\nstart: " + "(" * n + '"b"' + (")" + tilde) * n + "\n"
    with pytest.raises(GrammarError, match="MAX_EXPANSION") as e:
        lark_frontend.lark_to_cfg(text)
    assert e.value.line == 2
    cross = text.index(")" + tilde, text.index(")" + tilde) + 13 * len(")" + tilde)) + 1
    assert e.value.column == cross - text.index("\n")


def test_lark_repetitions_within_the_bound_read_as_lark_reads_them():
    """Nested to 2^13 copies, a long single repetition, and a repetition after a name (not the
    group before it): all read, as the same language lark's own parser accepts."""
    import lark

    n = 13
    text = "start: " + "(" * n + '"b"' + ")~2" * n + "\n"
    cfg = lark_frontend.lark_to_cfg(text)
    assert cfg.start == "start"
    lark_frontend.lark_to_cfg('start: ("a" "b")~3 x~5000\nx: "c"\n')  # (x's ~5000 is not the group's)
    parser = lark.Lark('start: ("a" "b")~3 x~2\nx: "c"\n', parser="earley")
    parser.parse("abababcc")
