"""The generation loop's own cost, for a paired comparison of two checkouts: per case (free text, a
regex, a JSON Schema, two grammars), 6 generations of up to 64 tokens after 2 untimed ones; printed as
one JSON line: tokens/s, the milliseconds per token spent outside ``llama_decode`` (the loop: masks,
sampling, drafts, the engine's bookkeeping), those inside it, decode calls per token, and a digest of
the texts (the same digest: the same texts). Run it with each checkout on ``PYTHONPATH``, in turn:

    PYTHONPATH=<checkout> python benchmarks/loop_overhead.py smollm2
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import localguide  # noqa: E402  (before llama.cpp loads: the wait policy)
import llama_cpp  # noqa: E402
from common import PERSON_SCHEMA, model_paths  # noqa: E402
CASES = {
    "free": dict(),
    "regex words": dict(regex=r"[a-z]+( [a-z]+){0,200}"),
    "schema person": dict(json_schema=PERSON_SCHEMA),
    "grammar json": dict(grammar="json"),
    "grammar c": dict(grammar="c"),
}
PROMPTS = ["A person as JSON:", "Write a short story about a cat:", "int main"]


def main() -> None:
    spent: list[float] = []  # seconds of each llama_decode of the generation under way
    real = llama_cpp.llama_decode

    def timed(ctx, batch):
        t = time.perf_counter()
        rc = real(ctx, batch)
        spent.append(time.perf_counter() - t)
        return rc

    llama_cpp.llama_decode = timed  # (both checkouts' loops look it up at each call)
    name = sys.argv[1]
    m = localguide.load(model_paths([name], [])[name])
    out = {}
    for case, kw in CASES.items():
        for seed in range(2):
            m.generate(PROMPTS[seed % 3], max_tokens=64, seed=seed, **kw)
        toks = secs = dec = calls = 0
        texts = []
        for seed in range(6):
            spent.clear()
            texts.append(m.generate(PROMPTS[seed % 3], max_tokens=64, seed=100 + seed, **kw))
            s = m.last_stats
            # (the first decode is the prompt's, outside ``seconds``)
            toks += s.tokens
            secs += s.seconds
            dec += sum(spent[1:])
            calls += s.decode_calls
        out[case] = dict(tps=toks / secs, over_ms=1000 * (secs - dec) / toks, dec_ms=1000 * dec / toks,
                         calls=calls / toks, h=hashlib.sha256(repr(texts).encode()).hexdigest()[:8])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
