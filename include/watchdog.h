/* watchdog.h - bounds every wait on other ranks (comm.timeout_s).
 *
 * A rank that is stopped (SIGSTOP, a debugger), hung or dead leaves its peers
 * waiting forever in a collective, a point-to-point receive or the step's
 * device synchronisation (where NCCL's kernels wait on the GPU). The watchdog
 * is a thread that watches the calling thread's waits: code that may wait on
 * another rank brackets the wait with lt_watchdog_enter/leave; when one lasts
 * longer than the timeout, the watchdog says which operation, group, peer and
 * step, runs the registered abort hooks (NCCL communicators are aborted so
 * their kernels stop), and ends the process with LT_EXIT_TIMEOUT - which makes
 * mpirun or srun (--kill-on-bad-exit) stop every other rank, stopped ones
 * included: no orphans, no hang. */
#ifndef LT_WATCHDOG_H
#define LT_WATCHDOG_H

#ifdef __cplusplus
extern "C" {
#endif

#define LT_EXIT_TIMEOUT 4 /* a wait on another rank exceeded comm.timeout_s */

/* Start the thread (timeout_s > 0; a no-op otherwise or when already running). */
void lt_watchdog_start(double timeout_s, int rank);
void lt_watchdog_stop(void);
/* The training step shown in a timeout message (1-based; 0 = set-up). */
void lt_watchdog_set_step(long step);
/* A wait begins / ends. Nested waits count as the outermost one. `what` and
 * `group` must outlive the wait (string literals, a group's name); peer < 0
 * for collectives. */
void lt_watchdog_enter(const char *what, const char *group, int peer);
void lt_watchdog_leave(void);
/* enter/leave become no-ops on the calling thread: for helper threads whose
 * waits the training thread already bounds by waiting for them. */
void lt_watchdog_mute_thread(void);
/* Called (from the watchdog thread) before the process ends on a timeout. */
void lt_watchdog_on_timeout(void (*hook)(void *), void *arg);
/* Seconds the watchdog allows, 0 when it is not running. */
double lt_watchdog_timeout(void);

#ifdef __cplusplus
}
#endif

#endif
