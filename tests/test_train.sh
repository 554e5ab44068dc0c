#!/usr/bin/env bash
# test_train.sh BUILD_DIR - the lattice command line end to end on the CPU
# backend: bad input, training on real English text, metrics, checkpoint
# resume bit for bit, signals, export, eval, sample.
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" train

# ---- real text, byte-level tokens (vocab 256) --------------------------------
cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 \
    /usr/share/common-licenses/GPL-2 /usr/share/common-licenses/LGPL-2.1 > "$T/text.txt" 2>/dev/null
python3 - "$T/text.txt" "$T/train.ids" "$T/valid.ids" <<'PY'
import sys
data = open(sys.argv[1], 'rb').read()
cut = int(len(data) * 0.9)
for path, part in ((sys.argv[2], data[:cut]), (sys.argv[3], data[cut:])):
    with open(path, 'w') as f:
        f.write(' '.join(str(b) for b in part) + '\n')
PY
"$LT" shard --vocab-size 256 --input "$T/train.ids" "$T/train.ltok" >/dev/null &&
"$LT" shard --vocab-size 256 --input "$T/valid.ids" "$T/valid.ltok" >/dev/null ||
  { fail prepare_shards "lattice shard failed"; exit 1; }
CFG=configs/tiny.yaml
D="data.train_path=$T/train.ltok data.valid_path=$T/valid.ltok"

# ---- version -----------------------------------------------------------------
out=$("$LT" --version)
if echo "$out" | grep -q "^lattice [0-9]" && echo "$out" | grep -q "cpu"; then pass version
else fail version "unexpected: $out"; fi

# ---- usage: lattice --help, -h, help [COMMAND], COMMAND --help: on stdout, exit 0;
# an unknown command: the usage on stderr, exit 2 ---------------------------------
bad=""
for args in "--help" "-h" "help" "help train" "train --help" "train -h" "train $CFG --help" \
            "eval --help" "sample --help" "logits --help" "export --help" "import --help" \
            "batches --help" "shard --help" "schedule --help" "plan --help" "plan --calibrate --help"; do
  out=$("$LT" $args 2>/dev/null); rc=$?
  [ $rc -eq 0 ] && echo "$out" | grep -q "^usage: lattice" || bad="$bad [$args: rc $rc]"
done
out=$("$LT" train --help)
echo "$out" | grep -q "^usage: lattice train CONFIG.yaml" && echo "$out" | grep -q "mpirun" || bad="$bad [train's usage]"
if [ -z "$bad" ]; then pass usage_on_help; else fail usage_on_help "$bad"; fi
out=$("$LT" frobnicate 2>&1 >/dev/null); rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q "unknown command 'frobnicate'" && echo "$out" | grep -q "^usage: lattice"
then pass unknown_command_prints_usage; else fail unknown_command_prints_usage "rc=$rc: $out"; fi

# ---- bad input: exit code 2 and a message naming the problem -------------------
expect_input_error() { # name pattern cmd...
  local name=$1 pat=$2; shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 2 ] && echo "$err" | grep -qiE -- "$pat"; then pass "bad_input_$name"
  else fail "bad_input_$name" "rc=$rc, stderr: $(echo "$err" | tail -2)"; fi
}
printf 'train:\n  step: 10\n' > "$T/typo.yaml"
expect_input_error unknown_key "did you mean 'train.steps'" "$LT" train "$T/typo.yaml" $D
expect_input_error wrong_type "train.steps" "$LT" train $CFG $D train.steps=ten
expect_input_error out_of_range "optimizer.zero_stage" "$LT" train $CFG $D optimizer.zero_stage=3
expect_input_error heads "num_attention_heads" "$LT" train $CFG $D model.num_attention_heads=5
expect_input_error seq_vs_positions "max_position_embeddings" "$LT" train $CFG $D model.seq_length=128
expect_input_error batch_multiple "global_batch_size" "$LT" train $CFG $D train.global_batch_size=6
expect_input_error bad_enum "precision" "$LT" train $CFG $D train.precision=fp16
expect_input_error override_syntax "steps" "$LT" train $CFG $D train.steps
expect_input_error missing_config "nope.yaml" "$LT" train "$T/nope.yaml"
printf 'model: [1, 2\n' > "$T/broken.yaml"
expect_input_error yaml_syntax "broken.yaml" "$LT" train "$T/broken.yaml"
expect_input_error missing_data "no such file|cannot open" "$LT" train $CFG data.train_path=$T/missing.bin
head -c 5000 /dev/urandom > "$T/garbage.bin"
expect_input_error garbage_data "garbage.bin" "$LT" train $CFG data.train_path=$T/garbage.bin
expect_input_error vocab_too_small "vocab|token" "$LT" train $CFG $D model.vocab_size=100
expect_input_error tp_needs_ranks "tensor_model_parallel_size" "$LT" train $CFG $D \
  parallel.tensor_model_parallel_size=2 model.num_attention_heads=4
expect_input_error no_train_path "data.train_path" "$LT" train $CFG
expect_input_error bad_checkpoint "checkpoint.load" "$LT" train $CFG $D checkpoint.load=$T/nothing
expect_input_error unknown_command "unknown command" "$LT" frobnicate
expect_input_error cuda_graph_on_cpu "train.cuda_graph needs the CUDA backend" "$LT" train $CFG $D \
  train.cuda_graph=true
