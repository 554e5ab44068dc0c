#!/usr/bin/env bash
# test_moe.sh BUILD_DIR - mixture-of-experts models on the CPU backend under
# mpirun: with dropless routing, the aux and z losses on, every layout (DP,
# expert parallelism over DP, over TP with SP, over TP x DP, with pipeline
# stages, interleaved, ZeRO 1 and 2, recomputation, TP overlap) trains the
# same model as one process (loss and grad norm per step within 1e-5, the
# checkpoint's weights within 1e-5), DeepSeek-V3's group-limited sigmoid router
# with the expert bias and Qwen2-MoE's gated shared expert included; expert tensor parallelism (ETP x EP x
# EDP folded into TP x DP) too; a checkpoint moves between EP and ETP layouts;
# capacity dropping (both policies, padded too) is layout-independent over DP
# and EP; EP 8 over DP 8 and uneven pipeline stages train as one process; the
# log, the metrics and the trace carry the expert statistics and the
# dispatch / combine, and the losses' statistics cost no host wait of their
# own; bad layouts are refused. LT_TEST_FULL=1 adds layouts.
set -u
BUILD=$1
. tests/lib.sh moe
use_mpirun
text_shard "$T/train.ltok" || { fail prepare "lattice shard failed"; exit 1; }

# 4 experts top-2 in both layers of configs/tiny.yaml; eps as in test_parallel.sh
MOE="model.num_experts=4 model.moe_ffn_hidden_size=48 model.moe_aux_loss_coeff=0.01
     model.moe_z_loss_coeff=0.001"
BASE="data.train_path=$T/train.ltok train.steps=8 train.micro_batch_size=2
      logging.log_interval=4 eval.interval=0 optimizer.eps=1e-6 $MOE"

run() { # name np overrides... (the config: $CFG, else configs/tiny.yaml)
  local name=$1 np=$2; shift 2
  local out="$T/$name"
  mkdir -p "$out"
  local launch="$LT"
  [ "$np" -gt 1 ] && launch="$MPI -np $np $LT"
  $launch train "${CFG:-configs/tiny.yaml}" $BASE checkpoint.dir=$out/ck logging.metrics_file=$out/m.jsonl "$@" \
    >"$out/log" 2>&1 </dev/null || { echo "  run $name failed: $(tail -3 "$out/log")"; return 1; }
}
compare() { python3 tests/compare_runs.py "$T/$1" "$T/$2" "$3" "$4" --steps "${5:-8}"; }
same() { # name np overrides... : the run matches ref
  local name=$1 err
  if run "$@" && err=$(compare ref "$name" 1e-5 1e-5 2>&1); then
    pass "${name}_matches_single_process"
  else fail "${name}_matches_single_process" "$(echo "${err:-run failed}" | tail -1)"; fi
}

run ref 1 || fail reference "single-process run failed"
# the losses' statistics for the log are read with the routing's offsets: an MoE
# layer's forward waits on the host once, with the aux and z losses on or off
waits() { sed -n 's/.*host waits per step \([0-9]*\).*/\1/p' "$T/$1/log" | tail -1; }
if run ref_noloss 1 model.moe_aux_loss_coeff=0 model.moe_z_loss_coeff=0 &&
   a=$(waits ref) && b=$(waits ref_noloss) && [ -n "$a" ] && [ "$a" = "$b" ]
