/* moe.c - the routed experts of an MoE layer (moe.h).
 *
 * Forward, on the R rows x of this rank:
 *   logits = x Wr^T (+ br) (fp32); counts = the micro batch's aux top-k counts
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
#include <string.h>

#include "common.h"
#include "config.h"
#include "devclock.h"
#include "trace.h"

int lt_moe_backend_ok(const LtBackend *be) {
    const LtBackendOps *o = be->ops;
    return o->moe_router_fwd && o->moe_router_bwd && o->moe_topk && o->moe_topk_bwd &&
           o->moe_aux_stats && o->moe_aux_bwd && o->moe_dispatch && o->moe_permute &&
           o->moe_permute_bwd && o->moe_unpermute && o->moe_unpermute_bwd &&
           o->linear_group_fwd && o->linear_group_bwd && o->moe_gate_fwd && o->moe_gate_bwd;
}

/* 1 when the local experts' rows come from other ranks (EP or ETP). */
static int spread(const LtMoeShape *s) { return s->ep > 1 || s->etp > 1; }

LtMoeShape lt_moe_shape(const LtMoeDims *d, int arch, int B, int T, int C, int R, long row0,
                        int ep, int ep_rank, int etp, int etp_rank) {
    LtMoeShape s = {.R = R, .N = B * T, .T = T, .row0 = row0, .C = C, .E = d->experts,
                    .K = d->topk, .llama = arch == LT_ARCH_LLAMA};
    s.etp = etp > 1 ? etp : 1, s.etp_rank = etp > 1 ? etp_rank : 0, s.F = d->ffn / s.etp;
    s.groups = d->balance == LT_MOE_SEQ_AUX_LOSS ? B : 1;
    /* Megatron-Core's get_capacity over this rank's R K assignments */
    if (d->capacity > 0) s.capacity = (int)ceil((double)R * s.K / s.E * d->capacity);
    const long rk = (long)R * s.K, ec = (long)s.E * s.capacity;
    s.M = (int)(ec > rk ? ec : rk);
    s.ep = ep > 1 ? ep : 1, s.ep_rank = ep > 1 ? ep_rank : 0, s.El = s.E / s.ep;
    /* what one rank can send to another's El experts: each token at most
     * min(K, El) rows (its experts are distinct), and with a capacity at most
     * (padded: exactly) capacity rows per expert; the ETP x EP ranks of the
     * group each send that much at most */
    long one = (long)R * (s.K < s.El ? s.K : s.El);
    if (s.capacity > 0 && (d->pad || (long)s.El * s.capacity < one)) one = (long)s.El * s.capacity;
    s.Mr_max = spread(&s) ? (int)(one * s.ep * s.etp) : s.M;
    s.Mr = s.Mr_max;
    /* dropless, the worst case (every row of the group to this rank's experts) is EP
     * times the balanced share (ETP R K): start at LT_MOE_EP_HEADROOM times that
     * share (2 when unset; 0: the worst case, never grown) and grow on demand */
    const char *env = getenv("LT_MOE_EP_HEADROOM");
    const double head = env && *env ? atof(env) : 2.0;
    const long start = (long)ceil(head * (double)rk * s.etp);
    if (spread(&s) && s.capacity == 0 && head > 0.0 && start < s.Mr) s.Mr = start > 0 ? (int)start : 1;
    return s;
}

static void *dalloc(LtBackend *be, size_t bytes, size_t *acc) {
    *acc += bytes;
    return be->ops->alloc(be, bytes ? bytes : 1);
}

