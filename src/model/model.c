/* model.c - creating and destroying an LtModel (model.h): the parameter
 * table of this stage and TP rank, which layers are MoE and sliding-window
 * layers, the activation slots (recomputation's shared sets), the work
 * buffers of the forward, backward and loss head, each counted in m->mem;
 * and where the stage's chunks sit in the whole model. The forward and
 * backward themselves, and the rest of the model, are in the other model_*.c
 * files (model_internal.h lists them). */
#include "model.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/model_internal.h"
#include "rope.h"

int lt_model_lm_head_chunk(size_t N, size_t Vl, size_t act_bytes, int requested) {
    if (N == 0) return 1;
    if (requested > 0) return (size_t)requested < N ? requested : (int)N;
    size_t fit = LT_LM_HEAD_AUTO_BYTES / (Vl * act_bytes > 0 ? Vl * act_bytes : 1);
    if (fit < LT_LM_HEAD_MIN_ROWS) fit = LT_LM_HEAD_MIN_ROWS;
    if (fit >= N) return (int)N;
    size_t chunks = (N + fit - 1) / fit, rows = (N + chunks - 1) / chunks; /* equal chunks */
    return (int)(rows < LT_LM_HEAD_MIN_ROWS ? LT_LM_HEAD_MIN_ROWS : rows);
}

/* One set of layer activations; fields in `share` (non-NULL) are reused. */
static void layer_acts_alloc(LtModel *m, LtLayerActs *la, const LtLayerActs *share, size_t *a) {
    const size_t N = (size_t)m->B * m->T, C = m->d.hidden, F = m->in->ffn_max,
                 R = m->boundary / C, CL = (size_t)m->in->heads_local * (size_t)lt_dims_head_dim(&m->d);
    la->ln1 = act_alloc(m, N * C, a);
    la->qkv = act_alloc(m, N * (size_t)m->in->qkv_local, a);
    la->atty = share && share->atty ? share->atty : act_alloc(m, N * CL, a);
    la->r2 = act_alloc(m, R * C, a);
    la->ln2 = act_alloc(m, N * C, a);
    la->fch_pre = act_alloc(m, N * F * (is_llama(m) ? 2 : 1), a); /* llama: gate | up */
    la->fch = act_alloc(m, N * F, a);
    la->mean1 = is_llama(m) ? NULL : f32_alloc(m, R, a); /* RMSNorm keeps no mean */
    la->rstd1 = f32_alloc(m, R, a);
    la->mean2 = is_llama(m) ? NULL : f32_alloc(m, R, a);
    la->rstd2 = f32_alloc(m, R, a);
    la->lse = f32_alloc(m, N * (size_t)m->in->heads_local, a);
    if (m->d.qk_norm) {
        const size_t qk = (size_t)m->in->heads_local + (size_t)m->in->kv_local;
        la->qk_in = act_alloc(m, N * qk * (size_t)lt_dims_head_dim(&m->d), a);
        la->qk_rstd = f32_alloc(m, N * qk, a);
    }
    if (m->in->moe_any) { /* every slot layer: a slot runs the chunks in turn */
        const LtMoeShape s = moe_shape(m, m->B);
        la->moe = lt_calloc(sizeof *la->moe);
        lt_moe_acts_alloc(m->be, &s, la->moe, a);
    }
}

static void layer_acts_free(LtModel *m, LtLayerActs *la, int keep_atty) {
    void *ps[] = {la->ln1, la->qkv, keep_atty ? NULL : la->atty, la->r2, la->ln2, la->fch_pre,
                  la->fch, la->mean1, la->rstd1, la->mean2, la->rstd2, la->lse,
                  la->qk_in, la->qk_rstd};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) m->be->ops->free(m->be, ps[i]);
    if (la->moe) {
        lt_moe_acts_free(m->be, la->moe);
        free(la->moe);
    }
}

/* Activation slots. Recomputation: full keeps only each layer's input (x[j])
 * per slot and shares one set of layer activations that backward refills
 * layer by layer; selective shares the attention output (recomputed from qkv
 * in backward). */
