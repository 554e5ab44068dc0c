/* bench_moe.c - an MoE layer's routed experts against a dense FFN of the same
 * active parameters, on the same tokens, on the CPU backend (issue 27's
 * target: within 1.3x of the dense FFN's time).
 *
 * bench_moe [N C E K F [REPS]]: N tokens of width C; the MoE layer has E
 * experts of width F (SwiGLU, Llama's), K per token; the dense FFN has width
 * K F, so both run 6 N C K F multiply-adds forward. Each side runs forward and
 * backward REPS times after two warm-up rounds; printed: the median forward,
 * backward and total in ms, the MoE's over the dense's, and the MoE layer's
 * expert loads (the router is random, so the loads are uneven as early in
 * training). Threads: LT_BENCH_THREADS, else the CPU backend's default (all
 * cores). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "config.h"
#include "metrics.h"
#include "model/moe.h"

static float *randn(size_t n, float std, uint64_t seed) {
    float *x = lt_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = std * lt_normal_at(seed, 1, i);
    return x;
}

typedef struct {
    double fwd, bwd;
} Times;

/* The dense SwiGLU FFN of width F2 on x (N, C). */
static Times dense(LtBackend *be, int N, int C, int F2, int reps) {
    const LtBackendOps *o = be->ops;
    float *x = randn((size_t)N * C, 1.0f, 1), *w1 = randn((size_t)2 * F2 * C, 0.02f, 2),
          *w2 = randn((size_t)C * F2, 0.02f, 3), *dout = randn((size_t)N * C, 1.0f, 4);
    float *gu = lt_malloc(sizeof(float) * (size_t)N * 2 * F2), *h = lt_malloc(sizeof(float) * (size_t)N * F2),
          *y = lt_malloc(sizeof(float) * (size_t)N * C), *dh = lt_malloc(sizeof(float) * (size_t)N * F2),
          *dgu = lt_malloc(sizeof(float) * (size_t)N * 2 * F2), *dx = lt_malloc(sizeof(float) * (size_t)N * C),
          *g1 = lt_calloc(sizeof(float) * (size_t)2 * F2 * C), *g2 = lt_calloc(sizeof(float) * (size_t)C * F2);
    double *tf = lt_malloc(sizeof(double) * (size_t)reps), *tb = lt_malloc(sizeof(double) * (size_t)reps);
    for (int r = -2; r < reps; r++) {
        const double t0 = lt_now();
        o->linear_fwd(be, gu, NULL, x, w1, NULL, N, C, 2 * F2);
        o->swiglu_fwd(be, h, gu, N, F2, NULL);
        o->linear_fwd(be, y, NULL, h, w2, NULL, N, F2, C);
        const double t1 = lt_now();
        o->linear_bwd(be, dh, g2, NULL, dout, h, w2, NULL, N, F2, C);
        o->swiglu_bwd(be, dgu, gu, dh, N, F2, NULL);
        o->linear_bwd(be, dx, g1, NULL, dgu, x, w1, NULL, N, C, 2 * F2);
        const double t2 = lt_now();
        if (r >= 0) tf[r] = t1 - t0, tb[r] = t2 - t1;
    }
    Times t = {lt_median(tf, reps), lt_median(tb, reps)};
    void *ps[] = {x, w1, w2, dout, gu, h, y, dh, dgu, dx, g1, g2, tf, tb};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
    return t;
}

/* The routed experts (src/model/moe.c) on the same tokens; *imbalance: the
 * most loaded expert's rows over the mean. */
