/* swiglu.c - SwiGLU: out = silu(gate) * up over rows gate (F) | up (F), and its
 * backward. Elementwise in fp32 with cpu_expf (cpu_ops.h), so the loops
 * vectorize; silu(x) = x * s, s = sigmoid(x) = 1 / (1 + exp(-x)), and
 * silu'(x) = s * (1 + x * (1 - s)). For x << 0, exp(-x) saturates (cpu_expf
 * clamps at 1.65e38): s, silu and silu' fall below 1e-30, never NaN. */
#include "cpu_ops.h"

static inline float cpu_sigmoid1(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }

/* gu (N, 2F) -> out (N, F) */
void cpu_swiglu_fwd(LtBackend *be, void *out_, const void *gu_, int N, int F) {
    float *out = out_;
    const float *gu = gu_;
    const int bf16 = cpu_is_bf16(be);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *g = gu + (size_t)i * 2 * F, *u = g + F;
        float *o = out + (size_t)i * F;
#pragma omp simd
        for (int f = 0; f < F; f++) o[f] = cpu_store(bf16, g[f] * cpu_sigmoid1(g[f]) * u[f]);
    }
}

/* gu (N, 2F), dout (N, F) -> dgu (N, 2F): dgate | dup */
void cpu_swiglu_bwd(LtBackend *be, void *dgu_, const void *gu_, const void *dout_, int N, int F) {
    float *dgu = dgu_;
    const float *gu = gu_, *dout = dout_;
    const int bf16 = cpu_is_bf16(be);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *g = gu + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        float *dg = dgu + (size_t)i * 2 * F, *du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            const float s = cpu_sigmoid1(g[f]);
            dg[f] = cpu_store(bf16, d[f] * u[f] * (s * (1.0f + g[f] * (1.0f - s))));
            du[f] = cpu_store(bf16, d[f] * (g[f] * s));
        }
    }
}
