/* moe.c - mixture-of-experts ops: the router GEMMs (cblas), top-k routing and its
 * backward, the load-balancing statistics and their gradient, the expert-major
 * dispatch (a serial counting sort with the capacity decision) and the permute /
 * unpermute gathers. Semantics in include/backend.h; they follow Megatron-Core's
 * topk_routing_with_score_function, compute_routing_scores_for_aux_loss,
 * switch_load_balancing_loss_func, z_loss_func and apply_router_token_dropping.
 *
 * Per-token work runs in parallel over tokens (each token's outputs belong to one
 * thread); sums over tokens (moe_aux_stats) are serial in token order, so every
 * result is independent of the thread count. Scores and their gradients are fp32
 * with expf/logf; act outputs are stored through cpu_store. A scale of 0 means no
 * scaling, as Megatron's moe_router_topk_scaling_factor does (0 / None = off). */
#include "blas.h"
#include <omp.h>
#include <stdlib.h>

#include "config.h"
#include "cpu_ops.h"

#define MOE_EPS 1e-20f /* the sigmoid normaliser's guard, as Megatron's */

/* ---- router GEMMs --------------------------------------------------------- */

void cpu_moe_router_fwd(LtBackend *be, float *logits, const void *x, const void *w,
                        const void *bias_, int N, int C, int E) {
    if (N <= 0 || E <= 0) return;
    if (C <= 0)
        memset(logits, 0, (size_t)N * E * sizeof(float));
    else /* logits (N, E) = x (N, C) . w (E, C)^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, E, C, 1.0f, x, C, w, C, 0.0f,
                    logits, E);
    if (!bias_) return;
    const float *bias = bias_;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++)
        for (int e = 0; e < E; e++) logits[(size_t)i * E + e] += bias[e];
}

void cpu_moe_router_bwd(LtBackend *be, void *dx_, float *dw, float *dbias, const float *dlogits,
                        const void *x, const void *w, int N, int C, int E) {
    if (N <= 0 || E <= 0) return;
    if (dbias) /* each expert's sum in token order: independent of the thread count */
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
        for (int e = 0; e < E; e++) {
            float s = 0.0f;
            for (int i = 0; i < N; i++) s += dlogits[(size_t)i * E + e];
            dbias[e] += s;
        }
    if (C <= 0) return;
    if (dx_) {
        float *dx = dx_, *t = cpu_scratch(be, (size_t)N * C);
        const int bf16 = cpu_is_bf16(be);
        /* t (N, C) = dlogits (N, E) . w (E, C), then dx += t in the act dtype */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, E, 1.0f, dlogits, E, w, C,
                    0.0f, t, C);
        long long n = (long long)N * C;
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be))
        for (long long i = 0; i < n; i++) dx[i] = cpu_store(bf16, dx[i] + t[i]);
    }
    if (dw) /* dw (E, C) += dlogits^T (E, N) . x (N, C) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, E, C, N, 1.0f, dlogits, E, x, C,
                    1.0f, dw, C);
}

/* ---- scores --------------------------------------------------------------- */

static inline float moe_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* p (E) = softmax(l); returns logsumexp(l). */
static float moe_softmax(float *p, const float *l, int E) {
    float m = l[0], s = 0.0f;
    for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
    for (int e = 0; e < E; e++) s += (p[e] = expf(l[e] - m));
    for (int e = 0; e < E; e++) p[e] /= s;
    return m + logf(s);
}

/* a (E) = sigmoid(l) / (sum + 1e-20). */
static void moe_sigmoid_norm(float *a, const float *l, int E) {
    float s = 0.0f;
    for (int e = 0; e < E; e++) s += (a[e] = moe_sigmoid(l[e]));
    for (int e = 0; e < E; e++) a[e] /= s + MOE_EPS;
}

/* idx (K) = the K largest of v (E) among the experts of the groups set in mask
 * (bit e / gsize; gsize 0: every expert), descending, ties to the lower index (a
 * NaN entry is never preferred over a number, and every slot gets a distinct
 * index). */
