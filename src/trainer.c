/* trainer.c - the training loop and the other model-running subcommands.
 *
 * Step k (0-based): the loader hands over global samples k*G .. k*G+G-1;
 * they run as G/mbs micro batches whose gradients accumulate (each scaled by
 * 1/(G*S), so the sum is the gradient of the mean token loss); then grad norm,
 * clip coefficient, LR for update k, AdamW; then metrics, eval, checkpoint. */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn_select.h"
#include "backend.h"
#include "checkpoint.h"
#include "comm.h"
#include "common.h"
#include "data.h"
#include "grads.h"
#include "metrics.h"
#include "mllog.h"
#include "model.h"
#include "optim.h"
#include "pipeline.h"
#include "plan.h"
#include "topology.h"
#include "watchdog.h"

typedef struct {
    LtConfig *cfg;
    const LtWorld *world;
    LtBackend *be;
    LtModel *model;
    LtOptimizer *opt;
    LtGrads *grads;     /* gradient finalisation (training only) */
    LtTokenFile *train, *valid;
    LtLoader *loader;
    LtTopology topo;
    LtCoords coords;
    LtComm *dp;         /* data-parallel group (device buffers with the CUDA backend) */
    LtComm *tp;         /* tensor-parallel group (device buffers with the CUDA backend) */
    LtComm *pp;         /* pipeline group: stage-to-stage sends (MPI; staged with CUDA) */
    LtComm *emb;        /* embedding group: first and last stage (pp > 1 with a tied LM
                         * head; else NULL) */
    LtPipeline *pipe;   /* walks this rank's schedule */
    int micro_batches;  /* per step and data-parallel rank: G / (mbs * dp) */
    LtCommLib comm_lib; /* library of dp/tp when they take device buffers */
    int comm_device;    /* 1: dp/tp take the backend's device buffers (CUDA backend) */
    const char *comm_why; /* how comm.backend was resolved (CUDA backend) */
    LtAttnChoice attn;    /* how model.attention was resolved */
    LtParamTable global; /* the tp = 1 table: checkpoints hold global tensors */
    long start_step;
    double peak_tflops;
    const char *peak_source;
} Run;

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

/* ---- set-up ---------------------------------------------------------------- */

static LtBackend *make_backend(const LtConfig *c, const LtWorld *w) {
    LtDtype dt = c->train.precision == LT_PREC_BF16 ? LT_BF16 : LT_F32;
    int ngpu = lt_cuda_device_count();
    int cuda = c->train.device == LT_DEVICE_CUDA || (c->train.device == LT_DEVICE_AUTO && ngpu > 0);
    if (cuda) {
        char err[512];
        if (ngpu == 0 && lt_cuda_compiled())
            lt_input_error("train.device=cuda: no CUDA device is visible");
        LtBackend *be = lt_backend_cuda_create(dt, ngpu ? w->local_rank % ngpu : 0, err, sizeof err);
        if (!be) lt_input_error("train.device=cuda: %s", err);
        return be;
    }
    int threads = c->train.threads;
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(cores / (w->local_size > 0 ? w->local_size : 1));
        if (threads < 1) threads = 1;
    }
    return lt_backend_cpu_create(dt, threads);
}

/* model.attention for this run's backend: the CUDA backend sets itself up
 * for the choice; the CPU backend always runs its own kernels, and an
 * explicit model.attention=cudnn there is an input error (this is reached
 * before any training, also when train.device=auto found no GPU). */
static void setup_attention(Run *r) {
    const LtConfig *c = r->cfg;
    const int hd = c->model.hidden_size / c->model.num_attention_heads;
    if (r->be->device_id < 0) {
        const LtAttnEnv env = {.want = c->model.attention,
                               .deterministic = c->model.attention_deterministic,
                               .bf16 = c->train.precision == LT_PREC_BF16,
                               .head_dim = hd};
        if (lt_attn_resolve(&env, &r->attn)) lt_input_error("%s", r->attn.reason);
        return;
    }
    if (lt_cuda_attention_configure(r->be, c->model.attention, c->model.attention_deterministic,
                                    hd, &r->attn))
        lt_input_error("%s", r->attn.reason);
}

static LtTokenFile *open_tokens(const char *key, const char *path, int vocab) {
    char err[1024];
    LtTokenFile *f = lt_tokens_open(path, vocab, err, sizeof err);
    if (!f) lt_input_error("%s: %s", key, err);
    return f;
}

/* 1 when two ranks anywhere use the same GPU: every rank's device UUID is
 * gathered over the world (CUDA_VISIBLE_DEVICES may number one GPU
 * differently in each process, or show each rank only its own). */
static int32_t ranks_share_gpu(const Run *r) {
    const int world = r->world->world;
    if (world == 1) return 0;
    unsigned char *all = lt_calloc((size_t)world * 16);
    unsigned char *mine = all + (size_t)r->world->rank * 16;
    if (lt_cuda_device_uuid(r->be->device_id, mine))
        lt_fatal("cannot read the UUID of CUDA device %d", r->be->device_id);
    LtComm *wc = lt_comm_world("world");
    lt_comm_all_gather(wc, mine, all, 16, LT_COMM_U8);
    lt_comm_free(wc);
    int32_t shared = 0;
    for (int a = 0; a < world && !shared; a++)
        for (int b = a + 1; b < world && !shared; b++)
            shared = memcmp(all + (size_t)a * 16, all + (size_t)b * 16, 16) == 0;
    free(all);
    return shared;
}

