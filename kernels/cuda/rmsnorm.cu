/* rmsnorm.cu - residual add fused with RMSNorm (Llama's norm: no mean, no
 * bias) and its one-pass backward.
 *
 * Design note. The layout is layernorm.cu's: each row belongs to one warp,
 * moved in 16-byte packs (bf16 x 8, fp32 x 4) when C is a multiple of the
 * pack and every tensor is 16-byte aligned, else one element per access
 * (VEC = 1, the same kernels). Lanes own the packs lane, lane + 32, ... of the
 * row, and each warp owns a slice of dynamic shared memory in which only that
 * lane touches its packs' slots: no barrier inside a row. The row staging, the
 * block's warp-order partial sum and the launch sizing are layernorm.cu's own
 * (rownorm.cuh).
 *  - Forward: the residual sum (rounded to the act type and stored; that
 *    rounded x is what is normalized, as on the CPU backend and in add_act)
 *    goes to the warp's slice as it is formed, and the same loop accumulates
 *    the lane's sum of x^2: a and b are read once and one warp sum gives
 *    rstd (RMSNorm has no mean, so no second statistics pass); out comes
 *    from the slice.
 *  - Backward, one pass over (dout, inp): a row's packs are loaded once and
 *    kept in the warp's slice while the loop accumulates the row's
 *    sum(dout * w * xhat) and the warp's dw (lane-owned fp32 slots); after one
 *    warp sum, dinp += from the slice. Rows are spread over blocks as in
 *    layernorm_bwd (block b's warps take rows b * W + w, stepping by G * W,
 *    G = min(ceil(N / W), 256)); each block adds its W warps' dw in warp
 *    order into its row of the partials (G, C) in the stream's scratch, and
 *    reduce.cu's column sum adds the G rows in order into dw. Deterministic,
 *    no atomics; dinp accumulates (+=) as backend.h requires.
 * Shared memory: forward W * C * s bytes (W = min(8, 48 KiB / (C * s)));
 * backward W * C * (4 + 2s) (W = min(8, 96 KiB / that per warp): dw alone
 * where layernorm_bwd keeps dw | db). A row too large for one warp's slice
 * within the device's opt-in limit is refused (lt_fatal): the backward takes
 * C <= 19.3K fp32 / 29K bf16 on an H100 (227 KiB), 13.9K / 20.8K on an A100
 * (163 KiB). Rows as wide as Llama 3.1 405B's (C 16K bf16) get one warp per
 * block in both directions, so few warps per SM; a block per row would suit
 * them better (not written; the same holds for layernorm.cu).
 *
 * Bytes per element (s = sizeof(act); w and rstd come from cache). Forward:
 * with the residual 4s (read a, b; write resid_out, out), without 2s - the
 * floor. Backward: 4s (read dout, inp, dinp; write dinp) - the floor - plus
 * 4 * C * G bytes of partials written and read once (G <= 256 rows of C
 * floats). */
#include "common.cuh"
#include "rownorm.cuh"

#define RMS_FWD_SMEM (48 * 1024)
#define RMS_BWD_SMEM (96 * 1024)
#define RMS_BWD_MAX_BLOCKS 256

/* ======================= kernels ======================= */

// a, b (N, C) -> resid_out = a + b when b != NULL (N, C); out (N, C) = x * rstd * w; rstd (N).
template <typename T, int VEC>
__global__ void __launch_bounds__(ROW_WARPS * 32)
    rmsnorm_fwd_kernel(T *resid_out, T *out, float *rstd, const T *a, const T *b, const T *w,
                       float eps, int N, int C) {
    extern __shared__ __align__(16) unsigned char rms_smem[];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int row = blockIdx.x * (blockDim.x >> 5) + wid;
    if (row >= N) return;
    T *xs = reinterpret_cast<T *>(rms_smem) + (size_t)wid * C;
    const size_t off = (size_t)row * C;
    const float ss =
        warp_sum(row_stage<T, VEC, true>(xs, resid_out + off, a + off, b ? b + off : b, C, lane));
    const float r = 1.f / sqrtf(ss / (float)C + eps);
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        float x[VEC], g[VEC];
        ld_f<VEC>(xs + c, x);
        ld_f<VEC>(w + c, g);
#pragma unroll
        for (int k = 0; k < VEC; k++) x[k] = x[k] * r * g[k];
        st_f<VEC>(out + off + c, x);
    }
    if (lane == 0) rstd[row] = r;
}

