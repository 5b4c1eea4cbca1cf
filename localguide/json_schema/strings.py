"""JSON strings: ``pattern`` (ECMA-262, through ``localguide.regex.parser``), ``format`` and ``minLength``/``maxLength``.

Everything here is built at the *content* level: an AST over the characters of the
decoded string. ``jsonschema_ast.encode_content`` then turns it into JSON text, where
each character may be written raw or escaped, so lengths count characters, never
bytes or escape sequences.
"""

from __future__ import annotations

import functools

from ..errors import PatternError
from ..regex import lookahead
from ..regex.ast import (
    ANY_CHAR_RANGES, EMPTY, EPS, Alt, Auto, Lit, Node, Rep, Seq, alt, cls, complement, length_range, norm_ranges,
    opt, plus, rep, seq, star,
)
from ..regex.parser import parse


class PatternUnsupported(Exception):
    """A pattern construct that has no regular-language equivalent here (the message says which)."""


class LookaheadsTooLarge(PatternUnsupported):
    """A pattern whose lookaheads, applied, leave an automaton too large to write as a regex (the
    pattern without them is ``pattern_node(pattern, lookaheads=False)``, a superset)."""


class _Anchor(Node):
    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind


BOL, EOL = _Anchor("^"), _Anchor("$")


def _to_node(t, looks: list | None = None, drop: bool = False) -> Node:
    """The node of a parse tree, anchors kept; each lookahead a mark (``looks`` collects them), or
    nothing (``drop``)."""
    kind = t[0]
    if kind == "set":
        return cls(t[1])
    if kind == "anchor":
        return BOL if t[1] == "^" else EOL
    if kind == "seq":
        return _seq_keep([_to_node(x, looks, drop) for x in t[1]])
    if kind == "alt":
        parts = [_to_node(x, looks, drop) for x in t[1]]
        return parts[0] if len(parts) == 1 else _AltKeep(tuple(parts))
    if kind == "rep":
        return Rep(_to_node(t[1], looks, drop), t[2], t[3])
    if kind == "look" and drop:
        return EPS
    if kind == "look":
        if looks is None:
            raise PatternUnsupported("a lookahead inside a lookahead is not supported")
        if len(looks) == lookahead.MAX_LOOKAHEADS:
            raise PatternUnsupported(f"more than {lookahead.MAX_LOOKAHEADS} lookaheads in one pattern are not "
                                     "supported")
        looks.append((t[1], t[2]))
        return Auto(lookahead.mark_dfa(len(looks) - 1))
    raise TypeError(kind)


class _AltKeep(Alt):
    """An alternation whose branches may still hold anchors."""


def _seq_keep(items):
    return items[0] if len(items) == 1 else Seq(tuple(items))


def _has_anchor(n: Node) -> bool:
    if isinstance(n, _Anchor):
        return True
    if isinstance(n, (Seq, Alt)):
        return any(_has_anchor(x) for x in n.items)
    if isinstance(n, Rep):
        return _has_anchor(n.item)
    return False


def _branches(n: Node) -> list[list[Node]]:
    """The pattern as a union of sequences, expanding alternations that hold anchors."""
    if isinstance(n, Alt):
        return [b for x in n.items for b in _branches(x)]
    if isinstance(n, Seq):
        out = [[]]
        for x in n.items:
            if _has_anchor(x) and isinstance(x, Alt):
                subs = _branches(x)
                if len(out) * len(subs) > 256:
                    raise PatternUnsupported("too many anchored alternatives")
                out = [o + s for o in out for s in subs]
            elif isinstance(x, Seq) and _has_anchor(x):
                out = [o + s for o in out for s in _branches(x)]
            else:
                out = [o + [x] for o in out]
        return out
    return [[n]]


