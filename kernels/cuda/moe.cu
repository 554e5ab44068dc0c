/* moe.cu - mixture-of-experts kernels: top-k routing and its backward, the
 * load-balancing statistics and their gradient, the expert-major dispatch
 * (a counting sort with the capacity decision), the permute / unpermute row
 * gathers and their backwards, the act += fp32 add the router's dx uses, the
 * router bias's add to the logits and its gradient
 * (the router GEMMs themselves are cuBLASLt calls in gemm.cu). Semantics in
 * include/backend.h; kernels/cpu/moe.c is the reference.
 *
 * Design note.
 * Routing (topk, topk_bwd, aux_bwd, the per-token half of aux_stats): one warp
 * per token, lanes striding over the E experts; softmax max and sum are warp
 * reductions (fixed butterfly order). The k-th choice is a warp arg-max over
 * the experts that rank after choice k-1 in the total order "larger score
 * first, NaN last, ties to the lower index" (moe_before), so K rounds need no
 * per-token workspace and pick exactly the CPU's experts for equal scores.
 * Group-limited routing first scores the groups, lane g serially over group g's
 * experts (G <= 64: two groups per lane), then picks the GK groups by warp arg-max
 * rounds; the expert rounds skip the other groups' experts. A group's score is a
 * sum of scores the two backends compute alike but not always to the bit (the
 * softmax's denominator is a warp sum here, expf is the device's), so two groups
 * within an ulp of each other may be chosen differently, as two such experts may.
 * Serial sums over the K choices (the sigmoid normaliser, the softmax over the
 * K selected logits, the backward's dot products) run in one lane, or in every
 * lane redundantly, in k order as the CPU does. Bytes per token: E * 4 read
 * per selection round (L1-resident after the first), K * 8 written.
 * aux_stats: the warp pass writes each token's aux scores, its 0/1 aux top-k
 * mask and its logsumexp to scratch; the group sums run in two passes: one
 * thread per (segment of MOE_SEG tokens inside one group, expert) sums its
 * segment in token order, then one thread per (group, expert) adds the
 * segment partials in order (zsum: the segments' doubles in order, one
 * thread). No float atomics: the results depend only on the shapes.
 * Dispatch: five launches, all deterministic (integer counts only): a block per
 * expert counts its assignments (ballot block scans), one thread scans the
 * counts into list starts, a block per expert lists its assignments in token
 * order (a stable counting sort) and decides which it keeps - position: the
 * first `capacity`; probs: a 32-step bitwise search for the capacity-th
 * largest key (w as an order-preserving uint32, NaN as -inf, -0 as +0), keeping
 * every larger key and the lowest tokens at the threshold - one thread scans
 * the kept counts into offsets (and the dropped count), and a block per expert
 * writes pos, src and its padding rows. Out-of-range expert ids (the contract
 * excludes them; the CPU stops) are left with pos -1 and counted as dropped.
 * Permute family: vec.cuh map functors, 16-byte packs (bf16 x 8, fp32 x 4)
 * when every row pointer is 16-byte aligned and C is a multiple of the pack,
 * one element per access otherwise. permute moves 2s bytes per element of out
 * (s = sizeof(act)) plus its src entry per pack; permute_bwd / unpermute read
 * K rows per output row (K s + 2s (bwd: dx read and written) or K s + s, plus
 * the K pos / w entries per pack) and sum them in k order in fp32, one rounding
 * per stored element; unpermute_bwd zeroes dy (M C s), writes each kept row once
 * from dout (2s per element of a kept row) and computes dw with one warp per
 * assignment (dout and y rows read once, a warp sum). */
#include "common.cuh"
#include "config.h"

#define MOE_EPS 1e-20f     /* the sigmoid normaliser's guard, as the CPU's */
#define MOE_THREADS 256    /* 8 warps: 8 tokens per block in the per-token kernels */
#define MOE_SEG 256        /* tokens per aux_stats segment */
#define MOE_MAX_BLOCKS 65535u

/* ======================= device helpers ======================= */

/* Score (a, ia) ranks before (b, ib): the larger number, a NaN after every number,
 * equal values (and two NaNs) by the lower index; an index < 0 is "none", last. */
__device__ __forceinline__ bool moe_before(float a, int ia, float b, int ib) {
    if (ib < 0) return ia >= 0;
    if (ia < 0) return false;
    const bool na = a != a, nb = b != b;
    if (na || nb) return na == nb ? ia < ib : nb;
    return a != b ? a > b : ia < ib;
}

__device__ __forceinline__ float moe_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

enum { SC_LOGIT, SC_SIG_BIAS, SC_PROB, SC_SIG_NORM };

/* The selecting score of expert e: the logit, sigmoid + bias, the softmax
 * probability exp(l - m) / s, or sigmoid / (S + eps). */
__device__ __forceinline__ float moe_score(int mode, const float *l, const float *bias, int e,
                                           float m, float s) {
    switch (mode) {
    case SC_SIG_BIAS: return moe_sigmoid(l[e]) + (bias ? bias[e] : 0.f);
    case SC_PROB: return expf(l[e] - m) / s;
    case SC_SIG_NORM: return moe_sigmoid(l[e]) / (s + MOE_EPS);
    default: return l[e];
    }
}

/* The warp's best-ranked (bv, bi) over its lanes' candidates; every lane returns it. */
__device__ __forceinline__ int moe_warp_best(float *bv, int bi) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, *bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (moe_before(ov, oi, *bv, bi)) *bv = ov, bi = oi;
    }
    return bi;
}

/* The next choice of one warp: the best-ranked expert after (pv, pi) (pi < 0: the
 * first choice) among the experts of the groups set in gmask (bit e / gsize; gsize
 * 0: every expert); every lane returns it, with its score in *pv. */
