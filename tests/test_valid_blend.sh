#!/usr/bin/env bash
# test_valid_blend.sh BUILD_DIR - data.valid_path as a blend (Megatron's
# --valid-data-path "W1 PATH1 W2 PATH2 ..."): an evaluation takes its samples
# in BlendedDataset order, each dataset's in file order, so its loss is the
# combination of evaluations of the single files over the counts that
# Megatron's own order gives (tests/data/megatron_blend.txt, built from
# Megatron's helpers.cpp), weighted by their unmasked positions: "1 A" is A, a
# 50/50 blend the mean, a blend of a lattice shard, an llm.c file and a
# Megatron pair the weighted mean, also as a YAML list and under DP 2;
# eval.iters stops where a dataset runs out; training with a valid blend is
# the same under TP 2 x PP 2 x DP 2 as in one process; bad blends and data
# that cannot give eval.samples are refused.
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" valid-blend
use_mpirun

# English text (a newline, 10, ends a document), random ids as an llm.c file,
# the text's second half as a Megatron pair (one sequence per line), a short
# file of 10 samples and one shorter than a sample
text_shard "$T/text.ltok"
random_shard "$T/rand.ltok" 8000 7
"$LT" shard --vocab-size 256 --format llmc --input "$T/ids.7" "$T/rand.bin" >/dev/null
random_shard "$T/small.ltok" 331 8
random_shard "$T/crumb.ltok" 20 9
megatron_pair "$T/text.ids" "$T/doc"
CFG=configs/tiny.yaml
# a model that tells text from random ids, so the datasets' losses differ
"$LT" train $CFG train.steps=6 data.train_path=$T/text.ltok data.valid_path= checkpoint.dir=$T/ck \
  >"$T/ck.log" 2>&1 || { fail train_checkpoint "$(tail -2 "$T/ck.log")"; exit 1; }
EOD=(data.eod_token=10 data.eod_mask_loss=true)

# ev NAME VALID SAMPLES [overrides...]: `lattice eval` of VALID over SAMPLES
# samples; prints its val_loss (nothing when it failed)
ev() {
  local name=$1 valid=$2 n=$3; shift 3
  eval_loss "$name" "$n" checkpoint.load=$T/ck "data.valid_path=$valid" "$@"
}

# ---- one dataset, and the 50/50 blend ------------------------------------------
a=$(ev one_file "$T/text.ltok" 16 "${EOD[@]}")
b=$(ev one_blend "1 $T/text.ltok" 16 "${EOD[@]}")
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass valid_blend_of_one_is_the_file
else fail valid_blend_of_one_is_the_file "file $a, blend $b: $(grep error "$T/one_blend.log")"; fi

read -r ca cb <<<"$(megatron_counts 1,1 16)"
t8=$(ev t8 "$T/text.ltok" "$ca")
r8=$(ev r8 "$T/rand.bin" "$cb")
half=$(ev half "1 $T/text.ltok 1 $T/rand.bin" 16)
if [ "$ca $cb" = "8 8" ] && python3 -c "
import sys; t, r, h = map(float, sys.argv[1:])
print(f'blend {h:.9g}, mean of the files {(t + r) / 2:.9g}')
sys.exit(0 if abs(h - (t + r) / 2) <= 1e-6 * h and abs(t - r) > 1e-3 else 1)" "$t8" "$r8" "$half"
then pass valid_blend_half_half_is_the_mean
else fail valid_blend_half_half_is_the_mean "counts $ca $cb, text $t8, rand $r8, blend $half"; fi

