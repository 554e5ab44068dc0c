#!/usr/bin/env bash
# test_eod.sh BUILD_DIR - data.eod_token and data.eod_mask_loss: the
# evaluation loss is the mean cross-entropy over the non-EOD targets,
# computed here from the model's own logits (`lattice logits`) in float64;
# training with the mask is the same model in one process and under
# TP 2 x PP 2 x DP 2 (8 ranks) and differs from training without it; the
# step's loss is the mean over the global batch's unmasked targets whatever
# the micro batch; bad settings are refused.
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" eod
use_mpirun

# English text, byte-level: the newline (10) plays the document end
text_shard "$T/text.ltok"
CFG=configs/tiny.yaml
EOD=(data.eod_token=10 data.eod_mask_loss=true)

# ---- evaluation against the logits ------------------------------------------
# one sample of S+1 = 33 tokens holding several newlines among its targets
python3 - "$T/text.txt" "$T/one.ids" <<'PY'
import sys
d = open(sys.argv[1], 'rb').read()
start = next(i for i in range(len(d) - 40) if d[i + 1:i + 33].count(10) >= 3)
open(sys.argv[2], 'w').write(' '.join(map(str, d[start:start + 33])))
PY
"$LT" shard --vocab-size 256 --input "$T/one.ids" "$T/one.ltok" >/dev/null
"$LT" train $CFG train.steps=6 data.train_path=$T/text.ltok data.valid_path= \
  checkpoint.dir=$T/ck "${EOD[@]}" >"$T/tr.log" 2>&1 || fail train_for_eval "$(tail -2 "$T/tr.log")"
"$LT" eval $CFG data.valid_path=$T/one.ltok eval.samples=1 train.micro_batch_size=1 \
  checkpoint.load=$T/ck "${EOD[@]}" \
  logging.metrics_file=$T/e.jsonl >"$T/eval.log" 2>&1
"$LT" logits $CFG data.valid_path=$T/one.ltok checkpoint.load=$T/ck >"$T/one.logits" 2>/dev/null
if [ -s "$T/e.eval.jsonl" ] && python3 - "$T/one.ids" "$T/one.logits" "$T/e.eval.jsonl" <<'PY'
import json, math, sys
ids = list(map(int, open(sys.argv[1]).read().split()))
rows = [list(map(float, l.split())) for l in open(sys.argv[2]) if not l.startswith("tokens")]
got = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])["val_loss"]
targets = ids[1:33]
losses = []
for row, t in zip(rows, targets):
    if t == 10:
        continue
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    losses.append(lse - row[t])
want = sum(losses) / len(losses)
print(f"eval loss {got:.8f}, mean over {len(losses)} non-EOD targets from the logits {want:.8f}")
sys.exit(0 if len(losses) < 32 and abs(got - want) <= 1e-5 * abs(want) else 1)
PY
then pass eod_eval_loss_is_mean_over_unmasked
else fail eod_eval_loss_is_mean_over_unmasked "$(grep -E 'error|val loss' "$T/eval.log")"; fi

# ---- training: layouts, micro batches, and the mask matters -------------------
COMMON=(train.steps=6 optimizer.decay_steps=6 data.train_path=$T/text.ltok data.valid_path=
        logging.log_interval=1)
losses() { grep -o '"loss": [0-9.e+-]*' "$1" | cut -d' ' -f2 | tr '\n' ' '; }
close() { close_losses "$1" "$2" 1-6; }
"$LT" train $CFG "${COMMON[@]}" "${EOD[@]}" logging.metrics_file=$T/one.jsonl >"$T/1.log" 2>&1
"$LT" train $CFG "${COMMON[@]}" "${EOD[@]}" train.micro_batch_size=1 \
  logging.metrics_file=$T/mb1.jsonl >"$T/mb1.log" 2>&1
if close "$T/one.jsonl" "$T/mb1.jsonl"; then pass eod_micro_batch_1_same_model
else fail eod_micro_batch_1_same_model "$(tail -2 "$T/mb1.log")"; fi
$MPI -np 8 "$LT" train $CFG "${COMMON[@]}" "${EOD[@]}" parallel.tensor_model_parallel_size=2 \
  parallel.pipeline_model_parallel_size=2 logging.metrics_file=$T/p8.jsonl >"$T/p8.log" 2>&1 </dev/null
if [ -s "$T/p8.jsonl" ] && close "$T/one.jsonl" "$T/p8.jsonl"; then pass eod_tp2_pp2_dp2_matches_one_process
else fail eod_tp2_pp2_dp2_matches_one_process "$(grep -i error "$T/p8.log" | head -2)"; fi
"$LT" train $CFG "${COMMON[@]}" logging.metrics_file=$T/nomask.jsonl >/dev/null 2>&1
if [ -s "$T/nomask.jsonl" ] && [ "$(losses "$T/nomask.jsonl")" != "$(losses "$T/one.jsonl")" ]; then
  pass eod_mask_changes_the_loss
else fail eod_mask_changes_the_loss "the masked run's losses equal the unmasked run's"; fi

# ---- refused ------------------------------------------------------------------
bad() { # name pattern overrides...
  local name=$1 pat=$2; shift 2
  "$LT" train $CFG "${COMMON[@]}" "$@" >"$T/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "$pat" "$T/bad.log"; then pass "$name"
  else fail "$name" "rc $rc: $(grep error "$T/bad.log")"; fi
}
bad eod_mask_needs_token "data.eod_mask_loss needs data.eod_token" data.eod_mask_loss=true
bad eod_token_in_vocab "data.eod_token 256 is outside the vocabulary" data.eod_token=256
bad eod_mask_no_cuda_graph "data.eod_mask_loss: the masked targets change" "${EOD[@]}" \
  train.cuda_graph=true train.device=auto

exit $((failures > 0))