__device__ __forceinline__ int moe_warp_next(int mode, const float *l, const float *bias, int E,
                                             float m, float s, float *pv, int pi,
                                             unsigned long long gmask = 0, int gsize = 0) {
    const int lane = threadIdx.x & 31;
    float bv = 0.f;
    int bi = -1;
    for (int e = lane; e < E; e += 32) {
        if (gsize && !((gmask >> (e / gsize)) & 1ull)) continue;
        const float v = moe_score(mode, l, bias, e, m, s);
        if ((pi < 0 || moe_before(*pv, pi, v, e)) && moe_before(v, e, bv, bi)) bv = v, bi = e;
    }
    bi = moe_warp_best(&bv, bi);
    *pv = bv;
    return bi;
}

/* Group-limited routing's groups (backend.h, moe_topk): the mask of the token's GK
 * best of G groups of E / G experts, a group scored by the sum of its K / GK
 * largest selecting scores in descending order. Lane g (and g + 32) scores group g
 * (g + 32) serially, in the CPU's order; then GK warp arg-max rounds over the
 * groups. Every lane returns the mask. */
__device__ __forceinline__ unsigned long long moe_group_mask(int mode, const float *l,
                                                             const float *bias, int E, float m,
                                                             float s, int K, int G, int GK) {
    const int lane = threadIdx.x & 31, gsize = E / G, top = K / GK;
    float gs[2] = {0.f, 0.f};
    for (int h = 0; h < 2; h++) {
        const int g = lane + 32 * h;
        if (g >= G) continue;
        float pv = 0.f, sum = 0.f;
        int pi = -1;
        for (int j = 0; j < top; j++) {
            float bv = 0.f;
            int bi = -1;
            for (int e = g * gsize; e < (g + 1) * gsize; e++) {
                const float v = moe_score(mode, l, bias, e, m, s);
                if ((pi < 0 || moe_before(pv, pi, v, e)) && moe_before(v, e, bv, bi)) bv = v, bi = e;
            }
            pv = bv, pi = bi;
            sum += bv;
        }
        gs[h] = sum;
    }
    unsigned long long mask = 0;
    float pv = 0.f;
    int pi = -1;
    for (int j = 0; j < GK; j++) {
        float bv = 0.f;
        int bi = -1;
        for (int h = 0; h < 2; h++) {
            const int g = lane + 32 * h;
            if (g < G && (pi < 0 || moe_before(pv, pi, gs[h], g)) && moe_before(gs[h], g, bv, bi))
                bv = gs[h], bi = g;
        }
        pi = moe_warp_best(&bv, bi);
        pv = bv;
        mask |= 1ull << pi;
    }
    return mask;
}

/* Warp softmax statistics of l (E): *m = max, *s = sum of exp(l - m). */
__device__ __forceinline__ void moe_warp_softmax(const float *l, int E, float *m, float *s) {
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY, sum = 0.f;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    mx = warp_max(mx);
    for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
    *m = mx;
    *s = warp_sum(sum);
}

/* Warp sum of sigmoid(l) over E. */
__device__ __forceinline__ float moe_warp_sigsum(const float *l, int E) {
    float S = 0.f;
    for (int e = threadIdx.x & 31; e < E; e += 32) S += moe_sigmoid(l[e]);
    return warp_sum(S);
}

/* Exclusive prefix of a 0/1 flag over the block's threads (blockDim.x a multiple of
 * 32), and the block's total in *total. sh holds 32 ints. Call from every thread. */
__device__ __forceinline__ int moe_block_scan(int flag, int *sh, int *total) {
    const unsigned lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const unsigned b = __ballot_sync(0xffffffffu, flag);
    __syncthreads(); /* sh may still be read by the previous call */
    if (lane == 0) sh[wid] = __popc(b);
    __syncthreads();
    int before = 0, tot = 0;
    for (unsigned w = 0; w < nw; w++) {
        before += w < wid ? sh[w] : 0;
        tot += sh[w];
    }
    *total = tot;
    return before + __popc(b & ((1u << lane) - 1u));
}

