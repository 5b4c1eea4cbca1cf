"""Progress that tells the truth: slow steps are named stages, logged (never printed) by the library and
shown by the CLI on stderr while they run; numba compiling a kernel is reported, loading one is not."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import localguide
from localguide.runtime import progress

ROOT = Path(__file__).resolve().parents[1]


def test_stages_nest_and_are_seen_from_other_threads():
    # current() sees every thread's stages: let a build an earlier test left in the background end
    for t in threading.enumerate():
        if t.name.startswith("localguide-") and not t.daemon:
            t.join(timeout=120)
    seen = []
    with progress.stage("outer"):
        with progress.stage("inner"):
            t = threading.Thread(target=lambda: seen.append(progress.current()))
            t.start()
            t.join()
        assert progress.current()[0] == "outer"
    assert seen[0][0] == "inner" and seen[0][1] >= 0
    assert progress.current() is None


def test_the_library_logs_its_stages_and_prints_nothing(tmp_path, monkeypatch, caplog, capsys, smollm2_path):
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    with caplog.at_level(logging.DEBUG, logger="localguide"):
        v = localguide.Vocabulary.from_gguf(smollm2_path)
        localguide.compile_regex(r"[a-f]{3}\d", v)
    messages = [r.getMessage() for r in caplog.records if r.name == "localguide"]
    assert f"reading the vocabulary of {smollm2_path.name}" in messages
    assert "building the index" in messages
    assert any(m.startswith("building the index: done in ") for m in messages)
    out, err = capsys.readouterr()
    assert out == "" and "building the index" not in err and "reading the vocabulary" not in err


def test_a_cold_kernel_compile_is_reported_and_a_cached_load_is_not(tmp_path):
    """In a fresh process with an empty kernel cache, the CLI names the compile on stderr (one line
    per stage when stderr is not a terminal); the second run loads the kernels and names nothing."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), LOCALGUIDE_CACHE_DIR=str(tmp_path / "lg"))
    cmd = [sys.executable, str(ROOT / "cli.py"), "run", "Year:", "--regex", r"(19|20)\d\d", "--max-tokens", "4",
           "--temperature", "0"]
    t0 = time.perf_counter()
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    cold = time.perf_counter() - t0
    assert first.returncode == 0, first.stderr
    assert f"localguide: {progress.COMPILING}..." in first.stderr.splitlines(), (cold, first.stderr)
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert second.returncode == 0 and second.stdout == first.stdout
    assert progress.COMPILING not in second.stderr


def test_a_slow_model_load_is_shown_though_llama_cpp_is_silenced(tmp_path):
    """Loading a model points fd 2 at /dev/null (llama.cpp's own lines); the status line still names
    the load, and nothing of llama.cpp's gets through. Here the load is made a second slower."""
    script = tmp_path / "slow_load.py"
    script.write_text(
        "import sys, time, llama_cpp\n"
        "load = llama_cpp.Llama.__init__\n"
        "def slow(self, *a, **k):\n"
        "    time.sleep(1.2)\n"
        "    load(self, *a, **k)\n"
        "llama_cpp.Llama.__init__ = slow\n"
        "from localguide.cli import main\n"
        "sys.argv = ['localguide', 'run', 'Year:', '--regex', '(19|20)[0-9]{2}', '--max-tokens', '4']\n"
        "main()\n")
    env = dict(os.environ, LOCALGUIDE_CACHE_DIR=str(tmp_path / "lg"))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    name = Path(localguide.default_model_path()).name
    assert f"localguide: loading {name}..." in r.stderr.splitlines(), r.stderr
    assert "llama" not in r.stderr.replace(f"loading {name}", ""), r.stderr
