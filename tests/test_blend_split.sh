#!/usr/bin/env bash
# test_blend_split.sh BUILD_DIR - data.split with a blended data.train_path
# (Megatron's --data-path "W1 A W2 B" --split 90,8,2): every dataset is split
# by its own documents with the same shares, in the counts Python's round
# gives (Megatron's), each part whole documents and the three together the
# file; training reads each dataset's train part only (it trains exactly as
# a blend of files holding just those parts, same weights); an evaluation
# takes the validation (or test) parts in BlendedDataset order with the
# blend's weights, so its loss is the single-file evaluations of the parts
# over the counts Megatron's own order gives (tests/data/megatron_blend.txt),
# weighted by their unmasked targets; TP 2 x PP 2 x DP 2 trains as one
# process; a resume continues exactly and one with another split is
# refused; a dataset without documents in a part it must give is refused.
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" blend-split
use_mpirun

# three formats, each with documents: English text (a newline, 10, ends a
# document) as a lattice shard, random ids as an llm.c file (10 ends a
# document there too), the text's second half as a Megatron pair (one
# document a line, from its index); and a shard of 3 documents
text_shard "$T/text.ltok"
random_shard "$T/rand.ltok" 16000 7
"$LT" shard --vocab-size 256 --format llmc --input "$T/ids.7" "$T/rand.bin" >/dev/null
cp "$T/ids.7" "$T/rand.ids"
megatron_pair "$T/text.ids" "$T/doc"
python3 -c "print(' '.join((['65'] * 99 + ['10']) * 3))" >"$T/few.ids"   # 3 documents
"$LT" shard --vocab-size 256 --input "$T/few.ids" "$T/few.ltok" >/dev/null
CFG=configs/tiny.yaml
SPLIT=(data.valid_path= data.split=90,8,2 data.eod_token=10)
EOD=(data.eod_token=10 data.eod_mask_loss=true)
B3="0.3 $T/text.ltok 0.5 $T/rand.bin 0.2 $T/doc"

# ---- each dataset's parts: whole documents, disjoint, the whole file ------------
"$LT" train $CFG "data.train_path=$B3" "${SPLIT[@]}" train.steps=2 >"$T/parts.log" 2>&1 ||
  fail blend_split_train_runs "$(grep error "$T/parts.log")"
if python3 - "$T" "$T/parts.log" <<'PY'
import re, sys
T, log = sys.argv[1], open(sys.argv[2]).read()
def eod_starts(ids):
    return [0] + [i + 1 for i, t in enumerate(ids) if t == 10 and i + 1 < len(ids)]
edges = [0, 0.9, 0.98, 1.0]
names = ("text.ltok", "rand.bin", "doc")
for d, name in enumerate(names):
    ids = list(map(int, open(T + ("/text.ids", "/rand.ids", "/doc.ids")[d]).read().split()))
    if name == "doc":   # the Megatron index's documents
        sizes = list(map(int, open(T + "/doc.sizes").read().split()))
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
    else:
        starts = eod_starts(ids)
    n, bounds = len(starts), starts + [len(ids)]
    at = 0
    for k, part in enumerate(("train", "valid", "test")):
        m = re.search(r"data split %s \(dataset %d, \S*/%s\): documents \[(\d+), (\d+)\) of (\d+), "
                      r"tokens \[(\d+), (\d+)\)" % (part, d + 1, re.escape(name)), log)
        assert m, (part, name)
        b, e, nd, t0, t1 = map(int, m.groups())
        assert nd == n and (b, e) == (round(edges[k] * n), round(edges[k + 1] * n)), (name, part, b, e, n)
        assert (t0, t1) == (bounds[b], bounds[e]) and t0 == at and t1 > t0, (name, part, t0, t1, at)
        at = t1
        if part == "train":   # the loader reads this range only
            tr = re.search(r"data train   \S*/%s: weight [0-9.]+, \S+ format, (\d+) tokens" % re.escape(name), log)
            assert tr and int(tr.group(1)) == t1 - t0, (name, tr and tr.group(1), t1 - t0)
        if part == "valid":
            va = re.search(r"data valid   \S*/%s: weight [0-9.]+, \S+ format, (\d+) tokens" % re.escape(name), log)
            assert va and int(va.group(1)) == t1 - t0, (name, va and va.group(1), t1 - t0)
    assert at == len(ids), (name, at, len(ids))
    print(f"{name}: {n} documents split {[round(x * n) for x in edges]}")
PY
then pass blend_split_partitions_whole_documents
else fail blend_split_partitions_whole_documents "$(grep -E '^data|error' "$T/parts.log")"; fi

