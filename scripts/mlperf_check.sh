#!/usr/bin/env bash
# mlperf_check.sh - MLCommons' compliance checker (pip install mlperf-logging)
# on lattice's MLPerf logs. Not part of `make test`: it needs that package.
#
#   scripts/mlperf_check.sh LOG
#       A real run's log (logging.mllog): the checker of the ruleset of its
#       submission_benchmark (gpt3: training 4.1.0; llama31_8b / llama31_405b:
#       5.1.0; gpt_oss_20b: 6.0.0); exits with the checker's status.
#   scripts/mlperf_check.sh --tiny [BUILD_DIR]
#       Runs the four scaled-down flows (configs/*-mlperf-tiny.yaml, under
#       mpirun -np 2, as tests/test_mlperf.sh does) and checks their logs after
#       putting back the full-size values of exactly the keys the tiny configs
#       scale (listed below: sequence length, eval_samples, max_steps and the
#       decay steps, the learning rate where the rules fix it, and the
#       accuracy of the last evaluation, the one that reached the tiny
#       target, mapped onto the benchmark's target). Everything else - which
#       keys appear and how often, their order, the optimizer values,
#       init_checkpoint_step, the eval and block records' metadata, run_stop -
#       is checked as lattice wrote it. Exits 0 when all four pass.
set -u
# MLPERF_RULESET=6.0.0 or 6.1.0 checks the logs against a later round's rules
# where the benchmark is in that round: GPT-3's last round is 4.1.0, the
# 405B's 6.0.0 (6.1.0 dropped it), GPT-OSS 20B's first 6.0.0 (an earlier
# MLPERF_RULESET does not apply to it)
ruleset() {
  case "$1" in
    gpt3) echo 4.1.0 ;;
    gpt_oss_20b) case "${MLPERF_RULESET:-}" in 6.*) echo "$MLPERF_RULESET" ;; *) echo 6.0.0 ;; esac ;;
    llama31_405b) case "${MLPERF_RULESET:-}" in 6.1.*) echo 6.0.0 ;; *) echo "${MLPERF_RULESET:-5.1.0}" ;; esac ;;
    *) echo "${MLPERF_RULESET:-5.1.0}" ;;
  esac
}
check() { # LOG: the checker's verdict
  local bench
  bench=$(sed -n 's/.*"key": "submission_benchmark", "value": "\([a-z0-9_]*\)".*/\1/p' "$1" | head -1)
  [ -n "$bench" ] || { echo "$1: no submission_benchmark"; return 1; }
  python3 -m mlperf_logging.compliance_checker --usage training --ruleset "$(ruleset "$bench")" \
    --log_output "$1.checker" "$1"
}
python3 -c 'import mlperf_logging' 2>/dev/null ||
  { echo "mlperf_check.sh: the mlperf_logging package is missing (pip install mlperf-logging)" >&2; exit 2; }
