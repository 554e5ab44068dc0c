/* bench_kernels.c - memory bandwidth of the CUDA backend's memory-bound ops
 * (LayerNorm forward/backward, residual add, GeLU forward/backward, the
 * cross-entropy over a logits chunk, AdamW, the gradient sum of squares, the
 * mixture-of-experts permute family),
 * against the GPU's peak DRAM bandwidth.
 *
 * Shapes are GPT-2's at micro batch 16 x 1024 tokens: C 768 (124M) and 1600
 * (1.5B), GeLU over 4C, cross-entropy over 8192 rows of the padded vocabulary
 * 50304, AdamW and the sum of squares over 124M fp32 parameters. Each op runs
 * twice: with 16-byte-aligned buffers (the vector paths) and with every buffer
 * 4 bytes off the 16-byte grid, which takes the same kernels' scalar
 * fallbacks, i.e. one element per access as before the vector rewrite.
 * Bytes are the floors stated in each kernel file's design note (s = 2 in
 * bf16): LayerNorm forward with residual 4s per element, backward 4s, add 3s,
 * GeLU forward 2s, backward 3s, cross-entropy 2s per logit (read, rewrite in
 * place), AdamW 30 (bf16 param) / 32 (fp32), sum of squares 4; the MoE row
 * gathers (permute, unpermute and their backwards, bench_moe) as moe.cu states. A figure is
 * the median of 15 samples of 5 back-to-back calls between synchronizations;
 * working sets are far above the 50 MiB L2. Prints one line per op:
 *   kern layernorm_fwd C=768 bf16 aligned: 0.123 ms  2950 GB/s  88% of peak */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"

#define SAMPLES 15
#define INNER 5
#define NTOK (16 * 1024)
#define XENT_ROWS 8192
#define VOCAB 50257
#define VOCAB_PAD 50304
#define NPARAM ((size_t)124 * 1000 * 1000)
#define MOE_K 2 /* experts per token in the MoE gathers */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    LtBackend *be;
    size_t off;       /* 0, or 4: every buffer off the 16-byte grid */
    void *p[8];       /* the op's buffers (as the op sees them) */
    int N, C;
    size_t n;
    double *acc;      /* sum_f64's accumulator (naturally aligned) */
    LtAdamArgs adam;
} Bench;

typedef struct {
    const char *name;
    void (*run)(Bench *b);
    double bytes_per_elem; /* in units of s where per_s, else bytes */
    int per_s;
} Op;

static void r_ln_fwd(Bench *b) {
    b->be->ops->layernorm_fwd(b->be, b->p[0], b->p[1], b->p[2], b->p[3], b->p[4], b->p[5],
                              b->p[6], b->p[7], b->N, b->C);
}
static void r_ln_bwd(Bench *b) {
    b->be->ops->layernorm_bwd(b->be, b->p[0], b->p[1], b->p[2], b->p[3], b->p[4], b->p[5],
                              b->p[6], b->p[7], b->N, b->C);
}
static void r_add(Bench *b) { b->be->ops->add_act(b->be, b->p[0], b->p[1], b->p[2], b->n); }
static void r_gelu_fwd(Bench *b) { b->be->ops->gelu_fwd(b->be, b->p[0], b->p[1], b->n); }
static void r_gelu_bwd(Bench *b) { b->be->ops->gelu_bwd(b->be, b->p[0], b->p[1], b->p[2], b->n); }
static void r_xent(Bench *b) {
    /* dscale != 0, as in training: the logits are read and rewritten in place with
     * the gradient (later calls run on the previous call's gradient: finite values) */
    b->be->ops->xent_fwd_bwd(b->be, b->p[0], b->p[1], b->p[2], b->N, VOCAB, VOCAB_PAD, 1.f);
}
static void r_adamw(Bench *b) {
    b->be->ops->adamw(b->be, b->p[0], b->p[1], b->p[2], b->p[3], b->p[4], b->n, &b->adam);
}
static void r_sumsq(Bench *b) { b->be->ops->sum_f64(b->be, b->acc, b->p[0], b->n, 1); }

