/* hf_config.c - a Hugging Face config.json as a lattice config, for `lattice
 * import` (hf_import.c): the model class ("architectures" / "model_type"),
 * then the class's reader - Llama, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE, Mixtral,
 * gpt-oss, GPT-2 - turns every key the model's function depends on into lattice's
 * model keys, checked to be one lattice computes (else refused, naming the
 * key); absent keys take the defaults transformers gives them. Then the
 * command-line overrides, which may not change what config.json fixes, and
 * lt_config_validate for one data-parallel replica of the layout. */
#include "hf/hf_config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "config.h"
#include "fileio.h"
#include "hf.h"
#include "json.h"

#define MAX_JSON_BYTES (64u << 20) /* config.json, the shard index */

/* ---- reading JSON files ------------------------------------------------------ */

/* The parsed JSON object in `path`; NULL with err. */
LtJson *lt_hf_read_json(const char *path, char *err, size_t errlen) {
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
    HF_LLAMA = 0, HF_GPT2, HF_MIXTRAL, HF_QWEN3, HF_GPTOSS, HF_QWEN2, HF_QWEN3MOE, HF_QWEN2MOE,
    HF_NCLASSES
} HfClass;
static const struct { const char *cls, *type; } hf_classes[HF_NCLASSES] = {
    [HF_LLAMA] = {"LlamaForCausalLM", "llama"},
    [HF_GPT2] = {"GPT2LMHeadModel", "gpt2"},
    [HF_MIXTRAL] = {"MixtralForCausalLM", "mixtral"},
    [HF_QWEN3] = {"Qwen3ForCausalLM", "qwen3"},
    [HF_GPTOSS] = {"GptOssForCausalLM", "gpt_oss"},
    [HF_QWEN2] = {"Qwen2ForCausalLM", "qwen2"},
    [HF_QWEN3MOE] = {"Qwen3MoeForCausalLM", "qwen3_moe"},
    [HF_QWEN2MOE] = {"Qwen2MoeForCausalLM", "qwen2_moe"},
};
#define HF_CLASS_LIST                                                                              \
    "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, " \
    "MixtralForCausalLM, GptOssForCausalLM or GPT2LMHeadModel"

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
                                        : "'llama', 'qwen2', 'qwen3', 'qwen2_moe', 'qwen3_moe', 'mixtral', "
                                          "'gpt_oss' or 'gpt2'");
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
 * to the heads), the Qwens' and gpt-oss's. */
typedef struct {
    int kv_heads; /* 0: num_attention_heads */
    int max_pos;
    double norm_eps, rope_theta;
    int head_dim; /* 0: hidden_size / num_attention_heads */
    int attention_bias; /* gpt-oss: biases on every linear, attention_bias must be true */
    int qkv_bias;       /* biases on q, k and v only: 1 Qwen2's, by architecture (no key);
                         * 2 Qwen2-MoE's, unless its qkv_bias is false */
} LlamaDefaults;
static const LlamaDefaults llama_defaults = {0, 2048, 1e-6, 10000.0, 0, 0, 0},
                           mixtral_defaults = {8, 131072, 1e-5, 1e6, 0, 0, 0},
                           qwen2_defaults = {0, 32768, 1e-6, 10000.0, 0, 0, 1},
                           qwen3_defaults = {0, 32768, 1e-6, 10000.0, 128, 0, 0},
                           qwen3moe_defaults = {4, 32768, 1e-6, 10000.0, 0, 0, 0},
                           qwen2moe_defaults = {16, 32768, 1e-6, 10000.0, 0, 0, 2},
                           gptoss_defaults = {8, 131072, 1e-5, 150000.0, 64, 1, 0};

/* attention_bias and mlp_bias: LlamaForCausalLM's both on are lattice's
 * model.add_bias_linear; Qwen3 and Mixtral (and one without the other) only
 * without biases. Qwen2 has no such keys: its q/k/v biases are
 * model.add_qkv_bias; Qwen2-MoE's too, unless qkv_bias (a key of recent
 * transformers; older ones always build the biases) is false. */
