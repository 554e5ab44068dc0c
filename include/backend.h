/* backend.h - the one op interface every compute backend implements.
 *
 * Tensors are device pointers owned by the caller. "act" tensors (parameters
 * in compute precision, activations, activation gradients) have the backend's
 * compute dtype: fp32, or bf16. The CPU backend stores bf16 tensors as float
 * rounded to bf16 (round-to-nearest-even) after every op; the CUDA backend
 * stores real 16-bit bf16. Use lt_act_size() for byte sizes. fp32 tensors
 * (typed float*) are: weight gradients (always accumulated, +=), master
 * weights, Adam moments, LayerNorm statistics, attention log-sum-exp, losses.
 *
 * Shapes (row-major): N = B*T tokens, C hidden, OC output features,
 * NH heads, HD head dim (C = NH*HD), V true vocab, Vp padded vocab.
 * Linear weights are stored [OC, C] (out-features major), as in Megatron.
 * QKV activations are (B, T, 3, NH, HD): per token q | k | v. */
#ifndef LT_BACKEND_H
#define LT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LT_F32 = 0, LT_BF16 = 1 } LtDtype;

typedef struct LtBackend LtBackend;
typedef struct LtStream LtStream; /* opaque; NULL = the backend's default stream */
typedef struct LtEvent LtEvent;

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float bc1, bc2;    /* bias corrections 1 - beta^t */
    float grad_scale;  /* multiplies the gradient first (clip coefficient) */
} LtAdamArgs;

