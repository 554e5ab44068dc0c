#!/usr/bin/env bash
# gpu_check.sh REPORT_FILE - build lattice on a GPU machine, run the GPU
# checks and write a report as it goes.
#
# Build: `make gpu-build` (build/lattice, tests/gpu/*, tests/test_comm_mpi).
# The Makefile finds CUDA as a toolkit or as pip wheels (site-packages/nvidia,
# e.g. PyTorch's; CUDA_WHEELS=DIR) and libyaml, zstd, OpenBLAS and Open MPI on
# the system or in build/deps, the bundle scripts/bundle_deps.sh makes on a
# machine that has them (carry build/deps to a machine that has only CUDA).
# Library paths: none is exported. lattice's binaries find their libraries
# through their rpaths and the bundle's through RUNPATHs relative to
# themselves; the bundle's mpirun gets OPAL_PREFIX, PMIX_PREFIX and PATH
# (LT_ENV) only in the environment of the commands that run lattice. python3, nvcc and
# nvidia-smi run in the machine's own environment.
#
# Phases after the build (GPU_CHECK_PHASES, comma list, default all of
# "mpi,tests,sanitize,racecheck,attention,kernels,train,peer,parallel,bench"):
# mpirun starting 4 ranks of tests/test_comm_mpi (CPU only), the op tests
# (tests/gpu/test_gpu_ops), compute-sanitizer memcheck and racecheck on
# test_gpu_ops --quick, the attention benchmark, the memory-bound kernels'
# bandwidth (tests/gpu/bench_kernels), CPU-vs-GPU training
# (tests/gpu/train_compare.sh), 2 ranks on one GPU under mpirun
# (tests/gpu/parallel_gpu.sh) and the GPT-2 training benchmark
# (scripts/bench.sh). They run in that order, whatever the list's order.
# Time: the build and every phase run under their own `timeout` (a phase's
# processes are all stopped when it expires), and the whole run keeps within
# GPU_CHECK_BUDGET seconds: a phase gets at most the budget left (less a
# margin) and one that would get under a minute is not started. A lent device
# stops each command after 10 minutes, so the defaults fit one call; split the
# phases over calls, e.g. "tests,attention", "sanitize,train,parallel",
# "racecheck", "bench".
# The report is appended to and synced after every step, so a run stopped
# from outside still leaves what it had; it ends with a summary of each
# phase's result (also written when the script gets SIGTERM/SIGINT/SIGHUP).
#
# Environment: GPU_CHECK_PHASES (above),
#   GPU_CHECK_TIMEOUT (seconds per phase, default 540),
#   GPU_CHECK_BUILD_TIMEOUT (seconds for the build, default 480),
#   GPU_CHECK_BUDGET (seconds for the whole run, default 570; 0 = no limit),
#   GPU_CHECK_SANITIZE=0|1 (the memcheck/racecheck phases, default 1),
#   GPU_CHECK_TRAIN=0|1 (train, parallel, bench; default 1),
#   GPU_CHECK_LATTICE (use this lattice binary for them instead of the build),
#   GPU_CHECK_BENCH_STEPS (default 30), GPU_CHECK_BENCH_ARGS (extra bench.sh
#     arguments, e.g. "--config configs/gpt2-124m.yaml"),
#   GPU_CHECK_DIR (logs, default build/gpu_check), LT_DEPS (the bundle,
#   default build/deps), CUDA_WHEELS / CUDA_HOME / CUDA_ARCH / CUDA_PTX /
#   CUDA_CCCL (passed to make), GPU_CHECK_MAKE_ARGS (more make arguments).
# When CCCL's headers (nv/target) are not where the Makefile looks, a copy
# found elsewhere on the machine is used (CUDA_CCCL) and the build retried.
# Exit status: 0 when every phase run passed, 1 otherwise, 2 bad usage.
set -u
REPORT=${1:-}
if [ -z "$REPORT" ]; then echo "usage: scripts/gpu_check.sh REPORT_FILE" >&2; exit 2; fi
case "$REPORT" in /*) ;; *) REPORT="$PWD/$REPORT" ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
WORK=${GPU_CHECK_DIR:-$ROOT/build/gpu_check}
mkdir -p "$WORK" || exit 2
: >"$REPORT" || { echo "cannot write $REPORT" >&2; exit 2; }
NPROC=$(nproc 2>/dev/null || echo 4)
PHASES=${GPU_CHECK_PHASES:-mpi,tests,sanitize,racecheck,attention,kernels,train,peer,parallel,bench}
PHASE_TO=${GPU_CHECK_TIMEOUT:-540}
BUILD_TO=${GPU_CHECK_BUILD_TIMEOUT:-480}
BUDGET=${GPU_CHECK_BUDGET:-570}
START=$(date +%s)
STATUS=0
SUMMARY=()     # one "phase  result" line per phase, for the summary
CURRENT=""     # the phase running now (for the summary after a signal)
STEP_PID=""    # its timeout process

say() { echo "$*" | tee -a "$REPORT"; }
section() { say ""; say "== $* =="; }
problem() { say "PROBLEM: $*"; STATUS=1; }
flush() { sync "$REPORT" 2>/dev/null || sync; }
note() { SUMMARY+=("$(printf '%-10s %s' "$1" "$2")"); }
want() { case ",$PHASES," in *",$1,"*) return 0 ;; esac; return 1; }
elapsed() { echo $(( $(date +%s) - START )); }

print_summary() {
  section "summary ($(elapsed) s in all)"
  local l
  for l in "${SUMMARY[@]}"; do say "$l"; done
  [ -n "$CURRENT" ] && say "$(printf '%-10s %s' "$CURRENT" "INTERRUPTED (the script was stopped during it)")"
  say "RESULT: $([ $STATUS = 0 ] && [ -z "$CURRENT" ] && echo 'all checks run passed' || echo 'problems found (see above)')"
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

# seconds a step may take: its own limit, within what is left of the budget
# (30 s kept for the summary); 0 = no time left
allowed() {
  local want=$1 left
  [ "$BUDGET" -gt 0 ] 2>/dev/null || { echo "$want"; return; }
  left=$(( BUDGET - $(elapsed) - 30 ))
  if [ "$left" -lt 60 ]; then echo 0; elif [ "$left" -lt "$want" ]; then echo "$left"; else echo "$want"; fi
}

# step SECONDS LOG CMD... - run CMD (a program, not a shell function) under
# timeout: at the limit its whole process group gets SIGTERM, SIGKILL 10 s
# later. Its output goes to LOG, or with LIVE=1 straight into the report (and
# LOG gets a copy afterwards), so that a run stopped from outside still has
# it. Returns CMD's exit status (124: timed out).
LIVE=0
step() {
  local to=$1 log=$2 rc off
  shift 2
  off=$(stat -c %s "$REPORT")
  if [ "$LIVE" = 1 ]; then timeout -k 10 "$to" "$@" >>"$REPORT" 2>&1 &
  else timeout -k 10 "$to" "$@" >"$log" 2>&1 & fi
  STEP_PID=$!
  wait "$STEP_PID"   # returns at once when a trapped signal comes
  rc=$?
  STEP_PID=""
  [ "$LIVE" = 1 ] && tail -c +$((off + 1)) "$REPORT" >"$log"
  flush
  return "$rc"
}

# The bundle: its mpirun and plugins relocated through OPAL_PREFIX/PMIX_PREFIX,
# set only for lattice's commands (env "${LT_ENV[@]}" CMD). A bundle made
# before its RUNPATHs were patched (no DEPS/relocatable) also needs
# LD_LIBRARY_PATH there.
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
# without ssh/rsh Open MPI's default launcher refuses to start even local
# ranks; "isolated" starts them on this machine without one
command -v ssh >/dev/null 2>&1 || command -v rsh >/dev/null 2>&1 || LT_ENV+=("OMPI_MCA_plm=isolated")

say "lattice GPU check report"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host: $(hostname 2>/dev/null) ($(uname -srm)), $NPROC cores"
say "tree: $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo ', with local changes'))"
say "phases: $PHASES; timeouts: build ${BUILD_TO} s, each phase ${PHASE_TO} s; budget $([ "$BUDGET" -gt 0 ] 2>/dev/null && echo "$BUDGET s" || echo none)"
if [ -d "$DEPS/lib" ]; then
  say "deps: bundle $DEPS ($(cat "$DEPS/relocatable" 2>/dev/null || echo 'not relocatable: LD_LIBRARY_PATH for lattice commands'))"
fi
say "environment of lattice's commands: ${LT_ENV[*]:-(unchanged)}; LD_LIBRARY_PATH here: ${LD_LIBRARY_PATH:-unset}"
flush

# ---------------------------------------------------------------- device
section "device"
GPU_NAME=""
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 60 nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap \
    --format=csv,noheader >"$WORK/smi.log" 2>&1
  while read -r l; do say "gpu: $l"; done <"$WORK/smi.log"
  GPU_NAME=$(head -1 "$WORK/smi.log")
else
  problem "nvidia-smi not found (no NVIDIA driver?)"
fi
flush

# ---------------------------------------------------------------- build
section "build (make gpu-build)"
MAKE_ARGS=(-j"$NPROC" gpu-build DEPS="$DEPS")
for v in CUDA_WHEELS CUDA_HOME CUDA_ARCH CUDA_PTX CUDA_CCCL; do
  [ -n "${!v:-}" ] && MAKE_ARGS+=("$v=${!v}")
done
# shellcheck disable=SC2206
MAKE_ARGS+=(${GPU_CHECK_MAKE_ARGS:-})
BUILT=0
t0=$(date +%s)
build() {
  CURRENT=build
  BUILD_TO_NOW=$(allowed "$BUILD_TO")
  [ "$BUILD_TO_NOW" = 0 ] && BUILD_TO_NOW=60   # (a budget under 90 s: the build still gets a minute)
  step "$BUILD_TO_NOW" "$WORK/build.log" make "${MAKE_ARGS[@]}"
  BUILD_RC=$?
  CURRENT=""
  grep '^lattice:' "$WORK/build.log" | sort -u | tee -a "$REPORT"
}
build
# CCCL's headers missing where the Makefile looks (CUDA from wheels without
# nvidia-cuda-cccl): take a copy found elsewhere on the machine, and try again
if [ $BUILD_RC != 0 ] && grep -q '^lattice: CCCL headers.*NOT FOUND' "$WORK/build.log" && [ -z "${CUDA_CCCL:-}" ]; then
  say "looking for CCCL's nv/target elsewhere on this machine..."
  found=$(timeout 120 find / \( -path /proc -o -path /sys -o -path /dev -o -path "$ROOT" \) -prune \
            -o -path '*/nv/target' -type f -print 2>/dev/null | head -1)
  if [ -n "$found" ]; then
    say "found ${found%/nv/target}: building again with CUDA_CCCL=${found%/nv/target}"
    MAKE_ARGS+=("CUDA_CCCL=${found%/nv/target}")
    build
  else
    say "none found"
  fi
