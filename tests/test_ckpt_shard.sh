#!/usr/bin/env bash
# test_ckpt_shard.sh BUILD_DIR - sharded, layout-independent checkpoints under
# mpirun on the CPU backend: a tp2 x pp2 x dp2 (ZeRO 1) run saves one state
# file per rank; loading it at (4,1,2), (1,4,2), (1,1,8) and (2,2,1), with
# other ZeRO stages, and saving again gives identical tensors (compared by
# tests/read_state.py --digest) and training continues as from the original;
# the host memory a save or load takes stays within the rank's own state plus
# the I/O buffer; every state file flipped, truncated or deleted is refused
# naming it; synchronous and asynchronous saves are byte-identical.
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" ckshard
use_mpirun
text_shard "$T/train.ltok" || { fail prepare "lattice shard failed"; exit 1; }
# hidden 128 x 8 layers: 1.6 M parameters, 19 MB of fp32 state, so that a
# rank's part and the 1 MiB I/O buffer are visibly smaller than the whole
BASE="configs/tiny.yaml model.num_layers=8 model.hidden_size=128 model.seq_length=32
      data.train_path=$T/train.ltok train.micro_batch_size=1 logging.log_interval=100
      eval.interval=0 optimizer.eps=1e-6 optimizer.decay_steps=5 checkpoint.io_buffer_mib=1"
L222="parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 optimizer.zero_stage=1"

$MPI -np 8 "$LT" train $BASE $L222 train.steps=3 checkpoint.dir=$T/A >"$T/a.log" 2>&1 ||
  { fail save_8_ranks "$(grep -i error "$T/a.log" | head -2)"; exit 1; }
S=$T/A/step_00000003
n=$(ls $S/state-tp*-pp*-dp*.lt 2>/dev/null | wc -l)
if [ "$n" -eq 8 ] && [ ! -e $S/state.lt ] && python3 tests/read_state.py --digest $S >"$T/ref.txt" 2>&1 &&
   [ "$(grep -c '^param/' "$T/ref.txt")" -eq "$(grep -c '^adam_v/' "$T/ref.txt")" ]; then
  pass "one_state_file_per_rank ($n files, $(wc -l < "$T/ref.txt") tensors)"
else fail one_state_file_per_rank "$n files: $(tail -1 "$T/ref.txt")"; fi

# host memory of a save and a load (the first rank's figures): its own state
# plus buffers within the I/O buffer and the files' record tables (< 1 MiB here)
mem_ok() { # log kind
  python3 - "$1" "$2" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
pat = (r"state copy (\d+) bytes \+ checkpoint buffers peak (\d+) bytes \(I/O buffer (\d+)\); "
       r"the whole model's state is (\d+) bytes") if sys.argv[2] == 'save' else \
      (r"its state (\d+) bytes \+ checkpoint buffers peak (\d+) bytes \(I/O buffer (\d+)\); "
       r"the whole model's state is (\d+) bytes")
m = re.findall(pat, text)
assert m, 'no memory figures in the log'
for own, peak, io, whole in (tuple(map(int, x)) for x in m):
    assert peak <= io + (1 << 20), (peak, io)
    assert own + peak < whole / 2, (own, peak, whole)
print(m[-1])
PY
}
if r=$(mem_ok "$T/a.log" save 2>&1); then pass "save_memory_own_shards_plus_buffer $r"
else fail save_memory_own_shards_plus_buffer "$r"; fi

# ---- reshard: load at other layouts, save again at the same step ------------
# (train.steps = the checkpoint's step: nothing trains, the end-of-run save
# writes the loaded state in the new layout), then train on for 2 steps
$MPI -np 8 "$LT" train $BASE $L222 train.steps=5 checkpoint.load=$T/A checkpoint.dir=$T/A2 \
  logging.metrics_file=$T/ref.jsonl >"$T/a2.log" 2>&1 || fail continue_8_ranks "$(tail -2 "$T/a2.log")"
