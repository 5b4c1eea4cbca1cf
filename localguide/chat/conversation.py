"""Conversations: ``Model.chat`` and ``Model.chat_stream`` on top of the generation loop.

Messages come in the OpenAI form (``system``, ``user``, ``assistant``, ``tool`` roles), are
checked, rendered with the model's chat template (``template.py``) and generated with the
usual constraints. The prompt cache makes a follow-up turn decode little more than its new
tokens (the conversation is tokenized afresh: the last answer from its first token that was
not the tokenizer's own split, if any). With
``after`` (say ``"</think>"``) the model writes freely until that text, then the constraint
applies (``trigger.py``); the answer separates ``reasoning`` from ``content``.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import Iterator

from ..constraint import as_constraint
from ..errors import LocalguideError
from ..guides.stops import StopText

ROLES = ("system", "developer", "user", "assistant", "tool")


class ChatError(LocalguideError, ValueError):
    """Messages that are not a conversation (the message names the one at fault)."""


@dataclass
class ChatMessage:
    """The assistant's answer: ``content``, ``reasoning`` (the text before ``after``'s trigger,
    or None) and ``tool_calls`` (None where there are none)."""

    content: str | None
    reasoning: str | None = None
    tool_calls: list | None = None
    role: str = "assistant"

    def to_dict(self) -> dict:
        """The message in the OpenAI form, ready to append to ``messages``."""
        d = {"role": self.role, "content": self.content}
        if self.reasoning is not None:
            d["reasoning_content"] = self.reasoning
        if self.tool_calls:
            d["tool_calls"] = self.tool_calls
        return d


@dataclass
class ChatDelta:
    """A piece of a streamed answer: text of the ``reasoning`` or of the ``content``; the calls
    as they are generated (``tool_call_deltas``, OpenAI's streamed form: a call's id and name
    first, then its arguments' text piece by piece); the complete ``tool_calls`` at the end."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list = field(default_factory=list)
    tool_call_deltas: list = field(default_factory=list)


def normalize_messages(messages) -> list[dict]:
    """``messages`` checked and copied, text content as strings (OpenAI text parts joined)."""
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__iter__"):
        raise ChatError("messages must be a list of {'role': ..., 'content': ...} dicts")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise ChatError(f"{where}: expected a dict with 'role' and 'content', got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise ChatError(f"{where}.role: expected one of {', '.join(ROLES)}, got {role!r}")
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for j, p in enumerate(content):
                if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                    raise ChatError(f"{where}.content[{j}]: only text parts are supported "
                                    "({'type': 'text', 'text': ...})")
                parts.append(p["text"])
            content = "".join(parts)
        if content is None and not (role == "assistant" and m.get("tool_calls")):
            raise ChatError(f"{where}.content: missing (every {role} message needs text)")
        if content is not None and not isinstance(content, str):
            raise ChatError(f"{where}.content: expected text, got {type(content).__name__}")
        d = dict(m)
        d["role"] = "system" if role == "developer" else role
        d["content"] = content
        out.append(d)
    if not out:
        raise ChatError("messages is empty: give at least one message")
    return out


class _Splitter:
    """Splits streamed text at the first occurrence of the trigger: reasoning, then content
    (the whitespace right after the trigger dropped, as the guide allows it there)."""

    def __init__(self, trigger: str | None):
        self.trigger = trigger
        self.before = trigger is not None
        self.buf = ""
        self.gap = True

    def feed(self, text: str, final: bool = False) -> ChatDelta:
        if not self.before:
            return ChatDelta(content=self._content(text))
        self.buf += text
        k = self.buf.find(self.trigger)
        if k >= 0:
            reasoning, rest = self.buf[:k], self.buf[k + len(self.trigger):]
            self.before, self.buf = False, ""
            return ChatDelta(reasoning=reasoning, content=self._content(rest))
        keep = 0 if final else len(self.trigger) - 1
        cut = max(0, len(self.buf) - keep)
        out, self.buf = self.buf[:cut], self.buf[cut:]
        return ChatDelta(reasoning=out)

    def _content(self, text: str) -> str:
        if self.gap:
            text = text.lstrip(" \t\r\n")
            self.gap = not text
        return text


class _LeadSplit:
    """Splits streamed text where a call is the whole answer (Llama 3.1): a call if its first
    character but whitespace is ``{``. As ``_Splitter``: ``reasoning`` is the text before a
    call (here: all of it, or nothing), ``content`` the call's."""

    def __init__(self):
        self.call: bool | None = None
        self.buf = ""

    def feed(self, text: str, final: bool = False) -> ChatDelta:
        if self.call is None:
            self.buf += text
            head = self.buf.lstrip()
            if not head and not final:
                return ChatDelta()
            self.call, text, self.buf = head.startswith("{"), self.buf, ""
        return ChatDelta(content=text) if self.call else ChatDelta(reasoning=text)


class ChatRun:
    """One answer in the making: the prompt's tokens and the guide (made here: messages checked,
    the template rendered, the constraint compiled), then the answer's text split as its tokens
    come (``feed``), and the tool calls at the end (``finish``). ``Model.chat_stream`` and the
    server's engines drive it."""

    def __init__(self, model, messages, *, tools=None, tool_choice="auto", parallel_tool_calls: bool = True,
                 after: str | None = None, max_reasoning_tokens: int | None = None,
                 chat_template: str | None = None, template_variables: dict | None = None,
                 max_tokens: int, constraint=None, options=None, compile=None, lock=None):
        """``constraint``: the answer's ``Constraint`` (None: free text; a dict: ``Constraint.of``'s
        arguments, ``options`` added); ``compile``: what compiles a
        ``Constraint`` (default ``model.compile``); ``lock``:
        held while the guide is made (a server whose engine walks guides of the same index)."""
        import contextlib

        from . import tools as T
        from .plain import check_text, render
        from ..guides.trigger import TriggerGuide

        constraint = as_constraint(constraint, **(options or {}))
        msgs = normalize_messages(messages)
        check_text(msgs, "messages")
        if tools is not None:
            check_text(tools, "tools")
        if after is not None:
            check_text(after, "after")
        template = model.chat_template(chat_template)
        mode, fmt, open_token = "none", T.HERMES, None
        if tools is not None:
            tools = T.check_tools(tools)
            mode, usable = T.chosen(tools, tool_choice)
            if mode != "none" and constraint is not None:
                raise T.ToolError("tool calls take no constraint (regex=, json_schema=, ...): the calls' arguments "
                                  "are constrained by the tools' schemas (after= may come first)")
            fmt = T.tool_format(template)
        msgs = T.prepare(msgs, tools, template, fmt)
        shown = tools if tools is not None and T.declares_tools(template) else None  # (else described in prepare)
        self.prompt = render(model, template, msgs, tools=shown, add_generation_prompt=True,
                             **(template_variables or {}))
        # (afresh, never in the tokens a last generation took: the text alone decides the answer)
        self.prompt_tokens = model.tokenize_chat(self.prompt)
        # (the first turn's prompt: what a growing conversation keeps, localguide.engines.llamacpp.reproducible)
        first = next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), None)
        self.settled = None if first is None else self._first_prompt(model, template, msgs[:first], shown,
                                                                      template_variables)
        compile = compile or model.compile
        if mode != "none":
            made, counts_key, open_token = fmt.maker(model, usable, mode, parallel_tool_calls, compile)
        else:
            made = compile(constraint) if constraint is not None else None
            counts_key = constraint.key() if constraint is not None else None
        if after is not None and not after:
            raise ValueError("after= needs a non-empty trigger text")
        with lock or contextlib.nullcontext():
            if after is not None:
                self.guide = TriggerGuide(model.vocabulary, after.encode("utf-8"), made, max_tokens,
                                          max_reasoning_tokens)
            else:
                self.guide = made.guide(max_tokens=max_tokens) if made is not None else None
        self.counts_key, self.max_tokens, self.mode = counts_key, max_tokens, mode
        self.constrained = made if mode == "none" else None  # (the content's constraint, for stop strings)
        self._model, self._fmt, self._open_token = model, fmt, open_token
        self._lock = lock
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._reason = _Splitter(after)
        # (text before the calls is the content; the calls' text is held and parsed at the end)
        self._calls = None if mode == "none" else _Splitter(fmt.open) if fmt.open else _LeadSplit()
        self._held: list[str] = []
        self._call_stream = fmt.stream(usable) if mode != "none" else None
        self._usable = usable if mode != "none" else None

    @staticmethod
    def _first_prompt(model, template, msgs: list[dict], tools, variables) -> int:
        """How many tokens the prompt of the conversation's first turn (``msgs``, the messages
        before the first answer) has; 0 where the template does not render them alone."""
        from .plain import render

        if not msgs:
            return 0
        try:
            return len(model.tokenize_chat(render(model, template, msgs, tools=tools, add_generation_prompt=True,
                                                  **(variables or {}))))
        except Exception:  # (a template that wants an answer in it: the history stays on the reference kernels)
            return 0

    def _out(self, piece: str, final: bool = False) -> ChatDelta | None:
        d = self._reason.feed(piece, final)
        if self._calls is not None:
            c = self._calls.feed(d.content, final)
            self._held.append(c.content)
            d = ChatDelta(content=c.reasoning, reasoning=d.reasoning, tool_call_deltas=self._call_stream.feed(c.content))
        return d if d.content or d.reasoning or d.tool_call_deltas else None

    def stop_text(self, stops: list[str]) -> StopText:
        """The content's stop strings: where the content is constrained, they count only where it is
        complete (``stops``); the calls' text is held apart and never cut."""
        c = self.constrained
        return StopText(stops, self._model.complete(c, self._lock) if stops and c is not None else None)

    def feed(self, token: int) -> ChatDelta | None:
        """The text ``token`` adds (reasoning or content), or None (held back, or a call's)."""
        piece = self._decoder.decode(self._model.vocabulary[token])
        if token == self._open_token:
            piece += self._fmt.open
        return self._out(piece) if piece else None

    def finish(self) -> list[ChatDelta]:
        """The text held back, then the tool calls (raises where "required" calls did not complete)."""
        out = []
        if (d := self._out(self._decoder.decode(b"", final=True), final=True)) is not None:
            out.append(d)
        held = "".join(self._held)
        if held.strip():
            calls = self._call_stream.calls() or self._fmt.parse(held, self._usable)
            out.append(ChatDelta(tool_calls=calls))
        elif self.mode == "required":
            raise LocalguideError(f"the call did not complete within max_tokens ({self.max_tokens})")
        return out


