/* test_gpu_ops.c - every CUDA backend op against a reference backend.
 *
 * The reference is the CPU backend (same dtype). Built with
 * -DLT_GPU_TEST_NO_CPU (no cblas on the machine), the reference is instead
 * the CUDA backend in fp32 with its alternative paths (SIMT attention, GEMMs
 * without cuBLASLt epilogues), which still checks the bf16 kernels, the
 * tensor-core attention and the epilogues, but not fp32 against an
 * independent implementation.
 * Each case runs for several (reference, device-under-test) pairs: the
 * default CUDA backend (attention: lattice's kernels) and one created with
 * LT_CUDA_ATTN=simt and LT_CUDA_GEMM=plain ("alt"), in fp32 and bf16; the
 * attention case also runs on a bf16 backend configured with
 * model.attention=cudnn ("bf16n": cuDNN's fused attention, deterministic
 * where cuDNN offers it - Hopper - and checked to have run through cuDNN,
 * calls cuDNN's rules leave to lattice reported). Inputs are rounded to bf16
 * on the host when either side is bf16, so both sides see the same values.
 * Outputs are poisoned (all-ones bytes: NaN in fp32 and bf16) before each
 * run; accumulated (+=) outputs start from random values instead.
 * Error metric: max_i |got_i - ref_i| / max(|ref_i|, rms(ref)) - relative
 * for elements at least as large as the tensor's rms, rms-normalized below
 * it (elementwise relative error is meaningless for values that cancel to
 * ~0). Bounds: fp32 1e-5 (fp32 GEMMs use CUBLAS_COMPUTE_32F, never TF32),
 * bf16 1e-2; add_f32 is exact (0), and so is add_act when both sides have the
 * same dtype. Determinism: embedding_bwd, layernorm_bwd, rmsnorm_bwd,
 * attention_bwd and linear_bwd run twice and must match bitwise. The
 * tensor-parallel cases (embedding_tp: negative ids, NULL wpe / dwte / dwpe;
 * xent_tp: the vocab-split cross-entropy simulated over shards of one device,
 * also checked against the device's own xent_fwd_bwd) and the Llama block's
 * ops (rmsnorm with and without the residual, swiglu, rope forward and
 * inverse with grouped K/V, v heads checked untouched; qk_layernorm's per-head
 * q/k norm, its backward run twice bitwise) use the same pairs and bounds.
 * Alignment: the op contract promises none, and the memory-bound kernels take
 * 16-byte vector paths only for aligned tensors whose rows are multiples of
 * the vector width. The shapes include rows that are not (C, Vp, n not
 * multiples of 8 or 4), and the cases marked `misalign` run a second time
 * with every buffer 4 bytes off the 16-byte grid (g_offset; named
 * CASE_PAIR_off4), which must give the same results through the scalar paths.
 * Usage: test_gpu_ops [--quick]   (--quick: small shapes only) */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "attn_bound.h"
#include "attn_select.h"
#include "backend.h"
#include "common.h"
#include "config.h" /* the MoE score and drop-policy constants */
#include "rope.h"

typedef struct {
    LtBackend *ref, *dut;
    const char *tag;
    double tol;
    int bf16;   /* inputs rounded to bf16 */
    int cudnn;  /* dut's attention is configured to cuDNN (only the attention case runs) */
    int nondet; /* cuDNN's backward there is not deterministic: no bitwise check */
} Pair;

static int g_quick;
/* The bf16 CUDA backend on lattice's kernels, which the cuDNN checks compare
 * with (NULL in the emulation). */
static LtBackend *g_lattice_bf16;
/* Bytes every device buffer of a case starts past its (256-byte aligned)
 * allocation: 0, or 4 for the misaligned runs. */
static size_t g_offset;
static int g_aligned; /* --aligned: no misaligned re-runs */

/* ---- host helpers -------------------------------------------------------- */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}
static float *hrand(size_t n, float scale, int bf) {
    float *h = lt_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        h[i] = frand() * scale;
        if (bf) h[i] = lt_bf16_round(h[i]);
    }
    return h;
}
static float *hzeros(size_t n) { return lt_calloc(n * sizeof(float)); }

/* ---- device helpers (any backend) --------------------------------------- */
static void *dalloc(LtBackend *be, size_t bytes) {
    return (char *)be->ops->alloc(be, bytes + g_offset) + g_offset;
}
static void dfree(LtBackend *be, void *d) { be->ops->free(be, (char *)d - g_offset); }
static void *act_up(LtBackend *be, const float *h, size_t n) {
    void *d = dalloc(be, lt_act_bytes(be, n));
    if (h && n) {
        float *tmp = be->ops->alloc(be, n * sizeof(float));
        be->ops->upload(be, tmp, h, n * sizeof(float));
        be->ops->act_from_f32(be, d, tmp, n);
        be->ops->synchronize(be);
        be->ops->free(be, tmp);
    }
    return d;
}
static void act_down(LtBackend *be, float *h, const void *d, size_t n) {
    float *tmp = be->ops->alloc(be, n * sizeof(float));
    be->ops->act_to_f32(be, tmp, d, n);
    be->ops->download(be, h, tmp, n * sizeof(float));
    be->ops->free(be, tmp);
}
static float *f32_up(LtBackend *be, const float *h, size_t n) {
    float *d = dalloc(be, n * sizeof(float));
    if (h) be->ops->upload(be, d, h, n * sizeof(float));
    return d;
}
static void f32_down(LtBackend *be, float *h, const float *d, size_t n) {
    be->ops->download(be, h, d, n * sizeof(float));
}
static void *i32_up(LtBackend *be, const int32_t *h, size_t n) {
    void *d = dalloc(be, n * sizeof(int32_t));
    be->ops->upload(be, d, h, n * sizeof(int32_t));
    return d;
}
static void poison(LtBackend *be, void *d, size_t bytes) {
    unsigned char *h = lt_malloc(bytes);
    memset(h, 0xff, bytes);
    be->ops->upload(be, d, h, bytes);
    free(h);
}

/* Raw bytes of a device buffer, for bitwise determinism checks. */
static void *raw_down(LtBackend *be, const void *d, size_t bytes) {
    void *h = lt_malloc(bytes);
    be->ops->download(be, h, d, bytes);
    return h;
}

static double cmp(const Pair *P, const char *what, const float *got, const float *ref, size_t n,
                  double tol) {
    double ss = 0.0;
    size_t nf = 0; /* the scale from the finite entries: NaN (poison left alone) in both
                    * tensors matches */
    for (size_t i = 0; i < n; i++)
        if (isfinite(ref[i])) ss += (double)ref[i] * ref[i], nf++;
    double rms = nf ? sqrt(ss / (double)nf) : 0.0;
    if (rms < 1e-30) rms = 1e-30;
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double e;
        if (isnan(got[i]) || isnan(ref[i]))
            e = (isnan(got[i]) && isnan(ref[i])) ? 0.0 : INFINITY;
        else
            e = test_relerr(got[i], ref[i], rms);
        if (!(e <= worst)) worst = e, wi = i;
    }
    printf("  %-5s %-28s n=%-9zu maxerr %.3e (tol %.0e)%s\n", P->tag, what, n, worst, tol,
           worst <= tol ? "" : "  <-- FAIL");
    CHECK(worst <= tol, "%s: max error %.3e at %zu (got %.8g ref %.8g)", what, worst, wi,
          (double)got[wi], (double)ref[wi]);
    return worst;
}
static void same_bits(const Pair *P, const char *what, const void *a, const void *b, size_t bytes) {
    int eq = memcmp(a, b, bytes) == 0;
    printf("  %-5s %-28s deterministic: %s\n", P->tag, what, eq ? "yes" : "NO  <-- FAIL");
    CHECK(eq, "%s: two runs differ", what);
}

/* ======================= embedding ======================= */
static void run_embedding(LtBackend *be, int B, int T, int C, int V, const int32_t *tok,
                          const float *wte, const float *wpe, const float *dout, const float *dwte0,
                          const float *dwpe0, float *out, float *dwte, float *dwpe, void **bits) {
    const size_t N = (size_t)B * T;
    int32_t *dt = i32_up(be, tok, N);
    void *dwte_a = act_up(be, wte, (size_t)V * C), *dwpe_a = act_up(be, wpe, (size_t)T * C);
    void *dout_a = act_up(be, dout, N * C), *o = act_up(be, NULL, N * C);
    float *gw = f32_up(be, dwte0, (size_t)V * C), *gp = f32_up(be, dwpe0, (size_t)T * C);
    poison(be, o, lt_act_bytes(be, N * C));
    be->ops->embedding_fwd(be, o, dt, dwte_a, dwpe_a, NULL, B, T, C);
    act_down(be, out, o, N * C);
    be->ops->embedding_bwd(be, gw, gp, dout_a, dt, NULL, B, T, C);
    f32_down(be, dwte, gw, (size_t)V * C);
    f32_down(be, dwpe, gp, (size_t)T * C);
    if (bits) { /* rerun from the same start, keep both results' bytes */
        be->ops->upload(be, gw, dwte0, (size_t)V * C * 4);
        be->ops->upload(be, gp, dwpe0, (size_t)T * C * 4);
        be->ops->embedding_bwd(be, gw, gp, dout_a, dt, NULL, B, T, C);
        bits[0] = raw_down(be, gw, (size_t)V * C * 4);
        bits[1] = raw_down(be, gp, (size_t)T * C * 4);
    }
    dfree(be, dt), dfree(be, dwte_a), dfree(be, dwpe_a), dfree(be, dout_a), dfree(be, o);
    dfree(be, gw), dfree(be, gp);
}

static void t_embedding(const Pair *P) {
    /* C 20: fp32 packs, bf16 single elements; C 30: single elements in both */
    static const int shapes[][4] = {{2, 5, 24, 37},   {3, 64, 96, 1000}, {2, 7, 20, 53},
                                    {2, 5, 30, 37},   {2, 257, 768, 50304}};
    for (int s = 0; s < 5; s++) {
        if (g_quick && s == 4) break;
        const int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3];
        const size_t N = (size_t)B * T;
        int32_t *tok = lt_malloc(N * sizeof(int32_t));
        for (size_t i = 0; i < N; i++) /* half the tokens from a tiny range: many repeats */
            tok[i] = (int32_t)((frand() * 0.5 + 0.5) * (i % 2 ? 7.999 : V - 0.001));
        float *wte = hrand((size_t)V * C, 1.f, P->bf16), *wpe = hrand((size_t)T * C, 1.f, P->bf16);
        float *dout = hrand(N * C, 1.f, P->bf16);
        float *dwte0 = hrand((size_t)V * C, 1.f, 0), *dwpe0 = hrand((size_t)T * C, 1.f, 0);
        float *o[2], *gw[2], *gp[2];
        void *bits[2];
        for (int k = 0; k < 2; k++) {
            o[k] = hzeros(N * C), gw[k] = hzeros((size_t)V * C), gp[k] = hzeros((size_t)T * C);
            run_embedding(k ? P->dut : P->ref, B, T, C, V, tok, wte, wpe, dout, dwte0, dwpe0, o[k],
                          gw[k], gp[k], k ? bits : NULL);
        }
        char nm[96];
        snprintf(nm, sizeof nm, "emb_fwd B%d T%d C%d", B, T, C);
        cmp(P, nm, o[1], o[0], N * C, P->tol);
        snprintf(nm, sizeof nm, "emb_bwd dwte V%d", V);
        cmp(P, nm, gw[1], gw[0], (size_t)V * C, P->tol);
        snprintf(nm, sizeof nm, "emb_bwd dwpe T%d", T);
        cmp(P, nm, gp[1], gp[0], (size_t)T * C, P->tol);
        /* bits hold the rerun; gw[1]/gp[1] hold the first run as floats */
        same_bits(P, "emb_bwd dwte", bits[0], gw[1], (size_t)V * C * 4);
        same_bits(P, "emb_bwd dwpe", bits[1], gp[1], (size_t)T * C * 4);
        for (int k = 0; k < 2; k++) free(o[k]), free(gw[k]), free(gp[k]);
        free(bits[0]), free(bits[1]), free(tok), free(wte), free(wpe), free(dout), free(dwte0),
            free(dwpe0);
    }
}

/* Vocab-parallel embedding semantics: negative (not owned) token ids, wpe ==
 * NULL, dwte or dwpe == NULL (the skipped buffer must come back unchanged). */
static void run_embedding_tp(LtBackend *be, int B, int T, int C, int V, const int32_t *tok,
                             const float *wte, const float *wpe, const float *dout,
                             const float *dwte0, const float *dwpe0, int use_dwte, int use_dwpe,
                             float *out, float *dwte, float *dwpe, void **bits) {
    const size_t N = (size_t)B * T;
    int32_t *dt = i32_up(be, tok, N);
    void *wte_a = act_up(be, wte, (size_t)V * C), *wpe_a = wpe ? act_up(be, wpe, (size_t)T * C) : NULL;
    void *dout_a = act_up(be, dout, N * C), *o = act_up(be, NULL, N * C);
    float *gw = f32_up(be, dwte0, (size_t)V * C), *gp = f32_up(be, dwpe0, (size_t)T * C);
    poison(be, o, lt_act_bytes(be, N * C));
    be->ops->embedding_fwd(be, o, dt, wte_a, wpe_a, NULL, B, T, C);
    act_down(be, out, o, N * C);
    be->ops->embedding_bwd(be, use_dwte ? gw : NULL, use_dwpe ? gp : NULL, dout_a, dt, NULL, B, T, C);
    f32_down(be, dwte, gw, (size_t)V * C);
    f32_down(be, dwpe, gp, (size_t)T * C);
    if (bits) {
        be->ops->upload(be, gw, dwte0, (size_t)V * C * 4);
        be->ops->embedding_bwd(be, use_dwte ? gw : NULL, use_dwpe ? gp : NULL, dout_a, dt, NULL, B, T, C);
        bits[0] = raw_down(be, gw, (size_t)V * C * 4);
    }
    dfree(be, dt), dfree(be, wte_a), dfree(be, dout_a), dfree(be, o), dfree(be, gw), dfree(be, gp);
    if (wpe_a) dfree(be, wpe_a);
}

static void t_embedding_tp(const Pair *P) {
    static const int shapes[][4] = {{2, 5, 24, 37}, {3, 64, 96, 1000}, {2, 7, 20, 53},
                                    {2, 257, 768, 12576}};
    for (int s = 0; s < 4; s++) {
        if (g_quick && s == 3) break;
        const int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3];
        const size_t N = (size_t)B * T;
        int32_t *tok = lt_malloc(N * sizeof(int32_t));
        for (size_t i = 0; i < N; i++) /* a third not owned (-1 or another negative), repeats */
            tok[i] = i % 3 == 0 ? -1 - (int32_t)(i % 5)
                                : (int32_t)((frand() * 0.5 + 0.5) * (i % 2 ? 7.999 : V - 0.001));
        float *wte = hrand((size_t)V * C, 1.f, P->bf16), *wpe = hrand((size_t)T * C, 1.f, P->bf16);
        float *dout = hrand(N * C, 1.f, P->bf16);
        float *dwte0 = hrand((size_t)V * C, 1.f, 0), *dwpe0 = hrand((size_t)T * C, 1.f, 0);
        for (int variant = 0; variant < 2; variant++) {
            /* 0: no position term, dwpe NULL; 1: positions, dwte NULL */
            float *o[2], *gw[2], *gp[2];
            void *bits[1];
            for (int k = 0; k < 2; k++) {
                o[k] = hzeros(N * C), gw[k] = hzeros((size_t)V * C), gp[k] = hzeros((size_t)T * C);
                run_embedding_tp(k ? P->dut : P->ref, B, T, C, V, tok, wte, variant ? wpe : NULL,
                                 dout, dwte0, dwpe0, variant == 0, variant == 1, o[k], gw[k], gp[k],
                                 k ? bits : NULL);
            }
            char nm[96];
            snprintf(nm, sizeof nm, "emb_tp fwd %s B%d T%d C%d", variant ? "+pos" : "nopos", B, T, C);
            cmp(P, nm, o[1], o[0], N * C, P->tol);
            snprintf(nm, sizeof nm, "emb_tp dwte%s V%d", variant ? " (NULL)" : "", V);
            cmp(P, nm, gw[1], gw[0], (size_t)V * C, variant ? 0.0 : P->tol);
            snprintf(nm, sizeof nm, "emb_tp dwpe%s T%d", variant ? "" : " (NULL)", T);
            cmp(P, nm, gp[1], gp[0], (size_t)T * C, variant ? P->tol : 0.0);
            if (variant) cmp(P, "emb_tp dwte untouched", gw[1], dwte0, (size_t)V * C, 0.0);
            else cmp(P, "emb_tp dwpe untouched", gp[1], dwpe0, (size_t)T * C, 0.0);
            same_bits(P, "emb_tp dwte", bits[0], gw[1], (size_t)V * C * 4);
            for (int k = 0; k < 2; k++) free(o[k]), free(gw[k]), free(gp[k]);
            free(bits[0]);
        }
        free(tok), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0);
    }
}

/* ======================= layernorm ======================= */
/* The norms' shapes (layernorm, rmsnorm; --quick: the first 5). C 50: single elements;
 * C 36: fp32 packs, bf16 single elements; N 2100: more rows than the backward's warps,
 * so warps take several rows. */
static const int norm_shapes[7][2] = {{7, 24},    {5, 50},    {64, 768},  {9, 36},
                                      {2100, 16}, {33, 1600}, {300, 4096}};

