"""Grammar formats: GBNF and Lark parsing, errors, llama.cpp's test vectors, shipped grammars."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("LOCALGUIDE_CACHE_DIR", tempfile.mkdtemp(prefix="localguide-test-"))

from localguide import LocalguideError, Vocabulary  # noqa: E402
from localguide.grammar import GrammarError, compile_grammar, list_grammars  # noqa: E402

CORPORA = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpora"
if not CORPORA.is_dir():
    CORPORA = Path("/work/shared/corpora")

# Every byte as a token: enough to check languages (matches/is_prefix need no masks).
BYTES = Vocabulary.from_tokens([b""] + [bytes([i]) for i in range(256)], stop_ids=[0])


def compiled(grammar):
    return compile_grammar(grammar, BYTES)


def _cases(name):
    f = CORPORA / "llama-cpp-tests" / name
    if not f.is_file():
        pytest.skip(f"{f} is absent")
    return json.loads(f.read_text())["cases"]


def test_llama_cpp_integration_vectors():
    cases = _cases("test-grammar-integration.json")
    n = 0
    for case in cases:
        kind = case["kind"]
        if kind == "grammar":
            idx = compiled(case["grammar"])
            for s in case["passing"]:
                assert idx.matches(s), (case["description"], s)
            for s in case["failing"]:
                assert not idx.matches(s), (case["description"], s)
            n += 1
        elif kind == "grammar_no_root":
            with pytest.raises(GrammarError, match="root"):
                compiled(case["grammar"])
        elif kind == "grammar_build_fails":
            if "left recursion" in case["description"]:
                # llama.cpp cannot build these; an Earley parser handles left recursion.
                idx = compiled(case["grammar"])
                assert idx.is_prefix("")
            else:
                with pytest.raises(GrammarError):
                    compiled(case["grammar"])
    assert n >= 10


def test_left_recursion_languages():
    idx = compiled('root ::= "a" | root "a"')
    assert idx.matches("a") and idx.matches("aaaa") and not idx.matches("") and not idx.matches("ab")
    idx = compiled('root ::= asdf\nasdf ::= "a" | foo "b"\nfoo ::= "c" | asdf "d" | "e"')
    assert idx.matches("cb") and idx.matches("adb") and idx.matches("adbdb") and not idx.matches("ad")


def test_llguidance_lark_vectors():
    """llguidance's Lark dialect; rule names with dashes are not Lark, so that case is skipped."""
    ran = 0
    for case in _cases("test-grammar-llguidance.json"):
        if case["kind"] != "grammar":
            continue
        if "function-call" in case["grammar"]:
            with pytest.raises(GrammarError):
                compiled(case["grammar"])
            continue
        ran += 1
        idx = compiled(case["grammar"])
        for s in case["passing"]:
            assert idx.matches(s), (case["description"], s)
        for s in case["failing"]:
            assert not idx.matches(s), (case["description"], s)
    assert ran >= 9


def test_every_corpus_gbnf_compiles():
    folder = CORPORA / "gbnf"
    if not folder.is_dir():
        pytest.skip("corpus absent")
    files = sorted(folder.glob("*.gbnf"))
    assert len(files) == 9
    for f in files:
        idx = compiled(str(f))
        assert idx.is_prefix("")


def test_lark_corpus_grammars_compile():
    """The Lark corpus: 7 of its 8 grammars compile (``common.lark`` is a library the others
    import); Python's grammar needs an indentation postlexer and lookbehind in its strings,
    which no finite automaton and context-free grammar express: a clear error."""
    folder = CORPORA / "lark"
    if not folder.is_dir():
        pytest.skip("corpus absent")
    files = {f.name: f for f in folder.glob("*.lark")}
    assert len(files) == 9 and "common.lark" in files
    compiles = sorted(set(files) - {"common.lark", "python.lark"})
    assert len(compiles) == 7
    for name in compiles:
        assert compiled(str(files[name])).is_prefix(""), name
    with pytest.raises(GrammarError, match="lookaround"):
        compile_grammar(str(files["python.lark"]), BYTES, start="file_input")


def test_gbnf_errors_have_line_and_column():
    with pytest.raises(GrammarError) as e:
        compiled('root ::= "a"\nfoo ::= [a-z\n')
    assert e.value.line == 2
    with pytest.raises(GrammarError) as e:
        compiled('root ::= "a" bar\n')
    assert e.value.line == 1 and e.value.column == 14 and "bar" in str(e.value)
    with pytest.raises(GrammarError) as e:
        compiled('root ::= "\\q"')
    assert "escape" in str(e.value)
    with pytest.raises(GrammarError) as e:
        compiled('root ::= * "a"')
    assert "preceding" in str(e.value)
    assert isinstance(e.value, LocalguideError)


