"""The ``localguide`` command: guided generation from the terminal.

Commands only parse arguments and delegate to the Python API; every error is one
line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Structured generation for local LLMs: text guaranteed to match a constraint.")
err = Console(stderr=True)
CONSTRAINTS = "Constraint (at most one)"
SAMPLING = "Sampling"
SPEED = "Speed"


@app.callback()
def _root() -> None:
    """Structured generation for local LLMs (GGUF models through llama.cpp)."""


def _split_model_prompt(first: Optional[str], second: Optional[str]) -> tuple[Optional[Path], Optional[str]]:
    """A first argument naming a .gguf file is the model; otherwise it is the prompt."""
    if first is not None and first.lower().endswith(".gguf"):
        return Path(first), second
    if second is not None:
        raise typer.BadParameter(f"expected MODEL to be a .gguf file, got {first!r}", param_hint="MODEL")
    return None, first


_OPEN = None  # the status line on screen, closed when the output begins


class _StatusLine:
    """While it is open, whatever localguide has been doing for over half a second is shown on stderr
    (``localguide.progress``): a spinner on a terminal, else one line per stage."""

    def __enter__(self):
        global _OPEN
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="localguide-status", daemon=True)
        self._thread.start()
        _OPEN = self
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Take the status line down now (before the output streams: the two must not mix)."""
        global _OPEN
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        if _OPEN is self:
            _OPEN = None

    def _loop(self) -> None:
        from .progress import current

        status, shown, printed = None, None, set()
        ended = None  # when the stage shown last ended
        while not self._stop.wait(0.1):
            cur = current()
            # Shown after half a second; once shown, it follows stage to stage (kernels compile
            # one after another), kept through a gap of under half a second between two stages,
            # and goes when no stage is left.
            what = cur[0] if cur is not None and (shown is not None or cur[1] >= 0.5) else None
            if what is None and shown is not None:
                ended = ended or time.monotonic()
                if time.monotonic() - ended < 0.5:
                    continue
            ended = None
            if what == shown:
                continue
            if not err.is_terminal:
                if what is not None and what not in printed:
                    printed.add(what)
                    print(f"localguide: {what}...", file=sys.stderr, flush=True)
            elif what is None:
                status.stop()
                status = None
            elif status is None:
                status = err.status(what + "...", spinner="dots")
                status.start()
            else:
                status.update(what + "...")
            shown = what
        if status is not None:
            status.stop()


