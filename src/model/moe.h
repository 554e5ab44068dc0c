/* moe.h - the routed half of a mixture-of-experts layer over the backend's
 * MoE ops (internal to src/model/): router, top-k, load-balancing losses,
 * dispatch in expert-major order, one GEMM chain per expert, combine. The
 * planner (src/planner/plan.c) sizes its memory from lt_moe_shape.
 *
 * It works on the R tokens this rank holds of a micro batch of N (R = N, or
 * N / TP under sequence parallelism: each TP rank routes its own rows with
 * the whole router and whole experts, expert tensor parallelism 1). What
 * one process would compute over all N tokens is kept: the load-balancing
 * counts are summed over the TP group, and the losses are taken over N.
 *
 * Expert parallelism (EP ranks, a group folded into TP x DP): rank p of the
 * group computes experts p E/EP .. (p + 1) E/EP - 1 for the tokens of every
 * rank of the group. The permuted rows, in expert-major order, go to their
 * experts' ranks by an all-to-all (row counts per expert exchanged first),
 * are reordered there by local expert, run through the experts and go back
 * the same way; the backward mirrors it. A rank holds only the weights of the
 * experts it computes (the model's expert table, model.h), and their
 * gradients, taken from the tokens of its whole EP group, are completed by
 * the sum over the expert-data-parallel group (the stage's ranks holding the
 * same experts), which the experts' optimizer does (optim.h).
 *
 * Expert tensor parallelism (ETP ranks, folded into TP x DP before EP:
 * topology.h): the ETP ranks of an EP rank's place hold the same experts,
 * rank q the q-th slice of each one's FFN width F (params.h's expert table:
 * fc / gate | up by rows, proj / down by columns). After the EP all-to-all the
 * rows each received are all-gathered over ETP (their counts first), so each
 * ETP rank computes its F/ETP slice for the rows of the whole ETP group, the
 * second GEMM's bias added on ETP rank 0 only; the partial outputs are
 * reduce-scattered over ETP (each rank gets the sum for the rows it
 * contributed) and go back by the combine all-to-all (Megatron-Core's
 * MoEAlltoAllTokenDispatcher). The backward mirrors it: the output gradient
 * rows all-gathered, the input gradient's partials reduce-scattered. Each ETP
 * rank sees the same output gradient rows, so each computes the same (whole)
 * gradient of proj.bias. */
#ifndef LT_MODEL_MOE_H
#define LT_MODEL_MOE_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "params.h"

/* The shapes of one rank's MoE layers. */
typedef struct {
    int R, N, T;     /* rows routed here, tokens of the micro batch, sequence length */
    long row0;       /* the micro-batch index of the first row routed here */
    int C, E, K, F;  /* hidden, experts, experts per token, expert width on this rank
                      * (moe.ffn / etp) */
    int llama;       /* SwiGLU experts, biases as the model has them (else GeLU with
                      * biases) */
    int groups;      /* load-balancing groups: sequences (seq_aux_loss) or 1 */
    int capacity;    /* rows an expert keeps (0: dropless) */
    int M;           /* rows of the permuted buffers: max(R K, E capacity) */
    int ep, ep_rank; /* expert parallelism: group size and this rank's place */
    int El;          /* experts computed here: E / ep */
    int etp, etp_rank; /* expert tensor parallelism: group size and this rank's place */
    int Mr;          /* rows the local experts' buffers hold at first: etp x ep x what one
                      * rank can send, or dropless under EP or ETP at most
                      * LT_MOE_EP_HEADROOM (default 2; 0: no limit) times the balanced
                      * share etp R K; a forward that receives more grows them (see
                      * lt_moe_forward) */
    int Mr_max;      /* the most they can receive: etp x ep x what one rank can send */
} LtMoeShape;

/* One expert's (or the router's) tensors: weights in the compute dtype and
 * their fp32 gradients; the biases NULL for a Llama without linear biases. */
typedef struct {
    const void *w1, *b1, *w2, *b2;  /* fc (F or 2F, C), its bias, proj (C, F), its bias */
    float *g1, *gb1, *g2, *gb2;
} LtExpertTensors;

typedef struct {
    const void *router;   /* (E, C) */
    const void *bias;     /* (E) the expert bias (aux-loss-free balancing), or NULL */
    float *grouter;
    LtExpertTensors *expert; /* E, by global index: under EP only this rank's are set */
    const void *router_bias; /* (E) added to the logits (Llama with linear biases), or NULL */
    float *grouter_bias;     /* its gradient */
} LtMoeWeights;

/* What one layer keeps from forward to backward (device memory, but host_off and
 * host_stats). */
