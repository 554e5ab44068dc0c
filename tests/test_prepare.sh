#!/usr/bin/env bash
# test_prepare.sh BUILD_DIR - scripts/prepare_data.sh end to end with `lattice shard`.
# Prints one PASS/FAIL line per case; exits 1 if any failed.
set -u
BUILD=${1:?usage: tests/test_prepare.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LATTICE=$(cd "$BUILD" 2>/dev/null && pwd)/lattice
PREP="$ROOT/scripts/prepare_data.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
failed=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failed=1; }

if ! [ -x "$LATTICE" ]; then
  echo "FAIL prepare_setup: no lattice binary at $BUILD/lattice"
  exit 1
fi
if ! "$LATTICE" shard --help 2>/dev/null | grep -q 'lattice shard'; then
  echo "FAIL prepare_setup: $LATTICE has no 'shard' subcommand (main.c must dispatch to lt_cmd_shard)"
  exit 1
fi
for tool in spm_train spm_encode spm_export_vocab python3; do
  command -v $tool >/dev/null || { echo "FAIL prepare_setup: '$tool' is not installed"; exit 1; }
done

# A small generated English corpus: paragraphs of sentences from a seeded grammar,
# and a JSONL file with multi-line texts, unicode and an extra field.
python3 - "$T/corpus.txt" "$T/corpus.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
subj = ["The river", "An old farmer", "The committee", "My neighbour", "A small bird", "The engineer",
        "Every student", "The city council", "A quiet child", "The travelling musician"]
verb = ["walked past", "carefully examined", "wrote a letter about", "argued over", "dreamed of",
        "forgot", "painted", "measured", "repaired", "sang about"]
obj = ["the broken bridge", "a field of barley", "the morning newspaper", "an unfinished report",
       "the distant mountains", "a wooden boat", "the village library", "a basket of apples",
       "the winter storm", "an ancient map"]
tail = ["before sunrise.", "with great patience.", "while the rain fell.", "for three long days.",
        "without saying a word.", "and then went home.", "in the autumn of that year.",
        "as everyone watched.", "because it seemed important.", "near the old harbour."]
def sentence():
    return " ".join([rng.choice(subj), rng.choice(verb), rng.choice(obj), rng.choice(tail)])
def paragraph():
    lines, cur = [], []
    for _ in range(rng.randint(3, 8)):
        cur.append(sentence())
        if rng.random() < 0.4:
            lines.append(" ".join(cur)); cur = []
    if cur:
        lines.append(" ".join(cur))
    return "\n".join(lines)
with open(sys.argv[1], "w") as f:
    f.write("\n\n".join(paragraph() for _ in range(600)) + "\n")
with open(sys.argv[2], "w") as f:
    for i in range(120):
        f.write(json.dumps({"id": i, "text": paragraph() + "\nCafé naïve résumé.", "meta": {"n": i}}) + "\n")
PY

# Run prepare_data.sh; stdout to $T/$name.out, stderr to $T/$name.err; returns its status.
run_prep() {
  local name=$1; shift
  "$PREP" --lattice "$LATTICE" "$@" >"$T/$name.out" 2>"$T/$name.err"
}
vocab_of() { sed -n 's/^vocab_size: //p' "$T/$1.out"; }
tokens_of() { sed -n "s/^$2: .* \([0-9][0-9]*\) tokens.*/\1/p" "$T/$1.out"; }

# --- plain text, training a tokenizer ---
if run_prep txt --input "$T/corpus.txt" --out "$T/txt" --vocab-size 512 --valid-fraction 0.1; then
  V=$(vocab_of txt)
  if [ -s "$T/txt/train.ltok" ] && [ -s "$T/txt/valid.ltok" ] && [ -s "$T/txt/tokenizer.model" ] &&
     [ -n "$V" ] && [ "$V" -gt 259 ] && [ "$V" -le 512 ]; then
    pass prepare_txt
  else
    fail prepare_txt "missing outputs or bad vocab size '$V': $(ls "$T/txt" | tr '\n' ' ')"
  fi
else
  fail prepare_txt "exit $?: $(tail -n 3 "$T/txt.err")"
fi
V=$(vocab_of txt)

# --- every block and token id of both shards validates, counts match the report ---
ok=1
for split in train valid; do
  info=$("$LATTICE" shard --info "$T/txt/$split.ltok" --vocab-size "${V:-0}" 2>&1) || ok=0
  n=$(echo "$info" | sed -n 's/^tokens: //p')
  reported=$(tokens_of txt $split)
  if ! echo "$info" | grep -q '^status: ok' || [ -z "$n" ] || [ "$n" != "$reported" ] || [ "$n" -lt 1000 ]; then
    ok=0
  fi
done
if [ $ok = 1 ]; then pass prepare_info_validates; else fail prepare_info_validates "$info"; fi

# --- the train shard starts with the first paragraph's ids, then </s> ---
first_ids=$(python3 -c "
import sys; print(' '.join(open(sys.argv[1]).read().split('\n\n')[0].split()))" "$T/corpus.txt" |
  spm_encode --model="$T/txt/tokenizer.model" --output_format=id)
