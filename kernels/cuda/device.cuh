/* device.cuh - device helpers shared by the kernels (through common.cuh) and
 * by their host emulation (tests/emu/common.cuh): element conversion, warp
 * and block reductions, GeLU math, launch sizes. The includer provides
 * cuda_bf16.h, __shfl_xor_sync, __syncthreads, threadIdx and blockDim. */
#ifndef LT_CUDA_DEVICE_CUH
#define LT_CUDA_DEVICE_CUH

#include <math.h>
#include <stddef.h>

/* ---- element conversion ------------------------------------------------- */
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }

/* ---- reductions --------------------------------------------------------- */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* Block-wide sum in a fixed order (deterministic). `sh` holds >= 32 floats.
 * Every thread gets the result. Contains __syncthreads: call from all threads. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : 0.f;
    return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(r);
}

/* ---- GeLU (tanh approximation) ------------------------------------------ */
/* gelu(x) = 0.5 x (1 + tanh(u)), u = k0 (x + k1 x^3), evaluated through
 * 0.5 (1 + tanh(u)) = sigmoid(2u), which has no cancellation for x << 0;
 * gelu'(x) = sg + x * 2 sg (1 - sg) * du/dx with sg = sigmoid(2u). */
#define LT_GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define LT_GELU_K1 0.044715f
__device__ __forceinline__ float gelu_f(float x) {
    float u = LT_GELU_K0 * (x + LT_GELU_K1 * x * x * x);
    return x / (1.f + expf(-2.f * u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
    float u = LT_GELU_K0 * (x + LT_GELU_K1 * x * x * x);
    float sg = 1.f / (1.f + expf(-2.f * u));
    float du = LT_GELU_K0 * (1.f + 3.f * LT_GELU_K1 * x * x);
    return sg + 2.f * x * sg * (1.f - sg) * du;
}

/* ---- launch sizes -------------------------------------------------------- */
static inline unsigned cu_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 0x7fffffffu ? 0x7fffffffu : b));
}
static inline size_t cu_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

#endif