expect_input_error cuda_graph_zero2 "train.cuda_graph: ZeRO stage 2" "$LT" train $CFG $D \
  train.cuda_graph=true optimizer.zero_stage=2
# (with train.device=auto a default config passes the step's own checks and
# reaches the backend's: a check that refused every config once hid here)
expect_input_error cuda_graph_auto_cpu "train.cuda_graph needs the CUDA backend; this run uses the cpu" \
  "$LT" train $CFG $D train.cuda_graph=true train.device=auto
# model.attention=cudnn is refused before training wherever it cannot run
expect_input_error attention_bad_value "model.attention.*auto\|cudnn\|lattice" "$LT" train $CFG $D \
  model.attention=flash
expect_input_error attention_cudnn_on_cpu "model.attention=cudnn.*train.device=cpu" "$LT" train $CFG $D \
  model.attention=cudnn train.precision=bf16
expect_input_error attention_cudnn_fp32 "model.attention=cudnn.*train.precision=bf16" "$LT" train $CFG $D \
  model.attention=cudnn train.device=auto
if ! nvidia-smi -L >/dev/null 2>&1; then # no GPU: train.device=auto falls back to the CPU backend
  expect_input_error attention_cudnn_no_gpu "model.attention=cudnn.*CPU backend" "$LT" train $CFG $D \
    model.attention=cudnn train.device=auto train.precision=bf16
fi

# ---- under mpirun: one rank trains; more ranks are refused (exit 2, one message)
if command -v mpirun >/dev/null; then
  MPI="mpirun --allow-run-as-root --oversubscribe"
  if timeout 120 $MPI -np 1 "$LT" train $CFG $D train.steps=2 >"$T/mpi1.log" 2>&1 &&
     grep -q "step      2/2" "$T/mpi1.log"; then pass mpirun_single_rank
  else fail mpirun_single_rank "$(tail -2 "$T/mpi1.log")"; fi
  timeout 120 $MPI -np 3 "$LT" train $CFG $D train.steps=2 >"$T/mpi3.log" 2>&1
  rc=$?
  n=$(grep -c "global_batch_size" "$T/mpi3.log")
  if [ $rc -eq 2 ] && [ "$n" -eq 1 ]; then pass mpirun_batch_not_divisible_refused
  else fail mpirun_batch_not_divisible_refused "rc=$rc, messages=$n"; fi
  expect_input_error cuda_graph_with_pp "train.cuda_graph: .*pipeline_model_parallel_size 2" \
    timeout 120 $MPI -np 2 "$LT" train $CFG $D train.cuda_graph=true train.device=auto \
    parallel.pipeline_model_parallel_size=2
else fail mpirun_available "mpirun not found (openmpi-bin)"; fi

# ---- training on real text: the loss falls; metrics file ----------------------
if "$LT" train $CFG $D train.steps=60 logging.metrics_file=$T/m.jsonl > "$T/train.log" 2>&1; then
  if python3 - "$T/m.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
tr = [r for r in recs if not r.get('eval')]
ev = [r for r in recs if r.get('eval')]
assert [r['step'] for r in tr] == list(range(1, 61)), 'steps'
for r in tr:
    for k in ('loss', 'lr', 'grad_norm', 'tokens_per_sec', 'tflops_per_device', 'mfu', 'step_ms'):
        assert k in r, k
first = sum(r['loss'] for r in tr[:5]) / 5
last = sum(r['loss'] for r in tr[-5:]) / 5
assert last < first - 1.0, f'loss did not fall enough: {first:.3f} -> {last:.3f}'
assert len(ev) >= 1 and all('val_loss' in r and 'val_log_ppl' in r for r in ev), 'eval records'
assert ev[-1]['val_loss'] < 5.0, f"val loss {ev[-1]['val_loss']}"
PY
  then pass loss_falls_on_real_text; else fail loss_falls_on_real_text "see metrics"; fi
else fail loss_falls_on_real_text "train exited $?: $(tail -3 "$T/train.log")"; fi
# a metrics file that cannot be written (a full disk: /dev/full takes the open and
# fails every write) is said at once and makes the run exit 2 after it trained and
# saved its checkpoint, instead of exiting 0 with a truncated file
if [ -w /dev/full ]; then
  "$LT" train $CFG $D train.steps=3 logging.metrics_file=/dev/full checkpoint.dir=$T/ck_full \
    > "$T/full.log" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -q "logging.metrics_file: writing '/dev/full' failed: No space left" "$T/full.log" &&
     [ -e "$T/ck_full/latest" ]; then pass metrics_write_error
  else fail metrics_write_error "rc=$rc, $(grep -i 'metrics\|error' "$T/full.log" | head -2)"; fi
fi
# a damaged block in the validation file is found before step 1 (it used to
# surface only at the end-of-run evaluation, after all the training)
python3 - "$T/valid.ltok" "$T/valid_bad.ltok" <<'PY'
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
d[64 + 5] ^= 0xff  # inside the first zstd block; header and index stay valid
open(sys.argv[2], 'wb').write(d)
PY
"$LT" train $CFG data.train_path=$T/train.ltok data.valid_path=$T/valid_bad.ltok train.steps=3 \
  > "$T/vbad.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "data.valid_path: .*valid_bad.ltok" "$T/vbad.log" &&
   ! grep -q "^step " "$T/vbad.log"; then pass bad_valid_file_found_at_start
