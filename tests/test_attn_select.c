/* test_attn_select.c - model.attention without a GPU: the resolution of
 * auto | cudnn | lattice against what a backend reports, the per-call rules
 * of the cuDNN path, packed documents as a ragged batch (counting, buckets,
 * lengths and offsets), the plan cache (keys, reuse, remembered failures, LRU
 * eviction, destruction), the refusals on a machine with no GPU and the
 * linked cuDNN's checks of the graphs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn_select.h"
#include "backend.h"
#include "model.h"
#include "test.h"

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* An H100 with cuDNN 9.19 in bf16, head dim 64, deterministic. */
static LtAttnEnv h100(LtAttnImpl want) {
    LtAttnEnv e = {.want = want, .deterministic = 1, .cuda = 1, .bf16 = 1, .sm = 90,
                   .cudnn_version = 91900, .head_dim = 64};
    return e;
}

typedef struct {
    const char *name;
    LtAttnEnv env;
    int rc, cudnn;      /* expected */
    const char *want[2]; /* substrings of the reason */
} ResolveCase;

static void check_resolve(const ResolveCase *c) {
    LtAttnChoice ch;
    memset(&ch, 0x5a, sizeof ch);
    int rc = lt_attn_resolve(&c->env, &ch);
    CHECK(rc == c->rc, "%s: rc %d, want %d (%s)", c->name, rc, c->rc, ch.reason);
    CHECK(ch.cudnn == c->cudnn, "%s: cudnn %d, want %d (%s)", c->name, ch.cudnn, c->cudnn,
          ch.reason);
    for (int i = 0; i < 2; i++)
        CHECK(!c->want[i] || has(ch.reason, c->want[i]), "%s: '%s' not in: %s", c->name,
              c->want[i], ch.reason);
}

static void test_resolve(void) {
    LtAttnEnv e[26];
    int n = 0;
    ResolveCase cases[26];
#define CASE(nm, rc_, cu_, w0, w1) (cases[n] = (ResolveCase){nm, e[n], rc_, cu_, {w0, w1}}, n++)
    e[n] = h100(LT_ATTN_AUTO), CASE("h100 auto", 0, 1, "cuDNN 9.19.0", "docs/model.md");
    e[n] = h100(LT_ATTN_CUDNN), CASE("h100 cudnn", 0, 1, "model.attention=cudnn", "deterministic");
    e[n] = h100(LT_ATTN_LATTICE), CASE("h100 lattice", 0, 0, "model.attention=lattice", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].cuda = 0, e[n].sm = 0,
    CASE("cpu auto", 0, 0, "CPU backend", "lattice's kernels");
    e[n] = h100(LT_ATTN_CUDNN), e[n].cuda = 0, e[n].sm = 0,
    CASE("cpu cudnn", -1, 0, "model.attention=cudnn", "CPU backend");
    e[n] = h100(LT_ATTN_LATTICE), e[n].cuda = 0, CASE("cpu lattice", 0, 0, "lattice", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].bf16 = 0, CASE("fp32 auto", 0, 0, "train.precision=fp32", NULL);
    e[n] = h100(LT_ATTN_CUDNN), e[n].bf16 = 0,
    CASE("fp32 cudnn", -1, 0, "model.attention=cudnn", "train.precision=bf16");
    e[n] = h100(LT_ATTN_AUTO), e[n].cudnn_version = 0, CASE("no cudnn", 0, 0, "without cuDNN", NULL);
    e[n] = h100(LT_ATTN_CUDNN), e[n].cudnn_version = 0,
    CASE("no cudnn, cudnn", -1, 0, "without cuDNN", "model.attention=cudnn");
    e[n] = h100(LT_ATTN_AUTO), e[n].cudnn_version = 8907, CASE("cudnn 8.9", 0, 0, "older than 9.0", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].cudnn_version = 91001, CASE("9.10.1", 0, 0, "9.10.1", "9.10.2");
    e[n] = h100(LT_ATTN_CUDNN), e[n].cudnn_version = 91002, CASE("9.10.2", 0, 1, "9.10.2", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].sm = 80,
    CASE("a100 deterministic", 0, 0, "model.attention_deterministic=true", "sm_80");
    e[n] = h100(LT_ATTN_CUDNN), e[n].sm = 80,
    CASE("a100 det, cudnn", -1, 0, "model.attention_deterministic", "sm_90");
    e[n] = h100(LT_ATTN_AUTO), e[n].sm = 80, e[n].deterministic = 0,
    CASE("a100 non-det", 0, 1, "non-deterministic", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].sm = 100, CASE("b200 det", 0, 0, "sm_100", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].sm = 75, e[n].deterministic = 0,
    CASE("turing", 0, 0, "compute capability 7.5", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].head_dim = 60, CASE("hd 60", 0, 0, "head dim 60", "multiples of 8");
    e[n] = h100(LT_ATTN_AUTO), e[n].head_dim = 256, CASE("hd 256 hopper", 0, 1, "sm_90", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].head_dim = 256, e[n].sm = 80, e[n].deterministic = 0,
    CASE("hd 256 ampere", 0, 0, "up to 128", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].head_dim = 0, CASE("hd unknown", 0, 1, "cuDNN", NULL);
    e[n] = h100(LT_ATTN_AUTO), e[n].softmax_type = LT_SOFTMAX_LEARNABLE,
    CASE("sinks auto", 0, 0, "model.softmax_type=learnable", "lattice's kernels");
    e[n] = h100(LT_ATTN_CUDNN), e[n].softmax_type = LT_SOFTMAX_OFF_BY_ONE,
    CASE("sinks cudnn", -1, 0, "model.softmax_type=off-by-one", "model.attention=cudnn");
#undef CASE
    for (int i = 0; i < n; i++) check_resolve(&cases[i]);
    CHECK(lt_attn_cudnn_max_head_dim(90) == 256 && lt_attn_cudnn_max_head_dim(80) == 128 &&
              lt_attn_cudnn_max_head_dim(100) == 128,
          "max head dims");
}

