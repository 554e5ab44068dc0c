#!/usr/bin/env bash
# test_plan.sh BUILD_DIR - the planner (lattice plan): its memory prediction
# for a layout agrees with what the engine allocates (the run summary's
# "memory bytes per rank" line, and every stage's activations) within 5% in
# each category, and the run summary prints it next to the allocation, over the layouts the suite trains (data, tensor, sequence and
# pipeline parallelism, ZeRO 0/1/2, recomputation, bf16; GPT and Llama; mixture of
# experts with expert parallelism); its table for GPT-2 1.5B on 8 GPUs; its
# refusals (expert tensor parallelism among them); the experts' expected load (--moe-load, and
# an EP run's prediction at the load it measured). lattice plan --calibrate on the CPU (plausible
# figures, a file that --calibration takes and that moves the prediction the
# right way and that a run predicts with (LT_PLAN_CALIBRATION); malformed files
# refused naming the field; --device cuda refused
# without a GPU; the all-reduce under mpirun -np 2).
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
  if err=$(python3 - "$T/$name.run" "$T/$name.plan" "$*" <<'PY'
import re, sys
run, plan = open(sys.argv[1]).read(), open(sys.argv[2]).read()
cats = ('params', 'grads', 'optimizer', 'activations', 'workspace', 'comm')
got = {k: int(v) for k, v in re.findall(r'(\w+)=(\d+)', re.search(r'memory bytes per rank: (.*)', run).group(1))}
want = {k: int(v) for k, v in re.findall(r'(\w+)=(\d+)', re.search(r'predicted, stage 0\): (.*)', plan).group(1))}
for k in cats:
    assert abs(want[k] - got[k]) <= 0.05 * max(got[k], 1), f'{k}: engine {got[k]}, planner {want[k]}'
# every stage's activations (the pipeline line of the summary)
stages = [int(float(b)) for b in re.findall(r'stage \d+ [\d.]+ MiB \((\d+) bytes', run)]
# communication buffers: a pipeline's message pool, ZeRO-2's bucket buffers
if stages or re.search(r'zero_stage=2', sys.argv[3]):
    assert got['comm'] > 0, f'no communication buffers counted: {got}'
pred = [int(v) for v in re.findall(r'predicted, stage \d+\): .*activations=(\d+)', plan)]
if stages:
    assert len(stages) == len(pred), (stages, pred)
    for s, (a, b) in enumerate(zip(stages, pred)):
        assert abs(a - b) <= 0.05 * a, f'stage {s} activations: engine {a}, planner {b}'
# the engine prints the planner's prediction next to its allocation
pct = float(re.search(r"planner's prediction .*\(([-+][\d.]+)% of the allocation\)", run).group(1))
assert abs(pct) <= 5.0, f'the run summary says {pct}%'
print(f"{len(cats)} categories{' and %d stages' % len(stages) if stages else ''}, comm {got['comm']} bytes")
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
# receives posted ahead over MPI hold more micro batches in flight
agree pp2_p2p_ahead 2 parallel.pipeline_model_parallel_size=2 parallel.overlap_p2p_comm=true \
  train.global_batch_size=8
# the overlap's buffers: ZeRO-2's staging ring, the row blocks of tp_comm_overlap
agree dp2_zero2_overlap 2 optimizer.zero_stage=2 parallel.overlap_grad_reduce=true \
  parallel.overlap_param_gather=true
# ZeRO-2 with the embeddings larger than a layer: the ring holds a layer-sized piece
agree dp2_zero2_overlap_pieces 2 optimizer.zero_stage=2 parallel.overlap_grad_reduce=true \
  model.vocab_size=1024
agree tp2_sp_tp_overlap 2 parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true \
  parallel.tp_comm_overlap=true
# uneven stages: the ends counted as layers (the first chunk holds none), and a
# first stage of its own size under recomputation
agree pp2_vpp3_embedding_loss 2 parallel.pipeline_model_parallel_size=2 \
  parallel.virtual_pipeline_model_parallel_size=3 parallel.account_for_embedding_in_pipeline_split=true \
  parallel.account_for_loss_in_pipeline_split=true
agree pp3_first2_sel 3 parallel.pipeline_model_parallel_size=3 \
  parallel.num_layers_in_first_pipeline_stage=2 train.recompute=selective
# mixture of experts (every slot layer's routed-expert buffers, the backward's
# workspace, the MLP buffers of the widest dense or shared expert): one rank; EP 2
# over TP 2 with SP; EP 2 over DP with pipeline stages (the engine's LT_PLAN_CHECK
# holds every stage); a shared expert on every second layer, interleaved, ZeRO 2;
# Llama experts under EP 4 over TP 2 x DP 2 with full recomputation; capacity padding;
# expert tensor parallelism (ETP 2 x EP 2 over TP 2 x DP 2 with ZeRO 1, Llama ETP 4)
MOE="model.num_experts=4 model.moe_ffn_hidden_size=48 model.moe_aux_loss_coeff=0.01"
EP2=parallel.expert_model_parallel_size=2
agree moe_single 1 $MOE
agree moe_ep2_tp2_sp 2 $MOE $EP2 parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true
agree moe_ep2_pp2 4 $MOE $EP2 parallel.pipeline_model_parallel_size=2
agree moe_shared_pp2_vpp2_zero2 4 $MOE $EP2 "model.moe_layer_freq=([0,1]*2)" \
  model.moe_shared_expert_intermediate_size=96 parallel.pipeline_model_parallel_size=2 \
  parallel.virtual_pipeline_model_parallel_size=2 optimizer.zero_stage=2
BASE="$LBASE" agree moe_llama_ep4_full 4 $MOE parallel.expert_model_parallel_size=4 \
  parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true train.recompute=full
agree moe_capacity_pad 2 $MOE $EP2 model.moe_expert_capacity_factor=1.5 \
  model.moe_pad_expert_input_to_capacity=true train.precision=bf16
agree moe_etp2_ep2_zero1 4 $MOE $EP2 parallel.expert_tensor_parallel_size=2 \
  parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true optimizer.zero_stage=1
BASE="$LBASE" agree moe_llama_etp4 4 $MOE parallel.expert_tensor_parallel_size=4 \
  parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true
# the shared expert's gate keeps its ungated output and the gate per slot layer,
# also under full recomputation
BASE="$LBASE" agree moe_llama_shared_gate_full 2 $MOE $EP2 model.moe_shared_expert_intermediate_size=64 \
  model.moe_shared_expert_gate=true parallel.tensor_model_parallel_size=2 \
  parallel.sequence_parallel=true train.recompute=full

# the step-time model's overlap (lattice plan --layout prints a layout's step by
# part): what each switch hides, where the layout and the library allow it
steps() { # out config overrides... -> one "step time" line per --overlap none/all
  local out=$1; shift
  : > "$out"
  for o in none all; do "$LT" plan "$@" --layout --overlap $o | grep '^step time' >> "$out"; done
}
P124="configs/gpt2-124m.yaml --gpus 8 train.micro_batch_size=8"
steps "$T/ov_dp1" $P124 optimizer.zero_stage=1
steps "$T/ov_dp2" $P124 optimizer.zero_stage=2
steps "$T/ov_tp" $P124 parallel.tensor_model_parallel_size=4 parallel.sequence_parallel=true
steps "$T/ov_pp_gpu" $P124 parallel.pipeline_model_parallel_size=2
steps "$T/ov_pp_cpu" $P124 parallel.pipeline_model_parallel_size=2 --gpu cpu
for rc in none selective full; do steps "$T/rc_$rc" $P124 train.recompute=$rc; done
steps "$T/split_last4" $P124 parallel.pipeline_model_parallel_size=2 \
  parallel.num_layers_in_last_pipeline_stage=4
steps "$T/split_first4" $P124 parallel.pipeline_model_parallel_size=2 \
  parallel.num_layers_in_first_pipeline_stage=4
steps "$T/split_last4_full" $P124 parallel.pipeline_model_parallel_size=2 \
  parallel.num_layers_in_last_pipeline_stage=4 train.recompute=full
steps "$T/split_even_full" $P124 parallel.pipeline_model_parallel_size=2 train.recompute=full
"$LT" plan $P124 --overlap sometimes > "$T/ov_bad" 2>&1; rcb=$?
if err=$(python3 - "$T" $rcb <<'PY' 2>&1
import re, sys
T, rcb = sys.argv[1], int(sys.argv[2])
def parts(name):
    rows = []
    for line in open(f'{T}/{name}'):
        r = {'overlap': re.search(r'overlap: ([^)]*)\)', line).group(1).split(),
             'step': float(re.search(r': ([\d.]+) s =', line).group(1)),
             'compute': float(re.search(r'= compute ([\d.]+)', line).group(1))}
        for kind in ('tp', 'pp', 'dp'):
            r['x' + kind] = float(re.search(rf'exposed communication.*?{kind} ([\d.]+)', line).group(1))
            r['h' + kind] = float(re.search(rf'hidden by overlap:.*?{kind} ([\d.]+)', line).group(1))
        rows.append(r)
    assert len(rows) == 2, f'{name}: {len(rows)} step lines'
    return rows
def hides(name, kind):
    off, on = parts(name)
    assert off['overlap'] == ['none'] and off['h' + kind] == 0, (name, off)
    assert on['x' + kind] < off['x' + kind] and on['h' + kind] > 0, (name, kind, off, on)
    # what is hidden is what was exposed (within the printed rounding)
    assert abs(on['x' + kind] + on['h' + kind] - off['x' + kind]) <= 1e-4 + 1e-3 * off['x' + kind], (name, off, on)
    assert on['step'] < off['step'], (name, off['step'], on['step'])
    return off, on
off1, on1 = hides('ov_dp1', 'dp')
assert on1['overlap'] == ['grad-reduce', 'param-gather'], on1['overlap']
off2, _ = hides('ov_dp2', 'dp')
# ZeRO 2 reduce-scatters after each of the 8 micro batches, ZeRO 1 once
assert off2['xdp'] > 4 * off1['xdp'], (off1['xdp'], off2['xdp'])
hides('ov_tp', 'tp')
gpu_off, gpu_on = parts('ov_pp_gpu')
# NCCL: the stage-to-stage messages stay on the compute stream
assert 'p2p' not in gpu_on['overlap'] and gpu_on['xpp'] == gpu_off['xpp'] > 0 and gpu_on['hpp'] == 0, gpu_on
hides('ov_pp_cpu', 'pp')
assert 'p2p' in parts('ov_pp_cpu')[1]['overlap']
assert rcb == 2 and '--overlap takes config, all or none' in open(f'{T}/ov_bad').read()
# the last stage holds the LM head besides half the layers and sets the pace: its
# pass costs more than half of the one-stage pass (GPT-2 124M: (12/2 x 17.3 M + 77.3 M)
# / (12 x 17.3 M + 77.3 M) FLOPs per token = 0.64; 8 and 16 micro batches)
ratio = (parts('ov_pp_gpu')[0]['compute'] / 16) / (off1['compute'] / 8)
assert 0.6 < ratio < 0.68, ratio
# the stage with the most work sets the pace: 4 layers and the head on the last
# stage, 8 on the first: max(8 x 17.3, 4 x 17.3 + 77.3) / (6 x 17.3 + 77.3) = 0.81
# of the even split; 8 layers and the head on the last: 1.19
even = parts('ov_pp_gpu')[0]['compute']
r_last, r_first = (parts(n)[0]['compute'] / even for n in ('split_last4', 'split_first4'))
assert 0.78 < r_last < 0.84 and 1.15 < r_first < 1.23, (r_last, r_first)
# stages are paced by time, not FLOPs: with full recomputation the 8 layers of the
# first stage (recomputed) outweigh the last stage's 4 and the head (not), so the
# recomputation costs the 8 | 4 split its full per-layer share, more than the
# even split, whose pace holds the head
full = lambda n: parts(n)[0]['compute']
assert full('split_last4_full') / full('split_last4') > full('split_even_full') / even + 0.005, \
    (full('split_last4_full'), full('split_last4'), full('split_even_full'), even)
# recomputation costs backward time: selective the attention core, full the forward
c = [parts(f'rc_{rc}')[0]['compute'] for rc in ('none', 'selective', 'full')]
# (full: each layer's forward up to the MLP activation, less than the whole forward)
assert c[0] < c[1] < c[2] < c[0] * 4 / 3 - 0.01 * c[0], c
print(f"dp hidden {on1['hdp']:.4f} s of {off1['xdp']:.4f}; ZeRO 2 exposes {off2['xdp'] / off1['xdp']:.1f}x ZeRO 1's")
PY
); then pass "plan_overlap_model ($err)"
else fail plan_overlap_model "$(echo "$err" | tail -2)"; fi

# the run prints the planner's step prediction for its own layout (on a GPU the
# row of that GPU; here the cpu row, named) beside what it measured, the same
# figure as lattice plan --layout
P2="$BASE train.steps=6 optimizer.zero_stage=1 parallel.overlap_grad_reduce=true"
LT_PLAN_DEVICE=cpu timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$LT" train $P2 \
  > "$T/pstep.run" 2>&1; rcp=$?
"$LT" plan $P2 --layout --gpus 2 --gpus-per-node 2 --gpu cpu > "$T/pstep.plan" 2>&1
LT_PLAN_DEVICE=nosuch "$LT" train $BASE train.steps=2 > "$T/pstep.bad" 2>&1; rcb=$?
if err=$(python3 - "$T/pstep.run" "$T/pstep.plan" $rcp "$T/pstep.bad" $rcb <<'PY' 2>&1
import re, sys
run, plan, rcp, bad, rcb = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3]), open(sys.argv[4]).read(), int(sys.argv[5])
assert rcp == 0, f'run exited {rcp}'
m = re.search(r"plan +step predicted on cpu \(lattice plan --layout; overlap: grad-reduce\): ([\d.]+) ms", run)
assert m, 'no prediction line in the run summary'
want = float(re.search(r'^step time .*?: ([\d.]+) s =', plan, re.M).group(1)) * 1e3
assert abs(float(m.group(1)) - want) <= 0.05 + 1e-3 * want, (m.group(1), want)
d = re.search(r'planned:  the planner predicted ([\d.]+) ms per step on cpu; measured ([\d.]+) ms \(([\d.]+)x\)', run)
assert d and float(d.group(3)) > 0, 'no done line with the prediction'
# the ratio is of the unrounded figures: within the printed figures' rounding
p_, m_ = float(d.group(1)), float(d.group(2))
assert (m_ - 0.05) / (p_ + 0.05) - 0.01 <= float(d.group(3)) <= (m_ + 0.05) / max(p_ - 0.05, 1e-9) + 0.01, d.groups()
assert rcb == 0 and 'LT_PLAN_DEVICE=nosuch: no such planner device' in bad, (rcb, bad[-300:])
print(f'predicted {d.group(1)} ms, measured {d.group(2)} ms')
PY
); then pass "plan_step_in_run ($err)"
else fail plan_step_in_run "$(echo "$err" | tail -1)"; fi

