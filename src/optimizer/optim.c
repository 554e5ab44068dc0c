/* optim.c - ZeRO-sharded AdamW, gradient reduction, LR schedule. See optim.h. */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

size_t lt_optim_flat_size(const LtParamTable *t, int dp) {
    size_t shard = (t->total + (size_t)dp - 1) / (size_t)dp;
    shard = (shard + 63) / 64 * 64;
    return shard * (size_t)dp;
}

LtOptimizer *lt_optim_create(LtBackend *be, const LtParamTable *t, const LtConfig *cfg,
                             const LtComm *dp, size_t flat, const float *host_init) {
    LtOptimizer *o = lt_calloc(sizeof *o);
    o->be = be;
    o->table = t;
    o->dp = dp;
    o->dp_size = dp ? lt_comm_size(dp) : 1;
    o->dp_rank = dp ? lt_comm_rank(dp) : 0;
    /* with one data-parallel rank there is nothing to shard: stage 0 is the same math */
    o->zero_stage = o->dp_size > 1 ? cfg->optimizer.zero_stage : 0;
    o->flat = flat;
    LT_CHECK(flat % (size_t)o->dp_size == 0 && flat >= t->total);
    if (o->zero_stage == 0) {
        o->shard_begin = 0;
        o->shard_len = flat;
    } else {
        o->shard_len = flat / (size_t)o->dp_size;
        o->shard_begin = (size_t)o->dp_rank * o->shard_len;
    }
    size_t bytes = o->shard_len * sizeof(float);
    o->master = be->ops->alloc(be, bytes);
    o->m = be->ops->alloc(be, bytes);
    o->v = be->ops->alloc(be, bytes);
    o->state_bytes = 3 * bytes;
    o->scalars = be->ops->alloc(be, 3 * sizeof(double));
    if (o->zero_stage >= 1) {
        o->grad_shard = be->ops->alloc(be, bytes);
        o->grad_bytes = bytes;
    }
    /* this rank's slice of the initial values (the padding stays zero) */
    if (o->shard_begin < t->total) {
        size_t n = t->total - o->shard_begin;
        if (n > o->shard_len) n = o->shard_len;
        be->ops->upload(be, o->master, host_init + o->shard_begin, n * sizeof(float));
    }
    o->grad_comm = o->param_comm = dp;
    const size_t whole[2] = {0, flat};
    lt_optim_set_buckets(o, whole, 1);
    o->beta1 = cfg->optimizer.beta1;
    o->beta2 = cfg->optimizer.beta2;
    o->eps = cfg->optimizer.eps;
    o->weight_decay = cfg->optimizer.weight_decay;
    return o;
}

struct LtOptimRing { /* stage 2 with overlap: bucket reductions in flight, oldest at head */
    float *stage[LT_OPTIM_RING], *recv[LT_OPTIM_RING];
    int *counts[LT_OPTIM_RING];
    size_t mine_start[LT_OPTIM_RING], mine[LT_OPTIM_RING];
    LtCommRequest req[LT_OPTIM_RING];
    int head, n;
};

static void ring_free(LtOptimizer *o) {
    struct LtOptimRing *g = o->ring;
    if (!g) return;
    for (int i = 0; i < LT_OPTIM_RING; i++) {
        o->be->ops->free(o->be, g->stage[i]);
        o->be->ops->free(o->be, g->recv[i]);
        free(g->counts[i]);
    }
    free(g);
    o->ring = NULL;
}

static void buckets_free(LtOptimizer *o) {
    free(o->bounds);
    free(o->counts);
    free(o->greq);
    free(o->preq);
    o->bounds = NULL;
    o->counts = NULL;
    o->greq = o->preq = NULL;
}

void lt_optim_destroy(LtOptimizer *o) {
    if (!o) return;
    LtBackend *be = o->be;
    lt_optim_params_wait_all(o); /* every request is finished before the groups go */
    ring_free(o);
    buckets_free(o);
    be->ops->free(be, o->scalars);
    be->ops->free(be, o->master);
    be->ops->free(be, o->m);
    be->ops->free(be, o->v);
    if (o->grad_shard) be->ops->free(be, o->grad_shard);
    if (o->bucket_recv) be->ops->free(be, o->bucket_recv);
    free(o);
}