def chat_stream(model, messages, *, max_tokens: int, sampling, speculate: bool, fast_forward: bool,
                opportunistic: bool, stats: bool, cache_prompt: bool, stop: list[str],
                particles: int | None = None, **run_args) -> Iterator[ChatDelta]:
    """The deltas of the answer to ``messages`` (``Model.chat_stream`` documents the arguments;
    ``particles``: the answer drawn by SMC with that many)."""
    run = ChatRun(model, messages, max_tokens=max_tokens, **run_args)
    if particles is not None:
        yield from _smc_answer(model, run, max_tokens, sampling, stop, particles)
        return
    cut = run.stop_text(stop)
    guide = run.guide
    counts = model.draft_counts(run.counts_key) if guide is not None and (speculate or fast_forward) else None
    tokens = model.generate_tokens(run.prompt_tokens, guide, max_tokens, sampling, opportunistic=opportunistic,
                                   speculate=speculate, fast_forward=fast_forward, counts=counts, stats=stats,
                                   cache_prompt=cache_prompt, fast_limit=run.settled)
    try:
        for token in tokens:
            if (d := run.feed(token)) is not None:
                d.content = cut.feed(d.content)
                if d.content or d.reasoning or d.tool_call_deltas:
                    yield d
                if cut.hit:
                    return
        for d in run.finish():
            d.content = cut.feed(d.content, final=True)
            if d.content or d.reasoning or d.tool_calls:
                yield d
            if cut.hit:
                return
        if tail := cut.feed("", final=True):
            yield ChatDelta(content=tail)
    finally:
        tokens.close()
        if counts is not None:
            counts.save()


