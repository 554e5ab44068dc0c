#!/usr/bin/env bash
# test_hf_gptoss.sh BUILD_DIR - gpt-oss models and Hugging Face's GptOssForCausalLM:
# a tiny Llama with gpt-oss's features (4 experts top 2 in every layer, biases on
# every linear, learned attention sinks, quick GeGLU with offset 1 and a clamp,
# windows on the even layers, YaRN) trained a few steps and exported: config.json
# names gpt-oss with its keys and the tensors its layout stacks (experts as
# (E, in, out) with gate and up interleaved); imported again it has the same keys,
# gives the same logits bit for bit and exports to identical files; its initial
# weights through gpt-oss train as a fresh run; an off-by-one, bias-free model
# exports with zero sinks and biases and imports as the same function; models
# gpt-oss does not compute are refused naming the key, and so are gpt-oss files
# lattice cannot compute. (Against transformers itself: make hf-check.)
set -u
BUILD=$1
. tests/lib.sh hf-gptoss

random_shard "$T/train.ltok" 20000 7 && random_shard "$T/prompt.ltok" 200 11 ||
  { fail prepare "lattice shard failed"; exit 1; }
M4="model.num_experts=4 model.moe_router_topk=2 model.moe_ffn_hidden_size=48"
OSS="model.add_bias_linear=true model.softmax_type=learnable model.quick_geglu=true
     model.glu_linear_offset=1 model.activation_func_clamp_value=0.05 model.window_size=[3,0]
     model.window_attn_skip_freq=2 model.rope_scaling=yarn model.rope_scaling_factor=4
     model.rope_original_max_position=16 model.rope_truncate=false"
GO="configs/llama-tiny.yaml data.train_path=$T/train.ltok eval.interval=0 logging.log_interval=100
    $M4 model.moe_aux_loss_coeff=0.01 $OSS"

# ---- export of a trained model: config.json and the tensors' layout ---------------------
if "$LT" train $GO train.steps=5 checkpoint.dir="$T/ck" >"$T/train.log" 2>&1 &&
  "$LT" export "$T/ck" "$T/hf" >"$T/export.log" 2>&1; then
  pass gptoss_export
else
  fail gptoss_export "$(tail -n 3 "$T/train.log" "$T/export.log")"
  exit 1
fi
python3 - "$T/hf" <<'PY' && pass gptoss_config_and_layout || fail gptoss_config_and_layout "see $T/hf"
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
want = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_local_experts": 4,
        "num_experts_per_tok": 2, "intermediate_size": 48, "num_key_value_heads": 2, "head_dim": 8,
        "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"],
        "swiglu_limit": 0.05, "swiglu_alpha": 1.702, "attention_bias": True,
        "router_aux_loss_coef": 0.01, "output_router_logits": True, "tie_word_embeddings": False}
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
rp = c.get("rope_parameters", {})
if (rp.get("rope_type"), rp.get("factor"), rp.get("truncate"), rp.get("original_max_position_embeddings")) != \
        ("yarn", 4.0, False, 16):
    bad["rope_parameters"] = rp
assert not bad, bad
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
L = "model.layers.0."
shapes = {L + "mlp.experts.gate_up_proj": [4, 32, 96], L + "mlp.experts.gate_up_proj_bias": [4, 96],
          L + "mlp.experts.down_proj": [4, 48, 32], L + "mlp.experts.down_proj_bias": [4, 32],
          L + "mlp.router.weight": [4, 32], L + "mlp.router.bias": [4], L + "self_attn.sinks": [4],
          L + "self_attn.q_proj.bias": [32], L + "self_attn.k_proj.bias": [16],
          L + "self_attn.o_proj.bias": [32]}
wrong = {k: h.get(k, {}).get("shape") for k, v in shapes.items() if h.get(k, {}).get("shape") != v}
assert not wrong, wrong
assert not any(".experts.0." in k for k in h), "per-expert tensors in a gpt-oss file"
PY

