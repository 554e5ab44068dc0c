#!/usr/bin/env bash
# test_plan.sh BUILD_DIR - the planner (lattice plan): its memory prediction
# for a layout agrees with what the engine allocates (the run summary's
# "memory bytes per rank" line, and every stage's activations) within 5% in
# each category, and the run summary prints it next to the allocation, over the layouts the suite trains (data, tensor, sequence and
# pipeline parallelism, ZeRO 0/1/2, recomputation, bf16; GPT and Llama); its table for GPT-2
# 1.5B on 8 GPUs; its refusals.
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" plan
command -v mpirun >/dev/null || { fail mpirun "mpirun not found (openmpi-bin)"; exit 1; }
random_shard "$T/train.ltok" 50000 7 || { fail prepare "lattice shard failed"; exit 1; }
BASE="configs/tiny.yaml model.num_layers=4 data.train_path=$T/train.ltok train.steps=0
      train.micro_batch_size=2"

agree() { # name ranks overrides...
  local name=$1 np=$2; shift 2
  local launch="$LT"
  [ "$np" -gt 1 ] && launch="timeout 120 mpirun --allow-run-as-root --oversubscribe -np $np $LT"
  $launch train $BASE "$@" > "$T/$name.run" 2>&1 || { fail "$name" "run: $(tail -2 "$T/$name.run")"; return; }
  "$LT" plan $BASE "$@" --layout --gpus "$np" > "$T/$name.plan" 2>&1 || { fail "$name" "plan: $(tail -2 "$T/$name.plan")"; return; }
  local err
  if err=$(python3 - "$T/$name.run" "$T/$name.plan" <<'PY'
import re, sys
run, plan = open(sys.argv[1]).read(), open(sys.argv[2]).read()
cats = ('params', 'grads', 'optimizer', 'activations', 'workspace')
got = {k: int(v) for k, v in re.findall(r'(\w+)=(\d+)', re.search(r'memory bytes per rank: (.*)', run).group(1))}
want = {k: int(v) for k, v in re.findall(r'(\w+)=(\d+)', re.search(r'predicted, stage 0\): (.*)', plan).group(1))}
for k in cats:
    assert abs(want[k] - got[k]) <= 0.05 * max(got[k], 1), f'{k}: engine {got[k]}, planner {want[k]}'
# every stage's activations (the pipeline line of the summary)
stages = [int(float(b)) for b in re.findall(r'stage \d+ [\d.]+ MiB \((\d+) bytes', run)]
pred = [int(v) for v in re.findall(r'predicted, stage \d+\): .*activations=(\d+)', plan)]
if stages:
    assert len(stages) == len(pred), (stages, pred)
    for s, (a, b) in enumerate(zip(stages, pred)):
        assert abs(a - b) <= 0.05 * a, f'stage {s} activations: engine {a}, planner {b}'
# the engine prints the planner's prediction next to its allocation
pct = float(re.search(r"planner's prediction .*\(([-+][\d.]+)% of the allocation\)", run).group(1))
assert abs(pct) <= 5.0, f'the run summary says {pct}%'
print(f"{len(cats)} categories{' and %d stages' % len(stages) if stages else ''}")
PY
  2>&1); then pass "plan_memory_$name ($err)"
  else fail "plan_memory_$name" "$(echo "$err" | tail -1)"; fi
}
agree single 1
agree dp2_zero1 2 optimizer.zero_stage=1
agree dp2_zero2 2 optimizer.zero_stage=2
agree tp2_sp 2 parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true
agree pp2_vpp2 2 parallel.pipeline_model_parallel_size=2 parallel.virtual_pipeline_model_parallel_size=2
agree pp2_full_bf16 2 parallel.pipeline_model_parallel_size=2 train.recompute=full train.precision=bf16
agree tp2_pp2_dp2_sel 8 parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 \
  optimizer.zero_stage=1 train.recompute=selective train.global_batch_size=16
# the Llama block (RMSNorm statistics, grouped qkv, SwiGLU's gate|up, the rotary table,
# an untied LM head)
LBASE="configs/llama-tiny.yaml model.num_layers=4 data.train_path=$T/train.ltok train.steps=0
       train.micro_batch_size=2"
BASE="$LBASE" agree llama_single_full_bf16 1 train.recompute=full train.precision=bf16
BASE="$LBASE" agree llama_tp2_sp 2 parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true
BASE="$LBASE" agree llama_pp2_dp2_zero2_sel 4 parallel.pipeline_model_parallel_size=2 \
  optimizer.zero_stage=2 train.recompute=selective

# the table: GPT-2 1.5B on one 8-GPU node
"$LT" plan configs/gpt2-1.5b.yaml --gpus 8 --top 5 --show 1x4x2 > "$T/table" 2>&1
rc=$?
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ ' "$T/table")
if [ $rc -eq 0 ] && [ "$rows" -eq 6 ] && grep -q "layouts, [0-9]* fit" "$T/table" &&
   grep -A1 -- "--show 1x4x2, the fastest such layout" "$T/table" | grep -qE "^ +1 +4 +2 +2 "; then pass plan_table
else fail plan_table "rc=$rc rows=$rows: $(head -3 "$T/table")"; fi
# refusals: GPUs not a multiple of the node size; a model that fits nowhere
"$LT" plan configs/gpt2-1.5b.yaml --gpus 12 > "$T/r1" 2>&1
rc1=$?
"$LT" plan configs/gpt2-1.5b.yaml --gpus 8 --gpu-mem-gib 1 > "$T/r2" 2>&1
rc2=$?
if [ $rc1 -eq 2 ] && grep -q "multiple of --gpus-per-node" "$T/r1" && [ $rc2 -eq 2 ] &&
   grep -q "fits nowhere on 8 x 1 GiB: the smallest layout .* needs [0-9.]* GiB per GPU" "$T/r2"; then
  pass plan_refusals
else fail plan_refusals "rc $rc1/$rc2: $(cat "$T/r1" "$T/r2" | grep error | head -2)"; fi
exit $((failures > 0))
