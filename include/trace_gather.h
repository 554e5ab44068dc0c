/* trace_gather.h - the collective ends of a run's trace (trace.h): opening
 * the recording on every rank at once, and merging every rank's events into
 * one file on rank 0, over the world's communicator (comm.h). */
#ifndef LT_TRACE_GATHER_H
#define LT_TRACE_GATHER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over the world when path is set (a barrier fixes the origin):
 * record into memory from now on, written to path by lt_trace_finish.
 * process_name names this rank's row. path "" records nothing (NVTX may
 * still be on). Rank 0 checks at once that path can be created (exits with
 * code 2 naming logging.trace). */
void lt_trace_open(const char *path, int rank, int world, const char *process_name);
/* Collective over the world: stop recording, gather every rank's events to
 * rank 0, which writes the file atomically (path.tmp, then renamed). 0, or
 * -1 with the reason in err (rank 0: the file could not be written). A no-op
 * returning 0 when nothing is recorded or it was written already. A process
 * that exits without reaching it (an error) writes its own events to
 * path.rankR instead, from an exit handler. */
int lt_trace_finish(char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
