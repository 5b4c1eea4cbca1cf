#!/usr/bin/env python3
"""localguide benchmarks, side by side with llama.cpp GBNF, llguidance and outlines-core.

    python benchmarks/run.py                 # full run (9-16 min on a busy 2-core box), tables on stdout
    python benchmarks/run.py --quick         # ~3 min, fewer and shorter runs
    python benchmarks/run.py --markdown      # also write BENCHMARKS.md (or --markdown PATH)

Sections (``--sections``, comma separated; all by default), for each model (``--models``):

* ``e2e``: tokens/s of the same generation loop (``Model.generate_tokens``) unconstrained and
  under each constraint engine (localguide regex and grammar guides, llama.cpp GBNF, llguidance),
  fixed seeds; each run steps in lockstep with an unconstrained run of the same prompt in a
  second llama.cpp context, and the ratio comes from those step-paired differences. Stop tokens
  are banned (a logit-bias sampler) so runs last ``--tokens`` tokens unless the constraint ends.
  The sampler chain's time per token is recorded.
* ``guide``: per-token guide cost in µs (p50/p99): in the loop (chain time minus unconstrained),
  and the token sequences of those generations replayed through each engine's sampler
  (llama.cpp API) and through each engine's own mask + advance API.
* ``compile``: cold index build (empty disk cache, empty DFA cache) and cached load for
  localguide; outlines-core ``Index``; llguidance matcher + first mask.
* ``grammar``: the grammar engine on json, sql and c (``grammar_masks.py``): compile cold and
  cached in fresh processes, and the masks of a first and a second walk of sample texts, through
  guides without a token budget and then with one (``max_tokens``, as ``Model.generate`` makes).
* ``cli``: ``python cli.py run --regex '\\d+' PROMPT --max-tokens 1`` with warm caches, time to
  the first byte on stdout.

Peers that are not installed are skipped with a note. Progress goes to stderr. One module per
section (``e2e.py``, ``guide_cost.py``, ``compile_time.py``, ``cli_time.py``, ``maskbench.py``,
``grammar_masks.py``), shared helpers in ``common.py``, the tables in ``report.py``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from common import BENCH_ROOT, CLI_REGEX, GRAMMAR_BUDGET, GRAMMAR_MASKS, PATTERNS, ROOT, log, model_paths, note

import localguide  # noqa: E402  (after common: it sets the cache directory)
import localguide.engines.llamacpp.sampler as lg_sampler  # noqa: E402
from localguide.regex.compile import warm_kernels  # noqa: E402

import grammar_masks  # noqa: E402
import maskbench  # noqa: E402
import peers  # noqa: E402
from cli_time import bench_cli  # noqa: E402
from compile_time import bench_compile  # noqa: E402
from e2e import bench_e2e  # noqa: E402
from guide_cost import bench_guide, replay_sampler  # noqa: E402
from report import full_report, keep_sections, machine, model_report, targets_report  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter runs (~2-3 min)")
    ap.add_argument("--markdown", nargs="?", const=str(ROOT / "BENCHMARKS.md"), default=None,
                    metavar="PATH", help="also write the report there (default BENCHMARKS.md)")
    ap.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    ap.add_argument("--models", default="smollm2,gemma",
                    help="comma separated: smollm2, gemma, or .gguf paths (default: smollm2,gemma)")
    ap.add_argument("--sections", default="compile,e2e,guide,maskbench,grammar,cli",
                    help="comma separated subset of compile,e2e,guide,maskbench,grammar,cli")
    ap.add_argument("--maskbench", type=int, help="MaskBench schemas timed (default 60, quick 20)")
    ap.add_argument("--runs", type=int, help="runs per e2e configuration (default 5, quick 3)")
    ap.add_argument("--tokens", type=int, help="tokens per e2e run (default 64, quick 32)")
    ap.add_argument("--threads", type=int, help="llama.cpp n_threads (default: llama-cpp-python's)")
    cfg = ap.parse_args(argv)
    cfg.runs = cfg.runs or (3 if cfg.quick else 5)
    cfg.tokens = cfg.tokens or (32 if cfg.quick else 64)
    cfg.gbnf_tokens = 16 if cfg.quick else 24
    cfg.compile_reps = 1 if cfg.quick else 3
    cfg.replays = 2 if cfg.quick else 3
    cfg.cli_reps = 1 if cfg.quick else 3
    cfg.maskbench = cfg.maskbench or (20 if cfg.quick else 60)
    sections = set(cfg.sections.split(","))
    if "guide" in sections:
        sections.add("e2e")  # the guide cost replays the generations of the e2e runs
    command = "python benchmarks/run.py" + ("" if argv is None and len(sys.argv) == 1 else
                                             " " + shlex.join(sys.argv[1:] if argv is None else argv))
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.perf_counter()
    notes: list[str] = []
    mach = machine()
    if peers.OUTLINES is None:
        note(notes, "outlines-core is not installed (pip install outlines-core==0.2.14): its columns are empty")
    if peers.LLG is None:
        note(notes, "llguidance is not installed (pip install llguidance==1.9.1): its columns are empty")

    # numba kernels: load their cached machine code once, on a tiny vocabulary.
    t0 = time.perf_counter()
    warm_kernels()  # the automaton kernels, which small patterns otherwise leave to their twins
    tiny = localguide.Vocabulary.from_tokens([b"a", b"b", b"ab", b""], stop_ids=[3])
    os.environ["LOCALGUIDE_CACHE_DIR"] = str(BENCH_ROOT / "tiny")
    tiny_index = localguide.compile_regex("a+b", tiny)
    os.environ["LOCALGUIDE_CACHE_DIR"] = str(BENCH_ROOT / "warm")
    replay_sampler(lambda: (lambda s: (s, s.pointer))(lg_sampler.GuideSampler(tiny_index.guide())), [[0, 1]], 4, 0)
    notes.append(f"numba kernels load (first compile in a process): {(time.perf_counter() - t0) * 1e3:.0f} ms, "
                 "not included below")

    results = {}
    paths = model_paths(cfg.models.split(","), notes)
    for name, path in paths.items():
        log(f"== {name}: {path.name}")
        kwargs = {"n_threads": cfg.threads} if cfg.threads else {}
        t0 = time.perf_counter()
        model = localguide.load(path, **kwargs)
        r = {"file": path.name, "vocab": model.vocabulary.size, "threads": model.llama.n_threads,
             "threads_batch": model.llama.context_params.n_threads_batch,
             "load_s": time.perf_counter() - t0}
        ov = llg_tok = None
        if "compile" in sections:
            t_sec = time.perf_counter()
            ov, llg_tok = bench_compile(model, cfg, notes, r)
            log(f"  compile: {time.perf_counter() - t_sec:.0f} s")
        else:
            if peers.OUTLINES is not None:
                ov = peers.outlines_vocabulary(model.vocabulary)
            if peers.LLG is not None:
                llg_tok = peers.llg_tokenizer(model)
        indexes = {k: localguide.compile_regex(p, model.vocabulary) for k, p in PATTERNS.items()}
        # The CLI's index, into the warm cache (the vocabulary is there since the model loaded).
        indexes[CLI_REGEX] = localguide.compile_regex(CLI_REGEX, model.vocabulary)
        e2e = None
        if "e2e" in sections:
            t_sec = time.perf_counter()
            partner = localguide.load(path, **kwargs)  # a second context for the lockstep runs
            e2e = bench_e2e(model, partner, cfg, notes, indexes, llg_tok, r)
            del partner
            log(f"  e2e: {time.perf_counter() - t_sec:.0f} s")
        if "guide" in sections:
            t_sec = time.perf_counter()
            bench_guide(model, cfg, notes, indexes, ov, llg_tok, e2e, r)
            log(f"  guide: {time.perf_counter() - t_sec:.0f} s")
        del model
        gc.collect()
        if "maskbench" in sections and maskbench.MASKBENCH.is_dir():
            t_sec = time.perf_counter()
            r["maskbench"] = maskbench.run(path, maskbench.sample_files(cfg.maskbench), 20.0, log)
            r["maskbench"].pop("rows")
            log(f"  maskbench: {time.perf_counter() - t_sec:.0f} s")
        if "grammar" in sections:
            t_sec = time.perf_counter()
            r["grammar_masks"] = grammar_masks.measure(path, name, GRAMMAR_MASKS)
            log(f"  grammar masks: {time.perf_counter() - t_sec:.0f} s")
            t_sec = time.perf_counter()
            r["grammar_masks_budget"] = grammar_masks.measure(path, name, GRAMMAR_MASKS, budget=GRAMMAR_BUDGET,
                                                              compile_times=False)
            log(f"  grammar masks with a budget: {time.perf_counter() - t_sec:.0f} s")
        if "cli" in sections:
            t_sec = time.perf_counter()
            bench_cli(path, name == "smollm2", cfg, notes, r, warm=False)
            log(f"  cli: {time.perf_counter() - t_sec:.0f} s")
        r.pop("e2e_raw", None)
        results[name] = r
        print(model_report(name, r) + "\n", flush=True)

    mach["load_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    elapsed = time.perf_counter() - t_start
    print("## Targets\n\n" + targets_report(results) + "\n")
    if notes:
        print("Notes:\n" + "\n".join(f"* {n}" for n in notes))
    log(f"total {elapsed / 60:.1f} min")
    if cfg.markdown:
        out = Path(cfg.markdown)
        report = full_report(results, notes, mach, cfg, command, started, elapsed)
        out.write_text(keep_sections(report, out.read_text() if out.exists() else ""))
        log(f"wrote {cfg.markdown}")
    if cfg.json:
        Path(cfg.json).write_text(json.dumps({"machine": mach, "results": results, "notes": notes},
                                             indent=1, default=str))
    shutil.rmtree(BENCH_ROOT, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
