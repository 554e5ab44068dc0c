#!/usr/bin/env bash
# test_pipeline.sh BUILD_DIR - pipeline parallelism under mpirun on the CPU
# backend: 1F1B and interleaved 1F1B layouts, alone and composed with tensor,
# sequence and data parallelism, ZeRO 0/1/2 and activation recomputation, must
# train the same 8-layer GPT as one process for 10 fp32 steps (loss and grad
# norm per step, validation loss, exported weights); each stage's activation
# memory follows the schedule and shrinks with recomputation; checkpoints
# move between pipeline layouts; bad pipeline configs are refused.
# LT_TEST_FULL=1 adds more layouts.
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" pipe
command -v mpirun >/dev/null || { fail mpirun "mpirun not found (openmpi-bin)"; exit 1; }
MPI="timeout 300 mpirun --allow-run-as-root --oversubscribe"

cat /usr/share/common-licenses/GPL-3 > "$T/text.txt"
cat /usr/share/common-licenses/Apache-2.0 > "$T/valid.txt"
python3 -c "
for n in ('text', 'valid'):
    d = open('$T/%s.txt' % n, 'rb').read()
    open('$T/%s.ids' % n, 'w').write(' '.join(map(str, d)))"
"$LT" shard --vocab-size 256 --input "$T/text.ids" "$T/train.ltok" >/dev/null &&
  "$LT" shard --vocab-size 256 --input "$T/valid.ids" "$T/valid.ltok" >/dev/null ||
  { fail prepare "lattice shard failed"; exit 1; }
# 8 layers so pp 4 x vpp 2 has a layer per chunk; global batch 8 in micro
# batches of 2: 4 micro batches per step with dp 1, 2 with dp 2
# optimizer.eps=1e-6: some gradients are zero in exact arithmetic (the key
# bias: softmax ignores a shift shared by all keys) and pure rounding noise in
# float, ~1e-9, which differs with the summation order of each layout; with
# Adam's default eps 1e-8 that noise becomes updates of a sizeable fraction of
# lr, and the weights of two correct layouts drift apart by ~2e-5 in 10 steps.
# eps 1e-6 leaves real gradients' updates untouched and noise's negligible.
BASE="configs/tiny.yaml model.num_layers=8 data.train_path=$T/train.ltok
      data.valid_path=$T/valid.ltok train.steps=10 train.micro_batch_size=2
      logging.log_interval=100 eval.interval=5 eval.iters=1 optimizer.eps=1e-6"

run() { # name np overrides...
  local name=$1 np=$2; shift 2
  local out="$T/$name"
  mkdir -p "$out"
  local launch="$LT"
  [ "$np" -gt 1 ] && launch="$MPI -np $np $LT"
  $launch train $BASE checkpoint.dir=$out/ck logging.metrics_file=$out/m.jsonl "$@" \
    >"$out/log" 2>&1 || { echo "  run $name failed: $(tail -3 "$out/log")"; return 1; }
  "$LT" export "$out/ck" "$out/hf" >/dev/null 2>&1
}

# compare REF NAME LOSS_TOL WEIGHT_TOL: per-step loss and grad norm, validation
# losses, exported weights
compare() {
  python3 tests/compare_runs.py "$T/$1" "$T/$2" "$3" "$4" --evals 2
}

