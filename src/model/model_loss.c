/* model_loss.c - the last stage's loss head: the logits through the LM head
 * (tied wte or lm_head) in chunks of xent_chunk rows, the cross-entropy
 * (vocab-parallel under TP: row statistics summed over the group) with its
 * gradient taken at once back into dlnf and the head's weight, masked rows,
 * SP's gather and reduce-scatter around it (in blocks with tp_comm_overlap);
 * the per-token losses weighted and summed on the device, and their reading. */
#include "model.h"

#include "model/model_internal.h"
#include "tp_overlap.h"

void lt_model_set_eod_mask(LtModel *m, int32_t eod) { m->in->eod = eod; }

void lt_model_set_loss_weight(LtModel *m, float w) { m->in->loss_weight = w; }

static void tp_reduce_f32(LtModel *m, float *x, size_t n, LtCommOp op) {
    if (m->tp) lt_comm_all_reduce(m->tp, x, n, LT_COMM_F32, op);
}

/* Rows [r, r + n) of the chunk just through the cross-entropy: the masked
 * ones (input token eod) get no loss and no gradient. Few rows (one per
 * document), each zeroed on its own. */
static void mask_rows(LtModel *m, int r, int n) {
    LtBackend *be = m->be;
    const size_t row_bytes = lt_act_bytes(be, (size_t)m->vocab_local);
    for (int k = 0; k < m->in->nmasked; k++) {
        const int row = m->in->masked[k];
        if (row < r || row >= r + n) continue;
        be->ops->zero(be, (char *)m->in->logits + (size_t)(row - r) * row_bytes, row_bytes);
        be->ops->zero(be, m->in->losses + row, sizeof(float));
    }
}

/* Loss of rows [r0, r1) in chunks of up to xent_chunk rows into losses; with
 * grad_scale != 0 also their gradient into dc (= dlnf) and dwte. */
static void loss_rows(LtModel *m, int r0, int r1, float grad_scale) {
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int C = m->d.hidden, V = m->d.vocab, Vl = m->vocab_local;
    const int X = m->xent_chunk, wte = head_idx(m); /* the LM head: tied wte or lm_head */
    float *gmax = m->in->xstat, *gsum = m->in->xstat + X, *gtgt = m->in->xstat + 2 * X;
    for (int r = r0; r < r1; r += X) {
        int n = r1 - r < X ? r1 - r : X;
        const void *x = (const char *)m->in->lnf + lt_act_bytes(be, (size_t)r * C);
        o->linear_fwd(be, m->in->logits, NULL, x, param(m, wte), NULL, n, C, Vl);
        if (!m->tp) {
            o->xent_fwd_bwd(be, m->in->losses + r, m->in->logits, m->in->targets + r, n, V, Vl,
                            grad_scale);
        } else { /* vocab-parallel: row statistics summed over the TP ranks */
            const int32_t *tg = m->in->targets + r;
            o->xent_tp_stats(be, gmax, NULL, NULL, m->in->logits, tg, NULL, n, m->in->vocab_valid,
                             Vl);
            tp_reduce_f32(m, gmax, (size_t)n, LT_COMM_MAX);
            o->xent_tp_stats(be, NULL, gsum, gtgt, m->in->logits, tg, gmax, n, m->in->vocab_valid,
                             Vl);
            tp_reduce_f32(m, gsum, 2 * (size_t)X, LT_COMM_SUM); /* gsum and gtgt together */
            o->xent_tp_finish(be, m->in->losses + r, m->in->logits, tg, gmax, gsum, gtgt, n,
                              m->in->vocab_valid, Vl, grad_scale);
        }
        mask_rows(m, r, n);
        if (grad_scale != 0.0f)
            o->linear_bwd(be, (char *)m->in->dc + lt_act_bytes(be, (size_t)r * C), grad(m, wte),
                          NULL, m->in->logits, x, param(m, wte), NULL, n, C, Vl);
    }
}

typedef struct {
    LtModel *m;
    int R;
    float grad_scale;
} LossBlocks;
static void loss_block(void *ctx, int k) {
    const LossBlocks *b = ctx;
    loss_rows(b->m, k * b->R, (k + 1) * b->R, b->grad_scale);
}

/* The loss of the N rows of lnf (this rank's R rows fresh under SP), its sum
 * added to loss_acc; with grad_scale != 0 also dwte and the gradient of this
 * rank's rows of lnf, returned (summed over TP under SP: m->in->scratch_sp).
 * With tp_comm_overlap the gather of lnf and the reduce-scatter of its
 * gradient run in row blocks around the loss of the blocks (in rank order:
 * the vocab-parallel loss needs the same rows on every rank at once). */
void *lt_mdl_loss_head(LtModel *m, int N, float grad_scale) {
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const int C = m->d.hidden, R = m->sp ? N / m->in->tp_size : N;
    void *dln = NULL;
    const int part = lt_devclock_part_begin();
    if (!m->in->tp_overlap) {
        loss_rows(m, 0, N, grad_scale);
        if (grad_scale != 0.0f) dln = lt_tp_finish(&tl, m->in->dc, m->in->scratch_sp, R, C);
    } else {
        LossBlocks b = {.m = m, .R = R, .grad_scale = grad_scale};
        const size_t n = (size_t)R * C;
        const int grads = grad_scale != 0.0f;
        lt_tp_gather_scatter_in_order(m->tp, m->in->lnf, n, lt_act_bytes(be, n),
                                      grads ? m->in->dc : NULL, m->in->scratch_sp, n,
                                      lt_act_bytes(be, n), lt_comm_act_type(be), loss_block, &b);
        if (grads) lt_tp_round(&tl, m->in->scratch_sp, n);
        dln = grads ? m->in->scratch_sp : NULL;
    }
    if (m->in->loss_weight != 1.0f)
        be->ops->scale_f32(be, m->in->losses, m->in->loss_weight, (size_t)N);
    be->ops->sum_f64(be, m->in->loss_acc, m->in->losses, (size_t)N, 0);
    lt_devclock_part_end(part, LT_CLK_HEAD);
    return dln;
}

double lt_model_loss_take(LtModel *m) {
    double sum = 0.0;
    if (!m->table.last_stage) return 0.0;
    m->be->ops->download(m->be, &sum, m->in->loss_acc, sizeof sum);
    m->be->ops->zero(m->be, m->in->loss_acc, sizeof(double));
    return sum;
}

void lt_model_loss_reset(LtModel *m) { m->be->ops->zero(m->be, m->in->loss_acc, sizeof(double)); }

void lt_model_set_loss_acc(LtModel *m, double *dev) {
    m->in->loss_acc = dev ? dev : m->in->own_loss_acc;
}
