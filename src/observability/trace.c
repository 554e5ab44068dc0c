/* trace.c - the run's timeline (see trace.h).
 *
 * One buffer of events per rank behind a mutex (spans are coarse: a pass, a
 * collective; a lock per event is far below their cost), a table of rows
 * (thread rows and communication rows), and per thread a stack of open
 * spans. lt_trace_stop turns each rank's events into JSON text and sends
 * it to rank 0 one rank at a time, so rank 0 holds one rank's text at once
 * whatever the world size. The file (Chrome trace-event JSON): docs/formats.md
 * ("Trace file"). */
#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "config.h"

#ifdef LT_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

enum { MAX_ROWS = 64, MAX_DEPTH = 16, ARGS_MAX = 112 };

typedef struct {
    int64_t t0, dur; /* ns from the origin */
    const char *name, *cat;
    int row;
    char args[ARGS_MAX]; /* JSON members, without braces */
} Event;

typedef struct {
    char name[64];   /* thread_name */
    char group[48];  /* a communication row's group; "" for a thread's row */
    int busy;        /* communication row: an operation in flight on it */
    int64_t last_end;
} Row;

int lt_trace_mode = 0;

static struct {
    pthread_mutex_t mu;
    char path[LT_PATH_MAX];
    char process[96];
    int rank, world;
    int pending;       /* recorded, not yet written (the exit handler writes path.rankR) */
    int64_t origin;    /* CLOCK_MONOTONIC ns of the origin */
    LtTraceWorld world_ops; /* the world, for the barrier and the gather (trace_gather.c) */
    Event *ev;
    size_t n, cap, dropped;
    Row rows[MAX_ROWS + 1]; /* [1..nrows]: tid = index */
    int nrows;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

typedef struct {
    const char *name;
    int64_t t0;
    int nvtx;
    char args[ARGS_MAX];
} Frame;

static _Thread_local int tl_row;          /* this thread's row; 0: none yet */
static _Thread_local const char *tl_name; /* lt_trace_thread's name, for a later row */
static _Thread_local Frame tl_stack[MAX_DEPTH];
static _Thread_local int tl_depth;

static int recording(void) { return lt_trace_on() & LT_TRACE_RECORD; }

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t lt_trace_now(void) { return mono_ns() - g.origin; }

/* ---- NVTX (builds with CUDA whose toolkit has the NVTX3 headers) ---- */
#ifdef LT_HAVE_NVTX
static int nvtx_wanted(void) {
    return getenv("NVTX_INJECTION64_PATH") || getenv("NSYS_PROFILING_SESSION_ID");
}
static void nvtx_push(const char *name) { nvtxRangePushA(name); }
static void nvtx_pop(void) { nvtxRangePop(); }
static uint64_t nvtx_start(const char *name) { return nvtxRangeStartA(name); }
static void nvtx_end(uint64_t id) { nvtxRangeEnd(id); }
#else
static int nvtx_wanted(void) { return 0; }
static void nvtx_push(const char *name) { (void)name; }
static void nvtx_pop(void) {}
static uint64_t nvtx_start(const char *name) { (void)name; return 0; }
static void nvtx_end(uint64_t id) { (void)id; }
#endif

/* ---- rows and events (callers hold g.mu) ---- */
static int row_add(const char *name, const char *group) {
    if (g.nrows == MAX_ROWS) return 0;
    Row *r = &g.rows[++g.nrows];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->group, sizeof r->group, "%s", group);
    return g.nrows;
}

static void event_add(int row, const char *name, const char *cat, int64_t t0, int64_t t1,
                      const char *args) {
    if (!(lt_trace_mode & LT_TRACE_RECORD)) return;
    if (row == 0 || g.n == LT_TRACE_MAX_EVENTS) {
        if (g.dropped++ == 0 && row)
            fprintf(stderr, "lattice: warning: [rank %d] logging.trace: %d events recorded, "
                            "the most kept per rank: later ones are dropped (counted in the "
                            "file's otherData)\n", g.rank, LT_TRACE_MAX_EVENTS);
        else if (g.dropped == 1)
            fprintf(stderr, "lattice: warning: [rank %d] logging.trace: all %d rows are in use: "
                            "spans on new ones are dropped\n", g.rank, MAX_ROWS);
        return;
    }
    if (g.n == g.cap) {
        size_t cap = g.cap ? 2 * g.cap : 4096;
        Event *ev = realloc(g.ev, cap * sizeof *ev);
        if (!ev) lt_fatal("logging.trace: out of memory for %zu events", cap);
        g.ev = ev, g.cap = cap;
    }
    Event *e = &g.ev[g.n++];
    e->t0 = t0 < 0 ? 0 : t0;
    e->dur = t1 > e->t0 ? t1 - e->t0 : 0;
    e->name = name, e->cat = cat, e->row = row;
    snprintf(e->args, sizeof e->args, "%s", args ? args : "");
}

