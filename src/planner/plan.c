/* plan.c - the parallelism planner (see plan.h): memory per rank by
 * category, step time, and `lattice plan`, which enumerates layouts. */
#include "plan.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"
#include "common.h"
#include "model.h"
#include "optim.h"
#include "params.h"
#include "pipeline.h"
#include "schedule.h"

/* ---- memory ------------------------------------------------------------------ */

/* Gradient buffer of a stage with ZeRO-2 buckets (model.c, setup_grads): one
 * buffer as long as the largest parameter group (the embeddings, a layer, the
 * final LayerNorm), and the embeddings' own when pipelined; *piece: the
 * largest layer's (lt_model_bucket_piece), the pieces a bucket is reduced in. */
static void bucket_grads(const LtParamTable *t, int pp, size_t *len, size_t *emb_len,
                         size_t *piece) {
    const int first_layer_param = t->idx_layer0;
    const int end_layers = t->idx_lnf >= 0 ? t->idx_lnf : t->n;
    const int layers_here = t->layers; /* every chunk of this stage */
    const int per_layer = layers_here > 0 ? (end_layers - first_layer_param) / layers_here : 0;
    *len = 0, *emb_len = 0, *piece = 0;
    const int own_emb = pp > 1 && t->idx_wte >= 0 && !t->dims.untied;
    if (t->idx_wte >= 0) {
        const int last = t->idx_wpe >= 0 ? t->idx_wpe : t->idx_wte;
        size_t span = t->p[last].offset + t->p[last].numel - t->p[t->idx_wte].offset;
        if (own_emb) *emb_len = span;
        else if (span > *len) *len = span;
    }
    for (int l = 0; l < layers_here; l++) {
        const int a = first_layer_param + l * per_layer, b = a + per_layer - 1;
        size_t span = t->p[b].offset + t->p[b].numel - t->p[a].offset;
        if (span > *len) *len = span;
        if (span > *piece) *piece = span;
    }
    if (t->idx_lnf >= 0) {
        size_t span = t->p[t->n - 1].offset + t->p[t->n - 1].numel - t->p[t->idx_lnf].offset;
        if (span > *len) *len = span;
    }
    if (*len == 0) *len = 1;
    const size_t bucket = *len > *emb_len ? *len : *emb_len;
    if (*piece == 0 || *piece > bucket) *piece = bucket;
}

int lt_plan_memory(const LtConfig *c, int world, int stage, size_t a, int mpi_p2p,
                   LtPlanMemory *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const int tp = c->parallel.tensor_model_parallel_size, pp = c->parallel.pipeline_model_parallel_size,
              vpp = c->parallel.virtual_pipeline_model_parallel_size;
    const int dp = world / (tp * pp);
    const int M = c->train.global_batch_size / (c->train.micro_batch_size * dp);
    const int sp = tp > 1 && c->parallel.sequence_parallel;
    const int zero = dp > 1 ? c->optimizer.zero_stage : 0;
    const LtModelDims d = lt_dims_from_config(c);
    const size_t B = (size_t)c->train.micro_batch_size, T = (size_t)c->model.seq_length, N = B * T,
                 C = (size_t)d.hidden, F = (size_t)d.ffn / (size_t)tp, H = (size_t)d.heads / (size_t)tp,
                 R = sp ? N / (size_t)tp : N, Vl = (size_t)d.padded_vocab / (size_t)tp;
    const int llama = d.arch == LT_ARCH_LLAMA;
    /* this rank's qkv columns ((NH + 2 NKV) HD / tp; GPT 3C / tp), norm statistics
     * per row (LayerNorm mean and rstd, RMSNorm rstd only), MLP activation
     * tensors of F columns (GeLU: pre-activation and output; SwiGLU: gate | up
     * (2F) and output) */
    const size_t QKV = ((size_t)d.heads + 2 * (size_t)lt_dims_kv_heads(&d)) * (C / (size_t)d.heads) /
                       (size_t)tp,
                 stats = llama ? 2 : 4, mlp_f = llama ? 3 : 2;
    const int slots = lt_pipeline_slots(pp, vpp, M, stage, c->parallel.overlap_p2p_comm && mpi_p2p);
    if (slots < 1)
        return lt_errorf(err, errlen, "no valid pipeline schedule for pp %d, vpp %d, %d micro batches",
                         pp, vpp, M);
    LtParamTable t;
    lt_params_build_stage(&t, &d, tp, 0, (LtStagePlace){pp, stage, vpp, lt_config_layer_split(c)});
    const size_t flat = lt_optim_flat_size(&t, dp);

    out->params = a * flat;
    /* gradients: the model's buffer, and the optimizer's shard (ZeRO >= 1) */
    size_t shard = zero >= 1 ? flat / (size_t)dp : flat;
    if (zero == 2) {
        size_t len, emb, piece;
        bucket_grads(&t, pp, &len, &emb, &piece);
        const size_t recv = piece < shard ? piece : shard;
        out->grads = 4 * (len + emb) + 4 * shard;
        if (c->parallel.overlap_grad_reduce) /* optim.c's staging ring */
            out->comm = (size_t)LT_OPTIM_RING * 4 * (piece + recv);
        else /* a bucket's reduce-scatter lands here */
            out->comm = 4 * recv;
    } else {
        out->grads = 4 * flat + (zero >= 1 ? 4 * shard : 0);
    }
    out->optimizer = 3 * 4 * shard; /* fp32 master, Adam m and v */

    /* activations kept per layer, per micro batch in flight (Korthikanti et
     * al.'s sbh terms for lattice's tensors; flash attention keeps only the
     * log-sum-exp, no s^2 term): LN1 and LN2 outputs, qkv, attention output,
     * the residual after attention, the MLP's activation tensors, norm
     * statistics and the log-sum-exp */
    const size_t layer = a * (N * C + N * QKV + R * C + N * C + mlp_f * N * F) +
                         4 * (stats * R + N * H),
                 atty = a * N * C / (size_t)tp, x = a * R * C;
    /* a slot holds the largest chunk's layers; its input even without layers */
    const size_t n = (size_t)t.max_chunk_layers, nx = n ? n : 1,
                 per_slot_io = nx * x + a * R * C + 4 * N; /* inputs, dout, tokens */
    const int rc = c->train.recompute;
    size_t act;
    if (rc == LT_RECOMPUTE_FULL) /* each layer's input per slot; one shared set refilled */
        act = (size_t)slots * per_slot_io + layer + atty;
    else if (rc == LT_RECOMPUTE_SELECTIVE) /* the attention output recomputed: one shared */
        act = (size_t)slots * (n * layer + per_slot_io) + atty;
    else
        act = (size_t)slots * (n * (layer + atty) + per_slot_io);
    out->activations = act;

    /* workspace: the LM head and loss (last stage), the backward's scratch */
    const size_t chunk =
        (size_t)lt_model_lm_head_chunk(N, Vl, a, c->train.lm_head_chunk);
    size_t ws = 4 * (size_t)d.padded_vocab; /* stage_f32 */
    if (t.last_stage)
        ws += a * N * C + 8 * R + a * R * C + a * chunk * Vl + 4 * N + 12 * chunk + 4 * N;
    ws += a * N * C;                            /* scratch */
    if (sp) ws += a * R * C + a * N * C;        /* SP scratch, gathered gradient */
    ws += a * N * C + a * N * QKV + a * N * F; /* dc, d3c, dff */
    if (llama) ws += a * 2 * N * F + 4 * T * (C / (size_t)d.heads); /* dgu, rotary table */
    out->workspace = ws;

    /* the pipeline's message buffers: boundary tensors (R x C) */
    int msgs = lt_pipeline_messages(pp, vpp, M, stage, mpi_p2p ? LT_P2P_MPI : LT_P2P_STREAM);
    if (c->parallel.overlap_p2p_comm && mpi_p2p) {
        const int ahead = lt_pipeline_messages(pp, vpp, M, stage, LT_P2P_MPI_AHEAD);
        if (ahead > msgs) msgs = ahead;
    }
    out->comm += (size_t)(msgs > 0 ? msgs : 0) * x;
    lt_params_free(&t);
    return 0;
}

