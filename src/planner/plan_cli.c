/* plan_cli.c - `lattice plan` (see plan.h): the layouts of a config for a
 * number of GPUs, each predicted by the planner's model (plan.c), ranked by
 * step time and printed as a table with its legend; --layout: the config's
 * own layout, stage by stage. --calibrate is plan_calibrate.c's command. */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "model.h"
#include "plan_device.h"
#include "plan_internal.h"

/* ---- the table's columns ------------------------------------------------- */

/* fitting first, then faster, then (within 0.1%) smaller */
static int cand_cmp(const void *x, const void *y) {
    const Cand *a = x, *b = y;
    if (a->fits != b->fits) return b->fits - a->fits;
    if (fabs(a->step - b->step) > 1e-3 * fmin(a->step, b->step))
        return (a->step > b->step) - (a->step < b->step);
    return (a->mem_gib > b->mem_gib) - (a->mem_gib < b->mem_gib);
}

static const char *binds(const Cand *k, double cap_gib) {
    if (!k->fits) return "memory (does not fit)";
    if (k->mem_gib > 0.9 * cap_gib) return "memory (>90% used)";
    double parts[4] = {k->bubble, k->tp_comm + k->pp_comm, k->dp_comm, k->ep_comm};
    const char *names[4] = {"pipeline bubble", "TP/PP communication", "DP communication",
                            "EP all-to-all"};
    int best = 0;
    for (int i = 1; i < 4; i++)
        if (parts[i] > parts[best]) best = i;
    return parts[best] > 0.05 * k->step ? names[best] : "compute";
}

/* The table's split column: the even split, which end counts as a layer (E:
 * the embedding, L: the loss), or the first / last stage's layers (f6, l2) */
static const char *split_name(const LtLayerSplit *s, char *buf, size_t len) {
    if (lt_layer_split_even(s)) return "even";
    if (s->embedding || s->loss) return s->embedding && s->loss ? "E+L" : s->embedding ? "E" : "L";
    if (s->first && s->last) snprintf(buf, len, "f%dl%d", s->first, s->last);
    else if (s->first) snprintf(buf, len, "f%d", s->first);
    else snprintf(buf, len, "l%d", s->last);
    return buf;
}

/* 1 when split puts the same layers in every chunk as one of tried (E+L at
 * pp 2 is the even split, a balancing last stage may be L's). */
static int same_split_tried(const LtLayerSplit *split, const LtLayerSplit *tried, int ntried, int L,
                            int pp, int vpp) {
    for (int i = 0; i < ntried; i++) {
        int same = 1;
        for (int v = 0; v < pp * vpp && same; v++)
            same = lt_layer_split_count(split, L, pp, vpp, v % pp, v / pp) ==
                   lt_layer_split_count(&tried[i], L, pp, vpp, v % pp, v / pp);
        if (same) return 1;
    }
    return 0;
}

/* The last stage's layer count (num_layers_in_last_pipeline_stage, the
 * middle stages sharing the rest) that best balances its layers and the LM
 * head against the other stages' layers, in forward FLOPs; 0 when that is
 * the even split or no such count is valid. */
static int balanced_last(const LtConfig *base, int tp, int pp, int vpp) {
    /* (the config's dims before validation resolves them: the vocabulary
     * padded as config_validate.c pads it at this tp) */
    LtModelDims dd = lt_dims_from_config(base), *d = &dd;
    if (!d->ffn) d->ffn = 4 * d->hidden;
    d->padded_vocab = (int)lt_config_padded_vocab(base, tp);
    const double head = 2.0 * d->hidden * (double)d->padded_vocab,
                 layer = lt_model_flops_per_sample(d, 0) / (3.0 * d->seq_len) / d->num_layers -
                         head / d->num_layers;
    int best = 0;
    double best_pace = 0.0;
    for (int last = vpp; last < d->num_layers; last += vpp) {
        const LtLayerSplit s = {.last = last};
        if (lt_layer_split_check(&s, d->num_layers, pp, vpp, NULL, 0)) continue;
        const double rest = (double)(d->num_layers - last) / (pp - 1);
        const double pace = fmax(last * layer + head, rest * layer);
        if (!best || pace < best_pace) best = last, best_pace = pace;
    }
    return best * pp == d->num_layers ? 0 : best;
}

/* The layer splits lattice plan tries for (tp, pp, vpp): the even one; with
 * a pipeline also the embedding and/or the loss counted as a layer and the
 * balancing last stage - those that cut the model, each distinct one once.
 * Returns their count (at most 5). */
static int pipeline_splits(const LtConfig *base, int tp, int pp, int vpp, LtLayerSplit out[5]) {
    const int L = base->model.num_layers;
    int n = 0;
    for (int sv = 0; sv < (pp > 1 ? 5 : 1); sv++) {
        LtLayerSplit split = {.embedding = sv & 1, .loss = sv >> 1 & 1};
        if (sv == 4) split = (LtLayerSplit){.last = balanced_last(base, tp, pp, vpp)};
        if ((sv == 4 && !split.last) || lt_layer_split_check(&split, L, pp, vpp, NULL, 0) ||
            same_split_tried(&split, out, n, L, pp, vpp))
            continue;
        out[n++] = split;
    }
    return n;
}

