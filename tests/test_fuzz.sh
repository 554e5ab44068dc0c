#!/usr/bin/env bash
# test_fuzz.sh BUILD_DIR - a short pass of every libFuzzer target (tests/fuzz,
# built by make with clang, ASan and UBSan): first each committed seed of
# tests/fuzz/corpus/TARGET must parse without a sanitizer report, then
# FUZZ_TEST_SECONDS (default 10) of mutations from those seeds in a scratch
# corpus. A crash, a sanitizer report, a leak or an exit() from a parser
# (lt_fatal on untrusted input) fails the target; the input that did it is
# kept in BUILD_DIR/fuzz/artifacts. make fuzz runs longer passes.
set -u
BUILD=${1:-build}
cd "$(dirname "$0")/.."
secs=${FUZZ_TEST_SECONDS:-10}
targets=$(ls tests/fuzz/fuzz_*.c | sed 's|tests/fuzz/fuzz_\(.*\)\.c|\1|')
if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1; then
  echo "FAIL fuzz: clang not found (scripts/setup.sh installs clang and libclang-rt-14-dev)"
  exit 1
fi
mkdir -p "$BUILD/fuzz/artifacts"
for t in $targets; do
  bin=$BUILD/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then
    echo "FAIL fuzz_$t: $bin not built (make)"
    continue
  fi
  seeds=tests/fuzz/corpus/$t
  n=$(ls "$seeds" | wc -l)
  log=$BUILD/fuzz/$t.log
  # the seeds alone: every one runs to completion
  if "$bin" -runs=0 -artifact_prefix="$BUILD/fuzz/artifacts/$t-" "$seeds" >"$log" 2>&1; then
    echo "PASS fuzz_${t}_seeds: $n seeds of $seeds parse cleanly"
  else
    echo "FAIL fuzz_${t}_seeds: a seed of $seeds fails (log $log)"
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5
    continue
  fi
  scratch=$(mktemp -d)
  cp "$seeds"/* "$scratch"/
  "$bin" -max_total_time="$secs" -max_len=16384 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$BUILD/fuzz/artifacts/$t-" -print_final_stats=1 "$scratch" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rm -rf "$scratch"
  if [ $rc -eq 0 ] && [ "${runs:-0}" -gt 0 ]; then
    echo "PASS fuzz_$t: ${runs} inputs in ${secs} s, no crash, sanitizer report or exit"
  else
    echo "FAIL fuzz_$t: exit $rc after ${runs:-0} inputs (log $log; input kept in $BUILD/fuzz/artifacts)"
    grep -E 'ERROR|SUMMARY|runtime error|deadly signal|fuzz target exited' "$log" | head -5
  fi
done
