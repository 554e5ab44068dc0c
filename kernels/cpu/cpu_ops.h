/* cpu_ops.h - internal header of the CPU backend (kernels/cpu/).
 *
 * Storage: every tensor is host memory. Act tensors are float in both compute
 * dtypes; in LT_BF16 mode each op rounds the act tensors it stores to the
 * nearest bf16 value (lt_bf16_round, round-to-nearest-even) so that the CPU
 * backend reproduces bf16 storage while keeping float pointers. Accumulation
 * is always fp32 or wider. fp32 tensors (weight gradients, master weights,
 * Adam moments, LayerNorm statistics, lse, losses) are never rounded.
 *
 * Threads: every OpenMP region uses num_threads(cpu_nthreads(be)); OpenBLAS
 * gets the same count at creation. Every reduction written here is
 * independent of the thread count and of scheduling (each output element is
 * summed by one thread in a fixed order, or fixed-size chunks are combined
 * serially); with OpenBLAS GEMMs (deterministic for a given thread count) the
 * backend is bitwise reproducible run to run. */
#ifndef LT_CPU_OPS_H
#define LT_CPU_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "common.h"

typedef struct {
    int nthreads;       /* OpenMP and BLAS threads used by this backend (>= 1) */
    float *scratch;     /* grow-only workspace, see cpu_scratch() */
    size_t scratch_len; /* in floats */
} CpuImpl;

static inline int cpu_nthreads(const LtBackend *be) { return ((const CpuImpl *)be->impl)->nthreads; }
static inline int cpu_is_bf16(const LtBackend *be) { return be->dtype == LT_BF16; }

/* Same result as lt_bf16_round (RNE, NaN stays a quiet NaN) but branch-free so
 * that loops using it vectorize. */
static inline float cpu_bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t qnan = (u | 0x00400000u) & 0xffff0000u;
    r = (u & 0x7fffffffu) > 0x7f800000u ? qnan : r;
    memcpy(&f, &r, 4);
    return f;
}

/* Value stored into an act tensor: rounded to bf16 when bf16 != 0. */
static inline float cpu_store(int bf16, float x) { return bf16 ? cpu_bf16_round(x) : x; }

/* Row i (C wide) of the residual stream a norm normalizes: a's row, or when b != NULL
 * the row of resid_out = a + b, stored in the act dtype first (the expression of
 * cpu_add_act: the two agree bit for bit). layernorm.c, rmsnorm.c. */
static inline const float *cpu_resid_row(int bf16, float *resid_out, const float *a,
                                         const float *b, int i, int C) {
    const float *x = a + (size_t)i * C;
    if (!b) return x;
    float *r = resid_out + (size_t)i * C;
    const float *bi = b + (size_t)i * C;
    for (int c = 0; c < C; c++) r[c] = cpu_store(bf16, x[c] + bi[c]);
    return r;
}

/* A workspace of at least n floats owned by the backend, valid until the next
 * cpu_scratch call (ops are called by one host thread at a time, so one op
 * owns it for its duration). Contents are undefined. */
float *cpu_scratch(LtBackend *be, size_t n);

/* Round n floats in place to bf16 (parallel); no-op unless the backend is bf16. */
void cpu_round_act(const LtBackend *be, float *x, size_t n);

/* exp(x) for float x, within 2 ulp where the result is a normal float.
 * Arguments are clamped to [-88, 88]: exp(x) = 0 for x <= -88 (so exp(-inf) =
 * 0), exp(x) = 1.65e38 for x >= 88 (+inf included); NaN propagates.
 * Method: Cody-Waite reduction x = n ln2 + f, |f| <= ln2/2, the degree-7
 * Taylor polynomial of exp(f) (truncation < 1e-8 relative), times 2^n built in
 * the exponent bits (n = -127 gives +0).
 * Written so loops calling it vectorize (glibc's expf only does so under
 * -ffast-math): the clamps and the NaN test are integer selects on the bit
 * pattern, because float compare-and-branch is not if-converted under the
 * default -ftrapping-math. */
