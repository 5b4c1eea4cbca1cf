"""``localguide serve``: the OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import _StatusLine, _fail, app, err


@app.command()
def serve(
    model: Annotated[Optional[Path], typer.Argument(help="A .gguf model (default: the embedded SmolLM2).",
                                                    show_default=False)] = None,
    host: Annotated[str, typer.Option("--host", help="The address to listen on (loopback unless told).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="The port to listen on.")] = 8080,
    parallel: Annotated[int, typer.Option("--parallel", min=1, max=64,
                                          help="Sequences decoded together, each with speculation, healing "
                                               "and its prompt cache (1: one request at a time); more wait in "
                                               "a queue.")] = 1,
    n_ctx: Annotated[int, typer.Option("--n-ctx", min=256, help="Context of each sequence, in tokens.")] = 4096,
    n_gpu_layers: Annotated[int, typer.Option("--n-gpu-layers", help="Layers offloaded to the GPU (-1: all).")] = 0,
    threads: Annotated[Optional[int], typer.Option(
        "--threads", min=1, show_default=False,
        help="Threads of one-token decodes (default: half the CPUs; `localguide info` says why).")] = None,
    threads_batch: Annotated[Optional[int], typer.Option(
        "--threads-batch", min=1, show_default=False,
        help="Threads of batches: prompts, several sequences, verified drafts (default: see `localguide info`).")] = None,
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
) -> None:
    """An OpenAI-compatible server: chat and completions whose structure is guaranteed."""
    try:
        try:
            import uvicorn  # noqa: F401
            import starlette  # noqa: F401
        except ImportError:
            raise typer.BadParameter('the server needs its extra: pip install "localguide[server]"') from None
        import localguide
        from ..server import serve as run_server

        if model is not None and not str(model).lower().endswith(".gguf"):
            raise typer.BadParameter(f"expected MODEL to be a .gguf file, got {str(model)!r}", param_hint="MODEL")
        with _StatusLine():
            # (--parallel N decodes in a context of its own: the model's is then only for tokens)
            m = localguide.load(model, n_gpu_layers=n_gpu_layers, n_ctx=n_ctx if parallel == 1 else 256,
                                n_threads=threads, n_threads_batch=threads_batch, reproducible=reproducible)
        err.print(f"localguide serving {m.path.name} on http://{host}:{port} (parallel {parallel}); Ctrl-C to stop",
                  markup=False, highlight=False)
        run_server(m, host=host, port=port, parallel=parallel, n_ctx=n_ctx, api_key=api_key,
                   max_tokens=max_tokens, compile_timeout=compile_timeout, grammar_dir=grammar_dir)
    except (typer.BadParameter, Exception) as e:  # noqa: BLE001 - one line, no traceback
        _fail(e)