/* ---- devices ----------------------------------------------------------------- */

/* The GPU rows: peaks, memory, its bandwidth and NVLink (450 GB/s per GPU one
 * way; the A100's 300) are datasheet figures. Assumed, because no GPU was
 * at hand to measure them: the GEMM efficiencies, the half-efficiency point
 * of 256 tokens, the 5 us latency per ring step, and the network (one
 * 400 Gb/s NIC per GPU, 50 GB/s; the A100's 200 Gb/s). `lattice plan
 * --calibrate` on such a machine measures the first three and the NVLink
 * figure (--calibration FILE plans with them).
 * The cpu row was measured by `lattice plan --calibrate` on the 2-core CI
 * machine (bench/2026-11-24-cpu-calibrate.md): its peaks are the measured
 * square-GEMM ceiling (a CPU has no datasheet figure here); its network is
 * assumed (10 Gb/s Ethernet). */
static const LtPlanDevice DEVICES[] = {
    {"h100", 989.4, 66.9, 80, 3350, 450, 50, 5.0, 0.60, 256,
     "datasheet peaks and bandwidths; GEMM efficiency, latency and network assumed"},
    {"h200", 989.4, 66.9, 141, 4800, 450, 50, 5.0, 0.62, 256,
     "datasheet peaks and bandwidths; GEMM efficiency, latency and network assumed"},
    {"a100", 312.0, 19.5, 80, 2039, 300, 25, 5.0, 0.65, 256,
     "datasheet peaks and bandwidths; GEMM efficiency, latency and network assumed"},
    /* fp32 peak, GEMM curve, memory: the fp32 run on one rank (2 threads); bf16
     * peak: the bf16 run; all-reduce: the run under mpirun -np 2 */
    {"cpu", 0.0297, 0.0961, 23.5, 25.48, 0.798, 1.25, 0.50, 1.028, 25,
     "measured on the 2-core CI machine (peak: its GEMM ceiling); network assumed"},
};

int lt_plan_device(const char *name, LtPlanDevice *out) {
    for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
        if (!strcasecmp(name, DEVICES[i].name)) {
            *out = DEVICES[i];
            return 0;
        }
    return -1;
}

const char *lt_plan_device_names(void) { return "h100, h200, a100, cpu"; }

int lt_plan_device_match(const char *device_name, char *name, size_t len) {
    for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
        if (strcmp(DEVICES[i].name, "cpu") && strcasestr(device_name, DEVICES[i].name)) {
            snprintf(name, len, "%s", DEVICES[i].name);
            return 0;
        }
    return -1;
}

/* ---- step time --------------------------------------------------------------- */

typedef struct {
    int tp, pp, vpp, dp, mbs, rc, zero, sp;
    LtLayerSplit split; /* layers per chunk (layer_split.h) */
    LtPlanMemory mem; /* the largest stage's */
    double mem_gib;
    int fits;
    /* seconds per step: compute, the bubble, communication not hidden (tp_comm, pp_comm,
     * dp_comm) and what the overlap switches hide of it (hidden_*), the optimizer */
    double compute, tp_comm, pp_comm, dp_comm, optim, bubble, step, mfu, tokens_per_s;
    double hidden_tp, hidden_pp, hidden_dp;
    int ov_grad, ov_param, ov_p2p, ov_tp; /* the switches in effect (after the layout's limits) */
    int simulated;
} Cand;

static double ring(double bytes, int n, double gbs, double lat) {
    return n > 1 ? 2.0 * (n - 1) / n * bytes / (gbs * 1e9) + 2.0 * (n - 1) * lat : 0.0;
}

/* What a transfer of `comm` seconds leaves exposed when it can run behind
 * `window` seconds of compute, except `tail` (the part nothing can follow:
 * the last bucket or block): max(tail, comm - window), within [0, comm]. */
