/* hf_map.c - the Hugging Face tensors of a lattice model (see hf.h). One
 * table serves export and import, so the two cannot disagree. */
#include "hf.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct {
    const LtParamTable *t;
    LtHfMap *m;
    int n, cap;
    char *err;
    size_t errlen;
} MapBuild;

/* Append HF tensor `hf` = rows [row0, row0 + rows) of parameter `ours`
 * (rows 0: all of them). */
static int put(MapBuild *b, const char *hf, const char *ours, int64_t row0, int64_t rows,
               int transpose) {
    const LtParam *p = lt_params_find(b->t, ours);
    if (!p) return lt_errorf(b->err, b->errlen, "the model has no parameter '%s'", ours);
    if (b->n == b->cap) return lt_errorf(b->err, b->errlen, "too many Hugging Face tensors");
    LtHfMap *m = &b->m[b->n++];
    memset(m, 0, sizeof *m);
    snprintf(m->hf, sizeof m->hf, "%s", hf);
    m->param = (int)(p - b->t->p);
    m->row0 = row0;
    m->rows = rows ? rows : p->gshape[0];
    m->transpose = transpose;
    m->ndim = p->ndim;
    m->shape[0] = transpose ? p->gshape[1] : m->rows;
    m->shape[1] = p->ndim == 2 ? (transpose ? m->rows : p->gshape[1]) : 0;
    return 0;
}

int lt_hf_plain(const LtHfMap *m) {
    return m->param >= 0 && !m->transpose && !m->interleave && m->nstack == 0;
}

void lt_hf_copy(const LtHfMap *m, const LtParamTable *t, float *master, float *hf, int to_hf) {
    const int ns = m->nstack > 0 ? m->nstack : 1;
    const int64_t R = m->rows, half = R / 2;
    int64_t C = 1;
    if (m->param >= 0 && t->p[m->param].ndim == 2) C = t->p[m->param].gshape[1];
    for (int s = 0; s < ns; s++) {
        float *slice = hf + (size_t)s * (size_t)(R * C);
        if (m->param < 0) { /* only gathered: import builds every parameter it maps */
            memset(slice, 0, sizeof(float) * (size_t)(R * C));
            continue;
        }
        const LtParam *p = &t->p[m->param + s * m->stride];
        float *ours = master + p->offset + (size_t)(m->row0 * C);
        for (int64_t r = 0; r < R; r++) {
            const int64_t h = m->interleave ? (r < half ? 2 * r : 2 * (r - half) + 1) : r;
            for (int64_t c = 0; c < C; c++) {
                float *x = slice + (m->transpose ? c * R + h : h * C + c), *o = ours + r * C + c;
                if (to_hf) *x = *o;
                else *o = *x;
            }
        }
    }
}

/* put() for layer l: "<hf_prefix>.<l>.<hf>" from "h.<l>.<ours>". */
static int put_layer(MapBuild *b, const char *hf_prefix, int l, const char *hf, const char *ours,
                     int64_t row0, int64_t rows, int transpose) {
    char h[128], o[96];
    if (snprintf(h, sizeof h, "%s.%d.%s", hf_prefix, l, hf) >= (int)sizeof h ||
        snprintf(o, sizeof o, "h.%d.%s", l, ours) >= (int)sizeof o)
        return lt_errorf(b->err, b->errlen, "name too long: %s.%d.%s", hf_prefix, l, hf);
    return put(b, h, o, row0, rows, transpose);
}

static int map_gpt(MapBuild *b, const LtModelDims *d) {
    static const struct { const char *hf, *ours; int tr; } layer[] = {
        {"ln_1.weight", "ln_1.weight", 0},             {"ln_1.bias", "ln_1.bias", 0},
        {"attn.c_attn.weight", "attn.qkv.weight", 1},  {"attn.c_attn.bias", "attn.qkv.bias", 0},
        {"attn.c_proj.weight", "attn.proj.weight", 1}, {"attn.c_proj.bias", "attn.proj.bias", 0},
        {"ln_2.weight", "ln_2.weight", 0},             {"ln_2.bias", "ln_2.bias", 0},
        {"mlp.c_fc.weight", "mlp.fc.weight", 1},       {"mlp.c_fc.bias", "mlp.fc.bias", 0},
        {"mlp.c_proj.weight", "mlp.proj.weight", 1},   {"mlp.c_proj.bias", "mlp.proj.bias", 0},
    };
    if (put(b, "transformer.wte.weight", "wte", 0, d->vocab, 0) ||
        put(b, "transformer.wpe.weight", "wpe", 0, 0, 0))
        return -1;
    for (int l = 0; l < d->num_layers; l++)
        for (size_t k = 0; k < sizeof layer / sizeof layer[0]; k++)
            if (put_layer(b, "transformer.h", l, layer[k].hf, layer[k].ours, 0, 0, layer[k].tr))
                return -1;
    return put(b, "transformer.ln_f.weight", "ln_f.weight", 0, 0, 0) ||
                   put(b, "transformer.ln_f.bias", "ln_f.bias", 0, 0, 0)
               ? -1
               : 0;
}

