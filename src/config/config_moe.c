/* config_moe.c - the mixture-of-experts part of lt_config_validate: the
 * derived fields (model.moe_ffn_hidden_size, model.moe_layer[]) and the
 * cross-key rules of the model.moe_* and parallel.expert_* keys, as
 * Megatron-Core's TransformerConfig and arguments.py check them, plus what
 * lattice does not run yet. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"

/* 1 when key k holds different values in a and b. */
static int key_differs(const LtConfig *a, const LtConfig *b, const KeyDesc *k) {
    const void *x = lt_cfg_cfield(a, k), *y = lt_cfg_cfield(b, k);
    switch (k->type) {
    case KT_INT:
    case KT_ENUM: return *(const int *)x != *(const int *)y;
    case KT_LONG: return *(const long *)x != *(const long *)y;
    case KT_U64: return *(const uint64_t *)x != *(const uint64_t *)y;
    case KT_DOUBLE: return *(const double *)x != *(const double *)y;
    case KT_BOOL: return *(const bool *)x != *(const bool *)y;
    case KT_STR: return strcmp(x, y) != 0;
    }
    return 0;
}

/* The first MoE key (model.moe_*, parallel.expert_*) of the key table away
 * from its default, or NULL; model.moe_ffn_hidden_size is compared as given
 * (a dense model leaves it unresolved). The name is in a static buffer. */
static const char *first_moe_key_set(const LtConfig *c) {
    static char name[LT_CFG_NAME_MAX];
    LtConfig d;
    lt_config_defaults(&d);
    for (int i = 0; i < lt_cfg_nkeys; i++) {
        const KeyDesc *k = &lt_cfg_keys[i];
        if ((strncmp(k->name, "moe_", 4) && strncmp(k->name, "expert_", 7)) ||
            !key_differs(c, &d, k))
            continue;
        lt_cfg_full_name(k, name, sizeof name);
        return name;
    }
    return NULL;
}

int lt_cfg_moe_derive(LtConfig *t, char *err, size_t errlen) {
    memset(t->model.moe_layer, 0, sizeof t->model.moe_layer);
    if (t->model.num_experts == 0) return 0;
    if (t->model.num_layers > LT_MOE_MAX_LAYERS)
        return lt_cfg_fail(err, errlen, "model.num_experts (%d): an MoE model has at most %d "
                           "layers, model.num_layers is %d", t->model.num_experts,
                           LT_MOE_MAX_LAYERS, t->model.num_layers);
    if (lt_moe_layer_pattern(t->model.moe_layer_freq, t->model.num_layers, t->model.moe_layer,
                             err, errlen))
        return -1;
    if (t->model.moe_ffn_hidden_size == 0) t->model.moe_ffn_hidden_size = t->model.ffn_hidden_size;
    return 0;
}

