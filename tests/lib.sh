# lib.sh - sourced by the shell tests: the binary, a scratch directory removed
# at exit (plus whatever `cleanup_extra` undoes), PASS/FAIL lines, and a
# random-token shard, mpirun. Usage: BUILD=$1; . tests/lib.sh NAME
LT="$BUILD/lattice"
T=$(mktemp -d "/tmp/lt-$1-XXXXXX")
cleanup_extra() { :; }
trap 'cleanup_extra; rm -rf "$T"' EXIT
failures=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
# use_mpirun: MPI, the launcher of the multi-rank runs (bounded in time); a
# FAIL and exit when there is no mpirun
use_mpirun() {
  command -v mpirun >/dev/null || { fail mpirun "mpirun not found (openmpi-bin)"; exit 1; }
  MPI="timeout 300 mpirun --allow-run-as-root --oversubscribe"
}
# train_run NAME NP ARGS...: `lattice train ARGS` on NP ranks (under $MPI when
# NP > 1), its checkpoints in $T/NAME/ck, metrics in $T/NAME/m.jsonl, output in
# $T/NAME/log; a failure says so with the log's tail and returns 1
train_run() {
  local name=$1 np=$2 out="$T/$1" launch="$LT"
  shift 2
  mkdir -p "$out"
  [ "$np" -gt 1 ] && launch="$MPI -np $np $LT"
  $launch train "$@" checkpoint.dir="$out/ck" logging.metrics_file="$out/m.jsonl" >"$out/log" 2>&1 \
    </dev/null || { echo "  run $name failed: $(tail -3 "$out/log")"; return 1; }
}
# plan_fits NAME CONFIG GPUS STAGES: `lattice plan CONFIG --gpus GPUS --layout` puts
# each of the layout's STAGES pipeline stages under 90% of an H100's 80 GiB (a
# config's layout "with memory to spare"); PASS/FAIL NAME_layout_fits
plan_fits() {
  local name=$1 cfg=$2 gpus=$3 stages=$4
  if "$LT" plan "$cfg" --gpus "$gpus" --layout >"$T/$name.plan" 2>&1 &&
     python3 - "$T/$name.plan" "$stages" <<'PY'
import re, sys
totals = [int(t) for t in re.findall(r'predicted, stage \d+\): .*total=(\d+)', open(sys.argv[1]).read())]
assert len(totals) == int(sys.argv[2]) and max(totals) < 0.9 * 80 * 2**30, totals
PY
  then pass "${name}_layout_fits ($(sed -n 's/^  = \([0-9.]*\) GiB.*/\1/p' "$T/$name.plan" | head -1) GiB)"
  else fail "${name}_layout_fits" "$(tail -2 "$T/$name.plan")"; fi
}
# random_shard OUT N SEED: N uniform token ids < 256 as a lattice shard
random_shard() {
  python3 -c "
import random, sys
random.seed(int(sys.argv[2]))
print(' '.join(str(random.randrange(256)) for _ in range(int(sys.argv[1]))))" "$2" "$3" > "$T/ids.$3" &&
    "$LT" shard --vocab-size 256 --input "$T/ids.$3" "$1" >/dev/null
}
# text_shard OUT: English text (the GPL-3 and Apache-2.0 licence texts) as
# byte-level token ids (vocab 256) in a lattice shard
text_shard() {
  cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 > "$T/text.txt" &&
    python3 -c "
import sys
d = open(sys.argv[1], 'rb').read()
open(sys.argv[2], 'w').write(' '.join(map(str, d)))" "$T/text.txt" "$T/text.ids" &&
    "$LT" shard --vocab-size 256 --input "$T/text.ids" "$1" >/dev/null
}

# expect2 NAME WANT ARGS...: `lattice ARGS` exits 2 (bad input) with WANT in its stderr
expect2() { # name want-in-stderr args...
  local name=$1 want=$2
  shift 2
  "$LT" "$@" >"$T/$name.out" 2>"$T/$name.err"
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" "$T/$name.err"; then
    pass "$name"
  else
    fail "$name" "exit $rc, stderr: $(head -c 300 "$T/$name.err")"
  fi
}

# same_state A B: step directories A and B hold the same state files, byte
# for byte (one state.lt, or one file per rank of a parallel save)
same_state() {
  local n=0 f
  for f in "$1"/*.lt; do
    [ -f "$f" ] && cmp -s "$f" "$2/${f##*/}" || return 1
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] && [ "$(ls "$2"/*.lt | wc -l)" -eq "$n" ]
}

