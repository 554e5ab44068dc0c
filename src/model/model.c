/* model.c - GPT forward/backward over the backend op interface, chunk by
 * chunk (a chunk = the consecutive layers of one pipeline stage; without
 * pipelining the one chunk is the whole model).
 *
 * Layer j of a chunk (x = x[j], N = B*T tokens):
 *   ln1 = LN(x)                      [j = 0: LN(chunk input); j > 0: fused
 *                                     x[j] = r2[j-1] + mlp_out[j-1]]
 *   qkv = ln1 W_qkv^T + b            (N, 3C)
 *   atty = causal_attention(qkv)     (N, C), lse
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
 *   no biases, no position table. The parameter roles below map both blocks
 *   onto one layer routine; a role a block lacks (biases) is absent (NULL).
 * An untied LM head (lm_head, either block) replaces wte in the logits. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/moe.h"
#include "rope.h"
#include "tp_linear.h"
#include "tp_overlap.h"

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
       P_FC2B, P_QNW, P_KNW, P_ROLES };
/* Position of each role in a layer's slice of the table, -1 when absent. */
static const int GPT_ROLES[P_ROLES] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -1, -1};
static const int LLAMA_ROLES[P_ROLES] = {0, -1, 1, -1, 2, -1, 3, -1, 4, -1, 5, -1, -1, -1};
/* Llama with qk_layernorm: q_norm, k_norm follow qkv */
static const int LLAMA_QK_ROLES[P_ROLES] = {0, -1, 1, -1, 4, -1, 5, -1, 6, -1, 7, -1, 2, 3};

int lt_model_lm_head_chunk(size_t N, size_t Vl, size_t act_bytes, int requested) {
    if (N == 0) return 1;
    if (requested > 0) return (size_t)requested < N ? requested : (int)N;
    size_t fit = LT_LM_HEAD_AUTO_BYTES / (Vl * act_bytes > 0 ? Vl * act_bytes : 1);
    if (fit < LT_LM_HEAD_MIN_ROWS) fit = LT_LM_HEAD_MIN_ROWS;
    if (fit >= N) return (int)N;
    size_t chunks = (N + fit - 1) / fit, rows = (N + chunks - 1) / chunks; /* equal chunks */
    return (int)(rows < LT_LM_HEAD_MIN_ROWS ? LT_LM_HEAD_MIN_ROWS : rows);
}

/* Device pointer of parameter i in the compute-dtype buffer / fp32 grads. */
static void *param(const LtModel *m, int i) {
    return (char *)m->params + lt_act_bytes(m->be, m->table.p[i].offset);
}
static float *grad(const LtModel *m, int i) { return m->in->gptr[i]; }
static int is_llama(const LtModel *m) { return m->d.arch == LT_ARCH_LLAMA; }
/* Table index of the parameter of role k of local layer l (layers run chunk
 * after chunk, lt_params_chunk_first), -1 when the block has no such parameter. */
static int lidx(const LtModel *m, int l, int k) {
    const int pos =
        (is_llama(m) ? (m->d.qk_norm ? LLAMA_QK_ROLES : LLAMA_ROLES) : GPT_ROLES)[k];
    if (pos < 0) return -1;
    /* an MoE layer: the MLP's roles are the shared expert's, absent without one */
    if (m->in->moe[l] && k >= P_FCW && k <= P_FC2B && m->d.moe.shared_ffn == 0) return -1;
    return m->table.layer_first[l] + pos;
}
/* Parameters of the attention half of a layer and of one FFN (params.c). */
static int attn_params(const LtModel *m) { return is_llama(m) ? 4 + 2 * !!m->d.qk_norm : 8; }
static int ffn_params(const LtModel *m) { return is_llama(m) ? 2 : 4; }
/* Table index of MoE layer l's router weight; its experts' tensors follow. */
static int router_idx(const LtModel *m, int l) {
    return m->table.layer_first[l] + attn_params(m) + (m->d.moe.shared_ffn > 0 ? ffn_params(m) : 0);
}
/* Table indices of local layer l's parameters: first and last. */
static int layer_first_idx(const LtModel *m, int l) { return m->table.layer_first[l]; }
static int layer_last_idx(const LtModel *m, int l) { return m->table.layer_first[l + 1] - 1; }
/* This rank's MoE shape for a micro batch of B sequences (its rows under SP). */
static LtMoeShape moe_shape(const LtModel *m, int B) {
    const int N = B * m->T, R = m->sp ? N / m->in->tp_size : N;
    return lt_moe_shape(&m->d.moe, m->d.arch, B, m->T, m->d.hidden, R,
                        m->sp ? (long)m->in->tp_rank * R : 0,
                        m->in->ep ? lt_comm_size(m->in->ep) : 1,
                        m->in->ep ? lt_comm_rank(m->in->ep) : 0);
}

/* Parameter / gradient of role k of layer l, NULL when absent. */
static void *lw(const LtModel *m, int l, int k) {
    const int i = lidx(m, l, k);
    return i < 0 ? NULL : param(m, i);
}
static float *lg(const LtModel *m, int l, int k) {
    const int i = lidx(m, l, k);
    return i < 0 ? NULL : grad(m, i);
}
/* The LM head's weight: the untied lm_head, else the tied wte. */
static int head_idx(const LtModel *m) {
    return m->table.idx_head >= 0 ? m->table.idx_head : m->table.idx_wte;
}

static void *act_alloc(LtModel *m, size_t n, size_t *acc) {
    size_t bytes = lt_act_bytes(m->be, n);
    *acc += bytes;
    return m->be->ops->alloc(m->be, bytes);
}
static float *f32_alloc(LtModel *m, size_t n, size_t *acc) {
    *acc += n * sizeof(float);
    return m->be->ops->alloc(m->be, n * sizeof(float));
}

/* Elements from the first parameter of [first, last] to the end of the last. */
static size_t group_span(const LtParamTable *t, int first, int last) {
    return t->p[last].offset + t->p[last].numel - t->p[first].offset;
}

/* Parameter groups (the unit a bucket hands over): the embeddings (wte and
 * wpe, whichever are held), each layer, the final LayerNorm. */
static int emb_last(const LtParamTable *t) { return t->idx_wpe >= 0 ? t->idx_wpe : t->idx_wte; }
static int group_first(const LtParamTable *t, int i) {
    if (t->idx_wte >= 0 && i <= emb_last(t)) return t->idx_wte;
    if (t->idx_lnf >= 0 && i >= t->idx_lnf) return t->idx_lnf; /* ln_f (and lm_head) */
    int l = 0;
    while (l + 1 < t->layers && t->layer_first[l + 1] <= i) l++;
    return t->layer_first[l];
}

/* Point every parameter's gradient into the flat buffer, or (buckets) into one
 * bucket shared by the groups; with pipelining the embedding group gets a
 * buffer of its own that lives through the step (see model.h). */
static void setup_grads(LtModel *m, int buckets) {
    const LtParamTable *t = &m->table;
    m->in->buckets = buckets;
    m->in->gptr = lt_calloc(sizeof(float *) * (size_t)t->n);
    if (!buckets) {
        m->in->grads_len = m->flat;
        m->grads = f32_alloc(m, m->in->grads_len, &m->mem.grads);
        for (int i = 0; i < t->n; i++) m->in->gptr[i] = m->grads + t->p[i].offset;
        return;
    }
    const int own_emb = m->pp > 1 && t->idx_wte >= 0 && !m->d.untied;
    size_t len = 0;
    for (int i = 0; i < t->n;) {
        int f = group_first(t, i), last = i;
        while (last + 1 < t->n && group_first(t, last + 1) == f) last++;
        size_t span = group_span(t, f, last);
        if (own_emb && f == t->idx_wte) m->in->emb_grads_len = span;
        else if (span > len) len = span;
        const int layer = f >= t->idx_layer0 && (t->idx_lnf < 0 || f < t->idx_lnf) &&
                          (t->idx_wte < 0 || f > emb_last(t));
        if (layer && span > m->in->layer_group_len) m->in->layer_group_len = span;
        i = last + 1;
    }
    m->in->grads_len = len ? len : 1;
    m->grads = f32_alloc(m, m->in->grads_len, &m->mem.grads);
    if (own_emb) m->in->emb_grads = f32_alloc(m, m->in->emb_grads_len, &m->mem.grads);
    for (int i = 0; i < t->n; i++) {
        int first = group_first(t, i);
        float *base = own_emb && first == t->idx_wte ? m->in->emb_grads : m->grads;
        m->in->gptr[i] = base + (t->p[i].offset - t->p[first].offset);
    }
}

