/* hf_import.c - `lattice import`: a Hugging Face LlamaForCausalLM,
 * Qwen2ForCausalLM (a Llama with model.add_qkv_bias), Qwen3ForCausalLM (a
 * Llama with model.qk_layernorm), Qwen3MoeForCausalLM, MixtralForCausalLM,
 * GptOssForCausalLM or GPT2LMHeadModel directory as a weights-only lattice
 * checkpoint (hf.h).
 *
 * Order of work, so that nothing is allocated from a size that has not been
 * checked: config.json becomes a lattice config (every setting the model's
 * function depends on is checked to be one lattice computes; absent keys take
 * the defaults transformers gives them), the command-line overrides are
 * applied, the config is validated; then the safetensors headers are read
 * (model.safetensors, or model.safetensors.index.json and every shard it
 * names) and every tensor the model needs is matched by name, dtype and
 * shape, and every tensor in the files must be one of them (or a known
 * non-learned buffer). Only then is the fp32 output allocated - its size is
 * bounded by the data the files hold plus the padded vocabulary rows - and
 * filled tensor by tensor: a tensor that is a block of rows of ours is read
 * straight into its place in 1 MiB chunks, a GPT-2 Conv1D weight through one
 * temporary copy for the transpose. So the memory is the output plus at most
 * one tensor, whatever the size of the model and its dtype (bf16 included).
 * The checkpoint is written by lt_ckpt_save at step 0 without Adam moments. */
#include "hf.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "common.h"
#include "config.h"
#include "fileio.h"
#include "json.h"
#include "safetensors.h"

#define MAX_JSON_BYTES (64u << 20) /* config.json, the shard index */

/* ---- reading JSON files ------------------------------------------------------ */

/* The parsed JSON object in `path`; NULL with err. */
static LtJson *read_json_object(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        lt_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    char *text = NULL;
    LtJson *js = NULL;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        lt_errorf(err, errlen, "%s is not a regular file", path);
    } else if ((uint64_t)sb.st_size > MAX_JSON_BYTES) {
        lt_errorf(err, errlen, "%s is %lld bytes; more than %u is not a config", path,
                  (long long)sb.st_size, MAX_JSON_BYTES);
    } else {
        const size_t n = (size_t)sb.st_size;
        text = lt_malloc(n + 1);
        if (fread(text, 1, n, f) != n) lt_errorf(err, errlen, "error reading %s", path);
        else js = lt_json_parse(text, n, path, err, errlen);
    }
    if (js && js->type != LT_JSON_OBJECT) {
        lt_errorf(err, errlen, "%s: the top level is %s, not an object", path,
                  lt_json_type_name(js->type));
        lt_json_free(js);
        js = NULL;
    }
    free(text);
    fclose(f);
    return js;
}

/* ---- config.json -> LtConfig ------------------------------------------------ */

typedef struct {
    const LtJson *js;
    const char *path;
    char *err;
    size_t errlen;
} Cfg;

/* Key `key` of the object, or NULL when absent or JSON null. */
static const LtJson *opt(const LtJson *obj, const char *key) {
    const LtJson *v = lt_json_get(obj, key);
    return v && v->type != LT_JSON_NULL ? v : NULL;
}

#define REQUIRED LLONG_MIN /* get_int's def for a key that must be there */

/* Integer key in [lo, hi]; *out = def when absent (REQUIRED: refused).
 * `where` prefixes nested keys ("rope_scaling."). */
static int get_int(const Cfg *c, const LtJson *obj, const char *where, const char *key, long long lo,
                   long long hi, long long def, int *out) {
    const LtJson *v = opt(obj, key);
    if (!v) {
        if (def == REQUIRED)
            return lt_errorf(c->err, c->errlen, "%s: '%s%s' is missing", c->path, where, key);
        *out = (int)def;
        return 0;
    }
    uint64_t x;
    double d;
    if (lt_json_u64(v, &x) != 0) { /* 8.0 is accepted as 8; a fraction is not */
        if (lt_json_double(v, &d) != 0 || d != floor(d) || d < 0 || d > 9e18)
            return lt_errorf(c->err, c->errlen, "%s: '%s%s' must be an integer in [%lld, %lld], got %s",
                             c->path, where, key, lo, hi,
                             v->type == LT_JSON_NUMBER ? v->text : lt_json_type_name(v->type));
        x = (uint64_t)d;
    }
    if (x < (uint64_t)lo || x > (uint64_t)hi)
        return lt_errorf(c->err, c->errlen, "%s: '%s%s' is %s; lattice holds [%lld, %lld]", c->path,
                         where, key, v->text, lo, hi);
    *out = (int)x;
    return 0;
}

/* Finite number key; def when absent (NAN: required). */
static int get_num(const Cfg *c, const LtJson *obj, const char *where, const char *key, double def,
                   double *out) {
    const LtJson *v = opt(obj, key);
    if (!v) {
        if (isnan(def)) return lt_errorf(c->err, c->errlen, "%s: '%s%s' is missing", c->path, where, key);
        *out = def;
        return 0;
    }
    if (lt_json_double(v, out) != 0)
        return lt_errorf(c->err, c->errlen, "%s: '%s%s' must be a finite number, got %s", c->path,
                         where, key, v->type == LT_JSON_NUMBER ? v->text : lt_json_type_name(v->type));
    return 0;
}