static void test_call_rules(void) {
    static float buf[64];
    const void *ok[3] = {buf, buf + 4, buf + 8}, *bad[3] = {buf, (const char *)buf + 2, buf};
    LtAttnEnv e = h100(LT_ATTN_CUDNN);
    char why[256];
    LtAttnShape s = {LT_ATTN_FWD, 2, 1024, 16, 16, 64, -1, 0, 0};
    CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "fwd 1024: %s", why);
    s.dir = LT_ATTN_BWD;
    CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "bwd 1024: %s", why);
    CHECK(!lt_attn_cudnn_call_ok(&e, &s, bad, 3, why, sizeof why) && has(why, "tensor 1") &&
              has(why, "16-byte"),
          "misaligned: %s", why);
    s.T = 1;
    for (int d = 0; d < 2; d++) {
        s.dir = (LtAttnDir)d;
        CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why) && has(why, "T=1"),
              "T=1 dir %d: %s", d, why);
    }
    s.T = 2, s.dir = LT_ATTN_FWD;
    CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "T=2: %s", why);
    s.T = 100, s.HD = 72;
    CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "fwd T=100 HD=72: %s", why);
    s.dir = LT_ATTN_BWD;
    CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "bwd T=100 on 9.19: %s", why);
    e.cudnn_version = 91500;
    CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why) && has(why, "128") &&
              has(why, "9.15.0"),
          "bwd T=100 on 9.15.0: %s", why);
    s.T = 192;
    CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "bwd T=192 on 9.15.0");
    s.T = 256;
    CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "bwd T=256 on 9.15.0: %s", why);
    s.HD = 20;
    CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why) && has(why, "head dim 20"),
          "HD 20: %s", why);
    s.HD = 264;
    CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why) && has(why, "up to 256"),
          "HD 264: %s", why);
    e.sm = 80, s.HD = 192;
    CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why) && has(why, "up to 128"),
          "HD 192 on sm_80: %s", why);
    /* sliding windows: cuDNN 9.2.0 on; packed documents (with or without one) as a ragged
     * batch, when their layout was declared */
    e = h100(LT_ATTN_CUDNN), s.HD = 64, s.T = 2048, s.NKV = 16;
    for (int d = 0; d < 2; d++) {
        s.dir = (LtAttnDir)d, s.window = 128, s.documents = 0;
        e.cudnn_version = 90200;
        CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "window on 9.2.0: %s", why);
        e.cudnn_version = 90100;
        CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why) && has(why, "9.2.0") &&
                  has(why, "9.1.0") && has(why, "t-128..t"),
              "window on 9.1.0, dir %d: %s", d, why);
        s.window = 2047; /* reaches key 0 from every query: causal, which 9.1 runs */
        CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "window 2047 on 9.1.0: %s",
              why);
        e.cudnn_version = 91900;
        for (int w = -1; w <= 128; w += 129) {
            s.window = w, s.documents = 1, s.ragged_batch = 0;
            CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why) &&
                      has(why, "packed documents") && has(why, "not declared") &&
                      has(why, d ? "backward" : "forward"),
                  "undeclared documents, window %d, dir %d: %s", w, d, why);
            s.ragged_batch = 16;
            CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why),
                  "declared documents, window %d, dir %d: %s", w, d, why);
        }
        e.cudnn_version = 90500;
        CHECK(!lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why) && has(why, "9.6.0") &&
                  has(why, "9.5.0"),
              "documents on 9.5.0, dir %d: %s", d, why);
        e.cudnn_version = 90600;
        CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why), "documents on 9.6.0: %s",
              why);
        e.cudnn_version = 91900;
        static const int sms[] = {80, 86, 89, 90, 100, 103, 110, 120, 121}; /* not 8.x, 12.x */
        for (int i = 0; i < 9; i++) {
            e.sm = sms[i];
            const int got = lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why);
            CHECK(got == (e.sm >= 90 && e.sm / 10 != 12) && (got || has(why, "sm_")),
                  "documents on sm_%d, dir %d: %s", e.sm, d, got ? "taken" : why);
        }
        /* the ragged backward wants a multiple of 16, and the forward follows it
         * (never a cuDNN forward's ragged statistics into lattice's backward) */
        e.sm = 90, s.HD = 72;
        const int got = lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why);
        CHECK(!got && has(why, "multiple of 16"), "documents, HD 72, dir %d: %s", d,
              got ? "taken" : why);
        s.HD = 64, s.T = 2000, e.cudnn_version = 91500; /* the padding mask needs no workaround */
        CHECK(lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why),
              "documents T=2000 on 9.15.0, dir %d: %s", d, why);
        s.T = 2048, e.cudnn_version = 91900;
    }
    /* auto: a deterministic backward with a window stays on lattice's kernels (cuDNN's band
     * backward measured 2.2-7.1x slower), with packed documents its forward too; the
     * forward without documents, a non-deterministic backward, a window reaching key 0 and
     * model.attention=cudnn keep cuDNN */
    s.T = 2048, s.HD = 64, s.NKV = 16, s.documents = 0, s.ragged_batch = 0;
    for (int want = 0; want < 2; want++)
        for (int det = 0; det < 2; det++)
            for (int d = 0; d < 2; d++)
                for (int w = 128; w <= 2047; w += 1919) {
                    e = h100(want ? LT_ATTN_CUDNN : LT_ATTN_AUTO), e.deterministic = det;
                    s.dir = (LtAttnDir)d, s.window = w;
                    for (int docs = 0; docs < 2; docs++) {
                        s.documents = docs, s.ragged_batch = docs ? 16 : 0;
                        /* with documents the forward follows the backward */
                        const int refused = !want && det && (d == LT_ATTN_BWD || docs) &&
                                            w == 128;
                        const int got = lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why);
                        CHECK(got == !refused &&
                                  (got || (has(why, "deterministic backward") &&
                                           has(why, "t-128..t") &&
                                           has(why, "model.attention=cudnn") &&
                                           (!docs || has(why, "packed documents")))),
                              "%s, %s, dir %d, window %d, documents %d: %s",
                              want ? "cudnn" : "auto", det ? "deterministic" : "not", d, w,
                              docs, got ? "taken" : why);
                    }
                }
    s.window = -1, s.documents = 0, s.ragged_batch = 0;
    /* grouped K/V: any divisor of the query heads, in both directions */
    e = h100(LT_ATTN_CUDNN), s.HD = 128, s.T = 2048;
    const int nkv[][2] = {{8, 1}, {1, 1}, {4, 1}, {16, 1}, {6, 0}, {0, 0}, {32, 0}};
    for (int i = 0; i < 7; i++)
        for (int d = 0; d < 2; d++) {
            s.dir = (LtAttnDir)d, s.NKV = nkv[i][0];
            const int got = lt_attn_cudnn_call_ok(&e, &s, ok, 3, why, sizeof why);
            CHECK(got == nkv[i][1] && (got || has(why, "key/value heads")), "NKV %d dir %d: %s",
                  s.NKV, d, got ? "taken" : why);
        }
}