else fail bad_valid_file_found_at_start "rc=$rc, $(tail -2 "$T/vbad.log")"; fi
# checkpoint directory housekeeping: an unusable checkpoint.dir stops the run
# before step 1; keep_last keeps the newest N; load=auto starts fresh, then
# resumes from the newest; a killed writer's temporary directory is removed
expect_input_error unwritable_checkpoint_dir "checkpoint.dir: .*lattice-x" \
  "$LT" train $CFG $D train.steps=2 checkpoint.dir=/proc/lattice-x
"$LT" train $CFG $D train.steps=5 checkpoint.dir=$T/ckK checkpoint.save_interval=1 \
  checkpoint.keep_last=2 checkpoint.load=auto > "$T/keep.log" 2>&1
rc=$?
n=$(ls -d $T/ckK/step_* 2>/dev/null | wc -l)
if [ $rc -eq 0 ] && [ "$n" -eq 2 ] && [ -d $T/ckK/step_00000004 ] && [ -d $T/ckK/step_00000005 ] &&
   grep -q "no checkpoint in .*ckK yet: starting fresh" "$T/keep.log"; then pass keep_last_and_auto_fresh
else fail keep_last_and_auto_fresh "rc=$rc, $n step dirs, $(tail -1 "$T/keep.log")"; fi
mkdir -p $T/ckK/.tmp-step_00000009-999999
"$LT" train $CFG $D train.steps=7 checkpoint.dir=$T/ckK checkpoint.load=auto > "$T/auto.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "resumed from .*ckK/step_00000005 at step 5" "$T/auto.log" &&
   grep -q "removed 1 entry left by a save that was killed" "$T/auto.log" &&
   [ ! -e $T/ckK/.tmp-step_00000009-999999 ]; then pass auto_resume_and_stale_cleanup