static int get_bool(const Cfg *c, const char *key, int def, int *out) {
    const LtJson *v = opt(c->js, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (v->type != LT_JSON_BOOL)
        return lt_errorf(c->err, c->errlen, "%s: '%s' must be true or false, got %s", c->path, key,
                         lt_json_type_name(v->type));
    *out = v->boolean;
    return 0;
}

/* A boolean key that must have the value `want` (a setting lattice has only one way of). */
static int need_bool(const Cfg *c, const char *key, int def, int want, const char *why) {
    int b = def;
    if (get_bool(c, key, def, &b)) return -1;
    if (b != want)
        return lt_errorf(c->err, c->errlen, "%s: '%s' is %s; lattice supports only %s (%s)", c->path,
                         key, b ? "true" : "false", want ? "true" : "false", why);
    return 0;
}

/* A string key that must be one of the NULL-terminated `ok` (def when absent). */
static int need_str(const Cfg *c, const LtJson *obj, const char *where, const char *key,
                    const char *def, const char *const *ok, const char **out) {
    const LtJson *v = opt(obj, key);
    if (!v && !def) return lt_errorf(c->err, c->errlen, "%s: '%s%s' is missing", c->path, where, key);
    if (v && v->type != LT_JSON_STRING)
        return lt_errorf(c->err, c->errlen, "%s: '%s%s' must be a string, got %s", c->path, where, key,
                         lt_json_type_name(v->type));
    const char *s = v ? v->text : def;
    for (int i = 0; ok[i]; i++)
        if (strcmp(s, ok[i]) == 0) {
            if (out) *out = ok[i];
            return 0;
        }
    char list[256] = "";
    for (int i = 0; ok[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", i ? ", " : "", ok[i]);
    return lt_errorf(c->err, c->errlen, "%s: '%s%s' is '%.80s'; lattice computes only %s", c->path,
                     where, key, s, list);
}

/* The model classes import reads. */
typedef enum {
    HF_LLAMA = 0, HF_GPT2, HF_MIXTRAL, HF_QWEN3, HF_GPTOSS, HF_QWEN2, HF_QWEN3MOE, HF_NCLASSES
} HfClass;
static const struct { const char *cls, *type; } hf_classes[HF_NCLASSES] = {
    [HF_LLAMA] = {"LlamaForCausalLM", "llama"},
    [HF_GPT2] = {"GPT2LMHeadModel", "gpt2"},
    [HF_MIXTRAL] = {"MixtralForCausalLM", "mixtral"},
    [HF_QWEN3] = {"Qwen3ForCausalLM", "qwen3"},
    [HF_GPTOSS] = {"GptOssForCausalLM", "gpt_oss"},
    [HF_QWEN2] = {"Qwen2ForCausalLM", "qwen2"},
    [HF_QWEN3MOE] = {"Qwen3MoeForCausalLM", "qwen3_moe"},
};
#define HF_CLASS_LIST                                                                              \
    "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, " \
    "GptOssForCausalLM or GPT2LMHeadModel"

/* The model class: "architectures" (one of ours) and/or "model_type". */
static int read_arch(const Cfg *c, HfClass *cls) {
    const LtJson *archs = opt(c->js, "architectures"), *type = opt(c->js, "model_type");
    int found = -1;
    if (archs) {
        if (archs->type != LT_JSON_ARRAY || archs->n != 1 || archs->kids[0].type != LT_JSON_STRING)
            return lt_errorf(c->err, c->errlen, "%s: 'architectures' must list one model class (%s)",
                             c->path, HF_CLASS_LIST);
        for (int i = 0; i < HF_NCLASSES; i++)
            if (strcmp(archs->kids[0].text, hf_classes[i].cls) == 0) found = i;
        if (found < 0)
            return lt_errorf(c->err, c->errlen, "%s: architecture '%.80s' is not one lattice imports (%s)",
                             c->path, archs->kids[0].text, HF_CLASS_LIST);
    }
    if (type && type->type != LT_JSON_STRING)
        return lt_errorf(c->err, c->errlen, "%s: 'model_type' must be a string", c->path);
    if (type) {
        int t = -1;
        for (int i = 0; i < HF_NCLASSES; i++)
            if (strcmp(type->text, hf_classes[i].type) == 0) t = i;
        if (t < 0 || (found >= 0 && t != found))
            return lt_errorf(c->err, c->errlen, "%s: model_type '%.80s' is not %s", c->path, type->text,
                             found >= 0 ? hf_classes[found].type
                                        : "'llama', 'qwen2', 'qwen3', 'qwen3_moe', 'mixtral', 'gpt_oss' or 'gpt2'");
        found = t;
    }
    if (found < 0)
        return lt_errorf(c->err, c->errlen,
                         "%s has neither 'architectures' nor 'model_type': unknown architecture", c->path);
    *cls = (HfClass)found;
    return 0;
}

/* YaRN's parameters as transformers reads them (_compute_yarn_parameters): factor
 * (absent: max_position_embeddings over the original), beta_fast 32 and beta_slow 1
 * when absent or 0, truncate true when absent, and the attention factor given, or
 * DeepSeek's ratio of mscale and mscale_all_dim when both are nonzero, or else
 * lattice's default (0.1 ln(factor) + 1). */
static int read_yarn(const Cfg *c, const LtJson *rs, const char *where, LtConfig *cfg) {
    __typeof__(cfg->model) *m = &cfg->model;
    m->rope_scaling = LT_ROPE_YARN;
    double beta_fast, beta_slow, attn, mscale, mscale_all;
    if (get_int(c, rs, where, "original_max_position_embeddings", 1, INT_MAX, REQUIRED,
                &m->rope_original_max_position) ||
        get_num(c, rs, where, "factor", (double)m->max_position_embeddings / m->rope_original_max_position,
                &m->rope_scaling_factor) ||
        get_num(c, rs, where, "beta_fast", 0, &beta_fast) || get_num(c, rs, where, "beta_slow", 0, &beta_slow) ||
        get_num(c, rs, where, "attention_factor", 0, &attn) || get_num(c, rs, where, "mscale", 0, &mscale) ||
        get_num(c, rs, where, "mscale_all_dim", 0, &mscale_all))
        return -1;
    if (m->rope_scaling_factor < 1 || beta_fast < 0 || beta_slow < 0 || attn < 0)
        return lt_errorf(c->err, c->errlen, "%s: '%sfactor' (%g) must be >= 1 and beta_fast, beta_slow, "
                         "attention_factor >= 0", c->path, where, m->rope_scaling_factor);
    m->rope_beta_fast = beta_fast > 0 ? beta_fast : 32;
    m->rope_beta_slow = beta_slow > 0 ? beta_slow : 1;
    const LtJson *tr = opt(rs, "truncate");
    if (tr && tr->type != LT_JSON_BOOL)
        return lt_errorf(c->err, c->errlen, "%s: '%struncate' must be true or false", c->path, where);
    m->rope_truncate = !tr || tr->boolean;
    const double ln = log(m->rope_scaling_factor);
    if (attn > 0) m->rope_attention_factor = attn;
    else if (mscale != 0 && mscale_all != 0 && m->rope_scaling_factor > 1)
        m->rope_attention_factor = (0.1 * mscale * ln + 1) / (0.1 * mscale_all * ln + 1);
    else m->rope_attention_factor = 0;
    return 0;
}

/* rope_scaling (or transformers 5's rope_parameters): none, llama3 or yarn. */
static int read_rope(const Cfg *c, double theta_default, LtConfig *cfg) {
    const LtJson *params = opt(c->js, "rope_parameters"), *rs = opt(c->js, "rope_scaling");
    const char *where = "rope_scaling.";
    if (!rs && params) {
        rs = params;
        where = "rope_parameters.";
    }
    if (get_num(c, c->js, "", "rope_theta", theta_default, &cfg->model.rotary_base)) return -1;
    if (!opt(c->js, "rope_theta") && params &&
        get_num(c, params, "rope_parameters.", "rope_theta", theta_default, &cfg->model.rotary_base))
        return -1;
    cfg->model.rope_scaling = LT_ROPE_NONE;
    if (!rs) return 0;
    if (rs->type != LT_JSON_OBJECT)
        return lt_errorf(c->err, c->errlen, "%s: '%.*s' must be an object or null", c->path,
                         (int)strlen(where) - 1, where);
    static const char *const types[] = {"default", "llama3", "yarn", NULL};
    const char *type;
    const char *key = opt(rs, "type") && !opt(rs, "rope_type") ? "type" : "rope_type"; /* older files: "type" */
    if (need_str(c, rs, where, key, params == rs ? "default" : NULL, types, &type)) return -1;
    if (strcmp(type, "yarn") == 0) return read_yarn(c, rs, where, cfg);
    if (strcmp(type, "llama3") != 0) return 0;
    cfg->model.rope_scaling = LT_ROPE_LLAMA3;
    return get_num(c, rs, where, "factor", NAN, &cfg->model.rope_scaling_factor) ||
                   get_num(c, rs, where, "low_freq_factor", NAN, &cfg->model.rope_low_freq_factor) ||
                   get_num(c, rs, where, "high_freq_factor", NAN, &cfg->model.rope_high_freq_factor) ||
                   get_int(c, rs, where, "original_max_position_embeddings", 1, INT_MAX, REQUIRED,
                           &cfg->model.rope_original_max_position)
               ? -1
               : 0;
}

/* transformers' defaults for the keys a Llama-block config.json may omit:
 * LlamaConfig's and MixtralConfig's (whose key/value heads default to 8, not
 * to the heads). */
typedef struct {
    int kv_heads; /* 0: num_attention_heads */
    int max_pos;
    double norm_eps, rope_theta;
    int head_dim; /* 0: hidden_size / num_attention_heads */
    int attention_bias; /* gpt-oss: biases on every linear, attention_bias must be true */
    int qkv_bias;       /* Qwen2: biases on q, k and v only, by architecture (no key) */
} LlamaDefaults;
static const LlamaDefaults llama_defaults = {0, 2048, 1e-6, 10000.0, 0, 0, 0},
                           mixtral_defaults = {8, 131072, 1e-5, 1e6, 0, 0, 0},
                           qwen2_defaults = {0, 32768, 1e-6, 10000.0, 0, 0, 1},
                           qwen3_defaults = {0, 32768, 1e-6, 10000.0, 128, 0, 0},
                           qwen3moe_defaults = {4, 32768, 1e-6, 10000.0, 0, 0, 0},
                           gptoss_defaults = {8, 131072, 1e-5, 150000.0, 64, 1, 0};

/* attention_bias and mlp_bias: LlamaForCausalLM's both on are lattice's
 * model.add_bias_linear; Qwen3 and Mixtral (and one without the other) only
 * without biases. Qwen2 has no such keys: its q/k/v biases are
 * model.add_qkv_bias. */
static int read_biases(const Cfg *c, const LlamaDefaults *def, LtConfig *m) {
    int attn = 0, mlp = 0;
    if (def->qkv_bias) {
        m->model.add_bias_linear = LT_BIAS_FALSE;
        m->model.add_qkv_bias = true;
        return 0;
    }
    if (def->attention_bias) { /* gpt-oss: every linear has its bias */
        m->model.add_bias_linear = LT_BIAS_TRUE;
        return need_bool(c, "attention_bias", 1, 1, "gpt-oss's biases on every linear");
    }
    if (get_bool(c, "attention_bias", 0, &attn) || get_bool(c, "mlp_bias", 0, &mlp)) return -1;
    if (def == &llama_defaults && attn && mlp) {
        m->model.add_bias_linear = LT_BIAS_TRUE;
        return 0;
    }
    m->model.add_bias_linear = LT_BIAS_FALSE;
    return need_bool(c, "attention_bias", 0, 0,
                     "q/k/v/o projections without bias, unless a LlamaForCausalLM's mlp_bias is "
                     "true too: model.add_bias_linear") ||
           need_bool(c, "mlp_bias", 0, 0,
                     "gate/up/down projections without bias, unless a LlamaForCausalLM's "
                     "attention_bias is true too: model.add_bias_linear");
}

static int read_llama(const Cfg *c, const LlamaDefaults *def, LtConfig *cfg) {
    LtConfig *m = cfg;
    int tied = 0, head_dim = 0;
    static const char *const silu[] = {"silu", "swish", NULL};
    if (get_int(c, c->js, "", "hidden_size", 1, INT_MAX, REQUIRED, &m->model.hidden_size) ||
        get_int(c, c->js, "", "intermediate_size", 1, INT_MAX, REQUIRED, &m->model.ffn_hidden_size) ||
        get_int(c, c->js, "", "num_hidden_layers", 1, INT_MAX, REQUIRED, &m->model.num_layers) ||
        get_int(c, c->js, "", "num_attention_heads", 1, INT_MAX, REQUIRED, &m->model.num_attention_heads) ||
        get_int(c, c->js, "", "num_key_value_heads", 1, INT_MAX,
                def->kv_heads ? def->kv_heads : m->model.num_attention_heads, &m->model.num_query_groups) ||
        get_int(c, c->js, "", "max_position_embeddings", 1, INT_MAX, def->max_pos,
                &m->model.max_position_embeddings) ||
        get_int(c, c->js, "", "vocab_size", 2, INT_MAX, REQUIRED, &m->model.vocab_size) ||
        get_num(c, c->js, "", "rms_norm_eps", def->norm_eps, &m->model.norm_epsilon) ||
        get_bool(c, "tie_word_embeddings", 0, &tied) ||
        need_str(c, c->js, "", "hidden_act", "silu", silu, NULL) ||
        read_biases(c, def, m) || read_rope(c, def->rope_theta, m))
        return -1;
    const int hd = m->model.hidden_size / m->model.num_attention_heads;
    if (get_int(c, c->js, "", "head_dim", 1, INT_MAX, def->head_dim ? def->head_dim : hd, &head_dim))
        return -1;
    if (head_dim < 1 || (head_dim == hd && hd * m->model.num_attention_heads != m->model.hidden_size))
        return lt_errorf(c->err, c->errlen,
                         "%s: without 'head_dim' the heads are hidden_size / "
                         "num_attention_heads = %d / %d wide, which must divide exactly",
                         c->path, m->model.hidden_size, m->model.num_attention_heads);
    m->model.kv_channels = head_dim == hd ? 0 : head_dim; /* (model.kv_channels) */
    m->model.arch = LT_ARCH_LLAMA;
    m->model.untie_embeddings_and_output_weights = !tied;
    return 0;
}

/* Qwen3: Llama's block with an RMSNorm over head_dim on each query and key head
 * before the rotation (q_norm, k_norm: model.qk_layernorm), epsilon rms_norm_eps;
 * its sliding window must be off. */
static int read_qwen3(const Cfg *c, LtConfig *cfg) {
    if (read_llama(c, &qwen3_defaults, cfg) ||
        need_bool(c, "use_sliding_window", 0, 0, "full causal attention in every layer"))
        return -1;
    cfg->model.qk_layernorm = true;
    return 0;
}

/* Qwen2: Llama's block with biases on the q, k and v projections (read_biases);
 * its sliding window must be off, as Qwen3's. */
static int read_qwen2(const Cfg *c, LtConfig *cfg) {
    return read_llama(c, &qwen2_defaults, cfg) ||
                   need_bool(c, "use_sliding_window", 0, 0, "full causal attention in every layer")
               ? -1
               : 0;
}

/* The sparse MoE block of a Mixtral, gpt-oss or Qwen3-MoE (cls), in every
 * layer (Qwen3-MoE's dense layers: read_qwen3moe): num_local_experts,
 * num_experts_per_tok (defaults as the class's config), and the balancing loss
 * transformers adds only with output_router_logits. renorm: HF takes the top k
 * of the softmax over all experts and renormalises them over the k (Mixtral,
 * gpt-oss, Qwen3-MoE's norm_topk_prob): the same weights as a softmax over the
 * k logits, Megatron's softmax top-k without pre-softmax. Top-1 is then
 * refused: HF weights the chosen expert 1, which lattice's top-1 softmax
 * router (Megatron's: moe_router_pre_softmax, weighting it by its probability)
 * does not compute. Without renorm the k probabilities weight the experts as
 * they are: moe_router_pre_softmax. */
static int read_topk_moe(const Cfg *c, const char *cls, int experts, int topk, int renorm,
                         LtConfig *cfg) {
    int router_logits = 0;
    double aux = 0.001;
    if (get_int(c, c->js, "", "num_local_experts", 1, INT_MAX, experts, &experts) ||
        get_int(c, c->js, "", "num_experts_per_tok", 1, experts, topk, &topk) ||
        get_bool(c, "output_router_logits", 0, &router_logits) ||
        get_num(c, c->js, "", "router_aux_loss_coef", 0.001, &aux))
        return -1;
    if (topk == 1 && renorm)
        return lt_errorf(c->err, c->errlen,
                         "%s: 'num_experts_per_tok' is 1; %s then weights the chosen expert 1, "
                         "which lattice's top-1 softmax router (Megatron's: moe_router_pre_softmax, "
                         "weighting it by its probability) does not compute", c->path, cls);
    if (aux < 0)
        return lt_errorf(c->err, c->errlen, "%s: 'router_aux_loss_coef' is %g; it must be >= 0",
                         c->path, aux);
    cfg->model.num_experts = experts;
    cfg->model.moe_router_topk = topk;
    cfg->model.moe_ffn_hidden_size = cfg->model.ffn_hidden_size;
    snprintf(cfg->model.moe_layer_freq, sizeof cfg->model.moe_layer_freq, "1");
    cfg->model.moe_router_score_function = LT_MOE_SOFTMAX;
    cfg->model.moe_router_pre_softmax = !renorm;
    cfg->model.moe_router_topk_scaling_factor = 0;
    cfg->model.moe_aux_loss_coeff = router_logits ? aux : 0;
    return 0;
}

/* Qwen3-MoE: Qwen3's block (read_qwen3: q/k norms, no window) with sparse MoE
 * blocks of moe_intermediate_size experts (read_topk_moe; the published
 * config.json names the count num_experts, transformers 5's save
 * num_local_experts) in the layers not listed in mlp_only_layers whose number
 * (from 1) decoder_sparse_step divides; the others keep the dense MLP of
 * intermediate_size: model.moe_layer_freq as a list. */
static int read_qwen3moe(const Cfg *c, LtConfig *cfg) {
    __typeof__(cfg->model) *m = &cfg->model;
    int experts = 128, norm = 0, step = 1;
    if (read_llama(c, &qwen3moe_defaults, cfg) ||
        need_bool(c, "use_sliding_window", 0, 0, "full causal attention in every layer") ||
        get_int(c, c->js, "", "num_experts", 1, INT_MAX, 128, &experts) ||
        get_bool(c, "norm_topk_prob", 0, &norm) ||
        read_topk_moe(c, "Qwen3-MoE with norm_topk_prob", experts, 8, norm, cfg) ||
        get_int(c, c->js, "", "moe_intermediate_size", 1, INT_MAX, 768, &m->moe_ffn_hidden_size) ||
        get_int(c, c->js, "", "decoder_sparse_step", 1, INT_MAX, 1, &step))
        return -1;
    m->qk_layernorm = true;
    const int L = m->num_layers;
    if (L > LT_MOE_MAX_LAYERS)
        return lt_errorf(c->err, c->errlen, "%s: %d layers; lattice's MoE models have at most %d",
                         c->path, L, LT_MOE_MAX_LAYERS);
    unsigned char moe[LT_MOE_MAX_LAYERS];
    for (int l = 0; l < L; l++) moe[l] = (l + 1) % step == 0;
    const LtJson *dense = opt(c->js, "mlp_only_layers");
    if (dense && dense->type != LT_JSON_NULL) {
        if (dense->type != LT_JSON_ARRAY)
            return lt_errorf(c->err, c->errlen, "%s: 'mlp_only_layers' must be a list of layer numbers",
                             c->path);
        for (int i = 0; i < dense->n; i++) {
            uint64_t l;
            if (lt_json_u64(&dense->kids[i], &l))
                return lt_errorf(c->err, c->errlen, "%s: 'mlp_only_layers[%d]' must be a layer number "
                                 "(an integer >= 0)", c->path, i);
            if (l < (uint64_t)L) moe[l] = 0; /* (transformers ignores the others too) */
        }
    }
    char *pat = m->moe_layer_freq;
    size_t at = (size_t)snprintf(pat, sizeof m->moe_layer_freq, "[");
    for (int l = 0; l < L && at < sizeof m->moe_layer_freq; l++)
        at += (size_t)snprintf(pat + at, sizeof m->moe_layer_freq - at, "%s%d", l ? "," : "", moe[l]);
    if (at + 1 >= sizeof m->moe_layer_freq)
        return lt_errorf(c->err, c->errlen, "%s: %d layers exceed lattice's model.moe_layer_freq", c->path, L);
    snprintf(pat + at, sizeof m->moe_layer_freq - at, "]");
    return 0;
}

/* Mixtral: Llama's block with a sparse MoE block in every layer (read_topk_moe). */
static int read_mixtral(const Cfg *c, LtConfig *cfg) {
    int window = 0;
    if (read_llama(c, &mixtral_defaults, cfg) || read_topk_moe(c, "Mixtral", 8, 2, 1, cfg) ||
        get_int(c, c->js, "", "sliding_window", 1, INT_MAX, 0, &window))
        return -1;
    if (window > 0 && window < cfg->model.max_position_embeddings)
        return lt_errorf(c->err, c->errlen,
                         "%s: 'sliding_window' is %d, below max_position_embeddings (%d); lattice's "
                         "attention is full causal (null, or a window no sequence exceeds)",
                         c->path, window, cfg->model.max_position_embeddings);
    return 0;
}

/* gpt-oss's layer_types (absent: its default, sliding on the even layers)
 * and sliding_window (keys counted with the query's own: lattice's window
 * is one less) as model.window_size and window_attn_skip_freq's list. */
static int read_gptoss_windows(const Cfg *c, LtConfig *cfg) {
    const int L = cfg->model.num_layers;
    int window = 128, any = 0;
    if (get_int(c, c->js, "", "sliding_window", 1, INT_MAX, 128, &window)) return -1;
    const LtJson *types = opt(c->js, "layer_types");
    if (types && (types->type != LT_JSON_ARRAY || types->n != L))
        return lt_errorf(c->err, c->errlen, "%s: 'layer_types' must list num_hidden_layers (%d) strings",
                         c->path, L);
    char *pat = cfg->model.window_attn_skip_freq;
    const size_t cap = sizeof cfg->model.window_attn_skip_freq;
    size_t at = (size_t)snprintf(pat, cap, "[");
    for (int l = 0; l < L; l++) {
        int sliding = l % 2 == 0;
        if (types) {
            const LtJson *t = &types->kids[l];
            if (t->type != LT_JSON_STRING ||
                (strcmp(t->text, "sliding_attention") && strcmp(t->text, "full_attention")))
                return lt_errorf(c->err, c->errlen, "%s: 'layer_types[%d]' must be \"sliding_attention\" "
                                 "or \"full_attention\"", c->path, l);
            sliding = !strcmp(t->text, "sliding_attention");
        }
        any |= sliding;
        if (at < cap) at += (size_t)snprintf(pat + at, cap - at, "%s%d", l ? ", " : "", sliding);
    }
    if (at + 1 >= cap)
        return lt_errorf(c->err, c->errlen, "%s: %d layers of layer_types exceed lattice's pattern", c->path, L);
    snprintf(pat + at, cap - at, "]");
    if (!any) {
        pat[0] = cfg->model.window_size[0] = '\0';
        return 0;
    }
    snprintf(cfg->model.window_size, sizeof cfg->model.window_size, "[%d, 0]", window - 1);
    return 0;
}

/* gpt-oss: Llama's block with biases on every linear (model.add_bias_linear),
 * a learned sink logit per head (softmax_type learnable), windows on the
 * layers layer_types names, and an MoE block in every layer whose router
 * takes a softmax over its top k biased logits and whose experts compute
 * quick_gelu(min(gate, limit)) * (clamp(up, -limit, limit) + 1) (quick_geglu,
 * glu_linear_offset 1, activation_func_clamp_value = swiglu_limit). Absent
 * keys take GptOssConfig's defaults, rope_parameters included (YaRN, factor 32
 * over 4096 positions, untruncated). */
static int read_gptoss(const Cfg *c, LtConfig *cfg) {
    double alpha = 1.702, limit = 7.0;
    if (read_llama(c, &gptoss_defaults, cfg) || read_topk_moe(c, "gpt-oss", 128, 4, 1, cfg) ||
        get_num(c, c->js, "", "swiglu_alpha", 1.702, &alpha) ||
        get_num(c, c->js, "", "swiglu_limit", 7.0, &limit) || read_gptoss_windows(c, cfg))
        return -1;
    const LtJson *quant = opt(c->js, "quantization_config"), *qm = quant ? opt(quant, "quant_method") : NULL;
    if (quant) /* openai/gpt-oss-*'s published experts are MXFP4 blocks and scales */
        return lt_errorf(c->err, c->errlen, "%s: 'quantization_config' (%s) names quantized weights, "
                         "which lattice does not read: load the model with transformers dequantized "
                         "(Mxfp4Config(dequantize=True)) and save_pretrained it, then import that "
                         "directory", c->path, qm && qm->type == LT_JSON_STRING ? qm->text : "?");
    if (alpha != 1.702)
        return lt_errorf(c->err, c->errlen, "%s: 'swiglu_alpha' is %g; lattice's quick GeGLU is "
                         "x * sigmoid(1.702 x) (Megatron-Core's quick_gelu)", c->path, alpha);
    if (!(limit > 0) || !isfinite(limit))
        return lt_errorf(c->err, c->errlen, "%s: 'swiglu_limit' is %g; it must be > 0", c->path, limit);
    __typeof__(cfg->model) *m = &cfg->model;
    if (!opt(c->js, "rope_parameters") && !opt(c->js, "rope_scaling")) {
        m->rope_scaling = LT_ROPE_YARN;
        m->rope_scaling_factor = 32;
        m->rope_original_max_position = 4096;
        m->rope_beta_fast = 32, m->rope_beta_slow = 1;
        m->rope_truncate = false;
        m->rope_attention_factor = 0;
    }
    m->add_bias_linear = LT_BIAS_TRUE;
    m->softmax_type = LT_SOFTMAX_LEARNABLE;
    m->quick_geglu = true;
    m->glu_linear_offset = 1;
    m->activation_func_clamp_value = limit;
    return 0;
}

static int read_gpt2(const Cfg *c, LtConfig *cfg) {
    int tied = 1;
    double eps;
    static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    if (get_int(c, c->js, "", "n_embd", 1, INT_MAX, REQUIRED, &cfg->model.hidden_size) ||
        get_int(c, c->js, "", "n_layer", 1, INT_MAX, REQUIRED, &cfg->model.num_layers) ||
        get_int(c, c->js, "", "n_head", 1, INT_MAX, REQUIRED, &cfg->model.num_attention_heads) ||
        get_int(c, c->js, "", "n_positions", 1, INT_MAX, REQUIRED, &cfg->model.max_position_embeddings) ||
        get_int(c, c->js, "", "vocab_size", 2, INT_MAX, REQUIRED, &cfg->model.vocab_size) ||
        get_num(c, c->js, "", "layer_norm_epsilon", 1e-5, &eps) ||
        need_str(c, c->js, "", "activation_function", "gelu_new", gelu, NULL) ||
        get_bool(c, "tie_word_embeddings", 1, &tied) ||
        need_bool(c, "scale_attn_weights", 1, 1, "attention scaled by 1/sqrt(head_dim)") ||
        need_bool(c, "scale_attn_by_inverse_layer_idx", 0, 0, "no per-layer attention scaling") ||
        need_bool(c, "add_cross_attention", 0, 0, "a decoder without cross-attention"))
        return -1;
    if (eps != 1e-5)
        return lt_errorf(c->err, c->errlen,
                         "%s: 'layer_norm_epsilon' is %g; lattice's GPT LayerNorm uses 1e-5", c->path, eps);
    /* n_inner: null or absent means 4 * n_embd, as in lattice */
    if (get_int(c, c->js, "", "n_inner", 1, INT_MAX, 0, &cfg->model.ffn_hidden_size)) return -1;
    cfg->model.arch = LT_ARCH_GPT;
    cfg->model.untie_embeddings_and_output_weights = !tied;
    return 0;
}

/* The settings of the model that config.json fixes; an override may not change them. */
static int model_changed(const LtConfig *a, const LtConfig *b, const char **key) {
    const struct { const char *name; int differs; } k[] = {
        {"model.arch", a->model.arch != b->model.arch},
        {"model.num_layers", a->model.num_layers != b->model.num_layers},
        {"model.hidden_size", a->model.hidden_size != b->model.hidden_size},
        {"model.num_attention_heads", a->model.num_attention_heads != b->model.num_attention_heads},
        {"model.num_query_groups", a->model.num_query_groups != b->model.num_query_groups},
        {"model.ffn_hidden_size", a->model.ffn_hidden_size != b->model.ffn_hidden_size},
        {"model.max_position_embeddings",
         a->model.max_position_embeddings != b->model.max_position_embeddings},
        {"model.vocab_size", a->model.vocab_size != b->model.vocab_size},
        {"model.norm_epsilon", a->model.norm_epsilon != b->model.norm_epsilon},
        {"model.rotary_base", a->model.rotary_base != b->model.rotary_base},
        {"model.rope_scaling", a->model.rope_scaling != b->model.rope_scaling},
        {"model.rope_scaling_factor", a->model.rope_scaling_factor != b->model.rope_scaling_factor},
        {"model.rope_low_freq_factor", a->model.rope_low_freq_factor != b->model.rope_low_freq_factor},
        {"model.rope_high_freq_factor",
         a->model.rope_high_freq_factor != b->model.rope_high_freq_factor},
        {"model.rope_original_max_position",
         a->model.rope_original_max_position != b->model.rope_original_max_position},
        {"model.rope_beta_fast", a->model.rope_beta_fast != b->model.rope_beta_fast},
        {"model.rope_beta_slow", a->model.rope_beta_slow != b->model.rope_beta_slow},
        {"model.rope_truncate", a->model.rope_truncate != b->model.rope_truncate},
        {"model.rope_attention_factor", a->model.rope_attention_factor != b->model.rope_attention_factor},
        {"model.untie_embeddings_and_output_weights",
         a->model.untie_embeddings_and_output_weights != b->model.untie_embeddings_and_output_weights},
        {"model.add_bias_linear", a->model.add_bias_linear != b->model.add_bias_linear},
        {"model.add_qkv_bias", a->model.add_qkv_bias != b->model.add_qkv_bias},
        {"model.num_experts", a->model.num_experts != b->model.num_experts},
        {"model.moe_router_topk", a->model.num_experts && a->model.moe_router_topk != b->model.moe_router_topk},
        {"model.moe_ffn_hidden_size", a->model.moe_ffn_hidden_size != b->model.moe_ffn_hidden_size},
        {"model.moe_layer_freq", a->model.num_experts && strcmp(a->model.moe_layer_freq, b->model.moe_layer_freq)},
        {"model.moe_shared_expert_intermediate_size",
         a->model.moe_shared_expert_intermediate_size != b->model.moe_shared_expert_intermediate_size},
        {"model.moe_router_score_function",
         a->model.moe_router_score_function != b->model.moe_router_score_function},
        {"model.moe_router_pre_softmax", a->model.moe_router_pre_softmax != b->model.moe_router_pre_softmax},
        {"model.moe_router_topk_scaling_factor",
         a->model.moe_router_topk_scaling_factor != b->model.moe_router_topk_scaling_factor},
        {"model.moe_router_enable_expert_bias",
         a->model.moe_router_enable_expert_bias != b->model.moe_router_enable_expert_bias},
        {"model.softmax_type", a->model.softmax_type != b->model.softmax_type},
        {"model.quick_geglu", a->model.quick_geglu != b->model.quick_geglu},
        {"model.glu_linear_offset", a->model.glu_linear_offset != b->model.glu_linear_offset},
        {"model.activation_func_clamp_value",
         a->model.activation_func_clamp_value != b->model.activation_func_clamp_value},
        {"model.window_size", strcmp(a->model.window_size, b->model.window_size) != 0},
        {"model.window_attn_skip_freq",
         strcmp(a->model.window_attn_skip_freq, b->model.window_attn_skip_freq) != 0},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].differs) {
            *key = k[i].name;
            return 1;
        }
    return 0;
}

/* config.json of dir, then the overrides, validated for the layout it names. */
static int read_config(const char *dir, int nover, char **overrides, LtConfig *cfg, char *err,
                       size_t errlen) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return lt_errorf(err, errlen, "path too long: %s", dir);
    LtJson *js = read_json_object(path, err, errlen);
    if (!js) return -1;
    Cfg c = {js, path, err, errlen};
    HfClass cls = HF_GPT2;
    lt_config_defaults(cfg);
    int rc = read_arch(&c, &cls) || (cls == HF_LLAMA     ? read_llama(&c, &llama_defaults, cfg)
                                     : cls == HF_QWEN2   ? read_qwen2(&c, cfg)
                                     : cls == HF_QWEN3   ? read_qwen3(&c, cfg)
                                     : cls == HF_QWEN3MOE ? read_qwen3moe(&c, cfg)
                                     : cls == HF_MIXTRAL ? read_mixtral(&c, cfg)
                                     : cls == HF_GPTOSS  ? read_gptoss(&c, cfg)
                                                         : read_gpt2(&c, cfg));
    lt_json_free(js);
    if (rc) return -1;
    /* config.json has no training length: the default, capped by the positions */
    if (cfg->model.seq_length > cfg->model.max_position_embeddings)
        cfg->model.seq_length = cfg->model.max_position_embeddings;
    LtConfig *before = lt_malloc(sizeof *before);
    memcpy(before, cfg, sizeof *before);
    const char *key = NULL;
    char emsg[1024];
    if (lt_config_apply_overrides(cfg, nover, overrides, emsg, sizeof emsg))
        rc = lt_errorf(err, errlen, "%s", emsg);
    else if (model_changed(before, cfg, &key))
        rc = lt_errorf(err, errlen, "%s comes from %s and cannot be overridden on import", key, path);
    free(before);
    if (rc) return -1;
    if (lt_hf_validate_replica(cfg, emsg, sizeof emsg))
        return lt_errorf(err, errlen, "%s describes a model lattice cannot build: %s", path, emsg);
    return 0;
}

/* ---- the weights: one file or the shards of an index -------------------------- */

typedef struct {
    LtStFile *files;
    unsigned char **used; /* per file, per entry: matched to a parameter or a known buffer */
    int n;
    int ntensors;
    char what[PATH_MAX];  /* for messages: the file, or the index */
} Weights;

static void weights_free(Weights *w) {
    for (int i = 0; i < w->n; i++) {
        lt_st_close(&w->files[i]);
        free(w->used[i]);
    }
    free(w->files);
    free(w->used);
    memset(w, 0, sizeof *w);
}

static int add_file(Weights *w, const char *path, char *err, size_t errlen) {
    LtStFile *f = &w->files[w->n];
    if (lt_st_open(f, path, err, errlen)) return -1;
    w->used[w->n] = lt_calloc((size_t)f->n + 1);
    w->ntensors += f->n;
    w->n++;
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp((*(const LtJson *const *)a)->key, (*(const LtJson *const *)b)->key);
}
static int str_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* model.safetensors.index.json: open each shard once and check that the index
 * and the shards agree tensor by tensor. */
static int open_sharded(Weights *w, const char *dir, const char *index, char *err, size_t errlen) {
    LtJson *js = read_json_object(index, err, errlen);
    if (!js) return -1;
    const LtJson *map = lt_json_get(js, "weight_map");
    const LtJson **byname = NULL;
    const char **shards = NULL;
    int rc = -1, ns = 0;
    if (!map || map->type != LT_JSON_OBJECT || map->n == 0) {
        lt_errorf(err, errlen, "%s has no 'weight_map' object naming the shard of each tensor", index);
        goto out;
    }
    shards = lt_malloc(sizeof *shards * (size_t)map->n);
    for (int i = 0; i < map->n; i++) {
        const LtJson *v = &map->kids[i];
        if (v->type != LT_JSON_STRING || !v->text[0] || strchr(v->text, '/') ||
            !strcmp(v->text, ".") || !strcmp(v->text, "..") || strlen(v->text) > NAME_MAX) {
            lt_errorf(err, errlen, "%s: the shard of '%s' is not a file name in %s", index, v->key, dir);
            goto out;
        }
        shards[i] = v->text;
    }
    qsort(shards, (size_t)map->n, sizeof *shards, str_cmp);
    for (int i = 0; i < map->n; i++)
        if (i == 0 || strcmp(shards[i], shards[i - 1])) shards[ns++] = shards[i];
    w->files = lt_calloc(sizeof *w->files * (size_t)ns);
    w->used = lt_calloc(sizeof *w->used * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, shards[i]) >= (int)sizeof path) {
            lt_errorf(err, errlen, "path too long: %s/%s", dir, shards[i]);
            goto out;
        }
        if (add_file(w, path, err, errlen)) goto out;
    }
    /* every listed tensor is in its shard; every tensor of a shard is listed there */
    byname = lt_malloc(sizeof *byname * (size_t)map->n);
    for (int i = 0; i < map->n; i++) byname[i] = &map->kids[i];
    qsort(byname, (size_t)map->n, sizeof *byname, name_cmp);
    for (int i = 0; i < map->n; i++) {
        const LtJson *v = byname[i];
        const LtStFile *f = NULL;
        for (int k = 0; k < w->n; k++)
            if (!strcmp(w->files[k].path + strlen(dir) + 1, v->text)) f = &w->files[k];
        if (!f || !lt_st_find(f, v->key)) {
            lt_errorf(err, errlen, "%s maps tensor '%s' to %s, which does not hold it", index, v->key,
                      v->text);
            goto out;
        }
    }
    for (int k = 0; k < w->n; k++)
        for (int e = 0; e < w->files[k].n; e++) {
            LtJson key = {.key = w->files[k].e[e].name};
            const LtJson *pk = &key, **hit = bsearch(&pk, byname, (size_t)map->n, sizeof *byname, name_cmp);
            const char *shard = w->files[k].path + strlen(dir) + 1;
            if (!hit || strcmp((*hit)->text, shard)) {
                lt_errorf(err, errlen, "%s holds tensor '%s', which %s %s", w->files[k].path,
                          key.key, index, hit ? "assigns to another shard" : "does not list");
                goto out;
            }
        }
    rc = 0;
