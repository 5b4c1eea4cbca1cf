"""Schemas whose automaton is too large go through the grammar engine, with the same language.

A small ``max_states`` sends a small schema down that route, so the grammar's language
can be compared with the automaton's (built with the default budget) on the same texts.
"""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import random_walk, tokenize
from strategies import small_schemas
from localguide.grammar.compiled import GrammarIndex
from localguide.json_schema.schema import build_automaton, build_dfa, compile_json_schema
from localguide.json_schema.to_grammar import ast_to_cfg

WIDE = {
    "$defs": {
        "field": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
        "node": {"type": "object", "additionalProperties": False, "required": ["v"], "properties": {
            "v": {"type": "integer", "minimum": 0, "maximum": 99},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}},
    },
    "type": "object",
    "additionalProperties": False,
    "properties": {**{f"k{i}": {"$ref": "#/$defs/field"} for i in range(10)},
                   "tree": {"$ref": "#/$defs/node"},
                   "x": {"type": "number", "minimum": -5, "maximum": 5},
                   "tag": {"enum": ["a", "bb", None]}},
}
SMALL_BUDGET = 300  # states: WIDE's automaton needs more, so it takes the grammar route


def instance(rng: random.Random, depth: int = 0) -> dict:
    """A random valid document of WIDE."""
    def node(d):
        n = {"v": rng.randrange(100)}
        if d < 2 and rng.random() < 0.5:
            n["kids"] = [node(d + 1) for _ in range(rng.randrange(3))]
        return n

    doc = {}
    for i in range(10):
        if rng.random() < 0.3:
            doc[f"k{i}"] = ["".join(rng.choice("ab\u00e9z") for _ in range(rng.randrange(5)))
                            for _ in range(rng.randrange(3))]
    if rng.random() < 0.5:
        doc["tree"] = node(0)
    if rng.random() < 0.5:
        doc["x"] = rng.choice([0, -5, 5, 1.5, -0.25, 3e0])
    if rng.random() < 0.3:
        doc["tag"] = rng.choice(["a", "bb", None])
    return doc


