"""localguide: structured generation for local LLMs (GGUF models through llama.cpp).

    import localguide
    model = localguide.load()                      # the default model
    model.generate("Year of birth:", regex=r"(19|20)\\d{2}")

The flow: Vocabulary → constraint → byte DFA → Index → Guide → llama.cpp sampler.
"""

from ._version import __version__
from .numba_cache import install as _install_kernel_cache
from .progress import watch_kernel_compiles as _watch_kernel_compiles

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
from .vocabulary import Vocabulary  # noqa: E402
from .index import Guide, Index  # noqa: E402
from .regex import compile_choice, compile_regex  # noqa: E402
from .grammar import GrammarError, compile_grammar, list_grammars  # noqa: E402
from .json_schema import SchemaError, UnsupportedSchemaError, compile_json_schema  # noqa: E402
from .llama import Model, default_model_path, load  # noqa: E402

__all__ = [
    "BudgetError", "EmptyLanguageError", "GrammarError", "Guide", "Index", "LocalguideError", "Model",
    "ModelFileError", "PatternError", "SchemaError", "TokenNotAllowedError", "UnsupportedPatternError",
    "UnsupportedSchemaError", "compile_json_schema",
    "Vocabulary", "compile_choice", "compile_grammar", "compile_regex", "default_model_path",
    "list_grammars", "load", "__version__",
]
