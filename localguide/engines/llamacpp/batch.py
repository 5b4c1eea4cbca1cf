"""Many generations on one engine (``localguide.engines.llamacpp.engine``): the server's engine
thread and ``Model.batch``.

``EngineThread`` serves queued requests (``Work``) in a thread of its own, up to ``parallel`` at a
time, each a lane of the engine with speculation, healing, the prompt cache and stats (with
``parallel`` 1, the model's own engine: the prompt cache the library uses). Guides are walked in
that thread only; ``lock`` is held while they are, so that a request's guide can be made in
another thread from the same compiled constraint.

``run_batch`` (``Model.batch``) runs a list of items, ``parallel`` lanes at a time, in the caller's
thread, and yields each result as it finishes; an item's own error is its result.
"""

from __future__ import annotations

import codecs
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ...constraint import Constraint
from ...errors import ArgumentError, LocalguideError
from .engine import Lane, Request
from .loop import GenerationStats
from .sampler import Sampling


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
    on_start: Callable[[], None] | None = None  # (in the engine's thread, when a sequence takes it)
    submitted: float = field(default_factory=time.perf_counter)
    started: float = 0.0  # (when a sequence took it: ``started - submitted`` it waited in the queue)


class EngineThread:
    """Requests queue; one thread runs them on the engine, ``parallel`` at a time (see the module
    docstring). ``context``: tokens per sequence."""

    def __init__(self, model, parallel: int = 1, context: int | None = None):
        self.model, self.parallel = model, parallel
        self.context = context or model.context_size
        self.engine = model.engine if parallel == 1 else model.engine_for(parallel, self.context)
        self.lock = threading.RLock()
        self._queue: deque[Work] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._work: dict[int, tuple[Work, object]] = {}  # id of a lane -> (its Work, its count model)
        self._thread = threading.Thread(target=self._run, name="localguide-engine", daemon=True)
        self._thread.start()

    def submit(self, work: Work) -> None:
        with self._cv:
            if not self._closed:
                self._queue.append(work)
                self._cv.notify()
                return
        work.on_done("stop", LocalguideError("the server is shutting down"), None)

    def waiting(self) -> int:
        with self._cv:
            return len(self._queue)

    def active(self) -> int:
        return len(self._work)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=10)
        with self.lock:
            for work in self._queue:
                work.on_done("cancelled", None, None)
            self._queue.clear()
            for lane in self.engine.active():
                self._end(lane, "cancelled", None)
            if self.parallel > 1:
                self.model.close_engine(self.engine)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and not self._queue and not self._work:
                    self._cv.wait()
                if self._closed:
                    return
            with self.lock:  # (guides are walked here)
                if self._closed:
                    return
                self.engine.busy_since = time.monotonic()
                try:
                    self._admit()
                    for lane in self.engine.active():
                        if self._work[id(lane)][0].cancelled:
                            lane.cancelled = True
                    finished = self.engine.step() if self._work else []
                    for lane in finished:
                        self._end(lane, lane.reason, lane.error)
                finally:
                    self.engine.busy_since = None

    def _admit(self) -> None:
        while self.engine.idle():
            with self._cv:
                if not self._queue:
                    return
                work = self._queue.popleft()
            if work.cancelled:
                work.on_done("cancelled", None, None)
                continue
            counts = None
            try:
                if work.guide is not None:
                    counts = self.model.draft_counts(work.counts_key)
                lane = self.engine.open(Request(work.prompt_tokens, work.guide, work.max_tokens, work.sampling,
                                                speculate=True, counts=counts, healed=work.healed, stats=work.stats,
                                                fast_limit=work.fast_limit, on_token=work.on_token))
            except Exception as e:  # noqa: BLE001 - the request's error
                work.on_done("stop", e, None)
                continue
            work.started = time.perf_counter()
            self._work[id(lane)] = (work, counts)
            if work.on_start is not None:
                try:
                    work.on_start()
                except Exception:  # noqa: BLE001 - (the request's own code: the engine goes on)
                    pass

    def _end(self, lane: Lane, reason: str, error) -> None:
        work, counts = self._work.pop(id(lane))
        self.engine.release(lane, keep_cache=error is None)
        if counts is not None:
            counts.save()
        try:
            work.on_done(reason, error, lane.stats)
        except Exception:  # noqa: BLE001 - (the request's own code: the engine goes on)
            pass