static const char *rc_name(int rc) {
    return rc == LT_RECOMPUTE_FULL ? "full" : rc == LT_RECOMPUTE_SELECTIVE ? "sel" : "none";
}

/* What the table's columns and marks mean: under the table and in --help. */
static void print_legend(FILE *f) {
    fprintf(f,
            "columns: tp, pp, dp: tensor-, pipeline-, data-parallel size; vpp: virtual pipeline\n"
            "  chunks per stage; mbs: micro batch size; rc: activation recomputation (none, sel:\n"
            "  selective, full); zero: ZeRO stage; sp: sequence parallelism (y/n); split: layers\n"
            "  per pipeline stage (even; E, L, E+L: the embedding, the loss counted as a layer;\n"
            "  fN, lN: N layers on the first, last stage); ep (mixture-of-experts models):\n"
            "  expert-parallel size, folded into tp x dp; params, grads, optim (optimizer state),\n"
            "  acts (activations), ws (workspace), comm (communication buffers), GiB (their sum):\n"
            "  GiB per GPU of the largest stage; step s: predicted seconds per step; tok/s: tokens\n"
            "  per second; MFU: model FLOPs utilisation; binds: what limits the step most;\n"
            "  *: the config's own layout (its dp: what the GPUs leave).\n");
}

/* 1 when k is the layout base asks for (its dp follows from the world; on
 * one data-parallel rank every ZeRO stage is 0). */
static int is_config_layout(const Cand *k, const LtConfig *base) {
    const LtLayerSplit s = lt_config_layer_split(base);
    return k->tp == base->parallel.tensor_model_parallel_size &&
           k->pp == base->parallel.pipeline_model_parallel_size &&
           k->vpp == base->parallel.virtual_pipeline_model_parallel_size &&
           k->mbs == base->train.micro_batch_size && k->rc == (int)base->train.recompute &&
           k->zero == (k->dp > 1 ? base->optimizer.zero_stage : 0) && k->sp == base->parallel.sequence_parallel &&
           k->ep == base->parallel.expert_model_parallel_size &&
           k->etp == base->parallel.expert_tensor_parallel_size &&
           !memcmp(&k->split, &s, sizeof s);
}

/* A row of the table; mark: the config's own layout (a leading '*'); moe:
 * with the ep column. */
static void print_row(const Cand *k, double cap, int mark, int moe) {
    const double gib = 1024.0 * 1024 * 1024;
    char split[32], ep[16] = "", row[512];
    if (moe) snprintf(ep, sizeof ep, " %3d %3d", k->ep, k->etp);
    snprintf(row, sizeof row,
             "%3d %3d %3d %3d %3d %4s %4d %2s %5s%s | %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f | "
             "%8.3f %9.0f %4.0f%% | %s%s",
             k->tp, k->pp, k->vpp, k->dp, k->mbs, rc_name(k->rc), k->zero, k->sp ? "y" : "n",
             split_name(&k->split, split, sizeof split), ep, k->mem.params / gib, k->mem.grads / gib,
             k->mem.optimizer / gib, k->mem.activations / gib, k->mem.workspace / gib,
             k->mem.comm / gib, k->mem_gib, k->step, k->tokens_per_s, 100.0 * k->mfu,
             binds(k, cap), k->simulated ? "" : " (bubble by formula)");
    if (mark && row[0] == ' ') row[0] = '*';
    printf("%s\n", row);
}

/* A layout's step time by part, in the terms of the run's breakdown. */
static void print_step(const LtPlanStep *p, const LtPlanDevice *g) {
    printf("step time (predicted on %s; overlap: %s): %.4f s = compute %.4f + bubble %.4f + "
           "exposed communication tp %.4f, pp %.4f, dp %.4f, ep %.4f + optimizer %.4f; hidden by "
           "overlap: tp %.4f, pp %.4f, dp %.4f; %.0f tokens/s, MFU %.1f%%\n",
           g->name, p->overlap, p->step, p->compute, p->bubble, p->tp_comm, p->pp_comm,
           p->dp_comm, p->ep_comm, p->optim, p->hidden_tp, p->hidden_pp, p->hidden_dp,
           p->tokens_per_s, 100.0 * p->mfu);
    printf("compute by part: gemm %.4f (%.2f GFLOP) + memory-bound %.4f (%.1f MB) + attention "
           "%.4f (%s, %.2f GFLOP) + loss head %.4f + optimizer %.4f + communication %.4f + "
           "bubble %.4f = %.4f s\n",
           p->gemm, p->gemm_flops / 1e9, p->membound, p->mem_bytes / 1e6, p->attention,
           p->attention_impl, p->attn_flops / 1e9, p->loss_head, p->optim,
           p->tp_comm + p->pp_comm + p->dp_comm + p->ep_comm, p->bubble, p->step);
    if (p->experts > 0)
        printf("of the gemm: the MoE layers' experts and routers %.4f s\n", p->experts);
    if (p->sync_wait > 0)
        printf("of the exposed %s communication %.4f s is the ranks' wait for each other at its "
               "collectives (sync_skew %.3f of the compute)\n", p->tp_comm > 0 ? "tp" : "ep",
               p->sync_wait, g->sync_skew);
    if (p->a2a_bytes > 0)
        printf("all-to-all (expert parallelism): %.1f MB per step leave the rank, %.4f s exposed\n",
               p->a2a_bytes / 1e6, p->ep_comm);
}

