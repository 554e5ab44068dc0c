/* model.c - GPT forward/backward over the backend op interface.
 *
 * Layer l (x = resid[l], N = B*T tokens):
 *   ln1 = LN(x)                      [layer 0: LN(embedding); l > 0: fused
 *                                     resid[l] = r2[l-1] + mlp_out[l-1]]
 *   qkv = ln1 W_qkv^T + b            (N, 3C)
 *   atty = causal_attention(qkv)     (N, C), lse
 *   r2 = x + (atty W_proj^T + b); ln2 = LN(r2)   (fused)
 *   fch = gelu(ln2 W_fc^T + b)       (N, F), pre-activation kept
 *   mlp_out = fch W_fc2^T + b        (N, C) -> consumed by the next fused LN
 * Final: resid[L] = r2 + mlp_out; lnf = LN_f(resid[L]); logits = lnf wte^T in
 * chunks of xent_chunk tokens, each turned into its gradient in place and
 * immediately pushed back into dlnf and dwte, so (N x V) logits never exist. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FC2W,
       P_FC2B, P_PER_LAYER };
#define IDX_WTE 0
#define IDX_WPE 1

/* Device pointer of parameter i in the compute-dtype buffer / fp32 grads. */
static void *param(const LtModel *m, int i) {
    return (char *)m->params + lt_act_bytes(m->be, m->table.p[i].offset);
}
static float *grad(const LtModel *m, int i) { return m->gptr[i]; }
static int lidx(const LtModel *m, int l, int k) { return 2 + P_PER_LAYER * l + k; }
static int idx_lnf(const LtModel *m) { return 2 + P_PER_LAYER * m->d.num_layers; }

static void *act_alloc(LtModel *m, size_t n, size_t *acc) {
    size_t bytes = lt_act_bytes(m->be, n);
    *acc += bytes;
    return m->be->ops->alloc(m->be, bytes);
}
static float *f32_alloc(LtModel *m, size_t n, size_t *acc) {
    *acc += n * sizeof(float);
    return m->be->ops->alloc(m->be, n * sizeof(float));
}

/* Elements from the first parameter of [first, last] to the end of the last. */
static size_t group_span(const LtParamTable *t, int first, int last) {
    return t->p[last].offset + t->p[last].numel - t->p[first].offset;
}

/* Point every parameter's gradient into the flat buffer, or (buckets) into one
 * bucket shared by the groups: embeddings, each layer, the final LayerNorm. */
static void setup_grads(LtModel *m, int buckets) {
    const LtParamTable *t = &m->table;
    m->gptr = lt_calloc(sizeof(float *) * (size_t)t->n);
    if (!buckets) {
        m->grads_len = m->flat;
        m->grads = f32_alloc(m, m->grads_len, &m->mem.grads);
        for (int i = 0; i < t->n; i++) m->gptr[i] = m->grads + t->p[i].offset;
        return;
    }
    int f = idx_lnf(m);
    size_t len = group_span(t, IDX_WTE, IDX_WPE);
    if (group_span(t, f, f + 1) > len) len = group_span(t, f, f + 1);
    if (m->d.num_layers > 0 && group_span(t, 2, 2 + P_PER_LAYER - 1) > len)
        len = group_span(t, 2, 2 + P_PER_LAYER - 1);
    m->grads_len = len;
    m->grads = f32_alloc(m, len, &m->mem.grads);
    for (int i = 0; i < t->n; i++) {
        int first = i <= IDX_WPE ? IDX_WTE : i >= f ? f : 2 + P_PER_LAYER * ((i - 2) / P_PER_LAYER);
        m->gptr[i] = m->grads + (t->p[i].offset - t->p[first].offset);
    }
}

