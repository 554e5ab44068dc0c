/* config.c - the key table, YAML loading and command-line overrides.
 * See config.h; validation is in config_validate.c, printing in
 * config_print.c, and config_internal.h is what they share.
 *
 * One table (lt_cfg_keys) describes every configuration key: its section,
 * name, type, where it lives in LtConfig and its allowed range. Loading,
 * override parsing, per-key range checks, printing and did-you-mean
 * suggestions are all driven by that table, so a new key is one line there
 * plus its default in lt_config_defaults.
 *
 * Loading works on a private copy of the struct and only copies it back on
 * success, so a failed lt_config_load / lt_config_validate leaves *c as it
 * was. Every string field is zero-filled past its terminator and the struct
 * is memset before defaults are written, so two configs holding the same
 * values compare equal with memcmp. */
#include "config.h"
#include "config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

/* Enum fields are read and written through int pointers. */
_Static_assert(sizeof(LtPrecision) == sizeof(int), "enum size");
_Static_assert(sizeof(LtRecompute) == sizeof(int), "enum size");
_Static_assert(sizeof(LtDeviceKind) == sizeof(int), "enum size");
_Static_assert(sizeof(LtCommBackend) == sizeof(int), "enum size");
_Static_assert(sizeof(LtAttnImpl) == sizeof(int), "enum size");
_Static_assert(sizeof(LtArch) == sizeof(int), "enum size");
_Static_assert(sizeof(LtRopeScalingKind) == sizeof(int), "enum size");
_Static_assert(sizeof(LtLrDecayStyle) == sizeof(int), "enum size");
_Static_assert(sizeof(LtWsdDecayStyle) == sizeof(int), "enum size");
_Static_assert(sizeof(LtMoeScore) == sizeof(int), "enum size");
_Static_assert(sizeof(LtMoeBalance) == sizeof(int), "enum size");
_Static_assert(sizeof(LtMoeDropPolicy) == sizeof(int), "enum size");

/* ---- the key table ------------------------------------------------------- */

static const char *const PRECISION_NAMES[] = {"fp32", "bf16", NULL};
static const char *const RECOMPUTE_NAMES[] = {"none", "selective", "full", NULL};
static const char *const DEVICE_NAMES[] = {"auto", "cpu", "cuda", NULL};
static const char *const COMM_NAMES[] = {"auto", "nccl", "mpi", NULL};
/* index = LtAttnImpl */
static const char *const ATTENTION_NAMES[] = {"auto", "cudnn", "lattice", NULL};
static const char *const EVAL_SPLIT_NAMES[] = {"valid", "test", NULL};
static const char *const ARCH_NAMES[] = {"gpt", "llama", NULL};             /* index = LtArch */
static const char *const ROPE_SCALING_NAMES[] = {"none", "llama3", NULL}; /* LtRopeScalingKind */
static const char *const LR_DECAY_NAMES[] = {"cosine", "linear", "constant", "inverse_square_root",
                                             "wsd", NULL}; /* LtLrDecayStyle */
static const char *const WSD_DECAY_NAMES[] = {"exponential", "linear", "cosine", "minus_sqrt",
                                              NULL}; /* LtWsdDecayStyle */
static const char *const MOE_SCORE_NAMES[] = {"softmax", "sigmoid", NULL}; /* LtMoeScore */
static const char *const MOE_BALANCE_NAMES[] = {"aux_loss", "seq_aux_loss", "none",
                                                NULL}; /* LtMoeBalance */
