/* trainer.c - the training loop and evaluation.
 *
 * Step k (0-based): the loader hands over global samples k*G .. k*G+G-1;
 * they run as G/mbs micro batches whose gradients accumulate (each scaled by
 * 1/(G*S), so the sum is the gradient of the mean token loss); then gradient
 * finalisation (grads.h), grad norm, clip coefficient, LR for update k,
 * AdamW; then metrics, eval, checkpoint. The engine itself (set-up, summary,
 * saves) is engine.h's; the step's checks before its update step_checks.h's,
 * its time breakdown step_time.h's. */
#include "trainer.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "common.h"
#include "devclock.h"
#include "engine.h"
#include "metrics.h"
#include "mllog.h"
#include "step_checks.h"
#include "step_time.h"
#include "trace.h"
#include "trace_gather.h"
#include "watchdog.h"

/* SIGTERM, SIGINT, SIGUSR1 (Slurm's --signal=USR1@T): every rank stops after
 * the same step, saves, and exits 128 + the signal. An interrupt while a stop
 * is already under way (a second Ctrl-C during a long step or the save) aborts
 * at once, without saving: saves are atomic, so the previous checkpoint stays. */
static volatile sig_atomic_t g_stop_signal = 0;
static void on_signal(int sig) {
    if (sig == SIGINT && g_stop_signal) {
        static const char msg[] = "lattice: second interrupt: aborting at once, without saving\n";
        ssize_t k = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)k;
        _exit(128 + SIGINT);
    }
    g_stop_signal = sig;
}

/* Split rows of S+1 tokens into inputs and targets (n rows). */
static void split_rows(const int32_t *rows, int n, int S, int32_t *in, int32_t *tgt) {
    for (int i = 0; i < n; i++) {
        memcpy(in + (size_t)i * S, rows + (size_t)i * (S + 1), (size_t)S * sizeof(int32_t));
        memcpy(tgt + (size_t)i * S, rows + (size_t)i * (S + 1) + 1, (size_t)S * sizeof(int32_t));
    }
}

/* ---- eval ------------------------------------------------------------------ */

/* Mean token loss over validation samples 0..n-1 (n = r->eval_samples). */
static double evaluate(LtRun *r, long *samples_out) {
    LT_TRACE_BEGIN("evaluate", NULL);
    const LtConfig *c = r->cfg;
    const int S = c->model.seq_length, mbs = c->train.micro_batch_size;
    enum { BLOCK = 16 }; /* micro batches per pipelined forward pass */
    const uint64_t n = (uint64_t)r->eval_samples;
    int32_t *rows = lt_malloc((size_t)BLOCK * mbs * (S + 1) * sizeof(int32_t));
    int32_t *in = lt_malloc((size_t)BLOCK * mbs * S * sizeof(int32_t));
    int32_t *tgt = lt_malloc((size_t)BLOCK * mbs * S * sizeof(int32_t));
    double sum = 0.0; /* on the last pipeline stage */
    lt_model_loss_reset(r->model); /* (the trainer's accumulator holds the last step's loss) */
    /* data-parallel ranks take every dp-th micro batch; the sums are added up.
     * Up to BLOCK micro batches go through the pipeline together, so its
     * stages work at once. */
    const uint64_t stride = (uint64_t)mbs * (uint64_t)r->topo.dp;
    uint64_t s = (uint64_t)r->coords.dp * (uint64_t)mbs;
    while (s < n) {
        int k = 0;
        for (; k < BLOCK && s < n; k++, s += stride) {
            for (int i = 0; i < mbs; i++) {
                char err[1024];
                if (lt_tokens_read(r->valid, (s + (uint64_t)i) * (uint64_t)S, (uint64_t)S + 1,
                                   rows + ((size_t)k * mbs + (size_t)i) * (S + 1), err,
                                   sizeof err))
                    lt_input_error("data.valid_path: %s", err);
            }
        }
        split_rows(rows, k * mbs, S, in, tgt);
        lt_pipeline_forward(r->pipe, in, tgt, k); /* (in, tgt: pageable, reusable at once) */
    }
    sum = lt_model_loss_take(r->model);
    free(rows);
    free(in);
    free(tgt);
    lt_comm_all_reduce(lt_comm_host(r->dp), &sum, 1, LT_COMM_F64, LT_COMM_SUM);
    lt_comm_all_reduce(lt_comm_host(r->pp), &sum, 1, LT_COMM_F64, LT_COMM_SUM);
    *samples_out = (long)n;
    LT_TRACE_END();
    return n ? sum / ((double)n * S) : NAN;
}

