#!/usr/bin/env bash
# test_qk_norm.sh BUILD_DIR - model.qk_layernorm (per-head RMSNorm of the
# queries and keys before RoPE, Megatron-Core's qk_layernorm) on the tiny
# Llama with a head dimension of its own (kv_channels 12, 4 query heads over 2
# key/value heads): TP 2 (each rank normalises its own heads: the norm weights'
# gradients are summed over TP), TP 2 with SP and full recomputation, PP 2, DP 2
# with ZeRO-1 train the same model as one process (loss and grad norm per step
# within 1e-5, the checkpoint's weights, q_norm and k_norm included, within
# 1e-5); the key changes the model; a checkpoint trained on one layout resumes on
# another; a GPT config carrying it is refused; a dense model with it exports
# as Qwen3ForCausalLM and an MoE one as Qwen3MoeForCausalLM (a dense layer,
# either router form), each reproduced by an independent float64 forward of the
# exported files and imported back to the same files; configs/qwen3-30b-a3b.yaml's
# layout fits by the planner and trains scaled down. (The op against a float64
# reference: test_ops_cpu; the model's gradients by finite differences:
# test_model; the CUDA kernels: test_cuda_emu / test_gpu_ops.)
set -u
BUILD=$1
. tests/lib.sh qknorm
use_mpirun
text_shard "$T/train.ltok" || { fail prepare "lattice shard failed"; exit 1; }

QK="model.qk_layernorm=true model.kv_channels=12"
BASE="data.train_path=$T/train.ltok data.valid_path= train.steps=8 logging.log_interval=4
      eval.interval=0 optimizer.eps=1e-6"

run() { train_run "$1" "$2" configs/llama-tiny.yaml $BASE "${@:3}"; } # name np overrides...
same() { same_as ref "$@"; } # name np overrides... : the run matches ref

run ref 1 $QK || fail reference "single-process run failed"
# the checkpoint holds the norm weights, trained away from their init (ones)
if python3 - "$T/ref" <<'PY'
import sys
sys.path.insert(0, "tests")
from compare_runs import checkpoint_tensors
t = checkpoint_tensors(sys.argv[1])
names = [f"param/h.{l}.attn.{w}_norm.weight" for l in range(2) for w in "qk"]
assert all(n in t and len(t[n]) == 12 for n in names), sorted(t)
assert all(max(abs(v - 1) for v in t[n]) > 1e-4 for n in names), "norm weights untrained"
PY
then pass checkpoint_holds_trained_q_and_k_norm_weights
else fail checkpoint_holds_trained_q_and_k_norm_weights "see the assertion above"; fi

TP=parallel.tensor_model_parallel_size=2
same tp2 2 $QK $TP
same tp2_sp_recompute_full 2 $QK $TP parallel.sequence_parallel=true train.recompute=full
same pp2 2 $QK parallel.pipeline_model_parallel_size=2
same dp2_zero1 2 $QK optimizer.zero_stage=1

# the key changes the model: the same init (the other weights' values do not
# depend on it) gives another first loss
first_loss() { python3 -c "
import json, sys
print([r['loss'] for r in map(json.loads, open(sys.argv[1])) if 'loss' in r][0])" "$1"; }
if run off 1 && a=$(first_loss "$T/off/m.jsonl") && b=$(first_loss "$T/ref/m.jsonl") &&
   python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) <= 1e-4 * a)" "$a" "$b"
then pass "qk_layernorm_changes_the_loss ($a off, $b on)"
else fail qk_layernorm_changes_the_loss "off ${a:-?} vs on ${b:-?}"; fi

# an MoE model with the norms and a dense layer (Qwen3-MoE's layout, below)
QMOE="model.num_experts=4 model.moe_ffn_hidden_size=32 model.moe_router_topk=2 model.num_layers=3
      model.moe_layer_freq=[1,0,1] model.moe_aux_loss_coeff=0.01"
run moe 1 $QK $QMOE train.steps=4 >/dev/null
run moe_pre 1 $QK $QMOE model.moe_router_pre_softmax=true train.steps=4 >/dev/null

# a checkpoint written by TP 2 resumes under PP 2 where the single process goes on
resumes_as ref tp2_checkpoint_resumes_on_pp2 2 "$QK $TP" 2 "$QK parallel.pipeline_model_parallel_size=2"

# the Hugging Face export: Qwen3ForCausalLM (Llama with q_norm / k_norm), whose logits an
# independent float64 forward reproduces from the exported files alone
if out=$(hf_export_matches "$T/ref/ck" "$T/ref/hf_out" '"architectures": ["Qwen3ForCausalLM"]' \
           configs/llama-tiny.yaml $QK); then
  pass "export_as_qwen3_matches_float64_reference ($out)"