out:
    free(byname);
    free(shards);
    lt_json_free(js);
    return rc;
}

/* The safetensors of dir: model.safetensors if present (as transformers
 * prefers it), else the sharded index. */
static int open_weights(Weights *w, const char *dir, char *err, size_t errlen) {
    char single[PATH_MAX], index[PATH_MAX], bin[PATH_MAX];
    memset(w, 0, sizeof *w);
    if (snprintf(single, sizeof single, "%s/model.safetensors", dir) >= (int)sizeof single ||
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir) >= (int)sizeof index ||
        snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir) >= (int)sizeof bin)
        return lt_errorf(err, errlen, "path too long: %s", dir);
    if (lt_file_exists(single)) {
        snprintf(w->what, sizeof w->what, "%s", single);
        w->files = lt_calloc(sizeof *w->files);
        w->used = lt_calloc(sizeof *w->used);
        return add_file(w, single, err, errlen);
    }
    if (lt_file_exists(index)) {
        snprintf(w->what, sizeof w->what, "%s", index);
        return open_sharded(w, dir, index, err, errlen);
    }
    return lt_errorf(err, errlen,
                     "%s has no model.safetensors or model.safetensors.index.json%s", dir,
                     lt_file_exists(bin) ? " (pytorch_model.bin is not read: save the model with "
                                        "safe_serialization=True)" : "");
}

