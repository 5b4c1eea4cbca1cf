"""The llama.cpp engine: the model, the generation loop, the sampler that applies a guide's masks and
its kernels, the batch engine of the server, the GGUF vocabulary reader, llama.cpp's log kept quiet."""

from .model import Model, default_model_path, load
from .sampler import GuideSampler, SamplerChain, Sampling

__all__ = ["GuideSampler", "Model", "SamplerChain", "Sampling", "default_model_path", "load"]
