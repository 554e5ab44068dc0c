#!/usr/bin/env bash
# test_parallel.sh BUILD_DIR - data parallelism with ZeRO 0/1/2 under mpirun
# on the CPU backend: the same tiny GPT trained 10 steps must match a single
# process (loss and grad norm per step, exported weights), optimizer state and
# gradient memory per rank must shrink with ZeRO as the engine accounts it,
# and inconsistent layouts are refused. LT_TEST_FULL=1 adds more layouts.
set -u
BUILD=$1
LT="$BUILD/lattice"
T=$(mktemp -d /tmp/lt-par-XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
command -v mpirun >/dev/null || { fail mpirun "mpirun not found (openmpi-bin)"; exit 1; }
MPI="timeout 300 mpirun --allow-run-as-root --oversubscribe"

cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 > "$T/text.txt"
python3 -c "
import sys
d = open('$T/text.txt', 'rb').read()
open('$T/ids', 'w').write(' '.join(map(str, d)))"
"$LT" shard --vocab-size 256 --input "$T/ids" "$T/train.ltok" >/dev/null ||
  { fail prepare "lattice shard failed"; exit 1; }
# tiny model; global batch 8 in micro batches of 2 so dp 1, 2 and 4 all fit
# optimizer.eps=1e-6: some gradients are zero in exact arithmetic (the key
# bias: softmax ignores a shift shared by all keys) and pure rounding noise in
# float, ~1e-9, which differs with the summation order of each layout; with
# Adam's default eps 1e-8 that noise becomes updates of a sizeable fraction of
# lr, and the weights of two correct layouts drift apart by ~2e-5 in 10 steps.
# eps 1e-6 leaves real gradients' updates untouched and noise's negligible.
BASE="configs/tiny.yaml data.train_path=$T/train.ltok train.steps=10 train.micro_batch_size=2
      logging.log_interval=100 eval.interval=0 optimizer.eps=1e-6"

run() { # name np overrides...
  local name=$1 np=$2; shift 2
  local out="$T/$name"
  mkdir -p "$out"
  if [ "$np" -eq 1 ]; then
    "$LT" train $BASE checkpoint.dir=$out/ck logging.metrics_file=$out/m.jsonl "$@" >"$out/log" 2>&1
  else
    $MPI -np "$np" "$LT" train $BASE checkpoint.dir=$out/ck logging.metrics_file=$out/m.jsonl \
      "$@" >"$out/log" 2>&1
  fi || { echo "  run $name failed: $(tail -3 "$out/log")"; return 1; }
  "$LT" export "$out/ck" "$out/hf" >/dev/null 2>&1
}

# compare REF NAME LOSS_TOL WEIGHT_TOL: per-step loss and grad norm, exported weights
compare() {
  python3 tests/compare_runs.py "$T/$1" "$T/$2" "$3" "$4"
}

mem() { # name key -> bytes from the engine's accounting line
  sed -n "s/.*memory bytes per rank:.* $2=\([0-9]*\).*/\1/p" "$T/$1/log" | head -1
}

# ---- fp32 layouts against one process -------------------------------------------
run ref 1 || fail reference "single-process run failed"
# tp:dp:zero:sp (np = tp*dp); every mechanism at least once by default, all
# combinations of tp in {1,2,4}, dp in {1,2,4}, tp*dp <= 8, zero 0/1/2, sp on/off
# under LT_TEST_FULL=1.
LAYOUTS="1:2:0:0 1:2:1:0 1:2:2:0 1:4:1:0 1:4:2:0 2:1:0:0 4:1:0:0 2:2:1:0 2:2:2:0 4:2:0:0
         2:4:1:0 2:1:0:1 4:1:1:1 2:2:2:1 4:2:1:1 2:4:2:1"
if [ -n "${LT_TEST_FULL:-}" ]; then
  LAYOUTS=""
  for tp in 1 2 4; do for dp in 1 2 4; do for z in 0 1 2; do for sp in 0 1; do
    [ $((tp * dp)) -le 8 ] && [ $((tp * dp)) -gt 1 ] || continue
    [ "$sp" = 1 ] && [ "$tp" = 1 ] && continue
    LAYOUTS="$LAYOUTS $tp:$dp:$z:$sp"
  done; done; done; done
fi
for l in $LAYOUTS; do
  IFS=: read -r tp dp z sp <<<"$l"
  name=tp${tp}_dp${dp}_zero${z}$([ "$sp" = 1 ] && echo _sp)
  spv=$([ "$sp" = 1 ] && echo true || echo false)
  if run "$name" $((tp * dp)) optimizer.zero_stage=$z parallel.tensor_model_parallel_size=$tp \
       parallel.sequence_parallel=$spv &&
     err=$(compare ref "$name" 1e-5 1e-5 2>&1); then
    pass "${name}_matches_single_process"
  else fail "${name}_matches_single_process" "$(echo "$err" | tail -1)"; fi
done

# ZeRO-2 with the embeddings larger than a layer (vocabulary 1024): their
# gradient is reduce-scattered in layer-sized pieces
V1024="model.vocab_size=1024"
if run ref_v1024 1 $V1024 && run dp4_zero2_v1024 4 optimizer.zero_stage=2 $V1024 &&
   err=$(compare ref_v1024 dp4_zero2_v1024 1e-5 1e-5 2>&1); then
  pass dp4_zero2_pieces_matches_single_process
else fail dp4_zero2_pieces_matches_single_process "$(echo "${err:-run failed}" | tail -1)"; fi

# ---- where the time goes: every step's breakdown adds up, and the groups that
# communicate show time (tp 2 x dp 2) while one process shows none -------------------
if python3 - "$T/tp2_dp2_zero1/m.jsonl" "$T/ref/m.jsonl" <<'PY'
import json, sys
for path, comm in ((sys.argv[1], True), (sys.argv[2], False)):
    recs = [r for r in map(json.loads, open(path)) if not r.get('eval')]
    assert len(recs) == 10, (path, len(recs))
    for r in recs:
        t = r['time_ms']
        parts = sum(t[k] for k in ('forward', 'backward', 'grads', 'optimizer', 'data', 'other'))
        assert abs(parts - r['step_ms']) <= 0.01 * r['step_ms'] + 0.05, (path, r['step'], parts, r['step_ms'])
        assert min(t.values()) >= 0 and t['forward'] > 0 and t['backward'] > 0, (path, t)
        assert t['comm_pp'] == 0, (path, t)
        if comm:
            assert t['comm_tp'] > 0 and t['comm_dp'] > 0, (path, t)
        else:
            assert t['comm_tp'] == 0 and t['comm_dp'] == 0, (path, t)
PY
then pass step_time_breakdown_adds_up
else fail step_time_breakdown_adds_up "see the metrics of tp2_dp2_zero1 and ref"; fi

# ---- activation recomputation composes with TP, SP and ZeRO ---------------------------
for rc in full selective; do
  name=tp2_dp2_zero1_sp_recompute_$rc
  if run "$name" 4 optimizer.zero_stage=1 parallel.tensor_model_parallel_size=2 \
       parallel.sequence_parallel=true train.recompute=$rc &&
     err=$(compare ref "$name" 1e-5 1e-5 2>&1); then pass "${name}_matches_single_process"
  else fail "${name}_matches_single_process" "$(echo "$err" | tail -1)"; fi
done

# ---- every overlap switch on (tp 4 x dp 2, SP, ZeRO 1) still trains the model of one
# process (tp_comm_overlap rounds small GEMM blocks differently: within 1e-5 all the same)
name=tp4_dp2_zero1_sp_all_overlap
if run "$name" 8 optimizer.zero_stage=1 parallel.tensor_model_parallel_size=4 \
     parallel.sequence_parallel=true parallel.tp_comm_overlap=true parallel.bucket_size=20000 \
     parallel.overlap_grad_reduce=true parallel.overlap_param_gather=true &&
   err=$(compare ref "$name" 1e-5 1e-5 2>&1); then pass "${name}_matches_single_process"
else fail "${name}_matches_single_process" "$(echo "$err" | tail -1)"; fi

# ---- a checkpoint written in one layout resumes in another -------------------------
# (steps 1-5 in one layout, 6-10 in another; the schedule is pinned to 10 steps)
reshard() { # name np_a overrides_a -- np_b overrides_b
  local name=$1 npa=$2 a=$3 npb=$4 b=$5 out="$T/$1"
  mkdir -p "$out"
  local runa="$LT" runb="$LT"
  [ "$npa" -gt 1 ] && runa="$MPI -np $npa $LT"
  [ "$npb" -gt 1 ] && runb="$MPI -np $npb $LT"
  $runa train $BASE train.steps=5 optimizer.decay_steps=10 checkpoint.dir=$out/ckA $a \
    >"$out/a.log" 2>&1 &&
  $runb train $BASE checkpoint.load=$out/ckA checkpoint.dir=$out/ckB \
    logging.metrics_file=$out/b.jsonl $b >"$out/b.log" 2>&1 &&
  python3 tests/compare_runs.py --resumed "$T/ref/m.jsonl" "$out/b.jsonl" 6 10 1e-5
}
if reshard tp2dp2_to_single 4 "parallel.tensor_model_parallel_size=2 optimizer.zero_stage=1" 1 ""
then pass checkpoint_tp2_dp2_zero1_resumes_single_process
else fail checkpoint_tp2_dp2_zero1_resumes_single_process "$(tail -2 "$T/tp2dp2_to_single/b.log")"; fi
if reshard single_to_tp2dp4 1 "" 8 \
     "parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true optimizer.zero_stage=2"
then pass checkpoint_single_resumes_tp2_dp4_sp_zero2
else fail checkpoint_single_resumes_tp2_dp4_sp_zero2 "$(tail -2 "$T/single_to_tp2dp4/b.log")"; fi
# TP 4 pads the vocabulary to 512 rows, one process to 256: rows are re-padded both ways
if reshard single_to_tp4dp2 1 "" 8 "parallel.tensor_model_parallel_size=4 optimizer.zero_stage=1"
then pass checkpoint_single_resumes_tp4_repadded_vocab
else fail checkpoint_single_resumes_tp4_repadded_vocab "$(tail -2 "$T/single_to_tp4dp2/b.log")"; fi
if reshard tp4_to_single 4 "parallel.tensor_model_parallel_size=4" 1 ""
then pass checkpoint_tp4_resumes_single_process
else fail checkpoint_tp4_resumes_single_process "$(tail -2 "$T/tp4_to_single/b.log")"; fi

# ---- bf16 within bf16 tolerance ----------------------------------------------------
run ref_bf16 1 train.precision=bf16 || fail reference_bf16 "single-process bf16 run failed"
if run tp2_dp2_zero1_bf16 4 optimizer.zero_stage=1 train.precision=bf16 \
     parallel.tensor_model_parallel_size=2 &&
   err=$(compare ref_bf16 tp2_dp2_zero1_bf16 2e-2 5e-2 2>&1); then pass tp2_dp2_zero1_bf16_matches
else fail tp2_dp2_zero1_bf16_matches "$(echo "$err" | tail -1)"; fi

# ---- memory: optimizer state total/dp for ZeRO-1/2, gradients shrink for ZeRO-2 -----
# (8 layers, so one layer's gradient bucket is small next to the whole model)
for z in 0 1 2; do
  run mem_z$z 4 optimizer.zero_stage=$z model.num_layers=8 train.steps=2 ||
    fail memory_runs "dp4 zero $z with 8 layers failed"
done
P=$(sed -n 's/.*parameter elements \([0-9]*\)).*/\1/p' "$T/mem_z0/log" | head -1)
o0=$(mem mem_z0 optimizer); o1=$(mem mem_z1 optimizer); o2=$(mem mem_z2 optimizer)
if [ -n "$P" ] && [ -n "$o1" ] && [ -n "$o2" ] && python3 -c "
P, o0, o1, o2 = $P, $o0, $o1, $o2
pad = 12 * 64 * 4      # shards are padded to multiples of 64 elements
assert abs(o1 - 12 * P / 4) <= pad, ('ZeRO-1 optimizer bytes', o1, 12 * P / 4)
assert o2 == o1, ('ZeRO-2 optimizer bytes', o2, o1)
assert abs(o0 - 12 * P) <= pad, ('ZeRO-0 optimizer bytes', o0, 12 * P)"; then
  pass zero_optimizer_state_is_total_over_dp
else fail zero_optimizer_state_is_total_over_dp "P=$P zero0=$o0 zero1=$o1 zero2=$o2"; fi
g0=$(mem mem_z0 grads); g1=$(mem mem_z1 grads); g2=$(mem mem_z2 grads)
if [ -n "$g2" ] && python3 -c "
P, g0, g1, g2 = $P, $g0, $g1, $g2
assert abs(g0 - 4 * P) <= 4 * 256, ('full fp32 gradients', g0, 4 * P)
assert abs(g1 - g0 - P) <= 4 * 256, ('ZeRO-1: full gradients plus a quarter shard', g1, g0)
assert g2 < 0.5 * g0, ('ZeRO-2 gradient memory', g2, g0)"; then
  pass zero2_gradient_memory
else fail zero2_gradient_memory "grads bytes: zero0 $g0, zero1 $g1, zero2 $g2 (P=$P)"; fi

# ---- inconsistent layouts are refused by every rank with one message --------------
refused() { # name pattern np overrides...
  local name=$1 pat=$2 np=$3; shift 3
  $MPI -np "$np" "$LT" train $BASE "$@" >"$T/$name.log" 2>&1
  local rc=$? n
  n=$(grep -c -- "$pat" "$T/$name.log")
  if [ $rc -eq 2 ] && [ "$n" -eq 1 ]; then pass "refused_$name"
  else fail "refused_$name" "rc=$rc, $n messages: $(tail -2 "$T/$name.log")"; fi
}
refused world_vs_tp "world size 3" 3 parallel.tensor_model_parallel_size=2
refused batch_vs_dp "global_batch_size" 3
refused zero_stage "zero_stage" 2 optimizer.zero_stage=5
refused heads_vs_tp "num_attention_heads" 4 parallel.tensor_model_parallel_size=4 \
  model.num_attention_heads=2
refused ffn_vs_tp "ffn_hidden_size" 4 parallel.tensor_model_parallel_size=4 model.ffn_hidden_size=66
refused sp_without_tp "sequence_parallel" 2 parallel.sequence_parallel=true

exit $((failures > 0))