# ---- import: the keys, the same model, the same files -----------------------------------
if "$LT" import "$T/hf" "$T/imp" data.train_path="$T/train.ltok" >"$T/import.log" 2>&1; then
  Y="$T/imp/step_00000000/config.yaml"
  missing=""
  for kv in "num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 48" 'moe_layer_freq: "1"' \
    "add_bias_linear: true" "softmax_type: learnable" "quick_geglu: true" "glu_linear_offset: 1" \
    "activation_func_clamp_value: 0.05" "rope_scaling: yarn" "rope_truncate: false" \
    'window_size: "[3, 0]"' 'window_attn_skip_freq: "[1, 0]"' "moe_aux_loss_coeff: 0.01"; do
    grep -qxF "  $kv" "$Y" || missing="$missing '$kv'"
  done
  [ -z "$missing" ] && pass gptoss_import_keys || fail gptoss_import_keys "config.yaml lacks$missing"
  "$LT" logits $GO data.train_path="$T/prompt.ltok" checkpoint.load="$T/ck" >"$T/ck.logits" 2>/dev/null &&
    "$LT" logits $GO data.train_path="$T/prompt.ltok" checkpoint.load="$T/imp" >"$T/imp.logits" \
      2>/dev/null && cmp -s "$T/ck.logits" "$T/imp.logits" && pass gptoss_import_same_logits ||
    fail gptoss_import_same_logits "lattice logits of the import differ from the original's"
  "$LT" export "$T/imp" "$T/hf2" >/dev/null 2>&1 &&
    cmp -s "$T/hf/model.safetensors" "$T/hf2/model.safetensors" && cmp -s "$T/hf/config.json" "$T/hf2/config.json" &&
    pass gptoss_export_import_export_identical || fail gptoss_export_import_export_identical "files differ"
else
  fail gptoss_import "$(tail -3 "$T/import.log")"
fi

# ---- the initial weights through gpt-oss train on as a fresh run -------------------------
if "$LT" train $GO train.steps=0 checkpoint.dir="$T/init" >"$T/init.log" 2>&1 &&
  "$LT" export "$T/init" "$T/hfinit" >/dev/null 2>&1 &&
  "$LT" import "$T/hfinit" "$T/impinit" >/dev/null 2>&1 &&
  "$LT" train $GO train.steps=4 logging.metrics_file="$T/fresh.jsonl" >"$T/fresh.log" 2>&1 &&
  "$LT" train $GO train.steps=4 checkpoint.load="$T/impinit" logging.metrics_file="$T/resumed.jsonl" \
    >"$T/resumed.log" 2>&1 &&
  cmp -s <(grep -o '"loss": [^,]*' "$T/fresh.jsonl") <(grep -o '"loss": [^,]*' "$T/resumed.jsonl"); then
  pass gptoss_train_from_import_equals_fresh
else
  fail gptoss_train_from_import_equals_fresh "$(tail -n 2 "$T/init.log" "$T/resumed.log")"
fi

# ---- what gpt-oss's layout adds as zeros: an off-by-one model without biases --------------
PLAIN="configs/llama-tiny.yaml data.train_path=$T/train.ltok eval.interval=0 $M4 model.softmax_type=off-by-one
       model.quick_geglu=true model.glu_linear_offset=1 model.activation_func_clamp_value=7"
if "$LT" train $PLAIN train.steps=3 checkpoint.dir="$T/p" >"$T/p.log" 2>&1 &&
  "$LT" export "$T/p" "$T/php" >"$T/php.log" 2>&1 &&
  python3 - "$T/php/model.safetensors" <<'PY' &&
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
for k in ("self_attn.sinks", "self_attn.q_proj.bias", "mlp.router.bias", "mlp.experts.down_proj_bias"):
    e = h["model.layers.1." + k]
    a, b = e["data_offsets"]
    assert set(raw[8 + n + a:8 + n + b]) == {0}, k + " is not zeros"
PY
  "$LT" import "$T/php" "$T/pimp" >/dev/null 2>&1 &&
  "$LT" logits $PLAIN data.train_path="$T/prompt.ltok" checkpoint.load="$T/p" >"$T/p.logits" 2>/dev/null &&
  "$LT" logits "$T/pimp/step_00000000/config.yaml" data.train_path="$T/prompt.ltok" model.seq_length=32 \
    checkpoint.load="$T/pimp" \
    >"$T/pimp.logits" 2>/dev/null &&
  out=$(python3 - "$T/p.logits" "$T/pimp.logits" <<'PY'
import sys
rows = lambda p: [[float(v) for v in l.split()] for l in open(p).read().split("\n")[1:] if l.strip()]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
d = max(abs(x - y) for r, s in zip(a, b) for x, y in zip(r, s)) / max(abs(x) for r in a for x in r)
print("max rel %.1e" % d)
sys.exit(0 if len(a) == len(b) and d <= 1e-6 else 1)
PY
); then
  pass "gptoss_zero_sinks_and_biases_same_function ($out)"
