"""Budget-aware ending: completions, their token plans, and bounds per mask group.

A *completion* of a guide state is a byte string that makes the text so far a
sentence; ``Completer`` finds a short one for any configuration (parser state,
scanner state): finish the lexeme in progress by the shortest path of its DFA,
then finish the parser. Its *plan* (greedy longest match over the vocabulary)
spells it in tokens, each allowed by construction (text + plan is a sentence).
``cost`` bounds the plan's length: the completion's bytes when every byte that
completions use is a token by itself (always so for byte-level and byte-fallback
vocabularies), else the plan's own length.

The guarantee (``GrammarGuide`` with ``max_tokens``): with ``r`` tokens left, a
token is allowed only if the state it leads to has a completion of cost at most
``r - 1``. The mask groups (``masks``) know where their tokens end, so this is
decided per group, not per token: for a group kept at tree node ``X`` (the parser
after the group's terminals) ending in scanner state ``c``, the cost of the
cheapest completion of configuration ``(X, c)``. The state after any of its tokens
has that configuration (up to readings the parser rejects), so its own cheapest
completion costs no more. The guide carries its plan, so the plan's next token
always stays allowed and the text always ends complete within ``max_tokens``.
Far from the end, ``visit_bound`` (per tree node, not per group) shows cheaply
that no group can exceed the budget, and the plain masks apply.

Parser completions come from the Earley set without feeding it: for an entry
``(DFA state, origin)`` and a terminal ``T``, the items with ``T`` (or a nonterminal
whose left corner reaches ``T``, ``lc``) after the dot give ``rest + finish(origin,
lhs)``; ``finish(o, A)`` is the shortest text after ``A`` ends, having started in
set ``o`` (a per-set shortest-path table, ``finish_table``).
"""

from __future__ import annotations

import numpy as np

from ..automaton import ByteDFA
from ..distance import UNREACHABLE, byte_distances

# Bytes preferred in completions (earlier first), among those of equal length.
_PREFERRED = (list(range(ord("a"), ord("z") + 1)) + list(range(ord("0"), ord("9") + 1))
              + list(range(ord("A"), ord("Z") + 1)) + list(range(0x21, 0x7F)) + [0x20]
              + list(range(0x80, 0x100)) + list(range(0x20)) + [0x7F])
_RANK = np.empty(256, np.int64)
_RANK[np.array(sorted(set(_PREFERRED), key=_PREFERRED.index))] = np.arange(256)


def dfa_suffixes(dfa: ByteDFA, rank: np.ndarray = _RANK) -> list:
    """For each state, a shortest byte string to an accepting state (None if none).

    Among bytes that lead equally fast to acceptance, the lowest ``rank`` wins.
    """
    dist = byte_distances(dfa)
    n = dfa.n_states
    trans = dfa.transitions
    ext = np.append(dist, np.int64(UNREACHABLE))
    nxt_dist = ext[trans]  # (n, 256); dead -> UNREACHABLE
    out: list = [None] * n
    order = np.argsort(dist, kind="stable")
    for q in order.tolist():
        if dist[q] >= UNREACHABLE:
            continue
        if dist[q] == 0:
            out[q] = b""
            continue
        cand = np.flatnonzero(nxt_dist[q] == dist[q] - 1)
        b = int(cand[np.argmin(rank[cand])])
        out[q] = bytes([b]) + out[int(trans[q, b])]
    return out


