"""The disk cache: a second compile loads instead of building, corrupt files are rebuilt
(one RuntimeWarning per process), and LOCALGUIDE_CACHE_DIR is honoured."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import localguide
import localguide.index.index
from localguide import Vocabulary, cache, compile_regex
from localguide.index import Index
from localguide.regex import regex_to_dfa


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory for this test, and the warning budget reset."""
    d = tmp_path / "cache"
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(d))
    monkeypatch.setattr(cache, "_warned", False)
    return d


@pytest.fixture
def small_vocab() -> Vocabulary:
    return Vocabulary.from_tokens([b"", b"1", b"9", b"19", b"20", b"0", b"2", b"x"], [0])


def assert_same_index(a: Index, b: Index) -> None:
    for name, arr in a.to_arrays().items():
        np.testing.assert_array_equal(arr, b.to_arrays()[name], err_msg=name)
    assert a.vocab_size == b.vocab_size and a.fingerprint == b.fingerprint


def index_files(d):
    cache.flush()  # large indexes are written in the background
    return sorted(p for p in d.iterdir() if p.name.startswith("regex-"))


def forbid_build(monkeypatch):
    def build(*args, **kwargs):
        raise AssertionError("the index was built again instead of loaded from the cache")
    monkeypatch.setattr(localguide.index.index, "build_arrays", build)


def test_second_compile_loads_from_disk(fresh_cache, small_vocab, monkeypatch):
    first = compile_regex(r"(19|20)\d{2}", small_vocab)
    files = index_files(fresh_cache)
    assert len(files) == 1 and files[0].suffix == cache.SUFFIX
    forbid_build(monkeypatch)
    second = compile_regex(r"(19|20)\d{2}", small_vocab)
    assert_same_index(first, second)
    # A different pattern is not served from that file.
    with pytest.raises(AssertionError, match="built again"):
        compile_regex(r"(19|20)\d{3}", small_vocab)


def test_second_compile_loads_on_real_vocabulary(fresh_cache, vocab, monkeypatch):
    first = compile_regex(r"[a-z]+@[a-z]+\.com", vocab)
    assert len(index_files(fresh_cache)) == 1
    forbid_build(monkeypatch)
    assert_same_index(first, compile_regex(r"[a-z]+@[a-z]+\.com", vocab))


