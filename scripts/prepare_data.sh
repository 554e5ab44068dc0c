#!/usr/bin/env bash
# prepare_data.sh - turn a text corpus into lattice token shards.
#
#   scripts/prepare_data.sh --input FILE(.txt|.jsonl) --out DIR [--model SPM.model]
#       [--vocab-size N] [--valid-fraction F] [--lattice PATH_TO_BINARY]
#
# Documents: for .jsonl, the "text" field of each line; for plain text,
# paragraphs (runs of non-blank lines, separated by blank lines). Newlines
# inside a document become spaces (SentencePiece encodes line by line).
# Without --model a SentencePiece BPE model is trained on the corpus
# (byte_fallback on, --vocab-size default 4096; the size is a soft limit, so
# small corpora give a smaller vocabulary). Documents are encoded to ids,
# split in order (the last --valid-fraction, default 0.05, goes to valid),
# and written with `lattice shard` with the end-of-sentence id (</s>) after
# each document. Outputs in DIR: train.ltok, valid.ltok (when the valid split
# is not empty), tokenizer.model (+ tokenizer.vocab), and it prints the token
# counts and the vocab size to configure the model with.
set -euo pipefail

die() { echo "prepare_data: error: $*" >&2; exit 2; }
usage() {
  sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

INPUT="" OUT="" MODEL="" VOCAB=4096 VALID=0.05
LATTICE="$(cd "$(dirname "$0")/.." && pwd)/build/lattice"
while [ $# -gt 0 ]; do
  case $1 in
    --input) INPUT=${2:-}; shift 2 ;;
    --out) OUT=${2:-}; shift 2 ;;
    --model) MODEL=${2:-}; shift 2 ;;
    --vocab-size) VOCAB=${2:-}; shift 2 ;;
    --valid-fraction) VALID=${2:-}; shift 2 ;;
    --lattice) LATTICE=${2:-}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "prepare_data: error: unknown argument '$1'" >&2; usage ;;
  esac
done

[ -n "$INPUT" ] && [ -n "$OUT" ] || usage
command -v python3 >/dev/null || die "python3 not found"
[ -f "$INPUT" ] || die "input '$INPUT' does not exist"
[ -s "$INPUT" ] || die "input '$INPUT' is empty"
[[ $VOCAB =~ ^[0-9]+$ ]] && [ "$VOCAB" -ge 300 ] || die "--vocab-size must be an integer >= 300 (byte fallback needs 259 ids)"
python3 -c "import sys; f=float(sys.argv[1]); sys.exit(0 if 0 <= f < 1 else 1)" "$VALID" 2>/dev/null ||
  die "--valid-fraction must be a number in [0, 1)"
for tool in spm_encode spm_export_vocab; do
  command -v $tool >/dev/null || die "'$tool' not found (install the Debian package 'sentencepiece')"
done
[ -n "$MODEL" ] || command -v spm_train >/dev/null ||
  die "'spm_train' not found (install the Debian package 'sentencepiece')"
[ -z "$MODEL" ] || [ -f "$MODEL" ] || die "tokenizer model '$MODEL' does not exist"
[ -x "$LATTICE" ] || die "lattice binary '$LATTICE' not found (build it with 'make', or pass --lattice)"
"$LATTICE" shard --help 2>/dev/null | grep -q 'lattice shard' ||
  die "'$LATTICE' has no 'shard' subcommand (rebuild lattice)"

mkdir -p "$OUT"
WORK=$(mktemp -d "$OUT/.prepare.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# 1. Documents, one per line.
python3 - "$INPUT" "$WORK/docs.txt" <<'PY' || exit 2
import json, re, sys
src, dst = sys.argv[1], sys.argv[2]
docs = []
with open(src, encoding='utf-8', errors='replace') as f:
    if src.endswith('.jsonl'):
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"prepare_data: error: {src}: line {n}: invalid JSON ({e.msg})")
            if not isinstance(obj, dict) or not isinstance(obj.get('text'), str):
                sys.exit(f"prepare_data: error: {src}: line {n}: no string \"text\" field")
            docs.append(obj['text'])
    else:
        docs = re.split(r'\n\s*\n', f.read())
