/* layernorm.cu - residual add fused with LayerNorm, and its backward.
 *
 * Design note. Forward: one warp per row; pass 1 forms the residual sum
 * (rounded to the act type, stored, and that rounded x is what is
 * normalized, as on the CPU backend) and its mean, pass 2 the centered
 * variance (two-pass, no E[x^2]-mean^2 cancellation), pass 3 writes out.
 * Passes 2-3 re-read the row, which the warp just touched (L1/L2 hits).
 * Backward: a block walks rows g, g+G, ... (G = min(N, 512), a function of N
 * only). Thread j owns columns j, j+blockDim, ... and accumulates dw/db for
 * them in shared memory, so no two threads ever add into the same slot; the
 * two row means (of dxhat and dxhat*xhat) use a fixed-order block reduction.
 * Each block writes its dw/db partial to scratch (G, 2, C); a second kernel
 * adds the G partials in index order into dw/db. Deterministic, no atomics.
 * dinp accumulates (+=) as backend.h requires.
 * add_act: the residual add alone, elementwise, with the forward's exact
 * expression (from_f(to_f(a) + to_f(b))), so its result equals resid_out bit for
 * bit. 16-byte vectors when all three pointers are 16-byte aligned (a scalar
 * kernel otherwise); each element is read and written by one thread, so out may
 * alias a or b. */
#include "common.cuh"

#define LN_EPS 1e-5f
#define LN_FWD_ROWS 8 /* warps (rows) per forward block */
#define LN_BWD_THREADS 256
#define LN_BWD_MAX_BLOCKS 512
#define ADD_THREADS 256

/* ======================= kernels ======================= */

