/* config_validate.c - lt_config_validate (see config.h) in four steps: the
 * per-key ranges again (structs filled in code skip the loader), the derived
 * fields, the cross-key rules (a table: one small function per rule, each with
 * its message and, where a working value is easy to compute, a suggestion),
 * the padded vocabulary. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"
#include "schedule.h" /* lt_schedule_layout_check only */

/* What the cross-key rules read: the config with its derived fields, the
 * config as given (for where a value came from), the sizes of the layout. */
typedef struct {
    const LtConfig *c, *given;
    long long world, tp, pp, vpp, dp, hidden, heads, micro, global;
    int llama;
} Rules;

/* A cross-key rule: 0 when c satisfies it, else -1 with the message in err. */
typedef int (*RuleFn)(const Rules *r, char *err, size_t errlen);

/* ---- suggestions --------------------------------------------------------- */

/* The divisor of n nearest to want (ties: the smaller), n >= 1. */
static long long nearest_divisor(long long n, long long want) {
    for (long long d = 0; d < n; d++) {
        if (want - d >= 1 && n % (want - d) == 0) return want - d;
        if (want + d <= n && n % (want + d) == 0) return want + d;
    }
    return 1;
}

/* The largest divisor of n that is <= most (n, most >= 1). */
static long long divisor_at_most(long long n, long long most) {
    for (long long d = most < n ? most : n; d > 1; d--)
        if (n % d == 0) return d;
    return 1;
}

/* The multiple of m nearest above v (v itself when it is one), at least m. */
static long long round_up(long long v, long long m) {
    const long long r = (v + m - 1) / m * m;
    return r > 0 ? r : m;
}

/* ---- per-key ranges and derived fields ----------------------------------- */

/* Every key's range (a struct filled in code has not been through the
 * loader's checks): 0, or -1 with the first key out of range in err. */
static int check_ranges(const LtConfig *c, char *err, size_t errlen) {
    for (int i = 0; i < lt_cfg_nkeys; i++)
        if (lt_cfg_check_range(c, &lt_cfg_keys[i], "", err, errlen)) return -1;
    return 0;
}

/* Fill the fields a config may leave to validation (model.ffn_hidden_size,
 * optimizer.decay_steps, model.num_query_groups, the MoE fields of
 * lt_cfg_moe_derive): 0, or -1 with err. */
static int derive_fields(LtConfig *t, char *err, size_t errlen) {
    const long long hidden = t->model.hidden_size;
    if (t->model.arch == LT_ARCH_LLAMA && t->model.ffn_hidden_size == 0)
        return lt_cfg_fail(err, errlen,
                           "model.arch=llama needs model.ffn_hidden_size (the SwiGLU inner width, "
                           "e.g. 14336 for Llama 3.1 8B); it has no 4*hidden_size default");
    if (t->model.ffn_hidden_size == 0) {
        if (hidden > INT_MAX / 4)
            return lt_cfg_fail(err, errlen,
                               "model.ffn_hidden_size default 4*model.hidden_size (4*%lld) is too "
                               "large; set model.ffn_hidden_size",
                               hidden);
        t->model.ffn_hidden_size = (int)(4 * hidden);
    }
    if (t->optimizer.decay_steps == 0) t->optimizer.decay_steps = t->train.steps;
    if (lt_rampup_parse(t->train.rampup_batch_size, t->train.global_batch_size, &t->train.rampup,
                        err, errlen))
        return -1;
    if (t->model.num_query_groups == 0) t->model.num_query_groups = t->model.num_attention_heads;
    const int heads = t->model.num_attention_heads;
    if (t->model.kv_channels == 0 && heads > 0 && t->model.hidden_size % heads == 0)
        t->model.kv_channels = t->model.hidden_size / heads;
    if (t->model.add_bias_linear == LT_BIAS_AUTO)
        t->model.add_bias_linear = t->model.arch == LT_ARCH_GPT ? LT_BIAS_TRUE : LT_BIAS_FALSE;
    return lt_cfg_moe_derive(t, err, errlen) ? -1 : lt_window_derive(t, err, errlen);
}

/* The vocabulary padded for the tensor-parallel size into
 * model.padded_vocab_size: 0, or -1 when it overflows an int. */
