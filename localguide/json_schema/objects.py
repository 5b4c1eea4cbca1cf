"""JSON objects for the schema compiler: listed properties, then the keys no name lists, split
exactly by the ``patternProperties`` they match (``Objects.key_regions``), and counted joins.

``Objects`` is a part of ``compiler.Compiler`` (a mixin): it reads the compiler's ``value``,
``sep``, ``colon``, ``wrap``, ``problems`` and ``fl``.
"""

from __future__ import annotations

from ..regex.ast import ANY_CHAR_RANGES, EMPTY, EPS, Lit, Node, alt, opt, rep, seq, star
from ..regex.ast_dfa import ast_to_dfa, dfa_intersects
from .encoding import encode_content, json_string_literal, not_in_strings
from .flat import FALSE, Flat, json_eq, patterns_only
from .strings import ANY_STRING, PatternUnsupported, pattern_dfa, pattern_node, restrict_length

MAX_SPLIT_PATTERNS = 6  # patternProperties of one object whose keys are split exactly (2^6 key regions)


class Objects:
    """The object keywords of ``Compiler``."""

    def object(self, f: Flat, depth: int) -> Node:
        if f.unconstrained("object") and not f.has_additional:
            self.note_any(f.ptr, "type")
            return self.any_object(self.any_depth, depth)
        if f.has_additional:
            additional = f.additional
        elif self.strict and (f.props or f.patprops or f.required):
            additional = [FALSE]
        else:
            additional = []
        names = list(f.props) + [r for r in f.required if r not in f.props]
        name_flats = None
        if f.prop_names:
            name_flats = self.fl._conj_subs(f.prop_names)
        g = f.copy()
        g.additional = additional
        if f.groups is not None and additional is not f.additional:  # strict: no part says otherwise
            g.groups = f.groups + [(patterns_only(f.groups), additional)]
        entries = []
        d1 = depth + 1
        for name in names:
            required = name in f.required
            if name_flats is not None and not any(self._name_ok(nf, name) for nf in name_flats):
                if required:
                    return EMPTY
                continue
            subs = self.fl.schema_for(g, name)
            v = self.item_value(subs, d1, f.ptr) if not subs else self.value(subs, d1)
            if v is EMPTY:
                if required:
                    return EMPTY
                continue
            entries.append((seq(json_string_literal(name), self.colon(), v), required))
        extras = self.extras(f, g, additional, names, name_flats, d1)
        sep = self.sep(d1)
        slots = entries + ([(extras, None)] if extras is not EMPTY else [])
        lo, hi = f.min_props, f.max_props
        content = self.join(slots, sep, lo, hi)
        empty_ok = content is EMPTY or _nullable_join(slots, lo)
        if content is EMPTY:
            return Lit("{}") if empty_ok and lo == 0 else EMPTY
        return self.wrap("{", "}", content, empty_ok and lo == 0, depth)

    def _name_ok(self, nf: Flat, name: str) -> bool:
        if "string" not in nf.types:
            return False
        if nf.enum is not None:
            return any(json_eq(name, v) for v in nf.enum) and self.accepts(nf, name)
        return self.accepts(nf, name)

    def extras(self, f: Flat, g: Flat, additional: list, names: list, name_flats, d1: int) -> Node:
        """Entries for the properties not listed: pattern properties, then additional ones."""
        if f.patprops and name_flats is None:
            regions = self.key_regions(g.key_groups(), names)
            if regions is not None:
                parts = []
                for key, matched, subs in regions:
                    v = self.value(subs, d1) if matched else self.additional_value(f, subs, [], d1)
                    if v is not EMPTY:
                        parts.append(seq(Lit('"'), encode_content(key), Lit('"'), self.colon(), v))
                return alt(*parts)
        return self.extras_approximated(f, additional, names, name_flats, d1)

    def key_regions(self, groups: list, names: list):
        """The keys of an object's unlisted properties, split exactly by the patterns they match:
        [(key node, whether a pattern matches them, the schemas their values satisfy)], or None
        where the split is not built (too many patterns, an automaton too large to write back as a
        regex: ``extras_approximated`` then). ``groups``: ``Flat.groups``. A key takes the schemas
        of every pattern that matches it; in a part where none does, the part's
        ``additionalProperties``. The listed names are left out of every region."""
        atoms: dict[str, int] = {}  # pattern -> its place
        pats, nodes = [], []
        for patprops, _ in groups:
            for p, ptr, _ in patprops:
                if p in atoms:
                    continue
                try:
                    pats.append(pattern_dfa(p))
                    nodes.append(pattern_node(p))
                    atoms[p] = len(atoms)
                except PatternUnsupported as e:
                    self.problems.error(ptr, "patternProperties", str(e))
        k = len(pats)
        if k > MAX_SPLIT_PATTERNS:
            return None
        cache_key = (tuple(atoms), tuple(names))
        keys = self._key_regions.get(cache_key)
        if keys is None:
            keys = self._key_regions[cache_key] = _key_nodes(pats, names, nodes)
        if keys is None:
            return None
        out = []
        for which, node in keys:
            subs = []
            for patprops, additional in groups:
                mine = [x for p, _, ss in patprops if p in atoms and which >> atoms[p] & 1 for x in ss]
                hit = any(p in atoms and which >> atoms[p] & 1 for p, _, _ in patprops)
                subs += mine if hit else additional
            out.append((node, bool(which), subs))
        return out

    def additional_value(self, f: Flat, additional: list, pattern_subs: list, d1: int) -> Node:
        """The value of a property that no listed name covers (``additional``, and ``pattern_subs``
        where the keys are not split from the patterns' keys)."""
        subs = list(additional) + pattern_subs
        if not subs or all(s.schema is True for s in subs):
            if not f.has_additional:
                if not self.exact_recursion:
                    self.problems.approx(f.ptr, "additionalProperties", "properties not listed may hold "
                                         f"any JSON value nested at most {self.extra_depth} levels")
                return self.any_value(self.extra_depth, d1)
            self.note_any(f.ptr, "additionalProperties", self.any_depth - 1)
            return self.any_value(self.any_depth - 1, d1)
        return self.value(subs, d1)

    def extras_approximated(self, f: Flat, additional: list, names: list, name_flats, d1: int) -> Node:
        """``extras`` without splitting the keys: keys that a listed name or another pattern also
        matches are narrowed (reported)."""
        P = self.problems
        parts = []
        pattern_subs = [s for _, _, ss in f.patprops for s in ss]
        for i, (p, ptr, subs) in enumerate(f.patprops):
            if name_flats is not None:
                P.approx(f.ptr, "patternProperties", f"pattern {p!r}, with propertyNames: no other property may "
                                                     "match it")
                continue
            try:
                key = pattern_node(p)
                dfa = pattern_dfa(p)
            except PatternUnsupported as e:
                P.error(ptr, "patternProperties", str(e))
                continue
            clash = [n for n in names if dfa.matches(n.encode("utf-8", "surrogatepass"))]
            if clash:
                key, _ = restrict_length(key, max(len(n) for n in clash) + 1, None)
                P.approx(f.ptr, "patternProperties", f"pattern {p!r}: keys matching a listed property name must "
                                                     "be longer than those names")
            # a key may match several patterns: its value must satisfy each that may apply
            value_subs = list(subs)
            for j, (q, qptr, qsubs) in enumerate(f.patprops):
                if j != i:
                    try:
                        overlap = dfa_intersects(dfa, pattern_dfa(q)) is not None
                    except PatternUnsupported:
                        overlap = True
                    if overlap:
                        value_subs += qsubs
            v = self.value(value_subs, d1)
            if len(value_subs) > len(subs):
                # (the keys of this pattern alone take the other pattern's schema too, as the key
                # language is not split here; and all of them are lost where no value satisfies both)
                P.approx(f.ptr, "patternProperties",
                         f"pattern {p!r}: keys that another pattern also matches must hold values valid for both, "
                         "and so must this pattern's other keys")
            if v is not EMPTY and key is not EMPTY:
                parts.append(seq(Lit('"'), encode_content(key), Lit('"'), self.colon(), v))
        # additional properties: keys outside the listed names (and, conservatively, values that
        # also satisfy every pattern property's schema, since the key may match a pattern)
        a_flats = self.fl._conj_subs(additional) if additional else [Flat()]
        if a_flats:
            key = self.additional_key(f, names, name_flats)
            if key is not EMPTY:
                if pattern_subs:
                    P.approx(f.ptr, "additionalProperties", "values of other properties must also satisfy "
                                                            "every patternProperties schema")
                v = self.additional_value(f, additional, pattern_subs, d1)
                if v is not EMPTY:
                    parts.append(seq(Lit('"'), encode_content(key), Lit('"'), self.colon(), v))
        return alt(*parts)

    def additional_key(self, f: Flat, names: list, name_flats) -> Node:
        if name_flats is None:
            return not_in_strings(names) if names else ANY_STRING
        keys = []
        for nf in name_flats:
            if "string" not in nf.types:
                continue
            if nf.enum is not None:
                keys += [Lit(v) if v else EPS for v in nf.enum
                         if isinstance(v, str) and v not in names and self.accepts(nf, v)]
                continue
            content = self.string_content(nf, "propertyNames")
            if content is EMPTY:
                continue
            if names:
                dfa = ast_to_dfa(content)
                clash = [n for n in names if dfa.matches(n.encode("utf-8", "surrogatepass"))]
                if clash:
                    if content_is_any(nf):
                        content = not_in_strings(names, ANY_CHAR_RANGES, nf.min_len)
                        content, _ = restrict_length(content, nf.min_len, nf.max_len)
                    else:
                        content, _ = restrict_length(content, max(len(n) for n in clash) + 1, None)
                        self.problems.approx(f.ptr, "propertyNames", "other keys must be longer than the "
                                                                     "listed property names")
            keys.append(content)
        return alt(*keys)

    # -- joining members with separators ------------------------------------------------------------
    def join(self, slots: list, sep: Node, lo: int = 0, hi=None) -> Node:
        """Members in order, separated by ``sep``; each slot is (node, required) where required is
        True, False (optional) or None (repeatable, any number); total count in lo..hi."""
        n_max = sum(1 for _, r in slots if r is not None) + (0 if all(r is not None for _, r in slots) else 10**9)
        n_req = sum(1 for _, r in slots if r is True)
        if hi is not None and hi < n_req:
            return EMPTY
        if lo <= n_req and (hi is None or hi >= n_max):
            return self._join_free(slots, sep)
        if hi is not None and hi >= n_max:
            hi = None
        return self._join_counted(slots, sep, lo, hi)

    def _join_free(self, slots, sep) -> Node:
        nonempty = EMPTY  # some member already written
        can_empty = True
        for node, req in slots:
            if req is True:
                nonempty = alt(seq(nonempty, sep, node), node if can_empty else EMPTY)
                can_empty = False
            elif req is False:
                nonempty = alt(seq(nonempty, opt(seq(sep, node))), node if can_empty else EMPTY)
            else:
                nonempty = seq(alt(nonempty, node if can_empty else EMPTY), star(seq(sep, node)))
        return nonempty  # the empty case is the caller's (empty container)

    def _join_counted(self, slots, sep, lo, hi) -> Node:
        cap = max(lo, hi if hi is not None else 0)
        if cap > 64:
            self.problems.approx("", "maxProperties", "member counts above 64 are not tracked: at most 64")
            hi = 64 if hi is None or hi > 64 else hi
            lo = min(lo, 64)
            cap = 64
        # by[c]: strings with exactly c members (at least c when c == cap and hi is None)
        by = {0: EPS}
        final = []
        for node, req in slots:
            if req is None:  # the repeatable slot comes last: finish here
                for c, prev in by.items():
                    if c >= max(lo, 1) and (hi is None or c <= hi):
                        final.append(prev)
                    jmin = max(1, lo - c)
                    jmax = None if hi is None else hi - c
                    if jmax is not None and jmax < jmin:
                        continue
                    first = node if c == 0 else seq(sep, node)
                    final.append(seq(prev, first, rep(seq(sep, node), jmin - 1,
                                                      None if jmax is None else jmax - 1)))
                return alt(*final)
            new: dict = {}
            for c, prev in by.items():
                step = node if c == 0 else seq(sep, node)
                options = [(c + 1, seq(prev, step))] if req else [(c, prev), (c + 1, seq(prev, step))]
                for k, x in options:
                    if hi is None:
                        k = min(k, cap)
                    elif k > hi:
                        continue
                    new[k] = alt(new.get(k, EMPTY), x)
            by = new
        return alt(*[x for c, x in by.items() if c >= max(lo, 1)])


