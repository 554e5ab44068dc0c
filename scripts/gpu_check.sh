#!/usr/bin/env bash
# gpu_check.sh REPORT_FILE - build lattice on a GPU machine, run the GPU
# checks in order of value and write a report as it goes: the first call of a
# lent device (15 minutes in all, the machine's start included) must return
# what matters most even when it is cut short.
#
# Build: `make gpu-build` (build/lattice, tests/gpu/*, tests/test_comm_mpi),
# SASS for sm_90 only by default (GPU_CHECK_ARCH; a lent device is a Hopper:
# one target halves nvcc's time). The Makefile finds CUDA as a toolkit or as
# pip wheels (site-packages/nvidia, e.g. PyTorch's; CUDA_WHEELS=DIR) and
# libyaml, zstd, OpenBLAS and Open MPI on the system or in build/deps, the
# bundle scripts/bundle_deps.sh makes on a machine that has them (carry
# build/deps to a machine that has only CUDA). No library path is exported:
# lattice's binaries find their libraries through rpaths, the bundle's
# through RUNPATHs relative to themselves; the bundle's mpirun gets
# OPAL_PREFIX, PMIX_PREFIX and PATH (LT_ENV) only for lattice's commands.
#
# Phases (GPU_CHECK_PHASES: a comma list run in the order given; "first" (the
# default), "rest", "all", or "continue"):
#   first = tests,train,attention,moe,memcheck,bench,bench15 - one device call:
#     tests      the op tests against the CPU backend (tests/gpu/test_gpu_ops,
#                cuBLASLt GEMMs and cuDNN's fallback included)
#     train      20 steps CPU vs GPU, GPT and Llama, fp32 and bf16, and the
#                Llama with experts, windows and documents
#                (tests/gpu/train_compare.sh)
#     attention  attention forward+backward, lattice's kernels and cuDNN, at
#                s 1024/2048 x d 64/128, deterministic and not, and GPT-OSS's
#                sliding window (128) at s 2048/8192, d 64
#     moe        Mixtral 8x7B's layer (8 experts top-2) in a one-layer slice,
#                lattice and its PyTorch peer side by side (scripts/bench.sh),
#                then lattice again with cuBLAS's grouped GEMM for the experts
#                (model.moe_grouped_gemm=true); then, as far as the phase's time goes, GPT-OSS 20B's layer in
#                a 4-layer slice (32 experts top-4, windows on every other
#                layer) and the same slice dense with equal FLOPs
#     memcheck   compute-sanitizer memcheck of two bf16 training steps of
#                the tiny GPT, then of the tiny Llama with experts, windows
#                and documents (lattice's attention kernels: cuDNN's are not
#                ours to check)
#     bench      GPT-2 124M throughput and its PyTorch peer (scripts/bench.sh;
#                the micro batch the planner says fits; the side-by-side rows
#                are in the report as soon as both runs ended)
#     bench15    GPT-2 1.5B and its peer (the peer from its own init: no
#                6 GB export; no loss check)
#                (both peers: torch.compile per transformer block, as
#                torchtitan does: one compilation for all blocks; both then
#                run lattice alone with model.attention_deterministic=false
#                as far as the phase's time goes)
#   rest = calibrate,parallel,kernels,mpi,peer,racecheck (cheapest first, but
#     racecheck, clean on the fourth and fifth draws, after the peer):
#     calibrate  `lattice plan --calibrate` on the GPU; then the runs the first
#                phases measured (bench, bench15, moe's), each predicted with
#                those constants and with the built-in row, beside its
#                measured step; fails when bench or bench15 is off the
#                calibrated prediction by more than half, or when
#                --calibrate warns that a figure's rounds differ twofold
#     parallel   2 ranks on one GPU under mpirun (tests/gpu/parallel_gpu.sh)
#     kernels    memory-bound kernels' bandwidth (tests/gpu/bench_kernels)
#     mpi        4 ranks of tests/test_comm_mpi under mpirun (CPU only)
#     peer       the PyTorch peer's loss agreement: Llama with experts, Llama,
#                GPT-2, fp32 and bf16 (tests/gpu/peer_check.sh; the MoE
#                Llama first: the draws' budgets cut the phase before it twice)
#     racecheck  compute-sanitizer racecheck of test_gpu_ops --quick --aligned,
#                the cases whose kernels share memory, most at risk first
#   continue = every phase of first and rest that no earlier run of this
#     script on this machine finished (build/gpu_check/done); the build is
#     skipped when its binaries are there.
# Time: every phase has a cap and a least useful time; the whole run keeps
# within GPU_CHECK_BUDGET seconds (default 510: a 10-minute device command
# with the start and transfers around it). A phase gets min(cap, budget left
# - 15 s) and is skipped, saying so in the report, when that is below its
# least time. Each phase's processes run under `timeout` and are all stopped
# at its limit. A phase's result line is written and synced the moment it
# ends, and the summary (also on SIGTERM/SIGINT/SIGHUP) lists every phase:
# ok, FAILED, TIMED OUT, or NOT RUN with the reason.
#
# Environment: GPU_CHECK_PHASES, GPU_CHECK_BUDGET (0 = no limit),
#   GPU_CHECK_BUILD_TIMEOUT (default 240), GPU_CHECK_CAP (every phase's cap,
#   for tests), GPU_CHECK_ARCH (SASS targets,
#   default 90; "" = the Makefile's), GPU_CHECK_LATTICE (a lattice binary for
#   the training phases instead of the build), GPU_CHECK_DIR (logs, default
#   build/gpu_check), GPU_CHECK_DRY=1 (print the plan: each phase's expected
#   time, cap and least time; exit status 1 when the expected times exceed
#   the budget), LT_DEPS (the bundle, default build/deps), CUDA_WHEELS /
#   CUDA_HOME / CUDA_PTX / CUDA_CCCL (passed to make), GPU_CHECK_MAKE_ARGS.
# Exit status: 0 when every phase run passed, 1 otherwise, 2 bad usage.
set -u
REPORT=${1:-}
if [ -z "$REPORT" ]; then echo "usage: scripts/gpu_check.sh REPORT_FILE" >&2; exit 2; fi
case "$REPORT" in /*) ;; *) REPORT="$PWD/$REPORT" ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
WORK=${GPU_CHECK_DIR:-$ROOT/build/gpu_check}
mkdir -p "$WORK" || exit 2
NPROC=$(nproc 2>/dev/null || echo 4)
BUILD_TO=${GPU_CHECK_BUILD_TIMEOUT:-240}
BUDGET=${GPU_CHECK_BUDGET:-510}
START=$(date +%s)

FIRST="tests train attention moe memcheck bench bench15"
REST="calibrate parallel kernels mpi peer racecheck"
# each phase's cap (the most it may take), least useful time and expected
# time on a 16-core H100/H200 machine, in seconds (measured on the draws,
# bench/2026-11-2[78]-h200-*.md, where a phase ran to its end: tests 103-122,
# train 17-21, attention 21-22, memcheck 3, bench 53-59, bench15 63-66, moe
# 104-118 (the Mixtral slice with its peer, grouped, GPT-OSS's two slices);
# bench and bench15 add about 15 and 30 s for their non-deterministic
# attention runs (estimates); racecheck, peer: estimates); the expected
# times make the plan that GPU_CHECK_DRY prints and `make rehearse-gpu`
# holds to the budget
PHASE_TABLE="
phase     cap least expect
build       -     -     30
tests     150    60    115
train      90    20     25
bench     160    60     70
attention  90    20     25
bench15   170    70    100
moe       170    60    125
memcheck   60    15      5
racecheck 240    60    200
mpi        60    10      5
kernels    60    15     16
parallel  120    30     40
peer      240    45    200
calibrate 120    45     40"
field() { echo "$PHASE_TABLE" | awk -v p="$1" -v f="$2" '$1 == p { print $f }'; }
cap() { if [ -n "${GPU_CHECK_CAP:-}" ]; then echo "$GPU_CHECK_CAP"; else field "$1" 2; fi; }
least() { # GPU_CHECK_CAP=S (for tests): every cap S, every least at most S
  local l; l=$(field "$1" 3)
  [ -n "${GPU_CHECK_CAP:-}" ] && [ "$l" -gt "$GPU_CHECK_CAP" ] && l=$GPU_CHECK_CAP
  echo "$l"
}
expect() { field "$1" 4; }
DONE_FILE=$WORK/done
CONTINUE=0
case "${GPU_CHECK_PHASES:-first}" in
  first) PHASES=$FIRST ;;
  rest) PHASES=$REST ;;
  all) PHASES="$FIRST $REST" ;;
  continue)
    CONTINUE=1
    PHASES=""
    for p in $FIRST $REST; do grep -qx "$p" "$DONE_FILE" 2>/dev/null || PHASES="$PHASES $p"; done
    PHASES=${PHASES# } ;;
  *) PHASES=$(echo "$GPU_CHECK_PHASES" | tr ',' ' ') ;;
esac
for p in $PHASES; do
  [ "$p" != build ] && [ -n "$(field "$p" 2)" ] || { echo "gpu_check.sh: unknown phase '$p' (phases: $FIRST $REST)" >&2; exit 2; }
done
if [ "${GPU_CHECK_DRY:-0}" = 1 ]; then
  t=$(expect build)
  printf 'plan (expected seconds on a 16-core H100 machine; cap: the most a phase may take):\n'
  printf '  %-10s expected %4d s, cap %4d s, cumulative expected %4d s\n' build "$t" "$BUILD_TO" "$t"
  for p in $PHASES; do
    t=$((t + $(expect "$p")))
    printf '  %-10s expected %4d s, cap %4d s, least %3d s, cumulative expected %4d s\n' \
      "$p" "$(expect "$p")" "$(cap "$p")" "$(least "$p")" "$t"
  done
  if [ "$BUDGET" -gt 0 ] && [ "$t" -gt "$BUDGET" ]; then
    echo "PLAN EXCEEDS THE BUDGET: $t s expected > $BUDGET s"; exit 1
  fi
  echo "plan fits: $t s expected within the budget of $BUDGET s"
  exit 0
fi
: >"$REPORT" || { echo "cannot write $REPORT" >&2; exit 2; }
STATUS=0
SUMMARY=()     # one "phase  result" line per phase, for the summary
CURRENT=""     # the phase running now (for the summary after a signal)
STEP_PID=""    # its timeout process

say() { echo "$*" | tee -a "$REPORT"; }
section() { say ""; say "== $* [$(elapsed) s] =="; }
flush() { sync "$REPORT" 2>/dev/null || sync; }
problem() { say "PROBLEM: $*"; STATUS=1; }
elapsed() { echo $(( $(date +%s) - START )); }
# note PHASE RESULT: the summary line, written to the report at once too
note() {
  local l; l=$(printf '%-10s %s' "$1" "$2")
  SUMMARY+=("$l")
  say "RESULT $l"
  flush
}

print_summary() {
  section "summary ($(elapsed) s in all, budget $BUDGET s)"
  local l
  for l in "${SUMMARY[@]}"; do say "$l"; done
  [ -n "$CURRENT" ] && say "$(printf '%-10s %s' "$CURRENT" "INTERRUPTED (the script was stopped during it)")"
  say "RESULT: $([ $STATUS = 0 ] && [ -z "$CURRENT" ] && echo 'all checks run passed' || echo 'problems found or phases not run (see above)')"
  flush
}
on_signal() {
  trap - TERM INT HUP
  [ -n "$STEP_PID" ] && kill -TERM "$STEP_PID" 2>/dev/null   # timeout passes it on
  STATUS=1
  print_summary
  echo "report written to $REPORT"
  exit 1
}
trap on_signal TERM INT HUP

# seconds phase/step may take: min(want, budget left - 15); 0 = less than least
allowed() {
  local want=$1 least=$2 left
  [ "$BUDGET" -gt 0 ] 2>/dev/null || { echo "$want"; return; }
  left=$(( BUDGET - $(elapsed) - 15 ))
  [ "$left" -lt "$want" ] && want=$left
  if [ "$want" -lt "$least" ]; then echo 0; else echo "$want"; fi
}

# step SECONDS LOG CMD... - run CMD under timeout (its whole process group gets
# SIGTERM at the limit, SIGKILL 10 s later), its output straight into the
# report (LOG gets a copy afterwards) so that a run stopped from outside
# still has it. Returns CMD's exit status (124: timed out).
step() {
  local to=$1 log=$2 rc off
  shift 2
  off=$(stat -c %s "$REPORT")
  timeout -k 10 "$to" "$@" >>"$REPORT" 2>&1 &
  STEP_PID=$!
  wait "$STEP_PID"   # returns at once when a trapped signal comes
  rc=$?
  STEP_PID=""
  tail -c +$((off + 1)) "$REPORT" >"$log"
  flush
  return "$rc"
}

DEPS=${LT_DEPS:-$ROOT/build/deps}
case "$DEPS" in /*) ;; *) DEPS="$ROOT/$DEPS" ;; esac
LT_ENV=()
if [ -d "$DEPS/lib" ]; then
  [ -f "$DEPS/relocatable" ] || LT_ENV+=("LD_LIBRARY_PATH=$DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  if ! command -v mpirun >/dev/null 2>&1 && [ -x "$DEPS/ompi/bin/orterun" ]; then
    LT_ENV+=("OPAL_PREFIX=$DEPS/ompi" "PATH=$DEPS/ompi/bin:$PATH")
    [ -d "$DEPS/ompi/pmix" ] && LT_ENV+=("PMIX_PREFIX=$DEPS/ompi/pmix")
  fi
fi
# without ssh/rsh Open MPI's default launcher refuses to start even local ranks
command -v ssh >/dev/null 2>&1 || command -v rsh >/dev/null 2>&1 || LT_ENV+=("OMPI_MCA_plm=isolated")
LT_ENV+=("PYTHONUNBUFFERED=1")

say "lattice GPU check report"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host: $(hostname 2>/dev/null) ($(uname -srm)), $NPROC cores"
say "tree: $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo ', with local changes'))"
say "phases: ${PHASES:-none left}; budget $([ "$BUDGET" -gt 0 ] 2>/dev/null && echo "$BUDGET s" || echo none)"
[ -d "$DEPS/lib" ] && say "deps: bundle $DEPS ($(cat "$DEPS/relocatable" 2>/dev/null || echo 'not relocatable'))"
say "environment of lattice's commands: ${LT_ENV[*]}; LD_LIBRARY_PATH here: ${LD_LIBRARY_PATH:-unset}"

# ---------------------------------------------------------------- device
section "device"
GPU_NAME=""
GPU_MIB=0
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,clocks.max.sm,power.limit \
    --format=csv,noheader >"$WORK/smi.log" 2>&1
  while read -r l; do say "gpu: $l"; done <"$WORK/smi.log"
  GPU_NAME=$(head -1 "$WORK/smi.log" | cut -d, -f2 | sed 's/^ *//')
  GPU_MIB=$(head -1 "$WORK/smi.log" | cut -d, -f4 | tr -dc '0-9')