static int derive_padded_vocab(LtConfig *t, char *err, size_t errlen) {
    const long long tp = t->parallel.tensor_model_parallel_size;
    const long long padded = lt_config_padded_vocab(t, (int)tp);
    if (padded > INT_MAX)
        return lt_cfg_fail(err, errlen,
                           "model.vocab_size (%d) rounded up to a multiple of "
                           "model.make_vocab_size_divisible_by (%d) * "
                           "parallel.tensor_model_parallel_size (%lld) is too large",
                           t->model.vocab_size, t->model.make_vocab_size_divisible_by, tp);
    t->model.padded_vocab_size = (int)padded;
    return 0;
}

/* ---- the model ----------------------------------------------------------- */

/* Keys that only the Llama block reads: refused for model.arch=gpt when set
 * away from their defaults, so a GPT config never carries a setting that does
 * nothing. */
static int rule_llama_only_keys(const Rules *r, char *err, size_t errlen) {
    if (r->llama) return 0;
    const LtConfig *c = r->c;
    LtConfig d;
    lt_config_defaults(&d);
    const struct {
        const char *name;
        int differs;
    } keys[] = {
        /* (resolved: 0 became num_attention_heads) */
        {"model.num_query_groups", c->model.num_query_groups != c->model.num_attention_heads},
        {"model.qk_layernorm", c->model.qk_layernorm},
        {"model.norm_epsilon", c->model.norm_epsilon != d.model.norm_epsilon},
        {"model.rotary_base", c->model.rotary_base != d.model.rotary_base},
        {"model.rope_scaling", c->model.rope_scaling != d.model.rope_scaling},
        {"model.rope_scaling_factor", c->model.rope_scaling_factor != d.model.rope_scaling_factor},
        {"model.rope_low_freq_factor",
         c->model.rope_low_freq_factor != d.model.rope_low_freq_factor},
        {"model.rope_high_freq_factor",
         c->model.rope_high_freq_factor != d.model.rope_high_freq_factor},
        {"model.rope_original_max_position",
         c->model.rope_original_max_position != d.model.rope_original_max_position},
        {"model.rope_beta_fast", c->model.rope_beta_fast != d.model.rope_beta_fast},
        {"model.rope_beta_slow", c->model.rope_beta_slow != d.model.rope_beta_slow},
        {"model.rope_truncate", c->model.rope_truncate != d.model.rope_truncate},
        {"model.rope_attention_factor",
         c->model.rope_attention_factor != d.model.rope_attention_factor},
        /* (GPT's MLP is not gated: fc, GeLU, proj) */
        {"model.quick_geglu", c->model.quick_geglu},
        {"model.glu_linear_offset", c->model.glu_linear_offset != d.model.glu_linear_offset},
        {"model.activation_func_clamp_value",
         c->model.activation_func_clamp_value != d.model.activation_func_clamp_value},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].differs)
            return lt_cfg_fail(err, errlen,
                               "%s is a setting of the Llama block (grouped-query attention, "
                               "RMSNorm, rotary embeddings, the gated MLP) and needs "
                               "model.arch=llama; model.arch is gpt",
                               keys[i].name);
    return 0;
}

/* The GPT block's linears always carry biases (GPT-2's layout, which its
 * checkpoints and export assume). */
static int rule_gpt_linear_biases(const Rules *r, char *err, size_t errlen) {
    if (r->llama || r->given->model.add_bias_linear != LT_BIAS_FALSE) return 0;
    return lt_cfg_fail(err, errlen,
                       "model.add_bias_linear=false is not supported with model.arch=gpt: the GPT "
                       "block always has biases on its linears (GPT-2's layout); use "
                       "model.arch=llama for a block without them");
}

static int rule_heads_divide_hidden(const Rules *r, char *err, size_t errlen) {
    if (r->hidden % r->heads == 0 || r->given->model.kv_channels > 0) return 0;
    return lt_cfg_fail(err, errlen,
                       "model.hidden_size (%lld) must be divisible by model.num_attention_heads "
                       "(%lld) unless model.kv_channels sets the head dimension; try "
                       "model.num_attention_heads=%lld",
                       r->hidden, r->heads, nearest_divisor(r->hidden, r->heads));
}

