/* attention_cudnn.cu - the attention op entries' cuDNN path: one cuDNN
 * handle per backend, the plan cache, the variant pack of each call.
 *
 * Design note. The backend's attention resolves once (model.attention, see
 * attn_select.h); when it resolves to cuDNN, lt_cuda_attention_configure
 * makes a CudnnAttn here: a cudnnHandle_t on the backend's device and an
 * LtAttnPlanCache whose plans attention_cudnn_graph.cu builds. Each call
 * then: checks the per-call rules (lt_attn_cudnn_call_ok; a sliding window
 * is part of the plan's key, and so is a ragged batch), fetches
 * the plan for its key (built on first use, kept; a key cuDNN has no engine
 * for is remembered and goes to lattice's kernels), takes one workspace from the
 * current stream's scratch arena (cu_scratch: [row sums | dQ accumulator |
 * engine workspace], none of which the op's inputs live in), binds the
 * handle to the current stream and executes a variant pack of the call's
 * pointers. Calls left to lattice are counted and the first of each
 * direction is logged with its reason; lt_cuda_attention_info reports the
 * counters.
 * Never fatal: a plan cuDNN cannot build, or one whose execute fails, sends
 * the call (and every later call of that key: the failed plan is dropped
 * from the cache and its key remembered with cuDNN's status) to lattice's
 * kernels, logged once per direction. Only an error CUDA itself reports
 * afterwards (a sticky launch failure) is left to the backend's checks.
 * Test hook: LT_CUDNN_FAIL=build or =execute (read when the handle is made)
 * makes every plan build or execute fail as cuDNN's would, so the GPU tests
 * can check the fallback's results and counters.
 * Packed documents: the model declares each kstart array's documents
 * (backend.h attention_documents; cudnn_attn_documents keeps them per array,
 * forgotten when the array is freed). A call whose kstart was declared runs
 * as a ragged batch of per-document sequences: the plan for the batch's
 * bucket (lt_attn_ragged_batch), and device arrays of lengths and offsets
 * (lt_attn_ragged_fill) uploaded on the current stream by the first call
 * after the declaration (their element offsets need the call's heads). A
 * call whose kstart was not declared, or whose declaration is no document
 * layout, runs on lattice's kernels like any other refused call. None of
 * this has run on a GPU yet: this machine has none (tests/test_attn_select
 * checks only that cuDNN's descriptors take the graphs; the GPU test's
 * attention_docs case checks results). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_cudnn.cuh"

/* The declared documents behind one kstart array, and the ragged batch's
 * device arrays for the heads they were last built for. */
typedef struct {
    const int32_t *kstart;  /* the key: the device array the calls pass */
    int B, T, window;       /* window: the declared one, -1 none */
    int docs, batch;        /* documents; the graph batch (bucket) */
    int32_t *doc;           /* host copy of the declaration (B*T) */
    char why[200];          /* non-empty: the declaration is no document layout */
    void *dev;              /* seqlen (batch int32) | qkv, o, stats offsets ((batch+1) int64) */
    size_t dev_bytes;
    int built_for[3];       /* NH, NKV, HD of dev's offsets; NH 0: to be built */
} DocLayout;

struct CudnnAttn {
    cudnnHandle_t handle;
    LtAttnEnv env;
    int device;
    LtAttnPlanCache cache;
    long calls[2], fallbacks[2], plans_failed;
    int logged[2];          /* a fallback of this direction was logged */
    char last_fallback[240];
    int fail_hook;          /* LT_CUDNN_FAIL: 0 none, 1 build, 2 execute */
    long exec_failed;
    DocLayout *layouts;     /* declared kstart arrays (nlayouts of them) */
    int nlayouts;
};

extern "C" long lt_cudnn_version(void) { return (long)cudnnGetVersion(); }

static void *plan_build_cb(const LtAttnPlanKey *key, void *ctx, char *why, size_t whylen) {
    const CudnnAttn *ca = (const CudnnAttn *)ctx;
    if (ca->fail_hook == 1) {
        snprintf(why, whylen, "plan build failed: CUDNN_STATUS_NOT_SUPPORTED (forced by "
                              "LT_CUDNN_FAIL=build)");
        return NULL;
    }
    return cudnn_plan_build(ca->handle, key, ca->env.cudnn_version, why, whylen);
}

static void plan_destroy_cb(void *plan, void *ctx) {
    (void)ctx;
    cudnn_plan_destroy((CuAttnPlan *)plan);
}

