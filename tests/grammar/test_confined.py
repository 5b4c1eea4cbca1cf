"""``grammar.confined``: a grammar from someone untrusted is text or a name, and ``%import``
reaches lark's own grammars and the named ones only; the library's callers keep paths."""

from __future__ import annotations

import pytest

from localguide.errors import GrammarError
from localguide.grammar import compile_grammar
from localguide.grammar.confined import Confined


def test_an_allowed_folder_names_grammars_and_imports(tmp_path, smollm2_vocab):
    (tmp_path / "digits.lark").write_text("start: DIGITS\nDIGITS: /[0-9]+/\n")
    confined = Confined(tmp_path)
    idx = compile_grammar("%import digits (DIGITS)\nstart: DIGITS", smollm2_vocab, confined=confined)
    assert idx is not None
    assert compile_grammar("digits", smollm2_vocab, confined=confined) is not None
    with pytest.raises(GrammarError, match="%import digits"):
        compile_grammar("%import digits (DIGITS)\nstart: DIGITS", smollm2_vocab, confined=Confined())


def test_the_library_still_reads_its_callers_files(tmp_path, smollm2_vocab, monkeypatch):
    (tmp_path / "word.lark").write_text('start: "yes" | "no"\n')
    assert compile_grammar(str(tmp_path / "word.lark"), smollm2_vocab) is not None
    with pytest.raises(GrammarError, match="unknown grammar"):
        compile_grammar(str(tmp_path / "word.lark"), smollm2_vocab, confined=Confined())
