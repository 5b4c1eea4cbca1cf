"""Token masks: the precomputed subterminal trees, consulted with the parser.

There is one tree per *reading* ``r = (terminal T, DFA state q)`` of the lexeme in
progress (built for all readings at compile time by ``trees_kernels.grammar_trees``, in
flat arrays that go straight into the disk cache). It groups the vocabulary by
*how* each token reads from ``r``: the terminals it completes (a path of the tree,
starting with ``T`` when ``T``'s lexeme ends inside the token) and the scanner state
it ends in. A scanner state is a set of readings that evolve independently, so the
mask of (parser state ``P``, scanner state ``c``) is the union over the readings of
``c`` of what their trees keep for ``P``:

* walk the tree, following a terminal only where the parser takes it
  (``PState.feed``, memoized), and keep a group when a reading it ends in is viable:
  a terminal the parser allows there, or the ignored run when the parser allows
  any terminal (the text may not end with ignored text);
* when ``q`` accepts, ``T``'s lexeme may also end before the token: feed ``T`` and
  take the trees of the first readings ``(T', 0)`` of what may follow.

Kept groups are cached on the parser state per reading, masks per scanner state,
and unions of groups by the set of groups.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from . import trees_kernels, trees_numpy
from ..runtime import warmup
from ..runtime.numba_tools import read_only
from ..runtime.progress import stage
from ..protocol import bits_ids  # noqa: F401 - (the grammar modules read it from here)
from ..runtime.slabs import Slabs

MAX_READINGS = 256

TREE_KEYS = ("tr_seq", "tr_ch_off", "tr_ch_term", "tr_ch_node", "tr_node_grp", "tr_grp_state", "tr_grp_lead",
             "tr_grp_off", "tr_grp_tok", "tr_unres_off", "tr_unres_tok")
BITS_KEYS = ("tr_big_grp", "tr_big_bits")  # the large groups and their bitsets (``MaskEngine.tree_arrays``)


def _unions():
    """Where ``union_groups`` and ``union_bits`` come from: the kernels once they are compiled."""
    return trees_kernels if warmup.ready() else trees_numpy


def build_trees(scanner, vocabulary, workers: int | None = None, trees=None) -> dict:
    """The trees ``trees`` (default: all) of ``scanner`` over ``vocabulary``, as flat arrays.

    ``tr_seq`` holds the root node of each tree of ``trees`` in order, then the node count.
    Trees are independent: chunks of them are built on ``workers`` threads (default: the
    CPU count, at most 8) and joined; the arrays are those of one pass over all of them.
    """
    with stage("building the grammar's token trees"):
        return _build_trees(scanner, vocabulary, workers, trees)


def _build_trees(scanner, vocabulary, workers, trees) -> dict:
    sc = scanner
    origins = sc.single[sc.tree_reading]
    track = sc.tree_track
    if trees is not None:
        trees = np.asarray(trees, np.int64)
        origins, track = origins[trees], track[trees]
    fixed = (*vocabulary.trie.arrays, sc.trans, sc.acc_offsets, sc.acc_terms, sc.seed_tab, sc.ign, sc.live_tab,
             sc.rdist)
    n = len(origins)
    kernel = trees_kernels.grammar_trees if warmup.ready() else trees_numpy.grammar_trees
    workers = min(os.cpu_count() or 1, 8) if workers is None else workers
    if kernel is trees_numpy.grammar_trees:
        workers = 1  # (numpy holds the GIL for most of this walk)
    chunks = 1 if workers <= 1 or n < 64 else min(4 * workers, n // 16)
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64).tolist()

    def part(i):
        a, b = bounds[i], bounds[i + 1]
        return kernel(*fixed, origins[a:b], track[a:b], vocabulary.size, MAX_READINGS)

    if chunks == 1:
        parts = [part(0)]
    else:
        parts = _run_threads(part, chunks, workers)
    (seq_parent, seq_term, tree_seq, grp_seq, grp_state, grp_lead, grp_off, grp_tok, unres_off,
     unres_tok) = parts[0] if len(parts) == 1 else _join_trees(parts)
    n = len(seq_parent)
    # Keep only sequence nodes with a group at or below them (parents come before children).
    useful = np.zeros(n, bool)
    useful[grp_seq] = True
    roots = tree_seq[:-1]
    useful[roots] = True
    has_parent = seq_parent >= 0
    while True:
        up = np.zeros(n, bool)
        sel = useful & has_parent
        up[seq_parent[sel]] = True
        if not (up & ~useful).any():
            break
        useful |= up
    edges = np.flatnonzero(useful & has_parent)
    parents = seq_parent[edges]
    order = np.argsort(parents, kind="stable")
    ch_off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(parents, minlength=n), out=ch_off[1:])
    node_grp = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(grp_seq, minlength=n), out=node_grp[1:])
    return {"tr_seq": tree_seq, "tr_ch_off": ch_off, "tr_ch_term": seq_term[edges[order]].astype(np.int32),
            "tr_ch_node": edges[order].astype(np.int32), "tr_node_grp": node_grp,
            "tr_grp_state": grp_state, "tr_grp_lead": grp_lead, "tr_grp_off": grp_off, "tr_grp_tok": grp_tok,
            "tr_unres_off": unres_off, "tr_unres_tok": unres_tok}


def _run_threads(fn, n: int, workers: int) -> list:
    """``[fn(i) for i in range(n)]`` on ``workers`` threads.

    Plain threads, not ``concurrent.futures``: this also runs in a background thread that may
    still be working while the interpreter shuts down, when executors refuse new work.
    """
    out: list = [None] * n
    errors: list = []
    todo = iter(range(n))
    lock = threading.Lock()

    def work():
        while not errors:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                out[i] = fn(i)
            except BaseException as e:
                errors.append(e)

    threads = [threading.Thread(target=work, name="localguide-trees") for _ in range(min(workers, n))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def _join_trees(parts) -> tuple:
    """The outputs of ``trees_kernels.grammar_trees`` on consecutive chunks of origins, as one."""
    cols = [[] for _ in range(10)]
    seq_base = tok_base = unres_base = 0
    for sp, st, ts, gs, gst, gl, go, gt, uo, ut in parts:
        cols[0].append(np.where(sp >= 0, sp + seq_base, -1).astype(sp.dtype))
        cols[1].append(st)
        cols[2].append(ts[:-1] + seq_base)
        cols[3].append(gs + seq_base)
        cols[4].append(gst)
        cols[5].append(gl)
        cols[6].append(go[:-1] + tok_base)
        cols[7].append(gt)
        cols[8].append(uo[:-1] + unres_base)
        cols[9].append(ut)
        seq_base += len(sp)
        tok_base += len(gt)
        unres_base += len(ut)
    for i, end in ((2, seq_base), (6, tok_base), (8, unres_base)):
        cols[i].append(np.array([end], cols[i][0].dtype))
    return tuple(np.concatenate(c).astype(c[0].dtype, copy=False) for c in cols)


class MaskEngine:
    """Computes and caches ``mask(P, c)`` for one compiled grammar and vocabulary.

    The trees come from ``arrays`` (``build_trees`` of all of them, or a cache file) or,
    with ``arrays=None``, are built when a mask first needs them (``tree_root``);
    ``complete()`` builds the rest. Parts are appended under a lock, the root of a tree
    last, so a thread may complete the trees while another computes masks.
    """

    def __init__(self, scanner, vocabulary, arrays: dict | None, viable=None, grammar=None):
        sc = self.scanner = scanner
        self.grammar = grammar  # ``earley.Grammar``: with it, masks come from the compiled path when they can
        self.viable = viable  # viable(p, c, TokenTrie) -> bools, for tokens left unresolved
        self.vocabulary = vocabulary
        self.vocab_size = vocabulary.size
        self.ign = sc.ign
        self.ign_bit = (1 << sc.ign) if sc.ign >= 0 else 0
        self._live = sc.live
        self.n_trees = len(sc.tree_reading)
        self.tree_root = [-1] * self.n_trees
        self._missing = self.n_trees
        # Sizes of the trees' arrays below, which are buffers filled up to them. What the
        # Python walk reads of a node is made into lists when it first visits the node: a
        # cache file holds 10⁵ nodes for a large schema, and a walk visits few of them.
        self.n_nodes = self.n_edges = self.n_grp = self.n_tok = 0
        self.node_kids: list = []  # node -> [(terminal, child, whether the child has children)]
        self.node_sets: list = []  # node -> its groups by (live terminals, lead) (``_node_sets``)
        self.grp_off = np.zeros(1, np.int64)
        self.grp_tok = np.zeros(0, np.int32)
        self._tok_ro = read_only(self.grp_tok)  # what the kernels read (``read_only``)
        self.unresolved: dict = {}  # tree -> tokens to check one by one
        self._unres_walk: dict = {}  # tree -> ``unresolved_walk(tree)``
        self.a_ch_off = np.zeros(1, np.int64)
        self.a_ch_term = np.zeros(0, np.int32)
        self.a_ch_node = np.zeros(0, np.int32)
        self.a_node_grp = np.zeros(1, np.int64)
        self.a_grp_state = np.zeros(0, np.int32)
        self.a_grp_lead = np.zeros(0, np.int32)
        self.a_root = np.full(self.n_trees, -1, np.int64)
        self.a_unres = np.zeros(self.n_trees, np.uint8)
        self.version = 0  # of the trees, raised by each ``_install``
        self.core = None  # the compiled path (``arena.CompiledMasks``), built by the first mask
        self.seed = None  # its arena's seed (``arena.SEED_KEYS``) from a cache file
        self.seed_later = False  # the cache file was written without it: made with the compiled path
        self._core_tried = grammar is None
        self._install_lock = threading.Lock()
        self._complete_lock = threading.Lock()
        if arrays is not None:
            self._install(arrays, range(self.n_trees))
        self.tree_of = sc.tree_of.tolist()
        self.tree_lim = sc.tree_lim.tolist()
        self.r_term = sc.r_term.tolist()
        self.r_acc = sc.r_acc.tolist()
        self.r_base = sc.r_base.tolist()
        self.single = sc.single.tolist()
        self._state_rd: dict = {}
        self.union_cache: dict = {}
        self._large: dict = {}
        self.mask_bytes = 0  # held by the two caches above
        self._marks = np.zeros(self.vocab_size, np.uint8)  # scratch of ``trees_kernels.union_groups``
        # Masks as bitsets of the vocabulary (what the sampler applies): cached by key, and
        # the large groups' own bitsets (rows of ``_gw``, by ``_g_row``) or-ed in whole.
        self.n_words = (self.vocab_size + 63) // 64
        self.bits_cache: dict = {}
        self._slabs = Slabs()  # where the cached bitsets are carved from (fresh pages are slow)
        self._g_row = np.full(0, -1, np.int64)
        self._gw = np.zeros((0, self.n_words), np.uint64)
        self._gw_ro = read_only(self._gw)  # what the kernels take (``read_only``)
        self._n_gw = 0
        self._n_kept_rows = 0  # rows read from the cache file, which a flush keeps
        if arrays is not None and "tr_big_grp" in arrays:
            # the large groups' bitsets, made with the cache file (4-20 per grammar, 0.2 MB at
            # most on Gemma's vocabulary), not by the first masks that need them
            big = arrays["tr_big_grp"]
            self._gw = arrays["tr_big_bits"]
            self._gw_ro = read_only(self._gw)
            self._rows_fit()
            self._g_row[big] = np.arange(len(big))
            self._n_gw = self._n_kept_rows = len(big)

    # -- the trees -----------------------------------------------------------------------
    def _install(self, tr: dict, trees) -> None:
        """Append the arrays ``tr`` of ``trees`` (``build_trees``); trees already there keep theirs."""
        with self._install_lock:
            n_nodes, n_edges, n_grp, n_tok = self.n_nodes, self.n_edges, self.n_grp, self.n_tok
            if n_nodes == 0:
                # the first trees are adopted as they are (a cache file's arrays stay mapped)
                self.a_ch_off, self.a_ch_term, self.a_ch_node, self.a_node_grp, self.a_grp_state, self.a_grp_lead = (
                    tr[k].astype(a.dtype, copy=False) for k, a in (
                        ("tr_ch_off", self.a_ch_off), ("tr_ch_term", self.a_ch_term), ("tr_ch_node", self.a_ch_node),
                        ("tr_node_grp", self.a_node_grp), ("tr_grp_state", self.a_grp_state),
                        ("tr_grp_lead", self.a_grp_lead)))
            else:
                ch_off = tr["tr_ch_off"][1:] + n_edges
                ch_node = (tr["tr_ch_node"] + n_nodes).astype(np.int32)
                node_grp = tr["tr_node_grp"][1:] + n_grp
                self.a_ch_off = _appended(self.a_ch_off, n_nodes + 1, ch_off)
                self.a_ch_term = _appended(self.a_ch_term, n_edges, tr["tr_ch_term"])
                self.a_ch_node = _appended(self.a_ch_node, n_edges, ch_node)
                self.a_node_grp = _appended(self.a_node_grp, n_nodes + 1, node_grp)
                self.a_grp_state = _appended(self.a_grp_state, n_grp, tr["tr_grp_state"])
                self.a_grp_lead = _appended(self.a_grp_lead, n_grp, tr["tr_grp_lead"])
            new_nodes = len(tr["tr_node_grp"]) - 1
            self.node_kids += [None] * new_nodes
            self.node_sets += [None] * new_nodes
            tok = tr["tr_grp_tok"]
            if n_tok == 0 and len(self.grp_tok) == 0:
                self.grp_tok = tok
                self.grp_off = tr["tr_grp_off"].astype(np.int64, copy=False)
            else:
                self.grp_tok = _appended(self.grp_tok, n_tok, tok)
                self.grp_off = _appended(self.grp_off, n_grp + 1, tr["tr_grp_off"][1:] + n_tok)
            self._tok_ro = read_only(self.grp_tok)
            self.n_nodes += new_nodes
            self.n_edges += len(tr["tr_ch_term"])
            self.n_grp += len(tr["tr_grp_state"])
            self.n_tok += len(tok)
            uo, ut = tr["tr_unres_off"], tr["tr_unres_tok"]
            trees = np.asarray(list(trees), np.int64)
            for i in np.flatnonzero(np.diff(uo)).tolist():
                t = int(trees[i])
                if t not in self.unresolved:
                    self.unresolved[t] = ut[uo[i]:uo[i + 1]].tolist()
                    self.a_unres[t] = 1
            # The roots last: a tree is used only once all of its arrays are in place.
            new = self.a_root[trees] < 0
            trees = trees[new]
            self.a_root[trees] = tr["tr_seq"][:-1][new] + n_nodes
            self.tree_root = self.a_root.tolist()
            self._missing -= len(trees)
            self.version += 1

    def root(self, tree: int) -> int:
        """The root node of ``tree``, built now if it is not yet."""
        r = self.tree_root[tree]
        if r < 0:
            self._install(build_trees(self.scanner, self.vocabulary, workers=1, trees=[tree]), [tree])
            r = self.tree_root[tree]
        return r

    @property
    def complete_trees(self) -> bool:
        return self._missing == 0

    def complete(self, workers: int | None = None) -> None:
        """Build every tree not built yet (a second caller waits for the first, not builds them again)."""
        with self._complete_lock:
            missing = [t for t, r in enumerate(self.tree_root) if r < 0]
            if missing:
                self._install(build_trees(self.scanner, self.vocabulary, workers, trees=missing), missing)

    def tree_arrays(self) -> dict:
        """All trees as ``build_trees`` arrays (tree order), completing them first."""
        self.complete()
        with self._install_lock:
            n_nodes, n_edges, n_grp = self.n_nodes, self.n_edges, self.n_grp
            uo = np.zeros(self.n_trees + 1, np.int64)
            ut = []
            for t in range(self.n_trees):
                ut += self.unresolved.get(t, ())
                uo[t + 1] = len(ut)
            return {"tr_seq": np.array(self.tree_root + [n_nodes], np.int64),
                    "tr_ch_off": self.a_ch_off[:n_nodes + 1].copy(),
                    "tr_ch_term": self.a_ch_term[:n_edges].copy(),
                    "tr_ch_node": self.a_ch_node[:n_edges].copy(),
                    "tr_node_grp": self.a_node_grp[:n_nodes + 1].copy(),
                    "tr_grp_state": self.a_grp_state[:n_grp].copy(),
                    "tr_grp_lead": self.a_grp_lead[:n_grp].copy(),
                    "tr_grp_off": self.grp_off[:n_grp + 1].copy(),
                    "tr_grp_tok": np.array(self.grp_tok[:self.n_tok]),
                    "tr_unres_off": uo, "tr_unres_tok": np.array(ut, np.int32), **self._big_bits()}

    def _big_bits(self) -> dict:
        """``BITS_KEYS``: the groups of at least ``_big_min`` tokens and their bitsets."""
        big = np.flatnonzero(np.diff(self.grp_off[:self.n_grp + 1]) >= self._big_min).astype(np.int64)
        rows = np.zeros((len(big), self.n_words), np.uint64)
        no_rows = np.full(self.n_grp, -1, np.int64)
        for i, g in enumerate(big.tolist()):
            _unions().union_bits(np.array([g], np.int64), self.grp_off, self._tok_ro, self.vocab_size + 1, no_rows,
                               read_only(self._gw), rows[i])
        return {"tr_big_grp": big, "tr_big_bits": rows}

    def flush(self) -> None:
        """Forget the cached unions (kept groups live on the parser states: ``Grammar.flush``)."""
        self.union_cache = {}
        self._large = {}
        self.bits_cache = {}
        self._slabs.release()
        self._g_row[self._g_row >= self._n_kept_rows] = -1
        self._n_gw = self._n_kept_rows
        self.mask_bytes = 0
        if self.core is not None:
            self.core.reset()

    def _node_sets(self, s: int) -> list:
        """The groups of tree node ``s`` by (live terminals, lead): [(live, lead, gids)]."""
        by: dict = {}
        gs = self.node_groups(s)
        live_of = self._live
        states, leads = self.a_grp_state[gs.start:gs.stop].tolist(), self.a_grp_lead[gs.start:gs.stop].tolist()
        for g, c, lead in zip(gs, states, leads):
            by.setdefault((live_of[c], lead), []).append(g)
        sets = self.node_sets[s] = [(live, lead, tuple(gids)) for (live, lead), gids in by.items()]
        return sets

    def _kids(self, s: int) -> list:
        """The edges out of tree node ``s``: [(terminal, child, whether the child has children)]."""
        ch_off = self.a_ch_off
        a, b = int(ch_off[s]), int(ch_off[s + 1])
        kids = self.a_ch_node[a:b].astype(np.int64)
        out = self.node_kids[s] = list(zip(self.a_ch_term[a:b].tolist(), kids.tolist(),
                                           (ch_off[kids + 1] > ch_off[kids]).tolist()))
        return out

    def node_groups(self, s: int) -> range:
        return range(int(self.a_node_grp[s]), int(self.a_node_grp[s + 1]))

    def group_state(self, g: int) -> int:
        """The scanner state group ``g``'s tokens leave."""
        return int(self.a_grp_state[g])

    @property
    def n_groups(self) -> int:
        return self.n_grp

    def group_tokens(self, g: int) -> np.ndarray:
        out = self.grp_tok[self.grp_off[g]:self.grp_off[g + 1]]
        if len(out) and (int(out.min()) < 0 or int(out.max()) >= self.vocab_size):  # a damaged cache file
            out = out[(out >= 0) & (out < self.vocab_size)]
        out.flags.writeable = False
        return out

    # -- kept groups -------------------------------------------------------------------------
    def kept(self, p, r: int) -> tuple:
        """Groups (and, as ``-1 - token``, unresolved tokens) that reading ``r`` keeps under ``p``."""
        got = p.rkept.get(r)
        if got is None:
            got = self._kept(p, r)
        return got[0]

    def kept_nodes(self, p, r: int) -> tuple:
        """(``kept(p, r)``, the parser state after each kept group's terminals).

        A parser state, or (parser state, terminal) for the state after that terminal,
        which is not built unless needed (``PState.peek``).
        """
        got = p.rkept.get(r)
        if got is None:
            got = self._kept(p, r)
        return got[0], got[1]

    def kept_visits(self, p, r: int) -> tuple:
        """The tree nodes where ``kept(p, r)`` keeps groups: (tree node, parser state there)."""
        got = p.rkept.get(r)
        if got is None:
            got = self._kept(p, r)
        return got[2]

    def _kept(self, p, r: int) -> tuple:
        out = []
        nodes = []
        visits = []
        ign_bit = self.ign_bit
        node_sets, node_kids = self.node_sets, self.node_kids
        tree = self.tree_of[r]
        lim = self.tree_lim[r]
        stack = [(self.root(tree), p)]

        def keep(s, al, where):
            """Keep node ``s``'s groups whose readings are viable when ``al`` terminals may follow."""
            ok = al | ign_bit
            n0 = len(out)
            sets = node_sets[s]
            if sets is None:
                sets = self._node_sets(s)
            for live, lead, gids in sets:
                if live & ok and lead <= lim:
                    out.extend(gids)
            if len(out) > n0:
                nodes.extend([where] * (len(out) - n0))
                visits.append((s, where))

        while stack:
            s, q = stack.pop()
            al = q.allowed
            if al:
                keep(s, al, q)
            kids = node_kids[s]
            if kids is None:
                kids = self._kids(s)
            for t, s2, inner in kids:
                if (al >> t) & 1:
                    if inner:
                        stack.append((s2, q.feed(t)))
                        continue
                    # a leaf: only the terminals allowed after t matter
                    al2 = q.peek(t)
                    if al2:
                        keep(s2, al2, (q, t))
        if tree in self.unresolved:
            toks, trie = self.unresolved_walk(tree)
            negs = (-1 - toks[self.viable(p, self.single[r], trie)]).tolist()
            out += negs
            nodes += [None] * len(negs)
            if negs:  # (one visit for them all: a token walked byte by byte has no bound from the tree)
                visits.append((negs[0], None))
        if self.r_acc[r]:
            # The lexeme may end right here, before the token's first byte.
            t = self.r_term[r]
            p2 = p if t == self.ign else p.feed(t)
            if p2 is not None:
                for r2 in self.first_readings(p2, t):
                    got2 = p2.rkept.get(r2)
                    if got2 is None:
                        got2 = self._kept(p2, r2)
                    out += got2[0]
                    nodes += got2[1]
                    visits += got2[2]
        got = p.rkept[r] = (tuple(out), tuple(nodes), tuple(visits))
        return got

    def first_readings(self, p2, t: int) -> list:
        """The first readings of the lexemes that may follow one of terminal ``t`` under ``p2``."""
        al = p2.allowed
        firsts = []
        if t != self.ign and self.ign >= 0 and al:
            firsts.append(self.r_base[self.ign])
        while al:
            low = al & -al
            al ^= low
            firsts.append(self.r_base[low.bit_length() - 1])
        return firsts

    def unresolved_walk(self, tree: int) -> tuple:
        """(the tokens ``tree`` leaves unresolved, their ``TokenTrie``), made once."""
        got = self._unres_walk.get(tree)
        if got is None:
            toks = self.unresolved[tree]
            got = self._unres_walk[tree] = (np.asarray(toks, np.int64),
                                            TokenTrie([self.vocabulary[t] for t in toks]))
        return got

    def state_readings(self, c: int) -> list[int]:
        rs = self._state_rd.get(c)
        if rs is None:
            rs = self._state_rd[c] = self.scanner.reading_ids(c)
        return rs

    def mask_key(self, p, c: int) -> bytes:
        """The groups (and unresolved tokens, ``-1 - token``) that make ``mask(p, c)``: ``key_of``
        them."""
        k = p.masks.get(c)
        return k if k is not None else self._keys(((p, c),))[0][0]

    def union_key(self, configs) -> bytes:
        """The union of the ``mask_key``s of ``configs`` (a guide state's mask)."""
        keys, union = self._keys(configs)
        if union is None:
            union = keys[0] if len(keys) == 1 else merge_keys(keys)
        return union

    def _keys(self, configs) -> tuple:
        """(``mask_key`` of each configuration, their union when the compiled path computed it,
        else None). Those not cached come from the compiled path, all in one call, except where
        the Python walks are done already (budget bounds) or the compiled path declines."""
        if len(configs) == 1:  # the usual case, without the lists
            p, c = configs[0]
            k = p.masks.get(c)
            if k is not None:
                return [k], k
            if self._compiled_for(p, c):
                k = self.core.walk(configs).keys[0]
            if k is None:
                k = self.mask_key_python(p, c)
            p.masks[c] = k
            return [k], k
        out = [p.masks.get(c) for p, c in configs]
        todo = [i for i, k in enumerate(out) if k is None]
        if not todo:
            return out, None
        batch = []
        for i in todo:
            p, c = configs[i]
            if self._compiled_for(p, c):
                batch.append(i)
            else:
                out[i] = p.masks[c] = self.mask_key_python(p, c)
        union = None
        if batch:
            w = self.core.walk([configs[i] for i in batch])
            for i, k in zip(batch, w.keys):
                p, c = configs[i]
                out[i] = p.masks[c] = k if k is not None else self.mask_key_python(p, c)
            if len(batch) == len(configs):
                union = w.union
        return out, union

    def mask_bounds(self, configs, completer) -> tuple:
        """(``GrammarIndex.budget_bound`` of each configuration, None where the Python walks
        must answer; ``union_key(configs)`` or None) from the compiled path, which caches the
        mask keys on the way."""
        core = self._compiled()
        if core is None or not core.enable_budget(completer):
            return [None] * len(configs), None
        w = core.walk(configs, bounds=True)
        for (p, c), k in zip(configs, w.keys):
            if k is not None:
                p.masks[c] = k
        return w.bounds, w.union

    def group_costs(self, configs, completer) -> list | None:
        """``GrammarIndex.budget_info``'s sorted (bound, group) pairs from the compiled path, or
        None where the Python walks must answer."""
        core = self._compiled()
        if core is None or not core.enable_budget(completer):
            return None
        return core.walk(configs, bounds=True, costs=True).costs

    def _compiled_for(self, p, c: int) -> bool:
        """Whether the compiled path computes ``mask_key(p, c)``: it exists, and the Python walks of
        the readings are not all done already (budget bounds)."""
        return self._compiled() is not None and (not p.rkept or not all(r in p.rkept for r in self.readings(p, c)))

    def _compiled(self):
        """The compiled path (``arena.CompiledMasks``), built at the first call; None if the grammar is too large."""
        if not self._core_tried:
            if not warmup.ready(warmup.MASKS):
                return None  # the Python walks answer until the kernels are compiled (``warmup``)
            from ..runtime.gcpause import paused
            from .arena import CompiledMasks, seed_arrays

            with paused():  # exploring the ε-DFA allocates like a compile (up to 20,000 states)
                if self.seed_later:
                    self.seed = seed_arrays(self.grammar)
                self.core = CompiledMasks.build(self.grammar, self, self.seed)
            self._core_tried = True
        return self.core

    def readings(self, p, c: int) -> list:
        """The readings of scanner state ``c`` whose terminal ``p`` allows (or the ignored run)."""
        al = p.allowed | self.ign_bit
        r_term = self.r_term
        return [r for r in self.state_readings(c) if (al >> r_term[r]) & 1]

    def mask_key_python(self, p, c: int) -> bytes:
        """``mask_key`` by the Python path only (the compiled path's twin); not cached as a mask."""
        kept = []
        for r in self.readings(p, c):
            kept += self.kept(p, r)
        return key_of(set(kept))

    def mask(self, p, c: int) -> np.ndarray:
        """Sorted token ids (no stop ids) that keep (parser state ``p``, scanner state ``c``) viable."""
        return self.union_of(self.mask_key(p, c))

    def union_of(self, key: bytes) -> np.ndarray:
        """The tokens of the groups ``key`` (``key_of``), cached by ``key``."""
        m = self.union_cache.get(key)
        if m is None:
            m = self.union_cache[key] = self._union(key)
            if m.base is None:  # not a view of one group's tokens
                self.mask_bytes += m.nbytes
        return m

    def bits_of(self, key: bytes) -> np.ndarray:
        """The tokens of the groups ``key`` (``key_of``) as a read-only bitset of the
        vocabulary (bit ``t`` of uint64 word ``t >> 6``), cached by ``key``."""
        m = self.bits_cache.get(key)
        if m is None:
            m = self.fresh_bits()
            self._rows_fit()
            core = self.core
            last_key, gids = core.last if core is not None else ((), None)
            if last_key is not key:  # (the compiled path's array of the key just made saves a copy)
                gids = key_groups(key).copy()  # (writable: one numba specialization)
            missing = _unions().union_bits(gids, self.grp_off, self._tok_ro, self._big_min,
                                         self._g_row, self._gw_ro, m)
            for g in missing.tolist():  # their bitsets, for the next masks they are in
                self._add_row(g)
            m.flags.writeable = False
            self.bits_cache[key] = m
            self.mask_bytes += m.nbytes
        return m

    def fresh_bits(self) -> np.ndarray:
        """A zeroed bitset of the vocabulary for a mask that is kept (``slabs``)."""
        return self._slabs.zeros(self.n_words)

    @property
    def _big_min(self) -> int:
        """The size from which a group's tokens are or-ed in as a bitset (``_gw``)."""
        return max(64, self.vocab_size >> 6)

    def _rows_fit(self) -> None:
        if len(self._g_row) < self.n_grp:
            self._g_row = np.concatenate([self._g_row, np.full(2 * self.n_grp - len(self._g_row), -1, np.int64)])

    def _add_row(self, g: int) -> None:
        """Give group ``g`` its bitset, a row of ``_gw``."""
        self._rows_fit()
        if self._n_gw == len(self._gw):
            self._gw = np.concatenate([self._gw, np.zeros((max(8, self._n_gw), self.n_words), np.uint64)])
            self._gw_ro = read_only(self._gw)
        row = self._gw[self._n_gw]
        row[:] = 0  # after a flush, rows are reused: union_bits ors into what is there
        _unions().union_bits(np.array([g], np.int64), self.grp_off, self._tok_ro, self.vocab_size + 1,
                           self._g_row, self._gw_ro, row)
        self._g_row[g] = self._n_gw
        self._n_gw += 1
        self.mask_bytes += row.nbytes

    def _union(self, key: bytes) -> np.ndarray:
        ks = key_groups(key)
        groups = ks[ks >= 0].tolist()
        if len(groups) == len(ks) == 1:
            return self.group_tokens(groups[0])
        extra = np.sort(-1 - ks[ks < 0]).astype(np.int32)
        # The few large groups that hold most of a big mask recur together from mask to mask:
        # their union is cached by the combination, and the rest is merged into it.
        big_min = self._big_min
        gs = np.array(groups, np.int64)
        is_large = (self.grp_off[gs + 1] - self.grp_off[gs] >= big_min).tolist()
        large = tuple(g for g, b in zip(groups, is_large) if b)
        if len(large) < 2:
            return self._tokens(groups, extra)
        base = self._large.get(large)
        if base is None:
            base = self._large[large] = self._tokens(large, extra[:0])
            self.mask_bytes += base.nbytes
        small = [g for g, b in zip(groups, is_large) if not b]
        return insert_sorted(base, self._tokens(small, extra))

    def _tokens(self, groups, extra) -> np.ndarray:
        out = _unions().union_groups(self.grp_off, self._tok_ro, np.array(groups, np.int64), extra, self._marks)
        out.flags.writeable = False
        return out