static double exposed(double comm, double window, double tail) {
    double e = fmax(tail, comm - window);
    return fmin(comm, fmax(0.0, e));
}

/* GEMM efficiency at n tokens: half of gemm_eff at gemm_half_tokens. */
static double gemm_eff_at(const LtPlanDevice *g, double n) {
    return g->gemm_eff * n / (n + g->gemm_half_tokens);
}

/* One chunk's pass time, by part (seconds): the forward's and the backward's
 * GEMMs (data and weight gradients), the TP collectives of a pass and what
 * of them stays exposed each way, recomputation and its collectives. */
typedef struct {
    double tf_c, tb_data, tb_weight, tpc, tpc_f, tpc_b, redo, tpc_redo;
} PassTime;

/* What a pass's time depends on (step_time fills it for a layout). */
typedef struct {
    double per_layer, head;     /* training FLOPs per sample: one layer, the LM head */
    double mbs_tp, eff, slow;   /* micro batch / tp; FLOP/s at its size; tp overlap's slowdown */
    double ring1, redo_layer;   /* one TP collective; one layer's recomputation */
    double redo_share;          /* of a forward's SP collectives that recomputation repeats */
    int tp, ov_tp;
} PassModel;

/* A chunk of n layers (with the LM head when head is 1). tp_comm_overlap
 * runs each SP gather/reduce-scatter in blocks of one TP rank's rows behind
 * the GEMMs on the other blocks (forward: all of them; backward: the
 * data-gradient half), so a GEMM of N/tp rows runs at that size's
 * efficiency; the last block of each forward reduce-scatter stays exposed. */
static PassTime pass_time(const PassModel *m, int n, int head) {
    PassTime p;
    const double tf = (n * m->per_layer + (head ? m->head : 0.0)) / 3.0 * m->mbs_tp / m->eff;
    p.tpc = n * 2.0 * m->ring1;
    p.tf_c = p.tb_data = tf * m->slow;
    p.tb_weight = tf;
    p.tpc_f = p.tpc_b = p.tpc;
    if (m->ov_tp) {
        const double share = (m->tp - 1.0) / m->tp; /* the blocks that travel */
        /* per layer two reduce-scatters whose last block nothing follows */
        p.tpc_f = exposed(p.tpc, p.tf_c * share, p.tpc / (2.0 * (m->tp - 1)));
        p.tpc_b = exposed(p.tpc, p.tb_data * share, 0.0);
    }
    p.redo = n * m->redo_layer * m->slow;
    p.tpc_redo = m->redo_share * p.tpc_f;
    return p;
}
static double pass_total(const PassTime *p) {
    return p->tf_c + p->tpc_f + p->tb_data + p->tb_weight + p->tpc_b + p->redo + p->tpc_redo;
}
static void pass_add(PassTime *to, PassTime p) {
    to->tf_c += p.tf_c, to->tb_data += p.tb_data, to->tb_weight += p.tb_weight;
    to->tpc += p.tpc, to->tpc_f += p.tpc_f, to->tpc_b += p.tpc_b;
    to->redo += p.redo, to->tpc_redo += p.tpc_redo;
}
static void pass_scale(PassTime *p, double f) {
    p->tf_c *= f, p->tb_data *= f, p->tb_weight *= f, p->tpc *= f, p->tpc_f *= f, p->tpc_b *= f;
    p->redo *= f, p->tpc_redo *= f;
}

/* Predicted step time; sim: take the makespan from the schedule simulator.
 * The overlap switches of c (as layout_config left them) hide communication
 * as the engine overlaps it (README "Planning a layout"):
 * - tp_comm_overlap: within a pass (pass_time);
 * - overlap_p2p_comm (MPI only: with NCCL the stage-to-stage messages stay
 *   in order on the compute stream): receives are posted ahead, so a
 *   transfer runs behind the compute; without it the receiving pass waits
 *   for the whole transfer;
 * - overlap_grad_reduce: the data-parallel reduction of all buckets but the
 *   last runs behind the last micro batch's backward (ZeRO 2: each micro
 *   batch's reduce-scatters behind the compute that follows them);
 * - overlap_param_gather: the ZeRO gather of all buckets but the first runs
 *   behind the next step's first forward. */
