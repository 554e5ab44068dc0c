/* adamw.c - AdamW step over flat fp32 state, and fp32 buffer reductions. */
#include <math.h>
#include <stdlib.h>

#include "cpu_ops.h"

/* Elementwise; param may be NULL (then only the fp32 state is updated). */
void cpu_adamw(LtBackend *be, void *param_, float *master, const float *grad, float *m, float *v,
               size_t n, const LtAdamArgs *a) {
    float *param = param_;
    const int bf16 = cpu_is_bf16(be);
    const float lr = a->lr, b1 = a->beta1, b2 = a->beta2, eps = a->eps, wd = a->weight_decay;
    if (a->grad_scale_dev && *a->grad_scale_dev < 0.0f) return; /* a skipped step */
    const float ibc1 = 1.0f / a->bc1, ibc2 = 1.0f / a->bc2,
                gs = a->grad_scale * (a->grad_scale_dev ? *a->grad_scale_dev : 1.0f);
    long long nn = (long long)n;
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be))
    for (long long i = 0; i < nn; i++) {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * ibc1, vhat = vi * ibc2;
        float w = master[i];
        w -= lr * (mhat / (sqrtf(vhat) + eps) + wd * w);
        master[i] = w;
    }
    if (param) {
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be))
        for (long long i = 0; i < nn; i++) param[i] = cpu_store(bf16, master[i]);
    }
}

/* Fixed-size chunks summed in parallel, partials combined serially in chunk
 * order: the result is independent of the thread count. */
#define SUMSQ_CHUNK 16384

void cpu_sum_f64(LtBackend *be, double *acc, const float *x, size_t n, int squares) {
    size_t nchunk = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    if (nchunk == 0) return;
    double stackbuf[64];
    double *part = nchunk <= 64 ? stackbuf : lt_malloc(nchunk * sizeof(double));
    long long nc = (long long)nchunk;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be)) if (nchunk > 1)
    for (long long k = 0; k < nc; k++) {
        size_t i0 = (size_t)k * SUMSQ_CHUNK, i1 = i0 + SUMSQ_CHUNK < n ? i0 + SUMSQ_CHUNK : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += squares ? (double)x[i] * (double)x[i] : (double)x[i];
        part[k] = s;
    }
    double total = 0.0;
    for (size_t k = 0; k < nchunk; k++) total += part[k];
    if (part != stackbuf) free(part);
    acc[0] += total;
}

void cpu_clip_coef(LtBackend *be, float *coef, const double *sumsq, float clip) {
    const double ss = sumsq[0];
    if (!isfinite(ss)) {
        coef[0] = -1.0f; /* skip the step */
        return;
    }
    const double c = clip > 0.0f ? clip / (sqrt(ss) + 1e-6) : 1.0;
    coef[0] = (float)(c < 1.0 ? c : 1.0);
}

void cpu_scale_f32(LtBackend *be, float *x, float s, size_t n) {
    long long nn = (long long)n;
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be)) if (n > 65536)
    for (long long i = 0; i < nn; i++) x[i] *= s;
}

void cpu_add_f32(LtBackend *be, float *dst, const float *src, size_t n) {
    long long nn = (long long)n;
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be)) if (n > 65536)
    for (long long i = 0; i < nn; i++) dst[i] += src[i];
}

void cpu_flag_nonfinite(LtBackend *be, double *acc, const double *x) {
    (void)be;
    if (!isfinite(x[0])) acc[0] += NAN;
}