else fail auto_resume_and_stale_cleanup "rc=$rc, $(grep -i 'resum\|removed\|error' "$T/auto.log" | head -2)"; fi
# ---- bad training data met mid-run: every rank stops at the step boundary, the
# last good step is saved, exit 2 naming file, block and sample -----------------
python3 - "$T/train.ids" "$T/mid.ids" <<'PY'
import sys
open(sys.argv[2], 'w').write(' '.join(open(sys.argv[1]).read().split()[:4000]) + '\n')
PY
"$LT" shard --vocab-size 256 --block-tokens 256 --input "$T/mid.ids" "$T/mid.ltok" >/dev/null
python3 - "$T/mid.ltok" "$T/mid_bad.ltok" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
idx = struct.unpack_from('<Q', d, 40)[0]
off, size = struct.unpack_from('<QI', d, idx + 16 * 8)  # block 8: tokens 2048..2303
d[off + size // 2] ^= 0xff
open(sys.argv[2], 'wb').write(d)
PY
midrun() { # name launcher...
  local name=$1; shift
  "$@" train $CFG data.train_path=$T/mid_bad.ltok data.shuffle=false train.steps=20 \
    checkpoint.dir=$T/ck_$name > "$T/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "data.train_path: step 8: sample 63 (tokens from 2016): .*mid_bad.ltok': block 8 checksum mismatch" "$T/$name.log" &&
     grep -q "stopping after step 7 and saving it" "$T/$name.log" &&
     [ "$(cat $T/ck_$name/latest 2>/dev/null)" = step_00000007 ]; then pass "$name"
  else fail "$name" "rc=$rc, latest $(cat $T/ck_$name/latest 2>/dev/null): $(grep -i 'error' "$T/$name.log" | head -2)"; fi
}
midrun bad_data_midrun_saves_last_good "$LT"
if command -v mpirun >/dev/null; then # the rank that meets it is not rank 0 (dp 2: rank 1 reads sample 63)
  midrun bad_data_midrun_dp2_saves_last_good timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$LT"
fi

# ---- MLPerf-style evaluation: every eval.interval_samples trained samples over the
# first eval.samples validation sequences; eval.target_log_ppl stops the run at the
# first evaluation that reaches it and reports the time to train ------------------
"$LT" train $CFG $D train.steps=400 eval.interval=0 eval.interval_samples=80 eval.samples=16 \
  eval.target_log_ppl=4.6 logging.log_interval=1000 checkpoint.dir=$T/ckT > "$T/target.log" 2>&1
rc=$?
n_eval=$(grep -c "^eval step .* | 16 samples | [0-9]*0 trained" "$T/target.log")
stop=$(sed -n 's/^target reached: .* at step \([0-9]*\) after \([0-9]*\) samples; time to train [0-9.]* s .*/\1 \2/p' "$T/target.log")
if [ $rc -eq 0 ] && [ -n "$stop" ] && [ "${stop% *}" -lt 400 ] && [ $(( ${stop% *} % 10 )) -eq 0 ] &&
   [ "$n_eval" -eq $(( ${stop% *} / 10 )) ] && [ -f "$T/ckT/step_$(printf %08d "${stop% *}")/state.lt" ]; then
  pass eval_target_stops_run
else fail eval_target_stops_run "rc=$rc stop='$stop' evals=$n_eval: $(grep -E 'target|error' "$T/target.log" | head -2)"; fi
# the same run's MLPerf log: valid JSON lines, every key the rules require once,
# in order, eval records with samples_count and epoch_num, run_stop success
"$LT" train $CFG $D train.steps=400 eval.interval=0 eval.interval_samples=80 eval.samples=16 \
  eval.target_log_ppl=4.6 logging.log_interval=1000 logging.mllog=$T/mlperf.log \
  logging.mllog_benchmark=gpt3 logging.mllog_org=lattice logging.mllog_platform=cpu > "$T/mllog.log" 2>&1
if err=$(python3 - "$T/mlperf.log" <<'PY' 2>&1
import json, sys
recs = []
for line in open(sys.argv[1]):
    assert line.startswith(':::MLLOG '), line
    r = json.loads(line[len(':::MLLOG '):])
    for k in ('namespace', 'time_ms', 'event_type', 'key', 'value', 'metadata'):
        assert k in r, (k, r)
    assert 'file' in r['metadata'] and 'lineno' in r['metadata'], r
    recs.append(r)
keys = [r['key'] for r in recs]
once = ['submission_org', 'submission_platform', 'submission_division', 'submission_benchmark',
        'init_stop', 'run_start', 'run_stop', 'global_batch_size', 'max_sequence_length', 'opt_name',
        'opt_base_learning_rate', 'opt_end_learning_rate', 'opt_learning_rate_decay_steps',
        'opt_learning_rate_warmup_steps', 'opt_learning_rate_decay_schedule', 'opt_adam_beta_1',
        'opt_adam_beta_2', 'opt_adam_epsilon', 'opt_gradient_clip_norm',
        'gradient_accumulation_steps', 'eval_samples', 'train_samples', 'init_checkpoint_step']
for k in once:
    assert keys.count(k) == 1, f'{k} appears {keys.count(k)} times'
for k in ('cache_clear', 'init_start', 'block_start', 'block_stop', 'eval_start', 'eval_accuracy', 'eval_stop'):
    assert keys.count(k) >= 1, f'no {k}'
order = [keys.index(k) for k in ('init_start', 'init_stop', 'run_start', 'block_start')]
assert order == sorted(order) and keys[-1] == 'run_stop', 'order'
assert all(keys.index(k) < keys.index('init_stop') for k in once[:4] + once[7:]), 'hyperparameters after init_stop'
for r in recs:
    if r['key'] in ('eval_accuracy', 'block_stop', 'eval_start', 'eval_stop'):
        assert 'samples_count' in r['metadata'] and 'epoch_num' in r['metadata'], r
assert keys.count('block_start') == keys.count('block_stop'), 'blocks unpaired'
assert recs[-1]['metadata']['status'] == 'success', recs[-1]
assert recs[keys.index('eval_samples')]['value'] == 16
print(len(recs))
PY
); then pass "mllog_content ($err lines)"
else fail mllog_content "$(echo "$err" | tail -1)"; fi
expect_input_error mllog_needs_benchmark "logging.mllog_benchmark" \
  "$LT" train $CFG $D logging.mllog=$T/x.log
expect_input_error eval_intervals_exclusive "eval.interval and eval.interval_samples" \
  "$LT" train $CFG $D eval.interval=5 eval.interval_samples=80
expect_input_error eval_samples_multiple "eval.samples .* multiple of train.micro_batch_size" \
  "$LT" train $CFG $D eval.samples=6
# more validation sequences than the file holds: refused, not silently fewer
expect_input_error eval_samples_beyond_file "eval.samples \(1000000\) is more than data.valid_path .* sequences" \
  "$LT" train $CFG $D eval.samples=1000000
expect_input_error eval_samples_beyond_file_eval "eval.samples \(1000000\) is more than data.valid_path" \
  "$LT" eval $CFG $D eval.samples=1000000

# ---- non-finite steps: skipped on the device, weights and moments unchanged ------
# (LT_INJECT_NONFINITE: a NaN loss at step 3; the checkpoints of steps 2 and 3
# are then byte-identical, and resuming from step 3 reproduces step 5 exactly,
# the skipped step being left out of Adam's bias correction)
LT_INJECT_NONFINITE=loss:3 "$LT" train $CFG $D train.steps=5 checkpoint.dir=$T/ckN \
  checkpoint.save_interval=1 > "$T/nan.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^step 3: loss nan, .*update skipped (weights and Adam moments unchanged" "$T/nan.log" &&
   same_state $T/ckN/step_00000002 $T/ckN/step_00000003 &&
   ! same_state $T/ckN/step_00000003 $T/ckN/step_00000004 &&
   grep -q '"optimizer_steps": 4' $T/ckN/step_00000005/meta.json; then pass nonfinite_step_skipped
else fail nonfinite_step_skipped "rc=$rc, $(grep -i 'skip\|error' "$T/nan.log" | head -2)"; fi
"$LT" train $CFG $D train.steps=5 checkpoint.dir=$T/ckN2 checkpoint.load=$T/ckN/step_00000003 \
  > "$T/nan2.log" 2>&1
if same_state $T/ckN/step_00000005 $T/ckN2/step_00000005; then pass skipped_step_resume_exact
else fail skipped_step_resume_exact "step 5 differs after resuming from the skipped step 3"; fi
# train.loss_spike_zscore: a step whose loss jumps (injected: x100 on rank 1 of
# dp 2, gradients untouched) far above the last 5 steps' is skipped on every
# rank - state unchanged, the real loss in the log and metrics; a run without
# the injection skips nothing
SPIKE="train.loss_spike_zscore=4 train.loss_spike_window=5 train.steps=9 checkpoint.save_interval=1
       logging.metrics_file=$T/spike.jsonl"
LT_INJECT_NONFINITE=spike:8:1 $MPI -np 2 -x LT_INJECT_NONFINITE "$LT" train $CFG $D $SPIKE \
  checkpoint.dir=$T/ckS > "$T/spike.log" 2>&1
rc=$?
"$LT" train $CFG $D $SPIKE checkpoint.dir=$T/ckS2 logging.metrics_file=$T/spike2.jsonl > "$T/spike2.log" 2>&1
rc2=$?
if [ $rc -eq 0 ] && grep -q "^step 8: loss [0-9.]* is a spike (.* standard deviations above the mean of the last 5 steps" "$T/spike.log" &&
   [ "$(grep -c 'is a spike' "$T/spike.log")" -eq 1 ] &&
   same_state $T/ckS/step_00000007 $T/ckS/step_00000008 && ! same_state $T/ckS/step_00000008 $T/ckS/step_00000009 &&
   grep -q '"optimizer_steps": 8' $T/ckS/step_00000009/meta.json &&
   python3 -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][7]
