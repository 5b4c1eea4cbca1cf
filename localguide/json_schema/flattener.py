"""The ``Flattener``: a schema's in-place applicators resolved into a union of ``Flat`` conjunctions.

``$ref``, ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else`` and dependencies
become a list of ``flat.Flat`` objects whose union is the schema's language, or a subset of it
(a note in ``Problems`` says why); never a superset.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from urllib.parse import urldefrag, urljoin

from .numbers import lcm_fraction, to_fraction
from .resolve import Dnf, Neg, Registry, ResolveError, Sub, escape
from ..automaton import product_walk
from .strings import (FORMAT_NOTES, UNSUPPORTED_FORMATS, PatternUnsupported, format_dfa, pattern_dfa, format_node,
                      pattern_matches, split_lookaheads)
from .flat import (
    ALL_TYPES, ANNOTATIONS, FALSE, MAX_BRANCHES, NUMBER, VALIDATION, _TYPE_ATOMS, Flat, FromNegation, Problems,
    _Trial, json_eq, merge, patterns_only, type_atom,
)


# The values a keyword can reject: where a loose compile leaves its negation unenforced, the
# complement is widened to these values only. (Not ``unevaluated*``: what they reject depends on
# the whole schema's annotations, and a superset of it would admit what the suite says it must not.)
MAX_NEGATED_ONE_OF = 4  # alternatives of a oneOf negated exactly (none, or a pair: the work grows with the square)
_OBJECT = frozenset({"object"})
_KEYWORD_TYPES = {"patternProperties": _OBJECT, "additionalProperties": _OBJECT, "propertyNames": _OBJECT,
                  "dependentSchemas": _OBJECT, "dependencies": _OBJECT, "minProperties": _OBJECT,
                  "items": frozenset({"array"}), "prefixItems": frozenset({"array"}),
                  "additionalItems": frozenset({"array"}), "contains": frozenset({"array"}),
                  "maxContains": frozenset({"array"}), "uniqueItems": frozenset({"array"}),
                  "pattern": frozenset({"string"}), "format": frozenset({"string"}),
                  "multipleOf": NUMBER}


class Flattener:
    def __init__(self, registry: Registry, problems: Problems, max_recursion: int = 3):
        self.registry = registry
        self.problems = problems
        self.max_recursion = max_recursion
        # $ref targets followed, one set per open ``Compiler.value`` (which memoizes with them)
        self.followed: list[set] = []
        # property names the schemas around a negation give (``hinted``): the keys tried where a
        # negated additionalProperties or patternProperties asks for some key
        self.key_hints: tuple = ()
        # a negation with no complement here keeps every value (a superset) instead of none: the
        # second compile of a schema whose subset accepted no document (``schema.schema_to_ast``)
        self.loose = False

    # -- helpers --------------------------------------------------------------------------
    def schema_for(self, f: Flat, name: str) -> list:
        """The conjunction of subschemas that ``f`` applies to the value of property ``name``."""
        if name in f.props:
            out = list(f.props[name])
            if f.groups is None:  # (a merged flat's props hold every part's patterns already)
                for p, ptr, subs in f.patprops:
                    if self.pattern_match(p, ptr, name):
                        out += subs
            return out
        return self.unlisted(f.key_groups(), name)

    def unlisted(self, groups: list, name: str) -> list:
        """What ``groups`` (``Flat.groups``) apply to the value of a property no part lists."""
        out = []
        for patprops, additional in groups:
            matched = False
            for p, ptr, subs in patprops:
                if self.pattern_match(p, ptr, name):
                    out += subs
                    matched = True
            if not matched:
                out += additional
        return out

    def pattern_match(self, pattern: str, ptr: str, text: str) -> bool:
        try:
            return pattern_matches(pattern, text)
        except PatternUnsupported as e:
            self.problems.error(ptr, "patternProperties", str(e))
            return False

    def conj(self, xs: list, ys: list, ptr: str = "", kw: str = "allOf") -> list:
        out = []
        for x in xs:
            for y in ys:
                m = merge(x, y, self)
                if m is not None:
                    out.append(m)
        if len(out) > MAX_BRANCHES:
            if self.loose and len(xs) <= MAX_BRANCHES:
                # (``xs`` alone is a superset of the conjunction)
                self.problems.loosen(ptr, kw, f"more than {MAX_BRANCHES} alternatives after expansion: this "
                                              "part is not enforced (the subset accepted no document)")
                return xs
            self.problems.approx(ptr, kw, f"more than {MAX_BRANCHES} alternatives after expansion: "
                                          f"only the first {MAX_BRANCHES} are kept")
            self.problems.loosenable += 1
            out = out[:MAX_BRANCHES]
        return out

    # -- the main entry ---------------------------------------------------------------------------
    def rebase(self, sub: Sub) -> Sub:
        """``sub`` with the base URI its own ``$id`` sets."""
        s = sub.schema
        if isinstance(s, dict):
            own = s.get("$id") if sub.draft >= 6 else s.get("id")
            if isinstance(own, str) and not (sub.draft < 2019 and own.startswith("#")) and \
                    not (sub.draft < 2019 and "$ref" in s):
                base = urldefrag(urljoin(sub.base, own))[0]
                if base != sub.base:
                    return replace(sub, base=base)
        return sub

    def dnf(self, sub: Sub, inplace: frozenset = frozenset()) -> list:
        sub = self.rebase(sub)
        s = sub.schema
        if isinstance(s, Neg):
            return self.negate(s.sub, inplace)
        if isinstance(s, Dnf):
            return s.flats
        if s is True:
            return [Flat(sub.ptr)]
        if s is False:
            return []
        if not isinstance(s, dict):
            self.problems.error(sub.ptr, "", f"a schema must be an object or a boolean, not {type(s).__name__}")
            return []
        f = Flat(sub.ptr)
        self.keywords(sub, f)
        out = [f]
        if "$ref" in s:
            target = self.follow_ref(sub, "$ref", s["$ref"])
            if sub.draft < 2019:
                out = [Flat(sub.ptr)]  # siblings of $ref are ignored in drafts 4-7
            if target is None:
                return []
            if target.ptr in inplace:
                self.problems.error(sub.ptr, "$ref", "a $ref cycle that never reaches a value")
                return []
            out = self.conj(out, self.dnf(target, inplace | {target.ptr}), sub.ptr, "$ref")
            if sub.draft < 2019:
                return out
        for kw in ("$dynamicRef", "$recursiveRef"):
            if kw in s:
                self.problems.error(sub.ptr, kw, "dynamic references are not supported")
                return []
        if "allOf" in s:
            for i, part in enumerate(self.schema_list(sub, "allOf")):
                out = self.conj(out, self.dnf(part, inplace), sub.ptr, "allOf")
        if "anyOf" in s:
            union = []
            for part in self.schema_list(sub, "anyOf"):
                union += self.dnf(part, inplace)
            out = self.conj(out, union, sub.ptr, "anyOf")
        if "oneOf" in s:
            out = self.conj(out, self.one_of(sub, self.schema_list(sub, "oneOf"), inplace), sub.ptr, "oneOf")
        if "not" in s:
            self.problems.ok(sub.ptr, "not")
            negs = self.hinted(out, lambda: self.negate(sub.child(s["not"], "not"), inplace))
            out = self.conj(out, negs, sub.ptr, "not")
        if "if" in s:
            out = self.if_then_else(sub, out, inplace)
        elif "then" in s or "else" in s:
            for kw in ("then", "else"):
                if kw in s:
                    self.problems.ok(sub.ptr, kw, "annotation")
        for kw in ("dependentRequired", "dependentSchemas", "dependencies"):
            if kw in s and isinstance(s[kw], dict):
                out = self.dependencies(sub, kw, out, inplace)
        if "unevaluatedProperties" in s:
            u = [sub.child(s["unevaluatedProperties"], "unevaluatedProperties")]
            self.problems.ok(sub.ptr, "unevaluatedProperties")
            for f in out:
                for name in f.noeval:
                    f.props[name] = f.props[name] + u
                f.noeval = set()
                if not f.has_additional:
                    if f.groups is not None:  # (keys that no part's pattern matches: see Flat.groups)
                        f.groups = f.groups + [(patterns_only(f.groups), u)]
                    f.additional = f.additional + u
                    f.has_additional = True
        if "unevaluatedItems" in s:
            u = [sub.child(s["unevaluatedItems"], "unevaluatedItems")]
            self.problems.ok(sub.ptr, "unevaluatedItems")
            for f in out:
                if f.noeval_items:
                    self.problems.error(sub.ptr, "unevaluatedItems", "unevaluatedItems with items under 'not' "
                                                                     "is not supported")
                    return []
                if not f.has_items:
                    f.items = f.items + u
                    f.has_items = True
                    f.uneval_items = True
        return out

    def follow_ref(self, sub: Sub, kw: str, ref) -> Sub | None:
        if not isinstance(ref, str):
            self.problems.error(sub.ptr, kw, "$ref must be a string")
            return None
        try:
            target = self.registry.resolve(sub, ref)
        except ResolveError as e:
            self.problems.error(sub.ptr, kw, str(e))
            return None
        if self.followed:
            self.followed[-1].add(target.ptr)
        depth = sub.refs.count(target.ptr)
        if depth >= self.max_recursion:
            self.problems.approx(sub.ptr, kw, f"recursive reference expanded {self.max_recursion} levels deep; "
                                              "deeper documents are rejected")
            return Sub(False, target.ptr, target.base, target.draft, target.refs)
        self.problems.ok(sub.ptr, kw)
        return replace(target, refs=sub.refs + (target.ptr,))

    def schema_list(self, sub: Sub, kw: str) -> list:
        v = sub.schema[kw]
        if not isinstance(v, list) or not v:
            self.problems.error(sub.ptr, kw, f"{kw} must be a non-empty array of schemas")
            return []
        self.problems.ok(sub.ptr, kw)
        return [sub.child(x, kw, i) for i, x in enumerate(v)]

    # -- plain keywords -------------------------------------------------------------------------
    def keywords(self, sub: Sub, f: Flat) -> None:
        s = sub.schema
        P = self.problems
        ptr = sub.ptr
        draft = sub.draft
        for kw, v in s.items():
            if kw in ANNOTATIONS:
                P.ok(ptr, kw, "annotation")
                continue
            if kw not in VALIDATION:
                P.ok(ptr, kw, "annotation")  # unknown keywords are annotations
                continue
            try:
                self.keyword(sub, f, kw, v, draft)
            except (TypeError, ValueError, OverflowError) as e:
                P.error(ptr, kw, f"invalid value {json.dumps(v)[:60]} ({e})")

    def keyword(self, sub: Sub, f: Flat, kw: str, v, draft: int) -> None:
        s = sub.schema
        P = self.problems
        ptr = sub.ptr
        if kw == "type":
            names = v if isinstance(v, list) else [v]
            atoms = set()
            for t in names:
                if t not in _TYPE_ATOMS:
                    raise ValueError(f"unknown type {t!r}")
                atoms |= _TYPE_ATOMS[t]
            f.types = f.types & frozenset(atoms)
        elif kw == "enum":
            if not isinstance(v, list):
                raise TypeError("enum must be an array")
            f.enum = list(v) if f.enum is None else [x for x in f.enum if any(json_eq(x, y) for y in v)]
        elif kw == "const":
            f.enum = [v] if f.enum is None else [x for x in f.enum if json_eq(x, v)]
        elif kw in ("minimum", "exclusiveMinimum"):
            if isinstance(v, bool):  # draft 4: a flag on minimum
                if kw == "exclusiveMinimum" and v and "minimum" in s:
                    f.lo_x = f.lo_x or to_fraction(s["minimum"]) == f.lo
                P.ok(ptr, kw)
                return
            q = to_fraction(v)
            x = kw == "exclusiveMinimum" or (draft == 4 and s.get("exclusiveMinimum") is True)
            if f.lo is None or q > f.lo or (q == f.lo and x):
                f.lo, f.lo_x = q, x
        elif kw in ("maximum", "exclusiveMaximum"):
            if isinstance(v, bool):
                if kw == "exclusiveMaximum" and v and "maximum" in s:
                    f.hi_x = f.hi_x or to_fraction(s["maximum"]) == f.hi
                P.ok(ptr, kw)
                return
            q = to_fraction(v)
            x = kw == "exclusiveMaximum" or (draft == 4 and s.get("exclusiveMaximum") is True)
            if f.hi is None or q < f.hi or (q == f.hi and x):
                f.hi, f.hi_x = q, x
        elif kw == "multipleOf":
            q = to_fraction(v)
            if q <= 0:
                raise ValueError("multipleOf must be positive")
            f.mult = q if f.mult is None else lcm_fraction(f.mult, q)
        elif kw == "minLength":
            f.min_len = max(f.min_len, _count(v, MAX_MIN_COUNT))
        elif kw == "maxLength":
            f.max_len = _count(v) if f.max_len is None else min(f.max_len, _count(v))
        elif kw == "pattern":
            if not isinstance(v, str):
                raise TypeError("pattern must be a string")
            split = split_lookaheads(v)
            if split is None:
                f.patterns.append((v, ptr + "/pattern"))
            else:
                f.patterns += [(x, ptr + "/pattern") for x in split[0]]
                f.not_patterns += [(x, ptr + "/pattern") for x in split[1]]
        elif kw == "format":
            if not isinstance(v, str):
                raise TypeError("format must be a string")
            if v in UNSUPPORTED_FORMATS:
                P.error(ptr, kw, f"format {v!r} is not supported (not a regular language here)")
                return
            try:
                known = format_node(v) is not None
            except PatternUnsupported as e:
                P.error(ptr, kw, str(e))
                return
            if known:
                f.formats.append((v, ptr + "/format"))
                if v in FORMAT_NOTES:
                    P.approx(ptr, kw, f"format {v!r}: {FORMAT_NOTES[v]}")
            else:
                P.ok(ptr, kw, "annotation")  # a format the specification does not define
                return
        elif kw == "items":
            if isinstance(v, list):
                if draft >= 2020:
                    raise TypeError("items must be a schema (use prefixItems for a tuple)")
                f.prefix = [[sub.child(x, kw, i)] for i, x in enumerate(v)]
                add = s.get("additionalItems")
                f.items = [sub.child(add, "additionalItems")] if add is not None else []
                f.has_items = "additionalItems" in s
            else:
                f.items = [sub.child(v, kw)]
                f.has_items = True
        elif kw == "prefixItems":
            if not isinstance(v, list):
                raise TypeError("prefixItems must be an array of schemas")
            f.prefix = [[sub.child(x, kw, i)] for i, x in enumerate(v)]
        elif kw == "additionalItems":
            if draft >= 2020 or not isinstance(s.get("items"), list):
                P.ok(ptr, kw, "annotation")  # no effect without a tuple 'items'
                return
        elif kw == "minItems":
            f.min_items = max(f.min_items, _count(v, MAX_MIN_COUNT))
        elif kw == "maxItems":
            f.max_items = _count(v) if f.max_items is None else min(f.max_items, _count(v))
        elif kw == "uniqueItems":
            if v is True:
                f.unique = ptr
            elif v is not False:
                raise TypeError("uniqueItems must be a boolean")
        elif kw == "contains":
            lo = s.get("minContains", 1)
            hi = s.get("maxContains")
            f.contains.append((sub.child(v, kw), _count(lo), None if hi is None else _count(hi), ptr))
        elif kw in ("minContains", "maxContains"):
            if "contains" not in s:
                P.ok(ptr, kw, "annotation")
                return
        elif kw == "properties":
            if not isinstance(v, dict):
                raise TypeError("properties must be an object")
            for name, x in v.items():
                f.props[name] = f.props.get(name, []) + [sub.child(x, kw, name)]
        elif kw == "required":
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise TypeError("required must be an array of strings")
            if draft == 3:
                raise TypeError("draft 3 'required' is not supported")
            for name in v:
                if name not in f.required:
                    f.required.append(name)
        elif kw == "additionalProperties":
            f.additional = f.additional + [sub.child(v, kw)]
            f.has_additional = True
        elif kw == "patternProperties":
            if not isinstance(v, dict):
                raise TypeError("patternProperties must be an object")
            for p, x in v.items():
                f.patprops.append((p, ptr + "/patternProperties/" + escape(p), [sub.child(x, kw, p)]))
        elif kw == "minProperties":
            f.min_props = max(f.min_props, _count(v))
        elif kw == "maxProperties":
            f.max_props = _count(v) if f.max_props is None else min(f.max_props, _count(v))
        elif kw == "propertyNames":
            f.prop_names.append(sub.child(v, kw))
        elif kw in ("$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentRequired",
                    "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems",
                    "$dynamicRef", "$recursiveRef"):
            return  # handled by dnf()
        P.ok(ptr, kw)

    # -- applicators ------------------------------------------------------------------------------
    def one_of(self, sub: Sub, parts: list, inplace) -> list:
        dnfs = [self.dnf(p, inplace) for p in parts]
        if all(self.disjoint(dnfs[i], dnfs[j]) for i in range(len(parts)) for j in range(i + 1, len(parts))):
            return [f for d in dnfs for f in d]
        # exact: branch i and the negation of every other branch
        out = []
        self.problems.muted += 1
        try:
            negs = self.hinted([f for d in dnfs for f in d], lambda: [self.negate(p, inplace) for p in parts])
        except _Trial as e:
            negs = None
            reason = str(e)
        finally:
            self.problems.muted -= 1
        if negs is None:
            self.problems.error(sub.ptr, "oneOf", "the alternatives may overlap, and telling them apart needs "
                                                  f"the negation of one of them, which is not supported ({reason})")
            return []
        for i, d in enumerate(dnfs):
            branch = d
            for j, n in enumerate(negs):
                if j != i and branch:
                    branch = self.conj(branch, n, sub.ptr, "oneOf")
            out += branch
        return out

    def if_then_else(self, sub: Sub, out: list, inplace) -> list:
        s = sub.schema
        cond = sub.child(s["if"], "if")
        then = self.dnf(sub.child(s["then"], "then"), inplace) if "then" in s else [Flat(sub.ptr)]
        els = self.dnf(sub.child(s["else"], "else"), inplace) if "else" in s else [Flat(sub.ptr)]
        yes = self.conj(self.dnf(cond, inplace), then, sub.ptr, "if")
        self.problems.muted += 1
        try:
            no = self.hinted(out + then + els, lambda: self.negate(cond, inplace))
        except _Trial as e:
            self.problems.muted -= 1
            self.problems.error(sub.ptr, "if", f"the negation of 'if' is needed and not supported ({e})")
            return []
        self.problems.muted -= 1
        no = self.conj(no, els, sub.ptr, "if")
        for kw in ("if", "then", "else"):
            if kw in s:
                self.problems.ok(sub.ptr, kw)
        return self.conj(out, yes + no, sub.ptr, "if")

    def dependencies(self, sub: Sub, kw: str, out: list, inplace) -> list:
        v = sub.schema[kw]
        self.problems.ok(sub.ptr, kw)
        for name, dep in v.items():
            absent = Flat(sub.ptr)
            absent.types = frozenset({"object"})
            absent.props = {name: [FALSE]}
            absent.noeval = {name}
            present = Flat(sub.ptr)
            present.types = frozenset({"object"})
            present.required = [name]
            present.props = {name: []}
            present.noeval = {name}
            if isinstance(dep, list):
                if not all(isinstance(x, str) for x in dep):
                    self.problems.error(sub.ptr, kw, "dependencies must list property names")
                    return []
                for d in dep:
                    if d not in present.required:
                        present.required.append(d)
                        present.props.setdefault(d, [])
                        present.noeval.add(d)
                branch = [present]
            elif kw != "dependentRequired" and isinstance(dep, (dict, bool)):
                branch = self.conj([present], self.dnf(sub.child(dep, kw, name), inplace), sub.ptr, kw)
            else:
                self.problems.error(sub.ptr, kw, f"invalid dependency for {name!r}")
                return []
            non_object = Flat(sub.ptr)
            non_object.types = ALL_TYPES - {"object"}
            out = self.conj(out, [non_object, absent] + branch, sub.ptr, kw)
        return out

    # -- negation -----------------------------------------------------------------------------
    def negate(self, sub: Sub, inplace=frozenset()) -> list:
        """Flats whose union is the complement of ``sub``, or a subset of it where a keyword has no
        negation here (reported as an approximation): never a superset."""
        sub = self.rebase(sub)
        s = sub.schema
        P = self.problems
        if isinstance(s, Neg):
            return self.dnf(s.sub, inplace)
        if s is True:
            return []
        if s is False:
            return [Flat(sub.ptr)]
        if not isinstance(s, dict):
            P.error(sub.ptr, "not", "a schema must be an object or a boolean")
            return []
        out: list = []
        ptr = sub.ptr

        def flat(types):
            f = Flat(ptr)
            f.types = frozenset(types)
            return f

        others = lambda atoms: flat(ALL_TYPES - atoms)  # noqa: E731
        draft = sub.draft
        for kw, v in s.items():
            if kw in ANNOTATIONS or kw not in VALIDATION:
                continue
            if kw == "type":
                atoms = set()
                for t in (v if isinstance(v, list) else [v]):
                    atoms |= _TYPE_ATOMS.get(t, set())
                out.append(others(atoms))
            elif kw in ("enum", "const"):
                vals = v if kw == "enum" else [v]
                f = Flat(ptr)
                f.not_enum = list(vals)
                out.append(f)
            elif kw in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
                if isinstance(v, bool):
                    continue
                q = to_fraction(v)
                f = flat(NUMBER)
                if kw in ("minimum", "exclusiveMinimum"):
                    x = kw == "exclusiveMinimum" or (draft == 4 and s.get("exclusiveMinimum") is True)
                    f.hi, f.hi_x = q, not x
                else:
                    x = kw == "exclusiveMaximum" or (draft == 4 and s.get("exclusiveMaximum") is True)
                    f.lo, f.lo_x = q, not x
                out.append(f)
            elif kw in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"):
                n = _count(v)
                kind = {"L": "string", "I": "array", "P": "object"}[kw[3]]
                f = flat({kind})
                attr = {"string": ("min_len", "max_len"), "array": ("min_items", "max_items"),
                        "object": ("min_props", "max_props")}[kind]
                if kw.startswith("min"):
                    if n == 0:
                        continue  # always true: its negation adds nothing
                    setattr(f, attr[1], n - 1)
                else:
                    setattr(f, attr[0], n + 1)
                out.append(f)
            elif kw == "required":
                for name in v:
                    f = flat({"object"})
                    f.props = {name: [FALSE]}
                    f.noeval = {name}
                    out.append(f)
            elif kw == "properties":
                for name, x in v.items():
                    f = flat({"object"})
                    f.required = [name]
                    f.props = {name: [Sub(Neg(sub.child(x, kw, name)), f"{ptr}/{kw}/{escape(name)}", sub.base,
                                          sub.draft, sub.refs)]}
                    f.noeval = {name}
                    out.append(f)
            elif kw == "pattern" and isinstance(v, str):
                must, must_not = split_lookaheads(v) or ([v], [])
                for x in must:
                    f = flat({"string"})
                    f.not_patterns = [(x, f"{ptr}/pattern")]
                    out.append(f)
                for x in must_not:
                    f = flat({"string"})
                    f.patterns = [(x, f"{ptr}/pattern")]
                    out.append(f)
            elif kw == "multipleOf" and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 \
                    and math.isfinite(v) and to_fraction(v).denominator == 1:
                f = flat(NUMBER)
                f.not_mult = [int(v)]
                out.append(f)
            elif kw == "uniqueItems" and v is False:
                continue
            elif kw in ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems",
                        "propertyNames", "additionalItems") and v is True:
                continue
            elif kw == "$ref":
                target = self.follow_ref(sub, kw, v)
                if target is None:
                    return []
                if target.ptr in inplace:
                    P.error(ptr, kw, "a $ref cycle that never reaches a value")
                    return []
                out += self.negate(target, inplace | {target.ptr})
                if draft < 2019:
                    return out
            elif kw == "allOf":
                for part in self.schema_list(sub, kw):
                    out += self.negate(part, inplace)
            elif kw == "anyOf":
                acc = [Flat(ptr)]
                for part in self.schema_list(sub, kw):
                    acc = self.conj(acc, self.negate(part, inplace), ptr, "not")
                out += acc
            elif kw == "not":
                out += self.dnf(sub.child(v, "not"), inplace)
            elif kw in ("then", "else"):
                continue  # (with 'if', below; alone they assert nothing)
            elif kw == "if":
                # fails: the condition holds and 'then' fails, or it does not and 'else' fails
                if "then" in s:
                    out += self.conj(self.dnf(sub.child(v, "if"), inplace),
                                     self.negate(sub.child(s["then"], "then"), inplace), ptr, "not")
                if "else" in s:
                    out += self.conj(self.negate(sub.child(v, "if"), inplace),
                                     self.negate(sub.child(s["else"], "else"), inplace), ptr, "not")
            elif kw == "oneOf" and isinstance(v, list) and 0 < len(v) <= MAX_NEGATED_ONE_OF:
                # fails: no alternative holds, or two do
                parts = self.schema_list(sub, kw)
                acc = [Flat(ptr)]
                for part in parts:
                    acc = self.conj(acc, self.negate(part, inplace), ptr, "not")
                out += acc
                dnfs = [self.dnf(part, inplace) for part in parts]
                for i in range(len(dnfs)):
                    for j in range(i + 1, len(dnfs)):
                        if not self.disjoint(dnfs[i], dnfs[j]):
                            out += self.conj(dnfs[i], dnfs[j], ptr, "not")
            elif kw in ("dependentRequired", "dependentSchemas", "dependencies") and isinstance(v, dict):
                # fails: a named property is present and what it asks for fails
                for name, dep in v.items():
                    if isinstance(dep, list):
                        for d in dep:
                            if isinstance(d, str) and d != name:
                                f = flat({"object"})
                                f.required = [name]
                                f.props = {name: [], d: [FALSE]}
                                f.noeval = {name, d}
                                out.append(f)
                    elif kw != "dependentRequired" and isinstance(dep, (dict, bool)):
                        f = flat({"object"})
                        f.required = [name]
                        f.props = {name: []}
                        f.noeval = {name}
                        out += self.conj([f], self.negate(sub.child(dep, kw, name), inplace), ptr, "not")
            elif kw in ("minContains", "maxContains") and ("contains" not in s or "maxContains" not in s):
                continue  # (with 'contains'; alone they assert nothing)
            elif kw == "contains" and "maxContains" not in s:
                # fails: fewer than minContains items match
                lo = s.get("minContains", 1)
                if isinstance(lo, bool) or not isinstance(lo, (int, float)) or lo < 1:
                    continue
                f = flat({"array"})
                if lo == 1:
                    f.items = [Sub(Neg(sub.child(v, kw)), f"{ptr}/{kw}", sub.base, sub.draft, sub.refs)]
                    f.has_items = True
                else:
                    f.contains = [(sub.child(v, kw), 0, _count(lo) - 1, FromNegation(ptr))]
                out.append(f)
            elif kw == "items" and isinstance(v, (dict, bool)) and v is not True and \
                    (draft < 2020 or "prefixItems" not in s):
                # fails: some item fails it
                f = flat({"array"})
                f.contains = [(Sub(Neg(sub.child(v, kw)), f"{ptr}/{kw}", sub.base, sub.draft, sub.refs), 1, None,
                               FromNegation(ptr))]
                out.append(f)
            elif kw == "propertyNames" and (names := self._failing_names(sub.child(v, kw), inplace)) is not None:
                # fails: a key is one of the names that fail it (when they are few)
                for name in names:
                    f = flat({"object"})
                    f.required = [name]
                    f.props = {name: []}
                    f.noeval = {name}
                    out.append(f)
            elif kw in ("additionalProperties", "patternProperties") and self.key_hints and \
                    isinstance(v, (bool, dict)):
                out += self._negate_keys(sub, kw, v)
            elif self.loose and kw in _KEYWORD_TYPES:
                P.loosen(ptr, kw, f"'not' (or 'oneOf'/'if') over {kw!r} is loosened: it is not enforced, so a "
                                  f"value it rejects may be accepted (the subset accepted no document)")
                out.append(flat(_KEYWORD_TYPES[kw]))
            else:
                # The complement of a conjunction is the union of its keywords' complements: leaving
                # one out keeps a subset of it, so nothing invalid is ever allowed.
                P.approx(ptr, kw, f"'not' (or 'oneOf'/'if') over {kw!r} is approximated: a value that "
                                  f"fails only {kw!r} is rejected here")
                P.loosenable += 1
        for f in out:
            f.noeval |= set(f.props)
            if f.prefix or f.items:
                f.noeval_items = True
        if len(out) > MAX_BRANCHES:
            P.approx(ptr, "not", f"more than {MAX_BRANCHES} alternatives: only the first are kept")
            out = out[:MAX_BRANCHES]
        return out

    def _failing_names(self, sub: Sub, inplace) -> list | None:
        """The strings that fail ``sub`` when they are a finite list with no other condition
        (``propertyNames: {not: {enum: [...]}}``), else None."""
        names = []
        muted = self.problems.muted
        self.problems.muted += 1
        try:
            flats = self.negate(sub, inplace)
        except _Trial:
            return None
        finally:
            self.problems.muted = muted
        for f in flats:
            if "string" not in f.types:
                continue
            if f.enum is None or f.patterns or f.not_patterns or f.formats or f.min_len or f.max_len is not None:
                return None
            names += [x for x in f.enum if isinstance(x, str) and x not in names
                      and not any(json_eq(x, w) for w in f.not_enum)]
        return names

    def _negate_keys(self, sub: Sub, kw: str, v) -> list:
        """The complement of ``additionalProperties`` (a key no property or pattern lists, whose
        value fails it) or ``patternProperties`` (a key a pattern matches, whose value fails its
        schema), for the keys in ``key_hints`` only: the names the schemas around this one give
        (the other alternatives of a oneOf, the rest of a schema with 'not'). Any other key could
        be the one, so this is a subset of the complement, reported as such."""
        s, ptr = sub.schema, sub.ptr
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        pats = s.get("patternProperties") if isinstance(s.get("patternProperties"), dict) else {}
        out = []

        def present(name: str, bad: Sub) -> None:
            f = Flat(ptr)
            f.types = frozenset({"object"})
            f.required = [name]
            f.props = {name: [Sub(Neg(bad), bad.ptr, sub.base, sub.draft, sub.refs)]}
            f.noeval = {name}
            out.append(f)

        if kw == "additionalProperties":
            for name in self.key_hints:
                if name not in props and not any(
                        self.pattern_match(p, f"{ptr}/patternProperties/{escape(p)}", name) for p in pats):
                    present(name, sub.child(v, kw))
        else:
            for p, x in (v.items() if isinstance(v, dict) else ()):
                for name in self.key_hints:
                    if self.pattern_match(p, f"{ptr}/{kw}/{escape(p)}", name):
                        present(name, sub.child(x, kw, p))
        if self.loose:
            self.problems.loosen(ptr, kw, f"'not' (or 'oneOf'/'if') over {kw!r} is loosened: it is not enforced, "
                                          "so a value it rejects may be accepted (the subset accepted no document)")
            f = Flat(ptr)
            f.types = frozenset({"object"})
            return [f]
        self.problems.loosenable += 1
        shown = ", ".join(repr(k) for k in self.key_hints[:6]) + (" ..." if len(self.key_hints) > 6 else "")
        self.problems.approx(ptr, kw, f"'not' (or 'oneOf'/'if') over {kw!r} is approximated: of the keys that "
                                      f"could fail it, only those named beside it ({shown}) are tried")
        return out

    def hinted(self, flats: list, make):
        """``make()`` with the property names of ``flats`` added to ``key_hints``."""
        names = {k for f in flats for k in f.props} | {k for f in flats for k in f.required}
        saved = self.key_hints
        self.key_hints = tuple(sorted(set(saved) | names))
        try:
            return make()
        finally:
            self.key_hints = saved

    # -- disjointness (for oneOf) --------------------------------------------------------------------
    def disjoint(self, xs: list, ys: list) -> bool:
        return all(self.flats_disjoint(x, y) for x in xs for y in ys)

    def flats_disjoint(self, a: Flat, b: Flat, depth: int = 0) -> bool:
        common = a.types & b.types
        if not common:
            return True
        if a.enum is not None and b.enum is not None and not any(json_eq(x, y) for x in a.enum for y in b.enum):
            return True
        for e, other in ((a.enum, b), (b.enum, a)):
            if e is not None and all(self.quick_reject(v, other) for v in e):
                return True
        for t in common:
            if not self.type_disjoint(t, a, b, depth):
                return False
        return True

    def quick_reject(self, v, f: Flat) -> bool:
        """True when the value v certainly fails f (cheap checks only)."""
        try:
            t = type_atom(v)
        except TypeError:
            return False
        if t not in f.types:
            return True
        if f.enum is not None and not any(json_eq(v, w) for w in f.enum):
            return True
        if isinstance(v, str):
            n = len(v)
            if n < f.min_len or (f.max_len is not None and n > f.max_len):
                return True
        return False

    def type_disjoint(self, t: str, a: Flat, b: Flat, depth: int) -> bool:
        if t in ("integer", "nonint"):
            return _ranges_disjoint(a, b)
        if t == "string":
            return ((a.max_len is not None and b.min_len > a.max_len) or (b.max_len is not None and a.min_len > b.max_len)
                    or _strings_disjoint(a, b))
        if t == "array":
            return (a.max_items is not None and b.min_items > a.max_items) or \
                   (b.max_items is not None and a.min_items > b.max_items)
        if t == "object":
            if depth > 3:
                return False
            for x, y in ((a, b), (b, a)):
                for name in x.required:
                    ys = self.schema_for(y, name)
                    if any(s.schema is False for s in ys):
                        return True
                    if name in y.required:
                        xs = self.schema_for(x, name)
                        try:
                            self.problems.muted += 1
                            dx = self._conj_subs(xs)
                            dy = self._conj_subs(ys)
                        except _Trial:
                            continue
                        finally:
                            self.problems.muted -= 1
                        if all(self.flats_disjoint(p, q, depth + 1) for p in dx for q in dy):
                            return True
            return False
        return False

    def _conj_subs(self, subs: list) -> list:
        out = [Flat()]
        for s in subs:
            out = self.conj(out, self.dnf(s))
        return out


MAX_PRODUCT = 100_000  # pairs of states explored to tell two patterns apart; past it, they may overlap


def _string_dfas(f: Flat) -> list:
    out = []
    for p, _ in f.patterns:
        try:
            out.append(pattern_dfa(p))
        except PatternUnsupported:
            pass
    return out + [format_dfa(name) for name, _ in f.formats if format_node(name) is not None]


def _strings_disjoint(a: Flat, b: Flat) -> bool:
    """Whether a pattern or format of ``a`` and one of ``b`` match no string in common."""
    if not (a.patterns or a.formats) or not (b.patterns or b.formats):
        return False
    return any(_dfas_disjoint(x, y) for x in _string_dfas(a) for y in _string_dfas(b))


def _dfas_disjoint(a, b) -> bool:
    """L(a) ∩ L(b) = ∅ for byte DFAs (False when that takes more than ``MAX_PRODUCT`` pairs)."""
    return product_walk(a, b, lambda x, y: a.accepting[x] and b.accepting[y], limit=MAX_PRODUCT) is False


def _ranges_disjoint(a: Flat, b: Flat) -> bool:
    for lo_f, hi_f in ((a, b), (b, a)):
        if lo_f.lo is not None and hi_f.hi is not None:
            if lo_f.lo > hi_f.hi or (lo_f.lo == hi_f.hi and (lo_f.lo_x or hi_f.hi_x)):
                return True
    return False


# The most a minLength or minItems may ask: the automaton or the grammar unrolls that many
# characters or items (as a regex's {n}, whose bound it is), so it is checked before any of it.
MAX_MIN_COUNT = 10_000


def _count(v, bound: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (isinstance(v, float) and not v.is_integer()):
        raise ValueError("expected a non-negative integer")
    if isinstance(v, float) and math.isinf(v):
        raise ValueError("expected a finite integer")
    if bound is not None and v > bound:
        raise ValueError(f"at most {bound:,} is supported (localguide.json_schema.flattener.MAX_MIN_COUNT)")
    return int(v)
