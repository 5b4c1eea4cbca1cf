"""A grammar compiled for one vocabulary, and the guide states it hands out.

``GrammarIndex`` holds the normalized grammar, the Earley tables, the scanner and
the mask engine. Guide states (``GState``) are interned sets of configurations
``(parser state, scanner state)``, one per way of reading the text so far; each
caches its mask, whether it is complete, and its successors by token.

The language is the grammar's with two deliberate restrictions on ignored text
(see ``cfg.normalize``): a run of ignored bytes is at most ``max_ignored_run`` long,
and a sentence does not end with ignored text. So once the text is complete,
ignored text is allowed only where real content can still follow it.

Everything the index needs is in ``arrays()`` (numpy arrays, no pickles), which
``sources.compile_grammar`` keeps in the disk cache; ``GrammarIndex.from_arrays``
rebuilds the index from them without parsing the grammar or walking the vocabulary.
"""

from __future__ import annotations

import functools
import hashlib
import threading

from functools import cached_property

import numpy as np

from ..automaton import ByteDFA
from ..distance import UNREACHABLE
from ..protocol import Mask, MaskKind
from . import arena
from ..runtime import warmup
from .cfg import CFG, Terminal
from .earley import DFA_KEYS, Grammar
from .lexer import Scanner
from .masks import BITS_KEYS, TREE_KEYS, MaskEngine, bits_with, build_trees

# Past this many readings of a text, those that share a scanner state are pooled into one
# parser set (``Grammar.union``): exact, and it keeps the readings of a lexically ambiguous
# grammar (names and words of the same letters, cut anywhere) from doubling at every byte.
MERGE_READINGS = 64
# Configurations in the byte-step table of ``GrammarIndex._viable`` (the walk of unresolved
# tokens: 1 KB of table each) past which the next walk starts with an empty table (one walk
# may add up to a row per trie node before that).
MAX_BYTE_NODES = 16_384
# What an index keeps between flushes (``GrammarIndex.flush``): interned parser and guide
# states, and the bytes of cached masks. Masks of sql or c take 0.2-0.4 MB per new
# token on a 49k-262k vocabulary, so a long-running app needs the bound.
MAX_CACHED_STATES = 100_000
MAX_CACHED_MASK_BYTES = 256 << 20
FORMAT = 11  # of the cached arrays (11: plain below a bound, ``grammar.packed``; 10: always packed)
ARRAY_KEYS = ("cfg_term_names", "cfg_term_sizes", "cfg_term_trans", "cfg_term_acc", "cfg_nts", "cfg_lhs",
              "cfg_rhs_len", "cfg_rhs", "cfg_start", "cfg_ignore", "cfg_source", "cfg_max_run", "cfg_ign_labels",
              "sc_trans", "sc_off", "sc_rd", "sc_after", "sc_seed", "sc_single", "sc_start", "sc_live_w",
              "sc_acc_off", "sc_acc_terms", "sc_rdist", "g_nullable") + TREE_KEYS + BITS_KEYS + DFA_KEYS + arena.SEED_KEYS


class GState:
    __slots__ = ("configs", "key", "initial", "_gkey", "_mask", "_bits", "_sampler_mask", "_accepting", "_only_stop",
                 "next", "budget", "plan",
                 "bound", "draft_key")

    def __init__(self, configs, key, initial=False):
        self.configs = configs
        self.key = key
        self.initial = initial
        self._gkey = None  # the groups of the mask (``MaskEngine.union_key``)
        self._mask = None
        self._bits = None
        self._sampler_mask = None
        self._accepting = None
        self._only_stop = None
        self.budget = None
        self.plan = None
        self.bound = None
        self.draft_key = None
        self.next: dict[int, GState | None] = {}


_MISS = object()


