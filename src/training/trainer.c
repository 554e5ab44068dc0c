/* trainer.c - the training loop: `lattice train`.
 *
 * Step k (0-based): the loader hands over global samples k*G .. k*G+G-1
 * (with train.rampup_batch_size, c_k .. c_k+B_k-1: the step's batch B_k after
 * the c_k samples of the steps before, rampup.h); they run as B_k/mbs micro
 * batches whose gradients accumulate (each scaled by 1/(B_k*S), so the sum is
 * the gradient of the mean token loss); then gradient
 * finalisation (grads.h), grad norm, clip coefficient, LR for update k,
 * AdamW; then the step's report, an evaluation and a save when due, and the
 * ranks' agreement on whether to stop. The engine itself (set-up, summary,
 * saves) is engine.h's; the validation loss evaluate.h's; the step's checks
 * before its update step_checks.h's, its time breakdown step_time.h's; the
 * MLPerf events mllog.h's. */
#include "commands.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn_select.h"
#include "checkpoint.h"
#include "common.h"
#include "devclock.h"
#include "engine.h"
#include "evaluate.h"
#include "metrics.h"
#include "mllog.h"
#include "step_checks.h"
#include "step_time.h"
#include "trace.h"
#include "watchdog.h"

/* SIGTERM, SIGINT, SIGUSR1 (Slurm's --signal=USR1@T): every rank stops after
 * the same step, saves, and exits 128 + the signal. From the signal on, output
 * never waits (lt_log_never_block): a launcher that stops reading the ranks'
 * output when it is signalled (mpirun) cannot hold the save up until it kills
 * the ranks; a write already waiting returns. An interrupt while a stop is
 * already under way (a second Ctrl-C during a long step or the save) aborts
 * at once, without saving: saves are atomic, so the previous checkpoint stays. */
static volatile sig_atomic_t g_stop_signal = 0;
static void on_signal(int sig) {
    lt_log_never_block();
    if (sig == SIGINT && g_stop_signal) {
        static const char msg[] = "lattice: second interrupt: aborting at once, without saving\n";
        ssize_t k = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)k;
        lt_log_restore_flags();
        _exit(128 + SIGINT);
    }
    g_stop_signal = sig;
}

/* The training loop's state between its named steps. */
typedef struct {
    LtRun r;
    LtMetricsFile mf;
    int S, G, local;             /* sequence, global batch, this data-parallel rank's rows
                                  * (G and local: after the ramp-up, the most) */
    long total;                  /* optimizer steps of the run (train.steps; with a ramp-up
                                  * Megatron's count for train.steps x G samples) */
    uint64_t consumed;           /* samples the steps before t->step consumed */
    int batch, rows_now;         /* t->step's global batch and this rank's rows of it */
    double flops_step, tokens_step;
    double loss_tokens; /* what the step's loss sum is divided by: its targets that carry
                         * loss, or its number of micro batches (per micro batch means) */
    float *mb_scale, *mb_weight; /* per micro batch means: each one's gradient scale and
                                  * loss weight (NULL with calculate_per_token_loss) */
    int32_t *rows;               /* the next step's rows of S+1 tokens, as fetched */
    int32_t *in, *tgt;           /* page-locked: the device copies the step's micro batches
                                  * from them while the host runs ahead; rewritten only
                                  * after the step's wait */
    double *stats_dev, *stats;   /* the step's results on the device, read back in one
                                  * copy: loss sum, gradient sum of squares */
    LtGraph *graph;              /* the step replayed (train.cuda_graph) */
    double *times, *sorted;      /* this run's step times in seconds: in order; ascending */
    int ntimes;
    unsigned long max_waits;     /* the most host waits of one step */
    long step;                   /* the step being trained, 0-based */
    long done;                   /* steps done (the checkpoint's step at the end) */
    int skipped;                 /* consecutive skipped updates */
    int exit_code, target_reached;
    LtInject inject;
    LtSpikeWindow sw;
    double t_init_start;         /* MLPerf: initialisation is timed apart */
    double t_run_start;          /* MLPerf's run start: training from here */
    double t_next, busy_next[LT_STEP_MARKS]; /* the start of the next step's interval */
    double data_s;               /* fetching the next step's samples (during the step before) */
    char data_err[1024];         /* bad data met fetching the next step's samples */
    LtMoeStats *moe_local;       /* this rank's MoE layers' statistics of the step */
    LtMoeReport *moe;            /* every MoE layer's, over all ranks (rank 0 reports) */
    int nmoe;
    double *moe_sum;             /* (6 x num_layers) the reduction's buffer */
    double load_sum;             /* the steps' expert loads (mean over the MoE layers of
                                  * max/mean), for the planned line */
    int load_n;
    double *moe_tokens;          /* (MoE layers held x experts) the expert bias's counts */
    float *bias_kept;            /* (MoE layers held x experts) this rank's master bias values
                                  * before the step moved them, for a skipped update */
} Trainer;

/* One step's outcome, as reported. */
typedef struct {
    double loss, lr, norm; /* mean token loss, the update's LR, gradient norm */
    double dt;             /* seconds, from the end of the step before */
    LtStepTimes st;
} StepResult;

/* ---- the step's parts ---------------------------------------------------------- */

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
 * the step (config validation refused tensor and pipeline parallelism). The
 * gradient hook is always installed, but without ZeRO-2's buckets and
 * without overlap_grad_reduce (both refused by config validation) it only
 * keeps host-side counts that lt_grads_finalize resets. (The first GPU run
 * found the old check, "a hook is installed", refusing every config; the
 * suite's CPU runs with train.device=auto now reach the backend check only
 * when this one passes.) */
