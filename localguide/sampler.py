"""The bridge into llama.cpp: a custom sampler that masks candidates with a Guide.

The sampler runs first in a llama.cpp sampler chain, while the candidate array is
still in token-id order, and compacts it to the allowed tokens: the cost is
O(allowed), not O(vocabulary), and the samplers after it (top-k, top-p,
temperature, dist) only see allowed tokens. llama.cpp calls ``accept`` with the
chosen token, which advances the guide. Works with any llama.cpp build.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp

from .kernels import keep_candidates_at


@dataclass(frozen=True)
class Sampling:
    """Usual sampling settings; ``temperature <= 0`` is greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None


class GuideSampler:
    """A ``llama_sampler`` whose apply keeps only ``guide.allowed_token_ids()``."""

    def __init__(self, guide):
        self.guide = guide
        self.error: BaseException | None = None
        iface = llama_cpp.llama_sampler_i()
        # The callbacks must stay referenced as long as llama.cpp may call them.
        self._apply_cb = llama_cpp.llama_sampler_i_apply(self._apply)
        self._accept_cb = llama_cpp.llama_sampler_i_accept(self._accept)
        iface.apply = self._apply_cb
        iface.accept = self._accept_cb
        self._iface = iface
        self.pointer = llama_cpp.llama_sampler_init(ctypes.byref(iface), None)

    def _apply(self, smpl, cur_p) -> None:
        try:
            arr = cur_p.contents
            allowed = self.guide.allowed_token_ids()
            if len(allowed) == 0:
                raise RuntimeError("the guide allows no token here (it has already finished)")
            address = ctypes.cast(arr.data, ctypes.c_void_p).value
            arr.size = keep_candidates_at(address, arr.size, allowed)
        except BaseException as e:  # ctypes would print and drop it; re-raised after sampling
            self.error = e

    def _accept(self, smpl, token) -> None:
        try:
            self.guide.advance(token)
        except BaseException as e:
            self.error = e


class SamplerChain:
    """A llama.cpp sampler chain: [guide], top-k, top-p, min-p, temperature, dist (or greedy)."""

    def __init__(self, sampling: Sampling, guide=None, extra=()):
        params = llama_cpp.llama_sampler_chain_default_params()
        self.pointer = llama_cpp.llama_sampler_chain_init(params)
        self.guide_sampler = GuideSampler(guide) if guide is not None else None
        if self.guide_sampler is not None:
            llama_cpp.llama_sampler_chain_add(self.pointer, self.guide_sampler.pointer)
        for smpl in extra:  # e.g. llama.cpp's own grammar sampler, for benchmarks
            llama_cpp.llama_sampler_chain_add(self.pointer, smpl)
        s = sampling
        if s.temperature <= 0:
            llama_cpp.llama_sampler_chain_add(self.pointer, llama_cpp.llama_sampler_init_greedy())
        else:
            if s.top_k > 0:
                llama_cpp.llama_sampler_chain_add(self.pointer, llama_cpp.llama_sampler_init_top_k(s.top_k))
            if s.top_p < 1.0:
                llama_cpp.llama_sampler_chain_add(self.pointer, llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
            if s.min_p > 0:
                llama_cpp.llama_sampler_chain_add(self.pointer, llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
            llama_cpp.llama_sampler_chain_add(self.pointer, llama_cpp.llama_sampler_init_temp(s.temperature))
            seed = s.seed if s.seed is not None else 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: random
            llama_cpp.llama_sampler_chain_add(self.pointer, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))

    def sample(self, ctx) -> int:
        token = llama_cpp.llama_sampler_sample(self.pointer, ctx, -1)
        gs = self.guide_sampler
        if gs is not None and gs.error is not None:
            err, gs.error = gs.error, None
            raise err
        return token

    def close(self) -> None:
        if self.pointer is not None:
            llama_cpp.llama_sampler_free(self.pointer)
            self.pointer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