def test_cache_key_depends_on_vocabulary(fresh_cache, small_vocab, monkeypatch):
    compile_regex(r"\d+", small_vocab)
    other = Vocabulary.from_tokens([b"", b"1", b"9", b"19", b"20", b"0", b"2", b"y"], [0])
    built = []
    real = localguide.index.index.build_arrays

    def spy(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(localguide.index.index, "build_arrays", spy)
    compile_regex(r"\d+", other)
    assert built == [1]
    assert len(index_files(fresh_cache)) == 2


@pytest.mark.parametrize("garbage", [b"", b"not a zip file at all", b"PK\x03\x04" + b"\x00" * 40])
def test_corrupt_file_is_rebuilt_with_one_warning(fresh_cache, small_vocab, monkeypatch, garbage):
    original = compile_regex(r"(19|20)\d{2}", small_vocab)
    (path,) = index_files(fresh_cache)
    path.write_bytes(garbage)
    with pytest.warns(RuntimeWarning, match="corrupt"):
        rebuilt = compile_regex(r"(19|20)\d{2}", small_vocab)
    assert_same_index(original, rebuilt)
    # The file was rewritten and now loads without building.
    forbid_build(monkeypatch)
    assert_same_index(original, compile_regex(r"(19|20)\d{2}", small_vocab))


def test_only_one_warning_per_process(fresh_cache, small_vocab):
    compile_regex("19", small_vocab)
    compile_regex("20", small_vocab)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for p in index_files(fresh_cache):
            p.write_bytes(b"garbage")
        a = compile_regex("19", small_vocab)
        b = compile_regex("20", small_vocab)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 1
    assert a.guide().allowed_token_ids().tolist() == [1, 3]
    assert b.guide().allowed_token_ids().tolist() == [4, 6]


def test_wrong_content_is_rebuilt(fresh_cache, small_vocab):
    """A readable cache file with the wrong arrays (ids beyond the vocabulary, next states beyond
    the states, arrays that do not fit together) is not trusted by a process that did not write it."""
    original = compile_regex(r"\d\d", small_vocab)
    (path,) = index_files(fresh_cache)
    kept = {k: np.array(v) for k, v in original.to_arrays().items()}  # (as stored)
    lists = "mask_tokens" if len(kept["mask_tokens"]) else "excl_tokens"
    far = kept["next_values"].copy()
    far[0] = original.n_states + 5
    damaged = [{**kept, lists: kept[lists] + np.int32(1000)}, {**kept, "next_values": far},
               {**kept, "mask_sizes": kept["mask_sizes"][:-1]}]
    for bad in damaged:
        cache.save(path, bad)
        _as_another_process_wrote_it()
        cache._warned = False  # (one warning per process; the fixture restores the flag)
        with pytest.warns(RuntimeWarning):
            rebuilt = compile_regex(r"\d\d", small_vocab)
        assert_same_index(original, rebuilt)
    cache.save(path, kept)
    _as_another_process_wrote_it()
    assert_same_index(original, compile_regex(r"\d\d", small_vocab))
    cache.save(path, {"unrelated": np.zeros(3)})
    rebuilt = compile_regex(r"\d\d", small_vocab)
    assert_same_index(original, rebuilt)


def _as_another_process_wrote_it():
    cache._verified.clear()
    cache._accepted.clear()


def test_a_rejected_file_left_in_place_is_never_trusted(fresh_cache, small_vocab, monkeypatch):
    """A file whose values were refused, and which could not be replaced (a read-only cache), is
    refused again on every load: neither its checksum nor the first refusal makes it trusted."""
    original = compile_regex(r"\d\d", small_vocab)
    (path,) = index_files(fresh_cache)
    bad = {k: np.array(v) for k, v in original.to_arrays().items()}
    bad["next_values"][0] = 10**6
    cache.save(path, bad)
    _as_another_process_wrote_it()
    monkeypatch.setattr(cache, "save", lambda path, arrays: None)
    for _ in range(3):
        cache._warned = False
        with pytest.warns(RuntimeWarning):
            again = Index.cached("regex", r"\d\d", lambda: regex_to_dfa(r"\d\d"), small_vocab)
        assert_same_index(original, again)


def test_cache_dir_is_honoured(tmp_path, monkeypatch, small_vocab):
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(a))
    assert cache.cache_dir() == a
    compile_regex("x+", small_vocab)
    assert len(index_files(a)) == 1 and not b.exists()
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(b))
    compile_regex("x+", small_vocab)
    assert len(index_files(b)) == 1
    assert cache.key_path("regex", "k").parent == b


def test_session_cache_dir_is_used(cache_dir, smollm2_vocab):
    """The session fixture's directory receives the real vocabularies' caches."""
    compile_regex(r"\d{3}", smollm2_vocab)
    names = [p.name for p in cache_dir.iterdir()]
    assert any(n.startswith("vocab-") for n in names)
    assert any(n.startswith("regex-") for n in names)


def test_no_temporary_files_left(fresh_cache, small_vocab):
    for p in ["1", "2", "19|20", r"\d*"]:
        compile_regex(p, small_vocab)
    assert all(p.suffix == cache.SUFFIX for p in fresh_cache.iterdir())


def test_unwritable_cache_dir_still_compiles(tmp_path, monkeypatch, small_vocab):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(cache, "_warned", False)
    with pytest.warns(RuntimeWarning, match="could not write"):
        index = compile_regex("19", small_vocab)
    assert index.guide().allowed_token_ids().tolist() == [1, 3]


def test_invalid_pattern_leaves_no_file(fresh_cache, small_vocab):
    with pytest.raises(localguide.PatternError):
        compile_regex("(19", small_vocab)
    with pytest.raises(localguide.EmptyLanguageError):
        compile_regex("[]", small_vocab)
    with pytest.raises(localguide.EmptyLanguageError):
        compile_regex("z", small_vocab)  # no token spells it
    assert not fresh_cache.exists() or index_files(fresh_cache) == []


