"""Shortest completions, for budget-aware ending.

``Completer.shortest(state)`` gives a short byte string that completes the text so
far to a sentence: finish the current lexeme by the shortest path of its DFA,
then finish the open Earley items with the shortest strings of the symbols left
in them, innermost first. ``Completer.plan`` turns it into tokens (greedy longest
match over the vocabulary), each of which the guide allows by construction.
"""

from __future__ import annotations

from collections import deque


def _dfa_suffixes(dfa):
    """For each state, the shortest bytes to an accepting state (None if none)."""
    trans, acc = dfa.transitions, dfa.accepting
    n = len(acc)
    best: list = [None] * n
    preds: list[list] = [[] for _ in range(n)]
    for q in range(n):
        for b in range(256):
            t = int(trans[q, b])
            if t >= 0:
                preds[t].append((q, b))
    queue = deque()
    for q in range(n):
        if acc[q]:
            best[q] = b""
            queue.append(q)
    while queue:
        t = queue.popleft()
        for q, b in preds[t]:
            if best[q] is None:
                best[q] = bytes([b]) + best[t]
                queue.append(q)
    return best


class Completer:
    def __init__(self, index):
        self.index = index
        g = index.grammar
        self.g = g
        self.suffix = [_dfa_suffixes(t.dfa) for t in index.cfg.terminals]
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
        self._finish: dict = {}
        self._tokens = None
        self._maxlen = 0

    def rest(self, it: int) -> bytes:
        g = self.g
        out = []
        while g.next_sym[it] >= 0:
            out.append(self.best[g.next_sym[it]])
            it += 1
        return b"".join(out)

    def finish(self, o, n: int, guard: set) -> bytes | None:
        """Shortest bytes after nonterminal ``n`` completes, having started in state ``o``."""
        g = self.g
        if o is g.initial and n == g.item_lhs[g.accept_item]:
            return b""
        key = (o.uid, n)
        if key in self._finish:
            return self._finish[key]
        if key in guard:
            return None
        guard.add(key)
        res = None
        for it2, o2 in o.waiting(n):
            tail = self.finish(o2, g.item_lhs[it2], guard)
            if tail is not None:
                cand = self.rest(it2 + 1) + tail
                if res is None or len(cand) < len(res):
                    res = cand
        guard.discard(key)
        if not guard:
            self._finish[key] = res
        return res

    def after_parser(self, p) -> bytes | None:
        g = self.g
        res = b"" if p.accepting else None
        for it, o in p.items:
            tail = self.finish(p if o is None else o, g.item_lhs[it], set())
            if tail is not None:
                cand = self.rest(it) + tail
                if res is None or len(cand) < len(res):
                    res = cand
        return res

    def shortest(self, st) -> bytes | None:
        index = self.index
        res = None
        for p, c in st.configs:
            cands = []
            if st.initial:
                cands.append((b"", p))
            for t, q in index.scanner.readings[c]:
                suf = self.suffix[t][q]
                if suf is None:
                    continue
                p2 = p.feed(t)
                if p2 is not None:
                    cands.append((suf, p2))
            for suf, p2 in cands:
                tail = self.after_parser(p2)
                if tail is not None and (res is None or len(suf) + len(tail) < len(res)):
                    res = suf + tail
        return res

    def plan(self, st) -> list[int] | None:
        """Token ids spelling a shortest completion of ``st`` (greedy longest match)."""
        w = self.shortest(st)
        if w is None:
            return None
        if self._tokens is None:
            voc = self.index.vocabulary
            stops = set(voc.stop_ids.tolist())
            self._tokens = {}
            for t in range(voc.size):
                b = voc[t]
                if b and t not in stops and b not in self._tokens:
                    self._tokens[b] = t
            self._maxlen = max(len(b) for b in self._tokens)
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
                return None
        return out