# the table: GPT-2 1.5B on one 8-GPU node
"$LT" plan configs/gpt2-1.5b.yaml --gpus 8 --top 5 --show 1x4x2 > "$T/table" 2>&1
rc=$?
rows=$(grep -cE '^[ *] *[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ ' "$T/table")
if [ $rc -eq 0 ] && [ "$rows" -eq 6 ] && grep -q "layouts, [0-9]* fit" "$T/table" &&
   grep -A1 -- "--show 1x4x2, the fastest such layout" "$T/table" | grep -qE "^[ *] *1 +4 +2 +2 "; then pass plan_table
else fail plan_table "rc=$rc rows=$rows: $(head -3 "$T/table")"; fi
# the legend under the table (and in --help) names every column; the config's own
# layout (GPT-2 1.5B: tp 1, pp 1, micro batch 16, ZeRO 0) is the marked row, and only it
"$LT" plan --help > "$T/help" 2>&1
legend_ok=1
for w in "tp, pp, dp: tensor-, pipeline-, data-parallel size" "vpp: virtual pipeline" \
         "mbs: micro batch size" "rc: activation recomputation" "zero: ZeRO stage" \
         "sp: sequence parallelism" "split: layers" "ws (workspace)" "binds: what limits" \
         "*: the config's own layout"; do
  grep -qF -- "$w" "$T/table" && grep -qF -- "$w" "$T/help" || { legend_ok=0; echo "missing: $w"; }
