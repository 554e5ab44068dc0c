/* model_internal.h - shared by the files of src/model/ that make up LtModel
 * (include/model.h is the public API; this header is not):
 *   model.c           creation and teardown: the layers' shapes, activation
 *                     slots, work buffers and their memory accounting
 *   model_grads.c     the parameter and gradient buffers: the gradient
 *                     groups and buckets, the hooks, parameters from the host
 *   model_forward.c   the forward of a chunk: embedding, layers, final norm;
 *                     recomputation's refill of a layer
 *   model_loss.c      the LM head's (vocab-parallel) loss and its sums
 *   model_backward.c  the backward of a chunk
 *   model_moe.c       the MoE layers' tensors, routing statistics and bias
 *   model_docs.c      packed documents: positions and first visible keys
 *   model_flops.c     the FLOP formulas (model and recomputation)
 * It holds LtModelInternal, the parameter roles of a layer and the small
 * helpers several of those files use; functions of one file that another
 * calls carry the prefix lt_mdl_.
 *
 * The model: GPT forward/backward over the backend op interface, chunk by
 * chunk (a chunk = the consecutive layers of one pipeline stage; without
 * pipelining the one chunk is the whole model).
 *
 * Layer j of a chunk (x = x[j], N = B*T tokens):
 *   ln1 = LN(x)                      [j = 0: LN(chunk input); j > 0: fused
 *                                     x[j] = r2[j-1] + mlp_out[j-1]]
 *   qkv = ln1 W_qkv^T + b            (N, 3C)
 *   atty = causal_attention(qkv)     (N, C), lse [model.softmax_type: with each
 *                                     head's sink logit, sinks_of]
 *   r2 = x + (atty W_proj^T + b); ln2 = LN(r2)   (fused)
 *   fch = gelu(ln2 W_fc^T + b)       (N, F), pre-activation kept
 *   mlp_out = fch W_fc2^T + b        (N, C) -> consumed by the next fused LN
 * Chunk output: r2 + mlp_out of its last layer - sent to the next stage, or
 * on the last stage fused into the final LayerNorm: xlast = r2 + mlp_out,
 * lnf = LN_f(xlast); logits = lnf wte^T in chunks of xent_chunk tokens, each
 * turned into its gradient in place and immediately pushed back into dlnf and
 * dwte (so (N x V) logits never exist), and dlnf through LN_f into the
 * slot's output gradient - all during the forward, so the last stage's
 * backward starts like every other stage's: from a gradient of its output.
 *
 * The Llama block (model.arch=llama) has the same dataflow with other ops:
 *   ln = RMSNorm (no bias, fused with the residual add the same way);
 *   qkv (N, (NH + 2 NKV) HD) with NKV key/value heads; with qk_layernorm each
 *   q and k head RMSNorm-ed in place (over HD, weights q_norm | k_norm; the
 *   heads as they came in kept for the backward), then RoPE applied in place
 *   to its q and k heads before attention (qkv keeps the rotated values, which
 *   is what attention's backward needs; the rotation's backward is the
 *   inverse rotation of dq, dk);
 *   fch_pre = ln2 W_gate_up^T (N, 2F: gate | up), fch = silu(gate) * up;
 *   no position table, and biases only where model.add_qkv_bias /
 *   add_bias_linear ask for them (each added as GPT's). The parameter roles
 *   below map both blocks onto one layer routine; a role a block lacks (a
 *   bias) is absent (NULL).
 * An untied LM head (lm_head, either block) replaces wte in the logits. */
#ifndef LT_MODEL_INTERNAL_H
#define LT_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "devclock.h"
#include "model/moe.h"
#include "tp_linear.h"

/* What LtModel (model.h) holds beyond what its callers read. */
struct LtModelInternal {
    int tp_size, tp_rank;
    int tp_overlap;       /* sp with its communication in blocks behind the GEMMs */
    unsigned char *sp_partial; /* per parameter: gradient partial over TP under SP */
    int heads_local;      /* this rank's heads */
    int *ffn_loc;         /* per local layer: its MLP's (or shared expert's) columns here */
    int ffn_max;          /* the largest of them (the MLP buffers' width) */
    unsigned char *moe;   /* per local layer: 1 = an MoE layer */
    int moe_any;          /* this rank holds an MoE layer */
    LtMoeWork moe_work;   /* the routed experts' backward workspace */
    LtExpertTensors *moe_exp; /* (experts) a layer's expert tensors, filled per use */
    float moe_aux_weight; /* lt_model_set_moe_aux_weight */
    const LtComm *ep;     /* the expert-parallel group (NULL: EP 1) */
    const LtComm *etp;    /* the expert-tensor-parallel group (NULL: ETP 1) */
    LtMoeStats *moe_stats; /* per local layer (MoE layers' entries used) */
    int recomputing;      /* forwards run by recomputation: not counted in moe_stats */
    int training_forward; /* the forwards running now are training's (a gradient follows) */
    double *moe_tokens;   /* (layers x experts) assignments kept per expert since the last
                           * lt_model_moe_tokens_take, training forwards only */
    int kv_local;         /* this rank's key/value heads (grouped-query attention) */
    int qkv_local;        /* columns of this rank's qkv: (heads_local + 2 kv_local) * head dim */
    int vocab_start, vocab_valid;            /* first owned vocab id; owned ids < true vocab */