else
  problem "nvidia-smi not found (no NVIDIA driver?)"
fi
PLAN_GPU=h100
case "$GPU_NAME" in *H200*) PLAN_GPU=h200 ;; *A100*) PLAN_GPU=a100 ;; esac
say "python3: $(command -v python3) ($(timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1))"
flush

# ---------------------------------------------------------------- build
BUILT=0
have_bins() { [ -x build/lattice ] && [ -x build/tests/gpu/test_gpu_ops ] && build/lattice --version 2>/dev/null | grep -q cuda; }
if [ $CONTINUE = 1 ] && have_bins; then
  section "build: skipped (continuing; build/lattice is there)"
  BUILT=1
  note build "ok (kept from the earlier run)"
else
  section "build (make gpu-build)"
  MAKE_ARGS=(-j"$NPROC" gpu-build DEPS="$DEPS" CUDA_ARCH="${GPU_CHECK_ARCH-90}")
  [ -z "${GPU_CHECK_ARCH-90}" ] && MAKE_ARGS=(-j"$NPROC" gpu-build DEPS="$DEPS")
  for v in CUDA_WHEELS CUDA_HOME CUDA_PTX CUDA_CCCL; do
    [ -n "${!v:-}" ] && MAKE_ARGS+=("$v=${!v}")
  done
  # shellcheck disable=SC2206
  MAKE_ARGS+=(${GPU_CHECK_MAKE_ARGS:-})
  t0=$(date +%s)
  # the build's output goes to its log only (the report gets its summary)
  CURRENT=build
  timeout -k 10 "$BUILD_TO" make "${MAKE_ARGS[@]}" >"$WORK/build.log" 2>&1 &
  STEP_PID=$!; wait "$STEP_PID"; BUILD_RC=$?; STEP_PID=""; CURRENT=""
  # CCCL's headers missing where the Makefile looks: take a copy found
  # elsewhere on the machine, and try again
  if [ $BUILD_RC != 0 ] && grep -q '^lattice: CCCL headers.*NOT FOUND' "$WORK/build.log" && [ -z "${CUDA_CCCL:-}" ]; then
    found=$(timeout 60 find / \( -path /proc -o -path /sys -o -path /dev -o -path "$ROOT" \) -prune \
              -o -path '*/nv/target' -type f -print 2>/dev/null | head -1)
    if [ -n "$found" ]; then
      say "CCCL not found by the Makefile; building again with CUDA_CCCL=${found%/nv/target}"
      MAKE_ARGS+=("CUDA_CCCL=${found%/nv/target}")
      timeout -k 10 "$BUILD_TO" make "${MAKE_ARGS[@]}" >"$WORK/build.log" 2>&1 &
      STEP_PID=$!; wait "$STEP_PID"; BUILD_RC=$?; STEP_PID=""
    fi
  fi
  grep '^lattice:' "$WORK/build.log" | sort -u | tee -a "$REPORT"
  if [ $BUILD_RC = 0 ]; then
    BUILT=1
    missing=$(ldd build/lattice 2>&1 | grep 'not found')
    [ -n "$missing" ] && problem "build/lattice: libraries not found: $(echo $missing)"
    say "$(timeout 30 build/lattice --version 2>&1)"
    note build "ok ($(( $(date +%s) - t0 )) s)"
  else
    grep -E 'error|Error|NOT FOUND|undefined reference' "$WORK/build.log" | head -20 | sed 's/^/  | /' | tee -a "$REPORT"
    tail -25 "$WORK/build.log" | sed 's/^/  | /' | tee -a "$REPORT"
    STATUS=1
    note build "FAILED (exit status $BUILD_RC after $(( $(date +%s) - t0 )) s): nothing else was run"
  fi