static int rule_seq_within_positions(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    if (c->model.seq_length <= c->model.max_position_embeddings) return 0;
    return lt_cfg_fail(err, errlen,
                       "model.seq_length (%d) must be <= model.max_position_embeddings (%d); try "
                       "model.seq_length=%d (or model.max_position_embeddings=%d)",
                       c->model.seq_length, c->model.max_position_embeddings,
                       c->model.max_position_embeddings, c->model.seq_length);
}

static int rule_groups_divide_heads(const Rules *r, char *err, size_t errlen) {
    const int groups = r->c->model.num_query_groups;
    if (r->heads % groups == 0) return 0;
    return lt_cfg_fail(err, errlen,
                       "model.num_query_groups (%d) must divide model.num_attention_heads (%lld): "
                       "each key/value head serves the same number of query heads; try "
                       "model.num_query_groups=%lld",
                       groups, r->heads, divisor_at_most(r->heads, groups));
}

static int rule_rope_llama3_factors(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    if (c->model.rope_scaling != LT_ROPE_LLAMA3 ||
        c->model.rope_high_freq_factor > c->model.rope_low_freq_factor)
        return 0;
    return lt_cfg_fail(err, errlen,
                       "model.rope_scaling=llama3 needs model.rope_high_freq_factor (%g) > "
                       "model.rope_low_freq_factor (%g)",
                       c->model.rope_high_freq_factor, c->model.rope_low_freq_factor);
}

static int rule_llama_head_dim_even(const Rules *r, char *err, size_t errlen) {
    const int hd = r->c->model.kv_channels;
    if (!r->llama || hd % 2 == 0) return 0;
    if (r->given->model.kv_channels > 0)
        return lt_cfg_fail(err, errlen,
                           "model.arch=llama: rotary embeddings rotate pairs of elements, so "
                           "model.kv_channels (%d) must be even", hd);
    return lt_cfg_fail(err, errlen,
                       "model.arch=llama: rotary embeddings rotate pairs of elements, so the head "
                       "dimension model.hidden_size / model.num_attention_heads (%lld / %lld = "
                       "%lld) must be even",
                       r->hidden, r->heads, r->hidden / r->heads);
}

/* The model.moe_* and parallel.expert_* keys (config_moe.c). */
static int rule_mixture_of_experts(const Rules *r, char *err, size_t errlen) {
    return lt_cfg_moe_rules(r->c, r->world > 0 ? r->dp : 0, err, errlen);
}

/* ---- the layout ---------------------------------------------------------- */

static int rule_world_divisible(const Rules *r, char *err, size_t errlen) {
    const long long tp = r->tp, pp = r->pp, n = tp * pp;
    if (r->world % n == 0) return 0;
    const long long below = r->world / n * n;
    char others[64] = "";
    if (below > 0) snprintf(others, sizeof others, "%lld or ", below);
    return lt_cfg_fail(err, errlen,
                       "world size %lld is not divisible by parallel.tensor_model_parallel_size "
                       "(%lld) * parallel.pipeline_model_parallel_size (%lld) = %lld; run on %s%lld "
                       "ranks (a multiple of %lld), or choose sizes whose product divides %lld",
                       r->world, tp, pp, n, others, below + n, n, r->world);
}

/* The micro batch size to suggest for a global batch not divisible by
 * micro x dp: the largest that divides global / dp, below micro; 0 if none. */
static long long micro_that_divides(const Rules *r) {
    if (r->global % r->dp) return 0;
    const long long m = divisor_at_most(r->global / r->dp, r->micro);
    return m < r->micro ? m : 0;
}

static int rule_batch_divisible(const Rules *r, char *err, size_t errlen) {
    const long long micro = r->micro, dp = r->dp, global = r->global;
    if (global % (micro * dp) == 0) return 0;
    const long long m = micro_that_divides(r), g = round_up(global, micro * dp);
    char micro_try[96] = "";
    if (m) snprintf(micro_try, sizeof micro_try, "train.micro_batch_size=%lld (or ", m);
    return lt_cfg_fail(err, errlen,
                       "train.global_batch_size (%lld) must be divisible by "
                       "train.micro_batch_size (%lld) * data-parallel size (%lld) = %lld; try "
                       "%strain.global_batch_size=%lld%s",
                       global, micro, dp, micro * dp, micro_try, g, m ? ")" : "");
}