/* w as a uint32 in the order of the probs policy: NaN as -inf, -0 as +0. */
__device__ __forceinline__ uint32_t moe_wkey(float w) {
    if (w != w) w = -INFINITY;
    if (w == 0.f) w = 0.f;
    const uint32_t u = (uint32_t)__float_as_int(w);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static inline unsigned moe_token_blocks(int N) {
    const unsigned b = cu_blocks((size_t)N, MOE_THREADS / 32);
    return b > MOE_MAX_BLOCKS ? MOE_MAX_BLOCKS : b;
}

/* ======================= routing kernels ======================= */

/* One token's weights wi (K) from its choices ix (K), serially in k order as the
 * CPU: sigmoid normalised over the K (K > 1), the softmax probability (m, s over
 * all E), or the softmax over the K selected logits; then times scale. */
__device__ __forceinline__ void moe_topk_weights(float *wi, const int32_t *ix, const float *l,
                                                 int K, int mode, float m, float s, float scale) {
    if (mode == SC_SIG_BIAS) {
        float S = 0.f;
        for (int k = 0; k < K; k++) S += (wi[k] = moe_sigmoid(l[ix[k]]));
        if (K > 1)
            for (int k = 0; k < K; k++) wi[k] /= S + MOE_EPS;
    } else if (mode == SC_PROB) {
        for (int k = 0; k < K; k++) wi[k] = expf(l[ix[k]] - m) / s;
    } else {
        float mk = l[ix[0]], sk = 0.f;
        for (int k = 1; k < K; k++) mk = l[ix[k]] > mk ? l[ix[k]] : mk;
        for (int k = 0; k < K; k++) sk += (wi[k] = expf(l[ix[k]] - mk));
        for (int k = 0; k < K; k++) wi[k] /= sk;
    }
    for (int k = 0; k < K; k++) wi[k] *= scale;
}

// One warp per token: idx (N, K), w (N, K) as moe_topk (lane 0 writes both).
__global__ void __launch_bounds__(MOE_THREADS)
    moe_topk_kernel(int32_t *idx, float *w, const float *logits, const float *bias, int N, int E,
                    int K, int score, int pre_softmax, float scale, int G, int GK) {
    const int lane = threadIdx.x & 31, nw = MOE_THREADS / 32;
    const int mode = score == LT_MOE_SIGMOID ? SC_SIG_BIAS : pre_softmax ? SC_PROB : SC_LOGIT;
    for (int i = blockIdx.x * nw + (threadIdx.x >> 5); i < N; i += gridDim.x * nw) {
        const float *l = logits + (size_t)i * E;
        int32_t *ix = idx + (size_t)i * K;
        float m = 0.f, s = 1.f, pv = 0.f;
        if (mode == SC_PROB) moe_warp_softmax(l, E, &m, &s);
        const unsigned long long gmask = G ? moe_group_mask(mode, l, bias, E, m, s, K, G, GK) : 0;
        int pi = -1;
        for (int k = 0; k < K; k++) {
            pi = moe_warp_next(mode, l, bias, E, m, s, &pv, pi, gmask, G ? E / G : 0);
            if (lane == 0) ix[k] = pi;
        }
        if (lane == 0) moe_topk_weights(w + (size_t)i * K, ix, l, K, mode, m, s, scale);
        __syncwarp();
    }
}

// One warp per token: dlogits row i as moe_topk_bwd (sums over k serial in every lane).
__global__ void __launch_bounds__(MOE_THREADS)
    moe_topk_bwd_kernel(float *dlogits, const float *dw, const int32_t *idx, const float *logits,
                        int N, int E, int K, int score, int pre_softmax, float scale) {
    const int lane = threadIdx.x & 31, nw = MOE_THREADS / 32;
    for (int i = blockIdx.x * nw + (threadIdx.x >> 5); i < N; i += gridDim.x * nw) {
        const float *l = logits + (size_t)i * E, *g = dw + (size_t)i * K;
        const int32_t *ix = idx + (size_t)i * K;
        float *d = dlogits + (size_t)i * E;
        if (score == LT_MOE_SIGMOID) {
            float S = 0.f, dot = 0.f;
            for (int k = 0; k < K; k++) S += moe_sigmoid(l[ix[k]]);
            const float den = K > 1 ? S + MOE_EPS : 1.f;
            if (K > 1)
                for (int k = 0; k < K; k++) dot += g[k] * moe_sigmoid(l[ix[k]]) / den;
            for (int e = lane; e < E; e += 32) d[e] = 0.f;
            __syncwarp();
            for (int k = lane; k < K; k += 32) {
                const float t = moe_sigmoid(l[ix[k]]);
                d[ix[k]] = scale * (g[k] - dot) / den * t * (1.f - t);
            }
        } else if (pre_softmax) {
            float m, s, dot = 0.f;
            moe_warp_softmax(l, E, &m, &s);
            for (int k = 0; k < K; k++) dot += scale * g[k] * (expf(l[ix[k]] - m) / s);
            for (int e = lane; e < E; e += 32) d[e] = -(expf(l[e] - m) / s) * dot;
            __syncwarp();
            for (int k = lane; k < K; k += 32) d[ix[k]] += expf(l[ix[k]] - m) / s * scale * g[k];
        } else {
            float mk = l[ix[0]], sk = 0.f, dot = 0.f;
            for (int k = 1; k < K; k++) mk = l[ix[k]] > mk ? l[ix[k]] : mk;
            for (int k = 0; k < K; k++) sk += expf(l[ix[k]] - mk);
            for (int k = 0; k < K; k++) dot += g[k] * (expf(l[ix[k]] - mk) / sk);
            for (int e = lane; e < E; e += 32) d[e] = 0.f;
            __syncwarp();
            for (int k = lane; k < K; k += 32)
                d[ix[k]] = scale * (expf(l[ix[k]] - mk) / sk) * (g[k] - dot);
        }
        __syncwarp(); /* the next token's lanes read nothing of this one; keep the warp in step */
    }
}

// One warp per token: a (N, E) aux scores, msk (N, E) 1 on the aux top-k else 0,
// lse (N).
__global__ void __launch_bounds__(MOE_THREADS)
    moe_aux_scores_kernel(float *a, float *msk, float *lse, const float *logits, int N, int E,
                          int K, int score) {
    const int lane = threadIdx.x & 31, nw = MOE_THREADS / 32;
    for (int i = blockIdx.x * nw + (threadIdx.x >> 5); i < N; i += gridDim.x * nw) {
        const float *l = logits + (size_t)i * E;
        float m, s, pv = 0.f;
        moe_warp_softmax(l, E, &m, &s);
        const float S = score == LT_MOE_SIGMOID ? moe_warp_sigsum(l, E) : s;
        const int mode = score == LT_MOE_SIGMOID ? SC_SIG_NORM : SC_PROB;
        for (int e = lane; e < E; e += 32) {
            a[(size_t)i * E + e] = moe_score(mode, l, NULL, e, m, S);
            msk[(size_t)i * E + e] = 0.f;
        }
        if (lane == 0) lse[i] = m + logf(s);
        __syncwarp();
        int pi = -1;
        for (int k = 0; k < K; k++) {
            pi = moe_warp_next(mode, l, NULL, E, m, S, &pv, pi);
            if (lane == 0) msk[(size_t)i * E + pi] = 1.f;
        }
    }
}

/* Local token range [*lo, *hi) of segment `seg` (group seg / spg of the call, its
 * (seg % spg)-th run of MOE_SEG tokens). */
__device__ __forceinline__ void moe_seg_range(int seg, int spg, long row0, long L, int N, int *lo,
                                              int *hi) {
    const long g = row0 / L + seg / spg;
    long a = g * L - row0, b = a + L;
    a = a < 0 ? 0 : a;
    b = b > N ? N : b;
    const long s0 = a + (long)(seg % spg) * MOE_SEG, s1 = s0 + MOE_SEG;
    *lo = (int)(s0 < b ? s0 : b);
    *hi = (int)(s1 < b ? s1 : b);
}

// Segment partials: P / Q (nseg, E) = the segment's token-ordered sums of a / msk;
// Z (nseg) = its sum of lse^2 in double.
__global__ void __launch_bounds__(MOE_THREADS)
    moe_aux_partial_kernel(float *P, float *Q, double *Z, const float *a, const float *msk,
                           const float *lse, int N, int E, int spg, long row0, long L) {
    const int seg = blockIdx.x, e = blockIdx.y * blockDim.x + threadIdx.x;
    int lo, hi;
    moe_seg_range(seg, spg, row0, L, N, &lo, &hi);
    if (e < E) {
        float sp = 0.f, sq = 0.f;
        for (int i = lo; i < hi; i++) {
            sp += a[(size_t)i * E + e];
            sq += msk[(size_t)i * E + e];
        }
        P[(size_t)seg * E + e] = sp;
        Q[(size_t)seg * E + e] = sq;
    }
    if (e == 0) {
        double z = 0.0;
        for (int i = lo; i < hi; i++) z += (double)lse[i] * lse[i];
        Z[seg] = z;
    }
}

// psum / counts (groups, E) += the group's segment partials in order; zsum += Z in order.
__global__ void __launch_bounds__(MOE_THREADS)
    moe_aux_final_kernel(float *counts, float *psum, double *zsum, const float *P, const float *Q,
                         const double *Z, int E, int ng, int spg, long g0) {
    const long t = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (t < (long)ng * E) {
        const int gl = (int)(t / E), e = (int)(t % E);
        float sp = 0.f, sq = 0.f;
        for (int j = 0; j < spg; j++) {
            sp += P[((size_t)gl * spg + j) * E + e];
            sq += Q[((size_t)gl * spg + j) * E + e];
        }
        if (psum) psum[(g0 + gl) * E + e] += sp;
        if (counts) counts[(g0 + gl) * E + e] += sq;
    }
    if (zsum && t == 0) {
        double z = 0.0;
        for (long j = 0; j < (long)ng * spg; j++) z += Z[j];
        zsum[0] += z;
    }
}

// One warp per token: dlogits row i += the aux and z gradients (moe_aux_bwd).
__global__ void __launch_bounds__(MOE_THREADS)
    moe_aux_bwd_kernel(float *dlogits, const float *logits, const float *counts, int N, int E,
                       int score, long row0, long L, float aux_coef, float z_coef) {
    const int lane = threadIdx.x & 31, nw = MOE_THREADS / 32;
    for (int i = blockIdx.x * nw + (threadIdx.x >> 5); i < N; i += gridDim.x * nw) {
        const float *l = logits + (size_t)i * E;
        const float *cnt = counts ? counts + (size_t)((row0 + i) / L) * E : NULL;
        float *d = dlogits + (size_t)i * E;
        float m, s, S = 0.f, dot = 0.f;
        moe_warp_softmax(l, E, &m, &s);
        const bool sig = score == LT_MOE_SIGMOID;
        if (aux_coef != 0.f) {
            if (sig) S = moe_warp_sigsum(l, E);
            for (int e = lane; e < E; e += 32) {
                const float c = aux_coef * cnt[e];
                dot += sig ? moe_sigmoid(l[e]) / (S + MOE_EPS) * c : expf(l[e] - m) / s * c;
            }
            dot = warp_sum(dot);
        }
        const float lse = m + logf(s);
        for (int e = lane; e < E; e += 32) {
            float v = d[e];
            const float p = expf(l[e] - m) / s;
            if (aux_coef != 0.f) {
                const float c = aux_coef * cnt[e];
                if (sig) {
                    const float t = moe_sigmoid(l[e]);
                    v += (c - dot) / (S + MOE_EPS) * t * (1.f - t);
                } else {
                    v += p * (c - dot);
                }
            }
            if (z_coef != 0.f) v += 2.f * z_coef * lse * p;
            d[e] = v;
        }
    }
}

/* ======================= dispatch kernels ======================= */

// Block e: cnt[e] = the number of assignments routed to expert e.
__global__ void __launch_bounds__(MOE_THREADS)
    moe_dispatch_count_kernel(int *cnt, const int32_t *idx, long NK) {
    __shared__ int sh[32];
    const int e = blockIdx.x;
    int total = 0, t;
    for (long b = 0; b < NK; b += blockDim.x) {
        const long a = b + threadIdx.x;
        moe_block_scan(a < NK && idx[a] == e, sh, &t);
        total += t;
    }
    if (threadIdx.x == 0) cnt[e] = total;
}

// One thread: start (E) = exclusive prefix of cnt (offsets_out == NULL), or offsets
// (E + 1) from kept (capacity rows each when pad) and dropped = NK - sum kept.
__global__ void moe_dispatch_scan_kernel(int *start, int32_t *offsets, int32_t *dropped,
                                         const int *c, int E, long NK, int pad_rows) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    long run = 0;
    for (int e = 0; e < E; e++) {
        if (start) start[e] = (int)run;
        if (offsets) offsets[e] = (int32_t)run;
        run += pad_rows > 0 ? pad_rows : c[e];
    }
    if (offsets) {
        long kept = 0;
        for (int e = 0; e < E; e++) kept += c[e];
        offsets[E] = (int32_t)run;
        dropped[0] = (int32_t)(NK - kept);
    }
}