static void moe_select_in(int32_t *idx, const float *v, int E, int K, uint64_t mask, int gsize) {
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = gsize > 0 && !((mask >> (e / gsize)) & 1);
            for (int j = 0; j < k; j++) taken |= idx[j] == e;
            if (!taken && (best < 0 || v[e] > v[best] || (v[best] != v[best] && v[e] == v[e])))
                best = e;
        }
        idx[k] = best;
    }
}

static void moe_select(int32_t *idx, const float *v, int E, int K) {
    moe_select_in(idx, v, E, K, 0, 0);
}

/* Group-limited routing's groups (backend.h, moe_topk): the mask of the GK best
 * of G groups of v (E), a group scored by the sum of its K / GK largest entries
 * in descending order; t (K) int workspace, gs (G) float workspace. */
static uint64_t moe_group_mask(const float *v, int E, int K, int G, int GK, int32_t *t, float *gs) {
    const int gsize = E / G, m = K / GK;
    for (int g = 0; g < G; g++) {
        moe_select(t, v + (size_t)g * gsize, gsize, m);
        float s = 0.0f;
        for (int j = 0; j < m; j++) s += v[(size_t)g * gsize + t[j]];
        gs[g] = s;
    }
    int32_t gi[LT_MOE_MAX_GROUPS];
    moe_select(gi, gs, G, GK);
    uint64_t mask = 0;
    for (int j = 0; j < GK; j++) mask |= 1ull << gi[j];
    return mask;
}

static inline float moe_scale(float scale) { return scale == 0.0f ? 1.0f : scale; }

/* One token's top-k routing; t (E + G) is workspace. The selecting score v:
 * sigmoid + bias, the softmax probability, or the logit; with groups, only the
 * experts of the token's best groups are candidates. */
static void topk_token(int32_t *idx, float *w, const float *l, const float *bias, float *t, int E,
                       int K, int score, int pre_softmax, float scale, int G, int GK) {
    const float *v = l;
    if (score == LT_MOE_SIGMOID) {
        for (int e = 0; e < E; e++) t[e] = moe_sigmoid(l[e]) + (bias ? bias[e] : 0.0f);
        v = t;
    } else if (pre_softmax) {
        moe_softmax(t, l, E);
        v = t;
    }
    const uint64_t mask = G > 0 ? moe_group_mask(v, E, K, G, GK, idx, t + E) : 0;
    moe_select_in(idx, v, E, K, mask, G > 0 ? E / G : 0);
    if (score == LT_MOE_SIGMOID) {
        float s = 0.0f;
        for (int k = 0; k < K; k++) s += (w[k] = moe_sigmoid(l[idx[k]]));
        if (K > 1)
            for (int k = 0; k < K; k++) w[k] /= s + MOE_EPS;
    } else if (pre_softmax) {
        for (int k = 0; k < K; k++) w[k] = t[idx[k]];
    } else {
        for (int k = 0; k < K; k++) t[k] = l[idx[k]];
        moe_softmax(w, t, K);
    }
    for (int k = 0; k < K; k++) w[k] *= scale;
}

static void moe_check_args(const char *op, int E, int K, int score) {
    if (E < 1 || K < 1 || K > E || (score != LT_MOE_SOFTMAX && score != LT_MOE_SIGMOID))
        lt_fatal("%s: needs 1 <= K <= E and a known score function (got E=%d K=%d score=%d)", op,
                 E, K, score);
}

void cpu_moe_topk(LtBackend *be, int32_t *idx, float *w, const float *logits, const float *bias,
                  int N, int E, int K, int score, int pre_softmax, float scale, int groups,
                  int group_topk) {
    if (N <= 0) return;
    moe_check_args("moe_topk", E, K, score);
    if (!lt_moe_groups_fit(E, K, groups, group_topk))
        lt_fatal("moe_topk: groups %d, group_topk %d do not fit E=%d K=%d (backend.h)", groups,
                 group_topk, E, K);
    const size_t per = (size_t)E + LT_MOE_MAX_GROUPS;
    float *ws = cpu_scratch(be, (size_t)cpu_nthreads(be) * per);
    scale = moe_scale(scale);
#pragma omp parallel num_threads(cpu_nthreads(be))
    {
        float *t = ws + (size_t)omp_get_thread_num() * per;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++)
            topk_token(idx + (size_t)i * K, w + (size_t)i * K, logits + (size_t)i * E, bias, t, E,
                       K, score, pre_softmax, scale, groups, group_topk);
    }
}

