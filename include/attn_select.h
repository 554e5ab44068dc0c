/* attn_select.h - which implementation runs causal attention (model.attention)
 * and the bookkeeping of cuDNN's execution plans.
 *
 * Design note. The CUDA backend has two attention implementations with one
 * contract (backend.h: attention_fwd / attention_bwd): lattice's own kernels
 * (kernels/cuda/attention*.cu) and cuDNN's fused flash attention built with
 * the graph API (kernels/cuda/attention_cudnn*.cu). Everything that decides
 * between them is host C here, so it is unit-tested on machines without a
 * GPU (tests/test_attn_select.c):
 *  - lt_attn_resolve: model.attention (auto | cudnn | lattice) plus what the
 *    backend knows (CPU or CUDA, compute dtype, compute capability, the
 *    cuDNN library's version, head dim, determinism) -> a choice and a
 *    one-line reason; an explicit "cudnn" that cannot be honoured is an
 *    error naming the key.
 *  - lt_attn_cudnn_call_ok: the per-call rules (sequence length, head dim,
 *    key/value heads, masks, pointer alignment, known cuDNN bugs); a call
 *    that fails them runs on lattice's kernels (both implementations keep
 *    the same lse, so a forward from one and a backward from the other
 *    agree). cuDNN takes causal attention with or without a sliding window
 *    (a band of keys before each query, one scalar per call), and packed
 *    documents (with or without a window) whose layout the model declared
 *    (backend.h attention_documents): those run as a ragged (THD) batch of
 *    per-document causal sequences. Key starts without a declared layout
 *    stay on lattice's kernels.
 *  - LtAttnPlanCache: execution plans are built once per key (direction,
 *    B, T, NH, NKV, HD, window, ragged batch, dtype, determinism, device)
 *    and reused; a
 *    key for which no plan could be built is cached too (with the reason),
 *    so it is not retried on every call. Fixed size, least recently used
 *    entry evicted.
 * The plans themselves are opaque here (void *, destroyed by a callback). */
#ifndef LT_ATTN_SELECT_H
#define LT_ATTN_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "attn_impl.h"
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The oldest cuDNN the fused path is built for: the 9.x graph API. */
#define LT_CUDNN_MIN_VERSION 90000L
/* The oldest cuDNN whose fused attention takes a sliding window (the band
 * mask of cudnn-frontend's diagonal_band_left_bound, Transformer Engine's
 * (W, 0) windows): 9.2.0. */
#define LT_CUDNN_WINDOW_VERSION 90200L
/* The oldest cuDNN whose fused attention this build gives packed documents
 * as ragged (THD) batches: ragged softmax stats and ragged grouped-query
 * batches came with 9.6.0 (Transformer Engine's gate for ragged stats). */
#define LT_CUDNN_RAGGED_VERSION 90600L

/* What the choice depends on. */
typedef struct {
    LtAttnImpl want;     /* model.attention */
    int deterministic;   /* model.attention_deterministic: bitwise-repeatable backward only */
    int cuda;            /* 1: the CUDA backend; 0: the CPU backend */
    int bf16;            /* compute dtype is bf16 */
    int sm;              /* compute capability as major*10 + minor (0: no GPU) */
    long cudnn_version;  /* cudnnGetVersion() (9.19.0 -> 91900); 0: no cuDNN in this build */
    int head_dim;        /* the model's head dim (0: not known yet) */
    int softmax_type;    /* model.softmax_type (LtSoftmaxType): cuDNN's fused attention has
                          * no sink logit, so anything but vanilla runs lattice's kernels */
} LtAttnEnv;

typedef struct {
    int cudnn;           /* 1: cuDNN's fused attention; 0: lattice's kernels */
    char reason[320];    /* why, one line (the error message when resolve fails) */
} LtAttnChoice;

/* Decide between cuDNN and lattice. Returns 0 with *out filled, or -1 when
 * env->want is LT_ATTN_CUDNN and cuDNN cannot run it here: out->reason is
 * then the error message, naming model.attention (or
 * model.attention_deterministic). Pure function of *env. */