/* dev's rates for the threads per rank a CPU run of `world` ranks, at most
 * gpn per node, has (lt_plan_device_run_threads); says so when they differ
 * from the calibration's. */
static void scale_threads(LtPlanDevice *dev, const LtConfig *c, int world, int gpn, int say) {
    const int node = world < gpn ? world : gpn;
    const double t = lt_plan_device_run_threads(dev, c->train.threads, node);
    const int cal = dev->threads;
    const double f = lt_plan_device_scale_threads(dev, t);
    if (say && f != 1.0)
        printf("threads: %s was measured with %d per rank on %d rank(s) per node; %d rank(s) "
               "per node have %.2f each: its rates scaled by %.3f (linear in threads)\n",
               dev->name, cal, dev->ranks, node, t, f);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: lattice plan CONFIG.yaml [--gpus N] [--gpus-per-node G]\n"
            "                    [--gpu h100|h200|b200|a100|cpu] [--calibration FILE]\n"
            "                    [--gpu-mem-gib M] [--top K] [--show TPxPP[xVPP]]... [--layout]\n"
            "                    [--overlap config|all|none] [--samples N] [--moe-load F]\n"
            "                    [section.key=value ...]\n"
            "       lattice plan --calibrate [--device auto|cpu|cuda] [--precision fp32|bf16]\n"
            "                    [--seconds S] [--rounds R] [--out FILE]\n"
            "Enumerates tp x pp x vpp x dp layouts, pipeline layer splits (even, E/L/E+L: the\n"
            "embedding/loss counted as a layer, lN: N layers on the last stage), micro batch\n"
            "sizes, recomputation, ZeRO stages, sequence parallelism and (mixture-of-experts\n"
            "models) expert parallelism for N GPUs (default: the config's world) and prints\n"
            "the fastest that fit, with memory per GPU by\n"
            "category, predicted step time, tokens/s, MFU and what binds each; --show adds\n"
            "the fastest fitting layout of that shape.\n"
            "--overlap: the parallel.overlap_* and tp_comm_overlap switches each layout gets\n"
            "(default: the config's, where the layout allows them; all; none).\n"
            "--layout: the config's own layout only, with the memory of every pipeline stage\n"
            "in the engine's categories (compare with the run's summary) and its step time\n"
            "by part (compare with the run's breakdown), its compute by kind: GEMMs,\n"
            "memory-bound ops, the attention core, the loss head.\n"
            "--samples N: also the time to train N samples (e.g. a benchmark's samples to\n"
            "converge) at the predicted step time: ceil(N / global batch) steps x step time,\n"
            "for the fastest layout that fits and the config's own (--layout: the config's).\n"
            "--moe-load F: an MoE model's expected expert load, the most loaded expert's rows\n"
            "over the mean (a run logs it: `expert load max/mean`; default 1, balanced). Under\n"
            "expert parallelism that expert's rank paces every MoE layer (its experts' GEMMs\n"
            "and what it receives); the planner cannot foresee how a router balances.\n"
            "--calibration FILE: the device constants a --calibrate run wrote, instead of the\n"
            "built-in row. --calibrate measures them on this machine through the engine's\n"
            "backend (GEMMs, memory bandwidth, memory-bound ops, the attention core; all-reduce\n"
            "and the ranks' wait for each other at a collective under mpirun with >= 2 ranks)\n"
            "within about S seconds (default 20) in R rounds (default 3) that each measure every\n"
            "figure, keeps each figure's median over the rounds (printing their spread) and\n"
            "writes FILE (JSON; docs/formats.md). A CPU calibration's rates are scaled to the\n"
            "threads per rank a layout leaves (linearly; --layout says so).\n\n");
    print_legend(f);
}