static inline float cpu_expf(float x) {
    uint32_t ux;
    memcpy(&ux, &x, 4);
    /* negatives order as unsigned bit patterns, positives as signed ones */
    uint32_t uc = ux > 0xC2B00000u ? 0xC2B00000u : ux;                /* max(x, -88) */
    uc = (int32_t)uc > (int32_t)0x42B00000 ? 0x42B00000u : uc;        /* min(x, 88) */
    uc = (ux & 0x7fffffffu) > 0x7f800000u ? ux : uc;                  /* NaN stays */
    float xc;
    memcpy(&xc, &uc, 4);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float r = xc * 1.44269504088896341f + shifter;
    float n = r - shifter;
    int32_t ni;
    memcpy(&ni, &r, 4);
    ni -= 0x4B400000; /* integer value of n, in [-127, 127] */
    float f = xc - n * 0.693145751953125f; /* ln2 high part: n * it is exact */
    f = f - n * 1.428606765330187e-06f;    /* ln2 low part */
    float p = 1.0f / 5040.0f;
    p = p * f + 1.0f / 720.0f;
    p = p * f + 1.0f / 120.0f;
    p = p * f + 1.0f / 24.0f;
    p = p * f + 1.0f / 6.0f;
    p = p * f + 0.5f;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    uint32_t bits = (uint32_t)(ni + 127) << 23; /* 2^n; 0 bits (= +0.0f) when n = -127 */
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

/* GeLU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = s (x + 0.044715 x^3),
 * s = sqrt(2/pi). Computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u),
 * which has no cancellation and vectorizes with cpu_expf. */
#define CPU_GELU_S 0.7978845608028654f
#define CPU_GELU_K 0.044715f
static inline float cpu_gelu1(float x) {
    float u = CPU_GELU_S * (x + CPU_GELU_K * x * x * x);
    return x / (1.0f + cpu_expf(-2.0f * u));
}
/* d gelu / dx = sg + x * 2 sg (1 - sg) * du/dx, with sg = sigmoid(2u)
 * (since 1 - tanh^2(u) = 4 sg (1 - sg)) and du/dx = s (1 + 3 * 0.044715 x^2). */
static inline float cpu_gelu_grad1(float x) {
    float u = CPU_GELU_S * (x + CPU_GELU_K * x * x * x);
    float sg = 1.0f / (1.0f + cpu_expf(-2.0f * u));
    float du = CPU_GELU_S * (1.0f + 3.0f * CPU_GELU_K * x * x);
    return sg + 2.0f * x * sg * (1.0f - sg) * du;
}

/* ---- ops (semantics in include/backend.h) ---- */
/* memory.c */
void *cpu_alloc(LtBackend *be, size_t bytes);
void cpu_free(LtBackend *be, void *p);
void cpu_zero(LtBackend *be, void *p, size_t bytes);
void cpu_memcpy(LtBackend *be, void *dst, const void *src, size_t bytes);
void cpu_synchronize(LtBackend *be);
void cpu_upload(LtBackend *be, void *dst, const void *src, size_t bytes);
void cpu_download(LtBackend *be, void *dst, const void *src, size_t bytes);
void *cpu_host_alloc(LtBackend *be, size_t bytes);
void cpu_localize_ids(LtBackend *be, int32_t *ids, size_t n, int start, int count);
void cpu_act_from_f32(LtBackend *be, void *dst, const float *src, size_t n);
void cpu_act_to_f32(LtBackend *be, float *dst, const void *src, size_t n);
LtStream *cpu_stream_create(LtBackend *be);
void cpu_stream_destroy(LtBackend *be, LtStream *s);
void cpu_set_stream(LtBackend *be, LtStream *s);
LtEvent *cpu_event_create(LtBackend *be);
void cpu_event_destroy(LtBackend *be, LtEvent *e);
void cpu_event_record(LtBackend *be, LtEvent *e, LtStream *s);
void cpu_stream_wait_event(LtBackend *be, LtStream *s, LtEvent *e);
LtStream *cpu_current_stream(LtBackend *be);
LtEvent *cpu_timer_create(LtBackend *be);
void cpu_timer_record(LtBackend *be, LtEvent *e, LtStream *s);
int cpu_timer_elapsed(LtBackend *be, LtEvent *a, LtEvent *b, double *seconds);

/* embedding.c */
void cpu_embedding_fwd(LtBackend *be, void *out, const int32_t *tokens, const void *wte,
                       const void *wpe, const int32_t *pos, int B, int T, int C);
void cpu_embedding_bwd(LtBackend *be, float *dwte, float *dwpe, const void *dout,
                       const int32_t *tokens, const int32_t *pos, int B, int T, int C);

/* layernorm.c */
void cpu_layernorm_fwd(LtBackend *be, void *resid_out, void *out, float *mean, float *rstd,
                       const void *a, const void *b, const void *w, const void *bias, int N, int C);
void cpu_layernorm_bwd(LtBackend *be, void *dinp, float *dw, float *db, const void *dout,
                       const void *inp, const void *w, const float *mean, const float *rstd, int N,
                       int C);
void cpu_add_act(LtBackend *be, void *out, const void *a, const void *b, size_t n);
/* dw += sum over rows of dout * (x - mean) * rstd (mean NULL: 0, RMSNorm's x * rstd),
 * db += sum over rows of dout; either may be NULL. Deterministic; nt threads. */
void cpu_norm_param_grads(float *dw, float *db, const float *dout, const float *inp,
                          const float *mean, const float *rstd, int N, int C, int nt);

/* linear.c */
void cpu_linear_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp, const void *w,
                    const void *bias, int N, int C, int OC);
