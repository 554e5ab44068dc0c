#!/usr/bin/env bash
# test_window.sh BUILD_DIR - GPT-OSS's attention: sliding windows
# (model.window_size, model.window_attn_skip_freq, Megatron-Core's keys) and a
# head dimension of its own (model.kv_channels). Windowed layers
# alternating with full ones train the same model in one process and under
# TP 2 x PP 2 x DP 2 (Llama, with sequence parallelism and document resets)
# and TP 2 x PP 2 (GPT); the window changes the model, a window as long as
# the sequence does not; kv_channels under TP x PP equals one process and
# exports to Hugging Face's head_dim; bad values are refused. (Which keys a windowed
# query sees, its gradients and its FLOPs: tests/test_model.c.)
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" window
use_mpirun
text_shard "$T/text.ltok"
COMMON=(train.steps=6 optimizer.decay_steps=6 data.train_path=$T/text.ltok data.valid_path=
        logging.log_interval=1)
WIN=("model.window_size=[4, 0]" model.window_attn_skip_freq=2)
RESET=(data.eod_token=10 data.reset_position_ids=true data.reset_attention_mask=true)

run() { # name np config overrides...
  local name=$1 np=$2 cfg=$3 launch="$LT"
  shift 3
  [ "$np" -gt 1 ] && launch="$MPI -np $np $LT"
  $launch train "$cfg" "${COMMON[@]}" logging.metrics_file="$T/$name.jsonl" "$@" \
    >"$T/$name.log" 2>&1 </dev/null
}

if run llama1 1 configs/llama-tiny.yaml "${WIN[@]}" "${RESET[@]}" &&
   run llama8 8 configs/llama-tiny.yaml "${WIN[@]}" "${RESET[@]}" parallel.sequence_parallel=true \
     parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 &&
   close_losses "$T/llama1.jsonl" "$T/llama8.jsonl" 1-6 >/dev/null; then
  pass window_llama_resets_tp2_pp2_dp2_matches_one_process
else fail window_llama_resets_tp2_pp2_dp2_matches_one_process "$(grep -ih error "$T"/llama*.log | head -2)"; fi

if run gpt1 1 configs/tiny.yaml "${WIN[@]}" &&
   run gpt4 4 configs/tiny.yaml "${WIN[@]}" parallel.tensor_model_parallel_size=2 \
     parallel.pipeline_model_parallel_size=2 &&
   close_losses "$T/gpt1.jsonl" "$T/gpt4.jsonl" 1-6 >/dev/null; then
  pass window_gpt_tp2_pp2_matches_one_process
else fail window_gpt_tp2_pp2_matches_one_process "$(grep -ih error "$T"/gpt*.log | head -2)"; fi

# the window is used: a 4-token window is another model, a 31-token one (the
# whole 32-token sequence) is full attention
first_loss() { grep -o '"loss": [0-9.e+-]*' "$1" | sed -n 2p | cut -d' ' -f2; }
if run gpt_full 1 configs/tiny.yaml && run gpt_w31 1 configs/tiny.yaml "model.window_size=31" &&
   [ "$(first_loss "$T/gpt_full.jsonl")" = "$(first_loss "$T/gpt_w31.jsonl")" ] &&
   [ "$(first_loss "$T/gpt_full.jsonl")" != "$(first_loss "$T/gpt1.jsonl")" ]; then
  pass window_changes_the_model_only_when_shorter
else fail window_changes_the_model_only_when_shorter \
  "$(first_loss "$T/gpt_full.jsonl") $(first_loss "$T/gpt_w31.jsonl") $(first_loss "$T/gpt1.jsonl")"; fi

# model.kv_channels (a head dimension apart from hidden / heads: 4 x 12 = 48 > 32)
# under TP 2 (heads split) x PP 2 with SP; the Hugging Face export carries it
if run kvc1 1 configs/llama-tiny.yaml model.kv_channels=12 checkpoint.dir="$T/kvc1/ck" &&
   run kvc4 4 configs/llama-tiny.yaml model.kv_channels=12 parallel.sequence_parallel=true \
     parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 &&
   close_losses "$T/kvc1.jsonl" "$T/kvc4.jsonl" 1-6 >/dev/null; then
  pass kv_channels_tp2_pp2_matches_one_process
else fail kv_channels_tp2_pp2_matches_one_process "$(grep -ih error "$T"/kvc*.log | head -2)"; fi
printf '10 20 30 40 50 60 70 80 90 100 11 12' > "$T/prompt.ids"
if "$LT" shard --vocab-size 256 --input "$T/prompt.ids" "$T/prompt.ltok" >/dev/null &&
   "$LT" export "$T/kvc1/ck" "$T/kvc1/hf" >/dev/null 2>&1 &&
   grep -q '"head_dim": 12' "$T/kvc1/hf/config.json" &&
   "$LT" logits configs/llama-tiny.yaml model.kv_channels=12 data.train_path="$T/prompt.ltok" \
     checkpoint.load="$T/kvc1/ck" >"$T/kvc.logits" 2>/dev/null &&
   out=$(python3 tests/hf_reference.py "$T/kvc1/hf" "$T/kvc.logits" 1e-5 2>&1); then
  pass "kv_channels_export_matches_float64_reference ($out)"
else fail kv_channels_export_matches_float64_reference "${out:-export or logits failed}"; fi

refused() { # name "message" overrides...
  local name=$1 want=$2 out
  shift 2
  out=$("$LT" train configs/tiny.yaml "${COMMON[@]}" "$@" 2>&1)
  if [ $? -eq 2 ] && echo "$out" | grep -qF "$want"; then pass "refused_$name"
  else fail "refused_$name" "$(echo "$out" | tail -1)"; fi
}
refused right_side "the right side must be 0" "model.window_size=[4, 2]"
refused not_a_window "expected W or [W, 0]" "model.window_size=four"
refused freq_without_window "model.window_attn_skip_freq is set but model.window_size is not" \
  model.window_attn_skip_freq=2
refused freq_zero "expected an integer >= 1" model.window_size=4 model.window_attn_skip_freq=0
refused pattern_length "model.window_attn_skip_freq '[1,0,1]'" model.window_size=4 \
  "model.window_attn_skip_freq=[1,0,1]"
out=$("$LT" train configs/llama-tiny.yaml "${COMMON[@]}" model.kv_channels=7 2>&1)
if [ $? -eq 2 ] && echo "$out" | grep -qF "model.kv_channels (7) must be even"; then
  pass refused_odd_kv_channels
else fail refused_odd_kv_channels "$(echo "$out" | tail -1)"; fi
exit $((failures > 0))
