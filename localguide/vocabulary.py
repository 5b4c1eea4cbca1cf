"""The token vocabulary of a GGUF model, as raw bytes.

Tokens are read through llama.cpp itself (``llama_token_to_piece`` with special
rendering, and token attributes), with the weights left unloaded. Control, unused
and unknown tokens get empty byte strings: they never match text. The stop ids
(EOS, end of turn and every other end-of-generation token) are kept apart.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path

import numpy as np

from .runtime import cache
from .errors import ModelFileError
from .runtime.progress import stage


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
        from .runtime.numba_tools import compiled

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
    from .engines.llamacpp.gguf import read_vocabulary  # (the GGUF file is read by llama.cpp itself)

    with stage(f"reading the vocabulary of {Path(path).name}"):
        return read_vocabulary(path)