static double time_it(Bench *b, void (*fn)(Bench *)) {
    double s[SAMPLES];
    for (int w = 0; w < 3; w++) fn(b);
    b->be->ops->synchronize(b->be);
    for (int i = 0; i < SAMPLES; i++) {
        const double t0 = lt_now();
        for (int k = 0; k < INNER; k++) fn(b);
        b->be->ops->synchronize(b->be);
        s[i] = (lt_now() - t0) / INNER;
    }
    qsort(s, SAMPLES, sizeof(double), cmp_d);
    return s[SAMPLES / 2];
}

/* bytes on the device, b->off bytes into a fresh allocation, filled with small
 * values (act_from_f32 of a ramp: finite in every op, no NaN paths) */
static void *buf(Bench *b, size_t bytes, int act, size_t n) {
    LtBackend *be = b->be;
    char *raw = be->ops->alloc(be, bytes + 16);
    void *d = raw + b->off;
    float *h = malloc(n * sizeof(float));
    if (!h) lt_fatal("bench_kernels: out of host memory");
    for (size_t i = 0; i < n; i++) h[i] = 0.01f * (float)((i * 2654435761u) % 200) - 1.f;
    if (act) {
        float *tmp = be->ops->alloc(be, n * sizeof(float));
        be->ops->upload(be, tmp, h, n * sizeof(float));
        be->ops->act_from_f32(be, d, tmp, n);
        be->ops->synchronize(be);
        be->ops->free(be, tmp);
    } else {
        be->ops->upload(be, d, h, bytes < n * sizeof(float) ? bytes : n * sizeof(float));
    }
    free(h);
    return d;
}

static void release(Bench *b, int k) {
    for (int i = 0; i < k; i++)
        if (b->p[i]) b->be->ops->free(b->be, (char *)b->p[i] - b->off);
    memset(b->p, 0, sizeof b->p);
}

static double g_peak; /* bytes/s, 0 when unknown */

static void report(Bench *b, const char *name, const char *shape, double bytes, double t) {
    const double gbs = bytes / t * 1e-9;
    printf("kern %-14s %-9s %s %-9s: %8.3f ms  %6.0f GB/s", name, shape,
           b->be->dtype == LT_BF16 ? "bf16" : "fp32", b->off ? "off4" : "aligned", t * 1e3, gbs);
    if (g_peak > 0) printf("  %3.0f%% of peak", 100.0 * bytes / t / g_peak);
    printf("\n");
    fflush(stdout);
}

static void bench_rows(LtBackend *be, size_t off, int C) {
    const double s = (double)lt_act_bytes(be, 1);
    const int N = NTOK;
    const size_t nc = (size_t)N * C;
    char shape[32];
    Bench b = {.be = be, .off = off, .N = N, .C = C, .n = nc};
    snprintf(shape, sizeof shape, "C=%d", C);
    /* layernorm_fwd(resid_out, out, mean, rstd, a, b, w, bias) */
    b.p[0] = buf(&b, lt_act_bytes(be, nc), 1, nc), b.p[1] = buf(&b, lt_act_bytes(be, nc), 1, nc);
    b.p[2] = buf(&b, N * 4, 0, N), b.p[3] = buf(&b, N * 4, 0, N);
    b.p[4] = buf(&b, lt_act_bytes(be, nc), 1, nc), b.p[5] = buf(&b, lt_act_bytes(be, nc), 1, nc);
    b.p[6] = buf(&b, lt_act_bytes(be, C), 1, C), b.p[7] = buf(&b, lt_act_bytes(be, C), 1, C);
    report(&b, "layernorm_fwd", shape, 4 * s * nc, time_it(&b, r_ln_fwd));
    /* layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd): reuse the forward's mean/rstd */
    void *mean = b.p[2], *rstd = b.p[3], *w = b.p[6];
    void *dinp = b.p[0], *dout = b.p[1], *inp = b.p[4];
    void *dw = buf(&b, (size_t)C * 4, 0, C), *db = buf(&b, (size_t)C * 4, 0, C);
    Bench g = b;
    void *q[8] = {dinp, dw, db, dout, inp, w, mean, rstd};
    memcpy(g.p, q, sizeof q);
    report(&b, "layernorm_bwd", shape, 4 * s * nc, time_it(&g, r_ln_bwd));
    be->ops->free(be, (char *)dw - off), be->ops->free(be, (char *)db - off);
    /* add_act(out, a, b) */
    g.n = nc;
    void *q2[8] = {b.p[0], b.p[1], b.p[4]};
    memcpy(g.p, q2, sizeof q2);
    report(&b, "add_act", shape, 3 * s * nc, time_it(&g, r_add));
    release(&b, 8);
    /* GeLU over (N, 4C) */
    const size_t n4 = 4 * nc;
    Bench h = {.be = be, .off = off, .n = n4};
    h.p[0] = buf(&h, lt_act_bytes(be, n4), 1, n4), h.p[1] = buf(&h, lt_act_bytes(be, n4), 1, n4);
    h.p[2] = buf(&h, lt_act_bytes(be, n4), 1, n4);
    snprintf(shape, sizeof shape, "4C=%d", 4 * C);
    report(&h, "gelu_fwd", shape, 2 * s * n4, time_it(&h, r_gelu_fwd));
    report(&h, "gelu_bwd", shape, 3 * s * n4, time_it(&h, r_gelu_bwd));
    release(&h, 3);
}

