/* params.c - the GPT parameter table and its layout-independent init. */
#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static LtParam *add(LtParamTable *t, int *cap, LtSplit split, LtInitKind init, float std,
                    int decay, int64_t r, int64_t c, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));

/* A new zeroed last entry of t (cap: the entries t->p has room for). */
static LtParam *append(LtParamTable *t, int *cap) {
    if (t->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        LtParam *np = lt_malloc(sizeof(LtParam) * (size_t)*cap);
        if (t->n) memcpy(np, t->p, sizeof(LtParam) * (size_t)t->n);
        free(t->p);
        t->p = np;
    }
    LtParam *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    return p;
}

static LtParam *add(LtParamTable *t, int *cap, LtSplit split, LtInitKind init, float std,
                    int decay, int64_t r, int64_t c, const char *fmt, ...) {
    LtParam *p = append(t, cap);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = c > 0 ? 2 : 1;
    p->gshape[0] = r;
    p->gshape[1] = c > 0 ? c : 1;
    p->split = split;
    p->shape[0] = split == LT_SPLIT_ROWS || split == LT_SPLIT_BLOCKS ? r / t->tp : r;
    p->shape[1] = split == LT_SPLIT_COLS ? p->gshape[1] / t->tp : p->gshape[1];
    p->numel = (size_t)p->shape[0] * (size_t)p->shape[1];
    p->offset = t->total;
    p->decay = decay;
    p->init = init;
    p->init_std = std;
    p->rows_valid = (int)r;
    t->total += p->numel;
    return p;
}

void lt_params_build(LtParamTable *t, const LtModelDims *d) { lt_params_build_tp(t, d, 1, 0); }

void lt_params_build_tp(LtParamTable *t, const LtModelDims *d, int tp, int tp_rank) {
    LtStagePlace whole = {1, 0, 1, {0}};
    lt_params_build_stage(t, d, tp, tp_rank, whole);
}

int lt_params_chunk_layers(const LtParamTable *t, int c) {
    const LtStagePlace *p = &t->place;
    return lt_layer_split_count(&p->split, t->dims.num_layers, p->pp, p->vpp, p->pp_rank, c);
}

int lt_params_chunk_first(const LtParamTable *t, int c) {
    int l = 0;
    for (int k = 0; k < c; k++) l += lt_params_chunk_layers(t, k);
    return l;
}

int lt_params_global_layer(const LtParamTable *t, int l) {
    const LtStagePlace *p = &t->place;
    LT_CHECK(l >= 0 && l < t->layers);
    int c = 0, n;
    while (l >= (n = lt_params_chunk_layers(t, c))) l -= n, c++;
    return lt_layer_split_start(&p->split, t->dims.num_layers, p->pp, p->vpp, p->pp_rank, c) + l;
}

/* A dim-0-blocked parameter: nb blocks of rows[k] global rows, each split over TP. */
static LtParam *add_blocks(LtParamTable *t, int *cap, LtInitKind init, float std, int decay,
                           int nb, const int64_t *rows, int64_t c, const char *name) {
    int64_t r = 0;
    for (int k = 0; k < nb; k++) {
        LT_CHECK(rows[k] % t->tp == 0);
        r += rows[k];
    }
    LtParam *p = add(t, cap, LT_SPLIT_BLOCKS, init, std, decay, r, c, "%s", name);
    p->nblocks = nb;
    for (int k = 0; k < nb; k++) p->block_rows[k] = rows[k];
    return p;
}

/* The attention half of a layer: GPT's 8 parameters (ln_1, qkv, proj with
 * biases, ln_2), Llama's 4 (no biases; 6 with the per-head q and k norms; the
 * qkv and proj biases when dims ask for them); one more with learnable softmax
 * offsets. */