class TokenTrie:
    """Tokens' bytes as a trie in flat arrays, its nodes level by level (all nodes of depth 1,
    then of depth 2, ...): ``parent`` (-1: the root), ``byte``, ``levels`` (each depth's
    ``(lo, hi)``), ``end`` (each token's node; an empty token ends at an extra node that no walk
    reaches)."""

    def __init__(self, texts: list):
        order = sorted(range(len(texts)), key=texts.__getitem__)
        parent, byte, depth = [], [], []
        end = [0] * len(texts)
        path: list = [-1]  # path[k]: the node of the first k bytes of the text before
        prev = b""
        empty = []
        for i in order:
            data = texts[i]
            if not data:
                empty.append(i)
                continue
            k, n = 0, min(len(data), len(prev))
            while k < n and data[k] == prev[k]:
                k += 1
            del path[k + 1:]
            for j in range(k, len(data)):
                parent.append(path[j])
                byte.append(data[j])
                depth.append(j + 1)
                path.append(len(parent) - 1)
            end[i] = path[len(data)]
            prev = data
        n = len(parent)
        by_depth = np.argsort(np.asarray(depth, np.int64), kind="stable")
        where = np.empty(n + 1, np.int64)  # old node -> new; where[-1] = -1 for the root
        where[by_depth] = np.arange(n)
        where[n] = -1
        self.parent = where[np.asarray(parent, np.int64)[by_depth]] if n else np.zeros(0, np.int64)
        self.byte = np.asarray(byte, np.int64)[by_depth] if n else np.zeros(0, np.int64)
        self.end = where[np.asarray(end, np.int64)] if n else np.zeros(len(texts), np.int64)
        self.n_nodes = n + 1  # (the last: where empty tokens end, never reached)
        self.end[empty] = n
        counts = np.bincount(np.asarray(depth, np.int64)) if n else np.zeros(1, np.int64)
        bounds = np.concatenate([[0], np.cumsum(counts[1:])]).tolist()
        self.levels = [(bounds[d], bounds[d + 1]) for d in range(len(bounds) - 1)]


