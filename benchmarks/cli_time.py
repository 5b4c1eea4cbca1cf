"""The CLI section: time to the first byte of ``python cli.py run`` with warm caches."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time

from pathlib import Path

from common import BENCH_ROOT, CLI_REGEX, ROOT, median, note


# --- CLI -------------------------------------------------------------------------------

def bench_cli(model_path: Path, is_default: bool, cfg, notes, out, warm: bool):
    cli = ROOT / "cli.py"
    if not cli.is_file():
        note(notes, "CLI benchmark skipped: cli.py not found")
        return
    cmd = [sys.executable, str(cli), "run"] + ([] if is_default else [str(model_path)])
    cmd += ["--regex", CLI_REGEX, "The answer is", "--max-tokens", "1"]
    env = dict(os.environ, LOCALGUIDE_CACHE_DIR=str(BENCH_ROOT / "warm"))
    firsts, totals = [], []
    for i in range(cfg.cli_reps + (not warm)):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
        first = p.stdout.read(1)
        t1 = time.perf_counter()
        p.stdout.read()
        p.wait()
        t2 = time.perf_counter()
        if p.returncode != 0 or not first:
            err = subprocess.run(cmd, env=env, capture_output=True, cwd=ROOT, timeout=300).stderr
            note(notes, f"CLI benchmark skipped: `{shlex.join(cmd[1:])}` failed (exit {p.returncode}: "
                        f"{err.decode(errors='replace').strip().splitlines()[-1:]})")
            return
        if i == 0 and not warm:
            continue  # the untimed warm-up
        firsts.append(t1 - t0)
        totals.append(t2 - t0)
    imports = []
    for _ in range(cfg.cli_reps):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import localguide, localguide.cli"], env=env, cwd=ROOT,
                       capture_output=True)
        imports.append(time.perf_counter() - t0)
    out["cli"] = {"imports": median(imports), "command": "python " + shlex.join(["cli.py"] + cmd[2:]).replace(str(model_path), model_path.name),
                  "first": median(firsts), "total": median(totals), "runs": len(firsts)}


