#!/usr/bin/env bash
# gpu_check.sh REPORT_FILE - build the CUDA backend and its GPU tests on a GPU
# machine, run them and the attention benchmark, and write a report.
#
# Needs only nvcc, gcc and the CUDA libraries; libyaml / zstd / MPI are only
# used for the full lattice binary (tests/gpu/train_compare.sh and
# scripts/bench.sh; without them these are skipped and the report says so).
# cuBLASLt / cudart (and, for the record, cuDNN and NCCL) are looked up
# under CUDA_HOME, the system linker cache, and Python site-packages
# (nvidia/*/lib wheels). The CPU reference backend needs cblas (OpenBLAS);
# without it the tests are built with -DLT_GPU_TEST_NO_CPU (reference = the
# CUDA backend's fp32 alternative paths) and the report says so.
# Missing pieces are reported, never fatal: the report is always written.
#
# Environment: CUDA_HOME, CUDA_ARCH (e.g. "90"; default: the GPU's),
#   GPU_CHECK_DIR (build dir, default build/gpu_check),
#   GPU_CHECK_SANITIZE=0|1 (compute-sanitizer memcheck and racecheck on --quick, default 1),
#   GPU_CHECK_TEST_TIMEOUT (seconds, default 900),
#   GPU_CHECK_TRAIN=0|1 (full lattice binary + tests/gpu/train_compare.sh +
#     tests/gpu/peer_check.sh + scripts/bench.sh, default 1; needs libyaml,
#     zstd and MPI headers/libs),
#   GPU_CHECK_LATTICE (use this lattice binary instead of linking one),
#   GPU_CHECK_BENCH_STEPS (default 30), GPU_CHECK_BENCH_ARGS (extra bench.sh
#     arguments, e.g. "--config configs/gpt2-124m.yaml"),
#   GPU_CHECK_PHASES (comma list of what runs after the build, default
#     "tests,sanitize,racecheck,attention,train,peer,parallel,bench": the op
#     tests, compute-sanitizer memcheck and racecheck, the attention benchmark,
#     train_compare.sh, peer_check.sh (the PyTorch peer of scripts/bench_peer.py
#     trains the same model: needs torch; PEER_PYTHON), parallel_gpu.sh (2 ranks
#     on the GPU under mpirun, MPI staging) and bench.sh, which also runs the
#     peer when torch is there). A lent device runs each command for at most
#     10 minutes: split the phases over calls, e.g. "tests,attention", then
#     "sanitize,train,parallel", then "racecheck", then "bench".
# Exit status: 0 when every test passed, 1 otherwise.
set -u
REPORT=${1:-}
if [ -z "$REPORT" ]; then echo "usage: scripts/gpu_check.sh REPORT_FILE" >&2; exit 2; fi
case "$REPORT" in /*) ;; *) REPORT="$PWD/$REPORT" ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
WORK=${GPU_CHECK_DIR:-$ROOT/build/gpu_check}
mkdir -p "$WORK/obj" "$WORK/lib" || exit 2
BLOG=$WORK/build.log
: >"$BLOG"
: >"$REPORT" || { echo "cannot write $REPORT" >&2; exit 2; }
NPROC=$(nproc 2>/dev/null || echo 4)
STATUS=0
# Libraries bundled on another machine by scripts/bundle_deps.sh (libyaml, zstd,
# OpenBLAS, Open MPI) for a device that lacks them: carry build/deps along.
DEPS=${LT_DEPS:-$ROOT/build/deps}
if [ -d "$DEPS/pkgconfig" ]; then
  . "$ROOT/scripts/deps_env.sh" "$DEPS"   # libraries, and mpirun when bundled
  if ! command -v pkg-config >/dev/null 2>&1; then
    # no pkg-config on the device: read the bundle's simple .pc files directly
    pkg-config() {
      local mode="" out="" p f
      for p in "$@"; do
        case $p in
          --exists) mode=exists ;; --cflags|--cflags-only-I) mode=Cflags ;;
          --libs|--libs-only-l|--libs-only-L) mode=Libs ;; --modversion) mode=Version ;;
          -*) ;;
          *) f="$DEPS/pkgconfig/$p.pc"; [ -f "$f" ] || return 1
             [ "$mode" = exists ] || out="$out $(sed -n "s/^$mode: //p" "$f")" ;;
        esac
      done
      [ "$mode" = exists ] || echo "$out"
    }
  fi
fi

PHASES=${GPU_CHECK_PHASES:-tests,sanitize,racecheck,attention,train,peer,parallel,bench}
want() { case ",$PHASES," in *",$1,"*) return 0 ;; esac; return 1; }
say() { echo "$*" | tee -a "$REPORT"; }
section() { say ""; say "== $* =="; }
problem() { say "PROBLEM: $*"; STATUS=1; }

say "lattice GPU check report"
say "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host: $(hostname 2>/dev/null) ($(uname -srm))"
[ -d "$DEPS/pkgconfig" ] && say "deps: bundled libraries from $DEPS (scripts/bundle_deps.sh)"
say "tree: $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo ', with local changes'))"

# ---------------------------------------------------------------- device
section "device"
GPU_CC=""
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap \
    --format=csv,noheader 2>&1 | while read -r l; do say "gpu: $l"; done
  GPU_CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
else
  problem "nvidia-smi not found (no NVIDIA driver?)"
fi

# ---------------------------------------------------------------- toolchain
section "toolchain"
NVCC=""
if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then NVCC=$CUDA_HOME/bin/nvcc
elif command -v nvcc >/dev/null 2>&1; then NVCC=$(command -v nvcc)
elif [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc
fi
if [ -z "$NVCC" ]; then
  problem "nvcc not found (set CUDA_HOME); cannot build the CUDA backend"
  say "RESULT: build impossible"
  exit 1
fi
CUDA_HOME=${CUDA_HOME:-$(cd "$(dirname "$NVCC")/.." && pwd)}
say "nvcc: $NVCC ($("$NVCC" --version | grep -o 'release [0-9.]*' | head -1))"
say "CUDA_HOME: $CUDA_HOME"
CC=${CC:-gcc}
say "cc: $CC ($($CC --version 2>/dev/null | head -1))"
ARCHS=${CUDA_ARCH:-${GPU_CC:-"80 90"}}
GENCODE=""
for a in $ARCHS; do GENCODE="$GENCODE -gencode arch=compute_$a,code=sm_$a"; done
say "targets: sm_$(echo $ARCHS | sed 's/ /, sm_/g')"

# ---------------------------------------------------------------- libraries
section "libraries"
PYDIRS=""
if command -v python3 >/dev/null 2>&1; then
  PYDIRS=$(python3 - 2>/dev/null <<'EOF'
import os, site, sys
dirs = set()
try:
    import nvidia
    dirs.update(list(nvidia.__path__))
except Exception:
    pass
for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    d = os.path.join(p, "nvidia")
    if os.path.isdir(d):
        dirs.add(d)
print("\n".join(sorted(dirs)))
EOF
)
fi
[ -n "$PYDIRS" ] && say "python nvidia wheel dirs: $(echo $PYDIRS)"

# find_lib NAME -> prints the path of libNAME.so[.N] (first hit) or nothing
find_lib() {
  local n=$1 d f
  for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" \
           /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib; do
    for f in "$d/lib$n.so" "$d"/lib"$n".so.[0-9]*; do [ -e "$f" ] && { echo "$f"; return; }; done
  done
  f=$(ldconfig -p 2>/dev/null | grep -E "lib$n\.so(\.[0-9]+)* " | head -1 | sed 's/.*=> //')
  [ -n "$f" ] && [ -e "$f" ] && { echo "$f"; return; }
  for d in $PYDIRS; do
    for f in "$d"/*/lib/lib"$n".so "$d"/*/lib/lib"$n".so.[0-9]*; do [ -e "$f" ] && { echo "$f"; return; }; done
  done
}
# find_header FILE -> prints the directory holding it
find_header() {
  local h=$1 d
  for d in "$CUDA_HOME/include" "$CUDA_HOME/targets/x86_64-linux/include" /usr/include /usr/local/include; do
    [ -e "$d/$h" ] && { echo "$d"; return; }
  done
  for d in $PYDIRS; do
    for f in "$d"/*/include/"$h"; do [ -e "$f" ] && { dirname "$f"; return; }; done
  done
}

