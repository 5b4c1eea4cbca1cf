#!/usr/bin/env python3
"""Conversations: time to first token over a 20-turn chat with and without the prompt cache,
and tool calls with 100 tools (compile time, tokens/s against unconstrained).

    python benchmarks/conversation.py [--models smollm2,gemma] [--turns 20] [--markdown]

Each turn appends the user's message and the answer (``Model.chat_stream``, temperature 0.7,
one seed, 32 tokens) to the history; time to first token runs from the call to the first
piece of the answer. With the cache a turn decodes only its new tokens; without it
(``cache_prompt=False``) the whole history. Tools: 100 tools with small object schemas, a call
required (``tool_choice="required"``), compile time cold (a fresh cache directory) and cached (once the whole Index is stored),
and generation tokens/s of the call (after 3 untimed calls that teach the draft counts) against an
unconstrained answer to the same prompt; the
guide's cost per token (mask and advance, µs p50 / p99) on random walks of the call's guide
("required": the call; "auto": text or the call), against the grammar targets (50 µs / 1 ms).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import fmt, log, md_table, model_paths  # noqa: E402

import localguide  # noqa: E402

QUESTIONS = ["Name a fruit.", "Why is the sky blue?", "Name a colour.", "What is two plus two?", "Say hello.",
             "Name a city in Italy.", "What do bees make?", "Name an animal.", "What is ice?", "Name a planet.",
             "What is a verb?", "Name a sport.", "What is rain?", "Name a tree.", "What do cows eat?",
             "Name a metal.", "What is a poem?", "Name a river.", "What is bread made of?", "Say goodbye."]
TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": f"Tool number {i}",
    "parameters": {"type": "object", "properties": {"x": {"type": "integer"}, "s": {"type": "string", "maxLength": 8},
                                                    f"k{i}": {"enum": ["a", "b"]}}, "required": ["x"]}}}
    for i in range(100)]


def conversation(model, turns: int, cache: bool) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful assistant. Answer in one sentence."}]
    rows = []
    for k in range(turns):
        msgs.append({"role": "user", "content": QUESTIONS[k % len(QUESTIONS)]})
        t0 = time.perf_counter()
        first, text = None, []
        for d in model.chat_stream(msgs, max_tokens=32, temperature=0.7, seed=k, cache_prompt=cache):
            if first is None:
                first = time.perf_counter() - t0
            text.append(d.content)
        s = model.last_stats
        rows.append({"ttft": first if first is not None else time.perf_counter() - t0,
                     "prompt": s.prompt_tokens, "decoded": s.prompt_tokens - s.cached_tokens})
        msgs.append({"role": "assistant", "content": "".join(text)})
    return rows


def guide_cost(model, mode: str, walks: int = 30) -> tuple[float, float]:
    """µs per token (mask and advance), p50 and p99, on random walks of a tools guide."""
    import numpy as np

    from localguide.chat.tools import calls_maker, check_tools, tool_format

    made, _, _ = calls_maker(model, check_tools(TOOLS), tool_format(model.chat_template()), mode, True)
    rng, times = np.random.default_rng(0), []
    for _ in range(walks):
        g = made.guide(max_tokens=64)
        for _ in range(64):
            t0 = time.perf_counter()
            g.mask()
            t1 = time.perf_counter()
            t = int(rng.choice(g.allowed_token_ids()))
            if t in model._stop:
                break
            t2 = time.perf_counter()
            g.advance(t)
            times.append(t1 - t0 + time.perf_counter() - t2)
    us = np.array(times) * 1e6
    return float(np.percentile(us, 50)), float(np.percentile(us, 99))


def tools_case(model) -> dict:
    from localguide.chat.tools import call_schema, check_tools

    schema = call_schema(check_tools(TOOLS))
    old = os.environ.get("LOCALGUIDE_CACHE_DIR")
    with tempfile.TemporaryDirectory() as d:
        os.environ["LOCALGUIDE_CACHE_DIR"] = d
        t = time.perf_counter()
        model.compile(json_schema=schema, strict=True)
        cold = time.perf_counter() - t
        from localguide.runtime import cache
        from localguide.index import Index

        g = model.compile(json_schema=schema, strict=True).guide(max_tokens=64)
        for _ in range(8):  # (a first use: the whole Index is then built and stored in the background)
            g.advance(int(g.allowed_token_ids()[-1]))
        cached = float("nan")
        for _ in range(120):
            time.sleep(0.5)
            cache.flush()
            t = time.perf_counter()
            index = model.compile(json_schema=schema, strict=True)  # (as the next call sees it)
            if isinstance(index, Index):
                cached = time.perf_counter() - t
                break
    if old is None:
        os.environ.pop("LOCALGUIDE_CACHE_DIR", None)
    else:
        os.environ["LOCALGUIDE_CACHE_DIR"] = old
    msgs = [{"role": "user", "content": "Call tool_7 with x = 3."}]
    for seed in range(3):  # (untimed: the draft counts learn first, as an app used a little; speculation.py alike)
        model.chat(msgs, tools=TOOLS, tool_choice="required", max_tokens=48, temperature=0.7, seed=100 + seed)
    tps_call, tps_free = [], []
    for seed in range(3):
        model.chat(msgs, tools=TOOLS, tool_choice="required", max_tokens=48, temperature=0.7, seed=seed)
        tps_call.append(model.last_stats.tokens_per_second)
        model.chat(msgs, tools=TOOLS, tool_choice="none", max_tokens=48, temperature=0.7, seed=seed)
        tps_free.append(model.last_stats.tokens_per_second)
    return {"cold": cold, "cached": cached, "tps_call": sum(tps_call) / 3, "tps_free": sum(tps_free) / 3,
            "prompt": model.last_stats.prompt_tokens, "required": guide_cost(model, "required"),
            "auto": guide_cost(model, "auto")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--markdown", action="store_true", help="write the section into BENCHMARKS.md")
    args = ap.parse_args()
    notes: list = []
    rows, tool_rows = [], []
    for name, path in model_paths(args.models.split(","), notes).items():
        model = localguide.load(path, n_ctx=16384)
        model.chat([{"role": "user", "content": "hi"}], max_tokens=2)  # (warm: first decode, kernels)
        for cache in (True, False):
            r = conversation(model, args.turns, cache)
            t1 = r[0]["ttft"]
            later = sorted(x["ttft"] for x in r[1:])
            rows.append([name, "on" if cache else "off", f"{t1 * 1000:.0f} ms", f"{r[-1]['ttft'] * 1000:.0f} ms",
                         f"{later[len(later) // 2] / t1:.2f}×", f"{later[-1] / t1:.2f}×", str(r[-1]["prompt"]),
                         f"{r[0]['decoded']} / {max(x['decoded'] for x in r[1:])}"])
            log(name, "cache", cache, [round(x["ttft"] * 1000) for x in r])
        t = tools_case(model)
        tool_rows.append([name, f"{t['cold']:.2f} s", f"{t['cached'] * 1000:.1f} ms", str(t["prompt"]),
                          fmt(t["tps_call"]), fmt(t["tps_free"]), f"{t['tps_call'] / t['tps_free']:.2f}×",
                          "%.1f / %.1f" % t["required"], "%.1f / %.1f" % t["auto"]])
        log(name, t)
    text = ("Command: `python benchmarks/conversation.py" + (f" --turns {args.turns}" if args.turns != 20 else "")
            + f" --models {args.models}`. " + " ".join(__doc__.split("\n\n")[2].split()) + "\n\n"
            + md_table(["model", "prompt cache", "TTFT turn 1", f"TTFT turn {args.turns}",
                        "median later turn / turn 1", "worst turn / turn 1", "last prompt (tokens)", "decoded: turn 1 / most of a later turn"],
                       rows)
            + "\n\n100 tools, a call required:\n\n"
            + md_table(["model", "compile (cold)", "compile (cached)", "prompt (tokens)", "tokens/s, the call",
                        "tokens/s, unconstrained", "ratio", "guide µs/token, required (p50 / p99)",
                        "guide µs/token, auto (p50 / p99)"], tool_rows) + "\n")
    print(text)
    if args.markdown:
        from report import replace_section

        replace_section(Path(__file__).resolve().parent.parent / "BENCHMARKS.md", "## Conversations", text)


if __name__ == "__main__":
    main()