/* Stage 2 with overlap: LT_OPTIM_RING staging copies of a piece and
 * their receive buffers (made once both the bucket size and the switch are
 * known, in either order), which replace the plain receive buffer. */
static void ring_alloc(LtOptimizer *o) {
    if (o->zero_stage != 2 || !o->overlap_grad || !o->bucket_len || o->ring) return;
    if (o->bucket_recv) {
        o->be->ops->free(o->be, o->bucket_recv);
        o->bucket_recv = NULL;
        o->comm_bytes -= o->bucket_recv_len * sizeof(float);
    }
    struct LtOptimRing *g = lt_calloc(sizeof *g);
    LtBackend *be = o->be;
    for (int i = 0; i < LT_OPTIM_RING; i++) {
        g->stage[i] = be->ops->alloc(be, o->piece_len * sizeof(float));
        g->recv[i] = be->ops->alloc(be, o->bucket_recv_len * sizeof(float));
        g->counts[i] = lt_malloc(sizeof(int) * (size_t)o->dp_size);
        o->comm_bytes += (o->piece_len + o->bucket_recv_len) * sizeof(float);
    }
    o->ring = g;
}

void lt_optim_set_bucket_size(LtOptimizer *o, size_t bucket_len, size_t piece_len) {
    LT_CHECK(o->zero_stage == 2 && !o->bucket_len && bucket_len > 0 && piece_len > 0);
    o->bucket_len = bucket_len;
    o->piece_len = piece_len < bucket_len ? piece_len : bucket_len;
    /* a piece overlaps this rank's shard in at most min(piece, shard) elements */
    o->bucket_recv_len = o->piece_len < o->shard_len ? o->piece_len : o->shard_len;
    if (o->overlap_grad) {
        ring_alloc(o);
        return;
    }
    o->bucket_recv = o->be->ops->alloc(o->be, o->bucket_recv_len * sizeof(float));
    o->comm_bytes += o->bucket_recv_len * sizeof(float);
}

void lt_optim_set_overlap(LtOptimizer *o, int grad_reduce, int param_gather) {
    if (o->dp_size == 1) return; /* nothing to reduce or gather */
    o->overlap_grad = grad_reduce;
    o->overlap_param = param_gather && o->zero_stage >= 1;
    const LtComm *bg = grad_reduce || o->overlap_param ? lt_comm_background(o->dp) : o->dp;
    o->grad_comm = grad_reduce ? bg : o->dp;
    o->param_comm = o->overlap_param ? bg : o->dp;
    ring_alloc(o);
}

/* Rank r's part of flat range [begin, begin + len) is its overlap with shard r
 * (bucket elements are in flat order, so rank r's follows rank r-1's):
 * counts[r]; returns this rank's, which starts at *mine_start. */
static size_t shard_parts(const LtOptimizer *o, size_t begin, size_t len, int *counts,
                          size_t *mine_start);

void lt_optim_set_buckets(LtOptimizer *o, const size_t *bounds, int n) {
    LT_CHECK(n >= 1 && bounds[0] == 0 && bounds[n] == o->flat);
    for (int k = 0; k < n; k++) LT_CHECK(bounds[k] < bounds[k + 1]);
    if (o->greq) lt_optim_params_wait_all(o);
    buckets_free(o);
    const size_t dp = (size_t)o->dp_size;
    o->nbuckets = n;
    o->bounds = lt_malloc(sizeof(size_t) * (size_t)(n + 1));
    memcpy(o->bounds, bounds, sizeof(size_t) * (size_t)(n + 1));
    o->counts = lt_malloc(sizeof(int) * (size_t)n * dp);
    o->greq = lt_calloc(sizeof(LtCommRequest) * (size_t)n);
    o->preq = lt_calloc(sizeof(LtCommRequest) * (size_t)n * dp);
    for (int k = 0; k < n; k++) {
        size_t unused;
        shard_parts(o, bounds[k], bounds[k + 1] - bounds[k], o->counts + (size_t)k * dp, &unused);
    }
}

int lt_optim_bucket_of(const LtOptimizer *o, size_t i) {
    int k = 0;
    while (k + 1 < o->nbuckets && o->bounds[k + 1] <= i) k++;
    return k;
}