/* The parameter buffer (flat elements) and the gradients; with an expert
 * table (expert parallelism) the experts' own buffers of eflat elements. */
static void setup_params(LtModel *m, const LtModelOptions *opt) {
    m->flat = opt && opt->flat ? opt->flat : m->table.total;
    LT_CHECK(m->flat >= m->table.total);
    m->params = act_alloc(m, m->flat, &m->mem.params);
    setup_grads(m, opt ? opt->grad_buckets : 0);
    if (!m->etable.n) return;
    m->eflat = opt->eflat ? opt->eflat : m->etable.total;
    LT_CHECK(m->eflat >= m->etable.total);
    m->eparams = act_alloc(m, m->eflat, &m->mem.params);
    m->egrads = f32_alloc(m, m->eflat, &m->mem.grads);
}

/* One set of layer activations; fields in `share` (non-NULL) are reused. */
static void layer_acts_alloc(LtModel *m, LtLayerActs *la, const LtLayerActs *share, size_t *a) {
    const size_t N = (size_t)m->B * m->T, C = m->d.hidden, F = m->in->ffn_max,
                 R = m->boundary / C, CL = (size_t)m->in->heads_local * (size_t)lt_dims_head_dim(&m->d);
    la->ln1 = act_alloc(m, N * C, a);
    la->qkv = act_alloc(m, N * (size_t)m->in->qkv_local, a);
    la->atty = share && share->atty ? share->atty : act_alloc(m, N * CL, a);
    la->r2 = act_alloc(m, R * C, a);
    la->ln2 = act_alloc(m, N * C, a);
    la->fch_pre = act_alloc(m, N * F * (is_llama(m) ? 2 : 1), a); /* llama: gate | up */
    la->fch = act_alloc(m, N * F, a);
    la->mean1 = is_llama(m) ? NULL : f32_alloc(m, R, a); /* RMSNorm keeps no mean */
    la->rstd1 = f32_alloc(m, R, a);
    la->mean2 = is_llama(m) ? NULL : f32_alloc(m, R, a);
    la->rstd2 = f32_alloc(m, R, a);
    la->lse = f32_alloc(m, N * (size_t)m->in->heads_local, a);
    if (m->d.qk_norm) {
        const size_t qk = (size_t)m->in->heads_local + (size_t)m->in->kv_local;
        la->qk_in = act_alloc(m, N * qk * (size_t)lt_dims_head_dim(&m->d), a);
        la->qk_rstd = f32_alloc(m, N * qk, a);
    }
    if (m->in->moe_any) { /* every slot layer: a slot runs the chunks in turn */
        const LtMoeShape s = moe_shape(m, m->B);
        la->moe = lt_calloc(sizeof *la->moe);
        lt_moe_acts_alloc(m->be, &s, la->moe, a);
    }
}

static void layer_acts_free(LtModel *m, LtLayerActs *la, int keep_atty) {
    void *ps[] = {la->ln1, la->qkv, keep_atty ? NULL : la->atty, la->r2, la->ln2, la->fch_pre,
                  la->fch, la->mean1, la->rstd1, la->mean2, la->rstd2, la->lse,
                  la->qk_in, la->qk_rstd};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) m->be->ops->free(m->be, ps[i]);
    if (la->moe) {
        lt_moe_acts_free(m->be, la->moe);
        free(la->moe);
    }
}

/* Activation slots. Recomputation: full keeps only each layer's input (x[j])
 * per slot and shares one set of layer activations that backward refills
 * layer by layer; selective shares the attention output (recomputed from qkv
 * in backward). */
static void setup_slots(LtModel *m, int nslots) {
    const size_t N = (size_t)m->B * m->T;
    const int n = m->max_chunk_layers, nx = n > 0 ? n : 1; /* x[0]: the chunk input */
    size_t *a = &m->mem.activations;
    if (m->recompute == LT_MODEL_RECOMPUTE_FULL) layer_acts_alloc(m, &m->in->shared, NULL, a);
    if (m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE)
        m->in->shared.atty =
            act_alloc(m, N * (size_t)m->in->heads_local * (size_t)lt_dims_head_dim(&m->d), a);
    m->nslots = nslots;
    m->slot = lt_calloc(sizeof(LtActSlot) * (size_t)nslots);
    for (int s = 0; s < nslots; s++) {
        size_t at_start = *a;
        LtActSlot *sl = &m->slot[s];
        sl->x = lt_calloc(sizeof(void *) * (size_t)nx);
        sl->layer = lt_calloc(sizeof(LtLayerActs) * (size_t)nx);
        for (int j = 0; j < nx; j++) sl->x[j] = act_alloc(m, m->boundary, a);
        for (int j = 0; j < n; j++) {
            if (m->recompute == LT_MODEL_RECOMPUTE_FULL)
                sl->layer[j] = m->in->shared;
            else
                layer_acts_alloc(m, &sl->layer[j],
                                 m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE ? &m->in->shared
                                                                               : NULL,
                                 a);
        }
        sl->dout = act_alloc(m, m->boundary, a);
        sl->tokens = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        *a += N * sizeof(int32_t);
        if (s == 0) m->in->slot_bytes = *a - at_start;
    }
}

/* The rotary table (T, HD/2, 2) of cos, sin on the device (llama). */
static float *rope_setup(LtModel *m, size_t *acc) {
    const int HD = lt_dims_head_dim(&m->d);
    const size_t n = (size_t)m->T * (size_t)HD;
    float *host = lt_malloc(n * sizeof(float));
    lt_rope_table(host, m->T, HD, m->d.rope_base, &m->d.rope);
    float *dev = f32_alloc(m, n, acc);
    m->be->ops->upload(m->be, dev, host, n * sizeof(float));
    free(host);
    return dev;
}

/* Sliding-window attention (model.window_size): the per-slot starts when a
 * held layer is windowed. */
static void setup_windows(LtModel *m) {
    const int n = m->table.layers;
    int any = 0;
    m->in->swa = lt_calloc((size_t)(n > 0 ? n : 1));
    for (int l = 0; l < n; l++)
        any |= m->in->swa[l] =
            (unsigned char)lt_dims_window_layer(&m->d, lt_params_global_layer(&m->table, l));
    if (!any) return;
    const size_t N = (size_t)m->B * m->T;
    m->in->host_kw = lt_malloc(N * sizeof(int32_t));
    for (int s = 0; s < m->nslots; s++) {
        m->slot[s].kwin = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        m->mem.activations += N * sizeof(int32_t);
    }
}

/* Which held layers are MoE layers and each one's MLP width on this rank
 * (the shared expert's in an MoE layer, 0 without one). */
static void setup_layers(LtModel *m) {
    const int n = m->table.layers, tp = m->in->tp_size;
    m->in->moe = lt_calloc((size_t)(n > 0 ? n : 1));
    m->in->ffn_loc = lt_calloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    m->in->moe_stats = lt_calloc(sizeof(LtMoeStats) * (size_t)(n > 0 ? n : 1));
    m->in->moe_tokens = lt_calloc(sizeof(double) * (size_t)(n > 0 ? n : 1) *
                                  (size_t)(m->d.moe.experts > 0 ? m->d.moe.experts : 1));
    m->in->ffn_max = 1;
    for (int l = 0; l < n; l++) {
        m->in->moe[l] = (unsigned char)lt_dims_moe_layer(&m->d, lt_params_global_layer(&m->table, l));
        m->in->moe_any |= m->in->moe[l];
        m->in->ffn_loc[l] = (m->in->moe[l] ? m->d.moe.shared_ffn : m->d.ffn) / tp;
        m->in->moe_stats[l].layer = lt_params_global_layer(&m->table, l);
        if (m->in->ffn_loc[l] > m->in->ffn_max) m->in->ffn_max = m->in->ffn_loc[l];
    }
}

