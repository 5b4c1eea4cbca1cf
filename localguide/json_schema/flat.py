"""``Flat``: one conjunction of plain constraints for every JSON type, and how two merge.

Schemas are flattened into unions of them (a disjunctive normal form) by
``flattener.Flattener``: ``Flattener.dnf(sub)`` resolves a schema's in-place applicators (``$ref``, ``allOf``,
``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else``, dependencies) into a list of
``Flat`` objects: each holds plain constraints for every JSON type, with subschemas of
properties and items kept as lists of ``Sub`` (their conjunction), compiled later.
The union of the flats is the schema's language, or a subset of it (a note says
why); never a superset.
"""

from __future__ import annotations


from .numbers import lcm_fraction, to_fraction
from .resolve import Sub

ALL_TYPES = frozenset({"null", "boolean", "object", "array", "string", "integer", "nonint"})
_TYPE_ATOMS = {"null": {"null"}, "boolean": {"boolean"}, "object": {"object"}, "array": {"array"},
               "string": {"string"}, "integer": {"integer"}, "number": {"integer", "nonint"}}
NUMBER = frozenset({"integer", "nonint"})

ANNOTATIONS = {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment",
               "contentMediaType", "contentEncoding", "contentSchema", "$schema", "$id", "id", "$anchor",
               "$dynamicAnchor", "$recursiveAnchor", "$defs", "definitions", "$vocabulary", "example"}
VALIDATION = {"type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
              "minLength", "maxLength", "pattern", "format", "items", "prefixItems", "additionalItems", "minItems",
              "maxItems", "uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems", "properties",
              "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties",
              "propertyNames", "unevaluatedProperties", "dependentRequired", "dependentSchemas", "dependencies",
              "$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$dynamicRef", "$recursiveRef"}
MAX_BRANCHES = 64