# ---- three formats, three weights, EOD masking: the weighted combination ---------
W="0.3 $T/text.ltok 0.5 $T/rand.bin 0.2 $T/doc"
read -r c1 c2 c3 <<<"$(megatron_counts 0.3,0.5,0.2 40)"
l1=$(ev f1 "$T/text.ltok" "$c1" "${EOD[@]}")
l2=$(ev f2 "$T/rand.bin" "$c2" "${EOD[@]}")
l3=$(ev f3 "$T/doc" "$c3" "${EOD[@]}")
lb=$(ev f123 "$W" 40 "${EOD[@]}")
if python3 - "$T" "$c1 $c2 $c3" "$l1 $l2 $l3" "$lb" <<'PY'
import sys
T, S = sys.argv[1], 32
counts = list(map(int, sys.argv[2].split()))
losses = list(map(float, sys.argv[3].split()))
got = float(sys.argv[4])
def unmasked(path, k):   # targets not predicted from an EOD input in samples 0 .. k-1
    ids = list(map(int, open(path).read().split()))
    return sum(1 for i in range(k) for t in ids[i * S:i * S + S] if t != 10)
n = [unmasked(T + p, k) for p, k in zip(("/text.ids", "/ids.7", "/doc.ids"), counts)]
want = sum(l * c for l, c in zip(losses, n)) / sum(n)
print(f"counts {counts}, unmasked targets {n}: blend {got:.9g}, combination {want:.9g}")
log = open(T + "/f123.log").read()
for p, k in zip(("text.ltok: weight 0.3, lattice", "rand.bin: weight 0.5, llm.c",
                 "doc: weight 0.2, megatron"), counts):
    assert f"{p} format" in log and f" {k} per evaluation" in log.split(p)[1].split("\n")[0], p
sys.exit(0 if counts == [12, 20, 8] and n[0] < 12 * S and abs(got - want) <= 1e-6 * want else 1)
PY
then pass valid_blend_three_formats_weighted
else fail valid_blend_three_formats_weighted "$(grep -E 'error|^data valid' "$T/f123.log")"; fi

# the same blend as a YAML list, and `lattice eval` under DP 2
{ sed '/^data:/,$d' $CFG; echo "data:"
  echo "  valid_path: [0.3, $T/text.ltok, 0.5, $T/rand.bin, 0.2, $T/doc]"; } >"$T/list.yaml"
"$LT" eval "$T/list.yaml" checkpoint.load=$T/ck eval.samples=40 "${EOD[@]}" \
  logging.metrics_file=$T/list.jsonl >"$T/list.log" 2>&1
ll=$(grep -o '"val_loss": [0-9.e+-]*' "$T/list.eval.jsonl" 2>/dev/null | cut -d' ' -f2)
if [ -n "$lb" ] && [ "$ll" = "$lb" ]; then pass valid_blend_yaml_list_same_as_string
else fail valid_blend_yaml_list_same_as_string "string $lb, list $ll: $(grep error "$T/list.log")"; fi
$MPI -np 2 "$LT" eval $CFG checkpoint.load=$T/ck "data.valid_path=$W" eval.samples=40 "${EOD[@]}" \
  logging.metrics_file=$T/dp2.jsonl >"$T/dp2.log" 2>&1 </dev/null
l2r=$(grep -o '"val_loss": [0-9.e+-]*' "$T/dp2.eval.jsonl" 2>/dev/null | cut -d' ' -f2)
if [ -n "$l2r" ] && python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-6 * a)" \
     "$lb" "$l2r"; then pass valid_blend_eval_dp2_matches_one_process
else fail valid_blend_eval_dp2_matches_one_process "one process $lb, DP 2 $l2r: $(grep error "$T/dp2.log")"; fi

# ---- eval.iters stops before a dataset would be read twice -----------------------
"$LT" eval $CFG checkpoint.load=$T/ck "data.valid_path=0.7 $T/text.ltok 0.3 $T/small.ltok" \
  eval.iters=100 >"$T/cap.log" 2>&1
if python3 - "$T/cap.log" <<'PY'
import re, sys
for line in open("tests/data/megatron_blend.txt"):
    if line.startswith("0.7,0.3|"):
        seq = line.strip().split("|")[2]
fit = max(m for m in range(801) if seq[:m].count("1") <= 10)   # small.ltok: 10 samples
want = fit // 4 * 4
got = re.search(r"data valid blend of 2 datasets .*, (\d+) samples per evaluation",
                open(sys.argv[1]).read())
