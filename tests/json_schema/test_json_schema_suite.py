"""Corpus sweeps for the JSON Schema compiler: the JSON-Schema-Test-Suite (draft 2020-12) and MaskBench.

For each test, ``json.dumps(data)`` must be accepted exactly when ``valid`` is true. A
false accept is a bug (the allowlist below is empty); a false reject is a known
approximation (property order, bounded nesting, formats enforced although draft
2020-12 makes them annotations, ...) and is counted, not failed. A schema that uses an
unsupported keyword is skipped with its error. Run with ``-s`` to see the tables.

The corpora live in ``../shared/corpora`` (relative to the repository); the tests skip
when it is absent.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import random
import time
from pathlib import Path

import pytest

from localguide.json_schema.schema import SchemaError, UnsupportedSchemaError, build_dfa

CORPORA = Path(__file__).resolve().parents[2].parent / "shared" / "corpora"
SUITE = CORPORA / "json-schema-test-suite"
MASKBENCH = CORPORA / "maskbench"

# (file, group description, test description) -> why a false accept is acceptable (docs/json_schema.md).
FALSE_ACCEPT_ALLOWLIST: dict = {
    ("hostname.json", "validation of host names", "exceeds maximum overall length (256)"):
        "host name lengths are not counted (a state per character: an index of tens of megabytes)",
    ("hostname.json", "validation of host names", "exceeds maximum label length (63)"):
        "host name lengths are not counted (a state per character: an index of tens of megabytes)",
}

needs_suite = pytest.mark.skipif(not SUITE.is_dir(), reason=f"{SUITE} is absent (the shared corpora are not here)")
needs_maskbench = pytest.mark.skipif(not MASKBENCH.is_dir(), reason=f"{MASKBENCH} is absent")


def _remotes() -> dict:
    out = {}
    for f in glob.glob(str(SUITE / "remotes" / "**" / "*.json"), recursive=True):
        rel = os.path.relpath(f, SUITE / "remotes")
        out["http://localhost:1234/" + rel.replace(os.sep, "/")] = json.loads(Path(f).read_text())
    return out


def _suite_groups(pattern: str = "*.json"):
    for f in sorted((SUITE / "tests" / "draft2020-12").glob(pattern)):
        for group in json.loads(f.read_text()):
            yield f.name, group


def sweep_suite(pattern: str = "*.json", budget: int = 20_000):
    """Per file: Counter(pass, skip, false_accept, false_reject); and the lists of failures."""
    remotes = _remotes()
    stats: dict = collections.defaultdict(collections.Counter)
    false_accepts, false_rejects, skips = [], [], []
    for name, group in _suite_groups(pattern):
        n = len(group["tests"])
        try:
            dfa, _ = build_dfa(group["schema"], resources=remotes, max_states=budget)
        except UnsupportedSchemaError as e:
            stats[name]["skip"] += n
            skips.append((name, group["description"], str(e.problems[0][2])))
            continue
        except SchemaError:
            dfa = None  # nothing accepted (an empty schema, or too large): valid tests are false rejects
        for t in group["tests"]:
            got = dfa is not None and dfa.matches(json.dumps(t["data"]).encode())
            key = (name, group["description"], t["description"])
            if got == t["valid"]:
                stats[name]["pass"] += 1
            elif got:
                stats[name]["false_accept"] += 1
                false_accepts.append(key)
            else:
                stats[name]["false_reject"] += 1
                false_rejects.append(key)
    return stats, false_accepts, false_rejects, skips


def _table(stats) -> str:
    lines = [f"{'file':34} {'pass':>5} {'skip':>5} {'f.acc':>5} {'f.rej':>5}"]
    total = collections.Counter()
    for name in sorted(stats):
        c = stats[name]
        total.update(c)
        lines.append(f"{name:34} {c['pass']:5} {c['skip']:5} {c['false_accept']:5} {c['false_reject']:5}")
    lines.append(f"{'TOTAL':34} {total['pass']:5} {total['skip']:5} {total['false_accept']:5} "
                 f"{total['false_reject']:5}")
    return "\n".join(lines)


@needs_suite
def test_suite_draft2020_12_no_false_accepts():
    stats, false_accepts, false_rejects, skips = sweep_suite()
    print("\n" + _table(stats))
    unexpected = [k for k in false_accepts if k not in FALSE_ACCEPT_ALLOWLIST]
    assert not unexpected, f"false accepts: {unexpected}"
    total = collections.Counter()
    for c in stats.values():
        total.update(c)
    assert total["pass"] > 934  # llguidance's count on this suite
    for name, desc, reason in skips:
        assert reason  # every skip says why


@needs_suite
def test_suite_optional_formats_no_false_accepts():
    stats, false_accepts, _, _ = sweep_suite("optional/format/*.json")
    print("\n" + _table(stats))
    assert not [k for k in false_accepts if k not in FALSE_ACCEPT_ALLOWLIST], false_accepts


# -- token level, on the real vocabulary ---------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    localguide = pytest.importorskip("localguide")
    try:
        return localguide.load()
    except Exception as e:  # the model package is optional
        pytest.skip(f"the default model is not available: {e}")


def _accepted_by_tokens(index, model, text: str) -> bool:
    from localguide.errors import TokenNotAllowedError

    guide = index.guide()
    for tok in model.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False):
        try:
            guide.advance(tok)
        except TokenNotAllowedError:
            return False
    return guide.is_accepting()


@needs_suite
def test_suite_sample_token_level(smollm2, tmp_path, monkeypatch):
    """A sample of the suite, tokenized by SmolLM2's tokenizer and walked through the Index."""
    from localguide.json_schema.schema import compile_json_schema

    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    remotes = _remotes()
    groups = list(_suite_groups())
    random.Random(7).shuffle(groups)
    checked = mismatches = 0
    for name, group in groups[:40]:
        try:
            index = compile_json_schema(group["schema"], smollm2.vocabulary, resources=remotes, max_states=5000)
            dfa, _ = build_dfa(group["schema"], resources=remotes, max_states=5000)
        except SchemaError:
            continue
        for t in group["tests"]:
            text = json.dumps(t["data"])
            by_tokens = _accepted_by_tokens(index, smollm2, text)
            assert by_tokens == dfa.matches(text.encode()), (name, group["description"], t["description"])
            assert not (by_tokens and not t["valid"]), (name, group["description"], t["description"])
            checked += 1
            mismatches += by_tokens != t["valid"]
    assert checked > 50
    print(f"\ntoken level: {checked} tests, {mismatches} false rejects")


