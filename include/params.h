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

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int num_layers, hidden, heads, ffn, seq_len, max_pos, vocab, padded_vocab;
} LtModelDims;

/* The model dimensions a validated config describes. */
LtModelDims lt_dims_from_config(const LtConfig *c);

typedef enum { LT_INIT_NORMAL = 0, LT_INIT_ZEROS, LT_INIT_ONES } LtInitKind;

typedef struct {
    char name[96];     /* internal name, e.g. "h.3.attn.qkv.weight" */
    int ndim;
    int64_t shape[2];
    size_t offset;     /* element offset in the flat buffer */
    size_t numel;
    int decay;         /* 1: weight decay applies (2-D parameters) */
    LtInitKind init;
    float init_std;    /* for LT_INIT_NORMAL */
    int rows_valid;    /* rows that get init (wte: true vocab; padded rows are zero) */
} LtParam;

typedef struct {
    LtParam *p;
    int n;
    size_t total;      /* elements */
    LtModelDims dims;
} LtParamTable;

/* Build the table for the GPT described by dims. Order: wte, wpe, then per
 * layer ln_1.{weight,bias}, attn.qkv.{weight,bias}, attn.proj.{weight,bias},
 * ln_2.{weight,bias}, mlp.fc.{weight,bias}, mlp.proj.{weight,bias}, then
 * ln_f.{weight,bias}. Shapes: wte (Vp,C), wpe (P,C), qkv.weight (3C,C),
 * proj.weight (C,C), fc.weight (F,C), mlp.proj.weight (C,F). */
void lt_params_build(LtParamTable *t, const LtModelDims *d);
void lt_params_free(LtParamTable *t);
const LtParam *lt_params_find(const LtParamTable *t, const char *name);

/* Initial value of element `index` (row-major, global) of parameter p. */
float lt_param_init_value(const LtParam *p, uint64_t seed, size_t index);
/* Fill out[t->total] with the initial fp32 values of every parameter. */
void lt_params_init(const LtParamTable *t, uint64_t seed, float *out);

#ifdef __cplusplus
}
#endif

#endif
