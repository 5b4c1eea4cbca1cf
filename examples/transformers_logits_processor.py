"""localguide's constraints on another engine: Hugging Face transformers, through a ``LogitsProcessor``.

localguide compiles a constraint over a vocabulary of raw bytes and hands out guides; an engine
masks its logits with one (``localguide.guides.mask_logits``), samples as it likes, and tells
the guide the token it took. Nothing here loads llama.cpp.

    pip install transformers torch
    python examples/transformers_logits_processor.py PATH_OR_NAME   # a transformers model folder or name

(transformers is not one of localguide's dependencies: install it to run this.)
"""

from __future__ import annotations

import re
import sys

import numpy as np

import localguide
from localguide.guides import mask_logits


def byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the character each byte is written as, read back."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_bytes(token: str, table: dict[str, int], sentencepiece: bool) -> bytes:
    """One token's bytes: SentencePiece (``▁`` a space, ``<0xNN>`` a byte) or byte-level BPE."""
    if sentencepiece:
        m = _BYTE_TOKEN.fullmatch(token)
        return bytes([int(m.group(1), 16)]) if m else token.replace("\u2581", " ").encode("utf-8")
    return bytes(table[c] for c in token)


def hf_vocabulary(tokenizer) -> localguide.Vocabulary:
    """A ``localguide.Vocabulary`` of a Hugging Face tokenizer: special tokens write no text, the
    end-of-sequence token stops."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    special = set(tokenizer.all_special_ids)
    sentencepiece = any(t.startswith("\u2581") for t in tokens if t)
    table = byte_level_table()
    data = [b"" if i in special or t is None else token_bytes(t, table, sentencepiece) for i, t in enumerate(tokens)]
    return localguide.Vocabulary.from_tokens(data, stop_ids=[tokenizer.eos_token_id], eos_id=tokenizer.eos_token_id)


class GuideLogitsProcessor:
    """A transformers ``LogitsProcessor`` (one sequence) that keeps the text inside a guide's
    language: each call advances the guide by the tokens generated since the last call and masks
    the scores. ``prompt_length``: the tokens of the prompt in ``input_ids``; ``vocab_size``: the
    tokenizer's, where the model's rows of scores are wider (padded)."""

    def __init__(self, guide, prompt_length: int, vocab_size: int | None = None):
        self.guide, self.seen, self.vocab_size = guide, prompt_length, vocab_size

    def __call__(self, input_ids, scores):
        ids = np.asarray(input_ids[0].tolist() if hasattr(input_ids, "tolist") else input_ids[0])
        for token in ids[self.seen:].tolist():
            self.guide.advance(int(token))
        self.seen = len(ids)
        if isinstance(scores, np.ndarray):
            mask_logits(self.guide, scores[0], self.vocab_size)
            return scores
        row = mask_logits(self.guide, scores[0].float().cpu().numpy().copy(), self.vocab_size)  # (a torch tensor)
        scores[0] = scores.new_tensor(row)
        return scores


def main(name: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

    tokenizer = AutoTokenizer.from_pretrained(name)
    model = AutoModelForCausalLM.from_pretrained(name)
    vocabulary = hf_vocabulary(tokenizer)
    index = localguide.compile_regex(r"(19|20)\d{2}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", vocabulary)
    prompt = tokenizer("The Berlin Wall fell on (YYYY-MM-DD): ", return_tensors="pt")
    n = prompt["input_ids"].shape[1]
    out = model.generate(**prompt, max_new_tokens=16, do_sample=False,
                         logits_processor=LogitsProcessorList([GuideLogitsProcessor(index.guide(), n, len(vocabulary))]))
    print(tokenizer.decode(out[0, n:], skip_special_tokens=True))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/transformers_logits_processor.py PATH_OR_NAME")
    main(sys.argv[1])
