/* attention_cudnn.cuh - pieces shared by the cuDNN attention files:
 * attention_cudnn.cu (handle, plan cache, op entries) and
 * attention_cudnn_graph.cu (the SDPA graphs and their execution plans).
 *
 * Every CUDA build has cuDNN (the Makefile refuses one without libcudnn). */
#ifndef LT_CUDA_ATTENTION_CUDNN_CUH
#define LT_CUDA_ATTENTION_CUDNN_CUH

#include "attention.cuh"
#include "attn_select.h"

#include <cudnn.h>

/* Fatal unless the call succeeds: for calls whose failure is a bug or a
 * broken installation, not "cuDNN does not support this". */
#define CUDNN_CHECK(call)                                                                  \
    do {                                                                                   \
        cudnnStatus_t cudnn_st_ = (call);                                                  \
        if (cudnn_st_ != CUDNN_STATUS_SUCCESS)                                             \
            lt_fatal("cuDNN error %s (%d) in %s", cudnnGetErrorString(cudnn_st_),           \
                     (int)cudnn_st_, #call);                                               \
    } while (0)

typedef cudnnBackendDescriptor_t CuDesc;

/* n rounded up to cuDNN's preferred 256-byte tensor alignment. */
static inline size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

#define CG_MAX_DESCS 256 /* a backward graph with its heuristics: about 110 */
#define CG_MAX_OPS 40    /* the backward graph has 22 operations, 28 with documents */

/* A graph under construction and then its execution plan: owns every
 * descriptor made for it (destroyed together). After the first failing
 * cuDNN call (st) the builder functions do nothing, so a graph is written as
 * straight-line code and checked once at the end. */
typedef struct {
    CuDesc all[CG_MAX_DESCS];
    int nall;
    CuDesc ops[CG_MAX_OPS]; /* operations, in graph order */
    int nops;
    int64_t next_uid;       /* of the next virtual tensor */
    cudnnStatus_t st;       /* first failure (CUDNN_STATUS_SUCCESS: none) */
    char what[96];          /* which call failed */
} CuGraph;

/* An execution plan for one LtAttnPlanKey. The workspace of a call is
 * [frontend part: softmax sums and dQ accumulator (backward)][engine part]. */
typedef struct {
    CuGraph g;
    CuDesc plan;
    int dir;                /* LtAttnDir */
    int64_t engine;         /* cuDNN's global engine index (for the log) */
    int engine_nondet;      /* the engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC */
    size_t sums_bytes;      /* backward: rowsum(dO * O), fp32 (B, NH, T) */
    size_t accum_bytes;     /* backward, non-deterministic: fp32 dQ accumulator, else 0 */
    size_t engine_bytes;    /* the engine's own workspace */
    int zero_accum;         /* the accumulator must be zeroed before each call (cuDNN < 9.6) */
    int windowed;           /* the graph masks a sliding window (band is in its variant pack) */
    int ragged;             /* packed documents: the ragged batch's tensors are in the pack */
    float scale, neg_inf, one; /* by-value scalars: host memory read at each execute */
    float band;             /* window + 1: keys each query sees at most (cuDNN's left bound) */
} CuAttnPlan;

/* Unique ids of the tensors a call passes in the variant pack (Q, K, V and
 * dQ, dK, dV consecutive: views of one qkv-shaped buffer each). */
enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SCALE, UID_NEG_INF, UID_ONE, UID_SUMS, UID_DQ_ACCUM, UID_BAND,
    /* packed documents (a ragged batch): each sequence's length, as the query
     * and as the key count, and the element offsets of each one's first token
     * in qkv (and dqkv), in out (and dout) and in lse */
    UID_SEQ_Q, UID_SEQ_KV, UID_QKV_OFF, UID_O_OFF, UID_STATS_OFF,
    UID_VIRTUAL = 100 /* virtual tensors count up from here */
};

/* The SDPA graph of key's direction, an engine from cuDNN's heuristics and
 * the finalized execution plan on handle h. NULL with the reason in why when
 * cuDNN has no engine for it (unsupported here: the caller falls back). */
CuAttnPlan *cudnn_plan_build(cudnnHandle_t h, const LtAttnPlanKey *key, long version, char *why,
                             size_t whylen);
void cudnn_plan_destroy(CuAttnPlan *p);
/* Total workspace bytes of one call of p. */
size_t cudnn_plan_workspace(const CuAttnPlan *p);

#endif