def _simplify(n: Node) -> Node:
    """Rebuild with the smart constructors (anchors must be gone)."""
    if isinstance(n, _Anchor):
        raise PatternUnsupported("an anchor in the middle of a pattern")
    if isinstance(n, Seq):
        return seq(*[_simplify(x) for x in n.items])
    if isinstance(n, Alt):
        return alt(*[_simplify(x) for x in n.items])
    if isinstance(n, Rep):
        return rep(_simplify(n.item), n.lo, n.hi)
    return n


ANY_STRING = star(cls(ANY_CHAR_RANGES))


def pattern_node(pattern: str, lookaheads: bool = True) -> Node:
    """Content-level node: the strings in which ``pattern`` finds a match (ECMA-262 search);
    ``lookaheads=False``: its lookaheads left out (each read as the empty string)."""
    got = _pattern_node(pattern, lookaheads)
    if isinstance(got, PatternUnsupported):
        raise type(got)(str(got))  # (a fresh one: the cached one keeps no traceback)
    return got


@functools.lru_cache(maxsize=256)
def _pattern_node(pattern: str, lookaheads: bool):
    """``pattern_node``'s node, or the ``PatternUnsupported`` it raises, once per pattern (a pattern
    under a definition is met once per use, and its lookaheads cost automata)."""
    try:
        try:
            tree = parse(pattern)
        except PatternError as e:
            raise PatternUnsupported(str(e).split("\n")[0]) from None
        looks: list = []
        node = _search(_to_node(tree, looks), before=True)
        if not looks:
            return node
        if not lookaheads:
            return _search(_to_node(tree, None, drop=True), before=True)
        return _with_lookaheads(node, [(negative, _search(_to_node(sub), before=False)) for negative, sub in looks])
    except PatternUnsupported as e:
        return e


def _search(node: Node, before: bool) -> Node:
    """The strings holding a match of ``node`` (anchors kept): anywhere (``before``), or at the
    start (a lookahead's: what follows its place)."""
    parts = []
    for branch in _branches(node):
        items = list(branch)
        start = end = False
        while items and items[0] is BOL:
            items.pop(0)
            start = True
        if start and not before:
            raise PatternUnsupported("'^' inside a lookahead is not supported")
        while items and items[-1] is EOL:
            items.pop()
            end = True
        core = seq(*[_simplify(x) for x in items])
        parts.append(seq(EPS if start or not before else ANY_STRING, core, EPS if end else ANY_STRING))
    return alt(*parts)


# the most states of a pattern's automaton with lookaheads resolved, written back as a regex
MAX_LOOKAHEAD_STATES = 2_000


def _with_lookaheads(marked: Node, looks: list) -> Node:
    """``marked`` (lookaheads as marks) with each lookahead's condition applied (``regex.lookahead``),
    written back as a regex."""
    from ..regex.dfa_ast import dfa_to_node

    dfa = lookahead.apply(marked, looks, MAX_LOOKAHEAD_STATES)
    node = None
    if dfa is not None:
        node = EMPTY if dfa.is_empty else dfa_to_node(dfa, max_weight=Auto.TREE_WEIGHT)
    if node is None:
        raise LookaheadsTooLarge("the pattern's lookaheads leave a language too large to write as a regex")
    return node


def pattern_matches(pattern: str, text: str) -> bool:
    """Does ``pattern`` (ECMA-262, search semantics) match ``text``? Raises PatternUnsupported."""
    dfa = pattern_dfa(pattern)
    return dfa.matches(text.encode("utf-8", "surrogatepass"))


def _class_end(pattern: str, j: int) -> int:
    """The index just past the ``]`` that closes the class opening at ``pattern[j]``."""
    j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


