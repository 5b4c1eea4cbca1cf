"""A hypothesis strategy for sentences of a Lark grammar, of bounded depth.

``hypothesis.extra.lark.from_lark`` gives up on deeply recursive grammars (on ``sql`` it
overruns on all but a couple of examples) and ends most texts in ignored whitespace. This
one derives from the grammar's own rules (``Lark.rules``, ``Lark.terminals``: public API):
below ``depth`` any alternative, beyond it only those of the shortest derivation height, so
every draw ends. Terminals come from ``st.from_regex`` (string terminals with the ``i`` flag
in random case), and ignored text (the grammar's ``%ignore``) goes between terminals in runs
of at most ``max_run`` bytes, never at the end: the language this engine accepts. Lark's
Earley parser with ``lexer="dynamic_complete"`` considers every tokenization, as the engine
does, so a concatenation of terminal strings is a sentence whatever their boundaries.
"""

from __future__ import annotations

import re

import lark
from hypothesis import strategies as st


def _heights(rules: dict) -> dict:
    """The least derivation height of each nonterminal (terminals have height 0)."""
    h: dict = {}
    changed = True
    while changed:
        changed = False
        for name, alts in rules.items():
            for alt in alts:
                if all(s.is_term or s.name in h for s in alt):
                    v = 1 + max((0 if s.is_term else h[s.name] for s in alt), default=0)
                    if v < h.get(name, 1 << 30):
                        h[name] = v
                        changed = True
    return h


# Characters both test vocabularies spell: SmolLM2's has no token for the control bytes 0x04,
# 0x06, 0x13, 0x14, 0x16, 0x1d nor for the UTF-8 lead bytes 0xF1 and 0xF2 (U+40000 to U+BFFFF),
# and its tokenizer drops them; surrogates are no text.
ALPHABET = st.one_of(st.sampled_from("\t\n\r"),
                     st.characters(min_codepoint=0x20, max_codepoint=0x3FFFF, exclude_categories=("Cs",)))


@st.composite
def sentences(draw, parser: lark.Lark, depth: int = 8, max_run: int = 32, ignore_p: float = 0.3,
              alphabet=ALPHABET):
    rules: dict = {}
    for r in parser.rules:
        rules.setdefault(r.origin.name, []).append(r.expansion)
    heights = _heights(rules)
    patterns = {t.name: t.pattern for t in parser.terminals}
    ignored = [patterns[n] for n in parser.ignore_tokens]

    def alt_height(alt) -> int:
        return 1 + max((0 if s.is_term else heights[s.name] for s in alt), default=0)

    def terminal(name: str) -> str:
        p = patterns[name]
        if isinstance(p, lark.lexer.PatternStr):
            if "i" in p.flags:
                return "".join(c.upper() if draw(st.booleans()) else c.lower() for c in p.value)
            return p.value
        flags = re.I if "i" in p.flags else 0
        flags |= re.S if "s" in p.flags else 0
        return draw(st.from_regex(re.compile(p.value, flags), fullmatch=True, alphabet=alphabet))

    def ignored_run() -> str:
        run = "".join(draw(st.from_regex(re.compile(p.to_regexp()), fullmatch=True, alphabet=alphabet))
                      for p in draw(st.lists(st.sampled_from(ignored), min_size=1, max_size=3)))
        return run[:max_run]  # (a run of whitespace, the only %ignore of the shipped grammars, cut)

    parts: list = []
    last_ignored = False

    def derive(sym, d: int) -> None:
        nonlocal last_ignored
        if sym.is_term:
            if parts and not last_ignored and ignored and draw(st.floats(0, 1)) < ignore_p:
                parts.append(ignored_run())
            parts.append(terminal(sym.name))
            last_ignored = False
            return
        alts = rules[sym.name]
        if d >= depth:
            least = heights[sym.name]
            alts = [a for a in alts if alt_height(a) == least]
        for s in draw(st.sampled_from(alts)):
            derive(s, d + 1)

    if ignored and draw(st.floats(0, 1)) < ignore_p:
        parts.append(ignored_run())  # leading ignored text is allowed
        last_ignored = True
    start = parser.options.start
    derive(lark.grammar.NonTerminal(start[0] if isinstance(start, list) else start), 0)
    return "" if last_ignored else "".join(parts)  # (no terminal after the leading run: none at the end)
