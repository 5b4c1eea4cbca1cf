"""``localguide serve``: the OpenAI-compatible server."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options as O
from .common import _StatusLine, _fail, app, err, load_model, placement, read_template


@app.command()
def serve(
    model: Annotated[Optional[str], typer.Argument(
        help="A model: a GGUF file, or a name from `localguide models` (default: the embedded SmolLM2).",
        show_default=False)] = None,
    host: Annotated[str, typer.Option("--host", help="The address to listen on (loopback unless told).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="The port to listen on.")] = 8080,
    parallel: Annotated[int, typer.Option("--parallel", min=1, max=64,
                                          help="Sequences decoded together, each with speculation, healing "
                                               "and its prompt cache (1: one request at a time); more wait in "
                                               "a queue.")] = 1,
    n_ctx: O.NCtx = 4096,
    n_gpu_layers: O.NGpuLayers = 0,
    threads: O.Threads = None,
    threads_batch: O.ThreadsBatch = None,
    workers: O.Workers = None,
    tensor_split: O.TensorSplit = None,
    reproducible: Annotated[bool, typer.Option(
        "--reproducible/--fastest-kernels",
        help="llama.cpp's kernels that compute each position alike in every batch (the same seed, the same "
             "text, whatever the cache held; --parallel 1); --fastest-kernels: the text may differ.")] = True,
    api_key: Annotated[Optional[str], typer.Option("--api-key", show_default=False,
                                                   help="Requests must send 'Authorization: Bearer KEY'.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1,
                                            help="The most tokens one answer may ask for.")] = 4096,
    compile_timeout: Annotated[float, typer.Option("--compile-timeout", min=0.1,
                                                   help="Seconds a request's constraint may take to compile.")] = 30.0,
    grammar_dir: Annotated[Optional[Path], typer.Option("--grammar-dir", show_default=False,
                                                        help="A folder of .lark/.gbnf grammars requests may name "
                                                             "and %import (besides the shipped ones).")] = None,
    log_level: Annotated[str, typer.Option(
        "--log-level", help="info: a line per request (route, status, tokens, seconds); warning: problems only; "
                            "debug: the web server's own lines too; error.")] = "info",
    drain_timeout: Annotated[float, typer.Option(
        "--drain-timeout", min=0, help="On SIGTERM or Ctrl-C: seconds the answers under way have to end before "
                                       "each is cut with an error event.")] = 10.0,
    worker_timeout: Annotated[float, typer.Option(
        "--worker-timeout", min=1, help="With --workers: seconds one engine step (a decode of up to a prompt "
                                        "chunk per sequence, and its samples) may wait on them before the server "
                                        "starts again (503s name a worker that does not answer meanwhile).")] = 120.0,
    chat_template_file: O.ChatTemplateFile = None,
    cors: Annotated[Optional[list[str]], typer.Option(
        "--cors", show_default=False, help="An origin whose web pages may call the server (repeat the option; "
                                           "'*': any), e.g. http://localhost:3000.")] = None,
) -> None:
    """An OpenAI-compatible server: chat and completions whose structure is guaranteed."""
    try:
        try:
            import uvicorn  # noqa: F401
            import starlette  # noqa: F401
        except ImportError:
            raise typer.BadParameter('the server needs its extra: pip install "localguide[server]"') from None
        from ..server import serve as run_server

        if log_level.lower() not in ("debug", "info", "warning", "error"):
            raise typer.BadParameter(f"expected debug, info, warning or error, got {log_level!r}",
                                     param_hint="--log-level")
        for origin in cors or ():
            if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
                raise typer.BadParameter(f"expected an origin as a browser sends it (http://host:port, no path) "
                                         f"or '*', got {origin!r}", param_hint="--cors")
        from ..server.supervise import FD_VARIABLE, inherited_socket, ready, supervise, watch_decodes

        if workers and FD_VARIABLE not in os.environ:
            # (llama.cpp aborts a process whose worker is lost: the server runs in a child started again)
            if "serve" not in sys.argv:
                raise typer.BadParameter("serving with workers runs from the command line (localguide serve)",
                                         param_hint="--workers")
            names = placement(n_gpu_layers, workers, tensor_split)["workers"]
            say = lambda line: err.print(f"localguide: {line}", markup=False, highlight=False,  # noqa: E731
                                         soft_wrap=True)
            raise typer.Exit(supervise(sys.argv[sys.argv.index("serve"):], host, port, names, say))
        with _StatusLine():
            # (--parallel N decodes in a context of its own: the model's is then only for tokens)
            m = load_model(model, n_ctx=n_ctx if parallel == 1 else 256, n_threads=threads,
                           n_threads_batch=threads_batch, reproducible=reproducible,
                           chat_template=read_template(chat_template_file),
                           **placement(n_gpu_layers, workers, tensor_split))
        err.print(f"localguide serving {m.path.name} on http://{host}:{port} (parallel {parallel}); Ctrl-C to stop",
                  markup=False, highlight=False)
        run_server(m, host=host, port=port, parallel=parallel, n_ctx=n_ctx, api_key=api_key,
                   max_tokens=max_tokens, compile_timeout=compile_timeout, grammar_dir=grammar_dir, cors=cors,
                   log_level=log_level.lower(), drain_timeout=drain_timeout, sock=inherited_socket(), ready=ready,
                   stall=(lambda busy: watch_decodes(busy, worker_timeout, m.workers))
                   if workers and FD_VARIABLE in os.environ else None)
    except typer.Exit:
        raise
    except (typer.BadParameter, Exception) as e:  # noqa: BLE001 - one line, no traceback
        _fail(e)
