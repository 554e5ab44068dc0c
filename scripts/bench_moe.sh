#!/usr/bin/env bash
# bench_moe.sh [BUILD_DIR] - mixture of experts on the CPU backend, two parts,
# printed as markdown tables:
#  1. an MoE layer's routed experts against a dense FFN of the same active
#     parameters on the same tokens (BUILD_DIR/tests/bench_moe, SHAPES "N C E
#     K F" each, THREADS threads: the medians of forward and backward);
#  2. expert parallelism under mpirun: a 4-rank data-parallel run of an MoE
#     model (8 experts, top-2, hidden 256) with EP 1, 2 and 4, STEPS steps
#     each, the median step time after warm-up (the engine's done line) and
#     the median exposed and busy all-to-all time per step (the metrics'
#     comm_ep, comm_ep_busy).
# Example: THREADS=1 scripts/bench_moe.sh build
set -eu
BUILD=${1:-build}
LT="$BUILD/lattice"
THREADS=${THREADS:-1}
STEPS=${STEPS:-12}
SHAPES=${SHAPES:-"2048 256 8 2 256;4096 512 8 2 512;4096 1024 8 2 1024"}
T=$(mktemp -d /tmp/lt-bench-moe-XXXXXX)
trap 'rm -rf "$T"' EXIT

echo "Routed experts against the dense FFN of the same active parameters ($THREADS thread(s)):"
echo
first=1
IFS=';'
for s in $SHAPES; do
  IFS=' '
  # shellcheck disable=SC2086
  out=$(LT_BENCH_THREADS=$THREADS "$BUILD/tests/bench_moe" $s 5)
  if [ "$first" = 1 ]; then echo "$out"; first=0; else echo "$out" | tail -1; fi
  IFS=';'
done
unset IFS

python3 -c "
import random
random.seed(5)
print(' '.join(str(random.randrange(4096)) for _ in range(300000)))" > "$T/ids"
"$LT" shard --vocab-size 4096 --input "$T/ids" "$T/train.ltok" >/dev/null
BASE="configs/tiny.yaml model.num_layers=4 model.hidden_size=256 model.num_attention_heads=4
  model.seq_length=128 model.max_position_embeddings=128 model.vocab_size=4096
  model.num_experts=8 model.moe_ffn_hidden_size=512 model.moe_aux_loss_coeff=0.01
  data.train_path=$T/train.ltok train.micro_batch_size=4 train.global_batch_size=32
  train.steps=$STEPS train.threads=1 logging.log_interval=1000 eval.interval=0 checkpoint.dir="
echo
echo "Expert parallelism over 4 data-parallel ranks (mpirun -np 4, one thread each, $STEPS steps):"
echo
echo "| EP | median step ms | all-to-all exposed ms / step | all-to-all busy ms / step |"
echo "|---|---|---|---|"
for ep in 1 2 4; do
  timeout 900 mpirun --allow-run-as-root --oversubscribe -np 4 "$LT" train $BASE \
    parallel.expert_model_parallel_size=$ep logging.metrics_file="$T/m$ep.jsonl" \
    >"$T/run$ep.log" 2>&1 </dev/null || { echo "EP $ep failed: $(tail -2 "$T/run$ep.log")" >&2; exit 1; }
  med=$(sed -n 's/^done: .*median step \([0-9.]*\) ms.*/\1/p' "$T/run$ep.log")
  comm=$(python3 - "$T/m$ep.jsonl" <<'PY'
import json, statistics, sys
t = [r['time_ms'] for r in map(json.loads, open(sys.argv[1])) if not r.get('eval')][1:]
print('%.1f | %.1f' % (statistics.median(x['comm_ep'] for x in t),
                       statistics.median(x['comm_ep_busy'] for x in t)))
PY
)
  echo "| $ep | $med | $comm |"
done