LtModel *lt_model_create(LtBackend *be, const LtModelDims *d, int B, int T,
                         const LtModelOptions *opt) {
    const LtBackendOps *o = be->ops;
    if (d->arch == LT_ARCH_LLAMA && (!o->rmsnorm_fwd || !o->rmsnorm_bwd || !o->swiglu_fwd ||
                                     !o->swiglu_bwd || !o->rope))
        lt_input_error("model.arch=llama: the %s backend has no RMSNorm, SwiGLU or rotary "
                       "embedding kernels",
                       be->ops->name);
    if (d->qk_norm && d->arch != LT_ARCH_LLAMA)
        lt_input_error("model.qk_layernorm needs model.arch=llama (its RMSNorm)");
    if (d->qk_norm && (!o->qk_norm_fwd || !o->qk_norm_bwd))
        lt_input_error("model.qk_layernorm: the %s backend has no per-head query/key norm kernels",
                       be->ops->name);
    if (d->moe.experts > 0 && !lt_moe_backend_ok(be))
        lt_input_error("model.num_experts=%d: the %s backend has no mixture-of-experts kernels "
                       "yet; train MoE models with train.device=cpu",
                       d->moe.experts, be->ops->name);
    LtModel *m = lt_calloc(sizeof *m);
    m->in = lt_calloc(sizeof *m->in);
    m->in->eod = -1;
    m->in->loss_weight = 1.0f;
    m->in->moe_aux_weight = 1.0f;
    if (opt && opt->ep && lt_comm_size(opt->ep) > 1) {
        LT_CHECK(d->moe.experts % lt_comm_size(opt->ep) == 0);
        m->in->ep = opt->ep;
    }
    m->be = be;
    m->d = *d;
    m->B = B;
    m->T = T;
    m->tp = opt && opt->tp && lt_comm_size(opt->tp) > 1 ? opt->tp : NULL;
    m->in->tp_size = m->tp ? lt_comm_size(m->tp) : 1;
    m->in->tp_rank = m->tp ? lt_comm_rank(m->tp) : 0;
    LtStagePlace place = {1, 0, 1, {0}};
    if (opt && opt->place.pp > 0) place = opt->place;
    m->pp = place.pp;
    m->pp_rank = place.pp_rank;
    m->vpp = place.vpp;
    if (m->in->ep) /* only this rank's experts, in a table of their own */
        lt_params_build_split(&m->table, &m->etable, d, m->in->tp_size, m->in->tp_rank, place,
                              lt_comm_size(m->in->ep), lt_comm_rank(m->in->ep));
    else
        lt_params_build_stage(&m->table, d, m->in->tp_size, m->in->tp_rank, place);
    m->max_chunk_layers = m->table.max_chunk_layers;
    m->in->heads_local = d->heads / m->in->tp_size;
    m->in->kv_local = lt_dims_kv_heads(d) / m->in->tp_size;
    m->in->qkv_local = (m->in->heads_local + 2 * m->in->kv_local) * lt_dims_head_dim(d);
    setup_layers(m);
    m->vocab_local = d->padded_vocab / m->in->tp_size;
    m->in->vocab_start = m->in->tp_rank * m->vocab_local;
    m->in->vocab_valid = d->vocab - m->in->vocab_start;
    if (m->in->vocab_valid < 0) m->in->vocab_valid = 0;
    if (m->in->vocab_valid > m->vocab_local) m->in->vocab_valid = m->vocab_local;
    m->sp = m->tp && opt->sequence_parallel;
    m->in->tp_overlap = m->sp && opt->tp_comm_overlap;
    /* collective over tp: made here, at one point */
    if (m->in->tp_overlap) lt_comm_background(m->tp);
    const size_t N = (size_t)B * T, C = d->hidden, F = m->in->ffn_max;
    const size_t R = m->sp ? N / (size_t)m->in->tp_size : N; /* residual-stream rows of this rank */
    LT_CHECK(!m->sp || N % (size_t)m->in->tp_size == 0);
    m->boundary = R * C;
    m->in->sp_partial = lt_calloc((size_t)m->table.n);
    for (int i = 0; i < m->table.n; i++) { /* weights that see only this rank's tokens: the
                                            * norms', the router's, the (whole) experts'
                                            * when they are in the table (EP 1: under EP the
                                            * expert-data-parallel sum covers TP); and (any
                                            * TP) only this rank's heads: q/k norms */
        const char *nm = m->table.p[i].name;
        const int heads = strstr(nm, ".attn.q_norm.") || strstr(nm, ".attn.k_norm.");
        m->in->sp_partial[i] = (m->sp && (strstr(nm, "ln_") || strstr(nm, ".mlp.router.") ||
                                          strstr(nm, ".mlp.experts."))) ||
                               (m->tp && heads);
    }
    m->xent_chunk = lt_model_lm_head_chunk(N, (size_t)m->vocab_local, be->act_size,
                                           opt ? opt->lm_head_chunk : 0);
    setup_params(m, opt);
    m->in->stage_f32 = f32_alloc(m, (size_t)d->padded_vocab, &m->mem.workspace);

    m->recompute = opt ? opt->recompute : 0;
    setup_slots(m, opt && opt->slots > 0 ? opt->slots : 1);
    setup_windows(m);

    size_t *w = &m->mem.workspace;
    if (m->table.last_stage) {
        m->in->lnf = act_alloc(m, N * C, w);
        m->in->meanf = f32_alloc(m, R, w);
        m->in->rstdf = f32_alloc(m, R, w);
        m->in->xlast = act_alloc(m, R * C, w);
        m->in->logits = act_alloc(m, (size_t)m->xent_chunk * (size_t)m->vocab_local, w);
        m->in->losses = f32_alloc(m, N, w);
        m->in->xstat = f32_alloc(m, 3 * (size_t)m->xent_chunk, w);
        m->in->targets = be->ops->alloc(be, N * sizeof(int32_t));
        m->in->masked = lt_malloc(N * sizeof(int));
        *w += N * sizeof(int32_t);
    }
    m->in->scratch_c = act_alloc(m, N * C, w);
    m->in->scratch_sp = m->sp ? act_alloc(m, R * C, w) : NULL;
    m->in->dfull = m->sp ? act_alloc(m, N * C, w) : NULL;
    const size_t CL = (size_t)m->in->heads_local * (size_t)lt_dims_head_dim(d);
    m->in->dc = act_alloc(m, N * (CL > C ? CL : C), w); /* d(ln) rows, or d(attention out) */
    m->in->d3c = act_alloc(m, N * (size_t)m->in->qkv_local, w);
    m->in->dff = act_alloc(m, N * F, w);
    if (is_llama(m)) {
        m->in->dgu = act_alloc(m, 2 * N * F, w);
        m->in->rope_cs = rope_setup(m, w);
    }
    if (m->in->moe_any) {
        const LtMoeShape s = moe_shape(m, B);
        lt_moe_work_alloc(be, &s, &m->in->moe_work, w);
        m->in->moe_exp = lt_calloc(sizeof(LtExpertTensors) * (size_t)d->moe.experts);
    }
    m->in->own_loss_acc = be->ops->alloc(be, sizeof(double));
    m->in->loss_acc = m->in->own_loss_acc;
    return m;
}

void lt_model_destroy(LtModel *m) {
    if (!m) return;
    LtBackend *be = m->be;
    void (*fr)(LtBackend *, void *) = be->ops->free;
    for (int s = 0; s < m->nslots; s++) {
        LtActSlot *sl = &m->slot[s];
        for (int j = 0; j < (m->max_chunk_layers > 0 ? m->max_chunk_layers : 1); j++)
            fr(be, sl->x[j]);
        for (int j = 0; j < m->max_chunk_layers; j++) {
            if (m->recompute != LT_MODEL_RECOMPUTE_FULL)
                layer_acts_free(m, &sl->layer[j], m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE);
        }
        fr(be, sl->dout);
        fr(be, sl->tokens);
        if (sl->pos) fr(be, sl->pos);
        if (sl->kstart) fr(be, sl->kstart);
        if (sl->kwin) fr(be, sl->kwin);
        free(sl->x);
        free(sl->layer);
    }
    free(m->slot);
    if (m->recompute == LT_MODEL_RECOMPUTE_FULL) layer_acts_free(m, &m->in->shared, 0);
    if (m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE) fr(be, m->in->shared.atty);
    const struct LtModelInternal *in = m->in;
    void *ps[] = {m->params,   m->grads,      in->emb_grads,   in->stage_f32, in->lnf,
                  m->eparams,  m->egrads,
                  in->meanf,   in->rstdf,     in->xlast,       in->scratch_c, in->scratch_sp,
                  in->dfull,   in->dc,        in->d3c,         in->dff,       in->dgu,
                  in->rope_cs, in->logits,    in->losses,      in->xstat,     in->targets,
                  in->own_loss_acc};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) fr(be, ps[i]);
    if (in->moe_any) lt_moe_work_free(be, &m->in->moe_work);
    free(m->in->moe_exp);
    free(m->in->moe_stats);
    free(m->in->moe_tokens);
    free(m->in->moe);
    free(m->in->ffn_loc);
    free(m->in->gptr);
    free(m->in->sp_partial);
    free(m->in->masked);
    free(m->in->host_pos);
    free(m->in->host_ks);
    free(m->in->host_kw);
    free(m->in->swa);
    lt_params_free(&m->table);
    lt_params_free(&m->etable);
    free(m->in);
    free(m);
}

