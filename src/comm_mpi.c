/* comm_mpi.c - the MPI backend of comm.h.
 *
 * Each LtComm owns a communicator (duplicated from or split off
 * MPI_COMM_WORLD) with MPI_ERRORS_RETURN set, so failures come back to
 * COMM_CHECK, which names the group and the operation before exiting.
 *
 * Buffers are host pointers. TODO(cuda): device tensors will be staged
 * through pinned host buffers here (or go through an NCCL backend) once the
 * CUDA path of tensor/data parallelism lands; nothing here touches the GPU. */
#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

struct LtComm {
    MPI_Comm comm;   /* MPI_COMM_NULL: no MPI (one-rank world) or not a member */
    int rank, size;  /* rank -1 / size 0 when not a member */
    int *global;     /* group rank -> world rank */
    char name[48];
};

_Static_assert(sizeof(MPI_Request) <= sizeof(((LtCommRequest *)0)->handle),
               "LtCommRequest.handle cannot hold an MPI_Request");

static void comm_fail(const LtComm *c, const char *op, const char *call, int rc,
                      const char *file, int line) __attribute__((noreturn));
static void comm_fail(const LtComm *c, const char *op, const char *call, int rc,
                      const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    lt_fatal_at(file, line, "communication: %s on group '%s' (rank %d of %d) failed: %s: %s", op,
                c ? c->name : "?", c ? c->rank : -1, c ? c->size : 0, call, msg);
}

/* Check an MPI call made for operation op on group c. */
#define COMM_CHECK(c, op, call)                                                         \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ != MPI_SUCCESS) comm_fail((c), (op), #call, rc_, __FILE__, __LINE__);   \
    } while (0)

static int mpi_active(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

static LtComm *comm_new(const char *name) {
    LtComm *c = lt_calloc(sizeof *c);
    c->comm = MPI_COMM_NULL;
    c->rank = -1;
    c->size = 0;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "?");
    return c;
}

/* Fill rank, size and the world-rank table from c->comm (or make c a
 * one-rank group of this process when there is no MPI). */
static void comm_finish_setup(LtComm *c, const char *op) {
    c->global = lt_malloc(sizeof(int));
    if (c->comm == MPI_COMM_NULL) {
        c->rank = 0;
        c->size = 1;
        c->global[0] = 0;
        return;
    }
    COMM_CHECK(c, op, MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN));
    COMM_CHECK(c, op, MPI_Comm_rank(c->comm, &c->rank));
    COMM_CHECK(c, op, MPI_Comm_size(c->comm, &c->size));
    free(c->global);
    c->global = lt_malloc(sizeof(int) * (size_t)c->size);
    int *local = lt_malloc(sizeof(int) * (size_t)c->size);
    for (int i = 0; i < c->size; i++) local[i] = i;
    MPI_Group g, wg;
    COMM_CHECK(c, op, MPI_Comm_group(c->comm, &g));
    COMM_CHECK(c, op, MPI_Comm_group(MPI_COMM_WORLD, &wg));
    COMM_CHECK(c, op, MPI_Group_translate_ranks(g, c->size, local, wg, c->global));
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    free(local);
}

LtComm *lt_comm_world(const char *name) {
    LtComm *c = comm_new(name);
    if (mpi_active()) COMM_CHECK(c, "create", MPI_Comm_dup(MPI_COMM_WORLD, &c->comm));
    comm_finish_setup(c, "create");
    return c;
}

LtComm *lt_comm_split_color(int color, int key, const char *name) {
    LtComm *c = comm_new(name);
    if (!mpi_active()) {
        if (color >= 0) comm_finish_setup(c, "split");
        return c;
    }
    COMM_CHECK(c, "split", MPI_Comm_split(MPI_COMM_WORLD, color >= 0 ? color : MPI_UNDEFINED,
                                          key, &c->comm));
    if (c->comm != MPI_COMM_NULL) comm_finish_setup(c, "split");
    return c;
}

LtComm *lt_comm_split_members(const int *members, int n, const char *name) {
    int wrank = 0, wsize = 1;
    if (mpi_active()) {
        MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
        MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    }
    if (n < 1) lt_fatal("communication: group '%s': empty member list", name ? name : "?");
    int self = -1;
    for (int i = 0; i < n; i++) {
        if (members[i] < 0 || members[i] >= wsize)
            lt_fatal("communication: group '%s': member %d outside world of %d",
                     name ? name : "?", members[i], wsize);
        if (i && members[i] <= members[i - 1])
            lt_fatal("communication: group '%s': member list not sorted/unique at %d",
                     name ? name : "?", i);
        if (members[i] == wrank) self = i;
    }
    /* Groups of one call are disjoint, so the smallest member identifies one. */
    return lt_comm_split_color(self >= 0 ? members[0] : -1, self, name);
}

