"""Regular expressions (ECMA-262) → AST → byte DFA → Index: ``compile_regex`` and ``compile_choice``."""

from .compile import choice_pattern, compile_choice, compile_regex
from .parser import regex_to_dfa

__all__ = ["choice_pattern", "compile_choice", "compile_regex", "regex_to_dfa"]
