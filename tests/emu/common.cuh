/* common.cuh (emulation) - stands in for kernels/cuda/common.cuh so the
 * attention kernels compile as host C++ and run without a GPU
 * (tests/emu/test_attention_emu.c; transform.py rewrites their inline PTX
 * and launches).
 *
 * Each CUDA thread of a block is a fiber (its own stack, switched to
 * cooperatively on one host thread): __syncthreads/__syncwarp are barriers at
 * which a thread yields until every thread of the block / warp has arrived,
 * __shfl_xor_sync exchanges through a per-warp array, mma.sync
 * m16n8k16 (bf16 in, fp32 accumulate) is computed from the fragment layout of
 * the PTX ISA (section 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16"), and
 * cp.async is a synchronous copy (zero fill when the source size is 0) that
 * checks bounds and 16-byte alignment. Blocks run one after another, each
 * with shared memory of exactly the launch's size, filled with NaN bytes
 * first, so reading shared memory no thread wrote shows up in the results.
 * What this cannot see: timing, and bugs that need cp.async to complete
 * late (a missing cp.async.wait_group). */
#pragma once
#include <cuda_bf16.h>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdarg>
#include <vector>
#include <functional>
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#include "backend.h"
#include "common.h" /* lt_fatal, lt_malloc */

/* The CUDA runtime calls the kernel files make, on host memory. */
#define CU_CHECK(x) ((void)(x))
#define CU_CHECK_LAUNCH() (void)0
#define cudaFuncSetAttribute(a, b, c) 0
#define cudaMemcpyAsync(dst, src, n, kind, st) (memcpy((dst), (src), (n)), 0)
#define cudaMemsetAsync(dst, v, n, st) (memset((dst), (v), (n)), 0)
#define cudaStreamSynchronize(st) 0
static inline int min(int a, int b) { return a < b ? a : b; }

/* The backend state the kernel files read (kernels/cuda/common.cuh has the
 * real one): the emulated backend's host-memory "device". */
typedef struct {
    int smem_optin;       /* max dynamic shared memory per block */
    int attn_simt;        /* 1: force the SIMT attention path */
    struct CudnnAttn *cudnn; /* always NULL: cuDNN has no emulation */
    int gemm_no_epilogue; /* (no GEMMs here) */
    void *scratch;        /* grow-only, as one LtStream's */
    size_t scratch_bytes;
    LtStream *cur;        /* set_stream's (ops run at once whatever it is) */
} CudaImpl;
static inline CudaImpl *cu_impl(LtBackend *be) { return (CudaImpl *)be->impl; }
static inline cudaStream_t cu_stream(LtBackend *be) { return (cudaStream_t)0; }
static inline int cu_is_bf16(const LtBackend *be) { return be->dtype == LT_BF16; }
void *cu_scratch(LtBackend *be, size_t bytes);

/* A barrier of `count` threads: the last to arrive opens it (a new
 * generation) and runs on; the others yield until it opens
 * (emu_barrier_wait). */
struct EmuBarrier {
    unsigned count, arrived;
    unsigned long gen;
};
/* The emulated block (full warps only): its barriers and the per-warp
 * exchange areas of shuffles, votes and mma fragments. */
#define EMU_MAX_WARPS 32 /* 1024 threads per block */
struct EmuBlock {
    EmuBarrier blk;
    EmuBarrier warp[EMU_MAX_WARPS];
    double shfl[EMU_MAX_WARPS][32];
    unsigned vote[EMU_MAX_WARPS][32];
    uint32_t A[EMU_MAX_WARPS][32][4], B[EMU_MAX_WARPS][32][2];
    const unsigned char *rows[EMU_MAX_WARPS][32]; /* ldmatrix row addresses */
};
extern dim3 threadIdx; /* the running fiber's, set by the scheduler at each switch */
extern dim3 blockIdx, gridDim, blockDim;
extern unsigned char *g_smem;
extern EmuBlock *g_eb;
extern size_t g_smem_bytes;
/* Back to the scheduler, which resumes the block's other threads in turn (and
 * stops the run when every live thread waits at a barrier that cannot open). */
void emu_yield();
extern unsigned long g_emu_progress; /* barriers opened and threads finished */
static inline void emu_barrier_wait(EmuBarrier *b) {
    const unsigned long gen = b->gen;
    if (++b->arrived == b->count) {
        b->arrived = 0, b->gen++, g_emu_progress++;
        return;
    }
    while (b->gen == gen) emu_yield();
}
static inline void __syncthreads() { emu_barrier_wait(&g_eb->blk); }
static inline void __syncwarp() { emu_barrier_wait(&g_eb->warp[threadIdx.x >> 5]); }
/* (float, double and int values pass through a double exactly) */
template <typename V> static inline V __shfl_xor_sync(unsigned, V v, int o) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_eb->shfl[w][l] = (double)v;
    __syncwarp();
    V r = (V)g_eb->shfl[w][l ^ o];
    __syncwarp();
    return r;
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_eb->vote[w][l] = pred != 0;
    __syncwarp();
    unsigned r = 0;
    for (int i = 0; i < 32; i++)
        if ((mask >> i & 1u) && g_eb->vote[w][i]) r |= 1u << i;
    __syncwarp();
    return r;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
