"""The grammar errors: each says what is wrong and where (line and column when known)."""

from __future__ import annotations

from ..errors import LocalguideError


class GrammarError(LocalguideError, ValueError):
    """An invalid or unsupported grammar (Lark or GBNF).

    ``line`` and ``column`` are 1-based when the problem has a position in the grammar text.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 source: str | None = None):
        self.reason = message
        self.line = line
        self.column = column
        self.source = source
        where = ""
        if line is not None:
            where = f" at line {line}" + (f", column {column}" if column is not None else "")
        origin = f" in {source}" if source else ""
        super().__init__(f"{message}{where}{origin}")