# ---- fp32 layouts against one process -------------------------------------------
run ref 1 || fail reference "single-process run failed"
# name:np:overrides (comma-separated)
LAYOUTS="pp2:2:parallel.pipeline_model_parallel_size=2
pp4:4:parallel.pipeline_model_parallel_size=4
pp2_vpp2:2:parallel.pipeline_model_parallel_size=2,parallel.virtual_pipeline_model_parallel_size=2
pp4_vpp2:4:parallel.pipeline_model_parallel_size=4,parallel.virtual_pipeline_model_parallel_size=2
pp2_dp2_zero0:4:parallel.pipeline_model_parallel_size=2
pp2_dp2_zero2:4:parallel.pipeline_model_parallel_size=2,optimizer.zero_stage=2
pp4_tp2_zero1:8:parallel.pipeline_model_parallel_size=4,parallel.tensor_model_parallel_size=2
tp2_pp2_dp2_sp_zero1:8:parallel.pipeline_model_parallel_size=2,parallel.tensor_model_parallel_size=2,parallel.sequence_parallel=true,optimizer.zero_stage=1
tp2_pp2_vpp2_dp2_sp_zero1:8:parallel.pipeline_model_parallel_size=2,parallel.virtual_pipeline_model_parallel_size=2,parallel.tensor_model_parallel_size=2,parallel.sequence_parallel=true,optimizer.zero_stage=1
pp2_recompute_full:2:parallel.pipeline_model_parallel_size=2,train.recompute=full
pp2_vpp2_recompute_selective:2:parallel.pipeline_model_parallel_size=2,parallel.virtual_pipeline_model_parallel_size=2,train.recompute=selective
tp2_pp2_dp2_sp_zero1_recompute_full:8:parallel.pipeline_model_parallel_size=2,parallel.tensor_model_parallel_size=2,parallel.sequence_parallel=true,optimizer.zero_stage=1,train.recompute=full
pp4_vpp2_recompute_selective:4:parallel.pipeline_model_parallel_size=4,parallel.virtual_pipeline_model_parallel_size=2,train.recompute=selective
pp3_first2_last2:3:parallel.pipeline_model_parallel_size=3,parallel.num_layers_in_first_pipeline_stage=2,parallel.num_layers_in_last_pipeline_stage=2
pp4_last5_recompute_full:4:parallel.pipeline_model_parallel_size=4,parallel.num_layers_in_last_pipeline_stage=5,train.recompute=full
pp2_vpp5_embedding_loss_as_layers:2:parallel.pipeline_model_parallel_size=2,parallel.virtual_pipeline_model_parallel_size=5,parallel.account_for_embedding_in_pipeline_split=true,parallel.account_for_loss_in_pipeline_split=true
pp3_embedding_as_layer_recompute_selective:3:parallel.pipeline_model_parallel_size=3,parallel.account_for_embedding_in_pipeline_split=true,train.recompute=selective
tp2_pp2_vpp2_dp2_sp_zero2_first2:8:parallel.pipeline_model_parallel_size=2,parallel.virtual_pipeline_model_parallel_size=2,parallel.num_layers_in_first_pipeline_stage=2,parallel.tensor_model_parallel_size=2,parallel.sequence_parallel=true,optimizer.zero_stage=2"
if [ -n "${LT_TEST_FULL:-}" ]; then
  for pp in 2 4; do for vpp in 1 2; do for tp in 1 2; do for dp in 1 2; do for z in 0 1 2; do
    [ $((tp * pp * dp)) -le 8 ] || continue
    # interleaving needs the micro batches per step (8 / (2 * dp)) to be a multiple of pp
    [ "$vpp" = 1 ] || [ $((4 / dp % pp)) = 0 ] || continue
    ov="parallel.pipeline_model_parallel_size=$pp,parallel.virtual_pipeline_model_parallel_size=$vpp"
    ov="$ov,parallel.tensor_model_parallel_size=$tp,optimizer.zero_stage=$z"
    [ "$tp" = 2 ] && ov="$ov,parallel.sequence_parallel=true"
    LAYOUTS="$LAYOUTS
full_pp${pp}_vpp${vpp}_tp${tp}_dp${dp}_zero${z}:$((tp * pp * dp)):$ov"
  done; done; done; done; done