static void add_attention(LtParamTable *t, int *cap, const LtModelDims *d, int l, float std,
                          float proj_std) {
    const int llama = d->arch == LT_ARCH_LLAMA;
    const int64_t C = d->hidden, HD = lt_dims_head_dim(d), kv = lt_dims_kv_heads(d) * HD;
    const int64_t qkv[3] = {d->heads * HD, kv, kv};
    char nm[96];
    add(t, cap, LT_SPLIT_NONE, LT_INIT_ONES, 0, 0, C, 0, "h.%d.ln_1.weight", l);
    if (!llama) add(t, cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.ln_1.bias", l);
    snprintf(nm, sizeof nm, "h.%d.attn.qkv.weight", l);
    add_blocks(t, cap, LT_INIT_NORMAL, std, 1, 3, qkv, C, nm);
    if (lt_dims_qkv_bias(d)) {
        snprintf(nm, sizeof nm, "h.%d.attn.qkv.bias", l);
        add_blocks(t, cap, LT_INIT_ZEROS, 0, 0, 3, qkv, 0, nm);
    }
    if (llama && d->qk_norm) {
        add(t, cap, LT_SPLIT_NONE, LT_INIT_ONES, 0, 0, HD, 0, "h.%d.attn.q_norm.weight", l);
        add(t, cap, LT_SPLIT_NONE, LT_INIT_ONES, 0, 0, HD, 0, "h.%d.attn.k_norm.weight", l);
    }
    if (lt_dims_sinks(d) == 2) /* Megatron-Core: init_method, a 1-D parameter (no decay) */
        add(t, cap, LT_SPLIT_ROWS, LT_INIT_NORMAL, std, 0, d->heads, 0,
            "h.%d.attn.softmax_offset", l);
    add(t, cap, LT_SPLIT_COLS, LT_INIT_NORMAL, proj_std, 1, C, d->heads * HD,
        "h.%d.attn.proj.weight", l);
    if (lt_dims_linear_bias(d))
        add(t, cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.attn.proj.bias", l);
    add(t, cap, LT_SPLIT_NONE, LT_INIT_ONES, 0, 0, C, 0, "h.%d.ln_2.weight", l);
    if (!llama) add(t, cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.ln_2.bias", l);
}

int lt_params_attn_count(const LtModelDims *d) {
    const int sinks = lt_dims_sinks(d) == 2;
    if (d->arch != LT_ARCH_LLAMA) return 8 + sinks;
    return 4 + 2 * !!d->qk_norm + lt_dims_qkv_bias(d) + lt_dims_linear_bias(d) + sinks;
}

int lt_params_ffn_count(const LtModelDims *d) {
    return d->arch != LT_ARCH_LLAMA ? 4 : 2 + 2 * lt_dims_linear_bias(d);
}

/* One FFN of width F named h.<l>.<pre>.*: GPT fc.{weight,bias}, proj.{weight,bias}
 * (4 parameters), Llama gate_up.weight, down.weight (2; with the linear biases
 * each followed by its bias: 4). split: over TP as Megatron's MLP (column- then
 * row-parallel), else whole on every rank. */
static void add_ffn(LtParamTable *t, int *cap, const LtModelDims *d, int l, const char *pre,
                    int64_t F, int split, float std, float proj_std) {
    const int64_t C = d->hidden, gu[2] = {F, F};
    const LtSplit rows = split ? LT_SPLIT_ROWS : LT_SPLIT_NONE,
                  cols = split ? LT_SPLIT_COLS : LT_SPLIT_NONE;
    char nm[96];
    if (d->arch == LT_ARCH_LLAMA) {
        const int bias = lt_dims_linear_bias(d);
        for (int b = 0; b < 1 + bias; b++) { /* gate_up.weight (, gate_up.bias) */
            snprintf(nm, sizeof nm, "h.%d.%s.gate_up.%s", l, pre, b ? "bias" : "weight");
            const LtInitKind init = b ? LT_INIT_ZEROS : LT_INIT_NORMAL;
            const int64_t c = b ? 0 : C;
            if (split)
                add_blocks(t, cap, init, b ? 0 : std, !b, 2, gu, c, nm);
            else
                add(t, cap, LT_SPLIT_NONE, init, b ? 0 : std, !b, 2 * F, c, "%s", nm);
        }
        add(t, cap, cols, LT_INIT_NORMAL, proj_std, 1, C, F, "h.%d.%s.down.weight", l, pre);
        if (bias) add(t, cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.%s.down.bias", l, pre);
        return;
    }
    add(t, cap, rows, LT_INIT_NORMAL, std, 1, F, C, "h.%d.%s.fc.weight", l, pre);
    add(t, cap, rows, LT_INIT_ZEROS, 0, 0, F, 0, "h.%d.%s.fc.bias", l, pre);
    add(t, cap, cols, LT_INIT_NORMAL, proj_std, 1, C, F, "h.%d.%s.proj.weight", l, pre);
    add(t, cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.%s.proj.bias", l, pre);
}

/* Layer l: the attention half, then the MLP, or the MoE layer's shared expert,
 * router and experts (params.h). */
static void add_layer(LtParamTable *t, int *cap, const LtModelDims *d, int l, float std,
                      float proj_std) {
    add_attention(t, cap, d, l, std, proj_std);
    if (!lt_dims_moe_layer(d, l)) {
        add_ffn(t, cap, d, l, "mlp", d->ffn, 1, std, proj_std);
        return;
    }
    const LtMoeDims *e = &d->moe;
    if (e->shared_ffn > 0) add_ffn(t, cap, d, l, "mlp.shared", e->shared_ffn, 1, std, proj_std);
    if (e->shared_gate) /* Megatron-Core's SharedExpertMLP gate_weight: init_method, decayed */
        add(t, cap, LT_SPLIT_NONE, LT_INIT_NORMAL, std, 1, 1, d->hidden,
            "h.%d.mlp.shared_gate.weight", l);
    add(t, cap, LT_SPLIT_NONE, LT_INIT_NORMAL, std, 1, e->experts, d->hidden,
        "h.%d.mlp.router.weight", l);
    if (lt_dims_router_bias(d)) /* Megatron-Core's TopKRouter: init_method, as the weight */
        add(t, cap, LT_SPLIT_NONE, LT_INIT_NORMAL, std, 0, e->experts, 0, "h.%d.mlp.router.bias",
            l);
    if (e->expert_bias)
        add(t, cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, e->experts, 0, "h.%d.mlp.expert_bias", l);
    for (int x = 0; x < e->experts; x++) {
        char pre[48];
        snprintf(pre, sizeof pre, "mlp.experts.%d", x);
        add_ffn(t, cap, d, l, pre, e->ffn, 0, std, proj_std);
    }
}

int lt_params_layer_count(const LtModelDims *d, int l) {
    const int attn = lt_params_attn_count(d), ffn = lt_params_ffn_count(d);
    if (!lt_dims_moe_layer(d, l)) return attn + ffn;
    return attn + (d->moe.shared_ffn > 0 ? ffn : 0) + !!d->moe.shared_gate + 1 +
           lt_dims_router_bias(d) +
           !!d->moe.expert_bias + d->moe.experts * ffn;
}

void lt_params_build_stage(LtParamTable *t, const LtModelDims *d, int tp, int tp_rank,
                           LtStagePlace place) {
    memset(t, 0, sizeof *t);
    t->dims = *d;
    t->tp = tp;
    t->tp_rank = tp_rank;
    t->place = place;
    const int llama = d->arch == LT_ARCH_LLAMA, kvh = lt_dims_kv_heads(d);
    LT_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp);
    LT_CHECK(d->heads % tp == 0 && kvh % tp == 0 && d->heads % kvh == 0 && d->ffn % tp == 0 &&
             d->padded_vocab % tp == 0);
    LT_CHECK(place.pp >= 1 && place.vpp >= 1 && place.pp_rank >= 0 && place.pp_rank < place.pp);
    LT_CHECK(lt_layer_split_check(&place.split, d->num_layers, place.pp, place.vpp, NULL, 0) == 0);
    for (int c = 0; c < place.vpp; c++) {
        const int n = lt_params_chunk_layers(t, c);
        t->layers += n;
        if (n > t->max_chunk_layers) t->max_chunk_layers = n;
    }
    t->first_stage = place.pp_rank == 0;
    t->last_stage = place.pp_rank == place.pp - 1;
    t->idx_wte = t->idx_wpe = t->idx_lnf = t->idx_head = -1;
    int cap = 0;
    const int64_t C = d->hidden;
    const int L = d->num_layers, nemb = llama ? 1 : 2; /* wte (, wpe) */
    /* Megatron's init_method_normal and, for the residual output projections,
     * scaled_init_method_normal: std / sqrt(2 * num_layers) */
    const float std = d->init_std > 0 ? (float)d->init_std : 0.02f;
    const float proj_std = std / sqrtf(2.0f * (float)d->num_layers);
    /* the tied LM head is wte: the last stage holds a copy of it */
    if (t->first_stage || (t->last_stage && !d->untied)) {
        t->idx_wte = t->n;
        LtParam *wte =
            add(t, &cap, LT_SPLIT_ROWS, LT_INIT_NORMAL, std, 1, d->padded_vocab, C, "wte");
        wte->rows_valid = d->vocab; /* padded rows start (and stay) zero */
        wte->gidx = 0;
        wte->tied_copy = !t->first_stage;
    }
    if (t->first_stage && !llama) {
        t->idx_wpe = t->n;
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_NORMAL, std, 1, d->max_pos, C, "wpe")->gidx = 1;
    }
    /* global table index of each layer's first parameter */
    int *gfirst = lt_malloc(sizeof(int) * (size_t)(L + 1));
    gfirst[0] = nemb;
    for (int l = 0; l < L; l++) gfirst[l + 1] = gfirst[l] + lt_params_layer_count(d, l);
    t->idx_layer0 = t->n;
    t->layer_first = lt_malloc(sizeof(int) * (size_t)(t->layers + 1));
    for (int ll = 0; ll < t->layers; ll++) {
        const int l = lt_params_global_layer(t, ll), first = t->n;
        t->layer_first[ll] = first;
        add_layer(t, &cap, d, l, std, proj_std);
        LT_CHECK(t->n - first == gfirst[l + 1] - gfirst[l]);
        for (int k = first; k < t->n; k++) t->p[k].gidx = gfirst[l] + (k - first);
    }
    t->layer_first[t->layers] = t->n;
    const int g = gfirst[L]; /* global index of ln_f.weight */
    free(gfirst);
    if (t->last_stage) {
        t->idx_lnf = t->n;
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ONES, 0, 0, C, 0, "ln_f.weight")->gidx = g;
        if (!llama) add(t, &cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "ln_f.bias")->gidx = g + 1;
        if (d->untied) {
            t->idx_head = t->n;
            LtParam *h = add(t, &cap, LT_SPLIT_ROWS, LT_INIT_NORMAL, std, 1, d->padded_vocab, C,
                             "lm_head.weight");
            h->rows_valid = d->vocab;
            h->gidx = g + (llama ? 1 : 2);
        }
    }
}

/* Copy parameter p to the end of t, at the end of t's flat buffer. */
static void keep(LtParamTable *t, int *cap, const LtParam *p) {
    LtParam *q = append(t, cap);
    *q = *p;
    q->offset = t->total;
    t->total += q->numel;
}

/* An empty table for the layers of s (layer_first to be filled). */
static void split_header(LtParamTable *t, const LtParamTable *s) {
    memset(t, 0, sizeof *t);
    t->dims = s->dims;
    t->tp = s->tp;
    t->tp_rank = s->tp_rank;
    t->place = s->place;
    t->layers = s->layers;
    t->max_chunk_layers = s->max_chunk_layers;
    t->idx_wte = t->idx_wpe = t->idx_lnf = t->idx_head = -1;
    t->layer_first = lt_malloc(sizeof(int) * (size_t)(s->layers + 1));
}

/* Index k of s in the dense table of the split: k less the expert entries
 * before it (nexp[ll]: expert entries of s's local layers before layer ll). */
static int dense_index(const LtParamTable *s, const int *nexp, int k) {
    if (k < 0) return -1;
    int ll = 0;
    while (ll < s->layers && s->layer_first[ll + 1] <= k) ll++;
    return k - nexp[ll];
}

/* Expert parameter p cut over etp ranks as Megatron-Core's expert MLP under
 * expert tensor parallelism: the first GEMM's weight (fc, or Llama's gate |
 * up blocks) and bias by output rows, the second's weight (proj, down) by
 * input columns; its bias (proj.bias, down.bias) stays whole. Shapes follow the table's tp (etp). */
static void expert_shard(LtParamTable *t, LtParam *p) {
    const int64_t F = p->gshape[0];
    if (t->tp == 1) return;
    if (strstr(p->name, ".gate_up.")) { /* weight and bias alike */
        p->split = LT_SPLIT_BLOCKS;
        p->nblocks = 2;
        p->block_rows[0] = p->block_rows[1] = F / 2;
    } else if (strstr(p->name, ".fc.")) {
        p->split = LT_SPLIT_ROWS;
    } else if (strstr(p->name, ".proj.weight") || strstr(p->name, ".down.weight")) {
        p->split = LT_SPLIT_COLS;
    }
    p->shape[0] = p->split == LT_SPLIT_ROWS || p->split == LT_SPLIT_BLOCKS ? p->gshape[0] / t->tp
                                                                          : p->gshape[0];
    p->shape[1] = p->split == LT_SPLIT_COLS ? p->gshape[1] / t->tp : p->gshape[1];
    p->numel = (size_t)p->shape[0] * (size_t)p->shape[1];
}

void lt_params_build_split(LtParamTable *dense, LtParamTable *experts, const LtModelDims *d,
                           int tp, int tp_rank, LtStagePlace place, int ep, int ep_rank, int etp,
                           int etp_rank) {
    const int E = d->moe.experts, nffn = lt_params_ffn_count(d);
    LT_CHECK(ep >= 1 && ep_rank >= 0 && ep_rank < ep && E % ep == 0);
    LT_CHECK(etp >= 1 && etp_rank >= 0 && etp_rank < etp && (E == 0 || d->moe.ffn % etp == 0));
    LtParamTable s;
    lt_params_build_stage(&s, d, tp, tp_rank, place);
    split_header(dense, &s);
    split_header(experts, &s);
    experts->tp = etp; /* the expert shards' split (lt_param_global_index, rects) */
    experts->tp_rank = etp_rank;
    int capd = 0, cape = 0;
    int *nexp = lt_malloc(sizeof(int) * (size_t)(s.layers + 1)); /* expert entries before */
    nexp[0] = 0;
    for (int k = 0; k < s.idx_layer0; k++) keep(dense, &capd, &s.p[k]);
    for (int ll = 0; ll < s.layers; ll++) {
        const int end = s.layer_first[ll + 1];
        const int ex0 = lt_dims_moe_layer(d, lt_params_global_layer(&s, ll)) ? end - E * nffn : end;
        dense->layer_first[ll] = dense->n;
        experts->layer_first[ll] = experts->n;
        for (int k = s.layer_first[ll]; k < ex0; k++) keep(dense, &capd, &s.p[k]);
        for (int k = ex0; k < end; k++) {
            LT_CHECK(strstr(s.p[k].name, ".mlp.experts.") != NULL);
            if ((k - ex0) / nffn / (E / ep) != ep_rank) continue;
            LtParam p = s.p[k];
            expert_shard(experts, &p);
            keep(experts, &cape, &p);
        }
        nexp[ll + 1] = nexp[ll] + end - ex0;
    }
    dense->layer_first[s.layers] = dense->n;
    experts->layer_first[s.layers] = experts->n;
    for (int k = s.layer_first[s.layers]; k < s.n; k++) keep(dense, &capd, &s.p[k]);
    dense->first_stage = s.first_stage;
    dense->last_stage = s.last_stage;
    dense->idx_wte = s.idx_wte;
    dense->idx_wpe = s.idx_wpe;
    dense->idx_layer0 = s.idx_layer0;
    dense->idx_lnf = dense_index(&s, nexp, s.idx_lnf);
    dense->idx_head = dense_index(&s, nexp, s.idx_head);
    free(nexp);
    lt_params_free(&s);
}

void lt_params_free(LtParamTable *t) {
    free(t->p);
    free(t->layer_first);
    memset(t, 0, sizeof *t);
}

const LtParam *lt_params_find(const LtParamTable *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->p[i].name, name) == 0) return &t->p[i];
    return NULL;
}