def test_corrupt_vocabulary_cache_is_rebuilt(tmp_path, monkeypatch, smollm2_path, smollm2_vocab):
    d = tmp_path / "vcache"
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(d))
    monkeypatch.setattr(cache, "_warned", False)
    Vocabulary.from_gguf(smollm2_path)
    (vfile,) = [p for p in d.iterdir() if p.name.startswith("vocab-")]
    vfile.write_bytes(b"\x00" * 100)
    with pytest.warns(RuntimeWarning):
        again = Vocabulary.from_gguf(smollm2_path)
    assert again.fingerprint == smollm2_vocab.fingerprint


def test_file_format_round_trip(tmp_path):
    """Every dtype and shape the caches use comes back equal; large arrays come back mapped."""
    arrays = {
        "i32": np.arange(7, dtype=np.int32), "i64": np.array([[1, -2], [3, 4]], np.int64),
        "u64": np.array([2**64 - 1], np.uint64), "b": np.array([True, False, True]),
        "u8": np.frombuffer(b"\x00\xffabc", np.uint8), "empty": np.zeros(0, np.int32),
        "scalar": np.array(5, np.int64), "big": np.arange(1 << 19, dtype=np.int32),
    }
    path = tmp_path / ("x" + cache.SUFFIX)
    cache.save(path, arrays)
    back = cache.load(path)
    assert set(back) == set(arrays)
    for name, a in arrays.items():
        assert back[name].dtype == a.dtype and back[name].shape == a.shape, name
        np.testing.assert_array_equal(back[name], a, err_msg=name)
    import mmap

    def mapped(a):
        while a is not None and not isinstance(a, mmap.mmap):
            a = a.obj if isinstance(a, memoryview) else getattr(a, "base", None)
        return a is not None

    assert mapped(back["big"]) and not back["big"].flags.writeable
    assert not mapped(back["i32"]) and back["i32"].flags.writeable


@pytest.mark.parametrize("damage", ["truncate", "extend", "header", "magic"])
def test_damaged_files_are_reported_corrupt(tmp_path, monkeypatch, damage):
    monkeypatch.setattr(cache, "_warned", False)
    path = tmp_path / ("x" + cache.SUFFIX)
    cache.save(path, {"a": np.arange(1000, dtype=np.int64)})
    data = path.read_bytes()
    damaged = {"truncate": data[:-8], "extend": data + b"\0" * 64,
               "header": data[:17] + b"\xff" + data[18:], "magic": b"X" + data[1:]}[damage]
    path.write_bytes(damaged)
    with pytest.warns(RuntimeWarning, match="corrupt"):
        assert cache.load(path) is None
    assert not path.exists()


def test_save_later_is_waited_for_and_served(fresh_cache):
    """A file whose arrays are still being computed: readers wait for it, ``flush`` too."""
    import threading

    release = threading.Event()
    path = cache.key_path("test", "later")

    def make():
        release.wait(10)
        return {"a": np.arange(5, dtype=np.int64)}

    cache.save_later(path, make)
    assert cache.available(path) and not path.exists()
    got = []
    reader = threading.Thread(target=lambda: got.append(cache.load_checked(path)))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive() and not got  # waiting for ``make``
    release.set()
    reader.join(10)
    np.testing.assert_array_equal(got[0]["a"], np.arange(5))
    cache.flush()
    assert path.exists() and not cache._pending


def test_save_later_failure_leaves_no_file(fresh_cache):
    path = cache.key_path("test", "fails")

    def make():
        raise ValueError("boom")

    with pytest.warns(RuntimeWarning, match="could not prepare cache file"):
        cache.save_later(path, make)
        cache.flush()
    assert not path.exists() and cache.load_checked(path) is None


def _grammar_files(d):
    cache.flush()
    return sorted(p for p in d.iterdir() if p.name.startswith("grammar-"))


