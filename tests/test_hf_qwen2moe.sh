#!/usr/bin/env bash
# test_hf_qwen2moe.sh BUILD_DIR - MoE models with a gated shared expert
# (model.moe_shared_expert_gate) and Hugging Face's Qwen2MoeForCausalLM: the tiny
# Llama with 4 experts top 2, a shared expert behind its sigmoid gate and dense
# layers among the MoE ones, trained a few steps, exports as Qwen2-MoE - with
# q/k/v biases and the top k renormalised (norm_topk_prob), and without the
# biases (qkv_bias false) with the probabilities as they are
# (moe_router_pre_softmax) - whose logits an independent float64 forward of the
# files (tests/hf_reference.py, Qwen2-MoE as transformers defines it) reproduces
# within 1e-5, and imports back to the same files (also from decoder_sparse_step
# in place of mlp_only_layers); a shared expert without the gate (or with q/k
# norms) and what else Qwen2-MoE does not compute are refused by the export,
# naming the key, and Qwen2-MoE files lattice cannot compute by the import;
# configs/qwen1.5-moe-a2.7b.yaml's layout fits by the planner and trains scaled down.
# (transformers itself: make hf-check; the gate's op against a float64
# reference: test_ops_cpu_moe; its gradient by finite differences: test_model.)
set -u
BUILD=$1
. tests/lib.sh hf-qwen2moe
random_shard "$T/train.ltok" 20000 7 || { fail prepare "lattice shard failed"; exit 1; }

SHARED="model.num_experts=4 model.moe_ffn_hidden_size=32 model.moe_router_topk=2
        model.moe_shared_expert_intermediate_size=16 model.moe_aux_loss_coeff=0.01"
GATE="$SHARED model.moe_shared_expert_gate=true"
# a: q/k/v biases, renormalised top k, a dense layer between two MoE layers;
# b: no biases, the probabilities as they are, the odd layers MoE
A="$GATE model.add_qkv_bias=true model.num_layers=3 model.moe_layer_freq=[1,0,1]"
B="$GATE model.moe_router_pre_softmax=true model.num_layers=4 model.moe_layer_freq=[0,1,0,1]"
# (a learning rate 10x llama-tiny's moves the gates far enough from their init that a
# gate exported from another tensor moves the logits 1e-3 or more, 100x the tolerance)
BASE="data.train_path=$T/train.ltok data.valid_path= eval.interval=0 logging.log_interval=100
      optimizer.lr=3e-2 optimizer.warmup_steps=0"
run() { train_run "$1" 1 configs/llama-tiny.yaml $BASE "${@:2}"; } # name overrides...

# ---- export: config.json and the float64 reference; import: the same files ----------
for name in a b; do
  keys=$A; [ $name = b ] && keys=$B
  run $name $keys train.steps=4 || { fail "${name}_train" "see above"; continue; }
  if out=$(hf_export_matches "$T/$name/ck" "$T/$name/hf" '"architectures": ["Qwen2MoeForCausalLM"]' \
             configs/llama-tiny.yaml $keys) &&
     python3 - "$T/$name/hf/config.json" $name <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 16,
        "intermediate_size": 64, "decoder_sparse_step": 1, "use_sliding_window": False,
        "router_aux_loss_coef": 0.01, "output_router_logits": True}
want.update({"qkv_bias": True, "norm_topk_prob": True, "mlp_only_layers": [1]} if sys.argv[2] == "a" else
            {"qkv_bias": False, "norm_topk_prob": False, "mlp_only_layers": [0, 2]})
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
assert not bad and "attention_bias" not in c, (bad, c)
PY
  then pass "${name}_export_as_qwen2_moe_matches_float64_reference ($out)"
  else fail "${name}_export_as_qwen2_moe_matches_float64_reference" "${out:-config.json: $(tr -d '\n' <"$T/$name/hf/config.json" | head -c 400)}"; fi
  rm -rf "$T/imported" "$T/hf2"
  if out=$(hf_round_trip "$T/$name/hf" "moe_shared_expert_gate: true") &&
     grep -q "moe_shared_expert_intermediate_size: 16" "$T/imported/step_00000000/config.yaml"
  then pass "${name}_qwen2_moe_import_export_identical"
  else fail "${name}_qwen2_moe_import_export_identical" "${out:-no moe_shared_expert_intermediate_size: 16}"; fi
done

# qwen2_variant NAME FROM PYTHON: a copy of $T/FROM/hf with config.json edited by the
# statement PYTHON on its dict c
qwen2_variant() {
  mkdir -p "$T/v_$1" && ln -s "$T/$2/hf/model.safetensors" "$T/v_$1/model.safetensors" &&
    python3 - "$T/$2/hf/config.json" "$T/v_$1/config.json" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
}
# the layers as decoder_sparse_step says them (every second one MoE), not listed; and
# qkv_bias absent (Qwen2MoeConfig's default: true)
qwen2_variant step b 'c["decoder_sparse_step"] = 2; c["mlp_only_layers"] = []'
qwen2_variant nokey a 'del c["qkv_bias"]'
if "$LT" import "$T/v_step" "$T/o_step" >/dev/null 2>&1 &&
   grep -qF 'moe_layer_freq: "[0,1,0,1]"' "$T/o_step/step_00000000/config.yaml" &&
   "$LT" export "$T/o_step" "$T/hf_step" >/dev/null 2>&1 &&
   cmp -s "$T/b/hf/model.safetensors" "$T/hf_step/model.safetensors" &&
   "$LT" import "$T/v_nokey" "$T/o_nokey" >/dev/null 2>&1 &&
   grep -q "add_qkv_bias: true" "$T/o_nokey/step_00000000/config.yaml"