def _group_end(pattern: str, i: int) -> int | None:
    """The index just past the ``)`` that closes the group opening at ``pattern[i]``."""
    depth, j = 0, i
    while j < len(pattern):
        c = pattern[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = _class_end(pattern, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


def _top_level_bar(text: str) -> bool:
    """Whether ``text`` (a pattern's part) holds a ``|`` outside every group and class (or an
    unbalanced group: then it is not split either)."""
    j = 0
    while j < len(text):
        c = text[j]
        if c == "|":
            return True
        if c == "\\":
            j += 2
        elif c == "[":
            j = _class_end(text, j)
        elif c == "(":
            end = _group_end(text, j)
            if end is None:
                return True
            j = end
        else:
            j += 1
    return False


def split_lookaheads(pattern: str) -> tuple[list[str], list[str]] | None:
    """A pattern that opens with lookaheads (``^(?!A)(?=B)R``) as the patterns a string must match
    (``^R``, ``^(?:B)``) and those it must not (``^(?:A)``): at the start of the text a lookahead
    asks whether its pattern matches there, as a pattern anchored with ``^`` asks. None where
    ``pattern`` is not of that form (a lookahead elsewhere, an alternative beside it) or a part
    is not supported by itself: then the pattern is read, and reported, as written."""
    if not pattern.startswith(("^(?!", "^(?=")):
        return None
    must, must_not = [], []
    i = 1
    while pattern.startswith(("(?!", "(?="), i):
        j = _group_end(pattern, i)
        if j is None:
            return None
        (must_not if pattern[i + 2] == "!" else must).append("^(?:" + pattern[i + 3:j - 1] + ")")
        i = j
    rest = pattern[i:]
    if _top_level_bar(rest):
        return None
    must.insert(0, "^" + rest)
    for part in must + must_not:
        try:
            pattern_node(part)
        except PatternUnsupported:
            return None
    return must, must_not


_dfa_cache: dict = {}


def pattern_dfa(pattern: str):
    """The byte DFA of the strings ``pattern`` matches anywhere in them, as JSON Schema reads it (kept, 512 at most)."""
    from ..regex.ast_dfa import ast_to_dfa

    d = _dfa_cache.get(pattern)
    if d is None:
        d = _dfa_cache[pattern] = ast_to_dfa(pattern_node(pattern))
        if len(_dfa_cache) > 512:
            _dfa_cache.pop(next(iter(_dfa_cache)))
    return d


_format_dfas: dict = {}


def format_dfa(name: str):
    """The byte DFA of the strings of ``format`` ``name`` (one that ``format_node`` writes; kept)."""
    from ..regex.ast_dfa import ast_to_dfa

    d = _format_dfas.get(name)
    if d is None:
        d = _format_dfas[name] = ast_to_dfa(format_node(name))
    return d


# -- formats ------------------------------------------------------------------------------------

def _r(a, b):
    return cls([(ord(a), ord(b))])


def _cset(s: str) -> Node:
    return cls([(ord(c), ord(c)) for c in s])


D = _r("0", "9")
ALPHA = cls([(0x41, 0x5A), (0x61, 0x7A)])
ALNUM = cls([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)])
HEXDIG = cls([(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)])


def _date() -> Node:
    year = rep(D, 4, 4)
    d31 = alt(seq(Lit("0"), _r("1", "9")), seq(_r("1", "2"), D), seq(Lit("3"), _r("0", "1")))
    d30 = alt(seq(Lit("0"), _r("1", "9")), seq(_r("1", "2"), D), Lit("30"))
    d28 = alt(seq(Lit("0"), _r("1", "9")), seq(Lit("1"), D), seq(Lit("2"), _r("0", "8")))
    m31 = alt(*[Lit(m) for m in ("01", "03", "05", "07", "08", "10", "12")])
    m30 = alt(*[Lit(m) for m in ("04", "06", "09", "11")])
    common = seq(year, Lit("-"), alt(seq(m31, Lit("-"), d31), seq(m30, Lit("-"), d30), seq(Lit("02-"), d28)))
    # leap years: divisible by 4, and not by 100 unless by 400
    mult4_2 = alt(seq(_cset("02468"), _cset("048")), seq(_cset("13579"), _cset("26")))
    leap = alt(seq(D, D, alt(seq(Lit("0"), _cset("48")), seq(_cset("2468"), _cset("048")), seq(_cset("13579"), _cset("26")))),
               seq(mult4_2, Lit("00")))
    return alt(common, seq(leap, Lit("-02-29")))


def _time() -> Node:
    secfrac = opt(seq(Lit("."), plus(D)))
    hour = alt(seq(_r("0", "1"), D), seq(Lit("2"), _r("0", "3")))
    minute = seq(_r("0", "5"), D)
    numoffset = seq(_cset("+-"), hour, Lit(":"), minute)
    offset = alt(_cset("Zz"), numoffset)
    normal = seq(hour, Lit(":"), minute, Lit(":"), minute, secfrac, offset)
    leaps = [seq(Lit("23:59:60"), secfrac, alt(_cset("Zz"), Lit("+00:00"), Lit("-00:00")))]
    # a leap second is 23:59:60 UTC: list the local times for quarter-hour offsets
    for sign in (1, -1):
        for oh in range(24):
            for om in (0, 15, 30, 45):
                if oh == 0 and om == 0:
                    continue
                total = 23 * 60 + 59 + sign * (oh * 60 + om)
                total %= 24 * 60
                local = f"{total // 60:02d}:{total % 60:02d}:60"
                off = f"{'+' if sign > 0 else '-'}{oh:02d}:{om:02d}"
                leaps.append(seq(Lit(local), secfrac, Lit(off)))
    return alt(normal, *leaps)


def _duration() -> Node:
    n = plus(D)

    def u(c):
        return seq(n, Lit(c))

    second = u("S")
    minute = seq(u("M"), opt(second))
    hour = seq(u("H"), opt(minute))
    dur_time = seq(Lit("T"), alt(hour, minute, second))
    day = u("D")
    month = seq(u("M"), opt(day))
    year = seq(u("Y"), opt(month))
    dur_date = seq(alt(day, month, year), opt(dur_time))
    return seq(Lit("P"), alt(dur_date, dur_time, u("W")))


def _dec_octet() -> Node:
    return alt(D, seq(_r("1", "9"), D), seq(Lit("1"), D, D), seq(Lit("2"), _r("0", "4"), D), seq(Lit("25"), _r("0", "5")))


def _ipv4() -> Node:
    o = _dec_octet()
    return seq(o, rep(seq(Lit("."), o), 3, 3))


def _ipv6() -> Node:
    h16 = rep(HEXDIG, 1, 4)
    h16c = seq(h16, Lit(":"))
    ls32 = alt(seq(h16, Lit(":"), h16), _ipv4())

    def upto(k):  # [ *k( h16 ":" ) h16 ]
        return opt(seq(rep(h16c, 0, k), h16)) if k >= 0 else EPS

    return alt(
        seq(rep(h16c, 6, 6), ls32),
        seq(Lit("::"), rep(h16c, 5, 5), ls32),
        seq(opt(h16), Lit("::"), rep(h16c, 4, 4), ls32),
        seq(upto(1), Lit("::"), rep(h16c, 3, 3), ls32),
        seq(upto(2), Lit("::"), rep(h16c, 2, 2), ls32),
        seq(upto(3), Lit("::"), h16c, ls32),
        seq(upto(4), Lit("::"), ls32),
        seq(upto(5), Lit("::"), h16),
        seq(upto(6), Lit("::")),
    )


def _label() -> Node:
    """A host name label (RFC 1123: letters, digits, inner hyphens), never '--' in positions 3-4
    (IDNA's reserved labels: punycode is not decoded); its length unbounded."""
    a = ALNUM
    h = cls([(0x2D, 0x2D), (0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)])
    rest = opt(seq(star(h), a))
    return alt(a, seq(a, a), seq(a, h, alt(seq(a, rest), seq(Lit("-"), a, rest))))


def _hostname() -> Node:
    # The lengths (63 a label, 253 in all) are not counted: counting them takes a state per
    # character, each allowing thousands of tokens, and the index grows to tens of megabytes.
    label = _label()
    return seq(label, star(seq(Lit("."), label)))


def _email() -> Node:
    atext = cls(norm_ranges([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)] + [(ord(c), ord(c)) for c in "!#$%&'*+/=?^_`{|}~-"]))
    dot_atom = seq(plus(atext), star(seq(Lit("."), plus(atext))))
    qtext = cls([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)])
    quoted = seq(Lit('"'), star(alt(qtext, seq(Lit("\\"), cls([(0x20, 0x7E)])))), Lit('"'))
    domain = alt(_hostname(), seq(Lit("["), _ipv4(), Lit("]")), seq(Lit("[IPv6:"), _ipv6(), Lit("]")))
    return seq(alt(dot_atom, quoted), Lit("@"), domain)