docs = [' '.join(d.split()) for d in docs]
docs = [d for d in docs if d]
if not docs:
    sys.exit(f"prepare_data: error: {src}: no text found")
with open(dst, 'w', encoding='utf-8') as out:
    for d in docs:
        out.write(d + '\n')
print(f"prepare_data: {len(docs)} documents", file=sys.stderr)
PY

# 2. Tokenizer.
if [ -z "$MODEL" ]; then
  echo "prepare_data: training a SentencePiece BPE model (vocab size <= $VOCAB)" >&2
  if ! spm_train --input="$WORK/docs.txt" --model_prefix="$WORK/tokenizer" --vocab_size="$VOCAB" \
      --model_type=bpe --byte_fallback=true --character_coverage=0.9995 \
      --hard_vocab_limit=false --input_sentence_size=200000 --shuffle_input_sentence=true \
      --max_sentence_length=16384 --num_threads=2 --split_digits=true \
      >"$WORK/spm_train.log" 2>&1; then
    tail -n 5 "$WORK/spm_train.log" >&2
    die "spm_train failed (log above)"
  fi
  MODEL="$WORK/tokenizer.model"
fi
spm_export_vocab --model="$MODEL" --output="$WORK/vocab.tsv" 2>/dev/null ||
  die "cannot read tokenizer model '$MODEL'"
SPM_VOCAB=$(wc -l <"$WORK/vocab.tsv")
EOS=$(awk -F'\t' '$1 == "</s>" { print NR - 1; exit }' "$WORK/vocab.tsv")
EOT_ARGS=()
if [ -n "$EOS" ]; then EOT_ARGS=(--eot "$EOS"); else
  echo "prepare_data: warning: the model has no </s> piece; documents are not separated" >&2
fi

# 3. Encode and split by documents (the last fraction to valid).
spm_encode --model="$MODEL" --output_format=id <"$WORK/docs.txt" >"$WORK/ids.txt" ||
  die "spm_encode failed"
NDOCS=$(wc -l <"$WORK/ids.txt")
NVALID=$(python3 -c "import sys,math; n,f=int(sys.argv[1]),float(sys.argv[2]); v=math.floor(n*f); v=1 if f>0 and v==0 and n>1 else v; print(v)" "$NDOCS" "$VALID")
NTRAIN=$((NDOCS - NVALID))
[ "$NTRAIN" -ge 1 ] || die "not enough documents ($NDOCS) for a train split"
head -n "$NTRAIN" "$WORK/ids.txt" >"$WORK/train.ids"
tail -n "$NVALID" "$WORK/ids.txt" >"$WORK/valid.ids"

# 4. Shards.
count_of() { sed -n 's/^wrote \([0-9]*\) tokens.*/\1/p'; }
TRAIN_TOKENS=$("$LATTICE" shard --vocab-size "$SPM_VOCAB" "${EOT_ARGS[@]}" --input "$WORK/train.ids" \
  "$OUT/train.ltok" | count_of) || die "writing $OUT/train.ltok failed"
VALID_TOKENS=0
rm -f "$OUT/valid.ltok"
if [ "$NVALID" -gt 0 ]; then
  VALID_TOKENS=$("$LATTICE" shard --vocab-size "$SPM_VOCAB" "${EOT_ARGS[@]}" --input "$WORK/valid.ids" \
    "$OUT/valid.ltok" | count_of) || die "writing $OUT/valid.ltok failed"
fi
if [ "$MODEL" != "$OUT/tokenizer.model" ]; then cp "$MODEL" "$OUT/tokenizer.model"; fi
cp "$WORK/vocab.tsv" "$OUT/tokenizer.vocab"

echo "train: $OUT/train.ltok $TRAIN_TOKENS tokens ($NTRAIN documents)"
if [ "$NVALID" -gt 0 ]; then
  echo "valid: $OUT/valid.ltok $VALID_TOKENS tokens ($NVALID documents)"
else
  echo "valid: none (--valid-fraction 0 or a single document)"
fi
echo "tokenizer: $OUT/tokenizer.model"
echo "vocab_size: $SPM_VOCAB"