void cpu_linear_bwd(LtBackend *be, void *dinp, float *dw, float *dbias, const void *dout,
                    const void *inp, const void *w, const void *gelu_pre, int N, int C, int OC);
void cpu_linear_group_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp,
                          const void *const *w, const void *const *bias, const int *off, int G,
                          int C, int OC);
void cpu_linear_group_bwd(LtBackend *be, void *dinp, float *const *dw, float *const *dbias,
                          const void *dout, const void *inp, const void *const *w,
                          const void *gelu_pre, const int *off, int G, int C, int OC);

/* gelu.c */
void cpu_gelu_fwd(LtBackend *be, void *out, const void *inp, size_t n);
void cpu_gelu_bwd(LtBackend *be, void *dinp, const void *inp, const void *dout, size_t n);

/* rmsnorm.c */
void cpu_rmsnorm_fwd(LtBackend *be, void *resid_out, void *out, float *rstd, const void *a,
                     const void *b, const void *w, float eps, int N, int C);
void cpu_rmsnorm_bwd(LtBackend *be, void *dinp, float *dw, const void *dout, const void *inp,
                     const void *w, const float *rstd, int N, int C);

/* swiglu.c */
void cpu_swiglu_fwd(LtBackend *be, void *out, const void *gu, int N, int F, const LtGlu *glu);
void cpu_swiglu_bwd(LtBackend *be, void *dgu, const void *gu, const void *dout, int N, int F,
                    const LtGlu *glu);

/* rope.c */
void cpu_rope(LtBackend *be, void *qkv, const float *cs, const int32_t *pos, int B, int T, int NH,
              int NKV, int HD, int inverse);

/* qknorm.c */
void cpu_qk_norm_fwd(LtBackend *be, void *qkv, void *xin, float *rstd, const void *wq,
                     const void *wk, float eps, int N, int NH, int NKV, int HD);
void cpu_qk_norm_bwd(LtBackend *be, void *dqkv, float *dwq, float *dwk, const void *xin,
                     const void *wq, const void *wk, const float *rstd, int N, int NH, int NKV,
                     int HD);

