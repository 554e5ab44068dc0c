/* ops.cuh - the CUDA backend's op entries (vtable signatures, defined in the
 * per-op .cu files) and the helpers shared between files. */
#ifndef LT_CUDA_OPS_CUH
#define LT_CUDA_OPS_CUH

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

void cu_embedding_fwd(LtBackend *be, void *out, const int32_t *tokens, const void *wte,
                      const void *wpe, const int32_t *pos, int B, int T, int C);
void cu_embedding_bwd(LtBackend *be, float *dwte, float *dwpe, const void *dout,
                      const int32_t *tokens, const int32_t *pos, int B, int T, int C);
void cu_layernorm_fwd(LtBackend *be, void *resid_out, void *out, float *mean, float *rstd,
                      const void *a, const void *b, const void *w, const void *bias, int N, int C);
void cu_layernorm_bwd(LtBackend *be, void *dinp, float *dw, float *db, const void *dout,
                      const void *inp, const void *w, const float *mean, const float *rstd, int N,
                      int C);
void cu_linear_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp, const void *w,
                   const void *bias, int N, int C, int OC);
void cu_linear_bwd(LtBackend *be, void *dinp, float *dw, float *dbias, const void *dout,
                   const void *inp, const void *w, const void *gelu_pre, int N, int C, int OC);
void cu_linear_group_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp,
                         const void *const *w, const void *const *bias, const int *off, int G,
                         int C, int OC);
void cu_linear_group_bwd(LtBackend *be, void *dinp, float *const *dw, float *const *dbias,
                         const void *dout, const void *inp, const void *const *w,
                         const void *gelu_pre, const int *off, int G, int C, int OC);
void cu_gelu_fwd(LtBackend *be, void *out, const void *inp, size_t n);
void cu_gelu_bwd(LtBackend *be, void *dinp, const void *inp, const void *dout, size_t n);
void cu_rmsnorm_fwd(LtBackend *be, void *resid_out, void *out, float *rstd, const void *a,
                    const void *b, const void *w, float eps, int N, int C);
void cu_rmsnorm_bwd(LtBackend *be, void *dinp, float *dw, const void *dout, const void *inp,
                    const void *w, const float *rstd, int N, int C);
void cu_swiglu_fwd(LtBackend *be, void *out, const void *gu, int N, int F, const LtGlu *glu);
void cu_swiglu_bwd(LtBackend *be, void *dgu, const void *gu, const void *dout, int N, int F,
                   const LtGlu *glu);
void cu_rope(LtBackend *be, void *qkv, const float *cs, const int32_t *pos, int B, int T, int NH,
             int NKV, int HD, int inverse);
void cu_qk_norm_fwd(LtBackend *be, void *qkv, void *xin, float *rstd, const void *wq,
                    const void *wk, float eps, int N, int NH, int NKV, int HD);
void cu_qk_norm_bwd(LtBackend *be, void *dqkv, float *dwq, float *dwk, const void *xin,
                    const void *wq, const void *wk, const float *rstd, int N, int NH, int NKV,
                    int HD);
void cu_attention_fwd(LtBackend *be, void *out, float *lse, const void *qkv, const void *offsets,
                      const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD);
void cu_attention_bwd(LtBackend *be, void *dqkv, float *doffsets, const void *dout,
                      const void *qkv, const void *out, const float *lse, const void *offsets,
                      const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD);
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
void cu_sum_f64(LtBackend *be, double *acc, const float *x, size_t n, int squares);
void cu_clip_coef(LtBackend *be, float *coef, const double *sumsq, float clip);
void cu_flag_nonfinite(LtBackend *be, double *acc, const double *x);
void cu_localize_ids(LtBackend *be, int32_t *ids, size_t n, int start, int count);
void cu_scale_f32(LtBackend *be, float *x, float s, size_t n);
void cu_add_f32(LtBackend *be, float *dst, const float *src, size_t n);
void cu_add_act(LtBackend *be, void *out, const void *a, const void *b, size_t n);
void cu_act_from_f32(LtBackend *be, void *dst, const float *src, size_t n);
void cu_act_to_f32(LtBackend *be, float *dst, const void *src, size_t n);
void cu_moe_router_fwd(LtBackend *be, float *logits, const void *x, const void *w,
                       const void *bias, int N, int C, int E);
