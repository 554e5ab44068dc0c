#!/usr/bin/env bash
# train_compare.sh BUILD_DIR - end-to-end check of the CUDA backend against the
# CPU backend: `lattice train` on configs/tiny.yaml and configs/llama-tiny.yaml
# (the Llama block: RMSNorm, SwiGLU, RoPE, grouped-query attention; and with 4
# experts top-2 in every layer, mixture of experts; Qwen2-MoE's gated shared
# expert after a dense layer; and that with GPT-OSS's
# sliding window and head dimension, with and without document resets; and
# OpenAI's gpt-oss features: biases, sinks, clamped quick GeGLU, YaRN) for 20 steps
# with train.device=cpu and train.device=cuda on the same data and seed, in
# fp32 and bf16, then compares the per-step training losses of the metrics
# files: max relative difference <= 1e-4 (fp32) and <= 2e-2 (bf16); and a bf16
# run with train.cuda_graph=true against the same run without: identical; the
# step breakdown of the CUDA runs measured on the device, graph replays too.
# Prints PASS/FAIL lines and "N passed, M failed" like the other test scripts.
# Environment: TRAIN_COMPARE_STEPS (default 20), TRAIN_COMPARE_TOL_FP32 (1e-4),
#   TRAIN_COMPARE_TOL_BF16 (2e-2), TRAIN_COMPARE_KEEP=1 keeps the work dir,
#   TRAIN_COMPARE_DEVICE (device compared with cpu, default cuda; "cpu" checks
#   the script itself on a machine without a GPU).
# Exit status: 0 all passed, 1 a comparison failed or a run failed,
#   2 cannot run (no lattice binary, no python3).
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
LT="$BUILD/lattice"
STEPS=${TRAIN_COMPARE_STEPS:-20}
TOL_FP32=${TRAIN_COMPARE_TOL_FP32:-1e-4}
TOL_BF16=${TRAIN_COMPARE_TOL_BF16:-2e-2}
DEV=${TRAIN_COMPARE_DEVICE:-cuda}
if [ ! -x "$LT" ]; then echo "FAIL setup: $LT not found (a full lattice build is needed)"; exit 2; fi
command -v python3 >/dev/null 2>&1 || { echo "FAIL setup: python3 not found"; exit 2; }
T=$(mktemp -d /tmp/lt-train-compare-XXXXXX)
[ "${TRAIN_COMPARE_KEEP:-0}" = 1 ] && echo "work dir: $T" || trap 'rm -rf "$T"' EXIT
passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

echo "lattice: $("$LT" --version 2>&1 | head -2 | tr '\n' ';')"
if [ "$DEV" = cuda ] && ! "$LT" --version 2>/dev/null | grep -q cuda; then
  fail setup "$LT was built without the CUDA backend"
  echo "$passed passed, $failed failed"; exit 1
fi

# ---- data: byte-level English text (vocab 256), random bytes as a fallback ----
python3 tests/gpu/text_ids.py "$T/train.ids"
if ! "$LT" shard --vocab-size 256 --input "$T/train.ids" "$T/train.ltok" >"$T/shard.log" 2>&1; then
  fail setup "lattice shard failed: $(tail -1 "$T/shard.log")"
  echo "$passed passed, $failed failed"; exit 1
fi

# ---- runs ---------------------------------------------------------------------
run() { # name device precision [overrides...] -> metrics file $T/NAME.jsonl, log $T/NAME.log
  local name=$1 dev=$2 prec=$3
  shift 3
  "$LT" train "configs/$CFG.yaml" "train.device=$dev" "train.precision=$prec" "train.steps=$STEPS" "$@" \
    "data.train_path=$T/train.ltok" data.valid_path= checkpoint.dir= checkpoint.load= \
    "logging.metrics_file=$T/$name.jsonl" logging.log_interval=5 >"$T/$name.log" 2>&1
  local rc=$?
  if [ $rc != 0 ]; then
    fail "run_$name" "lattice train exited with $rc: $(grep -vE '^( |[a-z_]+:$)' "$T/$name.log" | tail -2 | tr '\n' ' ')"
    return 1
  fi
  grep -E '^backend' "$T/$name.log" | sed "s/^/  $name: /"
  return 0
}