static int bad(const char *msg, const char *arg) {
    fprintf(stderr, "lattice plan: error: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return LT_EXIT_INPUT;
}

/* ---- the command line ---------------------------------------------------- */

typedef struct {
    const char *config, *gpu_name, *calibration;
    int gpus, gpn, top, layout, nshow, show[8][3];
    OverlapMode ov;
    double mem_gib;
    long long samples; /* --samples: the samples to train, 0 = no time-to-train line */
    double moe_load;   /* --moe-load: the expected expert load max/mean (1: balanced) */
    char **over; /* section.key=value overrides (argv's strings) */
    int nover;
} PlanArgs;

/* Option o with its value v into p: 0, or the exit status of a refusal. */
static int parse_value_option(PlanArgs *p, const char *o, const char *v) {
    char *end;
    const long x = strtol(v, &end, 10);
    if (!strcmp(o, "--gpu")) p->gpu_name = v;
    else if (!strcmp(o, "--overlap")) {
        if (!strcmp(v, "config")) p->ov = OV_CONFIG;
        else if (!strcmp(v, "all")) p->ov = OV_ALL;
        else if (!strcmp(v, "none")) p->ov = OV_NONE;
        else return bad("--overlap takes config, all or none", v);
    } else if (!strcmp(o, "--calibration")) p->calibration = v;
    else if (!strcmp(o, "--show")) {
        int t3[3] = {0, 0, 1}, n = sscanf(v, "%dx%dx%d", &t3[0], &t3[1], &t3[2]);
        if (n < 2 || t3[0] < 1 || t3[1] < 1 || t3[2] < 1 || p->nshow == 8)
            return bad("--show takes TPxPP or TPxPPxVPP (at most 8 of them)", v);
        memcpy(p->show[p->nshow++], t3, sizeof t3);
    } else if (!strcmp(o, "--samples")) {
        p->samples = strtoll(v, &end, 10);
        if (end == v || *end || p->samples < 1)
            return bad("--samples needs a positive whole number of samples (sequences)", v);
    } else if (!strcmp(o, "--moe-load")) {
        p->moe_load = strtod(v, &end);
        if (end == v || *end || !(p->moe_load >= 1.0) || p->moe_load > 1e6)
            return bad("--moe-load needs the expected expert load max/mean, a number >= 1", v);
    } else if (!strcmp(o, "--gpu-mem-gib")) {
        p->mem_gib = strtod(v, &end);
        if (*end || !(p->mem_gib > 0)) return bad("--gpu-mem-gib needs a positive number", v);
    } else if (*end || x < 1 || x > (1 << 20)) return bad("expected a positive integer", v);
    else if (!strcmp(o, "--gpus")) p->gpus = (int)x;
    else if (!strcmp(o, "--gpus-per-node")) p->gpn = (int)x;
    else if (!strcmp(o, "--top")) p->top = (int)x;
    else return bad("unknown option", o);
    return 0;
}

/* argv into p: 0 to go on, or 1 with *status to exit with (--help, a
 * refusal). p->over is allocated; the caller frees it. */
static int parse_args(int argc, char **argv, PlanArgs *p, int *status) {
    *p = (PlanArgs){.gpn = 8, .top = 15, .ov = OV_CONFIG, .moe_load = 1.0};
    p->over = lt_malloc(((size_t)argc + 1) * sizeof(char *));
    *status = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) return usage(stdout), 1;
        if (!strcmp(o, "--layout")) {
            p->layout = 1;
            continue;
        }
        if (strncmp(o, "--", 2) != 0) {
            if (!p->config && !strchr(o, '=')) p->config = o;
            else if (strchr(o, '=')) p->over[p->nover++] = argv[i];
            else return *status = bad("unexpected argument", o), 1;
            continue;
        }
        if (i + 1 >= argc) return *status = bad("needs a value", o), 1;
        if ((*status = parse_value_option(p, o, argv[++i]))) return 1;
    }
    if (!p->config) return usage(stderr), *status = LT_EXIT_INPUT, 1;
    return 0;
}

/* What every mode reads once the config is loaded. */
typedef struct {
    LtConfig base;
    LtPlanDevice dev;
    double cap;   /* GiB per GPU */
    size_t a;     /* bytes per activation on the device */
    int cfg_world; /* tp x pp of the config */
    int mpi;      /* the stage-to-stage messages go over MPI */
    int cpu_run;  /* the config trains on the CPU backend */
    int moe;      /* a mixture-of-experts model: expert parallelism enumerated */
} PlanSetup;

/* The config of p (its overrides applied) and the device: 0, or an exit status. */
static int plan_setup(PlanArgs *p, PlanSetup *s) {
    char err[2048];
    lt_config_defaults(&s->base);
    const int rc = lt_config_load(&s->base, p->config, p->nover, p->over, err, sizeof err);
    if (rc) return bad(err, NULL);
    const LtConfig *b = &s->base;
    s->moe = b->model.num_experts > 0;
    if (!s->moe && p->moe_load != 1.0)
        return bad("--moe-load is an MoE model's expected expert load; this model has no "
                   "experts (model.num_experts is 0)", NULL);
    s->cpu_run = b->train.device == LT_DEVICE_CPU ||
                 (b->train.device == LT_DEVICE_AUTO && lt_cuda_device_count() <= 0);
    /* --layout of a config that trains on the CPU: the cpu row unless told */
    if (p->layout && s->cpu_run && !p->gpu_name && !p->calibration) p->gpu_name = "cpu";
    if (lt_plan_device_choose(p->gpu_name, p->calibration, b->train.precision, &s->dev, err,
                              sizeof err))
        return bad(err, NULL);
    s->cap = p->mem_gib > 0 ? p->mem_gib : s->dev.mem_gib;
    /* the CPU backend holds bf16 values in floats */
    s->a = b->train.precision == LT_PREC_BF16 && strcmp(s->dev.name, "cpu") ? 2 : 4;
    s->cfg_world = b->parallel.tensor_model_parallel_size * b->parallel.pipeline_model_parallel_size;
    /* the stage-to-stage messages' library: NCCL on a GPU row unless comm.backend says mpi */
    s->mpi = !strcmp(s->dev.name, "cpu") || b->comm.backend == LT_COMM_MPI;
    return 0;
}

