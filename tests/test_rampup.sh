#!/usr/bin/env bash
# test_rampup.sh BUILD_DIR - train.rampup_batch_size: a ramp "4 4 40" to a
# global batch of 16 over train.steps=4 (64 samples) trains Megatron's 8
# steps of 4, 4, 4, 4, 8, 8, 12, 16 samples; its first step is the step of a
# run at a constant batch of 4 (both loss reductions, EOD-masked); the same model in one process and under TP 2 x PP 2 x DP 2 (micro
# batches per rank 1, 1, 1, 1, 2, 2, 3, 4; the per micro batch loss also with
# ZeRO-1 and overlapped gradient reduction); a run stopped mid-ramp (step 5)
# and resumed under an interleaved PP 2 x VPP 2 x DP 2 layout at another
# micro batch (receives posted ahead) ends as the uninterrupted one; a resume with another ramp-up,
# and ramps Megatron refuses, are refused. (Every step's batch, micro
# batches and learning rate against Megatron's own code: test_config.)
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" rampup
use_mpirun

text_shard "$T/text.ltok"
CFG=configs/tiny.yaml
RUN=(model.num_layers=4 train.global_batch_size=16 train.micro_batch_size=2 train.steps=4
     "train.rampup_batch_size=4 4 40" data.train_path=$T/text.ltok data.valid_path=
     data.eod_token=10 data.eod_mask_loss=true logging.log_interval=1)
TP2PP2=(parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2)

# ---- the batches and the step count ---------------------------------------------
"$LT" train $CFG "${RUN[@]}" logging.metrics_file=$T/a.jsonl checkpoint.dir=$T/ck \
  checkpoint.save_interval=5 >"$T/a.log" 2>&1 || fail rampup_train "$(grep error "$T/a.log")"
if python3 - "$T/a.jsonl" "$T/ck/step_00000005/meta.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
got = [(r["step"], r["global_batch"], r["samples"]) for r in rows if not r.get("eval")]
want, n = [], 0
for k, b in enumerate([4, 4, 4, 4, 8, 8, 12, 16]):
    n += b
    want.append((k + 1, b, n))
meta = json.load(open(sys.argv[2]))
print("steps (step, global batch, samples):", got, "; checkpoint of step 5:", meta["samples_consumed"])
sys.exit(0 if got == want and meta["samples_consumed"] == 24 else 1)
PY
then pass rampup_batches_and_steps
else fail rampup_batches_and_steps "see above"; fi
if grep -q "step      7/8 | batch 12 | loss" "$T/a.log"; then pass rampup_log_shows_batch
else fail rampup_log_shows_batch "$(grep 'step .*7/' "$T/a.log")"; fi
# the YAML list form [START, INCREMENT, SAMPLES] is the same ramp
sed 's/^train:$/train:\n  rampup_batch_size: [4, 4, 40]/' $CFG >"$T/list.yaml"
LIST=()
for o in "${RUN[@]}"; do case $o in train.rampup_batch_size=*) ;; *) LIST+=("$o") ;; esac; done
"$LT" train "$T/list.yaml" "${LIST[@]}" logging.metrics_file=$T/l.jsonl >"$T/l.log" 2>&1
if grep -q 'rampup_batch_size: "4 4 40"' "$T/l.log" && close_losses "$T/a.jsonl" "$T/l.jsonl" 1-8; then
  pass rampup_yaml_list_form
else fail rampup_yaml_list_form "$(grep -h -i 'error\|rampup' "$T/l.log" | head -2)"; fi

# ---- the first step is a constant-batch step (both loss reductions: the step's
# own targets, or its own micro batches, 2 here, not the 8 of a batch of 16) ----------
ONE=(train.steps=1 optimizer.warmup_steps=1 "train.rampup_batch_size=" train.global_batch_size=4)
"$LT" train $CFG "${RUN[@]}" "${ONE[@]}" logging.metrics_file=$T/c.jsonl >"$T/c.log" 2>&1
MB=(train.calculate_per_token_loss=false)
"$LT" train $CFG "${RUN[@]}" "${MB[@]}" logging.metrics_file=$T/m.jsonl >"$T/m.log" 2>&1
"$LT" train $CFG "${RUN[@]}" "${MB[@]}" "${ONE[@]}" logging.metrics_file=$T/mc.jsonl >/dev/null 2>&1
if close_losses "$T/a.jsonl" "$T/c.jsonl" 1-1 && close_losses "$T/m.jsonl" "$T/mc.jsonl" 1-1; then
  pass rampup_first_step_is_a_batch_of_start
else fail rampup_first_step_is_a_batch_of_start "$(grep -h error "$T/c.log" "$T/m.log")"; fi

# ---- layouts ----------------------------------------------------------------------
$MPI -np 8 "$LT" train $CFG "${RUN[@]}" "${TP2PP2[@]}" logging.metrics_file=$T/p8.jsonl \
  >"$T/p8.log" 2>&1 </dev/null
if [ -s "$T/p8.jsonl" ] && close_losses "$T/a.jsonl" "$T/p8.jsonl" 1-8; then
  pass rampup_tp2_pp2_dp2_matches_one_process
else fail rampup_tp2_pp2_dp2_matches_one_process "$(grep -i error "$T/p8.log" | head -2)"; fi
$MPI -np 8 "$LT" train $CFG "${RUN[@]}" "${MB[@]}" "${TP2PP2[@]}" optimizer.zero_stage=1 \
  parallel.overlap_grad_reduce=true logging.metrics_file=$T/mp8.jsonl \
  >"$T/mp8.log" 2>&1 </dev/null
if [ -s "$T/mp8.jsonl" ] && close_losses "$T/m.jsonl" "$T/mp8.jsonl" 1-8; then
  pass rampup_per_micro_batch_tp2_pp2_dp2_matches_one_process
else fail rampup_per_micro_batch_tp2_pp2_dp2_matches_one_process "$(grep -i error "$T/mp8.log" | head -2)"; fi

# ---- resume mid-ramp at another layout ----------------------------------------------
$MPI -np 4 "$LT" train $CFG "${RUN[@]}" parallel.pipeline_model_parallel_size=2 \
  parallel.virtual_pipeline_model_parallel_size=2 train.micro_batch_size=1 \
  parallel.overlap_p2p_comm=true \
  checkpoint.load=$T/ck/step_00000005 logging.metrics_file=$T/r.jsonl >"$T/r.log" 2>&1 </dev/null
if [ -s "$T/r.jsonl" ] && close_losses "$T/a.jsonl" "$T/r.jsonl" 6-8; then
  pass rampup_resume_mid_ramp_interleaved_pp2_dp2
else fail rampup_resume_mid_ramp_interleaved_pp2_dp2 "$(grep -i error "$T/r.log" | head -2)"; fi

# ---- refused ------------------------------------------------------------------------
# refused NAME PATTERN RC: exit code 2 and PATTERN in the run's output ($T/bad.log)
refused() {
  if [ "$3" -eq 2 ] && grep -q "$2" "$T/bad.log"; then pass "$1"
  else fail "$1" "rc $3: $(grep error "$T/bad.log")"; fi
}
train_rc() { "$LT" train $CFG "${RUN[@]}" "$@" >"$T/bad.log" 2>&1; echo $?; }
STEP5=checkpoint.load=$T/ck/step_00000005
refused rampup_resume_other_ramp_refused \
  "was saved by a run with train.rampup_batch_size '4 4 40'" \
  "$(train_rc "train.rampup_batch_size=4 4 48" $STEP5)"
refused rampup_resume_other_global_batch_refused \
  "train.global_batch_size 16; this run has '4 4 40' and 28" \
  "$(train_rc train.global_batch_size=28 $STEP5)"
refused rampup_start_not_whole_micro_batches \
  "START (4) and INCREMENT (4) must be multiples of train.micro_batch_size (8)" \
  "$(train_rc train.micro_batch_size=8)"
refused rampup_increment_must_divide \
  "train.global_batch_size - START = 16 - 4 = 12 must be a multiple of INCREMENT (8)" \
  "$(train_rc "train.rampup_batch_size=4 8 40")"
refused rampup_three_integers "expected three integers" "$(train_rc "train.rampup_batch_size=4 4 4e3")"
refused rampup_batches_file_refused "train.rampup_batch_size" \
  "$("$LT" batches $CFG "${RUN[@]}" --out "$T/b.bin" >"$T/bad.log" 2>&1; echo $?)"

exit $((failures > 0))