static void check_cuda_graph(const LtRun *r) {
    const LtConfig *c = r->cfg;
    if (!c->train.cuda_graph) return;
    /* (config validation refused ZeRO 2 and the overlap switches with the graph) */
    LT_CHECK(!lt_model_grad_buckets(r->model) && !c->parallel.overlap_grad_reduce);
    /* last, so that the suite sees the check above pass on the CPU */
    if (!r->be->ops->capture_begin)
        lt_input_error("train.cuda_graph needs the CUDA backend; this run uses the %s backend "
                       "(train.device)", r->be->ops->name);
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

/* ---- set-up ------------------------------------------------------------------ */

/* 1 when the runs of configs a and b train on the same parts of their
 * files: neither splits, or both with the same normalised data.split shares
 * and the same data.eod_token (which finds the documents of the formats
 * that keep no index). */
static int same_split(const LtConfig *a, const LtConfig *b) {
    double va[3], vb[3];
    char err[256];
    if (!a->data.split[0] || !b->data.split[0]) return !a->data.split[0] && !b->data.split[0];
    if (lt_split_parse(a->data.split, va, err, sizeof err) ||
        lt_split_parse(b->data.split, vb, err, sizeof err))
        return 0;
    for (int i = 0; i < 3; i++)
        if (fabs(va[i] - vb[i]) > 1e-12) return 0;
    return a->data.eod_token == b->data.eod_token;
}

/* A resumed run must read the blend it was saved with (the sample order is a
 * function of the weights): the saving run's config.yaml in the checkpoint
 * names its data.train_path; the number of datasets and their weights must
 * agree (the files may have moved), and so must data.split (each dataset's
 * train part). Then the summary says where in every dataset the run goes
 * on. */
static void check_resumed_blend(const LtRun *r, long start_step) {
    if (!r->resumed) return;
    LtConfig *saved = lt_calloc(sizeof *saved);
    LtBlend *old = lt_calloc(sizeof *old);
    char err[1024];
    const LtBlend *now = r->train_blend;
    /* a checkpoint that trained on no data (lattice import, train.steps=0
     * exports) has no order to continue */
    const int known = lt_ckpt_load_config(r->resume_dir, saved, err, sizeof err) == 0 &&
                      saved->data.train_path[0] &&
                      lt_blend_parse(saved->data.train_path, old, err, sizeof err) == 0;
    int same = !known || old->n == now->n;
    for (int d = 0; known && same && d < now->n; d++)
        same = fabs(old->weight[d] - now->weight[d]) <= 1e-12;
    if (!same)
        lt_input_error("data.train_path: the checkpoint in %s was trained on the blend '%s' "
                       "(%d dataset%s); this run names '%s' (%d). The sample order depends on the "
                       "datasets and their weights, so resuming with another blend would not "
                       "continue the run: use the same blend, or start a new run from the "
                       "checkpoint's weights", r->resume_dir, old->spec, old->n,
                       old->n == 1 ? "" : "s", now->spec, now->n);
    if (known && !same_split(saved, r->cfg))
        lt_input_error("data.split: the checkpoint in %s was trained with data.split '%s' "
                       "(data.eod_token %d); this run has '%s' (%d). The split decides which "
                       "documents of each dataset the run trains on, so resuming with another "
                       "would not continue the run: use the saving run's values, or start a new "
                       "run from the checkpoint's weights", r->resume_dir, saved->data.split,
                       saved->data.eod_token, r->cfg->data.split, r->cfg->data.eod_token);
    if (now->n > 1) {
        uint64_t taken[LT_BLEND_MAX];
        lt_loader_taken(r->loader, lt_rampup_consumed(&r->cfg->train.rampup, start_step), taken);
        for (int d = 0; d < now->n; d++)
            lt_log("resume     %s: %llu samples taken so far\n", lt_tokens_path(now->file[d]),
                   (unsigned long long)taken[d]);
    }
    free(old);
    free(saved);
}

/* A resumed run must take the batches the saving run would have taken: a
 * ramp-up (in this run or the saving one, read from its config.yaml) must
 * be the same with the same final batch, and the checkpoint's consumed
 * samples those of the ramp at its step. A checkpoint of step 0 (lattice
 * import) trained on nothing and starts any run. */
static void check_resumed_rampup(const LtRun *r) {
    const LtConfig *c = r->cfg;
    const LtRampup *now = &c->train.rampup;
    char err[1024];
    LtCkptMeta meta;
    if (!r->resumed) return;
    if (lt_ckpt_read_meta(r->resume_dir, &meta, err, sizeof err))
        lt_input_error("checkpoint.load: %s", err);
    LtConfig *saved = lt_calloc(sizeof *saved);
    LtRampup was = {0};
    const int known = lt_ckpt_load_config(r->resume_dir, saved, err, sizeof err) == 0 &&
                      lt_rampup_parse(saved->train.rampup_batch_size,
                                      saved->train.global_batch_size, &was, err, sizeof err) == 0;
    const int ramped = now->start || (known && was.start);
    if (meta.step > 0 && known && ramped &&
        (was.start != now->start || was.increment != now->increment ||
         was.samples != now->samples || was.global != now->global))
        lt_input_error("train.rampup_batch_size: the checkpoint in %s was saved by a run with "
                       "train.rampup_batch_size '%s' and train.global_batch_size %d; this run has "
                       "'%s' and %d. Every later step's batch (and so the data and the learning "
                       "rate) follows from them: resume with the saving run's values, or start a "
                       "new run from the checkpoint's weights", r->resume_dir,
                       saved->train.rampup_batch_size, saved->train.global_batch_size,
                       c->train.rampup_batch_size, c->train.global_batch_size);
    free(saved);
    const uint64_t want = lt_rampup_consumed(now, meta.step);
    if (meta.step > 0 && ramped && meta.samples_consumed != want)
        lt_input_error("train.rampup_batch_size: the checkpoint in %s consumed %llu samples in "
                       "%ld steps; this run's ramp-up '%s' consumes %llu in as many: it was "
                       "saved by a run with another batch schedule; resume with that run's "
                       "train.rampup_batch_size and train.global_batch_size",
                       r->resume_dir, (unsigned long long)meta.samples_consumed, meta.step,
                       c->train.rampup_batch_size, (unsigned long long)want);
}

/* The engine and its data for training: layout checks (collective, first),
 * model and optimizer (fresh or from checkpoint.load), the training and
 * validation files and the loader; checkpoint.dir made ready before step 1
 * (rank 0 removes what a killed save left). Exits 2 on bad input. */
static void open_training(Trainer *t, LtConfig *cfg, const LtWorld *w) {
    if (!cfg->data.train_path[0]) lt_input_error("data.train_path is not set");
    LtRun *r = &t->r;
    lt_run_setup(r, cfg, w, 1);
    char err[1024];
    r->train_blend = lt_calloc(sizeof *r->train_blend);
    if (lt_blend_open(r->train_blend, cfg->data.train_path, cfg->model.vocab_size, err, sizeof err))
        lt_input_error("data.train_path: %s", err);
    r->train = r->train_blend->file[0];
    lt_eval_open_valid(r); /* with data.split also every dataset's parts */
    for (int d = 0; cfg->data.split[0] && d < r->train_blend->n; d++) {
        if (!r->split_ntok[d][0]) lt_split_refuse_empty(cfg, r->train_blend, d, 0);
        r->train_blend->tok0[d] = r->split_tok0[d][0];
        r->train_blend->ntok[d] = r->split_ntok[d][0];
    }
    t->S = cfg->model.seq_length;
    t->G = cfg->train.global_batch_size;
    t->local = t->G / r->topo.dp;
    t->total = cfg->train.rampup.start
                   ? lt_rampup_steps(&cfg->train.rampup, (uint64_t)cfg->train.steps * t->G)
                   : cfg->train.steps;
    LtLoaderConfig lc = lt_train_loader_config(cfg, r->coords.dp * t->local, t->local);
    r->loader = lt_loader_create_blend(r->train_blend, &lc, err, sizeof err);
    if (!r->loader) lt_input_error("data.train_path: %s", err);
    check_resumed_rampup(r);
    check_resumed_blend(r, r->start_step);
    check_cuda_graph(r);
    if (cfg->checkpoint.dir[0] && w->rank == 0) { /* before step 1, not at the first save */
        int stale = 0;
        if (lt_ckpt_prepare_dir(cfg->checkpoint.dir, &stale, err, sizeof err))
            lt_input_error("checkpoint.dir: %s", err);
        if (stale)
            lt_log("checkpoint.dir: removed %d entr%s left by a save that was killed\n", stale,
                   stale == 1 ? "y" : "ies");
    }
}

/* The summary's line for train.rampup_batch_size: the ramp, and the run's
 * optimizer steps for its train.steps x G samples. */
static void print_rampup(const Trainer *t) {
    const LtConfig *c = t->r.cfg;
    const LtRampup *u = &c->train.rampup;
    if (!u->start) return;
    const long ramp_steps = lt_rampup_steps(u, (uint64_t)u->samples);
    lt_log("rampup     global batch %ld -> %ld by %ld over the first %ld samples (micro batches "
           "per rank %ld -> %ld); %ld optimizer steps for train.steps x %d = %lld samples "
           "(Megatron's count; %ld of them ramp)\n",
           u->start, u->global, u->increment, u->samples,
           u->start / c->train.micro_batch_size / t->r.topo.dp,
           u->global / c->train.micro_batch_size / t->r.topo.dp, t->total, t->G,
           (long long)c->train.steps * t->G, ramp_steps < t->total ? ramp_steps : t->total);
}

/* From here on a signal stops the run at a step boundary, with a save. Set
 * before the summary, whose lines tell a job script (and the tests) so. */
static void catch_stop_signals(void) {
    lt_log_restore_at_exit();
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGUSR1, on_signal);
}

