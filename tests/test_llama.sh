#!/usr/bin/env bash
# test_llama.sh BUILD_DIR - the Llama block (configs/llama-tiny.yaml: RMSNorm,
# SwiGLU, RoPE with Llama 3.1 scaling, 4 query heads over 2 key/value heads,
# untied LM head; and YaRN) in every parallel layout: trained 10 steps under mpirun on
# the CPU backend it must match one process (loss and grad norm per step,
# exported weights), a checkpoint moves between layouts, bf16 stays within
# bf16 tolerance, it learns, its exported logits match an independent float64
# forward pass (and an untied GPT-2's), Llama 3's 128k vocabulary trains
# vocab-parallel, and bad Llama settings are refused.
set -u
BUILD=$1
. tests/lib.sh llama
use_mpirun

text_shard "$T/train.ltok" || { fail prepare "lattice shard failed"; exit 1; }
# 4 layers so pp 2 x vpp 2 has a layer per chunk; micro batches of 2 (4 per
# step in one process); optimizer.eps=1e-6 as in test_parallel.sh (gradients
# that are rounding noise must not become updates that differ by layout)
BASE="configs/llama-tiny.yaml model.num_layers=4 data.train_path=$T/train.ltok train.steps=10
      train.micro_batch_size=2 logging.log_interval=100 eval.interval=0 optimizer.eps=1e-6"

run() { # name np overrides...
  local name=$1 np=$2; shift 2
  local out="$T/$name" launch="$LT"
  mkdir -p "$out"
  [ "$np" -gt 1 ] && launch="$MPI -np $np $LT"
  $launch train $BASE checkpoint.dir=$out/ck logging.metrics_file=$out/m.jsonl "$@" \
    >"$out/log" 2>&1 || { echo "  run $name failed: $(tail -3 "$out/log")"; return 1; }
  "$LT" export "$out/ck" "$out/hf" >"$out/export.log" 2>&1 ||
    { echo "  export of $name failed: $(tail -2 "$out/export.log")"; return 1; }
}
layout() { # name np tolerance overrides...
  local name=$1 np=$2 tol=$3 err=""; shift 3
  if run "$name" "$np" "$@" && err=$(python3 tests/compare_runs.py "$T/ref" "$T/$name" "$tol" "$tol" 2>&1)
  then pass "${name}_matches_single_process"
  else fail "${name}_matches_single_process" "$(echo "$err" | tail -1)"; fi
}

# ---- fp32 layouts against one process -------------------------------------------
run ref 1 || fail reference "single-process run failed"
TP2="parallel.tensor_model_parallel_size=2"
layout tp2_groups_split 2 1e-5 $TP2
layout tp2_sp 2 1e-5 $TP2 parallel.sequence_parallel=true
layout pp2_vpp2 2 1e-5 parallel.pipeline_model_parallel_size=2 \
  parallel.virtual_pipeline_model_parallel_size=2
layout dp2_zero1 2 1e-5 optimizer.zero_stage=1
layout dp2_zero2 2 1e-5 optimizer.zero_stage=2
layout tp2_pp2_dp2_sp_zero1 8 1e-5 $TP2 parallel.pipeline_model_parallel_size=2 \
  parallel.sequence_parallel=true optimizer.zero_stage=1 train.micro_batch_size=1
layout tp2_sp_recompute_full 2 1e-5 $TP2 parallel.sequence_parallel=true train.recompute=full
layout tp2_recompute_selective 2 1e-5 $TP2 train.recompute=selective

# ---- a checkpoint written in one layout resumes in another (steps 6-10) --------------
out="$T/reshard"
mkdir -p "$out"
if $MPI -np 4 "$LT" train $BASE train.steps=5 optimizer.decay_steps=10 checkpoint.dir=$out/ckA \
     $TP2 parallel.pipeline_model_parallel_size=2 >"$out/a.log" 2>&1 &&
   "$LT" train $BASE checkpoint.load=$out/ckA checkpoint.dir=$out/ckB \
     logging.metrics_file=$out/b.jsonl >"$out/b.log" 2>&1 &&
   python3 tests/compare_runs.py --resumed "$T/ref/m.jsonl" "$out/b.jsonl" 6 10 1e-5
