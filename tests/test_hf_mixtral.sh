#!/usr/bin/env bash
# test_hf_mixtral.sh BUILD_DIR - MoE models and Hugging Face's MixtralForCausalLM:
# a tiny Llama with 4 experts top-2 in every layer, trained a few steps with the
# aux loss, exported: config.json names Mixtral with the MoE keys and the logits
# of an independent float64 forward pass of the files (tests/hf_reference.py,
# Mixtral's router and experts as transformers defines them) agree with `lattice
# logits` within 1e-5; imported again it has the MoE keys, gives the same logits
# bit for bit and exports to identical files; the initial weights exported and
# imported train exactly as a fresh run, also with expert parallelism 2 under
# mpirun, whose checkpoint exports the same weights; MoE models Mixtral cannot represent (and windowed models) are refused naming the key, and
# so are Mixtral files lattice cannot compute.
set -u
BUILD=$1
. tests/lib.sh hf-mixtral

random_shard "$T/train.ltok" 20000 7 && random_shard "$T/prompt.ltok" 200 11 ||
  { fail prepare "lattice shard failed"; exit 1; }
MIX="configs/llama-tiny.yaml data.train_path=$T/train.ltok eval.interval=0 logging.log_interval=100
     model.num_experts=4 model.moe_router_topk=2 model.moe_ffn_hidden_size=48 model.moe_aux_loss_coeff=0.01"

# ---- export of a trained model: config.json and the float64 reference ------------------
if "$LT" train $MIX train.steps=5 checkpoint.dir="$T/ck" >"$T/train.log" 2>&1 &&
  "$LT" export "$T/ck" "$T/hf" >"$T/export.log" 2>&1; then
  pass mixtral_export
else
  fail mixtral_export "$(tail -n 3 "$T/train.log" "$T/export.log")"
  exit 1
fi
python3 - "$T/hf/config.json" <<'PY' && pass mixtral_config_json || fail mixtral_config_json "$(cat "$T/hf/config.json")"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
        "num_experts_per_tok": 2, "intermediate_size": 48, "router_aux_loss_coef": 0.01,
        "output_router_logits": True, "sliding_window": None, "num_key_value_heads": 2}
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
assert not bad, bad
PY
if "$LT" logits $MIX data.train_path="$T/prompt.ltok" checkpoint.load="$T/ck" >"$T/ck.logits" \
     2>"$T/ck.logits.err" &&
   out=$(python3 tests/hf_reference.py "$T/hf" "$T/ck.logits" 1e-5 2>&1); then
  pass "mixtral_logits_match_float64_reference ($out)"
else
  fail mixtral_logits_match_float64_reference "$(tail -1 "$T/ck.logits.err"; echo "${out:-}" | tail -1)"
fi

# ---- import: the MoE keys, the same model, the same files ------------------------------
if "$LT" import "$T/hf" "$T/imp" data.train_path="$T/train.ltok" >"$T/import.log" 2>&1; then
  Y="$T/imp/step_00000000/config.yaml"
  missing=""
  for kv in "num_experts: 4" "moe_router_topk: 2" "moe_ffn_hidden_size: 48" 'moe_layer_freq: "1"' \
    "moe_router_score_function: softmax" "moe_router_pre_softmax: false" "moe_aux_loss_coeff: 0.01" \
    "moe_shared_expert_intermediate_size: 0" "moe_expert_capacity_factor: 0" "arch: llama"; do
    grep -qxF "  $kv" "$Y" || missing="$missing '$kv'"
  done
  [ -z "$missing" ] && pass mixtral_import_keys || fail mixtral_import_keys "config.yaml lacks$missing"
  # (the training config's model.ffn_hidden_size, 64, is no layer's width: it loads the import's 48)
  "$LT" logits $MIX data.train_path="$T/prompt.ltok" checkpoint.load="$T/imp" >"$T/imp.logits" \
    2>/dev/null && cmp -s "$T/ck.logits" "$T/imp.logits" && pass mixtral_import_same_logits ||
    fail mixtral_import_same_logits "lattice logits of the import differ from the original's"
  "$LT" export "$T/imp" "$T/hf2" >/dev/null 2>&1 &&
    cmp -s "$T/hf/model.safetensors" "$T/hf2/model.safetensors" && cmp -s "$T/hf/config.json" "$T/hf2/config.json" &&
    pass mixtral_export_import_export_identical || fail mixtral_export_import_export_identical "files differ"