static const char *const MOE_DROP_NAMES[] = {"probs", "position", NULL}; /* LtMoeDropPolicy */

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
    K_DBL(model, norm_epsilon, 0, 1, D_MIN_OPEN),
    K_DBL(model, rotary_base, 1, 0, D_MIN_OPEN | D_NO_MAX),
    K_ENUM(model, rope_scaling, ROPE_SCALING_NAMES),
    K_DBL(model, rope_scaling_factor, 1, 0, D_NO_MAX),
    K_DBL(model, rope_low_freq_factor, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_DBL(model, rope_high_freq_factor, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_INT(model, rope_original_max_position, 1, INT_MAX),
    K_BOOL(model, untie_embeddings_and_output_weights),
    K_DBL(model, init_method_std, 0, 0, D_MIN_OPEN | D_NO_MAX),
    K_INT(model, num_experts, 0, INT_MAX),
    K_INT(model, moe_router_topk, 1, INT_MAX),
    K_INT(model, moe_ffn_hidden_size, 0, INT_MAX),
    K_STR(model, moe_layer_freq),
    K_INT(model, moe_shared_expert_intermediate_size, 0, INT_MAX),
    K_ENUM(model, moe_router_score_function, MOE_SCORE_NAMES),
    K_BOOL(model, moe_router_pre_softmax),
    K_DBL(model, moe_router_topk_scaling_factor, 0, 0, D_NO_MAX),
    K_ENUM(model, moe_router_load_balancing_type, MOE_BALANCE_NAMES),
    K_DBL(model, moe_aux_loss_coeff, 0, 0, D_NO_MAX),
    K_DBL(model, moe_z_loss_coeff, 0, 0, D_NO_MAX),
    K_BOOL(model, moe_router_enable_expert_bias),
    K_DBL(model, moe_router_bias_update_rate, 0, 0, D_NO_MAX),
    K_DBL(model, moe_expert_capacity_factor, 0, 0, D_NO_MAX),
    K_ENUM(model, moe_token_drop_policy, MOE_DROP_NAMES),
    K_BOOL(model, moe_pad_expert_input_to_capacity),
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
#define SECTIONS lt_cfg_sections
#define NSECTIONS ((int)(sizeof(lt_cfg_sections) / sizeof(lt_cfg_sections[0])))
const int lt_cfg_nsections = NSECTIONS;

#define NAME_MAX_LEN LT_CFG_NAME_MAX

static void *field(LtConfig *c, const KeyDesc *k) {
    return (char *)c + k->off;
}

void lt_cfg_full_name(const KeyDesc *k, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", k->section, k->name);
}

/* Index of the key with dotted name `name`, or -1. */
static int find_key(const char *name) {
    char buf[NAME_MAX_LEN];
    for (int i = 0; i < NKEYS; i++) {
        lt_cfg_full_name(&lt_cfg_keys[i], buf, sizeof buf);
        if (strcmp(buf, name) == 0)
            return i;
    }
    return -1;
}

static int find_section(const char *name) {
    for (int i = 0; i < NSECTIONS; i++)
        if (strcmp(SECTIONS[i], name) == 0)
            return i;
    return -1;
}

int lt_cfg_enum_count(const char *const *names) {
    int n = 0;
    while (names[n])
        n++;
    return n;
}

/* ---- error messages ------------------------------------------------------ */

/* Format into err (if any room) and flatten to one line. Always returns -1. */
int lt_cfg_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return -1;
}

/* A printable, bounded excerpt of a user value for error messages. */
static void show_value(const char *v, size_t len, char *buf, size_t n) {
    size_t limit = 40, o = 0;
    for (size_t i = 0; i < len && i < limit && o + 1 < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        buf[o++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    if (len > limit && o + 4 < n) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
}

/* " at FILE:LINE" for YAML input, " on the command line" for overrides,
 * "" when checking a struct built in code. */
static void where_text(char *buf, size_t n, const char *file, size_t line) {
    if (file)
        snprintf(buf, n, " at %s:%zu", file, line);
    else
        snprintf(buf, n, " on the command line");
}

/* Error for an unknown section (is_section) or dotted key at `where`. */
static int fail_unknown(char *err, size_t errlen, bool is_section, const char *name,
                        const char *where) {
    char shown[64], hint[NAME_MAX_LEN + 32] = "";
    char sug[NAME_MAX_LEN];
    show_value(name, strlen(name), shown, sizeof shown);
    if (strcmp(name, "model.padded_vocab_size") == 0)
        return lt_cfg_fail(
            err, errlen,
            "model.padded_vocab_size%s is derived from model.vocab_size and cannot be set", where);
    if (lt_cfg_suggest(name, sug, sizeof sug))
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", sug);
    else if (is_section)
        snprintf(hint, sizeof hint,
                 " (sections: model, parallel, train, optimizer, data, "
                 "checkpoint, logging, eval, comm, sample)");
    return lt_cfg_fail(err, errlen, "unknown %s '%s'%s%s", is_section ? "section" : "key", shown,
                       where, hint);
}

/* ---- scalar conversion --------------------------------------------------- */

/* Parse a whole decimal integer (optional sign). 0 ok, -1 not an integer,
 * -2 out of long long range. */
static int parse_ll(const char *s, long long *out) {
    if (!(isdigit((unsigned char)s[0]) ||
          ((s[0] == '-' || s[0] == '+') && isdigit((unsigned char)s[1]))))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0')
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = v;
    return 0;
}

/* Same for an unsigned 64-bit value (no minus sign). */
static int parse_u64(const char *s, uint64_t *out) {
    if (!(isdigit((unsigned char)s[0]) || (s[0] == '+' && isdigit((unsigned char)s[1]))))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = (uint64_t)v;
    return 0;
}

/* A finite number in C/YAML notation ("6e-4", "0.1", "3"). */
static int parse_double(const char *s, double *out) {
    if (s[0] == '\0' || isspace((unsigned char)s[0]))
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v))
        return -1;
    *out = v; /* underflow to 0 or a denormal is accepted; range checks follow */
    return 0;
}

static int parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = false, 0;
    }
    return -1;
}

/* "a|b|c" listing of an enum's spellings. */
static void enum_list(const char *const *names, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; names[i]; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, "%s%s", i ? "|" : "", names[i]);
    }
}

/* Range check of one key's current value in c. `where` is appended to the
 * message (may be ""). Returns 0 or -1 with err set. */
