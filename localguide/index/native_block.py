"""The layout of a guide block: an Index guide's cursor as the native llama.cpp sampler reads it.

``Guide.native_block()`` writes one; ``localguide.engines.llamacpp.native_kernels`` runs it.
"""

# --- native sampler: llama.cpp calls these directly, no Python per token --------------
#
# A guide block is an int64 array: the cursor (state, remaining budget, finished,
# error) followed by the addresses of the Index arrays. llama.cpp hands it to the
# callbacks as the sampler's ctx pointer.

B_STATE, B_REMAINING, B_FINISHED, B_ERROR, B_ERROR_TOKEN = 0, 1, 2, 3, 4
(B_STATE_MASK, B_MASK_SIZES, B_MASK_OFFSETS, B_MASK_TOKENS, B_EXCL_OFFSETS, B_EXCL_TOKENS, B_NEXT_DEFAULT,
 B_NEXT_VALUE_OFFSETS, B_NEXT_VALUES, B_NEXT_POSITION_OFFSETS, B_NEXT_POSITIONS, B_DISTANCE, B_MAX_NEXT,
 B_SIZES) = range(5, 19)
BLOCK_LEN = 19
ERROR_FINISHED, ERROR_NOT_ALLOWED, ERROR_OVER_BUDGET, ERROR_ORDER = 1, 2, 3, 4
