/* hf_export.c - `lattice export`: a checkpoint as a Hugging Face model
 * directory, GPT2LMHeadModel for model.arch=gpt, LlamaForCausalLM for
 * model.arch=llama, Qwen3ForCausalLM for a Llama with model.qk_layernorm (Qwen3
 * is Llama with per-head q/k RMSNorm before RoPE, q_norm / k_norm),
 * Qwen2ForCausalLM for a Llama with model.add_qkv_bias alone (Qwen2 is Llama
 * with biases on q, k and v, none on o_proj or the MLP),
 * MixtralForCausalLM for a Llama with experts in every layer and Mixtral's
 * router, Qwen3MoeForCausalLM for one with q/k norms and experts in any
 * layers, Qwen2MoeForCausalLM for one with a gated shared expert
 * (model.moe_shared_expert_gate) and experts in any layers,
 * GptOssForCausalLM for one with gpt-oss's experts (other MoE models are
 * refused, naming the key);
 * the tensor names and layouts are hf.h's table.
 *
 * A tensor that is a block of rows of one of ours (wte without its padded
 * rows, Llama's q/k/v and gate/up) is contiguous in the master weights and
 * written from there; GPT-2's Conv1D weights are (in, out), the transpose of
 * our (out, in), and are copied transposed. The output is fp32; config.json
 * names the architecture and every setting the model's function depends on. */
#include "hf.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "checkpoint.h"
#include "fileio.h"
#include "rope.h"
#include "safetensors.h"

/* The safetensors list of map[0, n): pointers into master where a tensor is
 * rows as they lie, else copies in HF's order (transposed, interleaved,
 * stacked, or zeros) in owned[] (freed by the caller). */
static LtStTensor *tensor_list(const LtParamTable *t, float *master, const LtHfMap *map, int n,
                               float **owned) {
    LtStTensor *list = lt_calloc(sizeof *list * (size_t)n);
    for (int i = 0; i < n; i++) {
        const LtHfMap *m = &map[i];
        list[i] = (LtStTensor){.name = m->hf, .ndim = m->ndim,
                               .shape = {m->shape[0], m->shape[1], m->shape[2]}};
        owned[i] = NULL;
        if (lt_hf_plain(m)) {
            const LtParam *p = &t->p[m->param];
            list[i].data = master + p->offset + (size_t)(m->row0 * (p->ndim == 2 ? p->gshape[1] : 1));
            continue;
        }
        size_t numel = 1;
        for (int d = 0; d < m->ndim; d++) numel *= (size_t)m->shape[d];
        list[i].data = owned[i] = lt_malloc(sizeof(float) * numel);
        lt_hf_copy(m, t, master, owned[i], 1);
    }
    return list;
}

/* A JSON number that Python reads as a float: whole numbers of up to 16
 * digits as "500000.0", others in the shortest exact form ("1e-05"). */
static void json_float(double v, char *buf, size_t n) {
    if (v == floor(v) && fabs(v) < 1e16) snprintf(buf, n, "%.1f", v);
    else lt_format_double(v, buf, n);
}

static void write_gpt2_config(FILE *f, const LtConfig *c) {
    char init[40];
    json_float(c->model.init_method_std, init, sizeof init);
    fprintf(f,
            "{\n"
            "  \"model_type\": \"gpt2\",\n"
            "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
            "  \"n_embd\": %d,\n"
            "  \"n_layer\": %d,\n"
            "  \"n_head\": %d,\n"
            "  \"n_positions\": %d,\n"
            "  \"n_ctx\": %d,\n"
            "  \"n_inner\": %d,\n"
            "  \"vocab_size\": %d,\n"
            "  \"layer_norm_epsilon\": 1e-05,\n"
            "  \"activation_function\": \"gelu_new\",\n"
            "  \"tie_word_embeddings\": %s,\n"
            "  \"initializer_range\": %s,\n"
            "  \"resid_pdrop\": 0.0,\n"
            "  \"embd_pdrop\": 0.0,\n"
            "  \"attn_pdrop\": 0.0,\n"
            "  \"scale_attn_weights\": true,\n"
            "  \"torch_dtype\": \"float32\"\n"
            "}\n",
            c->model.hidden_size, c->model.num_layers, c->model.num_attention_heads,
            c->model.max_position_embeddings, c->model.max_position_embeddings,
            c->model.ffn_hidden_size, c->model.vocab_size,
            c->model.untie_embeddings_and_output_weights ? "false" : "true", init);
}

