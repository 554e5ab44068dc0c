/* comm_nccl.c - the NCCL backend of comm.h (see comm_internal.h).
 *
 * Compiled to a real implementation only in builds with CUDA (LT_HAVE_CUDA;
 * the Makefile then links -lnccl and puts the CUDA include directory on the
 * C compiler's system path). Without CUDA only lt_comm_nccl_compiled() exists
 * (returning 0) and lt_comm_split_members_ex refuses NCCL with a message.
 *
 * One NCCL communicator per group of more than one rank: group rank 0 makes
 * an ncclUniqueId, MPI_Bcast sends it over the group's MPI communicator, and
 * every member calls ncclCommInitRank on its backend's GPU (works on every
 * NCCL 2.x; ncclCommSplit from a world communicator would save the
 * bootstrap from NCCL 2.18 on, but needs a world NCCL communicator, which
 * the ranks sharing a GPU cannot have). Operations are enqueued on the
 * backend's current CUDA stream; start records an event after the operation,
 * finish makes the then-current stream wait for it and checks
 * ncclCommGetAsyncError. Every NCCL failure ends in lt_fatal naming the group
 * and the operation, with ncclGetErrorString and ncclGetLastError. */
#include "comm.h"
#include "common.h"
#include "watchdog.h"

#ifdef LT_HAVE_CUDA

#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "comm_cuda.h"
#include "comm_internal.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "lattice needs NCCL >= 2.14 (ncclGetLastError, ncclInProgress)"
#endif

int lt_comm_nccl_compiled(void) { return 1; }

struct LtNccl {
    ncclComm_t comm;
    LtBackend *be;
    int rank, size;
    char name[48];
};

static void nccl_fail(const LtNccl *n, const char *name, const char *op, const char *call,
                      ncclResult_t rc, const char *file, int line) __attribute__((noreturn));
static void nccl_fail(const LtNccl *n, const char *name, const char *op, const char *call,
                      ncclResult_t rc, const char *file, int line) {
    const char *last = n && n->comm ? ncclGetLastError(n->comm) : ncclGetLastError(NULL);
    lt_fatal_at(file, line,
                "communication: %s on group '%s' (rank %d of %d, NCCL) failed: %s: %s%s%s", op,
                name, n ? n->rank : -1, n ? n->size : 0, call, ncclGetErrorString(rc),
                last && last[0] ? ": " : "", last ? last : "");
}

/* Check an NCCL call made for operation op on n (group name nm). */
#define NCCL_CHECK(n, nm, op, call)                                                   \
    do {                                                                              \
        ncclResult_t nc_rc_ = (call);                                                 \
        if (nc_rc_ != ncclSuccess) nccl_fail((n), (nm), (op), #call, nc_rc_, __FILE__, __LINE__); \
    } while (0)

static ncclDataType_t nccl_type(LtCommType t) {
    switch (t) {
    case LT_COMM_F32: return ncclFloat32;
    case LT_COMM_F64: return ncclFloat64;
    case LT_COMM_I32: return ncclInt32;
    case LT_COMM_U8: return ncclUint8;
    case LT_COMM_BF16: return ncclBfloat16;
    }
    return ncclUint8;
}

static cudaStream_t cur_stream(const LtNccl *n) {
    return (cudaStream_t)lt_cuda_current_stream(n->be);
}

/* Live communicators, aborted by the watchdog when a wait times out: their
 * kernels then stop instead of waiting forever for a dead peer. */
#define MAX_LIVE 64
static LtNccl *g_live[MAX_LIVE];

static void abort_live(void *unused) {
    (void)unused;
    for (int i = 0; i < MAX_LIVE; i++)
        if (g_live[i] && g_live[i]->comm) ncclCommAbort(g_live[i]->comm);
}

static void track(LtNccl *n, LtNccl *old) {
    static int hooked;
    if (!hooked) lt_watchdog_on_timeout(abort_live, NULL), hooked = 1;
    for (int i = 0; i < MAX_LIVE; i++)
        if (g_live[i] == old) {
            g_live[i] = n;
            return;
        }
}

LtNccl *lt_nccl_create(MPI_Comm comm, int rank, int size, LtBackend *be, const char *name) {
    LtNccl *n = lt_calloc(sizeof *n);
    n->be = be;
    n->rank = rank;
    n->size = size;
    snprintf(n->name, sizeof n->name, "%s", name ? name : "?");
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0) NCCL_CHECK(NULL, n->name, "create", ncclGetUniqueId(&id));
    int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm);
    if (rc != MPI_SUCCESS)
        lt_fatal("communication: create on group '%s' (rank %d of %d): broadcasting the NCCL "
                 "unique id over MPI failed (MPI error %d)",
                 n->name, rank, size, rc);
    lt_cuda_set_device(be);
    NCCL_CHECK(n, n->name, "create", ncclCommInitRank(&n->comm, size, id, rank));
    track(n, NULL);
    return n;
}