CudnnAttn *cudnn_attn_create(int device, const LtAttnEnv *env, char *err, size_t errlen) {
    cudnnHandle_t h = NULL;
    cudnnStatus_t st = cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(err, errlen, "cudnnCreate failed on device %d: %s", device,
                 cudnnGetErrorString(st));
        return NULL;
    }
    CudnnAttn *ca = (CudnnAttn *)calloc(1, sizeof(CudnnAttn));
    if (!ca) lt_fatal("out of host memory");
    ca->handle = h;
    ca->env = *env;
    ca->device = device;
    lt_attn_cache_init(&ca->cache, plan_destroy_cb, ca);
    const char *hook = getenv("LT_CUDNN_FAIL");
    if (hook && !strcmp(hook, "build")) ca->fail_hook = 1;
    else if (hook && !strcmp(hook, "execute")) ca->fail_hook = 2;
    else if (hook && *hook)
        lt_log("attention: LT_CUDNN_FAIL=%s ignored (build or execute)\n", hook);
    if (ca->fail_hook)
        lt_log("attention: LT_CUDNN_FAIL=%s: every cuDNN plan %s will fail (test hook)\n", hook,
               hook);
    return ca;
}

static void layout_release(DocLayout *dl) {
    if (dl->dev) CU_CHECK(cudaFree(dl->dev));
    free(dl->doc);
    memset(dl, 0, sizeof *dl);
}

void cudnn_attn_destroy(CudnnAttn *ca) {
    if (!ca) return;
    for (int i = 0; i < ca->nlayouts; i++) layout_release(&ca->layouts[i]);
    free(ca->layouts);
    lt_attn_cache_clear(&ca->cache);
    CUDNN_CHECK(cudnnDestroy(ca->handle));
    free(ca);
}

void cudnn_attn_counters(const CudnnAttn *ca, LtAttnInfo *info) {
    if (!ca) return;
    for (int d = 0; d < 2; d++) {
        info->cudnn_calls[d] = ca->calls[d];
        info->fallback_calls[d] = ca->fallbacks[d];
    }
    info->plans_built = ca->cache.builds - ca->plans_failed;
    info->plans_failed = ca->plans_failed;
    snprintf(info->last_fallback, sizeof info->last_fallback, "%s", ca->last_fallback);
}

/* ======================= packed documents ======================= */

/* The layout declared for kstart, or NULL. */
static DocLayout *layout_of(CudnnAttn *ca, const void *kstart) {
    for (int i = 0; i < ca->nlayouts; i++)
        if (ca->layouts[i].kstart == kstart) return &ca->layouts[i];
    return NULL;
}

void cudnn_attn_documents(CudnnAttn *ca, const int32_t *kstart, const int32_t *doc, int window,
                          int B, int T) {
    if (!ca || !kstart || B <= 0 || T <= 0) return;
    DocLayout *dl = layout_of(ca, kstart);
    if (!dl) {
        ca->layouts = (DocLayout *)realloc(ca->layouts, (ca->nlayouts + 1) * sizeof(DocLayout));
        if (!ca->layouts) lt_fatal("out of host memory");
        dl = &ca->layouts[ca->nlayouts++];
        memset(dl, 0, sizeof *dl);
    }
    const size_t n = (size_t)B * T;
    const int w = window < 0 ? -1 : window;
    if (dl->B == B && dl->T == T && dl->window == w && !memcmp(dl->doc, doc, n * sizeof(int32_t)))
        return; /* declared again unchanged (each pipeline chunk's forward): arrays kept */
    if ((size_t)dl->B * dl->T != n) {
        free(dl->doc);
        dl->doc = (int32_t *)lt_malloc(n * sizeof(int32_t));
    }
    memcpy(dl->doc, doc, n * sizeof(int32_t));
    dl->kstart = kstart, dl->B = B, dl->T = T, dl->window = w;
    dl->built_for[0] = 0;
    dl->why[0] = '\0';
    dl->docs = lt_attn_doc_count(doc, B, T, dl->why, sizeof dl->why);
    dl->batch = dl->docs > 0 ? lt_attn_ragged_batch(B, dl->docs) : 0;
}

void cudnn_attn_forget(CudnnAttn *ca, const void *p) {
    DocLayout *dl = ca && p ? layout_of(ca, p) : NULL;
    if (!dl) return;
    layout_release(dl);
    *dl = ca->layouts[--ca->nlayouts]; /* the last one fills the hole */
}

