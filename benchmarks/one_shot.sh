#!/bin/bash
# One-shot `localguide run`: a fresh process per generation, speculation on and off, at two
# checkouts in turn (each seed: OLD on, OLD off, NEW on, NEW off), SmolLM2's json and sql grammars.
# tokens/s per checkout and mode = summed tokens / summed generation seconds of `--stats`.
#   bash benchmarks/one_shot.sh OLD_CHECKOUT NEW_CHECKOUT [RUNS] [MODEL.gguf]
# (each checkout runs as `PYTHONPATH=<checkout> python -m localguide.cli`; the cache directory,
# its count models and decode costs, is shared by both)
OLD=$1; NEW=$2; N=${3:-6}; MODEL=$4
cd "${TMPDIR:-/tmp}" || exit 1
for g in "sql|Write an SQL query that lists customers:" "json|A person as JSON:"; do
  gr=${g%%|*}; p=${g#*|}
  for i in $(seq 1 "$N"); do
    for v in old new; do
      co=$OLD; [ $v = new ] && co=$NEW
      for s in --speculate --no-speculate; do
        PYTHONPATH=$co python -m localguide.cli run $MODEL "$p" --grammar "$gr" --seed "$i" --max-tokens 80 $s --stats 2>&1 \
          | grep "^localguide: [0-9]* tokens" | sed -E "s/^localguide: ([0-9]+) tokens in ([0-9.]+) s.*/$gr $v $s \1 \2/"
      done
    done
  done
done | awk '{k=$1" "$2" "$3; t[k]+=$4; s[k]+=$5} END {for (k in t) printf "%s: %d tokens %.2f s -> %.1f tok/s\n", k, t[k], s[k], t[k]/s[k]}' | sort
