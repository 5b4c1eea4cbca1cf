"""Models where users keep them (``localguide.models``): Ollama's store, LM Studio's folder and
the Hugging Face cache, laid out in a temporary home around the real test models (links, not
copies), resolved by name, loaded and run through the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import localguide
from localguide.cli.run import _split_model_prompt
from localguide.errors import ModelFileError
from localguide.models import NotFound, find, resolve


def _digest(path: Path) -> str:
    return hashlib.sha256(str(path).encode()).hexdigest()  # (any 64 hex digits name a blob)


def ollama_store(root: Path, name: str, tag: str, model: Path, ns: str = "library",
                 host: str = "registry.ollama.ai") -> Path:
    """Ollama's layout: a manifest naming layers by digest, the blobs beside it."""
    digest = _digest(model) + ""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    blob = blobs / f"sha256-{digest}"
    if not blob.exists():
        blob.symlink_to(model)
    (blobs / f"sha256-{'0' * 64}").write_text('{"stop": ["<end>"]}')
    manifest = root / "manifests" / host / ns / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.params", "digest": f"sha256:{'0' * 64}", "size": 20},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
         "size": model.stat().st_size}]}))
    return blob


def hf_cache(root: Path, org: str, repo: str, files: dict[str, Path]) -> Path:
    """The Hugging Face hub cache: refs/main names a snapshot whose files link to blobs."""
    base = root / f"models--{org}--{repo}"
    snap = base / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text("0123abcd")
    (base / "blobs").mkdir()
    for name, target in files.items():
        (snap / name).symlink_to(target)
    return snap


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home of no stores: OLLAMA_MODELS, HF_HUB_CACHE and HOME point into ``tmp_path``."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HOME", raising=False)
    (tmp_path / "home").mkdir()
    return tmp_path


def test_ollama_names_resolve_to_their_blob(home, smollm2_path, gemma3_path):
    blob = ollama_store(home / "ollama", "smol", "135m", smollm2_path)
    ollama_store(home / "ollama", "smol", "latest", smollm2_path)
    gem = ollama_store(home / "ollama", "gemma3", "270m", gemma3_path, ns="me")
    hf = ollama_store(home / "ollama", "repo", "Q4_K_M", gemma3_path, ns="org", host="hf.co")
    assert resolve("smol:135m") == blob and resolve("smol") == blob
    assert resolve("me/gemma3:270m") == gem and resolve("hf.co/org/repo:Q4_K_M") == hf
    with pytest.raises(NotFound, match="Ollama's store"):
        resolve("smol:7b")
    names = {f.name for f in find()}
    assert {"smol:135m", "smol:latest", "me/gemma3:270m", "hf.co/org/repo:Q4_K_M"} <= names


def test_a_blob_without_an_extension_is_a_model(home, smollm2_path):
    blob = ollama_store(home / "ollama", "smol", "135m", smollm2_path)
    assert resolve(blob) == blob and resolve(str(blob)) == blob
    text = home / "notes.txt"
    text.write_text("not a model")
    with pytest.raises(ModelFileError, match="magic"):
        resolve(text)
    with pytest.raises(ModelFileError, match="folder"):
        resolve(home)


def test_lm_studio_and_the_hugging_face_cache(home, smollm2_path, gemma3_path):
    lm = home / "home" / ".lmstudio" / "models" / "pub" / "SmolLM2-GGUF"
    lm.mkdir(parents=True)
    (lm / "smol-Q4_1.gguf").symlink_to(smollm2_path)
    assert resolve("pub/SmolLM2-GGUF") == lm / "smol-Q4_1.gguf"
    assert resolve("pub/SmolLM2-GGUF/smol-Q4_1.gguf") == lm / "smol-Q4_1.gguf"
    snap = hf_cache(home / "hub", "google", "gemma-3-270m-GGUF", {"gemma-Q4_K_M.gguf": gemma3_path,
                                                                  "gemma-Q4_1.gguf": smollm2_path})
    assert resolve("google/gemma-3-270m-GGUF:Q4_K_M") == snap / "gemma-Q4_K_M.gguf"
    assert resolve("google/gemma-3-270m-GGUF/gemma-Q4_1.gguf") == snap / "gemma-Q4_1.gguf"
    with pytest.raises(ModelFileError, match="gemma-Q4_1.gguf, gemma-Q4_K_M.gguf"):
        resolve("google/gemma-3-270m-GGUF")
    stores = {f.store.split(" ")[0] for f in find()}
    assert {"LM", "Hugging"} <= stores


