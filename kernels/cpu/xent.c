/* xent.c - fused softmax + cross-entropy over padded logits rows, gradient
 * written in place. */
#include "cpu_ops.h"

void cpu_xent_fwd_bwd(LtBackend *be, float *losses, void *logits_, const int32_t *targets, int N,
                      int V, int Vp, float dscale) {
    float *logits = logits_;
    const int bf16 = cpu_is_bf16(be);
    if (V <= 0 || V > Vp) lt_fatal("xent: bad vocab sizes V=%d Vp=%d", V, Vp);
    /* Validate before the parallel region (lt_fatal must not run inside it). */
    for (int i = 0; i < N; i++)
        if (targets[i] < 0 || targets[i] >= V)
            lt_fatal("xent: target %d at row %d is outside the vocabulary [0, %d)", (int)targets[i],
                     i, V);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        float *x = logits + (size_t)i * Vp;
        const int t = targets[i];
        const float xt = x[t];
        float mx = x[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        double sum = 0.0;
        if (dscale != 0.0f) {
            /* keep exp(x - max) in place: the gradient overwrites the row anyway */
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < V; j++) {
                float e = cpu_expf(x[j] - mx);
                x[j] = e;
                sum += e;
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < V; j++) sum += cpu_expf(x[j] - mx);
        }
        double lse = (double)mx + log(sum);
        losses[i] = (float)(lse - (double)xt);
        if (dscale != 0.0f) {
            const float et = x[t];
            const float inv = (float)(1.0 / sum);
            for (int j = 0; j < V; j++) x[j] = cpu_store(bf16, dscale * (x[j] * inv));
            x[t] = cpu_store(bf16, dscale * (et * inv - 1.0f));
            for (int j = V; j < Vp; j++) x[j] = 0.0f;
        }
    }
}

/* Vocab-parallel cross-entropy (contracts in include/backend.h). Per row, one
 * thread, fixed column order: results do not depend on the thread count.
 * Sums of exponentials are accumulated in double like cpu_xent_fwd_bwd and
 * stored as fp32 (what the all-reduce carries). */
static void xent_tp_check(const char *op, int Vvalid, int Vp) {
    if (Vp <= 0 || Vvalid < 0 || Vvalid > Vp)
        lt_fatal("%s: bad shard sizes Vvalid=%d Vp=%d (need 0 <= Vvalid <= Vp, Vp > 0)", op,
                 Vvalid, Vp);
}

void cpu_xent_tp_stats(LtBackend *be, float *row_max, float *row_sumexp, float *row_target,
                       const void *logits_, const int32_t *targets, const float *global_max,
                       int N, int Vvalid, int Vp) {
    const float *logits = logits_;
    xent_tp_check("xent_tp_stats", Vvalid, Vp);
    if (N <= 0) return;
    if (!global_max) {
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
        for (int i = 0; i < N; i++) {
            const float *x = logits + (size_t)i * Vp;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < Vvalid; j++) mx = x[j] > mx ? x[j] : mx;
            row_max[i] = mx;
        }
        return;
    }
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vp;
        const float mx = global_max[i];
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < Vvalid; j++) sum += cpu_expf(x[j] - mx);
        row_sumexp[i] = (float)sum;
        const int32_t t = targets[i];
        row_target[i] = (t >= 0 && t < Vvalid) ? x[t] : 0.0f;
    }
}

void cpu_xent_tp_finish(LtBackend *be, float *losses, void *logits_, const int32_t *targets,
                        const float *global_max, const float *global_sumexp,
                        const float *global_target, int N, int Vvalid, int Vp, float dscale) {
    float *logits = logits_;
    const int bf16 = cpu_is_bf16(be);
    xent_tp_check("xent_tp_finish", Vvalid, Vp);
    if (N <= 0) return;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const double sum = (double)global_sumexp[i];
        losses[i] = (float)((double)global_max[i] + log(sum) - (double)global_target[i]);
        if (dscale == 0.0f) continue;
        float *x = logits + (size_t)i * Vp;
        const float mx = global_max[i];
        const float inv = (float)(1.0 / sum);
        const int32_t t = targets[i];
        for (int j = 0; j < Vvalid; j++) {
            const float p = cpu_expf(x[j] - mx) * inv;
            x[j] = cpu_store(bf16, dscale * (j == t ? p - 1.0f : p));
        }
        for (int j = Vvalid; j < Vp; j++) x[j] = 0.0f;
    }
}
