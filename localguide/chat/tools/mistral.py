"""Mistral's syntax: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, the calls one JSON array
after a control token of Mistral's vocabulary (matched by its id)."""

from .common import register_format
from .json_calls import ToolFormat

MISTRAL = register_format(ToolFormat("mistral", "[TOOL_CALLS]", "", "", array=True),
                          lambda src: "[TOOL_CALLS]" in src)
