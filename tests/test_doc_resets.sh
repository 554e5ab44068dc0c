#!/usr/bin/env bash
# test_doc_resets.sh BUILD_DIR - data.reset_position_ids and
# data.reset_attention_mask (Megatron's document resets, with EOD loss
# masking): a sample packing documents is trained as the same model in one
# process and under TP 2 x PP 2 x DP 2 (8 ranks, with sequence parallelism
# for Llama), for GPT (learned positions) and Llama (RoPE, grouped K/V);
# each reset changes the model; evaluation with the resets equals the mean of
# each document evaluated alone; bad settings are refused. (That a packed
# sample gives the losses and gradients of its documents run separately is
# tests/test_model.c's test_packed_documents; the kernels, test_ops_cpu and
# the emulated CUDA op tests.)
set -u
BUILD=$1
. "$(dirname "$0")/lib.sh" doc_resets
use_mpirun

# English text, byte-level: the newline (10) ends a document
text_shard "$T/text.ltok"
RESET=(data.eod_token=10 data.eod_mask_loss=true data.reset_position_ids=true
       data.reset_attention_mask=true)
COMMON=(train.steps=6 optimizer.decay_steps=6 data.train_path=$T/text.ltok data.valid_path=
        logging.log_interval=1)
losses() { grep -o '"loss": [0-9.e+-]*' "$1" | cut -d' ' -f2 | tr '\n' ' '; }

# ---- one process vs TP 2 x PP 2 x DP 2, GPT and Llama -------------------------
for arch in gpt llama; do
  CFG=configs/tiny.yaml EXTRA=()
  [ $arch = llama ] && CFG=configs/llama-tiny.yaml EXTRA=(parallel.sequence_parallel=true)
  "$LT" train $CFG "${COMMON[@]}" "${RESET[@]}" logging.metrics_file=$T/$arch.1.jsonl \
    >"$T/$arch.1.log" 2>&1
  $MPI -np 8 "$LT" train $CFG "${COMMON[@]}" "${RESET[@]}" "${EXTRA[@]}" \
    parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2 \
    logging.metrics_file=$T/$arch.8.jsonl >"$T/$arch.8.log" 2>&1 </dev/null
  if [ -s "$T/$arch.1.jsonl" ] && [ -s "$T/$arch.8.jsonl" ] &&
     close_losses "$T/$arch.1.jsonl" "$T/$arch.8.jsonl" 1-6; then
    pass "resets_${arch}_tp2_pp2_dp2_matches_one_process"
  else fail "resets_${arch}_tp2_pp2_dp2_matches_one_process" \
    "$(grep -ih error "$T/$arch.1.log" "$T/$arch.8.log" | head -2)"; fi
  # each reset on its own changes the model (the masks and positions are used)
  for r in data.reset_position_ids=false data.reset_attention_mask=false; do
    "$LT" train $CFG "${COMMON[@]}" "${RESET[@]}" $r logging.metrics_file=$T/$arch.x.jsonl \
      >/dev/null 2>&1
    if [ -s "$T/$arch.x.jsonl" ] && [ "$(losses "$T/$arch.x.jsonl")" != "$(losses "$T/$arch.1.jsonl")" ]
    then pass "${arch}_${r%%=*}_matters"
    else fail "${arch}_${r%%=*}_matters" "the losses without it equal those with both resets"; fi
  done
done

# ---- evaluation: a packed sample = its documents evaluated alone -------------
# one sample of 33 tokens: document A (ending in a newline) then document B;
# alone, each is a sample at the start of its own file, padded with
# newlines whose predictions the mask drops (A's own newline's too)
python3 - "$T" <<'PY'
import sys
d = sys.argv[1]
a = list(b"Packed documents do not see ea\n")  # 31 tokens, the last an EOD
b = [ord("c"), 10]                            # document B: one token, then its EOD
s = a + b                                     # 33 tokens: inputs 0..31, targets 1..32
open(f"{d}/pk.ids", "w").write(" ".join(map(str, s)))
open(f"{d}/a.ids", "w").write(" ".join(map(str, a + [10, 10])))
open(f"{d}/b.ids", "w").write(" ".join(map(str, b + [10] * 31)))
PY
for f in pk a b; do "$LT" shard --vocab-size 256 --input "$T/$f.ids" "$T/$f.ltok" >/dev/null; done
"$LT" train configs/tiny.yaml train.steps=4 data.train_path=$T/text.ltok data.valid_path= \
  checkpoint.dir=$T/ck "${RESET[@]}" >"$T/ck.log" 2>&1 || fail train_for_eval "$(tail -2 "$T/ck.log")"
ev() { # file metrics-stem overrides...
  local f=$1 m=$2; shift 2
  "$LT" eval configs/tiny.yaml data.valid_path=$T/$f.ltok eval.samples=1 train.micro_batch_size=1 \
    checkpoint.load=$T/ck data.eod_token=10 data.eod_mask_loss=true "$@" \
    logging.metrics_file=$T/$m.jsonl >"$T/$m.log" 2>&1
}
ev pk pk "${RESET[@]}"
ev a a
ev b b
ev pk plain
if python3 - "$T" <<'PY'
import json, sys
d = sys.argv[1]
val = lambda m: json.loads(open(f"{d}/{m}.eval.jsonl").read().splitlines()[-1])["val_loss"]
# counted positions: A's 30 non-EOD inputs and B's one
pk, a, b, plain = val("pk"), val("a"), val("b"), val("plain")
want = (a * 30 + b * 1) / 31
# B's one loss as the packed evaluations imply it: with the resets B's alone, without them not
b_pk, b_plain = pk * 31 - a * 30, plain * 31 - a * 30
print(f"packed with resets {pk:.8f}, documents alone {want:.8f}, packed without {plain:.8f}; "
      f"B's loss: alone {b:.6f}, packed {b_pk:.6f}, packed without resets {b_plain:.6f}")
sys.exit(0 if abs(pk - want) <= 1e-6 * want and abs(b_pk - b) <= 1e-5 * b
         and abs(b_plain - b) > 5e-4 * b else 1)
PY
then pass resets_eval_equals_documents_alone
else fail resets_eval_equals_documents_alone "$(grep -ih error "$T"/pk.log "$T"/a.log | head -2)"; fi

# ---- refused ------------------------------------------------------------------
bad() { # name pattern overrides...
  local name=$1 pat=$2; shift 2
  "$LT" train configs/tiny.yaml "${COMMON[@]}" "$@" >"$T/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q "$pat" "$T/bad.log"; then pass "$name"
  else fail "$name" "rc $rc: $(grep error "$T/bad.log")"; fi
}
bad reset_positions_need_token "data.reset_position_ids needs data.eod_token" \
  data.reset_position_ids=true
bad reset_attention_needs_token "data.reset_attention_mask needs data.eod_token" \
  data.reset_attention_mask=true
bad resets_no_cuda_graph "data.reset_attention_mask: the document boundaries change" \
  data.eod_token=10 data.reset_attention_mask=true train.cuda_graph=true train.device=auto

exit $((failures > 0))