size_t lt_param_global_index(const LtParamTable *t, const LtParam *p, size_t local) {
    size_t cols = (size_t)p->shape[1], i = local / cols, j = local % cols;
    size_t Cg = (size_t)p->gshape[1], r = (size_t)t->tp_rank;
    switch (p->split) {
    case LT_SPLIT_NONE: return local;
    case LT_SPLIT_ROWS: return (r * (size_t)p->shape[0] + i) * Cg + j;
    case LT_SPLIT_COLS: return i * Cg + r * cols + j;
    case LT_SPLIT_BLOCKS: {
        size_t g0 = 0; /* global first row of the block holding local row i */
        for (int b = 0; b < p->nblocks; b++) {
            const size_t rows = (size_t)p->block_rows[b] / (size_t)t->tp; /* on this rank */
            if (i < rows) return (g0 + r * rows + i) * Cg + j;
            i -= rows;
            g0 += (size_t)p->block_rows[b];
        }
        LT_CHECK(!"row outside the blocks");
        return local;
    }
    }
    return local;
}

void lt_params_to_global(const LtParamTable *t, const float *src, const LtParamTable *g,
                         float *dst, int with_replicated) {
    for (int k = 0; k < t->n; k++) {
        const LtParam *p = &t->p[k];
        if ((p->split == LT_SPLIT_NONE && !with_replicated) || p->tied_copy) continue;
        LT_CHECK(p->gidx < g->n && strcmp(g->p[p->gidx].name, p->name) == 0);
        const float *s = src + p->offset;
        float *d = dst + g->p[p->gidx].offset;
        for (size_t e = 0; e < p->numel; e++) d[lt_param_global_index(t, p, e)] = s[e];
    }
}

