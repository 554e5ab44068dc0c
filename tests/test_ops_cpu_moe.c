/* test_ops_cpu_moe.c - the CPU backend's mixture-of-experts ops (include/backend.h)
 * against double-precision references written here: the router GEMMs, top-k routing
 * (both score functions, pre_softmax, expert bias, scaling, ties, K == E), the
 * load-balancing statistics, the gradients of top-k and of the aux / z losses
 * against central finite differences of those references, the dispatch (dropless,
 * capacity with both drop policies, padding) against an independent reference,
 * permute / unpermute and their backwards, the grouped linears of the experts (against
 * a reference and bit for bit against a loop of linear_fwd / linear_bwd), empty inputs,
 * bf16 storage and thread-count independence. A separate binary from test_ops_cpu.c
 * (same filter prefix) to keep both files short. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "config.h"
#include "test.h"

static LtBackend *g_be, *g_bf;
static uint64_t g_seq = 1;

static float gauss(void) { return lt_normal_at(2027, 3, g_seq++); }
static int irand(int n) { return (int)(lt_uniform_at(2027, 4, g_seq++) * n) % n; }
static float *fbuf(size_t n, float sc) {
    float *x = lt_malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) x[i] = sc * gauss();
    return x;
}
static float *nanbuf(size_t n) {
    float *x = lt_malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}
static int32_t *ibuf(size_t n, int32_t v) {
    int32_t *x = lt_malloc(n * sizeof(int32_t) + 4);
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}
/* max |a - r| / (|r| + floor); infinite on a non-finite a. */
static double maxrel(const float *a, const double *r, size_t n, double floor_) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs(a[i] - r[i]) / (fabs(r[i]) + floor_);
        e = d > e ? d : e;
    }
    return e;
}

/* e = max(e, d), infinite once got is not finite */
static void worse(double *e, float got, double d) {
    if (!isfinite(got) || !(d <= *e)) *e = isfinite(got) && isfinite(d) ? d : INFINITY;
}

/* ---- double references ------------------------------------------------------ */

static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double lse_d(const double *l, int E) {
    double m = l[0], s = 0;
    for (int e = 1; e < E; e++) m = l[e] > m ? l[e] : m;
    for (int e = 0; e < E; e++) s += exp(l[e] - m);
    return m + log(s);
}
static void softmax_d(double *p, const double *l, int E) {
    double z = lse_d(l, E);
    for (int e = 0; e < E; e++) p[e] = exp(l[e] - z);
}
/* the K largest of v, descending, ties to the lower index: expert e's rank is the
 * number of experts that beat it */
static void select_d(int32_t *idx, const double *v, int E, int K) {
    for (int e = 0; e < E; e++) {
        int r = 0;
        for (int f = 0; f < E; f++) r += v[f] > v[e] || (v[f] == v[e] && f < e);
        if (r < K) idx[r] = e;
    }
}
/* Routing weights of one token for a given selection. */
static void weights_d(double *w, const int32_t *idx, const double *l, int E, int K, int score,
                      int pre, double scale) {
    double t[64], q[64];
    if (score == LT_MOE_SIGMOID) {
        double S = 0;
        for (int k = 0; k < K; k++) S += (w[k] = sigm(l[idx[k]]));
        if (K > 1)
            for (int k = 0; k < K; k++) w[k] /= S + 1e-20;
    } else if (pre) {
        softmax_d(t, l, E);
        for (int k = 0; k < K; k++) w[k] = t[idx[k]];
    } else {
        for (int k = 0; k < K; k++) t[k] = l[idx[k]];
        softmax_d(q, t, K);
        for (int k = 0; k < K; k++) w[k] = q[k];
    }
    for (int k = 0; k < K; k++) w[k] *= scale;
}
static void topk_d(int32_t *idx, double *w, const double *l, const float *bias, int E, int K,
                   int score, int pre, double scale) {
    double v[64];
    for (int e = 0; e < E; e++)
        v[e] = score == LT_MOE_SIGMOID ? sigm(l[e]) + (bias ? bias[e] : 0) : l[e];
    select_d(idx, v, E, K);
    weights_d(w, idx, l, E, K, score, pre, scale);
}
/* Megatron-Core's group_limited_topk for one token, from its description: the
 * selecting scores v (sigmoid + bias, the softmax probabilities, or the logits),
 * each of the G groups of E / G experts scored by the sum of its top K / GK, the
 * GK best groups kept, the other experts masked to -inf, then the top K of v. */
static void group_topk_d(int32_t *idx, double *w, const double *l, const float *bias, int E,
                         int K, int score, int pre, double scale, int G, int GK) {
    double v[64], gs[64], masked[64];
    int32_t t[64], gi[64];
    for (int e = 0; e < E; e++)
        v[e] = score == LT_MOE_SIGMOID ? sigm(l[e]) + (bias ? bias[e] : 0) : l[e];
    if (score == LT_MOE_SOFTMAX && pre) softmax_d(v, l, E);
    const int gsize = E / G, top = K / GK;
    for (int g = 0; g < G; g++) {
        select_d(t, v + g * gsize, gsize, top);
        gs[g] = 0;
        for (int j = 0; j < top; j++) gs[g] += v[g * gsize + t[j]];
    }
    select_d(gi, gs, G, GK);
    for (int e = 0; e < E; e++) masked[e] = -INFINITY;
    for (int j = 0; j < GK; j++)
        for (int e = gi[j] * gsize; e < (gi[j] + 1) * gsize; e++) masked[e] = v[e];
    select_d(idx, masked, E, K);
    weights_d(w, idx, l, E, K, score, pre, scale);
}

static void aux_scores_d(double *a, const double *l, int E, int score) {
    if (score == LT_MOE_SOFTMAX) {
        softmax_d(a, l, E);
        return;
    }
    double S = 0;
    for (int e = 0; e < E; e++) S += (a[e] = sigm(l[e]));
    for (int e = 0; e < E; e++) a[e] /= S + 1e-20;
}

/* ---- router GEMMs ------------------------------------------------------------- */

/* The router GEMMs against double sums, with and without the router bias (logits
 * + bias, its gradient the column sums of dlogits, accumulated). */