void lt_optim_zero_grad(LtOptimizer *o) {
    if (o->zero_stage == 2) o->be->ops->zero(o->be, o->grad_shard, o->shard_len * sizeof(float));
    if (o->experts) lt_optim_zero_grad(o->experts);
}

/* Overlap of [a0, a1) and [b0, b1) (0 when disjoint); *start its beginning. */
static size_t overlap(size_t a0, size_t a1, size_t b0, size_t b1, size_t *start) {
    size_t s = a0 > b0 ? a0 : b0, e = a1 < b1 ? a1 : b1;
    *start = s;
    return e > s ? e - s : 0;
}

static size_t shard_parts(const LtOptimizer *o, size_t begin, size_t len, int *counts,
                          size_t *mine_start) {
    const size_t S = o->shard_len;
    size_t mine = 0;
    *mine_start = begin;
    for (int r = 0; r < o->dp_size; r++) {
        size_t st;
        size_t n = overlap(begin, begin + len, (size_t)r * S, (size_t)(r + 1) * S, &st);
        counts[r] = (int)n;
        if (r == o->dp_rank && n) {
            mine = n;
            *mine_start = st;
        }
    }
    return mine;
}

/* A reduced part of the shard (mine elements from flat position mine_start)
 * is added to the shard's gradient. */
static void shard_add(LtOptimizer *o, const float *recv, size_t mine_start, size_t mine) {
    if (mine)
        o->be->ops->add_f32(o->be, o->grad_shard + (mine_start - o->shard_begin), recv, mine);
}

static void ring_complete_oldest(LtOptimizer *o) {
    struct LtOptimRing *g = o->ring;
    const int i = g->head;
    lt_comm_finish(&g->req[i]);
    shard_add(o, g->recv[i], g->mine_start[i], g->mine[i]);
    g->head = (i + 1) % LT_OPTIM_RING;
    g->n--;
}

/* The bucket is copied aside (and zeroed for the next group) and reduced on
 * the background group while backward goes on; the oldest reduction is
 * completed first when every staging copy is in flight. */
static void ring_push(LtOptimizer *o, float *bucket, size_t begin, size_t len) {
    struct LtOptimRing *g = o->ring;
    if (g->n == LT_OPTIM_RING) ring_complete_oldest(o);
    const int i = (g->head + g->n) % LT_OPTIM_RING;
    LT_CHECK(len <= o->piece_len);
    g->mine[i] = shard_parts(o, begin, len, g->counts[i], &g->mine_start[i]);
    o->be->ops->copy(o->be, g->stage[i], bucket, len * sizeof(float));
    o->be->ops->zero(o->be, bucket, len * sizeof(float));
    g->req[i] = lt_comm_reduce_scatter_v_start(o->grad_comm, g->stage[i], g->recv[i],
                                               g->counts[i], LT_COMM_F32);
    g->n++;
}

void lt_optim_reduce_bucket(LtOptimizer *o, float *bucket, size_t begin, size_t len) {
    LT_CHECK(o->zero_stage == 2 && (o->bucket_recv || o->ring) && len <= o->bucket_len);
    int *counts = o->ring ? NULL : lt_malloc(sizeof(int) * (size_t)o->dp_size);
    for (size_t off = 0; off < len; off += o->piece_len) { /* the same pieces either way */
        const size_t n = len - off < o->piece_len ? len - off : o->piece_len;
        if (o->ring) {
            ring_push(o, bucket + off, begin + off, n);
            continue;
        }
        size_t mine_start;
        const size_t mine = shard_parts(o, begin + off, n, counts, &mine_start);
        LT_CHECK(mine <= o->bucket_recv_len);
        lt_comm_reduce_scatter_v(o->dp, bucket + off, o->bucket_recv, counts, LT_COMM_F32);
        shard_add(o, o->bucket_recv, mine_start, mine);
        o->be->ops->zero(o->be, bucket + off, n * sizeof(float));
    }
    free(counts);
}

/* 1 when bucket k is the whole flat space: every rank's part is its shard,
 * and the plain (equal-count) collectives apply. */
static int bucket_whole(const LtOptimizer *o, int k) {
    return o->bounds[k] == 0 && o->bounds[k + 1] == o->flat;
}

