"""OpenAI's wire shapes of an answer's events (``answer.py``): server-sent chunks of
``chat.completion.chunk`` or ``text_completion``, or one whole ``chat.completion`` /
``text_completion`` body; errors as OpenAI's error body."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

STATS_KEYS = ("prompt_tokens", "cached_tokens", "tokens", "decode_calls", "drafted", "accepted", "seconds",
              "tokens_per_second", "healed_bytes", "interventions", "mass_removed_mean", "mass_removed_max",
              "nll", "measured_tokens")


def stats_fields(stats, answer) -> dict:
    """A request's ``stats``: the generation's (``tokens_per_second`` after the prompt, over the
    generation alone), and apart from it the seconds it waited to compile and for a sequence."""
    out = {k: getattr(stats, k, None) for k in STATS_KEYS}
    out["compile_seconds"] = round(answer.compile_seconds, 6)
    out["queue_seconds"] = round(answer.queue_seconds, 6)
    out["prompt_seconds"] = getattr(stats, "prompt_seconds", None)
    smc = getattr(stats, "smc", None)
    if smc is not None:  # (the smc extension's draw)
        out["smc"] = {"particles": smc.particles, "ess": [round(x, 3) for x in smc.ess], "resampled": smc.resampled,
                      "log_marginal": smc.log_marginal, "distinct": smc.distinct}
    return out


def error_response(e) -> JSONResponse:
    """An ``ApiError`` as OpenAI's error body and status."""
    return JSONResponse(e.body(), status_code=e.status)


class OpenAIAnswer:
    """One answer's events from ``queue`` written in OpenAI's shapes. ``answer``: its ``Answer``
    (token counts; its work is cancelled once the answer is written or its client has gone);
    ``api_error(exception)``: the ``ApiError`` an engine's error answers with."""

    def __init__(self, queue: asyncio.Queue, answer, *, chat: bool, model: str, job, api_error):
        self.queue, self.answer, self.chat, self.model, self.job = queue, answer, chat, model, job
        self._api_error = api_error
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self._streamed = 0  # calls whose deltas were streamed

    def _delta(self, event) -> dict | None:
        kind, value = event[0], event[1]
        if kind == "reasoning":
            return {"reasoning_content": value}
        if kind == "call_deltas":
            self._streamed = max([self._streamed, *(d["index"] + 1 for d in value)])
            return {"tool_calls": value}
        if kind == "calls":  # (whole, those not streamed already)
            rest = [{"index": i, **c} for i, c in enumerate(value) if i >= self._streamed]
            return {"tool_calls": rest} if rest else None
        return {"content": value} if self.chat else {"text": value}

    def _usage(self) -> dict:
        p, c = self.answer.prompt_tokens, self.answer.tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _extra(self, stats) -> dict:
        if not self.job.stats or stats is None:
            return {}
        return {"localguide": stats_fields(stats, self.answer)}

    def _chunk(self, delta: dict | None, finish=None, **extra) -> str:
        if self.chat:
            choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
            body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": [choice], **extra}
        else:
            choice = {"index": 0, "text": (delta or {}).get("text", ""), "logprobs": None, "finish_reason": finish}
            body = {"id": self.id, "object": "text_completion", "created": self.created,
                    "model": self.model, "choices": [choice], **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    async def events(self):
        """The answer as server-sent events, ``[DONE]`` last."""
        try:
            yield ": queued\n\n"  # (an SSE comment, which clients skip: the playground shows it)
            if self.chat:
                yield self._chunk({"role": "assistant", "content": ""})
            while True:
                item = await self.queue.get()
                if item[0] == "started":
                    yield ": generating\n\n"
                    continue
                if item[0] == "error":
                    yield f"data: {json.dumps(self._api_error(item[1]).body(), ensure_ascii=False)}\n\n"
                    yield "data: [DONE]\n\n"
                    return
                if item[0] != "done":
                    delta = self._delta(item)
                    if delta is not None:
                        yield self._chunk(delta)
                    continue
                _, finish, stats = item
                yield self._chunk(None, finish, **self._extra(stats))
                if self.job.include_usage:
                    body = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                            "created": self.created, "model": self.model, "choices": [], "usage": self._usage()}
                    yield f"data: {json.dumps(body)}\n\n"
                yield "data: [DONE]\n\n"
                return
        finally:
            self.answer.work.cancelled = True  # (the client went away, or the answer is done: either way)

    async def whole(self, request: Request) -> Response:
        """The answer as one body, once it is done (499 where the client went away first)."""
        got = await collect(self.queue, request, self.answer.work)
        if got is None:
            return Response(status_code=499)
        item, content, reasoning, calls = got
        if item[0] == "error":
            return error_response(self._api_error(item[1]))
        _, finish, stats = item
        if self.chat:
            message = {"role": "assistant", "content": content if not calls or content else None}
            if reasoning:
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = calls
            choice = {"index": 0, "message": message, "finish_reason": finish}
            body = {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                    "choices": [choice], "usage": self._usage(), **self._extra(stats)}
        else:
            choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": finish}
            body = {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                    "choices": [choice], "usage": self._usage(), **self._extra(stats)}
        return JSONResponse(body)


async def collect(queue: asyncio.Queue, request: Request, work):
    """An answer's events until its last: (the "done" or "error" event, the content, the reasoning,
    the tool calls); None where the client went away first. ``work`` is cancelled either way."""
    content, reasoning, calls = [], [], []
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), 0.5)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return None
                continue
            if item[0] in ("done", "error"):
                return item, "".join(content), "".join(reasoning), calls
            if item[0] in ("call_deltas", "started"):
                continue
            if item[0] == "reasoning":
                reasoning.append(item[1])
            elif item[0] == "calls":
                calls += item[1]
            else:
                content.append(item[1])
    finally:
        work.cancelled = True