static void setup_slots(LtModel *m, int nslots) {
    const size_t N = (size_t)m->B * m->T;
    const int n = m->max_chunk_layers, nx = n > 0 ? n : 1; /* x[0]: the chunk input */
    size_t *a = &m->mem.activations;
    if (m->recompute == LT_MODEL_RECOMPUTE_FULL) layer_acts_alloc(m, &m->in->shared, NULL, a);
    if (m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE)
        m->in->shared.atty =
            act_alloc(m, N * (size_t)m->in->heads_local * (size_t)lt_dims_head_dim(&m->d), a);
    m->nslots = nslots;
    m->slot = lt_calloc(sizeof(LtActSlot) * (size_t)nslots);
    for (int s = 0; s < nslots; s++) {
        size_t at_start = *a;
        LtActSlot *sl = &m->slot[s];
        sl->x = lt_calloc(sizeof(void *) * (size_t)nx);
        sl->layer = lt_calloc(sizeof(LtLayerActs) * (size_t)nx);
        for (int j = 0; j < nx; j++) sl->x[j] = act_alloc(m, m->boundary, a);
        for (int j = 0; j < n; j++) {
            if (m->recompute == LT_MODEL_RECOMPUTE_FULL)
                sl->layer[j] = m->in->shared;
            else
                layer_acts_alloc(m, &sl->layer[j],
                                 m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE ? &m->in->shared
                                                                               : NULL,
                                 a);
        }
        if (m->d.moe.shared_gate && m->in->moe_any) {
            sl->gate_y = lt_calloc(sizeof(void *) * (size_t)nx);
            sl->gate_s = lt_calloc(sizeof(float *) * (size_t)nx);
            for (int j = 0; j < n; j++) {
                sl->gate_y[j] = act_alloc(m, m->boundary, a);
                sl->gate_s[j] = f32_alloc(m, m->boundary / (size_t)m->d.hidden, a);
            }
        }
        sl->dout = act_alloc(m, m->boundary, a);
        sl->tokens = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        *a += N * sizeof(int32_t);
        if (s == 0) m->in->slot_bytes = *a - at_start;
    }
}

/* The rotary table (T, HD/2, 2) of cos, sin on the device (llama). */
static float *rope_setup(LtModel *m, size_t *acc) {
    const int HD = lt_dims_head_dim(&m->d);
    const size_t n = (size_t)m->T * (size_t)HD;
    float *host = lt_malloc(n * sizeof(float));
    lt_rope_table(host, m->T, HD, m->d.rope_base, &m->d.rope);
    float *dev = f32_alloc(m, n, acc);
    m->be->ops->upload(m->be, dev, host, n * sizeof(float));
    free(host);
    return dev;
}

/* Sliding-window attention (model.window_size): the per-slot starts when a
 * held layer is windowed. */
static void setup_windows(LtModel *m) {
    const int n = m->table.layers;
    int any = 0;
    m->in->swa = lt_calloc((size_t)(n > 0 ? n : 1));
    for (int l = 0; l < n; l++)
        any |= m->in->swa[l] =
            (unsigned char)lt_dims_window_layer(&m->d, lt_params_global_layer(&m->table, l));
    if (!any) return;
    const size_t N = (size_t)m->B * m->T;
    m->in->host_kw = lt_malloc(N * sizeof(int32_t));
    for (int s = 0; s < m->nslots; s++) {
        m->slot[s].kwin = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        m->mem.activations += N * sizeof(int32_t);
    }
}

/* Which held layers are MoE layers and each one's MLP width on this rank
 * (the shared expert's in an MoE layer, 0 without one). */
static void setup_layers(LtModel *m) {
    const int n = m->table.layers, tp = m->in->tp_size;
    m->in->moe = lt_calloc((size_t)(n > 0 ? n : 1));
    m->in->ffn_loc = lt_calloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    m->in->moe_stats = lt_calloc(sizeof(LtMoeStats) * (size_t)(n > 0 ? n : 1));
    m->in->moe_tokens = lt_calloc(sizeof(double) * (size_t)(n > 0 ? n : 1) *
                                  (size_t)(m->d.moe.experts > 0 ? m->d.moe.experts : 1));
    m->in->ffn_max = 1;
    for (int l = 0; l < n; l++) {
        m->in->moe[l] = (unsigned char)lt_dims_moe_layer(&m->d, lt_params_global_layer(&m->table, l));
        m->in->moe_any |= m->in->moe[l];
        m->in->ffn_loc[l] = (m->in->moe[l] ? m->d.moe.shared_ffn : m->d.ffn) / tp;
        m->in->moe_stats[l].layer = lt_params_global_layer(&m->table, l);
        if (m->in->ffn_loc[l] > m->in->ffn_max) m->in->ffn_max = m->in->ffn_loc[l];
    }
}