/* The routing keys of an MoE model (num_experts > 0). */
static int check_router(const LtConfig *c, char *err, size_t errlen) {
    const int experts = c->model.num_experts, k = c->model.moe_router_topk;
    const int softmax = c->model.moe_router_score_function == LT_MOE_SOFTMAX;
    if (k > experts)
        return lt_cfg_fail(err, errlen, "model.moe_router_topk (%d) must be <= model.num_experts "
                           "(%d); try model.moe_router_topk=%d", k, experts, experts < 2 ? 1 : 2);
    if (c->model.moe_router_pre_softmax && !softmax)
        return lt_cfg_fail(err, errlen, "model.moe_router_pre_softmax applies to "
                           "model.moe_router_score_function=softmax, which is sigmoid; set "
                           "model.moe_router_pre_softmax=false");
    if (k == 1 && softmax && !c->model.moe_router_pre_softmax)
        return lt_cfg_fail(err, errlen, "model.moe_router_topk=1 with "
                           "model.moe_router_score_function=softmax needs "
                           "model.moe_router_pre_softmax=true (a softmax over the one chosen "
                           "logit is 1 and has no gradient; Megatron-Core refuses it too)");
    const int groups = c->model.moe_router_num_groups, gk = c->model.moe_router_group_topk;
    if ((groups > 0) != (gk > 0))
        return lt_cfg_fail(err, errlen, "group-limited routing needs both model.moe_router_num_groups "
                           "and model.moe_router_group_topk (got %d and %d; 0 and 0 turn it off)",
                           groups, gk);
    if (groups > 0) {
        if (experts % groups || groups > LT_MOE_MAX_GROUPS)
            return lt_cfg_fail(err, errlen, "model.moe_router_num_groups (%d) must divide "
                               "model.num_experts (%d) into equal groups, at most %d of them",
                               groups, experts, LT_MOE_MAX_GROUPS);
        if (gk > groups)
            return lt_cfg_fail(err, errlen, "model.moe_router_group_topk (%d) must be <= "
                               "model.moe_router_num_groups (%d)", gk, groups);
        if (k < gk || k > gk * (experts / groups))
            return lt_cfg_fail(err, errlen, "model.moe_router_topk (%d) must be >= "
                               "model.moe_router_group_topk (%d: a group scores by its top "
                               "topk / group_topk experts) and <= the %d experts of the chosen "
                               "groups", k, gk, gk * (experts / groups));
    }
    if (c->model.moe_router_enable_expert_bias && softmax)
        return lt_cfg_fail(err, errlen, "model.moe_router_enable_expert_bias (aux-loss-free "
                           "balancing) needs model.moe_router_score_function=sigmoid, as in "
                           "Megatron-Core; got softmax");
    if (!c->model.moe_router_enable_expert_bias && c->model.moe_router_bias_update_rate != 1e-3)
        return lt_cfg_fail(err, errlen, "model.moe_router_bias_update_rate (%g) is the step of "
                           "the expert bias and needs model.moe_router_enable_expert_bias=true",
                           c->model.moe_router_bias_update_rate);
    if (c->model.moe_router_load_balancing_type == LT_MOE_BALANCE_NONE &&
        c->model.moe_aux_loss_coeff > 0)
        return lt_cfg_fail(err, errlen, "model.moe_aux_loss_coeff (%g) weighs the load-balancing "
                           "loss, but model.moe_router_load_balancing_type is none; set "
                           "model.moe_router_load_balancing_type=aux_loss (or "
                           "model.moe_aux_loss_coeff=0)", c->model.moe_aux_loss_coeff);
    return 0;
}

/* Capacity, the layer pattern and the layout of an MoE model. */
static int check_experts(const LtConfig *c, char *err, size_t errlen) {
    const int tp = c->parallel.tensor_model_parallel_size;
    const int shared = c->model.moe_shared_expert_intermediate_size;
    const double capacity = c->model.moe_expert_capacity_factor;
    if (c->model.moe_pad_expert_input_to_capacity && capacity == 0)
        return lt_cfg_fail(err, errlen, "model.moe_pad_expert_input_to_capacity pads each "
                           "expert's input to its capacity and needs "
                           "model.moe_expert_capacity_factor > 0 (e.g. 1.0); it is 0 (dropless)");
    if (capacity == 0 && c->model.moe_token_drop_policy != LT_MOE_DROP_PROBS)
        return lt_cfg_fail(err, errlen, "model.moe_token_drop_policy chooses the tokens an "
                           "expert past its capacity drops and needs "
                           "model.moe_expert_capacity_factor > 0 (e.g. 1.0); it is 0 (dropless)");
    int moe_layers = 0;
    for (int l = 0; l < c->model.num_layers; l++) moe_layers += c->model.moe_layer[l];
    if (moe_layers == 0)
        return lt_cfg_fail(err, errlen, "model.moe_layer_freq '%s' makes no layer an MoE layer, "
                           "but model.num_experts is %d; make at least one entry 1 (or set "
                           "model.num_experts=0 for a dense model)", c->model.moe_layer_freq,
                           c->model.num_experts);
    if (tp > 1 && !c->parallel.sequence_parallel)
        return lt_cfg_fail(err, errlen, "model.num_experts (%d) with "
                           "parallel.tensor_model_parallel_size %d needs "
                           "parallel.sequence_parallel=true (the MoE layer routes each rank's "
                           "sequence shard; Megatron-Core requires it too)",
                           c->model.num_experts, tp);
    if (c->model.moe_shared_expert_gate && shared == 0)
        return lt_cfg_fail(err, errlen, "model.moe_shared_expert_gate scales the shared expert's "
                           "output and needs one: set model.moe_shared_expert_intermediate_size "
                           "(or model.moe_shared_expert_gate=false)");
    if (shared % tp)
        return lt_cfg_fail(err, errlen, "model.moe_shared_expert_intermediate_size (%d) must be "
                           "divisible by parallel.tensor_model_parallel_size (%d); try "
                           "model.moe_shared_expert_intermediate_size=%d", shared, tp,
                           (shared + tp - 1) / tp * tp);
    if (c->train.cuda_graph)
        return lt_cfg_fail(err, errlen, "train.cuda_graph: an MoE layer's expert shapes change "
                           "every step (the tokens each expert gets), and a captured step replays "
                           "the first one's; lattice does not capture MoE models (not even with "
                           "capacity padding) yet: set train.cuda_graph=false");
    return 0;
}

