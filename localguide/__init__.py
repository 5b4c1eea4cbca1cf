"""localguide: structured generation for local LLMs (GGUF models through llama.cpp).

    import localguide
    model = localguide.load()                      # the default model
    model.generate("Year of birth:", regex=r"(19|20)\\d{2}")

The flow: Vocabulary → Constraint → byte DFA or grammar → Index → Guide → engine (llama.cpp) → text.
"""

from .runtime import oldpaths as _oldpaths, threads as _threads

_oldpaths.install()  # (the old import paths of moved modules)

_threads.prepare()  # before anything loads llama.cpp: OpenMP reads its wait policy then

from ._version import __version__  # noqa: E402
from .runtime.numba_cache import install as _install_kernel_cache  # noqa: E402
from .runtime.progress import watch_kernel_compiles as _watch_kernel_compiles  # noqa: E402

_install_kernel_cache()  # before any kernel module is imported: numba picks a cache per function then
_watch_kernel_compiles()

from .errors import (  # noqa: E402
    BudgetError,
    EmptyLanguageError,
    LocalguideError,
    ModelFileError,
    PatternError,
    TokenNotAllowedError,
    UnsupportedPatternError,
)
from typing import TYPE_CHECKING  # noqa: E402

from .vocabulary import Vocabulary  # noqa: E402
from .index import Guide, Index  # noqa: E402
from .regex import compile_choice, compile_regex  # noqa: E402

# Grammars, JSON Schema and the llama.cpp bridge are imported at their first use (a quarter of
# a second of ``import localguide`` that a regex, or ``localguide --help``, does not pay).
_LAZY = {"Constraint": "constraint", "GrammarError": "grammar", "compile_grammar": "grammar", "list_grammars": "grammar",
         "SchemaError": "json_schema", "UnsupportedSchemaError": "json_schema", "compile_json_schema": "json_schema",
         "Model": "engines.llamacpp", "default_model_path": "engines.llamacpp", "load": "engines.llamacpp"}

if TYPE_CHECKING:
    from .grammar import GrammarError, compile_grammar, list_grammars
    from .json_schema import SchemaError, UnsupportedSchemaError, compile_json_schema
    from .constraint import Constraint
    from .engines.llamacpp import Model, default_model_path, load


def __getattr__(name: str):
    import importlib

    module = _LAZY.get(name)
    if module is None:  # (``localguide.cache`` and the other old module paths, else AttributeError)
        return _oldpaths.attribute(__name__, name)
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BudgetError", "Constraint", "EmptyLanguageError", "GrammarError", "Guide", "Index", "LocalguideError", "Model",
    "ModelFileError", "PatternError", "SchemaError", "TokenNotAllowedError", "UnsupportedPatternError",
    "UnsupportedSchemaError", "compile_json_schema",
    "Vocabulary", "compile_choice", "compile_grammar", "compile_regex", "default_model_path",
    "list_grammars", "load", "__version__",
]
