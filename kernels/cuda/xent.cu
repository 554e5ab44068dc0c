/* xent.cu - fused softmax + cross-entropy forward and in-place backward.
 *
 * Design note. One block per row of logits (N, Vp). Pass 1 keeps a per-thread
 * online (max, sum of exp) over the real columns [0, V) in fp32, then the
 * block combines them with fixed-order reductions into lse = max + log(sum).
 * The target logit is read before any thread writes (the reductions contain
 * barriers). If dscale != 0, pass 2 overwrites the row in place with
 * dscale * (softmax - onehot) and zeros the padded columns [V, Vp). Targets
 * must lie in [0, V); an out-of-range target yields a NaN loss (and no -1 in
 * the gradient) rather than an out-of-bounds read.
 * Rows move in 16-byte packs (bf16 x 8, fp32 x 4) when Vp is a multiple of the
 * pack and logits are 16-byte aligned, else one element per access (the same
 * kernels with VEC = 1). A row's block has one thread per access up to 1024
 * (fewer for short rows, e.g. a vocab shard); thread t owns accesses t,
 * t + blockDim, ...; the pack that straddles a limit (V, Vvalid) is read
 * element by element up to it (ld_f_upto), so nothing past a limit is read.
 *
 * Vocab-parallel pair (xent_tp_stats, xent_tp_finish): same layout, one block
 * per row of a shard; the per-row statistics travel between ranks as fp32
 * (all-reduced by the caller). Out-of-shard targets are legal (another rank
 * owns them) and only ever compared, never dereferenced.
 *
 * Bytes per logit (s = sizeof(act)): xent_fwd_bwd with the gradient 3s (read
 * twice, write once; the second read follows the first within the block, so a
 * row of up to ~100 KB is expected from L2, leaving 2s from DRAM - the floor),
 * loss only s; xent_tp_stats s per pass (two passes); xent_tp_finish 2s (read,
 * write). Before: the same bytes as 2- or 4-byte scalar accesses, always by
 * 1024 threads per row. */
#include "common.cuh"

#define XENT_THREADS 1024 /* most threads per row (block) */

/* ======================= kernels ======================= */

// Online (max m, sum s of exp(x - m)) with one more value v.
__device__ __forceinline__ void online_add(float &m, float &s, float v) {
    if (v > m) {
        s = s * expf(m - v) + 1.f;
        m = v;
    } else {
        s += expf(v - m);
    }
}

// losses (N); logits (N, Vp) rewritten in place when dscale != 0; targets (N).
template <typename T, int VEC>
__global__ void __launch_bounds__(XENT_THREADS)
    xent_kernel(float *losses, T *logits, const int32_t *targets, int V, int Vp, float dscale) {
    __shared__ float red[32];
    __shared__ float xt_sh;
    const int tid = threadIdx.x;
    T *x = logits + (size_t)blockIdx.x * Vp;
    const int tgt = targets[blockIdx.x];
    if (tid == 0) xt_sh = (tgt >= 0 && tgt < V) ? to_f(x[tgt]) : __int_as_float(0x7fc00000);
    float m = -INFINITY, s = 0.f;
    for (int j = tid * VEC; j < V; j += blockDim.x * VEC) {
        float v[VEC];
        ld_f_upto<VEC>(x + j, V - j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (j + k < V) online_add(m, s, v[k]);
    }
    const float M = block_max(m, red);
    s = (m == -INFINITY) ? 0.f : s * expf(m - M);
    const float S = block_sum(s, red); /* its barriers also publish xt_sh */
    const float lse = M + logf(S);
    if (tid == 0) losses[blockIdx.x] = lse - xt_sh;
    if (dscale == 0.f) return;
    for (int j = tid * VEC; j < Vp; j += blockDim.x * VEC) {
        float g[VEC];
        ld_f_upto<VEC>(x + j, V - j, g);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            g[k] = j + k < V ? dscale * (expf(g[k] - lse) - (j + k == tgt ? 1.f : 0.f)) : 0.f;
        st_f<VEC>(x + j, g);
    }
}

// Vocab-parallel statistics of one shard row per block (contract in backend.h).
// global_max == NULL: row_max = max over [0, Vvalid). Else: row_sumexp = sum of
// exp(x - global_max) over [0, Vvalid), row_target = x[target] if owned, else 0.
// Fixed-order block reductions: deterministic.
template <typename T, int VEC>
__global__ void __launch_bounds__(XENT_THREADS)
    xent_tp_stats_kernel(float *row_max, float *row_sumexp, float *row_target, const T *logits,
                         const int32_t *targets, const float *global_max, int Vvalid, int Vp) {
    __shared__ float red[32];
    const int tid = threadIdx.x;
    const T *x = logits + (size_t)blockIdx.x * Vp;
    const float gm = global_max ? global_max[blockIdx.x] : 0.f;
    float acc = global_max ? 0.f : -INFINITY;
    for (int j = tid * VEC; j < Vvalid; j += blockDim.x * VEC) {
        float v[VEC];
        ld_f_upto<VEC>(x + j, Vvalid - j, v);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            if (j + k < Vvalid) acc = global_max ? acc + expf(v[k] - gm) : fmaxf(acc, v[k]);
    }
    if (!global_max) {
        const float M = block_max(acc, red);
        if (tid == 0) row_max[blockIdx.x] = M;
        return;
    }
    const float S = block_sum(acc, red);
    if (tid == 0) {
        const int tgt = targets[blockIdx.x];
        row_sumexp[blockIdx.x] = S;
        row_target[blockIdx.x] = (tgt >= 0 && tgt < Vvalid) ? to_f(x[tgt]) : 0.f;
    }
}

// losses (N) = log(gsum) + gmax - gtgt, one thread per row (the dscale == 0 path).
__global__ void xent_tp_loss_kernel(float *losses, const float *gmax, const float *gsum,
                                    const float *gtgt, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) losses[i] = logf(gsum[i]) + gmax[i] - gtgt[i];
}

