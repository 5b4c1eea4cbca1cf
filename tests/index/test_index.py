"""The Index and its Guide: exact masks, no dead ends, stop tokens, budgets, and the two
contract properties on both real vocabularies:

* soundness: every random walk over ``allowed_token_ids()`` that ends at a stop token
  spells valid UTF-8 that fully matches the pattern;
* completeness: the model's own tokenization of any string of the language is
  accepted token by token, with a stop token allowed exactly where the text is complete.
"""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import localguide
from localguide import (BudgetError, EmptyLanguageError, Index, TokenNotAllowedError, Vocabulary,
                        compile_regex)
from localguide.regex import regex_to_dfa

from conftest import byte_fallback_tokens, random_walk, tokenize
from strategies import language_samples, matches, regex_pairs, regexes

PROPERTY = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much])


# --- helpers -------------------------------------------------------------------------

def decodes_to_match(pattern: str, data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return matches(pattern, text)


def index_states(index: Index):
    """BFS over the index from state 0: {state: representative token path}."""
    stops = set(index.stop_ids.tolist())
    paths = {0: []}
    queue = deque([0])
    while queue:
        s = queue.popleft()
        for t, q in zip(index.allowed(s).tolist(), index.successors(s).tolist()):
            if t in stops:
                assert q == -1
                continue
            assert 0 <= q < index.n_states
            if q not in paths:
                paths[q] = paths[s] + [t]
                queue.append(q)
    return paths


def true_distances(index: Index) -> list[int]:
    """Fewest tokens to an accepting state, by forward BFS from each state (independent)."""
    out = []
    stops = set(index.stop_ids.tolist())
    for s0 in range(index.n_states):
        seen = {s0: 0}
        queue = deque([s0])
        found = -1
        while queue:
            s = queue.popleft()
            if index.accepting[s]:
                found = seen[s]
                break
            for t, q in zip(index.allowed(s).tolist(), index.successors(s).tolist()):
                if t not in stops and q not in seen:
                    seen[q] = seen[s] + 1
                    queue.append(q)
        out.append(found)
    return out


def check_index_structure(index: Index, vocab: Vocabulary) -> None:
    """Invariants that hold for every Index, whatever the vocabulary."""
    stop_ids = vocab.stop_ids
    assert index.vocab_size == vocab.size
    np.testing.assert_array_equal(index.stop_ids, stop_ids)
    paths = index_states(index)
    assert set(paths) == set(range(index.n_states)), "unreachable states are stored"
    masks = set()
    for s in range(index.n_states):
        allowed = index.allowed(s)
        assert allowed.dtype == np.int32
        assert np.all(np.diff(allowed) > 0), "allowed ids must be sorted and unique"
        assert len(allowed) == 0 or (allowed[0] >= 0 and allowed[-1] < vocab.size)
        has_stop = np.isin(stop_ids, allowed)
        # Stop tokens: all of them exactly in accepting states.
        assert has_stop.all() if index.accepting[s] else not has_stop.any(), s
        # No dead ends: every state can still reach acceptance.
        assert index.distance[s] >= 0
        nexts = index.successors(s)
        assert len(nexts) == len(allowed)
        real = nexts[nexts >= 0]
        assert index.max_next_distance[s] == (int(index.distance[real].max()) if len(real) else 0)
        masks.add(allowed.tobytes())
    # Identical masks are stored once, and every stored mask is used.
    assert index.n_masks == len(masks)
    assert sorted(set(index.state_mask.tolist())) == list(range(index.n_masks))
    assert index.distance.tolist() == true_distances(index)
    # Masks allowing most of the vocabulary carry their complement.
    everything = np.arange(vocab.size, dtype=np.int32)
    for m in range(index.n_masks):
        mask = index.mask_tokens[index.mask_offsets[m]:index.mask_offsets[m + 1]]
        excl = index.excl_tokens[index.excl_offsets[m]:index.excl_offsets[m + 1]]
        if 2 * len(mask) > vocab.size:
            np.testing.assert_array_equal(excl, np.setdiff1d(everything, mask))


class TokenRunner:
    """All tokens of a vocabulary run through a DFA at once (vectorized over tokens)."""

    def __init__(self, vocab: Vocabulary):
        lengths = np.diff(vocab.offsets)
        self.lengths = lengths
        width = max(1, int(lengths.max()))
        self.bytes = np.zeros((vocab.size, width), np.uint8)
        flat = np.asarray(vocab.flat)
        for d in range(width):
            has = lengths > d
            self.bytes[has, d] = flat[vocab.offsets[:-1][has] + d]

    def run(self, trans: np.ndarray, state: int) -> np.ndarray:
        """DFA state after each token from ``state`` (-1: dead); empty tokens stay -1."""
        cur = np.where(self.lengths > 0, state, -1).astype(np.int64)
        for d in range(self.bytes.shape[1]):
            live = (cur >= 0) & (self.lengths > d)
            cur[live] = trans[cur[live], self.bytes[live, d]]
        return cur


_runners: dict[str, TokenRunner] = {}


def runner(vocab: Vocabulary) -> TokenRunner:
    if vocab.fingerprint not in _runners:
        _runners[vocab.fingerprint] = TokenRunner(vocab)
    return _runners[vocab.fingerprint]


def check_exact_masks(index: Index, dfa, vocab: Vocabulary, max_states: int = 10_000) -> None:
    """Each mask is exactly the tokens that keep the DFA alive (the vocabulary must spell
    every byte by itself, so any live DFA state can still be completed), plus the stop
    tokens in accepting states; each successor is the DFA state after the token."""
    run = runner(vocab)
    paths = index_states(index)
    dfa_state = {}
    for s, path in list(paths.items())[:max_states]:
        q = dfa.run(vocab.decode(path))
        assert q >= 0
        dfa_state[s] = q
        assert bool(index.accepting[s]) == bool(dfa.accepting[q])
        after = run.run(dfa.transitions, q)
        want = np.flatnonzero(after >= 0).astype(np.int32)
        if dfa.accepting[q]:
            want = np.union1d(want, vocab.stop_ids).astype(np.int32)
        np.testing.assert_array_equal(index.allowed(s), want)
        for t, nxt in zip(index.allowed(s).tolist(), index.successors(s).tolist()):
            if nxt >= 0 and nxt in dfa_state:
                assert dfa_state[nxt] == after[t]


# --- synthetic vocabularies: exact masks ----------------------------------------------------

@st.composite
def spelling_vocabularies(draw, pair):
    """Every single byte, the stop token, and random pieces of strings of the language
    (with duplicates and prefixes of one another)."""
    tokens = [b""] + [bytes([b]) for b in range(256)]
    for _ in range(draw(st.integers(0, 3))):
        text = draw(language_samples(pair)).encode("utf-8")
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=3)))
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        tokens += [p for p in pieces if len(p) > 1]
    extra = draw(st.lists(st.sampled_from(["ab", "a", "\u00e9", "日本", "\n", "😀", "0", "00"]), max_size=6))
    tokens += [e.encode() for e in extra] + [tokens[-1]]
    stops = [0] + ([len(tokens)] if draw(st.booleans()) else [])
    if len(stops) == 2:
        tokens.append(b"<eot>")  # a stop token with text: its text never counts
    return Vocabulary.from_tokens(tokens, stops)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regex_pairs(), st.data())