/* Expert parallelism and expert tensor parallelism: ETP x EP folded into the
 * TP x DP ranks of a stage (dp: the data-parallel size, or <= 0 when the
 * world is not known), whole experts per EP rank, each expert's FFN width cut
 * over ETP. ETP is independent of TP: the experts never see the dense layers'
 * tensor-parallel split (each TP rank routes its own sequence shard). */
static int check_parallel(const LtConfig *c, long long dp, char *err, size_t errlen) {
    const long long ep = c->parallel.expert_model_parallel_size,
                    etp = c->parallel.expert_tensor_parallel_size,
                    tp = c->parallel.tensor_model_parallel_size;
    const int ffn = c->model.moe_ffn_hidden_size;
    if (c->model.num_experts % ep)
        return lt_cfg_fail(err, errlen, "parallel.expert_model_parallel_size (%lld) must divide "
                           "model.num_experts (%d): each rank computes the same number of "
                           "experts", ep, c->model.num_experts);
    if (ffn % etp)
        return lt_cfg_fail(err, errlen, "parallel.expert_tensor_parallel_size (%lld) must divide "
                           "model.moe_ffn_hidden_size (%d): each rank of an expert computes the "
                           "same slice of its width", etp, ffn);
    if (dp > 0 && (tp * dp) % (ep * etp)) {
        if (etp == 1)
            return lt_cfg_fail(err, errlen, "parallel.expert_model_parallel_size (%lld) must "
                               "divide the ranks of a pipeline stage, "
                               "parallel.tensor_model_parallel_size x data-parallel size = %lld "
                               "x %lld (Megatron-Core's MoE parallel folding)", ep, tp, dp);
        return lt_cfg_fail(err, errlen, "parallel.expert_model_parallel_size (%lld) x "
                           "parallel.expert_tensor_parallel_size (%lld) must divide the ranks of "
                           "a pipeline stage, parallel.tensor_model_parallel_size x data-parallel "
                           "size = %lld x %lld (Megatron-Core's MoE parallel folding)", ep, etp,
                           tp, dp);
    }
    if (c->model.moe_router_enable_expert_bias && c->model.moe_pad_expert_input_to_capacity)
        return lt_cfg_fail(err, errlen, "model.moe_router_enable_expert_bias with "
                           "model.moe_pad_expert_input_to_capacity: every expert then counts "
                           "exactly its capacity (as Megatron-Core counts it), so the bias would "
                           "never move; set model.moe_pad_expert_input_to_capacity=false");
    return 0;
}

int lt_cfg_moe_rules(const LtConfig *c, long long dp, char *err, size_t errlen) {
    if (c->model.num_experts == 0) {
        const char *key = first_moe_key_set(c);
        if (!key) return 0;
        return lt_cfg_fail(err, errlen, "%s is set but model.num_experts is 0 (a dense model); "
                           "set model.num_experts (e.g. 8) or leave %s at its default", key, key);
    }
    if (check_router(c, err, errlen) || check_experts(c, err, errlen) ||
        check_parallel(c, dp, err, errlen))
        return -1;
    return 0;
}
