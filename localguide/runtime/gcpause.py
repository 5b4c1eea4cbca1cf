"""Python's cycle collector paused while a compiler builds its structures.

A schema or grammar compile allocates hundreds of thousands of small containers (AST
nodes, rule tuples, dicts); each allocation burst triggers collections that traverse every
live object, the caller's included. On MaskBench's largest schemas that is 0.2-0.4 s of a
2 s compile. The compilers make no cyclic garbage worth collecting early, and the collector
runs again as soon as the outermost compile returns.
"""

from __future__ import annotations

import gc

from .held import Held


def _disable() -> bool:
    enabled = gc.isenabled()
    gc.disable()
    return enabled


# Disable the cycle collector inside (nested and concurrent uses re-enable it once, at the end).
paused = Held(_disable, lambda enabled: gc.enable() if enabled else None)
