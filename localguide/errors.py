"""Every error localguide raises: each says what was expected and where."""

from __future__ import annotations


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
        if position is not None and len(pattern) <= 200:
            caret = f"\n    {pattern}\n    {' ' * position}^"
        super().__init__(f"{message}{where} in pattern {pattern!r}{caret}")


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


class BudgetError(LocalguideError, ValueError):
    """No text satisfying the constraint fits in ``max_tokens``."""
