/* bench_attention.c - causal attention throughput of the CUDA backend, for
 * each attention implementation: lattice's kernels and cuDNN's fused flash
 * attention (deterministic backward, and non-deterministic with
 * --nondet).
 *
 * For T in {1024, 2048} and HD in {64, 128}: B*T = 16384 tokens, NH*HD = 2048
 * (so NH = 32 or 16), bf16 (and fp32 with --f32, where only lattice runs);
 * then grouped-query attention as in Llama 3 8B: T 2048, HD 128, NH 32 query
 * heads sharing NKV 8 key/value heads (FLOPs counted per query head, so the
 * figures compare with the multi-head lines); then GPT-OSS 20B's
 * sliding-window layers: window 128 (query t sees keys t-128..t), HD 64, 64
 * query heads over 8 key/value heads, at T 2048 and 8192 (B*T = 16384).
 * FLOPs use the usual causal convention: forward 4*B*NH*T^2*HD / 2 (two
 * matmuls over half the score matrix), backward 2.5x that (five matmuls, one
 * of them recomputing S); a window counts its band's query-key pairs in place
 * of T^2 / 2, as the model's FLOP count does. Each figure is the median
 * over 15 samples; a sample times 5 back-to-back launches between device
 * synchronizations.
 * Set LT_CUDA_ATTN=simt to measure lattice's generic path (every
 * configuration then runs it). A cuDNN configuration that cuDNN's rules
 * left (partly) to lattice's kernels is marked. Prints one line per
 * configuration:
 *   attn cudnn-det T=1024 HD=64 B=16 NH=32 bf16: fwd X TFLOP/s (t ms) bwd Y ... fwd+bwd Z
 * (with "NKV=8" after NH for the grouped configurations and "W=128" after
 * that for the windowed ones). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_select.h"
#include "backend.h"
#include "common.h"

#define SAMPLES 15
#define INNER 5

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    LtBackend *be;
    void *out, *qkv, *dout, *dqkv;
    float *lse;
    int32_t *kstart; /* the window's first keys (NULL: causal) */
    int B, T, NH, NKV, HD, window;
} Bench;

static void run_fwd(Bench *b) {
    b->be->ops->attention_fwd(b->be, b->out, b->lse, b->qkv, NULL, b->kstart, b->window, b->B,
                              b->T, b->NH, b->NKV, b->HD);
}
static void run_bwd(Bench *b) {
    b->be->ops->attention_bwd(b->be, b->dqkv, NULL, b->dout, b->qkv, b->out, b->lse, NULL,
                              b->kstart, b->window, b->B, b->T, b->NH, b->NKV, b->HD);
}

/* Median seconds per call of fn. */
static double time_it(Bench *b, void (*fn)(Bench *)) {
    double s[SAMPLES];
    for (int w = 0; w < 3; w++) fn(b);
    b->be->ops->synchronize(b->be);
    for (int i = 0; i < SAMPLES; i++) {
        double t0 = lt_now();
        for (int k = 0; k < INNER; k++) fn(b);
        b->be->ops->synchronize(b->be);
        s[i] = (lt_now() - t0) / INNER;
    }
    qsort(s, SAMPLES, sizeof(double), cmp_d);
    return s[SAMPLES / 2];
}

static void fill(LtBackend *be, void *dst, size_t n, uint64_t seed) {
    float *h = malloc(n * sizeof(float));
    if (!h) lt_fatal("out of host memory");
    /* counter-based normals, in parallel: 100 M of them per shape took most of the
     * attention phase's 150 s on the third draw */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) h[i] = lt_normal_at(seed, 0, i);
    float *tmp = be->ops->alloc(be, n * sizeof(float));
    be->ops->upload(be, tmp, h, n * sizeof(float));
    be->ops->act_from_f32(be, dst, tmp, n);
    be->ops->synchronize(be);
    be->ops->free(be, tmp);
    free(h);
}

/* The window's first keys max(0, t - W) of B sequences of T, on be. */
static int32_t *window_starts(LtBackend *be, int B, int T, int W) {
    int32_t *h = malloc((size_t)B * T * sizeof(int32_t));
    if (!h) lt_fatal("out of host memory");
    for (int i = 0; i < B * T; i++) h[i] = i % T > W ? i % T - W : 0;
    int32_t *d = be->ops->alloc(be, (size_t)B * T * sizeof(int32_t));
    be->ops->upload(be, d, h, (size_t)B * T * sizeof(int32_t));
    free(h);
    return d;
}

/* Query-key pairs of one head of one sequence: T^2 / 2 causal (the usual
 * convention), the band's exact count with a window of W keys before each
 * query. */
static double pairs_of(int T, int W) {
    if (W < 0 || W >= T - 1) return (double)T * T / 2.0;
    return (double)W * (W + 1) / 2.0 + (double)(T - W) * (W + 1);
}

/* One configuration (T, NH query heads, NKV key/value heads, HD, window W;
 * -1: causal) timed on be; the line names the path. */
