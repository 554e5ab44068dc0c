/* moe.c - the routed experts of an MoE layer (moe.h).
 *
 * Forward, on the R rows x of this rank:
 *   logits = x Wr^T (fp32); counts = the micro batch's aux top-k counts
 *   (summed over TP); idx, w = top-k routing; pos, src, offsets = the
 *   expert-major order (capacity drops); xp = x permuted; per expert e its
 *   rows offsets[e]..offsets[e+1]: y = FFN_e(xp); out = sum over k of w y.
 * Backward runs the same chain in reverse; the router's gradient gathers the
 * routing weights' gradient (through top-k's softmax or sigmoid) and the
 * load-balancing and z losses' gradients, scaled so that the step's objective
 * is the token loss plus each micro batch's aux and z losses times its share
 * of the step (Megatron-Core's 1 / (micro batches x data-parallel ranks)). */
#include "model/moe.h"

#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "config.h"

int lt_moe_backend_ok(const LtBackend *be) {
    const LtBackendOps *o = be->ops;
    return o->moe_router_fwd && o->moe_router_bwd && o->moe_topk && o->moe_topk_bwd &&
           o->moe_aux_stats && o->moe_aux_bwd && o->moe_dispatch && o->moe_permute &&
           o->moe_permute_bwd && o->moe_unpermute && o->moe_unpermute_bwd;
}

LtMoeShape lt_moe_shape(const LtMoeDims *d, int arch, int B, int T, int C, int R, long row0) {
    LtMoeShape s = {.R = R, .N = B * T, .T = T, .row0 = row0, .C = C, .E = d->experts,
                    .K = d->topk, .F = d->ffn, .llama = arch == LT_ARCH_LLAMA};
    s.groups = d->balance == LT_MOE_SEQ_AUX_LOSS ? B : 1;
    /* Megatron-Core's get_capacity over this rank's R K assignments */
    if (d->capacity > 0) s.capacity = (int)ceil((double)R * s.K / s.E * d->capacity);
    const long rk = (long)R * s.K, ec = (long)s.E * s.capacity;
    s.M = (int)(ec > rk ? ec : rk);
    return s;
}

static void *dalloc(LtBackend *be, size_t bytes, size_t *acc) {
    *acc += bytes;
    return be->ops->alloc(be, bytes ? bytes : 1);
}

void lt_moe_acts_alloc(LtBackend *be, const LtMoeShape *s, LtMoeActs *a, size_t *bytes) {
    const size_t R = (size_t)s->R, E = (size_t)s->E, K = (size_t)s->K, M = (size_t)s->M,
                 C = (size_t)s->C, F = (size_t)s->F, i4 = sizeof(int32_t);
    a->logits = dalloc(be, R * E * sizeof(float), bytes);
    a->idx = dalloc(be, R * K * i4, bytes);
    a->w = dalloc(be, R * K * sizeof(float), bytes);
    a->pos = dalloc(be, R * K * i4, bytes);
    a->src = dalloc(be, M * i4, bytes);
    a->offsets = dalloc(be, (E + 1) * i4, bytes);
    a->dropped = dalloc(be, i4, bytes);
    a->host_off = lt_calloc((E + 1) * i4);
    a->counts = dalloc(be, (size_t)s->groups * E * sizeof(float), bytes);
    a->psum = dalloc(be, (size_t)s->groups * E * sizeof(float), bytes);
    a->zsum = dalloc(be, sizeof(double), bytes);
    a->xp = dalloc(be, lt_act_bytes(be, M * C), bytes);
    a->hpre = dalloc(be, lt_act_bytes(be, M * F * (s->llama ? 2 : 1)), bytes);
    a->h = dalloc(be, lt_act_bytes(be, M * F), bytes);
    a->y = dalloc(be, lt_act_bytes(be, M * C), bytes);
    a->out = dalloc(be, lt_act_bytes(be, R * C), bytes);
}

void lt_moe_acts_free(LtBackend *be, LtMoeActs *a) {
    void *ps[] = {a->logits, a->idx, a->w, a->pos,  a->src, a->offsets, a->dropped, a->counts,
                  a->psum,   a->zsum, a->xp, a->hpre, a->h,   a->y,       a->out};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) be->ops->free(be, ps[i]);
    free(a->host_off);
}

void lt_moe_work_alloc(LtBackend *be, const LtMoeShape *s, LtMoeWork *w, size_t *bytes) {
    const size_t R = (size_t)s->R, M = (size_t)s->M, C = (size_t)s->C, F = (size_t)s->F;
    w->dy = dalloc(be, lt_act_bytes(be, M * C), bytes);
    w->dh = dalloc(be, lt_act_bytes(be, M * F), bytes);
    w->dhpre = s->llama ? dalloc(be, lt_act_bytes(be, M * 2 * F), bytes) : NULL;
    w->dxp = dalloc(be, lt_act_bytes(be, M * C), bytes);
    w->dw = dalloc(be, R * (size_t)s->K * sizeof(float), bytes);
    w->dlogits = dalloc(be, R * (size_t)s->E * sizeof(float), bytes);
}

