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
 * dup). */
#include "common.cuh"

/* ======================= kernels (map_kernel functors) ======================= */

__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + expf(-x)); }

// gu (N, 2F) -> out (N, F) = silu(gate) * up; i indexes out.
template <typename T> struct SwigluFwd {
    T *out;
    const T *gu;
    size_t F;
    int idx32;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        const T *g = gu + i + idx_div(i, F, idx32) * F; /* row r: r * 2F + (i - r * F) */
        float x[K], u[K];
        ld_f<K>(g, x);
        ld_f<K>(g + F, u);
#pragma unroll
        for (int k = 0; k < K; k++) x[k] = x[k] * sigmoid_f(x[k]) * u[k];
        st_f<K>(out + i, x);
    }
};

// gu (N, 2F), dout (N, F) -> dgu (N, 2F): dgate = dout * up * silu'(gate), dup = dout * silu(gate).
template <typename T> struct SwigluBwd {
    T *dgu;
    const T *gu, *dout;
    size_t F;
    int idx32;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        const size_t o = i + idx_div(i, F, idx32) * F;
        float x[K], u[K], d[K];
        ld_f<K>(gu + o, x);
        ld_f<K>(gu + o + F, u);
        ld_f<K>(dout + i, d);
#pragma unroll
        for (int k = 0; k < K; k++) {
            const float s = sigmoid_f(x[k]);
            u[k] = d[k] * u[k] * (s * (1.f + x[k] * (1.f - s))); /* dgate */
            x[k] = d[k] * (x[k] * s);                           /* dup */
        }
        st_f<K>(dgu + o, u);
        st_f<K>(dgu + o + F, x);
    }
};

/* ======================= launchers ======================= */

template <typename T>
static void launch_swiglu_fwd(T *out, const T *gu, int N, int F, cudaStream_t st) {
    const size_t n = (size_t)N * F;
    const int vec = cu_aligned16(out, gu) && F % LT_VEC(T) == 0;
    launch_map<LT_VEC(T)>(SwigluFwd<T>{out, gu, (size_t)F, n <= 0xffffffffu}, n, vec, st);
}

template <typename T>
static void launch_swiglu_bwd(T *dgu, const T *gu, const T *dout, int N, int F, cudaStream_t st) {
    const size_t n = (size_t)N * F;
    const int vec = cu_aligned16(dgu, gu, dout) && F % LT_VEC(T) == 0;
    launch_map<LT_VEC(T)>(SwigluBwd<T>{dgu, gu, dout, (size_t)F, n <= 0xffffffffu}, n, vec, st);
}

/* ======================= op entries ======================= */

void cu_swiglu_fwd(LtBackend *be, void *out, const void *gu, int N, int F) {
    if (N <= 0 || F <= 0) return;
    if (cu_is_bf16(be))
        launch_swiglu_fwd<bf16>((bf16 *)out, (const bf16 *)gu, N, F, cu_stream(be));
    else
        launch_swiglu_fwd<float>((float *)out, (const float *)gu, N, F, cu_stream(be));
}

void cu_swiglu_bwd(LtBackend *be, void *dgu, const void *gu, const void *dout, int N, int F) {
    if (N <= 0 || F <= 0) return;
    if (cu_is_bf16(be))
        launch_swiglu_bwd<bf16>((bf16 *)dgu, (const bf16 *)gu, (const bf16 *)dout, N, F,
                                cu_stream(be));
    else
        launch_swiglu_bwd<float>((float *)dgu, (const float *)gu, (const float *)dout, N, F,
                                 cu_stream(be));
}