# part_file NAME IDS PART OUT: the tokens of PART of dataset NAME (as the
# summary in parts.log gives them) into OUT.ids and the shard OUT.ltok
part_file() {
  python3 - "$2" "$T/parts.log" "$1" "$3" "$4.ids" <<'PY'
import re, sys
ids = open(sys.argv[1]).read().split()
t0, t1 = map(int, re.search(r"data split %s \(dataset \d+, \S*/%s\): .* tokens \[(\d+), (\d+)\)"
                            % (sys.argv[4], re.escape(sys.argv[3])), open(sys.argv[2]).read()).groups())
open(sys.argv[5], "w").write(" ".join(ids[t0:t1]))
PY
  "$LT" shard --vocab-size 256 --input "$4.ids" "$4.ltok" >/dev/null
}
for part in train valid test; do
  part_file text.ltok "$T/text.ids" $part "$T/text-$part"
  part_file rand.bin "$T/rand.ids" $part "$T/rand-$part"
  part_file doc "$T/doc.ids" $part "$T/doc-$part"
done

# ---- training reads the train parts: as a blend of files holding just them ------
COMMON=(train.steps=4 optimizer.decay_steps=4 logging.log_interval=1 eval.interval=2 eval.iters=2
        "${EOD[@]}")
"$LT" train $CFG "${COMMON[@]}" "data.train_path=$B3" data.valid_path= data.split=90,8,2 \
  logging.metrics_file=$T/s1.jsonl >"$T/s1.log" 2>&1
"$LT" train $CFG "${COMMON[@]}" \
  "data.train_path=0.3 $T/text-train.ltok 0.5 $T/rand-train.ltok 0.2 $T/doc-train.ltok" \
  "data.valid_path=0.3 $T/text-valid.ltok 0.5 $T/rand-valid.ltok 0.2 $T/doc-valid.ltok" \
  logging.metrics_file=$T/f1.jsonl >"$T/f1.log" 2>&1
if [ -s "$T/s1.jsonl" ] && python3 - "$T/s1.jsonl" "$T/f1.jsonl" <<'PY'
import json, sys
def read(p):
    rs = list(map(json.loads, open(p)))
    return [r["loss"] for r in rs if "loss" in r and not r.get("eval")], \
           [r["val_loss"] for r in rs if r.get("eval")]
(a, av), (b, bv) = read(sys.argv[1]), read(sys.argv[2])
print("split", a, av, "\nparts", b, bv)
sys.exit(0 if len(a) == 4 and len(av) == 2 and (a, av) == (b, bv) else 1)
PY
then pass blend_split_trains_as_the_part_files
else fail blend_split_trains_as_the_part_files "$(grep -i error "$T/s1.log" "$T/f1.log" | head -2)"; fi

# ---- evaluation: the single-file evaluations of the parts, weighted --------------
"$LT" train $CFG train.steps=6 data.train_path=$T/text.ltok data.valid_path= checkpoint.dir=$T/ck \
  >"$T/ck.log" 2>&1 || { fail train_checkpoint "$(tail -2 "$T/ck.log")"; exit 1; }
# ev NAME SAMPLES [overrides...]: `lattice eval` of the checkpoint over SAMPLES samples
ev() {
  local name=$1 n=$2; shift 2
  eval_loss "$name" "$n" checkpoint.load=$T/ck "$@"
}
# combination NAMES COUNTS LOSSES GOT: GOT is the LOSSES of the part files
# NAMES (over COUNTS samples each) weighted by their targets not predicted
# from an EOD input
combination() {
  python3 - "$T" "$1" "$2" "$3" "$4" <<'PY'
import sys
T, S = sys.argv[1], 32
names, counts = sys.argv[2].split(), list(map(int, sys.argv[3].split()))
losses, got = list(map(float, sys.argv[4].split())), float(sys.argv[5])
def unmasked(path, k):
    ids = list(map(int, open(path).read().split()))
    return sum(1 for i in range(k) for t in ids[i * S:i * S + S] if t != 10)
n = [unmasked(f"{T}/{p}.ids", k) for p, k in zip(names, counts)]
want = sum(l * c for l, c in zip(losses, n)) / sum(n)
print(f"counts {counts}, unmasked targets {n}: blend {got:.9g}, combination {want:.9g}")
sys.exit(0 if min(n) > 0 and len(set(losses)) == len(losses) and abs(got - want) <= 1e-6 * want else 1)
PY
}
read -r c1 c2 c3 <<<"$(megatron_counts 0.3,0.5,0.2 40)"
l1=$(ev v1 "$c1" data.valid_path=$T/text-valid.ltok "${EOD[@]}")
l2=$(ev v2 "$c2" data.valid_path=$T/rand-valid.ltok "${EOD[@]}")
l3=$(ev v3 "$c3" data.valid_path=$T/doc-valid.ltok "${EOD[@]}")
lb=$(ev vb 40 "data.train_path=$B3" "${SPLIT[@]}" "${EOD[@]}")
if [ "$c1 $c2 $c3" = "12 20 8" ] &&
   combination "text-valid rand-valid doc-valid" "$c1 $c2 $c3" "$l1 $l2 $l3" "$lb"
then pass blend_split_eval_valid_weighted
else fail blend_split_eval_valid_weighted "$(grep -E 'error|^data valid' "$T/vb.log")"; fi
read -r c1 c2 <<<"$(megatron_counts 1,1 16)"
t1=$(ev t1 "$c1" data.valid_path=$T/text-test.ltok "${EOD[@]}")
t2=$(ev t2 "$c2" data.valid_path=$T/doc-test.ltok "${EOD[@]}")
tb=$(ev tb 16 "data.train_path=1 $T/text.ltok 1 $T/doc" "${SPLIT[@]}" eval.split=test "${EOD[@]}")
if [ "$c1 $c2" = "8 8" ] && grep -q "each its data.split test part" "$T/tb.log" &&
   combination "text-test doc-test" "$c1 $c2" "$t1 $t2" "$tb"
