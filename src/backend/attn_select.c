/* attn_select.c - model.attention resolution, the per-call rules of the
 * cuDNN path and its plan cache. See attn_select.h (design note there).
 *
 * The rules encode what cuDNN's fused flash attention (the pattern-matched
 * graph of kernels/cuda/attention_cudnn_graph.cu) supports, as cuDNN's
 * frontend checks it before building the same graph: bf16 (or fp16) only,
 * compute capability 8.0 or newer, head dim a multiple of 8 up to 128 (256
 * on Hopper), sequence length above 1 for the backward, key/value heads that
 * divide the query heads (grouped-query attention: K/V tensors of NKV heads,
 * dK/dV reduced over each group inside the graph), no 9.10.0/9.10.1,
 * and on cuDNN <= 9.15.0 a backward whose key length is not a multiple of
 * 128 needs a padding-mask workaround this build does not make. Masks: the
 * causal one always; a sliding window from 9.2.0 on (Transformer Engine
 * takes cuDNN for (W, 0) windows from that release: causal, top-left
 * diagonal, no bias or dropout, the BSHD layouts lattice's views are).
 * Per-token key starts (packed documents) only as cuDNN expresses them: a
 * ragged (THD) batch of per-document sequences with a padding mask, which
 * needs the layout the model declared (without it nothing on the host says
 * where documents start), cuDNN 9.6.0 (ragged stats, ragged grouped K/V),
 * compute capability 9.0 or newer but not 12.x (cudnn-frontend refuses
 * ragged stats in the backward on sm_8x and sm_12x, and THD before 9.18.1
 * below sm_90), and for the backward a head dim that is a multiple of 16 (its
 * ragged workspace tensors have a known functional issue otherwise, says
 * cudnn-frontend). Under model.attention=auto, a deterministic backward with
 * a sliding window stays on lattice's kernels (with packed documents its
 * forward too): cuDNN's deterministic band backward measured 2.2-7.1x slower
 * than lattice's on an H200. A
 * deterministic backward is the graph variant without fp32 dQ accumulation,
 * which cuDNN runs deterministically on Hopper; elsewhere (Blackwell needs
 * engine knobs from cuDNN 9.18.1 on) it is refused. */
#include "attn_select.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

/* ---- resolution -------------------------------------------------------------- */

/* "9.19.0" for cuDNN's 91900. */
static void version_text(long v, char *buf, size_t n) {
    snprintf(buf, n, "%ld.%ld.%ld", v / 10000, (v / 100) % 100, v % 100);
}

int lt_attn_cudnn_max_head_dim(int sm) { return sm / 10 == 9 ? 256 : 128; }

/* 1 with the reason in why when cuDNN cannot run this model's attention. */
static int cudnn_unsupported(const LtAttnEnv *e, char *why, size_t n) {
    char ver[32];
    version_text(e->cudnn_version, ver, sizeof ver);
    const int hd = e->head_dim, hdmax = lt_attn_cudnn_max_head_dim(e->sm);
    if (!e->cuda)
        snprintf(why, n, "this run uses the CPU backend; cuDNN's fused attention needs the CUDA "
                         "backend and a GPU");
    else if (e->softmax_type != LT_SOFTMAX_VANILLA)
        snprintf(why, n, "model.softmax_type=%s: cuDNN's fused attention has no sink logit in "
                         "its softmax (lattice's kernels have)",
                 lt_softmax_type_name((LtSoftmaxType)e->softmax_type));
    else if (e->cudnn_version <= 0)
        snprintf(why, n, "this binary was built without cuDNN (no cudnn.h at build time)");
    else if (e->cudnn_version < LT_CUDNN_MIN_VERSION)
        snprintf(why, n, "cuDNN %s is older than 9.0, whose graph API this build uses", ver);
    else if (e->cudnn_version == 91000 || e->cudnn_version == 91001)
        snprintf(why, n, "cuDNN %s has known fused-attention bugs (fixed in 9.10.2)", ver);
    else if (!e->bf16)
        snprintf(why, n, "train.precision=fp32: cuDNN's fused attention computes in bf16 only "
                         "(use train.precision=bf16)");
    else if (e->sm < 80)
        snprintf(why, n, "compute capability %d.%d: cuDNN's fused attention needs 8.0 or newer",
                 e->sm / 10, e->sm % 10);
    else if (hd > 0 && (hd % 8 || hd > hdmax))
        snprintf(why, n, "head dim %d: cuDNN's fused attention takes multiples of 8 up to %d on "
                         "sm_%d", hd, hdmax, e->sm);
    else if (e->deterministic && e->sm / 10 != 9)
        snprintf(why, n, "model.attention_deterministic=true: cuDNN's deterministic backward is "
                         "used on sm_90 (Hopper) only, this GPU is sm_%d (set "
                         "model.attention_deterministic=false to allow cuDNN's atomic dQ "
                         "accumulation)", e->sm);
    else
        return 0;
    return 1;
}

