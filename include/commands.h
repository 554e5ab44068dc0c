/* commands.h - the entry points of the subcommands that run the model (train:
 * src/training/trainer.c, eval: evaluate.c, sample and logits: sample.c) and of
 * batches (src/data/batches.c), which writes the token batches train reads.
 * src/main.c dispatches to them; each module implements its own. */
#ifndef LT_COMMANDS_H
#define LT_COMMANDS_H

#include "config.h"
#include "data.h"
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each returns the process exit code. The config must be validated. */
int lt_cmd_train(LtConfig *cfg, const LtWorld *w);
int lt_cmd_eval(LtConfig *cfg, const LtWorld *w);
int lt_cmd_sample(LtConfig *cfg, const LtWorld *w);
/* The model's fp32 next-token logits (true vocabulary) after each prefix of
 * the first model.seq_length tokens of the validation (else training) data,
 * from checkpoint.load: a line "tokens ID..." then one line of V numbers per
 * position, on stdout (for checking a model against another implementation). */
int lt_cmd_logits(LtConfig *cfg, const LtWorld *w);

/* The loader settings `lattice train` reads its data with (rows first ..
 * first+count-1 of each global batch). */
LtLoaderConfig lt_train_loader_config(const LtConfig *cfg, int first, int count);
/* `lattice batches`: write the token rows of the first train.steps global
 * batches to out_path (format in src/data/batches.c). Single process. */
int lt_cmd_batches(const LtConfig *cfg, const char *out_path);

#ifdef __cplusplus
}
#endif

#endif