void lt_params_from_global(const LtParamTable *t, float *dst, const LtParamTable *g,
                           const float *src) {
    for (int k = 0; k < t->n; k++) {
        const LtParam *p = &t->p[k];
        LT_CHECK(p->gidx < g->n && strcmp(g->p[p->gidx].name, p->name) == 0);
        const float *s = src + g->p[p->gidx].offset;
        float *d = dst + p->offset;
        for (size_t e = 0; e < p->numel; e++) d[e] = s[lt_param_global_index(t, p, e)];
    }
}

int lt_params_copy_rows(const LtParamTable *src_t, const float *src, const LtParamTable *dst_t,
                        float *dst, char *err, size_t errlen) {
    for (int k = 0; k < dst_t->n; k++) {
        const LtParam *d = &dst_t->p[k], *s = lt_params_find(src_t, d->name);
        if (!s) return lt_errorf(err, errlen, "parameter '%s' is missing", d->name);
        if (s->gshape[1] != d->gshape[1])
            return lt_errorf(err, errlen, "parameter '%s' has %lld columns, expected %lld",
                             d->name, (long long)s->gshape[1], (long long)d->gshape[1]);
        size_t cols = (size_t)d->gshape[1];
        size_t rows = (size_t)(s->gshape[0] < d->gshape[0] ? s->gshape[0] : d->gshape[0]);
        memset(dst + d->offset, 0, (size_t)d->gshape[0] * cols * sizeof(float));
        memcpy(dst + d->offset, src + s->offset, rows * cols * sizeof(float));
    }
    return 0;
}

