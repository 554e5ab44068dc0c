/* mllog.c - see mllog.h. Lines are flushed as written: a run that dies keeps
 * its log up to that point. */
#include "mllog.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "common.h"

typedef enum { LT_MLLOG_POINT, LT_MLLOG_START, LT_MLLOG_END } LtMllogType;

static FILE *g_f;
static char g_path[LT_PATH_MAX];

static double now_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec * 1e3 + (double)tv.tv_usec / 1e3;
}

/* One line; value and meta are JSON text (meta: members without braces, may
 * be NULL), file and line name the emitting code. */
static void mllog_at(LtMllogType type, const char *key, const char *value, const char *meta,
                     const char *file, int line) {
    if (!g_f) return;
    static const char *types[] = {"POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"};
    const char *base = strrchr(file, '/');
    fprintf(g_f,
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": %.0f, \"event_type\": \"%s\", \"key\": "
            "\"%s\", \"value\": %s, \"metadata\": {\"file\": \"%s\", \"lineno\": %d%s%s}}\n",
            now_ms(), types[type], key, value ? value : "null", base ? base + 1 : file, line,
            meta && meta[0] ? ", " : "", meta ? meta : "");
    if (fflush(g_f) != 0)
        fprintf(stderr, "lattice: warning: logging.mllog: writing failed: %s\n", strerror(errno));
}

#define lt_mllog(type, key, value, meta) mllog_at((type), (key), (value), (meta), __FILE__, __LINE__)

static void str_value(char *out, size_t n, const char *s) {
    size_t k = 0;
    out[k++] = '"';
    for (; *s && k + 3 < n; s++) {
        if (*s == '"' || *s == '\\') out[k++] = '\\';
        out[k++] = (unsigned char)*s >= 0x20 ? *s : '?';
    }
    out[k++] = '"';
    out[k] = '\0';
}

void lt_mllog_on_init(const LtConfig *c, int rank) {
    if (rank != 0 || !c->logging.mllog[0]) return;
    g_f = fopen(c->logging.mllog, "a");
    if (!g_f)
        lt_input_error("logging.mllog: cannot open '%s': %s", c->logging.mllog, strerror(errno));
    snprintf(g_path, sizeof g_path, "%s", c->logging.mllog);
    char v[600];
    str_value(v, sizeof v, c->logging.mllog_org);
    lt_mllog(LT_MLLOG_POINT, "submission_org", v, NULL);
    str_value(v, sizeof v, c->logging.mllog_platform);
    lt_mllog(LT_MLLOG_POINT, "submission_platform", v, NULL);
    lt_mllog(LT_MLLOG_POINT, "submission_division", "\"closed\"", NULL);
    lt_mllog(LT_MLLOG_POINT, "submission_status", "\"onprem\"", NULL);
    str_value(v, sizeof v, c->logging.mllog_benchmark);
    lt_mllog(LT_MLLOG_POINT, "submission_benchmark", v, NULL);
    /* lattice reads its files with plain reads: the operating system's page
     * cache is the submitter's to drop before the run (sync; echo 3 >
     * /proc/sys/vm/drop_caches) */
    lt_mllog(LT_MLLOG_POINT, "cache_clear", "true", NULL);
    lt_mllog(LT_MLLOG_START, "init_start", "null", NULL);
}

void lt_mllog_print_summary(void) {
    if (g_f) lt_log("mllog      %s (logging.mllog, MLPerf)\n", g_path);
}

static void num(const char *key, double x) {
    char v[64];
    snprintf(v, sizeof v, "%.10g", x);
    lt_mllog(LT_MLLOG_POINT, key, v, NULL);
}

/* The schedule's name as a JSON string: the reference implementations'
 * "cosine with linear warmup", with optimizer.lr_decay_style's word (and for
 * wsd its decay style) in place of cosine. */
static void schedule_name(const LtConfig *c, char *v, size_t n) {
    const LtLrDecayStyle s = c->optimizer.lr_decay_style;
    if (s == LT_LR_WSD)
        snprintf(v, n, "\"wsd (%s decay over the last %ld steps) with linear warmup\"",
                 lt_wsd_decay_style_name(c->optimizer.lr_wsd_decay_style),
                 c->optimizer.lr_wsd_decay_steps);
    else
        snprintf(v, n, "\"%s with linear warmup\"",
                 s == LT_LR_INVERSE_SQRT ? "inverse square root" : lt_lr_decay_style_name(s));
}

