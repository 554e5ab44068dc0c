/* layernorm.cu - residual add fused with LayerNorm, its one-pass backward,
 * and the residual add alone (add_act).
 *
 * Design note. Both directions give each row to one warp and move the row in
 * 16-byte packs (bf16 x 8, fp32 x 4) when C is a multiple of the pack and
 * every tensor is 16-byte aligned; otherwise the same kernels run with one
 * element per access (VEC = 1). Lanes own the packs lane, lane + 32, ... of
 * the row, and each warp owns a slice of dynamic shared memory in which only
 * that lane ever touches its packs' slots: no barrier inside a row. The
 * row staging, the block's warp-order partial sum and the launch sizing are
 * shared with rmsnorm.cu (rownorm.cuh).
 *  - Forward: the residual sum (rounded to the act type, stored, and that
 *    rounded x is what is normalized, as on the CPU backend) goes to the
 *    warp's slice (C elements) as it is formed, so a and b are read once;
 *    mean, then the centered variance (two-pass, no E[x^2] - mean^2
 *    cancellation) and the output come from the slice.
 *  - Backward, one pass over (dout, inp): a row's packs are loaded once, kept
 *    in the warp's slice, and the same loop accumulates both row reductions
 *    (mean of dxhat and of dxhat * xhat) and the warp's dw/db (lane-owned fp32
 *    slots); after two warp sums, dinp += from the slice. A block's warps take
 *    rows blockIdx * W + w, stepping by G * W (G = min(ceil(N / W), 256), W
 *    from C and the act size only); at the end each block adds its W warps'
 *    dw/db in warp order into its row of the partials (G, 2C) in the stream's
 *    scratch, and reduce.cu's column sum adds the G rows, in order, into dw
 *    and db. Deterministic, no atomics. dinp accumulates (+=) as backend.h
 *    requires.
 *  - add_act: the residual add alone (vec.cuh's AddMap) with the
 *    forward's expression from_f(to_f(a) + to_f(b)), so its result equals
 *    resid_out bit for bit; each element is read and written by one thread,
 *    so out may alias a or b.
 * Shared memory: forward W * C * s bytes (W = min(8, 48 KiB / (C * s)));
 * backward W * 2C * (4 + s) (W = min(8, 96 KiB / that per warp)); a row too
 * large for one warp's slice within the device's opt-in limit is refused
 * (lt_fatal): the backward takes C <= 14.5K fp32 / 19.3K bf16 on an H100
 * (227 KiB), 10.4K / 13.9K on an A100 (163 KiB); before, with dw/db alone in
 * shared memory, 29K / 20.8K in either precision.
 *
 * Bytes per element (s = sizeof(act): 2 bf16, 4 fp32; w, bias, mean, rstd
 * are per row or per column and come from cache). Forward: with the residual
 * 4s (read a, b; write resid_out, out), without 2s - the floor. Backward: 4s
 * (read dout, inp, dinp; write dinp) - the floor - plus 8 * C * G bytes of
 * partials written and read once (G <= 256 rows of 2C floats). add_act 3s.
 * Before: forward re-read the row twice from global memory (L1/L2 hits) and
 * backward read dout and inp twice per row; all accesses 2- or 4-byte
 * scalars (add_act already had 16-byte packs), and the dw/db partials were
 * up to 512 rows summed by one thread per column. */
#include "common.cuh"
#include "rownorm.cuh"

#define LN_EPS 1e-5f
#define LN_FWD_SMEM (48 * 1024)
#define LN_BWD_SMEM (96 * 1024)
#define LN_BWD_MAX_BLOCKS 256

/* ======================= kernels ======================= */

// The lane's sum of (x - m)^2 over its packs of the slice xs (C).
template <typename T, int VEC>
__device__ __forceinline__ float ln_sq_dev(const T *xs, float m, int C, int lane) {
    float s = 0.f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        float x[VEC];
        ld_f<VEC>(xs + c, x);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += (x[k] - m) * (x[k] - m);
    }
    return s;
}

