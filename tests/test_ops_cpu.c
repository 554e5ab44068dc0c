/* test_ops_cpu.c - the CPU backend against float64 references written here,
 * central finite differences of L = sum(out * R) through those references,
 * accumulation / NULL-skip semantics, bf16 mode, determinism (the Llama ops:
 * RMSNorm, SwiGLU, RoPE and its frequency table too), plus an
 * informational timing line. Every overwritten output is poisoned with NaN
 * before the call, and every comparison fails on NaN. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "optim.h"
#include "rope.h"
#include "test.h"

static LtBackend *g_f32, *g_bf16;
static uint64_t g_rng = 1;

#define TOL_FWD 1e-5 /* fp32 op vs float64 reference */
#define TOL_BWD 1e-5
#define TOL_FD 5e-5  /* fp32 gradient vs finite differences of a float64 forward */
#define TOL_BF16 1e-2

/* ---- helpers ---------------------------------------------------------------- */
static float *falloc(size_t n) { return lt_malloc(n * sizeof(float) + 4); }
static double *dalloc(size_t n) { return lt_calloc(n * sizeof(double) + 8); }
static float randn(void) { return lt_normal_at(1234, 0, g_rng++); }
static void fill(float *x, size_t n, float sc, int bf16) {
    for (size_t i = 0; i < n; i++) x[i] = bf16 ? lt_bf16_round(sc * randn()) : sc * randn();
}
static void poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}
static double *todbl(const float *x, size_t n) {
    double *d = dalloc(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static double maxabs(const double *r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(r[i]) > m ? fabs(r[i]) : m;
    return m;
}
/* max_i |g_i - r_i| / (|r_i| + 0.1 max|r|): relative for entries within a
 * decade of the largest, and relative to a tenth of the largest for entries
 * near zero (fp32 sums that cancel have errors proportional to their terms, not
 * their result; the fp32 ops here measure ~1e-7 normwise). Infinite when g
 * holds a NaN or inf. */
static double err(const float *g, const double *r, size_t n) {
    double fl = 0.1 * maxabs(r, n) + 1e-30, e = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(g[i])) return INFINITY;
        double d = fabs(g[i] - r[i]) / (fabs(r[i]) + fl);
        e = d > e ? d : e;
    }
    return e;
}
/* Normwise max_i |g_i - r_i| / max|r| (for bf16 vs fp32: rounding an
 * intermediate, e.g. resid_out before LayerNorm, moves small outputs by a
 * fraction of the typical magnitude, not of their own). */
static double normerr(const float *g, const float *r, size_t n) {
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(g[i])) return INFINITY;
        m = fabs(r[i]) > m ? fabs(r[i]) : m;
        e = fabs(g[i] - r[i]) > e ? fabs(g[i] - r[i]) : e;
    }
    return e / (m + 1e-30);
}
static int all_bf16(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (lt_bf16_round(x[i]) != x[i]) return 0;
    return 1;
}
static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
/* Finite-difference check of grad (fp32, from the backend) = dL/dparam where
 * L = loss() is evaluated in float64 with param perturbed in place. */
static double fd(double (*loss)(void), double *param, size_t n, const float *grad) {
    double gmax = 0, e = 0, h = 1e-4;
    for (size_t i = 0; i < n; i++) gmax = fabs(grad[i]) > gmax ? fabs(grad[i]) : gmax;
    for (int s = 0; s < 24 && s < (int)n; s++) {
        size_t k = s == 0 ? 0 : s == 1 ? n - 1 : (size_t)(lt_uniform_at(7, 1, g_rng++) * n);
        double save = param[k];
        param[k] = save + h;
        double lp = loss();
        param[k] = save - h;
        double lm = loss();
        param[k] = save;
        double num = (lp - lm) / (2 * h);
        if (!isfinite(grad[k])) return INFINITY;
        double d = fabs(grad[k] - num) / (fabs(num) + 0.01 * gmax + 1e-30);
        e = d > e ? d : e;
    }
    return e;
}

#define CHECK_FD(loss, param, n, grad, what, cas)                                  \
    do {                                                                           \
        double e_ = fd(loss, param, n, grad);                                      \
        CHECK(e_ <= TOL_FD, "finite differences, %s, case %d: %g", what, cas, e_); \
    } while (0)

/* ---- float64 references ---------------------------------------------------- */
static double ref_gelu(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double ref_gelu_grad(double x) {
    double s = sqrt(2 / M_PI), th = tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * s * (1 + 3 * 0.044715 * x * x);
}
static void ref_layernorm(double *resid, double *out, double *mean, double *rstd, const double *a,
                          const double *b, const double *w, const double *bias, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double *x = a + (size_t)i * C;
        if (b) {
            for (int c = 0; c < C; c++) resid[i * C + c] = a[i * C + c] + b[i * C + c];
            x = resid + (size_t)i * C;
        }
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c] / C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m) / C;
        double rs = 1 / sqrt(v + 1e-5);
        if (mean) mean[i] = m, rstd[i] = rs;
        for (int c = 0; c < C; c++) out[i * C + c] = (x[c] - m) * rs * w[c] + bias[c];
    }
}
static void ref_layernorm_bwd(double *dx, double *dw, double *db, const double *dout,
                              const double *x, const double *w, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double *xi = x + (size_t)i * C, *d = dout + (size_t)i * C;
        double m = 0, v = 0, sg = 0, sgx = 0;
        for (int c = 0; c < C; c++) m += xi[c] / C;
        for (int c = 0; c < C; c++) v += (xi[c] - m) * (xi[c] - m) / C;
        double rs = 1 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) sg += d[c] * w[c] / C, sgx += d[c] * w[c] * (xi[c] - m) * rs / C;
        for (int c = 0; c < C; c++) {
            double xh = (xi[c] - m) * rs;
            dx[i * C + c] = rs * (d[c] * w[c] - sg - xh * sgx);
            dw[c] += d[c] * xh;
            db[c] += d[c];
        }
    }
}
/* out(N,OC) = inp . w^T + bias, then gelu when act */
static void ref_linear(double *out, const double *inp, const double *w, const double *bias, int N,
                       int C, int OC, int act) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0;
            for (int c = 0; c < C; c++) s += inp[(size_t)i * C + c] * w[(size_t)o * C + c];
            out[(size_t)i * OC + o] = act ? ref_gelu(s) : s;
        }
}
/* dinp = dout . w (overwritten); dw += dout^T inp; db += colsum(dout) */
static void ref_linear_bwd(double *dinp, double *dw, double *db, const double *dout,
                           const double *inp, const double *w, int N, int C, int OC) {
    for (int i = 0; i < N; i++) {
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += dout[(size_t)i * OC + o] * w[(size_t)o * C + c];
            dinp[(size_t)i * C + c] = s;
        }
        for (int o = 0; o < OC; o++) {
            db[o] += dout[(size_t)i * OC + o];
            for (int c = 0; c < C; c++)
                dw[(size_t)o * C + c] += dout[(size_t)i * OC + o] * inp[(size_t)i * C + c];
        }
    }
}
/* Naive causal attention; with dout != NULL also the backward into dqkv. */
/* Causal attention in double, qkv (B, T, NH + 2*NKV, HD): query head h uses
 * key/value head h / (NH / NKV). dqkv (same layout) gets the gradient of
 * sum(out * dout) when not NULL. */
/* Causal attention in float64 with, optionally, per-token first keys ks (NULL: 0)
 * and a sink logit per head (sink NULL: none); dqkv overwritten and dsink (NH)
 * overwritten with the gradients of sum(out * dout) when given. */
static void ref_attention_sink(double *out, double *lse, double *dqkv, double *dsink,
                               const double *dout, const double *qkv, const double *sink,
                               const int32_t *ks, int B, int T, int NH, int NKV, int HD) {
    const int C = NH * HD, G = NH / NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * HD;
    double *p = dalloc(T), *dp = dalloc(T), sc = 1 / sqrt((double)HD);
    if (dqkv) memset(dqkv, 0, sizeof(double) * B * T * W);
    if (dsink) memset(dsink, 0, sizeof(double) * NH);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const size_t kh = (size_t)C + (size_t)(h / G) * HD, vh = kh + (size_t)NKV * HD;
                const size_t qi = (size_t)(b * T + i) * W + (size_t)h * HD;
                const double *q = qkv + qi;
                const int j0 = ks ? ks[b * T + i] : 0;
                double m = sink ? sink[h] : -INFINITY, z = 0;
                for (int j = j0; j <= i; j++) {
                    p[j] = sc * dot(q, qkv + (size_t)(b * T + j) * W + kh, HD);
                    m = p[j] > m ? p[j] : m;
                }
                for (int j = j0; j <= i; j++) z += (p[j] = exp(p[j] - m));
                const double psink = sink ? exp(sink[h] - m) : 0;
                z += psink;
                double *o = out + (size_t)(b * T + i) * C + h * HD;
                for (int d = 0; d < HD; d++) o[d] = 0;
                for (int j = j0; j <= i; j++) {
                    p[j] /= z;
                    for (int d = 0; d < HD; d++) o[d] += p[j] * qkv[(size_t)(b * T + j) * W + vh + d];
                }
                if (lse) lse[(size_t)(b * NH + h) * T + i] = m + log(z);
                if (!dqkv) continue;
                const double *g = dout + (size_t)(b * T + i) * C + h * HD;
                double D = 0;
                for (int j = j0; j <= i; j++) {
                    dp[j] = dot(g, qkv + (size_t)(b * T + j) * W + vh, HD);
                    D += p[j] * dp[j];
                }
                if (dsink) dsink[h] -= psink / z * D;
                for (int j = j0; j <= i; j++) {
                    double ds = p[j] * (dp[j] - D) * sc;
                    size_t kj = (size_t)(b * T + j) * W + kh, vj = (size_t)(b * T + j) * W + vh;
                    for (int d = 0; d < HD; d++) {
                        dqkv[qi + d] += ds * qkv[kj + d];
                        dqkv[kj + d] += ds * qkv[qi + d];
                        dqkv[vj + d] += p[j] * g[d];
                    }
                }
            }
    free(p);
    free(dp);
}
static void ref_attention(double *out, double *lse, double *dqkv, const double *dout,
                          const double *qkv, int B, int T, int NH, int NKV, int HD) {
    ref_attention_sink(out, lse, dqkv, NULL, dout, qkv, NULL, NULL, B, T, NH, NKV, HD);
}
static void ref_xent(double *loss, double *dlog, const double *x, const int32_t *tg, int N, int V,
                     int Vp, double dscale) {
    for (int i = 0; i < N; i++) {
        const double *r = x + (size_t)i * Vp;
        double m = r[0], z = 0;
        for (int j = 1; j < V; j++) m = r[j] > m ? r[j] : m;
        for (int j = 0; j < V; j++) z += exp(r[j] - m);
        loss[i] = m + log(z) - r[tg[i]];
        if (dlog)
            for (int j = 0; j < Vp; j++)
                dlog[(size_t)i * Vp + j] = j < V ? dscale * (exp(r[j] - m) / z - (j == tg[i])) : 0;
    }
}

/* ---- memory, streams, reductions ------------------------------------------- */
static void test_memory(void) {
    LtBackend *be = g_bf16;
    size_t n = 1000;
    float *d = be->ops->alloc(be, n * be->act_size);
    CHECK(be->act_size == 4, "act_size %zu", be->act_size);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= d[i] == 0.0f;
    CHECK(zero, "alloc not zeroed");
    float *h = falloc(n), *h2 = falloc(n), *d2 = be->ops->alloc(be, n * 4);
    fill(h, n, 3.0f, 0);
    be->ops->act_from_f32(be, d, h, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= d[i] == lt_bf16_round(h[i]);
    CHECK(ok && !all_bf16(h, n), "act_from_f32 must round to bf16");
    /* ties (to even), overflow to inf, NaNs (stay quiet NaN), denormals, signs */
    uint32_t bits[] = {0x3F808000u, 0x3F818000u, 0xBF808001u, 0x7F7FFFFFu, 0x7F800000u,
                       0xFF800000u, 0x7FC00001u, 0x7F800001u, 0xFF812345u, 0x00008000u,
                       0x00018000u, 0x80000000u};
    float sp[12], got[12];
    memcpy(sp, bits, sizeof sp);
    be->ops->act_from_f32(be, got, sp, 12);
    for (int i = 0; i < 12; i++) {
        float want = lt_bf16_round(sp[i]);
        CHECK(memcmp(&got[i], &want, 4) == 0, "bf16 rounding of 0x%08x", (unsigned)bits[i]);
    }
    be->ops->copy(be, d2, d, n * 4);
    poison(h2, n);
    be->ops->act_to_f32(be, h2, d2, n);
    CHECK(memcmp(h2, d, n * 4) == 0, "copy / act_to_f32");
    be->ops->upload(be, d2, h, n * 4);
    poison(h2, n);
    be->ops->download(be, h2, d2, n * 4);
    CHECK(memcmp(h2, h, n * 4) == 0, "upload/download");
    be->ops->zero(be, d2, n * 4);
    CHECK(d2[0] == 0 && d2[n - 1] == 0, "zero");
    g_f32->ops->act_from_f32(g_f32, d, h, n);
    CHECK(memcmp(d, h, n * 4) == 0, "f32 act_from_f32 must not round");
    LtStream *s = be->ops->stream_create(be);
    LtEvent *e = be->ops->event_create(be);
    CHECK(s && e, "stream/event objects");
    be->ops->set_stream(be, s);
    be->ops->event_record(be, e, s);
    be->ops->stream_wait_event(be, NULL, e);
    be->ops->set_stream(be, NULL);
    CHECK(be->ops->current_stream(be) == NULL && !be->ops->native_stream,
          "CPU: one synchronous stream, no native handle");
    be->ops->synchronize(be);
    be->ops->event_destroy(be, e);
    be->ops->stream_destroy(be, s);
    be->ops->free(be, d);
    be->ops->free(be, d2);
    free(h);
    free(h2);
}

static void test_sumsq_scale(void) {
    size_t sizes[] = {1, 7, 16384, 100003};
    for (int t = 0; t < 4; t++) {
        size_t n = sizes[t];
        float *x = falloc(n);
        fill(x, n, 2.0f, 0);
        double ref = 0, ref1 = 0;
        for (size_t i = 0; i < n; i++) ref += (double)x[i] * x[i], ref1 += x[i];
        double got = 0.5, got1 = -2.0; /* accumulated into: the start value stays */
        g_f32->ops->sum_f64(g_f32, &got, x, n, 1);
        g_f32->ops->sum_f64(g_f32, &got1, x, n, 0);
        CHECK(fabs(got - 0.5 - ref) <= 1e-12 * ref, "sum of squares n=%zu %.17g vs %.17g", n,
              got - 0.5, ref);
        CHECK(fabs(got1 + 2.0 - ref1) <= 1e-12 * fmax(fabs(ref1), 1.0), "sum n=%zu %.17g vs %.17g",
              n, got1 + 2.0, ref1);
        float x0 = x[0], xl = x[n - 1];
        g_f32->ops->scale_f32(g_f32, x, 0.37f, n);
        CHECK(x[0] == x0 * 0.37f && x[n - 1] == xl * 0.37f, "scale_f32 n=%zu", n);
        /* add_f32: dst += src, elementwise and exact like the host loop it replaced */
        float *y = falloc(n), *ref2 = falloc(n);
        fill(y, n, 1.5f, 1);
        for (size_t i = 0; i < n; i++) ref2[i] = x[i] + y[i];
        g_f32->ops->add_f32(g_f32, x, y, n);
        int bad = 0;
        for (size_t i = 0; i < n; i++) bad += x[i] != ref2[i];
        CHECK(bad == 0, "add_f32 n=%zu: %d elements differ", n, bad);
        free(y);
        free(ref2);
        free(x);
    }
    g_f32->ops->add_f32(g_f32, NULL, NULL, 0);
    double none = 3.0;
    g_f32->ops->sum_f64(g_f32, &none, NULL, 0, 1);
    CHECK(none == 3.0, "sum of nothing adds nothing");
}

/* clip_coef on device scalars (host memory here) against lt_clip_coef; a
 * non-finite sum of squares gives -1, the mark of a skipped step, which adamw
 * obeys by changing nothing; flag_nonfinite folds a non-finite loss into the
 * sum. localize_ids: vocab-parallel ownership. */
static void test_clip_localize(void) {
    const double ss[] = {16.0, 0.25, 0.0, 1e30};
    for (int i = 0; i < 4; i++) {
        float c = -1.f, c0 = -1.f;
        g_f32->ops->clip_coef(g_f32, &c, &ss[i], 1.0f);
        g_f32->ops->clip_coef(g_f32, &c0, &ss[i], 0.0f);
        CHECK(c == (float)lt_clip_coef(1.0, sqrt(ss[i])) && c0 == 1.0f, "clip_coef(%g) = %g, %g",
              ss[i], c, c0);
    }
    const double bad[] = {NAN, INFINITY};
    for (int i = 0; i < 2; i++) {
        float c = -1.f;
        g_f32->ops->clip_coef(g_f32, &c, &bad[i], 1.0f);
        CHECK(c == -1.0f, "clip_coef(%g) = %g, want -1 (skip)", bad[i], c);
    }
    const double xs[] = {2.5, -0.0, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++) {
        double acc = 7.0;
        g_f32->ops->flag_nonfinite(g_f32, &acc, &xs[i]);
        CHECK(isfinite(xs[i]) ? acc == 7.0 : isnan(acc), "flag_nonfinite(%g): %g", xs[i], acc);
    }
    /* a skipped step changes no weight, moment or compute copy, in both dtypes */
    for (int k = 0; k < 2; k++) {
        LtBackend *be = k ? g_bf16 : g_f32;
        float master[5] = {1, -2, 3, 0.5f, 8}, m[5] = {0.1f, 0, -0.1f, 1, 2}, v[5] = {1, 2, 3, 4, 5};
        float grad[5] = {1, 1, NAN, INFINITY, 1}, param[5] = {9, 9, 9, 9, 9}, skip = -1.0f;
        float m0[5], v0[5], w0[5];
        memcpy(m0, m, sizeof m), memcpy(v0, v, sizeof v), memcpy(w0, master, sizeof master);
        LtAdamArgs a = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                        .bc1 = 0.1f, .bc2 = 0.05f, .grad_scale = 1.0f, .grad_scale_dev = &skip};
        be->ops->adamw(be, param, master, grad, m, v, 5, &a);
        CHECK(!memcmp(m, m0, sizeof m) && !memcmp(v, v0, sizeof v) && !memcmp(master, w0, sizeof w0),
              "a skipped step changed the state");
        CHECK(param[0] == 9 && param[4] == 9, "a skipped step rewrote the compute copy");
    }
    int32_t ids[] = {0, 9, 10, 19, 20, 25, -1};
    const int32_t want[] = {-1, -1, 0, 9, -1, -1, -1};
    g_f32->ops->localize_ids(g_f32, ids, 7, 10, 10);
    for (int i = 0; i < 7; i++) CHECK(ids[i] == want[i], "localize_ids[%d] = %d, want %d", i, ids[i], want[i]);
}