// One row of the backward: dout, inp (C) -> cache (2C: dout | inp); acc (C: dw) += dout * xhat;
// dinp (C) += r * (dout * w - xhat * mean(dout * w * xhat)), xhat = inp * r.
template <typename T, int VEC>
__device__ __forceinline__ void rms_bwd_row(T *dinp, float *acc, T *cache, const T *dout,
                                            const T *inp, const T *w, float r, int C, int lane) {
    float s = 0.f;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        const Pack<T, VEC> dp = ld_pack<VEC>(dout + c), xp = ld_pack<VEC>(inp + c);
        float g[VEC], aw[VEC];
        ld_f<VEC>(w + c, g);
        ld_f<VEC>(acc + c, aw);
        st_pack<VEC>(cache + c, dp);
        st_pack<VEC>(cache + C + c, xp);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const float dy = to_f(dp.v[k]), xh = to_f(xp.v[k]) * r;
            s += dy * g[k] * xh;
            aw[k] += dy * xh;
        }
        st_f<VEC>(acc + c, aw);
    }
    const float m = warp_sum(s) / (float)C;
    for (int c = lane * VEC; c < C; c += 32 * VEC) {
        float dy[VEC], x[VEC], g[VEC], di[VEC];
        ld_f<VEC>(cache + c, dy);
        ld_f<VEC>(cache + C + c, x);
        ld_f<VEC>(w + c, g);
        ld_f<VEC>(dinp + c, di);
#pragma unroll
        for (int k = 0; k < VEC; k++) di[k] += r * (dy[k] * g[k] - x[k] * r * m);
        st_f<VEC>(dinp + c, di);
    }
}

// dinp (N, C) += dRMSNorm/dx; part (G, C) row blockIdx <- the block's dw over its rows.
template <typename T, int VEC>
__global__ void __launch_bounds__(ROW_WARPS * 32)
    rmsnorm_bwd_kernel(T *dinp, float *part, const T *dout, const T *inp, const T *w,
                       const float *rstd, int N, int C) {
    extern __shared__ __align__(16) unsigned char rms_smem[];
    const int W = blockDim.x >> 5, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    float *accs = reinterpret_cast<float *>(rms_smem); /* (W, C): each warp's dw */
    float *acc = accs + (size_t)wid * C;
    T *cache = reinterpret_cast<T *>(accs + (size_t)W * C) + (size_t)wid * 2 * C;
    const float zero[VEC] = {};
    for (int c = lane * VEC; c < C; c += 32 * VEC) st_f<VEC>(acc + c, zero); /* lane's slots */
    for (int row = blockIdx.x * W + wid; row < N; row += gridDim.x * W) {
        const size_t off = (size_t)row * C;
        rms_bwd_row<T, VEC>(dinp + off, acc, cache, dout + off, inp + off, w, rstd[row], C,
                            lane);
    }
    __syncthreads();
    row_block_sum<VEC>(part + (size_t)blockIdx.x * C, accs, W, C);
}

/* ======================= launchers ======================= */