/* The largest tensor-parallel size up to tp that divides every split width
 * and, with pp, the world; 1 when only that. */
static long long tp_that_divides(const Rules *r, const long long *widths, int n) {
    for (long long t = r->tp - 1; t > 1; t--) {
        int ok = r->world % (t * r->pp) == 0;
        for (int i = 0; i < n && ok; i++) ok = widths[i] % t == 0;
        if (ok) return t;
    }
    return 1;
}

static int rule_tp_divides_widths(const Rules *r, char *err, size_t errlen) {
    const char *names[] = {"model.hidden_size", "model.num_attention_heads",
                           "model.ffn_hidden_size", "model.num_query_groups"};
    const long long v[] = {r->hidden, r->heads, r->c->model.ffn_hidden_size,
                           r->c->model.num_query_groups};
    for (int i = 0; i < 4; i++)
        if (v[i] % r->tp)
            return lt_cfg_fail(err, errlen,
                               "%s (%lld) must be divisible by "
                               "parallel.tensor_model_parallel_size (%lld); try "
                               "parallel.tensor_model_parallel_size=%lld",
                               names[i], v[i], r->tp, tp_that_divides(r, v, 4));
    return 0;
}

static int rule_vpp_needs_pp(const Rules *r, char *err, size_t errlen) {
    if (r->vpp == 1 || r->pp > 1) return 0;
    return lt_cfg_fail(err, errlen,
                       "parallel.virtual_pipeline_model_parallel_size (%lld) > 1 needs "
                       "parallel.pipeline_model_parallel_size > 1",
                       r->vpp);
}

static int rule_interleave_micro_batches(const Rules *r, char *err, size_t errlen) {
    const long long M = r->global / (r->micro * r->dp);
    if (r->vpp == 1 || M % r->pp == 0) return 0;
    return lt_cfg_fail(err, errlen,
                       "parallel.virtual_pipeline_model_parallel_size (%lld) > 1: the interleaved "
                       "schedule needs the micro batches per step, train.global_batch_size / "
                       "(train.micro_batch_size * data-parallel size) = %lld / (%lld * %lld) = "
                       "%lld, to be a multiple of parallel.pipeline_model_parallel_size (%lld); "
                       "try train.global_batch_size=%lld",
                       r->vpp, r->global, r->micro, r->dp, M, r->pp,
                       round_up(r->global, r->micro * r->dp * r->pp));
}

/* Every batch of the ramp-up, START + k INCREMENT, divisible by micro x dp
 * (Megatron's check of each step's batch), and with the interleaved schedule
 * its micro batches a multiple of pp: both hold for every k exactly when
 * they hold for START and INCREMENT. */
static int rule_rampup_divisible(const Rules *r, char *err, size_t errlen) {
    const LtRampup *u = &r->c->train.rampup;
    const long long unit = r->micro * r->dp * (r->vpp > 1 ? r->pp : 1);
    if (!u->start || (u->start % unit == 0 && u->increment % unit == 0)) return 0;
    char why[160] = "";
    if (r->vpp > 1)
        snprintf(why, sizeof why, " x parallel.pipeline_model_parallel_size (%lld: the "
                 "interleaved schedule needs whole rounds of micro batches)", r->pp);
    return lt_cfg_fail(err, errlen,
                       "train.rampup_batch_size '%s': START (%ld) and INCREMENT (%ld) must be "
                       "multiples of train.micro_batch_size (%lld) x data-parallel size (%lld)%s "
                       "= %lld, so that every step's global batch splits into whole micro "
                       "batches on every data-parallel rank",
                       r->c->train.rampup_batch_size, u->start, u->increment, r->micro, r->dp,
                       why, unit);
}

static int rule_rampup_without_graph(const Rules *r, char *err, size_t errlen) {
    if (!r->c->train.rampup.start || !r->c->train.cuda_graph) return 0;
    return lt_cfg_fail(err, errlen,
                       "train.cuda_graph replays one step's micro batches, but "
                       "train.rampup_batch_size changes their number from step to step: use one "
                       "or the other");
}