/* ---- add_act: out = a + b over act tensors ---------------------------------- */
/* fp32: exactly a + b; bf16: exactly the RNE rounding of the fp32 sum, and bitwise
 * equal to layernorm_fwd's resid_out for the same a, b; also in place (out == a,
 * out == b). */
static void test_add_act(void) {
    size_t sizes[] = {1, 7, 16384, 100003};
    for (int t = 0; t < 4; t++) {
        size_t n = sizes[t];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? g_bf16 : g_f32;
            const char *dt = k ? "bf16" : "fp32";
            float *a = falloc(n), *b = falloc(n), *out = falloc(n), *ref = falloc(n);
            float *ip = falloc(n);
            fill(a, n, 2.0f, k), fill(b, n, 1.0f, k);
            for (size_t i = 0; i < n; i++) ref[i] = k ? lt_bf16_round(a[i] + b[i]) : a[i] + b[i];
            poison(out, n);
            be->ops->add_act(be, out, a, b, n);
            int bad = 0;
            for (size_t i = 0; i < n; i++) bad += memcmp(&out[i], &ref[i], 4) != 0;
            CHECK(bad == 0, "add_act %s n=%zu: %d elements differ from a + b", dt, n, bad);
            if (k) CHECK(all_bf16(out, n), "add_act bf16 n=%zu: output not bf16-representable", n);
            /* in place: out == a, then out == b */
            memcpy(ip, a, n * 4);
            be->ops->add_act(be, ip, ip, b, n);
            CHECK(memcmp(ip, ref, n * 4) == 0, "add_act %s n=%zu in place (out == a)", dt, n);
            memcpy(ip, b, n * 4);
            be->ops->add_act(be, ip, a, ip, n);
            CHECK(memcmp(ip, ref, n * 4) == 0, "add_act %s n=%zu in place (out == b)", dt, n);
            /* the same bits as the residual sum fused into layernorm_fwd: N rows of C = 256
             * when 256 divides n, else one row of C = n */
            int C = n % 256 == 0 ? 256 : (int)n, N = (int)(n / (size_t)C);
            float *w = falloc(C), *bias = falloc(C), *res = falloc(n), *o = falloc(n);
            float *mean = falloc(N), *rstd = falloc(N);
            fill(w, C, 1.0f, k), fill(bias, C, 1.0f, k);
            poison(res, n);
            be->ops->layernorm_fwd(be, res, o, mean, rstd, a, b, w, bias, N, C);
            CHECK(memcmp(res, out, n * 4) == 0, "add_act %s n=%zu = layernorm_fwd resid_out (N=%d C=%d)",
                  dt, n, N, C);
            free(w), free(bias), free(res), free(o), free(mean), free(rstd);
            free(a), free(b), free(out), free(ref), free(ip);
        }
    }
    g_f32->ops->add_act(g_f32, NULL, NULL, NULL, 0);
    g_bf16->ops->add_act(g_bf16, NULL, NULL, NULL, 0);
}

/* ---- embedding -------------------------------------------------------------- */
static struct { int B, T, C; int32_t *tok; double *wte, *wpe, *R, *out; } E;
static double embedding_loss(void) {
    for (int i = 0; i < E.B * E.T; i++)
        for (int c = 0; c < E.C; c++)
            E.out[i * E.C + c] = E.wte[E.tok[i] * E.C + c] + E.wpe[(i % E.T) * E.C + c];
    return dot(E.out, E.R, (size_t)E.B * E.T * E.C);
}
static void test_embedding(void) {
    int shapes[][4] = {{1, 7, 12, 5}, {3, 9, 20, 11}, {2, 70, 33, 4}}; /* B T C V */
    for (int s = 0; s < 3; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3], N = B * T;
        int32_t *tok = lt_malloc(sizeof(int32_t) * N);
        for (int i = 0; i < N; i++) tok[i] = (int32_t)(lt_uniform_at(3, s, i) * V);
        float *wte = falloc(V * C), *wpe = falloc(T * C), *out = falloc(N * C), *R = falloc(N * C);
        float *dwte = falloc(V * C), *dwpe = falloc(T * C);
        fill(wte, V * C, 1, 0), fill(wpe, T * C, 1, 0), fill(R, N * C, 1, 0);
        fill(dwte, V * C, 1, 0), fill(dwpe, T * C, 1, 0); /* accumulated into */
        E.B = B, E.T = T, E.C = C, E.tok = tok, E.wte = todbl(wte, V * C), E.wpe = todbl(wpe, T * C);
        E.R = todbl(R, N * C), E.out = dalloc(N * C);
        double *rwte = todbl(dwte, V * C), *rwpe = todbl(dwpe, T * C);
        poison(out, N * C);
        g_f32->ops->embedding_fwd(g_f32, out, tok, wte, wpe, NULL, B, T, C);
        embedding_loss();
        CHECK(err(out, E.out, N * C) <= TOL_FWD, "fwd shape %d: %g", s, err(out, E.out, N * C));
        g_f32->ops->embedding_bwd(g_f32, dwte, dwpe, R, tok, NULL, B, T, C);
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++) rwte[tok[i] * C + c] += R[i * C + c], rwpe[(i % T) * C + c] += R[i * C + c];
        CHECK(err(dwte, rwte, V * C) <= TOL_BWD, "dwte (accumulated) shape %d", s);
        CHECK(err(dwpe, rwpe, T * C) <= TOL_BWD, "dwpe (accumulated) shape %d", s);
        /* FD on a fresh (zeroed) gradient */
        memset(dwte, 0, V * C * 4), memset(dwpe, 0, T * C * 4);
        g_f32->ops->embedding_bwd(g_f32, dwte, dwpe, R, tok, NULL, B, T, C);
        CHECK_FD(embedding_loss, E.wte, V * C, dwte, "dwte", s);
        CHECK_FD(embedding_loss, E.wpe, T * C, dwpe, "dwpe", s);
        free(tok), free(wte), free(wpe), free(out), free(R), free(dwte), free(dwpe), free(rwte), free(rwpe);
        free(E.wte), free(E.wpe), free(E.R), free(E.out);
    }
}

/* Vocab-parallel semantics: negative ids (rows another rank owns), wpe == NULL,
 * dwte / dwpe == NULL, against float64 references; then a simulated split of
 * wte over 1, 2 and 3 ranks (local ids, positions on rank 0 only) whose summed
 * outputs and concatenated gradients must equal the single-rank op. */
static void test_embedding_tp(void) {
    enum { B = 3, T = 11, C = 40, V = 13, N = B * T };
    int32_t tok[N];
    for (int i = 0; i < N; i++) /* about a third negative, with varied negative values */
        tok[i] = i % 3 == 1 ? -1 - (int32_t)(lt_uniform_at(4, 0, i) * 5) : (int32_t)(lt_uniform_at(4, 1, i) * V);
    tok[0] = -1, tok[N - 1] = V - 1;
    float *wte = falloc(V * C), *wpe = falloc(T * C), *out = falloc(N * C), *R = falloc(N * C);
    float *dwte = falloc(V * C), *dwpe = falloc(T * C), *dwte0 = falloc(V * C), *dwpe0 = falloc(T * C);
    fill(wte, V * C, 1, 1), fill(wpe, T * C, 1, 1), fill(R, N * C, 1, 0);
    fill(dwte0, V * C, 1, 0), fill(dwpe0, T * C, 1, 0);
    double *ro = dalloc(N * C), *rwte = dalloc(V * C), *rwpe = dalloc(T * C);
    for (int k = 0; k < 2; k++) { /* bf16 mode: wte/wpe are bf16 values, so sums of one term are exact */
        LtBackend *be = k ? g_bf16 : g_f32;
        for (int withpos = 0; withpos < 2; withpos++) {
            for (int i = 0; i < N; i++)
                for (int c = 0; c < C; c++)
                    ro[i * C + c] = (tok[i] >= 0 ? wte[tok[i] * C + c] : 0.0) + (withpos ? wpe[(i % T) * C + c] : 0.0);
            poison(out, N * C);
            be->ops->embedding_fwd(be, out, tok, wte, withpos ? wpe : NULL, NULL, B, T, C);
            if (k) {
                float *r32 = falloc(N * C);
                for (int j = 0; j < N * C; j++) r32[j] = (float)ro[j];
                CHECK(all_bf16(out, N * C), "bf16 output representable, pos %d", withpos);
                CHECK(normerr(out, r32, N * C) <= TOL_BF16, "bf16 fwd pos %d", withpos);
                free(r32);
            } else {
                CHECK(err(out, ro, N * C) <= TOL_FWD, "fwd pos %d: %g", withpos, err(out, ro, N * C));
            }
            int zero = 1, posonly = 1;
            for (int i = 0; i < N; i++)
                if (tok[i] < 0)
                    for (int c = 0; c < C; c++) {
                        zero &= withpos || out[i * C + c] == 0.0f;
                        posonly &= !withpos || out[i * C + c] == wpe[(i % T) * C + c];
                    }
            CHECK(zero && posonly, "negative id rows: exactly 0 / exactly wpe (pos %d, %s)", withpos, be->ops->name);
        }
        /* backward: dwte only (dwpe NULL), then dwpe only (dwte NULL) */
        for (int which = 0; which < 2; which++) {
            memcpy(dwte, dwte0, V * C * 4), memcpy(dwpe, dwpe0, T * C * 4);
            for (int j = 0; j < V * C; j++) rwte[j] = dwte0[j];
            for (int j = 0; j < T * C; j++) rwpe[j] = dwpe0[j];
            for (int i = 0; i < N; i++)
                for (int c = 0; c < C; c++) {
                    if (which == 0 && tok[i] >= 0) rwte[tok[i] * C + c] += R[i * C + c];
                    if (which == 1) rwpe[(i % T) * C + c] += R[i * C + c];
                }
            be->ops->embedding_bwd(be, which == 0 ? dwte : NULL, which == 1 ? dwpe : NULL, R, tok, NULL, B, T, C);
            CHECK(err(dwte, rwte, V * C) <= TOL_BWD, "dwte %s (dwpe %s)", be->ops->name, which ? "given, dwte NULL" : "NULL");
            CHECK(err(dwpe, rwpe, T * C) <= TOL_BWD, "dwpe %s (%s)", be->ops->name, which ? "given" : "NULL: untouched");
            CHECK(which == 1 || memcmp(dwpe, dwpe0, T * C * 4) == 0, "dwpe buffer untouched when NULL passed");
            CHECK(which == 0 || memcmp(dwte, dwte0, V * C * 4) == 0, "dwte buffer untouched when NULL passed");
        }
    }
    /* simulated vocab split of wte (V rows) over TP ranks of Vr = ceil(V/TP) rows */
    float *full = falloc(N * C), *part = falloc(N * C), *sum = falloc(N * C), *gfull = lt_calloc(V * C * 4);
    float *gshard = lt_calloc(V * C * 4 + 64 * C * 4), *gp = lt_calloc(T * C * 4), *gpfull = lt_calloc(T * C * 4);
    g_f32->ops->embedding_fwd(g_f32, full, tok, wte, wpe, NULL, B, T, C);
    g_f32->ops->embedding_bwd(g_f32, gfull, gpfull, R, tok, NULL, B, T, C);
    for (int TP = 1; TP <= 3; TP++) {
        const int Vr = (V + TP - 1) / TP;
        int32_t loc[N];
        memset(sum, 0, N * C * 4), memset(gshard, 0, V * C * 4), memset(gp, 0, T * C * 4);
        for (int r = 0; r < TP; r++) {
            const int v0 = r * Vr, v1 = v0 + Vr < V ? v0 + Vr : V;
            for (int i = 0; i < N; i++) loc[i] = tok[i] >= v0 && tok[i] < v1 ? tok[i] - v0 : -1;
            poison(part, N * C);
            g_f32->ops->embedding_fwd(g_f32, part, loc, wte + (size_t)v0 * C, r == 0 ? wpe : NULL, NULL, B, T, C);
            for (int j = 0; j < N * C; j++) sum[j] += part[j]; /* the all-reduce */
            g_f32->ops->embedding_bwd(g_f32, gshard + (size_t)v0 * C, r == 0 ? gp : NULL, R, loc, NULL, B, T, C);
        }
        int ok = 1;
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++) {
                /* the global negative ids have no wte term on any rank */
                double ref = (tok[i] >= 0 ? (double)wte[tok[i] * C + c] : 0.0) + wpe[(i % T) * C + c];
                ok &= fabs(sum[i * C + c] - ref) <= 1e-6 * (1 + fabs(ref));
            }
        CHECK(ok, "TP=%d: sum of shard embeddings = full embedding", TP);
        CHECK(memcmp(gshard, gfull, V * C * 4) == 0, "TP=%d: concatenated dwte shards = full dwte (bitwise)", TP);
        CHECK(memcmp(gp, gpfull, T * C * 4) == 0, "TP=%d: dwpe from rank 0 = full dwpe (bitwise)", TP);
    }
    free(full), free(part), free(sum), free(gfull), free(gshard), free(gp), free(gpfull);
    free(wte), free(wpe), free(out), free(R), free(dwte), free(dwpe), free(dwte0), free(dwpe0);
    free(ro), free(rwte), free(rwpe);
}

/* ---- layernorm -------------------------------------------------------------- */
static struct { int N, C, resid; double *a, *b, *w, *bias, *R, *res, *out; } L;
static double layernorm_loss(void) {
    ref_layernorm(L.res, L.out, NULL, NULL, L.a, L.resid ? L.b : NULL, L.w, L.bias, L.N, L.C);
    return dot(L.out, L.R, (size_t)L.N * L.C);
}
static void test_layernorm(void) {
    int shapes[][2] = {{7, 12}, {5, 33}, {33, 64}};
    for (int s = 0; s < 6; s++) {
        int N = shapes[s / 2][0], C = shapes[s / 2][1], resid = s % 2;
        size_t n = (size_t)N * C;
        float *a = falloc(n), *b = falloc(n), *w = falloc(C), *bias = falloc(C), *R = falloc(n);
        float *res = falloc(n), *out = falloc(n), *mean = falloc(N), *rstd = falloc(N);
        float *dinp = falloc(n), *dw = falloc(C), *db = falloc(C);
        fill(a, n, 2, 0), fill(b, n, 1, 0), fill(w, C, 1, 0), fill(bias, C, 1, 0), fill(R, n, 1, 0);
        for (size_t i = 0; i < n; i++) a[i] += 0.5f; /* nonzero mean */
        fill(dinp, n, 1, 0), fill(dw, C, 1, 0), fill(db, C, 1, 0);
        L.N = N, L.C = C, L.resid = resid, L.a = todbl(a, n), L.b = todbl(b, n), L.w = todbl(w, C);
        L.bias = todbl(bias, C), L.R = todbl(R, n), L.res = dalloc(n), L.out = dalloc(n);
        double *rmean = dalloc(N), *rrstd = dalloc(N);
        double *rdx = dalloc(n), *rdw = todbl(dw, C), *rdb = todbl(db, C), *rdinp = todbl(dinp, n);
        poison(res, n), poison(out, n), poison(mean, N), poison(rstd, N);
        g_f32->ops->layernorm_fwd(g_f32, res, out, mean, rstd, a, resid ? b : NULL, w, bias, N, C);
        ref_layernorm(L.res, L.out, rmean, rrstd, L.a, resid ? L.b : NULL, L.w, L.bias, N, C);
        CHECK(err(out, L.out, n) <= TOL_FWD, "out case %d: %g", s, err(out, L.out, n));
        CHECK(err(mean, rmean, N) <= TOL_FWD && err(rstd, rrstd, N) <= TOL_FWD, "stats case %d", s);
        if (resid) CHECK(err(res, L.res, n) <= TOL_FWD, "resid_out case %d", s);
        const float *x = resid ? res : a;
        g_f32->ops->layernorm_bwd(g_f32, dinp, dw, db, R, x, w, mean, rstd, N, C);
        ref_layernorm_bwd(rdx, rdw, rdb, L.R, resid ? L.res : L.a, L.w, N, C);
        for (size_t i = 0; i < n; i++) rdinp[i] += rdx[i];
        CHECK(err(dinp, rdinp, n) <= TOL_BWD, "dinp (+=) case %d: %g", s, err(dinp, rdinp, n));
        CHECK(err(dw, rdw, C) <= TOL_BWD && err(db, rdb, C) <= TOL_BWD, "dw/db (+=) case %d", s);
        memset(dinp, 0, n * 4), memset(dw, 0, C * 4), memset(db, 0, C * 4);
        g_f32->ops->layernorm_bwd(g_f32, dinp, dw, db, R, x, w, mean, rstd, N, C);
        CHECK_FD(layernorm_loss, L.a, n, dinp, "da", s);
        if (resid) CHECK_FD(layernorm_loss, L.b, n, dinp, "db(resid)", s);
        CHECK_FD(layernorm_loss, L.w, C, dw, "dw", s);
        CHECK_FD(layernorm_loss, L.bias, C, db, "dbias", s);
        free(a), free(b), free(w), free(bias), free(R), free(res), free(out), free(mean), free(rstd);
        free(dinp), free(dw), free(db), free(rmean), free(rrstd), free(rdx), free(rdw), free(rdb), free(rdinp);
        free(L.a), free(L.b), free(L.w), free(L.bias), free(L.R), free(L.res), free(L.out);
    }
}

