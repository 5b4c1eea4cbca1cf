"""The engine seam: ``mask_logits`` on any guide, checked on drawn masks, on llama.cpp's real logits
driven as a foreign engine would, and through the transformers example's processor."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import localguide
from localguide.grammar import compile_grammar
from localguide.guides import allowed_row, mask_logits
from localguide.json_schema import compile_json_schema
from localguide.protocol import Mask, MaskKind

ROOT = Path(__file__).resolve().parents[2]


@st.composite
def masks(draw):
    size = draw(st.integers(1, 300))
    width = size + draw(st.integers(0, 70))  # (a model's logits row may be wider than its vocabulary)
    ids = sorted(draw(st.sets(st.integers(0, size - 1), max_size=size)))
    kind = draw(st.sampled_from(list(MaskKind)))
    if kind == MaskKind.BITS:
        flags = np.zeros((size + 63) // 64 * 64, np.uint8)
        flags[ids] = 1
        data = np.packbits(flags, bitorder="little").view(np.uint64)
    elif kind == MaskKind.ALLOWED:
        data = np.array(ids, np.int32)
    else:
        data = np.array(sorted(set(range(size)) - set(ids)), np.int32)
    return Mask(kind, data), size, width, set(ids)


@given(masks(), st.integers(1, 3))
def test_every_kind_of_mask_leaves_exactly_the_allowed_logits(drawn, rows):
    mask, size, width, allowed = drawn
    logits = np.random.default_rng(size).normal(size=(rows, width)).astype(np.float32)
    before = logits.copy()
    out = mask_logits(mask, logits, vocab_size=size)
    assert out is logits
    finite = {int(t) for t in np.flatnonzero(np.isfinite(logits[0]))}
    assert finite == allowed
    assert (logits[:, sorted(allowed)] == before[:, sorted(allowed)]).all()
    assert (np.isfinite(logits) == np.isfinite(logits[0])).all()  # (every row alike)
    assert {int(t) for t in np.flatnonzero(allowed_row(mask, size))} == allowed


CONSTRAINTS = {
    "regex": (r"(19|20)\d{2}-(0[1-9]|1[0-2])", "The Berlin Wall fell in (YYYY-MM): "),
    "grammar": ('start: "(" NUM "+" NUM ")"\nNUM: /[0-9]{1,3}/', "A sum in brackets: "),
    "json_schema": ({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                     "required": ["city"], "additionalProperties": False}, "The capital of France as JSON: "),
}


def _index(kind, source, vocabulary):
    if kind == "regex":
        return localguide.compile_regex(source, vocabulary)
    if kind == "grammar":
        return compile_grammar(source, vocabulary)
    return compile_json_schema(source, vocabulary)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def engine(request):
    """A bare llama.cpp context (not a localguide.Model) and localguide's vocabulary of its file."""
    path = request.getfixturevalue(f"{request.param}_path")
    vocabulary = request.getfixturevalue(f"{request.param}_vocab")
    llm = llama_cpp.Llama(str(path), n_ctx=512, n_batch=512, verbose=False)
    yield llm, vocabulary
    llm.close()


@pytest.mark.parametrize("kind", sorted(CONSTRAINTS))
def test_a_foreign_greedy_loop_on_real_logits_writes_the_language(engine, kind):
    """An engine's own loop: its logits masked by ``mask_logits``, its argmax taken, the guide told.
    At each step the masked row keeps exactly the guide's allowed tokens, their logits unchanged."""
    llm, vocabulary = engine
    source, prompt = CONSTRAINTS[kind]
    guide = _index(kind, source, vocabulary).guide()
    n_vocab = llm.n_vocab()
    llm.reset()
    llm.eval(llm.tokenize(prompt.encode(), add_bos=True))
    out = []
    for _ in range(48):
        raw = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)).copy()
        row = mask_logits(guide, raw.copy())
        allowed = guide.allowed_token_ids()
        assert (np.flatnonzero(np.isfinite(row)) == allowed).all()
        assert (row[allowed] == raw[allowed]).all()
        token = int(np.argmax(row))
        if token in vocabulary.stop_ids:
            assert guide.is_accepting()
            break
        guide.advance(token)
        out.append(token)
        llm.eval([token])
    else:
        pytest.fail("no end within 48 tokens")
    text = vocabulary.decode(out).decode("utf-8")
    if kind == "regex":
        assert re.fullmatch(source, text)
    elif kind == "grammar":
        assert re.fullmatch(r"\([0-9]{1,3}\+[0-9]{1,3}\)", text)
    else:
        assert set(json.loads(text)) == {"city"}


