/* model_forward.c - the forward of one chunk (model_internal.h's dataflow):
 * on the first stage the embedding, then each layer (norm, QKV, RoPE,
 * attention, projection, norm, MLP or MoE), on the last stage the final norm
 * and the loss head (model_loss.c) with the final norm's backward; the
 * refill of a layer that recomputation dropped; and the whole-model entry
 * points without pipelining (a training step, next-token logits). */
#include "model.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/model_internal.h"

/* Forward is about to read parameters first..last. */
static void params_needed(LtModel *m, int first, int last) {
    if (m->in->params_needed && first >= 0)
        m->in->params_needed(m->in->params_needed_ctx, first, last);
}

/* A row-parallel layer's bias (role k of layer l; absent: NULL) is added
 * once: by the first TP rank. */
static const void *row_bias(const LtModel *m, int l, int k) {
    return m->in->tp_rank == 0 ? lw(m, l, k) : NULL;
}

/* Local layer l from its first LayerNorm through the MLP activation, with
 * activations a. Its input is x, or (delta != NULL) x + delta, stored into
 * xin (the layer's input tensor); without delta xin must be x. Leaves every
 * activation backward needs; the MLP output projection is the caller's. */
static void layer_forward(LtModel *m, int l, LtLayerActs *a, int B, void *xin, const void *x,
                          const void *delta) {
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int T = m->T, C = m->d.hidden, F = m->in->ffn_loc[l], NH = m->in->heads_local,
              NKV = m->in->kv_local, HD = lt_dims_head_dim(&m->d), CL = NH * HD;
    const int N = B * T, R = m->sp ? N / m->in->tp_size : N;
    const size_t mine = m->sp ? (size_t)m->in->tp_rank * R : 0; /* first row of this rank's slot */
    norm_fwd(m, delta ? xin : NULL, rows_at(m, a->ln1, mine, C), a->mean1, a->rstd1, x, delta,
             lw(m, l, P_LN1W), lw(m, l, P_LN1B), R, C);
    lt_tp_col_linear_fwd(&tl, a->qkv, NULL, a->ln1, lw(m, l, P_QKVW), lw(m, l, P_QKVB), N, C,
                         m->in->qkv_local);
    if (a->qk_in)
        o->qk_norm_fwd(be, a->qkv, a->qk_in, a->qk_rstd, lw(m, l, P_QNW), lw(m, l, P_KNW),
                       m->d.norm_eps, N, NH, NKV, HD);
    if (m->in->rope_cs) o->rope(be, a->qkv, m->in->rope_cs, m->in->pos, B, T, NH, NKV, HD, 0);
    const int part = lt_devclock_part_begin();
    o->attention_fwd(be, a->atty, a->lse, a->qkv, sinks_of(m, l), kstart_of(m, l),
                     window_of(m, l), B, T, NH, NKV, HD);
    lt_devclock_part_end(part, LT_CLK_ATTN);
    void *attn = lt_tp_row_linear_fwd(&tl, m->in->scratch_c, m->in->scratch_sp, a->atty,
                                      lw(m, l, P_PROJW), row_bias(m, l, P_PROJB), N, CL, C);
    norm_fwd(m, a->r2, rows_at(m, a->ln2, mine, C), a->mean2, a->rstd2, xin, attn,
             lw(m, l, P_LN2W), lw(m, l, P_LN2B), R, C);
    if (m->in->moe[l]) {
        const LtMoeShape s = moe_shape(m, B);
        const LtMoeCtx cx = moe_ctx(m);
        const LtMoeWeights w = lt_mdl_moe_weights(m, l);
        const int part = lt_devclock_part_begin();
        lt_moe_forward(be, &cx, &s, &w, a->moe, &m->in->moe_work, rows_at(m, a->ln2, mine, C),
                       m->in->recomputing ? NULL : &m->in->moe_stats[l]);
        lt_devclock_part_end(part, LT_CLK_MOE);
        if (m->d.moe.expert_bias && !m->in->recomputing && m->in->training_forward)
            lt_mdl_moe_count_tokens(m, l, a->moe);
    }
    if (!lw(m, l, P_FCW)) return; /* an MoE layer without a shared expert */
    if (is_llama(m)) { /* fch_pre = gate | up, fch = silu(gate) * up (or m->d.glu's) */
        lt_tp_col_linear_fwd(&tl, a->fch_pre, NULL, a->ln2, lw(m, l, P_FCW), lw(m, l, P_FCB), N,
                             C, 2 * F);
        o->swiglu_fwd(be, a->fch, a->fch_pre, N, F, &m->d.glu);
    } else {
        lt_tp_col_linear_fwd(&tl, a->fch, a->fch_pre, a->ln2, lw(m, l, P_FCW), lw(m, l, P_FCB), N,
                             C, F);
    }
}

/* Layer l's MLP output, this rank's rows: the MLP's row-parallel projection,
 * or in an MoE layer the routed experts' output plus the shared expert's. */