eos=$(spm_export_vocab --model="$T/txt/tokenizer.model" | awk -F'\t' '$1 == "</s>" { print NR - 1 }')
n_first=$(echo "$first_ids" | wc -w)
head_ids=$("$LATTICE" shard --info "$T/txt/train.ltok" --head $((n_first + 1)) 2>&1 | sed -n 's/^head: //p')
if [ "$n_first" -gt 10 ] && [ "$head_ids" = "$first_ids $eos" ]; then
  pass prepare_encode_consistent
else
  fail prepare_encode_consistent "shard starts '$head_ids', expected '$first_ids $eos'"
fi

# --- JSONL with an existing tokenizer ---
if run_prep jsonl --input "$T/corpus.jsonl" --out "$T/jsonl" --model "$T/txt/tokenizer.model"; then
  Vj=$(vocab_of jsonl)
  if [ -s "$T/jsonl/train.ltok" ] && [ -s "$T/jsonl/valid.ltok" ] && [ "$Vj" = "$V" ] &&
     grep -q "^train: .* (114 documents)" "$T/jsonl.out" && grep -q "^valid: .* (6 documents)" "$T/jsonl.out" &&
     "$LATTICE" shard --info "$T/jsonl/train.ltok" --vocab-size "$Vj" >/dev/null 2>&1; then
    pass prepare_jsonl
  else
    fail prepare_jsonl "unexpected result: $(cat "$T/jsonl.out")"
  fi
else
  fail prepare_jsonl "exit $?: $(tail -n 3 "$T/jsonl.err")"
fi

# --- --valid-fraction 0 writes no valid shard ---
if run_prep novalid --input "$T/corpus.jsonl" --out "$T/novalid" --model "$T/txt/tokenizer.model" \
     --valid-fraction 0 && [ -s "$T/novalid/train.ltok" ] && ! [ -e "$T/novalid/valid.ltok" ]; then
  pass prepare_no_valid
else
  fail prepare_no_valid "$(cat "$T/novalid.out" "$T/novalid.err")"
fi

# --- corrupted copies are refused with exit 2 ---
corrupt() { # corrupt SRC DST OFFSET|truncate:N
  python3 - "$@" <<'PY'
import sys
src, dst, how = sys.argv[1], sys.argv[2], sys.argv[3]
data = bytearray(open(src, "rb").read())
if how.startswith("truncate:"):
    data = data[:len(data) - int(how.split(":")[1])]
else:
    data[int(how)] ^= 0xFF
open(dst, "wb").write(data)
PY
}
for how in 300 20 truncate:5; do
  corrupt "$T/txt/train.ltok" "$T/bad.ltok" "$how"
  "$LATTICE" shard --info "$T/bad.ltok" --vocab-size "${V:-1}" >"$T/bad.out" 2>"$T/bad.err"
  rc=$?
  if [ $rc = 2 ] && grep -q "bad.ltok" "$T/bad.err"; then
    pass "prepare_corrupt_refused_$how"
  else
    fail "prepare_corrupt_refused_$how" "exit $rc, stderr: $(cat "$T/bad.err")"
  fi
done
"$LATTICE" shard --info "$T/txt/train.ltok" --vocab-size 300 >/dev/null 2>"$T/small.err"
rc=$?
if [ $rc = 2 ] && grep -q "larger than the model's vocab size 300" "$T/small.err"; then
  pass prepare_vocab_too_small_refused
else
  fail prepare_vocab_too_small_refused "exit $rc: $(cat "$T/small.err")"
fi

# --- clear errors ---
expect_error() { # name pattern args...
  local name=$1 pattern=$2; shift 2
  "$@" >"$T/e.out" 2>"$T/e.err"
  local rc=$?
  if [ $rc != 0 ] && grep -q -- "$pattern" "$T/e.err"; then pass "$name"; else
    fail "$name" "exit $rc, stderr: $(head -c 300 "$T/e.err")"; fi
}
: >"$T/empty.txt"
printf '{"text": "fine"}\n{"text": \n' >"$T/broken.jsonl"
printf '{"title": "no text"}\n' >"$T/notext.jsonl"
printf '\n\n   \n' >"$T/blank.txt"
expect_error prepare_missing_input "does not exist" "$PREP" --lattice "$LATTICE" --input "$T/nope.txt" --out "$T/o"
expect_error prepare_empty_input "is empty" "$PREP" --lattice "$LATTICE" --input "$T/empty.txt" --out "$T/o"
expect_error prepare_blank_input "no text found" "$PREP" --lattice "$LATTICE" --input "$T/blank.txt" --out "$T/o"
expect_error prepare_bad_jsonl "line 2: invalid JSON" "$PREP" --lattice "$LATTICE" --input "$T/broken.jsonl" --out "$T/o"
expect_error prepare_jsonl_no_text 'no string "text" field' "$PREP" --lattice "$LATTICE" --input "$T/notext.jsonl" --out "$T/o"
expect_error prepare_no_shard_subcommand "has no 'shard' subcommand" "$PREP" --lattice /bin/true --input "$T/corpus.txt" --out "$T/o"
mkdir -p "$T/path"
ln -s "$(command -v dirname)" "$T/path/dirname"
ln -s "$(python3 -c 'import sys; print(sys.executable)')" "$T/path/python3" # not a pyenv shim
expect_error prepare_missing_tools "'spm_encode' not found" env PATH="$T/path" "$(command -v bash)" "$PREP" \
  --lattice "$LATTICE" --input "$T/corpus.txt" --out "$T/o"

exit $failed