/* rope_scaling's JSON value of c: null, Llama 3.1's frequency scaling, or YaRN
 * (with the attention factor lattice uses written out, so no reader derives another). */
static void rope_scaling_json(const LtConfig *c, char *rope, size_t n) {
    snprintf(rope, n, "null");
    if (c->model.rope_scaling == LT_ROPE_YARN) {
        const LtRopeScaling s = {.type = LT_ROPE_SCALING_YARN, .factor = c->model.rope_scaling_factor,
                                 .attention_factor = c->model.rope_attention_factor};
        char fa[40], bf[40], bs[40], af[40];
        json_float(c->model.rope_scaling_factor, fa, sizeof fa);
        json_float(c->model.rope_beta_fast, bf, sizeof bf);
        json_float(c->model.rope_beta_slow, bs, sizeof bs);
        json_float(lt_rope_attention_factor(&s), af, sizeof af);
        snprintf(rope, n,
                 "{\n    \"rope_type\": \"yarn\",\n    \"factor\": %s,\n"
                 "    \"original_max_position_embeddings\": %d,\n    \"beta_fast\": %s,\n"
                 "    \"beta_slow\": %s,\n    \"truncate\": %s,\n    \"attention_factor\": %s\n  }",
                 fa, c->model.rope_original_max_position, bf, bs,
                 c->model.rope_truncate ? "true" : "false", af);
        return;
    }
    if (c->model.rope_scaling != LT_ROPE_LLAMA3) return;
    char fa[40], lo[40], hi[40];
    json_float(c->model.rope_scaling_factor, fa, sizeof fa);
    json_float(c->model.rope_low_freq_factor, lo, sizeof lo);
    json_float(c->model.rope_high_freq_factor, hi, sizeof hi);
    snprintf(rope, n,
             "{\n    \"rope_type\": \"llama3\",\n    \"factor\": %s,\n"
             "    \"low_freq_factor\": %s,\n    \"high_freq_factor\": %s,\n"
             "    \"original_max_position_embeddings\": %d\n  }",
             fa, lo, hi, c->model.rope_original_max_position);
}

/* The opening of a Llama-block config.json (Llama, Qwen2, Qwen3, Qwen2-MoE,
 * Qwen3-MoE, Mixtral, gpt-oss): the class of d (lt_hf_class), and the shape of
 * the validated config c; ffn the MLP's (or each expert's) width, eps the norm's
 * epsilon as JSON. */
static void write_block_shape(FILE *f, const LtConfig *c, const LtModelDims *d, int ffn,
                              const char *eps) {
    const LtHfClass hc = lt_hf_class(d);
    fprintf(f,
            "{\n"
            "  \"model_type\": \"%s\",\n"
            "  \"architectures\": [\"%s\"],\n"
            "  \"hidden_size\": %d,\n"
            "  \"intermediate_size\": %d,\n"
            "  \"num_hidden_layers\": %d,\n"
            "  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n"
            "  \"head_dim\": %d,\n"
            "  \"max_position_embeddings\": %d,\n"
            "  \"vocab_size\": %d,\n"
            "  \"rms_norm_eps\": %s,\n",
            hc.type, hc.cls, c->model.hidden_size, ffn, c->model.num_layers, c->model.num_attention_heads,
            c->model.num_query_groups, c->model.kv_channels, c->model.max_position_embeddings,
            c->model.vocab_size, eps);
}