# close_losses A.jsonl B.jsonl STEPS: metrics file B holds the training
# steps STEPS ("1-8", "5-8") and each one's loss is within 1e-5 (relative)
# of A's; prints the largest difference
close_losses() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def read(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and not r.get("eval")}
a, b = read(sys.argv[1]), read(sys.argv[2])
lo, hi = map(int, sys.argv[3].split("-"))
assert sorted(b) == list(range(lo, hi + 1)) and all(k in a for k in b), (sorted(a), sorted(b))
worst = max(abs(a[k] - b[k]) / abs(a[k]) for k in b)
print("max relative loss difference", worst)
sys.exit(0 if worst <= 1e-5 else 1)
PY
}

# close_val_losses A.jsonl B.jsonl N: both metrics files hold N evaluations
# and B's validation losses are within 1e-5 (relative) of A's
close_val_losses() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
ev = [[r["val_loss"] for r in map(json.loads, open(p)) if r.get("eval")] for p in sys.argv[1:3]]
print("validation losses", ev)
n = int(sys.argv[3])
sys.exit(0 if len(ev[0]) == n and len(ev[1]) == n and
         all(abs(a - b) <= 1e-5 * a for a, b in zip(*ev)) else 1)
PY
}

# megatron_pair IDS OUT: the second half of the token ids in IDS as a
# Megatron pair OUT.bin/OUT.idx, one document a line (each ending with 10,
# the last maybe without); its ids in OUT.ids, its documents' lengths in
# OUT.sizes
megatron_pair() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
ids = list(map(int, open(sys.argv[1]).read().split()))
ids = ids[len(ids) // 2:]
seqs, cur = [], []
for t in ids:
    cur.append(t)
    if t == 10:
        seqs.append(cur); cur = []
if cur: seqs.append(cur)
sizes = [len(s) for s in seqs]
idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(sizes) + 1)
idx += struct.pack(f"<{len(sizes)}i", *sizes)
ptrs, p = [], 0
for n in sizes:
    ptrs.append(p); p += 2 * n
idx += struct.pack(f"<{len(sizes)}q", *ptrs) + struct.pack(f"<{len(sizes) + 1}q", *range(len(sizes) + 1))
open(sys.argv[2] + ".idx", "wb").write(idx)
open(sys.argv[2] + ".bin", "wb").write(struct.pack(f"<{len(ids)}H", *ids))
open(sys.argv[2] + ".ids", "w").write(" ".join(map(str, ids)))
open(sys.argv[2] + ".sizes", "w").write(" ".join(map(str, sizes)))
PY
}

# megatron_counts WEIGHTS N: samples per dataset among the first N of
# Megatron's BlendedDataset order for WEIGHTS ("0.3,0.5,0.2", a case of
# tests/data/megatron_blend.txt)
megatron_counts() {
  python3 - "$1" "$2" <<'PY'
import sys
for line in open("tests/data/megatron_blend.txt"):
    if line.startswith("#"): continue
    w, n, seq = line.strip().split("|")
    if w == sys.argv[1]:
        seq = seq[:int(sys.argv[2])]
        print(" ".join(str(seq.count("0123456789"[d])) for d in range(len(w.split(",")))))
PY
}

# eval_loss NAME SAMPLES [overrides...]: `lattice eval` of $CFG over SAMPLES
# validation samples; prints its val_loss (nothing when it failed); its log
# in $T/NAME.log
eval_loss() {
  local name=$1 n=$2; shift 2
  "$LT" eval $CFG eval.samples=$n "$@" logging.metrics_file=$T/$name.jsonl >"$T/$name.log" 2>&1 \
    </dev/null
  python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().split(chr(10))[0])['val_loss'])" \
    "$T/$name.eval.jsonl" 2>/dev/null
}

