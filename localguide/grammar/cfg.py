"""The internal form every grammar is converted to, and its normalization.

A ``CFG`` has byte-level terminals (each a trimmed ``ByteDFA``), productions over
terminals (``int`` indexes) and nonterminals (``str`` names), a start symbol and the
set of ignored terminals (Lark's ``%ignore``: allowed between any two terminals).

``normalize`` makes it ready for the Earley recognizer: terminals that match the
empty string are split (``T`` becomes ``ε | T'``), terminals with equal languages
are merged, unproductive and unreachable symbols are removed, and the start rule
is augmented (``__start__ -> start``).

Ignored text (a deliberate restriction of the language): all ignored terminals
become one terminal, the *ignored run* ``(I1|I2|...)+`` limited to
``max_ignored_run`` bytes, which never follows itself. So a run of consecutive
ignored bytes is at most ``max_ignored_run`` long. That the text may not end with
ignored text is enforced by the parser side (``GrammarIndex``), not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..automaton import ByteDFA, ByteNFA, minimize, row_runs
from ..distance import byte_distances
from ..errors import GrammarError

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
    # the ignored run's limit, and for each state of its DFA the state of the unlimited run
    max_ignored_run: int | None = None
    ignore_labels: np.ndarray | None = None

    def nonterminals(self) -> list[str]:
        seen = {}
        for lhs, _ in self.rules:
            seen.setdefault(lhs, None)
        return list(seen)

    @property
    def n_terminals(self) -> int:
        return len(self.terminals)

    def terminal_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(each terminal's DFA state count, every terminal's accepting flags in one array)."""
        return (np.array([t.dfa.n_states for t in self.terminals], np.int64),
                np.concatenate([t.dfa.accepting for t in self.terminals] or [np.zeros(0, bool)]).astype(bool))

    def terminal_dfa(self, i: int) -> ByteDFA:
        return self.terminals[i].dfa

    def rule_arrays(self) -> tuple:
        """The rules as arrays: (number of nonterminals, each rule's left-hand side, each
        right-hand side's length, the right-hand sides' symbols in one array, the start).
        Nonterminals are indexes into ``nonterminals()``; in the right-hand sides a terminal
        is its index and nonterminal ``i`` is ``-1 - i``."""
        nts = self.nonterminals()
        nt_id = {n: i for i, n in enumerate(nts)}
        rhs = [s if isinstance(s, int) else -1 - nt_id[s] for _, r in self.rules for s in r]
        return (len(nts), np.array([nt_id[lhs] for lhs, _ in self.rules], np.int64),
                np.array([len(r) for _, r in self.rules], np.int64), np.array(rhs, np.int64), nt_id[self.start])


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


def ignored_run_dfa(dfas, max_run: int | None) -> tuple[ByteDFA, np.ndarray]:
    """``(D1|D2|...)+``, limited to ``max_run`` bytes when given (the ignored run).

    Returns the DFA and, for each of its states, the state of the unlimited run DFA
    it counts bytes in (the limited DFA is that DFA times a byte counter, trimmed, not
    minimized: state ``(q, k)`` is reached by exactly ``k`` bytes).
    """
    nfa = ByteNFA()
    start = nfa.add_state()
    final = nfa.add_state()
    nfa.add_epsilon(final, start)
    for dfa in dfas:
        base = len(nfa.edges)
        for _ in range(dfa.n_states):
            nfa.add_state()
        nfa.add_epsilon(start, base)
        trans = dfa.transitions
        for q in range(dfa.n_states):
            for b, e, t in row_runs(trans[q]):
                if t >= 0:
                    nfa.add_range(base + q, b, e, base + t)
            if dfa.accepting[q]:
                nfa.add_epsilon(base + q, final)
    nfa.accepting = {final}
    run = nfa.to_dfa(start)
    if max_run is None:
        return run, np.arange(run.n_states, dtype=np.int32)
    dist = byte_distances(run)
    # Breadth-first over (q, k), keeping the states that can still accept within max_run bytes.
    index = {(0, 0): 0}
    order = [(0, 0)]
    rows = []
    i = 0
    while i < len(order):
        q, k = order[i]
        i += 1
        row = np.full(256, -1, np.int32)
        if k < max_run:
            for b in range(256):
                q2 = int(run.transitions[q, b])
                if q2 >= 0 and k + 1 + dist[q2] <= max_run:
                    key = (q2, k + 1)
                    if key not in index:
                        index[key] = len(order)
                        order.append(key)
                    row[b] = index[key]
        rows.append(row)
    acc = np.array([bool(run.accepting[q]) for q, _ in order])
    labels = np.array([q for q, _ in order], np.int32)
    return ByteDFA(np.stack(rows), acc), labels


def _dfa_key(dfa: ByteDFA) -> bytes:
    return dfa.transitions.tobytes() + b"|" + dfa.accepting.tobytes()


def normalize(cfg: CFG, max_ignored_run: int | None = None) -> CFG:
    """The equivalent grammar without empty terminals, duplicates or useless symbols.

    Ignored terminals become one ignored-run terminal (the last one), see the module doc.
    """
    if max_ignored_run is not None and max_ignored_run < 1:
        raise ValueError("max_ignored_run must be at least 1 (or None for no limit)")
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
    while stack:
        for rhs in by_lhs.get(stack.pop(), ()):
            for s in rhs:
                if isinstance(s, str) and s not in reach:
                    reach.add(s)
                    stack.append(s)
    rules = [(lhs, rhs) for lhs, rhs in rules if lhs in reach]
    # Renumber the terminals the rules use, merging equal languages; the ignored run comes last.
    renum: dict[int, int] = {}
    by_key: dict[bytes, int] = {}
    out_terms: list[Terminal] = []
    in_rules = {s for _, rhs in rules for s in rhs if isinstance(s, int)}
    for i in sorted(in_rules):
        k = _dfa_key(terminals[i].dfa)
        if k in by_key:
            renum[i] = by_key[k]
            continue
        renum[i] = by_key[k] = len(out_terms)
        out_terms.append(terminals[i])
    rules = [(lhs, tuple(renum[s] if isinstance(s, int) else s for s in rhs)) for lhs, rhs in rules]
    rules = list(dict.fromkeys(rules))  # drop duplicate productions
    rules.insert(0, (START, (cfg.start,)))
    if not ignore:
        return CFG(out_terms, rules, START, frozenset(), cfg.source)
    names = "|".join(terminals[i].name for i in sorted(ignore))
    run, labels = ignored_run_dfa([terminals[i].dfa for i in sorted(ignore)], max_ignored_run)
    out_ignore = frozenset([len(out_terms)])
    out_terms.append(Terminal(f"({names})+", run))
    return CFG(out_terms, rules, START, out_ignore, cfg.source, max_ignored_run, labels)