/* The calling thread's row, made on its first span. */
static int thread_row(void) {
    if (tl_row) return tl_row;
    char name[64];
    if (tl_name)
        snprintf(name, sizeof name, "%s", tl_name);
    else
        snprintf(name, sizeof name, "thread %d", g.nrows + 1);
    tl_row = row_add(name, "");
    return tl_row;
}

void lt_trace_thread(const char *name) {
    tl_name = name;
    pthread_mutex_lock(&g.mu);
    if (tl_row) snprintf(g.rows[tl_row].name, sizeof g.rows[tl_row].name, "%s", name);
    pthread_mutex_unlock(&g.mu);
}

/* ---- spans of a thread ---- */
static void format_args(char *out, const char *fmt, va_list ap) {
    out[0] = 0;
    if (fmt) vsnprintf(out, ARGS_MAX, fmt, ap);
}

void lt_trace_begin(const char *name, const char *args_fmt, ...) {
    if (tl_depth++ >= MAX_DEPTH) return; /* too deep: dropped at its end */
    Frame *f = &tl_stack[tl_depth - 1];
    f->name = name;
    f->args[0] = 0;
    if (recording()) {
        va_list ap;
        va_start(ap, args_fmt);
        format_args(f->args, args_fmt, ap);
        va_end(ap);
    }
    f->nvtx = (lt_trace_on() & LT_TRACE_NVTX) != 0;
    if (f->nvtx) nvtx_push(name);
    f->t0 = lt_trace_now();
}

void lt_trace_end(void) {
    const int64_t t1 = lt_trace_now();
    if (tl_depth == 0) return; /* its begin came before tracing was on */
    if (tl_depth-- > MAX_DEPTH) {
        pthread_mutex_lock(&g.mu);
        g.dropped++;
        pthread_mutex_unlock(&g.mu);
        return;
    }
    const Frame *f = &tl_stack[tl_depth];
    if (f->nvtx) nvtx_pop();
    if (!recording()) return;
    pthread_mutex_lock(&g.mu);
    event_add(thread_row(), f->name, "lattice", f->t0, t1, f->args);
    pthread_mutex_unlock(&g.mu);
}

/* ---- operations over two calls, on communication rows ---- */
/* A row of group's free since t0 (a new one when all are in use). */
static int comm_row(const char *group, int64_t t0) {
    for (int i = 1; i <= g.nrows; i++) {
        Row *r = &g.rows[i];
        if (!r->busy && r->group[0] && strcmp(r->group, group) == 0 && r->last_end <= t0)
            return i;
    }
    int k = 1;
    for (int i = 1; i <= g.nrows; i++) k += strcmp(g.rows[i].group, group) == 0;
    char name[64];
    if (k == 1)
        snprintf(name, sizeof name, "comm %s", group);
    else
        snprintf(name, sizeof name, "comm %s %d", group, k);
    return row_add(name, group);
}

void lt_trace_op_begin(LtTraceOp *op, const char *group, const char *name, int64_t t0) {
    op->row = 0;
    op->t0 = t0;
    op->nvtx = lt_trace_on() & LT_TRACE_NVTX ? nvtx_start(name) : 0;
    if (!recording()) return;
    pthread_mutex_lock(&g.mu);
    op->row = comm_row(group, t0);
    if (op->row) g.rows[op->row].busy = 1;
    pthread_mutex_unlock(&g.mu);
}

