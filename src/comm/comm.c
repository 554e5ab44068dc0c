/* comm.c - the front end of comm.h: groups (LtComm), argument checks,
 * one-rank shortcuts and requests, dispatching every operation through the
 * group's implementation table (comm_internal.h):
 *
 *   lt_comm_*_start --check--> one rank / nothing to move? --> idle request
 *                          \-> c->impl->op (mpi | staged | nccl) --> request
 *   lt_comm_finish / lt_comm_test --> r->comm->impl->finish / test
 *
 * Each LtComm owns a communicator (duplicated from or split off
 * MPI_COMM_WORLD) with MPI_ERRORS_RETURN set, so failures come back to
 * LT_MPI_CHECK, which names the group and the operation before exiting.
 * The table is chosen when the group is created: NCCL for NCCL groups of
 * more than one rank, staging for device buffers the host cannot read
 * (a GPU's, or any with LtCommOptions.stage for tests), MPI otherwise.
 * With logging.trace (or NVTX) each dispatched operation is a span from its
 * start to its finish on a communication row of its group (trace.h), so every
 * implementation is covered; one-rank shortcuts move nothing and show none. */
#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "common.h"
#include "devclock.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((LtCommRequest *)0)->handle),
               "LtCommRequest.handle cannot hold an MPI_Request");

void lt_comm_mpi_fail(const LtComm *c, const char *op, const char *call, int rc,
                      const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    lt_fatal_at(file, line, "communication: %s on group '%s' (rank %d of %d) failed: %s: %s", op,
                c ? c->name : "?", c ? c->rank : -1, c ? c->size : 0, call, msg);
}

/* ---- groups ---- */
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
    c->lib = LT_COMM_LIB_MPI;
    c->host = c;
    c->impl = &lt_comm_mpi_impl;
    c->clock_kind = -1;
    c->batch_span = -1;
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
    LT_MPI_CHECK(c, op, MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN));
    LT_MPI_CHECK(c, op, MPI_Comm_rank(c->comm, &c->rank));
    LT_MPI_CHECK(c, op, MPI_Comm_size(c->comm, &c->size));
    free(c->global);
    c->global = lt_malloc(sizeof(int) * (size_t)c->size);
    int *local = lt_malloc(sizeof(int) * (size_t)c->size);
    for (int i = 0; i < c->size; i++) local[i] = i;
    MPI_Group g, wg;
    LT_MPI_CHECK(c, op, MPI_Comm_group(c->comm, &g));
    LT_MPI_CHECK(c, op, MPI_Comm_group(MPI_COMM_WORLD, &wg));
    LT_MPI_CHECK(c, op, MPI_Group_translate_ranks(g, c->size, local, wg, c->global));
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    free(local);
}

LtComm *lt_comm_world(const char *name) {
    LtComm *c = comm_new(name);
    if (mpi_active()) LT_MPI_CHECK(c, "create", MPI_Comm_dup(MPI_COMM_WORLD, &c->comm));
    comm_finish_setup(c, "create");
    return c;
}