/* The loop's buffers, its record of step times, the fault injection of the
 * tests and the loss-spike window. */
static void alloc_step_state(Trainer *t) {
    LtRun *r = &t->r;
    const LtConfig *cfg = r->cfg;
    LtBackend *be = r->be;
    t->flops_step = lt_model_flops_per_sample(&r->model->d, 0) * t->G;
    t->tokens_step = (double)t->G * t->S;
    t->rows = lt_malloc((size_t)t->local * (t->S + 1) * sizeof(int32_t));
    t->in = be->ops->host_alloc(be, (size_t)t->local * t->S * sizeof(int32_t));
    t->tgt = be->ops->host_alloc(be, (size_t)t->local * t->S * sizeof(int32_t));
    t->stats_dev = be->ops->alloc(be, 2 * sizeof(double));
    t->stats = be->ops->host_alloc(be, 2 * sizeof(double));
    lt_model_set_loss_acc(r->model, t->stats_dev);
    const long nsteps = t->total - r->start_step;
    t->times = lt_malloc((size_t)(nsteps > 0 ? nsteps : 1) * sizeof(double));
    t->sorted = lt_malloc((size_t)(nsteps > 0 ? nsteps : 1) * sizeof(double));
    t->inject = lt_inject_parse(r->world->rank);
    if (!cfg->train.calculate_per_token_loss) {
        const int nmb = t->local / cfg->train.micro_batch_size;
        t->mb_scale = lt_malloc(sizeof(float) * (size_t)nmb);
        t->mb_weight = lt_malloc(sizeof(float) * (size_t)nmb);
    }
    if (cfg->train.loss_spike_zscore > 0) {
        t->sw.cap = cfg->train.loss_spike_window;
        t->sw.x = lt_calloc(sizeof(double) * (size_t)t->sw.cap);
    }
    if (cfg->model.num_experts > 0) {
        const size_t L = (size_t)cfg->model.num_layers;
        t->moe_local = lt_calloc(sizeof(LtMoeStats) * (size_t)(lt_model_moe_layers(r->model) + 1));
        t->moe = lt_calloc(sizeof(LtMoeReport) * L);
        t->moe_sum = lt_calloc(sizeof(double) * 6 * L);
        const size_t held = (size_t)(lt_model_moe_layers(r->model) + 1);
        t->moe_tokens = lt_calloc(sizeof(double) * (size_t)cfg->model.num_experts * held);
        t->bias_kept = lt_calloc(sizeof(float) * (size_t)cfg->model.num_experts * held);
    }
}

/* The end of initialisation: MLPerf's run start, the step clock, and the
 * first step's samples. A step's samples are fetched at the end of the step
 * before (timed with the step they feed), so that bad data met mid-run is
 * known to every rank at the step boundary. */
static void start_training(Trainer *t) {
    LtRun *r = &t->r;
    const LtConfig *cfg = r->cfg;
    t->step = t->done = r->start_step;
    t->consumed = lt_rampup_consumed(&cfg->train.rampup, t->step);
    lt_mllog_on_run_start(cfg, r->micro_batches, r->start_step, r->eval_samples,
                          (long)t->consumed);
    t->t_run_start = t->t_next = lt_now();
    lt_step_clock_start(r); /* a GPU's step is timed on the device */
    lt_step_comm_mark(r, t->busy_next); /* with t_next: the start of the interval a step is timed over */
    char err[1024];
    if (t->step < t->total && fetch_step(r, t->step, t->rows, err, sizeof err))
        lt_input_error("data.train_path: step %ld: %s", t->step + 1, err);
    t->data_s = lt_now() - t->t_next;
}

/* ---- one step ------------------------------------------------------------------ */

