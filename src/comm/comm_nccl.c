/* comm_nccl.c - device buffers of the CUDA backend over NCCL (see
 * comm_internal.h). A real implementation only in builds with CUDA
 * (LT_HAVE_CUDA; the Makefile then links NCCL and puts the CUDA include
 * directory on the C compiler's system path); without CUDA the table pointer
 * is NULL, and the front end refuses NCCL groups with a message.
 *
 * One NCCL communicator per group of more than one rank: group rank 0 makes
 * an ncclUniqueId, MPI_Bcast sends it over the group's MPI communicator, and
 * every member calls ncclCommInitRank on its backend's GPU (works on every
 * NCCL 2.x; ncclCommSplit from a world communicator would save the
 * bootstrap from NCCL 2.18 on, but needs a world NCCL communicator, which
 * the ranks sharing a GPU cannot have). Operations are enqueued on the
 * backend's current stream (current_stream / native_stream); start records
 * one of the backend's events after the operation, finish makes the
 * then-current stream wait for it (device-side; the host does not block) and
 * checks ncclCommGetAsyncError. Tags are not used: NCCL matches
 * point-to-point operations between two ranks by issue order. Every NCCL
 * failure ends in lt_fatal naming the group and the operation, with
 * ncclGetErrorString and ncclGetLastError. The only CUDA call of its own is
 * cudaSetDevice before the communicator is made. */
#include "comm_internal.h"

#ifdef LT_HAVE_CUDA /* the one place: nccl.h and libnccl exist only with CUDA */

#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "lattice needs NCCL >= 2.14 (ncclGetLastError, ncclInProgress)"
#endif

/* c->state */
typedef struct {
    ncclComm_t comm;
} Nccl;

static ncclComm_t nccl_of(const LtComm *c) { return c->state ? ((Nccl *)c->state)->comm : NULL; }

static void nccl_fail(const LtComm *c, const char *op, const char *call, ncclResult_t rc,
                      const char *file, int line) __attribute__((noreturn));
static void nccl_fail(const LtComm *c, const char *op, const char *call, ncclResult_t rc,
                      const char *file, int line) {
    const char *last = ncclGetLastError(nccl_of(c));
    lt_fatal_at(file, line,
                "communication: %s on group '%s' (rank %d of %d, NCCL) failed: %s: %s%s%s", op,
                c->name, c->rank, c->size, call, ncclGetErrorString(rc),
                last && last[0] ? ": " : "", last ? last : "");
}

/* Check an NCCL call made for operation op on group c. */
#define NCCL_CHECK(c, op, call)                                                      \
    do {                                                                             \
        ncclResult_t nc_rc_ = (call);                                                \
        if (nc_rc_ != ncclSuccess) nccl_fail((c), (op), #call, nc_rc_, __FILE__, __LINE__); \
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

/* The cudaStream_t the backend's ops run on now. */
static cudaStream_t cur_stream(const LtComm *c) {
    LtBackend *be = c->be;
    return (cudaStream_t)be->ops->native_stream(be, be->ops->current_stream(be));
}

/* ---- communicators ---- */
/* Live communicators, aborted by the watchdog when a wait times out: their
 * kernels then stop instead of waiting forever for a dead peer. */
#define MAX_LIVE 64
static Nccl *g_live[MAX_LIVE];

static void abort_live(void *unused) {
    (void)unused;
    for (int i = 0; i < MAX_LIVE; i++)
        if (g_live[i] && g_live[i]->comm) ncclCommAbort(g_live[i]->comm);
}

static void track(Nccl *n, Nccl *old) {
    static int hooked;
    if (!hooked) lt_watchdog_on_timeout(abort_live, NULL), hooked = 1;
    for (int i = 0; i < MAX_LIVE; i++)
        if (g_live[i] == old) {
            g_live[i] = n;
            return;
        }
}

static void nccl_create(LtComm *c) {
    Nccl *n = lt_calloc(sizeof *n);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) NCCL_CHECK(c, "create", ncclGetUniqueId(&id));
    int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->comm);
    if (rc != MPI_SUCCESS)
        lt_fatal("communication: create on group '%s' (rank %d of %d): broadcasting the NCCL "
                 "unique id over MPI failed (MPI error %d)",
                 c->name, c->rank, c->size, rc);
    cudaError_t e = cudaSetDevice(c->be->device_id); /* the communicator's GPU */
    if (e != cudaSuccess)
        lt_fatal("communication: create on group '%s': CUDA error %s (%d) in cudaSetDevice(%d)",
                 c->name, cudaGetErrorString(e), (int)e, c->be->device_id);
    NCCL_CHECK(c, "create", ncclCommInitRank(&n->comm, c->size, id, c->rank));
    c->state = n;
    track(n, NULL);
}