then pass "losses_add_no_host_wait ($a waits per step either way)"
else fail losses_add_no_host_wait "host waits per step: ${a:-?} with the losses, ${b:-?} without"; fi
SP="parallel.tensor_model_parallel_size=2 parallel.sequence_parallel=true"
EP2=parallel.expert_model_parallel_size=2
EP4=parallel.expert_model_parallel_size=4
same dp2 2
same ep2_over_dp2 2 $EP2 logging.trace="$T/ep2_trace.json"
same ep2_over_tp2_sp 2 $SP $EP2
same ep4_over_tp2_dp2_zero1 4 $SP $EP4 optimizer.zero_stage=1
# EP within each TP pair: the expert-data-parallel groups are the DP groups
same ep2_over_tp2_dp2 4 $SP $EP2
same ep2_over_tp2_dp2_zero1 4 $SP $EP2 optimizer.zero_stage=1
same ep2_over_dp4_zero2 4 $EP2 optimizer.zero_stage=2
same ep2_pp2 4 $EP2 parallel.pipeline_model_parallel_size=2
same ep2_tp2_sp_recompute_full 2 $SP $EP2 train.recompute=full
same ep2_tp2_sp_tp_overlap 2 $SP $EP2 parallel.tp_comm_overlap=true
# expert tensor parallelism: each expert's width cut over ETP, the rows gathered
# over it after the all-to-all and the partial outputs reduce-scattered; ETP may
# differ from TP (ETP 4 over TP 2 x DP 2, EP 1)
ETP2=parallel.expert_tensor_parallel_size=2
same etp2_ep2_over_tp2_dp2 4 $SP $ETP2 $EP2
same etp2_ep2_over_tp2_dp2_zero1 4 $SP $ETP2 $EP2 optimizer.zero_stage=1
same etp4_over_tp2_dp2 4 $SP parallel.expert_tensor_parallel_size=4
if [ -n "${LT_TEST_FULL:-}" ]; then
  same etp2_over_dp2 2 $ETP2
  same etp2_ep2_over_dp4_recompute_full 4 $ETP2 $EP2 train.recompute=full
  same etp2_pp2 4 $ETP2 parallel.pipeline_model_parallel_size=2
  same ep4_over_dp4 4 $EP4
  same tp2_sp 2 $SP
  same ep2_recompute_selective 2 $EP2 train.recompute=selective
fi

# the overlap switches on the experts' own group (EDP 2 here): buckets cut
# between MoE layers (4000 elements: one per layer), each reduced during the
# backward once its layers are final and gathered during the next forward,
# bit for bit the run without the switches (each sum over 2 ranks is a + b,
# however the buckets cut it) and within 1e-5 of one process; ZeRO 0 (its
# all-reduce), 1 and 2 (the experts' optimizer stays at stage 1); with
# LT_TEST_FULL also over 2 pipeline stages (8 ranks)
OV="parallel.overlap_grad_reduce=true parallel.bucket_size=4000"
overlap_case() { # name np overrides... (the log must name the switches on; NB buckets, default 2)
  local name=$1 np=$2 want
  shift 2
  want="${NB:-2} gradient bucket(s), reduced during the backward"
  case "$*" in *overlap_param_gather=true*) want="$want, gathered during the forward" ;; esac
  if run "${name}_off" "$np" "$@" parallel.bucket_size=4000 && run "${name}_on" "$np" "$@" $OV &&
     err=$(compare "${name}_off" "${name}_on" 0 0 2>&1) &&
     err=$(compare ref "${name}_on" 1e-5 1e-5 2>&1) &&
     { grep -q "^experts .*$want" "$T/${name}_on/log" || { err="no '$want' in the log"; false; }; }; then
    pass "${name}_experts_overlapped_bit_identical"
  else fail "${name}_experts_overlapped_bit_identical" "$(echo "${err:-run failed}" | tail -1)"; fi
}
overlap_case ep2_over_dp4_zero0 4 $EP2 optimizer.zero_stage=0
overlap_case ep2_over_dp4_zero1 4 $EP2 optimizer.zero_stage=1 parallel.overlap_param_gather=true
overlap_case ep2_over_dp4_zero2 4 $EP2 optimizer.zero_stage=2 parallel.overlap_param_gather=true
[ -n "${LT_TEST_FULL:-}" ] && # (one layer per stage: one bucket)
  NB=1 overlap_case ep2_pp2_dp4_zero1 8 $EP2 parallel.pipeline_model_parallel_size=2 \
    optimizer.zero_stage=1 parallel.overlap_param_gather=true

# interleaved stages need 4 layers: a reference of its own; a shared expert, the
# per-sequence loss and layers 1 and 3 MoE ("2": every second layer from 0 is 0, 2)
L4="model.num_layers=4 model.moe_layer_freq=([0,1]*2) model.moe_shared_expert_intermediate_size=32
    model.moe_router_load_balancing_type=seq_aux_loss"
if run ref_l4 1 $L4 && run ep2_pp2_vpp2 4 $L4 $EP2 parallel.pipeline_model_parallel_size=2 \
     parallel.virtual_pipeline_model_parallel_size=2 &&
   err=$(compare ref_l4 ep2_pp2_vpp2 1e-5 1e-5 2>&1); then
  pass ep2_pp2_vpp2_shared_expert_matches_single_process
else fail ep2_pp2_vpp2_shared_expert_matches_single_process "$(echo "${err:-run failed}" | tail -1)"; fi