def test_nothing_found_says_where_it_looked(home, smollm2_path):
    ollama_store(home / "ollama", "smol", "135m", smollm2_path)
    (home / "hub").mkdir()
    with pytest.raises(NotFound) as e:
        resolve("llama3.2:1b")
    assert "model file not found" in str(e.value)
    assert str(home / "ollama") in str(e.value) and str(home / "hub") in str(e.value)


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_a_model_loaded_by_its_ollama_name_generates(home, model_paths, name):
    ollama_store(home / "ollama", name, "test", model_paths[name])
    model = localguide.load(f"{name}:test", n_ctx=512)
    assert model.generate("Is the sky blue? Answer:", choice=["yes", "no"], seed=0, max_tokens=4) in ("yes", "no")


def test_the_cli_takes_a_blob_path_and_an_ollama_name(home, smollm2_path):
    blob = ollama_store(home / "ollama", "smol", "135m", smollm2_path)
    env = {**os.environ, "HOME": str(home / "home"), "OLLAMA_MODELS": str(home / "ollama"),
           "HF_HUB_CACHE": str(home / "hub")}
    for model in (str(blob), "smol:135m"):
        r = subprocess.run([sys.executable, "-m", "localguide.cli", "run", model, "Is the sky blue?", "--choice", "yes",
                            "--choice", "no", "--seed", "1"], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() in ("yes", "no")
    r = subprocess.run([sys.executable, "-m", "localguide.cli", "models"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and "smol:135m" in r.stdout and str(home / "ollama") in r.stdout
    r = subprocess.run([sys.executable, "-m", "localguide.cli", "run", "nosuch:model", "hi"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode != 0 and "looked in" in r.stderr and "nosuch:model" in r.stderr


def test_one_argument_is_the_model_where_it_names_one(home, smollm2_path):
    blob = ollama_store(home / "ollama", "smol", "135m", smollm2_path)
    assert _split_model_prompt(str(blob), None) == (str(blob), None)
    assert _split_model_prompt("smol:135m", None) == ("smol:135m", None)
    assert _split_model_prompt("Is the sky blue?", None) == (None, "Is the sky blue?")
    assert _split_model_prompt("missing.gguf", None) == ("missing.gguf", None)
    assert _split_model_prompt("llama3.2:1b", "hi") == ("llama3.2:1b", "hi")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_text_resolves_or_says_why(text):
    try:
        resolve(text)
    except ModelFileError as e:
        assert str(e)
    except OSError as e:  # (a name the file system refuses: too long, and the like)
        assert e.errno is not None


def test_a_split_model_resolves_to_its_first_part_and_a_bad_manifest_is_no_model(home, smollm2_path):
    snap = hf_cache(home / "hub", "org", "big-GGUF", {"big-Q4-00001-of-00002.gguf": smollm2_path,
                                                      "big-Q4-00002-of-00002.gguf": smollm2_path})
    assert resolve("org/big-GGUF") == snap / "big-Q4-00001-of-00002.gguf"
    manifest = home / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "odd" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"layers": null}')
    with pytest.raises(ModelFileError, match="no model layer"):
        resolve("odd")
    old = home / "home" / ".cache" / "lm-studio" / "models" / "pub" / "Old-GGUF"
    old.mkdir(parents=True)
    (old / "old.gguf").symlink_to(smollm2_path)
    (home / "home" / ".lmstudio" / "models").mkdir(parents=True)  # (the newer folder, without it)
    assert resolve("pub/Old-GGUF") == old / "old.gguf"
