/* plan_calibrate.c - `lattice plan --calibrate`: the planner's device
 * constants measured on this machine (see plan_device.h; the file it writes:
 * docs/formats.md).
 *
 * Everything runs through the engine's own entries, so what is calibrated is
 * what training runs: the backend's linear_fwd / linear_bwd (cuBLASLt, or
 * OpenBLAS with the thread count the engine would take), its copy, and
 * lattice's comm layer for the all-reduce. The measurements below, each a
 * median over repetitions after a warm-up, each given a share of the
 * --seconds budget (a size whose predicted time does not fit its share is
 * skipped, and the table says so), run in --rounds rounds spread over the
 * budget, each figure the median of the rounds' (a load that comes and goes
 * on a shared machine then lands in every figure alike); under a launcher
 * every timed repetition starts at a barrier on all ranks at once:
 *   ceiling   square GEMMs of growing n: the best is the peak where no
 *             datasheet figure is known (the CPU)
 *   layers    the twelve GEMMs of one transformer layer (qkv, projection,
 *             fc, fc projection; forward, backward data, backward weight)
 *             for a few hidden sizes
 *   rows      the same at fewer and fewer tokens: eff(N) = eff N / (N + h)
 *             fitted by weighted least squares on 1/eff(N) = 1/eff + (h/eff) / N
 *   memory    a large device-to-device copy (bytes read + written)
 *   memory-bound ops  LayerNorm, GeLU, the cross-entropy, AdamW
 *             (plan_calibrate_ops.c)
 *   attention the core forward and backward at three sequence lengths: the
 *             backend's own, and cuDNN's on a GPU where it runs
 *   all-reduce  under a launcher with >= 2 ranks: fp32 sums of a few sizes;
 *             bus bandwidth 2 (n-1)/n bytes / time, latency per ring step
 *             from the smallest message (the planner's ring model)
 *   skew      under a launcher: what ranks wait for each other at a
 *             collective after the same work (sync_skew_us, sync_skew) */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "comm.h"
#include "common.h"
#include "dist.h"
#include "metrics.h"
#include "plan_device.h"

#include "plan_calibrate.h"

/* ---- timing ------------------------------------------------------------------- */

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

double lt_cal_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

void lt_cal_sync(const Cal *c) {
    if (c->comm) lt_comm_barrier(c->comm);
}

int lt_cal_agree(const Cal *c, int n) {
    int32_t v = n;
    if (c->comm) lt_comm_broadcast(c->comm, &v, 1, LT_COMM_I32, 0);
    return v;
}

int lt_cal_min_reps(const Cal *c) { return (3 + c->rounds - 1) / c->rounds; }

double lt_cal_time_median(Cal *c, CalRun run, const void *arg, double slot) {
    if (c->round == 0) run(c, arg); /* (later rounds find the kept buffers touched) */
    c->be->ops->synchronize(c->be);
    double t[MAX_REPS];
    int n = 0;
    const double start = lt_now();
    while (lt_cal_agree(c, n < MAX_REPS &&
                               (n < lt_cal_min_reps(c) || lt_now() - start < slot / c->rounds))) {
        lt_cal_sync(c);
        const double t0 = lt_now();
        run(c, arg);
        c->be->ops->synchronize(c->be);
        t[n++] = lt_now() - t0;
    }
    return lt_cal_median(t, n);
}

/* The kept buffer (id, bytes), or NULL. */
static void *kept(const Cal *c, int id, size_t bytes) {
    for (int i = 0; i < c->nkept; i++)
        if (c->kept[i].id == id && c->kept[i].bytes == bytes) return c->kept[i].p;
    return NULL;
}

void *lt_cal_buffer(Cal *c, int id, size_t bytes) {
    void *old = kept(c, id, bytes);
    if (old) return old;
    if (c->nkept == MAX_KEPT) lt_fatal("--calibrate: more than %d buffers kept", MAX_KEPT);
    void *p = c->be->ops->alloc(c->be, bytes);
    c->kept[c->nkept++] = (CalBuffer){id, bytes, p};
    return p;
}

void lt_cal_free_buffers(Cal *c) {
    for (int i = 0; i < c->nkept; i++) c->be->ops->free(c->be, c->kept[i].p);
    c->nkept = 0;
}

void *lt_cal_random_act(Cal *c, size_t n, uint64_t seed) {
    LtBackend *be = c->be;
    const int id = 1000 + (int)seed;
    void *old = kept(c, id, lt_act_bytes(be, n)); /* (filled already) */
    if (old) return old;
    float *host = lt_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) host[i] = (float)(lt_uniform_at(seed, 0, i) - 0.5);
    float *f32 = be->ops->alloc(be, n * sizeof(float));
    be->ops->upload(be, f32, host, n * sizeof(float));
    void *act = lt_cal_buffer(c, id, lt_act_bytes(be, n));
    be->ops->act_from_f32(be, act, f32, n);
    be->ops->free(be, f32);
    free(host);
    return act;
}

/* ---- GEMMs -------------------------------------------------------------------- */

enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_WEIGHT, PASS_ALL, NPASS = 3 };
static const char *const PASS_NAMES[] = {"forward", "bwd data", "bwd weight", "fwd+bwd"};

