"""The import paths of modules and names that moved when the package took its folders:
``localguide.llama.model``, ``localguide.cache`` and the rest still import, each as the very module
at its new place (not a copy: monkeypatches reach it), ``python -m`` included; a name that left a
module that still exists is found where it went (``attribute``, a module's ``__getattr__``)."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "localguide.llama.model": "localguide.engines.llamacpp.model",
    "localguide.llama.loop": "localguide.engines.llamacpp.loop",
    "localguide.llama.sampler": "localguide.engines.llamacpp.sampler",
    "localguide.llama.candidates_kernels": "localguide.engines.llamacpp.candidates_kernels",
    "localguide.llama.candidates_numpy": "localguide.engines.llamacpp.candidates_numpy",
    "localguide.llama.native_kernels": "localguide.engines.llamacpp.native_kernels",
    "localguide.llama.invasiveness": "localguide.engines.llamacpp.invasiveness",
    "localguide.llama.reproducible": "localguide.engines.llamacpp.reproducible",
    "localguide.server.engine": "localguide.engines.llamacpp.batch",
    "localguide.quiet": "localguide.engines.llamacpp.quiet",
    "localguide.llama.trigger": "localguide.guides.trigger",
    "localguide.llama.tool_guides": "localguide.guides.tool_guides",
    "localguide.llama.healing": "localguide.guides.healing",
    "localguide.llama.stops": "localguide.guides.stops",
    "localguide.llama.chat": "localguide.chat.conversation",
    "localguide.llama.template": "localguide.chat.template",
    "localguide.llama.tools": "localguide.chat.tools",
    "localguide.llama.partial_json": "localguide.chat.partial_json",
    "localguide.llama.plain": "localguide.chat.plain",
    "localguide.cache": "localguide.runtime.cache",
    "localguide.lru": "localguide.runtime.lru",
    "localguide.numba_tools": "localguide.runtime.numba_tools",
    "localguide.numba_cache": "localguide.runtime.numba_cache",
    "localguide.progress": "localguide.runtime.progress",
    "localguide.held": "localguide.runtime.held",
    "localguide.gcpause": "localguide.runtime.gcpause",
    "localguide.slabs": "localguide.runtime.slabs",
    "localguide.threads": "localguide.runtime.threads",
    "localguide.packing": "localguide.runtime.packing",
    "localguide.grammar.warmup": "localguide.runtime.warmup",
    "localguide.grammar.rehearsal": "localguide.engines.llamacpp.rehearsal",
    "localguide.compile_workers": "localguide.server.compile_workers",
    "localguide.info": "localguide.cli.info",
}


# Names that left a module that still exists: module -> {name: the module that holds it now}.
NAMES = {
    "localguide.regex.ast_dfa": {"warm_kernels": "localguide.regex.compile"},
    "localguide.regex.ast": {"to_regex": "localguide.regex.emit"},
    "localguide.chat.template": {"BuiltinTemplate": "localguide.engines.llamacpp.templates"},
    "localguide.speculate": {"constraint_key": "localguide.constraint"},
    "localguide.runtime.warmup": {"warm": "localguide.engines.llamacpp.rehearsal",
                                  "main": "localguide.engines.llamacpp.rehearsal"},
    "localguide.cli.info": {"backend": "localguide.engines.llamacpp.system"},
    "localguide.llama": {n: "localguide.engines.llamacpp" for n in
                         ("GuideSampler", "Model", "SamplerChain", "Sampling", "default_model_path", "load")},
}


def attribute(module: str, name: str):
    """``module.name`` where it moved: a submodule's old path, or a name now held elsewhere
    (a module's ``__getattr__`` calls this)."""
    new = MOVED.get(f"{module}.{name}")
    if new is not None:
        return importlib.import_module(new)
    where = NAMES.get(module, {}).get(name)
    if where is not None:
        return getattr(importlib.import_module(where), name)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def getattr_of(module: str):
    """``module``'s ``__getattr__``: its names that moved, found where they went (``attribute``)."""
    return functools.partial(attribute, module)


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # (the import system sets the old spec on it: put back)
        return module

    def exec_module(self, module) -> None:
        if module.__spec__ is not None and module.__spec__.loader_state is not None:
            module.__spec__ = module.__spec__.loader_state

    def get_code(self, name: str):
        """``python -m`` an old path: run the module at its new place as ``__main__``."""
        return compile(f"import runpy\nrunpy.run_module({MOVED[name]!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{name}>", "exec")


def install() -> None:
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