done
marked=$(grep -c '^\*' "$T/table")
if [ $legend_ok -eq 1 ] && [ "$marked" -eq 1 ] &&
   grep -qE '^\* *1 +1 +1 +8 +16 +none +0 +n +even ' "$T/table"; then pass plan_legend_and_mark
else fail plan_legend_and_mark "legend $legend_ok, $marked marked: $(grep '^\*' "$T/table")"; fi
# a mixture-of-experts model: expert parallelism enumerated beside TP/PP/DP/VPP (every
# divisor of tp x dp that divides the experts), and expert tensor parallelism (every
# divisor of the expert width whose product with EP divides tp x dp), in columns of
# their own (a dense table has none); --layout takes the config's EP and prints its
# all-to-all
"$LT" plan configs/tiny.yaml $MOE train.micro_batch_size=1 --gpus 8 --gpu h100 --top 5000 > "$T/tmoe" 2>&1; rc=$?
"$LT" plan configs/tiny.yaml $MOE $EP2 parallel.tensor_model_parallel_size=2 \
  parallel.sequence_parallel=true --layout --gpus 4 --gpu h100 > "$T/lmoe" 2>&1; rc2=$?
if err=$(python3 - "$T/tmoe" $rc "$T/lmoe" $rc2 "$T/table" <<'PY' 2>&1
import re, sys
text, rc, lay, rc2, dense = open(sys.argv[1]).read(), int(sys.argv[2]), open(sys.argv[3]).read(), int(sys.argv[4]), open(sys.argv[5]).read()
assert rc == 0 and rc2 == 0, (rc, rc2, text[-300:], lay[-300:])
head = [l for l in text.splitlines() if l.startswith(' tp ')][0]
assert head.split('|')[0].split()[-2:] == ['ep', 'etp'], head
assert [l for l in dense.splitlines() if l.startswith(' tp ')][0].split('|')[0].split()[-1] == 'split'
rows = [l[1:].split('|')[0].split() for l in text.splitlines() if re.match(r'^[ *] *\d+ +\d+ +\d+ +\d+ +\d+ ', l)]
shapes = {}
etps = set()
for r in rows:
    tp, dp, ep, etp = int(r[0]), int(r[3]), int(r[9]), int(r[10])
    assert (tp * dp) % (ep * etp) == 0 and 4 % ep == 0 and 48 % etp == 0, r
    shapes.setdefault((tp, dp), set()).add(ep)
    etps.add((tp * dp, ep, etp))
assert {1, 2, 4} <= set().union(*shapes.values()), shapes
assert any(4 in e and len(e) == 3 for (tp, dp), e in shapes.items()), shapes
# ETP: every divisor of the width 48 whose product with EP divides tp x dp = 8
want = {(8, ep, etp) for ep in (1, 2, 4) for etp in (1, 2, 4, 8) if 8 % (ep * etp) == 0}
assert want <= etps, sorted(want - etps)
assert 'tp 2, pp 1, vpp 1, dp 2, ep 2 (4 experts)' in lay, lay[:300]
a2a = re.search(r'all-to-all \(expert parallelism\): ([\d.]+) MB per step leave the rank', lay)
ep = float(re.search(r'exposed communication .*, ep ([\d.]+) \+', lay).group(1))
assert a2a and float(a2a.group(1)) > 0 and ep > 0, lay
print(f'{len(rows)} rows, EP per (tp, dp): ' + ', '.join(f'{k}: {sorted(v)}' for k, v in sorted(shapes.items())) + f'; ETP up to {max(e for _, _, e in etps)}')
PY
); then pass "plan_moe_enumerates_ep ($err)"
else fail plan_moe_enumerates_ep "$(echo "$err" | tail -2)"; fi
# a config whose layout is not in the table says where it stands or why it is not
"$LT" plan configs/demo.yaml --gpus 8 --top 2 > "$T/tdemo" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "the config's own layout does not validate on 8 GPUs: train.global_batch_size (16) .*try train.micro_batch_size=2" "$T/tdemo" &&
   [ "$(grep -c '^\*' "$T/tdemo")" -eq 0 ]; then pass plan_config_layout_not_shown
