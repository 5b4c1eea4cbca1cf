"""Ollama's wire shapes of an answer's events (``answer.py``): NDJSON lines of ``/api/chat``
(``message``) or ``/api/generate`` (``response``), the last with ``done: true``, how it ended
and its counts and durations (nanoseconds); or one whole body. Errors are ``{"error": ...}``:
a line of the stream, or the body with the status."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from datetime import datetime, timezone

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .wire import collect, stats_fields


def error_response(e) -> JSONResponse:
    """An ``ApiError`` as Ollama's error body and status."""
    return JSONResponse({"error": error_text(e)}, status_code=e.status)


def error_text(e) -> str:
    """An ``ApiError``'s message, led by the field it names where it does not say it yet (Ollama's
    error body has the message alone); the constraint's field is ``format`` here."""
    param = {"response_format": "format", "response_format.json_schema": "format"}.get(e.param, e.param)
    if param and not e.message.startswith(param.split(".")[0]):
        return f"{param}: {e.message}"
    return e.message


def now() -> str:
    """The time as Ollama writes it (RFC 3339, UTC, with nanoseconds' room)."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def ollama_calls(calls: list[dict]) -> list[dict]:
    """OpenAI ``tool_calls`` (arguments a JSON string) in Ollama's form (arguments an object)."""
    out = []
    for i, c in enumerate(calls):
        fn = c["function"]
        out.append({"function": {"index": i, "name": fn["name"], "arguments": json.loads(fn["arguments"])}})
    return out


class OllamaAnswer:
    """One answer's events from ``queue`` in Ollama's shapes; ``generate``: ``/api/generate``'s
    (``response``), else ``/api/chat``'s (``message``). ``started``: ``time.perf_counter()`` when the
    request came (``total_duration``)."""

    def __init__(self, queue: asyncio.Queue, answer, *, generate: bool, model: str, job, api_error, started: float):
        self.queue, self.answer, self.generate, self.model, self.job = queue, answer, generate, model, job
        self._api_error, self.started = api_error, started

    def _line(self, text: str = "", reasoning: str = "", calls=None, done=None, stats=None) -> dict:
        body = {"model": self.model, "created_at": now()}
        if self.generate:
            body["response"] = text
            if reasoning:
                body["thinking"] = reasoning
        else:
            message = {"role": "assistant", "content": text}
            if reasoning:
                message["thinking"] = reasoning
            if calls:
                message["tool_calls"] = ollama_calls(calls)
            body["message"] = message
        body["done"] = done is not None
        if done is not None:
            body["done_reason"] = done
            body.update(self._counts(stats))
        return body

    def _counts(self, stats) -> dict:
        ns = 1_000_000_000
        out = {"total_duration": int((time.perf_counter() - self.started) * ns), "load_duration": 0,
               "prompt_eval_count": self.answer.prompt_tokens, "eval_count": self.answer.tokens}
        if stats is not None:
            out["prompt_eval_duration"] = int(stats.prompt_seconds * ns)
            out["eval_duration"] = int(stats.seconds * ns)
            if self.job.stats:
                out["localguide"] = stats_fields(stats, self.answer)
        return out

    def _event(self, item) -> dict:
        kind, value = item[0], item[1]
        if kind == "reasoning":
            return self._line(reasoning=value)
        if kind == "calls":
            return self._line(calls=value)
        return self._line(text=value)

    async def events(self):
        """The answer as NDJSON lines, the one with ``done: true`` last."""
        try:
            while True:
                item = await self.queue.get()
                if item[0] == "error":
                    yield json.dumps({"error": error_text(self._api_error(item[1]))}, ensure_ascii=False) + "\n"
                    return
                if item[0] in ("call_deltas", "started"):  # (Ollama's streams carry each call whole)
                    continue
                if item[0] != "done":
                    yield json.dumps(self._event(item), ensure_ascii=False) + "\n"
                    continue
                _, finish, stats = item
                yield json.dumps(self._line(done=_reason(finish), stats=stats), ensure_ascii=False) + "\n"
                return
        finally:
            self.answer.work.cancelled = True

    async def whole(self, request: Request) -> Response:
        """The answer as one body, once it is done (499 where the client went away first)."""
        got = await collect(self.queue, request, self.answer.work)
        if got is None:
            return Response(status_code=499)
        item, content, reasoning, calls = got
        if item[0] == "error":
            return error_response(self._api_error(item[1]))
        return JSONResponse(self._line(content, reasoning, calls, _reason(item[1]), item[2]))


def _reason(finish: str) -> str:
    """OpenAI's finish reasons as Ollama's ``done_reason`` (calls end with ``stop`` there)."""
    return "length" if finish == "length" else "stop"


def describe_model(model, name: str) -> dict:
    """``/api/tags``' entry of ``model`` (its file's sha256 as the digest, read whole: a second per
    GB), with ``model_info`` and ``template`` for ``/api/show``."""
    path = model.path
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    d = model.details()
    arch = d["architecture"]
    details = {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
               "parameter_size": _size(d["parameters"]), "quantization_level": d["quantization"]}
    stat = path.stat()
    modified = datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat().replace("+00:00", "Z")
    info = {"general.architecture": arch, "general.parameter_count": d["parameters"],
            f"{arch}.context_length": d["trained_context"]}
    return {"name": name, "model": name, "modified_at": modified, "size": stat.st_size,
            "digest": digest.hexdigest(), "details": details, "model_info": info, "template": d["chat_template"]}


def _size(n: int) -> str:
    """A parameter count as Ollama writes it: 135M, 1.2B."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v >= 10 or v == int(v) else f"{v:.1f}{unit}"
    return str(n)