compare() { # name-a name-b test-name tol
  local na=$1 nb=$2 tname=$3 tol=$4 out rc
  out=$(python3 - "$T/$na.jsonl" "$T/$nb.jsonl" "$tol" "$STEPS" <<'PY'
import json, sys
def losses(path):
    d = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if r.get('eval'):
            continue
        d[r['step']] = (r['loss'], r.get('grad_norm'))
    return d
a, b = losses(sys.argv[1]), losses(sys.argv[2])
tol, steps = float(sys.argv[3]), int(sys.argv[4])
missing = [s for s in range(1, steps + 1) if s not in a or s not in b]
if missing:
    print(f"missing steps in the metrics files: {missing[:5]}")
    sys.exit(1)
worst, wstep, gworst = 0.0, 0, 0.0
for s in range(1, steps + 1):
    la, lb = a[s][0], b[s][0]
    rel = abs(la - lb) / max(abs(la), 1e-12)
    if rel > worst:
        worst, wstep = rel, s
    ga, gb = a[s][1], b[s][1]
    if ga is not None and gb is not None:
        gworst = max(gworst, abs(ga - gb) / max(abs(ga), 1e-12))
print(f"max rel loss diff {worst:.3e} at step {wstep} (tol {tol:g}); "
      f"loss step 1 cpu {a[1][0]:.6f} cuda {b[1][0]:.6f}; step {steps} cpu {a[steps][0]:.6f} "
      f"cuda {b[steps][0]:.6f}; max rel grad-norm diff {gworst:.3e} (info)")
sys.exit(0 if worst <= tol else 1)
PY
)
  rc=$?
  if [ $rc = 0 ]; then pass "$tname ($out)"; else fail "$tname" "$out"; fi
}

# cpu_vs_dev NAME TEST [overrides...]: $CFG on the CPU and on $DEV in fp32 and
# bf16 (runs NAME-cpu-PREC, NAME-cuda-PREC), compared as TEST_PREC_cpu_vs_$DEV
cpu_vs_dev() {
  local name=$1 test=$2 prec tol ok
  shift 2
  for prec in fp32 bf16; do
    case $prec in fp32) tol=$TOL_FP32 ;; bf16) tol=$TOL_BF16 ;; esac
    ok=1
    run "$name-cpu-$prec" cpu "$prec" "$@" || ok=0
    run "$name-cuda-$prec" "$DEV" "$prec" "$@" || ok=0
    [ $ok = 1 ] && compare "$name-cpu-$prec" "$name-cuda-$prec" "${test}_${prec}_cpu_vs_${DEV}" "$tol"
  done
}
for CFG in tiny llama-tiny; do cpu_vs_dev "$CFG" "$CFG"; done
# mixture of experts on the Llama block: 4 experts, top 2, aux and z losses
CFG=llama-tiny
MOE=(model.num_experts=4 model.moe_ffn_hidden_size=48 model.moe_aux_loss_coeff=0.01
     model.moe_z_loss_coeff=0.001)
cpu_vs_dev moe llama_moe "${MOE[@]}"
# the experts through cuBLAS's grouped GEMM (model.moe_grouped_gemm=true; the
# default runs one GEMM per expert), bf16, against the CPU run above
if run moe-grouped-cuda-bf16 "$DEV" bf16 "${MOE[@]}" model.moe_grouped_gemm=true; then
  if grep -q "GEMMs grouped (model.moe_grouped_gemm)" "$T/moe-grouped-cuda-bf16.log" ||
     [ "$DEV" = cpu ]; then
    compare moe-cpu-bf16 moe-grouped-cuda-bf16 "llama_moe_grouped_gemm_bf16_cpu_vs_${DEV}" "$TOL_BF16"
  else
    fail "llama_moe_grouped_gemm_bf16_cpu_vs_${DEV}" "the log does not say the experts' GEMMs are grouped"
  fi
fi
# Qwen2-MoE's shape on the MoE Llama block: a dense first layer, then a shared
# expert scaled by its sigmoid gate (model.moe_shared_expert_gate: the moe_gate
# kernels), qkv biases, a softmax over all experts before the top-k
QW=("${MOE[@]}" "model.moe_layer_freq=[0,1]" model.moe_shared_expert_intermediate_size=64
    model.moe_shared_expert_gate=true model.add_qkv_bias=true model.moe_router_pre_softmax=true)
cpu_vs_dev qwen2moe llama_moe_shared_gate "${QW[@]}"
# GPT-OSS's attention on the MoE Llama block, through lattice's kernels (cuDNN
# takes neither windows nor documents): a 48-key sliding window on every other
# layer, head dimension 32 apart from hidden / heads (4 x 32 = 128 > 32: the
# tensor-core path in bf16), and documents (EOD = newline) with position and
# attention resets and the EOD loss mask, at sequence 128 (several key tiles)
OSS=("${MOE[@]}" "model.window_size=[48, 0]" model.window_attn_skip_freq=2 model.kv_channels=32
     model.seq_length=128 model.max_position_embeddings=128 model.attention=lattice
     data.eod_token=10 data.reset_position_ids=true data.reset_attention_mask=true
     data.eod_mask_loss=true)
cpu_vs_dev oss llama_moe_window_docs "${OSS[@]}"
# OpenAI's gpt-oss architecture on the MoE Llama block: biases on every linear
# and the router, a learned sink logit per head (lattice's kernels: cuDNN has
# no sink), quick GeGLU experts with offset 1 and a clamp of 0.1 that the tiny
# model's activations cross, YaRN
GOSS=("${MOE[@]}" model.add_bias_linear=true model.softmax_type=learnable model.quick_geglu=true
      model.glu_linear_offset=1 model.activation_func_clamp_value=0.1 model.rope_scaling=yarn
      model.rope_scaling_factor=4 model.rope_original_max_position=16 model.rope_truncate=false)