/* ---- plan cache with counting stand-in plans --------------------------------- */

typedef struct {
    int builds, destroys;
    int fail_T;         /* keys with this T get no plan */
    intptr_t last_destroyed;
} Fake;

static void *fake_build(const LtAttnPlanKey *k, void *ctx, char *why, size_t n) {
    Fake *f = ctx;
    f->builds++;
    if (k->T == f->fail_T) {
        snprintf(why, n, "no engine for T=%d", k->T);
        return NULL;
    }
    return (void *)(intptr_t)(f->builds * 16); /* a distinct non-NULL token per build */
}

static void fake_destroy(void *plan, void *ctx) {
    Fake *f = ctx;
    f->destroys++;
    f->last_destroyed = (intptr_t)plan;
}

static LtAttnPlanKey key_of(int i) {
    LtAttnPlanKey k = {.dir = LT_ATTN_FWD, .B = 4, .T = 1024 + 128 * i, .NH = 16, .NKV = 16,
                       .HD = 64, .window = -1, .dtype = LT_BF16, .deterministic = 1, .device = 0};
    return k;
}

static void test_cache_keys(void) {
    Fake f = {0};
    LtAttnPlanCache c;
    lt_attn_cache_init(&c, fake_destroy, &f);
    int built = 0;
    const LtAttnPlanKey k = key_of(0);
    void *p = lt_attn_cache_fetch(&c, &k, fake_build, &built)->plan;
    CHECK(p && built == 1 && f.builds == 1, "first fetch builds");
    for (int i = 0; i < 3; i++) {
        LtAttnPlanSlot *s = lt_attn_cache_fetch(&c, &k, fake_build, &built);
        CHECK(s->plan == p && built == 0, "fetch %d reuses the plan", i);
    }
    CHECK(f.builds == 1 && c.hits == 3 && c.builds == 1, "one build, 3 hits (%ld)", c.hits);
    /* every field of the key makes a different plan (the window: causal -> 128 keys) */
    for (int field = 0; field < 11; field++) {
        LtAttnPlanKey d = k;
        int *v[11] = {&d.dir,    &d.B,     &d.T,             &d.NH,     &d.NKV,   &d.HD,
                      &d.dtype,  &d.deterministic, &d.device, &d.window, &d.ragged_batch};
        if (v[field] == &d.window) d.window = 128;
        else *v[field] ^= 1;
        LtAttnPlanSlot *s = lt_attn_cache_fetch(&c, &d, fake_build, &built);
        CHECK(built == 1 && s->plan && s->plan != p, "field %d is part of the key", field);
    }
    CHECK(lt_attn_cache_size(&c) == 12 && f.builds == 12, "12 entries, %d builds", f.builds);
    lt_attn_cache_clear(&c);
    CHECK(f.destroys == 12 && lt_attn_cache_size(&c) == 0, "clear destroys all (%d)", f.destroys);
}