else fail plan_config_layout_not_shown "rc=$rc: $(grep "own layout" "$T/tdemo")"; fi
# --layout: each stage's bytes, then the same in GiB
"$LT" plan configs/gpt2-124m.yaml --layout --gpus 2 parallel.pipeline_model_parallel_size=2 > "$T/lgib" 2>&1; rc=$?
if err=$(python3 - "$T/lgib" $rc <<'PY' 2>&1
import re, sys
text, rc = open(sys.argv[1]).read(), int(sys.argv[2])
assert rc == 0, rc
pairs = re.findall(r'predicted, stage (\d+)\): .*total=(\d+)\n  = ([\d.]+) GiB: params', text)
assert len(pairs) == 2, text
for stage, total, gib in pairs:
    assert abs(int(total) / 2**30 - float(gib)) < 0.006, (stage, total, gib)
print(f'{len(pairs)} stages, {pairs[0][2]} GiB on stage 0')
PY
); then pass "plan_layout_gib ($err)"
else fail plan_layout_gib "$(echo "$err" | tail -1)"; fi
# layouts faster than the best that fits but over the memory are listed apart, marked
"$LT" plan configs/llama3.1-8b.yaml --gpus 8 --top 2 > "$T/table8b" 2>&1; rc=$?
if err=$(python3 - "$T/table8b" $rc <<'PY' 2>&1
import re, sys
text, rc = open(sys.argv[1]).read(), int(sys.argv[2])
assert rc == 0, rc
head, _, tail = text.partition('faster, but over 80 GiB per GPU (they do not fit):')
assert tail, 'no list of faster layouts that do not fit'
row = lambda l: re.match(r'^[ *] *\d+ +\d+ +\d+ +\d+ +\d+ ', l)
fit = [l for l in head.splitlines() if row(l)]
over = [l for l in tail.splitlines() if row(l)]
step = lambda l: float(l.split('|')[2].split()[0])
gib = lambda l: float(l.split('|')[1].split()[-1])
assert len(fit) == 2 and 1 <= len(over) <= 3, (len(fit), len(over))
assert all('memory (does not fit)' in l and gib(l) > 80 and step(l) < step(fit[0]) for l in over), over
assert all(gib(l) <= 80 for l in fit), fit
print(f'{len(over)} faster layouts over 80 GiB')
PY
); then pass "plan_table_marks_what_does_not_fit ($err)"
else fail plan_table_marks_what_does_not_fit "$(echo "$err" | tail -1)"; fi
# Llama 3.1 405B on 256 GPUs: the even split leaves pp 1 or 2 (126 layers); with
# the embedding and loss counted as layers deeper pipelines fit and lead (without
# the overlap, whose staging buffers leave no even layout in 80 GB)
"$LT" plan configs/llama3.1-405b.yaml --gpus 256 --top 3 --show 8x2 --overlap none > "$T/t405" 2>&1; rc=$?
if err=$(python3 - "$T/t405" $rc <<'PY' 2>&1
import re, sys
text, rc = open(sys.argv[1]).read(), int(sys.argv[2])
assert rc == 0, rc
head = text.split('faster, but over')[0].split('--show')[0]
rows = [l[1:].split() for l in head.splitlines() if re.match(r'^[ *] *\d+ +\d+ +\d+ +\d+ +\d+ ', l)]
assert len(rows) == 3 and all(r[8] != 'even' and int(r[1]) >= 4 for r in rows), rows
even = re.search(r'--show 8x2x1.*\n[ *]( *8 +2 +1 .*)', text)
assert even and even.group(1).split()[8] == 'even', text[-400:]
step = lambda l: float(l.split('|')[2].split()[0])
assert step(' '.join(rows[0])) < 0.7 * step(even.group(1)), (rows[0], even.group(1))
print(f'tp {rows[0][0]} pp {rows[0][1]} vpp {rows[0][2]} {rows[0][8]} first')
PY
); then pass "plan_uneven_split_405b ($err)"
else fail plan_uneven_split_405b "$(echo "$err" | tail -1)"; fi