/* ---- time to train (--samples) -------------------------------------------- */

/* p->samples trained at step_s seconds per step of the config's global batch:
 * one line naming the layout (what), or nothing without --samples. The
 * evaluations, the start-up and the data loading are not counted. */
static void print_time_to_train(const PlanArgs *p, const LtConfig *c, double step_s,
                                const char *what) {
    if (p->samples <= 0) return;
    const long long gbs = c->train.global_batch_size, steps = (p->samples + gbs - 1) / gbs;
    const double secs = (double)steps * step_s;
    printf("time to train %lld samples (%s): %lld steps of %lld x %.3f s = %.0f s = %.2f h "
           "(training steps only: evaluations and start-up not counted)\n",
           p->samples, what, steps, gbs, step_s, secs, secs / 3600.0);
}

/* ---- --layout: the config's own layout ----------------------------------- */

static void print_stage_memory(int stage, const LtPlanMemory *m) {
    const double gib = 1024.0 * 1024 * 1024;
    printf("memory bytes per rank (predicted, stage %d): params=%zu grads=%zu optimizer=%zu "
           "activations=%zu workspace=%zu comm=%zu total=%zu\n",
           stage, m->params, m->grads, m->optimizer, m->activations, m->workspace, m->comm,
           lt_plan_total(m));
    printf("  = %.2f GiB: params %.2f, grads %.2f, optimizer %.2f, activations %.2f, "
           "workspace %.2f, comm %.2f\n",
           lt_plan_total(m) / gib, m->params / gib, m->grads / gib, m->optimizer / gib,
           m->activations / gib, m->workspace / gib, m->comm / gib);
}

/* Every stage's memory and the step time by part, on the device it names. */
static int plan_layout(const PlanArgs *p, const PlanSetup *s) {
    const int world = p->gpus ? p->gpus : s->cfg_world;
    LtConfig c = s->base;
    char err[2048];
    if (lt_config_validate(&c, world, err, sizeof err)) return bad(err, NULL);
    const size_t act = s->cpu_run ? 4 : s->a; /* the CPU backend holds bf16 values in floats */
    const int lmpi = s->mpi || s->cpu_run;
    const int tp = c.parallel.tensor_model_parallel_size, P = c.parallel.pipeline_model_parallel_size;
    char ep[48] = "";
    if (s->moe)
        snprintf(ep, sizeof ep, ", ep %d (%d experts)", c.parallel.expert_model_parallel_size,
                 c.model.num_experts);
    if (s->moe && c.parallel.expert_tensor_parallel_size > 1)
        snprintf(ep + strlen(ep), sizeof ep - strlen(ep), ", etp %d",
                 c.parallel.expert_tensor_parallel_size);
    printf("plan: %s, %d rank(s): tp %d, pp %d, vpp %d, dp %d%s, micro batch %d, recompute %s, "
           "ZeRO %d%s\n",
           p->config, world, tp, P, c.parallel.virtual_pipeline_model_parallel_size,
           world / (tp * P), ep, c.train.micro_batch_size, rc_name(c.train.recompute),
           c.optimizer.zero_stage, c.parallel.sequence_parallel ? ", SP" : "");
    for (int st = 0; st < P; st++) {
        LtPlanMemory m;
        if (lt_plan_memory(&c, world, st, act, lmpi, &m, err, sizeof err)) return bad(err, NULL);
        print_stage_memory(st, &m);
    }
    LtConfig cl = c;
    lt_plan_apply_overlap(&cl, p->ov);
    LtPlanDevice dev = s->dev;
    scale_threads(&dev, &c, world, p->gpn, 1);
    LtPlanStep ps;
    if (lt_plan_step(&cl, world, p->gpn, &dev, act, lmpi, p->moe_load, &ps, err, sizeof err))
        return bad(err, NULL);
    print_step(&ps, &dev);
    const int epn = c.parallel.expert_model_parallel_size;
    if (s->moe && p->moe_load > 1.0 && epn > 1)
        printf("expert load max/mean %.2f (--moe-load): the most loaded of an expert-parallel "
               "group's %d ranks gets %.2fx the mean rows and paces every MoE layer\n",
               p->moe_load, epn,
               lt_plan_moe_rank_load(p->moe_load, c.model.num_experts, c.model.moe_router_topk, epn));
    if (s->moe && p->moe_load > (double)c.model.num_experts / c.model.moe_router_topk)
        printf("(an expert gets each token at most once: with %d experts, top %d, a load of at "
               "most %.2f)\n", c.model.num_experts, c.model.moe_router_topk,
               (double)c.model.num_experts / c.model.moe_router_topk);
    else if (s->moe && p->moe_load > 1.0 && epn == 1)
        printf("expert load max/mean %.2f (--moe-load): without expert parallelism one rank "
               "computes every expert, so the step is the balanced one\n", p->moe_load);
    print_time_to_train(p, &c, ps.step, "the config's layout");
    return 0;
}

