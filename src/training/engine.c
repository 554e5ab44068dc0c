/* engine.c - setting up and tearing down a rank's engine, and its start-up
 * summary (see engine.h). */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_state.h"
#include "common.h"
#include "metrics.h"
#include "plan.h"
#include "trace_gather.h"
#include "trace.h"

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
static void setup_attention(LtRun *r) {
    const LtConfig *c = r->cfg;
    const int hd = c->model.kv_channels;
    if (r->be->device_id < 0) {
        const LtAttnEnv env = {.want = c->model.attention,
                               .deterministic = c->model.attention_deterministic,
                               .bf16 = c->train.precision == LT_PREC_BF16,
                               .head_dim = hd,
                               .softmax_type = c->model.softmax_type};
        if (lt_attn_resolve(&env, &r->attn)) lt_input_error("%s", r->attn.reason);
        return;
    }
    if (lt_cuda_attention_configure(r->be, c->model.attention, c->model.attention_deterministic,
                                    hd, c->model.softmax_type, &r->attn))
        lt_input_error("%s", r->attn.reason);
}

/* The summary's lines for the datasets of b (role "train" or "valid"):
 * with more than one, a heading ending in extra; then each dataset's
 * weight, format, tokens, samples and note[d] (what the run reads of it). */
static void log_datasets(const char *role, const LtBlend *b, int S, const char *extra,
                         char note[][48]) {
    if (b->n > 1)
        lt_log("data %s blend of %d datasets (Megatron's BlendedDataset order; weights "
               "normalised)%s\n", role, b->n, extra);
    for (int d = 0; d < b->n; d++) {
        const uint64_t ntok = lt_blend_tokens(b, d);
        char share[48] = "";
        if (b->n > 1) snprintf(share, sizeof share, "weight %.4g, ", b->weight[d]);
        lt_log("data %s %s%s: %s%s format, %llu tokens, %llu samples, %s\n", role,
               b->n > 1 ? "  " : "", lt_tokens_path(b->file[d]), share,
               lt_tokens_format(b->file[d]), (unsigned long long)ntok,
               (unsigned long long)lt_num_samples(ntok, S), note[d]);
    }
}

/* The summary's training data: each dataset with its share, size and how
 * many epochs of it the run's samples take. */
static void log_train_data(const LtRun *r) {
    const LtConfig *c = r->cfg;
    const LtBlend *b = r->train_blend;
    const double run_samples = (double)c->train.steps * (double)c->train.global_batch_size;
    char note[LT_BLEND_MAX][48];
    for (int d = 0; d < b->n; d++) {
        const uint64_t ns = lt_num_samples(lt_blend_tokens(b, d), c->model.seq_length);
        snprintf(note[d], sizeof note[d], "%.3g epochs in this run",
                 ns ? run_samples * b->weight[d] / (double)ns : 0.0);
    }
    log_datasets("train", b, c->model.seq_length,
                 c->data.split[0] ? ", each its data.split train part" : "", note);
}

/* The summary's validation data: each dataset with its share, size and how
 * many of its samples an evaluation reads. */
static void log_valid_data(const LtRun *r) {
    const LtBlend *b = r->valid_blend;
    uint64_t taken[LT_BLEND_MAX];
    lt_blend_order_taken(r->valid_order, (uint64_t)r->eval_samples, taken);
    char note[LT_BLEND_MAX][48], extra[96];
    for (int d = 0; d < b->n; d++)
        snprintf(note[d], sizeof note[d], "%llu per evaluation", (unsigned long long)taken[d]);
    snprintf(extra, sizeof extra, "%s, %ld samples per evaluation",
             !r->cfg->data.split[0]              ? ""
             : r->cfg->eval.split == LT_SPLIT_TEST ? ", each its data.split test part"
                                                   : ", each its data.split validation part",
             r->eval_samples);
    log_datasets("valid", b, r->cfg->model.seq_length, extra, note);
}

LtTokenFile *lt_run_open_tokens(const char *key, const char *path, int vocab) {
    char err[1024];
    LtTokenFile *f = lt_tokens_open(path, vocab, err, sizeof err);
    if (!f) lt_input_error("%s: %s", key, err);
    return f;
}

