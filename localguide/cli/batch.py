"""``localguide batch``: a JSONL file of prompts or conversations through the model, one output line
per input line, resumable (``localguide.jobs``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Optional

import typer

from ..sampling import DEFAULT
from . import options as O
from .common import CHAT, SAMPLING, SPEED, _fail, _say, _StatusLine, app, err, load_model, placement, read_template
from .run import _constraint, _has_template

PLAIN_EVERY = 10.0  # seconds between two progress lines where stderr is no terminal


@app.command()
def batch(
    first: Annotated[str, typer.Argument(metavar="[MODEL]", show_default=False,
                     help="A model (a GGUF file, or a name from `localguide models`; default: the embedded "
                          "SmolLM2), then the input: a JSONL file, "
                          "one {\"id\": ..., \"prompt\": ...} or {\"id\": ..., \"messages\": [...]} per line.")],
    second: Annotated[Optional[str], typer.Argument(metavar="[INPUT]", show_default=False,
                      help="The input, where a model comes first.")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", show_default=False,
                      help="The output JSONL file, appended line by line; run the same command again to "
                           "finish what an interruption left.")] = ...,
    regex: O.Regex = None,
    choice: O.Choice = None,
    grammar: O.Grammar = None,
    json_schema: O.JsonSchema = None,
    json_any: O.JsonAny = False,
    strict: O.Strict = False,
    pretty: O.Pretty = False,
    max_recursion: O.MaxRecursion = None,
    max_ignored_run: O.MaxIgnoredRun = None,
    max_tokens: Annotated[int, typer.Option(min=1, help="Token budget of each item (a line may give its own).",
                                            rich_help_panel=SAMPLING)] = 256,
    temperature: O.Temperature = DEFAULT.temperature,
    top_k: O.TopK = DEFAULT.top_k,
    top_p: O.TopP = DEFAULT.top_p,
    min_p: O.MinP = DEFAULT.min_p,
    seed: Annotated[Optional[int], typer.Option(rich_help_panel=SAMPLING,
                    help="The seed of every item (a line may give its own).")] = None,
    parallel: Annotated[int, typer.Option("--parallel", min=1, max=64, rich_help_panel=SPEED,
                                          help="Items decoded together.")] = 4,
    n_gpu_layers: O.NGpuLayers = 0,
    n_ctx: O.NCtx = 4096,
    threads: O.Threads = None,
    threads_batch: O.ThreadsBatch = None,
    chat_template_file: O.ChatTemplateFile = None,
    workers: O.Workers = None,
    tensor_split: O.TensorSplit = None,
    reproducible: Annotated[bool, typer.Option(
        "--reproducible/--fastest-kernels", rich_help_panel=SPEED,
        help="Kernels that compute each position alike in every batch; --fastest-kernels: texts may differ "
             "with --parallel.")] = True,
    speculate: O.Speculate = True,
    chat: O.Chat = False,
    raw: O.Raw = False,
    system: Annotated[Optional[str], typer.Option("--system", rich_help_panel=CHAT, show_default=False,
                                                  help="A system message before each prompt (chat).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress, no summary.")] = False,
) -> None:
    """Run every line of a JSONL file through the model under a constraint; rerun to resume."""
    try:
        model_path, input_path = _split(first, second)
        if output.resolve() == input_path.resolve():
            raise typer.BadParameter("the output must be another file than the input", param_hint="--output")
        if chat and raw:
            raise typer.BadParameter("give --chat or --raw, not both")
        constraint = _constraint(SimpleNamespace(
            regex=regex, choice=choice, grammar=grammar, json_schema=json_schema, json_any=json_any, strict=strict,
            pretty=pretty, max_recursion=max_recursion, exact_recursion=False, max_ignored_run=max_ignored_run))
        from ..jobs import Output, read_input

        entries = read_input(input_path)
        out = Output(output).open()
        try:
            todo = [e for e in entries if e.key not in out.done]
            if not quiet and (out.done or out.cut):
                _say(f"{output}: {len(entries) - len(todo)} of {len(entries)} items done before"
                     + (f" (a cut last line of {out.cut} bytes removed)" if out.cut else ""), "dim")
            if not todo:
                if not quiet:
                    _say(f"nothing to do: every item of {input_path} is in {output}", "dim")
                return
            with _StatusLine():
                model = load_model(model_path, n_ctx=n_ctx if parallel == 1 else 256, n_threads=threads,
                                   n_threads_batch=threads_batch, reproducible=reproducible,
                                   chat_template=read_template(chat_template_file),
                                   **placement(n_gpu_layers, workers, tensor_split))
                use_chat = not raw and (chat or _has_template(model))
                if system is not None and not use_chat:
                    raise typer.BadParameter("--system needs a chat template (not --raw)")
                model.compile(constraint)  # (a constraint's error before any item)
            _run(model, todo, out, len(entries), parallel=parallel, n_ctx=n_ctx, constraint=constraint,
                 chat=use_chat, system=system, max_tokens=max_tokens, temperature=temperature, top_k=top_k,
                 top_p=top_p, min_p=min_p, seed=seed, speculate=speculate, quiet=quiet, output=output)
        finally:
            out.close()
    except typer.BadParameter:
        raise
    except typer.Exit:
        raise
    except Exception as e:  # noqa: BLE001 - one clear line, no traceback
        _fail(e)


def _split(first: str, second: str | None) -> tuple[str | None, Path]:
    if second is None:
        from ..models import is_gguf

        if first.lower().endswith(".gguf") or is_gguf(Path(first)):
            raise typer.BadParameter("give the input file after the model", param_hint="INPUT")
        return None, Path(first)
    return first, Path(second)


def _run(model, todo, out, total: int, *, parallel: int, n_ctx: int, constraint, chat: bool, system, max_tokens: int,
         temperature: float, top_k: int, top_p: float, min_p: float, seed, speculate: bool, quiet: bool,
         output: Path) -> None:
    from ..jobs import JobError

    import signal

    from ..engines.llamacpp.batch import Interrupt, run_batch
    from ..engines.llamacpp.sampler import Sampling

    progress = _Progress(len(todo), total - len(todo), quiet)
    good = [e for e in todo if e.error is None]
    interrupt = Interrupt()
    results = run_batch(model, [e.item for e in good], parallel=parallel, constraint=constraint, chat=chat,
                        system=system, max_tokens=max_tokens, sampling=Sampling(temperature, top_k, top_p, min_p, seed),
                        speculate=speculate, heal=True, stats=False, context=n_ctx, interrupt=interrupt)
    def on_ctrl_c(*_signal) -> None:
        first = not interrupt.winding
        interrupt()
        if first and not quiet:
            _say("Ctrl-C: finishing the items in progress (Ctrl-C again: stop now)", "yellow")

    previous = signal.signal(signal.SIGINT, on_ctrl_c) if _main_thread() else None
    try:
        for e in todo:  # (a line that is no item: its error first)
            if e.error is not None:
                out.write({"id": e.id, "error": {"message": e.error}})
                progress.add(0, True)
        for r in results:
            entry = good[r.index]
            if r.error is not None:
                out.write({"id": entry.id, "error": {"message": str(r.error) or type(r.error).__name__}})
                progress.add(0, True)
                continue
            s = r.stats
            out.write({"id": entry.id, "text": r.text, "finish_reason": r.finish_reason,
                       "usage": {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.tokens,
                                 "cached_tokens": s.cached_tokens}})
            progress.add(s.tokens, False)
    except KeyboardInterrupt:
        interrupt.now = True
    except JobError:
        results.close()
        progress.close()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    results.close()
    progress.close()
    if (interrupt.winding or interrupt.now) and progress.done < len(todo):
        _say(f"interrupted: {progress.done + progress.before} of {total} items are in {output}; "
             "run the same command again to finish the rest", "yellow")
        raise typer.Exit(130)
    if not quiet:
        _say(f"done: {total} of {total} items are in {output}; {progress.done} now, in "
             f"{time.monotonic() - progress.t0:.1f} s, {progress.errors} of them error lines", "dim")


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class _Progress:
    """Items done of the total, items/s, tokens/s, errors and the time left: a bar on a terminal,
    a plain line every ``PLAIN_EVERY`` seconds otherwise."""

    def __init__(self, todo: int, before: int, quiet: bool):
        self.todo, self.before, self.quiet = todo, before, quiet
        self.done = self.tokens = self.errors = 0
        self.t0 = self._last = time.monotonic()
        self._bar = None
        if not quiet and err.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=err,
                                 transient=False)
            self._task = self._bar.add_task("batch", total=todo, rate="")
            self._bar.start()

    def add(self, tokens: int, error: bool) -> None:
        self.done += 1
        self.tokens += tokens
        self.errors += error
        if self.quiet:
            return
        t = time.monotonic() - self.t0
        rate = (f"{self.done / t:.2f} items/s, {self.tokens / t:.1f} tokens/s, "
                f"{self.errors} error{'' if self.errors == 1 else 's'}"
                if t > 0 else "")
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, rate=rate)
        elif time.monotonic() - self._last >= PLAIN_EVERY or self.done == self.todo:
            self._last = time.monotonic()
            left = (self.todo - self.done) * t / self.done
            print(f"localguide batch: {self.done}/{self.todo} items, {rate}, {left:.0f} s left",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
