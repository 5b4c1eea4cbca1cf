"""``localguide batch`` for real: a JSONL file through the model (both models), every line answered
once and valid; killed (-9 or Ctrl-C) and run again, it finishes the rest, a torn last line redone."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import jsonschema
import pytest

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0}}}
NAMES = ["Alice", "Bob", "Chen", "Dana", "Eve", "Farid", "Gita", "Hugo", "Ines", "Jon", "Kemal", "Lea"]


def write_input(path, n: int = 8, extra=()):
    lines = [json.dumps({"id": f"p{i}", "prompt": f"{NAMES[i % len(NAMES)]} is {20 + i} years old. As JSON: "})
             for i in range(n)]
    path.write_text("\n".join([*lines, *extra]) + "\n")


def batch(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "localguide.cli", "batch", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def check(out, ids):
    got = lines(out)
    assert sorted(map(str, (x["id"] for x in got))) == sorted(map(str, ids)), got  # each once
    for x in got:
        if x["id"] in ("bad", "own", 9):
            continue
        assert "error" not in x, x
        jsonschema.validate(json.loads(x["text"]), SCHEMA)
        assert x["finish_reason"] == "stop" and x["usage"]["completion_tokens"] > 0
    return {x["id"]: x for x in got}


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_every_line_is_answered_once_and_valid(model_paths, tmp_path, name):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(src, 6, extra=['{"id": "own", "prompt": "The year: ", "regex": "(19|20)[0-9]{2}"}',
                               '{"id": "bad", "prompt": "x", "regex": "(open"}', "this is not json"])
    r = batch(model_paths[name], src, "-o", out, "--json-schema", json.dumps(SCHEMA), "--raw", "--parallel", "3",
              "--temperature", "0", "--max-tokens", "60")
    assert r.returncode == 0, r.stderr
    got = check(out, [f"p{i}" for i in range(6)] + ["own", "bad", 9])
    assert re.fullmatch("(19|20)[0-9]{2}", got["own"]["text"])
    assert "(open" in got["bad"]["error"]["message"]
    assert "line 9 is not JSON" in got[9]["error"]["message"]
    assert "done: 9 of 9 items" in r.stderr
    again = batch(model_paths[name], src, "-o", out, "--json-schema", json.dumps(SCHEMA), "--raw")
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert len(lines(out)) == 9


def start(src, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "localguide.cli", "batch", str(src), "-o", str(out), "--json-schema",
                             json.dumps(SCHEMA), "--raw", "--parallel", "2", "--max-tokens", "60", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_lines(proc, out, n: int, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if out.exists() and out.read_text().count("\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("no output lines in time")


def test_killed_then_run_again_finishes_every_item_once(smollm2_path, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(src, 12)
    proc = start(src, out)
    wait_for_lines(proc, out, 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = out.read_text().count("\n")
    assert written < 12, "the run ended before it was killed: the test needs more items"
    with open(out, "a") as f:  # (a line cut short, as a kill inside a write leaves it)
        f.write('{"id": "p11", "text": "{\\"na')
    r = batch(smollm2_path, src, "-o", out, "--json-schema", json.dumps(SCHEMA), "--raw", "--parallel", "2",
              "--max-tokens", "60")
    assert r.returncode == 0, r.stderr
    assert f"{written} of 12 items done before (a cut last line of" in r.stderr
    check(out, [f"p{i}" for i in range(12)])


def test_ctrl_c_finishes_the_items_in_progress_and_says_how_to_resume(smollm2_path, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(src, 12)
    proc = start(src, out)
    wait_for_lines(proc, out, 2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "run the same command again" in stderr and "finishing the items in progress" in stderr
    assert out.read_bytes().endswith(b"\n")  # (whole lines only)
    assert 2 <= len(lines(out)) < 12
    r = batch(smollm2_path, src, "-o", out, "--json-schema", json.dumps(SCHEMA), "--raw", "--max-tokens", "60")
    assert r.returncode == 0, r.stderr
    check(out, [f"p{i}" for i in range(12)])


def test_an_output_that_cannot_be_written_is_a_clear_error(smollm2_path, tmp_path):
    src = tmp_path / "in.jsonl"
    write_input(src, 2)
    r = batch(smollm2_path, src, "-o", tmp_path)  # (a folder)
    assert r.returncode == 1 and "cannot" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = batch(smollm2_path, src, "-o", src)
    assert r.returncode == 2 and "another file than the input" in r.stderr
    r = batch(smollm2_path, tmp_path / "missing.jsonl", "-o", tmp_path / "o.jsonl")
    assert r.returncode == 1 and "cannot read" in r.stderr


def test_ctrl_c_twice_stops_now(smollm2_path, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(src, 12)
    proc = start(src, out, "--max-tokens", "200")
    wait_for_lines(proc, out, 1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "run the same command again" in stderr, stderr
    assert out.read_bytes().endswith(b"\n") and len(lines(out)) < 12