cpu_vs_dev goss llama_gpt_oss "${GOSS[@]}"
# the window without documents, attention left to model.attention=auto and a
# non-deterministic backward: in bf16 on a GPU whose cuDNN runs it, cuDNN
# takes every call, the windowed layers through its band mask (sequence 256:
# a multiple of 128, which cuDNN <= 9.15 needs for the backward), as the
# run's summary must say
WIN=("${MOE[@]}" "model.window_size=[48, 0]" model.window_attn_skip_freq=2 model.kv_channels=32
     model.seq_length=256 model.max_position_embeddings=256)
cpu_vs_dev win llama_moe_window "${WIN[@]}" model.attention_deterministic=false
# cuDNN's summary line of a log: "cuDNN ran F forward and B backward calls;
# lattice's kernels ran F2 forward and B2 backward ..."
on_cudnn() { # test log pattern what
  local summary
  summary=$(grep -E 'attention: cuDNN ran' "$2" | tail -1)
  if echo "$summary" | grep -qE "$3"; then
    pass "$1 (${summary#*attention: })"
  elif grep -q 'attention  *lattice' "$2"; then
    pass "$1 (not applicable: $(grep -m1 -E '^attention ' "$2"))"
  else fail "$1" "$4: ${summary:-no attention summary in the log}"; fi
}
# (only after a run that trained: a run that failed has said so already)
if [ "$DEV" = cuda ] && [ -s "$T/win-cuda-bf16.jsonl" ]; then
  on_cudnn window_bf16_on_cudnn "$T/win-cuda-bf16.log" \
    'cuDNN ran [1-9][0-9]* forward and [1-9][0-9]* backward calls; lattice.s kernels ran 0 forward and 0 backward' \
    "cuDNN must run every call"
  # deterministic (the default): auto leaves the windowed layers' backward
  # to lattice's kernels (cuDNN's deterministic band backward measured
  # 2.2-7.1x slower on an H200), the rest stays on cuDNN
  # (its losses against the CPU's too: cuDNN's forward statistics feed lattice's backward)
  if run win-det-cuda-bf16 "$DEV" bf16 "${WIN[@]}"; then
    on_cudnn window_det_bf16_backward_on_lattice "$T/win-det-cuda-bf16.log" \
      'cuDNN ran [1-9][0-9]* forward and [1-9][0-9]* backward calls; lattice.s kernels ran 0 forward and [1-9][0-9]* backward' \
      "cuDNN must run the forward calls and the unwindowed backward, lattice the windowed backward"
    [ -s "$T/win-cpu-bf16.jsonl" ] &&
      compare win-cpu-bf16 win-det-cuda-bf16 "llama_moe_window_det_bf16_cpu_vs_${DEV}" "$TOL_BF16"
  fi
fi
CFG=tiny
# the step replayed as a CUDA graph runs the same kernels: identical losses
if [ "$DEV" = cuda ] && run cuda-bf16-graph cuda bf16 train.cuda_graph=true; then
  if grep -q "cuda graph: forward and backward" "$T/cuda-bf16-graph.log"; then
    compare tiny-cuda-bf16 cuda-bf16-graph train_bf16_cuda_graph_identical 0
  else fail train_bf16_cuda_graph_identical "no capture reported in the log"; fi
fi

# the step's breakdown measured on the device (src/observability/devclock.c): every step has
# device time in its passes and optimizer, the parts add up to the step, and
# with the graph the replayed steps' passes are timed too (timers in the graph)
breakdown() { # name test-name
  local out rc
  if [ "$DEV" = cuda ] && ! grep -q "step breakdown is measured on the device" "$T/$1.log"; then
    fail "$2" "the log does not say the breakdown is measured on the device"; return
  fi
  out=$(python3 - "$T/$1.jsonl" <<'PY'
import json, statistics, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if not r.get('eval')]
for r in recs:
    t = r['time_ms']
    for k in ('forward', 'backward', 'optimizer'):
        assert t[k] > 0, ('step', r['step'], k, t)
    parts = sum(t[k] for k in ('forward', 'backward', 'grads', 'optimizer', 'data', 'bubble', 'other'))
    assert abs(parts - r['step_ms']) <= 0.01 * r['step_ms'] + 0.05, ('step', r['step'], parts, r['step_ms'])
med = lambda k: statistics.median(r['time_ms'][k] for r in recs[5:])
print('median step %.2f ms: forward %.2f, backward %.2f, optimizer %.2f, other %.2f ms'
      % (statistics.median(r['step_ms'] for r in recs[5:]), med('forward'), med('backward'),
         med('optimizer'), med('other')))
PY
)
  rc=$?
  if [ $rc = 0 ]; then pass "$2 ($out)"; else fail "$2" "$(echo "$out" | tail -1)"; fi
}
[ -s "$T/tiny-cuda-bf16.jsonl" ] && breakdown tiny-cuda-bf16 "breakdown_on_the_device_${DEV}"
[ -s "$T/cuda-bf16-graph.jsonl" ] && breakdown cuda-bf16-graph breakdown_on_the_device_cuda_graph
echo "$passed passed, $failed failed"
[ $failed = 0 ]
