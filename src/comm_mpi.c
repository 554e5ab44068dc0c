/* comm_mpi.c - the MPI backend of comm.h and its front end (LtComm lives
 * here; groups on NCCL dispatch to src/comm_nccl.c).
 *
 * Each LtComm owns a communicator (duplicated from or split off
 * MPI_COMM_WORLD) with MPI_ERRORS_RETURN set, so failures come back to
 * COMM_CHECK, which names the group and the operation before exiting.
 *
 * Host groups take host pointers. A group with device buffers of the CUDA
 * backend on MPI stages them through pinned host memory (c->pin, one buffer
 * per group, grown on demand): collectives are run blocking inside start
 * (download, MPI on the host companion, upload) and return a finished
 * request; send/recv go through a per-request host copy so they stay
 * nonblocking. The CUDA calls live in kernels/cuda/comm_staging.cu
 * (include/comm_cuda.h); the backend's upload/download do the copies on its
 * current stream. BF16 reductions are done in fp32 on the host. */
#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "common.h"
#include "watchdog.h"
#ifdef LT_HAVE_CUDA
#include "comm_cuda.h"
#endif

struct LtComm {
    MPI_Comm comm;   /* MPI_COMM_NULL: no MPI (one-rank world) or not a member */
    int rank, size;  /* rank -1 / size 0 when not a member */
    int *global;     /* group rank -> world rank */
    char name[48];
    LtCommLib lib;
    int device;      /* operations take device buffers of be */
    int stage;       /* device buffers of a CUDA backend over MPI: staged via pin */
    int borrowed;    /* host companion: comm and global belong to the parent */
    LtBackend *be;
    LtComm *host;    /* handle for host buffers (self for host groups) */
    void *pin;       /* pinned staging buffer (pin_bytes) */
    size_t pin_bytes;
    float *conv;     /* fp32 host buffer for BF16 reductions over MPI (conv_len) */
    size_t conv_len;
    LtNccl *nccl;    /* NCCL communicator (NCCL groups of more than one rank) */
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
/* Every MPI call is a wait the watchdog bounds (comm.timeout_s): the blocking
 * ones may wait on another rank; starting a nonblocking one returns at once. */
#define COMM_CHECK(c, op, call)                                                         \
    do {                                                                                \
        lt_watchdog_enter((op), (c) ? (c)->name : NULL, -1);                            \
        int rc_ = (call);                                                               \
        lt_watchdog_leave();                                                            \
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
    c->lib = LT_COMM_LIB_MPI;
    c->host = c;
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
#ifdef LT_HAVE_CUDA
    if (c->nccl) lt_nccl_destroy(c->nccl);
    if (c->pin) lt_cuda_pinned_free(c->pin);
#endif
    if (c->host && c->host != c) lt_comm_free(c->host);
    free(c->conv);
    if (!c->borrowed) {
        if (c->comm != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&c->comm);
        free(c->global);
    }
    free(c);
}

const char *lt_comm_lib_name(LtCommLib lib) { return lib == LT_COMM_LIB_NCCL ? "nccl" : "mpi"; }

LtComm *lt_comm_split_members_ex(const int *members, int n, const char *name,
                                 const LtCommOptions *opt) {
    LtComm *c = lt_comm_split_members(members, n, name);
    if (!opt || (opt->lib == LT_COMM_LIB_MPI && !opt->device)) return c;
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
    c->lib = opt->lib;
    c->device = 1;
    c->be = opt->be;
    c->stage = opt->lib == LT_COMM_LIB_MPI && opt->be->device_id >= 0;
    if (!lt_comm_member(c)) return c;
    LtComm *h = lt_calloc(sizeof *h); /* host companion: same ranks and communicator */
    *h = *c;
    h->lib = LT_COMM_LIB_MPI;
    h->device = h->stage = 0;
    h->borrowed = 1;
    h->be = NULL;
    h->host = h;
    c->host = h;
#ifdef LT_HAVE_CUDA
    if (c->lib == LT_COMM_LIB_NCCL && c->size > 1)
        c->nccl = lt_nccl_create(c->comm, c->rank, c->size, c->be, c->name);
#endif
    return c;
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

/* ---- bf16 <-> fp32 on the host (for BF16 reductions over MPI) ---- */
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
    if (n > c->conv_len) {
        free(c->conv);
        c->conv = lt_malloc(n * sizeof(float));
        c->conv_len = n;
    }
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++) c->conv[i] = bf16_to_f32(h[i]);
    return c->conv;
}

static void conv_out(void *dst, const float *src, size_t n) {
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(src[i]);
}

