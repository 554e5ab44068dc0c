#!/usr/bin/env bash
# parallel_gpu.sh BUILD_DIR - multi-rank training on the CUDA backend: the
# tiny GPT trained for a few steps by 2 ranks (mpirun) must match one process
# on the same GPU: per-step loss and grad norm within a tolerance, for data
# parallelism (ZeRO 0/1/2), tensor parallelism (with and without sequence
# parallelism), pipeline parallelism (1F1B and interleaved), expert
# parallelism (EP 2 over DP 2 and over TP 2 with SP), fp32 and bf16.
#
# The 2-rank runs use comm.backend=mpi: MPI with the device tensors staged
# through pinned host memory, so both ranks may share one GPU (NCCL refuses
# that). With 2 or more visible GPUs the same layouts also run with
# comm.backend=nccl; with one GPU the script checks instead that
# comm.backend=nccl is refused (exit 2, one message per rank).
#
# PARALLEL_GPU_EMU=1 (tests/test_nccl_emu.sh, in make test): the same
# layouts on this machine, with BUILD_DIR/tests/emu/lattice - lattice whose
# GPUs are the CUDA backend's host emulation, one per rank (LT_EMU_GPUS of
# them, 8 unless set), and whose NCCL calls tests/emu/nccl_mpi.c carries out
# over MPI - through comm.backend=nccl only, plus layouts of 4 ranks and the
# overlap switches (background NCCL communicators), and the refusal of NCCL
# on a shared GPU with LT_EMU_GPUS=1. What that checks is lattice's use of
# NCCL (src/comm/comm_nccl.c), not NCCL.
#
# Needs: an NVIDIA GPU (compute capability >= 8.0), a lattice binary built
# with CUDA (BUILD_DIR/lattice), python3, and mpirun (OpenMPI, the same MPI
# the binary was linked against). A lent GPU machine without MPI cannot run
# it: the script then exits 2 with a message.
# Environment: PARALLEL_GPU_STEPS (default 10), PARALLEL_GPU_TOL_FP32 (1e-4),
#   PARALLEL_GPU_TOL_BF16 (3e-2), PARALLEL_GPU_KEEP=1 keeps the work dir.
# Prints PASS/FAIL lines and "N passed, M failed" like the other test scripts.
# Exit status: 0 all passed, 1 a run or comparison failed, 2 cannot run.
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
EMU=${PARALLEL_GPU_EMU:-0}
LT="$BUILD/lattice"
[ "$EMU" = 1 ] && LT="$BUILD/tests/emu/lattice"
STEPS=${PARALLEL_GPU_STEPS:-10}
TOL_FP32=${PARALLEL_GPU_TOL_FP32:-1e-4}
TOL_BF16=${PARALLEL_GPU_TOL_BF16:-3e-2}
if [ ! -x "$LT" ]; then echo "FAIL setup: $LT not found (a full lattice build is needed)"; exit 2; fi
command -v python3 >/dev/null 2>&1 || { echo "FAIL setup: python3 not found"; exit 2; }
command -v mpirun >/dev/null 2>&1 ||
  { echo "FAIL setup: mpirun not found: multi-rank runs need MPI (openmpi-bin)"; exit 2; }
if ! "$LT" --version 2>/dev/null | grep -q cuda; then
  echo "FAIL setup: $LT was built without the CUDA backend"; exit 2
fi
if [ "$EMU" = 1 ]; then
  NGPU=${LT_EMU_GPUS:-8}
else
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
[ "${NGPU:-0}" -ge 1 ] || { echo "FAIL setup: no GPU visible (nvidia-smi -L)"; exit 2; }
MPI="timeout 600 mpirun --allow-run-as-root --oversubscribe"
T=$(mktemp -d /tmp/lt-par-gpu-XXXXXX)
[ "${PARALLEL_GPU_KEEP:-0}" = 1 ] && echo "work dir: $T" || trap 'rm -rf "$T"' EXIT
passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
echo "lattice: $("$LT" --version 2>&1 | head -2 | tr '\n' ';') GPUs: $NGPU"

# ---- data: byte-level English text (vocab 256) ----
python3 tests/gpu/text_ids.py "$T/ids" /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0
"$LT" shard --vocab-size 256 --input "$T/ids" "$T/train.ltok" >"$T/shard.log" 2>&1 ||
  { fail setup "lattice shard failed: $(tail -1 "$T/shard.log")"; echo "$passed passed, $failed failed"; exit 1; }
