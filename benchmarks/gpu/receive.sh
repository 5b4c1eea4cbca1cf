#!/usr/bin/env bash
# On the GPU machine: take one folder that pack.py made into the store, joining each file whose
# parts are all there (checked against its SHA-256). Prints what the store holds.
#   bash benchmarks/gpu/receive.sh FOLDER [STORE]     (default store: /tmp/lg-gpu)
set -euo pipefail
src="$1"
store="${2:-/tmp/lg-gpu}"
mkdir -p "$store/parts"
cp "$src"/*.part* "$store/parts/"
cat "$src/manifest.json" >> "$store/parts/manifests.jsonl"
python3 - "$store" <<'PY'
import hashlib, json, os, sys
store = sys.argv[1]
parts = os.path.join(store, "parts")
text = open(os.path.join(parts, "manifests.jsonl")).read()
entries, dec, i = [], json.JSONDecoder(), 0
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    got, i = dec.raw_decode(text, i)
    entries += got
files = {}
for e in entries:
    files.setdefault(e["file"], {})[e["index"]] = e
for name, got in sorted(files.items()):
    total = next(iter(got.values()))["parts"]
    dest = os.path.join(store, name)
    if os.path.exists(dest):
        continue
    if len(got) < total or not all(os.path.exists(os.path.join(parts, got[k]["part"])) for k in range(total)):
        print(f"waiting: {name} ({len(got)} of {total} parts)")
        continue
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    h = hashlib.sha256()
    with open(dest + ".tmp", "wb") as out:
        for k in range(total):
            p = os.path.join(parts, got[k]["part"])
            with open(p, "rb") as f:
                data = f.read()
            h.update(data)
            out.write(data)
            os.remove(p)
    if h.hexdigest() != got[0]["sha256"]:
        os.remove(dest + ".tmp")
        sys.exit(f"{name}: SHA-256 differs from the manifest's: carry its parts again")
    if dest.endswith(".xz"):
        import lzma, shutil
        with lzma.open(dest + ".tmp") as f_in, open(dest[:-3], "wb") as f_out:
            shutil.copyfileobj(f_in, f_out, 1 << 22)
        os.remove(dest + ".tmp")
        open(dest, "w").close()  # (a marker: joined)
        dest = dest[:-3]
    else:
        os.replace(dest + ".tmp", dest)
    print(f"joined: {dest} ({os.path.getsize(dest)} bytes)")
PY
