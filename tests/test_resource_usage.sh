#!/usr/bin/env bash
# test_resource_usage.sh BUILD_DIR - compile-time resource check of every CUDA
# kernel: registers, static shared memory, stack frame and spills per kernel and
# architecture, as ptxas reported them when the objects were built (the
# Makefile compiles kernels/cuda/*.cu with --resource-usage and keeps the
# report as BUILD_DIR/obj/cuda/NAME.res). Prints one line per kernel and arch,
# then one PASS line per architecture, or a FAIL line for each kernel that
#   - spills (spill stores or loads > 0) or has a stack frame (local memory:
#     spilled registers or a thread-private array that did not fit them),
#   - uses more registers than its budget in kernels/cuda/budgets.txt,
#   - matches no budget line (a new kernel must be budgeted),
# and for an object whose report is missing or older than the object.
# Without CUDA objects (no nvcc, or make CUDA=0) it prints SKIP and no PASS.
set -u
BUILD=${1:-build}
cd "$(dirname "$0")/.."
budgets=kernels/cuda/budgets.txt
objdir=$BUILD/obj/cuda
shopt -s nullglob
objs=("$objdir"/*.o)
if [ ${#objs[@]} -eq 0 ]; then
  echo "SKIP resource_usage: the CUDA backend is not built (no nvcc, or make CUDA=0)"
  exit 0
fi
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# budget lines: PATTERN MAX_REGS REASON...
pats=(); maxr=(); used=()
while read -r pat regs why; do
  [[ -z "$pat" || "$pat" == \#* ]] && continue
  if ! [[ "$regs" =~ ^[0-9]+$ ]] || [ -z "$why" ]; then
    fail "resource_usage $budgets: '$pat $regs $why' is not PATTERN MAX_REGISTERS REASON"
    continue
  fi
  pats+=("$pat"); maxr+=("$regs"); used+=(0)
done < "$budgets"

# ptxas report -> one line per kernel: arch, mangled name, regs, smem, stack, spill
# stores, spill loads, object (tab-separated)
parse() {
  awk -v obj="$(basename "$1" .res)" '
    /Compiling entry function/ {
      n = split($0, q, "'"'"'"); cur = q[2]; arch = q[4]; stack = st = ld = 0; next }
    /Function properties for/ { fp = $NF; next }
    /bytes stack frame/ { if (fp == cur) { stack = $1; st = $5; ld = $9 }; next }
    /Used [0-9]+ registers/ && cur != "" {
      regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
      smem = 0
      if ($0 ~ /bytes smem/) { smem = $0; sub(/ bytes smem.*/, "", smem); sub(/.*, /, "", smem) }
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", arch, cur, regs, smem, stack, st, ld, obj
      cur = "" }' "$1"
}

reports=()
for o in "${objs[@]}"; do
  res=${o%.o}.res
  if [ ! -f "$res" ] || [ "$res" -ot "$o" ]; then
    fail "resource_usage $(basename "$o"): no ptxas report $res, or an older one (rebuild: make)"
  else
    reports+=("$res")
  fi
done
table=$(mktemp)
trap 'rm -f "$table"' EXIT
for res in "${reports[@]}"; do parse "$res"; done | c++filt > "$table"

declare -A count top topk
printf '%-6s %5s %6s %6s %5s %11s  %s\n' arch regs budget smem stack 'spill st/ld' 'kernel [object]'
while IFS=$'\t' read -r arch name regs smem stack st ld obj; do
  name=${name#void }
  short=${name%%(*}
  count[$arch]=$(( ${count[$arch]:-0} + 1 ))
  if [ "$regs" -gt "${top[$arch]:-0}" ]; then top[$arch]=$regs; topk[$arch]=$short; fi
  b=-1
  for i in "${!pats[@]}"; do
    if [[ "$short" == ${pats[$i]} ]]; then b=${maxr[$i]}; used[$i]=1; break; fi
  done
  mark=""
  [ "$b" -ge 0 ] && [ $((regs * 10)) -ge $((b * 9)) ] && mark="  (within 10% of budget)"
  printf '%-6s %5s %6s %6s %5s %5s/%-5s  %s [%s]%s\n' "$arch" "$regs" "${b/#-1/-}" "$smem" \
    "$stack" "$st" "$ld" "$short" "$obj" "$mark"
  if [ "$st" -gt 0 ] || [ "$ld" -gt 0 ]; then
    fail "resource_usage $arch $short: spills ($st bytes stored, $ld loaded)"
  elif [ "$stack" -gt 0 ]; then
    fail "resource_usage $arch $short: $stack-byte stack frame (local memory)"
  fi
  if [ "$b" -lt 0 ]; then
    fail "resource_usage $arch $short: no budget line in $budgets matches"
  elif [ "$regs" -gt "$b" ]; then
    fail "resource_usage $arch $short: $regs registers, budget $b"
  fi
done < "$table"
# budget lines that matched nothing are stale or mistyped
for i in "${!pats[@]}"; do
  [ "${used[$i]}" -eq 0 ] && echo "note: budget line '${pats[$i]}' matches no kernel"
done
[ "$fails" -gt 0 ] && exit 1
for arch in $(printf '%s\n' "${!count[@]}" | sort); do
  echo "PASS resource_usage $arch: ${count[$arch]} kernels, no spills or stack frames, all within" \
       "budget; most registers ${top[$arch]} (${topk[$arch]})"
done