/* put() of a tensor the model lacks: n zeros (nstack > 0: nstack rows of them). */
static int put_zeros(MapBuild *b, const char *hf_prefix, int l, const char *hf, int nstack, int64_t n) {
    if (b->n == b->cap) return lt_errorf(b->err, b->errlen, "too many Hugging Face tensors");
    LtHfMap *m = &b->m[b->n];
    memset(m, 0, sizeof *m);
    if (snprintf(m->hf, sizeof m->hf, "%s.%d.%s", hf_prefix, l, hf) >= (int)sizeof m->hf)
        return lt_errorf(b->err, b->errlen, "Hugging Face name too long: %s.%d.%s", hf_prefix, l, hf);
    b->n++;
    m->param = -1;
    m->rows = n;
    m->nstack = nstack;
    m->ndim = nstack > 0 ? 2 : 1;
    m->shape[0] = nstack > 0 ? nstack : n;
    m->shape[1] = nstack > 0 ? n : 0;
    return 0;
}

/* put() of layer l's bias "h.<l>.<ours>" of n elements, rows [row0, row0 + n),
 * or zeros where the model has no such bias. */
static int put_bias(MapBuild *b, const char *hf_prefix, int l, const char *hf, const char *ours,
                    int64_t row0, int64_t n) {
    char o[96];
    snprintf(o, sizeof o, "h.%d.%s", l, ours);
    return lt_params_find(b->t, o) ? put_layer(b, hf_prefix, l, hf, ours, row0, n, 0)
                                   : put_zeros(b, hf_prefix, l, hf, 0, n);
}

/* gpt-oss's stacked expert tensor "<hf_prefix>.<l>.mlp.experts.<hf>": the
 * parameters h.<l>.mlp.experts.<e>.<ours> of every expert e along a new first
 * dimension, each transposed and/or with its gate | up halves interleaved
 * (bias_len zeros per expert for a bias the model lacks). */
static int put_experts(MapBuild *b, const char *hf_prefix, const LtModelDims *d, int l, const char *hf,
                       const char *ours, int64_t bias_len, int interleave, int transpose) {
    const int E = d->moe.experts;
    char h[128], o[96];
    snprintf(h, sizeof h, "mlp.experts.%s", hf);
    snprintf(o, sizeof o, "h.%d.mlp.experts.0.%s", l, ours);
    const LtParam *p0 = lt_params_find(b->t, o);
    if (!p0) return put_zeros(b, hf_prefix, l, h, E, bias_len);
    int stride = 0;
    for (int e = 1; e < E; e++) { /* the experts' parameters lie at a fixed stride */
        snprintf(o, sizeof o, "h.%d.mlp.experts.%d.%s", l, e, ours);
        const LtParam *p = lt_params_find(b->t, o);
        if (!p) return lt_errorf(b->err, b->errlen, "the model has no parameter '%s'", o);
        if (e == 1) stride = (int)(p - p0);
        else if (p - p0 != (ptrdiff_t)stride * e)
            return lt_errorf(b->err, b->errlen, "expert %d's '%s' is not where the stack puts it", e, ours);
    }
    snprintf(o, sizeof o, "mlp.experts.0.%s", ours);
    if (put_layer(b, hf_prefix, l, h, o, 0, 0, transpose)) return -1;
    LtHfMap *m = &b->m[b->n - 1];
    m->interleave = interleave;
    m->nstack = E;
    m->stride = stride;
    m->ndim = p0->ndim + 1;
    m->shape[2] = m->shape[1];
    m->shape[1] = m->shape[0];
    m->shape[0] = E;
    return 0;
}

/* gpt-oss's sinks and MoE block of layer l (its q/k/v/o biases are mapped
 * with the attention): the sinks (h.L.attn.softmax_offset; zeros for
 * model.softmax_type=off-by-one, whose extra logit is 0), the router's weight
 * and bias, and the experts stacked as (E, in, out) with gate and up
 * interleaved (gate_up_proj[..., ::2] is the gate). */
