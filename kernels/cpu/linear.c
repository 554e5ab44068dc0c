/* linear.c - fully connected layer through cblas (OpenBLAS) with fused bias,
 * GeLU epilogue and bf16 rounding of the stored act tensors.
 * Weights are [OC, C] row-major (out-features major). */
#include "blas.h"

#include "cpu_ops.h"

/* Column-sum of a (N, OC) matrix added into acc (OC): parallel over column
 * ranges, each range summed over rows in order (deterministic). */
static void colsum_add(const LtBackend *be, float *acc, const float *m, int N, int OC) {
    const int cb = 64;
    const int ntask = (OC + cb - 1) / cb;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int task = 0; task < ntask; task++) {
        int c0 = task * cb, nc = OC - c0 < cb ? OC - c0 : cb;
        float s[64];
        for (int c = 0; c < nc; c++) s[c] = 0.0f;
        for (int i = 0; i < N; i++) {
            const float *row = m + (size_t)i * OC + c0;
            for (int c = 0; c < nc; c++) s[c] += row[c];
        }
        for (int c = 0; c < nc; c++) acc[c0 + c] += s[c];
    }
}

void cpu_linear_fwd(LtBackend *be, void *out_, void *pre_gelu_, const void *inp_, const void *w_,
                    const void *bias_, int N, int C, int OC) {
    float *out = out_, *pre = pre_gelu_;
    const float *inp = inp_, *w = w_, *bias = bias_;
    const int bf16 = cpu_is_bf16(be);
    float *dst = pre ? pre : out; /* where the GEMM writes */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 0.0f, dst,
                OC);
    if (!bias && !pre && !bf16) return;
    /* Epilogue: + bias, round, and GeLU from the stored (rounded) pre-activation. */
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        float *d = dst + (size_t)i * OC;
        if (bias) {
            for (int o = 0; o < OC; o++) d[o] = cpu_store(bf16, d[o] + bias[o]);
        } else if (bf16) {
            for (int o = 0; o < OC; o++) d[o] = cpu_bf16_round(d[o]);
        }
        if (pre) {
            float *y = out + (size_t)i * OC;
            for (int o = 0; o < OC; o++) y[o] = cpu_store(bf16, cpu_gelu1(d[o]));
        }
    }
}

void cpu_linear_bwd(LtBackend *be, void *dinp_, float *dw, float *dbias, const void *dout_,
                    const void *inp_, const void *w_, const void *gelu_pre_, int N, int C,
                    int OC) {
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_, *w = w_, *gelu_pre = gelu_pre_;
    const int bf16 = cpu_is_bf16(be);
    if (dinp) {
        /* dinp(N,C) = dout(N,OC) . w(OC,C) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                    0.0f, dinp, C);
        long long n = (long long)N * C;
        if (gelu_pre) {
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be))
            for (long long i = 0; i < n; i++)
                dinp[i] = cpu_store(bf16, dinp[i] * cpu_gelu_grad1(gelu_pre[i]));
        } else {
            cpu_round_act(be, dinp, (size_t)n);
        }
    }
    if (dw) /* dw(OC,C) += dout^T(OC,N) . inp(N,C) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                    1.0f, dw, C);
    if (dbias) colsum_add(be, dbias, dout, N, OC);
}

/* The grouped linears: one BLAS call per GEMM of each non-empty group, the very
 * calls a loop of linear_fwd / linear_bwd over the groups makes, so the results
 * are bitwise those of that loop. */
void cpu_linear_group_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp,
                          const void *const *w, const void *const *bias, const int *off, int G,
                          int C, int OC) {
    for (int g = 0; g < G; g++) {
        const size_t r = (size_t)off[g];
        const int n = off[g + 1] - off[g];
        if (n <= 0) continue;
        float *pre = pre_gelu ? (float *)pre_gelu + r * OC : NULL;
        cpu_linear_fwd(be, (float *)out + r * OC, pre, (const float *)inp + r * C, w[g],
                       bias ? bias[g] : NULL, n, C, OC);
    }
}

void cpu_linear_group_bwd(LtBackend *be, void *dinp, float *const *dw, float *const *dbias,
                          const void *dout, const void *inp, const void *const *w,
                          const void *gelu_pre, const int *off, int G, int C, int OC) {
    for (int g = 0; g < G; g++) {
        const size_t r = (size_t)off[g];
        const int n = off[g + 1] - off[g];
        if (n <= 0) continue;
        float *di = dinp ? (float *)dinp + r * C : NULL;
        const float *gp = gelu_pre ? (const float *)gelu_pre + r * C : NULL;
        cpu_linear_bwd(be, di, dw ? dw[g] : NULL, dbias ? dbias[g] : NULL,
                       (const float *)dout + r * OC, (const float *)inp + r * C, w[g], gp, n, C,
                       OC);
    }
}
