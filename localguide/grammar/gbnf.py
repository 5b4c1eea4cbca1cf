"""GBNF (llama.cpp's grammar format) → ``CFG``.

The parser follows llama.cpp's ``llama-grammar.cpp``: rules ``name ::= alternates``
ending at a newline (newlines are allowed inside parentheses and after ``|``),
string literals and ``[...]`` classes with ``\\x \\u \\U \\t \\n \\r`` escapes, ``.``,
``* + ? {m} {m,} {m,n}``, ``#`` comments; the start symbol is ``root``.

Conversion keeps the grammar's language exactly and makes its terminals large:
a rule that cannot reach a recursive rule is regular, so it is inlined; each run
of regular items in a sequence becomes one terminal (a byte DFA built directly
from the syntax tree). Only recursive structure stays for the Earley parser —
left recursion included, which llama.cpp itself rejects.
"""

from __future__ import annotations

from ..automaton import ByteNFA
from ..automaton.utf8 import complement_ranges, merge_ranges
from .cfg import CFG, Terminal
from .rewrites import Repeats
from ..errors import GrammarError


MAX_NESTING = 100         # parentheses inside parentheses (the parser recurses once a level)
MAX_REPEAT = 10_000       # {m,n} counts, as a regex's
MAX_RULES = 5_000         # rules of one grammar (compile work grows faster than their number)
MAX_INLINE = 32           # regular rules inlined one inside another; deeper ones stay rules
MAX_TERMINAL_STATES = 100_000  # automaton states of one terminal, before determinization