static void step_time(const LtConfig *c, const LtPlanDevice *g, int gpn, Cand *k, int sim) {
    const LtModelDims d = lt_dims_from_config(c);
    const double a = c->train.precision == LT_PREC_BF16 ? 2.0 : 4.0;
    const double peak = (c->train.precision == LT_PREC_BF16 ? g->bf16_tflops : g->fp32_tflops) * 1e12;
    const int G = c->train.global_batch_size, M = G / (k->mbs * k->dp), V = k->vpp, P = k->pp;
    const double S = c->model.seq_length, N = (double)k->mbs * S, C = d.hidden;
    const double lat = g->latency_us * 1e-6;
    const int full_rc = k->rc == LT_RECOMPUTE_FULL;
    /* the time of one chunk of one micro batch on one GPU (pass_time) from its
     * layers and, on the model's last chunk, the LM head (2 h V per token);
     * GEMMs with few rows run below the large-GEMM efficiency (--calibrate
     * fits the curve); two all-reduces (or all-gather + reduce-scatter with
     * SP) per layer each way; recomputation in the backward: full the layers'
     * forward up to the MLP activation (with 3 of its 4 SP gathers and
     * reduce-scatters), selective the attention core, at the forward's pace */
    const double head = 3.0 * S * 2.0 * C * (double)d.padded_vocab;
    const double intra = k->tp <= gpn ? g->intra_gbs : g->net_gbs;
    const PassModel pm = {
        .per_layer = (lt_model_flops_per_sample(&d, 0) - head) / d.num_layers,
        .head = head,
        .mbs_tp = (double)k->mbs / k->tp,
        .eff = peak * gemm_eff_at(g, N),
        .slow = k->ov_tp ? gemm_eff_at(g, N) / gemm_eff_at(g, N / k->tp) : 1.0,
        .ring1 = ring(a * N * C, k->tp, intra, lat),
        .redo_layer = k->rc == LT_RECOMPUTE_NONE
                          ? 0.0
                          : lt_model_recompute_flops_per_sample(&d, full_rc) / d.num_layers *
                                k->mbs / k->tp / (peak * gemm_eff_at(g, N)),
        .redo_share = full_rc ? 0.75 : 0.0,
        .tp = k->tp,
        .ov_tp = k->ov_tp};
    /* the stage with the most time sets the pipeline's pace: its average chunk */
    PassTime pace = {0};
    double pace_time = -1.0, layers = 0.0; /* its layers per chunk */
    for (int q = 0; q < P; q++) {
        PassTime sum = {0};
        int n = 0;
        for (int v = 0; v < V; v++) {
            const int nl = lt_layer_split_count(&k->split, d.num_layers, P, V, q, v);
            pass_add(&sum, pass_time(&pm, nl, q == P - 1 && v == V - 1));
            n += nl;
        }
        if (pass_total(&sum) > pace_time) pace = sum, pace_time = pass_total(&sum), layers = (double)n / V;
    }
    pass_scale(&pace, 1.0 / V);
    const double tf_c = pace.tf_c, tb_data = pace.tb_data, tb_weight = pace.tb_weight,
                 tpc = pace.tpc, tpc_f = pace.tpc_f, tpc_b = pace.tpc_b, redo = pace.redo,
                 tpc_redo = pace.tpc_redo, redo_share = pm.redo_share;
    const double tf_all = tf_c + tpc_f;
    const double tb_all = tb_data + tb_weight + tpc_b + redo + tpc_redo;
    /* a stage holds tp * dp consecutive ranks: boundaries cross nodes when that fills one */
    const double p2p_gbs = k->tp * k->dp >= gpn ? g->net_gbs : g->intra_gbs;
    const double p2p = P > 1 ? a * N * C / (k->sp ? k->tp : 1) / (p2p_gbs * 1e9) + lat : 0.0;
    /* a stage-to-stage transfer: on the receiving pass's time, unless the
     * receive was posted ahead (overlap_p2p_comm over MPI; a large MPI message
     * moves once its receive is posted, NCCL's in order on the compute
     * stream); then it runs behind the compute and arrives p2p after the send */
    const double xfer = P > 1 && !k->ov_p2p ? p2p : 0.0;
    const double arrive = P > 1 ? (k->ov_p2p ? p2p : lat) : 0.0;
    double makespan = (V * (double)M + P - 1) * (tf_all + tb_all + 2.0 * xfer) +
                      2.0 * (P - 1) * arrive;
    if (P == 1) k->simulated = 1; /* no pipeline: no bubble to simulate */
    if (sim && P > 1) {
        /* each chunk at its own time over the pacing stage's average chunk:
         * its layers, and the LM head on the model's last chunk only (an
         * approximation: its transfer scales alike) */
        double *scale = lt_malloc(sizeof(double) * (size_t)(P * V));
        for (int v = 0; v < P * V; v++) {
            const int q = v % P, ch = v / P;
            const PassTime t = pass_time(
                &pm, lt_layer_split_count(&k->split, d.num_layers, P, V, q, ch), v == P * V - 1);
            scale[v] = pass_total(&t) / (tf_all + tb_all);
        }
        LtSimResult res;
        char err[256];
        if (lt_schedule_simulate_all(P, V, M, (LtSimCost){tf_all + xfer, tb_all + xfer, arrive, scale},
                                     &res, err, sizeof err) == 0) {
            makespan = res.makespan;
            lt_sim_free(&res);
            k->simulated = 1;
        }
        free(scale);
    }
    const double passes = V * (double)M;
    const double busy = passes * (tf_c + tb_data + tb_weight + redo);
    k->compute = busy;
    k->tp_comm = passes * (tpc_f + tpc_b + tpc_redo);
    k->hidden_tp = fmax(0.0, passes * (2.0 + redo_share) * tpc - k->tp_comm);
    k->pp_comm = 2.0 * passes * xfer;
    k->hidden_pp = P > 1 ? 2.0 * passes * (p2p - xfer) : 0.0;
    k->bubble = makespan - busy - k->tp_comm - k->pp_comm;
    if (k->bubble < 0) k->bubble = 0;
    /* data parallel: the gradient reduction (fp32: an all-reduce, with ZeRO a
     * reduce-scatter - ZeRO 2's after every micro batch), with ZeRO the
     * weights' gather; buckets of parallel.bucket_size parameters (ZeRO 2:
     * one per parameter group, a layer or the embeddings) */
    const double local = (double)k->mem.params / a;
    const double dp_gbs = k->tp * k->dp > gpn ? g->net_gbs : g->intra_gbs;
    const double reduce = k->zero == 0 ? ring(4.0 * local, k->dp, dp_gbs, lat)
                                       : ring(4.0 * local, k->dp, dp_gbs, lat) / 2.0;
    const double gather = k->zero ? ring(a * local, k->dp, dp_gbs, lat) / 2.0 : 0.0;
    const double buckets = fmax(1.0, ceil(local / (double)c->parallel.bucket_size));
    const double groups = layers * V + 1.0;
    double reduce_x, gather_x;
    if (k->zero == 2) {
        /* behind each backward, and behind the next forward at most the two
         * reductions in flight (LT_OPTIM_RING); a slower reduction stalls */
        const double total = M * reduce, one = reduce / groups;
        const double window = passes * (tb_all + fmin(tf_all, LT_OPTIM_RING * one));
        reduce_x = k->ov_grad ? exposed(total, window, one) : total;
    } else {
        reduce_x = k->ov_grad ? exposed(reduce, V * tb_all, reduce / buckets) : reduce;
    }
    gather_x = k->ov_param ? exposed(gather, V * tf_all, gather / buckets) : gather;
    k->dp_comm = reduce_x + gather_x;
    k->hidden_dp = fmax(0.0, (k->zero == 2 ? M * reduce : reduce) + gather - k->dp_comm);
    const double shard = k->zero ? local / k->dp : local;
    k->optim = shard * (28.0 + a) / (g->mem_gbs * 1e9);
    k->step = makespan + k->dp_comm + k->optim;
    k->mfu = lt_model_flops_per_sample(&d, 0) * G / k->step / (k->tp * k->pp * k->dp * peak);
    k->tokens_per_s = G * S / k->step;
}