/* 1 when two ranks anywhere use the same GPU: every rank's device UUID is
 * gathered over the world (CUDA_VISIBLE_DEVICES may number one GPU
 * differently in each process, or show each rank only its own). */
static int32_t ranks_share_gpu(const LtRun *r) {
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
static void resolve_comm(LtRun *r) {
    const LtConfig *c = r->cfg;
    const LtWorld *w = r->world;
    LtCommBackend want = c->comm.backend;
    if (r->be->device_id < 0) {
        if (want == LT_COMM_NCCL && w->world > 1)
            lt_input_error("comm.backend=nccl: NCCL moves GPU buffers, but this run uses the "
                           "CPU backend (train.device=%s); use comm.backend=mpi or auto",
                           lt_device_name(c->train.device));
        /* (with LT_CPU_DEVICE_TIMERS, a test hook: device groups of host memory, so
         * that the step is timed as on a GPU, communication included) */
        r->comm_device = r->be->ops->timer_create != NULL;
        r->comm_lib = LT_COMM_LIB_MPI;
        r->comm_why = "the CPU backend's device timers (LT_CPU_DEVICE_TIMERS): host memory";
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
static void setup_topology(LtRun *r) {
    const LtConfig *c = r->cfg;
    char err[512];
    if (lt_topology_init(&r->topo, r->world->world, c->parallel.tensor_model_parallel_size,
                         c->parallel.pipeline_model_parallel_size, 0, err, sizeof err) ||
        lt_topology_set_experts(&r->topo, c->parallel.expert_model_parallel_size,
                                c->parallel.expert_tensor_parallel_size, err, sizeof err))
        lt_input_error("%s", err);
    if (lt_topology_coords(&r->topo, r->world->rank, &r->coords))
        lt_fatal("rank %d outside the topology", r->world->rank);
}

/* The data- and tensor-parallel groups: host MPI groups with the CPU backend
 * (as always), device-buffer groups on the resolved library with CUDA. Host
 * scalars and arrays go through lt_comm_host() of these. */
static void setup_groups(LtRun *r) {
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
    /* expert (tensor) parallelism folded into the stage's TP x DP ranks (topology.h) */
    if (r->topo.ep > 1) {
        n = lt_topology_group(&r->topo, r->world->rank, LT_GROUP_EP, members);
        r->ep = lt_comm_split_members_ex(members, n, "ep", o);
    }
    if (r->topo.etp > 1) {
        n = lt_topology_group(&r->topo, r->world->rank, LT_GROUP_ETP, members);
        r->etp = lt_comm_split_members_ex(members, n, "etp", o);
    }
    if (r->topo.ep > 1 || r->topo.etp > 1) {
        n = lt_topology_group(&r->topo, r->world->rank, LT_GROUP_EDP, members);
        r->edp = lt_comm_split_members_ex(members, n, "edp", o);
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

/* Load this rank's part of a checkpoint: its parameters into master
 * (t->total) and, when m/v are given, its ZeRO shard of the Adam moments. No
 * rank reads or holds more than that plus the I/O buffer and the state files'
 * record tables (counted by lt_ckpt_mem_*; the first rank's figures logged). */
static void load_local_state(LtRun *r, const LtParamTable *t, const char *stepdir, float *master,
                             float *m, float *v, size_t lo, size_t n, LtCkptMeta *meta) {
    char err[1024];
    const size_t io = (size_t)r->cfg->checkpoint.io_buffer_mib << 20;
    lt_ckpt_mem_reset_peak();
    const size_t base = lt_ckpt_mem_peak();
    const double t0 = lt_now();
    if (lt_ckpt_load_local(stepdir, t, master, lo, lo + n, m, v, io, meta, err, sizeof err))
        lt_input_error("checkpoint.load: %s", err);
    if (meta->padded_vocab && meta->padded_vocab != t->dims.padded_vocab)
        lt_log("checkpoint vocabulary padded to %d rows, this layout pads to %d: rows re-padded\n",
               meta->padded_vocab, t->dims.padded_vocab);
    const size_t own = sizeof(float) * (t->total + (m ? 2 * n : 0));
    lt_log("checkpoint load: %.2f s; host memory of the first rank: its state %zu bytes + "
           "checkpoint buffers peak %zu bytes (I/O buffer %zu); the whole model's state is %zu "
           "bytes\n",
               lt_now() - t0, own, lt_ckpt_mem_peak() - base, io,
               sizeof(float) * r->global.total * (m ? 3 : 1));
}

/* The planner's device for this run, into dev: the figures of the
 * calibration file LT_PLAN_CALIBRATION names, else the row of this GPU
 * (h100, h200, a100) or the one LT_PLAN_DEVICE names (a name, or "none");
 * none on the CPU unless named. A CPU device's rates are scaled to this
 * run's threads per rank as lattice plan scales them. 0, or -1 (none; a bad
 * name or file is warned about). */
static int plan_device(const LtRun *r, LtPlanDevice *dev) {
    const char *cal = getenv("LT_PLAN_CALIBRATION"), *env = getenv("LT_PLAN_DEVICE");
    char name[32] = "", err[512];
    if (cal && cal[0]) {
        if (lt_plan_calibration_load(cal, r->cfg->train.precision, dev, err, sizeof err)) {
            lt_log("warning: LT_PLAN_CALIBRATION: %s\n", err);
            return -1;
        }
    } else {
        if (env && env[0]) snprintf(name, sizeof name, "%s", strcmp(env, "none") ? env : "");
        else if (r->be->device_name) lt_plan_device_match(r->be->device_name, name, sizeof name);
        if (!name[0]) return -1;
        if (lt_plan_device(name, dev)) {
            lt_log("warning: LT_PLAN_DEVICE=%s: no such planner device (known: %s)\n", name,
                   lt_plan_device_names());
            return -1;
        }
    }
    /* the threads make_backend gave each rank, at most its share of the cores */
    const double share = (double)sysconf(_SC_NPROCESSORS_ONLN) /
                         (r->world->local_size > 0 ? r->world->local_size : 1);
    const double threads = r->cfg->train.threads > 0 ? r->cfg->train.threads
                                                      : fmax(1.0, floor(share));
    lt_plan_device_scale_threads(dev, fmin(threads, share));
    return 0;
}

/* The planner's step time for this run's layout at expert load moe_load on
 * the device plan_device picks (its row's name into name, when given): 0, or
 * -1 where there is none. */
static int plan_at(const LtRun *r, double moe_load, LtPlanStep *out, char name[32]) {
    LtPlanDevice dev;
    char err[256];
    if (plan_device(r, &dev) ||
        lt_plan_step(r->cfg, r->world->world, r->world->local_size, &dev, r->be->act_size,
                     lt_comm_lib(r->pp) == LT_COMM_LIB_MPI, moe_load, out, err, sizeof err))
        return -1;
    if (name) snprintf(name, 32, "%s", dev.name);
    return 0;
}

/* The prediction to print beside the measured step, with balanced experts. */
static void plan_step(LtRun *r) { plan_at(r, 1.0, &r->plan, r->plan_device); }

int lt_run_plan_at_load(const LtRun *r, double moe_load, LtPlanStep *out) {
    return r->plan_device[0] ? plan_at(r, moe_load, out, NULL) : -1;
}

/* Expert parallelism: the model's expert table (model.h) gets its values,
 * initial or from the checkpoint in stepdir (NULL: a fresh start; meta is
 * its), and with need_optimizer an optimizer over the expert-data-parallel
 * group at ZeRO stage min(optimizer.zero_stage, 1), attached to the model's
 * (optim.h), its state resumed too, with the overlap switches (grads.h:
 * lt_grads_set_experts). */
static void setup_experts(LtRun *r, int need_optimizer, const char *stepdir,
                          const LtCkptMeta *meta) {
    const LtParamTable *t = &r->model->etable;
    if (!t->n) return;
    LtConfig ecfg = *r->cfg;
    if (ecfg.optimizer.zero_stage > 1) ecfg.optimizer.zero_stage = 1;
    const int edp = lt_comm_size(r->edp), edp_rank = lt_comm_rank(r->edp);
    float *host = lt_malloc(t->total * sizeof(float)), *m = NULL, *v = NULL;
    size_t lo = 0, n = 0;
    lt_optim_held_range(t, ecfg.optimizer.zero_stage, edp, edp_rank, &lo, &n);
    if (stepdir) {
        LtCkptMeta emeta;
        if (need_optimizer && !meta->weights_only) {
            m = lt_malloc((n ? n : 1) * sizeof(float));
            v = lt_malloc((n ? n : 1) * sizeof(float));
        }
        load_local_state(r, t, stepdir, host, m, v, lo, n, &emeta);
    } else {
        lt_params_init(t, r->cfg->train.seed, host);
    }
    lt_model_set_expert_params(r->model, host);
    if (need_optimizer) {
        r->eopt = lt_optim_create(r->be, t, &ecfg, r->edp, r->model->eflat, host);
        lt_optim_set_ep(r->eopt, r->ep);
        lt_optim_set_tp(r->eopt, r->etp); /* proj.bias counted once over ETP */
        lt_optim_set_pp(r->eopt, r->pp);
        if (m) lt_optim_load_state(r->eopt, host, m, v, meta->optimizer_steps);
        lt_optim_attach_experts(r->opt, r->eopt, r->model->eparams, r->model->egrads);
        /* the overlap switches apply to the experts' group too: per-MoE-layer buckets */
        lt_optim_set_overlap(r->eopt, r->cfg->parallel.overlap_grad_reduce,
                             r->cfg->parallel.overlap_param_gather);
        lt_grads_set_experts(r->grads, r->eopt, (size_t)r->cfg->parallel.bucket_size);
    }
    free(m);
    free(v);
    free(host);
}

/* Build backend, model, optimizer; restore a checkpoint when configured. */
void lt_run_setup(LtRun *r, LtConfig *cfg, const LtWorld *w, int need_optimizer) {
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->world = w;
    setup_topology(r);
    lt_world_collective_errors(w, 0); /* from here on each rank reports its own errors */
    char process[96]; /* this rank's row in logging.trace's file */
    snprintf(process, sizeof process, "rank %d (tp %d, pp %d, dp %d)", w->rank, r->coords.tp,
             r->coords.pp, r->coords.dp);
    lt_trace_open(cfg->logging.trace, w->rank, w->world, process);
    r->be = make_backend(cfg, w);
    setup_attention(r);
    r->be->moe_gemm_per_expert = !cfg->model.moe_grouped_gemm;
    setup_groups(r);
    LtModelDims d = lt_dims_from_config(cfg);
    LtStagePlace place = {r->topo.pp, r->coords.pp, cfg->parallel.virtual_pipeline_model_parallel_size,
                          lt_config_layer_split(cfg)};
    r->micro_batches = cfg->train.global_batch_size / (cfg->train.micro_batch_size * r->topo.dp);
    /* training keeps the schedule's peak of micro batches in flight; forward
     * only (eval, sample) needs one slot per chunk */
    const int post_ahead = cfg->parallel.overlap_p2p_comm && lt_comm_lib(r->pp) == LT_COMM_LIB_MPI;
    int slots = need_optimizer ? lt_pipeline_slots(place.pp, place.vpp, r->micro_batches, place.pp_rank,
                                                   post_ahead)
                               : place.vpp;
    if (slots < 1) lt_fatal("no valid pipeline schedule for pp %d, vpp %d, %d micro batches", place.pp,
                            place.vpp, r->micro_batches);
    LtParamTable sizing, esizing = {0}; /* the model's tables, to size its buffers */
    if (r->edp)
        lt_params_build_split(&sizing, &esizing, &d, r->topo.tp, r->coords.tp, place, r->topo.ep,
                              r->ep ? lt_comm_rank(r->ep) : 0, r->topo.etp,
                              r->etp ? lt_comm_rank(r->etp) : 0);
    else
        lt_params_build_stage(&sizing, &d, r->topo.tp, r->coords.tp, place);
    LtModelOptions mo = {.flat = lt_optim_flat_size(&sizing, r->topo.dp),
                         .eflat = esizing.total ? lt_optim_flat_size(&esizing, lt_comm_size(r->edp))
                                                : 0,
                         .place = place,
                         .slots = slots,
                         .grad_buckets = need_optimizer && cfg->optimizer.zero_stage == 2 &&
                                         r->topo.dp > 1,
                         .tp = r->tp,
                         .ep = r->ep,
                         .etp = r->etp,
                         .sequence_parallel = cfg->parallel.sequence_parallel,
                         .tp_comm_overlap = cfg->parallel.tp_comm_overlap,
                         .lm_head_chunk = cfg->train.lm_head_chunk,
                         .recompute = cfg->train.recompute == LT_RECOMPUTE_FULL
                                          ? LT_MODEL_RECOMPUTE_FULL
                                          : cfg->train.recompute == LT_RECOMPUTE_SELECTIVE
                                                ? LT_MODEL_RECOMPUTE_SELECTIVE
                                                : LT_MODEL_RECOMPUTE_NONE};
    lt_params_free(&sizing);
    lt_params_free(&esizing);
    lt_params_build(&r->global, &d);
    r->model = lt_model_create(r->be, &d, cfg->train.micro_batch_size, cfg->model.seq_length, &mo);
    if (cfg->data.eod_mask_loss) lt_model_set_eod_mask(r->model, cfg->data.eod_token);
    lt_model_set_documents(r->model, cfg->data.eod_token, cfg->data.reset_position_ids,
                           cfg->data.reset_attention_mask);
    r->pipe = lt_pipeline_create(r->model, r->pp, need_optimizer ? r->micro_batches : 0);
    lt_pipeline_set_p2p_overlap(r->pipe, need_optimizer && cfg->parallel.overlap_p2p_comm);
    const LtParamTable *t = &r->model->table;
    float *host = lt_malloc(t->total * sizeof(float));
    float *m = NULL, *v = NULL;
    size_t held_lo = 0, held_n = 0; /* this rank's part of the optimizer state */
    lt_optim_held_range(t, cfg->optimizer.zero_stage, r->topo.dp, r->coords.dp, &held_lo, &held_n);
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
            m = lt_malloc((held_n ? held_n : 1) * sizeof(float));
            v = lt_malloc((held_n ? held_n : 1) * sizeof(float));
        } else if (need_optimizer) {
            lt_log("checkpoint %s holds weights only: Adam starts from zero moments at step %ld\n",
                   stepdir, meta.step);
        }
        load_local_state(r, t, stepdir, host, m, v, held_lo, held_n, &meta);
        if (meta.seed != cfg->train.seed)
            lt_log("note: checkpoint was trained with train.seed=%llu, this run has %llu\n",
                   (unsigned long long)meta.seed, (unsigned long long)cfg->train.seed);
        r->start_step = meta.step;
        r->resumed = 1;
        snprintf(r->resume_dir, sizeof r->resume_dir, "%s", stepdir);
    } else {
        lt_params_init(t, cfg->train.seed, host);
    }
    lt_model_set_params(r->model, host);
    if (need_optimizer) {
        r->opt = lt_optim_create(r->be, t, cfg, r->dp, r->model->flat, host);
        lt_optim_set_tp(r->opt, r->tp);
        lt_optim_set_pp(r->opt, r->pp);
        if (m) lt_optim_load_state(r->opt, host, m, v, meta.optimizer_steps);
        lt_optim_set_overlap(r->opt, cfg->parallel.overlap_grad_reduce,
                             cfg->parallel.overlap_param_gather);
        r->grads = lt_grads_create(r->model, r->opt, r->emb, (size_t)cfg->parallel.bucket_size);
    }
    free(m);
    free(v);
    free(host);
    setup_experts(r, need_optimizer, resume ? stepdir : NULL, &meta);
    if (resume) lt_log("resumed from %s at step %ld\n", stepdir, r->start_step);
    r->peak_tflops = lt_peak_tflops(r->be, cfg, &r->peak_source);
    if (need_optimizer) plan_step(r);
}

void lt_run_teardown(LtRun *r) {
    lt_trace_stop(NULL, 0); /* (written already by train and eval, which report failures) */
    if (r->loader) lt_loader_destroy(r->loader);
    if (r->train_blend) {
        lt_blend_close(r->train_blend);
        free(r->train_blend);
    }
    if (r->valid_blend) {
        lt_blend_close(r->valid_blend);
        free(r->valid_blend);
    }
    lt_blend_order_destroy(r->valid_order);
    lt_grads_destroy(r->grads);
    lt_optim_destroy(r->opt);
    lt_optim_destroy(r->eopt);
    lt_pipeline_destroy(r->pipe);
    lt_model_destroy(r->model);
    lt_comm_free(r->dp); /* before the backend: NCCL and pinned staging use its GPU */
    lt_comm_free(r->tp);
    lt_comm_free(r->pp);
    lt_comm_free(r->emb);
    lt_comm_free(r->ep);
    lt_comm_free(r->edp);
    lt_comm_free(r->etp);
    lt_backend_destroy(r->be);
    lt_params_free(&r->global);
}

/* What this rank allocated, in the planner's categories: grads include the
 * optimizer's shards; comm the pipeline's message pool and ZeRO-2's bucket
 * receive buffer and staging ring. */
static LtPlanMemory run_memory(const LtRun *r) {
    const LtModelMemory *m = &r->model->mem;
    const LtOptimizer *o = r->opt, *e = r->eopt;
    return (LtPlanMemory){
        .params = m->params,
        .grads = m->grads + (o ? o->grad_bytes : 0) + (e ? e->grad_bytes : 0),
        .optimizer = (o ? o->state_bytes : 0) + (e ? e->state_bytes : 0),
        .activations = m->activations,
        .workspace = m->workspace,
        .comm = (r->pipe ? lt_pipeline_message_bytes(r->pipe) : 0) + (o ? o->comm_bytes : 0)};
}

size_t lt_run_engine_bytes(const LtRun *r) {
    const LtPlanMemory m = run_memory(r);
    return lt_plan_total(&m);
}

/* "of N layer(s)" for an even split; else the layers of each stage's chunks,
 * e.g. "of layers 1+2, 2+2, 2+1 (embedding and loss counted as a layer)". */
static void chunk_layers_words(const LtRun *r, char *buf, size_t len) {
    const LtConfig *c = r->cfg;
    const LtLayerSplit s = lt_config_layer_split(c);
    const int L = c->model.num_layers, P = r->topo.pp, V = c->parallel.virtual_pipeline_model_parallel_size;
    if (lt_layer_split_even(&s)) {
        snprintf(buf, len, "of %d layer(s)", L / (P * V));
        return;
    }
    char words[384], how[96];
    snprintf(buf, len, "of layers %s (%s)", lt_layer_split_words(&s, L, P, V, words, sizeof words),
             lt_layer_split_describe(&s, how, sizeof how));
}

/* Pipeline layout, schedule and each stage's activation memory (collective
 * over the pipeline group: every rank calls it). */
static void print_pipeline(const LtRun *r) {
    const LtModel *m = r->model;
    const int P = r->topo.pp, V = m->vpp;
    double mine[2] = {(double)m->mem.activations, (double)m->nslots};
    double *all = lt_malloc(sizeof(double) * 2 * (size_t)P);
    lt_comm_all_gather(lt_comm_host(r->pp), mine, all, 2, LT_COMM_F64);
    if (P > 1 || r->micro_batches > 1) {
        const int M = r->micro_batches;
        char layers[512];
        chunk_layers_words(r, layers, sizeof layers);
        lt_log("pipeline   %d stage(s) x %d chunk(s) %s, %d micro batches per step: "
               "%s, bubble (P-1)/(V*M+P-1) = %.1f%%\n",
               P, V, layers, M,
               P == 1 ? "gradient accumulation" : V > 1 ? "interleaved 1F1B" : "1F1B",
               100.0 * (P - 1) / (double)(V * M + P - 1));
    }
    if (P > 1) {
        char line[4096];
        int at = 0;
        for (int i = 0; i < P && at < (int)sizeof line - 64; i++)
            at += snprintf(line + at, sizeof line - (size_t)at,
                           "%s stage %d %.2f MiB (%.0f bytes, %d slots)", i ? "," : "", i,
                           lt_mib((size_t)all[2 * i]), all[2 * i], (int)all[2 * i + 1]);
        lt_log("activations per pipeline rank:%s\n", line);
    }
    free(all);
}

void lt_run_print_summary(const LtRun *r) {
    const LtConfig *c = r->cfg;
    lt_log("backend    %s (%s), precision %s\n", r->be->ops->name, r->be->device_name,
           lt_precision_name(c->train.precision));
    lt_log("world      %d rank(s): tp %d x pp %d x dp %d, ZeRO stage %d%s\n", r->world->world,
           r->topo.tp, r->topo.pp, r->topo.dp, c->optimizer.zero_stage,
           c->optimizer.zero_stage && r->topo.dp == 1 ? " (one data-parallel rank: nothing to shard)"
                                                      : "");
    /* the experts' GEMMs on CUDA (the CPU runs one BLAS call per expert) */
    const char *gemms = r->be->device_id < 0 ? ""
                        : c->model.moe_grouped_gemm ? "; GEMMs grouped (model.moe_grouped_gemm)"
                        : "; one GEMM per expert (model.moe_grouped_gemm=false)";
    if (r->eopt) {
        const LtOptimizer *e = r->eopt;
        lt_log("experts    ep %d x etp %d, expert-data-parallel groups of %d rank(s), ZeRO stage "
               "%d; %d gradient bucket(s)%s%s%s\n",
               r->topo.ep, r->topo.etp, e->dp_size, e->zero_stage, e->nbuckets,
               e->overlap_grad ? ", reduced during the backward" : ", reduced after it",
               e->overlap_param ? ", gathered during the forward" : "", gemms);
    } else if (c->model.num_experts > 0 && gemms[0]) {
        lt_log("experts    %d per MoE layer, all on this rank%s\n", c->model.num_experts, gemms);
    }
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
    const LtPlanMemory mem = run_memory(r);
    lt_log("memory     params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, activations %.1f "
           "MiB, workspace %.1f MiB, comm %.1f MiB, total %.1f MiB\n",
           lt_mib(mem.params), lt_mib(mem.grads), lt_mib(mem.optimizer), lt_mib(mem.activations),
           lt_mib(mem.workspace), lt_mib(mem.comm), lt_mib(lt_plan_total(&mem)));
    lt_log("memory bytes per rank: params=%zu grads=%zu optimizer=%zu activations=%zu "
           "workspace=%zu comm=%zu (parameter elements %zu)\n",
           mem.params, mem.grads, mem.optimizer, mem.activations, mem.workspace, mem.comm,
           r->model->table.total + r->model->etable.total);
    LtPlanMemory pm; /* the planner's prediction for this rank, beside what it allocated */
    char perr[256];
    const int planned = r->opt && lt_plan_memory(r->cfg, r->world->world, r->coords.pp,
                                                 r->be->act_size,
                                                 lt_comm_lib(r->pp) == LT_COMM_LIB_MPI, &pm, perr,
                                                 sizeof perr) == 0;
    /* LT_PLAN_CHECK=1 (tests/run.sh sets it): every training run of the suite
     * asserts the planner's figure, in total and category by category, on the
     * ranks it predicts (tensor and data rank 0 of each stage); a layout the
     * planner cannot plan fails it too */
    const char *chk = getenv("LT_PLAN_CHECK");
    const int check = chk && chk[0] == '1';
    if (r->opt && !planned) {
        if (check) lt_fatal("LT_PLAN_CHECK: the planner cannot plan this layout: %s", perr);
        lt_log("memory     no planner's prediction: %s\n", perr);
    }
    if (planned) {
        const double alloc = (double)lt_plan_total(&mem), pred = (double)lt_plan_total(&pm);
        lt_log("memory     planner's prediction (lattice plan): params %.1f MiB, grads %.1f MiB, "
               "optimizer %.1f MiB, activations %.1f MiB, workspace %.1f MiB, comm %.1f MiB, "
               "total %.1f MiB (%+.1f%% of the allocation)\n",
               lt_mib(pm.params), lt_mib(pm.grads), lt_mib(pm.optimizer), lt_mib(pm.activations),
               lt_mib(pm.workspace), lt_mib(pm.comm), lt_mib(lt_plan_total(&pm)),
               100.0 * (pred - alloc) / alloc);
        if (check && r->coords.tp == 0 && r->coords.dp == 0) {
            if (fabs(pred - alloc) > 0.05 * alloc)
                lt_fatal("LT_PLAN_CHECK: the planner predicts %.0f bytes for pipeline stage %d, "
                         "the engine allocated %.0f (%+.1f%%; more than 5%% apart)",
                         pred, r->coords.pp, alloc, 100.0 * (pred - alloc) / alloc);
            const char *name[6] = {"params", "grads", "optimizer", "activations", "workspace",
                                   "comm"};
            const size_t want[6] = {pm.params, pm.grads, pm.optimizer, pm.activations,
                                    pm.workspace, pm.comm};
            const size_t got[6] = {mem.params, mem.grads, mem.optimizer, mem.activations,
                                   mem.workspace, mem.comm};
            for (int i = 0; i < 6; i++)
                if (fabs((double)want[i] - (double)got[i]) > 0.05 * (double)got[i])
                    lt_fatal("LT_PLAN_CHECK: the planner predicts %zu bytes of %s for pipeline "
                             "stage %d, the engine allocated %zu (more than 5%% apart)",
                             want[i], name[i], r->coords.pp, got[i]);
        }
    }
    if (r->plan_device[0]) {
        const LtPlanStep *ps = &r->plan;
        lt_log("plan       step predicted on %s (lattice plan --layout; overlap: %s): %.1f ms "
               "= compute %.1f + bubble %.1f + exposed communication tp %.1f, pp %.1f, dp %.1f, "
               "ep %.1f + optimizer %.1f\n",
               r->plan_device, ps->overlap, 1e3 * ps->step, 1e3 * ps->compute, 1e3 * ps->bubble,
               1e3 * ps->tp_comm, 1e3 * ps->pp_comm, 1e3 * ps->dp_comm, 1e3 * ps->ep_comm,
               1e3 * ps->optim);
        char ex[64] = "";
        if (ps->experts > 0)
            snprintf(ex, sizeof ex, " (of the gemm, the experts' and routers' %.1f)",
                     1e3 * ps->experts);
        if (ps->sync_wait > 0)
            lt_log("plan       of the exposed %s communication %.1f ms: the ranks' wait for each "
                   "other (sync_skew)\n", ps->tp_comm > 0 ? "tp" : "ep", 1e3 * ps->sync_wait);
        lt_log("plan       compute by part: gemm %.1f + memory-bound %.1f + attention %.1f (%s) "
               "+ loss head %.1f ms%s\n", 1e3 * ps->gemm, 1e3 * ps->membound,
               1e3 * ps->attention, ps->attention_impl, 1e3 * ps->loss_head, ex);
    }
    if (r->model->table.last_stage) {
        const LtModel *md = r->model;
        const size_t N = (size_t)md->B * (size_t)md->T, X = (size_t)md->xent_chunk;
        lt_log("lm head    %zu token(s) per chunk, %zu chunk(s) per micro batch: logits %.1f MiB "
               "(%zu x %d vocabulary rows)\n",
               X, (N + X - 1) / X, lt_mib(lt_act_bytes(md->be, X * (size_t)md->vocab_local)), X,
               md->vocab_local);
    }
    if (r->comm_device && r->world->world > 1)
        lt_log("comm       %s on device buffers (%s)\n", lt_comm_lib_name(r->comm_lib),
               r->comm_why);
    lt_log("peak       %.3f TFLOP/s per device (%s)\n", r->peak_tflops, r->peak_source);
    if (r->train_blend) log_train_data(r);
    if (r->valid_blend) log_valid_data(r);
}