static void t_layernorm(const Pair *P) {
    for (int s = 0; s < 7; s++) {
        if (g_quick && s >= 5) break;
        const int N = norm_shapes[s][0], C = norm_shapes[s][1];
        const size_t NC = (size_t)N * C;
        float *a = hrand(NC, 2.f, P->bf16), *b = hrand(NC, 1.f, P->bf16);
        for (size_t i = 0; i < NC; i++) a[i] = P->bf16 ? lt_bf16_round(a[i] + 0.3f) : a[i] + 0.3f;
        float *w = hrand(C, 1.f, P->bf16), *bias = hrand(C, 1.f, P->bf16);
        float *dout = hrand(NC, 1.f, P->bf16), *dinp0 = hrand(NC, 1.f, P->bf16);
        float *dw0 = hrand(C, 1.f, 0), *db0 = hrand(C, 1.f, 0);
        float *mean = hzeros(N), *rstd = hzeros(N); /* host stats of x = a, for the bwd */
        for (int r = 0; r < N; r++) {
            double m = 0, v = 0;
            for (int c = 0; c < C; c++) m += a[(size_t)r * C + c];
            m /= C;
            for (int c = 0; c < C; c++) v += (a[(size_t)r * C + c] - m) * (a[(size_t)r * C + c] - m);
            mean[r] = (float)m, rstd[r] = (float)(1.0 / sqrt(v / C + 1e-5));
        }
        for (int withb = 0; withb < 2; withb++) {
            float *ro[2], *o[2], *mu[2], *rs[2];
            for (int k = 0; k < 2; k++) {
                LtBackend *be = k ? P->dut : P->ref;
                void *da = act_up(be, a, NC), *db = withb ? act_up(be, b, NC) : NULL;
                void *dw = act_up(be, w, C), *dbias = act_up(be, bias, C);
                void *dro = act_up(be, NULL, NC), *dout_ = act_up(be, NULL, NC);
                float *dm = f32_up(be, NULL, N), *dr = f32_up(be, NULL, N);
                poison(be, dro, lt_act_bytes(be, NC)), poison(be, dout_, lt_act_bytes(be, NC));
                poison(be, dm, N * 4), poison(be, dr, N * 4);
                be->ops->layernorm_fwd(be, dro, dout_, dm, dr, da, db, dw, dbias, N, C);
                ro[k] = hzeros(NC), o[k] = hzeros(NC), mu[k] = hzeros(N), rs[k] = hzeros(N);
                if (withb) act_down(be, ro[k], dro, NC);
                act_down(be, o[k], dout_, NC);
                f32_down(be, mu[k], dm, N), f32_down(be, rs[k], dr, N);
                dfree(be, da), dfree(be, dw), dfree(be, dbias), dfree(be, dro), dfree(be, dout_);
                dfree(be, dm), dfree(be, dr);
                if (db) dfree(be, db);
            }
            char nm[96];
            snprintf(nm, sizeof nm, "ln_fwd%s N%d C%d out", withb ? "+res" : "", N, C);
            cmp(P, nm, o[1], o[0], NC, P->tol);
            if (withb) cmp(P, "ln_fwd resid_out", ro[1], ro[0], NC, P->tol);
            cmp(P, "ln_fwd mean", mu[1], mu[0], N, P->tol);
            cmp(P, "ln_fwd rstd", rs[1], rs[0], N, P->tol);
            for (int k = 0; k < 2; k++) free(ro[k]), free(o[k]), free(mu[k]), free(rs[k]);
        }
        /* backward, from the host statistics (identical inputs on both sides) */
        float *gi[2], *gw[2], *gb[2];
        void *bits[3] = {0};
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            void *dx = act_up(be, a, NC), *dw_a = act_up(be, w, C), *ddo = act_up(be, dout, NC);
            void *dinp = act_up(be, dinp0, NC);
            float *dm = f32_up(be, mean, N), *dr = f32_up(be, rstd, N);
            float *gwd = f32_up(be, dw0, C), *gbd = f32_up(be, db0, C);
            be->ops->layernorm_bwd(be, dinp, gwd, gbd, ddo, dx, dw_a, dm, dr, N, C);
            gi[k] = hzeros(NC), gw[k] = hzeros(C), gb[k] = hzeros(C);
            act_down(be, gi[k], dinp, NC), f32_down(be, gw[k], gwd, C), f32_down(be, gb[k], gbd, C);
            if (k) {
                void *first[3] = {raw_down(be, dinp, lt_act_bytes(be, NC)), raw_down(be, gwd, C * 4),
                                  raw_down(be, gbd, C * 4)};
                dfree(be, dinp);
                dinp = act_up(be, dinp0, NC);
                be->ops->upload(be, gwd, dw0, C * 4), be->ops->upload(be, gbd, db0, C * 4);
                be->ops->layernorm_bwd(be, dinp, gwd, gbd, ddo, dx, dw_a, dm, dr, N, C);
                bits[0] = raw_down(be, dinp, lt_act_bytes(be, NC));
                bits[1] = raw_down(be, gwd, C * 4), bits[2] = raw_down(be, gbd, C * 4);
                same_bits(P, "ln_bwd dinp", bits[0], first[0], lt_act_bytes(be, NC));
                same_bits(P, "ln_bwd dw", bits[1], first[1], C * 4);
                same_bits(P, "ln_bwd db", bits[2], first[2], C * 4);
                for (int i = 0; i < 3; i++) free(first[i]), free(bits[i]);
            }
            dfree(be, dx), dfree(be, dw_a), dfree(be, ddo), dfree(be, dinp), dfree(be, dm);
            dfree(be, dr), dfree(be, gwd), dfree(be, gbd);
        }
        char nm[96];
        snprintf(nm, sizeof nm, "ln_bwd N%d C%d dinp", N, C);
        cmp(P, nm, gi[1], gi[0], NC, P->tol);
        cmp(P, "ln_bwd dw", gw[1], gw[0], C, P->tol);
        cmp(P, "ln_bwd db", gb[1], gb[0], C, P->tol);
        for (int k = 0; k < 2; k++) free(gi[k]), free(gw[k]), free(gb[k]);
        free(a), free(b), free(w), free(bias), free(dout), free(dinp0), free(dw0), free(db0);
        free(mean), free(rstd);
    }
}

/* ======================= add_act ======================= */
/* out = a + b over act tensors: both backends take the fp32 sum and round it to
 * nearest even, so dut and ref agree exactly when their dtypes match (tolerance
 * 0), and the dut equals the host's a + b (rounded to bf16 in bf16) bit for bit.
 * Also: in place (out == a, out == b), pointers off the 16-byte grid (the scalar
 * kernel), and equality with layernorm_fwd's resid_out on the same device. */
static void t_add_act(const Pair *P) {
    static const size_t ns[] = {1, 7, 8, 13, 1000, 4097, 100003, 1000003};
    const double tol = P->ref->dtype == P->dut->dtype ? 0.0 : P->tol;
    for (int s = 0; s < 8; s++) {
        const size_t n = ns[s];
        if (g_quick && n > 100003) break;
        float *a = hrand(n, 2.f, P->bf16), *b = hrand(n, 1.f, P->bf16), *want = hzeros(n);
        for (size_t i = 0; i < n; i++)
            want[i] = P->dut->dtype == LT_BF16 ? lt_bf16_round(a[i] + b[i]) : a[i] + b[i];
        float *o[2], *ipa = hzeros(n), *ipb = hzeros(n), *off = hzeros(n);
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            void *da = act_up(be, a, n), *db = act_up(be, b, n), *dout = act_up(be, NULL, n);
            poison(be, dout, lt_act_bytes(be, n));
            be->ops->add_act(be, dout, da, db, n);
            o[k] = hzeros(n);
            act_down(be, o[k], dout, n);
            if (k) {
                be->ops->add_act(be, da, da, db, n); /* out == a */
                act_down(be, ipa, da, n);
                dfree(be, da);
                da = act_up(be, a, n);
                be->ops->add_act(be, db, da, db, n); /* out == b */
                act_down(be, ipb, db, n);
                dfree(be, db);
                db = act_up(be, b, n);
                if (n > 1) { /* inputs one element past the aligned start, out aligned */
                    const size_t es = be->act_size;
                    poison(be, dout, lt_act_bytes(be, n));
                    be->ops->add_act(be, dout, (char *)da + es, (char *)db + es, n - 1);
                    act_down(be, off, dout, n - 1);
                }
            }
            dfree(be, da), dfree(be, db), dfree(be, dout);
        }
        char nm[64];
        snprintf(nm, sizeof nm, "add_act n%zu", n);
        cmp(P, nm, o[1], o[0], n, tol);
        size_t bad = 0, bada = 0, badb = 0, bado = 0;
        for (size_t i = 0; i < n; i++) {
            bad += memcmp(&o[1][i], &want[i], 4) != 0;
            bada += memcmp(&ipa[i], &want[i], 4) != 0;
            badb += memcmp(&ipb[i], &want[i], 4) != 0;
            if (i + 1 < n) bado += memcmp(&off[i], &want[i + 1], 4) != 0;
        }
        printf("  %-5s add_act n=%-9zu exact vs host: %zu, out==a: %zu, out==b: %zu, "
               "unaligned: %zu mismatches\n", P->tag, n, bad, bada, badb, bado);
        CHECK(bad == 0, "add_act n=%zu: %zu elements differ from the host's a + b", n, bad);
        CHECK(bada == 0 && badb == 0, "add_act n=%zu in place: %zu (out == a), %zu (out == b)", n,
              bada, badb);
        CHECK(bado == 0, "add_act n=%zu unaligned pointers: %zu mismatches", n - 1, bado);
        free(o[0]), free(o[1]), free(ipa), free(ipb), free(off), free(a), free(b), free(want);
    }
    /* bitwise equal to the fused residual sum of layernorm_fwd on the same device */
    static const int shapes[][2] = {{7, 24}, {5, 50}, {33, 1600}};
    for (int s = 0; s < 3; s++) {
        LtBackend *be = P->dut;
        const int N = shapes[s][0], C = shapes[s][1];
        const size_t NC = (size_t)N * C;
        float *a = hrand(NC, 2.f, P->bf16), *b = hrand(NC, 1.f, P->bf16);
        float *w = hrand(C, 1.f, P->bf16), *bias = hrand(C, 1.f, P->bf16);
        void *da = act_up(be, a, NC), *db = act_up(be, b, NC), *dw = act_up(be, w, C);
        void *dbias = act_up(be, bias, C), *dro = act_up(be, NULL, NC), *dln = act_up(be, NULL, NC);
        void *dsum = act_up(be, NULL, NC);
        float *dm = f32_up(be, NULL, N), *dr = f32_up(be, NULL, N);
        poison(be, dro, lt_act_bytes(be, NC)), poison(be, dsum, lt_act_bytes(be, NC));
        be->ops->layernorm_fwd(be, dro, dln, dm, dr, da, db, dw, dbias, N, C);
        be->ops->add_act(be, dsum, da, db, NC);
        void *r1 = raw_down(be, dro, lt_act_bytes(be, NC)), *r2 = raw_down(be, dsum, lt_act_bytes(be, NC));
        char nm[64];
        snprintf(nm, sizeof nm, "add_act=ln resid N%d C%d", N, C);
        int eq = memcmp(r1, r2, lt_act_bytes(be, NC)) == 0;
        printf("  %-5s %-28s bitwise equal: %s\n", P->tag, nm, eq ? "yes" : "NO  <-- FAIL");
        CHECK(eq, "%s: add_act differs from layernorm_fwd resid_out", nm);
        free(r1), free(r2), free(a), free(b), free(w), free(bias);
        dfree(be, da), dfree(be, db), dfree(be, dw), dfree(be, dbias), dfree(be, dro);
        dfree(be, dln), dfree(be, dsum), dfree(be, dm), dfree(be, dr);
    }
}

/* ======================= linear ======================= */
/* bf16 activations (out, pre_gelu, dinp) are held to 4 bf16 ulps (2^-5)
 * relative: each side rounds its result once (1 ulp apart at most); the CPU
 * rounds the GEMM before adding the bias and applying GeLU (or its derivative)
 * where cuBLASLt's epilogue works on the fp32 sum (about 1.5 ulps more); and
 * cuBLASLt's kernels for operands off the 16-byte grid lose about one more.
 * The first GPU run measured up to 2.7 ulps (2.14e-2) against the old 1e-2.
 * dW and dbias are fp32 and keep the pair's tolerance. */
static void t_linear(const Pair *P) {
    static const int shapes[][3] = {{7, 24, 40}, {33, 100, 37}, {16, 64, 8},
                                    {64, 768, 2304}, {128, 768, 3072}, {100, 3072, 768}};
    const double tol = P->bf16 ? 0x1p-5 : P->tol;
    for (int s = 0; s < 6; s++) {
        if (g_quick && s >= 3) break;
        const int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        const size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
        const float ws = 1.f / sqrtf((float)C);
        float *inp = hrand(NC, 1.f, P->bf16), *w = hrand(OCC, ws * 1.7f, P->bf16);
        float *bias = hrand(OC, 0.5f, P->bf16), *dout = hrand(NO, 1.f, P->bf16);
        float *gpre = hrand(NC, 3.f, P->bf16), *dw0 = hrand(OCC, 1.f, 0), *db0 = hrand(OC, 1.f, 0);
        for (int variant = 0; variant < 4; variant++) {
            const int has_bias = variant & 1, gelu = variant >> 1;
            float *o[2], *pg[2], *gi[2], *gw[2], *gb[2];
            for (int k = 0; k < 2; k++) {
                LtBackend *be = k ? P->dut : P->ref;
                void *di = act_up(be, inp, NC), *dwt = act_up(be, w, OCC);
                void *dbias = has_bias ? act_up(be, bias, OC) : NULL;
                void *dout_a = act_up(be, dout, NO), *dg = gelu ? act_up(be, gpre, NC) : NULL;
                void *dy = act_up(be, NULL, NO), *dpre = gelu ? act_up(be, NULL, NO) : NULL;
                void *dinp = act_up(be, NULL, NC);
                float *gwd = f32_up(be, dw0, OCC), *gbd = f32_up(be, db0, OC);
                poison(be, dy, lt_act_bytes(be, NO)), poison(be, dinp, lt_act_bytes(be, NC));
                if (dpre) poison(be, dpre, lt_act_bytes(be, NO));
                be->ops->linear_fwd(be, dy, dpre, di, dwt, dbias, N, C, OC);
                be->ops->linear_bwd(be, dinp, gwd, has_bias ? gbd : NULL, dout_a, di, dwt, dg, N, C, OC);
                o[k] = hzeros(NO), pg[k] = hzeros(NO), gi[k] = hzeros(NC);
                gw[k] = hzeros(OCC), gb[k] = hzeros(OC);
                act_down(be, o[k], dy, NO), act_down(be, gi[k], dinp, NC);
                if (dpre) act_down(be, pg[k], dpre, NO);
                f32_down(be, gw[k], gwd, OCC), f32_down(be, gb[k], gbd, OC);
                if (k && variant == 3) { /* determinism of the whole backward */
                    void *f0 = raw_down(be, dinp, lt_act_bytes(be, NC)), *f1 = raw_down(be, gwd, OCC * 4);
                    void *f2 = raw_down(be, gbd, OC * 4);
                    be->ops->upload(be, gwd, dw0, OCC * 4), be->ops->upload(be, gbd, db0, OC * 4);
                    be->ops->linear_bwd(be, dinp, gwd, gbd, dout_a, di, dwt, dg, N, C, OC);
                    void *s0 = raw_down(be, dinp, lt_act_bytes(be, NC)), *s1 = raw_down(be, gwd, OCC * 4);
                    void *s2 = raw_down(be, gbd, OC * 4);
                    same_bits(P, "linear_bwd dinp", s0, f0, lt_act_bytes(be, NC));
                    same_bits(P, "linear_bwd dw", s1, f1, OCC * 4);
                    same_bits(P, "linear_bwd dbias", s2, f2, OC * 4);
                    free(f0), free(f1), free(f2), free(s0), free(s1), free(s2);
                }
                dfree(be, di), dfree(be, dwt), dfree(be, dout_a), dfree(be, dy), dfree(be, dinp);
                dfree(be, gwd), dfree(be, gbd);
                if (dbias) dfree(be, dbias);
                if (dg) dfree(be, dg);
                if (dpre) dfree(be, dpre);
            }
            char nm[96];
            snprintf(nm, sizeof nm, "lin %dx%dx%d%s%s out", N, C, OC, has_bias ? " +b" : "",
                     gelu ? " +gelu" : "");
            cmp(P, nm, o[1], o[0], NO, tol);
            if (gelu) cmp(P, "lin fwd pre_gelu", pg[1], pg[0], NO, tol);
            cmp(P, gelu ? "lin bwd dinp (dgelu)" : "lin bwd dinp", gi[1], gi[0], NC, tol);
            cmp(P, "lin bwd dw", gw[1], gw[0], OCC, P->tol);
            if (has_bias) cmp(P, "lin bwd dbias", gb[1], gb[0], OC, P->tol);
            for (int k = 0; k < 2; k++) free(o[k]), free(pg[k]), free(gi[k]), free(gw[k]), free(gb[k]);
        }
        free(inp), free(w), free(bias), free(dout), free(gpre), free(dw0), free(db0);
    }
}

/* ======================= grouped linears ======================= */
/* One backend's grouped forward and backward (or, loop != 0, linear_fwd / linear_bwd
 * group by group) on host inputs; the outputs downloaded. Rows 0..off[0]-1 and past
 * off[G] belong to no group (poisoned: NaN unless written). */
typedef struct {
    int G, C, OC, R, has_b, gelu;
    const int *off;
    const float *x, *dout, *gpre, *const *w, *const *b, *dw0, *db0;
} LgCall;
typedef struct {
    float *out, *pre, *dx, *dw, *db; /* dw (G, OC, C), db (G, OC) */
} LgOut;

