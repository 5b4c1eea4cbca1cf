"""The command line's shared parts: the Typer app, its option panels, stderr's status line and one-line errors, reading JSON files."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console


app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Structured generation for local LLMs: text guaranteed to match a constraint.")


RICH_HELP_COLUMNS = 100  # (narrower, Typer's panels cut the options' names short: click's plain help)


def readable_help(columns: int) -> None:
    """Help readable at ``columns``: Typer's panels where they fit, else click's plain layout; a flag
    shows no type either way (``--stats <bool>`` says nothing and takes a column)."""
    if columns < RICH_HELP_COLUMNS:
        app.rich_markup_mode = None
        for group in app.registered_groups:
            if group.typer_instance is not None:
                group.typer_instance.rich_markup_mode = None
    try:
        from typer.core import TyperOption
    except ImportError:
        return
    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is not None and not getattr(shown, "_flags_bare", False):
        def display_type_rich(self, ctx):
            return None if getattr(self, "is_flag", False) else shown(self, ctx)

        display_type_rich._flags_bare = True
        TyperOption.display_type_rich = display_type_rich


err = Console(stderr=True)


CONSTRAINTS = "Constraint (at most one)"


SAMPLING = "Sampling"


SPEED = "Speed"


CHAT = "Chat"


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"localguide {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """Structured generation for local LLMs (GGUF models through llama.cpp)."""


_OPEN = None  # the status line on screen, closed when the output begins


class _StatusLine:
    """While it is open, whatever localguide has been doing for over half a second is shown on stderr
    (``localguide.runtime.progress``): a spinner on a terminal, else one line per stage."""

    def __enter__(self):
        global _OPEN
        self._stop = threading.Event()
        self._console, self._own = err, None
        if _is_fd2(sys.stderr):
            # Loading a model points fd 2 at /dev/null for a while (``quiet_llama``, against
            # llama.cpp's own lines): the status line, "loading the model..." first, writes on
            # where fd 2 pointed outside it.
            from ..engines.llamacpp.quiet import stderr_fd

            fd = stderr_fd()
            if fd is not None:
                self._own = open(fd, "w", buffering=1, encoding=sys.stderr.encoding, errors="replace")
                self._console = Console(file=self._own)
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
        if self._own is not None and not self._thread.is_alive():
            self._own.close()
            self._own = None

    def _loop(self) -> None:
        from ..runtime.progress import current

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
            if not self._console.is_terminal:
                if what is not None and what not in printed:
                    printed.add(what)
                    print(f"localguide: {what}...", file=self._console.file, flush=True)
            elif what is None:
                status.stop()
                status = None
            elif status is None:
                status = self._console.status(what + "...", spinner="dots")
                status.start()
            else:
                status.update(what + "...")
            shown = what
        if status is not None:
            status.stop()


def _is_fd2(stream) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # (a test's or an app's stream in its place)
        return False


def close_status() -> None:
    """Take the status line down (the output begins)."""
    if _OPEN is not None:
        _OPEN.close()


_LAST = "\n"  # the last character written to stdout


def _out(text: str) -> None:
    global _LAST
    close_status()
    sys.stdout.write(text)
    sys.stdout.flush()
    if text:
        _LAST = text[-1]


def _end_line() -> None:
    """End the output's line (and take the status line down), so that what stderr says next starts
    a line of its own."""
    close_status()
    if _LAST != "\n":
        _out("\n")


def _say(text: str, style: str | None = None) -> None:
    """One line on stderr, exactly as written (no markup: brackets in a pattern or a path stay)."""
    err.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def _error_line(kind: str, message: str, problems: bool = False) -> None:
    """``kind: message`` on stderr, exactly as written: its first line, or every line where each is a
    problem of its own (an unsupported schema's JSON pointers); a pattern's caret display is not."""
    from rich.text import Text

    _end_line()
    message = message if problems else message.splitlines()[0] if message else message
    err.print(Text.assemble((f"{kind}:", "red"), " ", message), highlight=False, soft_wrap=True)


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
    from ..errors import LocalguideError

    kind = "error" if isinstance(e, (LocalguideError, ValueError, OSError)) else f"error ({type(e).__name__})"
    _error_line(kind, str(e) or type(e).__name__, problems=bool(getattr(e, "problems", None)))
    raise typer.Exit(1)


def _read_schema(text):
    """A schema given inline (JSON text) or as a file."""
    import json

    if isinstance(text, str) and text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"--json-schema, inline JSON, column {e.colno}: not valid JSON ({e.msg})") from None
    return _read_json(Path(text))


def _read_json(path: Path):
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise OSError(f"cannot read the file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r}); JSON files "
                         "are UTF-8") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None


def read_template(path: str | None) -> str | None:
    """The text of ``--chat-template-file`` (None: none given), compiled once to name its errors."""
    from ..chat.template import ChatTemplate

    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"--chat-template-file: cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"--chat-template-file: {path} is not UTF-8 text (byte {e.start})") from None
    ChatTemplate(text, name=path)
    return text


def load_model(path, **kwargs):
    """``localguide.load`` with its warnings (GPU layers asked of a CPU build) as lines on stderr."""
    import warnings

    import localguide

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        model = localguide.load(path, **kwargs)
    for w in caught:
        if issubclass(w.category, RuntimeWarning):
            close_status()
            _error_line("warning", str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return model


def placement(n_gpu_layers: int, workers: str | None, tensor_split: str | None) -> dict:
    """``load``'s arguments for ``--n-gpu-layers``, ``--workers`` and ``--tensor-split`` (checked: a
    usage error naming the option); with workers, every layer goes to them unless told."""
    out: dict = {"n_gpu_layers": -1 if workers and n_gpu_layers == 0 else n_gpu_layers}
    if workers:
        from ..engines.llamacpp.rpc import parse_endpoint

        names = [w.strip() for w in workers.split(",") if w.strip()]
        for w in names:
            try:
                parse_endpoint(w)
            except ValueError as e:
                raise typer.BadParameter(str(e), param_hint="--workers") from None
        out["workers"] = names
    if tensor_split:
        if not workers:
            raise typer.BadParameter("--tensor-split needs --workers", param_hint="--tensor-split")
        try:
            split = [float(x) for x in tensor_split.split(",")]
        except ValueError:
            split = []
        if not split or any(x < 0 for x in split) or not any(split):
            raise typer.BadParameter(f"expected proportions such as 3,1, got {tensor_split!r}",
                                     param_hint="--tensor-split")
        out["tensor_split"] = split
    return out