def key_of(groups) -> bytes:
    """The mask key of ``groups`` (group ids, and ``-1 - token`` for a token checked alone): the
    sorted distinct ids as int64 bytes. Bytes, not a tuple: made from the kernel's array in one
    copy, and hashed once (a tuple of a few hundred ints takes microseconds to build and to hash)."""
    return np.array(sorted(set(groups)), np.int64).tobytes()


def merge_keys(keys) -> bytes:
    """The union of mask keys (``key_of``): sorted and deduplicated by hand, as ``np.unique``
    hashes (some 60 µs on a few hundred ids)."""
    a = np.sort(np.concatenate([key_groups(k) for k in keys]))
    if len(a) > 1:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    return a.tobytes()


def key_groups(key: bytes) -> np.ndarray:
    """The ids of a mask key (``key_of``), read-only."""
    return np.frombuffer(key, np.int64)


def _appended(buf: np.ndarray, n: int, new: np.ndarray) -> np.ndarray:
    """``buf[:n]`` followed by ``new``, in ``buf`` when it has room (else a buffer twice as large).

    Readers hold ``buf`` and read only its first ``n`` items, which never change.
    """
    end = n + len(new)
    if end > len(buf) or not buf.flags.writeable:
        grown = np.empty(max(end, 2 * len(buf)), buf.dtype)
        grown[:n] = buf[:n]
        buf = grown
    buf[n:end] = new
    return buf