/* Buffers for GEMMs up to (N, 4C) x (4C, C): inp, out, dinp, w (act), dw (fp32). */
typedef struct {
    void *inp, *out, *dinp, *w;
    float *dw;
} GemmBufs;

typedef struct GemmJob {
    const GemmBufs *b;
    int N, C, pass; /* C: the layer's hidden size (square: n = N = C, one GEMM) */
    int square;
} GemmJob;

static void bufs_alloc(Cal *c, GemmBufs *b, size_t N, size_t C) {
    b->inp = lt_cal_random_act(c, N * 4 * C, 1);
    b->out = lt_cal_random_act(c, N * 4 * C, 2);
    b->w = lt_cal_random_act(c, 4 * C * C, 3);
    b->dinp = lt_cal_buffer(c, 1, lt_act_bytes(c->be, N * 4 * C));
    b->dw = lt_cal_buffer(c, 2, 4 * C * C * sizeof(float));
}

/* One GEMM of a pass: (N, in) x (in, out) as the model's linear layers run it. */
static void linear_pass(Cal *c, const GemmBufs *b, int pass, int N, int in, int out) {
    const LtBackendOps *o = c->be->ops;
    if (pass == PASS_FWD) o->linear_fwd(c->be, b->out, NULL, b->inp, b->w, NULL, N, in, out);
    else if (pass == PASS_BWD_DATA)
        o->linear_bwd(c->be, b->dinp, NULL, NULL, b->out, b->inp, b->w, NULL, N, in, out);
    else o->linear_bwd(c->be, NULL, b->dw, NULL, b->out, b->inp, b->w, NULL, N, in, out);
}

/* The layer's four linear layers (qkv C -> 3C, projection C -> C, fc C -> 4C,
 * fc projection 4C -> C) in one pass, or all three passes. */
static void run_gemm(Cal *c, const void *arg) {
    const GemmJob *j = arg;
    if (j->square) {
        linear_pass(c, j->b, PASS_FWD, j->N, j->C, j->C);
        return;
    }
    const int C = j->C, shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    for (int p = 0; p < NPASS; p++)
        if (j->pass == p || j->pass == PASS_ALL)
            for (int s = 0; s < 4; s++) linear_pass(c, j->b, p, j->N, shapes[s][0], shapes[s][1]);
}

static double job_flops(const GemmJob *j) {
    if (j->square) return 2.0 * j->N * (double)j->C * j->C;
    return 24.0 * j->N * (double)j->C * j->C * (j->pass == PASS_ALL ? NPASS : 1);
}

/* How many of jobs[0..n) fit in `budget` seconds at `guess` TFLOP/s: a
 * warm-up and at least three rounds of each. */
static int jobs_that_fit(const Cal *c, const GemmJob *jobs, int n, double guess, double budget) {
    double t = c->ref ? 4.0 * job_flops(c->ref) / (guess * 1e12) : 0.0;
    for (int i = 0; i < n; i++) {
        t += 4.0 * job_flops(&jobs[i]) / (guess * 1e12);
        if (t > budget) return i;
    }
    return n;
}

/* Median TFLOP/s of each job, measured in rounds that run every job once (at
 * least lt_cal_min_reps, as many as this calibration round's part of `budget`
 * allows, at most MAX_REPS): a load that comes and goes on a shared machine
 * then weighs on every size alike, and the ratios between them - the
 * efficiencies - keep their meaning. eff[i] is
 * against c->ref's median in the same rounds when there is one, else
 * against the peak. */
static void time_rounds(Cal *c, const GemmJob *jobs, int n, double budget, double *tflops,
                        double *eff) {
    const int m = n + (c->ref != NULL); /* the reference runs last in each round */
    double *t = lt_malloc(sizeof(double) * MAX_REPS * (size_t)m);
    /* a warm-up in the first round only: later rounds find the library's
     * threads and kernels ready and the kept buffers touched (jobs_that_fit
     * counts a warm-up and 3 runs: with 3 rounds, one run in each) */
    for (int i = 0; c->round == 0 && i < m; i++) run_gemm(c, i < n ? &jobs[i] : c->ref);
    c->be->ops->synchronize(c->be);
    const double start = lt_now();
    int r = 0;
    while (lt_cal_agree(c, r < MAX_REPS &&
                               (r < lt_cal_min_reps(c) || lt_now() - start < budget / c->rounds))) {
        for (int i = 0; i < m; i++) {
            lt_cal_sync(c);
            const double t0 = lt_now();
            run_gemm(c, i < n ? &jobs[i] : c->ref);
            c->be->ops->synchronize(c->be);
            t[(size_t)i * MAX_REPS + (size_t)r] = lt_now() - t0;
        }
        r++;
    }
    const double ref = c->ref ? job_flops(c->ref) / lt_cal_median(t + (size_t)n * MAX_REPS, r) / 1e12
                              : c->peak;
    for (int i = 0; i < n; i++) {
        tflops[i] = job_flops(&jobs[i]) / lt_cal_median(t + (size_t)i * MAX_REPS, r) / 1e12;
        if (eff) eff[i] = tflops[i] / ref;
    }
    free(t);
}