void lt_moe_work_free(LtBackend *be, LtMoeWork *w) {
    void *ps[] = {w->dy, w->dh, w->dhpre, w->dxp, w->dw, w->dlogits};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) be->ops->free(be, ps[i]);
}

static void *rows(const LtBackend *be, const void *p, size_t row, size_t cols) {
    return (char *)p + lt_act_bytes(be, row * cols);
}

/* The load-balancing loss is on when it has a coefficient and a type. */
static int aux_on(const LtMoeDims *d) {
    return d->balance != LT_MOE_BALANCE_NONE && d->aux_coeff > 0.0f;
}
/* Tokens per load-balancing group: a sequence, or the whole micro batch. */
static long group_len(const LtMoeShape *s) { return s->groups > 1 ? s->T : s->N; }

/* The coefficients of the micro batch's aux and z losses as sums over its
 * tokens (Megatron-Core's switch loss E / (K Tg^2) sum psum counts per group
 * of Tg tokens, averaged over the groups; the z-loss's mean over the tokens),
 * times their weight in the step. */
static float aux_coef(const LtMoeCtx *cx, const LtMoeShape *s) {
    const LtMoeDims *d = cx->dims;
    const double tg = (double)group_len(s);
    return aux_on(d) ? (float)(cx->aux_weight * d->aux_coeff * s->E /
                               ((double)s->K * tg * tg * s->groups))
                     : 0.0f;
}
static float z_coef(const LtMoeCtx *cx, const LtMoeShape *s) {
    return cx->dims->z_coeff > 0.0f ? (float)(cx->aux_weight * cx->dims->z_coeff / s->N) : 0.0f;
}

/* The micro batch's load-balancing counts and score sums (summed over the
 * ranks that route its other rows, as one process would see them), the
 * z-loss's sum, and the losses' values added to acc. */
static void balance_stats(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s, LtMoeActs *a,
                          LtMoeStats *acc) {
    const LtBackendOps *o = be->ops;
    const LtMoeDims *d = cx->dims;
    const int aux = aux_on(d), z = d->z_coeff > 0.0f;
    if (!aux && !z) return;
    const size_t n = (size_t)s->groups * s->E;
    o->zero(be, a->counts, n * sizeof(float));
    o->zero(be, a->psum, n * sizeof(float));
    o->zero(be, a->zsum, sizeof(double));
    o->moe_aux_stats(be, a->counts, a->psum, a->zsum, a->logits, s->R, s->E, s->K, d->score,
                     s->row0, group_len(s));
    if (cx->tp) {
        lt_comm_all_reduce(cx->tp, a->counts, n, LT_COMM_F32, LT_COMM_SUM);
        lt_comm_all_reduce(cx->tp, a->psum, n, LT_COMM_F32, LT_COMM_SUM);
        lt_comm_all_reduce(cx->tp, a->zsum, 1, LT_COMM_F64, LT_COMM_SUM);
    }
    if (!acc) return;
    float *h = lt_malloc(2 * n * sizeof(float));
    double zs = 0.0, dot = 0.0;
    o->download(be, h, a->counts, n * sizeof(float));
    o->download(be, h + n, a->psum, n * sizeof(float));
    o->download(be, &zs, a->zsum, sizeof(double));
    for (size_t i = 0; i < n; i++) dot += (double)h[i] * h[n + i];
    free(h);
    acc->aux += aux ? aux_coef(cx, s) * dot : 0.0;
    acc->z += z ? z_coef(cx, s) * zs : 0.0;
}

