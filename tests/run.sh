#!/usr/bin/env bash
# run.sh BUILD_DIR - run every test binary (BUILD_DIR/tests/test_*) and shell
# test (tests/test_*.sh), count their PASS/FAIL lines, end with
# "N passed, N failed". A test program that crashes or exits non-zero without
# reporting a failure counts as one failure. LT_TEST_FILTER=regex selects.
set -u
BUILD=${1:-build}
# every training run of the suite asserts that the planner's memory
# prediction for its layout is within 5% of what the engine allocated
# (src/training/engine.c; docs/planner.md)
export LT_PLAN_CHECK=${LT_PLAN_CHECK:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
logdir="$BUILD/test-logs"
mkdir -p "$logdir"
pass=0
fail=0
failed_names=()
start=$(date +%s)
echo "lattice tests: each name prints as it starts; the whole suite takes about 10 minutes on 2 cores"
run_one() {
  local name=$1; shift
  local log="$logdir/$name.log"
  local t0=$(date +%s)
  # the name first: a long test (a pipeline matrix runs a minute) shows what runs
  printf '%-28s ' "$name"
  "$@" >"$log" 2>&1
  local rc=$?
  local p f
  p=$(grep -c '^PASS ' "$log")
  f=$(grep -c '^FAIL ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    echo "FAIL $name: exited with code $rc without reporting a failure" >>"$log"
  fi
  pass=$((pass + p))
  fail=$((fail + f))
  printf '%4d passed %4d failed  (%ds)\n' "$p" "$f" $(( $(date +%s) - t0 ))
  if [ "$f" -gt 0 ]; then
    grep -E '^(FAIL|  check failed)' "$log" | sed 's/^/    /' | head -20
    failed_names+=("$name")
  fi
}
for bin in "$BUILD"/tests/test_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  [[ -n "${LT_TEST_FILTER:-}" && ! "$name" =~ $LT_TEST_FILTER ]] && continue
  run_one "$name" "$bin"
done
for sh in tests/test_*.sh; do
  [ -f "$sh" ] || continue
  name=$(basename "$sh" .sh)
  [[ -n "${LT_TEST_FILTER:-}" && ! "$name" =~ $LT_TEST_FILTER ]] && continue
  run_one "$name" bash "$sh" "$BUILD"
done
echo "logs in $logdir; total $(( $(date +%s) - start ))s"
[ ${#failed_names[@]} -gt 0 ] && echo "failing: ${failed_names[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
