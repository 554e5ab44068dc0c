/* qknorm.c - per-head RMSNorm of the query and key heads inside qkv (Megatron-Core's
 * qk_layernorm), in place, and its backward in place on dqkv. Row statistics in double
 * as in rmsnorm.c; one rounding to the act dtype per stored element. Tokens run in
 * parallel; the weight gradients are summed per column over tokens in token order, then
 * heads in head order: deterministic and independent of the thread count. */
#include "cpu_ops.h"

/* The weight of head h of the NH + NKV normalized heads. */
static const float *head_weight(const float *wq, const float *wk, int h, int NH) {
    return h < NH ? wq : wk;
}

void cpu_qk_norm_fwd(LtBackend *be, void *qkv_, void *xin_, float *rstd, const void *wq_,
                     const void *wk_, float eps, int N, int NH, int NKV, int HD) {
    float *qkv = qkv_, *xin = xin_;
    const float *wq = wq_, *wk = wk_;
    const int bf16 = cpu_is_bf16(be), NQK = NH + NKV;
    const size_t row = (size_t)(NH + 2 * NKV) * HD;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        for (int h = 0; h < NQK; h++) {
            float *x = qkv + (size_t)i * row + (size_t)h * HD;
            float *keep = xin + ((size_t)i * NQK + h) * HD;
            const float *w = head_weight(wq, wk, h, NH);
            double ss = 0.0;
            for (int c = 0; c < HD; c++) {
                keep[c] = x[c];
                ss += (double)x[c] * x[c];
            }
            const float rs = (float)(1.0 / sqrt(ss / HD + (double)eps));
            rstd[(size_t)i * NQK + h] = rs;
            for (int c = 0; c < HD; c++) x[c] = cpu_store(bf16, keep[c] * rs * w[c]);
        }
    }
}

/* dw (HD) += the sum over tokens, then over heads [h0, h1), of dout * xin * rstd: dout
 * read from dqkv before the backward overwrites it. */
static void head_weight_grad(float *dw, const float *dqkv, const float *xin, const float *rstd,
                             int N, int NH, int NKV, int HD, int h0, int h1, int nt) {
    const int NQK = NH + NKV;
    const size_t row = (size_t)(NH + 2 * NKV) * HD;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int c = 0; c < HD; c++) {
        float acc = 0.0f;
        for (int h = h0; h < h1; h++) {
            float head = 0.0f;
            for (int i = 0; i < N; i++) {
                const size_t r = (size_t)i * NQK + h;
                head += dqkv[(size_t)i * row + (size_t)h * HD + c] * xin[r * HD + c] * rstd[r];
            }
            acc += head;
        }
        dw[c] += acc;
    }
}

/* With xhat = xin * rstd and g = dout * w: dx = rstd * (g - xhat * mean(g * xhat))
 * (rmsnorm.c's backward per head row). */
void cpu_qk_norm_bwd(LtBackend *be, void *dqkv_, float *dwq, float *dwk, const void *xin_,
                     const void *wq_, const void *wk_, const float *rstd, int N, int NH, int NKV,
                     int HD) {
    float *dqkv = dqkv_;
    const float *xin = xin_, *wq = wq_, *wk = wk_;
    const int bf16 = cpu_is_bf16(be), NQK = NH + NKV, nt = cpu_nthreads(be);
    const size_t row = (size_t)(NH + 2 * NKV) * HD;
    if (dwq) head_weight_grad(dwq, dqkv, xin, rstd, N, NH, NKV, HD, 0, NH, nt);
    if (dwk) head_weight_grad(dwk, dqkv, xin, rstd, N, NH, NKV, HD, NH, NQK, nt);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int i = 0; i < N; i++) {
        for (int h = 0; h < NQK; h++) {
            float *d = dqkv + (size_t)i * row + (size_t)h * HD;
            const float *x = xin + ((size_t)i * NQK + h) * HD, *w = head_weight(wq, wk, h, NH);
            const float rs = rstd[(size_t)i * NQK + h];
            float sgx = 0.0f;
            for (int c = 0; c < HD; c++) sgx += d[c] * w[c] * (x[c] * rs);
            sgx /= (float)HD;
            for (int c = 0; c < HD; c++) d[c] = cpu_store(bf16, rs * (d[c] * w[c] - x[c] * rs * sgx));
        }
    }
}