def _locked(method):
    """The method under the index's lock: its caches (interned states, transitions, masks, the
    budget planner) are filled as guides ask and emptied by ``flush``, whichever thread asks."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return run


class GrammarIndex:
    """A compiled grammar. ``guide()`` makes a cursor; shared by any number of guides in any
    number of threads (each guide a cursor of one thread): what the guides fill in, it fills
    under its lock."""

    def __init__(self, cfg: CFG, vocabulary, description: str = "grammar", arrays: dict | None = None,
                 lazy: bool = False):
        """From a *normalized* ``cfg`` (``cfg.normalize``); ``arrays`` from ``arrays()`` skip the work.

        ``lazy``: build each subterminal tree when a mask first needs it, not all of them
        now (``complete()`` builds the rest; ``arrays()`` does it first).
        """
        self._lock = threading.RLock()
        self.cfg = cfg
        self.grammar = Grammar(cfg, arrays)
        self.scanner = Scanner(self.grammar, arrays=arrays)
        self.vocabulary = vocabulary
        self.vocab_size = vocabulary.size
        self.stop_ids = vocabulary.stop_ids
        self.stop_set = frozenset(self.stop_ids.tolist())
        self.description = description
        if arrays is not None:
            trees = {k: arrays[k] for k in TREE_KEYS + BITS_KEYS}
        else:
            trees = None if lazy else build_trees(self.scanner, vocabulary)
        self.engine = MaskEngine(self.scanner, vocabulary, trees, self._viable, self.grammar)
        if arrays is not None:
            self.engine.seed = {k: arrays[k] for k in arena.SEED_KEYS}
            self.engine.seed_later = "ar_seed_later" in arrays
        sc = self.scanner
        self._trans = [None] * sc.n_states  # rows as lists, converted when first used (all: 0.2 s at 12k states)
        self._live = sc.live
        self._acc = sc.accept_lists
        self._after = sc.after.tolist()
        self._ign = sc.ign
        self._ign_bit = self.grammar.ignore_mask
        self._states: dict = {}
        self._forget_byte_steps()
        self._stop_bytes = 0
        self._stop_bits = None  # the stop ids as a vocabulary bitset
        self.max_cached_states = MAX_CACHED_STATES
        self.max_cached_mask_bytes = MAX_CACHED_MASK_BYTES
        self.flushes = 0
        g0 = self.grammar.initial
        self.initial = GState(((g0, sc.start),), ((g0.uid, sc.start),), initial=True)
        self._budget = None

    @property
    def fingerprint(self) -> str:
        return self.vocabulary.fingerprint

    # -- persistence ---------------------------------------------------------------------
    def arrays(self, seed: bool = False) -> dict:
        """Everything needed to rebuild this index (``from_arrays``), as numpy arrays; completes the trees.

        ``seed``: with the arena sets near the start of every text (``arena.seed_arrays``, a few
        ms for a shipped grammar, more for a large generated one), which the loaded index's
        first masks then find made."""
        out = {"format": np.array([FORMAT])}
        g = self.grammar
        out.update(cfg_arrays(self.cfg, g.cfg_rules))
        out.update(g.arrays(arena.MAX_DSTATES if g.n_rules <= arena.MAX_RULES else 0))
        later = seed and not warmup.ready(warmup.MASKS)  # (made by the first process that has the kernels)
        out.update(arena.seed_arrays(g if seed and not later else None))
        if later:
            out["ar_seed_later"] = np.array([1], np.uint8)
        out.update(self.scanner.arrays())
        out.update(self.engine.tree_arrays())
        return out

    def complete(self) -> None:
        """Build the subterminal trees that a lazy index has not built yet (thread-safe)."""
        self.engine.complete()

    @classmethod
    def from_arrays(cls, arrays: dict, vocabulary, description: str = "grammar",
                    checked: bool = False) -> "GrammarIndex":
        """The index of ``arrays()`` (``checked``: ``arrays_ok`` already passed)."""
        if not checked and not cls.arrays_ok(arrays, vocabulary):
            raise ValueError("not the arrays of a compiled grammar for this vocabulary")
        return cls(ArrayCFG(arrays), vocabulary, description, arrays)

    @staticmethod
    def arrays_ok(arrays: dict, vocabulary) -> bool:
        """A cheap sanity check of cached arrays: format, completeness, and the trees' structure
        (offsets in order and in range). The tokens of the groups are checked where a cache file
        is read (``packed.unpack``: each list increasing, within the vocabulary)."""
        if int(arrays["format"][0]) != FORMAT or not all(k in arrays for k in ARRAY_KEYS):
            return False
        a = arrays
        n_nodes, n_edges, n_grp = len(a["tr_node_grp"]) - 1, len(a["tr_ch_term"]), len(a["tr_grp_state"])

        def offsets(x, n, end) -> bool:
            return (x.ndim == 1 and len(x) == n + 1 and int(x[0]) == 0 and int(x[-1]) == end
                    and bool((np.diff(x) >= 0).all()))

        def within(x, n) -> bool:
            return x.ndim == 1 and (len(x) == 0 or (int(x.min()) >= 0 and int(x.max()) < n))

        unres = a["tr_unres_tok"]
        return (a["tr_grp_tok"].dtype == np.int32 and a["tr_grp_tok"].ndim == 1 and offsets(a["tr_ch_off"], n_nodes, n_edges)
                and offsets(a["tr_node_grp"], n_nodes, n_grp) and offsets(a["tr_grp_off"], n_grp, len(a["tr_grp_tok"]))
                and within(a["tr_ch_node"], n_nodes) and within(a["tr_seq"][:-1], n_nodes)
                and within(unres, vocabulary.size) and within(a["tr_grp_state"], len(a["sc_trans"]))
                and offsets(a["sc_acc_off"], len(a["sc_trans"]), len(a["sc_acc_terms"]))
                and within(a["sc_acc_terms"], len(a["cfg_term_sizes"]))
                and a["sc_live_w"].shape == (len(a["sc_trans"]), max(1, (len(a["cfg_term_sizes"]) + 63) // 64))
                and a["tr_big_bits"].shape == (len(a["tr_big_grp"]), (vocabulary.size + 63) // 64)
                and within(a["tr_big_grp"], n_grp))

    # -- guide states ---------------------------------------------------------------
    def _intern(self, configs: dict) -> GState:
        key = tuple(sorted(configs))
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = GState(tuple(configs[k] for k in key), key)
        return st

    def _viable(self, p, c: int, walk) -> np.ndarray:
        """For each token of ``walk`` (``masks.TokenTrie``), whether its bytes continue
        configuration (``p``, ``c``)."""
        return self._byte_rows(p, c, walk) >= 0

    def _byte_rows(self, p, c: int, walk) -> np.ndarray:
        """For each token of ``walk`` (``masks.TokenTrie``), the row of the byte-step table that
        its bytes reach from configuration (``p``, ``c``); -1 where no reading survives them.

        The tokens a tree leaves unresolved are those of an ambiguous grammar, thousands at once,
        mostly alike: their trie is walked level by level, each byte step memoized by its
        configurations (``_byte_id``) in a table, so that a step is run once however many
        tokens and parser states reach it, and the rest are lookups in numpy."""
        if len(self._byte_configs) > MAX_BYTE_NODES:
            self._forget_byte_steps()
        state = np.full(walk.n_nodes, -1, np.int32)
        start = self._byte_id(((p, c),))
        table = self._byte_table
        for lo, hi in walk.levels:
            par = walk.parent[lo:hi]
            byt = walk.byte[lo:hi]
            src = np.where(par < 0, start, state[np.maximum(par, 0)])
            live = src >= 0
            got = np.full(hi - lo, -1, np.int32)
            got[live] = table[src[live], byt[live]]
            todo = np.flatnonzero(got == -2)
            if len(todo):
                for q, b in set(zip(src[todo].tolist(), byt[todo].tolist())):
                    self._byte_step(q, b)
                table = self._byte_table  # (grown)
                got[todo] = table[src[todo], byt[todo]]
            state[lo:hi] = got
        return state[walk.end]

    def _row_cost(self, row: int) -> int:
        """The ``budget`` cost of completing the configurations of a byte-step table row."""
        costs = self._byte_costs
        if row >= len(costs):
            costs.extend([None] * (row + 1 - len(costs)))
        got = costs[row]
        if got is None:
            comp = self.completer
            st = self._intern({(q.uid, c): (q, c) for q, c in self._byte_configs[row]})
            got = costs[row] = comp.cost(comp.state_completion(st))
        return got

    def _byte_id(self, configs) -> int:
        """The row of ``configs`` in the byte-step table (``_viable``)."""
        key = tuple(sorted((q.uid, c) for q, c in configs))
        got = self._byte_ids.get(key)
        if got is None:
            got = self._byte_ids[key] = len(self._byte_configs)
            self._byte_configs.append(configs)
            if got == len(self._byte_table):
                grown = np.full((2 * got, 256), -2, np.int32)
                grown[:got] = self._byte_table
                self._byte_table = grown
        return got

    def _byte_step(self, q: int, b: int) -> None:
        """Fill the table's entry for byte ``b`` from row ``q``: the next row, or -1 (no reading survives)."""
        nxt = self._run(self._byte_configs[q], bytes((b,)))
        self._byte_table[q, b] = -1 if nxt is None else self._byte_id(nxt)

    def _forget_byte_steps(self) -> None:
        self._unres_costs: dict = {}  # (parser state uid, reading) -> ``_unresolved_costs``' arrays
        self._byte_costs: list = []
        self._byte_ids: dict = {}
        self._byte_configs: list = []
        self._byte_table = np.full((64, 256), -2, np.int32)

    @_locked
    def step_bytes(self, st: GState, data: bytes) -> GState | None:
        """The guide state after ``data`` (None: no reading of the text survives)."""
        configs = self._run(st.configs, data)
        if configs is None:
            return None
        return self._intern({(p.uid, c): (p, c) for p, c in configs})

    def _run(self, configs, data: bytes):
        trans, live, acc, after, ign_bit = self._trans, self._live, self._acc, self._after, self._ign_bit
        rows = self.scanner.trans
        for b in data:
            nxt: dict = {}
            for p, c in configs:
                cands = [(p, c)]
                for t in acc[c]:
                    p2 = p.feed(t)
                    if p2 is not None:
                        cands.append((p2, after[t]))
                for p2, c2 in cands:
                    row = trans[c2]
                    if row is None:
                        row = trans[c2] = rows[c2].tolist()
                    c3 = row[b]
                    # viable: a reading of a terminal the parser allows, or of the ignored
                    # run when some terminal can follow it (text never ends with ignored text)
                    if c3 >= 0 and p2.allowed and live[c3] & (p2.allowed | ign_bit):
                        nxt[(p2.uid, c3)] = (p2, c3)
            if not nxt:
                return None
            configs = list(nxt.values()) if len(nxt) <= MERGE_READINGS else self._pooled(nxt.values())
        return configs

    def _pooled(self, configs) -> list:
        """``configs`` with the parser sets of each scanner state pooled (``Grammar.union``).

        The initial set stays apart: its acceptance is told by identity."""
        init = self.grammar.initial
        by_c: dict = {}
        out = []
        for p, c in configs:
            if p is init:
                out.append((p, c))
            else:
                by_c.setdefault(c, []).append(p)
        union = self.grammar.union
        for c, ps in by_c.items():
            out.append((ps[0] if len(ps) == 1 else union(ps), c))
        return out

    # -- cache bounds -------------------------------------------------------------------
    def cache_size(self) -> tuple[int, int]:
        """(interned parser and guide states, bytes of cached masks) right now."""
        return self.grammar.n_states + len(self._states), self.engine.mask_bytes + self._stop_bytes

    @_locked
    def flush(self) -> None:
        """Forget every cached state, transition and mask; guides in use stay valid.

        Called between tokens when ``cache_size()`` exceeds ``max_cached_states`` or
        ``max_cached_mask_bytes``, or the compiled path's arena holds more than
        ``max_cached_states`` sets: what is still needed is recomputed, the rest is freed.
        """
        for st in list(self._states.values()) + [self.initial]:
            if isinstance(st, GState):
                st.next = {}
                st._gkey = None
                st._mask = None
                st._bits = None
                st._sampler_mask = None
                st.budget = None
                st.plan = None
                st.bound = None
        self._states = {}
        self._forget_byte_steps()
        self._stop_bytes = 0
        self.grammar.flush()
        self.engine.flush()
        if self._budget is not None:
            self._budget.flush()
        self.flushes += 1

    def _bound_cache(self) -> None:
        states, nbytes = self.cache_size()
        core = self.engine.core  # its arena sets count apart: it copies states in again after a flush
        if (states > self.max_cached_states or nbytes > self.max_cached_mask_bytes
                or core is not None and (core.n_sets > self.max_cached_states
                                         or core.budget_bytes > self.max_cached_mask_bytes)):
            self.flush()

    def step(self, st: GState, token_id: int) -> GState | None:
        nxt = st.next.get(token_id, _MISS)  # (a memoized step needs no lock: flush swaps the dict whole)
        return nxt if nxt is not _MISS else self._step(st, token_id)

    @_locked
    def _step(self, st: GState, token_id: int) -> GState | None:
        nxt = st.next.get(token_id, _MISS)
        if nxt is not _MISS:
            return nxt
        self._bound_cache()
        data = self.vocabulary[token_id]
        res = self.step_bytes(st, data) if data else None
        st.next[token_id] = res
        return res

    def only_stop(self, st: GState) -> bool:
        """True when nothing but a stop token may follow ``st`` (memoized on the state)."""
        o = st._only_stop
        return o if o is not None else self._only_stop(st)

    @_locked
    def _only_stop(self, st: GState) -> bool:
        if st._only_stop is None:
            st._only_stop = not self.token_bits(st).any()
        return st._only_stop

    def accepting(self, st: GState) -> bool:
        a = st._accepting
        return a if a is not None else self._accepting(st)

    @_locked
    def _accepting(self, st: GState) -> bool:
        a = st._accepting
        if a is None:
            a = False
            for p, c in st.configs:
                if st.initial and p.accepting or self._ends(p, c):
                    a = True
                    break
            st._accepting = a
        return a

    def _ends(self, p, c: int) -> bool:
        """Whether a lexeme that ends at scanner state ``c`` completes a sentence from parser
        state ``p`` (the compiled path's mask walk tells it on the way, ``PState.ends``)."""
        e = p.ends.get(c)
        if e is None:
            e = False
            ign = self._ign
            for t in self._acc[c]:
                if t != ign:
                    p2 = p.feed(t)
                    if p2 is not None and p2.accepting:
                        e = True
                        break
            p.ends[c] = e
        return e

    def _mask_key(self, st: GState) -> bytes:
        k = st._gkey
        if k is None:
            k = st._gkey = self.engine.union_key(st.configs)
        return k

    @_locked
    def state_key(self, st: GState) -> int:
        """A 63-bit key of ``st`` that holds across processes (the draft counts' key): its mask's
        key and its scanner states."""
        k = st.draft_key
        if k is None:
            h = hashlib.blake2b(self._mask_key(st), digest_size=8)
            h.update(np.array(sorted({c for _, c in st.configs}), np.int64).tobytes())
            k = st.draft_key = int.from_bytes(h.digest(), "little") >> 1
        return k

    @_locked
    def token_mask(self, st: GState) -> np.ndarray:
        """Allowed text tokens (stop ids excluded), sorted."""
        m = st._mask
        if m is None:
            m = st._mask = self.engine.union_of(self._mask_key(st))
        return m

    @_locked
    def token_bits(self, st: GState) -> np.ndarray:
        """``token_mask(st)`` as a bitset of the vocabulary (``MaskEngine.bits_of``)."""
        m = st._bits
        if m is None:
            m = st._bits = self.engine.bits_of(self._mask_key(st))
        return m

    @_locked
    def allowed_bits(self, st: GState) -> np.ndarray:
        """``allowed(st)`` as a bitset of the vocabulary: what the sampler applies."""
        bits = self.token_bits(st)  # first: its mask walk tells acceptance too
        if self.accepting(st):
            key = ("stop bits", st.key)
            m = self._states.get(key)
            if m is None:
                if self._stop_bits is None:
                    self._stop_bits = bits_with(np.zeros(self.engine.n_words, np.uint64), self.stop_ids)
                m = self._states[key] = np.bitwise_or(bits, self._stop_bits, out=self.engine.fresh_bits())
                m.flags.writeable = False
                self._stop_bytes += m.nbytes
            return m
        return bits

    def sampler_mask(self, st: GState) -> Mask:
        """``allowed_bits(st)`` as the guide protocol's ``Mask``, memoized on the state (the per-token path)."""
        m = st._sampler_mask
        return m if m is not None else self._sampler_mask(st)

    @_locked
    def _sampler_mask(self, st: GState) -> Mask:
        m = st._sampler_mask
        if m is None:
            m = st._sampler_mask = Mask(MaskKind.BITS, self.allowed_bits(st))
        return m

    @_locked
    def allowed(self, st: GState) -> np.ndarray:
        tm = self.token_mask(st)  # first: its mask walk tells acceptance too
        if self.accepting(st):
            key = ("stop", st.key)
            m = self._states.get(key)
            if m is None:
                m = np.insert(tm, np.searchsorted(tm, self.stop_ids), self.stop_ids).astype(np.int32, copy=False)
                m.flags.writeable = False
                self._states[key] = m
                self._stop_bytes += m.nbytes
            return m
        return tm  # never holds a stop id (their text is empty)

    def budget_bound(self, st: GState) -> int:
        """A cheap upper bound on every group bound of ``budget_info(st)`` (cached on ``st``)."""
        b = st.bound
        return b if b is not None else self._budget_bound(st)

    @_locked
    def _budget_bound(self, st: GState) -> int:
        b = st.bound
        if b is None:
            comp = self.completer
            eng = self.engine
            b = 0
            bounds, union = eng.mask_bounds(st.configs, comp)
            if union is not None and st._gkey is None:
                st._gkey = union
            for (p, c), vb in zip(st.configs, bounds):
                if vb is not None:
                    b = max(b, vb)
                    continue
                al = p.allowed | self._ign_bit
                for r in eng.state_readings(c):
                    if (al >> eng.r_term[r]) & 1:
                        for s, node in eng.kept_visits(p, r):
                            b = max(b, comp.visit_bound(s, node))
            st.bound = b
        return b

    @_locked
    def budget_info(self, st: GState) -> tuple:
        """(largest bound, [(bound, group)] sorted, cache) for the kept groups of ``st``.

        A group's bound is the token count of a completion of where its tokens end
        (``budget``); a token is safe with ``r`` tokens left when one of its groups has
        a bound of at most ``r - 1``. Unresolved tokens appear as ``-1 - token``.
        """
        info = st.budget
        if info is None:
            comp = self.completer
            eng = self.engine
            pairs = eng.group_costs(st.configs, comp)
            if pairs is not None:
                info = st.budget = (pairs[-1][0] if pairs else 0, pairs, {})
                return info
            best: dict = {}
            for p, c in st.configs:
                al = p.allowed | self._ign_bit
                for r in eng.state_readings(c):
                    if not (al >> eng.r_term[r]) & 1:
                        continue
                    gids, nodes = eng.kept_nodes(p, r)
                    for g, node in zip(gids, nodes):
                        if g >= 0:
                            b = comp.node_cost(node, eng.group_state(g))
                            if g not in best or b < best[g]:
                                best[g] = b
                    for gs, bs in self._unresolved_costs(p, r, []):
                        for g, b in zip(gs.tolist(), bs.tolist()):
                            if g not in best or b < best[g]:
                                best[g] = b
            pairs = sorted((b, g) for g, b in best.items())
            info = st.budget = (pairs[-1][0] if pairs else 0, pairs, {})
        return info

    def _unresolved_costs(self, p, r: int, out: list) -> list:
        """Append to ``out`` the ``(-1 - token, cost)`` pairs, as two arrays, of the tokens walked
        byte by byte from reading ``r`` under ``p`` (``kept``'s unresolved ones, also those after
        ``r``'s lexeme ends before the token); returns ``out``."""
        eng = self.engine
        tree = eng.tree_of[r]
        if tree in eng.unresolved:
            got = self._unres_costs.get((p.uid, r))
            if got is None:
                toks, trie = eng.unresolved_walk(tree)
                rows = self._byte_rows(p, eng.single[r], trie)
                live = rows >= 0
                rows = rows[live]
                distinct, where = np.unique(rows, return_inverse=True)
                costs = np.array([self._row_cost(x) for x in distinct.tolist()], np.int64)
                got = self._unres_costs[(p.uid, r)] = (-1 - toks[live], costs[where])
            if len(got[0]):
                out.append(got)
        if eng.r_acc[r]:
            t = eng.r_term[r]
            p2 = p if t == eng.ign else p.feed(t)
            if p2 is not None:
                for r2 in eng.first_readings(p2, t):
                    self._unresolved_costs(p2, r2, out)
        return out

    @_locked
    def prepare_budget(self) -> None:
        """Build what budget-aware masks need (the ``Completer``, the compiled path's budget tables)
        now, when a guide with ``max_tokens`` is made, not in its first mask (tens of ms once per index)."""
        comp = self.completer
        core = self.engine._compiled()
        if core is not None:
            core.enable_budget(comp)

    @property
    @_locked
    def completer(self):
        if self._budget is None:
            from .budget import Completer

            self._budget = Completer(self)
        return self._budget

    # -- API --------------------------------------------------------------------------
    @_locked
    def guide(self, max_tokens: int | None = None, opportunistic: bool = False):
        from .guide import GrammarGuide

        # (the kernels, unless compiled: meanwhile the numpy and Python paths answer; not at load, so
        # that loading a cached index imports no kernel)
        warmup.start()
        return GrammarGuide(self, max_tokens=max_tokens, opportunistic=opportunistic)

    @_locked
    def matches(self, text) -> bool:
        """True when ``text`` (str or bytes) is a sentence of the grammar."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        st = self.step_bytes(self.initial, data) if data else self.initial
        return st is not None and self.accepting(st)

    @_locked
    def is_prefix(self, text) -> bool:
        """True when ``text`` can be extended to a sentence of the grammar."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return (self.step_bytes(self.initial, data) if data else self.initial) is not None

    def __repr__(self) -> str:
        return (f"GrammarIndex({self.description}: {self.cfg.n_terminals} terminals, "
                f"{len(self.cfg.rules)} productions, {self.scanner.n_states} scanner states)")