int lt_attn_resolve(const LtAttnEnv *env, LtAttnChoice *out) {
    char why[256], ver[32];
    memset(out, 0, sizeof *out);
    if (env->want == LT_ATTN_LATTICE) {
        snprintf(out->reason, sizeof out->reason, "model.attention=lattice: lattice's kernels");
        return 0;
    }
    const char *key = env->want == LT_ATTN_CUDNN ? "cudnn" : "auto";
    if (cudnn_unsupported(env, why, sizeof why)) {
        snprintf(out->reason, sizeof out->reason, "model.attention=%s: %s%s", key, why,
                 env->want == LT_ATTN_CUDNN ? " (use model.attention=auto or lattice)"
                                            : "; lattice's kernels");
        return env->want == LT_ATTN_CUDNN ? -1 : 0;
    }
    version_text(env->cudnn_version, ver, sizeof ver);
    out->cudnn = 1;
    snprintf(out->reason, sizeof out->reason,
             "model.attention=%s: cuDNN %s fused flash attention on sm_%d, %s backward%s", key,
             ver, env->sm, env->deterministic ? "deterministic" : "non-deterministic",
             env->want == LT_ATTN_AUTO
                 ? (env->deterministic
                        ? " (auto: cuDNN wherever it runs, 2.3-3.1x lattice's kernels on an "
                          "H200, but a windowed backward on lattice's; docs/model.md)"
                        : " (auto: cuDNN wherever it runs, 2.3-3.1x lattice's kernels on an "
                          "H200; docs/model.md)")
                 : "");
    return 0;
}

/* The window of call s as cuDNN runs it: -1 (causal) for none, and for one
 * that reaches every query's first key (window >= T - 1). */
static int keyed_window(const LtAttnShape *s) {
    return s->window < 0 || s->window >= s->T - 1 ? -1 : s->window;
}

/* Format the reason a call stays on lattice's kernels into why; returns 0
 * (lt_attn_cudnn_call_ok's "no"). */