int lt_attn_resolve(const LtAttnEnv *env, LtAttnChoice *out);

/* Largest head dim cuDNN's fused attention takes on compute capability sm. */
int lt_attn_cudnn_max_head_dim(int sm);

typedef enum { LT_ATTN_FWD = 0, LT_ATTN_BWD = 1 } LtAttnDir;

typedef struct {
    LtAttnDir dir;
    int B, T, NH, NKV, HD; /* NKV key/value heads (backend.h: grouped-query attention) */
    int window;            /* >= 0: query t sees keys t - window .. t (backend.h); -1: causal */
    int documents;         /* 1: per-token key starts that are no plain window (packed
                            * documents, data.reset_attention_mask) */
    int ragged_batch;      /* documents with a declared layout: the graph batch of
                            * per-document sequences (a bucket >= the documents, the rest
                            * empty); 0: no layout known (window then: the declared one) */
} LtAttnShape;

/* 1 when cuDNN takes this call: env as resolved to cuDNN, the call's shape
 * and the addresses of every tensor it reads or writes (nptrs of them; all
 * must be 16-byte aligned). Else 0 with the reason in why (lattice's kernels
 * run the call). */
int lt_attn_cudnn_call_ok(const LtAttnEnv *env, const LtAttnShape *s, const void *const *ptrs,
                          int nptrs, char *why, size_t whylen);

/* ---- packed documents as a ragged (THD) batch ------------------------------ */

/* The documents of B sequences of T tokens given by doc (B*T: each token's
 * document's first token, lt_doc_layout's kstart: 0 at each sequence's
 * start, then either the previous token's value or the token's own index).
 * -1 with the first offending token in why when doc is no such layout. */
int lt_attn_doc_count(const int32_t *doc, int B, int T, char *why, size_t whylen);

/* The graph batch for docs documents in B sequences: B doubled until it
 * holds them, so a plan serves every micro batch of the same bucket. */
int lt_attn_ragged_batch(int B, int docs);

/* cuDNN's ragged tensors for doc (lt_attn_doc_count accepted it) as a batch
 * of `batch` sequences, every document one, in order; the entries past the
 * documents are empty (length 0, offsets at the end). seqlen (batch):
 * tokens of each; element offsets of each one's first token (batch + 1, the
 * last the end): qkv_off into qkv (B, T, NH + 2*NKV, HD) (q, k and v alike,
 * each view from its own base), o_off into out (B, T, NH, HD), stats_off
 * into lse (B, NH, T). */
void lt_attn_ragged_fill(const int32_t *doc, int B, int T, int NH, int NKV, int HD, int batch,
                         int32_t *seqlen, int64_t *qkv_off, int64_t *o_off, int64_t *stats_off);

/* ---- plan cache ------------------------------------------------------------ */

/* Everything an execution plan depends on (the pointers are not: they go in
 * the variant pack of each call). */
typedef struct {
    int dir;             /* LtAttnDir */
    int B, T, NH, NKV, HD;
    int window;          /* -1: causal; >= 0: causal within a window of that many keys
                          * before the query (never T - 1 or more: that is causal) */
    int ragged_batch;    /* 0: B sequences of T; > 0: packed documents, a ragged (THD)
                          * batch of this many sequences of at most T tokens inside the
                          * B*T tokens (window: within each document) */
    int dtype;           /* LtDtype of the act tensors */
    int deterministic;
    int device;          /* CUDA device (a cache belongs to one backend and handle) */
} LtAttnPlanKey;

/* The plan key of call s (as lt_attn_cudnn_call_ok accepted it) for env on
 * device: a window that reaches the sequence's first key from every query
 * (window >= T - 1) is causal attention and shares its plan. */
LtAttnPlanKey lt_attn_plan_key(const LtAttnEnv *env, const LtAttnShape *s, int device);

#define LT_ATTN_PLAN_SLOTS 32 /* documents: a plan per ragged batch bucket and direction */