assert r['step'] == 8 and r['loss'] > 100 and r['grad_norm'] is None, r" "$T/spike.jsonl" &&
   [ $rc2 -eq 0 ] && ! grep -q 'is a spike' "$T/spike2.log"; then pass loss_spike_skipped_on_every_rank
else fail loss_spike_skipped_on_every_rank "rc=$rc rc2=$rc2: $(grep -i 'spike\|error' "$T/spike.log" | head -2)"; fi
# more consecutive skips than train.max_skipped_steps: exit 3, nothing saved, and
# the metrics hold null for the non-finite values (valid JSON)
LT_INJECT_NONFINITE=grad:2,grad:3 "$LT" train $CFG $D train.steps=6 checkpoint.dir=$T/ckD \
  train.max_skipped_steps=1 logging.metrics_file=$T/nan.jsonl > "$T/div.log" 2>&1
rc=$?
if [ $rc -eq 3 ] && grep -q "2 consecutive steps with a non-finite loss or gradient norm (up to step 3)" "$T/div.log" &&
   [ ! -e $T/ckD/latest ] &&
   python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert r[1]['grad_norm'] is None and len(r) == 3" $T/nan.jsonl
then pass diverged_run_stops_unsaved
else fail diverged_run_stops_unsaved "rc=$rc, $(grep -i 'error' "$T/div.log" | head -2)"; fi
# the hook holds 4 entries (over all ranks): a fifth is refused, not dropped
expect_input_error inject_fifth_entry "LT_INJECT_NONFINITE=.*more than 4 entries" \
  env LT_INJECT_NONFINITE=loss:2,loss:3,grad:4:1,spike:5,grad:6 "$LT" train $CFG $D train.steps=6
# a step makes the host wait for the device once (the CPU backend counts the
# calls a GPU would wait in): the loss, grad norm and clip stay on the device
if grep -q "host waits per step 1$" "$T/train.log"; then pass one_host_wait_per_step
else fail one_host_wait_per_step "$(grep '^done' "$T/train.log")"; fi
grep -q "lm head    128 token(s) per chunk, 1 chunk(s)" "$T/train.log" && pass lm_head_summary ||
  fail lm_head_summary "$(grep 'lm head' "$T/train.log")"
grep -q "parameters" "$T/train.log" && grep -q "data train" "$T/train.log" &&
  grep -q "num_layers: 2" "$T/train.log" &&
  grep -q "^attention  lattice (model.attention=auto: this run uses the CPU backend" "$T/train.log" &&
  pass startup_summary ||
  fail startup_summary "summary or resolved config missing"

# ---- activation recomputation: same training, less activation memory ----------------
for rc in none selective full; do
  "$LT" train $CFG $D train.steps=6 train.recompute=$rc logging.metrics_file=$T/rc_$rc.jsonl \
    > "$T/rc_$rc.log" 2>&1 || fail "recompute_$rc" "train exited $?"
done
if python3 - "$T" <<'PY'
import json, re, sys
d = sys.argv[1]
def recs(n): return [json.loads(l) for l in open(f'{d}/rc_{n}.jsonl') if '"eval"' not in l]
def acts(n):
    return int(re.search(r'activations=(\d+)', open(f'{d}/rc_{n}.log').read()).group(1))
base = recs('none')
for n in ('selective', 'full'):
    for a, b in zip(base, recs(n)):
        for k in ('loss', 'grad_norm'):
            assert abs(a[k] - b[k]) <= 1e-6 * abs(a[k]), (n, a['step'], k, a[k], b[k])
assert acts('full') < acts('selective') < acts('none'), (acts('none'), acts('selective'), acts('full'))
PY
then pass recompute_same_numbers_less_memory
else fail recompute_same_numbers_less_memory "see $T"; fi