int lt_cfg_check_range(const LtConfig *c, const KeyDesc *k, const char *where, char *err,
                       size_t errlen) {
    char name[NAME_MAX_LEN];
    lt_cfg_full_name(k, name, sizeof name);
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        long long v = k->type == KT_INT ? *(const int *)lt_cfg_cfield(c, k)
                                        : *(const long *)lt_cfg_cfield(c, k);
        long long type_max = k->type == KT_INT ? INT_MAX : LONG_MAX;
        if (v >= k->imin && v <= k->imax)
            return 0;
        if (k->imax == type_max)
            return lt_cfg_fail(err, errlen, "%s must be >= %lld, got %lld%s", name, k->imin, v,
                               where);
        return lt_cfg_fail(err, errlen, "%s must be in [%lld, %lld], got %lld%s", name, k->imin,
                           k->imax, v, where);
    }
    case KT_DOUBLE: {
        double v = *(const double *)lt_cfg_cfield(c, k);
        bool lo_ok = (k->dflags & D_MIN_OPEN) ? v > k->dmin : v >= k->dmin;
        bool hi_ok =
            (k->dflags & D_NO_MAX) || ((k->dflags & D_MAX_OPEN) ? v < k->dmax : v <= k->dmax);
        if (!isfinite(v))
            return lt_cfg_fail(err, errlen, "%s must be a finite number%s", name, where);
        /* the engine computes with these in fp32 (AdamW's arguments, sampling):
         * a value fp32 cannot hold would become inf or 0 there */
        if (fabs(v) > FLT_MAX || (v != 0.0 && (float)v == 0.0f))
            return lt_cfg_fail(err, errlen,
                               "%s = %g does not fit in fp32 (magnitude up to %g, and not below "
                               "%g unless 0)%s",
                               name, v, (double)FLT_MAX, (double)FLT_TRUE_MIN, where);
        if (lo_ok && hi_ok)
            return 0;
        if (k->dflags & D_NO_MAX)
            return lt_cfg_fail(err, errlen, "%s must be %s %g, got %g%s", name,
                               (k->dflags & D_MIN_OPEN) ? ">" : ">=", k->dmin, v, where);
        return lt_cfg_fail(err, errlen, "%s must be in %c%g, %g%c, got %g%s", name,
                           (k->dflags & D_MIN_OPEN) ? '(' : '[', k->dmin, k->dmax,
                           (k->dflags & D_MAX_OPEN) ? ')' : ']', v, where);
    }
    case KT_ENUM: {
        int v = *(const int *)lt_cfg_cfield(c, k);
        if (v >= 0 && v < lt_cfg_enum_count(k->enums))
            return 0;
        char list[64];
        enum_list(k->enums, list, sizeof list);
        return lt_cfg_fail(err, errlen, "%s has invalid value %d (allowed: %s)%s", name, v, list,
                           where);
    }
    case KT_STR: {
        const char *s = lt_cfg_cfield(c, k);
        if (memchr(s, '\0', LT_PATH_MAX))
            return 0;
        return lt_cfg_fail(err, errlen, "%s is not NUL-terminated%s", name, where);
    }
    case KT_BOOL:
    case KT_U64: return 0;
    }
    return 0;
}

