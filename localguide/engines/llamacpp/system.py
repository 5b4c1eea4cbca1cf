"""What this llama.cpp build is and can do, for ``localguide info``."""

from __future__ import annotations

import llama_cpp


def backend() -> tuple[str, str]:
    """(llama.cpp's backends as its system info names them, whether and where it can offload layers)."""
    from . import rpc

    system = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    names = [n for n in ("CUDA", "Metal", "Vulkan", "ROCm", "HIP", "SYCL", "OpenCL", "BLAS", "RPC") if n in system]
    if rpc.offload_devices():
        offload = "available"
    elif llama_cpp.llama_supports_gpu_offload():  # (an RPC build: to workers, where some are added)
        offload = "not available here (no GPU found; to other machines' workers: --workers)"
    else:
        offload = "not available (a CPU build of llama.cpp)"
    return ", ".join(["CPU"] + names), offload


def library_version() -> str:
    """llama-cpp-python's version."""
    return llama_cpp.__version__
