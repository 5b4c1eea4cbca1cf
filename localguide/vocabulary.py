"""The token vocabulary of a GGUF model, as raw bytes.

Tokens are read through llama.cpp itself (``llama_token_to_piece`` with special
rendering, and token attributes), with the weights left unloaded. Control, unused
and unknown tokens get empty byte strings: they never match text. The stop ids
(EOS, end of turn and every other end-of-generation token) are kept apart.
"""

from __future__ import annotations

import ctypes
import hashlib
from functools import cached_property
from pathlib import Path

import numpy as np

from . import cache
from .errors import ModelFileError
from .progress import stage
from .quiet import quiet_llama

# llama.cpp's llama_token_attr bits
_ATTR_UNKNOWN, _ATTR_UNUSED, _ATTR_CONTROL = 1 << 0, 1 << 1, 1 << 3
_NOT_TEXT = _ATTR_UNKNOWN | _ATTR_UNUSED | _ATTR_CONTROL


class Trie:
    """The non-empty tokens as a preorder byte trie (see ``kernels.build_trie``)."""

    __slots__ = ("node_byte", "node_depth", "subtree_end", "tok_start", "tok_count", "order")
    FIELDS = __slots__

    def __init__(self, arrays: dict):
        for name in self.FIELDS:
            a = arrays[name]
            a.flags.writeable = False
            setattr(self, name, a)

    @classmethod
    def build(cls, flat: np.ndarray, offsets: np.ndarray, rows=None) -> dict:
        """The trie's arrays; ``rows``: the tokens as sorted rows (``vocabulary_numpy.sorted_rows``)
        when made already."""
        from . import vocabulary_kernels as kernels
        from . import vocabulary_numpy
        from .numba_tools import compiled

        rows = vocabulary_numpy.sorted_rows(flat, offsets) if rows is None else rows
        order = rows.order.astype(np.int32)
        if compiled(kernels.build_trie):
            arrays = dict(zip(cls.FIELDS[:5], kernels.build_trie(flat, offsets, order)))
        else:
            arrays = dict(zip(cls.FIELDS[:5], vocabulary_numpy.build_trie(flat, offsets, order, rows)))
        arrays["order"] = order
        return arrays

    @staticmethod
    def _valid(arrays: dict) -> bool:
        n = len(arrays["node_byte"])
        return all(len(arrays[f]) == n for f in Trie.FIELDS[:5]) and int(arrays["subtree_end"][0]) == n

    @property
    def arrays(self) -> tuple:
        return (self.node_byte, self.node_depth, self.subtree_end, self.tok_start, self.tok_count, self.order)


class Vocabulary:
    """Token id → raw bytes, plus the stop ids. Immutable; build with ``from_gguf``."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, stop_ids, *, eos_id: int | None = None,
                 name: str = "vocabulary"):
        """From the concatenated token bytes and ``offsets`` (token ``i`` is ``flat[offsets[i]:offsets[i+1]]``)."""
        self.stop_ids = np.array(sorted(set(int(t) for t in stop_ids)), dtype=np.int32)
        n = len(offsets) - 1
        if len(self.stop_ids) == 0:
            raise ValueError("a vocabulary needs at least one stop (end-of-generation) token id")
        if self.stop_ids[0] < 0 or self.stop_ids[-1] >= n:
            raise ValueError("stop token ids must be token ids of the vocabulary")
        self.eos_id = int(self.stop_ids[0]) if eos_id is None else int(eos_id)
        self.name = name
        lengths = np.diff(np.asarray(offsets, dtype=np.int64))
        if np.any(lengths[self.stop_ids]):
            # Stop tokens never contribute text, whatever their piece renders to.
            keep = np.ones(len(flat), dtype=bool)
            for t in self.stop_ids:
                keep[offsets[t]:offsets[t + 1]] = False
            flat = np.asarray(flat)[keep]
            lengths[self.stop_ids] = 0
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.flat = np.ascontiguousarray(flat, dtype=np.uint8)
        self.offsets.flags.writeable = False
        self.flat.flags.writeable = False

    @classmethod
    def from_tokens(cls, tokens, stop_ids, **kwargs) -> "Vocabulary":
        """From a list of byte strings (e.g. a synthetic vocabulary for tests)."""
        tokens = [bytes(t) for t in tokens]
        offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in tokens], out=offsets[1:])
        return cls(np.frombuffer(b"".join(tokens), dtype=np.uint8), offsets, stop_ids, **kwargs)

    # -- construction ----------------------------------------------------------------
    @classmethod
    def from_gguf(cls, path) -> "Vocabulary":
        """Read the vocabulary of the GGUF model at ``path`` (cached on disk by file identity)."""
        path = Path(path)
        try:
            st = path.stat()
        except OSError:
            raise ModelFileError(path, "model file not found") from None
        if path.is_dir():
            raise ModelFileError(path, "expected a .gguf model file, got a directory")
        key = cache.key_path("vocab", str(path.resolve()), str(st.st_size), str(st.st_mtime_ns))
        arrays = cache.cached(key, lambda: _read_gguf_vocab_reported(path), _looks_like_vocab)
        return cls(arrays["flat"], arrays["offsets"], arrays["stop_ids"],
                   eos_id=int(arrays["eos_id"]), name=path.name)

    # -- queries ---------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def size(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` adds to the text (empty for control and stop tokens)."""
        return self.flat[self.offsets[token_id]:self.offsets[token_id + 1]].tobytes()

    def decode(self, token_ids) -> bytes:
        return b"".join(self[int(t)] for t in token_ids)

    @cached_property
    def fingerprint(self) -> str:
        """Identifies the byte content and stop ids: equal fingerprints, interchangeable indexes."""
        h = hashlib.sha256()
        h.update(self.offsets.tobytes())
        h.update(self.flat.tobytes())
        h.update(self.stop_ids.tobytes())
        return h.hexdigest()

    @cached_property
    def trie(self) -> Trie:
        """The byte trie of the text tokens (built once per vocabulary, then loaded from the disk cache)."""
        path = cache.key_path("trie", self.fingerprint)
        return Trie(cache.cached(path, lambda: Trie.build(self.flat, self.offsets, self.token_rows), Trie._valid))

    @cached_property
    def token_rows(self):
        """The text tokens as rows of bytes, sorted by their bytes as in the trie
        (``vocabulary_numpy.sorted_rows``): what a first use's numpy paths read, without the trie."""
        from .vocabulary_numpy import sorted_rows

        return sorted_rows(self.flat, self.offsets)

    def __repr__(self) -> str:
        return f"Vocabulary({self.name!r}, {self.size} tokens, stop ids {self.stop_ids.tolist()})"


def _looks_like_vocab(arrays: dict) -> bool:
    return (arrays["offsets"][-1] == len(arrays["flat"]) and len(arrays["stop_ids"]) > 0
            and int(arrays["eos_id"]) >= 0)


def _read_gguf_vocab_reported(path):
    with stage(f"reading the vocabulary of {Path(path).name}"):
        return _read_gguf_vocab(path)


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


def _read_gguf_vocab(path: Path) -> dict:
    import llama_cpp

    from . import threads

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
