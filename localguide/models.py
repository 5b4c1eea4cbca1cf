"""Where users keep their GGUF models, and a model named the way they name it there.

``resolve(name)`` takes a path (any file that starts with GGUF's magic bytes, whatever its name:
Ollama's blobs are ``sha256-...``), an Ollama name (``llama3.2:1b``, ``user/model:tag``: its
manifest's model layer, a blob of Ollama's store), an LM Studio entry (``publisher/repo`` or
``publisher/repo/file.gguf`` under its models folder) or a Hugging Face cache entry
(``org/repo``, ``org/repo/file.gguf`` or ``org/repo:Q4_K_M``, the newest snapshot). Where nothing
matches, the error lists every place it looked. ``find()`` lists what the stores hold
(``localguide models``). Only the local disk is read: nothing is fetched.

The stores' folders: ``OLLAMA_MODELS`` (else ``~/.ollama/models``, then the Linux service's
``/usr/share/ollama/.ollama/models``); LM Studio's ``~/.lmstudio/models`` (or where
``~/.lmstudio-home-pointer`` says) and the older ``~/.cache/lm-studio/models``; ``HF_HUB_CACHE``
(else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelFileError

MAGIC = b"GGUF"
_OLLAMA_REGISTRY = "registry.ollama.ai"
_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"


class NotFound(ModelFileError):
    """No file of that name, and no store holds a model of that name."""


@dataclass(frozen=True)
class Found:
    """A model a store holds: the name that ``resolve`` takes, its file, the store, its size."""

    name: str
    path: Path
    store: str
    size: int


def is_gguf(path: Path) -> bool:
    """Whether ``path`` is a file that starts with GGUF's magic bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def resolve(name) -> Path:
    """The GGUF file that ``name`` (a path or a store's name, see the module docstring) means;
    ``ModelFileError`` saying where it looked where nothing matches."""
    text = str(name)
    if "\0" in text:
        raise NotFound(text, "model file not found (a NUL in its name)")
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # (~someone who is no user here)
        path = Path(text)
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError:  # (a name the file system refuses, too long: no file of that name)
        is_file = is_dir = False
    if is_file:
        if not is_gguf(path):
            raise ModelFileError(path, "not a GGUF model file (it does not start with GGUF's magic bytes)")
        return path
    if is_dir:
        raise ModelFileError(path, "a folder, not a model file: name a .gguf file in it")
    looked = []
    for store in (_ollama, _lmstudio, _huggingface):
        try:
            hit, where = store(text)
        except ModelFileError:
            raise
        except OSError:
            continue
        if hit is not None:
            return hit
        looked += where
    where = "; ".join(looked) if looked else "no model store exists on this machine"
    raise NotFound(text, f"model file not found, nor a model of that name in a store (looked in: {where})")


def find() -> list[Found]:
    """Every GGUF model the stores on this machine hold, store by store."""
    return _ollama_all() + _lmstudio_all() + _huggingface_all()


# -- Ollama -------------------------------------------------------------------------------------

def ollama_roots() -> list[Path]:
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return [Path(env).expanduser()]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


_OLLAMA_NAME = re.compile(r"(?:(?P<host>[\w.-]+\.[\w.-]+(?::\d+)?)/)?(?:(?P<ns>[\w.-]+)/)?(?P<model>[\w.-]+)"
                          r"(?::(?P<tag>[\w.-]+))?")


def _ollama(text: str) -> tuple[Path | None, list[str]]:
    m = _OLLAMA_NAME.fullmatch(text)
    looked = []
    for root in ollama_roots():
        if not (root / "manifests").is_dir():
            continue
        looked.append(f"Ollama's store {root}")
        if m is None:
            continue
        manifest = (root / "manifests" / (m["host"] or _OLLAMA_REGISTRY) / (m["ns"] or "library") / m["model"]
                    / (m["tag"] or "latest"))
        if manifest.is_file():
            blob = _ollama_blob(root, manifest)
            if blob is None:
                raise ModelFileError(manifest, "Ollama's manifest names no model layer whose blob is on disk")
            return blob, looked
    return None, looked


def _ollama_blob(root: Path, manifest: Path) -> Path | None:
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(layers, list):
        return None
    for layer in layers:
        if isinstance(layer, dict) and layer.get("mediaType") == _OLLAMA_MODEL_LAYER:
            digest = str(layer.get("digest", ""))
            blob = root / "blobs" / digest.replace(":", "-")
            if re.fullmatch(r"sha256[:-][0-9a-f]{64}", digest) and is_gguf(blob):
                return blob
    return None


