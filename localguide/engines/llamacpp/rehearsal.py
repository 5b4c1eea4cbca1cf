"""The warm-up process: every grammar kernel compiled on a small grammar, with the argument types
of real use (``warmup.start`` launches it; ``warmup.ready`` reads the marker it leaves)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ...runtime import cache, numba_tools
from . import candidates_kernels, native_kernels
from ...protocol import MaskKind
from ...regex.compile import warm_kernels
from ...vocabulary import Vocabulary
from ...runtime import warmup
from ...grammar.cfg import normalize
from ...grammar.compiled import GrammarIndex
from ...grammar.sources import DEFAULT_MAX_IGNORED_RUN, to_cfg
from ...runtime.warmup import MARKER, MASKS, REST

_GRAMMAR = r"""
start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
STRING: /"[a-z ]*"/
NUMBER: /-?[0-9]+(\.[0-9]+)?/
%ignore /[ \t\n]+/
"""
_TEXT = b'{"a": [1, -2.5, "b c", {"d": null}], "e": true}'
_TOKENS = [b"<eos>", b"{", b"}", b"[", b"]", b",", b":", b'"', b" ", b"a", b"b", b"c", b"d", b"e", b"1", b"2", b"-",
           b".", b"5", b"t", b"r", b"u", b"n", b"l", b'{"', b'":', b'": ', b", ", b'"b', b" c", b"true", b"null",
           b"}]", b"},", b"]}", b"\n", b"  ", b'":"', b"-2", b".5"]


def warm(part: str | None = None) -> None:
    """Compile the grammar kernels (of ``part``; None: all), with the argument types of real use:
    a grammar compiled here and one loaded from a cache file, with and without a token budget,
    before and after a flush. ``part`` is the warm-up process's own (``_part``): the other
    part's kernels give way to their twins there."""
    rest = part in (None, REST)
    if rest:
        warm_kernels()  # the automaton kernels of large terminals
    vocab = Vocabulary.from_tokens(_TOKENS, stop_ids=[0])
    with numba_tools.kernels_only() if rest else contextlib.nullcontext():
        cfg = normalize(to_cfg(_GRAMMAR, "lark", "the warm-up grammar"), DEFAULT_MAX_IGNORED_RUN)
        idx = GrammarIndex(cfg, vocab, "the warm-up grammar", lazy=True)
        _walk(idx, vocab, rest)
        arrays = idx.arrays(seed=True)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "warm-up"
            cache.save(path, arrays)
            loaded = GrammarIndex.from_arrays(cache.load(path), vocab)
            _walk(loaded, vocab, rest)
            loaded.flush()
            _walk(loaded, vocab, rest)
            del loaded


def _walk(idx, vocab, sample: bool = True) -> None:
    """Write ``_TEXT`` through guides of ``idx``, greedily by the longest allowed token."""
    for budget in (None, 64):
        g = idx.guide(max_tokens=budget)
        pos = 0
        while pos < len(_TEXT):
            mask = g.mask()
            if sample:
                _sample(mask, vocab.size)
            allowed = g.allowed_token_ids().tolist()
            best = max((t for t in allowed if vocab[t] and _TEXT.startswith(vocab[t], pos)),
                       key=lambda t: len(vocab[t]), default=None)
            if best is None:
                raise RuntimeError(f"the warm-up text is not in the warm-up grammar at byte {pos}")
            g.advance(best)
            pos += len(vocab[best])
        g.mask()


def _sample(mask, n: int) -> None:
    """The sampler's kernels on a grammar mask, over a candidate array as llama.cpp lays it out:
    the Python callbacks' and the prepared block's (``GuideSampler``), whose C callbacks are
    compiled too."""
    def candidates():
        data = np.zeros((n, 3), np.int32)
        data[:, 0] = np.arange(n)
        return data, np.array([data.ctypes.data, n, -1, 0], np.int64)

    if mask.kind == MaskKind.BITS:
        data, header = candidates()
        candidates_kernels.mask_candidates_bits(header.ctypes.data, mask.data)
        logits = np.zeros(n, np.float32)
        out = np.zeros((n, 3), np.int32)
        candidates_kernels.gather_bits(mask.data, logits.ctypes.data, n, out.ctypes.data, n)
    words = np.ascontiguousarray(mask.data, np.uint64 if mask.kind == MaskKind.BITS else np.int32)
    logits = np.zeros(n, np.float32)
    out = np.zeros((1, 3), np.int32)
    candidates_kernels.gather_top(int(mask.kind), words.ctypes.data, len(words), logits.ctypes.data, n, 1,
                                  out.ctypes.data)
    data, header = candidates()
    block = np.array([int(mask.kind), words.ctypes.data, len(words), -1, 0], np.int64)
    native_kernels.prepared_apply(block, header.ctypes.data)
    native_kernels.prepared_accept(block, np.int32(0))
    native_kernels.prepared_callbacks()


def _helper() -> subprocess.Popen | None:
    """The process that compiles the ``MASKS`` part beside this one, where the machine has a second
    core (None: this one compiles both)."""
    if (os.cpu_count() or 1) < 2:
        return None
    env = dict(os.environ, **{warmup._CHILD_ENV: "1", warmup._PART_ENV: MASKS})
    code = "import sys; from localguide.engines.llamacpp.rehearsal import main; sys.exit(main([]))"
    try:
        return subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3],
                                stdin=subprocess.DEVNULL, env=env, close_fds=True)
    except OSError:
        return None


def _warm_part(part: str) -> None:
    warmup._part = part
    try:
        warm(part)
    finally:
        warmup._part = None


def main(argv: list[str]) -> int:
    """The warm-up process: with a lock path, the first one (it writes the marker once both
    parts are compiled); without, the helper of ``_helper`` (its part in ``_PART_ENV``)."""
    lock = Path(argv[0]) if argv else None
    try:
        if hasattr(os, "nice") and os.nice(0) < 10:
            os.nice(10 - os.nice(0))  # the process that waits for no one yields to the one a person waits for
        if lock is None:
            warm(warmup._part)
            return 0
        ks = warmup.kernels()
        helper = _helper()
        if helper is None:
            warm()
        else:
            _warm_part(REST)
            try:
                failed = helper.wait(timeout=warmup.STALE_S) != 0  # (its log says why, above)
            except subprocess.TimeoutExpired:
                helper.kill()
                failed = True
            if failed:
                _warm_part(MASKS)
        folder = warmup._folder()
        if folder is not None:
            tmp = folder / f"{MARKER}.{os.getpid()}"
            tmp.write_text(warmup._stamp(ks), "utf-8")
            os.replace(tmp, folder / MARKER)
        return 0
    finally:
        if lock is not None:
            try:
                if lock.read_text("utf-8") in ("", str(os.getpid())):
                    lock.unlink()
            except OSError:
                pass