    size_t grads_len;     /* elements of grads */
    float *emb_grads;     /* buckets with pipelining: the embedding group's own buffer */
    size_t emb_grads_len;
    size_t layer_group_len; /* buckets: the largest layer's gradient (0 without layers) */
    float **gptr;         /* per parameter: where its gradient accumulates */
    int buckets;          /* gradients handed over group by group (grad_buckets) */
    LtParamNeedFn params_needed;
    void *params_needed_ctx;
    float *stage_f32;     /* (Vp) fp32 staging for sampled logits */

    /* activations */
    LtLayerActs shared;   /* recomputation: the set (full) or attention output (selective)
                           * all layers share */
    void *lnf;            /* (N, C) */
    float *meanf, *rstdf;
    void *xlast;          /* (R, C): the last layer's output on the last stage */
    void *scratch_c;      /* (N, C): attention / MLP projection outputs (partial under TP) */
    void *scratch_sp;     /* (N/tp, C): their reduce-scattered rows (SP only) */
    void *dfull;          /* (N, C): all-gathered residual gradient (SP only) */
    /* backward workspace */
    void *dc, *d3c, *dff; /* (N,C), (N,qkv_local), (N,F) */
    void *dgu;            /* llama: (N, 2F) gradient of gate | up */
    float *rope_cs;       /* llama: (T, HD/2, 2) rotary cos, sin; NULL without RoPE */
    void *logits;         /* (xent_chunk, Vp): logits, then their gradient in place */
    float *losses;        /* (N) per-token losses */
    float *xstat;         /* (3, xent_chunk) vocab-parallel row max / sum of exp / target logit */
    int32_t *targets;     /* (N) device copy of the current micro batch's targets (local ids) */
    int32_t eod;          /* lt_model_set_eod_mask's id; -1: every target counts */
    int32_t doc_eod;      /* lt_model_set_documents: the id ending a document */
    int32_t *host_pos, *host_ks; /* (N) pageable staging of the slot's arrays */
    const int32_t *pos, *kstart; /* the running slot's arrays (NULL: none) */
    const int32_t *kwin;  /* the running slot's sliding-window starts (NULL: none) */
    int32_t *host_kw;     /* (N) pageable staging of them */
    unsigned char *swa;   /* per local layer: 1 = sliding-window attention */
    void *zero_sinks;     /* model.softmax_type=off-by-one: (heads_local) zero logits, every
                           * layer's softmax offsets; else NULL */
    float loss_weight;    /* lt_model_set_loss_weight (1: plain sums) */
    int *masked;          /* (N) rows of the current micro batch whose input token is eod */
    int nmasked;
    double *loss_acc;     /* device: token losses summed by forwards (see lt_model_loss_take);
                           * the model's own own_loss_acc, or the caller's */
    double *own_loss_acc;
    size_t slot_bytes;    /* activation bytes of one slot */
};

/* Parameter roles within a layer: GPT's table order (params.h). For Llama
 * P_FCW is mlp.gate_up.weight and P_FC2W mlp.down.weight. */
enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FC2W,
       P_FC2B, P_QNW, P_KNW, P_SINK, P_ROLES };
/* Position of each role in a GPT layer's slice of the table. */
static const int GPT_ROLES[P_ROLES] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -1, -1, -1};

/* Position of role k in a Llama layer's slice of the table (params.c's
 * order: ln_1, qkv (, its bias) (, q_norm, k_norm), proj (, bias), ln_2,
 * gate_up (, bias), down (, bias)), -1 when absent; P_SINK is placed by lidx. */
