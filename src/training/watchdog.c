/* watchdog.c - see watchdog.h. One thread, woken every 200 ms (or sooner for
 * short timeouts); the state it reads is written by the training thread with
 * atomics: the start time of the current outermost wait (0 when none), what
 * it waits for, and the step. */
#include "watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define MAX_HOOKS 16

static struct {
    pthread_t thread;
    atomic_int running;
    double timeout;
    int rank;
    atomic_long step;
    atomic_int depth;             /* nesting of enter/leave on the training thread */
    _Atomic double since;         /* lt_now() at the outermost enter; 0 when not waiting */
    const char *_Atomic what;
    const char *_Atomic group;
    atomic_int peer;
    atomic_int nhooks;
    void (*hooks[MAX_HOOKS])(void *);
    void *hook_args[MAX_HOOKS];
} W;

/* A communication worker thread (comm_async.c) makes MPI calls of its own; its
 * waits are bounded through the training thread's wait for their requests,
 * so they must not touch the training thread's state here. */
static _Thread_local int muted;

void lt_watchdog_mute_thread(void) { muted = 1; }

static void *watch(void *unused) {
    (void)unused;
    const double tick = W.timeout < 2.0 ? W.timeout / 10.0 : 0.2;
    const struct timespec ts = {(time_t)tick, (long)((tick - (double)(time_t)tick) * 1e9)};
    while (atomic_load(&W.running)) {
        nanosleep(&ts, NULL);
        const double since = atomic_load(&W.since);
        if (since <= 0.0 || lt_now() - since <= W.timeout) continue;
        const char *what = atomic_load(&W.what), *group = atomic_load(&W.group);
        const int peer = atomic_load(&W.peer);
        char peer_txt[48] = "";
        if (peer >= 0) snprintf(peer_txt, sizeof peer_txt, " with peer %d", peer);
        fprintf(stderr,
                "lattice: error: [rank %d] %s%s%s%s has waited %.0f s, more than comm.timeout_s "
                "= %g, at step %ld: another rank is stopped, hung or dead; ending this process "
                "(exit %d) so that the launcher stops the job\n",
                W.rank, what ? what : "a wait", group ? " on group '" : "", group ? group : "",
                group ? "'" : "", lt_now() - since, W.timeout, atomic_load(&W.step), LT_EXIT_TIMEOUT);
        fflush(stderr);
        for (int i = 0; i < atomic_load(&W.nhooks); i++) W.hooks[i](W.hook_args[i]);
        fflush(stdout);
        _exit(LT_EXIT_TIMEOUT);
    }
    return NULL;
}

void lt_watchdog_start(double timeout_s, int rank) {
    if (timeout_s <= 0.0 || atomic_load(&W.running)) return;
    W.timeout = timeout_s;
    W.rank = rank;
    atomic_store(&W.since, 0.0);
    atomic_store(&W.depth, 0);
    atomic_store(&W.running, 1);
    if (pthread_create(&W.thread, NULL, watch, NULL) != 0) {
        atomic_store(&W.running, 0);
        lt_fatal("cannot start the communication watchdog thread");
    }
}

void lt_watchdog_stop(void) {
    if (!atomic_load(&W.running)) return;
    atomic_store(&W.running, 0);
    pthread_join(W.thread, NULL);
}

void lt_watchdog_set_step(long step) { atomic_store(&W.step, step); }

void lt_watchdog_enter(const char *what, const char *group, int peer) {
    if (muted) return;
    if (atomic_fetch_add(&W.depth, 1) != 0) return;
    atomic_store(&W.what, what);
    atomic_store(&W.group, group);
    atomic_store(&W.peer, peer);
    atomic_store(&W.since, lt_now());
}

void lt_watchdog_leave(void) {
    if (muted) return;
    if (atomic_fetch_sub(&W.depth, 1) == 1) atomic_store(&W.since, 0.0);
}

void lt_watchdog_on_timeout(void (*hook)(void *), void *arg) {
    const int n = atomic_load(&W.nhooks);
    if (n == MAX_HOOKS) lt_fatal("watchdog: too many abort hooks");
    W.hook_args[n] = arg;
    W.hooks[n] = hook;
    atomic_store(&W.nhooks, n + 1); /* published after its slot is filled */
}

double lt_watchdog_timeout(void) { return atomic_load(&W.running) ? W.timeout : 0.0; }