def _uuid() -> Node:
    return seq(rep(HEXDIG, 8, 8), Lit("-"), rep(HEXDIG, 4, 4), Lit("-"), rep(HEXDIG, 4, 4), Lit("-"),
               rep(HEXDIG, 4, 4), Lit("-"), rep(HEXDIG, 12, 12))


def _uri_parts():
    unreserved = cls(norm_ranges([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)] + [(ord(c), ord(c)) for c in "-._~"]))
    sub_delims = _cset("!$&'()*+,;=")
    pct = seq(Lit("%"), HEXDIG, HEXDIG)
    pchar = alt(unreserved, pct, sub_delims, _cset(":@"))
    segment = star(pchar)
    segment_nz = plus(pchar)
    userinfo = star(alt(unreserved, pct, sub_delims, Lit(":")))
    ipvfuture = seq(Lit("v"), plus(HEXDIG), Lit("."), plus(alt(unreserved, sub_delims, Lit(":"))))
    host = alt(seq(Lit("["), alt(_ipv6(), ipvfuture), Lit("]")), star(alt(unreserved, pct, sub_delims)))
    authority = seq(opt(seq(userinfo, Lit("@"))), host, opt(seq(Lit(":"), star(D))))
    path_abempty = star(seq(Lit("/"), segment))
    path_absolute = seq(Lit("/"), opt(seq(segment_nz, star(seq(Lit("/"), segment)))))
    path_rootless = seq(segment_nz, star(seq(Lit("/"), segment)))
    query = star(alt(pchar, _cset("/?")))
    scheme = seq(ALPHA, star(alt(ALNUM, _cset("+-."))))
    tail = seq(opt(seq(Lit("?"), query)), opt(seq(Lit("#"), query)))
    seg_nz_nc = plus(alt(unreserved, pct, sub_delims, Lit("@")))
    path_noscheme = seq(seg_nz_nc, star(seq(Lit("/"), segment)))
    return dict(scheme=scheme, authority=authority, path_abempty=path_abempty, path_absolute=path_absolute,
                path_rootless=path_rootless, path_noscheme=path_noscheme, tail=tail)


