"""The llama.cpp engine: the model, the generation loop, the sampler that applies a guide's masks and
its kernels, the batch engine of the server, the GGUF vocabulary reader, llama.cpp's log kept quiet.

Its names are imported when first asked for: a kernel module of this folder (the warm-up names
the sampler's) is then imported without llama.cpp itself."""

from __future__ import annotations

import importlib

_NAMES = {"Model": ".model", "default_model_path": ".model", "load": ".model",
          "GuideSampler": ".sampler", "SamplerChain": ".sampler", "Sampling": ".sampler"}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