/* The tensor `name` (NULL when absent); *file its file, *idx its entry. */
static const LtStEntry *weights_find(const Weights *w, const char *name, int *file, int *idx) {
    for (int k = 0; k < w->n; k++) {
        const LtStEntry *e = lt_st_find(&w->files[k], name);
        if (e) {
            *file = k;
            *idx = (int)(e - w->files[k].e);
            return e;
        }
    }
    return NULL;
}

/* Non-learned buffers some files carry: GPT-2's causal masks
 * ("<prefix>h.L.attn.bias", "...attn.masked_bias", prefix "transformer." or
 * none as the file's other names) and old Llama files' rotary tables
 * ("model.layers.L.self_attn.rotary_emb.inv_freq"). */
static int is_buffer(const char *name, LtArch arch, const char *gpt_prefix, int layers) {
    static const char *const gpt[] = {"attn.bias", "attn.masked_bias", NULL},
                             *llama[] = {"self_attn.rotary_emb.inv_freq", NULL};
    const char *p = name;
    if (arch == LT_ARCH_LLAMA) {
        if (strncmp(p, "model.layers.", 13)) return 0;
        p += 13;
    } else {
        if (strncmp(p, gpt_prefix, strlen(gpt_prefix))) return 0;
        p += strlen(gpt_prefix);
        if (strncmp(p, "h.", 2)) return 0;
        p += 2;
    }
    char *end;
    errno = 0;
    const long l = strtol(p, &end, 10);
    if (end == p || *p < '0' || *p > '9' || errno || l >= layers || *end != '.') return 0;
    for (const char *const *s = arch == LT_ARCH_LLAMA ? llama : gpt; *s; s++)
        if (!strcmp(end + 1, *s)) return 1;
    return 0;
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < n) snprintf(buf + at, n - at, ")");
}

