"""The HTTP side of ``localguide serve``: OpenAI's routes on Starlette, answers from an engine.

A request's body is read on the event loop, then checked (``api``) and prepared (messages
rendered, the constraint compiled through a cache bounded in entries and bytes) in a thread, so
that the event loop, ``/health`` included, never waits on either. A constraint not in the cache
compiles in a worker process (``localguide.server.compile_workers``), within ``compile_timeout``
counted from when a worker takes it; the request is then queued to the engine, whose thread
sends the answer's events (``answer.py``) back to the request's event loop, which writes them in
OpenAI's shapes (``wire.py``). A client that goes away cancels its request: the engine frees its
sequence at its next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hmac
import json
import logging
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .compile_workers import CompileTimeout, CompileWorkers
from ..constraint import Constraint
from ..grammar.confined import Confined
from ..errors import (BudgetError, EmptyLanguageError, GrammarError, LocalguideError, PatternError,
                      SchemaError)
from ..chat.conversation import ChatError, ChatRun
from ..chat.plain import TextError
from ..guides.stops import StopText
from ..chat.template import ChatTemplateError
from ..chat.tools import ToolError
from ..runtime.lru import BoundedCache
from . import ollama
from .api import ApiError, Job, Limits, parse_chat, parse_completion
from .body import plain_text, read_body
from .answer import Answer
from .metrics import Metrics
from .ollama_wire import OllamaAnswer, describe_model
from .ollama_wire import error_response as ollama_error
from .wire import OpenAIAnswer, error_response

LOG = logging.getLogger("localguide.server")
MAX_BODY = 4 * 1024 * 1024
# (bodies past this many bytes are read one at a time: reading one takes a core for up to a second,
# and a flood of them would otherwise take every core from the requests beside it)
LARGE_BODY = 256 * 1024
COMPILE_WORKERS = 2        # constraints compiled at once (each in a process of its own)
MAX_WAITING_COMPILES = 16  # more requests that would compile are 429s
MAX_WAITING_SMC = 4  # SMC answers waiting for the one that draws: more are 429s
# (threads that read and prepare requests: those of the compiles that may wait, and more for the rest)
PREPARE_THREADS = COMPILE_WORKERS + MAX_WAITING_COMPILES + 4
# (small requests that take each path of the server once: its kernels loaded, its first allocations made)
WARM_UP = (
    ("completion", {"prompt": "Hi", "max_tokens": 2, "temperature": 0}),
    ("completion", {"prompt": "Hi", "max_tokens": 4, "regex": "[a-z]{1,3}", "stop": ["q"]}),
    ("completion", {"prompt": "Hi", "max_tokens": 8, "grammar": 'start: "a" start | "b"'}),
    ("chat", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "response_format": {
        "type": "json_schema", "json_schema": {"name": "w", "schema": {
            "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}}),
)


class CompileCache:
    """Compiled constraints shared between requests (``Constraint.key()`` as the key): least
    recently used out past ``entries`` or ``max_bytes`` (the indexes' arrays, estimated)."""

    def __init__(self, compile, entries: int = 64, max_bytes: int = 1 << 30):
        self._compile = compile
        self._items = BoundedCache(entries, max_bytes)

    def __call__(self, constraint):
        if constraint is None:
            return None
        key = constraint.key()
        hit = self._items.get(key) if key is not None else None
        if hit is not None:
            return hit
        index = self._compile(constraint)
        if key is not None and index is not None:
            self._items.put(key, index)
        return index

    def __len__(self) -> int:
        return len(self._items)


def _api_error(e: BaseException, job: Job | None) -> ApiError:
    """A preparation's error as the request's error (400 naming the field), or a 500 that says
    what failed without a traceback."""
    if isinstance(e, ApiError):
        return e
    named = job.constraint.kind if job is not None and job.constraint is not None else None
    param = {"json_schema": "response_format"}.get(named, named)
    if isinstance(e, ToolError):
        param = "tool_choice" if "tool_choice" in str(e) else "tools"
    elif isinstance(e, TextError):
        param = e.field
    elif isinstance(e, (ChatError, ChatTemplateError)):
        param = "messages"
    elif isinstance(e, BudgetError):
        param = "max_tokens"
    elif isinstance(e, SchemaError) and job is not None and job.tools:
        param = "tools"
    elif not isinstance(e, (PatternError, GrammarError, SchemaError, EmptyLanguageError)):
        param = None
    if isinstance(e, (LocalguideError, ValueError, TypeError)):
        return ApiError(str(e), param)
    if isinstance(e, (RecursionError, MemoryError)):  # (a bound missed upstream: still the request's fault)
        return ApiError(f"the request's {param or 'input'} is too large or too deeply nested to handle "
                        f"({type(e).__name__})", param, code="too_complex")
    # (the exception's text may name the server's files: the type only)
    return ApiError(f"internal error ({type(e).__name__})", None, status=500, type="server_error")


class RequestLog:
    """ASGI middleware: once a request's response has ended, it is counted (``metrics``) and, at
    INFO, logged as one line on the ``localguide.server`` logger: method, route, status, the
    answer's tokens, seconds."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [0]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.request(scope["path"], status[0], seconds)
            if LOG.isEnabledFor(logging.INFO):
                answer = scope.get("state", {}).get("answer")
                tokens = f" {answer.tokens} tokens" if answer is not None else ""
                path = json.dumps(scope["path"], ensure_ascii=True)[1:-1]  # (a request's newlines and escapes, as text)
                LOG.info("%s %s %s%s %.3f s", scope["method"], path, status[0] or "-", tokens, seconds)


def _shutting_down() -> ApiError:
    return ApiError("the server is shutting down", status=503, type="server_error", code="shutting_down")

class _Refit(Exception):
    """The prompt leaves ``room`` tokens of the context for an answer whose budget fills it."""

    def __init__(self, room: int):
        self.room = room


class Server:
    """The routes over one model and engine."""

    def __init__(self, model, engine, *, name: str, limits: Limits, api_key: str | None = None,
                 cache_entries: int = 64, cache_bytes: int = 1 << 30, max_body: int = MAX_BODY,
                 grammar_dir=None, cors: list[str] | None = None, hosts: list[str] | None = None):
        self.model, self.engine, self.name, self.limits = model, engine, name, limits
        self.api_key, self.max_body = api_key, max_body
        self.confined = Confined(None if grammar_dir is None else Path(grammar_dir))
        self.compiled = CompileCache(self._compile, cache_entries, cache_bytes)
        # (a compile holds the interpreter's lock for its whole length: in a process of its own, it
        # delays no other request; its time is charged to its own request only)
        self.workers = CompileWorkers(model.path, COMPILE_WORKERS)
        self._pool = ThreadPoolExecutor(max_workers=PREPARE_THREADS, thread_name_prefix="localguide-prepare")
        # (one SMC answer at a time, its particles in a context of its own: the next waits)
        self._smc = ThreadPoolExecutor(max_workers=1, thread_name_prefix="localguide-smc")
        self._smc_jobs: set = set()  # the Answers of SMC drawing or waiting to
        self.smc_busy_since: float | None = None  # (the draw's calls into llama.cpp: a watchdog's)
        self._smc_count = threading.Lock()
        self._closing = False
        self._compiling = 0  # compiles running or waiting for a worker
        self._requests = 0  # requests read, prepared or answered (not streams after their answer began)
        self._count = threading.Lock()
        self._large = asyncio.Semaphore(1)
        self.created = int(time.time())
        self._description = None
        self._describing: asyncio.Lock | None = None
        self._cut_done = False
        self._loop = None
        self._live: weakref.WeakSet = weakref.WeakSet()  # the queues of answers under way (drain)
        self.metrics = Metrics()
        self.app = Starlette(routes=[
            Route("/", self.playground, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics_text, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.model_entry, methods=["GET"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/api/chat", self.ollama_chat, methods=["POST"]),
            Route("/api/generate", self.ollama_generate, methods=["POST"]),
            Route("/api/tags", self.ollama_tags, methods=["GET"]),
            Route("/api/ps", self.ollama_tags, methods=["GET"]),
            Route("/api/show", self.ollama_show, methods=["POST"]),
            Route("/api/version", self.ollama_version, methods=["GET"]),
            Route("/api/pull", self.ollama_pull, methods=["POST"]),
        ], exception_handlers={404: self._not_found, 405: self._not_allowed}, lifespan=self._lifespan,
            middleware=[Middleware(RequestLog, metrics=self.metrics)]
            + ([Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))] if hosts else []) + ([Middleware(
                CORSMiddleware, allow_origins=list(cors), allow_methods=["GET", "POST"], allow_headers=["*"],
                max_age=600)] if cors else []))

    # -- plain routes -------------------------------------------------------------------------
    async def playground(self, request: Request) -> Response:
        page = resources.files("localguide.server").joinpath("playground.html").read_text(encoding="utf-8")
        return HTMLResponse(page)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.name, "parallel": self.engine.parallel,
                             "active": self.engine.active(), "waiting": self.engine.waiting()})

    async def metrics_text(self, request: Request) -> Response:
        if (denied := self._auth(request)) is not None:
            return denied
        text = self.metrics.render({
            "sequences_active": ("Requests generating now.", self.engine.active()),
            "requests_waiting": ("Requests waiting for a sequence.", self.engine.waiting()),
            "compiles_running": ("Constraints compiling or waiting to.", self._compiling),
            "parallel": ("Sequences decoded together (serve --parallel).", self.engine.parallel)})
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        if (denied := self._auth(request)) is not None:
            return denied
        return JSONResponse({"object": "list", "data": [self._entry()]})

    async def model_entry(self, request: Request) -> Response:
        if (denied := self._auth(request)) is not None:
            return denied
        asked = request.path_params["model"]
        if asked != self.name:
            return error_response(ApiError(f"no model {asked!r}: this server serves {self.name!r}", "model",
                                           status=404, code="model_not_found"))
        return JSONResponse(self._entry())

    def _entry(self) -> dict:
        return {"id": self.name, "object": "model", "created": self.created, "owned_by": "localguide"}

    async def ollama_tags(self, request: Request) -> Response:
        if (denied := self._auth(request, ollama_error)) is not None:
            return denied
        d = await self._described()
        return JSONResponse({"models": [{k: v for k, v in d.items() if k not in ("model_info", "template")}]})

    async def ollama_show(self, request: Request) -> Response:
        if (denied := self._auth(request, ollama_error)) is not None:
            return denied
        try:
            data = await self._read(request)
            async with self._large:  # (read off the event loop, one at a time: nothing here needs more)
                body = await asyncio.get_running_loop().run_in_executor(self._pool, read_body, data)
            if not isinstance(body, dict) or not isinstance(body.get("model", body.get("name")), str):
                raise ApiError("expected {\"model\": NAME}", "model")
        except ApiError as e:
            return ollama_error(e)
        d = await self._described()
        return JSONResponse({"modelfile": "", "parameters": "", "template": d["template"], "details": d["details"],
                             "model_info": d["model_info"], "capabilities": ["completion", "tools"],
                             "modified_at": d["modified_at"]})

    async def ollama_pull(self, request: Request) -> Response:
        """Ollama's pull of the model served: there already (``success``); any other is a 404, as
        nothing is fetched."""
        if (denied := self._auth(request, ollama_error)) is not None:
            return denied
        try:
            data = await self._read(request)
            async with self._large:
                body = await asyncio.get_running_loop().run_in_executor(self._pool, read_body, data)
            name = body.get("model", body.get("name")) if isinstance(body, dict) else None
            if not isinstance(name, str):
                raise ApiError("expected {\"model\": NAME}", "model")
            if not self._serves(name):
                raise ApiError(f"no model {name!r} here: localguide serve fetches nothing; it serves {self.name!r}",
                               "model", status=404)
        except ApiError as e:
            return ollama_error(e)
        if body.get("stream", True) is False:
            return JSONResponse({"status": "success"})
        return Response('{"status":"success"}\n', media_type="application/x-ndjson")

    def _serves(self, name: str) -> bool:
        """Whether ``name`` names the model served: its name, with or without a tag."""
        own = self.name.split(":")[0]
        return name in (self.name, own) or name.split(":")[0] == own

    async def ollama_version(self, request: Request) -> Response:
        from .._version import __version__

        return JSONResponse({"version": __version__})

    async def _described(self) -> dict:
        if self._description is None:  # (the file's sha256: once, off the event loop, one reader at a time)
            if self._describing is None:
                self._describing = asyncio.Lock()
            async with self._describing:
                if self._description is None:
                    self._description = await asyncio.get_running_loop().run_in_executor(
                        self._pool, describe_model, self.model, self.name)
        return self._description

    async def _not_found(self, request: Request, exc) -> Response:
        path = request.url.path
        if path.startswith("/api/"):  # (Ollama's routes this server does not offer: its error form)
            what = "embeddings" if path.startswith("/api/embed") else "model management"
            return ollama_error(ApiError(f"{path} is not offered: localguide serve has no {what} (it serves "
                                         f"{self.name!r}; see /api/tags)", status=404))
        return error_response(ApiError(f"no route {path}", status=404))

    async def _not_allowed(self, request: Request, exc) -> Response:
        return error_response(ApiError(f"{request.method} is not allowed on {request.url.path}", status=405))

    def _auth(self, request: Request, respond=error_response) -> Response | None:
        if self.api_key is None:
            return None
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), f"Bearer {self.api_key}".encode()):
            return respond(ApiError("a valid API key is needed: Authorization: Bearer KEY", status=401,
                                   code="invalid_api_key"))
        return None

    def drain(self, timeout: float) -> None:
        """Shutting down (any thread): answers under way have ``timeout`` seconds to end; then each
        ends with an error (a stream: its error event and end marker; a whole body: a 503)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.call_later, timeout, self._cut)

    def _cut(self) -> None:
        self._cut_done = True
        for queue in list(self._live):
            queue.put_nowait(("error", ApiError("the server is shutting down: the answer was cut (serve "
                                                "--drain-timeout)", status=503, type="server_error",
                                                code="shutting_down")))

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        self._loop = asyncio.get_running_loop()
        yield
        # (here, not only in serve()'s finally: uvicorn ends on SIGTERM by raising it again, after this)
        await asyncio.get_running_loop().run_in_executor(None, self.workers.close)

    def warm_up(self, settle: float = 60.0) -> list:
        """Serve ``WARM_UP``'s requests (their answers dropped), then set every object alive aside
        from the cycle collector (``gc.freeze``): the modules, the model, the kernels. A full
        collection otherwise walks them all, 0.1-0.2 s with the interpreter's lock held, in which
        ``/health`` and every request wait; after it, a collection walks only what requests made
        since. Returns each request's finish reason or error (an error is not raised: a real
        request meeting it says so itself)."""
        outcomes = [self._warm(route, body) for route, body in WARM_UP]
        # (frozen objects are never collected, even once they are cyclic garbage: so the freeze waits
        # until no request is under way, and is left out where that does not come within ``settle`` s)
        deadline = time.monotonic() + settle
        while not self._idle():
            if time.monotonic() > deadline:
                return outcomes
            time.sleep(0.05)
        gc.collect()
        if self._idle():
            gc.freeze()
        return outcomes

    def _warm(self, route: str, body: dict):
        done: list = []
        ended = threading.Event()
        try:
            job = (parse_chat if route == "chat" else parse_completion)(body, self.limits)
            prepared = (self._prepare_chat if route == "chat" else self._prepare_completion)(job)
            work = Answer(job, prepared, route == "chat", self.model.vocabulary, lambda event: None).work
            work.on_token = lambda token: True
            work.on_done = lambda reason, error, stats: (done.append(error or reason), ended.set())
            self.engine.submit(work)
            ended.wait(120)
            return done[0] if done else TimeoutError("no answer in 120 s")
        except Exception as e:  # noqa: BLE001
            return e

    def _idle(self) -> bool:
        return self._requests == 0 and self.engine.active() == 0 and self.engine.waiting() == 0 and not self._smc_jobs

    def close(self) -> None:
        """End the compile workers and the engine."""
        self.workers.close()
        self._closing = True  # (a draw under way stops at its next step: it holds the model)
        self._smc.shutdown(wait=True, cancel_futures=True)
        self.engine.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _read(self, request: Request) -> bytes:
        data, size = bytearray(), 0
        async for chunk in request.stream():  # (read to its end, so the client hears the answer)
            size += len(chunk)
            if size <= self.max_body:
                data += chunk
            elif size > 16 * self.max_body:
                break
        if size > self.max_body:
            raise ApiError(f"the request body is over {self.max_body} bytes", status=413)
        return bytes(data)

    # -- generation ---------------------------------------------------------------------------
    def _compile(self, constraint: Constraint):
        """``Model.compile`` of a request's constraint (a grammar confined: text or a name, never a
        path): compiled in a worker process into the disk cache, then loaded from there."""
        if constraint.kind == "grammar":
            constraint = constraint.with_options(confined=self.confined)
        self._in_worker(constraint)
        return self.model.compile(constraint)

    def _in_worker(self, constraint: Constraint) -> None:
        with self._count:
            if self._compiling >= COMPILE_WORKERS + MAX_WAITING_COMPILES:
                raise ApiError(f"{self._compiling} constraints are compiling or waiting to: retry later, or send a "
                               "constraint compiled already", status=429, type="rate_limit_error", code="busy")
            self._compiling += 1
        try:
            self.workers.compile(constraint, self.limits.compile_timeout)
        except CompileTimeout:
            raise ApiError(f"compiling the request's constraint took over {self.limits.compile_timeout:g} s "
                           "(serve --compile-timeout): refused", code="compile_timeout") from None
        finally:
            with self._count:
                self._compiling -= 1

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, parse_chat, "openai")

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, parse_completion, "openai")

    async def ollama_chat(self, request: Request) -> Response:
        return await self._generate(request, ollama.parse_chat, "ollama")

    async def ollama_generate(self, request: Request) -> Response:
        return await self._generate(request, ollama.parse_generate, "ollama-generate")

    async def _generate(self, request: Request, parse, wire: str) -> Response:
        if (denied := self._auth(request, error_response if wire == "openai" else ollama_error)) is not None:
            return denied
        self._requests += 1  # (on the event loop only)
        try:
            return await self._answer(request, parse, wire)
        finally:
            self._requests -= 1

    async def _answer(self, request: Request, parse, wire: str) -> Response:
        job = None
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        respond = error_response if wire == "openai" else ollama_error
        try:
            data = await self._read(request)
            # (reading the JSON, checking and preparing it: in a thread, the event loop free meanwhile)
            read = functools.partial(self._parse, parse, data)
            if len(data) > LARGE_BODY:
                async with self._large:
                    job = await loop.run_in_executor(self._pool, read)
            else:
                job = await loop.run_in_executor(self._pool, read)
            t = time.perf_counter()
            try:
                prepared = await loop.run_in_executor(self._pool, self._prepare, job)
            finally:
                compile_seconds = time.perf_counter() - t
                self.metrics.add(compile_seconds_total=compile_seconds)
        except Exception as e:  # noqa: BLE001 - every fault is the request's answer
            return respond(_api_error(e, job))
        chat = job.messages is not None
        if self._cut_done:  # (prepared after the answers under way were cut: the server is going)
            return respond(_shutting_down())
        queue: asyncio.Queue = asyncio.Queue()
        self._live.add(queue)
        answer = Answer(job, prepared, chat, self.model.vocabulary,
                        lambda event: loop.call_soon_threadsafe(queue.put_nowait, event), metrics=self.metrics,
                        compile_seconds=compile_seconds)
        if wire == "openai":
            stream = OpenAIAnswer(queue, answer, chat=chat, model=self.name, job=job,
                                  api_error=lambda e: _api_error(e, job))
            media = "text/event-stream"
        else:
            stream = OllamaAnswer(queue, answer, generate=wire == "ollama-generate", job=job,
                                  model=job.options.get("model") or self.name,
                                  api_error=lambda e: _api_error(e, job), started=started)
            media = "application/x-ndjson"
        request.state.answer = answer  # (the request log's tokens)
        if job.smc is not None:
            with self._smc_count:  # (a waiter whose client has gone holds no place)
                busy = sum(not a.work.cancelled for a in self._smc_jobs) > MAX_WAITING_SMC
                if not busy:
                    self._smc_jobs.add(answer)
            if busy:
                self._live.discard(queue)
                return respond(ApiError(f"{MAX_WAITING_SMC + 1} SMC answers are drawing or waiting (one is drawn at "
                                        "a time): try again later", status=429, type="rate_limit_error", code="busy"))
            try:
                future = self._smc.submit(self._draw_smc, job, prepared, answer)
            except RuntimeError:  # (the executor is shut down: the server is going)
                with self._smc_count:
                    self._smc_jobs.discard(answer)
                self._live.discard(queue)
                return respond(_shutting_down())
            future.add_done_callback(functools.partial(self._smc_dropped, answer))
        else:
            self.engine.submit(answer.work)
        if job.stream:
            return StreamingResponse(stream.events(), media_type=media, headers={"Cache-Control": "no-cache"})
        return await stream.whole(request)

    def _smc_dropped(self, answer: Answer, future) -> None:
        """A waiting SMC answer dropped when the server closed (it never ran): counted out, answered."""
        if future.cancelled():
            with self._smc_count:
                self._smc_jobs.discard(answer)
            answer._on_done("stop", _shutting_down(), None)

    def _draw_smc(self, job: Job, prepared, answer: Answer) -> None:
        """The ``smc`` extension's answer: drawn by SMC (``localguide.engines.llamacpp.smc``) in a
        context of its own, its tokens then read as the engine's would be."""
        from ..engines.llamacpp.loop import GenerationStats
        from ..engines.llamacpp.smc import Cancelled, run_smc

        what, _ = prepared
        tokens, guide = (what.prompt_tokens, what.guide) if job.messages is not None else what[:2]
        try:
            if answer.work.cancelled:
                return
            if self._closing or self._cut_done:
                raise _shutting_down()
            if guide is None:
                raise ApiError("smc needs a constraint", "smc")
            answer.work.started = started = time.perf_counter()
            answer._on_start()
            out, st = run_smc(self.model, tokens, guide.copy, job.max_tokens, job.smc, job.sampling.temperature,
                              job.sampling.seed, lock=self.engine.lock, keep=False, context=self.limits.context,
                              cancelled=lambda: answer.work.cancelled or self._closing or self._cut_done,
                              busy=lambda since: setattr(self, "smc_busy_since", since))
        except Cancelled:
            if not answer.work.cancelled:  # (the server is going: the answer says so)
                answer._on_done("stop", _shutting_down(), None)
            return
        except Exception as e:  # noqa: BLE001 - the request's answer
            answer._on_done("stop", e, None)
            return
        finally:
            with self._smc_count:
                self._smc_jobs.discard(answer)
        try:
            for t in out:
                answer._on_token(t)
        except Exception as e:  # noqa: BLE001 - the request's answer (its reading of the tokens failed)
            answer._on_done("stop", e, None)
            return
        answer._on_done("stop", None, GenerationStats(prompt_tokens=len(tokens), tokens=len(out), smc=st,
                                                      seconds=time.perf_counter() - started, finish_reason="stop"))

    def _prepare(self, job: Job):
        """The job's prompt and guide (a chat's or a completion's); a budget that fills the context
        (``Job.fill``) cut to the room the prompt leaves, the guide made again for it."""
        prepare = self._prepare_chat if job.messages is not None else self._prepare_completion
        try:
            return prepare(job)
        except _Refit as e:
            job.max_tokens, job.fill = e.room, False
            return prepare(job)

    def _parse(self, parse, data: bytes) -> Job:
        return parse(read_body(data), self.limits, texts=not plain_text(data))

    def _prepare_chat(self, job: Job):
        run = ChatRun(self.model, job.messages, tools=job.tools, tool_choice=job.tool_choice,
                      parallel_tool_calls=job.parallel_tool_calls, after=job.after,
                      max_reasoning_tokens=job.max_reasoning_tokens,
                      template_variables=job.options.get("template_variables"), max_tokens=job.max_tokens,
                      constraint=job.constraint, compile=self.compiled, lock=self.engine.lock)
        n = len(run.prompt_tokens)
        self._check_context(n, job, "messages")
        return run, n

    def _prepare_completion(self, job: Job):
        index = self.compiled(job.constraint)
        with self.engine.lock:
            tokens, guide, healed = self.model.prepare_completion(job.prompt, index, job.max_tokens, heal=job.heal)
        self._check_context(len(tokens) + bool(healed), job, "prompt")
        complete = self.model.complete(index, self.engine.lock) if job.stop and index is not None else None
        key = job.constraint.key() if job.constraint is not None else None
        return (tokens, guide, healed, key, StopText(job.stop, complete)), len(tokens) + bool(healed)

    def _check_context(self, n: int, job: Job, param: str) -> None:
        if job.fill and n < self.limits.context and n + job.max_tokens > self.limits.context:
            raise _Refit(self.limits.context - n)
        if job.fill and n + job.max_tokens > self.limits.context:
            raise ApiError(f"the prompt ({n} tokens) leaves no room for an answer in the context of "
                           f"{self.limits.context} tokens per sequence (serve --n-ctx)", param)
        if n + job.max_tokens > self.limits.context:
            raise ApiError(f"the prompt ({n} tokens) plus max_tokens ({job.max_tokens}) exceeds the context of "
                           f"{self.limits.context} tokens per sequence (serve --n-ctx)", param)