void lt_model_set_eod_mask(LtModel *m, int32_t eod) { m->in->eod = eod; }

void lt_doc_layout(const int32_t *tokens, int B, int T, int32_t eod, int32_t *pos,
                   int32_t *kstart) {
    for (int b = 0; b < B; b++) {
        const int32_t *tk = tokens + (size_t)b * T;
        int start = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && eod >= 0 && tk[t - 1] == eod) start = t;
            if (pos) pos[(size_t)b * T + t] = t - start;
            if (kstart) kstart[(size_t)b * T + t] = start;
        }
    }
}

void lt_model_set_documents(LtModel *m, int32_t eod, int reset_pos, int reset_attn) {
    const size_t N = (size_t)m->B * m->T;
    m->in->doc_eod = eod;
    if (!reset_pos && !reset_attn) return;
    if (!m->in->host_pos) m->in->host_pos = lt_malloc(N * sizeof(int32_t));
    if (!m->in->host_ks) m->in->host_ks = lt_malloc(N * sizeof(int32_t));
    for (int s = 0; s < m->nslots; s++) {
        LtActSlot *sl = &m->slot[s];
        if (reset_pos) sl->pos = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        if (reset_attn) sl->kstart = m->be->ops->alloc(m->be, N * sizeof(int32_t));
        m->mem.activations += (size_t)(!!reset_pos + !!reset_attn) * N * sizeof(int32_t);
    }
}

/* Slot sl's document arrays from the host tokens of B sequences (uploaded;
 * the staging is pageable, so reusable once the upload returns), and make
 * them the running ones. */
static void documents_upload(LtModel *m, LtActSlot *sl, const int32_t *tokens, int B) {
    const int N = B * m->T;
    if (sl->pos || sl->kstart) {
        lt_doc_layout(tokens, B, m->T, m->in->doc_eod, m->in->host_pos, m->in->host_ks);
        if (sl->pos)
            m->be->ops->upload_async(m->be, sl->pos, m->in->host_pos, (size_t)N * sizeof(int32_t));
        if (sl->kstart)
            m->be->ops->upload_async(m->be, sl->kstart, m->in->host_ks,
                                     (size_t)N * sizeof(int32_t));
    }
    if (sl->kwin) { /* the window's first key, within the document when they reset */
        for (int i = 0; i < N; i++) {
            const int from = i % m->T - m->d.window, doc = sl->kstart ? m->in->host_ks[i] : 0;
            m->in->host_kw[i] = from > doc ? from : doc;
        }
        m->be->ops->upload_async(m->be, sl->kwin, m->in->host_kw, (size_t)N * sizeof(int32_t));
    }
    m->in->pos = sl->pos;
    m->in->kstart = sl->kstart;
    m->in->kwin = sl->kwin;
}

/* The first visible key of each query in local layer l's attention: the
 * sliding window's in a windowed layer, else the document's (NULL: 0). */
static const int32_t *kstart_of(const LtModel *m, int l) {
    return m->in->swa[l] ? m->in->kwin : m->in->kstart;
}

/* The window argument of local layer l's attention (backend.h): the window
 * when kstart_of is the window alone, -1 when documents reset it too or the
 * layer attends causally. */
static int window_of(const LtModel *m, int l) {
    return m->in->swa[l] && !m->in->kstart ? m->d.window : -1;
}

void lt_model_set_loss_weight(LtModel *m, float w) { m->in->loss_weight = w; }
void lt_model_set_moe_aux_weight(LtModel *m, float w) { m->in->moe_aux_weight = w; }

int lt_model_moe_layers(const LtModel *m) {
    int n = 0;
    for (int l = 0; l < m->table.layers; l++) n += m->in->moe[l];
    return n;
}

void lt_model_moe_tokens_take(LtModel *m, double *out) {
    const int E = m->d.moe.experts;
    int k = 0;
    for (int l = 0; l < m->table.layers; l++) {
        if (!m->in->moe[l]) continue;
        double *c = m->in->moe_tokens + (size_t)l * E;
        memcpy(out + (size_t)k++ * E, c, sizeof(double) * (size_t)E);
        memset(c, 0, sizeof(double) * (size_t)E);
    }
}

int lt_model_moe_bias_index(const LtModel *m, int k) {
    for (int l = 0; l < m->table.layers; l++)
        if (m->in->moe[l] && k-- == 0) return m->d.moe.expert_bias ? router_idx(m, l) + 1 : -1;
    return -1;
}

void lt_model_moe_take(LtModel *m, LtMoeStats *out) {
    int k = 0;
    for (int l = 0; l < m->table.layers; l++) {
        if (!m->in->moe[l]) continue;
        LtMoeStats *st = &m->in->moe_stats[l];
        out[k++] = *st;
        *st = (LtMoeStats){.layer = st->layer};
    }
}

/* dst (compute dtype) = n fp32 host values, staged through a temporary fp32
 * device buffer and cast (not in the step loop). */
static void set_from_host(LtModel *m, void *dst, const float *host, size_t n) {
    LtBackend *be = m->be;
    if (!n) return;
    float *tmp = be->ops->alloc(be, n * sizeof(float));
    be->ops->upload(be, tmp, host, n * sizeof(float));
    be->ops->act_from_f32(be, dst, tmp, n);
    be->ops->synchronize(be);
    be->ops->free(be, tmp);
}

void lt_model_set_params(LtModel *m, const float *host) {
    set_from_host(m, m->params, host, m->table.total);
}

void lt_model_set_expert_params(LtModel *m, const float *host) {
    set_from_host(m, m->eparams, host, m->etable.total);
}

void lt_model_set_grad_hook(LtModel *m, LtGradReadyFn fn, void *ctx) {
    m->grads_ready = fn;
    m->grads_ready_ctx = ctx;
}

void lt_model_set_param_hook(LtModel *m, LtParamNeedFn fn, void *ctx) {
    m->in->params_needed = fn;
    m->in->params_needed_ctx = ctx;
}

void lt_model_set_final_pass(LtModel *m, int on) { m->final_pass = on; }
int lt_model_param_group(const LtModel *m, int i) { return group_first(&m->table, i); }

/* Forward is about to read parameters first..last. */
static void params_needed(LtModel *m, int first, int last) {
    if (m->in->params_needed && first >= 0)
        m->in->params_needed(m->in->params_needed_ctx, first, last);
}

int lt_model_grad_buckets(const LtModel *m) { return m->in->buckets; }
size_t lt_model_bucket_len(const LtModel *m) {
    return m->in->grads_len > m->in->emb_grads_len ? m->in->grads_len : m->in->emb_grads_len;
}
size_t lt_model_bucket_piece(const LtModel *m) {
    return m->in->layer_group_len ? m->in->layer_group_len : lt_model_bucket_len(m);
}
float *lt_model_grad(const LtModel *m, int i) { return m->in->gptr[i]; }
float *lt_model_emb_grads(const LtModel *m, size_t *len) {
    *len = m->in->emb_grads_len;
    return m->in->emb_grads;
}

void lt_model_zero_grads(LtModel *m) {
    m->be->ops->zero(m->be, m->grads, m->in->grads_len * sizeof(float));
    if (m->in->emb_grads)
        m->be->ops->zero(m->be, m->in->emb_grads, m->in->emb_grads_len * sizeof(float));
    if (m->egrads) m->be->ops->zero(m->be, m->egrads, m->eflat * sizeof(float));
}

