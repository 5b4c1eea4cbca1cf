"""Logits that do not depend on the batch: the same text whatever the prompt cache held and
whether speculation is on.

llama.cpp's CPU backend picks its kernels by the shape of a decode, and they round differently:

- a batch of 64 tokens or more attends through tiled flash attention (queries kept in f32), a
  smaller one row by row (queries rounded to f16);
- K-quant matrix products of 8 rows or more take a tiled kernel, and of 2 rows or more
  llamafile's sgemm where it covers the type;
- weights repacked at load (Q4_K, Q6_K, Q4_0, ... on AVX2) are multiplied 4 activation rows at a
  time by a gemm kernel, and the rows left over by a gemv kernel.

So a position's logits differ in their last bits (by up to 1.4 logits on Gemma 3's Q4_K_M, 0.7
on SmolLM2's Q4_1) with the batch it is decoded in, and with the batches the positions before it
were decoded in (their keys and values). A prompt decoded after a cached prefix, a verification
batch of speculation and a one-token decode each see other logits, and greedy text parts where
two tokens are nearly tied.

The reference path of the CPU backend (``ggml_backend_cpu_set_use_ref``: each output element one
``vec_dot``, attention row by row, the KV cache never split across threads), with the weights
as the file stores them (not repacked), computes each row the same way in every batch: the logits
are bitwise those of one-token decoding (``tests/engines/llamacpp/test_reproducible.py``, both models).
``load(reproducible=True)``, the default, asks for both; ``Model.reproducible`` says whether it
holds, and ``Model.reproducible_why`` why not where it does not.

The reference kernels cost a long prompt up to twice the time (attention row by row over the
whole context). So a prompt decodes its first positions on the fastest kernels, in whole chunks of
128 tokens aligned at position 0 (``fast_layout``), and the rest (its last 1 to 128 tokens, the
generated ones) on the reference kernels. Each position's keys and values are then a function of
the prompt and that layout alone, provided a cached position is reused only where a cold decode
computes it the same way (``reusable``: a shared prefix is kept up to a multiple of 128). A
conversation decodes fast only within its first prompt (the messages before the first answer):
the turns after it, whose positions an earlier turn decoded one by one, stay on the reference
kernels, so the cache holds each turn's history as a cold decode computes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from pathlib import Path

# llama_context::get_sched() const, as the Itanium and MSVC C++ ABIs name it (no C entry point
# hands out a context's backends)
_GET_SCHED = ("_ZNK13llama_context9get_schedEv", "?get_sched@llama_context@@QEBAPEAUggml_backend_sched@@XZ")
_patching = threading.Lock()
_funcs = None


@contextlib.contextmanager
def stored_weights():
    """While inside, ``llama_cpp.Llama`` loads a model with its weights as the file stores them
    (``use_extra_bufts`` off: no repacking). Yields '' where that holds, else why not."""
    import llama_cpp.llama_cpp as lc

    why = _no_stored_weights()
    if why:
        yield why
        return
    with _patching:  # (Llama() reads the defaults through the module: one loader at a time)
        default = lc.llama_model_default_params

        def stored():
            params = default()
            params.use_extra_bufts = False
            return params

        lc.llama_model_default_params = stored
        try:
            yield ""
        finally:
            lc.llama_model_default_params = default


def reference_kernels(ctx):
    """Put the CPU backends of the llama.cpp context ``ctx`` on the reference kernels: (a function
    of one bool that puts them on the reference kernels (True) or the fastest (False), '') where
    that makes its logits independent of the batch, else (None, why not)."""
    why = _no_reference_kernels()
    if why:
        return None, why
    get_sched, n_backends, backend, is_cpu, use_ref, name = _functions()
    sched = get_sched(ctx)
    if not sched:
        return None, "the llama.cpp context has no scheduler"
    backends = [backend(sched, i) for i in range(n_backends(sched))]
    cpus = [b for b in backends if is_cpu(b)]
    others = [name(b).decode("utf-8", "replace") for b in backends if not is_cpu(b)]
    if others:
        # (a GPU or BLAS backend takes batches with kernels of its own, chosen by the batch too:
        # the CPU's layers stay on the fastest kernels, nothing being reproducible)
        return None, f"backends other than the CPU's decode too ({', '.join(others)})"

    def to(reference: bool) -> None:
        for b in cpus:
            use_ref(b, reference)

    to(True)
    return to, ""


CHUNK = 128  # tokens of a fast chunk: about as fast as a micro-batch of 512, and a shared prefix
# is kept up to a multiple of it (two prompts of different lengths lay out their first chunks alike)


def fast_layout(n_prompt: int, chunk: int, limit: int | None = None) -> int:
    """How many leading positions of a prompt of ``n_prompt`` tokens decode on the fastest kernels,
    in whole chunks of ``chunk``: all before the prompt's last token (whose logits are sampled
    from, and which is decoded again when the cache holds the whole prompt) and before position
    ``limit`` where given (a conversation's first prompt: what follows it grows turn by turn)."""
    last = min(n_prompt, n_prompt if limit is None else limit) - 1
    return max(0, last // chunk * chunk)


def reusable(same: int, cached_fast: int, fast: int, chunk: int) -> int:
    """How many leading positions of the KV cache a prompt may keep: ``same`` of its tokens agree
    with the cache's, whose first ``cached_fast`` were decoded on the fastest kernels (in aligned
    chunks) and the rest on the reference kernels; the prompt decodes its first ``fast`` fast. A
    position is kept only where a cold decode of the prompt computes it the same way (fast in the
    same chunk, or on the reference kernels after the same keys and values), and where the fast
    decoding goes on, at the start of a chunk."""
    keep = same if cached_fast == fast else min(same, cached_fast, fast)
    return keep if keep >= fast else keep // chunk * chunk


def available() -> str:
    """'' where this llama-cpp-python can make logits independent of the batch (CPU layers), else why not."""
    return _no_stored_weights() or _no_reference_kernels()


def _no_stored_weights() -> str:
    import llama_cpp.llama_cpp as lc

    if "use_extra_bufts" not in dict(lc.llama_model_params._fields_):
        return "this llama-cpp-python cannot turn off the repacking of weights (no use_extra_bufts)"
    return ""


def _no_reference_kernels() -> str:
    try:
        _functions()
    except (OSError, AttributeError) as e:
        return f"this llama.cpp does not expose its reference kernels ({e})"
    return ""


def _functions():
    global _funcs
    if _funcs is None:
        import llama_cpp
        from llama_cpp._ctypes_extensions import load_shared_library

        libs = [llama_cpp.llama_cpp._lib]  # (a build that links ggml into libllama has it all there)
        folder = Path(llama_cpp.__file__).parent / "lib"
        for name in ("ggml-base", "ggml-cpu"):
            try:
                libs.append(load_shared_library(name, folder))
            except (OSError, RuntimeError, FileNotFoundError):
                pass

        def find(*symbols):
            for lib in libs:
                for symbol in symbols:
                    f = getattr(lib, symbol, None)
                    if f is not None:
                        return f
            raise AttributeError(f"no {symbols[0]} in llama.cpp's libraries")

        p = ctypes.c_void_p
        get_sched = find(*_GET_SCHED)
        get_sched.argtypes, get_sched.restype = [p], p
        n_backends = find("ggml_backend_sched_get_n_backends")
        n_backends.argtypes, n_backends.restype = [p], ctypes.c_int
        backend = find("ggml_backend_sched_get_backend")
        backend.argtypes, backend.restype = [p, ctypes.c_int], p
        name = find("ggml_backend_name")
        name.argtypes, name.restype = [p], ctypes.c_char_p
        is_cpu = find("ggml_backend_is_cpu")
        is_cpu.argtypes, is_cpu.restype = [p], ctypes.c_bool
        use_ref = find("ggml_backend_cpu_set_use_ref")
        use_ref.argtypes, use_ref.restype = [p, ctypes.c_bool], None
        _funcs = (get_sched, n_backends, backend, is_cpu, use_ref, name)
    return _funcs
