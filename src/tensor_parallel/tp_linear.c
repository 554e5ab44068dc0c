/* tp_linear.c - column- and row-parallel linears with sequence parallelism
 * (see tp_linear.h). */
#include "tp_linear.h"

#include "tp_overlap.h"

static void *rows_at(const LtTpLinear *t, void *x, size_t row, int C) {
    return (char *)x + lt_act_bytes(t->be, row * (size_t)C);
}

static int rows_of(const LtTpLinear *t, int N) { return t->sp ? N / t->size : N; }

void lt_tp_round(const LtTpLinear *t, void *x, size_t n) {
    if (t->be->act_size == sizeof(float) && t->be->dtype != LT_F32)
        t->be->ops->act_from_f32(t->be, x, x, n);
}

/* Sum an act tensor over the tensor-parallel group (the conjugate of the
 * identity: forward after row-parallel layers, backward after column-parallel
 * ones). The group takes the backend's buffers (comm.h: host memory for the
 * CPU backend, NCCL or staged MPI for CUDA); the sum is in the compute dtype. */
static void tp_sum(const LtTpLinear *t, void *x, size_t n) {
    if (!t->tp) return;
    lt_comm_all_reduce(t->tp, x, n, lt_comm_act_type(t->be), LT_COMM_SUM);
    lt_tp_round(t, x, n);
}

void lt_tp_sp_gather(const LtTpLinear *t, void *full, int R, int C) {
    if (!t->sp) return;
    size_t n = (size_t)R * C;
    lt_comm_all_gather(t->tp, rows_at(t, full, (size_t)t->rank * R, C), full, n,
                       lt_comm_act_type(t->be));
}

void *lt_tp_finish(const LtTpLinear *t, void *full, void *shard, int R, int C) {
    if (!t->sp) {
        tp_sum(t, full, (size_t)R * C);
        return full;
    }
    lt_comm_reduce_scatter(t->tp, full, shard, (size_t)R * C, lt_comm_act_type(t->be));
    lt_tp_round(t, shard, (size_t)R * C);
    return shard;
}

void *lt_tp_grad_full(const LtTpLinear *t, void *dfull, void *dres, int R, int C) {
    if (!t->sp) return dres;
    t->be->ops->copy(t->be, rows_at(t, dfull, (size_t)t->rank * R, C), dres,
                     lt_act_bytes(t->be, (size_t)R * C));
    lt_tp_sp_gather(t, dfull, R, C);
    return dfull;
}

/* ---- tp_comm_overlap: the SP communication in row blocks behind the GEMMs ----
 * Block k of an (N, *) tensor is rank k's R rows. A GEMM over row block k of
 * its input gives row block k of its output (dinp likewise); weight and bias
 * gradients sum over all rows, so they run once over the full tensors, as
 * the plain path's linear_bwd computes them. */

typedef struct {
    const LtTpLinear *t;
    void *out, *pre;           /* forward: out (N, OC), pre-activation or NULL */
    const void *inp, *w, *bias; /* inp (N, C), w (OC, C) */
    const void *dout, *gelu_pre; /* backward: dout (N, OC), GeLU input (N, C) or NULL */
    float *dw, *db;
    int N, R, C, OC;
} RowGemm;

static void *blk(const RowGemm *g, const void *x, int k, int cols) {
    return rows_at(g->t, (void *)x, (size_t)k * (size_t)g->R, cols);
}
static void fwd_block(void *ctx, int k) {
    const RowGemm *g = ctx;
    g->t->be->ops->linear_fwd(g->t->be, blk(g, g->out, k, g->OC),
                              g->pre ? blk(g, g->pre, k, g->OC) : NULL, blk(g, g->inp, k, g->C),
                              g->w, g->bias, g->R, g->C, g->OC);
}
static void dinp_block(void *ctx, int k) { /* writes g->out: dinp (N, C) */
    const RowGemm *g = ctx;
    g->t->be->ops->linear_bwd(g->t->be, blk(g, g->out, k, g->C), NULL, NULL,
                              blk(g, g->dout, k, g->OC), NULL, g->w,
                              g->gelu_pre ? blk(g, g->gelu_pre, k, g->C) : NULL, g->R, g->C,
                              g->OC);
}
static void dweight_all(void *ctx, int k) {
    const RowGemm *g = ctx;
    if (g->dw || g->db)
        g->t->be->ops->linear_bwd(g->t->be, NULL, g->dw, g->db, g->dout, g->inp, g->w, NULL,
                                  g->N, g->C, g->OC);
}