static void bench_flat(LtBackend *be, size_t off) {
    const double s = (double)lt_act_bytes(be, 1);
    /* cross-entropy over a chunk of logits, rewritten in place with the gradient */
    const size_t nl = (size_t)XENT_ROWS * VOCAB_PAD;
    Bench x = {.be = be, .off = off, .N = XENT_ROWS};
    x.p[0] = buf(&x, XENT_ROWS * 4, 0, XENT_ROWS);
    x.p[1] = buf(&x, lt_act_bytes(be, nl), 1, nl);
    int32_t *tg = malloc(XENT_ROWS * sizeof(int32_t));
    if (!tg) lt_fatal("bench_kernels: out of host memory");
    for (int i = 0; i < XENT_ROWS; i++) tg[i] = (int32_t)((i * 7919u) % VOCAB);
    x.p[2] = (char *)be->ops->alloc(be, XENT_ROWS * sizeof(int32_t) + 16) + off;
    be->ops->upload(be, x.p[2], tg, XENT_ROWS * sizeof(int32_t));
    free(tg);
    report(&x, "xent_fwd_bwd", "V=50304", 2 * s * nl, time_it(&x, r_xent));
    release(&x, 3);
    /* AdamW and the sum of squares over 124M parameters */
    const size_t n = NPARAM;
    Bench a = {.be = be, .off = off, .n = n};
    a.adam = (LtAdamArgs){.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 0.1f, .bc1 = 0.1f, .bc2 = 0.05f, .grad_scale = 1.f};
    a.p[0] = buf(&a, lt_act_bytes(be, n), 1, n);
    for (int i = 1; i < 5; i++) a.p[i] = buf(&a, n * 4, 0, n);
    report(&a, "adamw", "124M", (16 + 12 + s) * (double)n, time_it(&a, r_adamw));
    Bench q = {.be = be, .off = off, .n = n};
    q.p[0] = a.p[2];
    q.acc = be->ops->alloc(be, sizeof(double));
    report(&q, "sum_sq", "124M", 4.0 * n, time_it(&q, r_sumsq));
    be->ops->free(be, q.acc);
    release(&a, 5);
}

static void r_moe_permute(Bench *b) {
    b->be->ops->moe_permute(b->be, b->p[0], b->p[1], b->p[2], b->N * MOE_K, b->C);
}
static void r_moe_unpermute(Bench *b) {
    b->be->ops->moe_unpermute(b->be, b->p[1], b->p[0], b->p[3], b->p[4], b->N, MOE_K, b->C);
}
static void r_moe_permute_bwd(Bench *b) {
    b->be->ops->moe_permute_bwd(b->be, b->p[1], b->p[0], b->p[3], b->N, MOE_K, b->C);
}
static void r_moe_unpermute_bwd(Bench *b) {
    b->be->ops->moe_unpermute_bwd(b->be, b->p[6], b->p[5], b->p[1], b->p[0], b->p[3], b->p[4],
                                  b->N, MOE_K, b->C, b->N * MOE_K);
}

