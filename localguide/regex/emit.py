"""A regex AST (``localguide.regex.ast``) written back as an ECMA-262 pattern in localguide's dialect."""

from __future__ import annotations

from .ast import EMPTY, MAX_CP, Alt, Auto, Cls, Lit, Node, Rep, Seq, complement
from .dfa_ast import auto_tree

_SYNTAX = set("^$\\.*+?()[]{}|/-")


def _lit_char(c: str) -> str:
    o = ord(c)
    if c in _SYNTAX:
        return "\\" + c
    if 0x20 <= o < 0x7F:
        return c
    if o < 0x100 and (o < 0x20 or o == 0x7F):
        return f"\\x{o:02x}"
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    return f"\\u{{{o:x}}}"


def _class_char(o: int) -> str:
    c = chr(o)
    if c.isascii() and c.isalnum():
        return c
    if 0x20 <= o < 0x7F:
        return "\\" + c
    return _lit_char(c)


def _class_text(ranges) -> str:
    parts = []
    for a, b in ranges:
        if a == b:
            parts.append(_class_char(a))
        elif b == a + 1:
            parts.append(_class_char(a) + _class_char(b))
        else:
            parts.append(_class_char(a) + "-" + _class_char(b))
    return "".join(parts)


def _cls_regex(ranges) -> str:
    if ranges == ((0, MAX_CP),):
        return "[\\s\\S]"
    if ranges[-1][1] == MAX_CP:
        return "[^" + _class_text(complement(ranges)) + "]"
    return "[" + _class_text(ranges) + "]"


_ATOM, _SEQ, _ALT = 0, 1, 2


class Written(Node):
    """A piece of pattern written as given, one atom (what the AST has no node for: a lookahead);
    only ``to_regex`` reads it."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def to_regex(node: Node) -> str:
    """``node`` as an ECMA-262 pattern (``localguide.regex`` dialect)."""
    memo: dict[int, tuple[str, int]] = {}
    text, _ = _emit(node, memo)
    return text


def _emit(node: Node, memo) -> tuple[str, int]:
    k = id(node)
    hit = memo.get(k)
    if hit is not None:
        return hit
    if isinstance(node, Lit):
        s = "".join(_lit_char(c) for c in node.text)
        r = (s, _ATOM if len(node.text) == 1 else _SEQ)
    elif isinstance(node, Cls):
        r = (_cls_regex(node.ranges), _ATOM)
    elif node is EMPTY:
        r = ("[^\\s\\S]", _ATOM)
    elif isinstance(node, Seq):
        if not node.items:
            r = ("(?:)", _ATOM)
        else:
            parts = []
            for x in node.items:
                s, p = _emit(x, memo)
                parts.append(f"(?:{s})" if p == _ALT else s)
            r = ("".join(parts), _SEQ)
    elif isinstance(node, Alt):
        r = ("|".join(_emit(x, memo)[0] for x in node.items), _ALT)
    elif isinstance(node, Rep):
        s, p = _emit(node.item, memo)
        if p != _ATOM:
            s = f"(?:{s})"
        lo, hi = node.lo, node.hi
        if (lo, hi) == (0, None):
            q = "*"
        elif (lo, hi) == (1, None):
            q = "+"
        elif (lo, hi) == (0, 1):
            q = "?"
        elif hi is None:
            q = f"{{{lo},}}"
        elif lo == hi:
            q = f"{{{lo}}}"
        else:
            q = f"{{{lo},{hi}}}"
        r = (s + q, _ATOM)
    elif isinstance(node, Written):
        r = (f"(?:{node.text})", _ATOM)
    elif isinstance(node, Auto):
        tree = auto_tree(node)
        if tree is None:
            raise ValueError(f"an automaton of {node.dfa.n_states} states has no regex of a writable size")
        s, p = _emit(tree, memo)
        r = (s if p == _ATOM else f"(?:{s})", _ATOM)
    else:
        raise TypeError(node)
    memo[id(node)] = r
    return r