int lt_model_chunk_first(const LtModel *m, int c) { return m->pp_rank == 0 && c == 0; }
int lt_model_chunk_last(const LtModel *m, int c) {
    return m->pp_rank == m->pp - 1 && c == m->vpp - 1;
}

/* Parameters first..last have their micro-batch gradient complete. */
static void grads_ready(LtModel *m, int first, int last) {
    if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, first, last);
}

static void tp_reduce_f32(LtModel *m, float *x, size_t n, LtCommOp op) {
    if (m->tp) lt_comm_all_reduce(m->tp, x, n, LT_COMM_F32, op);
}

/* A row-parallel layer's bias (role k of layer l; absent: NULL) is added
 * once: by the first TP rank. */
static const void *row_bias(const LtModel *m, int l, int k) {
    return m->in->tp_rank == 0 ? lw(m, l, k) : NULL;
}

/* The block's normalization fused with the residual add (backend.h:
 * layernorm_fwd, rmsnorm_fwd): LayerNorm with weight and bias, or RMSNorm
 * with weight only (mean and bias unused). */
static void norm_fwd(LtModel *m, void *resid_out, void *out, float *mean, float *rstd,
                     const void *a, const void *b, const void *w, const void *bias, int R, int C) {
    LtBackend *be = m->be;
    if (is_llama(m))
        be->ops->rmsnorm_fwd(be, resid_out, out, rstd, a, b, w, m->d.norm_eps, R, C);
    else
        be->ops->layernorm_fwd(be, resid_out, out, mean, rstd, a, b, w, bias, R, C);
}
static void norm_bwd(LtModel *m, void *dinp, float *dw, float *db, const void *dout,
                     const void *inp, const void *w, const float *mean, const float *rstd, int R,
                     int C) {
    LtBackend *be = m->be;
    if (is_llama(m))
        be->ops->rmsnorm_bwd(be, dinp, dw, dout, inp, w, rstd, R, C);
    else
        be->ops->layernorm_bwd(be, dinp, dw, db, dout, inp, w, mean, rstd, R, C);
}

/* The tensor-parallel linears and sequence parallelism's communication
 * (tp_linear.h) over this model's group. */
static LtTpLinear tpl(const LtModel *m) {
    return (LtTpLinear){m->be, m->tp, m->in->tp_size, m->in->tp_rank, m->sp, m->in->tp_overlap};
}

static void *rows_at(const LtModel *m, void *x, size_t row, int C) {
    return (char *)x + lt_act_bytes(m->be, row * (size_t)C);
}

/* The routing settings and this step's loss weight of the MoE layers. */
static LtMoeCtx moe_ctx(const LtModel *m) {
    return (LtMoeCtx){&m->d.moe, m->sp ? m->tp : NULL, m->in->ep, m->in->moe_aux_weight};
}
/* Expert tensor i of the expert table: its weights and gradient. */
static void *eparam(const LtModel *m, int i) {
    return (char *)m->eparams + lt_act_bytes(m->be, m->etable.p[i].offset);
}
static float *egrad(const LtModel *m, int i) { return m->egrads + m->etable.p[i].offset; }

/* MoE layer l's router and expert tensors (params.h's order): every expert's
 * from the table, or under expert parallelism this rank's (at their global
 * index e; the others' entries are left unset) from the expert table. */
static LtMoeWeights moe_weights(LtModel *m, int l) {
    const int r = router_idx(m, l), fp = ffn_params(m), E = m->d.moe.experts;
    const int split = m->etable.n > 0, El = split ? E / lt_comm_size(m->in->ep) : E,
              e0 = split ? lt_comm_rank(m->in->ep) * El : 0;
    for (int e = e0; e < e0 + El; e++) {
        const int b = split ? m->etable.layer_first[l] + (e - e0) * fp
                            : r + 1 + !!m->d.moe.expert_bias + e * fp;
        void *(*w)(const LtModel *, int) = split ? eparam : param;
        float *(*g)(const LtModel *, int) = split ? egrad : grad;
        LtExpertTensors *t = &m->in->moe_exp[e];
        if (is_llama(m))
            *t = (LtExpertTensors){w(m, b), NULL, w(m, b + 1), NULL, g(m, b), NULL, g(m, b + 1), NULL};
        else
            *t = (LtExpertTensors){w(m, b),     w(m, b + 1), w(m, b + 2), w(m, b + 3),
                                   g(m, b),     g(m, b + 1), g(m, b + 2), g(m, b + 3)};
    }
    return (LtMoeWeights){param(m, r), m->d.moe.expert_bias ? param(m, r + 1) : NULL, grad(m, r),
                          m->in->moe_exp};
}

/* The kept assignments of each expert of MoE layer l in this forward, added
 * to the step's counts (aux-loss-free balancing, lt_model_moe_tokens_take). */
static void count_tokens(LtModel *m, int l, const LtMoeActs *a) {
    const int E = m->d.moe.experts;
    for (int e = 0; e < E; e++)
        m->in->moe_tokens[(size_t)l * E + e] += a->host_off[e + 1] - a->host_off[e];
}

/* Local layer l from its first LayerNorm through the MLP activation, with
 * activations a. Its input is x, or (delta != NULL) x + delta, stored into
 * xin (the layer's input tensor); without delta xin must be x. Leaves every
 * activation backward needs; the MLP output projection is the caller's. */
static void layer_forward(LtModel *m, int l, LtLayerActs *a, int B, void *xin, const void *x,
                          const void *delta) {
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int T = m->T, C = m->d.hidden, F = m->in->ffn_loc[l], NH = m->in->heads_local,
              NKV = m->in->kv_local, HD = lt_dims_head_dim(&m->d), CL = NH * HD;
    const int N = B * T, R = m->sp ? N / m->in->tp_size : N;
    const size_t mine = m->sp ? (size_t)m->in->tp_rank * R : 0; /* first row of this rank's slot */
    norm_fwd(m, delta ? xin : NULL, rows_at(m, a->ln1, mine, C), a->mean1, a->rstd1, x, delta,
             lw(m, l, P_LN1W), lw(m, l, P_LN1B), R, C);
    lt_tp_col_linear_fwd(&tl, a->qkv, NULL, a->ln1, lw(m, l, P_QKVW), lw(m, l, P_QKVB), N, C,
                         m->in->qkv_local);
    if (a->qk_in)
        o->qk_norm_fwd(be, a->qkv, a->qk_in, a->qk_rstd, lw(m, l, P_QNW), lw(m, l, P_KNW),
                       m->d.norm_eps, N, NH, NKV, HD);
    if (m->in->rope_cs) o->rope(be, a->qkv, m->in->rope_cs, m->in->pos, B, T, NH, NKV, HD, 0);
    o->attention_fwd(be, a->atty, a->lse, a->qkv, kstart_of(m, l), window_of(m, l), B, T, NH,
                     NKV, HD);
    void *attn = lt_tp_row_linear_fwd(&tl, m->in->scratch_c, m->in->scratch_sp, a->atty,
                                      lw(m, l, P_PROJW), row_bias(m, l, P_PROJB), N, CL, C);
    norm_fwd(m, a->r2, rows_at(m, a->ln2, mine, C), a->mean2, a->rstd2, xin, attn,
             lw(m, l, P_LN2W), lw(m, l, P_LN2B), R, C);
    if (m->in->moe[l]) {
        const LtMoeShape s = moe_shape(m, B);
        const LtMoeCtx cx = moe_ctx(m);
        const LtMoeWeights w = moe_weights(m, l);
        lt_moe_forward(be, &cx, &s, &w, a->moe, &m->in->moe_work, rows_at(m, a->ln2, mine, C),
                       m->in->recomputing ? NULL : &m->in->moe_stats[l]);
        if (m->d.moe.expert_bias && !m->in->recomputing && m->in->training_forward)
            count_tokens(m, l, a->moe);
    }
    if (!lw(m, l, P_FCW)) return; /* an MoE layer without a shared expert */
    if (is_llama(m)) { /* fch_pre = gate | up, fch = silu(gate) * up */
        lt_tp_col_linear_fwd(&tl, a->fch_pre, NULL, a->ln2, lw(m, l, P_FCW), NULL, N, C, 2 * F);
        o->swiglu_fwd(be, a->fch, a->fch_pre, N, F);
    } else {
        lt_tp_col_linear_fwd(&tl, a->fch, a->fch_pre, a->ln2, lw(m, l, P_FCW), lw(m, l, P_FCB), N,
                             C, F);
    }
}