static void test_router(void) {
    const int shapes[][3] = {{1, 5, 2}, {13, 24, 8}, {37, 9, 3}};
    for (int t = 0; t < 6; t++) {
        const int s = t % 3, with_bias = t >= 3;
        int N = shapes[s][0], C = shapes[s][1], E = shapes[s][2];
        float *x = fbuf((size_t)N * C, 1), *w = fbuf((size_t)E * C, 0.5f);
        float *lg = nanbuf((size_t)N * E), *dl = fbuf((size_t)N * E, 1);
        float *dx = fbuf((size_t)N * C, 1), *dw = fbuf((size_t)E * C, 1);
        float *b = fbuf((size_t)E, 1), *db = fbuf((size_t)E, 1), *db0 = lt_malloc((size_t)E * 4);
        float *dx0 = lt_malloc((size_t)N * C * 4), *dw0 = lt_malloc((size_t)E * C * 4);
        memcpy(dx0, dx, (size_t)N * C * 4), memcpy(dw0, dw, (size_t)E * C * 4);
        memcpy(db0, db, (size_t)E * 4);
        g_be->ops->moe_router_fwd(g_be, lg, x, w, with_bias ? b : NULL, N, C, E);
        g_be->ops->moe_router_bwd(g_be, dx, dw, with_bias ? db : NULL, dl, x, w, N, C, E);
        double *rl = lt_calloc((size_t)N * E * 8), *rdx = lt_calloc((size_t)N * C * 8);
        double *rdw = lt_calloc((size_t)E * C * 8), *rdb = lt_calloc((size_t)E * 8);
        for (int i = 0; i < N; i++)
            for (int e = 0; e < E; e++) {
                if (with_bias) rl[i * E + e] = b[e];
                rdb[e] += dl[i * E + e];
                for (int c = 0; c < C; c++) {
                    rl[i * E + e] += (double)x[i * C + c] * w[e * C + c];
                    rdx[i * C + c] += (double)dl[i * E + e] * w[e * C + c];
                    rdw[e * C + c] += (double)dl[i * E + e] * x[i * C + c];
                }
            }
        for (size_t j = 0; j < (size_t)N * C; j++) rdx[j] += dx0[j];
        for (size_t j = 0; j < (size_t)E * C; j++) rdw[j] += dw0[j];
        for (int e = 0; e < E; e++) rdb[e] = with_bias ? rdb[e] + db0[e] : db0[e];
        CHECK(maxrel(lg, rl, (size_t)N * E, 0.1) < 1e-5, "logits, case %d", t);
        CHECK(maxrel(dx, rdx, (size_t)N * C, 0.1) < 1e-5, "dx (accumulated), case %d", t);
        CHECK(maxrel(dw, rdw, (size_t)E * C, 0.1) < 1e-5, "dw (accumulated), case %d", t);
        CHECK(maxrel(db, rdb, (size_t)E, 0.1) < 1e-5, "dbias (accumulated), case %d", t);
        /* NULL outputs are skipped */
        memcpy(dw0, dw, (size_t)E * C * 4);
        g_be->ops->moe_router_bwd(g_be, NULL, dw, NULL, dl, x, w, N, C, E);
        g_be->ops->moe_router_bwd(g_be, dx, NULL, NULL, dl, x, w, N, C, E);
        CHECK(maxrel(dw, rdw, (size_t)E * C, 0.1) > 1e-3, "dw accumulated a second time");
        CHECK(maxrel(db, rdb, (size_t)E, 0.1) < 1e-5, "dbias touched with NULL, case %d", t);
        free(x), free(w), free(lg), free(dl), free(dx), free(dw), free(dx0), free(dw0);
        free(b), free(db), free(db0);
        free(rl), free(rdx), free(rdw), free(rdb);
    }
}

/* ---- top-k --------------------------------------------------------------------- */

typedef struct {
    int N, E, K, score, pre, ties, bias;
    float scale;
} TopkCase;

static const TopkCase k_topk[] = {
    {1, 1, 1, LT_MOE_SOFTMAX, 0, 0, 0, 0.0f},  {23, 8, 2, LT_MOE_SOFTMAX, 0, 0, 0, 0.0f},
    {17, 8, 2, LT_MOE_SOFTMAX, 1, 0, 0, 0.0f}, {9, 5, 3, LT_MOE_SOFTMAX, 0, 1, 0, 2.5f},
    {9, 5, 3, LT_MOE_SOFTMAX, 1, 1, 0, 1.0f},  {11, 4, 4, LT_MOE_SOFTMAX, 0, 0, 0, 1.0f},
    {11, 4, 4, LT_MOE_SOFTMAX, 1, 0, 0, 0.5f}, {37, 8, 3, LT_MOE_SIGMOID, 0, 0, 1, 2.0f},
    {19, 6, 1, LT_MOE_SIGMOID, 0, 0, 1, 0.0f}, {13, 6, 2, LT_MOE_SIGMOID, 0, 1, 0, 1.0f},
    {8, 3, 3, LT_MOE_SIGMOID, 0, 0, 0, 1.0f},  {31, 7, 1, LT_MOE_SOFTMAX, 0, 0, 0, 1.5f},
};

/* Logits of a case: Gaussian, or drawn from {-1, 0, 1} (many ties). */
static float *case_logits(const TopkCase *c) {
    float *l = fbuf((size_t)c->N * c->E, 1.5f);
    if (c->ties)
        for (size_t j = 0; j < (size_t)c->N * c->E; j++) l[j] = (float)(irand(3) - 1);
    return l;
}

static void test_topk(void) {
    for (size_t t = 0; t < sizeof k_topk / sizeof *k_topk; t++) {
        const TopkCase *c = &k_topk[t];
        int N = c->N, E = c->E, K = c->K;
        float *l = case_logits(c), *bias = c->bias ? fbuf(E, 0.4f) : NULL;
        float *w = nanbuf((size_t)N * K);
        int32_t *idx = ibuf((size_t)N * K, -7), ridx[64];
        g_be->ops->moe_topk(g_be, idx, w, l, bias, N, E, K, c->score, c->pre, c->scale, 0, 0);
        int bad_idx = 0, changed = 0;
        double werr = 0, rw[64], dl[64];
        for (int i = 0; i < N; i++) {
            for (int e = 0; e < E; e++) dl[e] = l[i * E + e];
            topk_d(ridx, rw, dl, bias, E, K, c->score, c->pre, c->scale != 0 ? c->scale : 1);
            for (int k = 0; k < K; k++) {
                bad_idx += idx[i * K + k] != ridx[k];
                worse(&werr, w[i * K + k], fabs(w[i * K + k] - rw[k]) / (fabs(rw[k]) + 1e-3));
            }
            if (bias) { /* the selection without the bias */
                int32_t nb[64];
                double v[64];
                for (int e = 0; e < E; e++) v[e] = sigm(dl[e]);
                select_d(nb, v, E, K);
                for (int k = 0; k < K; k++) changed += nb[k] != ridx[k];
            }
        }
        CHECK(bad_idx == 0, "case %zu: %d indices differ from the reference", t, bad_idx);
        CHECK(werr < 1e-5, "case %zu: weights off by %g", t, werr);
        if (bias) CHECK(changed > 0, "case %zu: the bias never changed a selection", t);
        if (c->ties) /* ties really occur and go to the lower index: check token 0 */
            for (int k = 1; k < K; k++) {
                int32_t a = idx[k - 1], b = idx[k];
                float va = l[a], vb = l[b];
                CHECK(va > vb || (va == vb && a < b), "case %zu: order %d,%d", t, a, b);
            }
        free(l), free(bias), free(w), free(idx);
    }
}

/* Group-limited routing (model.moe_router_num_groups / group_topk) against
 * group_topk_d: the same experts and weights, every token's experts within its
 * group_topk groups, and the groups changing some token's choice (the test is not
 * vacuous: with K <= group_topk a group scores by its best expert, and the groups
 * change nothing), in every score mode; K = all the chosen groups' experts too. */