static int read_biases(const Cfg *c, const LlamaDefaults *def, LtConfig *m) {
    int attn = 0, mlp = 0, qkv = 1;
    if (def->qkv_bias) {
        if (def->qkv_bias == 2 && get_bool(c, "qkv_bias", 1, &qkv)) return -1;
        m->model.add_bias_linear = LT_BIAS_FALSE;
        m->model.add_qkv_bias = qkv;
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

/* A Qwen's attention (Qwen2, Qwen3 and their MoEs) must be full causal in
 * every layer: use_sliding_window false (its window covers the layers from
 * max_window_layers on, with W keys where lattice's covers W + 1), and
 * layer_types, where given, "full_attention" throughout. */
static int need_full_attention(const Cfg *c) {
    if (need_bool(c, "use_sliding_window", 0, 0, "full causal attention in every layer")) return -1;
    const LtJson *types = opt(c->js, "layer_types");
    if (types && types->type != LT_JSON_ARRAY)
        return lt_errorf(c->err, c->errlen, "%s: 'layer_types' must be a list", c->path);
    for (int l = 0; types && l < types->n; l++)
        if (types->kids[l].type != LT_JSON_STRING || strcmp(types->kids[l].text, "full_attention"))
            return lt_errorf(c->err, c->errlen, "%s: 'layer_types[%d]' is not \"full_attention\"; lattice "
                             "imports a Qwen with full causal attention in every layer", c->path, l);
    return 0;
}

/* Qwen3: Llama's block with an RMSNorm over head_dim on each query and key head
 * before the rotation (q_norm, k_norm: model.qk_layernorm), epsilon rms_norm_eps;
 * its sliding window must be off. */
static int read_qwen3(const Cfg *c, LtConfig *cfg) {
    if (read_llama(c, &qwen3_defaults, cfg) || need_full_attention(c)) return -1;
    cfg->model.qk_layernorm = true;
    return 0;
}

/* Qwen2: Llama's block with biases on the q, k and v projections (read_biases);
 * its sliding window must be off, as Qwen3's. */
static int read_qwen2(const Cfg *c, LtConfig *cfg) {
    return read_llama(c, &qwen2_defaults, cfg) || need_full_attention(c) ? -1 : 0;
}

/* The sparse MoE block of a Mixtral, gpt-oss or Qwen MoE (cls), in every
 * layer (the Qwen MoEs' dense layers: read_qwen_moe): num_local_experts,
 * num_experts_per_tok (defaults as the class's config), and the balancing loss
 * transformers adds only with output_router_logits. renorm: HF takes the top k
 * of the softmax over all experts and renormalises them over the k (Mixtral,
 * gpt-oss, the Qwen MoEs' norm_topk_prob): the same weights as a softmax over the
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

/* A per-layer 0/1 pattern (v, L entries) as the list text lattice's pattern keys
 * take ("[1,0,1]" with sep ","), into out (cap bytes); -1 naming what when it does
 * not fit. */
static int pattern_text(const Cfg *c, char *out, size_t cap, const unsigned char *v, int L,
                        const char *sep, const char *what) {
    size_t at = (size_t)snprintf(out, cap, "[");
    for (int l = 0; l < L && at < cap; l++)
        at += (size_t)snprintf(out + at, cap - at, "%s%d", l ? sep : "", v[l]);
    if (at + 1 >= cap)
        return lt_errorf(c->err, c->errlen, "%s: %d layers of %s exceed lattice's pattern", c->path, L,
                         what);
    snprintf(out + at, cap - at, "]");
    return 0;
}

/* The defaults of a Qwen MoE's expert keys. */
typedef struct {
    const char *cls;  /* for messages: "Qwen3-MoE with norm_topk_prob" */
    int experts, topk, ffn;
} QwenMoeDefaults;

/* Qwen2-MoE's and Qwen3-MoE's Llama block (def: its defaults) with sparse MoE
 * blocks of moe_intermediate_size experts (read_topk_moe; num_experts, which
 * transformers 5 saves as num_local_experts for Qwen3-MoE) in the layers not
 * listed in mlp_only_layers whose number (from 1) decoder_sparse_step divides;
 * the others keep the dense MLP of intermediate_size: model.moe_layer_freq as
 * a list. No window (need_full_attention). */
static int read_qwen_moe(const Cfg *c, const LlamaDefaults *def, const QwenMoeDefaults *moe_def,
                         LtConfig *cfg) {
    __typeof__(cfg->model) *m = &cfg->model;
    int experts = moe_def->experts, norm = 0, step = 1;
    if (read_llama(c, def, cfg) || need_full_attention(c) ||
        get_int(c, c->js, "", "num_experts", 1, INT_MAX, moe_def->experts, &experts) ||
        get_bool(c, "norm_topk_prob", 0, &norm) ||
        read_topk_moe(c, moe_def->cls, experts, moe_def->topk, norm, cfg) ||
        get_int(c, c->js, "", "moe_intermediate_size", 1, INT_MAX, moe_def->ffn, &m->moe_ffn_hidden_size) ||
        get_int(c, c->js, "", "decoder_sparse_step", 1, INT_MAX, 1, &step))
        return -1;
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
    return pattern_text(c, m->moe_layer_freq, sizeof m->moe_layer_freq, moe, L, ",",
                        "mlp_only_layers");
}

/* Qwen3-MoE: Qwen3's block (q/k norms) with read_qwen_moe's experts; absent
 * keys take Qwen3MoeConfig's defaults (128 experts, top 8, 768 wide). */
static int read_qwen3moe(const Cfg *c, LtConfig *cfg) {
    static const QwenMoeDefaults moe = {"Qwen3-MoE with norm_topk_prob", 128, 8, 768};
    if (read_qwen_moe(c, &qwen3moe_defaults, &moe, cfg)) return -1;
    cfg->model.qk_layernorm = true;
    return 0;
}

/* Qwen2-MoE: Qwen2's block (q/k/v biases unless qkv_bias is false) with
 * read_qwen_moe's experts and, in each MoE layer, a shared expert of
 * shared_expert_intermediate_size whose output is scaled per token by
 * sigmoid(shared_expert_gate . x): model.moe_shared_expert_gate. Absent keys
 * take Qwen2MoeConfig's defaults (60 experts, top 4, 1408 wide, a shared
 * expert 5632 wide, 16 key/value heads). */
static int read_qwen2moe(const Cfg *c, LtConfig *cfg) {
    static const QwenMoeDefaults moe = {"Qwen2-MoE with norm_topk_prob", 60, 4, 1408};
    if (read_qwen_moe(c, &qwen2moe_defaults, &moe, cfg) ||
        get_int(c, c->js, "", "shared_expert_intermediate_size", 1, INT_MAX, 5632,
                &cfg->model.moe_shared_expert_intermediate_size))
        return -1;
    cfg->model.moe_shared_expert_gate = true;
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
    if (L > LT_MOE_MAX_LAYERS)
        return lt_errorf(c->err, c->errlen, "%s: %d layers of layer_types exceed lattice's pattern",
                         c->path, L);
    unsigned char win[LT_MOE_MAX_LAYERS] = {0};
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
        win[l] = (unsigned char)sliding;
        any |= sliding;
    }
    char *pat = cfg->model.window_attn_skip_freq;
    if (pattern_text(c, pat, sizeof cfg->model.window_attn_skip_freq, win, L, ", ", "layer_types"))
        return -1;
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
        {"model.moe_shared_expert_gate", a->model.moe_shared_expert_gate != b->model.moe_shared_expert_gate},
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
int lt_hf_read_config(const char *dir, int nover, char **overrides, LtConfig *cfg, char *err,
                       size_t errlen) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return lt_errorf(err, errlen, "path too long: %s", dir);
    LtJson *js = lt_hf_read_json(path, err, errlen);
    if (!js) return -1;
    Cfg c = {js, path, err, errlen};
    HfClass cls = HF_GPT2;
    lt_config_defaults(cfg);
    int rc = read_arch(&c, &cls) || (cls == HF_LLAMA     ? read_llama(&c, &llama_defaults, cfg)
                                     : cls == HF_QWEN2   ? read_qwen2(&c, cfg)
                                     : cls == HF_QWEN3   ? read_qwen3(&c, cfg)
                                     : cls == HF_QWEN3MOE ? read_qwen3moe(&c, cfg)
                                     : cls == HF_QWEN2MOE ? read_qwen2moe(&c, cfg)
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
