#!/usr/bin/env python3
"""transform.py KERNEL.cu > OUT.cpp - rewrite an attention kernel file for the
host emulation (tests/emu/common.cuh): inline-PTX helpers (mma.sync, cp.async)
become calls into the emulation, dynamic shared memory becomes the emulated
block's buffer, and every launch NAME<<<grid, block, smem, stream>>>(args)
becomes emu_run(grid, block, smem, [=] { NAME(args); }). Fails loudly when
something GPU-only is left, so a kernel change that the rewrite does not cover
stops the build instead of testing something else."""
import re
import sys

src = open(sys.argv[1]).read()
src = re.sub(r'__device__ __forceinline__ void mma_bf16\(.*?\n}\n',
             'static inline void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, '
             'uint32_t a3, uint32_t b0, uint32_t b1) { emu_mma(c, a0, a1, a2, a3, b0, b1); }\n',
             src, flags=re.S)
src = re.sub(r'__device__ __forceinline__ void cp_async16\(.*?\n}\n',
             'static inline void cp_async16(void *s, const void *g, bool v) '
             '{ emu_cp_async16(s, g, v); }\n', src, flags=re.S)
src = re.sub(r'__device__ __forceinline__ void cp_async_commit\(\).*?\n',
             'static inline void cp_async_commit() {}\n', src)
src = re.sub(r'template <int N> __device__ __forceinline__ void cp_async_wait\(\) \{.*?\n}\n',
             'template <int N> static inline void cp_async_wait() {}\n', src, flags=re.S)
src = src.replace('extern __shared__ __align__(16) unsigned char am_raw[];',
                  'unsigned char *am_raw = g_smem;')
src = src.replace('extern __shared__ float as_sm[];', 'float *as_sm = (float *)g_smem;')


def launch(m):
    name, cfg, args = m.group(1), m.group(2), m.group(3)
    parts = [p.strip() for p in cfg.split(',')]
    return 'emu_run(%s, dim3(%s), %s, [=] { %s(%s); });' % (parts[0], parts[1], parts[2], name, args)


src = re.sub(r'([A-Za-z_][\w<>, ]*?)<<<(.*?)>>>\((.*?)\);', launch, src, flags=re.S)
for left in ('asm', '<<<', 'extern __shared__'):
    if re.search(r'\b' + re.escape(left) if left[0].isalpha() else re.escape(left), src):
        sys.exit('transform.py: %s: "%s" is left after the rewrite; teach tests/emu about it'
                 % (sys.argv[1], left))
sys.stdout.write(src)