# the balancing last stage: GPT-2 124M's LM head costs 4.5 of its 12 layers, so on
# 2 stages the planner puts 4 layers on the last (8 | 4 + head, against 6 | 6 + head,
# the even split at the same micro batch)
"$LT" plan configs/gpt2-124m.yaml --gpus 2 --gpus-per-node 2 --top 1 --show 1x2 > "$T/t124" 2>&1; rc=$?
row=$(grep -A1 -- "--show 1x2x1" "$T/t124" | tail -1)
mbs=$(echo "$row" | tr -d '*' | awk '{print $5}')
"$LT" plan configs/gpt2-124m.yaml --gpus 2 --gpus-per-node 2 --layout \
  parallel.pipeline_model_parallel_size=2 train.micro_batch_size=$mbs > "$T/t124even" 2>&1
even=$(sed -n 's/^step time .*: \([0-9.]*\) s = .*/\1/p' "$T/t124even")
if [ $rc -eq 0 ] && echo "$row" | grep -qE '^[ *] *1 +2 +1 +1 +[0-9]+ +none +[0-9] +n +l4 ' &&
   python3 -c "import sys; s, e = float(sys.argv[1].split('|')[2].split()[0]), float(sys.argv[2]); assert s < 0.9 * e, (s, e)" "$row" "$even"; then
  pass "plan_balanced_last_stage ($(echo "$row" | awk -F'|' '{print $3}' | awk '{print $1}') s against $even s even)"
else fail plan_balanced_last_stage "rc=$rc row='$row' even='$even'"; fi

# refusals: GPUs not a multiple of the node size; a model that fits nowhere
"$LT" plan configs/gpt2-1.5b.yaml --gpus 12 > "$T/r1" 2>&1
rc1=$?
"$LT" plan configs/gpt2-1.5b.yaml --gpus 8 --gpu-mem-gib 1 > "$T/r2" 2>&1
rc2=$?
if [ $rc1 -eq 2 ] && grep -q "multiple of --gpus-per-node" "$T/r1" && [ $rc2 -eq 2 ] &&
   grep -q "fits nowhere on 8 x 1 GiB: the smallest layout .* needs [0-9.]* GiB per GPU" "$T/r2"; then
  pass plan_refusals
else fail plan_refusals "rc $rc1/$rc2: $(cat "$T/r1" "$T/r2" | grep error | head -2)"; fi

# mixture of experts: an ETP that does not divide the expert width, an EP that
# does not divide the experts or the stage's ranks are refused as the config
# refuses them (--layout: the table chooses EP and ETP itself)
"$LT" plan configs/tiny.yaml model.num_experts=4 parallel.expert_tensor_parallel_size=5 --layout > "$T/r3" 2>&1
rc3=$?
"$LT" plan configs/tiny.yaml model.num_experts=4 parallel.expert_model_parallel_size=3 --layout \
  --gpus 3 train.global_batch_size=12 > "$T/r4" 2>&1
rc4=$?
"$LT" plan configs/tiny.yaml model.num_experts=4 parallel.expert_model_parallel_size=4 --layout \
  --gpus 2 > "$T/r5" 2>&1
rc5=$?
if [ $rc3 -eq 2 ] && grep -q "expert_tensor_parallel_size (5) must divide model.moe_ffn_hidden_size (128)" "$T/r3" &&
   [ $rc4 -eq 2 ] && grep -q "expert_model_parallel_size (3) must divide model.num_experts (4)" "$T/r4" &&
   [ $rc5 -eq 2 ] && grep -q "expert_model_parallel_size (4) must divide the ranks of a pipeline stage" "$T/r5"; then
  pass plan_moe_refusals
else fail plan_moe_refusals "rc $rc3/$rc4/$rc5: $(cat "$T/r3" "$T/r4" "$T/r5" | head -3)"; fi