/* The layer split and the pipeline schedule (src/pipeline, behind one call). */
static int rule_pipeline_layout(const Rules *r, char *err, size_t errlen) {
    const LtLayerSplit split = lt_config_layer_split(r->c);
    return lt_schedule_layout_check(&split, r->c->model.num_layers, (int)r->pp, (int)r->vpp,
                                    (int)(r->global / (r->micro * r->dp)), err, errlen);
}

static int rule_sp_needs_tp(const Rules *r, char *err, size_t errlen) {
    if (!r->c->parallel.sequence_parallel || r->tp > 1) return 0;
    return lt_cfg_fail(err, errlen,
                       "parallel.sequence_parallel needs parallel.tensor_model_parallel_size > 1");
}

static int rule_sp_divides_seq(const Rules *r, char *err, size_t errlen) {
    const int seq = r->c->model.seq_length;
    if (!r->c->parallel.sequence_parallel || seq % r->tp == 0) return 0;
    const long long fit = seq / r->tp * r->tp;
    return lt_cfg_fail(err, errlen,
                       "parallel.sequence_parallel: model.seq_length (%d) must be divisible by "
                       "parallel.tensor_model_parallel_size (%lld); try model.seq_length=%lld",
                       seq, r->tp, fit > 0 ? fit : r->tp);
}

/* ---- overlap and the CUDA graph ------------------------------------------ */

static int rule_tp_overlap_needs_sp(const Rules *r, char *err, size_t errlen) {
    if (!r->c->parallel.tp_comm_overlap || r->c->parallel.sequence_parallel) return 0;
    return lt_cfg_fail(err, errlen,
                       "parallel.tp_comm_overlap overlaps the sequence-parallel all-gathers and "
                       "reduce-scatters with the GEMMs: it needs parallel.sequence_parallel: true "
                       "(and so parallel.tensor_model_parallel_size > 1)");
}

static int rule_param_gather_needs_zero(const Rules *r, char *err, size_t errlen) {
    if (!r->c->parallel.overlap_param_gather || r->c->optimizer.zero_stage) return 0;
    return lt_cfg_fail(err, errlen,
                       "parallel.overlap_param_gather needs optimizer.zero_stage >= 1 (with ZeRO 0 "
                       "every rank updates all parameters: there is no gather to overlap)");
}

static int rule_graph_without_dp_overlap(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    if (!c->train.cuda_graph ||
        !(c->parallel.overlap_grad_reduce || c->parallel.overlap_param_gather))
        return 0;
    return lt_cfg_fail(err, errlen,
                       "train.cuda_graph: the captured step cannot wait for communication started "
                       "outside it; set parallel.overlap_grad_reduce and "
                       "parallel.overlap_param_gather to false");
}

static int rule_graph_without_zero2(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    if (!c->train.cuda_graph || c->optimizer.zero_stage != 2) return 0;
    return lt_cfg_fail(err, errlen,
                       "train.cuda_graph: ZeRO stage 2 reduces gradients bucket by bucket inside "
                       "the step; use optimizer.zero_stage 0 or 1 with the graph");
}

static int rule_documents_need_token(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    if (c->data.eod_token >= c->model.vocab_size)
        return lt_cfg_fail(err, errlen, "data.eod_token %d is outside the vocabulary [0, %d) "
                           "(model.vocab_size)", c->data.eod_token, c->model.vocab_size);
    if (c->data.eod_mask_loss && c->data.eod_token < 0)
        return lt_cfg_fail(err, errlen, "data.eod_mask_loss needs data.eod_token (the id that "
                           "ends a document, e.g. 50256 for GPT-2's <|endoftext|>)");
    if (c->data.eod_mask_loss && c->train.cuda_graph)
        return lt_cfg_fail(err, errlen, "data.eod_mask_loss: the masked targets change every "
                           "step, and a captured step replays the first one's; set "
                           "train.cuda_graph=false");
    const char *reset = c->data.reset_position_ids     ? "data.reset_position_ids"
                        : c->data.reset_attention_mask ? "data.reset_attention_mask"
                                                       : NULL;
    if (reset && c->data.eod_token < 0)
        return lt_cfg_fail(err, errlen, "%s needs data.eod_token (the id that ends a document, "
                           "e.g. 50256 for GPT-2's <|endoftext|>)", reset);
    if (reset && c->train.cuda_graph)
        return lt_cfg_fail(err, errlen, "%s: the document boundaries change every step, and a "
                           "captured step replays the first one's; set train.cuda_graph=false",
                           reset);
    return 0;
}

