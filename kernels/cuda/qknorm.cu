/* qknorm.cu - per-head RMSNorm of the query and key heads inside qkv
 * (model.qk_layernorm, Megatron-Core's q_layernorm / k_layernorm), in place,
 * and its backward in place on dqkv.
 *
 * Design note. A head row is HD elements (64 or 128 in practice), far narrower
 * than a hidden row, so each row belongs to one warp with one element per
 * lane access (no packs, no shared memory): row r of the (N, NH + NKV) q and
 * k heads sits at element n * (NH + 2 NKV) * HD + h * HD of qkv (n = r /
 * (NH + NKV), h the rest), the q heads first, so h < NH picks wq, else wk.
 *  - Forward: the lane's elements are copied to xin (what the backward needs)
 *    while their squares are summed; one warp sum gives rstd, then the row is
 *    rewritten in place. fp32 arithmetic, one rounding per stored element.
 *  - Backward: the weight gradients first (they read dout before it is
 *    overwritten): block b of G sums its consecutive tokens' rows column by
 *    column (thread j < HD: the q heads' column j, HD <= j < 2 HD the k
 *    heads'), tokens then heads in increasing order, into its row of the
 *    partials (G, 2 HD) in the stream's scratch; reduce.cu's column sum adds
 *    the G rows in order into dwq and dwk. Then one warp per row: dx = rstd *
 *    (g - xhat * mean(g * xhat)), g = dout * w, written over dout (each lane
 *    reads only the elements it writes). Deterministic, no atomics.
 * Bytes per q or k element (s = sizeof(act)): forward 3s (read, keep, write),
 * backward 5s (dw: read dout and xin; dx: read both again, write), the
 * weights and rstd from cache. */
#include "common.cuh"

#define QK_WARPS 8          /* rows (warps) per block */
#define QK_DW_THREADS 256   /* the weight-gradient kernel's threads per block */
#define QK_DW_MAX_BLOCKS 256

/* ======================= kernels ======================= */

// Head row r of the (N, NH + NKV) q and k heads: its offset in qkv (N, NH + 2 NKV, HD); *h its
// head (q heads first).
__device__ __forceinline__ size_t qk_row_at(size_t r, int NH, int NKV, int HD, int *h) {
    const size_t n = r / (size_t)(NH + NKV);
    *h = (int)(r - n * (NH + NKV));
    return n * (size_t)(NH + 2 * NKV) * HD + (size_t)*h * HD;
}

// qkv (N, NH + 2 NKV, HD): head row r of (N, NH + NKV) normalized in place with wq (q heads)
// or wk (k heads); xin (N, NH + NKV, HD) <- the row as it came in; rstd (N, NH + NKV).
template <typename T>
__global__ void __launch_bounds__(QK_WARPS * 32)
    qk_norm_fwd_kernel(T *qkv, T *xin, float *rstd, const T *wq, const T *wk, float eps, int N,
                       int NH, int NKV, int HD) {
    const int lane = threadIdx.x & 31;
    const size_t r = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= (size_t)N * (NH + NKV)) return;
    int h;
    T *x = qkv + qk_row_at(r, NH, NKV, HD, &h), *keep = xin + r * HD;
    const T *w = h < NH ? wq : wk;
    float ss = 0.f;
    for (int c = lane; c < HD; c += 32) {
        const T v = x[c];
        keep[c] = v;
        ss += to_f(v) * to_f(v);
    }
    const float rs = 1.f / sqrtf(warp_sum(ss) / (float)HD + eps);
    for (int c = lane; c < HD; c += 32) x[c] = from_f<T>(to_f(x[c]) * rs * to_f(w[c]));
    if (lane == 0) rstd[r] = rs;
}

// part (gridDim.x, 2 HD): block b's sums over tokens [b * per, (b + 1) * per) of
// dout * xin * rstd, column j < HD over the q heads, HD + j over the k heads.
template <typename T>
__global__ void __launch_bounds__(QK_DW_THREADS)
    qk_norm_dw_kernel(float *part, const T *dqkv, const T *xin, const float *rstd, int N, int NH,
                      int NKV, int HD, int per) {
    const int NQK = NH + NKV;
    const size_t row = (size_t)(NH + 2 * NKV) * HD, n0 = (size_t)blockIdx.x * per;
    const size_t n1 = n0 + per < (size_t)N ? n0 + per : (size_t)N;
    for (int j = threadIdx.x; j < 2 * HD; j += blockDim.x) {
        const int k = j >= HD, c = j - k * HD, h0 = k ? NH : 0, h1 = k ? NQK : NH;
        float acc = 0.f;
        for (size_t n = n0; n < n1; n++)
            for (int h = h0; h < h1; h++) {
                const size_t r = n * NQK + h;
                acc += to_f(dqkv[n * row + (size_t)h * HD + c]) * to_f(xin[r * HD + c]) * rstd[r];
            }
        part[(size_t)blockIdx.x * 2 * HD + j] = acc;
    }
}

