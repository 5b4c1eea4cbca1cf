"""Every error localguide raises: each says what was expected and where."""

from __future__ import annotations

import numbers


class LocalguideError(Exception):
    """Base class: catch this to handle any localguide failure."""


class PatternError(LocalguideError, ValueError):
    """An invalid, unsupported or empty regular expression.

    ``position`` is the 0-based character offset in ``pattern`` (None when the
    problem is the pattern as a whole).
    """

    def __init__(self, message: str, pattern: str, position: int | None = None):
        self.pattern = pattern
        self.position = position
        self.reason = message
        where = f" at position {position}" if position is not None else ""
        caret = ""
        shown = f"'{pattern}'" if pattern.isprintable() else repr(pattern)  # (as typed: no doubled backslashes)
        if position is not None and len(pattern) <= 200 and pattern.isprintable():
            caret = f"\n    {pattern}\n    {' ' * position}^"
        super().__init__(f"{message}{where} in pattern {shown}{caret}")


class UnsupportedPatternError(PatternError):
    """Valid regex syntax that localguide cannot compile to an automaton."""


class EmptyLanguageError(LocalguideError, ValueError):
    """No string (or no token sequence of this vocabulary) satisfies the constraint."""


class ModelFileError(LocalguideError, OSError):
    """A model file that is missing, unreadable or not a usable GGUF file."""

    def __init__(self, path, message: str):
        self.path = str(path)
        super().__init__(f"{message}: {self.path}")


class TokenNotAllowedError(LocalguideError, ValueError):
    """A token passed to ``Guide.advance`` that the constraint does not allow here."""

    @classmethod
    def after_end(cls, token_id: int) -> "TokenNotAllowedError":
        return cls(f"token {token_id} after the end: the guide has already finished")

    @classmethod
    def over_budget(cls, token_id: int, what: str, remaining: int) -> "TokenNotAllowedError":
        return cls(f"token {token_id} is allowed by {what} but cannot finish within the remaining {remaining} token(s)")


def as_token(token, size: int) -> int:
    """``token`` as a token id of a ``size``-token vocabulary: an int (or numpy integer) from 0 to
    ``size - 1``; anything else (a float, a string, a bool, an id outside) is a
    ``TokenNotAllowedError`` that says so, never read as another token."""
    if type(token) is int and 0 <= token < size:  # (the per-token path: a plain int in range)
        return token
    if isinstance(token, bool) or not isinstance(token, numbers.Integral):
        raise TokenNotAllowedError(f"a token is an int id, not {type(token).__name__} {token!r}")
    t = int(token)
    if not 0 <= t < size:
        raise TokenNotAllowedError(f"token {t} is not in the vocabulary (ids 0 to {size - 1})")
    return t


class ArgumentError(LocalguideError, ValueError):
    """An argument out of its range or of the wrong kind (the message names it and what it takes)."""


class BudgetError(LocalguideError, ValueError):
    """No text satisfying the constraint fits in ``max_tokens``."""

    @classmethod
    def needs(cls, what: str, tokens: int, max_tokens: int, how: str = "") -> "BudgetError":
        return cls(f"{what} needs at least {tokens} tokens{how}, but max_tokens is {max_tokens}")


def check_max_tokens(max_tokens: int | None) -> None:
    """The guides' common check of a token budget."""
    if max_tokens is not None and max_tokens < 0:
        raise ValueError("max_tokens must be >= 0")


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
        first, nl, rest = message.partition("\n")  # (where goes on the first line; a caret display after)
        super().__init__(f"{first}{where}{origin}{nl}{rest}")


class SchemaError(LocalguideError, ValueError):
    """A schema that cannot be compiled: invalid, unsupported, or matching no document."""


def json_pointer(ptr: str, keyword: str = "") -> str:
    """``#ptr/keyword`` (the keyword escaped as RFC 6901 says); absolute URIs stay as they are."""
    p = f"{ptr}/{keyword.replace('~', '~0').replace('/', '~1')}" if keyword else ptr
    return "#" + p if not p.startswith("http") else p


class UnsupportedSchemaError(SchemaError):
    """Keywords that cannot be enforced. ``problems`` lists (JSON pointer, keyword, reason)."""

    def __init__(self, problems: list[tuple[str, str, str]]):
        self.problems = list(problems)
        invalid = sum(r.startswith("invalid") for _, _, r in self.problems)
        if len(self.problems) == 1:  # (one problem: one line, invalid or unsupported as it is)
            (p, k, r), = self.problems
            what = "the schema is invalid" if invalid else "the schema uses a construct localguide does not support"
            super().__init__(f"{what} at {json_pointer(p, k)}: {r}")
            return
        lines = [f"  {json_pointer(p, k)}: {r}" for p, k, r in self.problems]
        what = (f"the schema is invalid in {invalid} places" if invalid == len(self.problems) else
                f"the schema uses {len(self.problems)} constructs localguide does not support" if not invalid else
                f"the schema has {len(self.problems)} problems ({invalid} invalid, the others not supported)")
        super().__init__(what + ":\n" + "\n".join(lines))
