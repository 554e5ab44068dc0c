/* config_keys.c - the key table: every configuration key's section, name,
 * type, place in LtConfig and allowed range (lt_cfg_keys), the section names,
 * the YAML spellings of the enum values and their lookups. See
 * config_internal.h.
 *
 * Loading, override parsing, per-key range checks, printing and did-you-mean
 * suggestions are all driven by this table, so a new key is one line here
 * plus its default in lt_config_defaults (config_defaults.c). */
#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"

/* Enum fields are read and written through int pointers. */
_Static_assert(sizeof(LtPrecision) == sizeof(int), "enum size");
_Static_assert(sizeof(LtRecompute) == sizeof(int), "enum size");
_Static_assert(sizeof(LtDeviceKind) == sizeof(int), "enum size");
_Static_assert(sizeof(LtCommBackend) == sizeof(int), "enum size");
_Static_assert(sizeof(LtAttnImpl) == sizeof(int), "enum size");
_Static_assert(sizeof(LtArch) == sizeof(int), "enum size");
_Static_assert(sizeof(LtRopeScalingKind) == sizeof(int), "enum size");
_Static_assert(sizeof(LtLinearBias) == sizeof(int), "enum size");
_Static_assert(sizeof(LtLrDecayStyle) == sizeof(int), "enum size");
_Static_assert(sizeof(LtWsdDecayStyle) == sizeof(int), "enum size");
_Static_assert(sizeof(LtMoeScore) == sizeof(int), "enum size");
_Static_assert(sizeof(LtMoeBalance) == sizeof(int), "enum size");
_Static_assert(sizeof(LtMoeDropPolicy) == sizeof(int), "enum size");
_Static_assert(sizeof(LtSoftmaxType) == sizeof(int), "enum size");

/* ---- the key table ------------------------------------------------------- */

static const char *const PRECISION_NAMES[] = {"fp32", "bf16", NULL};
static const char *const RECOMPUTE_NAMES[] = {"none", "selective", "full", NULL};
static const char *const DEVICE_NAMES[] = {"auto", "cpu", "cuda", NULL};
static const char *const COMM_NAMES[] = {"auto", "nccl", "mpi", NULL};
/* index = LtAttnImpl */
static const char *const ATTENTION_NAMES[] = {"auto", "cudnn", "lattice", NULL};
static const char *const EVAL_SPLIT_NAMES[] = {"valid", "test", NULL};
static const char *const ARCH_NAMES[] = {"gpt", "llama", NULL};             /* index = LtArch */
static const char *const ROPE_SCALING_NAMES[] = {"none", "llama3", "yarn", NULL}; /* LtRopeScalingKind */
static const char *const LINEAR_BIAS_NAMES[] = {"false", "true", "auto", NULL}; /* LtLinearBias */
static const char *const LR_DECAY_NAMES[] = {"cosine", "linear", "constant", "inverse_square_root",
                                             "wsd", NULL}; /* LtLrDecayStyle */
static const char *const WSD_DECAY_NAMES[] = {"exponential", "linear", "cosine", "minus_sqrt",
                                              NULL}; /* LtWsdDecayStyle */
static const char *const MOE_SCORE_NAMES[] = {"softmax", "sigmoid", NULL}; /* LtMoeScore */
static const char *const MOE_BALANCE_NAMES[] = {"aux_loss", "seq_aux_loss", "none",
                                                NULL}; /* LtMoeBalance */
static const char *const MOE_DROP_NAMES[] = {"probs", "position", NULL}; /* LtMoeDropPolicy */
static const char *const SOFTMAX_NAMES[] = {"vanilla", "off-by-one", "learnable",
                                            NULL}; /* LtSoftmaxType */

