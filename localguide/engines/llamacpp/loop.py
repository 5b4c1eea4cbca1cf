"""The generation loop of one sequence: decode, sample through the guide, and verify drafts
(DOMINO §3.6).

``run`` is a coroutine: it yields the tokens it generates and asks its engine
(``localguide.engines.llamacpp.engine``) for each decode (``Decode``); the engine decodes the
requests of all its sequences in one ``llama_decode`` and answers each where its tokens sit in
the batch (``Decoded``). Without drafts it is the classic loop: one ``llama_decode`` of the last token, one
sample. With speculation, the token just sampled goes into the decode together with
drafts (``localguide.speculate``), with logits at every position; the sampler chain
then samples position after position exactly as it would have one token at a time,
keeping drafts while the sample equals them. At the first difference the sample is
kept, the rest is discarded and the KV cache entries past it are removed
(``llama_memory_seq_rm``). The guide is only ever advanced by sampled tokens, and the
chain samples the same positions in the same order, so the output distribution (and,
for one seed, the text) is that of the classic loop: with ``load(reproducible=True)`` a
position's logits are bitwise the same in a batch as alone (``localguide.engines.llamacpp.reproducible``).

Fast-forward (``fast_forward=True``) decodes forced text as the model's canonical
tokens without sampling it: faster, but the model sees that tokenization even where
it would have chosen another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Generator, NamedTuple

import llama_cpp
import numpy as np

from ...errors import LocalguideError
from ...speculate.counts import ORDER, PROBE_DRAFTS
from ...speculate.drafts import DecodeCost, choose_length, choose_width
from ...speculate.lookup import Lookup


@dataclass
class GenerationStats:
    """What one generation did (``Model.last_stats``).

    ``decode_calls`` counts the decodes after the prompt's; ``drafted`` the draft tokens
    decoded for verification and ``accepted`` those the sampler confirmed; ``fast_forwarded``
    the forced tokens decoded without sampling; ``padded`` the positions added after the drafts
    where the machine decodes the longer batch faster (their logits are never sampled).
    ``seconds`` runs from the end of the prompt's decode to the last token;
    ``tokens_per_second`` is ``tokens / seconds``.
    ``healed_bytes``: the prompt bytes the first token re-made (token healing).
    ``finish_reason``: "length" where ``max_tokens`` ended the text before it ended itself.
    ``cached_tokens``: the prompt's leading tokens the KV cache already held from the last
    generation (not decoded again); ``prompt_tokens - cached_tokens`` were decoded.

    With ``stats=True`` (else None; ``localguide.engines.llamacpp.invasiveness``), over the
    ``measured_tokens`` sampled steps (fast-forwarded tokens are not sampled):
    ``interventions`` (steps where the chain without the guide would have drawn, with the same
    random draw, a token the guide does not allow), ``mass_removed_mean`` / ``_max`` (the
    probability mass the mask removed, at the sampling temperature) and ``nll`` (mean negative
    log-likelihood of the tokens taken under the model alone).
    """

    prompt_tokens: int = 0
    cached_tokens: int = 0
    tokens: int = 0
    decode_calls: int = 0
    drafted: int = 0
    accepted: int = 0
    forced_drafted: int = 0
    forced_accepted: int = 0
    fast_forwarded: int = 0
    padded: int = 0
    prompt_seconds: float = 0.0
    seconds: float = 0.0
    healed_bytes: int = 0
    interventions: int | None = None
    mass_removed_mean: float | None = None
    mass_removed_max: float | None = None
    nll: float | None = None
    measured_tokens: int = 0
    finish_reason: str = ""  # once it ended: "stop", or "length" where the budget cut the text
    smc: object = None  # sampling="smc": its ``SMCStats`` (effective sample size, resamplings, log marginal)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_decode(self) -> float:
        return self.tokens / self.decode_calls if self.decode_calls else 0.0

    def __str__(self) -> str:
        return (f"{self.tokens} tokens in {self.seconds:.2f} s ({self.tokens_per_second:.1f} tokens/s), "
                f"prompt {self.prompt_tokens} tokens ({self.cached_tokens} cached) in {self.prompt_seconds:.2f} s; "
                f"{self.decode_calls} decode "
                f"calls ({self.tokens_per_decode:.2f} tokens each); drafts {self.accepted}/{self.drafted} accepted"
                + (f", {self.padded} positions padded" if self.padded else "")
                + (f", {self.fast_forwarded} tokens fast-forwarded" if self.fast_forwarded else ""))


class Batch:
    """A llama_batch of up to ``n_max`` tokens of any sequences, with explicit positions."""

    def __init__(self, n_max: int):
        self.n_max = n_max
        self.n = 0
        self.b = llama_cpp.llama_batch_init(n_max, 0, 1)

    def clear(self) -> None:
        self.n = self.b.n_tokens = 0

    def add(self, tokens: list[int], pos: int, seq: int, logits_from: int) -> int:
        """Append ``tokens`` of sequence ``seq`` at positions ``pos``.., with logits from index
        ``logits_from`` of them on; returns the batch index of the first."""
        b, n = self.b, self.n
        for i, t in enumerate(tokens):
            b.token[n + i] = t
            b.pos[n + i] = pos + i
            b.n_seq_id[n + i] = 1
            b.seq_id[n + i][0] = seq
            b.logits[n + i] = i >= logits_from
        self.n = b.n_tokens = n + len(tokens)
        return n

    def fill(self, tokens: list[int], pos: int, logits_from: int, seq: int = 0) -> None:
        """The batch holds ``tokens`` of ``seq`` alone."""
        self.clear()
        self.add(tokens, pos, seq, logits_from)

    def free(self) -> None:
        if self.b is not None:
            llama_cpp.llama_batch_free(self.b)
            self.b = None


@dataclass(frozen=True)
class Decode:
    """What a sequence asks its engine to decode: ``tokens`` at positions ``pos``.., logits at
    those from index ``logits_from`` on. ``fast``: a prompt chunk for the fastest kernels, decoded
    alone (``localguide.engines.llamacpp.reproducible``); ``timed``: the decode is timed; ``judged``:
    its time goes into the ``DecodeCost`` (lengths chosen per decode, not one width); ``prompt``: part
    of the prompt."""

    tokens: list
    pos: int
    logits_from: int
    fast: bool = False
    timed: bool = False
    prompt: bool = False
    judged: bool = True


class Decoded(NamedTuple):
    """The engine's answer to a ``Decode``: the batch index of its first token, the decode's
    seconds (0.0 where not timed) and the ``DecodeCost`` that judged it (None: not judged, as where
    forced or prompt tokens shared the decode)."""

    offset: int
    seconds: float
    cost: DecodeCost | None


PREFIX = "prefix"  # a sequence's first request: the engine answers how many prompt tokens its KV cache holds


def run(lane) -> Generator:
    """The coroutine of one sequence (``engine.Lane``: the prompt, guide, chains, drafter, stats):
    yields ``PREFIX`` (sent back: the prompt tokens cached), then ``Decode`` requests (sent back:
    ``Decoded``) and the generated tokens (sent back: None), as the module docstring says. The
    prompt is decoded after its cached tokens: its first ``lane.fast`` on the fastest kernels in
    chunks, the rest in batches."""
    e, stats, prompt = lane.engine, lane.stats, lane.prompt
    t0 = time.perf_counter()
    stats.prompt_tokens = len(prompt)
    cached = yield PREFIX
    stats.cached_tokens = cached
    if e.kernels is not None and cached < lane.fast:
        if cached % e.chunk or lane.fast % e.chunk:
            raise ValueError(f"fast decoding from {cached} to {lane.fast} is not in whole chunks of {e.chunk}")
        for i in range(cached, lane.fast, e.chunk):
            yield Decode(prompt[i:i + e.chunk], i, e.chunk, fast=True, prompt=True)
        cached = lane.fast
    for i in range(cached, len(prompt), e.prefill_chunk):
        part = prompt[i:i + e.prefill_chunk]
        last = i + len(part) == len(prompt)
        reply = yield Decode(part, i, len(part) - 1 if last else len(part), prompt=True)
    t1 = time.perf_counter()
    stats.prompt_seconds = t1 - t0
    try:
        yield from _loop(lane, reply.offset + len(part) - 1)
        stats.seconds = time.perf_counter() - t1
        if lane.drafter is not None and lane.speculate:
            lane.drafter.calibration.ended(stats.tokens, cut=stats.tokens >= lane.max_tokens)
    finally:
        if stats.seconds == 0.0 and stats.prompt_seconds:
            stats.seconds = time.perf_counter() - t1


def decode(ctx, tokens: list[int]) -> None:
    """One ``llama_decode`` of ``tokens`` after what the KV cache holds, logits at the last only."""
    arr = (llama_cpp.llama_token * len(tokens))(*tokens)
    check(llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(tokens))))


SIMULATE_EVERY = 4  # decodes, not drafting with one width: how often to guess drafts anyway
# With one width: a generation likely shorter than this many tokens does not draft. Its few decodes
# of the wide shape would run uncaptured or be captured for it alone (llama.cpp's CUDA backend
# captures a shape on its second decode in a row), which a handful of tokens cannot pay back.
SHORT_TOKENS = 16
PROBED_WIDTHS = (2, 4, 8, 16)
PROBE_REPEATS = 8


def timed_widths(ctx, batch: Batch, pos: int, token: int, widths=PROBED_WIDTHS,
                 repeats: int = PROBE_REPEATS, seq: int = 0, tick=None) -> dict[int, float]:
    """n -> seconds of one decode of n tokens with logits at each, at ``pos`` of ``seq`` (the KV
    cache holds the text before it, and nothing after it afterwards), for n = 1 and ``widths``:
    each n decoded ``repeats`` times in a row, the median of the last half (the first ones capture
    a graph). ``tick()``, where given, after each decode: a watchdog's word that llama.cpp answers."""
    mem = llama_cpp.llama_get_memory(ctx)
    out = {}
    for n in (1, *widths):
        if n > batch.n_max or pos + n > llama_cpp.llama_n_ctx(ctx):
            continue
        times = []
        for _ in range(repeats):
            batch.fill([token] * n, pos, 0, seq)
            t = time.perf_counter()
            check(llama_cpp.llama_decode(ctx, batch.b))
            llama_cpp.llama_synchronize(ctx)
            times.append(time.perf_counter() - t)
            if tick is not None:
                tick()
            if not llama_cpp.llama_memory_seq_rm(mem, seq, pos, -1):
                raise LocalguideError("llama.cpp could not remove the timed decodes from the model's memory")
        out[n] = sorted(times[repeats // 2:])[len(times[repeats // 2:]) // 2]
    return out


def _judge_width(cal, tokens: int, cost: DecodeCost, drafting: float) -> None:
    """One decode of ``cost.width`` tokens gave (or would have given) ``tokens`` tokens, for
    ``drafting`` seconds of proposing besides: its gain against one token, into the running average."""
    if cost.one_seconds > 0:
        gain = tokens / (cost.width_ratio + drafting / cost.one_seconds)
        cal.width_gain = 0.95 * cal.width_gain + 0.05 * gain


def logits_at(ctx, i: int, n_vocab: int) -> np.ndarray:
    """The logits of batch position ``i`` (-1: the last), as a view (valid until the next decode)."""
    ptr = llama_cpp.llama_get_logits_ith(ctx, i)
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,))