static void lg_run(LtBackend *be, const LgCall *c, int loop, LgOut *o) {
    const int G = c->G, C = c->C, OC = c->OC;
    const size_t nx = (size_t)c->R * C, ny = (size_t)c->R * OC, nw = (size_t)OC * C;
    void *x = act_up(be, c->x, nx), *dy = act_up(be, c->dout, ny);
    void *gp = c->gelu ? act_up(be, c->gpre, nx) : NULL;
    void *out = act_up(be, NULL, ny), *pre = act_up(be, NULL, ny), *dx = act_up(be, NULL, nx);
    poison(be, out, lt_act_bytes(be, ny)), poison(be, pre, lt_act_bytes(be, ny));
    poison(be, dx, lt_act_bytes(be, nx));
    const void **w = lt_malloc(sizeof(void *) * 2 * (size_t)G), **b = w + G;
    float **dw = lt_malloc(sizeof(float *) * 2 * (size_t)G), **db = dw + G;
    for (int g = 0; g < G; g++) {
        w[g] = act_up(be, c->w[g], nw);
        b[g] = c->has_b ? act_up(be, c->b[g], (size_t)OC) : NULL;
        dw[g] = f32_up(be, c->dw0 + (size_t)g * nw, nw);
        db[g] = f32_up(be, c->db0 + (size_t)g * OC, (size_t)OC);
    }
    void *pg = c->gelu ? pre : NULL;
    if (!loop) {
        be->ops->linear_group_fwd(be, out, pg, x, w, c->has_b ? b : NULL, c->off, G, C, OC);
        be->ops->linear_group_bwd(be, dx, dw, c->has_b ? db : NULL, dy, x, w, gp, c->off, G, C, OC);
    }
    for (int g = 0; loop && g < G; g++) {
        const size_t r = (size_t)c->off[g];
        const int n = c->off[g + 1] - c->off[g];
        if (n <= 0) continue;
#define LG_ROWS(p, cols) ((p) ? (char *)(p) + lt_act_bytes(be, r * (size_t)(cols)) : NULL)
        be->ops->linear_fwd(be, LG_ROWS(out, OC), LG_ROWS(pg, OC), LG_ROWS(x, C), w[g], b[g], n,
                            C, OC);
        be->ops->linear_bwd(be, LG_ROWS(dx, C), dw[g], c->has_b ? db[g] : NULL, LG_ROWS(dy, OC),
                            LG_ROWS(x, C), w[g], LG_ROWS(gp, C), n, C, OC);
#undef LG_ROWS
    }
    o->out = hzeros(ny), o->pre = hzeros(ny), o->dx = hzeros(nx);
    o->dw = hzeros((size_t)G * nw), o->db = hzeros((size_t)G * OC);
    act_down(be, o->out, out, ny), act_down(be, o->pre, pre, ny), act_down(be, o->dx, dx, nx);
    for (int g = 0; g < G; g++) {
        f32_down(be, o->dw + (size_t)g * nw, dw[g], nw);
        f32_down(be, o->db + (size_t)g * OC, db[g], (size_t)OC);
        dfree(be, (void *)w[g]), dfree(be, dw[g]), dfree(be, db[g]);
        if (b[g]) dfree(be, (void *)b[g]);
    }
    dfree(be, x), dfree(be, dy), dfree(be, out), dfree(be, pre), dfree(be, dx);
    if (gp) dfree(be, gp);
    free(w), free(dw);
}
static void lg_free(LgOut *o) { free(o->out), free(o->pre), free(o->dx), free(o->dw), free(o->db); }

/* The MoE experts' grouped linears (cuBLAS's grouped GEMM where bias-free and without
 * GeLU, per group through cuBLASLt otherwise; GPU only) against the CPU, and the
 * grouped call against a loop of linear_fwd / linear_bwd over the groups on the same
 * backend: uneven and empty groups (first, middle, last), rows in no group. */
static void t_linear_group(const Pair *P) {
    static const struct {
        int G, C, OC, first, last, n[6];
    } cs[] = {{4, 64, 96, 2, 3, {5, 0, 17, 3}},
              {6, 24, 40, 0, 0, {0, 9, 1, 0, 30, 2}},
              {3, 37, 33, 1, 0, {7, 11, 0}},
              {5, 128, 256, 0, 2, {40, 3, 0, 64, 1}}};
    const double tol = P->bf16 ? 0x1p-5 : P->tol;
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++) {
        const int G = cs[s].G, C = cs[s].C, OC = cs[s].OC;
        int off[7];
        off[0] = cs[s].first;
        for (int g = 0; g < G; g++) off[g + 1] = off[g] + cs[s].n[g];
        const int R = off[G] + cs[s].last;
        const size_t nx = (size_t)R * C, ny = (size_t)R * OC, nw = (size_t)OC * C;
        float *x = hrand(nx, 1.f, P->bf16), *dout = hrand(ny, 1.f, P->bf16);
        float *gpre = hrand(nx, 3.f, P->bf16), *dw0 = hrand((size_t)G * nw, 1.f, 0);
        float *db0 = hrand((size_t)G * OC, 1.f, 0), *w[6], *b[6];
        for (int g = 0; g < G; g++)
            w[g] = hrand(nw, 1.7f / sqrtf((float)C), P->bf16), b[g] = hrand(OC, 0.5f, P->bf16);
        for (int v = 0; v < 4; v++) {
            const LgCall c = {G, C, OC, R, v & 1, v >> 1, off, x, dout, gpre,
                              (const float *const *)w, (const float *const *)b, dw0, db0};
            LgOut ref, got, loop;
            lg_run(P->ref, &c, 0, &ref);
            lg_run(P->dut, &c, 0, &got);
            lg_run(P->dut, &c, 1, &loop);
            char nm[96];
            snprintf(nm, sizeof nm, "lgrp %d:%dx%d%s%s", G, C, OC, c.has_b ? " +b" : "",
                     c.gelu ? " +gelu" : "");
            const LgOut *o[2] = {&ref, &loop};
            static const char *vs[2] = {"cpu", "loop"};
            for (int k = 0; k < 2; k++) {
                char what[128];
                snprintf(what, sizeof what, "%s out/%s", nm, vs[k]);
                cmp(P, what, got.out, o[k]->out, ny, tol);
                if (c.gelu) cmp(P, "lgrp pre_gelu", got.pre, o[k]->pre, ny, tol);
                snprintf(what, sizeof what, "%s dinp/%s", nm, vs[k]);
                cmp(P, what, got.dx, o[k]->dx, nx, tol);
                cmp(P, "lgrp dw", got.dw, o[k]->dw, (size_t)G * nw, P->tol);
                if (c.has_b) cmp(P, "lgrp dbias", got.db, o[k]->db, (size_t)G * OC, P->tol);
            }
            if (v == 0) { /* the grouped backward twice: the same bits */
                LgOut again;
                lg_run(P->dut, &c, 0, &again);
                same_bits(P, "lgrp dinp", again.dx, got.dx, nx * sizeof(float));
                same_bits(P, "lgrp dw", again.dw, got.dw, (size_t)G * nw * sizeof(float));
                lg_free(&again);
                /* model.moe_grouped_gemm=false: the grouped entries run the loop's
                 * GEMMs, bit for bit */
                LgOut per;
                P->dut->moe_gemm_per_expert = 1;
                lg_run(P->dut, &c, 0, &per);
                P->dut->moe_gemm_per_expert = 0;
                same_bits(P, "lgrp per-expert out", per.out, loop.out, ny * sizeof(float));
                same_bits(P, "lgrp per-expert dinp", per.dx, loop.dx, nx * sizeof(float));
                same_bits(P, "lgrp per-expert dw", per.dw, loop.dw, (size_t)G * nw * sizeof(float));
                lg_free(&per);
            }
            lg_free(&ref), lg_free(&got), lg_free(&loop);
        }
        for (int g = 0; g < G; g++) free(w[g]), free(b[g]);
        free(x), free(dout), free(gpre), free(dw0), free(db0);
    }
}

/* ======================= gelu ======================= */
static void t_gelu(const Pair *P) {
    static const size_t ns[] = {5, 1000, 100003}; /* 5: under one bf16 pack */
    for (int s = 0; s < 3; s++) {
        const size_t n = ns[s];
        float *x = hrand(n, 5.f, P->bf16), *dy = hrand(n, 1.f, P->bf16), *y[2], *dx[2];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            void *dxin = act_up(be, x, n), *ddy = act_up(be, dy, n);
            void *dout = act_up(be, NULL, n), *dinp = act_up(be, NULL, n);
            poison(be, dout, lt_act_bytes(be, n)), poison(be, dinp, lt_act_bytes(be, n));
            be->ops->gelu_fwd(be, dout, dxin, n);
            be->ops->gelu_bwd(be, dinp, dxin, ddy, n);
            y[k] = hzeros(n), dx[k] = hzeros(n);
            act_down(be, y[k], dout, n), act_down(be, dx[k], dinp, n);
            dfree(be, dxin), dfree(be, ddy), dfree(be, dout), dfree(be, dinp);
        }
        char nm[64];
        snprintf(nm, sizeof nm, "gelu_fwd n%zu", n);
        cmp(P, nm, y[1], y[0], n, P->tol);
        snprintf(nm, sizeof nm, "gelu_bwd n%zu", n);
        cmp(P, nm, dx[1], dx[0], n, P->tol);
        for (int k = 0; k < 2; k++) free(y[k]), free(dx[k]);
        free(x), free(dy);
    }
}

/* ======================= rmsnorm ======================= */
/* One backend: the forward (residual add when b; resid_out NULL otherwise) into ro, o, rs;
 * when gi, the backward from the host's x = a and its rstd rh, accumulating into copies of
 * dinp0 and dw0 into gi, gw; when bits, the raw bytes of that backward and of a second one
 * from the same start (bits[0..1] first, bits[2..3] second: dinp, dw). */
static void run_rmsnorm(LtBackend *be, int N, int C, float eps, const float *a, const float *b,
                        const float *w, const float *dy, const float *rh, const float *dinp0,
                        const float *dw0, float *ro, float *o, float *rs, float *gi, float *gw,
                        void **bits) {
    const size_t NC = (size_t)N * C, ab = lt_act_bytes(be, NC);
    void *da = act_up(be, a, NC), *db = b ? act_up(be, b, NC) : NULL, *dw = act_up(be, w, C);
    void *dro = act_up(be, NULL, NC), *dout = act_up(be, NULL, NC);
    float *drs = f32_up(be, NULL, N);
    poison(be, dro, ab), poison(be, dout, ab), poison(be, drs, N * 4);
    be->ops->rmsnorm_fwd(be, b ? dro : NULL, dout, drs, da, db, dw, eps, N, C);
    if (b) act_down(be, ro, dro, NC);
    act_down(be, o, dout, NC), f32_down(be, rs, drs, N);
    if (gi) {
        void *ddy = act_up(be, dy, NC), *dinp = act_up(be, dinp0, NC);
        float *drh = f32_up(be, rh, N), *gwd = f32_up(be, dw0, C);
        be->ops->rmsnorm_bwd(be, dinp, gwd, ddy, da, dw, drh, N, C);
        act_down(be, gi, dinp, NC), f32_down(be, gw, gwd, C);
        if (bits) {
            bits[0] = raw_down(be, dinp, ab), bits[1] = raw_down(be, gwd, C * 4);
            be->ops->upload(be, gwd, dw0, C * 4);
            dfree(be, dinp);
            dinp = act_up(be, dinp0, NC);
            be->ops->rmsnorm_bwd(be, dinp, gwd, ddy, da, dw, drh, N, C);
            bits[2] = raw_down(be, dinp, ab), bits[3] = raw_down(be, gwd, C * 4);
        }
        dfree(be, ddy), dfree(be, dinp), dfree(be, drh), dfree(be, gwd);
    }
    dfree(be, da), dfree(be, dw), dfree(be, dro), dfree(be, dout), dfree(be, drs);
    if (db) dfree(be, db);
}

static void t_rmsnorm(const Pair *P) {
    for (int s = 0; s < 7; s++) {
        if (g_quick && s >= 5) break;
        const int N = norm_shapes[s][0], C = norm_shapes[s][1];
        const size_t NC = (size_t)N * C;
        const float eps = s % 2 ? 0.25f : 1e-5f; /* 0.25: eps moves rstd well past tol */
        float *a = hrand(NC, 2.f, P->bf16), *b = hrand(NC, 1.f, P->bf16);
        float *w = hrand(C, 1.f, P->bf16), *dy = hrand(NC, 1.f, P->bf16);
        float *dinp0 = hrand(NC, 1.f, P->bf16), *dw0 = hrand(C, 1.f, 0), *rh = hzeros(N);
        for (int r = 0; r < N; r++) { /* host rstd of x = a, for the backward */
            double ss = 0;
            for (int c = 0; c < C; c++) ss += (double)a[(size_t)r * C + c] * a[(size_t)r * C + c];
            rh[r] = (float)(1.0 / sqrt(ss / C + eps));
        }
        for (int withb = 0; withb < 2; withb++) {
            float *ro[2], *o[2], *rs[2], *gi[2], *gw[2];
            void *bits[4] = {0};
            for (int k = 0; k < 2; k++) {
                ro[k] = hzeros(NC), o[k] = hzeros(NC), rs[k] = hzeros(N);
                gi[k] = withb ? hzeros(NC) : NULL, gw[k] = hzeros(C);
                run_rmsnorm(k ? P->dut : P->ref, N, C, eps, a, withb ? b : NULL, w, dy, rh, dinp0,
                            dw0, ro[k], o[k], rs[k], gi[k], gw[k], k && withb ? bits : NULL);
            }
            char nm[96];
            snprintf(nm, sizeof nm, "rms_fwd%s N%d C%d out", withb ? "+res" : "", N, C);
            cmp(P, nm, o[1], o[0], NC, P->tol);
            if (withb) cmp(P, "rms_fwd resid_out", ro[1], ro[0], NC, P->tol);
            cmp(P, "rms_fwd rstd", rs[1], rs[0], N, P->tol);
            if (withb) { /* the backward once per shape */
                snprintf(nm, sizeof nm, "rms_bwd N%d C%d dinp", N, C);
                cmp(P, nm, gi[1], gi[0], NC, P->tol);
                cmp(P, "rms_bwd dw", gw[1], gw[0], C, P->tol);
                same_bits(P, "rms_bwd dinp", bits[2], bits[0], lt_act_bytes(P->dut, NC));
                same_bits(P, "rms_bwd dw", bits[3], bits[1], C * 4);
                for (int i = 0; i < 4; i++) free(bits[i]);
            }
            for (int k = 0; k < 2; k++) free(ro[k]), free(o[k]), free(rs[k]), free(gi[k]), free(gw[k]);
        }
        free(a), free(b), free(w), free(dy), free(dinp0), free(dw0), free(rh);
    }
}

/* ======================= swiglu ======================= */
/* One activation (glu; NULL: SwiGLU) on inputs uniform in [-scale, scale). */
static void t_swiglu_glu(const Pair *P, const LtGlu *glu, float scale, const char *what) {
    /* F 3: under one pack; F 20: fp32 packs, bf16 single elements; F 100, 1376: packs */
    static const int shapes[][2] = {{5, 3}, {7, 20}, {33, 100}, {64, 1376}, {512, 3584}};
    for (int s = 0; s < 5; s++) {
        if (g_quick && s == 4) break;
        const int N = shapes[s][0], F = shapes[s][1];
        const size_t n = (size_t)N * F;
        float *gu = hrand(2 * n, scale, P->bf16), *dy = hrand(n, 1.f, P->bf16), *y[2], *dg[2];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            void *dgu_in = act_up(be, gu, 2 * n), *ddy = act_up(be, dy, n);
            void *dout = act_up(be, NULL, n), *dgu = act_up(be, NULL, 2 * n);
            poison(be, dout, lt_act_bytes(be, n)), poison(be, dgu, lt_act_bytes(be, 2 * n));
            be->ops->swiglu_fwd(be, dout, dgu_in, N, F, glu);
            be->ops->swiglu_bwd(be, dgu, dgu_in, ddy, N, F, glu);
            y[k] = hzeros(n), dg[k] = hzeros(2 * n);
            act_down(be, y[k], dout, n), act_down(be, dg[k], dgu, 2 * n);
            dfree(be, dgu_in), dfree(be, ddy), dfree(be, dout), dfree(be, dgu);
        }
        char nm[80];
        snprintf(nm, sizeof nm, "%s_fwd N%d F%d", what, N, F);
        cmp(P, nm, y[1], y[0], n, P->tol);
        snprintf(nm, sizeof nm, "%s_bwd dgu N%d F%d", what, N, F);
        cmp(P, nm, dg[1], dg[0], 2 * n, P->tol);
        for (int k = 0; k < 2; k++) free(y[k]), free(dg[k]);
        free(gu), free(dy);
    }
}

/* Plain SwiGLU; gpt-oss's quick GeGLU (clamp 7, offset 1; inputs to 9 cross the clamp);
 * silu with an offset and a clamp most inputs cross. */
static void t_swiglu(const Pair *P) {
    static const LtGlu oss = {1, 1, 7}, silu = {0, -0.5f, 1.5f};
    t_swiglu_glu(P, NULL, 4.f, "swiglu");
    t_swiglu_glu(P, &oss, 9.f, "oss_glu");
    t_swiglu_glu(P, &silu, 4.f, "clamp_glu");
}

/* ======================= rope ======================= */
/* Forward on one tensor and inverse (the backward) on another, in place, with Llama 3.1's
 * scaled table; NKV < NH (grouped K/V); the v heads must come back unchanged. The inverse
 * reads its table one float past an aligned start (a copy at cs + 1): aligned qkv with a
 * misaligned table must take the scalar path. */