fi
flush

LT_BIN=$ROOT/build/lattice
[ -n "${GPU_CHECK_LATTICE:-}" ] && LT_BIN=$GPU_CHECK_LATTICE
mkdir -p "$WORK/lt"
ln -sf "$LT_BIN" "$WORK/lt/lattice"
GPU_TESTS=build/tests/gpu
counts() { grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1; }

# compute-sanitizer: on PATH, else beside the nvcc the build used
find_cs() {
  local cs nd f
  cs=$(command -v compute-sanitizer 2>/dev/null)
  if [ -z "$cs" ]; then
    nd=$(dirname "$(make -s --no-print-directory print-NVCC_REAL DEPS="$DEPS" 2>/dev/null | tail -1)")
    for f in "$nd/compute-sanitizer" "$nd/../compute-sanitizer/compute-sanitizer"; do
      [ -z "$cs" ] && [ -x "$f" ] && cs=$f
    done
  fi
  echo "$cs"
}

# plan_mbs CONFIG [OVERRIDES...]: the largest micro batch of 64 32 16 8 4 2 1
# whose memory the planner predicts within 90% of this GPU's (the config's own
# layout)
plan_mbs() {
  local cfg=$1 m tot lim
  shift
  lim=$(( GPU_MIB * 1024 * 1024 / 10 * 9 ))
  for m in 64 32 16 8 4 2 1; do
    tot=$("$LT_BIN" plan "$cfg" --gpus 1 --gpu "$PLAN_GPU" --layout "$@" train.micro_batch_size=$m \
            train.global_batch_size=$m 2>/dev/null | sed -n 's/^memory bytes.* total=\([0-9]*\).*/\1/p' | head -1)
    [ -n "$tot" ] && [ "$tot" -le "$lim" ] && { echo "$m"; return; }
  done
  echo 1
}

