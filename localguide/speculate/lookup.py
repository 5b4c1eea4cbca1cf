"""Drafts from the text itself: what followed the last few tokens where they came before.

A generation often repeats what it, or its prompt, has written already: a return date that is
the departure date, a name that a later field repeats, the items of a list. Where the last
``MIN_MATCH`` to ``MAX_MATCH`` tokens occurred before (in the prompt or the generation so far),
the token that followed them then is a guess for the next one; the longest such match is taken,
its latest occurrence. Unlike the count model's, this guess does not depend on the constraint's
state: the second date sits in another state of the schema than the first. These guesses are
drafted beside the counts' where likelier (what they gain: BENCHMARKS.md, Speculative decoding).
Matches start at 3 tokens: one of 2 says little.
"""

from __future__ import annotations

MIN_MATCH = 3
MAX_MATCH = 6
MAX_PROMPT = 4096  # the prompt's last tokens looked in (a long chat: its older turns say less)


class Lookup:
    """An index of the n-grams (``MIN_MATCH`` to ``MAX_MATCH`` tokens) of a token sequence, each
    to where the token after its latest occurrence is, kept up to date as tokens are appended."""

    __slots__ = ("tokens", "_after", "_taught")

    def __init__(self, tokens=()):
        self.tokens: list[int] = []
        self._after: dict[tuple[int, ...], int] = {}
        self._taught: set[tuple[int, ...]] = set()
        for t in list(tokens)[-MAX_PROMPT:]:
            self.append(t)

    def append(self, token: int) -> None:
        toks = self.tokens
        toks.append(token)
        p = len(toks) - 1  # the n-grams ending just before ``token`` are followed by it
        after = self._after
        for m in range(MIN_MATCH, min(MAX_MATCH, p) + 1):
            after[tuple(toks[p - m:p])] = p

    def guess(self, extra: list[int] = ()) -> tuple[int, int] | None:
        """(the token after the latest earlier occurrence of the longest match, the match's length)
        for the sequence followed by ``extra`` (drafts not taken yet: a match may lie in them too),
        or None."""
        toks = self.tokens
        # the window holding every occurrence followed by a draft, and the tail
        base = max(0, len(toks) - MAX_MATCH - len(extra))
        s = toks[base:] + list(extra)
        end = len(s)
        first = len(toks) - base  # the first draft's place in s
        last = s[end - 1] if end else None
        for m in range(min(MAX_MATCH, len(toks) + len(extra) - 1), MIN_MATCH - 1, -1):
            tail = s[end - m:]
            for f in range(end - 1, max(first, m) - 1, -1):  # followed by a draft, latest first
                if s[f - 1] == last and s[f - m:f] == tail:  # (the last token first: no slice mostly)
                    return s[f], m
            at = self._after.get(tuple(tail)) if m <= end else None
            if at is not None:
                return toks[at], m
        return None

    def first(self, m: int) -> bool:
        """Whether the last ``m`` tokens are a match that has not taught the rates yet (each
        once: a text going round in circles, 1111..., would make its matches look certain to
        the next generation, which rarely does the same)."""
        tail = tuple(self.tokens[len(self.tokens) - m:])
        if tail in self._taught:
            return False
        self._taught.add(tail)
        return True
