/* comm_internal.h - between the front end of comm.h (src/comm/comm.c: groups,
 * argument checks, one-rank shortcuts, requests) and the implementations it
 * dispatches to, one per file with the same static shape:
 *   src/comm/comm_mpi.c     host buffers over nonblocking MPI (bf16 reduced in fp32)
 *   src/comm/comm_staged.c  device buffers staged through the backend's host memory
 *                      around the host path (built on backend entries only)
 *   src/comm/comm_nccl.c    NCCL on the backend's current stream (builds with CUDA)
 *   src/comm/comm_async.c   host buffers over MPI, run by a worker thread of the group
 *                      (the background companion of a host group)
 * Each group picks its table when it is created. Not a public header. */
#ifndef LT_COMM_INTERNAL_H
#define LT_COMM_INTERNAL_H

#include <mpi.h>

#include "comm.h"
#include "watchdog.h"

typedef struct LtCommImpl LtCommImpl;

struct LtComm {
    MPI_Comm comm;  /* MPI_COMM_NULL: no MPI (one-rank world) or not a member */
    int rank, size; /* rank -1 / size 0 when not a member */
    int *global;    /* group rank -> world rank */
    char name[48];
    LtCommLib lib;
    int device;     /* operations take device buffers of be */
    int borrowed;   /* host companion: comm and global belong to the parent */
    LtBackend *be;
    LtComm *host;   /* handle for host buffers (self for host groups) */
    const LtCommImpl *impl;
    void *state;    /* the implementation's own (impl->destroy frees it) */
    double busy_s;  /* seconds the calling thread spent in this group's operations
                     * (lt_comm_busy_seconds) */
    LtComm *bg;     /* the background companion (lt_comm_background), once made */
    LtStream *stream; /* NCCL background companion: the stream it issues on */
    int clock_kind;   /* device groups: the exposed kind (devclock.h) their operations
                       * are timed for; -1: not timed */
    int batch_span;   /* an open batch timed as one span (devclock.h): its handle, its
                       * operations not timed one by one; -1: none */
};

/* An implementation. The front end calls the operations only on a member of
 * a group of more than one rank, with checked arguments (member, type, count
 * within the limit, peer/root in the group, tag >= 0) and, for the
 * collectives but reduce_scatter_v, count > 0. r arrives idle with comm and
 * op set (peer for send/recv); an operation marks it active and keeps its
 * handle in r->handle, or leaves it idle when it completed before returning.
 * The front end clears active and handle after finish, and after test when
 * it returns 1. */
struct LtCommImpl {
    const char *name;
    int wide_counts; /* counts above INT_MAX are fine */
    void (*create)(LtComm *c);  /* (optional) collective over the group's members */
    void (*destroy)(LtComm *c); /* frees c->state */
    void (*all_reduce)(LtCommRequest *r, void *buf, size_t count, LtCommType t, LtCommOp red);
    void (*reduce_scatter)(LtCommRequest *r, const void *send, void *recv, size_t count,
                           LtCommType t);
    /* total = the sum of counts; r may be left active (the front end finishes it) */
    void (*reduce_scatter_v)(LtCommRequest *r, const void *send, void *recv, const int *counts,
                             size_t total, LtCommType t);
    void (*all_gather)(LtCommRequest *r, const void *send, void *recv, size_t count,
                       LtCommType t);
    void (*broadcast)(LtCommRequest *r, void *buf, size_t count, LtCommType t, int root);
    /* (optional: the front end runs sends and receives instead) counts and their
     * displacements fit an int; r may be left active */
    void (*all_to_all_v)(LtCommRequest *r, const void *send, const int *send_counts,
                         const int *send_displs, void *recv, const int *recv_counts,
                         const int *recv_displs, LtCommType t);
    void (*send)(LtCommRequest *r, const void *buf, size_t count, LtCommType t, int tag);
    void (*recv)(LtCommRequest *r, void *buf, size_t count, LtCommType t, int tag);
    void (*batch_begin)(const LtComm *c); /* (optional) */
    void (*batch_end)(const LtComm *c);   /* (optional) */
    void (*finish)(LtCommRequest *r);     /* waits for an active request */
    int (*test)(LtCommRequest *r);        /* never blocks: 1 when done (as finish) */
};

extern const LtCommImpl lt_comm_mpi_impl;
extern const LtCommImpl lt_comm_staged_impl;
extern const LtCommImpl *const lt_comm_nccl_impl; /* NULL in builds without CUDA */
extern const LtCommImpl lt_comm_async_impl;
/* Seconds the worker of a group on lt_comm_async_impl spent running its jobs. */
double lt_comm_async_work_seconds(const LtComm *c);

/* Ends the process (lt_fatal, code 1) naming the group, op and failed call. */
void lt_comm_mpi_fail(const LtComm *c, const char *op, const char *call, int rc,
                      const char *file, int line) __attribute__((noreturn));

/* Check an MPI call made for operation op on group c. Every MPI call is a
 * wait the watchdog bounds (comm.timeout_s): the blocking ones may wait on
 * another rank; starting a nonblocking one returns at once. */
#define LT_MPI_CHECK(c, op, call)                                                           \
    do {                                                                                    \
        lt_watchdog_enter((op), (c) ? (c)->name : NULL, -1);                                \
        int rc_ = (call);                                                                   \
        lt_watchdog_leave();                                                                \
        if (rc_ != MPI_SUCCESS) lt_comm_mpi_fail((c), (op), #call, rc_, __FILE__, __LINE__); \
    } while (0)

#endif