fi
if [ $BUILD_RC = 0 ]; then
  BUILT=1
  note build "ok ($(( $(date +%s) - t0 )) s)"
  say "built in $(( $(date +%s) - t0 )) s"
  missing=$(ldd build/lattice 2>&1 | grep 'not found')
  if [ -n "$missing" ]; then problem "build/lattice: libraries not found: $(echo $missing)"; fi
  say "$(timeout 60 build/lattice --version 2>&1)"
else
  if [ $BUILD_RC = 124 ]; then problem "the build timed out after $BUILD_TO_NOW s"
  else problem "the build failed (exit status $BUILD_RC)"; fi
  grep -E 'error|Error|NOT FOUND|undefined reference' "$WORK/build.log" | head -20 | sed 's/^/  | /' | tee -a "$REPORT"
  say "  last lines of $WORK/build.log:"
  tail -25 "$WORK/build.log" | sed 's/^/  | /' | tee -a "$REPORT"
  note build "FAILED (exit status $BUILD_RC after $(( $(date +%s) - t0 )) s): nothing else was run"
fi
flush

# run_phase NAME TITLE LIVE -- CMD... : one phase under its timeout (PHASE_RAN=0
# when the budget left no time to start it: the summary says so)
PHASE_RAN=0
PHASE_SECS=0
run_phase() {
  local name=$1 title=$2 live=$3 to rc t0
  shift 4
  section "$title"
  to=$(allowed "$PHASE_TO")
  PHASE_RAN=0
  if [ "$to" = 0 ]; then
    say "not started: under a minute of the ${BUDGET} s budget left"
    note "$name" "NOT RUN (budget of $BUDGET s used up; run it in another call)"
    STATUS=1
    return 1
  fi
  PHASE_RAN=1
  CURRENT=$name
  t0=$(date +%s)
  LIVE=$live step "$to" "$WORK/$name.log" "$@"
  rc=$?
  CURRENT=""
  PHASE_SECS=$(( $(date +%s) - t0 ))
  say "exit status $rc after $PHASE_SECS s$([ $rc = 124 ] || [ $rc = 137 ] && echo " (timed out at $to s)")"
  return $rc
}
# phase_result NAME RC [DETAIL]
phase_result() {
  local name=$1 rc=$2 detail=${3:-}
  [ "$PHASE_RAN" = 1 ] || return 0
  case $rc in
    0) note "$name" "ok ($PHASE_SECS s)${detail:+: $detail}" ;;
    124|137) note "$name" "TIMED OUT after $PHASE_SECS s${detail:+: $detail}"; STATUS=1 ;;
    *) note "$name" "FAILED (exit status $rc, $PHASE_SECS s)${detail:+: $detail}"; STATUS=1 ;;
  esac
  flush
}
counts() { grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1; }

