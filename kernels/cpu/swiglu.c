/* swiglu.c - SwiGLU: out = silu(gate) * up over rows gate (F) | up (F), and its
 * backward; with an LtGlu (backend.h) the gated activation of gpt-oss and
 * Megatron-Core, act(min(gate, c)) * (clamp(up, -c, c) + offset). Elementwise
 * in fp32 with cpu_expf (cpu_ops.h), so the loops vectorize; silu(x) = x * s,
 * s = sigmoid(x) = 1 / (1 + exp(-x)), and silu'(x) = s * (1 + x * (1 - s)).
 * For x << 0, exp(-x) saturates (cpu_expf clamps at 1.65e38): s, silu and
 * silu' fall below 1e-30, never NaN. quick_gelu(x) = x * sigmoid(a x) with
 * a = 1.702 has the derivative s * (1 + a x (1 - s)), s = sigmoid(a x); silu
 * is a = 1, but plain SwiGLU keeps loops of its own so that it computes
 * exactly what it did before LtGlu. */
#include <math.h>

#include "cpu_ops.h"

static inline float cpu_sigmoid1(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }

/* glu's activation slope a (silu 1, quick_gelu 1.702), clamp c (+inf: none) and
 * offset; NULL: SwiGLU's */
typedef struct {
    float a, c, off;
} GluConsts;
static GluConsts glu_consts(const LtGlu *glu) {
    if (!glu) return (GluConsts){1.0f, INFINITY, 0.0f};
    return (GluConsts){glu->quick ? 1.702f : 1.0f, glu->clamp > 0 ? glu->clamp : INFINITY,
                       glu->offset};
}

/* min(x, c) and clamp(x, -c, c) that keep a NaN (a NaN gate must reach the loss) */
static inline float glu_min1(float x, float c) { return x > c ? c : x; }
static inline float glu_clamp1(float x, float c) { return x > c ? c : x < -c ? -c : x; }

/* gu (N, 2F) -> out (N, F) */
void cpu_swiglu_fwd(LtBackend *be, void *out_, const void *gu_, int N, int F, const LtGlu *glu) {
    float *out = out_;
    const float *gu = gu_;
    const int bf16 = cpu_is_bf16(be), plain = lt_glu_plain(glu);
    const GluConsts k = glu_consts(glu);
    const float a = k.a, c = k.c, off = k.off;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *g = gu + (size_t)i * 2 * F, *u = g + F;
        float *o = out + (size_t)i * F;
        if (plain) {
#pragma omp simd
            for (int f = 0; f < F; f++) o[f] = cpu_store(bf16, g[f] * cpu_sigmoid1(g[f]) * u[f]);
            continue;
        }
#pragma omp simd
        for (int f = 0; f < F; f++) {
            const float x = glu_min1(g[f], c);
            o[f] = cpu_store(bf16, x * cpu_sigmoid1(a * x) * (glu_clamp1(u[f], c) + off));
        }
    }
}

/* gu (N, 2F), dout (N, F) -> dgu (N, 2F): dgate | dup. With glu, the clamps'
 * gradients are 0 where the input is at or past a bound: min(x, c) passes
 * x < c, clamp(x, -c, c) passes -c < x < c (torch's clamp backward; without a
 * clamp, c = inf, only an infinite input is stopped, whose gradient is not
 * finite anyway). */
void cpu_swiglu_bwd(LtBackend *be, void *dgu_, const void *gu_, const void *dout_, int N, int F,
                    const LtGlu *glu) {
    float *dgu = dgu_;
    const float *gu = gu_, *dout = dout_;
    const int bf16 = cpu_is_bf16(be), plain = lt_glu_plain(glu);
    const GluConsts k = glu_consts(glu);
    const float a = k.a, c = k.c, off = k.off;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const float *g = gu + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        float *dg = dgu + (size_t)i * 2 * F, *du = dg + F;
        if (plain) {
#pragma omp simd
            for (int f = 0; f < F; f++) {
                const float s = cpu_sigmoid1(g[f]);
                dg[f] = cpu_store(bf16, d[f] * u[f] * (s * (1.0f + g[f] * (1.0f - s))));
                du[f] = cpu_store(bf16, d[f] * (g[f] * s));
            }
            continue;
        }
#pragma omp simd
        for (int f = 0; f < F; f++) {
            const float x = glu_min1(g[f], c), s = cpu_sigmoid1(a * x);
            const float pass_g = g[f] < c ? 1.0f : 0.0f;
            const float pass_u = u[f] > -c && u[f] < c ? 1.0f : 0.0f;
            dg[f] = cpu_store(bf16, d[f] * (glu_clamp1(u[f], c) + off) *
                                        (s * (1.0f + a * x * (1.0f - s))) * pass_g);
            du[f] = cpu_store(bf16, d[f] * (x * s) * pass_u);
        }
    }
}