reshard() { # name np overrides
  local name=$1 np=$2 o=$3 out=$T/$1
  mkdir -p $out
  $MPI -np $np "$LT" train $BASE $o train.steps=3 checkpoint.load=$T/A checkpoint.dir=$out/ck \
    >$out/load.log 2>&1 &&
  python3 tests/read_state.py --digest $out/ck/step_00000003 >$out/digest.txt 2>&1 &&
  diff -q "$T/ref.txt" $out/digest.txt >/dev/null &&
  $MPI -np $np "$LT" train $BASE $o train.steps=5 checkpoint.load=$out/ck checkpoint.dir=$out/ck2 \
    logging.metrics_file=$out/m.jsonl >$out/cont.log 2>&1 &&
  python3 tests/compare_runs.py --resumed "$T/ref.jsonl" $out/m.jsonl 4 5 1e-5 >$out/cmp.txt 2>&1
}
for spec in "tp4_dp2_zero2 8 parallel.tensor_model_parallel_size=4 optimizer.zero_stage=2" \
            "pp4_dp2_zero0 8 parallel.pipeline_model_parallel_size=4 optimizer.zero_stage=0" \
            "dp8_zero1 8 optimizer.zero_stage=1" \
            "tp2_pp2_dp1 4 parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2"; do
  set -- $spec
  name=$1 np=$2; shift 2
  if reshard $name $np "$*"; then pass "reshard_2x2x2_to_$name"
  else fail "reshard_2x2x2_to_$name" "$(grep -ih 'error\|differ\|mismatch' $T/$name/*.log $T/$name/*.txt 2>/dev/null | head -3)"; fi
done
if r=$(mem_ok "$T/dp8_zero1/load.log" load 2>&1); then pass "load_memory_own_shards_plus_buffer $r"
else fail load_memory_own_shards_plus_buffer "$r"; fi

# ---- a damaged state file is refused, naming it -------------------------------
one="$LT train $BASE train.steps=3 checkpoint.dir=$T/junk"
bad=0 checked=0
for f in $S/state-*.lt; do
  b=${f##*/}
  for how in flip truncate delete; do
    [ "$how" != flip ] && [ $checked -ge 10 ] && continue
    rm -rf "$T/bad" && cp -r $S "$T/bad"
    case $how in
      flip) python3 -c "
import sys; p = sys.argv[1]; d = bytearray(open(p, 'rb').read()); d[len(d) // 2] ^= 0x40
open(p, 'wb').write(d)" "$T/bad/$b" ;;
      truncate) truncate -s -100 "$T/bad/$b" ;;
      delete) rm "$T/bad/$b" ;;
    esac
    $one checkpoint.load=$T/bad >"$T/bad.log" 2>&1
    rc=$?
    checked=$((checked + 1))
    if [ $rc -eq 0 ] || ! grep -q "$b" "$T/bad.log"; then
      bad=$((bad + 1)); echo "  $how $b: rc=$rc $(grep -i error "$T/bad.log" | head -1)"
    fi
  done
done
if [ $bad -eq 0 ]; then pass "damaged_state_file_refused_naming_it ($checked cases)"
else fail damaged_state_file_refused_naming_it "$bad of $checked damages not refused by name"; fi
# meta.json that does not list a file, or lists it with another size
rm -rf "$T/bad" && cp -r $S "$T/bad"
python3 - "$T/bad/meta.json" <<'PY'
import json, sys, zlib
p = sys.argv[1]
m = json.load(open(p))
m['files'][3]['bytes'] += 64
body = json.dumps({k: v for k, v in m.items() if k != 'meta_crc32'}, indent=2)[:-2] + ',\n'
open(p, 'w').write(body + '  "meta_crc32": %d\n}\n' % zlib.crc32(body.encode()))
PY
$one checkpoint.load=$T/bad >"$T/bad.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "meta.json says" "$T/bad.log"; then pass meta_json_must_match_files
else fail meta_json_must_match_files "rc=$rc $(grep -i error "$T/bad.log" | head -1)"; fi

# ---- asynchronous sharded saves: byte-identical to synchronous ones -----------
$MPI -np 8 "$LT" train $BASE $L222 train.steps=3 checkpoint.dir=$T/B checkpoint.async=true \
  checkpoint.save_interval=2 >"$T/b.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "written in the background" "$T/b.log" && same_state $S $T/B/step_00000003 &&
   [ -f $T/B/step_00000002/meta.json ]; then pass async_sharded_saves_identical
else fail async_sharded_saves_identical "rc=$rc $(grep -i error "$T/b.log" | head -2)"; fi
exit $((failures > 0))