/* Expert e's keep flags over its list (n entries in token order): the first `cap`
 * (position) or the `cap` largest keys, ties to the earlier entries (probs). */
__device__ __forceinline__ void moe_keep_list(unsigned char *keep, const int32_t *list, int n,
                                              const float *w, int cap, int probs, int *sh) {
    if (cap <= 0 || n <= cap || !probs) {
        for (int j = threadIdx.x; j < n; j += blockDim.x) keep[j] = cap <= 0 || j < cap;
        return;
    }
    uint32_t thr = 0; /* the cap-th largest key: bits from the top */
    for (int bit = 31; bit >= 0; bit--) {
        const uint32_t cand = thr | (1u << bit);
        int ge = 0, t;
        for (int b = 0; b < n; b += blockDim.x) {
            const int j = b + threadIdx.x;
            moe_block_scan(j < n && moe_wkey(w[list[j]]) >= cand, sh, &t);
            ge += t;
        }
        if (ge >= cap) thr = cand;
    }
    int gt = 0, t;
    for (int b = 0; b < n; b += blockDim.x) {
        const int j = b + threadIdx.x;
        moe_block_scan(j < n && moe_wkey(w[list[j]]) > thr, sh, &t);
        gt += t;
    }
    int ties = 0;
    for (int b = 0; b < n; b += blockDim.x) {
        const int j = b + threadIdx.x;
        const uint32_t k = j < n ? moe_wkey(w[list[j]]) : 0u;
        const int r = moe_block_scan(j < n && k == thr, sh, &t);
        if (j < n) keep[j] = k > thr || (k == thr && ties + r < cap - gt);
        ties += t;
    }
}