/* One token's moe_topk_bwd into d (E, zeroed); t (E) is workspace. */
static void topk_bwd_token(float *d, const float *dw, const int32_t *idx, const float *l, float *t,
                           int E, int K, int score, int pre_softmax, float scale) {
    if (score == LT_MOE_SIGMOID) {
        /* w_k = scale s_k / (S + eps) (K > 1): dL/ds_k = scale (dw_k - sum_j dw_j w'_j) / (S+eps),
         * w' the unscaled normalised weights; then ds/dl = s (1 - s) */
        float S = 0.0f, dot = 0.0f;
        for (int k = 0; k < K; k++) S += (t[k] = moe_sigmoid(l[idx[k]]));
        float den = K > 1 ? S + MOE_EPS : 1.0f;
        if (K > 1)
            for (int k = 0; k < K; k++) dot += dw[k] * t[k] / den;
        for (int k = 0; k < K; k++)
            d[idx[k]] = scale * (dw[k] - dot) / den * t[k] * (1.0f - t[k]);
    } else if (pre_softmax) {
        /* w_k = scale p[idx_k]: g_e = scale dw_k at e = idx_k; dl_j = p_j (g_j - sum_e g_e p_e) */
        moe_softmax(t, l, E);
        float dot = 0.0f;
        for (int k = 0; k < K; k++) dot += scale * dw[k] * t[idx[k]];
        for (int e = 0; e < E; e++) d[e] = -t[e] * dot;
        for (int k = 0; k < K; k++) d[idx[k]] += t[idx[k]] * scale * dw[k];
    } else {
        /* w = scale softmax(l[idx]): dl[idx_k] = scale q_k (dw_k - sum_j dw_j q_j) */
        float *q = t + K;
        for (int k = 0; k < K; k++) t[k] = l[idx[k]];
        moe_softmax(q, t, K);
        float dot = 0.0f;
        for (int k = 0; k < K; k++) dot += dw[k] * q[k];
        for (int k = 0; k < K; k++) d[idx[k]] = scale * q[k] * (dw[k] - dot);
    }
}

void cpu_moe_topk_bwd(LtBackend *be, float *dlogits, const float *dw, const int32_t *idx,
                      const float *logits, int N, int E, int K, int score, int pre_softmax,
                      float scale) {
    if (N <= 0) return;
    moe_check_args("moe_topk_bwd", E, K, score);
    float *ws = cpu_scratch(be, (size_t)cpu_nthreads(be) * 2 * E);
    scale = moe_scale(scale);
#pragma omp parallel num_threads(cpu_nthreads(be))
    {
        float *t = ws + (size_t)omp_get_thread_num() * 2 * E;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            float *d = dlogits + (size_t)i * E;
            memset(d, 0, (size_t)E * sizeof(float));
            topk_bwd_token(d, dw + (size_t)i * K, idx + (size_t)i * K, logits + (size_t)i * E, t,
                           E, K, score, pre_softmax, scale);
        }
    }
}

/* ---- load balancing ------------------------------------------------------- */

static float moe_lse(const float *l, int E) {
    float m = l[0], s = 0.0f;
    for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
    for (int e = 0; e < E; e++) s += expf(l[e] - m);
    return m + logf(s);
}

/* Serial over tokens (the sums into counts, psum and zsum in token order); the
 * per-token scores come first, in parallel, into a (N, E) scratch. */
