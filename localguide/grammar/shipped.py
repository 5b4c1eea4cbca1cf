"""The grammars localguide ships (``localguide/grammars``), by name."""

from __future__ import annotations

from pathlib import Path


def grammars_dir() -> Path:
    """The folder of the shipped grammars (``localguide.grammars``)."""
    try:
        import localguide.grammars as pkg

        return Path(pkg.__file__).parent
    except ImportError:  # a checkout without an install
        return Path(__file__).resolve().parents[2] / "grammars"


def list_grammars() -> dict[str, Path]:
    """Shipped grammar name → file, sorted by name."""
    d = grammars_dir()
    out = {}
    for f in sorted(d.iterdir()) if d.is_dir() else ():
        if f.suffix in (".lark", ".gbnf"):
            out.setdefault(f.stem, f)
    return out


def is_gbnf(text: str) -> bool:
    return "::=" in text