/* ---- linear (+ GeLU epilogue): a 2-layer MLP x -fc-> pre -gelu-> h -proj-> out */
static struct { int N, C, H, O; double *x, *w1, *b1, *w2, *b2, *R, *pre, *h, *out; } M;
static double mlp_loss(void) {
    ref_linear(M.pre, M.x, M.w1, M.b1, M.N, M.C, M.H, 0);
    for (size_t i = 0; i < (size_t)M.N * M.H; i++) M.h[i] = ref_gelu(M.pre[i]);
    ref_linear(M.out, M.h, M.w2, M.b2, M.N, M.H, M.O, 0);
    return dot(M.out, M.R, (size_t)M.N * M.O);
}
static void test_linear_mlp(void) {
    int shapes[][4] = {{7, 12, 20, 5}, {33, 17, 40, 9}, {130, 64, 96, 70}}; /* N C H O */
    LtBackend *be = g_f32;
    for (int s = 0; s < 3; s++) {
        int N = shapes[s][0], C = shapes[s][1], H = shapes[s][2], O = shapes[s][3];
        float *x = falloc(N * C), *w1 = falloc(H * C), *b1 = falloc(H), *w2 = falloc(O * H);
        float *b2 = falloc(O), *R = falloc(N * O), *pre = falloc(N * H), *h = falloc(N * H);
        float *out = falloc(N * O), *dpre = falloc(N * H), *dx = falloc(N * C);
        float *dw1 = falloc(H * C), *db1 = falloc(H), *dw2 = falloc(O * H), *db2 = falloc(O);
        fill(x, N * C, 1, 0), fill(w1, H * C, 0.3f, 0), fill(b1, H, 0.5f, 0);
        fill(w2, O * H, 0.2f, 0), fill(b2, O, 0.5f, 0), fill(R, N * O, 1, 0);
        fill(dw1, H * C, 1, 0), fill(db1, H, 1, 0), fill(dw2, O * H, 1, 0), fill(db2, O, 1, 0);
        M.N = N, M.C = C, M.H = H, M.O = O, M.x = todbl(x, N * C), M.w1 = todbl(w1, H * C);
        M.b1 = todbl(b1, H), M.w2 = todbl(w2, O * H), M.b2 = todbl(b2, O), M.R = todbl(R, N * O);
        M.pre = dalloc(N * H), M.h = dalloc(N * H), M.out = dalloc(N * O);
        poison(pre, N * H), poison(h, N * H), poison(out, N * O);
        be->ops->linear_fwd(be, h, pre, x, w1, b1, N, C, H);
        be->ops->linear_fwd(be, out, NULL, h, w2, b2, N, H, O);
        mlp_loss();
        CHECK(err(pre, M.pre, N * H) <= TOL_FWD, "pre_gelu %d: %g", s, err(pre, M.pre, N * H));
        CHECK(err(h, M.h, N * H) <= TOL_FWD, "gelu epilogue %d: %g", s, err(h, M.h, N * H));
        CHECK(err(out, M.out, N * O) <= TOL_FWD, "out %d: %g", s, err(out, M.out, N * O));
        /* backward, accumulating into random dw/db */
        double *rdw1 = todbl(dw1, H * C), *rdb1 = todbl(db1, H), *rdw2 = todbl(dw2, O * H);
        double *rdb2 = todbl(db2, O), *rdh = dalloc(N * H), *rdx = dalloc(N * C);
        poison(dpre, N * H), poison(dx, N * C);
        be->ops->linear_bwd(be, dpre, dw2, db2, R, h, w2, pre, N, H, O);
        be->ops->linear_bwd(be, dx, dw1, db1, dpre, x, w1, NULL, N, C, H);
        ref_linear_bwd(rdh, rdw2, rdb2, M.R, M.h, M.w2, N, H, O);
        for (size_t i = 0; i < (size_t)N * H; i++) rdh[i] *= ref_gelu_grad(M.pre[i]);
        ref_linear_bwd(rdx, rdw1, rdb1, rdh, M.x, M.w1, N, C, H);
        CHECK(err(dpre, rdh, N * H) <= TOL_BWD, "dinp with gelu' %d: %g", s, err(dpre, rdh, N * H));
        CHECK(err(dx, rdx, N * C) <= TOL_BWD, "dinp %d: %g", s, err(dx, rdx, N * C));
        CHECK(err(dw1, rdw1, H * C) <= TOL_BWD && err(dw2, rdw2, O * H) <= TOL_BWD, "dw += %d", s);
        CHECK(err(db1, rdb1, H) <= TOL_BWD && err(db2, rdb2, O) <= TOL_BWD, "db += %d", s);
        memset(dw1, 0, H * C * 4), memset(db1, 0, H * 4), memset(dw2, 0, O * H * 4), memset(db2, 0, O * 4);
        be->ops->linear_bwd(be, dpre, dw2, db2, R, h, w2, pre, N, H, O);
        be->ops->linear_bwd(be, dx, dw1, db1, dpre, x, w1, NULL, N, C, H);
        CHECK_FD(mlp_loss, M.x, N * C, dx, "dx", s);
        CHECK_FD(mlp_loss, M.w1, H * C, dw1, "dw1", s);
        CHECK_FD(mlp_loss, M.b1, H, db1, "db1", s);
        CHECK_FD(mlp_loss, M.w2, O * H, dw2, "dw2", s);
        CHECK_FD(mlp_loss, M.b2, O, db2, "db2", s);
        /* bias NULL forward; NULL-skips and untouched outputs in backward */
        poison(out, N * O);
        be->ops->linear_fwd(be, out, NULL, h, w2, NULL, N, H, O);
        ref_linear(M.out, M.h, M.w2, NULL, N, H, O, 0);
        CHECK(err(out, M.out, N * O) <= TOL_FWD, "no-bias out %d", s);
        float dw2c = dw2[0], db2c = db2[O - 1];
        poison(dpre, N * H);
        be->ops->linear_bwd(be, dpre, NULL, NULL, R, h, w2, NULL, N, H, O);
        ref_linear_bwd(rdh, rdw2, rdb2, M.R, M.h, M.w2, N, H, O);
        CHECK(err(dpre, rdh, N * H) <= TOL_BWD && dw2[0] == dw2c && db2[O - 1] == db2c, "dinp only %d", s);
        float d0 = dpre[0];
        be->ops->linear_bwd(be, NULL, NULL, db2, R, h, w2, NULL, N, H, O);
        CHECK(dpre[0] == d0 && dw2[0] == dw2c && db2[O - 1] != db2c, "dbias only %d", s);
        free(x), free(w1), free(b1), free(w2), free(b2), free(R), free(pre), free(h), free(out);
        free(dpre), free(dx), free(dw1), free(db1), free(dw2), free(db2);
        free(rdw1), free(rdb1), free(rdw2), free(rdb2), free(rdh), free(rdx);
        free(M.x), free(M.w1), free(M.b1), free(M.w2), free(M.b2), free(M.R), free(M.pre), free(M.h), free(M.out);
    }
}

/* ---- gelu ------------------------------------------------------------------- */
static struct { size_t n; double *x, *R; } G;
static double gelu_loss(void) {
    double s = 0;
    for (size_t i = 0; i < G.n; i++) s += ref_gelu(G.x[i]) * G.R[i];
    return s;
}
static void test_gelu(void) {
    size_t n = 1003;
    float *x = falloc(n), *R = falloc(n), *y = falloc(n), *dx = falloc(n);
    fill(x, n, 3, 0), fill(R, n, 1, 0);
    x[0] = -12, x[1] = 12, x[2] = 0, x[3] = -40; /* tails */
    G.n = n, G.x = todbl(x, n), G.R = todbl(R, n);
    double *ry = dalloc(n), *rdx = dalloc(n);
    for (size_t i = 0; i < n; i++) ry[i] = ref_gelu(G.x[i]), rdx[i] = ref_gelu_grad(G.x[i]) * G.R[i];
    poison(y, n), poison(dx, n);
    g_f32->ops->gelu_fwd(g_f32, y, x, n);
    g_f32->ops->gelu_bwd(g_f32, dx, x, R, n);
    CHECK(err(y, ry, n) <= TOL_FWD, "gelu fwd %g", err(y, ry, n));
    CHECK(err(dx, rdx, n) <= TOL_BWD, "gelu bwd %g", err(dx, rdx, n));
    CHECK(fabs(y[3]) < 1e-30 && y[1] == 12.0f, "gelu tails %g %g", y[3], y[1]);
    CHECK_FD(gelu_loss, G.x, n, dx, "gelu", 0);
    free(x), free(R), free(y), free(dx), free(G.x), free(G.R), free(ry), free(rdx);
}

/* ---- attention -------------------------------------------------------------- */
static struct { int B, T, NH, NKV, HD; double *qkv, *R, *out; } A;
static double attention_loss(void) {
    ref_attention(A.out, NULL, NULL, NULL, A.qkv, A.B, A.T, A.NH, A.NKV, A.HD);
    return dot(A.out, A.R, (size_t)A.B * A.T * A.NH * A.HD);
}
static void run_attention(LtBackend *be, float *out, float *lse, float *dqkv, const float *qkv,
                          const float *dout, int B, int T, int NH, int NKV, int HD) {
    size_t n = (size_t)B * T * NH * HD, nq = (size_t)B * T * (NH + 2 * NKV) * HD;
    poison(out, n), poison(lse, (size_t)B * NH * T), poison(dqkv, nq);
    be->ops->attention_fwd(be, out, lse, qkv, NULL, NULL, -1, B, T, NH, NKV, HD);
    be->ops->attention_bwd(be, dqkv, NULL, dout, qkv, out, lse, NULL, NULL, -1, B, T, NH, NKV, HD);
}
/* Against float64 and finite differences: multi-head shapes (NKV = NH), then
 * grouped K/V (NH 4 NKV 2, NH 6 NKV 3 with T past one 64-row block) and
 * multi-query (NKV 1). */
static void test_attention(void) {
    int shapes[][5] = {{1, 7, 4, 4, 3},   {2, 9, 1, 1, 8},  {2, 150, 2, 2, 3}, {1, 200, 3, 3, 16},
                       {1, 64, 2, 2, 64}, {2, 9, 4, 2, 8},  {1, 7, 4, 1, 3},   {1, 130, 6, 3, 5},
                       {2, 70, 4, 1, 16}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], NKV = shapes[s][3], HD = shapes[s][4];
        size_t n = (size_t)B * T * NH * HD, nl = (size_t)B * NH * T, nq = (size_t)B * T * (NH + 2 * NKV) * HD;
        float *qkv = falloc(nq), *R = falloc(n), *out = falloc(n), *lse = falloc(nl), *dqkv = falloc(nq);
        fill(qkv, nq, 1.5f, 0), fill(R, n, 1, 0);
        A.B = B, A.T = T, A.NH = NH, A.NKV = NKV, A.HD = HD;
        A.qkv = todbl(qkv, nq), A.R = todbl(R, n), A.out = dalloc(n);
        double *rlse = dalloc(nl), *rdqkv = dalloc(nq);
        run_attention(g_f32, out, lse, dqkv, qkv, R, B, T, NH, NKV, HD);
        ref_attention(A.out, rlse, rdqkv, A.R, A.qkv, B, T, NH, NKV, HD);
        CHECK(err(out, A.out, n) <= TOL_FWD, "out %d: %g", s, err(out, A.out, n));
        CHECK(err(lse, rlse, nl) <= TOL_FWD, "lse %d: %g", s, err(lse, rlse, nl));
        CHECK(err(dqkv, rdqkv, nq) <= TOL_BWD, "dqkv %d: %g", s, err(dqkv, rdqkv, nq));
        CHECK_FD(attention_loss, A.qkv, nq, dqkv, "dqkv", s);
        free(qkv), free(R), free(out), free(lse), free(dqkv), free(A.qkv), free(A.R), free(A.out);
        free(rlse), free(rdqkv);
    }
}

/* ---- packed documents (data.reset_attention_mask / reset_position_ids) ----- */
/* Row r of src (width W) for documents: dst rows [0, L) = src rows [r0, r0 + L). */
static void rows_of(float *dst, const float *src, size_t r0, int L, size_t W) {
    memcpy(dst, src + r0 * W, (size_t)L * W * sizeof(float));
}

/* Attention with kstart over documents packed in two sequences (one document
 * of a single token, lengths across the 64-row tiles) gives, token for token,
 * out, lse and dqkv of each document run alone as its own sequence; so do
 * rope with per-token positions; and the embedding's output, its dwpe the sum
 * of the documents' dwpe. */
static void test_documents_packed(void) {
    enum { B = 2, T = 150, NH = 4, NKV = 2, HD = 16, ND = 5 };
    const int doc[ND][3] = {{0, 0, 50}, {0, 50, 1}, {0, 51, 99}, {1, 0, 70}, {1, 70, 80}};
    const size_t W = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD, N = (size_t)B * T;
    int32_t ks[B * T], pos[B * T];
    for (int d = 0; d < ND; d++)
        for (int t = 0; t < doc[d][2]; t++) {
            const int i = doc[d][0] * T + doc[d][1] + t;
            ks[i] = doc[d][1], pos[i] = t;
        }
    float *qkv = falloc(N * W), *dout = falloc(N * C), *out = falloc(N * C), *lse = falloc(N * NH);
    float *dqkv = falloc(N * W), *rq = falloc(T * W), *rdo = falloc(T * C), *ro = falloc(T * C);
    float *rl = falloc((size_t)T * NH), *rdq = falloc(T * W), *ry = falloc(T * W);
    fill(qkv, N * W, 1.5f, 0), fill(dout, N * C, 1, 0);
    poison(out, N * C), poison(lse, N * NH), poison(dqkv, N * W);
    g_f32->ops->attention_fwd(g_f32, out, lse, qkv, NULL, ks, -1, B, T, NH, NKV, HD);
    g_f32->ops->attention_bwd(g_f32, dqkv, NULL, dout, qkv, out, lse, NULL, ks, -1, B, T, NH, NKV,
                              HD);
    float *cs = falloc((size_t)T * HD), *y = falloc(N * W);
    lt_rope_table(cs, T, HD, 10000.0f, NULL);
    memcpy(y, qkv, N * W * sizeof(float));
    g_f32->ops->rope(g_f32, y, cs, pos, B, T, NH, NKV, HD, 0);
    double eo = 0, el = 0, eq = 0, er = 0;
    for (int d = 0; d < ND; d++) {
        const int b = doc[d][0], L = doc[d][2];
        const size_t r0 = (size_t)b * T + doc[d][1];
        rows_of(rq, qkv, r0, L, W), rows_of(rdo, dout, r0, L, C);
        run_attention(g_f32, ro, rl, rdq, rq, rdo, 1, L, NH, NKV, HD);
        rows_of(ry, qkv, r0, L, W);
        g_f32->ops->rope(g_f32, ry, cs, NULL, 1, L, NH, NKV, HD, 0);
        for (size_t i = 0; i < (size_t)L * C; i++) eo = fmax(eo, fabs(out[r0 * C + i] - ro[i]));
        for (size_t i = 0; i < (size_t)L * W; i++) {
            eq = fmax(eq, fabs(dqkv[r0 * W + i] - rdq[i]));
            er = fmax(er, fabs(y[r0 * W + i] - ry[i]));
        }
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < L; t++)
                el = fmax(el, fabs(lse[((size_t)b * NH + h) * T + doc[d][1] + t] - rl[h * L + t]));
    }
    CHECK(eo <= 1e-5 && el <= 1e-5, "packed attention out/lse vs separate: %g %g", eo, el);
    CHECK(eq <= 1e-5, "packed attention dqkv vs separate: %g", eq);
    CHECK(er == 0, "rope with positions vs separate documents: %g", er);
    /* the control: without kstart the later documents see the earlier ones */
    g_f32->ops->attention_fwd(g_f32, out, lse, qkv, NULL, NULL, -1, B, T, NH, NKV, HD);
    run_attention(g_f32, ro, rl, rdq, qkv + 51 * W, dout + 51 * C, 1, 99, NH, NKV, HD);
    CHECK(fabs(out[51 * C] - ro[0]) > 1e-3, "without kstart a later document differs");
    /* embedding: wpe[pos]; dwpe = the documents' own dwpe summed */
    enum { V = 11, E = 8 };
    int32_t tok[B * T];
    for (size_t i = 0; i < N; i++) tok[i] = (int32_t)(i * 7 % V);
    float *wte = falloc(V * E), *wpe = falloc((size_t)T * E), *eo2 = falloc(N * E);
    float *de = falloc(N * E), *dwpe = falloc((size_t)T * E), *want = falloc((size_t)T * E);
    fill(wte, V * E, 1, 0), fill(wpe, (size_t)T * E, 1, 0), fill(de, N * E, 1, 0);
    g_f32->ops->embedding_fwd(g_f32, eo2, tok, wte, wpe, pos, B, T, E);
    memset(dwpe, 0, (size_t)T * E * sizeof(float)), memset(want, 0, (size_t)T * E * sizeof(float));
    g_f32->ops->embedding_bwd(g_f32, NULL, dwpe, de, tok, pos, B, T, E);
    double ee = 0, ed = 0;
    for (size_t i = 0; i < N; i++)
        for (int c = 0; c < E; c++) {
            ee = fmax(ee, fabs(eo2[i * E + c] - (wte[tok[i] * E + c] + wpe[pos[i] * E + c])));
            want[pos[i] * E + c] += de[i * E + c];
        }
    for (size_t i = 0; i < (size_t)T * E; i++) ed = fmax(ed, fabs(dwpe[i] - want[i]));
    CHECK(ee == 0 && ed <= 1e-6, "embedding with positions: out %g, dwpe %g", ee, ed);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(rq), free(rdo), free(ro);
    free(rl), free(rdq), free(ry), free(cs), free(y), free(wte), free(wpe), free(eo2), free(de);
    free(dwpe), free(want);
}

