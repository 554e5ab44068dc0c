/* comm_internal.h - internal interface between the MPI front end of comm.h
 * (src/comm_mpi.c, which owns LtComm) and the NCCL backend (src/comm_nccl.c,
 * compiled to a real implementation only with LT_HAVE_CUDA). Not a public
 * header. Every lt_nccl_* start function enqueues on the backend's current
 * CUDA stream and returns an event (cudaEvent_t as void *) for
 * lt_nccl_finish. Arguments are validated by the caller (member, count,
 * type, peer/root, group size > 1). */
#ifndef LT_COMM_INTERNAL_H
#define LT_COMM_INTERNAL_H

#include <mpi.h>

#include "comm.h"

typedef struct LtNccl LtNccl;

/* Collective over the members of comm (size > 1): the NCCL communicator of
 * group `name` on be's GPU. */
LtNccl *lt_nccl_create(MPI_Comm comm, int rank, int size, LtBackend *be, const char *name);
void lt_nccl_destroy(LtNccl *n);

void *lt_nccl_all_reduce(LtNccl *n, const char *op, void *buf, size_t count, LtCommType t,
                         LtCommOp red);
/* recv == send: result in the first chunk (as comm.h). */
void *lt_nccl_reduce_scatter(LtNccl *n, const char *op, const void *send, void *recv,
                             size_t count, LtCommType t);
/* Per-rank counts (ncclReduce to each root inside one NCCL group). */
void *lt_nccl_reduce_scatter_v(LtNccl *n, const char *op, const void *send, void *recv,
                               const int *counts, LtCommType t);
void *lt_nccl_all_gather(LtNccl *n, const char *op, const void *send, void *recv, size_t count,
                         LtCommType t);
void *lt_nccl_broadcast(LtNccl *n, const char *op, void *buf, size_t count, LtCommType t,
                        int root);
void *lt_nccl_send(LtNccl *n, const char *op, const void *buf, size_t count, LtCommType t,
                   int peer);
void *lt_nccl_recv(LtNccl *n, const char *op, void *buf, size_t count, LtCommType t, int peer);
/* ncclGroupStart / ncclGroupEnd around point-to-point operations; inside,
 * send and recv return NULL (no event: the operations are launched at the
 * end, on the current stream). */
void lt_nccl_batch_begin(LtNccl *n);
void lt_nccl_batch_end(LtNccl *n);
/* The current stream waits for the operation's event (when not NULL); async
 * errors are checked. */
void lt_nccl_finish(LtNccl *n, const char *op, void *event);

#endif