// a, b (N, C) -> resid_out = a + b when b != NULL (N, C); out (N, C); mean, rstd (N).
template <typename T, int VEC>
__global__ void __launch_bounds__(ROW_WARPS * 32)
    layernorm_fwd_kernel(T *resid_out, T *out, float *mean, float *rstd, const T *a, const T *b,
                         const T *w, const T *bias, int N, int C) {
    extern __shared__ __align__(16) unsigned char ln_smem[];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int row = blockIdx.x * (blockDim.x >> 5) + wid;
    if (row >= N) return;
    T *xs = reinterpret_cast<T *>(ln_smem) + (size_t)wid * C;
    const size_t off = (size_t)row * C;
    const float m =
        warp_sum(row_stage<T, VEC, false>(xs, resid_out + off, a + off, b ? b + off : b, C, lane)) /
        (float)C;
    const float r = 1.f / sqrtf(warp_sum(ln_sq_dev<T, VEC>(xs, m, C, lane)) / (float)C + LN_EPS);
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        float x[VEC], g[VEC], bb[VEC];
        ld_f<VEC>(xs + c, x);
        ld_f<VEC>(w + c, g);
        ld_f<VEC>(bias + c, bb);
#pragma unroll
        for (int k = 0; k < VEC; k++) x[k] = (x[k] - m) * r * g[k] + bb[k];
        st_f<VEC>(out + off + c, x);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// One row of the backward: dout, inp (C) -> cache (2C: dout | inp); acc (2C: dw | db) +=;
// dinp (C) += r * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
template <typename T, int VEC>
__device__ __forceinline__ void ln_bwd_row(T *dinp, float *acc, T *cache, const T *dout,
                                           const T *inp, const T *w, float m, float r, int C,
                                           int lane) {
    float s1 = 0.f, s2 = 0.f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        const Pack<T, VEC> dp = ld_pack<VEC>(dout + c), xp = ld_pack<VEC>(inp + c);
        float g[VEC], aw[VEC], ab[VEC];
        ld_f<VEC>(w + c, g);
        ld_f<VEC>(acc + c, aw);
        ld_f<VEC>(acc + C + c, ab);
        st_pack<VEC>(cache + c, dp);
        st_pack<VEC>(cache + C + c, xp);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const float dy = to_f(dp.v[k]), xh = (to_f(xp.v[k]) - m) * r, dxh = dy * g[k];
            s1 += dxh;
            s2 += dxh * xh;
            aw[k] += dy * xh;
            ab[k] += dy;
        }
        st_f<VEC>(acc + c, aw);
        st_f<VEC>(acc + C + c, ab);
    }
    const float m1 = warp_sum(s1) / (float)C, m2 = warp_sum(s2) / (float)C;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        float dy[VEC], x[VEC], g[VEC], di[VEC];
        ld_f<VEC>(cache + c, dy);
        ld_f<VEC>(cache + C + c, x);
        ld_f<VEC>(w + c, g);
        ld_f<VEC>(dinp + c, di);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const float xh = (x[k] - m) * r;
            di[k] += r * (dy[k] * g[k] - m1 - xh * m2);
        }
        st_f<VEC>(dinp + c, di);
    }
}

// dinp (N, C) += dLN/dx; part (G, 2C) row blockIdx <- the block's dw | db over its rows.
template <typename T, int VEC>
__global__ void __launch_bounds__(ROW_WARPS * 32)
    layernorm_bwd_kernel(T *dinp, float *part, const T *dout, const T *inp, const T *w,
                         const float *mean, const float *rstd, int N, int C) {
    extern __shared__ __align__(16) unsigned char ln_smem[];
    const int W = blockDim.x >> 5, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    float *accs = reinterpret_cast<float *>(ln_smem); /* (W, 2C): each warp's dw | db */
    float *acc = accs + (size_t)wid * 2 * C;
    T *cache = reinterpret_cast<T *>(accs + (size_t)W * 2 * C) + (size_t)wid * 2 * C;
    const float zero[VEC] = {};
    for (int c = lane * VEC; c < C; c += 32 * VEC) { /* the slots this lane owns */
        st_f<VEC>(acc + c, zero);
        st_f<VEC>(acc + C + c, zero);
    }
    for (int row = blockIdx.x * W + wid; row < N; row += gridDim.x * W) {
        const size_t off = (size_t)row * C;
        ln_bwd_row<T, VEC>(dinp + off, acc, cache, dout + off, inp + off, w, mean[row],
                           rstd[row], C, lane);
    }
    __syncthreads();
    row_block_sum<VEC>(part + (size_t)blockIdx.x * 2 * C, accs, W, 2 * C);
}

/* ======================= launchers ======================= */