void cpu_moe_aux_stats(LtBackend *be, float *counts, float *psum, double *zsum,
                       const float *logits, int N, int E, int K, int score, long row0,
                       long group_len) {
    if (N <= 0) return;
    moe_check_args("moe_aux_stats", E, K, score);
    if (group_len < 1) lt_fatal("moe_aux_stats: group_len must be >= 1 (got %ld)", group_len);
    float *a = cpu_scratch(be, (size_t)N * (E + 1) + (size_t)N * K);
    float *lse = a + (size_t)N * E;
    int32_t *sel = (int32_t *)(lse + N);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * E;
        float *ai = a + (size_t)i * E;
        if (score == LT_MOE_SIGMOID) {
            moe_sigmoid_norm(ai, l, E);
            lse[i] = moe_lse(l, E);
        } else {
            lse[i] = moe_softmax(ai, l, E);
        }
        moe_select(sel + (size_t)i * K, ai, E, K);
    }
    for (int i = 0; i < N; i++) {
        size_t g = (size_t)((row0 + i) / group_len) * E;
        if (counts)
            for (int k = 0; k < K; k++) counts[g + sel[(size_t)i * K + k]] += 1.0f;
        if (psum)
            for (int e = 0; e < E; e++) psum[g + e] += a[(size_t)i * E + e];
        if (zsum) zsum[0] += (double)lse[i] * lse[i];
    }
}

/* One token's moe_aux_bwd added into d (E); c (E) = aux_coef * counts of its group
 * (NULL: no aux term); t (E) workspace. */
static void aux_bwd_token(float *d, const float *l, const float *c, float *t, int E, int score,
                          float z_coef) {
    if (c && score == LT_MOE_SIGMOID) {
        /* a = s / (S + eps), dL/da = c: dl_j = (c_j - <a, c>) / (S + eps) * s_j (1 - s_j) */
        float S = 0.0f, dot = 0.0f;
        for (int e = 0; e < E; e++) S += (t[e] = moe_sigmoid(l[e]));
        const float den = S + MOE_EPS;
        for (int e = 0; e < E; e++) dot += t[e] / den * c[e];
        for (int e = 0; e < E; e++) d[e] += (c[e] - dot) / den * t[e] * (1.0f - t[e]);
    } else if (c) { /* a = softmax(l): dl_j = a_j (c_j - <a, c>) */
        float dot = 0.0f;
        moe_softmax(t, l, E);
        for (int e = 0; e < E; e++) dot += t[e] * c[e];
        for (int e = 0; e < E; e++) d[e] += t[e] * (c[e] - dot);
    }
    if (z_coef != 0.0f) { /* d(z lse^2)/dl = 2 z lse softmax(l) */
        float lse = moe_softmax(t, l, E);
        for (int e = 0; e < E; e++) d[e] += 2.0f * z_coef * lse * t[e];
    }
}

void cpu_moe_aux_bwd(LtBackend *be, float *dlogits, const float *logits, const float *counts, int N,
                     int E, int K, int score, long row0, long group_len, float aux_coef,
                     float z_coef) {
    if (N <= 0 || (aux_coef == 0.0f && z_coef == 0.0f)) return;
    moe_check_args("moe_aux_bwd", E, K, score);
    if (group_len < 1) lt_fatal("moe_aux_bwd: group_len must be >= 1 (got %ld)", group_len);
    if (aux_coef != 0.0f && !counts) lt_fatal("moe_aux_bwd: aux_coef %g needs counts", aux_coef);
    float *ws = cpu_scratch(be, (size_t)cpu_nthreads(be) * 2 * E);
#pragma omp parallel num_threads(cpu_nthreads(be))
    {
        float *t = ws + (size_t)omp_get_thread_num() * 2 * E, *c = t + E;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            const float *cg = NULL;
            if (aux_coef != 0.0f) {
                const float *cnt = counts + (size_t)((row0 + i) / group_len) * E;
                for (int e = 0; e < E; e++) c[e] = aux_coef * cnt[e];
                cg = c;
            }
            aux_bwd_token(dlogits + (size_t)i * E, logits + (size_t)i * E, cg, t, E, score,
                          z_coef);
        }
    }
}

/* ---- dispatch ------------------------------------------------------------- */

typedef struct {
    float w;   /* the routing weight (NaN read as -inf) */
    int32_t a; /* assignment i * K + k: increasing in the token */
} MoeCand;

/* Larger w first, then the lower token. */
static int moe_cand_cmp(const void *pa, const void *pb) {
    const MoeCand *x = pa, *y = pb;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return (x->a > y->a) - (x->a < y->a);
}

/* keep[a] for expert e's `n` assignments list[0..n) (token order) under the
 * capacity: all when n <= capacity, else the first `capacity` (position) or the
 * `capacity` largest w (probs). cand (n) is workspace. */
