"""Vocabularies read from GGUF files: raw token bytes, stop ids, control tokens, byte fallback."""

from __future__ import annotations

import ctypes
import os
import random
import subprocess
import sys
import textwrap

import llama_cpp
import numpy as np
import pytest

from localguide import Vocabulary

from conftest import byte_fallback_tokens, llama_vocab, tokenize

EXPECTED_SIZE = {"smollm2": 49152, "gemma3": 262144}

SAMPLE_TEXTS = [
    "Hello world",
    "The year 1987 was: 42% better!",
    "  two  spaces\n\nnew\tline",
    "héllo wörld ñ",
    "日本語 中文",
    "😀🙏 emoji",
    "a  b   c",
    "snake_case = {\"key\": [1, 2.5e-3]}",
    " leading space",
    "trailing space ",
]


def test_sizes(vocab, request):
    name = request.node.callspec.params["vocab"]
    assert vocab.size == len(vocab) == EXPECTED_SIZE[name]
    assert len(vocab.offsets) == vocab.size + 1
    assert vocab.offsets[-1] == len(vocab.flat)


def test_sizes_match_llama_cpp(model):
    assert model.vocabulary.size == model.llama.n_vocab()


def test_stop_ids_contain_eos(model):
    vocab = model.vocabulary
    eos = model.llama.token_eos()
    assert vocab.stop_ids.dtype == np.int32
    assert eos in vocab.stop_ids.tolist()
    assert vocab.eos_id == eos
    assert np.all(np.diff(vocab.stop_ids) > 0)
    v = llama_vocab(model)
    for t in vocab.stop_ids.tolist():
        assert llama_cpp.llama_vocab_is_eog(v, t)
        assert vocab[t] == b""


def test_every_end_of_generation_token_is_a_stop_id(model):
    v = llama_vocab(model)
    eog = [t for t in range(model.vocabulary.size) if llama_cpp.llama_vocab_is_eog(v, t)]
    assert eog == model.vocabulary.stop_ids.tolist()


def test_control_tokens_are_empty(model):
    vocab = model.vocabulary
    v = llama_vocab(model)
    control = [t for t in range(vocab.size)
               if llama_cpp.llama_vocab_get_attr(v, t) & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL]
    assert len(control) > 0
    assert all(vocab[t] == b"" for t in control)
    # e.g. the chat markers are control tokens, never text
    bos = model.llama.token_bos()
    if bos >= 0:
        assert vocab[bos] == b""


def piece(model, token: int) -> bytes:
    """llama.cpp's rendering of one token as plain text (no special rendering)."""
    buf = ctypes.create_string_buffer(1024)
    n = llama_cpp.llama_token_to_piece(llama_vocab(model), token, buf, len(buf), 0, False)
    assert n >= 0
    return buf.raw[:n]


def test_text_tokens_match_llama_cpp_pieces(model):
    """A random sample of normal tokens: our bytes are llama.cpp's own pieces."""
    vocab = model.vocabulary
    v = llama_vocab(model)
    rng = random.Random(7)
    normal = [t for t in rng.sample(range(vocab.size), 3000)
              if llama_cpp.llama_vocab_get_attr(v, t) & llama_cpp.LLAMA_TOKEN_ATTR_NORMAL]
    assert len(normal) > 1000
    for t in normal:
        assert len(vocab[t]) > 0
        assert vocab[t] == piece(model, t), t


def test_gemma_byte_tokens(gemma3):
    vocab = gemma3.vocabulary
    byte_ids = byte_fallback_tokens(gemma3)
    # <0x00> .. <0xFF>: all 256 bytes are covered, each by a single-byte token.
    assert sorted(byte_ids) == list(range(256))
    for b, t in byte_ids.items():
        assert vocab[t] == bytes([b]), (hex(b), t, vocab[t])
    assert vocab[byte_ids[0x41]] == b"A"
    assert vocab[byte_ids[0xF0]] == b"\xf0"


