/* model.h - the GPT model on one backend: flat parameter and gradient
 * buffers, activations for one micro batch, forward/backward and loss.
 *
 * Pre-LayerNorm GPT-2/GPT-3 blocks; learned position embeddings; tied input
 * embedding and LM head; loss = cross-entropy in chunks of tokens so the full
 * (tokens x vocab) logits never exist. All device memory is allocated by
 * lt_model_create; nothing is allocated in forward/backward. */
#ifndef LT_MODEL_H
#define LT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-layer activations kept for backward (device pointers). */
typedef struct {
    void *ln1, *qkv, *atty, *r2, *ln2, *fch_pre, *fch; /* fch*: the MLP's, or the shared
                                                        * expert's in an MoE layer */
    float *mean1, *rstd1, *mean2, *rstd2, *lse;
    void *qk_in;           /* model.qk_layernorm: the q and k heads before their norm
                            * (N, NH + NKV, HD) and its statistics qk_rstd (N, NH + NKV),
                            * this rank's heads; NULL without it */
    float *qk_rstd;
    struct LtMoeActs *moe; /* the routed experts' (src/model/moe.h) when the model holds MoE
                            * layers, else NULL */
} LtLayerActs;

/* The activations of one chunk for one micro batch, alive from its forward
 * to its backward (a pipeline keeps several in flight). */
typedef struct {
    void **x;          /* max_chunk_layers (at least one) inputs of the layers (R, C); x[0]
                        * is the chunk input: the embedding output, or the activation
                        * received */
    LtLayerActs *layer; /* max_chunk_layers (shared sets under recomputation, see below) */
    void *dout;        /* (R, C) gradient of the chunk output: received from the next
                        * stage, or left by the loss head's forward on the last stage */
    int32_t *tokens;   /* (N) token ids of the micro batch (first stage: embedding bwd) */
    int32_t *pos;      /* (N) positions restarting at each document, or NULL (see
                        * lt_model_set_documents) */
    int32_t *kstart;   /* (N) each token's document start (attention's kstart), or NULL */
    int32_t *kwin;     /* (N) sliding-window layers' kstart: the later of the document start
                        * and t - window; NULL when no held layer is windowed */
    void **gate_y;     /* model.moe_shared_expert_gate: per slot layer the shared expert's
                        * output before its gate (R, C) and the gate (gate_s, R, fp32),
                        * which the backward turns into their gradients in place; NULL
                        * without the gate. Kept whatever the recomputation: the layer's
                        * recomputed forward stops before the MLP's output projection */
    float **gate_s;
} LtActSlot;

typedef struct {
    size_t params, grads, activations, workspace; /* bytes on the device */
} LtModelMemory;

/* Called during backward when the gradients of parameters first..last (table
 * indices, a contiguous flat range) for this micro batch are complete in the
 * gradient bucket (see LtModelOptions.grad_buckets). The callee consumes them
 * and must leave the bucket zeroed. */
typedef void (*LtGradReadyFn)(void *ctx, int first, int last);
/* Called before a forward reads parameters first..last (one group, see
 * lt_model_param_group): the callee makes sure they hold their current values
 * (a parameter gather still in flight is waited for). */
typedef void (*LtParamNeedFn)(void *ctx, int first, int last);

typedef struct {
    size_t flat;      /* elements of the flat parameter buffer: >= table.total (padding
                       * so data-parallel shards are equal); 0 = table.total */
    int grad_buckets; /* 0: one gradient buffer for all parameters (flat elements);
                       * 1: one reusable bucket, the size of the largest parameter group
                       * (embeddings, one layer, final LayerNorm), handed to a
                       * LtGradReadyFn group by group (ZeRO-2). With pipeline
                       * parallelism the embedding group (wte, wpe) keeps a buffer of its
                       * own instead (emb_grads): the tied embedding's two halves are
                       * summed over the embedding group after the last micro batch */
    const LtComm *tp; /* tensor-parallel group (NULL = no tensor parallelism) */
    const LtComm *ep; /* expert-parallel group of the MoE layers (NULL or one rank: EP 1;
                       * src/model/moe.h). With more than one rank the model holds only
                       * its own experts (LtModel.etable) */
    const LtComm *etp; /* expert-tensor-parallel group (NULL or one rank: ETP 1). With
                        * more than one rank the model holds slices of its experts
                        * (LtModel.etable; lt_params_build_split) */
    size_t eflat;     /* elements of the expert buffers (>= etable.total, padding so the
                       * expert-data-parallel shards are equal); 0 = etable.total */
    int sequence_parallel; /* shard LayerNorm regions along the tokens over tp */
    int tp_comm_overlap;   /* with sequence_parallel: the all-gathers / reduce-scatters
                            * in row blocks behind the GEMMs (tp_overlap.h) */
    int recompute;         /* LT_MODEL_RECOMPUTE_* */
    LtStagePlace place;    /* pipeline part held; {0} = the whole model */
    int slots;             /* activation slots (micro batches x chunks in flight); 0 = 1 */
    int lm_head_chunk;     /* tokens per LM head chunk; 0 = auto: the whole micro batch
                            * when its logits fit in LT_LM_HEAD_AUTO_BYTES, else equal
                            * chunks that do (but never under LT_LM_HEAD_MIN_ROWS tokens, so
                            * the weight-gradient GEMM's inner dimension stays long) */
} LtModelOptions;