# ---------------------------------------------------------------- phases
# each phase_X runs its commands with `step $TO LOG ...` and sets RC and
# DETAIL; TO is what the budget allows it
ph_tests() {
  step "$TO" "$WORK/tests.log" env "${LT_ENV[@]}" "$GPU_TESTS/test_gpu_ops"; RC=$?
  DETAIL=$(counts "$WORK/tests.log"); DETAIL=${DETAIL:-no summary line (crash?)}
  grep '^FAIL' "$WORK/tests.log" | head -40 | sed 's/^/failed: /' >>"$REPORT"
}
ph_train() {
  step "$TO" "$WORK/train.log" env "${LT_ENV[@]}" bash tests/gpu/train_compare.sh "$WORK/lt"; RC=$?
  DETAIL=$(counts "$WORK/train.log")
}
# bench_result LOG: bench.sh's last successful run, shortened to its median
# step, tokens/s, TFLOP/s and MFU
bench_result() {
  grep -E '^[^ ]+: mbs [0-9]+: ok' "$1" | sed 's/ in [0-9]* s: done:.*median step/: median step/; s/, host waits.*//' | tail -1
}
# rerun_alone SRC_LOG OUT_LOG CAP CONFIG STEPS OVERRIDES...: lattice alone (no
# peer) at the micro batch SRC_LOG's side-by-side line took, within CAP s and
# what the phase has left; returns 125 (not run) with fewer than 30 s left or
# no such line, else the run's exit status
rerun_alone() {
  local src=$1 out=$2 cap=$3 cfg=$4 steps=$5 mb left lim
  shift 5
  mb=$(sed -n 's/^side by side: [^ ]* lattice mbs \([0-9]*\) .*/\1/p' "$src" | tail -1)
  left=$(( TO - $(date +%s) + t0 - 5 ))
  [ "$left" -ge 30 ] && [ -n "$mb" ] || return 125
  lim=$(( left < cap ? left : cap ))
  step "$lim" "$out" env "${LT_ENV[@]}" BENCH_TIMEOUT=$(( lim * 9 / 10 )) bash scripts/bench.sh \
    --lattice "$LT_BIN" --config "$cfg" --steps "$steps" --device cuda --mbs "$mb" --peer off "$@"
}
bench_one() { # config steps peer-init peer-args log
  local m; m=$(plan_mbs "$1")
  say "planner ($PLAN_GPU, ${GPU_MIB} MiB): micro batch $m fits for $1"
  step "$TO" "$5" env "${LT_ENV[@]}" BENCH_TIMEOUT=$(( TO / 2 )) bash scripts/bench.sh \
    --lattice "$LT_BIN" --config "$1" --steps "$2" --device cuda --mbs "$m$([ "$m" -gt 1 ] && echo " $((m / 2))")" \
    --peer auto --peer-init "$3" --peer-args "$4"
  RC=$?
  DETAIL=$(bench_result "$5")
  local r
  r=$(grep -E '^side by side: .* ratio' "$5" | tail -1 | sed 's/^side by side: //')
  [ -n "$r" ] && DETAIL="$DETAIL; $r"
  # lattice again at the micro batch it took, with cuDNN's non-deterministic
  # attention backward (model.attention_deterministic=false), as far as the
  # phase's time goes: what the deterministic default costs at GPT-2's head
  # dimension 64 (the fifth draw: the attention core 17-14% of the step)
  local nd="${5%.log}-nondet.log"
  rerun_alone "$5" "$nd" 60 "$1" "$2" model.attention_deterministic=false
  if [ $? != 125 ]; then
    r=$(bench_result "$nd")
    DETAIL="$DETAIL; non-deterministic attention backward: ${r:-FAILED (see $nd)}"
  fi
}
ph_bench() { bench_one configs/gpt2-124m.yaml 30 export "--compile-blocks" "$WORK/bench.log"; }
ph_bench15() { bench_one configs/gpt2-1.5b.yaml 16 random "--compile-blocks" "$WORK/bench15.log"; }
# attn_paths LOG REGEX: "path fwd+bwd-TFLOP/s" of bench_attention's lines
# matching REGEX, ';'-joined; "(partly lattice)" where cuDNN left calls to it
attn_paths() {
  grep -E "$2" "$1" | sed 's/.*attn \([^ ]*\).*fwd+bwd \([0-9.]*\)[^[]*\(\[.*\]\)\{0,1\}.*/\1 \2 \3/; s/ \[.*\]/ (partly lattice)/; s/ $//' | tr '\n' ';' | sed 's/;$//'
}
ph_attention() {
  # --nondet: lattice's kernels, cuDNN deterministic and cuDNN non-deterministic
  step "$TO" "$WORK/attention.log" env "${LT_ENV[@]}" "$GPU_TESTS/bench_attention" --nondet
  RC=$?
  local causal window
  causal=$(attn_paths "$WORK/attention.log" 'T=2048 HD=128 B=[0-9]+ NH=16 ')
  window=$(attn_paths "$WORK/attention.log" 'T=8192 HD=64 B=[0-9]+ NH=64 NKV=8 W=128 ')
  DETAIL=""
  [ -n "$causal" ] && DETAIL="fwd+bwd TFLOP/s at T 2048 HD 128: $causal"
  [ -n "$window" ] && DETAIL="${DETAIL:+$DETAIL; }GPT-OSS window 128 at T 8192 HD 64: $window"
}
# GPT-OSS 20B's layer (MLPerf Training 6.0's reference: hidden 2880, 64 heads
# over 8 KV groups of head dimension 64, RoPE base 150000, a 128-token window
# on every other layer, 32 experts of 2880 top-4, vocabulary 128256, sequence
# 8192; no qk-norm yet) in a 4-layer slice that fits one GPU with its
# optimizer, then the same slice with a dense FFN of the experts' active width
# (4 x 2880): the MoE layer's cost per token against the dense layer of equal
# FLOPs
OSS_SLICE=(model.num_layers=4 model.hidden_size=2880 model.num_attention_heads=64
  model.num_query_groups=8 model.kv_channels=64 model.ffn_hidden_size=11520 model.norm_epsilon=1e-6
  model.rotary_base=150000 model.rope_scaling=none "model.window_size=[128, 0]"
  model.window_attn_skip_freq=2 parallel.overlap_grad_reduce=false parallel.overlap_param_gather=false
  optimizer.zero_stage=0)