static int rule_graph_without_tp_pp(const Rules *r, char *err, size_t errlen) {
    if (!r->c->train.cuda_graph || (r->tp == 1 && r->pp == 1)) return 0;
    return lt_cfg_fail(err, errlen,
                       "train.cuda_graph: the step is captured only without tensor and pipeline "
                       "parallelism (their communication runs inside the step); this config has "
                       "tensor_model_parallel_size %lld, pipeline_model_parallel_size %lld",
                       r->tp, r->pp);
}

static int rule_graph_needs_cuda(const Rules *r, char *err, size_t errlen) {
    if (!r->c->train.cuda_graph || r->c->train.device != LT_DEVICE_CPU) return 0;
    return lt_cfg_fail(err, errlen, "train.cuda_graph needs the CUDA backend (train.device is cpu)");
}

static int rule_cudnn_needs_cuda(const Rules *r, char *err, size_t errlen) {
    if (r->c->model.attention != LT_ATTN_CUDNN || r->c->train.device != LT_DEVICE_CPU) return 0;
    return lt_cfg_fail(err, errlen,
                       "model.attention=cudnn runs on the CUDA backend, but train.device=cpu (use "
                       "model.attention=auto or lattice)");
}

static int rule_cudnn_needs_bf16(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    if (c->model.attention != LT_ATTN_CUDNN || c->train.precision == LT_PREC_BF16) return 0;
    return lt_cfg_fail(err, errlen,
                       "model.attention=cudnn needs train.precision=bf16 (cuDNN's fused attention "
                       "computes in bf16), got train.precision=%s",
                       lt_precision_name(c->train.precision));
}

/* ---- evaluation, logging, checkpoints ------------------------------------ */

static int rule_mllog_benchmark(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    const char *b = c->logging.mllog_benchmark;
    if (!c->logging.mllog[0] || !strcmp(b, "gpt3") || !strcmp(b, "llama31_8b") ||
        !strcmp(b, "llama31_405b") || !strcmp(b, "gpt_oss_20b"))
        return 0;
    return lt_cfg_fail(err, errlen,
                       "logging.mllog needs logging.mllog_benchmark: gpt3, llama31_8b, "
                       "llama31_405b or gpt_oss_20b (got '%s')",
                       b);
}

static int rule_eval_one_interval(const Rules *r, char *err, size_t errlen) {
    if (r->c->eval.interval == 0 || r->c->eval.interval_samples == 0) return 0;
    return lt_cfg_fail(err, errlen,
                       "eval.interval and eval.interval_samples are both set: choose one");
}

static int rule_eval_start_samples(const Rules *r, char *err, size_t errlen) {
    const long start = r->c->eval.start_samples, every = r->c->eval.interval_samples;
    if (start <= 0 || (every > 0 && start % every == 0)) return 0;
    char fix[96] = "set eval.interval_samples";
    if (every > 0)
        snprintf(fix, sizeof fix, "try eval.start_samples=%lld", round_up(start, every));
    return lt_cfg_fail(err, errlen,
                       "eval.start_samples (%ld) needs eval.interval_samples and must be a "
                       "multiple of it (got %ld); %s",
                       start, every, fix);
}

static int rule_eval_samples(const Rules *r, char *err, size_t errlen) {
    const long samples = r->c->eval.samples;
    if (samples % r->micro == 0) return 0;
    return lt_cfg_fail(err, errlen,
                       "eval.samples (%ld) must be a multiple of train.micro_batch_size (%lld); "
                       "try eval.samples=%lld",
                       samples, r->micro, round_up(samples, r->micro));
}

static int rule_load_auto_needs_dir(const Rules *r, char *err, size_t errlen) {
    if (strcmp(r->c->checkpoint.load, "auto") || r->c->checkpoint.dir[0]) return 0;
    return lt_cfg_fail(err, errlen,
                       "checkpoint.load=auto resumes from the newest checkpoint in "
                       "checkpoint.dir, which is not set");
}

/* ---- the learning-rate schedule ------------------------------------------ */

