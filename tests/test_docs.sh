#!/usr/bin/env bash
# test_docs.sh BUILD_DIR - the documentation cannot drift from the code:
#   docs_config_keys   every key the binary knows (the resolved config it
#                      prints: every entry of src/config/config_keys.c's key table)
#                      has a row in docs/configuration.md under its section,
#                      and every key documented there exists;
#   docs_linked        every docs/*.md is linked from README.md;
#   docs_readme_length README.md is at most 300 lines;
#   docs_links         every relative link in README.md and docs/*.md names a
#                      file or folder that exists;
#   readme_multirank   the README's "First multi-rank run" commands run as
#                      written (2 steps, on a random shard in place of the
#                      demo corpus) and train.
# Prints one PASS/FAIL line per check; exits 1 if any failed.
set -u
BUILD=${1:?usage: tests/test_docs.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/tests/lib.sh" docs
cd "$ROOT"

# The binary prints the resolved config (every key of the table, by section)
# before it opens any data; a missing training file then stops it.
"$LT" train configs/tiny.yaml train.steps=0 data.train_path="$T/none.ltok" data.valid_path= \
  > "$T/config.txt" 2> "$T/stderr.txt"
awk '/^[a-z_]+:$/ { sec = substr($1, 1, length($1) - 1); next }
     /^  [a-z_0-9]+:/ && sec != "" { k = $1; sub(/:$/, "", k); print sec "." k; next }
     /^  #/ { next }
     sec != "" { exit }' "$T/config.txt" | sort -u > "$T/binary_keys"
# Documented keys: the first column of the tables under each "## section"
# heading of docs/configuration.md (a cell may name several keys).
awk '/^## / { sec = $2; next }
     /^\| `/ && sec ~ /^[a-z_]+$/ {
       split($0, cell, "|"); n = split(cell[2], parts, ",")
       for (i = 1; i <= n; i++) { k = parts[i]; gsub(/[` ]/, "", k); if (k != "") print sec "." k }
     }' docs/configuration.md | sort -u > "$T/doc_keys"
nbin=$(wc -l < "$T/binary_keys")
if [ "$nbin" -lt 50 ]; then
  fail docs_config_keys "the binary printed only $nbin keys (stderr: $(head -c 300 "$T/stderr.txt"))"
else
  undocumented=$(comm -23 "$T/binary_keys" "$T/doc_keys" | tr '\n' ' ')
  unknown=$(comm -13 "$T/binary_keys" "$T/doc_keys" | tr '\n' ' ')
  why=""
  [ -n "$undocumented" ] && why="keys missing from docs/configuration.md: $undocumented"
  [ -n "$unknown" ] && why="${why:+$why; }documented keys the binary does not know: $unknown"
  if [ -n "$why" ]; then fail docs_config_keys "$why"; else pass docs_config_keys; fi
fi

unlinked=""
for page in docs/*.md; do
  grep -q "](${page})" README.md || unlinked="$unlinked $page"
done
if [ -n "$unlinked" ]; then fail docs_linked "not linked from README.md:$unlinked"; else pass docs_linked; fi

lines=$(wc -l < README.md)
if [ "$lines" -gt 300 ]; then fail docs_readme_length "README.md has $lines lines (at most 300)"
else pass docs_readme_length; fi

# Relative links: [text](target) outside code blocks, without a scheme; the
# part before '#' must exist relative to the page.
broken=""
for page in README.md docs/*.md; do
  dir=$(dirname "$page")
  while IFS= read -r target; do
    path=${target%%#*}
    [ -z "$path" ] && continue
    [ -e "$dir/$path" ] || broken="$broken $page->$target"
  done < <(awk '/^```/ { code = !code; next } !code' "$page" |
           grep -o '\]([^)]*)' | sed 's/^](//; s/)$//' | grep -v '^[a-z]*:' )
done
if [ -n "$broken" ]; then fail docs_links "links to missing files:$broken"; else pass docs_links; fi

# The README's first multi-rank commands: the code block under "## First
# multi-rank run", its variable lines as they are, each command (continuation
# lines joined) with 2 steps on a random shard instead of data/demo/.
use_mpirun
random_shard "$T/mr.ltok" 40000 7
awk '/^## First multi-rank run/ { on = 1; next } /^## / { on = 0 }
     on && /^```/ { code = !code; if (!code) exit; next }
     on && code' README.md | sed -e ':a' -e '/\\$/N; s/\\\n *//; ta' > "$T/readme_block"
mr_vars=$(grep -E '^[A-Z]+=' "$T/readme_block")
mr_cmds=$(grep -E '^\$MPI ' "$T/readme_block")
n=0; why=""
while IFS= read -r cmd; do
  [ -z "$cmd" ] && continue
  n=$((n + 1))
  ( cd "$ROOT" && eval "$mr_vars" && MPI="timeout 300 $MPI" &&
    eval "${cmd/build\/lattice/$LT} train.steps=2 data.train_path=$T/mr.ltok data.valid_path=$T/mr.ltok" ) \
    < /dev/null > "$T/mr.$n.out" 2>&1
  rc=$?
  grep -q '^done:' "$T/mr.$n.out" && [ $rc -eq 0 ] ||
    why="$why [$cmd: rc $rc: $(grep -m1 -i error "$T/mr.$n.out")]"
done <<< "$mr_cmds"
if [ "$n" -lt 4 ]; then fail readme_multirank "found $n commands in the README's first multi-rank block"
elif [ -n "$why" ]; then fail readme_multirank "$why"
else pass "readme_multirank ($n commands)"; fi

[ "$failures" -eq 0 ]
