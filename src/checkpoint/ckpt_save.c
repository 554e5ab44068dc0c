/* ckpt_save.c - saving the training state at a step boundary. Every rank
 * writes the state it owns to a file of its own, in parallel: its TP/PP
 * shard of the parameters and its DP slice of the fp32 master weights and
 * Adam moments (its ZeRO shard; with ZeRO 0 the same slice of its full
 * copy), tensors replicated over TP from TP rank 0 only. Nothing is gathered:
 * a rank holds a host copy of its slice and an I/O buffer. Once every rank's
 * file is durable, the first rank lists them in meta.json and installs the
 * step directory (checkpoint.c). With checkpoint.async the files are written
 * by a background thread per rank and the checkpoint is completed at the
 * first step boundary where all writes are done (see engine.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "ckpt_state.h"
#include "common.h"
#include "training/engine.h"
#include "trace.h"

/* One rank's part of one checkpoint. */
typedef struct {
    const LtConfig *cfg;
    LtBackend *be;
    LtStateSrc src, esrc;       /* esrc: the experts' (expert parallelism), chained to src */
    float *copy[LT_CKPT_KINDS]; /* host copies of this rank's slice (n elements each; the
                                 * backend's host memory: page-locked on a GPU) */
    float *ecopy[LT_CKPT_KINDS]; /* of its slice of the experts' (en each), or NULL */
    size_t n, en;
    LtCkptMeta meta;
    char tmp[LT_PATH_MAX + 64], path[LT_PATH_MAX + 160];
    int rc;
    int done;       /* set (atomically) by the writer when rc is final */
    double seconds; /* the write itself */
    char err[1024];
} CkptWrite;

/* The save in flight: at most one. */
static struct {
    pthread_t thread;
    CkptWrite *w;
    int threaded;
} g_save;