# uneven stages: 1 layer on the first, 3 (two of them MoE) on the last
if run ep2_pp2_first1 4 $L4 $EP2 parallel.pipeline_model_parallel_size=2 \
     parallel.num_layers_in_first_pipeline_stage=1 &&
   err=$(compare ref_l4 ep2_pp2_first1 1e-5 1e-5 2>&1); then
  pass ep2_pp2_uneven_stages_matches_single_process
else fail ep2_pp2_uneven_stages_matches_single_process "$(echo "${err:-run failed}" | tail -1)"; fi

# Llama experts (SwiGLU, no biases), sigmoid scores scaled, under EP over TP x DP
LL="model.moe_router_score_function=sigmoid model.moe_router_topk_scaling_factor=2.5"
if CFG=configs/llama-tiny.yaml run ref_llama 1 $LL &&
   CFG=configs/llama-tiny.yaml run llama_ep4 4 $LL $SP $EP4 &&
   err=$(compare ref_llama llama_ep4 1e-5 1e-5 2>&1); then
  pass llama_sigmoid_ep4_matches_single_process
else fail llama_sigmoid_ep4_matches_single_process "$(echo "${err:-run failed}" | tail -1)"; fi
# and with ETP 2 x EP 2: gate | up cut as two blocks, down by columns
if CFG=configs/llama-tiny.yaml run llama_etp2_ep2 4 $LL $SP $ETP2 $EP2 &&
   err=$(compare ref_llama llama_etp2_ep2 1e-5 1e-5 2>&1); then
  pass llama_etp2_ep2_matches_single_process
else fail llama_etp2_ep2_matches_single_process "$(echo "${err:-run failed}" | tail -1)"; fi

# Qwen2-MoE's gated shared expert (model.moe_shared_expert_gate: its output times
# sigmoid(x . g) per token; the gate's gradient partial over TP under SP, its
# buffers kept outside recomputation's shared set): EP 2 over TP 2 + SP x DP 2, and
# 2 pipeline stages with full recomputation, train as one process
QG="model.moe_shared_expert_intermediate_size=32 model.moe_shared_expert_gate=true"
if CFG=configs/llama-tiny.yaml run ref_gate 1 $QG &&
   CFG=configs/llama-tiny.yaml run gate_ep2_tp2_dp2 4 $QG $SP $EP2 &&
   err=$(compare ref_gate gate_ep2_tp2_dp2 1e-5 1e-5 2>&1) &&
   CFG=configs/llama-tiny.yaml run gate_pp2_recompute 2 $QG parallel.pipeline_model_parallel_size=2 \
     train.recompute=full &&
   err=$(compare ref_gate gate_pp2_recompute 1e-5 1e-5 2>&1); then
  pass shared_expert_gate_layouts_match_single_process
else fail shared_expert_gate_layouts_match_single_process "$(echo "${err:-run failed}" | tail -1)"; fi

# DeepSeek-V3's router: sigmoid scores with the aux-loss-free expert bias and
# group-limited routing (8 experts in 4 groups, a token's 4 experts from its best
# 2 groups), under EP 4 over TP 2 with SP x DP 2: the routing is per token, so
# every layout routes as one process
DS="model.num_experts=8 model.moe_router_topk=4 model.moe_router_num_groups=4
    model.moe_router_group_topk=2 model.moe_router_score_function=sigmoid
    model.moe_router_enable_expert_bias=true model.moe_router_topk_scaling_factor=2.5"
if CFG=configs/llama-tiny.yaml run ref_groups 1 $DS &&
   CFG=configs/llama-tiny.yaml run groups_ep4 4 $DS $SP $EP4 &&
   err=$(compare ref_groups groups_ep4 1e-5 1e-5 2>&1); then
  pass group_limited_routing_ep4_matches_single_process
else fail group_limited_routing_ep4_matches_single_process "$(echo "${err:-run failed}" | tail -1)"; fi

# capacity: each rank drops from its own micro batches, so DP, EP and ETP over DP
# drop what one process drops (SP shards a micro batch: it would not)
CAP="model.moe_expert_capacity_factor=1.0 model.moe_token_drop_policy=position"
if run ref_cap 1 $CAP && run cap_ep2 2 $CAP $EP2 &&
   err=$(compare ref_cap cap_ep2 1e-5 1e-5 2>&1) && run cap_etp2_ep2 4 $CAP $ETP2 $EP2 &&
   err=$(compare ref_cap cap_etp2_ep2 1e-5 1e-5 2>&1) &&
   python3 - "$T/ref_cap/m.jsonl" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if not r.get('eval')]
