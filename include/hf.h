/* hf.h - Hugging Face model directories: the tensor name and layout mapping
 * that `lattice export` (lt_hf_export) writes and `lattice
 * import` reads back, and the two commands.
 *
 * GPT (GPT2LMHeadModel): transformer.wte.weight = wte rows [0, vocab),
 * transformer.wpe.weight, transformer.h.L.{ln_1, attn.c_attn, attn.c_proj,
 * ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias}, transformer.ln_f.{weight, bias},
 * lm_head.weight (rows [0, vocab)) when untied. The four matrices of a layer
 * are Conv1D weights in HF, stored (in, out): the transpose of ours.
 * Llama (LlamaForCausalLM): model.embed_tokens.weight = wte rows [0, vocab),
 * model.layers.L.input_layernorm.weight = h.L.ln_1.weight,
 * self_attn.{q,k,v}_proj.weight = the q | k | v row blocks of h.L.attn.qkv.weight,
 * self_attn.o_proj.weight = h.L.attn.proj.weight,
 * post_attention_layernorm.weight = h.L.ln_2.weight,
 * mlp.{gate,up}_proj.weight = the gate | up row blocks of h.L.mlp.gate_up.weight,
 * mlp.down_proj.weight = h.L.mlp.down.weight, model.norm.weight = ln_f.weight,
 * lm_head.weight (rows [0, vocab)) when untied. Both use (out, in) like
 * torch.nn.Linear, and the same rotate-half RoPE, so nothing is permuted.
 * Mixtral (MixtralForCausalLM: a Llama whose every layer is an MoE layer):
 * Llama's names, with the MLP of layer L replaced by
 * model.layers.L.block_sparse_moe.gate.weight = h.L.mlp.router.weight,
 * block_sparse_moe.experts.e.{w1,w3}.weight = the gate | up row blocks of
 * h.L.mlp.experts.e.gate_up.weight, block_sparse_moe.experts.e.w2.weight =
 * h.L.mlp.experts.e.down.weight.
 * gpt-oss (GptOssForCausalLM: a Mixtral-like Llama with biases, attention
 * sinks and quick-GeGLU experts): Llama's attention names plus
 * self_attn.{q,k,v}_proj.bias = the q | k | v blocks of h.L.attn.qkv.bias,
 * self_attn.o_proj.bias = h.L.attn.proj.bias, self_attn.sinks =
 * h.L.attn.softmax_offset; mlp.router.{weight,bias} = h.L.mlp.router.*;
 * mlp.experts.gate_up_proj (E, C, 2F) = every expert's gate_up.weight
 * transposed, gate and up interleaved (HF's column 2k the gate's row k, 2k + 1
 * the up's), gate_up_proj_bias (E, 2F) interleaved alike, down_proj (E, F, C)
 * = every expert's down.weight transposed, down_proj_bias (E, C). Biases or
 * sinks the model lacks (no model.add_bias_linear; softmax_type off-by-one)
 * export as zeros, which compute the same. */
#ifndef LT_HF_H
#define LT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One Hugging Face tensor: rows [row0, row0 + rows) of a lattice parameter,
 * or of several stacked. */
typedef struct {
    char hf[128];       /* Hugging Face name */
    int param;          /* index of the parameter in the table; -1: a parameter this model
                         * does not have, which export writes as zeros (a bias-free or
                         * off-by-one model in a layout that has the tensor) */
    int64_t row0, rows; /* the rows of the parameter it holds (all of them, or a block) */
    int transpose;      /* HF stores the (cols, rows) transpose (GPT-2 Conv1D, gpt-oss's experts) */
    int interleave;     /* the rows are two blocks that HF interleaves: its row 2k is our row k,
                         * 2k + 1 our row rows/2 + k (gpt-oss's gate_up), before any transpose */
    int nstack, stride; /* nstack > 0: HF stacks nstack parameters, param, param + stride, ...,
                         * along a new first dimension (gpt-oss's experts) */
    int ndim;           /* 1 to 3 */
    int64_t shape[3];   /* its shape in the HF file */
} LtHfMap;

/* Whether m's HF tensor is its parameter's rows as they lie in memory. */
int lt_hf_plain(const LtHfMap *m);
/* Copy between the HF tensor of m (hf: prod(shape) floats, HF order) and its
 * parameters' rows in master (t's offsets): to_hf 1 gathers (zeros for param
 * -1), 0 scatters. */
