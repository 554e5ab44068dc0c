/* params.c - the GPT parameter table and its layout-independent init. */
#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static LtParam *add(LtParamTable *t, int *cap, LtInitKind init, float std, int decay, int64_t r,
                    int64_t c, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

static LtParam *add(LtParamTable *t, int *cap, LtInitKind init, float std, int decay, int64_t r,
                    int64_t c, const char *fmt, ...) {
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
    p->shape[0] = r;
    p->shape[1] = c > 0 ? c : 1;
    p->numel = (size_t)r * (size_t)(c > 0 ? c : 1);
    p->offset = t->total;
    p->decay = decay;
    p->init = init;
    p->init_std = std;
    p->rows_valid = (int)r;
    t->total += p->numel;
    return p;
}

void lt_params_build(LtParamTable *t, const LtModelDims *d) {
    memset(t, 0, sizeof *t);
    t->dims = *d;
    int cap = 0;
    const int64_t C = d->hidden, F = d->ffn;
    const float std = 0.02f;
    const float proj_std = 0.02f / sqrtf(2.0f * (float)d->num_layers);
    LtParam *wte = add(t, &cap, LT_INIT_NORMAL, std, 1, d->padded_vocab, C, "wte");
    wte->rows_valid = d->vocab; /* padded rows start (and stay) zero */
    add(t, &cap, LT_INIT_NORMAL, std, 1, d->max_pos, C, "wpe");
    for (int l = 0; l < d->num_layers; l++) {
        add(t, &cap, LT_INIT_ONES, 0, 0, C, 0, "h.%d.ln_1.weight", l);
        add(t, &cap, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.ln_1.bias", l);
        add(t, &cap, LT_INIT_NORMAL, std, 1, 3 * C, C, "h.%d.attn.qkv.weight", l);
        add(t, &cap, LT_INIT_ZEROS, 0, 0, 3 * C, 0, "h.%d.attn.qkv.bias", l);
        add(t, &cap, LT_INIT_NORMAL, proj_std, 1, C, C, "h.%d.attn.proj.weight", l);
        add(t, &cap, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.attn.proj.bias", l);
        add(t, &cap, LT_INIT_ONES, 0, 0, C, 0, "h.%d.ln_2.weight", l);
        add(t, &cap, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.ln_2.bias", l);
        add(t, &cap, LT_INIT_NORMAL, std, 1, F, C, "h.%d.mlp.fc.weight", l);
        add(t, &cap, LT_INIT_ZEROS, 0, 0, F, 0, "h.%d.mlp.fc.bias", l);
        add(t, &cap, LT_INIT_NORMAL, proj_std, 1, C, F, "h.%d.mlp.proj.weight", l);
        add(t, &cap, LT_INIT_ZEROS, 0, 0, C, 0, "h.%d.mlp.proj.bias", l);
    }
    add(t, &cap, LT_INIT_ONES, 0, 0, C, 0, "ln_f.weight");
    add(t, &cap, LT_INIT_ZEROS, 0, 0, C, 0, "ln_f.bias");
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

float lt_param_init_value(const LtParam *p, uint64_t seed, size_t index) {
    switch (p->init) {
    case LT_INIT_ZEROS: return 0.0f;
    case LT_INIT_ONES: return 1.0f;
    case LT_INIT_NORMAL:
        if (index / (size_t)p->shape[1] >= (size_t)p->rows_valid) return 0.0f;
        return p->init_std * lt_normal_at(seed, lt_hash_bytes(p->name, strlen(p->name), 0), index);
    }
    return 0.0f;
}

void lt_params_init(const LtParamTable *t, uint64_t seed, float *out) {
    for (int i = 0; i < t->n; i++) {
        const LtParam *p = &t->p[i];
        float *dst = out + p->offset;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < p->numel; j++) dst[j] = lt_param_init_value(p, seed, j);
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
