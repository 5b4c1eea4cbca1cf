"""The bridge into llama.cpp: the model, the generation loop and the sampler that applies a guide's masks."""

from .model import Model, default_model_path, load
from .sampler import GuideSampler, SamplerChain, Sampling

__all__ = ["GuideSampler", "Model", "SamplerChain", "Sampling", "default_model_path", "load"]
