/* model_grads.c - the model's parameter and gradient buffers as the optimizer
 * and the gradient finalisation (grads.h) see them: the gradient groups (the
 * unit a bucket hands over) and where each parameter's gradient accumulates,
 * the gradient-ready and parameter-needed hooks, parameters set from the
 * host, zeroing, and the sums over TP of the gradients sequence parallelism
 * leaves partial. */
#include "model.h"

#include "common.h"
#include "model/model_internal.h"

/* Elements from the first parameter of [first, last] to the end of the last. */
static size_t group_span(const LtParamTable *t, int first, int last) {
    return t->p[last].offset + t->p[last].numel - t->p[first].offset;
}

/* Parameter groups (the unit a bucket hands over): the embeddings (wte and
 * wpe, whichever are held), each layer, the final LayerNorm. */
static int group_first(const LtParamTable *t, int i) {
    if (t->idx_wte >= 0 && i <= emb_last(t)) return t->idx_wte;
    if (t->idx_lnf >= 0 && i >= t->idx_lnf) return t->idx_lnf; /* ln_f (and lm_head) */
    int l = 0;
    while (l + 1 < t->layers && t->layer_first[l + 1] <= i) l++;
    return t->layer_first[l];
}

/* Point every parameter's gradient into the flat buffer, or (buckets) into one
 * bucket shared by the groups; with pipelining the embedding group gets a
 * buffer of its own that lives through the step (see model.h). */
void lt_mdl_setup_grads(LtModel *m, int buckets) {
    const LtParamTable *t = &m->table;
    m->in->buckets = buckets;
    m->in->gptr = lt_calloc(sizeof(float *) * (size_t)t->n);
    if (!buckets) {
        m->in->grads_len = m->flat;
        m->grads = f32_alloc(m, m->in->grads_len, &m->mem.grads);
        for (int i = 0; i < t->n; i++) m->in->gptr[i] = m->grads + t->p[i].offset;
        return;
    }
    const int own_emb = m->pp > 1 && t->idx_wte >= 0 && !m->d.untied;
    size_t len = 0;
    for (int i = 0; i < t->n;) {
        int f = group_first(t, i), last = i;
        while (last + 1 < t->n && group_first(t, last + 1) == f) last++;
        size_t span = group_span(t, f, last);
        if (own_emb && f == t->idx_wte) m->in->emb_grads_len = span;
        else if (span > len) len = span;
        const int layer = f >= t->idx_layer0 && (t->idx_lnf < 0 || f < t->idx_lnf) &&
                          (t->idx_wte < 0 || f > emb_last(t));
        if (layer && span > m->in->layer_group_len) m->in->layer_group_len = span;
        i = last + 1;
    }
    m->in->grads_len = len ? len : 1;
    m->grads = f32_alloc(m, m->in->grads_len, &m->mem.grads);
    if (own_emb) m->in->emb_grads = f32_alloc(m, m->in->emb_grads_len, &m->mem.grads);
    for (int i = 0; i < t->n; i++) {
        int first = group_first(t, i);
        float *base = own_emb && first == t->idx_wte ? m->in->emb_grads : m->grads;
        m->in->gptr[i] = base + (t->p[i].offset - t->p[first].offset);
    }
}

/* dst (compute dtype) = n fp32 host values, staged through a temporary fp32
 * device buffer and cast (not in the step loop). */
static void set_from_host(LtModel *m, void *dst, const float *host, size_t n) {
    LtBackend *be = m->be;
    if (!n) return;
    float *tmp = be->ops->alloc(be, n * sizeof(float));
    be->ops->upload(be, tmp, host, n * sizeof(float));
    be->ops->act_from_f32(be, dst, tmp, n);
    be->ops->synchronize(be);
    be->ops->free(be, tmp);
}

void lt_model_set_params(LtModel *m, const float *host) {
    set_from_host(m, m->params, host, m->table.total);
}

void lt_model_set_expert_params(LtModel *m, const float *host) {
    set_from_host(m, m->eparams, host, m->etable.total);
}

void lt_model_set_grad_hook(LtModel *m, LtGradReadyFn fn, void *ctx) {
    m->grads_ready = fn;
    m->grads_ready_ctx = ctx;
}

void lt_model_set_param_hook(LtModel *m, LtParamNeedFn fn, void *ctx) {
    m->in->params_needed = fn;
    m->in->params_needed_ctx = ctx;
}

void lt_model_set_final_pass(LtModel *m, int on) { m->final_pass = on; }
int lt_model_param_group(const LtModel *m, int i) { return group_first(&m->table, i); }

int lt_model_grad_buckets(const LtModel *m) { return m->in->buckets; }
size_t lt_model_bucket_len(const LtModel *m) {
    return m->in->grads_len > m->in->emb_grads_len ? m->in->grads_len : m->in->emb_grads_len;
}
size_t lt_model_bucket_piece(const LtModel *m) {
    return m->in->layer_group_len ? m->in->layer_group_len : lt_model_bucket_len(m);
}
float *lt_model_grad(const LtModel *m, int i) { return m->in->gptr[i]; }
float *lt_model_emb_grads(const LtModel *m, size_t *len) {
    *len = m->in->emb_grads_len;
    return m->in->emb_grads;
}

void lt_model_zero_grads(LtModel *m) {
    m->be->ops->zero(m->be, m->grads, m->in->grads_len * sizeof(float));
    if (m->in->emb_grads)
        m->be->ops->zero(m->be, m->in->emb_grads, m->in->emb_grads_len * sizeof(float));
    if (m->egrads) m->be->ops->zero(m->be, m->egrads, m->eflat * sizeof(float));
}

void lt_model_sp_reduce_grads(LtModel *m, int first, int last) {
    if (!m->tp) return;
    for (int i = first; i <= last; i++)
        if (m->in->sp_partial[i])
            lt_comm_all_reduce(m->tp, grad(m, i), m->table.p[i].numel, LT_COMM_F32, LT_COMM_SUM);
}
