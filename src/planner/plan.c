/* plan.c - the parallelism planner's model (see plan.h): the memory per rank
 * of a layout by category, and its step time by part. `lattice plan`, which
 * enumerates layouts with it, is plan_cli.c. */
#include "plan.h"
#include "plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model.h"
#include "optim.h"
#include "params.h"
#include "pipeline.h"
#include "schedule.h"

/* ---- memory -------------------------------------------------------------- */

/* Gradient buffer of a stage with ZeRO-2 buckets (model_grads.c, lt_mdl_setup_grads): one
 * buffer as long as the largest parameter group (the embeddings, a layer, the
 * final LayerNorm), and the embeddings' own when pipelined; *piece: the
 * largest layer's (lt_model_bucket_piece), the pieces a bucket is reduced in. */
static void bucket_grads(const LtParamTable *t, int pp, size_t *len, size_t *emb_len,
                         size_t *piece) {
    const int layers_here = t->layers; /* every chunk of this stage */
    *len = 0, *emb_len = 0, *piece = 0;
    const int own_emb = pp > 1 && t->idx_wte >= 0 && !t->dims.untied;
    if (t->idx_wte >= 0) {
        const int last = t->idx_wpe >= 0 ? t->idx_wpe : t->idx_wte;
        size_t span = t->p[last].offset + t->p[last].numel - t->p[t->idx_wte].offset;
        if (own_emb) *emb_len = span;
        else if (span > *len) *len = span;
    }
    for (int l = 0; l < layers_here; l++) {
        const int a = t->layer_first[l], b = t->layer_first[l + 1] - 1;
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

/* The widest MLP of the stage's layers on a TP rank (a dense layer's ffn,
 * an MoE layer's shared expert; at least 1), as lt_model_create sizes the
 * MLP buffers; *moe_any: the stage holds an MoE layer. */
static size_t stage_ffn(const LtParamTable *t, const LtModelDims *d, int tp, int *moe_any) {
    size_t F = 1;
    *moe_any = 0;
    for (int l = 0; l < t->layers; l++) {
        const int moe = lt_dims_moe_layer(d, lt_params_global_layer(t, l));
        const size_t f = (size_t)(moe ? d->moe.shared_ffn : d->ffn) / (size_t)tp;
        *moe_any |= moe;
        if (f > F) F = f;
    }
    return F;
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
                 C = (size_t)d.hidden, H = (size_t)d.heads / (size_t)tp,
                 R = sp ? N / (size_t)tp : N, Vl = (size_t)d.padded_vocab / (size_t)tp;
    const int llama = d.arch == LT_ARCH_LLAMA;
    /* this rank's qkv columns ((NH + 2 NKV) HD / tp; GPT 3C / tp), norm statistics
     * per row (LayerNorm mean and rstd, RMSNorm rstd only), MLP activation
     * tensors of F columns (GeLU: pre-activation and output; SwiGLU: gate | up
     * (2F) and output) */
    const size_t HD = (size_t)lt_dims_head_dim(&d), CL = H * HD, /* attention output columns */
                 QKV = ((size_t)d.heads + 2 * (size_t)lt_dims_kv_heads(&d)) * HD / (size_t)tp,
                 stats = llama ? 2 : 4, mlp_f = llama ? 3 : 2,
                 /* the q/k norm's rows per token (qk_layernorm) */
                 qk_heads = d.qk_norm ? (d.heads + (size_t)lt_dims_kv_heads(&d)) / (size_t)tp : 0;
    const int slots = lt_pipeline_slots(pp, vpp, M, stage, c->parallel.overlap_p2p_comm && mpi_p2p);
    if (slots < 1)
        return lt_errorf(err, errlen, "no valid pipeline schedule for pp %d, vpp %d, %d micro batches",
                         pp, vpp, M);
    LtParamTable t, et = {0}; /* the stage's table; under EP or ETP, the dense part and EP and
                               * ETP rank 0's experts (every rank holds as many) */
    const LtStagePlace place = {pp, stage, vpp, lt_config_layer_split(c)};
    const int ep = c->parallel.expert_model_parallel_size,
              etp = c->parallel.expert_tensor_parallel_size;
    if (ep > 1 || etp > 1) lt_params_build_split(&t, &et, &d, tp, 0, place, ep, 0, etp, 0);
    else lt_params_build_stage(&t, &d, tp, 0, place);
    const size_t flat = lt_optim_flat_size(&t, dp);
    int moe_any;
    const size_t F = stage_ffn(&t, &d, tp, &moe_any);
    const LtMoeShape ms = lt_plan_moe_shape(c, &d, tp, sp);

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
    if (et.total) { /* the experts' buffers and optimizer (engine.c, setup_experts) */
        const int edp = tp * dp / (ep * etp), ez = edp > 1 && c->optimizer.zero_stage > 0;
        const size_t eflat = lt_optim_flat_size(&et, edp), eshard = ez ? eflat / (size_t)edp : eflat;
        out->expert_elems = eflat;
        out->params += a * eflat;
        out->grads += 4 * eflat + (ez ? 4 * eshard : 0);
        out->optimizer += 3 * 4 * eshard;
    }
    lt_params_free(&et);

    /* activations kept per layer, per micro batch in flight (Korthikanti et
     * al.'s sbh terms for lattice's tensors; flash attention keeps only the
     * log-sum-exp, no s^2 term): LN1 and LN2 outputs, qkv, attention output,
     * the residual after attention, the MLP's activation tensors, norm
     * statistics and the log-sum-exp; with qk_layernorm the q and k heads before
     * their norm and its statistics; where the stage holds an MoE layer,
     * every layer's routed-expert buffers too (lt_moe_acts_alloc) */
    const size_t layer = a * (N * C + N * QKV + R * C + N * C + mlp_f * N * F) +
                         4 * (stats * R + N * H) + N * qk_heads * (a * HD + 4) +
                         (moe_any ? lt_plan_moe_acts_bytes(&ms, a) : 0), /* every slot layer's */
                 atty = a * N * CL, x = a * R * C;
    /* a slot holds the largest chunk's layers; its input even without layers */
    const size_t n = (size_t)t.max_chunk_layers, nx = n ? n : 1,
                 per_slot_io = nx * x + a * R * C + 4 * N + /* inputs, dout, tokens */
                               (moe_any && d.moe.shared_gate ? n * (a * R * C + 4 * R) : 0);
    /* (the shared expert's gate: its ungated output and the gate per slot layer, kept
     * whatever the recomputation) */
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
    ws += a * N * (CL > C ? CL : C) + a * N * QKV + a * N * F; /* dc, d3c, dff */
    if (llama) ws += a * 2 * N * F + 4 * T * HD; /* dgu, rotary table */
    if (moe_any) ws += lt_plan_moe_work_bytes(&ms, a);
    if (lt_dims_sinks(&d) == 1) ws += a * H; /* off-by-one's zero logits */
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

/* ---- step time ----------------------------------------------------------- */

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

double lt_plan_gemm_eff_at(const LtPlanDevice *g, double n) {
    return g->gemm_eff * n / (n + g->gemm_half_tokens);
}

/* One chunk's pass time, by part (seconds): the forward's and the backward's
 * compute (the backward's data and weight gradient halves), the TP
 * collectives of a pass and what of them stays exposed each way,
 * recomputation and its collectives; and the same compute by kind (gemm,
 * mem: memory-bound, attn: the attention core, head: the loss head), whose
 * sum is tf_c + tb_data + tb_weight + redo. */
typedef struct {
    double tf_c, tb_data, tb_weight, tpc, tpc_f, tpc_b, redo, tpc_redo;
    double epc_f, epc_b, epc_redo; /* the MoE layers' all-to-alls, each way and recomputed */
    double wait;                   /* of tpc_* or epc_*: the ranks' wait for each other */
    double gemm, mem, attn, head, mem_bytes, attn_flops, gemm_flops, a2a_bytes;
    double experts; /* of gemm: the MoE layers' experts and routers */
} PassTime;
#define PASS_FIELDS (sizeof(PassTime) / sizeof(double))

/* What a pass's time depends on (pass_model fills it for a layout); per
 * micro batch on one rank, seconds unless said. */
typedef struct {
    double layer_gemm;          /* a dense layer's forward GEMMs (each backward half alike) */
    double mem_f, mem_b;        /* a dense layer's memory-bound work, forward and backward */
    double attn_f, attn_b;      /* a layer's attention core, forward and backward */
    double attn_flops;          /* a layer's attention FLOPs, forward (backward: twice) */
    double first_f, first_b;    /* the first chunk's embedding */
    double last;                /* the last chunk's final norm (each way) */
    double head, head_bytes;    /* the loss head: logits, cross-entropy, their gradients */
    double mid_f, mid_b;        /* a chunk boundary's add, copy (not at the model's ends) */
    double elem_bw;             /* bytes per second of the memory-bound ops */
    double slow;                /* tp overlap's GEMM slowdown */
    double wait1, skew;         /* the ranks' wait at a blocking collective: seconds, and
                                 * of the compute since the previous one */
    double head_syncs;          /* the loss head's blocking TP collectives */
    double ring1;               /* one TP collective */
    double redo_gemm, redo_mem, redo_attn; /* a dense layer's recomputation */
    double redo_share;          /* of a forward's SP collectives that recomputation repeats */
    double flops, redo_flops;   /* a dense layer's GEMM FLOPs: forward, recomputed */
    /* an MoE layer in place of the dense terms: its TP-split GEMMs (moe.gemm), its
     * experts and router (moe.experts, not split over TP), memory-bound work, two
     * all-to-alls each way; recomputed: the GEMMs, the experts whole, the forward's
     * memory-bound work and all-to-alls (full), or the attention core only */
    LtPlanMoe moe;
    double moe_mem_f, moe_mem_b, redo_moe_mem, redo_moe_x, redo_a2a;
    int tp, sp, ov_tp;
} PassModel;

/* The ranks' waits for each other at a chunk's blocking collectives into p
 * (nd dense and nm MoE layers; first, last: the model's ends). Ranks that
 * run the same work between two blocking collectives do not finish it
 * together (the host's other threads and processes take a core from one of
 * them now and then): at each collective the others wait, on average
 * sync_skew_us and sync_skew of the compute since the previous one. The
 * collectives cut the pass's compute into such pieces, so the waits add up
 * to sync_skew_us per collective and sync_skew of the pass's compute (each
 * way, and of its recomputation), in the TP communication where there is
 * TP, else in the all-to-alls'. */
static void add_waits(const PassModel *m, int nd, int nm, int first, int last, PassTime *p) {
    double sf = 0.0, sb = 0.0, sr = 0.0; /* blocking collectives: forward, backward, redone */
    if (m->tp > 1) { /* per layer 2 all-reduces (SP: gathers and reduce-scatters), an MoE
                      * layer's MLP without a shared expert none; the embedding's; the
                      * loss head's */
        const double layer = (m->sp ? 2.0 : 1.0) * (2.0 * nd + (m->moe.shared ? 2.0 : 1.0) * nm);
        sf = layer + (first ? 1.0 : 0.0) + (last ? m->head_syncs : 0.0);
        sb = layer + (first ? 1.0 : 0.0);
        sr = m->redo_share * layer;
    }
    if (nm > 0 && m->moe.a2a > 0) { /* the counts, the dispatch and the combine; backward
                                     * the two all-to-alls */
        sf += 3.0 * nm, sb += 2.0 * nm, sr += m->redo_a2a > 0 ? 3.0 * nm : 0.0;
    }
    if (sf == 0 || (m->wait1 == 0 && m->skew == 0)) return;
    const double wf = sf * m->wait1 + m->skew * p->tf_c,
                 wb = sb * m->wait1 + m->skew * (p->tb_data + p->tb_weight),
                 wr = sr * m->wait1 + m->skew * p->redo;
    double *f = m->tp > 1 ? &p->tpc_f : &p->epc_f, *b = m->tp > 1 ? &p->tpc_b : &p->epc_b,
           *r = m->tp > 1 ? &p->tpc_redo : &p->epc_redo;
    *f += wf, *b += wb, *r += wr;
    p->wait = wf + wb + wr;
}

/* A chunk of n layers, nm of them MoE layers; first: the model's first (the
 * embedding), last: its last (final norm and the loss head, whose backward
 * runs in the forward pass as the engine runs it). tp_comm_overlap runs each
 * SP gather / reduce-scatter in blocks of one TP rank's rows behind the TP
 * GEMMs on the other blocks (forward: all of them; backward: the
 * data-gradient half), so a GEMM of N/tp rows runs at that size's
 * efficiency; the last block of each forward reduce-scatter stays exposed.
 * An MoE layer without a shared expert has the attention's SP collectives
 * only; its all-to-alls wait for nothing to hide behind. */
static PassTime pass_time(const PassModel *m, int n, int nm, int first, int last) {
    PassTime p = {0};
    const int nd = n - nm;
    const double g = nd * m->layer_gemm + nm * m->moe.gemm, x = nm * m->moe.experts;
    const double mf = nd * m->mem_f + nm * m->moe_mem_f + (first ? m->first_f : 0.0) +
                      (last ? m->last : 0.0) + (last ? 0.0 : m->mid_f),
                 mb = nd * m->mem_b + nm * m->moe_mem_b + (first ? m->first_b : 0.0) +
                      (last ? m->last : 0.0) + (first ? 0.0 : m->mid_b),
                 head = last ? m->head : 0.0;
    p.tpc = (2.0 * nd + (m->moe.shared ? 2.0 : 1.0) * nm) * m->ring1;
    p.tf_c = g * m->slow + x + mf + n * m->attn_f + head;
    p.tb_data = g * m->slow + x + mb + n * m->attn_b;
    p.tb_weight = g + x;
    p.tpc_f = p.tpc_b = p.tpc;
    if (m->ov_tp) {
        const double share = (m->tp - 1.0) / m->tp; /* the blocks that travel */
        /* per layer two reduce-scatters whose last block nothing follows */
        p.tpc_f = exposed(p.tpc, g * m->slow * share, p.tpc / (2.0 * (m->tp - 1)));
        p.tpc_b = exposed(p.tpc, g * m->slow * share, 0.0);
    }
    p.epc_f = p.epc_b = nm * 2.0 * m->moe.a2a;
    p.epc_redo = nm * m->redo_a2a;
    const double redo_g = nd * m->redo_gemm + nm * m->moe.redo_gemm, redo_x = nm * m->redo_moe_x;
    const double redo_m = nd * m->redo_mem + nm * m->redo_moe_mem;
    p.redo = redo_g * m->slow + redo_x + redo_m + n * m->redo_attn;
    p.tpc_redo = m->redo_share * p.tpc_f;
    p.gemm = g * (2.0 * m->slow + 1.0) + 3.0 * x + redo_g * m->slow + redo_x;
    p.experts = 3.0 * x + redo_x;
    p.mem = mf + mb + redo_m;
    p.attn = n * (m->attn_f + m->attn_b + m->redo_attn);
    p.head = head;
    p.mem_bytes = p.mem * m->elem_bw + (last ? m->head_bytes : 0.0);
    p.attn_flops = n * m->attn_flops * (3.0 + (m->redo_attn > 0 ? 1.0 : 0.0));
    p.gemm_flops = 3.0 * (nd * m->flops + nm * m->moe.flops) +
                   (m->redo_gemm > 0 ? nd * m->redo_flops + nm * m->moe.redo_flops : 0.0);
    p.a2a_bytes = nm * (4.0 + (m->redo_a2a > 0 ? 2.0 : 0.0)) * m->moe.a2a_bytes;
    add_waits(m, nd, nm, first, last, &p);
    return p;
}
static double pass_total(const PassTime *p) {
    return p->tf_c + p->tpc_f + p->epc_f + p->tb_data + p->tb_weight + p->tpc_b + p->epc_b +
           p->redo + p->tpc_redo + p->epc_redo;
}
static void pass_add(PassTime *to, PassTime p) {
    double *t = (double *)to;
    const double *f = (const double *)&p;
    for (size_t i = 0; i < PASS_FIELDS; i++) t[i] += f[i];
}
static void pass_scale(PassTime *p, double f) {
    double *t = (double *)p;
    for (size_t i = 0; i < PASS_FIELDS; i++) t[i] *= f;
}

/* The sizes of layout k that every part of its step reads. */
typedef struct {
    LtModelDims d;
    double a, peak, lat;  /* bytes per activation, FLOP/s, seconds per ring step */
    double S, N, C;       /* sequence, tokens per micro batch, hidden */
    int G, M, V, P;       /* global batch, micro batches per step, chunks, stages */
    int head_chunk;       /* rows per block of the loss head (train.lm_head_chunk) */
} StepSizes;

static StepSizes step_sizes(const LtConfig *c, const LtPlanDevice *g, const Cand *k) {
    StepSizes z;
    z.d = lt_dims_from_config(c);
    z.a = c->train.precision == LT_PREC_BF16 ? 2.0 : 4.0;
    z.peak = (c->train.precision == LT_PREC_BF16 ? g->bf16_tflops : g->fp32_tflops) * 1e12;
    z.G = c->train.global_batch_size, z.M = z.G / (k->mbs * k->dp), z.V = k->vpp, z.P = k->pp;
    z.S = c->model.seq_length, z.N = (double)k->mbs * z.S, z.C = z.d.hidden;
    z.lat = g->latency_us * 1e-6;
    z.head_chunk = lt_model_lm_head_chunk((size_t)z.N, (size_t)z.d.padded_vocab / (size_t)k->tp,
                                          (size_t)z.a, c->train.lm_head_chunk);
    return z;
}

/* A layer's memory-bound bytes on one rank per micro batch, forward (*f) and
 * backward (*b), as the kernels' design notes count them (s: bytes per
 * activation; R: the rows a norm sees, N/tp under SP): both norms fused with
 * their residual add 4s R C each way; GeLU 3s N F each way, SwiGLU 3s
 * forward, 5s backward; RoPE 2s per rotated q and k element each way; the
 * bias gradients (GPT's; Llama's with add_qkv_bias / add_bias_linear) read
 * their outputs' gradients once (s per element); the
 * per-head q/k norm (qk_layernorm) 3s per q and k element forward (read,
 * keep the input, write), 5s backward (its weight gradients read dout and
 * the input once more). mlp:
 * with the dense MLP (an MoE layer's routed and shared experts are
 * lt_plan_moe_layer's). */
static void layer_bytes(const StepSizes *z, const Cand *k, int mlp, double *f, double *b) {
    const LtModelDims *d = &z->d;
    const int llama = d->arch == LT_ARCH_LLAMA;
    const double s = z->a, N = z->N, C = z->C, F = mlp ? (double)d->ffn / k->tp : 0.0,
                 R = k->sp ? N / k->tp : N, HD = lt_dims_head_dim(d),
                 QK = ((double)d->heads + lt_dims_kv_heads(d)) * HD / k->tp,
                 QKV = ((double)d->heads + 2.0 * lt_dims_kv_heads(d)) * HD / k->tp;
    const double norms = 2.0 * 4.0 * s * R * C, rope = llama ? 2.0 * s * N * QK : 0.0;
    const double qkn = d->qk_norm ? s * N * QK : 0.0;
    *f = norms + 3.0 * s * N * F + rope + 3.0 * qkn;
    const double bias = (lt_dims_qkv_bias(d) ? QKV : 0.0) +
                        (lt_dims_linear_bias(d) ? C + (mlp ? (llama ? 2.0 : 1.0) * F + C : 0.0)
                                                : 0.0);
    *b = norms + (llama ? 5.0 : 3.0) * s * N * F + rope + 5.0 * qkn + s * N * bias;
}

/* The causal rate (TFLOP/s) of implementation `kind` (LT_PLAN_ATTN_*) forward or
 * backward, at the run's sequence length and head dimension. */
static double causal_tflops(const LtConfig *c, const LtPlanDevice *g, int kind, int bwd) {
    const double at_ref = kind == LT_PLAN_ATTN_LATTICE
                              ? (bwd ? g->attn_bwd_tflops : g->attn_fwd_tflops)
                              : (bwd ? g->cudnn_bwd_tflops : g->cudnn_fwd_tflops);
    return at_ref * lt_plan_attn_shape(g, kind, bwd, c->model.seq_length, c->model.kv_channels);
}

/* The attention core's rates (FLOP/s forward, backward) and *cudnn: cuDNN's
 * where the config lets model.attention pick it (auto or cudnn) in bf16 on a
 * device with cuDNN figures, else lattice's own (the CPU loop on the CPU); on
 * a GPU at the run's sequence length and head dimension (the figures hold
 * T 2048, HD 128) and, for cuDNN's backward, its determinism. */
static void attention_rates(const LtConfig *c, const LtPlanDevice *g, double *fwd, double *bwd,
                            int *cudnn) {
    *cudnn = c->model.attention != LT_ATTN_LATTICE && c->train.precision == LT_PREC_BF16 &&
             g->cudnn_fwd_tflops > 0 && g->cudnn_bwd_tflops > 0;
    const int kind = !*cudnn                             ? LT_PLAN_ATTN_LATTICE
                     : c->model.attention_deterministic ? LT_PLAN_ATTN_CUDNN
                                                         : LT_PLAN_ATTN_CUDNN_NONDET;
    *fwd = causal_tflops(c, g, kind, 0) * 1e12;
    *bwd = causal_tflops(c, g, kind, 1) * 1e12;
}

/* A sliding-window layer's rates, as the engine runs it: the forward on
 * cuDNN's kernels where the causal layers run there, the backward too only
 * under model.attention=cudnn with a deterministic backward (auto leaves that
 * one to lattice's kernels, attn_select.c; a non-deterministic cuDNN band
 * backward measured on par with lattice's, whose figure stands in for it).
 * Without window figures, the causal rates at the run's shape (the band's
 * figures are measured at a window's own shape and taken as they are). */
static void window_rates(const LtConfig *c, const LtPlanDevice *g, int cudnn, double *fwd,
                         double *bwd) {
    const int L = LT_PLAN_ATTN_LATTICE, C = LT_PLAN_ATTN_CUDNN;
    const double lf = g->attn_win_fwd_tflops > 0 ? g->attn_win_fwd_tflops : causal_tflops(c, g, L, 0),
                 lb = g->attn_win_bwd_tflops > 0 ? g->attn_win_bwd_tflops : causal_tflops(c, g, L, 1);
    *fwd = (cudnn ? (g->cudnn_win_fwd_tflops > 0 ? g->cudnn_win_fwd_tflops : causal_tflops(c, g, C, 0))
                  : lf) * 1e12;
    const int cudnn_bwd = cudnn && c->model.attention == LT_ATTN_CUDNN &&
                          c->model.attention_deterministic;
    *bwd = (cudnn_bwd ? (g->cudnn_win_bwd_tflops > 0 ? g->cudnn_win_bwd_tflops
                                                     : causal_tflops(c, g, C, 1))
                      : lb) * 1e12;
}

/* The attention core of an average layer of the model (the planner paces
 * stages by layer counts): seconds forward (*tf) and backward (*tb) of
 * `flops` forward FLOPs per causal layer at the causal rates, a windowed
 * layer's band share of them at the window's rates; *share: the FLOPs' share
 * computed (the band's). */
static void attention_time(const LtConfig *c, const LtPlanDevice *g, const LtModelDims *d,
                           int cudnn, double flops, double fwd, double bwd, double *tf,
                           double *tb, double *share) {
    double wf, wb;
    window_rates(c, g, cudnn, &wf, &wb);
    double sf = 0.0, sb = 0.0, fr = 0.0;
    for (int l = 0; l < d->num_layers; l++) {
        const double f = lt_model_window_fraction(d, l);
        const int win = f < 1.0;
        fr += f;
        sf += f * flops / (win ? wf : fwd);
        sb += f * 2.0 * flops / (win ? wb : bwd);
    }
    const double L = d->num_layers > 0 ? d->num_layers : 1;
    *tf = sf / L, *tb = sb / L, *share = fr / L;
}

/* The loss head of one micro batch on one rank: the logits GEMM and its two
 * gradients (2 h V/tp per token each) in blocks of head_chunk rows, at that
 * size's GEMM efficiency, and the softmax / cross-entropy over the logits
 * (3s per logit; vocab-parallel 4s: two statistics passes and the finish). */
static double head_time(const StepSizes *z, const LtPlanDevice *g, const Cand *k, double *bytes) {
    const double Vl = (double)z->d.padded_vocab / k->tp;
    const double flops = 3.0 * z->N * 2.0 * z->C * Vl;
    *bytes = (k->tp > 1 ? 4.0 : 3.0) * z->a * z->N * Vl;
    return flops / (z->peak * lt_plan_gemm_eff_at(g, z->head_chunk)) + *bytes / (g->xent_gbs * 1e9);
}

/* The time of one chunk of one micro batch on one rank (pass_time): GEMMs
 * with few rows run below the large-GEMM efficiency (--calibrate fits the
 * curve); the memory-bound ops' bytes (layer_bytes, the embedding 3s per
 * element forward and 8 + s backward, the final norm 4s each way, a chunk
 * boundary's add 3s and copy s) at elem_gbs; the attention core (4 s h FLOPs
 * per token forward, 8 s h backward) at its rate; two all-reduces (or
 * all-gather + reduce-scatter with SP) per layer each way; recomputation in
 * the backward: full the layers' forward up to the MLP activation (GEMMs,
 * memory-bound work, attention; with 3 of its 4 SP gathers and
 * reduce-scatters), selective the attention core, at the forward's pace. */
static PassModel pass_model(const LtConfig *c, const StepSizes *z, const LtPlanDevice *g, int gpn,
                            Cand *k) {
    const LtModelDims *d = &z->d;
    const double N = z->N, C = z->C, s = z->a, bw = g->elem_gbs * 1e9;
    const double R = k->sp ? N / k->tp : N, eff = z->peak * lt_plan_gemm_eff_at(g, N);
    const int full_rc = k->rc == LT_RECOMPUTE_FULL;
    const double intra = k->tp <= gpn ? g->intra_gbs : g->net_gbs;
    double fwd_rate, bwd_rate, bytes_f, bytes_b, flops, redo_flops;
    attention_rates(c, g, &fwd_rate, &bwd_rate, &k->cudnn);
    layer_bytes(z, k, 1, &bytes_f, &bytes_b);
    lt_plan_layer_flops(d, 0, &flops, &redo_flops); /* per token */
    /* the model's count over the full square, a windowed layer its band's share */
    const double square = N * 4.0 * z->S * lt_dims_q_width(d) / k->tp;
    double attn_f, attn_b, share;
    attention_time(c, g, d, k->cudnn, square, fwd_rate, bwd_rate, &attn_f, &attn_b, &share);
    const double attn_flops = square * share;
    PassModel m = {
        .layer_gemm = flops * N / k->tp / eff,
        .flops = flops * N / k->tp, .redo_flops = redo_flops * N / k->tp,
        .mem_f = bytes_f / bw, .mem_b = bytes_b / bw,
        .attn_f = attn_f, .attn_b = attn_b,
        .attn_flops = attn_flops,
        .elem_bw = bw,
        .slow = k->ov_tp ? lt_plan_gemm_eff_at(g, N) / lt_plan_gemm_eff_at(g, N / k->tp) : 1.0,
        .wait1 = g->sync_skew_us * 1e-6, .skew = g->sync_skew,
        /* per block of rows two statistics all-reduces; its input's gather
         * and its gradient's reduction (without SP an all-reduce) */
        .head_syncs = 2.0 * ceil(N / z->head_chunk) + (k->sp ? 2.0 : 1.0),
        .sp = k->sp,
        .ring1 = ring(z->a * N * C, k->tp, intra, z->lat),
        .redo_share = full_rc ? 0.75 : 0.0,
        .tp = k->tp,
        .ov_tp = k->ov_tp};
    m.first_f = 3.0 * s * N * C / bw, m.first_b = (8.0 + s) * N * C / bw;
    m.last = 4.5 * s * R * C / bw; /* each way: the norm; its gradient's zeroing */
    m.mid_f = 3.0 * s * R * C / bw, m.mid_b = s * R * C / bw;
    m.head = head_time(z, g, k, &m.head_bytes);
    if (d->moe.experts > 0) {
        lt_plan_moe_layer(c, g, gpn, k, z->peak, s, &m.moe);
        layer_bytes(z, k, 0, &bytes_f, &bytes_b); /* its attention half */
        m.moe_mem_f = (bytes_f + m.moe.bytes_f) / bw, m.moe_mem_b = (bytes_b + m.moe.bytes_b) / bw;
    }
    if (k->rc != LT_RECOMPUTE_NONE) {
        m.redo_attn = m.attn_f;
        m.redo_gemm = full_rc ? redo_flops * N / k->tp / eff : 0.0;
        m.redo_mem = full_rc ? m.mem_f : 0.0;
        m.redo_moe_mem = full_rc ? m.moe_mem_f : 0.0;
        m.redo_moe_x = full_rc ? m.moe.experts : 0.0;
        m.redo_a2a = full_rc ? 2.0 * m.moe.a2a : 0.0;
    }
    if (!full_rc) m.moe.redo_gemm = 0.0;
    return m;
}

/* Chunk v of stage q of layout k: its pass time (its layers, n of them, and
 * which of them are MoE layers; the model's ends). */
static PassTime chunk_time(const PassModel *pm, const LtModelDims *d, const Cand *k, int q, int v,
                           int *n) {
    const int P = k->pp, V = k->vpp, L = d->num_layers;
    *n = lt_layer_split_count(&k->split, L, P, V, q, v);
    const int first = lt_layer_split_start(&k->split, L, P, V, q, v);
    int nm = 0;
    for (int l = first; l < first + *n; l++) nm += lt_dims_moe_layer(d, l);
    return pass_time(pm, *n, nm, q == 0 && v == 0, q == P - 1 && v == V - 1);
}

/* The average chunk of the stage with the most time, which sets the
 * pipeline's pace; *layers: that stage's layers per chunk. */
static PassTime pacing_chunk(const PassModel *pm, const LtModelDims *d, const Cand *k,
                             double *layers) {
    const int P = k->pp, V = k->vpp;
    PassTime pace = {0};
    double pace_time = -1.0;
    *layers = 0.0;
    for (int q = 0; q < P; q++) {
        PassTime sum = {0};
        int n = 0;
        for (int v = 0; v < V; v++) {
            int nl;
            pass_add(&sum, chunk_time(pm, d, k, q, v, &nl));
            n += nl;
        }
        if (pass_total(&sum) > pace_time) pace = sum, pace_time = pass_total(&sum), *layers = (double)n / V;
    }
    pass_scale(&pace, 1.0 / V);
    return pace;
}

/* A pacing pass each way with its exposed communication, and a
 * stage-to-stage transfer: its time, what of it the receiving pass waits
 * for (xfer), and when it arrives after the send. */
typedef struct {
    double tf_all, tb_all, p2p, xfer, arrive;
} PipeTimes;

/* A stage-to-stage transfer is on the receiving pass's time, unless the
 * receive was posted ahead (overlap_p2p_comm over MPI; a large MPI message
 * moves once its receive is posted, NCCL's in order on the compute stream);
 * then it runs behind the compute and arrives p2p after the send. */
static PipeTimes pipe_times(const StepSizes *z, const PassTime *pace, const LtPlanDevice *g,
                            int gpn, const Cand *k) {
    PipeTimes t;
    t.tf_all = pace->tf_c + pace->tpc_f + pace->epc_f;
    t.tb_all = pace->tb_data + pace->tb_weight + pace->tpc_b + pace->redo + pace->tpc_redo +
               pace->epc_b + pace->epc_redo;
    /* a stage holds tp * dp consecutive ranks: boundaries cross nodes when that fills one */
    const double p2p_gbs = k->tp * k->dp >= gpn ? g->net_gbs : g->intra_gbs;
    t.p2p = z->P > 1 ? z->a * z->N * z->C / (k->sp ? k->tp : 1) / (p2p_gbs * 1e9) + z->lat : 0.0;
    t.xfer = z->P > 1 && !k->ov_p2p ? t.p2p : 0.0;
    t.arrive = z->P > 1 ? (k->ov_p2p ? t.p2p : z->lat) : 0.0;
    return t;
}

/* The pipeline's time for a step's passes: a formula, or with sim the
 * schedule simulator's makespan (k->simulated says which was used). */
static double pipeline_makespan(const PassModel *pm, const StepSizes *z, const PipeTimes *t,
                                Cand *k, int sim) {
    const int P = z->P, V = z->V, M = z->M;
    double makespan = (V * (double)M + P - 1) * (t->tf_all + t->tb_all + 2.0 * t->xfer) +
                      2.0 * (P - 1) * t->arrive;
    if (P == 1) k->simulated = 1; /* no pipeline: no bubble to simulate */
    if (!sim || P == 1) return makespan;
    /* each chunk at its own time over the pacing stage's average chunk: its
     * layers, and the LM head on the model's last chunk only (an
     * approximation: its transfer scales alike) */
    double *scale = lt_malloc(sizeof(double) * (size_t)(P * V));
    for (int v = 0; v < P * V; v++) {
        int nl;
        const PassTime p = chunk_time(pm, &z->d, k, v % P, v / P, &nl);
        scale[v] = pass_total(&p) / (t->tf_all + t->tb_all);
    }
    LtSimResult res;
    char err[256];
    if (lt_schedule_simulate_all(P, V, M,
                                 (LtSimCost){t->tf_all + t->xfer, t->tb_all + t->xfer, t->arrive,
                                             scale},
                                 &res, err, sizeof err) == 0) {
        makespan = res.makespan;
        lt_sim_free(&res);
        k->simulated = 1;
    }
    free(scale);
    return makespan;
}

/* The expert-data-parallel group of k: the stage's ranks holding the same experts. */
static int cand_edp(const Cand *k) {
    return k->tp * k->dp / ((k->ep > 0 ? k->ep : 1) * (k->etp > 0 ? k->etp : 1));
}

/* Data parallel: the gradient reduction (fp32: an all-reduce, with ZeRO a
 * reduce-scatter - ZeRO 2's after every micro batch), with ZeRO the weights'
 * gather; buckets of parallel.bucket_size parameters (ZeRO 2: one per
 * parameter group, a layer or the embeddings). Fills k->dp_comm (exposed)
 * and k->hidden_dp; layers: the pacing stage's layers per chunk. */
static void dp_time(const LtConfig *c, const LtPlanDevice *g, int gpn, const StepSizes *z,
                    const PipeTimes *t, double layers, Cand *k) {
    const double a = z->a, lat = z->lat, passes = z->V * (double)z->M;
    const double experts = (double)k->mem.expert_elems, local = (double)k->mem.params / a - experts;
    const double dp_gbs = k->tp * k->dp > gpn ? g->net_gbs : g->intra_gbs;
    const double reduce = k->zero == 0 ? ring(4.0 * local, k->dp, dp_gbs, lat)
                                       : ring(4.0 * local, k->dp, dp_gbs, lat) / 2.0;
    const double gather = k->zero ? ring(a * local, k->dp, dp_gbs, lat) / 2.0 : 0.0;
    const double buckets = fmax(1.0, ceil(local / (double)c->parallel.bucket_size));
    const double groups = layers * z->V + 1.0;
    double reduce_x, gather_x;
    if (k->zero == 2) {
        /* behind each backward, and behind the next forward at most the two
         * reductions in flight (LT_OPTIM_RING); a slower reduction stalls */
        const double total = z->M * reduce, one = reduce / groups;
        const double window = passes * (t->tb_all + fmin(t->tf_all, LT_OPTIM_RING * one));
        reduce_x = k->ov_grad ? exposed(total, window, one) : total;
    } else {
        reduce_x = k->ov_grad ? exposed(reduce, z->V * t->tb_all, reduce / buckets) : reduce;
    }
    gather_x = k->ov_param ? exposed(gather, z->V * t->tf_all, gather / buckets) : gather;
    k->dp_comm = reduce_x + gather_x;
    k->hidden_dp = fmax(0.0, (k->zero == 2 ? z->M * reduce : reduce) + gather - k->dp_comm);
    /* expert parallelism: the experts' reduction over their data-parallel group
     * (a reduce-scatter and gather with ZeRO >= 1: their optimizer's stage is
     * at most 1). With the overlap switches their buckets (cut between MoE
     * layers, parallel.bucket_size) run behind the same last backward and
     * first forward, in what the dense buckets left of them (the links are
     * shared); a bucket per layer at most */
    const int edp = cand_edp(k);
    if (experts > 0.0 && edp > 1) {
        const int ez = k->zero > 0;
        const double er = ring(4.0 * experts, edp, dp_gbs, lat) / (ez ? 2.0 : 1.0);
        const double eg = ez ? ring(a * experts, edp, dp_gbs, lat) / 2.0 : 0.0;
        const double eb = fmax(1.0, fmin(layers * z->V, ceil(experts / (double)c->parallel.bucket_size)));
        const double dense_b = k->zero == 2 ? fmin(reduce, z->V * t->tb_all) : reduce - reduce_x;
        const double win_b = fmax(0.0, z->V * t->tb_all - dense_b);
        const double win_f = fmax(0.0, z->V * t->tf_all - (gather - gather_x));
        const double er_x = k->eov_grad ? exposed(er, win_b, er / eb) : er;
        const double eg_x = k->eov_param ? exposed(eg, win_f, eg / eb) : eg;
        k->dp_comm += er_x + eg_x;
        k->hidden_dp += er + eg - er_x - eg_x;
    }
}

/* Predicted step time; sim: take the makespan from the schedule simulator.
 * The overlap switches of c (as lt_plan_layout_config left them) hide
 * communication as the engine overlaps it (docs: the planner page):
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
void lt_plan_step_time(const LtConfig *c, const LtPlanDevice *g, int gpn, Cand *k, int sim) {
    const StepSizes z = step_sizes(c, g, k);
    const PassModel pm = pass_model(c, &z, g, gpn, k);
    double layers;
    const PassTime pace = pacing_chunk(&pm, &z.d, k, &layers);
    const PipeTimes t = pipe_times(&z, &pace, g, gpn, k);
    const double makespan = pipeline_makespan(&pm, &z, &t, k, sim);
    const double passes = z.V * (double)z.M;
    const double busy = passes * (pace.tf_c + pace.tb_data + pace.tb_weight + pace.redo);
    k->compute = busy;
    k->tp_comm = passes * (pace.tpc_f + pace.tpc_b + pace.tpc_redo);
    k->sync_wait = passes * pace.wait;
    k->hidden_tp = fmax(0.0, passes * (2.0 + pm.redo_share) * pace.tpc -
                                 (k->tp_comm - (k->tp > 1 ? k->sync_wait : 0.0)));
    k->pp_comm = 2.0 * passes * t.xfer;
    k->hidden_pp = z.P > 1 ? 2.0 * passes * (t.p2p - t.xfer) : 0.0;
    k->ep_comm = passes * (pace.epc_f + pace.epc_b + pace.epc_redo);
    k->bubble = makespan - busy - k->tp_comm - k->pp_comm - k->ep_comm;
    if (k->bubble < 0) k->bubble = 0;
    dp_time(c, g, gpn, &z, &t, layers, k);
    const double experts = (double)k->mem.expert_elems, local = (double)k->mem.params / z.a;
    const int edp = cand_edp(k);
    const double shard = (k->zero ? (local - experts) / k->dp : local - experts) +
                         (c->optimizer.zero_stage && edp > 1 ? experts / edp : experts);
    k->optim = shard * (28.0 + z.a) / (g->optim_gbs * 1e9);
    /* the step's gradient zeroing: 4 bytes written per local parameter */
    const double zero_bytes = 4.0 * local, zero = zero_bytes / (g->elem_gbs * 1e9);
    k->gemm = passes * pace.gemm, k->attention = passes * pace.attn;
    k->loss_head = passes * pace.head, k->experts = passes * pace.experts;
    k->membound = passes * pace.mem + zero;
    k->mem_bytes = passes * pace.mem_bytes + zero_bytes;
    k->attn_flops = passes * pace.attn_flops;
    k->gemm_flops = passes * pace.gemm_flops, k->a2a_bytes = passes * pace.a2a_bytes;
    k->compute = busy + zero; /* = gemm + membound + attention + loss_head */
    k->step = makespan + k->dp_comm + k->optim + zero;
    k->mfu = lt_model_flops_per_sample(&z.d, 0) * z.G / k->step /
             (k->tp * k->pp * k->dp * z.peak);
    k->tokens_per_s = z.G * z.S / k->step;
}

/* The overlap switches of mode in c, where its layout allows them. */
void lt_plan_apply_overlap(LtConfig *c, OverlapMode mode) {
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
int lt_plan_layout_config(const LtConfig *base, Cand *k, LtConfig *c, int world, OverlapMode mode,
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
    if (k->ep < 1) k->ep = 1;
    c->parallel.expert_model_parallel_size = k->ep;
    if (k->etp < 1) /* (not enumerated: the config's) */
        k->etp = c->parallel.expert_tensor_parallel_size;
    c->parallel.expert_tensor_parallel_size = k->etp;
    c->train.micro_batch_size = k->mbs;
    c->train.recompute = k->rc;
    c->optimizer.zero_stage = k->zero;
    lt_plan_apply_overlap(c, mode);
    k->ov_grad = c->parallel.overlap_grad_reduce && k->dp > 1;
    k->ov_param = c->parallel.overlap_param_gather && k->dp > 1;
    /* the experts' group overlaps on its own (its size, not DP's; their ZeRO is 0 or 1) */
    k->eov_grad = c->parallel.overlap_grad_reduce && cand_edp(k) > 1;
    k->eov_param = c->parallel.overlap_param_gather && cand_edp(k) > 1 && k->zero > 0;
    k->ov_tp = c->parallel.tp_comm_overlap && k->tp > 1;
    k->ov_p2p = c->parallel.overlap_p2p_comm && k->pp > 1 && mpi;
    char err[512];
    return lt_config_validate(c, world, err, sizeof err);
}

void lt_plan_memory_max(const LtConfig *c, Cand *k, size_t a, int mpi) {
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
                 size_t act_bytes, int mpi_p2p, double moe_load, LtPlanStep *out, char *err,
                 size_t errlen) {
    memset(out, 0, sizeof *out);
    const int tp = cfg->parallel.tensor_model_parallel_size,
              P = cfg->parallel.pipeline_model_parallel_size;
    Cand k = {.tp = tp, .pp = P, .vpp = cfg->parallel.virtual_pipeline_model_parallel_size,
              .dp = world / (tp * P), .mbs = cfg->train.micro_batch_size,
              .rc = cfg->train.recompute, .zero = cfg->optimizer.zero_stage,
              .sp = cfg->parallel.sequence_parallel, .split = lt_config_layer_split(cfg),
              .ep = cfg->parallel.expert_model_parallel_size,
              .etp = cfg->parallel.expert_tensor_parallel_size, .moe_load = moe_load};
    LtConfig c;
    if (tp < 1 || P < 1 || world % (tp * P) || lt_plan_layout_config(cfg, &k, &c, world, OV_CONFIG, mpi_p2p))
        return lt_errorf(err, errlen, "the layout does not validate for %d ranks", world);
    lt_plan_memory_max(&c, &k, act_bytes, mpi_p2p); /* the largest stage, as the table's rows */
    lt_plan_step_time(&c, dev, gpus_per_node, &k, 1);
    *out = (LtPlanStep){.step = k.step, .compute = k.compute, .bubble = k.bubble,
                        .tp_comm = k.tp_comm, .pp_comm = k.pp_comm, .dp_comm = k.dp_comm,
                        .ep_comm = k.ep_comm, .gemm_flops = k.gemm_flops,
                        .a2a_bytes = k.a2a_bytes,
                        .optim = k.optim, .hidden_tp = k.hidden_tp, .hidden_pp = k.hidden_pp,
                        .hidden_dp = k.hidden_dp, .tokens_per_s = k.tokens_per_s, .mfu = k.mfu,
                        .gemm = k.gemm, .membound = k.membound, .attention = k.attention,
                        .loss_head = k.loss_head, .experts = k.experts,
                        .mem_bytes = k.mem_bytes,
                        .attn_flops = k.attn_flops, .sync_wait = k.sync_wait,
                        .attention_impl = k.cudnn ? "cudnn" : dev->threads > 0 ||
                                          !strcmp(dev->name, "cpu") ? "cpu" : "lattice"};
    overlap_words(&k, out->overlap, sizeof out->overlap);
    return 0;
}