// One block per shard row: loss as above, and the row rewritten in place with
// dscale * (exp(x - gmax) / gsum - [j == target]) on [0, Vvalid), 0 on [Vvalid, Vp).
// Each element is read and written by the same thread: no barrier needed.
template <typename T, int VEC>
__global__ void __launch_bounds__(XENT_THREADS)
    xent_tp_finish_kernel(float *losses, T *logits, const int32_t *targets, const float *gmax,
                          const float *gsum, const float *gtgt, int Vvalid, int Vp,
                          float dscale) {
    const int tid = threadIdx.x;
    const size_t row = blockIdx.x;
    T *x = logits + row * Vp;
    const float M = gmax[row], S = gsum[row];
    if (tid == 0) losses[row] = logf(S) + M - gtgt[row];
    const float inv = 1.f / S;
    const int tgt = targets[row];
    for (int j = tid * VEC; j < Vp; j += blockDim.x * VEC) {
        float g[VEC];
        ld_f_upto<VEC>(x + j, Vvalid - j, g);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const float p = expf(g[k] - M) * inv;
            g[k] = j + k < Vvalid ? dscale * (j + k == tgt ? p - 1.f : p) : 0.f;
        }
        st_f<VEC>(x + j, g);
    }
}

/* ======================= launchers ======================= */

/* 16-byte packs along rows of Vp elements starting at logits? */
template <typename T> static int xent_vec(const void *logits, int Vp) {
    return cu_aligned16(logits) && Vp % LT_VEC(T) == 0;
}

/* Threads per row: one per access (pack or element) up to XENT_THREADS, so a
 * short row (a vocab shard) does not leave most of a 1024-thread block idle. */
static unsigned xent_threads(int Vp, int vec) {
    const unsigned accesses = (unsigned)((Vp + vec - 1) / vec), t = (accesses + 31) / 32 * 32;
    return t > XENT_THREADS ? XENT_THREADS : t;
}