/* ---- device buffers ---- */
/* Copy the caller's chunk (one-rank groups): memcpy, or a device copy on the
 * backend's current stream for CUDA buffers. */
static void comm_copy(const LtComm *c, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
#ifdef LT_HAVE_CUDA
    if (c->device && c->be && c->be->device_id >= 0) {
        lt_cuda_copy_async(c->be, dst, src, bytes);
        return;
    }
#endif
    memcpy(dst, src, bytes);
}

/* The group's pinned staging buffer, at least `bytes` (grown in MiB steps).
 * Staged collectives are blocking, so it is never in use when it grows. */
static void *stage_buf(const LtComm *cc, size_t bytes) {
    LtComm *c = (LtComm *)cc;
    if (bytes > c->pin_bytes) {
        size_t nb = (bytes + ((size_t)1 << 20) - 1) >> 20 << 20;
#ifdef LT_HAVE_CUDA
        if (c->pin) lt_cuda_pinned_free(c->pin);
        c->pin = lt_cuda_pinned_alloc(nb);
#else
        lt_fatal("communication: group '%s': staging needs a build with CUDA", c->name);
#endif
        c->pin_bytes = nb;
    }
    return c->pin;
}

static void stage_down(const LtComm *c, void *host, const void *dev, size_t bytes) {
    if (bytes) c->be->ops->download(c->be, host, dev, bytes); /* syncs the current stream */
}

static void stage_up(const LtComm *c, void *dev, const void *host, size_t bytes) {
    if (bytes) c->be->ops->upload(c->be, dev, host, bytes); /* syncs the current stream */
}

/* Validate the common arguments; returns the count as an MPI int. */
static int op_begin(const LtComm *c, const char *op, size_t count, LtCommType t) {
    if (!c) lt_fatal("communication: %s on a NULL group", op);
    if (!lt_comm_member(c))
        lt_fatal("communication: %s on group '%s': this rank is not a member", op, c->name);
    if (lt_comm_type_size(t) == 0)
        lt_fatal("communication: %s on group '%s': bad element type %d", op, c->name, (int)t);
#ifdef LT_HAVE_CUDA
    /* NCCL counts are size_t (the MPI count goes unused: callers test count == 0,
     * not the returned value, which is 0 for every NCCL operation) */
    if (c->nccl) return 0;
#endif
    /* MPI counts are int: larger operations would need a contiguous derived
     * datatype (or chunks); refused with the sizes until a model needs them */
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
    r.peer = -1;
    return r;
}

static LtCommRequest req_active(const LtComm *c, const char *op, MPI_Request mr) {
    LtCommRequest r = req_idle(c, op);
    r.active = 1;
    memcpy(&r.handle, &mr, sizeof mr);
    return r;
}

#ifdef LT_HAVE_CUDA
static LtCommRequest req_nccl(const LtComm *c, const char *op, void *event) {
    LtCommRequest r = req_idle(c, op);
    r.active = 1;
    r.handle.p[0] = event;
    return r;
}
/* NCCL groups (more than one rank) hand the operation to src/comm_nccl.c. */
#define NCCL_DISPATCH(c, name, call) \
    do {                                 \
        if ((c)->nccl) return req_nccl((c), (name), (call)); \
    } while (0)
#else
#define NCCL_DISPATCH(c, name, call) ((void)0)
#endif

static int is_reduction_bf16(LtCommType t) { return t == LT_COMM_BF16; }

LtCommRequest lt_comm_all_reduce_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                       LtCommOp op) {
    const char *name = op == LT_COMM_MAX ? "all_reduce(max)" : "all_reduce(sum)";
    int n = op_begin(c, name, count, t);
    if (op != LT_COMM_SUM && op != LT_COMM_MAX)
        lt_fatal("communication: all_reduce on group '%s': bad reduction %d", c->name, (int)op);
    if (c->size == 1 || count == 0) return req_idle(c, name);
    NCCL_DISPATCH(c, name, lt_nccl_all_reduce(c->nccl, name, buf, count, t, op));
    if (c->stage) { /* blocking through pinned memory */
        size_t bytes = count * lt_comm_type_size(t);
        void *p = stage_buf(c, bytes);
        stage_down(c, p, buf, bytes);
        lt_comm_all_reduce(c->host, p, count, t, op);
        stage_up(c, buf, p, bytes);
        return req_idle(c, name);
    }
    MPI_Op mop = op == LT_COMM_MAX ? MPI_MAX : MPI_SUM;
    if (is_reduction_bf16(t)) { /* blocking, in fp32 */
        float *f = conv_in(c, buf, count);
        COMM_CHECK(c, name, MPI_Allreduce(MPI_IN_PLACE, f, n, MPI_FLOAT, mop, c->comm));
        conv_out(buf, f, count);
        return req_idle(c, name);
    }
    MPI_Request mr;
    COMM_CHECK(c, name, MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi_type(t), mop, c->comm, &mr));
    return req_active(c, name, mr);
}

