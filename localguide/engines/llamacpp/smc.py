"""Samples from the model's distribution over valid texts: sequential Monte Carlo over a constraint.

Masking draws each token from the model's next-token distribution renormalised over the allowed
tokens, so a text comes out with probability p(text) / (Z_1 Z_2 ...), Z_i the mass the mask kept at
step i: a first token the model likes that leads only to unlikely completions is drawn too often.
The target here is p_T(text | valid), p_T the model's distribution at temperature T with no top-k,
top-p or min-p (truncations change the distribution; they are off under SMC). ``particles``
sequences of one llama.cpp context advance by the masked proposal, one ``llama_decode`` for all of
them a step, each weighted by the product of its kept masses (particles that share a history draw
their tokens systematically from the proposal: ``quantiles``); where the effective sample size of the
particles still writing falls below half their number, systematic resampling copies them (their KV
cells shared through ``llama_memory_seq_cp``; a finished text keeps its final weight and its place),
and the text returned is drawn from the weighted particles at the end (Lew et al. 2023; Loula et
al. 2025). The target counts the model's stopping: p_T(text, then a stop token | valid, ended within
``max_tokens``), so a text that can only end still draws its stop token, and its probability weighs
in. The draw is that distribution's only as the particles grow: with few of them, a text that
masking almost never proposes is seldom among them (BENCHMARKS.md, "Fidelity").
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from ...errors import ArgumentError, LocalguideError
from .loop import Batch, check, logits_at


@dataclass
class SMCStats:
    """What one SMC generation did: the effective sample size of all particles after each step
    (before any resampling), the steps that resampled those still writing, the log marginal likelihood estimate (log of the
    probability, under p_T, that the model's text is valid and ends within the budget),
    the particles' final tokens and log weights, and how many distinct texts they held."""

    particles: int = 0
    texts: list = field(default_factory=list)  # each particle's tokens at the end
    ess: list = field(default_factory=list)
    resampled: list = field(default_factory=list)
    log_marginal: float = float("-inf")
    log_weights: list = field(default_factory=list)
    distinct: int = 0


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = float(np.max(x))
    return x - (m + math.log(float(np.exp(x - m).sum())))


def logsumexp(x: np.ndarray) -> float:
    if len(x) == 0:
        return float("-inf")
    m = float(np.max(x))
    if m == float("-inf"):
        return m
    return m + math.log(float(np.exp(x - m).sum()))


def step(logits: np.ndarray, allowed: np.ndarray, temperature: float, rng: np.random.Generator) -> tuple[int, float]:
    """One particle's step: (the token drawn from the masked proposal, log of the kept mass Z)."""
    tokens, log_z = draws(logits, allowed, temperature, np.array([rng.random()]))
    return tokens[0], log_z


def draws(logits: np.ndarray, allowed: np.ndarray, temperature: float, us: np.ndarray) -> tuple[list[int], float]:
    """The steps of particles that share a history: (the token of the masked proposal at each
    quantile of ``us``, log of the kept mass Z). Tokens -1 where every allowed token underflowed."""
    logp = log_softmax(logits.astype(np.float64) / temperature)
    kept = logp[allowed]
    log_z = logsumexp(kept)
    if log_z == float("-inf"):  # (the particles are dead)
        return [-1] * len(us), log_z
    cdf = np.cumsum(np.exp(kept - log_z))
    at = np.minimum(np.searchsorted(cdf, np.asarray(us) * cdf[-1]), len(cdf) - 1)
    return [int(t) for t in allowed[at]], log_z


def quantiles(m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` systematic quantiles, one in each of ``m`` equal strata of [0, 1) (one uniform draw
    for them all), in a random order: each alone is uniform, and together they spread over the
    distribution (a token of probability p goes to m p of them, give or take one)."""
    return rng.permutation((rng.random() + np.arange(m)) / m) if m > 1 else np.array([rng.random()])


def systematic(log_w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each particle's ancestor, by systematic resampling of the normalised weights: a particle
    drawn at least once keeps its own slot (its cells are never overwritten before they are copied)."""
    n = len(log_w)
    w = np.exp(log_w - logsumexp(log_w))
    counts = np.zeros(n, np.int64)
    edges = np.cumsum(w)
    edges[-1] = 1.0
    for u in (rng.random() + np.arange(n)) / n:
        counts[min(int(np.searchsorted(edges, u)), n - 1)] += 1
    ancestors = np.arange(n)
    free = [i for i in range(n) if counts[i] == 0]
    for j in range(n):
        for _ in range(counts[j] - 1):
            ancestors[free.pop()] = j
    return ancestors


def ess(log_w: np.ndarray) -> float:
    w = np.exp(log_w - np.max(log_w))
    return float(w.sum() ** 2 / (w * w).sum())


class Cancelled(LocalguideError):
    """An SMC draw stopped by its ``cancelled`` callable (a client gone, a server going, Ctrl-C)."""


def check_particles(particles) -> None:
    if isinstance(particles, bool) or not isinstance(particles, int) or not 1 <= particles <= 256:
        raise ArgumentError(f"particles must be an int from 1 to 256, got {particles!r}")


@contextlib.contextmanager
def _particles_engine(model, prompt: list[int], max_tokens: int, particles: int, keep: bool, context: int, calls):
    """The engine the particles decode in, emptied after: the model's own for one particle; else a
    context of the particles' own, the model's kept one (``Model.smc_engine``, one draw at a time)
    or one freed after. The prompt's cells are shared by every particle (the KV cache is unified):
    each particle needs room for its own tokens only."""
    from .engine import Engine, context_for

    if particles == 1:
        engine = model.engine
        if engine.active():
            raise LocalguideError("the model is generating (a stream not read to its end): finish or close it first")
        if len(prompt) + max_tokens + 1 > engine.n_ctx:
            raise ArgumentError(f"the prompt ({len(prompt)} tokens) and max_tokens ({max_tokens}) exceed the "
                                f"context ({engine.n_ctx} tokens)")
        try:
            yield engine
        finally:
            with calls():
                engine.reset()
        return
    need = len(prompt) + particles * (max_tokens + 1)
    if need > particles * context:
        raise ArgumentError(f"the prompt ({len(prompt)} tokens) and {particles} particles of up to {max_tokens} "
                            f"tokens need {need} cells, over {particles} x the context ({context})")
    cells = -(-need // particles)
    if not keep:
        with calls():
            engine = Engine(model, context_for(model, particles, cells), particles, None, owned=True)
        try:
            yield engine
        finally:
            with calls():
                engine.close()
        return
    if not model.smc_lock.acquire(blocking=False):
        raise LocalguideError("another SMC draw is under way on this model: one at a time")
    try:
        engine = model.smc_engine(particles, cells)
        try:
            yield engine
        finally:
            with calls():
                engine.reset()
    finally:
        model.smc_lock.release()


def run_smc(model, prompt: list[int], make_guide, max_tokens: int, particles: int, temperature: float,
            seed: int | None, lock=None, cancelled=None, keep: bool = True, busy=None,
            context: int | None = None) -> tuple[list[int], SMCStats]:
    """The tokens of the text drawn, and the run's ``SMCStats``. ``make_guide()``: a fresh guide;
    ``lock``: held while guides are made and walked (a server's engine walks guides of the same
    index meanwhile); ``cancelled()``: asked before each step, True stops the draw (``Cancelled``);
    ``keep``: the particles' context kept for the next draw (``Model.smc_engine``), else freed after;
    ``busy(since)``: told when calls into llama.cpp begin (``time.monotonic()``) and end (None), for a
    watchdog; ``context``: the cells a particle may take at most (default the model's context)."""
    check_particles(particles)
    if not isinstance(temperature, (int, float)) or not 0 < temperature < float("inf"):
        raise ArgumentError(f"SMC samples at a temperature above 0, got {temperature!r} (greedy has one text)")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ArgumentError(f"max_tokens must be an int of at least 1, got {max_tokens!r}")

    @contextlib.contextmanager
    def calls():  # (calls into llama.cpp, which a hung worker would hold: the watchdog's to see)
        if busy is not None:
            busy(time.monotonic())
        try:
            yield
        finally:
            if busy is not None:
                busy(None)

    with _particles_engine(model, prompt, max_tokens, particles, keep, context or model.context_size,
                           calls) as engine:
        return _draw(model, engine, prompt, make_guide, max_tokens, particles, temperature, seed,
                     lock if lock is not None else contextlib.nullcontext(), cancelled, calls)


def _draw(model, engine, prompt, make_guide, max_tokens, particles, temperature, seed, lock, cancelled,
          calls) -> tuple[list[int], SMCStats]:
    """One draw in ``engine`` (``run_smc`` documents the arguments)."""
    rng = np.random.default_rng(seed)
    ctx, mem, n_vocab = engine.ctx, engine.mem, model.vocabulary.size
    stop = set(model.vocabulary.stop_ids.tolist())
    batch = Batch(max(particles, engine.n_batch))
    try:
        with calls():
            engine.reset()
        # (the prompt once, in sequence 0; a chunk a call for the watchdog, as the engine's steps: a long
        # prompt through a slow worker is many calls, none of them hung)
        for i in range(0, len(prompt), engine.n_batch):
            part = prompt[i:i + engine.n_batch]
            batch.fill(part, i, len(part) - 1 if i + len(part) == len(prompt) else len(part))
            with calls():
                check(llama_cpp.llama_decode(ctx, batch.b))
        with calls():
            first = logits_at(ctx, -1, n_vocab).copy()
            for s in range(1, particles):
                llama_cpp.llama_memory_seq_cp(mem, 0, s, 0, -1)
        with lock:
            guides = [make_guide() for _ in range(particles)]
        texts: list[list[int]] = [[] for _ in range(particles)]
        family = [0] * particles  # particles of one label share their history (their tokens so far)
        alive = [True] * particles
        log_w = np.zeros(particles)
        logits = [first] * particles
        stats = SMCStats(particles=particles)
        pos = len(prompt)
        for _ in range(max_tokens + 1):
            if cancelled is not None and cancelled():
                raise Cancelled("the SMC draw was cancelled")
            # Particles with one history (the first step's all, the copies a resampling made) draw
            # their tokens together, systematically: each is still a draw of the masked proposal,
            # and a token it gives a sixth of its mass goes to about a sixth of them. (Their
            # histories, weights and logits are the same.)
            families: dict[int, list[int]] = {}
            for i in range(particles):
                if alive[i]:
                    families.setdefault(family[i], []).append(i)
            labels: dict[tuple, int] = {}
            with lock:  # (held for the guides' walks alone, twice a step: a server's engine waits on it)
                allowed = {f: np.array(guides[m[0]].allowed_token_ids(), copy=True) for f, m in families.items()}
            moves = []
            for f, members in families.items():
                tokens, log_z = draws(logits[members[0]], allowed[f], temperature, quantiles(len(members), rng))
                for i, token in zip(members, tokens):
                    log_w[i] += log_z
                    family[i] = labels.setdefault((family[i], token), len(labels))
                    if token < 0:
                        alive[i] = False
                        continue
                    moves.append((i, token))
            with lock:
                for i, token in moves:
                    guides[i].advance(token)
            for i, token in moves:
                if token in stop:
                    alive[i] = False
                    continue
                texts[i].append(token)  # (a text that can only end still draws its stop token)
            if not np.isfinite(log_w).any():
                raise LocalguideError("every particle reached a text the model gives no probability")
            stats.ess.append(ess(log_w))
            live = [i for i in range(particles) if alive[i]]
            # Resampling among the particles still writing: a finished text's weight is final, and
            # one dropped for a weight that its rivals' later steps would have lowered is lost for
            # good (a text that ends at once against one whose end is yet to be paid for).
            if len(live) > 1 and ess(log_w[live]) < len(live) / 2:
                ancestors = np.arange(particles)
                ancestors[live] = np.asarray(live)[systematic(log_w[live], rng)]
                with calls():
                    for i, j in enumerate(ancestors):
                        if i != j:
                            llama_cpp.llama_memory_seq_rm(mem, i, -1, -1)
                            llama_cpp.llama_memory_seq_cp(mem, int(j), i, -1, -1)
                with lock:
                    guides = [guides[j] if i == j else guides[j].copy() for i, j in enumerate(ancestors)]
                texts = [list(texts[j]) for j in ancestors]
                family = [family[j] for j in ancestors]
                logits = [logits[j] for j in ancestors]
                log_w[live] = logsumexp(log_w[live]) - math.log(len(live))
                stats.resampled.append(len(stats.ess) - 1)
            if not live or len(stats.ess) > max_tokens:  # (the last step's decode would go unread)
                break
            batch.clear()
            for i in live:  # (every live particle is one token further, all at one position)
                batch.add([texts[i][-1]], pos, i, 0)
            with calls():
                check(llama_cpp.llama_decode(ctx, batch.b))
                logits = _gather(ctx, live, logits, n_vocab)
            pos += 1
        for i in range(particles):  # (a text not ended within the budget is not one of the target's)
            if alive[i]:
                log_w[i] = float("-inf")
        if not np.isfinite(log_w).any():
            raise LocalguideError(f"no particle's text ended within max_tokens ({max_tokens}): give it more")
        stats.log_marginal = logsumexp(log_w) - math.log(particles)
        stats.log_weights = log_w.tolist()
        stats.texts = [list(t) for t in texts]
        stats.distinct = len({tuple(t) for t in texts})
        w = np.exp(log_w - logsumexp(log_w))
        choice = min(int(np.searchsorted(np.cumsum(w), rng.random() * w.sum())), particles - 1)
        return texts[choice], stats
    finally:
        batch.free()


def _gather(ctx, live: list[int], logits: list, n_vocab: int) -> list:
    out = list(logits)
    for k, i in enumerate(live):
        out[i] = logits_at(ctx, k, n_vocab).copy()
    return out


@dataclass
class Score:
    """``Model.score``: the text's tokens, each one's log-probability under the model given the
    prompt and the tokens before it (natural log, temperature 1, no truncation), and their sum
    ``total``; ``end``: the log-probability that the model stops after the text (any stop token).
    With a constraint, ``masked``: the log-probability that token-by-token masking writes exactly
    these tokens and ends there (each token renormalised over the allowed ones; the end drawn where
    the constraint still allowed more, certain where it allowed nothing else)."""

    tokens: list
    logprobs: list
    total: float
    end: float
    masked: float | None = None


def score(model, prompt: list[int], texts: list[list[int]], make_guide=None) -> list[Score]:
    """Each token sequence of ``texts`` scored after ``prompt`` (the prompt decoded once; each text
    after it in turn). ``make_guide()``: a fresh guide of the constraint (``Score.masked``); a text
    the constraint refuses is a ``TokenNotAllowedError``."""
    out = []
    engine = model.engine
    if engine.active():
        raise LocalguideError("the model is generating: score after that")
    n_vocab = model.vocabulary.size
    stops = np.asarray(model.vocabulary.stop_ids, np.int64)
    ctx, mem = engine.ctx, engine.mem
    room = engine.n_ctx
    batch = Batch(engine.n_batch)
    engine.reset()
    try:
        for i in range(0, len(prompt), engine.n_batch):
            part = prompt[i:i + engine.n_batch]
            last = i + len(part) == len(prompt)
            batch.fill(part, i, len(part) - 1 if last else len(part))
            check(llama_cpp.llama_decode(ctx, batch.b))
        first = log_softmax(logits_at(ctx, -1, n_vocab).astype(np.float64)) if prompt else None
        for text in texts:
            if len(prompt) + len(text) > room:
                raise ArgumentError(f"the prompt and a text of {len(text)} tokens exceed the context ({room} tokens)")
            llama_cpp.llama_memory_seq_rm(mem, 0, len(prompt), -1)
            lps = []
            prev = first
            guide = make_guide() if make_guide is not None else None
            masked = 0.0
            for i in range(0, len(text), engine.n_batch):
                part = text[i:i + engine.n_batch]
                batch.fill(part, len(prompt) + i, 0)
                check(llama_cpp.llama_decode(ctx, batch.b))
                for k, t in enumerate(part):
                    if prev is None:  # (no prompt: the first token has no context to be scored in)
                        lps.append(0.0)
                    else:
                        lps.append(float(prev[t]))
                        if guide is not None:
                            masked += float(prev[t]) - logsumexp(prev[guide.allowed_token_ids()])
                    if guide is not None:
                        guide.advance(t)
                    prev = log_softmax(logits_at(ctx, k, n_vocab).astype(np.float64))
            end = logsumexp(prev[stops]) if prev is not None else float("-inf")
            if guide is not None and not guide.is_finished():
                allowed = guide.allowed_token_ids()
                masked += logsumexp(prev[np.intersect1d(allowed, stops)]) - logsumexp(prev[allowed])
            out.append(Score(list(text), lps, float(sum(lps)), end, masked if guide is not None else None))
    finally:
        batch.free()
        engine.reset()
    return out


def token_paths(guide, stop_ids, limit: int = 10_000) -> list[list[int]]:
    """Every token path from ``guide`` to a point where the text may end (a finite constraint:
    a choice, a bounded regex), each tokenization of a text its own path. More than ``limit``:
    an ``ArgumentError`` (the language is too large to enumerate)."""
    stop = set(int(t) for t in stop_ids)
    out: list[list[int]] = []
    todo = [(guide, [])]
    while todo:
        g, path = todo.pop()
        allowed = g.allowed_token_ids()
        if len(allowed) == 0 or any(int(t) in stop for t in allowed):
            out.append(path)
            if len(out) > limit:
                raise ArgumentError(f"the constraint has more than {limit} token paths: too many to enumerate")
        for t in allowed:
            t = int(t)
            if t not in stop:
                h = g.copy()
                h.advance(t)
                todo.append((h, path + [t]))
    return out


def exact(model, prompt: str, **constraint) -> dict[str, tuple[float, float]]:
    """text -> (its probability under the model at temperature 1 conditioned on the constraint, the
    probability that masking writes it), summed over its tokenizations: the reference SMC is
    measured against (a finite constraint only, ``token_paths``)."""
    index = model.compile(**constraint)
    if index is None:
        raise ArgumentError("exact() needs a finite constraint (choice=, regex=, ...)")
    paths = token_paths(index.guide(), model.vocabulary.stop_ids)
    scores = model.score(prompt, paths, **constraint)
    joint: dict[str, list] = {}
    for path, s in zip(paths, scores):
        text = model.vocabulary.decode(path).decode("utf-8", "replace")
        e, m = joint.get(text, (float("-inf"), float("-inf")))
        joint[text] = [float(np.logaddexp(e, s.total + s.end)), float(np.logaddexp(m, s.masked))]
    norm = logsumexp(np.array([e for e, _ in joint.values()]))
    return {text: (math.exp(e - norm), math.exp(m)) for text, (e, m) in joint.items()}