/* The ceiling: median TFLOP/s of square GEMMs of growing size within
 * `budget` (the sizes that fit are guessed from the smallest one's speed).
 * On a GPU the best of them; on the CPU the largest, because on a host
 * shared with other processes a small GEMM finishes inside one time slice
 * and shows a rate that the long GEMMs of training never see (on a quiet
 * host the largest is the best anyway: OpenBLAS's rate grows with n). */
static void measure_ceiling(Cal *c, GemmBufs *b, GemmJob *best_job, double budget) {
    const int max_n = c->cuda ? 16384 : 2048;
    bufs_alloc(c, b, (size_t)max_n / 2, (size_t)max_n / 2); /* holds n x n for n <= max_n */
    GemmJob jobs[8];
    int n = 0;
    for (int s = 256; s <= max_n; s *= 2) jobs[n++] = (GemmJob){b, s, s, PASS_FWD, 1};
    if (!c->fit_ceiling) {
        const double guess =
            job_flops(&jobs[0]) / lt_cal_time_median(c, run_gemm, &jobs[0], 0) / 1e12;
        c->fit_ceiling = lt_cal_agree(c, jobs_that_fit(c, jobs, n, guess, 0.5 * budget));
        if (c->fit_ceiling < 1) c->fit_ceiling = 1;
    }
    n = c->fit_ceiling;
    double tf[8];
    time_rounds(c, jobs, n, 0.5 * budget, tf, NULL);
    printf("ceiling: square GEMMs (forward, n x n x n)\n%8s %10s\n", "n", "TFLOP/s");
    int best = n - 1;
    for (int i = 0; i < n; i++) {
        printf("%8d %10.4f\n", jobs[i].N, tf[i]);
        if (c->cuda && tf[i] > tf[best]) best = i;
    }
    c->ceiling = tf[best];
    *best_job = jobs[best];
    printf("ceiling %.4f TFLOP/s (n = %d)\n", c->ceiling, jobs[best].N);
}

/* The layer GEMMs of each hidden size at N tokens; returns the largest hidden
 * size measured whole (0: none fitted the budget) and in *eff_all its
 * efficiency over the three passes (equal FLOPs each: the harmonic mean). */
static int measure_layers(Cal *c, const int *hidden, int nh, int N, double budget,
                          double *eff_all) {
    GemmJob jobs[3 * NPASS];
    GemmBufs b;
    int n = 0;
    for (int h = 0; h < nh && h < 3; h++)
        for (int p = 0; p < NPASS; p++) jobs[n++] = (GemmJob){&b, N, hidden[h], p, 0};
    if (!c->fit_layers) /* (+1: chosen, even when nothing fitted) */
        c->fit_layers = lt_cal_agree(c, jobs_that_fit(c, jobs, n, c->ceiling, 0.5 * budget)) + 1;
    const int fit = (c->fit_layers - 1) / NPASS * NPASS;
    printf("\nlayer GEMMs: qkv, projection, fc, fc projection of one layer at %d tokens\n", N);
    printf("%8s %8s %-11s %10s %6s %10s\n", "hidden", "tokens", "pass", "TFLOP/s", "eff", "ms");
    double tf[3 * NPASS], eff[3 * NPASS];
    if (fit > 0) {
        bufs_alloc(c, &b, (size_t)N, (size_t)jobs[fit - 1].C);
        time_rounds(c, jobs, fit, budget, tf, eff);
    }
    for (int i = 0; i < fit; i++)
        printf("%8d %8d %-11s %10.4f %6.3f %10.2f\n", jobs[i].C, N, PASS_NAMES[jobs[i].pass],
               tf[i], eff[i], job_flops(&jobs[i]) / (tf[i] * 1e12) * 1e3);
    for (int i = fit; i < n; i += NPASS)
        printf("%8d %8d %-11s skipped: over the --seconds budget\n", jobs[i].C, N, "all");
    if (fit > 0)
        *eff_all = NPASS / (1 / eff[fit - 3] + 1 / eff[fit - 2] + 1 / eff[fit - 1]);
    return fit > 0 ? jobs[fit - 1].C : 0;
}

/* Weighted least squares of 1/eff = a + b / N over the points: eff_inf =
 * 1/a, half = b/a. Weights eff^4 make it, to first order, least squares on
 * eff itself (d(1/eff) = d eff / eff^2), so the few-row points, whose 1/eff is
 * large, do not outweigh the rest. A fit that noise makes meaningless (a <= 0
 * or b < 0) falls back to the median efficiency and no row penalty. */
static void fit_rows(const double *N, const double *eff, int n, double *eff_inf, double *half) {
    double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, tmp[32];
    for (int i = 0; i < n; i++) {
        const double w = pow(eff[i], 4), x = 1.0 / N[i], y = 1.0 / eff[i];
        s += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
        tmp[i] = eff[i];
    }
    const double den = s * sxx - sx * sx;
    const double b = den > 0 ? (s * sxy - sx * sy) / den : -1, a = (sy - b * sx) / s;
    if (a <= 0 || b < 0) {
        *eff_inf = lt_cal_median(tmp, n);
        *half = 0;
        return;
    }
    *eff_inf = 1.0 / a;
    *half = b / a;
}