/* comm.backend -> the library of the groups that move the CUDA backend's
 * device tensors (dp, tp, pp, embedding). auto: NCCL when no two ranks use
 * the same GPU (ranks_share_gpu) and NCCL is compiled in, else MPI staged
 * through pinned host memory. nccl on GPUs shared by several ranks is an
 * input error (NCCL refuses two ranks on one device). The CPU backend always
 * uses MPI on host memory; comm.backend=nccl there is an input error with
 * more than one rank. */
static void resolve_comm(Run *r) {
    const LtConfig *c = r->cfg;
    const LtWorld *w = r->world;
    LtCommBackend want = c->comm.backend;
    if (r->be->device_id < 0) {
        if (want == LT_COMM_NCCL && w->world > 1)
            lt_input_error("comm.backend=nccl: NCCL moves GPU buffers, but this run uses the "
                           "CPU backend (train.device=%s); use comm.backend=mpi or auto",
                           lt_device_name(c->train.device));
        r->comm_device = 0;
        r->comm_lib = LT_COMM_LIB_MPI;
        return;
    }
    r->comm_device = 1;
    int32_t shared = ranks_share_gpu(r);
    if (want == LT_COMM_MPI) {
        r->comm_lib = LT_COMM_LIB_MPI;
        r->comm_why = "comm.backend=mpi: staged through pinned host memory";
    } else if (want == LT_COMM_NCCL) {
        if (!lt_comm_nccl_compiled())
            lt_input_error("comm.backend=nccl: this binary was built without NCCL");
        if (shared)
            lt_input_error("comm.backend=nccl: some ranks share a GPU (%d ranks on this node, "
                           "%d visible GPU(s)); NCCL needs one GPU per rank (use "
                           "comm.backend=mpi or auto, which stage through host memory)",
                           w->local_size, lt_cuda_device_count());
        r->comm_lib = LT_COMM_LIB_NCCL;
        r->comm_why = "comm.backend=nccl";
    } else if (!shared && lt_comm_nccl_compiled()) {
        r->comm_lib = LT_COMM_LIB_NCCL;
        r->comm_why = "comm.backend=auto: one GPU per rank";
    } else {
        r->comm_lib = LT_COMM_LIB_MPI;
        r->comm_why = shared ? "comm.backend=auto: ranks share a GPU, staged through pinned host "
                               "memory"
                             : "comm.backend=auto: no NCCL in this build, staged through pinned "
                               "host memory";
    }
}

/* Rank coordinates (the groups follow once the backend exists). */
static void setup_topology(Run *r) {
    const LtConfig *c = r->cfg;
    char err[512];
    if (lt_topology_init(&r->topo, r->world->world, c->parallel.tensor_model_parallel_size,
                         c->parallel.pipeline_model_parallel_size, 0, err, sizeof err))
        lt_input_error("%s", err);
    if (lt_topology_coords(&r->topo, r->world->rank, &r->coords))
        lt_fatal("rank %d outside the topology", r->world->rank);
}

/* The data- and tensor-parallel groups: host MPI groups with the CPU backend
 * (as always), device-buffer groups on the resolved library with CUDA. Host
 * scalars and arrays go through lt_comm_host() of these. */
static void setup_groups(Run *r) {
    resolve_comm(r);
    LtCommOptions opt = {.lib = r->comm_lib, .device = 1, .be = r->be};
    const LtCommOptions *o = r->comm_device ? &opt : NULL;
    int *members = lt_malloc(sizeof(int) * (size_t)r->world->world);
    int n = lt_topology_group(&r->topo, r->world->rank, LT_GROUP_DP, members);
    r->dp = lt_comm_split_members_ex(members, n, "dp", o);
    n = lt_topology_group(&r->topo, r->world->rank, LT_GROUP_TP, members);
    r->tp = lt_comm_split_members_ex(members, n, "tp", o);
    /* stage-to-stage messages on the same library: the executor batches them
     * as NCCL needs (schedules are proven deadlock-free under its semantics) */
    n = lt_topology_group(&r->topo, r->world->rank, LT_GROUP_PP, members);
    r->pp = lt_comm_split_members_ex(members, n, "pp", o);
    /* the tied embedding's two halves (first and last stage); an untied LM head
     * has nothing to share */
    if (r->topo.pp > 1 && !r->cfg->model.untie_embeddings_and_output_weights) {
        /* middle stages get a non-member handle */
        n = lt_topology_group(&r->topo, r->world->rank, LT_GROUP_EMBEDDING, members);
        r->emb = lt_comm_split_members_ex(members, n, "embedding", o);
    }
    free(members);
}

/* The step directory checkpoint.load names: 1 and stepdir, or 0 for a fresh
 * start. `auto` takes the newest complete checkpoint in checkpoint.dir, or
 * starts fresh when there is none yet (a job script that resubmits itself). */
static int resolve_load(const LtConfig *cfg, char *stepdir, size_t len) {
    char err[1024];
    const char *load = cfg->checkpoint.load;
    if (!load[0]) return 0;
    if (strcmp(load, "auto") == 0) {
        const int found = lt_ckpt_find_latest(cfg->checkpoint.dir, stepdir, len, err, sizeof err);
        if (found < 0) lt_input_error("checkpoint.load=auto: %s", err);
        if (!found)
            lt_log("checkpoint.load=auto: no checkpoint in %s yet: starting fresh\n",
                   cfg->checkpoint.dir);
        return found;
    }
    if (lt_ckpt_resolve(load, stepdir, len, err, sizeof err))
        lt_input_error("checkpoint.load: %s", err);
    return 1;
}

