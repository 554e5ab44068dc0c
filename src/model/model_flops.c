/* model_flops.c - the model's FLOPs per sample from its dimensions alone
 * (metrics.c's MFU, the planner): forward and backward of every layer and the
 * LM head, and what recomputation adds, full or selective. */
#include "model.h"

/* Forward FLOPs per token of layer l, by part: the q, k, v projections
 * 2h(h + 2kv) (GPT: kv = h, 6h^2) and the output projection 2h^2; the MLP's
 * input matrices 2hF (GPT) or 4hF (SwiGLU: gate, up) and its output
 * projection 2hF; scores and weighted sum 4sh (query heads, GQA or not; 2sh
 * counting only the unmasked half), in a sliding-window layer only its band's
 * share (lt_model_window_fraction) of either. An MoE layer's MLP is the K experts each
 * token goes to (F = the expert width) and the shared expert, plus the
 * router's 2hE in mlp_in. */
typedef struct {
    double attn_proj, mlp_in, mlp_out, attn;
} LayerFlops;
double lt_model_window_fraction(const LtModelDims *d, int l) {
    const double s = d->seq_len, w = (double)d->window + 1.0;
    if (!lt_dims_window_layer(d, l) || w >= s) return 1.0;
    return (w * (w + 1.0) / 2.0 + (s - w) * w) / (s * (s + 1.0) / 2.0);
}

static LayerFlops layer_flops(const LtModelDims *d, int l, int causal) {
    const double s = d->seq_len, h = d->hidden, in = d->arch == LT_ARCH_LLAMA ? 4.0 : 2.0,
                 hd = lt_dims_head_dim(d), q = (double)d->heads * hd,
                 kv = (double)lt_dims_kv_heads(d) * hd;
    double F = d->ffn, router = 0.0;
    if (lt_dims_moe_layer(d, l)) {
        F = (double)d->moe.topk * d->moe.ffn + d->moe.shared_ffn;
        router = 2.0 * h * d->moe.experts;
    }
    return (LayerFlops){.attn_proj = 2.0 * h * (q + 2.0 * kv) + 2.0 * q * h,
                        .mlp_in = in * h * F + router,
                        .mlp_out = 2.0 * h * F,
                        .attn = (causal ? 2.0 : 4.0) * s * q * lt_model_window_fraction(d, l)};
}

double lt_model_flops_per_sample(const LtModelDims *d, int causal) {
    double layers = 0.0;
    for (int l = 0; l < d->num_layers; l++) {
        const LayerFlops f = layer_flops(d, l, causal);
        layers += f.attn_proj + f.mlp_in + f.mlp_out + f.attn;
    }
    /* and the LM head 2hV (tied or not); backward = 2x forward */
    return 3.0 * d->seq_len * (layers + 2.0 * d->hidden * d->padded_vocab);
}

double lt_model_recompute_flops_per_sample(const LtModelDims *d, int full) {
    /* full: recompute_layer's forward up to the MLP activation - all but the
     * MLP's output projection (an MoE layer recomputes its experts whole); the
     * LM head is not recomputed */
    double sum = 0.0;
    for (int l = 0; l < d->num_layers; l++) {
        const LayerFlops f = layer_flops(d, l, 0);
        const double experts_out = lt_dims_moe_layer(d, l)
                                       ? 2.0 * d->hidden * d->moe.topk * d->moe.ffn
                                       : 0.0;
        sum += full ? f.attn_proj + f.mlp_in + f.attn + experts_out : f.attn;
    }
    return (double)d->seq_len * sum;
}