static inline int llama_role(const LtModelDims *d, int k) {
    const int qb = lt_dims_qkv_bias(d), lb = lt_dims_linear_bias(d), qk = d->qk_norm ? 2 : 0;
    const int proj = 2 + qb + qk, ln2 = proj + 1 + lb, fc = ln2 + 1, fc2 = fc + 1 + lb;
    switch (k) {
    case P_LN1W: return 0;
    case P_QKVW: return 1;
    case P_QKVB: return qb ? 2 : -1;
    case P_QNW: return qk ? 2 + qb : -1;
    case P_KNW: return qk ? 3 + qb : -1;
    case P_PROJW: return proj;
    case P_PROJB: return lb ? proj + 1 : -1;
    case P_LN2W: return ln2;
    case P_FCW: return fc;
    case P_FCB: return lb ? fc + 1 : -1;
    case P_FC2W: return fc2;
    case P_FC2B: return lb ? fc2 + 1 : -1;
    }
    return -1;
}

/* Device pointer of parameter i in the compute-dtype buffer / fp32 grads. */
static inline void *param(const LtModel *m, int i) {
    return (char *)m->params + lt_act_bytes(m->be, m->table.p[i].offset);
}
static inline float *grad(const LtModel *m, int i) { return m->in->gptr[i]; }
static inline int is_llama(const LtModel *m) { return m->d.arch == LT_ARCH_LLAMA; }
/* Table index of the parameter of role k of local layer l (layers run chunk
 * after chunk, lt_params_chunk_first), -1 when the block has no such parameter. */
static inline int lidx(const LtModel *m, int l, int k) {
    const int pos0 = is_llama(m) ? llama_role(&m->d, k) : GPT_ROLES[k];
    int pos = pos0;
    /* learnable softmax offsets (params.c) sit where attn.proj.weight would: the roles
     * from there on move one place down */
    if (lt_dims_sinks(&m->d) == 2) {
        const int proj = is_llama(m) ? llama_role(&m->d, P_PROJW) : GPT_ROLES[P_PROJW];
        pos = k == P_SINK ? proj : pos0 + (pos0 >= proj);
    }
    if (pos < 0) return -1;
    /* an MoE layer: the MLP's roles are the shared expert's, absent without one */
    if (m->in->moe[l] && k >= P_FCW && k <= P_FC2B && m->d.moe.shared_ffn == 0) return -1;
    return m->table.layer_first[l] + pos;
}
/* Table indices of local layer l's parameters: first and last. */
static inline int layer_first_idx(const LtModel *m, int l) { return m->table.layer_first[l]; }
static inline int layer_last_idx(const LtModel *m, int l) {
    return m->table.layer_first[l + 1] - 1;
}
/* This rank's MoE shape for a micro batch of B sequences (its rows under SP). */
static inline LtMoeShape moe_shape(const LtModel *m, int B) {
    const int N = B * m->T, R = m->sp ? N / m->in->tp_size : N;
    return lt_moe_shape(&m->d.moe, m->d.arch, B, m->T, m->d.hidden, R,
                        m->sp ? (long)m->in->tp_rank * R : 0,
                        m->in->ep ? lt_comm_size(m->in->ep) : 1,
                        m->in->ep ? lt_comm_rank(m->in->ep) : 0,
                        m->in->etp ? lt_comm_size(m->in->etp) : 1,
                        m->in->etp ? lt_comm_rank(m->in->etp) : 0);
}

/* Parameter / gradient of role k of layer l, NULL when absent. */
static inline void *lw(const LtModel *m, int l, int k) {
    const int i = lidx(m, l, k);
    return i < 0 ? NULL : param(m, i);
}
static inline float *lg(const LtModel *m, int l, int k) {
    const int i = lidx(m, l, k);
    return i < 0 ? NULL : grad(m, i);
}
/* The LM head's weight: the untied lm_head, else the tied wte. */
static inline int head_idx(const LtModel *m) {
    return m->table.idx_head >= 0 ? m->table.idx_head : m->table.idx_wte;
}

/* Allocations counted into *acc (one of m->mem's fields). */
static inline void *act_alloc(LtModel *m, size_t n, size_t *acc) {
    size_t bytes = lt_act_bytes(m->be, n);
    *acc += bytes;
    return m->be->ops->alloc(m->be, bytes);
}
static inline float *f32_alloc(LtModel *m, size_t n, size_t *acc) {
    *acc += n * sizeof(float);
    return m->be->ops->alloc(m->be, n * sizeof(float));
}

/* The embedding group's last parameter: wpe when held, else wte (see
 * model_grads.c's groups). */
static inline int emb_last(const LtParamTable *t) {
    return t->idx_wpe >= 0 ? t->idx_wpe : t->idx_wte;
}