void lt_moe_acts_alloc(LtBackend *be, const LtMoeShape *s, LtMoeActs *a, size_t *bytes) {
    const size_t R = (size_t)s->R, E = (size_t)s->E, K = (size_t)s->K, M = (size_t)s->M,
                 Mr = (size_t)s->Mr, C = (size_t)s->C, F = (size_t)s->F, i4 = sizeof(int32_t);
    a->logits = dalloc(be, R * E * sizeof(float), bytes);
    a->idx = dalloc(be, R * K * i4, bytes);
    a->w = dalloc(be, R * K * sizeof(float), bytes);
    a->pos = dalloc(be, R * K * i4, bytes);
    a->src = dalloc(be, M * i4, bytes);
    /* offsets, then the dropped count: one download for both; counts, psum and
     * zsum (8-byte aligned) in one block: one zeroing, one TP sum of the floats
     * and one download (each download a host wait) */
    a->offsets = dalloc(be, (E + 2) * i4, bytes);
    a->dropped = a->offsets + E + 1;
    a->host_off = lt_calloc((E + 2) * i4);
    const size_t n = (size_t)s->groups * E, zat = (2 * n * sizeof(float) + 7) & ~(size_t)7;
    a->counts = dalloc(be, zat + sizeof(double), bytes);
    a->psum = a->counts + n;
    a->zsum = (double *)((char *)a->counts + zat);
    a->host_stats = NULL; /* (host memory, on the first forward that reads the losses) */
    a->stats_to = NULL;
    a->xp = dalloc(be, lt_act_bytes(be, M * C), bytes);
    a->y = dalloc(be, lt_act_bytes(be, M * C), bytes);
    a->hpre = dalloc(be, lt_act_bytes(be, Mr * F * (s->llama ? 2 : 1)), bytes);
    a->h = dalloc(be, lt_act_bytes(be, Mr * F), bytes);
    a->out = dalloc(be, lt_act_bytes(be, R * C), bytes);
    if (!spread(s)) { /* the local experts' rows are the permuted rows */
        a->xe = a->xp, a->ye = a->y;
        return;
    }
    a->xe = dalloc(be, lt_act_bytes(be, Mr * C), bytes);
    a->ye = dalloc(be, lt_act_bytes(be, Mr * C), bytes);
    a->ge = dalloc(be, Mr * i4, bytes);
    a->ginv = dalloc(be, Mr * i4, bytes);
    a->cap = s->Mr;
    a->ep_send = lt_calloc(sizeof(size_t) * (size_t)s->ep);
    a->ep_recv = lt_calloc(sizeof(size_t) * (size_t)s->ep);
    a->loff = lt_calloc(sizeof(int) * (size_t)(s->El + 1));
    a->etp_n = lt_calloc(sizeof(int) * (size_t)s->etp);
}

void lt_moe_acts_free(LtBackend *be, LtMoeActs *a) {
    const int ep = a->xe != a->xp;
    void *ps[] = {a->logits, a->idx,    a->w,  a->pos,  a->src,         a->offsets,
                  a->counts, a->xp,        a->y,
                  a->hpre,   a->h,      a->out, ep ? a->xe : NULL, ep ? a->ye : NULL,
                  a->ge,     a->ginv};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) be->ops->free(be, ps[i]);
    if (a->host_stats) be->ops->host_free(be, a->host_stats);
    free(a->host_off);
    free(a->ep_send);
    free(a->ep_recv);
    free(a->loff);
    free(a->etp_n);
}

void lt_moe_work_alloc(LtBackend *be, const LtMoeShape *s, LtMoeWork *w, size_t *bytes) {
    const size_t R = (size_t)s->R, C = (size_t)s->C, F = (size_t)s->F,
                 Mw = (size_t)(s->M > s->Mr ? s->M : s->Mr);
    w->dy = dalloc(be, lt_act_bytes(be, Mw * C), bytes);
    w->dh = dalloc(be, lt_act_bytes(be, Mw * F), bytes);
    w->dhpre = s->llama ? dalloc(be, lt_act_bytes(be, Mw * 2 * F), bytes) : NULL;
    w->dxp = dalloc(be, lt_act_bytes(be, Mw * C), bytes);
    w->xr = spread(s) ? dalloc(be, lt_act_bytes(be, Mw * C), bytes) : NULL;
    w->dw = dalloc(be, R * (size_t)s->K * sizeof(float), bytes);
    w->dlogits = dalloc(be, R * (size_t)s->E * sizeof(float), bytes);
    w->bias = dalloc(be, (size_t)s->E * sizeof(float), bytes);
    w->host_ge = spread(s) ? lt_calloc(sizeof(int32_t) * 2 * (size_t)(Mw + 1)) : NULL;
    w->cap = (int)Mw;
}