static void moe_keep_expert(unsigned char *keep, const int32_t *list, int n, const float *w,
                            int capacity, int drop_policy, MoeCand *cand) {
    if (n <= capacity || drop_policy == LT_MOE_DROP_POSITION) {
        for (int j = 0; j < n && j < capacity; j++) keep[list[j]] = 1;
        return;
    }
    for (int j = 0; j < n; j++) {
        float v = w[list[j]];
        cand[j].w = v == v ? v : -INFINITY;
        cand[j].a = list[j];
    }
    qsort(cand, (size_t)n, sizeof *cand, moe_cand_cmp);
    for (int j = 0; j < capacity; j++) keep[cand[j].a] = 1;
}

/* keep (N*K) under the capacity: assignments grouped by expert in token order
 * (a counting sort), then each expert's decision. cnt (E) holds the per-expert
 * assignment counts. */
static void moe_capacity(unsigned char *keep, const int32_t *idx, const float *w, const int *cnt,
                         long NK, int E, int capacity, int drop_policy) {
    int32_t *list = lt_malloc((size_t)NK * sizeof(int32_t) + 4);
    long *start = lt_malloc(((size_t)E + 1) * sizeof(long));
    MoeCand *cand = lt_malloc((size_t)NK * sizeof(MoeCand) + 8);
    start[0] = 0;
    for (int e = 0; e < E; e++) start[e + 1] = start[e] + cnt[e];
    long *cur = lt_malloc((size_t)E * sizeof(long) + 8);
    memcpy(cur, start, (size_t)E * sizeof(long));
    for (long a = 0; a < NK; a++) list[cur[idx[a]]++] = (int32_t)a;
    for (int e = 0; e < E; e++)
        moe_keep_expert(keep, list + start[e], (int)(start[e + 1] - start[e]), w, capacity,
                        drop_policy, cand);
    free(list), free(start), free(cand), free(cur);
}

void cpu_moe_dispatch(LtBackend *be, int32_t *pos, int32_t *src, int32_t *offsets,
                      int32_t *dropped, const int32_t *idx, const float *w, int N, int E, int K,
                      int capacity, int drop_policy, int pad) {
    (void)be;
    const long NK = (long)(N > 0 ? N : 0) * K;
    if (E < 1 || K < 1) lt_fatal("moe_dispatch: needs E >= 1 and K >= 1 (got E=%d K=%d)", E, K);
    if (capacity > 0 && drop_policy == LT_MOE_DROP_PROBS && !w && NK > 0)
        lt_fatal("moe_dispatch: the probs drop policy needs the routing weights w");
    int *cnt = lt_calloc(((size_t)E + 1) * sizeof(int)), *cur = lt_calloc((size_t)E * sizeof(int));
    for (long a = 0; a < NK; a++) {
        if (idx[a] < 0 || idx[a] >= E)
            lt_fatal("moe_dispatch: assignment %ld routes to expert %d, outside [0, %d)", a,
                     idx[a], E);
        cnt[idx[a]]++;
    }
    unsigned char *keep = lt_malloc((size_t)NK + 1);
    memset(keep, capacity > 0 ? 0 : 1, (size_t)NK);
    if (capacity > 0) moe_capacity(keep, idx, w, cnt, NK, E, capacity, drop_policy);
    offsets[0] = 0;
    for (int e = 0; e < E; e++) {
        int kept = capacity > 0 && cnt[e] > capacity ? capacity : cnt[e];
        offsets[e + 1] = offsets[e] + (capacity > 0 && pad ? capacity : kept);
        cur[e] = offsets[e];
    }
    int32_t nd = 0;
    for (long a = 0; a < NK; a++) {
        int e = idx[a];
        pos[a] = keep[a] ? cur[e]++ : -1;
        if (keep[a]) src[pos[a]] = (int32_t)(a / K);
        nd += !keep[a];
    }
    for (int e = 0; e < E; e++)
        for (int r = cur[e]; r < offsets[e + 1]; r++) src[r] = -1;
    dropped[0] = nd;
    free(cnt), free(cur), free(keep);
}

/* ---- permute / unpermute -------------------------------------------------- */

