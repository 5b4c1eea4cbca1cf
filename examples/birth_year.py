"""The paper's second example: a four-digit year of birth, nothing else."""

import localguide

model = localguide.load()
prompt = "Alan Turing was born in the year"
for seed in range(3):
    print(model.generate(prompt, regex=r"(1[89]|20)\d{2}", seed=seed))