/* A call's plan key: its shape and window, the environment's determinism;
 * no window and a window reaching key 0 from every query share the causal
 * plan. */
static void test_plan_key(void) {
    const LtAttnEnv e = h100(LT_ATTN_CUDNN);
    const LtAttnShape s = {LT_ATTN_BWD, 2, 1024, 16, 4, 64, 128, 0, 0};
    LtAttnPlanKey k = lt_attn_plan_key(&e, &s, 3);
    CHECK(k.dir == LT_ATTN_BWD && k.B == 2 && k.T == 1024 && k.NH == 16 && k.NKV == 4 &&
              k.HD == 64 && k.window == 128 && k.dtype == LT_BF16 && k.deterministic == 1 &&
              k.device == 3,
          "the key of a windowed backward");
    static const int windows[][2] = {{-1, -1}, {-5, -1}, {0, 0},      {1022, 1022},
                                     {1023, -1}, {4096, -1}}; /* given, keyed */
    for (int i = 0; i < 6; i++) {
        LtAttnShape w = s;
        w.window = windows[i][0];
        k = lt_attn_plan_key(&e, &w, 0);
        CHECK(k.window == windows[i][1], "window %d keyed as %d, want %d", windows[i][0],
              k.window, windows[i][1]);
    }
    /* documents: the ragged batch is keyed (with the declared window), B stays the samples' */
    LtAttnShape d = s;
    d.documents = 1, d.ragged_batch = 8;
    k = lt_attn_plan_key(&e, &d, 0);
    CHECK(k.ragged_batch == 8 && k.B == 2 && k.window == 128, "the key of declared documents");
    d.documents = 0;
    CHECK(lt_attn_plan_key(&e, &d, 0).ragged_batch == 0, "no documents, no ragged batch");
}