def _key_nodes(pats: list, names: list, nodes: list | None = None):
    """[(which, key node)]: the keys (not in ``names``) that exactly the patterns of the bit set
    ``which`` match (a DFA each, in ``pats``' order), where there are any; None when one is too
    large to write as a regex (``dfa_to_node``). One product of the automata serves every set."""
    import numpy as np

    from ..automaton import minimize, product
    from ..automaton.literals import literals_dfa
    from ..regex.dfa_ast import dfa_to_node

    k = len(pats)
    parts = pats + [_any_key_dfa()]
    if names:
        parts.append(literals_dfa([n.encode("utf-8", "surrogatepass") for n in names]))
    trans, flags = product(parts)
    key = flags[:, k] & ~flags[:, k + 1] if names else flags[:, k]
    which_of = (flags[:, :k].astype(np.int64) << np.arange(k, dtype=np.int64)).sum(axis=1) if k else \
        np.zeros(len(flags), np.int64)
    out = []
    for which in range(1 << k):  # the patterns a key matches (none: an additional property)
        region = minimize(trans, key & (which_of == which))
        node = None
        if nodes is not None and which and which & (which - 1) == 0:
            # exactly one pattern, and all its keys: the pattern's own node (minimal DFAs are
            # numbered breadth-first, so equal languages have equal arrays)
            mine = pats[which.bit_length() - 1]
            if region.n_states == mine.n_states and np.array_equal(region.transitions, mine.transitions) \
                    and np.array_equal(region.accepting, mine.accepting):
                node = nodes[which.bit_length() - 1]
        if node is None:
            node = dfa_to_node(region)
        if node is None:
            return None
        if node is not EMPTY:
            out.append((which, node))
    return out


_ANY_KEY: list = []


def _any_key_dfa():
    """The automaton of every key (``ANY_STRING``), built once."""
    if not _ANY_KEY:
        _ANY_KEY.append(ast_to_dfa(ANY_STRING))
    return _ANY_KEY[0]


def _nullable_join(slots, lo) -> bool:
    return lo == 0 and all(r is not True for _, r in slots)


def content_is_any(nf: Flat) -> bool:
    return not nf.patterns and not nf.not_patterns and not nf.formats and not nf.not_enum
