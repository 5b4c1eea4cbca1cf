"""The bridge into llama.cpp: a custom sampler that masks candidates with a Guide.

The sampler runs first in a llama.cpp sampler chain, while the candidate array is
still in token-id order, and compacts it to the allowed tokens: the cost is
O(allowed), not O(vocabulary), and the samplers after it (top-k, top-p,
temperature, dist) only see allowed tokens. llama.cpp calls ``accept`` with the
chosen token, which advances the guide. Works with any llama.cpp build.

With a large vocabulary, where the guide allows a few tokens, ``SamplerChain.sample`` builds
that compacted array itself, from the logits of the allowed tokens, and runs the chain's samplers after the
guide on it: the same array as the guide sampler would have made, so the same token, without
llama.cpp writing a candidate for every token of the vocabulary first (262,144 of them for
Gemma 3, which costs more than the rest of the sample). Where the guide allows many tokens and
top-k (or greedy) comes first after it, the chain hands llama.cpp the k highest allowed logits
instead (``gather_top``), all that top-k would keep, and spares it the full array there too.
"""

from __future__ import annotations

import ctypes
import time

import llama_cpp
import numpy as np

from ...errors import LocalguideError
from ...sampling import Sampling  # noqa: F401 - (the chains are made of it; importers read it here too)
from ...protocol import MaskKind
from ...runtime.numba_tools import compiled
from . import candidates_kernels, candidates_numpy, native_kernels
from .candidates_kernels import mask_candidates_at


_VOIDP = ctypes.c_void_p


class _SamplerInterface(ctypes.Structure):
    """``llama_sampler_i`` with untyped pointers: callbacks get plain ints, no ctypes objects.

    Same layout as llama_cpp.llama_sampler_i (which it is checked against on import).
    """

    _fields_ = [(name, _VOIDP) for name, _ in llama_cpp.llama_sampler_i._fields_]


assert ctypes.sizeof(_SamplerInterface) == ctypes.sizeof(llama_cpp.llama_sampler_i)
assert (native_kernels.P_KIND, native_kernels.P_ADDRESS, native_kernels.P_LENGTH, native_kernels.P_TOKEN,
        native_kernels.P_ERROR) == (0, 1, 2, 3, 4)  # (GuideSampler.prepare writes them in this order)
_APPLY = ctypes.CFUNCTYPE(None, _VOIDP, _VOIDP)
_ACCEPT = ctypes.CFUNCTYPE(None, _VOIDP, ctypes.c_int32)


def _mask_bits():
    """``mask_candidates_bits``: the kernel once it is compiled (a grammar's warm-up compiles it)."""
    kernel = candidates_kernels.mask_candidates_bits
    return kernel if compiled(kernel) else candidates_numpy.mask_candidates_bits


def _gather_ready() -> bool:
    """Whether ``gather_bits`` is compiled (the grammar kernels' warm-up compiles it)."""
    return compiled(candidates_kernels.gather_bits)


_TOP_READY = False
_top_checked = 0.0


def _top_ready() -> bool:
    """Whether ``gather_top`` is compiled (looked at every quarter of a second at most); if not,
    the grammar kernels' warm-up is started, which compiles it in the background (meanwhile
    llama.cpp sorts the candidates)."""
    global _TOP_READY, _top_checked
    if _TOP_READY:
        return True
    now = time.monotonic()
    if now - _top_checked >= 0.25:
        _top_checked = now
        _TOP_READY = compiled(candidates_kernels.gather_top)
        if not _TOP_READY:
            from ...runtime import warmup

            warmup.start()
    return _TOP_READY


def _prepared_ready() -> bool:
    """Whether the prepared-block callbacks can be had without compiling them here: the grammar
    kernels' warm-up compiles them with the rest (``localguide.runtime.warmup``)."""
    global _PREPARED
    if not _PREPARED:
        from ...runtime import warmup

        _PREPARED = warmup.ready()
    return _PREPARED


_PREPARED = False

# Mask arrays handed to prepared blocks, by id: (array, its contiguous copy or itself, kind,
# address, length). Guides hand out the same array each time a state comes back, and reading an
# array's address costs ~10 µs right after a decode has swept the caches. Bounded (entries and
# the bytes they keep alive): emptied when full.
_ADDRESSES: dict[int, tuple] = {}
_ADDRESSES_MAX = 512
_ADDRESSES_MAX_BYTES = 16 << 20
_addresses_bytes = 0