template <typename T, int VEC>
static void rms_fwd_launch(T *resid_out, T *out, float *rstd, const T *a, const T *b, const T *w,
                           float eps, int N, int C, int optin, cudaStream_t st) {
    const int W = row_warps((size_t)C * sizeof(T), RMS_FWD_SMEM);
    const size_t smem = (size_t)W * C * sizeof(T);
    row_smem_opt_in("rmsnorm_fwd", (const void *)rmsnorm_fwd_kernel<T, VEC>, smem, C, optin);
    const unsigned grid = (unsigned)((N + W - 1) / W);
    rmsnorm_fwd_kernel<T, VEC><<<grid, W * 32, smem, st>>>(resid_out, out, rstd, a, b, w, eps, N,
                                                          C);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_rmsnorm_fwd(T *resid_out, T *out, float *rstd, const T *a, const T *b,
                               const T *w, float eps, int N, int C, int optin, cudaStream_t st) {
    if (cu_aligned16(resid_out, out, a, b, w) && C % LT_VEC(T) == 0)
        rms_fwd_launch<T, LT_VEC(T)>(resid_out, out, rstd, a, b, w, eps, N, C, optin, st);
    else
        rms_fwd_launch<T, 1>(resid_out, out, rstd, a, b, w, eps, N, C, optin, st);
}

template <typename T, int VEC>
static void rms_bwd_launch(T *dinp, float *part, int W, int G, const T *dout, const T *inp,
                           const T *w, const float *rstd, int N, int C, int optin,
                           cudaStream_t st) {
    const size_t smem = (size_t)W * C * (sizeof(float) + 2 * sizeof(T));
    row_smem_opt_in("rmsnorm_bwd", (const void *)rmsnorm_bwd_kernel<T, VEC>, smem, C, optin);
    rmsnorm_bwd_kernel<T, VEC><<<G, W * 32, smem, st>>>(dinp, part, dout, inp, w, rstd, N, C);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_rmsnorm_bwd(T *dinp, float *dw, float *part, int W, int G, const T *dout,
                               const T *inp, const T *w, const float *rstd, int N, int C,
                               int optin, cudaStream_t st) {
    if (cu_aligned16(dinp, dout, inp, w) && C % LT_VEC(T) == 0)
        rms_bwd_launch<T, LT_VEC(T)>(dinp, part, W, G, dout, inp, w, rstd, N, C, optin, st);
    else
        rms_bwd_launch<T, 1>(dinp, part, W, G, dout, inp, w, rstd, N, C, optin, st);
    if (dw) launch_colsum_f32_add(dw, part, (size_t)C, G, C, st);
}

/* ======================= op entries ======================= */

void cu_rmsnorm_fwd(LtBackend *be, void *resid_out, void *out, float *rstd, const void *a,
                    const void *b, const void *w, float eps, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const int optin = cu_impl(be)->smem_optin;
    if (cu_is_bf16(be))
        launch_rmsnorm_fwd<bf16>((bf16 *)resid_out, (bf16 *)out, rstd, (const bf16 *)a,
                                 (const bf16 *)b, (const bf16 *)w, eps, N, C, optin,
                                 cu_stream(be));
    else
        launch_rmsnorm_fwd<float>((float *)resid_out, (float *)out, rstd, (const float *)a,
                                  (const float *)b, (const float *)w, eps, N, C, optin,
                                  cu_stream(be));
}

void cu_rmsnorm_bwd(LtBackend *be, void *dinp, float *dw, const void *dout, const void *inp,
                    const void *w, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (!dinp) lt_fatal("rmsnorm_bwd: the CUDA backend needs dinp (the input gradient)");
    const int W = row_warps((size_t)C * (sizeof(float) + 2 * be->act_size), RMS_BWD_SMEM);
    const int G0 = (N + W - 1) / W;
    const int G = G0 < RMS_BWD_MAX_BLOCKS ? G0 : RMS_BWD_MAX_BLOCKS;
    float *part = (float *)cu_scratch(be, (size_t)G * C * sizeof(float));
    const int optin = cu_impl(be)->smem_optin;
    if (cu_is_bf16(be))
        launch_rmsnorm_bwd<bf16>((bf16 *)dinp, dw, part, W, G, (const bf16 *)dout,
                                 (const bf16 *)inp, (const bf16 *)w, rstd, N, C, optin,
                                 cu_stream(be));
    else
        launch_rmsnorm_bwd<float>((float *)dinp, dw, part, W, G, (const float *)dout,
                                  (const float *)inp, (const float *)w, rstd, N, C, optin,
                                  cu_stream(be));
}