assert sum(sum(r['moe']['dropped']) for r in recs) > 0, 'nothing dropped at capacity 1.0'
PY
then pass capacity_drops_match_under_ep
else fail capacity_drops_match_under_ep "$(echo "${err:-run failed or nothing dropped}" | tail -1)"; fi
# the other policy (drop the lowest probabilities) with every expert's input
# padded to its capacity: EP over DP drops and pads as one process
CAPP="model.moe_expert_capacity_factor=1.0 model.moe_token_drop_policy=probs
      model.moe_pad_expert_input_to_capacity=true"
if run ref_capp 1 $CAPP && run capp_ep2 2 $CAPP $EP2 &&
   err=$(compare ref_capp capp_ep2 1e-5 1e-5 2>&1) &&
   python3 - "$T/ref_capp/m.jsonl" "$T/ref_cap/m.jsonl" <<'PY'
import json, sys
probs, position = ([r for r in map(json.loads, open(p)) if not r.get('eval')] for p in sys.argv[1:])
assert sum(sum(r['moe']['dropped']) for r in probs) > 0, 'nothing dropped at capacity 1.0'
assert [r['loss'] for r in probs] != [r['loss'] for r in position], 'probs trained as position'
PY
then pass capacity_probs_padded_match_under_ep
else fail capacity_probs_padded_match_under_ep "$(echo "${err:-run failed or nothing dropped}" | tail -1)"; fi

# the statistics: a moe log line, per-layer arrays in the metrics, equal over layouts
if grep -q "^moe        2 layers | aux loss" "$T/ref/log" &&
   python3 - "$T/ref/m.jsonl" "$T/ep4_over_tp2_dp2_zero1/m.jsonl" <<'PY'
import json, sys
a, b = ([r for r in map(json.loads, open(p)) if not r.get('eval')] for p in sys.argv[1:])
for x, y in zip(a, b):
    m, n = x['moe'], y['moe']
    assert m['layer'] == [0, 1] and all(v > 0 for v in m['aux_loss'] + m['z_loss']), m
    assert all(mx >= mean > 0 for mx, mean in zip(m['load_max'], m['load_mean'])), m
    assert m['dropped'] == [0, 0], m
    for k in ('aux_loss', 'z_loss'):
        assert all(abs(p - q) <= 1e-5 * p for p, q in zip(m[k], n[k])), (k, m[k], n[k])
    # the loads are the micro batch's under SP too (each rank routes a share of its rows)
    for k in ('load_max', 'load_mean'):
        assert m[k] == n[k], (k, m[k], n[k])
PY
then pass expert_statistics_logged
else fail expert_statistics_logged "see $T/ref/log and the metrics"; fi
# the all-to-all's time: under EP in the breakdown and the log, none in one process
if grep -q "expert all-to-all exposed (busy): ep" "$T/ep2_over_dp2/log" &&
   python3 - "$T/ep2_over_dp2/m.jsonl" "$T/ref/m.jsonl" <<'PY'
import json, sys
ep, one = ([r['time_ms'] for r in map(json.loads, open(p)) if not r.get('eval')] for p in sys.argv[1:])
assert all(t['comm_ep'] > 0 and t['comm_ep_busy'] >= t['comm_ep'] for t in ep), ep
assert all(t['comm_ep'] == 0 for t in one), one
PY
then pass expert_all_to_all_timed
else fail expert_all_to_all_timed "see $T/ep2_over_dp2"; fi
# the trace (logging.trace) of that run: on each rank every MoE layer's dispatch and
# combine, forward and backward, once per micro batch, inside the passes, with the
# rows each moved (the forward's dispatch and the backward's combine the same rows)
if python3 - "$T/ep2_trace.json" <<'PY'
import collections, json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
spans = [e for e in ev if e['ph'] == 'X']
names = ('moe dispatch', 'moe combine', 'moe combine backward', 'moe dispatch backward')
for pid in (0, 1):
    mine = [e for e in spans if e['pid'] == pid]
    n = collections.Counter(e['name'] for e in mine)
    passes = n['forward']
    assert passes == n['backward'] > 0 and all(n[k] == 2 * passes for k in names), (pid, n)
    for k in names:
        for e in (e for e in mine if e['name'] == k):
            assert e['dur'] >= 0 and e['args']['rows'] >= 0, e
            assert any(p['name'] in ('forward', 'backward') and p['ts'] <= e['ts'] and
                       e['ts'] + e['dur'] <= p['ts'] + p['dur'] + 1 for p in mine), ('outside', e)
    rows = lambda k: [e['args']['rows'] for e in sorted(mine, key=lambda e: e['ts']) if e['name'] == k]
    assert sum(rows('moe dispatch')) == sum(rows('moe combine backward')) > 0, pid
