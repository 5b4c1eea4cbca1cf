"""The import paths of modules that moved when the package took its folders: ``localguide.llama``
and its modules still import, each as the very module at its new place (not a copy), so that
code written against the old paths keeps working, monkeypatches included."""

from __future__ import annotations

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


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module) -> None:
        pass


def install() -> None:
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
