/* comm_async.c - host buffers over MPI, run by a worker thread of the group
 * (see comm_internal.h): the background companion of a host MPI group
 * (lt_comm_background) on the CPU backend.
 *
 * Open MPI moves a nonblocking collective's data only inside MPI calls, so
 * MPI_Iallreduce started by the training thread would mostly progress when it
 * is finished - after the compute it was meant to hide behind. Here every
 * operation is a job on a FIFO queue: the group's worker thread starts it on
 * the companion's own communicator (duplicated, so it never meets the
 * training thread's operations) with the nonblocking MPI implementation and
 * drives it with MPI_Test until it completes, sleeping briefly between tests
 * so that it does not take a core from the compute. Jobs run one at a time in
 * the order they were started: every rank starts the same operations in the
 * same order, so the collectives match, and each one runs exactly as the
 * same call would on the training thread (same library, same algorithm, same
 * sums). start returns an active request holding the job; finish waits for
 * the job under the watchdog (the worker's own waits are bounded through this
 * one: every job is finished by the training thread); test never blocks.
 * Needs MPI_THREAD_MULTIPLE (lt_world_init asks for it). Point-to-point
 * operations are refused: one pending receive would hold the queue. */
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"
#include "common.h"

typedef enum { JOB_ALL_REDUCE, JOB_REDUCE_SCATTER, JOB_REDUCE_SCATTER_V, JOB_ALL_GATHER,
               JOB_BROADCAST } JobKind;

typedef struct Job {
    JobKind kind;
    const char *op;
    const void *send;
    void *recv; /* the buffer of in-place operations */
    size_t count;
    LtCommType type;
    LtCommOp red;
    int root;
    int *counts; /* reduce_scatter_v: a copy of the caller's */
    size_t total;
    int done;    /* under the mutex */
    struct Job *next;
} Job;

typedef struct {
    LtComm inner; /* what the worker runs on: the MPI implementation, same communicator */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    Job *head, *tail;
    int stop;
    atomic_int waiters; /* training-thread waits in finish: the core is the worker's then */
    double work_s; /* seconds the worker spent running jobs (under the mutex) */
} Async;

/* Pause between two tests of a running operation while the training thread
 * computes: short against a collective's duration, long enough to leave the
 * core to the compute. While it waits for a job the worker only yields: each
 * step of a collective's protocol needs a test on both sides. */
static const struct timespec POLL = {0, 20000};

static void poll_pause(Async *a) {
    if (atomic_load(&a->waiters))
        sched_yield();
    else
        nanosleep(&POLL, NULL);
}

static void run_job(Async *a, Job *j) {
    const LtCommImpl *mpi = &lt_comm_mpi_impl;
    LtCommRequest r;
    memset(&r, 0, sizeof r);
    r.comm = &a->inner;
    r.op = j->op;
    r.peer = -1;
    switch (j->kind) {
    case JOB_ALL_REDUCE: mpi->all_reduce(&r, j->recv, j->count, j->type, j->red); break;
    case JOB_REDUCE_SCATTER: mpi->reduce_scatter(&r, j->send, j->recv, j->count, j->type); break;
    case JOB_REDUCE_SCATTER_V:
        mpi->reduce_scatter_v(&r, j->send, j->recv, j->counts, j->total, j->type);
        break;
    case JOB_ALL_GATHER: mpi->all_gather(&r, j->send, j->recv, j->count, j->type); break;
    case JOB_BROADCAST: mpi->broadcast(&r, j->recv, j->count, j->type, j->root); break;
    }
    while (r.active && !mpi->test(&r)) poll_pause(a);
}

static void *worker(void *arg) {
    Async *a = arg;
    lt_watchdog_mute_thread();
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->stop) pthread_cond_wait(&a->work, &a->mu);
        Job *j = a->head;
        if (!j) break; /* stopping, and nothing left */
        a->head = j->next;
        if (!a->head) a->tail = NULL;
        pthread_mutex_unlock(&a->mu);
        const double t0 = lt_now();
        run_job(a, j);
        const double dt = lt_now() - t0;
        pthread_mutex_lock(&a->mu);
        a->work_s += dt;
        j->done = 1;
        pthread_cond_broadcast(&a->done);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void async_create(LtComm *c) {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
        lt_fatal("communication: group '%s': overlapping communication needs an MPI library "
                 "with MPI_THREAD_MULTIPLE (this one provides level %d); turn the "
                 "parallel.overlap_* switches off",
                 c->name, level);
    Async *a = lt_calloc(sizeof *a);
    a->inner = *c;
    a->inner.impl = &lt_comm_mpi_impl;
    a->inner.state = NULL; /* the MPI implementation's own (bf16 conversion buffer) */
    a->inner.borrowed = 1;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->done, NULL);
    c->state = a;
    if (pthread_create(&a->thread, NULL, worker, a) != 0)
        lt_fatal("communication: group '%s': cannot start its worker thread", c->name);
}