static void test_topk_groups(void) {
    static const struct { int N, E, K, score, pre, bias, G, GK; float scale; } cs[] = {
        {41, 8, 4, LT_MOE_SOFTMAX, 0, 0, 4, 2, 0.0f},  {41, 16, 4, LT_MOE_SIGMOID, 0, 1, 4, 2, 2.5f},
        {41, 12, 3, LT_MOE_SOFTMAX, 1, 0, 3, 1, 0.0f}, {41, 64, 8, LT_MOE_SIGMOID, 0, 1, 8, 4, 2.5f},
        {41, 12, 6, LT_MOE_SOFTMAX, 0, 0, 6, 3, 1.0f},
    };
    for (size_t t = 0; t < sizeof cs / sizeof *cs; t++) {
        const int N = cs[t].N, E = cs[t].E, K = cs[t].K, G = cs[t].G, GK = cs[t].GK;
        float *l = fbuf((size_t)N * E, 1.5f), *bias = cs[t].bias ? fbuf(E, 0.4f) : NULL;
        float *w = nanbuf((size_t)N * K), *w0 = nanbuf((size_t)N * K);
        int32_t *idx = ibuf((size_t)N * K, -7), *idx0 = ibuf((size_t)N * K, -7), ridx[64];
        g_be->ops->moe_topk(g_be, idx, w, l, bias, N, E, K, cs[t].score, cs[t].pre, cs[t].scale, G,
                            GK);
        g_be->ops->moe_topk(g_be, idx0, w0, l, bias, N, E, K, cs[t].score, cs[t].pre, cs[t].scale, 0,
                            0);
        int bad_idx = 0, changed = 0, spread = 0;
        double werr = 0, rw[64], dl[64];
        for (int i = 0; i < N; i++) {
            for (int e = 0; e < E; e++) dl[e] = l[i * E + e];
            group_topk_d(ridx, rw, dl, bias, E, K, cs[t].score, cs[t].pre,
                         cs[t].scale != 0 ? cs[t].scale : 1, G, GK);
            uint64_t used = 0;
            for (int k = 0; k < K; k++) {
                bad_idx += idx[i * K + k] != ridx[k];
                changed += idx[i * K + k] != idx0[i * K + k];
                used |= 1ull << (idx[i * K + k] / (E / G));
                worse(&werr, w[i * K + k], fabs(w[i * K + k] - rw[k]) / (fabs(rw[k]) + 1e-3));
            }
            spread += __builtin_popcountll(used) > GK;
        }
        CHECK(bad_idx == 0, "groups case %zu: %d indices differ from the reference", t, bad_idx);
        CHECK(werr < 1e-5, "groups case %zu: weights off by %g", t, werr);
        CHECK(spread == 0, "groups case %zu: %d tokens use more than %d groups", t, spread, GK);
        CHECK(changed > 0, "groups case %zu: the groups never changed a choice", t);
        free(l), free(bias), free(w), free(w0), free(idx), free(idx0);
    }
}

/* A tie between two equal logits goes to the lower expert, in every score mode. */
static void test_topk_tie(void) {
    float l[4] = {0.5f, 2.0f, 0.25f, 2.0f}, w[2];
    int32_t idx[2];
    for (int m = 0; m < 3; m++) {
        g_be->ops->moe_topk(g_be, idx, w, l, NULL, 1, 4, 2, m == 2, m == 1, 0, 0, 0);
        CHECK(idx[0] == 1 && idx[1] == 3, "mode %d: chose %d,%d (want 1,3)", m, idx[0], idx[1]);
        g_be->ops->moe_topk(g_be, idx, w, l, NULL, 1, 4, 1, m == 2, m == 1, 0, 0, 0);
        CHECK(idx[0] == 1, "mode %d, K=1: chose %d (want 1)", m, idx[0]);
    }
    /* a scale multiplies the weights: softmax over two equal logits gives 0.5 each */
    g_be->ops->moe_topk(g_be, idx, w, l, NULL, 1, 4, 2, LT_MOE_SOFTMAX, 0, 3.0f, 0, 0);
    CHECK(fabsf(w[0] - 1.5f) < 1e-6f && fabsf(w[1] - 1.5f) < 1e-6f, "scaled %g %g", w[0], w[1]);
}

/* Central differences of L = sum dw . w(logits) (selection fixed) in double against
 * the fp32 gradient g of one token; returns max |g - num| / (|num| + 0.01 max|g|). */
static double fd_token(const float *g, const double *l0, const double *dw, const int32_t *idx,
                       int E, int K, int score, int pre, double scale) {
    double l[64], w[64], gmax = 0, e = 0, h = 1e-5;
    for (int j = 0; j < E; j++) gmax = fabs(g[j]) > gmax ? fabs(g[j]) : gmax;
    for (int j = 0; j < E; j++) {
        double lp = 0, lm = 0;
        memcpy(l, l0, (size_t)E * 8);
        l[j] = l0[j] + h;
        weights_d(w, idx, l, E, K, score, pre, scale);
        for (int k = 0; k < K; k++) lp += dw[k] * w[k];
        l[j] = l0[j] - h;
        weights_d(w, idx, l, E, K, score, pre, scale);
        for (int k = 0; k < K; k++) lm += dw[k] * w[k];
        double num = (lp - lm) / (2 * h), d = fabs(g[j] - num) / (fabs(num) + 0.01 * gmax + 1e-12);
        if (!isfinite(g[j])) return INFINITY;
        e = d > e ? d : e;
    }
    return e;
}

static void test_topk_bwd(void) {
    for (size_t t = 0; t < sizeof k_topk / sizeof *k_topk; t++) {
        const TopkCase *c = &k_topk[t];
        int N = c->N, E = c->E, K = c->K;
        float *l = fbuf((size_t)N * E, 1.5f), *bias = c->bias ? fbuf(E, 0.4f) : NULL;
        float *w = nanbuf((size_t)N * K), *dw = fbuf((size_t)N * K, 1);
        float *g = nanbuf((size_t)N * E);
        int32_t *idx = ibuf((size_t)N * K, 0);
        g_be->ops->moe_topk(g_be, idx, w, l, bias, N, E, K, c->score, c->pre, c->scale, 0, 0);
        g_be->ops->moe_topk_bwd(g_be, g, dw, idx, l, N, E, K, c->score, c->pre, c->scale);
        double e = 0, dl[64], ddw[64];
        int outside = 0;
        for (int i = 0; i < N; i++) {
            for (int j = 0; j < E; j++) dl[j] = l[i * E + j];
            for (int k = 0; k < K; k++) ddw[k] = dw[i * K + k];
            double ei = fd_token(g + (size_t)i * E, dl, ddw, idx + (size_t)i * K, E, K, c->score,
                                 c->pre, c->scale != 0 ? c->scale : 1);
            e = ei > e ? ei : e;
            if (c->score == LT_MOE_SIGMOID || !c->pre) /* only the selected logits move */
                for (int j = 0; j < E; j++) {
                    int sel = 0;
                    for (int k = 0; k < K; k++) sel |= idx[i * K + k] == j;
                    outside += !sel && g[i * E + j] != 0.0f;
                }
        }
        CHECK(e < 1e-3, "case %zu: finite differences off by %g", t, e);
        CHECK(outside == 0, "case %zu: %d gradients outside the selection", t, outside);
        free(l), free(bias), free(w), free(dw), free(g), free(idx);
    }
}

/* ---- load balancing ------------------------------------------------------------ */

typedef struct {
    int N, E, K, score;
    long row0, group_len;
} AuxCase;

static const AuxCase k_aux[] = {
    {1, 2, 1, LT_MOE_SOFTMAX, 0, 1},    {24, 8, 2, LT_MOE_SOFTMAX, 0, 1000},
    {21, 6, 3, LT_MOE_SOFTMAX, 5, 8},   {37, 8, 2, LT_MOE_SIGMOID, 3, 10},
    {16, 4, 4, LT_MOE_SIGMOID, 0, 16},  {10, 5, 1, LT_MOE_SIGMOID, 7, 3},
};

/* groups touched by a case: those of rows row0 .. row0 + N - 1 (counted from 0) */
static int aux_groups(const AuxCase *c) { return (int)((c->row0 + c->N - 1) / c->group_len) + 1; }

