#!/usr/bin/env bash
# test_linear_bias.sh BUILD_DIR - model.add_bias_linear and model.add_qkv_bias
# (Megatron-Core's) on the Llama block: biases on q/k/v, the attention output,
# the MLP's gate | up and down, each expert's, and the MoE router's logits. The
# tiny Llama with them trains the same model as one process in TP 2 with SP
# (with full recomputation, with the TP communication overlapped), PP 2 and DP
# 2 with ZeRO 1, its MoE form also under EP 2 (over DP, and over
# TP 2 with SP) and ETP 2 (loss and grad norm per step within 1e-5, the
# checkpoint's weights, biases included, within 1e-5); the biases are trained
# (they leave their init, and the loss parts from the model without them); a
# checkpoint moves between layouts; the dense model exports as
# LlamaForCausalLM with attention_bias and mlp_bias, and with the q/k/v
# biases alone as Qwen2ForCausalLM, whose logits an independent float64
# forward reproduces, and each imports back to the same files (a Qwen2 with
# its sliding window on is refused); the MoE layouts with biases are refused
# by the export (but gpt-oss's: test_hf_gptoss), naming the key, and a
# GPT config without linear biases is refused. (The router bias op against a
# double reference: test_ops_cpu_moe; every bias by finite differences:
# test_model; the CUDA kernels and whole models on them: test_cuda_emu.)
set -u
BUILD=$1
. tests/lib.sh bias
use_mpirun
text_shard "$T/train.ltok" || { fail prepare "lattice shard failed"; exit 1; }

BIAS=model.add_bias_linear=true
MOE="model.num_experts=4 model.moe_ffn_hidden_size=32 model.moe_aux_loss_coeff=0.01"
BASE="data.train_path=$T/train.ltok data.valid_path= train.steps=8 logging.log_interval=4
      eval.interval=0 optimizer.eps=1e-6 train.micro_batch_size=2"