def check(rc: int) -> None:
    if rc != 0:
        raise LocalguideError(f"llama_decode failed with code {rc}")


def _loop(lane, first: int) -> Generator:
    """The tokens after the prompt; ``first``: the batch index of the prompt's last logits."""
    e = lane.engine
    ctx, mem, seq = e.ctx, e.mem, lane.seq
    guide, max_tokens, stop, guided, free = lane.guide, lane.max_tokens, lane.stop, lane.guided, lane.free
    drafter, fast_forward, stats, heal, report = lane.drafter, lane.fast_forward, lane.stats, lane.heal, lane.report
    prompt = lane.prompt
    pos = len(prompt)
    learn = drafter is not None and drafter.counts is not None and guide is not None
    counts = drafter.counts if learn else None
    taken = list(prompt[-ORDER:])  # the last tokens, the count model's context
    # The prompt and the tokens taken, for drafts of what followed their last few tokens before.
    seen = Lookup(prompt) if learn and lane.speculate else None
    # This generation's counts per (state, the last ORDER tokens): a text that repeats itself
    # (a list, a loop) is drafted from them (``Drafter.propose``). The count model hears of a
    # context once per generation only, so that a text going round in circles does not make
    # its contexts look certain to the next generation, which rarely does the same.
    recent: dict[tuple, dict[int, int]] = {}
    sim: list = []  # drafts not made: [those proposed, how many were taken so far, seconds proposing]

    def took(t: int) -> None:
        if sim:  # a decode of drafts not made: would they have been taken?
            props, matched, spent_s = sim
            if matched < len(props) and t == props[matched]:
                sim[1] += 1
            else:
                _judge_width(drafter.calibration, matched + 1, cost, spent_s)
                sim.clear()
        if seen is not None:
            drafter.taken(seen, t)
            seen.append(t)
        taken.append(t)
        if len(taken) > ORDER:
            del taken[0]

    def done() -> bool:
        return stats.tokens >= max_tokens or (guide is not None and guide.is_finished())

    def sample(i: int) -> int:
        if heal is not None and stats.tokens == 0:  # the first token completes the healed bytes
            heal_chain, heal_guide = heal
            heal_guide.logits = logits_at(ctx, i, heal_guide.vocabulary.size)
            if report is not None:
                report.before(ctx, i, heal_guide, heal_chain)
            token = heal_chain.sample(ctx, i)
            if report is not None:
                report.after(token)
            return token
        if report is not None:
            report.before(ctx, i, guide)
        token = _sample(i)
        if report is not None:
            report.after(token)
        return token

    def _sample(i: int) -> int:
        key = guide.state_key() if learn else -1
        if free is not None:
            token = free.sample(ctx, i)
            if guide.accepts(token):
                guide.advance(token)
            else:
                token = guided.sample(ctx, i)
        else:
            token = guided.sample(ctx, i)
        if learn and key >= 0 and token not in stop:
            row = recent.setdefault((key, *taken), {})
            c = row.get(token, 0)
            row[token] = c + 1
            counts.add(key, token, tuple(taken) if c == 0 else ())
        return token

    if done():
        return
    token = sample(first)
    if token in stop:
        return
    stats.tokens += 1
    took(token)
    yield token
    cost = e.cost() if lane.speculate else None
    if cost is not None and cost.width is None and drafter is not None and lane.n_max > max(PROBED_WIDTHS) \
            and not done() and e.n_seq == 1:
        seconds = cost.widths = timed_widths(ctx, e.batch, pos, token, seq=seq, tick=e.answered)
        cost.width = choose_width(seconds) if 1 in seconds else 1
        cost.one_seconds = seconds.get(1, 0.0)
        cost.width_ratio = seconds.get(cost.width, 1.0) / cost.one_seconds if cost.one_seconds else 1.0
    width = (cost.width or 1) if cost is not None and not fast_forward else 1  # (None: widths not probed here)
    n_ctx = e.n_ctx
    # With one width, a generation drafts throughout or not at all: a decode of another shape
    # than the last one runs uncaptured, and the next captures anew, so pausing and resuming
    # within a generation costs more than it saves. Not drafting, it guesses every
    # ``SIMULATE_EVERY`` decodes what drafts would have given, to know when to draft again.
    short = width > 1 and drafter is not None and \
        min(max_tokens, drafter.calibration.length or max_tokens) < SHORT_TOKENS
    wide = width > 1 and drafter is not None and drafter.calibration.width_gain >= 1.0 and not short
    simulate = width > 1 and drafter is not None and not wide and not short
    while not done():
        if lane.speculate and width == 1:
            cost = e.cost()  # (with several sequences, that of the decodes they share)
        forced: list[int] = []
        drafts: list[int] = []
        pads = 0
        drafting = 0.0
        if drafter is not None:
            left = max_tokens - stats.tokens
            if fast_forward:
                props, _, flags, _ = drafter.propose(guide, min(left, lane.n_max - 1), counts=False)
                forced = props[:flags.count(True)]
                for t in forced:
                    guide.advance(t)
                    took(t)
            if simulate and not sim and stats.decode_calls % SIMULATE_EVERY == 0:
                t_draft = time.perf_counter()
                props = drafter.propose(guide, min(left - 1, width - 1), context=tuple(taken), recent=recent,
                                        lookup=seen)[0]
                sim[:] = [props, 0, time.perf_counter() - t_draft]
            if cost is not None and (not forced or (stats.tokens + len(forced) < max_tokens
                                                    and not guide.is_finished())) \
                    and not simulate and not short and (wide or not cost.stale() and drafter.calibration.drafting()
                                                        and drafter.proposing(guide, stats.decode_calls)):
                t_draft = time.perf_counter()
                room = min(left - len(forced) - 1, lane.n_max - 1 - len(forced))
                if width > 1:
                    room = min(room, width - 1)
                elif drafter.calibration.probing:
                    room = min(room, PROBE_DRAFTS)
                props, probs, flags, orders = drafter.propose(guide, room, context=tuple(taken),
                                                              recent=recent, lookup=seen)
                if width > 1:  # every decode with drafts has the one width: all drafts, then padding
                    k, n = len(props), (width if pos + width <= n_ctx else 1 + len(props))
                else:
                    k, n = choose_length(probs, cost, len(forced), 0 if forced else 1 + room)
                    drafter.calibration.chose(k)
                    if cost.retime(bool(props), k):
                        # Lengths that were dear once are decoded now and then: their old times
                        # would keep drafting off for good. (A probe after a pause drafts only
                        # what these times make worth it: forcing a draft they call dear cost
                        # SmolLM2 2-3 one-token decodes a probe on a 2-core CPU.)
                        k, n = 1, 2 + len(forced)
                drafts, probs, flags = props[:k], probs[:k], flags[:k]
                pads = n - 1 - len(forced) - k
                drafting = time.perf_counter() - t_draft
        # Padding (a length the machine decodes faster): its logits are computed and never sampled.
        tokens = [token] + forced + drafts + [token] * pads
        # (a GPU backend returns from llama_decode before its kernels end: a timed decode waits for them)
        reply = yield Decode(tokens, pos, len(forced), timed=cost is not None and not forced, judged=width == 1)
        # this decode's time and its drafting's, in one-token decodes (every decode with drafts is
        # judged: where another program holds a core, trying the lengths one by one is what costs;
        # with one width, decodes are judged on the steady times instead: ``_judge_width``)
        spent = reply.cost.in_ones(reply.seconds + drafting) if reply.cost is not None and drafts else None
        stats.decode_calls += 1
        for t in forced:
            stats.tokens += 1
            stats.fast_forwarded += 1
            yield t
        if forced and done():
            return
        stats.drafted += len(drafts)
        stats.padded += pads
        stats.forced_drafted += sum(flags) if drafts else 0
        base = len(forced)
        n_ok = 0
        for j in range(len(drafts) + 1):
            if j > 0 and done():
                return
            s = sample(reply.offset + base + j)
            if s in stop:
                return
            stats.tokens += 1
            took(s)
            yield s
            if j < len(drafts):
                hit = s == drafts[j]
                drafter.verified(flags[j], probs[j], hit, orders[j])
                if flags[j]:
                    stats.forced_accepted += hit
                if hit:
                    n_ok += 1
                    stats.accepted += 1
                    continue
            break
        if spent is not None:
            probing = drafter.calibration.probing
            drafter.calibration.settle(n_ok + 1, spent)
            if probing and not drafter.calibration.probing:
                reply.cost.forget()
        elif wide:
            _judge_width(drafter.calibration, n_ok + 1, cost, drafting)
        if n_ok < len(drafts) or pads:  # the KV cache keeps the sampled token's context only
            if not llama_cpp.llama_memory_seq_rm(mem, seq, pos + base + n_ok + 1, -1):
                raise LocalguideError("llama.cpp could not remove rejected drafts from the model's memory")
        pos += base + n_ok + 1
        token = s
