/* model_backward.c - the backward of one chunk from its output's gradient
 * (the last stage's comes from the loss head during the forward): each layer
 * from the last, recomputed first when recomputation dropped its
 * activations, its MLP or MoE, norms, projection, attention, RoPE and QKV
 * backward, its gradients handed over as they complete; then the embedding's
 * on the first stage, elsewhere the input's gradient for the previous stage. */
#include "model.h"

#include "common.h"
#include "model/model_internal.h"

/* Backward of the MLP of layer l from dres (the layer output's gradient,
 * this rank's rows) into the gradient of ln2, summed over TP; returns where
 * this rank's rows of it are. */
static void *dense_mlp_backward(LtModel *m, int l, LtLayerActs *a, void *dres, int N) {
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const int C = m->d.hidden, F = m->in->ffn_loc[l];
    if (is_llama(m)) {
        lt_tp_row_linear_bwd(&tl, m->in->dfull, m->in->dff, lg(m, l, P_FC2W), lg(m, l, P_FC2B),
                             dres, a->fch, lw(m, l, P_FC2W), NULL, N, F, C);
        be->ops->swiglu_bwd(be, m->in->dgu, a->fch_pre, m->in->dff, N, F, &m->d.glu);
        return lt_tp_col_linear_bwd(&tl, m->in->dc, m->in->scratch_sp, lg(m, l, P_FCW),
                                    lg(m, l, P_FCB), m->in->dgu, a->ln2, lw(m, l, P_FCW), N, C,
                                    2 * F);
    }
    lt_tp_row_linear_bwd(&tl, m->in->dfull, m->in->dff, lg(m, l, P_FC2W), lg(m, l, P_FC2B), dres,
                         a->fch, lw(m, l, P_FC2W), a->fch_pre, N, F, C);
    return lt_tp_col_linear_bwd(&tl, m->in->dc, m->in->scratch_sp, lg(m, l, P_FCW),
                                lg(m, l, P_FCB), m->in->dff, a->ln2, lw(m, l, P_FCW), N, C, F);
}

/* Backward of the MLP of layer l (dense_mlp_backward), or of an MoE layer:
 * the shared expert's then the routed experts' gradients of ln2 summed. With
 * the shared expert's gate, slot sl's layer j holds its ungated output and the
 * gate, which become the shared expert's output gradient and the gate logit's
 * (moe_gate_bwd); the logit's gradient then adds to ln2's and to the gate
 * weight's (the router's GEMMs with one expert). */
static void *mlp_backward(LtModel *m, int l, LtLayerActs *a, void *dres, int N, LtActSlot *sl,
                          int j) {
    const int C = m->d.hidden, R = m->sp ? N / m->in->tp_size : N;
    const int gated = m->in->moe[l] && m->d.moe.shared_gate && lw(m, l, P_FCW);
    if (gated) m->be->ops->moe_gate_bwd(m->be, sl->gate_y[j], sl->gate_s[j], dres, R, C);
    void *dln = lw(m, l, P_FCW)
                    ? dense_mlp_backward(m, l, a, gated ? sl->gate_y[j] : dres, N)
                    : NULL;
    if (!m->in->moe[l]) return dln;
    /* this rank's rows of ln2: the router's, the experts' and the gate's input */
    const void *x = rows_at(m, a->ln2, m->sp ? (size_t)m->in->tp_rank * R : 0, C);
    if (gated) {
        const int g = lt_mdl_shared_gate_idx(m, l);
        m->be->ops->moe_router_bwd(m->be, dln, grad(m, g), NULL, sl->gate_s[j], x, param(m, g),
                                   R, C, 1);
    }
    if (!dln) {
        dln = m->in->dc;
        m->be->ops->zero(m->be, dln, lt_act_bytes(m->be, (size_t)R * C));
    }
    const LtMoeShape s = moe_shape(m, N / m->T);
    const LtMoeCtx cx = moe_ctx(m);
    const LtMoeWeights w = lt_mdl_moe_weights(m, l);
    const int part = lt_devclock_part_begin();
    lt_moe_backward(m->be, &cx, &s, &w, a->moe, &m->in->moe_work, x, dres, dln);
    lt_devclock_part_end(part, LT_CLK_MOE);
    return dln;
}