void lt_moe_work_free(LtBackend *be, LtMoeWork *w) {
    void *ps[] = {w->dy, w->dh, w->dhpre, w->dxp, w->xr, w->dw, w->dlogits, w->bias};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) be->ops->free(be, ps[i]);
    free(w->host_ge);
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
    const size_t block = (size_t)((char *)a->zsum - (char *)a->counts) + sizeof(double);
    o->zero(be, a->counts, block); /* counts, psum, zsum (lt_moe_acts_alloc) */
    o->moe_aux_stats(be, a->counts, a->psum, a->zsum, a->logits, s->R, s->E, s->K, d->score,
                     s->row0, group_len(s));
    if (cx->tp) {
        lt_comm_all_reduce(cx->tp, a->counts, 2 * n, LT_COMM_F32, LT_COMM_SUM); /* and psum */
        lt_comm_all_reduce(cx->tp, a->zsum, 1, LT_COMM_F64, LT_COMM_SUM);
    }
    if (!acc) return;
    /* the losses for the log: copied now, read after the offsets' download (which
     * completes it), so that the forward waits on the host once */
    if (!a->host_stats) a->host_stats = o->host_alloc(be, block);
    o->download_async(be, a->host_stats, a->counts, block);
    a->stats_to = acc;
    a->stats_coef[0] = aux ? aux_coef(cx, s) : 0.0f;
    a->stats_coef[1] = z ? z_coef(cx, s) : 0.0f;
}

/* The pending statistics of balance_stats into their LtMoeStats (after a blocking
 * download on the same stream, which has completed the copy). */
static void read_stats(const LtMoeShape *s, LtMoeActs *a) {
    if (!a->stats_to) return;
    const size_t n = (size_t)s->groups * s->E,
                 block = (size_t)((char *)a->zsum - (char *)a->counts) + sizeof(double);
    const float *h = (const float *)a->host_stats;
    double zs, dot = 0.0;
    memcpy(&zs, (const char *)a->host_stats + (block - sizeof(double)), sizeof zs);
    for (size_t i = 0; i < n; i++) dot += (double)h[i] * h[n + i];
    if (a->stats_coef[0] != 0.0f) a->stats_to->aux += a->stats_coef[0] * dot;
    if (a->stats_coef[1] != 0.0f) a->stats_to->z += a->stats_coef[1] * zs;
    a->stats_to = NULL;
}

/* The local experts' offsets (El + 1, from 0): local expert le has rows off[le] ..
 * off[le + 1] - 1 of the permuted rows (EP and ETP 1) or of the gathered ones. */
static const int *local_off(const LtMoeShape *s, const LtMoeActs *a) {
    return spread(s) ? a->loff : a->host_off;
}

/* The local experts' tensors as the grouped linears take them: El pointers each. */
typedef struct {
    const void **w1, **b1, **w2, **b2;
    float **g1, **gb1, **g2, **gb2;
} Experts;

static Experts experts_of(const LtMoeShape *s, const LtMoeWeights *wt) {
    const size_t El = (size_t)s->El;
    const void **w = lt_malloc(sizeof(const void *) * 4 * El);
    float **g = lt_malloc(sizeof(float *) * 4 * El);
    Experts x = {w, w + El, w + 2 * El, w + 3 * El, g, g + El, g + 2 * El, g + 3 * El};
    for (size_t le = 0; le < El; le++) {
        const LtExpertTensors *t = &wt->expert[(size_t)s->ep_rank * El + le];
        x.w1[le] = t->w1, x.b1[le] = t->b1, x.w2[le] = t->w2, x.b2[le] = t->b2;
        x.g1[le] = t->g1, x.gb1[le] = t->gb1, x.g2[le] = t->g2, x.gb2[le] = t->gb2;
    }
    return x;
}

static void experts_free(Experts *x) {
    free((void *)x->w1);
    free(x->g1);
}

/* buf = a new buffer of n bytes in place of one of old bytes; *grown += the
 * difference. */
static void regrow(LtBackend *be, void **buf, size_t old, size_t n, size_t *grown) {
    be->ops->free(be, *buf);
    *buf = be->ops->alloc(be, n);
    *grown += n - old;
}

/* Dropless EP or ETP: this forward receives `rows` rows, more than a's or w's
 * buffers hold. They grow to 1.25x that (at most Mr_max): a's are rewritten
 * by this forward, w's only live within one call, so nothing is copied. */