static int map_gptoss_layer(MapBuild *b, const LtModelDims *d, int l) {
    const char *L = "model.layers";
    return put_bias(b, L, l, "self_attn.sinks", "attn.softmax_offset", 0, d->heads) ||
                   put_layer(b, L, l, "mlp.router.weight", "mlp.router.weight", 0, 0, 0) ||
                   put_bias(b, L, l, "mlp.router.bias", "mlp.router.bias", 0, d->moe.experts) ||
                   put_experts(b, L, d, l, "gate_up_proj", "gate_up.weight", 0, 1, 1) ||
                   put_experts(b, L, d, l, "gate_up_proj_bias", "gate_up.bias", 2 * d->moe.ffn, 1, 0) ||
                   put_experts(b, L, d, l, "down_proj", "down.weight", 0, 0, 1) ||
                   put_experts(b, L, d, l, "down_proj_bias", "down.bias", d->hidden, 0, 0)
               ? -1
               : 0;
}

/* A SwiGLU MLP of layer l, width F: the HF tensors "<hf>.<n[0]>.<what>" (gate),
 * "<hf>.<n[1]>.<what>" (up) and "<hf>.<n[2]>.<what>" (down) from the row blocks
 * gate and up of our "<ours>.gate_up.<what>" and "<ours>.down.<what>" (what:
 * "weight" or "bias"). The dense MLP, an expert and the shared expert alike. */
static int map_glu(MapBuild *b, int l, const char *hf, const char *const *n, const char *ours, int64_t F,
                   const char *what) {
    const char *L = "model.layers";
    char h[3][96], o[2][96];
    for (int k = 0; k < 3; k++) snprintf(h[k], sizeof h[k], "%s.%s.%s", hf, n[k], what);
    snprintf(o[0], sizeof o[0], "%s.gate_up.%s", ours, what);
    snprintf(o[1], sizeof o[1], "%s.down.%s", ours, what);
    return put_layer(b, L, l, h[0], o[0], 0, F, 0) || put_layer(b, L, l, h[1], o[0], F, F, 0) ||
           put_layer(b, L, l, h[2], o[1], 0, 0, 0);
}

/* Llama's (and Qwen's) names of a SwiGLU MLP's gate, up and down projections. */
static const char *const glu_names[3] = {"gate_proj", "up_proj", "down_proj"};

/* The sparse MoE block of layer l as Mixtral's published checkpoints name it
 * (block_sparse_moe.gate, experts.E.w1 (gate) / w3 (up) / w2 (down)), or
 * Qwen2-MoE's and Qwen3-MoE's (qwen: mlp.gate, experts.E.gate_proj / up_proj /
 * down_proj): the router, then per expert the row blocks gate and up of our
 * gate_up, and down; then Qwen2-MoE's shared expert (mlp.shared_expert.*_proj,
 * our mlp.shared) and its gate (mlp.shared_expert_gate, our mlp.shared_gate),
 * which export refuses in the other classes. */
static int map_sparse_moe(MapBuild *b, const LtModelDims *d, int l, int qwen) {
    static const char *const mixtral[3] = {"w1", "w3", "w2"};
    const char *L = "model.layers";
    if (put_layer(b, L, l, qwen ? "mlp.gate.weight" : "block_sparse_moe.gate.weight", "mlp.router.weight",
                  0, 0, 0))
        return -1;
    for (int e = 0; e < d->moe.experts; e++) {
        char hf[64], ours[64];
        snprintf(hf, sizeof hf, "%s.experts.%d", qwen ? "mlp" : "block_sparse_moe", e);
        snprintf(ours, sizeof ours, "mlp.experts.%d", e);
        if (map_glu(b, l, hf, qwen ? glu_names : mixtral, ours, d->moe.ffn, "weight")) return -1;
    }
    if (d->moe.shared_ffn > 0 &&
        map_glu(b, l, "mlp.shared_expert", glu_names, "mlp.shared", d->moe.shared_ffn, "weight"))
        return -1;
    return d->moe.shared_gate
               ? put_layer(b, L, l, "mlp.shared_expert_gate.weight", "mlp.shared_gate.weight", 0, 0, 0)
               : 0;
}

