"""Grammar-guided generation: Lark and GBNF grammars, minimally invasive token masks.

    idx = compile_grammar("json", vocabulary)   # a shipped name, a path, or grammar text
    guide = idx.guide(max_tokens=256)
    guide.allowed_token_ids(); guide.advance(token)

Pipeline: grammar text → ``CFG`` (``lark_frontend``/``gbnf``) → normalized
(``cfg``) → Earley tables (``earley``) + combined scanner DFA (``lexer``) →
subterminal trees per scanner state (``kernels``) → masks (``masks``) → guide
states (``compiled``) → ``GrammarGuide`` (``guide``).
"""

from .compiled import GrammarIndex
from .errors import GrammarError
from .guide import GrammarGuide
from .sources import compile_grammar, list_grammars

__all__ = ["GrammarError", "GrammarGuide", "GrammarIndex", "compile_grammar", "list_grammars"]