float lt_param_init_value(const LtParam *p, uint64_t seed, size_t index) {
    switch (p->init) {
    case LT_INIT_ZEROS: return 0.0f;
    case LT_INIT_ONES: return 1.0f;
    case LT_INIT_NORMAL:
        if (index / (size_t)p->gshape[1] >= (size_t)p->rows_valid) return 0.0f;
        return p->init_std * lt_normal_at(seed, lt_hash_bytes(p->name, strlen(p->name), 0), index);
    }
    return 0.0f;
}

void lt_params_init(const LtParamTable *t, uint64_t seed, float *out) {
    for (int i = 0; i < t->n; i++) {
        const LtParam *p = &t->p[i];
        float *dst = out + p->offset;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < p->numel; j++)
            dst[j] = lt_param_init_value(p, seed, lt_param_global_index(t, p, j));
    }
}

LtModelDims lt_dims_from_config(const LtConfig *c) {
    LtModelDims d = {
        .num_layers = c->model.num_layers,
        .hidden = c->model.hidden_size,
        .heads = c->model.num_attention_heads,
        .ffn = c->model.ffn_hidden_size,
        .seq_len = c->model.seq_length,
        .max_pos = c->model.max_position_embeddings,
        .vocab = c->model.vocab_size,
        .padded_vocab = c->model.padded_vocab_size,
        .arch = c->model.arch,
        .kv_heads = c->model.num_query_groups,
        .head_dim = c->model.kv_channels,
        .untied = c->model.untie_embeddings_and_output_weights,
        .qk_norm = c->model.qk_layernorm,
        .qkv_bias = c->model.add_qkv_bias || c->model.add_bias_linear == LT_BIAS_TRUE,
        .linear_bias = c->model.add_bias_linear == LT_BIAS_TRUE,
        .softmax_type = c->model.softmax_type,
        .norm_eps = (float)c->model.norm_epsilon,
        .rope_base = c->model.rotary_base,
        .rope = {.type = c->model.rope_scaling == LT_ROPE_LLAMA3 ? LT_ROPE_SCALING_LLAMA3
                         : c->model.rope_scaling == LT_ROPE_YARN ? LT_ROPE_SCALING_YARN
                                                                 : LT_ROPE_SCALING_NONE,
                 .factor = c->model.rope_scaling_factor,
                 .low_freq_factor = c->model.rope_low_freq_factor,
                 .high_freq_factor = c->model.rope_high_freq_factor,
                 .original_max_position = c->model.rope_original_max_position,
                 .beta_fast = c->model.rope_beta_fast,
                 .beta_slow = c->model.rope_beta_slow,
                 .truncate = c->model.rope_truncate,
                 .attention_factor = c->model.rope_attention_factor},
        .init_std = c->model.init_method_std,
        .moe = {.experts = c->model.num_experts,
                .topk = c->model.moe_router_topk,
                .ffn = c->model.moe_ffn_hidden_size,
                .shared_ffn = c->model.moe_shared_expert_intermediate_size,
                .shared_gate = c->model.moe_shared_expert_gate,
                .score = c->model.moe_router_score_function,
                .pre_softmax = c->model.moe_router_pre_softmax,
                .groups = c->model.moe_router_num_groups,
                .group_topk = c->model.moe_router_group_topk,
                .topk_scale = c->model.moe_router_topk_scaling_factor > 0
                                  ? (float)c->model.moe_router_topk_scaling_factor
                                  : 1.0f,
                .balance = c->model.moe_router_load_balancing_type,
                .aux_coeff = (float)c->model.moe_aux_loss_coeff,
                .z_coeff = (float)c->model.moe_z_loss_coeff,
                .capacity = (float)c->model.moe_expert_capacity_factor,
                .drop_policy = c->model.moe_token_drop_policy,
                .pad = c->model.moe_pad_expert_input_to_capacity,
                .expert_bias = c->model.moe_router_enable_expert_bias,
                .bias_rate = (float)c->model.moe_router_bias_update_rate},
    };
    d.glu = (LtGlu){.quick = c->model.quick_geglu,
                    .offset = (float)c->model.glu_linear_offset,
                    .clamp = (float)c->model.activation_func_clamp_value};
    memcpy(d.moe.layer, c->model.moe_layer, sizeof d.moe.layer);
    d.window = c->model.window_left;
    memcpy(d.window_layer, c->model.window_layer, sizeof d.window_layer);
    return d;
}

