/* params.h - the global parameter table of the GPT model.
 *
 * Every parameter has a global name and shape; its values live at `offset`
 * in one flat buffer (elements), so parameters, gradients, master weights and
 * Adam moments are all flat arrays indexed the same way. Init is a pure
 * function of (seed, name, global element index), so any parallel layout
 * builds the same global model. */
#ifndef LT_PARAMS_H
#define LT_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "layer_split.h"
#include "rope.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Mixture of experts (config.h's model.moe_* keys): what the model's MoE
 * layers are and how they route. experts == 0: a dense model. */
typedef struct {
    int experts, topk;  /* routed experts per MoE layer, experts per token */
    int ffn;            /* each routed expert's FFN width */
    int shared_ffn;     /* the shared expert's width; 0 = none */
    int shared_gate;    /* the shared expert's output scaled per token by sigmoid(x . g)
                         * (mlp.shared_gate.weight, 1 x hidden; Qwen2-MoE's) */
    int score;          /* LtMoeScore */
    int pre_softmax;
    int groups, group_topk; /* group-limited routing: experts / groups per group, the
                             * groups a token may use; 0 = off */
    float topk_scale;   /* routing weights' factor (1 = none) */
    int balance;        /* LtMoeBalance */
    float aux_coeff, z_coeff;
    float capacity;     /* capacity factor; 0 = dropless */
    int drop_policy;    /* LtMoeDropPolicy */
    int pad;            /* pad every expert's input to its capacity */
    int expert_bias;    /* aux-loss-free balancing: a per-expert bias for the top-k choice */
    float bias_rate;    /* its step per update */
    unsigned char layer[LT_MOE_MAX_LAYERS]; /* 1 = layer l is an MoE layer */
} LtMoeDims;

typedef struct {
    int num_layers, hidden, heads, ffn, seq_len, max_pos, vocab, padded_vocab;
    /* the block (model.arch) and what only the Llama block reads; zero = GPT-2 */
    int arch;          /* LT_ARCH_GPT | LT_ARCH_LLAMA */
    int kv_heads;      /* key/value heads (grouped-query attention); 0 = heads */
    int head_dim;      /* each head's dimension (model.kv_channels); 0 = hidden / heads */
    int untied;        /* the LM head has a weight of its own (lm_head), not wte */
    int qk_norm;       /* per-head RMSNorm of queries and keys before RoPE (llama:
                        * model.qk_layernorm): attn.q_norm.weight, attn.k_norm.weight */
    int qkv_bias;      /* llama: attn.qkv.bias (model.add_qkv_bias or add_bias_linear) */
    int linear_bias;   /* llama: biases on every linear (model.add_bias_linear): qkv,
                        * attn.proj, gate_up and down of the MLP and of each expert,
                        * and the router's (mlp.router.bias) */
    int softmax_type;  /* LtSoftmaxType: learnable adds attn.softmax_offset (heads) */
    float norm_eps;    /* RMSNorm epsilon (llama) */
    double rope_base;  /* rotary embedding base theta (llama) */
    LtRopeScaling rope; /* its frequency scaling (type 0: none) */
    double init_std;   /* std of the normal init (model.init_method_std); 0 = 0.02 */
    LtMoeDims moe;     /* experts 0: dense */
    LtGlu glu;         /* the gated MLP's activation, dense and experts (llama; zero:
                        * SwiGLU) */
    int window;        /* sliding-window attention: a query sees itself and the window
                        * tokens before it, in the layers window_layer marks; -1: none */
    unsigned char window_layer[LT_MOE_MAX_LAYERS];
} LtModelDims;

/* 1 when layer l (global index) of dims attends through a sliding window. */
static inline int lt_dims_window_layer(const LtModelDims *d, int l) {
    return d->window >= 0 && l >= 0 && l < LT_MOE_MAX_LAYERS && d->window_layer[l];
}

/* What an MoE layer's forwards added up since the last lt_model_moe_take (model.h): its
 * load-balancing and z losses times their weight in the step's objective (so
 * over a step's micro batches they sum to the objective's terms), the
 * assignments kept per expert of each routed micro batch (the most loaded
 * expert's and the mean, summed over forwards), and the ones this rank
 * dropped. Under sequence parallelism a forward routes this rank's share of a
 * micro batch: its counts wait in sp_counts (E + 2 per forward: per expert,
 * dropped, rows) until lt_model_moe_take sums them over the tensor-parallel
 * ranks, once per layer, and adds the micro batches' loads. */