#define LT_LM_HEAD_AUTO_BYTES ((size_t)1 << 30)
#define LT_LM_HEAD_MIN_ROWS 4096

/* Tokens per LM head chunk for N tokens per micro batch, Vl vocabulary rows on
 * this rank and act_bytes bytes per logit: `requested` when > 0 (capped at N),
 * else the auto rule of LtModelOptions.lm_head_chunk. */
int lt_model_lm_head_chunk(size_t N, size_t Vl, size_t act_bytes, int requested);

/* Activation recomputation (train.recompute): none keeps every layer's
 * activations; selective recomputes the attention core (its output) from the
 * kept qkv in backward; full keeps only each layer's input and recomputes the
 * layer in backward. */
enum { LT_MODEL_RECOMPUTE_NONE = 0, LT_MODEL_RECOMPUTE_SELECTIVE = 1, LT_MODEL_RECOMPUTE_FULL = 2 };

typedef struct {
    LtBackend *be;
    LtParamTable table;   /* this rank's part (its chunks, tp shards) */
    LtModelDims d;
    int B, T;             /* micro batch size and sequence length of the buffers */
    int xent_chunk;       /* tokens per LM head / cross-entropy chunk */
    const LtComm *tp;     /* tensor-parallel group, NULL when tp == 1 */
    int sp;               /* sequence parallelism on */
    int recompute;        /* LT_MODEL_RECOMPUTE_* */
    int vocab_local;      /* this rank's vocab rows */
    int pp, pp_rank, vpp; /* pipeline place (1, 0, 1 without pipelining) */
    int max_chunk_layers; /* layers of the largest chunk held (slots are sized for it) */
    size_t boundary;      /* elements of a stage boundary tensor: R * C */

    /* Expert parallelism (LtModelOptions.ep of more than one rank): the routed experts this
     * rank computes are not in `table` but in a table, parameter and gradient buffer of
     * their own (lt_params_build_split: eflat elements each, offsets from 0, gradients
     * accumulated through the step and never handed to the gradient hook), which an
     * optimizer over the expert-data-parallel group reduces and updates (optim.h,
     * lt_optim_attach_experts). etable.n == 0 otherwise: every expert is in `table`. */
    LtParamTable etable;
    size_t eflat;
    void *eparams;        /* act dtype */
    float *egrads;        /* fp32 */

    size_t flat;          /* elements of params (and of grads without buckets) */
    void *params;         /* act dtype, flat elements (table order, zero padding) */
    float *grads;         /* fp32 gradient accumulation: flat elements, or the bucket */
    LtGradReadyFn grads_ready;
    void *grads_ready_ctx;
    int final_pass;       /* the passes running now are their chunk's last micro batch of
                           * the step (lt_model_set_final_pass): gradients handed to the
                           * hook are then final */

    /* activations: nslots slots, each holding one chunk of one micro batch */
    int nslots;
    LtActSlot *slot;
    LtModelMemory mem;
    struct LtModelInternal *in; /* the rest of the state: private to src/model/
                                 * (model_internal.h) */
} LtModel;

/* Allocate parameters, gradients and activations for micro batch B x T.
 * opt may be NULL (defaults). */
LtModel *lt_model_create(LtBackend *be, const LtModelDims *d, int B, int T,
                         const LtModelOptions *opt);