def test_lark_errors_have_line_and_column():
    with pytest.raises(GrammarError) as e:
        compiled('start: "a"\nfoo: )bar\n')
    assert e.value.line == 2
    with pytest.raises(GrammarError, match="not defined|undefined"):
        compiled('start: missing_rule\n')
    with pytest.raises(GrammarError, match="lookaround"):
        compiled('start: A\nA: /a(?=b)/\n')
    with pytest.raises(GrammarError, match="unknown grammar"):
        compile_grammar("no_such_grammar", BYTES)
    with pytest.raises(GrammarError, match="not found"):
        compile_grammar("/nonexistent/x.lark", BYTES)


def test_lark_features():
    g = r'''
start: _list{item, ","} | KW
_list{x, sep}: x (sep x)*
item: WORD | "#" INT
KW: "select"i
%import common.WORD
%import common.INT
%import common.WS
%ignore WS
'''
    idx = compiled(g)
    assert idx.matches("abc, def ,# 12") and idx.matches("SeLeCt") and idx.matches("select")
    assert not idx.matches("abc,") and not idx.matches("# x")


KEYWORDS = r'''
start: stmt (";" stmt)*
stmt: "select"i NAME ("," NAME)* "from"i NAME
NAME: /(?!(?:select|from)\b)[a-z_][a-z0-9_]*/i | /"[^"]+"/
%ignore " "
'''


def test_keywords_kept_out_of_a_name_by_a_lookahead():
    """``(?!K\\b)`` starting a word terminal removes K's strings from it, as lark reads it."""
    import lark

    idx = compiled(KEYWORDS)
    parser = lark.Lark(KEYWORDS, parser="earley", lexer="dynamic_complete")
    good = ["select a from b", "SELECT selected, fromage from \"from\"", "select _from from sel;select x from y"]
    bad = ["select select from b", "select a from from", "select a, FROM from b", "select a from b;"]
    for text in good + bad:
        assert _lark_accepts(parser, text) == (text in good) == idx.matches(text), text
    assert idx.is_prefix("select sel") and idx.is_prefix("select from_")
    for pattern in (r"/(?!ab)[a-z]+/", r"/x(?!a\b)[a-z]+/", r"/(?!a\b)[a-z.]+/", r"/(?!a.\b)[a-z]+/",
                    r"/(?=a\b)[a-z]+/", r"/(?<!a)[a-z]+/"):
        with pytest.raises(GrammarError, match=r"lookaround.*\(\?!K\\b\)"):
            compiled(f"start: A\nA: {pattern}\n")


SAMPLES = {
    "json": (['{"a": [1, 2.5e3, -0], "b": {"c": null}}', "[]", '"x\\u00e9"', " true", '{"k":"v"}'],
             ['{"a": 01}', "{'a': 1}", '{"a" 1}', "[1,]", '"\x01"', "nul"]),
    "arithmetic": (["1 + 2 * (3 - 4) / 5", "-1", "((2))", "1.5*2"], ["1 +", "(1", "1 2", "*1", ""]),
    "sql": (["SELECT a, b FROM t WHERE a > 1 ORDER BY b DESC LIMIT 5;",
             "select count(*) from users u join orders o on u.id = o.uid group by u.name having count(*) > 1",
             "SELECT DISTINCT x FROM (SELECT x FROM y) AS z UNION SELECT 1 FROM w",
             'SELECT selected, "select", fromage, ends FROM t WHERE x IN (SELECT y FROM u)'],
            ["SELECT FROM t", "SELECT a", "DELETE FROM t", "SELECT a FROM t WHERE a =", "SELECT a FROM t LIMIT x"]),
    "c": (["int main() { int x = 1; return x; }",
           "float f(float a, int b) {\n  while (a < b) { a = a + 1; }\n  if (a == b) { g(a); } else { return -a; }\n}",
           "void h() { // note\n for (int i = 0; i < 10; i = i + 1) { k(i, 2); } /* done */ }"],
          ["int main() { return; }", "main() {}", "int f( { }", "int f() { x = ; }"]),
    "csv": (['a,b,c\n1,2,3\n', 'name,"quoted, with comma"\n,\n', 'x\n'], ['a,b', '"unclosed\n', 'a"b\n']),
    "yaml": (["name: Alice\nage: 30\ntags:\n  - a\n  - b\n",
              "server:\n  host: example.com\n  ports: [80, 443]\n  tls:\n    enabled: true\n",
              "- one\n- 2\n- {a: 1}\n"],
             ["name Alice\n", "a:\n   b: 1\n", "- [1, 2\n", "a: 1"]),
    "chess": (["1. e4 e5\n2. Nf3 Nc6\n"], ["1. e4\n", "e4 e5\n"]),
    "list": (["- a\n- b\n"], ["a\n", "- a"]),
    "english": (["Hello, world!"], ["Héllo", ""]),
    "japanese": (["こんにちは"], ["hello"]),
    "json_arr": (['[\n{"a": 1},\n2]'], ['{"a": 1}', "[1]"]),
    "json-gbnf": (['{"a": [1, "x", true]}'], ["[1]", '{"a": 01}']),
    "arithmetic-gbnf": (["1+2=3\n"], ["1+2\n", "=3\n"]),
    "c-gbnf": (["int main(){return 0;}"], ["int main(){}x"]),
    "vllm-sql": (["SELECTcol_1fromtable_1wherecol_1=1"], ["SELECT col_1 from table_1 where col_1=1"]),
}