fi
while IFS=: read -r name np ov; do
  [ -n "$name" ] || continue
  if run "$name" "$np" ${ov//,/ } </dev/null && err=$(compare ref "$name" 1e-5 1e-5 2>&1); then
    pass "${name}_matches_single_process"
  else fail "${name}_matches_single_process" "$(echo "$err" | tail -1)"; fi
done <<<"$LAYOUTS"

# ZeRO-2 with the tied embedding larger than a layer (vocabulary 1024): the
# first and last stages' embedding gradients, summed over the embedding group,
# are reduce-scattered in layer-sized pieces, with and without the overlap
if run ref_v1024 1 model.vocab_size=1024; then
  for ov in false true; do
    name=pp2_dp2_zero2_v1024_overlap_$ov
    if run "$name" 4 model.vocab_size=1024 parallel.pipeline_model_parallel_size=2 \
         optimizer.zero_stage=2 parallel.overlap_grad_reduce=$ov </dev/null &&
       err=$(compare ref_v1024 "$name" 1e-5 1e-5 2>&1); then
      pass "${name}_matches_single_process"
    else fail "${name}_matches_single_process" "$(echo "${err:-run failed}" | tail -1)"; fi
  done
else fail ref_v1024 "single-process run with vocabulary 1024 failed"; fi

# a step waits for the device once in every layout (tp x pp x vpp x dp with SP,
# ZeRO-1): the vocab-parallel ids, the loss and the grad norm stay on the device
if grep -q "host waits per step 1$" "$T/tp2_pp2_vpp2_dp2_sp_zero1/log"; then
  pass one_host_wait_per_step_3d
else fail one_host_wait_per_step_3d "$(grep '^done' "$T/tp2_pp2_vpp2_dp2_sp_zero1/log")"; fi

# ---- bf16 within bf16 tolerance ----------------------------------------------------
run ref_bf16 1 train.precision=bf16 || fail reference_bf16 "single-process bf16 run failed"
if run tp2_pp2_vpp2_bf16 4 train.precision=bf16 parallel.tensor_model_parallel_size=2 \
     parallel.pipeline_model_parallel_size=2 parallel.virtual_pipeline_model_parallel_size=2 &&
   err=$(compare ref_bf16 tp2_pp2_vpp2_bf16 2e-2 5e-2 2>&1); then pass tp2_pp2_vpp2_bf16_matches
else fail tp2_pp2_vpp2_bf16_matches "$(echo "$err" | tail -1)"; fi

# ---- activation memory per stage: slots follow the schedule, recompute saves ---------
# stage line: "activations per pipeline rank: stage 0 X MiB (BYTES bytes, K slots), ..."
stages() { # name -> "bytes:slots bytes:slots ..."
  sed -n 's/^activations per pipeline rank://p' "$T/$1/log" | head -1 |
    sed 's/[^(]*(\([0-9]*\) bytes, \([0-9]*\) slots)/ \1:\2/g'
}
for rc in none selective full; do
  run mem_$rc 2 parallel.pipeline_model_parallel_size=2 \
    parallel.virtual_pipeline_model_parallel_size=2 train.recompute=$rc train.steps=2 ||
    fail memory_runs "pp2 vpp2 recompute $rc failed"
done
if python3 - "$(stages mem_none)" "$(stages mem_selective)" "$(stages mem_full)" <<'PY'
import sys
st = [[tuple(map(int, x.split(':'))) for x in a.split()] for a in sys.argv[1:]]
none, sel, full = st
assert len(none) == len(sel) == len(full) == 2, st
# interleaved, P=2, V=2, M=4: warm-up W_r = min(V*M, 2(P-r-1) + (V-1)P) = 4, 2;
# peak in flight W_r + 1 (chunk, micro batch) pairs = 5, 3 slots
assert [s for _, s in none] == [5, 3], ('slots', none)
for r in range(2):
    assert full[r][0] < sel[r][0] < none[r][0], ('recompute saving at stage', r, st)
    assert full[r][0] < 0.5 * none[r][0], ('full recompute saves most', r, st)
PY
then pass activation_memory_per_stage_and_recompute_saving
else fail activation_memory_per_stage_and_recompute_saving "none=$(stages mem_none) selective=$(stages mem_selective) full=$(stages mem_full)"; fi

# ---- checkpoints move between pipeline layouts -------------------------------------
reshard() { # name np_a overrides_a np_b overrides_b
  local name=$1 npa=$2 a=$3 npb=$4 b=$5 out="$T/$1"
  mkdir -p "$out"
  local runa="$LT" runb="$LT"
  [ "$npa" -gt 1 ] && runa="$MPI -np $npa $LT"
  [ "$npb" -gt 1 ] && runb="$MPI -np $npb $LT"
  $runa train $BASE train.steps=5 optimizer.decay_steps=10 eval.interval=0 \
    checkpoint.dir=$out/ckA $a >"$out/a.log" 2>&1 &&
  $runb train $BASE eval.interval=0 checkpoint.load=$out/ckA checkpoint.dir=$out/ckB \
    logging.metrics_file=$out/b.jsonl $b >"$out/b.log" 2>&1 &&
  python3 tests/compare_runs.py --resumed "$T/ref/m.jsonl" "$out/b.jsonl" 6 10 1e-5
}
if reshard tp2pp2_to_single 4 \
     "parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 optimizer.zero_stage=1" 1 ""
then pass checkpoint_tp2_pp2_resumes_single_process
else fail checkpoint_tp2_pp2_resumes_single_process "$(tail -2 "$T/tp2pp2_to_single/b.log")"; fi
if reshard single_to_pp4vpp2 1 "" 4 \
     "parallel.pipeline_model_parallel_size=4 parallel.virtual_pipeline_model_parallel_size=2"
then pass checkpoint_single_resumes_pp4_vpp2
else fail checkpoint_single_resumes_pp4_vpp2 "$(tail -2 "$T/single_to_pp4vpp2/b.log")"; fi

# uneven stages on both sides: the embedding and loss counted as layers (the
# first and last chunks hold none) to first/last stage sizes
if reshard embedding_loss_to_first_last 2 \
     "parallel.pipeline_model_parallel_size=2 parallel.virtual_pipeline_model_parallel_size=5
      parallel.account_for_embedding_in_pipeline_split=true
      parallel.account_for_loss_in_pipeline_split=true" 3 \
     "parallel.pipeline_model_parallel_size=3 parallel.num_layers_in_first_pipeline_stage=2
      parallel.num_layers_in_last_pipeline_stage=2"
then pass checkpoint_moves_between_uneven_splits
else fail checkpoint_moves_between_uneven_splits "$(tail -2 "$T/embedding_loss_to_first_last/b.log")"; fi
# (format version 4: a build from before the split keys refuses it)
if grep -q '"account_for_loss_in_pipeline_split": true' "$T/embedding_loss_to_first_last/ckA/step_00000005/meta.json" &&
   grep -q '"format_version": 4' "$T/embedding_loss_to_first_last/ckA/step_00000005/meta.json" &&
   grep -q '"format_version": 3' "$T/ref/ck/step_00000010/meta.json" &&
   grep -q "of layers 0+1+1+1+1, 1+1+1+1+0 (embedding and loss counted as a layer)" \
     "$T/embedding_loss_to_first_last/a.log"; then
  pass uneven_split_logged_and_recorded
else fail uneven_split_logged_and_recorded "$(grep '^pipeline' "$T/embedding_loss_to_first_last/a.log")"; fi

# ---- eval subcommand on a pipeline matches one process -----------------------------
v1=$("$LT" eval $BASE checkpoint.load=$T/ref/ck 2>&1 | sed -n 's/.*val loss \([0-9.]*\).*/\1/p')
v4=$($MPI -np 4 "$LT" eval $BASE checkpoint.load=$T/ref/ck parallel.pipeline_model_parallel_size=2 \
       parallel.virtual_pipeline_model_parallel_size=2 parallel.tensor_model_parallel_size=2 2>&1 |
     sed -n 's/.*val loss \([0-9.]*\).*/\1/p')
if [ -n "$v1" ] && [ "$v1" = "$v4" ]; then pass eval_on_tp2_pp2_vpp2_matches_single_process
else fail eval_on_tp2_pp2_vpp2_matches_single_process "one process '$v1', pipeline '$v4'"; fi

# ---- a signal to one stage stops every stage after the same step --------------------
mkdir -p "$T/sig"
$MPI -np 2 "$LT" train $BASE parallel.pipeline_model_parallel_size=2 train.steps=100000 \
  eval.interval=0 checkpoint.dir=$T/sig/ck >"$T/sig/log" 2>&1 &
mpid=$!
# wait until the summary's data line (the signal handlers are installed before
# the summary): a fixed sleep lost the race on a loaded machine
for _ in $(seq 240); do grep -q "^data train" "$T/sig/log" 2>/dev/null && break; sleep 0.5; done
# one rank process: timeout's child is mpirun, whose children are the ranks (a
# signal to mpirun itself would reach every rank, and mpirun kills ranks that
# have not exited a second later: too soon for a save on a loaded machine)
launcher=$(pgrep -P $mpid | head -1)
victim=$(pgrep -P "$launcher" -f "$LT train" | tail -1)
[ -n "$victim" ] && kill -TERM "$victim"
wait $mpid
rc=$?
if [ $rc -eq 143 ] && grep -q "received signal 15 after step" "$T/sig/log" &&
   [ -f "$T/sig/ck/latest" ] && grep -q "saved checkpoint" "$T/sig/log"; then
  pass sigterm_to_one_stage_stops_all_and_saves
else fail sigterm_to_one_stage_stops_all_and_saves "rc=$rc victim=$victim: $(tail -3 "$T/sig/log")"; fi

# ---- non-finite steps on one rank: every rank skips, weights bitwise unchanged -----
# tp2 x pp2 x dp2, SP, ZeRO 1: a NaN loss on rank 5 at step 2 and an Inf in the
# gradient shard of rank 2 at step 4; the checkpoint after each skipped step is
# byte-identical to the one before it
mkdir -p "$T/nonfinite"
LT_INJECT_NONFINITE=loss:2:5,grad:4:2 $MPI -np 8 -x LT_INJECT_NONFINITE "$LT" train $BASE \
  parallel.pipeline_model_parallel_size=2 parallel.tensor_model_parallel_size=2 \
  parallel.sequence_parallel=true optimizer.zero_stage=1 train.steps=5 eval.interval=0 \
  checkpoint.dir=$T/nonfinite/ck checkpoint.save_interval=1 >"$T/nonfinite/log" 2>&1
rc=$?
c=$T/nonfinite/ck
if [ $rc -eq 0 ] && grep -q "^step 2: .*update skipped" "$T/nonfinite/log" &&
   grep -q "^step 4: .*update skipped" "$T/nonfinite/log" &&
   same_state $c/step_00000001 $c/step_00000002 &&
   same_state $c/step_00000003 $c/step_00000004 &&
   ! same_state $c/step_00000002 $c/step_00000003; then
  pass nonfinite_on_one_rank_every_rank_skips
else fail nonfinite_on_one_rank_every_rank_skips "rc=$rc: $(grep -i 'skip\|error' "$T/nonfinite/log" | head -3)"; fi

# ---- asynchronous saves under tp2 x pp2 x dp2, ZeRO 1: the same bytes as synchronous
# ones, and resuming from one continues bit for bit -------------------------------
L3D="parallel.pipeline_model_parallel_size=2 parallel.tensor_model_parallel_size=2
     optimizer.zero_stage=1 eval.interval=0 checkpoint.save_interval=2"
mkdir -p "$T/async"
$MPI -np 8 "$LT" train $BASE $L3D train.steps=4 checkpoint.dir=$T/async/sync >"$T/async/sync.log" 2>&1 &&
$MPI -np 8 "$LT" train $BASE $L3D train.steps=4 checkpoint.dir=$T/async/bg checkpoint.async=true \
  >"$T/async/bg.log" 2>&1 &&
$MPI -np 8 "$LT" train $BASE $L3D train.steps=4 checkpoint.dir=$T/async/re checkpoint.async=true \
  checkpoint.load=$T/async/bg/step_00000002 >"$T/async/re.log" 2>&1
rc=$?
a=$T/async
if [ $rc -eq 0 ] && grep -q "written in the background" "$a/bg.log" &&
   same_state $a/sync/step_00000002 $a/bg/step_00000002 &&
   same_state $a/sync/step_00000004 $a/bg/step_00000004 &&
   same_state $a/sync/step_00000004 $a/re/step_00000004; then
  pass async_saves_identical_and_resume_exact_3d
else fail async_saves_identical_and_resume_exact_3d "rc=$rc: $(grep -i error $a/*.log | head -2)"; fi

# ---- bad pipeline configs are refused with one message -----------------------------
refused() { # name pattern np overrides...
  local name=$1 pat=$2 np=$3; shift 3
  local launch="$LT"
  [ "$np" -gt 1 ] && launch="$MPI -np $np $LT"
  $launch train $BASE "$@" >"$T/$name.log" 2>&1
  local rc=$? n
  n=$(grep -c -- "$pat" "$T/$name.log")
  if [ $rc -eq 2 ] && [ "$n" -eq 1 ]; then pass "refused_$name"
  else fail "refused_$name" "rc=$rc, $n messages: $(tail -2 "$T/$name.log")"; fi
}
refused layers_not_divisible "model.num_layers (8) must be divisible" 3 \
  parallel.pipeline_model_parallel_size=3
refused layers_not_divisible_by_chunks "model.num_layers (6) must be divisible" 2 \
  model.num_layers=6 parallel.pipeline_model_parallel_size=2 \
  parallel.virtual_pipeline_model_parallel_size=2
refused interleaved_micro_batches "to be a multiple of parallel.pipeline_model_parallel_size" 4 \
  parallel.pipeline_model_parallel_size=4 parallel.virtual_pipeline_model_parallel_size=2 \
  train.global_batch_size=12
refused vpp_without_pp "needs parallel.pipeline_model_parallel_size > 1" 1 \
  parallel.virtual_pipeline_model_parallel_size=2
# uneven stages: one way at a time, a pipeline, chunks that divide, a layer per stage
refused split_two_ways "are exclusive" 2 parallel.pipeline_model_parallel_size=2 \
  parallel.num_layers_in_first_pipeline_stage=2 parallel.account_for_loss_in_pipeline_split=true
refused split_without_pp "split (parallel.num_layers_in_first_pipeline_stage) needs" 1 \
  parallel.num_layers_in_first_pipeline_stage=4
refused split_first_not_by_chunks "num_layers_in_first_pipeline_stage (3) must be divisible" 2 \
  parallel.pipeline_model_parallel_size=2 parallel.virtual_pipeline_model_parallel_size=2 \
  parallel.num_layers_in_first_pipeline_stage=3
refused split_no_middle_layers "leave 0 of model.num_layers (8) for the 1 middle" 3 \
  parallel.pipeline_model_parallel_size=3 parallel.num_layers_in_first_pipeline_stage=4 \
  parallel.num_layers_in_last_pipeline_stage=4
refused split_accounted_not_divisible "= 10 must be divisible" 4 \
  parallel.pipeline_model_parallel_size=4 parallel.account_for_embedding_in_pipeline_split=true \
  parallel.account_for_loss_in_pipeline_split=true
# 2 stages x 2097153 micro batches: beyond the schedule's work limit (2^22)
refused schedule_too_long "exceeds the limit" 2 parallel.pipeline_model_parallel_size=2 \
  train.global_batch_size=4194306

exit $((failures > 0))