/* Resolve every tensor of map against the files: ents[i] is map[i]'s entry
 * (in file files[i]), checked for dtype and shape; then no tensor may be left
 * over. *lm_head_tied: the file of an lm_head.weight that a tied model's
 * files hold too (to compare with the embedding), else -1. */
static int match_tensors(Weights *w, const LtHfMap *map, int n, const LtModelDims *d,
                         const LtStEntry **ents, int *files, int *lm_head_tied, char *err,
                         size_t errlen) {
    const LtArch arch = (LtArch)d->arch;
    const int layers = d->num_layers;
    const char *cls = hf_classes[lt_hf_gptoss(d)       ? HF_GPTOSS
                                 : d->moe.experts > 0   ? HF_MIXTRAL
                                 : d->qk_norm           ? HF_QWEN3
                                 : arch == LT_ARCH_LLAMA ? HF_LLAMA
                                                         : HF_GPT2].cls;
    /* GPT-2 files written from GPT2Model lack the "transformer." prefix */
    int f, k;
    const int strip = arch == LT_ARCH_GPT && !weights_find(w, "transformer.wte.weight", &f, &k) &&
                      weights_find(w, "wte.weight", &f, &k) ? 12 : 0;
    for (int i = 0; i < n; i++) {
        const LtHfMap *m = &map[i];
        const char *name = m->hf + (strip && !strncmp(m->hf, "transformer.", 12) ? strip : 0);
        const LtStEntry *e = weights_find(w, name, &f, &k);
        if (!e) return lt_errorf(err, errlen, "%s has no tensor '%s'", w->what, name);
        if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "BF16") && strcmp(e->dtype, "F16"))
            return lt_errorf(err, errlen, "%s: tensor '%s' is %s; lattice imports F32, BF16 and F16",
                             w->files[f].path, name, e->dtype);
        int same = e->ndim == m->ndim;
        for (int d = 0; same && d < m->ndim; d++) same = e->shape[d] == m->shape[d];
        if (!same) {
            char a[128], b[128];
            shape_text(a, sizeof a, e->ndim, e->shape);
            shape_text(b, sizeof b, m->ndim, m->shape);
            return lt_errorf(err, errlen, "%s: tensor '%s' has shape %s; config.json implies %s",
                             w->files[f].path, name, a, b);
        }
        ents[i] = e;
        files[i] = f;
        w->used[f][k] = 1;
    }
    /* a tied head saved anyway must equal the embedding (checked after reading) */
    *lm_head_tied = -1;
    const LtStEntry *head = weights_find(w, "lm_head.weight", &f, &k);
    if (head && !w->used[f][k] && head->ndim == 2 && head->shape[0] == map[0].shape[0] &&
        head->shape[1] == map[0].shape[1]) {
        w->used[f][k] = 1;
        *lm_head_tied = f;
    }
    for (f = 0; f < w->n; f++)
        for (k = 0; k < w->files[f].n; k++)
            if (!w->used[f][k] && !is_buffer(w->files[f].e[k].name, arch, strip ? "" : "transformer.", layers))
                return lt_errorf(err, errlen,
                                 "%s: tensor '%s' is not part of the %s model config.json describes",
                                 w->files[f].path, w->files[f].e[k].name, cls);
    return 0;
}