// Block e: list[start[e] ..) = expert e's assignments in token order, keep their
// flags, kept[e] = how many are kept.
__global__ void __launch_bounds__(MOE_THREADS)
    moe_dispatch_list_kernel(int32_t *list, unsigned char *keep, int *kept, const int *start,
                             const int *cnt, const int32_t *idx, const float *w, long NK, int cap,
                             int probs) {
    __shared__ int sh[32];
    const int e = blockIdx.x, s0 = start[e], n = cnt[e];
    int run = 0, t;
    for (long b = 0; b < NK; b += blockDim.x) {
        const long a = b + threadIdx.x;
        const int m = a < NK && idx[a] == e;
        const int r = moe_block_scan(m, sh, &t);
        if (m) list[s0 + run + r] = (int32_t)a;
        run += t;
    }
    __syncthreads(); /* the list is read by other threads below */
    moe_keep_list(keep + s0, list + s0, n, w, cap, probs, sh);
    __syncthreads();
    int nk = 0;
    for (int b = 0; b < n; b += blockDim.x) {
        const int j = b + threadIdx.x;
        moe_block_scan(j < n && keep[s0 + j], sh, &t);
        nk += t;
    }
    if (threadIdx.x == 0) kept[e] = nk;
}

// Block e: pos of its assignments, src of its rows (padding -1). Block 0 also marks
// assignments to experts outside [0, E) dropped.
__global__ void __launch_bounds__(MOE_THREADS)
    moe_dispatch_place_kernel(int32_t *pos, int32_t *src, const int32_t *offsets,
                              const int32_t *list, const unsigned char *keep, const int *start,
                              const int *cnt, const int32_t *idx, long NK, int E, int K) {
    __shared__ int sh[32];
    const int e = blockIdx.x, s0 = start[e], n = cnt[e], o = offsets[e];
    int run = 0, t;
    for (int b = 0; b < n; b += blockDim.x) {
        const int j = b + threadIdx.x, kp = j < n && keep[s0 + j];
        const int r = moe_block_scan(kp, sh, &t);
        if (j < n) {
            const int32_t a = list[s0 + j];
            pos[a] = kp ? o + run + r : -1;
            if (kp) src[o + run + r] = a / K;
        }
        run += t;
    }
    for (int r = o + run + threadIdx.x; r < offsets[e + 1]; r += blockDim.x) src[r] = -1;
    if (e == 0)
        for (long a = threadIdx.x; a < NK; a += blockDim.x)
            if (idx[a] < 0 || idx[a] >= E) pos[a] = -1;
}

/* ======================= permute functors (map_kernel) ======================= */

// out (M, C) row r = x row src[r], zero for src[r] < 0.
template <typename T> struct PermuteMap {
    T *out;
    const T *x;
    const int32_t *src;
    size_t C;
    int idx32;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        const size_t r = idx_div(i, C, idx32), c = i - r * C;
        const int32_t s = src[r];
        if (s >= 0) {
            st_pack<K>(out + i, ld_pack<K>(x + (size_t)s * C + c));
        } else {
            float z[K];
#pragma unroll
            for (int k = 0; k < K; k++) z[k] = 0.f;
            st_f<K>(out + i, z);
        }
    }
};

// out (N, C) row n = [out row n +] sum over k ascending of w[n,k] (NULL: 1) * rows
// row pos[n,k] (pos >= 0), in fp32, one rounding.
template <typename T> struct GatherSumMap {
    T *out;
    const T *rows;
    const int32_t *pos;
    const float *w;
    size_t C;
    int topk, idx32, accumulate;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        const size_t n = idx_div(i, C, idx32), c = i - n * C;
        float s[K], v[K];
#pragma unroll
        for (int q = 0; q < K; q++) s[q] = 0.f;
        for (int k = 0; k < topk; k++) {
            const int32_t p = pos[n * topk + k];
            if (p < 0) continue;
            const float wk = w ? w[n * topk + k] : 1.f;
            ld_f<K>(rows + (size_t)p * C + c, v);
#pragma unroll
            for (int q = 0; q < K; q++) s[q] += wk * v[q];
        }
        if (accumulate) {
            ld_f<K>(out + i, v);
#pragma unroll
            for (int q = 0; q < K; q++) s[q] = v[q] + s[q];
        }
        st_f<K>(out + i, s);
    }
};

// Over the N*topk*C elements of the assignments: dy row pos[a] = w[a] * dout row a / topk.
template <typename T> struct ScatterMap {
    T *dy;
    const T *dout;
    const int32_t *pos;
    const float *w;
    size_t C;
    int topk, idx32;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        const size_t a = idx_div(i, C, idx32), c = i - a * C;
        const int32_t p = pos[a];
        if (p < 0) return;
        float d[K];
        ld_f<K>(dout + (a / topk) * C + c, d);
#pragma unroll
        for (int q = 0; q < K; q++) d[q] = w[a] * d[q];
        st_f<K>(dy + (size_t)p * C + c, d);
    }
};

// dx (n) = dx + t (fp32), rounded once to the act type.
template <typename T> struct AddF32Map {
    T *dx;
    const float *t;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        float x[K];
        ld_f<K>(dx + i, x);
        add_f<K>(x, t + i);
        st_f<K>(dx + i, x);
    }
};

// logits (N, E) += bias (E, act dtype): flat element i takes bias[i % E] (its expert).
template <typename T> struct RouterBiasMap {
    float *logits;
    const T *bias;
    size_t E;
    int idx32;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
#pragma unroll
        for (int k = 0; k < K; k++)
            logits[i + k] += to_f(bias[i + k - idx_div(i + k, E, idx32) * E]);
    }
};