template <typename T, int VEC>
static void ln_fwd_launch(T *resid_out, T *out, float *mean, float *rstd, const T *a, const T *b,
                          const T *w, const T *bias, int N, int C, int optin, cudaStream_t st) {
    const int W = row_warps((size_t)C * sizeof(T), LN_FWD_SMEM);
    const size_t smem = (size_t)W * C * sizeof(T);
    row_smem_opt_in("layernorm_fwd", (const void *)layernorm_fwd_kernel<T, VEC>, smem, C, optin);
    const unsigned grid = (unsigned)((N + W - 1) / W);
    layernorm_fwd_kernel<T, VEC><<<grid, W * 32, smem, st>>>(resid_out, out, mean, rstd, a, b, w,
                                                            bias, N, C);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_layernorm_fwd(T *resid_out, T *out, float *mean, float *rstd, const T *a,
                                 const T *b, const T *w, const T *bias, int N, int C, int optin,
                                 cudaStream_t st) {
    if (cu_aligned16(resid_out, out, a, b, w, bias) && C % LT_VEC(T) == 0)
        ln_fwd_launch<T, LT_VEC(T)>(resid_out, out, mean, rstd, a, b, w, bias, N, C, optin, st);
    else
        ln_fwd_launch<T, 1>(resid_out, out, mean, rstd, a, b, w, bias, N, C, optin, st);
}

template <typename T, int VEC>
static void ln_bwd_launch(T *dinp, float *part, int W, int G, const T *dout, const T *inp,
                          const T *w, const float *mean, const float *rstd, int N, int C,
                          int optin, cudaStream_t st) {
    const size_t smem = (size_t)W * 2 * C * (sizeof(float) + sizeof(T));
    row_smem_opt_in("layernorm_bwd", (const void *)layernorm_bwd_kernel<T, VEC>, smem, C, optin);
    layernorm_bwd_kernel<T, VEC><<<G, W * 32, smem, st>>>(dinp, part, dout, inp, w, mean, rstd,
                                                         N, C);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_layernorm_bwd(T *dinp, float *dw, float *db, float *part, int W, int G,
                                 const T *dout, const T *inp, const T *w, const float *mean,
                                 const float *rstd, int N, int C, int optin, cudaStream_t st) {
    if (cu_aligned16(dinp, dout, inp, w) && C % LT_VEC(T) == 0)
        ln_bwd_launch<T, LT_VEC(T)>(dinp, part, W, G, dout, inp, w, mean, rstd, N, C, optin, st);
    else
        ln_bwd_launch<T, 1>(dinp, part, W, G, dout, inp, w, mean, rstd, N, C, optin, st);
    if (dw) launch_colsum_f32_add(dw, part, (size_t)2 * C, G, C, st);
    if (db) launch_colsum_f32_add(db, part + C, (size_t)2 * C, G, C, st);
}

/* ======================= op entries ======================= */

void cu_layernorm_fwd(LtBackend *be, void *resid_out, void *out, float *mean, float *rstd,
                      const void *a, const void *b, const void *w, const void *bias, int N,
                      int C) {
    if (N <= 0 || C <= 0) return;
    const int optin = cu_impl(be)->smem_optin;
    if (cu_is_bf16(be))
        launch_layernorm_fwd<bf16>((bf16 *)resid_out, (bf16 *)out, mean, rstd, (const bf16 *)a,
                                   (const bf16 *)b, (const bf16 *)w, (const bf16 *)bias, N, C,
                                   optin, cu_stream(be));
    else
        launch_layernorm_fwd<float>((float *)resid_out, (float *)out, mean, rstd,
                                    (const float *)a, (const float *)b, (const float *)w,
                                    (const float *)bias, N, C, optin, cu_stream(be));
}

void cu_layernorm_bwd(LtBackend *be, void *dinp, float *dw, float *db, const void *dout,
                      const void *inp, const void *w, const float *mean, const float *rstd, int N,
                      int C) {
    if (N <= 0 || C <= 0) return;
    if (!dinp) lt_fatal("layernorm_bwd: the CUDA backend needs dinp (the input gradient)");
    const int W = row_warps((size_t)2 * C * (sizeof(float) + be->act_size), LN_BWD_SMEM);
    const int G0 = (N + W - 1) / W;
    const int G = G0 < LN_BWD_MAX_BLOCKS ? G0 : LN_BWD_MAX_BLOCKS;
    float *part = (float *)cu_scratch(be, (size_t)G * 2 * C * sizeof(float));
    const int optin = cu_impl(be)->smem_optin;
    if (cu_is_bf16(be))
        launch_layernorm_bwd<bf16>((bf16 *)dinp, dw, db, part, W, G, (const bf16 *)dout,
                                   (const bf16 *)inp, (const bf16 *)w, mean, rstd, N, C, optin,
                                   cu_stream(be));
    else
        launch_layernorm_bwd<float>((float *)dinp, dw, db, part, W, G, (const float *)dout,
                                    (const float *)inp, (const float *)w, mean, rstd, N, C, optin,
                                    cu_stream(be));
}

void cu_add_act(LtBackend *be, void *out, const void *a, const void *b, size_t n) {
    if (n == 0) return;
    const int vec = cu_aligned16(out, a, b);
    if (cu_is_bf16(be))
        launch_map<LT_VEC(bf16)>(AddMap<bf16>{(bf16 *)out, (const bf16 *)a, (const bf16 *)b}, n,
                                 vec, cu_stream(be));
    else
        launch_map<LT_VEC(float)>(
            AddMap<float>{(float *)out, (const float *)a, (const float *)b}, n, vec,
            cu_stream(be));
}