void cpu_moe_permute(LtBackend *be, void *out_, const void *x_, const int32_t *src, int M, int C) {
    float *out = out_;
    const float *x = x_;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int r = 0; r < M; r++) {
        float *o = out + (size_t)r * C;
        if (src[r] < 0)
            memset(o, 0, (size_t)C * sizeof(float));
        else
            memcpy(o, x + (size_t)src[r] * C, (size_t)C * sizeof(float));
    }
}

/* out row i (= or += when accumulate) the sum over k ascending of w[i,k] (NULL: 1)
 * times rows row pos[i,k], skipping pos < 0; summed in fp32, stored in the act dtype. */
static void moe_gather_sum(LtBackend *be, float *out, const float *rows, const int32_t *pos,
                           const float *w, int N, int K, int C, int accumulate) {
    const int bf16 = cpu_is_bf16(be);
    float *ws = cpu_scratch(be, (size_t)cpu_nthreads(be) * C);
#pragma omp parallel num_threads(cpu_nthreads(be))
    {
        float *s = ws + (size_t)omp_get_thread_num() * C;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            const int32_t *p = pos + (size_t)i * K;
            float *o = out + (size_t)i * C;
            for (int c = 0; c < C; c++) s[c] = 0.0f;
            for (int k = 0; k < K; k++) {
                if (p[k] < 0) continue;
                const float wk = w ? w[(size_t)i * K + k] : 1.0f, *r = rows + (size_t)p[k] * C;
#pragma omp simd
                for (int c = 0; c < C; c++) s[c] += wk * r[c];
            }
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = cpu_store(bf16, accumulate ? o[c] + s[c] : s[c]);
        }
    }
}

void cpu_moe_permute_bwd(LtBackend *be, void *dx, const void *dxp, const int32_t *pos, int N,
                         int K, int C) {
    moe_gather_sum(be, dx, dxp, pos, NULL, N, K, C, 1);
}

void cpu_moe_unpermute(LtBackend *be, void *out, const void *y, const int32_t *pos,
                       const float *w, int N, int K, int C) {
    moe_gather_sum(be, out, y, pos, w, N, K, C, 0);
}

void cpu_moe_unpermute_bwd(LtBackend *be, void *dy_, float *dw, const void *dout_, const void *y_,
                           const int32_t *pos, const float *w, int N, int K, int C, int M) {
    float *dy = dy_;
    const float *dout = dout_, *y = y_;
    const int bf16 = cpu_is_bf16(be);
    if (M > 0) memset(dy, 0, (size_t)M * C * sizeof(float));
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * C;
        for (int k = 0; k < K; k++) {
            int32_t r = pos[(size_t)i * K + k];
            float dot = 0.0f;
            if (r >= 0) {
                const float *yr = y + (size_t)r * C, wk = w[(size_t)i * K + k];
                float *g = dy + (size_t)r * C;
                for (int c = 0; c < C; c++) {
                    g[c] = cpu_store(bf16, wk * d[c]);
                    dot += d[c] * yr[c];
                }
            }
            dw[(size_t)i * K + k] = dot;
        }
    }
}

/* ---- the shared expert's gate -------------------------------------------- */

void cpu_moe_gate_fwd(LtBackend *be, void *out_, const void *y_, float *s, int R, int C) {
    float *out = out_;
    const float *y = y_;
    const int bf16 = cpu_is_bf16(be);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < R; i++) {
        const float g = s[i] = moe_sigmoid(s[i]);
        float *o = out + (size_t)i * C;
        const float *yr = y + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = cpu_store(bf16, o[c] + g * yr[c]);
    }
}

void cpu_moe_gate_bwd(LtBackend *be, void *y_, float *s, const void *dout_, int R, int C) {
    float *y = y_;
    const float *dout = dout_;
    const int bf16 = cpu_is_bf16(be);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < R; i++) {
        float *yr = y + (size_t)i * C;
        const float *d = dout + (size_t)i * C, g = s[i];
        float dot = 0.0f;
        for (int c = 0; c < C; c++) dot += d[c] * yr[c];
        for (int c = 0; c < C; c++) yr[c] = cpu_store(bf16, g * d[c]);
        s[i] = dot * g * (1.0f - g);
    }
}
