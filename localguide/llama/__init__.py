"""The old path of the llama.cpp engine (``localguide.engines.llamacpp``), the chat layer
(``localguide.chat``) and the guide combinators (``localguide.guides``): each old module
name still imports, as the module at its new place (``localguide.runtime.oldpaths``)."""

from ..runtime.oldpaths import getattr_of

__getattr__ = getattr_of(__name__)