# -- Model.batch ---------------------------------------------------------------------------------
class Interrupt:
    """Ctrl-C for a batch run from a signal handler (a ``KeyboardInterrupt`` raised inside a sampler
    callback llama.cpp makes would be lost): the first asks to wind down (no new item; those in
    progress finish), the second to stop now."""

    def __init__(self):
        self.winding = self.now = False

    def __call__(self, *_signal) -> None:
        if self.winding:
            self.now = True
        self.winding = True


@dataclass
class BatchResult:
    """One item's result: ``index`` (its place in the items), ``id`` (its ``"id"`` where a dict
    gave one), ``text``, ``value`` (the parsed JSON, or an instance of the Pydantic class, where a
    JSON Schema constrained it and the document completed), ``finish_reason`` ("stop": the text
    ended; "length": ``max_tokens`` did), ``stats`` (``GenerationStats``), or ``error`` (the item's
    own; the other fields then None)."""

    index: int
    id: object = None
    text: str | None = None
    value: object = None
    finish_reason: str | None = None
    stats: GenerationStats | None = None
    error: BaseException | None = None


_ITEM_KEYS = {"id", "prompt", "messages", "regex", "choice", "grammar", "json_schema", "strict", "whitespace",
              "max_recursion", "max_ignored_run", "max_tokens", "seed"}
_CONSTRAINT_KEYS = ("regex", "choice", "grammar", "json_schema")


@dataclass
class _Item:
    index: int
    id: object = None
    prompt: str | None = None
    messages: list | None = None
    constraint: Constraint | None = None
    max_tokens: int = 0
    seed: int | None = None
    error: BaseException | None = None
    # made when it starts:
    tokens: list | None = None
    guide: object = None
    healed: bytes = b""
    fast_limit: int | None = None
    chat_run: object = None
    counts_key: str | None = None


def _item(index: int, raw, constraint: Constraint | None, max_tokens: int, seed: int | None) -> _Item:
    """``raw`` (a prompt, a message list, or a dict) as an item; its error kept in it."""
    item = _Item(index, constraint=constraint, max_tokens=max_tokens, seed=seed)
    try:
        if isinstance(raw, str):
            item.prompt = raw
        elif isinstance(raw, list):
            item.messages = raw
        elif isinstance(raw, dict):
            unknown = sorted(set(raw) - _ITEM_KEYS, key=str)
            if unknown:
                raise ArgumentError(f"item {index}: unknown field {unknown[0]!r} (an item takes "
                                    f"{', '.join(sorted(_ITEM_KEYS))})")
            item.id = raw.get("id")
            if ("prompt" in raw) == ("messages" in raw):
                raise ArgumentError(f"item {index}: give \"prompt\" or \"messages\", one of them")
            item.prompt, item.messages = raw.get("prompt"), raw.get("messages")
            if item.prompt is not None and not isinstance(item.prompt, str):
                raise ArgumentError(f"item {index}: \"prompt\" must be a string, not {type(item.prompt).__name__}")
            if item.messages is not None and not isinstance(item.messages, list):
                raise ArgumentError(f"item {index}: \"messages\" must be a list of messages")
            own = {k: raw[k] for k in _ITEM_KEYS - {"id", "prompt", "messages", "max_tokens", "seed"} if k in raw}
            if own:
                if not any(k in own for k in _CONSTRAINT_KEYS):
                    raise ArgumentError(f"item {index}: {sorted(own)[0]!r} needs a constraint of the item's own "
                                        f"({', '.join(_CONSTRAINT_KEYS)})")
                try:
                    item.constraint = Constraint.of(**own)
                except ArgumentError as e:
                    raise ArgumentError(f"item {index}: {e}") from None
            if "max_tokens" in raw:
                item.max_tokens = raw["max_tokens"]
                if isinstance(item.max_tokens, bool) or not isinstance(item.max_tokens, int) or item.max_tokens < 1:
                    raise ArgumentError(f"item {index}: \"max_tokens\" must be a whole number, 1 or more")
            if "seed" in raw:
                item.seed = raw["seed"]
                if item.seed is not None and (isinstance(item.seed, bool) or not isinstance(item.seed, int)):
                    raise ArgumentError(f"item {index}: \"seed\" must be a whole number")
        else:
            raise ArgumentError(f"item {index}: a prompt (str), messages (list) or a dict, not {type(raw).__name__}")
    except ArgumentError as e:
        item.error = e
    return item


