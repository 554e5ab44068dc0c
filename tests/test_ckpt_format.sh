#!/usr/bin/env bash
# test_ckpt_format.sh BUILD_DIR - the checkpoint format as docs/formats.md documents
# it is enough for another tool: tests/read_state.py (written from docs/formats.md)
# reads a tiny Llama's checkpoint, of one process and of a tp2 x pp2 x dp2 run
# (one state file per rank), checks every CRC, assembles the tensors from their
# pieces and finds the same weights as lattice's own export; a flipped data byte
# and an edited meta.json are caught by it; a checkpoint whose moments hold
# NaN or Inf (written with every CRC intact) is refused by every reader.
set -u
BUILD=$1
. tests/lib.sh ckfmt
random_shard "$T/train.ltok" 20000 5 || { fail prepare "lattice shard failed"; exit 1; }
"$LT" train configs/llama-tiny.yaml data.train_path=$T/train.ltok train.steps=2 eval.interval=0 \
  logging.log_interval=100 checkpoint.dir=$T/ck >"$T/train.log" 2>&1 ||
  { fail train "$(tail -2 "$T/train.log")"; exit 1; }
use_mpirun
$MPI -np 8 "$LT" train configs/llama-tiny.yaml \
  data.train_path=$T/train.ltok train.steps=2 eval.interval=0 logging.log_interval=100 \
  parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 \
  optimizer.zero_stage=1 checkpoint.dir=$T/ck8 >"$T/train8.log" 2>&1 ||
  { fail train_8_ranks "$(tail -2 "$T/train8.log")"; exit 1; }
S=$T/ck/step_00000002
for run in ck ck8; do
if python3 tests/read_state.py "$T/$run/step_00000002" >"$T/state.txt" 2>&1 &&
   "$LT" export "$T/$run" "$T/hf-$run" >/dev/null 2>&1 &&
   python3 - "$T/state.txt" "$T/hf-$run/model.safetensors" <<'PY'
import json, struct, sys
sums = {l.split()[0]: float(l.split()[2]) for l in open(sys.argv[1]) if l.startswith('param/')}
raw = open(sys.argv[2], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
def total(name):
    s, e = hdr[name]['data_offsets']
    return sum(struct.unpack('<%df' % ((e - s) // 4), raw[8 + n + s:8 + n + e]))
pairs = {'param/wte': 'model.embed_tokens.weight', 'param/lm_head.weight': 'lm_head.weight',
         'param/ln_f.weight': 'model.norm.weight',
         'param/h.1.mlp.down.weight': 'model.layers.1.mlp.down_proj.weight'}
for ours, hf in pairs.items():
    assert abs(sums[ours] - total(hf)) <= 1e-6 * max(1.0, abs(sums[ours])), (ours, sums[ours], total(hf))
assert len(sums) == 1 + 6 * 2 + 2, sorted(sums)
PY
then pass "documented_format_reads_checkpoint_$run ($(tail -1 "$T/state.txt"))"
else fail documented_format_reads_checkpoint_$run "$(tail -2 "$T/state.txt")"; fi
done
# a flipped byte in the last tensor's data, and an edited step in meta.json
cp -r "$S" "$T/bad1" && cp -r "$S" "$T/bad2"
python3 -c "
import sys
p = sys.argv[1] + '/state.lt'; d = bytearray(open(p, 'rb').read()); d[-8] ^= 1; open(p, 'wb').write(d)
p = sys.argv[2] + '/meta.json'; t = open(p).read().replace('\"step\": 2', '\"step\": 3'); open(p, 'w').write(t)" \
  "$T/bad1" "$T/bad2"
e1=$(python3 tests/read_state.py "$T/bad1" 2>&1 >/dev/null); r1=$?
e2=$(python3 tests/read_state.py "$T/bad2" 2>&1 >/dev/null); r2=$?
if [ $r1 -ne 0 ] && echo "$e1" | grep -q "data CRC" && [ $r2 -ne 0 ] && echo "$e2" | grep -q "meta.json CRC"
then pass documented_crcs_catch_damage
else fail documented_crcs_catch_damage "flipped byte: $r1 $e1; edited meta: $r2 $e2"; fi
# a diverged optimizer state (moments NaN or Inf; the CRCs intact, set by
# tests/set_state_value.py from the format's description) is refused by every
# reader, also those that keep no moments: eval, sample, export, resume
for case in "adam_m/h.1.mlp.down.weight nan" "adam_v/wte inf"; do
  set -- $case
  bad=$T/bad-${1%%/*}
  cp -r "$T/ck8/step_00000002" "$bad"
  python3 tests/set_state_value.py "$bad" "$1" "$2"
  refused=""
  for reader in eval sample export resume; do
    case $reader in
      export) cmd=("$LT" export "$bad" "$T/hf-bad") ;;
      resume) cmd=("$LT" train configs/llama-tiny.yaml data.train_path=$T/train.ltok train.steps=3
                   eval.interval=0 checkpoint.dir= checkpoint.load=$bad) ;;
      *) cmd=("$LT" $reader configs/llama-tiny.yaml data.train_path=$T/train.ltok
              data.valid_path=$T/train.ltok sample.num_tokens=4 checkpoint.load=$bad) ;;
    esac
    err=$("${cmd[@]}" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && echo "$err" | grep -q "checkpoint $bad: tensor '$1' holds a non-finite value ($2 at" &&
      refused="$refused $reader"
  done
  if [ "$refused" = " eval sample export resume" ]; then pass "nonfinite_${1%%/*}_refused_by_every_reader"
  else fail "nonfinite_${1%%/*}_refused_by_every_reader" "refused by:$refused; last: rc=$rc $(echo "$err" | tail -1)"; fi
done
exit $((failures > 0))