/* LlamaForCausalLM (with model.add_bias_linear its attention_bias and mlp_bias),
 * Qwen3ForCausalLM with the per-head q/k norms (d->qk_norm; no sliding window, no
 * biases: bias_refusal), Qwen2ForCausalLM with biases on q, k and v only
 * (model.add_qkv_bias without model.add_bias_linear), MixtralForCausalLM for
 * an MoE model (d->moe.experts > 0, checked by moe_refusal),
 * Qwen3MoeForCausalLM for one with q/k norms and Qwen2MoeForCausalLM for one
 * with a gated shared expert (their dense layers as mlp_only_layers; Qwen2-MoE's
 * q/k/v biases as qkv_bias, the shared expert's width
 * shared_expert_intermediate_size): the attention and norms are the same;
 * Mixtral's intermediate_size is each expert's width, the Qwen MoEs' the dense
 * layers' (moe_intermediate_size the experts'). The aux-loss coefficient goes
 * to router_aux_loss_coef, turned on (output_router_logits) when it is > 0. */
static void write_llama_config(FILE *f, const LtConfig *c, const LtModelDims *d) {
    char eps[40], theta[40], init[40], rope[512], aux[40];
    const char *type = lt_hf_class(d).type;
    const int qwen2moe = !strcmp(type, "qwen2_moe"), qwenmoe = qwen2moe || !strcmp(type, "qwen3_moe"),
              mixtral = !strcmp(type, "mixtral"), qwen3 = !strcmp(type, "qwen3"),
              qwen2 = !strcmp(type, "qwen2");
    json_float(c->model.norm_epsilon, eps, sizeof eps);
    json_float(c->model.init_method_std, init, sizeof init);
    json_float(c->model.rotary_base, theta, sizeof theta);
    json_float(c->model.moe_aux_loss_coeff, aux, sizeof aux);
    rope_scaling_json(c, rope, sizeof rope);
    write_block_shape(f, c, d, mixtral ? d->moe.ffn : c->model.ffn_hidden_size, eps);
    fprintf(f,
            "  \"rope_theta\": %s,\n"
            "  \"rope_scaling\": %s,\n"
            "  \"tie_word_embeddings\": %s,\n"
            "  \"hidden_act\": \"silu\",\n",
            theta, rope, c->model.untie_embeddings_and_output_weights ? "false" : "true");
    if (qwenmoe) {
        char dense[LT_MOE_MAX_LAYERS * 6 + 8] = "", bias[40] = "  \"attention_bias\": false,\n";
        size_t at = 0;
        for (int l = 0; l < d->num_layers && at < sizeof dense; l++)
            if (!lt_dims_moe_layer(d, l))
                at += (size_t)snprintf(dense + at, sizeof dense - at, "%s%d", at ? ", " : "", l);
        if (qwen2moe) /* Qwen2-MoE's q/k/v biases: its key (the other linears have none) */
            snprintf(bias, sizeof bias, "  \"qkv_bias\": %s,\n", lt_dims_qkv_bias(d) ? "true" : "false");
        fprintf(f,
                "%s"
                "  \"attention_dropout\": 0.0,\n"
                "  \"use_sliding_window\": false,\n"
                "  \"sliding_window\": null,\n"
                "  \"moe_intermediate_size\": %d,\n"
                "  \"num_experts\": %d,\n"
                "  \"num_experts_per_tok\": %d,\n"
                "  \"norm_topk_prob\": %s,\n"
                "  \"decoder_sparse_step\": 1,\n"
                "  \"mlp_only_layers\": [%s],\n"
                "  \"router_aux_loss_coef\": %s,\n"
                "  \"output_router_logits\": %s,\n",
                bias, d->moe.ffn, d->moe.experts, d->moe.topk, d->moe.pre_softmax ? "false" : "true",
                dense, aux, c->model.moe_aux_loss_coeff > 0 ? "true" : "false");
        if (qwen2moe) fprintf(f, "  \"shared_expert_intermediate_size\": %d,\n", d->moe.shared_ffn);
    } else if (mixtral)
        fprintf(f,
                "  \"attention_dropout\": 0.0,\n"
                "  \"sliding_window\": null,\n"
                "  \"num_local_experts\": %d,\n"
                "  \"num_experts_per_tok\": %d,\n"
                "  \"router_aux_loss_coef\": %s,\n"
                "  \"output_router_logits\": %s,\n"
                "  \"router_jitter_noise\": 0.0,\n",
                d->moe.experts, d->moe.topk, aux, c->model.moe_aux_loss_coeff > 0 ? "true" : "false");
    else if (qwen3 || qwen2) /* (Qwen2's q/k/v biases are its architecture's, not a key) */
        fprintf(f,
                "%s"
                "  \"attention_dropout\": 0.0,\n"
                "  \"use_sliding_window\": false,\n"
                "  \"sliding_window\": null,\n"
                "  \"max_window_layers\": %d,\n",
                qwen3 ? "  \"attention_bias\": false,\n" : "", c->model.num_layers);
    else /* model.add_bias_linear: Llama's attention_bias (q, k, v, o) and mlp_bias */
        fprintf(f,
                "  \"attention_bias\": %s,\n"
                "  \"attention_dropout\": 0.0,\n"
                "  \"mlp_bias\": %s,\n",
                d->linear_bias ? "true" : "false", d->linear_bias ? "true" : "false");
    fprintf(f,
            "  \"initializer_range\": %s,\n"
            "  \"torch_dtype\": \"float32\"\n"
            "}\n",
            init);
}