/* ---- enumeration and the table ---------------------------------------------- */

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
    double parts[3] = {k->bubble, k->tp_comm + k->pp_comm, k->dp_comm};
    const char *names[3] = {"pipeline bubble", "TP/PP communication", "DP communication"};
    int best = 0;
    for (int i = 1; i < 3; i++)
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

/* --overlap: the config's switches, all of them, or none */
typedef enum { OV_CONFIG, OV_ALL, OV_NONE } OverlapMode;

/* The overlap switches of mode in c, where its layout allows them. */
static void apply_overlap(LtConfig *c, OverlapMode mode) {
    if (mode != OV_CONFIG) {
        const bool on = mode == OV_ALL;
        c->parallel.overlap_p2p_comm = c->parallel.tp_comm_overlap = on;
        /* a captured CUDA graph cannot wait for the DP overlap (config refuses it) */
        c->parallel.overlap_grad_reduce = c->parallel.overlap_param_gather = on && !c->train.cuda_graph;
    }
    if (!c->optimizer.zero_stage) c->parallel.overlap_param_gather = false;
    if (!c->parallel.sequence_parallel) c->parallel.tp_comm_overlap = false;
}

/* The config of layout k; its overlap switches (mode) where the layout
 * allows them - no parameter gather without ZeRO, no TP overlap without SP -
 * recorded in k; the pipeline's sends go in the background only over MPI
 * (the planner's GPU rows run NCCL unless comm.backend is mpi). */
static int layout_config(const LtConfig *base, Cand *k, LtConfig *c, int world, OverlapMode mode,
                         int mpi) {
    *c = *base;
    c->parallel.tensor_model_parallel_size = k->tp;
    c->parallel.pipeline_model_parallel_size = k->pp;
    c->parallel.virtual_pipeline_model_parallel_size = k->vpp;
    c->parallel.num_layers_in_first_pipeline_stage = k->split.first;
    c->parallel.num_layers_in_last_pipeline_stage = k->split.last;
    c->parallel.account_for_embedding_in_pipeline_split = k->split.embedding;
    c->parallel.account_for_loss_in_pipeline_split = k->split.loss;
    c->parallel.sequence_parallel = k->sp;
    c->train.micro_batch_size = k->mbs;
    c->train.recompute = k->rc;
    c->optimizer.zero_stage = k->zero;
    apply_overlap(c, mode);
    k->ov_grad = c->parallel.overlap_grad_reduce && k->dp > 1;
    k->ov_param = c->parallel.overlap_param_gather && k->dp > 1;
    k->ov_tp = c->parallel.tp_comm_overlap && k->tp > 1;
    k->ov_p2p = c->parallel.overlap_p2p_comm && k->pp > 1 && mpi;
    char err[512];
    return lt_config_validate(c, world, err, sizeof err);
}

static void plan_memory_max(const LtConfig *c, Cand *k, size_t a, int mpi) {
    /* the first stage holds the most micro batches in flight and the
     * embeddings, the last the LM head, the second the most in flight of the
     * middle stages (all alike; with an uneven split they may hold more
     * layers than the ends): the largest is one of them */
    int stages[3] = {0, k->pp - 1, 1};
    memset(&k->mem, 0, sizeof k->mem);
    for (int i = 0; i < (k->pp > 2 ? 3 : k->pp); i++) {
        LtPlanMemory m;
        char err[256];
        if (lt_plan_memory(c, k->tp * k->pp * k->dp, stages[i], a, mpi, &m, err, sizeof err))
            continue;
        if (lt_plan_total(&m) > lt_plan_total(&k->mem)) k->mem = m;
    }
}

/* The overlap switches in effect for k, as words. */
static const char *overlap_words(const Cand *k, char *buf, size_t len) {
    const int on[4] = {k->ov_grad, k->ov_param, k->ov_p2p, k->ov_tp};
    const char *word[4] = {"grad-reduce", "param-gather", "p2p", "tp"};
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < 4; i++)
        if (on[i]) used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? " " : "", word[i]);
    if (!used) snprintf(buf, len, "none");
    return buf;
}

int lt_plan_step(const LtConfig *cfg, int world, int gpus_per_node, const LtPlanDevice *dev,
                 size_t act_bytes, int mpi_p2p, LtPlanStep *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const int tp = cfg->parallel.tensor_model_parallel_size,
              P = cfg->parallel.pipeline_model_parallel_size;
    Cand k = {.tp = tp, .pp = P, .vpp = cfg->parallel.virtual_pipeline_model_parallel_size,
              .dp = world / (tp * P), .mbs = cfg->train.micro_batch_size,
              .rc = cfg->train.recompute, .zero = cfg->optimizer.zero_stage,
              .sp = cfg->parallel.sequence_parallel, .split = lt_config_layer_split(cfg)};
    LtConfig c;
    if (tp < 1 || P < 1 || world % (tp * P) || layout_config(cfg, &k, &c, world, OV_CONFIG, mpi_p2p))
        return lt_errorf(err, errlen, "the layout does not validate for %d ranks", world);
    plan_memory_max(&c, &k, act_bytes, mpi_p2p); /* the largest stage, as the table's rows */
    step_time(&c, dev, gpus_per_node, &k, 1);
    *out = (LtPlanStep){.step = k.step, .compute = k.compute, .bubble = k.bubble,
                        .tp_comm = k.tp_comm, .pp_comm = k.pp_comm, .dp_comm = k.dp_comm,
                        .optim = k.optim, .hidden_tp = k.hidden_tp, .hidden_pp = k.hidden_pp,
                        .hidden_dp = k.hidden_dp, .tokens_per_s = k.tokens_per_s, .mfu = k.mfu};
    overlap_words(&k, out->overlap, sizeof out->overlap);
    return 0;
}

