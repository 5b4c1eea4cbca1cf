"""Grammar-guided generation: Lark and GBNF grammars, minimally invasive token masks.

    idx = compile_grammar("json", vocabulary)   # a shipped name, a path, or grammar text
    guide = idx.guide(max_tokens=256)
    guide.allowed_token_ids(); guide.advance(token)

Pipeline: grammar text → ``CFG`` (``lark_frontend``/``gbnf``) → normalized
(``cfg``: one limited ignored-run terminal) → Earley recognizer over a lazy LR(0)
ε-DFA (``earley``) + combined scanner DFA with trigram seeds (``lexer``) →
subterminal trees per reading, all at compile time (``kernels.grammar_trees``) →
masks (``masks``) → guide states (``compiled``, disk-cached as arrays by
``sources``) → ``GrammarGuide`` (``guide``), with budget plans (``budget``).
"""

from .compiled import GrammarIndex
from ..errors import GrammarError
from .guide import GrammarGuide
from .sources import compile_grammar, list_grammars
from ..runtime import oldpaths as _oldpaths

__all__ = ["GrammarError", "GrammarGuide", "GrammarIndex", "compile_grammar", "list_grammars"]


__getattr__ = _oldpaths.getattr_of(__name__)  # (names that moved elsewhere)