PY
then pass trace_moe_dispatch_combine
else fail trace_moe_dispatch_combine "see $T/ep2_trace.json"; fi
# the passes' parts (host-timed here, device-timed on a GPU: test_trace.sh): the
# MoE layers and their experts' GEMMs, the attention core and the loss head,
# nested in the passes and in each other, in the metrics and the log
if grep -qE "^time +of the passes: attention core [0-9.]+ \| loss head [0-9.]+ \| MoE layers [0-9.]+ \(the experts' GEMMs [0-9.]+\) \| the rest" "$T/ref/log" &&
   python3 - "$T/ref/m.jsonl" "$T/ep2_over_dp2/m.jsonl" <<'PY'
import json, sys
for p in sys.argv[1:]:
    for r in map(json.loads, open(p)):
        if r.get('eval'): continue
        t = r['time_ms']
        assert t['attention'] > 0 and t['loss_head'] > 0, (p, t)
        assert 0 < t['moe_experts'] < t['moe'], (p, t)
        parts = t['attention'] + t['loss_head'] + t['moe']
        assert parts <= t['forward'] + t['backward'] + 0.05, (p, parts, t)
        if 'ep2' in p:  # the all-to-alls lie inside the MoE layers; the EP group's other
            # collective, the gradient norm's sum over it, in the step's grads/optimizer
            # phase (a loaded machine makes its wait long)
            assert t['comm_ep'] <= t['moe'] - t['moe_experts'] + t['grads'] + t['optimizer'] + 0.05, (p, t)
PY
then pass pass_parts_timed
else fail pass_parts_timed "see $T/ref/log and the metrics"; fi

# the expert load's panel of scripts/plot_metrics.py (matplotlib: as test_trace.sh finds it)
PY=""
for p in python3 /usr/bin/python3; do
  "$p" -c "import matplotlib" 2>/dev/null && { PY=$p; break; }
done
if [ -n "$PY" ] && timeout 120 "$PY" scripts/plot_metrics.py "$T/ref/m.jsonl" "$T/plot.png" \
     >"$T/plot.log" 2>&1 && [ "$(stat -c %s "$T/plot.png")" -gt 10000 ] &&
   { sed 's/"load_mean": \[[^]]*\]/"load_mean": 7/' "$T/ref/m.jsonl" > "$T/badmoe.jsonl"
     ! timeout 60 "$PY" scripts/plot_metrics.py "$T/badmoe.jsonl" "$T/x.png" >/dev/null 2>&1; }
then pass plot_metrics_expert_load
else fail plot_metrics_expert_load "${PY:-no python3 with matplotlib}: $(tail -2 "$T/plot.log" 2>/dev/null)"; fi

# aux-loss-free balancing: the expert bias moves by the rate, in both directions,
# and layouts (EP over TP x DP, ZeRO 1: the bias in another rank's shard) agree
EB="model.moe_router_score_function=sigmoid model.moe_router_enable_expert_bias=true
    model.moe_router_bias_update_rate=0.01 model.moe_aux_loss_coeff=0"
if run ref_bias 1 $EB train.steps=1 optimizer.warmup_steps=0 checkpoint.save_interval=1 &&
   python3 tests/read_state.py "$T/ref_bias/ck/step_00000001" >"$T/bias1.txt" &&
   python3 - "$T/ref_bias/ck/step_00000001" <<'PY'
import sys
sys.path.insert(0, 'tests')
import read_state
step = sys.argv[1]
found = {}
for f in read_state.read_meta(step)['files']:
    read_state.read_file(f"{step}/{f['name']}", f['bytes'], f['crc32'], found)
for layer in (0, 1):
    b = found[f'param/h.{layer}.mlp.expert_bias']['v']
    assert all(min(abs(x - 0.01), abs(x), abs(x + 0.01)) < 1e-7 for x in b), b
    assert max(b) > 0 > min(b), b
PY
then pass expert_bias_moves_by_its_rate
else fail expert_bias_moves_by_its_rate "see $T/ref_bias"; fi
if run ref_bias8 1 $EB && run bias_ep4_zero1 4 $EB $SP $EP4 optimizer.zero_stage=1 &&
   err=$(compare ref_bias8 bias_ep4_zero1 1e-5 1e-5 2>&1); then
  pass expert_bias_ep4_zero1_matches_single_process