static void open_valid(LtRun *r) {
    const LtConfig *c = r->cfg;
    if (!c->data.valid_path[0]) return;
    r->valid = lt_run_open_tokens("data.valid_path", c->data.valid_path, c->model.vocab_size);
    /* read whole at every evaluation anyway: check all of it now, not at the
     * end of the run when the final evaluation would find a bad block */
    char err[LT_PATH_MAX + 256];
    if (lt_tokens_validate(r->valid, err, sizeof err))
        lt_input_error("data.valid_path: %s", err);
    if (lt_num_samples(lt_tokens_count(r->valid), c->model.seq_length) <
        (uint64_t)c->train.micro_batch_size)
        lt_input_error("data.valid_path: '%s' holds %llu tokens, fewer than one micro batch of "
                       "%d samples of %d+1 tokens",
                       c->data.valid_path, (unsigned long long)lt_tokens_count(r->valid),
                       c->train.micro_batch_size, c->model.seq_length);
    /* eval.samples is a promise (MLPerf logs it as eval_samples): a file too
     * short for it is refused; eval.iters global batches are capped to whole
     * micro batches of what the file holds */
    const uint64_t avail = lt_num_samples(lt_tokens_count(r->valid), c->model.seq_length);
    const uint64_t mbs = (uint64_t)c->train.micro_batch_size;
    if (c->eval.samples > 0 && (uint64_t)c->eval.samples > avail)
        lt_input_error("eval.samples (%ld) is more than data.valid_path '%s' holds: %llu tokens "
                       "make %llu sequences of %d+1 tokens",
                       c->eval.samples, c->data.valid_path,
                       (unsigned long long)lt_tokens_count(r->valid), (unsigned long long)avail,
                       c->model.seq_length);
    uint64_t n = c->eval.samples > 0 ? (uint64_t)c->eval.samples
                                      : (uint64_t)c->eval.iters * (uint64_t)c->train.global_batch_size;
    if (n > avail) n = avail / mbs * mbs;
    r->eval_samples = (long)n;
}

/* ---- train ----------------------------------------------------------------- */

/* The part of a step a CUDA graph replays (train.cuda_graph): zeroing, and
 * every micro batch's id upload (from the fixed page-locked in/tgt), forward
 * and backward. */
static void step_body(LtRun *r, const int32_t *in, const int32_t *tgt, double *stats_dev,
                      float grad_scale) {
    lt_model_zero_grads(r->model);
    lt_optim_zero_grad(r->opt);
    r->be->ops->zero(r->be, stats_dev, 2 * sizeof(double));
    lt_pipeline_train(r->pipe, in, tgt, grad_scale);
}

/* LtRun step_body, from the second step of the run on as a replay of the graph
 * captured then (the first step grows every scratch arena and workspace to
 * its size: no allocation may happen while capturing). */
static void run_step_body(LtRun *r, LtGraph **graph, int first, const int32_t *in,
                          const int32_t *tgt, double *stats_dev, float grad_scale) {
    LtBackend *be = r->be;
    if (!r->cfg->train.cuda_graph || first) {
        step_body(r, in, tgt, stats_dev, grad_scale);
        return;
    }
    if (!*graph) {
        char err[256];
        lt_devclock_capture(1); /* the passes' timers are the graph's */
        be->ops->capture_begin(be);
        step_body(r, in, tgt, stats_dev, grad_scale);
        *graph = be->ops->capture_end(be, err, sizeof err);
        lt_devclock_capture(0);
        if (!*graph)
            lt_fatal("train.cuda_graph: capturing the step failed: %s (run with "
                     "train.cuda_graph=false)", err);
        lt_log("cuda graph: forward and backward of %d micro batch(es) captured; replayed "
               "from now on\n", r->micro_batches);
    }
    be->ops->graph_launch(be, *graph);
}

/* train.cuda_graph needs a backend that captures, and no communication inside
 * the step (config validation refused tensor and pipeline parallelism). */