/* All three passes at hidden C for token counts doubling from 16 to Nmax (as
 * many as the budget allows): the fit of the planner's small-row curve, with
 * the layer measurement (Nmax tokens, efficiency eff_max; 0: none) as its
 * last point when the sweep did not reach Nmax. 0, or -1 when fewer than two
 * points. */
static int measure_rows(Cal *c, int C, int Nmax, double eff_max, double budget, double *eff_inf,
                        double *half) {
    GemmJob jobs[16];
    GemmBufs b;
    int n = 0;
    for (int N = 16; N <= Nmax && n < 16; N *= 2) jobs[n++] = (GemmJob){&b, N, C, PASS_ALL, 0};
    if (!c->fit_rows)
        c->fit_rows = lt_cal_agree(c, jobs_that_fit(c, jobs, n, c->ceiling, 0.5 * budget)) + 1;
    n = c->fit_rows - 1;
    double tf[17], Ns[17], effs[17];
    if (n > 0) {
        bufs_alloc(c, &b, (size_t)jobs[n - 1].N, (size_t)C);
        time_rounds(c, jobs, n, budget, tf, effs);
    }
    printf("\nsmall-row GEMMs: the layer's forward and backward at hidden %d\n", C);
    printf("%8s %10s %6s\n", "tokens", "TFLOP/s", "eff");
    for (int i = 0; i < n; i++) {
        Ns[i] = jobs[i].N;
        printf("%8d %10.4f %6.3f\n", jobs[i].N, tf[i], effs[i]);
    }
    if (eff_max > 0 && (n == 0 || jobs[n - 1].N < Nmax)) { /* the layer measurement */
        Ns[n] = Nmax, effs[n] = eff_max;
        printf("%8d %10s %6.3f  (the layer GEMMs above)\n", Nmax, "", eff_max);
        n++;
    }
    if (n < 2) return -1;
    fit_rows(Ns, effs, n, eff_inf, half);
    printf("fit: eff(N) = %.3f N / (N + %.0f)%s\n", *eff_inf, *half,
           *half == 0 ? " (no row penalty: the points did not fall with fewer tokens)" : "");
    return 0;
}

/* ---- memory and all-reduce ------------------------------------------------------ */

typedef struct {
    void *dst, *src;
    size_t bytes;
} CopyJob;

static void run_copy(Cal *c, const void *arg) {
    const CopyJob *j = arg;
    c->be->ops->copy(c->be, j->dst, j->src, j->bytes);
}

/* GB/s of a device-to-device copy, counting the bytes read and written. */
static double measure_memory(Cal *c, double budget) {
    const size_t bytes = (size_t)(c->cuda ? 1024 : 64) << 20; /* well past any cache */
    CopyJob j = {lt_cal_buffer(c, 3, bytes), lt_cal_buffer(c, 4, bytes), bytes};
    c->be->ops->copy(c->be, j.dst, j.src, bytes); /* the pages touched once */
    const double gbs = 2.0 * (double)bytes / lt_cal_time_median(c, run_copy, &j, budget) / 1e9;
    printf("\nmemory: copy of %zu MiB through the backend: %.2f GB/s (read + write)\n",
           bytes >> 20, gbs);
    return gbs;
}

/* Median seconds of a blocking fp32 all-reduce of `count` elements over the
 * world, this round's part of `slot`; rank 0 picks the repetitions (the same
 * on every rank). */
static double time_all_reduce(const Cal *c, float *buf, size_t count, double slot) {
    const LtComm *world = c->comm;
    lt_comm_all_reduce(world, buf, count, LT_COMM_F32, LT_COMM_SUM); /* warm-up */
    lt_comm_barrier(world);
    double t0 = lt_now();
    lt_comm_all_reduce(world, buf, count, LT_COMM_F32, LT_COMM_SUM);
    int reps = (int)(slot / c->rounds / (lt_now() - t0 + 1e-9));
    reps = reps < 3 ? 3 : reps > MAX_REPS ? MAX_REPS : reps;
    lt_comm_broadcast(world, &reps, 1, LT_COMM_I32, 0);
    double t[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        lt_comm_barrier(world);
        t0 = lt_now();
        lt_comm_all_reduce(world, buf, count, LT_COMM_F32, LT_COMM_SUM);
        t[r] = lt_now() - t0;
    }
    return lt_cal_median(t, reps);
}

/* Bus bandwidth (the best over the message sizes, with the latency's share
 * taken out as the ring model adds it back) and latency per ring step (of the
 * smallest message) of fp32 all-reduces through lattice's comm layer on host
 * buffers: MPI, as the CPU backend's groups run (a GPU's NCCL figures would
 * need device buffers: refused before we get here). */