/* Statically sized __shared__ variables (transform.py rewrites each
 * declaration into a call with a key naming it): one copy per block, carved
 * from a block arena that starts NaN-filled. */
void *emu_static_smem(const char *key, size_t bytes);
/* The bf16 in the low (half 0) or high half of a fragment register. */
static inline float bfbits(uint32_t reg, int half) {
    uint32_t u = (half ? (reg >> 16) : (reg & 0xffffu)) << 16;
    float f; memcpy(&f, &u, 4); return f;
}
/* mma.sync.m16n8k16.row.col f32.bf16.bf16.f32, fragment layout per PTX ISA 9.7.14.5.8 */
static inline void emu_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_eb->A[w][l][0] = a0; g_eb->A[w][l][1] = a1; g_eb->A[w][l][2] = a2; g_eb->A[w][l][3] = a3;
    g_eb->B[w][l][0] = b0; g_eb->B[w][l][1] = b1;
    __syncwarp();
    const int g = l >> 2, t = l & 3;
    float d[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + (i >= 2 ? 8 : 0), col = t * 2 + (i & 1);
        double acc = c[i];
        for (int k = 0; k < 16; k++) {
            const int al = (row % 8) * 4 + (k % 8) / 2, ar = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
            const int bl = col * 4 + (k % 8) / 2, br = k >= 8 ? 1 : 0;
            acc += (double)bfbits(g_eb->A[w][al][ar], k & 1) * bfbits(g_eb->B[w][bl][br], k & 1);
        }
        d[i] = (float)acc;
    }
    __syncwarp();
    for (int i = 0; i < 4; i++) c[i] = d[i];
}
/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (PTX ISA 9.7.14.5.15): lanes 8i..8i+7
 * give the 16-byte row addresses of matrix i (shared memory, 16-byte aligned); lane l
 * receives in r[i] the b16 pair at row l/4, columns 2(l%4), 2(l%4)+1 of matrix i, or with
 * .trans the pair at column l/4, rows 2(l%4), 2(l%4)+1 (the first in the low half). */
static inline void emu_ldmatrix_x4(uint32_t r[4], const void *row, bool trans) {
    const unsigned char *p = (const unsigned char *)row;
    if (p < g_smem || p + 16 > g_smem + g_smem_bytes) lt_fatal("ldmatrix: row outside shared memory");
    if ((uintptr_t)p % 16) lt_fatal("ldmatrix: row address not 16-byte aligned");
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_eb->rows[w][l] = p;
    __syncwarp();
    for (int i = 0; i < 4; i++) {
        uint16_t h[2];
        for (int e = 0; e < 2; e++) {
            const int rr = trans ? 2 * (l % 4) + e : l / 4, cc = trans ? l / 4 : 2 * (l % 4) + e;
            memcpy(&h[e], g_eb->rows[w][8 * i + rr] + 2 * cc, 2);
        }
        r[i] = (uint32_t)h[0] | (uint32_t)h[1] << 16;
    }
    __syncwarp();
}
static inline void emu_cp_async16(void *smem, const void *gmem, bool valid) {
    if ((unsigned char *)smem < g_smem || (unsigned char *)smem + 16 > g_smem + g_smem_bytes) lt_fatal("smem OOB cp.async");
    if ((uintptr_t)smem % 16 || (uintptr_t)gmem % 16) lt_fatal("cp.async misaligned");
    if (valid) memcpy(smem, gmem, 16); else memset(smem, 0, 16);
}
void emu_run(dim3 grid, dim3 block, size_t smem, std::function<void()> fn);

/* A 16-byte pack (kernels/cuda/vec.cuh) must sit on its alignment, as a GPU
 * requires; x86 would not notice, so the emulation checks every pack access. */
#define LT_PACK_CHECK(p, align)                                                             \
    ((uintptr_t)(p) % (align) ? lt_fatal("emulation: misaligned %zu-byte pack access at %p", \
                                         (size_t)(align), (const void *)(p))                  \
                              : (void)0)
#include "device.cuh" /* kernels/cuda: conversion, reductions, GeLU math, launch sizes */
#include "vec.cuh"    /* kernels/cuda/vec.cuh rewritten by transform.py: packs, map kernel */
#include "ops.cuh"    /* kernels/cuda: the op entries */