def _address(kind, data) -> tuple:
    global _addresses_bytes
    held = np.ascontiguousarray(data, np.uint64 if kind == MaskKind.BITS else np.int32)
    got = (data, held, int(kind), held.ctypes.data, len(held))
    if len(_ADDRESSES) >= _ADDRESSES_MAX or _addresses_bytes + held.nbytes > _ADDRESSES_MAX_BYTES:
        _ADDRESSES.clear()
        _addresses_bytes = 0
    if held.nbytes <= _ADDRESSES_MAX_BYTES // 8:
        _ADDRESSES[id(data)] = got
        _addresses_bytes += held.nbytes
    return got


class GuideSampler:
    """A ``llama_sampler`` that keeps only the tokens the guide allows (any ``GuideProtocol``).

    A guide that offers a ``native_block()`` (the Index guides) runs entirely in compiled
    code. Any other gives its ``mask()`` in ``prepare()``, before the sample; llama.cpp's
    callbacks apply it natively and record the token, which ``sync()`` then advances the
    guide by (until the kernels are compiled, Python callbacks do the same inside the
    sample). Call ``prepare()`` before each ``llama_sampler_apply`` and ``sync()`` after
    ``llama_sampler_accept``, as ``SamplerChain.sample`` does.
    """

    def __init__(self, guide):
        self.guide = guide
        self.error: BaseException | None = None
        self.block = guide.native_block()
        self.prepared = None
        self._held = None
        iface = _SamplerInterface()
        self._iface = iface
        if self.block is not None:
            iface.apply, iface.accept = native_kernels.native_callbacks()
            ctx = self.block.ctypes.data
        elif _prepared_ready():
            self.prepared = np.full(native_kernels.PREPARED_LEN, -1, np.int64)
            self._view = memoryview(self.prepared)  # (item writes cost less than numpy's)
            iface.apply, iface.accept = native_kernels.prepared_callbacks()
            ctx = self.prepared.ctypes.data
        else:
            # The callbacks must stay referenced as long as llama.cpp may call them.
            self._apply_cb = _APPLY(self._apply)
            self._accept_cb = _ACCEPT(self._accept)
            iface.apply = ctypes.cast(self._apply_cb, _VOIDP)
            iface.accept = ctypes.cast(self._accept_cb, _VOIDP)
            ctx = None
        self.pointer = llama_cpp.llama_sampler_init(
            ctypes.cast(ctypes.byref(iface), ctypes.POINTER(llama_cpp.llama_sampler_i)),
            None if ctx is None else ctypes.c_void_p(ctx))

    def prepare(self) -> None:
        """Before a sample: the native block takes the guide's cursor (it may have advanced or
        rolled back), or the prepared block the guide's mask."""
        if self.block is not None:
            self.guide.write_block(self.block)
        elif self.prepared is not None:
            kind, data = self.guide.mask()
            got = _ADDRESSES.get(id(data))
            if got is None or got[0] is not data:
                got = _address(kind, data)
            self._held = got  # (alive until the sample is over)
            p = self._view  # (P_KIND, P_ADDRESS, P_LENGTH, P_TOKEN, P_ERROR)
            p[0], p[1], p[2], p[3], p[4] = got[2], got[3], got[4], -1, 0

    def sync(self) -> None:
        """After a sample: bring the guide up to date and raise any error from the callbacks."""
        if self.block is not None:
            self.guide.sync_from_block(self.block)
        elif self.prepared is not None:
            p = self._view
            error, token = p[4], p[3]
            p[0], p[3], p[4] = -1, -1, 0
            if error == native_kernels.ERROR_EMPTY:
                raise RuntimeError("the guide allows no token here")
            if error == native_kernels.ERROR_ORDER:
                raise LocalguideError(_NOT_FIRST)
            if error == native_kernels.ERROR_UNPREPARED:
                raise LocalguideError("the guide sampler was applied without prepare(): "
                                      "GuideSampler.prepare() goes before each sample")
            if token >= 0:
                self.guide.advance(token)
        elif self.error is not None:
            err, self.error = self.error, None
            raise err

    def _apply(self, smpl, cur_p) -> None:
        try:
            kind, tokens = self.guide.mask()
            if kind == MaskKind.BITS:
                kept = _mask_bits()(cur_p, tokens)
                if kept == 0:
                    raise RuntimeError("the guide allows no token here")
            elif kind == MaskKind.ALLOWED and len(tokens) == 0:
                raise RuntimeError("the guide allows no token here (it has already finished)")
            else:
                kept = 1 if mask_candidates_at(cur_p, tokens, kind == MaskKind.EXCLUDED) else -1
            if kept < 0:
                raise LocalguideError(_NOT_FIRST)
        except BaseException as e:  # ctypes would print and drop it; re-raised after sampling
            self.error = e

    def _accept(self, smpl, token) -> None:
        if self.error is not None:  # the token was not sampled under the mask: keep the first error
            return
        try:
            self.guide.advance(token)
        except BaseException as e:
            self.error = e


