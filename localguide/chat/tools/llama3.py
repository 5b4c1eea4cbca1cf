"""Llama 3.1's syntax: the answer is ``{"name": ..., "parameters": {...}}`` alone (one call an
answer; in ``"auto"`` text or a call, told by the first token)."""

from .common import register_format
from .json_calls import ToolFormat

LLAMA3 = register_format(
    ToolFormat("llama3", "", "", "", args_key="parameters", parallel=False),
    lambda src: "<|python_tag|>" in src or ('"parameters"' in src and "<|start_header_id|>" in src))