/* The ragged batch of packed documents: lt_doc_layout's starts (from tokens
 * with an end-of-document id) counted, bucketed and turned into lengths and
 * element offsets; then random layouts, whose documents must tile the
 * tokens in order; starts that are no documents refused. */
static void test_doc_layout(void) {
    enum { B = 2, T = 5, NH = 4, NKV = 2, HD = 8, W = (NH + 2 * NKV) * HD, C = NH * HD };
    const int32_t tokens[B * T] = {1, 9, 3, 4, 5, 9, 1, 1, 9, 2}; /* 9 ends a document */
    int32_t doc[B * T], seqlen[8];
    int64_t qo[9], oo[9], so[9];
    char why[200];
    lt_doc_layout(tokens, B, T, 9, NULL, doc);
    const int docs = lt_attn_doc_count(doc, B, T, why, sizeof why);
    CHECK(docs == 5, "5 documents (%d: %s)", docs, why);
    CHECK(lt_attn_ragged_batch(B, docs) == 8 && lt_attn_ragged_batch(B, 2) == 2 &&
              lt_attn_ragged_batch(3, 7) == 12 && lt_attn_ragged_batch(4, 4) == 4,
          "buckets: the samples doubled until the documents fit");
    lt_attn_ragged_fill(doc, B, T, NH, NKV, HD, 8, seqlen, qo, oo, so);
    static const int starts[5] = {0, 2, 5, 6, 9}, lens[8] = {2, 3, 1, 3, 1, 0, 0, 0};
    static const int64_t stats[5] = {0, 2, NH * T, NH * T + 1, NH * T + 4};
    for (int i = 0; i < 9; i++) {
        const int64_t tok = i < 5 ? starts[i] : B * T;
        CHECK((i == 8 || seqlen[i] == lens[i]) && qo[i] == tok * W && oo[i] == tok * C &&
                  so[i] == (i < 5 ? stats[i] : (int64_t)B * T * NH),
              "entry %d: length %d, offsets %lld %lld %lld", i, i < 8 ? seqlen[i] : -1,
              (long long)qo[i], (long long)oo[i], (long long)so[i]);
    }
    /* random documents in random shapes */
    srand(7);
    for (int r = 0; r < 200; r++) {
        const int b = 1 + rand() % 4, t = 1 + rand() % 40, n = b * t;
        int32_t *tk = malloc(n * sizeof *tk), *dc = malloc(n * sizeof *dc);
        for (int i = 0; i < n; i++) tk[i] = rand() % (1 + r % 6) ? 1 : 0;
        lt_doc_layout(tk, b, t, 0, NULL, dc);
        const int nd = lt_attn_doc_count(dc, b, t, why, sizeof why);
        const int nb = lt_attn_ragged_batch(b, nd);
        int32_t *ln = malloc(nb * sizeof *ln);
        int64_t *q = malloc((nb + 1) * sizeof *q), *o = malloc((nb + 1) * sizeof *o),
                *st = malloc((nb + 1) * sizeof *st);
        lt_attn_ragged_fill(dc, b, t, NH, NKV, HD, nb, ln, q, o, st);
        int bad = nd < b || nb < nd || (nb / 2 >= nd && nb > b); /* the smallest bucket */
        for (int i = 0, tok = 0; i < nb && !bad; i++) {
            const int sample = tok / t, pos = tok % t;
            bad |= q[i] != (int64_t)tok * W || o[i] != (int64_t)tok * C;
            if (i < nd) /* inside one sequence, starting its own document */
                bad |= ln[i] < 1 || pos + ln[i] > t || dc[tok] != pos ||
                       st[i] != (int64_t)sample * NH * t + pos;
            else bad |= ln[i] != 0 || st[i] != (int64_t)n * NH;
            tok += ln[i];
            if (i == nb - 1) bad |= tok != n || q[nb] != (int64_t)n * W;
        }
        CHECK(!bad, "random layout %d (B %d T %d, %d documents in %d): lengths or offsets", r, b,
              t, nd, nb);
        free(tk), free(dc), free(ln), free(q), free(o), free(st);
    }
    /* starts that are no documents: a window's (t - 2), a first token that is not 0 */
    int32_t win[T] = {0, 0, 0, 1, 2}, late[T] = {1, 1, 1, 1, 1};
    CHECK(lt_attn_doc_count(win, 1, T, why, sizeof why) == -1 && has(why, "token 3"),
          "a window's starts: %s", why);
    CHECK(lt_attn_doc_count(late, 1, T, why, sizeof why) == -1 && has(why, "token 0"),
          "a first token past 0: %s", why);
}