template <typename T>
static void launch_xent(float *losses, T *logits, const int32_t *targets, int N, int V, int Vp,
                        float dscale, cudaStream_t st) {
    constexpr int PK = LT_VEC(T);
    if (xent_vec<T>(logits, Vp))
        xent_kernel<T, PK><<<N, xent_threads(Vp, PK), 0, st>>>(losses, logits, targets, V, Vp,
                                                               dscale);
    else
        xent_kernel<T, 1><<<N, xent_threads(Vp, 1), 0, st>>>(losses, logits, targets, V, Vp,
                                                             dscale);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_xent_tp_stats(float *row_max, float *row_sumexp, float *row_target,
                                 const T *logits, const int32_t *targets, const float *global_max,
                                 int N, int Vvalid, int Vp, cudaStream_t st) {
    constexpr int PK = LT_VEC(T);
    if (xent_vec<T>(logits, Vp))
        xent_tp_stats_kernel<T, PK><<<N, xent_threads(Vp, PK), 0, st>>>(
            row_max, row_sumexp, row_target, logits, targets, global_max, Vvalid, Vp);
    else
        xent_tp_stats_kernel<T, 1><<<N, xent_threads(Vp, 1), 0, st>>>(
            row_max, row_sumexp, row_target, logits, targets, global_max, Vvalid, Vp);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_xent_tp_finish(float *losses, T *logits, const int32_t *targets,
                                  const float *gmax, const float *gsum, const float *gtgt, int N,
                                  int Vvalid, int Vp, float dscale, cudaStream_t st) {
    constexpr int PK = LT_VEC(T);
    if (xent_vec<T>(logits, Vp))
        xent_tp_finish_kernel<T, PK><<<N, xent_threads(Vp, PK), 0, st>>>(
            losses, logits, targets, gmax, gsum, gtgt, Vvalid, Vp, dscale);
    else
        xent_tp_finish_kernel<T, 1><<<N, xent_threads(Vp, 1), 0, st>>>(
            losses, logits, targets, gmax, gsum, gtgt, Vvalid, Vp, dscale);
    CU_CHECK_LAUNCH();
}

/* ======================= op entries ======================= */

void cu_xent_fwd_bwd(LtBackend *be, float *losses, void *logits, const int32_t *targets, int N,
                     int V, int Vp, float dscale) {
    if (N <= 0) return;
    if (V <= 0 || V > Vp) lt_fatal("xent: bad vocab sizes V=%d Vp=%d", V, Vp);
    if (cu_is_bf16(be))
        launch_xent<bf16>(losses, (bf16 *)logits, targets, N, V, Vp, dscale, cu_stream(be));
    else
        launch_xent<float>(losses, (float *)logits, targets, N, V, Vp, dscale, cu_stream(be));
}

static void xent_tp_check(const char *op, int Vvalid, int Vp) {
    if (Vp <= 0 || Vvalid < 0 || Vvalid > Vp)
        lt_fatal("%s: bad shard sizes Vvalid=%d Vp=%d (need 0 <= Vvalid <= Vp, Vp > 0)", op,
                 Vvalid, Vp);
}

void cu_xent_tp_stats(LtBackend *be, float *row_max, float *row_sumexp, float *row_target,
                      const void *logits, const int32_t *targets, const float *global_max, int N,
                      int Vvalid, int Vp) {
    xent_tp_check("xent_tp_stats", Vvalid, Vp);
    if (N <= 0) return;
    if (cu_is_bf16(be))
        launch_xent_tp_stats<bf16>(row_max, row_sumexp, row_target, (const bf16 *)logits,
                                   targets, global_max, N, Vvalid, Vp, cu_stream(be));
    else
        launch_xent_tp_stats<float>(row_max, row_sumexp, row_target, (const float *)logits,
                                    targets, global_max, N, Vvalid, Vp, cu_stream(be));
}

void cu_xent_tp_finish(LtBackend *be, float *losses, void *logits, const int32_t *targets,
                       const float *global_max, const float *global_sumexp,
                       const float *global_target, int N, int Vvalid, int Vp, float dscale) {
    xent_tp_check("xent_tp_finish", Vvalid, Vp);
    if (N <= 0) return;
    cudaStream_t st = cu_stream(be);
    if (dscale == 0.f) {
        xent_tp_loss_kernel<<<cu_blocks((size_t)N, 256), 256, 0, st>>>(
            losses, global_max, global_sumexp, global_target, N);
        CU_CHECK_LAUNCH();
    } else if (cu_is_bf16(be)) {
        launch_xent_tp_finish<bf16>(losses, (bf16 *)logits, targets, global_max, global_sumexp,
                                    global_target, N, Vvalid, Vp, dscale, st);
    } else {
        launch_xent_tp_finish<float>(losses, (float *)logits, targets, global_max, global_sumexp,
                                     global_target, N, Vvalid, Vp, dscale, st);
    }
}