LtModel *lt_model_create(LtBackend *be, const LtModelDims *d, int B, int T,
                         const LtModelOptions *opt) {
    LtModel *m = lt_calloc(sizeof *m);
    m->be = be;
    m->d = *d;
    m->B = B;
    m->T = T;
    m->tp = opt && opt->tp && lt_comm_size(opt->tp) > 1 ? opt->tp : NULL;
    m->tp_size = m->tp ? lt_comm_size(m->tp) : 1;
    m->tp_rank = m->tp ? lt_comm_rank(m->tp) : 0;
    lt_params_build_tp(&m->table, d, m->tp_size, m->tp_rank);
    m->heads_local = d->heads / m->tp_size;
    m->ffn_local = d->ffn / m->tp_size;
    m->vocab_local = d->padded_vocab / m->tp_size;
    m->vocab_start = m->tp_rank * m->vocab_local;
    m->vocab_valid = d->vocab - m->vocab_start;
    if (m->vocab_valid < 0) m->vocab_valid = 0;
    if (m->vocab_valid > m->vocab_local) m->vocab_valid = m->vocab_local;
    m->sp = m->tp && opt->sequence_parallel;
    const size_t N = (size_t)B * T, C = d->hidden, F = m->ffn_local, L = d->num_layers,
                 C3 = 3 * C / (size_t)m->tp_size;
    const size_t R = m->sp ? N / (size_t)m->tp_size : N; /* residual-stream rows of this rank */
    LT_CHECK(!m->sp || N % (size_t)m->tp_size == 0);
    m->sp_partial = lt_calloc((size_t)m->table.n);
    for (int i = 0; i < m->table.n; i++) /* LayerNorm weights see only this rank's tokens */
        m->sp_partial[i] = m->sp && strstr(m->table.p[i].name, "ln_") != NULL;
    m->xent_chunk = (int)(N < 256 ? N : 256);
    m->flat = opt && opt->flat ? opt->flat : m->table.total;
    LT_CHECK(m->flat >= m->table.total);

    m->params = act_alloc(m, m->flat, &m->mem.params);
    setup_grads(m, opt ? opt->grad_buckets : 0);
    m->stage_f32 = f32_alloc(m, (size_t)d->padded_vocab, &m->mem.workspace);

    size_t *a = &m->mem.activations;
    m->resid = lt_calloc(sizeof(void *) * (L + 1));
    for (size_t l = 0; l <= L; l++) m->resid[l] = act_alloc(m, R * C, a);
    /* Recomputation: full keeps only each layer's input (resid[l]) and shares one
     * set of layer activations that backward refills layer by layer; selective
     * shares the attention output (recomputed from qkv in backward). */
    m->recompute = opt ? opt->recompute : 0;
    m->layer = lt_calloc(sizeof(LtLayerActs) * L);
    for (size_t l = 0; l < L; l++) {
        LtLayerActs *la = &m->layer[l];
        if (l > 0 && m->recompute == LT_MODEL_RECOMPUTE_FULL) {
            *la = m->layer[0];
            continue;
        }
        la->ln1 = act_alloc(m, N * C, a);
        la->qkv = act_alloc(m, N * C3, a);
        la->atty = l > 0 && m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE
                       ? m->layer[0].atty
                       : act_alloc(m, N * C3 / 3, a);
        la->r2 = act_alloc(m, R * C, a);
        la->ln2 = act_alloc(m, N * C, a);
        la->fch_pre = act_alloc(m, N * F, a);
        la->fch = act_alloc(m, N * F, a);
        la->mean1 = f32_alloc(m, R, a);
        la->rstd1 = f32_alloc(m, R, a);
        la->mean2 = f32_alloc(m, R, a);
        la->rstd2 = f32_alloc(m, R, a);
        la->lse = f32_alloc(m, N * (size_t)m->heads_local, a);
    }
    m->lnf = act_alloc(m, N * C, a);
    m->meanf = f32_alloc(m, R, a);
    m->rstdf = f32_alloc(m, R, a);

    size_t *w = &m->mem.workspace;
    m->scratch_c = act_alloc(m, N * C, w);
    m->scratch_sp = m->sp ? act_alloc(m, R * C, w) : NULL;
    m->dfull = m->sp ? act_alloc(m, N * C, w) : NULL;
    m->dresid = act_alloc(m, R * C, w);
    m->dc = act_alloc(m, N * C, w);
    m->d3c = act_alloc(m, N * C3, w);
    m->dff = act_alloc(m, N * F, w);
    m->logits = act_alloc(m, (size_t)m->xent_chunk * (size_t)m->vocab_local, w);
    m->losses = f32_alloc(m, N, w);
    m->xstat = f32_alloc(m, 3 * (size_t)m->xent_chunk, w);
    m->tokens = be->ops->alloc(be, N * sizeof(int32_t));
    m->targets = be->ops->alloc(be, N * sizeof(int32_t));
    *w += 2 * N * sizeof(int32_t);
    m->host_losses = lt_calloc(N * sizeof(float));
    m->host_ids = lt_calloc(N * sizeof(int32_t));
    return m;
}

