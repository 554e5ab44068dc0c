/* swiglu.cu - SwiGLU (Llama's MLP activation): out = silu(gate) * up over
 * rows gate (F) | up (F) of the fused up-projection, and its backward.
 *
 * Design note. Both ops are functors run by vec.cuh's map_kernel over the
 * N * F elements of out (dout): element i lies in row r = i / F (idx_div:
 * 32-bit division whenever N * F < 2^32), and its gate and up are at
 * gu[i + r * F] and F further on. 16-byte packs (bf16 x 8, fp32 x 4) when
 * out, gu (dgu, dout) are 16-byte aligned and F is a multiple of the pack, so
 * no pack straddles the gate | up boundary or two rows; one element per access
 * otherwise. fp32 arithmetic, one rounding per stored element, with accurate
 * expf: sigmoid s = 1 / (1 + exp(-x)), silu = x * s, silu' = s (1 + x (1 - s));
 * for x << 0 exp(-x) overflows to inf and s, silu and silu' go to 0 (no NaN).
 * Each element is read and written by one thread; dgu may not alias gu
 * (backend.h).
 *
 * Bytes per element of out (s = sizeof(act)), also the floor: forward 3s
 * (read gate, up; write out), backward 5s (read gate, up, dout; write dgate,
 * dup).
 *
 * With an LtGlu (backend.h) other than plain SwiGLU the functors' GLU
 * instance runs, the same traffic: act(min(gate, c)) * (clamp(up, -c, c) +
 * offset), act(x) = x * sigmoid(a x), a = 1 (silu) or 1.702 (quick_gelu),
 * whose derivative is s (1 + a x (1 - s)), s = sigmoid(a x); c = inf without
 * a clamp; the clamps pass a gradient only strictly inside their bounds
 * (torch's clamp backward). The plain instance keeps SwiGLU's own arithmetic,
 * exactly what it computed before LtGlu. */
#include "common.cuh"

/* ======================= kernels (map_kernel functors) ======================= */

__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + expf(-x)); }

/* LtGlu's settings as the functors read them: slope a, offset, clamp c (inf: none). */
struct GluArgs {
    float a, off, c;
};

// min(x, c) and clamp(x, -c, c), a NaN kept (it must reach the loss).
__device__ __forceinline__ float glu_min(float x, float c) { return x > c ? c : x; }
__device__ __forceinline__ float glu_clamp(float x, float c) { return x > c ? c : x < -c ? -c : x; }

// gu (N, 2F) -> out (N, F) = silu(gate) * up, or (GLU) act(min(gate, c)) * (clamp(up, -c, c) +
// off); i indexes out.
template <typename T, bool GLU> struct SwigluFwd {
    T *out;
    const T *gu;
    size_t F;
    int idx32;
    GluArgs g;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        const T *p = gu + i + idx_div(i, F, idx32) * F; /* row r: r * 2F + (i - r * F) */
        float x[K], u[K];
        ld_f<K>(p, x);
        ld_f<K>(p + F, u);
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (GLU) {
                const float xc = glu_min(x[k], g.c);
                x[k] = xc * sigmoid_f(g.a * xc) * (glu_clamp(u[k], g.c) + g.off);
            } else {
                x[k] = x[k] * sigmoid_f(x[k]) * u[k];
            }
        }
        st_f<K>(out + i, x);
    }
};