void lt_nccl_destroy(LtNccl *n) {
    if (!n) return;
    track(NULL, n);
    if (n->comm) {
        ncclResult_t st = ncclSuccess;
        if (ncclCommGetAsyncError(n->comm, &st) == ncclSuccess && st == ncclSuccess)
            ncclCommDestroy(n->comm); /* waits for pending operations */
        else
            ncclCommAbort(n->comm);
    }
    free(n);
}

/* Move `bytes` from src down to dst < src on the current stream in pieces no
 * longer than src - dst, so no single copy overlaps itself (memmove). */
static void move_down(LtNccl *n, char *dst, const char *src, size_t bytes) {
    size_t gap = (size_t)(src - dst);
    while (bytes) {
        size_t k = bytes < gap ? bytes : gap;
        lt_cuda_copy_async(n->be, dst, src, k);
        dst += k;
        src += k;
        bytes -= k;
    }
}

/* An NCCL group belongs to the calling thread, not to one communicator: while
 * a batch is open, any other NCCL call would join it and launch only at its
 * end. lattice issues NCCL from one thread; this is that thread's batch. */
static LtNccl *g_batch;

/* The event that marks the end of the operation just enqueued. */
static void *nccl_done(LtNccl *n) {
    if (g_batch)
        lt_fatal("communication: an operation on group '%s' inside the open batch of group '%s'",
                 n->name, g_batch->name);
    return lt_cuda_event_record_current(n->be);
}

void *lt_nccl_all_reduce(LtNccl *n, const char *op, void *buf, size_t count, LtCommType t,
                         LtCommOp red) {
    NCCL_CHECK(n, n->name, op,
               ncclAllReduce(buf, buf, count, nccl_type(t), red == LT_COMM_MAX ? ncclMax : ncclSum,
                             n->comm, cur_stream(n)));
    return nccl_done(n);
}

void *lt_nccl_reduce_scatter(LtNccl *n, const char *op, const void *send, void *recv,
                             size_t count, LtCommType t) {
    size_t bytes = count * lt_comm_type_size(t);
    if (send == recv) {
        /* NCCL's in-place form puts the result at chunk `rank`; comm.h wants it first */
        char *mine = (char *)recv + (size_t)n->rank * bytes;
        NCCL_CHECK(n, n->name, op,
                   ncclReduceScatter(send, mine, count, nccl_type(t), ncclSum, n->comm,
                                     cur_stream(n)));
        if (n->rank) move_down(n, recv, mine, bytes);
    } else {
        NCCL_CHECK(n, n->name, op,
                   ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, n->comm,
                                     cur_stream(n)));
    }
    return nccl_done(n);
}

