/* grads.c - gradient finalisation (see grads.h). */
#include "grads.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* A bucket of the flat gradient space (stages 0/1): whole parameter groups. */
typedef struct {
    int groups;   /* parameter groups in the bucket */
    int ready;    /* of them final this step */
    int deferred; /* holds the tied embedding shared with another stage: reduced only after
                   * the embedding group's sum, in lt_grads_finalize */
} Bucket;

struct LtGrads {
    LtModel *model;
    LtOptimizer *opt;
    const LtComm *emb; /* NULL: no tied embedding across stages */
    int nb;
    Bucket *b;
    int *need;         /* [group first]: final-pass hook calls that make the group final */
    int *calls;        /* [group first]: final-pass calls seen this step */
    unsigned char *sp_done; /* [group first]: sequence-parallel sums done this step */
    /* the routed experts' own buffers (lt_grads_set_experts; NULL: none, or
     * their reduction not overlapped): each MoE layer's expert range is final
     * with its layer's group in a chunk's last micro batch, and a bucket of
     * the expert optimizer starts when all its layers are */
    LtOptimizer *eopt;
    int *ebucket;            /* [group first]: the layer's expert bucket, -1 without experts */
    Bucket *eb;              /* per expert bucket: its MoE layers, of them final this step */
    unsigned char *edone;    /* [group first]: the layer's experts final this step */
    size_t *ebegin, *eend;   /* [group first]: the layer's expert range (flat) */
};

/* Last table index of the group starting at first. */
static int group_last(const LtModel *m, int first) {
    int last = first;
    while (last + 1 < m->table.n && lt_model_param_group(m, last + 1) == first) last++;
    return last;
}

/* ZeRO-2: a finished parameter group [first, last] of the bucket goes to the
 * optimizer's shards (after its sequence-parallel sums). */
static void zero2_group_ready(LtGrads *g, int first, int last) {
    const LtParamTable *t = &g->model->table;
    const size_t begin = t->p[first].offset, len = t->p[last].offset + t->p[last].numel - begin;
    lt_model_sp_reduce_grads(g->model, first, last);
    lt_optim_reduce_bucket(g->opt, g->model->grads, begin, len);
}

/* The experts of the layer whose group starts at first are final (its group
 * is, in a chunk's last micro batch): their bucket starts once all its
 * layers are. */
static void experts_final(LtGrads *g, int first) {
    const int k = g->eopt ? g->ebucket[first] : -1;
    if (k < 0 || g->edone[first]) return;
    g->edone[first] = 1;
    if (++g->eb[k].ready == g->eb[k].groups && g->eopt->overlap_grad)
        lt_optim_bucket_start(g->eopt, k, g->model->egrads);
}

/* The group's gradient is final: its sequence-parallel sums now; when it
 * completes its bucket, the bucket's reduction starts (with
 * overlap_grad_reduce; else lt_grads_finalize starts every bucket, in the
 * same calls). */
static void group_final(LtGrads *g, int first) {
    LtModel *m = g->model;
    lt_model_sp_reduce_grads(m, first, group_last(m, first));
    g->sp_done[first] = 1;
    const int k = lt_optim_bucket_of(g->opt, m->table.p[first].offset);
    Bucket *b = &g->b[k];
    if (++b->ready < b->groups || b->deferred || !g->opt->overlap_grad) return;
    lt_optim_bucket_start(g->opt, k, m->grads);
}

/* The model's hook: every micro batch with ZeRO-2's buckets; otherwise only
 * the calls of a chunk's last micro batch matter, once per group (twice for
 * the embeddings when this rank also holds the tied LM head: its share comes
 * in the loss head's forward, the embedding's in the last backward). */
static void on_group_ready(void *ctx, int first, int last) {
    LtGrads *g = ctx;
    if (lt_model_grad_buckets(g->model)) {
        zero2_group_ready(g, first, last);
        if (g->model->final_pass) experts_final(g, first);
        return;
    }
    if (!g->model->final_pass || ++g->calls[first] != g->need[first]) return;
    group_final(g, first);
    experts_final(g, first);
}

/* A forward waits for its group's parameter gather, and a MoE layer's also
 * for its experts'. */
static void on_params_needed(void *ctx, int first, int last) {
    LtGrads *g = ctx;
    const LtParam *p = g->model->table.p;
    lt_optim_params_wait(g->opt, p[first].offset, p[last].offset + p[last].numel);
    if (g->eopt && g->ebucket[first] >= 0)
        lt_optim_params_wait(g->eopt, g->ebegin[first], g->eend[first]);
}