/* 0 when the MoE model of c (d) is one its class (lt_hf_class) computes:
 * MixtralForCausalLM, Qwen3MoeForCausalLM (a model with per-head q/k norms)
 * or Qwen2MoeForCausalLM (one with a gated shared expert); else -1 with a
 * message naming the config key that makes it another model. They differ in
 * what else they allow: the Qwen MoEs have dense layers (mlp_only_layers) and
 * weight the experts by their probabilities among all (norm_topk_prob false:
 * moe_router_pre_softmax) or renormalised over the k; Qwen2-MoE alone has a
 * shared expert, scaled by its sigmoid gate. */
static int moe_refusal(const LtConfig *c, const LtModelDims *d, char *err, size_t errlen) {
    /* (a GPT has no MoE class: refused as the Mixtral its block is not) */
    const LtHfClass hc =
        d->arch == LT_ARCH_LLAMA ? lt_hf_class(d) : (LtHfClass){"MixtralForCausalLM", "mixtral"};
    const int qwen = strcmp(hc.type, "mixtral") != 0, shared = !strcmp(hc.type, "qwen2_moe");
    const char *name = !qwen ? "Mixtral" : shared ? "Qwen2-MoE" : "Qwen3-MoE";
    char no[128];
    snprintf(no, sizeof no, "cannot export as %s, the Hugging Face MoE model lattice writes for it:",
             hc.cls);
    if (c->model.arch != LT_ARCH_LLAMA)
        return lt_errorf(err, errlen, "%s model.arch=gpt with model.num_experts=%d; %s's block is "
                         "Llama's (model.arch=llama), and GPT-2 has no MoE form", no, d->moe.experts, name);
    if (d->moe.shared_ffn > 0 && !shared)
        return lt_errorf(err, errlen, "%s model.moe_shared_expert_intermediate_size=%d; %s has no "
                         "shared expert (Qwen2MoeForCausalLM's is gated, "
                         "model.moe_shared_expert_gate=true, and has no q/k norms)", no,
                         d->moe.shared_ffn, name);
    for (int l = 0; !qwen && l < d->num_layers; l++)
        if (!lt_dims_moe_layer(d, l))
            return lt_errorf(err, errlen, "%s model.moe_layer_freq=\"%.100s\" leaves layer %d dense; every "
                             "Mixtral layer is an MoE layer (moe_layer_freq 1; Qwen3-MoE, with "
                             "model.qk_layernorm, and Qwen2-MoE, with a gated shared expert, have "
                             "dense layers)", no, c->model.moe_layer_freq, l);
    if (d->moe.score != LT_MOE_SOFTMAX)
        return lt_errorf(err, errlen, "%s model.moe_router_score_function=sigmoid; %s's router "
                         "scores with a softmax", no, name);
    if (!qwen && d->moe.pre_softmax)
        return lt_errorf(err, errlen, "%s model.moe_router_pre_softmax=true weights an expert by its "
                         "probability among all %d; Mixtral renormalises over the top %d "
                         "(moe_router_pre_softmax=false)%s", no, d->moe.experts, d->moe.topk,
                         d->moe.topk == 1 ? ", which gives top-1 the weight 1: lattice's top-1 "
                                            "softmax router cannot express that" : "");
    if (c->model.moe_router_topk_scaling_factor != 0 && c->model.moe_router_topk_scaling_factor != 1)
        return lt_errorf(err, errlen, "%s model.moe_router_topk_scaling_factor=%g; %s does not "
                         "scale its routing weights (0 or 1)", no,
                         c->model.moe_router_topk_scaling_factor, name);
    if (d->moe.capacity > 0)
        return lt_errorf(err, errlen, "%s model.moe_expert_capacity_factor=%g drops tokens; %s "
                         "computes every routed token (0: dropless)", no, (double)d->moe.capacity, name);
    if (c->model.moe_router_enable_expert_bias)
        return lt_errorf(err, errlen, "%s model.moe_router_enable_expert_bias=true; %s's router "
                         "has no expert bias", no, name);
    if (d->moe.groups > 0)
        return lt_errorf(err, errlen, "%s model.moe_router_num_groups=%d (group-limited routing); "
                         "%s's router chooses among all experts", no, d->moe.groups, name);
    return 0;
}

