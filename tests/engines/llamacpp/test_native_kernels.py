"""The native sampler kernels follow the Python guide."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localguide.index import native_block
from localguide.engines.llamacpp import native_kernels
from localguide import Vocabulary
from kernel_strategies import candidates, token_data_array

# --- the native sampler's guide block: the same cursor as Guide ------------------------------------

def native_allowed(block, vocab_size: int) -> list[int]:
    """Run ``block_apply`` on a full candidate array in id order; the ids left possible."""
    import ctypes

    arr = candidates(np.arange(vocab_size))
    cur = token_data_array(arr)
    native_kernels.block_apply(block, ctypes.addressof(cur))
    kept = arr[:cur.size]
    logits = kept[:, 1].view(np.float32)
    return kept[~np.isneginf(logits), 0].tolist()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([r"(19|20)\d{2}", r"[a-c]*d?", r"\w+@\w+", r"[^x]{0,4}"]),
       st.one_of(st.none(), st.integers(0, 8)), st.randoms(use_true_random=False))
def test_native_block_follows_the_guide(pattern, budget, rng):
    from localguide import compile_regex

    from conftest import random_walk

    tokens = [b""] + [bytes([b]) for b in range(256)] + [b"19", b"20", b"ab", b"@a", b"xy", b"00"] * 2
    vocab = Vocabulary.from_tokens(tokens, [0])
    index = compile_regex(pattern, vocab)
    if budget is not None and budget < index.distance[0]:
        return
    guide = index.guide(max_tokens=budget)
    walk, _ = random_walk(guide.copy(), vocab, rng, max_steps=10)
    block = guide.native_block()
    for t in walk:
        assert native_allowed(block, vocab.size) == guide.allowed_token_ids().tolist()
        native_kernels.block_accept(block, t)
        guide.advance(t)
        assert int(block[native_block.B_ERROR]) == 0
        assert int(block[native_block.B_STATE]) == guide.state
    # A token the guide refuses is flagged in the block, not taken.
    refused = sorted(set(range(vocab.size)) - set(guide.allowed_token_ids().tolist()))
    if refused:
        state = int(block[native_block.B_STATE])
        native_kernels.block_accept(block, refused[len(refused) // 2])
        assert int(block[native_block.B_ERROR]) != 0 and int(block[native_block.B_STATE]) == state
