"""Tool calls as they are generated: OpenAI's streamed ``tool_calls`` deltas from the calls' text so
far (after the format's open mark: Hermes' blocks, Mistral's array, Llama 3's object).

The text is read again whole at each piece (a call is a few hundred characters): each call object
at the top, its ``name`` once its string has ended, and its arguments' raw JSON text as far as it
has come. The first delta of a call carries its ``id``, ``type`` and ``name`` with empty
arguments; the next ones carry the arguments' new text. The arguments of the final calls are that
same raw text, so the deltas joined equal them.
"""

from __future__ import annotations

import json
import uuid


def scan(text: str, args_key: str = "arguments") -> list[dict]:
    """The call objects in ``text``: ``name`` (None until its string has ended), ``args`` (the
    arguments' raw JSON text so far), ``done`` (the call object has closed)."""
    calls: list[dict] = []
    depth, in_str, esc, start = 0, False, False, 0
    cur, base, role, key, args_at = None, 0, "key", None, None
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                if cur is not None and depth == base and args_at is None:
                    try:
                        word = json.loads(text[start:i + 1])
                    except ValueError:  # (no JSON string: not a name)
                        word = None
                    if role == "key":
                        key = word
                    elif key == "name" and isinstance(word, str):
                        cur["name"] = word
            continue
        if cur is not None and depth == base and role == "value" and key == args_key and args_at is None \
                and not ch.isspace():
            args_at = i
        if ch == '"':
            in_str, start = True, i
        elif ch in "{[":
            depth += 1
            if cur is None and ch == "{":
                cur = {"name": None, "args": "", "done": False}
                calls.append(cur)
                base, role, key, args_at = depth, "key", None, None
        elif ch in "}]":
            if cur is not None and depth == base:
                if args_at is not None and not cur["done"]:
                    cur["args"] = text[args_at:i].rstrip()
                cur["done"], cur = True, None
            elif cur is not None and depth == base + 1 and args_at is not None and key == args_key:
                cur["args"] = text[args_at:i + 1]  # (the arguments' object has closed)
                key, args_at = None, None
            depth -= 1
        elif cur is not None and depth == base:
            if ch == ":":
                role = "value"
            elif ch == ",":
                role = "key"
                if key == args_key and args_at is not None:  # (a scalar argument value ended)
                    cur["args"] = text[args_at:i].rstrip()
                key = None
        if cur is not None and args_at is not None and key == args_key:
            cur["args"] = text[args_at:i + 1]
    return calls


class CallStream:
    """Deltas of the calls as their text grows (``feed``); ``calls()``: the final calls, whose ids
    and arguments are those streamed."""

    def __init__(self, args_key: str = "arguments"):
        self.args_key = args_key
        self._text = ""
        self._sent: list[list] = []  # per call: [id, characters of its arguments sent]

    def feed(self, piece: str) -> list[dict]:
        """OpenAI ``tool_calls`` deltas for ``piece`` of the calls' text (may be none)."""
        if not piece:
            return []
        self._text += piece
        out = []
        for index, call in enumerate(scan(self._text, self.args_key)):
            if call["name"] is None:
                break
            if index == len(self._sent):
                self._sent.append(["call_" + uuid.uuid4().hex[:24], 0])
                out.append({"index": index, "id": self._sent[index][0], "type": "function",
                            "function": {"name": call["name"], "arguments": ""}})
            sent = self._sent[index][1]
            if len(call["args"]) > sent:
                out.append({"index": index, "function": {"arguments": call["args"][sent:]}})
                self._sent[index][1] = len(call["args"])
        return out

    def calls(self) -> list[dict] | None:
        """The calls, as OpenAI's ``tool_calls`` (arguments: the raw JSON text generated); None
        where the text holds no complete call whose arguments are JSON."""
        found = scan(self._text, self.args_key)
        if not found or not all(c["done"] and c["name"] is not None for c in found):
            return None
        out = []
        for index, c in enumerate(found):
            try:
                json.loads(c["args"])
            except ValueError:
                return None
            call_id = self._sent[index][0] if index < len(self._sent) else "call_" + uuid.uuid4().hex[:24]
            out.append({"id": call_id, "type": "function", "function": {"name": c["name"], "arguments": c["args"]}})
        return out