/* 0 when the linear biases of c (d) are ones the layout lattice writes for it
 * has: none, a dense Llama's with model.add_bias_linear (LlamaForCausalLM's
 * attention_bias and mlp_bias: q, k, v, o, gate, up and down), or
 * model.add_qkv_bias alone in a dense Llama (Qwen2ForCausalLM's) or one with a
 * gated shared expert (Qwen2MoeForCausalLM's); else -1 naming the key. */
static int bias_refusal(const LtConfig *c, const LtModelDims *d, char *err, size_t errlen) {
    if (d->arch != LT_ARCH_LLAMA || (!d->qkv_bias && !d->linear_bias)) return 0;
    const char *key = d->linear_bias ? "model.add_bias_linear" : "model.add_qkv_bias";
    const LtHfClass hc = lt_hf_class(d);
    const int qwen2moe = !strcmp(hc.type, "qwen2_moe");
    if (d->moe.experts > 0 && (d->linear_bias || !qwen2moe))
        return lt_errorf(err, errlen, "cannot export %s=true as %s: its %s have no biases", key, hc.cls,
                         qwen2moe ? "o_proj, experts, shared expert and router (q, k and v alone: "
                                    "model.add_qkv_bias)"
                                  : "attention, experts and router");
    if (d->qk_norm)
        return lt_errorf(err, errlen, "cannot export %s=true as Qwen3ForCausalLM (the layout of "
                         "model.qk_layernorm=true): its MLP has no biases", key);
    return 0;
}

/* 0 when the MoE model of c (d) is one GptOssForCausalLM computes; else -1
 * naming the key that makes it another model. Biases and sinks it lacks are
 * exported as zeros (hf.h). */
