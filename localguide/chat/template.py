"""Chat templates: a GGUF's own ``tokenizer.chat_template`` rendered with Jinja2 in a sandbox
(as Hugging Face and llama-cpp-python render it), or llama.cpp's built-in template of the
model's family where the file has none (``engines.llamacpp.templates``).

The template sees ``messages``, ``tools``, ``add_generation_prompt``, ``bos_token``,
``eos_token`` and any extra variables (``enable_thinking``, ...), with the helpers templates
use: ``raise_exception``, ``strftime_now`` and a ``tojson`` that keeps non-ASCII text.
"""

from __future__ import annotations

import datetime
import json

from ..errors import LocalguideError
from ..runtime import oldpaths as _oldpaths


class ChatTemplateError(LocalguideError):
    """A chat template that cannot be compiled or rendered (the message says where)."""


def _raise(message):
    raise ChatTemplateError(f"the chat template refused the messages: {message}")


def _tojson(value, indent=None, separators=None, sort_keys=False, ensure_ascii=False):
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


class ChatTemplate:
    """A Jinja2 chat template, compiled once in a sandboxed environment."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "", name: str = "chat template"):
        from jinja2 import TemplateSyntaxError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.source, self.bos_token, self.eos_token, self.name = source, bos_token, eos_token, name
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(source)
        except TemplateSyntaxError as e:
            raise ChatTemplateError(f"{name}, line {e.lineno}: {e.message}") from None

    def render(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = True,
               **variables) -> str:
        """The prompt text of ``messages`` (OpenAI form), ready for the assistant's answer."""
        from jinja2 import TemplateError

        try:
            return self._template.render(messages=messages, tools=tools or None,
                                         add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token, **variables)
        except ChatTemplateError:
            raise
        except TemplateError as e:
            raise ChatTemplateError(f"{self.name}: {e}") from None
        except Exception as e:  # noqa: BLE001 - a template's own bug (a None + str, ...) is named
            raise ChatTemplateError(f"{self.name} failed on these messages: {type(e).__name__}: {e}") from None


__getattr__ = _oldpaths.getattr_of(__name__)  # (names that moved elsewhere)