/* Layer l's MLP output, this rank's rows: the MLP's row-parallel projection,
 * or in an MoE layer the routed experts' output plus the shared expert's. */
static void *mlp_output(LtModel *m, int l, LtLayerActs *a, int N, int R) {
    const LtTpLinear tl = tpl(m);
    const int C = m->d.hidden;
    void *dense = NULL;
    if (lw(m, l, P_FC2W))
        dense = lt_tp_row_linear_fwd(&tl, m->in->scratch_c, m->in->scratch_sp, a->fch,
                                     lw(m, l, P_FC2W), row_bias(m, l, P_FC2B), N,
                                     m->in->ffn_loc[l], C);
    if (!m->in->moe[l]) return dense;
    if (dense) m->be->ops->add_act(m->be, a->moe->out, a->moe->out, dense, (size_t)R * C);
    return a->moe->out;
}

/* Upload ids (asynchronously) and, when the vocabulary is split over TP,
 * turn them into this rank's local ids: -1 where another rank owns the row
 * (the embedding skips it; for targets -1 means "not on this rank", which is
 * all the vocab-parallel loss needs to know). */
static void upload_ids(LtModel *m, int32_t *dst, const int32_t *ids, int n) {
    const LtBackendOps *o = m->be->ops;
    o->upload_async(m->be, dst, ids, (size_t)n * sizeof(int32_t));
    if (m->tp) o->localize_ids(m->be, dst, (size_t)n, m->in->vocab_start, m->vocab_local);
}

/* Forward of chunk c (micro batch B x T) in slot s: the embedding on the first
 * stage (tokens: host ids), the layers, then on the last stage the final
 * LayerNorm into lnf (xlast = its input; gathered over SP unless gather_lnf is
 * 0: then the caller's loss gathers it block by block), elsewhere the chunk
 * output into out. */
static void chunk_body(LtModel *m, int c, int s, int B, const int32_t *tokens, void *out,
                       int gather_lnf) {
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int T = m->T, C = m->d.hidden, n = lt_params_chunk_layers(&m->table, c),
              l0 = lt_params_chunk_first(&m->table, c);
    const int N = B * T, R = m->sp ? N / m->in->tp_size : N;
    const size_t mine = m->sp ? (size_t)m->in->tp_rank * R : 0; /* first row of this rank's slot */
    LtActSlot *sl = &m->slot[s];
    documents_upload(m, sl, tokens, B);
    if (lt_model_chunk_first(m, c)) {
        params_needed(m, m->table.idx_wte, emb_last(&m->table));
        upload_ids(m, sl->tokens, tokens, N);
        void *emb = m->sp ? m->in->scratch_c : sl->x[0];
        const int wpe = m->table.idx_wpe; /* none for llama */
        o->embedding_fwd(be, emb, sl->tokens, param(m, m->table.idx_wte),
                         m->in->tp_rank == 0 && wpe >= 0 ? param(m, wpe) : NULL, m->in->pos, B, T,
                         C);
        void *x0 = lt_tp_finish(&tl, emb, sl->x[0], R, C);
        LT_CHECK(x0 == sl->x[0]);
    }
    void *delta = NULL; /* the previous layer's MLP output, added by the next fused LN */
    for (int j = 0; j < n; j++) {
        const int l = l0 + j;
        LtLayerActs *a = &sl->layer[j];
        params_needed(m, layer_first_idx(m, l), layer_last_idx(m, l));
        layer_forward(m, l, a, B, sl->x[j], j ? sl->layer[j - 1].r2 : sl->x[0], delta);
        delta = mlp_output(m, l, a, N, R);
    }
    const void *last = n ? sl->layer[n - 1].r2 : sl->x[0];
    if (lt_model_chunk_last(m, c)) {
        const int f = m->table.idx_lnf;
        params_needed(m, f, m->table.n - 1);
        params_needed(m, head_idx(m), head_idx(m)); /* the tied LM head: the embedding's */
        norm_fwd(m, delta ? m->in->xlast : NULL, rows_at(m, m->in->lnf, mine, C), m->in->meanf,
                 m->in->rstdf, last, delta, param(m, f), is_llama(m) ? NULL : param(m, f + 1), R,
                 C);
        if (!delta) o->copy(be, m->in->xlast, last, lt_act_bytes(be, (size_t)R * C));
        if (gather_lnf) lt_tp_sp_gather(&tl, m->in->lnf, R, C);
    } else if (delta) {
        o->add_act(be, out, last, delta, (size_t)R * C);
    } else {
        o->copy(be, out, last, lt_act_bytes(be, (size_t)R * C));
    }
}

/* Rows [r, r + n) of the chunk just through the cross-entropy: the masked
 * ones (input token eod) get no loss and no gradient. Few rows (one per
 * document), each zeroed on its own. */
static void mask_rows(LtModel *m, int r, int n) {
    LtBackend *be = m->be;
    const size_t row_bytes = lt_act_bytes(be, (size_t)m->vocab_local);
    for (int k = 0; k < m->in->nmasked; k++) {
        const int row = m->in->masked[k];
        if (row < r || row >= r + n) continue;
        be->ops->zero(be, (char *)m->in->logits + (size_t)(row - r) * row_bytes, row_bytes);
        be->ops->zero(be, m->in->losses + row, sizeof(float));
    }
}

/* Loss of rows [r0, r1) in chunks of up to xent_chunk rows into losses; with
 * grad_scale != 0 also their gradient into dc (= dlnf) and dwte. */
static void loss_rows(LtModel *m, int r0, int r1, float grad_scale) {
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int C = m->d.hidden, V = m->d.vocab, Vl = m->vocab_local;
    const int X = m->xent_chunk, wte = head_idx(m); /* the LM head: tied wte or lm_head */
    float *gmax = m->in->xstat, *gsum = m->in->xstat + X, *gtgt = m->in->xstat + 2 * X;
    for (int r = r0; r < r1; r += X) {
        int n = r1 - r < X ? r1 - r : X;
        const void *x = (const char *)m->in->lnf + lt_act_bytes(be, (size_t)r * C);
        o->linear_fwd(be, m->in->logits, NULL, x, param(m, wte), NULL, n, C, Vl);
        if (!m->tp) {
            o->xent_fwd_bwd(be, m->in->losses + r, m->in->logits, m->in->targets + r, n, V, Vl,
                            grad_scale);
        } else { /* vocab-parallel: row statistics summed over the TP ranks */
            const int32_t *tg = m->in->targets + r;
            o->xent_tp_stats(be, gmax, NULL, NULL, m->in->logits, tg, NULL, n, m->in->vocab_valid,
                             Vl);
            tp_reduce_f32(m, gmax, (size_t)n, LT_COMM_MAX);
            o->xent_tp_stats(be, NULL, gsum, gtgt, m->in->logits, tg, gmax, n, m->in->vocab_valid,
                             Vl);
            tp_reduce_f32(m, gsum, 2 * (size_t)X, LT_COMM_SUM); /* gsum and gtgt together */
            o->xent_tp_finish(be, m->in->losses + r, m->in->logits, tg, gmax, gsum, gtgt, n,
                              m->in->vocab_valid, Vl, grad_scale);
        }
        mask_rows(m, r, n);
        if (grad_scale != 0.0f)
            o->linear_bwd(be, (char *)m->in->dc + lt_act_bytes(be, (size_t)r * C), grad(m, wte),
                          NULL, m->in->logits, x, param(m, wte), NULL, n, C, Vl);
    }
}

typedef struct {
    LtModel *m;
    int R;
    float grad_scale;
} LossBlocks;
static void loss_block(void *ctx, int k) {
    const LossBlocks *b = ctx;
    loss_rows(b->m, k * b->R, (k + 1) * b->R, b->grad_scale);
}

/* The loss of the N rows of lnf (this rank's R rows fresh under SP), its sum
 * added to loss_acc; with grad_scale != 0 also dwte and the gradient of this
 * rank's rows of lnf, returned (summed over TP under SP: m->in->scratch_sp).
 * With tp_comm_overlap the gather of lnf and the reduce-scatter of its
 * gradient run in row blocks around the loss of the blocks (in rank order:
 * the vocab-parallel loss needs the same rows on every rank at once). */
