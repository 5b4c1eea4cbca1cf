"""``localguide cache``: the disk cache's contents, and clearing it."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import app


cache_app = typer.Typer(help="The disk cache of compiled constraints and kernels.", no_args_is_help=True)


app.add_typer(cache_app, name="cache")


@cache_app.command("info")
def cache_info() -> None:
    """Where the cache is, what it holds (by kind) and its bound."""
    from ..runtime import cache

    i = cache.info()
    mb = 1024 * 1024
    print(f"dir         {i['dir']}")
    print(f"files       {i['files']} ({i['bytes'] / mb:.1f} MB; bound {i['max_bytes'] / mb:.0f} MB, "
          "LOCALGUIDE_CACHE_MAX_BYTES)")
    for kind, (n, b) in sorted(i["kinds"].items()):
        print(f"  {kind:<12}{n:>5} files {b / mb:9.1f} MB")
    print(f"kernels     {i['kernel_bytes'] / mb:.1f} MB (numba's machine code for this CPU)")


@cache_app.command("clear")
def cache_clear(kernels: Annotated[bool, typer.Option("--kernels", help="Also the compiled kernels "
                                                      "(the next first use compiles them again).")] = False) -> None:
    """Remove the cached files (they are rebuilt when next needed)."""
    from ..runtime import cache

    n, size = cache.clear(kernels=kernels)
    print(f"removed {n} files ({size / 1024 / 1024:.1f} MB)" + (" and the kernels" if kernels else ""))
