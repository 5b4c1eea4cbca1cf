"""The engines localguide is measured against, each optional.

* ``outlines_core``: an ``outlines_core.Vocabulary`` built from our vocabulary's raw token
  bytes (byte keys, so partial UTF-8 tokens stay distinct), its ``Index`` and ``Guide``.
* ``llguidance``: an ``LLTokenizer`` built from the same raw bytes, ``LLMatcher`` for the
  constraint, and :class:`LLGuidanceSampler`, a llama.cpp custom sampler that fills the
  llguidance bitmask and applies it to the candidate array: llguidance the way a
  llama-cpp-python logits processor would use it, but inside the same sampler chain as
  localguide's own sampler.
* llama.cpp's GBNF sampler: :func:`gbnf_sampler`.

A peer that is not installed is ``None`` here (``OUTLINES`` / ``LLG``); callers skip it with a note.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

import llama_cpp

try:  # pragma: no cover - optional
    import outlines_core as OUTLINES
    OUTLINES_VERSION = getattr(OUTLINES, "__version__", None)
except ImportError:  # pragma: no cover
    OUTLINES = None
    OUTLINES_VERSION = None

try:  # pragma: no cover - optional
    import llguidance as LLG
    import llguidance.numpy as _llg_np  # noqa: F401  (documents the bitmask layout we follow)
except ImportError:  # pragma: no cover
    LLG = None


def version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version as v

    try:
        return v(dist)
    except PackageNotFoundError:
        return None


# --- llama.cpp samplers ----------------------------------------------------------------

def gbnf_sampler(model, grammar: str):
    """llama.cpp's own grammar sampler for ``grammar`` (GBNF, rule ``root``)."""
    vocab = llama_cpp.llama_model_get_vocab(model.llama.model)
    smpl = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not smpl:
        raise RuntimeError("llama.cpp rejected the GBNF grammar")
    return smpl


def ban_sampler(token_ids, n_vocab: int):
    """A logit-bias sampler that forbids ``token_ids`` (used to keep stop tokens out)."""
    ids = [int(t) for t in token_ids]
    arr = (llama_cpp.llama_logit_bias * len(ids))()
    for i, t in enumerate(ids):
        arr[i].token = t
        arr[i].bias = float("-inf")
    return llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(ids), arr)


# --- outlines-core ---------------------------------------------------------------------

def outlines_vocabulary(vocab):
    """An ``outlines_core.Vocabulary`` with our raw token bytes as keys.

    outlines-core takes one EOS id and refuses it in the map; the other stop tokens
    and control tokens have no bytes and are left out, as they can never match text.
    """
    stops = set(vocab.stop_ids.tolist())
    flat, offsets = vocab.flat.tobytes(), vocab.offsets
    tokens: dict[bytes, list[int]] = {}
    for i in range(vocab.size):
        a, b = int(offsets[i]), int(offsets[i + 1])
        if b > a and i not in stops:
            tokens.setdefault(flat[a:b], []).append(i)
    return OUTLINES.Vocabulary(int(vocab.eos_id), tokens)


# --- llguidance ------------------------------------------------------------------------

class _RawTokenizer:
    """What ``llguidance.TokenizerWrapper`` needs: token bytes, EOS, and a tokenize function."""

    def __init__(self, model):
        vocab = model.vocabulary
        self.eos_token_id = int(vocab.eos_id)
        self.bos_token_id = None
        # Control tokens have no bytes in our vocabulary; llguidance marks specials with 0xFF.
        self.tokens = [vocab[i] or b"\xff<special_%d>" % i for i in range(vocab.size)]
        self.special_token_ids = [i for i in range(vocab.size) if not vocab[i]]
        self._llama = model.llama

    def __call__(self, text: bytes):
        return self._llama.tokenize(text, add_bos=False, special=False)


def llg_tokenizer(model):
    """An ``LLTokenizer`` over the model's raw token bytes, every stop token an EOS."""
    wrapper = LLG.TokenizerWrapper(_RawTokenizer(model))
    return LLG.LLTokenizer(wrapper, eos_token=[int(t) for t in model.vocabulary.stop_ids])