/* Load a checkpoint's global tensors into st (arrays of r->global.total).
 * The padded vocabulary depends on the TP size the checkpoint was written
 * with; when it differs from this run's, the checkpoint is read with its own
 * table and the rows both have are copied (padding rows are zero). */
static void load_global_state(Run *r, const char *stepdir, LtCkptState *st, LtCkptMeta *meta) {
    char err[1024];
    LtConfig *saved = lt_calloc(sizeof *saved);
    if (lt_ckpt_load_config(stepdir, saved, err, sizeof err))
        lt_input_error("checkpoint.load: %s", err);
    int saved_world = saved->parallel.tensor_model_parallel_size *
                      saved->parallel.pipeline_model_parallel_size;
    if (lt_config_validate(saved, saved_world, err, sizeof err))
        lt_input_error("checkpoint.load: config.yaml of %s: %s", stepdir, err);
    int padded = saved->model.padded_vocab_size;
    free(saved);
    if (padded == r->global.dims.padded_vocab) {
        if (lt_ckpt_load(stepdir, &r->global, st, meta, err, sizeof err))
            lt_input_error("checkpoint.load: %s", err);
        return;
    }
    LtModelDims d = r->global.dims;
    d.padded_vocab = padded;
    LtParamTable ct;
    lt_params_build(&ct, &d);
    size_t bytes = ct.total * sizeof(float);
    LtCkptState cs = {lt_malloc(bytes), st->m ? lt_malloc(bytes) : NULL,
                      st->v ? lt_malloc(bytes) : NULL};
    if (lt_ckpt_load(stepdir, &ct, &cs, meta, err, sizeof err))
        lt_input_error("checkpoint.load: %s", err);
    float *src[3] = {cs.master, cs.m, cs.v}, *dst[3] = {st->master, st->m, st->v};
    for (int k = 0; k < 3; k++) {
        if (!src[k]) continue;
        if (lt_params_copy_rows(&ct, src[k], &r->global, dst[k], err, sizeof err))
            lt_input_error("checkpoint.load: %s: %s", stepdir, err);
        free(src[k]);
    }
    lt_log("checkpoint vocabulary padded to %d rows, this layout pads to %d: rows re-padded\n",
           padded, r->global.dims.padded_vocab);
    lt_params_free(&ct);
}

/* Build backend, model, optimizer; restore a checkpoint when configured. */
static void run_setup(Run *r, LtConfig *cfg, const LtWorld *w, int need_optimizer) {
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->world = w;
    setup_topology(r);
    lt_world_collective_errors(w, 0); /* from here on each rank reports its own errors */
    r->be = make_backend(cfg, w);
    setup_attention(r);
    setup_groups(r);
    LtModelDims d = lt_dims_from_config(cfg);
    LtStagePlace place = {r->topo.pp, r->coords.pp, cfg->parallel.virtual_pipeline_model_parallel_size};
    r->micro_batches = cfg->train.global_batch_size / (cfg->train.micro_batch_size * r->topo.dp);
    /* training keeps the schedule's peak of micro batches in flight; forward
     * only (eval, sample) needs one slot per chunk */
    int slots = need_optimizer ? lt_pipeline_slots(place.pp, place.vpp, r->micro_batches, place.pp_rank)
                               : place.vpp;
    if (slots < 1) lt_fatal("no valid pipeline schedule for pp %d, vpp %d, %d micro batches", place.pp,
                            place.vpp, r->micro_batches);
    LtParamTable sizing;
    lt_params_build_stage(&sizing, &d, r->topo.tp, r->coords.tp, place);
    LtModelOptions mo = {.flat = lt_optim_flat_size(&sizing, r->topo.dp),
                         .place = place,
                         .slots = slots,
                         .grad_buckets = need_optimizer && cfg->optimizer.zero_stage == 2 &&
                                         r->topo.dp > 1,
                         .tp = r->tp,
                         .sequence_parallel = cfg->parallel.sequence_parallel,
                         .lm_head_chunk = cfg->train.lm_head_chunk,
                         .recompute = cfg->train.recompute == LT_RECOMPUTE_FULL
                                          ? LT_MODEL_RECOMPUTE_FULL
                                          : cfg->train.recompute == LT_RECOMPUTE_SELECTIVE
                                                ? LT_MODEL_RECOMPUTE_SELECTIVE
                                                : LT_MODEL_RECOMPUTE_NONE};
    lt_params_free(&sizing);
    lt_params_build(&r->global, &d);
    r->model = lt_model_create(r->be, &d, cfg->train.micro_batch_size, cfg->model.seq_length, &mo);
    r->pipe = lt_pipeline_create(r->model, r->pp, need_optimizer ? r->micro_batches : 0);
    const LtParamTable *t = &r->model->table;
    float *host = lt_malloc(t->total * sizeof(float));
    LtCkptState st = {lt_malloc(r->global.total * sizeof(float)), NULL, NULL};
    LtCkptMeta meta = {0};
    char stepdir[LT_PATH_MAX + 64];
    const int resume = resolve_load(cfg, stepdir, sizeof stepdir);
    if (resume) {
        /* a weights-only checkpoint (lattice import, or saved without moments)
         * starts the optimizer afresh: zero moments, no Adam step counted */
        char err[1024];
        if (lt_ckpt_read_meta(stepdir, &meta, err, sizeof err))
            lt_input_error("checkpoint.load: %s", err);
        if (need_optimizer && !meta.weights_only) {
            st.m = lt_malloc(r->global.total * sizeof(float));
            st.v = lt_malloc(r->global.total * sizeof(float));
        } else if (need_optimizer) {
            lt_log("checkpoint %s holds weights only: Adam starts from zero moments at step %ld\n",
                   stepdir, meta.step);
        }
        load_global_state(r, stepdir, &st, &meta);
        /* this rank's shards of the global tensors (in place: local <= global) */
        lt_params_from_global(t, host, &r->global, st.master);
        if (st.m) {
            float *tmp = lt_malloc(t->total * sizeof(float));
            lt_params_from_global(t, tmp, &r->global, st.m);
            memcpy(st.m, tmp, t->total * sizeof(float));
            lt_params_from_global(t, tmp, &r->global, st.v);
            memcpy(st.v, tmp, t->total * sizeof(float));
            free(tmp);
        }
        if (meta.seed != cfg->train.seed)
            lt_log("note: checkpoint was trained with train.seed=%llu, this run has %llu\n",
                   (unsigned long long)meta.seed, (unsigned long long)cfg->train.seed);
        r->start_step = meta.step;
    } else {
        lt_params_init(t, cfg->train.seed, host);
    }
    lt_model_set_params(r->model, host);
    if (need_optimizer) {
        r->opt = lt_optim_create(r->be, t, cfg, r->dp, r->model->flat, host);
        lt_optim_set_tp(r->opt, r->tp);
        lt_optim_set_pp(r->opt, r->pp);
        if (st.m) lt_optim_load_state(r->opt, host, st.m, st.v, meta.optimizer_steps);
        r->grads = lt_grads_create(r->model, r->opt, r->emb);
    }
    free(st.master);
    free(st.m);
    free(st.v);
    free(host);
    if (resume) lt_log("resumed from %s at step %ld\n", stepdir, r->start_step);
    r->peak_tflops = lt_peak_tflops(r->be, cfg, &r->peak_source);
}

