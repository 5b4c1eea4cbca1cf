"""The options that several commands share, declared once: ``name: Regex = None`` in a command's
signature (Typer reads the help, the panel and the limits from the ``Annotated`` type)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import CHAT, CONSTRAINTS, SAMPLING, SPEED

Regex = Annotated[Optional[str], typer.Option(
    "--regex", "-r", rich_help_panel=CONSTRAINTS, help="The whole output matches this regular expression (ECMA-262).")]
Choice = Annotated[Optional[list[str]], typer.Option(
    "--choice", "-c", rich_help_panel=CONSTRAINTS,
    help="The output is exactly one of these strings (repeat the option).")]
Grammar = Annotated[Optional[str], typer.Option(
    "--grammar", "-g", rich_help_panel=CONSTRAINTS,
    help="A .lark or .gbnf file, or a shipped grammar (see `localguide grammars`).")]
JsonSchema = Annotated[Optional[str], typer.Option(
    "--json-schema", "-j", rich_help_panel=CONSTRAINTS,
    help="A JSON Schema, inline JSON or a file: the output is a valid JSON document.")]
JsonAny = Annotated[bool, typer.Option("--json", rich_help_panel=CONSTRAINTS, help="The output is any JSON value.")]
Strict = Annotated[bool, typer.Option(
    "--strict", rich_help_panel=CONSTRAINTS, help="JSON Schema: objects allow only their listed properties.")]
Pretty = Annotated[bool, typer.Option(
    "--pretty", rich_help_panel=CONSTRAINTS, help="JSON: newlines and indentation instead of compact output.")]
MaxRecursion = Annotated[Optional[int], typer.Option(
    "--max-recursion", min=1, rich_help_panel=CONSTRAINTS, show_default=False,
    help="JSON Schema: expand recursive $ref N levels deep (an automaton; free values nest 3 levels) "
         "instead of exactly, to any depth (a grammar: the default).")]
MaxIgnoredRun = Annotated[Optional[int], typer.Option(
    "--max-ignored-run", min=0, rich_help_panel=CONSTRAINTS, show_default=False,
    help="Grammars: the longest run of %ignore'd text (whitespace), in bytes; 0: no limit (default 32).")]

Temperature = Annotated[float, typer.Option(help="0 is greedy.", rich_help_panel=SAMPLING)]
TopK = Annotated[int, typer.Option(rich_help_panel=SAMPLING)]
TopP = Annotated[float, typer.Option(rich_help_panel=SAMPLING)]
MinP = Annotated[float, typer.Option(rich_help_panel=SAMPLING)]

NGpuLayers = Annotated[int, typer.Option("--n-gpu-layers", help="Layers to offload to the GPU (-1: all).")]
NCtx = Annotated[int, typer.Option("--n-ctx", min=256, help="Context of each sequence, in tokens.")]
Threads = Annotated[Optional[int], typer.Option(
    "--threads", min=1, rich_help_panel=SPEED, show_default=False,
    help="Threads of one-token decodes (default: half the CPUs; `localguide info` says why).")]
ThreadsBatch = Annotated[Optional[int], typer.Option(
    "--threads-batch", min=1, rich_help_panel=SPEED, show_default=False,
    help="Threads of batches: prompts, several sequences, verified drafts (default: see `localguide info`).")]
ChatTemplateFile = Annotated[Optional[str], typer.Option(
    "--chat-template-file", rich_help_panel=CHAT, show_default=False,
    help="A Jinja chat template to use instead of the model's (its tool-call syntax comes with it).")]
Speculate = Annotated[bool, typer.Option(
    "--speculate/--no-speculate", rich_help_panel=SPEED,
    help="Drafts from the constraint, checked by the model several tokens per decode (exact: the same output "
         "distribution).")]

Chat = Annotated[bool, typer.Option(
    "--chat", rich_help_panel=CHAT, help="Use the model's chat template (the default where it has one).")]
Raw = Annotated[bool, typer.Option("--raw", rich_help_panel=CHAT, help="Plain completion of the prompt, no chat template.")]

Workers = Annotated[Optional[str], typer.Option(
    "--workers", rich_help_panel=SPEED, show_default=False,
    help="host:port,... of `localguide worker` processes whose devices take the model's layers.")]
TensorSplit = Annotated[Optional[str], typer.Option(
    "--tensor-split", rich_help_panel=SPEED, show_default=False,
    help="With --workers: the layers' proportions per device, e.g. 3,1 (default: by free memory).")]