void lt_trace_op_end(LtTraceOp *op, const char *name, const char *args_fmt, ...) {
    if (op->nvtx) nvtx_end(op->nvtx);
    if (op->row) {
        const int64_t t1 = lt_trace_now();
        char args[ARGS_MAX];
        va_list ap;
        va_start(ap, args_fmt);
        format_args(args, args_fmt, ap);
        va_end(ap);
        pthread_mutex_lock(&g.mu);
        g.rows[op->row].busy = 0;
        g.rows[op->row].last_end = t1;
        event_add(op->row, name, "comm", op->t0, t1, args);
        pthread_mutex_unlock(&g.mu);
    }
    memset(op, 0, sizeof *op);
}

/* ---- JSON text ---- */
typedef struct {
    char *p; /* malloc'd */
    size_t n;
} Text;

/* s as a JSON string (names given by callers: quotes and control characters
 * escaped). */
static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

/* A metadata event: args {key: name} (a string) or {key: index}. */
static void put_meta(FILE *f, int first, const char *what, int tid, const char *key,
                     const char *name, int index) {
    fprintf(f, "%s{\"name\": \"%s\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"%s\": ",
            first ? "" : ",\n", what, g.rank, tid, key);
    if (name)
        put_string(f, name);
    else
        fprintf(f, "%d", index);
    fputs("}}", f);
}

/* This rank's rows and events, comma-separated (callers hold g.mu). */
static Text rank_text(void) {
    Text t = {NULL, 0};
    FILE *f = open_memstream(&t.p, &t.n); /* grows as it is written */
    if (!f) lt_fatal("logging.trace: open_memstream: %s", strerror(errno));
    put_meta(f, 1, "process_name", 0, "name", g.process, 0);
    put_meta(f, 0, "process_sort_index", 0, "sort_index", NULL, g.rank);
    for (int i = 1; i <= g.nrows; i++) {
        put_meta(f, 0, "thread_name", i, "name", g.rows[i].name, 0);
        put_meta(f, 0, "thread_sort_index", i, "sort_index", NULL, i);
    }
    for (size_t i = 0; i < g.n; i++) {
        const Event *e = &g.ev[i];
        fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
                   "\"tid\": %d, \"ts\": %lld.%03lld, \"dur\": %lld.%03lld, \"args\": {%s}}",
                e->name, e->cat, g.rank, e->row, (long long)(e->t0 / 1000),
                (long long)(e->t0 % 1000), (long long)(e->dur / 1000), (long long)(e->dur % 1000),
                e->args);
    }
    if (ferror(f) || fclose(f) != 0) lt_fatal("logging.trace: out of memory for the events' text");
    return t;
}

static void write_head(FILE *f) { fputs("{\"traceEvents\": [\n", f); }

static void write_tail(FILE *f, int ranks, double dropped) {
    fprintf(f, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"lattice\": \"%s\", "
               "\"ranks\": %d, \"max_events_per_rank\": %d, \"dropped_events\": %.0f}}\n",
            LT_VERSION, ranks, LT_TRACE_MAX_EVENTS, dropped);
}

/* Close f and rename tmp to path; 0 or -1 with errno's reason in err. */
static int commit_file(FILE *f, int failed, const char *tmp, const char *path, char *err,
                       size_t errlen) {
    int e = failed ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !e) e = errno;
    if (!e && rename(tmp, path) != 0) e = errno;
    if (!e) return 0;
    remove(tmp);
    return lt_errorf(err, errlen, "logging.trace: writing '%s' failed: %s", path, strerror(e));
}

