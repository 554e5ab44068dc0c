/* nccl_mpi.c - the part of NCCL's API that lattice calls (src/comm/comm_nccl.c),
 * carried out over MPI on the emulated CUDA backend's memory (host memory; see
 * emu_glue.cpp). Linked, instead of libnccl, into build/tests/emu/lattice, the
 * training binary whose "GPUs" are that emulation, so that the multi-rank
 * layouts run lattice's NCCL code on this machine (tests/test_nccl_emu.sh):
 * NCCL itself needs a GPU per rank, and no machine lattice is tested on has
 * two.
 *
 * What is checked is lattice's use of NCCL, so the shim keeps to NCCL's
 * documented semantics and is stricter than the library where NCCL trusts
 * its caller:
 *  - every buffer must lie within one device allocation of the emulated
 *    backend (not its host_alloc memory);
 *  - in-place operations only in the placement NCCL documents (all-reduce and
 *    broadcast: the same pointer; reduce-scatter: recvbuff = sendbuff +
 *    rank * recvcount; all-gather: sendbuff = recvbuff + rank * sendcount),
 *    any other overlap of the send and receive ranges is an error;
 *  - between ncclGroupStart and ncclGroupEnd nothing moves: the group's
 *    operations run at its end (sends and receives matched per peer in issue
 *    order, as NCCL does), so code that reads a result before the group ends
 *    sees the old contents, as it would on a GPU; and since NCCL runs a
 *    group's operations concurrently, one that writes what another of the
 *    group reads or writes is an error;
 *  - a send completes only once its receive has started (synchronous sends,
 *    MPI_Issend): NCCL does not buffer, so a lone send whose receive the
 *    peer posts later blocks, as on GPUs, whatever the message's size;
 *  - two ranks of one communicator on the same device of one host are
 *    refused at ncclCommInitRank, as NCCL refuses them ("Duplicate GPU").
 * The emulated backend runs every op when it is issued, so the stream
 * arguments are ignored and every operation is complete when its call (or
 * its group) returns. An error returns NCCL's code with a message for
 * ncclGetLastError; nothing here exits on its own. ncclGetUniqueId's id names
 * the rank that made it, which must be a member of the communicator (as in
 * lattice, whose group rank 0 makes it). ncclCommAbort leaves the MPI
 * communicator alone (freeing it is collective, and the watchdog aborts while
 * the main thread may wait in it): the process is ending. */
#include <limits.h>
#include <mpi.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int emu_device_range(const void *d, size_t bytes); /* emu_glue.cpp */

struct ncclComm {
    MPI_Comm mpi;
    int rank, size;
};

static char g_last[512];
static int g_device; /* cudaSetDevice's, per process (lattice calls it from one thread) */

static ncclResult_t failed(ncclResult_t rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    va_end(ap);
    return rc;
}

const char *ncclGetErrorString(ncclResult_t rc) {
    switch (rc) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return g_last;
}

/* The emulated device is the process's memory: the runtime call NCCL's users
 * make first only records which device this rank drives. */
cudaError_t cudaSetDevice(int device) {
    g_device = device;
    return cudaSuccess;
}

/* ---- communicators ---- */
#define ID_MAGIC "lattice-nccl-emu"
#define TAG_INIT 31000 /* + the id's serial modulo 1000, on MPI_COMM_WORLD */

typedef struct {
    char magic[sizeof ID_MAGIC];
    int creator; /* world rank */
    int serial;
} EmuId;
_Static_assert(sizeof(EmuId) <= NCCL_UNIQUE_ID_BYTES, "EmuId does not fit an ncclUniqueId");

ncclResult_t ncclGetUniqueId(ncclUniqueId *out) {
    static int serial;
    EmuId id;
    memset(&id, 0, sizeof id);
    memcpy(id.magic, ID_MAGIC, sizeof ID_MAGIC);
    MPI_Comm_rank(MPI_COMM_WORLD, &id.creator);
    id.serial = serial++;
    memset(out, 0, sizeof *out);
    memcpy(out->internal, &id, sizeof id);
    return ncclSuccess;
}

