"""Sampling settings, their defaults and their checks, written once: the library, the command
line and the server take them from here. Engine-neutral (no llama.cpp)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from .errors import ArgumentError


@dataclass(frozen=True)
class Sampling:
    """Usual sampling settings; ``temperature`` 0 is greedy. Checked when made: a temperature, top-p
    or min-p that is not a finite number in its range, a negative top-k or a seed that is not an
    int is an ``ArgumentError`` naming it."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None

    def __post_init__(self):
        for name, lo, hi in (("temperature", 0.0, math.inf), ("top_p", 0.0, 1.0), ("min_p", 0.0, 1.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or not lo <= v <= hi:
                within = "0 or more (0: greedy)" if hi == math.inf else f"from {lo:g} to {hi:g}"
                raise ArgumentError(f"{name} must be a finite number {within}, got {v!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, numbers.Integral) or self.top_k < 0:
            raise ArgumentError(f"top_k must be an int, 0 or more (0: off), got {self.top_k!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral)):
            raise ArgumentError(f"seed must be an int or None, got {self.seed!r}")


DEFAULT = Sampling()  # the defaults, for signatures and request parsers