void lt_model_destroy(LtModel *m) {
    if (!m) return;
    LtBackend *be = m->be;
    void (*fr)(LtBackend *, void *) = be->ops->free;
    for (int l = 0; l <= m->d.num_layers; l++) fr(be, m->resid[l]);
    for (int l = 0; l < m->d.num_layers; l++) {
        LtLayerActs *la = &m->layer[l];
        if (l > 0 && m->recompute == LT_MODEL_RECOMPUTE_FULL) break; /* shared set */
        void *ps[] = {la->ln1, la->qkv,
                      l > 0 && m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE ? NULL : la->atty,
                      la->r2, la->ln2, la->fch_pre, la->fch,
                      la->mean1, la->rstd1, la->mean2, la->rstd2, la->lse};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            if (ps[i]) fr(be, ps[i]);
    }
    void *ps[] = {m->params, m->grads, m->stage_f32, m->lnf, m->meanf, m->rstdf, m->scratch_c,
                  m->dresid, m->dc, m->d3c, m->dff, m->logits, m->losses, m->xstat,
                  m->tokens, m->targets};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) fr(be, ps[i]);
    free(m->resid);
    free(m->layer);
    free(m->gptr);
    free(m->host_losses);
    free(m->host_ids);
    free(m->sp_partial);
    if (m->scratch_sp) fr(be, m->scratch_sp);
    if (m->dfull) fr(be, m->dfull);
    lt_params_free(&m->table);
    free(m);
}

void lt_model_set_params(LtModel *m, const float *host) {
    /* stage through a temporary fp32 device buffer and cast (not in the step loop) */
    LtBackend *be = m->be;
    size_t bytes = m->table.total * sizeof(float);
    float *tmp = be->ops->alloc(be, bytes);
    be->ops->upload(be, tmp, host, bytes);
    be->ops->act_from_f32(be, m->params, tmp, m->table.total);
    be->ops->synchronize(be);
    be->ops->free(be, tmp);
}

void lt_model_set_grad_hook(LtModel *m, LtGradReadyFn fn, void *ctx) {
    m->grads_ready = fn;
    m->grads_ready_ctx = ctx;
}

void lt_model_zero_grads(LtModel *m) {
    m->be->ops->zero(m->be, m->grads, m->grads_len * sizeof(float));
}

/* Parameters first..last have their micro-batch gradient complete. */
static void grads_ready(LtModel *m, int first, int last) {
    if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, first, last);
}

/* The communication type of act tensors: fp32 words (fp32, and the CPU
 * backend's bf16 stored as rounded floats) or real 16-bit bf16 (CUDA). */
static LtCommType act_comm_type(const LtModel *m) {
    return m->be->act_size == sizeof(float) ? LT_COMM_F32 : LT_COMM_BF16;
}

/* After a sum of fp32-stored bf16 values (CPU backend): round back to bf16.
 * Real bf16 sums come back rounded from the communication layer. */
static void act_round(LtModel *m, void *x, size_t n) {
    if (m->be->act_size == sizeof(float) && m->be->dtype != LT_F32)
        m->be->ops->act_from_f32(m->be, x, x, n);
}

/* Sum an act tensor over the tensor-parallel group (the conjugate of the
 * identity: forward after row-parallel layers, backward after column-parallel
 * ones). The group takes the backend's buffers (comm.h: host memory for the
 * CPU backend, NCCL or staged MPI for CUDA); the sum is in the compute dtype. */
