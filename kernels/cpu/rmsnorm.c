/* rmsnorm.c - RMSNorm (no mean, no bias) with a fused residual add, and its
 * backward. Row statistics are accumulated in double, as in layernorm.c; the
 * residual sum is rounded to the act dtype before it is normalized, with the
 * expression of cpu_add_act, so resid_out equals add_act's output bit for bit. */
#include "cpu_ops.h"

/* a, b (N, C) -> resid_out = a + b when b != NULL; out (N, C) = x * rstd * w;
 * rstd (N) = 1 / sqrt(mean(x^2) + eps). */
void cpu_rmsnorm_fwd(LtBackend *be, void *resid_out_, void *out_, float *rstd, const void *a_,
                     const void *b_, const void *w_, float eps, int N, int C) {
    float *resid_out = resid_out_, *out = out_;
    const float *a = a_, *b = b_, *w = w_;
    const int bf16 = cpu_is_bf16(be);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *x = cpu_resid_row(bf16, resid_out, a, b, i, C);
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        const float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
        rstd[i] = rs;
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = cpu_store(bf16, x[c] * rs * w[c]);
    }
}

/* With xhat = x * rstd and g = dout * w (rstd depends on x through mean(x^2)):
 *   dx = rstd * (g - xhat * mean(g * xhat)),  dw = sum over rows of dout * xhat.
 * dinp rows in parallel over rows; dw in parallel over channel ranges, each
 * thread summing its channels over all rows in row order (cpu_norm_param_grads,
 * shared with layernorm.c: deterministic). */
void cpu_rmsnorm_bwd(LtBackend *be, void *dinp_, float *dw, const void *dout_, const void *inp_,
                     const void *w_, const float *rstd, int N, int C) {
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_, *w = w_;
    const int bf16 = cpu_is_bf16(be);
    const int nt = cpu_nthreads(be);
    if (dinp) {
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
            const float rs = rstd[i];
            float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
            for (int c = 0; c < C; c++) sgx += d[c] * w[c] * (x[c] * rs);
            sgx /= (float)C;
            float *di = dinp + (size_t)i * C;
            for (int c = 0; c < C; c++)
                di[c] = cpu_store(bf16, di[c] + rs * (d[c] * w[c] - x[c] * rs * sgx));
        }
    }
    if (dw) cpu_norm_param_grads(dw, NULL, dout, inp, NULL, rstd, N, C, nt);
}
