"""Token healing at the prompt boundary (DOMINO §3.5).

A prompt that ends inside a word ("The capital of Fran") ends in a token split the model
would not have made: its tokenizer wrote " Fran" because the text stopped there, and the
model then has to continue from "ce" rather than choose " France". Healing removes the
last prompt token when a longer token starts with its bytes, and makes the first
generated token start with those bytes (``HealGuide``): the model chooses the token it
would have used. The healed bytes are the prompt's, never returned again.

The constraint (if any) applies to the text after the prompt as the caller wrote it: a
token that spans the healed bytes and the constraint's first bytes is allowed when the
constraint allows those bytes, and it advances the constraint's guide by them. The
constraint's index is not recompiled: ``HealGuide`` is a small prefix in front of the guide
for the first token only.
"""

from __future__ import annotations

import numpy as np

from ..protocol import Mask, MaskKind


def heal_point(vocabulary, prompt_tokens: list[int]) -> int:
    """How many bytes of the prompt's last token to heal (0: none).

    Healed: the last token, when it is not the first one (a BOS), has bytes (control and
    special tokens have none), does not end a line, and some other token starts with those
    bytes and is longer."""
    if len(prompt_tokens) < 2:
        return 0
    tail = vocabulary[int(prompt_tokens[-1])]
    if not tail or tail.endswith(b"\n"):  # (a line end is a boundary the caller chose, not a split)
        return 0
    return len(tail) if len(extensions(vocabulary, tail, longer=True)) else 0


def extensions(vocabulary, prefix: bytes, longer: bool = False) -> np.ndarray:
    """The sorted ids of the tokens whose bytes start with ``prefix`` (``longer``: strictly longer)."""
    rows = vocabulary.token_rows
    n = len(prefix)
    if n > rows.data.shape[1]:
        return np.empty(0, np.int32)
    want = np.frombuffer(prefix, np.uint8)
    hit = (rows.lengths > n) if longer else (rows.lengths >= n)
    hit &= np.all(rows.data[:, :n] == want, axis=1)
    return np.sort(rows.order[hit]).astype(np.int32)


class HealGuide:
    """The first token's guide when healing: tokens that start with the healed bytes, whose
    remaining bytes the constraint's guide (``inner``; None: unconstrained) allows.

    ``tokenize(bytes) -> ids`` writes a remainder as the model's tokens (to check it against
    ``inner`` and advance it). With ``logits`` set before ``mask()`` and ``keep`` (the sampler
    chain's top-k; 1 when greedy), candidates are checked in the order of their logits until
    ``keep`` are allowed: the chain after the guide keeps those only, so the sample is the
    same as with the whole mask, and a prompt ending in a space (tens of thousands of
    candidates) costs a few checks. Driven through ``mask()`` and ``advance()``; one token only.
    """

    cheap_masks = False

    def __init__(self, vocabulary, healed: bytes, inner, tokenize, keep: int | None = None):
        self.vocabulary = vocabulary
        self.healed = healed
        self.inner = inner
        self.tokenize = tokenize
        self.keep = keep
        self.logits: np.ndarray | None = None
        self.rest: bytes | None = None  # the bytes past ``healed`` of the token taken
        self.candidates = extensions(vocabulary, healed)  # every token that starts with the healed bytes
        if inner is not None:
            self.candidates = self._first_byte_allowed(self.candidates)
        self._paths: dict[int, list[int]] = {}  # checked candidate -> the inner tokens of its rest
        self._refused: set[int] = set()

    def _first_byte_allowed(self, candidates: np.ndarray) -> np.ndarray:
        """The candidates whose rest is empty or starts with a byte that starts a token ``inner``
        allows now. The rest's first token starts with the rest's first byte, so the others could
        never pass ``_check``; a prompt ending in a space has tens of thousands of candidates, and
        where the constraint allows few of them each refusal would cost a tokenization."""
        v = self.vocabulary
        n = len(self.healed)
        allowed = self.inner.allowed_token_ids()
        starts = v.offsets[allowed]
        first = np.zeros(256, bool)
        first[v.flat[starts[v.offsets[allowed + 1] > starts]]] = True
        begin, end = v.offsets[candidates] + n, v.offsets[candidates + 1]
        keep = end == begin
        longer = ~keep
        keep[longer] = first[v.flat[begin[longer]]]
        return candidates[keep]

    def _check(self, t: int) -> bool:
        """Whether candidate ``t``'s bytes past the healed ones are allowed (remembered)."""
        if t in self._paths:
            return True
        if t in self._refused:
            return False
        rest = self.vocabulary[t][len(self.healed):]
        path: list[int] = []
        if rest and self.inner is not None:
            path = self.tokenize(rest)
            g = self.inner.copy()
            for x in path:
                if not g.accepts(x):
                    self._refused.add(t)
                    return False
                g.advance(x)
        self._paths[t] = path
        return True

    def allowed_token_ids(self) -> np.ndarray:
        """Every allowed candidate (each one checked)."""
        if self.inner is None:
            return self.candidates
        return np.array([t for t in self.candidates.tolist() if self._check(t)], np.int32)

    def mask(self) -> Mask:
        if self.logits is None or not self.keep or self.inner is None:
            return Mask(MaskKind.ALLOWED, self.allowed_token_ids())
        order = self.candidates[np.argsort(-self.logits[self.candidates], kind="stable")]
        kept = []
        for t in order.tolist():
            if self._check(t):
                kept.append(t)
                if len(kept) == self.keep:
                    break
        return Mask(MaskKind.ALLOWED, np.array(sorted(kept), np.int32))

    def accepts(self, token_id: int) -> bool:
        t = int(token_id)
        i = np.searchsorted(self.candidates, t)
        return bool(i < len(self.candidates) and self.candidates[i] == t and self._check(t))

    def advance(self, token_id: int) -> None:
        from ..errors import TokenNotAllowedError, as_token

        token_id = as_token(token_id, self.vocabulary.size)
        if self.rest is not None or not self.accepts(token_id):
            raise TokenNotAllowedError(f"token {token_id} does not start with the healed bytes {self.healed!r}"
                                       " or its remainder is not allowed by the constraint")
        self.rest = self.vocabulary[token_id][len(self.healed):]
        if self.inner is not None:
            for t in self._paths[token_id]:
                self.inner.advance(t)

    def native_block(self) -> None:
        return None