static int gptoss_refusal(const LtConfig *c, const LtModelDims *d, char *err, size_t errlen) {
    const char *no = "cannot export as GptOssForCausalLM, the Hugging Face model of quick-GeGLU "
                     "experts:";
    if (d->glu.offset != 1.0f || d->glu.clamp <= 0)
        return lt_errorf(err, errlen, "%s model.glu_linear_offset=%g and model.activation_func_clamp_value=%g; "
                         "gpt-oss's experts compute (clamp(up) + 1) * quick_gelu(min(gate, limit)) "
                         "(offset 1, a clamp > 0)", no, c->model.glu_linear_offset,
                         c->model.activation_func_clamp_value);
    if (d->softmax_type == LT_SOFTMAX_VANILLA)
        return lt_errorf(err, errlen, "%s model.softmax_type=vanilla; gpt-oss's attention has a sink "
                         "logit per head (learnable, or off-by-one: a sink of 0)", no);
    if (d->qk_norm)
        return lt_errorf(err, errlen, "%s model.qk_layernorm=true; gpt-oss's attention has no "
                         "per-head query/key norm", no);
    if (d->moe.shared_ffn > 0)
        return lt_errorf(err, errlen, "%s model.moe_shared_expert_intermediate_size=%d; gpt-oss has "
                         "no shared expert", no, d->moe.shared_ffn);
    for (int l = 0; l < d->num_layers; l++)
        if (!lt_dims_moe_layer(d, l))
            return lt_errorf(err, errlen, "%s model.moe_layer_freq=\"%.100s\" leaves layer %d dense; "
                             "every gpt-oss layer is an MoE layer", no, c->model.moe_layer_freq, l);
    if (c->model.moe_router_enable_expert_bias)
        return lt_errorf(err, errlen, "%s model.moe_router_enable_expert_bias=true; gpt-oss's router "
                         "has no expert bias", no);
    if (d->moe.groups > 0)
        return lt_errorf(err, errlen, "%s model.moe_router_num_groups=%d (group-limited routing); "
                         "gpt-oss's router chooses among all experts", no, d->moe.groups);
    if (d->moe.score != LT_MOE_SOFTMAX || d->moe.pre_softmax)
        return lt_errorf(err, errlen, "%s model.moe_router_score_function=%s, moe_router_pre_softmax=%s; "
                         "gpt-oss's router takes a softmax over the top k logits (softmax, false)", no,
                         d->moe.score == LT_MOE_SOFTMAX ? "softmax" : "sigmoid",
                         d->moe.pre_softmax ? "true" : "false");
    if (c->model.moe_router_topk_scaling_factor != 0 && c->model.moe_router_topk_scaling_factor != 1)
        return lt_errorf(err, errlen, "%s model.moe_router_topk_scaling_factor=%g; gpt-oss does not "
                         "scale its routing weights (0 or 1)", no, c->model.moe_router_topk_scaling_factor);
    if (d->moe.capacity > 0)
        return lt_errorf(err, errlen, "%s model.moe_expert_capacity_factor=%g drops tokens; gpt-oss "
                         "computes every routed token (0: dropless)", no, (double)d->moe.capacity);
    return 0;
}

/* gpt-oss's config.json: the rotary settings as rope_parameters (its config
 * reads an absent one as YaRN with factor 32), the layers' window pattern as
 * layer_types with sliding_window W + 1 (its window counts the query's own key;
 * lattice's W keys before it), swiglu_limit the clamp. */
static void write_gptoss_config(FILE *f, const LtConfig *c, const LtModelDims *d) {
    char eps[40], theta[40], init[40], aux[40], limit[40], rope[512];
    json_float(c->model.norm_epsilon, eps, sizeof eps);
    json_float(c->model.init_method_std, init, sizeof init);
    json_float(c->model.rotary_base, theta, sizeof theta);
    json_float(c->model.moe_aux_loss_coeff, aux, sizeof aux);
    json_float(c->model.activation_func_clamp_value, limit, sizeof limit);
    rope_scaling_json(c, rope, sizeof rope);
    write_block_shape(f, c, d, d->moe.ffn, eps);
    fprintf(f, "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n", d->moe.experts,
            d->moe.topk);
    if (!strcmp(rope, "null"))
        fprintf(f, "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %s},\n", theta);
    else /* the scaling's object with the base added */
        fprintf(f, "  \"rope_parameters\": {\n    \"rope_theta\": %s,%s,\n", theta, rope + 1);
    fprintf(f, "  \"sliding_window\": %d,\n  \"layer_types\": [",
            c->model.window_left >= 0 ? c->model.window_left + 1 : 128);
    for (int l = 0; l < c->model.num_layers; l++)
        fprintf(f, "%s\"%s\"", l ? ", " : "",
                c->model.window_left >= 0 && c->model.window_layer[l] ? "sliding_attention"
                                                                      : "full_attention");
    fprintf(f,
            "],\n"
            "  \"swiglu_alpha\": 1.702,\n"
            "  \"swiglu_limit\": %s,\n"
            "  \"attention_bias\": true,\n"
            "  \"attention_dropout\": 0.0,\n"
            "  \"hidden_act\": \"silu\",\n"
            "  \"router_aux_loss_coef\": %s,\n"
            "  \"output_router_logits\": %s,\n"
            "  \"tie_word_embeddings\": %s,\n"
            "  \"initializer_range\": %s,\n"
            "  \"torch_dtype\": \"float32\"\n"
            "}\n",
            limit, aux, c->model.moe_aux_loss_coeff > 0 ? "true" : "false",
            c->model.untie_embeddings_and_output_weights ? "false" : "true", init);
}

