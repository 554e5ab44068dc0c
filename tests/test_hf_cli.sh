#!/usr/bin/env bash
# test_hf_cli.sh BUILD_DIR - lattice export / import on the command line: a tiny
# GPT's initial checkpoint exported and imported again trains exactly as a
# fresh run (the imported checkpoint is weights only: Adam starts from zero,
# as it does fresh), also under mpirun with tensor parallelism 2 (resharded
# from the tp = 1 import, vocabulary re-padded); bad input exits 2 naming
# the file. Llama training needs the Llama kernels, so only GPT trains here
# (test_hf.c covers Llama export/import).
set -u
BUILD=$1
. tests/lib.sh hf-cli

random_shard "$T/train.ltok" 20000 7 || { fail prepare "lattice shard failed"; exit 1; }
# vocabulary padded to a multiple of 96 x TP: 288 rows at tp 1, 384 at tp 2
# (so the tp 2 run re-pads the imported embedding)
BASE="configs/tiny.yaml data.train_path=$T/train.ltok train.steps=4 eval.interval=0 logging.log_interval=100
      model.make_vocab_size_divisible_by=96"

# the initial weights (step 0) as a checkpoint, exported, imported
if "$LT" train $BASE train.steps=0 checkpoint.dir="$T/init" >"$T/init.log" 2>&1 &&
  "$LT" export "$T/init" "$T/hf" >"$T/export.log" 2>&1 &&
  "$LT" import "$T/hf" "$T/imported" data.train_path="$T/train.ltok" \
    model.make_vocab_size_divisible_by=96 >"$T/import.log" 2>&1; then
  pass import_cli
else
  fail import_cli "$(tail -3 "$T"/*.log)"
  exit 1
fi
grep -q 'train_path: "'"$T"'/train.ltok"' "$T"/imported/step_00000000/config.yaml &&
  grep -q '"padded_vocab_size": 288,' "$T"/imported/step_00000000/meta.json &&
  grep -q '"optimizer_state": false' "$T"/imported/step_00000000/meta.json &&
  grep -q '"step": 0,' "$T"/imported/step_00000000/meta.json &&
  pass import_config_and_meta || fail import_config_and_meta "config.yaml lacks the override or meta.json is not step 0 weights-only"
"$LT" export "$T/imported" "$T/hf2" >/dev/null 2>&1 &&
  cmp -s "$T/hf/model.safetensors" "$T/hf2/model.safetensors" && cmp -s "$T/hf/config.json" "$T/hf2/config.json" &&
  pass export_import_export_identical || fail export_import_export_identical "files differ"

losses() { # metrics file -> "loss grad_norm" per step
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r['step'], repr(r['loss']), repr(r['grad_norm']))" "$1"
}

# fresh vs from the import: the same init and a fresh optimizer -> bit-identical
"$LT" train $BASE logging.metrics_file="$T/fresh.jsonl" >"$T/fresh.log" 2>&1 || fail fresh "$(tail -3 "$T/fresh.log")"
if "$LT" train $BASE checkpoint.load="$T/imported" logging.metrics_file="$T/resumed.jsonl" >"$T/resumed.log" 2>&1; then
  grep -q "holds weights only: Adam starts from zero moments at step 0" "$T/resumed.log" &&
    [ "$(losses "$T/fresh.jsonl")" = "$(losses "$T/resumed.jsonl")" ] && [ -n "$(losses "$T/fresh.jsonl")" ] &&
    pass train_from_import_equals_fresh ||
    fail train_from_import_equals_fresh "losses differ: $(losses "$T/fresh.jsonl" | tr '\n' ' ') vs $(losses "$T/resumed.jsonl" | tr '\n' ' ')"
else
  fail train_from_import_equals_fresh "$(tail -3 "$T/resumed.log")"
fi

# two ranks, tensor parallelism 2, from the tp = 1 import
if command -v mpirun >/dev/null; then
  if timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "$LT" train $BASE \
    parallel.tensor_model_parallel_size=2 checkpoint.load="$T/imported" \
    logging.metrics_file="$T/tp2.jsonl" >"$T/tp2.log" 2>&1; then
    grep -q "checkpoint vocabulary padded to 288 rows, this layout pads to 384" "$T/tp2.log" &&
      python3 - "$T/fresh.jsonl" "$T/tp2.jsonl" <<'PY' && pass train_tp2_from_import || fail train_tp2_from_import "$(tail -3 "$T/tp2.log")"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 4, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        rel = abs(x[k] - y[k]) / max(abs(x[k]), 1e-12)
        assert rel <= 1e-5, f"step {x['step']} {k}: {x[k]} vs {y[k]}"
PY
  else
    fail train_tp2_from_import "$(tail -3 "$T/tp2.log")"
  fi
else
  fail train_tp2_from_import "mpirun not found (openmpi-bin)"
fi

# bad input: exit 2 with the file named
expect2 import_usage "import needs HF_DIR" import "$T/hf"
expect2 import_no_dir "$T/nowhere/config.json" import "$T/nowhere" "$T/out1"
mkdir -p "$T/broken" && cp "$T/hf/config.json" "$T/broken/" && head -c 20 "$T/hf/model.safetensors" >"$T/broken/model.safetensors"
expect2 import_truncated "$T/broken/model.safetensors: header length" import "$T/broken" "$T/out2"
expect2 import_not_empty "is not empty" import "$T/hf" "$T/imported"
expect2 import_bad_override "model.hidden_size comes from" import "$T/hf" "$T/out3" model.hidden_size=64
[ ! -e "$T/out1/latest" ] && [ ! -e "$T/out2/latest" ] && [ ! -e "$T/out3/latest" ] &&
  pass import_refusals_write_nothing || fail import_refusals_write_nothing "a refused import left a checkpoint"
"$LT" --help | grep -q "lattice import HF_DIR OUT_CHECKPOINT_DIR" && pass usage_lists_import ||
  fail usage_lists_import "--help does not list import"
exit $((failures > 0))
