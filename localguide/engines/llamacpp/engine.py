"""One generation engine over the sequences of one llama.cpp context.

Each sequence (a ``Lane``) has its own guide, sampler chains, healing, drafter, budget, stop
tokens and stats, and runs the loop of ``localguide.engines.llamacpp.loop`` as a coroutine that
asks for its decodes. ``step`` decodes the requests of every lane in one ``llama_decode`` (drafts
of several sequences verified together; prompt chunks fill the room left; a chunk for the fastest
kernels decodes alone) and hands each lane its logits. ``stream`` drives one lane alone, lazily:
``Model.generate_tokens`` is the model's own engine (one sequence, the model's context) driven so.

The engine keeps what each sequence's KV cache holds. A new lane reuses the longest prefix of its
prompt that any sequence holds (its own: the cells stay; another's: ``llama_memory_seq_cp`` makes
the cells shared, as the context's KV cache is unified), so a shared instruction, few-shot prefix
or system prompt is decoded once; a lane whose prompt shares more with a lane still decoding its
prompt waits for that prefix rather than decoding it too.

Speculation is judged per decode shape: a ``DecodeCost`` per number of sequences in the decode,
timing decodes with drafts against those without (with one sequence, the model's own, as before).
"""

from __future__ import annotations

import ctypes
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import llama_cpp
import numpy as np

from ...errors import ArgumentError, LocalguideError
from ...guides.healing import HealGuide
from ...speculate import CountModel, DecodeCost
from ...speculate.drafts import MAX_DRAFT
from . import loop
from .invasiveness import Invasiveness
from .loop import PREFIX, Batch, Decode, Decoded, GenerationStats
from .quiet import quiet_llama
from .reproducible import CHUNK, fast_layout, reusable
from .sampler import SamplerChain, Sampling

MIN_SHARED = 32  # prompt tokens in common worth waiting for another lane to decode


@dataclass
class Request:
    """One generation: the prompt's tokens, the guide (None: unconstrained) and how to sample.
    As ``Model.generate_tokens``; ``on_token`` (the drivers of ``step``): called with each token,
    False stops the lane there."""

    prompt_tokens: list
    guide: object
    max_tokens: int
    sampling: Sampling
    extra_samplers: tuple = ()
    opportunistic: bool = False
    chain: Callable = SamplerChain
    speculate: bool = False
    fast_forward: bool = False
    counts: CountModel | None = None
    healed: bytes = b""
    stats: bool = False
    cache_prompt: bool = True
    fast_limit: int | None = None
    on_token: Callable[[int], bool] | None = None


@dataclass(eq=False)
class Lane:
    """A sequence of an engine being generated (``loop.run`` reads its fields)."""

    engine: "Engine"
    seq: int
    request: Request
    prompt: list
    guide: object
    max_tokens: int
    stop: set
    stats: GenerationStats
    fast: int
    n_max: int
    speculate: bool
    fast_forward: bool
    guided: object = None
    free: object = None
    heal: tuple | None = None
    report: Invasiveness | None = None
    drafter: object = None
    out: list = field(default_factory=list)
    gen: object = None
    pending: object = None  # the lane's request to the engine: PREFIX or a Decode
    order: int = 0  # (lanes opened earlier come first)
    decoded: int = 0  # prompt tokens its KV cache holds so far
    done: bool = False
    reason: str = ""  # "stop", "length", "cancelled" once done
    error: BaseException | None = None
    cancelled: bool = False

    def finish_reason(self) -> str:
        """"length" where the budget, not the text, ended it."""
        finished = self.guide is not None and self.guide.is_finished()
        return "length" if self.stats.tokens >= self.max_tokens and not finished else "stop"