# hf_export_matches CKPT HF_OUT WANT CONFIG [overrides...]: `lattice export CKPT
# HF_OUT` writes a config.json holding WANT, and tests/hf_reference.py's float64
# forward from the exported files alone reproduces (within 1e-5) the logits of
# `lattice logits CONFIG overrides...` from CKPT on a fixed 12-token prompt;
# prints the reference's summary, or what failed
hf_export_matches() {
  local ck=$1 hf=$2 want=$3
  shift 3
  printf '10 20 30 40 50 60 70 80 90 100 11 12' > "$T/prompt.ids"
  if ! { "$LT" shard --vocab-size 256 --input "$T/prompt.ids" "$T/prompt.ltok" >/dev/null &&
         "$LT" export "$ck" "$hf" >/dev/null 2>&1 && grep -qF -- "$want" "$hf/config.json" &&
         "$LT" logits "$@" data.train_path="$T/prompt.ltok" checkpoint.load="$ck" \
           >"$T/hf.logits" 2>/dev/null; }; then
    echo "export or logits failed"
    return 1
  fi
  python3 tests/hf_reference.py "$hf" "$T/hf.logits" 1e-5 2>&1
}

# hf_round_trip HF_DIR WANT: `lattice import HF_DIR` writes a checkpoint whose
# config.yaml holds WANT and whose export is HF_DIR's files, byte for byte;
# prints the import's last lines when not
hf_round_trip() {
  "$LT" import "$1" "$T/imported" data.train_path="$T/train.ltok" >"$T/import.log" 2>&1 &&
    grep -qF -- "$2" "$T/imported/step_00000000/config.yaml" &&
    "$LT" export "$T/imported" "$T/hf2" >/dev/null 2>&1 &&
    cmp -s "$1/model.safetensors" "$T/hf2/model.safetensors" &&
    cmp -s "$1/config.json" "$T/hf2/config.json" && return 0
  tail -2 "$T/import.log"
  return 1
}

# same_as REF NAME NP [overrides...]: the script's `run NAME NP overrides...`
# trains what run REF did (tests/compare_runs.py: loss and grad norm of 8 steps
# and the checkpoint's weights within 1e-5); a PASS or FAIL line
same_as() {
  local ref=$1 name=$2 err
  shift
  if run "$@" && err=$(python3 tests/compare_runs.py "$T/$ref" "$T/$name" 1e-5 1e-5 --steps 8 2>&1)
  then pass "${name}_matches_single_process"
  else fail "${name}_matches_single_process" "$(echo "${err:-run failed}" | tail -1)"; fi
}

# export_refused CLASS NAME KEY TRAIN_ARGS...: `lattice train TRAIN_ARGS` makes a
# step-0 checkpoint whose `lattice export` exits 2 naming CLASS and KEY and writes
# no model.safetensors; a PASS or FAIL line export_refuses_NAME
export_refused() {
  local cls=$1 name=$2 key=$3
  shift 3
  if ! "$LT" train "$@" data.train_path="$T/train.ltok" train.steps=0 eval.interval=0 \
    checkpoint.dir="$T/r_$name" >"$T/r_$name.log" 2>&1; then
    fail "export_refuses_$name" "the checkpoint was not made: $(tail -2 "$T/r_$name.log")"
    return
  fi
  "$LT" export "$T/r_$name" "$T/rhf_$name" >/dev/null 2>"$T/rhf_$name.err"
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF "$cls" "$T/rhf_$name.err" && grep -qF -- "$key" "$T/rhf_$name.err" &&
    [ ! -e "$T/rhf_$name/model.safetensors" ]; then
    pass "export_refuses_$name"
  else
    fail "export_refuses_$name" "exit $rc: $(head -c 300 "$T/rhf_$name.err")"
  fi
}

# resumes_as REF NAME NP_A "ARGS_A" NP_B "ARGS_B": the script's `run` trains
# NAME_half (NP_A ranks, ARGS_A) 4 of 8 steps, then NAME_resumed (NP_B ranks,
# ARGS_B) from its checkpoint, whose steps 5-8 must be run REF's within 1e-5
# (tests/compare_runs.py --resumed); a PASS or FAIL line NAME
resumes_as() {
  local ref=$1 name=$2 np_a=$3 args_a=$4 np_b=$5 args_b=$6 err
  # shellcheck disable=SC2086
  if run "${name}_half" "$np_a" $args_a train.steps=4 optimizer.decay_steps=8 &&
     run "${name}_resumed" "$np_b" $args_b checkpoint.load="$T/${name}_half/ck" \
       checkpoint.dir="$T/${name}_resumed/ck2" &&
     err=$(python3 tests/compare_runs.py --resumed "$T/$ref/m.jsonl" "$T/${name}_resumed/m.jsonl" 5 8 \
       1e-5 2>&1)
  then pass "$name"
  else fail "$name" "$(echo "${err:-run failed}" | tail -1)"; fi
}