LDIRS=""
EXTRA_INC=""
NCCL_INC=""
NCCL_LIB=""
CUDNN_FOUND=""
for lib in cudart cublasLt cublas cudnn nccl; do
  p=$(find_lib $lib)
  if [ -n "$p" ]; then
    say "lib$lib: $p"
    ln -sf "$p" "$WORK/lib/lib$lib.so"      # unversioned name for -l$lib
    [ "$lib" = nccl ] && NCCL_LIB="-lnccl"
    [ "$lib" = cudnn ] && CUDNN_FOUND=1
    d=$(dirname "$p"); case " $LDIRS " in *" $d "*) ;; *) LDIRS="$LDIRS $d" ;; esac
  else
    case $lib in
      cudart|cublasLt) problem "lib$lib not found: the CUDA backend cannot be linked" ;;
      cudnn) say "libcudnn: not found (the cuDNN attention path is left out; the Makefile build links it)" ;;
      *) say "lib$lib: not found (not needed by the CUDA backend or these tests; the full lattice build links it)" ;;
    esac
  fi
done
for h in cublasLt.h cudnn.h nccl.h; do
  d=$(find_header $h)
  if [ -n "$d" ]; then
    say "$h: $d"
    [ "$h" = cublasLt.h ] && [ "$d" != "$CUDA_HOME/include" ] && EXTRA_INC="-I$d"
    [ "$h" = nccl.h ] && NCCL_INC="-isystem $d"   # src/comm_nccl.c (the full binary)
    [ "$h" = cudnn.h ] && CUDNN_INC=$d
  else
    [ "$h" = cublasLt.h ] && problem "cublasLt.h not found" || say "$h: not found (not needed here)"
  fi