void lt_hf_copy(const LtHfMap *m, const LtParamTable *t, float *master, float *hf, int to_hf);

/* 1 when the model of d exports as GptOssForCausalLM (a Llama-block MoE with
 * gpt-oss's quick GeGLU experts; the other settings it needs are checked by
 * export), else 0. */
int lt_hf_gptoss(const LtModelDims *d);
/* The Hugging Face class (architectures[0]) and model_type the model of d exports
 * as and imports from: GPT2LMHeadModel, or for the Llama block by what it adds -
 * gpt-oss's experts, experts with q/k norms (Qwen3-MoE), experts with a gated
 * shared expert (Qwen2-MoE), other experts (Mixtral), q/k norms (Qwen3), q/k/v
 * biases alone (Qwen2), else Llama. Whether
 * the class computes the model (the refusals) is export's to check. */
typedef struct {
    const char *cls, *type;
} LtHfClass;
LtHfClass lt_hf_class(const LtModelDims *d);

/* 1 when it exports as Qwen3MoeForCausalLM (a Llama-block MoE with per-head
 * q/k norms and SwiGLU experts; the rest is checked by export), else 0. */
int lt_hf_qwen3moe(const LtModelDims *d);

/* The Hugging Face tensors of the model of t (a tp = 1 table of the whole
 * model: lt_params_build), in the order export writes them. *out is
 * malloc'd; returns the count, or -1 with err (a parameter missing from t). */
int lt_hf_map(const LtParamTable *t, LtHfMap **out, char *err, size_t errlen);

/* Validate c (lt_config_validate, which also fills its derived fields) for
 * one data-parallel replica of its layout: TP x PP ranks, expert (tensor)
 * parallelism taken as 1 for the check (EP and ETP fold over data-parallel
 * ranks that export and import do not have; c keeps their values). The interchange's view of a
 * config: the model's shape, and the padded vocabulary of its TP. Returns 0
 * or -1 with err. */
int lt_hf_validate_replica(LtConfig *c, char *err, size_t errlen);

/* `lattice export`: write <out_dir>/model.safetensors (fp32, vocab sliced to
 * the true size; HF GPT2LMHeadModel names with Conv1D weights transposed to
 * (in, out) for model.arch=gpt, LlamaForCausalLM names for llama (Qwen3's
 * with model.qk_layernorm, Qwen2's with model.add_qkv_bias alone),
 * MixtralForCausalLM names for a llama with experts, GptOssForCausalLM for
 * one with quick-GeGLU experts (refused, naming the key, where gpt-oss
 * computes another function); lm_head.weight when
 * untied: see hf.h) and <out_dir>/config.json. An MoE model Mixtral does not
 * compute (GPT experts, a shared expert, dense layers, a router other than
 * softmax top-k without pre-softmax and scaling, a capacity factor, an expert
 * bias) is refused, naming the key. Returns 0 or -1 with err. */
int lt_hf_export(const char *ckpt_path, const char *out_dir, char *err, size_t errlen);

/* `lattice import HF_DIR OUT_DIR [section.key=value ...]`: read a
 * LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen2MoeForCausalLM,
 * Qwen3MoeForCausalLM, MixtralForCausalLM, GptOssForCausalLM or GPT2LMHeadModel directory (config.json, and
 * model.safetensors or model.safetensors.index.json with its shards; F32, BF16
 * or F16 tensors) and write a weights-only lattice checkpoint at step 0 in
 * OUT_DIR whose config.yaml holds the model keys of config.json and the
 * overrides. Returns 0, or -1 with a message naming the file and the key or
 * tensor. Memory: the fp32 output plus one tensor at a time (a chunk of it
 * when no transpose is needed). */
int lt_hf_import(const char *hf_dir, const char *out_dir, int nover, char **overrides, char *err,
                 size_t errlen);
/* The same, with the checkpoint's step set to `step` (`lattice import --step N`):
 * a start checkpoint that continues a run at step N - the learning-rate
 * schedule and the data order resume there, and MLPerf's init_checkpoint_step
 * is N - while Adam still starts from zero moments. */
int lt_hf_import_at(const char *hf_dir, const char *out_dir, long step, int nover, char **overrides,
                    char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