static int map_llama(MapBuild *b, const LtModelDims *d) {
    const int64_t HD = lt_dims_head_dim(d), Q = (int64_t)d->heads * HD,
                  KV = (int64_t)lt_dims_kv_heads(d) * HD, F = d->ffn;
    const char *L = "model.layers";
    if (put(b, "model.embed_tokens.weight", "wte", 0, d->vocab, 0)) return -1;
    for (int l = 0; l < d->num_layers; l++)
        if (put_layer(b, L, l, "input_layernorm.weight", "ln_1.weight", 0, 0, 0) ||
            put_layer(b, L, l, "self_attn.q_proj.weight", "attn.qkv.weight", 0, Q, 0) ||
            put_layer(b, L, l, "self_attn.k_proj.weight", "attn.qkv.weight", Q, KV, 0) ||
            put_layer(b, L, l, "self_attn.v_proj.weight", "attn.qkv.weight", Q + KV, KV, 0) ||
            (d->qk_norm && /* Qwen3's per-head norms */
             (put_layer(b, L, l, "self_attn.q_norm.weight", "attn.q_norm.weight", 0, 0, 0) ||
              put_layer(b, L, l, "self_attn.k_norm.weight", "attn.k_norm.weight", 0, 0, 0))) ||
            put_layer(b, L, l, "self_attn.o_proj.weight", "attn.proj.weight", 0, 0, 0) ||
            ((lt_dims_qkv_bias(d) || lt_hf_gptoss(d)) && /* gpt-oss: zeros when absent */
             (put_bias(b, L, l, "self_attn.q_proj.bias", "attn.qkv.bias", 0, Q) ||
              put_bias(b, L, l, "self_attn.k_proj.bias", "attn.qkv.bias", Q, KV) ||
              put_bias(b, L, l, "self_attn.v_proj.bias", "attn.qkv.bias", Q + KV, KV))) ||
            ((lt_dims_linear_bias(d) || lt_hf_gptoss(d)) &&
             put_bias(b, L, l, "self_attn.o_proj.bias", "attn.proj.bias", 0, d->hidden)) ||
            put_layer(b, L, l, "post_attention_layernorm.weight", "ln_2.weight", 0, 0, 0) ||
            (lt_hf_gptoss(d)            ? map_gptoss_layer(b, d, l)
             : lt_dims_moe_layer(d, l) ? map_sparse_moe(b, d, l, strcmp(lt_hf_class(d).type, "mixtral") != 0)
                                       : map_glu(b, l, "mlp", glu_names, "mlp", F, "weight") ||
                                             (lt_dims_linear_bias(d) && /* LlamaForCausalLM's mlp_bias */
                                              map_glu(b, l, "mlp", glu_names, "mlp", F, "bias"))))
            return -1;
    return put(b, "model.norm.weight", "ln_f.weight", 0, 0, 0);
}

int lt_hf_gptoss(const LtModelDims *d) {
    return d->arch == LT_ARCH_LLAMA && d->moe.experts > 0 && d->glu.quick;
}

int lt_hf_qwen3moe(const LtModelDims *d) {
    return d->arch == LT_ARCH_LLAMA && d->moe.experts > 0 && d->qk_norm && !d->glu.quick;
}

LtHfClass lt_hf_class(const LtModelDims *d) {
    const int moe = d->moe.experts > 0;
    if (d->arch != LT_ARCH_LLAMA) return (LtHfClass){"GPT2LMHeadModel", "gpt2"};
    if (lt_hf_gptoss(d)) return (LtHfClass){"GptOssForCausalLM", "gpt_oss"};
    if (lt_hf_qwen3moe(d)) return (LtHfClass){"Qwen3MoeForCausalLM", "qwen3_moe"};
    if (moe && d->moe.shared_gate) /* a gated shared expert, no q/k norms */
        return (LtHfClass){"Qwen2MoeForCausalLM", "qwen2_moe"};
    if (moe) return (LtHfClass){"MixtralForCausalLM", "mixtral"};
    if (d->qk_norm) return (LtHfClass){"Qwen3ForCausalLM", "qwen3"};
    if (d->qkv_bias && !d->linear_bias) return (LtHfClass){"Qwen2ForCausalLM", "qwen2"};
    return (LtHfClass){"LlamaForCausalLM", "llama"};
}

int lt_hf_map(const LtParamTable *t, LtHfMap **out, char *err, size_t errlen) {
    const LtModelDims *d = &t->dims;
    const int64_t per_layer = 20 + (d->moe.experts > 0 ? 5 + 3 * (int64_t)d->moe.experts : 0),
                  cap = 8 + per_layer * d->num_layers;
    if (cap > INT_MAX) {
        *out = NULL;
        return lt_errorf(err, errlen, "%d layers of %d experts: more Hugging Face tensors than "
                         "lattice maps", d->num_layers, d->moe.experts);
    }
    MapBuild b = {t, NULL, 0, (int)cap, err, errlen};
    b.m = lt_calloc(sizeof *b.m * (size_t)b.cap);
    int rc = d->arch == LT_ARCH_LLAMA ? map_llama(&b, d) : map_gpt(&b, d);
    if (rc == 0 && d->untied) rc = put(&b, "lm_head.weight", "lm_head.weight", 0, d->vocab, 0);
    if (rc) {
        free(b.m);
        *out = NULL;
        return -1;
    }
    *out = b.m;
    return b.n;
}