void lt_optim_bucket_start(LtOptimizer *o, int k, float *grads) {
    LT_CHECK(o->zero_stage < 2 && k >= 0 && k < o->nbuckets && !o->greq[k].op);
    const size_t b0 = o->bounds[k], len = o->bounds[k + 1] - b0;
    const LtComm *g = o->grad_comm;
    if (o->zero_stage == 0) {
        o->greq[k] = lt_comm_all_reduce_start(g, grads + b0, len, LT_COMM_F32, LT_COMM_SUM);
    } else if (bucket_whole(o, k)) {
        o->greq[k] = lt_comm_reduce_scatter_start(g, grads, o->grad_shard, o->shard_len,
                                                  LT_COMM_F32);
    } else {
        const int *counts = o->counts + (size_t)k * (size_t)o->dp_size;
        size_t mine_start = b0;
        for (int r = 0; r < o->dp_rank; r++) mine_start += (size_t)counts[r];
        float *recv = o->grad_shard + (counts[o->dp_rank] ? mine_start - o->shard_begin : 0);
        o->greq[k] = lt_comm_reduce_scatter_v_start(g, grads + b0, recv, counts, LT_COMM_F32);
    }
}

void lt_optim_reduce_grads(LtOptimizer *o, float *grads) {
    if (o->zero_stage == 2) { /* the buckets were reduced during backward */
        while (o->ring && o->ring->n) ring_complete_oldest(o);
    } else {
        /* (a started request keeps its op name, also when it completed at once) */
        for (int k = o->nbuckets - 1; k >= 0; k--)
            if (!o->greq[k].op) lt_optim_bucket_start(o, k, grads);
        for (int k = o->nbuckets - 1; k >= 0; k--) {
            lt_comm_finish(&o->greq[k]);
            memset(&o->greq[k], 0, sizeof o->greq[k]);
        }
    }
    if (o->experts) lt_optim_reduce_grads(o->experts, o->egrads);
}

/* ---- the parameter gather, bucket by bucket ---- */
/* Every rank's updated part of each bucket goes to every rank: one all-gather
 * when the bucket is the whole space, else a broadcast from each rank that
 * holds part of it. Issued in flat (forward) order. */
static void params_gather_start(LtOptimizer *o, void *params) {
    LtBackend *be = o->be;
    const LtCommType t = lt_comm_act_type(be);
    const size_t dp = (size_t)o->dp_size;
    for (int k = 0; k < o->nbuckets; k++) {
        LtCommRequest *req = o->preq + (size_t)k * dp;
        if (bucket_whole(o, k)) {
            req[0] = lt_comm_all_gather_start(o->param_comm,
                                              (char *)params + lt_act_bytes(be, o->shard_begin),
                                              params, o->shard_len, t);
            continue;
        }
        size_t at = o->bounds[k];
        const int *counts = o->counts + (size_t)k * dp;
        for (int r = 0; r < o->dp_size; r++) {
            if (counts[r])
                req[r] = lt_comm_broadcast_start(o->param_comm, (char *)params + lt_act_bytes(be, at),
                                                 (size_t)counts[r], t, r);
            at += (size_t)counts[r];
        }
    }
}

void lt_optim_params_wait(LtOptimizer *o, size_t begin, size_t end) {
    const size_t dp = (size_t)o->dp_size;
    for (int k = 0; k < o->nbuckets; k++) {
        if (o->bounds[k + 1] <= begin || o->bounds[k] >= end) continue;
        for (size_t r = 0; r < dp; r++) lt_comm_finish(&o->preq[(size_t)k * dp + r]);
    }
}

void lt_optim_params_wait_all(LtOptimizer *o) { lt_optim_params_wait(o, 0, o->flat); }

void lt_optim_set_tp(LtOptimizer *o, const LtComm *tp) {
    o->tp = tp && lt_comm_size(tp) > 1 ? tp : NULL;
    o->tp_rank = o->tp ? lt_comm_rank(o->tp) : 0;
}

void lt_optim_set_pp(LtOptimizer *o, const LtComm *pp) {
    o->pp = pp && lt_comm_size(pp) > 1 ? pp : NULL;
}

void lt_optim_set_ep(LtOptimizer *o, const LtComm *ep) {
    o->ep = ep && lt_comm_size(ep) > 1 ? ep : NULL;
}