static void ep_grow(LtBackend *be, const LtMoeShape *s, LtMoeActs *a, LtMoeWork *w, size_t rows) {
    size_t cap = rows + rows / 4;
    if (cap > (size_t)s->Mr_max) cap = (size_t)s->Mr_max;
    const size_t C = (size_t)s->C, F = (size_t)s->F, FI = s->llama ? 2 * F : F,
                 i4 = sizeof(int32_t), before = w->grown;
    if (rows > (size_t)a->cap) {
        const size_t old = (size_t)a->cap;
        regrow(be, &a->xe, lt_act_bytes(be, old * C), lt_act_bytes(be, cap * C), &w->grown);
        regrow(be, &a->ye, lt_act_bytes(be, old * C), lt_act_bytes(be, cap * C), &w->grown);
        regrow(be, &a->hpre, lt_act_bytes(be, old * FI), lt_act_bytes(be, cap * FI), &w->grown);
        regrow(be, &a->h, lt_act_bytes(be, old * F), lt_act_bytes(be, cap * F), &w->grown);
        regrow(be, (void **)&a->ge, old * i4, cap * i4, &w->grown);
        regrow(be, (void **)&a->ginv, old * i4, cap * i4, &w->grown);
        a->cap = (int)cap;
    }
    if (rows > (size_t)w->cap) {
        const size_t old = (size_t)w->cap;
        void **bufs[] = {&w->dy, &w->dxp, &w->xr};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            regrow(be, bufs[i], lt_act_bytes(be, old * C), lt_act_bytes(be, cap * C), &w->grown);
        regrow(be, &w->dh, lt_act_bytes(be, old * F), lt_act_bytes(be, cap * F), &w->grown);
        if (w->dhpre)
            regrow(be, &w->dhpre, lt_act_bytes(be, old * FI), lt_act_bytes(be, cap * FI),
                   &w->grown);
        free(w->host_ge);
        w->host_ge = lt_calloc(sizeof(int32_t) * 2 * (cap + 1));
        w->cap = (int)cap;
    }
    lt_log("moe: a forward received %zu rows for this rank's %d experts, more than their "
           "buffers held: grown to %zu rows (+%.1f MiB; the MoE buffers are now %.1f MiB above "
           "the %d rows they started with, which the planner counts; LT_MOE_EP_HEADROOM)\n",
           rows, s->El, cap, (double)(w->grown - before) / 1048576.0,
           (double)w->grown / 1048576.0, s->Mr);
}

/* EP and ETP: from this rank's rows per expert (host_off), what it sends each
 * rank of the EP group; the counts exchanged (host all-to-all); what it
 * receives, rank after rank, each rank's rows by local expert; with ETP those
 * counts of every rank of the ETP group (host all-gather) and what each
 * contributes to the gathered rows (a->etp_n), which hold the ETP ranks'
 * received rows one after the other; the local expert-major order of the
 * gathered rows (xe row r = gathered row ge[r]; ginv the inverse, both
 * uploaded) and the local experts' offsets. */
static void ep_plan(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s, LtMoeActs *a,
                    LtMoeWork *w) {
    const int P = s->ep, El = s->El, Q = s->etp, S = P * Q; /* S sources of gathered rows */
    const size_t C = (size_t)s->C;
    int32_t *cs = lt_malloc(sizeof(int32_t) * (size_t)(P * El + S * El)), *cr = cs + P * El;
    size_t *n = lt_malloc(sizeof(size_t) * (size_t)(P + S)), *base = n + P;
    for (int j = 0; j < P; j++) {
        n[j] = (size_t)El;
        for (int le = 0; le < El; le++)
            cs[j * El + le] = a->host_off[j * El + le + 1] - a->host_off[j * El + le];
    }
    /* cr: ETP rank q's counts from EP rank j for local expert le at (q P + j) El + le */
    int32_t *mine = cr + s->etp_rank * P * El;
    if (P > 1) lt_comm_all_to_all_v(lt_comm_host(cx->ep), cs, n, mine, n, LT_COMM_I32);
    else memcpy(mine, cs, sizeof(int32_t) * (size_t)El);
    if (Q > 1) { /* (a gather's send and receive do not overlap) */
        int32_t *tmp = lt_malloc(sizeof(int32_t) * (size_t)(P * El));
        memcpy(tmp, mine, sizeof(int32_t) * (size_t)(P * El));
        lt_comm_all_gather(lt_comm_host(cx->etp), tmp, cr, (size_t)(P * El), LT_COMM_I32);
        free(tmp);
    }
    size_t at = 0;
    for (int q = 0; q < Q; q++) {
        const size_t first = at;
        for (int j = 0; j < P; j++) {
            size_t rows = 0;
            for (int le = 0; le < El; le++) rows += (size_t)cr[(q * P + j) * El + le];
            base[q * P + j] = at, at += rows;
            if (q == s->etp_rank) a->ep_recv[j] = rows * C;
        }
        LT_CHECK((at - first) * C <= (size_t)INT32_MAX); /* the ETP collectives' int counts */
        a->etp_n[q] = (int)((at - first) * C);
    }
    for (int j = 0; j < P; j++)
        a->ep_send[j] = (size_t)(a->host_off[(j + 1) * El] - a->host_off[j * El]) * C;
    LT_CHECK(at <= (size_t)s->Mr_max);
    if (at > (size_t)a->cap || at > (size_t)w->cap) ep_grow(be, s, a, w, at);
    int32_t *ge = w->host_ge, *ginv = w->host_ge + w->cap;
    int r = 0;
    for (int le = 0; le < El; le++) {
        a->loff[le] = r;
        for (int j = 0; j < S; j++) {
            size_t q = base[j];
            for (int k = 0; k < le; k++) q += (size_t)cr[j * El + k];
            for (int i = 0; i < cr[j * El + le]; i++, r++) ge[r] = (int32_t)(q + (size_t)i);
        }
    }
    a->loff[El] = r;
    for (int k = 0; k < r; k++) ginv[ge[k]] = k;
    be->ops->upload(be, a->ge, ge, (size_t)r * sizeof(int32_t));
    be->ops->upload(be, a->ginv, ginv, (size_t)r * sizeof(int32_t));
    free(cs);
    free(n);
}