/* Taking groups in backward order: the group starting at begin closes the
 * bucket above it (whose lower end *top moves down to begin, written to *cut)
 * once that bucket spans bucket_size elements; 1 when it cut. */
static int cut_before(size_t begin, size_t *top, size_t bucket_size, size_t *cut) {
    if (begin == 0 || *top - begin < (bucket_size ? bucket_size : 1)) return 0;
    *cut = *top = begin;
    return 1;
}

/* o's buckets from cuts[0..nc) (taken in backward order, so descending) over
 * its flat space; the last bucket also holds the padding up to o->flat. */
static void set_cut_buckets(LtOptimizer *o, const size_t *cuts, int nc) {
    size_t *bounds = lt_malloc(sizeof(size_t) * (size_t)(nc + 2));
    bounds[0] = 0;
    for (int k = 0; k < nc; k++) bounds[k + 1] = cuts[nc - 1 - k];
    bounds[nc + 1] = o->flat;
    lt_optim_set_buckets(o, bounds, nc + 1);
    free(bounds);
}

/* Buckets over the flat space: parameter groups in backward order (from the
 * end of the table), a bucket closed once it spans bucket_size elements; the
 * last bucket also holds the padding up to flat. Sets the optimizer's
 * buckets. */
static void make_buckets(LtGrads *g, size_t bucket_size) {
    const LtModel *m = g->model;
    const LtParamTable *t = &m->table;
    size_t *cuts = lt_malloc(sizeof(size_t) * (size_t)(t->n + 2)), top = m->flat;
    int nc = 0;
    for (int i = t->n - 1; i >= 0;) {
        const int f = lt_model_param_group(m, i);
        nc += cut_before(t->p[f].offset, &top, bucket_size, cuts + nc);
        i = f - 1;
    }
    set_cut_buckets(g->opt, cuts, nc);
    free(cuts);
}

/* Which groups each bucket holds, and what makes each group final. */
static void count_groups(LtGrads *g) {
    const LtModel *m = g->model;
    const LtParamTable *t = &m->table;
    g->nb = g->opt->nbuckets;
    g->b = lt_calloc(sizeof(Bucket) * (size_t)g->nb);
    const int both = m->pp == 1 && t->idx_head < 0 && t->idx_wte >= 0; /* embedding + tied head */
    for (int i = 0; i < t->n; i++) {
        if (lt_model_param_group(m, i) != i) continue;
        Bucket *b = &g->b[lt_optim_bucket_of(g->opt, t->p[i].offset)];
        b->groups++;
        if (i == t->idx_wte && g->emb) b->deferred = 1;
        g->need[i] = i == t->idx_wte && both ? 2 : 1;
    }
}

LtGrads *lt_grads_create(LtModel *m, LtOptimizer *opt, const LtComm *emb, size_t bucket_size) {
    LtGrads *g = lt_calloc(sizeof *g);
    g->model = m;
    g->opt = opt;
    g->emb = emb && lt_comm_member(emb) && m->table.idx_wte >= 0 ? emb : NULL;
    const int n = m->table.n;
    g->need = lt_calloc(sizeof(int) * (size_t)n);
    g->calls = lt_calloc(sizeof(int) * (size_t)n);
    g->sp_done = lt_calloc((size_t)n);
    make_buckets(g, bucket_size ? bucket_size : 1);
    count_groups(g);
    if (lt_model_grad_buckets(m))
        lt_optim_set_bucket_size(opt, lt_model_bucket_len(m), lt_model_bucket_piece(m));
    lt_model_set_grad_hook(m, on_group_ready, g);
    lt_model_set_param_hook(m, on_params_needed, g);
    return g;
}