static void test_aux_stats(void) {
    for (size_t t = 0; t < sizeof k_aux / sizeof *k_aux; t++) {
        const AuxCase *c = &k_aux[t];
        int N = c->N, E = c->E, K = c->K, G = aux_groups(c);
        float *l = fbuf((size_t)N * E, 1.2f), *cnt = fbuf((size_t)G * E, 1);
        float *ps = fbuf((size_t)G * E, 1);
        double z = 0.75, rz = 0.75, *rc = lt_calloc((size_t)G * E * 8);
        double *rp = lt_calloc((size_t)G * E * 8), a[64], dl[64];
        for (int j = 0; j < G * E; j++) cnt[j] = (float)irand(5), rc[j] = cnt[j], rp[j] = ps[j];
        g_be->ops->moe_aux_stats(g_be, cnt, ps, &z, l, N, E, K, c->score, c->row0, c->group_len);
        for (int i = 0; i < N; i++) {
            int32_t sel[64];
            long g = (c->row0 + i) / c->group_len;
            for (int e = 0; e < E; e++) dl[e] = l[i * E + e];
            aux_scores_d(a, dl, E, c->score);
            select_d(sel, a, E, K);
            for (int k = 0; k < K; k++) rc[g * E + sel[k]] += 1;
            for (int e = 0; e < E; e++) rp[g * E + e] += a[e];
            rz += lse_d(dl, E) * lse_d(dl, E);
        }
        CHECK(maxrel(cnt, rc, (size_t)G * E, 0) == 0, "case %zu: counts differ", t);
        CHECK(maxrel(ps, rp, (size_t)G * E, 0.1) < 1e-5, "case %zu: psum off", t);
        CHECK(fabs(z - rz) <= 1e-5 * fabs(rz), "case %zu: zsum %g vs %g", t, z, rz);
        /* NULL outputs are skipped */
        g_be->ops->moe_aux_stats(g_be, NULL, NULL, &z, l, N, E, K, c->score, c->row0,
                                 c->group_len);
        CHECK(maxrel(cnt, rc, (size_t)G * E, 0) == 0, "case %zu: counts moved", t);
        free(l), free(cnt), free(ps), free(rc), free(rp);
    }
}

/* aux_coef sum_g,e psum[g,e] counts[g,e] + z_coef sum_i lse_i^2 over the case's
 * tokens, in double */
static double aux_loss_d(const double *l, const float *cnt, const AuxCase *c, double ac,
                         double zc) {
    double L = 0, a[64];
    for (int i = 0; i < c->N; i++) {
        const double *li = l + (size_t)i * c->E;
        long g = (c->row0 + i) / c->group_len;
        aux_scores_d(a, li, c->E, c->score);
        for (int e = 0; e < c->E; e++) L += ac * a[e] * cnt[g * c->E + e];
        L += zc * lse_d(li, c->E) * lse_d(li, c->E);
    }
    return L;
}

static void test_aux_bwd(void) {
    const float coefs[][2] = {{0.01f, 0.0f}, {0.0f, 0.001f}, {0.3f, 0.2f}};
    for (size_t t = 0; t < sizeof k_aux / sizeof *k_aux; t++)
        for (int q = 0; q < 3; q++) {
            const AuxCase *c = &k_aux[t];
            int N = c->N, E = c->E, G = aux_groups(c);
            float ac = coefs[q][0], zc = coefs[q][1];
            float *l = fbuf((size_t)N * E, 1.2f), *g = fbuf((size_t)N * E, 0);
            float *cnt = lt_malloc((size_t)G * E * 4 + 4);
            for (int j = 0; j < G * E; j++) cnt[j] = (float)(irand(N + 1) + j % E);
            double *dl = lt_malloc((size_t)N * E * 8), *g0 = lt_malloc((size_t)N * E * 8);
            for (int j = 0; j < N * E; j++) dl[j] = l[j], g0[j] = g[j];
            g_be->ops->moe_aux_bwd(g_be, g, l, cnt, N, E, c->K, c->score, c->row0, c->group_len,
                                   ac, zc);
            double gmax = 0, e = 0, h = 1e-5;
            for (int j = 0; j < N * E; j++)
                gmax = fabs(g[j] - g0[j]) > gmax ? fabs(g[j] - g0[j]) : gmax;
            for (int j = 0; j < N * E; j++) {
                dl[j] = l[j] + h;
                double lp = aux_loss_d(dl, cnt, c, ac, zc);
                dl[j] = l[j] - h;
                double lm = aux_loss_d(dl, cnt, c, ac, zc);
                dl[j] = l[j];
                double num = (lp - lm) / (2 * h), got = g[j] - g0[j];
                worse(&e, g[j], fabs(got - num) / (fabs(num) + 0.01 * gmax + 1e-7));
            }
            CHECK(e < 1e-3 && gmax > 0, "case %zu coefs %d: finite differences off by %g", t, q,
                  e);
            float before = g[0];
            for (int j = 0; j < N * E; j++) g0[j] = g[j];
            g_be->ops->moe_aux_bwd(g_be, g, l, cnt, N, E, c->K, c->score, c->row0, c->group_len,
                                   0, 0);
            CHECK(g[0] == before, "case %zu: zero coefficients changed dlogits", t);
            g_be->ops->moe_aux_bwd(g_be, g, l, cnt, N, E, c->K, c->score, c->row0, c->group_len,
                                   ac, zc);
            for (int j = 0; j < N * E; j++) g0[j] *= 2;
            CHECK(maxrel(g, g0, (size_t)N * E, 0.01 * gmax + 1e-7) < 1e-5,
                  "case %zu coefs %d: not accumulated", t, q);
            free(l), free(g), free(cnt), free(dl), free(g0);
        }
}

/* ---- dispatch ------------------------------------------------------------------ */

/* The contract's dispatch, written from its sentences: an assignment is kept when
 * fewer than `cap` assignments of its expert beat it (a larger w or an equal w of a
 * lower token; position: a lower token); rows in token order per expert. */
static void ref_dispatch(int32_t *pos, int32_t *src, int32_t *off, int32_t *dropped,
                         const int32_t *idx, const float *w, int N, int E, int K, int cap,
                         int policy, int pad) {
    int NK = N * K, nd = 0;
    off[0] = 0;
    for (int e = 0; e < E; e++) {
        int r = off[e];
        for (int a = 0; a < NK; a++) {
            if (idx[a] != e) continue;
            int beat = 0;
            for (int b = 0; b < NK; b++)
                if (idx[b] == e && b / K != a / K)
                    beat += policy == LT_MOE_DROP_POSITION
                                ? b / K < a / K
                                : w[b] > w[a] || (w[b] == w[a] && b / K < a / K);
            int keep = cap <= 0 || beat < cap;
            pos[a] = keep ? r : -1;
            if (keep) src[r++] = a / K;
            nd += !keep;
        }
        off[e + 1] = cap > 0 && pad ? off[e] + cap : r;
        for (; r < off[e + 1]; r++) src[r] = -1;
    }
    *dropped = nd;
}

typedef struct {
    int N, E, K, cap, policy, pad, wties;
} DispCase;

static const DispCase k_disp[] = {
    {37, 8, 2, 0, LT_MOE_DROP_PROBS, 0, 0},     {1, 1, 1, 0, LT_MOE_DROP_PROBS, 0, 0},
    {20, 4, 4, 0, LT_MOE_DROP_POSITION, 1, 0},  {30, 6, 2, 5, LT_MOE_DROP_PROBS, 0, 0},
    {30, 4, 2, 6, LT_MOE_DROP_PROBS, 0, 1},     {30, 6, 2, 5, LT_MOE_DROP_POSITION, 0, 0},
    {25, 5, 2, 8, LT_MOE_DROP_PROBS, 1, 1},     {25, 5, 3, 8, LT_MOE_DROP_POSITION, 1, 0},
    {10, 4, 2, 24, LT_MOE_DROP_PROBS, 1, 0},    {0, 4, 2, 0, LT_MOE_DROP_PROBS, 0, 0},
    {0, 4, 2, 3, LT_MOE_DROP_PROBS, 1, 0},      {12, 3, 1, 2, LT_MOE_DROP_POSITION, 0, 0},
};

