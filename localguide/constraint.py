"""What the text must be: a ``Constraint`` (its kind, its source, its options), and the registry of kinds.

The library, the CLI and the server each build one (``Constraint.of(regex=...)``, from the same keyword
arguments as ``Model.compile``) and pass it on: options are checked against the kind once, here;
``key()`` names it for the caches and the draft counts; ``compile(vocabulary)`` makes its index,
the kind's module choosing the route (automaton, lazy index or grammar). A new kind is a module
with a compile function and one ``register`` call below.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable, Mapping

from .errors import ArgumentError
from .grammar.sources import DEFAULT_MAX_IGNORED_RUN

# Options that change how a constraint is compiled, not its language: never part of ``key()``.
UNKEYED = frozenset({"lazy", "confined"})


@dataclass(frozen=True)
class Kind:
    """One kind of constraint. ``defaults``: the options every caller may set, with their defaults
    (a constraint carries them all, so equal constraints have equal keys); ``extra``: further
    options its compile function takes; ``compile(source, vocabulary, **options)``; ``check``:
    the source checked (an ``ArgumentError`` saying what it takes); ``written``: the source as
    JSON for ``key()`` (None where it has no such form)."""

    name: str
    compile: Callable
    defaults: Mapping[str, object] = field(default_factory=dict)
    extra: frozenset = frozenset()
    check: Callable = lambda source: source
    written: Callable = lambda source: source
    keyword: bool = True  # (False: made by the library itself, not a keyword of ``Constraint.of``)


KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add ``kind`` to the kinds ``Constraint.of`` takes (its name is the keyword argument)."""
    KINDS[kind.name] = kind
    return kind


@dataclass(frozen=True, eq=False)
class Constraint:
    """A kind (a name in ``KINDS``), its source (a pattern, a list of choices, a grammar, a schema)
    and its options (the kind's defaults filled in)."""

    kind: str
    source: object
    options: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, **arguments) -> "Constraint | None":
        """The constraint of ``Model.compile``'s keyword arguments: at most one kind given (None:
        no constraint); an option of another kind is refused where it is not that kind's default
        (``strict=True`` with a regex would otherwise be ignored in silence)."""
        given = [k for k in _keywords() if arguments.get(k) is not None]
        if len(given) > 1:
            names = [k + "=" for k in _keywords()]
            raise ArgumentError(f"give at most one of {', '.join(names[:-1])} and {names[-1]}")
        options = {k: v for k, v in arguments.items() if k not in _keywords()}
        kind = KINDS[given[0]] if given else None
        mine = {} if kind is None else {k: v for k, v in options.items() if k in kind.defaults or k in kind.extra}
        for name, value in options.items():
            if name in mine:
                continue
            owners = [k for k in KINDS.values() if k.keyword and (name in k.defaults or name in k.extra)]
            if not owners:
                raise ArgumentError(f"unknown option {name}= (the options: {', '.join(sorted(_all_options()))})")
            if any(name in k.defaults and _same(value, k.defaults[name]) for k in owners):
                continue  # (a signature's default passed along)
            where = " or ".join(f"{k.name}=" for k in owners)
            raise ArgumentError(f"{name}= applies to {where} only")
        if kind is None:
            return None
        return cls(kind.name, kind.check(arguments[kind.name]), {**kind.defaults, **mine})

    @classmethod
    def made(cls, kind: str, source, **options) -> "Constraint":
        """A constraint of any registered kind, those the library makes itself included."""
        k = KINDS[kind]
        return cls(kind, k.check(source), {**k.defaults, **options})

    def key(self) -> str | None:
        """A text naming this constraint's language (None where its source has no JSON form): the
        key of compiled indexes shared between requests and of draft counts on disk."""
        written = KINDS[self.kind].written(self.source)
        named = {self.kind: written, **{k: v for k, v in self.options.items() if k not in UNKEYED}}
        try:
            return json.dumps(named, sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):
            return None

    def compile(self, vocabulary, **also):
        """The compiled index over ``vocabulary`` (``also``: options of how, such as ``lazy``)."""
        return KINDS[self.kind].compile(self.source, vocabulary, **{**self.options, **also})

    def with_options(self, **options) -> "Constraint":
        return Constraint(self.kind, self.source, {**self.options, **options})

    def arguments(self) -> dict:
        """As ``Model.compile``'s keyword arguments."""
        return {self.kind: self.source, **self.options}

    def __eq__(self, other) -> bool:
        return isinstance(other, Constraint) and self.key() is not None and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key() or id(self))

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.options.items() if v != KINDS[self.kind].defaults.get(k, object())}
        return f"Constraint({self.kind}={self.source!r}{''.join(f', {k}={v!r}' for k, v in shown.items())})"


