"""The internal form every grammar is converted to, and its normalization.

A ``CFG`` has byte-level terminals (each a trimmed ``ByteDFA``), productions over
terminals (``int`` indexes) and nonterminals (``str`` names), a start symbol and the
set of ignored terminals (Lark's ``%ignore``: allowed between any two terminals).

``normalize`` makes it ready for the Earley recognizer: terminals that match the
empty string are split (``T`` becomes ``ε | T'``), terminals with equal languages
are merged, unproductive and unreachable symbols are removed, and the start rule
is augmented (``__start__ -> start``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..automaton import ByteDFA, ByteNFA, minimize
from .errors import GrammarError

START = "__start__"


@dataclass
class Terminal:
    name: str
    dfa: ByteDFA


@dataclass
class CFG:
    terminals: list[Terminal]
    rules: list[tuple[str, tuple]]  # (lhs, rhs); rhs items: int terminal index or str nonterminal
    start: str
    ignore: frozenset = field(default_factory=frozenset)
    source: str = "grammar"

    def nonterminals(self) -> list[str]:
        seen = {}
        for lhs, _ in self.rules:
            seen.setdefault(lhs, None)
        return list(seen)


def literal_dfa(text: str, ignore_case: bool = False) -> ByteDFA:
    """The DFA of exactly ``text`` (UTF-8), case-insensitively if asked."""
    nfa = ByteNFA()
    cur = nfa.add_state()
    for ch in text:
        nxt = nfa.add_state()
        variants = {ch, ch.lower(), ch.upper()} if ignore_case else {ch}
        for v in variants:
            if len(v) != 1:
                continue
            nfa.add_codepoints(cur, [(ord(v), ord(v))], nxt)
        cur = nxt
    nfa.accepting = {cur}
    return nfa.to_dfa(0)


def without_empty(dfa: ByteDFA) -> ByteDFA:
    """``dfa`` minus the empty string."""
    n = dfa.n_states
    trans = np.vstack([dfa.transitions[0:1] + 0, dfa.transitions])
    trans = np.where(trans >= 0, trans + 1, -1).astype(np.int32)
    acc = np.concatenate([[False], dfa.accepting])
    del n
    return minimize(trans, acc)


def _dfa_key(dfa: ByteDFA) -> bytes:
    return dfa.transitions.tobytes() + b"|" + dfa.accepting.tobytes()


def normalize(cfg: CFG) -> CFG:
    """The equivalent grammar without empty terminals, duplicates or useless symbols."""
    terminals = list(cfg.terminals)
    rules = [(lhs, tuple(rhs)) for lhs, rhs in cfg.rules]
    ignore = set(cfg.ignore)
    defined = {lhs for lhs, _ in rules}
    for lhs, rhs in rules:
        for s in rhs:
            if isinstance(s, str) and s not in defined:
                raise GrammarError(f"rule {lhs!r} uses undefined rule {s!r}", source=cfg.source)
    if cfg.start not in defined:
        raise GrammarError(f"the grammar has no start rule {cfg.start!r}", source=cfg.source)

    # Terminals matching nothing are dropped; those matching the empty string are split.
    dead = {i for i, t in enumerate(terminals) if t.dfa.is_empty}
    replace: dict[int, object] = {}
    extra_rules = []
    for i, t in enumerate(terminals):
        if i in dead or not t.dfa.accepting[0]:
            continue
        rest = without_empty(t.dfa)
        if rest.is_empty:  # matches only the empty string
            if i in ignore:
                dead.add(i)
            replace[i] = ()
            continue
        terminals[i] = Terminal(t.name, rest)
        if i not in ignore:
            opt = f"__opt_{t.name}_{i}"
            replace[i] = (opt,)
            extra_rules += [(opt, ()), (opt, (i,))]
    new_rules = []
    for lhs, rhs in rules + extra_rules:
        out = []
        ok = True
        for s in rhs:
            if isinstance(s, int) and s in dead and s not in replace:
                ok = False
                break
            if isinstance(s, int) and s in replace and not (lhs.startswith("__opt_") and len(rhs) == 1):
                out.extend(replace[s])
            else:
                out.append(s)
        if ok:
            new_rules.append((lhs, tuple(out)))
    rules = new_rules
    ignore -= dead

    # Productive nonterminals.
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if lhs not in productive and all(isinstance(s, int) or s in productive for s in rhs):
                productive.add(lhs)
                changed = True
    if cfg.start not in productive:
        raise GrammarError(f"the grammar's language is empty (rule {cfg.start!r} derives no string)",
                           source=cfg.source)
    rules = [(lhs, rhs) for lhs, rhs in rules
             if lhs in productive and all(isinstance(s, int) or s in productive for s in rhs)]
    # Reachable symbols.
    by_lhs: dict[str, list] = {}
    for lhs, rhs in rules:
        by_lhs.setdefault(lhs, []).append(rhs)
    reach = {cfg.start}
    stack = [cfg.start]
    used_terms = set(ignore)
    while stack:
        for rhs in by_lhs.get(stack.pop(), ()):
            for s in rhs:
                if isinstance(s, int):
                    used_terms.add(s)
                elif s not in reach:
                    reach.add(s)
                    stack.append(s)
    rules = [(lhs, rhs) for lhs, rhs in rules if lhs in reach]
    # Renumber terminals, merging equal languages.
    renum: dict[int, int] = {}
    by_key: dict[bytes, int] = {}
    out_terms: list[Terminal] = []
    for i in sorted(used_terms):
        k = _dfa_key(terminals[i].dfa)
        if i not in ignore and k in by_key:
            renum[i] = by_key[k]
            continue
        renum[i] = len(out_terms)
        if i not in ignore:
            by_key[k] = renum[i]
        out_terms.append(terminals[i])
    rules = [(lhs, tuple(renum[s] if isinstance(s, int) else s for s in rhs)) for lhs, rhs in rules]
    rules = list(dict.fromkeys(rules))  # drop duplicate productions
    rules.insert(0, (START, (cfg.start,)))
    return CFG(out_terms, rules, START, frozenset(renum[i] for i in ignore), cfg.source)