/* A routing of N tokens that overloads expert 0: idx from moe_topk, w from it or
 * drawn from {0.25, 0.5, 0.75} (ties across tokens). */
static void make_routing(int32_t *idx, float *w, int N, int E, int K, int wties) {
    float *l = fbuf((size_t)N * E + 1, 1);
    for (int i = 0; i < N; i++) l[i * E] += 1.0f;
    g_be->ops->moe_topk(g_be, idx, w, l, NULL, N, E, K, LT_MOE_SOFTMAX, 1, 0, 0, 0);
    if (wties)
        for (int j = 0; j < N * K; j++) w[j] = 0.25f * (float)(1 + irand(3));
    free(l);
}

static void test_dispatch(void) {
    for (size_t t = 0; t < sizeof k_disp / sizeof *k_disp; t++) {
        const DispCase *c = &k_disp[t];
        int N = c->N, E = c->E, K = c->K, NK = N * K;
        int Mmax = NK > E * c->cap ? NK : E * c->cap;
        int32_t *idx = ibuf(NK + 1, 0), *pos = ibuf(NK + 1, -9), *src = ibuf(Mmax + 1, -9);
        int32_t *off = ibuf(E + 1, -9), dropped = -9, *rpos = ibuf(NK + 1, -9);
        int32_t *rsrc = ibuf(Mmax + 1, -9), *roff = ibuf(E + 1, -9), rdropped;
        float *w = nanbuf(NK + 1);
        make_routing(idx, w, N, E, K, c->wties);
        g_be->ops->moe_dispatch(g_be, pos, src, off, &dropped, idx, w, N, E, K, c->cap, c->policy,
                                c->pad);
        ref_dispatch(rpos, rsrc, roff, &rdropped, idx, w, N, E, K, c->cap, c->policy, c->pad);
        int M = roff[E];
        CHECK(memcmp(off, roff, (E + 1) * 4) == 0, "case %zu: offsets differ", t);
        CHECK(memcmp(pos, rpos, NK * 4) == 0, "case %zu: pos differs", t);
        CHECK(M <= Mmax && memcmp(src, rsrc, M * 4) == 0, "case %zu: src differs", t);
        CHECK(dropped == rdropped, "case %zu: dropped %d, want %d", t, dropped, rdropped);
        if (c->cap <= 0) CHECK(dropped == 0 && M == NK, "case %zu: dropless dropped", t);
        if (c->cap > 0 && c->pad) CHECK(M == E * c->cap, "case %zu: padded M = %d", t, M);
        int kept = 0;
        for (int a = 0; a < NK; a++) kept += pos[a] >= 0 && src[pos[a]] == a / K;
        CHECK(kept + dropped == NK, "case %zu: %d kept + %d dropped != %d", t, kept, dropped, NK);
        if (c->cap > 0 && NK > 0 && E * c->cap < NK) CHECK(dropped > 0, "case %zu: none dropped", t);
        free(idx), free(pos), free(src), free(off), free(rpos), free(rsrc), free(roff), free(w);
    }
}

/* Hand-made capacity decisions: expert 0 gets tokens 0..3 with w 0.1, 0.9, 0.5, 0.9. */
static void test_dispatch_policies(void) {
    int32_t idx[4] = {0, 0, 0, 0}, pos[4], src[8], off[3], dropped;
    float w[4] = {0.1f, 0.9f, 0.5f, 0.9f};
    g_be->ops->moe_dispatch(g_be, pos, src, off, &dropped, idx, w, 4, 2, 1, 2, LT_MOE_DROP_PROBS,
                            0);
    CHECK(pos[0] == -1 && pos[1] == 0 && pos[2] == -1 && pos[3] == 1 && dropped == 2,
          "probs: pos %d %d %d %d", pos[0], pos[1], pos[2], pos[3]);
    CHECK(off[1] == 2 && off[2] == 2 && src[0] == 1 && src[1] == 3, "probs: rows");
    g_be->ops->moe_dispatch(g_be, pos, src, off, &dropped, idx, w, 4, 2, 1, 3,
                            LT_MOE_DROP_POSITION, 1);
    CHECK(pos[0] == 0 && pos[1] == 1 && pos[2] == 2 && pos[3] == -1 && dropped == 1,
          "position: pos %d %d %d %d", pos[0], pos[1], pos[2], pos[3]);
    CHECK(off[1] == 3 && off[2] == 6 && src[3] == -1 && src[5] == -1, "position, padded rows");
}

/* ---- permute / unpermute -------------------------------------------------------- */

typedef struct {
    int N, E, K, C, M;
    int32_t *idx, *pos, *src, off[16], dropped;
    float *w, *x, *y, *dout;
} PermFix;

/* A routing with drops and padding: 19 tokens x 2 of 4 experts, capacity 6. */
static void perm_fix(PermFix *f, int bf16) {
    f->N = 19, f->E = 4, f->K = 2, f->C = 7;
    int NK = f->N * f->K, cap = 6;
    f->idx = ibuf(NK, 0), f->pos = ibuf(NK, 0), f->src = ibuf(f->E * cap, 0);
    f->w = nanbuf(NK);
    for (int i = 0; i < f->N; i++) { /* loads 19, 4, 10, 5: drops and padding */
        f->idx[i * 2] = 0, f->idx[i * 2 + 1] = i < 4 ? 1 : i < 14 ? 2 : 3;
        f->w[i * 2] = (float)lt_uniform_at(2027, 5, g_seq++), f->w[i * 2 + 1] = 1 - f->w[i * 2];
    }
    g_be->ops->moe_dispatch(g_be, f->pos, f->src, f->off, &f->dropped, f->idx, f->w, f->N, f->E,
                            f->K, cap, LT_MOE_DROP_PROBS, 1);
    f->M = f->off[f->E];
    f->x = fbuf((size_t)f->N * f->C, 1), f->y = fbuf((size_t)f->M * f->C, 1);
    f->dout = fbuf((size_t)f->N * f->C, 1);
    if (bf16)
        for (int j = 0; j < f->N * f->C; j++) f->x[j] = lt_bf16_round(f->x[j]);
}
static void perm_free(PermFix *f) {
    free(f->idx), free(f->pos), free(f->src), free(f->w), free(f->x), free(f->y), free(f->dout);
}

