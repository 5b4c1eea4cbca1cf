"""A grammar's first use, before its kernels are compiled: the scanner's twin, numpy trees and
the Python mask walks give the kernels' masks; a process that has no kernels compiles none and
starts one background warm-up that compiles them all (in two processes, a part each); once it
is done, the next mask comes from the compiled path and a fresh process compiles nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import tokenize
from test_grammar_formats import SAMPLES

from localguide.runtime import numba_tools
from localguide.engines.llamacpp import rehearsal
from localguide.grammar import sources
from localguide.runtime import warmup
from localguide.grammar.cfg import normalize
from localguide.grammar.compiled import GrammarIndex

ROOT = Path(__file__).resolve().parents[2]


def fresh(name, vocab) -> GrammarIndex:
    text, kind, desc = sources.resolve(name)
    return GrammarIndex(normalize(sources.to_cfg(text, kind, desc), 64), vocab, desc, lazy=True)


@pytest.fixture
def cold(monkeypatch):
    """This process as one whose grammar kernels are not compiled (and starts no warm-up);
    ``cold.warm()`` makes them ready, as the warm-up's marker would."""
    state = {"ready": False}
    monkeypatch.setattr(numba_tools, "_KERNELS_ONLY", False)
    monkeypatch.setattr(warmup, "ready", lambda part=warmup.REST: state["ready"])
    monkeypatch.setattr(warmup, "start", lambda: None)

    class Cold:
        @staticmethod
        def warm():
            state["ready"] = True

    return Cold


def walk_both(cold_idx, warm_idx, model, text, budget=None, warm_at=None, cold=None) -> int:
    """Compare the masks of the two indexes along the model's tokens of ``text``; ``warm_at``:
    the step at which the kernels become ready. Returns the steps compared."""
    a, b = cold_idx.guide(max_tokens=budget), warm_idx.guide(max_tokens=budget)
    steps = 0
    for i, t in enumerate(tokenize(model, text)):
        if warm_at == i:
            cold.warm()
        assert np.array_equal(a.allowed_token_ids(), b.allowed_token_ids()), (text, i)
        ma, mb = a.mask(), b.mask()
        assert ma.kind == mb.kind and np.array_equal(ma.data, mb.data), (text, i)
        assert a.is_accepting() == b.is_accepting()
        if t not in b.allowed_token_ids():
            break
        a.advance(t)
        b.advance(t)
        steps += 1
    return steps


@pytest.mark.parametrize("name", ["json", "sql", "c"])
def test_without_kernels_the_masks_are_the_kernels_masks(cold, smollm2, smollm2_vocab, name):
    warm_idx = fresh(name, smollm2_vocab)
    cold_idx = fresh(name, smollm2_vocab)
    assert cold_idx.engine._compiled() is None
    steps = 0
    for text in SAMPLES[name][0][:3]:
        steps += walk_both(cold_idx, warm_idx, smollm2, text)
        steps += walk_both(cold_idx, warm_idx, smollm2, text, budget=40)
    assert steps > 20 and cold_idx.engine.core is None
    # its cache arrays: without the arena seed, which the first process with kernels makes
    arrays = cold_idx.arrays(seed=True)
    assert "ar_seed_later" in arrays and len(arrays["ar_set_off"]) == 1
    cold.warm()  # the kernels are compiled now: mid-text, the next mask comes from them
    again = fresh(name, smollm2_vocab)
    assert walk_both(again, warm_idx, smollm2, SAMPLES[name][0][0], warm_at=3, cold=cold) > 3
    assert again.engine.core is not None
    loaded = GrammarIndex.from_arrays(arrays, smollm2_vocab)
    assert walk_both(loaded, warm_idx, smollm2, SAMPLES[name][0][0], budget=40) > 3
    assert loaded.engine.core is not None and loaded.engine.core.seed is not None  # made at its first mask


def test_without_kernels_on_gemma(cold, gemma3, gemma3_vocab):
    warm_idx = fresh("json", gemma3_vocab)
    cold_idx = fresh("json", gemma3_vocab)
    steps = sum(walk_both(cold_idx, warm_idx, gemma3, text, budget=b) for text in SAMPLES["json"][0][:2]
                for b in (None, 40))
    assert steps > 20 and cold_idx.engine.core is None


_CHILD = """
import json, sys
from numba.core import event
compiles = []
class Listener(event.Listener):
    def on_start(self, ev):
        d = (ev.data or {}).get("dispatcher")
        compiles.append(getattr(getattr(d, "py_func", None), "__module__", "?") or "?")
    def on_end(self, ev):
        pass
event.register("numba:compile", Listener())
import localguide
from localguide.grammar import warmup
v = localguide.Vocabulary.from_gguf(localguide.default_model_path())
out = {"ready": warmup.ready(), "masks": [], "core": []}
for name in sys.argv[1:]:
    g = localguide.compile_grammar(name, v).guide(max_tokens=50)
    m = g.allowed_token_ids()
    out["masks"].append(m.tolist())
    g.advance(int(m[0]))
    g.allowed_token_ids()
    out["core"].append(localguide.compile_grammar(name, v).engine.core is not None)
localguide.runtime.cache.flush()
out["compiles"] = sorted({c for c in compiles if c.startswith("localguide")})
print(json.dumps(out))
"""