/* This rank's share of MoE layer k's expert bias in the optimizer's master
 * shard: elements lo .. hi - 1 of the parameters (lo >= hi: another
 * data-parallel rank's shard holds it). */
static const LtParam *bias_slice(const LtRun *r, int k, size_t *lo, size_t *hi) {
    const LtOptimizer *o = r->opt;
    const LtParam *p = &r->model->table.p[lt_model_moe_bias_index(r->model, k)];
    const size_t E = (size_t)r->cfg->model.num_experts, end = o->shard_begin + o->shard_len;
    *lo = p->offset > o->shard_begin ? p->offset : o->shard_begin;
    *hi = p->offset + E < end ? p->offset + E : end;
    return p;
}

/* Aux-loss-free balancing (model.moe_router_enable_expert_bias; Megatron-Core's
 * get_updated_expert_bias): the step's kept assignments per expert, summed over
 * the stage's TP x DP ranks, move each expert's bias by rate x sign(mean -
 * count). The optimizer's fp32 master weights of this rank's shard take it
 * before the update, which leaves them (the bias has no gradient and no decay)
 * and copies them into the parameters, gathered under ZeRO. The values before
 * the move are kept: a skipped update (restore_expert_bias) leaves the bias as
 * it leaves every weight, so that a checkpoint of that step resumes the run
 * the way it went on. (Megatron-Core moves the bias before its optimizer
 * decides whether to skip.) */
static void update_expert_bias(Trainer *t) {
    LtRun *r = &t->r;
    const LtConfig *c = r->cfg;
    if (!c->model.moe_router_enable_expert_bias) return;
    const int n = lt_model_moe_layers(r->model), E = c->model.num_experts;
    const double rate = c->model.moe_router_bias_update_rate;
    double *cnt = t->moe_tokens;
    lt_model_moe_tokens_take(r->model, cnt);
    lt_comm_all_reduce(lt_comm_host(r->dp), cnt, (size_t)n * E, LT_COMM_F64, LT_COMM_SUM);
    lt_comm_all_reduce(lt_comm_host(r->tp), cnt, (size_t)n * E, LT_COMM_F64, LT_COMM_SUM);
    const LtOptimizer *o = r->opt;
    LtBackend *be = r->be;
    float *v = lt_malloc(sizeof(float) * (size_t)E);
    for (int k = 0; k < n; k++) {
        size_t lo, hi;
        const LtParam *p = bias_slice(r, k, &lo, &hi);
        if (lo >= hi) continue;
        const double *ck = cnt + (size_t)k * E;
        double mean = 0.0;
        for (int e = 0; e < E; e++) mean += ck[e] / E;
        float *dst = o->master + (lo - o->shard_begin);
        be->ops->download(be, v, dst, sizeof(float) * (hi - lo));
        memcpy(t->bias_kept + (size_t)k * E, v, sizeof(float) * (hi - lo));
        for (size_t i = 0; i < hi - lo; i++) {
            const double off = mean - ck[lo - p->offset + i];
            v[i] += (float)(rate * (off > 0 ? 1.0 : off < 0 ? -1.0 : 0.0));
        }
        be->ops->upload(be, dst, v, sizeof(float) * (hi - lo));
    }
    free(v);
}

/* A skipped update: the expert bias back to its values before the step. */
static void restore_expert_bias(Trainer *t) {
    LtRun *r = &t->r;
    if (!r->cfg->model.moe_router_enable_expert_bias) return;
    const int n = lt_model_moe_layers(r->model), E = r->cfg->model.num_experts;
    for (int k = 0; k < n; k++) {
        size_t lo, hi;
        bias_slice(r, k, &lo, &hi);
        if (lo < hi)
            r->be->ops->upload(r->be, r->opt->master + (lo - r->opt->shard_begin),
                               t->bias_kept + (size_t)k * E, sizeof(float) * (hi - lo));
    }
}

/* Gradient finalisation and the update of step t->step (the host's seconds
 * of each in phase_s[0] and phase_s[1]; s->lr the update's LR). Returns 1
 * when the update is skipped as a loss spike, with the step's real loss in
 * s->loss and its standard score in *spike_z. */
static int finish_update(Trainer *t, StepResult *s, double phase_s[2], double *spike_z) {
    LtRun *r = &t->r;
    const LtConfig *cfg = r->cfg;
    const double t_grads = lt_now();
    LT_TRACE_BEGIN("grads", NULL);
    int clk = lt_devclock_begin(NULL);
    lt_grads_finalize(r->grads);
    lt_devclock_end(clk, LT_CLK(LT_CLK_GRADS), NULL);
    LT_TRACE_END();
    const double t_optim = lt_now();
    LT_TRACE_BEGIN("optimizer", NULL);
    clk = lt_devclock_begin(NULL);
    lt_inject_nonfinite(r, &t->inject, t->step, t->stats_dev);
    const int spike = t->sw.cap && lt_loss_spike(r, &t->sw, t->stats_dev, t->loss_tokens,
                                                 &s->loss, spike_z);
    lt_optim_grad_sumsq(r->opt, r->model->grads, t->stats_dev + 1, t->stats_dev);
    update_expert_bias(t);
    s->lr = cfg->train.rampup.start ? lt_lr_at_samples(cfg, t->consumed, t->batch)
                                    : lt_lr_at(cfg, t->step);
    lt_optim_step(r->opt, r->model->params, r->model->grads, s->lr, 1.0,
                  lt_optim_clip_coef(r->opt, t->stats_dev + 1, cfg->optimizer.clip_grad));
    lt_grads_sync_tied(r->grads);
    lt_devclock_end(clk, LT_CLK(LT_CLK_OPTIMIZER), NULL);
    LT_TRACE_END();
    phase_s[0] = t_optim - t_grads;
    phase_s[1] = lt_now() - t_optim;
    return spike;
}

/* Count a skipped update (a loss spike, or a non-finite gradient norm, which
 * every rank skipped on the device) and say it in the log; an applied update
 * resets the count and joins the spike window. */
