"""The README's Python snippets run as written, in order, on the default model, as a reader would
paste them into one session; a line ending in ``# -> VALUE`` shows what it prints: the value's
``repr`` is checked against it (text after two spaces and a parenthesis is a remark). The server
snippet runs against a real ``localguide serve``."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def expected(line: str) -> str | None:
    """The ``VALUE`` of a ``# -> VALUE`` comment, its remark in parentheses left out."""
    m = re.search(r"#\s*->\s*(.+)$", line)
    if m is None:
        return None
    return re.sub(r"\s+\([^()]*\)$", "", m.group(1).strip())


def run_snippet(source: str, namespace: dict) -> list[tuple[str, str]]:
    """Run ``source`` statement by statement; returns (wanted, got) for each ``# ->`` comment."""
    lines = source.splitlines()
    checks = []
    for stmt in ast.parse(source).body:
        want = expected(lines[stmt.end_lineno - 1])
        if want is not None and isinstance(stmt, ast.Expr):
            value = eval(compile(ast.Expression(stmt.value), "README.md", "eval"), namespace)
            checks.append((want, repr(value)))
        else:
            exec(compile(ast.Module([stmt], type_ignores=[]), "README.md", "exec"), namespace)
    return checks


def test_the_readme_has_its_snippets():
    blocks = snippets()
    assert len(blocks) >= 4 and sum(expected(line) is not None for b in blocks for line in b.splitlines()) >= 8


def test_the_python_api_snippets_run_and_print_what_they_say(cache_dir):
    namespace: dict = {"__name__": "readme"}
    out = io.StringIO()
    mismatched = []
    with contextlib.redirect_stdout(out):
        for block in snippets():
            if "OpenAI(" in block:
                continue
            mismatched += [(w, g) for w, g in run_snippet(block, namespace) if w != g]
    assert mismatched == []
    printed = out.getvalue()
    assert "2022-01-01" in printed
    rows = [line for line in printed.splitlines() if re.match(r"(a|b|2) name='", line)]
    assert len(rows) == 3 and all(re.search(r"age=\d{1,3}$", line) for line in rows), printed


def test_the_server_snippet_runs_against_a_real_server(smollm2_path):
    sys.path.insert(0, str(ROOT / "tests" / "server"))
    from test_server import Served

    (block,) = [b for b in snippets() if "OpenAI(" in b]
    s = Served(smollm2_path)
    try:
        namespace: dict = {"__name__": "readme"}
        run_snippet(block.replace("http://127.0.0.1:8080", s.url), namespace)
        assert re.fullmatch(r"(19|20)\d{2}", namespace["r"].choices[0].message.content)
    finally:
        s.close()
