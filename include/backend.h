/* backend.h - the one op interface every compute backend implements.
 *
 * Tensors are device pointers owned by the caller. "act" tensors (parameters
 * in compute precision, activations, activation gradients) have the backend's
 * compute dtype: fp32, or bf16. The CPU backend stores bf16 tensors as float
 * rounded to bf16 (round-to-nearest-even) after every op; the CUDA backend
 * stores real 16-bit bf16. Use lt_act_size() for byte sizes. fp32 tensors
 * (typed float*) are: weight gradients (always accumulated, +=), master
 * weights, Adam moments, LayerNorm and RMSNorm statistics, attention
 * log-sum-exp, losses, RoPE's cos/sin table.
 *
 * Shapes (row-major): N = B*T tokens, C hidden, OC output features,
 * NH heads, HD head dim (C = NH*HD), V true vocab, Vp padded vocab.
 * Linear weights are stored [OC, C] (out-features major), as in Megatron.
 * QKV activations hold per token q (NH, HD) | k (NKV, HD) | v (NKV, HD): NKV
 * key/value heads (grouped-query attention; NKV == NH is (B, T, 3, NH, HD)). */
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
typedef struct LtGraph LtGraph; /* a captured sequence of ops, replayable */

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float bc1, bc2;    /* bias corrections 1 - beta^t */
    float grad_scale;  /* multiplies the gradient first (clip coefficient) */
    const float *grad_scale_dev; /* device scalar, a further gradient multiplier computed
                                  * on the device (clip_coef); NULL = 1; negative: skip
                                  * the step (param, master, m, v left untouched) */
} LtAdamArgs;

/* The gated activation of a GLU MLP (swiglu_fwd, swiglu_bwd), with Megatron-Core's
 * settings: over rows gate (F) | up (F),
 *   out = act(min(gate, clamp)) * (clamp(up, -clamp, clamp) + offset),
 * act(x) = x * sigmoid(x) (silu: SwiGLU) or x * sigmoid(1.702 x) (quick_gelu:
 * gpt-oss's quick GeGLU, clamp 7, offset 1). A clamp passes no gradient where its
 * input is at or beyond the bound (as torch's clamp). All zero: plain SwiGLU. */
typedef struct {
    int quick;    /* act = quick_gelu (model.quick_geglu); 0: silu */
    float offset; /* added to the clamped up (model.glu_linear_offset) */
    float clamp;  /* > 0: the clamp (model.activation_func_clamp_value); 0: none */
} LtGlu;

/* 1 when glu (NULL: SwiGLU) is plain SwiGLU: the backends keep its own path. */
static inline int lt_glu_plain(const LtGlu *glu) {
    return !glu || (!glu->quick && glu->offset == 0.0f && glu->clamp == 0.0f);
}