run() { train_run "$1" "$2" configs/llama-tiny.yaml $BASE "${@:3}"; } # name np overrides...
# trained NAME PATTERN...: the checkpoint of run NAME holds parameters matching each
# pattern (h.L.<pattern>), and each has moved away from its init
trained() {
  local name=$1
  shift
  python3 - "$T/$name" "$@" <<'PY'
import sys
sys.path.insert(0, "tests")
from compare_runs import checkpoint_tensors
t = checkpoint_tensors(sys.argv[1])
for pat in sys.argv[2:]:
    got = [n for n in t if n.startswith("param/h.") and n.endswith(pat)]
    assert got, ("no parameter", pat, sorted(t))
    for n in got:
        # the zero-initialised biases move off 0 (the router bias, normal-initialised,
        # is held to moe_biases_change_the_loss)
        assert max(abs(v) for v in t[n]) > 1e-4, ("untrained", n)
PY
}
first_losses() { python3 -c "
import json, sys
print(' '.join(str(r['loss']) for r in map(json.loads, open(sys.argv[1])) if 'loss' in r))" "$1"; }

TP2=parallel.tensor_model_parallel_size=2
SP="$TP2 parallel.sequence_parallel=true"

# ---- dense: every layout against one process ---------------------------------------
run ref 1 $BIAS || fail reference "single-process run failed"
if trained ref attn.qkv.bias attn.proj.bias mlp.gate_up.bias mlp.down.bias
then pass dense_checkpoint_holds_trained_biases
else fail dense_checkpoint_holds_trained_biases "see the assertion above"; fi
same_as ref tp2_sp 2 $BIAS $SP
same_as ref pp2 2 $BIAS parallel.pipeline_model_parallel_size=2
same_as ref dp2_zero1 2 $BIAS optimizer.zero_stage=1
same_as ref tp2_sp_recompute_full 2 $BIAS $SP train.recompute=full
same_as ref tp2_sp_tp_overlap 2 $BIAS $SP parallel.tp_comm_overlap=true

# the biases change the model: zero at init, so step 1's loss is the same as without
# them, and the steps after it part
if run off 1 && python3 - "$T/off/m.jsonl" "$T/ref/m.jsonl" <<'PY'
import json, sys
def losses(p):
    return [r['loss'] for r in map(json.loads, open(p)) if 'loss' in r and not r.get('eval')]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert abs(a[0] - b[0]) <= 1e-6 * a[0], ('step 1 differs', a[0], b[0])
assert abs(a[-1] - b[-1]) > 1e-4 * a[-1], ('the biases changed nothing', a[-1], b[-1])
PY
then pass biases_zero_at_init_then_change_the_loss
else fail biases_zero_at_init_then_change_the_loss "see the assertion above"; fi

# the qkv bias alone (Qwen2's)
run qkv 1 model.add_qkv_bias=true || fail qkv_reference "single-process run failed"
if trained qkv attn.qkv.bias && python3 - "$T/qkv" <<'PY'
import sys
sys.path.insert(0, "tests")
from compare_runs import checkpoint_tensors
assert not [n for n in checkpoint_tensors(sys.argv[1]) if n.endswith(("proj.bias", "gate_up.bias"))]
PY
then pass qkv_bias_alone
else fail qkv_bias_alone "see the assertion above"; fi
same_as qkv qkv_tp2_sp 2 model.add_qkv_bias=true $SP

# a checkpoint written by TP 2 with SP resumes under PP 2 where the single process goes on
resumes_as ref tp2_sp_checkpoint_resumes_on_pp2 2 "$BIAS $SP" 2 "$BIAS parallel.pipeline_model_parallel_size=2"

# ---- MoE: the experts' biases and the router's -------------------------------------
EP2=parallel.expert_model_parallel_size=2
run moe 1 $BIAS $MOE || fail moe_reference "single-process run failed"
if trained moe mlp.router.bias mlp.experts.0.gate_up.bias mlp.experts.3.down.bias attn.qkv.bias
then pass moe_checkpoint_holds_trained_biases
else fail moe_checkpoint_holds_trained_biases "see the assertion above"; fi
same_as moe moe_ep2_over_dp2 2 $BIAS $MOE $EP2
same_as moe moe_ep2_over_tp2_sp 2 $BIAS $MOE $SP $EP2
same_as moe moe_pp2 2 $BIAS $MOE parallel.pipeline_model_parallel_size=2
same_as moe moe_tp2_sp_dp2_zero1 4 $BIAS $MOE $SP optimizer.zero_stage=1
same_as moe moe_etp2_ep2_over_tp2_dp2 4 $BIAS $MOE $SP $EP2 parallel.expert_tensor_parallel_size=2
# the router bias moves the routing: a model without it routes otherwise
if run moe_off 1 $MOE model.add_qkv_bias=true && python3 - "$T/moe_off/m.jsonl" "$T/moe/m.jsonl" <<'PY'
import json, sys
def losses(p):
    return [r['loss'] for r in map(json.loads, open(p)) if 'loss' in r and not r.get('eval')]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert abs(a[-1] - b[-1]) > 1e-4 * a[-1], ('the biases changed nothing', a[-1], b[-1])
PY
then pass moe_biases_change_the_loss
else fail moe_biases_change_the_loss "see the assertion above"; fi
# an EP 2 checkpoint resumes in one process
resumes_as moe moe_ep2_checkpoint_resumes_in_one_process 2 "$BIAS $MOE $EP2" 1 "$BIAS $MOE"

# ---- Hugging Face: LlamaForCausalLM with attention_bias and mlp_bias ---------------
if out=$(hf_export_matches "$T/ref/ck" "$T/ref/hf_out" '"attention_bias": true' \
           configs/llama-tiny.yaml $BIAS) && grep -q '"mlp_bias": true' "$T/ref/hf_out/config.json"
then pass "export_as_llama_with_biases_matches_float64_reference ($out)"
else fail export_as_llama_with_biases_matches_float64_reference "${out:-no mlp_bias: true}"; fi
if out=$(hf_round_trip "$T/ref/hf_out" "add_bias_linear: true")
then pass llama_bias_import_export_identical
else fail llama_bias_import_export_identical "$out"; fi
expect2 refused_moe_export "model.add_bias_linear=true as MixtralForCausalLM" export "$T/moe/ck" \
  "$T/moe/hf"
# ---- Hugging Face: Qwen2ForCausalLM (biases on q, k and v only) --------------------
if out=$(hf_export_matches "$T/qkv/ck" "$T/qkv/hf" '"architectures": ["Qwen2ForCausalLM"]' \
           configs/llama-tiny.yaml model.add_qkv_bias=true) &&
   python3 - "$T/qkv/hf" <<'PY'
import json, sys
sys.path.insert(0, "tests")
from hf_reference import load_safetensors
names = load_safetensors(sys.argv[1] + "/model.safetensors").keys()
assert {n.split(".")[-2] for n in names if n.endswith(".bias")} == {"q_proj", "k_proj", "v_proj"}, names
cfg = json.load(open(sys.argv[1] + "/config.json"))
assert "attention_bias" not in cfg and "mlp_bias" not in cfg and cfg["use_sliding_window"] is False, cfg
PY
then pass "export_as_qwen2_matches_float64_reference ($out)"
else fail export_as_qwen2_matches_float64_reference "${out:-see the assertion above}"; fi
rm -rf "$T/imported" "$T/hf2"
if out=$(hf_round_trip "$T/qkv/hf" "add_qkv_bias: true") &&
   grep -q "add_bias_linear: false" "$T/imported/step_00000000/config.yaml"
then pass qwen2_import_export_identical
else fail qwen2_import_export_identical "${out:-add_bias_linear is not false}"; fi
mkdir -p "$T/qwen2_window" && cp "$T/qkv/hf/model.safetensors" "$T/qwen2_window/" &&
  sed 's/"use_sliding_window": false/"use_sliding_window": true/' "$T/qkv/hf/config.json" \
    >"$T/qwen2_window/config.json"
expect2 refused_qwen2_sliding_window "'use_sliding_window' is true" import "$T/qwen2_window" \
  "$T/qwen2_window_ck"
expect2 refused_gpt_without_biases "model.add_bias_linear=false" train configs/tiny.yaml \
  model.add_bias_linear=false data.train_path="$T/train.ltok"
exit $((failures > 0))