#define OFF(sec, key) offsetof(LtConfig, sec.key)
#define K_INT(sec, key, lo, hi)                                                                    \
    { #sec, #key, KT_INT, OFF(sec, key), lo, hi, 0, 0, 0, NULL }
#define K_LONG(sec, key, lo)                                                                       \
    { #sec, #key, KT_LONG, OFF(sec, key), lo, LONG_MAX, 0, 0, 0, NULL }
#define K_U64(sec, key)                                                                            \
    { #sec, #key, KT_U64, OFF(sec, key), 0, 0, 0, 0, 0, NULL }
#define K_DBL(sec, key, lo, hi, fl)                                                                \
    { #sec, #key, KT_DOUBLE, OFF(sec, key), 0, 0, lo, hi, fl, NULL }
#define K_BOOL(sec, key)                                                                           \
    { #sec, #key, KT_BOOL, OFF(sec, key), 0, 0, 0, 0, 0, NULL }
#define K_STR(sec, key)                                                                            \
    { #sec, #key, KT_STR, OFF(sec, key), 0, 0, 0, 0, 0, NULL }
#define K_ENUM(sec, key, names)                                                                    \
    { #sec, #key, KT_ENUM, OFF(sec, key), 0, 0, 0, 0, 0, names }

/* Order here is the order of lt_config_print. Sections must be contiguous. */
const KeyDesc lt_cfg_keys[] = {
    K_ENUM(model, arch, ARCH_NAMES),
    K_INT(model, num_layers, 1, INT_MAX),
    K_INT(model, hidden_size, 1, INT_MAX),
    K_INT(model, num_attention_heads, 1, INT_MAX),
    K_INT(model, ffn_hidden_size, 0, INT_MAX),
    K_INT(model, seq_length, 1, INT_MAX),
    K_INT(model, max_position_embeddings, 1, INT_MAX),
    K_INT(model, vocab_size, 2, INT_MAX),
    K_INT(model, make_vocab_size_divisible_by, 1, INT_MAX),
    K_ENUM(model, attention, ATTENTION_NAMES),
    K_BOOL(model, attention_deterministic),
    K_INT(model, num_query_groups, 0, INT_MAX),
    K_INT(model, kv_channels, 0, INT_MAX),
    K_BOOL(model, qk_layernorm),
    K_ENUM(model, add_bias_linear, LINEAR_BIAS_NAMES),
    K_BOOL(model, add_qkv_bias),
    K_ENUM(model, softmax_type, SOFTMAX_NAMES),
    K_DBL(model, norm_epsilon, 0, 1, D_MIN_OPEN),
    K_DBL(model, rotary_base, 1, 0, D_MIN_OPEN | D_NO_MAX),
    K_ENUM(model, rope_scaling, ROPE_SCALING_NAMES),
    K_DBL(model, rope_scaling_factor, 1, 0, D_NO_MAX),
    K_DBL(model, rope_low_freq_factor, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_DBL(model, rope_high_freq_factor, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_INT(model, rope_original_max_position, 1, INT_MAX),
    K_DBL(model, rope_beta_fast, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_DBL(model, rope_beta_slow, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_BOOL(model, rope_truncate),
    K_DBL(model, rope_attention_factor, 0, 0, D_NO_MAX),
    K_BOOL(model, untie_embeddings_and_output_weights),
    K_DBL(model, init_method_std, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_BOOL(model, quick_geglu),
    K_DBL(model, glu_linear_offset, -FLT_MAX, FLT_MAX, 0),
    K_DBL(model, activation_func_clamp_value, 0, 0, D_NO_MAX),
    K_INT(model, num_experts, 0, INT_MAX),
    K_INT(model, moe_router_topk, 1, INT_MAX),
    K_INT(model, moe_ffn_hidden_size, 0, INT_MAX),
    K_STR(model, moe_layer_freq),
    K_INT(model, moe_shared_expert_intermediate_size, 0, INT_MAX),
    K_BOOL(model, moe_shared_expert_gate),
    K_ENUM(model, moe_router_score_function, MOE_SCORE_NAMES),
    K_BOOL(model, moe_router_pre_softmax),
    K_INT(model, moe_router_num_groups, 0, INT_MAX),
    K_INT(model, moe_router_group_topk, 0, INT_MAX),
    K_DBL(model, moe_router_topk_scaling_factor, 0, 0, D_NO_MAX),
    K_ENUM(model, moe_router_load_balancing_type, MOE_BALANCE_NAMES),
    K_DBL(model, moe_aux_loss_coeff, 0, 0, D_NO_MAX),
    K_DBL(model, moe_z_loss_coeff, 0, 0, D_NO_MAX),
    K_BOOL(model, moe_router_enable_expert_bias),
    K_DBL(model, moe_router_bias_update_rate, 0, 0, D_NO_MAX),
    K_DBL(model, moe_expert_capacity_factor, 0, 0, D_NO_MAX),
    K_ENUM(model, moe_token_drop_policy, MOE_DROP_NAMES),
    K_BOOL(model, moe_pad_expert_input_to_capacity),
    K_BOOL(model, moe_grouped_gemm),
    K_STR(model, window_size),
    K_STR(model, window_attn_skip_freq),

    K_INT(parallel, tensor_model_parallel_size, 1, INT_MAX),
    K_INT(parallel, pipeline_model_parallel_size, 1, INT_MAX),
    K_INT(parallel, virtual_pipeline_model_parallel_size, 1, INT_MAX),
    K_INT(parallel, num_layers_in_first_pipeline_stage, 0, INT_MAX),
    K_INT(parallel, num_layers_in_last_pipeline_stage, 0, INT_MAX),
    K_BOOL(parallel, account_for_embedding_in_pipeline_split),
    K_BOOL(parallel, account_for_loss_in_pipeline_split),
    K_BOOL(parallel, sequence_parallel),
    K_INT(parallel, expert_model_parallel_size, 1, INT_MAX),
    K_INT(parallel, expert_tensor_parallel_size, 1, INT_MAX),
    K_BOOL(parallel, overlap_grad_reduce),
    K_BOOL(parallel, overlap_param_gather),
    K_BOOL(parallel, overlap_p2p_comm),
    K_BOOL(parallel, tp_comm_overlap),
    K_INT(parallel, bucket_size, 1, INT_MAX),

    K_INT(train, micro_batch_size, 1, INT_MAX),
    K_INT(train, global_batch_size, 1, INT_MAX),
    K_LONG(train, steps, 0),
    K_STR(train, rampup_batch_size),
    K_ENUM(train, precision, PRECISION_NAMES),
    K_U64(train, seed),
    K_ENUM(train, recompute, RECOMPUTE_NAMES),
    K_ENUM(train, device, DEVICE_NAMES),
    K_INT(train, threads, 0, INT_MAX),
    K_INT(train, lm_head_chunk, 0, INT_MAX),
    K_BOOL(train, cuda_graph),
    K_BOOL(train, calculate_per_token_loss),
    K_INT(train, max_skipped_steps, 0, INT_MAX),
    K_DBL(train, loss_spike_zscore, 0, 0, D_NO_MAX),
    K_INT(train, loss_spike_window, 2, 1000000),

    K_DBL(optimizer, lr, 0, 0, D_NO_MAX),
    K_DBL(optimizer, min_lr, 0, 0, D_NO_MAX),
    K_LONG(optimizer, warmup_steps, 0),
    K_LONG(optimizer, decay_steps, 0),
    K_ENUM(optimizer, lr_decay_style, LR_DECAY_NAMES),
    K_LONG(optimizer, lr_wsd_decay_steps, 0),
    K_ENUM(optimizer, lr_wsd_decay_style, WSD_DECAY_NAMES),
    K_DBL(optimizer, beta1, 0, 1, D_MAX_OPEN),
    K_DBL(optimizer, beta2, 0, 1, D_MAX_OPEN),
    K_DBL(optimizer, eps, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_DBL(optimizer, weight_decay, 0, 0, D_NO_MAX),
    K_DBL(optimizer, clip_grad, 0, 0, D_NO_MAX),
    K_INT(optimizer, zero_stage, 0, 2),

    K_STR(data, train_path),
    K_STR(data, valid_path),
    K_BOOL(data, shuffle),
    K_INT(data, prefetch, 1, 64),
    K_INT(data, eod_token, -1, INT_MAX),
    K_BOOL(data, eod_mask_loss),
    K_BOOL(data, reset_position_ids),
    K_BOOL(data, reset_attention_mask),
    K_STR(data, split),

    K_STR(checkpoint, dir),
    K_LONG(checkpoint, save_interval, 0),
    K_STR(checkpoint, load),
    K_INT(checkpoint, keep_last, 0, INT_MAX),
    K_BOOL(checkpoint, async),
    K_INT(checkpoint, io_buffer_mib, 1, 4096),

    K_STR(logging, metrics_file),
    K_STR(logging, mllog),
    K_STR(logging, mllog_benchmark),
    K_STR(logging, mllog_org),
    K_STR(logging, mllog_platform),
    K_STR(logging, trace),
    K_INT(logging, log_interval, 1, INT_MAX),
    K_DBL(logging, peak_tflops, 0, 0, D_NO_MAX),

    K_LONG(eval, interval, 0),
    K_INT(eval, iters, 1, INT_MAX),
    K_LONG(eval, samples, 0),
    K_LONG(eval, interval_samples, 0),
    K_LONG(eval, start_samples, 0),
    K_ENUM(eval, split, EVAL_SPLIT_NAMES),
    K_DBL(eval, target_log_ppl, 0, 0, D_NO_MAX),

    K_ENUM(comm, backend, COMM_NAMES),
    K_DBL(comm, timeout_s, 0, 0, D_NO_MAX),

    K_INT(sample, num_tokens, 1, INT_MAX),
    K_DBL(sample, temperature, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_INT(sample, top_k, 0, INT_MAX),
    K_U64(sample, seed),
};
#define NKEYS ((int)(sizeof(lt_cfg_keys) / sizeof(lt_cfg_keys[0])))
const int lt_cfg_nkeys = NKEYS;

const char *const lt_cfg_sections[] = {"model",      "parallel", "train", "optimizer", "data",
                                       "checkpoint", "logging",  "eval",  "comm",      "sample"};
#define NSECTIONS ((int)(sizeof(lt_cfg_sections) / sizeof(lt_cfg_sections[0])))
const int lt_cfg_nsections = NSECTIONS;

/* config_yaml.c sizes its per-key and per-section arrays by these bounds. */
_Static_assert(NKEYS <= LT_CFG_MAX_KEYS, "raise LT_CFG_MAX_KEYS");
_Static_assert(NSECTIONS <= LT_CFG_MAX_SECTIONS, "raise LT_CFG_MAX_SECTIONS");

void lt_cfg_full_name(const KeyDesc *k, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", k->section, k->name);
}

/* Index of the key with dotted name `name`, or -1. */
int lt_cfg_find_key(const char *name) {
    char buf[LT_CFG_NAME_MAX];
    for (int i = 0; i < NKEYS; i++) {
        lt_cfg_full_name(&lt_cfg_keys[i], buf, sizeof buf);
        if (strcmp(buf, name) == 0)
            return i;
    }
    return -1;
}

int lt_cfg_find_section(const char *name) {
    for (int i = 0; i < NSECTIONS; i++)
        if (strcmp(lt_cfg_sections[i], name) == 0)
            return i;
    return -1;
}

int lt_cfg_enum_count(const char *const *names) {
    int n = 0;
    while (names[n])
        n++;
    return n;
}

/* ---- names of enum values ------------------------------------------------ */

const char *lt_precision_name(LtPrecision p) {
    return (int)p >= 0 && (int)p < lt_cfg_enum_count(PRECISION_NAMES) ? PRECISION_NAMES[p]
                                                                      : "unknown";
}
const char *lt_recompute_name(LtRecompute r) {
    return (int)r >= 0 && (int)r < lt_cfg_enum_count(RECOMPUTE_NAMES) ? RECOMPUTE_NAMES[r]
                                                                      : "unknown";
}
const char *lt_device_name(LtDeviceKind d) {
    return (int)d >= 0 && (int)d < lt_cfg_enum_count(DEVICE_NAMES) ? DEVICE_NAMES[d] : "unknown";
}
const char *lt_comm_backend_name(LtCommBackend b) {
    return (int)b >= 0 && (int)b < lt_cfg_enum_count(COMM_NAMES) ? COMM_NAMES[b] : "unknown";
}
const char *lt_arch_name(LtArch a) {
    return (int)a >= 0 && (int)a < lt_cfg_enum_count(ARCH_NAMES) ? ARCH_NAMES[a] : "unknown";
}
const char *lt_rope_scaling_name(LtRopeScalingKind k) {
    return (int)k >= 0 && (int)k < lt_cfg_enum_count(ROPE_SCALING_NAMES) ? ROPE_SCALING_NAMES[k]
                                                                       : "unknown";
}
const char *lt_attention_name(LtAttnImpl a) {
    return (int)a >= 0 && (int)a < lt_cfg_enum_count(ATTENTION_NAMES) ? ATTENTION_NAMES[a]
                                                                     : "unknown";
}
/* names[v], or "unknown" when v is out of range. */
static const char *enum_name(const char *const *names, int v) {
    return v >= 0 && v < lt_cfg_enum_count(names) ? names[v] : "unknown";
}
const char *lt_lr_decay_style_name(LtLrDecayStyle s) {
    return enum_name(LR_DECAY_NAMES, (int)s);
}
const char *lt_wsd_decay_style_name(LtWsdDecayStyle s) {
    return enum_name(WSD_DECAY_NAMES, (int)s);
}
const char *lt_softmax_type_name(LtSoftmaxType s) { return enum_name(SOFTMAX_NAMES, (int)s); }
