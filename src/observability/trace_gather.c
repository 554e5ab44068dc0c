/* trace_gather.c - the trace recorder's world (see trace_gather.h): a
 * barrier for the common origin, and each rank's text sent to rank 0 as
 * [bytes, dropped] then the bytes, one rank at a time, so rank 0 holds one
 * rank's text at once whatever the world size. */
#include "trace_gather.h"

#include <stdlib.h>

#include "comm.h"
#include "common.h"
#include "trace.h"

/* ctx: the LtComm * slot that holds the world while a recording is open. */
static void world_open(void *ctx) {
    LtComm **world = ctx;
    *world = lt_comm_world("trace");
    lt_comm_barrier(*world);
}

static void world_send(void *ctx, const char *text, size_t n, double dropped) {
    LtComm *world = *(LtComm **)ctx;
    const double head[2] = {(double)n, dropped};
    lt_comm_send(world, head, 2, LT_COMM_F64, 0, 1);
    lt_comm_send(world, text, n, LT_COMM_U8, 0, 2);
}

static char *world_recv(void *ctx, int rank, size_t *n, double *dropped) {
    LtComm *world = *(LtComm **)ctx;
    double head[2];
    lt_comm_recv(world, head, 2, LT_COMM_F64, rank, 1);
    *n = (size_t)head[0];
    char *buf = lt_malloc(*n + 1);
    lt_comm_recv(world, buf, *n, LT_COMM_U8, rank, 2);
    *dropped += head[1];
    return buf;
}

static void world_close(void *ctx) {
    LtComm **world = ctx;
    lt_comm_free(*world);
    *world = NULL;
}

void lt_trace_open(const char *path, int rank, int world, const char *process_name) {
    static LtComm *world_comm;
    const LtTraceWorld ops = {&world_comm, world_open, world_send, world_recv, world_close};
    lt_trace_start(path, rank, world, process_name, &ops);
}