void lt_comm_free(LtComm *c) {
    if (!c) return;
    if (c->comm != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&c->comm);
    free(c->global);
    free(c);
}

int lt_comm_rank(const LtComm *c) { return c->rank; }
int lt_comm_size(const LtComm *c) { return c->size; }
int lt_comm_member(const LtComm *c) { return c->size > 0; }
const char *lt_comm_name(const LtComm *c) { return c->name; }
int lt_comm_global_rank(const LtComm *c, int r) {
    return r >= 0 && r < c->size ? c->global[r] : -1;
}

size_t lt_comm_type_size(LtCommType t) {
    switch (t) {
    case LT_COMM_F32: return 4;
    case LT_COMM_F64: return 8;
    case LT_COMM_I32: return 4;
    case LT_COMM_U8: return 1;
    }
    return 0;
}

static MPI_Datatype mpi_type(LtCommType t) {
    switch (t) {
    case LT_COMM_F32: return MPI_FLOAT;
    case LT_COMM_F64: return MPI_DOUBLE;
    case LT_COMM_I32: return MPI_INT;
    case LT_COMM_U8: return MPI_UNSIGNED_CHAR;
    }
    return MPI_DATATYPE_NULL;
}

/* Validate the common arguments; returns the count as an MPI int. */
static int op_begin(const LtComm *c, const char *op, size_t count, LtCommType t) {
    if (!c) lt_fatal("communication: %s on a NULL group", op);
    if (!lt_comm_member(c))
        lt_fatal("communication: %s on group '%s': this rank is not a member", op, c->name);
    if (lt_comm_type_size(t) == 0)
        lt_fatal("communication: %s on group '%s': bad element type %d", op, c->name, (int)t);
    /* TODO: counts above INT_MAX need a contiguous derived datatype. */
    if (count > (size_t)INT_MAX)
        lt_fatal("communication: %s on group '%s': count %zu exceeds INT_MAX", op, c->name,
                 count);
    return (int)count;
}

static LtCommRequest req_idle(const LtComm *c, const char *op) {
    LtCommRequest r;
    memset(&r, 0, sizeof r);
    r.comm = c;
    r.op = op;
    return r;
}

static LtCommRequest req_active(const LtComm *c, const char *op, MPI_Request mr) {
    LtCommRequest r = req_idle(c, op);
    r.active = 1;
    memcpy(&r.handle, &mr, sizeof mr);
    return r;
}

LtCommRequest lt_comm_all_reduce_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                       LtCommOp op) {
    const char *name = op == LT_COMM_MAX ? "all_reduce(max)" : "all_reduce(sum)";
    int n = op_begin(c, name, count, t);
    if (op != LT_COMM_SUM && op != LT_COMM_MAX)
        lt_fatal("communication: all_reduce on group '%s': bad reduction %d", c->name, (int)op);
    if (c->size == 1 || n == 0) return req_idle(c, name);
    MPI_Request mr;
    COMM_CHECK(c, name, MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi_type(t),
                                       op == LT_COMM_MAX ? MPI_MAX : MPI_SUM, c->comm, &mr));
    return req_active(c, name, mr);
}

LtCommRequest lt_comm_reduce_scatter_start(const LtComm *c, const void *send, void *recv,
                                           size_t count, LtCommType t) {
    const char *name = "reduce_scatter";
    int n = op_begin(c, name, count, t);
    if (n == 0) return req_idle(c, name);
    if (c->size == 1) {
        if (send != recv) memcpy(recv, send, count * lt_comm_type_size(t));
        return req_idle(c, name);
    }
    MPI_Request mr;
    if (send == recv)
        COMM_CHECK(c, name, MPI_Ireduce_scatter_block(MPI_IN_PLACE, recv, n, mpi_type(t),
                                                      MPI_SUM, c->comm, &mr));
    else
        COMM_CHECK(c, name, MPI_Ireduce_scatter_block(send, recv, n, mpi_type(t), MPI_SUM,
                                                      c->comm, &mr));
    return req_active(c, name, mr);
}

void lt_comm_reduce_scatter_v(const LtComm *c, const void *send, void *recv, const int *counts,
                              LtCommType t) {
    const char *name = "reduce_scatter_v";
    size_t total = 0;
    int size = lt_comm_size(c);
    for (int r = 0; r < size; r++) total += (size_t)counts[r];
    op_begin(c, name, total, t);
    if (size == 1) {
        if (send != recv) memcpy(recv, send, (size_t)counts[0] * lt_comm_type_size(t));
        return;
    }
    COMM_CHECK(c, name, MPI_Reduce_scatter(send, recv, counts, mpi_type(t), MPI_SUM, c->comm));
}