static void t_rope(const Pair *P) {
    /* HD/2 3: single pairs; 4: fp32 packs, bf16 single pairs; 8, 64: packs in both */
    static const int shapes[][5] = {
        {2, 5, 4, 2, 8}, {3, 7, 3, 1, 6}, {2, 9, 4, 4, 16}, {1, 33, 8, 2, 128}, {2, 1024, 32, 8, 128}};
    const LtRopeScaling l3 = {LT_ROPE_SCALING_LLAMA3, 8, 1, 4, 64, 0, 0, 0, 0};
    for (int s = 0; s < 5; s++) {
        if (g_quick && s == 4) break;
        const int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], NKV = shapes[s][3];
        const int HD = shapes[s][4], NA = NH + 2 * NKV;
        const size_t n = (size_t)B * T * NA * HD;
        float *cs = lt_malloc((size_t)T * HD * sizeof(float));
        lt_rope_table(cs, T, HD, 500000.0, &l3);
        float *x = hrand(n, 1.f, P->bf16), *g = hrand(n, 1.f, P->bf16), *y[2], *gi[2];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            float *dcs = f32_up(be, cs, (size_t)T * HD), *dcs1 = f32_up(be, NULL, (size_t)T * HD + 1);
            void *dx = act_up(be, x, n), *dg = act_up(be, g, n);
            be->ops->upload(be, dcs1 + 1, cs, (size_t)T * HD * sizeof(float));
            be->ops->rope(be, dx, dcs, NULL, B, T, NH, NKV, HD, 0);
            be->ops->rope(be, dg, dcs1 + 1, NULL, B, T, NH, NKV, HD, 1);
            y[k] = hzeros(n), gi[k] = hzeros(n);
            act_down(be, y[k], dx, n), act_down(be, gi[k], dg, n);
            dfree(be, dcs), dfree(be, dcs1), dfree(be, dx), dfree(be, dg);
        }
        char nm[64];
        snprintf(nm, sizeof nm, "rope B%d T%d NH%d NKV%d HD%d", B, T, NH, NKV, HD);
        cmp(P, nm, y[1], y[0], n, P->tol);
        cmp(P, "rope inverse", gi[1], gi[0], n, P->tol);
        size_t vbad = 0; /* the inputs are exact in the act dtype: v must come back bit for bit */
        for (size_t i = 0; i < n; i++)
            if ((int)(i / HD % NA) >= NH + NKV) vbad += memcmp(&y[1][i], &x[i], 4) != 0;
        printf("  %-5s %-28s v heads changed: %zu\n", P->tag, "rope", vbad);
        CHECK(vbad == 0, "rope changed %zu elements of the v heads", vbad);
        for (int k = 0; k < 2; k++) free(y[k]), free(gi[k]);
        free(cs), free(x), free(g);
    }
}

/* ======================= qk_norm ======================= */
/* model.qk_layernorm's per-head RMSNorm of the q and k heads inside qkv, in place: the
 * forward's qkv (v heads back bit for bit), kept input and rstd, then the backward in place
 * on a dqkv, accumulating into dwq, dwk (start values dw0), against the reference; the
 * backward run twice from the same start must agree bitwise. HD 6: a partial warp; 64, 128:
 * two and four elements per lane; N 300: several tokens per block of the weight gradient. */
static void t_qk_norm(const Pair *P) {
    static const int shapes[][4] = {
        {5, 4, 2, 8}, {7, 3, 1, 6}, {33, 8, 2, 64}, {300, 4, 4, 128}, {4096, 16, 4, 64}};
    for (int s = 0; s < 5; s++) {
        if (g_quick && s == 4) break;
        const int N = shapes[s][0], NH = shapes[s][1], NKV = shapes[s][2], HD = shapes[s][3];
        const int NA = NH + 2 * NKV, NQK = NH + NKV;
        const size_t n = (size_t)N * NA * HD, nk = (size_t)N * NQK * HD, nr = (size_t)N * NQK;
        const float eps = s % 2 ? 0.25f : 1e-6f;
        float *x = hrand(n, 2.f, P->bf16), *g = hrand(n, 1.f, P->bf16);
        float *wq = hrand(HD, 1.f, P->bf16), *wk = hrand(HD, 1.f, P->bf16), *dw0 = hrand(2 * HD, 1.f, 0);
        float *y[2], *xi[2], *rs[2], *dx[2], *dw[2];
        void *bits[4] = {0};
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            void *dq = act_up(be, x, n), *dg = act_up(be, g, n), *dxin = act_up(be, NULL, nk);
            void *dwq = act_up(be, wq, HD), *dwk = act_up(be, wk, HD);
            float *drs = f32_up(be, NULL, nr), *gw = f32_up(be, dw0, 2 * HD);
            poison(be, dxin, lt_act_bytes(be, nk)), poison(be, drs, nr * 4);
            be->ops->qk_norm_fwd(be, dq, dxin, drs, dwq, dwk, eps, N, NH, NKV, HD);
            be->ops->qk_norm_bwd(be, dg, gw, gw + HD, dxin, dwq, dwk, drs, N, NH, NKV, HD);
            y[k] = hzeros(n), xi[k] = hzeros(nk), rs[k] = hzeros(nr), dx[k] = hzeros(n);
            dw[k] = hzeros(2 * HD);
            act_down(be, y[k], dq, n), act_down(be, xi[k], dxin, nk), f32_down(be, rs[k], drs, nr);
            act_down(be, dx[k], dg, n), f32_down(be, dw[k], gw, 2 * HD);
            if (k) { /* the backward again from the same start */
                bits[0] = raw_down(be, dg, lt_act_bytes(be, n)), bits[1] = raw_down(be, gw, 2 * HD * 4);
                dfree(be, dg);
                dg = act_up(be, g, n);
                be->ops->upload(be, gw, dw0, 2 * HD * 4);
                be->ops->qk_norm_bwd(be, dg, gw, gw + HD, dxin, dwq, dwk, drs, N, NH, NKV, HD);
                bits[2] = raw_down(be, dg, lt_act_bytes(be, n)), bits[3] = raw_down(be, gw, 2 * HD * 4);
            }
            dfree(be, dq), dfree(be, dg), dfree(be, dxin), dfree(be, dwq), dfree(be, dwk);
            dfree(be, drs), dfree(be, gw);
        }
        char nm[80];
        snprintf(nm, sizeof nm, "qk_norm N%d NH%d NKV%d HD%d", N, NH, NKV, HD);
        cmp(P, nm, y[1], y[0], n, P->tol);
        cmp(P, "qk_norm kept input", xi[1], xi[0], nk, 0.0);
        cmp(P, "qk_norm rstd", rs[1], rs[0], nr, P->tol);
        cmp(P, "qk_norm_bwd dqkv", dx[1], dx[0], n, P->tol);
        cmp(P, "qk_norm_bwd dwq | dwk", dw[1], dw[0], 2 * HD, P->tol);
        same_bits(P, "qk_norm_bwd dqkv", bits[2], bits[0], lt_act_bytes(P->dut, n));
        same_bits(P, "qk_norm_bwd dw", bits[3], bits[1], 2 * HD * 4);
        size_t vbad = 0; /* v heads: the forward's and the backward's untouched */
        for (size_t i = 0; i < n; i++)
            if ((int)(i / HD % NA) >= NQK)
                vbad += memcmp(&y[1][i], &x[i], 4) != 0 || memcmp(&dx[1][i], &g[i], 4) != 0;
        CHECK(vbad == 0, "qk_norm changed %zu elements of the v heads", vbad);
        for (int k = 0; k < 2; k++) free(y[k]), free(xi[k]), free(rs[k]), free(dx[k]), free(dw[k]);
        for (int i = 0; i < 4; i++) free(bits[i]);
        free(x), free(g), free(wq), free(wk), free(dw0);
    }
}

/* ======================= attention ======================= */
/* After the attention case on a cuDNN pair: cuDNN must have run forward and
 * backward calls (the shapes its rules leave to lattice are reported). */
static void check_cudnn_ran(const Pair *P, const LtAttnInfo *before) {
    LtAttnInfo now;
    if (!P->cudnn) return;
    CHECK(lt_cuda_attention_info(P->dut, &now) == 0 && now.choice.cudnn, "not a cuDNN backend");
    const long fwd = now.cudnn_calls[0] - before->cudnn_calls[0];
    const long bwd = now.cudnn_calls[1] - before->cudnn_calls[1];
    const long fb = now.fallback_calls[0] + now.fallback_calls[1] - before->fallback_calls[0] -
                    before->fallback_calls[1];
    printf("  cuDNN %ld: %ld forward and %ld backward calls, %ld left to lattice\n",
           now.cudnn_version, fwd, bwd, fb);
    if (fb) printf("  last left to lattice: %s\n", now.last_fallback);
    if (g_offset) { /* buffers off the 16-byte grid: cuDNN's rules send every call to lattice
                     * (the reason reported is the first rule a call breaks: a shape rule
                     * can come before the alignment's, as T 300 on cuDNN 9.14 did) */
        CHECK(fwd == 0 && bwd == 0 && fb > 0,
              "misaligned buffers: cuDNN ran %ld forward and %ld backward calls, %ld left to "
              "lattice (last: %s)", fwd, bwd, fb, now.last_fallback);
        return;
    }
    CHECK(fwd > 0 && bwd > 0, "cuDNN ran %ld forward and %ld backward calls", fwd, bwd);
}

/* Shapes: B, T, NH query heads, NKV key/value heads, HD; quick: also in --quick
 * (and the emulation). Grouped K/V (NKV < NH) on each path: tensor-core head
 * dims with 64-row (HD <= 64) and 32-row (HD > 64) dK/dV query tiles, T not a
 * tile multiple (a key tile's steps wrap from one query head to the next at
 * different places), multi-query, and generic-path head dims. */
static const struct {
    int B, T, NH, NKV, HD, quick;
} attn_shapes[] = {
    {1, 1, 1, 1, 64, 1},    {2, 17, 3, 3, 64, 1},   {1, 100, 2, 2, 32, 1},
    {2, 129, 2, 2, 80, 1},  {1, 200, 2, 2, 96, 1},  {1, 257, 2, 2, 128, 1},
    {1, 70, 2, 2, 40, 1},   {1, 33, 1, 1, 24, 1},   {2, 1024, 4, 4, 64, 0},
    {1, 100, 4, 2, 32, 1},  {2, 70, 4, 1, 64, 1},   {1, 80, 6, 2, 96, 1},
    {1, 150, 4, 2, 128, 1}, {1, 33, 3, 1, 24, 1},   {2, 45, 4, 2, 40, 1},
    {1, 700, 2, 2, 128, 0}, {1, 300, 1, 1, 200, 0}, {2, 256, 2, 2, 128, 0},
    {2, 512, 8, 2, 128, 0}, {1, 700, 4, 1, 64, 0},  {1, 300, 6, 3, 80, 0},
};

/* Packed documents for attention_docs: each sequence cut into documents of
 * lengths cycling through 1, 37, 64, 5, 130 (starting at an offset per row),
 * so boundaries fall inside and on the edges of the 32- and 64-row tiles;
 * into doc each token's document's first token, and returned the key starts:
 * doc, or with W >= 0 also a sliding window of W keys before the query
 * (model.window_size with documents), whose band crosses the tiles. */
static int32_t *doc_starts(int B, int T, int W, int32_t **doc) {
    static const int len[] = {1, 37, 64, 5, 130};
    int32_t *ks = lt_malloc((size_t)B * T * sizeof(int32_t));
    *doc = lt_malloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int t = 0, k = b, start = 0, left = len[b % 5]; t < T; t++, left--) {
            if (!left) start = t, left = len[++k % 5];
            const int from = W >= 0 ? t - W : 0;
            (*doc)[(size_t)b * T + t] = start;
            ks[(size_t)b * T + t] = from > start ? from : start;
        }
    return ks;
}

/* One attention call: its shape, kstart (host, B*T; NULL: causal) and the
 * window argument (backend.h); doc (NULL: none): the documents behind ks,
 * declared to the backend (attention_documents) with doc_window; sink (host,
 * NH; NULL: none): the softmax offsets (attention sinks). */
typedef struct {
    int B, T, NH, NKV, HD;
    const int32_t *ks;
    int window;
    const int32_t *doc;
    int doc_window;
    const float *sink;
} AttnCall;

/* c's kstart on be (NULL without one), its documents declared when c has them. */
static int32_t *kstart_up(LtBackend *be, const AttnCall *c) {
    if (!c->ks) return NULL;
    int32_t *dks = i32_up(be, c->ks, (size_t)c->B * c->T);
    if (c->doc && be->ops->attention_documents)
        be->ops->attention_documents(be, dks, c->doc, c->doc_window, c->B, c->T);
    return dks;
}

/* The call's forward on be from qkv (host): out and lse downloaded into o
 * and l (B*T*NH*HD and B*NH*T floats). */