def test_exact_masks_on_synthetic_vocabulary(pair, data):
    pattern = pair[0]
    vocab = data.draw(spelling_vocabularies(pair))
    dfa = regex_to_dfa(pattern)
    index = Index.build(dfa, vocab, pattern)
    check_index_structure(index, vocab)
    check_exact_masks(index, dfa, vocab)


def test_stop_token_text_never_counts():
    vocab = Vocabulary.from_tokens([b"a", b"b", b"</s>"], [2])
    assert vocab[2] == b""
    index = Index.build(regex_to_dfa("a+"), vocab)
    assert index.allowed(0).tolist() == [0]


def test_duplicate_tokens_are_all_allowed():
    vocab = Vocabulary.from_tokens([b"", b"ab", b"a", b"ab", b"b", b"abc"], [0])
    index = Index.build(regex_to_dfa("(ab)+"), vocab)
    g = index.guide()
    assert g.allowed_token_ids().tolist() == [1, 2, 3]
    g.advance(3)
    assert g.allowed_token_ids().tolist() == [0, 1, 2, 3]


# --- the real vocabularies -------------------------------------------------------------------

REAL_PATTERNS = [
    r"\s*([Yy]es|[Nn]o|[Nn]ever|[Aa]lways)",
    r"(19|20)\d{2}",
    r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}",
    r"[😀-🙏]{1,3}",
    r"日本語|中文",
    r"[^\n]{0,3}x",
    r".{2}",
]


