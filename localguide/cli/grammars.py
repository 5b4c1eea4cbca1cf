"""``localguide grammars``: the shipped grammars."""

from __future__ import annotations

from .common import app


@app.command()
def grammars() -> None:
    """List the shipped grammars (use a name with --grammar)."""
    from rich.console import Console
    from rich.table import Table

    from ..grammar import list_grammars

    table = Table("name", "format", "file", box=None)
    for name, path in sorted(list_grammars().items()):
        table.add_row(name, path.suffix.lstrip("."), path.name)
    Console().print(table)