static void attn_fwd_on(LtBackend *be, const AttnCall *c, const float *qkv, float *o, float *l) {
    const size_t nq = (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->HD;
    const size_t no = (size_t)c->B * c->T * c->NH * c->HD, nl = (size_t)c->B * c->NH * c->T;
    void *dq = act_up(be, qkv, nq), *dout_ = act_up(be, NULL, no);
    float *dl = f32_up(be, NULL, nl);
    int32_t *dks = kstart_up(be, c);
    void *dsink = c->sink ? act_up(be, c->sink, (size_t)c->NH) : NULL;
    poison(be, dout_, lt_act_bytes(be, no)), poison(be, dl, nl * 4);
    be->ops->attention_fwd(be, dout_, dl, dq, dsink, dks, c->window, c->B, c->T, c->NH, c->NKV,
                           c->HD);
    act_down(be, o, dout_, no), f32_down(be, l, dl, nl);
    dfree(be, dout_), dfree(be, dl), dfree(be, dq);
    if (dks) dfree(be, dks);
    if (dsink) dfree(be, dsink);
}

/* The call's backward on be from qkv, dout and a forward's out and lse (all
 * host): dqkv downloaded into g; with sinks d offsets into gs (accumulated
 * onto ones). bitwise: run it again and require the same bytes. */
static void attn_bwd_on(const Pair *P, LtBackend *be, const AttnCall *c, const float *qkv,
                        const float *dout, const float *out, const float *lse, float *g,
                        float *gs, int bitwise) {
    const size_t nq = (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->HD;
    const size_t no = (size_t)c->B * c->T * c->NH * c->HD, nl = (size_t)c->B * c->NH * c->T;
    void *dq = act_up(be, qkv, nq), *dy = act_up(be, dout, no), *dout_ = act_up(be, out, no);
    float *dl = f32_up(be, lse, nl);
    int32_t *dks = kstart_up(be, c);
    void *dqkv = act_up(be, NULL, nq), *dsink = c->sink ? act_up(be, c->sink, (size_t)c->NH) : NULL;
    float *ones = hzeros((size_t)c->NH);
    for (int h = 0; h < c->NH; h++) ones[h] = 1.f;
    float *ds = c->sink ? f32_up(be, ones, (size_t)c->NH) : NULL;
    poison(be, dqkv, lt_act_bytes(be, nq));
    be->ops->attention_bwd(be, dqkv, ds, dy, dq, dout_, dl, dsink, dks, c->window, c->B, c->T,
                           c->NH, c->NKV, c->HD);
    act_down(be, g, dqkv, nq);
    if (ds) f32_down(be, gs, ds, (size_t)c->NH);
    if (bitwise) {
        if (ds) be->ops->upload(be, ds, ones, (size_t)c->NH * sizeof(float));
        void *first = raw_down(be, dqkv, lt_act_bytes(be, nq));
        poison(be, dqkv, lt_act_bytes(be, nq));
        be->ops->attention_bwd(be, dqkv, ds, dy, dq, dout_, dl, dsink, dks, c->window, c->B, c->T,
                               c->NH, c->NKV, c->HD);
        void *bits = raw_down(be, dqkv, lt_act_bytes(be, nq));
        same_bits(P, "attn_bwd dqkv", bits, first, lt_act_bytes(be, nq));
        free(first), free(bits);
        if (ds) {
            float *again = hzeros((size_t)c->NH);
            f32_down(be, again, ds, (size_t)c->NH);
            same_bits(P, "attn_bwd d offsets", again, gs, (size_t)c->NH * sizeof(float));
            free(again);
        }
    }
    dfree(be, dq), dfree(be, dy), dfree(be, dout_), dfree(be, dl), dfree(be, dqkv);
    if (dks) dfree(be, dks);
    if (dsink) dfree(be, dsink), dfree(be, ds);
    free(ones);
}

/* The call on P's reference and device under test, forward and backward
 * (both backwards from the reference forward's out and lse), compared at the
 * pair's bound (bf16: attn_bound.h, times slack); tag names the masks in the
 * lines printed. */
static void attn_pair(const Pair *P, const AttnCall *c, const char *tag, double slack) {
    const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HD = c->HD;
    const size_t nq = (size_t)B * T * (NH + 2 * NKV) * HD, no = (size_t)B * T * NH * HD;
    const size_t nl = (size_t)B * NH * T;
    float *qkv = hrand(nq, 1.7f, P->bf16), *dout = hrand(no, 1.f, P->bf16);
    float *o[2], *l[2], *g[2], *gs[2];
    for (int k = 0; k < 2; k++) {
        o[k] = hzeros(no), l[k] = hzeros(nl), g[k] = hzeros(nq), gs[k] = hzeros((size_t)NH);
        attn_fwd_on(k ? P->dut : P->ref, c, qkv, o[k], l[k]);
    }
    float *oin = o[0];
    if (P->bf16)
        for (size_t i = 0; i < no; i++) oin[i] = lt_bf16_round(oin[i]);
    for (int k = 0; k < 2; k++)
        attn_bwd_on(P, k ? P->dut : P->ref, c, qkv, dout, oin, l[0], g[k], gs[k],
                    k && !P->nondet);
    char nm[96];
    double tol_out = P->tol, tol_dqkv = P->tol; /* bf16: see attn_bound.h */
    if (P->bf16)
        attn_bf16_bounds(qkv, dout, c->ks, B, T, NH, NKV, HD, P->tol, &tol_out, &tol_dqkv);
    /* fp32: dK and dV sum T x (NH / NKV) products in an order of each path's
     * own, so their rounding grows like the square root of that count (the
     * first GPU run measured 2.5e-5 at T 700 with 4 heads a group, against a
     * flat 1e-5) */
    else tol_dqkv = P->tol * fmax(1.0, sqrt((double)T * (NH / NKV) / 64.0));
    snprintf(nm, sizeof nm, "attn_fwd%s B%d T%d NH%d NKV%d HD%d out", tag, B, T, NH, NKV, HD);
    cmp(P, nm, o[1], o[0], no, slack * tol_out);
    cmp(P, "attn_fwd lse", l[1], l[0], nl, slack * P->tol);
    snprintf(nm, sizeof nm, "attn_bwd%s T%d NH%d NKV%d HD%d dqkv", tag, T, NH, NKV, HD);
    cmp(P, nm, g[1], g[0], nq, slack * tol_dqkv);
    /* d offsets: B*T terms exp(o - lse) D, each as accurate as lse and D */
    if (c->sink) cmp(P, "attn_bwd d offsets", gs[1], gs[0], (size_t)NH, slack * tol_dqkv);
    for (int k = 0; k < 2; k++) free(o[k]), free(l[k]), free(g[k]), free(gs[k]);
    free(qkv), free(dout);
}

/* After one documents call on the cuDNN pair: per direction, cuDNN must have
 * run every call its rules take (lt_attn_cudnn_call_ok for this GPU and
 * cuDNN, the declared layout's ragged batch: cuDNN 9.6+, sm_90+ but not
 * sm_12x, a backward's head dim a multiple of 16; misaligned buffers never)
 * and no other. */
static void check_cudnn_docs(const Pair *P, const AttnCall *c, const LtAttnInfo *before) {
    LtAttnInfo now;
    if (!P->cudnn) return;
    CHECK(lt_cuda_attention_info(P->dut, &now) == 0 && now.choice.cudnn, "not a cuDNN backend");
    const LtAttnEnv env = {.want = LT_ATTN_CUDNN, .cuda = 1, .bf16 = 1, .sm = now.sm,
                           .cudnn_version = now.cudnn_version, .head_dim = c->HD};
    const int docs = lt_attn_doc_count(c->doc, c->B, c->T, NULL, 0);
    for (int d = 0; d < 2; d++) {
        const LtAttnShape s = {(LtAttnDir)d, c->B,         c->T, c->NH, c->NKV, c->HD,
                               c->doc_window, 1, lt_attn_ragged_batch(c->B, docs)};
        char why[240] = "misaligned buffers";
        const int takes = !g_offset && lt_attn_cudnn_call_ok(&env, &s, NULL, 0, why, sizeof why);
        const long ran = now.cudnn_calls[d] - before->cudnn_calls[d];
        const long left = now.fallback_calls[d] - before->fallback_calls[d];
        printf("  cuDNN %ld sm_%d %s docs W%d T%d HD%d: %ld calls ran on cuDNN, %ld on lattice"
               "%s%s%s\n", now.cudnn_version, now.sm, d ? "backward" : "forward", c->doc_window,
               c->T, c->HD, ran, left, takes ? "" : " (cuDNN's rules: ", takes ? "" : why,
               takes ? "" : ")");
        if (left) printf("  last left to lattice: %s\n", now.last_fallback);
        CHECK(takes ? ran > 0 && left == 0 : ran == 0,
              "documents W %d T %d HD %d %s: cuDNN ran %ld calls, %ld left to lattice, cuDNN's "
              "rules %s", c->doc_window, c->T, c->HD, d ? "backward" : "forward", ran, left,
              takes ? "take it" : why);
    }
}

/* Every shape against the reference backend; docs: with packed documents
 * (kstart and their declaration), on every other shape within a sliding
 * window of 48 keys: lattice's kernels mask them through kstart, cuDNN runs
 * those its rules take as a ragged batch of per-document sequences. */
static void attention_cases(const Pair *P, int docs) {
    LtAttnInfo before;
    if (P->cudnn) lt_cuda_attention_info(P->dut, &before);
    /* quick documents: both tensor-core dK/dV tile heights (head dims 80 and 128, the latter
     * with grouped K/V) and the generic path; the emulation runs every thread on the host */
    static const int docs_quick = 1 << 3 | 1 << 12 | 1 << 14;
    for (int s = 0; s < (int)(sizeof attn_shapes / sizeof attn_shapes[0]); s++) {
        if (g_quick && !attn_shapes[s].quick) continue;
        if (g_quick && docs && !(docs_quick >> s & 1)) continue;
        const AttnCall c = {attn_shapes[s].B, attn_shapes[s].T, attn_shapes[s].NH,
                            attn_shapes[s].NKV, attn_shapes[s].HD, NULL, -1, NULL, -1, NULL};
        if (!docs) {
            attn_pair(P, &c, "", 1.0);
            continue;
        }
        const int W = s % 2 ? 48 : -1;
        int32_t *doc, *ks = doc_starts(c.B, c.T, W, &doc);
        const AttnCall cd = {c.B, c.T, c.NH, c.NKV, c.HD, ks, -1, doc, W, NULL};
        if (P->cudnn) lt_cuda_attention_info(P->dut, &before);
        attn_pair(P, &cd, W >= 0 ? " docs W48" : " docs", 1.0);
        check_cudnn_docs(P, &cd, &before);
        free(ks), free(doc);
    }
    if (!docs) check_cudnn_ran(P, &before);
}

static void t_attention(const Pair *P) { attention_cases(P, 0); }
static void t_attention_docs(const Pair *P) { attention_cases(P, 1); }

/* Sliding windows (model.window_size) without documents: kstart =
 * max(0, t - W) and window W, which cuDNN runs as its band mask (checked to
 * have run it: cuDNN 9.2.0+) and lattice's kernels through kstart; each
 * against the reference, and on the cuDNN pair also cuDNN against lattice's
 * tensor-core kernels directly (each within the bound of the exact attention,
 * so the two within twice it). Shapes: GPT-OSS's band (W 128, HD 64, 8 query
 * heads a key/value head) at T 512 and a T not a multiple of 128, the
 * smallest bands (W 0: the diagonal alone; W 1), one crossing the 32- and
 * 64-row tiles (W 48), and a window past the sequence (causal). */
static const struct {
    int B, T, NH, NKV, HD, W, quick;
} window_shapes[] = {
    {1, 150, 4, 2, 64, 48, 1}, {1, 70, 2, 2, 40, 5, 1},      {1, 40, 2, 1, 32, 0, 1},
    {2, 300, 8, 1, 64, 128, 0}, {1, 512, 8, 1, 64, 128, 0},  {1, 512, 4, 4, 128, 1, 0},
    {2, 256, 4, 2, 80, 0, 0},   {1, 200, 2, 2, 96, 300, 0},
};

/* max(0, t - W) for every token of B sequences of T. */
static int32_t *window_starts(int B, int T, int W) {
    int32_t *ks = lt_malloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) ks[i] = i % T > W ? i % T - W : 0;
    return ks;
}

/* After one window shape on the cuDNN pair: per direction, the calls cuDNN
 * ran and those left to lattice; cuDNN must have run every call its rules
 * take (lt_attn_cudnn_call_ok for this cuDNN: a backward with T not a
 * multiple of 128 stays on lattice before 9.16; misaligned buffers always)
 * and no other. */
static void check_cudnn_window(const Pair *P, const AttnCall *c, const LtAttnInfo *before) {
    LtAttnInfo now;
    if (!P->cudnn) return;
    CHECK(lt_cuda_attention_info(P->dut, &now) == 0 && now.choice.cudnn, "not a cuDNN backend");
    const LtAttnEnv env = {.want = LT_ATTN_CUDNN, .cuda = 1, .bf16 = 1, .sm = 90,
                           .cudnn_version = now.cudnn_version, .head_dim = c->HD};
    for (int d = 0; d < 2; d++) {
        const LtAttnShape s = {(LtAttnDir)d, c->B, c->T, c->NH, c->NKV, c->HD, c->window, 0, 0};
        char why[240] = "misaligned buffers";
        const int takes = !g_offset && lt_attn_cudnn_call_ok(&env, &s, NULL, 0, why, sizeof why);
        const long ran = now.cudnn_calls[d] - before->cudnn_calls[d];
        const long left = now.fallback_calls[d] - before->fallback_calls[d];
        printf("  cuDNN %ld %s W%d T%d: %ld calls ran on cuDNN, %ld on lattice%s%s%s\n",
               now.cudnn_version, d ? "backward" : "forward", c->window, c->T, ran, left,
               takes ? "" : " (cuDNN's rules: ", takes ? "" : why, takes ? "" : ")");
        if (left) printf("  last left to lattice: %s\n", now.last_fallback);
        CHECK(takes ? ran > 0 && left == 0 : ran == 0,
              "window %d T %d %s: cuDNN ran %ld calls, %ld left to lattice, cuDNN's rules %s",
              c->window, c->T, d ? "backward" : "forward", ran, left, takes ? "take it" : why);
    }
}

static void t_attention_window(const Pair *P) {
    for (int s = 0; s < (int)(sizeof window_shapes / sizeof window_shapes[0]); s++) {
        if (g_quick && !window_shapes[s].quick) continue;
        LtAttnInfo before;
        if (P->cudnn) lt_cuda_attention_info(P->dut, &before);
        const int B = window_shapes[s].B, T = window_shapes[s].T, W = window_shapes[s].W;
        int32_t *ks = window_starts(B, T, W);
        const AttnCall c = {B, T, window_shapes[s].NH, window_shapes[s].NKV, window_shapes[s].HD,
                            ks, W, NULL, -1, NULL};
        char tag[32];
        snprintf(tag, sizeof tag, " W%d", W);
        attn_pair(P, &c, tag, 1.0);
        if (P->cudnn && g_lattice_bf16) {
            const Pair vs = {.ref = g_lattice_bf16, .dut = P->dut, .tag = "n-vs-l", .tol = P->tol,
                             .bf16 = 1, .nondet = 1};
            attn_pair(&vs, &c, tag, 2.0);
        }
        check_cudnn_window(P, &c, &before);
        free(ks);
    }
}
/* Attention sinks (model.softmax_type; backend.h's offsets): a logit per head
 * (random, and off-by-one's zeros) on the tensor-core path (HD 64, grouped
 * K/V, with a sliding window; HD 128 with packed documents) and the generic
 * one (HD 40), out, lse, dqkv and d offsets against the reference; on the
 * cuDNN pair the calls run lattice's kernels (cuDNN has no sink). */
static void t_attention_sinks(const Pair *P) {
    static const struct {
        int B, T, NH, NKV, HD, W, docs, zeros;
    } shapes[] = {{2, 150, 4, 2, 64, 48, 0, 0}, {1, 200, 2, 1, 128, -1, 1, 0},
                  {2, 70, 4, 4, 40, -1, 0, 0},  {1, 100, 2, 2, 64, -1, 0, 1}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        const int B = shapes[s].B, T = shapes[s].T, NH = shapes[s].NH, W = shapes[s].W;
        float *sink = shapes[s].zeros ? hzeros((size_t)NH) : hrand((size_t)NH, 2.f, P->bf16);
        int32_t *doc = NULL, *ks = shapes[s].docs ? doc_starts(B, T, -1, &doc)
                                 : W >= 0       ? window_starts(B, T, W)
                                                : NULL;
        const AttnCall c = {B,  T,  NH, shapes[s].NKV, shapes[s].HD, ks, shapes[s].docs ? -1 : W,
                            doc, -1, sink};
        attn_pair(P, &c, shapes[s].zeros ? " sinks 0" : " sinks", 1.0);
        free(sink), free(ks), free(doc);
    }
}

/* ======================= cross-entropy ======================= */
static void t_xent(const Pair *P) {
    /* Vp 12: fp32 packs, bf16 single elements; Vp 50: single elements in both */
    static const int shapes[][3] = {{5, 37, 40}, {16, 1000, 1024}, {2, 9, 12}, {3, 45, 50},
                                    {4, 50257, 50304}};
    for (int s = 0; s < 5; s++) {
        const int N = shapes[s][0], V = shapes[s][1], Vp = shapes[s][2];
        const size_t n = (size_t)N * Vp;
        float *x = hrand(n, 4.f, P->bf16);
        for (int r = 0; r < N; r++)
            for (int j = V; j < Vp; j++) x[(size_t)r * Vp + j] = 1e4f; /* must be ignored */
        int32_t *tg = lt_malloc(N * sizeof(int32_t));
        for (int r = 0; r < N; r++) tg[r] = (int32_t)((frand() * 0.5 + 0.5) * (V - 0.001));
        for (int withgrad = 0; withgrad < 2; withgrad++) {
            const float dscale = withgrad ? 1.f / N : 0.f;
            float *loss[2], *lg[2];
            for (int k = 0; k < 2; k++) {
                LtBackend *be = k ? P->dut : P->ref;
                void *dx = act_up(be, x, n);
                int32_t *dt = i32_up(be, tg, N);
                float *dl = f32_up(be, NULL, N);
                poison(be, dl, N * 4);
                be->ops->xent_fwd_bwd(be, dl, dx, dt, N, V, Vp, dscale);
                loss[k] = hzeros(N), lg[k] = hzeros(n);
                f32_down(be, loss[k], dl, N), act_down(be, lg[k], dx, n);
                dfree(be, dx), dfree(be, dt), dfree(be, dl);
            }
            char nm[96];
            snprintf(nm, sizeof nm, "xent N%d V%d Vp%d loss%s", N, V, Vp, withgrad ? "" : " (no grad)");
            cmp(P, nm, loss[1], loss[0], N, P->tol);
            if (withgrad) cmp(P, "xent dlogits", lg[1], lg[0], n, P->tol);
            else cmp(P, "xent logits untouched", lg[1], lg[0], n, 0.0);
            for (int k = 0; k < 2; k++) free(loss[k]), free(lg[k]);
        }
        free(x), free(tg);
    }
}

/* Vocab-parallel cross-entropy simulated on one device: the full logits (N, Vp)
 * split into TP shards of Vs = Vp/TP columns, Vvalid = clamp(V - r*Vs, 0, Vs),
 * per-shard xent_tp_stats, host combination as the all-reduces will do it (max;
 * fp32 sums in rank order), per-shard xent_tp_finish. Outputs: loss (N), grad
 * (N, Vp) with the shards put back side by side, gmax / gsum (N) combined. */
#define XTP_MAX 8
static void xent_tp_dev(LtBackend *be, int TP, int N, int V, int Vp, const float *x,
                        const int32_t *tg, float dscale, float *loss, float *grad, float *gmax,
                        float *gsum) {
    const int Vs = Vp / TP;
    void *sh[XTP_MAX];
    int32_t *lt[XTP_MAX];
    int vv[XTP_MAX];
    float *h = hzeros((size_t)N * Vs), *st = hzeros(N), *gt = hzeros(N);
    int32_t *hl = lt_malloc(N * sizeof(int32_t));
    for (int r = 0; r < TP; r++) {
        const int v0 = r * Vs;
        vv[r] = V - v0 < 0 ? 0 : V - v0 > Vs ? Vs : V - v0;
        for (int i = 0; i < N; i++) {
            memcpy(h + (size_t)i * Vs, x + (size_t)i * Vp + v0, (size_t)Vs * 4);
            hl[i] = tg[i] - v0;
        }
        sh[r] = act_up(be, h, (size_t)N * Vs), lt[r] = i32_up(be, hl, N);
    }
    float *a = f32_up(be, NULL, N), *b = f32_up(be, NULL, N), *gm = f32_up(be, NULL, N);
    float *gs = f32_up(be, NULL, N), *gtd = f32_up(be, NULL, N);
    for (int i = 0; i < N; i++) gmax[i] = -INFINITY, gsum[i] = 0.f, gt[i] = 0.f;
    for (int r = 0; r < TP; r++) { /* pass 1: all-reduce MAX */
        poison(be, a, (size_t)N * 4);
        be->ops->xent_tp_stats(be, a, NULL, NULL, sh[r], NULL, NULL, N, vv[r], Vs);
        f32_down(be, st, a, N);
        for (int i = 0; i < N; i++) gmax[i] = st[i] > gmax[i] ? st[i] : gmax[i];
    }
    be->ops->upload(be, gm, gmax, (size_t)N * 4);
    for (int r = 0; r < TP; r++) { /* pass 2: all-reduce SUM */
        poison(be, a, (size_t)N * 4), poison(be, b, (size_t)N * 4);
        be->ops->xent_tp_stats(be, NULL, a, b, sh[r], lt[r], gm, N, vv[r], Vs);
        f32_down(be, st, a, N);
        for (int i = 0; i < N; i++) gsum[i] += st[i];
        f32_down(be, st, b, N);
        for (int i = 0; i < N; i++) gt[i] += st[i];
    }
    be->ops->upload(be, gs, gsum, (size_t)N * 4), be->ops->upload(be, gtd, gt, (size_t)N * 4);
    for (int r = 0; r < TP; r++) {
        poison(be, a, (size_t)N * 4);
        be->ops->xent_tp_finish(be, a, sh[r], lt[r], gm, gs, gtd, N, vv[r], Vs, dscale);
        if (r == 0) f32_down(be, loss, a, N);
        act_down(be, h, sh[r], (size_t)N * Vs);
        for (int i = 0; i < N; i++) memcpy(grad + (size_t)i * Vp + r * Vs, h + (size_t)i * Vs, (size_t)Vs * 4);
        dfree(be, sh[r]), dfree(be, lt[r]);
    }
    dfree(be, a), dfree(be, b), dfree(be, gm), dfree(be, gs), dfree(be, gtd);
    free(h), free(st), free(gt), free(hl);
}

static void t_xent_tp(const Pair *P) {
    /* N V Vp TP: shard Vvalid sizes include 0 (6,30,64 at TP 4: 16,14,0,0) and a
     * last shard of 2 columns (50,64 at TP 4) */
    /* (3, 45, 60, 3): shards of 20 columns - fp32 packs, bf16 single elements */
    static const int shapes[][4] = {{5, 37, 40, 2},      {6, 30, 64, 4}, {4, 50, 64, 4},
                                    {16, 1000, 1024, 4}, {3, 45, 60, 3}, {4, 50257, 50304, 8}};
    for (int s = 0; s < 6; s++) {
        if (g_quick && s == 5) break;
        const int N = shapes[s][0], V = shapes[s][1], Vp = shapes[s][2], TP = shapes[s][3];
        const size_t n = (size_t)N * Vp;
        float *x = hrand(n, 4.f, P->bf16);
        for (int r = 0; r < N; r++)
            for (int j = V; j < Vp; j++) x[(size_t)r * Vp + j] = 8192.f; /* ignored; exact in bf16 */
        int32_t *tg = lt_malloc(N * sizeof(int32_t));
        for (int r = 0; r < N; r++) tg[r] = (int32_t)((frand() * 0.5 + 0.5) * (V - 0.001));
        tg[0] = V - 1, tg[N - 1] = 0; /* last real column (last non-empty shard) and the first */
        for (int withgrad = 0; withgrad < 2; withgrad++) {
            const float dscale = withgrad ? 1.f / N : 0.f;
            float *loss[2], *lg[2], *gm[2], *gs[2];
            for (int k = 0; k < 2; k++) {
                loss[k] = hzeros(N), lg[k] = hzeros(n), gm[k] = hzeros(N), gs[k] = hzeros(N);
                xent_tp_dev(k ? P->dut : P->ref, TP, N, V, Vp, x, tg, dscale, loss[k], lg[k], gm[k], gs[k]);
            }
            char nm[96];
            snprintf(nm, sizeof nm, "xent_tp N%d V%d Vp%d TP%d max", N, V, Vp, TP);
            cmp(P, nm, gm[1], gm[0], N, 0.0); /* a max of identical inputs is exact */
            cmp(P, "xent_tp sumexp", gs[1], gs[0], N, P->tol);
            cmp(P, withgrad ? "xent_tp loss" : "xent_tp loss (no grad)", loss[1], loss[0], N, P->tol);
            if (withgrad) cmp(P, "xent_tp dlogits", lg[1], lg[0], n, P->tol);
            else cmp(P, "xent_tp logits untouched", lg[1], x, n, 0.0);
            /* the device's split result against its own single-rank xent_fwd_bwd */
            void *dx = act_up(P->dut, x, n);
            int32_t *dt = i32_up(P->dut, tg, N);
            float *dl = f32_up(P->dut, NULL, N), *fl = hzeros(N), *fg = hzeros(n);
            poison(P->dut, dl, (size_t)N * 4);
            P->dut->ops->xent_fwd_bwd(P->dut, dl, dx, dt, N, V, Vp, dscale);
            f32_down(P->dut, fl, dl, N), act_down(P->dut, fg, dx, n);
            cmp(P, "xent_tp loss vs xent_fwd_bwd", loss[1], fl, N, P->tol);
            if (withgrad) cmp(P, "xent_tp dlogits vs xent_fwd_bwd", lg[1], fg, n, P->tol);
            dfree(P->dut, dx), dfree(P->dut, dt), dfree(P->dut, dl), free(fl), free(fg);
            for (int k = 0; k < 2; k++) free(loss[k]), free(lg[k]), free(gm[k]), free(gs[k]);
        }
        free(x), free(tg);
    }
}

/* ======================= optimizer and reductions ======================= */
/* sum_f64 of n device floats (squares or not) into a device double that
 * starts at 0.25, read back less the 0.25 (so accumulation is tested). */
static double dev_sum(LtBackend *be, const float *d, size_t n, int squares) {
    const double start = 0.25;
    double *acc = be->ops->alloc(be, sizeof(double)), got = 0.0;
    be->ops->upload(be, acc, &start, sizeof start);
    be->ops->sum_f64(be, acc, d, n, squares);
    be->ops->download(be, &got, acc, sizeof got);
    be->ops->free(be, acc); /* a double: naturally aligned even in the off4 runs */
    return got - start;
}

/* The step's device scalars: plain sums, the clip coefficient (finite and not:
 * -1 marks a skipped step), a non-finite loss flagged into a sum, a skipped
 * AdamW step changing nothing, and vocab-parallel id localization, the device
 * against the CPU. */
static void t_step_scalars(const Pair *P) {
    const size_t n = 100003;
    float *x = hrand(n, 1.f, 0);
    double s[2];
    for (int k = 0; k < 2; k++) {
        LtBackend *be = k ? P->dut : P->ref;
        float *d = f32_up(be, x, n);
        s[k] = dev_sum(be, d, n, 0);
        dfree(be, d);
    }
    CHECK(fabs(s[1] - s[0]) <= 1e-9 * fmax(fabs(s[0]), 1.0), "sum: %.17g vs %.17g", s[1], s[0]);
    const double ss[] = {16.0, 0.25, 0.0, NAN, INFINITY};
    for (int i = 0; i < 5; i++) {
        float c[2];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            double *dss = be->ops->alloc(be, sizeof(double));
            float *dc = f32_up(be, NULL, 1);
            be->ops->upload(be, dss, &ss[i], sizeof(double));
            be->ops->clip_coef(be, dc, dss, 1.0f);
            f32_down(be, &c[k], dc, 1);
            be->ops->free(be, dss), dfree(be, dc);
        }
        CHECK(c[1] == c[0], "clip_coef(%g): %.9g vs %.9g", ss[i], c[1], c[0]);
    }
    const double xs[] = {2.5, NAN, -INFINITY};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            double *d = be->ops->alloc(be, 2 * sizeof(double)), h[2] = {7.0, xs[i]};
            be->ops->upload(be, d, h, sizeof h);
            be->ops->flag_nonfinite(be, d, d + 1);
            be->ops->download(be, h, d, sizeof h);
            be->ops->free(be, d);
            CHECK(isfinite(xs[i]) ? h[0] == 7.0 : isnan(h[0]), "%s flag_nonfinite(%g): %g",
                  k ? "dut" : "ref", xs[i], h[0]);
        }
    { /* adamw told to skip (coefficient -1 on the device) changes nothing */
        const size_t na = 1003;
        float *w = hrand(na, 1.f, 0), *g = hrand(na, 1.f, 0), skip = -1.f;
        LtAdamArgs a = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f, .bc1 = 0.1f, .bc2 = 0.05f, .grad_scale = 1.f};
        LtBackend *be = P->dut;
        float *dw = f32_up(be, w, na), *dg = f32_up(be, g, na), *dm = f32_up(be, g, na);
        float *dv = f32_up(be, w, na), *ds = f32_up(be, &skip, 1);
        void *dp = act_up(be, w, na);
        void *p0 = raw_down(be, dp, lt_act_bytes(be, na));
        a.grad_scale_dev = ds;
        be->ops->adamw(be, dp, dw, dg, dm, dv, na, &a);
        void *p1 = raw_down(be, dp, lt_act_bytes(be, na));
        float *hw = hzeros(na), *hm = hzeros(na), *hv = hzeros(na);
        f32_down(be, hw, dw, na), f32_down(be, hm, dm, na), f32_down(be, hv, dv, na);
        CHECK(!memcmp(hw, w, na * 4) && !memcmp(hm, g, na * 4) && !memcmp(hv, w, na * 4) &&
                  !memcmp(p0, p1, lt_act_bytes(be, na)),
              "a skipped adamw step changed the state");
        dfree(be, dw), dfree(be, dg), dfree(be, dm), dfree(be, dv), dfree(be, ds), dfree(be, dp);
        free(w), free(g), free(hw), free(hm), free(hv), free(p0), free(p1);
    }
    enum { NI = 5000 };
    int32_t *ids = lt_malloc(NI * sizeof(int32_t)), *got[2];
    for (int i = 0; i < NI; i++) ids[i] = (int32_t)(x[i] * x[i] * 3000.f) - 100;
    for (int k = 0; k < 2; k++) {
        LtBackend *be = k ? P->dut : P->ref;
        int32_t *d = i32_up(be, ids, NI);
        be->ops->localize_ids(be, d, NI, 700, 1300);
        got[k] = raw_down(be, d, NI * sizeof(int32_t));
        dfree(be, d);
    }
    CHECK(memcmp(got[0], got[1], NI * sizeof(int32_t)) == 0, "localize_ids differs");
    free(got[0]), free(got[1]), free(ids), free(x);
}

