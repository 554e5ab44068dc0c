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
