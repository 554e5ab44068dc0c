#!/usr/bin/env bash
# peer_check.sh BUILD_DIR - does scripts/bench_peer.py (plain PyTorch) train
# the same model as lattice? Both train a small GPT, a small Llama and that
# Llama with Mixtral's experts (below; vocab 300, padded to 384, so the padded
# columns are exercised) on
# byte-level English text for N steps from the same initial weights (lattice
# `train.steps=0` checkpoint -> `lattice export` -> the peer's --init) on the
# same batches (`lattice batches`, i.e. lattice's own shuffled loader), and
# the per-step training losses (and grad norms) are compared:
#   fp32: |dloss|/loss <= 1e-4, |dgrad_norm|/grad_norm <= 1e-3
#   bf16: |dloss|/loss <= 2e-2, |dgrad_norm|/grad_norm <= 1e-1 (see bench_peer.py)
# A negative control (the peer from a random init of its own instead of
# lattice's weights) must fail the same comparison: the check can fail.
# Needs a lattice binary and a Python with torch (and pyyaml): on a GPU machine
# (scripts/gpu_check.sh, phase "peer") or on a CPU with a CPU torch:
#   PEER_CHECK_DEVICE=cpu PEER_PYTHON=/path/to/venv/bin/python tests/gpu/peer_check.sh build
# (make peer-check runs it so). Not part of make test: CI has no torch.
# Environment: PEER_CHECK_DEVICE (cuda; cpu), PEER_PYTHON (python3),
#   PEER_CHECK_STEPS (10), PEER_CHECK_PRECISIONS ("fp32 bf16"),
#   PEER_CHECK_MODELS ("gpt llama moe"),
#   PEER_CHECK_COMPILE (torch.compile: 1 on cuda, 0 on cpu),
#   PEER_CHECK_RTOL_FP32 (1e-4), PEER_CHECK_RTOL_BF16 (2e-2), PEER_CHECK_KEEP=1
#   keeps the work dir.
# Prints PASS/FAIL lines and "N passed, M failed". Exit status: 0 all passed,
# 1 a check failed, 2 cannot run (no lattice binary, no torch).
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
LT="$BUILD/lattice"
PY=${PEER_PYTHON:-python3}
DEV=${PEER_CHECK_DEVICE:-cuda}
STEPS=${PEER_CHECK_STEPS:-10}
PRECS=${PEER_CHECK_PRECISIONS:-fp32 bf16}
MODELS=${PEER_CHECK_MODELS:-gpt llama moe}
if [ "$DEV" = cuda ]; then COMPILE=${PEER_CHECK_COMPILE:-1}; else COMPILE=${PEER_CHECK_COMPILE:-0}; fi
TOL_FP32=${PEER_CHECK_RTOL_FP32:-1e-4}
TOL_BF16=${PEER_CHECK_RTOL_BF16:-2e-2}
if [ ! -x "$LT" ]; then echo "FAIL setup: $LT not found (a full lattice build is needed)"; exit 2; fi
if ! "$PY" -c 'import torch, yaml' 2>/dev/null; then
  echo "FAIL setup: $PY cannot import torch and yaml (set PEER_PYTHON)"; exit 2
fi
if [ "$DEV" = cuda ] && ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "FAIL setup: torch sees no CUDA device (PEER_CHECK_DEVICE=cpu for the CPU)"; exit 2
fi
T=$(mktemp -d /tmp/lt-peer-check-XXXXXX)
[ "${PEER_CHECK_KEEP:-0}" = 1 ] && echo "work dir: $T" || trap 'rm -rf "$T"' EXIT
passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; [ $failed = 0 ]; exit $?; }

echo "lattice: $("$LT" --version 2>&1 | head -1); peer: $("$PY" -c 'import torch; print("torch", torch.__version__)')"

# ---- data: byte-level English text (ids < 256), random words as a fallback ----
python3 tests/gpu/text_ids.py "$T/train.ids"
if ! "$LT" shard --vocab-size 300 --input "$T/train.ids" "$T/train.ltok" >"$T/shard.log" 2>&1; then
  fail setup "lattice shard failed: $(tail -1 "$T/shard.log")"; finish
fi