# The candidates of a few allowed tokens are built here where they are at most this share of the
# vocabulary (1 / DIRECT_SHARE); past it, numpy's gather costs about what llama.cpp's full array does.
DIRECT_SHARE = 8
# ... and where the vocabulary has at least this many tokens. Right after a decode has swept the
# CPU's caches, the direct path's Python costs a fraction of llama.cpp's array of Gemma 3's 262,144
# candidates, but about as much as that of SmolLM2's 49,152: no gain there. The same bound for
# ``_sample_top``, where the mask looked at first costs too: on a small vocabulary it gains for some
# constraints and loses for others (``benchmarks/sampler_paths.py``, BENCHMARKS.md).
DIRECT_MIN_VOCAB = 100_000
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)

_NOT_FIRST = ("the guide sampler must come first in the llama.cpp sampler chain "
              "(it got a candidate array that was not in token-id order)")


class SamplerChain:
    """A llama.cpp sampler chain: [extra], [guide], top-k, top-p, min-p, temperature, dist (or greedy).

    ``extra`` samplers (llama.cpp's own grammar sampler or a logit bias, for benchmarks)
    come first; the guide must see the candidates in token-id order, so an extra
    sampler placed before it may only change logits in place, token by token (as a logit
    bias does), unless there is no guide.
    """

    def __init__(self, sampling: Sampling, guide=None, extra=(), draw: bool = True):
        """``draw`` False: without the last sampler (dist or greedy), the chain only shapes the
        candidates (``localguide.engines.llamacpp.invasiveness``)."""
        params = llama_cpp.llama_sampler_chain_default_params()
        self.pointer = llama_cpp.llama_sampler_chain_init(params)
        for smpl in extra:
            llama_cpp.llama_sampler_chain_add(self.pointer, smpl)
        self.guide_sampler = GuideSampler(guide) if guide is not None else None
        if self.guide_sampler is not None:
            llama_cpp.llama_sampler_chain_add(self.pointer, self.guide_sampler.pointer)
        after = []  # the samplers after the guide (the chain owns them)

        def add(smpl):
            llama_cpp.llama_sampler_chain_add(self.pointer, smpl)
            after.append(smpl)

        s = sampling
        if s.temperature <= 0:
            if draw:
                add(llama_cpp.llama_sampler_init_greedy())
        else:
            if s.top_k > 0:
                add(llama_cpp.llama_sampler_init_top_k(s.top_k))
            if s.top_p < 1.0:
                add(llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
            if s.min_p > 0:
                add(llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(s.temperature))
            seed = s.seed if s.seed is not None else 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: random
            if draw:
                add(llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        # A few allowed tokens: their candidates are built here (``_sample_allowed``) and go
        # through the extra samplers (which change logits token by token, in place: the same on
        # the allowed tokens alone), then the samplers after the guide.
        self._direct_samplers = [*extra, *after]
        self.direct = self.guide_sampler is not None and draw
        # A dense mask: where top-k (or greedy: 1) comes first after the guide, the k highest
        # allowed logits are what it keeps (``_sample_top``); 0: not so.
        self._top = 0 if extra or not draw else 1 if s.temperature <= 0 else s.top_k
        self._direct_buffer = None
        self._direct_address = 0
        self._direct_array = None
        self._n_vocab = 0  # (read from the context at the first sample)

    def sample(self, ctx, idx: int = -1) -> int:
        """Sample from the logits of batch position ``idx`` (-1: the last), advancing the guide."""
        if self.guide_sampler is None:
            return llama_cpp.llama_sampler_sample(self.pointer, ctx, idx)
        if self.direct and self._large(ctx):
            kind, data = self.guide_sampler.guide.mask()
            token = -1
            if kind == MaskKind.ALLOWED and 0 < len(data) <= self._n_vocab // DIRECT_SHARE \
                    or kind == MaskKind.BITS and _gather_ready():
                token = self._sample_allowed(ctx, idx, kind, data)
            if token < 0 and self._top and _top_ready():
                token = self._sample_top(ctx, idx, kind, data)
            if token >= 0:
                return token
        self.guide_sampler.prepare()
        token = llama_cpp.llama_sampler_sample(self.pointer, ctx, idx)
        self.guide_sampler.sync()
        return token

    def _large(self, ctx) -> bool:
        """Whether the vocabulary is large enough for ``_sample_allowed`` to pay (``DIRECT_MIN_VOCAB``)."""
        if not self._n_vocab:
            self._n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llama_cpp.llama_get_model(ctx)))
        return self._n_vocab >= DIRECT_MIN_VOCAB

    def _buffer(self) -> np.ndarray:
        """The records' buffer (room for 1 / DIRECT_SHARE of the vocabulary), made at the first
        direct sample only; its address is kept in ``_direct_address``."""
        if self._direct_buffer is None:
            buf = self._direct_buffer = np.zeros(max(1, self._n_vocab // DIRECT_SHARE), _TOKEN_DATA)
            self._direct_address = buf.ctypes.data
            self._direct_array = llama_cpp.llama_token_data_array(
                data=buf.ctypes.data_as(llama_cpp.llama_token_data_p), size=0, selected=-1, sorted=False)
        return self._direct_buffer

    def _sample_allowed(self, ctx, idx: int, kind: MaskKind, data: np.ndarray) -> int:
        """What ``llama_sampler_sample`` would give, where the guide allows a few tokens: the
        candidate array the guide sampler would have compacted the vocabulary's to (the allowed
        tokens in id order, their logits, p 0), through the extra samplers and those after the guide, then
        ``accept`` through the whole chain (the guide advances as it would). -1 where the mask
        allows more than 1 / DIRECT_SHARE of the vocabulary, or nothing: nothing sampled."""
        n_vocab, buf = self._n_vocab, self._buffer()
        limit = len(buf)
        address = ctypes.cast(llama_cpp.llama_get_logits_ith(ctx, idx), _VOIDP).value
        if kind == MaskKind.BITS:
            n = candidates_kernels.gather_bits(data, address, n_vocab, self._direct_address, limit)
            if n <= 0:
                return -1
        else:
            n = len(data)
            if n > limit:
                return -1
            logits = np.frombuffer((ctypes.c_float * n_vocab).from_address(address), np.float32)
            view = buf[:n]
            view["id"] = data
            view["logit"] = logits[data]
            view["p"] = 0.0
        return self._draw(n)

    def _sample_top(self, ctx, idx: int, kind: MaskKind, data: np.ndarray) -> int:
        """What ``llama_sampler_sample`` would give, where top-k (or greedy) comes first after the
        guide: the k highest logits the mask allows, in id order (``gather_top``), through the
        samplers after the guide, then ``accept`` through the whole chain. -1 where ``gather_top``
        cannot tell them apart from llama.cpp's sort (ties), or allows k or fewer: nothing sampled."""
        n_vocab, buf, k = self._n_vocab, self._buffer(), self._top
        if k > len(buf):
            return -1
        got = _ADDRESSES.get(id(data))
        if got is None or got[0] is not data:
            got = _address(kind, data)
        address = ctypes.cast(llama_cpp.llama_get_logits_ith(ctx, idx), _VOIDP).value
        n = candidates_kernels.gather_top(got[2], got[3], got[4], address, n_vocab, k, self._direct_address)
        if n <= 0:
            return -1
        return self._draw(n)

    def _draw(self, n: int) -> int:
        """Sample from the first ``n`` records of the buffer through the samplers after the guide
        (and the extra ones), then ``accept`` the token through the whole chain."""
        buf = self._direct_buffer
        arr = self._direct_array
        arr.size, arr.selected, arr.sorted = n, -1, False
        ref = ctypes.byref(arr)
        for smpl in self._direct_samplers:
            llama_cpp.llama_sampler_apply(smpl, ref)
        selected = arr.selected
        if not 0 <= selected < n:
            raise LocalguideError(f"llama.cpp's samplers selected no candidate ({selected} of {n})")
        token = int(buf["id"][selected])
        self.guide_sampler.prepare()  # (for the accept: the native block takes the cursor)
        llama_cpp.llama_sampler_accept(self.pointer, token)
        self.guide_sampler.sync()
        return token

    def close(self) -> None:
        if self.pointer is not None:
            llama_cpp.llama_sampler_free(self.pointer)
            self.pointer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