then pass blend_split_eval_test_weighted
else fail blend_split_eval_test_weighted "$(grep -E 'error|^data valid' "$T/tb.log")"; fi

# ---- layouts: TP 2 x PP 2 x DP 2 against one process ----------------------------
$MPI -np 8 "$LT" train $CFG "${COMMON[@]}" "data.train_path=$B3" data.valid_path= \
  data.split=90,8,2 parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 \
  logging.metrics_file=$T/p8.jsonl >"$T/p8.log" 2>&1 </dev/null
if [ -s "$T/p8.jsonl" ] && close_losses "$T/s1.jsonl" "$T/p8.jsonl" 1-4 &&
   close_val_losses "$T/s1.jsonl" "$T/p8.jsonl" 2
then pass blend_split_tp2_pp2_dp2_matches_one_process
else fail blend_split_tp2_pp2_dp2_matches_one_process "$(grep -i error "$T/p8.log" | head -2)"; fi

# ---- resume: exact at another layout; another split refused ---------------------
"$LT" train $CFG "${COMMON[@]}" "data.train_path=$B3" data.valid_path= data.split=90,8,2 \
  checkpoint.dir=$T/rk checkpoint.save_interval=2 train.steps=2 >"$T/r1.log" 2>&1
$MPI -np 2 "$LT" train $CFG "${COMMON[@]}" "data.train_path=$B3" data.valid_path= \
  data.split=90,8,2 checkpoint.dir=$T/rk checkpoint.load=$T/rk logging.metrics_file=$T/r.jsonl \
  >"$T/r2.log" 2>&1 </dev/null
if [ -s "$T/r.jsonl" ] && close_losses "$T/s1.jsonl" "$T/r.jsonl" 3-4
then pass blend_split_resume_dp2_exact
else fail blend_split_resume_dp2_exact "$(grep -E 'error|resume' "$T/r2.log" | tail -3)"; fi
"$LT" train $CFG "${COMMON[@]}" "data.train_path=$B3" data.valid_path= data.split=80,18,2 \
  checkpoint.load=$T/rk >"$T/r3.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "trained with data.split '90,8,2' (data.eod_token 10); this run has '80,18,2'" "$T/r3.log"
then pass blend_split_resume_other_split_refused
else fail blend_split_resume_other_split_refused "rc $rc: $(grep error "$T/r3.log")"; fi
"$LT" train $CFG "${COMMON[@]}" "data.train_path=$B3" data.valid_path=$T/text-valid.ltok \
  checkpoint.load=$T/rk >"$T/r4.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "trained with data.split '90,8,2' (data.eod_token 10); this run has ''" "$T/r4.log"
then pass blend_split_resume_without_split_refused
else fail blend_split_resume_without_split_refused "rc $rc: $(grep error "$T/r4.log")"; fi

# ---- a part's share of 0: no evaluations in training; `lattice eval` refuses -----
"$LT" train $CFG "data.train_path=$B3" data.valid_path= data.split=98,0,2 data.eod_token=10 \
  train.steps=2 >"$T/z.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "gives the validation part no share: no evaluations" "$T/z.log" &&
   ! grep -q "val loss" "$T/z.log"; then pass blend_split_no_validation_share_trains
else fail blend_split_no_validation_share_trains "rc $rc: $(grep -E 'error|val loss' "$T/z.log")"; fi

bad() { # name pattern command overrides...
  local name=$1 pat=$2 cmd=$3; shift 3
  "$LT" $cmd $CFG data.valid_path= data.eod_token=10 train.steps=2 "$@" >"$T/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$pat" "$T/bad.log"; then pass "$name"
  else fail "$name" "rc $rc: $(grep error "$T/bad.log")"; fi
}
bad blend_split_eval_no_share "data.split '98,0,2' gives the validation part no share: nothing to evaluate" \
  eval "data.train_path=$B3" data.split=98,0,2
bad blend_split_no_valid_documents \
  "leaves no validation documents in dataset 2 of data.train_path, '.*few.ltok'" \
  train "data.train_path=0.5 $T/text.ltok 0.5 $T/few.ltok" data.split=90,8,2
bad blend_split_no_train_documents \
  "leaves no training documents in dataset 2 of data.train_path, '.*few.ltok'" \
  train "data.train_path=0.5 $T/text.ltok 0.5 $T/few.ltok" data.split=10,90
bad blend_split_test_part_short "data.split's test part: dataset 2 of the blend, '.*rand.bin', holds 12 tokens, not one sample" \
  eval "data.train_path=$B3" data.split=90,8,2 eval.split=test
bad blend_split_needs_documents "keeps no document index: documents are told apart by data.eod_token" \
  train "data.train_path=$B3" data.split=90,8,2 data.eod_token=-1

exit $((failures > 0))