@app.command()
def run(
    first: Annotated[Optional[str], typer.Argument(metavar="[MODEL]", show_default=False,
                     help="A .gguf model file (default: the embedded SmolLM2), or the prompt.")] = None,
    second: Annotated[Optional[str], typer.Argument(metavar="[PROMPT]", show_default=False,
                      help="The prompt; without one, an interactive session starts.")] = None,
    regex: Annotated[Optional[str], typer.Option("--regex", "-r", rich_help_panel=CONSTRAINTS,
                     help="The whole output matches this regular expression (ECMA-262).")] = None,
    choice: Annotated[Optional[list[str]], typer.Option("--choice", "-c", rich_help_panel=CONSTRAINTS,
                      help="The output is exactly one of these strings (repeat the option).")] = None,
    grammar: Annotated[Optional[str], typer.Option("--grammar", "-g", rich_help_panel=CONSTRAINTS,
                       help="A .lark or .gbnf file, or a shipped grammar (see `localguide grammars`).")] = None,
    json_schema: Annotated[Optional[Path], typer.Option("--json-schema", "-j", rich_help_panel=CONSTRAINTS,
                           help="A JSON Schema file: the output is a valid JSON document.")] = None,
    json_any: Annotated[bool, typer.Option("--json", rich_help_panel=CONSTRAINTS,
                        help="The output is any JSON value.")] = False,
    strict: Annotated[bool, typer.Option("--strict", rich_help_panel=CONSTRAINTS,
                      help="JSON Schema: objects allow only their listed properties.")] = False,
    pretty: Annotated[bool, typer.Option("--pretty", rich_help_panel=CONSTRAINTS,
                      help="JSON: newlines and indentation instead of compact output.")] = False,
    exact_recursion: Annotated[bool, typer.Option(
        "--exact-recursion", rich_help_panel=CONSTRAINTS,
        help="JSON Schema: recursive $ref to any depth (a grammar), not expanded 3 levels.")] = False,
    max_ignored_run: Annotated[Optional[int], typer.Option(
        "--max-ignored-run", min=0, rich_help_panel=CONSTRAINTS, show_default=False,
        help="Grammars: the longest run of %ignore'd text (whitespace), in bytes; 0: no limit "
             "(default 32).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Token budget; a constrained output still completes.",
                                            rich_help_panel=SAMPLING)] = 256,
    temperature: Annotated[float, typer.Option(help="0 is greedy.", rich_help_panel=SAMPLING)] = 0.8,
    top_k: Annotated[int, typer.Option(rich_help_panel=SAMPLING)] = 40,
    top_p: Annotated[float, typer.Option(rich_help_panel=SAMPLING)] = 0.95,
    seed: Annotated[Optional[int], typer.Option(rich_help_panel=SAMPLING)] = None,
    n_gpu_layers: Annotated[int, typer.Option(help="Layers to offload to the GPU (-1: all).")] = 0,
    chat: Annotated[bool, typer.Option("--chat", help="Wrap the prompt in the model's chat template.")] = False,
    opportunistic: Annotated[bool, typer.Option(
        "--opportunistic", help="Grammars: check the model's own token first, mask only on a rejection.")] = False,
    speculate: Annotated[bool, typer.Option(
        "--speculate/--no-speculate", rich_help_panel=SPEED,
        help="Drafts from the constraint, checked by the model several tokens per decode (exact: the "
             "same output distribution).")] = True,
    fast_forward: Annotated[bool, typer.Option(
        "--fast-forward", rich_help_panel=SPEED,
        help="Take forced text (a JSON key, a bracket) as the model's own tokens without sampling it: "
             "faster, but the model may have chosen another tokenization.")] = False,
    stats: Annotated[bool, typer.Option(
        "--stats", rich_help_panel=SPEED, help="After the output, print tokens, decode calls, drafts "
                                               "accepted, tokens per second and how much the constraint "
                                               "changed the model's choices to stderr.")] = False,
    heal: Annotated[bool, typer.Option(
        "--heal/--no-heal", rich_help_panel=SAMPLING,
        help="Token healing: a prompt ending inside a word lets the model choose the word's token "
             "(the output still follows the prompt as written; never with --chat).")] = True,
) -> None:
    """Generate text for PROMPT that matches the constraint, streaming it to stdout."""
    with _StatusLine():
        _run(first, second, regex, choice, grammar, json_schema, json_any, strict, pretty, exact_recursion,
             max_ignored_run, max_tokens, temperature, top_k, top_p, seed, n_gpu_layers, chat, opportunistic,
             speculate, fast_forward, stats, heal)
    from . import cache
    from .progress import stage

    with _StatusLine(), stage("saving to the cache"):  # (a large compiled grammar: a second or two)
        cache.flush()