# -- MaskBench ---------------------------------------------------------------------------------------

def sweep_maskbench(files, budget: int = 20_000):
    res = collections.Counter()
    errors = collections.Counter()
    invalid_accepted, times = [], []
    for f in files:
        d = json.loads(Path(f).read_text())
        t0 = time.perf_counter()
        try:
            dfa, _ = build_dfa(d["schema"], max_states=budget)
        except UnsupportedSchemaError as e:
            res["compile_error"] += 1
            for p in e.problems:
                errors[p[2][:80]] += 1
            continue
        except SchemaError as e:
            res["compile_error"] += 1
            errors[str(e)[:80]] += 1
            continue
        times.append(time.perf_counter() - t0)
        res["compiled"] += 1
        for t in d["tests"]:
            got = dfa.matches(json.dumps(t["data"]).encode())
            if t["valid"]:
                res["valid_accepted" if got else "valid_rejected"] += 1
            else:
                res["invalid_accepted" if got else "invalid_rejected"] += 1
                if got:
                    invalid_accepted.append((f, t["data"]))
    return res, errors, invalid_accepted, sorted(times)


def _report(res, errors, times) -> str:
    lines = [json.dumps(dict(res))]
    if times:
        lines.append(f"compile p50 {times[len(times) // 2] * 1000:.0f} ms, "
                     f"p99 {times[min(len(times) - 1, int(len(times) * 0.99))] * 1000:.0f} ms")
    lines += [f"  {n:3} x {msg}" for msg, n in errors.most_common(15)]
    return "\n".join(lines)


def _maskbench_files():
    return sorted(glob.glob(str(MASKBENCH / "*" / "*.json")))


@needs_maskbench
def test_maskbench_sample():
    files = _maskbench_files()
    small = [f for f in files if os.path.getsize(f) < 6000]
    random.Random(3).shuffle(small)
    res, errors, invalid_accepted, times = sweep_maskbench(small[:60])
    print("\n" + _report(res, errors, times))
    assert not invalid_accepted, invalid_accepted[:3]
    assert res["compiled"] >= 40


@pytest.mark.slow
@needs_maskbench
def test_maskbench_full():
    res, errors, invalid_accepted, times = sweep_maskbench(_maskbench_files())
    print("\n" + _report(res, errors, times))
    assert not invalid_accepted, invalid_accepted[:3]