then pass checkpoint_tp2_pp2_resumes_single_process
else fail checkpoint_tp2_pp2_resumes_single_process "$(tail -2 "$out/b.log")"; fi

# ---- bf16 within bf16 tolerance ----------------------------------------------------
err=""
run ref_bf16 1 train.precision=bf16 || fail reference_bf16 "single-process bf16 run failed"
if run tp2_dp2_bf16 4 train.precision=bf16 $TP2 optimizer.zero_stage=1 &&
   err=$(python3 tests/compare_runs.py "$T/ref_bf16" "$T/tp2_dp2_bf16" 2e-2 5e-2 2>&1)
then pass tp2_dp2_zero1_bf16_matches
else fail tp2_dp2_zero1_bf16_matches "$(echo "$err" | tail -1)"; fi

# ---- it learns: 60 steps on text bring the loss well below ln(256) = 5.55 -----------
"$LT" train $BASE train.steps=60 optimizer.lr=1e-2 logging.metrics_file=$T/learn.jsonl \
  >"$T/learn.log" 2>&1
if python3 - "$T/learn.jsonl" <<'PY'
import json, sys
r = [x for x in map(json.loads, open(sys.argv[1])) if not x.get('eval')]
assert abs(r[0]['loss'] - 5.545) < 0.1, ('initial loss', r[0]['loss'])
assert r[-1]['loss'] < 3.5, ('loss after 60 steps', r[-1]['loss'])
PY
then pass llama_learns
else fail llama_learns "$(tail -2 "$T/learn.log")"; fi

# ---- the exported model against an independent float64 forward pass -------------------
# (tests/hf_reference.py: plain Python from the architectures' definitions) on the
# trained checkpoint of `ref`, every position's logits within 1e-5; GPT-2 too
# (the prompt: random tokens, so every position differs; the text starts with spaces)
random_shard "$T/prompt.ltok" 200 11 || fail prepare "random prompt shard failed"
if "$LT" logits $BASE data.train_path=$T/prompt.ltok checkpoint.load=$T/ref/ck \
     >"$T/ref.logits" 2>"$T/ref.logits.err" &&
   out=$(python3 tests/hf_reference.py "$T/ref/hf" "$T/ref.logits" 1e-5 2>&1)
then pass "llama_logits_match_float64_reference ($out)"
else fail llama_logits_match_float64_reference "$(tail -1 "$T/ref.logits.err"; echo "${out:-}" | tail -1)"; fi
GPT="configs/tiny.yaml data.train_path=$T/train.ltok train.steps=5 logging.log_interval=100
     eval.interval=0 model.untie_embeddings_and_output_weights=true"
if "$LT" train $GPT checkpoint.dir=$T/gpt/ck >"$T/gpt.log" 2>&1 &&
   "$LT" export "$T/gpt/ck" "$T/gpt/hf" >/dev/null 2>&1 &&
   "$LT" logits $GPT data.train_path=$T/prompt.ltok checkpoint.load=$T/gpt/ck >"$T/gpt.logits" \
     2>/dev/null &&
   out=$(python3 tests/hf_reference.py "$T/gpt/hf" "$T/gpt.logits" 1e-5 2>&1)
then pass "gpt2_untied_logits_match_float64_reference ($out)"
else fail gpt2_untied_logits_match_float64_reference "$(tail -1 "$T/gpt.log"; echo "${out:-}" | tail -1)"; fi

# ---- Llama 3's vocabulary: 128256 ids in 32-bit token files, vocab-parallel over TP 2 --------
python3 -c "
import random
random.seed(7)
print(' '.join(str(random.randrange(128256)) for _ in range(20000)))" > "$T/ids128k"
V128="model.vocab_size=128256 data.train_path=$T/train128k.ltok train.steps=3"
if "$LT" shard --vocab-size 128256 --input "$T/ids128k" "$T/train128k.ltok" >/dev/null &&
   "$LT" train $BASE $V128 logging.metrics_file=$T/v1.jsonl >"$T/v1.log" 2>&1 &&
   $MPI -np 2 "$LT" train $BASE $V128 $TP2 logging.metrics_file=$T/v2.jsonl >"$T/v2.log" 2>&1 &&
   python3 - "$T/v1.jsonl" "$T/v2.jsonl" <<'PY'