/* ETP: the rows this rank received (rx) and those of the other ranks of its
 * ETP group, gathered into out in group order; returns what holds them (rx
 * itself without ETP). */
static const void *etp_gather(const LtMoeCtx *cx, const LtMoeShape *s, const LtMoeActs *a,
                              const void *rx, void *out, LtCommType t) {
    if (s->etp == 1) return rx;
    lt_comm_all_gather_v(cx->etp, rx, out, a->etp_n, t);
    return out;
}

/* ETP: the partial sums over the gathered rows (g, group order) summed over
 * the ETP group, this rank's own rows into out; returns what holds them (g
 * itself without ETP). */
static const void *etp_reduce(const LtMoeCtx *cx, const LtMoeShape *s, const LtMoeActs *a,
                              const void *g, void *out, LtCommType t) {
    if (s->etp == 1) return g;
    lt_comm_reduce_scatter_v(cx->etp, g, out, a->etp_n, t);
    return out;
}

/* The local experts' forward over the local experts' rows: each GEMM one grouped
 * linear over all of them, SwiGLU one call over all their rows. */
static void experts_forward(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s,
                            const LtMoeWeights *wt, LtMoeActs *a) {
    const LtBackendOps *o = be->ops;
    const int C = s->C, F = s->F, FI = s->llama ? 2 * F : F; /* gate | up, or fc */
    const int *off = local_off(s, a), G = s->El, n = off[G];
    Experts x = experts_of(s, wt);
    const int part = lt_devclock_part_begin();
    if (s->llama) {
        o->linear_group_fwd(be, a->hpre, NULL, a->xe, x.w1, x.b1, off, G, C, FI);
        if (n > 0) o->swiglu_fwd(be, a->h, a->hpre, n, F, cx->glu);
    } else {
        o->linear_group_fwd(be, a->h, a->hpre, a->xe, x.w1, x.b1, off, G, C, F);
    }
    /* under ETP the partial outputs are summed: the bias on one rank */
    o->linear_group_fwd(be, a->ye, NULL, a->h, x.w2, s->etp_rank == 0 ? x.b2 : NULL, off, G, F,
                        C);
    lt_devclock_part_end(part, LT_CLK_EXPERTS);
    experts_free(&x);
}

/* This forward's loads and drops into acc. The loads are the micro batch's,
 * as one process routes it: under SP each rank routes its share of the rows,
 * so the tokens per expert wait in acc->sp_counts for lt_model_moe_take,
 * which sums them over those ranks (one host all-reduce per layer and step)
 * and adds them (lt_moe_fold_loads). The drops stay this rank's (the step's
 * statistics sum them over every rank). */
