/* comm.h - the communication layer: one group handle (LtComm) per process
 * group, collectives and point-to-point operations on it.
 *
 * Every operation comes as a start/finish pair; start returns an
 * LtCommRequest and finish waits for it. The blocking forms are start +
 * finish. Several requests may be in flight at once (on the same or different
 * groups); each must be finished exactly once, and its buffers left alone
 * until then.
 *
 * Libraries and buffer locations (LtCommOptions, lt_comm_split_members_ex):
 *   - MPI, host buffers (the default; lt_comm_world, lt_comm_split_members,
 *     lt_comm_split_color): nonblocking MPI underneath (MPI_Iallreduce, ...).
 *   - MPI, device buffers of a backend (device = 1): with the CPU backend
 *     (device memory is host memory) exactly the host path, unless a test
 *     asks for staging (LtCommOptions.stage). With the CUDA backend every
 *     operation is staged (src/comm/comm_staged.c, on the backend's own entries)
 *     through a page-locked host buffer owned by the group (host_alloc;
 *     sized on first use, grown when a larger operation comes):
 *     the start call downloads the input on the backend's current stream
 *     (synchronizing it), runs the blocking MPI operation, uploads the result
 *     (synchronizing again) and returns an already finished request. So there
 *     is no overlap with compute, and ranks must start collectives on
 *     different groups in the same order; several ranks may share one GPU.
 *     send/recv copy into a host buffer of their own and stay nonblocking
 *     (recv uploads in finish).
 *   - NCCL, device buffers of the CUDA backend (src/comm/comm_nccl.c, only in
 *     builds with CUDA): one NCCL communicator per group, bootstrapped with an
 *     ncclUniqueId broadcast over the group's MPI communicator. start enqueues
 *     on the backend's current stream and records one of the backend's
 *     events; finish makes the then-current stream wait for that event
 *     (device-side; the host does not block) and checks
 *     ncclCommGetAsyncError. Tags of send/recv are checked but not used: NCCL
 *     matches point-to-point operations between two ranks by issue order.
 *     NCCL refuses two ranks on one GPU.
 * A group with device buffers has a companion for host buffers over the same
 * ranks (lt_comm_host; MPI, shares the MPI communicator): use it for host
 * scalars and host arrays. For host groups lt_comm_host returns the group.
 * Barriers always run over MPI.
 *
 * Element types: LT_COMM_BF16 is 16-bit bfloat16 (the CUDA backend's bf16 act
 * tensors). NCCL reduces it natively (ncclBfloat16). MPI has no bf16 type:
 * all_reduce / reduce_scatter(_v) of BF16 convert to fp32 on the host, reduce
 * in fp32, round back to nearest even (blocking, the request is returned
 * finished); the other operations move it as 16-bit words.
 *
 * Groups: lt_comm_world() is every rank; lt_comm_split_members() and
 * lt_comm_split_color() are collective over the world and give each rank the
 * group it belongs to (or a non-member handle). Every group has a name ("tp",
 * "dp", "pp", "embedding", ...) that error messages show with the operation.
 * MPI, NCCL and CUDA failures exit through lt_fatal (code 1) naming the group
 * and the op.
 *
 * One-rank groups (including the world of a process started without a
 * launcher, where MPI is not initialized) skip all communication on every
 * library: all_reduce, broadcast, send and recv do nothing; reduce_scatter and
 * all_gather only copy the caller's chunk when the input and output buffers
 * differ (memcpy for host buffers, a copy on the current stream for CUDA
 * device buffers). No NCCL communicator is created for them. */
#ifndef LT_COMM_H
#define LT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LtComm LtComm;

typedef enum { LT_COMM_F32 = 0, LT_COMM_F64, LT_COMM_I32, LT_COMM_U8, LT_COMM_BF16 } LtCommType;
typedef enum { LT_COMM_SUM = 0, LT_COMM_MAX } LtCommOp;

/* An operation in flight. Plain value; zero/inactive after finish. The
 * storage holds the backend's request handle. */
typedef struct {
    const LtComm *comm;
    const char *op;  /* operation name for error messages */
    int active;      /* 1 while communication is pending */
    int peer;        /* point-to-point: the peer's rank in the group; -1 otherwise */
    union {
        uint64_t u[2];
        void *p[2];
    } handle;
    /* staged point-to-point (MPI with device buffers staged): the host copy
     * (freed at finish) and, for recv, the device buffer it is uploaded to */
    void *stage_host, *stage_dev;
    size_t stage_bytes;
    LtTraceOp trace; /* logging.trace: its span, from start to finish */
    size_t bytes;    /* bytes it moves from this rank (the span's argument) */
} LtCommRequest;

/* ---- groups --------------------------------------------------------------- */
/* The group of every rank. Uses MPI when it is initialized (lt_world_init under
 * a launcher), otherwise a one-rank group. Free with lt_comm_free. */
LtComm *lt_comm_world(const char *name);
/* Collective over the world: every rank passes the sorted global-rank member
 * list of its own group (all members must pass the same list; groups of one
 * call must not overlap). A rank that is not in its list gets a non-member
 * handle (lt_comm_member() == 0) on which operations are errors. */
