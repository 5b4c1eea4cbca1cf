"""Hermes / Qwen 2.5's syntax, and localguide's envelope for templates that declare no tools (which
then get the tools described in a system message): ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>``, one block per call."""

from .common import CLOSE, OPEN
from .json_calls import ToolFormat

HERMES = ToolFormat("hermes", OPEN, CLOSE + "\n" + OPEN, CLOSE)