static void *mlp_output(LtModel *m, int l, LtLayerActs *a, int N, int R, LtActSlot *sl, int j) {
    const LtTpLinear tl = tpl(m);
    const int C = m->d.hidden;
    void *dense = NULL;
    if (lw(m, l, P_FC2W))
        dense = lt_tp_row_linear_fwd(&tl, m->in->scratch_c, m->in->scratch_sp, a->fch,
                                     lw(m, l, P_FC2W), row_bias(m, l, P_FC2B), N,
                                     m->in->ffn_loc[l], C);
    if (!m->in->moe[l]) return dense;
    if (dense && m->d.moe.shared_gate) { /* out += sigmoid(x . g) * dense, per token */
        const int g = lt_mdl_shared_gate_idx(m, l);
        const size_t mine = m->sp ? (size_t)m->in->tp_rank * R : 0;
        m->be->ops->copy(m->be, sl->gate_y[j], dense, lt_act_bytes(m->be, (size_t)R * C));
        m->be->ops->moe_router_fwd(m->be, sl->gate_s[j], rows_at(m, a->ln2, mine, C),
                                   param(m, g), NULL, R, C, 1);
        m->be->ops->moe_gate_fwd(m->be, a->moe->out, sl->gate_y[j], sl->gate_s[j], R, C);
    } else if (dense) {
        m->be->ops->add_act(m->be, a->moe->out, a->moe->out, dense, (size_t)R * C);
    }
    return a->moe->out;
}

/* Upload ids (asynchronously) and, when the vocabulary is split over TP,
 * turn them into this rank's local ids: -1 where another rank owns the row
 * (the embedding skips it; for targets -1 means "not on this rank", which is
 * all the vocab-parallel loss needs to know). */
static void upload_ids(LtModel *m, int32_t *dst, const int32_t *ids, int n) {
    const LtBackendOps *o = m->be->ops;
    o->upload_async(m->be, dst, ids, (size_t)n * sizeof(int32_t));
    if (m->tp) o->localize_ids(m->be, dst, (size_t)n, m->in->vocab_start, m->vocab_local);
}

/* Forward of chunk c (micro batch B x T) in slot s: the embedding on the first
 * stage (tokens: host ids), the layers, then on the last stage the final
 * LayerNorm into lnf (xlast = its input; gathered over SP unless gather_lnf is
 * 0: then the caller's loss gathers it block by block), elsewhere the chunk
 * output into out. */
static void chunk_body(LtModel *m, int c, int s, int B, const int32_t *tokens, void *out,
                       int gather_lnf) {
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int T = m->T, C = m->d.hidden, n = lt_params_chunk_layers(&m->table, c),
              l0 = lt_params_chunk_first(&m->table, c);
    const int N = B * T, R = m->sp ? N / m->in->tp_size : N;
    const size_t mine = m->sp ? (size_t)m->in->tp_rank * R : 0; /* first row of this rank's slot */
    LtActSlot *sl = &m->slot[s];
    lt_mdl_documents_upload(m, sl, tokens, B);
    if (lt_model_chunk_first(m, c)) {
        params_needed(m, m->table.idx_wte, emb_last(&m->table));
        upload_ids(m, sl->tokens, tokens, N);
        void *emb = m->sp ? m->in->scratch_c : sl->x[0];
        const int wpe = m->table.idx_wpe; /* none for llama */
        o->embedding_fwd(be, emb, sl->tokens, param(m, m->table.idx_wte),
                         m->in->tp_rank == 0 && wpe >= 0 ? param(m, wpe) : NULL, m->in->pos, B, T,
                         C);
        void *x0 = lt_tp_finish(&tl, emb, sl->x[0], R, C);
        LT_CHECK(x0 == sl->x[0]);
    }
    void *delta = NULL; /* the previous layer's MLP output, added by the next fused LN */
    for (int j = 0; j < n; j++) {
        const int l = l0 + j;
        LtLayerActs *a = &sl->layer[j];
        params_needed(m, layer_first_idx(m, l), layer_last_idx(m, l));
        layer_forward(m, l, a, B, sl->x[j], j ? sl->layer[j - 1].r2 : sl->x[0], delta);
        delta = mlp_output(m, l, a, N, R, sl, j);
    }
    const void *last = n ? sl->layer[n - 1].r2 : sl->x[0];
    if (lt_model_chunk_last(m, c)) {
        const int f = m->table.idx_lnf;
        params_needed(m, f, m->table.n - 1);
        params_needed(m, head_idx(m), head_idx(m)); /* the tied LM head: the embedding's */
        norm_fwd(m, delta ? m->in->xlast : NULL, rows_at(m, m->in->lnf, mine, C), m->in->meanf,
                 m->in->rstdf, last, delta, param(m, f), is_llama(m) ? NULL : param(m, f + 1), R,
                 C);
        if (!delta) o->copy(be, m->in->xlast, last, lt_act_bytes(be, (size_t)R * C));
        if (gather_lnf) lt_tp_sp_gather(&tl, m->in->lnf, R, C);
    } else if (delta) {
        o->add_act(be, out, last, delta, (size_t)R * C);
    } else {
        o->copy(be, out, last, lt_act_bytes(be, (size_t)R * C));
    }
}

