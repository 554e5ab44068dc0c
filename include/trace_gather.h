/* trace_gather.h - opening a run's trace (trace.h) on every rank at once
 * over the world's communicator (comm.h), which lt_trace_stop then uses to
 * merge every rank's events into one file on rank 0. */
#ifndef LT_TRACE_GATHER_H
#define LT_TRACE_GATHER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over the world when path is set (a barrier fixes the origin):
 * record into memory from now on, written to path by lt_trace_stop (trace.h).
 * process_name names this rank's row. path "" records nothing (NVTX may
 * still be on). Rank 0 checks at once that path can be created (exits with
 * code 2 naming logging.trace). */
void lt_trace_open(const char *path, int rank, int world, const char *process_name);

#ifdef __cplusplus
}
#endif

#endif