LtCommRequest lt_comm_all_gather_start(const LtComm *c, const void *send, void *recv,
                                       size_t count, LtCommType t) {
    const char *name = "all_gather";
    int n = op_begin(c, name, count, t);
    if (n == 0) return req_idle(c, name);
    size_t bytes = count * lt_comm_type_size(t);
    const void *mine = (const char *)recv + (size_t)c->rank * bytes;
    if (c->size == 1) {
        if (send != recv) memcpy(recv, send, bytes);
        return req_idle(c, name);
    }
    MPI_Request mr;
    if (send == mine)
        COMM_CHECK(c, name, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n,
                                           mpi_type(t), c->comm, &mr));
    else
        COMM_CHECK(c, name, MPI_Iallgather(send, n, mpi_type(t), recv, n, mpi_type(t), c->comm,
                                           &mr));
    return req_active(c, name, mr);
}

static void check_peer(const LtComm *c, const char *op, const char *what, int peer) {
    if (peer < 0 || peer >= c->size)
        lt_fatal("communication: %s on group '%s': %s %d outside group of %d", op, c->name,
                 what, peer, c->size);
}

LtCommRequest lt_comm_broadcast_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                      int root) {
    const char *name = "broadcast";
    int n = op_begin(c, name, count, t);
    check_peer(c, name, "root", root);
    if (c->size == 1 || n == 0) return req_idle(c, name);
    MPI_Request mr;
    COMM_CHECK(c, name, MPI_Ibcast(buf, n, mpi_type(t), root, c->comm, &mr));
    return req_active(c, name, mr);
}

LtCommRequest lt_comm_send_start(const LtComm *c, const void *buf, size_t count, LtCommType t,
                                 int peer, int tag) {
    const char *name = "send";
    int n = op_begin(c, name, count, t);
    check_peer(c, name, "peer", peer);
    if (tag < 0) lt_fatal("communication: send on group '%s': negative tag %d", c->name, tag);
    if (c->size == 1) return req_idle(c, name);
    MPI_Request mr;
    COMM_CHECK(c, name, MPI_Isend(buf, n, mpi_type(t), peer, tag, c->comm, &mr));
    return req_active(c, name, mr);
}

LtCommRequest lt_comm_recv_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                 int peer, int tag) {
    const char *name = "recv";
    int n = op_begin(c, name, count, t);
    check_peer(c, name, "peer", peer);
    if (tag < 0) lt_fatal("communication: recv on group '%s': negative tag %d", c->name, tag);
    if (c->size == 1) return req_idle(c, name);
    MPI_Request mr;
    COMM_CHECK(c, name, MPI_Irecv(buf, n, mpi_type(t), peer, tag, c->comm, &mr));
    return req_active(c, name, mr);
}

void lt_comm_finish(LtCommRequest *r) {
    if (!r->active) return;
    MPI_Request mr;
    memcpy(&mr, &r->handle, sizeof mr);
    COMM_CHECK(r->comm, r->op, MPI_Wait(&mr, MPI_STATUS_IGNORE));
    r->active = 0;
    memset(&r->handle, 0, sizeof r->handle);
}

void lt_comm_all_reduce(const LtComm *c, void *buf, size_t count, LtCommType t, LtCommOp op) {
    LtCommRequest r = lt_comm_all_reduce_start(c, buf, count, t, op);
    lt_comm_finish(&r);
}

void lt_comm_reduce_scatter(const LtComm *c, const void *send, void *recv, size_t count,
                            LtCommType t) {
    LtCommRequest r = lt_comm_reduce_scatter_start(c, send, recv, count, t);
    lt_comm_finish(&r);
}

void lt_comm_all_gather(const LtComm *c, const void *send, void *recv, size_t count,
                        LtCommType t) {
    LtCommRequest r = lt_comm_all_gather_start(c, send, recv, count, t);
    lt_comm_finish(&r);
}

void lt_comm_broadcast(const LtComm *c, void *buf, size_t count, LtCommType t, int root) {
    LtCommRequest r = lt_comm_broadcast_start(c, buf, count, t, root);
    lt_comm_finish(&r);
}

void lt_comm_send(const LtComm *c, const void *buf, size_t count, LtCommType t, int peer,
                  int tag) {
    LtCommRequest r = lt_comm_send_start(c, buf, count, t, peer, tag);
    lt_comm_finish(&r);
}

void lt_comm_recv(const LtComm *c, void *buf, size_t count, LtCommType t, int peer, int tag) {
    LtCommRequest r = lt_comm_recv_start(c, buf, count, t, peer, tag);
    lt_comm_finish(&r);
}

void lt_comm_barrier(const LtComm *c) {
    op_begin(c, "barrier", 0, LT_COMM_U8);
    if (c->size == 1) return;
    COMM_CHECK(c, "barrier", MPI_Barrier(c->comm));
}