/* ---- open, finish, and the exit handler ---- */
/* A process leaving without lt_trace_stop (an error) writes its own events. */
static void write_own_at_exit(void) {
    pthread_mutex_lock(&g.mu);
    __atomic_and_fetch(&lt_trace_mode, ~LT_TRACE_RECORD, __ATOMIC_RELAXED);
    const int pending = g.pending;
    g.pending = 0;
    Text t = {NULL, 0};
    if (pending) t = rank_text();
    pthread_mutex_unlock(&g.mu);
    if (!pending) return;
    char path[LT_PATH_MAX + 32], tmp[LT_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s.rank%d", g.path, g.rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    write_head(f);
    fwrite(t.p, 1, t.n, f);
    write_tail(f, 1, (double)g.dropped);
    char err[LT_PATH_MAX + 128];
    if (commit_file(f, ferror(f), tmp, path, err, sizeof err) == 0)
        fprintf(stderr, "lattice: [rank %d] logging.trace: the run did not end normally; this "
                        "rank's events are in %s\n", g.rank, path);
    free(t.p);
}

/* Rank 0: can path be created? (Said now, not after the run.) */
static void check_writable(void) {
    char tmp[LT_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", g.path);
    FILE *f = fopen(tmp, "w");
    if (!f) lt_input_error("logging.trace: cannot create '%s': %s", tmp, strerror(errno));
    fclose(f);
    remove(tmp);
}

void lt_trace_start(const char *path, int rank, int world, const char *process_name,
                    const LtTraceWorld *ops) {
    static int handler;
    int mode = nvtx_wanted() ? LT_TRACE_NVTX : 0;
    if (path && path[0]) {
        snprintf(g.path, sizeof g.path, "%s", path);
        snprintf(g.process, sizeof g.process, "%s", process_name);
        g.rank = rank, g.world = world;
        if (rank == 0) check_writable();
        g.world_ops = *ops;
        g.world_ops.open(g.world_ops.ctx); /* the origin: every rank's clock right after it */
        g.origin = mono_ns();
        g.n = g.dropped = 0;
        g.nrows = 0;
        tl_row = row_add("main", "");
        g.pending = 1;
        mode |= LT_TRACE_RECORD;
        if (!handler) handler = atexit(write_own_at_exit) == 0;
    }
    __atomic_store_n(&lt_trace_mode, mode, __ATOMIC_RELEASE); /* after the origin */
}

/* Rank 0: append rank r's text. */
static void gather_rank(FILE *f, int r, double *dropped) {
    size_t n;
    char *buf = g.world_ops.recv(g.world_ops.ctx, r, &n, dropped);
    fputs(",\n", f);
    fwrite(buf, 1, n, f);
    free(buf);
}

int lt_trace_stop(char *err, size_t errlen) {
    pthread_mutex_lock(&g.mu);
    __atomic_and_fetch(&lt_trace_mode, ~LT_TRACE_RECORD, __ATOMIC_RELAXED);
    const int pending = g.pending;
    Text t = {NULL, 0};
    if (pending) t = rank_text();
    pthread_mutex_unlock(&g.mu);
    if (!pending) return 0;
    int rc = 0;
    if (g.rank != 0) {
        g.world_ops.send(g.world_ops.ctx, t.p, t.n, (double)g.dropped);
    } else {
        char tmp[LT_PATH_MAX + 16];
        snprintf(tmp, sizeof tmp, "%s.tmp", g.path);
        FILE *f = fopen(tmp, "w");
        const int open_errno = errno;
        FILE *out = f ? f : fopen("/dev/null", "w"); /* the other ranks' texts still come */
        if (!out) lt_fatal("logging.trace: cannot open /dev/null: %s", strerror(errno));
        double dropped = (double)g.dropped;
        write_head(out);
        fwrite(t.p, 1, t.n, out);
        for (int r = 1; r < g.world; r++) gather_rank(out, r, &dropped);
        write_tail(out, g.world, dropped);
        if (f)
            rc = commit_file(f, ferror(f), tmp, g.path, err, errlen);
        else
            rc = lt_errorf(err, errlen, "logging.trace: cannot create '%s': %s", tmp,
                           strerror(open_errno));
        if (!f) fclose(out);
        if (dropped > 0)
            fprintf(stderr, "lattice: warning: logging.trace: %.0f events dropped over all ranks "
                            "(at most %d per rank are kept)\n", dropped, LT_TRACE_MAX_EVENTS);
        if (!rc) lt_log("trace      %s: %d rank(s), open it in https://ui.perfetto.dev\n",
                        g.path, g.world);
    }
    free(t.p);
    pthread_mutex_lock(&g.mu);
    g.pending = 0; /* written (or said why not): nothing left for the exit handler */
    free(g.ev);
    g.ev = NULL, g.n = g.cap = 0;
    pthread_mutex_unlock(&g.mu);
    g.world_ops.close(g.world_ops.ctx);
    return rc;
}
