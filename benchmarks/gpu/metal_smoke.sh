#!/usr/bin/env bash
# On a Mac with Apple silicon: build llama-cpp-python for Metal in a venv of its own, then check
# that localguide offloads to it and that every output is valid there, and time speculation.
# Not run in CI, and not run by localguide's developers (no Mac among their machines): the
# numbers it prints are yours to report.
#
#   bash benchmarks/gpu/metal_smoke.sh [VENV]      (default: .venv-metal; about 10 minutes)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${1:-$root/.venv-metal}"
[ "$(uname -s)" = Darwin ] || { echo "this is for macOS (Metal); on CUDA see benchmarks/gpu/run.sh"; exit 2; }
python3 -m venv "$venv"
. "$venv/bin/activate"
pip install -q --upgrade pip
CMAKE_ARGS="-DGGML_METAL=on" pip install -q --force-reinstall --no-cache-dir "llama-cpp-python==${VERSION:-0.3.36}"
pip install -q -e "$root[model,test]"
cd "$root"
python -m localguide.cli info | grep -E "backend|GPU offload"
python - <<'PY'
import localguide
from localguide.engines.llamacpp import rpc
assert rpc.offload_devices() > 0, "llama.cpp finds no GPU: is this build Metal's? (localguide info)"
m = localguide.load(n_gpu_layers=-1, n_ctx=1024)
print(m.generate("The capital of France is", regex=r" [A-Z][a-z]+", max_tokens=8, temperature=0))
PY
python benchmarks/gpu/check.py --models smollm2,gemma --n-gpu-layers -1 --seeds 2 \
  --cases "person,regex date,regex email,free JSON,grammar json,grammar sql"
python benchmarks/speculation.py --models smollm2,gemma --rounds 3 --warmup 3 --n-gpu-layers -1 \
  --cases "person,regex date,regex ipv4,grammar c"