typedef struct {
    LtAttnPlanKey key;
    int used;            /* the slot holds an entry */
    void *plan;          /* NULL: no plan could be built for this key */
    char why[200];       /* the reason when plan is NULL */
    uint64_t last_use;   /* LRU clock */
} LtAttnPlanSlot;

/* build(): the plan for key, or NULL with a reason in why. */
typedef void *(*LtAttnPlanBuild)(const LtAttnPlanKey *key, void *ctx, char *why, size_t whylen);
typedef void (*LtAttnPlanDestroy)(void *plan, void *ctx);

typedef struct {
    LtAttnPlanSlot slot[LT_ATTN_PLAN_SLOTS];
    uint64_t clock;
    long hits, builds, evictions;
    LtAttnPlanDestroy destroy; /* called for every non-NULL plan that leaves the cache */
    void *ctx;                 /* passed to build and destroy */
} LtAttnPlanCache;

void lt_attn_cache_init(LtAttnPlanCache *c, LtAttnPlanDestroy destroy, void *ctx);

/* The entry for key: a cached one (hit), or one built now with build(ctx)
 * and cached, a NULL plan included (*built = 1 then). When all slots are
 * used the least recently used entry is evicted first (its plan destroyed).
 * Never returns NULL. The slot stays valid until the next fetch or clear. */
LtAttnPlanSlot *lt_attn_cache_fetch(LtAttnPlanCache *c, const LtAttnPlanKey *key,
                                    LtAttnPlanBuild build, int *built);

/* Destroy every plan and empty the cache (counters kept). */
void lt_attn_cache_clear(LtAttnPlanCache *c);

/* Number of entries held. */
int lt_attn_cache_size(const LtAttnPlanCache *c);

/* ---- the CUDA backend's attention set-up --------------------------------- */

/* Counters and the choice of a CUDA backend's attention (for tests, the
 * benchmark and the run summary). */
typedef struct {
    LtAttnChoice choice;
    long cudnn_version;     /* of the loaded library (0: none) */
    int sm;                 /* the device's compute capability, major*10 + minor */
    long cudnn_calls[2];    /* calls cuDNN ran, [LT_ATTN_FWD], [LT_ATTN_BWD] */
    long fallback_calls[2]; /* calls the cuDNN choice left to lattice's kernels */
    long plans_built, plans_failed;
    char last_fallback[240];
} LtAttnInfo;

/* Resolve model.attention for a CUDA backend (its dtype, device and the cuDNN
 * library) and set the backend up for the choice (a cuDNN handle and plan
 * cache when cuDNN is chosen). head_dim and softmax_type (LtSoftmaxType): the
 * model's. Returns 0 with *out, or -1 with out->reason naming the key
 * (explicit cudnn that cannot run here; the backend then keeps its previous
 * set-up). Not a CUDA backend, or no CUDA in this build: -1. LT_CUDA_ATTN=simt
 * in the environment at backend creation forces lattice's generic kernel
 * whatever is asked. */
int lt_cuda_attention_configure(LtBackend *be, LtAttnImpl want, int deterministic, int head_dim,
                                int softmax_type, LtAttnChoice *out);

/* Fill *info for a CUDA backend; -1 (info zeroed) for any other backend. */
int lt_cuda_attention_info(LtBackend *be, LtAttnInfo *info);

/* cudnnGetVersion() of the cuDNN library this binary uses; 0 when it was
 * built without cuDNN or without CUDA. Needs no GPU. */
long lt_cudnn_version(void);

/* Build key's cuDNN SDPA graph (the one a plan would run) and finalize every
 * tensor and operation descriptor, then the operation graph without a
 * handle: the linked cuDNN's own checks of the graph, no GPU needed. 0 when
 * all finalize; -1 when a tensor or operation fails, -2 when only the
 * operation graph does (cuDNN releases that need a handle for it); the
 * failing call and status in why. -1 also without cuDNN in the build. */
int lt_cudnn_graph_check(const LtAttnPlanKey *key, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif
