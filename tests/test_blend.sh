#!/usr/bin/env bash
# test_blend.sh BUILD_DIR - data.train_path as a blend of datasets (Megatron's
# "W1 PATH1 W2 PATH2" and a YAML list), end to end: the summary names each
# dataset with its weight and epochs; the string and the list train the same
# model; a blend of a lattice shard and an llm.c file trains the same model
# in one process and under DP 2 x TP 2 (4 ranks); a resume mid-blend at
# another layout continues the uninterrupted run exactly; a resume with
# another blend is refused naming both; bad blends are refused. (A blend as
# data.valid_path: tests/test_valid_blend.sh.)
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" blend
use_mpirun

text_shard "$T/text.ltok"
random_shard "$T/rand.ltok" 40000 7
# the same random tokens as an llm.c file (another format in the blend)
"$LT" shard --vocab-size 256 --format llmc --input "$T/ids.7" "$T/rand.bin" >/dev/null ||
  { fail prepare "llm.c shard failed"; exit 1; }
CFG=configs/tiny.yaml
BLEND="0.6 $T/text.ltok 0.4 $T/rand.bin"
COMMON=(train.steps=8 optimizer.decay_steps=8 data.valid_path= logging.log_interval=1)

losses() { grep -o '"loss": [0-9.e+-]*' "$1" | cut -d' ' -f2 | tr '\n' ' '; }

# ---- one process: the summary, and the string vs the YAML list -------------
if "$LT" train $CFG "${COMMON[@]}" "data.train_path=$BLEND" logging.metrics_file=$T/a.jsonl \
     >"$T/a.log" 2>&1; then
  if grep -q "data train blend of 2 datasets" "$T/a.log" &&
     grep -q "text.ltok: weight 0.6, lattice format" "$T/a.log" &&
     grep -q "rand.bin: weight 0.4, llm.c format" "$T/a.log" &&
     grep -q "epochs in this run" "$T/a.log"; then pass blend_summary
  else fail blend_summary "$(grep '^data' "$T/a.log")"; fi
else fail blend_run "$(tail -3 "$T/a.log")"; fi
{ sed '/^data:/,$d' $CFG; echo "data:"; echo "  shuffle: true"
  echo "  train_path: [0.6, $T/text.ltok, 0.4, $T/rand.bin]"; } >"$T/list.yaml"
"$LT" train "$T/list.yaml" "${COMMON[@]}" logging.metrics_file=$T/l.jsonl >"$T/l.log" 2>&1
if [ -s "$T/l.jsonl" ] && [ "$(losses "$T/l.jsonl")" = "$(losses "$T/a.jsonl")" ]; then
  pass blend_yaml_list_same_as_string
else fail blend_yaml_list_same_as_string "$(tail -2 "$T/l.log")"; fi
# the blend differs from either dataset alone (it is not silently one file)
"$LT" train $CFG "${COMMON[@]}" "data.train_path=$T/text.ltok" logging.metrics_file=$T/t.jsonl \
  >/dev/null 2>&1
if [ "$(losses "$T/t.jsonl")" != "$(losses "$T/a.jsonl")" ]; then pass blend_reads_both
else fail blend_reads_both "the blend trained exactly as the first dataset alone"; fi

# ---- layouts: 4 ranks (DP 2 x TP 2) against one process ---------------------
$MPI -np 4 "$LT" train $CFG "${COMMON[@]}" "data.train_path=$BLEND" \
  parallel.tensor_model_parallel_size=2 logging.metrics_file=$T/p.jsonl >"$T/p.log" 2>&1 </dev/null
if [ -s "$T/p.jsonl" ] && close_losses "$T/a.jsonl" "$T/p.jsonl" 1-8
then pass blend_dp2_tp2_matches_one_process
else fail blend_dp2_tp2_matches_one_process "$(tail -3 "$T/p.log")"; fi

# ---- resume mid-blend at another layout ------------------------------------
"$LT" train $CFG "${COMMON[@]}" "data.train_path=$BLEND" checkpoint.dir=$T/ck \
  checkpoint.save_interval=4 train.steps=4 >"$T/r1.log" 2>&1
$MPI -np 2 "$LT" train $CFG "${COMMON[@]}" "data.train_path=$BLEND" checkpoint.dir=$T/ck \
  checkpoint.load=$T/ck logging.metrics_file=$T/r.jsonl >"$T/r2.log" 2>&1 </dev/null
if [ -s "$T/r.jsonl" ] && grep -q "resume .*text.ltok: [0-9]* samples taken so far" "$T/r2.log" &&
   close_losses "$T/a.jsonl" "$T/r.jsonl" 5-8
then pass blend_resume_dp2_exact
else fail blend_resume_dp2_exact "$(grep -E 'error|resume' "$T/r2.log" | tail -3)"; fi
"$LT" train $CFG "${COMMON[@]}" "data.train_path=0.5 $T/text.ltok 0.5 $T/rand.bin" \
  checkpoint.load=$T/ck >"$T/r3.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "trained on the blend '0.6 .*text.ltok 0.4 .*rand.bin'" "$T/r3.log" &&
   grep -q "this run names '0.5 " "$T/r3.log"; then pass blend_resume_other_blend_refused
else fail blend_resume_other_blend_refused "rc $rc: $(grep error "$T/r3.log")"; fi

# ---- bad blends ---------------------------------------------------------------
check_bad() { # name pattern spec
  "$LT" train $CFG "${COMMON[@]}" "data.train_path=$3" >"$T/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "data.train_path: .*$2" "$T/bad.log"; then pass "$1"
  else fail "$1" "rc $rc: $(grep error "$T/bad.log")"; fi
}
check_bad blend_odd_items "odd number" "0.5 $T/text.ltok 0.5"
check_bad blend_bad_weight "'abc', should be a positive weight" "0.5 $T/text.ltok abc $T/rand.bin"
check_bad blend_zero_weight "should be a positive weight" "0.5 $T/text.ltok 0 $T/rand.bin"
check_bad blend_missing_file "nothere.bin" "0.5 $T/text.ltok 0.5 $T/nothere.bin"

exit $((failures > 0))