class Engine:
    """Generation over the ``n_seq`` sequences of the llama.cpp context ``ctx`` (see the module
    docstring). ``kernels``: the switch of the context's CPU kernels
    (``localguide.engines.llamacpp.reproducible``) or None; ``cost``: the ``DecodeCost`` of one
    sequence's decodes (a function: the model's, which a caller may replace); ``on_reset``:
    called where the whole KV cache is emptied; ``owned``: ``close`` frees the context."""

    def __init__(self, model, ctx, n_seq: int = 1, kernels=None, cost: Callable[[], DecodeCost] | None = None,
                 on_reset: Callable[[], None] | None = None, owned: bool = False):
        self.model, self.ctx, self.n_seq, self.kernels = model, ctx, n_seq, kernels
        self.mem = llama_cpp.llama_get_memory(ctx)
        self.n_batch = max(1, llama_cpp.llama_n_batch(ctx))
        self.chunk = max(1, min(CHUNK, self.n_batch, llama_cpp.llama_n_ubatch(ctx)))
        # (a sequence's positions: with several, each keeps to its share of the cells)
        self.n_ctx = llama_cpp.llama_n_ctx(ctx) // n_seq
        room = self.n_batch - n_seq * (MAX_DRAFT + 2)  # (generating lanes' tokens first, prompts after)
        self.prefill_chunk = self.n_batch if n_seq == 1 else max(1, room)
        self.batch = Batch(self.n_batch)
        self.kv: list[list[int]] = [[] for _ in range(n_seq)]  # the tokens each sequence's cache holds
        self.kv_fast = [0] * n_seq  # how many of them decoded on the fastest kernels (``fast_layout``)
        self.lanes: list[Lane | None] = [None] * n_seq
        self._cost_one = cost
        self._costs: dict[int, DecodeCost] = {}
        self._on_reset = on_reset
        self._owned = owned
        self._opened = 0
        # (time.monotonic() since when its owner's calls into llama.cpp have run: a watchdog's; a
        # backend may return from llama_decode at once and wait where the logits are read)
        self.busy_since: float | None = None
        self.stop = set(model.vocabulary.stop_ids.tolist())
        # A recurrent or hybrid model's memory copies a sequence's whole state, whatever the range:
        # no prefix is taken from another sequence there.
        llm = model.llama.model
        self.shares = n_seq > 1 and not (llama_cpp.llama_model_is_recurrent(llm) or llama_cpp.llama_model_is_hybrid(llm))
        self.closed = False

    # -- lanes --------------------------------------------------------------------------------
    def idle(self) -> list[int]:
        return [i for i, lane in enumerate(self.lanes) if lane is None]

    def active(self) -> list[Lane]:
        return [lane for lane in self.lanes if lane is not None]

    def open(self, request: Request, seq: int | None = None, take: bool = False) -> Lane:
        """A lane for ``request`` on sequence ``seq`` (None: the idle one whose cache shares most
        of the prompt; ``take``: a lane left on ``seq`` by a generation its caller abandoned is
        released first). Raises where the request cannot run (its prompt too long, ...)."""
        if self.closed:
            raise LocalguideError("this engine was closed")
        r = request
        tokens = list(r.prompt_tokens)
        if not tokens:
            raise ArgumentError("generation needs at least one prompt token (an empty prompt: the BOS token)")
        if isinstance(r.max_tokens, bool) or not isinstance(r.max_tokens, int) or r.max_tokens < 0:
            raise ArgumentError(f"max_tokens must be an int, 0 or more, got {r.max_tokens!r}")
        if len(tokens) + r.max_tokens > self.n_ctx:
            where = "the context size" if self.n_seq == 1 else f"a sequence's share of the context ({self.n_seq} sequences)"
            raise LocalguideError(f"prompt ({len(tokens)} tokens) plus max_tokens ({r.max_tokens}) exceeds {where} "
                                  f"{self.n_ctx}; pass n_ctx= to load()")
        idle = self.idle()
        if seq is None:
            if not idle:
                raise LocalguideError("every sequence of the engine is generating")
            seq = max(idle, key=lambda s: (_common(self.kv[s], tokens), -s))
        elif self.lanes[seq] is not None and take:
            self.release(self.lanes[seq], keep_cache=False)
        elif self.lanes[seq] is not None:
            raise LocalguideError(f"sequence {seq} is generating")
        m = self.model
        guide = r.guide
        speculate = r.speculate and m.can_speculate
        drafter = None
        if guide is not None and (speculate or r.fast_forward):
            drafter = m.drafter(r.counts if r.counts is not None else CountModel())
        fast = fast_layout(len(tokens), self.chunk, r.fast_limit) if self.kernels is not None else 0
        lane = Lane(self, seq, r, tokens, guide, r.max_tokens, self.stop, GenerationStats(healed_bytes=len(r.healed)),
                    fast, min(self.n_batch, MAX_DRAFT + 2) if drafter is not None else 1, speculate, r.fast_forward,
                    drafter=drafter)
        opportunistic = r.opportunistic and guide is not None and not guide.cheap_masks
        try:
            lane.guided = r.chain(r.sampling, guide, r.extra_samplers)
            lane.free = r.chain(r.sampling) if opportunistic else None
            if r.healed:
                s = r.sampling
                keep = 1 if s.temperature <= 0 else (s.top_k if s.top_k > 0 else None)
                heal_guide = HealGuide(m.vocabulary, r.healed, guide, m.tokenize_plain, keep)
                # (its own draw: the seed's first draw is the next token's)
                seed = None if s.seed is None else (s.seed ^ 0x5EED) & 0xFFFFFFFF
                lane.heal = (r.chain(dataclasses.replace(s, seed=seed), heal_guide), heal_guide)
            if r.stats:
                lane.report = Invasiveness(r.sampling, lane.guided, m.vocabulary.size)
        except BaseException:
            _close_chains(lane)
            raise
        if not r.cache_prompt:
            self.reset(seq)
        self.lanes[seq] = lane
        self._opened += 1
        lane.order = self._opened
        lane.gen = loop.run(lane)
        lane.pending = next(lane.gen)  # PREFIX
        return lane

    def release(self, lane: Lane, keep_cache: bool = True) -> None:
        """End ``lane``: its chains closed, its stats filled; its sequence's cache keeps the prompt
        and every token generated but the last (which may not have been decoded), nothing else (no
        rejected drafts), or nothing where ``keep_cache`` is False (an error)."""
        if self.lanes[lane.seq] is not lane:
            return
        if lane.gen is not None:
            lane.gen.close()
        lane.done = True
        if lane.report is not None:
            lane.report.fill(lane.stats)
        _close_chains(lane)
        self.lanes[lane.seq] = None
        seq = lane.seq
        if not keep_cache or not lane.request.cache_prompt or lane.stats.prompt_seconds <= 0:
            self.reset(seq)
            return
        keep = len(lane.prompt) + max(0, len(lane.out) - 1)
        if not llama_cpp.llama_memory_seq_rm(self.mem, seq, keep, -1):
            self.reset(seq)
            return
        self.kv[seq] = (lane.prompt + lane.out)[:keep]
        self.kv_fast[seq] = lane.fast

    # -- the KV cache --------------------------------------------------------------------------
    def reset(self, seq: int | None = None) -> None:
        """Empty the KV cache of ``seq`` (None: of every sequence)."""
        if seq is None or self.n_seq == 1:
            llama_cpp.llama_memory_clear(self.mem, True)
            if self._on_reset is not None:
                self._on_reset()
            seqs = range(self.n_seq)
        else:
            llama_cpp.llama_memory_seq_rm(self.mem, seq, 0, -1)
            seqs = [seq]
        for s in seqs:
            self.kv[s] = []
            self.kv_fast[s] = 0

    def reuse(self, seq: int, prompt: list[int], fast: int = 0) -> int:
        """How many leading tokens of ``prompt`` sequence ``seq``'s cache holds, as a cold decode of
        them would (its first ``fast`` on the fastest kernels, ``fast_layout``), taken from the
        sequence that holds most of them; everything after them is removed from ``seq``'s cache.
        The last prompt token is always decoded again (its logits give the first sample)."""
        best, src = 0, seq
        for s in range(self.n_seq):  # (a lane's cache holds its prompt's first ``decoded`` tokens)
            if s != seq and not self.shares:
                continue
            same = _same(self.kv[s], prompt)
            if self.kernels is not None:
                same = reusable(same, self.kv_fast[s], fast, self.chunk)
            if same > best or (same == best and s == seq):
                best, src = same, s
        if src != seq:
            llama_cpp.llama_memory_seq_rm(self.mem, seq, 0, -1)
            llama_cpp.llama_memory_seq_cp(self.mem, src, seq, 0, best)
            self.kv[seq] = list(prompt[:best])
            self.kv_fast[seq] = min(self.kv_fast[src], best)
            return best
        # (always: whatever the cache holds past the prefix goes, drafts included)
        if best == 0 or not llama_cpp.llama_memory_seq_rm(self.mem, seq, best, -1):
            self.reset(seq)  # (a recurrent model's memory cannot drop a tail)
            return 0
        self.kv[seq] = self.kv[seq][:best]
        self.kv_fast[seq] = min(self.kv_fast[seq], best)
        return best

    def _waits(self, lane: Lane) -> bool:
        """Whether ``lane`` waits for a lane opened before it to decode the prompt they share."""
        if not self.shares:
            return False
        for other in self.lanes:
            if other is None or other is lane or other.order > lane.order or other.pending is PREFIX:
                continue
            if not other.stats.prompt_seconds and _same(other.prompt, lane.prompt) >= max(MIN_SHARED, other.decoded + 1):
                return True
        return False

    # -- decoding ------------------------------------------------------------------------------
    def cost(self) -> DecodeCost:
        """The ``DecodeCost`` of the decodes the generating lanes share now."""
        n = sum(lane is not None and lane.stats.prompt_seconds > 0 for lane in self.lanes) if self.n_seq > 1 else 1
        return self._cost_of(max(1, n))

    def _cost_of(self, n: int) -> DecodeCost:
        if n == 1 and self._cost_one is not None:
            return self._cost_one()
        cost = self._costs.get(n)
        if cost is None:
            cost = self._costs[n] = DecodeCost()
        return cost

    def answered(self) -> None:
        """A call into llama.cpp returned within a step of many (the width probe's): the watchdog's
        clock starts again, as it judges each call, not their sum."""
        if self.busy_since is not None:
            self.busy_since = time.monotonic()

    def _decode(self, items: list) -> list[Decoded]:
        """One ``llama_decode`` of the requests ``items`` ((lane, Decode), a ``fast`` one alone)."""
        batch = self.batch
        batch.clear()
        offsets = [batch.add(d.tokens, d.pos, lane.seq, d.logits_from) for lane, d in items]
        fast = items[0][1].fast
        timed = any(d.timed for _, d in items)
        if fast:
            self.kernels(False)
        try:
            t = time.perf_counter()
            rc = llama_cpp.llama_decode(self.ctx, batch.b)
            if timed:
                llama_cpp.llama_synchronize(self.ctx)
            seconds = time.perf_counter() - t
        finally:
            if fast:
                self.kernels(True)
        loop.check(rc)
        for lane, d in items:
            if d.prompt:
                lane.decoded = d.pos + len(d.tokens)
                self.kv[lane.seq][d.pos:] = d.tokens
                if d.fast:
                    self.kv_fast[lane.seq] = lane.decoded
        cost = None
        if all(d.timed and d.judged for _, d in items):
            cost = self._cost_of(len(items))
            cost.observe(batch.n - len(items) + 1, seconds)
        return [Decoded(o, seconds if timed else 0.0, cost) for o in offsets]

    def stream(self, lane: Lane) -> Iterator[int]:
        """Drive ``lane`` alone and yield its tokens as they come (the caller releases it)."""
        gen, item = lane.gen, lane.pending
        while True:
            if item is PREFIX:
                reply = self.reuse(lane.seq, lane.prompt, lane.fast)
            elif isinstance(item, Decode):
                reply = self._decode([(lane, item)])[0]
            else:
                lane.out.append(item)
                yield item
                reply = None
            try:
                item = gen.send(reply)
            except StopIteration:
                lane.done = True
                lane.reason = lane.stats.finish_reason = lane.finish_reason()
                return

    def step(self) -> list[Lane]:
        """One round: every lane waiting on a decode that fits gets it (one ``llama_decode``; a
        fast prompt chunk after it, alone), and runs to its next request; returns the lanes that
        finished (done, with their ``reason`` or ``error``; the caller releases them)."""
        finished: list[Lane] = []
        lanes = sorted(self.active(), key=lambda lane: lane.order)
        for lane in lanes:
            if lane.cancelled and not lane.done:
                self._end(lane, finished, "cancelled")
        for lane in lanes:
            if lane.pending is PREFIX and not lane.done and not self._waits(lane):
                self._resume(lane, self.reuse(lane.seq, lane.prompt, lane.fast), finished)
        ready = [lane for lane in lanes if not lane.done and isinstance(lane.pending, Decode)]
        plain = [lane for lane in ready if not lane.pending.fast]
        plain.sort(key=lambda lane: lane.pending.prompt)  # (generating lanes first)
        items, room = [], self.n_batch
        for lane in plain:
            if len(lane.pending.tokens) <= room:
                items.append((lane, lane.pending))
                room -= len(lane.pending.tokens)
        fast = next((lane for lane in ready if lane.pending.fast), None)
        for group in (items, [(fast, fast.pending)] if fast is not None else []):
            if not group:
                continue
            try:
                replies = self._decode(group)
            except Exception as e:  # noqa: BLE001 - the decode's lanes end with it
                for lane, _ in group:
                    self._end(lane, finished, "stop", e)
                continue
            for (lane, _), reply in zip(group, replies):
                self._resume(lane, reply, finished)
        return finished

    def _resume(self, lane: Lane, reply, finished: list) -> None:
        """Send ``reply`` to ``lane`` and run it to its next request, its tokens to ``on_token``."""
        on_token = lane.request.on_token
        try:
            item = lane.gen.send(reply)
            while not isinstance(item, Decode):
                lane.out.append(item)
                if on_token is not None and not on_token(item):
                    self._end(lane, finished, "stop")
                    return
                item = next(lane.gen)
            lane.pending = item
        except StopIteration:
            self._end(lane, finished, lane.finish_reason())
        except Exception as e:  # noqa: BLE001 - the lane's error, the others go on
            self._end(lane, finished, "stop", e)

    def _end(self, lane: Lane, finished: list, reason: str, error: BaseException | None = None) -> None:
        if lane.gen is not None:
            lane.gen.close()
        lane.done, lane.reason, lane.error, lane.pending = True, reason, error, None
        lane.stats.finish_reason = reason
        finished.append(lane)

    def close(self) -> None:
        """Release every lane; free the context where the engine owns it."""
        self.closed = True
        for lane in self.active():
            self.release(lane, keep_cache=False)
        self.batch.free()
        if self._owned and self.ctx is not None:
            llama_cpp.llama_free(self.ctx)
        self.ctx = None


