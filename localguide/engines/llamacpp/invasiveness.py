"""How much a constraint changed the model's choices (DOMINO Def. 2.1), measured while generating.

At each sampled step, from the logits the sampler sees:

- an *intervention* when the token the chain without the guide would have drawn, with the
  same random draw, is not allowed: the chain's last sampler (``dist``) is cloned with its
  generator's state, so the clone draws what the chain itself is about to draw;
- the probability mass (softmax at the sampling temperature; 1 when greedy) the mask removed;
- the negative log-likelihood of the token taken, under the model alone (temperature 1).

The first token after a healed prompt is measured among the tokens that re-make the healed
bytes (the model alone went on from the prompt as written): healing by itself is no
intervention.

Only with ``stats=True``: it costs a softmax over the vocabulary and one more pass of the
sampler chain per token.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from ...guides.logits import allowed_row, mask_logits
from ...protocol import Mask, MaskKind
from ...guides.healing import HealGuide
from .loop import logits_at

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def allowed_mass(probs: np.ndarray, guide) -> float:
    """The probability mass of the tokens ``guide`` allows now."""
    if isinstance(guide, HealGuide):  # its candidates by probability, until the rest is negligible
        cands = guide.candidates
        p = probs[cands]
        total, left = 0.0, float(p.sum())
        for j in np.argsort(-p, kind="stable").tolist():
            if left < 1e-7:
                break
            left -= float(p[j])
            if guide.accepts(int(cands[j])):
                total += float(p[j])
        return total
    mask = guide.mask()
    kind, data = mask
    if kind == MaskKind.BITS:
        return float(probs[allowed_row(mask, len(probs))].sum())
    got = float(probs[np.asarray(data, np.int64)].sum())
    return 1.0 - got if kind == MaskKind.EXCLUDED else got


class Invasiveness:
    """Accumulates the figures over one generation (see the module docstring)."""

    def __init__(self, sampling, guided_chain, n_vocab: int):
        from .sampler import SamplerChain

        self.greedy = sampling.temperature <= 0
        self.temperature = 1.0 if self.greedy else float(sampling.temperature)
        self.n_vocab = n_vocab
        self._guided = guided_chain
        self._shaping = None if self.greedy else SamplerChain(sampling, draw=False)
        self._data = np.empty(n_vocab, _TOKEN_DATA)
        self.steps = 0
        self.interventions = 0
        self.mass = []
        self.nll = []
        self._logp = None

    def before(self, ctx, i: int, guide, chain=None) -> None:
        """Measure a step before ``chain`` (default: the guided chain) samples batch position ``i``."""
        logits = logits_at(ctx, i, self.n_vocab).astype(np.float64)
        if isinstance(guide, HealGuide):
            # The healing step: the model alone would have gone on from the prompt as written,
            # so it is measured among the tokens that re-make the healed bytes.
            logits = mask_logits(Mask(MaskKind.ALLOWED, guide.candidates), logits)
            if guide.inner is None:
                guide = None
        m = logits.max()
        z = logits - m
        with np.errstate(invalid="ignore"):
            self._logp = z - np.log(np.exp(z).sum())
        if guide is None:
            self.mass.append(0.0)
            return
        zt = z / self.temperature
        probs = np.exp(zt - zt.max())
        probs /= probs.sum()
        self.mass.append(max(0.0, 1.0 - allowed_mass(probs, guide)))
        free = int(np.argmax(logits)) if self.greedy else self._free_draw(logits, chain or self._guided)
        if free >= 0 and not guide.accepts(free):
            self.interventions += 1

    def _free_draw(self, logits: np.ndarray, chain) -> int:
        """The token the chain without its guide draws from ``logits``, with the chain's next draw."""
        data = self._data
        data["id"] = np.arange(self.n_vocab, dtype=np.int32)  # (the samplers reorder the array)
        data["logit"] = logits
        data["p"] = 0.0
        arr = llama_cpp.llama_token_data_array(
            data=ctypes.cast(data.ctypes.data, ctypes.POINTER(llama_cpp.llama_token_data)),
            size=self.n_vocab, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._shaping.pointer, ctypes.byref(arr))
        n = llama_cpp.llama_sampler_chain_n(chain.pointer)
        dist = llama_cpp.llama_sampler_clone(llama_cpp.llama_sampler_chain_get(chain.pointer, n - 1))
        try:
            llama_cpp.llama_sampler_apply(dist, ctypes.byref(arr))
        finally:
            llama_cpp.llama_sampler_free(dist)
        if arr.selected < 0:
            return -1
        return int(arr.data[arr.selected].id)

    def after(self, token: int) -> None:
        self.steps += 1
        self.nll.append(float(-self._logp[token]))

    def fill(self, stats) -> None:
        stats.interventions = self.interventions
        stats.mass_removed_mean = float(np.mean(self.mass)) if self.mass else 0.0
        stats.mass_removed_max = float(np.max(self.mass)) if self.mass else 0.0
        stats.nll = float(np.mean(self.nll)) if self.nll else 0.0
        stats.measured_tokens = self.steps

    def close(self) -> None:
        if self._shaping is not None:
            self._shaping.close()
            self._shaping = None