static void print_row(const Cand *k, double cap, const char *prefix) {
    const double gib = 1024.0 * 1024 * 1024;
    char split[32];
    printf("%s%3d %3d %3d %3d %3d %4s %4d %2s %5s | %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f | "
           "%8.3f %9.0f %4.0f%% | %s%s\n",
           prefix, k->tp, k->pp, k->vpp, k->dp, k->mbs, rc_name(k->rc), k->zero, k->sp ? "y" : "n",
           split_name(&k->split, split, sizeof split),
           k->mem.params / gib, k->mem.grads / gib, k->mem.optimizer / gib, k->mem.activations / gib,
           k->mem.workspace / gib, k->mem.comm / gib, k->mem_gib, k->step, k->tokens_per_s,
           100.0 * k->mfu,
           binds(k, cap), k->simulated ? "" : " (bubble by formula)");
}

/* A layout's step time by part, in the terms of the run's breakdown. */
static void print_step(const LtPlanStep *p, const LtPlanDevice *g) {
    printf("step time (predicted on %s; overlap: %s): %.4f s = compute %.4f + bubble %.4f + "
           "exposed communication tp %.4f, pp %.4f, dp %.4f + optimizer %.4f; hidden by overlap: "
           "tp %.4f, pp %.4f, dp %.4f; %.0f tokens/s, MFU %.1f%%\n",
           g->name, p->overlap, p->step, p->compute, p->bubble, p->tp_comm, p->pp_comm,
           p->dp_comm, p->optim, p->hidden_tp, p->hidden_pp, p->hidden_dp, p->tokens_per_s,
           100.0 * p->mfu);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: lattice plan CONFIG.yaml [--gpus N] [--gpus-per-node G]\n"
            "                    [--gpu h100|h200|a100|cpu] [--calibration FILE]\n"
            "                    [--gpu-mem-gib M] [--top K] [--show TPxPP[xVPP]]... [--layout]\n"
            "                    [--overlap config|all|none]\n"
            "                    [section.key=value ...]\n"
            "       lattice plan --calibrate [--device auto|cpu|cuda] [--precision fp32|bf16]\n"
            "                    [--seconds S] [--out FILE]\n"
            "Enumerates tp x pp x vpp x dp layouts, pipeline layer splits (even, E/L/E+L: the\n"
            "embedding/loss counted as a layer, lN: N layers on the last stage), micro batch\n"
            "sizes, recomputation, ZeRO stages and sequence parallelism for N GPUs (default:\n"
            "the config's world) and prints the fastest that fit, with memory per GPU by\n"
            "category, predicted step time, tokens/s, MFU and what binds each; --show adds\n"
            "the fastest fitting layout of that shape.\n"
            "--overlap: the parallel.overlap_* and tp_comm_overlap switches each layout gets\n"
            "(default: the config's, where the layout allows them; all; none).\n"
            "--layout: the config's own layout only, with the memory of every pipeline stage\n"
            "in the engine's categories (compare with the run's summary) and its step time\n"
            "by part (compare with the run's breakdown).\n"
            "--calibration FILE: the device constants a --calibrate run wrote, instead of the\n"
            "built-in row. --calibrate measures them on this machine through the engine's\n"
            "backend (GEMMs, memory bandwidth; all-reduce under mpirun with >= 2 ranks) within\n"
            "about S seconds (default 20), prints them and writes FILE (JSON; README).\n");
}

/* The device constants: the built-in row of --gpu (h100 by default), or a
 * calibration file's figures (for the device it names; --gpu, when given too,
 * must name the same). 0, or -1 with the reason in err. */
static int choose_device(const char *gpu, const char *calibration, LtPrecision prec,
                         LtPlanDevice *dev, char *err, size_t errlen) {
    if (!calibration) {
        if (lt_plan_device(gpu ? gpu : "h100", dev) == 0) return 0;
        return lt_errorf(err, errlen, "unknown --gpu: %s (known: %s)", gpu,
                         lt_plan_device_names());
    }
    if (lt_plan_calibration_load(calibration, prec, dev, err, errlen)) return -1;
    if (gpu && strcasecmp(gpu, dev->name))
        return lt_errorf(err, errlen, "--gpu %s, but the calibration file %s is for device %s",
                         gpu, calibration, dev->name);
    return 0;
}