static void *loss_head(LtModel *m, int N, float grad_scale) {
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const int C = m->d.hidden, R = m->sp ? N / m->in->tp_size : N;
    void *dln = NULL;
    if (!m->in->tp_overlap) {
        loss_rows(m, 0, N, grad_scale);
        if (grad_scale != 0.0f) dln = lt_tp_finish(&tl, m->in->dc, m->in->scratch_sp, R, C);
    } else {
        LossBlocks b = {.m = m, .R = R, .grad_scale = grad_scale};
        const size_t n = (size_t)R * C;
        const int grads = grad_scale != 0.0f;
        lt_tp_gather_scatter_in_order(m->tp, m->in->lnf, n, lt_act_bytes(be, n),
                                      grads ? m->in->dc : NULL, m->in->scratch_sp, n,
                                      lt_act_bytes(be, n), lt_comm_act_type(be), loss_block, &b);
        if (grads) lt_tp_round(&tl, m->in->scratch_sp, n);
        dln = grads ? m->in->scratch_sp : NULL;
    }
    if (m->in->loss_weight != 1.0f)
        be->ops->scale_f32(be, m->in->losses, m->in->loss_weight, (size_t)N);
    be->ops->sum_f64(be, m->in->loss_acc, m->in->losses, (size_t)N, 0);
    return dln;
}

void lt_model_chunk_forward(LtModel *m, int c, int s, const int32_t *tokens,
                            const int32_t *targets, float grad_scale, void *out) {
    LT_CHECK(c >= 0 && c < m->vpp && s >= 0 && s < m->nslots);
    const int last = lt_model_chunk_last(m, c);
    LT_CHECK(last || out);
    const int loss = last && targets;
    m->in->training_forward = grad_scale != 0.0f;
    chunk_body(m, c, s, m->B, tokens, out, !(loss && m->in->tp_overlap));
    m->in->training_forward = 0;
    if (!loss) return;
    LtBackend *be = m->be;
    const int N = m->B * m->T, C = m->d.hidden, R = m->sp ? N / m->in->tp_size : N;
    upload_ids(m, m->in->targets, targets, N);
    m->in->nmasked = 0;
    if (m->in->eod >= 0)
        for (int i = 0; i < N; i++)
            if (tokens[i] == m->in->eod) m->in->masked[m->in->nmasked++] = i;
    void *dln = loss_head(m, N, grad_scale); /* d(lnf), this rank's rows */
    if (grad_scale == 0.0f) return;
    /* the LM head's share of the tied embedding (its own buffer with pipelining); an
     * untied head is handed over with the final norm below */
    if (!m->in->emb_grads && m->table.idx_head < 0)
        grads_ready(m, m->table.idx_wte, m->table.idx_wte);
    /* dlnf -> through the final LayerNorm into the gradient of the chunk output */
    const int f = m->table.idx_lnf;
    LtActSlot *sl = &m->slot[s];
    be->ops->zero(be, sl->dout, lt_act_bytes(be, (size_t)R * C));
    norm_bwd(m, sl->dout, grad(m, f), is_llama(m) ? NULL : grad(m, f + 1), dln, m->in->xlast,
             param(m, f), m->in->meanf, m->in->rstdf, R, C);
    grads_ready(m, f, m->table.n - 1); /* the final group: ln_f (and lm_head) */
}

/* Refill what backward of local layer l (activations a, input x) needs that
 * recomputation dropped: with full recomputation the whole layer forward from
 * its stored input (up to the MLP activation; communication included, so
 * every TP rank does it); with selective only the attention core from the
 * kept qkv. */
static void recompute_layer(LtModel *m, int l, LtLayerActs *a, void *x, int B) {
    if (m->recompute == LT_MODEL_RECOMPUTE_SELECTIVE)
        m->be->ops->attention_fwd(m->be, a->atty, a->lse, a->qkv, kstart_of(m, l),
                                  window_of(m, l), B, m->T, m->in->heads_local, m->in->kv_local,
                                  lt_dims_head_dim(&m->d));
    else {
        m->in->recomputing = 1;
        layer_forward(m, l, a, B, x, x, NULL);
        m->in->recomputing = 0;
    }
}

/* Backward of the MLP of layer l from dres (the layer output's gradient,
 * this rank's rows) into the gradient of ln2, summed over TP; returns where
 * this rank's rows of it are. */
static void *dense_mlp_backward(LtModel *m, int l, LtLayerActs *a, void *dres, int N) {
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const int C = m->d.hidden, F = m->in->ffn_loc[l];
    if (is_llama(m)) {
        lt_tp_row_linear_bwd(&tl, m->in->dfull, m->in->dff, lg(m, l, P_FC2W), NULL, dres, a->fch,
                             lw(m, l, P_FC2W), NULL, N, F, C);
        be->ops->swiglu_bwd(be, m->in->dgu, a->fch_pre, m->in->dff, N, F);
        return lt_tp_col_linear_bwd(&tl, m->in->dc, m->in->scratch_sp, lg(m, l, P_FCW), NULL,
                                    m->in->dgu, a->ln2, lw(m, l, P_FCW), N, C, 2 * F);
    }
    lt_tp_row_linear_bwd(&tl, m->in->dfull, m->in->dff, lg(m, l, P_FC2W), lg(m, l, P_FC2B), dres,
                         a->fch, lw(m, l, P_FC2W), a->fch_pre, N, F, C);
    return lt_tp_col_linear_bwd(&tl, m->in->dc, m->in->scratch_sp, lg(m, l, P_FCW),
                                lg(m, l, P_FCB), m->in->dff, a->ln2, lw(m, l, P_FCW), N, C, F);
}

/* Backward of the MLP of layer l (dense_mlp_backward), or of an MoE layer:
 * the shared expert's then the routed experts' gradients of ln2 summed. */
static void *mlp_backward(LtModel *m, int l, LtLayerActs *a, void *dres, int N) {
    void *dln = lw(m, l, P_FCW) ? dense_mlp_backward(m, l, a, dres, N) : NULL;
    if (!m->in->moe[l]) return dln;
    const int C = m->d.hidden, R = m->sp ? N / m->in->tp_size : N;
    if (!dln) {
        dln = m->in->dc;
        m->be->ops->zero(m->be, dln, lt_act_bytes(m->be, (size_t)R * C));
    }
    const LtMoeShape s = moe_shape(m, N / m->T);
    const LtMoeCtx cx = moe_ctx(m);
    const LtMoeWeights w = moe_weights(m, l);
    const size_t mine = m->sp ? (size_t)m->in->tp_rank * R : 0;
    lt_moe_backward(m->be, &cx, &s, &w, a->moe, &m->in->moe_work, rows_at(m, a->ln2, mine, C),
                    dres, dln);
    return dln;
}

