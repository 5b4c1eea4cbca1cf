"""``localguide info``: versions, backend, model, caches and kernels."""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path

from typing import Annotated, Optional

import typer

from .common import app
from ..runtime import oldpaths as _oldpaths


@app.command()
def info(workers: Annotated[Optional[str], typer.Option(
        "--workers", show_default=False, help="host:port,... of `localguide worker` processes: each one's "
                                              "devices and free memory.")] = None) -> None:
    """Versions, llama.cpp's backend, the default model, the caches, and whether the kernels are compiled here."""
    rows = report()
    if workers:
        rows += worker_rows([w.strip() for w in workers.split(",") if w.strip()])
    width = max(len(what) for what, _ in rows)
    for what, value in rows:  # plain text: paths are never cut or styled
        print(f"{what:<{width}}  {value}")


def folder_size(path: Path) -> int:
    """Bytes of the files under ``path`` (0 if it does not exist)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def kernels() -> tuple[int, int]:
    """(kernels with machine code cached for this CPU, kernels in all)."""
    from numba.core.registry import CPUDispatcher

    import localguide

    names = [m.name for m in pkgutil.walk_packages(localguide.__path__, "localguide.")
             if m.name.endswith("_kernels") or m.name.endswith(".numba_tools")]
    found = 0
    total = 0
    for name in names:
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if isinstance(obj, CPUDispatcher) and obj.__module__ == module.__name__ and obj._cache is not None:
                total += 1
                index = getattr(getattr(obj._cache, "_cache_file", None), "_index_path", None)
                found += bool(index and Path(index).is_file())
    return found, total


def report() -> list[tuple[str, str]]:
    """The rows of ``localguide info``, as (what, value)."""
    import numba

    from ..engines.llamacpp.system import backend, library_version

    import localguide
    from ..runtime.cache import cache_dir
    from ..runtime.cache import user_kernel_folders
    from ..runtime.numba_cache import kernels_dir

    try:
        model = str(localguide.default_model_path())
    except localguide.LocalguideError as e:
        model = f"none ({e})"
    cd, kd = cache_dir(), kernels_dir()
    done, total = kernels()
    name, offload = backend()
    from ..runtime import threads

    from ..engines.llamacpp.reproducible import available

    chosen = threads.for_model()
    passive, said = threads.passive()
    why_not = available()
    mb = 1 << 20
    return [
        ("localguide", localguide.__version__),
        ("llama-cpp-python", library_version()),
        ("llama.cpp backend", name),
        ("GPU offload", offload),
        ("threads", f"{chosen.n_threads} per token, {chosen.n_threads_batch} per batch ({chosen.why}; "
                    "--threads, --threads-batch)"),
        ("workers wait", f"{'passively' if passive else 'spinning'}: {said}"),
        ("reproducible logits", "yes, for layers on the CPU (llama.cpp's reference kernels after a prompt's whole "
                                "chunks: the same text whatever "
                                "the prompt cache held and whether speculation is on; load(reproducible=False) "
                                "for the fastest kernels per batch)" if not why_not else f"no: {why_not}"),
        ("numba", numba.__version__),
        ("default model", model),
        ("cache", f"{cd} ({folder_size(cd) / mb:.1f} MB, the compiled kernels included)"),
        ("compiled kernels", f"{os.environ['NUMBA_CACHE_DIR']} (NUMBA_CACHE_DIR; "
                             f"{sum(folder_size(d) for d in user_kernel_folders()) / mb:.1f} MB of localguide's)"
         if os.environ.get("NUMBA_CACHE_DIR") else f"{kd} ({folder_size(kd) / mb:.1f} MB)"),
        ("kernels compiled for this CPU", f"{done} of {total}" + ("" if done == total else
                                                                 ": the others compile on first use, once")),
        ("workers (RPC)", rpc_row()),
    ]


def rpc_row() -> str:
    from ..engines.llamacpp import rpc

    why = rpc.available()
    return f"no: {why}" if why else f"yes, RPC protocol {'.'.join(map(str, rpc.PROTOCOL))} (`localguide worker`)"


def worker_rows(endpoints: list[str]) -> list[tuple[str, str]]:
    """Each worker's devices and memory, or why it cannot be used."""
    from ..engines.llamacpp import rpc
    from ..errors import LocalguideError

    rows = []
    try:
        rpc.add_workers(endpoints)
    except (LocalguideError, ValueError) as e:
        return [("workers", f"error: {e}")]
    gb = 1 << 30
    for d in rpc.devices():
        if d["name"].startswith("RPC"):
            rows.append((f"worker device {d['name']}", f"{d['description']}: {d['free'] / gb:.1f} GB free of "
                                                       f"{d['total'] / gb:.1f} GB"))
    return rows


__getattr__ = _oldpaths.getattr_of(__name__)  # (names that moved elsewhere)