LtComm *lt_comm_split_members(const int *members, int n, const char *name);
/* Collective over the world: ranks with equal color >= 0 form a group, ordered
 * by key (ties by world rank); color < 0 gives a non-member handle. */
LtComm *lt_comm_split_color(int color, int key, const char *name);
void lt_comm_free(LtComm *c);

/* Which library runs a group. (Named LT_COMM_LIB_* because config.h's
 * LtCommBackend already has LT_COMM_NCCL / LT_COMM_MPI for comm.backend.) */
typedef enum { LT_COMM_LIB_MPI = 0, LT_COMM_LIB_NCCL = 1 } LtCommLib;
typedef struct {
    LtCommLib lib;
    int device;     /* 1: buffers are device memory of be (NCCL implies 1) */
    LtBackend *be;  /* required for device buffers and NCCL; its current stream is used */
    int stage;      /* for tests: 1 stages MPI device buffers through host memory even
                     * where they are host memory (the CPU backend, which otherwise takes
                     * the host path), to run the staged path without a GPU */
} LtCommOptions;
/* As lt_comm_split_members, on the library and buffer location of *opt
 * (NULL: MPI, host buffers - the same as lt_comm_split_members). Collective
 * over the world; with NCCL additionally collective over each group (the
 * NCCL communicator is initialized here; be's device must be the rank's
 * GPU). NCCL in a build without CUDA, or NCCL / device buffers without a
 * backend, is an lt_fatal naming the group. */
LtComm *lt_comm_split_members_ex(const int *members, int n, const char *name,
                                 const LtCommOptions *opt);
/* The handle for HOST buffers over the same ranks: c itself when c takes host
 * buffers, else a companion owned by c (MPI; freed with c). */
const LtComm *lt_comm_host(const LtComm *c);
LtCommLib lt_comm_lib(const LtComm *c);
int lt_comm_device_buffers(const LtComm *c); /* 1: operations take device buffers */
const char *lt_comm_lib_name(LtCommLib lib);  /* "mpi", "nccl" */
/* 1 when the NCCL backend was compiled into this binary (builds with CUDA). */
int lt_comm_nccl_compiled(void);

int lt_comm_rank(const LtComm *c);  /* rank within the group (-1: not a member) */
int lt_comm_size(const LtComm *c);  /* group size (0: not a member) */
int lt_comm_member(const LtComm *c);
const char *lt_comm_name(const LtComm *c);
/* Seconds the calling threads spent inside this group's operations so far
 * (starting, finishing, testing, barriers; its host companion included): the
 * communication time a rank could not hide. With NCCL the device runs the
 * operations asynchronously, so this is only the host's share there. */
double lt_comm_busy_seconds(const LtComm *c);
/* The part of lt_comm_busy_seconds spent in operations on host buffers (its
 * host companion's, or all of it for a host group): what device timers do not
 * see (devclock.h). */
double lt_comm_host_busy_seconds(const LtComm *c);
/* Seconds this group's communication was under way: the calling threads'
 * time in its operations (as lt_comm_busy_seconds, without the waits for the
 * background companion) plus the time its background worker spent running
 * operations, hidden behind compute or not. lt_comm_busy_seconds is the part
 * the calling threads were blocked (exposed); the background companion's
 * start/finish/test time counts there. */
double lt_comm_work_seconds(const LtComm *c);
/* The background companion of group c, for communication that overlaps
 * compute: the same ranks on a communicator of their own, made on the first
 * call (collective over c's members: every member calls it at the same
 * point). Its operations are started and finished like any group's, in the
 * same order on every rank, and compute exactly what the same call on c
 * computes:
 *   - host MPI groups (the CPU backend): a worker thread runs them one at a
 *     time in start order, driving the nonblocking MPI operation until it
 *     completes, so the data moves while the calling thread computes
 *     (src/comm/comm_async.c; needs MPI_THREAD_MULTIPLE). Collectives only.
 *   - NCCL groups: a second NCCL communicator issuing on a stream of its own,
 *     after what the calling stream had issued; finish makes the then-current
 *     stream wait for the operation.
 *   - staged MPI groups (ranks sharing a GPU), one-rank groups and non-members:
 *     c itself (staging is synchronous: no overlap there).
 * Freed with c. */
const LtComm *lt_comm_background(const LtComm *c);
/* Time c's operations on the device as communication of kind `kind` (an
 * exposed kind of devclock.h: LT_CLK_TP, _DP or _PP; -1: not timed), with its
 * background companion's. Only device groups' operations are timed there. */
void lt_comm_set_clock_kind(const LtComm *c, int kind);
/* Global (world) rank of group rank r; -1 when out of range. */
int lt_comm_global_rank(const LtComm *c, int r);
size_t lt_comm_type_size(LtCommType t);
/* The element type of be's act tensors on the wire: fp32 words (fp32, and the
 * CPU backend's bf16 stored as rounded floats) or real 16-bit bf16 (CUDA). */
LtCommType lt_comm_act_type(const LtBackend *be);

