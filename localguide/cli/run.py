"""``localguide run``: one prompt, or an interactive session, generated under a constraint."""

from __future__ import annotations

import dataclasses
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..sampling import DEFAULT
from . import options as O
from .common import (CHAT, SAMPLING, SPEED, _end_line, _error_line, _fail, _out, _quality_table, _read_json,
                     _read_schema, _say, _StatusLine, app, close_status, err, load_model, placement,
                     read_template)


def _split_model_prompt(first: Optional[str], second: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """With two arguments the first is the model; alone, it is the model where it names a .gguf
    file, a file on disk or a model in a store (``localguide models``), else the prompt."""
    if second is not None:
        return first, second
    if first is not None and (first.lower().endswith(".gguf") or _is_model(first)):
        return first, None
    return None, first


def _is_model(text: str) -> bool:
    from ..errors import ModelFileError
    from ..models import NotFound, resolve

    if "\n" in text or len(text) > 1024 or not text.strip():
        return False
    try:
        resolve(text)
    except NotFound:
        return False
    except ModelFileError:  # (a file that is no model, an ambiguous name: meant as a model)
        return True
    return True


@app.command()
def run(
    first: Annotated[Optional[str], typer.Argument(metavar="[MODEL]", show_default=False,
                     help="A model: a GGUF file, an Ollama, LM Studio or Hugging Face cache name (see "
                          "`localguide models`; default: the embedded SmolLM2); or the prompt.")] = None,
    second: Annotated[Optional[str], typer.Argument(metavar="[PROMPT]", show_default=False,
                      help="The prompt; without one, an interactive session starts.")] = None,
    regex: O.Regex = None,
    choice: O.Choice = None,
    grammar: O.Grammar = None,
    json_schema: O.JsonSchema = None,
    json_any: O.JsonAny = False,
    strict: O.Strict = False,
    pretty: O.Pretty = False,
    max_recursion: O.MaxRecursion = None,
    exact_recursion: Annotated[bool, typer.Option("--exact-recursion", hidden=True)] = False,
    max_ignored_run: O.MaxIgnoredRun = None,
    max_tokens: Annotated[int, typer.Option(help="Token budget; a constrained output still completes.",
                                            rich_help_panel=SAMPLING)] = 256,
    stop: Annotated[Optional[list[str]], typer.Option(
        "--stop", rich_help_panel=SAMPLING, show_default=False,
        help="End the output before this text (repeat the option); inside constrained text only "
             "where the text is complete there.")] = None,
    temperature: O.Temperature = DEFAULT.temperature,
    top_k: O.TopK = DEFAULT.top_k,
    top_p: O.TopP = DEFAULT.top_p,
    min_p: O.MinP = DEFAULT.min_p,
    seed: Annotated[Optional[int], typer.Option(rich_help_panel=SAMPLING)] = None,
    n_gpu_layers: O.NGpuLayers = 0,
    n_ctx: Annotated[int, typer.Option(help="Context size in tokens.")] = 4096,
    threads: O.Threads = None,
    threads_batch: O.ThreadsBatch = None,
    workers: O.Workers = None,
    tensor_split: O.TensorSplit = None,
    reproducible: Annotated[bool, typer.Option(
        "--reproducible/--fastest-kernels", rich_help_panel=SPEED,
        help="llama.cpp's kernels that compute each position alike in every batch (a prompt's whole chunks "
             "of 128 on the fastest ones), so the same seed gives the same text whatever the prompt cache held "
             "and with speculation on or off; --fastest-kernels: the text may differ.")] = True,
    chat: O.Chat = False,
    raw: O.Raw = False,
    system: Annotated[Optional[str], typer.Option("--system", rich_help_panel=CHAT, show_default=False,
                                                  help="The system message.")] = None,
    tools: Annotated[Optional[Path], typer.Option("--tools", rich_help_panel=CHAT, show_default=False,
                     help="A JSON file of tools (OpenAI form); calls are printed as JSON, one line each, "
                          "arguments valid for their tool.")] = None,
    tool_choice: Annotated[str, typer.Option("--tool-choice", rich_help_panel=CHAT,
                           help="auto, required, none, or a tool's name.")] = "auto",
    parallel_tool_calls: Annotated[bool, typer.Option(
        "--parallel-tool-calls/--no-parallel-tool-calls", rich_help_panel=CHAT,
        help="Several calls in one answer (one line each), or one at most.")] = True,
    chat_template_file: O.ChatTemplateFile = None,
    after: Annotated[Optional[str], typer.Option("--after", rich_help_panel=CHAT, show_default=False,
                     help="Free text (reasoning) until this text, then the constraint, e.g. '</think>'; "
                          "the reasoning goes to stderr.")] = None,
    max_reasoning_tokens: Annotated[Optional[int], typer.Option(
        "--max-reasoning-tokens", min=0, rich_help_panel=CHAT, show_default=False,
        help="With --after: the free part's budget; then the trigger is forced.")] = None,
    opportunistic: Annotated[bool, typer.Option(
        "--opportunistic", help="Grammars: check the model's own token first, mask only on a rejection.")] = False,
    speculate: O.Speculate = True,
    fast_forward: Annotated[bool, typer.Option(
        "--fast-forward", rich_help_panel=SPEED,
        help="Take forced text (a JSON key, a bracket) as the model's own tokens without sampling it: "
             "faster, but the model may have chosen another tokenization.")] = False,
    stats: Annotated[bool, typer.Option(
        "--stats", rich_help_panel=SPEED, help="After the output, print tokens, decode calls, drafts "
                                               "accepted, tokens per second and how much the constraint "
                                               "changed the model's choices to stderr.")] = False,
    smc: Annotated[Optional[int], typer.Option(
        "--smc", min=1, max=256, rich_help_panel=SAMPLING, show_default=False,
        help="Sequential Monte Carlo with N particles: a sample of the model's own distribution over valid "
             "texts (masking over-samples a first token that leads only to unlikely text); no top-k/top-p/"
             "min-p, healing or speculation.")] = None,
    heal: Annotated[bool, typer.Option(
        "--heal/--no-heal", rich_help_panel=SAMPLING,
        help="Token healing: a prompt ending inside a word lets the model choose the word's token "
             "(the output still follows the prompt as written; never with --chat).")] = True,
) -> None:
    """Generate text for PROMPT that matches the constraint, streaming it to stdout."""
    opts = RunOptions(**locals())
    with _StatusLine():
        _run(opts)
    from ..runtime import cache
    from ..runtime.progress import stage

    with _StatusLine(), stage("saving to the cache"):  # (a large compiled grammar: a second or two)
        cache.flush()


@dataclasses.dataclass
class RunOptions:
    """``run``'s options, as given on the command line."""

    first: str | None
    second: str | None
    regex: str | None
    choice: list[str] | None
    grammar: str | None
    json_schema: str | None
    json_any: bool
    strict: bool
    pretty: bool
    exact_recursion: bool
    max_recursion: int | None
    max_ignored_run: int | None
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: int | None
    n_gpu_layers: int
    n_ctx: int
    threads: int | None
    threads_batch: int | None
    workers: str | None
    tensor_split: str | None
    reproducible: bool
    chat: bool
    raw: bool
    system: str | None
    tools: str | None
    tool_choice: str
    parallel_tool_calls: bool
    chat_template_file: str | None
    after: str | None
    max_reasoning_tokens: int | None
    stop: list[str] | None
    opportunistic: bool
    speculate: bool
    fast_forward: bool
    stats: bool
    smc: int | None
    heal: bool


# The command line's names of ``Constraint.of``'s arguments, for its messages.
_FLAGS = {"regex=": "--regex", "choice=": "--choice", "grammar=": "--grammar", "json_schema=": "--json-schema",
          "max_ignored_run=": "--max-ignored-run", "max_recursion=": "--max-recursion", "strict=": "--strict",
          "whitespace=": "--pretty"}


def _constraint(o: RunOptions):
    """The ``Constraint`` the options name (None: free text); its checks' messages in flags."""
    from ..constraint import Constraint
    from ..errors import ArgumentError

    if o.json_schema is not None and o.json_any:
        raise typer.BadParameter("give at most one of --regex, --choice, --grammar, --json-schema and --json")
    if o.exact_recursion and o.max_recursion is not None:
        raise typer.BadParameter("--exact-recursion (the default) and --max-recursion exclude each other")
    schema = _read_schema(o.json_schema) if o.json_schema is not None else (True if o.json_any else None)
    given = dict(regex=o.regex, choice=o.choice or None, grammar=o.grammar, json_schema=schema,
                 strict=o.strict, whitespace="pretty" if o.pretty else "compact", max_recursion=o.max_recursion)
    if o.max_ignored_run is not None:
        if o.grammar is None:
            raise typer.BadParameter("--max-ignored-run applies to --grammar only")
        given["max_ignored_run"] = o.max_ignored_run or None
    if o.exact_recursion and schema is None:
        raise typer.BadParameter("--exact-recursion applies to --json-schema and --json only")
    try:
        return Constraint.of(**given)
    except ArgumentError as e:
        text = str(e).replace(" and json_schema=", ", json_schema= and --json").replace(
            "json_schema= only", "json_schema= or --json only")
        for name, flag in _FLAGS.items():
            text = text.replace(name, flag)
        raise typer.BadParameter(text) from None


def _run_smc(model, prompt: str | None, constraint, o: RunOptions, chat: bool) -> None:
    if prompt is None:
        raise typer.BadParameter("--smc generates for a PROMPT (not an interactive chat)", param_hint="--smc")
    if constraint is None:
        raise typer.BadParameter("--smc needs a constraint (--regex, --choice, --grammar, --json-schema or --json)",
                                 param_hint="--smc")
    if o.tools is not None or o.after is not None or o.system is not None or o.stop:
        raise typer.BadParameter("--smc takes no --tools, --after, --system or --stop", param_hint="--smc")
    text = model.generate(prompt, constraint=constraint, max_tokens=o.max_tokens, temperature=o.temperature,
                          seed=o.seed, chat=chat, sampling="smc", particles=o.smc)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    if o.stats:
        st = model.last_stats.smc
        err.print(f"[{model.last_stats.tokens} tokens, {st.particles} particles, smallest effective sample size "
                  f"{min(st.ess):.1f}, {len(st.resampled)} resamplings, {st.distinct} distinct texts at the end, "
                  f"log marginal likelihood {st.log_marginal:.2f}, {model.last_stats.seconds:.2f} s]",
                  markup=False, highlight=False)


def _run(o: RunOptions) -> None:
    try:
        model_path, prompt = _split_model_prompt(o.first, o.second)
        constraint = _constraint(o)
        if o.chat and o.raw:
            raise typer.BadParameter("give --chat or --raw, not both")
        if o.tools is not None and constraint is not None and o.tool_choice != "none":
            raise typer.BadParameter("--tools takes no --regex, --choice, --grammar, --json-schema or --json: the "
                                     "calls' arguments follow the tools' schemas (--after may come first; "
                                     "--tool-choice none constrains the text instead)")
        template = read_template(o.chat_template_file)
        model = load_model(model_path, n_ctx=o.n_ctx, n_threads=o.threads, n_threads_batch=o.threads_batch,
                           reproducible=o.reproducible, chat_template=template,
                           **placement(o.n_gpu_layers, o.workers, o.tensor_split))
        use_chat = not o.raw and (o.chat or _has_template(model))
        if not use_chat and (o.system is not None or o.tools is not None or o.after is not None):
            raise typer.BadParameter("--system, --tools and --after need a chat template (not --raw)")
        model.compile(constraint)  # (errors before the prompt; a second compile is served from memory)
        options = dict(constraint=constraint, max_tokens=o.max_tokens, temperature=o.temperature, top_k=o.top_k,
                       top_p=o.top_p, min_p=o.min_p, seed=o.seed, opportunistic=o.opportunistic,
                       speculate=o.speculate, fast_forward=o.fast_forward, stats=o.stats, stop=o.stop or None)
        if use_chat:
            model.chat_template()  # (a template error before the prompt)
            options.update(after=o.after, max_reasoning_tokens=o.max_reasoning_tokens)
            if o.tools is not None:
                options.update(tools=_read_json(o.tools), tool_choice=_tool_choice(o.tool_choice),
                               parallel_tool_calls=o.parallel_tool_calls)
        else:
            options.update(heal=o.heal)
        if o.smc is not None:
            _run_smc(model, prompt, constraint, o, use_chat)
            return
        interactive = prompt is None and sys.stdin.isatty()
        session = _Session(model, options, o.system, use_chat, o.stats, stoppable=interactive)
        if prompt is not None:
            session.answer(prompt)
            return
        if interactive:
            try:
                import readline  # noqa: F401 - line editing and history for input()
            except ImportError:
                pass
        _say(f"{model.path.name}: type a prompt, Ctrl-C to stop an answer, Ctrl-D to leave"
             + ("; /reset, /system TEXT, /save FILE" if use_chat else ""), "dim")
        while True:
            try:
                line = input("> ") if interactive else sys.stdin.readline()
            except EOFError:
                break
            except KeyboardInterrupt:  # (at the prompt: a fresh line, as a shell does)
                if not interactive:
                    raise
                print()
                continue
            if not interactive and line == "":
                break
            line = line.rstrip("\n")
            if line.strip():
                try:
                    session.handle(line)
                except KeyboardInterrupt:  # (one that came before the answer could take it)
                    if not interactive:
                        raise
                    _end_line()
                    _say("[stopped]", "dim")
                except typer.Exit:
                    raise
                except Exception as e:  # noqa: BLE001 - one line, and the session goes on
                    _error_line("error", str(e) or type(e).__name__, problems=bool(getattr(e, "problems", None)))
        if interactive:
            print()
    except KeyboardInterrupt:
        _end_line()
        _say("interrupted")
        raise typer.Exit(130)
    except typer.BadParameter:
        raise
    except Exception as e:  # noqa: BLE001 - one clear line, no traceback
        _fail(e)


def _has_template(model) -> bool:
    from ..errors import LocalguideError

    try:
        model.chat_template()
        return True
    except LocalguideError:
        return False


def _tool_choice(text: str):
    if text in ("auto", "required", "none"):
        return text
    return {"type": "function", "function": {"name": text}}


class _Stop:
    """While an answer streams in an interactive session, Ctrl-C asks it to stop at its next token
    (``hit``) instead of ending the session (a ``KeyboardInterrupt`` raised inside llama.cpp's
    sampler callback could be lost)."""

    def __init__(self, active: bool):
        self.active, self.hit = active, False

    def __enter__(self):
        self.hit = False
        if self.active:
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.hit = True

    def __exit__(self, *exc) -> None:
        if self.active:
            signal.signal(signal.SIGINT, self._old)


class _Session:
    """One prompt, or an interactive session: in chat, the history is kept between turns;
    ``stoppable``: Ctrl-C stops an answer, and the session goes on."""

    def __init__(self, model, options: dict, system, chat: bool, stats: bool, stoppable: bool = False):
        self.model, self.options, self.chat, self.stats = model, options, chat, stats
        self.system = system
        self.messages = self._start()
        self.stop = _Stop(stoppable)

    def _start(self) -> list:
        return [{"role": "system", "content": self.system}] if self.system else []

    def handle(self, line: str) -> None:
        if self.chat and line.startswith("/"):
            cmd, _, arg = line.partition(" ")
            if cmd == "/reset":
                self.messages = self._start()
                _say("history cleared", "dim")
            elif cmd == "/system":
                self.system = arg or None
                self.messages = self._start() + [m for m in self.messages if m["role"] != "system"]
                _say("system message set", "dim")
            elif cmd == "/save":
                import json

                if not arg:
                    raise ValueError("/save needs a file name: /save FILE")
                try:
                    Path(arg).write_text(json.dumps(self.messages, ensure_ascii=False, indent=2) + "\n",
                                         encoding="utf-8")
                except OSError as e:
                    raise OSError(f"cannot write {arg}: {e.strerror}") from None
                _say(f"saved {len(self.messages)} messages to {arg}", "dim")
            else:
                _say("commands: /reset, /system TEXT, /save FILE", "dim")
            return
        self.answer(line)

    def answer(self, prompt: str) -> None:
        with self.stop:
            if not self.chat:
                pieces = self.model.stream(prompt, **self.options)
                for piece in pieces:
                    _out(piece)
                    if self.stop.hit:
                        pieces.close()
                        break
                _out("\n")
            else:
                self.messages.append({"role": "user", "content": prompt})
                message = self._chat()
                if message is not None:
                    self.messages.append(message)
        last = self.model.last_stats
        if self.stop.hit:
            _say("[stopped]" + (" (the turn is not kept)" if self.chat else ""), "dim")
        elif last is not None and last.finish_reason == "length":
            _say(f"[max tokens: {last.tokens}]", "dim")
        if self.stats and last is not None:
            print(f"localguide: {self.model.last_stats}", file=sys.stderr, flush=True)
            _quality_table(self.model.last_stats)

    def _chat(self) -> dict:
        import json

        from ..chat.conversation import ChatMessage

        content, reasoning, calls = [], [], []
        try:
            stream = self.model.chat_stream(self.messages, **self.options)
            for d in stream:
                if d.reasoning:
                    close_status()
                    reasoning.append(d.reasoning)
                    err.print(d.reasoning, end="", style="dim", markup=False, highlight=False)
                if d.content:
                    if reasoning and not content:
                        err.print()
                    content.append(d.content)
                    _out(d.content)
                for c in d.tool_calls:  # (one line a call)
                    _out(("\n" if content or calls else "") + json.dumps(
                        {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])},
                        ensure_ascii=False))
                    calls.append(c)
                if self.stop.hit:
                    stream.close()
                    break
        except BaseException:
            self.messages.pop()  # (the turn did not happen)
            raise
        _out("\n")
        if self.stop.hit:
            self.messages.pop()
            return None
        return ChatMessage(content="".join(content) or None, tool_calls=calls or None).to_dict()