/* Install the bucket consumer (required when grad_buckets is set). */
void lt_model_set_grad_hook(LtModel *m, LtGradReadyFn fn, void *ctx);
/* Install the hook called before forward reads a parameter group (NULL: none). */
void lt_model_set_param_hook(LtModel *m, LtParamNeedFn fn, void *ctx);
/* The pipeline says whether the forward/backward passes that follow are their
 * chunk's last micro batch of the step (their gradients then become final as
 * the gradient hook sees them); 0 outside training. */
void lt_model_set_final_pass(LtModel *m, int on);
/* The first table index of parameter i's group, the unit the gradient hook
 * hands over: the embeddings (wte, wpe), one layer, the final LayerNorm (with
 * an untied LM head). Groups are contiguous in the table. */
int lt_model_param_group(const LtModel *m, int i);
/* 1 when the model hands its gradients over group by group (grad_buckets). */
int lt_model_grad_buckets(const LtModel *m);
/* The largest bucket the model hands over (elements): the shared bucket or the
 * embedding group's own buffer. */
size_t lt_model_bucket_len(const LtModel *m);
/* The pieces it is reduced in (elements): the largest layer's gradient, so a
 * layer goes whole and the embeddings or the LM head (larger) in several;
 * the largest bucket when this stage holds no layer. */
size_t lt_model_bucket_piece(const LtModel *m);
/* Where parameter i's gradient accumulates (fp32, its numel elements). */
float *lt_model_grad(const LtModel *m, int i);
/* The embedding group's own gradient buffer (buckets with pipelining and a
 * tied LM head) and its length; NULL when there is none. */
float *lt_model_emb_grads(const LtModel *m, size_t *len);
void lt_model_destroy(LtModel *m);

/* Set the compute-dtype parameters from fp32 host values (table order). */
void lt_model_set_params(LtModel *m, const float *host);
/* The same for the expert buffer (etable order; nothing when etable is empty). */
void lt_model_set_expert_params(LtModel *m, const float *host);

/* 1 when local chunk c is the first stage (embeddings) / the last (loss). */
int lt_model_chunk_first(const LtModel *m, int c);
int lt_model_chunk_last(const LtModel *m, int c);

/* Forward of local chunk c for one micro batch in activation slot s. The
 * first stage embeds tokens (B*T host ids); other stages start from the
 * activation received into slot[s].x[0]. The last stage computes the loss
 * (when targets is not NULL) and, if grad_scale != 0, its gradient (of
 * grad_scale * sum of token losses) through the LM head and the final
 * LayerNorm into slot[s].dout, accumulating their weight gradients; other
 * stages write their output activation to out (boundary elements). The sum
 * of token losses is ADDED to the device accumulator loss_acc: the host does
 * not wait. tokens and targets are uploaded asynchronously: host memory from
 * the backend's host_alloc must stay unchanged until the device has passed
 * this micro batch (the trainer rewrites it only after the step's wait). */
void lt_model_chunk_forward(LtModel *m, int c, int s, const int32_t *tokens,
                            const int32_t *targets, float grad_scale, void *out);
/* From now on the predictions made from an input token equal to eod (>= 0),
 * i.e. the targets that begin the next document, get no loss and no gradient
 * (data.eod_mask_loss; Megatron's loss_mask[tokens == eod] = 0); -1 = every
 * target counts. The callers' grad_scale and loss means then count only the
 * other positions (lt_count_unmasked over the input tokens). */
void lt_model_set_eod_mask(LtModel *m, int32_t eod);
/* Documents of a packed sample end at the token eod (Megatron's
 * reset_position_ids / reset_attention_mask): from now on, with reset_pos the
 * positions (learned embedding or RoPE) restart at 0 after each eod, with
 * reset_attn no token attends to a token of an earlier document. The eod
 * itself belongs to the document it ends. Allocates the per-slot arrays. */
void lt_model_set_documents(LtModel *m, int32_t eod, int reset_pos, int reset_attn);
/* Positions and document starts of B sequences of T tokens (either output may
 * be NULL): a token following eod starts a document; pos[i] = its distance
 * from its document's first token, kstart[i] = that token's index within the
 * sequence. eod < 0: one document per sequence. */
void lt_doc_layout(const int32_t *tokens, int B, int T, int32_t eod, int32_t *pos,
                   int32_t *kstart);
/* (LtMoeStats, what an MoE layer's forwards add up: params.h) */
/* MoE layers this rank holds (its stats' length). */
int lt_model_moe_layers(const LtModel *m);
/* Copy each held MoE layer's stats into out (lt_model_moe_layers entries, in
 * layer order) and zero them. Recomputation's forwards are not counted. */