void lt_moe_forward(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s,
                    const LtMoeWeights *wt, LtMoeActs *a, const void *x, LtMoeStats *acc) {
    const LtBackendOps *o = be->ops;
    const LtMoeDims *d = cx->dims;
    const int R = s->R, E = s->E, K = s->K, C = s->C, F = s->F;
    o->moe_router_fwd(be, a->logits, x, wt->router, R, C, E);
    balance_stats(be, cx, s, a, acc);
    o->moe_topk(be, a->idx, a->w, a->logits, NULL, R, E, K, d->score, d->pre_softmax,
                d->topk_scale);
    o->moe_dispatch(be, a->pos, a->src, a->offsets, a->dropped, a->idx, a->w, R, E, K,
                    s->capacity, d->drop_policy, d->pad);
    o->download(be, a->host_off, a->offsets, (size_t)(E + 1) * sizeof(int32_t));
    const int M = a->host_off[E];
    LT_CHECK(M >= 0 && M <= s->M);
    if (acc) {
        int32_t dropped = 0, most = 0;
        o->download(be, &dropped, a->dropped, sizeof dropped);
        for (int e = 0; e < E; e++)
            if (a->host_off[e + 1] - a->host_off[e] > most) most = a->host_off[e + 1] - a->host_off[e];
        acc->dropped += dropped;
        acc->load_max += most;
        acc->load_mean += (double)((long)R * K - dropped) / E;
        acc->forwards++;
    }
    o->moe_permute(be, a->xp, x, a->src, M, C);
    const int FI = s->llama ? 2 * F : F; /* rows of the first weight: gate | up, or fc */
    for (int e = 0; e < E; e++) {
        const int r = a->host_off[e], n = a->host_off[e + 1] - r;
        if (n == 0) continue;
        const LtExpertTensors *t = &wt->expert[e];
        void *hpre = rows(be, a->hpre, (size_t)r, (size_t)FI), *h = rows(be, a->h, (size_t)r, F);
        const void *xp = rows(be, a->xp, (size_t)r, C);
        if (s->llama) {
            o->linear_fwd(be, hpre, NULL, xp, t->w1, NULL, n, C, FI);
            o->swiglu_fwd(be, h, hpre, n, F);
        } else {
            o->linear_fwd(be, h, hpre, xp, t->w1, t->b1, n, C, F);
        }
        o->linear_fwd(be, rows(be, a->y, (size_t)r, C), NULL, h, t->w2, t->b2, n, F, C);
    }
    o->moe_unpermute(be, a->out, a->y, a->pos, a->w, R, K, C);
}

/* Backward of expert e's GEMM chain over its n rows from row r: dxp rows
 * from dy rows, its weight gradients accumulated. */
static void expert_backward(LtBackend *be, const LtMoeShape *s, const LtExpertTensors *t,
                            const LtMoeActs *a, LtMoeWork *w, int r, int n) {
    const LtBackendOps *o = be->ops;
    const int C = s->C, F = s->F, FI = s->llama ? 2 * F : F;
    const size_t rr = (size_t)r;
    void *dh = rows(be, w->dh, rr, F), *dxp = rows(be, w->dxp, rr, C);
    const void *dy = rows(be, w->dy, rr, C), *h = rows(be, a->h, rr, F),
               *hpre = rows(be, a->hpre, rr, FI), *xp = rows(be, a->xp, rr, C);
    if (s->llama) {
        void *dhpre = rows(be, w->dhpre, rr, FI);
        o->linear_bwd(be, dh, t->g2, NULL, dy, h, t->w2, NULL, n, F, C);
        o->swiglu_bwd(be, dhpre, hpre, dh, n, F);
        o->linear_bwd(be, dxp, t->g1, NULL, dhpre, xp, t->w1, NULL, n, C, FI);
    } else { /* dh comes back through GeLU: the gradient of hpre */
        o->linear_bwd(be, dh, t->g2, t->gb2, dy, h, t->w2, hpre, n, F, C);
        o->linear_bwd(be, dxp, t->g1, t->gb1, dh, xp, t->w1, NULL, n, C, F);
    }
}

void lt_moe_backward(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s,
                     const LtMoeWeights *wt, const LtMoeActs *a, LtMoeWork *w, const void *x,
                     const void *dout, void *dx) {
    const LtBackendOps *o = be->ops;
    const LtMoeDims *d = cx->dims;
    const int R = s->R, E = s->E, K = s->K, C = s->C, M = a->host_off[E];
    o->moe_unpermute_bwd(be, w->dy, w->dw, dout, a->y, a->pos, a->w, R, K, C, M);
    for (int e = 0; e < E; e++) {
        const int r = a->host_off[e], n = a->host_off[e + 1] - r;
        if (n > 0) expert_backward(be, s, &wt->expert[e], a, w, r, n);
    }
    o->moe_permute_bwd(be, dx, w->dxp, a->pos, R, K, C);
    o->moe_topk_bwd(be, w->dlogits, w->dw, a->idx, a->logits, R, E, K, d->score,
                    d->pre_softmax, d->topk_scale);
    const float aux = aux_coef(cx, s), z = z_coef(cx, s);
    if (aux != 0.0f || z != 0.0f)
        o->moe_aux_bwd(be, w->dlogits, a->logits, aux != 0.0f ? a->counts : NULL, R, E, K,
                       d->score, s->row0, group_len(s), aux, z);
    o->moe_router_bwd(be, dx, wt->grouter, w->dlogits, x, wt->router, R, C, E);
}
