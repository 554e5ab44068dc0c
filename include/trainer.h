/* trainer.h - the subcommands that run the model: train, eval, sample. */
#ifndef LT_TRAINER_H
#define LT_TRAINER_H

#include "config.h"
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Each returns the process exit code. The config must be validated. */
int lt_cmd_train(LtConfig *cfg, const LtWorld *w);
int lt_cmd_eval(LtConfig *cfg, const LtWorld *w);
int lt_cmd_sample(LtConfig *cfg, const LtWorld *w);

#ifdef __cplusplus
}
#endif

#endif
