#!/usr/bin/env bash
# bench_overlap.sh [BUILD_DIR] - the communication overlap switches measured
# under mpirun on the CPU backend: for each layout (LAYOUTS, "tp:pp:dp:zero"
# entries) a run with every switch off, each switch on alone, and all on;
# prints, as a markdown table, the median step time over the steps after
# warm-up and the medians of exposed communication per kind (the time_ms
# comm_tp/dp/pp of the metrics: the training thread blocked in it) with the
# data-parallel busy time beside them (comm_dp_busy: also what the worker ran
# behind compute). Layouts with tp > 1 run with sequence parallelism and add
# a case with parallel.tp_comm_overlap (also in "all"), and the tp busy time.
# Model and sizes: MODEL (overrides), STEPS, WARMUP; CASES (e.g. "off all")
# runs only those cases.
# Example: LAYOUTS="1:1:2:1 1:2:2:1 2:1:1:0" scripts/bench_overlap.sh build
set -eu
BUILD=${1:-build}
LT="$BUILD/lattice"
LAYOUTS=${LAYOUTS:-"1:1:2:1 1:2:2:1"}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
# a model whose gradients are large next to a micro batch's compute, so the
# data-parallel reduction matters: 3.4 M parameters, 64 tokens per micro batch
MODEL=${MODEL:-"model.num_layers=4 model.hidden_size=256 model.num_attention_heads=4
  model.seq_length=64 model.max_position_embeddings=64 train.micro_batch_size=1
  train.global_batch_size=4 parallel.bucket_size=500000"}
T=$(mktemp -d /tmp/lt-bench-overlap-XXXXXX)
trap 'rm -rf "$T"' EXIT
cat /usr/share/common-licenses/GPL-3 > "$T/text.txt"
python3 -c "
import sys
d = open('$T/text.txt', 'rb').read()
open('$T/ids', 'w').write(' '.join(map(str, d)))"
"$LT" shard --vocab-size 256 --input "$T/ids" "$T/train.ltok" >/dev/null

echo "| layout (tp x pp x dp, ZeRO) | switches | step ms | exposed tp ms | exposed dp ms | exposed pp ms | dp busy ms | tp busy ms |"
echo "|---|---|---|---|---|---|---|---|"
for l in $LAYOUTS; do
  IFS=: read -r tp pp dp z <<<"$l"
  np=$((tp * pp * dp))
  cases="off grad_reduce"
  [ "$z" -ge 1 ] && cases="$cases param_gather"
  [ "$pp" -gt 1 ] && cases="$cases p2p_comm"
  sp=""
  [ "$tp" -gt 1 ] && { cases="$cases tp_comm"; sp="parallel.sequence_parallel=true"; }
  cases="$cases all"
  [ -n "${CASES:-}" ] && cases=$CASES
  for c in $cases; do
    sw=""
    case $c in
      off) ;;
      all) sw="parallel.overlap_grad_reduce=true parallel.overlap_p2p_comm=true"
           [ "$z" -ge 1 ] && sw="$sw parallel.overlap_param_gather=true"
           [ "$tp" -gt 1 ] && sw="$sw parallel.tp_comm_overlap=true" ;;
      tp_comm) sw="parallel.tp_comm_overlap=true" ;;
      *) sw="parallel.overlap_$c=true" ;;
    esac
    m="$T/$l-$c.jsonl"
    timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$np" "$LT" train configs/tiny.yaml \
      data.train_path="$T/train.ltok" $MODEL train.steps="$STEPS" eval.interval=0 \
      logging.log_interval=1000 optimizer.zero_stage="$z" train.threads=1 \
      parallel.tensor_model_parallel_size="$tp" parallel.pipeline_model_parallel_size="$pp" \
      logging.metrics_file="$m" $sp $sw >"$T/log" 2>&1 || { tail -5 "$T/log"; exit 1; }
    python3 - "$m" "$WARMUP" "$tp x $pp x $dp, ZeRO $z" "$c" <<'EOF'
import json, statistics as st, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if not r.get('eval')][int(sys.argv[2]):]
med = lambda f: st.median(f(r) for r in recs)
t = lambda k: med(lambda r: r['time_ms'][k])
print("| %s | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
    sys.argv[3], sys.argv[4], med(lambda r: r['step_ms']), t('comm_tp'), t('comm_dp'),
    t('comm_pp'), t('comm_dp_busy'), t('comm_tp_busy')))
EOF
  done
done
