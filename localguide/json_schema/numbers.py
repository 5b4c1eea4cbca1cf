"""JSON numbers as regex ASTs: exact integer and decimal ranges, and ``multipleOf``.

Ranges are built digit by digit (the classic range decomposition), so a bound is
enforced by the automaton itself: no value outside the range can be spelled.
Bounded numbers are written without an exponent; an integer may carry a ``.0``
fraction (JSON Schema counts ``1.0`` as an integer). All arithmetic is exact
(``Fraction``); bounds come from JSON numbers, so they have finite decimal expansions.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from fractions import Fraction
from math import floor, gcd

from ..regex.ast import EMPTY, EPS, Auto, Lit, Node, alt, cls, opt, plus, rep, seq, star
from .encoding import digits_range


class NumberLimit(Exception):
    """A numeric constraint that this module cannot build exactly (the caller decides)."""


def digit(lo: int = 0, hi: int = 9) -> Node:
    return cls([(0x30 + lo, 0x30 + hi)])


DIGIT = digit()
NONZERO = digit(1, 9)
UINT = alt(Lit("0"), seq(NONZERO, star(DIGIT)))
FRACTION = seq(Lit("."), plus(DIGIT))
EXPONENT = seq(cls([(0x45, 0x45), (0x65, 0x65)]), opt(cls([(0x2B, 0x2B), (0x2D, 0x2D)])), plus(DIGIT))
INT_FRACTION = opt(seq(Lit("."), plus(Lit("0"))))  # 1.0 is an integer too


def any_integer() -> Node:
    return seq(opt(Lit("-")), UINT, INT_FRACTION)


def any_number() -> Node:
    return seq(opt(Lit("-")), UINT, opt(FRACTION), opt(EXPONENT))


def to_fraction(v) -> Fraction:
    if isinstance(v, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(v, int):
        return Fraction(v)
    if isinstance(v, float):
        return Fraction(Decimal(repr(v)))
    if isinstance(v, (Fraction, Decimal)):
        return Fraction(v)
    raise TypeError(f"not a number: {v!r}")


def _digits(x: Fraction) -> list[int]:
    """Decimal digits of 0 <= x < 1 (finite expansion), without trailing zeros."""
    out = []
    steps = 0
    while x:
        x *= 10
        d = floor(x)
        out.append(int(d))
        x -= d
        steps += 1
        if steps > 400:
            raise NumberLimit("a bound without a finite decimal expansion")
    return out


# -- integers ------------------------------------------------------------------------------

def _dec_digit(lo, hi):
    return digit(lo, hi)


def uint_range(lo: int, hi: int | None) -> Node:
    """Canonical non-negative integers (no leading zeros) in lo..hi (hi None: unbounded)."""
    lo = max(lo, 0)
    if hi is not None and lo > hi:
        return EMPTY
    parts = []
    n = len(str(lo))
    while True:
        bottom = 10 ** (n - 1) if n > 1 else 0
        top = 10 ** n - 1
        a = max(lo, bottom)
        if hi is not None and a > hi:
            break
        if hi is None and a == bottom:
            # every number with at least n digits
            if n == 1:
                parts.append(UINT)
            else:
                parts.append(seq(NONZERO, rep(DIGIT, n - 1, None)))
            break
        b = top if hi is None else min(hi, top)
        parts.append(digits_range(a, b, n, 10, _dec_digit))
        if hi is not None and b == hi:
            break
        n += 1
    return alt(*parts)


def int_range(lo: int | None, hi: int | None) -> Node:
    """Canonical integers (no ``-0``) in lo..hi; None is unbounded."""
    parts = []
    if lo is None or lo < 0:
        # negative part: magnitudes max(1, -hi) .. -lo
        mlo = 1 if hi is None or hi >= 0 else -hi
        mhi = None if lo is None else -lo
        parts.append(seq(Lit("-"), uint_range(mlo, mhi)))
    if hi is None or hi >= 0:
        parts.append(uint_range(0 if lo is None else max(lo, 0), hi))
    return alt(*parts)


def _int_bounds(lo, lo_x, hi, hi_x) -> tuple[int | None, int | None]:
    """Integer bounds from (possibly fractional, possibly exclusive) bounds."""
    ilo = ihi = None
    if lo is not None:
        f = floor(lo)
        ilo = f + 1 if (f < lo or lo_x) else f
    if hi is not None:
        f = floor(hi)
        ihi = f - 1 if (f == hi and hi_x) else f
    return ilo, ihi


# -- decimals ------------------------------------------------------------------------------

class _Frac:
    """Sets of fraction digit strings (what follows the '.'), as (epsilon_ok, non-empty node).

    ``k`` limits the significant fraction digits (digits beyond it must be zeros).
    """

    def __init__(self, k: int | None):
        self.k = k

    def rest_any(self, j):
        k = self.k
        if k is None:
            return True, plus(DIGIT)
        if j >= k:
            return True, plus(Lit("0"))
        return True, seq(rep(DIGIT, 1, k - j), star(Lit("0")))

    def rest_zero(self, j):
        return True, plus(Lit("0"))

    def rest_nonzero(self, j):
        k = self.k
        if k is None:
            return False, seq(star(Lit("0")), NONZERO, star(DIGIT))
        parts = []
        for i in range(j, k):
            parts.append(seq(rep(Lit("0"), i - j, i - j), NONZERO, _full(self.rest_any(i + 1))))
        return False, alt(*parts)

    def ge(self, d, j, strict):
        if j >= len(d):
            return self.rest_nonzero(j) if strict else self.rest_any(j)
        if self.k is not None and j >= self.k:
            return False, EMPTY
        c = d[j]
        parts = []
        if c < 9:
            parts.append(seq(digit(c + 1, 9), _full(self.rest_any(j + 1))))
        parts.append(seq(digit(c, c), _full(self.ge(d, j + 1, strict))))
        return False, alt(*parts)

    def le(self, d, j, strict):
        if j >= len(d):
            return (False, EMPTY) if strict else self.rest_zero(j)
        if self.k is not None and j >= self.k:
            return self.rest_zero(j)
        c = d[j]
        parts = []
        if c > 0:
            parts.append(seq(digit(0, c - 1), _full(self.rest_any(j + 1))))
        parts.append(seq(digit(c, c), _full(self.le(d, j + 1, strict))))
        return True, alt(*parts)

    def between(self, dl, sl, dh, sh, j):
        lend, hend = j >= len(dl), j >= len(dh)
        if lend and hend:
            if sl or sh:
                return False, EMPTY
            return self.rest_zero(j)
        if lend and not sl:
            return self.le(dh, j, sh)
        if self.k is not None and j >= self.k:
            # only zeros from here: value 0 relative to the remaining bounds
            eps = (lend and not sl) and (not hend or not sh)
            return (True, plus(Lit("0"))) if eps else (False, EMPTY)
        l = dl[j] if not lend else 0
        h = dh[j] if not hend else 0
        eps = (lend and not sl) and (not hend or not sh)
        if l == h:
            return eps, seq(digit(l, l), _full(self.between(dl, sl, dh, sh, j + 1)))
        parts = [seq(digit(l, l), _full(self.ge(dl, j + 1, sl) if not lend else self.rest_nonzero(j + 1)))]
        if l + 1 <= h - 1:
            parts.append(seq(digit(l + 1, h - 1), _full(self.rest_any(j + 1))))
        parts.append(seq(digit(h, h), _full(self.le(dh, j + 1, sh))))
        return eps, alt(*parts)


def _full(pair) -> Node:
    eps, node = pair
    return alt(EPS, node) if eps else node


def _with_fraction(int_part: Node, frac) -> Node:
    eps, node = frac
    if eps:
        return seq(int_part, opt(seq(Lit("."), node)))
    return seq(int_part, Lit("."), node)


def _mag_range(lo: Fraction, lo_x: bool, hi: Fraction | None, hi_x: bool, fr: _Frac,
               nonint: bool = False) -> Node:
    """Non-negative decimals ``I(.F)?`` (no exponent) with lo <(=) value <(=) hi.

    With ``nonint``, only values with a non-zero fraction.
    """
    if hi is not None and (hi < lo or (hi == lo and (lo_x or hi_x))):
        return EMPTY
    li = floor(lo)
    dl = _digits(lo - li)
    if nonint:
        lo_x = lo_x or not dl  # the integer li itself is excluded
    if hi is not None and floor(hi) == li:
        dh = _digits(hi - li)
        return _with_fraction(Lit(str(li)), fr.between(dl, lo_x, dh, hi_x, 0))
    parts = [_with_fraction(Lit(str(li)), fr.ge(dl, 0, lo_x))]
    hi_i = None if hi is None else floor(hi)
    mid = uint_range(li + 1, None if hi_i is None else hi_i - 1)
    parts.append(_with_fraction(mid, fr.rest_nonzero(0) if nonint else fr.rest_any(0)))
    if hi is not None:
        dh = _digits(hi - hi_i)
        frac = fr.between([], True, dh, hi_x, 0) if nonint else fr.le(dh, 0, hi_x)
        parts.append(_with_fraction(Lit(str(hi_i)), frac))
    return alt(*parts)


def _finite_fraction(values) -> tuple[bool, Node]:
    """(epsilon_ok, node) for fraction values given as k-digit strings."""
    eps = False
    parts = []
    for f in values:
        s = f.rstrip("0")
        if not s:
            eps = True
            parts.append(plus(Lit("0")))
        else:
            parts.append(seq(Lit(s), star(Lit("0"))))
    return eps, alt(*parts)


def _mag_range_finite(lo, lo_x, hi, hi_x, k: int, fracs: list[str]) -> Node:
    """Like ``_mag_range`` with the fraction restricted to the k-digit strings ``fracs``."""
    if hi is not None and (hi < lo or (hi == lo and (lo_x or hi_x))):
        return EMPTY
    scale = 10 ** k

    def ok(i, f):
        v = i + Fraction(int(f), scale)
        if v < lo or (lo_x and v == lo):
            return False
        if hi is not None and (v > hi or (hi_x and v == hi)):
            return False
        return True

    li = floor(lo)
    hi_i = None if hi is None else floor(hi)
    parts = []
    for i in sorted({li} | ({hi_i} if hi_i is not None else set())):
        sel = [f for f in fracs if ok(i, f)]
        if sel:
            parts.append(_with_fraction(Lit(str(i)), _finite_fraction(sel)))
    mid = uint_range(li + 1, None if hi_i is None else hi_i - 1)
    parts.append(_with_fraction(mid, _finite_fraction(fracs)))
    return alt(*parts)


def _split_signs(lo, lo_x, hi, hi_x, build) -> Node:
    """Signed values from magnitudes: ``build(mlo, mlo_x, mhi, mhi_x)`` for each side."""
    parts = []
    if lo is None or lo < 0:
        if hi is None or hi > 0 or (hi == 0):
            mlo, mlo_x = Fraction(0), True
        else:
            mlo, mlo_x = -hi, hi_x
        mhi, mhi_x = (None, False) if lo is None else (-lo, lo_x)
        parts.append(seq(Lit("-"), build(mlo, mlo_x, mhi, mhi_x)))
    if hi is None or hi > 0 or (hi == 0 and not hi_x):
        if lo is None or lo < 0:
            plo, plo_x = Fraction(0), False
        else:
            plo, plo_x = lo, lo_x
        parts.append(build(plo, plo_x, hi, hi_x))
    return alt(*parts)


# -- public entry points ---------------------------------------------------------------------

def number_node(lo=None, lo_x=False, hi=None, hi_x=False, *, integer=False, multiple_of=None,
                nonint=False, not_multiples=()) -> tuple[Node, str | None]:
    """(node, note): the spellings of the numbers in the given range.

    ``lo``/``hi`` are Fractions or None, ``*_x`` mark exclusive bounds, ``integer``
    asks for integer values, ``nonint`` for non-integer values only, ``multiple_of`` is
    a Fraction or None, ``not_multiples`` positive integers the values must not be multiples
    of ('not' over 'multipleOf'). ``note`` is None
    when the result is exact, else a short reason why it is a strict subset.
    """
    m = multiple_of
    if m is not None and m <= 0:
        raise NumberLimit("multipleOf must be positive")
    nots = sorted({int(n) for n in not_multiples})
    if nots:
        return _with_nots(lo, lo_x, hi, hi_x, integer, m, nonint, nots)
    if nonint:
        return _nonint_node(lo, lo_x, hi, hi_x, m)
    if m is not None:
        if integer:
            # integers that are multiples of m: multiples of m' = m / gcd-with-integers
            m = _int_multiple(m)
        elif m.denominator == 1:
            integer = True
        if m == 1 and integer:
            m = None
    if integer:
        ilo, ihi = _int_bounds(lo, lo_x, hi, hi_x)
        if ilo is not None and ihi is not None and ilo > ihi:
            return EMPTY, None
        if m is None:
            if ilo is None and ihi is None:
                return any_integer(), None
            return seq(int_range(ilo, ihi), INT_FRACTION), None
        return _integer_multiples(ilo, ihi, int(m))
    if m is None:
        if lo is None and hi is None:
            return any_number(), None
        if hi is None and lo == 0:
            # [0, inf) and (0, inf): the exponent form stays available
            mant = seq(UINT, opt(FRACTION))
            if lo_x:
                mant = alt(seq(NONZERO, star(DIGIT), opt(FRACTION)),
                           seq(Lit("0."), star(Lit("0")), NONZERO, star(DIGIT)))
            return seq(mant, opt(EXPONENT)), None
        fr = _Frac(None)
        return _split_signs(lo, lo_x, hi, hi_x, lambda a, ax, b, bx: _mag_range(a, ax, b, bx, fr)), None
    # fractional multipleOf: m = c / 10^k
    k, c = _decimal_parts(m)
    if k is None or (10 ** k) % c != 0:
        return _enumerate(lo, lo_x, hi, hi_x, m)
    if c == 1:
        fr = _Frac(k)
        return _split_signs(lo, lo_x, hi, hi_x, lambda a, ax, b, bx: _mag_range(a, ax, b, bx, fr)), None
    if 10 ** k // c > 2000:
        return _enumerate(lo, lo_x, hi, hi_x, m)
    fracs = [str(v).zfill(k) for v in range(0, 10 ** k, c)]
    return _split_signs(lo, lo_x, hi, hi_x,
                        lambda a, ax, b, bx: _mag_range_finite(a, ax, b, bx, k, fracs)), None


def _nonint_node(lo, lo_x, hi, hi_x, m) -> tuple[Node, str | None]:
    """Numbers with a non-zero fraction (no exponent) in range, multiples of m if given."""
    if m is None:
        fr = _Frac(None)
        return _split_signs(lo, lo_x, hi, hi_x,
                            lambda a, ax, b, bx: _mag_range(a, ax, b, bx, fr, nonint=True)), None
    if m.denominator == 1:
        return EMPTY, None  # multiples of an integer are integers
    k, c = _decimal_parts(m)
    if k is None or (10 ** k) % c != 0:
        return _enumerate(lo, lo_x, hi, hi_x, m, nonint=True)
    if c == 1:
        fr = _Frac(k)
        return _split_signs(lo, lo_x, hi, hi_x,
                            lambda a, ax, b, bx: _mag_range(a, ax, b, bx, fr, nonint=True)), None
    if 10 ** k // c > 2000:
        return _enumerate(lo, lo_x, hi, hi_x, m, nonint=True)
    fracs = [str(v).zfill(k) for v in range(c, 10 ** k, c)]
    return _split_signs(lo, lo_x, hi, hi_x,
                        lambda a, ax, b, bx: _mag_range_finite(a, ax, b, bx, k, fracs)), None


def _int_multiple(m: Fraction) -> Fraction:
    """For integer x: x is a multiple of m iff x is a multiple of the returned integer."""
    # x = j * p/q with x integer  <=>  x multiple of p / gcd(p, q)... p/q in lowest terms:
    # x = j p / q integer for some integer j  <=>  x multiple of p (q | j since gcd(p,q)=1).
    return Fraction(m.numerator)


def _decimal_parts(m: Fraction) -> tuple[int | None, int]:
    """(k, c) with m = c / 10^k, c an integer; k None if m is not a finite decimal."""
    q = m.denominator
    k = 0
    while q % 10 == 0:
        q //= 10
        k += 1
    while q % 2 == 0 or q % 5 == 0:
        q = q // 2 if q % 2 == 0 else q // 5
        k += 1
        if k > 60:
            return None, 0
    if q != 1:
        return None, 0
    c = m * 10 ** k
    return k, int(c)


def _pow25(c: int) -> int | None:
    """t such that c divides 10^t (c = 2^a 5^b), or None."""
    a = b = 0
    while c % 2 == 0:
        c //= 2
        a += 1
    while c % 5 == 0:
        c //= 5
        b += 1
    return max(a, b) if c == 1 else None


def _integer_multiples(lo: int | None, hi: int | None, c: int) -> tuple[Node, str | None]:
    t = _pow25(c)
    if t is None or 10 ** t // c > 2000:
        return _integer_residues(lo, hi, c, [])
    parts = []
    if lo is None or lo < 0:
        mlo = 1 if hi is None or hi >= 0 else -hi
        mhi = None if lo is None else -lo
        parts.append(seq(Lit("-"), _uint_multiples(mlo, mhi, c, t)))
    if hi is None or hi >= 0:
        parts.append(_uint_multiples(0 if lo is None else max(lo, 0), hi, c, t))
    return seq(alt(*parts), INT_FRACTION), None


def _uint_multiples(lo: int, hi: int | None, c: int, t: int) -> Node:
    if hi is not None and lo > hi:
        return EMPTY
    base = 10 ** t
    parts = []
    # below 10^t: list them
    top = base - 1 if hi is None else min(hi, base - 1)
    first = -(-lo // c) * c
    parts.extend(Lit(str(v)) for v in range(first, top + 1, c))
    lo2 = max(lo, base)
    if hi is not None and lo2 > hi:
        return alt(*parts)
    suffixes = list(range(0, base, c))

    def suf(a, b):
        return alt(*[Lit(str(s).zfill(t)) for s in suffixes if a <= s <= b])

    pa, sa = divmod(lo2, base)
    if hi is None:
        parts.append(seq(Lit(str(pa)), suf(sa, base - 1)))
        parts.append(seq(uint_range(pa + 1, None), suf(0, base - 1)))
        return alt(*parts)
    pb, sb = divmod(hi, base)
    if pa == pb:
        parts.append(seq(Lit(str(pa)), suf(sa, sb)))
    else:
        parts.append(seq(Lit(str(pa)), suf(sa, base - 1)))
        if pa + 1 <= pb - 1:
            parts.append(seq(uint_range(pa + 1, pb - 1), suf(0, base - 1)))
        parts.append(seq(Lit(str(pb)), suf(0, sb)))
    return alt(*parts)


# -- 'not multipleOf' and moduli that are not 2^a 5^b: residues read digit by digit ----------------

MAX_MODULUS = 10_000  # residues tracked exactly up to this modulus (a digit automaton of as many states)
SMALL_RESIDUE_REGEX = 4_000  # leaves: a residue automaton with a regex this small is written as one
SMALL_RESIDUE_STATES = 32  # (only tried on automata this small: state elimination costs the more)


def _with_nots(lo, lo_x, hi, hi_x, integer: bool, m, nonint: bool, nots: list[int]) -> tuple[Node, str | None]:
    """Numbers in range (multiples of ``m`` if given) that are multiples of none of ``nots``.

    A non-integer is never a multiple of an integer, so only the integers are filtered."""
    parts, notes = [], []
    if not integer:
        node, note = _nonint_node(lo, lo_x, hi, hi_x, m)
        parts.append(node)
        notes.append(note)
    if not nonint and 1 not in nots:
        c = 1 if m is None else int(_int_multiple(m))
        ilo, ihi = _int_bounds(lo, lo_x, hi, hi_x)
        if ilo is None or ihi is None or ilo <= ihi:
            node, note = _integer_residues(ilo, ihi, c, nots)
            parts.append(node)
            notes.append(note)
    notes = [n for n in notes if n]
    return alt(*parts), "; ".join(notes) or None


def _integer_residues(lo: int | None, hi: int | None, c: int, nots: list[int]) -> tuple[Node, str | None]:
    """The integers in lo..hi that are multiples of ``c`` and of none of ``nots``, exactly, through
    a digit automaton of their residues; listed (``_listed_residues``, with a note) past ``MAX_MODULUS``."""
    if any(c % n == 0 for n in nots):
        return EMPTY, None
    nots = [n for n in nots if not any(n != m and n % m == 0 for m in nots)]  # 6 is implied by 3
    modulus = c
    for n in nots:
        modulus = modulus * n // gcd(modulus, n)
    if modulus > MAX_MODULUS:
        return _listed_residues(lo, hi, c, nots)
    ok = frozenset(r for r in range(0, modulus, c) if all(r % n for n in nots))
    if not ok:
        return EMPTY, None
    parts = []
    if lo is None or lo < 0:
        mlo = 1 if hi is None or hi >= 0 else -hi
        mhi = None if lo is None else -lo
        parts.append(seq(Lit("-"), _uint_residues(mlo, mhi, modulus, frozenset((-r) % modulus for r in ok))))
    if hi is None or hi >= 0:
        parts.append(_uint_residues(0 if lo is None else max(lo, 0), hi, modulus, ok))
    return seq(alt(*parts), INT_FRACTION), None


def _uint_residues(lo: int, hi: int | None, modulus: int, ok: frozenset) -> Node:
    """Canonical non-negative integers in lo..hi whose residue mod ``modulus`` is in ``ok``: listed
    when few, else the residue automaton (with the range's), as a regex when a small one exists."""
    if hi is not None and lo > hi:
        return EMPTY
    if hi is not None and hi - lo < 4 * MAX_ENUMERATED:
        return alt(*[Lit(str(v)) for v in range(lo, hi + 1) if v % modulus in ok])
    from ..automaton import combine
    from ..regex.ast_dfa import ast_to_dfa
    from ..regex.dfa_ast import dfa_to_node

    dfa = _residue_dfa(modulus, ok)
    if lo > 0 or hi is not None:
        dfa = combine([ast_to_dfa(uint_range(lo, hi)), dfa], lambda f: f[0] and f[1])
    tree = dfa_to_node(dfa, max_weight=SMALL_RESIDUE_REGEX) if dfa.n_states <= SMALL_RESIDUE_STATES else None
    return tree if tree is not None else Auto(dfa)


@lru_cache(maxsize=64)
def _residue_dfa(modulus: int, ok: frozenset):
    """The minimal DFA of canonical decimal integers (no leading zeros) with residue in ``ok``."""
    import numpy as np

    from ..automaton import minimize

    # state 0: start; 1: read "0"; 2 + r: read a number of residue r
    t = np.full((modulus + 2, 256), -1, np.int32)
    acc = np.zeros(modulus + 2, bool)
    t[0, 0x30] = 1
    acc[1] = 0 in ok
    for d in range(1, 10):
        t[0, 0x30 + d] = 2 + d % modulus
    for r in range(modulus):
        t[2 + r, 0x30:0x3A] = [2 + (10 * r + d) % modulus for d in range(10)]
        acc[2 + r] = r in ok
    return minimize(t, acc)


def _listed_residues(lo: int | None, hi: int | None, c: int, nots: list[int]) -> tuple[Node, str | None]:
    """The fallback of ``_integer_residues``: multiples of ``c`` listed (``_enumerate``), those of
    ``nots`` left out."""
    values, note = _enumerated(None if lo is None else Fraction(lo), False, None if hi is None else Fraction(hi),
                               False, Fraction(c))
    kept = [v for v in values if all(v % n for n in nots)]
    if note is not None and nots:
        note += f", and of those the multiples of {', '.join(map(str, nots))} are left out"
    return alt(*[number_literal(v) for v in kept]), note


MAX_ENUMERATED = 1000


def _enumerate(lo, lo_x, hi, hi_x, m: Fraction, integer: bool = False, nonint: bool = False) -> tuple[Node, str | None]:
    """The multiples of m in range, listed; at most MAX_ENUMERATED of them (then approximated)."""
    values, note = _enumerated(lo, lo_x, hi, hi_x, m, nonint)
    return alt(*[number_literal(v) for v in values]), note


def _enumerated(lo, lo_x, hi, hi_x, m: Fraction, nonint: bool = False) -> tuple[list, str | None]:
    """(values, note) for ``_enumerate``."""
    jlo = None if lo is None else (lo / m)
    jhi = None if hi is None else (hi / m)
    a = None if jlo is None else (floor(jlo) + 1 if (floor(jlo) < jlo or lo_x) else floor(jlo))
    b = None if jhi is None else (floor(jhi) - 1 if (floor(jhi) == jhi and hi_x) else floor(jhi))
    note = None
    if a is not None and b is not None:
        if a > b:
            return [], None
        if b - a + 1 > MAX_ENUMERATED:
            note = f"multipleOf {m}: only {MAX_ENUMERATED} of the allowed values are listed"
            b = a + MAX_ENUMERATED - 1
    else:
        note = f"multipleOf {m} on an unbounded range: only {MAX_ENUMERATED} values near 0 are listed"
        if a is None and b is None:
            a, b = -(MAX_ENUMERATED // 2), MAX_ENUMERATED // 2
        elif a is None:
            a = min(b, 0) - MAX_ENUMERATED + 1 if b < 0 else max(b - MAX_ENUMERATED + 1, -(MAX_ENUMERATED // 2))
            b = min(b, a + MAX_ENUMERATED - 1)
        else:
            a = a if a > 0 else max(a, -(MAX_ENUMERATED // 2))
            b = a + MAX_ENUMERATED - 1
    values = [m * j for j in range(a, b + 1)]
    if nonint:
        values = [v for v in values if v.denominator != 1]
    return values, note


def number_literal(v, text: str | None = None) -> Node:
    """The spellings of the number ``v``: plain decimal with optional trailing zeros (and ``text``)."""
    q = to_fraction(v) if not isinstance(v, Fraction) else v
    neg = q < 0
    q = -q if neg else q
    i = floor(q)
    ds = _digits(q - i)
    if ds:
        body = seq(Lit(f"{i}." + "".join(map(str, ds))), star(Lit("0")))
    else:
        body = seq(Lit(str(i)), INT_FRACTION)
    node = seq(Lit("-"), body) if neg and q != 0 else body
    if q == 0:
        node = alt(node, seq(Lit("-"), body))
    if text is not None:
        node = alt(node, Lit(text))
    return node


def lcm_fraction(a: Fraction, b: Fraction) -> Fraction:
    """The least common multiple of two positive rationals."""
    num = a.numerator * b.numerator // gcd(a.numerator, b.numerator)
    den = gcd(a.denominator, b.denominator)
    return Fraction(num, den)
