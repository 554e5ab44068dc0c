#!/usr/bin/env bash
# make_corpus.sh BUILD_DIR - regenerate the committed seed corpus of the fuzz
# targets (tests/fuzz/corpus/TARGET/): small valid inputs of every format, so
# that the short pass in make test starts from files that parse. Needs a built
# lattice (for its shard writer), the fuzz targets (make) and python3. Each token-file seed starts with
# fuzz_tokens' mode byte (see fuzz_tokens.c).
set -eu
BUILD=${1:-build}
cd "$(dirname "$0")/../.."
C=tests/fuzz/corpus
rm -rf "$C" && mkdir -p "$C/tokens" "$C/safetensors" "$C/config" "$C/checkpoint" "$C/import"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# token ids: two short documents
printf '1 2 3 4 5 6 7 8 9 10 11 12\n300 200 100 7 0 999\n' > "$tmp/ids.txt"
"$BUILD/lattice" shard --vocab-size 1000 --block-tokens 8 --input "$tmp/ids.txt" "$tmp/a.ltok" >/dev/null
"$BUILD/lattice" shard --vocab-size 70000 --block-tokens 5 --input "$tmp/ids.txt" "$tmp/b.ltok" >/dev/null
"$BUILD/lattice" shard --vocab-size 1000 --format llmc --input "$tmp/ids.txt" "$tmp/c.bin" >/dev/null
python3 - "$tmp" "$C" <<'PY'
import json, struct, sys
tmp, C = sys.argv[1], sys.argv[2]
def seed(name, mode, body):
    open(f"{C}/tokens/{name}", "wb").write(bytes([mode]) + body)
seed("lattice_u16", 0x0c, open(f"{tmp}/a.ltok", "rb").read())
seed("lattice_u32", 0x08, open(f"{tmp}/b.ltok", "rb").read())
seed("lattice_nofix", 0x04, open(f"{tmp}/a.ltok", "rb").read())
seed("llmc", 0x05, open(f"{tmp}/c.bin", "rb").read())
# Megatron pair: .idx (magic, version, dtype code, counts, sizes, pointers, doc index) + .bin
for code, elem, name in ((8, 2, "megatron_u16"), (4, 4, "megatron_i32")):
    sizes = [5, 3, 4]
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(sizes), len(sizes) + 1)
    idx += struct.pack(f"<{len(sizes)}i", *sizes)
    ptr, ptrs = 0, []
    for s in sizes:
        ptrs.append(ptr); ptr += s * elem
    idx += struct.pack(f"<{len(sizes)}q", *ptrs) + struct.pack(f"<{len(sizes)+1}q", *range(len(sizes) + 1))
    fmt = "<H" if elem == 2 else "<i"
    binf = b"".join(struct.pack(fmt, (7 * i) % 900) for i in range(sum(sizes)))
    seed(name, 0x06, struct.pack("<H", len(idx)) + idx + binf)
# safetensors: an 8-byte header length, a JSON header, the data
def st(tensors):
    meta, data = {}, b""
    for name, shape, vals in tensors:
        raw = struct.pack(f"<{len(vals)}f", *vals)
        meta[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(meta).encode()
    return struct.pack("<Q", len(h)) + h + data
open(f"{C}/safetensors/two", "wb").write(st([("a", [2, 3], [1, 2, 3, 4, 5, 6]), ("b", [4], [0.5, -1, 2, 8])]))
open(f"{C}/safetensors/gpt2_names", "wb").write(st([("wte.weight", [3, 2], [1] * 6), ("h.0.ln_1.weight", [2], [1, 1])]))
PY
cp configs/tiny.yaml configs/demo.yaml configs/gpt2-124m.yaml "$C/config/"
# the mixture-of-experts keys, with model.moe_layer_freq in both forms (a YAML
# list and Megatron's list expression), so the fuzzer starts inside its parser
cat > "$C/config/moe.yaml" <<'YAML'
model:
  num_layers: 4
  num_experts: 8
  moe_router_topk: 2
  moe_layer_freq: [0, 1, 1, 1]
  moe_shared_expert_intermediate_size: 1024
  moe_aux_loss_coeff: 0.01
  moe_expert_capacity_factor: 1.25
  moe_token_drop_policy: position
parallel:
  expert_model_parallel_size: 1
YAML
cat > "$C/config/moe_expr.yaml" <<'YAML'
model:
  num_layers: 8
  num_experts: 4
  moe_layer_freq: "([0]*2+[1,0]*3)"
  moe_router_score_function: sigmoid
  moe_router_load_balancing_type: seq_aux_loss
YAML
# a real checkpoint of fuzz_checkpoint's tiny model, written by the target itself,
# and one of format version 2 (one whole-tensor state.lt), which is still read
LT_FUZZ_WRITE_SEED="$C/checkpoint/tiny_step3" "$BUILD/fuzz/fuzz_checkpoint"
cp tests/fuzz/legacy/checkpoint_v2_tiny_step3 "$C/checkpoint/"
# a tiny Llama, Mixtral and GPT-2 exported as Hugging Face directories, written by fuzz_import
LT_FUZZ_WRITE_SEED="$C/import" "$BUILD/fuzz/fuzz_import"
ls "$C"/* | wc -l