typedef struct {
    int layer;            /* global layer index */
    double aux, z;
    double load_max, load_mean;
    long dropped, forwards;
    int32_t *sp_counts;   /* (owned by the model, also each forward's scratch without SP;
                           * NULL in lt_model_moe_take's copies) */
    int sp_n, sp_cap;     /* forwards waiting, and room for */
} LtMoeStats;
/* 1 when layer l (global index) of dims is an MoE layer. */
static inline int lt_dims_moe_layer(const LtModelDims *d, int l) {
    return d->moe.experts > 0 && l >= 0 && l < LT_MOE_MAX_LAYERS && d->moe.layer[l];
}

/* 1 when attention's softmax of dims has the extra logit per head (model.softmax_type
 * off-by-one or learnable); 2 when that logit is a parameter (learnable). */
static inline int lt_dims_sinks(const LtModelDims *d) {
    return d->softmax_type == LT_SOFTMAX_LEARNABLE ? 2 : d->softmax_type == LT_SOFTMAX_OFF_BY_ONE;
}

/* Key/value heads of dims: kv_heads, or heads when not set (multi-head). */
static inline int lt_dims_kv_heads(const LtModelDims *d) {
    return d->kv_heads > 0 ? d->kv_heads : d->heads;
}

/* The biases of dims's linears: GPT's block has them all but the router's; the
 * Llama block those its flags ask for. The attention input (qkv), the other
 * linears (attention output, MLP and experts), the MoE router. */
static inline int lt_dims_qkv_bias(const LtModelDims *d) {
    return d->arch != LT_ARCH_LLAMA || d->qkv_bias || d->linear_bias;
}
static inline int lt_dims_linear_bias(const LtModelDims *d) {
    return d->arch != LT_ARCH_LLAMA || d->linear_bias;
}
static inline int lt_dims_router_bias(const LtModelDims *d) {
    return d->arch == LT_ARCH_LLAMA && d->linear_bias;
}

/* Each head's dimension: head_dim, or hidden / heads when not set. */
static inline int lt_dims_head_dim(const LtModelDims *d) {
    return d->head_dim > 0 ? d->head_dim : d->hidden / d->heads;
}
/* The width of all query heads (and of the attention output): heads x head dim. */
static inline int lt_dims_q_width(const LtModelDims *d) { return d->heads * lt_dims_head_dim(d); }

/* The model dimensions a validated config describes. */
LtModelDims lt_dims_from_config(const LtConfig *c);

typedef enum { LT_INIT_NORMAL = 0, LT_INIT_ZEROS, LT_INIT_ONES } LtInitKind;

/* How a parameter is split over tensor-parallel ranks (Megatron style). */
typedef enum {
    LT_SPLIT_NONE = 0, /* replicated on every TP rank */
    LT_SPLIT_ROWS,     /* dim 0 split in tp contiguous parts: column-parallel weights and
                        * their biases, the vocab-parallel embedding */
    LT_SPLIT_COLS,     /* dim 1 split: row-parallel weights (input features) */
    LT_SPLIT_BLOCKS,   /* dim 0 holds nblocks consecutive blocks (q | k | v of the
                        * attention input, gate | up of SwiGLU), each split in tp
                        * contiguous parts: rank r holds part r of every block */
} LtSplit;

typedef struct {
    char name[96];     /* internal name, e.g. "h.3.attn.qkv.weight" */
    int ndim;
    int64_t shape[2];  /* this rank's shard */
    int64_t gshape[2]; /* the global parameter */
    LtSplit split;
    int nblocks;       /* LT_SPLIT_BLOCKS: blocks in dim 0 (at most 3) */
    int64_t block_rows[3]; /* LT_SPLIT_BLOCKS: global rows of each block */
    size_t offset;     /* element offset in the flat buffer */
    size_t numel;
    int decay;         /* 1: weight decay applies (2-D parameters) */
    LtInitKind init;
    float init_std;    /* for LT_INIT_NORMAL */
    int rows_valid;    /* global rows that get init (wte: true vocab; padded rows are zero) */
    int gidx;          /* index of this parameter in the whole model's table (tp = 1, all stages) */
    int tied_copy;     /* 1: a copy of a parameter another pipeline stage owns (the last
                        * stage's wte, tied to the first stage's embedding): its gradient is
                        * summed with the owner's and it counts once (at the owner) in norms
                        * and checkpoints */
} LtParam;

/* Which part of the model a pipeline rank holds. The model is cut into
 * pp * vpp stages of consecutive layers (num_layers / (pp * vpp) each unless
 * split says otherwise, layer_split.h); rank r holds chunks c = 0 .. vpp-1,
 * chunk c being stage c * pp + r. The first stage holds the embeddings (wte,
 * wpe), the last the final LayerNorm and the LM head, which is the tied wte:
 * with pp > 1 the last rank keeps its own copy. */
typedef struct {
    int pp, pp_rank, vpp;
    LtLayerSplit split; /* zero: even */
} LtStagePlace;

