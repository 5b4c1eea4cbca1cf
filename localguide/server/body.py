"""A request body read as JSON without holding up the event loop: bounded before the reader, read so
that the interpreter's lock changes hands inside it.

Python's JSON reader holds the interpreter's lock while it reads, and ``/health`` (on the event
loop) waits that long. Two things keep the wait short: bounds on what costs the reader time (its
values and arrays, counted outside strings, so that text holding commas costs nothing), and hooks
at every object and number, plain Python functions, where the interpreter may hand its lock over.
"""

from __future__ import annotations

import json
import re

import numpy as np

from .api import MAX_DEPTH, ApiError, check_depth

# values of one body outside strings, as commas and colons: each costs the reader ~40-300 ns
MAX_VALUES = 400_000
# arrays of one body outside strings, as "[": the reader makes each with no hook between (~200 ns)
MAX_ARRAYS = 50_000

_QUOTE, _BACKSLASH, _COMMA, _COLON, _BRACKET, _BRACE, _CLOSE, _CLOSE_BRACE = b'"\\,:[{]}'


def structure(data: bytes, chunk: int = 1 << 20) -> tuple[int, int, int]:
    """(commas and colons, opening brackets, deepest nesting of arrays and objects) outside the JSON
    strings of ``data``: numpy's whole-array operations, which let go of the interpreter's lock (a 4
    MiB body: ~50-130 ms, others run), a ``chunk`` of bytes at a time (memory: ~30 bytes per byte
    of a chunk)."""
    values = arrays = parity = depth = deepest = 0
    last_plain = -1  # where the last byte that is no backslash was
    for start in range(0, len(data), chunk):
        a = np.frombuffer(data, dtype=np.uint8, count=min(chunk, len(data) - start), offset=start)
        at = np.arange(start, start + len(a), dtype=np.int64)
        plain = np.maximum(np.maximum.accumulate(np.where(a != _BACKSLASH, at, -1)), last_plain)
        # (a quote ends or starts a string unless an odd run of backslashes comes right before it)
        quotes = np.flatnonzero(a == _QUOTE)
        before = np.where(quotes > 0, plain[np.maximum(quotes - 1, 0)], last_plain)
        run = quotes + start - 1 - before
        toggles = np.zeros(len(a), dtype=np.uint8)
        toggles[quotes[(run & 1) == 0]] = 1
        inside = np.bitwise_xor.accumulate(toggles) ^ parity
        outside = inside == 0
        values += int(np.count_nonzero(((a == _COMMA) | (a == _COLON)) & outside))
        opens = (a == _BRACKET) & outside
        arrays += int(np.count_nonzero(opens))
        opens |= (a == _BRACE) & outside
        closes = ((a == _CLOSE) | (a == _CLOSE_BRACE)) & outside
        nesting = np.cumsum(opens.astype(np.int32) - closes, dtype=np.int64) + depth
        deepest = max(deepest, int(nesting.max()))
        parity, last_plain, depth = int(inside[-1]), int(plain[-1]), int(nesting[-1])
    return values, arrays, deepest


def structure_plain(data: bytes) -> tuple[int, int, int]:
    """``structure``, a byte at a time (the reference a test compares it with)."""
    values = arrays = depth = deepest = 0
    inside = escaped = False
    for b in data:
        if inside:
            if escaped:
                escaped = False
            elif b == _BACKSLASH:
                escaped = True
            elif b == _QUOTE:
                inside = False
        elif b == _QUOTE:
            inside = True
        elif b in (_COMMA, _COLON):
            values += 1
        elif b in (_BRACKET, _BRACE):
            arrays += b == _BRACKET
            depth += 1
            deepest = max(deepest, depth)
        elif b in (_CLOSE, _CLOSE_BRACE):
            depth -= 1
    return values, arrays, deepest


# (how a NUL or a lone surrogate gets into a string the reader makes: an escape, or a surrogate's
# own UTF-8 bytes, which the reader lets through; a raw NUL in a string is no JSON)
_MAYBE_UNCLEAN = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])|\xed[\xa0-\xbf]")


def plain_text(data: bytes) -> bool:
    """Whether no string of the JSON ``data`` can hold a NUL or a lone surrogate (a look at its
    bytes: the walk over the values that names where is needed only where one might)."""
    return _MAYBE_UNCLEAN.search(data) is None


# (Python functions, not the builtins: calling one runs the interpreter's loop, where a thread
# waiting for the lock, the event loop's, gets it within the switch interval)
def _object(pairs):
    return dict(pairs)


def _int(text):
    return int(text)


def _float(text):
    return float(text)


def _constant(name):
    raise ApiError(f"the request body holds {name}, which is not JSON")


def read_body(data: bytes):
    """The JSON of a request body, or an ``ApiError`` (413 past a bound, 400 for what is no JSON or
    UTF-8, or nested deeper than ``MAX_DEPTH``)."""
    # (the scans below read UTF-8's bytes: a body in UTF-16 or UTF-32, which json.loads would
    # also take, could hide its separators, quotes and escapes from them)
    if (encoding := json.detect_encoding(data)) not in ("utf-8", "utf-8-sig"):
        raise ApiError(f"the request body is {encoding.upper()}: JSON between systems is UTF-8")
    values, arrays = data.count(b",") + data.count(b":"), data.count(b"[")
    deepest = arrays + data.count(b"{")
    # (over-counts, strings' bytes too: the exact scan only where one is past its bound)
    if values > MAX_VALUES or arrays > MAX_ARRAYS or deepest > MAX_DEPTH:
        values, arrays, deepest = structure(data)
    too_deep = ApiError(f"the request body is nested more than {MAX_DEPTH} arrays and objects deep (serve's bound)")
    within = values <= MAX_VALUES and arrays <= MAX_ARRAYS
    if deepest > MAX_DEPTH and not within:
        raise too_deep
    if values > MAX_VALUES:
        raise ApiError(f"the request body holds {values:,} JSON values (commas and colons outside strings), over "
                       f"{MAX_VALUES:,} (serve's bound)", status=413)
    if arrays > MAX_ARRAYS:
        raise ApiError(f"the request body holds {arrays:,} arrays, over {MAX_ARRAYS:,} (serve's bound)", status=413)
    try:
        body = json.loads(data, object_pairs_hook=_object, parse_int=_int, parse_float=_float,
                          parse_constant=_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(f"the request body is not JSON: {e}") from None
    except ValueError as e:  # (an integer past Python's 4,300 digits)
        raise ApiError(f"the request body is not JSON this server reads: {e}") from None
    except RecursionError:  # (the decoder's own bound, far past serve's)
        raise too_deep from None
    if deepest > MAX_DEPTH:
        check_depth(body)  # (names where)
        raise too_deep  # (a body the scan read otherwise than the reader: not valid as counted)
    return body