/* 0 when c attends over the whole causal context in every layer; else -1: the
 * configs lattice writes have no sliding window (Llama has none; a Mixtral
 * window covers every layer, Qwen2's and Qwen3's those from max_window_layers
 * on, with W keys where lattice's covers W + 1), so a windowed model would
 * export as another function. */
static int window_refusal(const LtConfig *c, char *err, size_t errlen) {
    if (c->model.window_left < 0) return 0;
    int n = 0;
    for (int l = 0; l < c->model.num_layers; l++) n += c->model.window_layer[l] != 0;
    return lt_errorf(err, errlen, "cannot export model.window_size=%s (a sliding window of %d keys "
                     "before each query in %d of %d layers): the Hugging Face configs lattice "
                     "writes attend over the whole sequence, which would be another model; only "
                     "models trained without model.window_size export", c->model.window_size,
                     c->model.window_left, n, c->model.num_layers);
}

/* 0 when c's gated MLP is SwiGLU; else -1 naming the first key that changes it:
 * the Llama, Qwen2, Qwen3, Qwen MoE and Mixtral MLPs compute silu(gate) * up,
 * with no clamp and no offset, so another activation would export as another
 * function. */
static int glu_refusal(const LtConfig *c, char *err, size_t errlen) {
    char key[96];
    if (c->model.quick_geglu)
        snprintf(key, sizeof key, "model.quick_geglu=true");
    else if (c->model.glu_linear_offset != 0)
        snprintf(key, sizeof key, "model.glu_linear_offset=%g", c->model.glu_linear_offset);
    else if (c->model.activation_func_clamp_value != 0)
        snprintf(key, sizeof key, "model.activation_func_clamp_value=%g",
                 c->model.activation_func_clamp_value);
    else
        return 0;
    return lt_errorf(err, errlen, "cannot export %s: the Hugging Face Llama, Qwen2, Qwen3, Qwen MoE "
                     "and Mixtral MLPs lattice writes compute silu(gate) * up, without quick_gelu, "
                     "an offset or a clamp, which would be another model; only models trained "
                     "with SwiGLU export", key);
}

/* 0 with attention's plain softmax; else -1: LlamaForCausalLM, the Qwen classes,
 * MixtralForCausalLM and GPT2LMHeadModel have no sink logit in their softmax
 * (GptOssForCausalLM's `sinks`), so a model with one would export as another function. */
static int sinks_refusal(const LtConfig *c, char *err, size_t errlen) {
    if (c->model.softmax_type == LT_SOFTMAX_VANILLA) return 0;
    return lt_errorf(err, errlen, "cannot export model.softmax_type=%s (attention sinks: an extra "
                     "logit per head in the softmax): the Hugging Face layouts lattice writes "
                     "(Llama, Qwen2, Qwen3, the Qwen MoEs, Mixtral, GPT-2) have plain softmax "
                     "attention, which would be another model; only models trained with "
                     "model.softmax_type=vanilla export",
                     lt_softmax_type_name(c->model.softmax_type));
}

