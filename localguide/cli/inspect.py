"""``localguide inspect``: what of a JSON Schema is enforced."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import _fail, _read_json, app


@app.command()
def inspect(
    json_schema: Annotated[Path, typer.Option("--json-schema", "-j", help="The JSON Schema file to inspect.")],
    strict: Annotated[bool, typer.Option("--strict")] = False,
    pretty: Annotated[bool, typer.Option("--pretty", help="As run --pretty (bounds nesting).")] = False,
    max_recursion: Annotated[Optional[int], typer.Option(
        "--max-recursion", min=1, show_default=False, help="As run --max-recursion.")] = None,
    exact_recursion: Annotated[bool, typer.Option("--exact-recursion", hidden=True)] = False,
) -> None:
    """Print, for every keyword of a JSON Schema, whether it is enforced, approximated or unsupported."""
    if exact_recursion and max_recursion is not None:
        raise typer.BadParameter("--exact-recursion (the default) and --max-recursion exclude each other")
    try:
        from ..json_schema import format_inspection, inspect_schema

        print(format_inspection(inspect_schema(_read_json(json_schema), strict=strict,
                                               whitespace="pretty" if pretty else "compact",
                                               max_recursion=max_recursion)))
    except Exception as e:  # noqa: BLE001
        _fail(e)