static bool is_null_word(const char *s) {
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* Store text `v` (len bytes, NUL-terminated) into key k of c, then range
 * check it. `yaml_null_ok`: a plain YAML null (empty, ~, null) means "" for
 * string keys; command-line values are taken verbatim. */
static int set_value(LtConfig *c, const KeyDesc *k, const char *v, size_t len, bool yaml_null_ok,
                     const char *where, char *err, size_t errlen) {
    char name[NAME_MAX_LEN], shown[64];
    lt_cfg_full_name(k, name, sizeof name);
    show_value(v, len, shown, sizeof shown);
    if (memchr(v, '\0', len))
        return lt_cfg_fail(err, errlen, "%s: value contains a NUL character%s", name, where);
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        long long x = 0;
        long long tmin = k->type == KT_INT ? INT_MIN : LONG_MIN;
        long long tmax = k->type == KT_INT ? INT_MAX : LONG_MAX;
        int rc = parse_ll(v, &x);
        if (rc == -1)
            return lt_cfg_fail(err, errlen, "%s: expected an integer, got '%s'%s", name, shown,
                               where);
        if (rc == -2 || x < tmin || x > tmax) {
            if (k->imax == tmax)
                return lt_cfg_fail(err, errlen,
                                   "%s: %s is out of range (must be >= %lld and <= %lld)%s", name,
                                   shown, k->imin, tmax, where);
            return lt_cfg_fail(err, errlen, "%s: %s is out of range (must be in [%lld, %lld])%s",
                               name, shown, k->imin, k->imax, where);
        }
        if (k->type == KT_INT)
            *(int *)field(c, k) = (int)x;
        else
            *(long *)field(c, k) = (long)x;
        break;
    }
    case KT_U64: {
        uint64_t x = 0;
        int rc = parse_u64(v, &x);
        if (rc == -1)
            return lt_cfg_fail(err, errlen, "%s: expected an unsigned 64-bit integer, got '%s'%s",
                               name, shown, where);
        if (rc == -2)
            return lt_cfg_fail(err, errlen,
                               "%s: %s is out of range (must be in [0, %" PRIu64 "])%s", name,
                               shown, UINT64_MAX, where);
        *(uint64_t *)field(c, k) = x;
        break;
    }
    case KT_DOUBLE: {
        double x = 0;
        if (parse_double(v, &x))
            return lt_cfg_fail(err, errlen, "%s: expected a finite number, got '%s'%s", name, shown,
                               where);
        *(double *)field(c, k) = x;
        break;
    }
    case KT_BOOL: {
        bool x = false;
        if (parse_bool(v, &x))
            return lt_cfg_fail(err, errlen, "%s: expected a boolean (true/false), got '%s'%s", name,
                               shown, where);
        *(bool *)field(c, k) = x;
        break;
    }
    case KT_ENUM: {
        int n = lt_cfg_enum_count(k->enums), found = -1;
        for (int i = 0; i < n; i++)
            if (strcasecmp(v, k->enums[i]) == 0)
                found = i;
        if (found < 0) {
            char list[64];
            enum_list(k->enums, list, sizeof list);
            return lt_cfg_fail(err, errlen, "%s: expected one of %s, got '%s'%s", name, list, shown,
                               where);
        }
        *(int *)field(c, k) = found;
        break;
    }
    case KT_STR: {
        char *dst = field(c, k);
        if (yaml_null_ok && is_null_word(v))
            len = 0;
        if (len >= LT_PATH_MAX)
            return lt_cfg_fail(err, errlen, "%s: value is too long (%zu bytes, at most %d)%s", name,
                               len, LT_PATH_MAX - 1, where);
        memset(dst, 0, LT_PATH_MAX);
        memcpy(dst, v, len);
        break;
    }
    }
    return lt_cfg_check_range(c, k, where, err, errlen);
}

/* ---- YAML file ----------------------------------------------------------- */

typedef struct {
    yaml_parser_t parser;
    const char *file;
    LtConfig *cfg;
    char *err;
    size_t errlen;
    bool section_seen[NSECTIONS];
    size_t section_line[NSECTIONS];
    bool key_seen[NKEYS];
    size_t key_line[NKEYS];
} YamlIn;

static size_t line_of(const yaml_event_t *ev) {
    return ev->start_mark.line + 1;
}

static const char *node_kind(const yaml_event_t *ev) {
    switch (ev->type) {
    case YAML_SCALAR_EVENT: return "a scalar";
    case YAML_SEQUENCE_START_EVENT: return "a sequence";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_ALIAS_EVENT: return "an alias (aliases are not supported)";
    default: return "something else";
    }
}

static bool is_null_scalar(const yaml_event_t *ev) {
    return ev->type == YAML_SCALAR_EVENT && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           is_null_word((const char *)ev->data.scalar.value);
}