def _ollama_all() -> list[Found]:
    out = []
    for root in ollama_roots():
        top = root / "manifests"
        if not top.is_dir():
            continue
        for manifest in sorted(p for p in top.rglob("*") if p.is_file()):
            parts = manifest.relative_to(top).parts
            if len(parts) != 4:
                continue
            host, ns, model, tag = parts
            name = ("" if host == _OLLAMA_REGISTRY else host + "/") + ("" if ns == "library" else ns + "/") \
                + f"{model}:{tag}"
            blob = _ollama_blob(root, manifest)
            if blob is not None:
                out.append(Found(name, blob, f"Ollama ({root})", blob.stat().st_size))
    return out


# -- LM Studio ----------------------------------------------------------------------------------

def lmstudio_roots() -> list[Path]:
    home = Path.home()
    roots = []
    pointer = home / ".lmstudio-home-pointer"
    try:
        roots.append(Path(pointer.read_text(encoding="utf-8").strip()) / "models")
    except OSError:
        pass
    roots += [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    seen, out = set(), []
    for r in roots:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def _lmstudio(text: str) -> tuple[Path | None, list[str]]:
    looked = []
    parts = text.split("/")
    for root in lmstudio_roots():
        if not root.is_dir():
            continue
        looked.append(f"LM Studio's models {root}")
        if len(parts) == 3 and parts[2].lower().endswith(".gguf"):
            path = root.joinpath(*parts)
            if is_gguf(path):
                return path, looked
        elif len(parts) == 2 and all(parts):
            found = _only_gguf(root / parts[0] / parts[1], text)
            if found is not None:
                return found, looked
    return None, looked


def _lmstudio_all() -> list[Found]:
    out = []
    for root in lmstudio_roots():
        if root.is_dir():
            for path in sorted(root.glob("*/*/*.gguf")):
                if is_gguf(path):
                    rel = path.relative_to(root).as_posix()
                    out.append(Found(rel, path, f"LM Studio ({root})", path.stat().st_size))
    return out


# -- the Hugging Face cache ---------------------------------------------------------------------

def huggingface_root() -> Path:
    env = os.environ.get("HF_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("HF_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".cache" / "huggingface") / "hub"


def _snapshot(repo_dir: Path) -> Path | None:
    """The snapshot ``refs/main`` names, else the newest one."""
    snaps = repo_dir / "snapshots"
    try:
        ref = (repo_dir / "refs" / "main").read_text(encoding="utf-8").strip()
        if (snaps / ref).is_dir():
            return snaps / ref
    except OSError:
        pass
    found = [p for p in snaps.glob("*") if p.is_dir()] if snaps.is_dir() else []
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _huggingface(text: str) -> tuple[Path | None, list[str]]:
    root = huggingface_root()
    if not root.is_dir():
        return None, []
    looked = [f"the Hugging Face cache {root}"]
    m = re.fullmatch(r"([\w.-]+)/([\w.-]+?)(?:/(.+\.gguf)|:([\w.-]+))?", text, re.IGNORECASE)
    if m is None:
        return None, looked
    org, repo, file, quant = m.groups()
    snap = _snapshot(root / f"models--{org}--{repo}")
    if snap is None:
        return None, looked
    if file is not None:
        path = snap / file
        return (path if is_gguf(path) else None), looked
    return _only_gguf(snap, text, quant), looked


def _huggingface_all() -> list[Found]:
    root = huggingface_root()
    out = []
    if root.is_dir():
        for repo_dir in sorted(root.glob("models--*--*")):
            snap = _snapshot(repo_dir)
            if snap is None:
                continue
            org, repo = repo_dir.name[len("models--"):].split("--", 1)
            for path in sorted(snap.rglob("*.gguf")):
                if is_gguf(path):
                    out.append(Found(f"{org}/{repo}/{path.relative_to(snap).as_posix()}", path,
                                     f"Hugging Face ({root})", path.stat().st_size))
    return out


def _only_gguf(folder: Path, text: str, quant: str | None = None) -> Path | None:
    """The one GGUF file in ``folder`` (with ``quant`` in its name where given); an error naming
    the candidates where several are there."""
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.rglob("*.gguf") if is_gguf(p) and "mmproj" not in p.name.lower())
    if quant is not None:
        files = [p for p in files if quant.lower() in p.name.lower()]
    # (a model split in parts, name-00001-of-00003.gguf: llama.cpp loads it from its first part)
    files = [p for p in files if not re.search(r"-\d{5}-of-\d{5}\.gguf$", p.name) or "-00001-of-" in p.name]
    if len(files) == 1:
        return files[0]
    if not files:
        return None
    names = ", ".join(p.relative_to(folder).as_posix() for p in files)
    raise ModelFileError(text, f"several models there ({names}): name one as {text.split(':')[0]}/FILE.gguf")
