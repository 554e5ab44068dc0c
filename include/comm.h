/* comm.h - the communication layer: one group handle (LtComm) per process
 * group, collectives and point-to-point operations on it.
 *
 * Backend: MPI (src/comm_mpi.c). Every operation comes as a start/finish pair
 * (nonblocking MPI underneath: MPI_Iallreduce, ...); start returns an
 * LtCommRequest and finish waits for it. The blocking forms are start + finish.
 * Several requests may be in flight at once (on the same or different groups);
 * each must be finished exactly once, and its buffers left alone until then.
 *
 * Buffers are HOST pointers for now. Device buffers (CUDA) will go through
 * NCCL, or be staged through pinned host memory for MPI, in a later step; do
 * not pass device pointers to these functions yet.
 *
 * Groups: lt_comm_world() is every rank; lt_comm_split_members() and
 * lt_comm_split_color() are collective over the world and give each rank the
 * group it belongs to (or a non-member handle). Every group has a name ("tp",
 * "dp", "pp", "embedding", ...) that error messages show with the operation.
 * MPI failures exit through lt_fatal (code 1) naming the group and the op.
 *
 * One-rank groups (including the world of a process started without a
 * launcher, where MPI is not initialized) skip all communication: all_reduce,
 * broadcast, send and recv do nothing; reduce_scatter and all_gather only copy
 * the caller's chunk when the input and output buffers differ. */
#ifndef LT_COMM_H
#define LT_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LtComm LtComm;

typedef enum { LT_COMM_F32 = 0, LT_COMM_F64, LT_COMM_I32, LT_COMM_U8 } LtCommType;
typedef enum { LT_COMM_SUM = 0, LT_COMM_MAX } LtCommOp;

/* An operation in flight. Plain value; zero/inactive after finish. The
 * storage holds the backend's request handle. */
typedef struct {
    const LtComm *comm;
    const char *op;  /* operation name for error messages */
    int active;      /* 1 while communication is pending */
    union {
        uint64_t u[2];
        void *p[2];
    } handle;
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

int lt_comm_rank(const LtComm *c);  /* rank within the group (-1: not a member) */
int lt_comm_size(const LtComm *c);  /* group size (0: not a member) */
int lt_comm_member(const LtComm *c);
const char *lt_comm_name(const LtComm *c);
/* Global (world) rank of group rank r; -1 when out of range. */
int lt_comm_global_rank(const LtComm *c, int r);
size_t lt_comm_type_size(LtCommType t);

/* ---- collectives (start / finish) ---------------------------------------- */
/* In place: buf[count] becomes the elementwise op over the group. */
LtCommRequest lt_comm_all_reduce_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                       LtCommOp op);
/* send holds size*count elements in rank order of equal contiguous chunks;
 * recv[count] gets the sum of every rank's chunk of this rank. recv == send is
 * allowed (the result lands in the first chunk); otherwise no overlap. */
LtCommRequest lt_comm_reduce_scatter_start(const LtComm *c, const void *send, void *recv,
                                           size_t count, LtCommType t);
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
/* Wait for the operation (no-op for an inactive request); marks it inactive. */
void lt_comm_finish(LtCommRequest *r);

/* ---- blocking forms ------------------------------------------------------- */
void lt_comm_all_reduce(const LtComm *c, void *buf, size_t count, LtCommType t, LtCommOp op);
/* Blocking reduce-scatter with per-rank counts: rank r receives the sum of
 * elements [sum(counts[0..r)), +counts[r]) of every rank's send buffer
 * (send and recv must not overlap; counts[r] may be 0). */
void lt_comm_reduce_scatter_v(const LtComm *c, const void *send, void *recv, const int *counts,
                              LtCommType t);
void lt_comm_reduce_scatter(const LtComm *c, const void *send, void *recv, size_t count,
                            LtCommType t);
void lt_comm_all_gather(const LtComm *c, const void *send, void *recv, size_t count,
                        LtCommType t);
void lt_comm_broadcast(const LtComm *c, void *buf, size_t count, LtCommType t, int root);
void lt_comm_send(const LtComm *c, const void *buf, size_t count, LtCommType t, int peer,
                  int tag);
void lt_comm_recv(const LtComm *c, void *buf, size_t count, LtCommType t, int peer, int tag);
/* Wait until every member arrives (no-op for one rank). */
void lt_comm_barrier(const LtComm *c);

#ifdef __cplusplus
}
#endif

#endif