static void measure_all_reduce(Cal *c, double budget, double *bus_gbs, double *lat_us) {
    const LtComm *world = c->comm;
    static const size_t sizes[] = {8, 64 << 10, 1 << 20, 16 << 20};
    const int nsizes = sizeof sizes / sizeof sizes[0];
    const int n = lt_comm_size(world);
    float *buf = lt_calloc(sizes[nsizes - 1]);
    printf("\nall-reduce: fp32 sum over %d ranks (%s, host buffers)\n%12s %10s %10s\n", n,
           lt_comm_lib_name(lt_comm_lib(world)), "bytes", "us", "bus GB/s");
    for (int i = 0; i < nsizes; i++) {
        const double t = time_all_reduce(c, buf, sizes[i] / sizeof(float), budget / nsizes);
        const double bus = 2.0 * (n - 1) / n * (double)sizes[i] / t / 1e9;
        printf("%12zu %10.1f %10.3f\n", sizes[i], t * 1e6, bus);
        if (i == 0) {
            *lat_us = t * 1e6 / (2.0 * (n - 1));
            continue;
        }
        *bus_gbs = fmax(*bus_gbs, 2.0 * (n - 1) / n * (double)sizes[i] /
                                      fmax(t - 2.0 * (n - 1) * *lat_us * 1e-6, 0.5 * t) / 1e9);
    }
    free(buf);
}

/* What ranks that did the same work wait for each other at the collective
 * that follows it: each repetition starts at a barrier, runs `k` square
 * GEMMs of n 256 on every rank, then a 4-byte all-reduce; its time less
 * the all-reduce's own (lat_s: the 8-byte one after a barrier) is the wait.
 * The means over the ranks and repetitions: seconds of work (*work) and of
 * wait (*wait) per repetition. */
static void time_skew(Cal *c, int k, double slot, double lat_s, double *work, double *wait) {
    GemmBufs b;
    bufs_alloc(c, &b, 128, 128); /* n x n for n = 256 */
    const GemmJob g = {&b, 256, 256, PASS_FWD, 1};
    float x = 1;
    if (c->round == 0) run_gemm(c, &g); /* warm-up */
    c->be->ops->synchronize(c->be);
    double sum[3] = {0, 0, 0}; /* work, wait, repetitions */
    const double start = lt_now();
    while (lt_cal_agree(c, sum[2] < 3 || lt_now() - start < slot / c->rounds)) {
        lt_cal_sync(c);
        const double t0 = lt_now();
        for (int i = 0; i < k; i++) run_gemm(c, &g);
        c->be->ops->synchronize(c->be);
        const double t1 = lt_now();
        lt_comm_all_reduce(c->comm, &x, 1, LT_COMM_F32, LT_COMM_SUM);
        const double t2 = lt_now();
        sum[0] += t1 - t0, sum[1] += fmax(0.0, t2 - t1 - lat_s), sum[2] += 1;
    }
    lt_comm_all_reduce(c->comm, sum, 3, LT_COMM_F64, LT_COMM_SUM);
    *work = sum[0] / sum[2], *wait = sum[1] / sum[2];
    printf("%8d %10.2f %10.3f %8.2f%%\n", k, *work * 1e3, *wait * 1e3, 100 * *wait / *work);
}

/* The ranks' skew (the planner's sync_skew_us, sync_skew): the wait after 1 to
 * 64 GEMMs (about 1 to 60 ms of work on the CPU, the span of the work between
 * two TP collectives in training) fitted as wait = w0 + f work by least
 * squares, both >= 0: a rank that loses its core for a time slice makes the
 * others wait about that long whatever the work (w0), and the longer the
 * work the likelier such a loss (f). */
static void measure_skew(Cal *c, double budget, double lat_s, double *us, double *frac) {
    static const int ks[] = {1, 4, 16, 64};
    enum { NK = sizeof ks / sizeof ks[0] };
    printf("\nskew: the same GEMMs on every rank, then an all-reduce: what a rank waits\n"
           "%8s %10s %10s %9s\n", "GEMMs", "work ms", "wait ms", "of work");
    double T[NK], W[NK], s = 0, st = 0, sw = 0, stt = 0, stw = 0;
    for (int i = 0; i < NK; i++) {
        time_skew(c, ks[i], budget / NK, lat_s, &T[i], &W[i]);
        s += 1, st += T[i], sw += W[i], stt += T[i] * T[i], stw += T[i] * W[i];
    }
    const double den = s * stt - st * st;
    double f = den > 0 ? (s * stw - st * sw) / den : 0, w0 = (sw - f * st) / s;
    if (f < 0) f = 0, w0 = sw / s;
    if (w0 < 0) w0 = 0, f = stw / stt;
    *us = w0 * 1e6, *frac = f;
    printf("fit: wait = %.0f us + %.4f x work\n", *us, f);
}

/* ---- the command ---------------------------------------------------------------- */

typedef struct {
    const char *device, *out, *precision;
    double seconds;
    int rounds;
} CalArgs;

static int cal_bad(const char *msg, const char *arg) {
    fprintf(stderr, "lattice plan --calibrate: error: %s%s%s\n", msg, arg ? ": " : "",
            arg ? arg : "");
    return LT_EXIT_INPUT;
}

