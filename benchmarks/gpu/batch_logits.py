#!/usr/bin/env python3
"""Why greedy text with speculation on can part from off's where logits depend on the batch: the
same positions decoded one token at a time and in decodes of ``--width`` tokens, compared.

    python benchmarks/gpu/batch_logits.py [--models smollm2,gemma] [--n-gpu-layers -1] [--width 4]

Per model: a prompt and the greedy continuation that one-token decodes give (``--tokens``), then a
fresh context decodes the same tokens ``--width`` at a time, logits at each (as a verification
decode of speculation does). Reported: the largest and the median difference of a position's
logits, the positions whose best token differs, and the smallest gap between the best two logits
of one-token decoding (a tie closer than the difference flips a greedy choice). On the CPU's
reference kernels (``localguide.load()``'s default) the difference is 0; this script uses
llama.cpp's own ``Llama`` with the fastest kernels of the backend it was built for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import log, md_table, model_paths  # noqa: E402

import localguide  # noqa: E402,F401 (before llama_cpp: the library's own loader settings)
import llama_cpp  # noqa: E402

PROMPT = "Write a JSON object describing a person, with a name, an age and a city:\n"


def logits_of(path: Path, tokens: list[int], width: int, n_gpu_layers: int) -> np.ndarray:
    """The logits after each of ``tokens``, decoded ``width`` at a time."""
    llm = llama_cpp.Llama(str(path), n_ctx=512, n_batch=width, n_ubatch=width, logits_all=True,
                          n_gpu_layers=n_gpu_layers, verbose=False)
    try:
        llm.eval(tokens)
        return np.array(llm.scores[:len(tokens)], np.float32)
    finally:
        llm.close()


def compare(path: Path, n_tokens: int, width: int, n_gpu_layers: int) -> dict:
    llm = llama_cpp.Llama(str(path), n_ctx=512, n_batch=1, n_ubatch=1, logits_all=True,
                          n_gpu_layers=n_gpu_layers, verbose=False)
    try:
        tokens = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)
        n_prompt = len(tokens)
        for _ in range(n_tokens):  # greedy, one token a decode
            llm.eval(tokens[llm.n_tokens:])
            tokens.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval(tokens[llm.n_tokens:])
        one = np.array(llm.scores[:len(tokens)], np.float32)
    finally:
        llm.close()
    wide = logits_of(path, tokens, width, n_gpu_layers)
    diff = np.abs(one - wide).max(axis=1)
    top2 = np.sort(one, axis=1)[:, -2:]
    gaps = top2[:, 1] - top2[:, 0]
    flips = [i - n_prompt + 1 for i in range(n_prompt - 1, len(tokens))
             if int(np.argmax(one[i])) != int(np.argmax(wide[i]))]
    return {"positions": len(tokens), "max": float(diff.max()), "median": float(np.median(diff)),
            "flips": flips, "gap": float(gaps[n_prompt - 1:].min()),
            "close": int((gaps[n_prompt - 1:] < diff[n_prompt - 1:]).sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    notes: list = []
    rows = []
    for name, path in model_paths(args.models.split(","), notes).items():
        r = compare(path, args.tokens, args.width, args.n_gpu_layers)
        log(f"  {name}: {r}")
        rows.append([name, r["positions"], f"{r['max']:.3f}", f"{r['median']:.3f}",
                     ", ".join(map(str, r["flips"])) or "none", f"{r['gap']:.3f}", r["close"]])
    print(f"Command: `python benchmarks/gpu/batch_logits.py --models {args.models} --n-gpu-layers "
          f"{args.n_gpu_layers} --width {args.width} --tokens {args.tokens}`. {' '.join(notes)}\n")
    print(md_table(["model", "positions", f"largest logit difference, 1 vs {args.width} a decode",
                    "median difference", "generated positions whose best token differs",
                    "smallest gap between the best two logits (generated)",
                    "generated positions with a gap below the difference"], rows))


if __name__ == "__main__":
    main()
