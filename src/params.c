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

static LtParam *add(LtParamTable *t, int *cap, LtSplit split, LtInitKind init, float std,
                    int decay, int64_t r, int64_t c, const char *fmt, ...) {
    if (t->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        LtParam *np = lt_malloc(sizeof(LtParam) * (size_t)*cap);
        if (t->n) memcpy(np, t->p, sizeof(LtParam) * (size_t)t->n);
        free(t->p);
        t->p = np;
    }
    LtParam *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = c > 0 ? 2 : 1;
    p->gshape[0] = r;
    p->gshape[1] = c > 0 ? c : 1;
    p->split = split;
    p->shape[0] = split == LT_SPLIT_ROWS || split == LT_SPLIT_QKV ? r / t->tp : r;
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
    LtStagePlace whole = {1, 0, 1};
    lt_params_build_stage(t, d, tp, tp_rank, whole);
}

int lt_params_global_layer(const LtParamTable *t, int l) {
    const int n = t->chunk_layers, c = l / n;
    return (c * t->place.pp + t->place.pp_rank) * n + l % n;
}

void lt_params_build_stage(LtParamTable *t, const LtModelDims *d, int tp, int tp_rank,
                           LtStagePlace place) {
    memset(t, 0, sizeof *t);
    t->dims = *d;
    t->tp = tp;
    t->tp_rank = tp_rank;
    t->place = place;
    LT_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp);
    LT_CHECK(d->heads % tp == 0 && d->ffn % tp == 0 && d->padded_vocab % tp == 0);
    LT_CHECK(place.pp >= 1 && place.vpp >= 1 && place.pp_rank >= 0 && place.pp_rank < place.pp);
    LT_CHECK(d->num_layers % (place.pp * place.vpp) == 0);
    t->chunk_layers = d->num_layers / (place.pp * place.vpp);
    t->first_stage = place.pp_rank == 0;
    t->last_stage = place.pp_rank == place.pp - 1;
    t->idx_wte = t->idx_wpe = t->idx_lnf = -1;
    int cap = 0;
    const int64_t C = d->hidden, F = d->ffn;
    const int L = d->num_layers;
    const float std = 0.02f;
    const float proj_std = 0.02f / sqrtf(2.0f * (float)d->num_layers);
    if (t->first_stage || t->last_stage) {
        t->idx_wte = t->n;
        LtParam *wte =
            add(t, &cap, LT_SPLIT_ROWS, LT_INIT_NORMAL, std, 1, d->padded_vocab, C, "wte");
        wte->rows_valid = d->vocab; /* padded rows start (and stay) zero */
        wte->gidx = 0;
        wte->tied_copy = !t->first_stage;
    }
    if (t->first_stage) {
        t->idx_wpe = t->n;
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_NORMAL, std, 1, d->max_pos, C, "wpe")->gidx = 1;
    }
    t->idx_layer0 = t->n;
    const int held = t->chunk_layers * place.vpp;
    for (int ll = 0; ll < held; ll++) {
        const int l = lt_params_global_layer(t, ll), first = t->n;
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ONES, 0, 0, C, 0, "h.%d.ln_1.weight", l);
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.ln_1.bias", l);
        add(t, &cap, LT_SPLIT_QKV, LT_INIT_NORMAL, std, 1, 3 * C, C, "h.%d.attn.qkv.weight", l);
        add(t, &cap, LT_SPLIT_QKV, LT_INIT_ZEROS, 0, 0, 3 * C, 0, "h.%d.attn.qkv.bias", l);
        add(t, &cap, LT_SPLIT_COLS, LT_INIT_NORMAL, proj_std, 1, C, C, "h.%d.attn.proj.weight", l);
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.attn.proj.bias", l);
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ONES, 0, 0, C, 0, "h.%d.ln_2.weight", l);
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.ln_2.bias", l);
        add(t, &cap, LT_SPLIT_ROWS, LT_INIT_NORMAL, std, 1, F, C, "h.%d.mlp.fc.weight", l);
        add(t, &cap, LT_SPLIT_ROWS, LT_INIT_ZEROS, 0, 0, F, 0, "h.%d.mlp.fc.bias", l);
        add(t, &cap, LT_SPLIT_COLS, LT_INIT_NORMAL, proj_std, 1, C, F, "h.%d.mlp.proj.weight", l);
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.mlp.proj.bias", l);
        for (int k = 0; k < LT_PARAMS_PER_LAYER; k++)
            t->p[first + k].gidx = 2 + LT_PARAMS_PER_LAYER * l + k;
    }
    if (t->last_stage) {
        t->idx_lnf = t->n;
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ONES, 0, 0, C, 0, "ln_f.weight")->gidx =
            2 + LT_PARAMS_PER_LAYER * L;
        add(t, &cap, LT_SPLIT_NONE, LT_INIT_ZEROS, 0, 0, C, 0, "ln_f.bias")->gidx =
            3 + LT_PARAMS_PER_LAYER * L;
    }
}

void lt_params_free(LtParamTable *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}

const LtParam *lt_params_find(const LtParamTable *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->p[i].name, name) == 0) return &t->p[i];
    return NULL;
}

size_t lt_param_global_index(const LtParamTable *t, const LtParam *p, size_t local) {
    size_t cols = (size_t)p->shape[1], i = local / cols, j = local % cols;
    size_t R = (size_t)p->gshape[0], Cg = (size_t)p->gshape[1], r = (size_t)t->tp_rank;
    switch (p->split) {
    case LT_SPLIT_NONE: return local;
    case LT_SPLIT_ROWS: return (r * (size_t)p->shape[0] + i) * Cg + j;
    case LT_SPLIT_COLS: return i * Cg + r * cols + j;
    case LT_SPLIT_QKV: {
        size_t block = (size_t)p->shape[0] / 3; /* rows of q (or k, v) on this rank */
        size_t s = i / block, w = i % block;
        return (s * (R / 3) + r * block + w) * Cg + j;
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
    };
    return d;
}