static void bench_one(LtBackend *be, const char *path, int T, int NH, int NKV, int HD, int W) {
    const LtDtype dt = be->dtype;
    Bench b = {be, NULL, NULL, NULL, NULL, NULL, NULL, 16384 / T, T, NH, NKV, HD, W};
    const size_t no = (size_t)b.B * b.T * b.NH * b.HD;
    const size_t nq = (size_t)b.B * b.T * (b.NH + 2 * b.NKV) * b.HD;
    char kv[48] = "";
    if (NKV != NH) snprintf(kv, sizeof kv, " NKV=%d", NKV);
    if (W >= 0) {
        snprintf(kv + strlen(kv), sizeof kv - strlen(kv), " W=%d", W);
        b.kstart = window_starts(be, b.B, T, W);
    }
    b.qkv = be->ops->alloc(be, lt_act_bytes(be, nq));
    b.dqkv = be->ops->alloc(be, lt_act_bytes(be, nq));
    b.out = be->ops->alloc(be, lt_act_bytes(be, no));
    b.dout = be->ops->alloc(be, lt_act_bytes(be, no));
    b.lse = be->ops->alloc(be, (size_t)b.B * b.NH * b.T * sizeof(float));
    fill(be, b.qkv, nq, 1);
    fill(be, b.dout, no, 2);
    LtAttnInfo before, after;
    lt_cuda_attention_info(be, &before);
    const double tf = time_it(&b, run_fwd), tb = time_it(&b, run_bwd);
    lt_cuda_attention_info(be, &after);
    const long fell = after.fallback_calls[0] + after.fallback_calls[1] -
                      before.fallback_calls[0] - before.fallback_calls[1];
    const double flop_f = 4.0 * b.B * b.NH * pairs_of(T, W) * b.HD, flop_b = 2.5 * flop_f;
    printf("attn %s T=%d HD=%d B=%d NH=%d%s %s: fwd %.1f TFLOP/s (%.3f ms)  bwd %.1f TFLOP/s "
           "(%.3f ms)  fwd+bwd %.1f TFLOP/s%s\n",
           path, b.T, b.HD, b.B, b.NH, kv, dt == LT_BF16 ? "bf16" : "fp32", flop_f / tf * 1e-12,
           tf * 1e3, flop_b / tb * 1e-12, tb * 1e3, (flop_f + flop_b) / (tf + tb) * 1e-12,
           fell ? "  [some calls ran on lattice's kernels]" : "");
    if (fell) printf("  (%s)\n", after.last_fallback);
    fflush(stdout);
    be->ops->free(be, b.qkv), be->ops->free(be, b.dqkv), be->ops->free(be, b.out);
    be->ops->free(be, b.dout), be->ops->free(be, b.lse);
    if (b.kstart) be->ops->free(be, b.kstart);
}

typedef struct {
    const char *name;
    LtAttnImpl impl;
    int deterministic;
} Path;

int main(int argc, char **argv) {
    LtDtype dt = LT_BF16;
    int nondet = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--f32")) dt = LT_F32;
        if (!strcmp(argv[i], "--nondet")) nondet = 1;
    }
    char err[256] = "";
    LtBackend *be = lt_backend_cuda_create(dt, 0, err, sizeof err);
    if (!be) {
        printf("bench_attention: no CUDA backend: %s\n", err);
        return 1;
    }
    const char *env = getenv("LT_CUDA_ATTN");
    printf("bench_attention on %s, %s, cuDNN %ld%s\n", be->device_name,
           dt == LT_BF16 ? "bf16" : "fp32", lt_cudnn_version(),
           env && !strcmp(env, "simt") ? ", LT_CUDA_ATTN=simt (lattice's generic kernel)" : "");
    const Path paths[] = {
        {.name = "lattice", .impl = LT_ATTN_LATTICE, .deterministic = 1},
        {.name = "cudnn-det", .impl = LT_ATTN_CUDNN, .deterministic = 1},
        {.name = "cudnn-nondet", .impl = LT_ATTN_CUDNN, .deterministic = 0},
    };
    static const int Ts[] = {1024, 2048}, HDs[] = {64, 128};
    for (int p = 0; p < 2 + nondet; p++) {
        LtAttnChoice ch;
        if (lt_cuda_attention_configure(be, paths[p].impl, paths[p].deterministic, 0, 0, &ch)) {
            printf("%s: not run: %s\n", paths[p].name, ch.reason);
            continue;
        }
        printf("%s: %s\n", paths[p].name, ch.reason);
        for (int ti = 0; ti < 2; ti++)
            for (int hi = 0; hi < 2; hi++)
                bench_one(be, paths[p].name, Ts[ti], 2048 / HDs[hi], 2048 / HDs[hi], HDs[hi], -1);
        bench_one(be, paths[p].name, 2048, 32, 8, 128, -1); /* grouped K/V, Llama 3 8B's heads */
        for (int ti = 0; ti < 2; ti++) /* GPT-OSS 20B's sliding-window layers */
            bench_one(be, paths[p].name, ti ? 8192 : 2048, 64, 8, 64, 128);
    }
    lt_backend_destroy(be);
    return 0;
}
