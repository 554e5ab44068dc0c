#!/usr/bin/env bash
# test_trace.sh BUILD_DIR - where the time goes, on the CPU backend:
# logging.trace's file merged over the ranks of a tp 2 x pp 2 x dp 2 run (and
# an interleaved pp 2 x vpp 2 one) - one process row per rank, exactly the
# schedule's forward and backward spans, the groups' collectives, the
# pipeline's sends and receives, spans nested or disjoint on every row; no
# file without the key, this rank's own file when a run fails, refusals;
# the bubble in the metrics (adds up with the other parts, 0 with pp 1); the
# breakdown taken from device timers (as on a GPU) on tp 2 x pp 2 x dp 2; and
# scripts/plot_metrics.py's PNG and its refusals.
set -u
BUILD=$1
. tests/lib.sh trace
use_mpirun
text_shard "$T/train.ltok" || { fail prepare "lattice shard failed"; exit 1; }
# 4 layers: pp 2 x vpp 2 has one per chunk; global batch 8 in micro batches of
# 2: 2 micro batches per step with dp 2, 4 with dp 1
STEPS=3
BASE="configs/tiny.yaml model.num_layers=4 data.train_path=$T/train.ltok train.steps=$STEPS
      train.micro_batch_size=2 logging.log_interval=1 eval.interval=0"

# check_trace FILE RANKS MICRO CHUNKS GROUPS: the file's structure (python below)
check_trace() {
  timeout 60 python3 - "$@" <<'PY'
import collections, json, re, sys
path, ranks, micro, chunks, groups = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split(',')
steps = 3
ev = json.load(open(path))['traceEvents']
procs = {e['pid']: e['args']['name'] for e in ev if e['ph'] == 'M' and e['name'] == 'process_name'}
assert sorted(procs) == list(range(ranks)), procs
for pid, name in procs.items():
    assert re.fullmatch(r'rank %d \(tp \d, pp \d, dp \d\)' % pid, name), name
threads = {(e['pid'], e['tid']): e['args']['name'] for e in ev if e['ph'] == 'M' and e['name'] == 'thread_name'}
spans = [e for e in ev if e['ph'] == 'X']
for e in spans:
    assert e['ts'] >= 0 and e['dur'] >= 0, e
    assert (e['pid'], e['tid']) in threads, ('span on an unnamed row', e)
for pid in range(ranks):
    assert threads[(pid, 1)] == 'main', threads
    mine = [e for e in spans if e['pid'] == pid]
    names = collections.Counter(e['name'] for e in mine)
    # every micro batch of every chunk, forward and backward, every step
    assert names['forward'] == micro * chunks * steps, (pid, names)
    assert names['backward'] == micro * chunks * steps, (pid, names)
    for k in ('step', 'grads', 'optimizer', 'data'):
        assert names[k] == steps, (pid, k, names)
    passes = {(e['args']['micro_batch'], e['args']['chunk']) for e in mine if e['name'] == 'forward'}
    assert passes == {(m, c) for m in range(micro) for c in range(chunks)}, (pid, passes)
    comm = [e for e in mine if e['cat'] == 'comm']
    seen = {e['args']['group'] for e in comm}
    assert set(groups) <= seen, (pid, groups, seen)
    for e in comm:
        assert e['args']['bytes'] >= 0 and e['args']['op'] == e['name'], e
        assert threads[(pid, e['tid'])].startswith('comm ' + e['args']['group']), (e, threads)
    if 'pp' in groups:
        # each chunk sends its activation on (not the model's last) and its input's
        # gradient back (not the first), and receives the same from its neighbours
        stage = int(re.search(r'pp (\d)', procs[pid]).group(1))
        last = max(int(re.search(r'pp (\d)', n).group(1)) for n in procs.values())
        want = micro * steps * (2 * chunks - (stage == 0) - (stage == last))
        p2p = collections.Counter(e['name'] for e in comm if e['args']['group'] == 'pp' and 'peer' in e['args'])
        assert p2p['send'] == p2p['recv'] == want, (pid, p2p, want)
        peers = {e['args']['peer'] for e in comm if 'peer' in e['args']}
        assert peers and pid not in peers and all(0 <= p < ranks for p in peers), (pid, peers)
        assert names['pipeline wait'] > 0, (pid, names)
# on every row, spans are nested or disjoint (times in whole nanoseconds)
rows = collections.defaultdict(list)
for e in spans:
    rows[(e['pid'], e['tid'])].append((round(e['ts'] * 1000), round((e['ts'] + e['dur']) * 1000), e['name']))
for key, row in rows.items():
    row.sort(key=lambda s: (s[0], -s[1]))
    stack = []
    for b, end, name in row:
        while stack and stack[-1][1] <= b:
            stack.pop()
        assert not stack or end <= stack[-1][1], ('overlap on row', key, stack[-1], (b, end, name))
        stack.append((b, end, name))
print('%d spans on %d rows of %d ranks' % (len(spans), len(rows), ranks))
PY
}

# check_bubble METRICS PP: time_ms has the bubble; the parts add up to the step
check_bubble() {
  timeout 60 python3 - "$@" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if not r.get('eval')]
