"""The decode loops behind the server: requests queue, one thread decodes.

``SerialEngine`` (``--parallel 1``) serves one request at a time through
``Model.generate_tokens``: speculation, the prompt cache and token healing as in the library.
``BatchEngine`` (``--parallel N``) keeps N sequences in one llama.cpp context of its own and
decodes, per step, one ``llama_decode`` with a token of each generating sequence (and the
prompts of new ones, as far as the batch holds), each sequence sampled through its own sampler
chain and guide. It decodes one token per step per sequence (no speculation, no healing), and
each sequence keeps what its KV cache holds for the next request that shares its prefix.

Guides are walked in the engine's thread only; ``lock`` is held while they are, so that a
request's guide can be made in another thread (``prepare``) from the same compiled constraint.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import llama_cpp

from .loop import GenerationStats
from .sampler import Sampling, SamplerChain


@dataclass(eq=False)
class Work:
    """One generation: its prompt's tokens, its guide and sampling, and where its tokens go.
    ``on_token`` runs in the engine's thread and returns False to stop there (a stop string);
    ``on_done(reason, error, stats)`` ends it, with ``reason`` "stop", "length" or "cancelled".
    ``cancelled`` may be set from any thread."""

    prompt_tokens: list
    guide: object
    sampling: Sampling
    max_tokens: int
    on_token: Callable[[int], bool]
    on_done: Callable[[str, BaseException | None, GenerationStats | None], None]
    counts_key: str | None = None
    healed: bytes = b""
    stats: bool = False
    fast_limit: int | None = None  # (a chat's first turn's prompt: Model.generate_tokens)
    cancelled: bool = False
    submitted: float = field(default_factory=time.perf_counter)


def _reason(n: int, work: Work) -> str:
    """"length" where the budget, not the text, ended it."""
    finished = work.guide is not None and work.guide.is_finished()
    return "length" if n >= work.max_tokens and not finished else "stop"


class SerialEngine:
    """One request at a time, through the library's own loop (see the module docstring)."""

    parallel = 1

    def __init__(self, model, context: int):
        self.model, self.context = model, context
        self.lock = threading.RLock()
        self._queue: "queue.Queue[Work | None]" = queue.Queue()
        self._current: Work | None = None
        self._thread = threading.Thread(target=self._run, name="localguide-engine", daemon=True)
        self._thread.start()

    def submit(self, work: Work) -> None:
        self._queue.put(work)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def waiting(self) -> int:
        return self._queue.qsize()

    def active(self) -> int:
        return int(self._current is not None)

    def _run(self) -> None:
        while (work := self._queue.get()) is not None:
            if work.cancelled:
                work.on_done("cancelled", None, None)
                continue
            self._current = work
            try:
                self._serve(work)
            finally:
                self._current = None

    def _serve(self, work: Work) -> None:
        m = self.model
        n, reason, error, gen, counts = 0, "stop", None, None, None
        try:
            tokens = work.prompt_tokens
            if work.guide is not None:
                counts = m.draft_counts(work.counts_key)
            gen = m.generate_tokens(tokens, work.guide, work.max_tokens, work.sampling, speculate=True,
                                    counts=counts, healed=work.healed, stats=work.stats,
                                    fast_limit=work.fast_limit)
            while True:
                with self.lock:  # (a guide is walked here only)
                    token = next(gen, None)
                if token is None:
                    reason = _reason(n, work)
                    break
                n += 1
                if work.cancelled:
                    reason = "cancelled"
                    break
                if not work.on_token(token):
                    break
        except Exception as e:  # noqa: BLE001 - the request's error, the engine goes on
            error = e
        finally:
            if gen is not None:
                gen.close()
            if counts is not None:
                counts.save()
        work.on_done(reason, error, m.last_stats)


@dataclass(eq=False)
class _Slot:
    seq: int
    kv: list = field(default_factory=list)    # the tokens this sequence's KV cache holds
    work: Work | None = None
    chain: SamplerChain | None = None
    pending: list = field(default_factory=list)  # prompt tokens still to decode
    prompt: list = field(default_factory=list)
    out: list = field(default_factory=list)
    stats: GenerationStats | None = None
    t0: float = 0.0