// One warp per assignment a: dw[a] = dot(dout row a / topk, y row pos[a]), 0 when dropped.
template <typename T, int VEC>
__global__ void __launch_bounds__(MOE_THREADS)
    moe_wdot_kernel(float *dw, const T *dout, const T *y, const int32_t *pos, long NK, int C,
                    int topk) {
    const int lane = threadIdx.x & 31, nw = MOE_THREADS / 32;
    for (long a = blockIdx.x * (long)nw + (threadIdx.x >> 5); a < NK; a += (long)gridDim.x * nw) {
        const int32_t p = pos[a];
        float s = 0.f;
        if (p >= 0) {
            const T *d = dout + (size_t)(a / topk) * C, *r = y + (size_t)p * C;
            float u[VEC], v[VEC];
            for (int c = lane * VEC; c < C; c += 32 * VEC) {
                ld_f<VEC>(d + c, u);
                ld_f<VEC>(r + c, v);
#pragma unroll
                for (int q = 0; q < VEC; q++) s += u[q] * v[q];
            }
        }
        s = warp_sum(s);
        if (lane == 0) dw[a] = s;
    }
}

// The shared expert's gate, one warp per row i: s[i] = sigmoid(s[i]) (every lane reads
// the logit before lane 0 writes it back), out row i += s[i] * y row i.
template <typename T, int VEC>
__global__ void __launch_bounds__(MOE_THREADS)
    moe_gate_fwd_kernel(T *out, const T *y, float *s, int R, int C) {
    const int lane = threadIdx.x & 31, nw = MOE_THREADS / 32;
    for (long i = blockIdx.x * (long)nw + (threadIdx.x >> 5); i < R; i += (long)gridDim.x * nw) {
        const float g = moe_sigmoid(s[i]);
        T *o = out + (size_t)i * C;
        const T *r = y + (size_t)i * C;
        float u[VEC], v[VEC];
        for (int c = lane * VEC; c < C; c += 32 * VEC) {
            ld_f<VEC>(o + c, u);
            ld_f<VEC>(r + c, v);
#pragma unroll
            for (int q = 0; q < VEC; q++) u[q] += g * v[q];
            st_f<VEC>(o + c, u);
        }
        __syncwarp();
        if (lane == 0) s[i] = g;
    }
}

// Its backward in place, one warp per row: the lanes' dot(dout, y) first (warp_sum
// synchronises the warp, so every read of the row precedes the writes), then y row i =
// s[i] * dout row i and s[i] = dot * s[i] * (1 - s[i]).
template <typename T, int VEC>
__global__ void __launch_bounds__(MOE_THREADS)
    moe_gate_bwd_kernel(T *y, float *s, const T *dout, int R, int C) {
    const int lane = threadIdx.x & 31, nw = MOE_THREADS / 32;
    for (long i = blockIdx.x * (long)nw + (threadIdx.x >> 5); i < R; i += (long)gridDim.x * nw) {
        const float g = s[i];
        T *r = y + (size_t)i * C;
        const T *d = dout + (size_t)i * C;
        float u[VEC], v[VEC], dot = 0.f;
        for (int c = lane * VEC; c < C; c += 32 * VEC) {
            ld_f<VEC>(d + c, u);
            ld_f<VEC>(r + c, v);
#pragma unroll
            for (int q = 0; q < VEC; q++) dot += u[q] * v[q];
        }
        dot = warp_sum(dot);
        for (int c = lane * VEC; c < C; c += 32 * VEC) {
            ld_f<VEC>(d + c, u);
#pragma unroll
            for (int q = 0; q < VEC; q++) u[q] *= g;
            st_f<VEC>(r + c, u);
        }
        __syncwarp(); /* (every lane read s[i] above) */
        if (lane == 0) s[i] = dot * g * (1.f - g);
    }
}

/* ======================= launchers ======================= */

