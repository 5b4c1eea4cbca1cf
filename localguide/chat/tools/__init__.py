"""Tool calls: ``tools`` in the OpenAI form, calls whose arguments are valid for their tool's
schema by construction, parsed into OpenAI ``tool_calls``.

A call is written in the model family's own syntax where its chat template declares one, one
module each (a ``CallSyntax`` and its ``register_format``, told from the template's text):

- ``hermes``: Hermes / Qwen 2.5, and localguide's envelope for templates that declare no tools;
- ``mistral``: ``[TOOL_CALLS]`` and a JSON array;
- ``llama3``: Llama 3.1's bare ``{"name": ..., "parameters": {...}}``;
- ``xml_calls``: Qwen3-Coder's ``<function=...><parameter=...>`` elements (not JSON).

``common`` holds what they share (the tools checked, the tool choice, history, the registry and the
answer's guides), ``json_calls`` the JSON-shaped syntaxes' schema and parser.
``tool_choice``: ``"auto"`` (text, or text then calls: the trigger of ``guides/trigger.py``;
Llama 3.1: text or a call, by the first token), ``"required"`` (calls, at once), ``"none"`` or
``{"type": "function", "function": {"name": ...}}`` (that tool, at once).
``parallel_tool_calls`` (default True, as OpenAI's): several calls in one answer, each
whole within ``max_tokens`` (Llama 3.1's syntax has one call an answer).
"""

from __future__ import annotations

from .common import (CLOSE, FORMATS, OPEN, CallSyntax, ToolError, check_tools, chosen, control_token,
                     declares_tools, describe, register_format)
from .common import prepare as _prepare
from .common import tool_format as _tool_format
from .xml_calls import XML, XmlCalls  # (registered first: its template also writes <tool_call>)
from .mistral import MISTRAL
from .llama3 import LLAMA3
from .hermes import HERMES
from .json_calls import ToolFormat, arguments_pointers, call_schema, calls_schema, located
from ...json_schema.parameters import TOOLS_BASE

__all__ = ["CLOSE", "FORMATS", "OPEN", "CallSyntax", "ToolError", "ToolFormat", "XmlCalls", "HERMES", "MISTRAL",
           "LLAMA3", "XML", "TOOLS_BASE", "arguments_pointers", "call_schema", "calls_schema", "calls_maker",
           "check_tools", "chosen", "control_token", "declares_tools", "describe", "located", "parse_calls",
           "prepare", "register_format", "tool_format"]


def tool_format(template) -> CallSyntax:
    """The syntax of ``template``'s family (Hermes where it declares no other, or no tools)."""
    return _tool_format(template, HERMES)


def prepare(messages: list[dict], tools: list[dict] | None, template, fmt: CallSyntax | None = None) -> list[dict]:
    """``common.prepare`` (past calls in ``fmt``'s syntax, Hermes' by default)."""
    return _prepare(messages, tools, template, fmt or HERMES)


def calls_maker(model, tools: list[dict], fmt: CallSyntax, mode: str, parallel: bool, compile=None):
    """``fmt.maker``: (the answer's guide maker, the draft counts' key, the open mark's token id or None)."""
    return fmt.maker(model, tools, mode, parallel, compile)


def parse_calls(text: str, fmt: CallSyntax = HERMES, tools: list[dict] | None = None) -> list[dict]:
    """``fmt.parse``: OpenAI ``tool_calls`` from the constrained text after ``fmt.open``."""
    return fmt.parse(text, tools)
