/* plan_moe.c - the planner's mixture-of-experts terms (plan_internal.h): the
 * routed-expert buffers the engine allocates (src/model/moe.c), a layer's
 * forward FLOPs by kind as the model counts them, and the time of an MoE
 * layer's parts - the router, the experts' GEMMs at the rows each expert
 * gets, the permute / unpermute traffic and the all-to-alls of expert
 * parallelism. */
#include "plan_internal.h"

#include <math.h>

#include "model.h"

/* ---- memory -------------------------------------------------------------- */

LtMoeShape lt_plan_moe_shape(const LtConfig *c, const LtModelDims *d, int tp, int sp) {
    const int B = c->train.micro_batch_size, T = c->model.seq_length, N = B * T;
    return lt_moe_shape(&d->moe, d->arch, B, T, d->hidden, sp ? N / tp : N, 0,
                        c->parallel.expert_model_parallel_size, 0,
                        c->parallel.expert_tensor_parallel_size, 0);
}

size_t lt_plan_moe_acts_bytes(const LtMoeShape *s, size_t a) {
    const size_t R = (size_t)s->R, E = (size_t)s->E, K = (size_t)s->K, M = (size_t)s->M,
                 Mr = (size_t)s->Mr, C = (size_t)s->C, F = (size_t)s->F;
    /* logits, idx, w, pos, src, offsets, dropped, counts, psum; zsum */
    size_t b = 4 * (R * E + 3 * R * K + M + (E + 1) + 1 + 2 * (size_t)s->groups * E) + 8;
    b += a * (2 * M * C + Mr * F * (s->llama ? 3 : 2) + R * C); /* xp, y; hpre, h; out */
    if (s->ep > 1 || s->etp > 1) b += a * 2 * Mr * C + 4 * 2 * Mr; /* xe, ye; ge, ginv */
    return b;
}

size_t lt_plan_moe_work_bytes(const LtMoeShape *s, size_t a) {
    const size_t C = (size_t)s->C, F = (size_t)s->F, Mw = (size_t)(s->M > s->Mr ? s->M : s->Mr);
    /* dy, dxp, dh, dhpre (SwiGLU), xr (EP or ETP); dw and dlogits */
    return a * Mw * (2 * C + F + (s->llama ? 2 * F : 0) + (s->ep > 1 || s->etp > 1 ? C : 0)) +
           4 * (size_t)s->R * (size_t)(s->K + s->E);
}

/* ---- FLOPs and time ------------------------------------------------------ */

void lt_plan_layer_flops(const LtModelDims *d, int moe, double *fwd, double *redo) {
    LtModelDims one = *d; /* one layer of that kind: the model's own count */
    one.num_layers = 1;
    one.moe.layer[0] = (unsigned char)moe;
    /* less the attention core as that count has it (the planner times it apart): the
     * query heads' width, which is not the hidden size when kv_channels sets the head
     * dimension (GPT-OSS: 64 x 64 against 2880), and a windowed layer's band alone */
    const double S = d->seq_len, C = d->hidden,
                 attn = 4.0 * S * lt_dims_q_width(d) * lt_model_window_fraction(&one, 0);
    *fwd = lt_model_flops_per_sample(&one, 0) / (3.0 * S) - 2.0 * C * d->padded_vocab - attn;
    *redo = lt_model_recompute_flops_per_sample(&one, 1) / S - attn;
}

/* 1 when an expert-parallel group of layout k (blocks of ep consecutive
 * ranks in each stage's tp x dp, stages of consecutive ranks) spans nodes of
 * gpn ranks. */
static int ep_spans_nodes(const Cand *k, int gpn) {
    const int stage = k->tp * k->dp;
    for (int q = 0; q < k->pp; q++)
        for (int first = q * stage; first < (q + 1) * stage; first += k->ep)
            if (first / gpn != (first + k->ep - 1) / gpn) return 1;
    return 0;
}

/* Rows one rank's experts compute per micro batch in balance (what it sends:
 * R K, fewer past a capacity, E x capacity padded). */
static double expert_rows(const LtMoeShape *s, const LtModelDims *d) {
    const double rk = (double)s->R * s->K, ec = (double)s->E * s->capacity;
    if (s->capacity <= 0) return rk;
    return d->moe.pad ? ec : fmin(rk, ec);
}

/* The memory-bound bytes of an MoE layer's routed half and of its shared
 * expert (s: bytes per activation), forward and backward; paced: the rows the
 * rank's experts get over the balanced rows (lt_plan_moe_rank_load), which
 * scales what runs on the experts' side of the all-to-alls. */
