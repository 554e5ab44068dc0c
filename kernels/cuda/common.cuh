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
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "attn_select.h"
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

/* ---- cuBLAS and cuBLASLt, opened on first use (cublas_load.cu) --------------
 * Not linked: libcublasLt's static initialisers cost every process that maps
 * it about 0.2 s of CPU and 100 MB of page faults, whether or not it ever
 * touches a GPU (a CPU run, `lattice plan`, each rank of an mpirun). The
 * backend opens both libraries when it creates a device (lt_cublas) and calls
 * them through this table: CUBLAS(cublasLtMatmul)(...). The list names the
 * exported symbols (cublas_v2.h's cublasCreate is cublasCreate_v2). */
#define LT_CUBLAS_FUNCS(X)                                                                 \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtMatmul)          \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate)                        \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)                       \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                 \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate)                \
    X(cublasLtMatrixLayoutDestroy) X(cublasCreate_v2) X(cublasDestroy_v2)                \
    X(cublasSetStream_v2) X(cublasSetWorkspace_v2) X(cublasGemmGroupedBatchedEx)
typedef struct {
#define LT_CUBLAS_MEMBER(f) decltype(&::f) f;
    LT_CUBLAS_FUNCS(LT_CUBLAS_MEMBER)
#undef LT_CUBLAS_MEMBER
} LtCublasApi;
/* Opens the libraries once (later calls return the same table). NULL, with
 * the files tried and the loader's message in err, when they cannot be opened
 * or lack a function. */
const LtCublasApi *lt_cublas(char *err, size_t errlen);
extern LtCublasApi lt_cublas_api; /* filled by a successful lt_cublas */
#define CUBLAS(f) (lt_cublas_api.f)

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
    cublasHandle_t blas; /* cuBLAS, for the grouped GEMMs (gemm.cu); created on first use */
    LtStream def;
    LtStream *cur;
    int sm;        /* compute capability, major * 10 + minor */
    int attn_simt; /* 1: force the SIMT attention path (env LT_CUDA_ATTN=simt) */
    struct CudnnAttn *cudnn; /* non-NULL: attention through cuDNN where a call allows */
    LtAttnChoice attn;       /* model.attention as resolved (lattice until configured) */
    int gemm_no_epilogue; /* 1: never use cuBLASLt epilogues (env LT_CUDA_GEMM=plain) */
    GemmCacheEntry cache[LT_GEMM_CACHE];
    int cache_next;
    int graphs_live; /* captured CUDA graphs alive: scratch arenas may not move */
    int capturing;   /* between capture_begin and capture_end (the timers' records) */
} CudaImpl;

static inline CudaImpl *cu_impl(LtBackend *be) { return (CudaImpl *)be->impl; }
static inline cudaStream_t cu_stream(LtBackend *be) { return cu_impl(be)->cur->s; }
static inline int cu_is_bf16(const LtBackend *be) { return be->dtype == LT_BF16; }

/* Scratch of at least `bytes` for the current stream; valid until the next
 * cu_scratch call on the same stream (one call per op, partition it). */
void *cu_scratch(LtBackend *be, size_t bytes);
/* cuBLASLt workspace of the current stream. */
void *cu_workspace(LtBackend *be, size_t *bytes);

#include "device.cuh" /* bf16 conversion, warp/block reductions, GeLU math, launch sizes */
#include "vec.cuh"    /* 16-byte packs, the elementwise map kernel */
#include "ops.cuh"    /* the op entries (cu_*) */

#endif
