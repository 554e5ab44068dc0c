#!/usr/bin/env bash
# bench_startup.sh [BUILD_DIR] [RUNS] - what a lattice process costs before it
# trains: the wall time of `lattice --version`, of a zero-step CPU run of the
# tiny config in one process, and of the same run under mpirun with 4 and 8
# ranks (data parallel; 8: TP 2 x PP 2 x DP 2), RUNS times each (default 7),
# printed as a markdown table of the median and the fastest. The binary's
# start-up (its shared libraries' initialisers) is paid by every process:
# each rank of a run, each `lattice plan`, each test of the suite.
# PRELOAD="lib1 lib2" loads those libraries into every process first (LD_PRELOAD,
# passed to mpirun's ranks too): what linking them would cost, e.g. cuBLAS,
# which the binary opens only when it creates a CUDA device.
# Example: scripts/bench_startup.sh build 9
#          PRELOAD="libcublasLt.so.13 libcublas.so.13" scripts/bench_startup.sh build 9
set -eu
BUILD=${1:-build}
RUNS=${2:-7}
LT="$BUILD/lattice"
[ -x "$LT" ] || { echo "bench_startup: $LT not found (make first)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_startup: mpirun not found" >&2; exit 2; }
T=$(mktemp -d /tmp/lt-bench-startup-XXXXXX)
trap 'rm -rf "$T"' EXIT
python3 -c "import random; random.seed(1); print(' '.join(str(random.randrange(256)) for _ in range(20000)))" \
  >"$T/ids"
"$LT" shard --vocab-size 256 --input "$T/ids" "$T/train.ltok" >/dev/null
MPI="mpirun --allow-run-as-root --oversubscribe"
if [ -n "${PRELOAD:-}" ]; then
  export LD_PRELOAD=$PRELOAD
  MPI="$MPI -x LD_PRELOAD"
fi
BASE="configs/tiny.yaml data.train_path=$T/train.ltok train.steps=0 eval.interval=0
      train.micro_batch_size=2 train.global_batch_size=16 checkpoint.dir="

# ms CMD...: the wall time of one run in milliseconds (the run must succeed)
ms() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >"$T/out" 2>&1 || { echo "bench_startup: failed: $* ($(tail -1 "$T/out"))" >&2; exit 1; }
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}
# row NAME CMD...: RUNS timings, the median and the fastest
row() {
  local name=$1 all=()
  shift
  for _ in $(seq "$RUNS"); do all+=("$(ms "$@")"); done
  printf '%s\n' "${all[@]}" | sort -n | awk -v n="$name" '{ v[NR] = $1 }
    END { printf "| %s | %d | %d |\n", n, v[int((NR + 1) / 2)], v[1] }'
}

echo "lattice start-up, $RUNS runs each, $(nproc) cores ($("$LT" --version | head -1))${PRELOAD:+, preloading $PRELOAD}"
echo
echo "| command | median ms | fastest ms |"
echo "| --- | --- | --- |"
row "lattice --version" "$LT" --version
# shellcheck disable=SC2086
row "train, 0 steps, 1 process" "$LT" train $BASE
# shellcheck disable=SC2086
row "train, 0 steps, mpirun -np 4 (DP 4)" $MPI -np 4 "$LT" train $BASE
# shellcheck disable=SC2086
row "train, 0 steps, mpirun -np 8 (TP 2, PP 2, DP 2)" $MPI -np 8 "$LT" train $BASE \
  parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2
