#!/usr/bin/env python3
"""transform.py KERNEL.cu > OUT.cpp - rewrite a CUDA kernel file (kernels/cuda) for the
host emulation (tests/emu/common.cuh): inline-PTX helpers (mma.sync, cp.async)
become calls into the emulation, dynamic shared memory becomes the emulated
block's buffer, statically sized __shared__ variables become pointers into
its static arena (emu_static_smem), and every launch NAME<<<grid, block, smem, stream>>>(args)
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
for name, trans in (('ldsm_x4', 'false'), ('ldsm_x4_t', 'true')):
    src = re.sub(r'__device__ __forceinline__ void %s\(.*?\n}\n' % name,
                 'static inline void %s(uint32_t r[4], const bf16 *row) '
                 '{ emu_ldmatrix_x4(r, row, %s); }\n' % (name, trans), src, flags=re.S)
src = re.sub(r'__device__ __forceinline__ void cp_async16\(.*?\n}\n',
             'static inline void cp_async16(void *s, const void *g, bool v) '
             '{ emu_cp_async16(s, g, v); }\n', src, flags=re.S)
src = re.sub(r'__device__ __forceinline__ void cp_async_commit\(\).*?\n',
             'static inline void cp_async_commit() {}\n', src)
src = re.sub(r'template <int N> __device__ __forceinline__ void cp_async_wait\(\) \{.*?\n}\n',
             'template <int N> static inline void cp_async_wait() {}\n', src, flags=re.S)
# dynamic shared memory: the emulated block's buffer
src = re.sub(r'extern __shared__\s+(?:__align__\(\d+\)\s+)?([\w ]+?)\s+(\w+)\[\]\s*;',
             lambda m: '%s *%s = (%s *)g_smem;' % (m.group(1), m.group(2), m.group(1)), src)


counter = [0]


def static_shared(m):
    """__shared__ TYPE NAME[DIMS]; -> a pointer into the block's static arena."""
    typ, name, dims = m.group(1).strip(), m.group(2), m.group(3) or ''
    counter[0] += 1
    key = '"%s:%d"' % (sys.argv[1], counter[0])
    if not dims:
        return '%s &%s = *(%s *)emu_static_smem(%s, sizeof(%s));' % (typ, name, typ, key, typ)
    first = re.match(r'\[[^\]]+\]', dims).group(0)
    rest = dims[len(first):]
    return '%s (*%s)%s = (%s (*)%s)emu_static_smem(%s, sizeof(%s%s));' % (
        typ, name, rest, typ, rest, key, typ, dims)


src = re.sub(r'(?<!extern )__shared__\s+(?:__align__\(\d+\)\s+)?([\w ]+?)\s+(\w+)((?:\[[^\]]+\])*)\s*;',
             static_shared, src)


def top_level_split(text):
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ''
    for ch in text:
        if ch == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
            continue
        depth += (ch == '(') - (ch == ')')
        cur += ch
    parts.append(cur.strip())
    return parts


def launch(m):
    name, cfg, args = m.group(1), m.group(2), m.group(3)
    parts = top_level_split(cfg) + ['0']
    return 'emu_run(%s, dim3(%s), %s, [=] { %s(%s); });' % (parts[0], parts[1], parts[2], name, args)


src = re.sub(r'([A-Za-z_][\w<>, ]*?)<<<(.*?)>>>\((.*?)\);', launch, src, flags=re.S)
for left in ('asm', '<<<', 'extern __shared__'):
    if re.search(r'\b' + re.escape(left) if left[0].isalpha() else re.escape(left), src):
        sys.exit('transform.py: %s: "%s" is left after the rewrite; teach tests/emu about it'
                 % (sys.argv[1], left))
sys.stdout.write(src)