static void test_permute(void) {
    PermFix f;
    perm_fix(&f, 0);
    int N = f.N, K = f.K, C = f.C, M = f.M, pad = 0;
    CHECK(f.dropped > 0, "the fixture drops nothing");
    float *xp = nanbuf((size_t)M * C), *out = nanbuf((size_t)N * C), *ones = lt_malloc(N * K * 4);
    for (int j = 0; j < N * K; j++) ones[j] = 1.0f;
    g_be->ops->moe_permute(g_be, xp, f.x, f.src, M, C);
    for (int r = 0; r < M; r++) {
        pad += f.src[r] < 0;
        for (int c = 0; c < C; c++) {
            float want = f.src[r] < 0 ? 0.0f : f.x[f.src[r] * C + c];
            CHECK(xp[r * C + c] == want, "permuted row %d col %d", r, c);
        }
    }
    CHECK(pad > 0, "the fixture has no padding rows");
    /* round trip with unit weights: each token times its kept assignments */
    g_be->ops->moe_unpermute(g_be, out, xp, f.pos, ones, N, K, C);
    for (int i = 0; i < N; i++) {
        int n = 0;
        for (int k = 0; k < K; k++) n += f.pos[i * K + k] >= 0;
        for (int c = 0; c < C; c++)
            CHECK(out[i * C + c] == (float)n * f.x[i * C + c], "round trip token %d", i);
    }
    /* weighted unpermute of expert outputs y */
    double *ref = lt_calloc((size_t)N * C * 8);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++)
            for (int c = 0; c < C && f.pos[i * K + k] >= 0; c++)
                ref[i * C + c] += (double)f.w[i * K + k] * f.y[f.pos[i * K + k] * C + c];
    g_be->ops->moe_unpermute(g_be, out, f.y, f.pos, f.w, N, K, C);
    CHECK(maxrel(out, ref, (size_t)N * C, 0.1) < 1e-5, "unpermute");
    free(xp), free(out), free(ones), free(ref);
    perm_free(&f);
}

static void test_permute_bwd(void) {
    PermFix f;
    perm_fix(&f, 0);
    int N = f.N, K = f.K, C = f.C, M = f.M;
    float *dx = fbuf((size_t)N * C, 1), *dy = nanbuf((size_t)M * C), *dw = nanbuf(N * K);
    double *rdx = lt_calloc((size_t)N * C * 8), *rdy = lt_calloc((size_t)M * C * 8);
    double *rdw = lt_calloc((size_t)N * K * 8);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            rdx[i * C + c] = dx[i * C + c];
            for (int k = 0; k < K; k++) {
                int r = f.pos[i * K + k];
                if (r < 0) continue;
                rdx[i * C + c] += f.y[r * C + c]; /* y as dxp */
                rdy[r * C + c] = (double)f.w[i * K + k] * f.dout[i * C + c];
                rdw[i * K + k] += (double)f.dout[i * C + c] * f.y[r * C + c];
            }
        }
    g_be->ops->moe_permute_bwd(g_be, dx, f.y, f.pos, N, K, C);
    g_be->ops->moe_unpermute_bwd(g_be, dy, dw, f.dout, f.y, f.pos, f.w, N, K, C, M);
    CHECK(maxrel(dx, rdx, (size_t)N * C, 0.1) < 1e-5, "permute_bwd (accumulated)");
    CHECK(maxrel(dy, rdy, (size_t)M * C, 0.1) < 1e-6, "unpermute_bwd dy (padding rows zero)");
    CHECK(maxrel(dw, rdw, (size_t)N * K, 0.1) < 1e-5, "unpermute_bwd dw (0 when dropped)");
    free(dx), free(dy), free(dw), free(rdx), free(rdy), free(rdw);
    perm_free(&f);
}

/* The shared expert's gate: forward (out += sigmoid(logit) y, the logit replaced by the
 * gate) and backward in place (y -> s dout, s -> s (1 - s) dot(dout, y)) against
 * float64, in fp32 and bf16 (one rounding of each stored value) */
static void test_gate(void) {
    const int R = 13, C = 37;
    for (int bf = 0; bf < 2; bf++) {
        LtBackend *be = bf ? g_bf : g_be;
        const double tol = bf ? 1e-2 : 1e-5;
        float *out = fbuf((size_t)R * C, 1), *y = fbuf((size_t)R * C, 1), *s = fbuf(R, 2);
        float *dout = fbuf((size_t)R * C, 1);
        double *rout = lt_calloc((size_t)R * C * 8), *rs = lt_calloc((size_t)R * 8);
        double *rdy = lt_calloc((size_t)R * C * 8), *rdl = lt_calloc((size_t)R * 8);
        for (int i = 0; i < R; i++) {
            const double g = 1.0 / (1.0 + exp(-(double)s[i]));
            double dot = 0;
            rs[i] = g;
            for (int c = 0; c < C; c++) {
                rout[i * C + c] = out[i * C + c] + g * y[i * C + c];
                rdy[i * C + c] = g * dout[i * C + c];
                dot += (double)dout[i * C + c] * y[i * C + c];
            }
            rdl[i] = dot * g * (1 - g);
        }
        be->ops->moe_gate_fwd(be, out, y, s, R, C);
        CHECK(maxrel(out, rout, (size_t)R * C, 0.1) < tol, "gate forward out (bf16 %d)", bf);
        CHECK(maxrel(s, rs, R, 0.1) < 1e-6, "gate forward s (bf16 %d)", bf);
        be->ops->moe_gate_bwd(be, y, s, dout, R, C);
        CHECK(maxrel(y, rdy, (size_t)R * C, 0.1) < tol, "gate backward dy (bf16 %d)", bf);
        CHECK(maxrel(s, rdl, R, 0.1) < 1e-5, "gate backward dlogit (bf16 %d)", bf);
        be->ops->moe_gate_fwd(be, out, y, s, 0, C); /* no rows: nothing */
        be->ops->moe_gate_bwd(be, y, s, dout, 0, C);
        free(out), free(y), free(s), free(dout), free(rout), free(rs), free(rdy), free(rdl);
    }
}

/* ---- empty inputs, bf16, threads ------------------------------------------------ */

static void test_empty(void) {
    float f[8] = {0}, l[8] = {0};
    int32_t i32[8] = {0}, off[5], dropped = -1, src[12];
    double z = 1.5;
    const LtBackendOps *o = g_be->ops;
    o->moe_router_fwd(g_be, f, f, f, f, 0, 4, 2);
    o->moe_router_bwd(g_be, f, f, f, f, f, f, 0, 4, 2);
    o->moe_topk(g_be, i32, f, l, NULL, 0, 4, 2, LT_MOE_SOFTMAX, 0, 1, 0, 0);
    o->moe_topk_bwd(g_be, f, f, i32, l, 0, 4, 2, LT_MOE_SIGMOID, 0, 1);
    o->moe_aux_stats(g_be, f, f, &z, l, 0, 4, 2, LT_MOE_SOFTMAX, 0, 1);
    o->moe_aux_bwd(g_be, f, l, f, 0, 4, 2, LT_MOE_SOFTMAX, 0, 1, 1, 1);
    o->moe_permute(g_be, f, f, src, 0, 4);
    o->moe_permute_bwd(g_be, f, f, i32, 0, 2, 4);
    o->moe_unpermute(g_be, f, f, i32, f, 0, 2, 4);
    o->moe_unpermute_bwd(g_be, f, f, f, f, i32, f, 0, 2, 4, 0);
    const int none[3] = {1, 1, 1}; /* two empty groups */
    const void *w2[2] = {f, f};
    float *g2[2] = {f, f};
    o->linear_group_fwd(g_be, f, f, f, w2, w2, none, 2, 2, 2);
    o->linear_group_bwd(g_be, f, g2, g2, f, f, w2, f, none, 2, 2, 2);
    o->linear_group_fwd(g_be, f, NULL, f, NULL, NULL, none, 0, 2, 2);
    CHECK(z == 1.5, "zsum moved");
    for (int j = 0; j < 8; j++) CHECK(f[j] == 0.0f, "buffer %d written", j);
    o->moe_dispatch(g_be, i32, src, off, &dropped, i32, f, 0, 4, 2, 3, LT_MOE_DROP_PROBS, 1);
    CHECK(dropped == 0 && off[0] == 0 && off[4] == 12 && src[0] == -1 && src[11] == -1,
          "empty padded dispatch: dropped %d off %d", dropped, off[4]);
}

