"""Tool calls streamed as generated (``localguide.chat.call_stream``): for any arguments and any
cut of the calls' text into pieces, the deltas joined are the final arguments, which parse to the
arguments written."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.chat.call_stream import CallStream, scan

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=12)
ARGS = st.dictionaries(st.text(max_size=6), JSON, max_size=4)
NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)


def text_of(calls, fmt: str) -> str:
    """The calls as a model writes them in ``fmt`` (separators as the chat formats put them)."""
    key = "parameters" if fmt == "llama3" else "arguments"
    objs = [json.dumps({"name": n, key: a}, ensure_ascii=False) for n, a in calls]
    if fmt == "mistral":
        return "[" + ", ".join(objs) + "]"
    if fmt == "llama3":
        return objs[0]
    return "\n</tool_call>\n<tool_call>\n".join(objs) + "\n</tool_call>"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NAMES, ARGS), min_size=1, max_size=3), st.sampled_from(["hermes", "mistral", "llama3"]),
       st.lists(st.integers(1, 9), min_size=1, max_size=40))
def test_deltas_joined_are_the_final_arguments(calls, fmt, cuts):
    if fmt == "llama3":
        calls = calls[:1]
    text = text_of(calls, fmt)
    stream = CallStream("parameters" if fmt == "llama3" else "arguments")
    deltas, i, k = [], 0, 0
    while i < len(text):
        n = cuts[k % len(cuts)]
        deltas += stream.feed(text[i:i + n])
        i, k = i + n, k + 1
    final = stream.calls()
    assert final is not None and [c["function"]["name"] for c in final] == [n for n, _ in calls]
    assert [json.loads(c["function"]["arguments"]) for c in final] == [a for _, a in calls]
    joined: dict[int, str] = {}
    for d in deltas:
        if "id" in d:
            assert d["index"] not in joined and d["function"]["arguments"] == ""
            assert final[d["index"]]["id"] == d["id"]
        joined[d["index"]] = joined.get(d["index"], "") + d["function"]["arguments"]
    assert [joined[i] for i in range(len(final))] == [c["function"]["arguments"] for c in final]


@settings(max_examples=300)
@given(st.text(alphabet='{}[]",:\\ abnqu0', max_size=60) | st.text(max_size=60))
def test_any_text_scans_without_error(text):
    for call in scan(text):
        assert isinstance(call["args"], str)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(NAMES, JSON), min_size=1, max_size=3), st.lists(st.integers(1, 7), min_size=1, max_size=20),
       st.sampled_from(["", " ", "\n  "]))
def test_scalar_arguments_and_spaces_after_them(calls, cuts, space):
    """``parameters`` may be any schema: a scalar's deltas hold back the spaces after it."""
    objs = ['{"name": %s, "arguments": %s%s, "z": 1}' % (json.dumps(n), json.dumps(a), space) for n, a in calls]
    text = "\n</tool_call>\n<tool_call>\n".join(objs)
    stream = CallStream()
    deltas, i, k = [], 0, 0
    while i < len(text):
        deltas += stream.feed(text[i:i + cuts[k % len(cuts)]])
        i, k = i + cuts[k % len(cuts)], k + 1
    final = stream.calls()
    assert [json.loads(c["function"]["arguments"]) for c in final] == [a for _, a in calls]
    joined: dict[int, str] = {}
    for d in deltas:
        joined[d["index"]] = joined.get(d["index"], "") + d["function"]["arguments"]
    assert [joined[i] for i in range(len(final))] == [c["function"]["arguments"] for c in final]


def test_long_arguments_stream_in_linear_time():
    import time

    text = '{"name": "f", "arguments": {"a": [' + ",".join(["1"] * 8000) + '], "s": "' + "x" * 8000 + '"}}'
    stream = CallStream()
    t = time.perf_counter()
    pieces = sum(bool(stream.feed(text[i:i + 4])) for i in range(0, len(text), 4))
    assert time.perf_counter() - t < 3.0  # (a rescan per piece took 23 s for this)
    assert pieces > 1000 and json.loads(stream.calls()[0]["function"]["arguments"])["s"] == "x" * 8000