static int rule_min_lr(const Rules *r, char *err, size_t errlen) {
    const double lr = r->c->optimizer.lr, min_lr = r->c->optimizer.min_lr;
    if (min_lr <= lr) return 0;
    return lt_cfg_fail(err, errlen,
                       "optimizer.min_lr (%g) must be <= optimizer.lr (%g); try "
                       "optimizer.min_lr=%g (a tenth of optimizer.lr)",
                       min_lr, lr, lr / 10);
}

static int rule_warmup_within_decay(const Rules *r, char *err, size_t errlen) {
    const long warmup = r->c->optimizer.warmup_steps, decay = r->c->optimizer.decay_steps;
    if (decay == 0 || warmup <= decay) return 0;
    const int from_steps = r->given->optimizer.decay_steps == 0;
    return lt_cfg_fail(err, errlen,
                       "optimizer.warmup_steps (%ld) must be <= optimizer.decay_steps (%ld%s); "
                       "try optimizer.warmup_steps=%ld or less (or %s=%ld)",
                       warmup, decay, from_steps ? ", from train.steps" : "", decay,
                       from_steps ? "train.steps" : "optimizer.decay_steps", warmup);
}

/* lr_wsd_decay_steps and lr_wsd_decay_style only shape the wsd schedule:
 * refused away from their defaults with another optimizer.lr_decay_style. */
static int rule_wsd_keys_need_wsd(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    if (c->optimizer.lr_decay_style == LT_LR_WSD) return 0;
    LtConfig d;
    lt_config_defaults(&d);
    const char *key = c->optimizer.lr_wsd_decay_steps != d.optimizer.lr_wsd_decay_steps
                          ? "optimizer.lr_wsd_decay_steps"
                      : c->optimizer.lr_wsd_decay_style != d.optimizer.lr_wsd_decay_style
                          ? "optimizer.lr_wsd_decay_style"
                          : NULL;
    if (!key) return 0;
    return lt_cfg_fail(err, errlen,
                       "%s is a setting of the warmup-stable-decay schedule and needs "
                       "optimizer.lr_decay_style=wsd; optimizer.lr_decay_style is %s",
                       key, lt_lr_decay_style_name(c->optimizer.lr_decay_style));
}

/* wsd: the decay phase, the last lr_wsd_decay_steps updates of decay_steps,
 * is not empty and starts no earlier than the end of the warm-up (when
 * decay_steps is 0 nothing is trained: only the first part applies). */
static int rule_wsd_decay_span(const Rules *r, char *err, size_t errlen) {
    const LtConfig *c = r->c;
    if (c->optimizer.lr_decay_style != LT_LR_WSD) return 0;
    const long span = c->optimizer.lr_wsd_decay_steps, warm = c->optimizer.warmup_steps;
    const long decay = c->optimizer.decay_steps, room = decay - warm;
    const char *from = r->given->optimizer.decay_steps == 0 ? ", from train.steps" : "";
    if (span > 0 && (decay == 0 || span <= room)) return 0;
    if (room <= 0 && decay > 0)
        return lt_cfg_fail(err, errlen,
                           "optimizer.lr_decay_style=wsd needs optimizer.decay_steps (%ld%s) > "
                           "optimizer.warmup_steps (%ld): its decay phase follows the warm-up",
                           decay, from, warm);
    const long tenth = room / 10 > 0 ? room / 10 : 1;
    if (span == 0)
        return lt_cfg_fail(err, errlen,
                           "optimizer.lr_decay_style=wsd needs optimizer.lr_wsd_decay_steps: the "
                           "last updates of optimizer.decay_steps, over which the learning rate "
                           "falls to optimizer.min_lr; e.g. optimizer.lr_wsd_decay_steps=%ld",
                           tenth);
    return lt_cfg_fail(err, errlen,
                       "optimizer.lr_wsd_decay_steps (%ld) must be <= "
                       "optimizer.decay_steps (%ld%s) - optimizer.warmup_steps (%ld) = %ld: the "
                       "decay starts after the warm-up; try optimizer.lr_wsd_decay_steps=%ld or "
                       "less",
                       span, decay, from, warm, room, room);
}

/* The cross-key rules, in the order they are checked (the first refusal is
 * reported): the model's shape, the layout, overlap and the CUDA graph,
 * evaluation and logging, the learning-rate schedule. */