def _example():
    spec = importlib.util.spec_from_file_location("transformers_example", ROOT / "examples" / "transformers_logits_processor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _ByteLevelTokenizer:
    """What a transformers byte-level BPE tokenizer answers, made from a GGUF vocabulary's bytes."""

    def __init__(self, vocabulary):
        table = {b: c for c, b in _example().byte_level_table().items()}
        self.tokens = ["".join(table[b] for b in vocabulary[t]) for t in range(len(vocabulary))]
        self.all_special_ids = [t for t in range(len(vocabulary)) if not vocabulary[t]]
        self.eos_token_id = int(vocabulary.eos_id)

    def __len__(self):
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        return [self.tokens[i] for i in ids]


def test_the_example_reads_a_byte_level_tokenizer_back_to_the_same_bytes(smollm2_vocab):
    example = _example()
    got = example.hf_vocabulary(_ByteLevelTokenizer(smollm2_vocab))
    assert len(got) == len(smollm2_vocab)
    assert all(got[t] == smollm2_vocab[t] for t in range(len(got)))
    assert example.token_bytes("\u2581the", {}, True) == b" the" and example.token_bytes("<0x0A>", {}, True) == b"\n"


def test_the_examples_processor_drives_generation_as_transformers_calls_it(engine):
    """transformers calls the processor with the whole sequence and a (batch, vocabulary) row of
    scores at each step: here numpy arrays from llama.cpp's logits."""
    llm, vocabulary = engine
    example = _example()
    prompt = llm.tokenize(b"The Berlin Wall fell in (YYYY-MM): ", add_bos=True)
    index = localguide.compile_regex(CONSTRAINTS["regex"][0], vocabulary)
    processor = example.GuideLogitsProcessor(index.guide(), len(prompt))
    llm.reset()
    llm.eval(prompt)
    ids = list(prompt)
    for _ in range(16):
        raw = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        scores = processor(np.array([ids]), raw.copy()[None, :])
        token = int(np.argmax(scores[0]))
        if token in vocabulary.stop_ids:
            break
        ids.append(token)
        llm.eval([token])
    assert re.fullmatch(CONSTRAINTS["regex"][0], vocabulary.decode(ids[len(prompt):]).decode())


def test_the_engine_neutral_layers_work_without_llama_cpp(tmp_path, smollm2_vocab):
    """With llama_cpp unimportable: a vocabulary of bytes, the four kinds compiled, guides walked
    and logits masked."""
    code = """
import sys
sys.modules["llama_cpp"] = None  # (import llama_cpp now fails)
import numpy as np
import localguide
from localguide.guides import mask_logits
from localguide.constraint import Constraint
tokens = [b"", b"a", b"b", b"{", b"}", b'"', b":", b"1", b"x", b" "]
v = localguide.Vocabulary.from_tokens(tokens, stop_ids=[0])
for c in (Constraint.of(regex="a+b"), Constraint.of(choice=["ab", "ba"]),
          Constraint.of(grammar='start: "a" "b"*'), Constraint.of(json_schema={"type": "integer"})):
    g = c.compile(v).guide()
    row = mask_logits(g, np.zeros(len(tokens), np.float32))
    assert np.isfinite(row).any(), c
assert "llama_cpp" not in sys.modules or sys.modules["llama_cpp"] is None
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
