"""The ``localguide`` command: guided generation from the terminal, one module per command.

Commands only parse arguments and delegate to the Python API; every error is one
line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys

import typer

# (each registers its command, in the order --help lists them)
from . import run, batch, inspect, info, serve, worker, models, cache, grammars  # noqa: F401, I001
from .common import _end_line, _error_line, _say, app, readable_help

def main() -> None:
    import shutil

    readable_help(shutil.get_terminal_size().columns)
    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")  # (click's, as typer has it)
    try:
        code = app(standalone_mode=False)
    except usage_error as e:  # (one line, as every error: not click's box)
        message = e.format_message()
        if message.strip() and type(e).__name__ != "NoArgsIsHelpError":  # (else the help is shown already)
            sub = f" {e.ctx.info_name}" if e.ctx is not None and e.ctx.parent is not None else ""
            _error_line("error", f"{message} (try 'localguide{sub} --help')")
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        _end_line()
        _say("interrupted")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