def _digit(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes superscripts, which ``int`` refuses)."""
    return bool(text) and text.isascii() and text.isdigit()


_ESC = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "/": "/", "'": "'"}


def _is_word(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch in "-_")


class _Parser:
    def __init__(self, text: str, source: str):
        self.s = text
        self.source = source
        self.rules: dict[str, tuple] = {}
        self.first_pos: dict[str, int] = {}
        self.refs: list[tuple[str, int]] = []
        self.depth = 0

    def error(self, msg: str, pos: int) -> GrammarError:
        line = self.s.count("\n", 0, pos) + 1
        col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
        return GrammarError(f"invalid GBNF: {msg}", line, col, self.source)

    def peek(self, i: int) -> str:
        return self.s[i] if i < len(self.s) else ""

    def space(self, i: int, newline_ok: bool) -> int:
        s = self.s
        while i < len(s):
            ch = s[i]
            if ch in " \t" or (newline_ok and ch in "\r\n"):
                i += 1
            elif ch == "#":
                while i < len(s) and s[i] not in "\r\n":
                    i += 1
            else:
                break
        return i

    def name(self, i: int) -> tuple[str, int]:
        j = i
        while j < len(self.s) and _is_word(self.s[j]):
            j += 1
        if j == i:
            raise self.error(f"expecting name at {self.s[i:i + 10]!r}", i)
        return self.s[i:j], j

    def char(self, i: int) -> tuple[int, int]:
        s = self.s
        if i >= len(s):
            raise self.error("unexpected end of input", i)
        if s[i] != "\\":
            return ord(s[i]), i + 1
        e = self.peek(i + 1)
        if e in "xuU" and e:
            n = {"x": 2, "u": 4, "U": 8}[e]
            digits = s[i + 2:i + 2 + n]
            if len(digits) != n or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise self.error(f"expecting {n} hex digits after \\{e}", i)
            return int(digits, 16), i + 2 + n
        if e in _ESC and e:
            return ord(_ESC[e]), i + 2
        raise self.error(f"unknown escape \\{e}", i)

    def parse(self) -> dict[str, tuple]:
        i = self.space(0, True)
        while i < len(self.s):
            name, j = self.name(i)
            j = self.space(j, False)
            if not self.s.startswith("::=", j):
                raise self.error("expecting ::=", j)
            j = self.space(j + 3, True)
            body, j = self.alternates(j, False)
            if name not in self.rules and len(self.rules) >= MAX_RULES:
                raise self.error(f"more than {MAX_RULES:,} rules are not supported "
                                 "(localguide.grammar.gbnf.MAX_RULES)", i)
            if name in self.rules:
                # llama.cpp lets a later definition add alternatives to the rule
                body = ("alt", self.rules[name][1] + body[1])
            self.rules[name] = body
            self.first_pos.setdefault(name, i)
            if self.peek(j) == "\r":
                j += 2 if self.peek(j + 1) == "\n" else 1
            elif self.peek(j) == "\n":
                j += 1
            elif j < len(self.s):
                raise self.error(f"expecting newline or end at {self.s[j:j + 10]!r}", j)
            i = self.space(j, True)
        for ref, pos in self.refs:
            if ref not in self.rules:
                raise self.error(f"undefined rule identifier {ref!r}", pos)
        if "root" not in self.rules:
            raise GrammarError("the grammar has no 'root' rule (the start symbol of a GBNF grammar)",
                               source=self.source)
        return self.rules

    def alternates(self, i: int, nested: bool):
        seqs = []
        seq, i = self.sequence(i, nested)
        seqs.append(seq)
        while self.peek(i) == "|":
            i = self.space(i + 1, True)
            seq, i = self.sequence(i, nested)
            seqs.append(seq)
        return ("alt", tuple(seqs)), i

    def sequence(self, i: int, nested: bool):
        items: list = []
        s = self.s
        while i < len(s):
            ch = s[i]
            start = i
            if ch == '"':
                i += 1
                cps = []
                while self.peek(i) != '"':
                    if i >= len(s):
                        raise self.error("unexpected end of input in a string literal", start)
                    cp, i = self.char(i)
                    cps.append(cp)
                items.append(("lit", tuple(cps)))
                i = self.space(i + 1, nested)
            elif ch == "[":
                i += 1
                neg = self.peek(i) == "^"
                if neg:
                    i += 1
                ranges = []
                while self.peek(i) != "]":
                    if i >= len(s):
                        raise self.error("unexpected end of input in a character class", start)
                    lo, i = self.char(i)
                    hi = lo
                    if self.peek(i) == "-" and self.peek(i + 1) not in ("]", ""):
                        hi, i = self.char(i + 1)
                        if hi < lo:
                            raise self.error("character range out of order", start)
                    ranges.append((lo, hi))
                items.append(("cls", tuple(ranges), neg))
                i = self.space(i + 1, nested)
            elif _is_word(ch):
                name, i = self.name(i)
                self.refs.append((name, start))
                items.append(("ref", name))
                i = self.space(i, nested)
            elif ch == "(":
                if self.depth >= MAX_NESTING:
                    raise self.error(f"parentheses nested more than {MAX_NESTING} deep are not supported "
                                     "(localguide.grammar.gbnf.MAX_NESTING)", i)
                self.depth += 1
                i = self.space(i + 1, True)
                body, i = self.alternates(i, True)
                self.depth -= 1
                if self.peek(i) != ")":
                    raise self.error("expecting ')'", i)
                items.append(body)
                i = self.space(i + 1, nested)
            elif ch == ".":
                items.append(("any",))
                i = self.space(i + 1, nested)
            elif ch in "*+?{":
                if not items:
                    raise self.error(f"expecting preceding item to {ch}", i)
                if ch == "{":
                    j = self.space(i + 1, nested)
                    lo, j = self.integer(j)
                    j = self.space(j, nested)
                    hi = lo
                    if self.peek(j) == ",":
                        j = self.space(j + 1, nested)
                        if _digit(self.peek(j)):
                            hi, j = self.integer(j)
                            j = self.space(j, nested)
                        else:
                            hi = None
                    if self.peek(j) != "}":
                        raise self.error("expecting '}'", j)
                    if hi is not None and hi < lo:
                        raise self.error("repetition {m,n} with n < m", i)
                    if max(lo, hi or 0) > MAX_REPEAT:
                        raise self.error(f"a repetition count above {MAX_REPEAT} is not supported", i)
                    items[-1] = ("rep", items[-1], lo, hi)
                    i = self.space(j + 1, nested)
                else:
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
                    items[-1] = ("rep", items[-1], lo, hi)
                    i = self.space(i + 1, nested)
            else:
                break
        return ("seq", tuple(items)), i

    def integer(self, i: int) -> tuple[int, int]:
        j = i
        while _digit(self.peek(j)):
            j += 1
        if j == i:
            raise self.error("expecting an integer", i)
        return int(self.s[i:j]), j


def _refs(node, out: set) -> set:
    kind = node[0]
    if kind == "ref":
        out.add(node[1])
    elif kind in ("alt", "seq"):
        for x in node[1]:
            _refs(x, out)
    elif kind == "rep":
        _refs(node[1], out)
    return out


def _cyclic(deps: dict) -> set:
    """The rules on a cycle (Kosaraju's strongly connected components, iterative: linear in the
    grammar, whatever its depth)."""
    order, seen = [], set()
    for root in deps:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(deps[root]))]
        while stack:
            n, it = stack[-1]
            m = next((m for m in it if m not in seen), None)
            if m is None:
                order.append(n)
                stack.pop()
            else:
                seen.add(m)
                stack.append((m, iter(deps[m])))
    back: dict = {n: [] for n in deps}
    for n, ms in deps.items():
        for m in ms:
            back[m].append(n)
    out, done = set(), set()
    for root in reversed(order):
        if root in done:
            continue
        comp, stack = [], [root]
        done.add(root)
        while stack:
            n = stack.pop()
            comp.append(n)
            for m in back[n]:
                if m not in done:
                    done.add(m)
                    stack.append(m)
        if len(comp) > 1 or root in deps[root]:
            out.update(comp)
    return out


def _reaching(targets: set, deps: dict) -> set:
    """The rules that are in ``targets`` or refer to one, directly or not."""
    back: dict = {n: [] for n in deps}
    for n, ms in deps.items():
        for m in ms:
            back[m].append(n)
    out, stack = set(targets), list(targets)
    while stack:
        for m in back[stack.pop()]:
            if m not in out:
                out.add(m)
                stack.append(m)
    return out


def _shallow(regular: set, deps: dict) -> set:
    """The regular rules inlined into one another at most ``MAX_INLINE`` deep: a rule whose
    inlining would go deeper stays a rule, and so do the rules that refer to it (the same
    language, and no recursion as deep as the chain). Iterative: a chain may be any length."""
    height: dict[str, int] = {}
    kept = set()
    for root in regular:
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            if n in height:
                continue
            below = [m for m in deps[n] if m in regular]
            if not done:
                stack.append((n, True))
                stack.extend((m, False) for m in below if m not in height)
                continue
            h = 1 + max((height[m] for m in below), default=0)
            if h <= MAX_INLINE and all(m in kept for m in below):
                kept.add(n)
            height[n] = h
    return kept


class _Converter:
    def __init__(self, rules: dict, source: str):
        self.rules = rules
        self.source = source
        deps = {n: _refs(b, set()) for n, b in rules.items()}
        regular = set(rules) - _reaching(_cyclic(deps), deps)
        self.regular_rules = _shallow(regular, deps)
        self.terminals: list[Terminal] = []
        self.term_ids: dict = {}
        self.out_rules: list = []
        self.fresh = 0
        self.repeats = Repeats(lambda: self.new_nt("rep"), self.out_rules)

    def regular(self, node) -> bool:
        kind = node[0]
        if kind == "ref":
            return node[1] in self.regular_rules
        if kind in ("alt", "seq"):
            return all(self.regular(x) for x in node[1])
        if kind == "rep":
            return self.regular(node[1])
        return True

    def terminal(self, items: tuple) -> int:
        node = ("seq", items)
        t = self.term_ids.get(node)
        if t is None:
            nfa = ByteNFA()
            start = nfa.add_state()
            end = self.nfa(node, nfa, start)
            nfa.accepting = {end}
            t = self.term_ids[node] = len(self.terminals)
            self.terminals.append(Terminal(f"T{t}", nfa.to_dfa(start)))
        return t

    def nfa(self, node, nfa: ByteNFA, src: int) -> int:
        if len(nfa.eps) > MAX_TERMINAL_STATES:
            raise GrammarError(f"a run of regular items expands to more than {MAX_TERMINAL_STATES:,} automaton "
                               "states (localguide.grammar.gbnf.MAX_TERMINAL_STATES): make its repetitions "
                               "smaller", source=self.source)
        kind = node[0]
        if kind == "lit":
            for cp in node[1]:
                dst = nfa.add_state()
                nfa.add_codepoints(src, [(cp, cp)], dst)
                src = dst
            return src
        if kind in ("cls", "any"):
            ranges = complement_ranges([]) if kind == "any" else sorted(node[1])
            if kind == "cls" and node[2]:
                ranges = complement_ranges(merge_ranges(ranges))
            dst = nfa.add_state()
            if ranges:
                nfa.add_codepoints(src, merge_ranges(ranges), dst)
            return dst
        if kind == "ref":
            return self.nfa(self.rules[node[1]], nfa, src)
        if kind == "seq":
            for x in node[1]:
                src = self.nfa(x, nfa, src)
            return src
        if kind == "alt":
            dst = nfa.add_state()
            for x in node[1]:
                s = nfa.add_state()
                nfa.add_epsilon(src, s)
                nfa.add_epsilon(self.nfa(x, nfa, s), dst)
            return dst
        _, x, lo, hi = node
        for _ in range(lo):
            src = self.nfa(x, nfa, src)
        if hi is None:
            loop = nfa.add_state()
            nfa.add_epsilon(src, loop)
            nfa.add_epsilon(self.nfa(x, nfa, loop), loop)
            return loop
        end = nfa.add_state()
        for _ in range(hi - lo):
            nfa.add_epsilon(src, end)
            src = self.nfa(x, nfa, src)
        nfa.add_epsilon(src, end)
        return end

    def new_nt(self, hint: str) -> str:
        self.fresh += 1
        return f"{hint}#{self.fresh}"

    def symbol(self, node, hint: str):
        """One grammar symbol for a non-regular ``node``."""
        kind = node[0]
        if kind == "ref":
            return "g:" + node[1]
        if kind == "alt":
            nt = self.new_nt(hint)
            for seq in node[1]:
                self.out_rules.append((nt, self.sequence(seq, hint)))
            return nt
        if kind == "seq":
            nt = self.new_nt(hint)
            self.out_rules.append((nt, self.sequence(node, hint)))
            return nt
        _, x, lo, hi = node  # a repetition of something recursive
        xs = self.symbol(x, hint) if not self.regular(x) else self.terminal((x,))
        nt = self.new_nt(hint)
        if hi is None:
            self.out_rules.append((nt, (xs,) * lo + (self.repeats.star((xs,)),)))
        else:
            self.out_rules.append((nt, self.repeats.bounded((xs,), lo, hi)))
        return nt

    def sequence(self, seq, hint: str) -> tuple:
        rhs: list = []
        run: list = []
        for item in seq[1]:
            if self.regular(item):
                run.append(item)
                continue
            if run:
                rhs.append(self.terminal(tuple(run)))
                run = []
            rhs.append(self.symbol(item, hint))
        if run:
            rhs.append(self.terminal(tuple(run)))
        return tuple(rhs)

    def convert(self) -> CFG:
        for name, body in self.rules.items():
            if name in self.regular_rules and name != "root":
                continue
            for seq in body[1]:
                self.out_rules.append(("g:" + name, self.sequence(seq, name)))
        return CFG(self.terminals, self.out_rules, "g:root", frozenset(), self.source)


def parse_gbnf(text: str, source: str = "grammar") -> dict:
    """The rules of GBNF ``text`` as syntax trees (raises ``GrammarError`` with line and column)."""
    return _Parser(text, source).parse()


def gbnf_to_cfg(text: str, source: str = "grammar") -> CFG:
    return _Converter(parse_gbnf(text, source), source).convert()
