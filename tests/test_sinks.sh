#!/usr/bin/env bash
# test_sinks.sh BUILD_DIR - attention sinks (model.softmax_type, Megatron-Core's
# key; gpt-oss's `sinks`): the tiny Llama with learnable softmax offsets
# (h.<l>.attn.softmax_offset, one logit per query head, split over TP by heads)
# trains the same model under TP 2 with SP, PP 2 and DP 2 with ZeRO-1 as in one
# process (loss and grad norm per step, and the checkpoint's weights, within
# 1e-5; with recomputation; with q/k norms and an MoE layer under EP 2); the offsets get gradients (trained away from their init) and change the
# loss, as off-by-one's fixed zero logit does; a checkpoint written by TP 2
# resumes on one process where the single-process run goes on; a GPT model with
# learnable offsets under TP 2 equals one process; the Hugging Face export
# refuses the key. (The op against a float64 reference and finite differences:
# test_ops_cpu; the CUDA kernels: test_cuda_emu / test_gpu_ops; cuDNN's refusal:
# test_attn_select.)
set -u
BUILD=$1
SINK="model.softmax_type=learnable"
. tests/lib.sh sinks
use_mpirun
text_shard "$T/train.ltok" || { fail prepare "lattice shard failed"; exit 1; }
BASE="data.train_path=$T/train.ltok data.valid_path= train.steps=8 logging.log_interval=4
      eval.interval=0 optimizer.eps=1e-6"

run() { # name np config overrides...
  local name=$1 np=$2 cfg=$3; shift 3
  local out="$T/$name" launch="$LT"
  mkdir -p "$out"
  [ "$np" -gt 1 ] && launch="$MPI -np $np $LT"
  $launch train "$cfg" $BASE checkpoint.dir=$out/ck logging.metrics_file=$out/m.jsonl "$@" \
    >"$out/log" 2>&1 </dev/null || { echo "  run $name failed: $(tail -3 "$out/log")"; return 1; }
}
same() { # ref name np config overrides... : the run matches ref
  local ref=$1 name=$2 err; shift
  if run "$@" && err=$(python3 tests/compare_runs.py "$T/$ref" "$T/$name" 1e-5 1e-5 --steps 8 2>&1)
  then pass "${name}_matches_single_process"
  else fail "${name}_matches_single_process" "$(echo "${err:-run failed}" | tail -1)"; fi
}

run ref 1 configs/llama-tiny.yaml $SINK || fail reference "single-process run failed"
# the checkpoint holds each layer's offsets (4 heads), trained away from their init
if python3 - "$T/ref" <<'PY'
import sys
sys.path.insert(0, "tests")
from compare_runs import checkpoint_tensors
t = checkpoint_tensors(sys.argv[1])
names = [f"param/h.{l}.attn.softmax_offset" for l in range(2)]
assert all(n in t and len(t[n]) == 4 for n in names), sorted(t)
PY
then pass checkpoint_holds_the_softmax_offsets
else fail checkpoint_holds_the_softmax_offsets "see the assertion above"; fi

TP=parallel.tensor_model_parallel_size=2
LLAMA=configs/llama-tiny.yaml
same ref tp2_sp_recompute_full 2 $LLAMA $SINK $TP parallel.sequence_parallel=true \
  train.recompute=full
same ref pp2_recompute_selective 2 $LLAMA $SINK parallel.pipeline_model_parallel_size=2 \
  train.recompute=selective
same ref dp2_zero1 2 $LLAMA $SINK optimizer.zero_stage=1

# the key changes the model: the same init of the other weights gives another first
# loss, with learnable offsets and with off-by-one's zero logit
first_loss() { python3 -c "
import json, sys
print([r['loss'] for r in map(json.loads, open(sys.argv[1])) if 'loss' in r][0])" "$1"; }
differs() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) <= 1e-5 * a)" "$1" "$2"; }
if run vanilla 1 $LLAMA && run off_by_one 1 $LLAMA model.softmax_type=off-by-one &&
   a=$(first_loss "$T/vanilla/m.jsonl") && b=$(first_loss "$T/ref/m.jsonl") &&
   c=$(first_loss "$T/off_by_one/m.jsonl") && differs "$a" "$b" && differs "$a" "$c"
then pass "softmax_type_changes_the_loss ($a vanilla, $b learnable, $c off-by-one)"
else fail softmax_type_changes_the_loss "vanilla ${a:-?}, learnable ${b:-?}, off-by-one ${c:-?}"; fi
same off_by_one off_by_one_tp2_sp 2 $LLAMA model.softmax_type=off-by-one $TP \
  parallel.sequence_parallel=true

# the offsets have gradients: after 8 steps they are away from where the first step left them
if run short 1 $LLAMA $SINK train.steps=1 optimizer.decay_steps=8 && python3 - "$T/ref" "$T/short" <<'PY'
import sys
sys.path.insert(0, "tests")
from compare_runs import checkpoint_tensors
a, b = checkpoint_tensors(sys.argv[1]), checkpoint_tensors(sys.argv[2])
moved = [abs(x - y) for l in range(2) for x, y in zip(a[f"param/h.{l}.attn.softmax_offset"],
                                                       b[f"param/h.{l}.attn.softmax_offset"])]
assert min(moved) > 1e-4, moved
PY
then pass softmax_offsets_trained
else fail softmax_offsets_trained "see the assertion above"; fi

# a checkpoint written by TP 2 (each rank its 2 heads' offsets) resumes on one process
resumes_as ref tp2_checkpoint_resumes_on_one_process 2 "$LLAMA $SINK $TP" 1 "$LLAMA $SINK"

# with the per-head q/k norms before the offsets and an MoE second layer after them,
# under expert parallelism
MOE="model.qk_layernorm=true model.kv_channels=12 model.num_experts=4 model.moe_ffn_hidden_size=32
     model.moe_layer_freq=[0,1]"
run moe 1 $LLAMA $SINK $MOE || fail moe_reference "single-process run failed"
same moe moe_qk_norm_ep2 2 $LLAMA $SINK $MOE parallel.expert_model_parallel_size=2

# the GPT block takes the offsets as well
run gpt 1 configs/tiny.yaml $SINK || fail gpt_reference "single-process run failed"
same gpt gpt_tp2 2 configs/tiny.yaml $SINK $TP

expect2 refused_export "model.softmax_type=learnable" export "$T/ref/ck" "$T/ref/hf"
exit $((failures > 0))