/* what each member tells the id's creator */
typedef struct {
    int rank, nranks, world, device;
    char host[MPI_MAX_PROCESSOR_NAME];
} Member;

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId uid, int rank) {
    EmuId id;
    memcpy(&id, uid.internal, sizeof id);
    if (memcmp(id.magic, ID_MAGIC, sizeof ID_MAGIC) != 0)
        return failed(ncclInvalidArgument, "ncclCommInitRank: the unique id was not made by "
                                           "ncclGetUniqueId (broadcast corrupted it?)");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return failed(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    const int tag = TAG_INIT + id.serial % 1000;
    Member me;
    memset(&me, 0, sizeof me);
    me.rank = rank;
    me.nranks = nranks;
    me.device = g_device;
    MPI_Comm_rank(MPI_COMM_WORLD, &me.world);
    int len = 0;
    MPI_Get_processor_name(me.host, &len);
    int *worlds = calloc((size_t)nranks, sizeof(int));
    ncclResult_t rc = ncclSuccess;
    if (me.world == id.creator) {
        /* the creator collects every member, checks them and sends the list back */
        Member *all = calloc((size_t)nranks, sizeof(Member));
        int *seen = calloc((size_t)nranks, sizeof(int)), *from = calloc((size_t)nranks, sizeof(int));
        all[rank] = me;
        seen[rank] = 1;
        for (int i = 1; i < nranks; i++) {
            Member m;
            MPI_Status st;
            MPI_Recv(&m, (int)sizeof m, MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &st);
            from[i] = st.MPI_SOURCE; /* every sender gets the verdict, a refused one too */
            if (m.nranks != nranks || m.rank < 0 || m.rank >= nranks || seen[m.rank]) {
                rc = failed(ncclInvalidUsage,
                            "ncclCommInitRank: world rank %d joins as rank %d of %d; this "
                            "communicator has %d ranks%s",
                            m.world, m.rank, m.nranks, nranks,
                            m.rank >= 0 && m.rank < nranks && seen[m.rank] ? ", rank taken" : "");
                continue;
            }
            seen[m.rank] = 1;
            all[m.rank] = m;
        }
        for (int a = 0; a < nranks && rc == ncclSuccess; a++)
            for (int b = a + 1; b < nranks; b++)
                if (all[a].device == all[b].device && strcmp(all[a].host, all[b].host) == 0) {
                    rc = failed(ncclInvalidUsage,
                                "Duplicate GPU detected: rank %d and rank %d both on CUDA device "
                                "%d of host %s",
                                a, b, all[a].device, all[a].host);
                    break;
                }
        int verdict = rc;
        for (int r = 0; r < nranks; r++) worlds[r] = all[r].world;
        for (int i = 1; i < nranks; i++) {
            MPI_Send(&verdict, 1, MPI_INT, from[i], tag, MPI_COMM_WORLD);
            MPI_Send(worlds, nranks, MPI_INT, from[i], tag, MPI_COMM_WORLD);
        }
        free(all);
        free(seen);
        free(from);
    } else {
        int verdict = 0;
        MPI_Send(&me, (int)sizeof me, MPI_BYTE, id.creator, tag, MPI_COMM_WORLD);
        MPI_Recv(&verdict, 1, MPI_INT, id.creator, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(worlds, nranks, MPI_INT, id.creator, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (verdict != ncclSuccess)
            rc = failed((ncclResult_t)verdict,
                        "ncclCommInitRank: the communicator's rank 0 (world rank %d) refused "
                        "it (two ranks on one device, or a rank given twice)",
                        id.creator);
    }
    if (rc != ncclSuccess) {
        free(worlds);
        return rc;
    }
    MPI_Group world, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, nranks, worlds, &group);
    struct ncclComm *c = calloc(1, sizeof *c);
    MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c->mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    free(worlds);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    if (c->rank != rank || c->size != nranks) {
        rc = failed(ncclInternalError, "ncclCommInitRank: MPI placed rank %d as %d", rank,
                    c->rank);
        MPI_Comm_free(&c->mpi);
        free(c);
        return rc;
    }
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return failed(ncclInvalidArgument, "ncclCommDestroy: NULL communicator");
    MPI_Comm_free(&c->mpi);
    free(c);
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) {
    return c ? ncclSuccess : failed(ncclInvalidArgument, "ncclCommAbort: NULL communicator");
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *st) {
    if (!c) return failed(ncclInvalidArgument, "ncclCommGetAsyncError: NULL communicator");
    *st = ncclSuccess;
    return ncclSuccess;
}

/* ---- types and checks ---- */
static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

static ncclResult_t check_args(const char *op, ncclComm_t c, ncclDataType_t t, size_t count) {
    if (!c) return failed(ncclInvalidArgument, "%s: NULL communicator", op);
    if (!type_size(t)) return failed(ncclInvalidArgument, "%s: data type %d", op, (int)t);
    if (count > (size_t)INT_MAX / 8) /* MPI's int counts, also as float for bf16 */
        return failed(ncclInvalidArgument, "%s: count %zu beyond this emulation", op, count);
    return ncclSuccess;
}

static ncclResult_t check_buf(const char *op, const char *which, const void *p, size_t bytes) {
    if (bytes && !emu_device_range(p, bytes))
        return failed(ncclInvalidArgument,
                      "%s: %s %p (%zu bytes) is not within one allocation of the device", op,
                      which, p, bytes);
    return ncclSuccess;
}

/* send and receive ranges either placed as NCCL's in-place form or apart */
static ncclResult_t check_place(const char *op, const void *send, size_t sbytes, const void *recv,
                                size_t rbytes, const void *in_place_send) {
    if (send == in_place_send || !sbytes || !rbytes) return ncclSuccess;
    const char *s = send, *r = recv;
    if (s < r + rbytes && r < s + sbytes)
        return failed(ncclInvalidArgument,
                      "%s: send buffer %p (%zu bytes) and receive buffer %p (%zu bytes) overlap "
                      "but are not NCCL's in-place placement (send at %p)",
                      op, send, sbytes, recv, rbytes, in_place_send);
    return ncclSuccess;
}

#define TRY(x)                                 \
    do {                                       \
        ncclResult_t try_rc_ = (x);            \
        if (try_rc_ != ncclSuccess) return try_rc_; \
    } while (0)

/* ---- arithmetic: bf16 through float, rounded to nearest even ---- */
static float bf16_to_f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static MPI_Datatype mpi_type(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_UINT16_T; /* 16-bit floats: moved as bits, reduced through float */
    }
}

static ncclResult_t mpi_op(const char *op, ncclRedOp_t red, MPI_Op *out) {
    if (red == ncclSum) *out = MPI_SUM;
    else if (red == ncclMax) *out = MPI_MAX;
    else if (red == ncclMin) *out = MPI_MIN;
    else if (red == ncclProd) *out = MPI_PROD;
    else return failed(ncclInvalidArgument, "%s: reduction %d not emulated", op, (int)red);
    return ncclSuccess;
}

/* A reduction of count elements from send into recv (recv on every rank when
 * root < 0, else on root only). bf16 goes through float copies. */
static ncclResult_t reduce_now(const char *op, const void *send, void *recv, size_t count,
                               ncclDataType_t t, ncclRedOp_t red, int root, ncclComm_t c) {
    MPI_Op mop = MPI_SUM;
    TRY(mpi_op(op, red, &mop));
    const int n = (int)count;
    if (t == ncclFloat16) return failed(ncclInvalidArgument, "%s: float16 not emulated", op);
    if (t == ncclBfloat16) {
        float *a = malloc(sizeof(float) * (count ? count : 1));
        float *b = malloc(sizeof(float) * (count ? count : 1));
        for (size_t i = 0; i < count; i++) a[i] = bf16_to_f(((const uint16_t *)send)[i]);
        int rc = root < 0 ? MPI_Allreduce(a, b, n, MPI_FLOAT, mop, c->mpi)
                          : MPI_Reduce(a, b, n, MPI_FLOAT, mop, root, c->mpi);
        if (root < 0 || root == c->rank)
            for (size_t i = 0; i < count; i++) ((uint16_t *)recv)[i] = f_to_bf16(b[i]);
        free(a);
        free(b);
        return rc == MPI_SUCCESS ? ncclSuccess : failed(ncclSystemError, "%s: MPI error %d", op, rc);
    }
    const void *s = send == recv && (root < 0 || root == c->rank) ? MPI_IN_PLACE : send;
    int rc = root < 0 ? MPI_Allreduce(s, recv, n, mpi_type(t), mop, c->mpi)
                      : MPI_Reduce(s, recv, n, mpi_type(t), mop, root, c->mpi);
    return rc == MPI_SUCCESS ? ncclSuccess : failed(ncclSystemError, "%s: MPI error %d", op, rc);
}

/* ---- groups: the operations queued until the outermost ncclGroupEnd ---- */
typedef enum { OP_ALLREDUCE, OP_REDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BCAST, OP_SEND, OP_RECV } OpKind;
typedef struct {
    OpKind kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t red;
    int peer; /* root or peer */
    ncclComm_t comm;
} Op;

static int g_depth;
static Op *g_ops;
static int g_nops, g_cap;

static ncclResult_t run_op(const Op *o) {
    const size_t tsz = type_size(o->type);
    ncclComm_t c = o->comm;
    int rc = MPI_SUCCESS;
    switch (o->kind) {
    case OP_ALLREDUCE:
        return reduce_now("ncclAllReduce", o->send, o->recv, o->count, o->type, o->red, -1, c);
    case OP_REDUCE:
        return reduce_now("ncclReduce", o->send, o->recv, o->count, o->type, o->red, o->peer, c);
    case OP_REDUCE_SCATTER: {
        /* all-reduce into a scratch copy, then this rank's chunk */
        size_t total = o->count * (size_t)c->size;
        void *tmp = malloc(total * tsz + 1);
        TRY(reduce_now("ncclReduceScatter", o->send, tmp, total, o->type, o->red, -1, c));
        memmove(o->recv, (char *)tmp + (size_t)c->rank * o->count * tsz, o->count * tsz);
        free(tmp);
        return ncclSuccess;
    }
    case OP_ALLGATHER: {
        const size_t bytes = o->count * tsz;
        void *tmp = malloc(bytes + 1);
        memcpy(tmp, o->send, bytes);
        rc = MPI_Allgather(tmp, (int)bytes, MPI_BYTE, o->recv, (int)bytes, MPI_BYTE, c->mpi);
        free(tmp);
        break;
    }
    case OP_BCAST:
        if (c->rank == o->peer && o->send != o->recv)
            memmove(o->recv, o->send, o->count * tsz);
        rc = MPI_Bcast(o->recv, (int)(o->count * tsz), MPI_BYTE, o->peer, c->mpi);
        break;
    default:
        return failed(ncclInternalError, "point-to-point operation outside a group's run");
    }
    return rc == MPI_SUCCESS ? ncclSuccess : failed(ncclSystemError, "MPI error %d", rc);
}

#define TAG_P2P 7

/* The bytes op o reads (i = 0: its send buffer) or writes (i = 1: its receive
 * buffer) on this rank, from *at; 0 where it has none (a send's receive
 * buffer, a reduce's receive buffer off the root, a broadcast's send buffer
 * off the root). */
static size_t op_range(const Op *o, int i, const char **at) {
    const size_t b = o->count * type_size(o->type), n = (size_t)o->comm->size;
    const int root = o->comm->rank == o->peer;
    *at = i ? o->recv : o->send;
    switch (o->kind) {
    case OP_SEND: return i ? 0 : b;
    case OP_RECV: return i ? b : 0;
    case OP_ALLREDUCE: return b;
    case OP_REDUCE: return i && !root ? 0 : b;
    case OP_BCAST: return !i && !root ? 0 : b;
    case OP_REDUCE_SCATTER: return i ? b : b * n;
    case OP_ALLGATHER: return i ? b * n : b;
    }
    return 0;
}

/* Where NCCL's in-place form of op o puts its send buffer: the receive
 * buffer itself, or its place in the whole (reduce-scatter: recvbuff = sendbuff
 * + rank * recvcount; all-gather: sendbuff = recvbuff + rank * sendcount). */
static const char *in_place_send(const Op *o) {
    const size_t b = o->count * type_size(o->type), r = (size_t)o->comm->rank;
    const char *recv = o->recv;
    return o->kind == OP_REDUCE_SCATTER ? recv - r * b : o->kind == OP_ALLGATHER ? recv + r * b : recv;
}

/* NCCL runs a group's operations concurrently: none may write what another
 * reads or writes. */
static ncclResult_t check_group_hazards(void) {
    static const char *const kind[] = {"all-reduce", "reduce", "reduce-scatter", "all-gather",
                                       "broadcast", "send", "recv"};
    for (int a = 0; a < g_nops; a++)
        for (int b = 0; b < g_nops; b++) {
            if (a == b) continue;
            const char *w, *x;
            const size_t wn = op_range(&g_ops[a], 1, &w);
            if (!wn) continue;
            for (int i = 0; i < 2; i++) {
                const size_t xn = op_range(&g_ops[b], i, &x);
                if (xn && w < x + xn && x < w + wn)
                    return failed(ncclInvalidUsage,
                                  "ncclGroupEnd: operation %d of the group (%s) writes %p (%zu "
                                  "bytes), which operation %d (%s) %s at %p (%zu bytes): a "
                                  "group's operations run concurrently",
                                  a, kind[g_ops[a].kind], (const void *)w, wn, b,
                                  kind[g_ops[b].kind], i ? "writes" : "reads", (const void *)x, xn);
            }
        }
    return ncclSuccess;
}

/* Run a group: sends and receives posted first (matched per peer in issue
 * order by MPI's non-overtaking rule), then the collectives in issue order,
 * then wait for the point-to-point ones. */
static ncclResult_t run_group(void) {
    ncclResult_t hz = check_group_hazards();
    if (hz != ncclSuccess) {
        g_nops = 0;
        return hz;
    }
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(g_nops ? g_nops : 1));
    int nreq = 0;
    ncclResult_t rc = ncclSuccess;
    for (int i = 0; i < g_nops; i++) {
        const Op *o = &g_ops[i];
        const int bytes = (int)(o->count * type_size(o->type));
        if (o->kind == OP_SEND)
            MPI_Issend(o->send, bytes, MPI_BYTE, o->peer, TAG_P2P, o->comm->mpi, &req[nreq++]);
        else if (o->kind == OP_RECV)
            MPI_Irecv(o->recv, bytes, MPI_BYTE, o->peer, TAG_P2P, o->comm->mpi, &req[nreq++]);
    }
    for (int i = 0; i < g_nops && rc == ncclSuccess; i++)
        if (g_ops[i].kind != OP_SEND && g_ops[i].kind != OP_RECV) rc = run_op(&g_ops[i]);
    MPI_Status *st = malloc(sizeof(MPI_Status) * (size_t)(nreq ? nreq : 1));
    if (MPI_Waitall(nreq, req, st) != MPI_SUCCESS && rc == ncclSuccess)
        rc = failed(ncclSystemError, "ncclGroupEnd: a send or receive failed in MPI");
    /* a receive must get exactly the bytes the peer sent, as NCCL requires */
    for (int i = 0, k = 0; i < g_nops; i++) {
        const Op *o = &g_ops[i];
        if (o->kind != OP_SEND && o->kind != OP_RECV) continue;
        if (o->kind == OP_RECV && rc == ncclSuccess) {
            int got = 0;
            MPI_Get_count(&st[k], MPI_BYTE, &got);
            if ((size_t)got != o->count * type_size(o->type))
                rc = failed(ncclInvalidUsage,
                            "ncclRecv of %zu bytes from rank %d got a send of %d bytes",
                            o->count * type_size(o->type), o->peer, got);
        }
        k++;
    }
    free(st);
    free(req);
    g_nops = 0;
    return rc;
}

