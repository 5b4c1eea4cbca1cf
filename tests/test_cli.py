"""The command line, run for real on the default model (Typer's CliRunner, same process)."""

import json
import re

import pytest
from typer.testing import CliRunner

from localguide.cli import app

runner = CliRunner()


def run(*args, input=None):
    return runner.invoke(app, list(args), input=input)


def said(stderr: str) -> list[str]:
    """stderr's lines less the status line's progress ("localguide: building the index..."): in this
    process, a stage another test left running in the background (a lazy index build) is shown too."""
    return [line for line in stderr.strip().splitlines()
            if not (line.startswith("localguide: ") and line.endswith("..."))]


def test_regex_output_matches(smollm2):
    r = run("run", "--regex", r"(19|20)\d{2}", "--seed", "1", "Alan Turing was born in")
    assert r.exit_code == 0, r.output
    assert re.fullmatch(r"(19|20)\d{2}", r.stdout.strip())


def test_model_path_first_then_prompt(smollm2):
    r = run("run", str(smollm2.path), "Is the sky blue?", "--choice", "yes", "--choice", "no")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() in ("yes", "no")


def test_interactive_session_reads_until_end_of_input(smollm2):
    r = run("run", "--regex", r"\d{2}", "--seed", "3", input="First:\nSecond:\n")
    assert r.exit_code == 0, r.output
    answers = [line for line in r.stdout.splitlines() if re.fullmatch(r"\d{2}", line)]
    assert len(answers) == 2


def test_json_schema_file(smollm2, tmp_path):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    r = run("run", "--json-schema", str(path), "--seed", "0", "A number:")
    assert r.exit_code == 0, r.output
    assert 1 <= json.loads(r.stdout)["n"] <= 9


def test_exact_recursion_by_default(smollm2, tmp_path):
    schema = {"$defs": {"n": {"type": "object", "additionalProperties": False, "required": ["v"], "properties": {
        "v": {"enum": [1, 2]}, "k": {"type": "array", "maxItems": 1, "items": {"$ref": "#/$defs/n"}}}}},
        "$ref": "#/$defs/n"}
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(schema))
    for extra in ([], ["--exact-recursion"], ["--max-recursion", "2"]):  # exact (the default), or bounded
        r = run("run", "--json-schema", str(path), *extra, "--seed", "0", "A tree:")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["v"] in (1, 2)
    exact, bounded = run("inspect", "-j", str(path)), run("inspect", "-j", str(path), "--max-recursion", "2")
    assert "approximated" in bounded.stdout and "approximated" not in exact.stdout
    assert "approximated" in run("inspect", "-j", str(path), "--pretty").stdout  # (pretty: bounded)
    assert "--max-recursion applies" in run("run", "--regex", "a", "--max-recursion", "2", "x").stderr
    r = run("run", "--json-schema", str(path), "--exact-recursion", "--max-recursion", "2", "x")
    assert r.exit_code == 2 and "exclude" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["run", "missing.gguf", "hi"], "model file not found"),
    (["run", "--regex", "a(?<=b)", "hi"], "lookbehind is not supported at position 1"),
    (["run", "--grammar", "no-such-grammar", "hi"], "no-such-grammar"),
])
def test_errors_are_one_line_without_traceback(args, message):
    r = run(*args)
    assert r.exit_code == 1
    assert message in r.stderr
    assert "Traceback" not in r.output and len(said(r.stderr)) == 1


def test_grammars_lists_the_shipped_ones():
    r = run("grammars")
    assert r.exit_code == 0
    for name in ("json", "arithmetic", "sql", "c", "csv", "yaml"):
        assert re.search(rf"^\s*{name}\s", r.stdout, re.M)


def test_inspect_reports_each_keyword(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"type": "object", "properties": {"s": {"type": "string", "maxLength": 30},
                                                                 "e": {"type": "string", "format": "email"}}}))
    r = run("inspect", "--json-schema", str(path))
    assert r.exit_code == 0, r.output
    assert re.search(r"#/properties/s/maxLength\s+maxLength\s+enforced", r.stdout)
    assert re.search(r"#/properties/e/format\s+format\s+(enforced|approximated)", r.stdout)


