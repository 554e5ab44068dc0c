/* rownorm.cuh - the row-per-warp pieces the two norms share (layernorm.cu,
 * rmsnorm.cu; their design notes describe the layout): staging a row, with
 * the fused residual add, into the warp's shared-memory slice; the block's
 * warp-order sum of its weight-gradient slices; the launch sizing and the
 * shared-memory opt-in. Included after common.cuh, also by the emulation's
 * rewrites of those files (tests/emu), which find it on the include path. */
#ifndef LT_CUDA_ROWNORM_CUH
#define LT_CUDA_ROWNORM_CUH

#define ROW_WARPS 8 /* most warps (rows in flight) per block */

// One row: x = a (+ b, rounded, also stored to ro) into the slice xs (C); returns the lane's
// sum of x (SQ false: LayerNorm's mean) or of x^2 (SQ true: RMSNorm's mean square), taken
// over the stored (rounded) values.
template <typename T, int VEC, bool SQ>
__device__ __forceinline__ float row_stage(T *xs, T *ro, const T *a, const T *b, int C,
                                           int lane) {
    float s = 0.f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        float x[VEC];
        ld_f<VEC>(a + c, x);
        if (b) add_f<VEC>(x, b + c);
        const Pack<T, VEC> xp = pack_f<T, VEC>(x); /* a unchanged, or the rounded sum */
        if (b) st_pack<VEC>(ro + c, xp);
        st_pack<VEC>(xs + c, xp);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += SQ ? to_f(xp.v[k]) * to_f(xp.v[k]) : to_f(xp.v[k]);
    }
    return s;
}

// part (n) <- the sum of the block's W warp slices accs (W, n) (fp32), in warp order; the
// block's threads share the packs. After a barrier: every warp's slice is complete.
template <int VEC>
__device__ __forceinline__ void row_block_sum(float *part, const float *accs, int W, int n) {
    for (int c = threadIdx.x * VEC; c < n; c += blockDim.x * VEC) {
        float t[VEC];
        ld_f<VEC>(accs + c, t);
        for (int i = 1; i < W; i++) add_f<VEC>(t, accs + (size_t)i * n + c); /* warp order */
        st_f<VEC>(part + c, t);
    }
}

/* Warps per block (1 .. ROW_WARPS) when each takes `bytes` of dynamic shared memory
 * within `budget`. */
static inline int row_warps(size_t bytes, size_t budget) {
    const size_t w = budget / bytes;
    return w < 1 ? 1 : (w > ROW_WARPS ? ROW_WARPS : (int)w);
}

/* Lets fn use smem bytes of dynamic shared memory, or stops (naming op and C): the row does
 * not fit the device's opt-in limit optin. */
static inline void row_smem_opt_in(const char *op, const void *fn, size_t smem, int C,
                                   int optin) {
    if (smem > (size_t)optin)
        lt_fatal("%s: C=%d needs %zu bytes of shared memory per block (device max %d)", op, C,
                 smem, optin);
    if (smem > 48 * 1024)
        CU_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

#endif