/* Grouped K/V equals multi-head attention with each K/V head replicated for
 * its query heads: the same out and lse bitwise (same values, same order), and
 * dK/dV equal to the replicated heads' dK/dV summed over each group (in head
 * order, as the grouped backward sums); dQ bitwise. fp32 and bf16. */
static void test_attention_gqa_as_mha(void) {
    static const int shapes[][5] = {{2, 70, 4, 2, 8}, {1, 130, 6, 1, 16}, {1, 33, 4, 4, 8}};
    for (int k = 0; k < 2; k++) {
        LtBackend *be = k ? g_bf16 : g_f32;
        for (int s = 0; s < 3; s++) {
            const int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], NKV = shapes[s][3];
            const int HD = shapes[s][4], G = NH / NKV, N = B * T;
            const size_t n = (size_t)N * NH * HD, nl = (size_t)B * NH * T;
            const size_t Wg = (size_t)(NH + 2 * NKV) * HD, Wm = (size_t)3 * NH * HD;
            float *qg = falloc(N * Wg), *qm = falloc(N * Wm), *R = falloc(n);
            fill(qg, N * Wg, 1.5f, k), fill(R, n, 1, k);
            for (int t = 0; t < N; t++) /* q as is; K/V head h / G copied to head h */
                for (int h = 0; h < 3 * NH; h++) {
                    const int part = h / NH, hh = h % NH;
                    const size_t src = part == 0 ? (size_t)hh : (size_t)NH + (part - 1) * NKV + hh / G;
                    memcpy(qm + t * Wm + (size_t)h * HD, qg + t * Wg + src * HD, sizeof(float) * HD);
                }
            float *og = falloc(n), *om = falloc(n), *lg = falloc(nl), *lm = falloc(nl);
            float *dg = falloc(N * Wg), *dm = falloc(N * Wm);
            run_attention(be, og, lg, dg, qg, R, B, T, NH, NKV, HD);
            run_attention(be, om, lm, dm, qm, R, B, T, NH, NH, HD);
            CHECK(memcmp(og, om, n * 4) == 0 && memcmp(lg, lm, nl * 4) == 0, "out/lse %d %d", k, s);
            double worst = 0;
            int dq_same = 1;
            for (int t = 0; t < N; t++) {
                dq_same &= memcmp(dg + t * Wg, dm + t * Wm, sizeof(float) * NH * HD) == 0;
                for (int part = 1; part < 3; part++)
                    for (int g = 0; g < NKV; g++)
                        for (int d = 0; d < HD; d++) {
                            float sum = 0; /* the replicated heads' gradients, in head order */
                            for (int i = 0; i < G; i++)
                                sum += dm[t * Wm + ((size_t)part * NH + g * G + i) * HD + d];
                            const float got = dg[t * Wg + ((size_t)NH + (part - 1) * NKV + g) * HD + d];
                            double mag = 1e-30;
                            for (int i = 0; i < G; i++)
                                mag += fabs(dm[t * Wm + ((size_t)part * NH + g * G + i) * HD + d]);
                            const double e = fabs(got - sum) / mag;
                            worst = e > worst ? e : worst;
                        }
            }
            CHECK(dq_same, "dq %d %d", k, s);
            /* fp32: the same fp32 partials summed in the same order, bitwise; bf16:
             * the replicas were each rounded to bf16 (unit roundoff 2^-8) before
             * this sum, the grouped sum once after it */
            const double bound = k ? (G + 1) * 0x1p-8 : 0.0;
            CHECK(worst <= bound, "dK/dV vs summed replicas %d %d: %g (bound %g)", k, s, worst, bound);
            free(qg), free(qm), free(R), free(og), free(om), free(lg), free(lm), free(dg), free(dm);
        }
    }
}

/* Sliding-window attention (model.window_size): kstart = max(0, t - W) makes
 * query t attend exactly keys t - W .. t, against a float64 reference that
 * masks everything outside the band; the backward by the same reference's
 * gradients (softmax's, written out). */
static void test_attention_window(void) {
    enum { T = 70, NH = 2, NKV = 1, HD = 8, WIN = 5 };
    const size_t W = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    int32_t ks[T];
    for (int t = 0; t < T; t++) ks[t] = t > WIN ? t - WIN : 0;
    float *qkv = falloc(T * W), *dout = falloc(T * C), *out = falloc(T * C), *lse = falloc(T * NH);
    float *dqkv = falloc(T * W);
    fill(qkv, T * W, 1.5f, 0), fill(dout, T * C, 1, 0);
    g_f32->ops->attention_fwd(g_f32, out, lse, qkv, NULL, ks, WIN, 1, T, NH, NKV, HD);
    g_f32->ops->attention_bwd(g_f32, dqkv, NULL, dout, qkv, out, lse, NULL, ks, WIN, 1, T, NH, NKV,
                              HD);
    double *ref = calloc(T * W, sizeof(double));
    double eo = 0, el = 0, eg = 0;
    const double sc = 1.0 / sqrt((double)HD);
    for (int h = 0; h < NH; h++) {
        const size_t qo = (size_t)h * HD, ko = C, vo = C + HD; /* one key/value head */
        for (int t = 0; t < T; t++) {
            double p[T] = {0}, mx = -1e300, sum = 0, o[HD] = {0}, dp[T] = {0}, pdp = 0;
            const int j0 = t > WIN ? t - WIN : 0;
            for (int j = j0; j <= t; j++) {
                double s = 0;
                for (int e = 0; e < HD; e++) s += (double)qkv[t * W + qo + e] * qkv[j * W + ko + e];
                p[j] = s * sc, mx = fmax(mx, p[j]);
            }
            for (int j = j0; j <= t; j++) sum += p[j] = exp(p[j] - mx);
            for (int j = j0; j <= t; j++) {
                p[j] /= sum;
                for (int e = 0; e < HD; e++) o[e] += p[j] * qkv[j * W + vo + e];
            }
            el = fmax(el, fabs(lse[(size_t)h * T + t] - (mx + log(sum))));
            for (int e = 0; e < HD; e++) eo = fmax(eo, fabs(out[t * C + qo + e] - o[e]));
            for (int j = j0; j <= t; j++) {
                for (int e = 0; e < HD; e++) dp[j] += (double)dout[t * C + qo + e] * qkv[j * W + vo + e];
                pdp += p[j] * dp[j];
            }
            for (int j = j0; j <= t; j++) {
                const double ds = p[j] * (dp[j] - pdp) * sc;
                for (int e = 0; e < HD; e++) {
                    ref[t * W + qo + e] += ds * qkv[j * W + ko + e];
                    ref[j * W + ko + e] += ds * qkv[t * W + qo + e];
                    ref[j * W + vo + e] += p[j] * dout[t * C + qo + e];
                }
            }
        }
    }
    for (size_t i = 0; i < T * W; i++) eg = fmax(eg, fabs(dqkv[i] - ref[i]));
    CHECK(eo <= 1e-5 && el <= 1e-5 && eg <= 1e-4, "windowed attention out %g lse %g dqkv %g", eo,
          el, eg);
    free(ref);
    free(qkv), free(dout), free(out), free(lse), free(dqkv);
}

/* Internal errors (exit 1) in both directions: NH not a multiple of NKV, or
 * NKV 0; a window whose promise kstart breaks (documents inside the window,
 * or no kstart at all). */
static void test_attention_refuses(void) {
    static const int32_t docs[4] = {0, 0, 2, 2}, win1[4] = {0, 0, 1, 2};
    static const struct {
        int NH, NKV, window;
        const int32_t *ks;
    } bad[] = {{3, 2, -1, NULL}, {4, 0, -1, NULL}, {2, 4, -1, NULL},
               {2, 2, 1, docs},  {2, 2, 1, NULL},  {2, 2, 2, win1}};
    const int nbad = (int)(sizeof bad / sizeof bad[0]);
    for (int c = 0; c < 2 * nbad; c++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stderr)) _exit(3);
            float x[1024] = {0}, lse[16];
            const int NH = bad[c / 2].NH, NKV = bad[c / 2].NKV, w = bad[c / 2].window;
            const int32_t *ks = bad[c / 2].ks;
            if (c % 2)
                g_f32->ops->attention_bwd(g_f32, x, NULL, x, x, x, lse, NULL, ks, w, 1, 4, NH, NKV,
                                          4);
            else g_f32->ops->attention_fwd(g_f32, x, lse, x, NULL, ks, w, 1, 4, NH, NKV, 4);
            _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == LT_EXIT_INTERNAL, "case %d: status %d", c, st);
    }
    /* the control: the window those starts are */
    float x[1024] = {0}, lse[16];
    g_f32->ops->attention_fwd(g_f32, x, lse, x, NULL, win1, 1, 1, 4, 2, 2, 4);
    g_f32->ops->attention_bwd(g_f32, x, NULL, x, x, x, lse, NULL, win1, 1, 1, 4, 2, 2, 4);
    CHECK(lse[0] == 0.0f, "window 1 over kstart {0, 0, 1, 2} runs: lse %g", lse[0]);
}

/* Attention sinks (model.softmax_type): a learned logit per head (random, and
 * off-by-one's zeros) with grouped K/V, causal, a sliding window and packed
 * documents, against the float64 reference: out, lse (the sink counted),
 * dqkv, and d offsets accumulated (+=) onto what the buffer held; finite
 * differences of the offsets and qkv on the small case; d offsets bitwise the
 * same with 1 and 4 threads; a sink of -inf (exp 0) is plain attention. */
static struct { int B, T, NH, NKV, HD; const int32_t *ks; double *qkv, *sink, *R, *out; } AS;
static double attention_sink_loss(void) {
    ref_attention_sink(AS.out, NULL, NULL, NULL, NULL, AS.qkv, AS.sink, AS.ks, AS.B, AS.T, AS.NH,
                       AS.NKV, AS.HD);
    return dot(AS.out, AS.R, (size_t)AS.B * AS.T * AS.NH * AS.HD);
}
static void test_attention_sinks(void) {
    enum { CAUSAL, WINDOW, DOCS };
    static const struct {
        int B, T, NH, NKV, HD, zeros, mask;
    } cases[] = {{2, 9, 2, 2, 3, 0, CAUSAL},    {2, 70, 4, 2, 8, 0, WINDOW},
                 {2, 150, 4, 1, 16, 0, DOCS},   {1, 130, 6, 3, 5, 1, CAUSAL},
                 {1, 80, 2, 1, 8, 1, WINDOW}};
    LtBackend *be1 = lt_backend_cpu_create(LT_F32, 1), *be4 = lt_backend_cpu_create(LT_F32, 4);
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        const int B = cases[c].B, T = cases[c].T, NH = cases[c].NH, NKV = cases[c].NKV,
                  HD = cases[c].HD, WIN = 5;
        const size_t n = (size_t)B * T * NH * HD, nl = (size_t)B * NH * T,
                     nq = (size_t)B * T * (NH + 2 * NKV) * HD;
        int32_t *ks = NULL;
        if (cases[c].mask != CAUSAL) {
            ks = lt_malloc(sizeof(int32_t) * (size_t)B * T);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) /* documents of 37 tokens, or the window */
                    ks[b * T + t] = cases[c].mask == DOCS ? t / 37 * 37 : t > WIN ? t - WIN : 0;
        }
        const int window = cases[c].mask == WINDOW ? WIN : -1;
        float *qkv = falloc(nq), *R = falloc(n), *out = falloc(n), *lse = falloc(nl);
        float *dqkv = falloc(nq), *sink = falloc(NH), *dsink = falloc(NH), *d0 = falloc(NH);
        fill(qkv, nq, 1.5f, 0), fill(R, n, 1, 0), fill(d0, NH, 1, 0);
        if (cases[c].zeros) memset(sink, 0, sizeof(float) * NH);
        else fill(sink, NH, 2, 0);
        memcpy(dsink, d0, sizeof(float) * NH);
        poison(out, n), poison(lse, nl), poison(dqkv, nq);
        be4->ops->attention_fwd(be4, out, lse, qkv, sink, ks, window, B, T, NH, NKV, HD);
        be4->ops->attention_bwd(be4, dqkv, dsink, R, qkv, out, lse, sink, ks, window, B, T, NH,
                                NKV, HD);
        AS.B = B, AS.T = T, AS.NH = NH, AS.NKV = NKV, AS.HD = HD, AS.ks = ks;
        AS.qkv = todbl(qkv, nq), AS.sink = todbl(sink, NH), AS.R = todbl(R, n), AS.out = dalloc(n);
        double *rlse = dalloc(nl), *rdqkv = dalloc(nq), *rds = dalloc(NH);
        ref_attention_sink(AS.out, rlse, rdqkv, rds, AS.R, AS.qkv, AS.sink, ks, B, T, NH, NKV, HD);
        for (int h = 0; h < NH; h++) rds[h] += d0[h];
        CHECK(err(out, AS.out, n) <= TOL_FWD, "sinks out %d: %g", c, err(out, AS.out, n));
        CHECK(err(lse, rlse, nl) <= TOL_FWD, "sinks lse %d: %g", c, err(lse, rlse, nl));
        CHECK(err(dqkv, rdqkv, nq) <= TOL_BWD, "sinks dqkv %d: %g", c, err(dqkv, rdqkv, nq));
        CHECK(err(dsink, rds, NH) <= TOL_BWD, "sinks d offsets += %d: %g", c, err(dsink, rds, NH));
        if (c == 0) {
            for (int h = 0; h < NH; h++) dsink[h] -= d0[h];
            CHECK_FD(attention_sink_loss, AS.sink, NH, dsink, "d offsets", c);
            CHECK_FD(attention_sink_loss, AS.qkv, nq, dqkv, "dqkv with sinks", c);
        }
        /* d offsets summed in the same order whatever the thread count */
        float *one = falloc(NH);
        memcpy(dsink, d0, sizeof(float) * NH), memcpy(one, d0, sizeof(float) * NH);
        be4->ops->attention_bwd(be4, dqkv, dsink, R, qkv, out, lse, sink, ks, window, B, T, NH,
                                NKV, HD);
        be1->ops->attention_bwd(be1, dqkv, one, R, qkv, out, lse, sink, ks, window, B, T, NH,
                                NKV, HD);
        CHECK(!memcmp(one, dsink, sizeof(float) * NH), "sinks d offsets 1 vs 4 threads %d", c);
        free(one);
        free(qkv), free(R), free(out), free(lse), free(dqkv), free(sink), free(dsink), free(d0);
        free(AS.qkv), free(AS.sink), free(AS.R), free(AS.out), free(rlse), free(rdqkv), free(rds);
        free(ks);
    }
    /* a sink that never wins (-inf) leaves plain attention, bitwise */
    enum { B = 1, T = 70, NH = 2, NKV = 1, HD = 8 };
    const size_t n = (size_t)B * T * NH * HD, nq = (size_t)B * T * (NH + 2 * NKV) * HD;
    float *qkv = falloc(nq), *o1 = falloc(n), *o2 = falloc(n), *l1 = falloc(NH * T);
    float *l2 = falloc(NH * T), never[NH] = {-INFINITY, -INFINITY};
    fill(qkv, nq, 1.5f, 0);
    g_f32->ops->attention_fwd(g_f32, o1, l1, qkv, NULL, NULL, -1, B, T, NH, NKV, HD);
    g_f32->ops->attention_fwd(g_f32, o2, l2, qkv, never, NULL, -1, B, T, NH, NKV, HD);
    CHECK(!memcmp(o1, o2, n * sizeof(float)) && !memcmp(l1, l2, NH * T * sizeof(float)),
          "a -inf sink is plain attention");
    free(qkv), free(o1), free(o2), free(l1), free(l2);
    lt_backend_destroy(be1), lt_backend_destroy(be4);
}