void cu_moe_router_bwd(LtBackend *be, void *dx, float *dw, float *dbias, const float *dlogits,
                       const void *x, const void *w, int N, int C, int E);
void cu_moe_topk(LtBackend *be, int32_t *idx, float *w, const float *logits, const float *bias,
                 int N, int E, int K, int score, int pre_softmax, float scale, int groups,
                 int group_topk);
void cu_moe_topk_bwd(LtBackend *be, float *dlogits, const float *dw, const int32_t *idx,
                     const float *logits, int N, int E, int K, int score, int pre_softmax,
                     float scale);
void cu_moe_aux_stats(LtBackend *be, float *counts, float *psum, double *zsum,
                      const float *logits, int N, int E, int K, int score, long row0,
                      long group_len);
void cu_moe_aux_bwd(LtBackend *be, float *dlogits, const float *logits, const float *counts,
                    int N, int E, int K, int score, long row0, long group_len, float aux_coef,
                    float z_coef);
void cu_moe_dispatch(LtBackend *be, int32_t *pos, int32_t *src, int32_t *offsets,
                     int32_t *dropped, const int32_t *idx, const float *w, int N, int E, int K,
                     int capacity, int drop_policy, int pad);
void cu_moe_permute(LtBackend *be, void *out, const void *x, const int32_t *src, int M, int C);
void cu_moe_permute_bwd(LtBackend *be, void *dx, const void *dxp, const int32_t *pos, int N,
                        int K, int C);
void cu_moe_unpermute(LtBackend *be, void *out, const void *y, const int32_t *pos, const float *w,
                      int N, int K, int C);
void cu_moe_gate_fwd(LtBackend *be, void *out, const void *y, float *s, int R, int C);
void cu_moe_gate_bwd(LtBackend *be, void *y, float *s, const void *dout, int R, int C);
void cu_moe_unpermute_bwd(LtBackend *be, void *dy, float *dw, const void *dout, const void *y,
                          const int32_t *pos, const float *w, int N, int K, int C, int M);

/* Helpers shared between files (reduce.cu, gelu.cu). */
/* dbias(OC) += column sums of dout(N, OC); deterministic, one read of dout. */
void cu_colsum_add(LtBackend *be, float *dbias, const void *dout, int N, int OC);
/* dst(ncols) += column sums of the fp32 matrix x(N rows, row stride ld), one launch,
 * fixed order (layernorm.cu sums its per-block dw/db partials with it). */
void launch_colsum_f32_add(float *dst, const float *x, size_t ld, int N, int ncols,
                           cudaStream_t st);
/* out = gelu(pre + bias) with pre_gelu = pre + bias (bias may be NULL; pre_gelu may
 * equal the buffer holding pre, it is rewritten in place) - the GEMM fallback. */
void cu_bias_gelu(LtBackend *be, void *out, void *pre_gelu, const void *pre, const void *bias,
                  int N, int OC, int do_gelu);
/* dinp *= gelu'(gelu_pre) in place - the GEMM fallback for the DGELU epilogue. */
void cu_dgelu_inplace(LtBackend *be, void *dinp, const void *gelu_pre, size_t n);
/* dx (n, act) += t (n, fp32): the sum in fp32, rounded once (moe.cu; the MoE router's dx). */
void cu_act_add_f32(LtBackend *be, void *dx, const float *t, size_t n);
/* The MoE router's bias (moe.cu): logits (N, E) += bias (E, act); dbias (E) += the
 * column sums of dlogits (N, E), fixed order. */
void cu_moe_router_bias_fwd(LtBackend *be, float *logits, const void *bias, int N, int E);
void cu_moe_router_bias_bwd(LtBackend *be, float *dbias, const float *dlogits, int N, int E);

#endif