else fail expert_bias_ep4_zero1_matches_single_process "$(echo "${err:-run failed}" | tail -1)"; fi

# a skipped update (a non-finite gradient at step 3) leaves the expert bias as it
# leaves every weight: the checkpoint of that step resumes the run as it went on
# (EP 2 over DP 2, ZeRO 1: the bias in one rank's shard)
if LT_INJECT_NONFINITE=grad:3 run bias_skip 2 $EB $EP2 optimizer.zero_stage=1 \
     checkpoint.save_interval=3 && grep -q "^step 3: .*update skipped" "$T/bias_skip/log" &&
   $MPI -np 2 "$LT" train configs/tiny.yaml $BASE $EB $EP2 optimizer.zero_stage=1 \
     checkpoint.load="$T/bias_skip/ck/step_00000003" checkpoint.dir="$T/bias_skip/ck2" \
     logging.metrics_file="$T/bias_skip/resumed.jsonl" >"$T/bias_skip/resumed.log" 2>&1 </dev/null &&
   err=$(python3 tests/compare_runs.py --resumed "$T/bias_skip/m.jsonl" \
     "$T/bias_skip/resumed.jsonl" 4 8 1e-7 2>&1); then
  pass expert_bias_kept_on_a_skipped_update
else fail expert_bias_kept_on_a_skipped_update "${err:-run failed or no skip: see $T/bias_skip}"; fi

# evaluation with EP (and ETP) over DP when the micro batches do not split evenly
# (23 of 4 samples over 2 ranks): the rank short of one runs an uncounted
# forward, so the all-to-alls (the ETP gathers) pair up and the loss is one
# process's
head -c 3000 "$T/text.txt" | python3 -c "
import sys; print(' '.join(map(str, sys.stdin.buffer.read())))" > "$T/valid.ids" &&
  "$LT" shard --vocab-size 256 --input "$T/valid.ids" "$T/valid.ltok" >/dev/null
VAL="data.valid_path=$T/valid.ltok train.micro_batch_size=4 eval.interval=4 eval.iters=100"
if run ref_val 1 $VAL && run val_ep2 2 $VAL $EP2 &&
   a=$(sed -n 's/^eval step 8 | val loss \([0-9.]*\).*/\1/p' "$T/ref_val/log") &&
   b=$(sed -n 's/^eval step 8 | val loss \([0-9.]*\).*/\1/p' "$T/val_ep2/log") &&
   [ -n "$a" ] && [ "$a" = "$b" ] && grep -q "| 92 samples |" "$T/val_ep2/log" &&
   run val_etp2 2 $VAL $ETP2 &&
   c=$(sed -n 's/^eval step 8 | val loss \([0-9.]*\).*/\1/p' "$T/val_etp2/log") && [ "$a" = "$c" ]; then
  pass eval_uneven_micro_batches_under_ep
else fail eval_uneven_micro_batches_under_ep "val loss ${a:-?} vs ${b:-?} (EP), ${c:-?} (ETP)"; fi

# ---- checkpoints move between EP layouts -------------------------------------------
# steps 1-4 in one layout, 5-8 in another, against the reference's steps 5-8
reshard() { # name np_a "overrides_a" np_b "overrides_b" [reference run]
  local name=$1 out="$T/$1" launch_a="$LT" launch_b="$LT" ref=${6:-ref}
  mkdir -p "$out"
  [ "$2" -gt 1 ] && launch_a="$MPI -np $2 $LT"
  [ "$4" -gt 1 ] && launch_b="$MPI -np $4 $LT"
  $launch_a train configs/tiny.yaml $BASE train.steps=4 optimizer.decay_steps=8 checkpoint.dir=$out/ckA $3 \
    logging.metrics_file=$out/a.jsonl >"$out/a.log" 2>&1 </dev/null &&
    $launch_b train configs/tiny.yaml $BASE checkpoint.load=$out/ckA checkpoint.dir=$out/ckB \
      logging.metrics_file=$out/b.jsonl $5 >"$out/b.log" 2>&1 </dev/null &&
    python3 tests/compare_runs.py --resumed "$T/$ref/m.jsonl" "$out/b.jsonl" 5 8 1e-5
}
if reshard ep4_to_ep1 4 "$EP4 $SP" 1 "" >/dev/null 2>&1; then pass checkpoint_ep4_to_ep1
else fail checkpoint_ep4_to_ep1 "see $T/ep4_to_ep1"; fi
if reshard ep1_to_ep2_pp2 1 "" 4 "$EP2 parallel.pipeline_model_parallel_size=2" >/dev/null 2>&1
then pass checkpoint_ep1_to_ep2_pp2
else fail checkpoint_ep1_to_ep2_pp2 "see $T/ep1_to_ep2_pp2"; fi
# 8 experts over 8 ranks (DP 8, micro batch 1) to one process; its first 4 steps
# under EP 8 are one process's too (loss and gradient norm within 1e-5)
E8="model.num_experts=8 train.micro_batch_size=1"
if run ref_e8 1 $E8 &&
   reshard ep8_to_ep1 8 "$E8 parallel.expert_model_parallel_size=8" 1 "$E8" ref_e8 >/dev/null 2>&1
