"""A tool's arguments written one parameter at a time, as XML-like elements (Qwen3-Coder's calls):
the language of one call, built from the tools' parameter schemas, and its index.

    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>

Each tool's parameters come in the order its schema lists them (the required ones always, the others
optional, none it does not list). A parameter whose schema says ``"type": "string"`` (through local
``$ref``s) is written as its characters (``schema_to_ast(raw_strings=True)``), which never hold
``</parameter>``; any other value as compact JSON (no line break), both resolved against the tool's
own parameters (their ``$defs``; recursion expanded three levels, a subset). The line break before
``</parameter>`` may be left out where no value of the parameter ends with one, so a reader that
drops one line break there reads the value written. A raw string whose language bounds or shapes
its characters (``maxLength``, ``pattern``, ``format``) holds no ``</`` nor, where only its length
is bounded, line breaks (a subset: telling ``</parameter>`` apart while counting makes an index
many times larger); a JSON value writes ``<`` as ``\u003c`` (the same values). Object keywords a per-parameter syntax cannot check (``minProperties``, ``anyOf``
at the top, ...) are refused, naming the keyword.

The index is built by the route of a JSON schema: the automaton, lazily indexed when large; the
grammar engine where the automaton would exceed its budget.
"""

from __future__ import annotations

import json
from urllib.parse import quote, urljoin

from ..errors import SchemaError
from ..regex.ast import Node
from .flat import VALIDATION

END = "</parameter>"
FUNCTION, PARAMETER, FUNCTION_END = "<function=", "<parameter=", "</function>"
TOOLS_BASE = "https://localguide.invalid/tools/"  # (each tool's parameters: a resource under it)
# One character of any raw text: no "</parameter>" starts there.
FREE = "(?:[^<]|<(?!/parameter>))"
# One character of raw text of a bounded length: no "</", no line break.
_BOUNDED = "(?:[^<\\n]|<(?!/))"
_LT = "<(?!/)"
# the validating keywords of a tool's parameters schema that this syntax follows (the others are refused;
# annotations and unknown keywords are left alone, as a schema's compile leaves them)
OBJECT_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "$defs", "definitions",
                             "$schema", "$id", "$anchor", "$comment", "title", "description", "examples",
                             "default", "deprecated", "readOnly", "writeOnly", "unevaluatedProperties"})


def own_resource(params, i: int):
    """``params`` with an ``$id`` of the ``i``-th tool's own (one they give is taken relative to it)."""
    if not isinstance(params, dict):
        return params
    base = f"{TOOLS_BASE}{i}/parameters.json"
    own = params.get("$id")
    return {**params, "$id": urljoin(base, own) if isinstance(own, str) else base}


def check_source(tools) -> list[dict]:
    """``tools`` (``[{"name", "parameters"}]``) checked for this syntax: names and keys it can write,
    parameters it can follow (a ``SchemaError`` naming ``tools[i].function...``)."""
    if not isinstance(tools, list) or not tools:
        raise SchemaError("xml_calls takes a non-empty list of {'name': ..., 'parameters': {...}}")
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("parameters"), dict):
            raise SchemaError(f"tools[{i}]: expected {{'name': ..., 'parameters': {{...}}}}")
        plain(t.get("name"), f"tools[{i}].function.name")
        object_parts(t["parameters"], i)
    return tools


def plain(word, where: str) -> str:
    if not isinstance(word, str) or not word or any(c in word for c in "<>\n\r"):
        raise SchemaError(f"{where}: {word!r} cannot be written in an XML-style call (no '<', '>' or line breaks)")
    return word


def object_parts(params: dict, i: int) -> tuple[dict, set]:
    """(properties, required names) of a tool's parameters, refusing what a per-parameter syntax
    cannot check."""
    where = f"tools[{i}].function.parameters"
    kind = params.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise SchemaError(f"{where}: expected an object schema (type 'object'), got type {kind!r}")
    other = sorted(k for k in params if k in VALIDATION and k not in OBJECT_KEYWORDS)
    if other:
        raise SchemaError(f"{where}: {', '.join(map(repr, other))} cannot be checked in calls written one parameter "
                          "at a time (XML-style calls): only properties, required and additionalProperties are "
                          "followed")
    props = params.get("properties", {})
    required = params.get("required", [])
    if not isinstance(props, dict) or not isinstance(required, list):
        raise SchemaError(f"{where}: properties must be an object and required a list")
    for key in props:
        plain(key, f"{where}#/properties")
    missing = [k for k in required if k not in props]
    if missing:
        raise SchemaError(f"{where}#/required: {missing[0]!r} is required but not among the properties, "
                          "which an XML-style call names one by one")
    return props, set(required)


def declared_string(params: dict, schema) -> bool:
    """Whether ``schema`` (a property of ``params``) says ``"type": "string"``, following local ``$ref``s."""
    for _ in range(16):
        if not isinstance(schema, dict):
            return False
        ref = schema.get("$ref")
        if not (isinstance(ref, str) and ref.startswith("#/")):
            return schema.get("type") == "string"
        schema = params
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            schema = schema.get(part) if isinstance(schema, dict) else None
    return False