# Mixtral 8x7B's layer (hidden 4096, 32 query heads over 8 KV groups of 128,
# RoPE base 1e6, SwiGLU experts of 14336, 8 of them, top-2 with the softmax over
# the two, dropless, aux loss 0.02, vocabulary 32000, sequence 4096) in a
# one-layer slice: 1.71 B parameters, which with their optimizer state fit one
# H100 in lattice (the planner: 40.5 GB at micro batch 4) and in the peer
# (fp32 weights, gradients and Adam moments, 27.5 GB, and bf16 activations).
# One layer keeps the phase short: lattice's init of 1.7 B parameters on the
# host and the peer's compilation take most of it
MIXTRAL_SLICE=(model.num_layers=1 model.hidden_size=4096 model.num_attention_heads=32
  model.num_query_groups=8 model.ffn_hidden_size=14336 model.vocab_size=32000 model.seq_length=4096
  model.max_position_embeddings=32768 model.rotary_base=1000000 model.rope_scaling=none
  model.norm_epsilon=1e-5 model.num_experts=8 model.moe_router_topk=2 model.moe_aux_loss_coeff=0.02
  parallel.overlap_grad_reduce=false parallel.overlap_param_gather=false optimizer.zero_stage=0)
# moe_slice NAME LOG STEP-SECONDS [bench.sh arguments]: a lattice-only MoE
# slice of llama3.1-8b.yaml at the micro batch the planner says fits; sets R
# to its exit status and D to its result
moe_slice() {
  local name=$1 log=$2 to=$3 m
  shift 3
  m=$(plan_mbs configs/llama3.1-8b.yaml "$@")
  [ "$m" -gt 2 ] && m=2
  step "$to" "$log" env "${LT_ENV[@]}" BENCH_TIMEOUT=$(( to * 9 / 10 )) bash scripts/bench.sh \
    --lattice "$LT_BIN" --config configs/llama3.1-8b.yaml --steps 10 --device cuda --mbs "$m" \
    --peer off "$@"
  R=$?
  D=$(bench_result "$log")
  D="$name: ${D:-FAILED}"
}
ph_moe() {
  local rc=0 d d1 left R D
  # the Mixtral slice and its peer (its own init: the 1.7 B export would take
  # longer than both runs); the peer compiled per block, its experts torch's
  # grouped GEMM where it computes correctly. Each run may take 70% of the
  # phase: lattice's about 20 s, the peer's import, compilation and steps
  # most of the rest
  step $(( TO - 5 )) "$WORK/moe.log" env "${LT_ENV[@]}" BENCH_TIMEOUT=$(( TO * 7 / 10 )) bash scripts/bench.sh \
    --lattice "$LT_BIN" --config configs/llama3.1-8b.yaml --steps 10 --device cuda --mbs "4 2" \
    --peer auto --peer-init random --peer-args "--compile-blocks" "${MIXTRAL_SLICE[@]}"
  rc=$?
  d1=$(bench_result "$WORK/moe.log")
  d=$(grep -E '^side by side: .* ratio' "$WORK/moe.log" | tail -1 | sed 's/^side by side: //')
  DETAIL="Mixtral one-layer slice: ${d1:-FAILED}${d:+; $d}"
  # the same slice with cuBLAS's grouped GEMM instead of one cuBLASLt GEMM per
  # expert (model.moe_grouped_gemm=true), lattice only, at the micro batch the
  # first run took: which of the two the experts should use on this device
  rerun_alone "$WORK/moe.log" "$WORK/moe-grouped.log" 40 configs/llama3.1-8b.yaml 10 \
    "${MIXTRAL_SLICE[@]}" model.moe_grouped_gemm=true
  local rr=$?
  if [ $rr != 125 ]; then
    [ $rr = 0 ] || rc=1
    DETAIL="$DETAIL; grouped GEMMs (model.moe_grouped_gemm=true): $(bench_result "$WORK/moe-grouped.log")"
  else
    DETAIL="$DETAIL; grouped GEMMs not run ($(( TO - $(date +%s) + t0 - 5 )) s of the phase left, 30 needed)"
  fi
  # GPT-OSS's slices with what the phase's limit leaves (each run is mostly
  # lattice's init: about 35 s for the MoE slice's 4 B parameters, 10 s dense)
  left=$(( TO - $(date +%s) + t0 - 5 ))
  if [ "$left" -lt 45 ]; then
    DETAIL="$DETAIL; GPT-OSS slices not run ($left s of the phase left, 45 needed;"
    DETAIL="$DETAIL GPU_CHECK_PHASES=moe GPU_CHECK_CAP=240 runs them)"
    RC=$rc
    return
  fi
  moe_slice "GPT-OSS 4-layer slice, MoE" "$WORK/moe-oss.log" $(( left * 7 / 10 )) "${OSS_SLICE[@]}" \
    model.num_experts=32 model.moe_router_topk=4 model.moe_ffn_hidden_size=2880
  [ $R = 0 ] || rc=$R
  DETAIL="$DETAIL; $D"
  left=$(( TO - $(date +%s) + t0 - 5 ))
  if [ "$left" -lt 20 ]; then
    DETAIL="$DETAIL; dense of equal FLOPs not run ($left s of the phase left)"
  else
    moe_slice "dense of equal FLOPs" "$WORK/moe-dense.log" "$left" "${OSS_SLICE[@]}"
    [ $R = 0 ] || rc=$R
    DETAIL="$DETAIL; $D"
  fi
  RC=$rc
}
sanitizer() { # tool log cmd...
  local tool=$1 log=$2; shift 2
  CS=$(find_cs)
  if [ -z "$CS" ]; then RC=0; DETAIL="SKIPPED (no compute-sanitizer)"; return; fi
  step "$TO" "$log" env "${LT_ENV[@]}" "$CS" --tool "$tool" --error-exitcode 3 "$@"; RC=$?
  DETAIL=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)
  if [ -z "$DETAIL" ]; then # cut short: how far it got, and what it had found by then
    local n last hz
    n=$(grep -cE '^(PASS|FAIL) ' "$log"); last=$(grep -E '^(PASS|FAIL) ' "$log" | tail -1)
    hz=$(grep -cE '^========= (Error|Warning|Invalid|Uninitialized|Program hit|Race|Barrier)' "$log")
    DETAIL="no summary: $n cases ended${last:+ (last: $last)}, $hz error/warning reports so far"
  fi
}
ph_memcheck() {
  local d=$WORK/memcheck-data
  mkdir -p "$d"
  [ -s "$d/train.ltok" ] || { python3 tests/gpu/text_ids.py "$d/train.ids" &&
    "$LT_BIN" shard --vocab-size 256 --input "$d/train.ids" "$d/train.ltok" >/dev/null 2>&1; }
  sanitizer memcheck "$WORK/memcheck.log" "$LT_BIN" train configs/tiny.yaml train.device=cuda \
    train.precision=bf16 train.steps=2 "data.train_path=$d/train.ltok" data.valid_path= \
    checkpoint.dir= logging.metrics_file= model.attention=lattice
  [ "$RC" = 0 ] || return
  # the MoE kernels, sliding windows and documents: two steps of the tiny
  # Llama with 4 experts top-2, a window, its own head dimension and resets
  local d1=$DETAIL
  sanitizer memcheck "$WORK/memcheck-moe.log" "$LT_BIN" train configs/llama-tiny.yaml train.device=cuda \
    train.precision=bf16 train.steps=2 "data.train_path=$d/train.ltok" data.valid_path= \
    checkpoint.dir= logging.metrics_file= model.attention=lattice model.num_experts=4 \
    model.moe_ffn_hidden_size=48 model.moe_z_loss_coeff=0.001 model.moe_aux_loss_coeff=0.01 \
    "model.window_size=[48, 0]" model.window_attn_skip_freq=2 model.kv_channels=32 model.seq_length=128 \
    model.max_position_embeddings=128 data.eod_token=10 data.reset_position_ids=true \
    data.reset_attention_mask=true
  DETAIL="dense GPT: $d1; MoE Llama with windows and documents: $DETAIL"
}
# the kernels that share memory between threads, most at risk first: the
# tensor-core attention (ldmatrix tiles), with documents and windows, then
# the SIMT attention, the row reductions, cross-entropy (the third draw's
# run, every pair with the misaligned re-runs in case order, got through
# embedding, layernorm and fp32 attention in 240 s, no hazard)
ph_racecheck() {
  sanitizer racecheck "$WORK/racecheck.log" "$GPU_TESTS/test_gpu_ops" --quick --aligned \
    --only attention_bf16,attention_docs_bf16,attention_window_bf16,attention_bf16a,layernorm_bf16,rmsnorm_bf16,xent_bf16,reduce_bf16,moe_router_bf16,embedding_bf16,attention_f32
}
ph_mpi() {
  step "$TO" "$WORK/mpi.log" env "${LT_ENV[@]}" build/tests/test_comm_mpi; RC=$?
  DETAIL=$(counts "$WORK/mpi.log")
}
ph_kernels() { step "$TO" "$WORK/kernels.log" env "${LT_ENV[@]}" "$GPU_TESTS/bench_kernels"; RC=$?; DETAIL=""; }
ph_parallel() {
  step "$TO" "$WORK/parallel.log" env "${LT_ENV[@]}" bash tests/gpu/parallel_gpu.sh "$WORK/lt"; RC=$?
  DETAIL=$(counts "$WORK/parallel.log")
}
ph_peer() {
  step "$TO" "$WORK/peer.log" env "${LT_ENV[@]}" PEER_CHECK_DEVICE=cuda \
    PEER_CHECK_MODELS="${PEER_CHECK_MODELS:-moe llama gpt}" bash tests/gpu/peer_check.sh "$WORK/lt"; RC=$?
  DETAIL=$(counts "$WORK/peer.log")
}
ph_calibrate() {
  step "$TO" "$WORK/calibrate.log" env "${LT_ENV[@]}" bash -c '
    lt=$1 out=$2
    "$lt" plan --calibrate --device cuda --precision bf16 --seconds 20 --out "$out/calibration.json" || exit
    for c in configs/gpt2-124m.yaml configs/gpt2-1.5b.yaml; do
      echo "== planner with the calibration: $c =="
      "$lt" plan "$c" --gpus 1 --calibration "$out/calibration.json" --layout | grep -v "^  "
    done
    # the runs the first phases measured, predicted again with these constants
    # and with the built-in row (the command is the one bench.sh printed; a
    # list value such as "[128, 0]" loses its space to survive the word split)
    echo "== the measured runs, predicted with the calibration and with the $0 row =="
    for f in bench bench15 moe moe-grouped moe-oss moe-dense; do
      [ -f "$out/$f.log" ] || continue
      cmd=$(grep -A1 "^commands:" "$out/$f.log" | sed -n 2p)
      meas=$(grep -m1 -E "^[^ ]+: mbs [0-9]+: ok" "$out/$f.log" | sed -n "s/.*median step \([0-9.]*\) ms.*/\1/p")
      [ -n "$cmd" ] && [ -n "$meas" ] || continue
      eval "set -- $(echo "$cmd" | sed "s/^ *[^:]*: [^ ]* train //; s/\[\([0-9-]*\), /[\1,/g")"
      cal=$("$lt" plan "$@" --gpus 1 --calibration "$out/calibration.json" --layout 2>/dev/null |
            sed -n "s/^step time (predicted[^)]*): \([0-9.]*\) s.*/\1/p")
      row=$("$lt" plan "$@" --gpus 1 --gpu "$0" --layout 2>/dev/null |
            sed -n "s/^step time (predicted[^)]*): \([0-9.]*\) s.*/\1/p")
      awk -v f="$f" -v m="$meas" -v c="$cal" -v r="$row" -v g="$0" "BEGIN {
        printf \"%-12s measured %8.1f ms; calibrated %8.1f ms (measured %.2fx); %s row %8.1f ms (%.2fx)\n\",
               f, m, 1e3 * c, (c > 0 ? m / (1e3 * c) : 0), g, 1e3 * r, (r > 0 ? m / (1e3 * r) : 0) }"
    done' "$PLAN_GPU" "$LT_BIN" "$WORK"
  RC=$?
  [ $RC = 0 ] && DETAIL="constants in $WORK/calibration.json$(grep -E '^bench +measured|^bench15 +measured' "$WORK/calibrate.log" | awk '{ v = $9; sub(/\);?$/, "", v); printf "; %s measured/calibrated %s", $1, v }')"
  # a calibration that misses the dense benchmarks by more than half (the
  # fourth draw's were within 13%), or whose rounds disagree twofold, is a
  # fault of the calibration, not a figure to keep
  local off
  off=$(grep -E '^bench +measured|^bench15 +measured' "$WORK/calibrate.log" |
        awk '{ v = $9; sub(/x\);?$/, "", v); if (v + 0 < 0.67 || v + 0 > 1.5) printf "%s %sx ", $1, v }')
  off="$off$(grep -o '^warning: [a-z_0-9]*: its rounds differ' "$WORK/calibrate.log" | awk '{ printf "%s ", $2 }')"
  if [ $RC = 0 ] && [ -n "$off" ]; then RC=1; DETAIL="$DETAIL; off: $off"; fi
  cp "$WORK/calibration.json" "$(dirname "$REPORT")/" 2>/dev/null
}

