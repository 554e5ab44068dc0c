/* layernorm.c - LayerNorm (eps 1e-5) with a fused residual add, and its backward.
 * Row statistics are accumulated in double. */
#include "cpu_ops.h"

#define LN_EPS 1e-5

void cpu_layernorm_fwd(LtBackend *be, void *resid_out_, void *out_, float *mean, float *rstd,
                       const void *a_, const void *b_, const void *w_, const void *bias_, int N,
                       int C) {
    float *resid_out = resid_out_, *out = out_;
    const float *a = a_, *b = b_, *w = w_, *bias = bias_;
    const int bf16 = cpu_is_bf16(be);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *x = cpu_resid_row(bf16, resid_out, a, b, i, C);
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        double mu = s / C;
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) {
            double d = x[c] - mu;
            ss += d * d;
        }
        float m = (float)mu;
        float rs = (float)(1.0 / sqrt(ss / C + LN_EPS));
        mean[i] = m;
        rstd[i] = rs;
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = cpu_store(bf16, (x[c] - m) * rs * w[c] + bias[c]);
    }
}

/* out = a + b, the residual add alone: the same expression (fp32 sum, then
 * cpu_store) as resid_out in cpu_layernorm_fwd above, so the two are bitwise equal.
 * Elementwise, so out may alias a or b. */
void cpu_add_act(LtBackend *be, void *out_, const void *a_, const void *b_, size_t n) {
    float *out = out_;
    const float *a = a_, *b = b_;
    const int bf16 = cpu_is_bf16(be);
    long long nn = (long long)n;
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be)) if (n > 65536)
    for (long long i = 0; i < nn; i++) out[i] = cpu_store(bf16, a[i] + b[i]);
}

/* With xhat = (x - mean) * rstd and g = dout * w:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw = sum_i dout*xhat,  db = sum_i dout.
 * dinp rows are handled in parallel over rows; dw/db in parallel over channel
 * ranges (cpu_norm_param_grads: each thread sums its channels over all rows in order). */
void cpu_layernorm_bwd(LtBackend *be, void *dinp_, float *dw, float *db, const void *dout_,
                       const void *inp_, const void *w_, const float *mean, const float *rstd,
                       int N, int C) {
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_, *w = w_;
    const int bf16 = cpu_is_bf16(be);
    const int nt = cpu_nthreads(be);
    if (dinp) {
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
            const float m = mean[i], rs = rstd[i];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int c = 0; c < C; c++) {
                float g = d[c] * w[c];
                sg += g;
                sgx += g * (x[c] - m) * rs;
            }
            sg /= (float)C;
            sgx /= (float)C;
            float *di = dinp + (size_t)i * C;
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * rs;
                float g = d[c] * w[c];
                di[c] = cpu_store(bf16, di[c] + rs * (g - sg - xhat * sgx));
            }
        }
    }
    if (dw || db) cpu_norm_param_grads(dw, db, dout, inp, mean, rstd, N, C, nt);
}

/* dw += sum over rows of dout * xhat, xhat = (x - mean) * rstd (x * rstd when mean is NULL:
 * RMSNorm); db += sum over rows of dout; either may be NULL. In parallel over ranges of 64
 * channels, each task summing its channels over all rows in row order: deterministic and
 * independent of the thread count. */
void cpu_norm_param_grads(float *dw, float *db, const float *dout, const float *inp,
                          const float *mean, const float *rstd, int N, int C, int nt) {
    const int cb = 64; /* channels per task */
    const int ntask = (C + cb - 1) / cb;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int task = 0; task < ntask; task++) {
        int c0 = task * cb, c1 = c0 + cb < C ? c0 + cb : C;
        float accw[64], accb[64];
        for (int c = 0; c < c1 - c0; c++) accw[c] = accb[c] = 0.0f;
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C + c0, *d = dout + (size_t)i * C + c0;
            const float m = mean ? mean[i] : 0.0f, rs = rstd[i];
            for (int c = 0; c < c1 - c0; c++) {
                accw[c] += d[c] * (x[c] - m) * rs;
                accb[c] += d[c];
            }
        }
        for (int c = 0; c < c1 - c0; c++) {
            if (dw) dw[c0 + c] += accw[c];
            if (db) db[c0 + c] += accb[c];
        }
    }
}