/* Read map entry m (file entry e) into the parameter's rows in master. */
static int read_tensor(const LtStFile *file, const LtStEntry *e, const LtHfMap *m,
                       const LtParamTable *t, float *master, char *err, size_t errlen) {
    const LtParam *p = &t->p[m->param];
    const int64_t C = p->ndim == 2 ? p->gshape[1] : 1;
    float *dst = master + p->offset + (size_t)(m->row0 * C), *tmp = NULL;
    size_t n = (size_t)(m->rows * C);
    if (lt_hf_plain(m)) {
        if (lt_st_read_f32(file, e, dst, err, errlen)) return -1;
    } else { /* HF's order (transposed, interleaved, stacked) -> ours, through one copy */
        tmp = lt_malloc(sizeof(float) * (size_t)e->numel);
        if (lt_st_read_f32(file, e, tmp, err, errlen)) {
            free(tmp);
            return -1;
        }
        n = (size_t)e->numel;
    }
    const float *x = tmp ? tmp : dst;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            const double v = x[i];
            free(tmp);
            return lt_errorf(err, errlen, "%s: tensor '%s' holds a non-finite value (%g at element %zu)",
                             file->path, e->name, v, i);
        }
    if (tmp) lt_hf_copy(m, t, master, tmp, 0);
    free(tmp);
    return 0;
}