@pytest.mark.parametrize("pattern", REAL_PATTERNS)
def test_index_properties_on_real_vocabulary(vocab, pattern):
    index = compile_regex(pattern, vocab)
    check_index_structure(index, vocab)
    check_exact_masks(index, regex_to_dfa(pattern), vocab, max_states=6)


# --- soundness ---------------------------------------------------------------------------

@PROPERTY
@given(pattern=regexes(), budget=st.integers(1, 12), rng=st.randoms(use_true_random=False))
def test_soundness_random_walks(vocab, pattern, budget, rng):
    index = compile_regex(pattern, vocab)
    dfa = regex_to_dfa(pattern)  # for prefixes; re would backtrack exponentially on some
    need = int(index.distance[0])
    if need > budget:
        with pytest.raises(BudgetError):
            index.guide(max_tokens=budget)
        budget = need
    stops = set(vocab.stop_ids.tolist())
    for _ in range(4):
        guide = index.guide(max_tokens=budget)
        tokens, stopped = random_walk(guide, vocab, rng, max_steps=budget + 1)
        assert stopped, "a walk under a budget must end with a stop token within budget + 1 steps"
        assert len(tokens) <= budget
        data = vocab.decode(tokens)
        note(f"walk {tokens} -> {data!r}")
        text = data.decode("utf-8")  # raises on invalid UTF-8
        assert matches(pattern, text), (pattern, text)
        # Replay: acceptance and stop tokens exactly at the complete prefixes.
        replay = index.guide()
        for i, t in enumerate(tokens + [None]):
            complete = dfa.matches(vocab.decode(tokens[:i]))
            assert replay.is_accepting() == complete
            assert bool(np.isin(vocab.stop_ids, replay.allowed_token_ids()).all()) == complete
            if t is not None:
                assert t not in stops
                replay.advance(t)


# --- completeness -------------------------------------------------------------------------

@PROPERTY
@given(pair=regex_pairs(), data=st.data())
def test_completeness_model_tokenization(model, pair, data):
    pattern = pair[0]
    vocab = model.vocabulary
    index = compile_regex(pattern, vocab)
    dfa = regex_to_dfa(pattern)  # for prefixes; re would backtrack exponentially on some
    for _ in range(3):
        text = data.draw(language_samples(pair), label="text")
        tokens = tokenize(model, text)
        # A tokenizer may normalize (SentencePiece spells U+2581 as a space): such a
        # tokenization is not a spelling of the text, so it is not evidence either way.
        assume(vocab.decode(tokens) == text.encode("utf-8"))
        note(f"{text!r} -> {tokens}")
        guides = [index.guide(), index.guide(max_tokens=len(tokens))]
        for i, t in enumerate(tokens):
            complete = dfa.matches(vocab.decode(tokens[:i]))
            for g in guides:
                assert g.is_accepting() == complete, (text, i)
                allowed = g.allowed_token_ids()
                assert t in allowed, f"token {t} ({vocab[t]!r}) of {text!r} is not allowed at step {i}"
                assert bool(np.isin(vocab.stop_ids, allowed).any()) == complete
                g.advance(t)
        for g in guides:
            assert g.is_accepting()
            allowed = g.allowed_token_ids()
            assert np.isin(vocab.stop_ids, allowed).all()
            g.advance(int(vocab.eos_id))
            assert g.is_finished()


# --- partial UTF-8 ---------------------------------------------------------------------------