static void gather_blocks(const LtTpLinear *t, void *full, int R, int C, LtRowBlockFn fn,
                          RowGemm *g) {
    const size_t n = (size_t)R * C;
    lt_tp_gather_blocks(t->tp, full, n, lt_act_bytes(t->be, n), lt_comm_act_type(t->be), fn, g);
}

/* Row block k of full is produced by fn and reduce-scattered behind the next
 * (tail after the last); shard gets this rank's sum, returned. */
static void *scatter_blocks(const LtTpLinear *t, void *full, void *shard, int R, int C,
                            LtRowBlockFn fn, LtRowBlockFn tail, RowGemm *g) {
    const size_t n = (size_t)R * C;
    lt_tp_scatter_blocks(t->tp, full, shard, n, lt_act_bytes(t->be, n), lt_comm_act_type(t->be),
                         fn, tail, g);
    lt_tp_round(t, shard, n);
    return shard;
}

/* ---- the four linears ---- */

void lt_tp_col_linear_fwd(const LtTpLinear *t, void *out, void *pre, void *inp, const void *w,
                          const void *bias, int N, int C, int OC) {
    const int R = rows_of(t, N);
    if (!t->overlap) {
        lt_tp_sp_gather(t, inp, R, C);
        t->be->ops->linear_fwd(t->be, out, pre, inp, w, bias, N, C, OC);
        return;
    }
    RowGemm g = {.t = t, .out = out, .pre = pre, .inp = inp, .w = w, .bias = bias, .N = N,
                 .R = R, .C = C, .OC = OC};
    gather_blocks(t, inp, R, C, fwd_block, &g);
}

void *lt_tp_row_linear_fwd(const LtTpLinear *t, void *full, void *shard, const void *inp,
                           const void *w, const void *bias, int N, int C, int OC) {
    const int R = rows_of(t, N);
    if (!t->overlap) {
        t->be->ops->linear_fwd(t->be, full, NULL, inp, w, bias, N, C, OC);
        return lt_tp_finish(t, full, shard, R, OC);
    }
    RowGemm g = {.t = t, .out = full, .inp = inp, .w = w, .bias = bias, .N = N, .R = R, .C = C,
                 .OC = OC};
    return scatter_blocks(t, full, shard, R, OC, fwd_block, NULL, &g);
}

void lt_tp_row_linear_bwd(const LtTpLinear *t, void *dfull, void *dinp, float *dw, float *db,
                          void *dres, const void *inp, const void *w, const void *gelu_pre, int N,
                          int C, int OC) {
    const int R = rows_of(t, N);
    if (!t->overlap) {
        t->be->ops->linear_bwd(t->be, dinp, dw, db, lt_tp_grad_full(t, dfull, dres, R, OC), inp,
                               w, gelu_pre, N, C, OC);
        return;
    }
    t->be->ops->copy(t->be, rows_at(t, dfull, (size_t)t->rank * R, OC), dres,
                     lt_act_bytes(t->be, (size_t)R * OC));
    RowGemm g = {.t = t, .out = dinp, .inp = inp, .w = w, .dout = dfull, .gelu_pre = gelu_pre,
                 .dw = dw, .db = db, .N = N, .R = R, .C = C, .OC = OC};
    gather_blocks(t, dfull, R, OC, dinp_block, &g);
    dweight_all(&g, -1);
}

void *lt_tp_col_linear_bwd(const LtTpLinear *t, void *full, void *shard, float *dw, float *db,
                           const void *dout, const void *inp, const void *w, int N, int C,
                           int OC) {
    const int R = rows_of(t, N);
    if (!t->overlap) {
        t->be->ops->linear_bwd(t->be, full, dw, db, dout, inp, w, NULL, N, C, OC);
        return lt_tp_finish(t, full, shard, R, C);
    }
    RowGemm g = {.t = t, .out = full, .inp = inp, .w = w, .dout = dout, .dw = dw, .db = db,
                 .N = N, .R = R, .C = C, .OC = OC};
    /* the weight gradient runs behind the last block's reduction */
    return scatter_blocks(t, full, shard, R, C, dinp_block, dweight_all, &g);
}