done
RPATH=""
for d in $LDIRS; do RPATH="$RPATH -Wl,-rpath,$d"; done
# cuDNN's fused attention (model.attention=cudnn|auto) needs cudnn.h and libcudnn;
# without them it is compiled out (LT_NO_CUDNN) and lattice's kernels run.
if [ -n "$CUDNN_FOUND" ] && [ -n "${CUDNN_INC:-}" ]; then
  CUDNN_NVFLAGS=$([ "$CUDNN_INC" != "$CUDA_HOME/include" ] && echo "-I$CUDNN_INC")
  CUDNN_LIBS="-lcudnn"
  say "cuDNN attention: built (headers $CUDNN_INC)"
else
  CUDNN_NVFLAGS="-DLT_NO_CUDNN"
  CUDNN_LIBS=""
  say "cuDNN attention: NOT built (cudnn.h or libcudnn missing): attention runs on lattice's kernels"
fi

# cblas for the CPU reference backend
NO_CPU=0
CBLAS_CFLAGS=""
CBLAS_LIBS=""
if ! ls kernels/cpu/*.c >/dev/null 2>&1; then
  say "CPU backend: kernels/cpu/*.c absent"
  NO_CPU=1
elif command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openblas 2>/dev/null; then
  CBLAS_CFLAGS=$(pkg-config --cflags openblas); CBLAS_LIBS=$(pkg-config --libs openblas)
  say "cblas: pkg-config openblas ($CBLAS_LIBS)"
else
  hdr=""
  for d in /usr/include /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas \
           /usr/include/x86_64-linux-gnu /usr/local/include /opt/OpenBLAS/include; do
    [ -e "$d/cblas.h" ] && { hdr=$d; break; }
  done
  lib=$(find_lib openblas)
  if [ -n "$hdr" ] && [ -n "$lib" ]; then
    CBLAS_CFLAGS="-I$hdr"; CBLAS_LIBS="$lib -Wl,-rpath,$(dirname "$lib")"
    say "cblas: $hdr/cblas.h, $lib"
  else
    say "OpenBLAS (cblas) NOT FOUND: header '${hdr:-none}', library '${lib:-none}'."
    say "  -> the CPU reference backend is NOT built; the tests compare against the CUDA"
    say "     backend's fp32 alternative paths instead (weaker: no independent fp32 reference)."
    NO_CPU=1
  fi
fi

# ---------------------------------------------------------------- build
section "build"
NVFLAGS="-O3 -std=c++17 -Iinclude $EXTRA_INC $CUDNN_NVFLAGS -lineinfo --expt-relaxed-constexpr $GENCODE -Xcompiler -fPIC,-Wall"
CFLAGS="-O2 -g -std=c11 -D_GNU_SOURCE -fopenmp -Wall -Iinclude -DLT_HAVE_CUDA"
t0=$(date +%s)
export NVCC NVFLAGS WORK
rm -f "$WORK"/obj/cuda_*.o
ls kernels/cuda/*.cu | xargs -P "$NPROC" -n 1 bash -c \
  'o="$WORK/obj/cuda_$(basename "$0" .cu).o"; $NVCC $NVFLAGS -c "$0" -o "$o" >"$o.log" 2>&1 || echo "FAILED $0"' \
  >"$WORK/nvcc_status" 2>&1
cat "$WORK"/obj/cuda_*.o.log >>"$BLOG" 2>/dev/null
if grep -q FAILED "$WORK/nvcc_status"; then
  problem "nvcc failed: $(grep FAILED "$WORK/nvcc_status" | sed 's/FAILED //' | tr '\n' ' ')"
  tail -40 "$BLOG" | sed 's/^/  | /' | tee -a "$REPORT"
  say "RESULT: build failed"
  exit 1
fi
say "CUDA objects: $(ls "$WORK"/obj/cuda_*.o | wc -l) built in $(( $(date +%s) - t0 )) s"
COBJS=""
SKIPPED_SRC=""
DEP_CFLAGS=""
DEP_LIBS=""
for pkg in yaml-0.1 libzstd ompi-c; do   # libraries of the full lattice binary
  if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists $pkg 2>/dev/null; then
    DEP_CFLAGS="$DEP_CFLAGS $(pkg-config --cflags $pkg)"; DEP_LIBS="$DEP_LIBS $(pkg-config --libs $pkg)"
  fi
done
for f in src/*.c; do
  [ "$f" = src/main.c ] && continue
  o=$WORK/obj/src_$(basename "$f" .c).o
  # comm_nccl.c includes nccl.h and cuda_runtime.h (system include: no warnings from them)
  if $CC $CFLAGS $DEP_CFLAGS -isystem "$CUDA_HOME/include" $NCCL_INC -c "$f" -o "$o" >>"$BLOG" 2>&1; then COBJS="$COBJS $o"
  else say "note: $f does not compile here (missing optional dependency?) - skipped"; SKIPPED_SRC="$SKIPPED_SRC $f"; fi
done
if [ $NO_CPU = 0 ]; then
  for f in kernels/cpu/*.c; do
    o=$WORK/obj/cpu_$(basename "$f" .c).o
    if $CC $CFLAGS $CBLAS_CFLAGS -O3 -march=native -c "$f" -o "$o" >>"$BLOG" 2>&1; then COBJS="$COBJS $o"
    else say "CPU backend: $f failed to compile (see $BLOG)"; NO_CPU=1; fi
  done
fi
rm -f "$WORK/liblattice_gpu.a"
ar rcs "$WORK/liblattice_gpu.a" $COBJS "$WORK"/obj/cuda_*.o
LIBS="-L$WORK/lib $RPATH -lcublasLt $CUDNN_LIBS -lcudart -lstdc++ -lm -lpthread -ldl -fopenmp"
build_test() { # $1 = extra cflags
  $CC $CFLAGS $1 tests/gpu/test_gpu_ops.c "$WORK/liblattice_gpu.a" $CBLAS_LIBS $LIBS \
    -o "$WORK/test_gpu_ops" >>"$BLOG" 2>&1
}
if [ $NO_CPU = 0 ] && ! build_test ""; then
  say "CPU backend: linking the tests with it failed (see below); falling back to no-CPU mode"
  grep -E "undefined reference|error" "$BLOG" | sort -u | head -10 | sed 's/^/  | /' | tee -a "$REPORT"
  NO_CPU=1
fi
if [ $NO_CPU = 1 ] && ! build_test "-DLT_GPU_TEST_NO_CPU"; then
  problem "linking test_gpu_ops failed"
  tail -30 "$BLOG" | sed 's/^/  | /' | tee -a "$REPORT"
fi
$CC $CFLAGS tests/gpu/bench_attention.c "$WORK/liblattice_gpu.a" $LIBS -o "$WORK/bench_attention" \
  >>"$BLOG" 2>&1 || problem "linking bench_attention failed (see $BLOG)"
say "reference backend for the tests: $([ $NO_CPU = 0 ] && echo 'CPU (OpenBLAS)' || echo 'CUDA fp32 alternative paths (no CPU backend)')"
say "build log: $BLOG"

# ---------------------------------------------------------------- tests
run_logged() { # $1 = timeout, $2 = log, rest = command
  local to=$1 log=$2; shift 2
  if command -v timeout >/dev/null 2>&1; then timeout "$to" "$@" >"$log" 2>&1; else "$@" >"$log" 2>&1; fi
}
say "phases: $PHASES"
if want tests; then
  section "tests (tests/gpu/test_gpu_ops)"
  if [ -x "$WORK/test_gpu_ops" ]; then
    t0=$(date +%s)
    run_logged "${GPU_CHECK_TEST_TIMEOUT:-900}" "$WORK/test.log" "$WORK/test_gpu_ops"
    rc=$?
    cat "$WORK/test.log" >>"$REPORT"
    say "exit status $rc after $(( $(date +%s) - t0 )) s"
    [ $rc = 124 ] && problem "test_gpu_ops timed out"
    [ $rc != 0 ] && STATUS=1
    SUMMARY=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$WORK/test.log" | tail -1)
    say "summary: ${SUMMARY:-no summary line (crash?)}"
    grep '^FAIL' "$WORK/test.log" | sed 's/^/failed: /' | tee -a "$REPORT" >/dev/null
  else
    problem "test_gpu_ops was not built"
  fi
fi

sanitize() { # $1 = tool, $2 = lines to keep (regex), $3 = what an error means
  section "compute-sanitizer $1 (test_gpu_ops --quick)"
  local cs rc
  cs=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$cs" ]; then say "compute-sanitizer not found - skipped"; return; fi
  run_logged 540 "$WORK/$1.log" "$cs" --tool "$1" --error-exitcode 3 "$WORK/test_gpu_ops" --quick
  rc=$?
  grep -E "$2|^FAIL|passed, " "$WORK/$1.log" | head -40 | tee -a "$REPORT"
  say "$1 exit status $rc$([ $rc = 124 ] && echo ' (timed out)')"
  [ $rc = 3 ] && problem "compute-sanitizer reported $3 (log: $WORK/$1.log)"
}
if [ "${GPU_CHECK_SANITIZE:-1}" = 1 ] && [ -x "$WORK/test_gpu_ops" ]; then
  want sanitize && sanitize memcheck "ERROR SUMMARY|Invalid|out of bounds" "memory errors"
  want racecheck && sanitize racecheck "ERROR SUMMARY|RACECHECK SUMMARY|hazard" "shared-memory races"
fi

# ---------------------------------------------------------------- benchmark
if want attention; then
  section "attention benchmark (tests/gpu/bench_attention)"
  if [ -x "$WORK/bench_attention" ]; then
    run_logged 300 "$WORK/bench.log" "$WORK/bench_attention" --nondet
    rc=$?
    cat "$WORK/bench.log" >>"$REPORT"
    [ $rc != 0 ] && problem "bench_attention exit status $rc"
    run_logged 300 "$WORK/bench_simt.log" env LT_CUDA_ATTN=simt "$WORK/bench_attention"
    say "(generic SIMT path, for comparison)"
    cat "$WORK/bench_simt.log" >>"$REPORT"
  else
    problem "bench_attention was not built"
  fi
fi

# ---------------------------------------------------------------- full binary
# lattice train on the GPU (train_compare.sh, bench.sh) needs the whole binary:
# src/main.c linked with every src/*.c (libyaml, zstd, MPI) and the CPU backend.
LT_BIN=""
GAPS=""
if [ "${GPU_CHECK_TRAIN:-1}" = 1 ] && { want train || want peer || want parallel || want bench; }; then
  section "full lattice binary (for train_compare, parallel_gpu and bench)"
  if [ -n "${GPU_CHECK_LATTICE:-}" ]; then
    if [ -x "$GPU_CHECK_LATTICE" ]; then LT_BIN=$GPU_CHECK_LATTICE; say "using GPU_CHECK_LATTICE=$LT_BIN"
    else problem "GPU_CHECK_LATTICE=$GPU_CHECK_LATTICE is not executable"; fi
  elif [ -n "$SKIPPED_SRC" ] || [ $NO_CPU = 1 ]; then
    say "NOT BUILT: the full lattice binary cannot be linked on this machine:"
    [ -n "$SKIPPED_SRC" ] && say "  these sources did not compile:$SKIPPED_SRC (libyaml / zstd / MPI headers missing?)"
    [ $NO_CPU = 1 ] && say "  the CPU backend (OpenBLAS) is not available"
    say "  -> tests/gpu/train_compare.sh and scripts/bench.sh were NOT run (no end-to-end"
    say "     training check, no GPT-2 throughput figures). Install libyaml-dev, libzstd-dev,"
    say "     libopenmpi-dev (scripts/setup.sh) or set GPU_CHECK_LATTICE to a lattice binary."
    say "GAP: no lattice binary: end-to-end training on the GPU not checked, no benchmark"
    GAPS="train_compare.sh and bench.sh not run (no full lattice binary)"
  else
    mkdir -p "$WORK/bin"
    if $CC $CFLAGS $DEP_CFLAGS src/main.c "$WORK/liblattice_gpu.a" $CBLAS_LIBS $DEP_LIBS $NCCL_LIB $LIBS \
         -o "$WORK/bin/lattice" >>"$BLOG" 2>&1; then
      LT_BIN=$WORK/bin/lattice
      say "built $LT_BIN: $("$LT_BIN" --version 2>&1 | head -2 | tr '\n' ' ')"
    else
      problem "linking the full lattice binary failed (see $BLOG):"
      grep -E "undefined reference|error" "$BLOG" | sort -u | head -10 | sed 's/^/  | /' | tee -a "$REPORT"
      say "  -> tests/gpu/train_compare.sh and scripts/bench.sh were NOT run"
    fi
  fi
fi

[ -n "$LT_BIN" ] && { mkdir -p "$WORK/lt"; ln -sf "$LT_BIN" "$WORK/lt/lattice"; }
run_script() { # $1 = phase, $2 = title, $3 = timeout, rest = command
  local phase=$1 title=$2 to=$3 t0 rc
  shift 3
  [ -n "$LT_BIN" ] && want "$phase" || return 0
  section "$title"
  t0=$(date +%s)
  run_logged "$to" "$WORK/$phase.log" "$@"
  rc=$?
  cat "$WORK/$phase.log" >>"$REPORT"
  say "exit status $rc after $(( $(date +%s) - t0 )) s$([ $rc = 124 ] && echo ' (timed out)')"
  [ $rc != 0 ] && problem "$title failed (exit status $rc)"
  return 0
}
run_script train "end-to-end training, CPU vs CUDA (tests/gpu/train_compare.sh)" 900 \
  bash tests/gpu/train_compare.sh "$WORK/lt"
run_script peer "the PyTorch peer trains the same model (tests/gpu/peer_check.sh)" 540 \
  bash tests/gpu/peer_check.sh "$WORK/lt"
want parallel && [ -n "$LT_BIN" ] && say "mpirun for parallel_gpu.sh: $(command -v mpirun || echo 'not found')"
run_script parallel "multi-rank training on the GPU (tests/gpu/parallel_gpu.sh)" 540 \
  bash tests/gpu/parallel_gpu.sh "$WORK/lt"
# shellcheck disable=SC2086
run_script bench "training benchmark (scripts/bench.sh; a benchmark: see its table)" 1800 \
  bash scripts/bench.sh --lattice "$LT_BIN" --steps "${GPU_CHECK_BENCH_STEPS:-30}" --device cuda \
  ${GPU_CHECK_BENCH_ARGS:-}

section "result"
say "RESULT: $([ $STATUS = 0 ] && echo 'all checks passed' || echo 'problems found (see above)')${GAPS:+ - NOT RUN: $GAPS}"
echo "report written to $REPORT"
exit $STATUS
