/* xent.cu - fused softmax + cross-entropy forward and in-place backward.
 *
 * Design note. One block per row of logits (N, Vp). Pass 1 keeps a per-thread
 * online (max, sum of exp) over the real columns [0, V) in fp32, then the
 * block combines them with fixed-order reductions into lse = max + log(sum).
 * The target logit is read before any thread writes (the reductions contain
 * barriers). If dscale != 0, pass 2 overwrites the row in place with
 * dscale * (softmax - onehot) and zeros the padded columns [V, Vp). Targets
 * must lie in [0, V); an out-of-range target yields a NaN loss (and no -1 in
 * the gradient) rather than an out-of-bounds read. */
#include "common.cuh"

#define XENT_THREADS 1024

/* ======================= kernels ======================= */

// losses (N); logits (N, Vp) rewritten in place when dscale != 0; targets (N).
template <typename T>
__global__ void __launch_bounds__(XENT_THREADS)
    xent_kernel(float *losses, T *logits, const int32_t *targets, int V, int Vp, float dscale) {
    __shared__ float red[32];
    __shared__ float xt_sh;
    const int tid = threadIdx.x;
    T *x = logits + (size_t)blockIdx.x * Vp;
    const int tgt = targets[blockIdx.x];
    if (tid == 0) xt_sh = (tgt >= 0 && tgt < V) ? to_f(x[tgt]) : __int_as_float(0x7fc00000);
    float m = -INFINITY, s = 0.f;
    for (int j = tid; j < V; j += XENT_THREADS) {
        const float v = to_f(x[j]);
        if (v > m) {
            s = s * expf(m - v) + 1.f;
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    const float M = block_max(m, red);
    s = (m == -INFINITY) ? 0.f : s * expf(m - M);
    const float S = block_sum(s, red); /* its barriers also publish xt_sh */
    const float lse = M + logf(S);
    if (tid == 0) losses[blockIdx.x] = lse - xt_sh;
    if (dscale != 0.f) {
        for (int j = tid; j < Vp; j += XENT_THREADS) {
            float g = 0.f;
            if (j < V) g = dscale * (expf(to_f(x[j]) - lse) - (j == tgt ? 1.f : 0.f));
            x[j] = from_f<T>(g);
        }
    }
}

/* ======================= launchers ======================= */

template <typename T>
static void launch_xent(float *losses, T *logits, const int32_t *targets, int N, int V, int Vp,
                        float dscale, cudaStream_t st) {
    xent_kernel<T><<<N, XENT_THREADS, 0, st>>>(losses, logits, targets, V, Vp, dscale);
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