static Times routed(LtBackend *be, int N, int C, int E, int K, int F, int reps, double *imbalance) {
    LtMoeDims d = {.experts = E, .topk = K, .ffn = F, .score = LT_MOE_SOFTMAX, .topk_scale = 1.0f,
                   .balance = LT_MOE_BALANCE_NONE};
    const LtMoeShape s = lt_moe_shape(&d, LT_ARCH_LLAMA, 1, N, C, N, 0, 1, 0, 1, 0);
    LtMoeActs a = {0};
    LtMoeWork w = {0};
    size_t bytes = 0;
    lt_moe_acts_alloc(be, &s, &a, &bytes);
    lt_moe_work_alloc(be, &s, &w, &bytes);
    float *x = randn((size_t)N * C, 1.0f, 1), *router = randn((size_t)E * C, 0.02f, 5),
          *grouter = lt_calloc(sizeof(float) * (size_t)E * C), *dout = randn((size_t)N * C, 1.0f, 4),
          *dx = lt_calloc(sizeof(float) * (size_t)N * C);
    LtExpertTensors *ex = lt_calloc(sizeof *ex * (size_t)E);
    for (int e = 0; e < E; e++)
        ex[e] = (LtExpertTensors){.w1 = randn((size_t)2 * F * C, 0.02f, 10 + (uint64_t)e),
                                  .w2 = randn((size_t)C * F, 0.02f, 100 + (uint64_t)e),
                                  .g1 = lt_calloc(sizeof(float) * (size_t)2 * F * C),
                                  .g2 = lt_calloc(sizeof(float) * (size_t)C * F)};
    const LtMoeWeights wt = {.router = router, .grouter = grouter, .expert = ex};
    const LtMoeCtx cx = {.dims = &d, .aux_weight = 1.0f};
    double *tf = lt_malloc(sizeof(double) * (size_t)reps), *tb = lt_malloc(sizeof(double) * (size_t)reps);
    LtMoeStats st = {0};
    for (int r = -2; r < reps; r++) {
        const double t0 = lt_now();
        lt_moe_forward(be, &cx, &s, &wt, &a, &w, x, &st);
        const double t1 = lt_now();
        lt_moe_backward(be, &cx, &s, &wt, &a, &w, x, dout, dx);
        const double t2 = lt_now();
        if (r >= 0) tf[r] = t1 - t0, tb[r] = t2 - t1;
    }
    *imbalance = st.load_max / st.load_mean;
    Times t = {lt_median(tf, reps), lt_median(tb, reps)};
    for (int e = 0; e < E; e++) {
        free((void *)ex[e].w1), free((void *)ex[e].w2);
        free(ex[e].g1), free(ex[e].g2);
    }
    void *ps[] = {x, router, grouter, dout, dx, ex, tf, tb};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
    lt_moe_acts_free(be, &a);
    lt_moe_work_free(be, &w);
    return t;
}

int main(int argc, char **argv) {
    int v[6] = {4096, 512, 8, 2, 512, 10}; /* N C E K F REPS */
    if (argc != 1 && argc != 6 && argc != 7) {
        fprintf(stderr, "usage: bench_moe [N C E K F [REPS]]\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) v[i - 1] = atoi(argv[i]);
    const int N = v[0], C = v[1], E = v[2], K = v[3], F = v[4], reps = v[5];
    if (N < 1 || C < 1 || E < 1 || K < 1 || K > E || F < 1 || reps < 1) {
        fprintf(stderr, "bench_moe: need N, C, E, F, REPS >= 1 and 1 <= K <= E\n");
        return 2;
    }
    const char *th = getenv("LT_BENCH_THREADS");
    LtBackend *be = lt_backend_cpu_create(LT_F32, th ? atoi(th) : 0);
    const Times dn = dense(be, N, C, K * F, reps);
    double imb = 0.0;
    const Times mo = routed(be, N, C, E, K, F, reps, &imb);
    printf("| tokens | hidden | experts | top-k | expert width | dense width | dense fwd+bwd ms | "
           "MoE fwd+bwd ms | MoE / dense | expert load max/mean |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| %d | %d | %d | %d | %d | %d | %.1f + %.1f = %.1f | %.1f + %.1f = %.1f | %.2f | %.2f |\n",
           N, C, E, K, F, K * F, 1e3 * dn.fwd, 1e3 * dn.bwd, 1e3 * (dn.fwd + dn.bwd), 1e3 * mo.fwd,
           1e3 * mo.bwd, 1e3 * (mo.fwd + mo.bwd), (mo.fwd + mo.bwd) / (dn.fwd + dn.bwd), imb);
    lt_backend_destroy(be);
    return 0;
}