if [ "${1:-}" != "--tiny" ]; then
  [ $# -eq 1 ] || { echo "usage: $0 LOG | --tiny [BUILD_DIR]" >&2; exit 2; }
  check "$1"
  exit
fi
BUILD=${2:-build}
LT="$BUILD/lattice"
T=$(mktemp -d /tmp/lt-mlperf-check-XXXXXX)
trap 'rm -rf "$T"' EXIT
scripts/mlperf_tiny_data.sh "$T/data" "$LT" >/dev/null || exit 1
MPI="mpirun --allow-run-as-root --oversubscribe -np 2 $LT"
D="data.train_path=$T/data/train.ltok data.valid_path=$T/data/valid.ltok"
pre() { # NAME CONFIG [import options]: 20 steps, exported and imported
  local name=$1 cfg=$2; shift 2
  $MPI train "$cfg" $D train.steps=20 checkpoint.load= checkpoint.dir="$T/$name-pre" \
      logging.mllog= eval.target_log_ppl=0 > "$T/$name-pre.log" 2>&1 &&
    "$LT" export "$T/$name-pre/step_00000020" "$T/$name-hf" > /dev/null &&
    "$LT" import "$T/$name-hf" "$T/$name-start" "$@" model.seq_length=128 > /dev/null
}
pre gpt3 configs/gpt3-175b-mlperf-tiny.yaml --step 20 || { echo "gpt3 start checkpoint failed"; exit 1; }
pre l405 configs/llama3.1-405b-mlperf-tiny.yaml || { echo "405B start checkpoint failed"; exit 1; }
$MPI train configs/gpt3-175b-mlperf-tiny.yaml $D checkpoint.load="$T/gpt3-start" \
  logging.mllog="$T/gpt3.mllog" > "$T/gpt3.log" 2>&1
$MPI train configs/llama3.1-8b-mlperf-tiny.yaml $D logging.mllog="$T/llama31_8b.mllog" > "$T/8b.log" 2>&1
$MPI train configs/llama3.1-405b-mlperf-tiny.yaml $D checkpoint.load="$T/l405-start" \
  logging.mllog="$T/llama31_405b.mllog" > "$T/405b.log" 2>&1
$MPI train configs/gpt-oss-20b-mlperf-tiny.yaml "data.train_path=10 $T/data/train-eod.ltok" \
  data.valid_path="$T/data/valid-eod.ltok" logging.mllog="$T/gpt_oss_20b.mllog" > "$T/oss.log" 2>&1
status=0
for bench in gpt3 llama31_8b llama31_405b gpt_oss_20b; do
  python3 - "$T/$bench.mllog" "$bench" "$T/$bench.full.mllog" <<'PY' || { status=1; continue; }
import json, math, sys
src, bench, dst = sys.argv[1:]
gbs = 8                      # the tiny configs' global batch, kept
warm = None
full = {                     # the scaled keys and their full-size values
    'gpt3': {'max_sequence_length': 2048, 'opt_base_learning_rate': 2e-5,
             'eval_accuracy': 2.65},
    'llama31_8b': {'max_sequence_length': 8192, 'eval_samples': 1024, 'max_steps': 1200000,
                   'opt_learning_rate_decay_steps': lambda w: 1_200_000 - w,
                   'eval_accuracy': 3.2},
    'llama31_405b': {'max_sequence_length': 8192, 'eval_samples': 5760,
                     'opt_base_learning_rate': gbs * 8e-5 / 1152,
                     'opt_learning_rate_warmup_steps': math.ceil(8000 * 1152 / gbs),
                     'opt_learning_rate_decay_steps':
                         lambda w: math.ceil(1_200_000 * 1152 / gbs) - w,
                     'eval_accuracy': 5.5},
    'gpt_oss_20b': {'max_sequence_length': 8192, 'eval_samples': 1024, 'max_steps': 1200000,
                    'opt_learning_rate_decay_steps': lambda w: 1_200_000 - w,
                    'eval_accuracy': 3.3},
}[bench]
recs = [json.loads(l[len(':::MLLOG '):]) for l in open(src)]
last_eval = max(i for i, r in enumerate(recs) if r['key'] == 'eval_accuracy')
for i, r in enumerate(recs):
    k = r['key']
    if k == 'opt_learning_rate_warmup_steps':
        warm = full.get(k, r['value'])
    if k in full and (k != 'eval_accuracy' or i == last_eval):
        v = full[k]
        r['value'] = v(warm) if callable(v) else v
with open(dst, 'w') as f:
    for r in recs:
        f.write(':::MLLOG ' + json.dumps(r) + '\n')
PY
  echo "== $bench (tiny flow, scaled keys restored)"
  check "$T/$bench.full.mllog" 2>&1 | grep -E "WARNING|ERROR|SUCCESS|failed|FAIL" | tail -5
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
[ $status -eq 0 ] && echo "all four tiny flows pass MLCommons' checker" || echo "a tiny flow failed MLCommons' checker"
exit $status
