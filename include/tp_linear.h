/* tp_linear.h - Megatron's column- and row-parallel linear layers over a
 * tensor-parallel group, with sequence parallelism's all-gather and
 * reduce-scatter and parallel.tp_comm_overlap's blocked form of them
 * (tp_overlap.h). The model (src/model/model_forward.c, model_backward.c)
 * calls them for the attention's qkv / proj and the MLP's fc / fc2.
 *
 * Sequence parallelism: the residual stream, the LayerNorms and their
 * statistics hold only this TP rank's R = N/tp token rows (rows
 * [rank*R, rank*R + R) of the micro batch). A LayerNorm output is written
 * into the rank's slot of a full (N, C) buffer and all-gathered before the
 * column-parallel GEMM; a row-parallel output is reduce-scattered instead of
 * all-reduced. Backward mirrors it. Without it R = N and these are the plain
 * tensor-parallel all-reduces. Every member of tp calls each function at the
 * same point. Tensors are act tensors of be (compute dtype). */
#ifndef LT_TP_LINEAR_H
#define LT_TP_LINEAR_H

#include <stddef.h>

#include "backend.h"
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    LtBackend *be;
    const LtComm *tp; /* tensor-parallel group, NULL when tp == 1 */
    int size, rank;   /* of tp (1 and 0 without it) */
    int sp;           /* sequence parallelism on */
    int overlap;      /* sp with its communication in blocks behind the GEMMs */
} LtTpLinear;

/* After a sum of fp32-stored bf16 values (CPU backend): round x (n values)
 * back to bf16. Real bf16 sums come back rounded from the communication layer. */
void lt_tp_round(const LtTpLinear *t, void *x, size_t n);

/* Full (N = R * tp, C) buffer whose slot of this rank holds fresh values:
 * all-gather under SP; nothing without it. */
void lt_tp_sp_gather(const LtTpLinear *t, void *full, int R, int C);

/* Partial sums `full` (N, C) of a row-parallel layer (or of a column-parallel
 * layer's input gradient) -> their total over TP for this rank's R rows.
 * Returns where the result is: `shard` (R, C) with SP, else `full` itself. */
void *lt_tp_finish(const LtTpLinear *t, void *full, void *shard, int R, int C);

/* The residual-stream gradient dres (R rows) as a full (N, C) tensor:
 * gathered into dfull under SP (returned), else dres itself. */
void *lt_tp_grad_full(const LtTpLinear *t, void *dfull, void *dres, int R, int C);

/* Column-parallel linear over N rows whose input inp holds fresh values only
 * in this rank's slot under SP: gather, out = inp w^T + bias (backend.h:
 * linear_fwd; pre as there). */
void lt_tp_col_linear_fwd(const LtTpLinear *t, void *out, void *pre, void *inp, const void *w,
                          const void *bias, int N, int C, int OC);

/* Row-parallel linear: full (N, OC) = inp w^T + bias, summed over TP
 * (lt_tp_finish into shard, (N/tp, OC), under SP). Returns where this rank's
 * rows of the sum are. */
void *lt_tp_row_linear_fwd(const LtTpLinear *t, void *full, void *shard, const void *inp,
                           const void *w, const void *bias, int N, int C, int OC);

/* Backward of a row-parallel linear from the residual-stream gradient dres
 * (this rank's R rows, OC columns): dinp (N, C) = dout w (times
 * gelu'(gelu_pre) when given), dw, db accumulated (linear_bwd), with dout
 * the full (N, OC) gradient gathered over TP into dfull (SP only). */
void lt_tp_row_linear_bwd(const LtTpLinear *t, void *dfull, void *dinp, float *dw, float *db,
                          void *dres, const void *inp, const void *w, const void *gelu_pre, int N,
                          int C, int OC);

/* Backward of a column-parallel linear: full (N, C) = dout w, partial over
 * TP, then summed (lt_tp_finish into shard under SP); dw, db accumulated.
 * Returns where this rank's rows of the summed input gradient are. */
void *lt_tp_col_linear_bwd(const LtTpLinear *t, void *full, void *shard, float *dw, float *db,
                           const void *dout, const void *inp, const void *w, int N, int C,
                           int OC);

#ifdef __cplusplus
}
#endif

#endif