static void note_skip(Trainer *t, const StepResult *s, int spike, double spike_z) {
    const LtConfig *cfg = t->r.cfg;
    if (spike) { /* the loss was made NaN to skip the update: s->loss is the real one */
        lt_optim_skipped(t->r.opt);
        restore_expert_bias(t);
        t->skipped++;
        lt_log("step %ld: loss %g is a spike (%.1f standard deviations above the mean of the "
               "last %d steps, train.loss_spike_zscore=%g): update skipped (weights and Adam "
               "moments unchanged; %d in a row, train.max_skipped_steps=%d)\n",
               t->step + 1, s->loss, spike_z, t->sw.n, cfg->train.loss_spike_zscore, t->skipped,
               cfg->train.max_skipped_steps);
    } else if (!isfinite(s->norm)) {
        lt_optim_skipped(t->r.opt);
        restore_expert_bias(t);
        t->skipped++;
        lt_log("step %ld: loss %g, grad norm %g: not finite: update skipped (weights and "
               "Adam moments unchanged; %d in a row, train.max_skipped_steps=%d)\n",
               t->step + 1, s->loss, s->norm, t->skipped, cfg->train.max_skipped_steps);
    } else {
        t->skipped = 0;
        if (t->sw.cap) lt_spike_window_push(&t->sw, s->loss);
    }
}

/* train.calculate_per_token_loss=false (Megatron's classic loss): the step's
 * loss is the mean over the global batch's micro batches of each one's mean
 * over its targets that carry loss. Micro batch j of this rank (n_j such
 * targets) gets gradient scale 1 / (n_j M) and loss weight 1 / n_j, M the
 * micro batches of the global batch; the loss sum is then divided by M. A
 * micro batch without such targets adds nothing. */
static double set_micro_batch_means(Trainer *t) {
    const LtConfig *c = t->r.cfg;
    const int mbs = c->train.micro_batch_size, nmb = t->rows_now / mbs;
    const int32_t eod = c->data.eod_mask_loss ? c->data.eod_token : -1;
    const double M = (double)t->batch / mbs;
    for (int j = 0; j < nmb; j++) {
        const long n = lt_count_unmasked(t->in + (size_t)j * mbs * t->S, (size_t)mbs * t->S, eod);
        t->mb_weight[j] = n ? (float)(1.0 / (double)n) : 0.0f;
        t->mb_scale[j] = n ? (float)(1.0 / ((double)n * M)) : 0.0f;
    }
    lt_pipeline_set_micro_batch_scales(t->r.pipe, t->mb_scale, t->mb_weight);
    return M;
}

/* The global batch's targets that carry loss: every one, or with
 * data.eod_mask_loss those not predicted from an EOD token, counted over the
 * data-parallel ranks (the other ranks of a replica read the same samples),
 * so the step's loss is the mean over them in every layout (Megatron's
 * calculate_per_token_loss). At least 1. */
static double count_loss_tokens(const Trainer *t) {
    const LtConfig *c = t->r.cfg;
    if (!c->data.eod_mask_loss) return t->tokens_step;
    double n = (double)lt_count_unmasked(t->in, (size_t)t->rows_now * t->S, c->data.eod_token);
    lt_comm_all_reduce(lt_comm_host(t->r.dp), &n, 1, LT_COMM_F64, LT_COMM_SUM);
    return n > 0 ? n : 1;
}

/* Step t->step's global batch (with a ramp-up, at the samples consumed before
 * it), this rank's rows of it, the pipeline's micro batches, and the step's
 * tokens and FLOPs. */
static void set_step_batch(Trainer *t) {
    LtRun *r = &t->r;
    t->batch = (int)lt_rampup_batch(&r->cfg->train.rampup, t->consumed);
    t->rows_now = t->batch / r->topo.dp;
    lt_pipeline_set_micro_batches(r->pipe, t->rows_now / r->cfg->train.micro_batch_size);
    /* each micro batch's MoE aux and z losses weigh 1 / (micro batches of the step) */
    lt_model_set_moe_aux_weight(r->model,
                                (float)r->cfg->train.micro_batch_size / (float)t->batch);
    t->flops_step = lt_model_flops_per_sample(&r->model->d, 0) * t->batch;
    t->tokens_step = (double)t->batch * t->S;
}

/* The step's MoE statistics over all ranks into t->moe: per layer the aux
 * and z losses summed over the data-parallel ranks (the tensor-parallel ranks
 * see the same micro batches: only the first one's count), the loads per
 * routed micro batch and the drops over every rank. The forwards before the
 * step (evaluation) were discarded by moe_begin. */
static void moe_collect(Trainer *t) {
    LtRun *r = &t->r;
    const int L = r->cfg->model.num_layers, n = lt_model_moe_layers(r->model);
    double *v = t->moe_sum; /* per layer: aux, z, load_max, load_mean, dropped, forwards */
    memset(v, 0, sizeof(double) * 6 * (size_t)L);
    lt_model_moe_take(r->model, t->moe_local);
    const int tp0 = lt_comm_rank(r->tp) == 0;
    for (int k = 0; k < n; k++) {
        const LtMoeStats *st = &t->moe_local[k];
        double *x = v + 6 * st->layer;
        x[0] = tp0 ? st->aux : 0.0, x[1] = tp0 ? st->z : 0.0;
        x[2] = st->load_max, x[3] = st->load_mean, x[4] = (double)st->dropped;
        x[5] = (double)st->forwards;
    }
    const LtComm *groups[] = {r->dp, r->tp, r->pp};
    for (int g = 0; g < 3; g++)
        lt_comm_all_reduce(lt_comm_host(groups[g]), v, 6 * (size_t)L, LT_COMM_F64, LT_COMM_SUM);
    t->nmoe = 0;
    for (int l = 0; l < L; l++) {
        const double *x = v + 6 * l, f = x[5] > 0 ? x[5] : 1.0;
        if (!r->cfg->model.moe_layer[l]) continue;
        t->moe[t->nmoe++] = (LtMoeReport){l, x[0], x[1], x[2] / f, x[3] / f, (long)x[4]};
    }
    double load = 0.0;
    int n_load = 0;
    for (int i = 0; i < t->nmoe; i++)
        if (t->moe[i].load_mean > 0) load += t->moe[i].load_max / t->moe[i].load_mean, n_load++;
    if (n_load) t->load_sum += load / n_load, t->load_n++;
}

static void moe_begin(Trainer *t) {
    if (t->moe_local) lt_model_moe_take(t->r.model, t->moe_local);
}

/* The log line of the MoE layers: the aux and z losses summed over them, the
 * largest load imbalance (most loaded expert / mean) and the drops. */
