#!/usr/bin/env bash
# bench_uneven.sh [BUILD_DIR] - uneven pipeline stages measured under mpirun
# on the CPU backend: a 2-stage pipeline of a model whose LM head costs about
# five layers (hidden 256, vocabulary 16384, 8 layers), trained with each
# split in SPLITS (parallel.* overrides, "even" for none), ROUNDS times in
# turn; prints, as a markdown table, each run's median step time after
# warm-up (the engine's done line) beside the planner's prediction for that
# layout on the cpu row (the run's plan line). STEPS steps per run.
# Example: ROUNDS=1 scripts/bench_uneven.sh build
set -eu
BUILD=${1:-build}
LT="$BUILD/lattice"
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-2}
SPLITS=${SPLITS:-"even parallel.num_layers_in_last_pipeline_stage=2 parallel.num_layers_in_last_pipeline_stage=1"}
T=$(mktemp -d /tmp/lt-bench-uneven-XXXXXX)
trap 'rm -rf "$T"' EXIT
python3 -c "
import random
random.seed(3)
print(' '.join(str(random.randrange(16384)) for _ in range(200000)))" > "$T/ids"
"$LT" shard --vocab-size 16384 --input "$T/ids" "$T/train.ltok" >/dev/null
BASE="configs/tiny.yaml model.num_layers=8 model.hidden_size=256 model.num_attention_heads=4
  model.seq_length=128 model.max_position_embeddings=128 model.vocab_size=16384
  data.train_path=$T/train.ltok train.micro_batch_size=4 train.global_batch_size=32
  train.steps=$STEPS logging.log_interval=100 eval.interval=0 checkpoint.dir=
  parallel.pipeline_model_parallel_size=2 train.threads=1"

echo "| split | layers per stage | round | median step ms | predicted ms (cpu row) |"
echo "|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  for s in $SPLITS; do
    ov=$s
    [ "$s" = even ] && ov=
    LT_PLAN_DEVICE=cpu timeout 600 mpirun --allow-run-as-root --oversubscribe -np 2 \
      -x LT_PLAN_DEVICE "$LT" train $BASE $ov > "$T/run.log" 2>&1 ||
      { echo "run $s failed: $(tail -2 "$T/run.log")" >&2; exit 1; }
    layers=$(sed -n -e 's/^pipeline .* chunk(s) of \([0-9]*\) layer(s).*/\1 each/p' \
      -e 's/^pipeline .* chunk(s) of layers \([0-9+, ]*\) (.*/\1/p' "$T/run.log")
    med=$(sed -n 's/^done: .*median step \([0-9.]*\) ms.*/\1/p' "$T/run.log")
    pred=$(sed -n 's/^plan .*: \([0-9.]*\) ms = .*/\1/p' "$T/run.log")
    echo "| ${s#parallel.} | $layers | $round | $med | $pred |"
  done
done