void lt_model_moe_take(LtModel *m, LtMoeStats *out);
/* Aux-loss-free balancing (DeepSeek-V3's expert bias): each held MoE layer's
 * kept assignments per expert over the training forwards since the last call
 * (recomputation not counted; counted only when the model has an expert
 * bias), out[k * E + e] for the k-th held MoE layer; zeroes them. */
void lt_model_moe_tokens_take(LtModel *m, double *out);
/* Table index of the k-th held MoE layer's expert bias (-1 without one). */
int lt_model_moe_bias_index(const LtModel *m, int k);
/* The share of the step's objective each micro batch's MoE load-balancing and
 * z losses get (Megatron-Core's 1 / (micro batches x data-parallel ranks) of
 * the global batch); 1 until set. No effect on dense models. */
void lt_model_set_moe_aux_weight(LtModel *m, float w);
/* The next forwards add their sum of token losses times w to the loss
 * accumulator (1 = the plain sum; the pipeline sets it per micro batch). */
void lt_model_set_loss_weight(LtModel *m, float w);
/* Positions of the input tokens tok[n] that carry a loss: those that are
 * not eod (all n when eod < 0). */
static inline long lt_count_unmasked(const int32_t *tok, size_t n, int32_t eod) {
    long k = (long)n;
    if (eod >= 0)
        for (size_t i = 0; i < n; i++) k -= tok[i] == eod;
    return k;
}
/* Sum of token losses accumulated since the last take (0 on stages without
 * the loss head); zeroes the accumulator. Waits for the device. */
double lt_model_loss_take(LtModel *m);
/* Zero the loss accumulator (no wait). */
void lt_model_loss_reset(LtModel *m);
/* Accumulate losses into dev (one double of device memory) instead of the
 * model's own accumulator (NULL: back to it), so a caller can read them with
 * its other step results in one copy. */
void lt_model_set_loss_acc(LtModel *m, double *dev);
/* Backward of local chunk c from the output gradient in slot[s].dout,
 * accumulating weight gradients; writes the gradient of the chunk's input to
 * din (boundary elements; not used on the first stage). */
void lt_model_chunk_backward(LtModel *m, int c, int s, void *din);

/* Without pipelining (one chunk): forward on tokens (B*T host ints; b, t
 * row-major) and, when targets is not NULL, the loss. If grad_scale != 0 the
 * backward pass runs too and gradients of grad_scale * sum(token losses) are
 * ACCUMULATED into m->grads. Returns the sum of per-token losses (0 when
 * targets is NULL). */
double lt_model_step(LtModel *m, const int32_t *tokens, const int32_t *targets, float grad_scale);

/* Sum over the TP group the gradients among parameters first..last that each
 * TP rank holds whole but computed from its part only: under sequence
 * parallelism the norms' (their tokens were split), with TP the per-head q/k
 * norms' (their heads were split); call once per accumulated gradient (after
 * the last micro batch, or per bucket). */
void lt_model_sp_reduce_grads(LtModel *m, int first, int last);

/* Zero the gradient buffer (or bucket, and the embedding buffer; and the experts'). */
void lt_model_zero_grads(LtModel *m);

/* Forward only on one sequence tokens[0..len) (len <= T, other rows unused)
 * and write the fp32 logits (true vocab V) of position len-1 into out[V]. */
void lt_model_next_logits(LtModel *m, const int32_t *tokens, int len, float *out);

/* Dense-GPT training FLOPs per sample (forward + backward, no recompute),
 * Megatron's formula: 72*s*L*h^2*(1 + s/(6h) + V/(12*L*h)). causal != 0
 * counts only the unmasked half of attention scores: s/(6h) -> s/(12h).
 * MoE layers count the K experts a token goes to, the shared expert and the
 * router; sliding-window layers only their band's share of the attention
 * core (so MFU counts only the band). */
double lt_model_flops_per_sample(const LtModelDims *d, int causal);
/* The share of a causal layer's query-key pairs layer l computes: 1, or for
 * a sliding-window layer its band's (each query sees min(t + 1, W + 1) keys). */
double lt_model_window_fraction(const LtModelDims *d, int l);
/* FLOPs per sample the backward's recomputation adds, counted as
 * lt_model_flops_per_sample(d, 0) counts them: full != 0 each layer's forward
 * up to the MLP activation (lt_mdl_recompute_layer), else (selective) the
 * attention core. */
double lt_model_recompute_flops_per_sample(const LtModelDims *d, int full);

#ifdef __cplusplus
}
#endif

#endif
