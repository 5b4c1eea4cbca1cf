"""What this llama.cpp build is and can do, for ``localguide info``."""

from __future__ import annotations

import llama_cpp


def backend() -> tuple[str, bool]:
    """(llama.cpp's backends as its system info names them, whether it can offload layers to a GPU)."""
    system = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    names = [n for n in ("CUDA", "Metal", "Vulkan", "ROCm", "HIP", "SYCL", "OpenCL", "BLAS") if n in system]
    return ", ".join(["CPU"] + names), bool(llama_cpp.llama_supports_gpu_offload())


def library_version() -> str:
    """llama-cpp-python's version."""
    return llama_cpp.__version__