def mutations(text: str, rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        i = rng.randrange(len(text) + 1)
        k = rng.randrange(3)
        if k == 0:
            out.append(text[:i] + rng.choice('{}[]",:0a ') + text[i:])
        elif k == 1:
            out.append(text[:i] + text[i + 1:])
        else:
            out.append(text[:i])
    return out


def test_large_automaton_takes_the_grammar_route():
    dfa, cfg, _ = build_automaton(WIDE, max_states=SMALL_BUDGET)
    assert dfa is None and cfg is not None
    dfa, cfg, compiled = build_automaton(WIDE)
    assert cfg is None and dfa is not None  # fits the default budget, with the full bounds
    assert not any("too large" in note for _, _, note in compiled.approximated)


def test_route_does_not_depend_on_laziness(smollm2_vocab):
    """``lazy`` only chooses when an automaton's Index is built; the grammar route stays."""
    for lazy in (False, True, None):
        assert isinstance(compile_json_schema(WIDE, smollm2_vocab, max_states=SMALL_BUDGET, lazy=lazy), GrammarIndex)
        assert isinstance(compile_json_schema(TREE, smollm2_vocab, max_recursion=None, lazy=lazy), GrammarIndex)
    # bounded, WIDE fits an automaton; exact (the default), its unlisted properties need the grammar
    assert not isinstance(compile_json_schema(WIDE, smollm2_vocab, max_recursion=3, lazy=False), GrammarIndex)
    assert isinstance(compile_json_schema(WIDE, smollm2_vocab), GrammarIndex)


def test_same_language_as_the_automaton(smollm2_vocab):
    """Valid documents, their mutations and their prefixes: the grammar and the DFA agree on every one."""
    idx = compile_json_schema(WIDE, smollm2_vocab, max_states=SMALL_BUDGET)
    assert isinstance(idx, GrammarIndex)
    dfa = build_dfa(WIDE)[0]
    rng = random.Random(0)
    seen = 0
    for _ in range(60):
        doc = instance(rng)
        for sep in ((",", ":"), (", ", ": ")):
            text = json.dumps(doc, separators=sep, ensure_ascii=False)
            for t in [text] + mutations(text, rng, 8):
                data = t.encode()
                assert idx.matches(data) == dfa.matches(data), t
                assert idx.is_prefix(data) == (dfa.run(data) >= 0), t
                seen += dfa.matches(data)
    assert seen >= 120


def test_tokenizations_accepted_and_walks_valid(model):
    """Completeness on the model's own tokenization (EOS exactly at the end); soundness of random walks."""
    idx = compile_json_schema(WIDE, model.vocabulary, max_states=SMALL_BUDGET)
    assert isinstance(idx, GrammarIndex)
    stops = model.vocabulary.stop_ids
    rng = random.Random(1)
    for _ in range(8):
        text = json.dumps(instance(rng), ensure_ascii=False)
        g = idx.guide()
        for t in tokenize(model, text):
            allowed = g.allowed_token_ids()
            assert not np.isin(stops, allowed).any()
            pos = np.searchsorted(allowed, t)
            assert pos < len(allowed) and allowed[pos] == t, text
            g.advance(t)
        assert np.isin(stops, g.allowed_token_ids()).all()
    for seed in range(6):
        g = idx.guide(max_tokens=80)
        tokens, stopped = random_walk(g, model.vocabulary, random.Random(seed), max_steps=81)
        assert stopped
        jsonschema.validate(json.loads(b"".join(model.vocabulary[t] for t in tokens)), WIDE)


def test_generation_and_cache(model):
    idx = model.compile(json_schema=WIDE, max_states=SMALL_BUDGET)
    assert isinstance(idx, GrammarIndex)
    from localguide.grammar import sources

    assert model.compile(json_schema=WIDE, max_states=SMALL_BUDGET) is idx  # held in memory
    sources._COMPILED.clear()  # (as a new process)
    again = model.compile(json_schema=WIDE, max_states=SMALL_BUDGET)  # from the disk cache
    assert again.initial is not idx.initial and again.allowed(again.initial).tolist() == \
        idx.allowed(idx.initial).tolist()
    for seed in range(2):
        guide = idx.guide(max_tokens=96)
        prompt = model.tokenize_prompt("A JSON object with a few fields:\n")
        from localguide.engines.llamacpp.sampler import Sampling

        toks = list(model.generate_tokens(prompt, guide, 96, Sampling(temperature=1.0, seed=seed)))
        text = b"".join(model.vocabulary[t] for t in toks).decode()
        jsonschema.validate(json.loads(text), WIDE)


def test_terminals_are_small_and_shared():
    from localguide.grammar.cfg import normalize
    from localguide.json_schema.schema import schema_to_ast

    cfg = normalize(ast_to_cfg(schema_to_ast(WIDE).node))
    assert max(t.dfa.n_states for t in cfg.terminals) <= 40
    # the ten fields share one definition: their values are the same symbols, not ten copies
    assert len(cfg.terminals) < 40


@pytest.mark.parametrize("schema", [{"type": "string"}, {"enum": [1, "x"]}, {"const": None}])
def test_tiny_schemas_as_grammars(smollm2_vocab, schema):
    """A root that is one terminal, or the empty string's neighbour, still makes a grammar."""
    from localguide.grammar.cfg import normalize
    from localguide.json_schema.schema import schema_to_ast

    cfg = normalize(ast_to_cfg(schema_to_ast(schema).node))
    idx = GrammarIndex(cfg, smollm2_vocab, "tiny")
    for v in ("x", 1, None, "", 2):
        assert idx.matches(json.dumps(v)) == jsonschema.Draft202012Validator(schema).is_valid(v)


# -- exact recursion (max_recursion=None) ---------------------------------------------------------

TREE = {"$defs": {"node": {"type": "object", "additionalProperties": False, "required": ["v"], "properties": {
    "v": {"type": "integer", "minimum": -9, "maximum": 9},
    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}}},
    "$ref": "#/$defs/node"}
# mutual recursion through two definitions, and a $ref with a sibling keyword (still expanded)
MUTUAL = {"$defs": {
    "expr": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/call"}]},
    "call": {"type": "object", "additionalProperties": False, "required": ["f", "args"], "properties": {
        "f": {"enum": ["add", "neg"]}, "args": {"type": "array", "items": {"$ref": "#/$defs/expr"}}}}},
    "type": "object", "required": ["main"], "additionalProperties": False,
    "properties": {"main": {"$ref": "#/$defs/expr"}, "note": {"$ref": "#/$defs/call", "maxProperties": 2}}}


# recursion through a $ref merged with another keyword, and through a property that a pattern
# property also covers (two schemas for one value, both naming the definition)
MERGED = {"$defs": {"node": {"type": "object", "additionalProperties": False, "properties": {
    "v": {"type": "integer"},
    "kids": {"type": "array", "items": {"$ref": "#/$defs/node", "maxProperties": 2}}},
    "patternProperties": {"^k": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
    "$ref": "#/$defs/node"}
# values the schema leaves free (a label selector's values, an object's other properties)
FREE = {"type": "object", "required": ["selector"], "properties": {
    "selector": {"type": "object", "properties": {"matchLabels": {}}},
    "n": {"type": "integer"}}}


def random_json(rng: random.Random, depth: int):
    r = rng.random()
    if depth == 0 or r < 0.25:
        return rng.choice([None, True, 1, -2.5, "x", "é\n"])
    if r < 0.65:
        return {rng.choice("abcd"): random_json(rng, depth - 1) for _ in range(rng.choice([0, 1, 2]))}
    return [random_json(rng, depth - 1) for _ in range(rng.choice([0, 1, 2]))]


def random_free(rng: random.Random, depth: int):
    doc = {"selector": {"matchLabels": random_json(rng, depth)}, "other": random_json(rng, depth)}
    if rng.random() < 0.1:
        doc["n"] = "not an integer"
    elif rng.random() < 0.05:
        del doc["selector"]
    return doc


def random_tree(rng: random.Random, depth: int):
    n = {"v": rng.randrange(-9, 10) if rng.random() < 0.97 else 10}  # now and then out of range
    if depth > 0 and rng.random() < 0.85:
        n["kids"] = [random_tree(rng, depth - 1) for _ in range(3 if rng.random() < 0.03 else rng.choice([1, 2]))]
    return n


def random_merged(rng: random.Random, depth: int):
    n = {}
    if rng.random() < 0.8:
        n["v"] = rng.randrange(-9, 10) if rng.random() < 0.97 else "x"
    if depth > 0 and rng.random() < 0.85:
        n["kids"] = [random_merged(rng, depth - 1) for _ in range(rng.choice([1, 2]))]
    if depth > 0 and rng.random() < 0.1:  # a third property: its parent's maxProperties fails
        n["kx"] = [random_merged(rng, depth - 1)]
    return n


def random_expr(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.2:
        return rng.randrange(-99, 100) if rng.random() < 0.97 else rng.choice(["x", 1.5])
    return {"f": "add" if rng.random() < 0.5 else rng.choice(["neg", "neg", "mul"]),
            "args": [random_expr(rng, depth - 1) for _ in range(rng.choice([1, 1, 2]))]}


@pytest.mark.parametrize("schema,make", [(TREE, lambda r: random_tree(r, 7)),
                                         (MUTUAL, lambda r: {"main": random_expr(r, 7)}),
                                         (FREE, lambda r: random_free(r, 7)),
                                         (MERGED, lambda r: random_merged(r, 6))],
                         ids=["tree", "mutual", "free values", "merged refs"])
def test_exact_recursion_is_the_schemas_language(smollm2_vocab, schema, make):
    """By default, at any depth, a document is accepted exactly when jsonschema says it is valid,
    and ``inspect`` calls nothing approximated."""
    from localguide.json_schema.schema import inspect_schema

    idx = compile_json_schema(schema, smollm2_vocab)
    assert isinstance(idx, GrammarIndex)
    assert "approximated" not in {status for _, _, status in inspect_schema(schema)}
    bounded = build_dfa(schema)[0]
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(2)
    deep_valid = 0
    for _ in range(150):
        doc = make(rng)
        text = json.dumps(doc)
        valid = validator.is_valid(doc)
        assert idx.matches(text) == valid, text
        deep_valid += valid and not bounded.matches(text.encode())  # beyond the bounded expansion
        for t in mutations(text, rng, 3):
            try:
                d = json.loads(t)
            except ValueError:
                assert not idx.matches(t), t
                continue
            if not validator.is_valid(d):
                assert not idx.matches(t), t  # never an invalid document
            elif t == json.dumps(d):
                assert idx.matches(t), t  # every valid one in json.dumps's layout
    assert deep_valid > 5


def test_exact_recursion_notes_and_limits():
    from localguide.json_schema.schema import SchemaError, inspect_schema, schema_to_ast

    assert not schema_to_ast(TREE, max_recursion=None).approximated
    assert not schema_to_ast(FREE, max_recursion=None).approximated  # free values: any depth
    assert schema_to_ast(FREE).approximated
    assert schema_to_ast(TREE).approximated  # bounded by default
    statuses = {(p, k): s for p, k, s in inspect_schema(TREE, max_recursion=None)}
    assert "approximated" not in statuses.values()
    # pretty output indents each level differently: bounded even with None, and reported
    pretty = schema_to_ast(TREE, max_recursion=None, whitespace="pretty")
    assert not pretty.rules and any("expanded 3 levels" in note for _, _, note in pretty.approximated)
    statuses = {(p, k): s for p, k, s in inspect_schema(TREE, whitespace="pretty")}
    assert "approximated" in statuses.values()
    with pytest.raises(SchemaError, match="grammar"):
        build_dfa(TREE, max_recursion=None)
    # no recursion: the automaton as usual
    dfa, cfg, _ = build_automaton({"type": "array", "items": {"type": "integer"}}, max_recursion=None)
    assert dfa is not None and cfg is None


def cluster(n: int) -> dict:
    """``n`` definitions that each refer to the next two, every reference made twice over (a
    property's schema and a pattern property's schema that covers its name, alike but for their
    titles), as in the Washington Post's ANS schemas."""
    defs = {}
    for i in range(n):
        items = {"anyOf": [{"$ref": f"#/$defs/d{(i + 1) % n}"}, {"$ref": f"#/$defs/d{(i + 2) % n}"}]}
        defs[f"d{i}"] = {"type": "object", "properties": {
            "id": {"type": "string"}, **{p: {"type": "array", "items": items, "title": p} for p in ("p1", "p2")}},
            "patternProperties": {"^p": {"type": "array", "items": items}}}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def test_definitions_that_refer_to_each_other_compile_once(monkeypatch, smollm2_vocab):
    """Exact recursion compiles each definition of a recursive cluster once; a bounded expansion
    expands it on every way in, and past ``MAX_EXPANSIONS`` says so instead of running on."""
    from localguide.json_schema import compiler
    from localguide.json_schema.schema import SchemaError, schema_to_ast

    monkeypatch.setattr(compiler, "MAX_EXPANSIONS", 3000)
    schema = cluster(24)
    exact = schema_to_ast(schema, max_recursion=None)
    assert exact.rules and not exact.approximated
    with pytest.raises(SchemaError, match=r"more than 3,000 subschema compiles \(the bound compiler.MAX_EXPANSIONS; "
                                          r"at #/\$defs/.*max_recursion=None"):
        schema_to_ast(schema, max_recursion=3)
    idx = compile_json_schema(schema, smollm2_vocab)
    validator = jsonschema.Draft202012Validator(schema)
    deep = {"id": "a", "p1": [{"p1": [{"p2": [{"px": [{"id": "z", "p1": [{"p2": [{"p9": [], "q": 1}]}]}]}]}]}]}
    for doc in (deep, {"p1": [{"p2": [{"p3": [{"p1": [{"id": 5}]}]}]}]}, {"p1": [{"px": [{"id": 1}]}]},
                {"p1": [{"p2": [{"pz": [{"p1": {}}]}]}]}):
        assert idx.matches(json.dumps(doc)) == validator.is_valid(doc), doc


def test_exact_recursion_on_the_model(model):
    """Deep trees tokenized by the model are accepted; generated trees validate."""
    idx = model.compile(json_schema=TREE, max_recursion=None)
    stops = model.vocabulary.stop_ids
    rng = random.Random(3)
    for _ in range(4):
        doc = random_tree(rng, 6)
        if not jsonschema.Draft202012Validator(TREE).is_valid(doc):
            continue
        g = idx.guide()
        for t in tokenize(model, json.dumps(doc)):
            assert g.accepts(t)
            g.advance(t)
        assert np.isin(stops, g.allowed_token_ids()).all()
    for seed in range(3):
        text = model.generate("A tree as JSON:", json_schema=TREE, max_recursion=None, seed=seed, temperature=1.0,
                              max_tokens=120)
        jsonschema.validate(json.loads(text), TREE)


def dfa_strings(dfa, rng: random.Random, n: int, max_len: int = 60) -> list[bytes]:
    """Random strings of ``dfa``'s language: walks that stop at accepting states."""
    out = []
    trans, acc = dfa.transitions, dfa.accepting
    for _ in range(n * 20):
        if len(out) >= n:
            break
        s, buf = 0, bytearray()
        while len(buf) < max_len:
            if acc[s] and rng.random() < 0.25:
                out.append(bytes(buf))
                break
            nxt = np.flatnonzero(trans[s] >= 0)
            if len(nxt) == 0:
                break
            b = int(nxt[rng.randrange(len(nxt))])
            buf.append(b)
            s = int(trans[s, b])
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_schemas(), st.sampled_from([0, 4, 16]), st.randoms(use_true_random=False))
def test_grammar_equals_automaton(smollm2_vocab, schema, terminal_size, rng):
    """Property: the grammar route's language is the automaton's, however the AST is cut into
    terminals (0: every node a rule). Completeness on the automaton's strings and their prefixes,
    agreement on mutations, soundness of random walks over the grammar guide's tokens."""
    from localguide.grammar.cfg import normalize
    from localguide.json_schema.schema import schema_to_ast
    from localguide.regex.ast_dfa import ast_to_dfa

    node = schema_to_ast(schema, any_depth=1, max_length=8, max_items=3).node
    dfa = ast_to_dfa(node)
    idx = GrammarIndex(normalize(ast_to_cfg(node, terminal_size=terminal_size)), smollm2_vocab, "schema")
    for data in dfa_strings(dfa, rng, 12):
        assert idx.matches(data), data
        for i in range(0, len(data), 3):
            assert idx.is_prefix(data[:i]), data[:i]
        text = data.decode("utf-8", "surrogatepass")
        for m in mutations(text, rng, 4):
            b = m.encode("utf-8", "surrogatepass")
            assert idx.matches(b) == dfa.matches(b), m
            assert idx.is_prefix(b) == (dfa.run(b) >= 0), m
    g = idx.guide(max_tokens=40)
    tokens, stopped = random_walk(g, smollm2_vocab, rng, max_steps=41)
    assert stopped and dfa.matches(b"".join(smollm2_vocab[t] for t in tokens))


def test_tightened_bounds_only_without_the_grammar_engine():
    """With the grammar engine the full bounds stay (exact); ``build_dfa`` tightens them instead."""
    budget = 1900  # WIDE's full bounds need 1970 states; tightened once, it fits
    dfa, cfg, compiled = build_automaton(WIDE, max_states=budget)
    assert dfa is None and cfg is not None and not any("too large" in n for _, _, n in compiled.approximated)
    dfa, compiled = build_dfa(WIDE, max_states=budget)
    assert dfa is not None and any("too large" in note for _, _, note in compiled.approximated)


def test_early_give_up_and_reused_builder_give_the_same_grammar():
    """A hopeless automaton is given up on an estimate; the grammar built with its builder's
    sub-automata is the grammar built from scratch."""
    from localguide.json_schema.schema import schema_to_ast
    from localguide.regex.ast_dfa import Builder, TooLargeError

    node = schema_to_ast(WIDE).node
    b = Builder(node, 20, give_up=2.0)
    with pytest.raises(TooLargeError, match="estimated"):
        b.dfa(node)
    with pytest.raises(TooLargeError) as e:
        Builder(node, 20).dfa(node)
    assert "estimated" not in str(e.value)
    fresh, reused = ast_to_cfg(node), ast_to_cfg(node, builder=b)
    assert fresh.rules == reused.rules and fresh.start == reused.start
    assert [t.dfa.transitions.tobytes() + t.dfa.accepting.tobytes() for t in fresh.terminals] == \
           [t.dfa.transitions.tobytes() + t.dfa.accepting.tobytes() for t in reused.terminals]


def _naive_merge_classes(atoms, follow, last):
    """The coarsest partition refinement, round by round over all instances (the reference)."""
    keys: dict = {}
    cls = [keys.setdefault((id(atoms[i]), i in last), len(keys)) for i in range(len(atoms))]
    while True:
        keys = {}
        new = [keys.setdefault((cls[i], frozenset(cls[j] for j in follow[i])), len(keys)) for i in range(len(atoms))]
        if len(set(new)) == len(set(cls)):
            return new
        cls = new


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 30).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 2), min_size=n, max_size=n),
    st.lists(st.sets(st.integers(0, n - 1), max_size=3), min_size=n, max_size=n),
    st.sets(st.integers(0, n - 1)))))