def test_readings_that_differ_only_in_the_past_share_a_configuration():
    """``customers WHERE`` reads as table ``customers`` or as table ``c`` aliased ``ustomers``;
    the Earley sets differ, their futures do not. Cut to what their items can still ask of
    their origins, they are one parser state, so nesting does not double the configurations."""
    idx = compiled("sql")
    text = ("SELECT * FROM customers WHERE " + "(SELECT * FROM customers WHERE " * 8 + "x" + ")" * 8).encode()
    st, most = idx.initial, 0
    for b in text:
        st = idx.step_bytes(st, bytes([b]))
        most = max(most, len(st.configs))
    assert most <= 4 and idx.matches(text.decode()) and not idx.matches(text.decode() + ")")


def test_parses_that_agree_on_what_is_left_share_a_configuration():
    """``SELECT DISTINCT city FROM`` reads with the keyword, or as column ``distinct`` aliased
    ``city``: different rules, but once both are at ``FROM . from_list ...`` the items have the
    same left-hand side and the same symbols after the dot, and are one item."""
    idx = compiled("sql")
    for text in ("SELECT DISTINCT city FROM t WHERE x", "SELECT DISTINCT city FROM (SELECT city FROM t WHERE x"):
        assert len(idx.step_bytes(idx.initial, text.encode()).configs) == 1, text
    assert idx.matches("SELECT DISTINCT city FROM t WHERE x") and idx.matches("SELECT distinct FROM t")


def test_every_shipped_grammar_has_samples_and_compiles():
    shipped = list_grammars()
    assert set(SAMPLES) == set(shipped)
    for name in shipped:
        good, bad = SAMPLES[name]
        idx = compiled(name)
        for s in good:
            assert idx.matches(s), (name, s)
        for s in bad:
            assert not idx.matches(s), (name, s)


def test_ignored_text_is_limited_and_never_trails():
    """The deliberate restriction: runs of ignored text of at most max_ignored_run bytes, none at the end."""
    js = compiled("json")
    assert js.matches(" true") and not js.matches(" true ") and not js.matches("{}\n") and not js.is_prefix("1 ")
    assert js.matches("[" + " " * 32 + "1]") and not js.matches("[" + " " * 33 + "1]")
    assert js.is_prefix("[\n" + " " * 31) and not js.is_prefix("[\n" + " " * 32)
    assert js.matches('{"a":\t\n 1}') and js.matches('[1,\n  2]')
    c = compiled("c")
    # whitespace between declarations is fine, at the end it is not
    assert c.matches("int f() {}\n\nint g() {}") and c.is_prefix("int f() {}\n") and not c.matches("int f() {}\n")
    loose = compile_grammar("json", BYTES, max_ignored_run=None)
    assert loose.matches("[" + " " * 100 + "1]") and not loose.matches("1 ")
    # several ignored terminals: one run, limited as a whole
    g = 'start: A+\nA: "a"\n%ignore " "\n%ignore /#[^\\n]*\\n/\n'
    idx = compile_grammar(g, BYTES, max_ignored_run=8)
    assert idx.matches("a #x\n a") and idx.matches("a#12345\na") and not idx.matches("a #123456\na")
    assert not idx.matches("a #x\n") and not idx.matches("a ")
    with pytest.raises(ValueError):
        compile_grammar("json", BYTES, max_ignored_run=0)


def test_shipped_lark_grammars_agree_with_lark():
    """Our language check agrees with lark's own Earley parser (all tokenizations) on the samples."""
    import lark

    for name in ("json", "arithmetic", "sql", "c", "csv", "yaml"):
        parser = lark.Lark(list_grammars()[name].read_text(), parser="earley", lexer="dynamic_complete")
        good, bad = SAMPLES[name]
        for s in good + bad:
            assert _lark_accepts(parser, s) == compiled(name).matches(s), (name, s)


def _lark_accepts(parser, text: str) -> bool:
    import lark

    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False