# ---- checkpoint resume equals an uninterrupted run, bit for bit -----------------
R="$D train.steps=8 checkpoint.save_interval=4"
"$LT" train $CFG $R checkpoint.dir=$T/ckA logging.metrics_file=$T/a.jsonl >/dev/null 2>&1
"$LT" train $CFG $R checkpoint.dir=$T/ckB checkpoint.load=$T/ckA/step_00000004 \
  logging.metrics_file=$T/b.jsonl >/dev/null 2>&1
"$LT" export $T/ckA $T/exA >/dev/null 2>&1
"$LT" export $T/ckB $T/exB >/dev/null 2>&1
if [ -f $T/exA/model.safetensors ] && cmp -s $T/exA/model.safetensors $T/exB/model.safetensors &&
   same_state $T/ckA/step_00000008 $T/ckB/step_00000008 &&
   diff <(grep -v eval $T/a.jsonl | tail -4 | sed 's/"tokens_per_sec.*//') \
        <(grep -v eval $T/b.jsonl | sed 's/"tokens_per_sec.*//') >/dev/null; then
  pass resume_bit_exact
else fail resume_bit_exact "resumed run differs from the uninterrupted one"; fi

# ---- steps=0 saves the initial weights; export layout -----------------------------
"$LT" train $CFG $D train.steps=0 checkpoint.dir=$T/ck0 >/dev/null 2>&1
if [ -f $T/ck0/latest ] && "$LT" export $T/ck0 $T/ex0 >/dev/null 2>&1 &&
   python3 - $T/ex0 <<'PY'