static void count_loads(const LtMoeCtx *cx, const LtMoeShape *s, const LtMoeActs *a,
                        LtMoeStats *acc) {
    const int E = s->E;
    const size_t row = (size_t)E + 2;
    if (acc->sp_n == acc->sp_cap) { /* room for this forward's counts */
        const int cap = acc->sp_cap ? 2 * acc->sp_cap : 16;
        int32_t *grown = lt_malloc(sizeof(int32_t) * row * (size_t)cap);
        if (acc->sp_n) memcpy(grown, acc->sp_counts, sizeof(int32_t) * row * (size_t)acc->sp_n);
        free(acc->sp_counts);
        acc->sp_counts = grown, acc->sp_cap = cap;
    }
    int32_t *n = acc->sp_counts + (size_t)acc->sp_n * row;
    for (int e = 0; e < E; e++) n[e] = a->host_off[e + 1] - a->host_off[e];
    n[E] = a->host_off[E + 1], n[E + 1] = s->R; /* dropped (downloaded with the offsets), rows */
    acc->dropped += n[E];
    acc->forwards++;
    if (cx->tp && lt_comm_size(cx->tp) > 1)
        acc->sp_n++; /* kept for lt_model_moe_take */
    else
        lt_moe_fold_loads(acc, n, 1, E, s->K);
}

void lt_moe_fold_loads(LtMoeStats *acc, const int32_t *n, int forwards, int E, int K) {
    for (int f = 0; f < forwards; f++, n += E + 2) {
        int32_t most = 0;
        for (int e = 0; e < E; e++)
            if (n[e] > most) most = n[e];
        acc->load_max += most;
        acc->load_mean += (double)((long)n[E + 1] * K - n[E]) / E;
    }
}

void lt_moe_forward(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s,
                    const LtMoeWeights *wt, LtMoeActs *a, LtMoeWork *w, const void *x,
                    LtMoeStats *acc) {
    const LtBackendOps *o = be->ops;
    const LtMoeDims *d = cx->dims;
    const int R = s->R, E = s->E, K = s->K, C = s->C;
    const LtCommType act = lt_comm_act_type(be);
    o->moe_router_fwd(be, a->logits, x, wt->router, wt->router_bias, R, C, E);
    balance_stats(be, cx, s, a, acc);
    if (wt->bias) o->act_to_f32(be, w->bias, wt->bias, (size_t)E);
    o->moe_topk(be, a->idx, a->w, a->logits, wt->bias ? w->bias : NULL, R, E, K, d->score,
                d->pre_softmax, d->topk_scale, d->groups, d->group_topk);
    o->moe_dispatch(be, a->pos, a->src, a->offsets, a->dropped, a->idx, a->w, R, E, K,
                    s->capacity, d->drop_policy, d->pad);
    o->download(be, a->host_off, a->offsets, (size_t)(E + (acc ? 2 : 1)) * sizeof(int32_t));
    read_stats(s, a);
    const int M = a->host_off[E];
    LT_CHECK(M >= 0 && M <= s->M);
    if (acc) count_loads(cx, s, a, acc);
    o->moe_permute(be, a->xp, x, a->src, M, C);
    if (spread(s)) { /* to the experts' ranks, gathered over ETP, then by local expert */
        LT_TRACE_BEGIN("moe dispatch", "\"rows\": %d", M);
        ep_plan(be, cx, s, a, w);
        const void *rx = a->xp;
        if (s->ep > 1) {
            lt_comm_all_to_all_v(cx->ep, a->xp, a->ep_send, w->xr, a->ep_recv, act);
            rx = w->xr;
        }
        o->moe_permute(be, a->xe, etp_gather(cx, s, a, rx, a->ye, act), a->ge, a->loff[s->El], C);
        LT_TRACE_END();
    }
    experts_forward(be, cx, s, wt, a);
    if (spread(s)) { /* back in the gathered order, summed over ETP, to the tokens' ranks */
        LT_TRACE_BEGIN("moe combine", "\"rows\": %d", a->loff[s->El]);
        void *back = s->ep > 1 ? w->xr : a->y; /* this rank's rows of the ETP sum */
        o->moe_permute(be, s->etp > 1 ? w->dy : back, a->ye, a->ginv, a->loff[s->El], C);
        etp_reduce(cx, s, a, w->dy, back, act);
        if (s->ep > 1) lt_comm_all_to_all_v(cx->ep, w->xr, a->ep_recv, a->y, a->ep_send, act);
        LT_TRACE_END();
    }
    o->moe_unpermute(be, a->out, a->y, a->pos, a->w, R, K, C);
}

