"""``localguide serve``: an OpenAI-compatible local server whose structure is guaranteed.

``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``, ``GET /health``
and a playground page at ``/``. Needs the ``server`` extra (``pip install "localguide[server]"``:
Starlette and uvicorn). ``api`` reads the requests, ``engine`` decodes, ``app`` joins them.
"""

from __future__ import annotations

import sys
import threading

from .api import ApiError, Limits
from ..runtime import oldpaths as _oldpaths


def make_server(model, *, parallel: int = 1, n_ctx: int | None = None, api_key: str | None = None,
                max_tokens: int = 4096, default_max_tokens: int = 512, compile_timeout: float = 30.0,
                cache_entries: int = 64, cache_bytes: int = 1 << 30, name: str | None = None,
                grammar_dir=None, cors=None, hosts=None):
    """The server's ``Server`` (its Starlette app is ``.app``) over ``model`` (a ``localguide.Model``):
    ``parallel`` sequences decoded together, each with speculation, healing and the prompt cache
    (1: one request at a time, on the model's own context); ``n_ctx`` tokens of context per sequence (default the model's); ``grammar_dir``:
    a folder whose ``.lark``/``.gbnf`` files requests may name and ``%import`` (beside the shipped
    ones; a request never names a path); ``cors``: origins whose pages may call it from a browser
    (``["*"]``: any); ``hosts``: the names a request's Host header may give (None: any), against
    DNS rebinding: a page elsewhere whose name comes to point at 127.0.0.1 is refused."""
    from .app import Server
    from ..engines.llamacpp.batch import EngineThread

    if parallel < 1:
        raise ValueError("parallel must be at least 1")
    context = n_ctx or model.context_size
    if parallel == 1 and context > model.context_size:
        raise ValueError(f"n_ctx {context} is over the model's context ({model.context_size})")
    engine = EngineThread(model, parallel, context)
    limits = Limits(max_tokens=min(max_tokens, context), default_max_tokens=min(default_max_tokens, context // 2),
                    context=context, compile_timeout=compile_timeout)
    return Server(model, engine, name=name or model.path.stem, limits=limits, api_key=api_key,
                  cache_entries=cache_entries, cache_bytes=cache_bytes, grammar_dir=grammar_dir, cors=cors,
                  hosts=hosts)


LOOPBACK = ("127.0.0.1", "localhost", "::1")
SWITCH_INTERVAL = 0.001  # seconds (Python's default: 0.005)


def serve(model, *, host: str = "127.0.0.1", port: int = 8080, log_level: str = "info", drain_timeout: float = 10.0,
          sock=None, ready=None, stall=None, **options) -> None:
    """Run the server until interrupted (options as ``make_server``); ``log_level`` "info": a line
    per request on stderr, "warning": problems only, "debug": uvicorn's own too. On SIGTERM or
    Ctrl-C it takes no new connection and gives the answers under way ``drain_timeout`` seconds
    to end, then ends each with an error event (a second Ctrl-C: at once). ``sock``: a listening
    socket to serve on instead of binding ``host:port`` (``supervise``'s children); ``ready``: called
    once it serves; ``stall(busy)``: called once the server is made, ``busy()`` giving since when each of
its threads' calls into llama.cpp have run (a watchdog's start)."""
    import logging

    import uvicorn

    log = logging.getLogger("localguide.server")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(log_level.upper())

    if "hosts" not in options and host in LOOPBACK:  # (reached by its loopback names only)
        options["hosts"] = ["127.0.0.1", "localhost", "::1", "[::1]"]
    server = make_server(model, **options)
    if stall is not None:  # (the engine's calls into llama.cpp, and an SMC draw's)
        stall(lambda: (server.engine.engine.busy_since, server.smc_busy_since))
    # (a thread that wants the interpreter's lock waits up to this long for each of its turns: the
    # event loop takes several turns to answer /health while threads read and prepare requests)
    sys.setswitchinterval(SWITCH_INTERVAL)
    threading.Thread(target=server.warm_up, name="localguide-warm-up", daemon=True).start()
    try:
        config = uvicorn.Config(server.app, host=host, port=port, log_level="debug" if log_level == "debug" else
                                "warning", access_log=log_level == "debug",
                                timeout_graceful_shutdown=drain_timeout + 2)  # (after the cut answers' last events)

        class Draining(uvicorn.Server):
            async def startup(self, sockets=None):
                await super().startup(sockets=sockets)
                if ready is not None and not self.should_exit:
                    ready()

            def handle_exit(self, sig, frame):
                if not self.should_exit:
                    server.drain(drain_timeout)
                super().handle_exit(sig, frame)

        Draining(config).run(sockets=[sock] if sock is not None else None)
    finally:
        server.close()


__all__ = ["ApiError", "Limits", "make_server", "serve"]


__getattr__ = _oldpaths.getattr_of(__name__)  # (names that moved elsewhere)