static void check_cuda_graph(const LtRun *r) {
    if (!r->cfg->train.cuda_graph) return;
    if (!r->be->ops->capture_begin)
        lt_input_error("train.cuda_graph needs the CUDA backend; this run uses the %s backend "
                       "(train.device)", r->be->ops->name);
    if (r->model->grads_ready)
        lt_input_error("train.cuda_graph: ZeRO stage 2 with %d data-parallel ranks reduces "
                       "gradients inside the step; use optimizer.zero_stage 0 or 1",
                       r->topo.dp);
}

/* Save after `step` (the part the training thread waits for is a span). */
static void save_checkpoint(LtRun *r, long step) {
    LT_TRACE_BEGIN("checkpoint save", "\"step\": %ld", step);
    lt_run_save_checkpoint(r, step);
    LT_TRACE_END();
}

/* The step's samples from the loader (a span with logging.trace); 0 or -1 with err. */
static int fetch_step(LtRun *r, long step, int32_t *rows, char *err, size_t errlen) {
    LT_TRACE_BEGIN("data", "\"step\": %ld", step + 1);
    const int rc = lt_loader_get(r->loader, step, rows, err, errlen);
    LT_TRACE_END();
    return rc;
}

int lt_cmd_train(LtConfig *cfg, const LtWorld *w) {
    const double t_init_start = lt_now(); /* MLPerf: initialisation is timed apart */
    lt_mllog_open(cfg, w->rank);
    lt_mllog(LT_MLLOG_START, "init_start", "null", NULL);
    if (!cfg->data.train_path[0]) lt_input_error("data.train_path is not set");
    LtRun r;
    lt_run_setup(&r, cfg, w, 1); /* layout checks first: they are collective */
    r.train = lt_run_open_tokens("data.train_path", cfg->data.train_path, cfg->model.vocab_size);
    open_valid(&r);
    const int S = cfg->model.seq_length, G = cfg->train.global_batch_size,
              local = G / r.topo.dp;
    LtLoaderConfig lc = lt_train_loader_config(cfg, r.coords.dp * local, local);
    char err[1024];
    r.loader = lt_loader_create(r.train, &lc, err, sizeof err);
    if (!r.loader) lt_input_error("data.train_path: %s", err);
    check_cuda_graph(&r);
    if (cfg->checkpoint.dir[0] && w->rank == 0) { /* before step 1, not at the first save */
        int stale = 0;
        if (lt_ckpt_prepare_dir(cfg->checkpoint.dir, &stale, err, sizeof err))
            lt_input_error("checkpoint.dir: %s", err);
        if (stale)
            lt_log("checkpoint.dir: removed %d entr%s left by a save that was killed\n", stale,
                   stale == 1 ? "y" : "ies");
    }
    /* before the summary, whose lines tell a job script (and the tests) that
     * a signal from now on stops the run at a step boundary with a save */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGUSR1, on_signal);
    lt_run_print_summary(&r);

    LtMetricsFile mf;
    lt_metrics_open(&mf, w->rank == 0 ? cfg->logging.metrics_file : NULL);

    const double flops_step = lt_model_flops_per_sample(&r.model->d, 0) * G;
    const double tokens_step = (double)G * S;
    LtBackend *be = r.be;
    int32_t *rows = lt_malloc((size_t)local * (S + 1) * sizeof(int32_t));
    /* page-locked: the device copies the step's micro batches from them while the
     * host runs ahead; rewritten only after the step's wait */
    int32_t *in = be->ops->host_alloc(be, (size_t)local * S * sizeof(int32_t));
    int32_t *tgt = be->ops->host_alloc(be, (size_t)local * S * sizeof(int32_t));
    /* the step's results on the device, read back in one copy: loss sum, gradient
     * sum of squares */
    double *stats_dev = be->ops->alloc(be, 2 * sizeof(double));
    double *stats = be->ops->host_alloc(be, 2 * sizeof(double));
    lt_model_set_loss_acc(r.model, stats_dev);
    unsigned long max_waits = 0;
    LtGraph *graph = NULL;
    long nsteps = cfg->train.steps - r.start_step;
    double *times = lt_malloc((size_t)(nsteps > 0 ? nsteps : 1) * sizeof(double));
    int ntimes = 0;
    long step = r.start_step;
    int exit_code = 0, skipped = 0; /* consecutive skipped steps */
    LtInject inject = lt_inject_parse(w->rank);
    LtSpikeWindow sw = {0};
    if (cfg->train.loss_spike_zscore > 0) {
        sw.cap = cfg->train.loss_spike_window;
        sw.x = lt_calloc(sizeof(double) * (size_t)sw.cap);
    }
    /* A step's samples are fetched at the end of the step before (timed with
     * the step they feed), so that bad data met mid-run is known to every rank
     * at the step boundary: all stop there, save the last good step, exit 2. */
    char data_err[1024] = "";
    int target_reached = 0;
    char mmeta[96]; /* MLPerf: samples_count (and epoch_num, the same count) of an event */
    lt_mllog_hyperparameters(cfg, r.micro_batches, r.start_step, r.eval_samples);
    lt_mllog(LT_MLLOG_END, "init_stop", "null", NULL);
    const double t_run_start = lt_now(); /* MLPerf's run start: training from here */
    lt_mllog(LT_MLLOG_START, "run_start", "null", NULL);
    snprintf(mmeta, sizeof mmeta, "\"samples_count\": %ld", step * (long)G);
    lt_mllog(LT_MLLOG_START, "block_start", "null", mmeta);
    double t_next = t_run_start, busy_next[LT_STEP_MARKS];
    lt_step_clock_start(&r); /* a GPU's step is timed on the device */
    lt_step_comm_mark(&r, busy_next); /* with t_next: the start of the interval a step is timed over */
    if (step < cfg->train.steps && fetch_step(&r, step, rows, err, sizeof err))
        lt_input_error("data.train_path: step %ld: %s", step + 1, err);
    double data_s = lt_now() - t_next; /* fetching the step's samples (during the step before) */

    for (; step < cfg->train.steps; step++) {
        double t0 = t_next;
        const unsigned long waits0 = be->host_waits;
        lt_watchdog_set_step(step + 1);
        LT_TRACE_BEGIN("step", "\"step\": %ld", step + 1);
        lt_devclock_set_active(1);
        split_rows(rows, local, S, in, tgt); /* micro batch j: rows j*mbs .. */
        run_step_body(&r, &graph, step == r.start_step, in, tgt, stats_dev,
                      (float)(1.0 / tokens_step));
        const double t_grads = lt_now();
        LT_TRACE_BEGIN("grads", NULL);
        int clk = lt_devclock_begin(NULL);
        lt_grads_finalize(r.grads);
        lt_devclock_end(clk, LT_CLK(LT_CLK_GRADS), NULL);
        LT_TRACE_END();
        const double t_optim = lt_now();
        LT_TRACE_BEGIN("optimizer", NULL);
        clk = lt_devclock_begin(NULL);
        lt_inject_nonfinite(&r, &inject, step, stats_dev);
        double spike_loss = 0.0, spike_z = 0.0;
        const int spike = sw.cap && lt_loss_spike(&r, &sw, stats_dev, tokens_step, &spike_loss, &spike_z);
        lt_optim_grad_sumsq(r.opt, r.model->grads, stats_dev + 1, stats_dev);
        double lr = lt_lr_at(cfg, step);
        lt_optim_step(r.opt, r.model->params, r.model->grads, lr, 1.0,
                      lt_optim_clip_coef(r.opt, stats_dev + 1, cfg->optimizer.clip_grad));
        lt_grads_sync_tied(r.grads);
        lt_devclock_end(clk, LT_CLK(LT_CLK_OPTIMIZER), NULL);
        lt_devclock_set_active(0);
        LT_TRACE_END();
        const double t_optim_end = lt_now();
        /* the step's one host wait; its loss and gradient norm come back with it */
        be->ops->download_async(be, stats, stats_dev, 2 * sizeof(double));
        /* NCCL's collectives wait on the device: a dead peer shows up here */
        lt_watchdog_enter("the step's device synchronisation", NULL, -1);
        be->ops->synchronize(be);
        lt_watchdog_leave();
        double dev[LT_CLK_KINDS] = {0};
        const int dev_timed = lt_devclock_collect(dev);
        if (be->host_waits - waits0 > max_waits) max_waits = be->host_waits - waits0;
        double loss_sum = stats[0]; /* (0 off the last pipeline stage) */
        lt_comm_all_reduce(lt_comm_host(r.dp), &loss_sum, 1, LT_COMM_F64, LT_COMM_SUM);
        lt_comm_all_reduce(lt_comm_host(r.pp), &loss_sum, 1, LT_COMM_F64, LT_COMM_SUM);
        double loss = loss_sum / tokens_step, norm = sqrt(stats[1]);
        if (spike) { /* the loss was made NaN to skip the update: report the real one */
            loss = spike_loss;
            lt_optim_skipped(r.opt);
            skipped++;
            lt_log("step %ld: loss %g is a spike (%.1f standard deviations above the mean of the "
                   "last %d steps, train.loss_spike_zscore=%g): update skipped (weights and Adam "
                   "moments unchanged; %d in a row, train.max_skipped_steps=%d)\n",
                   step + 1, loss, spike_z, sw.n, cfg->train.loss_spike_zscore, skipped,
                   cfg->train.max_skipped_steps);
        } else if (!isfinite(norm)) { /* every rank skipped the update on the device (clip_coef) */
            lt_optim_skipped(r.opt);
            skipped++;
            lt_log("step %ld: loss %g, grad norm %g: not finite: update skipped (weights and "
                   "Adam moments unchanged; %d in a row, train.max_skipped_steps=%d)\n",
                   step + 1, loss, norm, skipped, cfg->train.max_skipped_steps);
        } else {
            skipped = 0;
            if (sw.cap) lt_spike_window_push(&sw, loss);
        }
        double dt = lt_now() - t0;
        times[ntimes++] = dt;
        LtStepTimes st = lt_step_times(&r, busy_next, dt, data_s, t_optim - t_grads,
                                    t_optim_end - t_optim, dev_timed ? dev : NULL);
        double tflops = flops_step / dt / 1e12 / w->world;
        double mfu = r.peak_tflops > 0 ? tflops / r.peak_tflops : 0.0;
        lt_metrics_train(&mf, step + 1, loss, lr, norm, tokens_step / dt, tflops, mfu, dt * 1e3,
                         &st);
        if ((step + 1) % cfg->logging.log_interval == 0 || step + 1 == cfg->train.steps)
            lt_log("step %6ld/%ld | loss %.4f | lr %.3e | grad norm %.4f | %.0f tok/s | %.3f "
                   "TFLOP/s | MFU %.1f%% | %.1f ms | mem %.1f MiB\n",
                   step + 1, cfg->train.steps, loss, lr, norm, tokens_step / dt, tflops,
                   100.0 * mfu, dt * 1e3, lt_mib(lt_run_engine_bytes(&r)));
        if ((step + 1) % cfg->logging.log_interval == 0 || step + 1 == cfg->train.steps)
            lt_log("time       forward %.1f | backward %.1f | grads %.1f | optimizer %.1f | data "
                   "%.1f | bubble %.1f | other %.1f ms; communication exposed (busy): tp %.1f "
                   "(%.1f), dp %.1f (%.1f), pp %.1f (%.1f) ms\n",
                   st.forward, st.backward, st.grads, st.optimizer, st.data, st.bubble, st.other,
                   st.comm_tp, st.comm_tp_busy, st.comm_dp, st.comm_dp_busy, st.comm_pp,
                   st.comm_pp_busy);
        LT_TRACE_END(); /* the step */
        const long done = (step + 1) * (long)G, before = step * (long)G; /* samples trained */
        const long every = cfg->eval.interval_samples;
        if (r.valid && ((cfg->eval.interval > 0 && (step + 1) % cfg->eval.interval == 0) ||
                        (every > 0 && done / every > before / every &&
                         done >= cfg->eval.start_samples))) {
            long ns;
            double vl = evaluate(&r, &ns);
            lt_log("eval step %ld | val loss %.4f | val log ppl %.4f | val ppl %.2f | %ld samples | "
                   "%ld trained\n",
                   step + 1, vl, vl, exp(vl), ns, done);
            lt_metrics_eval(&mf, step + 1, vl, ns);
            if (lt_mllog_on()) {
                char acc[64];
                snprintf(mmeta, sizeof mmeta, "\"samples_count\": %ld, \"epoch_num\": %ld", done, done);
                snprintf(acc, sizeof acc, "%.6f", isfinite(vl) ? vl : 1e9);
                lt_mllog(LT_MLLOG_END, "block_stop", "null", mmeta);
                lt_mllog(LT_MLLOG_START, "eval_start", "null", mmeta);
                lt_mllog(LT_MLLOG_POINT, "eval_accuracy", acc, mmeta);
                lt_mllog(LT_MLLOG_END, "eval_stop", "null", mmeta);
                if (!(cfg->eval.target_log_ppl > 0 && vl <= cfg->eval.target_log_ppl) &&
                    step + 1 < cfg->train.steps)
                    lt_mllog(LT_MLLOG_START, "block_start", "null", mmeta);
            }
            if (cfg->eval.target_log_ppl > 0 && vl <= cfg->eval.target_log_ppl) {
                lt_log("target reached: val log ppl %.4f <= eval.target_log_ppl %g at step %ld after "
                       "%ld samples; time to train %.1f s (run start to this evaluation; "
                       "initialisation %.1f s, not counted)\n",
                       vl, cfg->eval.target_log_ppl, step + 1, done, lt_now() - t_run_start,
                       t_run_start - t_init_start);
                target_reached = 1;
                step++;
                break;
            }
        }
        lt_run_ckpt_poll(&r); /* completes a background save once every rank has written */
        if (cfg->checkpoint.dir[0] && cfg->checkpoint.save_interval > 0 &&
            (step + 1) % cfg->checkpoint.save_interval == 0 && step + 1 < cfg->train.steps)
            save_checkpoint(&r, step + 1);
        if (skipped > cfg->train.max_skipped_steps) { /* the same decision on every rank */
            lt_log("error: %d consecutive steps with a non-finite loss or gradient norm (up to "
                   "step %ld): training diverged; stopping without saving, so the last good "
                   "checkpoint stays the newest (lower optimizer.lr, raise optimizer.warmup_steps?)\n",
                   skipped, step + 1);
            step++;
            exit_code = LT_EXIT_DIVERGED;
            break;
        }
        t_next = lt_now();
        lt_step_comm_mark(&r, busy_next);
        int32_t stop[2] = {(int32_t)g_stop_signal, 0}; /* signal, bad data */
        if (step + 1 < cfg->train.steps &&
            fetch_step(&r, step + 1, rows, data_err, sizeof data_err))
            stop[1] = 1;
        data_s = lt_now() - t_next;
        if (w->world > 1) { /* every rank stops after the same step: max over the world */
            lt_comm_all_reduce(lt_comm_host(r.dp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
            lt_comm_all_reduce(lt_comm_host(r.tp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
            lt_comm_all_reduce(lt_comm_host(r.pp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
        }
        /* decided on the agreed value: a signal that arrives during the
         * reduction stays in g_stop_signal for the next step's (writing the
         * agreed value back would lose it, and this rank would train on) */
        if (stop[1]) {
            if (data_err[0]) /* the rank(s) that met it say what and where */
                fprintf(stderr, "lattice: error: [rank %d] data.train_path: step %ld: %s\n",
                        w->rank, step + 2, data_err);
            lt_log("bad training data for step %ld: stopping after step %ld and saving it, the "
                   "last good step\n", step + 2, step + 1);
            step++;
            exit_code = LT_EXIT_INPUT;
            break;
        }
        if (stop[0]) {
            lt_log("received signal %d after step %ld: stopping\n", (int)stop[0], step + 1);
            step++;
            exit_code = 128 + (int)stop[0];
            break;
        }
    }
    if (ntimes > 0) {
        int skip = ntimes > 3 ? (ntimes > 10 ? 2 : 1) : 0; /* warm-up steps */
        double med = lt_median(times + skip, ntimes - skip);
        lt_log("done: %ld steps, median step %.1f ms over %d steps after warm-up, %.0f tok/s, "
               "%.3f TFLOP/s per device, MFU %.1f%%, host waits per step %lu\n",
               step, med * 1e3, ntimes - skip, tokens_step / med, flops_step / med / 1e12 / w->world,
               r.peak_tflops > 0 ? 100.0 * flops_step / med / 1e12 / w->world / r.peak_tflops : 0.0,
               max_waits);
        if (r.plan_device[0])
            lt_log("planned:  the planner predicted %.1f ms per step on %s; measured %.1f ms (%.2fx)\n",
                   1e3 * r.plan.step, r.plan_device, med * 1e3, med / r.plan.step);
    }
    snprintf(mmeta, sizeof mmeta, "\"status\": \"%s\"", target_reached ? "success" : "aborted");
    lt_mllog(LT_MLLOG_END, "run_stop", "null", mmeta);
    lt_mllog_close();
    if (cfg->eval.target_log_ppl > 0 && !target_reached)
        lt_log("target not reached: eval.target_log_ppl %g after %ld steps (%.1f s of training)\n",
               cfg->eval.target_log_ppl, step, lt_now() - t_run_start);
    if (r.valid && exit_code == 0 && !target_reached && cfg->eval.interval_samples == 0 &&
        (cfg->eval.interval == 0 || step % cfg->eval.interval != 0 || step == 0)) {
        long ns;
        double vl = evaluate(&r, &ns);
        lt_log("eval step %ld | val loss %.4f | val ppl %.2f | %ld samples\n", step, vl, exp(vl), ns);
        lt_metrics_eval(&mf, step, vl, ns);
    }
    if (cfg->checkpoint.dir[0] && exit_code != LT_EXIT_DIVERGED) save_checkpoint(&r, step);
    /* LT_PLAN_CHECK=1 (the suite): the pipeline's message pool, counted in the
     * memory summary, held every message of the run's steps and evaluations */
    const char *chk = getenv("LT_PLAN_CHECK");
    if (chk && chk[0] == '1' &&
        lt_pipeline_message_buffers(r.pipe) > lt_pipeline_message_buffers_planned(r.pipe))
        lt_fatal("LT_PLAN_CHECK: the pipeline made %d message buffers, %d were planned",
                 lt_pipeline_message_buffers(r.pipe), lt_pipeline_message_buffers_planned(r.pipe));
    LT_TRACE_BEGIN("checkpoint wait", NULL);
    lt_run_ckpt_wait(&r); /* the end of training (or a stop) waits for the save in flight */
    LT_TRACE_END();
    lt_metrics_close(&mf);
    char merr[LT_PATH_MAX + 128];
    const int trace_failed = lt_trace_finish(merr, sizeof merr); /* collective: called first */
    if ((trace_failed || lt_metrics_status(&mf, merr, sizeof merr)) && exit_code == 0) {
        lt_log("error: %s (training finished%s)\n", merr,
               cfg->checkpoint.dir[0] ? " and its checkpoint was saved" : "");
        exit_code = LT_EXIT_INPUT;
    }
    lt_model_set_loss_acc(r.model, NULL);
    if (graph) be->ops->graph_destroy(be, graph);
    lt_devclock_stop(); /* (after the graph: its record nodes use the clock's timers) */
    free(rows);
    be->ops->host_free(be, in);
    be->ops->host_free(be, tgt);
    be->ops->host_free(be, stats);
    be->ops->free(be, stats_dev);
    free(times);
    free(sw.x);
    lt_run_teardown(&r);
    return exit_code;
}

/* ---- eval / sample ----------------------------------------------------------- */

int lt_cmd_eval(LtConfig *cfg, const LtWorld *w) {
    if (!cfg->data.valid_path[0]) lt_input_error("data.valid_path is not set (eval needs it)");
    LtRun r;
    lt_run_setup(&r, cfg, w, 0);
    open_valid(&r);
    lt_run_print_summary(&r);
    long ns;
    double t0 = lt_now();
    double vl = evaluate(&r, &ns);
    lt_log("eval step %ld | val loss %.4f | val log ppl %.4f | val ppl %.2f | %ld samples | "
           "%.2f s\n",
           r.start_step, vl, vl, exp(vl), ns, lt_now() - t0);
    LtMetricsFile mf;
    lt_metrics_open(&mf, w->rank == 0 ? cfg->logging.metrics_file : NULL);
    lt_metrics_eval(&mf, r.start_step, vl, ns);
    lt_metrics_close(&mf);
    char merr[LT_PATH_MAX + 128];
    int rc = 0;
    if (lt_trace_finish(merr, sizeof merr) || lt_metrics_status(&mf, merr, sizeof merr)) {
        lt_log("error: %s\n", merr);
        rc = LT_EXIT_INPUT;
    }
    lt_run_teardown(&r);
    return rc;
}
