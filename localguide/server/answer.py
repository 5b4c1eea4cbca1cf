"""One request's answer as the engine makes it, in no protocol's shape.

In the engine's thread, token by token: the text (a completion's bytes decoded whole, or a chat's
content), its stop strings applied, a chat's reasoning and tool calls, and how it ended. Each
comes out as an event for the request's event loop, which a wire format (``wire.py``) writes:
``("text", str)``, ``("reasoning", str)``, ``("call_deltas", [delta, ...])`` (the calls as they are
generated, OpenAI's streamed form), ``("calls", [call, ...])`` (complete, at the end),
``("error", exception)``, ``("done", finish_reason, stats)``; ``("started",)`` when a sequence
takes it (until then it waits in the queue).
"""

from __future__ import annotations

import codecs

from ..engines.llamacpp.batch import Work


class Answer:
    """``prepared``: what the server's preparation made (a ``ChatRun`` for a chat; the tokens,
    guide, healed bytes, counts key and ``StopText`` of a completion) and the prompt's length;
    ``post(event)`` hands an event to the event loop (called in the engine's thread)."""

    def __init__(self, job, prepared, chat: bool, vocabulary, post, metrics=None, compile_seconds: float = 0.0):
        self.chat, self._post, self._vocabulary, self._metrics = chat, post, vocabulary, metrics
        self.tokens = 0
        self.compile_seconds = compile_seconds  # (preparing: the template rendered, the constraint compiled)
        self.queue_seconds = 0.0
        what, self.prompt_tokens = prepared
        if chat:
            self.run = what
            self.stop = what.stop_text(job.stop)
            self.work = Work(what.prompt_tokens, what.guide, job.sampling, job.max_tokens, self._on_token,
                             self._on_done, counts_key=what.counts_key, stats=job.stats, fast_limit=what.settled,
                             on_start=self._on_start)
        else:
            tokens, guide, healed, key, self.stop = what
            self.skip = len(healed)
            self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            self.work = Work(tokens, guide, job.sampling, job.max_tokens, self._on_token, self._on_done,
                             counts_key=key, healed=healed, stats=job.stats, on_start=self._on_start)

    def _on_start(self) -> None:
        self._post(("started",))

    def _text(self, text: str, final: bool = False) -> bool:
        out = self.stop.feed(text, final)
        if out:
            self._post(("text", out))
        return not self.stop.hit

    def _on_token(self, token: int) -> bool:
        self.tokens += 1
        if not self.chat:
            piece = self.decoder.decode(self._vocabulary[token][self.skip:])
            self.skip = 0
            return self._text(piece) if piece else True
        d = self.run.feed(token)
        if d is None:
            return True
        if d.reasoning:
            self._post(("reasoning", d.reasoning))
        if d.tool_call_deltas:
            self._post(("call_deltas", d.tool_call_deltas))
        return self._text(d.content) if d.content else True

    def _on_done(self, reason: str, error, stats) -> None:
        if self.work.started:
            self.queue_seconds = self.work.started - self.work.submitted
        if self._metrics is not None and stats is not None:
            self._metrics.add(prompt_tokens_total=stats.prompt_tokens, generated_tokens_total=stats.tokens,
                              queue_seconds_total=self.queue_seconds, prompt_seconds_total=stats.prompt_seconds,
                              generation_seconds_total=stats.seconds, answers_total=1)
        if reason == "cancelled":
            return
        calls = []
        try:
            if error is not None:
                raise error
            if self.chat:
                for d in ([] if self.stop.hit else self.run.finish()):
                    if d.reasoning:
                        self._post(("reasoning", d.reasoning))
                    if d.tool_call_deltas:
                        self._post(("call_deltas", d.tool_call_deltas))
                    if d.content:
                        self._text(d.content)
                    calls += d.tool_calls
            else:
                self._text(self.decoder.decode(b"", final=True))
            self._text("", final=True)
        except Exception as e:  # noqa: BLE001 - the request's answer, written by the wire format
            self._post(("error", e))
            return
        if calls:
            self._post(("calls", calls))
        finish = "tool_calls" if calls else ("length" if reason == "length" and not self.stop.hit else "stop")
        self._post(("done", finish, stats))