LtCommRequest lt_comm_reduce_scatter_start(const LtComm *c, const void *send, void *recv,
                                           size_t count, LtCommType t) {
    const char *name = "reduce_scatter";
    int n = op_begin(c, name, count, t);
    if (count == 0) return req_idle(c, name);
    size_t bytes = count * lt_comm_type_size(t);
    if (c->size == 1) {
        comm_copy(c, recv, send, bytes);
        return req_idle(c, name);
    }
    NCCL_DISPATCH(c, name, lt_nccl_reduce_scatter(c->nccl, name, send, recv, count, t));
    if (c->stage) {
        void *p = stage_buf(c, (size_t)c->size * bytes);
        stage_down(c, p, send, (size_t)c->size * bytes);
        lt_comm_reduce_scatter(c->host, p, p, count, t);
        stage_up(c, recv, p, bytes);
        return req_idle(c, name);
    }
    if (is_reduction_bf16(t)) {
        float *f = conv_in(c, send, (size_t)c->size * count);
        COMM_CHECK(c, name,
                   MPI_Reduce_scatter_block(MPI_IN_PLACE, f, n, MPI_FLOAT, MPI_SUM, c->comm));
        conv_out(recv, f, count);
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
    op_begin(c, name, 0, t); /* group checks first; the total is checked below */
    size_t total = 0;
    int size = lt_comm_size(c);
    for (int r = 0; r < size; r++) total += (size_t)counts[r];
    op_begin(c, name, total, t);
    size_t tsz = lt_comm_type_size(t), mine = (size_t)counts[c->rank];
    if (size == 1) {
        comm_copy(c, recv, send, (size_t)counts[0] * tsz);
        return;
    }
#ifdef LT_HAVE_CUDA
    if (c->nccl) {
        LtCommRequest r = req_nccl(c, name, lt_nccl_reduce_scatter_v(c->nccl, name, send, recv,
                                                                    counts, t));
        lt_comm_finish(&r);
        return;
    }
#endif
    if (c->stage) {
        void *p = stage_buf(c, total * tsz);
        stage_down(c, p, send, total * tsz);
        lt_comm_reduce_scatter_v(c->host, p, p, counts, t);
        stage_up(c, recv, p, mine * tsz);
        return;
    }
    if (is_reduction_bf16(t)) {
        float *f = conv_in(c, send, total);
        COMM_CHECK(c, name,
                   MPI_Reduce_scatter(MPI_IN_PLACE, f, counts, MPI_FLOAT, MPI_SUM, c->comm));
        conv_out(recv, f, mine);
        return;
    }
    if (send == recv)
        COMM_CHECK(c, name, MPI_Reduce_scatter(MPI_IN_PLACE, recv, counts, mpi_type(t), MPI_SUM,
                                               c->comm));
    else
        COMM_CHECK(c, name,
                   MPI_Reduce_scatter(send, recv, counts, mpi_type(t), MPI_SUM, c->comm));
}

LtCommRequest lt_comm_all_gather_start(const LtComm *c, const void *send, void *recv,
                                       size_t count, LtCommType t) {
    const char *name = "all_gather";
    int n = op_begin(c, name, count, t);
    if (count == 0) return req_idle(c, name);
    size_t bytes = count * lt_comm_type_size(t);
    const void *mine = (const char *)recv + (size_t)c->rank * bytes;
    if (c->size == 1) {
        comm_copy(c, recv, send, bytes);
        return req_idle(c, name);
    }
    NCCL_DISPATCH(c, name, lt_nccl_all_gather(c->nccl, name, send, recv, count, t));
    if (c->stage) {
        char *p = stage_buf(c, (size_t)c->size * bytes);
        stage_down(c, p + (size_t)c->rank * bytes, send, bytes);
        lt_comm_all_gather(c->host, p + (size_t)c->rank * bytes, p, count, t);
        stage_up(c, recv, p, (size_t)c->size * bytes);
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
    if (c->size == 1 || count == 0) return req_idle(c, name);
    NCCL_DISPATCH(c, name, lt_nccl_broadcast(c->nccl, name, buf, count, t, root));
    if (c->stage) {
        size_t bytes = count * lt_comm_type_size(t);
        void *p = stage_buf(c, bytes);
        if (c->rank == root) stage_down(c, p, buf, bytes);
        lt_comm_broadcast(c->host, p, count, t, root);
        if (c->rank != root) stage_up(c, buf, p, bytes);
        return req_idle(c, name);
    }
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
    NCCL_DISPATCH(c, name, lt_nccl_send(c->nccl, name, buf, count, t, peer));
    void *host = NULL;
    if (c->stage) { /* a host copy of its own keeps the send nonblocking */
        size_t bytes = count * lt_comm_type_size(t);
        host = lt_malloc(bytes ? bytes : 1);
        stage_down(c, host, buf, bytes);
        buf = host;
    }
    MPI_Request mr;
    COMM_CHECK(c, name, MPI_Isend(buf, n, mpi_type(t), peer, tag, c->comm, &mr));
    LtCommRequest r = req_active(c, name, mr);
    r.stage_host = host;
    r.peer = peer;
    return r;
}

LtCommRequest lt_comm_recv_start(const LtComm *c, void *buf, size_t count, LtCommType t,
                                 int peer, int tag) {
    const char *name = "recv";
    int n = op_begin(c, name, count, t);
    check_peer(c, name, "peer", peer);
    if (tag < 0) lt_fatal("communication: recv on group '%s': negative tag %d", c->name, tag);
    if (c->size == 1) return req_idle(c, name);
    NCCL_DISPATCH(c, name, lt_nccl_recv(c->nccl, name, buf, count, t, peer));
    void *host = NULL, *dev = NULL;
    size_t bytes = count * lt_comm_type_size(t);
    if (c->stage) { /* received on the host, uploaded by finish */
        host = lt_malloc(bytes ? bytes : 1);
        dev = buf;
        buf = host;
    }
    MPI_Request mr;
    COMM_CHECK(c, name, MPI_Irecv(buf, n, mpi_type(t), peer, tag, c->comm, &mr));
    LtCommRequest r = req_active(c, name, mr);
    r.stage_host = host;
    r.stage_dev = dev;
    r.stage_bytes = bytes;
    r.peer = peer;
    return r;
}

void lt_comm_batch_begin(const LtComm *c) {
    op_begin(c, "batch", 0, LT_COMM_U8);
#ifdef LT_HAVE_CUDA
    if (c->nccl) lt_nccl_batch_begin(c->nccl);
#endif
}

void lt_comm_batch_end(const LtComm *c) {
    op_begin(c, "batch", 0, LT_COMM_U8);
#ifdef LT_HAVE_CUDA
    if (c->nccl) lt_nccl_batch_end(c->nccl);
#endif
}

/* The request's MPI operation has completed: upload a staged receive, free
 * the host copy, mark it inactive. */
static void req_done(LtCommRequest *r) {
    if (r->stage_host) {
        if (r->stage_dev) stage_up(r->comm, r->stage_dev, r->stage_host, r->stage_bytes);
        free(r->stage_host);
        r->stage_host = r->stage_dev = NULL;
    }
    r->active = 0;
    memset(&r->handle, 0, sizeof r->handle);
}

void lt_comm_finish(LtCommRequest *r) {
    if (!r->active) return;
#ifdef LT_HAVE_CUDA
    if (r->comm->nccl) {
        lt_nccl_finish(r->comm->nccl, r->op, r->handle.p[0]);
        r->active = 0;
        memset(&r->handle, 0, sizeof r->handle);
        return;
    }
#endif
    MPI_Request mr;
    memcpy(&mr, &r->handle, sizeof mr);
    lt_watchdog_enter(r->op, r->comm->name, r->peer);
    COMM_CHECK(r->comm, r->op, MPI_Wait(&mr, MPI_STATUS_IGNORE));
    lt_watchdog_leave();
    req_done(r);
}

int lt_comm_test(LtCommRequest *r) {
    if (!r->active) return 1;
#ifdef LT_HAVE_CUDA
    if (r->comm->nccl) {
        lt_comm_finish(r);
        return 1;
    }
#endif
    MPI_Request mr;
    memcpy(&mr, &r->handle, sizeof mr);
    int flag = 0;
    COMM_CHECK(r->comm, r->op, MPI_Test(&mr, &flag, MPI_STATUS_IGNORE));
    if (!flag) {
        memcpy(&r->handle, &mr, sizeof mr); /* MPI may have updated the handle */
        return 0;
    }
    req_done(r);
    return 1;
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