def call_node(tools: list[dict]) -> Node:
    """The language of one call (after ``<tool_call>``: a line break, the function, a line break)."""
    from ..regex.ast import Lit, alt, opt, seq

    check_source(tools)
    bodies = []
    for i, t in enumerate(tools):
        params = t["parameters"]
        props, required = object_parts(params, i)
        parts = [Lit(f"\n{FUNCTION}{t['name']}>\n")]
        for key in props:
            if props[key] is False and key not in required:
                continue  # (no value allowed: the parameter is never written)
            value, loose = _value(params, key, i)
            one = seq(Lit(f"{PARAMETER}{key}>\n"), value, opt(Lit("\n")) if loose else Lit("\n"), Lit(f"{END}\n"))
            parts.append(one if key in required else opt(one))
        parts.append(Lit(f"{FUNCTION_END}\n"))
        bodies.append(seq(*parts))
    return alt(*bodies)


def _value(params: dict, key: str, i: int) -> tuple[Node, bool]:
    """(the language of one parameter's value text, whether the line break before ``</parameter>``
    may be left out)."""
    from ..regex.ast import EMPTY
    from .resolve import escape
    from .schema import schema_to_ast

    resource = own_resource(params, i)
    ref = {"$ref": resource["$id"] + "#/properties/" + quote(escape(key), safe="")}
    raw = declared_string(params, params["properties"][key])
    where = f"tools[{i}].function.parameters#/properties/{escape(key)}"
    try:
        compiled = schema_to_ast(ref, strict=True, max_recursion=3, raw_strings=raw,
                                 resources={resource["$id"]: resource})
    except SchemaError as e:
        raise type(e)(f"{where}: {e}") from None
    if compiled.node is EMPTY:
        raise SchemaError(f"{where}: no value satisfies this schema")
    if not raw:  # (compact JSON holds no line break)
        return _no_angle(compiled.node), True
    return _raw(compiled.node, where)


def _raw(node: Node, where: str) -> tuple[Node, bool]:
    """``_value`` for a raw string value whose characters are the language of ``node``."""
    from ..automaton.dfa import product_walk
    from ..regex import regex_to_dfa
    from ..regex.ast import ANY_CHAR_RANGES, Auto, Cls, Rep, cls
    from ..regex.ast_dfa import ast_to_dfa
    from ..regex.emit import to_regex

    if isinstance(node, Rep) and isinstance(node.item, Cls) and node.item.ranges == cls(ANY_CHAR_RANGES).ranges:
        if node.hi is None:  # (a least length alone: exact, about lo more states)
            return Auto(regex_to_dfa(FREE + ("*" if node.lo == 0 else f"{{{node.lo},}}"))), node.lo == 0
        return Auto(regex_to_dfa(f"{_BOUNDED}{{{node.lo},{node.hi}}}")), False
    try:
        pattern = to_regex(_guarded(node))
    except ValueError:
        raise SchemaError(f"{where}: its strings may hold '</', which may end a value in this syntax, and this "
                          "language is too large a pattern to leave those out") from None
    dfa = ast_to_dfa(node)
    ends = regex_to_dfa(r"[\s\S]*\n")
    loose = not product_walk(dfa, ends, lambda x, y: bool(dfa.accepting[x] and ends.accepting[y]))
    guarded = regex_to_dfa(pattern)
    if guarded.is_empty:
        raise SchemaError(f"{where}: every string of this schema holds '</', which may end a value in this syntax")
    return Auto(guarded), loose


def _no_angle(node: Node) -> Node:
    """A JSON value's language with every ``<`` (only ever inside a string) written ``\\u003c``: the
    same values, and no text that holds ``</parameter>``."""
    from ..regex.ast import Lit

    try:
        return _angles(node, Lit("\\u003c"))
    except ValueError:
        raise SchemaError("a value's language is too large to write '<' as \\u003c in it") from None


def _guarded(node: Node) -> Node:
    """``node`` with every ``<`` it may write followed by the lookahead ``(?!/)`` (for ``to_regex``)."""
    from ..regex.emit import Written

    return _angles(node, Written(_LT))


def _angles(node: Node, lt: Node) -> Node:
    """``node`` with each ``<`` it may write replaced by ``lt``; ``ValueError`` where an automaton in
    it that writes one has no tree of a writable size."""
    from ..regex.ast import Auto, Cls, Lit, alt, cls, contains, map_leaves, seq, subtract
    from ..regex.dfa_ast import auto_tree

    def leaf(n: Node) -> Node:
        if isinstance(n, Lit) and "<" in n.text:
            parts = n.text.split("<")
            return seq(*[x for i, p in enumerate(parts) for x in ((lt,) if i else ()) + ((Lit(p),) if p else ())])
        if isinstance(n, Cls) and contains(n.ranges, 60):
            return alt(cls(subtract(n.ranges, [(60, 60)])), lt)
        if isinstance(n, Auto) and (n.dfa.transitions[:, 60] >= 0).any():
            tree = auto_tree(n)
            if tree is None:
                raise ValueError("no writable tree")
            return map_leaves(tree, leaf)
        return n

    return map_leaves(node, leaf)


def compile_calls(tools: list[dict], vocabulary, *, lazy: bool | None = None):
    """The index of one call to one of ``tools`` (``[{"name", "parameters"}]``) over ``vocabulary``."""
    from .schema import CompiledSchema, automaton_or_grammar, compile_language

    key = json.dumps(tools, sort_keys=True, ensure_ascii=False)
    return compile_language("xml_calls", key, lambda: automaton_or_grammar(CompiledSchema(call_node(tools))),
                            vocabulary, f"calls to {len(tools)} tool{'s' * (len(tools) != 1)}", lazy=lazy)