void lt_grads_set_experts(LtGrads *g, LtOptimizer *eopt, size_t bucket_size) {
    const LtModel *m = g->model;
    const LtParamTable *t = &m->table, *et = &m->etable;
    if (!et->n || !eopt || (!eopt->overlap_grad && !eopt->overlap_param)) return;
    const int n = t->n, L = t->layers;
    g->ebucket = lt_malloc(sizeof(int) * (size_t)n);
    g->ebegin = lt_calloc(sizeof(size_t) * (size_t)n);
    g->eend = lt_calloc(sizeof(size_t) * (size_t)n);
    g->edone = lt_calloc((size_t)n);
    for (int i = 0; i < n; i++) g->ebucket[i] = -1;
    /* cuts between MoE layers' expert ranges, in backward order, as make_buckets */
    size_t *cuts = lt_malloc(sizeof(size_t) * (size_t)(L + 1)), top = eopt->flat;
    int nc = 0;
    for (int l = L - 1; l >= 0; l--) {
        const int f = et->layer_first[l], e = et->layer_first[l + 1];
        if (f == e) continue; /* a dense layer */
        g->ebegin[t->layer_first[l]] = et->p[f].offset;
        g->eend[t->layer_first[l]] = et->p[e - 1].offset + et->p[e - 1].numel;
        nc += cut_before(et->p[f].offset, &top, bucket_size, cuts + nc);
    }
    set_cut_buckets(eopt, cuts, nc);
    free(cuts);
    g->eb = lt_calloc(sizeof(Bucket) * (size_t)eopt->nbuckets);
    for (int l = 0; l < L; l++) {
        const int first = t->layer_first[l];
        if (et->layer_first[l] == et->layer_first[l + 1]) continue;
        g->ebucket[first] = lt_optim_bucket_of(eopt, g->ebegin[first]);
        g->eb[g->ebucket[first]].groups++;
    }
    g->eopt = eopt;
}

void lt_grads_destroy(LtGrads *g) {
    if (!g) return;
    lt_model_set_grad_hook(g->model, NULL, NULL);
    lt_model_set_param_hook(g->model, NULL, NULL);
    free(g->ebucket);
    free(g->ebegin);
    free(g->eend);
    free(g->edone);
    free(g->eb);
    free(g->b);
    free(g->need);
    free(g->calls);
    free(g->sp_done);
    free(g);
}

/* The tied embedding: the first stage's input-embedding gradient and the last
 * stage's LM-head gradient summed over the embedding group (before the
 * data-parallel reduction; the sums commute). With buckets the embedding
 * group kept a buffer of its own through the step: hand it over now. */
static void reduce_tied_embedding(LtGrads *g) {
    if (!g->emb) return;
    LtModel *m = g->model;
    const LtParam *wte = &m->table.p[m->table.idx_wte];
    lt_comm_all_reduce(g->emb, lt_model_grad(m, m->table.idx_wte), wte->numel, LT_COMM_F32,
                       LT_COMM_SUM);
    size_t len;
    float *own = lt_model_emb_grads(m, &len);
    if (own) lt_optim_reduce_bucket(g->opt, own, wte->offset, len);
}

/* Stages 0/1: what the backward did not finish - the sequence-parallel sums
 * of groups the hook did not see final (the tied embedding's deferred bucket,
 * or a step run without the pipeline's final-pass marks) - then the buckets
 * not started yet, from the last to the first, and the wait for all. */
void lt_grads_finalize(LtGrads *g) {
    LtModel *m = g->model;
    if (g->eopt) { /* the expert buckets not started are started by lt_optim_reduce_grads */
        memset(g->edone, 0, (size_t)m->table.n);
        for (int k = 0; k < g->eopt->nbuckets; k++) g->eb[k].ready = 0;
    }
    if (lt_model_grad_buckets(m)) { /* ZeRO-2: reduced group by group during backward */
        reduce_tied_embedding(g);
        lt_optim_reduce_grads(g->opt, m->grads);
        return;
    }
    for (int i = 0; i < m->table.n; i++)
        if (lt_model_param_group(m, i) == i && !g->sp_done[i])
            lt_model_sp_reduce_grads(m, i, group_last(m, i));
    reduce_tied_embedding(g);
    lt_optim_reduce_grads(g->opt, m->grads);
    for (int k = 0; k < g->nb; k++) g->b[k].ready = 0;
    memset(g->calls, 0, sizeof(int) * (size_t)m->table.n);
    memset(g->sp_done, 0, (size_t)m->table.n);
}

/* Both copies applied the same summed gradient, but their data-parallel
 * reductions ran over buffers of different lengths, and a library may sum an
 * element in an order that depends on its position; this keeps the copies
 * bit-identical whatever the library does. The copy's own gather (overlapped
 * with the next forward) must have landed before it is overwritten, and the
 * first stage's before it is sent. */
void lt_grads_sync_tied(LtGrads *g) {
    if (!g->emb) return;
    LtModel *m = g->model;
    const LtParam *p = &m->table.p[m->table.idx_wte];
    lt_optim_params_wait(g->opt, p->offset, p->offset + p->numel);
    lt_comm_broadcast(g->emb, (char *)m->params + lt_act_bytes(m->be, p->offset), p->numel,
                      lt_comm_act_type(m->be), 0);
}