static void run_teardown(Run *r) {
    if (r->loader) lt_loader_destroy(r->loader);
    if (r->train) lt_tokens_close(r->train);
    if (r->valid) lt_tokens_close(r->valid);
    lt_grads_destroy(r->grads);
    lt_optim_destroy(r->opt);
    lt_pipeline_destroy(r->pipe);
    lt_model_destroy(r->model);
    lt_comm_free(r->dp); /* before the backend: NCCL and pinned staging use its GPU */
    lt_comm_free(r->tp);
    lt_comm_free(r->pp);
    lt_comm_free(r->emb);
    lt_backend_destroy(r->be);
    lt_params_free(&r->global);
}

static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

static size_t engine_bytes(const Run *r) {
    const LtModelMemory *m = &r->model->mem;
    return m->params + m->grads + m->activations + m->workspace +
           (r->opt ? r->opt->state_bytes + r->opt->grad_bytes : 0);
}

/* Pipeline layout, schedule and each stage's activation memory (collective
 * over the pipeline group: every rank calls it). */
static void print_pipeline(const Run *r) {
    const LtModel *m = r->model;
    const int P = r->topo.pp, V = m->vpp;
    double mine[2] = {(double)m->mem.activations, (double)m->nslots};
    double *all = lt_malloc(sizeof(double) * 2 * (size_t)P);
    lt_comm_all_gather(lt_comm_host(r->pp), mine, all, 2, LT_COMM_F64);
    if (P > 1 || r->micro_batches > 1) {
        const int M = r->micro_batches;
        lt_log("pipeline   %d stage(s) x %d chunk(s) of %d layer(s), %d micro batches per step: "
               "%s, bubble (P-1)/(V*M+P-1) = %.1f%%\n",
               P, V, m->chunk_layers, M,
               P == 1 ? "gradient accumulation" : V > 1 ? "interleaved 1F1B" : "1F1B",
               100.0 * (P - 1) / (double)(V * M + P - 1));
    }
    if (P > 1) {
        char line[4096];
        int at = 0;
        for (int i = 0; i < P && at < (int)sizeof line - 64; i++)
            at += snprintf(line + at, sizeof line - (size_t)at,
                           "%s stage %d %.2f MiB (%.0f bytes, %d slots)", i ? "," : "", i,
                           mib((size_t)all[2 * i]), all[2 * i], (int)all[2 * i + 1]);
        lt_log("activations per pipeline rank:%s\n", line);
    }
    free(all);
}

