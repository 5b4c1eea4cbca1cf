"""Rewrites of generated grammars that keep their language and make them cheaper to parse.

``Repeats`` writes bounded repetitions so that Earley sets stay small at every count (the
JSON Schema route and GBNF use it); ``simplify_generated`` merges nonterminals with the same
rules and inlines those used once (the JSON Schema route, whose nonterminal names mean
nothing to a user). Rules are ``(lhs, rhs)`` pairs as in ``cfg.CFG``.
"""

from __future__ import annotations


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