def test_grammar_cache_with_broken_trees_is_rebuilt(fresh_cache, vocab):
    """A grammar cache file whose trees point outside themselves is reported and rebuilt."""
    from localguide.grammar import compile_grammar, packed, sources

    sources._COMPILED.clear()
    original = compile_grammar("arithmetic", vocab, lazy=False)
    want = original.guide().allowed_token_ids().tolist()
    (path,) = _grammar_files(fresh_cache)
    arrays = {k: np.array(v) for k, v in packed.unpack(cache.load(path), vocab.size).items()}
    arrays["tr_ch_node"][0] = len(arrays["tr_node_grp"]) + 5
    cache.save(path, packed.pack(arrays))
    sources._COMPILED.clear()
    with pytest.warns(RuntimeWarning, match="corrupt"):
        rebuilt = compile_grammar("arithmetic", vocab, lazy=False)
    assert rebuilt.guide().allowed_token_ids().tolist() == want
    sources._COMPILED.clear()


def test_grammar_cache_token_ids_outside_the_vocabulary_never_reach_a_mask(fresh_cache, vocab):
    """A cache file whose checksum holds but whose token groups name ids outside the vocabulary
    (packed as ``grammar.packed`` stores them) is rebuilt: no such id reaches a mask, and the mask
    is the grammar's."""
    from localguide.grammar import compile_grammar, packed, sources

    sources._COMPILED.clear()
    original = compile_grammar("arithmetic", vocab, lazy=False)
    want = original.guide().allowed_token_ids().tolist()
    (path,) = _grammar_files(fresh_cache)
    arrays = packed.unpack(cache.load(path), vocab.size)
    tok = arrays["tr_grp_tok"]
    for t, bad in zip(want[:2] + want[-1:], [vocab.size + 7, -3, vocab.size]):
        tok[tok == t] = bad  # every group that held t now holds a damaged id
    cache.save(path, packed.pack(arrays))
    sources._COMPILED.clear()
    with pytest.warns(RuntimeWarning, match="corrupt"):
        damaged = compile_grammar("arithmetic", vocab, lazy=False)
    assert damaged.guide().allowed_token_ids().tolist() == want
    bits = damaged.guide().mask().data
    assert bits.dtype == np.uint64 and len(bits) == (vocab.size + 63) // 64
    on = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little"))
    assert on.tolist() == want
    sources._COMPILED.clear()


# -- bit flips (issue: reliability) ----------------------------------------------------------------

_WORK = r"""
import json, re, sys, warnings
import localguide
warnings.simplefilter("always")
m = localguide.load(sys.argv[1])
schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 6}},
          "required": ["n", "s"]}
out = {"regex": m.generate("Year:", regex=r"(19|20)\d{2}", max_tokens=6, seed=1),
       "schema": m.generate("JSON:", json_schema=schema, max_tokens=40, seed=2),  # (exact: a grammar)
       "bounded": m.generate("JSON:", json_schema=schema, max_recursion=3, max_tokens=40, seed=2),  # (an Index)
       "grammar": m.generate("1+1=", grammar="arithmetic", max_tokens=12, seed=3),
       "free": m.generate("Hi", max_tokens=3, seed=4)}
localguide.runtime.cache.flush()
print(json.dumps(out))
"""


