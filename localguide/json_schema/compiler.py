"""Flats → regex AST of JSON text (objects, arrays, strings, numbers, literals, whitespace).

Whitespace: ``compact`` allows one optional space after ``,`` and ``:`` and nothing
else (so both ``json.dumps(x)`` and ``json.dumps(x, separators=(",", ":"))`` match);
``pretty`` is exactly ``json.dumps(x, indent=2)``. Properties come in schema order;
properties not listed (``additionalProperties``, ``patternProperties``) come after
the listed ones.

Unbounded nesting is not regular: a value that any JSON may fill (``{}``, an absent
``items``, ``additionalProperties: true``) is expanded ``any_depth`` levels deep,
and a recursive ``$ref`` ``max_recursion`` levels deep. Deeper documents are
rejected; nothing invalid is ever accepted.
"""

from __future__ import annotations

import json
from dataclasses import replace

from ..errors import SchemaError, json_pointer
from ..regex.ast import ANY_CHAR_RANGES, EMPTY, Lit, Node, Ref, alt, cls, opt, rep, seq, star
from ..automaton import product_walk
from ..regex.ast_dfa import ast_to_dfa
from .encoding import any_json_char, encode_content, json_string_literal, not_in_strings
from .flat import ANNOTATIONS, FALSE, NUMBER, Flat, json_eq, patterns_only, type_atom
from .flattener import Flattener
from .numbers import NumberLimit, number_literal, number_node, to_fraction
from .arrays import Arrays
from .objects import Objects, _any_key_dfa
from .resolve import ResolveError
from .strings import (LookaheadsTooLarge, PatternUnsupported, format_dfa, pattern_dfa, format_node, pattern_node,
                      restrict_length)

# Subschema compiles for one schema (about a millisecond each). On MaskBench: at most 700 with exact
# recursion, which compiles each once; 1,400 bounded (max_recursion=N), except where definitions that
# refer to each other are expanded on every way into them (six schemas, past 20,000 in 30 s).
MAX_EXPANSIONS = 20_000
# keywords without effect on validity, whatever their value (not $id, $anchor, $defs: a $ref may use them)
_NO_EFFECT = {"title", "description", "default", "examples", "example", "deprecated", "readOnly", "writeOnly",
              "$comment"}
MAX_DEPTH = 300  # values within values (above shape.MAX_NESTING: a schema's own nesting is checked first)
MAX_CHECK_DEPTH = 64  # levels of an enum's array or object value checked against the schema
ANY_STRING_JSON = seq(Lit('"'), star(any_json_char()), Lit('"'))


