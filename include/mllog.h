/* mllog.h - MLPerf Training logging (logging.mllog): ":::MLLOG {json}" lines
 * from rank 0 with namespace, time_ms, event_type, key, value and metadata
 * (file, lineno, and the event's own fields), following the keys of
 * MLCommons' compliance checker rules for the benchmark named by
 * logging.mllog_benchmark (training 4.1.0 closed_gpt3, 5.1.0
 * closed_llama31_8b / closed_llama31_405b, 6.0.0 closed_gpt_oss_20b, and
 * their common rules).
 *
 * The event sequence of a training run, one call per point of the loop:
 *   lt_mllog_on_init       submission_*, cache_clear, init_start
 *   lt_mllog_on_run_start  hyperparameters, init_stop, run_start, block_start
 *   lt_mllog_on_eval       block_stop, eval_start, eval_accuracy, eval_stop
 *                          (and the next block_start) - at every evaluation
 *   lt_mllog_on_stop       run_stop
 * Each is a no-op where no log is open (ranks other than 0, or logging.mllog
 * unset). */
#ifndef LT_MLLOG_H
#define LT_MLLOG_H

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The start of initialisation: opens logging.mllog for append (rank 0; exits
 * 2 when the file cannot be opened). */
void lt_mllog_on_init(const LtConfig *c, int rank);
/* The start-up summary's line naming the log (when one is open). */
void lt_mllog_print_summary(void);
/* The end of initialisation and the start of training: every hyperparameter
 * the benchmark's closed-division rules require (accumulation: gradient
 * accumulation steps; init_step: the start checkpoint's step, 0 from
 * scratch; eval_samples: validation sequences each evaluation reads), then
 * the first block at samples_done (samples trained before this run). */
void lt_mllog_on_run_start(const LtConfig *c, int accumulation, long init_step,
                           long eval_samples, long samples_done);
/* An evaluation after samples_done trained samples (val_log_ppl; 1e9 in the
 * log when it is not finite); more: training goes on, a new block starts. */
void lt_mllog_on_eval(long samples_done, double val_log_ppl, int more);
/* run_stop, status success (the target was reached) or aborted; closes the
 * log. */
void lt_mllog_on_stop(int success);

#ifdef __cplusplus
}
#endif

#endif