static void *ckpt_write(void *arg) {
    CkptWrite *w = arg;
    LT_TRACE_BEGIN("checkpoint write", "\"step\": %ld, \"elements\": %zu", w->meta.step,
                   w->n + w->en);
    const double t0 = lt_now();
    uint64_t bytes;
    uint32_t crc;
    w->rc = lt_state_write(w->path, &w->src, (size_t)w->cfg->checkpoint.io_buffer_mib << 20, &bytes,
                           &crc, w->err, sizeof w->err);
    w->seconds = lt_now() - t0;
    LT_TRACE_END();
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* checkpoint.async: the writer thread (a row of its own in a trace). */
static void *ckpt_writer_thread(void *arg) {
    lt_trace_thread("checkpoint writer");
    return ckpt_write(arg);
}

/* Whether any rank reports a failure (an all-reduce over the grid). */
static int any_failed(LtRun *r, int failed) {
    int32_t f = failed != 0;
    lt_comm_all_reduce(lt_comm_host(r->dp), &f, 1, LT_COMM_I32, LT_COMM_MAX);
    lt_comm_all_reduce(lt_comm_host(r->tp), &f, 1, LT_COMM_I32, LT_COMM_MAX);
    lt_comm_all_reduce(lt_comm_host(r->pp), &f, 1, LT_COMM_I32, LT_COMM_MAX);
    return f;
}

static LtCkptLayout run_layout(const LtRun *r) {
    const LtConfig *c = r->cfg;
    return (LtCkptLayout){r->topo.tp, r->topo.pp, c->parallel.virtual_pipeline_model_parallel_size,
                          r->topo.dp, c->optimizer.zero_stage, lt_config_layer_split(c)};
}

static void ckpt_write_free(CkptWrite *w) {
    for (int k = 0; k < LT_CKPT_KINDS; k++) {
        w->be->ops->host_free(w->be, w->copy[k]);
        lt_ckpt_mem_uncount(w->n * sizeof(float));
        if (!w->ecopy[k]) continue;
        w->be->ops->host_free(w->be, w->ecopy[k]);
        lt_ckpt_mem_uncount(w->en * sizeof(float));
    }
    free(w);
}

/* Host copies of the slice [lo, lo + n) of o's state (the writer's own). */
static void copy_state(CkptWrite *w, LtOptimizer *o, size_t lo, size_t n,
                       float *copy[LT_CKPT_KINDS]) {
    for (int k = 0; k < LT_CKPT_KINDS; k++) {
        copy[k] = w->be->ops->host_alloc(w->be, n ? n * sizeof(float) : sizeof(float));
        lt_ckpt_mem_count(n * sizeof(float));
    }
    lt_optim_download_state(o, lo, n, copy[0], copy[1], copy[2]);
}

/* After every rank's write (collective): the first rank completes the
 * checkpoint, or removes it when any write failed; a failure stops every rank. */
static void ckpt_finish(LtRun *r, CkptWrite *w, const char *how, double blocked) {
    const LtConfig *c = r->cfg;
    if (w->rc && r->world->rank != 0) /* the first rank's own error ends its message below */
        fprintf(stderr, "lattice: error: [rank %d] %s\n", r->world->rank, w->err);
    int failed = any_failed(r, w->rc), pruned = 0;
    char err[1024] = "";
    if (r->world->rank == 0) {
        const LtCkptLayout l = run_layout(r);
        if (failed) {
            lt_ckpt_abort(w->tmp);
            snprintf(err, sizeof err, "%s",
                     w->rc ? w->err
                           : "another rank could not write its state file (its error is above)");
        } else if (lt_ckpt_commit(c->checkpoint.dir, w->tmp, &r->global, &w->meta, &l, 1, c, err,
                                  sizeof err)) {
            failed = 1;
        } else {
            char perr[1024]; /* older checkpoints go only once this one is complete */
            if (lt_ckpt_prune(c->checkpoint.dir, c->checkpoint.keep_last, &pruned, perr, sizeof perr))
                lt_log("warning: checkpoint.keep_last: %s\n", perr);
        }
    }
    if (any_failed(r, failed)) { /* the partial step directory is gone; latest names the previous one */
        if (r->world->rank == 0)
            fprintf(stderr, "lattice: error: saving checkpoint step %ld to %s failed: %s (the "
                            "previous checkpoint, if any, is intact and still named by latest)\n",
                    w->meta.step, c->checkpoint.dir, err);
        exit(LT_EXIT_INTERNAL);
    }
    lt_log("saved checkpoint step %ld to %s (%s %.2f s, the step loop blocked %.2f s; host memory "
           "of the first rank: state copy %zu bytes + checkpoint buffers peak %zu bytes (I/O "
           "buffer %zu); the whole model's state is %zu bytes%s)\n",
           w->meta.step, c->checkpoint.dir, how, w->seconds, blocked,
           LT_CKPT_KINDS * (w->n + w->en) * sizeof(float),
           lt_ckpt_mem_peak() - LT_CKPT_KINDS * (w->n + w->en) * sizeof(float),
           (size_t)c->checkpoint.io_buffer_mib << 20, 3 * r->global.total * sizeof(float),
           pruned ? "; older ones beyond checkpoint.keep_last removed" : "");
    ckpt_write_free(w);
}

double lt_run_ckpt_wait(LtRun *r) {
    if (!g_save.w) return 0.0;
    const double t0 = lt_now();
    if (g_save.threaded) pthread_join(g_save.thread, NULL);
    CkptWrite *w = g_save.w;
    g_save.w = NULL;
    const double waited = lt_now() - t0;
    ckpt_finish(r, w, "written in the background in", waited);
    return waited;
}

void lt_run_ckpt_poll(LtRun *r) {
    if (!g_save.w) return; /* the same on every rank: saves start and finish together */
    const int mine = __atomic_load_n(&g_save.w->done, __ATOMIC_ACQUIRE);
    if (!any_failed(r, !mine)) lt_run_ckpt_wait(r); /* every rank is done: no waiting */
}

void lt_run_save_checkpoint(LtRun *r, long step) {
    const LtConfig *c = r->cfg;
    const double t_enter = lt_now();
    lt_run_ckpt_wait(r); /* at most one save in flight */
    lt_ckpt_mem_reset_peak();
    CkptWrite *w = lt_calloc(sizeof *w);
    w->cfg = c;
    w->meta = (LtCkptMeta){
        .step = step,
        .optimizer_steps = r->opt ? r->opt->step : step,
        .samples_consumed = lt_rampup_consumed(&c->train.rampup, step),
        .seed = c->train.seed,
        .data_seed = c->train.seed,
        .rng_state = c->train.seed,
    };
    /* the first rank makes the temporary directory before anyone writes */
    const int first = r->world->rank == 0;
    int rc = lt_ckpt_begin(c->checkpoint.dir, step, first, w->tmp, sizeof w->tmp, w->err, sizeof w->err);
    if (any_failed(r, rc)) {
        if (rc) fprintf(stderr, "lattice: error: saving checkpoint step %ld: %s\n", step, w->err);
        exit(LT_EXIT_INTERNAL);
    }
    const LtCkptLayout l = run_layout(r);
    char name[96];
    lt_ckpt_state_name(&l, r->coords.tp, r->coords.pp, r->coords.dp, name, sizeof name);
    snprintf(w->path, sizeof w->path, "%s/%s", w->tmp, name);
    size_t lo;
    lt_optim_save_range(r->opt, &lo, &w->n);
    w->be = r->be;
    copy_state(w, r->opt, lo, w->n, w->copy);
    w->src = (LtStateSrc){&r->model->table, lo, lo + w->n, r->coords.tp == 0,
                          {w->copy[0], w->copy[1], w->copy[2]}, NULL};
    if (r->eopt) { /* this rank's experts: its expert-data-parallel slice of them, each
                    * expert's slice saved by one rank of the stage; a tensor whole on
                    * every ETP rank (proj.bias) by ETP rank 0 */
        lt_optim_save_range(r->eopt, &lo, &w->en);
        copy_state(w, r->eopt, lo, w->en, w->ecopy);
        w->esrc = (LtStateSrc){&r->model->etable, lo, lo + w->en,
                               !r->etp || lt_comm_rank(r->etp) == 0,
                               {w->ecopy[0], w->ecopy[1], w->ecopy[2]}, NULL};
        w->src.next = &w->esrc;
    }
    g_save.w = w;
    g_save.threaded = c->checkpoint.async;
    if (c->checkpoint.async) { /* the copies are the writer's own */
        if (pthread_create(&g_save.thread, NULL, ckpt_writer_thread, w) != 0)
            lt_fatal("cannot start the checkpoint writer thread");
        lt_log("checkpoint step %ld: state copied (the step loop blocked %.2f s), writing in the "
               "background\n", step, lt_now() - t_enter);
        return;
    }
    ckpt_write(w);
    g_save.w = NULL;
    ckpt_finish(r, w, "written in", lt_now() - t_enter);
}
