/* test_overlap.c - gradient buckets on one process (CPU backend): how the
 * flat space is cut (parallel.bucket_size), and when each bucket's reduction
 * starts with overlap_grad_reduce - once per step, in the last micro batch,
 * right after the backward made its last gradient final, last layer's bucket
 * first; never from the LM head's share of the tied embedding in the
 * forward. The multi-rank results (bit-identity of every switch) are
 * tests/test_overlap.sh's. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "grads.h"
#include "model.h"
#include "optim.h"
#include "test.h"

#define MAXB 64

/* What the wrapped gradient hook saw. */
static struct {
    LtGradReadyFn inner;
    void *inner_ctx;
    LtOptimizer *opt;
    LtModel *model;
    int calls;            /* hook calls so far */
    int fired_at[MAXB];   /* call number at which bucket k started (-1: not yet) */
    int fired_group[MAXB]; /* the group whose call started it */
    int order[MAXB], nfired;
    int in_forward;       /* a bucket started inside a forward */
    int forward_now;
} S;

static int started(int k) { return S.opt->greq[k].op != NULL; }

static void spy(void *ctx, int first, int last) {
    S.inner(ctx, first, last);
    S.calls++;
    for (int k = 0; k < S.opt->nbuckets; k++) {
        if (!started(k) || S.fired_at[k] >= 0) continue;
        S.fired_at[k] = S.calls;
        S.fired_group[k] = first;
        S.order[S.nfired++] = k;
        if (S.forward_now) S.in_forward = 1;
    }
}

static void random_tokens(int32_t *x, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) x[i] = (int32_t)(lt_uniform_at(seed, 7, (uint64_t)i) * V);
}

/* A model of `layers` layers with its optimizer on one rank (no MPI). */
typedef struct {
    LtBackend *be;
    LtModel *m;
    LtComm *dp;
    LtOptimizer *o;
    float *host;
} Rig;

static Rig rig_make(int layers) {
    LtModelDims d = {.num_layers = layers, .hidden = 16, .heads = 2, .ffn = 64, .seq_len = 8,
                     .max_pos = 12, .vocab = 37, .padded_vocab = 128};
    Rig r;
    r.be = lt_backend_cpu_create(LT_F32, 1);
    r.m = lt_model_create(r.be, &d, 2, d.seq_len, NULL);
    r.host = lt_malloc(r.m->table.total * sizeof(float));
    lt_params_init(&r.m->table, 5, r.host);
    lt_model_set_params(r.m, r.host);
    LtConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.optimizer.beta1 = 0.9;
    cfg.optimizer.beta2 = 0.95;
    cfg.optimizer.eps = 1e-8;
    r.dp = lt_comm_world("dp");
    r.o = lt_optim_create(r.be, &r.m->table, &cfg, r.dp, r.m->flat, r.host);
    return r;
}

static void rig_free(Rig *r) {
    lt_optim_destroy(r->o);
    lt_comm_free(r->dp);
    lt_model_destroy(r->m);
    lt_backend_destroy(r->be);
    free(r->host);
}

/* A 4-layer model, buckets of about one layer. */
static void test_bucket_readiness(void) {
    Rig rig = rig_make(4);
    LtModel *m = rig.m;
    LtOptimizer *o = rig.o;
    const LtModelDims d = m->d;
    /* what lt_optim_set_overlap does with several data-parallel ranks (with one it
     * leaves the switch off: there is nothing to reduce) */
    o->overlap_grad = 1;
    const LtParamTable *t = &m->table;
    const size_t layer = t->p[t->layer_first[1]].offset - t->p[t->layer_first[0]].offset;
    LtGrads *g = lt_grads_create(m, o, NULL, layer);
    REQUIRE(o->nbuckets >= 4 && o->nbuckets < MAXB, "%d buckets for 4 layers of %zu", o->nbuckets,
            layer);
    /* bounds at group starts, the last bucket up to the padded end */
    for (int k = 1; k < o->nbuckets; k++) {
        int at_group = 0;
        for (int i = 0; i < t->n; i++)
            at_group |= lt_model_param_group(m, i) == i && t->p[i].offset == o->bounds[k];
        CHECK(at_group, "bound %d (%zu) inside a parameter group", k, o->bounds[k]);
    }
    CHECK(o->bounds[o->nbuckets] == m->flat, "last bound %zu != flat %zu",
          o->bounds[o->nbuckets], m->flat);
    memset(&S, 0, sizeof S);
    for (int k = 0; k < MAXB; k++) S.fired_at[k] = -1;
    S.inner = m->grads_ready;
    S.inner_ctx = m->grads_ready_ctx;
    S.opt = o;
    S.model = m;
    lt_model_set_grad_hook(m, spy, S.inner_ctx);
    const int M = 3, N = 2 * d.seq_len;
    int32_t in[16], tgt[16];
    int calls_before_last = 0;
    lt_model_zero_grads(m);
    for (int mb = 0; mb < M; mb++) {
        random_tokens(in, N, d.vocab, 11 + (uint64_t)mb);
        random_tokens(tgt, N, d.vocab, 21 + (uint64_t)mb);
        if (mb == M - 1) calls_before_last = S.calls;
        lt_model_set_final_pass(m, mb == M - 1);
        S.forward_now = 1;
        lt_model_chunk_forward(m, 0, 0, in, tgt, 1.0f / (M * N), NULL);
        S.forward_now = 0;
        lt_model_chunk_backward(m, 0, 0, NULL);
    }
    lt_model_set_final_pass(m, 0);
    CHECK(S.nfired == o->nbuckets, "%d of %d buckets started during backward", S.nfired,
          o->nbuckets);
    CHECK(!S.in_forward, "a bucket started in the forward (the LM head's share of wte)");
    for (int k = 0; k < S.nfired; k++) {
        CHECK(S.order[k] == o->nbuckets - 1 - k, "start %d was bucket %d (want reverse order)", k,
              S.order[k]);
        const int b = S.order[k];
        CHECK(S.fired_at[b] > calls_before_last, "bucket %d started before the last micro batch",
              b);
        /* after its last gradient: the group that started it is its lowest one */
        CHECK(t->p[S.fired_group[b]].offset == o->bounds[b], "bucket %d started by group at %zu",
              b, t->p[S.fired_group[b]].offset);
    }
    lt_grads_finalize(g);
    for (int k = 0; k < o->nbuckets; k++) CHECK(!started(k), "bucket %d left in flight", k);
    lt_model_set_grad_hook(m, S.inner, S.inner_ctx);
    lt_grads_destroy(g);
    rig_free(&rig);
}

/* parallel.bucket_size larger than the model: one bucket, the whole space. */
static void test_one_bucket(void) {
    Rig rig = rig_make(2);
    LtGrads *g = lt_grads_create(rig.m, rig.o, NULL, 40000000);
    CHECK(rig.o->nbuckets == 1 && rig.o->bounds[0] == 0 && rig.o->bounds[1] == rig.m->flat,
          "%d buckets", rig.o->nbuckets);
    lt_grads_destroy(g);
    rig_free(&rig);
}

int main(void) {
    RUN(test_bucket_readiness);
    RUN(test_one_bucket);
    return test_summary();
}
