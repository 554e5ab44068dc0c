#!/usr/bin/env bash
# test_structure.sh BUILD - the source tree keeps its shape
# (scripts/check_structure.py): no include cycle between modules, no function
# over 120 lines in src/ (160 in kernels/), at most 12 files directly in src/;
# and the checker catches each of those in a tree made to break them.
BUILD=${1:-build}
. "$(dirname "$0")/lib.sh" structure
CHECK=scripts/check_structure.py

out=$(python3 "$CHECK" 2>&1)
if [ $? -eq 0 ]; then pass "the tree keeps its shape"
else fail "the tree keeps its shape" "$(echo "$out" | tr '\n' ';')"; fi

# a tree that breaks every rule once
mkdir -p "$T/bad/src/a" "$T/bad/include" "$T/bad/kernels"
printf '#include "b.h"\n' > "$T/bad/include/a.h"
printf '#include "a.h"\n' > "$T/bad/include/b.h"
printf '#include "a.h"\n#include "b.h"\n' > "$T/bad/src/a/a.c"
printf '#include "b.h"\nint b(void) {\n%s\n  return 0;\n}\n' "$(for i in $(seq 130); do echo '  (void)0;'; done)" \
    > "$T/bad/src/a/b.c"
for i in $(seq 13); do : > "$T/bad/src/f$i.c"; done
out=$(python3 "$CHECK" --root "$T/bad" 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q 'include cycle between modules: a <-> b' &&
  pass "a cycle a.h <-> b.h is found" || fail "a cycle a.h <-> b.h is found" "rc $rc: $out"
echo "$out" | grep -q 'src/a/b.c:2: b is 133 lines (limit 120)' &&
  pass "a 133-line function is found" || fail "a 133-line function is found" "$out"
echo "$out" | grep -q '13 files directly in src/ (limit 12)' &&
  pass "13 files directly in src/ are found" || fail "13 files directly in src/ are found" "$out"
exit $((failures > 0))