class Compiler(Objects, Arrays):
    def __init__(self, flattener: Flattener, *, strict: bool = False, whitespace: str = "compact",
                 any_depth: int = 3, extra_depth: int | None = None, max_length: int = 128,
                 max_items: int = 32, indent: int = 2, exact_recursion: bool = False, raw_top: bool = False):
        if whitespace not in ("compact", "pretty"):
            raise ValueError("whitespace must be 'compact' or 'pretty'")
        self.fl = flattener
        self.problems = flattener.problems
        self.strict = strict
        self.pretty = whitespace == "pretty"
        self.any_depth = any_depth
        # additional properties nobody described: nested less deep than an explicit {}
        self.extra_depth = any_depth - 1 if extra_depth is None else extra_depth
        self.max_length = max_length
        self.max_items = max_items
        self.indent = indent
        self._any: dict = {}
        self._values: dict = {}
        # With exact_recursion, a bare $ref back into a definition being expanded is a
        # ``Ref`` to that definition, compiled once (``rules``); else the flattener expands
        # it max_recursion levels.
        self.exact_recursion = exact_recursion
        self.rules: dict = {}
        self.expansions = 0  # _value calls (MAX_EXPANSIONS)
        self._exact_values: dict = {}  # with exact_recursion: conjunction -> (node, subs)
        self._structures: dict = {}  # id(schema) -> (its keywords as text, schema): _distinct
        self._key_regions: dict = {}  # (patterns, listed names) -> key nodes (key_regions)
        self._open: dict = {}  # with exact_recursion: the conjunctions being compiled (see _conj_rule)
        self.raw_top = raw_top  # a string at depth 0 is its characters (``schema_to_ast(raw_strings=)``)

    # -- whitespace --------------------------------------------------------------------------
    def sep(self, depth: int) -> Node:
        """Between two members of a container whose members sit at ``depth``."""
        if self.pretty:
            return Lit(",\n" + " " * (self.indent * depth))
        return seq(Lit(","), opt(Lit(" ")))

    def colon(self) -> Node:
        return Lit(": ") if self.pretty else seq(Lit(":"), opt(Lit(" ")))

    def wrap(self, open_: str, close: str, content: Node, empty_ok: bool, depth: int) -> Node:
        """``open content close`` (content non-empty) or the empty container."""
        if self.pretty:
            body = seq(Lit(open_ + "\n" + " " * (self.indent * (depth + 1))), content,
                       Lit("\n" + " " * (self.indent * depth) + close))
        else:
            body = seq(Lit(open_), content, Lit(close))
        return alt(body, Lit(open_ + close)) if empty_ok else body

    # -- values ---------------------------------------------------------------------------------
    def value(self, subs: list, depth: int) -> Node:
        """The language of the conjunction ``subs`` at nesting ``depth``, memoized.

        A result depends on the ``$ref`` targets already expanded on the way here
        (``Sub.refs``) only through those it follows again (recursion is counted). So it
        is reused wherever the way here holds none of the targets it followed: a shared
        definition expanded in many places is compiled once.
        """
        if len(subs) > 1:
            subs = self._distinct(subs)
        targets = [self._bare_ref_target(x) for x in subs]
        if self.exact_recursion and len(subs) == 1 and targets[0] is not None:
            ref = self._recursive_ref(subs[0], targets[0], depth)
            if ref is not None:
                return ref
        # (exact recursion, compact whitespace: a value's language does not depend on its depth)
        key = (tuple(_memo_key(x if t is None else t, t is not None) for x, t in zip(subs, targets)),
               0 if self.exact_recursion else depth)
        if self.exact_recursion:
            conj = ("conj",) + key[0]
            if conj in self.rules:
                return Ref(conj)
            if conj in self._open:
                return self._conj_rule(conj, subs)
            hit = self._exact_values.get(conj)
            if hit is not None:  # (exact: the same language whatever the way here)
                return hit[0]
        outer = {r for x in subs for r in x.refs}
        entries = self._values.get(key)
        if entries is not None:
            for followed, node, _ in entries:
                if outer.isdisjoint(followed):
                    if self.fl.followed:
                        self.fl.followed[-1] |= followed
                    return node
        stack = self.fl.followed
        stack.append(set())
        if self.exact_recursion:
            self._open[conj] = self._open.get(conj, 0) + 1
        try:
            node = self._value(subs, depth)
        finally:
            followed = stack.pop()
            if self.exact_recursion:
                self._open[conj] -= 1
                if not self._open[conj]:
                    del self._open[conj]
        if stack:
            stack[-1] |= followed
        if self.exact_recursion:
            self._exact_values[conj] = (node, subs)  # (``subs`` kept alive with it: its ids stay unique)
        elif outer.isdisjoint(followed):
            # ``subs`` kept alive with the entry: its ids stay unique
            self._values.setdefault(key, []).append((frozenset(followed), node, subs))
        return node

    def _distinct(self, subs: list) -> list:
        """``subs`` without repeats (a conjunction is idempotent): the same subschema met twice, or
        two with the same keywords but annotations (a property's schema and a pattern property's
        schema for its name, both naming one definition). Repeats multiply the alternatives of
        their ``anyOf`` at every level below. With exact recursion the way there (``Sub.refs``)
        makes no difference to the language; else the longest way is kept, the one whose bounded
        expansion ends soonest."""
        seen: dict = {}
        for x in subs:
            k = (self._structure(x.schema), x.base, x.draft)
            if k not in seen or (not self.exact_recursion and len(x.refs) > len(seen[k].refs)):
                seen[k] = x
        return list(seen.values()) if len(seen) < len(subs) else subs

    def _structure(self, schema):
        """The keywords of ``schema`` but annotations, as text (its identity where it is not JSON)."""
        hit = self._structures.get(id(schema))
        if hit is None:
            body = {k: v for k, v in schema.items() if k not in _NO_EFFECT} if isinstance(schema, dict) else schema
            try:
                text = json.dumps(body, sort_keys=True)
            except (TypeError, ValueError):
                text = ("object", id(schema))
            hit = self._structures[id(schema)] = (text, schema)  # (schema kept alive: its id stays its own)
        return hit[0]

    def _conj_rule(self, conj: tuple, subs: list) -> Node:
        """With exact recursion: the conjunction ``subs``, met again inside its own compile (a
        recursion through ``$ref`` merged with other keywords, or through several schemas applying
        to one value), as a rule compiled once, whatever the way to it. Expanding it on every way
        in would cost a compile per path through the schemas that refer to each other."""
        self.rules[conj] = EMPTY  # (a Ref to it while its body compiles)
        # (every conjunction still open on the way here becomes a rule too where the body meets it)
        self.rules[conj] = self._value([replace(x, refs=()) for x in subs], 0)  # (depth 0: see _recursive_ref)
        return Ref(conj)

    def _bare_ref_target(self, sub):
        """The target of ``sub`` when it is a bare ``$ref`` (nothing but annotations beside it), else None."""
        s = sub.schema
        if not (isinstance(s, dict) and isinstance(s.get("$ref"), str) and
                (sub.draft < 2019 or all(k == "$ref" or k in ANNOTATIONS for k in s))):
            return None
        try:
            return self.fl.registry.resolve(sub, s["$ref"])
        except ResolveError:
            return None  # the flattener reports it

    def _recursive_ref(self, sub, t, depth: int):
        """A ``Ref`` when the bare ``$ref`` ``sub`` (to ``t``) leads back into a definition being expanded."""
        key = _memo_key(t)
        if key in self.rules:
            # Once a rule, always the rule: re-expanding a definition of a recursive cluster on every
            # way into it costs a compile per path through the cluster (exponential on large ones).
            self.problems.ok(sub.ptr, "$ref")
            return Ref(key)
        if self.fl.followed:
            self.fl.followed[-1].add(t.ptr)  # the answer depends on the way here
        if t.ptr not in sub.refs:
            return None
        self.problems.ok(sub.ptr, "$ref")
        self.rules[key] = EMPTY  # a reference to itself while it compiles is a Ref too
        # (at depth 0: in compact whitespace, which exact recursion requires, the language of a
        # value does not depend on its depth, and the rule serves every depth)
        self.rules[key] = self._value([replace(t, refs=(t.ptr,))], 0)
        return Ref(key)

    def _value(self, subs: list, depth: int) -> Node:
        self.expansions += 1
        if self.expansions > MAX_EXPANSIONS:
            ptr = json_pointer(subs[0].ptr) if subs else "#"
            why = "" if self.exact_recursion else (
                f": definitions that refer to each other are expanded {self.fl.max_recursion} levels on every way "
                "into them; max_recursion=None (the default, exact) compiles each once")
            raise SchemaError(f"the schema needs more than {MAX_EXPANSIONS:,} subschema compiles (the bound "
                              f"compiler.MAX_EXPANSIONS; at {ptr}){why}")
        if depth > MAX_DEPTH:
            ptr = subs[0].ptr if subs else ""
            self.problems.approx(ptr, "", f"nesting deeper than {MAX_DEPTH} levels is rejected")
            return EMPTY
        flats = [Flat()]
        for s in subs:
            flats = self.fl.conj(flats, self.fl.dnf(s), s.ptr, "allOf")
            if not flats:
                return EMPTY
        return alt(*[self.flat(f, depth) for f in flats])

    def flat(self, f: Flat, depth: int) -> Node:
        if self.raw_top and depth == 0:
            return self.raw_string(f)
        if f.enum is not None:
            return alt(*[self.literal(v, depth) for v in f.enum if self.accepts(f, v)])
        parts = []
        types = f.types
        excluded = f.not_enum
        if "null" in types and not any(v is None for v in excluded):
            parts.append(Lit("null"))
        if "boolean" in types:
            for b in (True, False):
                if not any(v is b for v in excluded):
                    parts.append(Lit("true" if b else "false"))
        if types & NUMBER:
            parts.append(self.number(f))
        if "string" in types:
            parts.append(self.string(f))
        for kind, build in (("array", self.array), ("object", self.object)):
            if kind not in types:
                continue
            if any(type_atom(v) == kind for v in excluded):
                # (an array or object excluded by value is not cut out of the language: none is allowed)
                self.problems.approx(f.ptr, "not", f"an excluded {kind} value ('not' over 'enum'/'const'): "
                                                   f"no {kind} is allowed here")
                continue
            parts.append(build(f, depth))
        return alt(*parts)

    # -- any JSON value, bounded --------------------------------------------------------------------
    def any_value(self, r: int, depth: int) -> Node:
        if self.exact_recursion:
            return self._any_rule("value")
        key = (r, depth if self.pretty else 0)
        hit = self._any.get(key)
        if hit is not None:
            return hit
        scalars = alt(Lit("null"), Lit("true"), Lit("false"), number_node()[0], ANY_STRING_JSON)
        node = alt(scalars, self.any_object(r, depth), self.any_array(r, depth))
        self._any[key] = node
        return node

    def _any_rule(self, kind: str) -> Node:
        """With exact recursion: a ``Ref`` to the rule of any JSON value (object, array), nested to
        any depth (compact whitespace only, which exact recursion requires)."""
        key = ("any JSON", kind)
        if key not in self.rules:
            value = Ref(("any JSON", "value"))
            sep = self.sep(0)
            member = seq(ANY_STRING_JSON, self.colon(), value)
            obj = self.wrap("{", "}", seq(member, star(seq(sep, member))), True, 0)
            arr = self.wrap("[", "]", seq(value, star(seq(sep, value))), True, 0)
            scalars = alt(Lit("null"), Lit("true"), Lit("false"), number_node()[0], ANY_STRING_JSON)
            self.rules[("any JSON", "object")] = obj
            self.rules[("any JSON", "array")] = arr
            self.rules[("any JSON", "value")] = alt(scalars, Ref(("any JSON", "object")),
                                                      Ref(("any JSON", "array")))
        return Ref(key)

    def any_object(self, r: int, depth: int) -> Node:
        if self.exact_recursion:
            return self._any_rule("object")
        if r <= 0:
            return Lit("{}")
        member = seq(ANY_STRING_JSON, self.colon(), self.any_value(r - 1, depth + 1))
        content = seq(member, star(seq(self.sep(depth + 1), member)))
        return self.wrap("{", "}", content, True, depth)

    def any_array(self, r: int, depth: int) -> Node:
        if self.exact_recursion:
            return self._any_rule("array")
        if r <= 0:
            return Lit("[]")
        item = self.any_value(r - 1, depth + 1)
        content = seq(item, star(seq(self.sep(depth + 1), item)))
        return self.wrap("[", "]", content, True, depth)

    def note_any(self, ptr: str, kw: str, levels: int | None = None) -> None:
        """Report a value of any JSON (``levels`` of arrays and objects deep at most: ``any_depth``)."""
        if self.exact_recursion:
            return self.problems.ok(ptr, kw)
        levels = self.any_depth if levels is None else levels
        self.problems.approx(ptr, kw, f"any JSON value is allowed here, nested at most {levels} levels")

    # -- literals (enum, const) ------------------------------------------------------------------
    def literal(self, v, depth: int) -> Node:
        if v is None:
            return Lit("null")
        if v is True:
            return Lit("true")
        if v is False:
            return Lit("false")
        if isinstance(v, (int, float)):
            try:
                return number_literal(v, json.dumps(v))
            except (ValueError, OverflowError, NumberLimit):
                return Lit(json.dumps(v))
        if isinstance(v, str):
            return json_string_literal(v)
        if isinstance(v, list):
            if not v:
                return Lit("[]")
            items = [self.literal(x, depth + 1) for x in v]
            content = seq(items[0], *[seq(self.sep(depth + 1), x) for x in items[1:]])
            return self.wrap("[", "]", content, False, depth)
        if isinstance(v, dict):
            if not v:
                return Lit("{}")
            members = [seq(json_string_literal(k), self.colon(), self.literal(x, depth + 1)) for k, x in v.items()]
            content = seq(members[0], *[seq(self.sep(depth + 1), m) for m in members[1:]])
            return self.wrap("{", "}", content, False, depth)
        raise TypeError(f"not a JSON value: {v!r}")

    def accepts(self, f: Flat, v, shallow: bool = False) -> bool:
        """Does the value v satisfy f (its enum aside)? Never True for an invalid value. ``shallow``:
        an array's or object's parts are left to the caller."""
        try:
            t = type_atom(v)
        except TypeError:
            return False
        if t not in f.types:
            return False
        if any(json_eq(v, w) for w in f.not_enum):
            return False
        if t in NUMBER:
            q = to_fraction(v)
            if t == "integer" and "integer" not in f.types:
                return False
            if f.lo is not None and (q < f.lo or (f.lo_x and q == f.lo)):
                return False
            if f.hi is not None and (q > f.hi or (f.hi_x and q == f.hi)):
                return False
            if f.mult is not None and (q / f.mult).denominator != 1:
                return False
            if any((q / n).denominator == 1 for n in f.not_mult):
                return False
            return True
        if t == "string":
            n = len(v)
            if n < f.min_len or (f.max_len is not None and n > f.max_len):
                return False
            data = v.encode("utf-8", "surrogatepass")
            for p, ptr in f.patterns:
                try:
                    if not pattern_dfa(p).matches(data):
                        return False
                except PatternUnsupported as e:
                    self.problems.error(ptr.rsplit("/", 1)[0], "pattern", str(e))
                    return False
            for name, ptr in f.formats:
                if not format_dfa(name).matches(data):
                    return False
            for p, ptr in f.not_patterns:
                try:
                    if pattern_dfa(p).matches(data):
                        return False
                except PatternUnsupported as e:
                    self.problems.error(ptr.rsplit("/", 1)[0], "pattern", str(e))
                    return False
            return True
        if t in ("array", "object") and not f.unconstrained(t) and not shallow:
            return self._deep_accepts(f, v, t)
        return True

    def _deep_accepts(self, f: Flat, v, t: str, depth: int = 0) -> bool:
        """Does the array or object v satisfy f? Checked part by part, each value against the flats of
        the subschemas that apply to it (so an object's keys may come in any order, as in JSON). A
        check past ``MAX_CHECK_DEPTH`` levels says no (a subset)."""
        if depth > MAX_CHECK_DEPTH:
            return False
        if t == "array":
            if len(v) < f.min_items or (f.max_items is not None and len(v) > f.max_items):
                return False
            for i, x in enumerate(v):
                if not self._subs_accept(f.prefix[i] if i < len(f.prefix) else f.items, x, depth):
                    return False
            if f.unique is not None and any(json_eq(v[i], v[j]) for i in range(len(v)) for j in range(i)):
                return False
            for sub, lo, hi, _ in f.contains:
                n = sum(self._subs_accept([sub], x, depth) for x in v)
                if n < lo or (hi is not None and n > hi):
                    return False
            return True
        if len(v) < f.min_props or (f.max_props is not None and len(v) > f.max_props):
            return False
        if any(name not in v for name in f.required):
            return False
        if f.prop_names:
            name_flats = self.fl._conj_subs(f.prop_names)
            if not all(any(self._name_ok(nf, k) for nf in name_flats) for k in v):
                return False
        g = f
        if not f.has_additional and self.strict and (f.props or f.patprops or f.required):
            g = f.copy()  # (as ``object`` compiles it: strict closes an object that lists properties)
            g.additional = [FALSE]
            if f.groups is not None:
                g.groups = f.groups + [(patterns_only(f.groups), [FALSE])]
        return all(self._subs_accept(self.fl.schema_for(g, k), x, depth) for k, x in v.items())

    def _subs_accept(self, subs: list, v, depth: int) -> bool:
        """Does v satisfy the conjunction of ``subs`` (as this compiler reads them)?"""
        if not subs:
            return True
        for g in self.fl._conj_subs(subs):
            if g.enum is not None and not any(json_eq(v, w) for w in g.enum):
                continue
            t = type_atom(v)
            if t in ("array", "object") and t in g.types and not g.unconstrained(t):
                if self.accepts(g, v, shallow=True) and self._deep_accepts(g, v, t, depth + 1):
                    return True
            elif self.accepts(g, v):
                return True
        return False

    # -- numbers ------------------------------------------------------------------------------------
    def number(self, f: Flat) -> Node:
        integer = "nonint" not in f.types
        nonint = "integer" not in f.types
        holes = sorted({to_fraction(v) for v in f.not_enum
                        if isinstance(v, (int, float)) and not isinstance(v, bool)})
        bounds = []
        for h in holes:
            if (f.lo is None or h > f.lo or (h == f.lo and not f.lo_x)) and \
               (f.hi is None or h < f.hi or (h == f.hi and not f.hi_x)):
                bounds.append(h)
        parts = []
        lo, lo_x = f.lo, f.lo_x
        for h in bounds:
            parts.append((lo, lo_x, h, True))
            lo, lo_x = h, True
        parts.append((lo, lo_x, f.hi, f.hi_x))
        out = []
        for a, ax, b, bx in parts:
            try:
                node, note = number_node(a, ax, b, bx, integer=integer, multiple_of=f.mult, nonint=nonint,
                                         not_multiples=f.not_mult)
            except NumberLimit as e:
                self.problems.error(f.ptr, "multipleOf", str(e))
                return EMPTY
            if note:
                self.problems.approx(f.ptr, "multipleOf", note)
            out.append(node)
        return alt(*out)

    # -- strings --------------------------------------------------------------------------------
    def raw_string(self, f: Flat) -> Node:
        """The characters of the strings ``f`` allows (values of other types left out)."""
        if f.enum is not None:
            return alt(*[Lit(v) for v in f.enum if isinstance(v, str) and self.accepts(f, v)])
        return self.string_content(f) if "string" in f.types else EMPTY

    def string(self, f: Flat) -> Node:
        content = self.string_content(f)
        if content is EMPTY:
            return EMPTY
        return seq(Lit('"'), encode_content(content), Lit('"'))

    def string_content(self, f: Flat, what: str = "string") -> Node:
        if f.max_len is not None and f.max_len > self.max_length and f.min_len <= self.max_length:
            self.problems.approx(f.ptr, "maxLength", f"maxLength {f.max_len} is tracked up to {self.max_length} "
                                                     "characters: longer strings are rejected")
            f = f.copy()
            f.max_len = self.max_length
        langs = []
        for p, ptr in f.patterns:
            try:
                langs.append((pattern_node(p), ptr))
            except LookaheadsTooLarge as e:
                if self.fl.loose:
                    self.problems.loosen(ptr.rsplit("/", 1)[0], "pattern", f"{e}: they are not enforced")
                    langs.append((pattern_node(p, lookaheads=False), ptr))
                    continue
                self.problems.approx(ptr.rsplit("/", 1)[0], "pattern", f"{e}: strings are rejected here")
                self.problems.loosenable += 1
                return EMPTY
            except PatternUnsupported as e:
                self.problems.error(ptr.rsplit("/", 1)[0], "pattern", str(e))
                return EMPTY
        for name, ptr in f.formats:
            langs.append((format_node(name), ptr))
        words = [w for w in f.not_enum if isinstance(w, str)]
        lengths_done = False
        # one language inside all the others is their intersection; else the automata's product
        smallest = self.smallest_lang(langs) if langs and not f.not_patterns else None
        if smallest is not None:
            langs = [smallest]
        elif f.not_patterns or len(langs) > 1:
            node = self.string_difference(langs, f)
            if node is EMPTY:
                return EMPTY
            langs, lengths_done = [(node, f.ptr)], True
        if not langs:
            if words:
                node = not_in_strings(words, ANY_CHAR_RANGES, f.min_len)
                node, exact = restrict_length(node, f.min_len, f.max_len)
                if not exact:
                    self.problems.approx(f.ptr, "maxLength", "length bound approximated")
                return node
            return rep(cls(ANY_CHAR_RANGES), f.min_len, f.max_len)
        node = langs[0][0]
        if (f.min_len or f.max_len is not None) and not lengths_done:
            node, exact = restrict_length(node, f.min_len, f.max_len)
            if not exact:
                self.problems.approx(f.ptr, "maxLength" if f.max_len is not None else "minLength",
                                     "length bounds combined with a pattern or format: only a subset of the "
                                     "matching strings is allowed")
        if words:
            dfa = ast_to_dfa(node)
            bad = [w for w in words if dfa.matches(w.encode("utf-8", "surrogatepass"))]
            if bad:
                longest = max(len(w) for w in bad)
                node, _ = restrict_length(node, longest + 1, None)
                self.problems.approx(f.ptr, "not", "excluded strings: only longer strings are allowed")
        return node

    def string_difference(self, langs: list, f: Flat) -> Node:
        """The strings every language of ``langs`` holds, no pattern of ``f.not_patterns`` matches,
        and of a length within ``f``'s bounds, built as automata (a product) and written back as a
        regex; EMPTY (reported) when that regex would be too large, or a pattern is not supported."""
        try:
            negs = [pattern_dfa(p) for p, _ in f.not_patterns]
        except PatternUnsupported as e:
            self.problems.error(f.not_patterns[0][1].rsplit("/", 1)[0], "not", str(e))
            return EMPTY
        parts = [ast_to_dfa(n) for n, _ in langs] + negs + [_any_key_dfa()]
        if f.min_len or f.max_len is not None:
            parts.append(ast_to_dfa(rep(cls(ANY_CHAR_RANGES), f.min_len, f.max_len)))
        k, n_neg = len(langs), len(negs)
        node = _written(parts, lambda flags: flags[:, k + n_neg:].all(axis=1) & flags[:, :k].all(axis=1) &
                        ~flags[:, k:k + n_neg].any(axis=1))
        if node is None:
            ptrs = ", ".join([p for _, p in langs] + [p for _, p in f.not_patterns])
            if self.fl.loose:
                node = self.loose_difference(langs, f, parts, ptrs)
                if node is not None:
                    return node
            self.problems.approx(f.ptr, "pattern", f"patterns/formats on one string ({ptrs}): the strings they "
                                                   "leave are too many to write as a regex, and are rejected")
            self.problems.loosenable += 1
            return EMPTY
        return node

    def loose_difference(self, langs: list, f: Flat, parts: list, ptrs: str) -> Node | None:
        """A superset of ``string_difference``'s strings that is small enough to write (each part
        left out reported as loosened): the patterns and lengths without the negated patterns, else
        the smallest of them alone; None when neither fits."""
        k, n_neg = len(langs), len(f.not_patterns)
        any_key, lengths = parts[k + n_neg], parts[k + n_neg + 1:]
        positive = parts[:k] + lengths
        tries = [positive] if n_neg and positive else []
        tries.append([min(positive, key=lambda d: d.n_states)] if positive else [])
        for kept in tries:
            node = _written(kept + [any_key], lambda flags: flags.all(axis=1))
            if node is None:
                continue
            also = ""
            if lengths and not any(lengths[0] is x for x in kept):
                also = " (nor the string's length bounds)"
                for kw in ("minLength", "maxLength"):
                    if (f.min_len if kw == "minLength" else f.max_len is not None):
                        self.problems.loosen(f.ptr, kw, f"patterns/formats on one string ({ptrs}): the strings they "
                                                        "leave are too many to write as a regex: the length "
                                                        "bounds are not enforced")
            for (_, ptr), d in zip(langs + f.not_patterns, parts):
                if not any(d is x for x in kept):
                    where, kw = ptr.rsplit("/", 1)
                    self.problems.loosen(where, kw, f"patterns/formats on one string ({ptrs}): the strings they "
                                                    f"leave are too many to write as a regex: this one is not "
                                                    f"enforced{also}")
            return node
        return None

    @staticmethod
    def smallest_lang(langs: list):
        """The one of ``langs`` inside all the others (their intersection), or None."""
        if len(langs) == 1:
            return langs[0]
        dfas = [ast_to_dfa(n) for n, _ in langs]
        keep = []
        for i, d in enumerate(dfas):
            if not any(j != i and _subset(dfas[j], d) and (j < i or not _subset(d, dfas[j]))
                       for j in range(len(dfas))):
                keep.append(i)
        return langs[keep[0]] if len(keep) == 1 else None