then pass checkpoint_ep8_to_ep1
else fail checkpoint_ep8_to_ep1 "see $T/ep8_to_ep1"; fi
if [ -s "$T/ep8_to_ep1/a.jsonl" ] && err=$(python3 tests/compare_runs.py --resumed \
     "$T/ref_e8/m.jsonl" "$T/ep8_to_ep1/a.jsonl" 1 4 1e-5 2>&1); then
  pass ep8_over_dp8_matches_single_process
else fail ep8_over_dp8_matches_single_process "${err:-no metrics of the EP 8 run}"; fi

# dropless EP's receive buffers start at LT_MOE_EP_HEADROOM times the balanced
# share (0.5 here, so the first forwards must grow them: 8 experts over EP 4)
# and grow when a forward receives more rows; the run is one process's
export LT_MOE_EP_HEADROOM=0.5
if run ep4_grown_buffers 4 $E8 $EP4 && grep -q "more than their buffers held: grown to" \
     "$T/ep4_grown_buffers/log" && err=$(compare ref_e8 ep4_grown_buffers 1e-5 1e-5 2>&1); then
  pass ep4_buffers_grow_on_demand
else fail ep4_buffers_grow_on_demand "$(echo "${err:-run failed or nothing grew}" | tail -1)"; fi
unset LT_MOE_EP_HEADROOM

# resume with the experts' optimizer state sharded over their data-parallel group
# (EP 2 over TP2 x DP2, ZeRO 1: EDP 2) into EP 4 (EDP 1) and back
if reshard ep2_zero1_to_ep4 4 "$SP $EP2 optimizer.zero_stage=1" 4 "$SP $EP4 optimizer.zero_stage=1" \
     >/dev/null 2>&1 &&
   reshard ep4_to_ep2_zero1 4 "$SP $EP4 optimizer.zero_stage=1" 4 "$SP $EP2 optimizer.zero_stage=1" \
     >/dev/null 2>&1
then pass checkpoint_ep2_edp2_zero1_to_ep4_and_back
else fail checkpoint_ep2_edp2_zero1_to_ep4_and_back "see $T/ep2_zero1_to_ep4, $T/ep4_to_ep2_zero1"; fi

# an ETP 2 x EP 2 checkpoint (expert slices, proj.bias from ETP rank 0 only) into
# ETP 1 x EP 4 and back, ZeRO 1 (the experts' optimizer state sharded over EDP 1)
if reshard etp2_ep2_to_ep4 4 "$SP $ETP2 $EP2 optimizer.zero_stage=1" 4 "$SP $EP4 optimizer.zero_stage=1" \
     >/dev/null 2>&1 &&
   reshard ep4_to_etp2_ep2 4 "$SP $EP4 optimizer.zero_stage=1" 4 "$SP $ETP2 $EP2 optimizer.zero_stage=1" \
     >/dev/null 2>&1 &&
   reshard etp4_to_ep1 4 "$SP parallel.expert_tensor_parallel_size=4" 1 "" >/dev/null 2>&1
then pass checkpoint_etp2_ep2_to_ep4_and_back
else fail checkpoint_etp2_ep2_to_ep4_and_back "see $T/etp2_ep2_to_ep4, $T/ep4_to_etp2_ep2, $T/etp4_to_ep1"; fi

# a pipeline stage without MoE layers (layer 1 dense) holds no experts and no
# experts' optimizer, while the other stage's reduce over EP and EDP: the grad
# norm's sums still pair up (ZeRO 1, EP 2 over DP 2)
MIXED="model.moe_layer_freq=[1,0]"
if run ref_mixed 1 $MIXED &&
   run ep2_pp2_dense_stage 4 $MIXED $EP2 parallel.pipeline_model_parallel_size=2 optimizer.zero_stage=1 &&
   err=$(compare ref_mixed ep2_pp2_dense_stage 1e-5 1e-5 2>&1); then
  pass ep2_pp2_stage_without_experts_matches_single_process
