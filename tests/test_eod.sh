#!/usr/bin/env bash
# test_eod.sh BUILD_DIR - data.eod_token and data.eod_mask_loss: the
# evaluation loss is the mean cross-entropy over the targets not predicted
# from an EOD input (Megatron's loss_mask[tokens == eod] = 0),
# computed here from the model's own logits (`lattice logits`) in float64;
# training with the mask is the same model in one process and under
# TP 2 x PP 2 x DP 2 (8 ranks) and differs from training without it; the
# step's loss is the mean over the global batch's unmasked targets whatever
# the micro batch; train.calculate_per_token_loss=false (the mean over micro
# batches of their means) and the default both match per-sample
# evaluations; bad settings are refused.
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
for i, (row, t) in enumerate(zip(rows, targets)):
    if ids[i] == 10:  # Megatron's eod_mask_loss: no loss on the prediction from an EOD input
        continue
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    losses.append(lse - row[t])
want = sum(losses) / len(losses)
print(f"eval loss {got:.8f}, mean over {len(losses)} targets after non-EOD inputs, from the logits {want:.8f}")
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

# ---- the two loss reductions against per-sample evaluations --------------------
# step 1 (the initial model) over 8 unshuffled samples, one per micro batch:
# per-token = sum of each sample's mean x its unmasked targets / all of them;
# per micro batch (calculate_per_token_loss=false) = the mean of the means
python3 - "$T/text.ids" "$T" <<'PY'
import sys
ids = open(sys.argv[1]).read().split()
for i in range(8):
    open(f"{sys.argv[2]}/s{i}.ids", "w").write(" ".join(ids[i * 32:i * 32 + 33]))
    print(sum(1 for t in ids[i * 32:i * 32 + 32] if t != "10"), file=open(f"{sys.argv[2]}/n{i}", "w"))
PY
for i in 0 1 2 3 4 5 6 7; do
  "$LT" shard --vocab-size 256 --input "$T/s$i.ids" "$T/s$i.ltok" >/dev/null
  "$LT" eval $CFG data.valid_path=$T/s$i.ltok eval.samples=1 train.micro_batch_size=1 "${EOD[@]}" \
    logging.metrics_file=$T/s$i.jsonl >/dev/null 2>&1
done
ONE=(train.steps=1 optimizer.warmup_steps=1 data.train_path=$T/text.ltok data.valid_path= data.shuffle=false
     train.micro_batch_size=1 train.global_batch_size=8 "${EOD[@]}")
"$LT" train $CFG "${ONE[@]}" logging.metrics_file=$T/tok1.jsonl >"$T/tok1.log" 2>&1
"$LT" train $CFG "${ONE[@]}" train.calculate_per_token_loss=false \
  logging.metrics_file=$T/mb1x.jsonl >"$T/mb1x.log" 2>&1
if python3 - "$T" <<'PY'
import json, sys
d = sys.argv[1]
ev = [json.loads(open(f"{d}/s{i}.eval.jsonl").read().splitlines()[-1])["val_loss"] for i in range(8)]
n = [int(open(f"{d}/n{i}").read()) for i in range(8)]
tok = json.loads(open(f"{d}/tok1.jsonl").read().splitlines()[0])["loss"]
mb = json.loads(open(f"{d}/mb1x.jsonl").read().splitlines()[0])["loss"]
want_tok = sum(e * k for e, k in zip(ev, n)) / sum(n)
want_mb = sum(ev) / 8
print(f"per token {tok:.7f} (from evaluations {want_tok:.7f}), per micro batch {mb:.7f} ({want_mb:.7f}); unmasked {n}")
ok = abs(tok - want_tok) <= 1e-6 * want_tok and abs(mb - want_mb) <= 1e-6 * want_mb
sys.exit(0 if ok and abs(tok - mb) > 1e-5 * tok and min(n) < 32 else 1)
PY
then pass eod_loss_reductions_match_per_sample_evaluations
else fail eod_loss_reductions_match_per_sample_evaluations "$(grep -i error "$T/mb1x.log" | head -2)"; fi
# per micro batch means are layout-independent for a fixed micro batch
MB=(train.calculate_per_token_loss=false train.micro_batch_size=2)
"$LT" train $CFG "${COMMON[@]}" "${EOD[@]}" "${MB[@]}" logging.metrics_file=$T/mbone.jsonl >/dev/null 2>&1
$MPI -np 8 "$LT" train $CFG "${COMMON[@]}" "${EOD[@]}" "${MB[@]}" parallel.tensor_model_parallel_size=2 \
  parallel.pipeline_model_parallel_size=2 logging.metrics_file=$T/mb8.jsonl >"$T/mb8.log" 2>&1 </dev/null
if [ -s "$T/mb8.jsonl" ] && close "$T/mbone.jsonl" "$T/mb8.jsonl"; then
  pass eod_per_micro_batch_tp2_pp2_dp2_matches_one_process
else fail eod_per_micro_batch_tp2_pp2_dp2_matches_one_process "$(grep -i error "$T/mb8.log" | head -2)"; fi
# without a mask the two reductions are the same model
"$LT" train $CFG "${COMMON[@]}" "${MB[@]}" logging.metrics_file=$T/mbn.jsonl >/dev/null 2>&1
"$LT" train $CFG "${COMMON[@]}" train.micro_batch_size=2 logging.metrics_file=$T/tokn.jsonl >/dev/null 2>&1
if close "$T/tokn.jsonl" "$T/mbn.jsonl"; then pass unmasked_reductions_agree
else fail unmasked_reductions_agree "per micro batch differs from per token without a mask"; fi

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