static void moe_log(const Trainer *t) {
    double aux = 0.0, z = 0.0, worst = 0.0;
    long dropped = 0;
    for (int i = 0; i < t->nmoe; i++) {
        const LtMoeReport *x = &t->moe[i];
        aux += x->aux, z += x->z, dropped += x->dropped;
        if (x->load_mean > 0 && x->load_max / x->load_mean > worst) worst = x->load_max / x->load_mean;
    }
    lt_log("moe        %d layers | aux loss %.4g | z loss %.4g | expert load max/mean %.2f | "
           "dropped %ld\n",
           t->nmoe, aux, z, worst, dropped);
}

/* Step t->step: its samples (fetched before) through forward and backward,
 * gradient finalisation and the update, then the step's one host wait, which
 * brings its loss and gradient norm back; the step's time (from the end of
 * the step before) and its breakdown. */
static void train_step(Trainer *t, StepResult *s) {
    LtRun *r = &t->r;
    LtBackend *be = r->be;
    const unsigned long waits0 = be->host_waits;
    set_step_batch(t);
    moe_begin(t);
    lt_devclock_set_active(1);
    lt_split_rows(t->rows, t->rows_now, t->S, t->in, t->tgt); /* micro batch j: rows j*mbs .. */
    t->loss_tokens = t->mb_scale ? set_micro_batch_means(t) : count_loss_tokens(t);
    run_step_body(r, &t->graph, t->step == r->start_step, t->in, t->tgt, t->stats_dev,
                  (float)(1.0 / t->loss_tokens));
    double phase_s[2], spike_z = 0.0;
    const int spike = finish_update(t, s, phase_s, &spike_z);
    lt_devclock_set_active(0);
    be->ops->download_async(be, t->stats, t->stats_dev, 2 * sizeof(double));
    /* NCCL's collectives wait on the device: a dead peer shows up here */
    lt_watchdog_enter("the step's device synchronisation", NULL, -1);
    be->ops->synchronize(be);
    lt_watchdog_leave();
    double dev[LT_CLK_KINDS] = {0};
    const int dev_timed = lt_devclock_collect(dev);
    if (be->host_waits - waits0 > t->max_waits) t->max_waits = be->host_waits - waits0;
    double loss_sum = t->stats[0]; /* (0 off the last pipeline stage) */
    lt_comm_all_reduce(lt_comm_host(r->dp), &loss_sum, 1, LT_COMM_F64, LT_COMM_SUM);
    lt_comm_all_reduce(lt_comm_host(r->pp), &loss_sum, 1, LT_COMM_F64, LT_COMM_SUM);
    if (!spike) s->loss = loss_sum / t->loss_tokens;
    if (t->moe) moe_collect(t);
    s->norm = sqrt(t->stats[1]);
    note_skip(t, s, spike, spike_z);
    s->dt = lt_now() - t->t_next;
    t->times[t->ntimes] = s->dt;
    lt_sorted_insert(t->sorted, t->ntimes++, s->dt);
    s->st = lt_step_times(r, t->busy_next, s->dt, t->data_s, phase_s[0], phase_s[1],
                          dev_timed ? dev : NULL);
    t->done = t->step + 1;
}

/* The step's metrics record and, every logging.log_interval steps and at the
 * last, its two log lines: the step (ending with the time since the run's
 * start and the ETA) and its time breakdown. */
static void report_step(Trainer *t, const StepResult *s) {
    const LtRun *r = &t->r;
    const LtConfig *cfg = r->cfg;
    const long step = t->step + 1;
    const double tflops = t->flops_step / s->dt / 1e12 / r->world->world;
    const double mfu = r->peak_tflops > 0 ? tflops / r->peak_tflops : 0.0;
    if (t->moe) lt_metrics_moe_next(&t->mf, t->moe, t->nmoe);
    lt_metrics_train(&t->mf, step, t->batch, t->consumed + (uint64_t)t->batch, s->loss, s->lr,
                     s->norm, t->tokens_step / s->dt, tflops, mfu, s->dt * 1e3, &s->st);
    if (step % cfg->logging.log_interval != 0 && step != t->total) return;
    char progress[64], batch[32] = "";
    lt_step_progress(lt_now() - t->t_run_start, t->sorted, t->ntimes, t->total - step,
                     progress, sizeof progress);
    if (cfg->train.rampup.start) snprintf(batch, sizeof batch, "batch %d | ", t->batch);
    lt_log("step %6ld/%ld | %sloss %.4f | lr %.3e | grad norm %.4f | %.0f tok/s | %.3f TFLOP/s | "
           "MFU %.1f%% | %.1f ms | mem %.1f MiB | %s\n",
           step, t->total, batch, s->loss, s->lr, s->norm, t->tokens_step / s->dt, tflops,
           100.0 * mfu, s->dt * 1e3, lt_mib(lt_run_engine_bytes(r)), progress);
    const LtStepTimes *st = &s->st;
    lt_log("time       forward %.1f | backward %.1f | grads %.1f | optimizer %.1f | data "
           "%.1f | bubble %.1f | other %.1f ms; communication exposed (busy): tp %.1f "
           "(%.1f), dp %.1f (%.1f), pp %.1f (%.1f) ms\n",
           st->forward, st->backward, st->grads, st->optimizer, st->data, st->bubble, st->other,
           st->comm_tp, st->comm_tp_busy, st->comm_dp, st->comm_dp_busy, st->comm_pp,
           st->comm_pp_busy);
    if (st->attention > 0 || st->loss_head > 0 || st->moe > 0) {
        char moe[96] = "";
        if (t->moe)
            snprintf(moe, sizeof moe, " | MoE layers %.1f (the experts' GEMMs %.1f)", st->moe,
                     st->moe_experts);
        lt_log("time       of the passes: attention core %.1f | loss head %.1f%s | the rest "
               "%.1f ms\n",
               st->attention, st->loss_head, moe,
               st->forward + st->backward - st->attention - st->loss_head - st->moe);
    }
    if (r->ep || r->etp)
        lt_log("time       expert all-to-all exposed (busy): ep %.1f (%.1f) ms, in forward and "
               "backward (with the expert-tensor-parallel gathers and reduce-scatters)\n",
               st->comm_ep, st->comm_ep_busy);
    if (t->moe) moe_log(t);
}

/* ---- at the step boundary ---------------------------------------------------------- */

/* Whether an evaluation follows step t->step: every eval.interval steps, or
 * when the trained samples pass a multiple of eval.interval_samples (from
 * eval.start_samples on); never without validation data. */