/* ---- xent ------------------------------------------------------------------- */
static struct { int N, V, Vp; int32_t *tg; double *x, dscale, *loss; } X;
static double xent_loss(void) {
    ref_xent(X.loss, NULL, X.x, X.tg, X.N, X.V, X.Vp, 0);
    double s = 0;
    for (int i = 0; i < X.N; i++) s += X.dscale * X.loss[i];
    return s;
}
static void test_xent(void) {
    int shapes[][3] = {{1, 5, 8}, {7, 33, 33}, {9, 1000, 1024}}; /* N V Vp */
    for (int s = 0; s < 3; s++) {
        int N = shapes[s][0], V = shapes[s][1], Vp = shapes[s][2];
        size_t n = (size_t)N * Vp;
        float *lg = falloc(n), *g = falloc(n), *loss = falloc(N);
        int32_t *tg = lt_malloc(sizeof(int32_t) * N);
        fill(lg, n, 3, 0);
        for (int i = 0; i < N; i++) {
            tg[i] = (int32_t)(lt_uniform_at(5, s, i) * V);
            for (int j = V; j < Vp; j++) lg[(size_t)i * Vp + j] = 80.0f; /* would dominate if used */
        }
        X.N = N, X.V = V, X.Vp = Vp, X.tg = tg, X.x = todbl(lg, n), X.dscale = 1.0 / N, X.loss = dalloc(N);
        double *rloss = dalloc(N), *rg = dalloc(n);
        ref_xent(rloss, rg, X.x, tg, N, V, Vp, X.dscale);
        memcpy(g, lg, n * 4), poison(loss, N);
        g_f32->ops->xent_fwd_bwd(g_f32, loss, g, tg, N, V, Vp, 0.0f);
        CHECK(err(loss, rloss, N) <= TOL_FWD, "losses (dscale 0) %d", s);
        CHECK(memcmp(g, lg, n * 4) == 0, "dscale 0 must leave logits alone %d", s);
        poison(loss, N);
        g_f32->ops->xent_fwd_bwd(g_f32, loss, g, tg, N, V, Vp, (float)X.dscale);
        CHECK(err(loss, rloss, N) <= TOL_FWD, "losses %d: %g", s, err(loss, rloss, N));
        CHECK(err(g, rg, n) <= TOL_BWD, "in-place gradient %d: %g", s, err(g, rg, n));
        int padz = 1;
        double rowsum = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < Vp; j++) {
                if (j >= V) padz &= g[(size_t)i * Vp + j] == 0.0f;
                else rowsum += g[(size_t)i * Vp + j];
            }
        CHECK(padz, "padded columns must get zero gradient %d", s);
        CHECK(fabs(rowsum) < 1e-5, "gradient rows sum to 0 (no probability in padding) %d", s);
        CHECK_FD(xent_loss, X.x, n, g, "xent", s);
        free(lg), free(g), free(loss), free(tg), free(X.x), free(X.loss), free(rloss), free(rg);
    }
    /* an out-of-range target is an internal error (exit 1), not a crash */
    for (int bad = 0; bad < 2; bad++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stderr)) _exit(3);
            float lg[2 * 6] = {0}, loss[2];
            int32_t tg[2] = {1, bad ? -1 : 5}; /* 5 = V: a padded column */
            g_f32->ops->xent_fwd_bwd(g_f32, loss, lg, tg, 2, 5, 6, 1.0f);
            _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == LT_EXIT_INTERNAL, "bad target %d: status %d", bad, st);
    }
}

/* Vocab-parallel cross-entropy, simulated on one process: the full logits
 * (N, Vp) are split into TP shards of Vs = Vp/TP columns (Vvalid = clamp(V -
 * r*Vs, 0, Vs)), xent_tp_stats runs per shard, the statistics are combined on
 * the host exactly as the all-reduces will (max; fp32 sums in rank order), then
 * xent_tp_finish runs per shard. loss (N) and grad (N, Vp, the shards put back
 * side by side) are the results; per-shard invariants are checked on the way. */
static void xent_tp_sim(LtBackend *be, int TP, int N, int V, int Vp, const float *lg,
                        const int32_t *tg, float dscale, float *loss, float *grad) {
    const int Vs = Vp / TP;
    float *sh = falloc((size_t)N * Vs), *keep = falloc((size_t)N * Vs), *l = falloc(N);
    float *rm = falloc(N), *rs = falloc(N), *rt = falloc(N), *gm = falloc(N), *gs = falloc(N), *gt = falloc(N);
    int32_t *lt = lt_malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) gm[i] = -INFINITY, gs[i] = 0, gt[i] = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int r = 0; r < TP; r++) {
            const int v0 = r * Vs, vv = V - v0 < 0 ? 0 : V - v0 > Vs ? Vs : V - v0;
            for (int i = 0; i < N; i++) {
                memcpy(sh + (size_t)i * Vs, lg + (size_t)i * Vp + v0, Vs * 4);
                lt[i] = tg[i] - v0;
            }
            memcpy(keep, sh, (size_t)N * Vs * 4);
            poison(rm, N), poison(rs, N), poison(rt, N), poison(l, N);
            if (pass == 0) {
                be->ops->xent_tp_stats(be, rm, NULL, NULL, sh, NULL, NULL, N, vv, Vs);
                for (int i = 0; i < N; i++) {
                    CHECK(vv > 0 || rm[i] == -INFINITY, "TP=%d rank %d (Vvalid 0): max %g", TP, r, rm[i]);
                    gm[i] = rm[i] > gm[i] ? rm[i] : gm[i];
                }
            } else if (pass == 1) {
                be->ops->xent_tp_stats(be, NULL, rs, rt, sh, lt, gm, N, vv, Vs);
                for (int i = 0; i < N; i++) {
                    const int own = lt[i] >= 0 && lt[i] < vv;
                    CHECK(own ? rt[i] == sh[(size_t)i * Vs + lt[i]] : rt[i] == 0.0f,
                          "TP=%d rank %d row %d: target logit %g (owned %d)", TP, r, i, rt[i], own);
                    CHECK(vv > 0 || rs[i] == 0.0f, "TP=%d rank %d (Vvalid 0): sumexp %g", TP, r, rs[i]);
                    gs[i] += rs[i], gt[i] += rt[i];
                }
            } else {
                be->ops->xent_tp_finish(be, l, sh, lt, gm, gs, gt, N, vv, Vs, dscale);
                for (int i = 0; i < N; i++) {
                    if (r == 0) loss[i] = l[i];
                    else CHECK(memcmp(&l[i], &loss[i], 4) == 0, "TP=%d: loss row %d differs on rank %d", TP, i, r);
                    memcpy(grad + (size_t)i * Vp + v0, sh + (size_t)i * Vs, Vs * 4);
                }
                if (dscale == 0.0f) CHECK(memcmp(sh, keep, (size_t)N * Vs * 4) == 0, "dscale 0 leaves shard %d alone", r);
            }
            CHECK(pass == 2 || memcmp(sh, keep, (size_t)N * Vs * 4) == 0, "stats must not modify logits");
        }
    free(sh), free(keep), free(l), free(rm), free(rs), free(rt), free(gm), free(gs), free(gt), free(lt);
}

static void test_xent_tp(void) {
    int shapes[][3] = {{5, 5, 8}, {9, 45, 64}, {7, 1000, 1024}, {6, 1, 4}}; /* N V Vp */
    int saw_far = 0, saw_empty = 0;
    for (int s = 0; s < 4; s++) {
        const int N = shapes[s][0], V = shapes[s][1], Vp = shapes[s][2];
        const size_t n = (size_t)N * Vp;
        int32_t *tg = lt_malloc(sizeof(int32_t) * N);
        for (int i = 0; i < N; i++) tg[i] = (int32_t)(lt_uniform_at(6, s, i) * V);
        tg[0] = 0, tg[1] = V - 1, tg[2] = V / 2;
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? g_bf16 : g_f32;
            float *lg = falloc(n), *full = falloc(n), *grad = falloc(n);
            float *lfull = falloc(N), *lfull0 = falloc(N), *loss = falloc(N);
            fill(lg, n, 3, k);
            for (int i = 0; i < N; i++)
                for (int j = V; j < Vp; j++) lg[(size_t)i * Vp + j] = 80.0f; /* would dominate if used */
            double *rloss = dalloc(N), *rg = dalloc(n), *xd = todbl(lg, n);
            ref_xent(rloss, rg, xd, tg, N, V, Vp, 1.0 / N);
            memcpy(full, lg, n * 4);
            be->ops->xent_fwd_bwd(be, lfull0, full, tg, N, V, Vp, 0.0f);
            be->ops->xent_fwd_bwd(be, lfull, full, tg, N, V, Vp, 1.0f / N);
            for (int TP = 1; TP <= 4; TP *= 2) {
                const int Vs = Vp / TP;
                int far = 0, empty;
                for (int i = 0; i < N; i++) far |= tg[i] >= Vs;
                empty = V <= (TP - 1) * Vs;
                saw_far |= far && TP > 1, saw_empty |= empty;
                /* loss only: logits untouched */
                poison(loss, N), poison(grad, n);
                xent_tp_sim(be, TP, N, V, Vp, lg, tg, 0.0f, loss, grad);
                CHECK(memcmp(grad, lg, n * 4) == 0, "dscale 0: logits untouched, shape %d TP=%d", s, TP);
                poison(loss, N), poison(grad, n);
                xent_tp_sim(be, TP, N, V, Vp, lg, tg, 1.0f / N, loss, grad);
                int padz = 1;
                for (int i = 0; i < N; i++)
                    for (int j = V; j < Vp; j++) padz &= grad[(size_t)i * Vp + j] == 0.0f;
                CHECK(padz, "padded columns get zero gradient, shape %d TP=%d", s, TP);
                if (!k) {
                    double *d0 = todbl(lfull0, N), *d1 = todbl(lfull, N), *dg = todbl(full, n);
                    double el = err(loss, d1, N), el0 = err(loss, d0, N), eg = err(grad, dg, n);
                    CHECK(el <= 1e-6 && el0 <= 1e-6, "fp32 shape %d TP=%d (far %d empty %d): losses vs xent_fwd_bwd %g %g",
                          s, TP, far, empty, el, el0);
                    CHECK(eg <= 1e-6, "fp32 shape %d TP=%d (far %d empty %d): gradient vs xent_fwd_bwd %g", s, TP, far, empty, eg);
                    CHECK(err(loss, rloss, N) <= TOL_FWD, "fp32 shape %d TP=%d: losses vs float64", s, TP);
                    CHECK(err(grad, rg, n) <= TOL_BWD, "fp32 shape %d TP=%d: gradient vs float64 %g", s, TP, err(grad, rg, n));
                    free(d0), free(d1), free(dg);
                } else {
                    CHECK(normerr(loss, lfull, N) <= 1e-5, "bf16 shape %d TP=%d: losses (fp32 math)", s, TP);
                    CHECK(all_bf16(grad, n), "bf16 shape %d TP=%d: gradient not bf16-representable", s, TP);
                    CHECK(normerr(grad, full, n) <= TOL_BF16, "bf16 shape %d TP=%d: gradient vs xent_fwd_bwd %g", s, TP,
                          normerr(grad, full, n));
                }
            }
            free(lg), free(full), free(grad), free(lfull), free(lfull0), free(loss), free(rloss), free(rg), free(xd);
        }
        free(tg);
    }
    CHECK(saw_far && saw_empty, "coverage: targets beyond the first shard %d, a shard with Vvalid 0 %d",
          saw_far, saw_empty);
    /* bad shard sizes are an internal error (exit 1) */
    for (int bad = 0; bad < 3; bad++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stderr)) _exit(3);
            float lg[2 * 4] = {0}, st[2], gm[2] = {0, 0}, gs[2] = {1, 1}, gt[2] = {0, 0};
            int32_t tg[2] = {0, 1};
            if (bad == 0) g_f32->ops->xent_tp_stats(g_f32, st, NULL, NULL, lg, NULL, NULL, 2, 5, 4);
            else if (bad == 1) g_f32->ops->xent_tp_stats(g_f32, NULL, st, st, lg, tg, gm, 2, -1, 4);
            else g_f32->ops->xent_tp_finish(g_f32, st, lg, tg, gm, gs, gt, 2, 5, 4, 1.0f);
            _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == LT_EXIT_INTERNAL, "bad Vvalid case %d: status %d", bad, st);
    }
}

/* ---- adamw ------------------------------------------------------------------ */
static void test_adamw(void) {
    const size_t n = 1001;
    for (int c = 0; c < 4; c++) {
        LtBackend *be = c & 1 ? g_bf16 : g_f32;
        float wd = c & 2 ? 0.1f : 0.0f, gs = c & 2 ? 0.5f : 1.0f;
        float *param = falloc(n), *master = falloc(n), *grad = falloc(n), *m = falloc(n), *v = falloc(n);
        fill(master, n, 1, 0);
        memset(m, 0, n * 4), memset(v, 0, n * 4);
        double *rw = todbl(master, n), *w0 = todbl(master, n), *rm = dalloc(n), *rv = dalloc(n);
        LtAdamArgs a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = wd, .grad_scale = gs};
        for (int t = 1; t <= 5; t++) {
            fill(grad, n, t == 3 ? 1e-3f : 1.0f, 0);
            a.bc1 = 1.0f - powf(a.beta1, (float)t), a.bc2 = 1.0f - powf(a.beta2, (float)t);
            poison(param, n);
            be->ops->adamw(be, param, master, grad, m, v, n, &a);
            for (size_t i = 0; i < n; i++) {
                double g = (double)grad[i] * gs;
                rm[i] = a.beta1 * rm[i] + (1 - (double)a.beta1) * g;
                rv[i] = a.beta2 * rv[i] + (1 - (double)a.beta2) * g * g;
                double mh = rm[i] / a.bc1, vh = rv[i] / a.bc2;
                rw[i] -= a.lr * (mh / (sqrt(vh) + a.eps) + wd * rw[i]);
            }
        }
        CHECK(err(master, rw, n) <= TOL_FWD, "master case %d: %g", c, err(master, rw, n));
        CHECK(err(m, rm, n) <= TOL_FWD && err(v, rv, n) <= TOL_FWD, "moments case %d", c);
        int ok = 1;
        for (size_t i = 0; i < n; i++) ok &= param[i] == (c & 1 ? lt_bf16_round(master[i]) : master[i]);
        CHECK(ok, "param = master in compute dtype, case %d", c);
        /* the total update itself (~5e-2), relative; master is stored in fp32,
         * rounded each step by up to 6e-8, hence the looser bound */
        for (size_t i = 0; i < n; i++) rw[i] -= w0[i], master[i] -= (float)w0[i];
        CHECK(err(master, rw, n) <= 2e-4, "master update case %d: %g", c, err(master, rw, n));
        free(param), free(master), free(grad), free(m), free(v), free(rw), free(w0), free(rm), free(rv);
    }
}

/* ---- RMSNorm ---------------------------------------------------------------- */
static void ref_rmsnorm(double *resid, double *out, double *rstd, const double *a, const double *b,
                        const double *w, double eps, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double *x = a + (size_t)i * C;
        if (b) {
            for (int c = 0; c < C; c++) resid[i * C + c] = a[i * C + c] + b[i * C + c];
            x = resid + (size_t)i * C;
        }
        double ms = 0;
        for (int c = 0; c < C; c++) ms += x[c] * x[c] / C;
        double rs = 1 / sqrt(ms + eps);
        if (rstd) rstd[i] = rs;
        for (int c = 0; c < C; c++) out[i * C + c] = x[c] * rs * w[c];
    }
}
/* dx (overwritten) and dw (+=) of sum(out * dout) */
static void ref_rmsnorm_bwd(double *dx, double *dw, const double *dout, const double *x,
                            const double *w, double eps, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double *xi = x + (size_t)i * C, *d = dout + (size_t)i * C;
        double ms = 0, sgx = 0;
        for (int c = 0; c < C; c++) ms += xi[c] * xi[c] / C;
        double rs = 1 / sqrt(ms + eps);
        for (int c = 0; c < C; c++) sgx += d[c] * w[c] * xi[c] * rs / C;
        for (int c = 0; c < C; c++) {
            dx[i * C + c] = rs * (d[c] * w[c] - xi[c] * rs * sgx);
            dw[c] += d[c] * xi[c] * rs;
        }
    }
}
static struct { int N, C, resid; double eps, *a, *b, *w, *R, *res, *out; } RN;
static double rmsnorm_loss(void) {
    ref_rmsnorm(RN.res, RN.out, NULL, RN.a, RN.resid ? RN.b : NULL, RN.w, RN.eps, RN.N, RN.C);
    return dot(RN.out, RN.R, (size_t)RN.N * RN.C);
}
/* fp32 against the float64 reference (accumulating backward) and finite differences,
 * with and without the residual (resid_out NULL then: never written); bf16 against fp32
 * on the same bf16 inputs; resid_out bitwise equal to add_act in both dtypes; eps alone
 * sets rstd of an all-zero row. */