assert len(recs) == 3, len(recs)
for r in recs:
    t = r['time_ms']
    assert 'bubble' in t and t['bubble'] >= 0, t
    parts = sum(t[k] for k in ('forward', 'backward', 'grads', 'optimizer', 'data', 'bubble', 'other'))
    assert abs(parts - r['step_ms']) <= 0.01 * r['step_ms'] + 0.05, (r['step'], parts, r['step_ms'])
    if sys.argv[2] == '1':
        assert t['bubble'] == 0 and t['comm_pp'] == 0, t
PY
}

# ---- tp 2 x pp 2 x dp 2: 8 ranks --------------------------------------------------
if $MPI -np 8 "$LT" train $BASE parallel.tensor_model_parallel_size=2 \
     parallel.pipeline_model_parallel_size=2 logging.trace="$T/tpd.json" \
     logging.metrics_file="$T/tpd.jsonl" >"$T/tpd.log" 2>&1; then
  if err=$(check_trace "$T/tpd.json" 8 2 1 tp,dp,pp,embedding 2>&1); then pass trace_tp2_pp2_dp2
  else fail trace_tp2_pp2_dp2 "$(echo "$err" | tail -2)"; fi
  if grep -q "trace .*tpd.json: 8 rank" "$T/tpd.log"; then pass trace_reported_in_log
  else fail trace_reported_in_log "no 'trace' line in the log"; fi
  if err=$(check_bubble "$T/tpd.jsonl" 2 2>&1) && grep -q "| bubble [0-9.]* |" "$T/tpd.log"
  then pass bubble_in_breakdown_pp2
  else fail bubble_in_breakdown_pp2 "$(echo "$err" | tail -2)"; fi
  ls "$T"/tpd.json.* >/dev/null 2>&1 && fail trace_no_leftovers "$(ls "$T"/tpd.json.*)" ||
    pass trace_no_leftovers
else
  fail trace_tp2_pp2_dp2 "run failed: $(tail -3 "$T/tpd.log")"
fi

# ---- the breakdown from device timers (devclock.h; a GPU's) -------------------------
# LT_CPU_DEVICE_TIMERS=1 gives the CPU backend timers, so the step is timed as
# on a GPU: tp 2 x pp 2 x dp 2 with sequence parallelism, ZeRO 1 and the
# overlap switches, against the same run timed by the host: the same losses,
# and figures that hold together (the parts add up to the step, so nothing is
# counted twice; tensor-parallel time lies inside the passes, the gradients'
# finalisation and the optimizer's norm; every kind of communication is seen)
DEVT="parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2
      parallel.sequence_parallel=true optimizer.zero_stage=1 parallel.overlap_grad_reduce=true
      parallel.overlap_param_gather=true parallel.overlap_p2p_comm=true"
if $MPI -np 8 "$LT" train $BASE $DEVT logging.metrics_file="$T/host.jsonl" >"$T/host.log" 2>&1 &&
   LT_CPU_DEVICE_TIMERS=1 $MPI -np 8 -x LT_CPU_DEVICE_TIMERS "$LT" train $BASE $DEVT \
     logging.metrics_file="$T/dev.jsonl" >"$T/dev.log" 2>&1; then
  if grep -q "step breakdown is measured on the device" "$T/dev.log" &&
     ! grep -q "measured on the device" "$T/host.log" &&
     err=$(check_bubble "$T/dev.jsonl" 2 2>&1) &&
     err=$(timeout 60 python3 - "$T/host.jsonl" "$T/dev.jsonl" 2>&1 <<'PY'
import json, sys
host, dev = ([r for r in map(json.loads, open(p)) if not r.get('eval')] for p in sys.argv[1:])
assert [(r['loss'], r['grad_norm']) for r in host] == [(r['loss'], r['grad_norm']) for r in dev], 'losses differ'
for r in dev:
    t = r['time_ms']
    for k in ('forward', 'backward', 'bubble', 'comm_tp', 'comm_tp_busy', 'comm_dp_busy', 'comm_pp_busy'):
        assert t[k] > 0, (r['step'], k, t)
    # TP communication: in the passes, the gradients' sequence-parallel sums of
    # finalisation and the norm's sum over TP in the optimizer (the latter is
    # where 8 ranks on 2 cores wait for each other: a suite run saw 9.1 ms of
    # TP time against 6.8 ms of passes)
    assert t['comm_tp'] <= t['forward'] + t['backward'] + t['grads'] + t['optimizer'] + 0.05, \
        ('tp outside the passes, finalisation and the norm', t)
    assert t['comm_tp'] <= t['comm_tp_busy'] + 0.05, ('exposed beyond busy', t)
    # the passes' parts on the device timers (rank 0's, as the whole line): the
    # attention core inside its passes, no loss head on the first stage, no MoE
    assert 0 < t['attention'] <= t['forward'] + t['backward'], t
    assert t['loss_head'] == 0 and t['moe'] == 0 and t['moe_experts'] == 0, t
PY
); then pass device_timed_breakdown
  else fail device_timed_breakdown "$(echo "${err:-no 'measured on the device' line}" | tail -2)"; fi