void lt_model_chunk_backward(LtModel *m, int c, int s, void *din) {
    LT_CHECK(c >= 0 && c < m->vpp && s >= 0 && s < m->nslots);
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int B = m->B, T = m->T, C = m->d.hidden, NH = m->in->heads_local, NKV = m->in->kv_local,
              HD = lt_dims_head_dim(&m->d), CL = NH * HD, n = lt_params_chunk_layers(&m->table, c),
              l0 = lt_params_chunk_first(&m->table, c);
    const int N = B * T, R = m->sp ? N / m->in->tp_size : N;
    LtActSlot *sl = &m->slot[s];
    void *dres = sl->dout; /* the residual-stream gradient, accumulated in place */
    m->in->pos = sl->pos; /* the forward's documents (uploaded then) */
    m->in->kstart = sl->kstart;
    m->in->kwin = sl->kwin;
    for (int j = n - 1; j >= 0; j--) {
        const int l = l0 + j;
        LtLayerActs *a = &sl->layer[j];
        if (m->recompute) lt_mdl_recompute_layer(m, l, a, sl->x[j], B);
        /* dres = d(output of layer l) flows to both mlp_out and r2 */
        void *dln = mlp_backward(m, l, a, dres, N, sl, j);
        norm_bwd(m, dres, lg(m, l, P_LN2W), lg(m, l, P_LN2B), dln, a->r2, lw(m, l, P_LN2W),
                 a->mean2, a->rstd2, R, C);
        /* dres = d(r2) flows to both the attention projection and the layer input */
        lt_tp_row_linear_bwd(&tl, m->in->dfull, m->in->dc, lg(m, l, P_PROJW), lg(m, l, P_PROJB),
                             dres, a->atty, lw(m, l, P_PROJW), NULL, N, CL, C);
        const int part = lt_devclock_part_begin();
        o->attention_bwd(be, m->in->d3c, lg(m, l, P_SINK), m->in->dc, a->qkv, a->atty, a->lse,
                         sinks_of(m, l), kstart_of(m, l), window_of(m, l), B, T, NH, NKV, HD);
        lt_devclock_part_end(part, LT_CLK_ATTN);
        if (m->in->rope_cs) /* d(pre-RoPE) */
            o->rope(be, m->in->d3c, m->in->rope_cs, m->in->pos, B, T, NH, NKV, HD, 1);
        if (a->qk_in) /* d(pre-norm q, k); the weights' gradients are partial over TP */
            o->qk_norm_bwd(be, m->in->d3c, lg(m, l, P_QNW), lg(m, l, P_KNW), a->qk_in,
                           lw(m, l, P_QNW), lw(m, l, P_KNW), a->qk_rstd, N, NH, NKV, HD);
        dln = lt_tp_col_linear_bwd(&tl, m->in->dc, m->in->scratch_sp, lg(m, l, P_QKVW),
                                   lg(m, l, P_QKVB), m->in->d3c, a->ln1, lw(m, l, P_QKVW), N, C,
                                   m->in->qkv_local);
        norm_bwd(m, dres, lg(m, l, P_LN1W), lg(m, l, P_LN1B), dln, sl->x[j], lw(m, l, P_LN1W),
                 a->mean1, a->rstd1, R, C);
        grads_ready(m, layer_first_idx(m, l), layer_last_idx(m, l));
    }
    if (lt_model_chunk_first(m, c)) {
        const int e = m->table.idx_wte, wpe = m->table.idx_wpe;
        o->embedding_bwd(be, grad(m, e), wpe >= 0 ? grad(m, wpe) : NULL,
                         lt_tp_grad_full(&tl, m->in->dfull, dres, R, C), sl->tokens, m->in->pos,
                         B, T, C);
        if (!m->in->emb_grads) grads_ready(m, e, wpe >= 0 ? wpe : e);
    } else {
        LT_CHECK(din != NULL);
        o->copy(be, din, dres, lt_act_bytes(be, (size_t)R * C));
    }
}
