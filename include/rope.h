/* rope.h - the host side of rotary position embeddings: the inverse
 * frequencies of the rotation pairs (plain base^(-2j/HD), or with Llama 3.1's
 * frequency scaling) and the (T, HD/2, 2) cos/sin table the backends' rope op
 * reads (backend.h). Plain C, no backend: the model fills the table once and
 * uploads it.
 *
 * Llama 3.1's scaling leaves the high frequencies (wavelength 2*pi/f shorter
 * than original/high_freq_factor positions) as they are, divides the low ones
 * (wavelength longer than original/low_freq_factor) by `factor`, and blends the
 * two linearly in 1/wavelength between those bounds (both bounds belong to the
 * blend, where it equals the neighbouring band). The rule is the one of Hugging
 * Face transformers' "llama3" rope_type (_compute_llama3_parameters); here it is
 * evaluated in double rather than fp32.
 *
 * YaRN (gpt-oss, DeepSeek-V3; transformers' "yarn" rope_type, Megatron-Core's
 * YarnRotaryEmbedding) keeps the pairs that turn more than beta_fast times over
 * the pretraining context, divides by `factor` those that turn fewer than
 * beta_slow times, and ramps linearly in the pair index between the two (the
 * bounds floored and ceiled unless truncate is 0, as gpt-oss sets it). It also
 * scales cos and sin by an attention factor (0.1 ln(factor) + 1 unless given),
 * which multiplies every attention logit by its square: the table holds the
 * scaled values, so the rope op and its inverse (the backward, a transposed
 * rotation) need nothing else. */
#ifndef LT_ROPE_H
#define LT_ROPE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int type;                  /* LT_ROPE_SCALING_NONE, _LLAMA3 or _YARN */
    double factor;             /* llama3: 8 */
    double low_freq_factor;    /* llama3: 1 */
    double high_freq_factor;   /* llama3: 4 */
    int original_max_position; /* llama3: 8192; yarn: the pretraining context */
    double beta_fast, beta_slow; /* yarn: 32, 1 */
    int truncate;                /* yarn: floor/ceil the blend's bounds (1) */
    double attention_factor;     /* yarn: cos/sin multiplier; <= 0: 0.1 ln(factor) + 1 */
} LtRopeScaling;
enum { LT_ROPE_SCALING_NONE = 0, LT_ROPE_SCALING_LLAMA3 = 1, LT_ROPE_SCALING_YARN = 2 };

/* inv_freq[j] for j < HD/2: base^(-2j/HD), then Llama 3.1's scaling when s->type is
 * LLAMA3 (wavelength 2*pi/f: above original/low_freq_factor divide by factor; below
 * original/high_freq_factor keep; between, smooth = (original/wavelen - low)/(high - low),
 * f' = (1 - smooth) * f / factor + smooth * f), or YaRN's when YARN (above). Computed in
 * double. s may be NULL (no scaling). */
void lt_rope_inv_freq(double *inv_freq, int HD, double base, const LtRopeScaling *s);
/* YaRN's cos/sin multiplier of s (1 for the other scalings and for NULL). */
double lt_rope_attention_factor(const LtRopeScaling *s);
/* cs (T, HD/2, 2) fp32: cos and sin of t * inv_freq[j] (angle computed in double),
 * times lt_rope_attention_factor(s). */
void lt_rope_table(float *cs, int T, int HD, double base, const LtRopeScaling *s);

#ifdef __cplusplus
}
#endif

#endif
