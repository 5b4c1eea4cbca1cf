"""localguide: structured generation for local LLMs (GGUF models through llama.cpp).

    import localguide
    model = localguide.load()                      # the default model
    model.generate("Year of birth:", regex=r"(19|20)\\d{2}")

The flow: Vocabulary → constraint → byte DFA → Index → Guide → llama.cpp sampler.
"""

from ._version import __version__
from .errors import (
    BudgetError,
    EmptyLanguageError,
    LocalguideError,
    ModelFileError,
    PatternError,
    TokenNotAllowedError,
    UnsupportedPatternError,
)
from .vocabulary import Vocabulary
from .index import Guide, Index
from .regex import compile_choice, compile_regex
from .grammar import GrammarError, compile_grammar, list_grammars
from .json_schema import SchemaError, UnsupportedSchemaError, compile_json_schema
from .llama import Model, default_model_path, load

__all__ = [
    "BudgetError", "EmptyLanguageError", "GrammarError", "Guide", "Index", "LocalguideError", "Model",
    "ModelFileError", "PatternError", "SchemaError", "TokenNotAllowedError", "UnsupportedPatternError",
    "UnsupportedSchemaError", "compile_json_schema",
    "Vocabulary", "compile_choice", "compile_grammar", "compile_regex", "default_model_path",
    "list_grammars", "load", "__version__",
]