/* ---- the enumeration ----------------------------------------------------- */

typedef struct {
    Cand *c;
    size_t n, cap;
} Cands;

/* Layout k (its shape and settings set) predicted and added to cs when it
 * validates for `gpus` (the pipeline's makespan by formula). */
static void add_layout(const PlanArgs *p, const PlanSetup *s, int gpus, Cand k, Cands *cs) {
    LtConfig c;
    k.moe_load = p->moe_load;
    if (lt_plan_layout_config(&s->base, &k, &c, gpus, p->ov, s->mpi)) return;
    lt_plan_memory_max(&c, &k, s->a, s->mpi);
    k.mem_gib = (double)lt_plan_total(&k.mem) / (1024.0 * 1024 * 1024);
    k.fits = k.mem_gib <= s->cap;
    lt_plan_step_time(&c, &s->dev, p->gpn, &k, 0);
    if (cs->n == cs->cap) cs->c = realloc(cs->c, sizeof(Cand) * (cs->cap *= 2));
    if (!cs->c) lt_fatal("out of host memory");
    cs->c[cs->n++] = k;
}

/* Every expert-parallel and expert-tensor-parallel size of layout k: EP a
 * divisor of the experts, ETP one of the experts' width, EP x ETP one of
 * tp x dp (both 1 for a dense model). */
static void add_ep(const PlanArgs *p, const PlanSetup *s, int gpus, Cand k, Cands *cs) {
    const int experts = s->base.model.num_experts, ffn = s->base.model.moe_ffn_hidden_size;
    const int stage = experts > 0 ? k.tp * k.dp : 1;
    for (k.ep = 1; k.ep <= stage; k.ep++)
        for (k.etp = 1; k.ep * k.etp <= stage; k.etp++)
            if (stage % (k.ep * k.etp) == 0 && (experts == 0 || experts % k.ep == 0) &&
                (k.etp == 1 || ffn % k.etp == 0))
                add_layout(p, s, gpus, k, cs);
}

/* Every layer split, micro batch size, recomputation, ZeRO stage, sequence
 * parallelism and expert parallelism of the shape tp x pp x vpp on `gpus`. */
static void add_shape(const PlanArgs *p, const PlanSetup *s, int gpus, int tp, int pp, int vpp,
                      Cands *cs) {
    static const int RC[3] = {LT_RECOMPUTE_NONE, LT_RECOMPUTE_SELECTIVE, LT_RECOMPUTE_FULL};
    const int dp = gpus / (tp * pp);
    LtLayerSplit splits[5];
    const int nsplits = pipeline_splits(&s->base, tp, pp, vpp, splits);
    for (int si = 0; si < nsplits; si++)
        for (int mbs = 1; mbs <= 16; mbs *= 2) {
            if (s->base.train.global_batch_size % (mbs * dp)) continue;
            for (int rc = 0; rc < 3; rc++)
                for (int zero = 0; zero <= (dp > 1 ? 2 : 0); zero++)
                    for (int sp = 0; sp <= (tp > 1); sp++)
                        add_ep(p, s, gpus,
                               (Cand){.tp = tp, .pp = pp, .vpp = vpp, .dp = dp, .mbs = mbs,
                                      .rc = RC[rc], .zero = zero, .sp = sp, .split = splits[si]},
                               cs);
        }
}

/* Every tp x pp x vpp x dp shape of `gpus` the model divides into. */
static void enumerate(const PlanArgs *p, const PlanSetup *s, int gpus, Cands *cs) {
    const int heads = lt_dims_from_config(&s->base).heads;
    for (int tp = 1; tp <= p->gpn && tp <= gpus; tp *= 2) {
        if (gpus % tp || heads % tp) continue;
        for (int pp = 1; pp <= gpus / tp; pp++) {
            if ((gpus / tp) % pp) continue;
            for (int vpp = 1; vpp <= 8; vpp *= 2)
                if (vpp == 1 || pp > 1) add_shape(p, s, gpus, tp, pp, vpp, cs);
        }
    }
}