static void moe_bytes(const LtModelDims *d, const LtMoeShape *ms, const Cand *k, double s,
                      double rows, double paced, double *f, double *b) {
    const int llama = d->arch == LT_ARCH_LLAMA, bias = lt_dims_linear_bias(d);
    const double fw = llama ? 2.0 : 1.0; /* the first linear's outputs per width: gate | up */
    const double C = d->hidden, N = ms->N, R = ms->R, E = ms->E, Fm = d->moe.ffn,
                 Fs = (double)d->moe.shared_ffn / k->tp;
    /* permute 2s, unpermute s (rows + R) forward and s (2 rows + R) back (the
     * weights' gradient reads y), per row element; the experts' activation as
     * the dense MLP's; the router's fp32 scores read twice (top-k, the
     * load-balancing statistics) each way; EP's reorder 2s each way twice */
    const double xr = paced * rows; /* the rows the experts compute */
    const double route = 2.0 * 4.0 * R * E, reorder = k->ep > 1 ? 2.0 * 2.0 * s * xr * C : 0.0;
    *f = 2.0 * s * rows * C + s * (rows + R) * C + 3.0 * s * xr * Fm + route + reorder;
    *b = 2.0 * s * rows * C + s * (2.0 * rows + R) * C + (llama ? 5.0 : 3.0) * s * xr * Fm +
         route + reorder + (bias ? s * xr * (fw * Fm + C) : 0.0); /* the expert biases */
    if (Fs > 0) { /* the shared expert on every row, and its output added to the routed one */
        *f += 3.0 * s * N * Fs + 3.0 * s * R * C;
        *b += (llama ? 5.0 : 3.0) * s * N * Fs + (bias ? s * N * (fw * Fs + C) : 0.0);
    }
}

/* The rows of the most loaded rank of an expert-parallel group over the
 * mean, when the most loaded expert gets `load` times the mean rows and the
 * other E - 1 share the rest evenly (E experts, e = E / ep per rank): its
 * rank holds it and e - 1 others, (load + (e - 1) (E - load) / (E - 1)) / e.
 * Linear in load, so a mean of per-layer loads gives the mean factor. The
 * all-to-alls make the other ranks wait for that rank at every MoE layer. An
 * expert gets each token at most once: load <= E / top-k. */
double lt_plan_moe_rank_load(double load, int experts, int topk, int ep) {
    if (!(load > 1.0) || ep <= 1 || experts <= 1) return 1.0;
    const double E = experts, e = E / ep, most = topk > 0 ? E / topk : E;
    if (load > most) load = most;
    return (load + (e - 1.0) * (E - load) / (E - 1.0)) / e;
}

void lt_plan_moe_layer(const LtConfig *c, const LtPlanDevice *g, int gpn, const Cand *k,
                       double peak, double act, LtPlanMoe *out) {
    const LtModelDims d = lt_dims_from_config(c);
    const LtMoeShape ms = lt_plan_moe_shape(c, &d, k->tp, k->sp);
    const double C = d.hidden, N = ms.N, R = ms.R, in = d.arch == LT_ARCH_LLAMA ? 4.0 : 2.0;
    const double rows = expert_rows(&ms, &d), per_row = (in + 2.0) * C * d.moe.ffn,
                 router = 2.0 * C * d.moe.experts;
    double fwd, redo;
    lt_plan_layer_flops(&d, 1, &fwd, &redo);
    const double dense = (fwd - d.moe.topk * per_row - router) * N / k->tp;
    const double fp32 = g->fp32_tflops * 1e12; /* the router runs in fp32 */
    *out = (LtPlanMoe){0};
    out->gemm = dense / (peak * lt_plan_gemm_eff_at(g, N));
    out->redo_gemm = (redo - d.moe.topk * per_row - router) * N / k->tp /
                     (peak * lt_plan_gemm_eff_at(g, N));
    /* each local expert's GEMMs over its rows: E / ep experts share a rank's rows; under
     * ETP each computes 1 / etp of the width over the rows of its etp ranks */
    const int etp = k->etp > 1 ? k->etp : 1;
    /* under EP the most loaded rank paces the layer (lt_plan_moe_rank_load) */
    const double paced = lt_plan_moe_rank_load(k->moe_load, ms.E, d.moe.topk, k->ep);
    out->experts = paced * rows * per_row /
                       (peak * lt_plan_gemm_eff_at(g, rows * k->ep * etp / ms.E)) +
                   R * router / (fp32 * lt_plan_gemm_eff_at(g, R));
    out->flops = dense + rows * per_row + R * router;
    out->redo_flops = out->flops - dense + (redo - d.moe.topk * per_row - router) * N / k->tp;
    moe_bytes(&d, &ms, k, act, rows, paced, &out->bytes_f, &out->bytes_b);
    out->shared = d.moe.shared_ffn > 0;
    if (k->ep > 1) { /* the counts, then the rows; (ep - 1) / ep of them leave the rank */
        const double gbs = ep_spans_nodes(k, gpn) ? g->net_gbs : g->intra_gbs;
        out->a2a_bytes = act * rows * C * (k->ep - 1.0) / k->ep;
        /* (the most loaded rank receives that much more) */
        out->a2a = paced * out->a2a_bytes / (gbs * 1e9) + 2.0 * (k->ep - 1.0) * g->latency_us * 1e-6;
    }
    if (etp > 1) { /* with each all-to-all an ETP gather (dispatch) or reduce-scatter
                    * (combine): a rank's rows go to (come from) its etp - 1 peers */
        const double gbs = etp > gpn || gpn % etp ? g->net_gbs : g->intra_gbs,
                     bytes = act * rows * C * (etp - 1.0);
        out->a2a_bytes += bytes;
        out->a2a += bytes / (gbs * 1e9) + 2.0 * (etp - 1.0) * g->latency_us * 1e-6;
    }
}