void lt_model_chunk_forward(LtModel *m, int c, int s, const int32_t *tokens,
                            const int32_t *targets, float grad_scale, void *out) {
    LT_CHECK(c >= 0 && c < m->vpp && s >= 0 && s < m->nslots);
    const int last = lt_model_chunk_last(m, c);
    LT_CHECK(last || out);
    const int loss = last && targets;
    m->in->training_forward = grad_scale != 0.0f;
    chunk_body(m, c, s, m->B, tokens, out, !(loss && m->in->tp_overlap));
    m->in->training_forward = 0;
    if (!loss) return;
    LtBackend *be = m->be;
    const int N = m->B * m->T, C = m->d.hidden, R = m->sp ? N / m->in->tp_size : N;
    upload_ids(m, m->in->targets, targets, N);
    m->in->nmasked = 0;
    if (m->in->eod >= 0)
        for (int i = 0; i < N; i++)
            if (tokens[i] == m->in->eod) m->in->masked[m->in->nmasked++] = i;
    void *dln = lt_mdl_loss_head(m, N, grad_scale); /* d(lnf), this rank's rows */
    if (grad_scale == 0.0f) return;
    /* the LM head's share of the tied embedding (its own buffer with pipelining); an
     * untied head is handed over with the final norm below */
    if (!m->in->emb_grads && m->table.idx_head < 0)
        grads_ready(m, m->table.idx_wte, m->table.idx_wte);
    /* dlnf -> through the final LayerNorm into the gradient of the chunk output */
    const int f = m->table.idx_lnf;
    LtActSlot *sl = &m->slot[s];
    be->ops->zero(be, sl->dout, lt_act_bytes(be, (size_t)R * C));
    norm_bwd(m, sl->dout, grad(m, f), is_llama(m) ? NULL : grad(m, f + 1), dln, m->in->xlast,
             param(m, f), m->in->meanf, m->in->rstdf, R, C);
    grads_ready(m, f, m->table.n - 1); /* the final group: ln_f (and lm_head) */
}

/* Refill what backward of local layer l (activations a, input x) needs that
 * recomputation dropped: with full recomputation the whole layer forward from
 * its stored input (up to the MLP activation; communication included, so
 * every TP rank does it); with selective only the attention core from the
 * kept qkv. */
void lt_mdl_recompute_layer(LtModel *m, int l, LtLayerActs *a, void *x, int B) {
    if (m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE) {
        const int part = lt_devclock_part_begin();
        m->be->ops->attention_fwd(m->be, a->atty, a->lse, a->qkv, sinks_of(m, l),
                                  kstart_of(m, l), window_of(m, l), B, m->T, m->in->heads_local,
                                  m->in->kv_local, lt_dims_head_dim(&m->d));
        lt_devclock_part_end(part, LT_CLK_ATTN);
    } else {
        m->in->recomputing = 1;
        layer_forward(m, l, a, B, x, x, NULL);
        m->in->recomputing = 0;
    }
}

double lt_model_step(LtModel *m, const int32_t *tokens, const int32_t *targets, float grad_scale) {
    LT_CHECK(m->pp == 1 && m->vpp == 1);
    lt_model_chunk_forward(m, 0, 0, tokens, targets, grad_scale, NULL);
    if (targets && grad_scale != 0.0f) lt_model_chunk_backward(m, 0, 0, NULL);
    return lt_model_loss_take(m);
}

void lt_model_next_logits(LtModel *m, const int32_t *tokens, int len, float *out) {
    LtBackend *be = m->be;
    const int T = m->T, C = m->d.hidden, V = m->d.vocab, Vp = m->d.padded_vocab;
    LT_CHECK(len >= 1 && len <= T && !m->tp && m->pp == 1);
    /* one sequence in row 0 (B = 1); positions past len are padding and
     * cannot influence position len-1 under the causal mask */
    int32_t *row = lt_calloc((size_t)T * sizeof(int32_t));
    memcpy(row, tokens, (size_t)len * sizeof(int32_t));
    chunk_body(m, 0, 0, 1, row, NULL, 1);
    free(row);
    const void *x = (const char *)m->in->lnf + lt_act_bytes(be, (size_t)(len - 1) * C);
    be->ops->linear_fwd(be, m->in->logits, NULL, x, param(m, head_idx(m)), NULL, 1, C, Vp);
    be->ops->act_to_f32(be, m->in->stage_f32, m->in->logits, (size_t)Vp);
    be->ops->download(be, out, m->in->stage_f32, (size_t)V * sizeof(float));
}