// dqkv's q and k head rows (as the forward's) in place: dout -> d(input of the norm).
template <typename T>
__global__ void __launch_bounds__(QK_WARPS * 32)
    qk_norm_bwd_kernel(T *dqkv, const T *xin, const T *wq, const T *wk, const float *rstd, int N,
                       int NH, int NKV, int HD) {
    const int lane = threadIdx.x & 31;
    const size_t r = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= (size_t)N * (NH + NKV)) return;
    int h;
    T *d = dqkv + qk_row_at(r, NH, NKV, HD, &h);
    const T *x = xin + r * HD, *w = h < NH ? wq : wk;
    const float rs = rstd[r];
    float s = 0.f;
    for (int c = lane; c < HD; c += 32) s += to_f(d[c]) * to_f(w[c]) * to_f(x[c]) * rs;
    const float m = warp_sum(s) / (float)HD;
    for (int c = lane; c < HD; c += 32)
        d[c] = from_f<T>(rs * (to_f(d[c]) * to_f(w[c]) - to_f(x[c]) * rs * m));
}

/* ======================= launchers ======================= */

template <typename T>
static void launch_qk_norm_fwd(T *qkv, T *xin, float *rstd, const T *wq, const T *wk, float eps,
                               int N, int NH, int NKV, int HD, cudaStream_t st) {
    const size_t rows = (size_t)N * (NH + NKV);
    const unsigned grid = (unsigned)((rows + QK_WARPS - 1) / QK_WARPS);
    qk_norm_fwd_kernel<T><<<grid, QK_WARPS * 32, 0, st>>>(qkv, xin, rstd, wq, wk, eps, N, NH, NKV,
                                                          HD);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_qk_norm_bwd(T *dqkv, float *dwq, float *dwk, float *part, int G,
                               const T *xin, const T *wq, const T *wk, const float *rstd, int N,
                               int NH, int NKV, int HD, cudaStream_t st) {
    if (dwq || dwk) {
        const int per = (N + G - 1) / G;
        qk_norm_dw_kernel<T><<<G, QK_DW_THREADS, 0, st>>>(part, dqkv, xin, rstd, N, NH, NKV, HD,
                                                          per);
        CU_CHECK_LAUNCH();
        if (dwq) launch_colsum_f32_add(dwq, part, (size_t)2 * HD, G, HD, st);
        if (dwk) launch_colsum_f32_add(dwk, part + HD, (size_t)2 * HD, G, HD, st);
    }
    const size_t rows = (size_t)N * (NH + NKV);
    const unsigned grid = (unsigned)((rows + QK_WARPS - 1) / QK_WARPS);
    qk_norm_bwd_kernel<T><<<grid, QK_WARPS * 32, 0, st>>>(dqkv, xin, wq, wk, rstd, N, NH, NKV, HD);
    CU_CHECK_LAUNCH();
}

/* ======================= op entries ======================= */

void cu_qk_norm_fwd(LtBackend *be, void *qkv, void *xin, float *rstd, const void *wq,
                    const void *wk, float eps, int N, int NH, int NKV, int HD) {
    if (N <= 0 || NH + NKV <= 0 || HD <= 0) return;
    if (cu_is_bf16(be))
        launch_qk_norm_fwd<bf16>((bf16 *)qkv, (bf16 *)xin, rstd, (const bf16 *)wq,
                                 (const bf16 *)wk, eps, N, NH, NKV, HD, cu_stream(be));
    else
        launch_qk_norm_fwd<float>((float *)qkv, (float *)xin, rstd, (const float *)wq,
                                  (const float *)wk, eps, N, NH, NKV, HD, cu_stream(be));
}

void cu_qk_norm_bwd(LtBackend *be, void *dqkv, float *dwq, float *dwk, const void *xin,
                    const void *wq, const void *wk, const float *rstd, int N, int NH, int NKV,
                    int HD) {
    if (N <= 0 || NH + NKV <= 0 || HD <= 0) return;
    const int G = N < QK_DW_MAX_BLOCKS ? N : QK_DW_MAX_BLOCKS;
    float *part =
        dwq || dwk ? (float *)cu_scratch(be, (size_t)G * 2 * HD * sizeof(float)) : NULL;
    if (cu_is_bf16(be))
        launch_qk_norm_bwd<bf16>((bf16 *)dqkv, dwq, dwk, part, G, (const bf16 *)xin,
                                 (const bf16 *)wq, (const bf16 *)wk, rstd, N, NH, NKV, HD,
                                 cu_stream(be));
    else
        launch_qk_norm_bwd<float>((float *)dqkv, dwq, dwk, part, G, (const float *)xin,
                                  (const float *)wq, (const float *)wk, rstd, N, NH, NKV, HD,
                                  cu_stream(be));
}