/* dl's device arrays for a call with these heads: built and uploaded on the
 * current stream when the declaration or the heads changed (the stream
 * orders the upload after every earlier call that read them). The device
 * pointers of seqlen and the three offset arrays into out. */
static void layout_arrays(LtBackend *be, DocLayout *dl, int NH, int NKV, int HD, void *out[4]) {
    const size_t lens = align256((size_t)dl->batch * sizeof(int32_t));
    const size_t offs = align256((size_t)(dl->batch + 1) * sizeof(int64_t));
    const size_t bytes = lens + 3 * offs;
    if (dl->built_for[0] != NH || dl->built_for[1] != NKV || dl->built_for[2] != HD) {
        if (bytes > dl->dev_bytes) { /* rare: the first call, or a larger bucket */
            if (dl->dev) CU_CHECK(cudaFree(dl->dev));
            CU_CHECK(cudaMalloc(&dl->dev, bytes));
            dl->dev_bytes = bytes;
        }
        char *host = (char *)lt_malloc(bytes);
        lt_attn_ragged_fill(dl->doc, dl->B, dl->T, NH, NKV, HD, dl->batch, (int32_t *)host,
                            (int64_t *)(host + lens), (int64_t *)(host + lens + offs),
                            (int64_t *)(host + lens + 2 * offs));
        /* pageable: the copy has left host once the call returns */
        CU_CHECK(cudaMemcpyAsync(dl->dev, host, bytes, cudaMemcpyHostToDevice, cu_stream(be)));
        free(host);
        dl->built_for[0] = NH, dl->built_for[1] = NKV, dl->built_for[2] = HD;
    }
    char *dev = (char *)dl->dev;
    out[0] = dev, out[1] = dev + lens, out[2] = dev + lens + offs, out[3] = dev + lens + 2 * offs;
}

/* ======================= per call ======================= */

static const char *dir_name(int dir) { return dir == LT_ATTN_FWD ? "forward" : "backward"; }

/* Count (and the first time per direction log) a call left to lattice. */
static void fallback(CudnnAttn *ca, int dir, const char *why) {
    ca->fallbacks[dir]++;
    snprintf(ca->last_fallback, sizeof ca->last_fallback, "%s", why);
    if (ca->logged[dir]) return;
    ca->logged[dir] = 1;
    lt_log("attention: a %s call runs on lattice's kernels instead of cuDNN: %s (logged once)\n",
           dir_name(dir), why);
}

/* Plan key k as the log names it, in buf. */
static const char *key_text(const LtAttnPlanKey *k, char *buf, size_t n) {
    int len = snprintf(buf, n, "B=%d T=%d NH=%d NKV=%d HD=%d", k->B, k->T, k->NH, k->NKV, k->HD);
    if (k->window >= 0 && len > 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, " window=%d", k->window);
    if (k->ragged_batch && len > 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, " documents (ragged batch of %d)", k->ragged_batch);
    return buf;
}

/* The cache slot of this call's plan, or NULL when lattice's kernels must run it. */
static LtAttnPlanSlot *plan_for(CudnnAttn *ca, const LtAttnShape *s, const void *const *ptrs,
                            int nptrs, const DocLayout *dl) {
    char why[240];
    if (dl && dl->why[0]) {
        snprintf(why, sizeof why, "%s with declared documents that are none: %.160s",
                 dir_name(s->dir), dl->why);
        fallback(ca, s->dir, why);
        return NULL;
    }
    if (!lt_attn_cudnn_call_ok(&ca->env, s, ptrs, nptrs, why, sizeof why)) {
        fallback(ca, s->dir, why);
        return NULL;
    }
    const LtAttnPlanKey key = lt_attn_plan_key(&ca->env, s, ca->device);
    char shape[80];
    key_text(&key, shape, sizeof shape);
    int built = 0;
    const double t0 = lt_now(); /* a plan build (graph, heuristics, NVRTC) is timed and printed */
    LtAttnPlanSlot *slot = lt_attn_cache_fetch(&ca->cache, &key, plan_build_cb, &built);
    const double build_ms = 1e3 * (lt_now() - t0);
    const CuAttnPlan *p = (const CuAttnPlan *)slot->plan;
    if (built && p)
        lt_log("attention: cuDNN %s plan %s: engine %lld%s, workspace %zu bytes, built in "
               "%.0f ms\n", dir_name(s->dir), shape, (long long)p->engine,
               p->engine_nondet ? " (noted non-deterministic)" : "", cudnn_plan_workspace(p),
               build_ms);
    if (p) return slot;
    if (built) {
        ca->plans_failed++;
        lt_log("attention: cuDNN has no %s plan for %s: %s\n", dir_name(s->dir), shape,
               slot->why);
    }
    snprintf(why, sizeof why, "no cuDNN plan for %s: %.140s", shape, slot->why);
    fallback(ca, s->dir, why);
    return NULL;
}