/* Backward of the local experts' GEMM chains over the local experts' rows (grouped
 * linears, as experts_forward): dxp rows from dy rows, their weight gradients
 * accumulated. */
static void experts_backward(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s,
                             const LtMoeWeights *wt, const LtMoeActs *a, LtMoeWork *w) {
    const LtBackendOps *o = be->ops;
    const int C = s->C, F = s->F, FI = s->llama ? 2 * F : F;
    const int *off = local_off(s, a), G = s->El, n = off[G];
    Experts x = experts_of(s, wt);
    const int part = lt_devclock_part_begin();
    if (s->llama) {
        o->linear_group_bwd(be, w->dh, x.g2, x.gb2, w->dy, a->h, x.w2, NULL, off, G, F, C);
        if (n > 0) o->swiglu_bwd(be, w->dhpre, a->hpre, w->dh, n, F, cx->glu);
        o->linear_group_bwd(be, w->dxp, x.g1, x.gb1, w->dhpre, a->xe, x.w1, NULL, off, G, C, FI);
    } else { /* dh comes back through GeLU: the gradient of hpre */
        o->linear_group_bwd(be, w->dh, x.g2, x.gb2, w->dy, a->h, x.w2, a->hpre, off, G, F, C);
        o->linear_group_bwd(be, w->dxp, x.g1, x.gb1, w->dh, a->xe, x.w1, NULL, off, G, C, F);
    }
    lt_devclock_part_end(part, LT_CLK_EXPERTS);
    experts_free(&x);
}

void lt_moe_backward(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s,
                     const LtMoeWeights *wt, const LtMoeActs *a, LtMoeWork *w, const void *x,
                     const void *dout, void *dx) {
    const LtBackendOps *o = be->ops;
    const LtMoeDims *d = cx->dims;
    const int R = s->R, E = s->E, K = s->K, C = s->C, M = a->host_off[E];
    const LtCommType act = lt_comm_act_type(be);
    /* dy in the permuted order, then (EP) at the experts' ranks, (ETP) gathered,
     * by local expert */
    o->moe_unpermute_bwd(be, spread(s) ? w->xr : w->dy, w->dw, dout, a->y, a->pos, a->w, R, K,
                         C, M);
    if (spread(s)) {
        LT_TRACE_BEGIN("moe combine backward", "\"rows\": %d", M);
        const void *rx = w->xr;
        if (s->ep > 1) {
            lt_comm_all_to_all_v(cx->ep, w->xr, a->ep_send, w->dxp, a->ep_recv, act);
            rx = w->dxp;
        }
        const void *g = etp_gather(cx, s, a, rx, rx == w->xr ? w->dxp : w->xr, act);
        o->moe_permute(be, w->dy, g, a->ge, a->loff[s->El], C);
        LT_TRACE_END();
    }
    experts_backward(be, cx, s, wt, a, w);
    const void *dxp = w->dxp;
    if (spread(s)) { /* the input rows' gradient summed over ETP, back to the tokens' ranks */
        LT_TRACE_BEGIN("moe dispatch backward", "\"rows\": %d", a->loff[s->El]);
        o->moe_permute(be, w->xr, w->dxp, a->ginv, a->loff[s->El], C);
        dxp = etp_reduce(cx, s, a, w->xr, w->dy, act);
        if (s->ep > 1) {
            void *to = dxp == w->xr ? w->dy : w->dxp;
            lt_comm_all_to_all_v(cx->ep, dxp, a->ep_recv, to, a->ep_send, act);
            dxp = to;
        }
        LT_TRACE_END();
    }
    o->moe_permute_bwd(be, dx, dxp, a->pos, R, K, C);
    o->moe_topk_bwd(be, w->dlogits, w->dw, a->idx, a->logits, R, E, K, d->score,
                    d->pre_softmax, d->topk_scale);
    const float aux = aux_coef(cx, s), z = z_coef(cx, s);
    if (aux != 0.0f || z != 0.0f)
        o->moe_aux_bwd(be, w->dlogits, a->logits, aux != 0.0f ? a->counts : NULL, R, E, K,
                       d->score, s->row0, group_len(s), aux, z);
    o->moe_router_bwd(be, dx, wt->grouter, wt->grouter_bias, w->dlogits, x, wt->router, R, C,
                      E);
}