static void print_summary(const Run *r) {
    const LtConfig *c = r->cfg;
    const LtModelMemory *m = &r->model->mem;
    lt_log("backend    %s (%s), precision %s\n", r->be->ops->name, r->be->device_name,
           lt_precision_name(c->train.precision));
    lt_log("world      %d rank(s): tp %d x pp %d x dp %d, ZeRO stage %d%s\n", r->world->world,
           r->topo.tp, r->topo.pp, r->topo.dp, c->optimizer.zero_stage,
           c->optimizer.zero_stage && r->topo.dp == 1 ? " (one data-parallel rank: nothing to shard)"
                                                      : "");
    char groups[48] = "";
    if (c->model.num_query_groups != c->model.num_attention_heads)
        snprintf(groups, sizeof groups, " over %d key/value groups", c->model.num_query_groups);
    lt_log("model      %s, %d layers, hidden %d, %d heads%s, ffn %d, seq %d, vocab %d (padded %d)%s: "
           "%.3f M parameters\n",
           lt_arch_name(c->model.arch), c->model.num_layers, c->model.hidden_size,
           c->model.num_attention_heads, groups, c->model.ffn_hidden_size, c->model.seq_length,
           c->model.vocab_size, c->model.padded_vocab_size,
           c->model.untie_embeddings_and_output_weights ? ", untied LM head" : "",
           (double)r->global.total / 1e6);
    lt_log("attention  %s (%s)\n", r->attn.cudnn ? "cudnn" : "lattice", r->attn.reason);
    print_pipeline(r);
    lt_log("memory     params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, activations %.1f "
           "MiB, workspace %.1f MiB, total %.1f MiB\n",
           mib(m->params), mib(m->grads + (r->opt ? r->opt->grad_bytes : 0)),
           mib(r->opt ? r->opt->state_bytes : 0), mib(m->activations), mib(m->workspace),
           mib(engine_bytes(r)));
    lt_log("memory bytes per rank: params=%zu grads=%zu optimizer=%zu activations=%zu "
           "workspace=%zu (parameter elements %zu)\n",
           m->params, m->grads + (r->opt ? r->opt->grad_bytes : 0),
           r->opt ? r->opt->state_bytes : 0, m->activations, m->workspace, r->model->table.total);
    LtPlanMemory pm; /* the planner's prediction for this rank, beside what it allocated */
    char perr[256];
    if (r->opt && lt_plan_memory(r->cfg, r->world->world, r->coords.pp, r->be->act_size, &pm, perr,
                                 sizeof perr) == 0) {
        const double alloc = (double)engine_bytes(r), pred = (double)lt_plan_total(&pm);
        lt_log("memory     planner's prediction (lattice plan): params %.1f MiB, grads %.1f MiB, "
               "optimizer %.1f MiB, activations %.1f MiB, workspace %.1f MiB, total %.1f MiB "
               "(%+.1f%% of the allocation)\n",
               mib(pm.params), mib(pm.grads), mib(pm.optimizer), mib(pm.activations),
               mib(pm.workspace), mib(lt_plan_total(&pm)), 100.0 * (pred - alloc) / alloc);
    }
    if (r->model->table.last_stage) {
        const LtModel *md = r->model;
        const size_t N = (size_t)md->B * (size_t)md->T, X = (size_t)md->xent_chunk;
        lt_log("lm head    %zu token(s) per chunk, %zu chunk(s) per micro batch: logits %.1f MiB "
               "(%zu x %d vocabulary rows)\n",
               X, (N + X - 1) / X, mib(lt_act_bytes(md->be, X * (size_t)md->vocab_local)), X,
               md->vocab_local);
    }
    if (r->comm_device && r->world->world > 1)
        lt_log("comm       %s on device buffers (%s)\n", lt_comm_lib_name(r->comm_lib),
               r->comm_why);
    lt_log("peak       %.3f TFLOP/s per device (%s)\n", r->peak_tflops, r->peak_source);
    if (r->train)
        lt_log("data train %s: %s format, %llu tokens, %llu samples\n", lt_tokens_path(r->train),
               lt_tokens_format(r->train), (unsigned long long)lt_tokens_count(r->train),
               (unsigned long long)lt_num_samples(lt_tokens_count(r->train), c->model.seq_length));
    if (r->valid)
        lt_log("data valid %s: %s format, %llu tokens, %llu samples\n", lt_tokens_path(r->valid),
               lt_tokens_format(r->valid), (unsigned long long)lt_tokens_count(r->valid),
               (unsigned long long)lt_num_samples(lt_tokens_count(r->valid), c->model.seq_length));
}

/* Split rows of S+1 tokens into inputs and targets (n rows). */
static void split_rows(const int32_t *rows, int n, int S, int32_t *in, int32_t *tgt) {
    for (int i = 0; i < n; i++) {
        memcpy(in + (size_t)i * S, rows + (size_t)i * (S + 1), (size_t)S * sizeof(int32_t));
        memcpy(tgt + (size_t)i * S, rows + (size_t)i * (S + 1) + 1, (size_t)S * sizeof(int32_t));
    }
}

/* ---- eval ------------------------------------------------------------------ */

/* Mean token loss over validation samples 0..n-1 (n = eval.iters * G, capped
 * to whole micro batches of what the file holds). */
static double evaluate(Run *r, long *samples_out) {
    const LtConfig *c = r->cfg;
    const int S = c->model.seq_length, mbs = c->train.micro_batch_size;
    enum { BLOCK = 16 }; /* micro batches per pipelined forward pass */
    uint64_t avail = lt_num_samples(lt_tokens_count(r->valid), S);
    uint64_t n = c->eval.samples > 0 ? (uint64_t)c->eval.samples
                                      : (uint64_t)c->eval.iters * (uint64_t)c->train.global_batch_size;
    if (n > avail) n = avail / (uint64_t)mbs * (uint64_t)mbs;
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
    return n ? sum / ((double)n * S) : NAN;
}

static void open_valid(Run *r) {
    const LtConfig *c = r->cfg;
    if (!c->data.valid_path[0]) return;
    r->valid = open_tokens("data.valid_path", c->data.valid_path, c->model.vocab_size);
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
}

/* ---- checkpoint ------------------------------------------------------------ */

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
static double ckpt_wait_async(void) {
    if (!g_save.w) return 0.0;
    const double t0 = lt_now();
    pthread_join(g_save.thread, NULL);
    const double waited = lt_now() - t0;
    ckpt_write_done(g_save.w, "written in the background in", waited);
    g_save.w = NULL;
    return waited;
}

