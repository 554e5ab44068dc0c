/* mllog.h - MLPerf Training logging (logging.mllog): ":::MLLOG {json}" lines
 * from rank 0 with namespace, time_ms, event_type, key, value and metadata
 * (file, lineno, and the event's own fields), following the keys of
 * MLCommons' compliance checker rules for the benchmark named by
 * logging.mllog_benchmark (training 4.1.0 closed_gpt3, 5.1.0
 * closed_llama31_8b / closed_llama31_405b, and their common rules). */
#ifndef LT_MLLOG_H
#define LT_MLLOG_H

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LT_MLLOG_POINT, LT_MLLOG_START, LT_MLLOG_END } LtMllogType;

/* Open (rank 0 with logging.mllog set; a no-op otherwise); exits 2 when the
 * file cannot be opened. Writes submission_* and cache_clear. */
void lt_mllog_open(const LtConfig *c, int rank);
void lt_mllog_close(void);
int lt_mllog_on(void);
/* One line; value_json and meta_json are JSON text (meta: members without
 * braces, may be NULL), file and line name the emitting code. */
void lt_mllog_at(LtMllogType type, const char *key, const char *value_json, const char *meta_json,
                 const char *file, int line);
#define lt_mllog(type, key, value, meta) lt_mllog_at((type), (key), (value), (meta), __FILE__, __LINE__)
/* Every hyperparameter the benchmark's closed-division rules require.
 * accumulation: gradient accumulation steps; init_step: the start
 * checkpoint's step (0 from scratch); eval_samples: validation sequences
 * each evaluation reads. */
void lt_mllog_hyperparameters(const LtConfig *c, int accumulation, long init_step,
                              long eval_samples);

#ifdef __cplusplus
}
#endif

#endif