/* attention.c */
void cpu_attention_fwd(LtBackend *be, void *out, float *lse, const void *qkv,
                       const void *offsets, const int32_t *kstart, int window, int B, int T,
                       int NH, int NKV, int HD);
void cpu_attention_bwd(LtBackend *be, void *dqkv, float *doffsets, const void *dout,
                       const void *qkv, const void *out, const float *lse, const void *offsets,
                       const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD);

/* xent.c */
void cpu_xent_fwd_bwd(LtBackend *be, float *losses, void *logits, const int32_t *targets, int N,
                      int V, int Vp, float dscale);
void cpu_xent_tp_stats(LtBackend *be, float *row_max, float *row_sumexp, float *row_target,
                       const void *logits, const int32_t *targets, const float *global_max,
                       int N, int Vvalid, int Vp);
void cpu_xent_tp_finish(LtBackend *be, float *losses, void *logits, const int32_t *targets,
                        const float *global_max, const float *global_sumexp,
                        const float *global_target, int N, int Vvalid, int Vp, float dscale);

/* adamw.c */
void cpu_adamw(LtBackend *be, void *param, float *master, const float *grad, float *m, float *v,
               size_t n, const LtAdamArgs *a);
void cpu_sum_f64(LtBackend *be, double *acc, const float *x, size_t n, int squares);
void cpu_clip_coef(LtBackend *be, float *coef, const double *sumsq, float clip);
void cpu_flag_nonfinite(LtBackend *be, double *acc, const double *x);
void cpu_scale_f32(LtBackend *be, float *x, float s, size_t n);
void cpu_add_f32(LtBackend *be, float *dst, const float *src, size_t n);

/* moe.c */
void cpu_moe_router_fwd(LtBackend *be, float *logits, const void *x, const void *w,
                        const void *bias, int N, int C, int E);
void cpu_moe_router_bwd(LtBackend *be, void *dx, float *dw, float *dbias, const float *dlogits,
                        const void *x, const void *w, int N, int C, int E);
void cpu_moe_topk(LtBackend *be, int32_t *idx, float *w, const float *logits, const float *bias,
                  int N, int E, int K, int score, int pre_softmax, float scale, int groups,
                  int group_topk);
void cpu_moe_topk_bwd(LtBackend *be, float *dlogits, const float *dw, const int32_t *idx,
                      const float *logits, int N, int E, int K, int score, int pre_softmax,
                      float scale);
void cpu_moe_aux_stats(LtBackend *be, float *counts, float *psum, double *zsum,
                       const float *logits, int N, int E, int K, int score, long row0,
                       long group_len);
void cpu_moe_aux_bwd(LtBackend *be, float *dlogits, const float *logits, const float *counts, int N,
                     int E, int K, int score, long row0, long group_len, float aux_coef,
                     float z_coef);
void cpu_moe_dispatch(LtBackend *be, int32_t *pos, int32_t *src, int32_t *offsets,
                      int32_t *dropped, const int32_t *idx, const float *w, int N, int E, int K,
                      int capacity, int drop_policy, int pad);
void cpu_moe_permute(LtBackend *be, void *out, const void *x, const int32_t *src, int M, int C);
void cpu_moe_permute_bwd(LtBackend *be, void *dx, const void *dxp, const int32_t *pos, int N,
                         int K, int C);
void cpu_moe_unpermute(LtBackend *be, void *out, const void *y, const int32_t *pos,
                       const float *w, int N, int K, int C);
void cpu_moe_unpermute_bwd(LtBackend *be, void *dy, float *dw, const void *dout, const void *y,
                           const int32_t *pos, const float *w, int N, int K, int C, int M);
void cpu_moe_gate_fwd(LtBackend *be, void *out, const void *y, float *s, int R, int C);
void cpu_moe_gate_bwd(LtBackend *be, void *y, float *s, const void *dout, int R, int C);

#endif