void lt_optim_attach_experts(LtOptimizer *o, LtOptimizer *e, void *eparams, float *egrads) {
    LT_CHECK(!o->experts && !e->experts && e->zero_stage <= 1);
    o->experts = e;
    o->eparams = eparams;
    o->egrads = egrads;
}

/* ss[0] (device) += sum of squares of the gradient over flat range [b0, b1)
 * (g indexed from flat position `base`), counting parameters replicated over
 * TP only on TP rank 0 and a tied copy of another stage's parameter not at
 * all. Counted parameters that touch in the flat buffer go through one
 * sum_f64 call. */
static void counted_sumsq(LtOptimizer *o, double *ss, const float *g, size_t base, size_t b0,
                          size_t b1) {
    const LtParamTable *t = o->table;
    size_t run = 0, run_n = 0; /* pending contiguous range */
    for (int i = 0; i < t->n; i++) {
        const LtParam *p = &t->p[i];
        if ((p->split == LT_SPLIT_NONE && o->tp_rank != 0) || p->tied_copy) continue;
        size_t st, n = overlap(p->offset, p->offset + p->numel, b0, b1, &st);
        if (!n) continue;
        if (run_n && run + run_n == st) {
            run_n += n;
            continue;
        }
        if (run_n) o->be->ops->sum_f64(o->be, ss, g + (run - base), run_n, 1);
        run = st;
        run_n = n;
    }
    if (run_n) o->be->ops->sum_f64(o->be, ss, g + (run - base), run_n, 1);
}

/* ss_dev[0], the dense part's sum over the stage's TP x DP ranks (the same on
 * each), becomes the whole model's: it is kept on the stage's first rank only,
 * each rank adds its part of the experts' - its shard of its experts', or
 * with ZeRO 0 its experts' on the first rank of each expert-data-parallel
 * group, where every rank holds them reduced; under expert tensor parallelism
 * (the expert optimizer's tp group) its slices of them, the whole ones
 * (proj.bias) on ETP rank 0 - and the sum over ETP x EP x EDP (the stage's
 * ranks) counts every element once. */
static void experts_sumsq(LtOptimizer *o, double *ss_dev) {
    LtOptimizer *e = o->experts;
    const int first = e->dp_rank == 0 && (!e->ep || lt_comm_rank(e->ep) == 0) && e->tp_rank == 0;
    if (!first) o->be->ops->zero(o->be, ss_dev, sizeof(double));
    if (e->zero_stage == 0) {
        if (e->dp_rank == 0) counted_sumsq(e, ss_dev, o->egrads, 0, 0, e->table->total);
    } else {
        counted_sumsq(e, ss_dev, e->grad_shard, e->shard_begin, e->shard_begin,
                      e->shard_begin + e->shard_len);
    }
    if (e->dp_size > 1) lt_comm_all_reduce(e->dp, ss_dev, 1, LT_COMM_F64, LT_COMM_SUM);
    if (e->ep) lt_comm_all_reduce(e->ep, ss_dev, 1, LT_COMM_F64, LT_COMM_SUM);
    if (e->tp) lt_comm_all_reduce(e->tp, ss_dev, 1, LT_COMM_F64, LT_COMM_SUM);
}

void lt_optim_grad_sumsq(LtOptimizer *o, const float *grads, double *ss_dev,
                         const double *loss_dev) {
    LtBackend *be = o->be;
    be->ops->zero(be, ss_dev, sizeof(double));
    if (o->zero_stage == 0) { /* every DP rank holds the same reduced gradient */
        counted_sumsq(o, ss_dev, grads, 0, 0, o->table->total);
        if (loss_dev) { /* but not the same loss: a non-finite one anywhere (or a replica
                         * whose gradient differs), NaN everywhere */
            double *flag = o->scalars + 2;
            be->ops->zero(be, flag, sizeof(double));
            be->ops->flag_nonfinite(be, flag, loss_dev);
            be->ops->flag_nonfinite(be, flag, ss_dev);
            if (o->dp) lt_comm_all_reduce(o->dp, flag, 1, LT_COMM_F64, LT_COMM_SUM);
            be->ops->flag_nonfinite(be, ss_dev, flag);
        }
    } else {
        counted_sumsq(o, ss_dev, o->grad_shard, o->shard_begin, o->shard_begin,
                      o->shard_begin + o->shard_len);
        if (loss_dev) be->ops->flag_nonfinite(be, ss_dev, loss_dev);
        lt_comm_all_reduce(o->dp, ss_dev, 1, LT_COMM_F64, LT_COMM_SUM);
    }
    if (o->tp) lt_comm_all_reduce(o->tp, ss_dev, 1, LT_COMM_F64, LT_COMM_SUM);
    if (o->experts) experts_sumsq(o, ss_dev);
    if (o->pp) lt_comm_all_reduce(o->pp, ss_dev, 1, LT_COMM_F64, LT_COMM_SUM);
}