/* Next event, or -1 with libyaml's diagnosis in err. */
static int next_event(YamlIn *in, yaml_event_t *ev) {
    if (yaml_parser_parse(&in->parser, ev))
        return 0;
    const yaml_parser_t *p = &in->parser;
    const char *problem = p->problem ? p->problem : "unknown error";
    switch (p->error) {
    case YAML_MEMORY_ERROR:
        return lt_cfg_fail(in->err, in->errlen, "%s: out of memory while parsing YAML", in->file);
    case YAML_READER_ERROR:
        return lt_cfg_fail(in->err, in->errlen, "%s: cannot read YAML: %s (at byte %zu)", in->file,
                           problem, p->problem_offset);
    default:
        if (p->context)
            return lt_cfg_fail(in->err, in->errlen,
                               "%s:%zu:%zu: YAML syntax error: %s (%s at line %zu)", in->file,
                               p->problem_mark.line + 1, p->problem_mark.column + 1, problem,
                               p->context, p->context_mark.line + 1);
        return lt_cfg_fail(in->err, in->errlen, "%s:%zu:%zu: YAML syntax error: %s", in->file,
                           p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
    }
}

/* Copy a mapping key scalar into buf for lookups; NULs become '?' so a
 * quoted "\0" cannot match a real name. */
static void scalar_text(const yaml_event_t *ev, char *buf, size_t n) {
    size_t len = ev->data.scalar.length;
    if (len >= n)
        len = n - 1;
    for (size_t i = 0; i < len; i++) {
        char ch = (char)ev->data.scalar.value[i];
        buf[i] = ch ? ch : '?';
    }
    buf[len] = '\0';
}

/* An explicit YAML tag on a value must agree with the key's type: `!!str 5`
 * for an integer key is a string in YAML, not the number 5, and is refused
 * (as is any tag outside YAML's core schema); untagged values are read by the
 * key's type. Returns 0 when the tag (or its absence) is acceptable. */
static int check_tag(const KeyDesc *k, const yaml_event_t *ev, const char *dotted,
                     const char *where, char *err, size_t errlen) {
    const char *tag = (const char *)ev->data.scalar.tag;
    if (!tag || !strcmp(tag, "!")) /* "!" is the non-specific tag of a quoted scalar */
        return 0;
    static const char core[] = "tag:yaml.org,2002:";
    const char *want = NULL;
    switch (k->type) {
    case KT_INT:
    case KT_LONG:
    case KT_U64: want = "int"; break;
    case KT_DOUBLE: want = "float"; break;
    case KT_BOOL: want = "bool"; break;
    case KT_STR:
    case KT_ENUM: want = "str"; break;
    }
    if (strncmp(tag, core, sizeof core - 1) == 0) {
        const char *t = tag + sizeof core - 1;
        if (!strcmp(t, want) || (k->type == KT_DOUBLE && !strcmp(t, "int")) ||
            (!strcmp(t, "null") && (k->type == KT_STR || k->type == KT_ENUM)))
            return 0;
        return lt_cfg_fail(err, errlen, "%s: the value is tagged !!%s, but the key takes %s %s%s",
                           dotted, t, !strcmp(want, "int") ? "an" : "a",
                           !strcmp(want, "str") ? "string" : !strcmp(want, "int") ? "integer" : want,
                           where);
    }
    return lt_cfg_fail(err, errlen, "%s: unsupported YAML tag '%s' (write the value untagged)%s",
                       dotted, tag, where);
}

/* Keys that also take a YAML list, stored as one string: data.train_path and
 * data.valid_path take a dataset blend written [W1, PATH1, W2, PATH2, ...]
 * (or [PATH] alone), stored joined by spaces as Megatron's string form, which
 * data/blend.c parses; model.moe_layer_freq and model.window_attn_skip_freq
 * take a pattern [1, 0, 1, 1], stored as the string "[1,0,1,1]"
 * (lt_moe_layer_pattern), model.window_size its pair [128, 0] as "[128,0]";
 * train.rampup_batch_size [START, INCREMENT, SAMPLES] as Megatron's three
 * numbers, "START INCREMENT SAMPLES". */
typedef struct {
    const char *key;
    char sep;
    const char *open, *close; /* around the joined items */
    const char *what;         /* the items, for messages */
    const char *no_space;     /* why an item cannot hold a space */
} ListKey;
static const ListKey LIST_KEYS[] = {
    {"data.train_path", ' ', "", "", "a blend list holds weights and paths",
     "paths in a blend cannot have spaces"},
    {"data.valid_path", ' ', "", "", "a blend list holds weights and paths",
     "paths in a blend cannot have spaces"},
    {"model.moe_layer_freq", ',', "[", "]", "a layer pattern holds 0s and 1s",
     "each item is one 0 or 1"},
    {"model.window_size", ',', "[", "]", "a window holds two numbers", "each item is one number"},
    {"model.window_attn_skip_freq", ',', "[", "]", "a layer pattern holds 0s and 1s",
     "each item is one 0 or 1"},
    {"train.rampup_batch_size", ' ', "", "", "a ramp-up holds three numbers",
     "each item is one number"},
};

static const ListKey *list_key(const char *dotted) {
    for (size_t i = 0; i < sizeof LIST_KEYS / sizeof LIST_KEYS[0]; i++)
        if (!strcmp(dotted, LIST_KEYS[i].key)) return &LIST_KEYS[i];
    return NULL;
}

/* The list's items up to its SEQUENCE-END (its START consumed) into k. */
static int parse_list(YamlIn *in, const KeyDesc *k, const ListKey *lk, const char *where) {
    char joined[LT_PATH_MAX];
    size_t len = strlen(lk->open);
    memcpy(joined, lk->open, len);
    yaml_event_t ev;
    for (int items = 0;; items++) {
        if (next_event(in, &ev))
            return -1;
        if (ev.type == YAML_SEQUENCE_END_EVENT)
            break;
        if (ev.type != YAML_SCALAR_EVENT) {
            const char *kind = node_kind(&ev);
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen, "%s: %s, got %s%s", lk->key, lk->what, kind,
                               where);
        }
        const size_t n = ev.data.scalar.length;
        if (memchr(ev.data.scalar.value, ' ', n) || memchr(ev.data.scalar.value, '\t', n) || !n) {
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen,
                               "%s: a list item is empty or holds a space (%s)%s", lk->key,
                               lk->no_space, where);
        }
        if (len + n + 1 + strlen(lk->close) >= sizeof joined) {
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen, "%s: the list is too long (at most %d "
                               "bytes joined)%s", lk->key, LT_PATH_MAX - 1, where);
        }
        if (items) joined[len++] = lk->sep;
        memcpy(joined + len, ev.data.scalar.value, n);
        len += n;
        yaml_event_delete(&ev);
    }
    yaml_event_delete(&ev);
    memcpy(joined + len, lk->close, strlen(lk->close));
    len += strlen(lk->close);
    return set_value(in->cfg, k, joined, len, false, where, in->err, in->errlen);
}