def test_grammar_with_max_ignored_run(smollm2):
    r = run("run", "--grammar", "json", "--max-ignored-run", "2", "--max-tokens", "24", "--seed", "2",
            "--temperature", "0", "A JSON list of numbers:")
    assert r.exit_code == 0, r.output
    out = r.stdout.rstrip("\n")
    tight = smollm2.compile(grammar="json", max_ignored_run=2)
    assert tight.matches(out) or tight.is_prefix(out)
    r = run("run", "--regex", r"\d", "--max-ignored-run", "2", "hi")
    assert r.exit_code == 2 and "applies to --grammar only" in r.output


def test_n_gpu_layers_is_accepted_on_any_build(smollm2):
    """All layers offloaded where the build has a GPU; on a CPU build llama.cpp runs them on the CPU."""
    r = run("run", "--regex", r"\d{2}", "--n-gpu-layers", "-1", "--seed", "1", "Two digits:")
    assert r.exit_code == 0, r.output
    assert re.fullmatch(r"\d{2}", r.stdout.strip())


def test_info_reports_versions_backend_model_and_caches(tmp_path):
    """``localguide info``: every row, paths whole however narrow the terminal, the kernel count
    true to the disk cache (none compiled under an empty cache directory)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    import llama_cpp

    import localguide
    from localguide.cli.info import kernels

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, LOCALGUIDE_CACHE_DIR=str(tmp_path), COLUMNS="40")
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("_LOCALGUIDE_KERNELS_DIR", None)  # (where a user's process keeps them)
    out = subprocess.run([sys.executable, str(root / "cli.py"), "info"], capture_output=True, text=True, env=env,
                         check=True).stdout
    rows = dict(re.fullmatch(r"(.*?) {2,}(.*)", line).groups() for line in out.splitlines())
    assert rows["localguide"] == localguide.__version__
    assert rows["llama-cpp-python"] == llama_cpp.__version__
    assert rows["llama.cpp backend"].startswith("CPU")
    from localguide.engines.llamacpp import rpc

    assert rows["GPU offload"].startswith("available" if rpc.offload_devices() else "not available")
    assert rows["default model"] == str(localguide.default_model_path())
    assert rows["cache"].startswith(f"{tmp_path} (")
    assert rows["compiled kernels"].startswith(f"{tmp_path / 'numba'}{os.sep}")
    done, total = kernels()  # this process: the test session has compiled some
    assert 0 < done <= total
    assert rows["kernels compiled for this CPU"].startswith(f"0 of {total}:")
    cpus = len(os.sched_getaffinity(0))
    assert rows["threads"].startswith(f"{max(1, cpus // 2)} per token, {cpus} per batch (")
    assert rows["workers wait"].startswith("passively: OMP_WAIT_POLICY=PASSIVE, set by localguide")
    assert rows["reproducible logits"].startswith("yes, for layers on the CPU")  # (the llama.cpp this suite runs)


def test_threads_options_reach_llama_cpp(smollm2, monkeypatch):
    import llama_cpp

    seen = []
    real = llama_cpp.Llama.__init__

    def init(self, *args, **kwargs):
        seen.append((kwargs.get("n_threads"), kwargs.get("n_threads_batch")))
        real(self, *args, **kwargs)

    monkeypatch.setattr(llama_cpp.Llama, "__init__", init)
    r = run("run", "--regex", "[0-9]{2}", "--threads", "1", "--threads-batch", "2", "--seed", "1", "Two digits:")
    assert r.exit_code == 0, r.output
    assert seen == [(1, 2)] and re.fullmatch(r"[0-9]{2}\n?", r.stdout)
    r = run("run", "--regex", "[0-9]{2}", "--threads", "0", "Two digits:")
    assert r.exit_code != 0 and "--threads" in r.output


def test_reproducible_kernels_by_default_and_the_fastest_on_request(smollm2, monkeypatch):
    import localguide

    seen = []
    real = localguide.load

    def load(*args, **kwargs):
        model = real(*args, **kwargs)
        seen.append(model.reproducible)
        return model

    monkeypatch.setattr(localguide, "load", load)
    for flags, want in (([], True), (["--fastest-kernels"], False)):
        r = run("run", "--regex", "[0-9]{2}", *flags, "--seed", "1", "Two digits:")
        assert r.exit_code == 0, r.output
        assert re.fullmatch(r"[0-9]{2}\n?", r.stdout)
        assert seen.pop() is want


@pytest.mark.parametrize("flags", [[], ["--no-speculate"], ["--fast-forward"]])
def test_speculation_flags_and_stats(smollm2, tmp_path, flags):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
              "required": ["city", "zip"], "additionalProperties": False}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    r = run("run", "--json-schema", str(path), "--seed", "2", "--stats", *flags, "An address:")
    assert r.exit_code == 0, r.output
    value = json.loads(r.stdout)
    assert set(value) == {"city", "zip"} and re.fullmatch(r"[0-9]{5}", value["zip"])
    stats = re.search(r"localguide: (\d+) tokens in .* (\d+) decode calls .* drafts (\d+)/(\d+) accepted", r.stderr)
    assert stats, r.stderr
    tokens, decodes, accepted, drafted = map(int, stats.groups())
    assert 0 < decodes <= tokens and accepted <= drafted
    if flags == ["--no-speculate"]:
        assert drafted == 0
    if flags == ["--fast-forward"]:
        assert "fast-forwarded" in r.stderr


# --- chat ------------------------------------------------------------------------------

def test_version():
    from localguide import __version__

    r = run("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"localguide {__version__}"


def test_chat_is_the_default_and_raw_is_plain_completion(smollm2):
    r = run("run", "--choice", "yes", "--choice", "no", "--seed", "1", "--system", "Answer yes or no.",
            "Is water wet?")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() in ("yes", "no")
    r = run("run", "--raw", "--regex", r"[0-9]{2}", "--seed", "1", "--min-p", "0.1", "--n-ctx", "1024",
            "Twelve is written")
    assert r.exit_code == 0, r.output
    assert re.fullmatch(r"[0-9]{2}", r.stdout.strip())
    r = run("run", "--raw", "--system", "x", "hi")
    assert r.exit_code != 0 and "--system" in r.output


def test_inline_json_schema(smollm2):
    r = run("run", "-j", '{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}',
            "--seed", "4", "Is it fine? Answer in JSON.")
    assert r.exit_code == 0, r.output
    assert isinstance(json.loads(r.stdout)["ok"], bool)
    r = run("run", "-j", '{"type": ', "hi")
    assert r.exit_code == 1 and "inline JSON" in r.stderr


def test_tools_print_calls_as_json(smollm2, tmp_path):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools))
    for seed in range(3):  # (one line a call)
        r = run("run", "--tools", str(path), "--tool-choice", "required", "--seed", str(seed), "What is 2 plus 3?")
        assert r.exit_code == 0, r.output
        for line in r.stdout.strip().splitlines():
            call = json.loads(line)
            assert call["name"] == "add" and isinstance(call["arguments"]["a"], int)
    r = run("run", "--tools", str(path), "--tool-choice", "required", "--no-parallel-tool-calls", "--seed", "2",
            "What is 2 plus 3?")
    assert r.exit_code == 0, r.output
    assert len(r.stdout.strip().splitlines()) == 1


def test_after_sends_reasoning_to_stderr(smollm2):
    r = run("run", "--after", "</think>", "--max-reasoning-tokens", "8", "--choice", "yes", "--choice", "no",
            "--seed", "3", "Is 9 odd? Think, then answer.")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() in ("yes", "no")


def test_interactive_chat_through_a_terminal(smollm2, tmp_path):
    """Driven through a pseudo-terminal: two turns keep the history, /save writes it, /reset
    clears it, Ctrl-D leaves."""
    import os
    import sys

    import pexpect

    env = dict(os.environ, COLUMNS="200")
    child = pexpect.spawn(sys.executable, ["-m", "localguide.cli", "run", "--regex", "[A-Z][a-z]{2,8}",
                                           "--seed", "1", "--max-tokens", "8"],
                          env=env, encoding="utf-8", timeout=180)
    try:
        child.expect("Ctrl-D to leave")
        child.expect("> ")
        child.sendline("Name a colour.")
        child.expect(r"[A-Z][a-z]{2,8}\r\n")
        child.expect("> ")
        child.sendline("Another one.")
        child.expect(r"[A-Z][a-z]{2,8}\r\n")
        child.expect("> ")
        saved = tmp_path / "chat.json"
        child.sendline(f"/save {saved}")
        child.expect("saved 4 messages")
        child.expect("> ")
        child.sendline("/reset")
        child.expect("history cleared")
        child.expect("> ")
        child.sendline(f"/save {saved}")
        child.expect("saved 0 messages")
        child.expect("> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    history = json.loads(saved.read_text())
    assert history == []


# -- messages as typed (issue: reliability) ----------------------------------------------------------

def _cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "localguide.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_error_messages_keep_the_users_text(tmp_path):
    r = run("run", "--regex", "[a-z]+(?<=a)", "x")
    assert r.exit_code == 1 and "in pattern '[a-z]+(?<=a)'" in r.stderr
    r = run("run", "--regex", r"a\d(", "x")
    assert r"in pattern 'a\d('" in r.stderr and r"\\d" not in r.stderr
    schema = {"type": "object", "properties": {"a": {"$dynamicRef": "#x"}, "b": {"$dynamicRef": "#y"}}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    r = run("run", "hi", "--json-schema", str(path))
    lines = said(r.stderr)
    assert lines[0].startswith("error: the schema uses 2 constructs localguide does not support")
    assert "#/properties/a/$dynamicRef" in lines[1] and "#/properties/b/$dynamicRef" in lines[2]
    r = run("run", "hi", "--json-schema", '{"type": "objekt"}')
    assert said(r.stderr) == ["error: the schema is invalid at #/type: invalid value \"objekt\" (unknown type 'objekt')"]
    path.write_bytes(b'\xff\xfe{"type": "object"}')
    r = run("run", "hi", "--json-schema", str(path))
    assert r.exit_code == 1 and str(path) in r.stderr and "not UTF-8" in r.stderr


def test_usage_errors_are_one_line_from_the_command():
    r = _cli("run", "--regex", "a", "--choice", "b", "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("error: ") and "give at most one of --regex" in r.stderr and "╭" not in r.stderr
    r = _cli("run", "--no-such-option")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: No such option: --no-such-option (try 'localguide run --help')"]


def test_inspect_names_a_default_it_approximates_as_such(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}))
    out = run("inspect", "--json-schema", str(path), "--max-recursion", "2").stdout  # (bounded free values)
    assert "#/additionalProperties" not in out and "additionalProperties (not given: its default)" in out


def test_interrupted_starts_a_line_of_its_own(smollm2):
    import os
    import signal
    import sys

    import pexpect

    env = {k: v for k, v in os.environ.items() if k != "LOCALGUIDE_COMPILE"}
    child = pexpect.spawn(sys.executable, ["-m", "localguide.cli", "run", "--raw", "--max-tokens", "400",
                                           "--regex", r" 4, 5, 6(, [0-9]{1,3}){1,300}", "Count: 1, 2, 3,"],
                          env=dict(env, COLUMNS="200"), encoding="utf-8", timeout=120,
                          # (a suite started in the background ignores SIGINT, and so would the CLI)
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        child.expect("4, 5, 6")  # (the output has begun)
        child.kill(signal.SIGINT)
        child.expect(pexpect.EOF)
        rest = child.before.replace("\r", "")
        assert "\ninterrupted" in rest, rest
    finally:
        child.close()
    assert child.exitstatus == 130


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_stop_strings_never_cut_constrained_output(name, model_paths):
    path = str(model_paths[name])
    r = run("run", path, "--raw", "--regex", r" \d{4}-\d{2}-\d{2}", "--stop", "-", "--stop", "1", "--seed", "0",
            "--temperature", "1", "Einstein was born on (YYYY-MM-DD)")
    assert r.exit_code == 0, r.output
    assert re.fullmatch(r" \d{4}-\d{2}-\d{2}", r.stdout.rstrip("\n")), r.stdout
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "city": {"type": "string", "maxLength": 20}},
              "required": ["name", "city"], "additionalProperties": False}
    r = run("run", path, "--json-schema", json.dumps(schema), "--stop", ",", "--stop", ".", "--seed", "1",
            "--temperature", "1", "A person:")
    assert r.exit_code == 0, r.output
    assert set(json.loads(r.stdout)) == {"name", "city"}
    r = run("run", path, "--raw", "--stop", ",", "--temperature", "0", "--max-tokens", "16", "One, two, three,")
    assert r.exit_code == 0 and "," not in r.stdout, r.output


@pytest.mark.parametrize("chat", [False, True])
def test_ctrl_c_stops_an_answer_and_the_session_goes_on(chat):
    import os
    import signal
    import sys

    import pexpect

    env = {k: v for k, v in os.environ.items() if k != "LOCALGUIDE_COMPILE"}
    child = pexpect.spawn(sys.executable, ["-m", "localguide.cli", "run", "--chat" if chat else "--raw",
                                           "--max-tokens", "600", "--regex", r"[0-9]{1,3}(, [0-9]{1,3}){1,500}"],
                          env=dict(env, COLUMNS="200"), encoding="utf-8", timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        child.expect("Ctrl-D to leave")
        child.expect("> ")
        child.sendline("Count to a thousand.")
        child.expect("[0-9]+, [0-9]+, [0-9]+")  # (the answer streams; the prompt echoed has no digits)
        child.sendintr()
        child.expect(r"\[stopped\]")
        child.expect("> ")
        child.sendintr()  # (at the prompt: a fresh line)
        child.expect("> ")
        child.sendline("Count again.")  # (the session goes on)
        child.expect("[0-9]+, [0-9]+, [0-9]+")
        child.sendintr()
        child.expect(r"\[stopped\]")
        child.expect("> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_a_cut_answer_says_so():
    r = run("run", "--raw", "--max-tokens", "5", "--temperature", "0", "Once upon a time")
    assert r.exit_code == 0 and "[max tokens: 5]" in r.stderr
    r = run("run", "--regex", "(yes|no)", "--max-tokens", "5", "Is the sky blue?")
    assert r.exit_code == 0 and "max tokens" not in r.stderr


def test_gpu_layers_on_a_cpu_build_warn_with_the_install_line():
    from localguide.engines.llamacpp import rpc

    if rpc.offload_devices():
        pytest.skip("llama.cpp finds a GPU here")
    r = run("run", "--n-gpu-layers", "-1", "--regex", "(yes|no)", "Is the sky blue?")
    assert r.exit_code == 0 and r.stdout.strip() in ("yes", "no")
    assert "warning: n_gpu_layers=-1" in r.stderr and "GGML_CUDA=on" in r.stderr


@pytest.mark.parametrize("columns", [80, 120])
def test_help_is_readable_at_the_terminals_width(columns):
    import os
    import subprocess
    import sys

    import typing

    from localguide.cli.run import run as run_command

    env = dict(os.environ, COLUMNS=str(columns))
    r = subprocess.run([sys.executable, "-m", "localguide.cli", "run", "--help"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0
    assert "…" not in r.stdout and "<bool>" not in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= columns
    names = []
    for param, hint in typing.get_type_hints(run_command, include_extras=True).items():
        for meta in getattr(hint, "__metadata__", ()):
            if type(meta).__name__ != "OptionInfo":
                continue
            decls = [d for d in (meta.default, *(meta.param_decls or ())) if isinstance(d, str) and d.startswith("--")]
            names += decls or ["--" + param.replace("_", "-")]
    assert len(names) > 30
    flat = r.stdout.replace("\n", " ")
    for decl in names:
        for name in decl.split("/"):
            if name != "--exact-recursion":  # (hidden)
                assert name in flat, name


def test_smc_samples_a_valid_text_with_its_particles_and_says_what_it_needs():
    r = run("run", "--raw", "--smc", "4", "--choice", " no", "--choice", " yes!", "--seed", "1", "--temperature",
            "1", "--stats", "The answer is")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() in ("no", "yes!") and "4 particles" in r.stderr and "log marginal likelihood" in r.stderr
    r = run("run", "--raw", "--smc", "4", "The answer is")
    assert r.exit_code != 0 and "--smc needs a constraint" in r.stderr
    r = run("run", "--raw", "--smc", "0", "--choice", "a", "x")
    assert r.exit_code != 0 and "--smc" in r.stderr