static int bad(const char *msg, const char *arg) {
    fprintf(stderr, "lattice plan: error: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return LT_EXIT_INPUT;
}

int lt_cmd_plan(int argc, char **argv) {
    for (int i = 1; i < argc; i++) /* a different command sharing the name */
        if (!strcmp(argv[i], "--calibrate")) return lt_cmd_plan_calibrate(argc, argv);
    const char *config = NULL, *gpu_name = NULL, *calibration = NULL;
    int gpus = 0, gpn = 8, top = 15, layout = 0, nshow = 0, show[8][3];
    OverlapMode ov = OV_CONFIG;
    double mem_gib = 0;
    char **over = calloc((size_t)argc + 1, sizeof(char *));
    int nover = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) return usage(stdout), free(over), 0;
        if (!strcmp(o, "--layout")) {
            layout = 1;
            continue;
        }
        if (strncmp(o, "--", 2) != 0) {
            if (!config && !strchr(o, '=')) config = o;
            else if (strchr(o, '=')) over[nover++] = argv[i];
            else return free(over), bad("unexpected argument", o);
            continue;
        }
        if (i + 1 >= argc) return free(over), bad("needs a value", o);
        const char *v = argv[++i];
        char *end;
        long x = strtol(v, &end, 10);
        if (!strcmp(o, "--gpu")) gpu_name = v;
        else if (!strcmp(o, "--overlap")) {
            if (!strcmp(v, "config")) ov = OV_CONFIG;
            else if (!strcmp(v, "all")) ov = OV_ALL;
            else if (!strcmp(v, "none")) ov = OV_NONE;
            else return free(over), bad("--overlap takes config, all or none", v);
        }
        else if (!strcmp(o, "--calibration")) calibration = v;
        else if (!strcmp(o, "--show")) {
            int t3[3] = {0, 0, 1}, n = sscanf(v, "%dx%dx%d", &t3[0], &t3[1], &t3[2]);
            if (n < 2 || t3[0] < 1 || t3[1] < 1 || t3[2] < 1 || nshow == 8)
                return free(over), bad("--show takes TPxPP or TPxPPxVPP (at most 8 of them)", v);
            memcpy(show[nshow++], t3, sizeof t3);
        }
        else if (!strcmp(o, "--gpu-mem-gib")) {
            mem_gib = strtod(v, &end);
            if (*end || !(mem_gib > 0)) return free(over), bad("--gpu-mem-gib needs a positive number", v);
        } else if (*end || x < 1 || x > (1 << 20)) return free(over), bad("expected a positive integer", v);
        else if (!strcmp(o, "--gpus")) gpus = (int)x;
        else if (!strcmp(o, "--gpus-per-node")) gpn = (int)x;
        else if (!strcmp(o, "--top")) top = (int)x;
        else return free(over), bad("unknown option", o);
    }
    if (!config) return free(over), usage(stderr), LT_EXIT_INPUT;
    LtConfig base;
    char err[2048];
    lt_config_defaults(&base);
    if (lt_config_load(&base, config, nover, over, err, sizeof err)) return free(over), bad(err, NULL);
    free(over);
    /* --layout of a config that trains on the CPU: the cpu row unless told */
    const int cpu_run = base.train.device == LT_DEVICE_CPU ||
                        (base.train.device == LT_DEVICE_AUTO && lt_cuda_device_count() <= 0);
    if (layout && cpu_run && !gpu_name && !calibration) gpu_name = "cpu";
    LtPlanDevice dev;
    if (choose_device(gpu_name, calibration, base.train.precision, &dev, err, sizeof err))
        return bad(err, NULL);
    const LtPlanDevice *g = &dev;
    const double cap = mem_gib > 0 ? mem_gib : g->mem_gib;
    /* the CPU backend holds bf16 values in floats */
    const size_t a = base.train.precision == LT_PREC_BF16 && strcmp(g->name, "cpu") ? 2 : 4;
    const int cfg_world = base.parallel.tensor_model_parallel_size *
                          base.parallel.pipeline_model_parallel_size;
    /* the stage-to-stage messages' library: NCCL on a GPU row unless comm.backend says mpi */
    const int mpi = !strcmp(g->name, "cpu") || base.comm.backend == LT_COMM_MPI;

    if (layout) { /* the config's own layout, every stage, on the device it names */
        int world = gpus ? gpus : cfg_world;
        LtConfig c = base;
        if (lt_config_validate(&c, world, err, sizeof err)) return bad(err, NULL);
        const size_t act = cpu_run ? 4 : a; /* the CPU backend holds bf16 values in floats */
        const int lmpi = mpi || cpu_run;
        const int P = c.parallel.pipeline_model_parallel_size;
        printf("plan: %s, %d rank(s): tp %d, pp %d, vpp %d, dp %d, micro batch %d, recompute %s, "
               "ZeRO %d%s\n",
               config, world, c.parallel.tensor_model_parallel_size, P,
               c.parallel.virtual_pipeline_model_parallel_size,
               world / (c.parallel.tensor_model_parallel_size * P),
               c.train.micro_batch_size, rc_name(c.train.recompute), c.optimizer.zero_stage,
               c.parallel.sequence_parallel ? ", SP" : "");
        for (int s = 0; s < P; s++) {
            LtPlanMemory m;
            if (lt_plan_memory(&c, world, s, act, lmpi, &m, err, sizeof err)) return bad(err, NULL);
            printf("memory bytes per rank (predicted, stage %d): params=%zu grads=%zu optimizer=%zu "
                   "activations=%zu workspace=%zu comm=%zu total=%zu\n",
                   s, m.params, m.grads, m.optimizer, m.activations, m.workspace, m.comm,
                   lt_plan_total(&m));
        }
        LtConfig cl = c;
        apply_overlap(&cl, ov);
        LtPlanStep ps;
        if (lt_plan_step(&cl, world, gpn, g, act, lmpi, &ps, err, sizeof err)) return bad(err, NULL);
        print_step(&ps, g);
        return 0;
    }

    if (gpus == 0) gpus = cfg_world > 1 ? cfg_world : 8;
    if (gpus > gpn && gpus % gpn)
        return bad("--gpus must be a multiple of --gpus-per-node when it spans nodes", NULL);
    const LtModelDims d0 = lt_dims_from_config(&base);
    size_t ncand = 0, cap_c = 1024;
    Cand *cs = lt_malloc(sizeof(Cand) * cap_c);
    for (int tp = 1; tp <= gpn && tp <= gpus; tp *= 2) {
        if (gpus % tp || d0.heads % tp) continue;
        for (int pp = 1; pp <= gpus / tp; pp++) {
            if ((gpus / tp) % pp) continue;
            const int dp = gpus / (tp * pp);
            for (int vpp = 1; vpp <= 8; vpp *= 2) {
                if (vpp > 1 && pp == 1) continue;
                LtLayerSplit splits[5];
                const int nsplits = pipeline_splits(&base, tp, pp, vpp, splits);
                for (int si = 0; si < nsplits; si++) {
                    const LtLayerSplit split = splits[si];
                    for (int mbs = 1; mbs <= 16; mbs *= 2) {
                        if (base.train.global_batch_size % (mbs * dp)) continue;
                        for (int rc = 0; rc < 3; rc++)
                            for (int zero = 0; zero <= (dp > 1 ? 2 : 0); zero++)
                                for (int sp = 0; sp <= (tp > 1); sp++) {
                                    Cand k = {.tp = tp, .pp = pp, .vpp = vpp, .dp = dp, .mbs = mbs,
                                              .rc = rc == 0   ? LT_RECOMPUTE_NONE
                                                    : rc == 1 ? LT_RECOMPUTE_SELECTIVE
                                                              : LT_RECOMPUTE_FULL,
                                              .zero = zero, .sp = sp, .split = split};
                                    LtConfig c;
                                    if (layout_config(&base, &k, &c, gpus, ov, mpi)) continue;
                                    plan_memory_max(&c, &k, a, mpi);
                                    k.mem_gib = (double)lt_plan_total(&k.mem) / (1024.0 * 1024 * 1024);
                                    k.fits = k.mem_gib <= cap;
                                    step_time(&c, g, gpn, &k, 0);
                                    if (ncand == cap_c) cs = realloc(cs, sizeof(Cand) * (cap_c *= 2));
                                    if (!cs) lt_fatal("out of host memory");
                                    cs[ncand++] = k;
                                }
                    }
                }
            }
        }
    }
    if (ncand == 0)
        return free(cs), bad("no valid layout for this model on that many GPUs (heads, layers and "
                             "the global batch must divide)", NULL);
    qsort(cs, ncand, sizeof *cs, cand_cmp);
    /* the schedule simulator refines the leaders' pipeline time, bubble included */
    for (size_t i = 0; i < ncand && i < 64; i++) {
        LtConfig c;
        layout_config(&base, &cs[i], &c, gpus, ov, mpi);
        step_time(&c, g, gpn, &cs[i], 1);
    }
    qsort(cs, ncand < 64 ? ncand : 64, sizeof *cs, cand_cmp);
    size_t nfit = 0;
    for (size_t i = 0; i < ncand; i++) nfit += cs[i].fits;
    if (nfit == 0) {
        const Cand *best = NULL;
        for (size_t i = 0; i < ncand; i++)
            if (!best || cs[i].mem_gib < best->mem_gib) best = &cs[i];
        fprintf(stderr,
                "lattice plan: error: the model fits nowhere on %d x %.0f GiB: the smallest layout "
                "(tp %d, pp %d, vpp %d, dp %d, micro batch %d, recompute %s, ZeRO %d%s) needs %.1f "
                "GiB per GPU\n",
                gpus, cap, best->tp, best->pp, best->vpp, best->dp, best->mbs, rc_name(best->rc),
                best->zero, best->sp ? ", SP" : "", best->mem_gib);
        free(cs);
        return LT_EXIT_INPUT;
    }
    printf("plan: %s on %d x %s (%.0f GiB; %s), %d GPUs per node, %s, global batch %d x %d tokens\n",
           config, gpus, g->name, cap, g->source, gpn,
           base.train.precision == LT_PREC_BF16 ? "bf16" : "fp32", base.train.global_batch_size,
           base.model.seq_length);
    printf("%zu layouts, %zu fit; the fastest %d that fit (step time: compute + the schedule's "
           "bubble + the TP/PP/DP communication the overlap switches (--overlap %s) leave "
           "exposed):\n",
           ncand, nfit, top, ov == OV_ALL ? "all" : ov == OV_NONE ? "none" : "config");
    printf("%3s %3s %3s %3s %3s %4s %4s %2s %5s | %6s %6s %6s %6s %6s %6s %6s | %8s %9s %5s | %s\n",
           "tp", "pp", "vpp", "dp", "mbs", "rc", "zero", "sp", "split", "params", "grads", "optim",
           "acts", "ws", "comm", "GiB", "step s", "tok/s", "MFU", "binds");
    int shown = 0;
    for (size_t i = 0; i < ncand && shown < top; i++) {
        if (!cs[i].fits) break;
        print_row(&cs[i], cap, "");
        shown++;
    }
    /* what memory costs: the fastest layouts that would beat the best one but
     * do not fit (of the 64 leading ones that do not, simulated alike), marked */
    enum { NFASTER = 3 };
    Cand faster[NFASTER + 1]; /* kept sorted; the one past the end is dropped */
    int nfaster = 0;
    for (size_t i = nfit; i < ncand && i < nfit + 64; i++) {
        LtConfig c;
        layout_config(&base, &cs[i], &c, gpus, ov, mpi);
        step_time(&c, g, gpn, &cs[i], 1);
        if (nfit && cs[i].step >= cs[0].step) continue;
        int j = nfaster++;
        faster[j] = cs[i];
        for (; j > 0 && faster[j].step < faster[j - 1].step; j--) {
            Cand t = faster[j];
            faster[j] = faster[j - 1];
            faster[j - 1] = t;
        }
        if (nfaster > NFASTER) nfaster = NFASTER;
    }
    if (nfaster) printf("faster, but over %.0f GiB per GPU (they do not fit):\n", cap);
    for (int j = 0; j < nfaster; j++) print_row(&faster[j], cap, "");
    /* layouts asked for by name (--show TPxPPxVPP): the fastest of each that fits */
    for (int s = 0; s < nshow; s++) {
        Cand *best = NULL;
        size_t at = 0;
        for (size_t i = 0; i < ncand && !best; i++)
            if (cs[i].fits && cs[i].tp == show[s][0] && cs[i].pp == show[s][1] &&
                cs[i].vpp == show[s][2])
                best = &cs[i], at = i;
        if (!best) {
            printf("--show %dx%dx%d: no layout with tp %d, pp %d, vpp %d fits (or divides)\n",
                   show[s][0], show[s][1], show[s][2], show[s][0], show[s][1], show[s][2]);
            continue;
        }
        LtConfig c;
        layout_config(&base, best, &c, gpus, ov, mpi);
        step_time(&c, g, gpn, best, 1);
        printf("--show %dx%dx%d, the fastest such layout (about #%zu of %zu):\n", show[s][0],
               show[s][1], show[s][2], at + 1, nfit);
        print_row(best, cap, "");
    }
    free(cs);
    return 0;
}
