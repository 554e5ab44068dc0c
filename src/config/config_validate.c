/* config_validate.c - lt_config_validate: per-key ranges again, cross-key
 * consistency, derived fields. See config.h. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"
#include "schedule.h"

/* Keys that only the Llama block reads: refused for model.arch=gpt when set
 * away from their defaults, so a GPT config never carries a setting that does
 * nothing. Returns -1 with the message in err. */
static int llama_only_keys(const LtConfig *c, int llama, char *err, size_t errlen) {
    if (llama) return 0;
    LtConfig d;
    lt_config_defaults(&d);
    const struct {
        const char *name;
        int differs;
    } keys[] = {
        /* (resolved: 0 became num_attention_heads) */
        {"model.num_query_groups", c->model.num_query_groups != c->model.num_attention_heads},
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
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].differs)
            return lt_cfg_fail(err, errlen,
                               "%s is a setting of the Llama block (grouped-query attention, "
                               "RMSNorm, rotary embeddings) and needs model.arch=llama; "
                               "model.arch is gpt",
                               keys[i].name);
    return 0;
}

int lt_config_validate(LtConfig *c, int world_size, char *err, size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    if (world_size < 1)
        return lt_cfg_fail(err, errlen, "world size must be >= 1, got %d", world_size);
    for (int i = 0; i < lt_cfg_nkeys; i++)
        if (lt_cfg_check_range(c, &lt_cfg_keys[i], "", err, errlen))
            return -1;

    LtConfig *t = malloc(sizeof *t);
    if (!t)
        return lt_cfg_fail(err, errlen, "out of memory validating the configuration");
    memcpy(t, c, sizeof *t);
    int rc = -1;
    const long long tp = t->parallel.tensor_model_parallel_size;
    const long long pp = t->parallel.pipeline_model_parallel_size;
    const long long vpp = t->parallel.virtual_pipeline_model_parallel_size;
    const long long hidden = t->model.hidden_size, heads = t->model.num_attention_heads;

    const int llama = t->model.arch == LT_ARCH_LLAMA;
    if (llama && t->model.ffn_hidden_size == 0) {
        lt_cfg_fail(err, errlen,
                    "model.arch=llama needs model.ffn_hidden_size (the SwiGLU inner width, e.g. "
                    "14336 for Llama 3.1 8B); it has no 4*hidden_size default");
        goto out;
    }
    if (t->model.ffn_hidden_size == 0) {
        if (hidden > INT_MAX / 4) {
            lt_cfg_fail(err, errlen,
                        "model.ffn_hidden_size default 4*model.hidden_size (4*%lld) is too "
                        "large; set model.ffn_hidden_size",
                        hidden);
            goto out;
        }
        t->model.ffn_hidden_size = (int)(4 * hidden);
    }
    if (t->optimizer.decay_steps == 0)
        t->optimizer.decay_steps = t->train.steps;
    if (t->model.num_query_groups == 0) t->model.num_query_groups = t->model.num_attention_heads;
    if (llama_only_keys(t, llama, err, errlen)) goto out;
    const long long ffn = t->model.ffn_hidden_size;

    if (hidden % heads) {
        lt_cfg_fail(err, errlen,
                    "model.hidden_size (%lld) must be divisible by "
                    "model.num_attention_heads (%lld)",
                    hidden, heads);
        goto out;
    }
    if (t->model.seq_length > t->model.max_position_embeddings) {
        lt_cfg_fail(err, errlen,
                    "model.seq_length (%d) must be <= model.max_position_embeddings (%d)",
                    t->model.seq_length, t->model.max_position_embeddings);
        goto out;
    }
    if (world_size % (tp * pp)) {
        lt_cfg_fail(err, errlen,
                    "world size %d is not divisible by "
                    "parallel.tensor_model_parallel_size (%lld) * "
                    "parallel.pipeline_model_parallel_size (%lld) = %lld",
                    world_size, tp, pp, tp * pp);
        goto out;
    }
    const long long dp = world_size / (tp * pp);
    const long long micro = t->train.micro_batch_size, global = t->train.global_batch_size;
    if (global % (micro * dp)) {
        lt_cfg_fail(err, errlen,
                    "train.global_batch_size (%lld) must be divisible by "
                    "train.micro_batch_size (%lld) * data-parallel size (%lld) = %lld",
                    global, micro, dp, micro * dp);
        goto out;
    }
    if (heads % t->model.num_query_groups) {
        lt_cfg_fail(err, errlen,
                    "model.num_query_groups (%d) must divide model.num_attention_heads (%lld): "
                    "each key/value head serves the same number of query heads",
                    t->model.num_query_groups, heads);
        goto out;
    }
    if (t->model.rope_scaling == LT_ROPE_LLAMA3 &&
        t->model.rope_high_freq_factor <= t->model.rope_low_freq_factor) {
        lt_cfg_fail(err, errlen,
                    "model.rope_scaling=llama3 needs model.rope_high_freq_factor (%g) > "
                    "model.rope_low_freq_factor (%g)",
                    t->model.rope_high_freq_factor, t->model.rope_low_freq_factor);
        goto out;
    }
    if (llama && (hidden / heads) % 2) {
        lt_cfg_fail(err, errlen,
                    "model.arch=llama: rotary embeddings rotate pairs of elements, so the head "
                    "dimension model.hidden_size / model.num_attention_heads (%lld / %lld = %lld) "
                    "must be even",
                    hidden, heads, hidden / heads);
        goto out;
    }
    const struct {
        const char *name;
        long long v;
    } by_tp[] = {
        {"model.hidden_size", hidden},
        {"model.num_attention_heads", heads},
        {"model.ffn_hidden_size", ffn},
        {"model.num_query_groups", t->model.num_query_groups},
    };
    for (int i = 0; i < 4; i++) {
        if (by_tp[i].v % tp) {
            lt_cfg_fail(err, errlen,
                        "%s (%lld) must be divisible by "
                        "parallel.tensor_model_parallel_size (%lld)",
                        by_tp[i].name, by_tp[i].v, tp);
            goto out;
        }
    }
    if (t->logging.mllog[0] && strcmp(t->logging.mllog_benchmark, "gpt3") &&
        strcmp(t->logging.mllog_benchmark, "llama31_8b") &&
        strcmp(t->logging.mllog_benchmark, "llama31_405b")) {
        lt_cfg_fail(err, errlen,
                    "logging.mllog needs logging.mllog_benchmark: gpt3, llama31_8b or llama31_405b "
                    "(got '%s')",
                    t->logging.mllog_benchmark);
        goto out;
    }
    if (t->eval.interval > 0 && t->eval.interval_samples > 0) {
        lt_cfg_fail(err, errlen, "eval.interval and eval.interval_samples are both set: choose one");
        goto out;
    }
    if (t->eval.start_samples > 0 && (t->eval.interval_samples == 0 ||
                                      t->eval.start_samples % t->eval.interval_samples)) {
        lt_cfg_fail(err, errlen,
                    "eval.start_samples (%ld) needs eval.interval_samples and must be a multiple of it "
                    "(got %ld)",
                    t->eval.start_samples, t->eval.interval_samples);
        goto out;
    }
    if (t->eval.samples % t->train.micro_batch_size) {
        lt_cfg_fail(err, errlen,
                    "eval.samples (%ld) must be a multiple of train.micro_batch_size (%d)",
                    t->eval.samples, t->train.micro_batch_size);
        goto out;
    }
    if (!strcmp(t->checkpoint.load, "auto") && !t->checkpoint.dir[0]) {
        lt_cfg_fail(err, errlen,
                    "checkpoint.load=auto resumes from the newest checkpoint in checkpoint.dir, "
                    "which is not set");
        goto out;
    }
    if (vpp > 1 && pp == 1) {
        lt_cfg_fail(err, errlen,
                    "parallel.virtual_pipeline_model_parallel_size (%lld) > 1 needs "
                    "parallel.pipeline_model_parallel_size > 1",
                    vpp);
        goto out;
    }
    {
        const LtLayerSplit split = lt_config_layer_split(t);
        char why[512];
        if (lt_layer_split_check(&split, t->model.num_layers, (int)pp, (int)vpp, why, sizeof why)) {
            lt_cfg_fail(err, errlen, "%s", why);
            goto out;
        }
    }
    if (vpp > 1 && (global / (micro * dp)) % pp) {
        lt_cfg_fail(err, errlen,
                    "parallel.virtual_pipeline_model_parallel_size (%lld) > 1: the interleaved "
                    "schedule needs the micro batches per step, train.global_batch_size / "
                    "(train.micro_batch_size * data-parallel size) = %lld / (%lld * %lld) = %lld, "
                    "to be a multiple of parallel.pipeline_model_parallel_size (%lld)",
                    vpp, global, micro, dp, global / (micro * dp), pp);
        goto out;
    }
    if (pp > 1) { /* the schedule's own limits (sizes, work) */
        char why[256];
        if (lt_schedule_check((int)pp, (int)vpp, (int)(global / (micro * dp)), why, sizeof why)) {
            lt_cfg_fail(err, errlen, "parallel.pipeline_model_parallel_size (%lld) x "
                        "parallel.virtual_pipeline_model_parallel_size (%lld) with %lld micro "
                        "batches per step: %s", pp, vpp, global / (micro * dp), why);
            goto out;
        }
    }
    if (t->parallel.sequence_parallel && tp == 1) {
        lt_cfg_fail(err, errlen,
                    "parallel.sequence_parallel needs parallel.tensor_model_parallel_size > 1");
        goto out;
    }
    if (t->parallel.sequence_parallel && t->model.seq_length % tp) {
        lt_cfg_fail(err, errlen,
                    "parallel.sequence_parallel: model.seq_length (%d) must be divisible by "
                    "parallel.tensor_model_parallel_size (%lld)",
                    t->model.seq_length, tp);
        goto out;
    }
    if (t->parallel.tp_comm_overlap && !t->parallel.sequence_parallel) {
        lt_cfg_fail(err, errlen,
                    "parallel.tp_comm_overlap overlaps the sequence-parallel all-gathers and "
                    "reduce-scatters with the GEMMs: it needs parallel.sequence_parallel: true "
                    "(and so parallel.tensor_model_parallel_size > 1)");
        goto out;
    }
    if (t->parallel.overlap_param_gather && t->optimizer.zero_stage == 0) {
        lt_cfg_fail(err, errlen,
                    "parallel.overlap_param_gather needs optimizer.zero_stage >= 1 (with ZeRO 0 "
                    "every rank updates all parameters: there is no gather to overlap)");
        goto out;
    }
    if (t->train.cuda_graph && (t->parallel.overlap_grad_reduce || t->parallel.overlap_param_gather)) {
        lt_cfg_fail(err, errlen,
                    "train.cuda_graph: the captured step cannot wait for communication started "
                    "outside it; set parallel.overlap_grad_reduce and "
                    "parallel.overlap_param_gather to false");
        goto out;
    }
    if (t->train.cuda_graph && (tp > 1 || pp > 1)) {
        lt_cfg_fail(err, errlen,
                    "train.cuda_graph: the step is captured only without tensor and pipeline "
                    "parallelism (their communication runs inside the step); this config has "
                    "tensor_model_parallel_size %lld, pipeline_model_parallel_size %lld",
                    tp, pp);
        goto out;
    }
    if (t->train.cuda_graph && t->train.device == LT_DEVICE_CPU) {
        lt_cfg_fail(err, errlen, "train.cuda_graph needs the CUDA backend (train.device is cpu)");
        goto out;
    }
    if (t->model.attention == LT_ATTN_CUDNN && t->train.device == LT_DEVICE_CPU) {
        lt_cfg_fail(err, errlen,
                    "model.attention=cudnn runs on the CUDA backend, but train.device=cpu (use "
                    "model.attention=auto or lattice)");
        goto out;
    }
    if (t->model.attention == LT_ATTN_CUDNN && t->train.precision != LT_PREC_BF16) {
        lt_cfg_fail(err, errlen,
                    "model.attention=cudnn needs train.precision=bf16 (cuDNN's fused attention "
                    "computes in bf16), got train.precision=%s",
                    lt_precision_name(t->train.precision));
        goto out;
    }
    if (t->optimizer.min_lr > t->optimizer.lr) {
        lt_cfg_fail(err, errlen, "optimizer.min_lr (%g) must be <= optimizer.lr (%g)",
                    t->optimizer.min_lr, t->optimizer.lr);
        goto out;
    }
    if (t->optimizer.decay_steps != 0 && t->optimizer.warmup_steps > t->optimizer.decay_steps) {
        lt_cfg_fail(err, errlen,
                    "optimizer.warmup_steps (%ld) must be <= optimizer.decay_steps (%ld%s)",
                    t->optimizer.warmup_steps, t->optimizer.decay_steps,
                    c->optimizer.decay_steps == 0 ? ", from train.steps" : "");
        goto out;
    }
    const long long padded = lt_config_padded_vocab(t, (int)tp);
    if (padded > INT_MAX) {
        lt_cfg_fail(err, errlen,
                    "model.vocab_size (%d) rounded up to a multiple of "
                    "model.make_vocab_size_divisible_by (%d) * parallel.tensor_model_parallel_size "
                    "(%lld) is too large",
                    t->model.vocab_size, t->model.make_vocab_size_divisible_by, tp);
        goto out;
    }
    t->model.padded_vocab_size = (int)padded;
    memcpy(c, t, sizeof *c);
    rc = 0;
out:
    free(t);
    return rc;
}