/* Parameters first..last have their micro-batch gradient complete. */
static inline void grads_ready(LtModel *m, int first, int last) {
    if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, first, last);
}

/* The block's normalization fused with the residual add (backend.h:
 * layernorm_fwd, rmsnorm_fwd): LayerNorm with weight and bias, or RMSNorm
 * with weight only (mean and bias unused). */
static inline void norm_fwd(LtModel *m, void *resid_out, void *out, float *mean, float *rstd,
                            const void *a, const void *b, const void *w, const void *bias, int R,
                            int C) {
    LtBackend *be = m->be;
    if (is_llama(m))
        be->ops->rmsnorm_fwd(be, resid_out, out, rstd, a, b, w, m->d.norm_eps, R, C);
    else
        be->ops->layernorm_fwd(be, resid_out, out, mean, rstd, a, b, w, bias, R, C);
}
static inline void norm_bwd(LtModel *m, void *dinp, float *dw, float *db, const void *dout,
                            const void *inp, const void *w, const float *mean, const float *rstd,
                            int R, int C) {
    LtBackend *be = m->be;
    if (is_llama(m))
        be->ops->rmsnorm_bwd(be, dinp, dw, dout, inp, w, rstd, R, C);
    else
        be->ops->layernorm_bwd(be, dinp, dw, db, dout, inp, w, mean, rstd, R, C);
}

/* The tensor-parallel linears and sequence parallelism's communication
 * (tp_linear.h) over this model's group. */
static inline LtTpLinear tpl(const LtModel *m) {
    return (LtTpLinear){m->be, m->tp, m->in->tp_size, m->in->tp_rank, m->sp, m->in->tp_overlap};
}

static inline void *rows_at(const LtModel *m, void *x, size_t row, int C) {
    return (char *)x + lt_act_bytes(m->be, row * (size_t)C);
}

/* The routing settings and this step's loss weight of the MoE layers, and
 * their experts' gated activation. */
static inline LtMoeCtx moe_ctx(const LtModel *m) {
    return (LtMoeCtx){&m->d.moe, m->sp ? m->tp : NULL, m->in->ep, m->in->etp,
                      m->in->moe_aux_weight, &m->d.glu};
}

/* The first visible key of each query in local layer l's attention: the
 * sliding window's in a windowed layer, else the document's (NULL: 0). */
static inline const int32_t *kstart_of(const LtModel *m, int l) {
    return m->in->swa[l] ? m->in->kwin : m->in->kstart;
}

/* The window argument of local layer l's attention (backend.h): the window
 * when kstart_of is the window alone, -1 when documents reset it too or the
 * layer attends causally. */
static inline int window_of(const LtModel *m, int l) {
    return m->in->swa[l] && !m->in->kstart ? m->d.window : -1;
}

/* Local layer l's softmax offsets (backend.h attention_fwd): the learnable parameter,
 * off-by-one's zeros, or NULL (vanilla). */
static inline const void *sinks_of(const LtModel *m, int l) {
    return lt_dims_sinks(&m->d) == 2 ? lw(m, l, P_SINK) : m->in->zero_sinks;
}

/* ---- functions of one file that others call ---- */

/* Point every parameter's gradient into the flat buffer, or (buckets) into
 * one bucket shared by the groups (model_grads.c). */
void lt_mdl_setup_grads(LtModel *m, int buckets);

/* Slot sl's document arrays from the host tokens of B sequences, made the
 * running ones (model_docs.c). */
void lt_mdl_documents_upload(LtModel *m, LtActSlot *sl, const int32_t *tokens, int B);

/* The loss head of the last stage (model_loss.c): the loss of the N rows of
 * lnf added to loss_acc; with grad_scale != 0 the gradient of this rank's
 * rows of lnf, returned. */
void *lt_mdl_loss_head(LtModel *m, int N, float grad_scale);

/* Refill what backward of local layer l needs that recomputation dropped
 * (model_forward.c). */
void lt_mdl_recompute_layer(LtModel *m, int l, LtLayerActs *a, void *x, int B);

/* MoE layer l's router and expert tensors (model_moe.c). */
LtMoeWeights lt_mdl_moe_weights(LtModel *m, int l);
/* Table index of MoE layer l's shared-expert gate weight (when the model has one). */
int lt_mdl_shared_gate_idx(const LtModel *m, int l);

/* Add the kept assignments of MoE layer l's experts to the step's counts
 * (model_moe.c). */
void lt_mdl_moe_count_tokens(LtModel *m, int l, const LtMoeActs *a);

#endif
