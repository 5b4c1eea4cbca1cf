#!/usr/bin/env bash
# On a CUDA machine: every GPU row of BENCHMARKS.md "On a CUDA GPU", one file per step in OUTDIR.
#
#   bash benchmarks/gpu/run.sh OUTDIR [STORE]
#
# STORE (default /tmp/lg-gpu) holds wheels/ (the CUDA llama-cpp-python that build_wheel.sh made and
# the wheels pack.py fetched) and models/*.gguf: receive.sh fills it, or copy them there. Each step
# has a time limit, so that the whole ends within 8 minutes on an H100/H200 with both models; a
# step that runs out writes what it had. STEPS (default: all) picks steps by name.
set -uo pipefail
out="$(mkdir -p "$1" && cd "$1" && pwd)"
store="${2:-/tmp/lg-gpu}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
site=/tmp/lg-site
steps="${STEPS:-setup logits check speculation short trace server graphs}"
export PYTHONPATH="$site:$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export LOCALGUIDE_CACHE_DIR=/tmp/lg-cache NUMBA_CACHE_DIR=/tmp/lg-numba
export LOCALGUIDE_MASKBENCH="$store/maskbench"
models="$(ls "$store"/models/*.gguf 2>/dev/null | paste -sd, -)"
# cuBLAS 13 where a CUDA image keeps it: the toolkit's folder, or PyTorch's nvidia-* wheels
nv="$(python3 -c 'import glob, nvidia; print(":".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' \
  2>/dev/null || true)"
export LD_LIBRARY_PATH="${nv:+$nv:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

step() {  # name, seconds, command...: stdout and stderr into OUTDIR/name.txt
  local name="$1" limit="$2"; shift 2
  case " $steps " in *" $name "*) ;; *) return 0 ;; esac
  local t0=$SECONDS
  { echo "\$ $*"; if declare -F "$1" >/dev/null; then "$@"; else timeout "$limit" "$@"; fi; echo "rc=$? after $((SECONDS - t0)) s"; } > "$out/$name.txt" 2>&1
  echo "$name: $(tail -1 "$out/$name.txt")"
}

setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$store"/wheels/*.whl
  for t in "$store"/wheels/llama_cpp-*.tar; do  # (build_wheel.sh's: shared libraries linked, not copied)
    rm -rf "$site/llama_cpp" && python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$t" "$site"
  done
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nproc
  python3 -c 'import localguide, llama_cpp; print("llama-cpp-python", llama_cpp.__version__, "GPU offload:",
    llama_cpp.llama_supports_gpu_offload())'
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$site"/llama_cpp/lib/libggml-cuda.so | grep -E "not found|cublas|cudart" || true
  git -C "$root" log --oneline -1 2>/dev/null || true
  ls -la "$store"/models
}

step setup 30 setup
step logits 30 python3 benchmarks/gpu/batch_logits.py --models "$models" --n-gpu-layers -1 --width 4
step check 130 python3 benchmarks/gpu/check.py --models "$models" --n-gpu-layers -1 --seeds 2
step speculation 200 python3 benchmarks/speculation.py --models "$models" --rounds 3 --warmup 3 --min-tokens 100 \
  --n-gpu-layers -1
step short 40 python3 benchmarks/speculation.py --models "$models" --rounds 3 --warmup 3 --min-tokens 100 \
  --n-gpu-layers -1 --cases "regex date,regex ipv4" --short-tokens 0
step trace 40 python3 benchmarks/decode_trace.py --models "$models" --rounds 4 --warmup 2 --n-gpu-layers -1 \
  --cases "regex date,regex ipv4,person" --short-tokens 0
step server 60 python3 benchmarks/server.py --models "$models" --parallel 4 --rounds 2 --n-gpu-layers -1
step graphs 40 env GGML_CUDA_DISABLE_GRAPHS=1 python3 benchmarks/decode_trace.py --models "$models" --rounds 4 \
  --warmup 2 --n-gpu-layers -1 --cases "regex date,regex ipv4,person" --short-tokens 0
