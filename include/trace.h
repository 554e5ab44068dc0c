/* trace.h - the run's timeline (logging.trace): spans of host work and of
 * communication recorded on every rank, merged over the world into one
 * Chrome trace-event file (the {"traceEvents": [...]} form that Perfetto and
 * chrome://tracing open); and, in builds with CUDA, the same spans as NVTX
 * ranges for Nsight Systems.
 *
 * Rows of the file: a process per world rank (pid = world rank, named
 * "rank R (tp T, pp P, dp D)"); in it a thread row per recording thread
 * (tid 1 "main", others as they name themselves with lt_trace_thread, else
 * "thread N") and the communication rows of each group ("comm tp",
 * "comm tp 2", ...). A thread's spans are begun and ended on a stack
 * (lt_trace_begin / lt_trace_end), so they nest. An operation that starts on
 * one call and ends on another (a collective's start .. finish) is an
 * LtTraceOp: it takes a communication row of its group that is free for its
 * whole life, so no row ever holds overlapping spans.
 *
 * Time: microseconds from an origin every rank takes on its own monotonic
 * clock right after a barrier (lt_trace_open: trace_gather.h), so the ranks' rows line up to
 * within the barrier's exit skew (microseconds on one node or a fast
 * network); nodes' clocks are not corrected for drift (it matters only over
 * hours).
 *
 * Cost: every call site is behind lt_trace_on() - one load and branch when
 * neither recording nor NVTX is on. Recording appends to one in-memory
 * buffer per rank under a mutex (any thread may record), capped at
 * LT_TRACE_MAX_EVENTS events; later events are dropped, counted and warned
 * about. NVTX (builds with CUDA) is on when a tool injected itself
 * (NVTX_INJECTION64_PATH set, as nsys does), with or without logging.trace. */
#ifndef LT_TRACE_H
#define LT_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LT_TRACE_MAX_EVENTS 200000 /* per rank */

enum { LT_TRACE_RECORD = 1, LT_TRACE_NVTX = 2 };
extern int lt_trace_mode; /* LT_TRACE_* bits; set by lt_trace_start, cleared by lt_trace_stop */
static inline int lt_trace_on(void) { return __atomic_load_n(&lt_trace_mode, __ATOMIC_RELAXED); }

/* How the recorder reaches the other ranks (trace_gather.c supplies the
 * world's communicator; the recorder itself depends on no module above base).
 * Called only for a recording with a path: open once at the start (a barrier
 * over the world; the origin is taken right after it), then at the stop
 * either send (rank > 0: this rank's text and dropped count to rank 0) or
 * recv for each other rank in turn (rank 0: rank r's text, malloc'd, n bytes;
 * *dropped += its dropped count), then close. */
typedef struct {
    void *ctx;
    void (*open)(void *ctx);
    void (*send)(void *ctx, const char *text, size_t n, double dropped);
    char *(*recv)(void *ctx, int rank, size_t *n, double *dropped);
    void (*close)(void *ctx);
} LtTraceWorld;

/* lt_trace_open (trace_gather.h) over the ranks that `world` reaches. */
void lt_trace_start(const char *path, int rank, int world, const char *process_name,
                    const LtTraceWorld *ops);
/* Collective over the world: stop recording, gather every rank's events to
 * rank 0, which writes the file atomically (path.tmp, then renamed). 0, or
 * -1 with the reason in err (rank 0: the file could not be written). A no-op
 * returning 0 when nothing is recorded or it was written already. A process
 * that exits without reaching it (an error) writes its own events to
 * path.rankR instead, from an exit handler. */
int lt_trace_stop(char *err, size_t errlen);
/* Name the calling thread's row (a string that outlives the run). */
void lt_trace_thread(const char *name);

/* A span of the calling thread: begin pushes (name: a string literal; args:
 * printf format of JSON members, e.g. "\"micro_batch\": %d", or NULL), end
 * pops and records it. Spans nest up to 16 deep; deeper ones are counted as
 * dropped. */
void lt_trace_begin(const char *name, const char *args_fmt, ...)
    __attribute__((format(printf, 2, 3)));
void lt_trace_end(void);
/* The call sites' form: one branch when tracing is off. */
#define LT_TRACE_BEGIN(...)                                                                 \
    do {                                                                                    \
        if (lt_trace_on()) lt_trace_begin(__VA_ARGS__);                                     \
    } while (0)
#define LT_TRACE_END()                                                                      \
    do {                                                                                    \
        if (lt_trace_on()) lt_trace_end();                                                  \
    } while (0)

/* An operation whose start and end are separate calls, on a row of `group`'s. */
typedef struct {
    int row;       /* 0: none (nothing begun, or not recording) */
    int64_t t0;    /* ns from the origin */
    uint64_t nvtx; /* NVTX range id, 0: none */
} LtTraceOp;
/* ns from the origin (lt_trace_start). */
int64_t lt_trace_now(void);
/* op begins at t0 (lt_trace_now() taken before the work). */
void lt_trace_op_begin(LtTraceOp *op, const char *group, const char *name, int64_t t0);
/* op ends now: its span is recorded (name: a string literal; args as above)
 * and its row freed; op is cleared. No-op for an op that did not begin. */
void lt_trace_op_end(LtTraceOp *op, const char *name, const char *args_fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