typedef struct {
    LtParam *p;
    int n;
    size_t total;      /* elements (of this rank's shards) */
    LtModelDims dims;  /* global dimensions */
    int tp, tp_rank;
    LtStagePlace place;     /* pipeline part held ({1, 0, 1}: the whole model) */
    int layers;             /* layers held, over all chunks */
    int max_chunk_layers;   /* of the largest chunk held */
    int first_stage, last_stage; /* 1: holds the embeddings / the final LN and LM head */
    int idx_wte, idx_wpe, idx_lnf; /* table indices; -1 when not held (lnf: ln_f.weight,
                                    * and for GPT ln_f.bias after it) */
    int idx_head;           /* the untied LM head (lm_head.weight, after ln_f); -1 when the
                             * head is the tied wte or not held */
    int idx_layer0;         /* index of the first layer's first parameter */
    int *layer_first;       /* (layers + 1): table index of local layer l's first parameter;
                             * layer_first[layers] follows the last layer's */
} LtParamTable;

/* Parameters of a dense transformer layer in the table: GPT, Llama. */
#define LT_PARAMS_PER_LAYER 12
#define LT_LLAMA_PARAMS_PER_LAYER 6 /* + 2 with dims.qk_norm, + 1 with the qkv bias,
                                     * + 3 with the linear biases */
/* Parameters of a layer's attention half (its norms included) and of one FFN
 * (the MLP, the shared expert or one routed expert) of dims. */
int lt_params_attn_count(const LtModelDims *d);
int lt_params_ffn_count(const LtModelDims *d);
/* Parameters of layer l (global) of dims: dense, or an MoE layer's (the attention
 * part, the shared expert's FFN when it has one, the router, then each expert's). */
int lt_params_layer_count(const LtModelDims *d, int l);

/* Layers of chunk c of a table, and the local index of its first layer
 * (local layers run chunk after chunk). */
int lt_params_chunk_layers(const LtParamTable *t, int c);
int lt_params_chunk_first(const LtParamTable *t, int c);
/* Global layer index of local layer `l` of a table. */
int lt_params_global_layer(const LtParamTable *t, int l);

/* Build the table for the model described by dims.
 * GPT: wte, wpe, then per layer ln_1.{weight,bias}, attn.qkv.{weight,bias},
 * attn.proj.{weight,bias}, ln_2.{weight,bias}, mlp.fc.{weight,bias},
 * mlp.proj.{weight,bias}, then ln_f.{weight,bias}. Shapes: wte (Vp,C), wpe
 * (P,C), qkv.weight (3C,C), proj.weight (C,C), fc.weight (F,C),
 * mlp.proj.weight (C,F).
 * Llama (no position table; biases only with dims.qkv_bias / linear_bias, below):
 * wte, then per layer ln_1.weight (RMSNorm), attn.qkv.weight ((NH + 2 NKV) HD, C: q | k | v), with dims.qk_norm
 * attn.q_norm.weight and attn.k_norm.weight (HD each, ones, replicated over TP),
 * attn.proj.weight (C, NH HD), ln_2.weight, mlp.gate_up.weight (2F, C: gate | up),
 * mlp.down.weight (C, F), then ln_f.weight. With dims.qkv_bias attn.qkv.bias
 * follows qkv.weight; with dims.linear_bias too, and each other linear's bias
 * (attn.proj.bias (C), mlp.gate_up.bias (2F: gate | up, split over TP as the
 * weight's rows), mlp.down.bias (C, whole)) follows its weight; zeros, no decay.
 * Either arch with dims.untied: lm_head.weight (Vp, C) after ln_f; either arch
 * with softmax_type learnable: attn.softmax_offset (NH: each query head's extra
 * softmax logit, normal init, no decay, split over TP by heads as the q rows) just
 * before attn.proj.weight.
 * An MoE layer (lt_dims_moe_layer) replaces the MLP's parameters by: the shared
 * expert's in their place (mlp.shared.fc.{weight,bias}, mlp.shared.proj.{weight,bias}
 * for GPT, mlp.shared.gate_up.weight and mlp.shared.down.weight for Llama, width
 * moe.shared_ffn, split over TP as the MLP's; absent without one), then
 * mlp.router.weight (E, C), for Llama with dims.linear_bias mlp.router.bias (E,
 * normal init as the weight's, no decay; GPT's router has none), with moe.expert_bias mlp.expert_bias (E, zeros: no
 * gradient, no decay; the trainer moves it), then for each expert e mlp.experts.e.* with the MLP's
 * names and moe.ffn columns (fc.weight (Fm, C), fc.bias, proj.weight (C, Fm),
 * proj.bias; Llama gate_up.weight (2 Fm, C: gate | up), down.weight (C, Fm)). The
 * router and the experts are whole on every TP rank (LT_SPLIT_NONE): expert
 * tensor parallelism cuts the experts in lt_params_build_split's table only. */