def bits_with(bits: np.ndarray, ids, on: bool = True) -> np.ndarray:
    """A read-only copy of the vocabulary bitset ``bits`` with the bits of ``ids`` set (``on``) or cleared."""
    ids = np.asarray(ids, np.int64)
    out = bits.copy()
    one = np.uint64(1) << (ids & 63).astype(np.uint64)
    if on:
        np.bitwise_or.at(out, ids >> 6, one)
    else:
        np.bitwise_and.at(out, ids >> 6, ~one)
    out.flags.writeable = False
    return out


def bits_has(bits: np.ndarray, token_id: int) -> bool:
    """Whether ``token_id``'s bit is set in the vocabulary bitset ``bits``."""
    return token_id < 64 * len(bits) and bool((int(bits[token_id >> 6]) >> (token_id & 63)) & 1)




def insert_sorted(base: np.ndarray, small: np.ndarray) -> np.ndarray:
    """The sorted union of sorted ``base`` and sorted ``small`` (no duplicates in either); read-only."""
    if len(small):
        pos = np.searchsorted(base, small)
        have = base[np.minimum(pos, len(base) - 1)] == small if len(base) else np.zeros(len(small), bool)
        if not have.all():
            base = np.insert(base, pos[~have], small[~have])
    if base.flags.writeable:
        base.flags.writeable = False
    return base