def _prepare(model, item: _Item, chat: bool, system: str | None, heal: bool) -> None:
    """The item's prompt tokens, guide and count model's key."""
    from ...chat.conversation import ChatRun

    messages = item.messages
    if messages is None and chat:
        messages = ([{"role": "system", "content": system}] if system is not None else []) + \
            [{"role": "user", "content": item.prompt}]
    if messages is not None:
        run = item.chat_run = ChatRun(model, messages, max_tokens=item.max_tokens, constraint=item.constraint)
        item.tokens, item.guide, item.fast_limit, item.counts_key = \
            run.prompt_tokens, run.guide, run.settled, run.counts_key
        return
    index = model.compile(item.constraint)
    item.tokens, item.guide, item.healed = model.prepare_completion(item.prompt, index, item.max_tokens, heal=heal)
    item.counts_key = item.constraint.key() if item.constraint is not None else None


def _text(model, item: _Item, tokens: list[int]) -> str:
    if item.chat_run is not None:
        parts = [d.content for d in map(item.chat_run.feed, tokens) if d is not None]
        parts += [d.content for d in item.chat_run.finish()]
        return "".join(parts)
    data = b"".join(model.vocabulary[t] for t in tokens)[len(item.healed):]
    return codecs.decode(data, "utf-8", errors="replace")


def _value(item: _Item, text: str, reason: str):
    """The parsed document where a JSON Schema constrained the item (None where it was cut)."""
    c = item.constraint
    if c is None or c.kind != "json_schema":
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        if reason == "length":
            return None
        raise LocalguideError(f"the output is not a JSON document: {text[:80]!r}") from None
    source = c.source
    if isinstance(source, type) and hasattr(source, "model_validate"):
        return source.model_validate(value)
    return value