/* The parameters whose gradient is partial over TP (model_grads.c reduces them). */
static void mark_sp_partial(LtModel *m) {
    m->in->sp_partial = lt_calloc((size_t)m->table.n);
    for (int i = 0; i < m->table.n; i++) { /* weights that see only this rank's tokens: the
                                            * norms', the router's and the shared expert
                                            * gate's, the (whole) experts'
                                            * when they are in the table (EP 1: under EP the
                                            * expert-data-parallel sum covers TP); and (any
                                            * TP) only this rank's heads: q/k norms */
        const char *nm = m->table.p[i].name;
        const int heads = strstr(nm, ".attn.q_norm.") || strstr(nm, ".attn.k_norm.");
        m->in->sp_partial[i] = (m->sp && (strstr(nm, "ln_") || strstr(nm, ".mlp.router.") ||
                                          strstr(nm, ".mlp.shared_gate.") ||
                                          strstr(nm, ".mlp.experts."))) ||
                               (m->tp && heads);
    }
}

/* Refuse (exit 2) a model whose block needs kernels the backend lacks. */
static void check_backend(const LtBackend *be, const LtModelDims *d) {
    const LtBackendOps *o = be->ops;
    if (d->arch == LT_ARCH_LLAMA && (!o->rmsnorm_fwd || !o->rmsnorm_bwd || !o->swiglu_fwd ||
                                     !o->swiglu_bwd || !o->rope))
        lt_input_error("model.arch=llama: the %s backend has no RMSNorm, SwiGLU or rotary "
                       "embedding kernels",
                       be->ops->name);
    if (d->qk_norm && d->arch != LT_ARCH_LLAMA)
        lt_input_error("model.qk_layernorm needs model.arch=llama (its RMSNorm)");
    if (d->qk_norm && (!o->qk_norm_fwd || !o->qk_norm_bwd))
        lt_input_error("model.qk_layernorm: the %s backend has no per-head query/key norm kernels",
                       be->ops->name);
    if (d->moe.experts > 0 && !lt_moe_backend_ok(be))
        lt_input_error("model.num_experts=%d: the %s backend has no mixture-of-experts kernels "
                       "yet; train MoE models with train.device=cpu",
                       d->moe.experts, be->ops->name);
}

