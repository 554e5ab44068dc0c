/* comm_mpi.c - host buffers over MPI (see comm_internal.h).
 *
 * Nonblocking MPI underneath (MPI_Iallreduce, ...): start returns an active
 * request, finish waits for it with the watchdog naming op, group and peer.
 * MPI has no bf16 type: BF16 reductions convert to fp32 in a buffer of the
 * group (c->state, grown on demand), reduce blocking, and round back to
 * nearest even; other BF16 operations move 16-bit words. send, recv, finish and test use no group state, so the staged
 * implementation runs its point-to-point operations through them. */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "common.h"

/* c->state: the fp32 buffer for BF16 reductions */
typedef struct {
    float *f;
    size_t len;
} Conv;

static MPI_Datatype mpi_type(LtCommType t) {
    switch (t) {
    case LT_COMM_F32: return MPI_FLOAT;
    case LT_COMM_F64: return MPI_DOUBLE;
    case LT_COMM_I32: return MPI_INT;
    case LT_COMM_U8: return MPI_UNSIGNED_CHAR;
    case LT_COMM_BF16: return MPI_UINT16_T; /* moved as 16-bit words; reductions convert */
    }
    return MPI_DATATYPE_NULL;
}

static void started(LtCommRequest *r, MPI_Request mr) {
    r->active = 1;
    memcpy(&r->handle, &mr, sizeof mr);
}

/* ---- bf16 <-> fp32 on the host ---- */
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t f32_to_bf16(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The group's fp32 conversion buffer holding n floats converted from src. */
static float *conv_in(const LtComm *cc, const void *src, size_t n) {
    LtComm *c = (LtComm *)cc; /* groups are heap objects; the buffer is scratch */
    if (!c->state) c->state = lt_calloc(sizeof(Conv));
    Conv *cv = c->state;
    if (n > cv->len) {
        free(cv->f);
        cv->f = lt_malloc(n * sizeof(float));
        cv->len = n;
    }
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++) cv->f[i] = bf16_to_f32(h[i]);
    return cv->f;
}

static void conv_out(void *dst, const float *src, size_t n) {
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(src[i]);
}

static void mpi_destroy(LtComm *c) {
    Conv *cv = c->state;
    if (cv) free(cv->f);
    free(cv);
    c->state = NULL;
}

/* ---- collectives ---- */
static void mpi_all_reduce(LtCommRequest *r, void *buf, size_t count, LtCommType t,
                           LtCommOp red) {
    const LtComm *c = r->comm;
    MPI_Op mop = red == LT_COMM_MAX ? MPI_MAX : MPI_SUM;
    if (t == LT_COMM_BF16) { /* blocking, in fp32 */
        float *f = conv_in(c, buf, count);
        LT_MPI_CHECK(c, r->op, MPI_Allreduce(MPI_IN_PLACE, f, (int)count, MPI_FLOAT, mop, c->comm));
        conv_out(buf, f, count);
        return;
    }
    MPI_Request mr;
    LT_MPI_CHECK(c, r->op,
                 MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(t), mop, c->comm, &mr));
    started(r, mr);
}

static void mpi_reduce_scatter(LtCommRequest *r, const void *send, void *recv, size_t count,
                               LtCommType t) {
    const LtComm *c = r->comm;
    int n = (int)count;
    if (t == LT_COMM_BF16) {
        float *f = conv_in(c, send, (size_t)c->size * count);
        LT_MPI_CHECK(c, r->op,
                     MPI_Reduce_scatter_block(MPI_IN_PLACE, f, n, MPI_FLOAT, MPI_SUM, c->comm));
        conv_out(recv, f, count);
        return;
    }
    MPI_Request mr;
    if (send == recv)
        LT_MPI_CHECK(c, r->op, MPI_Ireduce_scatter_block(MPI_IN_PLACE, recv, n, mpi_type(t),
                                                         MPI_SUM, c->comm, &mr));
    else
        LT_MPI_CHECK(c, r->op, MPI_Ireduce_scatter_block(send, recv, n, mpi_type(t), MPI_SUM,
                                                         c->comm, &mr));
    started(r, mr);
}