static void test_rmsnorm(void) {
    int shapes[][2] = {{7, 12}, {5, 33}, {33, 64}};
    for (int s = 0; s < 6; s++) {
        int N = shapes[s / 2][0], C = shapes[s / 2][1], resid = s % 2;
        const float eps = s < 2 ? 1e-2f : 1e-5f; /* large: eps matters to the gradient too */
        size_t n = (size_t)N * C;
        float *a = falloc(n), *b = falloc(n), *w = falloc(C), *R = falloc(n), *res = falloc(n);
        float *out = falloc(n), *rstd = falloc(N), *dinp = falloc(n), *dw = falloc(C);
        fill(a, n, 1, 0), fill(b, n, 0.5f, 0), fill(w, C, 0.5f, 0), fill(R, n, 1, 0);
        for (int c = 0; c < C; c++) w[c] += 1.0f;
        fill(dinp, n, 1, 0), fill(dw, C, 1, 0);
        RN.N = N, RN.C = C, RN.resid = resid, RN.eps = eps, RN.a = todbl(a, n), RN.b = todbl(b, n);
        RN.w = todbl(w, C), RN.R = todbl(R, n), RN.res = dalloc(n), RN.out = dalloc(n);
        double *rrstd = dalloc(N), *rdx = dalloc(n), *rdw = todbl(dw, C), *rdinp = todbl(dinp, n);
        poison(res, n), poison(out, n), poison(rstd, N);
        g_f32->ops->rmsnorm_fwd(g_f32, resid ? res : NULL, out, rstd, a, resid ? b : NULL, w, eps,
                                N, C);
        ref_rmsnorm(RN.res, RN.out, rrstd, RN.a, resid ? RN.b : NULL, RN.w, eps, N, C);
        CHECK(err(out, RN.out, n) <= TOL_FWD, "out case %d: %g", s, err(out, RN.out, n));
        CHECK(err(rstd, rrstd, N) <= TOL_FWD, "rstd case %d: %g", s, err(rstd, rrstd, N));
        if (resid) CHECK(err(res, RN.res, n) <= TOL_FWD, "resid_out case %d", s);
        const float *x = resid ? res : a;
        g_f32->ops->rmsnorm_bwd(g_f32, dinp, dw, R, x, w, rstd, N, C);
        ref_rmsnorm_bwd(rdx, rdw, RN.R, resid ? RN.res : RN.a, RN.w, eps, N, C);
        for (size_t i = 0; i < n; i++) rdinp[i] += rdx[i];
        CHECK(err(dinp, rdinp, n) <= TOL_BWD, "dinp (+=) case %d: %g", s, err(dinp, rdinp, n));
        CHECK(err(dw, rdw, C) <= TOL_BWD, "dw (+=) case %d: %g", s, err(dw, rdw, C));
        memset(dinp, 0, n * 4), memset(dw, 0, C * 4);
        g_f32->ops->rmsnorm_bwd(g_f32, dinp, dw, R, x, w, rstd, N, C);
        CHECK_FD(rmsnorm_loss, RN.a, n, dinp, "da", s);
        if (resid) CHECK_FD(rmsnorm_loss, RN.b, n, dinp, "db(resid)", s);
        CHECK_FD(rmsnorm_loss, RN.w, C, dw, "dw", s);
        /* bf16: the same bf16 inputs through both dtypes; resid_out = add_act bitwise */
        for (size_t i = 0; i < n; i++) a[i] = lt_bf16_round(a[i]), b[i] = lt_bf16_round(b[i]);
        for (size_t i = 0; i < n; i++) R[i] = lt_bf16_round(R[i]);
        for (int c = 0; c < C; c++) w[c] = lt_bf16_round(w[c]);
        float *o[2], *ro[2], *di[2], *gw[2], *sum = falloc(n), *st = falloc(N);
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? g_bf16 : g_f32;
            o[k] = falloc(n), ro[k] = falloc(n), di[k] = falloc(n), gw[k] = lt_calloc(C * 4);
            poison(o[k], n), poison(ro[k], n), poison(sum, n);
            be->ops->rmsnorm_fwd(be, ro[k], o[k], st, a, b, w, eps, N, C);
            be->ops->add_act(be, sum, a, b, n);
            CHECK(memcmp(sum, ro[k], n * 4) == 0, "%s resid_out = add_act bitwise, case %d",
                  k ? "bf16" : "fp32", s);
            memset(di[k], 0, n * 4);
            be->ops->rmsnorm_bwd(be, di[k], gw[k], R, ro[k], w, st, N, C);
        }
        CHECK(all_bf16(o[1], n) && all_bf16(ro[1], n) && all_bf16(di[1], n),
              "bf16 outputs representable, case %d", s);
        CHECK(normerr(o[1], o[0], n) <= TOL_BF16, "bf16 out case %d: %g", s, normerr(o[1], o[0], n));
        CHECK(normerr(di[1], di[0], n) <= TOL_BF16, "bf16 dinp case %d: %g", s,
              normerr(di[1], di[0], n));
        CHECK(normerr(gw[1], gw[0], C) <= TOL_BF16, "bf16 dw case %d: %g", s,
              normerr(gw[1], gw[0], C));
        for (int k = 0; k < 2; k++) free(o[k]), free(ro[k]), free(di[k]), free(gw[k]);
        free(sum), free(st);
        free(a), free(b), free(w), free(R), free(res), free(out), free(rstd), free(dinp), free(dw);
        free(rrstd), free(rdx), free(rdw), free(rdinp);
        free(RN.a), free(RN.b), free(RN.w), free(RN.R), free(RN.res), free(RN.out);
    }
    /* an all-zero row: rstd = 1 / sqrt(eps) exactly as eps sets it, out = 0 */
    float z[2 * 8] = {0}, wz[8], oz[16], rz[2];
    for (int c = 0; c < 8; c++) wz[c] = 1.0f, z[8 + c] = (float)(c + 1);
    g_f32->ops->rmsnorm_fwd(g_f32, NULL, oz, rz, z, NULL, wz, 0.25f, 2, 8);
    CHECK(rz[0] == 2.0f && oz[0] == 0.0f && oz[7] == 0.0f, "zero row: rstd %g (want 2)", rz[0]);
    CHECK(fabs(rz[1] - 1 / sqrt(204.0 / 8 + 0.25)) < 1e-7, "row 1..8: rstd %g", rz[1]);
}

/* ---- SwiGLU and its LtGlu variants ------------------------------------------- */
/* act(x) = x sigmoid(a x): silu a = 1, quick_gelu a = 1.702 */
static double ref_act(double x, double a) { return x / (1 + exp(-a * x)); }
static double ref_act_grad(double x, double a) {
    double s = 1 / (1 + exp(-a * x));
    return s + a * x * s * (1 - s);
}
static struct { int N, F; double *gu, *R; LtGlu glu; } SW;
/* What LtGlu's activation makes of one gate and up in float64 (glu.clamp 0:
 * none), and (when dg, du) its derivatives times d: the clamps pass a gradient
 * only strictly inside their bounds. */
static double ref_glu(double g, double u, double d, double *dg, double *du) {
    const double a = SW.glu.quick ? 1.702 : 1.0, c = SW.glu.clamp > 0 ? SW.glu.clamp : INFINITY;
    const double gc = g > c ? c : g, uc = u > c ? c : u < -c ? -c : u, lin = uc + SW.glu.offset;
    if (dg) *dg = g < c ? d * lin * ref_act_grad(gc, a) : 0;
    if (du) *du = u > -c && u < c ? d * ref_act(gc, a) : 0;
    return ref_act(gc, a) * lin;
}
static double swiglu_loss(void) {
    double l = 0;
    for (int i = 0; i < SW.N; i++)
        for (int f = 0; f < SW.F; f++) {
            const double *g = SW.gu + (size_t)i * 2 * SW.F;
            l += ref_glu(g[f], g[SW.F + f], 0, NULL, NULL) * SW.R[(size_t)i * SW.F + f];
        }
    return l;
}
/* Each activation: plain SwiGLU (NULL), quick_gelu, an offset, clamps that the
 * inputs (std 2) cross on both sides, and gpt-oss's own (quick_gelu, offset 1,
 * clamp 7, reached by the gate tails of case 0). fp32 against float64 (tails
 * of the gate included) and finite differences; bf16 against fp32 on the same
 * inputs; every output element written (poisoned first). */
static void test_swiglu(void) {
    static const LtGlu glus[] = {{0, 0, 0},    {1, 0, 0},    {0, 1, 0},
                                 {0, 0, 1.5f}, {1, 1, 1.5f}, {1, 1, 7}};
    int shapes[][2] = {{7, 13}, {3, 64}, {40, 5}};
    for (int v = 0; v < 6; v++)
        for (int s = 0; s < 3; s++) {
            int N = shapes[s][0], F = shapes[s][1], cas = 10 * v + s;
            size_t n = (size_t)N * F;
            const LtGlu *glu = v ? &glus[v] : NULL;
            float *gu = falloc(2 * n), *R = falloc(n), *out = falloc(n), *dgu = falloc(2 * n);
            fill(gu, 2 * n, 2, 0), fill(R, n, 1, 0);
            if (s == 0) gu[0] = -40, gu[1] = 40, gu[2] = 0, gu[3] = -100; /* gate tails */
            if (s == 0) gu[F + 1] = 9, gu[F + 2] = -9;                     /* up past 7 */
            SW.N = N, SW.F = F, SW.gu = todbl(gu, 2 * n), SW.R = todbl(R, n), SW.glu = glus[v];
            double *ry = dalloc(n), *rdgu = dalloc(2 * n);
            for (int i = 0; i < N; i++)
                for (int f = 0; f < F; f++) {
                    const double *g = SW.gu + (size_t)i * 2 * F;
                    ry[(size_t)i * F + f] =
                        ref_glu(g[f], g[F + f], SW.R[(size_t)i * F + f],
                                &rdgu[(size_t)i * 2 * F + f], &rdgu[(size_t)i * 2 * F + F + f]);
                }
            poison(out, n), poison(dgu, 2 * n);
            g_f32->ops->swiglu_fwd(g_f32, out, gu, N, F, glu);
            g_f32->ops->swiglu_bwd(g_f32, dgu, gu, R, N, F, glu);
            CHECK(err(out, ry, n) <= TOL_FWD, "fwd case %d: %g", cas, err(out, ry, n));
            CHECK(err(dgu, rdgu, 2 * n) <= TOL_BWD, "bwd case %d: %g", cas,
                  err(dgu, rdgu, 2 * n));
            if (s == 0 && glus[v].offset == 0)
                CHECK(fabsf(out[3]) < 1e-30f && fabsf(dgu[3]) < 1e-30f, "gate -100: %g %g",
                      out[3], dgu[3]);
            CHECK_FD(swiglu_loss, SW.gu, 2 * n, dgu, "dgu", cas);
            for (size_t i = 0; i < 2 * n; i++) gu[i] = lt_bf16_round(gu[i]);
            for (size_t i = 0; i < n; i++) R[i] = lt_bf16_round(R[i]);
            float *o[2], *d[2];
            for (int k = 0; k < 2; k++) {
                LtBackend *be = k ? g_bf16 : g_f32;
                o[k] = falloc(n), d[k] = falloc(2 * n);
                poison(o[k], n), poison(d[k], 2 * n);
                be->ops->swiglu_fwd(be, o[k], gu, N, F, glu);
                be->ops->swiglu_bwd(be, d[k], gu, R, N, F, glu);
            }
            CHECK(all_bf16(o[1], n) && all_bf16(d[1], 2 * n), "bf16 outputs representable, case %d",
                  cas);
            CHECK(normerr(o[1], o[0], n) <= TOL_BF16, "bf16 fwd case %d", cas);
            CHECK(normerr(d[1], d[0], 2 * n) <= TOL_BF16, "bf16 bwd case %d", cas);
            for (int k = 0; k < 2; k++) free(o[k]), free(d[k]);
            free(gu), free(R), free(out), free(dgu), free(SW.gu), free(SW.R), free(ry), free(rdgu);
        }
}

/* The clamps at their bounds, gpt-oss's activation (clamp 7, offset 1) on one
 * row gate | up: a gate at 7 or past it is read as 7 and passes no gradient, one
 * just below passes it; an up at +-7 or past passes none, one inside passes it;
 * a NaN gate stays NaN (the loss must see it). An all-zero LtGlu is SwiGLU bit
 * for bit. */
static void test_glu_clamp_bounds(void) {
    enum { F = 6 };
    const LtGlu glu = {1, 1, 7};
    const float gate[F] = {7, 8, 6.99f, 1, 1, NAN}, up[F] = {0.5f, 0.5f, 0.5f, 7, -7, 6.99f};
    float gu[2 * F], out[F], dgu[2 * F], ones[F];
    for (int f = 0; f < F; f++) gu[f] = gate[f], gu[F + f] = up[f], ones[f] = 1;
    g_f32->ops->swiglu_fwd(g_f32, out, gu, 1, F, &glu);
    g_f32->ops->swiglu_bwd(g_f32, dgu, gu, ones, 1, F, &glu);
    const double q7 = 7 / (1 + exp(-1.702 * 7)); /* quick_gelu(7) */
    CHECK(fabs(out[0] - q7 * 1.5) < 1e-5 && out[1] == out[0], "gate 7, 8: %g %g (want %g)",
          out[0], out[1], q7 * 1.5);
    CHECK(dgu[0] == 0 && dgu[1] == 0 && dgu[2] > 0, "dgate at 7, past, below: %g %g %g", dgu[0],
          dgu[1], dgu[2]);
    CHECK(dgu[F + 3] == 0 && dgu[F + 4] == 0 && dgu[F + 0] > 0, "dup at 7, -7, inside: %g %g %g",
          dgu[F + 3], dgu[F + 4], dgu[F + 0]);
    const double q1 = 1 / (1 + exp(-1.702)); /* quick_gelu(1) */
    CHECK(fabs(out[3] - q1 * 8) < 1e-5 && fabs(out[4] + q1 * 6) < 1e-5, "up 7, -7: %g %g",
          out[3], out[4]);
    CHECK(isnan(out[5]) && isnan(dgu[5]), "NaN gate: %g %g", out[5], dgu[5]);
    float plain[2][F], dplain[2][2 * F];
    const LtGlu zero = {0, 0, 0};
    gu[5] = 2;
    g_f32->ops->swiglu_fwd(g_f32, plain[0], gu, 1, F, NULL);
    g_f32->ops->swiglu_fwd(g_f32, plain[1], gu, 1, F, &zero);
    g_f32->ops->swiglu_bwd(g_f32, dplain[0], gu, ones, 1, F, NULL);
    g_f32->ops->swiglu_bwd(g_f32, dplain[1], gu, ones, 1, F, &zero);
    CHECK(memcmp(plain[0], plain[1], sizeof plain[0]) == 0 &&
              memcmp(dplain[0], dplain[1], sizeof dplain[0]) == 0,
          "an all-zero LtGlu is SwiGLU");
}

/* ---- RoPE ------------------------------------------------------------------- */
/* out = qkv (B, T, NH + 2 NKV, HD) with its q and k heads rotated by the angles
 * t * inv_freq[j] (t = token % T), taken in double here; sign -1: the inverse. */
static void ref_rope(double *out, const double *qkv, const double *inv_freq, int B, int T, int NH,
                     int NKV, int HD, double sign) {
    const int H2 = HD / 2, NA = NH + 2 * NKV;
    memcpy(out, qkv, sizeof(double) * (size_t)B * T * NA * HD);
    for (int i = 0; i < B * T; i++)
        for (int h = 0; h < NH + NKV; h++)
            for (int j = 0; j < H2; j++) {
                const double a = (i % T) * inv_freq[j], c = cos(a), s = sign * sin(a);
                const size_t p = ((size_t)i * NA + h) * HD + j;
                out[p] = qkv[p] * c - qkv[p + H2] * s;
                out[p + H2] = qkv[p + H2] * c + qkv[p] * s;
            }
}
static struct { int B, T, NH, NKV, HD; double *x, *R, *out, *f; } RP;
static double rope_loss(void) {
    ref_rope(RP.out, RP.x, RP.f, RP.B, RP.T, RP.NH, RP.NKV, RP.HD, 1);
    return dot(RP.out, RP.R, (size_t)RP.B * RP.T * (RP.NH + 2 * RP.NKV) * RP.HD);
}
/* Forward and inverse against float64 (the table from lt_rope_table, the reference's
 * angles from lt_rope_inv_freq in double), v heads untouched, the same positions in
 * every batch element, grouped K/V (NKV < NH), inverse(rope(x)) = x within rounding,
 * the adjoint identity <rope(x), y> = <x, rope_inverse(y)> and finite differences of
 * <rope(x), R> against rope_inverse(R) (the backward); bf16 against fp32. */