static void hyperparameters(const LtConfig *c, int accumulation, long init_step,
                            long eval_samples) {
    char v[2 * LT_PATH_MAX + 8]; /* a path, escaped */
    const int llama = strncmp(c->logging.mllog_benchmark, "llama", 5) == 0;
    /* the 5.1.0 and 6.0.0 rules' names: adamw keys and max_steps */
    const int adamw = llama || !strcmp(c->logging.mllog_benchmark, "gpt_oss_20b");
    const long decay = c->optimizer.decay_steps > 0 ? c->optimizer.decay_steps : c->train.steps;
    num("global_batch_size", c->train.global_batch_size);
    num("max_sequence_length", c->model.seq_length);
    lt_mllog(LT_MLLOG_POINT, "opt_name", adamw ? "\"adamw\"" : "\"adam\"", NULL);
    num("opt_base_learning_rate", c->optimizer.lr);
    num("opt_end_learning_rate", c->optimizer.min_lr);
    num("opt_learning_rate_warmup_steps", c->optimizer.warmup_steps);
    /* lattice's decay runs from the end of the warm-up to decay_steps, as
     * Megatron's does. The Llama 3.1 rules count the decay steps after the
     * warm-up; the GPT-3 and GPT-OSS references log Megatron's decay steps,
     * counted from step 0 (GPT-3: ceil(lr_decay_samples / GBS); GPT-OSS:
     * lr_decay_iters, set to max_steps - warm-up). */
    num("opt_learning_rate_decay_steps", llama ? decay - c->optimizer.warmup_steps : decay);
    schedule_name(c, v, sizeof v);
    lt_mllog(LT_MLLOG_POINT, "opt_learning_rate_decay_schedule", v, NULL);
    num(adamw ? "opt_adamw_beta_1" : "opt_adam_beta_1", c->optimizer.beta1);
    num(adamw ? "opt_adamw_beta_2" : "opt_adam_beta_2", c->optimizer.beta2);
    num(adamw ? "opt_adamw_epsilon" : "opt_adam_epsilon", c->optimizer.eps);
    if (adamw) num("opt_adamw_weight_decay", c->optimizer.weight_decay);
    else num("opt_weight_decay", c->optimizer.weight_decay);
    num("opt_gradient_clip_norm", c->optimizer.clip_grad);
    num("gradient_accumulation_steps", accumulation);
    num("eval_samples", (double)eval_samples);
    num("train_samples", (double)c->train.steps * c->train.global_batch_size);
    if (adamw) /* with a ramp-up the run's optimizer steps (train.steps x G samples) */
        num("max_steps", c->train.rampup.start
                             ? (double)lt_rampup_steps(&c->train.rampup, (uint64_t)c->train.steps *
                                                                            c->train.global_batch_size)
                             : (double)c->train.steps);
    num("init_checkpoint_step", init_step);
    num("seed", (double)c->train.seed);
    /* keys the training 6.0 rules made optional and 6.1 requires (common.yaml;
     * earlier rulesets accept them): the layout, the config file and the
     * lowest precision of the GEMMs, the attention and the communication (bf16: the compute copy, activations
     * and the tensor-parallel and pipeline messages; fp32 GEMMs do not use
     * TF32) */
    num("tensor_parallelism", c->parallel.tensor_model_parallel_size);
    num("pipeline_parallelism", c->parallel.pipeline_model_parallel_size);
    num("context_parallelism", 1);
    num("expert_parallelism", c->parallel.expert_model_parallel_size);
    num("micro_batch_size", c->train.micro_batch_size);
    str_value(v, sizeof v, c->file[0] ? c->file : "(none)");
    lt_mllog(LT_MLLOG_POINT, "config_filename", v, NULL);
    const char *prec = c->train.precision == LT_PREC_BF16 ? "\"bfloat16\"" : "\"fp32\"";
    lt_mllog(LT_MLLOG_POINT, "lowest_numerical_precision_in_linear", prec, NULL);
    lt_mllog(LT_MLLOG_POINT, "lowest_numerical_precision_in_attn", prec, NULL);
    lt_mllog(LT_MLLOG_POINT, "lowest_numerical_precision_in_comm", prec, NULL);
}

void lt_mllog_on_run_start(const LtConfig *c, int accumulation, long init_step,
                           long eval_samples, long samples_done) {
    if (!g_f) return;
    hyperparameters(c, accumulation, init_step, eval_samples);
    lt_mllog(LT_MLLOG_END, "init_stop", "null", NULL);
    lt_mllog(LT_MLLOG_START, "run_start", "null", NULL);
    char meta[96];
    snprintf(meta, sizeof meta, "\"samples_count\": %ld", samples_done);
    lt_mllog(LT_MLLOG_START, "block_start", "null", meta);
}

void lt_mllog_on_eval(long samples_done, double val_log_ppl, int more) {
    if (!g_f) return;
    char meta[96], acc[64]; /* epoch_num: the same count (the GPT-3 rules ask for it) */
    snprintf(meta, sizeof meta, "\"samples_count\": %ld, \"epoch_num\": %ld", samples_done,
             samples_done);
    snprintf(acc, sizeof acc, "%.6f", isfinite(val_log_ppl) ? val_log_ppl : 1e9);
    lt_mllog(LT_MLLOG_END, "block_stop", "null", meta);
    lt_mllog(LT_MLLOG_START, "eval_start", "null", meta);
    lt_mllog(LT_MLLOG_POINT, "eval_accuracy", acc, meta);
    lt_mllog(LT_MLLOG_END, "eval_stop", "null", meta);
    if (more) lt_mllog(LT_MLLOG_START, "block_start", "null", meta);
}

void lt_mllog_on_stop(int success) {
    if (!g_f) return;
    char meta[64];
    snprintf(meta, sizeof meta, "\"status\": \"%s\"", success ? "success" : "aborted");
    lt_mllog(LT_MLLOG_END, "run_stop", "null", meta);
    fclose(g_f);
    g_f = NULL;
}