static int eval_due(const Trainer *t) {
    const LtConfig *c = t->r.cfg;
    const long before = (long)t->consumed, done = before + t->batch;
    const long every = c->eval.interval_samples;
    return t->r.valid && ((c->eval.interval > 0 && (t->step + 1) % c->eval.interval == 0) ||
                          (every > 0 && done / every > before / every &&
                           done >= c->eval.start_samples));
}

/* An evaluation when due (eval_due): its log line, metrics record and MLPerf
 * events. Returns 1 when the validation log perplexity reached
 * eval.target_log_ppl (said with the time to train): training stops here. */
static int eval_if_due(Trainer *t) {
    if (!eval_due(t)) return 0;
    const LtConfig *c = t->r.cfg;
    const long step = t->step + 1, done = (long)t->consumed + t->batch; /* samples trained */
    long ns;
    const double vl = lt_evaluate(&t->r, &ns);
    lt_log("eval step %ld | val loss %.4f | val log ppl %.4f | val ppl %.2f | %ld samples | "
           "%ld trained\n",
           step, vl, vl, exp(vl), ns, done);
    lt_metrics_eval(&t->mf, step, vl, ns);
    t->target_reached = c->eval.target_log_ppl > 0 && vl <= c->eval.target_log_ppl;
    lt_mllog_on_eval(done, vl, !t->target_reached && step < t->total);
    if (t->target_reached)
        lt_log("target reached: val log ppl %.4f <= eval.target_log_ppl %g at step %ld after "
               "%ld samples; time to train %.1f s (run start to this evaluation; "
               "initialisation %.1f s, not counted)\n",
               vl, c->eval.target_log_ppl, step, done, lt_now() - t->t_run_start,
               t->t_run_start - t->t_init_start);
    return t->target_reached;
}

/* Completes a background save once every rank has written it (collective),
 * and saves every checkpoint.save_interval steps (the last step's save comes
 * after the loop). */
static void save_if_due(Trainer *t) {
    const LtConfig *c = t->r.cfg;
    const long step = t->step + 1;
    lt_run_ckpt_poll(&t->r);
    if (c->checkpoint.dir[0] && c->checkpoint.save_interval > 0 &&
        step % c->checkpoint.save_interval == 0 && step < t->total)
        save_checkpoint(&t->r, step);
}

/* Returns 1 (and says so, exit code 3) after more consecutive skipped updates
 * than train.max_skipped_steps - the same decision on every rank. The run
 * stops without saving, so the last good checkpoint stays the newest. */
static int diverged(Trainer *t) {
    if (t->skipped <= t->r.cfg->train.max_skipped_steps) return 0;
    lt_log("error: %d consecutive steps with a non-finite loss or gradient norm (up to "
           "step %ld): training diverged; stopping without saving, so the last good "
           "checkpoint stays the newest (lower optimizer.lr, raise optimizer.warmup_steps?)\n",
           t->skipped, t->step + 1);
    t->exit_code = LT_EXIT_DIVERGED;
    return 1;
}

/* The ranks' agreement to stop: fetch the next step's samples (timed as that
 * step's data), then reduce over every group whether any rank received a
 * signal or met bad data, so that all stop after the same step. Returns 1 to
 * stop, with t->exit_code 2 (bad data; the rank that met it says what and
 * where) or 128 + the signal. */
