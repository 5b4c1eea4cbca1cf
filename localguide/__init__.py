"""localguide: structured generation for local LLMs (GGUF models through llama.cpp).

    import localguide
    model = localguide.load()                      # the default model
    model.generate("Year of birth:", regex=r"(19|20)\\d{2}")

The flow: Vocabulary → constraint → byte DFA → Index → Guide → llama.cpp sampler.
"""

__version__ = "0.1.0"

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
from .index import Index  # noqa: E402
from .guide import Guide  # noqa: E402
from .compile import compile_regex, compile_choice  # noqa: E402
from .grammar import GrammarError, compile_grammar, list_grammars  # noqa: E402
from .json_schema import SchemaError, UnsupportedSchemaError, compile_json_schema  # noqa: E402
from .model import Model, load, default_model_path  # noqa: E402

__all__ = [
    "BudgetError", "EmptyLanguageError", "GrammarError", "Guide", "Index", "LocalguideError", "Model",
    "ModelFileError", "PatternError", "SchemaError", "TokenNotAllowedError", "UnsupportedPatternError",
    "UnsupportedSchemaError", "compile_json_schema",
    "Vocabulary", "compile_choice", "compile_grammar", "compile_regex", "default_model_path",
    "list_grammars", "load",
]