/* The out directory must be new or empty: import never mixes with a run's checkpoints. */
static int check_out_dir(const char *out, char *err, size_t errlen) {
    DIR *d = opendir(out);
    if (!d) return errno == ENOENT ? 0 : lt_errorf(err, errlen, "%s: %s", out, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            rc = lt_errorf(err, errlen, "%s is not empty (it holds '%s'): import writes a new checkpoint "
                           "directory", out, e->d_name);
            break;
        }
    closedir(d);
    return rc;
}

int lt_hf_import(const char *hf_dir, const char *out_dir, int nover, char **overrides, char *err,
                 size_t errlen) {
    return lt_hf_import_at(hf_dir, out_dir, 0, nover, overrides, err, errlen);
}

int lt_hf_import_at(const char *hf_dir, const char *out_dir, long step, int nover, char **overrides,
                    char *err, size_t errlen) {
    if (step < 0) return lt_errorf(err, errlen, "--step %ld: must be >= 0", step);
    LtConfig *cfg = lt_calloc(sizeof *cfg);
    Weights w = {0};
    LtParamTable t = {0};
    LtHfMap *map = NULL;
    const LtStEntry **ents = NULL;
    int *files = NULL, n = 0, rc = -1, head_file = -1;
    float *master = NULL;
    if (check_out_dir(out_dir, err, errlen) || read_config(hf_dir, nover, overrides, cfg, err, errlen) ||
        open_weights(&w, hf_dir, err, errlen))
        goto done;
    const LtModelDims dims = lt_dims_from_config(cfg);
    /* the table is built from the config's sizes: bound its length by the files first
     * (gpt-oss stacks its experts: each of a layer's experts holds 2 bytes at least) */
    uint64_t bytes = 0;
    for (int i = 0; i < w.n; i++) bytes += w.files[i].file_size;
    if (dims.num_layers > w.ntensors ||
        (lt_hf_gptoss(&dims) ? (uint64_t)dims.num_layers * (uint64_t)dims.moe.experts > bytes / 2
                             : (int64_t)dims.num_layers * (1 + 3 * (int64_t)dims.moe.experts) > w.ntensors)) {
        lt_errorf(err, errlen, "%s/config.json: %d layers%s, but %s holds only %d tensors", hf_dir,
                  dims.num_layers, dims.moe.experts > 0 ? " of experts" : "", w.what, w.ntensors);
        goto done;
    }
    lt_params_build(&t, &dims);
    if ((n = lt_hf_map(&t, &map, err, errlen)) < 0) goto done;
    ents = lt_calloc(sizeof *ents * (size_t)n);
    files = lt_calloc(sizeof *files * (size_t)n);
    if (match_tensors(&w, map, n, &dims, ents, files, &head_file, err, errlen))
        goto done;
    /* every tensor matched one in the files: the output is bounded by their data */
    master = lt_calloc(sizeof(float) * t.total); /* padded vocabulary rows stay zero */
    for (int i = 0; i < n; i++)
        if (read_tensor(&w.files[files[i]], ents[i], &map[i], &t, master, err, errlen)) goto done;
    if (head_file >= 0) {
        int f, k;
        const LtStEntry *e = weights_find(&w, "lm_head.weight", &f, &k);
        float *head = lt_malloc(sizeof(float) * (size_t)e->numel);
        const int same = lt_st_read_f32(&w.files[f], e, head, err, errlen) == 0 &&
                         memcmp(head, master + t.p[map[0].param].offset, sizeof(float) * e->numel) == 0;
        free(head);
        if (!same) {
            lt_errorf(err, errlen,
                      "%s: tensor 'lm_head.weight' differs from the embedding, but config.json "
                      "ties them (tie_word_embeddings)", w.files[f].path);
            goto done;
        }
    }
    LtCkptState s = {master, NULL, NULL};
    LtCkptMeta meta = {.step = step, .optimizer_steps = 0, .seed = cfg->train.seed,
                       .data_seed = cfg->train.seed};
    if (lt_ckpt_save(out_dir, &t, &s, &meta, cfg, err, errlen)) goto done;
    rc = 0;
done:
    free(master);
    free(files);
    free(ents);
    free(map);
    lt_params_free(&t);
    weights_free(&w);
    free(cfg);
    return rc;
}