void lt_params_build(LtParamTable *t, const LtModelDims *d);
/* The shards held by tensor-parallel rank tp_rank of tp (tp divides heads,
 * ffn and padded vocab). lt_params_build is the tp = 1 case. */
void lt_params_build_tp(LtParamTable *t, const LtModelDims *d, int tp, int tp_rank);
/* The shards of the pipeline part `place` (its split checked).
 * Order: wte (first or last stage), wpe (first stage), the held layers chunk
 * after chunk, ln_f (last stage). Names stay global ("h.7.ln_1.weight"), so
 * init and checkpoints do not depend on the layout. */
void lt_params_build_stage(LtParamTable *t, const LtModelDims *d, int tp, int tp_rank,
                           LtStagePlace place);

/* The stage table of lt_params_build_stage cut in two for expert parallelism
 * (Megatron-Core's): `dense` holds every parameter but the routed experts' (the
 * router and mlp.expert_bias included), in the stage table's order; `experts`
 * holds, of each MoE layer held, the experts ep_rank * E/ep .. (ep_rank + 1) *
 * E/ep - 1 in order, each cut over expert tensor parallelism: the experts
 * table's tp and tp_rank are etp and etp_rank, fc.weight and fc.bias are split
 * by rows (LT_SPLIT_ROWS), Llama's gate_up.weight as gate | up blocks
 * (LT_SPLIT_BLOCKS), proj.weight and down.weight by columns (LT_SPLIT_COLS),
 * proj.bias whole (LT_SPLIT_NONE: replicated over etp); with etp 1 every
 * expert tensor is whole (LT_SPLIT_NONE). Each table has its own flat buffer
 * (offsets from 0) and layer_first over the same local layers (a dense layer's
 * expert range is empty); names and gidx stay those of the global table, so
 * lt_params_to_global/from_global and init work on either. The experts table
 * has no idx_* entries (-1) and first_stage = last_stage = 0. ep divides
 * moe.experts and etp moe.ffn (any for a dense model, whose experts table is
 * empty). */
void lt_params_build_split(LtParamTable *dense, LtParamTable *experts, const LtModelDims *d,
                           int tp, int tp_rank, LtStagePlace place, int ep, int ep_rank, int etp,
                           int etp_rank);

/* Global row-major index of element `local` of this rank's shard of p. */
size_t lt_param_global_index(const LtParamTable *t, const LtParam *p, size_t local);

/* Copy the shard values `src` (t order) into the global arrays dst (g order,
 * g built with tp = 1 for the whole model). Replicated parameters are written
 * only when with_replicated != 0 (so a sum over TP ranks counts them once);
 * tied copies never (so a sum over pipeline stages counts them once). */
void lt_params_to_global(const LtParamTable *t, const float *src, const LtParamTable *g,
                         float *dst, int with_replicated);
/* Copy global arrays between two tables of the same model that differ only in
 * rows (the padded vocabulary of wte, which depends on TP): rows both have
 * are copied, extra destination rows are zero. Returns 0, or -1 with a
 * message when a parameter is missing or its columns differ. */
int lt_params_copy_rows(const LtParamTable *src_t, const float *src, const LtParamTable *dst_t,
                        float *dst, char *err, size_t errlen);

/* Extract this rank's shards (tied copies included) from global arrays. */
void lt_params_from_global(const LtParamTable *t, float *dst, const LtParamTable *g,
                           const float *src);
void lt_params_free(LtParamTable *t);
const LtParam *lt_params_find(const LtParamTable *t, const char *name);

/* Initial value of element `index` (row-major, GLOBAL index) of parameter p. */
float lt_param_init_value(const LtParam *p, uint64_t seed, size_t index);
/* Fill out[t->total] with the initial fp32 values of this rank's shards. */
void lt_params_init(const LtParamTable *t, uint64_t seed, float *out);

/* A rectangle of a global tensor (a 1-D tensor is one column): rows
 * [r0, r0 + nr) x columns [c0, c0 + nc). `local` is the offset, within a
 * rank's shard of the parameter, of the rectangle's first element; the
 * rectangle's elements are consecutive there, row-major. */
typedef struct {
    int64_t r0, nr, c0, nc;
    size_t local;
} LtRect;

#define LT_MAX_RECTS 8

/* The global rectangles that elements [a, b) of this rank's shard of p cover,
 * in local order: at most a partial first row, the full rows (cut at the
 * blocks of LT_SPLIT_BLOCKS) and a partial last row. Returns how many. */
int lt_param_rects(const LtParamTable *t, const LtParam *p, size_t a, size_t b,
                   LtRect out[LT_MAX_RECTS]);

#ifdef __cplusplus
}
#endif

#endif