static void test_rope(void) {
    int shapes[][5] = {{2, 5, 4, 2, 8}, {3, 7, 3, 1, 6}, {1, 4, 2, 2, 2}, {2, 33, 4, 4, 64}};
    const LtRopeScaling l3 = {LT_ROPE_SCALING_LLAMA3, 8, 1, 4, 16, 0, 0, 0, 0};
    for (int s = 0; s < 4; s++) {
        const int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], NKV = shapes[s][3];
        const int HD = shapes[s][4], NA = NH + 2 * NKV, H2 = HD / 2;
        const size_t n = (size_t)B * T * NA * HD, tok = (size_t)NA * HD;
        const LtRopeScaling *sc = s == 3 ? &l3 : NULL;
        const double base = s == 3 ? 500000.0 : 10000.0;
        float *cs = falloc((size_t)T * HD), *x = falloc(n), *y = falloc(n), *R = falloc(n);
        float *x2 = falloc(n), *gx = falloc(n);
        lt_rope_table(cs, T, HD, base, sc);
        fill(x, n, 1, 0), fill(R, n, 1, 0);
        RP.B = B, RP.T = T, RP.NH = NH, RP.NKV = NKV, RP.HD = HD, RP.x = todbl(x, n);
        RP.R = todbl(R, n), RP.out = dalloc(n), RP.f = dalloc(H2);
        lt_rope_inv_freq(RP.f, HD, base, sc);
        double *rinv = dalloc(n);
        memcpy(y, x, n * 4);
        g_f32->ops->rope(g_f32, y, cs, NULL, B, T, NH, NKV, HD, 0);
        rope_loss();
        CHECK(err(y, RP.out, n) <= TOL_FWD, "fwd case %d: %g", s, err(y, RP.out, n));
        int vsame = 1;
        for (int i = 0; i < B * T; i++)
            vsame &= !memcmp(y + i * tok + (size_t)(NH + NKV) * HD, x + i * tok + (size_t)(NH + NKV) * HD,
                             (size_t)NKV * HD * 4);
        CHECK(vsame, "v heads changed, case %d", s);
        memcpy(x2, y, n * 4);
        g_f32->ops->rope(g_f32, x2, cs, NULL, B, T, NH, NKV, HD, 1);
        ref_rope(rinv, RP.x, RP.f, B, T, NH, NKV, HD, -1);
        memcpy(gx, x, n * 4);
        g_f32->ops->rope(g_f32, gx, cs, NULL, B, T, NH, NKV, HD, 1);
        CHECK(err(gx, rinv, n) <= TOL_FWD, "inverse case %d: %g", s, err(gx, rinv, n));
        CHECK(normerr(x2, x, n) <= 1e-6, "inverse(rope(x)) case %d: %g", s, normerr(x2, x, n));
        /* <rope(x), R> = <x, rope_inverse(R)> */
        memcpy(gx, R, n * 4);
        g_f32->ops->rope(g_f32, gx, cs, NULL, B, T, NH, NKV, HD, 1);
        double l = 0, r = 0;
        for (size_t i = 0; i < n; i++) l += (double)y[i] * R[i], r += (double)x[i] * gx[i];
        CHECK(fabs(l - r) <= 1e-5 * (fabs(l) + 1), "adjoint case %d: %.9g vs %.9g", s, l, r);
        CHECK_FD(rope_loss, RP.x, n, gx, "rope_inverse(R) = d<rope(x), R>/dx", s);
        /* every batch element has positions 0 .. T-1: batch 0's tokens copied to the last */
        if (B > 1) {
            memcpy(x2, x, n * 4);
            memcpy(x2 + (B - 1) * T * tok, x2, T * tok * 4);
            g_f32->ops->rope(g_f32, x2, cs, NULL, B, T, NH, NKV, HD, 0);
            CHECK(!memcmp(x2 + (B - 1) * T * tok, x2, T * tok * 4) && !memcmp(x2, y, T * tok * 4),
                  "batch element %d differs from element 0 on the same input, case %d", B - 1, s);
        }
        /* bf16: the same bf16 inputs; the round trip within two roundings */
        for (size_t i = 0; i < n; i++) x[i] = lt_bf16_round(x[i]);
        memcpy(y, x, n * 4), memcpy(x2, x, n * 4);
        g_f32->ops->rope(g_f32, y, cs, NULL, B, T, NH, NKV, HD, 0);
        g_bf16->ops->rope(g_bf16, x2, cs, NULL, B, T, NH, NKV, HD, 0);
        CHECK(all_bf16(x2, n) && normerr(x2, y, n) <= TOL_BF16, "bf16 fwd case %d: %g", s,
              normerr(x2, y, n));
        g_bf16->ops->rope(g_bf16, x2, cs, NULL, B, T, NH, NKV, HD, 1);
        CHECK(normerr(x2, x, n) <= TOL_BF16, "bf16 inverse(rope(x)) case %d: %g", s,
              normerr(x2, x, n));
        free(cs), free(x), free(y), free(R), free(x2), free(gx), free(rinv);
        free(RP.x), free(RP.R), free(RP.out), free(RP.f);
    }
}

/* lt_rope_inv_freq at HD 128, base 500000 against values computed apart from it (Python,
 * f = exp(-(2j/128) ln 500000), the wavelength 2 pi / f put in its band by hand): j 0, 10,
 * 28 keep f (wavelength under 8192/4 = 2048), j 29, 32, 34 are blended, j 35 (8219,
 * just past 8192), 40, 63 are divided by 8; no scaling and s == NULL give the plain
 * powers; lt_rope_table holds cos, sin of t * f with the angle taken in double (at
 * t = 8191 an fp32 angle would be off by ~5e-4). */
static void test_rope_freq(void) {
    static const struct { int j; double want; } w[] = {
        {0, 1.0}, {10, 0.1286873734326505}, {28, 0.0032114459947525913},
        {29, 0.0021665707635033595}, {32, 0.0005248461609929551}, {34, 0.00017850781276799665},
        {35, 9.556212353964687e-05}, {40, 3.4281021959525906e-05}, {63, 3.0689259889145127e-07}};
    const LtRopeScaling l3 = {LT_ROPE_SCALING_LLAMA3, 8, 1, 4, 8192, 0, 0, 0, 0};
    const LtRopeScaling none = {LT_ROPE_SCALING_NONE, 8, 1, 4, 8192, 0, 0, 0, 0};
    double f[64], f0[64], f1[64];
    lt_rope_inv_freq(f, 128, 500000.0, &l3);
    lt_rope_inv_freq(f0, 128, 500000.0, &none);
    lt_rope_inv_freq(f1, 128, 500000.0, NULL);
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++)
        CHECK(fabs(f[w[k].j] - w[k].want) <= 1e-12 * w[k].want, "llama3 inv_freq[%d] = %.17g, want %.17g",
              w[k].j, f[w[k].j], w[k].want);
    for (int j = 0; j < 64; j++) {
        const double p = exp(-(2.0 * j / 128) * log(500000.0));
        CHECK(fabs(f0[j] - p) <= 1e-13 * p && f1[j] == f0[j], "plain inv_freq[%d] = %.17g", j, f0[j]);
        CHECK(f[j] <= f0[j] && f[j] >= f0[j] / 8 * (1 - 1e-15), "llama3 inv_freq[%d] out of [f/8, f]", j);
    }
    enum { TT = 8192, HD = 16 };
    float *cs = falloc((size_t)TT * HD);
    double g[HD / 2];
    lt_rope_table(cs, TT, HD, 10000.0, &l3);
    lt_rope_inv_freq(g, HD, 10000.0, &l3);
    double e = 0;
    for (int t = 0; t < TT; t += 91)
        for (int j = 0; j < HD / 2; j++) {
            const float *p = cs + ((size_t)t * (HD / 2) + j) * 2;
            e = fmax(e, fmax(fabs(p[0] - cos(t * g[j])), fabs(p[1] - sin(t * g[j]))));
        }
    const float *last = cs + (size_t)(TT - 1) * HD;
    e = fmax(e, fmax(fabs(last[0] - cos((TT - 1) * g[0])), fabs(last[1] - sin((TT - 1) * g[0]))));
    CHECK(e <= 1e-7, "cos/sin table: max error %g", e);
    free(cs);
}

/* YaRN's inverse frequencies and attention factor at gpt-oss's parameters (HD 64, base
 * 150000, factor 32 over an original 4096 positions, betas 32 and 1) against transformers
 * 5.24's own _compute_yarn_parameters (evaluated in fp32 there, hence 1e-6): truncate off
 * (gpt-oss) and on (the default) differ only inside the ramp (j 10, 12, 16); j 0, 5, 8
 * keep f, j 20, 24, 31 are divided by 32. The table holds the factor times cos and sin. */
static void test_rope_yarn(void) {
    static const struct { int j; double off, on; } w[] = {
        {0, 1.0, 1.0}, {5, 0.15532298386096954, 0.15532298386096954},
        {8, 0.05081327259540558, 0.05081327259540558},
        {10, 0.019334999844431877, 0.019450966268777847},
        {12, 0.006794959306716919, 0.007015713956207037},
        {16, 0.0004564839182421565, 0.0005809474969282746},
        {20, 1.818833698052913e-05, 1.818833698052913e-05},
        {24, 4.099978468730114e-06, 4.099978468730114e-06},
        {31, 3.023511396804679e-07, 3.023511396804679e-07}};
    LtRopeScaling y = {.type = LT_ROPE_SCALING_YARN, .factor = 32, .original_max_position = 4096,
                       .beta_fast = 32, .beta_slow = 1, .truncate = 0};
    double off[32], on[32], plain[32];
    lt_rope_inv_freq(off, 64, 150000.0, &y);
    y.truncate = 1;
    lt_rope_inv_freq(on, 64, 150000.0, &y);
    lt_rope_inv_freq(plain, 64, 150000.0, NULL);
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) {
        const int j = w[k].j;
        CHECK(fabs(off[j] - w[k].off) <= 1e-6 * w[k].off, "yarn inv_freq[%d] = %.17g, want %.17g", j,
              off[j], w[k].off);
        CHECK(fabs(on[j] - w[k].on) <= 1e-6 * w[k].on, "yarn truncated inv_freq[%d] = %.17g, want %.17g",
              j, on[j], w[k].on);
    }
    for (int j = 0; j < 32; j++)
        CHECK(off[j] <= plain[j] && off[j] >= plain[j] / 32 * (1 - 1e-15), "yarn inv_freq[%d] out of [f/32, f]", j);
    CHECK(fabs(lt_rope_attention_factor(&y) - 1.3465735902799727) <= 1e-15, "attention factor %.17g",
          lt_rope_attention_factor(&y));
    y.attention_factor = 1.25;
    CHECK(lt_rope_attention_factor(&y) == 1.25, "a given attention factor is kept");
    y.attention_factor = 0, y.factor = 1;
    CHECK(lt_rope_attention_factor(&y) == 1.0, "factor 1: attention factor 1");
    enum { T = 300, HD = 64 };
    float *cs = falloc((size_t)T * HD);
    y.factor = 32;
    lt_rope_table(cs, T, HD, 150000.0, &y);
    double e = 0;
    for (int t = 0; t < T; t += 7)
        for (int j = 0; j < HD / 2; j++) {
            const float *p = cs + ((size_t)t * (HD / 2) + j) * 2;
            const double m = 1.3465735902799727;
            e = fmax(e, fmax(fabs(p[0] - m * cos(t * on[j])), fabs(p[1] - m * sin(t * on[j]))));
        }
    CHECK(e <= 2e-7, "yarn cos/sin table: max error %g", e);
    free(cs);
}

/* ---- determinism of the Llama ops: repeated runs and 1 vs 4 threads bitwise equal */
static void test_llama_determinism(void) {
    enum { N = 300, C = 200, F = 72, B = 3, T = 20, NH = 4, NKV = 2, HD = 16 };
    enum { NQ = B * T * (NH + 2 * NKV) * HD };
    LtBackend *be1 = lt_backend_cpu_create(LT_F32, 1), *be4 = lt_backend_cpu_create(LT_F32, 4);
    LtBackend *bes[3] = {be4, be4, be1};
    float *a = falloc(N * C), *w = falloc(C), *R = falloc(N * C), *gu = falloc(N * 2 * F);
    float *q0 = falloc(NQ), *cs = falloc(T * HD), *o[3][6];
    fill(a, N * C, 1, 0), fill(w, C, 1, 0), fill(R, N * C, 1, 0), fill(gu, N * 2 * F, 2, 0);
    fill(q0, NQ, 1, 0);
    lt_rope_table(cs, T, HD, 10000.0, NULL);
    for (int k = 0; k < 3; k++) {
        LtBackend *be = bes[k];
        float **r = o[k], rstd[N];
        r[0] = falloc(N * C), r[1] = lt_calloc(N * C * 4), r[2] = lt_calloc(C * 4);
        r[3] = falloc(N * F), r[4] = falloc(N * 2 * F), r[5] = falloc(NQ);
        be->ops->rmsnorm_fwd(be, NULL, r[0], rstd, a, NULL, w, 1e-5f, N, C);
        be->ops->rmsnorm_bwd(be, r[1], r[2], R, a, w, rstd, N, C);
        be->ops->swiglu_fwd(be, r[3], gu, N, F, NULL);
        be->ops->swiglu_bwd(be, r[4], gu, R, N, F, NULL);
        memcpy(r[5], q0, NQ * 4);
        be->ops->rope(be, r[5], cs, NULL, B, T, NH, NKV, HD, 0);
    }
    static const char *names[6] = {"rmsnorm out", "rmsnorm dinp", "rmsnorm dw",
                                   "swiglu out", "swiglu dgu", "rope"};
    const size_t sz[6] = {N * C, N * C, C, N * F, N * 2 * F, NQ};
    for (int k = 1; k < 3; k++)
        for (int j = 0; j < 6; j++)
            CHECK(memcmp(o[0][j], o[k][j], sz[j] * 4) == 0, "%s %s", names[j],
                  k == 1 ? "repeat" : "1 vs 4 threads");
    CHECK(isfinite(o[0][2][0]) && isfinite(o[0][4][0]), "outputs computed");
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 6; j++) free(o[k][j]);
    free(a), free(w), free(R), free(gu), free(q0), free(cs);
    lt_backend_destroy(be1), lt_backend_destroy(be4);
}

/* ---- bf16 mode: same bf16 inputs through both backends ---------------------- */
static void bf16_cmp(const char *what, const float *o16, const float *o32, size_t n) {
    CHECK(all_bf16(o16, n), "%s: output not bf16-representable", what);
    CHECK(normerr(o16, o32, n) <= TOL_BF16, "%s: %g from fp32", what, normerr(o16, o32, n));
}
static void test_bf16(void) {
    enum { B = 2, T = 70, NH = 3, HD = 8, C = NH * HD, N = B * T, H = 4 * C, V = 50, VP = 64 };
    LtBackend *bes[2] = {g_f32, g_bf16};
    float *in = falloc(N * H), *in2 = falloc(N * C), *w = falloc(H * C), *bias = falloc(H);
    float *qkv = falloc(3 * N * C), *R = falloc(N * H), *lg = falloc(N * VP), *acc = falloc(N * C);
    int32_t tok[N];
    fill(in, N * H, 1, 1), fill(in2, N * C, 1, 1), fill(w, H * C, 0.3f, 1), fill(bias, H, 0.5f, 1);
    fill(qkv, 3 * N * C, 1, 1), fill(R, N * H, 1, 1), fill(lg, N * VP, 2, 1), fill(acc, N * C, 1, 1);
    for (int i = 0; i < N; i++) tok[i] = i % V;
    float *o[2][12];
    for (int k = 0; k < 2; k++) {
        LtBackend *be = bes[k];
        float **r = o[k], mean[N], rstd[N], lse[B * NH * T], loss[N];
        for (int j = 0; j < 12; j++) r[j] = falloc(N * H > 3 * N * C ? N * H : 3 * N * C), poison(r[j], N * H);
        be->ops->embedding_fwd(be, r[0], tok, w, in2, NULL, B, T, C);
        be->ops->layernorm_fwd(be, r[1], r[2], mean, rstd, in, in2, w, bias, N, C);
        memcpy(r[3], acc, N * C * 4);
        be->ops->layernorm_bwd(be, r[3], (float[C]){0}, (float[C]){0}, R, r[1], w, mean, rstd, N, C);
        be->ops->linear_fwd(be, r[4], r[5], in2, w, bias, N, C, H);
        be->ops->linear_bwd(be, r[6], NULL, NULL, R, in2, w, in2, N, C, H);
        be->ops->gelu_fwd(be, r[7], in, N * H);
        be->ops->gelu_bwd(be, r[8], in, R, N * H);
        be->ops->attention_fwd(be, r[9], lse, qkv, NULL, NULL, -1, B, T, NH, NH, HD);
        be->ops->attention_bwd(be, r[10], NULL, R, qkv, r[9], lse, NULL, NULL, -1, B, T, NH, NH,
                               HD);
        memcpy(r[11], lg, N * VP * 4);
        be->ops->xent_fwd_bwd(be, loss, r[11], tok, N, V, VP, 1.0f / N);
        if (k == 1) CHECK(normerr(loss, o[0][11] + N * VP, N) <= 1e-5, "bf16 xent losses (fp32 math)");
        else memcpy(r[11] + N * VP, loss, sizeof loss);
    }
    bf16_cmp("embedding_fwd", o[1][0], o[0][0], N * C);
    bf16_cmp("layernorm resid_out", o[1][1], o[0][1], N * C);
    bf16_cmp("layernorm out", o[1][2], o[0][2], N * C);
    bf16_cmp("layernorm dinp", o[1][3], o[0][3], N * C);
    bf16_cmp("linear pre_gelu", o[1][5], o[0][5], N * H);
    bf16_cmp("linear gelu out", o[1][4], o[0][4], N * H);
    bf16_cmp("linear_bwd dinp*gelu'", o[1][6], o[0][6], N * C);
    bf16_cmp("gelu_fwd", o[1][7], o[0][7], N * H);
    bf16_cmp("gelu_bwd", o[1][8], o[0][8], N * H);
    bf16_cmp("attention out", o[1][9], o[0][9], N * C);
    bf16_cmp("attention dqkv", o[1][10], o[0][10], 3 * N * C);
    bf16_cmp("xent gradient", o[1][11], o[0][11], N * VP);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 12; j++) free(o[k][j]);
    free(in), free(in2), free(w), free(bias), free(qkv), free(R), free(lg), free(acc);
}

