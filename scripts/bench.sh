#!/usr/bin/env bash
# bench.sh - training throughput benchmark (not a test): for each config, find
# the largest micro batch that fits, train N steps on random tokens and report
# lattice's "done:" figures (median step time after warm-up, tokens/s,
# TFLOP/s per device, MFU) in a table; then train a plain PyTorch peer
# (scripts/bench_peer.py: GPT-2, or Llama with or without Mixtral's experts)
# on the same config, micro batch, batches and initial weights on the same
# device and print both side by side, with the peer's first losses checked
# against lattice's.
#
# usage: scripts/bench.sh [--config C]... [--steps N] [--device cuda|cpu|auto]
#                         [--out FILE] [--lattice BIN] [--mbs "64 32 16 8 4 2 1"]
#                         [--global G] [--peer auto|on|off] [--peer-steps N]
#                         [--peer-init export|random] [--peer-args "ARGS"]
#                         [--compare-steps N] [section.key=value ...]
#   --config C   config to benchmark (repeatable; default configs/gpt2-124m.yaml
#                and configs/gpt2-1.5b.yaml)
#   --steps N    optimizer steps per run (default 30; the first 1-2 are warm-up)
#   --device D   train.device (default cuda)
#   --out FILE   also append the report to FILE
#   --lattice B  lattice binary (default $LATTICE or build/lattice)
#   --mbs LIST   micro batch sizes tried in order, first success wins
#                (default "64 32 16 8 4 2 1")
#   --global G   global batch size (a multiple of each tried micro batch);
#                default: equal to the micro batch (one micro batch per step)
#   --peer P     the PyTorch peer: auto (default: when $PEER_PYTHON imports
#                torch), on (a missing torch is a failure), off
#   --peer-steps N  peer steps (default --steps; at most --steps)
#   --peer-init I   export (default: lattice's initial weights, through a
#                train.steps=0 checkpoint and `lattice export`) or random (the
#                peer's own init: no loss check; saves writing the checkpoint)
#   --peer-args A   extra bench_peer.py arguments (e.g. "--no-compile")
#   --compare-steps N  first steps whose losses must agree (default 5; 0 = no check)
#   other arguments are config overrides passed to every run.
# A run that fails with an out-of-memory message moves on to the next smaller
# micro batch; any other failure ends that config (reported as FAILED). The
# peer runs at lattice's micro batch; if that does not fit it halves its micro
# batch (same global batch, more accumulation) and the table says so.
# Random token shards (llm.c format, made with `lattice shard`) are cached under
# data/bench/. Environment: BENCH_TIMEOUT (seconds per attempt, default 900),
# PEER_PYTHON (python for the peer, default python3).
# Exit status: 0 when every config produced a result (and the peer's, when it
# ran, with agreeing losses), 1 otherwise, 2 bad usage.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2

CONFIGS=()
STEPS=30
DEVICE=cuda
OUT=""
LT=${LATTICE:-build/lattice}
MBS_LIST="64 32 16 8 4 2 1"
GLOBAL=""
PEER=auto
PEER_STEPS=""
PEER_INIT=export
PEER_ARGS=""
CMP_STEPS=5
PY=${PEER_PYTHON:-python3}
EXTRA=()
usage() { sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIGS+=("${2:?--config needs a value}"); shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --device) DEVICE=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --lattice) LT=${2:?}; shift 2 ;;
    --mbs) MBS_LIST=${2:?}; shift 2 ;;
    --global) GLOBAL=${2:?}; shift 2 ;;
    --peer) PEER=${2:?}; shift 2 ;;
    --peer-steps) PEER_STEPS=${2:?}; shift 2 ;;
    --peer-init) PEER_INIT=${2:?}; shift 2 ;;
    --peer-args) PEER_ARGS=${2?}; shift 2 ;;
    --compare-steps) CMP_STEPS=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    --*) echo "bench.sh: unknown option $1" >&2; usage ;;
    *=*) EXTRA+=("$1"); shift ;;
    *) echo "bench.sh: unexpected argument '$1' (overrides look like section.key=value)" >&2; exit 2 ;;
  esac
