/* ckpt_save.c - saving the training state at a step boundary: assembled
 * from every rank's shards, written by the first rank in this thread or a
 * background one (checkpoint.async; see engine.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "common.h"
#include "engine.h"

/* The write of one checkpoint: the assembled global state, written by the
 * first rank, in this thread (checkpoint.async=false) or a background one. */
typedef struct {
    const LtConfig *cfg;
    const LtParamTable *g;
    LtCkptState st;
    LtCkptMeta meta;
    int rc, pruned;
    double seconds; /* the write itself */
    char err[1024];
} CkptWrite;

static void *ckpt_write(void *arg) {
    CkptWrite *w = arg;
    const double t0 = lt_now();
    const char *dir = w->cfg->checkpoint.dir;
    w->rc = lt_ckpt_save(dir, w->g, &w->st, &w->meta, w->cfg, w->err, sizeof w->err);
    char perr[1024];
    /* older checkpoints go only once this one is complete */
    if (w->rc == 0 && lt_ckpt_prune(dir, w->cfg->checkpoint.keep_last, &w->pruned, perr, sizeof perr))
        lt_log("warning: checkpoint.keep_last: %s\n", perr);
    w->seconds = lt_now() - t0;
    return NULL;
}

/* The save in flight (checkpoint.async): at most one. */
static struct {
    pthread_t thread;
    CkptWrite *w;
} g_save;

static void ckpt_write_done(CkptWrite *w, const char *how, double blocked) {
    if (w->rc) { /* the partial step directory is gone and latest still names the previous one */
        fprintf(stderr, "lattice: error: saving checkpoint step %ld to %s failed: %s (the previous "
                        "checkpoint, if any, is intact and still named by latest)\n",
                w->meta.step, w->cfg->checkpoint.dir, w->err);
        exit(LT_EXIT_INTERNAL);
    }
    lt_log("saved checkpoint step %ld to %s (%s %.2f s, the step loop blocked %.2f s%s)\n",
           w->meta.step, w->cfg->checkpoint.dir, how, w->seconds, blocked,
           w->pruned ? "; older ones beyond checkpoint.keep_last removed" : "");
    free(w->st.master);
    free(w->st.m);
    free(w->st.v);
    free(w);
}

/* Wait for the save in flight, if any (before the next one, at a stop, at the
 * end of training); returns the seconds waited. */
double lt_run_ckpt_wait(void) {
    if (!g_save.w) return 0.0;
    const double t0 = lt_now();
    pthread_join(g_save.thread, NULL);
    const double waited = lt_now() - t0;
    ckpt_write_done(g_save.w, "written in the background in", waited);
    g_save.w = NULL;
    return waited;
}

void lt_run_save_checkpoint(LtRun *r, long step) {
    const LtConfig *c = r->cfg;
    const double t_enter = lt_now();
    double blocked = lt_run_ckpt_wait(); /* at most one save in flight */
    const LtParamTable *t = &r->model->table, *g = &r->global;
    size_t bytes = t->total * sizeof(float), gbytes = g->total * sizeof(float);
    float *local[3] = {lt_malloc(bytes), lt_malloc(bytes), lt_malloc(bytes)};
    lt_optim_gather_state(r->opt, local[0], local[1], local[2]); /* collective over DP */
    /* assemble global tensors: every TP rank writes its shards (replicated ones
     * from TP rank 0 only), every stage its layers (the tied embedding from the
     * first stage only), and sums over the TP and pipeline groups fill in the rest */
    CkptWrite *w = lt_calloc(sizeof *w);
    w->cfg = c;
    w->g = g;
    w->st = (LtCkptState){lt_calloc(gbytes), lt_calloc(gbytes), lt_calloc(gbytes)};
    float *glob[3] = {w->st.master, w->st.m, w->st.v};
    for (int k = 0; k < 3; k++) {
        lt_params_to_global(t, local[k], g, glob[k], r->coords.tp == 0);
        lt_comm_all_reduce(lt_comm_host(r->tp), glob[k], g->total, LT_COMM_F32, LT_COMM_SUM);
        lt_comm_all_reduce(lt_comm_host(r->pp), glob[k], g->total, LT_COMM_F32, LT_COMM_SUM);
        free(local[k]);
    }
    w->meta = (LtCkptMeta){
        .step = step,
        .optimizer_steps = r->opt ? r->opt->step : step,
        .samples_consumed = (uint64_t)step * (uint64_t)c->train.global_batch_size,
        .seed = c->train.seed,
        .data_seed = c->train.seed,
        .rng_state = c->train.seed,
    };
    /* the full state is identical everywhere now: the first rank writes it */
    if (r->world->rank != 0) {
        free(w->st.master), free(w->st.m), free(w->st.v), free(w);
    } else if (c->checkpoint.async) { /* this state is the writer's own copy */
        g_save.w = w;
        if (pthread_create(&g_save.thread, NULL, ckpt_write, w) != 0)
            lt_fatal("cannot start the checkpoint writer thread");
        lt_log("checkpoint step %ld: state copied (the step loop blocked %.2f s), writing in the "
               "background\n", step, lt_now() - t_enter);
        return;
    } else {
        ckpt_write(w);
        blocked = lt_now() - t_enter;
        ckpt_write_done(w, "written in", blocked);
    }
    if (!c->checkpoint.async) { /* nobody runs ahead of a synchronous save */
        lt_comm_barrier(r->dp);
        lt_comm_barrier(r->tp);
        lt_comm_barrier(r->pp);
    }
}