def context_for(model, n_seq: int, n_ctx: int, n_batch: int = 512):
    """A new llama.cpp context of ``model`` for ``n_seq`` sequences of ``n_ctx`` tokens each, its
    KV cache unified (a prefix copied from one sequence to another shares its cells)."""
    params = llama_cpp.llama_context_params()
    ctypes.memmove(ctypes.byref(params), ctypes.byref(model.llama.context_params), ctypes.sizeof(params))
    params.n_seq_max = n_seq
    params.n_ctx = n_ctx * n_seq
    params.kv_unified = True
    params.n_batch = params.n_ubatch = max(n_batch, n_seq * (MAX_DRAFT + 2) + CHUNK)
    with quiet_llama():  # (its lines on the context's sizes)
        ctx = llama_cpp.llama_init_from_model(model.llama.model, params)
    if not ctx:
        raise LocalguideError(f"llama.cpp could not make a context of {n_seq} sequences × {n_ctx} tokens")
    return ctx


def _close_chains(lane: Lane) -> None:
    for chain in (lane.guided, lane.free, lane.heal[0] if lane.heal else None):
        if chain is not None:
            chain.close()
    if lane.report is not None:
        lane.report.close()
    lane.guided = lane.free = lane.heal = lane.report = None


def _same(kv: list, prompt: list) -> int:
    """How many leading tokens of ``prompt`` but its last ``kv`` holds."""
    return _common(kv, prompt[:-1])


def _common(a: list, b: list) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if n <= 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n

