"""Qwen3-Coder's syntax, whose calls are not JSON: each parameter is an XML-like element of its own.

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

A parameter whose schema says ``"type": "string"`` is written as its text, unquoted and unescaped;
any other as compact JSON: how the family's own parsers read it. The language of one call is the
``xml_calls`` constraint (``json_schema/parameters.py``); here: the marks, the reader, the stream of
OpenAI deltas and past calls written back.
"""

from __future__ import annotations

import json
import uuid

from ...constraint import Constraint
from ...json_schema.parameters import END, FUNCTION as _FUNCTION, FUNCTION_END as _FUNCTION_END, \
    PARAMETER as _PARAMETER, declared_string
from .common import CallSyntax, ToolError, past_arguments, register_format


class XmlCalls(CallSyntax):
    """Qwen3-Coder's calls (see the module's docstring)."""

    def __init__(self, name: str = "qwen3-coder"):
        self.name = name
        self.open, self.sep, self.close = "<tool_call>", "</tool_call>\n<tool_call>", "</tool_call>"
        self.parallel = True
        self.object_arguments = True

    def __repr__(self) -> str:
        return f"XmlCalls({self.name!r})"

    def call_constraint(self, tools: list[dict], parallel: bool):
        from ...errors import SchemaError

        source = [{"name": t["function"]["name"], "parameters": t["function"]["parameters"]} for t in tools]
        try:
            constraint = Constraint.made("xml_calls", source)
        except SchemaError as e:
            raise ToolError(str(e)) from None
        return constraint, lambda e: e

    def parse(self, text: str, tools: list[dict]) -> list[dict]:
        stream = self.stream(tools)
        stream.feed(text)
        calls = stream.calls()
        if calls is None:
            raise ToolError("the calls' text is incomplete")
        return calls

    def stream(self, tools: list[dict]) -> "XmlStream":
        if not tools:
            raise ToolError("reading XML-style calls needs the tools (which parameters are raw text)")
        return XmlStream(raw_parameters(tools))

    def render(self, calls: list[dict]) -> str:
        out = []
        for call in calls:
            name, args = past_arguments(call)
            params = "".join(f"{_PARAMETER}{k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
                             f"\n{END}\n" for k, v in (args.items() if isinstance(args, dict) else ()))
            out.append(f"{self.open}\n{_FUNCTION}{name}>\n{params}{_FUNCTION_END}\n{self.close}")
        return "\n".join(out)


def raw_parameters(tools: list[dict]) -> dict[str, frozenset]:
    """Per tool name, the parameters written as raw text."""
    out = {}
    for t in tools:
        params = t["function"]["parameters"]
        props = params.get("properties", {}) if isinstance(params, dict) else {}
        out[t["function"]["name"]] = frozenset(k for k, s in props.items() if declared_string(params, s))
    return out


class XmlStream:
    """The calls' text read piece by piece (``feed``), once: OpenAI's streamed ``tool_calls`` deltas,
    the arguments as JSON text (a raw value quoted and escaped as it comes; the few characters that
    may begin ``\\n</parameter>`` held back until they do not), and ``calls()`` whose arguments
    are the text streamed."""

    def __init__(self, raw: dict[str, frozenset]):
        self._raw = raw
        self.text = ""
        self._pos = 0
        self._state = "seek"  # seek, name, params, key, value
        self._calls: list[dict] = []  # {"id", "name", "args": [pieces], "done", "keys": 0}
        self._key = None

    def feed(self, piece: str) -> list[dict]:
        if not piece:
            return []
        self.text += piece
        out: list[dict] = []
        while self._step(out):
            pass
        return out

    def _step(self, out: list[dict]) -> bool:
        """One move of the reader; False where it needs more text."""
        text, pos = self.text, self._pos
        if self._state == "seek":
            at = text.find(_FUNCTION, pos)
            if at < 0:
                self._pos = max(pos, len(text) - len(_FUNCTION) + 1)
                return False
            self._pos, self._state = at + len(_FUNCTION), "name"
            return True
        if self._state == "name":
            end = text.find(">", pos)
            if end < 0:
                return False
            call = {"id": "call_" + uuid.uuid4().hex[:24], "name": text[pos:end], "args": [], "done": False,
                    "keys": 0}
            self._calls.append(call)
            out.append({"index": len(self._calls) - 1, "id": call["id"], "type": "function",
                        "function": {"name": call["name"], "arguments": ""}})
            self._pos, self._state = end + 1, "params"
            return True
        call = self._calls[-1]
        if self._state == "params":
            while pos < len(text) and text[pos] in "\r\n":
                pos += 1
            self._pos = pos
            rest = text[pos:]
            if rest.startswith(_PARAMETER):
                self._pos, self._state = pos + len(_PARAMETER), "key"
                return True
            if rest.startswith(_FUNCTION_END):
                self._emit(out, call, "}" if call["keys"] else "{}")
                call["done"] = True
                self._pos, self._state = pos + len(_FUNCTION_END), "seek"
                return True
            return False
        if self._state == "key":
            end = text.find(">", pos)
            if end < 0 or end + 1 >= len(text):
                return False
            key = text[pos:end]
            raw = key in self._raw.get(call["name"], ())
            self._emit(out, call, ("{" if not call["keys"] else ", ") + json.dumps(key, ensure_ascii=False) + ": "
                       + ('"' if raw else ""))
            call["keys"] += 1
            self._key = raw
            self._pos, self._state = end + 1 + (text[end + 1] == "\n"), "value"
            return True
        # value: up to "</parameter>" (a line break just before it is the separator's)
        end = text.find(END, pos)
        last = len(text) if end < 0 else end
        if end < 0:  # (hold back what may begin the separator)
            mark = "\n" + END
            for k in range(min(len(mark), len(text) - pos), 0, -1):
                tail = text[len(text) - k:]
                if mark.startswith(tail) or END.startswith(tail):
                    last = len(text) - k
                    break
        elif last > pos and text[last - 1] == "\n":
            last -= 1
        if last > pos:
            part = text[pos:last]
            self._emit(out, call, json.dumps(part, ensure_ascii=False)[1:-1] if self._key else part)
            self._pos = pos = last
        if end < 0:
            return False
        if self._key:
            self._emit(out, call, '"')
        self._pos, self._state = end + len(END), "params"
        return True

    def _emit(self, out: list[dict], call: dict, piece: str) -> None:
        """``piece`` of the arguments of ``call``, the call being read (the last)."""
        call["args"].append(piece)
        out.append({"index": len(self._calls) - 1, "function": {"arguments": piece}})

    def calls(self) -> list[dict] | None:
        """The calls, as OpenAI's ``tool_calls``; None where one is not complete."""
        if not self._calls or not all(c["done"] for c in self._calls):
            return None
        out = []
        for c in self._calls:
            args = "".join(c["args"])
            try:
                json.loads(args)
            except ValueError:
                return None
            out.append({"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": args}})
        return out


XML = register_format(XmlCalls(), lambda src: _FUNCTION in src and _PARAMETER in src)