def _run(first, second, regex, choice, grammar, json_schema, json_any, strict, pretty, exact_recursion,
         max_ignored_run, max_tokens, temperature, top_k, top_p, seed, n_gpu_layers, chat, opportunistic,
         speculate, fast_forward, stats, heal) -> None:
    try:
        model_path, prompt = _split_model_prompt(first, second)
        if sum(x is not None for x in (regex, choice or None, grammar, json_schema, json_any or None)) > 1:
            raise typer.BadParameter("give at most one of --regex, --choice, --grammar, --json-schema and --json")
        if max_ignored_run is not None and grammar is None:
            raise typer.BadParameter("--max-ignored-run applies to --grammar only")
        schema = _read_schema(json_schema) if json_schema is not None else (True if json_any else None)
        import localguide

        model = localguide.load(model_path, n_gpu_layers=n_gpu_layers)
        constraint = {"regex": regex, "choice": choice or None, "grammar": grammar, "json_schema": schema}
        if exact_recursion and json_schema is None:
            raise typer.BadParameter("--exact-recursion applies to --json-schema only")
        if schema is not None:
            constraint.update(strict=strict, whitespace="pretty" if pretty else "compact")
            if exact_recursion:
                constraint.update(max_recursion=None)
        if grammar is not None and max_ignored_run is not None:
            constraint.update(max_ignored_run=max_ignored_run or None)
        model.compile(**constraint)  # (errors before the prompt; a second compile is served from memory)
        options = dict(constraint, max_tokens=max_tokens, temperature=temperature, top_k=top_k,
                       top_p=top_p, seed=seed, chat=chat, opportunistic=opportunistic, speculate=speculate,
                       fast_forward=fast_forward, heal=heal, stats=stats)
        if prompt is not None:
            _answer(model, prompt, options, stats)
            return
        err.print(f"[dim]{model.path.name}: type a prompt, Ctrl-D to leave[/dim]")
        while True:
            try:
                line = input("> ") if sys.stdin.isatty() else sys.stdin.readline()
            except EOFError:
                break
            if not sys.stdin.isatty() and line == "":
                break
            if line.strip():
                _answer(model, line.rstrip("\n"), options, stats)
        if sys.stdin.isatty():
            print()
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130)
    except typer.BadParameter:
        raise
    except Exception as e:  # noqa: BLE001 - one clear line, no traceback
        _fail(e)


def _read_schema(path: Path):
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise OSError(f"cannot read the schema file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None


@app.command()
def inspect(
    json_schema: Annotated[Path, typer.Option("--json-schema", "-j", help="The JSON Schema file to inspect.")],
    strict: Annotated[bool, typer.Option("--strict")] = False,
    exact_recursion: Annotated[bool, typer.Option("--exact-recursion")] = False,
) -> None:
    """Print, for every keyword of a JSON Schema, whether it is enforced, approximated or unsupported."""
    try:
        from .json_schema import format_inspection, inspect_schema

        options = {"max_recursion": None} if exact_recursion else {}
        print(format_inspection(inspect_schema(_read_schema(json_schema), strict=strict, **options)))
    except Exception as e:  # noqa: BLE001
        _fail(e)


@app.command()
def info() -> None:
    """Versions, llama.cpp's backend, the default model, the caches, and whether the kernels are compiled here."""
    from .info import report

    rows = report()
    width = max(len(what) for what, _ in rows)
    for what, value in rows:  # plain text: paths are never cut or styled
        print(f"{what:<{width}}  {value}")


@app.command()
def grammars() -> None:
    """List the shipped grammars (use a name with --grammar)."""
    from rich.console import Console
    from rich.table import Table

    from .grammar import list_grammars

    table = Table("name", "format", "file", box=None)
    for name, path in sorted(list_grammars().items()):
        table.add_row(name, path.suffix.lstrip("."), path.name)
    Console().print(table)


def _answer(model, prompt: str, options: dict, stats: bool = False) -> None:
    for piece in model.stream(prompt, **options):
        if _OPEN is not None:
            _OPEN.close()
        out = sys.stdout
        out.write(piece)
        out.flush()
    if _OPEN is not None:
        _OPEN.close()
    sys.stdout.write("\n")
    sys.stdout.flush()
    if stats and model.last_stats is not None:
        print(f"localguide: {model.last_stats}", file=sys.stderr, flush=True)
        _quality_table(model.last_stats)


def _quality_table(s) -> None:
    """How much the constraint changed the model's choices (``GenerationStats``), on stderr."""
    if s.interventions is None:
        return
    from rich.table import Table

    table = Table(title="constraint vs the model alone", title_justify="left", show_header=True)
    for name in ("interventions", "mass removed (mean / max)", "NLL / token", "healed bytes"):
        table.add_column(name, justify="right")
    table.add_row(f"{s.interventions} of {s.measured_tokens}",
                  f"{s.mass_removed_mean:.3f} / {s.mass_removed_max:.3f}", f"{s.nll:.3f}", str(s.healed_bytes))
    err.print(table)


def _fail(e: Exception) -> None:
    from .errors import LocalguideError

    kind = "error" if isinstance(e, (LocalguideError, ValueError, OSError)) else f"error ({type(e).__name__})"
    message = str(e).splitlines()[0] if str(e) else type(e).__name__
    err.print(f"[red]{kind}:[/red] {message}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