static void tp_sum(LtModel *m, void *x, size_t n) {
    if (!m->tp) return;
    lt_comm_all_reduce(m->tp, x, n, act_comm_type(m), LT_COMM_SUM);
    act_round(m, x, n);
}

static void tp_reduce_f32(LtModel *m, float *x, size_t n, LtCommOp op) {
    if (m->tp) lt_comm_all_reduce(m->tp, x, n, LT_COMM_F32, op);
}

/* A row-parallel layer's bias is added once: by the first TP rank. */
static const void *row_bias(const LtModel *m, int i) { return m->tp_rank == 0 ? param(m, i) : NULL; }

/* ---- sequence parallelism ------------------------------------------------------
 * With sequence_parallel the residual stream, the LayerNorms and their
 * statistics hold only this TP rank's R = N/tp token rows (rows
 * [rank*R, rank*R + R) of the micro batch). A LayerNorm output is written into
 * the rank's slot of a full (N, C) buffer and all-gathered before the
 * column-parallel GEMM; a row-parallel output is reduce-scattered instead of
 * all-reduced. Backward mirrors it. Without it R = N and these are the plain
 * tensor-parallel all-reduces. */

static void *rows_at(const LtModel *m, void *x, size_t row, int C) {
    return (char *)x + lt_act_bytes(m->be, row * (size_t)C);
}

/* Full (N, C) buffer whose slot of this rank holds fresh values: all-gather. */
static void sp_gather(LtModel *m, void *full, int R, int C) {
    if (!m->sp) return;
    size_t n = (size_t)R * C;
    lt_comm_all_gather(m->tp, rows_at(m, full, (size_t)m->tp_rank * R, C), full, n,
                       act_comm_type(m));
}

/* Partial sums `full` (N, C) of a row-parallel layer (or of a column-parallel
 * layer's input gradient) -> their total over TP for this rank's R rows.
 * Returns where the result is: `shard` (R, C) with SP, else `full` itself. */
static void *tp_finish(LtModel *m, void *full, void *shard, int R, int C) {
    if (!m->sp) {
        tp_sum(m, full, (size_t)R * C);
        return full;
    }
    lt_comm_reduce_scatter(m->tp, full, shard, (size_t)R * C, act_comm_type(m));
    act_round(m, shard, (size_t)R * C);
    return shard;
}

/* The residual-stream gradient (R rows) as a full (N, C) tensor. */
static void *grad_full(LtModel *m, int R, int C) {
    if (!m->sp) return m->dresid;
    m->be->ops->copy(m->be, rows_at(m, m->dfull, (size_t)m->tp_rank * R, C), m->dresid,
                     lt_act_bytes(m->be, (size_t)R * C));
    sp_gather(m, m->dfull, R, C);
    return m->dfull;
}

/* Layer l from its first LayerNorm through the MLP activation: x (+ delta,
 * when not NULL, stored as resid_out = resid[l]) is the layer input. Leaves
 * every activation backward needs; the MLP output projection is the caller's. */
static void layer_forward(LtModel *m, int l, int B, void *resid_out, const void *x,
                          const void *delta) {
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int T = m->T, C = m->d.hidden, F = m->ffn_local, NH = m->heads_local,
              HD = m->d.hidden / m->d.heads, CL = NH * HD;
    const int N = B * T, R = m->sp ? N / m->tp_size : N;
    const size_t mine = m->sp ? (size_t)m->tp_rank * R : 0; /* first row of this rank's slot */
    LtLayerActs *a = &m->layer[l];
    o->layernorm_fwd(be, resid_out, rows_at(m, a->ln1, mine, C), a->mean1, a->rstd1, x, delta,
                     param(m, lidx(m, l, P_LN1W)), param(m, lidx(m, l, P_LN1B)), R, C);
    sp_gather(m, a->ln1, R, C);
    o->linear_fwd(be, a->qkv, NULL, a->ln1, param(m, lidx(m, l, P_QKVW)),
                  param(m, lidx(m, l, P_QKVB)), N, C, 3 * CL);
    o->attention_fwd(be, a->atty, a->lse, a->qkv, B, T, NH, HD);
    o->linear_fwd(be, m->scratch_c, NULL, a->atty, param(m, lidx(m, l, P_PROJW)),
                  row_bias(m, lidx(m, l, P_PROJB)), N, CL, C);
    void *attn = tp_finish(m, m->scratch_c, m->scratch_sp, R, C);
    o->layernorm_fwd(be, a->r2, rows_at(m, a->ln2, mine, C), a->mean2, a->rstd2, m->resid[l],
                     attn, param(m, lidx(m, l, P_LN2W)), param(m, lidx(m, l, P_LN2B)), R, C);
    sp_gather(m, a->ln2, R, C);
    o->linear_fwd(be, a->fch, a->fch_pre, a->ln2, param(m, lidx(m, l, P_FCW)),
                  param(m, lidx(m, l, P_FCB)), N, C, F);
}