LtComm *lt_comm_split_color(int color, int key, const char *name) {
    LtComm *c = comm_new(name);
    if (!mpi_active()) {
        if (color >= 0) comm_finish_setup(c, "split");
        return c;
    }
    LT_MPI_CHECK(c, "split", MPI_Comm_split(MPI_COMM_WORLD, color >= 0 ? color : MPI_UNDEFINED,
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

static void background_free(LtComm *b);

void lt_comm_free(LtComm *c) {
    if (!c) return;
    if (c->bg) background_free(c->bg);
    c->impl->destroy(c);
    if (c->host && c->host != c) lt_comm_free(c->host);
    if (!c->borrowed) {
        if (c->comm != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&c->comm);
        free(c->global);
    }
    free(c);
}

const char *lt_comm_lib_name(LtCommLib lib) { return lib == LT_COMM_LIB_NCCL ? "nccl" : "mpi"; }

int lt_comm_nccl_compiled(void) { return lt_comm_nccl_impl != NULL; }

/* The options' checks, in the order the messages are documented. */
static void check_options(const LtComm *c, const LtCommOptions *opt) {
    if (opt->lib != LT_COMM_LIB_MPI && opt->lib != LT_COMM_LIB_NCCL)
        lt_fatal("communication: group '%s': unknown library %d", c->name, (int)opt->lib);
    if (opt->lib == LT_COMM_LIB_NCCL && !lt_comm_nccl_compiled())
        lt_fatal("communication: group '%s': NCCL requested, but this binary was built without "
                 "CUDA/NCCL support (rebuild with nvcc available, or use comm.backend=mpi)",
                 c->name);
    if (!opt->be)
        lt_fatal("communication: group '%s': %s with device buffers needs a backend", c->name,
                 lt_comm_lib_name(opt->lib));
    if (opt->lib == LT_COMM_LIB_NCCL && opt->be->device_id < 0)
        lt_fatal("communication: group '%s': NCCL needs the CUDA backend (backend is '%s')",
                 c->name, opt->be->ops->name);
}

LtComm *lt_comm_split_members_ex(const int *members, int n, const char *name,
                                 const LtCommOptions *opt) {
    LtComm *c = lt_comm_split_members(members, n, name);
    if (!opt || (opt->lib == LT_COMM_LIB_MPI && !opt->device)) return c;
    check_options(c, opt);
    c->lib = opt->lib;
    c->device = 1;
    c->be = opt->be;
    if (!lt_comm_member(c)) return c;
    LtComm *h = lt_calloc(sizeof *h); /* host companion: same ranks and communicator */
    *h = *c;
    h->lib = LT_COMM_LIB_MPI;
    h->device = 0;
    h->borrowed = 1;
    h->be = NULL;
    h->host = h;
    c->host = h;
    /* device memory the host cannot read (a GPU's) is staged; the CPU
     * backend's is host memory, moved as it is unless a test asks */
    int staged = opt->lib == LT_COMM_LIB_MPI && (opt->be->device_id >= 0 || opt->stage);
    if (opt->lib == LT_COMM_LIB_NCCL && c->size > 1)
        c->impl = lt_comm_nccl_impl;
    else if (staged)
        c->impl = &lt_comm_staged_impl;
    if (c->impl->create) c->impl->create(c);
    return c;
}

/* ---- background companions ---- */
/* A companion over the same ranks on a duplicated communicator: the worker
 * thread's MPI (host buffers) or an NCCL communicator of its own issuing on a
 * stream of its own (device buffers). Collective over c's members. */
static LtComm *background_new(const LtComm *c) {
    LtComm *b = lt_malloc(sizeof *b);
    *b = *c;
    snprintf(b->name, sizeof b->name, "%.38s:overlap", c->name);
    b->borrowed = 0;
    b->host = b;
    b->state = NULL;
    b->busy_s = 0.0;
    b->bg = NULL;
    b->stream = NULL;
    LT_MPI_CHECK(c, "create", MPI_Comm_dup(c->comm, &b->comm));
    b->global = lt_malloc(sizeof(int) * (size_t)c->size);
    memcpy(b->global, c->global, sizeof(int) * (size_t)c->size);
    if (c->impl == lt_comm_nccl_impl) {
        b->stream = c->be->ops->stream_create(c->be);
    } else {
        b->impl = &lt_comm_async_impl;
    }
    if (b->impl->create) b->impl->create(b);
    return b;
}

static void background_free(LtComm *b) {
    b->impl->destroy(b);
    if (b->stream) b->be->ops->stream_destroy(b->be, b->stream);
    if (b->comm != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&b->comm);
    free(b->global);
    free(b);
}

const LtComm *lt_comm_background(const LtComm *c) {
    if (!lt_comm_member(c) || c->size == 1 || c->impl == &lt_comm_staged_impl) return c;
    LtComm *g = (LtComm *)c; /* groups are heap objects; the companion is its own */
    if (!g->bg) g->bg = background_new(c);
    return g->bg;
}

const LtComm *lt_comm_host(const LtComm *c) { return c->host ? c->host : c; }
LtCommLib lt_comm_lib(const LtComm *c) { return c->lib; }
int lt_comm_device_buffers(const LtComm *c) { return c->device; }

int lt_comm_rank(const LtComm *c) { return c->rank; }
int lt_comm_size(const LtComm *c) { return c->size; }
int lt_comm_member(const LtComm *c) { return c->size > 0; }
const char *lt_comm_name(const LtComm *c) { return c->name; }
int lt_comm_global_rank(const LtComm *c, int r) {
    return r >= 0 && r < c->size ? c->global[r] : -1;
}

LtCommType lt_comm_act_type(const LtBackend *be) {
    return be->act_size == sizeof(float) ? LT_COMM_F32 : LT_COMM_BF16;
}

size_t lt_comm_type_size(LtCommType t) {
    switch (t) {
    case LT_COMM_F32: return 4;
    case LT_COMM_F64: return 8;
    case LT_COMM_I32: return 4;
    case LT_COMM_U8: return 1;
    case LT_COMM_BF16: return 2;
    }
    return 0;
}

/* ---- time spent ---- */
/* The calling thread's time in an operation of group c is charged to it (the
 * group's counter is the only state an operation changes on its handle, hence
 * the cast: every LtComm is allocated mutable by comm_new). */
#define CHARGED(c, call)                                                                    \
    do {                                                                                    \
        const double t0_ = lt_now();                                                        \
        call;                                                                               \
        ((LtComm *)(c))->busy_s += lt_now() - t0_;                                          \
    } while (0)

/* ---- spans (logging.trace, NVTX) ---- */
static void trace_done(LtCommRequest *r) {
    const char *g = r->comm->name;
    if (r->peer >= 0)
        lt_trace_op_end(&r->trace, r->op, "\"group\": \"%s\", \"op\": \"%s\", \"bytes\": %zu, "
                        "\"peer\": %d", g, r->op, r->bytes, lt_comm_global_rank(r->comm, r->peer));
    else
        lt_trace_op_end(&r->trace, r->op, "\"group\": \"%s\", \"op\": \"%s\", \"bytes\": %zu", g,
                        r->op, r->bytes);
}

/* The span of an operation dispatched at t0: begun on a row of its group's
 * (finish or a successful test ends it), or whole at once when the operation
 * completed inside the call (staged and blocking paths). */
static void trace_started(LtCommRequest *r, int64_t t0) {
    lt_trace_op_begin(&r->trace, r->comm->name, r->op, t0);
    if (!r->active) trace_done(r);
}

/* The host companion's time (its own operations: host buffers). */
static double companion_busy(const LtComm *c) {
    return c->host && c->host != c ? c->host->busy_s : 0.0;
}

double lt_comm_busy_seconds(const LtComm *c) {
    if (!c) return 0.0;
    return c->busy_s + companion_busy(c) + (c->bg ? c->bg->busy_s : 0.0);
}

double lt_comm_host_busy_seconds(const LtComm *c) {
    if (!c) return 0.0;
    double s = (c->device ? 0.0 : c->busy_s) + companion_busy(c);
    if (c->bg && !c->bg->device) s += c->bg->busy_s;
    return s;
}

double lt_comm_work_seconds(const LtComm *c) {
    if (!c) return 0.0;
    double s = c->busy_s + companion_busy(c);
    if (c->bg) /* the worker's time; without one (NCCL) the host's share */
        s += c->bg->impl == &lt_comm_async_impl ? lt_comm_async_work_seconds(c->bg)
                                                 : c->bg->busy_s;
    return s;
}

/* A group with a stream of its own (an NCCL background companion) issues on
 * it after the work already on the calling stream (which wrote its buffers);
 * returns the calling stream, made current again by stream_leave. Its
 * requests' finish makes the then-current stream wait for them. */
static LtStream *stream_enter(const LtComm *c) {
    if (!c->stream) return NULL;
    LtBackend *be = c->be;
    LtStream *cur = be->ops->current_stream(be);
    LtEvent *e = be->ops->event_create(be);
    be->ops->event_record(be, e, cur);
    be->ops->stream_wait_event(be, c->stream, e);
    be->ops->event_destroy(be, e); /* released by CUDA once the wait has passed it */
    be->ops->set_stream(be, c->stream);
    return cur;
}

static void stream_leave(const LtComm *c, LtStream *prev) {
    if (c->stream) c->be->ops->set_stream(c->be, prev);
}

/* ---- device timing (devclock.h) ----
 * A device group's operation is a span on the stream it is issued on: busy
 * time, and exposed time too when that is the compute stream (the compute
 * waits for it there). Its finish is a span on the then-current stream:
 * exposed time (what the compute stream waited for an operation of another
 * stream, or the host for a staged one). A batch is one span. Host groups'
 * operations block the host, whose clock times them (busy_s). */
static int clock_begin(const LtComm *c, LtStream *s) {
    if (!c->device || c->clock_kind < 0 || c->batch_span >= 0) return -1;
    return lt_devclock_begin(s);
}

/* End span h of c's: issued on c's own stream (busy) or the compute stream
 * (busy and exposed); wait: a finish (exposed). */
static void clock_end(const LtComm *c, int h, int wait) {
    if (h < 0) return;
    const unsigned busy = LT_CLK(LT_CLK_BUSY_OF(c->clock_kind)), exposed = LT_CLK(c->clock_kind);
    if (wait)
        lt_devclock_end(h, c->stream ? exposed : exposed | busy, NULL);
    else
        lt_devclock_end(h, c->stream ? busy : exposed | busy, c->stream);
}

void lt_comm_set_clock_kind(const LtComm *c, int kind) {
    if (!c) return;
    LtComm *g = (LtComm *)c; /* a group's own setting, like its busy time */
    g->clock_kind = kind;
    if (g->bg) g->bg->clock_kind = kind;
}

/* An implementation's operation for request r: charged to its group, on the
 * group's stream when it has one, timed on the device, and its span when
 * tracing. */
#define DISPATCH(r, call)                                                                   \
    do {                                                                                    \
        const LtComm *c_ = (r)->comm;                                                       \
        const int traced_ = lt_trace_on();                                                  \
        const int64_t tt0_ = traced_ ? lt_trace_now() : 0;                                  \
        LtStream *prev_ = stream_enter(c_);                                                 \
        const int clk_ = clock_begin(c_, c_->stream);                                       \
        CHARGED(c_, call);                                                                  \
        clock_end(c_, clk_, 0);                                                             \
        stream_leave(c_, prev_);                                                            \
        if (traced_) trace_started((r), tt0_);                                              \
    } while (0)

/* ---- checks and requests ---- */
/* Check the common arguments; returns the idle request of the operation. */
static LtCommRequest op_begin(const LtComm *c, const char *op, size_t count, LtCommType t) {
    if (!c) lt_fatal("communication: %s on a NULL group", op);
    if (!lt_comm_member(c))
        lt_fatal("communication: %s on group '%s': this rank is not a member", op, c->name);
    if (lt_comm_type_size(t) == 0)
        lt_fatal("communication: %s on group '%s': bad element type %d", op, c->name, (int)t);
    /* MPI counts are int: larger operations would need a contiguous derived
     * datatype (or chunks); refused with the sizes until a model needs them */
    if (!c->impl->wide_counts && count > (size_t)INT_MAX)
        lt_fatal("communication: %s on group '%s': count %zu exceeds INT_MAX", op, c->name,
                 count);
    LtCommRequest r;
    memset(&r, 0, sizeof r);
    r.comm = c;
    r.op = op;
    r.peer = -1;
    r.bytes = count * lt_comm_type_size(t);
    return r;
}

static void check_peer(const LtComm *c, const char *op, const char *what, int peer) {
    if (peer < 0 || peer >= c->size)
        lt_fatal("communication: %s on group '%s': %s %d outside group of %d", op, c->name,
                 what, peer, c->size);
}

/* One rank: copy the caller's chunk (a copy on the backend's current stream
 * for device buffers). */
static void copy_local(const LtComm *c, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    if (c->device)
        c->be->ops->copy(c->be, dst, src, bytes);
    else
        memcpy(dst, src, bytes);
}

/* ---- operations ---- */
LtCommRequest lt_comm_all_reduce_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                       LtCommOp op) {
    const char *name = op == LT_COMM_MAX ? "all_reduce(max)" : "all_reduce(sum)";
    LtCommRequest r = op_begin(c, name, count, t);
    if (op != LT_COMM_SUM && op != LT_COMM_MAX)
        lt_fatal("communication: all_reduce on group '%s': bad reduction %d", c->name, (int)op);
    if (c->size > 1 && count) DISPATCH(&r, c->impl->all_reduce(&r, buf, count, t, op));
    return r;
}

/* reduce_scatter and all_gather: one rank copies its chunk. */
static LtCommRequest chunk_op_start(const LtComm *c, const char *op, int gather,
                                    const void *send, void *recv, size_t count, LtCommType t) {
    LtCommRequest r = op_begin(c, op, count, t);
    if (!count) return r;
    r.bytes *= (size_t)c->size; /* the whole buffer: every rank's chunk */
    if (c->size == 1)
        copy_local(c, recv, send, count * lt_comm_type_size(t));
    else if (gather)
        DISPATCH(&r, c->impl->all_gather(&r, send, recv, count, t));
    else
        DISPATCH(&r, c->impl->reduce_scatter(&r, send, recv, count, t));
    return r;
}

LtCommRequest lt_comm_reduce_scatter_start(const LtComm *c, const void *send, void *recv,
                                           size_t count, LtCommType t) {
    return chunk_op_start(c, "reduce_scatter", 0, send, recv, count, t);
}

LtCommRequest lt_comm_reduce_scatter_v_start(const LtComm *c, const void *send, void *recv,
                                             const int *counts, LtCommType t) {
    const char *name = "reduce_scatter_v";
    op_begin(c, name, 0, t); /* group checks first; the total is checked below */
    size_t total = 0;
    for (int r = 0; r < c->size; r++) total += (size_t)counts[r];
    LtCommRequest r = op_begin(c, name, total, t);
    if (c->size == 1)
        copy_local(c, recv, send, (size_t)counts[0] * lt_comm_type_size(t));
    else
        DISPATCH(&r, c->impl->reduce_scatter_v(&r, send, recv, counts, total, t));
    return r;
}

/* Displacements of counts in rank order, as ints; 0 when a count or the
 * total does not fit. */
static int int_layout(const size_t *counts, int n, int *ic, int *displ) {
    size_t at = 0;
    for (int j = 0; j < n; j++) {
        if (counts[j] > (size_t)INT_MAX || at > (size_t)INT_MAX) return 0;
        ic[j] = (int)counts[j], displ[j] = (int)at;
        at += counts[j];
    }
    return at <= (size_t)INT_MAX;
}

/* all_to_all_v as one batch of sends and receives; the rank's own part copied.
 * same_send: every rank gets the same sc[j] elements from the start of s (an
 * all-gather). */
static void all_to_all_p2p(const LtComm *c, const char *s, const size_t *sc, char *rv,
                           const size_t *rc, LtCommType t, int same_send) {
    const size_t es = lt_comm_type_size(t);
    LtCommRequest *q = lt_malloc(sizeof *q * 2 * (size_t)c->size);
    int nq = 0;
    size_t so = 0, ro = 0, mine_s = 0, mine_r = 0;
    lt_comm_batch_begin(c);
    for (int j = 0; j < c->size; j++) {
        if (j == c->rank) {
            mine_s = so, mine_r = ro;
        } else {
            if (rc[j]) q[nq++] = lt_comm_recv_start(c, rv + ro * es, rc[j], t, j, 0);
            if (sc[j]) q[nq++] = lt_comm_send_start(c, s + so * es, sc[j], t, j, 0);
        }
        if (!same_send) so += sc[j];
        ro += rc[j];
    }
    lt_comm_batch_end(c);
    copy_local(c, rv + mine_r * es, s + mine_s * es, sc[c->rank] * es);
    for (int k = 0; k < nq; k++) lt_comm_finish(&q[k]);
    free(q);
}

void lt_comm_all_gather_v(const LtComm *c, const void *send, void *recv, const int *counts,
                          LtCommType t) {
    const char *name = "all_gather_v";
    op_begin(c, name, 0, t); /* group checks first */
    const int n = c->size;
    size_t *sc = lt_malloc(sizeof(size_t) * 2 * (size_t)n), *rc = sc + n;
    for (int j = 0; j < n; j++) {
        if (counts[j] < 0)
            lt_fatal("communication: %s on group '%s': negative count %d for rank %d", name,
                     c->name, counts[j], j);
        sc[j] = (size_t)counts[c->rank], rc[j] = (size_t)counts[j];
    }
    all_to_all_p2p(c, send, sc, recv, rc, t, 1);
    free(sc);
}

void lt_comm_all_to_all_v(const LtComm *c, const void *send, const size_t *send_counts,
                          void *recv, const size_t *recv_counts, LtCommType t) {
    const char *name = "all_to_all_v";
    op_begin(c, name, 0, t); /* group checks first */
    if (send_counts[c->rank] != recv_counts[c->rank])
        lt_fatal("communication: %s on group '%s': rank %d sends itself %zu elements but "
                 "expects %zu",
                 name, c->name, c->rank, send_counts[c->rank], recv_counts[c->rank]);
    if (c->size == 1) {
        copy_local(c, recv, send, send_counts[0] * lt_comm_type_size(t));
        return;
    }
    int *ints = lt_malloc(sizeof(int) * 4 * (size_t)c->size), n = c->size;
    if (c->impl->all_to_all_v && int_layout(send_counts, n, ints, ints + n) &&
        int_layout(recv_counts, n, ints + 2 * n, ints + 3 * n)) {
        size_t total = 0;
        for (int j = 0; j < n; j++) total += send_counts[j];
        LtCommRequest r = op_begin(c, name, total, t);
        DISPATCH(&r, c->impl->all_to_all_v(&r, send, ints, ints + n, recv, ints + 2 * n,
                                           ints + 3 * n, t));
        lt_comm_finish(&r);
    } else {
        all_to_all_p2p(c, send, send_counts, recv, recv_counts, t, 0);
    }
    free(ints);
}

void lt_comm_reduce_scatter_v(const LtComm *c, const void *send, void *recv, const int *counts,
                              LtCommType t) {
    LtCommRequest r = lt_comm_reduce_scatter_v_start(c, send, recv, counts, t);
    lt_comm_finish(&r);
}

LtCommRequest lt_comm_all_gather_start(const LtComm *c, const void *send, void *recv,
                                       size_t count, LtCommType t) {
    return chunk_op_start(c, "all_gather", 1, send, recv, count, t);
}

LtCommRequest lt_comm_broadcast_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                      int root) {
    LtCommRequest r = op_begin(c, "broadcast", count, t);
    check_peer(c, r.op, "root", root);
    if (c->size > 1 && count) DISPATCH(&r, c->impl->broadcast(&r, buf, count, t, root));
    return r;
}

/* send and recv: the checks; 1 when something moves (not a one-rank group). */
static int p2p_begin(LtCommRequest *r, const LtComm *c, const char *op, size_t count,
                     LtCommType t, int peer, int tag) {
    *r = op_begin(c, op, count, t);
    check_peer(c, op, "peer", peer);
    if (tag < 0) lt_fatal("communication: %s on group '%s': negative tag %d", op, c->name, tag);
    if (c->size == 1) return 0;
    r->peer = peer;
    return 1;
}

LtCommRequest lt_comm_send_start(const LtComm *c, const void *buf, size_t count, LtCommType t,
                                 int peer, int tag) {
    LtCommRequest r;
    if (p2p_begin(&r, c, "send", count, t, peer, tag))
        DISPATCH(&r, c->impl->send(&r, buf, count, t, tag));
    return r;
}

LtCommRequest lt_comm_recv_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                 int peer, int tag) {
    LtCommRequest r;
    if (p2p_begin(&r, c, "recv", count, t, peer, tag))
        DISPATCH(&r, c->impl->recv(&r, buf, count, t, tag));
    return r;
}