double lt_optim_grad_norm(LtOptimizer *o, const float *grads) {
    double ss = 0.0;
    lt_optim_grad_sumsq(o, grads, o->scalars, NULL);
    o->be->ops->download(o->be, &ss, o->scalars, sizeof ss);
    return sqrt(ss);
}

float *lt_optim_grad_base(LtOptimizer *o, float *grads) {
    return o->zero_stage == 0 ? grads : o->grad_shard;
}

void lt_optim_skipped(LtOptimizer *o) {
    if (o->step > 0) o->step--;
    if (o->experts) lt_optim_skipped(o->experts);
}

const float *lt_optim_clip_coef(LtOptimizer *o, const double *ss_dev, double clip) {
    float *coef = (float *)(o->scalars + 1);
    o->be->ops->clip_coef(o->be, coef, ss_dev, (float)clip);
    return coef;
}

void lt_optim_step(LtOptimizer *o, void *params, const float *grads, double lr,
                   double grad_scale, const float *grad_scale_dev) {
    LtBackend *be = o->be;
    const LtParamTable *t = o->table;
    o->step++;
    LtAdamArgs a = {
        .lr = (float)lr,
        .beta1 = (float)o->beta1,
        .beta2 = (float)o->beta2,
        .eps = (float)o->eps,
        .bc1 = (float)(1.0 - pow(o->beta1, (double)o->step)),
        .bc2 = (float)(1.0 - pow(o->beta2, (double)o->step)),
        .grad_scale = (float)grad_scale,
        .grad_scale_dev = grad_scale_dev,
    };
    const float *g = o->zero_stage == 0 ? grads : o->grad_shard; /* indexed from shard_begin */
    const size_t s0 = o->shard_begin, s1 = o->shard_begin + o->shard_len;
    /* one call per maximal run of parameters with the same decay flag, within the shard */
    for (int i = 0; i < t->n;) {
        int j = i;
        while (j + 1 < t->n && t->p[j + 1].decay == t->p[i].decay) j++;
        size_t off;
        size_t n = overlap(t->p[i].offset, t->p[j].offset + t->p[j].numel, s0, s1, &off);
        if (n) {
            a.weight_decay = t->p[i].decay ? (float)o->weight_decay : 0.0f;
            size_t k = off - s0;
            be->ops->adamw(be, (char *)params + lt_act_bytes(be, off), o->master + k, g + k,
                           o->m + k, o->v + k, n, &a);
        }
        i = j + 1;
    }
    if (o->zero_stage > 0) { /* every rank gets the updated shards of the others */
        params_gather_start(o, params);
        if (!o->overlap_param) lt_optim_params_wait_all(o);
    }
    if (o->experts)
        lt_optim_step(o->experts, o->eparams, o->egrads, lr, grad_scale, grad_scale_dev);
}

/* Slice r of S elements of a flat space, clipped to the table's total. */
static void table_slice(size_t total, size_t S, int r, size_t *begin, size_t *len) {
    *begin = (size_t)r * S < total ? (size_t)r * S : total;
    *len = total - *begin < S ? total - *begin : S;
}

void lt_optim_held_range(const LtParamTable *t, int zero_stage, int dp_size, int dp_rank,
                         size_t *begin, size_t *len) {
    if (dp_size <= 1 || zero_stage == 0) table_slice(t->total, t->total, 0, begin, len);
    else table_slice(t->total, lt_optim_flat_size(t, dp_size) / (size_t)dp_size, dp_rank, begin, len);
}

void lt_optim_save_range(const LtOptimizer *o, size_t *begin, size_t *len) {
    table_slice(o->table->total, o->flat / (size_t)o->dp_size, o->dp_rank, begin, len);
}