def _memo_key(sub, via_ref: bool = False) -> tuple:
    """What ``sub``'s language depends on, but ``Sub.refs``; ``via_ref``: reached by a bare ``$ref``."""
    return (id(sub.schema), sub.ptr, sub.base, sub.draft) + (("$ref",) if via_ref else ())


def _subset(a, b) -> bool:
    """L(a) ⊆ L(b) for byte DFAs."""
    return not product_walk(a, b, lambda x, y: a.accepting[x] and (y < 0 or not b.accepting[y]), partial=True)


def _written(parts: list, keep) -> Node | None:
    """The regex of the strings that take ``parts`` (byte DFAs run side by side) to states whose
    accepting flags ``keep(flags)`` selects (a bool per row), or None when their product passes
    ``MAX_DIFFERENCE_PRODUCT`` states or its minimal automaton ``MAX_DIFFERENCE_STATES``."""
    from ..automaton import minimize, product
    from ..automaton.dfa import TooManyStates
    from ..regex.dfa_ast import dfa_to_node

    try:
        trans, flags = product(parts, max_states=MAX_DIFFERENCE_PRODUCT)
    except TooManyStates:
        return None
    region = minimize(trans, keep(flags))
    # (state elimination is cubic in the states, and its regex can grow as fast)
    return dfa_to_node(region) if region.n_states <= MAX_DIFFERENCE_STATES else None


MAX_DIFFERENCE_STATES = 256  # the largest automaton of a string's patterns written back as a regex
MAX_DIFFERENCE_PRODUCT = 4_096  # the states of their product, before it is minimized