/* Every request was finished before (comm.h), so the queue is empty. */
static void async_destroy(LtComm *c) {
    Async *a = c->state;
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    lt_comm_mpi_impl.destroy(&a->inner);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->done);
    free(a);
    c->state = NULL;
}

double lt_comm_async_work_seconds(const LtComm *c) {
    Async *a = c->state;
    if (!a) return 0.0;
    pthread_mutex_lock(&a->mu);
    const double s = a->work_s;
    pthread_mutex_unlock(&a->mu);
    return s;
}

/* Queue job j of request r (which becomes active, holding it). */
static void enqueue(LtCommRequest *r, Job *j) {
    Async *a = r->comm->state;
    j->op = r->op;
    pthread_mutex_lock(&a->mu);
    if (a->tail)
        a->tail->next = j;
    else
        a->head = j;
    a->tail = j;
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
    r->active = 1;
    r->handle.p[0] = j;
}

static Job *job_new(JobKind kind, const void *send, void *recv, size_t count, LtCommType t) {
    Job *j = lt_calloc(sizeof *j);
    j->kind = kind;
    j->send = send;
    j->recv = recv;
    j->count = count;
    j->type = t;
    return j;
}

static void async_all_reduce(LtCommRequest *r, void *buf, size_t count, LtCommType t,
                             LtCommOp red) {
    Job *j = job_new(JOB_ALL_REDUCE, NULL, buf, count, t);
    j->red = red;
    enqueue(r, j);
}

static void async_reduce_scatter(LtCommRequest *r, const void *send, void *recv, size_t count,
                                 LtCommType t) {
    enqueue(r, job_new(JOB_REDUCE_SCATTER, send, recv, count, t));
}

static void async_reduce_scatter_v(LtCommRequest *r, const void *send, void *recv,
                                   const int *counts, size_t total, LtCommType t) {
    Job *j = job_new(JOB_REDUCE_SCATTER_V, send, recv, 0, t);
    const size_t n = (size_t)r->comm->size;
    j->counts = lt_malloc(n * sizeof(int));
    memcpy(j->counts, counts, n * sizeof(int));
    j->total = total;
    enqueue(r, j);
}

static void async_all_gather(LtCommRequest *r, const void *send, void *recv, size_t count,
                             LtCommType t) {
    enqueue(r, job_new(JOB_ALL_GATHER, send, recv, count, t));
}

static void async_broadcast(LtCommRequest *r, void *buf, size_t count, LtCommType t, int root) {
    Job *j = job_new(JOB_BROADCAST, NULL, buf, count, t);
    j->root = root;
    enqueue(r, j);
}

static void async_p2p(LtCommRequest *r, const void *buf, size_t count, LtCommType t, int tag) {
    (void)buf, (void)count, (void)t, (void)tag;
    lt_fatal("communication: %s on group '%s': a background group runs collectives only", r->op,
             r->comm->name);
}

static void async_recv(LtCommRequest *r, void *buf, size_t count, LtCommType t, int tag) {
    async_p2p(r, buf, count, t, tag);
}

static void job_free(Job *j) {
    free(j->counts);
    free(j);
}

static void async_finish(LtCommRequest *r) {
    Async *a = r->comm->state;
    Job *j = r->handle.p[0];
    lt_watchdog_enter(r->op, r->comm->name, -1);
    atomic_fetch_add(&a->waiters, 1);
    pthread_mutex_lock(&a->mu);
    while (!j->done) pthread_cond_wait(&a->done, &a->mu);
    pthread_mutex_unlock(&a->mu);
    atomic_fetch_sub(&a->waiters, 1);
    lt_watchdog_leave();
    job_free(j);
}

static int async_test(LtCommRequest *r) {
    Async *a = r->comm->state;
    Job *j = r->handle.p[0];
    pthread_mutex_lock(&a->mu);
    const int done = j->done;
    pthread_mutex_unlock(&a->mu);
    if (done) job_free(j);
    return done;
}

const LtCommImpl lt_comm_async_impl = {
    .name = "mpi-worker",
    .wide_counts = 0,
    .create = async_create,
    .destroy = async_destroy,
    .all_reduce = async_all_reduce,
    .reduce_scatter = async_reduce_scatter,
    .reduce_scatter_v = async_reduce_scatter_v,
    .all_gather = async_all_gather,
    .broadcast = async_broadcast,
    .send = async_p2p,
    .recv = async_recv,
    .batch_begin = NULL,
    .batch_end = NULL,
    .finish = async_finish,
    .test = async_test,
};