class Completer:
    """Short completions of guide states and configurations, and their token plans."""

    def __init__(self, index):
        self.index = index
        g = self.g = index.grammar
        sc = index.scanner
        # Prefer bytes that are tokens by themselves, so that completions can be spelled.
        voc = index.vocabulary
        lengths = np.diff(voc.offsets)
        single = np.zeros(256, bool)
        single[voc.flat[voc.offsets[:-1][lengths == 1]]] = True
        rank = _RANK + np.where(single, 0, 256)
        self.suffix = [dfa_suffixes(t.dfa, rank) for t in index.cfg.terminals]
        self.ign = sc.ign
        nt = g.n_terminals
        best: dict[int, bytes] = {t: self.suffix[t][0] for t in range(nt)}
        changed = True
        while changed:
            changed = False
            for lhs, rhs in g.rules:
                if all(s in best for s in rhs):
                    s = b"".join(best[x] for x in rhs)
                    if lhs not in best or len(s) < len(best[lhs]):
                        best[lhs] = s
                        changed = True
        self.best = best
        ns = g.next_sym
        # bytes of the symbols after the dot: an item's is its symbol's and the next item's (from the
        # rule's end back: linear in the rule's length, where walking each item to its end was quadratic)
        rest_of = [b""] * len(ns)
        for it in range(len(ns) - 1, -1, -1):
            if ns[it] >= 0:
                rest_of[it] = best[ns[it]] + rest_of[it + 1]
        self.rest_of = rest_of
        # lc[B][T]: shortest bytes after T in a string of B that starts with terminal T
        lc: dict[int, dict[int, bytes]] = {b: {} for b in g.nt_id.values()}
        changed = True
        while changed:
            changed = False
            for lhs, rhs in g.rules:
                d = lc[lhs]
                for i, x in enumerate(rhs):
                    tail = b"".join(best[y] for y in rhs[i + 1:])
                    if x < nt:
                        cands = {x: tail}
                    else:
                        cands = {t: w + tail for t, w in lc[x].items()}
                    for t, w in cands.items():
                        if t not in d or len(w) < len(d[t]):
                            d[t] = w
                            changed = True
                    if x not in g.nullable:
                        break
        self.lc = lc
        self._dcost: dict = {}  # DFA state -> {T: [(lhs, bytes)]}
        self._finish: dict = {}
        self._tokens = None
        self._maxlen = 0
        self._singles = b""
        self._plans: dict = {}
        self.start_lhs = g.item_lhs[g.accept_item]
        self._sfx_cache: dict = {}
        self._node_costs: dict = {}
        self._visit_bounds: dict = {}
        self._node_info: dict = {}
        # Completions only use the bytes of these suffixes; they are spelled one token per
        # byte at worst when each of those bytes is a token by itself.
        used = set()
        for table in self.suffix:
            for w in table:
                if w:
                    used.update(w)
        self._used = used
        self._token_table()
        self.bytewise = used <= set(self._singles)

    # -- parser completions ---------------------------------------------------------------
    def flush(self) -> None:
        """Forget what is keyed by parser states (``GrammarIndex.flush``)."""
        self._plans = {}
        self._node_costs = {}
        self._visit_bounds = {}

    def dcost(self, d: int) -> dict:
        """For DFA state ``d``: terminal T -> ((lhs, bytes after T up to the end of lhs), ...), minimal per lhs."""
        got = self._dcost.get(d)
        if got is None:
            g = self.g
            nt = g.n_terminals
            out: dict[int, dict] = {}
            for it in g.state_items(d):
                x = g.next_sym[it]
                if x < 0:
                    continue
                rest = self.rest_of[it + 1]
                cands = {x: rest} if x < nt else {t: w + rest for t, w in self.lc[x].items()}
                lhs = g.item_lhs[it]
                for t, w in cands.items():
                    per = out.setdefault(t, {})
                    if lhs not in per or len(w) < len(per[lhs]):
                        per[lhs] = w
            # (tuples of ints and bytes: the cycle collector stops walking them)
            got = self._dcost[d] = {t: tuple(per.items()) for t, per in out.items()}
        return got

    def finish(self, o, a: int) -> bytes | None:
        """Shortest bytes after nonterminal ``a`` completes, having started in set ``o``."""
        return self.finish_table(o).get(a)

    def finish_table(self, o) -> dict:
        """``finish(o, ·)`` for every nonterminal some item of ``o`` waits for (memoized on ``o``).

        Items started in older sets bring their own finish (recursively, older sets
        first); items started in ``o`` itself chain through this table, so it is a
        shortest-path fixpoint (Bellman-Ford over the few items of one set).
        """
        memo = o.budget
        if memo is None:
            memo = o.budget = {}
        tab = memo.get("fin")
        if tab is not None:
            return tab
        g = self.g
        nt = g.n_terminals
        dstates, ns, lhs_of, rest_of = g.dstates, g.next_sym, g.item_lhs, self.rest_of
        tab = {}
        if o is g.initial:
            tab[self.start_lhs] = b""
        inner = []
        for d, oo in o.entries:
            for it in dstates[d].items:
                a = ns[it]
                if a < nt:
                    continue
                if oo is None:
                    inner.append((a, rest_of[it + 1], lhs_of[it]))
                    continue
                tail = self.finish(oo, lhs_of[it])
                if tail is not None:
                    cand = rest_of[it + 1] + tail
                    old = tab.get(a)
                    if old is None or _shorter(cand, old):
                        tab[a] = cand
        changed = True
        while changed:
            changed = False
            for a, rest, lhs in inner:
                tail = tab.get(lhs)
                if tail is not None:
                    cand = rest + tail
                    old = tab.get(a)
                    if old is None or _shorter(cand, old):
                        tab[a] = cand
                        changed = True
        memo["fin"] = tab
        return tab

    def _entry_cost(self, d: int, o, t: int, here) -> bytes | None:
        """Shortest completion through entry (``d``, ``o``) that first takes terminal ``t``."""
        res = None
        for lhs, w in self.dcost(d).get(t, ()):
            tail = self.finish(here if o is None else o, lhs)
            if tail is not None and (res is None or _shorter(w + tail, res)):
                res = w + tail
        return res

    def after_terminal(self, p, t: int) -> bytes | None:
        """Shortest completion of parser state ``p`` once it takes terminal ``t`` (bytes after ``t``)."""
        memo = p.budget
        if memo is None:
            memo = p.budget = {}
        key = ("t", t)
        if key in memo:
            return memo[key]
        res = None
        g = self.g
        for d, o in p.entries:
            if g.dstates[d].is_pred:
                continue  # a predicted companion: its items are reached through lc from the kernel
            c = self._entry_cost(d, o, t, p)
            if c is not None and (res is None or _shorter(c, res)):
                res = c
        memo[key] = res
        return res

    def peek_terminal(self, p, t: int, t2: int) -> bytes | None:
        """``after_terminal(p.feed(t), t2)`` without building ``p.feed(t)``."""
        f = p._feeds.get(t)
        if f is not None:
            return self.after_terminal(f, t2)
        memo = p.budget
        if memo is None:
            memo = p.budget = {}
        key = ("pk", t, t2)
        if key in memo:
            return memo[key]
        g = self.g
        res = None
        seen = set()
        stack = []
        for d, o in p.entries:
            sh = g.shifts(d)
            if t in sh:
                stack.append((sh[t], p if o is None else o))
        while stack:
            d, o = stack.pop()
            if (d, o.uid) in seen:
                continue
            seen.add((d, o.uid))
            c = self._entry_cost(d, o, t2, None)
            if c is not None and (res is None or _shorter(c, res)):
                res = c
            for a in g.dstates[d].complete:
                for d2, o2 in o.waiting(a):
                    stack.append((d2, o2))
        memo[key] = res
        return res

    def lexeme_suffix(self, c: int) -> list:
        """(terminal, bytes to end its lexeme) for the readings of scanner state ``c``."""
        got = self._sfx_cache.get(c)
        if got is None:
            got = []
            for t, q in self.index.scanner.readings(c):
                s = self.suffix[t][q]
                if s is not None:
                    got.append((t, s))
            self._sfx_cache[c] = got
        return got

    def _allowed_and_after(self, node):
        """(terminals allowed at ``node``, terminal -> terminals allowed after it).

        ``node`` is a parser state, or (parser state, terminal) for the state after it.
        """
        if isinstance(node, tuple):
            parent, via = node

            def after(t2, parent=parent, via=via):
                return self.peek_terminal(parent, via, t2)

            return parent.peek(via), after
        return node.allowed, self._after_of(node)

    def node_completion(self, node, c: int) -> bytes | None:
        """Shortest completion of configuration (parser ``node``, scanner state ``c``).

        ``node`` is a parser state, or (parser state, terminal) for the state after it.
        """
        allowed, after = self._allowed_and_after(node)
        if not allowed:
            return None
        res = None
        ign = self.ign
        for t, s in self.lexeme_suffix(c):
            if t == ign:
                tail = self._nonempty(allowed, after)
            elif (allowed >> t) & 1:
                tail = after(t)
            else:
                continue
            if tail is not None:
                res = self._cheaper(s + tail, res)
        return res

    def node_cost(self, node, c: int) -> int:
        """Tokens of ``node_completion(node, c)`` (memoized)."""
        key = (node[0].uid, node[1], c) if isinstance(node, tuple) else (node.uid, -1, c)
        got = self._node_costs.get(key)
        if got is None:
            got = self._node_costs[key] = self.cost(self.node_completion(node, c))
        return got

    def _cheaper(self, w: bytes, than: bytes | None) -> bytes:
        """The one of ``w`` and ``than`` with fewer tokens (then shorter, then smaller)."""
        if than is None:
            return w
        a, b = self.cost(w), self.cost(than)
        if a != b:
            return w if a < b else than
        return w if _shorter(w, than) else than

    def visit_bound(self, s: int, node) -> int:
        """An upper bound, in bytes, on the completion of any group kept at tree node ``s``.

        ``node`` is the parser state there (or (parser state, terminal)). Cheap: it
        uses the longest lexeme suffix of the node's groups and the parser's
        completions after each terminal they may end in, not the groups one by one.
        """
        if node is None or not self.bytewise:
            return UNREACHABLE
        key = (s, node[0].uid, node[1]) if isinstance(node, tuple) else (s, node.uid, -1)
        got = self._visit_bounds.get(key)
        if got is not None:
            return got
        eng = self.index.engine
        info = self._node_info.get(s)
        if info is None:
            live = 0
            sfx = 0
            for g in eng.node_groups(s):
                live |= eng.scanner.live[eng.group_state(g)]
                for _, w in self.lexeme_suffix(eng.group_state(g)):
                    sfx = max(sfx, len(w))
            info = self._node_info[s] = (live, sfx)
        live, sfx = info
        allowed, after = self._allowed_and_after(node)
        worst = 0
        real = live & allowed
        while real:
            low = real & -real
            real ^= low
            w = after(low.bit_length() - 1)
            worst = max(worst, UNREACHABLE if w is None else len(w))
        if self.ign >= 0 and (live >> self.ign) & 1 and allowed:
            w = self._nonempty(allowed, after)
            worst = max(worst, UNREACHABLE if w is None else len(w))
        got = self._visit_bounds[key] = sfx + worst
        return got

    def _after_of(self, p):
        return lambda t: self.after_terminal(p, t)

    def _nonempty(self, allowed: int, after) -> bytes | None:
        """Shortest completion that starts a new lexeme of an allowed terminal."""
        res = None
        while allowed:
            low = allowed & -allowed
            allowed ^= low
            t = low.bit_length() - 1
            tail = after(t)
            if tail is not None:
                cand = self.best[t] + tail
                if res is None or _shorter(cand, res):
                    res = cand
        return res

    def state_completion(self, st) -> bytes | None:
        """A shortest completion of guide state ``st`` (b'' when it is complete)."""
        index = self.index
        if index.accepting(st):
            return b""
        res = None
        for p, c in st.configs:
            w = self.node_completion(p, c)
            if w is not None:
                res = self._cheaper(w, res)
        return res

    # -- tokens ------------------------------------------------------------------------------
    def _token_table(self) -> None:
        """Token bytes -> id, for the tokens made only of bytes completions use."""
        voc = self.index.vocabulary
        ok = np.zeros(256, bool)
        ok[sorted(self._used)] = True
        lengths = np.diff(voc.offsets)
        bad = np.concatenate([[0], np.cumsum(~ok[voc.flat])])
        bad_in = bad[voc.offsets[1:]] - bad[voc.offsets[:-1]]
        keep = np.flatnonzero((lengths > 0) & (bad_in == 0))
        data = voc.flat.tobytes()
        off = voc.offsets
        stops = set(voc.stop_ids.tolist())
        table: dict = {}
        for t in keep[::-1].tolist():  # the smallest id wins
            if t not in stops:
                table[data[off[t]:off[t + 1]]] = t
        self._tokens = table
        self._maxlen = max((len(b) for b in table), default=1)
        singles = bytes(b[0] for b in table if len(b) == 1)
        self._singles = singles

    def tokenize(self, w: bytes) -> list[int] | None:
        """Greedy longest-match token ids spelling ``w`` (None if it cannot be spelled)."""
        got = self._plans.get(w)
        if got is not None or w in self._plans:
            return got
        if self._tokens is None:
            self._token_table()
        out = []
        i = 0
        while i < len(w):
            for k in range(min(self._maxlen, len(w) - i), 0, -1):
                t = self._tokens.get(w[i:i + k])
                if t is not None:
                    out.append(t)
                    i += k
                    break
            else:
                out = None
                break
        self._plans[w] = out
        return out

    def plan(self, st) -> list[int] | None:
        """Token ids spelling a short completion of guide state ``st`` (cached on it)."""
        got = st.plan
        if got is None:
            w = self.state_completion(st)
            toks = None if w is None else self.tokenize(w)
            got = st.plan = False if toks is None else toks
        return None if got is False else got

    def cost(self, w: bytes | None) -> int:
        """An upper bound on the tokens of ``plan`` for completion ``w``: its bytes, when each is a
        token by itself (greedy then never fails), else the plan's length (large: no plan)."""
        if w is None:
            return UNREACHABLE
        if self._tokens is None:
            self._token_table()
        if not w.translate(None, self._singles):
            return len(w)
        t = self.tokenize(w)
        return UNREACHABLE if t is None else len(t)


def _shorter(a: bytes, b: bytes) -> bool:
    """A total order on completions: shorter first, then bytewise (so ties break the same way)."""
    return len(a) < len(b) or (len(a) == len(b) and a < b)