# ---- lattice plan --calibrate and --calibration FILE ---------------------------------
# a short calibration on the CPU: plausible figures, printed and written
timeout 120 "$LT" plan --calibrate --device cpu --seconds 2 --out "$T/cal.json" > "$T/cal.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && err=$(python3 - "$T/cal.out" "$T/cal.json" "$(nproc)" <<'PY' 2>&1
import json, re, sys
out, cal, cores = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), int(sys.argv[3])
ceilings = [float(x) for x in re.findall(r'^ceiling ([\d.]+) TFLOP/s', out, re.M)]
assert len(ceilings) == 3 and min(ceilings) > 0, ceilings  # one per round
# the spread table: each figure's min <= median <= max over the rounds; the peak
# kept is the median of the rounds' ceilings
spread = {m[0]: [float(x) for x in m[1:4]] for m in
          re.findall(r'^  (\w+) +([\d.e+-]+) +([\d.e+-]+) +([\d.e+-]+) +\d+%$', out, re.M)}
assert {'peak_tflops', 'gemm_eff', 'elem_gbs', 'optim_gbs'} <= set(spread), spread
assert all(lo <= med <= hi for lo, med, hi in spread.values()), spread
ceiling = sorted(ceilings)[1]
assert abs(spread['peak_tflops'][1] - ceiling) <= 1e-3 * ceiling, (spread, ceilings)
# every measured GEMM row: positive TFLOP/s and efficiency
rows = re.findall(r'^ +\d+ +\d+ +(?:forward|bwd data|bwd weight) +([\d.]+) +([\d.]+)', out, re.M)
rows += re.findall(r'^ +\d+ +([\d.]+) +([\d.]+)$', out.split('small-row')[1].split('fit:')[0], re.M)
assert len(rows) >= 3 and all(float(t) > 0 and float(e) > 0 for t, e in rows), rows
assert cal['format'] == 'lattice-calibration/1' and cal['device'] == 'cpu', cal
assert cal['precision'] == 'fp32' and cal['threads'] == cores and cal['ranks'] == 1, cal
assert 0 < cal['gemm_eff'] <= 1.5 and cal['gemm_half_tokens'] >= 0, cal
assert abs(cal['peak_tflops'] - ceiling) <= 1e-4 + 1e-3 * ceiling, (cal, ceiling)  # the peak is the ceiling
assert cal['mem_gbs'] > 0 and cal['mem_gib'] > 0 and 'intra_gbs' not in cal, cal
print('%d GEMM rows, peak %.4f TFLOP/s, eff %.3f' % (len(rows), cal['peak_tflops'], cal['gemm_eff']))
PY
); then pass "plan_calibrate_cpu ($err)"
else fail plan_calibrate_cpu "rc=$rc: ${err:-$(tail -3 "$T/cal.out")}"; fi

# the file drives the plan: half the GEMM efficiency predicts a slower step
P15="configs/gpt2-1.5b.yaml train.precision=fp32 --gpus 2 --gpus-per-node 2 --top 1"
python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); d['gemm_eff'] /= 2
json.dump(d, open(sys.argv[2], 'w'))" "$T/cal.json" "$T/half.json"
"$LT" plan $P15 --calibration "$T/cal.json" > "$T/p1" 2>&1
rc1=$?
"$LT" plan $P15 --calibration "$T/half.json" > "$T/p2" 2>&1
rc2=$?
step() { awk -F'|' '/^ +[0-9]+ +[0-9]+ +[0-9]+ /{split($3, a, " "); print a[1]; exit}' "$1"; }
s1=$(step "$T/p1"); s2=$(step "$T/p2")
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "x cpu .*calibration file $T/cal.json" "$T/p1" &&
   python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(not (b > 1.3 * a))" "$s1" "$s2"; then
  pass "plan_calibration_file (step $s1 s, at half the GEMM efficiency $s2 s)"
else fail plan_calibration_file "rc $rc1/$rc2, steps '$s1' '$s2': $(head -2 "$T/p1" "$T/p2")"; fi

# the run predicts with the file too (LT_PLAN_CALIBRATION), on the CPU, with its
# rates scaled to the run's threads as lattice plan scales them (train.threads=1
# of tiny.yaml against the calibration's cores)
LT_PLAN_CALIBRATION="$T/cal.json" "$LT" train $BASE train.steps=4 > "$T/calrun" 2>&1; rcr=$?
"$LT" plan $BASE train.steps=4 --layout --gpus 1 --calibration "$T/cal.json" > "$T/calplan" 2>&1
got=$(sed -n 's/^plan  *step predicted on cpu (lattice plan --layout; overlap: none): \([0-9.]*\) ms.*/\1/p' "$T/calrun")
want=$(sed -n 's/^step time .*: \([0-9.]*\) s = .*/\1/p' "$T/calplan")
parts=$(grep -oE 'compute by part: gemm [0-9.]+ \+ memory-bound [0-9.]+ \+ attention [0-9.]+ \(cpu\) \+ loss head [0-9.]+ ms' "$T/calrun")
if [ $rcr -eq 0 ] && [ -n "$parts" ] && grep -q '^planned:  the planner predicted [0-9.]* ms per step on cpu; measured' "$T/calrun" &&
   python3 -c "import sys; g, w = float(sys.argv[1]), 1e3 * float(sys.argv[2]); sys.exit(abs(g - w) > 0.05 + 1e-3 * w)" "$got" "$want"; then
  pass "plan_calibration_in_run (predicted $got ms; $parts)"
else fail plan_calibration_in_run "rc=$rcr, summary '$got' ms, plan '$want' s, parts '$parts'"; fi

# the experts' expected load: an EP run also prints the prediction at the load it
# measured (the mean over steps and MoE layers of the log's max/mean), which under
# EP 2 is no faster than the balanced one and moves the way --moe-load does;
# --moe-load refuses what is no load
LT_PLAN_DEVICE=cpu timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$LT" train $BASE \
  $MOE train.steps=3 $EP2 logging.log_interval=1 > "$T/eprun" 2>&1 </dev/null; rce=$?