static void mpi_reduce_scatter_v(LtCommRequest *r, const void *send, void *recv,
                                 const int *counts, size_t total, LtCommType t) {
    const LtComm *c = r->comm;
    if (t == LT_COMM_BF16) {
        float *f = conv_in(c, send, total);
        LT_MPI_CHECK(c, r->op,
                     MPI_Reduce_scatter(MPI_IN_PLACE, f, counts, MPI_FLOAT, MPI_SUM, c->comm));
        conv_out(recv, f, (size_t)counts[c->rank]);
        return;
    }
    MPI_Request mr;
    if (send == recv)
        LT_MPI_CHECK(c, r->op, MPI_Ireduce_scatter(MPI_IN_PLACE, recv, counts, mpi_type(t),
                                                   MPI_SUM, c->comm, &mr));
    else
        LT_MPI_CHECK(c, r->op, MPI_Ireduce_scatter(send, recv, counts, mpi_type(t), MPI_SUM,
                                                   c->comm, &mr));
    started(r, mr);
}

static void mpi_all_to_all_v(LtCommRequest *r, const void *send, const int *send_counts,
                             const int *send_displs, void *recv, const int *recv_counts,
                             const int *recv_displs, LtCommType t) {
    const LtComm *c = r->comm;
    MPI_Request mr;
    LT_MPI_CHECK(c, r->op,
                 MPI_Ialltoallv(send, send_counts, send_displs, mpi_type(t), recv, recv_counts,
                                recv_displs, mpi_type(t), c->comm, &mr));
    started(r, mr);
}

static void mpi_all_gather(LtCommRequest *r, const void *send, void *recv, size_t count,
                           LtCommType t) {
    const LtComm *c = r->comm;
    int n = (int)count;
    const void *mine = (const char *)recv + (size_t)c->rank * count * lt_comm_type_size(t);
    MPI_Request mr;
    if (send == mine)
        LT_MPI_CHECK(c, r->op, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n,
                                              mpi_type(t), c->comm, &mr));
    else
        LT_MPI_CHECK(c, r->op, MPI_Iallgather(send, n, mpi_type(t), recv, n, mpi_type(t),
                                              c->comm, &mr));
    started(r, mr);
}

static void mpi_broadcast(LtCommRequest *r, void *buf, size_t count, LtCommType t, int root) {
    const LtComm *c = r->comm;
    MPI_Request mr;
    LT_MPI_CHECK(c, r->op, MPI_Ibcast(buf, (int)count, mpi_type(t), root, c->comm, &mr));
    started(r, mr);
}

/* ---- point to point ---- */
static void mpi_send(LtCommRequest *r, const void *buf, size_t count, LtCommType t, int tag) {
    const LtComm *c = r->comm;
    MPI_Request mr;
    LT_MPI_CHECK(c, r->op,
                 MPI_Isend(buf, (int)count, mpi_type(t), r->peer, tag, c->comm, &mr));
    started(r, mr);
}

static void mpi_recv(LtCommRequest *r, void *buf, size_t count, LtCommType t, int tag) {
    const LtComm *c = r->comm;
    MPI_Request mr;
    LT_MPI_CHECK(c, r->op,
                 MPI_Irecv(buf, (int)count, mpi_type(t), r->peer, tag, c->comm, &mr));
    started(r, mr);
}

/* ---- completion ---- */
static void mpi_finish(LtCommRequest *r) {
    MPI_Request mr;
    memcpy(&mr, &r->handle, sizeof mr);
    lt_watchdog_enter(r->op, r->comm->name, r->peer); /* the peer, for the timeout message */
    LT_MPI_CHECK(r->comm, r->op, MPI_Wait(&mr, MPI_STATUS_IGNORE));
    lt_watchdog_leave();
}

static int mpi_test(LtCommRequest *r) {
    MPI_Request mr;
    memcpy(&mr, &r->handle, sizeof mr);
    int flag = 0;
    LT_MPI_CHECK(r->comm, r->op, MPI_Test(&mr, &flag, MPI_STATUS_IGNORE));
    if (!flag) memcpy(&r->handle, &mr, sizeof mr); /* MPI may have updated the handle */
    return flag;
}

const LtCommImpl lt_comm_mpi_impl = {
    .name = "mpi",
    .wide_counts = 0,
    .create = NULL,
    .destroy = mpi_destroy,
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .reduce_scatter_v = mpi_reduce_scatter_v,
    .all_gather = mpi_all_gather,
    .all_to_all_v = mpi_all_to_all_v,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .batch_begin = NULL, /* nonblocking anyway: batches change nothing */
    .batch_end = NULL,
    .finish = mpi_finish,
    .test = mpi_test,
};
