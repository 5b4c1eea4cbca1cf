"""One constraint's compile from ``Model.compile``'s arguments, over a vocabulary alone (no model
loaded): what ``Model.compile`` and the server's compile workers share."""

from __future__ import annotations

from .errors import ArgumentError


def compile_constraint(vocabulary, *, regex: str | None = None, choice=None, grammar: str | None = None,
                       json_schema=None, **options):
    """The compiled constraint over ``vocabulary`` (None: unconstrained); arguments as
    ``Model.compile``."""
    given = [x is not None for x in (regex, choice, grammar, json_schema)]
    if sum(given) > 1:
        raise ValueError("give at most one of regex=, choice=, grammar= and json_schema=")
    if isinstance(choice, (str, bytes)):
        raise ArgumentError(f"choice= takes a list of strings, not one string ({choice!r}: "
                            f"choice=[{choice!r}] for that one)")
    if regex is not None and not isinstance(regex, str):
        raise ArgumentError(f"regex= takes a str, not {type(regex).__name__}")
    if json_schema is not None:
        from .json_schema import compile_json_schema

        return compile_json_schema(json_schema, vocabulary, **options)
    if grammar is not None:
        from .grammar import compile_grammar

        return compile_grammar(grammar, vocabulary, **options)
    if options:
        raise ValueError(f"options {sorted(options)} need grammar= or json_schema=")
    from .regex import compile_choice, compile_regex

    if regex is not None:
        return compile_regex(regex, vocabulary)
    if choice is not None:
        return compile_choice(choice, vocabulary)
    return None