class BatchEngine:
    """N sequences in one llama.cpp context, one decode per step (see the module docstring)."""

    def __init__(self, model, parallel: int, context: int, n_batch: int = 512):
        self.model, self.parallel, self.context = model, parallel, context
        self.lock = threading.RLock()
        params = llama_cpp.llama_context_params()
        ctypes.memmove(ctypes.byref(params), ctypes.byref(model.llama.context_params), ctypes.sizeof(params))
        params.n_seq_max = parallel
        params.n_ctx = context * parallel
        params.kv_unified = False  # (each sequence its own cells: attention over its own tokens only)
        params.n_batch = params.n_ubatch = max(n_batch, parallel)
        self.n_batch = params.n_batch
        self.ctx = llama_cpp.llama_init_from_model(model.llama._model.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {parallel} sequences × {context} tokens")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.slots = [_Slot(i) for i in range(parallel)]
        self._stop = model._stop
        self._queue: list[Work] = []
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="localguide-batch-engine", daemon=True)
        self._thread.start()

    def submit(self, work: Work) -> None:
        with self._cv:
            self._queue.append(work)
            self._cv.notify()

    def waiting(self) -> int:
        with self._cv:
            return len(self._queue)

    def active(self) -> int:
        return sum(s.work is not None for s in self.slots)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=10)
        for s in self.slots:
            if s.work is not None:
                self._finish(s, "cancelled", None)
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        self.ctx = None

    # -- the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._queue and not any(s.work for s in self.slots):
                    self._cv.wait()
                if self._closed:
                    return
                waiting, self._queue = self._queue, []
            waiting = self._admit(waiting)
            if waiting:
                with self._cv:
                    self._queue[:0] = waiting
            if any(s.work for s in self.slots):
                self._step()

    def _admit(self, waiting: list) -> list:
        """Give waiting requests the idle sequences (the one whose cache shares most of the prompt);
        return those still waiting."""
        left = []
        for work in waiting:
            if work.cancelled:
                work.on_done("cancelled", None, None)
                continue
            idle = [s for s in self.slots if s.work is None]
            if not idle:
                left.append(work)
                continue
            try:
                self._start(work, idle)
            except Exception as e:  # noqa: BLE001 - the request's error
                work.on_done("stop", e, None)
        return left

    def _start(self, work: Work, idle: list) -> None:
        tokens = work.prompt_tokens
        slot = max(idle, key=lambda s: (_common(s.kv, tokens), -s.seq))
        if len(tokens) + work.max_tokens > self.context:
            raise ValueError(f"the prompt ({len(tokens)} tokens) plus max_tokens ({work.max_tokens}) exceeds "
                             f"a sequence's context ({self.context} tokens)")
        same = _common(slot.kv, tokens[:-1])  # (the last prompt token is decoded again: its logits)
        if not llama_cpp.llama_memory_seq_rm(self.mem, slot.seq, same, -1):
            llama_cpp.llama_memory_seq_rm(self.mem, slot.seq, 0, -1)
            same = 0
        slot.kv = slot.kv[:same]
        slot.work, slot.prompt, slot.pending, slot.out = work, tokens, tokens[same:], []
        slot.chain = SamplerChain(work.sampling, work.guide)
        slot.stats = GenerationStats(prompt_tokens=len(tokens), cached_tokens=same)
        slot.t0 = time.perf_counter()

    def _step(self) -> None:
        active = [s for s in self.slots if s.work is not None]
        for s in active:
            if s.work.cancelled:
                self._finish(s, "cancelled", None)
        active = [s for s in active if s.work is not None]
        if not active:
            return
        n, rows = 0, []  # rows: (sequence, its tokens in the batch, the batch index of its logits or None)
        gen = [s for s in active if not s.pending]
        room = self.n_batch - len(gen)
        for s in gen:
            rows.append((s, [s.out[-1]], n))
            n = self._fill(s, [s.out[-1]], n, True)
        for s in active:
            if s.pending and room > 0:
                chunk, s.pending = s.pending[:room], s.pending[room:]
                room -= len(chunk)
                last = not s.pending
                rows.append((s, chunk, n + len(chunk) - 1 if last else None))
                n = self._fill(s, chunk, n, last)
        self.batch.n_tokens = n
        rc = llama_cpp.llama_decode(self.ctx, self.batch)
        if rc != 0:
            for s in active:
                self._finish(s, "stop", RuntimeError(f"llama_decode failed with code {rc}"))
            return
        for s, tokens, _ in rows:
            s.kv.extend(tokens)
            s.stats.decode_calls += 1
        with self.lock:  # (guides are walked here)
            for s, _, at in rows:
                if at is not None and s.work is not None:
                    self._sample(s, at)

    def _fill(self, s: _Slot, tokens: list, n: int, logits_last: bool) -> int:
        b = self.batch
        pos = len(s.kv)
        for j, t in enumerate(tokens):
            b.token[n] = t
            b.pos[n] = pos + j
            b.n_seq_id[n] = 1
            b.seq_id[n][0] = s.seq
            b.logits[n] = logits_last and j == len(tokens) - 1
            n += 1
        return n

    def _sample(self, s: _Slot, idx: int) -> None:
        work = s.work
        try:
            token = s.chain.sample(self.ctx, idx)
        except Exception as e:  # noqa: BLE001
            self._finish(s, "stop", e)
            return
        if token in self._stop:
            self._finish(s, "stop", None)
            return
        s.out.append(token)
        s.stats.tokens += 1
        if not work.on_token(token):
            self._finish(s, "stop", None)
        elif len(s.out) >= work.max_tokens or (work.guide is not None and work.guide.is_finished()):
            self._finish(s, _reason(len(s.out), work), None)

    def _finish(self, s: _Slot, reason: str, error) -> None:
        work, s.work = s.work, None
        if s.chain is not None:
            s.chain.close()
            s.chain = None
        s.pending = []
        if s.stats is not None:
            s.stats.seconds = time.perf_counter() - s.t0
        work.on_done(reason, error, s.stats)


def _common(a: list, b: list) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