else
  fail gptoss_zero_sinks_and_biases_same_function "$(tail -n 2 "$T/p.log" "$T/php.log") ${out:-}"
fi

# ---- export refusals: models gpt-oss does not compute ------------------------------------
refuse_export() { # name key overrides...: gpt-oss's keys on llama-tiny, then the overrides
  local name=$1 key=$2
  shift 2
  export_refused GptOssForCausalLM "$name" "$key" configs/llama-tiny.yaml $M4 model.quick_geglu=true \
    model.glu_linear_offset=1 model.activation_func_clamp_value=7 model.softmax_type=learnable "$@"
}
refuse_export vanilla_softmax "model.softmax_type=vanilla" model.softmax_type=vanilla
refuse_export offset "model.glu_linear_offset=0" model.glu_linear_offset=0
refuse_export no_clamp "model.activation_func_clamp_value=0" model.activation_func_clamp_value=0
refuse_export qk_norm "model.qk_layernorm=true" model.qk_layernorm=true
refuse_export dense_layer 'model.moe_layer_freq="2" leaves layer 1 dense' model.moe_layer_freq=2
refuse_export expert_bias "model.moe_router_enable_expert_bias=true" model.moe_router_enable_expert_bias=true \
  model.moe_router_score_function=sigmoid
refuse_export capacity "model.moe_expert_capacity_factor=1.5" model.moe_expert_capacity_factor=1.5

# ---- import refusals: gpt-oss files lattice does not compute -----------------------------
variant() { # name python-statement-on-c: a copy of $T/hf with config.json edited
  mkdir -p "$T/v_$1" && ln -s "$T/hf/model.safetensors" "$T/v_$1/model.safetensors" &&
    python3 - "$T/hf/config.json" "$T/v_$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
}
variant alpha 'c["swiglu_alpha"] = 1.5'
expect2 import_refuses_swiglu_alpha "'swiglu_alpha' is 1.5" import "$T/v_alpha" "$T/o1"
variant nobias 'c["attention_bias"] = False'
expect2 import_refuses_attention_bias_false "'attention_bias' is false" import "$T/v_nobias" "$T/o2"
variant types 'c["layer_types"] = ["sliding_attention", "chunked_attention"]'
expect2 import_refuses_layer_type "'layer_types[1]' must be" import "$T/v_types" "$T/o3"
variant top1 'c["num_experts_per_tok"] = 1'
expect2 import_refuses_top1 "'num_experts_per_tok' is 1" import "$T/v_top1" "$T/o4"
variant mxfp4 'c["quantization_config"] = {"quant_method": "mxfp4"}'
expect2 import_refuses_mxfp4 "'quantization_config' (mxfp4) names quantized weights" import "$T/v_mxfp4" "$T/o7"
expect2 import_refuses_sinks_override "model.softmax_type comes from" import "$T/hf" "$T/o5" \
  model.softmax_type=vanilla
[ ! -e "$T/o1/latest" ] && [ ! -e "$T/o2/latest" ] && [ ! -e "$T/o3/latest" ] && [ ! -e "$T/o4/latest" ] &&
  [ ! -e "$T/o5/latest" ] && [ ! -e "$T/o7/latest" ] && pass import_refusals_write_nothing ||
  fail import_refusals_write_nothing "a refused import left a checkpoint"
# absent keys take GptOssConfig's defaults: YaRN factor 32 over 4096 positions, untruncated
variant defaults 'del c["rope_parameters"]'
if "$LT" import "$T/v_defaults" "$T/o6" >/dev/null 2>"$T/o6.err" &&
  grep -q "  rope_scaling: yarn$" "$T/o6/step_00000000/config.yaml" &&
  grep -q "  rope_scaling_factor: 32$" "$T/o6/step_00000000/config.yaml" &&
  grep -q "  rope_original_max_position: 4096$" "$T/o6/step_00000000/config.yaml"; then
  pass import_gptoss_rope_default
else
  fail import_gptoss_rope_default "$(cat "$T/o6.err"; grep -E 'rope_' "$T/o6/step_00000000/config.yaml" 2>&1)"
fi
exit $((failures > 0))