/* config.json of the validated config c, written atomically. */
static int write_config_json(const char *path, const LtConfig *c, const LtModelDims *d, char *err,
                             size_t errlen) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return lt_errorf(err, errlen, "path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return lt_errorf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    if (lt_hf_gptoss(d)) write_gptoss_config(f, c, d);
    else if (c->model.arch == LT_ARCH_LLAMA) write_llama_config(f, c, d);
    else write_gpt2_config(f, c);
    if (lt_file_commit(f, tmp, err, errlen) || lt_rename_durable(tmp, path, err, errlen)) {
        remove(tmp);
        return -1;
    }
    return 0;
}

int lt_hf_validate_replica(LtConfig *c, char *err, size_t errlen) {
    const long long world = (long long)c->parallel.tensor_model_parallel_size *
                            c->parallel.pipeline_model_parallel_size;
    const int ep = c->parallel.expert_model_parallel_size,
              etp = c->parallel.expert_tensor_parallel_size;
    c->parallel.expert_model_parallel_size = 1;
    c->parallel.expert_tensor_parallel_size = 1;
    const int rc = lt_config_validate(c, world > 0 && world <= INT_MAX ? (int)world : 1, err, errlen);
    c->parallel.expert_model_parallel_size = ep;
    c->parallel.expert_tensor_parallel_size = etp;
    return rc;
}

int lt_hf_export(const char *ckpt_path, const char *out_dir, char *err, size_t errlen) {
    char stepdir[PATH_MAX], emsg[512];
    LtConfig *cfg = lt_malloc(sizeof *cfg);
    if (lt_ckpt_resolve(ckpt_path, stepdir, sizeof stepdir, err, errlen) ||
        lt_ckpt_load_config(stepdir, cfg, err, errlen)) {
        free(cfg);
        return -1;
    }
    /* the padded vocabulary depends on the tensor-parallel size and must match
     * the stored wte */
    if (lt_hf_validate_replica(cfg, emsg, sizeof emsg)) {
        lt_errorf(err, errlen, "%s/config.yaml: %s", stepdir, emsg);
        free(cfg);
        return -1;
    }
    const LtModelDims dims = lt_dims_from_config(cfg);
    const int gptoss = lt_hf_gptoss(&dims);
    if (gptoss ? gptoss_refusal(cfg, &dims, emsg, sizeof emsg)
               : window_refusal(cfg, emsg, sizeof emsg) || bias_refusal(cfg, &dims, emsg, sizeof emsg) ||
                     glu_refusal(cfg, emsg, sizeof emsg) || sinks_refusal(cfg, emsg, sizeof emsg) ||
                     (dims.moe.experts > 0 &&
                      moe_refusal(cfg, &dims, emsg, sizeof emsg))) {
        lt_errorf(err, errlen, "%s/config.yaml: %s", stepdir, emsg);
        free(cfg);
        return -1;
    }
    LtParamTable t;
    lt_params_build(&t, &dims);
    float *master = lt_malloc(sizeof(float) * t.total);
    LtCkptState s = {master, NULL, NULL};
    LtHfMap *map = NULL;
    LtStTensor *list = NULL;
    float **owned = NULL;
    int n = 0, rc = -1;
    char model[PATH_MAX], config[PATH_MAX];
    if (snprintf(model, sizeof model, "%s/model.safetensors", out_dir) >= (int)sizeof model ||
        snprintf(config, sizeof config, "%s/config.json", out_dir) >= (int)sizeof config) {
        lt_errorf(err, errlen, "path too long: %s", out_dir);
        goto done;
    }
    if (lt_ckpt_load(stepdir, &t, &s, NULL, err, errlen) || (n = lt_hf_map(&t, &map, err, errlen)) < 0)
        goto done;
    owned = lt_calloc(sizeof *owned * (size_t)n);
    list = tensor_list(&t, master, map, n, owned);
    if (lt_mkdir_p(out_dir, err, errlen) || lt_safetensors_write(model, list, n, err, errlen) ||
        write_config_json(config, cfg, &dims, err, errlen))
        goto done;
    rc = 0;
done:
    for (int i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(list);
    free(map);
    free(master);
    free(cfg);
    lt_params_free(&t);
    return rc;
}