typedef struct {
    const char *name;
    void (*destroy)(LtBackend *be);

    /* ---- memory (alloc returns zeroed device memory, never NULL) ---- */
    void *(*alloc)(LtBackend *be, size_t bytes);
    void (*free)(LtBackend *be, void *p);
    void (*zero)(LtBackend *be, void *p, size_t bytes);
    void (*upload)(LtBackend *be, void *dst, const void *src, size_t bytes);   /* host -> device */
    /* device -> host, blocking: on return the copy and everything issued before it on
     * the current stream (download_async's copies included) are done */
    void (*download)(LtBackend *be, void *dst, const void *src, size_t bytes);
    void (*copy)(LtBackend *be, void *dst, const void *src, size_t bytes);     /* device -> device */
    void (*synchronize)(LtBackend *be);
    /* Host memory that the device copies to and from without the host waiting
     * (page-locked on a GPU, plain memory on the CPU); zeroed. */
    void *(*host_alloc)(LtBackend *be, size_t bytes);
    void (*host_free)(LtBackend *be, void *p);
    /* host -> device, ordered on the current stream, returning before the copy is
     * done. A source from host_alloc must stay unchanged until the device has passed
     * the copy (the next synchronize); from other host memory the call may wait until
     * the source is staged, and the source may be reused once it returns. */
    void (*upload_async)(LtBackend *be, void *dst, const void *src, size_t bytes);
    /* device -> host_alloc memory, ordered on the current stream; dst holds the data
     * after the next synchronize. */
    void (*download_async)(LtBackend *be, void *dst, const void *src, size_t bytes);
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
    /* The stream the ops run on now (set_stream's; NULL = the default stream), for
     * event_record / stream_wait_event in order with them. A backend whose ops all
     * run at once on the calling thread (the CPU) returns NULL. */
    LtStream *(*current_stream)(LtBackend *be);
    /* (optional: NULL where streams are not a library's objects, as on the CPU)
     * The library's handle behind s (NULL = the default stream): a cudaStream_t on
     * CUDA, for code that enqueues work of its own in order with the ops (NCCL). */
    void *(*native_stream)(LtBackend *be, LtStream *s);

    /* ---- timing on the device (optional: NULL where every op runs on the calling
     * thread and the host's clock times it, as on the CPU) ----
     * timer_create: an event that takes a timestamp (freed by event_destroy);
     * timer_record: takes it when stream s reaches this point, also while the
     * stream is being captured (the graph then takes it at each launch);
     * timer_elapsed: the seconds from a to b: 1 when both were taken, 0 while
     * either is still pending, -1 when the device cannot tell. */
    LtEvent *(*timer_create)(LtBackend *be);
    void (*timer_record)(LtBackend *be, LtEvent *e, LtStream *s);
    int (*timer_elapsed)(LtBackend *be, LtEvent *a, LtEvent *b, double *seconds);

    /* ---- graphs (optional: NULL where the backend cannot capture) ----
     * Ops issued on the current stream between capture_begin and capture_end
     * are recorded, not run; graph_launch runs them again with the same
     * pointers and sizes (the host-side arguments are frozen at capture; host
     * memory read by upload_async is read again at each launch). No call that
     * waits for the device, and no allocation, may happen while capturing.
     * capture_end returns NULL with a reason in err if the capture failed. */
    void (*capture_begin)(LtBackend *be);
    LtGraph *(*capture_end)(LtBackend *be, char *err, size_t errlen);
    void (*graph_launch)(LtBackend *be, LtGraph *g);
    void (*graph_destroy)(LtBackend *be, LtGraph *g);

    /* ---- ops ---- */
    /* out(N,C) = wte[tokens[i]] + wpe[t], t = i % T = position within the sequence of
     * length T, or t = pos[i] when pos != NULL (device ids in [0, T): positions that
     * restart at each document, data.reset_position_ids) (overwritten, compute dtype).
     * Vocab-parallel use: tokens[i] < 0 (any negative value) means "this rank does not
     * own that vocabulary row": the wte term is zero for that token. Ids >= 0 must lie in
     * [0, rows of wte). wpe == NULL means no position term (out = wte row, or 0 for a
     * negative id). A tensor-parallel model passes local ids (token - vocab_start, or -1
     * outside this rank's range) and wpe on one TP rank only, then all-reduces out. */
    void (*embedding_fwd)(LtBackend *be, void *out, const int32_t *tokens, const void *wte,
                          const void *wpe, const int32_t *pos, int B, int T, int C);
    /* dwte[tokens[i]] += dout[i] for every i with tokens[i] >= 0 (negative ids: rows
     * owned by another rank, no gradient); dwpe[t] += sum over the batch of dout[b,t],
     * or with pos != NULL the sum of dout[i] over the tokens i with pos[i] == t.
     * dwte == NULL or dwpe == NULL skips that gradient. Both fp32, accumulated.
     * Deterministic: each element is summed in increasing token index order. */
    void (*embedding_bwd)(LtBackend *be, float *dwte, float *dwpe, const void *dout,
                          const int32_t *tokens, const int32_t *pos, int B, int T, int C);
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
    /* out = a + b elementwise over n act tensors (compute dtype: the sum is taken in
     * fp32 and stored rounded like every act store, exactly as layernorm_fwd's
     * resid_out = a + b). out may be a or b. */
    void (*add_act)(LtBackend *be, void *out, const void *a, const void *b, size_t n);
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
    /* Residual add fused with RMSNorm: if b != NULL: resid_out = a + b (stored in the act
     * dtype, exactly as layernorm_fwd / add_act round it) and x = resid_out; else x = a.
     * out = x * rstd * w, rstd = 1 / sqrt(mean over C of x^2 + eps) (fp32, statistics
     * accumulated in at least fp32, saved for backward: rstd (N)). No bias. */
    void (*rmsnorm_fwd)(LtBackend *be, void *resid_out, void *out, float *rstd, const void *a,
                        const void *b, const void *w, float eps, int N, int C);
    /* dinp += dRMSNorm/dx (accumulates, like layernorm_bwd: it is the residual stream's
     * gradient); dw += sum over rows of dout * x * rstd (fp32). inp is the x the forward
     * normalized. Deterministic. */
    void (*rmsnorm_bwd)(LtBackend *be, void *dinp, float *dw, const void *dout, const void *inp,
                        const void *w, const float *rstd, int N, int C);
    /* SwiGLU: gu (N, 2F), each row gate (F) | up (F); out (N, F) = silu(gate) * up,
     * silu(x) = x / (1 + exp(-x)); glu (NULL: SwiGLU) sets LtGlu's activation, offset
     * and clamp. Overwrites out. */
    void (*swiglu_fwd)(LtBackend *be, void *out, const void *gu, int N, int F,
                       const LtGlu *glu);
    /* dgu (N, 2F) overwritten: dgate = dout * up * silu'(gate), dup = dout * silu(gate)
     * (with glu: the derivatives of LtGlu's out). dgu may not alias gu. */
    void (*swiglu_bwd)(LtBackend *be, void *dgu, const void *gu, const void *dout, int N, int F,
                       const LtGlu *glu);
    /* Rotary position embedding in place on the query and key heads of qkv
     * (B, T, NH + 2*NKV, HD) as attention_fwd lays it out (q: NH heads, k: NKV heads; the
     * v heads are not touched). Token i of the batch has position t = i % T, or pos[i] when
     * pos != NULL (as embedding_fwd). cs (T, HD/2, 2)
     * fp32 holds cos, sin of the angle of position t and frequency pair j; pair j rotates
     * elements j and j + HD/2 of each head (the "rotate half" convention of Hugging Face's
     * Llama and Megatron's non-interleaved RoPE):
     *   x'[j] = x[j] cos - x[j + HD/2] sin,  x'[j + HD/2] = x[j + HD/2] cos + x[j] sin.
     * inverse != 0 rotates by the opposite angle (sin negated): applied to dq, dk of a
     * dqkv it is the backward of the forward rotation. HD even. Computed in fp32, stored
     * in the act dtype. */
    void (*rope)(LtBackend *be, void *qkv, const float *cs, const int32_t *pos, int B, int T,
                 int NH, int NKV, int HD, int inverse);
    /* ---- per-head query/key RMSNorm (optional: NULL where the backend lacks it;
     * lt_model_create refuses model.qk_layernorm then) ----
     * qk_norm_fwd, in place on the q and k heads of qkv (B*T = N tokens, layout as rope's:
     * (N, NH + 2*NKV, HD)): each head row x (HD) becomes x * rstd * w, w = wq (HD) for the
     * NH query heads and wk (HD) for the NKV key heads, rstd = 1 / sqrt(mean over HD of
     * x^2 + eps) (statistics in at least fp32); the v heads are not touched. Saves what the
     * backward needs: xin (N, NH + NKV, HD) act = the q and k heads as they came in, and
     * rstd (N, NH + NKV) fp32. */
    void (*qk_norm_fwd)(LtBackend *be, void *qkv, void *xin, float *rstd, const void *wq,
                        const void *wk, float eps, int N, int NH, int NKV, int HD);
    /* Its backward, in place on dqkv (qkv's layout): the q and k heads' gradients of the
     * normalized rows become those of the rows that came in (overwritten; v heads not
     * touched); dwq (HD) += the sum over tokens and query heads of dout * xhat, dwk the
     * same over the key heads, xhat = xin * rstd (fp32, accumulated; either may be NULL).
     * Deterministic. */
    void (*qk_norm_bwd)(LtBackend *be, void *dqkv, float *dwq, float *dwk, const void *xin,
                        const void *wq, const void *wk, const float *rstd, int N, int NH,
                        int NKV, int HD);
    /* Causal self-attention, scale 1/sqrt(HD), with NKV key/value heads (grouped-query
     * attention; NH % NKV == 0, refused otherwise; NKV == NH: multi-head, NKV == 1:
     * multi-query). qkv (B, T, NH + 2*NKV, HD), per token q (NH, HD) | k (NKV, HD) |
     * v (NKV, HD); query head h attends with key/value head h / (NH / NKV).
     * -> out (B,T,NH,HD); lse (B,NH,T) = log-sum-exp of each row of scaled scores,
     * saved for backward. Never materializes a (T,T) matrix per head in memory beyond
     * one row/tile, nor a copy of K/V per query head.
     * Masks: kstart == NULL lets query t of a sequence see keys [0, t]; else kstart
     * (B*T device ids) gives each query's first visible key, 0 <= kstart[i] <= t, and
     * non-decreasing along a sequence, so query t sees keys [kstart[b*T + t], t]: its
     * document's first token (packed documents, data.reset_attention_mask), t - W
     * (a sliding window of W keys before the query, model.window_size), or the later
     * of the two. window >= 0 promises that kstart is exactly the sliding window,
     * kstart[b*T + t] = max(0, t - window) (no documents), so a backend may apply the
     * band from window alone (cuDNN does; the CPU backend checks the promise); -1
     * promises nothing. window >= 0 needs kstart.
     * Attention sinks (model.softmax_type): offsets (NH, act dtype) gives each query head h
     * one more logit o_h in its softmax, with no value: p_ij = exp(s_ij) / (exp(o_h) +
     * sum over visible j of exp(s_ij)), out_i = sum_j p_ij v_j, and lse includes it
     * (lse_i = log(exp(o_h) + sum_j exp(s_ij))). NULL: plain softmax. */
    void (*attention_fwd)(LtBackend *be, void *out, float *lse, const void *qkv,
                          const void *offsets, const int32_t *kstart, int window, int B, int T,
                          int NH, int NKV, int HD);
    /* dqkv (qkv's layout) overwritten, from dout (B,T,NH,HD) and the forward's qkv, out,
     * lse, offsets, with the forward's kstart and window. dK/dV of a key/value head is the
     * sum over its NH/NKV query heads, taken in a fixed order (deterministic on every
     * backend that says so, no atomics). doffsets (NH, fp32, accumulated; NULL: skipped,
     * and then offsets is not read) += d loss / d o_h = -sum over the batch and query rows
     * i of exp(o_h - lse_i) * D_i, D_i = dout_i . out_i, summed in a fixed order
     * (deterministic, whatever the thread count). */
    void (*attention_bwd)(LtBackend *be, void *dqkv, float *doffsets, const void *dout,
                          const void *qkv, const void *out, const float *lse, const void *offsets,
                          const int32_t *kstart, int window, int B, int T, int NH, int NKV,
                          int HD);
    /* Optional (NULL: the backend has no use for it). Declares what the device array
     * kstart (B*T ids, as uploaded for the attention calls that follow) holds: packed
     * documents, doc (B*T host ids) giving each token's document's first token as
     * lt_doc_layout makes it, within a sliding window of `window` keys before the query
     * when window >= 0: kstart[b*T + t] = max(doc[b*T + t], t - window) (-1: doc alone).
     * A backend may then run those calls as a batch of per-document sequences (the CUDA
     * backend's cuDNN path: a ragged batch); calls stay correct without a declaration.
     * It holds until kstart is declared again or freed: declare each time its content
     * changes. doc is read during the call only. */
    void (*attention_documents)(LtBackend *be, const int32_t *kstart, const int32_t *doc,
                                int window, int B, int T);
    /* Fused softmax + cross-entropy over rows of logits (N, Vp), only the first V
     * columns are real (padded columns get no probability). losses[i] (fp32) =
     * logsumexp(logits[i,:V]) - logits[i, targets[i]]. If dscale != 0 the logits
     * are overwritten in place with dscale * (softmax - onehot) (zeros in padded
     * columns): no second copy of the logits exists. */
    void (*xent_fwd_bwd)(LtBackend *be, float *losses, void *logits, const int32_t *targets,
                         int N, int V, int Vp, float dscale);
    /* Vocab-parallel cross-entropy (Megatron style), in two ops with all-reduces over
     * the tensor-parallel ranks in between. Each rank holds a shard logits (N, Vp) of
     * the columns [vocab_start, vocab_start + Vp) of the full logits (Vp here is the
     * shard's row stride); only its first Vvalid columns are real vocabulary
     * (0 <= Vvalid <= Vp; Vvalid == 0 for a shard wholly in the padding; the columns
     * [Vvalid, Vp) are never read). targets are LOCAL column ids (global target -
     * vocab_start): an id outside [0, Vvalid) (negative or >= Vvalid) means another rank
     * owns the target; it is not an error. The caller is responsible for the global
     * targets lying in [0, V). All statistics are fp32, one per row, device pointers.
     * Sequence per step:
     *   xent_tp_stats(global_max = NULL)  -> row_max         ; all-reduce MAX  -> gmax
     *   xent_tp_stats(global_max = gmax)  -> sumexp, target  ; all-reduce SUM  -> gsum, gtgt
     *   xent_tp_finish(gmax, gsum, gtgt)  -> losses, gradient shard in place
     * With one rank (vocab_start 0, Vvalid = V, all-reduces = identity) this equals
     * xent_fwd_bwd(V, Vp) up to fp32 rounding of the sum of exponentials.
     *
     * xent_tp_stats, pass 1 (global_max == NULL): row_max[i] = max over j < Vvalid of
     *   logits[i,j] (-INFINITY when Vvalid == 0). row_sumexp, row_target and targets
     *   are not accessed (may be NULL).
     * xent_tp_stats, pass 2 (global_max != NULL): row_sumexp[i] = sum over j < Vvalid
     *   of exp(logits[i,j] - global_max[i]) (0 when Vvalid == 0); row_target[i] =
     *   logits[i, targets[i]] when 0 <= targets[i] < Vvalid, else 0. row_max is not
     *   accessed (may be NULL). global_max[i] must be >= this shard's row max (it is
     *   the max over all shards). Logits are never modified. Deterministic. */
    void (*xent_tp_stats)(LtBackend *be, float *row_max, float *row_sumexp, float *row_target,
                          const void *logits, const int32_t *targets, const float *global_max,
                          int N, int Vvalid, int Vp);
    /* losses[i] = log(global_sumexp[i]) + global_max[i] - global_target[i] (fp32; the
     * same on every rank). If dscale != 0 the shard is overwritten in place with
     * dscale * (exp(logits[i,j] - global_max[i]) / global_sumexp[i] - [j == targets[i]])
     * for j < Vvalid, and 0 for j in [Vvalid, Vp); the -1 only lands on the rank where
     * 0 <= targets[i] < Vvalid. If dscale == 0, logits and targets are not accessed. */
    void (*xent_tp_finish)(LtBackend *be, float *losses, void *logits, const int32_t *targets,
                           const float *global_max, const float *global_sumexp,
                           const float *global_target, int N, int Vvalid, int Vp, float dscale);
    /* One AdamW step over a flat range: g = grad*grad_scale; m,v updated;
     * master -= lr*(mhat/(sqrt(vhat)+eps) + weight_decay*master); param = master
     * in compute dtype. */
    void (*adamw)(LtBackend *be, void *param, float *master, const float *grad, float *m,
                  float *v, size_t n, const LtAdamArgs *a);
    /* acc[0] += the sum of x[i] (squares == 0) or of x[i]^2 (squares == 1) over an fp32
     * buffer, accumulated in double; acc is one double of device memory. The host does
     * not wait. Deterministic. */
    void (*sum_f64)(LtBackend *be, double *acc, const float *x, size_t n, int squares);
    /* coef[0] = min(1, clip / (sqrt(sumsq[0]) + 1e-6)) when clip > 0, else 1; and -1
     * whenever sumsq[0] is not finite: the mark of a step to skip (adamw given it as
     * grad_scale_dev leaves every weight and moment as it was). Device scalars: the
     * gradient-clipping coefficient without a host round trip. */
    void (*clip_coef)(LtBackend *be, float *coef, const double *sumsq, float clip);
    /* acc[0] += 0 when x[0] is finite, else NaN (one double each, device memory):
     * folds a non-finite loss into the gradient sum of squares, so that the step is
     * skipped on every rank the sum is reduced over. */
    void (*flag_nonfinite)(LtBackend *be, double *acc, const double *x);
    /* Vocab-parallel ownership in place: ids[i] -= start when start <= ids[i] <
     * start + count, else ids[i] = -1 (see embedding_fwd). */
    void (*localize_ids)(LtBackend *be, int32_t *ids, size_t n, int start, int count);
    /* x *= s over an fp32 buffer. */
    void (*scale_f32)(LtBackend *be, float *x, float s, size_t n);
    /* dst[i] += src[i] over fp32 buffers (no overlap unless dst == src). */
    void (*add_f32)(LtBackend *be, float *dst, const float *src, size_t n);

    /* ---- mixture of experts (optional: NULL where the backend has no MoE kernels;
     * lt_model_create refuses an MoE model then). N tokens, E experts, K experts per
     * token, C hidden. Scores, routing weights and router gradients are fp32. Every op is
     * deterministic: sums run in a fixed order (k ascending, token ascending). ---- */
    /* Router logits (N, E) = x (N, C) . w (E, C)^T + bias (E) (act dtype; NULL = none),
     * products summed in fp32 from the act inputs, the bias added to that fp32 sum
     * (overwritten). */
    void (*moe_router_fwd)(LtBackend *be, float *logits, const void *x, const void *w,
                           const void *bias, int N, int C, int E);
    /* dx (N, C) += dlogits . w (the sum in fp32, then added to dx and stored in the act
     * dtype); dw (E, C) += dlogits^T . x (fp32); dbias (E) += the column sums of dlogits
     * (fp32, tokens in ascending order). dx, dw or dbias may be NULL (skipped). */
    void (*moe_router_bwd)(LtBackend *be, void *dx, float *dw, float *dbias,
                           const float *dlogits, const void *x, const void *w, int N, int C,
                           int E);
    /* Top-k routing (Megatron-Core's topk_routing_with_score_function), per token:
     *   LT_MOE_SOFTMAX, pre_softmax 0: idx = the K largest logits, w = softmax over those K;
     *   LT_MOE_SOFTMAX, pre_softmax 1: p = softmax over all E, idx = the K largest p, w = p[idx];
     *   LT_MOE_SIGMOID: s = sigmoid(logits), idx = the K largest s + bias (bias (E) fp32,
     *     NULL = 0; it only selects), w = s[idx], divided by (sum of the K + 1e-20) when K > 1.
     * then w *= scale. idx (N, K) int32 in descending order of the selecting score, ties
     * to the lower expert index (so every layout routes alike); w (N, K) fp32. Both
     * overwritten. Group-limited routing (Megatron-Core's group_limited_topk; groups > 0,
     * 1 <= group_topk <= groups <= LT_MOE_MAX_GROUPS, groups | E, group_topk <= K <=
     * group_topk E / groups): the experts form `groups` groups of E / groups consecutive
     * ones; a group's score is the sum of its K / group_topk largest selecting scores
     * (summed in descending order); the token picks its K experts only among its
     * group_topk best groups (ties to the lower group, NaN last). groups 0: no groups. */
    void (*moe_topk)(LtBackend *be, int32_t *idx, float *w, const float *logits,
                     const float *bias, int N, int E, int K, int score, int pre_softmax,
                     float scale, int groups, int group_topk);
    /* Backward of moe_topk with the selection idx held fixed: dlogits (N, E) overwritten
     * with the gradient of sum over (i, k) of dw[i,k] * w[i,k] (zero for experts outside
     * the token's softmax: pre_softmax 0 touches only the K selected logits). */
    void (*moe_topk_bwd)(LtBackend *be, float *dlogits, const float *dw, const int32_t *idx,
                         const float *logits, int N, int E, int K, int score, int pre_softmax,
                         float scale);
    /* Load-balancing statistics (Megatron-Core's compute_routing_scores_for_aux_loss):
     * each token's aux scores a = softmax(logits) (LT_MOE_SOFTMAX) or sigmoid(logits)
     * divided by their sum + 1e-20 (LT_MOE_SIGMOID), and its aux top-k = the K largest a
     * (ties: lower index). Token i (0 <= i < N) is token row0 + i of the micro batch and
     * belongs to group g = (row0 + i) / group_len (one group: aux_loss; a sequence:
     * seq_aux_loss). counts (groups, E) += 1 for each expert in the token's aux top-k;
     * psum (groups, E) += a; zsum[0] += logsumexp(logits)^2 (double). Any output may be
     * NULL (skipped). Accumulates: the caller zeroes. */
    void (*moe_aux_stats)(LtBackend *be, float *counts, float *psum, double *zsum,
                          const float *logits, int N, int E, int K, int score, long row0,
                          long group_len);
    /* dlogits (N, E) += the gradient of aux_coef * sum over groups g and experts e of
     * psum[g,e] * counts[g,e] (counts are given, held constant; psum as moe_aux_stats sums
     * it over these N tokens, grouped by row0 and group_len) plus z_coef * sum over the
     * tokens of logsumexp(logits)^2. A zero coefficient skips its term. */
    void (*moe_aux_bwd)(LtBackend *be, float *dlogits, const float *logits, const float *counts,
                        int N, int E, int K, int score, long row0, long group_len,
                        float aux_coef, float z_coef);
    /* The expert-major order of the N*K assignments (token i to expert idx[i,k]):
     * expert e's rows are offsets[e] .. offsets[e+1] - 1 of the permuted buffer, its kept
     * assignments in increasing token order. capacity <= 0: dropless, all kept. capacity > 0:
     * an expert keeps at most `capacity` assignments: with drop_policy LT_MOE_DROP_PROBS
     * those with the largest w (ties: lower token), LT_MOE_DROP_POSITION the lowest token
     * indices; pad != 0 (with capacity > 0): every expert gets exactly `capacity` rows, the
     * ones no assignment fills being padding. Outputs (overwritten): pos (N, K): the row of
     * assignment (i, k), -1 when dropped; src (M): the token of each row, -1 for padding,
     * M = offsets[E] <= max(N*K, E*capacity); offsets (E + 1) int32; dropped[0] = the
     * number of dropped assignments. */
    void (*moe_dispatch)(LtBackend *be, int32_t *pos, int32_t *src, int32_t *offsets,
                         int32_t *dropped, const int32_t *idx, const float *w, int N, int E,
                         int K, int capacity, int drop_policy, int pad);
    /* out (M, C): row r = x row src[r], zero where src[r] < 0 (overwritten). */
    void (*moe_permute)(LtBackend *be, void *out, const void *x, const int32_t *src, int M,
                        int C);
    /* dx (N, C) += the sum over k (ascending, pos[i,k] >= 0) of dxp row pos[i,k]: the sum in
     * fp32, added to dx, stored in the act dtype. */
    void (*moe_permute_bwd)(LtBackend *be, void *dx, const void *dxp, const int32_t *pos, int N,
                            int K, int C);
    /* out (N, C) = sum over k (ascending, pos[i,k] >= 0) of w[i,k] * y row pos[i,k], in fp32,
     * stored in the act dtype (overwritten; zero for a token with every assignment
     * dropped). */
    void (*moe_unpermute)(LtBackend *be, void *out, const void *y, const int32_t *pos,
                          const float *w, int N, int K, int C);
    /* Its backward: dy (M, C) overwritten, row pos[i,k] = w[i,k] * dout row i, the other
     * rows (padding) zero; dw (N, K) overwritten, dw[i,k] = dot(dout row i, y row pos[i,k])
     * in fp32, 0 when dropped. */
    void (*moe_unpermute_bwd)(LtBackend *be, void *dy, float *dw, const void *dout,
                              const void *y, const int32_t *pos, const float *w, int N, int K,
                              int C, int M);
    /* The shared expert's gate (model.moe_shared_expert_gate), per row i of R: s[i] (fp32,
     * in: the gate's logit) becomes sigmoid(s[i]), then out[i, :] += s[i] * y[i, :] (in
     * fp32, stored in the act dtype). */
    void (*moe_gate_fwd)(LtBackend *be, void *out, const void *y, float *s, int R, int C);
    /* Its backward, in place: with g = dot(dout row i, y row i) (fp32; the same sum for
     * any thread count), y[i, :] becomes s[i] * dout[i, :] (the act dtype) and s[i]
     * becomes g * s[i] * (1 - s[i]), the logit's gradient. */
    void (*moe_gate_bwd)(LtBackend *be, void *y, float *s, const void *dout, int R, int C);
    /* Grouped linear (the experts' GEMMs, one call for all of a rank's experts): G groups,
     * group g the rows off[g] .. off[g+1] - 1 of inp, out and pre_gelu (off: G + 1
     * non-decreasing host ints, off[0] may be > 0), each with its own weight w[g] (OC, C)
     * and bias bias[g] (OC). w and bias are host arrays of G device pointers; bias == NULL
     * or an element NULL: no bias. Each group is exactly linear_fwd over its rows (the same
     * results as that call per group: bitwise on the CPU, which makes that call; rows of
     * other groups untouched); an empty group does nothing. */
    void (*linear_group_fwd)(LtBackend *be, void *out, void *pre_gelu, const void *inp,
                             const void *const *w, const void *const *bias, const int *off,
                             int G, int C, int OC);
    /* Its backward: each group exactly linear_bwd over its rows of dinp, dout, inp and
     * gelu_pre, with w[g], dw[g] (OC, C) += and dbias[g] (OC) += (fp32). dw or dbias NULL,
     * or an element NULL, skips that gradient; dinp NULL skips dinp. */
    void (*linear_group_bwd)(LtBackend *be, void *dinp, float *const *dw, float *const *dbias,
                             const void *dout, const void *inp, const void *const *w,
                             const void *gelu_pre, const int *off, int G, int C, int OC);
} LtBackendOps;