static int parse_args(int argc, char **argv, CalArgs *a) {
    *a = (CalArgs){"auto", NULL, NULL, 20.0, 3};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--calibrate")) continue;
        if (strncmp(o, "--", 2) || i + 1 >= argc)
            return cal_bad(strncmp(o, "--", 2) ? "takes no CONFIG or overrides (options only)"
                                               : "needs a value",
                           o);
        const char *v = argv[++i];
        char *end;
        if (!strcmp(o, "--device")) a->device = v;
        else if (!strcmp(o, "--out")) a->out = v;
        else if (!strcmp(o, "--precision")) a->precision = v;
        else if (!strcmp(o, "--seconds")) {
            a->seconds = strtod(v, &end);
            if (*end || !(a->seconds >= 1 && a->seconds <= 3600))
                return cal_bad("--seconds needs a number from 1 to 3600", v);
        } else if (!strcmp(o, "--rounds")) {
            const long r = strtol(v, &end, 10);
            if (*end || r < 1 || r > MAX_ROUNDS)
                return cal_bad("--rounds needs a whole number from 1 to 16", v);
            a->rounds = (int)r;
        } else return cal_bad("unknown option", o);
    }
    if (strcmp(a->device, "auto") && strcmp(a->device, "cpu") && strcmp(a->device, "cuda"))
        return cal_bad("--device takes auto, cpu or cuda", a->device);
    if (a->precision && strcmp(a->precision, "fp32") && strcmp(a->precision, "bf16"))
        return cal_bad("--precision takes fp32 or bf16", a->precision);
    return 0;
}

/* The backend the engine would make (engine.c's make_backend): a GPU, or the
 * CPU with the cores shared among the node's ranks. NULL with the reason. */
static LtBackend *make_backend(const CalArgs *a, Cal *c, char *err, size_t errlen) {
    const int ngpu = lt_cuda_device_count();
    c->cuda = !strcmp(a->device, "cuda") || (!strcmp(a->device, "auto") && ngpu > 0);
    c->prec = a->precision ? (!strcmp(a->precision, "bf16") ? LT_PREC_BF16 : LT_PREC_FP32)
                           : (c->cuda ? LT_PREC_BF16 : LT_PREC_FP32);
    const LtDtype dt = c->prec == LT_PREC_BF16 ? LT_BF16 : LT_F32;
    if (c->cuda) {
        if (!lt_cuda_compiled())
            return lt_errorf(err, errlen, "--device cuda: this binary was built without the CUDA "
                             "backend (make found no nvcc)"), NULL;
        if (ngpu <= 0)
            return lt_errorf(err, errlen, "--device cuda: no CUDA device is visible (the CUDA "
                             "backend is compiled in; the driver reports no GPU)"), NULL;
        if (c->w->world > 1)
            return lt_errorf(err, errlen, "--device cuda under a launcher: the GPU all-reduce "
                             "would need NCCL on device buffers, which --calibrate does not "
                             "measure yet; calibrate the GPU on one rank"), NULL;
        c->threads = 0;
        return lt_backend_cuda_create(dt, c->w->local_rank % ngpu, err, errlen);
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c->threads = (int)(cores / (c->w->local_size > 0 ? c->w->local_size : 1));
    if (c->threads < 1) c->threads = 1;
    return lt_backend_cpu_create(dt, c->threads);
}

/* Datasheet peak of the GPU, or the measured ceiling where none is known. */
static const char *choose_peak(Cal *c) {
    const double p = c->cuda ? lt_peak_table(c->be->device_name, c->prec) : 0.0;
    c->peak = p > 0 ? p : c->ceiling;
    if (p > 0) return "datasheet";
    return c->cuda ? "measured: square-GEMM ceiling (GPU not in the datasheet table)"
                   : "measured: square-GEMM ceiling (no datasheet peak for a CPU)";
}

static void print_constants(const LtPlanCalibration *cal) {
    const LtPlanDevice *d = &cal->dev;
    printf("\nconstants (device %s, %s):\n", d->name, lt_precision_name(cal->prec));
    printf("  peak_tflops      %.4f  (%s)\n",
           cal->prec == LT_PREC_BF16 ? d->bf16_tflops : d->fp32_tflops, cal->peak_source);
    printf("  gemm_eff         %.3f  (fitted large-GEMM efficiency)\n", d->gemm_eff);
    printf("  gemm_half_tokens %.0f  (tokens at half of it)\n", d->gemm_half_tokens);
    printf("  mem_gbs          %.2f\n", d->mem_gbs);
    if (d->mem_gib > 0) printf("  mem_gib          %.1f  (physical memory)\n", d->mem_gib);
    printf("  elem_gbs         %.2f  (layernorm and gelu, forward and backward)\n"
           "  xent_gbs         %.2f  (softmax / cross-entropy, bytes per logit)\n"
           "  optim_gbs        %.2f  (adamw)\n"
           "  attn_fwd_tflops  %.4f  (%s attention, forward)\n"
           "  attn_bwd_tflops  %.4f  (backward)\n",
           d->elem_gbs, d->xent_gbs, d->optim_gbs, d->attn_fwd_tflops,
           cal->threads ? "the CPU's" : "lattice's", d->attn_bwd_tflops);
    printf("  attn_win_fwd_tflops  %.4f  (a sliding window's band, forward)\n"
           "  attn_win_bwd_tflops  %.4f  (backward)\n", d->attn_win_fwd_tflops,
           d->attn_win_bwd_tflops);
    if (cal->has_cudnn)
        printf("  cudnn_fwd_tflops %.4f\n  cudnn_bwd_tflops %.4f\n"
               "  cudnn_win_fwd_tflops %.4f\n  cudnn_win_bwd_tflops %.4f  (deterministic)\n",
               d->cudnn_fwd_tflops, d->cudnn_bwd_tflops, d->cudnn_win_fwd_tflops,
               d->cudnn_win_bwd_tflops);
    if (cal->has_comm)
        printf("  intra_gbs        %.3f  (all-reduce bus bandwidth, %d ranks)\n"
               "  latency_us       %.2f  (per ring step)\n"
               "  sync_skew_us     %.0f  (ranks' wait for each other at a collective)\n"
               "  sync_skew        %.4f  (and of the work before it)\n",
               d->intra_gbs, cal->ranks, d->latency_us, d->sync_skew_us, d->sync_skew);
    else printf("  (no all-reduce: run under mpirun with >= 2 ranks to measure intra_gbs and "
                "latency_us)\n");
}

/* The GEMM and memory measurements of one rank, one round, into cal->dev
 * (each measurement's budget is its share of the whole run). */
static int measure_device(Cal *c, LtPlanCalibration *cal) {
    static const int cpu_hidden[] = {256, 512, 1024}, gpu_hidden[] = {1024, 2048, 4096};
    const double B = c->seconds * (c->comm ? 0.8 : 1.0); /* the rest: all-reduce and skew */
    GemmBufs ref_bufs;
    GemmJob ref;
    measure_ceiling(c, &ref_bufs, &ref, 0.2 * B);
    cal->peak_source = choose_peak(c);
    if (c->peak == c->ceiling) c->ref = &ref; /* a measured peak: measured alongside */
    const int N = c->cuda ? 4096 : 1024;
    double eff_layer = 0;
    const int C = measure_layers(c, c->cuda ? gpu_hidden : cpu_hidden, 3, N, 0.4 * B, &eff_layer);
    LtPlanDevice *d = &cal->dev;
    const int rows = measure_rows(c, C ? C : (c->cuda ? gpu_hidden : cpu_hidden)[0], N, eff_layer,
                                  0.3 * B, &d->gemm_eff, &d->gemm_half_tokens);
    c->ref = NULL;
    if (rows) { /* (the sizes are rank 0's on every rank: all fail alike) */
        fprintf(stderr, "lattice plan --calibrate: error: rank %d: within %.0f s fewer than two "
                "token counts of the small-row sweep were measured; give more --seconds\n",
                c->w->rank, c->seconds);
        return -1;
    }
    if (d->gemm_eff > 1.5) d->gemm_eff = 1.5; /* noise on a loaded machine; the file's limit */
    *(c->prec == LT_PREC_BF16 ? &d->bf16_tflops : &d->fp32_tflops) = c->peak;
    d->mem_gbs = measure_memory(c, 0.05 * B);
    lt_cal_memory_bound(c, d, 0.05 * B); /* (these two: at least 3 repetitions each) */
    lt_cal_attention(c, d, &cal->has_cudnn, 0.1 * B);
    if (!c->cuda)
        d->mem_gib = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) /
                     (1024.0 * 1024 * 1024);
    if (c->comm) {
        measure_all_reduce(c, 0.1 * c->seconds, &d->intra_gbs, &d->latency_us);
        measure_skew(c, 0.1 * c->seconds, 2.0 * (c->w->world - 1) * d->latency_us * 1e-6,
                     &d->sync_skew_us, &d->sync_skew);
    }
    return 0;
}