if err=$(python3 - "$T/eprun" $rce <<'PY' 2>&1
import re, sys
run, rc = open(sys.argv[1]).read(), int(sys.argv[2])
assert rc == 0, f'rc {rc}: {run[-300:]}'
bal = float(re.search(r'^planned:  the planner predicted ([\d.]+) ms per step on cpu', run, re.M).group(1))
m = re.search(r'^planned:  at the expert load measured \(max/mean ([\d.]+), the mean over steps '
              r'and MoE layers\) the planner predicts ([\d.]+) ms; measured ([\d.]+) ms', run, re.M)
assert m, 'no planned line at the measured load'
load, at = float(m.group(1)), float(m.group(2))
logged = [float(x) for x in re.findall(r'expert load max/mean ([\d.]+)', run)]
assert logged and 1.0 <= load <= 2.0 + 1e-9 and load <= max(logged) + 1e-9, (load, logged)
assert at >= bal, (at, bal)
print(f'load {load:.2f}: {at} ms against {bal} balanced')
PY
); then pass "plan_moe_load_in_run ($err)"
else fail plan_moe_load_in_run "$err"; fi
ML="configs/tiny.yaml $MOE $EP2 train.global_batch_size=8 --layout --gpus 2 --gpu cpu"
"$LT" plan $ML > "$T/ml1" 2>&1; rm1=$?
"$LT" plan $ML --moe-load 1.5 > "$T/ml2" 2>&1; rm2=$?
"$LT" plan $ML --moe-load 7 > "$T/ml3" 2>&1; rm3=$?
s1=$(sed -n 's/^step time .*; \([0-9]*\) tokens\/s.*/\1/p' "$T/ml1") # (finer than the seconds)
s2=$(sed -n 's/^step time .*; \([0-9]*\) tokens\/s.*/\1/p' "$T/ml2")
bad=""
for v in 0.5 0 x ""; do
  out=$("$LT" plan $ML --moe-load "$v" 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q -- "--moe-load needs the expected expert load" || bad="$bad '$v'(rc=$rc)"
done
out=$("$LT" plan configs/tiny.yaml --layout --gpus 1 --gpu cpu --moe-load 2 2>&1); rcd=$?
[ $rcd -eq 2 ] && echo "$out" | grep -q -- "--moe-load is an MoE model's expected expert load; this model has no experts" ||
  bad="$bad dense(rc=$rcd)"
if [ $rm1$rm2$rm3 = 000 ] && [ -z "$bad" ] &&
   python3 -c "import sys; sys.exit(not float(sys.argv[2]) < float(sys.argv[1]))" "$s1" "$s2" &&
   grep -q '^expert load max/mean 1.50 (--moe-load): the most loaded of an expert-parallel group.s 2 ranks gets 1.17x the mean rows' "$T/ml2" &&
   grep -q 'with 4 experts, top 2, a load of at most 2.00' "$T/ml3"; then
  pass "plan_moe_load_option ($s1 tokens/s balanced, $s2 at 1.5)"
else fail plan_moe_load_option "rc $rm1/$rm2/$rm3, steps '$s1' '$s2', accepted:$bad; $(grep -h 'expert load\|at most' "$T/ml2" "$T/ml3")"; fi

# malformed files: exit 2 naming the file and the field
refused() { # name file-content expected-message
  printf '%s' "$2" > "$T/$1.json"
  "$LT" plan $P15 --calibration "$T/$1.json" > "$T/$1.out" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "calibration file $T/$1.json: $3" "$T/$1.out"; then return 0; fi
  echo "$1: rc=$rc: $(cat "$T/$1.out")"
  return 1
}
GOOD='"format": "lattice-calibration/1", "device": "cpu", "precision": "fp32", "peak_tflops": 0.1'
msgs=$(
  refused eff_string "{$GOOD, \"gemm_eff\": \"fast\", \"gemm_half_tokens\": 8, \"mem_gbs\": 5}" \
    "field 'gemm_eff' must be a number"
  refused eff_range "{$GOOD, \"gemm_eff\": 3, \"gemm_half_tokens\": 8, \"mem_gbs\": 5}" \
    "field 'gemm_eff' is 3, outside (0, 1.5]"
  refused missing "{$GOOD, \"gemm_eff\": 0.5, \"gemm_half_tokens\": 8}" "field 'mem_gbs' is missing"
  refused typo "{$GOOD, \"gemm_eff\": 0.5, \"gemm_half_tokens\": 8, \"mem_gbs\": 5, \"intra_gb\": 1}" \
    "unknown field 'intra_gb'"
  refused precision "{\"format\": \"lattice-calibration/1\", \"device\": \"cpu\", \"precision\": \"bf16\"}" \
    "field 'precision': its GEMMs were measured in bf16, the config trains in fp32"
  refused not_json "{$GOOD," "not JSON"
  refused no_row "{\"format\": \"lattice-calibration/1\", \"device\": \"tpu\", \"precision\": \"fp32\",
    \"peak_tflops\": 9, \"gemm_eff\": 0.5, \"gemm_half_tokens\": 8, \"mem_gbs\": 5}" \
    "field 'mem_gib' is missing, and device 'tpu' has no built-in row"
)
"$LT" plan $P15 --calibration "$T/absent.json" > "$T/absent.out" 2>&1
rca=$?
if [ -z "$msgs" ] && [ $rca -eq 2 ] && grep -q "calibration file $T/absent.json: No such file" "$T/absent.out"; then
  pass plan_calibration_refusals
else fail plan_calibration_refusals "$msgs rc=$rca $(cat "$T/absent.out")"; fi

# --device cuda without a GPU (or without the CUDA backend): refused, naming why
timeout 120 "$LT" plan --calibrate --device cuda --seconds 2 > "$T/cuda.out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -qE -- "--device cuda: (no CUDA device is visible|this binary was built without the CUDA backend)" "$T/cuda.out"; then
  pass "plan_calibrate_cuda_refused ($(grep -oE 'no CUDA device is visible|built without' "$T/cuda.out"))"
elif [ $rc -eq 0 ] && grep -q "CUDA backend" "$T/cuda.out"; then
  pass "plan_calibrate_cuda (a GPU is here: calibrated it)"
else fail plan_calibrate_cuda_refused "rc=$rc: $(tail -2 "$T/cuda.out")"; fi

# under mpirun with 2 ranks the all-reduce is measured through lattice's comm layer
timeout 180 mpirun --allow-run-as-root --oversubscribe -np 2 "$LT" plan --calibrate --seconds 3 \
  --out "$T/cal2.json" > "$T/cal2.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && err=$(python3 - "$T/cal2.out" "$T/cal2.json" <<'PY' 2>&1
import json, re, sys
out, cal = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
assert out.count('calibrate: cpu') == 1, 'one rank reports'
sizes = re.findall(r'^ +(\d+) +([\d.]+) +([\d.]+)$', out.split('all-reduce: fp32 sum over 2 ranks')[1].split('skew:')[0], re.M)
assert len(sizes) == 4 and all(float(us) > 0 for _, us, _ in sizes), sizes
assert cal['ranks'] == 2 and cal['intra_gbs'] > 0 and cal['latency_us'] > 0, cal
# the ranks' skew: a wait per work size, the file's figure the median of the rounds'
skew = re.findall(r'^ +(\d+) +([\d.]+) +([\d.]+) +([\d.]+)%$', out.split('skew: the same GEMMs')[1], re.M)
assert [k for k, *_ in skew] == ['1', '4', '16', '64'] and all(float(w) > 0 for _, w, _, _ in skew), skew
assert len(re.findall(r'^fit: wait = \d+ us \+ [\d.]+ x work$', out, re.M)) == 3, 'a fit per round'
for key in ('sync_skew_us', 'sync_skew'):
    m = re.search(r'^  %s +[\d.e+-]+ +([\d.e+-]+) +[\d.e+-]+ ' % key, out, re.M)
    # (a figure every round measured as 0 has no line in the spread table)
    med = float(m.group(1)) if m else 0.0
    assert 0 <= cal[key] and abs(cal[key] - med) <= 1e-3 * med + 1e-9, (key, cal, med)
print('bus %.3f GB/s, latency %.2f us per ring step, skew %.0f us + %.3f' % (
    cal['intra_gbs'], cal['latency_us'], cal['sync_skew_us'], cal['sync_skew']))
PY
); then pass "plan_calibrate_mpi ($err)"
else fail plan_calibrate_mpi "rc=$rc: ${err:-$(tail -3 "$T/cal2.out")}"; fi
# --samples N: the time to train N samples = ceil(N / global batch) steps x
# the predicted step time of the fastest fitting layout (the table's first
# row) and of the config's own (its * row; --layout: its step line); GPT-OSS
# 20B's RCP mean at GBS 16 and a count the batch does not divide
for n in 194765 17; do
  "$LT" plan configs/gpt-oss-20b-mlperf.yaml --gpus 8 --gpu h100 --samples $n > "$T/ttt$n" 2>&1; rc=$?
  "$LT" plan configs/gpt-oss-20b-mlperf.yaml --gpus 8 --gpu h100 --samples $n --layout > "$T/tttl$n" 2>&1
  rcl=$?
  if [ $rc -eq 0 ] && [ $rcl -eq 0 ] && err=$(python3 - "$T/ttt$n" "$T/tttl$n" $n <<'PY' 2>&1
import math, re, sys
table, layout, n = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3])
rows = re.findall(r'^(\*| ) +\d+ .*\| +([\d.]+) +\d+ +\d+% \|', table, re.M)
fastest = float(rows[0][1])
own = [float(r[1]) for r in rows if r[0] == '*']
assert len(own) == 1, f'the config\'s row: {own}'
steps = math.ceil(n / 16)
def line(text, what):
    m = re.findall(r'^time to train (\d+) samples \(' + what + r'\): (\d+) steps of 16 x ([\d.]+) s = (\d+) s = ([\d.]+) h', text, re.M)
    assert len(m) == 1, f'{what}: {m}'
    got_n, got_steps, step, secs, hours = int(m[0][0]), int(m[0][1]), float(m[0][2]), int(m[0][3]), float(m[0][4])
    assert got_n == n and got_steps == steps, m
    assert abs(secs - steps * step) <= 0.5 + steps * 5e-4, (secs, steps, step)
    assert abs(hours - secs / 3600) <= 0.006, (hours, secs)
    return step
