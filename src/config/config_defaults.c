/* config_defaults.c - lt_config_defaults: the value every key holds until a
 * config file or a section.key=value override sets it. See config.h. */
#include <string.h>

#include "config.h"

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
    c->model.add_bias_linear = LT_BIAS_AUTO;
    c->model.add_qkv_bias = false;
    c->model.softmax_type = LT_SOFTMAX_VANILLA;
    c->model.norm_epsilon = 1e-5;
    c->model.rotary_base = 500000;
    c->model.rope_scaling = LT_ROPE_NONE;
    c->model.rope_scaling_factor = 8;
    c->model.rope_low_freq_factor = 1;
    c->model.rope_high_freq_factor = 4;
    c->model.rope_original_max_position = 8192;
    c->model.rope_beta_fast = 32; /* transformers' and Megatron-Core's YaRN defaults */
    c->model.rope_beta_slow = 1;
    c->model.rope_truncate = true;
    c->model.untie_embeddings_and_output_weights = false;
    c->model.init_method_std = 0.02; /* Megatron's --init-method-std */
    c->model.glu_linear_offset = 0;
    c->model.activation_func_clamp_value = 0;
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
    c->model.moe_grouped_gemm = false;

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