#define PACK_MAX 24

/* Tensors of one execute: unique ids and their data pointers. */
typedef struct {
    int64_t uid[PACK_MAX];
    void *ptr[PACK_MAX];
    int n;
} VariantPack;

static void pack_add(VariantPack *pk, int64_t uid, const void *ptr) {
    if (pk->n == PACK_MAX) lt_fatal("cuDNN variant pack: more than %d tensors", PACK_MAX);
    pk->uid[pk->n] = uid;
    pk->ptr[pk->n++] = (void *)ptr;
}

/* Three tensors at base + {0, NH, NH + NKV} * HD elements (q | k | v of each
 * token): uids first, first + 1, first + 2. */
static void pack_qkv(VariantPack *pk, int64_t first, const void *base, int NH, int NKV, int HD) {
    const bf16 *b = (const bf16 *)base;
    pack_add(pk, first, b);
    pack_add(pk, first + 1, b + (size_t)NH * HD);
    pack_add(pk, first + 2, b + (size_t)(NH + NKV) * HD);
}

/* Execute the slot's plan on the current stream: the scalars and workspace
 * tensors are added to the call's pack here. 1 when cuDNN ran it; 0 when a
 * call failed: the plan is dropped and its key remembered as failed (cuDNN's
 * status logged once), so this and every later call of the key run on
 * lattice's kernels. */
#define EXEC_STEP(call)                                                                    \
    do {                                                                                   \
        if (st == CUDNN_STATUS_SUCCESS) {                                                  \
            st = (call);                                                                   \
            if (st != CUDNN_STATUS_SUCCESS) what = #call;                                  \
        }                                                                                  \
    } while (0)

static int run_plan(LtBackend *be, CudnnAttn *ca, LtAttnPlanSlot *slot, VariantPack *pk) {
    CuAttnPlan *p = (CuAttnPlan *)slot->plan;
    char *ws = (char *)cu_scratch(be, cudnn_plan_workspace(p));
    pack_add(pk, UID_SCALE, &p->scale);
    pack_add(pk, UID_NEG_INF, &p->neg_inf);
    if (p->windowed) pack_add(pk, UID_BAND, &p->band);
    if (p->dir == LT_ATTN_BWD) {
        pack_add(pk, UID_ONE, &p->one);
        pack_add(pk, UID_SUMS, ws);
    }
    if (p->accum_bytes) {
        pack_add(pk, UID_DQ_ACCUM, ws + p->sums_bytes);
        if (p->zero_accum)
            CU_CHECK(cudaMemsetAsync(ws + p->sums_bytes, 0, p->accum_bytes, cu_stream(be)));
    }
    void *engine_ws = ws + p->sums_bytes + p->accum_bytes;
    CuDesc vp = NULL;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    const char *what = "";
    EXEC_STEP(cudnnSetStream(ca->handle, cu_stream(be)));
    EXEC_STEP(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    EXEC_STEP(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                       pk->n, pk->uid));
    EXEC_STEP(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                       CUDNN_TYPE_VOID_PTR, pk->n, pk->ptr));
    EXEC_STEP(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                       CUDNN_TYPE_VOID_PTR, 1, &engine_ws));
    EXEC_STEP(cudnnBackendFinalize(vp));
    if (st == CUDNN_STATUS_SUCCESS && ca->fail_hook == 2) {
        st = CUDNN_STATUS_EXECUTION_FAILED;
        what = "cudnnBackendExecute (forced by LT_CUDNN_FAIL=execute)";
    }
    EXEC_STEP(cudnnBackendExecute(ca->handle, p->plan, vp));
    if (vp) {
        cudnnStatus_t dst = cudnnBackendDestroyDescriptor(vp);
        if (st == CUDNN_STATUS_SUCCESS && dst != CUDNN_STATUS_SUCCESS)
            lt_log("attention: cudnnBackendDestroyDescriptor: %s (ignored)\n",
                   cudnnGetErrorString(dst));
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        ca->calls[p->dir]++;
        return 1;
    }
    /* drop the plan; the slot keeps the key with the reason, as for a plan
     * cuDNN could not build */
    const int dir = p->dir;
    cudnn_plan_destroy(p);
    slot->plan = NULL;
    snprintf(slot->why, sizeof slot->why, "execute failed: %s (%d) in %.60s",
             cudnnGetErrorString(st), (int)st, what);
    ca->exec_failed++;
    ca->plans_failed++;
    char shape[80];
    lt_log("attention: cuDNN %s call failed for %s: %s; this shape runs on lattice's kernels "
           "from now on\n", dir_name(dir), key_text(&slot->key, shape, sizeof shape), slot->why);
    char why[240];
    snprintf(why, sizeof why, "cuDNN %s", slot->why);
    fallback(ca, dir, why);
    return 0;
}
#undef EXEC_STEP