then pass import_decoder_sparse_step_and_default_qkv_bias
else fail import_decoder_sparse_step_and_default_qkv_bias "$(grep -E 'moe_layer_freq|add_qkv_bias' "$T"/o_*/step_00000000/config.yaml 2>&1)"; fi

# ---- export refusals: a shared expert Qwen2-MoE does not compute, and the rest ----------
M="configs/llama-tiny.yaml $SHARED"
export_refused MixtralForCausalLM shared_expert_without_gate \
  "model.moe_shared_expert_intermediate_size=16; Mixtral has no shared expert" $M
export_refused Qwen3MoeForCausalLM gated_shared_expert_with_qk_norm \
  "model.moe_shared_expert_intermediate_size=16; Qwen3-MoE has no shared expert" $M \
  model.moe_shared_expert_gate=true model.qk_layernorm=true
export_refused Qwen2MoeForCausalLM linear_biases "model.add_bias_linear=true" $M \
  model.moe_shared_expert_gate=true model.add_bias_linear=true
export_refused Qwen2MoeForCausalLM sigmoid "model.moe_router_score_function=sigmoid" $M \
  model.moe_shared_expert_gate=true model.moe_router_score_function=sigmoid

# ---- import refusals: Qwen2-MoE files lattice does not compute ---------------------------
qwen2_variant window a 'c["use_sliding_window"] = True'
expect2 import_refuses_sliding_window "'use_sliding_window' is true" import "$T/v_window" "$T/o1"
qwen2_variant layer_types a 'c["layer_types"] = ["full_attention", "sliding_attention", "full_attention"]'
expect2 import_refuses_sliding_layer_type "'layer_types[1]' is not \"full_attention\"" import \
  "$T/v_layer_types" "$T/o2"
qwen2_variant no_shared a 'c["shared_expert_intermediate_size"] = 0'
expect2 import_refuses_no_shared_expert "'shared_expert_intermediate_size' is 0" import "$T/v_no_shared" "$T/o3"
qwen2_variant narrow a 'c["shared_expert_intermediate_size"] = 8'
expect2 import_refuses_shared_expert_shape \
  "tensor 'model.layers.0.mlp.shared_expert.gate_proj.weight' has shape (16, 32); config.json implies (8, 32)" \
  import "$T/v_narrow" "$T/o4"
qwen2_variant top1 a 'c["num_experts_per_tok"] = 1'
expect2 import_refuses_top1_renormalised "'num_experts_per_tok' is 1; Qwen2-MoE with norm_topk_prob" \
  import "$T/v_top1" "$T/o5"
expect2 import_refuses_gate_override "model.moe_shared_expert_gate comes from" import "$T/a/hf" "$T/o6" \
  model.moe_shared_expert_gate=false
[ ! -e "$T/o1/latest" ] && [ ! -e "$T/o2/latest" ] && [ ! -e "$T/o3/latest" ] && [ ! -e "$T/o4/latest" ] &&
  [ ! -e "$T/o5/latest" ] && [ ! -e "$T/o6/latest" ] && pass import_refusals_write_nothing ||
  fail import_refusals_write_nothing "a refused import left a checkpoint"

# configs/qwen1.5-moe-a2.7b.yaml: its layout (DP 8 with EP 4 x ETP 2 folded into it)
# is one the planner places under 90% of an H100's 80 GiB, and the config's
# structure scaled down (its gated shared expert, biases and router kept) trains on it
use_mpirun
plan_fits qwen1_5_moe_a2_7b configs/qwen1.5-moe-a2.7b.yaml 8 1
SMALL="model.num_layers=4 model.hidden_size=64 model.num_attention_heads=4 model.num_query_groups=4
       model.ffn_hidden_size=128 model.num_experts=8 model.moe_ffn_hidden_size=32
       model.moe_shared_expert_intermediate_size=64 model.vocab_size=256 model.seq_length=32
       model.max_position_embeddings=64 train.global_batch_size=8 train.steps=2
       optimizer.warmup_steps=1 train.device=cpu train.precision=fp32"
if train_run q15 8 configs/qwen1.5-moe-a2.7b.yaml $SMALL data.train_path="$T/train.ltok" &&
   grep -q "^done: 2 steps" "$T/q15/log" && grep -q "^moe  *4 layers" "$T/q15/log"
then pass qwen1_5_moe_a2_7b_layout_trains_scaled_down
else fail qwen1_5_moe_a2_7b_layout_trains_scaled_down "$(tail -2 "$T/q15/log")"; fi
exit $((failures > 0))
