#!/usr/bin/env bash
# test_overlap.sh BUILD_DIR - the communication overlap switches under mpirun
# on the CPU backend, tp 2 x pp 2 x dp 2 (8 ranks) with sequence parallelism
# and small buckets: each of parallel.overlap_grad_reduce,
# overlap_param_gather and overlap_p2p_comm, and all three together, give a
# run bit-identical to the same run with them off (every step's loss and
# gradient norm, the exported weights), for ZeRO 1 and 2 (and ZeRO 0 and the
# interleaved schedule with all on); the metrics carry exposed and busy
# communication. parallel.tp_comm_overlap (the sequence-parallel
# communication in row blocks behind the GEMMs) on tp 2 alone (with
# evaluations, whose loss gathers in blocks without a gradient) and on the
# 8-rank layout, alone and with the other switches: its row-block GEMMs may
# round differently from the whole ones (OpenBLAS picks another kernel for
# small blocks), so there the runs agree within the bounds measured (losses
# and gradient norms 1e-7 relative, exported weights 1e-6 absolute) instead
# of bit for bit. tp_comm_overlap without sequence parallelism and
# overlap_param_gather without ZeRO are refused. Every run is bounded by
# timeout: a hang fails the test. Last, the exposed data-parallel
# communication of the overlap benchmark's layout, all switches on against
# off, must be at least 25% lower.
set -u
BUILD=$1
. tests/lib.sh overlap
use_mpirun
MPI="$MPI -np 8"

text_shard "$T/train.ltok" || { fail prepare "lattice shard failed"; exit 1; }
# 4 layers so that each of the 2 stages (or 2 x 2 chunks) holds whole layers;
# global batch 8 in micro batches of 1: 4 micro batches per step on each of the
# 2 data-parallel ranks; buckets of 4000 parameters: several per stage
BASE="configs/tiny.yaml data.train_path=$T/train.ltok train.steps=6 train.micro_batch_size=1
      model.num_layers=4 logging.log_interval=100 eval.interval=0 optimizer.eps=1e-6
      parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2
      parallel.sequence_parallel=true parallel.bucket_size=4000"

run() { # name overrides...
  local name=$1 out="$T/$1"
  shift
  mkdir -p "$out"
  $MPI "$LT" train $BASE checkpoint.dir="$out/ck" logging.metrics_file="$out/m.jsonl" "$@" \
    >"$out/log" 2>&1 || { echo "  run $name failed: $(tail -3 "$out/log")"; return 1; }
  "$LT" export "$out/ck" "$out/hf" >/dev/null 2>&1
}

identical() { # ref name: losses, grad norms and exported weights bit for bit
  python3 tests/compare_runs.py "$T/$1" "$T/$2" 0 0 --steps 6
}

ALL="parallel.overlap_grad_reduce=true parallel.overlap_param_gather=true
     parallel.overlap_p2p_comm=true"
for z in 1 2; do
  run "off_z$z" optimizer.zero_stage=$z || { fail "zero${z}_reference" "run failed"; continue; }
  for sw in grad_reduce param_gather p2p_comm all; do
    if [ "$sw" = all ]; then set -- $ALL; else set -- "parallel.overlap_$sw=true"; fi
    name="${sw}_z$z"
    if run "$name" optimizer.zero_stage=$z "$@" && err=$(identical "off_z$z" "$name" 2>&1); then
      pass "overlap_${sw}_zero${z}_bit_identical"
    else fail "overlap_${sw}_zero${z}_bit_identical" "$(echo "${err:-run failed}" | tail -1)"; fi
  done
done

# ZeRO 2 with an embedding larger than a layer (vocabulary 1024: 16 K
# parameters per tensor rank against a layer's 6 K): its gradient is reduced
# in pieces of a layer's size, through the staging ring with the overlap and
# directly without it, in the same pieces
BIGV="optimizer.zero_stage=2 model.vocab_size=1024"
if run off_z2_v1024 $BIGV && run all_z2_v1024 $BIGV $ALL &&
   err=$(identical off_z2_v1024 all_z2_v1024 2>&1); then
  pass overlap_all_zero2_pieces_bit_identical
else fail overlap_all_zero2_pieces_bit_identical "$(echo "${err:-run failed}" | tail -1)"; fi

# ZeRO 0 (bucketed all-reduce) and the interleaved schedule, all switches on
# (overlap_param_gather needs ZeRO >= 1, so ZeRO 0 runs the other two)
if run off_z0 optimizer.zero_stage=0 &&
   run on_z0 optimizer.zero_stage=0 parallel.overlap_grad_reduce=true \
     parallel.overlap_p2p_comm=true && err=$(identical off_z0 on_z0 2>&1); then
  pass overlap_zero0_bit_identical
else fail overlap_zero0_bit_identical "$(echo "${err:-run failed}" | tail -1)"; fi
VPP="parallel.virtual_pipeline_model_parallel_size=2 optimizer.zero_stage=1"
if run off_vpp $VPP && run on_vpp $VPP $ALL && err=$(identical off_vpp on_vpp 2>&1); then
  pass overlap_interleaved_bit_identical
else fail overlap_interleaved_bit_identical "$(echo "${err:-run failed}" | tail -1)"; fi

# tp_comm_overlap: within the measured bounds (losses and gradient norms
# agreed to 7e-8 relative and the weights to 5e-7 absolute after 6 steps)
close() { # ref name
  python3 tests/compare_runs.py "$T/$1" "$T/$2" 1e-7 1e-6 --steps 6
}
# (with evaluations every 3 steps: the loss's gather in blocks without a gradient)
TP2="parallel.pipeline_model_parallel_size=1 model.num_layers=2 optimizer.zero_stage=1
     data.valid_path=$T/train.ltok eval.interval=3 eval.iters=2"