/* Forward through the blocks and the final LayerNorm (N = B*T tokens; this
 * rank's residual rows R). */
static void forward_body(LtModel *m, int B) {
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int T = m->T, C = m->d.hidden, F = m->ffn_local, L = m->d.num_layers;
    const int N = B * T, R = m->sp ? N / m->tp_size : N;
    const size_t mine = m->sp ? (size_t)m->tp_rank * R : 0; /* first row of this rank's slot */
    void *emb = m->sp ? m->scratch_c : m->resid[0];
    o->embedding_fwd(be, emb, m->tokens, param(m, IDX_WTE),
                     m->tp_rank == 0 ? param(m, IDX_WPE) : NULL, B, T, C);
    void *x0 = tp_finish(m, emb, m->resid[0], R, C);
    LT_CHECK(x0 == m->resid[0]);
    void *delta = NULL; /* the previous layer's MLP output, added by the next fused LN */
    for (int l = 0; l < L; l++) {
        LtLayerActs *a = &m->layer[l];
        layer_forward(m, l, B, l ? m->resid[l] : NULL, l ? m->layer[l - 1].r2 : m->resid[0],
                      delta);
        o->linear_fwd(be, m->scratch_c, NULL, a->fch, param(m, lidx(m, l, P_FC2W)),
                      row_bias(m, lidx(m, l, P_FC2B)), N, F, C);
        delta = tp_finish(m, m->scratch_c, m->scratch_sp, R, C);
    }
    int f = idx_lnf(m);
    o->layernorm_fwd(be, m->resid[L], rows_at(m, m->lnf, mine, C), m->meanf, m->rstdf,
                     m->layer[L - 1].r2, delta, param(m, f), param(m, f + 1), R, C);
    sp_gather(m, m->lnf, R, C);
}

/* Loss over rows [0, N) in chunks; with grad_scale != 0 also the gradient
 * into dc (= dlnf) and dwte. Returns the summed loss. */
static double loss_chunks(LtModel *m, int N, float grad_scale) {
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int C = m->d.hidden, V = m->d.vocab, Vl = m->vocab_local;
    const int X = m->xent_chunk;
    float *gmax = m->xstat, *gsum = m->xstat + X, *gtgt = m->xstat + 2 * X;
    for (int r = 0; r < N; r += X) {
        int n = N - r < X ? N - r : X;
        const void *x = (const char *)m->lnf + lt_act_bytes(be, (size_t)r * C);
        o->linear_fwd(be, m->logits, NULL, x, param(m, IDX_WTE), NULL, n, C, Vl);
        if (!m->tp) {
            o->xent_fwd_bwd(be, m->losses + r, m->logits, m->targets + r, n, V, Vl, grad_scale);
        } else { /* vocab-parallel: row statistics summed over the TP ranks */
            const int32_t *tg = m->targets + r;
            o->xent_tp_stats(be, gmax, NULL, NULL, m->logits, tg, NULL, n, m->vocab_valid, Vl);
            tp_reduce_f32(m, gmax, (size_t)n, LT_COMM_MAX);
            o->xent_tp_stats(be, NULL, gsum, gtgt, m->logits, tg, gmax, n, m->vocab_valid, Vl);
            tp_reduce_f32(m, gsum, 2 * (size_t)X, LT_COMM_SUM); /* gsum and gtgt together */
            o->xent_tp_finish(be, m->losses + r, m->logits, tg, gmax, gsum, gtgt, n,
                              m->vocab_valid, Vl, grad_scale);
        }
        if (grad_scale != 0.0f)
            o->linear_bwd(be, (char *)m->dc + lt_act_bytes(be, (size_t)r * C), grad(m, IDX_WTE),
                          NULL, m->logits, x, param(m, IDX_WTE), NULL, n, C, Vl);
    }
    o->download(be, m->host_losses, m->losses, (size_t)N * sizeof(float));
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->host_losses[i];
    return sum;
}