import json, struct, sys
d = sys.argv[1]
raw = open(d + '/model.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
C, V, L = 32, 256, 2
assert hdr['transformer.wte.weight']['shape'] == [V, C]
assert hdr['transformer.wpe.weight']['shape'] == [64, C]
assert hdr['transformer.h.1.attn.c_attn.weight']['shape'] == [C, 3 * C]
assert hdr['transformer.h.0.mlp.c_fc.weight']['shape'] == [C, 4 * C]
assert hdr['transformer.h.0.mlp.c_proj.weight']['shape'] == [4 * C, C]
assert 'transformer.ln_f.bias' in hdr and 'transformer.h.1.ln_2.weight' in hdr
cfg = json.load(open(d + '/config.json'))
assert cfg['n_layer'] == L and cfg['n_embd'] == C and cfg['vocab_size'] == V
assert cfg['activation_function'] == 'gelu_new' and cfg['n_head'] == 4
# LayerNorm weights start at 1, biases at 0
off = hdr['transformer.ln_f.weight']['data_offsets']
vals = struct.unpack('<%df' % C, raw[8 + n + off[0]: 8 + n + off[1]])
assert all(v == 1.0 for v in vals)
PY
then pass steps0_checkpoint_and_export; else fail steps0_checkpoint_and_export "no checkpoint or bad export"; fi

# ---- model.init_method_std: the same draws scaled; the projections by 1/sqrt(2L) ----
"$LT" train $CFG $D train.steps=0 model.init_method_std=0.008 checkpoint.dir=$T/ck0s >/dev/null 2>&1
if [ -f $T/ck0s/latest ] && "$LT" export $T/ck0s $T/ex0s >/dev/null 2>&1 &&
   err=$(python3 - $T/ex0 $T/ex0s <<'PY' 2>&1
import json, math, struct, sys
def tensors(d):
    raw = open(d + '/model.safetensors', 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == '__metadata__':
            continue
        assert v['dtype'] == 'F32', v
        a, b = v['data_offsets']
        out[k] = struct.unpack('<%df' % ((b - a) // 4), raw[8 + n + a:8 + n + b])
    return out
base, small = tensors(sys.argv[1]), tensors(sys.argv[2])
def std(names, t):
    xs = [x for k in names for x in t[k]]
    return math.sqrt(sum(x * x for x in xs) / len(xs))
L = 2
normal = ['transformer.wte.weight', 'transformer.wpe.weight'] + \
    [f'transformer.h.{l}.{w}.weight' for l in range(L) for w in ('attn.c_attn', 'mlp.c_fc')]
proj = [f'transformer.h.{l}.{w}.weight' for l in range(L) for w in ('attn.c_proj', 'mlp.c_proj')]
s_n, s_p = std(normal, small), std(proj, small)
assert abs(s_n / 0.008 - 1) < 0.05, f'normal init std {s_n:.5f}, want 0.008'
assert abs(s_p / (0.008 / math.sqrt(2 * L)) - 1) < 0.05, f'projection std {s_p:.5f}, want 0.004'
# the same draws as the default 0.02 (only the scale differs)
for k in normal + proj:
    for x, y in zip(small[k], base[k]):
        assert abs(x - 0.4 * y) <= 1e-6 * abs(y) + 1e-12, (k, x, y)
assert json.load(open(sys.argv[2] + '/config.json'))['initializer_range'] == 0.008
assert json.load(open(sys.argv[1] + '/config.json'))['initializer_range'] == 0.02
print(f'std {s_n:.5f}, projections {s_p:.5f}')
PY
); then pass "init_method_std ($err)"; else fail init_method_std "${err:-no checkpoint or export}"; fi

# ---- optimizer.lr_decay_style=wsd: the learning rate each step logs -------------
# 12 updates, warm-up 2 (tiny.yaml: lr 3e-3, min_lr 3e-4), linear decay over the
# last 5: Megatron's num_steps 1, 2 in the warm-up, then 2..11 (lr until 7)
"$LT" train $CFG $D train.steps=12 optimizer.lr_decay_style=wsd optimizer.lr_wsd_decay_steps=5 \
  optimizer.lr_wsd_decay_style=linear logging.metrics_file=$T/wsd.jsonl \
  logging.mllog=$T/wsd.mllog logging.mllog_benchmark=gpt3 logging.mllog_org=lattice \
  logging.mllog_platform=cpu >"$T/wsd.log" 2>&1
if err=$(python3 - $T/wsd.jsonl $T/wsd.mllog <<'PY' 2>&1
import json, sys
lr = {r['step']: r['lr'] for r in map(json.loads, open(sys.argv[1])) if not r.get('eval')}
want = [1.5e-3, 3e-3] + [3e-3] * 6 + [3e-4 + f * 2.7e-3 for f in (0.8, 0.6, 0.4, 0.2)]
assert sorted(lr) == list(range(1, 13)), sorted(lr)
for k, w in enumerate(want, 1):
    assert abs(lr[k] - w) <= 1e-8 * w, f'step {k}: lr {lr[k]}, want {w}'
val = {}
for line in open(sys.argv[2]):
    r = json.loads(line[len(':::MLLOG '):])
    val[r['key']] = r['value']
name = val['opt_learning_rate_decay_schedule']
assert name == 'wsd (linear decay over the last 5 steps) with linear warmup', name
print(name)
PY
); then pass "lr_decay_style_wsd_logged ($err)"
else fail lr_decay_style_wsd_logged "${err:-$(tail -2 "$T/wsd.log")}"; fi
expect_input_error wsd_needs_decay_steps "optimizer.lr_wsd_decay_steps" \
  "$LT" train $CFG $D optimizer.lr_decay_style=wsd
expect_input_error wsd_span_after_warmup "optimizer.lr_wsd_decay_steps \(20\) must be <= optimizer.decay_steps \(20, from train.steps\) - optimizer.warmup_steps \(2\) = 18" \
  "$LT" train $CFG $D optimizer.lr_decay_style=wsd optimizer.lr_wsd_decay_steps=20
expect_input_error wsd_keys_need_wsd "needs optimizer.lr_decay_style=wsd" \
  "$LT" train $CFG $D optimizer.lr_wsd_decay_style=cosine

# ---- eval and sample from a checkpoint -----------------------------------------
out=$("$LT" eval $CFG $D checkpoint.load=$T/ckA 2>&1)
echo "$out" | grep -q "val loss" && pass eval_command || fail eval_command "$(echo "$out" | tail -2)"
# the validation loss train printed after its last step is the one eval gets from
# the checkpoint (the step's loss accumulator must not leak into it)
vt=$(python3 -c "import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r.get('eval')][-1]['val_loss'])" $T/a.jsonl)
ve=$(echo "$out" | sed -n 's/.*val loss \([0-9.]*\).*/\1/p' | tail -1)
if python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-3)" "$vt" "$ve"; then
  pass eval_matches_train
else fail eval_matches_train "train's final val loss $vt, eval from its checkpoint $ve"; fi
# eval leaves the training run's metrics file as it is: its record goes to a file of
# its own beside it (a.jsonl -> a.eval.jsonl), as its output says; without a
# checkpoint it warns on stderr that it scores a random model
cp $T/a.jsonl $T/a_before.jsonl
"$LT" eval $CFG $D checkpoint.load=$T/ckA logging.metrics_file=$T/a.jsonl > "$T/eval_m.log" 2> "$T/eval_m.err"
rc=$?
if [ $rc -eq 0 ] && cmp -s $T/a.jsonl $T/a_before.jsonl && [ "$(grep -c val_loss $T/a.eval.jsonl)" -eq 1 ] &&
   grep -q "^metrics    eval's record appended to $T/a.eval.jsonl" "$T/eval_m.log" &&
   ! grep -q "warning" "$T/eval_m.err"; then pass eval_keeps_training_metrics
else fail eval_keeps_training_metrics "rc=$rc: $(grep '^metrics' "$T/eval_m.log") $(cat "$T/eval_m.err")"; fi
"$LT" eval $CFG $D > "$T/eval_rand.log" 2> "$T/eval_rand.err"
rc=$?
if [ $rc -eq 0 ] && grep -q "warning: eval: no checkpoint loaded (checkpoint.load is not set): this scores a randomly initialised model" "$T/eval_rand.err" &&
   grep -q "^metrics    none written" "$T/eval_rand.log"; then pass eval_warns_without_checkpoint
else fail eval_warns_without_checkpoint "rc=$rc: $(cat "$T/eval_rand.err")"; fi

# ---- scripts/plot_metrics.py after a crash and resume: the steps since the
# checkpoint appear twice in the metrics file; the last record of each step is
# kept and evaluations come in step order (no line drawn backwards) -------------
cat > $T/resumed.jsonl <<'JSON'
{"step": 1, "loss": 5.0, "tokens_per_sec": 100}
{"step": 2, "loss": 4.0, "tokens_per_sec": 100}
{"eval": true, "step": 2, "val_loss": 4.5, "val_log_ppl": 4.5, "val_samples": 8}
{"step": 3, "loss": 3.0, "tokens_per_sec": 100}
{"step": 2, "loss": 4.1, "tokens_per_sec": 90}
{"eval": true, "step": 2, "val_loss": 4.4, "val_log_ppl": 4.4, "val_samples": 8}
{"step": 3, "loss": 3.1, "tokens_per_sec": 90}
{"step": 4, "loss": 2.0, "tokens_per_sec": 90}
{"eval": true, "step": 1, "val_loss": 4.9, "val_log_ppl": 4.9, "val_samples": 8}
JSON
if python3 - $T/resumed.jsonl <<'PY'
import sys
sys.path.insert(0, 'scripts')
import plot_metrics
train, evals = plot_metrics.read_metrics(sys.argv[1])
assert [(r['step'], r['loss']) for r in train] == [(1, 5.0), (2, 4.1), (3, 3.1), (4, 2.0)], train
assert [(e['step'], e['val_loss']) for e in evals] == [(1, 4.9), (2, 4.4)], evals
PY
then pass plot_metrics_last_record_per_step
else fail plot_metrics_last_record_per_step "see above"; fi
ids=$("$LT" sample $CFG $D checkpoint.load=$T/ckA sample.num_tokens=20 2>/dev/null)
n=$(echo "$ids" | wc -w)
[ "$n" -ge 20 ] && echo "$ids" | grep -qE '^[0-9 ]+$' && pass sample_command ||
  fail sample_command "got: $ids"

# ---- lattice schedule from a config ------------------------------------------------
out=$("$LT" schedule $CFG parallel.pipeline_model_parallel_size=2 train.micro_batch_size=2 2>&1)
if echo "$out" | grep -q "4 micro batches of 2" && echo "$out" | grep -q "^rank 1 " &&
   echo "$out" | grep -q "bubble fraction"; then pass schedule_from_config
else fail schedule_from_config "$(echo "$out" | tail -2)"; fi
# an uneven split: each chunk costs its layers (6 | 2 over their gcd 2: a forward 3
# and 1 units, a backward 6 and 2); stage 0 is busy throughout, so the makespan is
# its 4 x (3 + 6) = 36 units and the busy total 36 + 4 x (1 + 2) = 48
out=$("$LT" schedule $CFG model.num_layers=8 parallel.pipeline_model_parallel_size=2 \
  train.micro_batch_size=2 parallel.num_layers_in_last_pipeline_stage=2 2>&1)
if echo "$out" | grep -q "layers per chunk, stage by stage: 6, 2; .* layers / 2 times" &&
   echo "$out" | grep -q "^makespan: 36  busy: 48 " && ! echo "$out" | grep -q "(= (P-1)"; then
  pass schedule_uneven_split
else fail schedule_uneven_split "$(echo "$out" | grep -E 'layers per|makespan')"; fi
expect_input_error schedule_bad_layers "num_layers" "$LT" schedule $CFG \
  parallel.pipeline_model_parallel_size=2 model.num_layers=3

# ---- SIGTERM, and SIGUSR1 (Slurm's --signal=USR1@T before the time limit): stop
# after the current step, save, exit 128 + the signal ----------------------------
signal_saves() { # name signal number
  local name=$1 sig=$2 num=$3 rc
  "$LT" train $CFG $D train.steps=100000 checkpoint.dir=$T/ck_$name logging.log_interval=1 \
    > "$T/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q "step      3/" "$T/$name.log" 2>/dev/null && break; sleep 0.1; done
  kill -"$sig" $pid
  wait $pid
  rc=$?
  if [ $rc -eq $((128 + num)) ] && [ -f $T/ck_$name/latest ] &&
     grep -q "received signal $num" "$T/$name.log"; then pass "$name"
  else fail "$name" "rc=$rc $(tail -2 "$T/$name.log")"; fi
}
signal_saves sigterm_saves_checkpoint TERM 15
signal_saves sigusr1_saves_checkpoint USR1 10
# step lines end with the time since the start of training and, from the second
# step on, an ETA (the median step time so far times the steps left)
l=$T/sigterm_saves_checkpoint.log
if grep -qE "^step      1/100000 \| .* \| mem [0-9.]+ MiB \| elapsed [0-9hms.]+$" $l &&
   grep -qE "^step      2/100000 \| .* \| mem [0-9.]+ MiB \| elapsed [0-9hms.]+ eta [0-9hms.]+$" $l
then pass step_lines_elapsed_and_eta
else fail step_lines_elapsed_and_eta "$(grep '^step ' $l | head -2)"; fi

# ---- a second Ctrl-C during a long step aborts at once, without saving -------------
# (steps of a wider model take long enough for both interrupts to land inside one)
"$LT" train $CFG $D train.steps=100000 checkpoint.dir=$T/ckI logging.log_interval=1 \
  model.hidden_size=512 model.num_layers=6 model.num_attention_heads=8 \
  train.micro_batch_size=8 train.global_batch_size=64 > "$T/int2.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "step      1/" "$T/int2.log" 2>/dev/null && break; sleep 0.1; done
kill -INT $pid; sleep 0.05; kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && grep -q "second interrupt: aborting at once, without saving" "$T/int2.log" &&
   [ ! -e $T/ckI/latest ]; then pass second_interrupt_aborts
else fail second_interrupt_aborts "rc=$rc $(tail -2 "$T/int2.log")"; fi

exit $((failures > 0))