LtModel *lt_model_create(LtBackend *be, const LtModelDims *d, int B, int T,
                         const LtModelOptions *opt) {
    check_backend(be, d);
    LtModel *m = lt_calloc(sizeof *m);
    m->in = lt_calloc(sizeof *m->in);
    m->in->eod = -1;
    m->in->loss_weight = 1.0f;
    m->in->moe_aux_weight = 1.0f;
    if (opt && opt->ep && lt_comm_size(opt->ep) > 1) {
        LT_CHECK(d->moe.experts % lt_comm_size(opt->ep) == 0);
        m->in->ep = opt->ep;
    }
    if (opt && opt->etp && lt_comm_size(opt->etp) > 1) {
        LT_CHECK(d->moe.ffn % lt_comm_size(opt->etp) == 0);
        m->in->etp = opt->etp;
    }
    m->be = be;
    m->d = *d;
    m->B = B;
    m->T = T;
    m->tp = opt && opt->tp && lt_comm_size(opt->tp) > 1 ? opt->tp : NULL;
    m->in->tp_size = m->tp ? lt_comm_size(m->tp) : 1;
    m->in->tp_rank = m->tp ? lt_comm_rank(m->tp) : 0;
    LtStagePlace place = {1, 0, 1, {0}};
    if (opt && opt->place.pp > 0) place = opt->place;
    m->pp = place.pp;
    m->pp_rank = place.pp_rank;
    m->vpp = place.vpp;
    if (m->in->ep || m->in->etp) /* only this rank's experts (slices), in a table of their own */
        lt_params_build_split(&m->table, &m->etable, d, m->in->tp_size, m->in->tp_rank, place,
                              m->in->ep ? lt_comm_size(m->in->ep) : 1,
                              m->in->ep ? lt_comm_rank(m->in->ep) : 0,
                              m->in->etp ? lt_comm_size(m->in->etp) : 1,
                              m->in->etp ? lt_comm_rank(m->in->etp) : 0);
    else
        lt_params_build_stage(&m->table, d, m->in->tp_size, m->in->tp_rank, place);
    m->max_chunk_layers = m->table.max_chunk_layers;
    m->in->heads_local = d->heads / m->in->tp_size;
    m->in->kv_local = lt_dims_kv_heads(d) / m->in->tp_size;
    m->in->qkv_local = (m->in->heads_local + 2 * m->in->kv_local) * lt_dims_head_dim(d);
    setup_layers(m);
    m->vocab_local = d->padded_vocab / m->in->tp_size;
    m->in->vocab_start = m->in->tp_rank * m->vocab_local;
    m->in->vocab_valid = d->vocab - m->in->vocab_start;
    if (m->in->vocab_valid < 0) m->in->vocab_valid = 0;
    if (m->in->vocab_valid > m->vocab_local) m->in->vocab_valid = m->vocab_local;
    m->sp = m->tp && opt->sequence_parallel;
    m->in->tp_overlap = m->sp && opt->tp_comm_overlap;
    /* collective over tp: made here, at one point */
    if (m->in->tp_overlap) lt_comm_background(m->tp);
    const size_t N = (size_t)B * T, C = d->hidden, F = m->in->ffn_max;
    const size_t R = m->sp ? N / (size_t)m->in->tp_size : N; /* residual-stream rows of this rank */
    LT_CHECK(!m->sp || N % (size_t)m->in->tp_size == 0);
    m->boundary = R * C;
    mark_sp_partial(m);
    m->xent_chunk = lt_model_lm_head_chunk(N, (size_t)m->vocab_local, be->act_size,
                                           opt ? opt->lm_head_chunk : 0);
    m->flat = opt && opt->flat ? opt->flat : m->table.total;
    LT_CHECK(m->flat >= m->table.total);

    m->params = act_alloc(m, m->flat, &m->mem.params);
    lt_mdl_setup_grads(m, opt ? opt->grad_buckets : 0);
    if (m->etable.n) {
        m->eflat = opt->eflat ? opt->eflat : m->etable.total;
        LT_CHECK(m->eflat >= m->etable.total);
        m->eparams = act_alloc(m, m->eflat, &m->mem.params);
        m->egrads = f32_alloc(m, m->eflat, &m->mem.grads);
    }
    m->in->stage_f32 = f32_alloc(m, (size_t)d->padded_vocab, &m->mem.workspace);

    m->recompute = opt ? opt->recompute : 0;
    setup_slots(m, opt && opt->slots > 0 ? opt->slots : 1);
    setup_windows(m);

    size_t *w = &m->mem.workspace;
    if (m->table.last_stage) {
        m->in->lnf = act_alloc(m, N * C, w);
        m->in->meanf = f32_alloc(m, R, w);
        m->in->rstdf = f32_alloc(m, R, w);
        m->in->xlast = act_alloc(m, R * C, w);
        m->in->logits = act_alloc(m, (size_t)m->xent_chunk * (size_t)m->vocab_local, w);
        m->in->losses = f32_alloc(m, N, w);
        m->in->xstat = f32_alloc(m, 3 * (size_t)m->xent_chunk, w);
        m->in->targets = be->ops->alloc(be, N * sizeof(int32_t));
        m->in->masked = lt_malloc(N * sizeof(int));
        *w += N * sizeof(int32_t);
    }
    m->in->scratch_c = act_alloc(m, N * C, w);
    m->in->scratch_sp = m->sp ? act_alloc(m, R * C, w) : NULL;
    m->in->dfull = m->sp ? act_alloc(m, N * C, w) : NULL;
    const size_t CL = (size_t)m->in->heads_local * (size_t)lt_dims_head_dim(d);
    m->in->dc = act_alloc(m, N * (CL > C ? CL : C), w); /* d(ln) rows, or d(attention out) */
    m->in->d3c = act_alloc(m, N * (size_t)m->in->qkv_local, w);
    m->in->dff = act_alloc(m, N * F, w);
    if (is_llama(m)) {
        m->in->dgu = act_alloc(m, 2 * N * F, w);
        m->in->rope_cs = rope_setup(m, w);
    }
    if (m->in->moe_any) {
        const LtMoeShape s = moe_shape(m, B);
        lt_moe_work_alloc(be, &s, &m->in->moe_work, w);
        m->in->moe_exp = lt_calloc(sizeof(LtExpertTensors) * (size_t)d->moe.experts);
    }
    if (lt_dims_sinks(d) == 1) /* off-by-one: every head's extra logit is 0 */
        m->in->zero_sinks = act_alloc(m, (size_t)m->in->heads_local, w);
    m->in->own_loss_acc = be->ops->alloc(be, sizeof(double));
    m->in->loss_acc = m->in->own_loss_acc;
    return m;
}

