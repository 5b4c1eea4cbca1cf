"""Tool calls as they are generated: OpenAI's streamed ``tool_calls`` deltas from the calls' text so
far (after the format's open mark: Hermes' blocks, Mistral's array, Llama 3's object).

A scanner reads each new piece once (its state kept between pieces): each call object at the top,
its ``name`` once its string has ended, and where its arguments' raw JSON text starts and, once
known, ends. The first delta of a call carries its ``id``, ``type`` and ``name`` with empty
arguments; the next ones carry the arguments' new text (whitespace after a scalar held back until
the value goes on). The arguments of the final calls are that same raw text, so the deltas joined
equal them.
"""

from __future__ import annotations

import json
import uuid


class Scanner:
    """The call objects of a text read piece by piece (``feed``): ``calls`` as dicts with ``name``
    (None until its string has ended), ``start`` and ``end`` of the arguments' text in ``text``
    (``end`` None while they go on) and ``done`` (the call object has closed)."""

    def __init__(self, args_key: str = "arguments"):
        self.args_key = args_key
        self.text = ""
        self.calls: list[dict] = []
        self._depth, self._in_str, self._esc, self._start = 0, False, False, 0
        self._cur, self._base, self._role, self._key = None, 0, "key", None
        self._args = False  # (inside the current call's arguments)

    def feed(self, piece: str) -> None:
        at = len(self.text)
        self.text += piece
        text = self.text
        for i in range(at, len(text)):
            ch = text[i]
            cur = self._cur
            if self._in_str:
                if self._esc:
                    self._esc = False
                elif ch == "\\":
                    self._esc = True
                elif ch == '"':
                    self._in_str = False
                    if cur is not None and self._depth == self._base and not self._args:
                        self._word(text[self._start:i + 1])
                continue
            if cur is not None and self._depth == self._base and self._role == "value" and not self._args \
                    and self._key == self.args_key and cur["start"] is None and not ch.isspace():
                cur["start"], self._args = i, True
            if ch == '"':
                self._in_str, self._start = True, i
            elif ch in "{[":
                self._depth += 1
                if cur is None and ch == "{":
                    self._cur = {"name": None, "start": None, "end": None, "done": False}
                    self.calls.append(self._cur)
                    self._base, self._role, self._key, self._args = self._depth, "key", None, False
            elif ch in "}]":
                if cur is not None and self._depth == self._base:
                    if self._args:  # (a scalar's end, the call's too)
                        cur["end"] = _trimmed(text, cur["start"], i)
                    cur["done"], self._cur, self._args = True, None, False
                elif cur is not None and self._args and self._depth == self._base + 1:
                    cur["end"], self._args, self._key = i + 1, False, None  # (the arguments' object closed)
                self._depth -= 1
            elif cur is not None and self._depth == self._base:
                if ch == ":":
                    self._role = "value"
                elif ch == ",":
                    if self._args:  # (a scalar argument value ended)
                        cur["end"], self._args = _trimmed(text, cur["start"], i), False
                    self._role, self._key = "key", None

    def _word(self, token: str) -> None:
        try:
            word = json.loads(token)
        except ValueError:  # (no JSON string: not a name)
            return
        if self._role == "key":
            self._key = word
        elif self._key == "name" and isinstance(word, str):
            self._cur["name"] = word

    def arguments(self, call: dict) -> str:
        """The arguments' text so far (whitespace after a scalar held back while it is not over)."""
        if call["start"] is None:
            return ""
        if call["end"] is not None:
            return self.text[call["start"]:call["end"]]
        part = self.text[call["start"]:]
        return part if self._in_str or part[:1] in "{[" else part.rstrip()


def _trimmed(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def scan(text: str, args_key: str = "arguments") -> list[dict]:
    """The call objects in ``text``: ``name``, ``args`` (the arguments' raw JSON text so far),
    ``done``."""
    s = Scanner(args_key)
    s.feed(text)
    return [{"name": c["name"], "args": s.arguments(c), "done": c["done"]} for c in s.calls]


class CallStream:
    """Deltas of the calls as their text grows (``feed``); ``calls()``: the final calls, whose ids
    and arguments are those streamed."""

    def __init__(self, args_key: str = "arguments"):
        self._scanner = Scanner(args_key)
        self._sent: list[list] = []  # per call: [id, characters of its arguments sent]

    def feed(self, piece: str) -> list[dict]:
        """OpenAI ``tool_calls`` deltas for ``piece`` of the calls' text (may be none)."""
        if not piece:
            return []
        s = self._scanner
        s.feed(piece)
        out = []
        # (only the calls not yet complete, and the last one, can have news)
        for index in range(max(0, len(self._sent) - 1), len(s.calls)):
            call = s.calls[index]
            if call["name"] is None:
                break
            if index == len(self._sent):
                self._sent.append(["call_" + uuid.uuid4().hex[:24], 0])
                out.append({"index": index, "id": self._sent[index][0], "type": "function",
                            "function": {"name": call["name"], "arguments": ""}})
            args = s.arguments(call)
            sent = self._sent[index][1]
            if len(args) > sent:
                out.append({"index": index, "function": {"arguments": args[sent:]}})
                self._sent[index][1] = len(args)
        return out

    def calls(self) -> list[dict] | None:
        """The calls, as OpenAI's ``tool_calls`` (arguments: the raw JSON text generated); None
        where the text holds no complete call whose arguments are JSON."""
        s = self._scanner
        if not s.calls or not all(c["done"] and c["name"] is not None for c in s.calls):
            return None
        out = []
        for index, c in enumerate(s.calls):
            args = s.arguments(c)
            try:
                json.loads(args)
            except ValueError:
                return None
            call_id = self._sent[index][0] if index < len(self._sent) else "call_" + uuid.uuid4().hex[:24]
            out.append({"id": call_id, "type": "function", "function": {"name": c["name"], "arguments": args}})
        return out