if run tp2_off $TP2 && run tp2_on $TP2 parallel.tp_comm_overlap=true &&
   err=$(python3 tests/compare_runs.py "$T/tp2_off" "$T/tp2_on" 1e-7 1e-6 --steps 6 --evals 2 2>&1); then
  pass tp_comm_overlap_tp2_close
else fail tp_comm_overlap_tp2_close "$(echo "${err:-run failed}" | tail -1)"; fi
# four TP ranks (dp 2): blocks from three peers arrive while a GEMM runs
TP4="parallel.tensor_model_parallel_size=4 parallel.pipeline_model_parallel_size=1 model.num_layers=2
     optimizer.zero_stage=1"
if run tp4_off $TP4 && run tp4_on $TP4 parallel.tp_comm_overlap=true &&
   err=$(close tp4_off tp4_on 2>&1); then
  pass tp_comm_overlap_tp4_close
else fail tp_comm_overlap_tp4_close "$(echo "${err:-run failed}" | tail -1)"; fi
if run tpov_z1 optimizer.zero_stage=1 parallel.tp_comm_overlap=true &&
   err=$(close off_z1 tpov_z1 2>&1); then
  pass tp_comm_overlap_tp2_pp2_dp2_close
else fail tp_comm_overlap_tp2_pp2_dp2_close "$(echo "${err:-run failed}" | tail -1)"; fi
if run tpov_all_z2 optimizer.zero_stage=2 $ALL parallel.tp_comm_overlap=true &&
   err=$(close off_z2 tpov_all_z2 2>&1); then
  pass tp_comm_overlap_with_all_switches_close
else fail tp_comm_overlap_with_all_switches_close "$(echo "${err:-run failed}" | tail -1)"; fi

# exposed and busy communication per kind in every step record; the worker's
# data-parallel time is counted as busy
if python3 - "$T/all_z1/m.jsonl" "$T/off_z1/m.jsonl" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    for r in map(json.loads, open(path)):
        t = r['time_ms']
        for k in ('tp', 'dp', 'pp'):
            assert t['comm_%s_busy' % k] >= 0 and t['comm_' + k] >= 0, (path, t)
        assert t['comm_dp_busy'] > 0, (path, t)
EOF
then pass overlap_metrics_exposed_and_busy
else fail overlap_metrics_exposed_and_busy "time_ms lacks exposed/busy communication"; fi

# exposed data-parallel communication is smaller with the overlap switches on
# than off, in the benchmark's layout (scripts/bench_overlap.sh: 1 x 1 x 2 with
# ZeRO 1, 2 ranks on the 2 cores; medians over 25 steps after warm-up):
# asserted loosely: at least 25% less, with up to 3 attempts, each once the
# cores are free of other work (or after a minute of waiting). On 2 cores each
# rank's worker thread takes its time from that rank's compute, and what stays
# exposed is mostly the ranks waiting for each other; 15 runs on the idle
# machine measured 21-45% less, median 37% (bench/2026-11-24-cpu-overlap.md)
# cpu_busy: the fraction of the machine's CPU time that was busy over 1 s
cpu_busy() {
  python3 -c "
import time
def sample():
    f = list(map(int, open('/proc/stat').readline().split()[1:]))
    return sum(f), f[3] + f[4]
t0, i0 = sample(); time.sleep(1); t1, i1 = sample()
print('%.2f' % (1 - (i1 - i0) / max(t1 - t0, 1)))"
}
hid="" figures=""
for attempt in 1 2 3; do
  # timing on an otherwise idle machine: wait (up to a minute) until other
  # processes leave the cores (what an attempt measured under load is noise)
  for _ in $(seq 30); do
    busy=$(cpu_busy 2>/dev/null || echo 0)
    awk -v b="$busy" 'BEGIN {exit !(b < 0.25)}' && break
    sleep 1
  done
  table=$(LAYOUTS="1:1:2:1" CASES="off all" STEPS=30 WARMUP=5 scripts/bench_overlap.sh "$BUILD" 2>&1) ||
    { figures="$figures; bench failed: $(echo "$table" | tail -1)"; continue; }
  r=$(echo "$table" | awk -F'|' '/\| off \|/{off=$6} /\| all \|/{all=$6}
      END {if (off > 0) printf "off %.2f ms, all %.2f ms (all/off %.2f)", off, all, all / off;
           exit !(off > 0 && all <= 0.75 * off)}') && { hid=$r; break; }
  figures="$figures; attempt $attempt (cpu busy $busy before): ${r:-no figures}"
done
if [ -n "$hid" ]; then echo "  exposed dp communication: $hid"; pass overlap_hides_dp_comm
else fail overlap_hides_dp_comm "exposed dp communication not 25% lower with overlap${figures}"; fi

# refused keys
refused() { # name expected-message overrides...
  local name=$1 msg=$2
  shift 2
  "$LT" train configs/tiny.yaml data.train_path="$T/train.ltok" "$@" >"$T/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "$msg" "$T/$name.log"; then pass "$name"
  else fail "$name" "exit $rc: $(tail -1 "$T/$name.log")"; fi
}
refused tp_comm_overlap_needs_sp "parallel.tp_comm_overlap .* needs parallel.sequence_parallel" \
  parallel.tp_comm_overlap=true
refused param_gather_needs_zero "parallel.overlap_param_gather needs optimizer.zero_stage >= 1" \
  parallel.overlap_param_gather=true
refused bucket_size_positive "parallel.bucket_size" parallel.bucket_size=0
exit $((failures > 0))
