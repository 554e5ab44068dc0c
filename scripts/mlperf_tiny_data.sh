#!/usr/bin/env bash
# mlperf_tiny_data.sh [OUT_DIR [LATTICE]] - the data of the scaled-down MLPerf
# flows (configs/*-mlperf-tiny.yaml): byte tokens (vocabulary 256) from a
# fixed first-order Markov chain over 16 letters 'a'..'p' in which each letter
# is followed by one of two letters with equal probability. Its entropy is
# ln 2 = 0.693 nats per token, so a tiny model's validation log perplexity
# falls from ln 256 = 5.55 at random initialisation through ln 16 = 2.77 (the
# letter frequencies) towards 0.69 once it learns the transitions: a target of
# 1.0 is reached in some 60 steps of 8 x 128 tokens. Writes OUT_DIR/train.ltok
# (120,000 tokens) and OUT_DIR/valid.ltok (20,000 tokens, another sample of the
# same chain). For the GPT-OSS flow, whose reference masks the loss after each
# document's end, also OUT_DIR/train-eod.ltok and valid-eod.ltok: the same
# chain cut into documents of 20 to 300 letters, each ended by token 10 (the
# flow's data.eod_token) after which the chain restarts at a random letter.
# Deterministic: the same files every time.
set -euo pipefail
OUT=${1:-data/mlperf-tiny}
LT=${2:-build/lattice}
mkdir -p "$OUT"
python3 - "$OUT" <<'PY'
import random, sys
out = sys.argv[1]
letters = list(range(ord('a'), ord('a') + 16))
chain = random.Random(13)
succ = {s: chain.sample(letters, 2) for s in letters}
EOD = 10
for name, n, seed, docs in (('train', 120000, 1, False), ('valid', 20000, 2, False),
                            ('train-eod', 120000, 3, True), ('valid-eod', 20000, 4, True)):
    rng = random.Random(seed)
    s, toks, left = letters[0], [], rng.randint(20, 300) if docs else 0
    while len(toks) < n:
        toks.append(s)
        s = rng.choice(succ[s])
        left -= 1
        if docs and left == 0:
            toks.append(EOD)
            s, left = rng.choice(letters), rng.randint(20, 300)
    with open(f'{out}/{name}.ids', 'w') as f:
        f.write(' '.join(map(str, toks[:n])) + '\n')
PY
for part in train valid train-eod valid-eod; do
  "$LT" shard --vocab-size 256 --input "$OUT/$part.ids" "$OUT/$part.ltok" >/dev/null
  rm -f "$OUT/$part.ids"
done
echo "wrote $OUT/{train,valid}.ltok and $OUT/{train,valid}-eod.ltok"