# -- the grammar as arrays ------------------------------------------------------------------

def cfg_arrays(cfg: CFG, rules: tuple | None = None) -> dict:
    """``cfg`` as arrays (``ArrayCFG`` reads them back); ``rules``: ``cfg.rule_arrays()`` if known."""
    _, lhs, lens, rhs, start = cfg.rule_arrays() if rules is None else rules
    sizes, acc = cfg.terminal_arrays()
    return {
        "cfg_term_names": np.array([t.name for t in cfg.terminals] or [""], dtype=str),
        "cfg_term_sizes": sizes,
        "cfg_term_trans": np.concatenate([t.dfa.transitions for t in cfg.terminals]).astype(np.int32),
        "cfg_term_acc": acc,
        "cfg_nts": np.array(cfg.nonterminals(), dtype=str),
        "cfg_lhs": lhs,
        "cfg_rhs_len": lens,
        "cfg_rhs": rhs,
        "cfg_start": np.array([start], np.int64),
        "cfg_ignore": np.array(sorted(cfg.ignore), np.int64),
        "cfg_source": np.array([cfg.source], dtype=str),
        "cfg_max_run": np.array([-1 if cfg.max_ignored_run is None else cfg.max_ignored_run], np.int64),
        "cfg_ign_labels": (np.zeros(0, np.int32) if cfg.ignore_labels is None
                           else np.asarray(cfg.ignore_labels, np.int32)),
    }