done
[ ${#CONFIGS[@]} -eq 0 ] && CONFIGS=(configs/gpt2-124m.yaml configs/gpt2-1.5b.yaml)
case "$STEPS" in ''|*[!0-9]*) echo "bench.sh: --steps must be a positive integer" >&2; exit 2 ;; esac
[ "$STEPS" -ge 1 ] || { echo "bench.sh: --steps must be >= 1" >&2; exit 2; }
case "$PEER" in auto|on|off) ;; *) echo "bench.sh: --peer must be auto, on or off" >&2; exit 2 ;; esac
case "$PEER_INIT" in export|random) ;; *) echo "bench.sh: --peer-init must be export or random" >&2; exit 2 ;; esac
[ -z "$PEER_STEPS" ] && PEER_STEPS=$STEPS
case "$PEER_STEPS$CMP_STEPS" in *[!0-9]*) echo "bench.sh: --peer-steps and --compare-steps must be integers" >&2; exit 2 ;; esac
if [ "$PEER_STEPS" -lt 1 ] || [ "$PEER_STEPS" -gt "$STEPS" ]; then
  echo "bench.sh: --peer-steps must be in [1, --steps]" >&2; exit 2
fi
[ "$CMP_STEPS" -gt "$PEER_STEPS" ] && CMP_STEPS=$PEER_STEPS
[ "$PEER_INIT" = random ] && CMP_STEPS=0
if [ -n "$OUT" ]; then case "$OUT" in /*) ;; *) OUT="$ROOT/$OUT" ;; esac; fi
if [ ! -x "$LT" ]; then
  echo "bench.sh: lattice binary '$LT' not found or not executable (build it with make, or pass --lattice)" >&2
  exit 2
fi
command -v python3 >/dev/null 2>&1 || { echo "bench.sh: python3 is needed to make the random shard" >&2; exit 2; }
TO=${BENCH_TIMEOUT:-900}
with_timeout() { if command -v timeout >/dev/null 2>&1; then timeout "$TO" "$@"; else "$@"; fi; }
PEER_ON=0
PEER_WHAT="off"
if [ "$PEER" != off ]; then
  if PEER_WHAT=$("$PY" -c 'import torch, yaml; print("torch", torch.__version__)' 2>/dev/null); then
    PEER_ON=1
    PEER_WHAT="scripts/bench_peer.py with $PY ($PEER_WHAT), init $PEER_INIT, $PEER_STEPS steps${PEER_ARGS:+, $PEER_ARGS}"
  elif [ "$PEER" = on ]; then
    echo "bench.sh: --peer on, but $PY cannot import torch and yaml (set PEER_PYTHON)" >&2; exit 2
  else
    PEER_WHAT="skipped ($PY cannot import torch and yaml; set PEER_PYTHON)"
  fi
fi

REPORT=$(mktemp /tmp/lt-bench-XXXXXX)
LOGDIR=$(mktemp -d /tmp/lt-bench-logs-XXXXXX)
trap 'rm -f "$REPORT"' EXIT
say() { echo "$*" | tee -a "$REPORT"; }

max_mbs=1
for m in $MBS_LIST; do
  case "$m" in ''|*[!0-9]*|0) echo "bench.sh: bad micro batch '$m' in --mbs" >&2; exit 2 ;; esac
  [ "$m" -gt "$max_mbs" ] && max_mbs=$m
done

# resolved KEY (e.g. "vocab_size") from the config as lattice prints it: run
# with an unset data path so it stops (exit 2) right after printing the config.
resolve() { # config key -> value
  "$LT" train "$1" "${EXTRA[@]}" data.train_path= 2>/dev/null |
    awk -v k="$2" '$1 == k":" {print $2; exit}'
}

# make_shard VOCAB NTOKENS -> path of a cached random shard with >= NTOKENS ids < VOCAB
make_shard() {
  local v=$1 need=$2 f n best=""
  mkdir -p data/bench
  # llm.c's format holds uint16 ids; larger vocabularies go to lattice's own
  local fmt=llmc ext=bin
  [ "$v" -gt 65536 ] && fmt=lattice ext=ltok
  for f in data/bench/random-v"$v"-*.$ext; do
    [ -s "$f" ] || continue
    n=${f##*-}; n=${n%.$ext}
    [ "$n" -ge "$need" ] 2>/dev/null && { best=$f; break; }
  done
  if [ -z "$best" ]; then
    n=$(( (need + 999999) / 1000000 * 1000000 ))
    best=data/bench/random-v$v-$n.$ext
    echo "making $best ($n random tokens)..." >&2
    python3 - "$v" "$n" <<'PY' | "$LT" shard --vocab-size "$v" --format "$fmt" "$best.tmp" >&2 || { rm -f "$best.tmp"; return 1; }
import array, os, sys
v, n = int(sys.argv[1]), int(sys.argv[2])
out = sys.stdout
chunk = 1 << 16  # tokens per line (one "document")
done = 0
while done < n:
    k = min(chunk, n - done)
    a = array.array('I', os.urandom(4 * k))
    out.write(' '.join([str(x % v) for x in a]))
    out.write('\n')
    done += k
PY
    mv "$best.tmp" "$best" || return 1
  fi
  echo "$best"
}

DEVNAME=""
if command -v nvidia-smi >/dev/null 2>&1; then
  DEVNAME=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
fi
[ "$DEVICE" = cpu ] && DEVNAME="cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //') x $(nproc 2>/dev/null)${DEVNAME:+ (gpu present: $DEVNAME)}"

say ""
say "== lattice training benchmark =="
say "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
say "host:    $(hostname 2>/dev/null)"
say "device:  ${DEVNAME:-unknown (no nvidia-smi)} [train.device=$DEVICE]"
say "lattice: $LT ($("$LT" --version 2>/dev/null | head -2 | tr '\n' ';' | sed 's/;$//'))"
say "tree:    $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git status --porcelain 2>/dev/null | grep -q . && echo ' (with local changes)')"
say "steps:   $STEPS per run; micro batches tried: $MBS_LIST${GLOBAL:+; global batch $GLOBAL}"
[ ${#EXTRA[@]} -gt 0 ] && say "overrides: ${EXTRA[*]}"
say "peer:    $PEER_WHAT"

ROWS=()
fail_row() { ROWS+=("$name|-|-|-|-|-|-|-|-|-|$1"); }
PROWS=()   # side-by-side rows: config|engine|micro batch|step ms|tokens/s|TFLOP/s|MFU|memory MiB
PNOTES=()  # loss checks and peer failures

# ratio A/B to 2 decimals ("-" when either is missing or B is 0)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'; }

# The peer on lattice's config/micro batch ($cfg, $m, $g, $shard, $SCHED,
# $EXTRA as set by the lattice run), on the batches lattice read (lattice
# batches) from its initial weights (train.steps=0 checkpoint, exported).
run_peer() {
  local pdir=$LOGDIR/$name-peer dump pm=$m prc plog cmp="" sumline
  local init=() cmpargs=() devargs=()
  mkdir -p "$pdir"
  dump=$pdir/batches.bin
  local base=("$cfg" "train.device=$DEVICE" "train.steps=$STEPS" "train.micro_batch_size=$m"
              "train.global_batch_size=$g" "data.train_path=$shard" "data.valid_path="
              "checkpoint.load=" "${SCHED[@]}" "${EXTRA[@]}")
  if ! with_timeout "$LT" batches "${base[@]}" --out "$dump" >"$pdir/batches.log" 2>&1; then
    say "$name: peer: lattice batches failed (log $pdir/batches.log)"
    PNOTES+=("$name: peer FAILED (lattice batches)"); STATUS=1; return
  fi
  if [ "$PEER_INIT" = export ]; then
    # the init is a pure function of the seed: one sample per step is enough
    if with_timeout "$LT" train "${base[@]}" train.steps=0 train.micro_batch_size=1 \
         train.global_batch_size=1 "checkpoint.dir=$pdir/init" logging.metrics_file= \
         >"$pdir/init.log" 2>&1 && "$LT" export "$pdir/init" "$pdir/hf" >>"$pdir/init.log" 2>&1; then
      rm -rf "$pdir/init"
      init=(--init "$pdir/hf")
    else
      say "$name: peer: saving/exporting lattice's initial weights failed (log $pdir/init.log)"
      PNOTES+=("$name: peer FAILED (initial weights)"); STATUS=1; return
    fi
  fi
  [ "$CMP_STEPS" -gt 0 ] && [ -s "$lmetrics" ] && cmpargs=(--compare "$lmetrics" --compare-steps "$CMP_STEPS")
  [ "$DEVICE" = auto ] || devargs=(--device "$DEVICE")
  while :; do
    plog=$pdir/peer-mbs$pm.log
    rm -f "$pdir/summary.jsonl"
    local pcmd=("$PY" scripts/bench_peer.py --batches "$dump" "${init[@]}" "${devargs[@]}"
                --steps "$PEER_STEPS" --micro-batch "$pm" --losses-out "$pdir/losses.jsonl"
                --summary "$pdir/summary.jsonl" "${cmpargs[@]}")
    [ -n "$lpeak" ] && pcmd+=(--peak-tflops "$lpeak")
    # shellcheck disable=SC2206
    [ -n "$PEER_ARGS" ] && pcmd+=($PEER_ARGS)
    local t0; t0=$(date +%s)
    with_timeout "${pcmd[@]}" >"$plog" 2>&1
    prc=$?
    if [ $prc = 3 ] && [ $((pm % 2)) = 0 ]; then
      say "$name: peer: out of memory at micro batch $pm, trying $((pm / 2)) (same global batch $g)"
      pm=$((pm / 2)); continue
    fi
    break
  done
  rm -rf "$pdir/hf" "$dump"   # the large files (1.5B: a 6 GB export)
  sumline=$(tail -1 "$pdir/summary.jsonl" 2>/dev/null)
  if [ -z "$sumline" ]; then
    say "$name: peer: FAILED with exit status $prc after $(( $(date +%s) - t0 )) s (log $plog):"
    grep -vE '^peer step' "$plog" | tail -5 | sed 's/^/  | /' | tee -a "$REPORT"
    PNOTES+=("$name: peer FAILED (exit status $prc, log $plog)"); STATUS=1; return
  fi
  say "$name: peer: ok in $(( $(date +%s) - t0 )) s: $(grep '^peer done:' "$plog" | tail -1 | sed 's/^peer done: //')"
  CMDS+=("$name peer: ${pcmd[*]}")
  local f
  f=$(python3 -c 'import json, sys
s = json.loads(sys.argv[1])
mode = ("compiled per block" if s.get("compile_blocks") else "compiled") if s["compile"] else "eager"
experts = s.get("experts", "")
if experts:
    mode += ", grouped_mm experts" if experts.startswith("torch grouped_mm") else ", a matmul per expert"
print("%.1f %.0f %.3f %.1f %.1f %s" % (s["median_step_ms"], s["tokens_per_sec"], s["tflops_per_device"],
      100 * s["mfu"], s["memory_mib"], mode))' "$sumline")
  local pmed ptok ptfl pmfu pmem pmode
  read -r pmed ptok ptfl pmfu pmem pmode <<<"$f"
  PROWS+=("$name|lattice|$m|$med|$tok|$tfl|$mfu%|$mem")
  PROWS+=("$name|pytorch ($pmode)|$pm$([ "$pm" != "$m" ] && echo " (OOM at $m)")|$pmed|$ptok|$ptfl|$pmfu%|$pmem")
  PROWS+=("$name|ratio lattice/peer|-|$(ratio "$med" "$pmed")|$(ratio "$tok" "$ptok")|$(ratio "$tfl" "$ptfl")|$(ratio "$mfu" "$pmfu")|$(ratio "$mem" "$pmem")")
  # the side-by-side figures now, in case the run is stopped before the table
  say "side by side: $name lattice mbs $m ${med} ms ${tok} tok/s MFU ${mfu}%; pytorch ($pmode) mbs $pm ${pmed} ms ${ptok} tok/s MFU ${pmfu}%; ratio lattice/peer tokens/s $(ratio "$tok" "$ptok")"
  cmp=$(grep -E '^compare: (PASS|FAIL)' "$plog" | tail -1)
  if [ ${#cmpargs[@]} -gt 0 ]; then
    if [ -n "$cmp" ]; then PNOTES+=("$name: loss check (first $CMP_STEPS steps, lattice vs peer) ${cmp#compare: }")
    else PNOTES+=("$name: loss check did not run (log $plog)"); fi
    case "$cmp" in "compare: PASS"*) ;; *) STATUS=1 ;; esac
  else
    PNOTES+=("$name: no loss check ($([ "$PEER_INIT" = random ] && echo 'peer init random' || echo 'no lattice metrics'))")
  fi
}
CMDS=()
STATUS=0
for cfg in "${CONFIGS[@]}"; do
  name=$(basename "$cfg" .yaml)
  if [ ! -f "$cfg" ]; then
    say "$name: config $cfg not found"; fail_row "config not found"; STATUS=1; continue
  fi
  vocab=$(resolve "$cfg" vocab_size); seq=$(resolve "$cfg" seq_length)
  if [ -z "$vocab" ] || [ -z "$seq" ]; then
    say "$name: cannot resolve the config (lattice train $cfg ${EXTRA[*]} fails to load it):"
    "$LT" train "$cfg" "${EXTRA[@]}" data.train_path= 2>&1 >/dev/null | tail -3 | sed 's/^/  | /' | tee -a "$REPORT"
    fail_row "bad config"; STATUS=1; continue
  fi
  # keep the config's LR schedule but make it valid for a short run
  # (warm-up must fit within the decay steps, which default to train.steps)
  # (the LR during warm-up does not depend on decay_steps)
  warm=$(resolve "$cfg" warmup_steps)
  SCHED=()
  [ -n "$warm" ] && [ "$warm" -gt "$STEPS" ] && SCHED=("optimizer.decay_steps=$warm")
  gmax=${GLOBAL:-$max_mbs}
  need=$(( STEPS * gmax * (seq + 1) + seq + 1 ))
  # the loader wraps around (a new shuffled epoch), so cap the shard at 16M tokens
  [ "$need" -gt 16000000 ] && need=16000000
  shard=$(make_shard "$vocab" "$need") || { say "$name: making the random shard failed"; fail_row "shard failed"; STATUS=1; continue; }
  result=""
  for m in $MBS_LIST; do
    g=${GLOBAL:-$m}
    if [ $(( g % m )) -ne 0 ]; then say "$name: mbs $m skipped (global batch $g is not a multiple)"; continue; fi
    log=$LOGDIR/$name-mbs$m.log
    lmetrics=$LOGDIR/$name-mbs$m.jsonl
    rm -f "$lmetrics"
    cmd=("$LT" train "$cfg" "train.device=$DEVICE" "train.steps=$STEPS"
         "train.micro_batch_size=$m" "train.global_batch_size=$g"
         "data.train_path=$shard" "data.valid_path=" "checkpoint.dir=" "checkpoint.load="
         "logging.metrics_file=$lmetrics" "logging.log_interval=10" "${SCHED[@]}" "${EXTRA[@]}")
    t0=$(date +%s)
    with_timeout "${cmd[@]}" >"$log" 2>&1
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    if [ $rc = 0 ]; then
      done_line=$(grep '^done:' "$log" | tail -1)
      if [ -z "$done_line" ]; then
        say "$name: mbs $m: exit 0 but no 'done:' line (log $log)"; result=fail; break
      fi
      say "$name: mbs $m: ok in ${dt} s: $done_line"
      # the planner's step time for this layout beside the measured one (GPU rows)
      plan_line=$(grep '^planned:' "$log" | tail -1)
      [ -n "$plan_line" ] && say "  $plan_line"
      # where the time went, measured (the last logged step's breakdown) and predicted
      # (the planner's compute by part), so a report says which part is off
      time_line=$(grep -E '^time +forward' "$log" | tail -1)
      [ -n "$time_line" ] && say "  measured: ${time_line#time }"
      of_line=$(grep -E '^time +of the passes' "$log" | tail -1)
      [ -n "$of_line" ] && say "  measured ${of_line#time       }"
      parts_line=$(grep -E '^plan +compute by part' "$log" | tail -1)
      [ -n "$parts_line" ] && say "  predicted: ${parts_line#plan }"
      med=$(echo "$done_line" | sed -n 's/.*median step \([0-9.]*\) ms.*/\1/p')
      tok=$(echo "$done_line" | sed -n 's/.* \([0-9.]*\) tok\/s.*/\1/p')
      tfl=$(echo "$done_line" | sed -n 's/.* \([0-9.]*\) TFLOP\/s per device.*/\1/p')
      mfu=$(echo "$done_line" | sed -n 's/.*MFU \([0-9.]*\)%.*/\1/p')
      params=$(sed -n 's/^model .*: \([0-9.]* M\) parameters.*/\1/p' "$log" | head -1)
      mem=$(sed -n 's/^memory .*total \([0-9.]*\) MiB.*/\1/p' "$log" | head -1)
      backend=$(sed -n 's/^backend *\(.*\), precision \(.*\)/\1 \2/p' "$log" | head -1)
      prec=${backend##* }; backend=${backend% *}
      lpeak=$(sed -n 's/^peak *\([0-9.]*\) TFLOP\/s.*/\1/p' "$log" | head -1)
      ROWS+=("$name|${params:-?}|$prec|$m|$g|$STEPS|$med|$tok|$tfl|$mfu%|${mem:-?}")
      CMDS+=("$name: ${cmd[*]}")
      say "  backend: $backend"
      result=ok
      break
    fi
    last=$(grep -vE '^( |[a-z_]+:$)' "$log" | tail -1)
    if [ $rc = 124 ]; then
      say "$name: mbs $m: timed out after ${TO} s (BENCH_TIMEOUT; log $log)"; result=fail; break
    elif grep -qiE 'out of (gpu |host |device )?memory|CUBLAS_STATUS_ALLOC_FAILED|cannot allocate memory|std::bad_alloc' "$log"; then
      say "$name: mbs $m: out of memory, trying smaller (${last})"
    elif [ $rc = 137 ]; then
      say "$name: mbs $m: killed (exit 137, host out of memory?), trying smaller"
    else
      say "$name: mbs $m: FAILED with exit status $rc after ${dt} s (not out of memory; log $log):"
      grep -vE '^( |[a-z_]+:$)' "$log" | tail -5 | sed 's/^/  | /' | tee -a "$REPORT"
      result=fail; break
    fi
  done
  if [ "$result" != ok ]; then
    fail_row FAILED
    STATUS=1
  elif [ $PEER_ON = 1 ]; then
    run_peer
  fi
done

say ""
say "device: ${DEVNAME:-unknown} [train.device=$DEVICE]"
{
  echo "config|params|precision|micro batch|global batch|steps|median step ms|tokens/s|TFLOP/s per device|MFU|memory MiB"
  printf '%s\n' "${ROWS[@]}"
} | if command -v column >/dev/null 2>&1; then column -t -s '|'; else tr '|' '\t'; fi | tee -a "$REPORT"
if [ ${#PROWS[@]} -gt 0 ] || [ ${#PNOTES[@]} -gt 0 ]; then
  say ""
  say "== lattice vs its plain PyTorch peer (scripts/bench_peer.py), same device, shapes, batches =="
  if [ ${#PROWS[@]} -gt 0 ]; then
    {
      echo "config|engine|micro batch|median step ms|tokens/s|TFLOP/s per device|MFU|memory MiB"
      printf '%s\n' "${PROWS[@]}"
    } | if command -v column >/dev/null 2>&1; then column -t -s '|'; else tr '|' '\t'; fi | tee -a "$REPORT"
  fi
  for n in "${PNOTES[@]}"; do say "$n"; done
  say "(both: median step time after warm-up, TFLOP/s from lattice's FLOP count and its peak;"
  say " memory: lattice = its own buffers (params, grads, optimizer, activations, workspace),"
  say " peer = torch.cuda.max_memory_allocated, or peak RSS on the CPU)"
fi
if [ ${#CMDS[@]} -gt 0 ]; then
  say "commands:"
  for c in "${CMDS[@]}"; do say "  $c"; done
fi
say "(median step time over the steps after warm-up, from lattice's 'done:' line; logs in $LOGDIR)"
if [ -n "$OUT" ]; then cat "$REPORT" >>"$OUT" && echo "appended to $OUT"; fi
exit $STATUS
