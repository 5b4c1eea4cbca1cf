"""``stop`` strings that keep the constraint's guarantee.

A stop string ends the text where it first occurs (the stop string and what follows are
left out), as OpenAI's ``stop``. In constrained text an occurrence counts only where the
text before it is complete for the constraint (its guide accepts there): with a date regex
and ``stop=["-"]`` the text goes on past "1980-", and a JSON answer keeps the dots and
commas inside it. Free text (no constraint, reasoning before ``after``'s trigger, text
before a tool call) stops at the first occurrence.
"""

from __future__ import annotations

import contextlib

from ..errors import ArgumentError


def check_stops(stop) -> list[str]:
    """``stop`` (None, a string or a list of strings) as a list of non-empty strings."""
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
        raise ArgumentError(f"stop= takes a non-empty string or a list of them, got {stop!r}")
    return list(stop)


class Complete:
    """Whether a prefix of the constrained text is complete: a guide of the compiled constraint
    (no budget: the text is already there) walked over the text's bytes as the model's tokens.

    Where a walk is refused (a tokenization the guide does not take), the answer is False: the
    text is then never cut inside the constraint. ``lock``: held while a guide is made or walked
    (a server whose engine walks guides of the same compiled constraint)."""

    def __init__(self, index, tokenize, vocabulary, lock=None):
        self._index, self._tokenize, self._vocabulary = index, tokenize, vocabulary
        self._lock = lock or contextlib.nullcontext()
        self._text = ""
        self._marks: list[tuple[int, object]] = []  # (characters walked, the guide there; None: refused)

    def feed(self, text: str) -> None:
        self._text += text

    def __call__(self, k: int) -> bool:
        """Whether the first ``k`` characters fed are a complete text of the constraint."""
        with self._lock:
            if not self._marks:  # (made here, in the thread that walks it)
                self._marks.append((0, self._index.guide()))
            at, guide = max((m for m in self._marks if m[0] <= k), key=lambda m: m[0])
            if guide is None:
                return False
            guide = guide.copy()
            data = self._text[at:k].encode("utf-8")
            tokens = self._tokenize(data) if data else []
            ok = b"".join(self._vocabulary[t] for t in tokens) == data
            for t in tokens if ok else ():
                if not guide.accepts(t):
                    ok = False
                    break
                guide.advance(t)
            self._marks.append((k, guide if ok else None))
            return ok and guide.is_accepting()


class StopText:
    """Text up to the first stop string that counts (``complete(k)``: whether one starting at
    character ``k`` does; None: every one); text that may begin one is held back."""

    def __init__(self, stops: list[str], complete: Complete | None = None):
        self.stops, self.complete = stops, complete
        self.buf, self.base, self.hit = "", 0, False  # text held back, characters given out before it
        self._refused: set[int] = set()  # (positions of occurrences that did not count)

    def feed(self, text: str, final: bool = False) -> str:
        """The part of ``text`` (after what was held back) that can be given out now."""
        if self.hit:
            return ""
        if not self.stops:
            return text
        if self.complete is not None:
            self.complete.feed(text)
        self.buf += text
        for cut in sorted({i for s in self.stops for i in _finds(self.buf, s)}):
            at = self.base + cut
            if at in self._refused:
                continue
            if self.complete is None or self.complete(at):
                out, self.buf, self.hit = self.buf[:cut], "", True
                return out
            self._refused.add(at)
        keep = 0 if final else max((k for s in self.stops for k in range(1, len(s))
                                    if self.buf.endswith(s[:k]) and self.base + len(self.buf) - k not in self._refused),
                                   default=0)
        out, self.buf = self.buf[:len(self.buf) - keep], self.buf[len(self.buf) - keep:]
        self.base += len(out)
        return out


def _finds(text: str, s: str):
    i = text.find(s)
    while i >= 0:
        yield i
        i = text.find(s, i + 1)