/* ---- determinism: repeated runs and different thread counts are bitwise equal */
static void test_determinism(void) {
    enum { B = 2, T = 200, NH = 3, HD = 16, C = NH * HD, N = B * T, VT = 3 };
    LtBackend *be1 = lt_backend_cpu_create(LT_F32, 1), *be4 = lt_backend_cpu_create(LT_F32, 4);
    LtBackend *bes[3] = {be4, be4, be1};
    float *qkv = falloc(3 * N * C), *R = falloc(N * C), *out[3], *lse[3], *dqkv[3], *dwte[3], *dwpe[3];
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 7) % VT; /* each token repeats ~N/3 times */
    fill(qkv, 3 * N * C, 1, 0), fill(R, N * C, 1, 0);
    for (int k = 0; k < 3; k++) {
        out[k] = falloc(N * C), lse[k] = falloc(B * NH * T), dqkv[k] = falloc(3 * N * C);
        dwte[k] = lt_calloc(VT * C * 4), dwpe[k] = lt_calloc(T * C * 4);
        run_attention(bes[k], out[k], lse[k], dqkv[k], qkv, R, B, T, NH, NH, HD);
        bes[k]->ops->embedding_bwd(bes[k], dwte[k], dwpe[k], R, tok, NULL, B, T, C);
    }
    for (int k = 1; k < 3; k++) {
        const char *what = k == 1 ? "repeat" : "1 vs 4 threads";
        CHECK(memcmp(out[0], out[k], N * C * 4) == 0, "attention out %s", what);
        CHECK(memcmp(lse[0], lse[k], B * NH * T * 4) == 0, "attention lse %s", what);
        CHECK(memcmp(dqkv[0], dqkv[k], 3 * N * C * 4) == 0, "attention dqkv %s", what);
        CHECK(memcmp(dwte[0], dwte[k], VT * C * 4) == 0, "embedding dwte %s", what);
        CHECK(memcmp(dwpe[0], dwpe[k], T * C * 4) == 0, "embedding dwpe %s", what);
    }
    CHECK(isfinite(dqkv[0][0]) && isfinite(dwte[0][0]), "outputs computed");
    for (int k = 0; k < 3; k++) free(out[k]), free(lse[k]), free(dqkv[k]), free(dwte[k]), free(dwpe[k]);
    free(qkv), free(R);
    lt_backend_destroy(be1), lt_backend_destroy(be4);
}

/* ---- timing (informational) -------------------------------------------------- */
static void timing(void) {
    enum { B = 4, T = 256, NH = 6, HD = 64, C = NH * HD, N = B * T, OC = 4 * C };
    LtBackend *be = g_f32;
    float *x = falloc(N * C), *w = falloc(OC * C), *bias = falloc(OC), *y = falloc(N * OC);
    float *pre = falloc(N * OC), *qkv = falloc(3 * N * C), *o = falloc(N * C), *lse = falloc(B * NH * T);
    float *dqkv = falloc(3 * N * C);
    fill(x, N * C, 1, 0), fill(w, OC * C, 0.05f, 0), fill(bias, OC, 1, 0), fill(qkv, 3 * N * C, 1, 0);
    double tl = 1e9, tf = 1e9, tb = 1e9; /* best of 5 (the machine may be shared) */
    for (int r = 0; r < 5; r++) {
        double t0 = lt_now();
        be->ops->linear_fwd(be, y, pre, x, w, bias, N, C, OC);
        double t1 = lt_now();
        be->ops->attention_fwd(be, o, lse, qkv, NULL, NULL, -1, B, T, NH, NH, HD);
        double t2 = lt_now();
        be->ops->attention_bwd(be, dqkv, NULL, o, qkv, o, lse, NULL, NULL, -1, B, T, NH, NH, HD);
        double t3 = lt_now();
        tl = t1 - t0 < tl ? t1 - t0 : tl, tf = t2 - t1 < tf ? t2 - t1 : tf, tb = t3 - t2 < tb ? t3 - t2 : tb;
    }
    /* useful flops: causal attention fwd = 2 matmuls over the T(T+1)/2 visible
     * pairs, backward = 5 (counted as 2.5x the forward) */
    double fl = 2.0 * N * C * OC, fa = 4.0 * B * NH * (T * (T + 1) / 2.0) * HD;
    printf("timing (%d threads): linear_fwd+gelu N=%d C=%d OC=%d %.2f ms (%.1f GFLOP/s); "
           "attention B=%d T=%d NH=%d HD=%d fwd %.2f ms (%.1f GFLOP/s) bwd %.2f ms (%.1f GFLOP/s)\n",
           omp_get_num_procs(), N, C, OC, tl * 1e3, fl / tl * 1e-9, B, T, NH, HD, tf * 1e3,
           fa / tf * 1e-9, tb * 1e3, 2.5 * fa / tb * 1e-9);
    free(x), free(w), free(bias), free(y), free(pre), free(qkv), free(o), free(lse), free(dqkv);
}

/* ---- per-head query/key RMSNorm (model.qk_layernorm) ------------------------- */
static struct { int N, NH, NKV, HD; double eps, *qkv, *wq, *wk, *R, *out; } QK;
/* out = qkv with each q head row normalized times wq and each k head times wk (v copied). */
static void ref_qk_norm(double *out, double *rstd, const double *qkv, const double *wq,
                        const double *wk, double eps, int N, int NH, int NKV, int HD) {
    const int W = (NH + 2 * NKV) * HD;
    memcpy(out, qkv, (size_t)N * W * sizeof(double));
    for (int i = 0; i < N; i++)
        for (int h = 0; h < NH + NKV; h++) {
            const double *x = qkv + (size_t)i * W + (size_t)h * HD, *w = h < NH ? wq : wk;
            double ms = 0;
            for (int c = 0; c < HD; c++) ms += x[c] * x[c] / HD;
            const double rs = 1 / sqrt(ms + eps);
            if (rstd) rstd[i * (NH + NKV) + h] = rs;
            for (int c = 0; c < HD; c++) out[(size_t)i * W + (size_t)h * HD + c] = x[c] * rs * w[c];
        }
}
static double qk_norm_loss(void) {
    ref_qk_norm(QK.out, NULL, QK.qkv, QK.wq, QK.wk, QK.eps, QK.N, QK.NH, QK.NKV, QK.HD);
    return dot(QK.out, QK.R, (size_t)QK.N * (QK.NH + 2 * QK.NKV) * QK.HD);
}
/* Forward (q/k heads normalized with their own weights, v heads untouched, the input
 * and rstd kept) and backward (dq, dk in place, dv untouched, dwq and dwk accumulated)
 * against the float64 reference and finite differences of it (the v heads' gradient is
 * the identity's, so the whole dqkv is checked); bf16 against fp32 on bf16 inputs;
 * 1 and 4 threads bitwise equal. GQA, MQA and MHA shapes, HD not a power of two. */
static void test_qk_norm(void) {
    static const int shapes[][4] = {{5, 4, 2, 8}, {3, 2, 2, 6}, {4, 6, 1, 12}};
    for (int s = 0; s < 3; s++) {
        const int N = shapes[s][0], NH = shapes[s][1], NKV = shapes[s][2], HD = shapes[s][3];
        const int NQK = NH + NKV;
        const size_t n = (size_t)N * (NH + 2 * NKV) * HD, nk = (size_t)N * NQK * HD;
        const float eps = s == 0 ? 1e-2f : 1e-6f;
        float *x = falloc(n), *wq = falloc(HD), *wk = falloc(HD), *R = falloc(n), *y = falloc(n);
        float *xin = falloc(nk), *rstd = falloc((size_t)N * NQK), *d = falloc(n);
        float *dwq = falloc(HD), *dwk = falloc(HD);
        fill(x, n, 1, 0), fill(wq, HD, 0.5f, 0), fill(wk, HD, 0.5f, 0), fill(R, n, 1, 0);
        for (int c = 0; c < HD; c++) wq[c] += 1.0f, wk[c] -= 1.0f;
        fill(dwq, HD, 1, 0), fill(dwk, HD, 1, 0);
        QK.N = N, QK.NH = NH, QK.NKV = NKV, QK.HD = HD, QK.eps = eps;
        QK.qkv = todbl(x, n), QK.wq = todbl(wq, HD), QK.wk = todbl(wk, HD), QK.R = todbl(R, n);
        QK.out = dalloc(n);
        double *rrs = dalloc((size_t)N * NQK), *rdx = dalloc(n), *rdwq = todbl(dwq, HD);
        double *rdwk = todbl(dwk, HD);
        memcpy(y, x, n * 4), poison(xin, nk), poison(rstd, (size_t)N * NQK);
        g_f32->ops->qk_norm_fwd(g_f32, y, xin, rstd, wq, wk, eps, N, NH, NKV, HD);
        ref_qk_norm(QK.out, rrs, QK.qkv, QK.wq, QK.wk, eps, N, NH, NKV, HD);
        CHECK(err(y, QK.out, n) <= TOL_FWD, "out case %d: %g", s, err(y, QK.out, n));
        CHECK(err(rstd, rrs, (size_t)N * NQK) <= TOL_FWD, "rstd case %d", s);
        int kept = 1, vsame = 1;
        for (int i = 0; i < N; i++)
            for (size_t e = 0; e < (size_t)(NH + 2 * NKV) * HD; e++) {
                const size_t k = (size_t)i * (NH + 2 * NKV) * HD + e;
                if (e < (size_t)NQK * HD) kept &= xin[(size_t)i * NQK * HD + e] == x[k];
                else vsame &= y[k] == x[k] && isfinite(y[k]);
            }
        CHECK(kept && vsame, "case %d: input kept %d, v heads untouched %d", s, kept, vsame);
        /* backward: dqkv = R; the reference gradient of sum(out * R) */
        memcpy(d, R, n * 4);
        g_f32->ops->qk_norm_bwd(g_f32, d, dwq, dwk, xin, wq, wk, rstd, N, NH, NKV, HD);
        for (int i = 0; i < N; i++) {
            const size_t W = (size_t)(NH + 2 * NKV) * HD;
            for (size_t e = 0; e < W; e++) rdx[i * W + e] = QK.R[i * W + e]; /* v: identity */
            for (int h = 0; h < NQK; h++) {
                const double *xi = QK.qkv + i * W + (size_t)h * HD, *dy = QK.R + i * W + (size_t)h * HD;
                const double *w = h < NH ? QK.wq : QK.wk, rs = rrs[i * NQK + h];
                double *dw = h < NH ? rdwq : rdwk, sgx = 0;
                for (int c = 0; c < HD; c++) sgx += dy[c] * w[c] * xi[c] * rs / HD;
                for (int c = 0; c < HD; c++) {
                    rdx[i * W + (size_t)h * HD + c] = rs * (dy[c] * w[c] - xi[c] * rs * sgx);
                    dw[c] += dy[c] * xi[c] * rs;
                }
            }
        }
        CHECK(err(d, rdx, n) <= TOL_BWD, "dqkv case %d: %g", s, err(d, rdx, n));
        CHECK(err(dwq, rdwq, HD) <= TOL_BWD, "dwq (+=) case %d: %g", s, err(dwq, rdwq, HD));
        CHECK(err(dwk, rdwk, HD) <= TOL_BWD, "dwk (+=) case %d: %g", s, err(dwk, rdwk, HD));
        memcpy(d, R, n * 4), memset(dwq, 0, HD * 4), memset(dwk, 0, HD * 4);
        g_f32->ops->qk_norm_bwd(g_f32, d, dwq, dwk, xin, wq, wk, rstd, N, NH, NKV, HD);
        CHECK_FD(qk_norm_loss, QK.qkv, n, d, "dqkv", s);
        CHECK_FD(qk_norm_loss, QK.wq, HD, dwq, "dwq", s);
        CHECK_FD(qk_norm_loss, QK.wk, HD, dwk, "dwk", s);
        /* bf16 against fp32, and 1 against 4 threads, on the same bf16 inputs */
        for (size_t i = 0; i < n; i++) x[i] = lt_bf16_round(x[i]), R[i] = lt_bf16_round(R[i]);
        for (int c = 0; c < HD; c++) wq[c] = lt_bf16_round(wq[c]), wk[c] = lt_bf16_round(wk[c]);
        LtBackend *b1 = lt_backend_cpu_create(LT_F32, 1), *b4 = lt_backend_cpu_create(LT_F32, 4);
        LtBackend *bes[4] = {g_f32, g_bf16, b1, b4};
        float *o[4], *g[4], *gq[4], *gk[4];
        for (int k = 0; k < 4; k++) {
            o[k] = falloc(n), g[k] = falloc(n), gq[k] = lt_calloc(HD * 4), gk[k] = lt_calloc(HD * 4);
            memcpy(o[k], x, n * 4), memcpy(g[k], R, n * 4);
            bes[k]->ops->qk_norm_fwd(bes[k], o[k], xin, rstd, wq, wk, eps, N, NH, NKV, HD);
            bes[k]->ops->qk_norm_bwd(bes[k], g[k], gq[k], gk[k], xin, wq, wk, rstd, N, NH, NKV, HD);
        }
        CHECK(all_bf16(o[1], n) && all_bf16(g[1], n), "bf16 outputs representable, case %d", s);
        CHECK(normerr(o[1], o[0], n) <= TOL_BF16, "bf16 out case %d: %g", s, normerr(o[1], o[0], n));
        CHECK(normerr(g[1], g[0], n) <= TOL_BF16, "bf16 dqkv case %d: %g", s, normerr(g[1], g[0], n));
        CHECK(normerr(gq[1], gq[0], HD) <= TOL_BF16 && normerr(gk[1], gk[0], HD) <= TOL_BF16,
              "bf16 dwq, dwk case %d", s);
        CHECK(!memcmp(o[2], o[3], n * 4) && !memcmp(g[2], g[3], n * 4) &&
                  !memcmp(gq[2], gq[3], HD * 4) && !memcmp(gk[2], gk[3], HD * 4),
              "1 vs 4 threads bitwise, case %d", s);
        for (int k = 0; k < 4; k++) free(o[k]), free(g[k]), free(gq[k]), free(gk[k]);
        lt_backend_destroy(b1), lt_backend_destroy(b4);
        free(x), free(wq), free(wk), free(R), free(y), free(xin), free(rstd), free(d);
        free(dwq), free(dwk), free(rrs), free(rdx), free(rdwq), free(rdwk);
        free(QK.qkv), free(QK.wq), free(QK.wk), free(QK.R), free(QK.out);
    }
}

int main(void) {
    g_f32 = lt_backend_cpu_create(LT_F32, 0);
    g_bf16 = lt_backend_cpu_create(LT_BF16, 0);
    RUN(test_memory);
    RUN(test_sumsq_scale);
    RUN(test_clip_localize);
    RUN(test_add_act);
    RUN(test_embedding);
    RUN(test_embedding_tp);
    RUN(test_layernorm);
    RUN(test_linear_mlp);
    RUN(test_gelu);
    RUN(test_attention);
    RUN(test_documents_packed);
    RUN(test_attention_gqa_as_mha);
    RUN(test_attention_refuses);
    RUN(test_xent);
    RUN(test_xent_tp);
    RUN(test_adamw);
    RUN(test_rmsnorm);
    RUN(test_swiglu);
    RUN(test_glu_clamp_bounds);
    RUN(test_rope);
    RUN(test_rope_freq);
    RUN(test_rope_yarn);
    RUN(test_llama_determinism);
    RUN(test_bf16);
    timing();
    RUN(test_determinism);
    RUN(test_attention_window); /* it draws from the shared generator: after the others */
    RUN(test_qk_norm);          /* last: added after the window test, it draws after it */
    RUN(test_attention_sinks);  /* after those, for the same reason */
    lt_backend_destroy(g_f32);
    lt_backend_destroy(g_bf16);
    return test_summary();
}