struct LtBackend {
    const LtBackendOps *ops;
    LtDtype dtype;       /* compute dtype of act tensors */
    size_t act_size;     /* bytes per act element on this backend */
    const char *device_name;
    int device_id;       /* -1 for CPU */
    void *impl;
    /* Calls so far that made the host wait for the device: synchronize, upload and
     * download (the blocking copies). The trainer reports it per step. */
    unsigned long host_waits;
    /* model.moe_grouped_gemm=false: the experts' GEMMs one call per expert, not
     * grouped (CUDA; the CPU backend's are per expert anyway) */
    int moe_gemm_per_expert;
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
/* For --version (CUDA builds only): the compiled GPU targets ("SASS sm_80
 * sm_90, PTX compute_90"), the versions and files of the CUDA libraries the
 * loader took (cudart, cuBLASLt, cuDNN, NCCL) and the driver's CUDA version
 * or "none"; needs no GPU. Without CUDA the three strings are empty. */
void lt_cuda_version_info(char *targets, size_t tlen, char *libs, size_t llen, char *driver,
                          size_t dlen);
/* The 16-byte UUID of visible device `device` (the same GPU gives the same
 * UUID in every process, whatever CUDA_VISIBLE_DEVICES numbers it). 0, or -1
 * when there is no such device or no CUDA. */
int lt_cuda_device_uuid(int device, unsigned char uuid[16]);

static inline void lt_backend_destroy(LtBackend *be) {
    if (be) be->ops->destroy(be);
}

#ifdef __cplusplus
}
#endif

#endif