/* Keys of one section; the section's MAPPING-START has been consumed. */
static int parse_keys(YamlIn *in, int sec) {
    yaml_event_t ev;
    char key[NAME_MAX_LEN], dotted[2 * NAME_MAX_LEN], where[LT_PATH_MAX + 64];
    for (;;) {
        if (next_event(in, &ev))
            return -1;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        size_t line = line_of(&ev);
        where_text(where, sizeof where, in->file, line);
        if (ev.type != YAML_SCALAR_EVENT) {
            const char *kind = node_kind(&ev);
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen,
                               "section '%s': keys must be plain names, got %s%s", SECTIONS[sec],
                               kind, where);
        }
        scalar_text(&ev, key, sizeof key);
        yaml_event_delete(&ev);
        snprintf(dotted, sizeof dotted, "%s.%s", SECTIONS[sec], key);
        int ki = find_key(dotted);
        if (ki < 0)
            return fail_unknown(in->err, in->errlen, false, dotted, where);
        if (in->key_seen[ki])
            return lt_cfg_fail(in->err, in->errlen, "duplicate key '%s'%s (first set at line %zu)",
                               dotted, where, in->key_line[ki]);
        in->key_seen[ki] = true;
        in->key_line[ki] = line;

        if (next_event(in, &ev))
            return -1;
        where_text(where, sizeof where, in->file, line_of(&ev));
        if (ev.type == YAML_SEQUENCE_START_EVENT && list_key(dotted)) {
            yaml_event_delete(&ev);
            if (parse_list(in, &lt_cfg_keys[ki], list_key(dotted), where))
                return -1;
            continue;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            const char *kind = node_kind(&ev);
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen, "%s: expected a single value, got %s%s", dotted,
                               kind, where);
        }
        if (check_tag(&lt_cfg_keys[ki], &ev, dotted, where, in->err, in->errlen)) {
            yaml_event_delete(&ev);
            return -1;
        }
        int rc = set_value(in->cfg, &lt_cfg_keys[ki], (const char *)ev.data.scalar.value,
                           ev.data.scalar.length, ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE,
                           where, in->err, in->errlen);
        yaml_event_delete(&ev);
        if (rc)
            return -1;
    }
}

/* Sections of the root mapping; its MAPPING-START has been consumed. */
static int parse_sections(YamlIn *in) {
    yaml_event_t ev;
    char name[NAME_MAX_LEN], where[LT_PATH_MAX + 64];
    for (;;) {
        if (next_event(in, &ev))
            return -1;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        size_t line = line_of(&ev);
        where_text(where, sizeof where, in->file, line);
        if (ev.type != YAML_SCALAR_EVENT) {
            const char *kind = node_kind(&ev);
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen, "section names must be plain words, got %s%s",
                               kind, where);
        }
        scalar_text(&ev, name, sizeof name);
        yaml_event_delete(&ev);
        int si = find_section(name);
        if (si < 0)
            return fail_unknown(in->err, in->errlen, true, name, where);
        if (in->section_seen[si])
            return lt_cfg_fail(in->err, in->errlen, "duplicate section '%s'%s (first at line %zu)",
                               name, where, in->section_line[si]);
        in->section_seen[si] = true;
        in->section_line[si] = line;

        if (next_event(in, &ev))
            return -1;
        if (ev.type == YAML_MAPPING_START_EVENT) {
            yaml_event_delete(&ev);
            if (parse_keys(in, si))
                return -1;
        } else if (is_null_scalar(&ev)) { /* "train:" with every key commented out */
            yaml_event_delete(&ev);
        } else {
            const char *kind = node_kind(&ev);
            where_text(where, sizeof where, in->file, line_of(&ev));
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen,
                               "section '%s' must be a mapping of keys, got %s%s", name, kind,
                               where);
        }
    }
}

/* The whole stream: nothing, or one document whose root is a mapping (or a
 * plain null, e.g. a file holding only "---"). */
static int parse_stream(YamlIn *in) {
    yaml_event_t ev;
    if (next_event(in, &ev))
        return -1; /* STREAM-START */
    yaml_event_delete(&ev);
    if (next_event(in, &ev))
        return -1;
    bool empty = ev.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev); /* STREAM-END or DOCUMENT-START */
    if (empty)
        return 0;

    if (next_event(in, &ev))
        return -1;
    if (ev.type == YAML_MAPPING_START_EVENT) {
        yaml_event_delete(&ev);
        if (parse_sections(in))
            return -1;
    } else if (is_null_scalar(&ev)) {
        yaml_event_delete(&ev);
    } else {
        const char *kind = node_kind(&ev);
        size_t line = line_of(&ev);
        yaml_event_delete(&ev);
        return lt_cfg_fail(
            in->err, in->errlen,
            "%s:%zu: the top level must be a mapping of sections (model, train, ...), "
            "got %s",
            in->file, line, kind);
    }
    if (next_event(in, &ev))
        return -1; /* DOCUMENT-END */
    yaml_event_delete(&ev);
    if (next_event(in, &ev))
        return -1;
    bool more = ev.type != YAML_STREAM_END_EVENT;
    size_t line = line_of(&ev);
    yaml_event_delete(&ev);
    if (more)
        return lt_cfg_fail(in->err, in->errlen, "%s:%zu: only one YAML document is allowed",
                           in->file, line);
    return 0;
}