def _uri() -> Node:
    u = _uri_parts()
    hier = alt(seq(Lit("//"), u["authority"], u["path_abempty"]), u["path_absolute"], u["path_rootless"], EPS)
    return seq(u["scheme"], Lit(":"), hier, u["tail"])


def _uri_reference() -> Node:
    u = _uri_parts()
    rel = alt(seq(Lit("//"), u["authority"], u["path_abempty"]), u["path_absolute"], u["path_noscheme"], EPS)
    return alt(_uri(), seq(rel, u["tail"]))


def _json_pointer() -> Node:
    return star(seq(Lit("/"), star(alt(cls(complement([(0x2F, 0x2F), (0x7E, 0x7E)])), Lit("~0"), Lit("~1")))))


def _relative_json_pointer() -> Node:
    n = alt(Lit("0"), seq(_r("1", "9"), star(D)))
    return seq(n, alt(Lit("#"), _json_pointer()))


_FORMATS = {
    "date": _date, "time": _time, "date-time": lambda: seq(_date(), _cset("Tt"), _time()),
    "duration": _duration, "email": _email, "uuid": _uuid, "uri": _uri, "uri-reference": _uri_reference,
    "ipv4": _ipv4, "ipv6": _ipv6, "hostname": _hostname, "json-pointer": _json_pointer,
    "relative-json-pointer": _relative_json_pointer,
}
# Why a format is approximated: the strings it accepts beyond the format, or leaves out.
FORMAT_NOTES = {
    "hostname": "label and name lengths (63, 253) are not bounded (maxLength bounds them); labels with '--' "
                "in positions 3-4 ('xn--' punycode) are rejected",
    "email": "RFC 5321 local parts (dot-atom or quoted) and host names as for 'hostname'",
    "time": "leap seconds only with whole or quarter-hour offsets",
    "date-time": "leap seconds only with whole or quarter-hour offsets",
}
# Defined by the specification, but not regular (or not done): an error, never ignored.
UNSUPPORTED_FORMATS = {"regex", "iri", "iri-reference", "idn-email", "idn-hostname", "uri-template"}
_format_cache: dict[str, Node] = {}


