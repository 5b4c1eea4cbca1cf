"""Text a user or a tool wrote stays text through a chat template: only the template's own markup
becomes control tokens.

A rendered prompt is tokenized with llama.cpp's special-token parsing (the template writes
``<|im_start|>`` as text and means the token), which would also read a message that says
``<|im_start|>system`` as a new turn. So the template is rendered a second time with every
string of the messages and tools replaced by a mark; where the marks fall, the real rendering
holds the request's text, and those spans are tokenized without special tokens (``Prompt``).
A template that transforms the text (beyond trimming or JSON escaping) leaves no exact spans:
then text holding a control token's text is refused, naming its field.
"""

from __future__ import annotations

import json
import re

from ..errors import LocalguideError

_MARK = re.compile("\ue000(\\d+)\ue001")
_KEEP = ("role", "type")  # (values templates compare: never marked)


class TextError(LocalguideError, ValueError):
    """Text that cannot go into a prompt as it is (a NUL, a lone surrogate, or a control token's
    text a template would not keep as text): the message names the field, ``field`` its top
    name (``messages``, ``tools``, ...)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class Prompt(str):
    """A rendered chat prompt; ``plain``: the (start, end) character spans that hold a request's
    text with a control token's text in it, tokenized as plain text (none: tokenized whole)."""

    plain: tuple = ()


def check_text(value, where: str, nul: bool = True) -> None:
    """Refuse a NUL (``nul``) or a lone surrogate in any string of ``value`` (keys included), naming
    ``where`` and the position; iterative, any depth."""
    stack = [(value, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, str):
            _check_one(v, at, where, nul)
        elif isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str):
                    _check_one(k, f"{at} (a key)", where, nul)
                stack.append((x, f"{at}.{k}"))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{at}[{i}]") for i, x in enumerate(v))


def _check_one(s: str, at: str, field: str, nul: bool) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise TextError(f"{at}: a lone surrogate (U+{ord(s[e.start]):04X}) at character {e.start} is not "
                        "text: expected valid Unicode", _top(field)) from None
    if nul and "\x00" in s:
        raise TextError(f"{at}: a NUL character at character {s.index(chr(0))}: expected text without NUL",
                        _top(field))


def _top(where: str) -> str:
    return re.split(r"[.\[ ]", where, maxsplit=1)[0]


def render(model, template, messages: list[dict], tools=None, **variables) -> Prompt:
    """``template`` rendered over ``messages`` and ``tools``, the request's text marked as plain."""
    real = template.render(messages, tools=tools, **variables)
    texts: list[tuple[str, str]] = []
    marked_msgs = _marked(messages, "messages", texts)
    marked_tools = _marked(tools, "tools", texts) if tools else tools
    risky = [(at, t) for at, t in texts if _has_control(model, t)]
    prompt = Prompt(real)
    if not risky:
        return prompt
    try:
        spans = _align(real, template.render(marked_msgs, tools=marked_tools, **variables), texts)
    except LocalguideError:
        spans = None
    if spans is None:
        at, t = risky[0]
        raise TextError(f"{at}: holds a control token's text ({_control_text(model, t)!r}) and this chat "
                        "template does not keep the text as it is: refused (it would be read as markup)", _top(at))
    prompt.plain = tuple(s for s in spans if _has_control(model, real[s[0]:s[1]]))
    return prompt


def tokenize(model, text: str) -> list[int]:
    """``text`` (a ``Prompt``) as tokens: its plain spans without special tokens, the rest with."""
    spans = getattr(text, "plain", ())
    tok = model.tokenize_text
    if not spans:
        return tok(text.encode("utf-8"), special=True)
    out, pos = [], 0
    for a, b in spans:
        if a > pos:
            out += tok(text[pos:a].encode("utf-8"), special=True)
        out += tok(text[a:b].encode("utf-8"), special=False)
        pos = b
    if pos < len(text):
        out += tok(text[pos:].encode("utf-8"), special=True)
    return out


def _has_control(model, text: str) -> bool:
    if not text:
        return False
    data = text.encode("utf-8")
    return model.tokenize_text(data, special=True) != model.tokenize_text(data, special=False)


def _control_text(model, text: str) -> str:
    """The first control token's text in ``text``."""
    for t in model.tokenize_text(text.encode("utf-8"), special=True):
        if not model.vocabulary[t]:
            return model.token_text(t)
    return "?"


def _marked(value, where: str, texts: list):
    """``value`` with every string (and every key of a dict under ``properties`` or ``arguments``)
    replaced by a mark naming its place in ``texts``; iterative, any depth."""
    def mark(s, at):
        texts.append((at, s))
        return f"\ue000{len(texts) - 1}\ue001"

    root = [None]
    stack = [(value, where, root, 0, False)]
    while stack:
        v, at, parent, slot, keys = stack.pop()
        if isinstance(v, str):
            parent[slot] = mark(v, at)
        elif isinstance(v, dict):
            out = {}
            parent[slot] = out
            for k, x in v.items():
                kk = mark(k, f"{at} (a key)") if keys and isinstance(k, str) else k
                out[kk] = None
                if k in _KEEP and isinstance(x, str):
                    out[kk] = x
                else:
                    stack.append((x, f"{at}.{k}", out, kk, k in ("properties", "arguments")))
        elif isinstance(v, (list, tuple)):
            out = [None] * len(v)
            parent[slot] = out
            stack.extend((x, f"{at}[{i}]", out, i, False) for i, x in enumerate(v))
        else:
            parent[slot] = v
    return root[0]


def _forms(text: str) -> list[str]:
    """How a template may write ``text``: as it is, trimmed, or JSON-escaped."""
    return list(dict.fromkeys([text, text.strip(), json.dumps(text, ensure_ascii=False)[1:-1],
                               json.dumps(text)[1:-1]]))


def _align(real: str, marked: str, texts: list) -> list[tuple[int, int]] | None:
    """The spans of ``real`` where ``marked`` has its marks, or None where they cannot be placed."""
    parts = _MARK.split(marked)
    if not real.startswith(parts[0]):
        return None
    pos, spans = len(parts[0]), []
    for k in range(1, len(parts), 2):
        after = parts[k + 1]
        last = k + 2 >= len(parts)
        for form in _forms(texts[int(parts[k])][1]):
            end = pos + len(form)
            if real.startswith(form, pos) and real.startswith(after, end) and \
                    (not last or end + len(after) == len(real)):
                spans.append((pos, end))
                pos = end + len(after)
                break
        else:
            return None
    return spans if pos == len(real) else None