assert line(table, 'the fastest layout that fits') == fastest
assert line(table, "the config's layout") == own[0]
step_l = float(re.search(r'^step time \(predicted.*?\): ([\d.]+) s', layout, re.M).group(1))
assert abs(line(layout, "the config's layout") - step_l) < 1e-3, step_l
print(f'{steps} steps, fastest {fastest} s, the config\'s {own[0]} s')
PY
  ); then pass "plan_time_to_train_$n ($err)"
  else fail "plan_time_to_train_$n" "rc=$rc/$rcl: ${err:-$(tail -2 "$T/ttt$n")}"; fi
done
"$LT" plan configs/gpt-oss-20b-mlperf.yaml --gpus 8 --gpu h100 > "$T/ttt0" 2>&1
bad=""
for v in 0 -5 1.5 x ""; do
  out=$("$LT" plan configs/gpt-oss-20b-mlperf.yaml --gpus 8 --samples "$v" 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q -- "--samples needs a positive whole number" || bad="$bad '$v'(rc=$rc)"
done
if [ -z "$bad" ] && ! grep -q 'time to train' "$T/ttt0"; then pass plan_samples_refusals
else fail plan_samples_refusals "accepted:$bad; without --samples: $(grep -c 'time to train' "$T/ttt0")"; fi
exit $((failures > 0))