/* ---- which global rectangles a local range covers ------------------------ */

/* Map a rectangle of local rows [lr, lr + nr) x columns [lc, lc + nc) of p's
 * shard to global coordinates; with blocks, a rectangle spanning a block
 * boundary becomes one rectangle per block. */
static int map_rect(const LtParamTable *t, const LtParam *p, int64_t lr, int64_t nr, int64_t lc,
                    int64_t nc, size_t local, LtRect *out) {
    const int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1, r = t->tp_rank;
    switch (p->split) {
    case LT_SPLIT_NONE: out[0] = (LtRect){lr, nr, lc, nc, local}; return 1;
    case LT_SPLIT_ROWS: out[0] = (LtRect){r * rows + lr, nr, lc, nc, local}; return 1;
    case LT_SPLIT_COLS: out[0] = (LtRect){lr, nr, r * cols + lc, nc, local}; return 1;
    case LT_SPLIT_BLOCKS: {
        int n = 0;
        int64_t lrow0 = 0, grow0 = 0; /* first local / global row of block b */
        for (int b = 0; b < p->nblocks; b++) {
            const int64_t brows = p->block_rows[b] / t->tp;
            const int64_t s = lr > lrow0 ? lr : lrow0, e = lr + nr < lrow0 + brows ? lr + nr : lrow0 + brows;
            if (s < e)
                out[n++] = (LtRect){grow0 + r * brows + (s - lrow0), e - s, lc, nc,
                                    local + (size_t)((s - lr) * cols)};
            lrow0 += brows;
            grow0 += p->block_rows[b];
        }
        return n;
    }
    }
    return 0;
}

int lt_param_rects(const LtParamTable *t, const LtParam *p, size_t a, size_t b,
                   LtRect out[LT_MAX_RECTS]) {
    const int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
    int n = 0;
    int64_t i = (int64_t)a;
    const int64_t end = (int64_t)b;
    if (i >= end) return 0;
    if (i % cols) { /* a partial first row */
        const int64_t c = i % cols, k = end - i < cols - c ? end - i : cols - c;
        n += map_rect(t, p, i / cols, 1, c, k, (size_t)i, out + n);
        i += k;
    }
    if (end - i >= cols) { /* full rows */
        const int64_t nr = (end - i) / cols;
        n += map_rect(t, p, i / cols, nr, 0, cols, (size_t)i, out + n);
        i += nr * cols;
    }
    if (i < end) n += map_rect(t, p, i / cols, 1, 0, end - i, (size_t)i, out + n); /* a partial last row */
    return n;
}