static int call_refused(char *why, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int call_refused(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (why && n) vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return 0;
}

/* The rules of packed documents (a ragged batch); 0 with the reason. */
static int documents_ok(const LtAttnEnv *env, const LtAttnShape *s, const char *dir, char *why,
                        size_t whylen) {
    char ver[32];
    version_text(env->cudnn_version, ver, sizeof ver);
    if (!s->ragged_batch)
        return call_refused(why, whylen,
                            "%s with per-token key starts (packed documents, "
                            "data.reset_attention_mask) whose document layout was not declared "
                            "(backend.h attention_documents): cuDNN runs documents only as a "
                            "ragged batch of per-document sequences", dir);
    if (env->cudnn_version < LT_CUDNN_RAGGED_VERSION)
        return call_refused(why, whylen,
                            "%s with packed documents on cuDNN %s: ragged (THD) batches need "
                            "cuDNN 9.6.0", dir, ver);
    if (env->sm < 90 || env->sm / 10 == 12)
        return call_refused(why, whylen,
                            "%s with packed documents on sm_%d: cuDNN's ragged (THD) batches "
                            "with ragged softmax stats need sm_90 or newer, not sm_12x", dir,
                            env->sm);
    /* the forward too: its ragged statistics' layout is unconfirmed on a GPU, so
     * a cuDNN forward never hands them to lattice's backward for a shape rule */
    if (s->HD % 16)
        return call_refused(why, whylen,
                            "%s with packed documents and head dim %d: cuDNN's ragged "
                            "backward needs a multiple of 16 (and the forward follows it)", dir,
                            s->HD);
    return 1;
}

int lt_attn_cudnn_call_ok(const LtAttnEnv *env, const LtAttnShape *s, const void *const *ptrs,
                          int nptrs, char *why, size_t whylen) {
    const char *dir = s->dir == LT_ATTN_FWD ? "forward" : "backward";
    const int hdmax = lt_attn_cudnn_max_head_dim(env->sm);
    if (s->B < 1 || s->NH < 1 || s->T < 2)
        return call_refused(why, whylen, "%s with B=%d NH=%d T=%d (cuDNN needs T >= 2)", dir,
                            s->B, s->NH, s->T);
    if (s->NKV < 1 || s->NH % s->NKV)
        return call_refused(why, whylen,
                            "%s with %d key/value heads for %d query heads (cuDNN needs a "
                            "divisor of the query heads)", dir, s->NKV, s->NH);
    if (s->HD % 8 || s->HD > hdmax)
        return call_refused(why, whylen, "%s with head dim %d (cuDNN: multiples of 8 up to %d)",
                            dir, s->HD, hdmax);
    if (s->documents && !documents_ok(env, s, dir, why, whylen)) return 0;
    if (keyed_window(s) >= 0 && env->cudnn_version < LT_CUDNN_WINDOW_VERSION) {
        char ver[32];
        version_text(env->cudnn_version, ver, sizeof ver);
        return call_refused(why, whylen,
                            "%s with a sliding window (keys t-%d..t) on cuDNN %s: cuDNN's fused "
                            "attention takes windows from 9.2.0 on", dir, s->window, ver);
    }
    /* auto picks the faster: cuDNN 9.14.0's deterministic backward with a 128-key window
     * took 2.58 ms at T 2048 and 8.41 ms at T 8192 (GPT-OSS's layer, B 8 / 2, 64 heads over
     * 8, HD 64) where lattice's took 1.16 and 1.18 on the same H200, while its forward and
     * its non-deterministic backward were on par (bench/2026-11-28-h200-third-draw.md).
     * With packed documents the forward follows the backward, as documents_ok has it: a
     * cuDNN forward's ragged statistics never feed lattice's backward */
    if ((s->dir == LT_ATTN_BWD || s->documents) && env->want == LT_ATTN_AUTO &&
        env->deterministic && keyed_window(s) >= 0)
        return call_refused(why, whylen,
                            "%s with a sliding window (keys t-%d..t)%s, deterministic backward "
                            "under model.attention=auto: lattice's kernels, 2.2-7.1x faster "
                            "on an H200 (model.attention=cudnn takes cuDNN's)",
                            dir, s->window,
                            s->documents ? " and packed documents (the forward follows)" : "");
    if (s->dir == LT_ATTN_BWD && s->T % 128 && env->cudnn_version <= 91500 && !s->documents)
        return call_refused(why, whylen,
                            "backward with T=%d, not a multiple of 128, on cuDNN <= 9.15.0 "
                            "(needs a padding-mask workaround this build does not make)",
                            s->T);
    for (int i = 0; i < nptrs; i++)
        if ((uintptr_t)ptrs[i] % 16)
            return call_refused(why, whylen, "%s: tensor %d at %p is not 16-byte aligned", dir, i,
                                ptrs[i]);
    return 1;
}

/* ---- plan cache ------------------------------------------------------------ */

LtAttnPlanKey lt_attn_plan_key(const LtAttnEnv *env, const LtAttnShape *s, int device) {
    const LtAttnPlanKey k = {.dir = s->dir, .B = s->B, .T = s->T, .NH = s->NH, .NKV = s->NKV,
                             .HD = s->HD, .window = keyed_window(s),
                             .ragged_batch = s->documents ? s->ragged_batch : 0,
                             .dtype = LT_BF16, .deterministic = env->deterministic,
                             .device = device};
    return k;
}

/* 1 when two keys name the same plan (field by field: no padding bytes compared). */
static int key_eq(const LtAttnPlanKey *a, const LtAttnPlanKey *b) {
    return a->dir == b->dir && a->B == b->B && a->T == b->T && a->NH == b->NH &&
           a->NKV == b->NKV && a->HD == b->HD && a->window == b->window &&
           a->ragged_batch == b->ragged_batch && a->dtype == b->dtype &&
           a->deterministic == b->deterministic && a->device == b->device;
}

/* ---- packed documents as a ragged (THD) batch ------------------------------ */

int lt_attn_doc_count(const int32_t *doc, int B, int T, char *why, size_t whylen) {
    int docs = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int32_t d = doc[(size_t)b * T + t];
            const int opens = d == t, stays = t > 0 && d == doc[(size_t)b * T + t - 1];
            if (!opens && !stays) {
                if (why && whylen)
                    snprintf(why, whylen, "token %d of sequence %d starts its document at %d, "
                                          "neither itself nor the previous token's start", t, b,
                             (int)d);
                return -1;
            }
            docs += opens;
        }
    return docs;
}

int lt_attn_ragged_batch(int B, int docs) {
    int n = B > 0 ? B : 1;
    while (n < docs) n *= 2;
    return n;
}