void lt_model_destroy(LtModel *m) {
    if (!m) return;
    LtBackend *be = m->be;
    void (*fr)(LtBackend *, void *) = be->ops->free;
    for (int s = 0; s < m->nslots; s++) {
        LtActSlot *sl = &m->slot[s];
        for (int j = 0; j < (m->max_chunk_layers > 0 ? m->max_chunk_layers : 1); j++)
            fr(be, sl->x[j]);
        for (int j = 0; j < m->max_chunk_layers; j++) {
            if (m->recompute != LT_MODEL_RECOMPUTE_FULL)
                layer_acts_free(m, &sl->layer[j], m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE);
        }
        for (int j = 0; sl->gate_y && j < m->max_chunk_layers; j++) {
            fr(be, sl->gate_y[j]);
            fr(be, sl->gate_s[j]);
        }
        free(sl->gate_y);
        free(sl->gate_s);
        fr(be, sl->dout);
        fr(be, sl->tokens);
        if (sl->pos) fr(be, sl->pos);
        if (sl->kstart) fr(be, sl->kstart);
        if (sl->kwin) fr(be, sl->kwin);
        free(sl->x);
        free(sl->layer);
    }
    free(m->slot);
    if (m->recompute == LT_MODEL_RECOMPUTE_FULL) layer_acts_free(m, &m->in->shared, 0);
    if (m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE) fr(be, m->in->shared.atty);
    const struct LtModelInternal *in = m->in;
    void *ps[] = {m->params,   m->grads,      in->emb_grads,   in->stage_f32, in->lnf,
                  m->eparams,  m->egrads,
                  in->meanf,   in->rstdf,     in->xlast,       in->scratch_c, in->scratch_sp,
                  in->dfull,   in->dc,        in->d3c,         in->dff,       in->dgu,
                  in->rope_cs, in->logits,    in->losses,      in->xstat,     in->targets,
                  in->own_loss_acc, in->zero_sinks};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) fr(be, ps[i]);
    if (in->moe_any) lt_moe_work_free(be, &m->in->moe_work);
    free(m->in->moe_exp);
    for (int l = 0; m->in->moe_stats && l < m->table.layers; l++) free(m->in->moe_stats[l].sp_counts);
    free(m->in->moe_stats);
    free(m->in->moe_tokens);
    free(m->in->moe);
    free(m->in->ffn_loc);
    free(m->in->gptr);
    free(m->in->sp_partial);
    free(m->in->masked);
    free(m->in->host_pos);
    free(m->in->host_ks);
    free(m->in->host_kw);
    free(m->in->swa);
    lt_params_free(&m->table);
    lt_params_free(&m->etable);
    free(m->in);
    free(m);
}

int lt_model_chunk_first(const LtModel *m, int c) { return m->pp_rank == 0 && c == 0; }
int lt_model_chunk_last(const LtModel *m, int c) {
    return m->pp_rank == m->pp - 1 && c == m->vpp - 1;
}