/* Refill what backward of layer l needs that recomputation dropped: with full
 * recomputation the whole layer forward from its stored input resid[l] (up
 * to the MLP activation; communication included, so every TP rank does it);
 * with selective only the attention core from the kept qkv. */
static void recompute_layer(LtModel *m, int l, int B) {
    LtLayerActs *a = &m->layer[l];
    if (m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE)
        m->be->ops->attention_fwd(m->be, a->atty, a->lse, a->qkv, B, m->T, m->heads_local,
                                  m->d.hidden / m->d.heads);
    else
        layer_forward(m, l, B, NULL, m->resid[l], NULL);
}

static void backward_body(LtModel *m, int B) {
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int T = m->T, C = m->d.hidden, F = m->ffn_local, NH = m->heads_local,
              HD = m->d.hidden / m->d.heads, L = m->d.num_layers, CL = NH * HD;
    const int N = B * T, R = m->sp ? N / m->tp_size : N;
    int f = idx_lnf(m);
    grads_ready(m, IDX_WTE, IDX_WTE); /* the LM head's share of the tied embedding */
    void *dln = tp_finish(m, m->dc, m->scratch_sp, R, C); /* d(lnf), this rank's rows */
    o->zero(be, m->dresid, lt_act_bytes(be, (size_t)R * C));
    o->layernorm_bwd(be, m->dresid, grad(m, f), grad(m, f + 1), dln, m->resid[L], param(m, f),
                     m->meanf, m->rstdf, R, C);
    grads_ready(m, f, f + 1);
    for (int l = L - 1; l >= 0; l--) {
        LtLayerActs *a = &m->layer[l];
        if (m->recompute) recompute_layer(m, l, B);
        /* dresid = d(resid[l+1]) flows to both mlp_out and r2 */
        void *dout = grad_full(m, R, C);
        o->linear_bwd(be, m->dff, grad(m, lidx(m, l, P_FC2W)), grad(m, lidx(m, l, P_FC2B)), dout,
                      a->fch, param(m, lidx(m, l, P_FC2W)), a->fch_pre, N, F, C);
        o->linear_bwd(be, m->dc, grad(m, lidx(m, l, P_FCW)), grad(m, lidx(m, l, P_FCB)), m->dff,
                      a->ln2, param(m, lidx(m, l, P_FCW)), NULL, N, C, F);
        dln = tp_finish(m, m->dc, m->scratch_sp, R, C);
        o->layernorm_bwd(be, m->dresid, grad(m, lidx(m, l, P_LN2W)), grad(m, lidx(m, l, P_LN2B)),
                         dln, a->r2, param(m, lidx(m, l, P_LN2W)), a->mean2, a->rstd2, R, C);
        /* dresid = d(r2) flows to both the attention projection and resid[l] */
        dout = grad_full(m, R, C);
        o->linear_bwd(be, m->dc, grad(m, lidx(m, l, P_PROJW)), grad(m, lidx(m, l, P_PROJB)), dout,
                      a->atty, param(m, lidx(m, l, P_PROJW)), NULL, N, CL, C);
        o->attention_bwd(be, m->d3c, m->dc, a->qkv, a->atty, a->lse, B, T, NH, HD);
        o->linear_bwd(be, m->dc, grad(m, lidx(m, l, P_QKVW)), grad(m, lidx(m, l, P_QKVB)), m->d3c,
                      a->ln1, param(m, lidx(m, l, P_QKVW)), NULL, N, C, 3 * CL);
        dln = tp_finish(m, m->dc, m->scratch_sp, R, C);
        o->layernorm_bwd(be, m->dresid, grad(m, lidx(m, l, P_LN1W)), grad(m, lidx(m, l, P_LN1B)),
                         dln, m->resid[l], param(m, lidx(m, l, P_LN1W)), a->mean1, a->rstd1, R,
                         C);
        grads_ready(m, lidx(m, l, 0), lidx(m, l, P_PER_LAYER - 1));
    }
    o->embedding_bwd(be, grad(m, IDX_WTE), grad(m, IDX_WPE), grad_full(m, R, C), m->tokens, B,
                     T, C);
    grads_ready(m, IDX_WTE, IDX_WPE);
}