print(f"longest prefix {fit}, whole micro batches {want}, lattice {got and got.group(1)}")
sys.exit(0 if got and int(got.group(1)) == want and fit < 800 else 1)
PY
then pass valid_blend_iters_capped_where_a_dataset_ends
else fail valid_blend_iters_capped_where_a_dataset_ends "$(grep -E 'error|^data valid' "$T/cap.log")"; fi

# ---- training: TP 2 x PP 2 x DP 2 against one process; a single train file -------
COMMON=(train.steps=4 optimizer.decay_steps=4 logging.log_interval=1 eval.interval=2 eval.iters=2
        "data.train_path=0.6 $T/text.ltok 0.4 $T/rand.bin" "data.valid_path=$W" "${EOD[@]}")
"$LT" train $CFG "${COMMON[@]}" logging.metrics_file=$T/p1.jsonl >"$T/p1.log" 2>&1
$MPI -np 8 "$LT" train $CFG "${COMMON[@]}" parallel.tensor_model_parallel_size=2 \
  parallel.pipeline_model_parallel_size=2 logging.metrics_file=$T/p8.jsonl >"$T/p8.log" 2>&1 </dev/null
if [ -s "$T/p8.jsonl" ] && close_losses "$T/p1.jsonl" "$T/p8.jsonl" 1-4 &&
   close_val_losses "$T/p1.jsonl" "$T/p8.jsonl" 2
then pass valid_blend_tp2_pp2_dp2_matches_one_process
else fail valid_blend_tp2_pp2_dp2_matches_one_process "$(grep -i error "$T/p8.log" | head -2)"; fi
"$LT" train $CFG train.steps=2 eval.iters=2 data.train_path=$T/text.ltok "data.valid_path=$W" \
  >"$T/single.log" 2>&1
if grep -q "val loss" "$T/single.log" && grep -q "data valid blend of 3 datasets" "$T/single.log"
then pass valid_blend_with_one_train_file
else fail valid_blend_with_one_train_file "$(grep -E 'error|val loss' "$T/single.log")"; fi

# ---- refusals ------------------------------------------------------------------
refused() { # name pattern valid [overrides...]
  local name=$1 pat=$2 valid=$3; shift 3
  "$LT" eval $CFG "data.valid_path=$valid" "$@" >"$T/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$pat" "$T/bad.log"; then pass "$name"
  else fail "$name" "rc $rc: $(grep error "$T/bad.log")"; fi
}
refused valid_blend_bad_weight "data.valid_path: item 3 of the blend, 'abc', should be a positive weight" \
  "0.5 $T/text.ltok abc $T/rand.bin"
refused valid_blend_zero_weight "data.valid_path: .*should be a positive weight" \
  "0.5 $T/text.ltok 0 $T/rand.bin"
refused valid_blend_odd_items "data.valid_path: .*odd number" "0.5 $T/text.ltok 0.5"
refused valid_blend_missing_file "data.valid_path: .*nothere.bin" "0.5 $T/text.ltok 0.5 $T/nothere.bin"
refused valid_blend_no_sample "dataset 2 of the blend, '.*crumb.ltok', holds 20 tokens, not one sample" \
  "0.5 $T/text.ltok 0.5 $T/crumb.ltok"
refused valid_blend_eval_samples_beyond "200 samples (eval.samples) take 100 from dataset 2 of the blend, '.*small.ltok' (weight 0.5), which holds 10" \
  "0.5 $T/text.ltok 0.5 $T/small.ltok" eval.samples=200
refused valid_blend_beside_split "data.valid_path ('0.5 .*') must be empty" \
  "0.5 $T/text.ltok 0.5 $T/rand.bin" data.train_path=$T/text.ltok data.split=90,10 data.eod_token=10
"$LT" train $CFG train.steps=2 data.train_path=$T/text.ltok \
  "data.valid_path=0.5 $T/text.ltok 0.5 $T/small.ltok" eval.samples=200 >"$T/bad.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "data.valid_path: 200 samples (eval.samples)" "$T/bad.log"
then pass valid_blend_refused_in_training_too
else fail valid_blend_refused_in_training_too "rc $rc: $(grep error "$T/bad.log")"; fi

exit $((failures > 0))