def as_constraint(value, **options) -> Constraint | None:
    """``value`` as a ``Constraint``: one already, None, or a dict of ``Constraint.of``'s arguments
    (``options`` added to it)."""
    if value is None or isinstance(value, Constraint):
        if value is not None and options:
            return value.with_options(**options)
        return value
    if isinstance(value, dict):
        return Constraint.of(**value, **options)
    raise ArgumentError(f"a constraint is a localguide.Constraint or a dict of its arguments, not {type(value).__name__}")


def constraint_key(**arguments) -> str | None:
    """``Constraint.of(**arguments).key()`` (None without a constraint)."""
    constraint = Constraint.of(**arguments)
    return None if constraint is None else constraint.key()


def compile_constraint(vocabulary, **arguments):
    """The compiled constraint over ``vocabulary`` (None: unconstrained); arguments as ``Model.compile``."""
    constraint = Constraint.of(**arguments)
    return None if constraint is None else constraint.compile(vocabulary)


def _same(a, b) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def _all_options() -> set:
    return {o for k in KINDS.values() if k.keyword for o in (*k.defaults, *k.extra)}


def _keywords() -> list[str]:
    return [name for name, k in KINDS.items() if k.keyword]


# -- the kinds ----------------------------------------------------------------------------------

def _regex(source, vocabulary):
    from .regex import compile_regex

    return compile_regex(source, vocabulary)


def _check_regex(source):
    if not isinstance(source, str):
        raise ArgumentError(f"regex= takes a str, not {type(source).__name__}")
    return source


def _choice(source, vocabulary):
    from .regex import compile_choice

    return compile_choice(source, vocabulary)


def _check_choice(source):
    if isinstance(source, (str, bytes)):
        raise ArgumentError(f"choice= takes a list of strings, not one string ({source!r}: "
                            f"choice=[{source!r}] for that one)")
    return source


def _grammar(source, vocabulary, **options):
    from .grammar import compile_grammar

    return compile_grammar(source, vocabulary, **options)


def _json_schema(source, vocabulary, **options):
    from .json_schema import compile_json_schema

    return compile_json_schema(source, vocabulary, **options)


def _written_schema(schema):
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    if isinstance(schema, (bytes, bytearray)):
        return schema.decode("utf-8", "replace")
    return schema


register(Kind("regex", _regex, check=_check_regex))
register(Kind("choice", _choice, check=_check_choice, written=lambda c: list(c)))
register(Kind("grammar", _grammar, defaults={"max_ignored_run": DEFAULT_MAX_IGNORED_RUN},
              extra=frozenset({"start", "lazy", "confined"}),
              written=lambda g: os.fspath(g) if isinstance(g, os.PathLike) else g))
register(Kind("json_schema", _json_schema, defaults={"strict": False, "whitespace": "compact", "max_recursion": None},
              extra=frozenset({"any_depth", "max_length", "max_items", "resources", "max_states", "lazy"}),
              written=_written_schema))


def _xml_calls(source, vocabulary, **options):
    from .json_schema.parameters import compile_calls

    return compile_calls(source, vocabulary, **options)


def _check_xml_calls(source):
    from .json_schema.parameters import check_source

    return check_source(source)


# One call to one of some tools, written one parameter at a time (``chat.tools.xml_calls``): the
# source is ``[{"name", "parameters"}]``; made by the tool-call syntax, not a keyword of ``Model.compile``.
register(Kind("xml_calls", _xml_calls, extra=frozenset({"lazy"}), check=_check_xml_calls, keyword=False))
