#!/usr/bin/env bash
# test_attention_ptx.sh BUILD_DIR - lattice's tensor-core attention kernels are
# fed by ldmatrix: in the compiled PTX (sm_90, kept by the build in
# obj/cuda/keep-attention_mma/) every forward, dq and dK/dV kernel issues at most
# 1.15 shared-memory loads (ldmatrix plus plain ld.shared: the dK/dV kernel's
# per-query lse and D) per mma.sync, and no 16-bit shared loads (the transposed
# operands assembled element by element before). Counts are static over the
# unrolled loop bodies, which is what each loop iteration issues. Without the
# CUDA build it prints SKIP.
set -u
BUILD=${1:-build}
cd "$(dirname "$0")/.."
ptx=$BUILD/obj/cuda/keep-attention_mma/attention_mma.compute_90.ptx
if [ ! -f "$BUILD/obj/cuda/attention_mma.o" ]; then
  echo "SKIP attention_ptx: the CUDA backend is not built (no nvcc, or make CUDA=0)"
  exit 0
fi
if [ ! -f "$ptx" ] || [ "$ptx" -ot kernels/cuda/attention_mma.cu ]; then
  echo "FAIL attention_ptx: $ptx is missing or older than kernels/cuda/attention_mma.cu (rebuild)"
  exit 1
fi
python3 - "$ptx" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
bad = n = 0
for m in re.finditer(r"\.entry (\S+)\((.*?)\n\}\n", src, re.S):
    name, body = m.group(1), m.group(0)
    kind = next((k for k in ("fwd", "dq", "dkdv") if f"attn_mma_{k}_kernel" in name), None)
    if not kind:
        continue
    hd = re.search(r"kernelILi(\d+)E", name).group(1)
    docs = "documents" if re.search(r"Lb1E", name) else "causal"
    mma = len(re.findall(r"\bmma\.sync\b", body))
    ldsm = len(re.findall(r"\bldmatrix\.sync\b", body))
    lds = len(re.findall(r"\bld\.shared\.", body))
    ld16 = len(re.findall(r"\bld\.shared\.(?:u16|b16|s16)\b", body))
    ratio = (ldsm + lds) / max(mma, 1)
    n += 1
    print(f"  {kind:4} HD {hd:>3} {docs:9}: {mma:4} mma, {ldsm:4} ldmatrix, {lds:3} ld.shared"
          f" ({ld16} 16-bit): {ratio:.2f} shared loads per mma")
    if mma == 0 or ldsm == 0 or ld16 or ratio > 1.15:
        print(f"FAIL attention_ptx {name}: {ratio:.2f} shared loads per mma, {ldsm} ldmatrix, "
              f"{ld16} 16-bit shared loads")
        bad += 1
if n < 30:
    print(f"FAIL attention_ptx: {n} tensor-core attention kernels found in the PTX, expected 30")
    bad += 1
if not bad:
    print(f"PASS attention_ptx: {n} kernels, at most 1.15 shared-memory loads per mma, all by ldmatrix"
          " but the dK/dV kernel's row statistics")
sys.exit(1 if bad else 0)
PY