/* k's step time again, the pipeline's from the schedule simulator. */
static void simulate(const PlanArgs *p, const PlanSetup *s, int gpus, Cand *k) {
    LtConfig c;
    lt_plan_layout_config(&s->base, k, &c, gpus, p->ov, s->mpi);
    lt_plan_step_time(&c, &s->dev, p->gpn, k, 1);
}

/* Sorted: fitting first, then faster; the schedule simulator refines the
 * leaders' pipeline time, bubble included, and they are sorted again. */
static void rank_layouts(const PlanArgs *p, const PlanSetup *s, int gpus, Cands *cs) {
    qsort(cs->c, cs->n, sizeof *cs->c, cand_cmp);
    for (size_t i = 0; i < cs->n && i < 64; i++) simulate(p, s, gpus, &cs->c[i]);
    qsort(cs->c, cs->n < 64 ? cs->n : 64, sizeof *cs->c, cand_cmp);
}

/* ---- the table ----------------------------------------------------------- */

/* Nothing fits: the smallest layout and what it needs. Returns the exit status. */
static int refuse_nothing_fits(const Cands *cs, int gpus, double cap) {
    const Cand *best = NULL;
    for (size_t i = 0; i < cs->n; i++)
        if (!best || cs->c[i].mem_gib < best->mem_gib) best = &cs->c[i];
    fprintf(stderr,
            "lattice plan: error: the model fits nowhere on %d x %.0f GiB: the smallest layout "
            "(tp %d, pp %d, vpp %d, dp %d, micro batch %d, recompute %s, ZeRO %d%s) needs %.1f "
            "GiB per GPU\n",
            gpus, cap, best->tp, best->pp, best->vpp, best->dp, best->mbs, rc_name(best->rc),
            best->zero, best->sp ? ", SP" : "", best->mem_gib);
    return LT_EXIT_INPUT;
}

/* The head and the fastest p->top layouts that fit. Returns how many were shown. */
static int print_table(const PlanArgs *p, const PlanSetup *s, int gpus, const Cands *cs,
                       size_t nfit) {
    const LtPlanDevice *g = &s->dev;
    printf("plan: %s on %d x %s (%.0f GiB; %s), %d GPUs per node, %s, global batch %d x %d tokens\n",
           p->config, gpus, g->name, s->cap, g->source, p->gpn,
           s->base.train.precision == LT_PREC_BF16 ? "bf16" : "fp32",
           s->base.train.global_batch_size, s->base.model.seq_length);
    printf("%zu layouts, %zu fit; the fastest %d that fit (step time: compute + the schedule's "
           "bubble + the TP/PP/DP communication the overlap switches (--overlap %s) leave "
           "exposed):\n",
           cs->n, nfit, p->top, p->ov == OV_ALL ? "all" : p->ov == OV_NONE ? "none" : "config");
    printf("%3s %3s %3s %3s %3s %4s %4s %2s %5s%s | %6s %6s %6s %6s %6s %6s %6s | %8s %9s %5s | "
           "%s\n",
           "tp", "pp", "vpp", "dp", "mbs", "rc", "zero", "sp", "split", s->moe ? "  ep etp" : "",
           "params", "grads", "optim", "acts", "ws", "comm", "GiB", "step s", "tok/s", "MFU",
           "binds");
    int shown = 0;
    for (size_t i = 0; i < cs->n && shown < p->top && cs->c[i].fits; i++, shown++)
        print_row(&cs->c[i], s->cap, is_config_layout(&cs->c[i], &s->base), s->moe);
    return shown;
}

/* What memory costs: the fastest layouts that would beat the best one but do
 * not fit (of the 64 leading ones that do not, simulated alike). */
static void print_faster(const PlanArgs *p, const PlanSetup *s, int gpus, Cands *cs,
                         size_t nfit) {
    enum { NFASTER = 3 };
    Cand faster[NFASTER + 1]; /* kept sorted; the one past the end is dropped */
    int nfaster = 0;
    for (size_t i = nfit; i < cs->n && i < nfit + 64; i++) {
        simulate(p, s, gpus, &cs->c[i]);
        if (nfit && cs->c[i].step >= cs->c[0].step) continue;
        int j = nfaster++;
        faster[j] = cs->c[i];
        for (; j > 0 && faster[j].step < faster[j - 1].step; j--) {
            Cand t = faster[j];
            faster[j] = faster[j - 1];
            faster[j - 1] = t;
        }
        if (nfaster > NFASTER) nfaster = NFASTER;
    }
    if (nfaster) printf("faster, but over %.0f GiB per GPU (they do not fit):\n", s->cap);
    for (int j = 0; j < nfaster; j++)
        print_row(&faster[j], s->cap, is_config_layout(&faster[j], &s->base), s->moe);
}