else fail export_as_qwen3_matches_float64_reference "$out"; fi

# and back: the Qwen3 directory imports as a qk_layernorm Llama whose export is the same files
if out=$(hf_round_trip "$T/ref/hf_out" "qk_layernorm: true")
then pass qwen3_import_export_identical
else fail qwen3_import_export_identical "$out"; fi

# an MoE model with them exports as Qwen3MoeForCausalLM: experts under mlp.experts.E.*_proj,
# the router as mlp.gate, the dense layer listed in mlp_only_layers; renormalised top-k
# (norm_topk_prob) or, with moe_router_pre_softmax, the probabilities as they are
for name in moe moe_pre; do
  norm=true pre=false
  [ $name = moe_pre ] && norm=false pre=true
  if out=$(hf_export_matches "$T/$name/ck" "$T/$name/hf" '"architectures": ["Qwen3MoeForCausalLM"]' \
             configs/llama-tiny.yaml $QK $QMOE model.moe_router_pre_softmax=$pre) &&
     grep -q '"mlp_only_layers": \[1\]' "$T/$name/hf/config.json" &&
     grep -q "\"norm_topk_prob\": $norm" "$T/$name/hf/config.json"; then
    pass "${name}_export_as_qwen3_moe_matches_float64_reference ($out)"
  else fail "${name}_export_as_qwen3_moe_matches_float64_reference" "${out:-config.json: $(tr -d '\n' <"$T/$name/hf/config.json" | head -c 300)}"; fi
  rm -rf "$T/imported" "$T/hf2"
  if out=$(hf_round_trip "$T/$name/hf" "moe_layer_freq: \"[1,0,1]\"")
  then pass "${name}_qwen3_moe_import_export_identical"
  else fail "${name}_qwen3_moe_import_export_identical" "$out"; fi
done
# import refuses what lattice's router cannot give: top-1 renormalised (weight 1)
mkdir -p "$T/top1" && cp "$T/moe/hf/model.safetensors" "$T/top1/" &&
  sed 's/"num_experts_per_tok": 2/"num_experts_per_tok": 1/' "$T/moe/hf/config.json" >"$T/top1/config.json"
expect2 refused_qwen3_moe_top1_renormalised "'num_experts_per_tok' is 1; Qwen3-MoE with norm_topk_prob" \
  import "$T/top1" "$T/top1_ck"
mkdir -p "$T/badlist" && cp "$T/moe/hf/model.safetensors" "$T/badlist/" &&
  sed 's/"mlp_only_layers": \[1\]/"mlp_only_layers": [-1]/' "$T/moe/hf/config.json" >"$T/badlist/config.json"
expect2 refused_qwen3_moe_bad_layer_list "'mlp_only_layers[0]' must be a layer number" \
  import "$T/badlist" "$T/badlist_ck"
run moe_shared 1 $QK $QMOE model.moe_shared_expert_intermediate_size=16 train.steps=2 >/dev/null
expect2 refused_shared_expert_export "model.moe_shared_expert_intermediate_size=16; Qwen3-MoE has no shared" \
  export "$T/moe_shared/ck" "$T/moe_shared/hf"

expect2 refused_gpt "model.qk_layernorm" train configs/tiny.yaml model.qk_layernorm=true \
  data.train_path="$T/train.ltok"

# configs/qwen3-30b-a3b.yaml: its layout (TP 2 + SP, PP 2 x 4 virtual stages,
# DP 4, EP 8 over TP x DP: 16 ranks) is one the planner places under 90% of an
# H100's 80 GiB, and the config's structure scaled down trains on it
plan_fits qwen3_30b_a3b configs/qwen3-30b-a3b.yaml 16 2
SMALL="model.num_layers=8 model.hidden_size=64 model.num_attention_heads=8 model.kv_channels=16
       model.ffn_hidden_size=128 model.num_experts=16 model.moe_ffn_hidden_size=32
       model.moe_router_topk=4 model.vocab_size=256 model.seq_length=32
       model.max_position_embeddings=64 train.global_batch_size=16 train.steps=2
       optimizer.warmup_steps=1 train.device=cpu train.precision=fp32"
if train_run q3 16 configs/qwen3-30b-a3b.yaml $SMALL data.train_path="$T/train.ltok" &&
   grep -q "^done: 2 steps" "$T/q3/log" && grep -q "^moe  *8 layers" "$T/q3/log"
then pass qwen3_30b_a3b_layout_trains_scaled_down
else fail qwen3_30b_a3b_layout_trains_scaled_down "$(tail -2 "$T/q3/log")"; fi
exit $((failures > 0))