else
  fail mixtral_import "$(tail -3 "$T/import.log")"
fi

# ---- the initial weights through Mixtral train on as a fresh run -----------------------
if "$LT" train $MIX train.steps=0 checkpoint.dir="$T/init" >"$T/init.log" 2>&1 &&
  "$LT" export "$T/init" "$T/hfinit" >/dev/null 2>&1 &&
  "$LT" import "$T/hfinit" "$T/impinit" >/dev/null 2>&1 &&
  "$LT" train $MIX train.steps=4 logging.metrics_file="$T/fresh.jsonl" checkpoint.dir="$T/fresh" \
    >"$T/fresh.log" 2>&1 &&
  "$LT" train $MIX train.steps=4 checkpoint.load="$T/impinit" logging.metrics_file="$T/resumed.jsonl" \
    >"$T/resumed.log" 2>&1; then
  grep -q "holds weights only: Adam starts from zero moments at step 0" "$T/resumed.log" &&
    close_losses "$T/fresh.jsonl" "$T/resumed.jsonl" 1-4 >/dev/null &&
    cmp -s <(grep -o '"loss": [^,]*' "$T/fresh.jsonl") <(grep -o '"loss": [^,]*' "$T/resumed.jsonl") &&
    pass mixtral_train_from_import_equals_fresh ||
    fail mixtral_train_from_import_equals_fresh "losses differ: $(grep -o '"loss": [^,]*' "$T/resumed.jsonl" | tr '\n' ' ')"
else
  fail mixtral_train_from_import_equals_fresh "$(tail -n 3 "$T/init.log" "$T/resumed.log")"
fi
use_mpirun
if $MPI -np 2 "$LT" train $MIX train.steps=4 parallel.expert_model_parallel_size=2 \
  checkpoint.load="$T/impinit" logging.metrics_file="$T/ep2.jsonl" checkpoint.dir="$T/ep2" \
  >"$T/ep2.log" 2>&1 </dev/null &&
  out=$(close_losses "$T/fresh.jsonl" "$T/ep2.jsonl" 1-4); then
  pass "mixtral_import_trains_ep2 ($out)"
else
  fail mixtral_import_trains_ep2 "$(tail -3 "$T/ep2.log")"
fi
# the EP 2 run's checkpoint (experts split over two ranks) exports the same model
if "$LT" export "$T/fresh" "$T/hf_fresh" >/dev/null 2>&1 &&
  "$LT" export "$T/ep2" "$T/hf_ep2" 2>"$T/hf_ep2.err" >/dev/null &&
  out=$(python3 - "$T/hf_fresh/model.safetensors" "$T/hf_ep2/model.safetensors" <<'PY'
import sys
sys.path.insert(0, "tests")
from hf_reference import load_safetensors
a, b = (load_safetensors(p) for p in sys.argv[1:3])
assert sorted(a) == sorted(b), "tensor names differ"
flat = lambda t: [v for r in t for v in (r if isinstance(r, list) else [r])]
worst = max(abs(x - y) for k in a for x, y in zip(flat(a[k]), flat(b[k])))
print("max weight difference %.1e" % worst)
sys.exit(0 if worst <= 1e-5 else 1)
PY
); then
  pass "mixtral_export_of_ep2_checkpoint ($out)"
else
  fail mixtral_export_of_ep2_checkpoint "$(head -c 300 "$T/hf_ep2.err") ${out:-}"
fi

# ---- export refusals: MoE models that are not Mixtral --------------------------------------
refuse_export() { export_refused MixtralForCausalLM "$@"; } # name key config overrides...
M4="model.num_experts=4 model.moe_ffn_hidden_size=48"
refuse_export gpt "model.arch=gpt" configs/tiny.yaml $M4
refuse_export shared_expert "model.moe_shared_expert_intermediate_size=32" configs/llama-tiny.yaml $M4 \
  model.moe_shared_expert_intermediate_size=32
refuse_export dense_layer 'model.moe_layer_freq="2" leaves layer 1 dense' configs/llama-tiny.yaml $M4 \
  model.moe_layer_freq=2
refuse_export sigmoid "model.moe_router_score_function=sigmoid" configs/llama-tiny.yaml $M4 \
  model.moe_router_score_function=sigmoid
refuse_export pre_softmax "model.moe_router_pre_softmax=true" configs/llama-tiny.yaml $M4 \
  model.moe_router_pre_softmax=true