void *lt_nccl_reduce_scatter_v(LtNccl *n, const char *op, const void *send, void *recv,
                               const int *counts, LtCommType t) {
    size_t tsz = lt_comm_type_size(t), off = 0, mine_off = 0;
    for (int r = 0; r < n->rank; r++) mine_off += (size_t)counts[r];
    /* in place (recv == send): reduce this rank's range into itself, then move it first.
     * recvbuff of ncclReduce is only written on the root; non-roots pass dst too (a valid
     * device pointer, never touched). */
    void *dst = send == recv ? (char *)recv + mine_off * tsz : recv;
    cudaStream_t st = cur_stream(n);
    NCCL_CHECK(n, n->name, op, ncclGroupStart());
    for (int r = 0; r < n->size; r++) {
        if (counts[r] > 0) /* counts are the same on every rank: all skip alike */
            NCCL_CHECK(n, n->name, op,
                       ncclReduce((const char *)send + off * tsz, dst, (size_t)counts[r],
                                  nccl_type(t), ncclSum, r, n->comm, st));
        off += (size_t)counts[r];
    }
    NCCL_CHECK(n, n->name, op, ncclGroupEnd());
    if (dst != recv) move_down(n, recv, dst, (size_t)counts[n->rank] * tsz);
    return nccl_done(n);
}

void *lt_nccl_all_gather(LtNccl *n, const char *op, const void *send, void *recv, size_t count,
                         LtCommType t) {
    NCCL_CHECK(n, n->name, op,
               ncclAllGather(send, recv, count, nccl_type(t), n->comm, cur_stream(n)));
    return nccl_done(n);
}

void *lt_nccl_broadcast(LtNccl *n, const char *op, void *buf, size_t count, LtCommType t,
                        int root) {
    NCCL_CHECK(n, n->name, op,
               ncclBroadcast(buf, buf, count, nccl_type(t), root, n->comm, cur_stream(n)));
    return nccl_done(n);
}

/* Inside this group's batch: no event (the operations launch at its end). */
static void *p2p_done(LtNccl *n) {
    if (g_batch && g_batch != n)
        lt_fatal("communication: a send/recv on group '%s' inside the open batch of group '%s'",
                 n->name, g_batch->name);
    return g_batch ? NULL : nccl_done(n);
}

void *lt_nccl_send(LtNccl *n, const char *op, const void *buf, size_t count, LtCommType t,
                   int peer) {
    NCCL_CHECK(n, n->name, op, ncclSend(buf, count, nccl_type(t), peer, n->comm, cur_stream(n)));
    return p2p_done(n);
}

void *lt_nccl_recv(LtNccl *n, const char *op, void *buf, size_t count, LtCommType t, int peer) {
    NCCL_CHECK(n, n->name, op, ncclRecv(buf, count, nccl_type(t), peer, n->comm, cur_stream(n)));
    return p2p_done(n);
}

void lt_nccl_batch_begin(LtNccl *n) {
    if (g_batch)
        lt_fatal("communication: batch on group '%s' begun inside the batch of group '%s'",
                 n->name, g_batch->name);
    NCCL_CHECK(n, n->name, "batch", ncclGroupStart());
    g_batch = n;
}

void lt_nccl_batch_end(LtNccl *n) {
    if (g_batch != n)
        lt_fatal("communication: batch on group '%s' ended without a begin", n->name);
    g_batch = NULL;
    NCCL_CHECK(n, n->name, "batch", ncclGroupEnd());
}

void lt_nccl_finish(LtNccl *n, const char *op, void *event) {
    if (event) lt_cuda_event_wait_release(n->be, event);
    ncclResult_t st = ncclSuccess;
    NCCL_CHECK(n, n->name, op, ncclCommGetAsyncError(n->comm, &st));
    if (st != ncclSuccess && st != ncclInProgress) {
        char last[256];
        const char *l = ncclGetLastError(n->comm);
        snprintf(last, sizeof last, "%s", l ? l : "");
        ncclCommAbort(n->comm); /* so the peers' pending operations fail too */
        n->comm = NULL;
        lt_fatal("communication: %s on group '%s' (rank %d of %d, NCCL) failed asynchronously: "
                 "%s%s%s",
                 op, n->name, n->rank, n->size, ncclGetErrorString(st), last[0] ? ": " : "",
                 last);
    }
}

#else /* no CUDA: NCCL is not available */

int lt_comm_nccl_compiled(void) { return 0; }

#endif