def format_node(name: str) -> Node | None:
    """Content-level node of a known format, or None for a format unknown to the specification."""
    if name in UNSUPPORTED_FORMATS:
        raise PatternUnsupported(f"format {name!r} is not supported")
    make = _FORMATS.get(name)
    if make is None:
        return None
    node = _format_cache.get(name)
    if node is None:
        node = _format_cache[name] = make()
    return node


# -- lengths --------------------------------------------------------------------------------------

MAX_SPLIT = 64


def restrict_length(node: Node, lo: int, hi: int | None) -> tuple[Node, bool]:
    """(node', exact): node' ⊆ {strings of node with lo <= length <= hi}; exact when equal."""
    a, b = length_range(node)
    if a >= lo and (hi is None or (b is not None and b <= hi)):
        return node, True
    if (hi is not None and a > hi) or (b is not None and b < lo):
        return EMPTY, True
    if isinstance(node, Alt):
        parts = [restrict_length(x, lo, hi) for x in node.items]
        return alt(*[p for p, _ in parts]), all(e for _, e in parts)
    if isinstance(node, Rep):
        ia, ib = length_range(node.item)
        if ia == ib and ia > 0:
            w = ia
            klo = max(node.lo, -(-lo // w))
            khi = hi // w if hi is not None else None
            if node.hi is not None:
                khi = node.hi if khi is None else min(khi, node.hi)
            return rep(node.item, klo, khi), True
        # variable-width items: unroll the count when small
        kmax = node.hi
        if hi is not None and ia > 0:
            kmax = hi // ia if kmax is None else min(kmax, hi // ia)
        if kmax is not None and kmax <= 8:
            branches = [seq(*([node.item] * k)) for k in range(node.lo, kmax + 1)]
            return restrict_length(alt(*[_as_seq(b) for b in branches]), lo, hi)
        return _approx(node, lo, hi), False
    if isinstance(node, Seq):
        items = list(node.items)
        ranges = [length_range(x) for x in items]
        var = [i for i, (x, y) in enumerate(ranges) if x != y]
        fixed = sum(x for (x, y) in ranges if x == y)
        if len(var) == 1:
            i = var[0]
            sub, exact = restrict_length(items[i], max(0, lo - fixed), None if hi is None else hi - fixed)
            return seq(*items[:i], sub, *items[i + 1:]), exact
        i = var[0]
        pre = seq(*items[:i])
        pre_len = sum(ranges[j][0] for j in range(i))
        rest = _as_seq(seq(*items[i + 1:]))
        ra, rb = length_range(rest)
        va, vb = ranges[i]
        # enumerate the length of the first variable item
        if hi is not None:
            top = hi - pre_len - ra
            if vb is not None:
                top = min(top, vb)
            lengths = range(va, top + 1)
            tail_open = None
        else:
            # beyond this length the rest needs no restriction
            cut = lo - pre_len - ra
            lengths = range(va, max(va, cut))
            tail_open = max(va, cut)
        if len(lengths) > MAX_SPLIT:
            return _approx(node, lo, hi), False
        parts = []
        exact = True
        for n in lengths:
            head, e1 = restrict_length(items[i], n, n)
            if head is EMPTY:
                continue
            tail, e2 = restrict_length(rest, max(0, lo - pre_len - n), None if hi is None else hi - pre_len - n)
            exact = exact and e1 and e2
            parts.append(seq(pre, head, tail))
        if tail_open is not None:
            head, e1 = restrict_length(items[i], tail_open, None)
            exact = exact and e1
            parts.append(seq(pre, head, rest))
        return alt(*parts), exact
    return _approx(node, lo, hi), False


def _as_seq(n: Node) -> Node:
    return n if isinstance(n, Seq) else Seq((n,)) if n is not EPS else n


def _approx(node: Node, lo: int, hi: int | None) -> Node:
    """A subset of node within the length bounds (possibly empty): cap, then lengthen."""
    n = _cap(node, hi) if hi is not None else node
    a, b = length_range(n)
    if a >= lo:
        return n
    grown = _grow(n, lo)
    if grown is EMPTY:
        return EMPTY
    a, b = length_range(grown)
    if a >= lo and (hi is None or (b is not None and b <= hi)):
        return grown
    return EMPTY


def _cap(node: Node, budget: int) -> Node:
    """A subset of node whose strings are at most ``budget`` long."""
    a, b = length_range(node)
    if b is not None and b <= budget:
        return node
    if a > budget:
        return EMPTY
    if isinstance(node, Alt):
        return alt(*[_cap(x, budget) for x in node.items])
    if isinstance(node, Seq):
        ranges = [length_range(x) for x in node.items]
        var = [i for i, (x, y) in enumerate(ranges) if x != y]
        extra = budget - sum(x for x, _ in ranges)
        share = extra // len(var)
        items = list(node.items)
        for i in var:
            items[i] = _cap(items[i], ranges[i][0] + share)
        return seq(*items)
    if isinstance(node, Rep):
        ia, ib = length_range(node.item)
        kmax = budget // max(ia, 1)
        if node.hi is not None:
            kmax = min(kmax, node.hi)
        if kmax < node.lo:
            return EMPTY
        if kmax == 0:
            return EPS
        per = budget // kmax
        return rep(_cap(node.item, per), node.lo, kmax)
    return EMPTY


def _grow(node: Node, need: int) -> Node:
    """A subset of node whose strings are at least ``need`` long (EMPTY if none found)."""
    a, b = length_range(node)
    if a >= need:
        return node
    if b is not None and b < need:
        return EMPTY
    if isinstance(node, Alt):
        return alt(*[_grow(x, need) for x in node.items])
    if isinstance(node, Rep):
        ia, ib = length_range(node.item)
        if ib is None or ib > 0:
            if ia == ib:
                k = -(-need // ia)
                return rep(node.item, max(node.lo, k), node.hi) if node.hi is None or k <= node.hi else EMPTY
            grown = _grow(node.item, need)
            return seq(grown, rep(node.item, max(node.lo - 1, 0), None if node.hi is None else node.hi - 1)) \
                if grown is not EMPTY else EMPTY
        return EMPTY
    if isinstance(node, Seq):
        items = list(node.items)
        total_min = sum(length_range(x)[0] for x in items)
        for i in reversed(range(len(items))):
            xa, xb = length_range(items[i])
            if xb is None or xb - xa >= need - total_min:
                g = _grow(items[i], xa + need - total_min)
                if g is not EMPTY:
                    items[i] = g
                    return seq(*items)
        return EMPTY
    return EMPTY