# global batch 8 in micro batches of 2: dp 1 and 2 both fit
BASE="configs/tiny.yaml train.device=cuda data.train_path=$T/train.ltok train.steps=$STEPS
      train.micro_batch_size=2 data.valid_path= checkpoint.dir= checkpoint.load=
      logging.log_interval=100 eval.interval=0"

run() { # name np overrides... -> $T/name/{log,m.jsonl}
  local name=$1 np=$2; shift 2
  local out="$T/$name"
  mkdir -p "$out"
  if [ "$np" -eq 1 ]; then
    "$LT" train $BASE logging.metrics_file="$out/m.jsonl" "$@" >"$out/log" 2>&1
  else
    $MPI -np "$np" "$LT" train $BASE logging.metrics_file="$out/m.jsonl" "$@" >"$out/log" 2>&1
  fi || { echo "  run $name failed: $(tail -3 "$out/log" | tr '\n' ' ')"; return 1; }
}

compare() { # ref name tol -> prints a summary; exit status 0 when within tol
  python3 - "$T/$1/m.jsonl" "$T/$2/m.jsonl" "$3" "$STEPS" <<'PY'
import json, sys
def recs(p):
    return {r['step']: r for r in map(json.loads, filter(str.strip, open(p))) if not r.get('eval')}
a, b, tol, steps = recs(sys.argv[1]), recs(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
miss = [s for s in range(1, steps + 1) if s not in a or s not in b]
if miss:
    print(f"missing steps {miss[:5]}"); sys.exit(1)
worst, where = 0.0, ''
for s in range(1, steps + 1):
    for k in ('loss', 'grad_norm'):
        rel = abs(a[s][k] - b[s][k]) / max(abs(a[s][k]), 1e-12)
        if rel > worst:
            worst, where = rel, f"step {s} {k} {a[s][k]:.6f} vs {b[s][k]:.6f}"
print(f"max rel diff {worst:.3e} (tol {tol:g}){' at ' + where if where else ''}")
sys.exit(0 if worst <= tol else 1)
PY
}

check() { # ref name tol np comm overrides...
  local ref=$1 name=$2 tol=$3 np=$4 comm=$5 out; shift 5
  if ! run "$name" "$np" "comm.backend=$comm" "$@"; then
    fail "$name" "run failed: $(tail -2 "$T/$name/log" | tr '\n' ' ')"; return
  fi
  if ! grep -q "comm *$comm on device buffers" "$T/$name/log"; then
    fail "$name" "log does not report '$comm on device buffers'"; return
  fi
  if out=$(compare "$ref" "$name" "$tol" 2>&1); then pass "$name ($out)"; else fail "$name" "$out"; fi
}

# ---- references: one process on the GPU ----
run ref 1 || fail reference "single-process fp32 run failed"
run ref_bf16 1 train.precision=bf16 || fail reference_bf16 "single-process bf16 run failed"
run ref4 1 model.num_layers=4 || fail reference4 "single-process 4-layer run failed"
# mixture of experts (4 experts top-2 in both layers, aux and z losses): the
# expert-parallel all-to-alls of device tensors (MPI: staged through host
# memory; NCCL: grouped sends and receives)
MOE="model.num_experts=4 model.moe_ffn_hidden_size=48 model.moe_aux_loss_coeff=0.01
     model.moe_z_loss_coeff=0.001"
run ref_moe 1 $MOE || fail reference_moe "single-process MoE run failed"
run ref_moe_bf16 1 $MOE train.precision=bf16 || fail reference_moe_bf16 "single-process bf16 MoE run failed"

LIBS="mpi"
[ "$NGPU" -ge 2 ] && LIBS="mpi nccl"
[ "$EMU" = 1 ] && LIBS="nccl" # MPI staging of device buffers: test_parallel.sh's layouts
for lib in $LIBS; do
  check ref "dp2_zero0_$lib" "$TOL_FP32" 2 "$lib" optimizer.zero_stage=0
  check ref "dp2_zero1_$lib" "$TOL_FP32" 2 "$lib" optimizer.zero_stage=1
  check ref "dp2_zero2_$lib" "$TOL_FP32" 2 "$lib" optimizer.zero_stage=2
  check ref "tp2_$lib" "$TOL_FP32" 2 "$lib" parallel.tensor_model_parallel_size=2
  check ref "tp2_sp_$lib" "$TOL_FP32" 2 "$lib" parallel.tensor_model_parallel_size=2 \
    parallel.sequence_parallel=true
  check ref_bf16 "dp2_zero1_bf16_$lib" "$TOL_BF16" 2 "$lib" optimizer.zero_stage=1 \
    train.precision=bf16
  check ref_bf16 "tp2_sp_bf16_$lib" "$TOL_BF16" 2 "$lib" parallel.tensor_model_parallel_size=2 \
    parallel.sequence_parallel=true train.precision=bf16
  # pipeline messages always go over MPI (staged); the embedding group uses $lib
  check ref "pp2_$lib" "$TOL_FP32" 2 "$lib" parallel.pipeline_model_parallel_size=2
  check ref4 "pp2_vpp2_$lib" "$TOL_FP32" 2 "$lib" model.num_layers=4 \
    parallel.pipeline_model_parallel_size=2 parallel.virtual_pipeline_model_parallel_size=2
  check ref_bf16 "pp2_bf16_$lib" "$TOL_BF16" 2 "$lib" parallel.pipeline_model_parallel_size=2 \
    train.precision=bf16
  check ref_moe "ep2_over_dp2_$lib" "$TOL_FP32" 2 "$lib" $MOE parallel.expert_model_parallel_size=2
  check ref_moe "ep2_over_tp2_sp_$lib" "$TOL_FP32" 2 "$lib" $MOE parallel.expert_model_parallel_size=2 \
    parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true
  check ref_moe_bf16 "ep2_over_dp2_bf16_$lib" "$TOL_BF16" 2 "$lib" $MOE train.precision=bf16 \
    parallel.expert_model_parallel_size=2
done

# ---- emulated GPUs: 4 ranks, and the overlap switches' NCCL communicators ----
if [ "$EMU" = 1 ] && [ "$NGPU" -lt 4 ]; then
  echo "  (the 4-rank layouts need 4 emulated GPUs: LT_EMU_GPUS=$NGPU)"
elif [ "$EMU" = 1 ]; then
  check ref "dp2_tp2_sp_zero2_nccl" "$TOL_FP32" 4 nccl parallel.tensor_model_parallel_size=2 \
    parallel.sequence_parallel=true optimizer.zero_stage=2
  check ref "dp2_zero2_overlap_nccl" "$TOL_FP32" 2 nccl optimizer.zero_stage=2 \
    parallel.overlap_grad_reduce=true parallel.overlap_param_gather=true
  check ref "tp2_sp_tp_overlap_nccl" "$TOL_FP32" 2 nccl parallel.tensor_model_parallel_size=2 \
    parallel.sequence_parallel=true parallel.tp_comm_overlap=true
  check ref4 "pp2_dp2_zero1_overlap_nccl" "$TOL_FP32" 4 nccl model.num_layers=4 \
    parallel.pipeline_model_parallel_size=2 optimizer.zero_stage=1 \
    parallel.overlap_grad_reduce=true parallel.overlap_param_gather=true parallel.overlap_p2p_comm=true
  check ref_moe "ep4_over_dp4_nccl" "$TOL_FP32" 4 nccl $MOE parallel.expert_model_parallel_size=4
  check ref_moe "ep2_over_tp2_sp_dp2_zero1_nccl" "$TOL_FP32" 4 nccl $MOE \
    parallel.expert_model_parallel_size=2 parallel.tensor_model_parallel_size=2 \
    parallel.sequence_parallel=true optimizer.zero_stage=1
fi

# ---- one GPU: explicit NCCL is refused (ranks would share the device) ----
[ "$EMU" = 1 ] && export LT_EMU_GPUS=1 NGPU=1
if [ "$NGPU" -eq 1 ]; then
  $MPI -np 2 "$LT" train $BASE comm.backend=nccl >"$T/nccl_shared.log" 2>&1
  rc=$?
  n=$(grep -c "comm.backend=nccl: some ranks share a GPU (2 ranks on this node, 1 visible GPU(s))" "$T/nccl_shared.log")
  if [ "$rc" -eq 2 ] && [ "$n" -ge 1 ]; then
    pass "nccl_on_shared_gpu_refused"
  else
    fail "nccl_on_shared_gpu_refused" "exit $rc, $n messages: $(tail -2 "$T/nccl_shared.log" | tr '\n' ' ')"
  fi
  # auto picks MPI staging on a shared GPU
  check ref "dp2_zero0_auto" "$TOL_FP32" 2 mpi comm.backend=auto optimizer.zero_stage=0
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