void lt_optim_download_state(LtOptimizer *o, size_t begin, size_t len, float *master, float *m,
                             float *v) {
    LT_CHECK(begin >= o->shard_begin && begin + len <= o->shard_begin + o->shard_len);
    const size_t off = begin - o->shard_begin, bytes = len * sizeof(float);
    if (!len) return;
    o->be->ops->download(o->be, master, o->master + off, bytes);
    if (m) o->be->ops->download(o->be, m, o->m + off, bytes);
    if (v) o->be->ops->download(o->be, v, o->v + off, bytes);
}

/* shard[0, shard_len) = host[0, n) then zeros (the padding past the table). */
static void load_array(LtOptimizer *o, float *shard, const float *host, size_t n) {
    o->be->ops->zero(o->be, shard, o->shard_len * sizeof(float));
    if (n) o->be->ops->upload(o->be, shard, host, n * sizeof(float));
}

void lt_optim_load_state(LtOptimizer *o, const float *master, const float *m, const float *v,
                         long step) {
    size_t begin, n; /* the held part of the shard (the rest is padding) */
    table_slice(o->table->total, o->shard_len, o->zero_stage ? o->dp_rank : 0, &begin, &n);
    load_array(o, o->master, master + begin, n);
    if (m) load_array(o, o->m, m, n);
    if (v) load_array(o, o->v, v, n);
    o->step = step;
}

/* Megatron's WSD coefficient of (lr - min_lr) at num_steps n after the
 * warm-up (unit: samples per step of the config's counts): 1 until the last
 * lr_wsd_decay_steps of decay_steps, then down to 0 at decay_steps by
 * lr_wsd_decay_style. */
static double wsd_coeff(const LtConfig *cfg, long long n, long long unit) {
    const long long span = cfg->optimizer.lr_wsd_decay_steps * unit;
    const long long start = cfg->optimizer.decay_steps * unit - span;
    if (n <= start) return 1.0;
    const double ratio = (double)(n - start) / (double)span;
    switch (cfg->optimizer.lr_wsd_decay_style) {
    case LT_WSD_LINEAR: return 1.0 - ratio;
    case LT_WSD_COSINE: return 0.5 * (cos(M_PI * ratio) + 1.0);
    case LT_WSD_MINUS_SQRT: return 1.0 - sqrt(ratio);
    case LT_WSD_EXPONENTIAL: break;
    }
    return 2.0 * pow(0.5, ratio) - 1.0;
}

/* The update of a step of b units after n units (unit: the units one step
 * of the config's counts holds: 1 counting updates, the global batch counting
 * samples). */
static double lr_at(const LtConfig *cfg, long long n, long long b, long long unit) {
    const double lr = cfg->optimizer.lr, min_lr = cfg->optimizer.min_lr;
    const long long warm = cfg->optimizer.warmup_steps * unit;
    const long long decay = cfg->optimizer.decay_steps * unit;
    const LtLrDecayStyle style = cfg->optimizer.lr_decay_style;
    if (warm > 0 && n < warm) return lr * (double)(n + b < warm ? n + b : warm) / (double)warm;
    if (style == LT_LR_CONSTANT) return lr;
    if (style == LT_LR_INVERSE_SQRT) {
        if (n > decay) return min_lr;
        const long long w = warm > 1 ? warm : 1, m = n > 1 ? n : 1;
        const double v = lr * sqrt((double)w) / sqrt((double)m);
        return v > min_lr ? v : min_lr;
    }
    if (n >= decay) return min_lr;
    const double ratio = (double)(n - warm) / (double)(decay - warm);
    if (style == LT_LR_COSINE) return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * ratio));
    const double coeff = style == LT_LR_LINEAR ? 1.0 - ratio : wsd_coeff(cfg, n, unit);
    return min_lr + coeff * (lr - min_lr);
}

double lt_lr_at(const LtConfig *cfg, long step) { return lr_at(cfg, step, 1, 1); }

double lt_lr_at_samples(const LtConfig *cfg, uint64_t consumed, long batch) {
    return lr_at(cfg, (long long)consumed, batch, cfg->train.global_batch_size);
}

double lt_clip_coef(double clip, double norm) {
    if (clip <= 0.0) return 1.0;
    double c = clip / (norm + 1e-6);
    return c < 1.0 ? c : 1.0;
}