void lt_attn_ragged_fill(const int32_t *doc, int B, int T, int NH, int NKV, int HD, int batch,
                         int32_t *seqlen, int64_t *qkv_off, int64_t *o_off, int64_t *stats_off) {
    const int64_t W = (int64_t)(NH + 2 * NKV) * HD, C = (int64_t)NH * HD, N = (int64_t)B * T;
    int n = 0;
    for (int64_t i = 0; i < N; i++) {
        const int b = (int)(i / T), t = (int)(i % T);
        if (doc[i] != t) continue; /* not a document's first token */
        if (n) seqlen[n - 1] = (int32_t)(i - qkv_off[n - 1] / W);
        qkv_off[n] = i * W, o_off[n] = i * C, stats_off[n] = (int64_t)b * NH * T + t;
        n++;
    }
    if (n) seqlen[n - 1] = (int32_t)(N - qkv_off[n - 1] / W);
    for (; n <= batch; n++) { /* the empty entries, and the end */
        if (n < batch) seqlen[n] = 0;
        qkv_off[n] = N * W, o_off[n] = N * C, stats_off[n] = N * NH;
    }
}

void lt_attn_cache_init(LtAttnPlanCache *c, LtAttnPlanDestroy destroy, void *ctx) {
    memset(c, 0, sizeof *c);
    c->destroy = destroy;
    c->ctx = ctx;
}

/* Empty slot s, destroying its plan (if any). */
static void slot_release(LtAttnPlanCache *c, LtAttnPlanSlot *s) {
    if (s->used && s->plan && c->destroy) c->destroy(s->plan, c->ctx);
    memset(s, 0, sizeof *s);
}

/* A free slot, or the least recently used one emptied. */
static LtAttnPlanSlot *take_slot(LtAttnPlanCache *c) {
    LtAttnPlanSlot *lru = &c->slot[0];
    for (int i = 0; i < LT_ATTN_PLAN_SLOTS; i++) {
        if (!c->slot[i].used) return &c->slot[i];
        if (c->slot[i].last_use < lru->last_use) lru = &c->slot[i];
    }
    slot_release(c, lru);
    c->evictions++;
    return lru;
}

LtAttnPlanSlot *lt_attn_cache_fetch(LtAttnPlanCache *c, const LtAttnPlanKey *key,
                                    LtAttnPlanBuild build, int *built) {
    if (built) *built = 0;
    for (int i = 0; i < LT_ATTN_PLAN_SLOTS; i++) {
        LtAttnPlanSlot *s = &c->slot[i];
        if (s->used && key_eq(&s->key, key)) {
            s->last_use = ++c->clock;
            c->hits++;
            return s;
        }
    }
    LtAttnPlanSlot *s = take_slot(c);
    s->key = *key;
    s->used = 1;
    s->plan = build(key, c->ctx, s->why, sizeof s->why);
    if (s->plan) s->why[0] = '\0';
    else if (!s->why[0]) snprintf(s->why, sizeof s->why, "no plan (no reason given)");
    s->last_use = ++c->clock;
    c->builds++;
    if (built) *built = 1;
    return s;
}

void lt_attn_cache_clear(LtAttnPlanCache *c) {
    for (int i = 0; i < LT_ATTN_PLAN_SLOTS; i++) slot_release(c, &c->slot[i]);
}

int lt_attn_cache_size(const LtAttnPlanCache *c) {
    int n = 0;
    for (int i = 0; i < LT_ATTN_PLAN_SLOTS; i++) n += c->slot[i].used;
    return n;
}

/* ---- the CUDA backend's attention entries, in a build without it ---------- */
#ifndef LT_HAVE_CUDA
int lt_cuda_attention_configure(LtBackend *be, LtAttnImpl want, int deterministic, int head_dim,
                                int softmax_type, LtAttnChoice *out) {
    (void)be, (void)want, (void)deterministic, (void)head_dim, (void)softmax_type;
    memset(out, 0, sizeof *out);
    snprintf(out->reason, sizeof out->reason, "model.attention: no CUDA backend in this build");
    return -1;
}
int lt_cuda_attention_info(LtBackend *be, LtAttnInfo *info) {
    (void)be;
    memset(info, 0, sizeof *info);
    return -1;
}
long lt_cudnn_version(void) { return 0; }
int lt_cudnn_graph_check(const LtAttnPlanKey *key, char *why, size_t whylen) {
    (void)key;
    snprintf(why, whylen, "no CUDA backend in this build");
    return -1;
}
#endif