static int load_file(LtConfig *c, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return lt_cfg_fail(err, errlen, "cannot open config file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return lt_cfg_fail(err, errlen, "config file '%s' is a directory", path);
    }
    YamlIn *in = calloc(1, sizeof *in);
    if (!in) {
        fclose(f);
        return lt_cfg_fail(err, errlen, "out of memory reading config file '%s'", path);
    }
    int rc = -1;
    if (!yaml_parser_initialize(&in->parser)) {
        lt_cfg_fail(err, errlen, "out of memory reading config file '%s'", path);
    } else {
        yaml_parser_set_input_file(&in->parser, f);
        in->file = path;
        in->cfg = c;
        in->err = err;
        in->errlen = errlen;
        rc = parse_stream(in);
        yaml_parser_delete(&in->parser);
    }
    free(in);
    fclose(f);
    return rc;
}

/* ---- command-line overrides ---------------------------------------------- */

static int apply_override(LtConfig *c, const char *ov, char *err, size_t errlen) {
    char shown[64], key[NAME_MAX_LEN], where[64];
    const char *eq = strchr(ov, '=');
    size_t klen = eq ? (size_t)(eq - ov) : strlen(ov);
    show_value(ov, strlen(ov), shown, sizeof shown);
    if (!eq || klen == 0 || !memchr(ov, '.', klen))
        return lt_cfg_fail(err, errlen, "malformed override '%s' (expected section.key=value)",
                           shown);
    where_text(where, sizeof where, NULL, 0);
    if (klen >= sizeof key) {
        show_value(ov, klen, shown, sizeof shown);
        return lt_cfg_fail(err, errlen, "unknown key '%s'%s", shown, where);
    }
    memcpy(key, ov, klen);
    key[klen] = '\0';
    int ki = find_key(key);
    if (ki < 0)
        return fail_unknown(err, errlen, false, key, where);
    return set_value(c, &lt_cfg_keys[ki], eq + 1, strlen(eq + 1), false, where, err, errlen);
}

/* ---- public API ---------------------------------------------------------- */