class ArrayCFG(CFG):
    """The ``CFG`` of ``cfg_arrays``. Terminals, names and rules are made when first asked
    for: 10³ terminals and 10⁴ rules on a large schema grammar, which a loaded index rarely needs."""

    def __init__(self, a: dict):
        self._a = a
        self.ignore = frozenset(a["cfg_ignore"].tolist())
        self.source = str(a["cfg_source"][0])
        max_run = int(a["cfg_max_run"][0])
        self.max_ignored_run = None if max_run < 0 else max_run
        labels = a["cfg_ign_labels"]
        self.ignore_labels = labels if len(labels) else None

    @property
    def n_terminals(self) -> int:
        return len(self._a["cfg_term_sizes"])

    @cached_property
    def _bounds(self) -> list[int]:
        """Where each terminal's DFA states start in ``cfg_term_trans``, then the end."""
        return np.concatenate(([0], np.cumsum(self._a["cfg_term_sizes"]))).tolist()

    def terminal_dfa(self, i: int) -> ByteDFA:
        a, lo, hi = self._a, self._bounds[i], self._bounds[i + 1]
        return ByteDFA(a["cfg_term_trans"][lo:hi], a["cfg_term_acc"][lo:hi])

    @cached_property
    def terminals(self) -> list[Terminal]:
        names = self._a["cfg_term_names"].tolist()
        return [Terminal(names[i], self.terminal_dfa(i)) for i in range(self.n_terminals)]

    def terminal_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._a["cfg_term_sizes"], np.asarray(self._a["cfg_term_acc"], bool)

    @cached_property
    def _nts(self) -> list[str]:
        return self._a["cfg_nts"].tolist()

    @property
    def start(self) -> str:
        return self._nts[int(self._a["cfg_start"][0])]

    def nonterminals(self) -> list[str]:
        return list(self._nts)

    @cached_property
    def rules(self) -> list[tuple[str, tuple]]:
        nts = self._nts
        rhs_all = self._a["cfg_rhs"].tolist()
        rules = []
        pos = 0
        for lhs, k in zip(self._a["cfg_lhs"].tolist(), self._a["cfg_rhs_len"].tolist()):
            rules.append((nts[lhs], tuple(s if s >= 0 else nts[-1 - s] for s in rhs_all[pos:pos + k])))
            pos += k
        return rules

    def rule_arrays(self) -> tuple:
        a = self._a
        return len(a["cfg_nts"]), a["cfg_lhs"], a["cfg_rhs_len"], a["cfg_rhs"], int(a["cfg_start"][0])