static void t_adamw(const Pair *P) {
    static const size_t ns[] = {3, 1000, 100003}; /* 3: under one pack */
    LtAdamArgs a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                    .weight_decay = 0.1f, .bc1 = 1.f - 0.729f, .bc2 = 1.f - 0.857375f};
    const float half = 0.5f;
    for (int s = 0; s < 3; s++) {
        /* the multiplier 0.7 from the host, or (s = 1) 1.4 x 0.5 with the 0.5 on the device */
        a.grad_scale = s == 1 ? 1.4f : 0.7f;
        const size_t n = ns[s];
        float *master = hrand(n, 1.f, 0), *grad = hrand(n, 1.f, 0), *m = hrand(n, 0.1f, 0);
        float *v = hrand(n, 0.01f, 0);
        for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
        float *res[2][4];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            void *dp = act_up(be, NULL, n);
            float *dm = f32_up(be, master, n), *dg = f32_up(be, grad, n), *d1 = f32_up(be, m, n);
            float *d2 = f32_up(be, v, n);
            float *dh = f32_up(be, &half, 1);
            a.grad_scale_dev = s == 1 ? dh : NULL;
            poison(be, dp, lt_act_bytes(be, n));
            be->ops->adamw(be, dp, dm, dg, d1, d2, n, &a);
            dfree(be, dh);
            for (int j = 0; j < 4; j++) res[k][j] = hzeros(n);
            act_down(be, res[k][0], dp, n), f32_down(be, res[k][1], dm, n);
            f32_down(be, res[k][2], d1, n), f32_down(be, res[k][3], d2, n);
            dfree(be, dp), dfree(be, dm), dfree(be, dg), dfree(be, d1), dfree(be, d2);
        }
        static const char *names[] = {"adamw param", "adamw master", "adamw m", "adamw v"};
        for (int j = 0; j < 4; j++) cmp(P, names[j], res[1][j], res[0][j], n, j ? 1e-5 : P->tol);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++) free(res[k][j]);
        free(master), free(grad), free(m), free(v);
    }
}

static void t_reduce(const Pair *P) {
    static const size_t ns[] = {1, 1000, 1000003};
    for (int s = 0; s < 3; s++) {
        if (g_quick && s == 2) break;
        const size_t n = ns[s];
        float *x = hrand(n, 1.f, 0), *sc[2];
        double host = 0.0, r[2];
        for (size_t i = 0; i < n; i++) host += (double)x[i] * x[i];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            float *d = f32_up(be, x, n);
            r[k] = dev_sum(be, d, n, 1);
            be->ops->scale_f32(be, d, 0.37f, n);
            sc[k] = hzeros(n);
            f32_down(be, sc[k], d, n);
            dfree(be, d);
        }
        const double e0 = fabs(r[1] - r[0]) / fmax(fabs(r[0]), 1e-300);
        const double e1 = fabs(r[1] - host) / fmax(fabs(host), 1e-300);
        printf("  %-5s sumsq n=%-9zu dut %.17g ref %.17g host %.17g\n", P->tag, n, r[1], r[0], host);
        CHECK(e0 < 1e-7 && e1 < 1e-7, "sumsq n=%zu: rel err %.3e / %.3e", n, e0, e1);
        char nm[64];
        snprintf(nm, sizeof nm, "scale_f32 n%zu", n);
        cmp(P, nm, sc[1], sc[0], n, 1e-6);
        free(sc[0]), free(sc[1]);
        /* add_f32 (dst += src): exact, so dut and ref agree bit for bit */
        float *y = hrand(n, 2.f, 0), *ad[2];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            float *dx = f32_up(be, x, n), *dy = f32_up(be, y, n);
            be->ops->add_f32(be, dx, dy, n);
            ad[k] = hzeros(n);
            f32_down(be, ad[k], dx, n);
            dfree(be, dx);
            dfree(be, dy);
        }
        snprintf(nm, sizeof nm, "add_f32 n%zu", n);
        cmp(P, nm, ad[1], ad[0], n, 0.0);
        free(ad[0]), free(ad[1]), free(y), free(x);
    }
}

/* act <-> fp32 conversion, copy/zero, and ops on a created stream. */
static void t_memory_streams(const Pair *P) {
    LtBackend *be = P->dut;
    const size_t n = 4099;
    float *x = hrand(n, 3.f, 0), *back = hzeros(n), *y1 = hzeros(n), *y2 = hzeros(n);
    void *d = act_up(be, x, n);
    act_down(be, back, d, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = be->dtype == LT_BF16 ? lt_bf16_round(x[i]) : x[i];
        if (memcmp(&want, &back[i], 4) != 0) bad++;
    }
    printf("  %-5s act round trip n=%zu: %zu mismatches\n", P->tag, n, bad);
    CHECK(bad == 0, "act_from_f32/act_to_f32 round trip: %zu mismatches", bad);
    void *o1 = act_up(be, NULL, n), *o2 = act_up(be, NULL, n), *c = act_up(be, NULL, n);
    be->ops->gelu_fwd(be, o1, d, n);
    LtStream *s = be->ops->stream_create(be);
    LtEvent *e = be->ops->event_create(be);
    be->ops->set_stream(be, s);
    if (be->ops->native_stream) /* a real stream object: current_stream names it */
        CHECK(be->ops->current_stream(be) == s &&
                  be->ops->native_stream(be, s) != be->ops->native_stream(be, NULL),
              "current_stream/native_stream after set_stream");
    be->ops->gelu_fwd(be, o2, d, n);
    be->ops->copy(be, c, o2, lt_act_bytes(be, n));
    be->ops->event_record(be, e, s);
    be->ops->set_stream(be, NULL);
    CHECK(be->ops->current_stream(be) == NULL, "current_stream after set_stream(NULL)");
    be->ops->stream_wait_event(be, NULL, e);
    act_down(be, y1, o1, n), act_down(be, y2, c, n);
    CHECK(memcmp(y1, y2, n * 4) == 0, "op on a created stream differs from the default stream");
    be->ops->zero(be, c, lt_act_bytes(be, n));
    act_down(be, y2, c, n);
    for (size_t i = 0; i < n; i++) CHECK(y2[i] == 0.f, "zero left %g at %zu", (double)y2[i], i);
    be->ops->synchronize(be);
    be->ops->event_destroy(be, e);
    be->ops->stream_destroy(be, s);
    dfree(be, d), dfree(be, o1), dfree(be, o2), dfree(be, c);
    free(x), free(back), free(y1), free(y2);
}

/* ======================= mixture of experts ======================= */
/* The MoE ops of include/backend.h against the CPU backend: routing indices,
 * dispatch positions, rows, offsets and drop counts must match exactly (ties
 * are part of the contract: lower expert, lower token), the fp32 scores and
 * gradients within the pair's tolerance, and the sums that the contract makes
 * deterministic bitwise on a second run. */
static void same_i32(const Pair *P, const char *what, const int32_t *got, const int32_t *ref,
                     size_t n) {
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (got[i] != ref[i]) bad = i;
    printf("  %-5s %-28s n=%-9zu %s\n", P->tag, what, n, bad == n ? "equal" : "DIFFER  <-- FAIL");
    CHECK(bad == n, "%s: entry %zu is %d, the reference %d", what, bad,
          bad < n ? got[bad] : 0, bad < n ? ref[bad] : 0);
}
static int32_t *i32_down(LtBackend *be, const void *d, size_t n) {
    int32_t *h = lt_malloc(n ? n * sizeof(int32_t) : 1); /* (no zero-byte malloc) */
    be->ops->download(be, h, d, n * sizeof(int32_t));
    return h;
}
/* Logits in [-4, 4); every third token's rounded to halves, so equal scores (ties) occur. */
static float *moe_logits(int N, int E) {
    float *l = hrand((size_t)N * E, 4.f, 0);
    for (int i = 0; i < N; i += 3)
        for (int e = 0; e < E; e++) l[(size_t)i * E + e] = roundf(l[(size_t)i * E + e] * 2.f) / 2.f;
    return l;
}

/* Router GEMMs (cuBLASLt: GPU only): logits, dx += and dw +=, each of dx / dw alone,
 * dw bitwise on a rerun; C not a multiple of the pack, N = 0; the router bias (logits
 * + bias, dbias += column sums of dlogits) on every shape but the first; E = 1, the
 * shared expert gate's logit (model.moe_shared_expert_gate: a 1-wide output and a
 * rank-1 backward). */
static void t_moe_router(const Pair *P) {
    static const int shapes[][3] = {{7, 24, 8},     {33, 37, 16}, {0, 24, 8},
                                    {200, 256, 64}, {33, 37, 1},  {300, 256, 1}};
    for (int s = 0; s < 6; s++) {
        const int N = shapes[s][0], C = shapes[s][1], E = shapes[s][2];
        const size_t nx = (size_t)N * C, nl = (size_t)N * E, nw = (size_t)E * C;
        float *x = hrand(nx, 1.f, P->bf16), *w = hrand(nw, 0.5f, P->bf16);
        float *dl = hrand(nl, 1.f, 0), *dx0 = hrand(nx, 1.f, P->bf16), *dw0 = hrand(nw, 1.f, 0);
        float *b = hrand((size_t)E, 1.f, P->bf16), *db0 = hrand((size_t)E, 1.f, 0);
        float *lg[2], *dx[2], *dw[2], *dxo[2], *dwo[2], *db[2];
        void *bits = NULL;
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            void *dxa = act_up(be, x, nx), *dwa = act_up(be, w, nw), *ddx = act_up(be, dx0, nx);
            float *dlg = f32_up(be, NULL, nl), *ddl = f32_up(be, dl, nl), *ddw = f32_up(be, dw0, nw);
            void *dba = s ? act_up(be, b, (size_t)E) : NULL;
            float *ddb = s ? f32_up(be, db0, (size_t)E) : NULL;
            lg[k] = hzeros(nl), dx[k] = hzeros(nx), dw[k] = hzeros(nw), db[k] = hzeros((size_t)E);
            dxo[k] = hzeros(nx), dwo[k] = hzeros(nw);
            poison(be, dlg, nl * 4);
            be->ops->moe_router_fwd(be, dlg, dxa, dwa, dba, N, C, E);
            be->ops->moe_router_bwd(be, ddx, ddw, ddb, ddl, dxa, dwa, N, C, E);
            f32_down(be, lg[k], dlg, nl), act_down(be, dx[k], ddx, nx), f32_down(be, dw[k], ddw, nw);
            if (ddb) f32_down(be, db[k], ddb, (size_t)E), dfree(be, ddb), dfree(be, dba);
            be->ops->upload(be, ddw, dw0, nw * 4);
            be->ops->moe_router_bwd(be, ddx, ddw, NULL, ddl, dxa, dwa, N, C, E);
            if (k) bits = raw_down(be, ddw, nw * 4);
            be->ops->upload(be, ddw, dw0, nw * 4);
            be->ops->moe_router_bwd(be, NULL, ddw, NULL, ddl, dxa, dwa, N, C, E);
            dfree(be, ddx), ddx = act_up(be, dx0, nx);
            be->ops->moe_router_bwd(be, ddx, NULL, NULL, ddl, dxa, dwa, N, C, E);
            act_down(be, dxo[k], ddx, nx), f32_down(be, dwo[k], ddw, nw);
            dfree(be, dxa), dfree(be, dwa), dfree(be, ddx), dfree(be, dlg), dfree(be, ddl);
            dfree(be, ddw);
        }
        char nm[64];
        snprintf(nm, sizeof nm, "moe_router_fwd N%d C%d E%d", N, C, E);
        cmp(P, nm, lg[1], lg[0], nl, P->bf16 ? 1e-5 : P->tol); /* fp32 sums of equal inputs */
        snprintf(nm, sizeof nm, "moe_router_bwd dx N%d C%d", N, C);
        cmp(P, nm, dx[1], dx[0], nx, P->tol);
        snprintf(nm, sizeof nm, "moe_router_bwd dw N%d C%d", N, C);
        cmp(P, nm, dw[1], dw[0], nw, 1e-5);
        snprintf(nm, sizeof nm, "moe_router_bwd dx only N%d", N);
        cmp(P, nm, dxo[1], dxo[0], nx, P->tol);
        snprintf(nm, sizeof nm, "moe_router_bwd dw only N%d", N);
        cmp(P, nm, dwo[1], dwo[0], nw, 1e-5);
        snprintf(nm, sizeof nm, "moe_router_bwd dbias N%d E%d", N, E);
        cmp(P, nm, db[1], db[0], (size_t)E, 1e-5);
        same_bits(P, "moe_router_bwd dw", bits, dw[1], nw * 4);
        for (int k = 0; k < 2; k++)
            free(lg[k]), free(dx[k]), free(dw[k]), free(dxo[k]), free(dwo[k]), free(db[k]);
        free(x), free(w), free(dl), free(dx0), free(dw0), free(b), free(db0), free(bits);
    }
}