def test_random_bit_flips_in_every_cache_file_are_caught(tmp_path, smollm2_path):
    """Every kind of cache file a generation leaves (vocabulary, trie, regex and schema indexes,
    grammar, draft counts), with random bits flipped in its data: a fresh process warns, rebuilds,
    and generates text the constraints accept, never a crash (a native read out of bounds would
    end the process) or a wrong mask."""
    import json
    import os
    import random
    import re
    import subprocess
    import sys

    from localguide.runtime import cache

    env = dict(os.environ, LOCALGUIDE_CACHE_DIR=str(tmp_path))
    env.pop("LOCALGUIDE_COMPILE", None)

    def work():
        r = subprocess.run([sys.executable, "-c", _WORK, str(smollm2_path)], env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert re.fullmatch(r"(19|20)\d{2}", out["regex"])
        for key in ("schema", "bounded"):
            value = json.loads(out[key])
            assert isinstance(value["n"], int) and len(value["s"]) <= 6
        assert re.fullmatch(r"[0-9+\-*/(). ]+", out["grammar"].strip() or "0")
        return r.stderr

    work()
    files = sorted(tmp_path.glob(f"*{cache.SUFFIX}"))
    kinds = {f.name.split("-")[0] for f in files}
    assert {"vocab", "regex", "json_schema", "json_schema_grammar", "grammar", "draft"} <= kinds, kinds
    rng = random.Random(7)
    for f in files:
        data = bytearray(f.read_bytes())
        start = int.from_bytes(data[8:16], "little")
        if len(data) <= start:
            continue
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(start, len(data))
            data[i] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(data))
        with pytest.raises(cache.CorruptFileError, match="checksum"):
            cache.read(f)
    stderr = work()
    assert "is corrupt" in stderr and "rebuilding" in stderr
    work()  # (and rebuilt, it loads clean)


def test_a_file_of_an_earlier_format_is_replaced_without_a_warning(tmp_path):
    import warnings

    from localguide.runtime import cache

    path = tmp_path / f"x{cache.SUFFIX}"
    cache.save(path, {"a": np.arange(5)})
    data = bytearray(path.read_bytes())
    data[:8] = b"LGARRAY1"
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.load(path) is None
    assert not path.exists()


# -- bounds (issue: reliability) -------------------------------------------------------------------

def test_bounded_cache_keeps_the_most_recent_within_entries_and_bytes():
    from localguide.runtime.lru import BoundedCache

    c = BoundedCache(entries=3, max_bytes=1000)
    for i in range(5):
        c.put(i, np.zeros(10, np.uint8))
    assert len(c) == 3 and c.get(0) is None and c.get(4) is not None
    c.get(2)  # (used: stays)
    c.put("big", np.zeros(900, np.uint8))
    assert c.get(2) is not None and c.get(3) is None and c.nbytes <= 1000


def test_compiled_grammars_in_memory_are_bounded(smollm2_vocab):
    from localguide.grammar import sources

    for i in range(40):
        localguide.compile_grammar(f'start: "w{i}" NUMBER\n%import common.NUMBER', smollm2_vocab)
    assert len(sources._COMPILED) <= sources._COMPILED.entries


def test_the_folder_is_pruned_to_its_bound(tmp_path, monkeypatch):
    import os
    import time

    from localguide.runtime import cache

    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    paths = []
    for i in range(6):
        p = tmp_path / f"regex-{i}{cache.SUFFIX}"
        cache.save(p, {"a": np.zeros(100_000, np.uint8)})
        os.utime(p, (1000 + i, 1000 + i))  # (older first)
        paths.append(p)
    cache.load(paths[0])  # (used now: the newest)
    stale, fresh = tmp_path / "x.lgarrays123.tmp", tmp_path / "y.lgarrays456.tmp"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    os.utime(stale, (time.time() - 2 * cache.TMP_AGE,) * 2)
    cache.prune(tmp_path, limit=350_000)
    left = sorted(p.name for p in tmp_path.glob(f"*{cache.SUFFIX}"))
    assert left == sorted([paths[0].name, paths[4].name, paths[5].name]), left
    assert not stale.exists() and fresh.exists()


def test_cache_info_and_clear_from_the_command_line(tmp_path, monkeypatch, smollm2_vocab):
    from typer.testing import CliRunner

    from localguide.cli import app

    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    localguide.compile_regex(r"[a-z]{3}\d", smollm2_vocab)
    localguide.runtime.cache.flush()
    r = CliRunner().invoke(app, ["cache", "info"])
    assert r.exit_code == 0 and str(tmp_path) in r.stdout and "regex" in r.stdout
    r = CliRunner().invoke(app, ["cache", "clear"])
    assert r.exit_code == 0 and "removed 1 files" in r.stdout
    assert not list(tmp_path.glob("*.lgarrays"))