typedef struct {
    const char *name;
    void (*destroy)(LtBackend *be);

    /* ---- memory (alloc returns zeroed device memory, never NULL) ---- */
    void *(*alloc)(LtBackend *be, size_t bytes);
    void (*free)(LtBackend *be, void *p);
    void (*zero)(LtBackend *be, void *p, size_t bytes);
    void (*upload)(LtBackend *be, void *dst, const void *src, size_t bytes);   /* host -> device */
    void (*download)(LtBackend *be, void *dst, const void *src, size_t bytes); /* device -> host */
    void (*copy)(LtBackend *be, void *dst, const void *src, size_t bytes);     /* device -> device */
    void (*synchronize)(LtBackend *be);
    /* act tensor <-> fp32 (both device pointers) */
    void (*act_from_f32)(LtBackend *be, void *dst, const float *src, size_t n);
    void (*act_to_f32)(LtBackend *be, float *dst, const void *src, size_t n);

    /* ---- streams and events (for communication overlap) ---- */
    LtStream *(*stream_create)(LtBackend *be);
    void (*stream_destroy)(LtBackend *be, LtStream *s);
    void (*set_stream)(LtBackend *be, LtStream *s);  /* ops below run on it */
    LtEvent *(*event_create)(LtBackend *be);
    void (*event_destroy)(LtBackend *be, LtEvent *e);
    void (*event_record)(LtBackend *be, LtEvent *e, LtStream *s);
    void (*stream_wait_event)(LtBackend *be, LtStream *s, LtEvent *e);

    /* ---- ops ---- */
    /* out(N,C) = wte[tokens] + wpe[t], t = position within the sequence of length T. */
    void (*embedding_fwd)(LtBackend *be, void *out, const int32_t *tokens, const void *wte,
                          const void *wpe, int B, int T, int C);
    /* dwte[tokens[i]] += dout[i]; dwpe[t] += sum over batch. Deterministic order. */
    void (*embedding_bwd)(LtBackend *be, float *dwte, float *dwpe, const void *dout,
                          const int32_t *tokens, int B, int T, int C);
    /* Residual add fused with LayerNorm (eps 1e-5):
     * if b != NULL: resid_out = a + b and x = resid_out; else x = a (resid_out unused).
     * out = (x - mean) * rstd * w + bias; mean/rstd (N) saved for backward. */
    void (*layernorm_fwd)(LtBackend *be, void *resid_out, void *out, float *mean, float *rstd,
                          const void *a, const void *b, const void *w, const void *bias, int N,
                          int C);
    /* dinp += dLN/dx (accumulates: it is the residual stream's gradient);
     * dw += ; db += (fp32). inp is the x the forward normalized. */
    void (*layernorm_bwd)(LtBackend *be, void *dinp, float *dw, float *db, const void *dout,
                          const void *inp, const void *w, const float *mean, const float *rstd,
                          int N, int C);
    /* out(N,OC) = inp(N,C) . w(OC,C)^T + bias(OC) [bias may be NULL].
     * If pre_gelu != NULL: pre_gelu = that result and out = gelu_tanh(pre_gelu). */
    void (*linear_fwd)(LtBackend *be, void *out, void *pre_gelu, const void *inp, const void *w,
                       const void *bias, int N, int C, int OC);
    /* dinp(N,C) = dout(N,OC) . w(OC,C), overwritten; if gelu_pre != NULL it is
     * then multiplied elementwise by gelu'(gelu_pre) (gelu_pre has shape (N,C)).
     * dw(OC,C) += dout^T . inp; dbias(OC) += column sums of dout.
     * Any of dinp, dw, dbias may be NULL (skipped). */
    void (*linear_bwd)(LtBackend *be, void *dinp, float *dw, float *dbias, const void *dout,
                       const void *inp, const void *w, const void *gelu_pre, int N, int C, int OC);
    /* Elementwise tanh-approximation GeLU and its backward (dinp overwritten). */
    void (*gelu_fwd)(LtBackend *be, void *out, const void *inp, size_t n);
    void (*gelu_bwd)(LtBackend *be, void *dinp, const void *inp, const void *dout, size_t n);
    /* Causal self-attention, scale 1/sqrt(HD). qkv (B,T,3,NH,HD) -> out (B,T,NH,HD);
     * lse (B,NH,T) = log-sum-exp of each row of scaled scores, saved for backward.
     * Never materializes a (T,T) matrix per head in memory beyond one row/tile. */
    void (*attention_fwd)(LtBackend *be, void *out, float *lse, const void *qkv, int B, int T,
                          int NH, int HD);
    /* dqkv (B,T,3,NH,HD) overwritten, from dout (B,T,NH,HD) and the forward's qkv, out, lse. */
    void (*attention_bwd)(LtBackend *be, void *dqkv, const void *dout, const void *qkv,
                          const void *out, const float *lse, int B, int T, int NH, int HD);
    /* Fused softmax + cross-entropy over rows of logits (N, Vp), only the first V
     * columns are real (padded columns get no probability). losses[i] (fp32) =
     * logsumexp(logits[i,:V]) - logits[i, targets[i]]. If dscale != 0 the logits
     * are overwritten in place with dscale * (softmax - onehot) (zeros in padded
     * columns): no second copy of the logits exists. */
    void (*xent_fwd_bwd)(LtBackend *be, float *losses, void *logits, const int32_t *targets,
                         int N, int V, int Vp, float dscale);
    /* One AdamW step over a flat range: g = grad*grad_scale; m,v updated;
     * master -= lr*(mhat/(sqrt(vhat)+eps) + weight_decay*master); param = master
     * in compute dtype. */
    void (*adamw)(LtBackend *be, void *param, float *master, const float *grad, float *m,
                  float *v, size_t n, const LtAdamArgs *a);
    /* Sum of squares of an fp32 buffer, accumulated in double; result on host. */
    double (*sumsq)(LtBackend *be, const float *x, size_t n);
    /* x *= s over an fp32 buffer. */
    void (*scale_f32)(LtBackend *be, float *x, float s, size_t n);
} LtBackendOps;

struct LtBackend {
    const LtBackendOps *ops;
    LtDtype dtype;       /* compute dtype of act tensors */
    size_t act_size;     /* bytes per act element on this backend */
    const char *device_name;
    int device_id;       /* -1 for CPU */
    void *impl;
};

static inline size_t lt_act_bytes(const LtBackend *be, size_t n) { return n * be->act_size; }

/* CPU backend: `threads` OpenMP/BLAS threads (0 = all cores). */
LtBackend *lt_backend_cpu_create(LtDtype dtype, int threads);

/* CUDA backend on device `device`; NULL (with a message in err) when CUDA is not
 * compiled in or no GPU is usable. */
LtBackend *lt_backend_cuda_create(LtDtype dtype, int device, char *err, size_t errlen);
/* Number of visible CUDA devices (0 when not compiled in). */
int lt_cuda_device_count(void);
/* 1 when the CUDA backend was compiled into this binary. */
int lt_cuda_compiled(void);

static inline void lt_backend_destroy(LtBackend *be) {
    if (be) be->ops->destroy(be);
}

#ifdef __cplusplus
}
#endif

#endif