static int agree_to_stop(Trainer *t) {
    LtRun *r = &t->r;
    const int rank = r->world->rank;
    const long step = t->step + 1; /* done; the next is step + 1 */
    t->t_next = lt_now();
    lt_step_comm_mark(r, t->busy_next);
    int32_t stop[2] = {(int32_t)g_stop_signal, 0}; /* signal, bad data */
    if (step < t->total &&
        fetch_step(r, step, t->rows, t->data_err, sizeof t->data_err))
        stop[1] = 1;
    t->data_s = lt_now() - t->t_next;
    if (r->world->world > 1) { /* the maximum over the world */
        lt_comm_all_reduce(lt_comm_host(r->dp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
        lt_comm_all_reduce(lt_comm_host(r->tp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
        lt_comm_all_reduce(lt_comm_host(r->pp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
    }
    /* decided on the agreed value: a signal that arrives during the
     * reduction stays in g_stop_signal for the next step's (writing the
     * agreed value back would lose it, and this rank would train on) */
    if (stop[1]) {
        if (t->data_err[0])
            fprintf(stderr, "lattice: error: [rank %d] data.train_path: step %ld: %s\n", rank,
                    step + 1, t->data_err);
        lt_log("bad training data for step %ld: stopping after step %ld and saving it, the "
               "last good step\n", step + 1, step);
        t->exit_code = LT_EXIT_INPUT;
        return 1;
    }
    if (stop[0]) {
        lt_log("received signal %d after step %ld: stopping\n", (int)stop[0], step);
        t->exit_code = 128 + (int)stop[0];
        return 1;
    }
    return 0;
}

/* ---- the end ----------------------------------------------------------------------- */

/* The run's median step after warm-up and its throughput, beside the
 * planner's prediction where there is one. */
/* Decimals for a predicted time in ms: one, or two significant digits of a
 * tiny model's fraction of a millisecond (0.0014, not 0.0). */
static int ms_digits(double ms) {
    if (!(ms > 0) || ms >= 1.0) return 1;
    const int d = 1 - (int)floor(log10(ms));
    return d < 9 ? d : 9;
}

static void report_done(Trainer *t) {
    if (t->ntimes == 0) return;
    const LtRun *r = &t->r;
    const int world = r->world->world;
    const int skip = t->ntimes > 3 ? (t->ntimes > 10 ? 2 : 1) : 0; /* warm-up steps */
    const double med = lt_median(t->times + skip, t->ntimes - skip);
    const double tflops = t->flops_step / med / 1e12 / world;
    lt_log("done: %ld steps, median step %.1f ms over %d steps after warm-up, %.0f tok/s, "
           "%.3f TFLOP/s per device, MFU %.1f%%, host waits per step %lu\n",
           t->done, med * 1e3, t->ntimes - skip, t->tokens_step / med, tflops,
           r->peak_tflops > 0 ? 100.0 * tflops / r->peak_tflops : 0.0, t->max_waits);
    LtAttnInfo ai;
    if (r->attn.cudnn && lt_cuda_attention_info(r->be, &ai) == 0) {
        lt_log("attention: cuDNN ran %ld forward and %ld backward calls; lattice's kernels ran "
               "%ld forward and %ld backward calls%s%s%s\n", ai.cudnn_calls[0], ai.cudnn_calls[1],
               ai.fallback_calls[0], ai.fallback_calls[1], ai.last_fallback[0] ? " (last: " : "",
               ai.last_fallback, ai.last_fallback[0] ? ")" : "");
    }
    const double pms = 1e3 * r->plan.step;
    if (r->plan_device[0])
        lt_log("planned:  the planner predicted %.*f ms per step on %s; measured %.1f ms (%.2fx)\n",
               ms_digits(pms), pms, r->plan_device, med * 1e3, med / r->plan.step);
    /* under expert parallelism the most loaded rank paces the MoE layers: the
     * prediction again at the load the run measured (the planner's --moe-load) */
    LtPlanStep at;
    if (r->plan_device[0] && t->load_n > 0 && r->cfg->parallel.expert_model_parallel_size > 1 &&
        lt_run_plan_at_load(r, t->load_sum / t->load_n, &at) == 0)
        lt_log("planned:  at the expert load measured (max/mean %.2f, the mean over steps and MoE "
               "layers) the planner predicts %.*f ms; measured %.1f ms (%.2fx)\n",
               t->load_sum / t->load_n, ms_digits(1e3 * at.step), 1e3 * at.step, med * 1e3,
               med / at.step);
}

/* Whether the run ends with an evaluation of its last step: it finished (no
 * stop, no target), evaluates by steps, and none of them evaluated it. */
static int final_eval_due(const Trainer *t) {
    const LtConfig *c = t->r.cfg;
    return t->r.valid && t->exit_code == 0 && !t->target_reached &&
           c->eval.interval_samples == 0 &&
           (c->eval.interval == 0 || t->done % c->eval.interval != 0 || t->done == 0);
}

/* LT_PLAN_CHECK=1 (the suite): the pipeline's message pool, counted in the
 * memory summary, held every message of the run's steps and evaluations. */
static void check_message_pool(const LtRun *r) {
    const char *chk = getenv("LT_PLAN_CHECK");
    if (chk && chk[0] == '1' &&
        lt_pipeline_message_buffers(r->pipe) > lt_pipeline_message_buffers_planned(r->pipe))
        lt_fatal("LT_PLAN_CHECK: the pipeline made %d message buffers, %d were planned",
                 lt_pipeline_message_buffers(r->pipe), lt_pipeline_message_buffers_planned(r->pipe));
}

/* After the last step or a stop: MLPerf's run_stop, the final evaluation
 * when due, the final save (not after a divergence), and the wait for the
 * save in flight. */
static void finish_run(Trainer *t) {
    LtRun *r = &t->r;
    const LtConfig *cfg = r->cfg;
    lt_mllog_on_stop(t->target_reached);
    if (cfg->eval.target_log_ppl > 0 && !t->target_reached)
        lt_log("target not reached: eval.target_log_ppl %g after %ld steps (%.1f s of training)\n",
               cfg->eval.target_log_ppl, t->done, lt_now() - t->t_run_start);
    if (final_eval_due(t)) {
        long ns;
        const double vl = lt_evaluate(r, &ns);
        lt_log("eval step %ld | val loss %.4f | val ppl %.2f | %ld samples\n", t->done, vl,
               exp(vl), ns);
        lt_metrics_eval(&t->mf, t->done, vl, ns);
    }
    if (cfg->checkpoint.dir[0] && t->exit_code != LT_EXIT_DIVERGED) save_checkpoint(r, t->done);
    check_message_pool(r);
    LT_TRACE_BEGIN("checkpoint wait", NULL);
    lt_run_ckpt_wait(r); /* the end of training (or a stop) waits for the save in flight */
    LT_TRACE_END();
}

/* Close the metrics file and the trace (collective), free the loop's state
 * and the engine. Returns the exit code: the run's, or 2 when it finished
 * but its metrics or trace could not be written. */
static int close_training(Trainer *t) {
    LtRun *r = &t->r;
    LtBackend *be = r->be;
    lt_metrics_close(&t->mf);
    char merr[LT_PATH_MAX + 128];
    const int trace_failed = lt_trace_stop(merr, sizeof merr); /* collective: called first */
    if ((trace_failed || lt_metrics_status(&t->mf, merr, sizeof merr)) && t->exit_code == 0) {
        lt_log("error: %s (training finished%s)\n", merr,
               r->cfg->checkpoint.dir[0] ? " and its checkpoint was saved" : "");
        t->exit_code = LT_EXIT_INPUT;
    }
    lt_model_set_loss_acc(r->model, NULL);
    if (t->graph) be->ops->graph_destroy(be, t->graph);
    lt_devclock_stop(); /* (after the graph: its record nodes use the clock's timers) */
    free(t->rows);
    be->ops->host_free(be, t->in);
    be->ops->host_free(be, t->tgt);
    free(t->mb_scale);
    free(t->mb_weight);
    be->ops->host_free(be, t->stats);
    be->ops->free(be, t->stats_dev);
    free(t->times);
    free(t->sorted);
    free(t->sw.x);
    free(t->moe_local);
    free(t->moe);
    free(t->moe_sum);
    free(t->moe_tokens);
    free(t->bias_kept);
    lt_run_teardown(r);
    return t->exit_code;
}

/* ---- the loop ---------------------------------------------------------------------- */

int lt_cmd_train(LtConfig *cfg, const LtWorld *w) {
    Trainer t;
    memset(&t, 0, sizeof t);
    t.t_init_start = lt_now();
    lt_mllog_on_init(cfg, w->rank);
    open_training(&t, cfg, w);
    catch_stop_signals();
    lt_run_print_summary(&t.r);
    print_rampup(&t);
    lt_mllog_print_summary();
    lt_metrics_open(&t.mf, w->rank == 0 ? cfg->logging.metrics_file : NULL);
    alloc_step_state(&t);
    start_training(&t);
    for (; t.step < t.total; t.step++, t.consumed += (uint64_t)t.batch) {
        StepResult s;
        lt_watchdog_set_step(t.step + 1);
        LT_TRACE_BEGIN("step", "\"step\": %ld", t.step + 1);
        train_step(&t, &s);
        report_step(&t, &s);
        LT_TRACE_END();
        if (eval_if_due(&t)) break; /* the target was reached */
        save_if_due(&t);
        if (diverged(&t) || agree_to_stop(&t)) break;
    }
    report_done(&t);
    finish_run(&t);
    return close_training(&t);
}