/* The figures a round measures, for their median over the rounds. */
typedef struct {
    const char *name;
    size_t off; /* in LtPlanDevice */
    int comm;   /* measured under a launcher only */
    int fit;    /* fitted to a sweep, not timed: its rounds may differ more */
} Figure;
#define DEVF(k) offsetof(LtPlanDevice, k)
static const Figure FIGURES[] = {
    {"peak_tflops", 0, 0, 0}, /* (the precision's: off set by median_figures) */
    {"gemm_eff", DEVF(gemm_eff), 0, 1},
    {"gemm_half_tokens", DEVF(gemm_half_tokens), 0, 1},
    {"mem_gbs", DEVF(mem_gbs), 0, 0},
    {"elem_gbs", DEVF(elem_gbs), 0, 0},
    {"xent_gbs", DEVF(xent_gbs), 0, 0},
    {"optim_gbs", DEVF(optim_gbs), 0, 0},
    {"attn_fwd_tflops", DEVF(attn_fwd_tflops), 0, 0},
    {"attn_bwd_tflops", DEVF(attn_bwd_tflops), 0, 0},
    {"attn_win_fwd_tflops", DEVF(attn_win_fwd_tflops), 0, 0},
    {"attn_win_bwd_tflops", DEVF(attn_win_bwd_tflops), 0, 0},
    {"cudnn_fwd_tflops", DEVF(cudnn_fwd_tflops), 0, 0},
    {"cudnn_bwd_tflops", DEVF(cudnn_bwd_tflops), 0, 0},
    {"cudnn_win_fwd_tflops", DEVF(cudnn_win_fwd_tflops), 0, 0},
    {"cudnn_win_bwd_tflops", DEVF(cudnn_win_bwd_tflops), 0, 0},
    {"intra_gbs", DEVF(intra_gbs), 1, 0},
    {"latency_us", DEVF(latency_us), 1, 0},
    {"sync_skew_us", DEVF(sync_skew_us), 1, 0},
    {"sync_skew", DEVF(sync_skew), 1, 0},
};