def test_smollm2_single_byte_tokens(smollm2_vocab):
    """GPT-2 byte-level BPE: the base tokens are single bytes. SmolLM2 lacks a few of them
    (some control bytes, bytes never in UTF-8, and the lead bytes F1/F2), but has every
    byte of printable ASCII and of the UTF-8 encodings of the BMP and of emoji."""
    lengths = np.diff(smollm2_vocab.offsets)
    singles = {smollm2_vocab[t][0] for t in np.flatnonzero(lengths == 1).tolist()}
    needed = set(range(0x20, 0x7F)) | set(b"\t\n\r") | set(range(0x80, 0xC0)) | set(range(0xC2, 0xF1))
    assert needed <= singles
    assert not singles - set(range(256))


@pytest.mark.parametrize("text", SAMPLE_TEXTS)
def test_decoding_the_tokenization_reproduces_the_text(model, text):
    tokens = tokenize(model, text)
    assert len(tokens) > 0
    assert model.vocabulary.decode(tokens) == text.encode("utf-8")


def test_from_gguf_is_deterministic_and_cached(vocab, request, model_paths, cache_dir):
    name = request.node.callspec.params["vocab"]
    again = Vocabulary.from_gguf(model_paths[name])
    assert again.fingerprint == vocab.fingerprint
    np.testing.assert_array_equal(again.flat, vocab.flat)
    np.testing.assert_array_equal(again.offsets, vocab.offsets)
    np.testing.assert_array_equal(again.stop_ids, vocab.stop_ids)
    assert any(p.name.startswith("vocab-") for p in cache_dir.iterdir())


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_reading_a_model_prints_nothing_where_an_app_replaced_stderr(name, model_paths, tmp_path):
    # A fresh process: llama-cpp-python's logger is still NOTSET there, and its log callback
    # prints each line of a model load to sys.stderr (an app's, not fd 2).
    code = textwrap.dedent(f"""
        import io, sys
        import localguide
        sys.stderr = caught = io.StringIO()
        vocab = localguide.Vocabulary.from_gguf({str(model_paths[name])!r})
        model = localguide.load({str(model_paths[name])!r})
        sys.stderr = sys.__stderr__
        assert len(vocab) == model.vocabulary.size > 0
        print(repr(caught.getvalue()))
    """)
    env = {**os.environ, "LOCALGUIDE_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "''"


def test_vocabulary_is_read_only(smollm2_vocab):
    with pytest.raises(ValueError):
        smollm2_vocab.flat[0] = 0
    with pytest.raises(ValueError):
        smollm2_vocab.offsets[0] = 1


# --- synthetic vocabularies ----------------------------------------------------------------------

def test_from_tokens_roundtrip():
    tokens = [b"", b"a", b"\xe6\x97", b"\xa5", b"hello", b"a"]
    v = Vocabulary.from_tokens(tokens, [0])
    assert v.size == 6
    assert [v[t] for t in range(6)] == tokens
    assert v.decode([1, 2, 3, 4]) == b"a\xe6\x97\xa5hello"
    assert v.stop_ids.tolist() == [0]
    assert v.eos_id == 0


def test_stop_tokens_with_text_become_empty():
    v = Vocabulary.from_tokens([b"x", b"</s>", b"y", b"<eot>"], [3, 1])
    assert v.stop_ids.tolist() == [1, 3]
    assert [v[t] for t in range(4)] == [b"x", b"", b"y", b""]


def test_fingerprint_identifies_content():
    a = Vocabulary.from_tokens([b"", b"a", b"b"], [0])
    b = Vocabulary.from_tokens([b"", b"a", b"b"], [0])
    c = Vocabulary.from_tokens([b"", b"a", b"c"], [0])
    d = Vocabulary.from_tokens([b"", b"a", b"b"], [0, 1])
    e = Vocabulary.from_tokens([b"", b"ab", b""], [0])  # same flat bytes, other split
    assert a.fingerprint == b.fingerprint
    assert len({a.fingerprint, c.fingerprint, d.fingerprint, e.fingerprint}) == 4


@pytest.mark.parametrize("stops", [[], [5], [-1]])
def test_invalid_stop_ids(stops):
    with pytest.raises(ValueError):
        Vocabulary.from_tokens([b"", b"a"], stops)


def test_real_vocabularies_differ(smollm2_vocab, gemma3_vocab):
    assert smollm2_vocab.fingerprint != gemma3_vocab.fingerprint
