/* attention.cuh - pieces shared by the attention files (attention.cu entry,
 * attention_simt.cu generic path, attention_mma.cu bf16 tensor-core path).
 *
 * Layouts: qkv (B, T, NH + 2*NKV, HD) - row (b, t) holds q (NH heads) |
 * k (NKV heads) | v (NKV heads), NKV key/value heads shared by groups of
 * G = NH / NKV query heads (query head h uses key/value head h / G; NKV == NH
 * is plain multi-head attention); out / dout (B, T, NH, HD); lse and D
 * (B, NH, T) fp32; kstart (B, T) or NULL: each query's first visible key
 * (packed documents, backend.h). Scores use the
 * base-2 domain internally: s2 = (q.k) * scale * log2(e), so that
 * lse_natural = (m2 + log2(l)) * ln(2) and p = exp2(s2 - lse * log2(e)).
 * Attention sinks (sink: NH logits in the act dtype, NULL: none, backend.h)
 * enter the forward's last step only, as one more score without a value; the
 * backward kernels are unchanged (lse counts the sink) and the sink's gradient
 * is a reduction of lse and D of its own (attention.cu). */
#ifndef LT_CUDA_ATTENTION_CUH
#define LT_CUDA_ATTENTION_CUH

#include "attn_select.h"
#include "common.cuh"

#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

/* Element offset of q (which=0; h a query head), k (1) or v (2) (h a
 * key/value head) of token t in qkv. */
__device__ __forceinline__ size_t qkv_off(int b, int t, int h, int which, int T, int NH, int NKV,
                                          int HD) {
    const int col = (which ? NH + (which - 1) * NKV : 0) + h; /* head slot within the row */
    return ((size_t)b * T + t) * (size_t)(NH + 2 * NKV) * HD + (size_t)col * HD;
}
/* Element offset of token t, head h in out / dout (B, T, NH, HD). */
__device__ __forceinline__ size_t out_off(int b, int t, int h, int T, int NH, int HD) {
    return ((size_t)b * T + t) * (size_t)NH * HD + (size_t)h * HD;
}

/* Packed documents: the first row t in [lo, T) whose document starts at or after bound
 * (ksb: one sequence's kstart, non-decreasing), T if none; binary search. */
__device__ __forceinline__ int att_rows_from(const int32_t *ksb, int lo, int T, int bound) {
    int hi = T;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (ksb[mid] < bound) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The last step of a row's online softmax with the sink's logit (natural units) as
 * one more score: m2 (base 2) and l take it in; returns the factor the row's
 * unnormalized output is scaled by. */
__device__ __forceinline__ float att_sink_join(float logit, float *m2, float *l) {
    const float sb = logit * ATT_LOG2E, mn = fmaxf(*m2, sb), corr = exp2f(*m2 - mn);
    *l = *l * corr + exp2f(sb - mn);
    *m2 = mn;
    return corr;
}

/* Generic (SIMT) path: any HD <= 256, fp32 or bf16 acts. */
#define ATT_SIMT_MAX_HD 256
void launch_attention_simt_fwd(int is_bf16, void *out, float *lse, const void *qkv,
                               const void *sink, const int32_t *kstart, int B, int T, int NH,
                               int NKV, int HD, int smem_optin, cudaStream_t st);
void launch_attention_simt_bwd(int is_bf16, void *dqkv, const void *dout, const void *qkv,
                               const float *lse, const float *Dbuf, const int32_t *kstart, int B,
                               int T, int NH, int NKV, int HD, int smem_optin, cudaStream_t st);

/* Tensor-core path: bf16 acts, HD in {32, 64, 80, 96, 128}, 16-byte aligned tensors. */
int attention_mma_supported(int HD);
void launch_attention_mma_fwd(bf16 *out, float *lse, const bf16 *qkv, const bf16 *sink,
                              const int32_t *kstart, int B, int T, int NH, int NKV, int HD,
                              int smem_optin, cudaStream_t st);
void launch_attention_mma_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                              const float *Dbuf, const int32_t *kstart, int B, int T, int NH,
                              int NKV, int HD, int smem_optin, cudaStream_t st);

/* cuDNN's fused attention (attention_cudnn*.cu), used when the backend's
 * model.attention resolved to cuDNN (CudaImpl.cudnn != NULL). kstart and
 * window as the op's (backend.h): cuDNN never reads kstart; with window -1
 * (packed documents) it runs the call only when kstart's documents were
 * declared (cudnn_attn_documents). The entries return 1 when cuDNN ran the
 * call, 0 when it goes to lattice's kernels (undeclared documents, shape,
 * alignment or no plan for it: counted, and logged once). */
struct CudnnAttn;
int cudnn_attention_fwd(LtBackend *be, void *out, float *lse, const void *qkv,
                        const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD);
int cudnn_attention_bwd(LtBackend *be, void *dqkv, const void *dout, const void *qkv,
                        const void *out, const float *lse, const int32_t *kstart, int window,
                        int B, int T, int NH, int NKV, int HD);
/* A cuDNN handle and plan cache on the current device, for env (resolved to
 * cuDNN); NULL with the reason in err when cuDNN cannot start. */
struct CudnnAttn *cudnn_attn_create(int device, const LtAttnEnv *env, char *err, size_t errlen);
void cudnn_attn_destroy(struct CudnnAttn *ca);
/* backend.h attention_documents for ca (NULL: nothing kept). */
void cudnn_attn_documents(struct CudnnAttn *ca, const int32_t *kstart, const int32_t *doc,
                          int window, int B, int T);
/* Forget a declaration for device array p (it is being freed). */
void cudnn_attn_forget(struct CudnnAttn *ca, const void *p);
/* The counters of ca into info (NULL ca: zeros). */
void cudnn_attn_counters(const struct CudnnAttn *ca, LtAttnInfo *info);

#endif
