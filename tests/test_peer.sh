#!/usr/bin/env bash
# test_peer.sh BUILD_DIR - what the PyTorch peer benchmark (scripts/bench_peer.py,
# scripts/bench.sh) relies on, checked without torch (CI has none; the training
# comparison itself is tests/gpu/peer_check.sh): the script compiles; its
# --compare mode passes agreeing and fails disagreeing metrics; `lattice
# batches` writes the samples in lattice's order (sequential, and shuffled: a
# permutation per epoch, fixed by the seed); the peer resolves configs as
# lattice does (with and without pyyaml); its LR schedule and FLOP count give
# what lattice logs; its peak table is lattice's.
set -u
export PYTHONDONTWRITEBYTECODE=1   # the checks import the script: no __pycache__ in scripts/
BUILD=$1
LT="$BUILD/lattice"
PEER=scripts/bench_peer.py
T=$(mktemp -d /tmp/lt-peer-XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

# ---- the scripts compile (no torch needed) -----------------------------------------
for f in "$PEER" scripts/peer_model.py; do
  if out=$(python3 -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
             "$f" "$T/$(basename "$f")c" 2>&1); then pass "peer_py_compile_$(basename "$f" .py)"
  else fail "peer_py_compile_$(basename "$f" .py)" "$out"; fi
done

# ---- --compare on synthetic metrics ---------------------------------------------
python3 - "$T" <<'PY'
import json, os, sys
d = sys.argv[1]
def write(name, recs):
    with open(os.path.join(d, name), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
lat = [{"step": k, "loss": 10.9 - 0.1 * k, "lr": 1e-4 * k, "grad_norm": 2.0 + 0.1 * k,
        "tokens_per_sec": 1e5, "tflops_per_device": 1.0, "mfu": 0.1, "step_ms": 10.0}
       for k in range(1, 7)]
lat.insert(3, {"eval": True, "step": 3, "val_loss": 99.0, "val_log_ppl": 99.0, "val_samples": 8})
write("lattice.jsonl", lat)
def peer(name, prec, scale=lambda k: 1.0, gscale=lambda k: 1.0, steps=6):
    write(name, [{"step": k, "loss": (10.9 - 0.1 * k) * scale(k), "grad_norm": (2.0 + 0.1 * k) * gscale(k),
                  "precision": prec} for k in range(1, steps + 1)])
peer("bf16_close.jsonl", "bf16", lambda k: 1 + 5e-3 * (-1) ** k, lambda k: 1 + 3e-2)
peer("bf16_far.jsonl", "bf16", lambda k: 1.03 if k == 3 else 1.0)
peer("bf16_gnorm_far.jsonl", "bf16", gscale=lambda k: 1.5 if k == 2 else 1.0)
peer("fp32_1e-3.jsonl", "fp32", lambda k: 1 + 1e-3)
peer("fp32_exact.jsonl", "fp32")
peer("short.jsonl", "bf16", steps=4)
PY
cmp_case() { # name expected-exit peer-file [args...]
  local name=$1 want=$2 file=$3 out rc; shift 3
  out=$(python3 "$PEER" --compare "$T/lattice.jsonl" --peer-losses "$T/$file" "$@" 2>&1); rc=$?
  local verdict=PASS; [ "$want" != 0 ] && verdict=FAIL
  if [ $rc = "$want" ] && echo "$out" | grep -q "^compare: $verdict"; then pass "$name"
  else fail "$name" "exit $rc (want $want): $(echo "$out" | tail -2 | tr '\n' ' ')"; fi
}
cmp_case compare_bf16_within_tolerance 0 bf16_close.jsonl
cmp_case compare_bf16_loss_off_fails 1 bf16_far.jsonl
cmp_case compare_grad_norm_off_fails 1 bf16_gnorm_far.jsonl
cmp_case compare_fp32_default_tolerance_fails 1 fp32_1e-3.jsonl
cmp_case compare_fp32_given_rtol_passes 0 fp32_1e-3.jsonl --rtol 2e-3
cmp_case compare_exact_all_steps 0 fp32_exact.jsonl --compare-steps 6
cmp_case compare_missing_step_fails 1 short.jsonl --compare-steps 5
out=$(python3 "$PEER" --compare "$T/nonexistent.jsonl" --peer-losses "$T/short.jsonl" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$out" | grep -q nonexistent; then pass compare_missing_file_is_input_error
else fail compare_missing_file_is_input_error "exit $rc: $out"; fi

# ---- lattice batches: the sample order -------------------------------------------
# a random stream of 40*8+1 tokens (40 samples of seq 8), ids < 256
python3 - "$T/stream.ids" <<'PY'
import random, sys
random.seed(3)
open(sys.argv[1], "w").write(" ".join(str(random.randrange(256)) for _ in range(321)) + "\n")
PY
"$LT" shard --vocab-size 256 --input "$T/stream.ids" "$T/stream.ltok" >/dev/null ||
  { fail batches_shard "lattice shard failed"; exit 1; }
B=(configs/tiny.yaml "data.train_path=$T/stream.ltok" model.seq_length=8 train.micro_batch_size=2
   train.global_batch_size=4 train.steps=15)
ok=1
"$LT" batches "${B[@]}" data.shuffle=false --out "$T/seq.bin" >/dev/null 2>"$T/err" || ok=0
"$LT" batches "${B[@]}" --out "$T/shuf.bin" >/dev/null 2>>"$T/err" || ok=0
"$LT" batches "${B[@]}" --out "$T/shuf2.bin" >/dev/null 2>>"$T/err" || ok=0
"$LT" batches "${B[@]}" train.seed=99 --out "$T/seed99.bin" >/dev/null 2>>"$T/err" || ok=0
if [ $ok = 1 ]; then
  out=$(python3 - "$T" <<'PY' 2>&1
import sys
sys.path.insert(0, "scripts")
import bench_peer as p
d = sys.argv[1]
stream = [int(x) for x in open(d + "/stream.ids").read().split()]
S, G, N = 8, 4, 40
ids = {tuple(stream[i * S:i * S + S + 1]): i for i in range(N)}
assert len(ids) == N
def order(name):
    b = p.Batches(f"{d}/{name}.bin")
    assert (b.steps, b.samples, b.row, b.vocab) == (15, G, S + 1, 256), (b.steps, b.samples, b.row)
    c = p.resolve_config(p._parse_yaml(b.config_text, name), [])
    assert c["train"]["global_batch_size"] == G and c["model"]["seq_length"] == S
    out = []
    for k in range(b.steps):
        for r in b.rows(k):
            assert tuple(r) in ids, f"{name}: step {k}: a row that is no sample"
            out.append(ids[tuple(r)])
    return out
seq, shuf, shuf2, s99 = (order(n) for n in ("seq", "shuf", "shuf2", "seed99"))
assert seq == [i % N for i in range(60)], "sequential order"
for o in (shuf, s99):
    assert sorted(o[:N]) == list(range(N)), "epoch 1 is not a permutation"
    assert len(set(o[N:])) == 20, "epoch 2 repeats a sample"
assert shuf[:N] != list(range(N)), "shuffled order is the identity"
assert shuf[N:] != shuf[:20], "epoch 2 has epoch 1's order"
assert shuf == shuf2, "same seed, different order"
assert shuf != s99, "another seed, same order"
print("sequential and shuffled orders ok; epoch 1 shuffled starts", shuf[:6])
PY
  ) && pass "batches_sample_order ($out)" || fail batches_sample_order "$out"
else
  fail batches_sample_order "lattice batches failed: $(tail -2 "$T/err")"
fi
err=$("$LT" batches "${B[@]}" 2>&1 >/dev/null); rc=$?
if [ $rc = 2 ] && echo "$err" | grep -q -- "--out"; then pass batches_needs_out
else fail batches_needs_out "exit $rc: $err"; fi
err=$("$LT" batches configs/tiny.yaml --out "$T/x.bin" 2>&1 >/dev/null); rc=$?
if [ $rc = 2 ] && echo "$err" | grep -q "train_path" && [ ! -e "$T/x.bin" ]; then pass batches_needs_data
else fail batches_needs_data "exit $rc: $err"; fi

# ---- config resolution: the peer's view == lattice's resolved config ------------------
for cfg in configs/*.yaml; do
  name=$(basename "$cfg" .yaml)
  # a config with a setting the peer's model lacks (GPT-OSS's qk-norm, windows,
  # documents) must be refused, naming a key the config sets - never trained
  # as another model
  err=$(python3 "$PEER" --print-config --config "$cfg" 2>&1); rc=$?
  if [ $rc -ne 0 ]; then
    key=$(echo "$err" | sed -n 's/.*the peer does not implement \([a-z_]*\.[a-z_]*\)=.*/\1/p')
    if [ $rc = 2 ] && [ -n "$key" ] && grep -qE "^  ${key#*.}: *[^ ]" "$cfg"; then
      pass "peer_refuses_$name ($key)"
    else fail "peer_refuses_$name" "exit $rc: $err"; fi
    continue
  fi
  # (stops with exit 2 at the missing data, after printing the resolved config;
  # resolved for one rank - the MLPerf configs' layouts need 64 or 2 - and
  # without the MLPerf log some configs write)
  one="parallel.tensor_model_parallel_size=1 parallel.pipeline_model_parallel_size=1
       parallel.virtual_pipeline_model_parallel_size=1 parallel.sequence_parallel=false"
  "$LT" train "$cfg" train.steps=100000 data.train_path= logging.mllog= $one 2>/dev/null | sed -n '/^# lattice configuration/,$p' >"$T/$name.resolved.yaml"
  padded=$(sed -n 's/.*# padded_vocab_size: \([0-9]*\).*/\1/p' "$T/$name.resolved.yaml")
  res=ok
  [ -n "$padded" ] || { fail "peer_config_matches_lattice_$name" "lattice printed no resolved config"; continue; }
  for noyaml in "" 1; do
    a=$(BENCH_PEER_NO_YAML=$noyaml python3 "$PEER" --print-config --config "$cfg" train.steps=100000 $one 2>&1) || res="raw config: $a"
    b=$(BENCH_PEER_NO_YAML=$noyaml python3 "$PEER" --print-config --config "$T/$name.resolved.yaml" 2>&1) || res="resolved config: $b"
    [ "$res" = ok ] || break
    [ "$a" = "$b" ] || { res="peer's resolution of $cfg differs from lattice's${noyaml:+ (no pyyaml)}: $a vs $b"; break; }
    echo "$a" | grep -q "\"padded_vocab_size\": ${padded:-none}[,}]" || { res="padded vocab: lattice ${padded:-?}, peer $a"; break; }
    # decay_steps: the config's own, or (0 or unset) train.steps
    ds=$(sed -n 's/^ *decay_steps: *\([0-9]*\).*/\1/p' "$cfg"); [ "${ds:-0}" = 0 ] && ds=100000
    echo "$a" | grep -q "\"decay_steps\": $ds[,}]" || { res="decay_steps not resolved to $ds (the config's, else train.steps): $a"; break; }
  done
  [ "$res" = ok ] && pass "peer_config_matches_lattice_$name" || fail "peer_config_matches_lattice_$name" "$res"
done

# ---- LR schedule and FLOP count against what lattice logs; the peak table ---------------
# what the checks of such a run start with (python3 -c "$RUN_PY"'...' DUMP
# METRICS): the peer's module as p, the dump's config resolved by it as c, the
# metrics' step records as recs
RUN_PY='import sys
sys.path.insert(0, "scripts")
import bench_peer as p
c = p.resolve_config(p._parse_yaml(p.Batches(sys.argv[1]).config_text, sys.argv[1]), [])
recs = p.read_losses(sys.argv[2])
'
# run_and_dump METRICS DUMP ARGS...: lattice train ARGS (its metrics to
# METRICS, its output to $T/train.log), then lattice batches ARGS into DUMP
run_and_dump() {
  local m=$1 b=$2
  shift 2
  rm -f "$m"
  "$LT" train "$@" "logging.metrics_file=$m" >"$T/train.log" 2>&1 &&
    "$LT" batches "$@" --out "$b" >/dev/null 2>&1
}
R=("${B[@]}" train.steps=6 optimizer.warmup_steps=2 data.valid_path= checkpoint.dir= checkpoint.load=)
if run_and_dump "$T/m.jsonl" "$T/r.bin" "${R[@]}"; then
  out=$(python3 - "$T" <<'PY' 2>&1
import sys
sys.path.insert(0, "scripts")
import bench_peer as p
d = sys.argv[1]
b = p.Batches(d + "/r.bin")
c = p.resolve_config(p._parse_yaml(b.config_text, "r.bin"), [])
recs = p.read_losses(d + "/m.jsonl")
assert sorted(recs) == list(range(1, 7)), sorted(recs)
G = c["train"]["global_batch_size"]
worst_lr = worst_fl = 0.0
for k, r in recs.items():
    lr = p.lr_at(c, k - 1)
    worst_lr = max(worst_lr, abs(lr - r["lr"]) / max(abs(r["lr"]), 1e-30))
    flops = r["tflops_per_device"] * 1e12 * r["step_ms"] / 1e3
    worst_fl = max(worst_fl, abs(flops - p.flops_per_sample(c) * G) / flops)
assert worst_lr < 1e-6, f"LR differs from lattice's by {worst_lr:g} (relative)"
assert worst_fl < 5e-5, f"FLOPs per step differ from lattice's by {worst_fl:g} (relative)"
print(f"lr rel diff {worst_lr:.1e}, FLOPs rel diff {worst_fl:.1e} over 6 steps")
PY
  ) && pass "peer_lr_and_flops_match_lattice ($out)" || fail peer_lr_and_flops_match_lattice "$out"
else
  fail peer_lr_and_flops_match_lattice "lattice train/batches failed: $(tail -2 "$T/train.log")"
fi
# the Llama block's count (grouped K/V, a head dimension apart from hidden /
# heads, SwiGLU, untied head) and an MoE layer's (k experts and the router)
RM=(configs/llama-tiny.yaml "data.train_path=$T/stream.ltok" model.seq_length=8 train.micro_batch_size=2
    train.global_batch_size=4 train.steps=2 data.valid_path= checkpoint.dir= checkpoint.load=
    model.kv_channels=16)
res=ok
for moe in "" "model.num_experts=4 model.moe_router_topk=2 model.moe_ffn_hidden_size=48"; do
  # shellcheck disable=SC2086
  run_and_dump "$T/mm.jsonl" "$T/rm.bin" "${RM[@]}" $moe ||
    { res="${moe:-dense}: lattice train/batches failed: $(tail -2 "$T/train.log")"; break; }
  out=$(python3 -c "$RUN_PY"'
assert sorted(recs) == [1, 2], sorted(recs)
for r in recs.values():
    flops = r["tflops_per_device"] * 1e12 * r["step_ms"] / 1e3
    err = abs(flops - p.flops_per_sample(c) * 4) / flops
    assert err < 5e-5, f"FLOPs per step differ from lattice by {err:g} (relative)"' \
    "$T/rm.bin" "$T/mm.jsonl" 2>&1) || { res="${moe:-dense}: $out"; break; }
done
[ "$res" = ok ] && pass peer_llama_and_moe_flops_match_lattice || fail peer_llama_and_moe_flops_match_lattice "$res"
# MoE shapes the peer's model lacks are refused by name
res=ok
for bad in model.moe_shared_expert_intermediate_size=32 model.moe_router_score_function=sigmoid \
    model.moe_expert_capacity_factor=1.5 model.moe_layer_freq=2 model.moe_router_enable_expert_bias=true \
    "model.moe_router_num_groups=2 model.moe_router_group_topk=1"; do
  err=$(python3 "$PEER" --print-config --config configs/llama-tiny.yaml model.num_experts=4 $bad 2>&1); rc=$?
  [ $rc = 2 ] && echo "$err" | grep -q "does not implement ${bad%%=*}=" || { res="$bad: exit $rc: $err"; break; }
done
[ "$res" = ok ] && pass peer_refuses_other_moe_shapes || fail peer_refuses_other_moe_shapes "$res"
# so are gpt-oss's features: its gated activation, dense or MoE, sinks, biases, YaRN
res=ok
for bad in model.quick_geglu=true model.glu_linear_offset=1 model.activation_func_clamp_value=7 \
    model.softmax_type=learnable model.add_bias_linear=true model.add_qkv_bias=true \
    model.rope_scaling=yarn; do
  err=$(python3 "$PEER" --print-config --config configs/llama-tiny.yaml "$bad" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$err" | grep -q "does not implement ${bad%%=*}=" || { res="$bad: exit $rc: $err"; break; }
done
[ "$res" = ok ] && pass peer_refuses_gpt_oss_features || fail peer_refuses_gpt_oss_features "$res"
# every other decay style: the peer's lr_at is lattice's lt_lr_at
res=ok
for sched in "optimizer.lr_decay_style=linear" "optimizer.lr_decay_style=constant" \
    "optimizer.lr_decay_style=inverse_square_root optimizer.decay_steps=5" \
    "optimizer.lr_decay_style=wsd optimizer.lr_wsd_decay_steps=3 optimizer.lr_wsd_decay_style=minus_sqrt" \
    "optimizer.lr_decay_style=wsd optimizer.lr_wsd_decay_steps=4 optimizer.lr_wsd_decay_style=exponential"; do
  # shellcheck disable=SC2086
  run_and_dump "$T/ms.jsonl" "$T/rs.bin" "${R[@]}" $sched ||
    { res="$sched: lattice train/batches failed: $(tail -2 "$T/train.log")"; break; }
  out=$(python3 -c "$RUN_PY"'
assert sorted(recs) == list(range(1, 7)), sorted(recs)
lrs = [p.lr_at(c, k - 1) for k in sorted(recs)]
for k, lr in zip(sorted(recs), lrs):
    assert abs(lr - recs[k]["lr"]) <= 1e-6 * abs(recs[k]["lr"]), (k, lr, recs[k]["lr"])
assert len(set(lrs)) > 1, f"a schedule that does not change: {lrs}"' \
    "$T/rs.bin" "$T/ms.jsonl" 2>&1) || { res="$sched: $out"; break; }
done
[ "$res" = ok ] && pass peer_lr_styles_match_lattice || fail peer_lr_styles_match_lattice "$res"
# the peer reads the schedule keys and model.init_method_std (its random init's
# std), and refuses a wsd schedule without its decay steps as lattice does
a=$(python3 "$PEER" --print-config --config configs/tiny.yaml model.init_method_std=0.008 \
    optimizer.lr_decay_style=WSD optimizer.lr_wsd_decay_steps=5 2>&1)
b=$(python3 "$PEER" --print-config --config configs/tiny.yaml optimizer.lr_decay_style=wsd 2>&1); rc=$?
if echo "$a" | grep -q '"init_method_std": 0.008,' && echo "$a" | grep -q '"lr_decay_style": "wsd",' &&
   echo "$a" | grep -q '"lr_wsd_decay_steps": 5,' && [ $rc = 2 ] && echo "$b" | grep -q "lr_wsd_decay_steps"
then pass peer_reads_schedule_and_init_keys
else fail peer_reads_schedule_and_init_keys "$a / exit $rc: $b"; fi
out=$(python3 - <<'PY' 2>&1
import re, sys
sys.path.insert(0, "scripts")
import bench_peer as p
src = open("src/observability/metrics.c").read()
table = [(a, float(b), float(c)) for a, b, c in
         re.findall(r'\{"([^"]+)",\s*([0-9.]+),\s*([0-9.]+)\}', src)]
assert table, "no peak table found in src/observability/metrics.c"
assert table == p.PEAKS, f"lattice {table} vs peer {p.PEAKS}"
assert p.peak_from_table("NVIDIA H100 80GB HBM3", "bf16") == 989.4
print(f"{len(table)} entries")
PY
) && pass "peer_peak_table_is_lattices ($out)" || fail peer_peak_table_is_lattices "$out"

[ $failures = 0 ]
