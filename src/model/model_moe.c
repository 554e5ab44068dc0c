/* model_moe.c - what the model adds around the routed experts of moe.c:
 * where an MoE layer's router and expert tensors are (the stage's table, or
 * under expert parallelism this rank's expert table), the routing statistics
 * and per-expert token counts it keeps for the trainer, the expert-bias
 * parameters of aux-loss-free balancing, and the load-balancing loss weight. */
#include "model.h"

#include <string.h>

#include "model/model_internal.h"

/* Parameters of one FFN (params.c). */
static int ffn_params(const LtModel *m) { return lt_params_ffn_count(&m->d); }
/* Table index of MoE layer l's shared-expert gate (model.moe_shared_expert_gate),
 * after the shared expert; the router weight follows. */
int lt_mdl_shared_gate_idx(const LtModel *m, int l) {
    return m->table.layer_first[l] + lt_params_attn_count(&m->d) +
           (m->d.moe.shared_ffn > 0 ? ffn_params(m) : 0);
}
/* Table index of MoE layer l's router weight; its bias, the expert bias and
 * the experts' tensors follow. */
static int router_idx(const LtModel *m, int l) {
    return lt_mdl_shared_gate_idx(m, l) + !!m->d.moe.shared_gate;
}
/* Table index of MoE layer l's expert bias (when the model has one). */
static int expert_bias_idx(const LtModel *m, int l) {
    return router_idx(m, l) + 1 + lt_dims_router_bias(&m->d);
}

/* Expert tensor i of the expert table: its weights and gradient. */
static void *eparam(const LtModel *m, int i) {
    return (char *)m->eparams + lt_act_bytes(m->be, m->etable.p[i].offset);
}
static float *egrad(const LtModel *m, int i) { return m->egrads + m->etable.p[i].offset; }

/* MoE layer l's router and expert tensors (params.h's order): every expert's
 * from the table, or under expert (tensor) parallelism this rank's (at their
 * global index e; the others' entries are left unset; slices under ETP) from
 * the expert table. */
LtMoeWeights lt_mdl_moe_weights(LtModel *m, int l) {
    const int r = router_idx(m, l), fp = ffn_params(m), E = m->d.moe.experts,
              rb = lt_dims_router_bias(&m->d);
    const int split = m->etable.n > 0, ep = m->in->ep ? lt_comm_size(m->in->ep) : 1,
              El = E / ep, e0 = m->in->ep ? lt_comm_rank(m->in->ep) * El : 0;
    for (int e = e0; e < e0 + El; e++) {
        const int b = split ? m->etable.layer_first[l] + (e - e0) * fp
                            : expert_bias_idx(m, l) + !!m->d.moe.expert_bias + e * fp;
        void *(*w)(const LtModel *, int) = split ? eparam : param;
        float *(*g)(const LtModel *, int) = split ? egrad : grad;
        LtExpertTensors *t = &m->in->moe_exp[e];
        if (fp == 2) /* Llama without biases */
            *t = (LtExpertTensors){w(m, b), NULL, w(m, b + 1), NULL, g(m, b), NULL, g(m, b + 1), NULL};
        else
            *t = (LtExpertTensors){w(m, b),     w(m, b + 1), w(m, b + 2), w(m, b + 3),
                                   g(m, b),     g(m, b + 1), g(m, b + 2), g(m, b + 3)};
    }
    return (LtMoeWeights){param(m, r),
                          m->d.moe.expert_bias ? param(m, expert_bias_idx(m, l)) : NULL,
                          grad(m, r),
                          m->in->moe_exp,
                          rb ? param(m, r + 1) : NULL,
                          rb ? grad(m, r + 1) : NULL};
}

/* The kept assignments of each expert of MoE layer l in this forward, added
 * to the step's counts (aux-loss-free balancing, lt_model_moe_tokens_take). */
void lt_mdl_moe_count_tokens(LtModel *m, int l, const LtMoeActs *a) {
    const int E = m->d.moe.experts;
    for (int e = 0; e < E; e++)
        m->in->moe_tokens[(size_t)l * E + e] += a->host_off[e + 1] - a->host_off[e];
}

void lt_model_set_moe_aux_weight(LtModel *m, float w) { m->in->moe_aux_weight = w; }

int lt_model_moe_layers(const LtModel *m) {
    int n = 0;
    for (int l = 0; l < m->table.layers; l++) n += m->in->moe[l];
    return n;
}

void lt_model_moe_tokens_take(LtModel *m, double *out) {
    const int E = m->d.moe.experts;
    int k = 0;
    for (int l = 0; l < m->table.layers; l++) {
        if (!m->in->moe[l]) continue;
        double *c = m->in->moe_tokens + (size_t)l * E;
        memcpy(out + (size_t)k++ * E, c, sizeof(double) * (size_t)E);
        memset(c, 0, sizeof(double) * (size_t)E);
    }
}

int lt_model_moe_bias_index(const LtModel *m, int k) {
    for (int l = 0; l < m->table.layers; l++)
        if (m->in->moe[l] && k-- == 0) return m->d.moe.expert_bias ? expert_bias_idx(m, l) : -1;
    return -1;
}

void lt_model_moe_take(LtModel *m, LtMoeStats *out) {
    int k = 0;
    const int E = m->d.moe.experts;
    for (int l = 0; l < m->table.layers; l++) {
        if (!m->in->moe[l]) continue;
        LtMoeStats *st = &m->in->moe_stats[l];
        if (st->sp_n > 0) { /* under SP: the micro batches' loads over the TP ranks */
            lt_comm_all_reduce(lt_comm_host(m->tp), st->sp_counts, (size_t)st->sp_n * (E + 2),
                               LT_COMM_I32, LT_COMM_SUM);
            lt_moe_fold_loads(st, st->sp_counts, st->sp_n, E, m->d.moe.topk);
        }
        out[k] = *st;
        out[k].sp_counts = NULL, out[k].sp_n = out[k].sp_cap = 0;
        k++;
        *st = (LtMoeStats){.layer = st->layer, .sp_counts = st->sp_counts, .sp_cap = st->sp_cap};
    }
}
