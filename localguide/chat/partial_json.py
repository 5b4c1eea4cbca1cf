"""Partial JSON: the value a prefix of a JSON document holds so far (``Model.stream_json``).

Every prefix a constrained generation yields is a prefix of a valid document, so the partial
value is always one the finished value extends: an open string is given as far as it goes
(an escape cut in the middle left out), an open list or object with the members it has; a
number or a ``true`` / ``false`` / ``null`` only once it has ended (``12`` could still become
``123``), and an object member only once its value has begun.
"""

from __future__ import annotations

import json

_MISSING = object()
_WS = " \t\r\n"
_ESC = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def parse_partial(text: str):
    """The value of the JSON prefix ``text`` so far (``None`` before it has begun; a JSON ``null``
    once it has ended is also ``None``). Raises ValueError on text that is no JSON prefix."""
    v, _ = _value(text, 0)
    return None if v is _MISSING else v


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _value(s: str, i: int):
    i = _skip(s, i)
    if i >= len(s):
        return _MISSING, i
    c = s[i]
    if c == "{":
        return _object(s, i + 1)
    if c == "[":
        return _array(s, i + 1)
    if c == '"':
        v, i, _ = _string(s, i + 1)
        return v, i
    return _scalar(s, i)


def _object(s: str, i: int):
    out: dict = {}
    while True:
        i = _skip(s, i)
        if i >= len(s):
            return out, i
        if s[i] == "}":
            return out, i + 1
        if s[i] == ",":
            i = _skip(s, i + 1)
            if i >= len(s):
                return out, i
        if s[i] != '"':
            raise ValueError(f"not a JSON prefix at {i}: expected a key")
        key, i, closed = _string(s, i + 1)
        if not closed:
            return out, i
        i = _skip(s, i)
        if i >= len(s):
            return out, i
        if s[i] != ":":
            raise ValueError(f"not a JSON prefix at {i}: expected ':'")
        v, i = _value(s, i + 1)
        if v is _MISSING:
            return out, i
        out[key] = v
        if i >= len(s):
            return out, i


def _array(s: str, i: int):
    out: list = []
    while True:
        i = _skip(s, i)
        if i >= len(s):
            return out, i
        if s[i] == "]":
            return out, i + 1
        if s[i] == ",":
            i += 1
        v, i = _value(s, i)
        if v is _MISSING:
            return out, i
        out.append(v)
        if i >= len(s):
            return out, i


def _string(s: str, i: int):
    """(the text so far, the index after it, whether it closed)."""
    out = []
    while i < len(s):
        c = s[i]
        if c == '"':
            return "".join(out), i + 1, True
        if c == "\\":
            if i + 1 >= len(s):
                break
            e = s[i + 1]
            if e == "u":
                if i + 6 > len(s):
                    break
                code = int(s[i + 2:i + 6], 16)
                if 0xD800 <= code < 0xDC00:  # a surrogate pair: both halves or neither
                    if i + 12 > len(s):
                        break
                    low = int(s[i + 8:i + 12], 16)
                    out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i += 12
                    continue
                out.append(chr(code))
                i += 6
                continue
            out.append(_ESC[e])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out), len(s), False


def _scalar(s: str, i: int):
    j = i
    while j < len(s) and s[j] not in ",]}" + _WS:
        j += 1
    if j >= len(s):
        return _MISSING, len(s)  # (it may go on)
    return json.loads(s[i:j]), j


def extends(final, partial) -> bool:
    """Whether ``final`` is ``partial`` or goes on from it (what ``parse_partial`` promises)."""
    if isinstance(partial, dict):
        return isinstance(final, dict) and all(k in final and extends(final[k], v) for k, v in partial.items())
    if isinstance(partial, list):
        return (isinstance(final, list) and len(final) >= len(partial)
                and all(extends(f, p) for f, p in zip(final, partial)))
    if isinstance(partial, str):
        return isinstance(final, str) and final.startswith(partial)
    return final == partial and type(final) is type(partial)
