#!/usr/bin/env bash
# test_split.sh BUILD_DIR - data.split carves train, validation and test from
# data.train_path by documents (Megatron's semantics): the three token ranges
# are whole documents, disjoint, and together the whole file, in the counts
# Python's round gives (Megatron's); training reads only the train part;
# `lattice eval` scores the validation or the test part exactly as a file
# holding just those tokens; bad splits are refused. (A blend split:
# tests/test_blend_split.sh.)
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" split

text_shard "$T/text.ltok"   # byte-level English; a newline (10) ends a document
CFG=configs/tiny.yaml
SPLIT=(data.split=90,8,2 data.eod_token=10)

"$LT" train $CFG data.train_path=$T/text.ltok data.valid_path= "${SPLIT[@]}" train.steps=2 \
  >"$T/tr.log" 2>&1 || fail split_train_runs "$(grep error "$T/tr.log")"
if python3 - "$T/text.ids" "$T/tr.log" <<'PY'
import re, sys
ids = list(map(int, open(sys.argv[1]).read().split()))
log = open(sys.argv[2]).read()
starts = [0] + [i + 1 for i, t in enumerate(ids) if t == 10 and i + 1 < len(ids)]
n = len(starts)
bounds = starts + [len(ids)]
parts = {m[0]: tuple(map(int, m[1:])) for m in
         re.findall(r"data split (\w+): documents \[(\d+), (\d+)\) of (\d+), tokens \[(\d+), (\d+)\)", log)}
assert set(parts) == {"train", "valid", "test"}, parts
edges = [0, 0.9, 0.98, 1.0]
at = 0
for k, name in enumerate(("train", "valid", "test")):
    b, e, nd, t0, t1 = parts[name]
    assert nd == n, (nd, n)
    assert (b, e) == (round(edges[k] * n), round(edges[k + 1] * n)), (name, b, e)
    assert (t0, t1) == (bounds[b], bounds[e]) and t0 == at, (name, t0, t1, at)
    at = t1
assert at == len(ids)
tr = re.search(r"data train \S+: lattice format, (\d+) tokens", log)
assert tr and int(tr.group(1)) == parts["train"][4] - parts["train"][3], tr
print(f"{n} documents: train {parts['train'][:2]}, valid {parts['valid'][:2]}, test {parts['test'][:2]}")
PY
then pass split_partitions_whole_documents
else fail split_partitions_whole_documents "$(grep -E '^data' "$T/tr.log")"; fi

# eval of each part = eval of a file holding just its tokens
for part in valid test; do
  python3 - "$T/text.ids" "$T/tr.log" "$part" "$T/$part.ids" <<'PY'
import re, sys
ids = open(sys.argv[1]).read().split()
t0, t1 = map(int, re.search(r"data split %s: .* tokens \[(\d+), (\d+)\)" % sys.argv[3],
                            open(sys.argv[2]).read()).groups())
open(sys.argv[4], "w").write(" ".join(ids[t0:t1]))
PY
  "$LT" shard --vocab-size 256 --input "$T/$part.ids" "$T/$part.ltok" >/dev/null
  EV=(eval.samples=8 train.micro_batch_size=4 data.eod_token=10)
  "$LT" eval $CFG data.train_path=$T/text.ltok data.split=90,8,2 eval.split=$part "${EV[@]}" \
    logging.metrics_file=$T/a-$part.jsonl >"$T/a-$part.log" 2>&1
  "$LT" eval $CFG data.valid_path=$T/$part.ltok "${EV[@]}" logging.metrics_file=$T/b-$part.jsonl \
    >"$T/b-$part.log" 2>&1
  a=$(grep -o '"val_loss": [0-9.e+-]*' "$T/a-$part.eval.jsonl" 2>/dev/null)
  b=$(grep -o '"val_loss": [0-9.e+-]*' "$T/b-$part.eval.jsonl" 2>/dev/null)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "split_eval_${part}_reads_its_part"
  else fail "split_eval_${part}_reads_its_part" "split $a, file $b: $(grep error "$T/a-$part.log")"; fi
done
[ "$(grep -o '"val_loss": [0-9.e+-]*' "$T/a-valid.eval.jsonl")" != \
  "$(grep -o '"val_loss": [0-9.e+-]*' "$T/a-test.eval.jsonl")" ] && pass split_valid_and_test_differ ||
  fail split_valid_and_test_differ "the same loss"

bad() { # name pattern overrides...
  local name=$1 pat=$2; shift 2
  "$LT" train $CFG data.train_path=$T/text.ltok train.steps=2 "$@" >"$T/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "$pat" "$T/bad.log"; then pass "$name"
  else fail "$name" "rc $rc: $(grep error "$T/bad.log")"; fi
}
bad split_needs_documents "keeps no document index: documents are told apart by data.eod_token" \
  data.valid_path= data.split=90,10
bad split_beside_valid_path "data.valid_path ('.*') must be empty" data.valid_path=$T/text.ltok \
  "${SPLIT[@]}"
bad split_bad_text "more than three parts" data.valid_path= data.split=1,2,3,4 data.eod_token=10
bad split_no_train "leaves no training documents" data.valid_path= data.split=0,1 data.eod_token=10
# a file of 3 documents: 90,8,2 gives its validation part none (not the whole file)
python3 -c "print(' '.join((['65'] * 99 + ['10']) * 3))" >"$T/few.ids"
"$LT" shard --vocab-size 256 --input "$T/few.ids" "$T/few.ltok" >/dev/null
bad split_no_valid_documents "leaves no validation documents in '.*few.ltok'" data.valid_path= \
  "${SPLIT[@]}" data.train_path=$T/few.ltok

exit $((failures > 0))