void lt_comm_batch_begin(const LtComm *c) {
    op_begin(c, "batch", 0, LT_COMM_U8);
    LtComm *g = (LtComm *)c; /* the group's batch state, like its busy time */
    /* (a companion with a stream of its own would start the span before its
     * stream waits for the compute: its operations are timed one by one) */
    g->batch_span = c->stream ? -1 : clock_begin(c, NULL);
    if (c->impl->batch_begin) c->impl->batch_begin(c);
}

void lt_comm_batch_end(const LtComm *c) {
    op_begin(c, "batch", 0, LT_COMM_U8);
    if (c->impl->batch_end) CHARGED(c, c->impl->batch_end(c));
    LtComm *g = (LtComm *)c;
    const int h = g->batch_span;
    g->batch_span = -1;
    clock_end(c, h, 0);
}

static void req_clear(LtCommRequest *r) {
    r->active = 0;
    memset(&r->handle, 0, sizeof r->handle);
}

void lt_comm_finish(LtCommRequest *r) {
    if (!r->active) return;
    const int clk = clock_begin(r->comm, NULL);
    CHARGED(r->comm, r->comm->impl->finish(r));
    clock_end(r->comm, clk, 1);
    if (r->trace.row || r->trace.nvtx) trace_done(r);
    req_clear(r);
}

int lt_comm_test(LtCommRequest *r) {
    if (!r->active) return 1;
    int done;
    const int clk = clock_begin(r->comm, NULL);
    CHARGED(r->comm, done = r->comm->impl->test(r));
    clock_end(r->comm, clk, 1);
    if (!done) return 0;
    if (r->trace.row || r->trace.nvtx) trace_done(r);
    req_clear(r);
    return 1;
}

/* ---- blocking forms ---- */
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

/* Barriers always run over MPI, whatever the group's implementation. */
void lt_comm_barrier(const LtComm *c) {
    LtCommRequest r = op_begin(c, "barrier", 0, LT_COMM_U8);
    if (c->size == 1) return;
    DISPATCH(&r, LT_MPI_CHECK(c, "barrier", MPI_Barrier(c->comm)));
}
