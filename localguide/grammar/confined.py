"""Grammars from someone the process does not trust (a request to ``localguide serve``).

Such a grammar is text or a name, never a path: a name is a shipped grammar or one in the
operator's allowed folder, and ``%import`` reaches only those and lark's own grammars
(``common``, ``unicode``, ...), whatever the importing grammar's place. No message says where
anything lies on the machine. The library's callers (Python API, CLI) are trusted: they keep
paths and ``%import`` of their own files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import GrammarError
from .shipped import is_gbnf, list_grammars

_LARK_OWN = ("common", "unicode", "python", "lark")


class ImportRefused(Exception):
    """A confined grammar's ``%import`` of something it may not read (not an ``OSError``: lark
    then tries no other place, the working directory included). ``name``: the dotted path."""

    def __init__(self, message: str, name: str):
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class Confined:
    """Where a confined grammar's names lead: the shipped grammars, then ``allowed`` (a folder of
    ``.lark``/``.gbnf`` files the operator chose; None: none)."""

    allowed: Path | None = None

    def names(self) -> dict[str, Path]:
        """Grammar name → file: the allowed folder's, then the shipped ones (which win)."""
        out = {}
        d = self.allowed
        for f in sorted(d.iterdir()) if d is not None and d.is_dir() else ():
            if f.suffix in (".lark", ".gbnf") and f.is_file():
                out.setdefault(f.stem, f)
        out.update(list_grammars())
        return out

    def key(self) -> str:
        """This confinement in a cache key (an import's text depends on it)."""
        return f"confined:{self.allowed}"

    def resolve(self, grammar: str) -> tuple[str, str, str]:
        """(text, kind, description) of a name or of grammar text; nothing else is read."""
        names = self.names()
        if grammar in names:
            f = names[grammar]
            return f.read_text("utf-8"), f.suffix[1:], f"grammar {grammar!r}"
        if "\n" not in grammar and ":" not in grammar and " " not in grammar.strip():
            raise GrammarError(f"unknown grammar {grammar!r}: give grammar text or a grammar name "
                               f"({', '.join(names)}); a server reads no grammar file a request names")
        return grammar, "gbnf" if is_gbnf(grammar) else "lark", "grammar"

    def loader(self):
        """A lark import loader that serves only lark's own grammars and the names above."""
        from lark.load_grammar import stdlib_loader

        names = {n: f for n, f in self.names().items() if f.suffix == ".lark"}

        def load(base_path, grammar_path: str):
            name = grammar_path[:-len(".lark")] if grammar_path.endswith(".lark") else grammar_path
            if os.sep not in name and "/" not in name:
                if name in _LARK_OWN:
                    return stdlib_loader(None, grammar_path)
                if name in names:
                    return f"<grammar {name}>", names[name].read_text("utf-8")
            shown = name.replace(os.sep, ".").replace("/", ".")
            raise ImportRefused(f"%import {shown}: not one of lark's grammars ({', '.join(_LARK_OWN)}) or a "
                                f"grammar name ({', '.join(names) or 'none'}); a server imports no other file", shown)

        return load
