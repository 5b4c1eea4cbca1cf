"""The old path of the llama.cpp engine (``localguide.engines.llamacpp``), the chat layer
(``localguide.chat``) and the guide combinators (``localguide.guides``): each old module
name still imports, as the module at its new place (``localguide.runtime.oldpaths``)."""

import importlib

from ..runtime.oldpaths import MOVED


def __getattr__(name: str):
    new = MOVED.get(f"{__name__}.{name}")
    if new is not None:
        return importlib.import_module(new)
    engine = importlib.import_module("localguide.engines.llamacpp")
    try:
        return getattr(engine, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