@pytest.mark.parametrize("pattern", [r"[😀-🙏]{1,3}", r"日本語|中文"])
def test_partial_utf8_walks_are_valid(vocab, pattern):
    index = compile_regex(pattern, vocab)
    rng = random.Random(1234)
    seen_split = False
    for _ in range(300):
        tokens, stopped = random_walk(index.guide(max_tokens=16), vocab, rng, p_stop=0.5, max_steps=17)
        assert stopped
        data = vocab.decode(tokens)
        assert matches(pattern, data.decode("utf-8")), data
        seen_split |= any(not _is_utf8(vocab[t]) for t in tokens)
    assert seen_split, "no walk used a token that is a partial UTF-8 character"


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@pytest.mark.parametrize("pattern,text", [(r"[😀-🙏]{1,3}", "😀🙏"), (r"日本語|中文", "中文")])
def test_gemma_byte_fallback_tokens_spell_the_text(gemma3, pattern, text):
    byte_ids = byte_fallback_tokens(gemma3)
    vocab = gemma3.vocabulary
    guide = compile_regex(pattern, vocab).guide()
    data = text.encode("utf-8")
    for i, b in enumerate(data):
        assert byte_ids[b] in guide.allowed_token_ids(), f"<0x{b:02X}> is not allowed"
        assert guide.is_accepting() == decodes_to_match(pattern, data[:i])
        guide.advance(byte_ids[b])
    assert guide.is_accepting()
    assert np.isin(vocab.stop_ids, guide.allowed_token_ids()).all()


def test_single_byte_tokens_spell_emoji_on_smollm2(smollm2_vocab):
    vocab = smollm2_vocab
    single = {vocab[t][0]: t for t in range(vocab.size) if len(vocab[t]) == 1}
    guide = compile_regex(r"[😀-🙏]{1,3}", vocab).guide()
    for b in "😀".encode():
        guide.advance(single[b])
    assert guide.is_accepting()


# --- empty language -------------------------------------------------------------------------

def test_vocabulary_that_cannot_spell_the_language():
    vocab = Vocabulary.from_tokens([b"", b"a", b"b", b"cc"], [0])
    with pytest.raises(EmptyLanguageError):
        compile_regex("ab?c", vocab)
    with pytest.raises(EmptyLanguageError):
        Index.build(regex_to_dfa("c"), vocab)
    # A language only partly spelled keeps only what can finish.
    index = compile_regex("a|c|(cc)+", vocab)
    g = index.guide()
    assert g.allowed_token_ids().tolist() == [1, 3]


def test_no_dead_end_on_partly_spellable_language():
    """'ab' can start but never finish with these tokens: 'a' must not be allowed."""
    vocab = Vocabulary.from_tokens([b"", b"a", b"ba", b"x"], [0])
    index = compile_regex("ab|x", vocab)
    assert index.guide().allowed_token_ids().tolist() == [3]


# --- budgets ---------------------------------------------------------------------------------

def test_budget_minimum_is_exact():
    vocab = Vocabulary.from_tokens([b"", b"a", b"aa"], [0])
    index = compile_regex("a{5}", vocab)
    assert int(index.distance[0]) == 3  # aa + aa + a
    with pytest.raises(BudgetError, match="3"):
        index.guide(max_tokens=2)
    g = index.guide(max_tokens=3)
    assert g.allowed_token_ids().tolist() == [1, 2]
    g.advance(1)  # 'a': four more a's in two tokens, so only 'aa' now
    assert g.allowed_token_ids().tolist() == [2]
    with pytest.raises(TokenNotAllowedError):
        g.copy().advance(1)
    g.advance(2)
    g.advance(2)
    assert g.allowed_token_ids().tolist() == [0]


@given(budget=st.integers(0, 8), rng=st.randoms(use_true_random=False))
@settings(max_examples=40, deadline=None)
def test_budget_walks_on_synthetic_vocabulary(budget, rng):
    vocab = Vocabulary.from_tokens([b"", b"a", b"aa", b"aaa", b"b", b"ab"], [0])
    index = compile_regex("a{2,7}b?", vocab)
    if budget < 1:
        with pytest.raises(BudgetError):
            index.guide(max_tokens=budget)
        return
    for _ in range(5):
        g = index.guide(max_tokens=budget)
        tokens, stopped = random_walk(g, vocab, rng, max_steps=budget + 1)
        assert stopped and len(tokens) <= budget
        assert matches("a{2,7}b?", vocab.decode(tokens).decode())