void lt_model_chunk_backward(LtModel *m, int c, int s, void *din) {
    LT_CHECK(c >= 0 && c < m->vpp && s >= 0 && s < m->nslots);
    const LtTpLinear tl = tpl(m);
    LtBackend *be = m->be;
    const LtBackendOps *o = be->ops;
    const int B = m->B, T = m->T, C = m->d.hidden, NH = m->in->heads_local, NKV = m->in->kv_local,
              HD = lt_dims_head_dim(&m->d), CL = NH * HD, n = lt_params_chunk_layers(&m->table, c),
              l0 = lt_params_chunk_first(&m->table, c);
    const int N = B * T, R = m->sp ? N / m->in->tp_size : N;
    LtActSlot *sl = &m->slot[s];
    void *dres = sl->dout; /* the residual-stream gradient, accumulated in place */
    m->in->pos = sl->pos; /* the forward's documents (uploaded then) */
    m->in->kstart = sl->kstart;
    m->in->kwin = sl->kwin;
    for (int j = n - 1; j >= 0; j--) {
        const int l = l0 + j;
        LtLayerActs *a = &sl->layer[j];
        if (m->recompute) recompute_layer(m, l, a, sl->x[j], B);
        /* dres = d(output of layer l) flows to both mlp_out and r2 */
        void *dln = mlp_backward(m, l, a, dres, N);
        norm_bwd(m, dres, lg(m, l, P_LN2W), lg(m, l, P_LN2B), dln, a->r2, lw(m, l, P_LN2W),
                 a->mean2, a->rstd2, R, C);
        /* dres = d(r2) flows to both the attention projection and the layer input */
        lt_tp_row_linear_bwd(&tl, m->in->dfull, m->in->dc, lg(m, l, P_PROJW), lg(m, l, P_PROJB),
                             dres, a->atty, lw(m, l, P_PROJW), NULL, N, CL, C);
        o->attention_bwd(be, m->in->d3c, m->in->dc, a->qkv, a->atty, a->lse, kstart_of(m, l),
                         window_of(m, l), B, T, NH, NKV, HD);
        if (m->in->rope_cs) /* d(pre-RoPE) */
            o->rope(be, m->in->d3c, m->in->rope_cs, m->in->pos, B, T, NH, NKV, HD, 1);
        if (a->qk_in) /* d(pre-norm q, k); the weights' gradients are partial over TP */
            o->qk_norm_bwd(be, m->in->d3c, lg(m, l, P_QNW), lg(m, l, P_KNW), a->qk_in,
                           lw(m, l, P_QNW), lw(m, l, P_KNW), a->qk_rstd, N, NH, NKV, HD);
        dln = lt_tp_col_linear_bwd(&tl, m->in->dc, m->in->scratch_sp, lg(m, l, P_QKVW),
                                   lg(m, l, P_QKVB), m->in->d3c, a->ln1, lw(m, l, P_QKVW), N, C,
                                   m->in->qkv_local);
        norm_bwd(m, dres, lg(m, l, P_LN1W), lg(m, l, P_LN1B), dln, sl->x[j], lw(m, l, P_LN1W),
                 a->mean1, a->rstd1, R, C);
        grads_ready(m, layer_first_idx(m, l), layer_last_idx(m, l));
    }
    if (lt_model_chunk_first(m, c)) {
        const int e = m->table.idx_wte, wpe = m->table.idx_wpe;
        o->embedding_bwd(be, grad(m, e), wpe >= 0 ? grad(m, wpe) : NULL,
                         lt_tp_grad_full(&tl, m->in->dfull, dres, R, C), sl->tokens, m->in->pos,
                         B, T, C);
        if (!m->in->emb_grads) grads_ready(m, e, wpe >= 0 ? wpe : e);
    } else {
        LT_CHECK(din != NULL);
        o->copy(be, din, dres, lt_act_bytes(be, (size_t)R * C));
    }
}

void lt_model_sp_reduce_grads(LtModel *m, int first, int last) {
    if (!m->tp) return;
    for (int i = first; i <= last; i++)
        if (m->in->sp_partial[i])
            lt_comm_all_reduce(m->tp, grad(m, i), m->table.p[i].numel, LT_COMM_F32, LT_COMM_SUM);
}

double lt_model_loss_take(LtModel *m) {
    double sum = 0.0;
    if (!m->table.last_stage) return 0.0;
    m->be->ops->download(m->be, &sum, m->in->loss_acc, sizeof sum);
    m->be->ops->zero(m->be, m->in->loss_acc, sizeof(double));
    return sum;
}

void lt_model_loss_reset(LtModel *m) { m->be->ops->zero(m->be, m->in->loss_acc, sizeof(double)); }

void lt_model_set_loss_acc(LtModel *m, double *dev) {
    m->in->loss_acc = dev ? dev : m->in->own_loss_acc;
}

double lt_model_step(LtModel *m, const int32_t *tokens, const int32_t *targets, float grad_scale) {
    LT_CHECK(m->pp == 1 && m->vpp == 1);
    lt_model_chunk_forward(m, 0, 0, tokens, targets, grad_scale, NULL);
    if (targets && grad_scale != 0.0f) lt_model_chunk_backward(m, 0, 0, NULL);
    return lt_model_loss_take(m);
}

void lt_model_next_logits(LtModel *m, const int32_t *tokens, int len, float *out) {
    LtBackend *be = m->be;
    const int T = m->T, C = m->d.hidden, V = m->d.vocab, Vp = m->d.padded_vocab;
    LT_CHECK(len >= 1 && len <= T && !m->tp && m->pp == 1);
    /* one sequence in row 0 (B = 1); positions past len are padding and
     * cannot influence position len-1 under the causal mask */
    int32_t *row = lt_calloc((size_t)T * sizeof(int32_t));
    memcpy(row, tokens, (size_t)len * sizeof(int32_t));
    chunk_body(m, 0, 0, 1, row, NULL, 1);
    free(row);
    const void *x = (const char *)m->in->lnf + lt_act_bytes(be, (size_t)(len - 1) * C);
    be->ops->linear_fwd(be, m->in->logits, NULL, x, param(m, head_idx(m)), NULL, 1, C, Vp);
    be->ops->act_to_f32(be, m->in->stage_f32, m->in->logits, (size_t)Vp);
    be->ops->download(be, out, m->in->stage_f32, (size_t)V * sizeof(float));
}

/* Forward FLOPs per token of layer l, by part: the q, k, v projections
 * 2h(h + 2kv) (GPT: kv = h, 6h^2) and the output projection 2h^2; the MLP's
 * input matrices 2hF (GPT) or 4hF (SwiGLU: gate, up) and its output
 * projection 2hF; scores and weighted sum 4sh (query heads, GQA or not; 2sh
 * counting only the unmasked half), in a sliding-window layer only its band's
 * share (window_fraction) of either. An MoE layer's MLP is the K experts each
 * token goes to (F = the expert width) and the shared expert, plus the
 * router's 2hE in mlp_in. */
typedef struct {
    double attn_proj, mlp_in, mlp_out, attn;
} LayerFlops;
/* The share of a causal layer's query-key pairs a sliding-window layer l
 * computes (1 without a window): each of the s queries sees min(t + 1, W + 1)
 * keys instead of t + 1. */
static double window_fraction(const LtModelDims *d, int l) {
    const double s = d->seq_len, w = (double)d->window + 1.0;
    if (!lt_dims_window_layer(d, l) || w >= s) return 1.0;
    return (w * (w + 1.0) / 2.0 + (s - w) * w) / (s * (s + 1.0) / 2.0);
}

static LayerFlops layer_flops(const LtModelDims *d, int l, int causal) {
    const double s = d->seq_len, h = d->hidden, in = d->arch == LT_ARCH_LLAMA ? 4.0 : 2.0,
                 hd = lt_dims_head_dim(d), q = (double)d->heads * hd,
                 kv = (double)lt_dims_kv_heads(d) * hd;
    double F = d->ffn, router = 0.0;
    if (lt_dims_moe_layer(d, l)) {
        F = (double)d->moe.topk * d->moe.ffn + d->moe.shared_ffn;
        router = 2.0 * h * d->moe.experts;
    }
    return (LayerFlops){.attn_proj = 2.0 * h * (q + 2.0 * kv) + 2.0 * q * h,
                        .mlp_in = in * h * F + router,
                        .mlp_out = 2.0 * h * F,
                        .attn = (causal ? 2.0 : 4.0) * s * q * window_fraction(d, l)};
}

double lt_model_flops_per_sample(const LtModelDims *d, int causal) {
    double layers = 0.0;
    for (int l = 0; l < d->num_layers; l++) {
        const LayerFlops f = layer_flops(d, l, causal);
        layers += f.attn_proj + f.mlp_in + f.mlp_out + f.attn;
    }
    /* and the LM head 2hV (tied or not); backward = 2x forward */
    return 3.0 * d->seq_len * (layers + 2.0 * d->hidden * d->padded_vocab);
}

double lt_model_recompute_flops_per_sample(const LtModelDims *d, int full) {
    /* full: recompute_layer's forward up to the MLP activation - all but the
     * MLP's output projection (an MoE layer recomputes its experts whole); the
     * LM head is not recomputed */
    double sum = 0.0;
    for (int l = 0; l < d->num_layers; l++) {
        const LayerFlops f = layer_flops(d, l, 0);
        const double experts_out = lt_dims_moe_layer(d, l)
                                       ? 2.0 * d->hidden * d->moe.topk * d->moe.ffn
                                       : 0.0;
        sum += full ? f.attn_proj + f.mlp_in + f.attn + experts_out : f.attn;
    }
    return (double)d->seq_len * sum;
}