/* The layouts asked for by name (--show TPxPPxVPP): the fastest of each that fits. */
static void print_shown(const PlanArgs *p, const PlanSetup *s, int gpus, Cands *cs, size_t nfit) {
    for (int q = 0; q < p->nshow; q++) {
        const int *w = p->show[q];
        Cand *best = NULL;
        size_t at = 0;
        for (size_t i = 0; i < cs->n && !best; i++)
            if (cs->c[i].fits && cs->c[i].tp == w[0] && cs->c[i].pp == w[1] && cs->c[i].vpp == w[2])
                best = &cs->c[i], at = i;
        if (!best) {
            printf("--show %dx%dx%d: no layout with tp %d, pp %d, vpp %d fits (or divides)\n", w[0],
                   w[1], w[2], w[0], w[1], w[2]);
            continue;
        }
        simulate(p, s, gpus, best);
        printf("--show %dx%dx%d, the fastest such layout (about #%zu of %zu):\n", w[0], w[1], w[2],
               at + 1, nfit);
        print_row(best, s->cap, is_config_layout(best, &s->base), s->moe);
    }
}

/* The config's own layout when the table did not show it: its row, or why
 * it has none. */
static void print_config_layout(const PlanArgs *p, const PlanSetup *s, int gpus, Cands *cs,
                                int shown) {
    for (int i = 0; i < shown; i++)
        if (is_config_layout(&cs->c[i], &s->base)) {
            if (i > 0) print_time_to_train(p, &s->base, cs->c[i].step, "the config's layout");
            return;
        }
    const LtConfig *b = &s->base;
    for (size_t i = 0; i < cs->n; i++)
        if (is_config_layout(&cs->c[i], b)) {
            simulate(p, s, gpus, &cs->c[i]);
            printf("the config's own layout (about #%zu of %zu%s):\n", i + 1, cs->n,
                   cs->c[i].fits ? "" : "; it does not fit");
            print_row(&cs->c[i], s->cap, 1, s->moe);
            if (cs->c[i].fits) print_time_to_train(p, b, cs->c[i].step, "the config's layout");
            return;
        }
    LtConfig c = *b;
    char err[1024];
    if (lt_config_validate(&c, gpus, err, sizeof err))
        printf("the config's own layout does not validate on %d GPUs: %s\n", gpus, err);
    else
        printf("the config's own layout (tp %d, pp %d, vpp %d, micro batch %d) is outside the "
               "layouts tried (vpp and micro batch up to 8 and 16)\n",
               b->parallel.tensor_model_parallel_size, b->parallel.pipeline_model_parallel_size,
               b->parallel.virtual_pipeline_model_parallel_size, b->train.micro_batch_size);
}

/* The table of layouts on p->gpus GPUs (default: the config's world, else 8). */
static int plan_table(const PlanArgs *p, PlanSetup *s) {
    const int gpus = p->gpus ? p->gpus : s->cfg_world > 1 ? s->cfg_world : 8;
    scale_threads(&s->dev, &s->base, gpus, p->gpn, 1);
    if (gpus > p->gpn && gpus % p->gpn)
        return bad("--gpus must be a multiple of --gpus-per-node when it spans nodes", NULL);
    Cands cs = {.c = lt_malloc(sizeof(Cand) * 1024), .cap = 1024};
    enumerate(p, s, gpus, &cs);
    int status = 0;
    LtConfig own = s->base;
    char err[1024];
    /* what no layout changes (logging keys, ...): as the config's own world refuses it,
     * with the expert (tensor) parallelism the enumeration chooses left out */
    own.parallel.expert_model_parallel_size = 1;
    own.parallel.expert_tensor_parallel_size = 1;
    if (cs.n == 0 && lt_config_validate(&own, s->cfg_world, err, sizeof err))
        status = bad(err, NULL);
    else if (cs.n == 0)
        status = bad("no valid layout for this model on that many GPUs (heads, layers and the "
                     "global batch must divide)", NULL);
    else
        rank_layouts(p, s, gpus, &cs);
    size_t nfit = 0;
    for (size_t i = 0; i < cs.n; i++) nfit += cs.c[i].fits;
    if (!status && nfit == 0) status = refuse_nothing_fits(&cs, gpus, s->cap);
    if (!status) {
        const int shown = print_table(p, s, gpus, &cs, nfit);
        print_faster(p, s, gpus, &cs, nfit);
        print_shown(p, s, gpus, &cs, nfit);
        print_time_to_train(p, &s->base, cs.c[0].step,
                            is_config_layout(&cs.c[0], &s->base)
                                ? "the fastest layout that fits, the config's"
                                : "the fastest layout that fits");
        print_config_layout(p, s, gpus, &cs, shown);
        print_legend(stdout);
    }
    free(cs.c);
    return status;
}

int lt_cmd_plan(int argc, char **argv) {
    for (int i = 1; i < argc; i++) /* a different command sharing the name */
        if (!strcmp(argv[i], "--calibrate")) return lt_cmd_plan_calibrate(argc, argv);
    PlanArgs p;
    PlanSetup s;
    int status;
    if (parse_args(argc, argv, &p, &status)) return free(p.over), status;
    status = plan_setup(&p, &s);
    free(p.over);
    if (status) return status;
    return p.layout ? plan_layout(&p, &s) : plan_table(&p, &s);
}
