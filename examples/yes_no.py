"""The paper's first example: an answer that is one of a few words, after optional spaces."""

import localguide

model = localguide.load()  # the embedded SmolLM2-135M-Instruct
answer = model.generate(
    "Is the Earth flat? Answer yes, no, never or always.",
    regex=r"\s*([Yy]es|[Nn]o|[Nn]ever|[Aa]lways)",
    chat=True,
    temperature=0.7,
    seed=0,
)
print(repr(answer))