static void nccl_destroy(LtComm *c) {
    Nccl *n = c->state;
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
    c->state = NULL;
}

/* Move `bytes` from src down to dst < src on the current stream in pieces no
 * longer than src - dst, so no single copy overlaps itself (memmove). */
static void move_down(const LtComm *c, char *dst, const char *src, size_t bytes) {
    size_t gap = (size_t)(src - dst);
    while (bytes) {
        size_t k = bytes < gap ? bytes : gap;
        c->be->ops->copy(c->be, dst, src, k);
        dst += k;
        src += k;
        bytes -= k;
    }
}

/* An NCCL group belongs to the calling thread, not to one communicator: while
 * a batch is open, any other NCCL call would join it and launch only at its
 * end. lattice issues NCCL from one thread; this is that thread's batch. */
static const LtComm *g_batch;

/* The operation just enqueued: r becomes active, holding a new event recorded
 * after it on the current stream. */
static void nccl_started(LtCommRequest *r) {
    const LtComm *c = r->comm;
    if (g_batch)
        lt_fatal("communication: an operation on group '%s' inside the open batch of group '%s'",
                 c->name, g_batch->name);
    LtBackend *be = c->be;
    LtEvent *e = be->ops->event_create(be);
    be->ops->event_record(be, e, be->ops->current_stream(be));
    r->active = 1;
    r->handle.p[0] = e;
}

/* ---- collectives ---- */
static void nccl_all_reduce(LtCommRequest *r, void *buf, size_t count, LtCommType t,
                            LtCommOp red) {
    const LtComm *c = r->comm;
    NCCL_CHECK(c, r->op,
               ncclAllReduce(buf, buf, count, nccl_type(t), red == LT_COMM_MAX ? ncclMax : ncclSum,
                             nccl_of(c), cur_stream(c)));
    nccl_started(r);
}

static void nccl_reduce_scatter(LtCommRequest *r, const void *send, void *recv, size_t count,
                                LtCommType t) {
    const LtComm *c = r->comm;
    size_t bytes = count * lt_comm_type_size(t);
    if (send == recv) {
        /* NCCL's in-place form puts the result at chunk `rank`; comm.h wants it first */
        char *mine = (char *)recv + (size_t)c->rank * bytes;
        NCCL_CHECK(c, r->op,
                   ncclReduceScatter(send, mine, count, nccl_type(t), ncclSum, nccl_of(c),
                                     cur_stream(c)));
        if (c->rank) move_down(c, recv, mine, bytes);
    } else {
        NCCL_CHECK(c, r->op,
                   ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, nccl_of(c),
                                     cur_stream(c)));
    }
    nccl_started(r);
}

static void nccl_reduce_scatter_v(LtCommRequest *r, const void *send, void *recv,
                                  const int *counts, size_t total, LtCommType t) {
    const LtComm *c = r->comm;
    size_t tsz = lt_comm_type_size(t), off = 0, mine_off = 0;
    (void)total;
    for (int q = 0; q < c->rank; q++) mine_off += (size_t)counts[q];
    /* in place (recv == send): reduce this rank's range into itself, then move it first.
     * recvbuff of ncclReduce is only written on the root; non-roots pass dst too (a valid
     * device pointer, never touched). */
    void *dst = send == recv ? (char *)recv + mine_off * tsz : recv;
    cudaStream_t st = cur_stream(c);
    NCCL_CHECK(c, r->op, ncclGroupStart());
    for (int q = 0; q < c->size; q++) {
        if (counts[q] > 0) /* counts are the same on every rank: all skip alike */
            NCCL_CHECK(c, r->op,
                       ncclReduce((const char *)send + off * tsz, dst, (size_t)counts[q],
                                  nccl_type(t), ncclSum, q, nccl_of(c), st));
        off += (size_t)counts[q];
    }
    NCCL_CHECK(c, r->op, ncclGroupEnd());
    if (dst != recv) move_down(c, recv, dst, (size_t)counts[c->rank] * tsz);
    nccl_started(r);
}