template <typename T>
static void launch_gate(T *out_or_y, const T *y_or_dout, float *s, int R, int C, int bwd,
                        cudaStream_t st) {
    const unsigned g = moe_token_blocks(R);
    constexpr int PK = LT_VEC(T);
    const int vec = cu_aligned16(out_or_y, y_or_dout) && C % PK == 0;
    if (bwd && vec) {
        moe_gate_bwd_kernel<T, PK><<<g, MOE_THREADS, 0, st>>>(out_or_y, s, y_or_dout, R, C);
    } else if (bwd) {
        moe_gate_bwd_kernel<T, 1><<<g, MOE_THREADS, 0, st>>>(out_or_y, s, y_or_dout, R, C);
    } else if (vec) {
        moe_gate_fwd_kernel<T, PK><<<g, MOE_THREADS, 0, st>>>(out_or_y, y_or_dout, s, R, C);
    } else {
        moe_gate_fwd_kernel<T, 1><<<g, MOE_THREADS, 0, st>>>(out_or_y, y_or_dout, s, R, C);
    }
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_permute(T *out, const T *x, const int32_t *src, int M, int C, cudaStream_t st) {
    const size_t n = (size_t)M * C;
    const int vec = cu_aligned16(out, x) && C % LT_VEC(T) == 0;
    launch_map<LT_VEC(T)>(PermuteMap<T>{out, x, src, (size_t)C, n <= 0xffffffffu}, n, vec, st);
}

template <typename T>
static void launch_gather_sum(T *out, const T *rows, const int32_t *pos, const float *w, int N,
                              int K, int C, int accumulate, cudaStream_t st) {
    const size_t n = (size_t)N * C;
    const int vec = cu_aligned16(out, rows) && C % LT_VEC(T) == 0;
    launch_map<LT_VEC(T)>(
        GatherSumMap<T>{out, rows, pos, w, (size_t)C, K, n <= 0xffffffffu, accumulate}, n, vec, st);
}

template <typename T>
static void launch_unpermute_bwd(T *dy, float *dw, const T *dout, const T *y, const int32_t *pos,
                                 const float *w, int N, int K, int C, int M, cudaStream_t st) {
    const size_t n = (size_t)N * K * C;
    const int vec = cu_aligned16(dy, dout, y) && C % LT_VEC(T) == 0;
    if (M > 0 && C > 0) CU_CHECK(cudaMemsetAsync(dy, 0, (size_t)M * C * sizeof(T), st));
    if (n) launch_map<LT_VEC(T)>(ScatterMap<T>{dy, dout, pos, w, (size_t)C, K, n <= 0xffffffffu},
                                 n, vec, st);
    const long NK = (long)N * K;
    const unsigned g = moe_token_blocks((int)(NK < 0x7fffffffL ? NK : 0x7fffffffL));
    constexpr int PK = LT_VEC(T);
    if (vec)
        moe_wdot_kernel<T, PK><<<g, MOE_THREADS, 0, st>>>(dw, dout, y, pos, NK, C, K);
    else
        moe_wdot_kernel<T, 1><<<g, MOE_THREADS, 0, st>>>(dw, dout, y, pos, NK, C, K);
    CU_CHECK_LAUNCH();
}

static void moe_check_args(const char *op, int E, int K, int score) {
    if (E < 1 || K < 1 || K > E || (score != LT_MOE_SOFTMAX && score != LT_MOE_SIGMOID))
        lt_fatal("%s: needs 1 <= K <= E and a known score function (got E=%d K=%d score=%d)", op,
                 E, K, score);
}

/* ======================= op entries ======================= */

void cu_act_add_f32(LtBackend *be, void *dx, const float *t, size_t n) {
    if (!n) return;
    if (cu_is_bf16(be))
        launch_map<LT_VEC(bf16)>(AddF32Map<bf16>{(bf16 *)dx, t}, n, cu_aligned16(dx, t),
                                 cu_stream(be));
    else
        launch_map<LT_VEC(float)>(AddF32Map<float>{(float *)dx, t}, n, cu_aligned16(dx, t),
                                  cu_stream(be));
}

void cu_moe_router_bias_fwd(LtBackend *be, float *logits, const void *bias, int N, int E) {
    const size_t n = (size_t)N * E;
    if (!n) return;
    if (cu_is_bf16(be))
        launch_map<1>(RouterBiasMap<bf16>{logits, (const bf16 *)bias, (size_t)E, n <= 0xffffffffu},
                      n, 0, cu_stream(be));
    else
        launch_map<1>(RouterBiasMap<float>{logits, (const float *)bias, (size_t)E,
                                           n <= 0xffffffffu},
                      n, 0, cu_stream(be));
}

void cu_moe_router_bias_bwd(LtBackend *be, float *dbias, const float *dlogits, int N, int E) {
    if (N > 0 && E > 0) launch_colsum_f32_add(dbias, dlogits, (size_t)E, N, E, cu_stream(be));
}

void cu_moe_topk(LtBackend *be, int32_t *idx, float *w, const float *logits, const float *bias,
                 int N, int E, int K, int score, int pre_softmax, float scale, int groups,
                 int group_topk) {
    if (N <= 0) return;
    moe_check_args("moe_topk", E, K, score);
    if (!lt_moe_groups_fit(E, K, groups, group_topk))
        lt_fatal("moe_topk: groups %d, group_topk %d do not fit E=%d K=%d (backend.h)", groups,
                 group_topk, E, K);
    moe_topk_kernel<<<moe_token_blocks(N), MOE_THREADS, 0, cu_stream(be)>>>(
        idx, w, logits, bias, N, E, K, score, pre_softmax, scale == 0.f ? 1.f : scale,
        groups, groups ? group_topk : 0);
    CU_CHECK_LAUNCH();
}

void cu_moe_topk_bwd(LtBackend *be, float *dlogits, const float *dw, const int32_t *idx,
                     const float *logits, int N, int E, int K, int score, int pre_softmax,
                     float scale) {
    if (N <= 0) return;
    moe_check_args("moe_topk_bwd", E, K, score);
    moe_topk_bwd_kernel<<<moe_token_blocks(N), MOE_THREADS, 0, cu_stream(be)>>>(
        dlogits, dw, idx, logits, N, E, K, score, pre_softmax, scale == 0.f ? 1.f : scale);
    CU_CHECK_LAUNCH();
}

void cu_moe_aux_stats(LtBackend *be, float *counts, float *psum, double *zsum,
                      const float *logits, int N, int E, int K, int score, long row0,
                      long group_len) {
    if (N <= 0 || (!counts && !psum && !zsum)) return;
    moe_check_args("moe_aux_stats", E, K, score);
    if (group_len < 1) lt_fatal("moe_aux_stats: group_len must be >= 1 (got %ld)", group_len);
    const long g0 = row0 / group_len, ng = (row0 + N - 1) / group_len - g0 + 1;
    const long per = group_len < N ? group_len : N, spg = (per + MOE_SEG - 1) / MOE_SEG;
    const size_t nseg = (size_t)(ng * spg), NE = (size_t)N * E;
    char *ws = (char *)cu_scratch(be, nseg * 8 + (2 * NE + N + 2 * nseg * E) * 4 + 64);
    double *Z = (double *)ws;
    float *a = (float *)(ws + cu_align_up(nseg * 8, 16)), *msk = a + NE, *lse = msk + NE;
    float *P = lse + N, *Q = P + nseg * E;
    cudaStream_t st = cu_stream(be);
    moe_aux_scores_kernel<<<moe_token_blocks(N), MOE_THREADS, 0, st>>>(a, msk, lse, logits, N, E,
                                                                       K, score);
    CU_CHECK_LAUNCH();
    const unsigned th = (unsigned)(E < MOE_THREADS ? (E + 31) / 32 * 32 : MOE_THREADS);
    moe_aux_partial_kernel<<<dim3((unsigned)nseg, cu_blocks((size_t)E, th)), th, 0, st>>>(
        P, Q, Z, a, msk, lse, N, E, (int)spg, row0, group_len);
    CU_CHECK_LAUNCH();
    moe_aux_final_kernel<<<cu_blocks((size_t)(ng * E), MOE_THREADS), MOE_THREADS, 0, st>>>(
        counts, psum, zsum, P, Q, Z, E, (int)ng, (int)spg, g0);
    CU_CHECK_LAUNCH();
}

void cu_moe_aux_bwd(LtBackend *be, float *dlogits, const float *logits, const float *counts,
                    int N, int E, int K, int score, long row0, long group_len, float aux_coef,
                    float z_coef) {
    if (N <= 0 || (aux_coef == 0.f && z_coef == 0.f)) return;
    moe_check_args("moe_aux_bwd", E, K, score);
    if (group_len < 1) lt_fatal("moe_aux_bwd: group_len must be >= 1 (got %ld)", group_len);
    if (aux_coef != 0.f && !counts) lt_fatal("moe_aux_bwd: aux_coef %g needs counts", aux_coef);
    moe_aux_bwd_kernel<<<moe_token_blocks(N), MOE_THREADS, 0, cu_stream(be)>>>(
        dlogits, logits, counts, N, E, score, row0, group_len, aux_coef, z_coef);
    CU_CHECK_LAUNCH();
}

void cu_moe_dispatch(LtBackend *be, int32_t *pos, int32_t *src, int32_t *offsets,
                     int32_t *dropped, const int32_t *idx, const float *w, int N, int E, int K,
                     int capacity, int drop_policy, int pad) {
    const long NK = (long)(N > 0 ? N : 0) * K;
    if (E < 1 || K < 1) lt_fatal("moe_dispatch: needs E >= 1 and K >= 1 (got E=%d K=%d)", E, K);
    const int probs = capacity > 0 && drop_policy == LT_MOE_DROP_PROBS;
    if (probs && !w && NK > 0)
        lt_fatal("moe_dispatch: the probs drop policy needs the routing weights w");
    if (E > 0x7fffffff / 4) lt_fatal("moe_dispatch: E=%d experts is too many", E);
    int *cnt = (int *)cu_scratch(be, (size_t)E * 12 + (size_t)NK * 5 + 64);
    int *start = cnt + E, *kept = start + E;
    int32_t *list = kept + E;
    unsigned char *keep = (unsigned char *)(list + NK);
    cudaStream_t st = cu_stream(be);
    moe_dispatch_count_kernel<<<E, MOE_THREADS, 0, st>>>(cnt, idx, NK);
    CU_CHECK_LAUNCH();
    moe_dispatch_scan_kernel<<<1, 32, 0, st>>>(start, NULL, NULL, cnt, E, NK, 0);
    CU_CHECK_LAUNCH();
    moe_dispatch_list_kernel<<<E, MOE_THREADS, 0, st>>>(list, keep, kept, start, cnt, idx, w, NK,
                                                        capacity, probs);
    CU_CHECK_LAUNCH();
    moe_dispatch_scan_kernel<<<1, 32, 0, st>>>(NULL, offsets, dropped, kept, E, NK,
                                               capacity > 0 && pad ? capacity : 0);
    CU_CHECK_LAUNCH();
    moe_dispatch_place_kernel<<<E, MOE_THREADS, 0, st>>>(pos, src, offsets, list, keep, start, cnt,
                                                         idx, NK, E, K);
    CU_CHECK_LAUNCH();
}

void cu_moe_permute(LtBackend *be, void *out, const void *x, const int32_t *src, int M, int C) {
    if (M <= 0 || C <= 0) return;
    if (cu_is_bf16(be))
        launch_permute<bf16>((bf16 *)out, (const bf16 *)x, src, M, C, cu_stream(be));
    else
        launch_permute<float>((float *)out, (const float *)x, src, M, C, cu_stream(be));
}

void cu_moe_permute_bwd(LtBackend *be, void *dx, const void *dxp, const int32_t *pos, int N,
                        int K, int C) {
    if (N <= 0 || C <= 0) return;
    if (cu_is_bf16(be))
        launch_gather_sum<bf16>((bf16 *)dx, (const bf16 *)dxp, pos, NULL, N, K, C, 1,
                                cu_stream(be));
    else
        launch_gather_sum<float>((float *)dx, (const float *)dxp, pos, NULL, N, K, C, 1,
                                 cu_stream(be));
}

void cu_moe_unpermute(LtBackend *be, void *out, const void *y, const int32_t *pos, const float *w,
                      int N, int K, int C) {
    if (N <= 0 || C <= 0) return;
    if (cu_is_bf16(be))
        launch_gather_sum<bf16>((bf16 *)out, (const bf16 *)y, pos, w, N, K, C, 0, cu_stream(be));
    else
        launch_gather_sum<float>((float *)out, (const float *)y, pos, w, N, K, C, 0,
                                 cu_stream(be));
}

void cu_moe_gate_fwd(LtBackend *be, void *out, const void *y, float *s, int R, int C) {
    if (R <= 0) return;
    if (cu_is_bf16(be))
        launch_gate<bf16>((bf16 *)out, (const bf16 *)y, s, R, C, 0, cu_stream(be));
    else
        launch_gate<float>((float *)out, (const float *)y, s, R, C, 0, cu_stream(be));
}

void cu_moe_gate_bwd(LtBackend *be, void *y, float *s, const void *dout, int R, int C) {
    if (R <= 0) return;
    if (cu_is_bf16(be))
        launch_gate<bf16>((bf16 *)y, (const bf16 *)dout, s, R, C, 1, cu_stream(be));
    else
        launch_gate<float>((float *)y, (const float *)dout, s, R, C, 1, cu_stream(be));
}

void cu_moe_unpermute_bwd(LtBackend *be, void *dy, float *dw, const void *dout, const void *y,
                          const int32_t *pos, const float *w, int N, int K, int C, int M) {
    if (N <= 0 && M <= 0) return;
    if (N < 0) N = 0;
    if (C <= 0) { /* empty rows: every dot product is 0 */
        if (N > 0) CU_CHECK(cudaMemsetAsync(dw, 0, (size_t)N * K * sizeof(float), cu_stream(be)));
        return;
    }
    if (cu_is_bf16(be))
        launch_unpermute_bwd<bf16>((bf16 *)dy, dw, (const bf16 *)dout, (const bf16 *)y, pos, w, N,
                                   K, C, M, cu_stream(be));
    else
        launch_unpermute_bwd<float>((float *)dy, dw, (const float *)dout, (const float *)y, pos,
                                    w, N, K, C, M, cu_stream(be));
}