def llg_matcher(tokenizer, regex: str | None = None, lark: str | None = None):
    """An ``LLMatcher`` for a regex, or for a Lark grammar (llguidance's own Lark dialect, which
    takes our shipped grammars as they are)."""
    grammar = LLG.LLMatcher.grammar_from_regex(regex) if lark is None else LLG.LLMatcher.grammar_from_lark(lark)
    m = LLG.LLMatcher(tokenizer, grammar, log_level=0)
    if m.is_error():
        raise RuntimeError(f"llguidance: {m.get_error()}")
    return m


class _Raw:
    __slots__ = ("__array_interface__",)


def _int32_view(address: int, rows: int) -> np.ndarray:
    """The ``llama_token_data`` records at ``address`` as an int32 array of shape (rows, 3)."""
    raw = _Raw()
    raw.__array_interface__ = {"data": (address, False), "shape": (rows, 3), "typestr": "<i4", "version": 3}
    return np.asarray(raw)


class LLGuidanceSampler:
    """A llama.cpp ``llama_sampler`` driven by an ``llguidance.LLMatcher``.

    apply: fill the bitmask (``LLMatcher.unsafe_compute_mask_ptr``, what
    ``llguidance.numpy.fill_next_token_bitmask`` calls), expand it to the allowed ids
    and compact the candidate array to them (as localguide's sampler does, so the
    samplers after it see only allowed tokens); accept: ``consume_token``.
    ``times_ns`` collects apply + accept per token.
    """

    def __init__(self, matcher, n_vocab: int):
        self.matcher = matcher
        self.n_vocab = n_vocab
        self.bitmask = np.full((n_vocab + 31) // 32, -1, np.int32)
        self._mask_ptr = self.bitmask.ctypes.data
        self._mask_bytes = self.bitmask.nbytes
        self.error: BaseException | None = None
        self.times_ns: list[int] = []
        self._t_apply = 0
        iface = llama_cpp.llama_sampler_i()
        self._apply_cb = llama_cpp.llama_sampler_i_apply(self._apply)
        self._accept_cb = llama_cpp.llama_sampler_i_accept(self._accept)
        iface.apply = self._apply_cb
        iface.accept = self._accept_cb
        self._iface = iface
        self.pointer = llama_cpp.llama_sampler_init(ctypes.byref(iface), None)

    def _apply(self, smpl, cur_p) -> None:
        t0 = time.perf_counter_ns()
        try:
            arr = cur_p.contents
            size = arr.size
            self.matcher.unsafe_compute_mask_ptr(self._mask_ptr, self._mask_bytes)
            data = _int32_view(ctypes.cast(arr.data, ctypes.c_void_p).value, size)
            # Allowed ids from the bitmask, touching only its non-zero words.
            words = np.flatnonzero(self.bitmask)
            bits = np.flatnonzero(np.unpackbits(self.bitmask[words].view(np.uint8), bitorder="little"))
            allowed = words[bits >> 5] * 32 + (bits & 31)
            if size == self.n_vocab and data[0, 0] == 0 and data[size - 1, 0] == size - 1:
                keep = allowed[allowed < size]  # candidates still in id order: rows are ids
            else:
                ok = np.zeros(self.n_vocab, bool)
                ok[allowed[allowed < self.n_vocab]] = True
                keep = np.flatnonzero(ok[data[:, 0]])
            if len(keep) == 0:
                raise RuntimeError("llguidance allows no token here")
            data[:len(keep)] = data[keep]
            arr.size = len(keep)
        except BaseException as e:  # re-raised by the caller after sampling
            self.error = e
        self._t_apply = time.perf_counter_ns() - t0

    def _accept(self, smpl, token) -> None:
        t0 = time.perf_counter_ns()
        try:
            if not self.matcher.consume_token(int(token)):
                raise RuntimeError(f"llguidance refused token {token}: {self.matcher.get_error()}")
        except BaseException as e:
            self.error = e
        self.times_ns.append(self._t_apply + time.perf_counter_ns() - t0)