static void save_checkpoint(Run *r, long step) {
    const LtConfig *c = r->cfg;
    const double t_enter = lt_now();
    double blocked = ckpt_wait_async(); /* at most one save in flight */
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

/* ---- train ----------------------------------------------------------------- */

/* The part of a step a CUDA graph replays (train.cuda_graph): zeroing, and
 * every micro batch's id upload (from the fixed page-locked in/tgt), forward
 * and backward. */
static void step_body(Run *r, const int32_t *in, const int32_t *tgt, double *stats_dev,
                      float grad_scale) {
    lt_model_zero_grads(r->model);
    lt_optim_zero_grad(r->opt);
    r->be->ops->zero(r->be, stats_dev, 2 * sizeof(double));
    lt_pipeline_train(r->pipe, in, tgt, grad_scale);
}

/* Run step_body, from the second step of the run on as a replay of the graph
 * captured then (the first step grows every scratch arena and workspace to
 * its size: no allocation may happen while capturing). */
static void run_step_body(Run *r, LtGraph **graph, int first, const int32_t *in,
                          const int32_t *tgt, double *stats_dev, float grad_scale) {
    LtBackend *be = r->be;
    if (!r->cfg->train.cuda_graph || first) {
        step_body(r, in, tgt, stats_dev, grad_scale);
        return;
    }
    if (!*graph) {
        char err[256];
        be->ops->capture_begin(be);
        step_body(r, in, tgt, stats_dev, grad_scale);
        *graph = be->ops->capture_end(be, err, sizeof err);
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
static void check_cuda_graph(const Run *r) {
    if (!r->cfg->train.cuda_graph) return;
    if (!r->be->ops->capture_begin)
        lt_input_error("train.cuda_graph needs the CUDA backend; this run uses the %s backend "
                       "(train.device)", r->be->ops->name);
    if (r->model->grads_ready)
        lt_input_error("train.cuda_graph: ZeRO stage 2 with %d data-parallel ranks reduces "
                       "gradients inside the step; use optimizer.zero_stage 0 or 1",
                       r->topo.dp);
}

/* Test hook: LT_INJECT_NONFINITE="KIND:STEP[:RANK][,...]" (KIND loss or grad,
 * STEP 1-based, RANK default 0; up to 4 entries) makes that rank's loss sum
 * NaN, or the first element of the reduced gradient it holds +Inf, at that
 * step (an extra host wait that step), for the tests of non-finite steps.
 * Unset in normal runs. */
#define INJECT_MAX 4
typedef struct {
    int kind[INJECT_MAX]; /* 0 none, 1 loss, 2 grad */
    long step[INJECT_MAX];
} Inject;

static Inject inject_parse(int rank) {
    Inject in = {{0}, {0}};
    const char *e = getenv("LT_INJECT_NONFINITE");
    for (int i = 0; e && *e && i < INJECT_MAX; i++) {
        char kind[8];
        long step = 0;
        int r = 0, n = sscanf(e, "%7[a-z]:%ld:%d", kind, &step, &r);
        if (n < 2 || step < 1 || (strcmp(kind, "loss") && strcmp(kind, "grad")))
            lt_input_error("LT_INJECT_NONFINITE='%s': expected loss|grad:STEP[:RANK][,...]", e);
        if (r == rank) in.kind[i] = strcmp(kind, "loss") ? 2 : 1, in.step[i] = step;
        e = strchr(e, ',');
        if (e) e++;
    }
    return in;
}

static void inject_nonfinite(Run *r, const Inject *in, long step, double *loss_dev) {
    LtBackend *be = r->be;
    for (int i = 0; i < INJECT_MAX; i++) {
        if (!in->kind[i] || step + 1 != in->step[i]) continue;
        if (in->kind[i] == 1) {
            const double nan = NAN;
            be->ops->upload(be, loss_dev, &nan, sizeof nan);
        } else {
            const float inf = INFINITY;
            be->ops->upload(be, lt_optim_grad_base(r->opt, r->model->grads), &inf, sizeof inf);
        }
    }
}

int lt_cmd_train(LtConfig *cfg, const LtWorld *w) {
    const double t_init_start = lt_now(); /* MLPerf: initialisation is timed apart */
    lt_mllog_open(cfg, w->rank);
    lt_mllog(LT_MLLOG_START, "init_start", "null", NULL);
    if (!cfg->data.train_path[0]) lt_input_error("data.train_path is not set");
    Run r;
    run_setup(&r, cfg, w, 1); /* layout checks first: they are collective */
    r.train = open_tokens("data.train_path", cfg->data.train_path, cfg->model.vocab_size);
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
    print_summary(&r);

    LtMetricsFile mf;
    lt_metrics_open(&mf, w->rank == 0 ? cfg->logging.metrics_file : NULL);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGUSR1, on_signal);

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
    Inject inject = inject_parse(w->rank);
    /* A step's samples are fetched at the end of the step before (timed with
     * the step they feed), so that bad data met mid-run is known to every rank
     * at the step boundary: all stop there, save the last good step, exit 2. */
    char data_err[1024] = "";
    int target_reached = 0;
    char mmeta[96]; /* MLPerf: samples_count (and epoch_num, the same count) of an event */
    lt_mllog_hyperparameters(cfg, r.micro_batches, r.start_step);
    lt_mllog(LT_MLLOG_END, "init_stop", "null", NULL);
    const double t_run_start = lt_now(); /* MLPerf's run start: training from here */
    lt_mllog(LT_MLLOG_START, "run_start", "null", NULL);
    snprintf(mmeta, sizeof mmeta, "\"samples_count\": %ld", step * (long)G);
    lt_mllog(LT_MLLOG_START, "block_start", "null", mmeta);
    double t_next = t_run_start;
    if (step < cfg->train.steps && lt_loader_get(r.loader, step, rows, err, sizeof err))
        lt_input_error("data.train_path: step %ld: %s", step + 1, err);

    for (; step < cfg->train.steps; step++) {
        double t0 = t_next;
        const unsigned long waits0 = be->host_waits;
        lt_watchdog_set_step(step + 1);
        split_rows(rows, local, S, in, tgt); /* micro batch j: rows j*mbs .. */
        run_step_body(&r, &graph, step == r.start_step, in, tgt, stats_dev,
                      (float)(1.0 / tokens_step));
        lt_grads_finalize(r.grads);
        inject_nonfinite(&r, &inject, step, stats_dev);
        lt_optim_grad_sumsq(r.opt, r.model->grads, stats_dev + 1, stats_dev);
        double lr = lt_lr_at(cfg, step);
        lt_optim_step(r.opt, r.model->params, r.model->grads, lr, 1.0,
                      lt_optim_clip_coef(r.opt, stats_dev + 1, cfg->optimizer.clip_grad));
        lt_grads_sync_tied(r.grads);
        /* the step's one host wait; its loss and gradient norm come back with it */
        be->ops->download_async(be, stats, stats_dev, 2 * sizeof(double));
        /* NCCL's collectives wait on the device: a dead peer shows up here */
        lt_watchdog_enter("the step's device synchronisation", NULL, -1);
        be->ops->synchronize(be);
        lt_watchdog_leave();
        if (be->host_waits - waits0 > max_waits) max_waits = be->host_waits - waits0;
        double loss_sum = stats[0]; /* (0 off the last pipeline stage) */
        lt_comm_all_reduce(lt_comm_host(r.dp), &loss_sum, 1, LT_COMM_F64, LT_COMM_SUM);
        lt_comm_all_reduce(lt_comm_host(r.pp), &loss_sum, 1, LT_COMM_F64, LT_COMM_SUM);
        double loss = loss_sum / tokens_step, norm = sqrt(stats[1]);
        if (!isfinite(norm)) { /* every rank skipped the update on the device (clip_coef) */
            lt_optim_skipped(r.opt);
            skipped++;
            lt_log("step %ld: loss %g, grad norm %g: not finite: update skipped (weights and "
                   "Adam moments unchanged; %d in a row, train.max_skipped_steps=%d)\n",
                   step + 1, loss, norm, skipped, cfg->train.max_skipped_steps);
        } else {
            skipped = 0;
        }
        double dt = lt_now() - t0;
        times[ntimes++] = dt;
        double tflops = flops_step / dt / 1e12 / w->world;
        double mfu = r.peak_tflops > 0 ? tflops / r.peak_tflops : 0.0;
        lt_metrics_train(&mf, step + 1, loss, lr, norm, tokens_step / dt, tflops, mfu, dt * 1e3);
        if ((step + 1) % cfg->logging.log_interval == 0 || step + 1 == cfg->train.steps)
            lt_log("step %6ld/%ld | loss %.4f | lr %.3e | grad norm %.4f | %.0f tok/s | %.3f "
                   "TFLOP/s | MFU %.1f%% | %.1f ms | mem %.1f MiB\n",
                   step + 1, cfg->train.steps, loss, lr, norm, tokens_step / dt, tflops,
                   100.0 * mfu, dt * 1e3, mib(engine_bytes(&r)));
        const long done = (step + 1) * (long)G, before = step * (long)G; /* samples trained */
        const long every = cfg->eval.interval_samples;
        if (r.valid && ((cfg->eval.interval > 0 && (step + 1) % cfg->eval.interval == 0) ||
                        (every > 0 && done / every > before / every))) {
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
        int32_t stop[2] = {(int32_t)g_stop_signal, 0}; /* signal, bad data */
        if (step + 1 < cfg->train.steps &&
            lt_loader_get(r.loader, step + 1, rows, data_err, sizeof data_err))
            stop[1] = 1;
        if (w->world > 1) { /* every rank stops after the same step: max over the world */
            lt_comm_all_reduce(lt_comm_host(r.dp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
            lt_comm_all_reduce(lt_comm_host(r.tp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
            lt_comm_all_reduce(lt_comm_host(r.pp), stop, 2, LT_COMM_I32, LT_COMM_MAX);
            g_stop_signal = stop[0];
        }
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
        if (g_stop_signal) {
            lt_log("received signal %d after step %ld: stopping\n", (int)g_stop_signal, step + 1);
            step++;
            exit_code = 128 + (int)g_stop_signal;
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
    ckpt_wait_async(); /* the end of training (or a stop) waits for the save in flight */
    lt_metrics_close(&mf);
    char merr[LT_PATH_MAX + 128];
    if (lt_metrics_status(&mf, merr, sizeof merr) && exit_code == 0) {
        lt_log("error: %s (training finished%s)\n", merr,
               cfg->checkpoint.dir[0] ? " and its checkpoint was saved" : "");
        exit_code = LT_EXIT_INPUT;
    }
    lt_model_set_loss_acc(r.model, NULL);
    if (graph) be->ops->graph_destroy(be, graph);
    free(rows);
    be->ops->host_free(be, in);
    be->ops->host_free(be, tgt);
    be->ops->host_free(be, stats);
    be->ops->free(be, stats_dev);
    free(times);
    run_teardown(&r);
    return exit_code;
}

/* ---- eval / sample ----------------------------------------------------------- */

int lt_cmd_eval(LtConfig *cfg, const LtWorld *w) {
    if (!cfg->data.valid_path[0]) lt_input_error("data.valid_path is not set (eval needs it)");
    Run r;
    run_setup(&r, cfg, w, 0);
    open_valid(&r);
    print_summary(&r);
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
    const int rc = lt_metrics_status(&mf, merr, sizeof merr) ? LT_EXIT_INPUT : 0;
    if (rc) lt_log("error: %s\n", merr);
    run_teardown(&r);
    return rc;
}

/* Draw from softmax(logits / temperature) restricted to the top_k largest. */
static int sample_token(float *logits, int V, double temperature, int top_k, double u) {
    float maxv = logits[0];
    for (int i = 1; i < V; i++) maxv = logits[i] > maxv ? logits[i] : maxv;
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) {
        /* threshold = k-th largest logit (simple selection, V is small enough) */
        float *tmp = lt_malloc((size_t)V * sizeof(float));
        memcpy(tmp, logits, (size_t)V * sizeof(float));
        for (int k = 0; k < top_k; k++) {
            int best = k;
            for (int i = k + 1; i < V; i++) best = tmp[i] > tmp[best] ? i : best;
            float x = tmp[k];
            tmp[k] = tmp[best];
            tmp[best] = x;
        }
        kth = tmp[top_k - 1];
        free(tmp);
    }
    double total = 0.0;
    for (int i = 0; i < V; i++) total += logits[i] >= kth ? exp((logits[i] - maxv) / temperature) : 0.0;
    double target = u * total, acc = 0.0;
    for (int i = 0; i < V; i++) {
        if (logits[i] < kth) continue;
        acc += exp((logits[i] - maxv) / temperature);
        if (acc >= target) return i;
    }
    return V - 1;
}

/* The first tokens of the validation (else training) data into seq: n of
 * them, at most `max` (0 when there is no data). */
static int read_prompt(const LtConfig *cfg, int32_t *seq, int max) {
    const char *ppath = cfg->data.valid_path[0] ? cfg->data.valid_path : cfg->data.train_path;
    if (!ppath[0] || max <= 0) return 0;
    LtTokenFile *f = open_tokens(cfg->data.valid_path[0] ? "data.valid_path" : "data.train_path",
                                 ppath, cfg->model.vocab_size);
    int n = max;
    if ((uint64_t)n > lt_tokens_count(f)) n = (int)lt_tokens_count(f);
    char err[1024];
    if (n > 0 && lt_tokens_read(f, 0, (uint64_t)n, seq, err, sizeof err))
        lt_input_error("%s: %s", ppath, err);
    lt_tokens_close(f);
    return n;
}

int lt_cmd_sample(LtConfig *cfg, const LtWorld *w) {
    if (w->world != 1) lt_input_error("sample runs as a single process (got %d ranks)", w->world);
    cfg->train.micro_batch_size = 1;
    Run r;
    run_setup(&r, cfg, w, 0);
    if (!cfg->checkpoint.load[0])
        lt_log("note: checkpoint.load is not set: sampling from the untrained initial model\n");
    const int S = cfg->model.seq_length, V = cfg->model.vocab_size;
    int total = cfg->sample.num_tokens;
    int32_t *seq = lt_calloc((size_t)(total + S) * sizeof(int32_t));
    /* prompt: the first tokens of the validation (else training) data */
    int plen = read_prompt(cfg, seq, S / 8 < 8 ? (S < 8 ? S - 1 : S / 8) : 8);
    if (plen == 0) plen = 1; /* token 0 as the prompt */
    float *logits = lt_malloc((size_t)V * sizeof(float));
    int len = plen;
    for (int i = 0; i < total; i++) {
        int ctx = len < S ? len : S;
        lt_model_next_logits(r.model, seq + len - ctx, ctx, logits);
        double u = lt_uniform_at(cfg->sample.seed, 0x5a3b1e, (uint64_t)i);
        seq[len++] = sample_token(logits, V, cfg->sample.temperature, cfg->sample.top_k, u);
    }
    for (int i = 0; i < len; i++) printf(i ? " %d" : "%d", seq[i]);
    printf("\n");
    fflush(stdout);
    free(logits);
    free(seq);
    run_teardown(&r);
    return 0;
}

int lt_cmd_logits(LtConfig *cfg, const LtWorld *w) {
    if (w->world != 1) lt_input_error("logits runs as a single process (got %d ranks)", w->world);
    cfg->train.micro_batch_size = 1;
    Run r;
    run_setup(&r, cfg, w, 0);
    const int S = cfg->model.seq_length, V = cfg->model.vocab_size;
    int32_t *seq = lt_calloc((size_t)S * sizeof(int32_t));
    const int n = read_prompt(cfg, seq, S);
    if (n == 0) lt_input_error("logits: data.valid_path or data.train_path must hold tokens");
    float *logits = lt_malloc((size_t)V * sizeof(float));
    printf("tokens");
    for (int i = 0; i < n; i++) printf(" %d", seq[i]);
    printf("\n");
    for (int len = 1; len <= n; len++) { /* the prediction after each prefix */
        lt_model_next_logits(r.model, seq, len, logits);
        for (int v = 0; v < V; v++) printf(v ? " %.9g" : "%.9g", logits[v]);
        printf("\n");
    }
    fflush(stdout);
    free(logits);
    free(seq);
    run_teardown(&r);
    return 0;
}
