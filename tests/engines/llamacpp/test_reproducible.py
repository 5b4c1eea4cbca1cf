"""Reproducible logits, on both models through real llama.cpp: a position's logits are bitwise the
same whatever batch it and the positions before it were decoded in, so greedy text is the same
with the prompt cache warm or cold and with speculation on or off (``localguide.engines.llamacpp.reproducible``).

The prompts are ones whose greedy text parted with llama.cpp's fastest kernels (``load(reproducible=
False)``): a few-shot prompt of 64 tokens or more (decoded whole, it attends through tiled flash
attention; decoded after its cached prefix, row by row), and answers verified in batches of 4
tokens or more (Gemma 3's repacked Q4_K weights: a gemm kernel for 4 rows at a time, a gemv kernel
for one). Measured before: SmolLM2 wrote " Cartagallonia" for Colombia's capital cold, " Bogota"
after the unconstrained run of the same prompt; Gemma 3 wrote 1914 for the start of World War I
cold, 1918 warm and with speculation.
"""

from __future__ import annotations

import hashlib
import json
import re

import llama_cpp
import pytest
from hypothesis import given
from hypothesis import strategies as st

import localguide
from localguide.engines.llamacpp import loop
from localguide.engines.llamacpp.reproducible import fast_layout, reusable

SHOTS = "".join(f"Country: {a}\nCapital: {b}\n" for a, b in [
    ("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Norway", "Oslo"),
    ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Chile", "Santiago")])
NAME = r"[A-Z][a-z]+( [A-Z][a-z]+)?"
CAPITALS = rf" {NAME}\nCountry: {NAME}\nCapital: {NAME}\n"  # the answer and the pair the model goes on with
COUNTRIES = ["Colombia", "Spain", "Turkey", "Iran"]
EVENT_SHOTS = ('Event: the first Olympic marathon\nJSON: {"event":"first Olympic marathon","year":1896,"city":"Athens"}\n'
               'Event: the opening of the Eiffel Tower\nJSON: {"event":"Eiffel Tower opening","year":1889,"city":"Paris"}\n')
EVENT = {"type": "object", "properties": {"event": {"type": "string", "maxLength": 32}, "year": {"type": "integer"},
                                          "city": {"type": "string", "maxLength": 16}},
         "required": ["event", "year", "city"], "additionalProperties": False}
EVENTS = ["the start of World War I", "the storming of the Bastille", "the Chernobyl disaster"]


def _rows(model, tokens, sizes) -> list[bytes]:
    """A digest of every position's logits, ``tokens`` decoded from an empty KV cache in batches of
    ``sizes`` (with logits at every position)."""
    ctx, n = model.llama.ctx, model.vocabulary.size
    batch = loop.Batch(max(sizes))
    model._reset()
    out, pos = [], 0
    try:
        for size in sizes:
            chunk = tokens[pos:pos + size]
            batch.fill(chunk, pos, 0)
            assert llama_cpp.llama_decode(ctx, batch.b) == 0
            out += [hashlib.sha1(loop.logits_at(ctx, i, n).tobytes()).digest() for i in range(len(chunk))]
            pos += size
    finally:
        batch.free()
        model._reset()
    return out


def test_a_positions_logits_do_not_depend_on_the_batches(model):
    """One batch of 70 (tiled attention), batches of 1 to 9 (one-row and 4-row products; tiled
    K-quant products from 8) and one token at a time: bitwise the same logits at every position."""
    tokens = model.tokenize_prompt(SHOTS + "Country: Vietnam\nCapital: Hanoi\n")[:70]
    assert len(tokens) == 70
    whole = _rows(model, tokens, [70])
    for sizes in ([1, 2, 3, 4, 5, 8, 9, 4, 1, 7, 6, 16, 4], [1] * 70):
        assert sum(sizes) == 70
        parts = _rows(model, tokens, sizes)
        differ = [i for i in range(70) if parts[i] != whole[i]]
        assert not differ, f"{model}: positions {differ[:8]}... differ with batches {sizes[:6]}..."
    assert model.reproducible, model.reproducible_why


@pytest.mark.parametrize("kind", ["regex", "schema"])
def test_greedy_text_is_the_same_warm_or_cold_with_speculation_or_not(eager, kind):
    """Each prompt after the last one (its few-shot prefix cached), the unconstrained text and then
    the constrained one (the prompt cached whole), with speculation on and off, then again from an
    emptied cache: one text each, and the constrained one is the unconstrained one up to its first
    complete match (DOMINO Def. 2.1)."""
    model = eager  # (drafts wherever one may be taken: verification batches of every width)
    if kind == "regex":
        cases = [(SHOTS + f"Country: {c}\nCapital:", {"regex": CAPITALS}) for c in COUNTRIES]
    else:
        cases = [(f"{EVENT_SHOTS}Event: {e}\nJSON: ", {"json_schema": EVENT}) for e in EVENTS]
    parted = []
    for prompt, constraint in cases:
        free_warm = model.generate(prompt, temperature=0, max_tokens=24)
        warm = model.generate(prompt, temperature=0, max_tokens=24, **constraint)
        assert model.last_stats.cached_tokens > 0
        warm_plain = model.generate(prompt, temperature=0, max_tokens=24, speculate=False, **constraint)
        free = model.generate(prompt, temperature=0, max_tokens=24, cache_prompt=False)
        cold = model.generate(prompt, temperature=0, max_tokens=24, cache_prompt=False, speculate=False,
                              **constraint)
        cold_spec = model.generate(prompt, temperature=0, max_tokens=24, cache_prompt=False, **constraint)
        texts = {"warm": warm, "warm, speculate=False": warm_plain, "cold, speculation": cold_spec}
        parted += [(prompt[-30:], way, text, cold) for way, text in texts.items() if text != cold]
        if free_warm != free:
            parted.append((prompt[-30:], "unconstrained warm", free_warm, free))
        if _first_match(free, kind) is not None:
            assert cold == _first_match(free, kind), (prompt[-30:], cold, free)
    assert not parted, parted


def _first_match(text: str, kind: str) -> str | None:
    """The shortest prefix of ``text`` in the constraint's language, or None."""
    if kind == "regex":
        return next((text[:i] for i in range(1, len(text) + 1) if re.fullmatch(CAPITALS, text[:i])), None)
    line = text.split("\n")[0]  # (compact JSON: the document is the first line, if any)
    try:
        value = json.loads(line)
    except ValueError:
        return None
    ok = (isinstance(value, dict) and list(value) == ["event", "year", "city"] and isinstance(value["year"], int)
          and len(value["event"]) <= 32 and len(value["city"]) <= 16 and line == json.dumps(value, separators=(",", ":")))
    return line if ok else None


def test_a_model_loaded_not_reproducible_says_so(smollm2_path):
    import llama_cpp.llama_cpp as lc

    from localguide.engines.llamacpp.reproducible import stored_weights

    default = lc.llama_model_default_params
    model = localguide.load(smollm2_path, n_ctx=256, reproducible=False)
    assert not model.reproducible and "reproducible=False" in model.reproducible_why
    assert lc.llama_model_default_params is default
    with stored_weights() as why:
        assert why == "" and lc.llama_model_default_params().use_extra_bufts is False
    assert lc.llama_model_default_params is default and lc.llama_model_default_params().use_extra_bufts


ITEMS = "".join(f"Item {i}: the {('red', 'blue', 'green')[i % 3]} box holds {i * 7 % 13} apples.\n" for i in range(11))
APPLES = r" [0-9]+ apples\."


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def chunked(request, model_paths):
    """The model with fast chunks of 32 tokens (its micro-batch, under ``reproducible.CHUNK``): a
    prompt of a few hundred tokens decodes in several."""
    model = localguide.load(model_paths[request.param], n_ctx=640, n_batch=32, n_ubatch=32)
    assert model.reproducible, model.reproducible_why
    assert model._chunk == 32
    return model


@pytest.mark.parametrize("chunked", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)], indirect=True)
def test_a_long_prompt_decodes_the_same_whatever_the_cache_held(chunked):  # (Gemma 3's: half a minute, slow)
    """A prompt decodes its whole chunks on the fastest kernels, the rest on the reference ones.
    The prompt is a text, the model's own continuation of it and a question. Cold, and after the
    text with its continuation (the cache's reference positions reach into the prompt's fast
    chunks), after a prefix that ends inside a chunk, after itself, and after a prompt of fewer
    chunks: the same greedy text, bitwise the same NLL of each token, and the cache reused as far
    as a cold decode computes it alike."""
    model = chunked
    went_on = model.generate(ITEMS, temperature=0, max_tokens=96)
    held = model.tokenize_prompt(ITEMS + went_on)
    for cut in range(len(went_on), 0, -1):  # (a prompt whose fast chunks end inside what the cache holds)
        prompt = ITEMS + went_on[:cut] + "\nItem 99: the red box holds"
        tokens = model.tokenize_prompt(prompt)
        fast = fast_layout(len(tokens), model._chunk)
        same = next((k for k, (a, b) in enumerate(zip(held[:-1], tokens)) if a != b), len(held) - 1)
        if 0 < fast < same:
            break
    assert 0 < fast < same, (fast, same)

    def run(**kw):
        text = model.generate(prompt, temperature=0, max_tokens=6, regex=APPLES, stats=True, **kw)
        return text, model.last_stats.nll, model.last_stats.cached_tokens

    text, nll, _ = cold = run(cache_prompt=False)
    assert re.fullmatch(APPLES, text) and nll is not None
    for i, warm in enumerate((ITEMS, prompt[:len(prompt) // 2 + 7], prompt, ITEMS[:150])):
        model.generate(warm, temperature=0, max_tokens=96)
        if i == 0:  # (what the cache holds goes on past the fast chunks of the text alone)
            same = next((k for k, (a, b) in enumerate(zip(model._kv, tokens)) if a != b), len(model._kv))
            assert fast_layout(len(model.tokenize_prompt(ITEMS)), model._chunk) < fast < same
        got = run()
        assert got[:2] == cold[:2], (warm[-20:], got, cold)
        assert model._kv_fast == fast
        assert got[2] % 32 == 0 or got[2] >= fast, got
    assert run()[2] == len(tokens) - 1  # (the prompt was cached whole: only its last token decodes again)


def test_a_shared_prefix_is_kept_to_a_chunk_boundary(chunked):
    """Prompts of different lengths after one instruction (a system prompt, few-shot examples):
    a longer prompt finds the instruction of a shorter one cached up to its last whole chunk,
    though its fast decoding goes further, and answers as from an emptied cache."""
    model = chunked
    lines = ITEMS.splitlines(keepends=True)
    head = next("".join(lines[:k]) for k in range(1, len(lines)) if len(model.tokenize_prompt("".join(lines[:k]))) > 100)
    common = len(model.tokenize_prompt(head)) - 1  # (its last token may join the question's)
    short, long = head + "Item 99: the red box holds", head + "Item 100: the blue box, " + "the last one, " * 8 + "holds"
    ends = [fast_layout(len(model.tokenize_prompt(p)), model._chunk) for p in (short, long)]
    assert common // 32 * 32 <= ends[0] < ends[1], (common, ends)
    model.generate(short, temperature=0, max_tokens=6, regex=APPLES)
    text = model.generate(long, temperature=0, max_tokens=6, regex=APPLES)
    assert model.last_stats.cached_tokens >= common // 32 * 32, (common, model.last_stats)
    assert model.generate(long, temperature=0, max_tokens=6, regex=APPLES, cache_prompt=False) == text


def test_a_conversation_decodes_fast_only_its_first_prompt(chunked):
    """Turn after turn, the cache keeps the whole history (the last prompt and the answer come
    back from it) and each answer is the one an emptied cache gives: the first turn's prompt
    decodes in fast chunks, the turns after it on the reference kernels."""
    model = chunked
    msgs = [{"role": "system", "content": "Answer from this list.\n" + ITEMS}]
    first = last = None
    for q in ("How many apples does the red box of item 3 hold?", "And item 4?"):
        msgs.append({"role": "user", "content": q})
        answer = model.chat(msgs, temperature=0, max_tokens=12).content
        stats = model.last_stats
        first = first or stats.prompt_tokens
        assert model._kv_fast == fast_layout(stats.prompt_tokens, model._chunk, first) and model._kv_fast > 0
        if last is not None:
            assert stats.cached_tokens >= last, (stats.cached_tokens, last)
        last = stats.prompt_tokens
        assert model.chat(msgs, temperature=0, max_tokens=12, cache_prompt=False).content == answer, q
        model.chat(msgs, temperature=0, max_tokens=12)  # (the cache as the turn left it, for the next)
        msgs.append({"role": "assistant", "content": answer})


@given(chunk=st.integers(1, 8), first=st.integers(1, 40), answer=st.integers(0, 10), n=st.integers(1, 60),
       data=st.data())
def test_a_cached_position_is_reused_only_where_a_cold_decode_computes_it_alike(chunk, first, answer, n, data):
    """``reusable`` against a brute force: a position is computed alike when both decode it fast in
    the same chunk, or both on the reference kernels (after positions computed alike); the most
    that may be kept is the longest such prefix of the common tokens that ends at a chunk's start
    or where the fast decoding of the new prompt ends. Either prompt may be limited
    (``fast_layout``'s ``limit``: a conversation's first prompt)."""
    limits = st.one_of(st.none(), st.integers(0, 40))
    cached = fast_layout(first, chunk, data.draw(limits))
    same = data.draw(st.integers(0, min(first + answer, n - 1)))
    fast = fast_layout(n, chunk, data.draw(limits))

    def how(p, end):
        return ("fast", p // chunk) if p < end else "reference"

    best = 0
    for q in range(same + 1):
        if any(how(p, cached) != how(p, fast) for p in range(q)):
            break
        if q >= fast or q % chunk == 0:
            best = q
    assert reusable(same, cached, fast, chunk) == best
    assert fast % chunk == 0 and (fast == 0 or fast < n)
