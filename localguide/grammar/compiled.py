"""A grammar compiled for one vocabulary, and the guide states it hands out.

``GrammarIndex`` holds the normalized grammar, the Earley tables, the scanner and
the mask engine. Guide states (``GState``) are interned sets of configurations
``(parser state, scanner state)``, one per way of reading the text so far; each
caches its mask, whether it is complete, and its successors by token.
"""

from __future__ import annotations

import numpy as np

from .cfg import CFG, normalize
from .earley import Grammar
from .lexer import Scanner
from .masks import MaskEngine, union

MAX_CONFIGS = 4096


class GState:
    __slots__ = ("configs", "key", "initial", "_mask", "_accepting", "_only_stop", "next")

    def __init__(self, configs, key, initial=False):
        self.configs = configs
        self.key = key
        self.initial = initial
        self._mask = None
        self._accepting = None
        self._only_stop = None
        self.next: dict[int, GState | None] = {}


class GrammarIndex:
    """A compiled grammar. ``guide()`` makes a cursor; shareable between guides (not threads)."""

    def __init__(self, cfg: CFG, vocabulary, description: str = "grammar"):
        self.cfg = normalize(cfg)
        self.grammar = Grammar(self.cfg)
        self.scanner = Scanner(self.grammar)
        self.vocabulary = vocabulary
        self.vocab_size = vocabulary.size
        self.fingerprint = vocabulary.fingerprint
        self.stop_ids = vocabulary.stop_ids
        self.description = description
        self.engine = MaskEngine(self.scanner, vocabulary, self._viable)
        sc = self.scanner
        self._trans = sc.trans.tolist()
        self._live = sc.live
        self._acc = sc.accept_lists
        self._after = sc.after.tolist()
        self._ign = sc.ignore_mask
        self._states: dict = {}
        g0 = self.grammar.initial
        self.initial = GState(((g0, sc.start),), ((g0.uid, sc.start),), initial=True)
        self._budget = None

    # -- guide states ---------------------------------------------------------------
    def _intern(self, configs: dict) -> GState:
        key = tuple(sorted(configs))
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = GState(tuple(configs[k] for k in key), key)
        return st

    def _viable(self, p, c: int, data: bytes) -> bool:
        return bool(data) and self._run(((p, c),), data) is not None

    def step_bytes(self, st: GState, data: bytes) -> GState | None:
        """The guide state after ``data`` (None: no reading of the text survives)."""
        configs = self._run(st.configs, data)
        if configs is None:
            return None
        return self._intern({(p.uid, c): (p, c) for p, c in configs})

    def _run(self, configs, data: bytes):
        trans, live, acc, after, ign = self._trans, self._live, self._acc, self._after, self._ign
        for b in data:
            nxt: dict = {}
            for p, c in configs:
                cands = [(p, c)]
                for t in acc[c]:
                    p2 = p.feed(t)
                    if p2 is not None:
                        cands.append((p2, after[t]))
                for p2, c2 in cands:
                    c3 = trans[c2][b]
                    if c3 >= 0 and live[c3] & (p2.allowed | ign):
                        nxt[(p2.uid, c3)] = (p2, c3)
            if not nxt:
                return None
            if len(nxt) > MAX_CONFIGS:
                from .errors import GrammarError

                raise GrammarError(f"the text has more than {MAX_CONFIGS} live readings; the grammar is "
                                   f"too ambiguous to follow")
            configs = list(nxt.values())
        return configs

    def step(self, st: GState, token_id: int) -> GState | None:
        try:
            return st.next[token_id]
        except KeyError:
            pass
        data = self.vocabulary[token_id]
        res = self.step_bytes(st, data) if data else None
        st.next[token_id] = res
        return res

    def accepting(self, st: GState) -> bool:
        a = st._accepting
        if a is None:
            a = False
            for p, c in st.configs:
                if st.initial and p.accepting:
                    a = True
                    break
                for t in self._acc[c]:
                    p2 = p.feed(t)
                    if p2 is not None and p2.accepting:
                        a = True
                        break
                if a:
                    break
            st._accepting = a
        return a

    def token_mask(self, st: GState) -> np.ndarray:
        """Allowed text tokens (stop ids excluded)."""
        m = st._mask
        if m is None:
            parts = [self.engine.mask(p, c) for p, c in st.configs]
            m = parts[0] if len(parts) == 1 else union([x for x in parts if len(x)], self.vocab_size)
            st._mask = m
        return m

    def allowed(self, st: GState) -> np.ndarray:
        if self.accepting(st):
            key = ("stop", st.key)
            m = self._states.get(key)
            if m is None:
                m = np.union1d(self.token_mask(st), self.stop_ids).astype(np.int32)
                m.flags.writeable = False
                self._states[key] = m
            return m
        return self.token_mask(st)

    @property
    def completer(self):
        if self._budget is None:
            from .budget import Completer

            self._budget = Completer(self)
        return self._budget

    # -- API --------------------------------------------------------------------------
    def guide(self, max_tokens: int | None = None, opportunistic: bool = False):
        from .guide import GrammarGuide

        return GrammarGuide(self, max_tokens=max_tokens, opportunistic=opportunistic)

    def matches(self, text) -> bool:
        """True when ``text`` (str or bytes) is a sentence of the grammar."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        st = self.step_bytes(self.initial, data) if data else self.initial
        return st is not None and self.accepting(st)

    def is_prefix(self, text) -> bool:
        """True when ``text`` can be extended to a sentence of the grammar."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return (self.step_bytes(self.initial, data) if data else self.initial) is not None

    def __repr__(self) -> str:
        return (f"GrammarIndex({self.description}: {len(self.cfg.terminals)} terminals, "
                f"{len(self.cfg.rules)} productions, {self.scanner.n_states} scanner states)")