def run_child(env, *names) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, *names], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def cold_env(tmp_path, **extra) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), LOCALGUIDE_CACHE_DIR=str(tmp_path / "lg"),
               LOCALGUIDE_COMPILE="background", **extra)
    return env


def test_a_first_grammar_compiles_no_kernel(tmp_path, smollm2_vocab):
    """A fresh process with empty caches (its warm-up held back) gets its first grammar masks
    compiling no kernel of localguide, and they are the kernels' masks."""
    got = run_child(cold_env(tmp_path, _LOCALGUIDE_WARMUP_CHILD="1"), "json", "c")
    assert got["ready"] is False and got["core"] == [False, False]
    assert got["compiles"] == []
    for name, mask in zip(["json", "c"], got["masks"]):
        assert mask == sources.compile_grammar(name, smollm2_vocab).guide(max_tokens=50).allowed_token_ids().tolist()
    assert not list((tmp_path / "numba").glob("**/" + warmup.LOCK))


def test_a_stale_lock_is_taken_over(tmp_path):
    lock = tmp_path / warmup.LOCK
    assert warmup._take(lock)
    lock.write_text(str(os.getpid()))
    assert not warmup._take(lock)  # a live warm-up
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(str(dead.pid))
    assert warmup._take(lock)  # its process is gone
    lock.write_text(str(os.getpid()))
    old = time.time() - warmup.STALE_S - 60
    os.utime(lock, (old, old))
    assert warmup._take(lock)  # too old


def test_a_marker_of_other_sources_is_not_ready(tmp_path, monkeypatch):
    ks = warmup.kernels()
    folder = warmup._folder()
    assert folder is not None and warmup._stamp(ks)
    monkeypatch.setattr(warmup, "_folder", lambda: tmp_path)
    (tmp_path / warmup.MARKER).write_text(warmup._stamp(ks) + "\nother", "utf-8")
    assert not warmup._marker_ok(ks)
    (tmp_path / warmup.MARKER).write_text(warmup._stamp(ks), "utf-8")
    assert warmup._marker_ok(ks)  # (the kernels' own index files are where numba keeps them)


def test_a_warmup_process_takes_the_kernels_of_its_part_only(tmp_path):
    code = ("from localguide.grammar import warmup as w; "
            "print(w.ready(), w.ready(w.MASKS), w.ready(w.REST))")
    env = cold_env(tmp_path, _LOCALGUIDE_WARMUP_CHILD="1")
    got = {}
    for part in ("masks", "rest"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                           env=dict(env, _LOCALGUIDE_WARMUP_PART=part))
        assert r.returncode == 0, r.stderr
        got[part] = r.stdout.split()
    assert got == {"masks": ["False", "True", "False"], "rest": ["True", "False", "True"]}


@pytest.mark.parametrize("helper_rc, parts", [(0, ["rest"]), (1, ["rest", "masks"]), (None, [None])])
def test_the_warmup_compiles_a_part_the_helper_could_not(helper_rc, parts, tmp_path, monkeypatch):
    """The first warm-up process compiles the rest while its helper compiles the mask path; where
    the helper fails, it compiles that part too, and writes the marker once both are done (with
    no helper, on one core: both parts, in one go)."""
    done = []
    monkeypatch.setattr(rehearsal, "warm", lambda part=None: done.append((part, warmup._part)))
    monkeypatch.setattr(warmup, "_folder", lambda: tmp_path)
    monkeypatch.setattr(rehearsal.os, "nice", lambda inc: 10)  # (this test's process keeps its priority)
    helper = None
    if helper_rc is not None:
        helper = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({helper_rc})"])
    monkeypatch.setattr(rehearsal, "_helper", lambda: helper)
    lock = tmp_path / warmup.LOCK
    lock.write_text(str(os.getpid()))
    assert rehearsal.main([str(lock)]) == 0
    assert done == [(p, p) for p in parts] and warmup._part is None
    assert (tmp_path / warmup.MARKER).read_text("utf-8") == warmup._stamp(warmup.kernels())
    assert not lock.exists()


@pytest.mark.slow
def test_the_warmup_compiles_every_grammar_kernel(tmp_path):
    """The first process starts one warm-up; when it is done, a fresh process takes the compiled
    path from its first mask and compiles nothing, on grammars compiled there and loaded from
    the cache, with a token budget.
    (Slow: every grammar kernel compiled cold, in two more processes, took 70 s alone and 196 s
    beside the suite's other worker on 2 cores, which it slowed as much; the warm-up's parts and
    its ordering are tested above, in the default suite.)"""
    env = cold_env(tmp_path)
    first = run_child(env, "json")
    assert first["compiles"] == [] and first["core"] == [False]
    lock = next((tmp_path / "numba").glob("**/" + warmup.LOCK))
    deadline = time.time() + 900
    while lock.exists() and time.time() < deadline:
        time.sleep(1)
    assert (lock.parent / warmup.MARKER).exists(), (lock.parent / warmup.LOG).read_text()
    second = run_child(env, "json", "sql", "c")  # json from the cache file, sql and c compiled
    assert second["ready"] is True and second["core"] == [True, True, True]
    assert second["compiles"] == []
    assert second["masks"][0] == first["masks"][0]
    third = run_child(env, "sql", "c")  # from their cache files
    assert third["compiles"] == [] and third["masks"] == second["masks"][1:]
