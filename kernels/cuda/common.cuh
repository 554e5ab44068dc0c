/* common.cuh - shared pieces of the CUDA backend.
 *
 * Design note. The backend keeps one CudaImpl per LtBackend. Every op runs on
 * the "current" LtStream (set_stream; NULL = the backend's own default
 * stream). Each LtStream owns its scratch arena (grow-only, used for the
 * partial sums of the deterministic two-pass reductions) and its cuBLASLt
 * workspace, so ops issued on two streams at once never share temporaries.
 * Act tensors are templated on T = __nv_bfloat16 (LT_BF16) or float (LT_F32);
 * all arithmetic is fp32 (to_f / from_f convert, from_f rounds to nearest even).
 *
 * Tiers in every .cu file: __global__ kernels -> launch_* host launchers
 * (stream is the last argument) -> cu_* op entries with the vtable signature.
 * Errors: CU_CHECK / CUBLAS_CHECK / CU_CHECK_LAUNCH all end in lt_fatal, which
 * prints file:line. */
#ifndef LT_CUDA_COMMON_CUH
#define LT_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend.h"
#include "common.h"

/* ---- checks ------------------------------------------------------------- */
#define CU_CHECK(call)                                                                     \
    do {                                                                                   \
        cudaError_t cu_err_ = (call);                                                      \
        if (cu_err_ != cudaSuccess)                                                        \
            lt_fatal("CUDA error %s (%d) in %s", cudaGetErrorString(cu_err_), (int)cu_err_, \
                     #call);                                                               \
    } while (0)

#define CU_CHECK_LAUNCH() CU_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                 \
    do {                                                                                   \
        cublasStatus_t cb_st_ = (call);                                                    \
        if (cb_st_ != CUBLAS_STATUS_SUCCESS)                                               \
            lt_fatal("cuBLASLt error %d in %s", (int)cb_st_, #call);                       \
    } while (0)

/* ---- backend state ------------------------------------------------------ */
struct LtStream {
    cudaStream_t s;
    void *scratch; /* grow-only arena for op temporaries on this stream */
    size_t scratch_bytes;
    void *ws; /* cuBLASLt workspace (allocated on first GEMM) */
    size_t ws_bytes;
};

#define LT_GEMM_CACHE 64
typedef struct {
    uint64_t key[4];
    int valid; /* 1 = algo found, 0 = no algo (use fallback) */
    cublasLtMatmulAlgo_t algo;
} GemmCacheEntry;

typedef struct {
    int device;
    char name[256];
    int sm_count;
    int smem_optin; /* max dynamic shared memory per block (opt-in) */
    cublasLtHandle_t lt;
    LtStream def;
    LtStream *cur;
    int attn_simt; /* 1: force the SIMT attention path (env LT_CUDA_ATTN=simt) */
    int gemm_no_epilogue; /* 1: never use cuBLASLt epilogues (env LT_CUDA_GEMM=plain) */
    GemmCacheEntry cache[LT_GEMM_CACHE];
    int cache_next;
} CudaImpl;

static inline CudaImpl *cu_impl(LtBackend *be) { return (CudaImpl *)be->impl; }
static inline cudaStream_t cu_stream(LtBackend *be) { return cu_impl(be)->cur->s; }
static inline int cu_is_bf16(const LtBackend *be) { return be->dtype == LT_BF16; }

/* Scratch of at least `bytes` for the current stream; valid until the next
 * cu_scratch call on the same stream (one call per op, partition it). */
void *cu_scratch(LtBackend *be, size_t bytes);
/* cuBLASLt workspace of the current stream. */
void *cu_workspace(LtBackend *be, size_t *bytes);

static inline unsigned cu_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 0x7fffffffu ? 0x7fffffffu : b));
}
static inline size_t cu_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

#include "elem.cuh" /* bf16, to_f / from_f, warp_sum / warp_max */

/* ---- reductions --------------------------------------------------------- */
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

/* ---- op entries (vtable signatures; defined in the per-op .cu files) ---- */
void cu_embedding_fwd(LtBackend *be, void *out, const int32_t *tokens, const void *wte,
                      const void *wpe, int B, int T, int C);
void cu_embedding_bwd(LtBackend *be, float *dwte, float *dwpe, const void *dout,
                      const int32_t *tokens, int B, int T, int C);
void cu_layernorm_fwd(LtBackend *be, void *resid_out, void *out, float *mean, float *rstd,
                      const void *a, const void *b, const void *w, const void *bias, int N, int C);
void cu_layernorm_bwd(LtBackend *be, void *dinp, float *dw, float *db, const void *dout,
                      const void *inp, const void *w, const float *mean, const float *rstd, int N,
                      int C);
void cu_linear_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp, const void *w,
                   const void *bias, int N, int C, int OC);
void cu_linear_bwd(LtBackend *be, void *dinp, float *dw, float *dbias, const void *dout,
                   const void *inp, const void *w, const void *gelu_pre, int N, int C, int OC);
void cu_gelu_fwd(LtBackend *be, void *out, const void *inp, size_t n);
void cu_gelu_bwd(LtBackend *be, void *dinp, const void *inp, const void *dout, size_t n);
void cu_attention_fwd(LtBackend *be, void *out, float *lse, const void *qkv, int B, int T,
                      int NH, int HD);
void cu_attention_bwd(LtBackend *be, void *dqkv, const void *dout, const void *qkv,
                      const void *out, const float *lse, int B, int T, int NH, int HD);
void cu_xent_fwd_bwd(LtBackend *be, float *losses, void *logits, const int32_t *targets, int N,
                     int V, int Vp, float dscale);
void cu_xent_tp_stats(LtBackend *be, float *row_max, float *row_sumexp, float *row_target,
                      const void *logits, const int32_t *targets, const float *global_max, int N,
                      int Vvalid, int Vp);
void cu_xent_tp_finish(LtBackend *be, float *losses, void *logits, const int32_t *targets,
                       const float *global_max, const float *global_sumexp,
                       const float *global_target, int N, int Vvalid, int Vp, float dscale);
void cu_adamw(LtBackend *be, void *param, float *master, const float *grad, float *m, float *v,
              size_t n, const LtAdamArgs *a);
double cu_sumsq(LtBackend *be, const float *x, size_t n);
void cu_scale_f32(LtBackend *be, float *x, float s, size_t n);
void cu_add_f32(LtBackend *be, float *dst, const float *src, size_t n);
void cu_add_act(LtBackend *be, void *out, const void *a, const void *b, size_t n);
void cu_act_from_f32(LtBackend *be, void *dst, const float *src, size_t n);
void cu_act_to_f32(LtBackend *be, float *dst, const void *src, size_t n);

/* Helpers shared between files (reduce.cu, gelu.cu). */
/* dbias(OC) += column sums of dout(N, OC); deterministic two-pass. */
void cu_colsum_add(LtBackend *be, float *dbias, const void *dout, int N, int OC);
/* out = gelu(pre + bias) with pre_gelu = pre + bias (bias may be NULL; pre_gelu may
 * equal the buffer holding pre, it is rewritten in place) - the GEMM fallback. */
void cu_bias_gelu(LtBackend *be, void *out, void *pre_gelu, const void *pre, const void *bias,
                  int N, int OC, int do_gelu);
/* dinp *= gelu'(gelu_pre) in place - the GEMM fallback for the DGELU epilogue. */
void cu_dgelu_inplace(LtBackend *be, void *dinp, const void *gelu_pre, size_t n);

#endif
