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


# A bounded repetition ``x{0,m}`` is written as flat alternatives (``ε | x | x x | …``) up to
# this many copies, and in blocks of this many copies above it.
REPEAT_BLOCK = 16


class Repeats:
    """Rules for bounded repetitions ``x{lo,hi}`` whose Earley sets stay small at every count.

    Nested optionals (``x (x (x …)?)?``) make the k-th copy's set hold a chain of k
    completions, so each new copy costs more to parse and to mask. Flat alternatives keep
    the count in the dotted items instead (one entry however far in); above
    ``REPEAT_BLOCK`` copies, ``x{0,m}`` is ``B{0,q-1} x{0,b-1} | B^q x{0,r}`` with
    ``B = x^b`` and ``m = q b + r``, built the same way, so a set holds a few entries and
    the grammar grows by O(b² + m/b) items. Pieces are shared between repetitions of the
    same symbol (``memo``). ``fresh()`` gives an unused nonterminal name.
    """

    def __init__(self, fresh, rules: list):
        self.fresh = fresh
        self.rules = rules
        self.memo: dict = {}

    def bounded(self, item: tuple, lo: int, hi: int) -> tuple:
        """The right-hand side for ``item{lo,hi}`` (``item``: () or one symbol)."""
        if not item or hi == lo:
            return item * lo
        return item * lo + (self.upto(item, hi - lo),)

    def star(self, item: tuple) -> str:
        """A nonterminal for ``item*`` (left recursive, which Earley parses in constant space)."""
        key = (item, None)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self.fresh()
            self.rules += [(got, ()), (got, (got,) + item)]
        return got

    def upto(self, item: tuple, m: int) -> str:
        """A nonterminal for ``item{0,m}``."""
        key = (item, m)
        got = self.memo.get(key)
        if got is not None:
            return got
        name = self.memo[key] = self.fresh()
        b = REPEAT_BLOCK
        if m <= b:
            self.rules += [(name, item * j) for j in range(m + 1)]
            return name
        q, r = divmod(m, b)
        block = self.memo.get((item, "block"))
        if block is None:
            block = self.memo[(item, "block")] = self.fresh()
            self.rules.append((block, item * b))
        low = () if q == 1 else (self.upto((block,), q - 1),)
        self.rules.append((name, low + (self.upto(item, b - 1),)))
        self.rules.append((name, (block,) * q + ((self.upto(item, r),) if r else ())))
        return name


def inline_single_uses(rules: list, start: str) -> list:
    """``rules`` with aliases (``B -> C``, B's only rule) replaced by what they name, and each
    nonterminal used once inlined where that use can take its rules as they are: a
    nonterminal with one rule (its right-hand side replaces the use), or one used as a
    whole right-hand side (``A -> B``: B's rules become A's).

    The language is the same. Fewer nonterminals keep a grammar within the compiled
    budget tables (one entry per nonterminal per Earley set), and each inlined use is
    one completion less per parse. For generated grammars (JSON Schema), whose
    nonterminal names mean nothing to a user.
    """
    by: dict[str, list] = {}
    for lhs, rhs in rules:
        by.setdefault(lhs, []).append(tuple(rhs))
    # an alias (``B -> C``, its only rule; C a terminal or not) is C wherever B is used
    alias = {b: alts[0][0] for b, alts in by.items()
             if b != start and len(alts) == 1 and len(alts[0]) == 1}

    def resolve(x):
        seen = set()
        while x in alias and x not in seen:
            seen.add(x)
            x = alias[x]
        return x

    if alias:
        for b in alias:
            if resolve(b) != b:
                del by[b]
        by = {lhs: [tuple(resolve(x) if isinstance(x, str) else x for x in rhs) for rhs in alts]
              for lhs, alts in by.items()}
    uses: dict[str, int] = {}
    user: dict[str, str] = {}
    for lhs, alts in by.items():
        for rhs in alts:
            for x in rhs:
                if isinstance(x, str):
                    uses[x] = uses.get(x, 0) + 1
                    user[x] = lhs
    for b in list(by):
        if b == start or uses.get(b) != 1 or b not in by:
            continue
        a = user[b]
        if a == b or a not in by:
            continue
        alts_b = by[b]
        if any(b in rhs for rhs in alts_b):
            continue
        alts_a = by[a]
        i = next(i for i, rhs in enumerate(alts_a) if b in rhs)
        rhs = alts_a[i]
        if len(alts_b) == 1:
            j = rhs.index(b)
            alts_a[i] = rhs[:j] + alts_b[0] + rhs[j + 1:]
        elif rhs == (b,):
            alts_a[i:i + 1] = alts_b
        else:
            continue
        del by[b]
        for r in alts_b:
            for x in r:
                if isinstance(x, str):
                    user[x] = a
    return [(lhs, rhs) for lhs, alts in by.items() for rhs in alts]


def merge_equal_rules(rules: list, start: str) -> list:
    """``rules`` with nonterminals whose rules are the same (as a set) merged into one, until
    none are: generated grammars repeat structures (the same property schema in many objects)
    that the schema's AST did not share. Each merge rewrites only the rules that use the
    merged nonterminal (a large schema's grammar has 10⁴ rules, some with 10³ alternatives)."""
    by: dict[str, dict] = {}
    for lhs, rhs in rules:
        by.setdefault(lhs, {})[tuple(rhs)] = None  # (an ordered set)
    users: dict[str, set] = {}
    for lhs, alts in by.items():
        for rhs in alts:
            for x in rhs:
                if isinstance(x, str):
                    users.setdefault(x, set()).add(lhs)
    key = {lhs: frozenset(alts) for lhs, alts in by.items()}
    first: dict = {}  # rule set -> the nonterminal that keeps it
    todo = []
    for lhs in by:
        if lhs != start and first.setdefault(key[lhs], lhs) != lhs:
            todo.append(lhs)
    while todo:
        b = todo.pop()
        if b not in by:
            continue
        a = first.get(key[b])
        if a is None or a not in by or a == b:
            first[key[b]] = b
            continue
        del by[b]
        for u in users.pop(b, ()):
            if u not in by:
                continue
            if u != start and first.get(key[u]) == u:
                del first[key[u]]
            by[u] = dict.fromkeys(tuple(a if x == b else x for x in rhs) for rhs in by[u])
            key[u] = frozenset(by[u])
            users.setdefault(a, set()).add(u)
            if u != start and first.setdefault(key[u], u) != u:
                todo.append(u)
    return [(lhs, rhs) for lhs, alts in by.items() for rhs in alts]


def simplify_generated(rules: list, start: str) -> list:
    """``merge_equal_rules`` and ``inline_single_uses`` until neither changes the grammar."""
    while True:
        n = len(rules)
        rules = inline_single_uses(merge_equal_rules(rules, start), start)
        if len(rules) == n:
            return rules


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
