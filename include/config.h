/* config.h - the run configuration: YAML (libyaml) -> validated struct.
 *
 * Every key has a default (lt_config_defaults); a YAML file and then dotted
 * command-line overrides ("train.steps=100") replace them. Errors name the key
 * (and file:line for YAML) and carry a did-you-mean for unknown keys. */
#ifndef LT_CONFIG_H
#define LT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "attn_impl.h"   /* LtAttnImpl (model.attention) */
#include "layer_split.h" /* LtLayerSplit (parallel.*_pipeline_*) */
#include "rampup.h"      /* LtRampup (train.rampup_batch_size) */

#ifdef __cplusplus
extern "C" {
#endif

#define LT_PATH_MAX 1024

typedef enum { LT_PREC_FP32 = 0, LT_PREC_BF16 = 1 } LtPrecision;
typedef enum { LT_RECOMPUTE_NONE = 0, LT_RECOMPUTE_SELECTIVE, LT_RECOMPUTE_FULL } LtRecompute;
typedef enum { LT_DEVICE_AUTO = 0, LT_DEVICE_CPU, LT_DEVICE_CUDA } LtDeviceKind;
typedef enum { LT_COMM_AUTO = 0, LT_COMM_NCCL, LT_COMM_MPI } LtCommBackend;
typedef enum { LT_ARCH_GPT = 0, LT_ARCH_LLAMA = 1 } LtArch;
typedef enum { LT_SPLIT_VALID = 0, LT_SPLIT_TEST = 1 } LtEvalSplit;
typedef enum { LT_ROPE_NONE = 0, LT_ROPE_LLAMA3 = 1, LT_ROPE_YARN = 2 } LtRopeScalingKind;
/* model.add_bias_linear: auto takes the arch's (gpt: true, llama: false), resolved by
 * validate */
typedef enum { LT_BIAS_FALSE = 0, LT_BIAS_TRUE = 1, LT_BIAS_AUTO = 2 } LtLinearBias;
/* model.softmax_type (Megatron-Core's): attention's softmax as it is, with one extra
 * logit 0 per query row ("off-by-one"), or with a learned logit per head (gpt-oss's
 * attention sinks) */
typedef enum {
    LT_SOFTMAX_VANILLA = 0,
    LT_SOFTMAX_OFF_BY_ONE = 1,
    LT_SOFTMAX_LEARNABLE = 2
} LtSoftmaxType;
/* mixture of experts: model.moe_router_score_function, moe_router_load_balancing_type,
 * moe_token_drop_policy (Megatron-Core's values) */
typedef enum { LT_MOE_SOFTMAX = 0, LT_MOE_SIGMOID = 1 } LtMoeScore;
typedef enum { LT_MOE_AUX_LOSS = 0, LT_MOE_SEQ_AUX_LOSS = 1, LT_MOE_BALANCE_NONE = 2 } LtMoeBalance;
typedef enum { LT_MOE_DROP_PROBS = 0, LT_MOE_DROP_POSITION = 1 } LtMoeDropPolicy;
/* The most layers an MoE model may have (model.moe_layer_freq's pattern). */
#define LT_MOE_MAX_LAYERS 1024
/* The most expert groups group-limited routing takes (model.moe_router_num_groups:
 * the CUDA router holds a token's groups in a 64-bit mask). */
#define LT_MOE_MAX_GROUPS 64
/* Whether group-limited routing with G groups, GK of them per token, fits E experts
 * and top-K (backend.h's moe_topk; G 0: no groups). */
static inline int lt_moe_groups_fit(int E, int K, int G, int GK) {
    return G == 0 || (G > 0 && G <= LT_MOE_MAX_GROUPS && E % G == 0 && GK >= 1 && GK <= G &&
                      K >= GK && K <= GK * (E / G));
}
/* optimizer.lr_decay_style and optimizer.lr_wsd_decay_style (Megatron-LM's
 * lr_decay_style and lr_wsd_decay_style; lt_lr_at in optim.h) */
typedef enum {
    LT_LR_COSINE = 0,
    LT_LR_LINEAR,
    LT_LR_CONSTANT,
    LT_LR_INVERSE_SQRT,
    LT_LR_WSD
} LtLrDecayStyle;
typedef enum {
    LT_WSD_EXPONENTIAL = 0,
    LT_WSD_LINEAR,
    LT_WSD_COSINE,
    LT_WSD_MINUS_SQRT
} LtWsdDecayStyle;

typedef struct {
    struct {
        LtArch arch;                   /* gpt (GPT-2/3 block) | llama (RMSNorm, SwiGLU, RoPE, GQA) */
        int num_layers;
        int hidden_size;
        int num_attention_heads;
        int ffn_hidden_size;           /* 0 in YAML/defaults means 4*hidden_size; resolved by validate */
        int seq_length;
        int max_position_embeddings;
        int vocab_size;                /* true vocabulary size */
        int make_vocab_size_divisible_by; /* default 128 */
        int padded_vocab_size;         /* derived: vocab rounded up (not a key) */
        LtAttnImpl attention;          /* auto | cudnn | lattice (CUDA backend's attention) */
        bool attention_deterministic;  /* only bitwise-repeatable attention backward passes */
        int num_query_groups;          /* key/value heads (llama); 0 = num_attention_heads */
        int kv_channels;               /* the head dimension (Megatron's --kv-channels); 0 =
                                        * hidden_size / num_attention_heads, resolved by validate */
        bool qk_layernorm;             /* per-head RMSNorm on queries and keys before RoPE
                                        * (llama; Megatron-Core's qk_layernorm) */
        LtLinearBias add_bias_linear;  /* biases on the QKV, attention output, MLP and expert
                                        * linears and the router (Megatron-Core's
                                        * add_bias_linear); auto until validate resolves it */
        bool add_qkv_bias;             /* a bias on the QKV projection only (Qwen2's;
                                        * implied by add_bias_linear) */
        LtSoftmaxType softmax_type;    /* vanilla | off-by-one | learnable (attention sinks:
                                        * h.<l>.attn.softmax_offset, one logit per head) */
        double norm_epsilon;           /* RMSNorm epsilon (llama; GPT's LayerNorm uses 1e-5) */
        double rotary_base;            /* RoPE base theta (llama) */
        LtRopeScalingKind rope_scaling; /* none | llama3 (Llama 3.1's frequency scaling) |
                                        * yarn (YaRN: gpt-oss, DeepSeek-V3) */
        double rope_scaling_factor;    /* llama3: 8; yarn: the context extension */
        double rope_low_freq_factor;   /* llama3: 1 */
        double rope_high_freq_factor;  /* llama3: 4 */
        int rope_original_max_position; /* llama3: 8192; yarn: the pretraining context */
        double rope_beta_fast;         /* yarn: rotations bounding the kept frequencies (32) */
        double rope_beta_slow;         /* yarn: rotations bounding the scaled ones (1) */
        bool rope_truncate;            /* yarn: round the blend's bounds to whole pairs */
        double rope_attention_factor;  /* yarn: cos/sin multiplier; 0: 0.1 ln(factor) + 1 */
        bool untie_embeddings_and_output_weights; /* LM head its own weight, not wte */
        double init_method_std;        /* std of the normal init (residual projections:
                                        * init_method_std / sqrt(2 * num_layers)) */
        /* the gated MLP's activation, dense and experts (llama; Megatron-Core's names):
         * act(min(gate, clamp)) * (clamp(up, -clamp, clamp) + glu_linear_offset) */
        bool quick_geglu;              /* act = x * sigmoid(1.702 x) (else silu: SwiGLU) */
        double glu_linear_offset;      /* added to the linear half (gpt-oss: 1) */
        double activation_func_clamp_value; /* the clamp (gpt-oss: 7); 0 = none */
        /* mixture of experts (Megatron-Core's names and defaults; docs/configuration.md) */
        int num_experts;               /* routed experts per MoE layer; 0 = a dense model */
        int moe_router_topk;           /* experts each token goes to (2) */
        int moe_ffn_hidden_size;       /* each routed expert's FFN width; 0 = ffn_hidden_size */
        char moe_layer_freq[LT_PATH_MAX]; /* "k": layers 0, k, 2k, ... are MoE ("1": all);
                                        * or a pattern of num_layers 0/1, "[1,0,1,1]" or
                                        * "([0]*3+[1]*29)" */
        unsigned char moe_layer[LT_MOE_MAX_LAYERS]; /* derived: 1 = layer l is MoE (not a key) */
        int moe_shared_expert_intermediate_size; /* the shared expert's width; 0 = none */
        bool moe_shared_expert_gate;   /* its output times sigmoid(x . g) per token */
        LtMoeScore moe_router_score_function;    /* softmax | sigmoid */
        bool moe_router_pre_softmax;   /* softmax over all experts, then top-k (else top-k of the
                                        * logits, then a softmax over the k) */
        int moe_router_num_groups;     /* group-limited routing (DeepSeek's device/node-limited):
                                        * the experts in this many equal groups; 0 = off */
        int moe_router_group_topk;     /* the groups a token may choose its experts from */
        double moe_router_topk_scaling_factor; /* multiplies the routing weights; 0 = none */
        LtMoeBalance moe_router_load_balancing_type; /* aux_loss | seq_aux_loss | none */
        double moe_aux_loss_coeff;     /* 0 = no load-balancing loss */
        double moe_z_loss_coeff;       /* 0 = no router z-loss */
        bool moe_router_enable_expert_bias; /* DeepSeek-V3's aux-loss-free balancing */
        double moe_router_bias_update_rate; /* its step (1e-3) */
        double moe_expert_capacity_factor;  /* 0 = dropless */
        LtMoeDropPolicy moe_token_drop_policy; /* probs | position */
        bool moe_pad_expert_input_to_capacity; /* every expert gets capacity rows */
        bool moe_grouped_gemm;         /* CUDA: each expert linear one cuBLAS grouped GEMM
                                        * call (false, the default: one cuBLASLt GEMM per
                                        * expert; the CPU always runs one BLAS call per
                                        * expert) */
        /* sliding-window attention (Megatron-Core's window_size, window_attn_skip_freq) */
        char window_size[LT_PATH_MAX]; /* "" = none; "W", "W,0", "[W, 0]" or "(W, 0)": each
                                        * query sees itself and the W tokens before it */
        int window_left;               /* derived: W, or -1 without a window (not a key) */
        char window_attn_skip_freq[LT_PATH_MAX]; /* "" = every layer windowed; "N": layer
                                        * l (1-based) windowed iff l % N != 0; or a pattern of
                                        * num_layers 0/1 ("[1,0,1,0]", 1 = windowed) */
        unsigned char window_layer[LT_MOE_MAX_LAYERS]; /* derived: 1 = layer l windowed */
    } model;
    struct {
        int tensor_model_parallel_size;
        int pipeline_model_parallel_size;
        int virtual_pipeline_model_parallel_size; /* 1 = not interleaved */
        /* uneven pipeline stages (layer_split.h; Megatron-LM's names): the first /
         * last rank's layers (0 = an even share), or the embedding / loss counted
         * as a layer in an even split */
        int num_layers_in_first_pipeline_stage;
        int num_layers_in_last_pipeline_stage;
        bool account_for_embedding_in_pipeline_split;
        bool account_for_loss_in_pipeline_split;
        bool sequence_parallel;
        int expert_model_parallel_size;  /* EP: ranks the experts of a layer are spread over */
        int expert_tensor_parallel_size; /* TP inside an expert (1: each expert whole) */
        /* communication overlap (docs/parallelism.md); results are
         * bit-identical with each switch on or off */
        bool overlap_grad_reduce;  /* bucket reductions start during the last backward */
        bool overlap_param_gather; /* ZeRO >= 1: bucket gathers behind the next forward */
        bool overlap_p2p_comm;     /* pipeline receives posted ahead, waited at use */
        bool tp_comm_overlap;      /* SP all-gather/reduce-scatter in row blocks behind the GEMMs */
        int bucket_size;           /* parameters per gradient / parameter bucket */
    } parallel;
    struct {
        int micro_batch_size;
        int global_batch_size;
        long steps;
        char rampup_batch_size[LT_PATH_MAX]; /* "START INCREMENT SAMPLES" (Megatron's
                                              * --rampup-batch-size); "" = none */
        LtRampup rampup;               /* derived: rampup_batch_size parsed (not a key) */
        LtPrecision precision;
        uint64_t seed;
        LtRecompute recompute;
        LtDeviceKind device;
        int threads;                   /* CPU threads per rank, 0 = all cores / local ranks */
        int lm_head_chunk;             /* tokens per LM head / loss chunk, 0 = auto (see model.h) */
        bool cuda_graph;               /* replay each step's forward/backward as a CUDA graph */
        bool calculate_per_token_loss; /* the step's loss: mean over its tokens (true), or
                                        * over micro batches of their token means (false) */
        int max_skipped_steps;         /* consecutive non-finite steps skipped before stopping */
        double loss_spike_zscore;      /* skip a step whose loss is this many standard deviations
                                        * above the recent mean; 0 = off */
        int loss_spike_window;         /* the recent losses that mean is taken over */
    } train;
    struct {
        double lr, min_lr;
        long warmup_steps, decay_steps;
        LtLrDecayStyle lr_decay_style;
        long lr_wsd_decay_steps;       /* wsd: the last updates of decay_steps that decay */
        LtWsdDecayStyle lr_wsd_decay_style;
        double beta1, beta2, eps;
        double weight_decay;
        double clip_grad;              /* 0 disables clipping */
        int zero_stage;                /* 0, 1, 2 */
    } optimizer;
    struct {
        char train_path[LT_PATH_MAX];
        char valid_path[LT_PATH_MAX];  /* "" = no validation data */
        bool shuffle;
        int prefetch;                  /* optimizer steps prepared ahead by the loader thread */
        int eod_token;                 /* the id that ends a document; -1 = none */
        char split[LT_PATH_MAX];       /* "969,30,1": train/valid/test by documents; "" = none */
        bool eod_mask_loss;            /* no loss on predictions from an eod_token input */
        bool reset_position_ids;       /* positions restart after each eod_token */
        bool reset_attention_mask;     /* no attention across an eod_token boundary */
    } data;
    struct {
        char dir[LT_PATH_MAX];         /* "" = no checkpoints */
        long save_interval;            /* 0 = only at the end */
        char load[LT_PATH_MAX];        /* "" = start fresh; "auto" = newest in dir, if any */
        int keep_last;                 /* 0 = keep every checkpoint */
        bool async;                    /* write in a background thread while training goes on */
        int io_buffer_mib;             /* bytes each rank converts and checks at a time, saving and loading */
    } checkpoint;
    struct {
        char metrics_file[LT_PATH_MAX]; /* "" = none */
        char mllog[LT_PATH_MAX];        /* MLPerf log file; "" = none */
        char mllog_benchmark[LT_PATH_MAX]; /* gpt3 | llama31_8b | llama31_405b | gpt_oss_20b */
        char mllog_org[LT_PATH_MAX];    /* submission_org */
        char mllog_platform[LT_PATH_MAX]; /* submission_platform */
        char trace[LT_PATH_MAX];        /* Chrome trace-event file of every rank's spans; "" = none */
        int log_interval;
        double peak_tflops;            /* 0 = from the device table / measured CPU peak */
    } logging;
    struct {
        long interval;                 /* 0 = no periodic eval (eval still runs at the end if valid data) */
        int iters;                     /* global batches of validation samples per eval */
        long samples;                  /* validation sequences per eval; 0 = iters x global batch */
        long interval_samples;         /* evaluate each time this many more samples were trained */
        long start_samples;            /* with interval_samples: none before this many samples */
        double target_log_ppl;         /* stop at the first eval at or below it; 0 = none */
        int split;                     /* LtEvalSplit: which part of data.split evaluates */
    } eval;
    struct {
        LtCommBackend backend;
        double timeout_s;              /* bound on any wait for another rank; 0 = none */
    } comm;
    struct {
        int num_tokens;                /* tokens generated by `lattice sample` */
        double temperature;
        int top_k;                     /* 0 = full distribution */
        uint64_t seed;
    } sample;
    char file[LT_PATH_MAX]; /* the YAML file of the command line (MLLOG's config_filename), set
                             * by the command after lt_config_load; "" in configs loaded
                             * otherwise (checkpoints, tests); not a key */
} LtConfig;

/* Fill every key with its documented default. */
void lt_config_defaults(LtConfig *c);

/* Reset *c to defaults, load YAML file `path` (may be NULL: defaults only)
 * then apply `nover` overrides of the form "section.key=value" (later ones
 * win; the value is taken verbatim, so "data.train_path=" sets ""). Values go
 * through the same type and per-key range checks as YAML values. Returns 0 on
 * success; on error returns -1 with a one-line message in err (naming the
 * key and file:line, or "command line") and leaves *c unchanged. An empty
 * file, and a section with no keys ("train:"), are allowed. A plain YAML
 * null (empty, ~, null) sets a string key to "". Does not run cross-key
 * validation. */
int lt_config_load(LtConfig *c, const char *path, int nover, char **overrides, char *err,
                   size_t errlen);

/* Apply `nover` overrides "section.key=value" to *c as lt_config_load does
 * (same checks, later ones win). 0, or -1 with err and *c unchanged. */
int lt_config_apply_overrides(LtConfig *c, int nover, char **overrides, char *err, size_t errlen);

/* Per-key range checks again (for structs filled in code) plus cross-key
 * checks; fills derived fields: ffn_hidden_size 0 -> 4*hidden_size,
 * optimizer.decay_steps 0 -> train.steps, padded_vocab_size = vocab_size
 * rounded up to a multiple of make_vocab_size_divisible_by * tp.
 * `world_size` is the number of ranks (1 for a single process). Returns 0, or
 * -1 with a message in err and *c unchanged. Idempotent. */
int lt_config_validate(LtConfig *c, int world_size, char *err, size_t errlen);

/* Print the resolved config as YAML (all keys, grouped by section; strings
 * double-quoted, doubles in the shortest form that reads back exactly,
 * padded_vocab_size as a comment). For a *c built by lt_config_load and
 * lt_config_validate, loading the output and validating it with the same
 * world size gives a memcmp-equal struct. */
void lt_config_print(const LtConfig *c, FILE *f);

/* model.vocab_size rounded up to a multiple of make_vocab_size_divisible_by x
 * tp (validation refuses a result past INT_MAX). */
long long lt_config_padded_vocab(const LtConfig *c, int tp);

/* model.moe_layer_freq as Megatron-LM reads --moe-layer-freq: without a '['
 * an integer k as Python's int() spells it ("2", " +2", "0_2"; layer l is an
 * MoE layer iff l % k == 0, k != 0), else a Python list expression ("[1,0,1,1]",
 * "([0]*3+[1]*29)": lists, '+', '*', unary '+', parentheses; spaces allowed)
 * that must give exactly num_layers entries, each 0 or 1
 * (tests/data/megatron_moe_pattern.txt holds it to Megatron's code). Writes
 * layer[0 .. num_layers) (1 = MoE) and returns 0, or -1 with err naming the
 * key, the value and what is wrong (layer then unchanged). num_layers in
 * [1, LT_MOE_MAX_LAYERS]. */
/* model.window_size and model.window_attn_skip_freq into model.window_left
 * and model.window_layer[] (config_window.c): 0, or -1 with err naming the key
 * and what is wrong. */
int lt_window_derive(LtConfig *c, char *err, size_t errlen);
int lt_moe_layer_pattern(const char *freq, int num_layers, unsigned char *layer, char *err,
                         size_t errlen);

/* The pipeline's layer split the parallel.* keys describe (layer_split.h). */
LtLayerSplit lt_config_layer_split(const LtConfig *c);

/* YAML spellings of the enum values ("unknown" when out of range). */
const char *lt_precision_name(LtPrecision p);
const char *lt_recompute_name(LtRecompute r);
const char *lt_device_name(LtDeviceKind d);
const char *lt_comm_backend_name(LtCommBackend b);
const char *lt_attention_name(LtAttnImpl a);
const char *lt_arch_name(LtArch a);
const char *lt_rope_scaling_name(LtRopeScalingKind k);
const char *lt_lr_decay_style_name(LtLrDecayStyle s);
const char *lt_wsd_decay_style_name(LtWsdDecayStyle s);
const char *lt_softmax_type_name(LtSoftmaxType s);

#ifdef __cplusplus
}
#endif

#endif