/* moe_topk and moe_topk_bwd for every score function: softmax after / before the
 * top-k, sigmoid with and without the expert bias, scales, K = 1 and K = E, E up
 * to 256 (more than one expert per lane), tied logits; group-limited routing
 * (DeepSeek-V3's 8 groups, top 4, of 256; more than 32 groups: two per lane). */
static void t_moe_topk(const Pair *P) {
    static const struct { int E, K, score, pre, bias; float scale; int G, GK; } cs[] = {
        {8, 2, LT_MOE_SOFTMAX, 0, 0, 0.f, 0, 0},   {8, 2, LT_MOE_SOFTMAX, 1, 0, 2.5f, 0, 0},
        {16, 4, LT_MOE_SIGMOID, 0, 1, 0.f, 0, 0},  {16, 1, LT_MOE_SIGMOID, 0, 0, 1.5f, 0, 0},
        {5, 5, LT_MOE_SOFTMAX, 1, 0, 0.f, 0, 0},   {5, 5, LT_MOE_SOFTMAX, 0, 0, 0.f, 0, 0},
        {64, 8, LT_MOE_SOFTMAX, 0, 0, 0.f, 0, 0},  {256, 8, LT_MOE_SIGMOID, 0, 1, 2.5f, 0, 0},
        {256, 6, LT_MOE_SOFTMAX, 1, 0, 0.f, 0, 0},
        {16, 4, LT_MOE_SIGMOID, 0, 1, 2.5f, 4, 2}, {256, 8, LT_MOE_SIGMOID, 0, 1, 2.5f, 8, 4},
        {64, 6, LT_MOE_SOFTMAX, 1, 0, 0.f, 8, 3},  {96, 8, LT_MOE_SOFTMAX, 0, 0, 0.f, 48, 4},
    };
    const int N = g_quick ? 37 : 1000;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int E = cs[c].E, K = cs[c].K;
        const size_t nl = (size_t)N * E, nk = (size_t)N * K;
        float *l = moe_logits(N, E), *bias = cs[c].bias ? hrand(E, 0.1f, 0) : NULL;
        float *dw = hrand(nk, 1.f, 0), *w[2], *dl[2];
        int32_t *idx[2];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            float *dlg = f32_up(be, l, nl), *db = bias ? f32_up(be, bias, E) : NULL;
            float *dwt = f32_up(be, NULL, nk), *ddw = f32_up(be, dw, nk), *dg = f32_up(be, NULL, nl);
            int32_t *di = dalloc(be, nk * 4);
            poison(be, dwt, nk * 4), poison(be, di, nk * 4), poison(be, dg, nl * 4);
            be->ops->moe_topk(be, di, dwt, dlg, db, N, E, K, cs[c].score, cs[c].pre, cs[c].scale,
                              cs[c].G, cs[c].GK);
            be->ops->moe_topk_bwd(be, dg, ddw, di, dlg, N, E, K, cs[c].score, cs[c].pre,
                                  cs[c].scale);
            idx[k] = i32_down(be, di, nk), w[k] = hzeros(nk), dl[k] = hzeros(nl);
            f32_down(be, w[k], dwt, nk), f32_down(be, dl[k], dg, nl);
            dfree(be, dlg), dfree(be, dwt), dfree(be, ddw), dfree(be, dg), dfree(be, di);
            if (db) dfree(be, db);
        }
        char nm[64];
        snprintf(nm, sizeof nm, "moe_topk idx E%d K%d s%d p%d G%d", E, K, cs[c].score, cs[c].pre,
                 cs[c].G);
        same_i32(P, nm, idx[1], idx[0], nk);
        snprintf(nm, sizeof nm, "moe_topk w E%d K%d", E, K);
        cmp(P, nm, w[1], w[0], nk, 1e-5);
        snprintf(nm, sizeof nm, "moe_topk_bwd E%d K%d", E, K);
        cmp(P, nm, dl[1], dl[0], nl, 1e-5);
        for (int k = 0; k < 2; k++) free(idx[k]), free(w[k]), free(dl[k]);
        free(l), free(bias), free(dw);
    }
}

/* moe_aux_stats (counts exact, psum, zsum; a second run bitwise) and moe_aux_bwd
 * (both terms, each alone) with one group, sequence groups starting mid-call
 * (row0), and groups longer than a summation segment. */
static void t_moe_aux(const Pair *P) {
    static const struct { int N, E, K, score; long row0, L; } cs[] = {
        {37, 8, 2, LT_MOE_SOFTMAX, 0, 1L << 40}, {37, 16, 4, LT_MOE_SIGMOID, 5, 10},
        {300, 12, 3, LT_MOE_SOFTMAX, 3, 280},    {700, 64, 8, LT_MOE_SIGMOID, 0, 1L << 40},
        {4000, 256, 8, LT_MOE_SIGMOID, 1000, 2048},
    };
    static const float coef[3][2] = {{0.01f, 0.001f}, {0.5f, 0.f}, {0.f, 0.25f}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        if (g_quick && c == 3) break; /* (the emulation's time) */
        const int N = cs[c].N, E = cs[c].E, K = cs[c].K;
        const size_t nl = (size_t)N * E, G = (size_t)((cs[c].row0 + N - 1) / cs[c].L + 1);
        float *l = moe_logits(N, E), *c0 = hrand(G * E, 2.f, 0), *p0 = hrand(G * E, 1.f, 0);
        float *d0 = hrand(nl, 1.f, 0), *cnt[2], *ps[2], *dl[2][3];
        for (size_t i = 0; i < G * (size_t)E; i++) c0[i] = roundf(c0[i] * 8.f); /* integers */
        double z[2];
        void *bits = NULL;
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            float *dlg = f32_up(be, l, nl), *dc = f32_up(be, c0, G * E), *dp = f32_up(be, p0, G * E);
            double *dz = dalloc(be, 8);
            const double z0 = 0.5;
            be->ops->upload(be, dz, &z0, 8);
            be->ops->moe_aux_stats(be, dc, dp, dz, dlg, N, E, K, cs[c].score, cs[c].row0, cs[c].L);
            cnt[k] = hzeros(G * E), ps[k] = hzeros(G * E);
            f32_down(be, cnt[k], dc, G * E), f32_down(be, ps[k], dp, G * E);
            be->ops->download(be, &z[k], dz, 8);
            if (k) {
                be->ops->upload(be, dp, p0, G * E * 4);
                be->ops->moe_aux_stats(be, NULL, dp, NULL, dlg, N, E, K, cs[c].score, cs[c].row0,
                                       cs[c].L);
                bits = raw_down(be, dp, G * E * 4);
            }
            for (int t = 0; t < 3; t++) {
                float *dg = f32_up(be, d0, nl);
                be->ops->moe_aux_bwd(be, dg, dlg, dc, N, E, K, cs[c].score, cs[c].row0, cs[c].L,
                                     coef[t][0], coef[t][1]);
                dl[k][t] = hzeros(nl);
                f32_down(be, dl[k][t], dg, nl);
                dfree(be, dg);
            }
            dfree(be, dlg), dfree(be, dc), dfree(be, dp), dfree(be, dz);
        }
        char nm[64];
        snprintf(nm, sizeof nm, "moe_aux_stats counts N%d E%d s%d", N, E, cs[c].score);
        cmp(P, nm, cnt[1], cnt[0], G * E, 0.0);
        snprintf(nm, sizeof nm, "moe_aux_stats psum N%d E%d", N, E);
        cmp(P, nm, ps[1], ps[0], G * E, 1e-5);
        const float zg = (float)z[1], zr = (float)z[0];
        cmp(P, "moe_aux_stats zsum", &zg, &zr, 1, 1e-5);
        same_bits(P, "moe_aux_stats psum rerun", bits, ps[1], G * E * 4);
        /* the aux gradient is p (coef n_e - sum_j p_j coef n_j): terms of size coef x the
         * largest count (up to about 80 here, where the gradient's rms is about 1) that cancel: the
         * backends' summation orders differ by fp32 ulps of those terms (on the H200,
         * 1.4e-5 of the rms at coefficient 0.5) */
        float cmax = 0.f;
        for (size_t i = 0; i < G * (size_t)E; i++) cmax = fmaxf(cmax, fabsf(cnt[0][i]));
        for (int t = 0; t < 3; t++) {
            snprintf(nm, sizeof nm, "moe_aux_bwd aux %g z %g", coef[t][0], coef[t][1]);
            cmp(P, nm, dl[1][t], dl[0][t], nl, 1e-5 + 1e-6 * coef[t][0] * cmax);
        }
        for (int k = 0; k < 2; k++) {
            free(cnt[k]), free(ps[k]);
            for (int t = 0; t < 3; t++) free(dl[k][t]);
        }
        free(l), free(c0), free(p0), free(d0), free(bits);
    }
}

/* A routing of N tokens to K distinct experts each, skewed towards the low experts
 * (so capacities drop), with weights in steps of 1/8 (ties). */
static void moe_routing(int N, int E, int K, int32_t *idx, float *w) {
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++) {
            int e, taken;
            do {
                const float u = frand() * 0.5f + 0.5f;
                e = (int)(u * u * (float)E) % E;
                taken = 0;
                for (int j = 0; j < k; j++) taken |= idx[(size_t)i * K + j] == e;
            } while (taken);
            idx[(size_t)i * K + k] = e;
            w[(size_t)i * K + k] = roundf((frand() * 0.5f + 0.5f) * 8.f) / 8.f;
        }
}

/* moe_dispatch on one backend: pos (N K), src (rows), offsets (E + 1), dropped. */
static void run_dispatch(LtBackend *be, int N, int E, int K, int cap, int policy, int pad,
                         const int32_t *idx, const float *w, int32_t **out) {
    const size_t nk = (size_t)N * K, rows = nk > (size_t)E * cap ? nk : (size_t)E * cap;
    int32_t *di = i32_up(be, idx, nk + 1), *dp = dalloc(be, nk * 4 + 4);
    int32_t *ds = dalloc(be, rows * 4 + 4), *doff = dalloc(be, (E + 1) * 4), *dd = dalloc(be, 4);
    float *dw = f32_up(be, w, nk + 1);
    poison(be, dp, nk * 4 + 4), poison(be, ds, rows * 4 + 4), poison(be, dd, 4);
    be->ops->moe_dispatch(be, dp, ds, doff, dd, di, dw, N, E, K, cap, policy, pad);
    out[0] = i32_down(be, dp, nk), out[1] = i32_down(be, ds, rows);
    out[2] = i32_down(be, doff, E + 1), out[3] = i32_down(be, dd, 1);
    dfree(be, di), dfree(be, dp), dfree(be, ds), dfree(be, doff), dfree(be, dd), dfree(be, dw);
}

/* Dropless, the capacity policies (position; probs with tied weights) with and
 * without padding, a capacity no expert reaches, N = 0 (padding only). */
static void t_moe_dispatch(const Pair *P) {
    static const struct { int N, E, K, cap, policy, pad; } cs[] = {
        {37, 8, 2, 0, 0, 0},                     {300, 16, 4, 0, 0, 0},
        {37, 8, 2, 6, LT_MOE_DROP_POSITION, 0},  {37, 8, 2, 6, LT_MOE_DROP_PROBS, 0},
        {300, 16, 4, 40, LT_MOE_DROP_PROBS, 1},  {300, 16, 4, 40, LT_MOE_DROP_POSITION, 1},
        {37, 8, 2, 1000, LT_MOE_DROP_PROBS, 1},  {0, 8, 2, 5, LT_MOE_DROP_PROBS, 1},
        {0, 8, 2, 0, 0, 0},                      {600, 64, 8, 100, LT_MOE_DROP_PROBS, 0},
        {20000, 128, 8, 1500, LT_MOE_DROP_PROBS, 0},
    };
    static const char *what[4] = {"pos", "src", "offsets", "dropped"};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        if (g_quick && c == 9) break; /* (the emulation's time) */
        const int N = cs[c].N, E = cs[c].E, K = cs[c].K, cap = cs[c].cap;
        const size_t nk = (size_t)N * K;
        int32_t *idx = lt_malloc(nk * 4 + 4), *r[2][4];
        float *w = lt_malloc(nk * 4 + 4);
        moe_routing(N, E, K, idx, w);
        for (int k = 0; k < 2; k++)
            run_dispatch(k ? P->dut : P->ref, N, E, K, cap, cs[c].policy, cs[c].pad, idx, w, r[k]);
        const size_t M = (size_t)r[0][2][E], n[4] = {nk, M, (size_t)E + 1, 1};
        for (int q = 0; q < 4; q++) {
            char nm[64];
            snprintf(nm, sizeof nm, "moe_dispatch %s N%d cap%d p%d%s", what[q], N, cap,
                     cs[c].policy, cs[c].pad ? " pad" : "");
            same_i32(P, nm, r[1][q], r[0][q], n[q]);
        }
        for (int k = 0; k < 2; k++)
            for (int q = 0; q < 4; q++) free(r[k][q]);
        free(idx), free(w);
    }
}

/* permute, permute_bwd (dx +=), unpermute and unpermute_bwd over a dispatch with
 * dropped assignments and padding rows; C a multiple of the pack or not. */
static void t_moe_permute(const Pair *P) {
    static const int shapes[][5] = {/* N, E, K, C, capacity */
                                    {37, 8, 2, 24, 0}, {37, 8, 2, 37, 6},
                                    {120, 16, 4, 64, 25}, {0, 4, 2, 24, 3}};
    for (int s = 0; s < 4; s++) {
        const int N = shapes[s][0], E = shapes[s][1], K = shapes[s][2], C = shapes[s][3];
        const int cap = shapes[s][4];
        const size_t nk = (size_t)N * K;
        int32_t *idx = lt_malloc(nk * 4 + 4), *d[4];
        float *w = lt_malloc(nk * 4 + 4);
        moe_routing(N, E, K, idx, w);
        run_dispatch(P->ref, N, E, K, cap, LT_MOE_DROP_PROBS, cap > 0, idx, w, d);
        const int M = d[2][E];
        const size_t nx = (size_t)N * C, nm_ = (size_t)M * C;
        float *x = hrand(nx, 1.f, P->bf16), *dx0 = hrand(nx, 1.f, P->bf16);
        float *y = hrand(nm_, 1.f, P->bf16), *dout = hrand(nx, 1.f, P->bf16);
        float *o[2][5];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            int32_t *dp = i32_up(be, d[0], nk + 1), *ds = i32_up(be, d[1], (size_t)M + 1);
            float *dw = f32_up(be, w, nk + 1), *gw = f32_up(be, NULL, nk + 1);
            void *dxa = act_up(be, x, nx), *dxg = act_up(be, dx0, nx), *dya = act_up(be, y, nm_);
            void *ddo = act_up(be, dout, nx), *perm = act_up(be, NULL, nm_ + 1);
            void *un = act_up(be, NULL, nx + 1), *dyg = act_up(be, NULL, nm_ + 1);
            poison(be, perm, lt_act_bytes(be, nm_)), poison(be, un, lt_act_bytes(be, nx));
            poison(be, dyg, lt_act_bytes(be, nm_)), poison(be, gw, nk * 4);
            be->ops->moe_permute(be, perm, dxa, ds, M, C);
            be->ops->moe_permute_bwd(be, dxg, dya, dp, N, K, C);
            be->ops->moe_unpermute(be, un, dya, dp, dw, N, K, C);
            be->ops->moe_unpermute_bwd(be, dyg, gw, ddo, dya, dp, dw, N, K, C, M);
            for (int q = 0; q < 5; q++) o[k][q] = hzeros(q == 0 || q == 3 ? nm_ + 1 : nx + nk + 1);
            act_down(be, o[k][0], perm, nm_), act_down(be, o[k][1], dxg, nx);
            act_down(be, o[k][2], un, nx), act_down(be, o[k][3], dyg, nm_);
            f32_down(be, o[k][4], gw, nk);
            dfree(be, dp), dfree(be, ds), dfree(be, dw), dfree(be, gw), dfree(be, dxa);
            dfree(be, dxg), dfree(be, dya), dfree(be, ddo), dfree(be, perm), dfree(be, un);
            dfree(be, dyg);
        }
        static const char *what[5] = {"permute", "permute_bwd dx", "unpermute",
                                      "unpermute_bwd dy", "unpermute_bwd dw"};
        const size_t n[5] = {nm_, nx, nx, nm_, nk};
        for (int q = 0; q < 5; q++) {
            char nm[64];
            snprintf(nm, sizeof nm, "moe_%s N%d C%d cap%d", what[q], N, C, cap);
            cmp(P, nm, o[1][q], o[0][q], n[q], q == 0 ? 0.0 : q == 4 ? 1e-5 : P->tol);
        }
        for (int k = 0; k < 2; k++)
            for (int q = 0; q < 5; q++) free(o[k][q]);
        for (int q = 0; q < 4; q++) free(d[q]);
        free(idx), free(w), free(x), free(dx0), free(y), free(dout);
    }
}