def run_batch(model, items, *, parallel: int, constraint: Constraint | None, chat: bool, system: str | None,
              max_tokens: int, sampling: Sampling, speculate: bool, heal: bool, stats: bool,
              context: int | None = None, interrupt: "Interrupt | None" = None,
              particles: int | None = None) -> Iterator[BatchResult]:
    """``Model.batch`` (which documents it); ``interrupt``: once ``winding`` no item starts, once
    ``now`` the items in progress end too (without a result); ``particles``: each item drawn by SMC
    with that many, one item after another."""
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ArgumentError(f"parallel must be a whole number, 1 or more, got {parallel!r}")
    if isinstance(items, (str, bytes, dict)):
        raise ArgumentError("items must be a list of prompts, message lists or dicts")
    queue = deque(_item(i, raw, constraint, max_tokens, sampling.seed) for i, raw in enumerate(items))
    if not queue:
        return
    for item in queue:  # (errors of preparation are the item's, before anything is decoded)
        if item.error is None:
            try:
                _prepare(model, item, chat, system, heal and particles is None)
            except Exception as e:  # noqa: BLE001 - the item's error
                item.error = e
    if particles is not None:
        from .smc import check_particles

        check_particles(particles)
        yield from _smc_items(model, queue, sampling.temperature, particles, interrupt)
        return
    # Every prompt shares its leading tokens with the others (an instruction, few-shot examples, a
    # system prompt): decoded once and copied, where they decode alike in every sequence.
    shared = _shared_prefix([item.tokens for item in queue if item.error is None])
    engine = model.engine if parallel == 1 else model.engine_for(parallel, context or model.context_size)
    running: dict[int, tuple[_Item, object]] = {}
    counts_used = {}
    try:
        while queue or running:
            if interrupt is not None and (interrupt.now or interrupt.winding and not running):
                return
            _foreign(engine, running, parallel)
            while queue and engine.idle() and not (interrupt is not None and interrupt.winding):
                item = queue.popleft()
                if item.error is not None:
                    yield BatchResult(item.index, item.id, error=item.error)
                    continue
                try:
                    counts = None
                    if item.guide is not None and speculate:
                        counts = counts_used[item.counts_key] = model.draft_counts(item.counts_key)
                    limit = item.fast_limit if item.chat_run is not None and item.fast_limit else None
                    if shared >= engine.chunk:
                        limit = shared if limit is None else min(limit, shared)
                    lane = engine.open(Request(item.tokens, item.guide, item.max_tokens,
                                               Sampling(sampling.temperature, sampling.top_k, sampling.top_p,
                                                        sampling.min_p, item.seed),
                                               speculate=speculate, counts=counts, healed=item.healed,
                                               stats=stats, fast_limit=limit))
                except Exception as e:  # noqa: BLE001 - the item's error
                    yield BatchResult(item.index, item.id, error=e)
                    continue
                running[id(lane)] = (item, lane)
            if not running:
                continue
            for lane in engine.step():
                item, _ = running.pop(id(lane))
                engine.release(lane, keep_cache=lane.error is None)
                yield _result(model, item, lane)
    finally:
        for item, lane in running.values():
            engine.release(lane, keep_cache=False)
        for counts in counts_used.values():
            counts.save()


def _smc_items(model, items, temperature: float, particles: int, interrupt) -> Iterator[BatchResult]:
    """Each item drawn by SMC (``Model.sample_smc``), in turn: its own errors in its result."""
    from .smc import Cancelled

    for item in items:
        if interrupt is not None and (interrupt.now or interrupt.winding):
            return
        if item.error is not None:
            yield BatchResult(item.index, item.id, error=item.error)
            continue
        try:
            tokens = model.sample_smc(item.tokens, item.guide and item.guide.copy, item.max_tokens, particles,
                                      temperature, item.seed, cancelled=lambda: interrupt is not None and interrupt.now)
            stats = model.last_stats
            text = _text(model, item, tokens)
            yield BatchResult(item.index, item.id, text, _value(item, text, "stop"), "stop", stats)
        except Cancelled:
            return  # (the second Ctrl-C: no result for the item in progress, as with masking)
        except Exception as e:  # noqa: BLE001 - the item's error
            yield BatchResult(item.index, item.id, error=e)


def _foreign(engine, running: dict, parallel: int) -> None:
    """Lanes on the engine that are not this batch's: with one sequence, a generation its caller
    left (released, as ``generate`` does); with several, another batch's (refused: its results
    would end here)."""
    for lane in engine.active():
        if id(lane) in running:
            continue
        if parallel > 1:
            raise LocalguideError(f"another batch is running on this model's {parallel} sequences: "
                                  "finish it or close its iterator first")
        engine.release(lane, keep_cache=False)


def _result(model, item: _Item, lane: Lane) -> BatchResult:
    if lane.error is not None:
        return BatchResult(item.index, item.id, error=lane.error, stats=lane.stats)
    try:
        text = _text(model, item, lane.out)
        value = _value(item, text, lane.reason)
    except Exception as e:  # noqa: BLE001 - the item's error
        return BatchResult(item.index, item.id, error=e, stats=lane.stats)
    return BatchResult(item.index, item.id, text, value, lane.reason, lane.stats)


def _shared_prefix(prompts: list[list[int]]) -> int:
    """How many leading tokens every prompt (two or more) has in common (0: none)."""
    if len(prompts) < 2:
        return 0
    first = prompts[0]
    n = min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        i = 0
        while i < n and p[i] == first[i]:
            i += 1
        n = i
        if n == 0:
            break
    return n
