"""Schema documents: ``$id`` base URIs, ``$anchor``, ``$ref`` and JSON pointers.

A ``Sub`` is one schema in context: the JSON value, where it sits (a JSON pointer
into the root document, or a URI for another resource), its base URI and draft,
and the ``$ref`` targets already expanded on the way to it (for recursion limits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urldefrag, urljoin


def _digit(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes superscripts, which ``int`` refuses)."""
    return bool(text) and text.isascii() and text.isdigit()


DEFAULT_BASE = "https://localguide.invalid/schema.json"

# Keywords whose value is a schema, a list of schemas, or a map of schemas.
SCHEMA_KEYWORDS = {"additionalProperties", "additionalItems", "items", "contains", "not", "if", "then", "else",
                   "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contentSchema"}
SCHEMA_LIST_KEYWORDS = {"allOf", "anyOf", "oneOf", "prefixItems", "items"}
SCHEMA_MAP_KEYWORDS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}


@dataclass(frozen=True)
class Sub:
    schema: object
    ptr: str  # where it sits: "" is the root document; "uri#/pointer" for another resource
    base: str
    draft: int
    refs: tuple = ()  # $ref targets expanded on the way here

    def child(self, schema, *path) -> "Sub":
        ptr = self.ptr + "".join("/" + escape(str(p)) for p in path)
        return Sub(schema, ptr, self.base, self.draft, self.refs)


@dataclass
class Neg:
    """The negation of ``sub`` (built by ``not``, ``if`` and ``oneOf``)."""

    sub: Sub


@dataclass
class Dnf:
    """A schema given directly as a union of flats (internal)."""

    flats: list
    ptr: str = ""


def escape(s: str) -> str:
    return s.replace("~", "~0").replace("/", "~1")


def unescape(s: str) -> str:
    return s.replace("~1", "/").replace("~0", "~")


def draft_of(schema, default: int = 2020) -> int:
    if isinstance(schema, dict):
        uri = schema.get("$schema")
        if isinstance(uri, str):
            for name, d in (("draft-04", 4), ("draft-06", 6), ("draft-07", 7), ("draft-03", 3),
                            ("2019-09", 2019), ("2020-12", 2020)):
                if name in uri:
                    return d
    return default


class ResolveError(Exception):
    pass


@dataclass
class Registry:
    """Every schema resource of a document (and of the extra ``resources`` given)."""

    resources: dict = field(default_factory=dict)  # uri -> (schema, ptr, draft)
    anchors: dict = field(default_factory=dict)  # uri#anchor -> (schema, ptr, base, draft)

    def add_document(self, schema, uri: str, ptr: str, draft: int) -> Sub:
        draft = draft_of(schema, draft)
        base = uri
        if isinstance(schema, dict):
            own = schema.get("$id") if draft >= 6 else schema.get("id")
            if isinstance(own, str) and not (draft < 2019 and own.startswith("#")):
                base = urldefrag(urljoin(uri, own))[0]
        root = Sub(schema, ptr, base, draft)
        self.resources.setdefault(uri, (schema, ptr, draft, base))
        self._walk(schema, ptr, base, draft, base)
        return root

    def _walk(self, s, ptr: str, base: str, draft: int, resource: str) -> None:
        if not isinstance(s, dict):
            return
        if "$ref" in s and draft < 2019:
            # siblings of $ref are ignored in drafts 4-7, $id included
            pass
        else:
            own = s.get("$id") if draft >= 6 else s.get("id")
            if isinstance(own, str):
                if draft < 2019 and own.startswith("#"):
                    self.anchors[base + own] = (s, ptr, base, draft)
                else:
                    full, frag = urldefrag(urljoin(base, own))
                    base = resource = full
                    self.resources[full] = (s, ptr, draft, base)
                    if frag and draft < 2019:
                        self.anchors[full + "#" + frag] = (s, ptr, base, draft)
            for key in ("$anchor", "$dynamicAnchor"):
                a = s.get(key)
                if isinstance(a, str):
                    self.anchors.setdefault(base + "#" + a, (s, ptr, base, draft))
        for k, v in s.items():
            if k in SCHEMA_MAP_KEYWORDS and isinstance(v, dict):
                for name, sub in v.items():
                    if isinstance(sub, (dict, bool)):
                        self._walk(sub, f"{ptr}/{escape(k)}/{escape(name)}", base, draft, resource)
            elif k in SCHEMA_LIST_KEYWORDS and isinstance(v, list):
                for i, sub in enumerate(v):
                    self._walk(sub, f"{ptr}/{escape(k)}/{i}", base, draft, resource)
            elif k in SCHEMA_KEYWORDS and isinstance(v, dict):
                self._walk(v, f"{ptr}/{escape(k)}", base, draft, resource)

    def resolve(self, sub: Sub, ref: str) -> Sub:
        full = urljoin(sub.base, ref)
        uri, frag = urldefrag(full)
        if not uri:
            uri = sub.base
        frag = unquote(frag)
        if frag and not frag.startswith("/"):
            hit = self.anchors.get(uri + "#" + frag)
            if hit is None:
                raise ResolveError(f"no anchor {frag!r} in {uri}")
            schema, ptr, base, draft = hit
            return Sub(schema, ptr, base, draft, sub.refs)
        res = self.resources.get(uri)
        if res is None:
            raise ResolveError(f"cannot resolve {ref!r}: {uri} is not a known resource "
                               "(pass it in resources=)")
        schema, ptr, draft, base = res
        if frag:
            for part in frag[1:].split("/"):
                part = unescape(part)
                if isinstance(schema, dict) and part in schema:
                    schema = schema[part]
                elif isinstance(schema, list) and _digit(part) and int(part) < len(schema):
                    schema = schema[int(part)]
                else:
                    raise ResolveError(f"cannot resolve {ref!r}: no {part!r} at {ptr or '/'}")
                ptr = f"{ptr}/{escape(part)}"
                if isinstance(schema, dict):
                    own = schema.get("$id") if draft >= 6 else schema.get("id")
                    if isinstance(own, str) and not own.startswith("#"):
                        base = urldefrag(urljoin(base, own))[0]
        return Sub(schema, ptr, base, draft_of(schema, draft), sub.refs)
