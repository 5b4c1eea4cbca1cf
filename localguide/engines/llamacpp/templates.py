"""llama.cpp's built-in chat templates, for a model whose file has none."""

from __future__ import annotations

import ctypes

import llama_cpp

from ...chat.template import ChatTemplateError


class BuiltinTemplate:
    """One of llama.cpp's built-in templates (``llama_chat_apply_template``), by name: system,
    user and assistant messages with text content (no tools)."""

    def __init__(self, name: bytes):
        self.name = name

    def render(self, messages: list[dict], tools=None, add_generation_prompt: bool = True, **variables) -> str:
        if tools:
            raise ChatTemplateError(f"llama.cpp's built-in {self.name.decode()} template has no tools; "
                                    "give the model a chat template that declares them")
        arr = (llama_cpp.llama_chat_message * len(messages))()
        keep = []  # (the bytes must outlive the call)
        for i, m in enumerate(messages):
            role, content = m["role"].encode(), (m.get("content") or "").encode("utf-8")
            keep += [role, content]
            arr[i].role, arr[i].content = role, content
        size = 1024 + 2 * sum(len(k) for k in keep)
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(self.name, arr, len(messages), add_generation_prompt, buf, size)
        if n > size:
            buf = ctypes.create_string_buffer(n)
            n = llama_cpp.llama_chat_apply_template(self.name, arr, len(messages), add_generation_prompt, buf, n)
        if n < 0:
            raise ChatTemplateError(f"llama.cpp does not know the chat template {self.name.decode()!r}")
        return buf.raw[:n].decode("utf-8")