/* The call's shape; with documents (kstart, window -1) the layout declared
 * for kstart (else NULL) gives its window and ragged batch. */
static LtAttnShape call_shape(CudnnAttn *ca, LtAttnDir dir, const int32_t *kstart, int window,
                              int B, int T, int NH, int NKV, int HD, DocLayout **dl) {
    LtAttnShape s = {dir, B, T, NH, NKV, HD, window, kstart && window < 0, 0};
    *dl = s.documents ? layout_of(ca, kstart) : NULL;
    if (*dl && ((*dl)->B != B || (*dl)->T != T)) *dl = NULL; /* declared for other shapes */
    if (*dl && !(*dl)->why[0]) s.window = (*dl)->window, s.ragged_batch = (*dl)->batch;
    return s;
}

/* The ragged batch's tensors of a documents call into pk. */
static void pack_documents(LtBackend *be, VariantPack *pk, DocLayout *dl, int NH, int NKV, int HD) {
    void *arr[4];
    layout_arrays(be, dl, NH, NKV, HD, arr);
    pack_add(pk, UID_SEQ_Q, arr[0]);
    pack_add(pk, UID_SEQ_KV, arr[0]); /* self-attention: as many keys as queries */
    pack_add(pk, UID_QKV_OFF, arr[1]);
    pack_add(pk, UID_O_OFF, arr[2]);
    pack_add(pk, UID_STATS_OFF, arr[3]);
}

// qkv (B, T, NH + 2*NKV, HD) -> out (B, T, NH, HD), lse (B, NH, T); 1 when run here
int cudnn_attention_fwd(LtBackend *be, void *out, float *lse, const void *qkv,
                        const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD) {
    CudnnAttn *ca = cu_impl(be)->cudnn;
    DocLayout *dl;
    const LtAttnShape s = call_shape(ca, LT_ATTN_FWD, kstart, window, B, T, NH, NKV, HD, &dl);
    const void *ptrs[] = {qkv, out, lse};
    LtAttnPlanSlot *p = plan_for(ca, &s, ptrs, 3, dl);
    if (!p) return 0;
    VariantPack pk = {};
    if (s.ragged_batch) pack_documents(be, &pk, dl, NH, NKV, HD);
    pack_qkv(&pk, UID_Q, qkv, NH, NKV, HD);
    pack_add(&pk, UID_O, out);
    pack_add(&pk, UID_STATS, lse);
    return run_plan(be, ca, p, &pk);
}

// dout, qkv, out, lse -> dqkv (qkv's layout) overwritten; 1 when run here
int cudnn_attention_bwd(LtBackend *be, void *dqkv, const void *dout, const void *qkv,
                        const void *out, const float *lse, const int32_t *kstart, int window,
                        int B, int T, int NH, int NKV, int HD) {
    CudnnAttn *ca = cu_impl(be)->cudnn;
    DocLayout *dl;
    const LtAttnShape s = call_shape(ca, LT_ATTN_BWD, kstart, window, B, T, NH, NKV, HD, &dl);
    const void *ptrs[] = {dqkv, dout, qkv, out, lse};
    LtAttnPlanSlot *p = plan_for(ca, &s, ptrs, 5, dl);
    if (!p) return 0;
    VariantPack pk = {};
    if (s.ragged_batch) pack_documents(be, &pk, dl, NH, NKV, HD);
    pack_qkv(&pk, UID_Q, qkv, NH, NKV, HD);
    pack_add(&pk, UID_O, out);
    pack_add(&pk, UID_DO, dout);
    pack_add(&pk, UID_STATS, lse);
    pack_qkv(&pk, UID_DQ, dqkv, NH, NKV, HD);
    return run_plan(be, ca, p, &pk);
}