# the models, each on the CPU backend on one thread (deterministic) or the GPU,
# vocab 300 (padded to 384):
#   gpt    configs/tiny.yaml
#   llama  configs/llama-tiny.yaml: RMSNorm, RoPE with Llama 3.1's scaling,
#          grouped-query attention, SwiGLU, untied head
#   moe    the same Llama with Mixtral's experts in every layer: 4 of width 48,
#          top-2 (softmax over the two), dropless, aux and z losses on
#          (compiled per block as bench.sh runs it: on CUDA in bf16 its
#          experts are torch's grouped GEMM)
model_args() { # model -> config and overrides
  case $1 in
    gpt) echo configs/tiny.yaml ;;
    llama) echo configs/llama-tiny.yaml ;;
    moe) echo configs/llama-tiny.yaml model.num_experts=4 model.moe_router_topk=2 \
           model.moe_ffn_hidden_size=48 model.moe_aux_loss_coeff=0.01 model.moe_z_loss_coeff=0.001 ;;
  esac
}
for model in $MODELS; do
  case $model in gpt|llama|moe) ;; *) fail "$model" "unknown model (gpt, llama, moe)"; continue ;; esac
  # shellcheck disable=SC2207
  COMMON=($(model_args "$model") "train.device=$DEV" "train.steps=$STEPS" model.vocab_size=300
          "data.train_path=$T/train.ltok" data.valid_path= checkpoint.load= logging.log_interval=5)
  # initial weights: a train.steps=0 checkpoint, exported
  if ! "$LT" train "${COMMON[@]}" train.steps=0 "checkpoint.dir=$T/$model-init" logging.metrics_file= \
       >"$T/$model-init.log" 2>&1 || ! "$LT" export "$T/$model-init" "$T/$model-hf" >>"$T/$model-init.log" 2>&1; then
    fail "${model}_setup" "initial checkpoint / export failed: $(tail -2 "$T/$model-init.log" | tr '\n' ' ')"; continue
  fi
  # the batches lattice trains on (the precision does not change them)
  if ! "$LT" batches "${COMMON[@]}" --out "$T/$model-batches.bin" >"$T/$model-batches.log" 2>&1; then
    fail "${model}_setup" "lattice batches failed: $(tail -2 "$T/$model-batches.log" | tr '\n' ' ')"; continue
  fi
  grep -q 'padded_vocab_size: 384' "$T/$model-init.log" || echo "note: padded vocab 384 not seen in the log"
  PEER_FLAGS=(--device "$DEV" --batches "$T/$model-batches.bin" --steps "$STEPS" --compare-steps "$STEPS"
              --log-interval 5)
  if [ "$COMPILE" != 1 ]; then PEER_FLAGS+=(--no-compile)
  elif [ "$model" = moe ]; then PEER_FLAGS+=(--compile-blocks); fi
  for prec in $PRECS; do
    case $prec in fp32) tol=$TOL_FP32 ;; bf16) tol=$TOL_BF16 ;; *) fail "$prec" "unknown precision"; continue ;; esac
    name=${model}_$prec
    m="$T/lattice-$name.jsonl"
    if ! "$LT" train "${COMMON[@]}" "train.precision=$prec" checkpoint.dir= "logging.metrics_file=$m" \
         >"$T/lattice-$name.log" 2>&1; then
      fail "lattice_$name" "lattice train failed: $(grep -vE '^( |[a-z_]+:$)' "$T/lattice-$name.log" | tail -2 | tr '\n' ' ')"
      continue
    fi
    "$PY" scripts/bench_peer.py "${PEER_FLAGS[@]}" --precision "$prec" --init "$T/$model-hf" \
        --losses-out "$T/peer-$name.jsonl" --compare "$m" --rtol "$tol" >"$T/peer-$name.log" 2>&1
    rc=$?
    grep -m1 '^peer: torch' "$T/peer-$name.log" | sed 's/^/  /'
    sed -n '/^compare:/,$p' "$T/peer-$name.log" | sed 's/^/  /'
    if [ $rc = 0 ]; then
      pass "peer_matches_lattice_$name ($(grep '^compare: PASS' "$T/peer-$name.log" | sed 's/^compare: PASS: //'))"
    else
      fail "peer_matches_lattice_$name" "exit status $rc: $(grep -E '^compare: FAIL|error|Error' "$T/peer-$name.log" | tail -2 | tr '\n' ' ')"
    fi
    if [ "$prec" = fp32 ]; then
      # negative control: a random init of the peer's own must not pass
      # (eager: the init is what differs)
      "$PY" scripts/bench_peer.py "${PEER_FLAGS[@]}" --no-compile --precision fp32 --steps 3 \
          --compare-steps 3 --compare "$m" --rtol "$tol" >"$T/peer-control-$model.log" 2>&1
      rc=$?
      if [ $rc = 1 ] && grep -q '^compare: FAIL' "$T/peer-control-$model.log"; then
        pass "${model}_control_other_init_fails ($(grep '^compare: FAIL' "$T/peer-control-$model.log" | sed 's/^compare: FAIL: //'))"
      else
        fail "${model}_control_other_init_fails" "expected exit 1 with compare: FAIL, got $rc"
      fi
    fi
  done
done
finish