// gu (N, 2F), dout (N, F) -> dgu (N, 2F): dgate = dout * up * silu'(gate), dup = dout *
// silu(gate); GLU: dgate = dout * (clamped up + off) * act'(min(gate, c)) where gate < c, dup =
// dout * act(min(gate, c)) where -c < up < c (else 0).
template <typename T, bool GLU> struct SwigluBwd {
    T *dgu;
    const T *gu, *dout;
    size_t F;
    int idx32;
    GluArgs g;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        const size_t o = i + idx_div(i, F, idx32) * F;
        float x[K], u[K], d[K];
        ld_f<K>(gu + o, x);
        ld_f<K>(gu + o + F, u);
        ld_f<K>(dout + i, d);
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (GLU) {
                const float xc = glu_min(x[k], g.c), s = sigmoid_f(g.a * xc);
                const float pass_g = x[k] < g.c ? 1.f : 0.f;
                const float pass_u = u[k] > -g.c && u[k] < g.c ? 1.f : 0.f;
                u[k] = d[k] * (glu_clamp(u[k], g.c) + g.off) *
                       (s * (1.f + g.a * xc * (1.f - s))) * pass_g; /* dgate */
                x[k] = d[k] * (xc * s) * pass_u;                    /* dup */
            } else {
                const float s = sigmoid_f(x[k]);
                u[k] = d[k] * u[k] * (s * (1.f + x[k] * (1.f - s))); /* dgate */
                x[k] = d[k] * (x[k] * s);                           /* dup */
            }
        }
        st_f<K>(dgu + o, u);
        st_f<K>(dgu + o + F, x);
    }
};

/* ======================= launchers ======================= */

static GluArgs glu_args(const LtGlu *glu) {
    if (lt_glu_plain(glu)) return GluArgs{1.f, 0.f, INFINITY};
    return GluArgs{glu->quick ? 1.702f : 1.f, glu->offset, glu->clamp > 0 ? glu->clamp : INFINITY};
}

template <typename T>
static void launch_swiglu_fwd(T *out, const T *gu, int N, int F, const LtGlu *glu,
                              cudaStream_t st) {
    const size_t n = (size_t)N * F;
    const int vec = cu_aligned16(out, gu) && F % LT_VEC(T) == 0, idx32 = n <= 0xffffffffu;
    const GluArgs g = glu_args(glu);
    if (lt_glu_plain(glu))
        launch_map<LT_VEC(T)>(SwigluFwd<T, false>{out, gu, (size_t)F, idx32, g}, n, vec, st);
    else
        launch_map<LT_VEC(T)>(SwigluFwd<T, true>{out, gu, (size_t)F, idx32, g}, n, vec, st);
}

template <typename T>
static void launch_swiglu_bwd(T *dgu, const T *gu, const T *dout, int N, int F, const LtGlu *glu,
                              cudaStream_t st) {
    const size_t n = (size_t)N * F;
    const int vec = cu_aligned16(dgu, gu, dout) && F % LT_VEC(T) == 0, idx32 = n <= 0xffffffffu;
    const GluArgs g = glu_args(glu);
    if (lt_glu_plain(glu))
        launch_map<LT_VEC(T)>(SwigluBwd<T, false>{dgu, gu, dout, (size_t)F, idx32, g}, n, vec, st);
    else
        launch_map<LT_VEC(T)>(SwigluBwd<T, true>{dgu, gu, dout, (size_t)F, idx32, g}, n, vec, st);
}

/* ======================= op entries ======================= */

void cu_swiglu_fwd(LtBackend *be, void *out, const void *gu, int N, int F, const LtGlu *glu) {
    if (N <= 0 || F <= 0) return;
    if (cu_is_bf16(be))
        launch_swiglu_fwd<bf16>((bf16 *)out, (const bf16 *)gu, N, F, glu, cu_stream(be));
    else
        launch_swiglu_fwd<float>((float *)out, (const float *)gu, N, F, glu, cu_stream(be));
}

void cu_swiglu_bwd(LtBackend *be, void *dgu, const void *gu, const void *dout, int N, int F,
                   const LtGlu *glu) {
    if (N <= 0 || F <= 0) return;
    if (cu_is_bf16(be))
        launch_swiglu_bwd<bf16>((bf16 *)dgu, (const bf16 *)gu, (const bf16 *)dout, N, F, glu,
                                cu_stream(be));
    else
        launch_swiglu_bwd<float>((float *)dgu, (const float *)gu, (const float *)dout, N, F, glu,
                                 cu_stream(be));
}