static ncclResult_t enqueue(Op o) {
    if (!g_depth) {
        if (o.kind == OP_SEND || o.kind == OP_RECV) { /* a group of one */
            g_ops = g_cap ? g_ops : malloc(sizeof(Op) * (size_t)(g_cap = 64));
            g_ops[0] = o;
            g_nops = 1;
            return run_group();
        }
        return run_op(&o);
    }
    if (g_nops == g_cap) g_ops = realloc(g_ops, sizeof(Op) * (size_t)(g_cap = g_cap ? 2 * g_cap : 64));
    g_ops[g_nops++] = o;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
    g_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (g_depth == 0) return failed(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_depth) return ncclSuccess;
    return run_group();
}

/* ---- the operations ---- */
/* Checks op o as NCCL would be called with it - communicator, type, count,
 * root or peer, every buffer it reads or writes within one device allocation,
 * send and receive apart unless in NCCL's in-place placement - then runs it,
 * or queues it in the open group. */
static ncclResult_t submit(const char *name, Op o) {
    const int whole = o.kind == OP_REDUCE_SCATTER || o.kind == OP_ALLGATHER;
    TRY(check_args(name, o.comm, o.type, o.count * (size_t)(whole && o.comm ? o.comm->size : 1)));
    const int ranked = o.kind == OP_REDUCE || o.kind == OP_BCAST || o.kind == OP_SEND ||
                       o.kind == OP_RECV;
    if (ranked && (o.peer < 0 || o.peer >= o.comm->size))
        return failed(ncclInvalidArgument, "%s: %s %d of %d ranks", name,
                      o.kind == OP_SEND || o.kind == OP_RECV ? "peer" : "root", o.peer,
                      o.comm->size);
    const char *r, *w;
    const size_t rn = op_range(&o, 0, &r), wn = op_range(&o, 1, &w);
    TRY(check_buf(name, "sendbuff", r, rn));
    TRY(check_buf(name, "recvbuff", w, wn));
    if (rn && wn) TRY(check_place(name, r, rn, w, wn, in_place_send(&o)));
    return enqueue(o);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t red, ncclComm_t c, cudaStream_t stream) {
    (void)stream;
    return submit("ncclAllReduce", (Op){OP_ALLREDUCE, send, recv, count, t, red, -1, c});
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                        ncclRedOp_t red, int root, ncclComm_t c, cudaStream_t stream) {
    (void)stream;
    return submit("ncclReduce", (Op){OP_REDUCE, send, recv, count, t, red, root, c});
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
                               ncclRedOp_t red, ncclComm_t c, cudaStream_t stream) {
    (void)stream;
    return submit("ncclReduceScatter",
                  (Op){OP_REDUCE_SCATTER, send, recv, recvcount, t, red, -1, c});
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t,
                           ncclComm_t c, cudaStream_t stream) {
    (void)stream;
    return submit("ncclAllGather", (Op){OP_ALLGATHER, send, recv, sendcount, t, ncclSum, -1, c});
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t stream) {
    (void)stream;
    return submit("ncclBroadcast", (Op){OP_BCAST, send, recv, count, t, ncclSum, root, c});
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t stream) {
    (void)stream;
    return submit("ncclSend", (Op){OP_SEND, send, NULL, count, t, ncclSum, peer, c});
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t stream) {
    (void)stream;
    return submit("ncclRecv", (Op){OP_RECV, NULL, recv, count, t, ncclSum, peer, c});
}