/* The MoE row gathers over a dropless top-2 routing of NTOK tokens to 8 experts
 * (C 4096, Mixtral's hidden size): the dispatch itself runs once, untimed. Bytes
 * as moe.cu's design note: permute 2s per element of the (N K, C) buffer,
 * unpermute K s + s and permute_bwd K s + 2s per element of (N, C),
 * unpermute_bwd 5s per element of (N K, C) (zeroing, the scatter, the dot
 * products' two reads). */
static void bench_moe(LtBackend *be, size_t off) {
    const double s = (double)lt_act_bytes(be, 1);
    const int N = NTOK, C = 4096, E = 8;
    const size_t nx = (size_t)N * C, nk = (size_t)N * MOE_K, np = nk * C;
    Bench b = {.be = be, .off = off, .N = N, .C = C};
    b.p[0] = buf(&b, lt_act_bytes(be, np), 1, np); /* permuted rows */
    b.p[1] = buf(&b, lt_act_bytes(be, nx), 1, nx); /* token rows */
    int32_t *idx = malloc(nk * sizeof(int32_t));
    if (!idx) lt_fatal("bench_kernels: out of host memory");
    for (size_t a = 0; a < nk; a++) idx[a] = (int32_t)((a / MOE_K * 2654435761u + a % MOE_K) % E);
    void *didx = (char *)be->ops->alloc(be, nk * 4 + 16) + off;
    be->ops->upload(be, didx, idx, nk * 4);
    free(idx);
    b.p[2] = (char *)be->ops->alloc(be, nk * 4 + 16) + off; /* src */
    b.p[3] = (char *)be->ops->alloc(be, nk * 4 + 16) + off; /* pos */
    b.p[4] = buf(&b, nk * 4, 0, nk);                       /* w */
    b.p[5] = buf(&b, nk * 4, 0, nk);                       /* dw */
    b.p[6] = buf(&b, lt_act_bytes(be, np), 1, np);         /* dy */
    int32_t *off_e = be->ops->alloc(be, (E + 1) * 4), *dropped = be->ops->alloc(be, 4);
    be->ops->moe_dispatch(be, b.p[3], b.p[2], off_e, dropped, didx, NULL, N, E, MOE_K, 0, 0, 0);
    be->ops->free(be, off_e), be->ops->free(be, dropped), be->ops->free(be, (char *)didx - off);
    report(&b, "moe_permute", "C=4096", 2 * s * np, time_it(&b, r_moe_permute));
    report(&b, "moe_unpermute", "C=4096", (MOE_K + 1) * s * nx, time_it(&b, r_moe_unpermute));
    report(&b, "moe_permute_bwd", "C=4096", (MOE_K + 2) * s * nx, time_it(&b, r_moe_permute_bwd));
    report(&b, "moe_unperm_bwd", "C=4096", 5 * s * np, time_it(&b, r_moe_unpermute_bwd));
    release(&b, 7);
}

int main(int argc, char **argv) {
    LtDtype dt = LT_BF16;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--f32")) dt = LT_F32;
    char err[256] = "";
    LtBackend *be = lt_backend_cuda_create(dt, 0, err, sizeof err);
    if (!be) {
        printf("bench_kernels: no CUDA backend: %s\n", err);
        return 1;
    }
    int dev = 0, clk = 0, bus = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess)
        g_peak = 2.0 * clk * 1e3 * (bus / 8.0); /* DDR: two transfers per clock */
    printf("bench_kernels on %s, %s; peak DRAM bandwidth %.0f GB/s (memory clock %d MHz, bus %d "
           "bits)\n",
           be->device_name, dt == LT_BF16 ? "bf16" : "fp32", g_peak * 1e-9, clk / 1000, bus);
    static const int Cs[] = {768, 1600};
    for (int off = 0; off <= 4; off += 4) {
        for (int c = 0; c < 2; c++) bench_rows(be, (size_t)off, Cs[c]);
        bench_flat(be, (size_t)off);
        bench_moe(be, (size_t)off);
    }
    lt_backend_destroy(be);
    return 0;
}