/* The shared expert's gate (moe_gate_fwd: out += sigmoid(logit) y; moe_gate_bwd in
 * place: y -> s dout, s -> the logit's gradient), C a multiple of the pack or not,
 * more rows than a block's warps, R = 0. */
static void t_moe_gate(const Pair *P) {
    static const int shapes[][2] = {{7, 24}, {33, 37}, {300, 256}, {0, 24}};
    for (int s = 0; s < 4; s++) {
        const int R = shapes[s][0], C = shapes[s][1];
        const size_t n = (size_t)R * C;
        float *out0 = hrand(n, 1.f, P->bf16), *y0 = hrand(n, 1.f, P->bf16);
        float *dout = hrand(n, 1.f, P->bf16), *l0 = hrand((size_t)R, 2.f, 0);
        float *o[2][4];
        for (int k = 0; k < 2; k++) {
            LtBackend *be = k ? P->dut : P->ref;
            void *dout_ = act_up(be, out0, n), *dy = act_up(be, y0, n), *dd = act_up(be, dout, n);
            float *ds = f32_up(be, l0, (size_t)R + 1);
            for (int q = 0; q < 4; q++) o[k][q] = hzeros(q % 2 ? (size_t)R + 1 : n + 1);
            be->ops->moe_gate_fwd(be, dout_, dy, ds, R, C);
            act_down(be, o[k][0], dout_, n), f32_down(be, o[k][1], ds, (size_t)R);
            be->ops->moe_gate_bwd(be, dy, ds, dd, R, C);
            act_down(be, o[k][2], dy, n), f32_down(be, o[k][3], ds, (size_t)R);
            dfree(be, dout_), dfree(be, dy), dfree(be, dd), dfree(be, ds);
        }
        static const char *what[4] = {"fwd out", "fwd gate", "bwd dy", "bwd dlogit"};
        const size_t m[4] = {n, (size_t)R, n, (size_t)R};
        for (int q = 0; q < 4; q++) {
            char nm[64];
            snprintf(nm, sizeof nm, "moe_gate %s R%d C%d", what[q], R, C);
            cmp(P, nm, o[1][q], o[0][q], m[q], q % 2 ? 1e-5 : P->tol);
        }
        for (int k = 0; k < 2; k++)
            for (int q = 0; q < 4; q++) free(o[k][q]);
        free(out0), free(y0), free(dout), free(l0);
    }
}

/* ======================= driver ======================= */
typedef struct {
    const char *name;
    void (*fn)(const Pair *);
    int misalign; /* also run with every buffer off the 16-byte grid */
} Case;

static const Case cases[] = {
    {"embedding", t_embedding, 1}, {"embedding_tp", t_embedding_tp, 1},
    {"layernorm", t_layernorm, 1}, {"add_act", t_add_act, 1},
    {"linear", t_linear, 1},       {"gelu", t_gelu, 1},
    {"attention", t_attention, 1}, {"attention_docs", t_attention_docs, 1},
    {"attention_window", t_attention_window, 1}, {"attention_sinks", t_attention_sinks, 1},
    {"xent", t_xent, 1},
    {"xent_tp", t_xent_tp, 1},     {"adamw", t_adamw, 1},
    {"reduce", t_reduce, 1},       {"step_scalars", t_step_scalars, 0},
    {"memory_streams", t_memory_streams, 0},
    {"rmsnorm", t_rmsnorm, 1},     {"swiglu", t_swiglu, 1},
    {"rope", t_rope, 1},           {"qk_norm", t_qk_norm, 1},
    {"moe_router", t_moe_router, 1}, {"moe_topk", t_moe_topk, 0},
    {"moe_aux", t_moe_aux, 0},       {"moe_dispatch", t_moe_dispatch, 0},
    {"moe_permute", t_moe_permute, 1}, {"moe_gate", t_moe_gate, 1},
    {"linear_group", t_linear_group, 1},
};

/* 1 when name is an item of the comma list. */
static int listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* One case on one pair: a PASS or FAIL line named case_pair (case_pair_off4 for
 * the misaligned run). */
static void run_case(const Case *c, const Pair *p) {
    test_cur_failed = 0;
    /* each case's data from its own name: --only CASE reproduces a failure of a full run */
    g_rng = 0x9e3779b97f4a7c15ull;
    for (const char *s = c->name; *s; s++) g_rng = (g_rng ^ (unsigned char)*s) * 0x100000001b3ull;
    for (const char *s = p->tag; *s; s++) g_rng = (g_rng ^ (unsigned char)*s) * 0x100000001b3ull;
    g_rng ^= g_offset;
    fflush(stdout);
    c->fn(p);
    printf("%s %s_%s%s\n", test_cur_failed ? "FAIL" : "PASS", c->name, p->tag,
           g_offset ? "_off4" : "");
    if (test_cur_failed) test_n_fail++;
    else test_n_pass++;
    fflush(stdout);
}

/* The case once more with every device buffer 4 bytes off the 16-byte grid. */
static void run_case_misaligned(const Case *c, const Pair *p) {
    g_offset = 4;
    run_case(c, p);
    g_offset = 0;
}

static LtBackend *make_cuda(LtDtype dt, int alt) {
    char err[256] = "";
    if (alt) setenv("LT_CUDA_ATTN", "simt", 1), setenv("LT_CUDA_GEMM", "plain", 1);
    LtBackend *be = lt_backend_cuda_create(dt, 0, err, sizeof err);
    unsetenv("LT_CUDA_ATTN"), unsetenv("LT_CUDA_GEMM");
    if (!be) {
        printf("FAIL cuda_backend_create: %s\n", err);
        exit(1);
    }
    LtAttnChoice ch; /* lattice's kernels, explicitly (the cuDNN pair has its own backend) */
    if (lt_cuda_attention_configure(be, LT_ATTN_LATTICE, 1, 0, 0, &ch)) {
        printf("FAIL attention_configure_lattice: %s\n", ch.reason);
        exit(1);
    }
    return be;
}

/* A bf16 backend whose attention is cuDNN's: deterministic where cuDNN
 * offers that (Hopper), else non-deterministic (*nondet = 1). NULL, with a
 * FAIL line, when cuDNN cannot run on this machine. */
static LtBackend *make_cudnn(int *nondet) {
    LtBackend *be = make_cuda(LT_BF16, 0);
    LtAttnChoice ch;
    *nondet = 0;
    if (lt_cuda_attention_configure(be, LT_ATTN_CUDNN, 1, 0, 0, &ch) == 0) {
        printf("cuDNN pair: %s\n", ch.reason);
        return be;
    }
    printf("deterministic cuDNN attention refused: %s\n", ch.reason);
    *nondet = 1;
    if (lt_cuda_attention_configure(be, LT_ATTN_CUDNN, 0, 0, 0, &ch) == 0) {
        printf("cuDNN pair (no bitwise check): %s\n", ch.reason);
        return be;
    }
    printf("FAIL attention_cudnn_available: %s\n", ch.reason);
    test_n_fail++;
    lt_backend_destroy(be);
    return NULL;
}

/* model.attention=cudnn on an fp32 backend is refused naming the key; auto
 * resolves to lattice's kernels there. */
static LtBackend *g_fp32_backend;
static void test_cudnn_refuses_fp32(void) {
    LtAttnChoice ch;
    CHECK(lt_cuda_attention_configure(g_fp32_backend, LT_ATTN_CUDNN, 1, 64, 0, &ch) == -1 &&
              strstr(ch.reason, "model.attention=cudnn") && strstr(ch.reason, "train.precision"),
          "explicit cudnn in fp32: %s", ch.reason);
    CHECK(lt_cuda_attention_configure(g_fp32_backend, LT_ATTN_AUTO, 1, 64, 0, &ch) == 0 &&
              !ch.cudnn,
          "auto in fp32: %s", ch.reason);
    CHECK(lt_cuda_attention_configure(g_fp32_backend, LT_ATTN_LATTICE, 1, 64, 0, &ch) == 0,
          "reset");
}

/* A cuDNN failure is never fatal: with LT_CUDNN_FAIL=build and =execute
 * (every plan build or execute fails as cuDNN's would) a cuDNN backend's
 * attention runs on lattice's kernels, bit for bit what a lattice backend
 * computes, and its counters say so; the second call of a shape finds the
 * failure cached. */
static void attn_run_raw(LtBackend *be, const float *qkv, const float *dout, int B, int T, int NH,
                         int HD, void **out, void **lse, void **dqkv) {
    const size_t nq = (size_t)B * T * 3 * NH * HD, no = (size_t)B * T * NH * HD;
    const size_t nl = (size_t)B * NH * T;
    void *dq = act_up(be, qkv, nq), *dy = act_up(be, dout, no), *o = act_up(be, NULL, no);
    float *dl = f32_up(be, NULL, nl);
    void *dg = act_up(be, NULL, nq);
    poison(be, dg, lt_act_bytes(be, nq));
    be->ops->attention_fwd(be, o, dl, dq, NULL, NULL, -1, B, T, NH, NH, HD);
    be->ops->attention_bwd(be, dg, NULL, dy, dq, o, dl, NULL, NULL, -1, B, T, NH, NH, HD);
    *out = raw_down(be, o, lt_act_bytes(be, no));
    *lse = raw_down(be, dl, nl * 4);
    *dqkv = raw_down(be, dg, lt_act_bytes(be, nq));
    dfree(be, dq), dfree(be, dy), dfree(be, o), dfree(be, dl), dfree(be, dg);
}

static void test_cudnn_failure_falls_back(void) {
    const int B = 2, T = 256, NH = 4, HD = 64;
    const size_t nq = (size_t)B * T * 3 * NH * HD, no = (size_t)B * T * NH * HD;
    float *qkv = hrand(nq, 1.7f, 1), *dout = hrand(no, 1.f, 1);
    void *want[3];
    attn_run_raw(g_lattice_bf16, qkv, dout, B, T, NH, HD, &want[0], &want[1], &want[2]);
    const size_t bytes[3] = {no * 2, (size_t)B * NH * T * 4, nq * 2};
    static const char *const hooks[] = {"build", "execute"};
    for (int h = 0; h < 2; h++) {
        setenv("LT_CUDNN_FAIL", hooks[h], 1);
        LtBackend *be = make_cuda(LT_BF16, 0);
        LtAttnChoice ch;
        int rc = lt_cuda_attention_configure(be, LT_ATTN_CUDNN, 1, HD, 0, &ch);
        if (rc) rc = lt_cuda_attention_configure(be, LT_ATTN_CUDNN, 0, HD, 0, &ch);
        unsetenv("LT_CUDNN_FAIL");
        CHECK(rc == 0 && ch.cudnn, "LT_CUDNN_FAIL=%s: cuDNN backend: %s", hooks[h], ch.reason);
        if (rc == 0) {
            for (int rep = 0; rep < 2; rep++) {
                void *got[3];
                attn_run_raw(be, qkv, dout, B, T, NH, HD, &got[0], &got[1], &got[2]);
                static const char *const what[3] = {"out", "lse", "dqkv"};
                for (int k = 0; k < 3; k++) {
                    CHECK(memcmp(got[k], want[k], bytes[k]) == 0,
                          "LT_CUDNN_FAIL=%s call %d: %s differs from lattice's kernels", hooks[h],
                          rep + 1, what[k]);
                    free(got[k]);
                }
            }
            LtAttnInfo ai;
            lt_cuda_attention_info(be, &ai);
            printf("  LT_CUDNN_FAIL=%-7s cuDNN calls %ld/%ld, left to lattice %ld/%ld, plans "
                   "failed %ld: %s\n", hooks[h], ai.cudnn_calls[0], ai.cudnn_calls[1],
                   ai.fallback_calls[0], ai.fallback_calls[1], ai.plans_failed, ai.last_fallback);
            CHECK(ai.cudnn_calls[0] == 0 && ai.cudnn_calls[1] == 0 && ai.fallback_calls[0] == 2 &&
                      ai.fallback_calls[1] == 2 && ai.plans_failed == 2,
                  "LT_CUDNN_FAIL=%s: counters", hooks[h]);
            CHECK(strstr(ai.last_fallback, hooks[h][0] == 'b' ? "build" : "execute") != NULL,
                  "the reason names the failure: %s", ai.last_fallback);
        }
        lt_backend_destroy(be);
    }
    for (int k = 0; k < 3; k++) free(want[k]);
    free(qkv), free(dout);
}

int main(int argc, char **argv) {
    const char *only = NULL; /* --only a,b,c: just these cases ("cudnn": the cuDNN checks) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) g_quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--aligned")) g_aligned = 1;
        else {
            printf("usage: test_gpu_ops [--quick] [--aligned] [--only CASE[,CASE...]]\n"
                   "  CASE: a case (every pair), or a case and pair as a PASS/FAIL line names\n"
                   "  them (attention_docs_bf16n); run in the order listed\n"
                   "  --aligned: without the re-runs on buffers 4 bytes off the 16-byte grid\n");
            return 2;
        }
    }
    printf("lattice GPU op tests: %d CUDA device(s), compiled=%d, cuDNN %ld%s\n",
           lt_cuda_device_count(), lt_cuda_compiled(), lt_cudnn_version(),
           g_quick ? " (quick)" : "");
    if (lt_cuda_device_count() <= 0) {
        printf("FAIL no_cuda_device\n0 passed, 1 failed\n");
        return 1;
    }
    int nondet = 0;
    LtBackend *g32 = make_cuda(LT_F32, 0), *g16 = make_cuda(LT_BF16, 0);
    LtBackend *a32 = make_cuda(LT_F32, 1), *a16 = make_cuda(LT_BF16, 1);
    LtBackend *n16 = make_cudnn(&nondet);
    printf("device: %s\n", g32->device_name);
    g_fp32_backend = g32;
    g_lattice_bf16 = g16;
    if (!only || listed(only, "cudnn")) {
        RUN(test_cudnn_refuses_fp32);
        RUN(test_cudnn_failure_falls_back);
    }
#ifdef LT_GPU_TEST_NO_CPU
    printf("reference: CUDA fp32 alternative paths (built without the CPU backend)\n");
    Pair pairs[] = {
        {.ref = a32, .dut = g32, .tag = "f32", .tol = 1e-5},
        {.ref = a32, .dut = g16, .tag = "bf16", .tol = 1e-2, .bf16 = 1},
        {.ref = a32, .dut = a16, .tag = "bf16a", .tol = 1e-2, .bf16 = 1},
        {.ref = a32, .dut = n16, .tag = "bf16n", .tol = 1e-2, .bf16 = 1, .cudnn = 1, .nondet = nondet},
    };
    LtBackend *c32 = NULL, *c16 = NULL;
#else
    LtBackend *c32 = lt_backend_cpu_create(LT_F32, 0), *c16 = lt_backend_cpu_create(LT_BF16, 0);
    printf("reference: CPU backend (%s)\n", c32->ops->name);
    Pair pairs[] = {
        {.ref = c32, .dut = g32, .tag = "f32", .tol = 1e-5},
        {.ref = c32, .dut = a32, .tag = "f32a", .tol = 1e-5},
        {.ref = c16, .dut = g16, .tag = "bf16", .tol = 1e-2, .bf16 = 1},
        {.ref = c16, .dut = a16, .tag = "bf16a", .tol = 1e-2, .bf16 = 1},
        {.ref = c16, .dut = n16, .tag = "bf16n", .tol = 1e-2, .bf16 = 1, .cudnn = 1, .nondet = nondet},
    };
#endif
    const int npairs = (int)(sizeof pairs / sizeof pairs[0]);
    /* --only's items in their order (a time-capped run, e.g. under racecheck,
     * gets through the first ones), each a case (all its pairs) or a case_pair */
    for (const char *item = only ? only : ""; item;) {
        const char *e = only ? strchr(item, ',') : NULL;
        char want[96];
        snprintf(want, sizeof want, "%.*s", e ? (int)(e - item) : 95, item);
        int matched = !only || !strcmp(want, "cudnn");
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            for (int p = 0; p < npairs; p++) {
                if (pairs[p].cudnn && (!pairs[p].dut || strncmp(cases[c].name, "attention", 9)))
                    continue;
                char full[96];
                snprintf(full, sizeof full, "%s_%s", cases[c].name, pairs[p].tag);
                if (only && strcmp(want, cases[c].name) && strcmp(want, full)) continue;
                matched = 1;
                run_case(&cases[c], &pairs[p]);
                if (cases[c].misalign && !g_aligned) run_case_misaligned(&cases[c], &pairs[p]);
            }
        }
        if (!matched) { /* a misspelt name must not pass as "0 failed" */
            printf("FAIL only_%s: --only names no case or case_pair that runs here '%s' (the "
                   "bf16n pair needs cuDNN)\n", want, want);
            test_n_fail++;
        }
        item = e ? e + 1 : NULL;
    }
    lt_backend_destroy(g32), lt_backend_destroy(g16), lt_backend_destroy(a32), lt_backend_destroy(a16);
    lt_backend_destroy(n16);
    if (c32) lt_backend_destroy(c32);
    if (c16) lt_backend_destroy(c16);
    return test_summary();
}
