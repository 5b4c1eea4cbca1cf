"""``localguide worker``: this machine's devices served to a main process (llama.cpp's RPC server)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import _fail, app, err

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command()
def worker(
    host: Annotated[str, typer.Option("--host", help="The address to listen on (loopback unless told: the RPC "
                                                      "protocol has no authentication).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="The port to listen on.")] = 50052,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, show_default=False,
                                                   help="Threads of the CPU device (default: half the CPUs).")] = None,
    cache: Annotated[Optional[Path], typer.Option("--cache", show_default=False,
                     help="A folder where received weights are kept, so that a main process that loads the model "
                          "again sends only their hashes.")] = None,
) -> None:
    """Serve this machine's devices (its GPUs, else its CPU) to a main process started with --workers."""
    try:
        from ..engines.llamacpp import rpc

        why = rpc.available()
        if why:
            raise typer.BadParameter(why)
        if host not in LOOPBACK:
            err.print(f"warning: listening on {host}: llama.cpp's RPC protocol has no authentication, and anyone who "
                      "reaches this port can use this machine's devices and memory; keep it on a trusted network",
                      style="yellow", markup=False, highlight=False)
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
        n = threads or max(1, (os.cpu_count() or 2) // 2)
        err.print(f"localguide worker on {host}:{port} (RPC protocol {'.'.join(map(str, rpc.PROTOCOL))}, {n} threads"
                  + (f", weights kept in {cache}" if cache else "") + "); Ctrl-C to stop", markup=False,
                  highlight=False)
        # (llama.cpp's server loop never returns to Python: the default signal actions end it)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        rpc.serve_worker(host, port, n, str(cache) if cache else None)
    except typer.BadParameter:
        raise
    except Exception as e:  # noqa: BLE001 - one line, no traceback
        _fail(e)