/* ---- collectives (start / finish) ---------------------------------------- */
/* In place: buf[count] becomes the elementwise op over the group. */
LtCommRequest lt_comm_all_reduce_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                       LtCommOp op);
/* send holds size*count elements in rank order of equal contiguous chunks;
 * recv[count] gets the sum of every rank's chunk of this rank. recv == send is
 * allowed (the result lands in the first chunk); otherwise no overlap. */
LtCommRequest lt_comm_reduce_scatter_start(const LtComm *c, const void *send, void *recv,
                                           size_t count, LtCommType t);
/* Nonblocking form of lt_comm_reduce_scatter_v (below); counts, like the
 * buffers, must stay unchanged until the request is finished. */
LtCommRequest lt_comm_reduce_scatter_v_start(const LtComm *c, const void *send, void *recv,
                                             const int *counts, LtCommType t);
/* recv[size*count] gets every rank's send[count] in rank order. send may be
 * recv + rank*count (in place); otherwise no overlap. */
LtCommRequest lt_comm_all_gather_start(const LtComm *c, const void *send, void *recv,
                                       size_t count, LtCommType t);
/* buf[count] of group rank root goes to every rank. */
LtCommRequest lt_comm_broadcast_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                      int root);
/* Point to point with group rank peer; tag >= 0 matches a send to a recv. */
LtCommRequest lt_comm_send_start(const LtComm *c, const void *buf, size_t count, LtCommType t,
                                 int peer, int tag);
LtCommRequest lt_comm_recv_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                 int peer, int tag);
/* Batches of point-to-point operations. Between lt_comm_batch_begin(c) and
 * lt_comm_batch_end(c), sends and receives started on c are issued
 * together: NCCL posts them inside one ncclGroupStart/ncclGroupEnd, so two
 * ranks that each send to the other in one batch cannot block each other
 * (an NCCL send otherwise waits for its receive); MPI's operations are
 * nonblocking anyway and ignore the batch. Finish the batch's requests
 * after lt_comm_batch_end; an NCCL request of a batch is ordered by the
 * stream it was started on (finish only checks for errors). Batches do not
 * nest, and hold only sends and receives. */
void lt_comm_batch_begin(const LtComm *c);
void lt_comm_batch_end(const LtComm *c);
/* Wait for the operation (no-op for an inactive request); marks it inactive. */
void lt_comm_finish(LtCommRequest *r);
/* Never blocks: 1 when the operation has completed (the request is then
 * finished as by lt_comm_finish), 0 while it is pending. An inactive request
 * counts as complete. NCCL requests are finished at once (stream order puts
 * later work on the current stream after them). */
int lt_comm_test(LtCommRequest *r);

/* ---- blocking forms ------------------------------------------------------- */
void lt_comm_all_reduce(const LtComm *c, void *buf, size_t count, LtCommType t, LtCommOp op);
/* Blocking reduce-scatter with per-rank counts: rank r receives the sum of
 * elements [sum(counts[0..r)), +counts[r]) of every rank's send buffer
 * (recv == send is allowed: the result lands at the start; otherwise no
 * overlap; counts[r] may be 0). */
void lt_comm_reduce_scatter_v(const LtComm *c, const void *send, void *recv, const int *counts,
                              LtCommType t);
void lt_comm_reduce_scatter(const LtComm *c, const void *send, void *recv, size_t count,
                            LtCommType t);
void lt_comm_all_gather(const LtComm *c, const void *send, void *recv, size_t count,
                        LtCommType t);
/* Blocking all-gather with per-rank counts: recv receives, in group rank
 * order, counts[j] elements from rank j (its send buffer's first counts[j];
 * counts[r] may be 0; every rank passes the same counts). send and recv must
 * not overlap. One batch of sends and receives on every library (NCCL: grouped
 * send/recv), the rank's own part copied. */
void lt_comm_all_gather_v(const LtComm *c, const void *send, void *recv, const int *counts,
                          LtCommType t);
void lt_comm_broadcast(const LtComm *c, void *buf, size_t count, LtCommType t, int root);
void lt_comm_send(const LtComm *c, const void *buf, size_t count, LtCommType t, int peer,
                  int tag);
void lt_comm_recv(const LtComm *c, void *buf, size_t count, LtCommType t, int peer, int tag);
/* All-to-all with per-rank counts (elements): send holds, in group rank order,
 * send_counts[j] elements for rank j; recv receives, in rank order,
 * recv_counts[j] elements from rank j (each rank must know what the others
 * send it: exchange the counts first, e.g. by an all-to-all of them on the
 * host companion). send and recv must not overlap. MPI groups on host
 * buffers run MPI_Alltoallv; the others (NCCL, staged MPI) one batch of
 * sends and receives, the rank's own part copied. Blocking. */
void lt_comm_all_to_all_v(const LtComm *c, const void *send, const size_t *send_counts,
                          void *recv, const size_t *recv_counts, LtCommType t);
/* Wait until every member arrives (no-op for one rank). */
void lt_comm_barrier(const LtComm *c);

#ifdef __cplusplus
}
#endif

#endif