static void test_cache_failures(void) {
    Fake f = {.fail_T = 777};
    LtAttnPlanCache c;
    lt_attn_cache_init(&c, fake_destroy, &f);
    LtAttnPlanKey k = key_of(0);
    k.T = 777;
    int built = 0;
    LtAttnPlanSlot *s = lt_attn_cache_fetch(&c, &k, fake_build, &built);
    CHECK(!s->plan && built == 1 && has(s->why, "T=777"), "failure kept: '%s'", s->why);
    s = lt_attn_cache_fetch(&c, &k, fake_build, &built);
    CHECK(!s->plan && built == 0 && f.builds == 1 && has(s->why, "T=777"),
          "a failed key is not rebuilt (%d builds)", f.builds);
    lt_attn_cache_clear(&c);
    CHECK(f.destroys == 0, "no plan, nothing destroyed");
}

static void test_cache_eviction(void) {
    Fake f = {0};
    LtAttnPlanCache c;
    lt_attn_cache_init(&c, fake_destroy, &f);
    void *plan[LT_ATTN_PLAN_SLOTS + 1];
    for (int i = 0; i < LT_ATTN_PLAN_SLOTS; i++) {
        const LtAttnPlanKey k = key_of(i);
        plan[i] = lt_attn_cache_fetch(&c, &k, fake_build, NULL)->plan;
    }
    const LtAttnPlanKey k0 = key_of(0), k1 = key_of(1), kn = key_of(LT_ATTN_PLAN_SLOTS);
    lt_attn_cache_fetch(&c, &k0, fake_build, NULL); /* key 1 is now the least recently used */
    CHECK(f.destroys == 0 && c.evictions == 0, "no eviction while slots are free");
    plan[LT_ATTN_PLAN_SLOTS] = lt_attn_cache_fetch(&c, &kn, fake_build, NULL)->plan;
    CHECK(f.destroys == 1 && c.evictions == 1 && f.last_destroyed == (intptr_t)plan[1],
          "the LRU entry (key 1) is evicted and its plan destroyed");
    CHECK(lt_attn_cache_size(&c) == LT_ATTN_PLAN_SLOTS, "still full");
    int built = 0;
    CHECK(lt_attn_cache_fetch(&c, &k0, fake_build, &built)->plan == plan[0] && !built,
          "recently used key 0 survived");
    CHECK(lt_attn_cache_fetch(&c, &k1, fake_build, &built)->plan != plan[1] && built,
          "evicted key 1 is built again");
    lt_attn_cache_clear(&c);
    CHECK(f.destroys == 2 + LT_ATTN_PLAN_SLOTS, "every plan destroyed once (%d)", f.destroys);
}

/* No GPU here: the CUDA hooks refuse a CPU backend, and the choice a CPU run
 * makes is lattice's (an explicit cudnn is an error, tested in test_resolve
 * and end to end in test_train.sh). */