/* Each figure of the n rounds' devices into *out (the median; the rest of
 * *out as round 0 left it), with their spread printed: min, median, max
 * and (max - min) / median. */
static void median_figures(const Cal *c, const LtPlanDevice *runs, int n, LtPlanDevice *out) {
    const size_t peak = c->prec == LT_PREC_BF16 ? DEVF(bf16_tflops) : DEVF(fp32_tflops);
    printf("\nfigures over %d round(s): min, median (kept), max, spread (max - min) / median\n",
           n);
    for (size_t f = 0; f < sizeof FIGURES / sizeof FIGURES[0]; f++) {
        const size_t off = f == 0 ? peak : FIGURES[f].off;
        if (FIGURES[f].comm && !c->comm) continue;
        double v[MAX_ROUNDS];
        for (int r = 0; r < n; r++) v[r] = *(const double *)((const char *)&runs[r] + off);
        const double med = lt_cal_median(v, n); /* (sorts v) */
        *(double *)((char *)out + off) = med;
        if (v[n - 1] == 0) continue; /* not measured here (cuDNN's on the CPU) */
        printf("  %-21s %10.4g %10.4g %10.4g", FIGURES[f].name, v[0], med, v[n - 1]);
        if (med > 0) printf(" %6.0f%%\n", 100 * (v[n - 1] - v[0]) / med);
        else printf("      -\n"); /* (a fit's 0 in most rounds) */
        /* on a GPU a figure's rounds agree within percents (the fifth H200 draw:
         * 0-13%); twofold is a round that timed something else (a 2-core CPU
         * shared with other ranks varies that much by itself) */
        if (c->cuda && !FIGURES[f].fit && !FIGURES[f].comm && v[0] > 0 && v[n - 1] > 2 * v[0])
            printf("warning: %s: its rounds differ more than twofold (%.4g to %.4g): a round "
                   "timed something besides the operation, or the machine was shared\n",
                   FIGURES[f].name, v[0], v[n - 1]);
    }
}

int lt_cmd_plan_calibrate(int argc, char **argv) {
    CalArgs a;
    if (parse_args(argc, argv, &a)) return LT_EXIT_INPUT;
    LtWorld w;
    lt_world_init(&w, &argc, &argv);
    Cal c = {.w = &w, .seconds = a.seconds, .rounds = a.rounds};
    char err[512];
    c.be = make_backend(&a, &c, err, sizeof err);
    if (!c.be) {
        lt_world_finalize(&w);
        return cal_bad(err, NULL);
    }
    LtPlanCalibration cal = {.prec = c.prec, .ranks = w.world,
                             .ranks_per_node = w.local_size > 0 ? w.local_size : 1,
                             .threads = c.threads, .has_comm = w.world > 1,
                             .seconds = a.seconds, .device_name = c.be->device_name};
    /* the file names the built-in row it refines (h100, ..., cpu), so that the
     * figures it does not measure come from there */
    snprintf(cal.dev.name, sizeof cal.dev.name, "%s", c.cuda ? "cuda" : "cpu");
    if (c.cuda) lt_plan_device_match(c.be->device_name, cal.dev.name, sizeof cal.dev.name);
    if (w.rank != 0 && !freopen("/dev/null", "w", stdout)) /* one rank reports */
        lt_fatal("cannot silence rank %d's output", w.rank);
    printf("calibrate: %s (%s), %s, %d rank(s), budget %.0f s in %d round(s)\n",
           c.be->device_name, c.cuda ? "CUDA backend" : "OpenBLAS", lt_precision_name(c.prec),
           w.world, a.seconds, c.rounds);
    if (!c.cuda)
        printf("threads: %d per rank (as the engine takes them: cores / ranks on the node)\n",
               c.threads);
    LtComm *world = w.world > 1 ? lt_comm_world("calibrate") : NULL;
    c.comm = world;
    LtPlanDevice runs[MAX_ROUNDS];
    int rc = 0;
    for (c.round = 0; c.round < c.rounds && rc == 0; c.round++) {
        printf("\n==== round %d of %d ====\n", c.round + 1, c.rounds);
        LtPlanCalibration one = cal;
        rc = measure_device(&c, &one);
        runs[c.round] = one.dev;
        cal.peak_source = one.peak_source, cal.has_cudnn = one.has_cudnn;
    }
    if (rc == 0) {
        cal.dev = runs[0];
        median_figures(&c, runs, c.rounds, &cal.dev);
        print_constants(&cal);
    }
    if (rc == 0 && a.out && w.rank == 0) {
        if (lt_plan_calibration_write(a.out, &cal, err, sizeof err)) rc = cal_bad(err, NULL);
        else printf("wrote %s\n", a.out);
    }
    fflush(stdout);
    if (world) lt_comm_free(world);
    lt_cal_free_buffers(&c);
    lt_backend_destroy(c.be);
    lt_world_finalize(&w);
    return rc ? LT_EXIT_INPUT : 0;
}