typedef struct LtMoeActs {
    float *logits;        /* (R, E) */
    int32_t *idx;         /* (R, K) */
    float *w;             /* (R, K) routing weights */
    int32_t *pos;         /* (R, K) rows in the permuted buffer, -1 dropped */
    int32_t *src;         /* (M) tokens of the permuted rows, -1 padding */
    int32_t *offsets;     /* (E + 1) */
    int32_t *dropped;     /* (1) */
    int32_t *host_off;    /* (E + 1) host copy of offsets */
    float *counts;        /* (groups, E) load-balancing counts of the whole micro batch */
    float *psum;          /* (groups, E) sums of the aux scores (summed over TP) */
    double *zsum;         /* (1) sum of the squared router log-sum-exp (summed over TP) */
    void *host_stats;     /* host_alloc copy of counts, psum, zsum (the losses' statistics,
                           * read after the offsets' download: one host wait for both) */
    LtMoeStats *stats_to; /* where that read adds the losses; NULL: none pending */
    float stats_coef[2];  /* the aux and z coefficients of the pending read */
    void *xp, *y;         /* (M, C): permuted input and the experts' output, expert-major
                           * over all E experts (what this rank's tokens send and get) */
    void *xe, *hpre, *h, *ye; /* (Mr, C), (Mr, F or 2F), (Mr, F), (Mr, C): the local experts'
                               * rows (without EP and ETP: xp and y themselves) */
    void *out;            /* (R, C) the routed output */
    /* expert parallelism: rows sent to / received from each rank, the local experts'
     * offsets in xe, and the reorder between the received (rank-major) and the local
     * expert-major order: xe row r = received row ge[r], ginv its inverse (device) */
    size_t *ep_send, *ep_recv; /* (ep) elements (rows x C) */
    int *loff;            /* (El + 1) */
    int32_t *ge, *ginv;   /* (cap) */
    int *etp_n;           /* (etp) ETP: elements (rows x C) each rank of the group
                           * contributes to the gathered rows, in group order */
    int cap;              /* rows xe, ye, hpre, h, ge and ginv hold (Mr, or grown) */
} LtMoeActs;

/* Backward workspace shared by the layers. */
typedef struct {
    void *dy, *dh, *dhpre, *dxp; /* (Mw, C), (Mw, F), (Mw, 2F), (Mw, C); Mw = max(M, Mr) */
    void *xr;                    /* (Mw, C) EP or ETP: rows as the all-to-all or the
                                  * gather delivers them */
    float *dw, *dlogits;         /* (R, K), (R, E) */
    float *bias;                 /* (E) the expert bias in fp32 for the top-k choice */
    int32_t *host_ge;            /* (2 cap + 2) EP or ETP: staging of the reorder and its
                                  * inverse */
    int cap;                     /* rows of the (Mw) buffers: Mw, or grown */
    size_t grown;                /* device bytes the buffers of every layer grew by */
} LtMoeWork;

/* The routing settings and the loss weights of a step. */
typedef struct {
    const LtMoeDims *dims;
    const LtComm *tp;     /* the group whose ranks route the other rows (SP), or NULL */
    const LtComm *ep;     /* the expert-parallel group, or NULL (EP 1) */
    const LtComm *etp;    /* the expert-tensor-parallel group, or NULL (ETP 1) */
    float aux_weight;     /* the micro batch's share of the step's objective */
    const LtGlu *glu;     /* the SwiGLU experts' gated activation (NULL: SwiGLU) */
} LtMoeCtx;

LtMoeShape lt_moe_shape(const LtMoeDims *d, int arch, int B, int T, int C, int R, long row0,
                        int ep, int ep_rank, int etp, int etp_rank);
/* Allocate a's buffers (bytes added to *bytes); lt_moe_acts_free frees them. */
void lt_moe_acts_alloc(LtBackend *be, const LtMoeShape *s, LtMoeActs *a, size_t *bytes);
void lt_moe_acts_free(LtBackend *be, LtMoeActs *a);
void lt_moe_work_alloc(LtBackend *be, const LtMoeShape *s, LtMoeWork *w, size_t *bytes);
void lt_moe_work_free(LtBackend *be, LtMoeWork *w);

/* Forward of the routed experts on x (R, C) into a->out (R, C); its losses and
 * loads added to acc (NULL: not counted). Waits for the device (the experts'
 * row counts, and with acc the losses). Dropless under EP, a forward that
 * receives more rows than a's buffers hold (or w's) grows them - to 1.25x
 * the rows, at most Mr_max; what they held is not needed then - and says so
 * in the log: the memory a run ends with can exceed what it started with
 * (and what the planner counts) by w->grown bytes. */
void lt_moe_forward(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s,
                    const LtMoeWeights *wt, LtMoeActs *a, LtMoeWork *w, const void *x,
                    LtMoeStats *acc);
/* Backward from dout (R, C), the gradient of a->out: weight gradients
 * accumulated, the input's gradient ADDED to dx (R, C). */
void lt_moe_backward(LtBackend *be, const LtMoeCtx *cx, const LtMoeShape *s,
                     const LtMoeWeights *wt, const LtMoeActs *a, LtMoeWork *w, const void *x,
                     const void *dout, void *dx);

/* Adds `forwards` micro batches' loads to acc: n holds E + 2 integers per
 * forward (tokens per expert, dropped, rows routed), summed over the ranks
 * that routed the micro batch. */
void lt_moe_fold_loads(LtMoeStats *acc, const int32_t *n, int forwards, int E, int K);

/* 1 when the backend has every MoE op. */
int lt_moe_backend_ok(const LtBackend *be);

#endif
