/* evaluate.h - internal: the validation loss, as training and `lattice eval`
 * compute it. src/training/evaluate.c; used by src/training/trainer.c. Not a
 * public header. */
#ifndef LT_EVALUATE_H
#define LT_EVALUATE_H

#include <stdint.h>

#include "engine.h"

/* Open the validation data into r->valid_blend and r->valid_order (nothing
 * when there is none): data.valid_path's file or blend, or with data.split
 * the evaluated part of every data.train_path dataset (all three parts'
 * token ranges into r->split_tok0/ntok; no validation data when the split
 * gives that part no share); check all of it, and set r->eval_samples from
 * eval.samples or eval.iters; exits 2 naming the key when a file is bad or
 * too short. */
void lt_eval_open_valid(LtRun *r);
/* Exit 2: data.split leaves dataset d of data.train_path (blend b) no
 * documents in part p (0 train, 1 validation, 2 test). */
void lt_split_refuse_empty(const LtConfig *c, const LtBlend *b, int d, int p);
/* Mean token loss over validation samples 0 .. r->eval_samples-1, taken
 * from the datasets in the blend's order, each dataset's in file order
 * (collective over every rank); *samples_out = r->eval_samples. */
double lt_evaluate(LtRun *r, long *samples_out);
/* Split n rows of S+1 tokens into inputs and targets of S tokens each. */
void lt_split_rows(const int32_t *rows, int n, int S, int32_t *in, int32_t *tgt);

#endif