static void test_no_gpu(void) {
    LtBackend *cpu = lt_backend_cpu_create(LT_BF16, 1);
    LtAttnChoice ch;
    LtAttnInfo info;
    CHECK(lt_cuda_attention_configure(cpu, LT_ATTN_AUTO, 1, 64, 0, &ch) == -1 &&
              has(ch.reason, "model.attention"),
          "configure on the CPU backend: %s", ch.reason);
    CHECK(lt_cuda_attention_info(cpu, &info) == -1 && info.cudnn_calls[0] == 0,
          "info on the CPU backend");
    lt_backend_destroy(cpu);
    const long v = lt_cudnn_version();
    printf("  cuDNN library version %ld, %d CUDA device(s)\n", v, lt_cuda_device_count());
    CHECK(v == 0 || v >= LT_CUDNN_MIN_VERSION, "a linked cuDNN is 9.x or newer: %ld", v);
    if (lt_cuda_device_count() == 0) {
        char err[256] = "";
        CHECK(!lt_backend_cuda_create(LT_BF16, 0, err, sizeof err) && err[0],
              "no GPU: the CUDA backend is refused with a message");
    }
}

/* The cuDNN graphs as the linked cuDNN library checks them, no GPU needed:
 * every tensor and operation descriptor of the forward and of both backward
 * variants, causal and with a sliding window (a quarter of the sequence),
 * each for B plain sequences and for packed documents (a ragged batch of
 * 2B + 1 sequences: offsets, lengths, padding mask), finalizes, and so does
 * the operation graph (seen to work without a handle on cuDNN 9.19; older
 * releases may want the handle for that step, so there only the descriptors
 * are required). Whether cuDNN has a fused engine for them is a GPU question
 * (tests/gpu/test_gpu_ops). Grouped K/V shapes included, and a head split
 * cuDNN must refuse. */
static void test_cudnn_graphs(void) {
    /* B T NH NKV HD: multi-head, then grouped K/V (Llama 3 8B's 32/8 heads) and multi-query */
    static const int shapes[][5] = {{2, 1024, 16, 16, 64}, {1, 129, 2, 2, 128}, {3, 64, 1, 1, 256},
                                    {1, 256, 32, 8, 128},  {2, 128, 4, 1, 64}};
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    const long v = lt_cudnn_version();
    char why[256];
    for (int s = 0; s < nshapes; s++)
        for (int variant = 0; variant < 12; variant++) { /* fwd, bwd deterministic, bwd atomic;
                                                           * then the three with a window; all
                                                           * six again with documents */
            const int *x = shapes[s], v6 = variant % 6;
            const LtAttnPlanKey k = {.dir = v6 % 3 ? LT_ATTN_BWD : LT_ATTN_FWD, .B = x[0],
                                     .T = x[1], .NH = x[2], .NKV = x[3], .HD = x[4],
                                     .window = v6 < 3 ? -1 : x[1] / 4,
                                     .ragged_batch = variant < 6 ? 0 : 2 * x[0] + 1,
                                     .dtype = LT_BF16, .deterministic = v6 % 3 != 2,
                                     .device = 0};
            why[0] = '\0';
            const int rc = lt_cudnn_graph_check(&k, why, sizeof why);
            if (v == 0) {
                CHECK(rc == -1 && why[0], "no cuDNN: the check refuses with a reason");
                continue;
            }
            CHECK(rc != -1, "shape %d variant %d: descriptor refused: %s", s, variant, why);
            CHECK(v < 91900 || rc == 0, "shape %d variant %d: operation graph: %s", s, variant,
                  why);
        }
    /* cuDNN checks the grouping itself: K/V heads that do not divide the query heads, in
     * plain and ragged batches */
    for (int variant = 0; variant < 4 && v > 0; variant++) {
        const LtAttnPlanKey k = {.dir = variant % 2 ? LT_ATTN_BWD : LT_ATTN_FWD, .B = 1,
                                 .T = 256, .NH = 32, .NKV = 3, .HD = 128, .window = -1,
                                 .ragged_batch = variant < 2 ? 0 : 4, .dtype = LT_BF16,
                                 .deterministic = 1, .device = 0};
        CHECK(lt_cudnn_graph_check(&k, why, sizeof why) == -1 && has(why, "matmul"),
              "NH 32 NKV 3 variant %d: %s", variant, why);
    }
}

int main(void) {
    RUN(test_resolve);
    RUN(test_call_rules);
    RUN(test_cache_keys);
    RUN(test_plan_key);
    RUN(test_doc_layout);
    RUN(test_cache_failures);
    RUN(test_cache_eviction);
    RUN(test_no_gpu);
    RUN(test_cudnn_graphs);
    return test_summary();
}