def json_eq(a, b) -> bool:
    """Equality of JSON values as JSON Schema defines it (1 == 1.0, true != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        try:
            return to_fraction(a) == to_fraction(b)
        except (ValueError, OverflowError):
            return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_eq(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def type_atom(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "nonint"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(f"not a JSON value: {v!r}")


FALSE = Sub(False, "", "", 2020)


class FromNegation(str):
    """The pointer of a ``contains`` that a negation made (``not: {items: ...}``): where it cannot be
    compiled beside the others, its branch is left out (a subset), not refused."""


class Flat:
    """One conjunction of plain constraints (for all JSON types at once)."""

    __slots__ = ("types", "enum", "not_enum", "lo", "lo_x", "hi", "hi_x", "mult", "not_mult", "min_len", "max_len",
                 "patterns", "not_patterns", "formats", "prefix", "items", "has_items", "min_items", "max_items", "unique",
                 "contains", "props", "required", "additional", "has_additional", "patprops", "min_props",
                 "max_props", "prop_names", "noeval", "noeval_items", "uneval_items", "ptr", "groups")

    def __init__(self, ptr: str = ""):
        self.types = ALL_TYPES
        self.enum = None
        self.not_enum: list = []
        self.lo = self.hi = None
        self.lo_x = self.hi_x = False
        self.mult = None
        self.not_mult: list[int] = []  # positive integers a number must not be a multiple of
        self.min_len, self.max_len = 0, None
        self.patterns: list = []
        self.not_patterns: list = []  # (pattern, ptr): a string matches none of them ('not' over 'pattern')
        self.formats: list = []
        self.prefix: list[list] = []
        self.items: list = []
        self.has_items = False
        self.min_items, self.max_items = 0, None
        self.unique = None  # pointer of uniqueItems: true (None: not required)
        self.contains: list = []
        self.props: dict[str, list] = {}
        self.required: list[str] = []
        self.additional: list = []
        self.has_additional = False
        self.patprops: list = []  # (pattern, ptr, [Sub])
        self.min_props, self.max_props = 0, None
        self.prop_names: list = []
        self.noeval: set = set()
        self.noeval_items = False  # prefix/items from a negation (they evaluate nothing)
        self.uneval_items = False  # ``items`` hold only unevaluatedItems (items that ``contains`` matches escape it)
        self.ptr = ptr
        # After a merge: the (patprops, additional) of each part, for keys no part lists. A key's
        # value satisfies, per part, the part's patterns that match the key, or else the part's
        # additional schemas. (``patprops`` and ``additional`` of a merged flat are narrower: a
        # pattern's keys there take the other parts' additional schemas too.) None: one part,
        # (patprops, additional). A merged flat's ``props`` hold all that applies to each name.
        self.groups: list | None = None

    def key_groups(self) -> list:
        """[(patprops, additional)] per part (see ``groups``)."""
        return self.groups if self.groups is not None else [(self.patprops, self.additional)]

    def copy(self) -> "Flat":
        f = Flat.__new__(Flat)
        for k in Flat.__slots__:
            v = getattr(self, k)
            if isinstance(v, (list, dict, set)):
                v = v.copy()
            setattr(f, k, v)
        return f

    # -- type-specific emptiness ------------------------------------------------------------------
    def unconstrained(self, kind: str) -> bool:
        if kind == "object":
            return not (self.props or self.required or self.additional or self.patprops or self.min_props
                        or self.max_props is not None or self.prop_names)
        if kind == "array":
            return not (self.prefix or self.items or self.min_items or self.max_items is not None
                        or self.unique is not None or self.contains)
        return True


class Problems:
    """Collects unsupported constructs, approximations and per-keyword statuses."""

    def __init__(self):
        self.unsupported: list[tuple[str, str, str]] = []  # (pointer, keyword, reason)
        self.approximated: list[tuple[str, str, str]] = []
        self.loosened: list[tuple[str, str, str]] = []  # (within approximated too)
        self.status: dict[tuple[str, str], str] = {}
        self.muted = 0
        self.loosenable = 0  # negations left out of a complement (a loose compile would keep them)

    def take(self, other: "Problems") -> None:
        """Become ``other`` (a second compile's findings replace the first's)."""
        self.__dict__.update(other.__dict__)

    def error(self, ptr: str, kw: str, reason: str) -> None:
        if self.muted:
            raise _Trial(reason)
        item = (ptr, kw, reason)
        if item not in self.unsupported:
            self.unsupported.append(item)
        self.status[(ptr, kw)] = "unsupported"

    def approx(self, ptr: str, kw: str, reason: str) -> None:
        item = (ptr, kw, reason)
        if item not in self.approximated:
            self.approximated.append(item)
        if self.status.get((ptr, kw)) != "unsupported":
            self.status[(ptr, kw)] = "approximated"

    def loosen(self, ptr: str, kw: str, reason: str) -> None:
        item = (ptr, kw, reason)
        if item not in self.loosened:
            self.loosened.append(item)
            self.approximated.append(item)
        if self.status.get((ptr, kw)) != "unsupported":
            self.status[(ptr, kw)] = "loosened"

    def ok(self, ptr: str, kw: str, status: str = "enforced") -> None:
        self.status.setdefault((ptr, kw), status)


class _Trial(Exception):
    """Raised instead of recording an error while a construction is only being tried."""


def merge(a: Flat, b: Flat, fl) -> Flat | None:
    """The conjunction of two flats; None when obviously empty."""
    f = a.copy()  # (at a's pointer, also where a is the root: its pointer is "")
    f.types = a.types & b.types
    if not f.types:
        return None
    if b.enum is not None:
        f.enum = b.enum if a.enum is None else [v for v in a.enum if any(json_eq(v, w) for w in b.enum)]
        if not f.enum:
            return None
    f.not_enum = a.not_enum + b.not_enum
    if b.lo is not None and (a.lo is None or b.lo > a.lo or (b.lo == a.lo and b.lo_x)):
        f.lo, f.lo_x = b.lo, b.lo_x
    if b.hi is not None and (a.hi is None or b.hi < a.hi or (b.hi == a.hi and b.hi_x)):
        f.hi, f.hi_x = b.hi, b.hi_x
    if b.mult is not None:
        f.mult = b.mult if a.mult is None else lcm_fraction(a.mult, b.mult)
    f.not_mult = a.not_mult + [n for n in b.not_mult if n not in a.not_mult]
    f.min_len = max(a.min_len, b.min_len)
    f.max_len = b.max_len if a.max_len is None else (a.max_len if b.max_len is None else min(a.max_len, b.max_len))
    f.patterns = a.patterns + [p for p in b.patterns if p not in a.patterns]
    f.not_patterns = a.not_patterns + [p for p in b.not_patterns if p not in a.not_patterns]
    f.formats = a.formats + [p for p in b.formats if p not in a.formats]
    # arrays
    n = max(len(a.prefix), len(b.prefix))
    f.prefix = [(a.prefix[i] if i < len(a.prefix) else a.items) + (b.prefix[i] if i < len(b.prefix) else b.items)
                for i in range(n)]
    f.items = a.items + b.items
    f.has_items = a.has_items or b.has_items
    f.min_items = max(a.min_items, b.min_items)
    f.max_items = _min_opt(a.max_items, b.max_items)
    f.unique = a.unique if a.unique is not None else b.unique
    f.contains = a.contains + b.contains
    # objects
    props: dict[str, list] = {}
    for name in list(a.props) + [k for k in b.props if k not in a.props]:
        props[name] = fl.schema_for(a, name) + fl.schema_for(b, name)
    f.props = props
    f.required = a.required + [r for r in b.required if r not in a.required]
    f.additional = a.additional + b.additional
    f.has_additional = a.has_additional or b.has_additional
    f.patprops = ([(p, ptr, s + b.additional) for p, ptr, s in a.patprops]
                  + [(p, ptr, s + a.additional) for p, ptr, s in b.patprops])
    f.groups = a.key_groups() + b.key_groups()
    f.min_props = max(a.min_props, b.min_props)
    f.max_props = _min_opt(a.max_props, b.max_props)
    f.prop_names = a.prop_names + b.prop_names
    ev_a = set(a.props) - a.noeval
    ev_b = set(b.props) - b.noeval
    f.noeval = (a.noeval - ev_b) | (b.noeval - ev_a) | ((a.noeval & b.noeval))
    f.noeval_items = a.noeval_items or b.noeval_items
    f.uneval_items = (a.uneval_items or b.uneval_items) and not any(
        x.has_items and not x.uneval_items for x in (a, b))
    # quick contradictions
    if f.lo is not None and f.hi is not None and (f.lo > f.hi or (f.lo == f.hi and (f.lo_x or f.hi_x))):
        f.types = f.types - NUMBER
    if f.max_len is not None and f.min_len > f.max_len:
        f.types = f.types - {"string"}
    if f.max_items is not None and f.min_items > f.max_items:
        f.types = f.types - {"array"}
    if f.max_props is not None and f.min_props > f.max_props:
        f.types = f.types - {"object"}
    if not f.types:
        return None
    return f


def _min_opt(x, y):
    if x is None:
        return y
    if y is None:
        return x
    return min(x, y)


def patterns_only(groups: list) -> list:
    """Every pattern of ``groups``, with no schema: a part that only tells which keys they match."""
    return [(p, ptr, []) for patprops, _ in groups for p, ptr, _ in patprops]
