/* vec.cuh - 16-byte vector access for the memory-bound kernels, and the one
 * elementwise kernel (map_kernel) the flat ops share. Included by common.cuh
 * after device.cuh; the host emulation (tests/emu) includes a copy rewritten
 * by transform.py (launch_map below launches a kernel).
 *
 * Design note. A Pack<T, N> is N consecutive elements moved as one access of
 * N * sizeof(T) bytes: 16 in the vector paths (LT_VEC(T): bf16 x 8, fp32 x 4),
 * one element in the scalar fallbacks, which are the same kernels instantiated
 * with N = 1. ld_f / st_f widen to fp32 / round back (to nearest even). The op
 * contract (backend.h) promises neither alignment nor row lengths that are
 * multiples of the vector width, so every launcher checks both (cu_aligned16
 * over every pointer a kernel accesses through packs, plus the row lengths)
 * and otherwise launches the scalar instantiation: slower, never a fault.
 * The emulation defines LT_PACK_CHECK to stop on a misaligned pack, so a
 * launcher that picks the vector path wrongly fails the emulated tests instead
 * of passing on x86, which tolerates misaligned loads.
 *
 * map_kernel walks [0, n) grid-stride: whole packs of VEC elements, then the
 * n % VEC tail one element per thread. An op is a functor with
 * `template <int K> void apply(size_t i) const` for elements [i, i + K); it
 * issues all its loads before its arithmetic, so each thread has one 16-byte
 * load per input in flight. AddMap (out = a + b: add_act, add_f32) is the one
 * functor two files share. Functors over row-structured tensors find the row
 * with idx_div. */
#ifndef LT_CUDA_VEC_CUH
#define LT_CUDA_VEC_CUH

#include <stdint.h>

#define LT_VEC(T) ((int)(16 / sizeof(T))) /* elements per 16-byte pack */
#define MAP_THREADS 256

#ifndef LT_PACK_CHECK
#define LT_PACK_CHECK(p, align) ((void)0)
#endif

template <typename T, int N>
struct alignas(N * sizeof(T) < 16 ? N * sizeof(T) : 16) Pack {
    T v[N];
};

template <int N, typename T> __device__ __forceinline__ Pack<T, N> ld_pack(const T *p) {
    LT_PACK_CHECK(p, alignof(Pack<T, N>));
    return *reinterpret_cast<const Pack<T, N> *>(p);
}
template <int N, typename T> __device__ __forceinline__ void st_pack(T *p, const Pack<T, N> &x) {
    LT_PACK_CHECK(p, alignof(Pack<T, N>));
    *reinterpret_cast<Pack<T, N> *>(p) = x;
}
/* N elements at p as fp32 */
template <int N, typename T> __device__ __forceinline__ void ld_f(const T *p, float (&f)[N]) {
    const Pack<T, N> x = ld_pack<N>(p);
#pragma unroll
    for (int k = 0; k < N; k++) f[k] = to_f(x.v[k]);
}
/* fp32 values rounded to T */
template <typename T, int N> __device__ __forceinline__ Pack<T, N> pack_f(const float (&f)[N]) {
    Pack<T, N> x;
#pragma unroll
    for (int k = 0; k < N; k++) x.v[k] = from_f<T>(f[k]);
    return x;
}
template <int N, typename T> __device__ __forceinline__ void st_f(T *p, const float (&f)[N]) {
    st_pack<N>(p, pack_f<T, N>(f));
}
/* a += the N elements at p, widened to fp32 */
template <int N, typename T> __device__ __forceinline__ void add_f(float (&a)[N], const T *p) {
    float v[N];
    ld_f<N>(p, v);
#pragma unroll
    for (int k = 0; k < N; k++) a[k] += v[k];
}
/* The first `lim` of N elements at p as fp32 (the rest 0): a whole pack when
 * lim >= N, else element by element, so nothing at or past p + lim is read. */
template <int N, typename T>
__device__ __forceinline__ void ld_f_upto(const T *p, int lim, float (&f)[N]) {
    if (lim >= N) {
        ld_f<N>(p, f);
        return;
    }
#pragma unroll
    for (int k = 0; k < N; k++) f[k] = k < lim ? to_f(p[k]) : 0.f;
}

/* i / d for functors that recover a row from a flat index (swiglu, rope): in
 * 32-bit arithmetic when idx32 (the launcher found every index below 2^32: the
 * 32-bit division is a short inline sequence, the 64-bit one a far longer
 * subroutine), else in 64. */
__device__ __forceinline__ size_t idx_div(size_t i, size_t d, int idx32) {
    return idx32 ? (size_t)((uint32_t)i / (uint32_t)d) : i / d;
}

/* 1 when every pointer is 16-byte aligned (NULL counts as aligned). */
template <typename... P> static inline int cu_aligned16(const P *...p) {
    return ((((uintptr_t)p) | ... | (uintptr_t)0) & 15u) == 0;
}

// op over [0, n): packs of VEC elements, then the n % VEC tail (VEC > 1).
template <typename Op, int VEC>
__global__ void __launch_bounds__(MAP_THREADS) map_kernel(Op op, size_t n) {
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x, nv = n / VEC;
    for (size_t i = tid; i < nv; i += stride) op.template apply<VEC>(i * VEC);
    if (VEC > 1 && nv * VEC + tid < n) op.template apply<1>(nv * VEC + tid);
}

// out (n) = a (n) + b (n), summed in fp32 and rounded once (add_act, add_f32); out may
// equal a or b (each element is read and written by one thread).
template <typename T> struct AddMap {
    T *out;
    const T *a, *b;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        float x[K];
        ld_f<K>(a + i, x);
        add_f<K>(x, b + i);
        st_f<K>(out + i, x);
    }
};

static inline unsigned map_grid(size_t packs) {
    const unsigned g = cu_blocks(packs, MAP_THREADS);
    return g > 65535u * 8u ? 65535u * 8u : g; /* grid-stride beyond */
}

/* op over n elements: VEC-wide packs when vec (the caller checked alignment),
 * else one element per access. */
template <int VEC, typename Op>
static void launch_map(const Op &op, size_t n, int vec, cudaStream_t st) {
    if (vec)
        map_kernel<Op, VEC><<<map_grid(n / VEC), MAP_THREADS, 0, st>>>(op, n);
    else
        map_kernel<Op, 1><<<map_grid(n), MAP_THREADS, 0, st>>>(op, n);
    CU_CHECK_LAUNCH();
}

#endif
