"""JSON Schema → regular expression → Index.

    from localguide.json_schema import compile_json_schema
    index = compile_json_schema({"type": "object", "properties": {...}}, model.vocabulary)

``schema`` may be a dict (or bool), a JSON string, or a Pydantic model class. The
schema is compiled to an ECMA-262 pattern (``schema_to_regex``) whose automaton is
then built directly from the compiler's own AST (same language as
``localguide.regex.regex_to_dfa(pattern)``, much faster on large patterns) and
indexed over the vocabulary, through the disk cache keyed by the pattern.

Everything accepted is valid for the schema. Where the schema's language is not
regular (deep nesting, recursion) or a keyword is only partly expressible, a subset
is accepted and ``inspect_schema`` reports the keyword as ``approximated``. A
keyword that cannot be honoured raises ``UnsupportedSchemaError`` listing each one
with its JSON pointer; nothing is silently ignored.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import warnings
from dataclasses import dataclass, field

from ..errors import SchemaError, UnsupportedSchemaError, json_pointer
from ..runtime.progress import stage
from ..regex.ast import EMPTY, Node
from ..regex.dfa_ast import auto_tree
from ..regex.emit import to_regex
from .compiler import Compiler
from .flat import ANNOTATIONS, VALIDATION, Problems
from .flattener import Flattener
from .resolve import DEFAULT_BASE, SCHEMA_KEYWORDS, SCHEMA_LIST_KEYWORDS, SCHEMA_MAP_KEYWORDS, Registry, escape

__all__ = ["SchemaError", "UnsupportedSchemaError", "CompiledSchema", "compile_json_schema", "schema_to_regex",
           "schema_to_ast", "schema_dfa", "build_dfa", "inspect_schema", "format_inspection"]


@dataclass
class CompiledSchema:
    """The compiled form: the AST, its pattern, and what was approximated."""

    node: Node
    approximated: list = field(default_factory=list)  # (pointer, keyword, reason)
    status: dict = field(default_factory=dict)
    _regex: str | None = None
    rules: dict = field(default_factory=dict)  # Ref key -> node (exact recursion: a grammar, not a regex)
    loosened: list = field(default_factory=list)  # (pointer, keyword, reason): not enforced, a superset

    @property
    def regex(self) -> str:
        if self._regex is None:
            self._regex = to_regex(self.node)
        return self._regex


_RECURSION = 20_000  # Python frames the compilers may use (they recurse along the schema and its AST)
_deep_lock = threading.Lock()
_deep_count = 0
_deep_saved = 0


@contextlib.contextmanager
def deep_recursion():
    """Python's recursion limit raised to ``_RECURSION`` while a schema compiles (restored after the
    last compile in any thread ends): a schema of 500 optional properties makes an AST that deep.
    Python-to-Python calls keep their frames off the C stack (3.11), so this is safe."""
    global _deep_count, _deep_saved
    with _deep_lock:
        if _deep_count == 0:
            _deep_saved = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_deep_saved, _RECURSION))
        _deep_count += 1
    try:
        yield
    finally:
        with _deep_lock:
            _deep_count -= 1
            if _deep_count == 0:
                sys.setrecursionlimit(_deep_saved)


def _deep(fn):
    """``fn`` under ``deep_recursion``."""
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with deep_recursion():
            try:
                return fn(*args, **kwargs)
            except RecursionError:
                raise SchemaError(f"the schema is nested too deeply to compile: its compile needs more than "
                                  f"{_RECURSION:,} nested calls (localguide.json_schema.schema._RECURSION)") from None

    return run


def _load(schema):
    """The schema as a JSON document, its shape checked (``shape.check_shape``)."""
    from .shape import check_shape

    doc = _load_doc(schema)
    check_shape(doc)
    return doc


def _load_doc(schema):
    if isinstance(schema, (bytes, bytearray)):
        schema = schema.decode("utf-8")
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"the schema is not valid JSON: {e}") from None
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    if hasattr(schema, "json_schema") and callable(schema.json_schema):  # pydantic TypeAdapter
        return schema.json_schema()
    if isinstance(schema, (dict, bool)):
        return schema
    raise SchemaError(f"a schema must be a dict, a JSON string or a Pydantic model class, not {type(schema).__name__}")


DEFAULT_MAX_STATES = 30_000
# With a grammar engine, an AST of more than this many positions per state of the budget
# goes to the grammar route without an automaton attempt (``build_automaton``).
GRAMMAR_POSITIONS = 100
# Successive approximations when the automaton would exceed the state budget.
_LEVELS = (
    {},
    {"any_depth": 2, "extra_depth": 1, "max_length": 64, "max_items": 16, "max_recursion": 2},
    {"any_depth": 1, "extra_depth": 0, "max_length": 32, "max_items": 8, "max_recursion": 1},
)


PRETTY_RECURSION = 3  # with whitespace="pretty", how deep max_recursion=None expands recursion and free values


@_deep
def schema_to_ast(schema, *, strict: bool = False, whitespace: str = "compact", max_recursion: int | None = 3,
                  any_depth: int = 3, extra_depth: int | None = None, max_length: int = 128, max_items: int = 32,
                  resources: dict | None = None, raw_strings: bool = False,
                  _problems: Problems | None = None) -> CompiledSchema:
    """Compile ``schema`` to the regex AST (options as ``compile_json_schema``). ``raw_strings``: a
    string at the top is its characters, not a JSON string (tool calls that write it as text).

    Where a negation has no complement here, the subset leaves out the values that fail only it;
    when that leaves no document at all, the schema is compiled again with those negations not
    enforced (a superset: ``CompiledSchema.loosened``, inspect's *loosened*) rather than refused."""
    doc = _load(schema)
    problems = _problems or Problems()
    options = dict(strict=strict, whitespace=whitespace, max_recursion=max_recursion, any_depth=any_depth,
                   extra_depth=extra_depth, max_length=max_length, max_items=max_items, resources=resources,
                   raw_strings=raw_strings)
    node, compiler = _ast(doc, problems, loose=False, **options)
    if node is EMPTY and problems.loosenable and not problems.unsupported:
        second = Problems()
        node2, compiler2 = _ast(doc, second, loose=True, **options)
        if node2 is not EMPTY and not second.unsupported:
            problems.take(second)
            node, compiler = node2, compiler2
            if _problems is None:
                where = "; ".join(json_pointer(p, k) for p, k, _ in problems.loosened[:4])
                warnings.warn(f"localguide: this JSON Schema is loosened where it has no complement here ({where}): "
                              "a generated document may fail it there (localguide inspect shows where)",
                              RuntimeWarning, stacklevel=3)
    if problems.unsupported and _problems is None:
        raise UnsupportedSchemaError(problems.unsupported)
    if node is EMPTY and _problems is None:
        if problems.approximated:  # (then it is localguide's bounds that leave nothing, not the schema)
            where = "; ".join(f"{json_pointer(p, k)}: {r}" for p, k, r in problems.approximated[:4])
            raise SchemaError("localguide's approximation of this schema accepts no document (the schema itself "
                              f"may be satisfiable): {where}")
        raise SchemaError("no JSON document satisfies this schema")
    return CompiledSchema(node, list(problems.approximated), dict(problems.status), rules=compiler.rules,
                          loosened=list(problems.loosened))


def _ast(doc, problems: Problems, *, loose: bool, strict, whitespace, max_recursion, any_depth, extra_depth,
         max_length, max_items, resources, raw_strings=False):
    """(node, compiler): one compile of the loaded schema ``doc``."""
    registry = Registry()
    for uri, res in (resources or {}).items():
        registry.add_document(res, uri, uri + "#", 2020)
    root = registry.add_document(doc, DEFAULT_BASE, "", 2020)
    exact = max_recursion is None
    if exact and whitespace != "compact":
        # Pretty output indents each level differently: to any depth, no grammar says that (the
        # bounded expansion's notes tell inspect_schema what is approximated).
        exact, max_recursion = False, PRETTY_RECURSION
    # With exact recursion, only a $ref merged with other keywords is still expanded (3 levels).
    flattener = Flattener(registry, problems, max_recursion=3 if exact else max_recursion)
    flattener.loose = loose
    compiler = Compiler(flattener, strict=strict, whitespace=whitespace, any_depth=any_depth,
                        extra_depth=extra_depth, max_length=max_length, max_items=max_items,
                        exact_recursion=exact, raw_top=raw_strings)
    try:
        return compiler.value([root], 0), compiler
    except RecursionError:
        raise SchemaError("the schema nests too deeply to compile") from None


def schema_to_regex(schema, **options) -> str:
    """The ECMA-262 pattern of the JSON documents that ``schema`` accepts (options as ``compile_json_schema``)."""
    compiled = schema_to_ast(schema, **options)
    if compiled.rules:
        raise SchemaError("with exact recursion this schema is a grammar, not a regular expression")
    size = pattern_length(compiled.node)
    if size > MAX_PATTERN:
        raise SchemaError(f"the pattern would be {size} characters long (more than {MAX_PATTERN})")
    return compiled.regex


def build_dfa(schema, *, max_states: int = DEFAULT_MAX_STATES, **options):
    """(ByteDFA, CompiledSchema) for ``schema``; when the automaton would exceed ``max_states``,
    the bounds of ``_LEVELS`` are tightened (noted as approximations) before giving up."""
    dfa, cfg, compiled = build_automaton(schema, max_states=max_states, grammar=False, **options)
    return dfa, compiled


@_deep
def build_automaton(schema, *, max_states: int = DEFAULT_MAX_STATES, grammar: bool = True, **options):
    """(ByteDFA or None, CFG or None, CompiledSchema): how ``schema`` is best enforced.

    The DFA of the full bounds when it fits ``max_states``; else, with ``grammar``, the
    grammar of the same language (``jsonschema_grammar``): exact, where tighter bounds
    would approximate; else the DFA of tightened bounds (``_LEVELS``). SchemaError when
    nothing fits.
    """
    from ..regex.ast_dfa import Builder, TooLargeError
    from .to_grammar import sizes

    doc = _load(schema)
    full = None  # the AST of the full bounds, when already compiled
    if options.get("max_recursion", 3) is None:
        full = schema_to_ast(doc, **options)
        if full.rules:  # recursion found: a grammar
            if not grammar:
                raise SchemaError("with exact recursion (max_recursion=None) this schema needs the grammar "
                                  "engine: use compile_json_schema")
            cfg = _grammar(full)
            if cfg is None:
                raise SchemaError("no JSON document satisfies this schema")
            return None, cfg, full
        # No recursion: that AST is the one of max_recursion=3, which the levels below tighten.
        options = dict(options, max_recursion=3)
    last = None
    for level in _LEVELS:
        opts = dict(options)
        for k, v in level.items():
            opts[k] = min(v, opts.get(k, v)) if opts.get(k) is not None else v
        compiled = full if (full is not None and not level) else schema_to_ast(doc, **opts)
        if grammar and not level:
            # Hopeless automata are not even tried: on MaskBench, none of more than 3 million
            # positions (characters, repetitions expanded) fitted 30,000 states.
            size = sizes(compiled.node)
            if size[id(compiled.node)] > GRAMMAR_POSITIONS * max_states:
                cfg = _grammar(compiled, size=size)
                if cfg is not None:
                    return None, cfg, compiled
        # With the grammar to fall back on, a hopeless automaton is given up early.
        builder = Builder(compiled.node, max_states, give_up=2.0 if grammar and not level else None)
        try:
            dfa = builder.dfa(compiled.node)
        except TooLargeError as e:
            last = e
            if grammar and not level:
                cfg = _grammar(compiled, builder)
                if cfg is not None:
                    return None, cfg, compiled
            continue
        if level:
            compiled.approximated.append(("", "", "the automaton was too large: nesting, lengths and counts "
                                                  f"bounded by {level}"))
        return dfa, None, compiled
    raise SchemaError(f"the schema's automaton is too large ({last})"
                      + ("" if grammar else "; a grammar-based engine is needed"))


def _grammar(compiled, builder=None, size=None):
    """The normalized CFG of a compiled schema, or None when it has no sentence (``builder``,
    ``size``: see ``ast_to_cfg``)."""
    from ..grammar.cfg import normalize
    from ..errors import GrammarError
    from .to_grammar import ast_to_cfg

    try:
        return normalize(ast_to_cfg(compiled.node, compiled.rules, builder=builder, size=size))
    except GrammarError:
        return None


def schema_dfa(schema, **options):
    """The byte DFA of ``schema`` (built from the AST, without pattern text)."""
    return build_dfa(schema, **options)[0]


def compile_json_schema(schema, vocabulary, *, strict: bool = False, whitespace: str = "compact",
                        max_recursion: int | None = None, any_depth: int = 3, max_length: int = 128,
                        max_items: int = 32, resources: dict | None = None, max_states: int = DEFAULT_MAX_STATES,
                        lazy: bool | None = None):
    """The Index of the JSON documents valid for ``schema``, over ``vocabulary`` (cached on disk).

    A large schema not yet in the cache gives a ``LazyIndex`` (``localguide.lazy``): its
    guides answer at once, state by state, while the whole Index is built and cached in
    the background (``.index()`` waits for it). ``lazy``: True or False forces the choice;
    None (the default) makes it for automata of more than ``LAZY_STATES`` states. A schema
    on the grammar route (below) is lazy unless ``lazy`` is False: its subterminal trees
    are built when first needed, the rest in the background (``localguide.runtime.cache.flush()``
    waits for them and the cache file).

    ``strict``: objects that list properties allow no others unless the schema says so
    (``additionalProperties`` defaults to false). ``whitespace``: ``"compact"`` (one
    optional space after ``,`` and ``:``) or ``"pretty"`` (``json.dumps(x, indent=2)``).
    ``max_recursion``: None (the default): recursive ``$ref`` and the values the schema leaves
    free are exact to any depth (rules of the grammar engine, which such a schema then takes); N:
    both are expanded N levels deep, into an automaton (a subset, reported by ``inspect_schema``).
    With ``whitespace="pretty"`` they are always bounded (each level is indented differently, which
    no grammar says to any depth): N, or 3 for None. ``any_depth``: with N, how deep
    a value left free by the schema may nest; ``max_length``/``max_items``: the largest
    ``maxLength``/``maxItems`` tracked exactly (larger bounds are lowered to these).
    ``resources``: other schema documents by URI, for ``$ref`` to them. ``max_states``:
    the automaton budget; past it the schema goes to the grammar engine (a ``GrammarIndex``,
    see ``build_automaton``). Python's cycle collector is paused while it compiles
    (``localguide.runtime.gcpause``).

    Raises ``UnsupportedSchemaError`` (listing every keyword that cannot be honoured,
    with its JSON pointer) or ``SchemaError``.
    """
    from ..runtime.gcpause import paused

    with paused(), deep_recursion():
        return _compile_json_schema(schema, vocabulary, strict=strict, whitespace=whitespace,
                                    max_recursion=max_recursion, any_depth=any_depth, max_length=max_length,
                                    max_items=max_items, resources=resources, max_states=max_states, lazy=lazy)


def _compile_json_schema(schema, vocabulary, *, strict, whitespace, max_recursion, any_depth, max_length,
                         max_items, resources, max_states, lazy):
    doc = _load(schema)
    options = dict(strict=strict, whitespace=whitespace, max_recursion=max_recursion, any_depth=any_depth,
                   max_length=max_length, max_items=max_items, resources=resources)
    try:
        key = json.dumps({"schema": doc, "options": {k: v for k, v in options.items()}, "max_states": max_states},
                         sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        schema_to_ast(doc, **options)  # the schema's own error, if it has one
        raise SchemaError("the schema (or resources) cannot be written as JSON") from None
    # A cached index (the automaton's or the grammar's) is served without compiling the schema
    # again: an error would have kept it from being stored. On a miss, build_automaton raises
    # the schema's errors.
    return compile_language("json_schema", key, lambda: build_automaton(doc, max_states=max_states, **options)[:2],
                            vocabulary, "JSON schema", lazy=lazy,
                            automaton=lambda: build_dfa(doc, max_states=max_states, **options)[0])


LAZY_STATES = 200  # above, a schema's first mask comes before its whole Index
GRAMMAR_FORMAT = 5  # 5: bounded repetitions as flat or blocked alternatives (``grammar.rewrites.Repeats``), rules simplified (``simplify_generated``)


def compile_language(kind: str, key: str, build, vocabulary, description: str, *, lazy: bool | None = None,
                     automaton=None):
    """The index of a language under ``kind`` and ``key`` in the disk cache; on a miss, of
    ``build()``'s (ByteDFA, None) or (None, CFG): the automaton's (a ``LazyIndex`` above
    ``LAZY_STATES`` states, unless ``lazy`` is False), else the grammar engine's. ``automaton()``
    makes the DFA again where its cached index is damaged (default: ``build()``'s)."""
    from ..grammar.compiled import FORMAT as ARRAYS_FORMAT
    from ..grammar.sources import remembered
    from ..index import Index
    from ..index.lazy import LazyIndex, lazy_possible
    from ..runtime import cache

    grammar_path = cache.key_path(f"{kind}_grammar", f"{GRAMMAR_FORMAT}.{ARRAYS_FORMAT}", key, vocabulary.fingerprint)
    held = remembered((kind, str(grammar_path)))
    if held is not None:
        return held
    if cache.available(grammar_path):  # (a corrupt file is rebuilt)
        return _grammar_index(grammar_path, lambda: build()[1], vocabulary, description, lazy is not False, kind)
    if cache.available(Index.cache_path(kind, key, vocabulary)):
        return Index.cached(kind, key, automaton or (lambda: build()[0]), vocabulary, description)
    with stage(f"compiling the {description}"):
        dfa, cfg = build()
    if cfg is not None:
        return _grammar_index(grammar_path, lambda: cfg, vocabulary, description, lazy is not False, kind)
    if lazy is False or dfa.is_empty or not (lazy or dfa.n_states > LAZY_STATES) or \
            not lazy_possible(dfa, vocabulary):
        return Index.cached(kind, key, lambda: dfa, vocabulary, description)
    return LazyIndex(dfa, vocabulary, lambda: Index.cached(kind, key, lambda: dfa, vocabulary, description), description)


def automaton_or_grammar(compiled: CompiledSchema, max_states: int = DEFAULT_MAX_STATES):
    """(ByteDFA, None) of ``compiled``'s language where it fits ``max_states``, else (None, CFG)."""
    from ..regex.ast_dfa import Builder, TooLargeError

    builder = Builder(compiled.node, max_states, give_up=2.0)
    try:
        return builder.dfa(compiled.node), None
    except TooLargeError:
        cfg = _grammar(compiled, builder)
        if cfg is None:
            raise SchemaError("the language accepts no text") from None
        return None, cfg


def _grammar_index(path, make_cfg, vocabulary, description, lazy: bool, kind: str = "json_schema"):
    """The grammar engine's index of ``make_cfg()``, from the disk cache at ``path`` when there."""
    from ..grammar import packed
    from ..grammar.sources import cached_index, remember

    def cfg():
        got = make_cfg()
        if got is None:  # not expected: the cache key holds the library version
            raise SchemaError("this schema's cached grammar no longer applies; clear the cache")
        return got

    idx = cached_index(path, cfg, vocabulary, description, lazy, plain_bytes=packed.SCHEMA_PLAIN_BYTES)
    # held in memory as compiled grammars are: the masks it computes serve the next guides
    remember((kind, str(path)), idx)
    return idx


MAX_PATTERN = 50_000_000


def pattern_length(node) -> int:
    """The length of ``to_regex(node)`` (about), computed without writing it."""
    from ..regex.ast import Alt, Auto, Cls, Lit, Rep, Seq

    memo: dict[int, int] = {}

    def go(n) -> int:
        k = id(n)
        if k in memo:
            return memo[k]
        if isinstance(n, Lit):
            r = 2 * len(n.text)
        elif isinstance(n, Cls):
            r = 8 * len(n.ranges) + 2
        elif isinstance(n, (Seq, Alt)):
            r = sum(go(x) for x in n.items) + 4 + len(n.items)
        elif isinstance(n, Rep):
            r = go(n.item) + 10
        elif isinstance(n, Auto):
            tree = auto_tree(n)
            r = MAX_PATTERN + 1 if tree is None else go(tree) + 4
        else:
            r = 10
        memo[k] = r
        return r

    return go(node)


# -- inspection ---------------------------------------------------------------------------------

@_deep
def inspect_schema(schema, **options) -> list[tuple[str, str, str]]:
    """(JSON pointer, keyword, status) for every keyword of the schema, in document order.

    Status: ``enforced``, ``approximated`` (a subset of the valid documents is accepted),
    ``loosened`` (not enforced: a document it rejects may be accepted; only where the subset
    accepted no document), ``unsupported`` (compiling raises), or ``annotation`` (no effect on validity).
    """
    doc = _load(schema)
    problems = Problems()
    options.setdefault("max_recursion", None)  # (compile_json_schema's default)
    try:
        schema_to_ast(doc, _problems=problems, **options)
    except RecursionError:
        problems.error("", "", "the schema nests too deeply")
    out = []
    seen = set()
    for ptr, kw in _keywords(doc, ""):
        status = problems.status.get((ptr, kw))
        if status is None:
            status = _static_status(kw)
        out.append((json_pointer(ptr, kw), kw, status))
        seen.add((ptr, kw))
    for (ptr, kw), status in problems.status.items():
        if (ptr, kw) not in seen and kw:  # (a keyword the schema leaves out: its default is what is approximated)
            out.append((json_pointer(ptr), f"{kw} (not given: its default)", status))
    return out


def _static_status(kw: str) -> str:
    if kw in ANNOTATIONS or kw not in VALIDATION:
        return "annotation"
    if kw in ("$dynamicRef", "$recursiveRef"):
        return "unsupported"
    return "enforced"  # a keyword the compiler never reached (e.g. in an unused $defs entry)


def _keywords(s, ptr: str):
    if not isinstance(s, dict):
        return
    for k, v in s.items():
        yield ptr, k
        if k in SCHEMA_MAP_KEYWORDS and isinstance(v, dict):
            for name, sub in v.items():
                yield from _keywords(sub, f"{ptr}/{escape(k)}/{escape(name)}")
        elif k in SCHEMA_LIST_KEYWORDS and isinstance(v, list):
            for i, sub in enumerate(v):
                yield from _keywords(sub, f"{ptr}/{escape(k)}/{i}")
        elif k in SCHEMA_KEYWORDS and isinstance(v, dict):
            yield from _keywords(v, f"{ptr}/{escape(k)}")


def format_inspection(rows) -> str:
    """``inspect_schema`` rows as an aligned text table (for the CLI)."""
    rows = list(rows)
    if not rows:
        return "(no keywords)"
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    return "\n".join(f"{p:<{w1}}  {k:<{w2}}  {s}" for p, k, s in rows)