void lt_config_defaults(LtConfig *c) {
    memset(c, 0, sizeof *c); /* also zeroes padding and string tails (memcmp-able) */
    c->model.num_layers = 12;
    c->model.hidden_size = 768;
    c->model.num_attention_heads = 12;
    c->model.ffn_hidden_size = 0;
    c->model.seq_length = 1024;
    c->model.max_position_embeddings = 1024;
    c->model.vocab_size = 50257;
    c->model.make_vocab_size_divisible_by = 128;
    c->model.padded_vocab_size = 0;
    c->model.attention = LT_ATTN_AUTO;
    c->model.attention_deterministic = true;
    c->model.arch = LT_ARCH_GPT;
    c->model.num_query_groups = 0;
    c->model.kv_channels = 0;
    c->model.qk_layernorm = false;
    c->model.norm_epsilon = 1e-5;
    c->model.rotary_base = 500000;
    c->model.rope_scaling = LT_ROPE_NONE;
    c->model.rope_scaling_factor = 8;
    c->model.rope_low_freq_factor = 1;
    c->model.rope_high_freq_factor = 4;
    c->model.rope_original_max_position = 8192;
    c->model.untie_embeddings_and_output_weights = false;
    c->model.init_method_std = 0.02; /* Megatron's --init-method-std */
    /* mixture of experts: Megatron-Core's defaults (experts 0: dense) */
    c->model.num_experts = 0;
    c->model.moe_router_topk = 2;
    c->model.moe_ffn_hidden_size = 0;
    strcpy(c->model.moe_layer_freq, "1");
    c->model.moe_shared_expert_intermediate_size = 0;
    c->model.moe_router_score_function = LT_MOE_SOFTMAX;
    c->model.moe_router_pre_softmax = false;
    c->model.moe_router_topk_scaling_factor = 0;
    c->model.moe_router_load_balancing_type = LT_MOE_AUX_LOSS;
    c->model.moe_aux_loss_coeff = 0;
    c->model.moe_z_loss_coeff = 0;
    c->model.moe_router_enable_expert_bias = false;
    c->model.moe_router_bias_update_rate = 1e-3;
    c->model.moe_expert_capacity_factor = 0;
    c->model.moe_token_drop_policy = LT_MOE_DROP_PROBS;
    c->model.moe_pad_expert_input_to_capacity = false;

    c->parallel.tensor_model_parallel_size = 1;
    c->parallel.pipeline_model_parallel_size = 1;
    c->parallel.virtual_pipeline_model_parallel_size = 1;
    c->parallel.num_layers_in_first_pipeline_stage = 0;
    c->parallel.num_layers_in_last_pipeline_stage = 0;
    c->parallel.account_for_embedding_in_pipeline_split = false;
    c->parallel.account_for_loss_in_pipeline_split = false;
    c->parallel.sequence_parallel = false;
    c->parallel.expert_model_parallel_size = 1;
    c->parallel.expert_tensor_parallel_size = 1;
    c->parallel.overlap_grad_reduce = false;
    c->parallel.overlap_param_gather = false;
    c->parallel.overlap_p2p_comm = false;
    c->parallel.tp_comm_overlap = false;
    c->parallel.bucket_size = 40000000; /* Megatron's default: 40 M parameters */

    c->train.micro_batch_size = 1;
    c->train.global_batch_size = 8;
    c->train.steps = 100;
    c->train.precision = LT_PREC_FP32;
    c->train.seed = 1234;
    c->train.recompute = LT_RECOMPUTE_NONE;
    c->train.device = LT_DEVICE_AUTO;
    c->train.threads = 0;
    c->train.max_skipped_steps = 5;
    c->train.loss_spike_zscore = 0.0;
    c->train.loss_spike_window = 100;
    c->train.calculate_per_token_loss = true;

    c->optimizer.lr = 6e-4;
    c->optimizer.min_lr = 6e-5;
    c->optimizer.warmup_steps = 0;
    c->optimizer.decay_steps = 0;
    c->optimizer.lr_decay_style = LT_LR_COSINE;
    c->optimizer.lr_wsd_decay_steps = 0;
    c->optimizer.lr_wsd_decay_style = LT_WSD_EXPONENTIAL; /* Megatron's default */
    c->optimizer.beta1 = 0.9;
    c->optimizer.beta2 = 0.95;
    c->optimizer.eps = 1e-8;
    c->optimizer.weight_decay = 0.1;
    c->optimizer.clip_grad = 1.0;
    c->optimizer.zero_stage = 0;

    c->data.shuffle = true;
    c->data.prefetch = 2;
    c->data.eod_token = -1;
    c->data.eod_mask_loss = false;
    c->data.reset_position_ids = false;
    c->data.reset_attention_mask = false;

    c->comm.timeout_s = 600;
    c->checkpoint.save_interval = 0;
    c->checkpoint.io_buffer_mib = 64;

    c->logging.log_interval = 1;
    c->logging.peak_tflops = 0;

    c->eval.interval = 0;
    c->eval.iters = 1;

    c->comm.backend = LT_COMM_AUTO;

    c->sample.num_tokens = 64;
    c->sample.temperature = 0.8;
    c->sample.top_k = 40;
    c->sample.seed = 42;
}

int lt_config_load(LtConfig *c, const char *path, int nover, char **overrides, char *err,
                   size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    LtConfig *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return lt_cfg_fail(err, errlen, "out of memory loading the configuration");
    lt_config_defaults(tmp);
    int rc = 0;
    if (path)
        rc = load_file(tmp, path, err, errlen);
    if (rc == 0)
        rc = lt_config_apply_overrides(tmp, nover, overrides, err, errlen);
    if (rc == 0)
        memcpy(c, tmp, sizeof *c);
    free(tmp);
    return rc;
}

int lt_config_apply_overrides(LtConfig *c, int nover, char **overrides, char *err, size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (nover > 0 && !overrides)
        return lt_cfg_fail(err, errlen, "overrides array is NULL");
    LtConfig *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return lt_cfg_fail(err, errlen, "out of memory loading the configuration");
    memcpy(tmp, c, sizeof *tmp);
    int rc = 0;
    for (int i = 0; rc == 0 && i < nover; i++) {
        if (!overrides[i])
            rc = lt_cfg_fail(err, errlen, "override %d is NULL", i);
        else
            rc = apply_override(tmp, overrides[i], err, errlen);
    }
    if (rc == 0)
        memcpy(c, tmp, sizeof *c);
    free(tmp);
    return rc;
}

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

long long lt_config_padded_vocab(const LtConfig *c, int tp) {
    const long long mult = (long long)c->model.make_vocab_size_divisible_by * tp;
    return (c->model.vocab_size + mult - 1) / mult * mult;
}

LtLayerSplit lt_config_layer_split(const LtConfig *c) {
    return (LtLayerSplit){.first = c->parallel.num_layers_in_first_pipeline_stage,
                          .last = c->parallel.num_layers_in_last_pipeline_stage,
                          .embedding = c->parallel.account_for_embedding_in_pipeline_split,
                          .loss = c->parallel.account_for_loss_in_pipeline_split};
}
