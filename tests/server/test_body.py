"""Reading a request body (``localguide.server.body``): the same values as ``json.loads``, bounds
counted outside strings, and a reader that lets other threads (the event loop, ``/health``) run
while it reads a large body."""

from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.server.api import ApiError
from localguide.server.body import MAX_ARRAYS, MAX_VALUES, plain_text, read_body, structure, structure_plain

# (strings made of the bytes that matter to the scan: quotes, backslashes, separators, brackets)
_text = st.lists(st.sampled_from(['a', '"', '\\', ',', ':', '[', ']', '{', 'é', '\n', '\\"', '\\\\']),
                max_size=12).map("".join)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_text, inner, max_size=5), max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(_json, st.booleans(), st.integers(1, 64))
def test_the_scan_counts_what_a_byte_by_byte_reader_counts(value, ascii_only, chunk):
    data = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert structure(data, chunk) == structure_plain(data)


@settings(max_examples=300, deadline=None)
@given(_json, st.booleans())
def test_the_body_reads_as_json_loads_reads_it(value, ascii_only):
    data = json.dumps({"prompt": value}, ensure_ascii=ascii_only).encode()
    assert read_body(data) == json.loads(data)


_any_text = st.text(st.characters(blacklist_categories=()), max_size=8)  # (lone surrogates and NUL too)


@settings(max_examples=500, deadline=None)
@given(st.recursive(_any_text, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_any_text, inner, max_size=4),
                    max_leaves=12), st.booleans())
def test_a_body_said_plain_holds_no_nul_or_lone_surrogate(value, ascii_only):
    data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    strings, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, dict):
            strings.extend(v)
            stack.extend(v.values())
        else:
            stack.extend(v)
    unclean = any("\x00" in s or any(0xD800 <= ord(c) <= 0xDFFF for c in s) for s in strings)
    assert not (unclean and plain_text(data))
    assert plain_text(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")) or unclean or any(
        "\\u" in s for s in strings)  # (said unclean only for an escape-like text)


@pytest.mark.parametrize("data", [
    json.dumps({"prompt": "a\u0000", "x": ["\u2200"] + [[]] * 70}).encode("utf-16-le"),  # (bytes 00 22: a quote)
    json.dumps({"prompt": "a"}).encode("utf-16"), json.dumps({"prompt": "a"}).encode("utf-32"),
    b"[" + b"9" * 4301 + b"]", b'{"temperature": NaN}', b"[Infinity, -Infinity]", b"\xff\xfe", b"", b"  "])
def test_what_is_no_utf8_json_is_a_400(data):
    """UTF-16 and UTF-32 (which ``json.loads`` takes: they would hide separators, quotes and NULs from
    the byte scans), integers past Python's digits, NaN and Infinity: each a 400, never a raw error."""
    with pytest.raises(ApiError) as e:
        read_body(data)
    assert e.value.status == 400


def test_separators_inside_strings_cost_nothing():
    text = ",:[" * 1_000_000  # (3 million commas, colons and brackets, all of them text)
    assert read_body(json.dumps({"prompt": text}).encode()) == {"prompt": text}


def test_a_body_nested_too_deep_is_a_400_naming_where():
    for depth, where in ((63, None), (64, "metadata[0]"), (100_000, None)):
        data = b'{"prompt": "a", "metadata": ' + b"[" * depth + b"]" * depth + b"}"
        if depth == 63:
            assert read_body(data)["prompt"] == "a"
            continue
        with pytest.raises(ApiError) as e:
            read_body(data)
        assert e.value.status == 400 and "nested more than 64" in str(e.value)
        assert where is None or str(e.value).startswith(where)
    text = "[" * 1000  # (brackets in a string nest nothing)
    assert read_body(json.dumps({"prompt": text}).encode()) == {"prompt": text}


@pytest.mark.parametrize("items, bound", [([b"{}"] * (MAX_VALUES + 2), f"{MAX_VALUES:,}"),
                                         ([b"[]"] * (MAX_ARRAYS + 1), f"{MAX_ARRAYS:,}")])
def test_a_body_past_a_bound_is_a_413(items, bound):
    with pytest.raises(ApiError) as e:
        read_body(b'{"metadata": [' + b",".join(items) + b"]}")
    assert e.value.status == 413 and f"over {bound}" in str(e.value)


def test_other_threads_run_while_a_large_body_is_read():
    """The reader hands the interpreter's lock over at objects and numbers: a thread that only
    wants the lock now and then (as the event loop answering /health does) runs many times inside
    one read. Python's own reader (``object_pairs_hook`` and the number hooks left out) lets it run
    only before and after."""
    body = b'{"metadata": [' + b",".join([b'{"a": 1.5e-300}'] * 180_000) + b"]}"
    reading, done = threading.Event(), threading.Event()
    ran = []

    def read():
        reading.set()
        read_body(body)
        done.set()

    t = threading.Thread(target=read)
    t.start()
    reading.wait()
    while not done.is_set():
        ran.append(time.perf_counter())
        time.sleep(0.001)
    t.join()
    assert len(ran) >= 8, ran