void lt_model_sp_reduce_grads(LtModel *m, int first, int last) {
    if (!m->sp) return;
    for (int i = first; i <= last; i++)
        if (m->sp_partial[i])
            lt_comm_all_reduce(m->tp, grad(m, i), m->table.p[i].numel, LT_COMM_F32, LT_COMM_SUM);
}

/* Upload ids as this rank's local vocabulary ids (-1 when another TP rank owns
 * the row: the embedding skips it). Targets keep out-of-range local ids. */
static void upload_ids(LtModel *m, int32_t *dst, const int32_t *ids, int n, int mask) {
    if (!m->tp) {
        m->be->ops->upload(m->be, dst, ids, (size_t)n * sizeof(int32_t));
        return;
    }
    for (int i = 0; i < n; i++) {
        int32_t v = ids[i] - m->vocab_start;
        m->host_ids[i] = mask && (v < 0 || v >= m->vocab_local) ? -1 : v;
    }
    m->be->ops->upload(m->be, dst, m->host_ids, (size_t)n * sizeof(int32_t));
}

double lt_model_step(LtModel *m, const int32_t *tokens, const int32_t *targets, float grad_scale) {
    const int N = m->B * m->T;
    upload_ids(m, m->tokens, tokens, N, 1);
    forward_body(m, m->B);
    if (!targets) return 0.0;
    upload_ids(m, m->targets, targets, N, 0);
    double loss = loss_chunks(m, N, grad_scale);
    if (grad_scale != 0.0f) backward_body(m, m->B);
    return loss;
}

void lt_model_next_logits(LtModel *m, const int32_t *tokens, int len, float *out) {
    LtBackend *be = m->be;
    const int T = m->T, C = m->d.hidden, V = m->d.vocab, Vp = m->d.padded_vocab;
    LT_CHECK(len >= 1 && len <= T && !m->tp);
    /* one sequence in row 0 (B = 1); positions past len are padding and
     * cannot influence position len-1 under the causal mask */
    int32_t *row = lt_calloc((size_t)T * sizeof(int32_t));
    memcpy(row, tokens, (size_t)len * sizeof(int32_t));
    be->ops->upload(be, m->tokens, row, (size_t)T * sizeof(int32_t));
    free(row);
    forward_body(m, 1);
    const void *x = (const char *)m->lnf + lt_act_bytes(be, (size_t)(len - 1) * C);
    be->ops->linear_fwd(be, m->logits, NULL, x, param(m, IDX_WTE), NULL, 1, C, Vp);
    be->ops->act_to_f32(be, m->stage_f32, m->logits, (size_t)Vp);
    be->ops->download(be, out, m->stage_f32, (size_t)V * sizeof(float));
}

double lt_model_flops_per_sample(const LtModelDims *d, int causal) {
    const double s = d->seq_len, h = d->hidden, F = d->ffn, L = d->num_layers,
                 V = d->padded_vocab;
    const double attn = causal ? 2.0 * s * h : 4.0 * s * h;
    /* forward FLOPs per token: per layer QKV 6h^2 + proj 2h^2 + MLP 4hF + scores and
     * weighted sum 4sh; LM head 2hV. Backward = 2x forward. */
    return 3.0 * s * (L * (8.0 * h * h + 4.0 * h * F + attn) + 2.0 * h * V);
}