// a, b (N, C) -> resid_out = a + b (N, C); out (N, C); mean, rstd (N). b may be NULL.
template <typename T>
__global__ void __launch_bounds__(LN_FWD_ROWS * 32)
    layernorm_fwd_kernel(T *resid_out, T *out, float *mean, float *rstd, const T *a, const T *b,
                         const T *w, const T *bias, int N, int C) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * LN_FWD_ROWS + (threadIdx.x >> 5);
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    const T *x;
    float s = 0.f;
    if (b) {
        T *ro = resid_out + off;
        for (int c = lane; c < C; c += 32) {
            T v = from_f<T>(to_f(a[off + c]) + to_f(b[off + c]));
            ro[c] = v;
            s += to_f(v);
        }
        x = ro;
    } else {
        for (int c = lane; c < C; c += 32) s += to_f(a[off + c]);
        x = a + off;
    }
    const float m = warp_sum(s) / (float)C;
    float s2 = 0.f;
    for (int c = lane; c < C; c += 32) {
        float d = to_f(x[c]) - m;
        s2 += d * d;
    }
    const float r = 1.f / sqrtf(warp_sum(s2) / (float)C + LN_EPS);
    T *o = out + off;
    for (int c = lane; c < C; c += 32)
        o[c] = from_f<T>((to_f(x[c]) - m) * r * to_f(w[c]) + to_f(bias[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// dinp (N, C) += dLN/dx; part (G, 2, C) <- per-block partial dw, db.
template <typename T>
__global__ void __launch_bounds__(LN_BWD_THREADS)
    layernorm_bwd_kernel(T *dinp, float *part, const T *dout, const T *inp, const T *w,
                         const float *mean, const float *rstd, int N, int C) {
    extern __shared__ float ln_sh[]; /* dw_s (C) | db_s (C) */
    __shared__ float red[32];
    float *dw_s = ln_sh, *db_s = ln_sh + C;
    const int tid = threadIdx.x;
    for (int c = tid; c < C; c += LN_BWD_THREADS) dw_s[c] = db_s[c] = 0.f;
    const float invC = 1.f / (float)C;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const size_t off = (size_t)row * C;
        const float m = mean[row], r = rstd[row];
        float s1 = 0.f, s2 = 0.f;
        for (int c = tid; c < C; c += LN_BWD_THREADS) {
            const float xh = (to_f(inp[off + c]) - m) * r;
            const float dy = to_f(dout[off + c]);
            const float dxh = dy * to_f(w[c]);
            s1 += dxh;
            s2 += dxh * xh;
            dw_s[c] += dy * xh;
            db_s[c] += dy;
        }
        const float m1 = block_sum(s1, red) * invC;
        const float m2 = block_sum(s2, red) * invC;
        for (int c = tid; c < C; c += LN_BWD_THREADS) {
            const float xh = (to_f(inp[off + c]) - m) * r;
            const float dxh = to_f(dout[off + c]) * to_f(w[c]);
            const float d = r * (dxh - m1 - xh * m2);
            dinp[off + c] = from_f<T>(to_f(dinp[off + c]) + d);
        }
    }
    float *pw = part + (size_t)blockIdx.x * 2 * C;
    for (int c = tid; c < C; c += LN_BWD_THREADS) {
        pw[c] = dw_s[c];
        pw[C + c] = db_s[c];
    }
}

// dw, db (C) += sum over g of part (G, 2, C), g ascending.
__global__ void layernorm_bwd_final_kernel(float *dw, float *db, const float *part, int G, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.f, sb = 0.f;
    for (int g = 0; g < G; g++) {
        sw += part[(size_t)g * 2 * C + c];
        sb += part[(size_t)g * 2 * C + C + c];
    }
    if (dw) dw[c] += sw;
    if (db) db[c] += sb;
}

// out (n) = a (n) + b (n), 16-byte vectors of 16 / sizeof(T) elements; the last
// n % VEC elements by the first threads of the grid. out may equal a or b.
template <typename T> struct alignas(16) AddPack {
    T v[16 / sizeof(T)];
};
template <typename T>
__global__ void __launch_bounds__(ADD_THREADS)
    add_act_vec_kernel(T *out, const T *a, const T *b, size_t n) {
    constexpr int VEC = 16 / sizeof(T);
    const size_t nv = n / VEC, stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    AddPack<T> *o = reinterpret_cast<AddPack<T> *>(out);
    const AddPack<T> *pa = reinterpret_cast<const AddPack<T> *>(a);
    const AddPack<T> *pb = reinterpret_cast<const AddPack<T> *>(b);
    for (size_t i = tid; i < nv; i += stride) {
        const AddPack<T> x = pa[i], y = pb[i];
        AddPack<T> r;
#pragma unroll
        for (int k = 0; k < VEC; k++) r.v[k] = from_f<T>(to_f(x.v[k]) + to_f(y.v[k]));
        o[i] = r;
    }
    const size_t i = nv * VEC + tid;
    if (i < n) out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

// The same for pointers that are not all 16-byte aligned.
template <typename T>
__global__ void __launch_bounds__(ADD_THREADS)
    add_act_kernel(T *out, const T *a, const T *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

/* ======================= launchers ======================= */

template <typename T>
static void launch_layernorm_fwd(T *resid_out, T *out, float *mean, float *rstd, const T *a,
                                 const T *b, const T *w, const T *bias, int N, int C,
                                 cudaStream_t st) {
    const unsigned grid = (unsigned)((N + LN_FWD_ROWS - 1) / LN_FWD_ROWS);
    layernorm_fwd_kernel<T><<<grid, LN_FWD_ROWS * 32, 0, st>>>(resid_out, out, mean, rstd, a, b,
                                                               w, bias, N, C);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_layernorm_bwd(T *dinp, float *dw, float *db, float *part, int G,
                                 const T *dout, const T *inp, const T *w, const float *mean,
                                 const float *rstd, int N, int C, int smem_optin,
                                 cudaStream_t st) {
    const size_t smem = (size_t)2 * C * sizeof(float);
    if (smem + 32 * sizeof(float) > (size_t)smem_optin) /* + the static reduction buffer */
        lt_fatal("layernorm_bwd: C=%d needs %zu bytes of shared memory (device max %d)", C, smem,
                 smem_optin);
    if (smem > 48 * 1024)
        CU_CHECK(cudaFuncSetAttribute(layernorm_bwd_kernel<T>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    layernorm_bwd_kernel<T><<<G, LN_BWD_THREADS, smem, st>>>(dinp, part, dout, inp, w, mean,
                                                             rstd, N, C);
    CU_CHECK_LAUNCH();
    layernorm_bwd_final_kernel<<<cu_blocks(C, 256), 256, 0, st>>>(dw, db, part, G, C);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_add_act(T *out, const T *a, const T *b, size_t n, cudaStream_t st) {
    constexpr int VEC = 16 / sizeof(T);
    const int aligned = (((uintptr_t)out | (uintptr_t)a | (uintptr_t)b) & 15) == 0;
    unsigned g = cu_blocks(aligned ? n / VEC : n, ADD_THREADS);
    if (g > 65535u * 8u) g = 65535u * 8u; /* grid-stride beyond */
    if (aligned)
        add_act_vec_kernel<T><<<g, ADD_THREADS, 0, st>>>(out, a, b, n);
    else
        add_act_kernel<T><<<g, ADD_THREADS, 0, st>>>(out, a, b, n);
    CU_CHECK_LAUNCH();
}

/* ======================= op entries ======================= */

void cu_layernorm_fwd(LtBackend *be, void *resid_out, void *out, float *mean, float *rstd,
                      const void *a, const void *b, const void *w, const void *bias, int N,
                      int C) {
    if (N <= 0 || C <= 0) return;
    if (cu_is_bf16(be))
        launch_layernorm_fwd<bf16>((bf16 *)resid_out, (bf16 *)out, mean, rstd, (const bf16 *)a,
                                   (const bf16 *)b, (const bf16 *)w, (const bf16 *)bias, N, C,
                                   cu_stream(be));
    else
        launch_layernorm_fwd<float>((float *)resid_out, (float *)out, mean, rstd,
                                    (const float *)a, (const float *)b, (const float *)w,
                                    (const float *)bias, N, C, cu_stream(be));
}

void cu_layernorm_bwd(LtBackend *be, void *dinp, float *dw, float *db, const void *dout,
                      const void *inp, const void *w, const float *mean, const float *rstd, int N,
                      int C) {
    if (N <= 0 || C <= 0) return;
    if (!dinp) lt_fatal("layernorm_bwd: the CUDA backend needs dinp (the input gradient)");
    const int G = N < LN_BWD_MAX_BLOCKS ? N : LN_BWD_MAX_BLOCKS;
    float *part = (float *)cu_scratch(be, (size_t)G * 2 * C * sizeof(float));
    const int optin = cu_impl(be)->smem_optin;
    if (cu_is_bf16(be))
        launch_layernorm_bwd<bf16>((bf16 *)dinp, dw, db, part, G, (const bf16 *)dout,
                                   (const bf16 *)inp, (const bf16 *)w, mean, rstd, N, C, optin,
                                   cu_stream(be));
    else
        launch_layernorm_bwd<float>((float *)dinp, dw, db, part, G, (const float *)dout,
                                    (const float *)inp, (const float *)w, mean, rstd, N, C, optin,
                                    cu_stream(be));
}

void cu_add_act(LtBackend *be, void *out, const void *a, const void *b, size_t n) {
    if (n == 0) return;
    if (cu_is_bf16(be))
        launch_add_act<bf16>((bf16 *)out, (const bf16 *)a, (const bf16 *)b, n, cu_stream(be));
    else
        launch_add_act<float>((float *)out, (const float *)a, (const float *)b, n, cu_stream(be));
}
