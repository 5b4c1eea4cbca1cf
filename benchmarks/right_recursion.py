#!/usr/bin/env python3
"""Right recursion against iteration: a long string walked byte by byte through a grammar guide.

    python benchmarks/right_recursion.py                       # 1,000 and 10,000 bytes, both models
    python benchmarks/right_recursion.py --models smollm2 --lengths 1000

The same language written two ways (GBNF):

* right recursive: ``root ::= "\\"" body "\\""``, ``body ::= "" | [a-z ] body``;
* iterative: ``root ::= "\\"" [a-z ]* "\\""``;

and, as a deeper non-tail right recursion, a JSON document of ``n`` bytes (an array of small
objects) under json.org's grammar in its McKeeman form (``members ::= member | member ","
members``, ``characters ::= "" | character characters``, ``ws ::= "" | [ \\t\\n\\r] ws``),
against the same language with repetitions (``member ("," member)*``, ``character*``).

The text is walked one single-byte token at a time (``mask()``, then ``advance()``), on a
fresh index loaded from the one compiled (no parser state or mask computed yet: ``first``)
and again on the same index (``warm``); medians of ``--repeat`` fresh indexes. CPU time of
the process (``time.process_time``); the ratio is right recursive / iterative, first walks.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from pathlib import Path

from common import fmt, log, md_table, model_paths

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "grammar"))
from test_right_recursion import BODY_ITER, BODY_RIGHT, JSON_ITER, JSON_RIGHT, byte_tokens  # noqa: E402

from localguide import Vocabulary
from localguide.grammar import compile_grammar
from localguide.grammar.compiled import GrammarIndex

def body_text(n: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    return b'"' + bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(n)) + b'"'


def json_text(n: int, seed: int = 0) -> bytes:
    """A JSON array of small objects, about ``n`` bytes."""
    rng = random.Random(seed)
    parts = []
    size = 2
    while size < n:
        word = "".join(rng.choice("abcdefghij klmnop") for _ in range(rng.randint(1, 12)))
        item = '{"id": %d, "name": "%s", "tags": ["x", "y"], "ok": %s}' % (
            rng.randint(0, 9999), word, rng.choice(["true", "false", "null"]))
        parts.append(item)
        size += len(item) + 2
    return ("[" + ", ".join(parts) + "]").encode()


def walk(idx, tokens: list[int]) -> float:
    """CPU seconds to walk ``tokens`` through a guide of ``idx``: ``mask()`` then ``advance()``."""
    g = idx.guide()
    t0 = time.process_time()
    for t in tokens:
        g.mask()
        g.advance(t)
    g.mask()
    dt = time.process_time() - t0
    if not g.is_accepting():
        raise AssertionError("the walked text is not complete")
    return dt


def bench(vocab: Vocabulary, grammar: str, text: bytes, repeat: int) -> tuple[float, float]:
    """(first walk, warm walk) of ``text`` under ``grammar``, in seconds: the medians of ``repeat``
    fresh indexes, after one walk of the text's start that is not timed (the kernels loaded)."""
    ids = byte_tokens(vocab)
    tokens = [ids[b] for b in text]
    arrays = compile_grammar(grammar, vocab, lazy=False).arrays(seed=True)
    walk(GrammarIndex.from_arrays(arrays, vocab, "grammar"), tokens[:1] + tokens[-1:])
    firsts, warms = [], []
    for _ in range(repeat):
        fresh = GrammarIndex.from_arrays(arrays, vocab, "grammar")
        firsts.append(walk(fresh, tokens))
        warms.append(walk(fresh, tokens))
    return statistics.median(firsts), statistics.median(warms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--lengths", default="1000,10000", help="bytes of the walked strings")
    ap.add_argument("--repeat", type=int, default=3, help="fresh indexes per case (medians)")
    args = ap.parse_args()
    notes: list = []
    lengths = [int(x) for x in args.lengths.split(",")]
    rows = []
    for name, path in model_paths(args.models.split(","), notes).items():
        vocab = Vocabulary.from_gguf(path)
        for n in lengths:
            for case, right, iterative, text in [("string", BODY_RIGHT, BODY_ITER, body_text(n)),
                                                 ("JSON", JSON_RIGHT, JSON_ITER, json_text(n))]:
                r_first, r_warm = bench(vocab, right, text, args.repeat)
                i_first, i_warm = bench(vocab, iterative, text, args.repeat)
                log(f"{name} {case} {len(text)} B: right {r_first:.3f}/{r_warm:.3f} s, "
                    f"iterative {i_first:.3f}/{i_warm:.3f} s")
                rows.append([name, case, f"{len(text):,}", fmt(r_first, 3), fmt(i_first, 3),
                             fmt(r_first / i_first, 2), fmt(r_warm, 3), fmt(i_warm, 3)])
    print(md_table(["model", "text", "bytes", "right rec. first (s)", "iterative first (s)", "ratio",
                    "right rec. warm (s)", "iterative warm (s)"], rows))
    for n in notes:
        print(f"\nnote: {n}")


if __name__ == "__main__":
    sys.exit(main())
