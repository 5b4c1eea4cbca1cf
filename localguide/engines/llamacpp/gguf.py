"""The vocabulary of a GGUF file, read by llama.cpp (its vocabulary only, not the weights): each
token's bytes as llama.cpp writes them, which tokens end a generation."""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp
import numpy as np

from ...runtime import threads
from ...errors import ModelFileError
from .quiet import quiet_llama

# llama.cpp's llama_token_attr bits
_ATTR_UNKNOWN, _ATTR_UNUSED, _ATTR_CONTROL = 1 << 0, 1 << 1, 1 << 3
_NOT_TEXT = _ATTR_UNKNOWN | _ATTR_UNUSED | _ATTR_CONTROL


# llama_token_to_piece with a plain address for its buffer: each piece is written straight after
# the one before, in one buffer (262,144 calls for Gemma's vocabulary, no bytes object each).
_TO_PIECE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32,
                             ctypes.c_int32, ctypes.c_bool)


def _pieces(llama_cpp, vocab, ids: list, n: int) -> tuple:
    """(the bytes of tokens ``ids`` one after the other, each token's length; 0 for the others)."""
    to_piece = _TO_PIECE(ctypes.cast(llama_cpp.llama_token_to_piece, ctypes.c_void_p).value)
    cap = 16 * len(ids) + 4096
    buf = ctypes.create_string_buffer(cap)
    addr = ctypes.addressof(buf)
    lengths = [0] * n
    pos = 0
    for t in ids:
        k = to_piece(vocab, t, addr + pos, cap - pos, 0, True)
        if k < 0 or cap - pos - k < 1024:
            cap = 2 * cap + max(0, -k)
            grown = ctypes.create_string_buffer(cap)
            ctypes.memmove(grown, buf, pos)
            buf, addr = grown, ctypes.addressof(grown)
            if k < 0:
                k = to_piece(vocab, t, addr + pos, cap - pos, 0, True)
        lengths[t] = k
        pos += k
    return np.frombuffer(buf, np.uint8, pos).copy(), np.array(lengths, np.int64)


def read_vocabulary(path: Path) -> dict:
    """The arrays of ``Vocabulary`` (flat bytes, offsets, stop ids, eos id) of the GGUF file at ``path``."""
    threads.loaded()

    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelFileError(path, "not a GGUF model file (bad magic bytes)")
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    with quiet_llama():
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ModelFileError(path, "llama.cpp could not read this GGUF file (corrupt or unsupported)")
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        n = llama_cpp.llama_vocab_n_tokens(vocab)
        get_attr, is_eog = llama_cpp.llama_vocab_get_attr, llama_cpp.llama_vocab_is_eog
        stop = [t for t in range(n) if is_eog(vocab, t)]
        attrs = [get_attr(vocab, t) for t in range(n)]
        text = [t for t, a in enumerate(attrs) if a and not a & _NOT_TEXT]
        flat, lengths = _pieces(llama_cpp, vocab, text, n)
        eos = llama_cpp.llama_vocab_eos(vocab)
        eot = llama_cpp.llama_vocab_eot(vocab)
        stop += [t for t in (eos, eot) if 0 <= t < n]
    finally:
        llama_cpp.llama_model_free(model)
    if not stop:
        raise ModelFileError(path, "the model's vocabulary has no end-of-generation token")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return {
        "flat": flat,
        "offsets": offsets,
        "stop_ids": np.array(sorted(set(stop)), dtype=np.int32),
        "eos_id": np.array(eos if eos >= 0 else min(stop), dtype=np.int64),
    }