/* ---- grouped linears ------------------------------------------------------------ */

/* GeLU (tanh approximation) and its derivative */
static double gelu_d(double x) {
    return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double gelu_grad_d(double x) {
    const double k = 0.7978845608028654, t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

/* The groups of the grouped-linear tests: rows 0..1 in none, an empty group, uneven
 * sizes, the last group ending before the buffer does. */
enum { LG_G = 4, LG_ROWS = 16, LG_C = 5, LG_OC = 7 };
static const int lg_off[LG_G + 1] = {2, 5, 5, 12, 14};

typedef struct {
    float *x, *dout, *gpre, *w[LG_G], *b[LG_G], *dw[LG_G], *db[LG_G];
} LgFix;

static void lg_fix(LgFix *f, int bf) {
    const size_t nx = (size_t)LG_ROWS * LG_C, ny = (size_t)LG_ROWS * LG_OC;
    f->x = fbuf(nx, 1), f->dout = fbuf(ny, 1), f->gpre = fbuf(nx, 2);
    for (int g = 0; g < LG_G; g++) {
        f->w[g] = fbuf((size_t)LG_OC * LG_C, 0.5f), f->b[g] = fbuf(LG_OC, 0.5f);
        f->dw[g] = fbuf((size_t)LG_OC * LG_C, 1), f->db[g] = fbuf(LG_OC, 1);
    }
    if (!bf) return;
    float *all[] = {f->x, f->dout, f->gpre};
    const size_t n[] = {nx, ny, nx};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n[k]; i++) all[k][i] = lt_bf16_round(all[k][i]);
    for (int g = 0; g < LG_G; g++)
        for (int i = 0; i < LG_OC * LG_C; i++) f->w[g][i] = lt_bf16_round(f->w[g][i]);
}
static void lg_free(LgFix *f) {
    free(f->x), free(f->dout), free(f->gpre);
    for (int g = 0; g < LG_G; g++) free(f->w[g]), free(f->b[g]), free(f->dw[g]), free(f->db[g]);
}

/* Forward (bias on all groups but the second, with and without GeLU) and backward
 * (dgelu through gelu_pre, dw +=, dbias +=) against double references; rows outside
 * the groups untouched. */
static void test_linear_group(void) {
    LgFix f;
    lg_fix(&f, 0);
    const int G = LG_G, R = LG_ROWS, C = LG_C, OC = LG_OC;
    const void *w[LG_G], *b[LG_G];
    float *dw[LG_G], *db[LG_G];
    for (int g = 0; g < G; g++) {
        w[g] = f.w[g], b[g] = g == 1 ? NULL : f.b[g];
        dw[g] = fbuf((size_t)OC * C, 0), db[g] = fbuf(OC, 0);
    }
    for (int gelu = 0; gelu < 2; gelu++) {
        float *out = nanbuf((size_t)R * OC), *pre = nanbuf((size_t)R * OC),
              *dx = nanbuf((size_t)R * C);
        for (int g = 0; g < G; g++) {
            memcpy(dw[g], f.dw[g], sizeof(float) * OC * C);
            memcpy(db[g], f.db[g], sizeof(float) * OC);
        }
        g_be->ops->linear_group_fwd(g_be, out, gelu ? pre : NULL, f.x, w, b, lg_off, G, C, OC);
        g_be->ops->linear_group_bwd(g_be, dx, dw, db, f.dout, f.x, w, gelu ? f.gpre : NULL, lg_off,
                                    G, C, OC);
        double ef = 0, eb = 0, ew = 0;
        int outside = 0;
        for (int i = 0; i < R; i++) {
            int g = -1;
            for (int k = 0; k < G; k++)
                if (i >= lg_off[k] && i < lg_off[k + 1]) g = k;
            if (g < 0) {
                for (int o = 0; o < OC; o++)
                    outside += !isnan(out[i * OC + o]) || !isnan(pre[i * OC + o]);
                for (int c = 0; c < C; c++) outside += !isnan(dx[i * C + c]);
                continue;
            }
            for (int o = 0; o < OC; o++) {
                double y = b[g] ? f.b[g][o] : 0;
                for (int c = 0; c < C; c++) y += (double)f.x[i * C + c] * f.w[g][o * C + c];
                if (gelu) worse(&ef, pre[i * OC + o], fabs(pre[i * OC + o] - y) / (fabs(y) + 1e-3));
                const double z = gelu ? gelu_d(y) : y;
                worse(&ef, out[i * OC + o], fabs(out[i * OC + o] - z) / (fabs(z) + 1e-3));
            }
            for (int c = 0; c < C; c++) {
                double d = 0;
                for (int o = 0; o < OC; o++) d += (double)f.dout[i * OC + o] * f.w[g][o * C + c];
                if (gelu) d *= gelu_grad_d(f.gpre[i * C + c]);
                worse(&eb, dx[i * C + c], fabs(dx[i * C + c] - d) / (fabs(d) + 1e-3));
            }
        }
        for (int g = 0; g < G; g++)
            for (int o = 0; o < OC; o++) {
                double sb = f.db[g][o];
                for (int i = lg_off[g]; i < lg_off[g + 1]; i++) sb += f.dout[i * OC + o];
                worse(&ew, db[g][o], fabs(db[g][o] - sb) / (fabs(sb) + 1e-3));
                for (int c = 0; c < C; c++) {
                    double sw = f.dw[g][o * C + c];
                    for (int i = lg_off[g]; i < lg_off[g + 1]; i++)
                        sw += (double)f.dout[i * OC + o] * f.x[i * C + c];
                    worse(&ew, dw[g][o * C + c], fabs(dw[g][o * C + c] - sw) / (fabs(sw) + 1e-3));
                }
            }
        /* the empty group's gradients are untouched */
        CHECK(memcmp(dw[1], f.dw[1], sizeof(float) * OC * C) == 0 &&
                  memcmp(db[1], f.db[1], sizeof(float) * OC) == 0,
              "gelu %d: the empty group's gradients changed", gelu);
        CHECK(ef < 1e-5 && eb < 1e-5 && ew < 1e-5, "gelu %d: errors fwd %.2e dinp %.2e dw/db %.2e",
              gelu, ef, eb, ew);
        CHECK(outside == 0, "gelu %d: %d values outside the groups written", gelu, outside);
        free(out), free(pre), free(dx);
    }
    for (int g = 0; g < G; g++) free(dw[g]), free(db[g]);
    lg_free(&f);
}

/* The grouped linears give bit for bit what linear_fwd / linear_bwd give group by
 * group (the MoE layer's numbers before and after grouping), fp32 and bf16, with and
 * without biases and GeLU, and with dw, dbias or dinp left out. */
static void test_linear_group_loop(void) {
    const int G = LG_G, R = LG_ROWS, C = LG_C, OC = LG_OC;
    for (int bf = 0; bf < 2; bf++) {
        LtBackend *be = bf ? g_bf : g_be;
        LgFix f;
        lg_fix(&f, bf);
        for (int v = 0; v < 4; v++) {
            const int has_b = v & 1, gelu = v >> 1;
            const void *w[LG_G], *b[LG_G];
            float *out[2], *pre[2], *dx[2], *dw[2][LG_G], *db[2][LG_G];
            for (int k = 0; k < 2; k++) {
                out[k] = nanbuf((size_t)R * OC), pre[k] = nanbuf((size_t)R * OC);
                dx[k] = nanbuf((size_t)R * C);
                for (int g = 0; g < G; g++) {
                    w[g] = f.w[g], b[g] = f.b[g];
                    dw[k][g] = fbuf((size_t)OC * C, 0), db[k][g] = fbuf(OC, 0);
                    memcpy(dw[k][g], f.dw[g], sizeof(float) * OC * C);
                    memcpy(db[k][g], f.db[g], sizeof(float) * OC);
                }
            }
            float *pg = gelu ? pre[0] : NULL, *gp = gelu ? f.gpre : NULL;
            be->ops->linear_group_fwd(be, out[0], pg, f.x, w, has_b ? b : NULL, lg_off, G, C, OC);
            be->ops->linear_group_bwd(be, dx[0], dw[0], has_b ? db[0] : NULL, f.dout, f.x, w, gp,
                                      lg_off, G, C, OC);
            /* dinp, then dw alone (nothing for dbias): the same as all at once */
            be->ops->linear_group_bwd(be, NULL, dw[0], NULL, f.dout, f.x, w, NULL, lg_off, G, C,
                                      OC);
            for (int g = 0; g < G; g++) {
                const int r = lg_off[g], n = lg_off[g + 1] - r;
                if (n == 0) continue;
                be->ops->linear_fwd(be, out[1] + r * OC, gelu ? pre[1] + r * OC : NULL, f.x + r * C,
                                    w[g], has_b ? b[g] : NULL, n, C, OC);
                be->ops->linear_bwd(be, dx[1] + r * C, dw[1][g], has_b ? db[1][g] : NULL,
                                    f.dout + r * OC, f.x + r * C, w[g],
                                    gelu ? f.gpre + r * C : NULL, n, C, OC);
                be->ops->linear_bwd(be, NULL, dw[1][g], NULL, f.dout + r * OC, f.x + r * C, w[g],
                                    NULL, n, C, OC);
            }
            int same = memcmp(out[0], out[1], sizeof(float) * R * OC) == 0 &&
                       memcmp(pre[0], pre[1], sizeof(float) * R * OC) == 0 &&
                       memcmp(dx[0], dx[1], sizeof(float) * R * C) == 0;
            for (int g = 0; g < G; g++)
                same = same && memcmp(dw[0][g], dw[1][g], sizeof(float) * OC * C) == 0 &&
                       memcmp(db[0][g], db[1][g], sizeof(float) * OC) == 0;
            CHECK(same, "bf16 %d bias %d gelu %d: grouped differs from the loop", bf, has_b, gelu);
            for (int k = 0; k < 2; k++) {
                free(out[k]), free(pre[k]), free(dx[k]);
                for (int g = 0; g < G; g++) free(dw[k][g]), free(db[k][g]);
            }
        }
        lg_free(&f);
    }
}

/* bf16: every stored act output is the bf16 rounding of the fp32 backend's value. */
static void test_bf16(void) {
    PermFix f;
    perm_fix(&f, 1);
    int N = f.N, K = f.K, C = f.C, M = f.M, E = f.E, bad = 0;
    for (int j = 0; j < M * C; j++) f.y[j] = lt_bf16_round(f.y[j]);
    for (int j = 0; j < N * C; j++) f.dout[j] = lt_bf16_round(f.dout[j]);
    size_t nb = (size_t)(M > N ? M : N) * C;
    float *a32 = nanbuf(nb), *a16 = nanbuf(nb), *dw = nanbuf(N * K), *wr = fbuf((size_t)E * C, 1);
    float *dl = fbuf((size_t)N * E, 1);
    for (int j = 0; j < E * C; j++) wr[j] = lt_bf16_round(wr[j]);
    for (int op = 0; op < 4; op++) {
        for (int b = 0; b < 2; b++) {
            LtBackend *be = b ? g_bf : g_be;
            float *o = b ? a16 : a32;
            memcpy(o, f.dout, (size_t)N * C * 4);
            if (op == 0) be->ops->moe_unpermute(be, o, f.y, f.pos, f.w, N, K, C);
            if (op == 1) be->ops->moe_permute_bwd(be, o, f.y, f.pos, N, K, C);
            if (op == 2) be->ops->moe_unpermute_bwd(be, o, dw, f.dout, f.y, f.pos, f.w, N, K, C, M);
            if (op == 3) be->ops->moe_router_bwd(be, o, NULL, NULL, dl, f.x, wr, N, C, E);
        }
        size_t n = (size_t)(op == 2 ? M : N) * C;
        for (size_t j = 0; j < n; j++) bad += a16[j] != lt_bf16_round(a32[j]);
        CHECK(bad == 0, "op %d: %d values are not the bf16 rounding of fp32", op, bad);
        int rounded = 0;
        for (size_t j = 0; j < n; j++) rounded += a32[j] != a16[j];
        CHECK(rounded > 0, "op %d: bf16 rounded nothing", op);
    }
    free(a32), free(a16), free(dw), free(wr), free(dl);
    perm_free(&f);
}

/* One thread and the default count give bitwise the same routing and statistics. */
static void test_threads(void) {
    LtBackend *one = lt_backend_cpu_create(LT_F32, 1);
    int N = 37, E = 8, K = 3, G = 4;
    float *l = fbuf((size_t)N * E, 1), *dw = fbuf((size_t)N * K, 1), *out[2][4];
    int32_t *idx[2];
    double z[2] = {0, 0};
    for (int b = 0; b < 2; b++) {
        LtBackend *be = b ? one : g_be;
        idx[b] = ibuf(N * K, 0);
        out[b][0] = nanbuf(N * K), out[b][1] = nanbuf(N * E);
        out[b][2] = lt_calloc((size_t)G * E * 4), out[b][3] = lt_calloc((size_t)N * E * 4);
        be->ops->moe_topk(be, idx[b], out[b][0], l, NULL, N, E, K, LT_MOE_SIGMOID, 0, 1, 0, 0);
        be->ops->moe_topk_bwd(be, out[b][1], dw, idx[b], l, N, E, K, LT_MOE_SIGMOID, 0, 1);
        be->ops->moe_aux_stats(be, NULL, out[b][2], &z[b], l, N, E, K, LT_MOE_SOFTMAX, 0, 10);
        be->ops->moe_aux_bwd(be, out[b][3], l, out[b][2], N, E, K, LT_MOE_SOFTMAX, 0, 10, 0.1f,
                             0.01f);
    }
    CHECK(memcmp(idx[0], idx[1], N * K * 4) == 0, "idx");
    const size_t sz[4] = {N * K, N * E, G * E, N * E};
    for (int j = 0; j < 4; j++) CHECK(memcmp(out[0][j], out[1][j], sz[j] * 4) == 0, "output %d", j);
    CHECK(z[0] == z[1], "zsum");
    for (int b = 0; b < 2; b++) {
        free(idx[b]);
        for (int j = 0; j < 4; j++) free(out[b][j]);
    }
    free(l), free(dw);
    lt_backend_destroy(one);
}

int main(void) {
    g_be = lt_backend_cpu_create(LT_F32, 0);
    g_bf = lt_backend_cpu_create(LT_BF16, 0);
    RUN(test_router);
    RUN(test_topk);
    RUN(test_topk_tie);
    RUN(test_topk_groups);
    RUN(test_topk_bwd);
    RUN(test_aux_stats);
    RUN(test_aux_bwd);
    RUN(test_dispatch);
    RUN(test_dispatch_policies);
    RUN(test_permute);
    RUN(test_permute_bwd);
    RUN(test_linear_group);
    RUN(test_linear_group_loop);
    RUN(test_gate);
    RUN(test_empty);
    RUN(test_bf16);
    RUN(test_threads);
    lt_backend_destroy(g_be);
    lt_backend_destroy(g_bf);
    return test_summary();
}