for p in $PHASES; do
  if [ $BUILT = 0 ]; then note "$p" "NOT RUN (no build)"; STATUS=1; continue; fi
  section "$p"
  TO=$(allowed "$(cap "$p")" "$(least "$p")")
  if [ "$TO" = 0 ]; then
    say "not started: $(( BUDGET - $(elapsed) )) s of the $BUDGET s budget left, it needs at least $(least "$p") s"
    note "$p" "NOT RUN (budget: $(( BUDGET - $(elapsed) )) s left, needs $(least "$p") s; GPU_CHECK_PHASES=continue)"
    STATUS=1
    continue
  fi
  say "limit $TO s"
  CURRENT=$p
  t0=$(date +%s)
  RC=0; DETAIL=""
  "ph_$p"
  CURRENT=""
  secs=$(( $(date +%s) - t0 ))
  case $RC in
    0) note "$p" "ok ($secs s)${DETAIL:+: $DETAIL}"; echo "$p" >>"$DONE_FILE" ;;
    124|137) note "$p" "TIMED OUT after $secs s (limit $TO s)${DETAIL:+: $DETAIL}"; STATUS=1 ;;
    *) note "$p" "FAILED (exit status $RC, $secs s)${DETAIL:+: $DETAIL}"; STATUS=1
       echo "$p" >>"$DONE_FILE" ;;
  esac
done
[ -n "$GPU_NAME" ] || say "(no GPU was visible: every GPU phase is expected to fail)"
print_summary
echo "report written to $REPORT"
exit $STATUS
