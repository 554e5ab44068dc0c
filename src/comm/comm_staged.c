/* comm_staged.c - device buffers over MPI, staged through host memory (see
 * comm_internal.h), built only on the backend's entries: host_alloc /
 * host_free for the group's staging buffer (page-locked on a GPU) and the
 * blocking download / upload, which run on the backend's current stream
 * and synchronize it.
 *
 * Collectives run blocking inside start: download the input into the
 * group's buffer (c->state, sized on first use, grown in MiB steps), run the
 * MPI implementation's operation on the host companion (bf16 conversion
 * included; not charged or traced again: the staged operation is), upload
 * the result, and leave the request idle. So ranks must
 * start collectives on different groups in the same order. send and recv go
 * through a host copy of their own (lt_malloc, freed at finish) and stay
 * nonblocking on the host path's MPI operations; a receive is uploaded when
 * it is finished. */
#include <stdlib.h>

#include "comm_internal.h"
#include "common.h"

/* c->state: the staging buffer */
typedef struct {
    void *p;
    size_t bytes;
} Staging;

/* The group's staging buffer, at least `bytes` (grown in MiB steps).
 * Staged collectives are blocking, so it is never in use when it grows. */
static void *stage_buf(const LtComm *cc, size_t bytes) {
    LtComm *c = (LtComm *)cc; /* groups are heap objects; the buffer is scratch */
    if (!c->state) c->state = lt_calloc(sizeof(Staging));
    Staging *s = c->state;
    if (bytes > s->bytes) {
        size_t nb = (bytes + ((size_t)1 << 20) - 1) >> 20 << 20;
        if (s->p) c->be->ops->host_free(c->be, s->p);
        s->p = c->be->ops->host_alloc(c->be, nb);
        s->bytes = nb;
    }
    return s->p;
}

static void staged_destroy(LtComm *c) {
    Staging *s = c->state;
    if (s && s->p) c->be->ops->host_free(c->be, s->p);
    free(s);
    c->state = NULL;
}

static void down(const LtComm *c, void *host, const void *dev, size_t bytes) {
    if (bytes) c->be->ops->download(c->be, host, dev, bytes); /* syncs the current stream */
}

static void up(const LtComm *c, void *dev, const void *host, size_t bytes) {
    if (bytes) c->be->ops->upload(c->be, dev, host, bytes); /* syncs the current stream */
}

/* ---- collectives: blocking, on the host companion ---- */
/* Request r's operation as the host companion's (for lt_comm_mpi_impl). */
static LtCommRequest on_host(const LtCommRequest *r) {
    LtCommRequest h = *r;
    h.comm = r->comm->host;
    return h;
}

static void host_wait(LtCommRequest *h) {
    if (h->active) lt_comm_mpi_impl.finish(h);
}

static void staged_all_reduce(LtCommRequest *r, void *buf, size_t count, LtCommType t,
                              LtCommOp red) {
    const LtComm *c = r->comm;
    size_t bytes = count * lt_comm_type_size(t);
    void *p = stage_buf(c, bytes);
    down(c, p, buf, bytes);
    LtCommRequest h = on_host(r);
    lt_comm_mpi_impl.all_reduce(&h, p, count, t, red);
    host_wait(&h);
    up(c, buf, p, bytes);
}

static void staged_reduce_scatter(LtCommRequest *r, const void *send, void *recv, size_t count,
                                  LtCommType t) {
    const LtComm *c = r->comm;
    size_t bytes = count * lt_comm_type_size(t);
    void *p = stage_buf(c, (size_t)c->size * bytes);
    down(c, p, send, (size_t)c->size * bytes);
    LtCommRequest h = on_host(r);
    lt_comm_mpi_impl.reduce_scatter(&h, p, p, count, t);
    host_wait(&h);
    up(c, recv, p, bytes);
}

static void staged_reduce_scatter_v(LtCommRequest *r, const void *send, void *recv,
                                    const int *counts, size_t total, LtCommType t) {
    const LtComm *c = r->comm;
    size_t tsz = lt_comm_type_size(t);
    void *p = stage_buf(c, total * tsz);
    down(c, p, send, total * tsz);
    LtCommRequest h = on_host(r);
    lt_comm_mpi_impl.reduce_scatter_v(&h, p, p, counts, total, t);
    host_wait(&h);
    up(c, recv, p, (size_t)counts[c->rank] * tsz);
}

static void staged_all_gather(LtCommRequest *r, const void *send, void *recv, size_t count,
                              LtCommType t) {
    const LtComm *c = r->comm;
    size_t bytes = count * lt_comm_type_size(t);
    char *p = stage_buf(c, (size_t)c->size * bytes);
    char *mine = p + (size_t)c->rank * bytes;
    down(c, mine, send, bytes);
    LtCommRequest h = on_host(r);
    lt_comm_mpi_impl.all_gather(&h, mine, p, count, t);
    host_wait(&h);
    up(c, recv, p, (size_t)c->size * bytes);
}

static void staged_broadcast(LtCommRequest *r, void *buf, size_t count, LtCommType t, int root) {
    const LtComm *c = r->comm;
    size_t bytes = count * lt_comm_type_size(t);
    void *p = stage_buf(c, bytes);
    if (c->rank == root) down(c, p, buf, bytes);
    LtCommRequest h = on_host(r);
    lt_comm_mpi_impl.broadcast(&h, p, count, t, root);
    host_wait(&h);
    if (c->rank != root) up(c, buf, p, bytes);
}

/* ---- point to point: a host copy per request, nonblocking MPI ---- */
static void staged_send(LtCommRequest *r, const void *buf, size_t count, LtCommType t, int tag) {
    size_t bytes = count * lt_comm_type_size(t);
    void *host = lt_malloc(bytes ? bytes : 1);
    down(r->comm, host, buf, bytes);
    lt_comm_mpi_impl.send(r, host, count, t, tag);
    r->stage_host = host;
}

static void staged_recv(LtCommRequest *r, void *buf, size_t count, LtCommType t, int tag) {
    size_t bytes = count * lt_comm_type_size(t);
    void *host = lt_malloc(bytes ? bytes : 1);
    lt_comm_mpi_impl.recv(r, host, count, t, tag);
    r->stage_host = host;
    r->stage_dev = buf;
    r->stage_bytes = bytes;
}

/* The MPI operation has completed: upload a receive, free the host copy. */
static void stage_done(LtCommRequest *r) {
    if (r->stage_dev) up(r->comm, r->stage_dev, r->stage_host, r->stage_bytes);
    free(r->stage_host);
    r->stage_host = r->stage_dev = NULL;
}

static void staged_finish(LtCommRequest *r) {
    lt_comm_mpi_impl.finish(r);
    stage_done(r);
}

static int staged_test(LtCommRequest *r) {
    if (!lt_comm_mpi_impl.test(r)) return 0;
    stage_done(r);
    return 1;
}

const LtCommImpl lt_comm_staged_impl = {
    .name = "mpi-staged",
    .wide_counts = 0,
    .create = NULL, /* the buffer comes with the first collective */
    .destroy = staged_destroy,
    .all_reduce = staged_all_reduce,
    .reduce_scatter = staged_reduce_scatter,
    .reduce_scatter_v = staged_reduce_scatter_v,
    .all_gather = staged_all_gather,
    .broadcast = staged_broadcast,
    .send = staged_send,
    .recv = staged_recv,
    .batch_begin = NULL,
    .batch_end = NULL,
    .finish = staged_finish,
    .test = staged_test,
};