else
  fail device_timed_breakdown "run failed: $(tail -3 "$T/host.log" "$T/dev.log")"
fi

# ---- interleaved: pp 2 x vpp 2, 4 micro batches -------------------------------------
if $MPI -np 2 "$LT" train $BASE parallel.pipeline_model_parallel_size=2 \
     parallel.virtual_pipeline_model_parallel_size=2 logging.trace="$T/vpp.json" \
     >"$T/vpp.log" 2>&1; then
  if err=$(check_trace "$T/vpp.json" 2 4 2 pp,embedding 2>&1); then pass trace_interleaved
  else fail trace_interleaved "$(echo "$err" | tail -2)"; fi
else
  fail trace_interleaved "run failed: $(tail -3 "$T/vpp.log")"
fi

# ---- one process without the key: no trace; the bubble is 0 --------------------------
text_shard "$T/valid.ltok"
before=$(ls -A "$T")
if timeout 120 "$LT" train $BASE data.valid_path="$T/valid.ltok" eval.interval=1 \
     logging.metrics_file="$T/plain.jsonl" >"$T/plain.log" 2>&1; then
  new=$(comm -13 <(echo "$before") <(ls -A "$T"))
  if [ "$new" = "plain.jsonl
plain.log" ] && ! grep -q "^trace " "$T/plain.log"; then pass no_key_no_trace
  else fail no_key_no_trace "new files: $new"; fi
  if err=$(check_bubble "$T/plain.jsonl" 1 2>&1); then pass bubble_zero_pp1
  else fail bubble_zero_pp1 "$(echo "$err" | tail -2)"; fi
else
  fail no_key_no_trace "run failed: $(tail -3 "$T/plain.log")"
fi

# ---- a run that fails after set-up leaves its own events; refusals ---------------------
timeout 120 "$LT" train $BASE data.valid_path="$T/missing.ltok" logging.trace="$T/err.json" \
  >"$T/err.log" 2>&1
rc=$?
if [ "$rc" = 2 ] && [ ! -e "$T/err.json" ] && grep -q "err.json.rank0" "$T/err.log" &&
   timeout 60 python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
assert any(e['name'] == 'process_name' and e['pid'] == 0 for e in ev)" "$T/err.json.rank0"
then pass trace_of_failed_run
else fail trace_of_failed_run "rc $rc: $(tail -2 "$T/err.log")"; fi
out=$(timeout 60 "$LT" train $BASE logging.trace="$T/no/such/dir/t.json" 2>&1); rc=$?
if [ "$rc" = 2 ] && echo "$out" | grep -q "logging.trace: cannot create"; then pass trace_path_refused
else fail trace_path_refused "rc $rc: $(echo "$out" | tail -1)"; fi
out=$(timeout 60 "$LT" train $BASE logging.trac=x 2>&1); rc=$?
if [ "$rc" = 2 ] && echo "$out" | grep -q "logging.trace"; then pass trace_key_suggested
else fail trace_key_suggested "rc $rc: $(echo "$out" | tail -1)"; fi

# ---- scripts/plot_metrics.py ----------------------------------------------------------
# Debian's python3-matplotlib serves /usr/bin/python3, which may not be the first python3
PY=""
for p in python3 /usr/bin/python3; do
  "$p" -c "import matplotlib" 2>/dev/null && { PY=$p; break; }
done
if [ -z "$PY" ]; then
  fail plot_metrics "no python3 with matplotlib (scripts/setup.sh installs python3-matplotlib)"
else
  if timeout 120 "$PY" scripts/plot_metrics.py "$T/plain.jsonl" "$T/plot.png" >"$T/plot.log" 2>&1 &&
     [ "$(head -c 8 "$T/plot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
     [ "$(stat -c %s "$T/plot.png")" -gt 10000 ] && grep -q "3 steps, 3 evaluations" "$T/plot.log"
  then pass plot_metrics_png
  else fail plot_metrics_png "$(tail -2 "$T/plot.log")"; fi
  { head -2 "$T/plain.jsonl"; echo '{"step": 3, "loss": 1.0'; } > "$T/bad.jsonl"
  : > "$T/empty.jsonl"
  echo '{"step": 1, "lr": 0.1}' > "$T/noloss.jsonl"
  for c in "bad.jsonl:bad.jsonl:3: not a JSON object" "empty.jsonl:empty.jsonl: no training records" \
           "missing.jsonl:missing.jsonl: cannot read" "noloss.jsonl:noloss.jsonl:1: the record lacks 'loss'"; do
    f=${c%%:*} want=${c#*:}
    out=$(timeout 60 "$PY" scripts/plot_metrics.py "$T/$f" "$T/x.png" 2>&1); rc=$?
    if [ "$rc" = 2 ] && echo "$out" | grep -qF "$want" && [ ! -e "$T/x.png" ]; then pass "plot_metrics_refuses_${f%.jsonl}"
    else fail "plot_metrics_refuses_${f%.jsonl}" "rc $rc: $out"; fi
  done
fi

exit $((failures > 0))