static const struct {
    const char *name;
    RuleFn check;
} RULES[] = {
    {"llama-only keys", rule_llama_only_keys},
    {"gpt linear biases", rule_gpt_linear_biases},
    {"heads divide hidden", rule_heads_divide_hidden},
    {"sequence within positions", rule_seq_within_positions},
    {"world divisible by tp x pp", rule_world_divisible},
    {"global batch divisible", rule_batch_divisible},
    {"query groups divide heads", rule_groups_divide_heads},
    {"llama3 rope factors", rule_rope_llama3_factors},
    {"llama head dim even", rule_llama_head_dim_even},
    {"tp divides widths", rule_tp_divides_widths},
    {"mixture of experts", rule_mixture_of_experts},
    {"mllog benchmark", rule_mllog_benchmark},
    {"one eval interval", rule_eval_one_interval},
    {"eval start samples", rule_eval_start_samples},
    {"eval samples", rule_eval_samples},
    {"load auto needs dir", rule_load_auto_needs_dir},
    {"vpp needs pp", rule_vpp_needs_pp},
    {"interleaved micro batches", rule_interleave_micro_batches},
    {"pipeline layout", rule_pipeline_layout},
    {"rampup divisible", rule_rampup_divisible},
    {"rampup without cuda graph", rule_rampup_without_graph},
    {"sp needs tp", rule_sp_needs_tp},
    {"sp divides sequence", rule_sp_divides_seq},
    {"tp overlap needs sp", rule_tp_overlap_needs_sp},
    {"param gather needs zero", rule_param_gather_needs_zero},
    {"cuda graph without dp overlap", rule_graph_without_dp_overlap},
    {"cuda graph without zero 2", rule_graph_without_zero2},
    {"eod mask and document resets need a token", rule_documents_need_token},
    {"cuda graph without tp/pp", rule_graph_without_tp_pp},
    {"cuda graph needs cuda", rule_graph_needs_cuda},
    {"cudnn needs cuda", rule_cudnn_needs_cuda},
    {"cudnn needs bf16", rule_cudnn_needs_bf16},
    {"min lr", rule_min_lr},
    {"warmup within decay", rule_warmup_within_decay},
    {"wsd keys need wsd", rule_wsd_keys_need_wsd},
    {"wsd decay span", rule_wsd_decay_span},
};

/* Every rule of RULES on t (derived fields filled): 0, or the first refusal. */
static int check_rules(const LtConfig *t, const LtConfig *given, int world, char *err,
                       size_t errlen) {
    const Rules r = {
        .c = t,
        .given = given,
        .world = world,
        .tp = t->parallel.tensor_model_parallel_size,
        .pp = t->parallel.pipeline_model_parallel_size,
        .vpp = t->parallel.virtual_pipeline_model_parallel_size,
        /* (dp is read by rules after rule_world_divisible only) */
        .dp = world / ((long long)t->parallel.tensor_model_parallel_size *
                       t->parallel.pipeline_model_parallel_size),
        .hidden = t->model.hidden_size,
        .heads = t->model.num_attention_heads,
        .micro = t->train.micro_batch_size,
        .global = t->train.global_batch_size,
        .llama = t->model.arch == LT_ARCH_LLAMA,
    };
    for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++)
        if (RULES[i].check(&r, err, errlen)) return -1;
    return 0;
}

int lt_config_validate(LtConfig *c, int world_size, char *err, size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) err = dummy, errlen = sizeof dummy;
    err[0] = '\0';
    if (world_size < 1)
        return lt_cfg_fail(err, errlen, "world size must be >= 1, got %d", world_size);
    if (check_ranges(c, err, errlen)) return -1;
    LtConfig *t = malloc(sizeof *t); /* c changes only when every step passes */
    if (!t) return lt_cfg_fail(err, errlen, "out of memory validating the configuration");
    memcpy(t, c, sizeof *t);
    const int rc = derive_fields(t, err, errlen) || check_rules(t, c, world_size, err, errlen) ||
                           derive_padded_vocab(t, err, errlen)
                       ? -1
                       : 0;
    if (rc == 0) memcpy(c, t, sizeof *c);
    free(t);
    return rc;
}