def test_merge_instances_is_the_coarsest_bisimulation(graph):
    """Property: instances merged exactly when the naive refinement puts them in one class."""
    from localguide.regex.ast_dfa import _merge_instances

    kinds, follow, last = graph
    subs = [object(), object(), object()]
    atoms = [subs[k] for k in kinds]
    ref = _naive_merge_classes(atoms, follow, last)
    new_atoms, new_follow, _, new_last = _merge_instances(atoms, [set(f) for f in follow], set(), set(last))
    assert len(new_atoms) == len(set(ref))
    # The merged glue is the quotient: each class's sub-DFA, end flag and successor classes.
    rep = {}
    for i, c in enumerate(ref):
        rep.setdefault(c, i)
    quotient = sorted((id(atoms[i]), i in last, tuple(sorted({ref[j] for j in follow[i]}))) for i in rep.values())
    assert sorted(id(a) for a in new_atoms) == sorted(q[0] for q in quotient)
    assert len(new_last) == len({ref[i] for i in last})


def test_hopeless_automaton_is_not_tried(monkeypatch):
    """An AST of more than ``GRAMMAR_POSITIONS`` positions per budgeted state goes straight to
    the grammar route; just under that, the automaton is attempted first."""
    from localguide.regex import ast_dfa as jsonschema_dfa
    from localguide.json_schema.schema import GRAMMAR_POSITIONS, schema_to_ast
    from localguide.json_schema.to_grammar import sizes

    node = schema_to_ast(WIDE).node
    positions = sizes(node)[id(node)]
    tried = []
    real = jsonschema_dfa.Builder.dfa
    # the attempt's builder has a give-up estimate; the grammar's terminals use another one
    monkeypatch.setattr(jsonschema_dfa.Builder, "dfa",
                        lambda self, n: (self.give_up is not None and tried.append(n)) or real(self, n))
    budget = positions // GRAMMAR_POSITIONS - 1
    dfa, cfg, _ = build_automaton(WIDE, max_states=budget)
    assert cfg is not None and not tried
    dfa, cfg, _ = build_automaton(WIDE, max_states=positions // GRAMMAR_POSITIONS + 1)
    assert cfg is not None and tried  # attempted, too large all the same


def test_schema_grammars_are_held_in_memory(smollm2_vocab):
    """A schema on the grammar route is one index per process, as a compiled grammar is: the masks
    its guides computed serve the next generation (a fresh load from disk would start over)."""
    first = compile_json_schema(FREE, smollm2_vocab)
    g = first.guide(max_tokens=64)
    g.allowed_token_ids()
    again = compile_json_schema(json.loads(json.dumps(FREE)), smollm2_vocab)
    assert again is first
    assert compile_json_schema(FREE, smollm2_vocab, strict=True) is not first