refuse_export topk_scaling "model.moe_router_topk_scaling_factor=2.5" configs/llama-tiny.yaml $M4 \
  model.moe_router_topk_scaling_factor=2.5
refuse_export capacity "model.moe_expert_capacity_factor=1.5" configs/llama-tiny.yaml $M4 \
  model.moe_expert_capacity_factor=1.5
refuse_export groups "model.moe_router_num_groups=2 (group-limited routing)" configs/llama-tiny.yaml $M4 \
  model.moe_router_num_groups=2 model.moe_router_group_topk=1
# sliding windows (GPT-OSS's layers): no config lattice writes has them, dense or MoE
for w in dense moe; do
  extra=""; [ $w = moe ] && extra=$M4
  if "$LT" train configs/llama-tiny.yaml $extra "model.window_size=[8, 0]" model.window_attn_skip_freq=2 \
       data.train_path="$T/train.ltok" train.steps=0 eval.interval=0 checkpoint.dir="$T/w_$w" \
       >"$T/w_$w.log" 2>&1; then
    "$LT" export "$T/w_$w" "$T/whf_$w" >/dev/null 2>"$T/whf_$w.err"
    rc=$?
    if [ $rc -eq 2 ] && grep -qF "cannot export model.window_size=[8, 0] (a sliding window of 8 keys before each query in 1 of 2 layers)" "$T/whf_$w.err" &&
       [ ! -e "$T/whf_$w/model.safetensors" ]; then pass "export_refuses_window_$w"
    else fail "export_refuses_window_$w" "exit $rc: $(head -c 300 "$T/whf_$w.err")"; fi
  else
    fail "export_refuses_window_$w" "the checkpoint was not made: $(tail -2 "$T/w_$w.log")"
  fi
done

# ---- import refusals and defaults: Mixtral files lattice does not compute ------------------
mixtral_variant() { # name python-statement-on-c: a copy of $T/hf with config.json edited
  mkdir -p "$T/v_$1" && ln -s "$T/hf/model.safetensors" "$T/v_$1/model.safetensors" &&
    python3 - "$T/hf/config.json" "$T/v_$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
}
mixtral_variant top1 'c["num_experts_per_tok"] = 1'
expect2 import_refuses_top1 "'num_experts_per_tok' is 1" import "$T/v_top1" "$T/o1"
mixtral_variant window 'c["sliding_window"] = 16'
expect2 import_refuses_sliding_window "'sliding_window' is 16" import "$T/v_window" "$T/o2"
mixtral_variant five 'c["num_local_experts"] = 5'
expect2 import_refuses_expert_count "tensor 'model.layers.0.block_sparse_moe.gate.weight' has shape (4, 32); config.json implies (5, 32)" \
  import "$T/v_five" "$T/o3"
expect2 import_refuses_expert_override "model.num_experts comes from" import "$T/hf" "$T/o4" model.num_experts=2
expect2 import_refuses_router_override "model.moe_router_pre_softmax comes from" import "$T/hf" "$T/o5" \
  model.moe_router_pre_softmax=true
[ ! -e "$T/o1/latest" ] && [ ! -e "$T/o2/latest" ] && [ ! -e "$T/o3/latest" ] && [ ! -e "$T/o4/latest" ] &&
  [ ! -e "$T/o5/latest" ] && pass import_refusals_write_nothing ||
  fail import_refusals_write_nothing "a refused import left a checkpoint"
# absent keys take MixtralConfig's defaults (rope_theta 1e6, no aux loss without
# output_router_logits); a sliding window no sequence reaches is plain causal attention
mixtral_variant defaults 'del c["rope_theta"]; del c["rope_scaling"]; c["output_router_logits"] = False; c["sliding_window"] = 64'
if "$LT" import "$T/v_defaults" "$T/o6" >/dev/null 2>&1 &&
  grep -q "  rotary_base: 1e+06$" "$T/o6/step_00000000/config.yaml" &&
  grep -q "  rope_scaling: none$" "$T/o6/step_00000000/config.yaml" &&
  grep -q "  moe_aux_loss_coeff: 0$" "$T/o6/step_00000000/config.yaml"; then
  pass import_mixtral_defaults
else
  fail import_mixtral_defaults "$(grep -E 'rotary_base|rope_scaling:|moe_aux_loss_coeff' "$T/o6/step_00000000/config.yaml" 2>&1)"
fi
exit $((failures > 0))