import json, math, sys
a, b = ([r for r in map(json.loads, open(p)) if not r.get('eval')] for p in sys.argv[1:3])
assert len(a) == len(b) == 3, (len(a), len(b))
assert abs(a[0]['loss'] - math.log(128256)) < 0.05, ('initial loss vs ln V', a[0]['loss'])
for x, y in zip(a, b):
    for k in ('loss', 'grad_norm'):
        assert abs(x[k] - y[k]) <= 1e-5 * abs(x[k]), (x['step'], k, x[k], y[k])
PY
then pass vocab_128k_int32_tokens_tp2_matches
else fail vocab_128k_int32_tokens_tp2_matches "$(tail -2 "$T/v2.log")"; fi

# ---- YaRN (gpt-oss's rope: untruncated, factor 4 over an original 16 positions) -------
# its logits scale by the attention factor squared and its slow pairs turn slower, so
# its losses leave the reference's (bitwise the same run otherwise); the export
# carries the parameters
YARN=(model.rope_scaling=yarn model.rope_scaling_factor=4 model.rope_original_max_position=16
      model.rope_truncate=false)
if run yarn 1 "${YARN[@]}" &&
   python3 - "$T/ref/m.jsonl" "$T/yarn/m.jsonl" "$T/yarn/hf/config.json" <<'PY'
import json, sys
last = lambda p: [json.loads(l) for l in open(p) if '"loss"' in l][-1]["loss"]
a, b, rs = last(sys.argv[1]), last(sys.argv[2]), json.load(open(sys.argv[3]))["rope_scaling"]
assert abs(a - b) > 1e-6 * a, f"yarn loss {b} equals the reference's {a}"
want = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32.0,
        "beta_slow": 1.0, "truncate": False}
assert all(rs.get(k) == v for k, v in want.items()), f"rope_scaling {rs}"
assert abs(rs["attention_factor"] - 1.1386294361119891) < 1e-12, rs
PY
then pass yarn_trains_and_exports
else fail yarn_trains_and_exports "see $T/yarn"; fi

# ---- refusals ----------------------------------------------------------------------
refused() { # name pattern np overrides...
  local name=$1 pat=$2 np=$3 rc n; shift 3
  if [ "$np" -gt 1 ]; then $MPI -np "$np" "$LT" train $BASE "$@" >"$T/$name.log" 2>&1
  else "$LT" train $BASE "$@" >"$T/$name.log" 2>&1; fi
  rc=$?
  n=$(grep -c -- "$pat" "$T/$name.log")
  if [ $rc -eq 2 ] && [ "$n" -eq 1 ]; then pass "refused_$name"
  else fail "refused_$name" "rc=$rc, $n messages: $(tail -2 "$T/$name.log")"; fi
}
refused groups_not_dividing_heads "num_query_groups (3) must divide" 1 model.num_query_groups=3
refused groups_vs_tp "num_query_groups (2) must be divisible by parallel.tensor_model_parallel_size (4)" \
  4 parallel.tensor_model_parallel_size=4
refused odd_head_dim "head dimension .* must be even" 1 model.hidden_size=20
refused llama_without_ffn "needs model.ffn_hidden_size" 1 model.ffn_hidden_size=0
refused_on_gpt() { # name key=value: a Llama key in a GPT config is refused, naming the key
  local rc
  "$LT" train configs/tiny.yaml data.train_path=$T/train.ltok "$2" >"$T/gpt_$1.log" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -q "${2%%=*} is a setting of the Llama block" "$T/gpt_$1.log"
  then pass "refused_$1_on_gpt"
  else fail "refused_$1_on_gpt" "rc=$rc: $(tail -1 "$T/gpt_$1.log")"; fi
}
refused_on_gpt llama_key model.num_query_groups=2
refused_on_gpt yarn_key model.rope_beta_fast=16

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