else fail ep2_pp2_stage_without_experts_matches_single_process "$(echo "${err:-run failed}" | tail -1)"; fi

# ---- expert parallelism holds only a rank's experts ----------------------------------
# EP 4 over TP2 x DP2: each rank's state file holds the 1 of the 4 experts of
# its EP rank (every expert's tensors in one file of the stage); and a rank
# holds E/EP experts' parameters: EP 2 over DP 2 a rank 2 fewer experts of
# each of the 2 MoE layers than one process, EP 4 over TP 2 one fewer than EP 2
# over TP 2 (tiny.yaml's GeLU experts: fc (48, 32) and its bias, proj (32, 48)
# and its bias)
if python3 - "$T" <<'PY'
import re, sys
sys.path.insert(0, 'tests')
import read_state
T = sys.argv[1]
step = f"{T}/ep4_over_tp2_dp2_zero1/ck/step_00000008"
owner = {}
for f in read_state.read_meta(step)['files']:
    found = {}
    read_state.read_file(f"{step}/{f['name']}", f['bytes'], f['crc32'], found)
    experts = {int(m.group(1)) for n in found
               if (m := re.match(r'param/h\.\d+\.mlp\.experts\.(\d+)\.', n))}
    assert len(experts) == 1, (f['name'], experts)
    owner.setdefault(experts.pop(), []).append(f['name'])
assert sorted(owner) == [0, 1, 2, 3] and all(len(v) == 1 for v in owner.values()), owner
elems = lambda run: int(re.search(r'parameter elements (\d+)', open(f"{T}/{run}/log").read()).group(1))
expert = 48 * 32 + 48 + 32 * 48 + 32
assert elems('ref') - elems('ep2_over_dp2') == 2 * 2 * expert, (elems('ref'), elems('ep2_over_dp2'))
assert elems('ep2_over_tp2_dp2') - elems('ep4_over_tp2_dp2_zero1') == 2 * 1 * expert
# ETP 2 halves each expert but its proj.bias (32): EP 2's 2 experts per layer
half = (48 * 32 + 48 + 32 * 48) // 2
assert elems('ep2_over_tp2_dp2') - elems('etp2_ep2_over_tp2_dp2') == 2 * 2 * half
PY
then pass ep4_rank_holds_only_its_experts
else fail ep4_rank_holds_only_its_experts "see $T/ep4_over_tp2_dp2_zero1"; fi

# ---- refusals -----------------------------------------------------------------------
out=$($MPI -np 2 "$LT" train configs/tiny.yaml $BASE parallel.expert_model_parallel_size=4 2>&1 </dev/null)
if [ $? -ne 0 ] && echo "$out" | grep -q "must divide the ranks of a pipeline stage"; then
  pass ep_larger_than_the_stage_refused
else fail ep_larger_than_the_stage_refused "$(echo "$out" | tail -2)"; fi
out=$("$LT" train configs/tiny.yaml $BASE parallel.expert_tensor_parallel_size=5 2>&1)
if [ $? -eq 2 ] && echo "$out" | grep -q "expert_tensor_parallel_size (5) must divide model.moe_ffn_hidden_size (48)"; then
  pass etp_not_dividing_the_expert_width_refused
else fail etp_not_dividing_the_expert_width_refused "$(echo "$out" | tail -2)"; fi
out=$($MPI -np 2 "$LT" train configs/tiny.yaml $BASE $ETP2 $EP2 2>&1 </dev/null)
if [ $? -ne 0 ] && echo "$out" | grep -q "expert_model_parallel_size (2) x parallel.expert_tensor_parallel_size (2) must divide the ranks of a pipeline stage"; then
  pass etp_times_ep_larger_than_the_stage_refused
else fail etp_times_ep_larger_than_the_stage_refused "$(echo "$out" | tail -2)"; fi
out=$("$LT" train configs/tiny.yaml $BASE model.moe_router_topk=5 2>&1)
if [ $? -eq 2 ] && echo "$out" | grep -q "model.moe_router_topk (5) must be <= model.num_experts"; then
  pass topk_above_experts_refused
else fail topk_above_experts_refused "$(echo "$out" | tail -2)"; fi

exit $((failures > 0))