@pytest.mark.parametrize("budget", [1, 2, 3, 6])
def test_budget_walks_on_real_vocabulary(vocab, budget):
    pattern = r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}"
    index = compile_regex(pattern, vocab)
    need = int(index.distance[0])
    if budget < need:
        with pytest.raises(BudgetError):
            index.guide(max_tokens=budget)
        return
    rng = random.Random(budget)
    for _ in range(30):
        tokens, stopped = random_walk(index.guide(max_tokens=budget), vocab, rng, p_stop=0.2,
                                      max_steps=budget + 1)
        assert stopped and len(tokens) <= budget
        assert matches(pattern, vocab.decode(tokens).decode("utf-8"))


def test_budget_error_before_any_token(vocab):
    index = compile_regex(r"\d{50}", vocab)
    need = int(index.distance[0])
    assert need >= 2
    with pytest.raises(BudgetError):
        index.guide(max_tokens=3)
    with pytest.raises(BudgetError):
        index.guide(max_tokens=need - 1)
    index.guide(max_tokens=need)


def test_zero_budget_allows_only_stopping():
    vocab = Vocabulary.from_tokens([b"", b"a"], [0])
    g = compile_regex("a*", vocab).guide(max_tokens=0)
    assert g.allowed_token_ids().tolist() == [0]
    assert g.is_finished()
    with pytest.raises(ValueError):
        compile_regex("a*", vocab).guide(max_tokens=-1)


# --- the Guide cursor -------------------------------------------------------------------------

def test_guide_copy_is_independent():
    vocab = Vocabulary.from_tokens([b"", b"a", b"b"], [0])
    g = compile_regex("ab", vocab).guide(max_tokens=5)
    g.advance(1)
    c = g.copy()
    c.advance(2)
    assert c.is_accepting() and not g.is_accepting()
    assert g.allowed_token_ids().tolist() == [2]
    c.advance(0)
    assert c.is_finished() and not g.is_finished()


def test_disallowed_token_leaves_the_guide_unchanged():
    vocab = Vocabulary.from_tokens([b"", b"a", b"b"], [0])
    g = compile_regex("ab", vocab).guide()
    with pytest.raises(TokenNotAllowedError):
        g.advance(2)
    with pytest.raises(TokenNotAllowedError):
        g.advance(0)  # a stop token before the text is complete
    g.advance(1)
    g.advance(2)
    g.advance(0)
    assert g.is_finished() and len(g.allowed_token_ids()) == 0
    with pytest.raises(TokenNotAllowedError):
        g.advance(1)


def test_is_finished_when_only_stopping_is_possible():
    vocab = Vocabulary.from_tokens([b"", b"a", b"b"], [0])
    g = compile_regex("ab?", vocab).guide()
    g.advance(1)
    assert g.is_accepting() and not g.is_finished()
    g.advance(2)
    assert g.is_accepting() and g.is_finished()
    assert g.allowed_token_ids().tolist() == [0]


def test_index_is_immutable(smollm2_vocab):
    index = compile_regex(r"\d+", smollm2_vocab)
    with pytest.raises(AttributeError):
        index.distance = None
    with pytest.raises(ValueError):
        index.mask_tokens[0] = 1
    assert isinstance(index, localguide.Index)


def test_index_pickles(smollm2_vocab):
    import pickle

    index = compile_regex(r"(19|20)\d{2}", smollm2_vocab)
    clone = pickle.loads(pickle.dumps(index))
    for name, arr in index.to_arrays().items():
        np.testing.assert_array_equal(arr, clone.to_arrays()[name])
    g1, g2 = index.guide(), clone.guide()
    t = int(g1.allowed_token_ids()[0])
    g1.advance(t)
    g2.advance(t)
    np.testing.assert_array_equal(g1.allowed_token_ids(), g2.allowed_token_ids())