if [ $BUILT = 1 ]; then
  GPU_TESTS=build/tests/gpu
  # ------------------------------------------------------------ mpi
  if want mpi; then
    run_phase mpi "MPI launch (tests/test_comm_mpi: 4 ranks under mpirun, CPU only)" 1 -- \
      env "${LT_ENV[@]}" build/tests/test_comm_mpi
    phase_result mpi $? "$(counts "$WORK/mpi.log")"
  fi

  # ------------------------------------------------------------ tests
  if want tests; then
    run_phase tests "tests (tests/gpu/test_gpu_ops)" 1 -- env "${LT_ENV[@]}" "$GPU_TESTS/test_gpu_ops"
    rc=$?
    c=$(counts "$WORK/tests.log")
    say "summary: ${c:-no summary line (crash?)}"
    grep '^FAIL' "$WORK/tests.log" | head -40 | sed 's/^/failed: /' | tee -a "$REPORT" >/dev/null
    phase_result tests $rc "${c:-no summary line}"
  fi

  # ------------------------------------------------------------ sanitizers
  # compute-sanitizer: on PATH, else beside the nvcc the build used (a toolkit's
  # bin/, or a wheel's nvidia/cu13/bin/), else under that toolkit
  CS=$(command -v compute-sanitizer 2>/dev/null)
  NVCC_DIR=$(dirname "$(make -s --no-print-directory print-NVCC_REAL DEPS="$DEPS" 2>/dev/null | tail -1)")
  for f in "$NVCC_DIR/compute-sanitizer" "$NVCC_DIR/../compute-sanitizer/compute-sanitizer"; do
    [ -z "$CS" ] && [ -x "$f" ] && CS=$f
  done
  sanitize() { # $1 = tool, $2 = lines to keep (regex), $3 = what an error means
    if [ -z "$CS" ]; then
      section "compute-sanitizer $1"; say "compute-sanitizer not found - skipped"
      note "$1" "SKIPPED (no compute-sanitizer)"; return
    fi
    run_phase "$1" "compute-sanitizer $1 (test_gpu_ops --quick)" 0 -- \
      env "${LT_ENV[@]}" "$CS" --tool "$1" --error-exitcode 3 "$GPU_TESTS/test_gpu_ops" --quick
    local rc=$?
    grep -E "$2|^FAIL|passed, " "$WORK/$1.log" | head -40 | tee -a "$REPORT"
    [ $rc = 3 ] && say "compute-sanitizer reported $3 (log: $WORK/$1.log)"
    phase_result "$1" $rc "$([ $rc = 3 ] && echo "$3")"
  }
  if [ "${GPU_CHECK_SANITIZE:-1}" = 1 ]; then
    want sanitize && sanitize memcheck "ERROR SUMMARY|Invalid|out of bounds" "memory errors"
    want racecheck && sanitize racecheck "ERROR SUMMARY|RACECHECK SUMMARY|hazard" "shared-memory races"
  fi

  # ------------------------------------------------------------ attention benchmark
  if want attention; then
    # both paths in one phase: tensor-core (default), then the generic SIMT one
    run_phase attention "attention benchmark (tests/gpu/bench_attention; then LT_CUDA_ATTN=simt)" 1 -- \
      env "${LT_ENV[@]}" bash -c '"$1" || exit; echo "(generic SIMT path, for comparison)"; LT_CUDA_ATTN=simt "$1"' \
      bench "$GPU_TESTS/bench_attention"
    phase_result attention $?
  fi

  # ------------------------------------------------------------ memory-bound kernels
  if want kernels; then
    run_phase kernels "memory-bound kernels' bandwidth (tests/gpu/bench_kernels)" 1 -- \
      env "${LT_ENV[@]}" "$GPU_TESTS/bench_kernels"
    phase_result kernels $?
  fi

  # ------------------------------------------------------------ full binary
  LT_BIN=$ROOT/build/lattice
  if [ -n "${GPU_CHECK_LATTICE:-}" ]; then
    LT_BIN=$GPU_CHECK_LATTICE
    say "using GPU_CHECK_LATTICE=$LT_BIN"
  fi
  mkdir -p "$WORK/lt"
  ln -sf "$LT_BIN" "$WORK/lt/lattice"
  if [ "${GPU_CHECK_TRAIN:-1}" = 1 ]; then
    if want train; then
      run_phase train "end-to-end training, CPU vs CUDA (tests/gpu/train_compare.sh)" 1 -- \
        env "${LT_ENV[@]}" bash tests/gpu/train_compare.sh "$WORK/lt"
      rc=$?
      phase_result train $rc "$(counts "$WORK/train.log")"
    fi
    if want peer; then # the PyTorch peer of scripts/bench_peer.py trains the same model
      run_phase peer "PyTorch peer agreement (tests/gpu/peer_check.sh; needs torch)" 1 -- \
        env "${LT_ENV[@]}" PEER_CHECK_DEVICE=cuda bash tests/gpu/peer_check.sh "$WORK/lt"
      rc=$?
      phase_result peer $rc "$(counts "$WORK/peer.log")"
    fi
    if want parallel; then
      say ""
      say "mpirun for parallel_gpu.sh: $(env "${LT_ENV[@]}" bash -c 'command -v mpirun' || echo 'not found')"
      run_phase parallel "multi-rank training on the GPU (tests/gpu/parallel_gpu.sh)" 1 -- \
        env "${LT_ENV[@]}" bash tests/gpu/parallel_gpu.sh "$WORK/lt"
      rc=$?
      phase_result parallel $rc "$(counts "$WORK/parallel.log")"
    fi
    if want bench; then
      # each micro-batch attempt must end well within the phase
      bto=$(( $(allowed "$PHASE_TO") - 20 )); [ $bto -lt 30 ] && bto=30
      # shellcheck disable=SC2086
      run_phase bench "training benchmark (scripts/bench.sh; a benchmark: see its table)" 1 -- \
        env "${LT_ENV[@]}" BENCH_TIMEOUT=$bto bash scripts/bench.sh --lattice "$LT_BIN" \
        --steps "${GPU_CHECK_BENCH_STEPS:-30}" --device cuda ${GPU_CHECK_BENCH_ARGS:-}
      phase_result bench $?
    fi
  fi
fi
for p in mpi tests sanitize racecheck attention kernels train peer parallel bench; do
  want "$p" || continue
  case $p in sanitize) n=memcheck ;; *) n=$p ;; esac
  printf '%s\n' "${SUMMARY[@]}" | grep -q "^$n " && continue
  if [ $BUILT = 0 ]; then note "$n" "NOT RUN (no build)"
  else note "$n" "NOT RUN (GPU_CHECK_SANITIZE=0 or GPU_CHECK_TRAIN=0)"; fi
done
[ -n "$GPU_NAME" ] || say "(no GPU was visible: every GPU phase is expected to fail)"
print_summary
echo "report written to $REPORT"
exit $STATUS
