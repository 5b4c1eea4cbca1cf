"""A first use compiles no automaton kernel: small automata take the plain-Python twins, whose results
are the kernels' own (the same minimal DFAs, byte for byte)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from localguide.automaton import minimize_kernels
from localguide.json_schema.schema import build_dfa
from localguide.runtime.numba_tools import kernels_only
from localguide.regex import regex_to_dfa, subset_kernels

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = [r"\d{4}-\d{2}-\d{2}", r"[a-z0-9._%+-]{1,20}@[a-z0-9.-]{1,20}\.[a-z]{2,4}", r"(?i)hello|wörld", r".{0,40}\s"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}

_CHILD = """
import json, sys
from localguide.regex import regex_to_dfa, subset_kernels
from localguide.automaton import minimize_kernels
from localguide.json_schema.schema import build_dfa
patterns, schema = json.loads(sys.argv[1])
out = [regex_to_dfa(p) for p in patterns] + [build_dfa(schema)[0]]
print(json.dumps({"compiled": [bool(subset_kernels.subset_dfa.signatures), bool(minimize_kernels.minimize_dfa.signatures)],
                  "dfas": [[d.transitions.tolist(), d.accepting.tolist()] for d in out]}))
"""


def test_first_use_takes_the_twins_and_gets_the_kernels_results(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), LOCALGUIDE_CACHE_DIR=str(tmp_path / "lg"),
               LOCALGUIDE_COMPILE="background")
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([PATTERNS, SCHEMA])], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["compiled"] == [False, False]  # nothing compiled: the twins answered
    with kernels_only():  # this process: the kernels, compiled if need be
        want = [regex_to_dfa.__wrapped__(p) for p in PATTERNS] + [build_dfa(SCHEMA)[0]]
    assert subset_kernels.subset_dfa.signatures and minimize_kernels.minimize_dfa.signatures
    for (trans, acc), d in zip(got["dfas"], want):
        np.testing.assert_array_equal(np.array(trans, np.int32), d.transitions)
        np.testing.assert_array_equal(np.array(acc, bool), d.accepting)


_INDEX_CHILD = """
import json, sys
import localguide
from localguide import vocabulary_kernels
from localguide.index import build_kernels
v = localguide.Vocabulary.from_gguf(localguide.default_model_path())
index = localguide.compile_regex(sys.argv[1], v)
kernels = [build_kernels.explore, build_kernels.distances, build_kernels.finalize, vocabulary_kernels.build_trie]
print(json.dumps({"compiled": [bool(k.signatures) for k in kernels],
                  "arrays": {k: a.tolist() for k, a in index.to_arrays().items() if hasattr(a, "tolist")}}))
"""


def test_first_use_builds_the_index_without_a_kernel(tmp_path, smollm2_vocab):
    """A fresh process with empty caches builds a small regex's index (and the vocabulary's trie)
    in numpy, compiling nothing; the arrays are those the kernels build here."""
    from localguide.index import Index
    from localguide.regex.compile import warm_kernels

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), LOCALGUIDE_CACHE_DIR=str(tmp_path / "lg"),
               LOCALGUIDE_COMPILE="background")
    r = subprocess.run([sys.executable, "-c", _INDEX_CHILD, PATTERNS[0]], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["compiled"] == [False, False, False, False]
    warm_kernels()
    want = Index.build(regex_to_dfa(PATTERNS[0]), smollm2_vocab).to_arrays()  # (no cache: the kernels, now)
    assert set(got["arrays"]) <= set(want)
    for name, values in got["arrays"].items():
        assert values == np.asarray(want[name]).tolist(), name