static void nccl_all_gather(LtCommRequest *r, const void *send, void *recv, size_t count,
                            LtCommType t) {
    const LtComm *c = r->comm;
    NCCL_CHECK(c, r->op,
               ncclAllGather(send, recv, count, nccl_type(t), nccl_of(c), cur_stream(c)));
    nccl_started(r);
}

static void nccl_broadcast(LtCommRequest *r, void *buf, size_t count, LtCommType t, int root) {
    const LtComm *c = r->comm;
    NCCL_CHECK(c, r->op,
               ncclBroadcast(buf, buf, count, nccl_type(t), root, nccl_of(c), cur_stream(c)));
    nccl_started(r);
}

/* ---- point to point and batches ---- */
/* Inside this group's batch: active without an event (the operations launch
 * at the batch's end, ordered by the stream). */
static void p2p_started(LtCommRequest *r) {
    const LtComm *c = r->comm;
    if (g_batch && g_batch != c)
        lt_fatal("communication: a send/recv on group '%s' inside the open batch of group '%s'",
                 c->name, g_batch->name);
    if (g_batch)
        r->active = 1;
    else
        nccl_started(r);
}

static void nccl_send(LtCommRequest *r, const void *buf, size_t count, LtCommType t, int tag) {
    const LtComm *c = r->comm;
    (void)tag;
    NCCL_CHECK(c, r->op,
               ncclSend(buf, count, nccl_type(t), r->peer, nccl_of(c), cur_stream(c)));
    p2p_started(r);
}

static void nccl_recv(LtCommRequest *r, void *buf, size_t count, LtCommType t, int tag) {
    const LtComm *c = r->comm;
    (void)tag;
    NCCL_CHECK(c, r->op,
               ncclRecv(buf, count, nccl_type(t), r->peer, nccl_of(c), cur_stream(c)));
    p2p_started(r);
}

static void nccl_batch_begin(const LtComm *c) {
    if (g_batch)
        lt_fatal("communication: batch on group '%s' begun inside the batch of group '%s'",
                 c->name, g_batch->name);
    NCCL_CHECK(c, "batch", ncclGroupStart());
    g_batch = c;
}

static void nccl_batch_end(const LtComm *c) {
    if (g_batch != c)
        lt_fatal("communication: batch on group '%s' ended without a begin", c->name);
    g_batch = NULL;
    NCCL_CHECK(c, "batch", ncclGroupEnd());
}

/* ---- completion ---- */
static void nccl_finish(LtCommRequest *r) {
    const LtComm *c = r->comm;
    LtBackend *be = c->be;
    LtEvent *e = r->handle.p[0];
    if (e) {
        be->ops->stream_wait_event(be, be->ops->current_stream(be), e);
        /* safe while pending: CUDA releases the event once it has completed */
        be->ops->event_destroy(be, e);
    }
    Nccl *n = c->state;
    ncclResult_t st = ncclSuccess;
    NCCL_CHECK(c, r->op, ncclCommGetAsyncError(n->comm, &st));
    if (st != ncclSuccess && st != ncclInProgress) {
        char last[256];
        const char *l = ncclGetLastError(n->comm);
        snprintf(last, sizeof last, "%s", l ? l : "");
        ncclCommAbort(n->comm); /* so the peers' pending operations fail too */
        n->comm = NULL;
        lt_fatal("communication: %s on group '%s' (rank %d of %d, NCCL) failed asynchronously: "
                 "%s%s%s",
                 r->op, c->name, c->rank, c->size, ncclGetErrorString(st), last[0] ? ": " : "",
                 last);
    }
}

/* Stream order puts later work on the current stream after the operation:
 * nothing to wait for on the host. */
static int nccl_test(LtCommRequest *r) {
    nccl_finish(r);
    return 1;
}

static const LtCommImpl nccl_impl = {
    .name = "nccl",
    .wide_counts = 1, /* size_t all through */
    .create = nccl_create,
    .destroy = nccl_destroy,
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .reduce_scatter_v = nccl_reduce_scatter_v,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .batch_begin = nccl_batch_begin,
    .batch_end = nccl_batch_end,
    .finish = nccl_finish,
    .test = nccl_test,
};

const LtCommImpl *const lt_comm_nccl_impl = &nccl_impl;

#else

const LtCommImpl *const lt_comm_nccl_impl = NULL;

#endif
