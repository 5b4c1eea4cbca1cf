#!/usr/bin/env bash
# Build llama-cpp-python for CUDA on a machine without a GPU, to carry to one.
#
# CUDA 13.0's compiler and cuBLAS come from PyPI (`cuda-toolkit`), into a venv of their own, so
# nothing is installed system-wide. The wheel is for one architecture (sm_90: H100/H200 by default;
# set ARCH=89 for an RTX 40xx, 86 for an RTX 30xx) and links cuBLAS 13 dynamically: the target needs
# a driver for CUDA 13 and libcublas.so.13 (PyTorch's CUDA 13 image has it; else `pip install
# nvidia-cublas`). Without VMM it needs no libcuda at link time.
#
#   bash benchmarks/gpu/build_wheel.sh [OUTDIR]     (default: .gpu/ in the repository root; writes
#   llama_cpp-VERSION-cuda-smARCH.tar.xz there)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$here/.gpu}"
arch="${ARCH:-90}"
work="${WORK:-${TMPDIR:-/tmp}/localguide-cuda-build}"
version="${VERSION:-0.3.36}"  # the release the benchmarks in BENCHMARKS.md ran
mkdir -p "$work" "$out"
if [ ! -x "$work/venv/bin/python" ]; then
  python3 -m venv "$work/venv"
fi
"$work/venv/bin/pip" install -q "cuda-toolkit[nvcc,cudart,cublas,cccl,crt,nvvm]==13.0.2" \
  scikit-build-core cmake ninja
cuda="$("$work/venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
# The PyPI layout has only versioned libraries and no lib64: CMake's FindCUDAToolkit wants both.
for lib in cudart cublas cublasLt; do
  ln -sf "lib$lib.so.13" "$cuda/lib/lib$lib.so"
done
ln -sfn lib "$cuda/lib64"
export PATH="$cuda/bin:$work/venv/bin:$PATH" CUDA_HOME="$cuda" CUDAToolkit_ROOT="$cuda"
export CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-$(nproc)}"
export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch -DCMAKE_CUDA_COMPILER=$cuda/bin/nvcc \
-DCUDAToolkit_ROOT=$cuda -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_CUDA_NO_VMM=ON -DGGML_RPC=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
"$work/venv/bin/pip" wheel --no-deps --no-build-isolation --no-cache-dir -w "$work/wheel" \
  "llama-cpp-python==$version"
# A wheel cannot hold symbolic links: it carries each shared library three times (libggml-cuda's
# 60 MB too). What travels is the package folder, each library once and its other names linked to
# it, xz-compressed (40 MB for sm_90); run.sh unpacks it beside the other wheels.
src="$(ls "$work"/wheel/llama_cpp_python-"$version"-*.whl | head -1)"
rm -rf "$work/slim" && mkdir -p "$work/slim" && (cd "$work/slim" && python3 -m zipfile -e "$src" .)
(cd "$work/slim/llama_cpp/lib" && for so in *.so.0; do
  for name in "${so%.0}" "$so".*; do [ -e "$name" ] && rm "$name" && ln -s "$so" "$name"; done
done)
tar -C "$work/slim" -cJf "$out/llama_cpp-$version-cuda-sm$arch.tar.xz" llama_cpp "llama_cpp_python-$version.dist-info"
ls -la "$out"