def _smc_answer(model, run: ChatRun, max_tokens: int, sampling, stop: list[str],
                particles: int) -> Iterator[ChatDelta]:
    """The answer drawn by SMC (``localguide.engines.llamacpp.smc``): the particles follow the
    conversation's guide (its constraint, tool calls or reasoning trigger), and the text drawn
    is read as a generated one is."""
    guide = run.guide
    tokens = model.sample_smc(run.prompt_tokens, guide and guide.copy, max_tokens, particles, sampling.temperature,
                              sampling.seed, stop=stop)
    for token in tokens:
        if (d := run.feed(token)) is not None and (d.content or d.reasoning):
            yield d
    for d in run.finish():
        if d.content or d.reasoning or d.tool_calls:
            yield d


def collect(deltas: Iterator[ChatDelta], after: str | None) -> ChatMessage:
    """The whole answer from its deltas."""
    content, reasoning, calls = [], [], []
    for d in deltas:
        content.append(d.content)
        reasoning.append(d.reasoning)
        calls += d.tool_calls
    r = "".join(reasoning)
    if after is not None:
        r = r.strip()
        if r.startswith("<think>"):  # (a model that opens the block itself)
            r = r[len("<think>"):].strip()
    r = r if after is not None else None
    if calls:
        text = "".join(content).strip()
        return ChatMessage(content=text or None, reasoning=r, tool_calls=calls)
    return ChatMessage(content="".join(content), reasoning=r)
