/* rope.c - RoPE inverse frequencies (with Llama 3.1's or YaRN's scaling) and
 * the cos/sin table. See rope.h. */
#include "rope.h"

#include <math.h>
#include <stdlib.h>

#include "common.h"

/* YaRN's pair index at which a frequency turns `rotations` times over the
 * pretraining context (transformers' find_correction_dim). */
static double yarn_pair(double rotations, int HD, double base, int orig) {
    return HD * log(orig / (rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

/* YaRN: pairs below the bound of beta_fast rotations keep their frequency
 * (they turn often enough to extrapolate), pairs above the bound of beta_slow
 * rotations are divided by factor (interpolated), and a linear ramp in the
 * pair index blends the two between the bounds. */
static void yarn_scale(double *inv_freq, int HD, double base, const LtRopeScaling *s) {
    double lo = yarn_pair(s->beta_fast, HD, base, s->original_max_position);
    double hi = yarn_pair(s->beta_slow, HD, base, s->original_max_position);
    if (s->truncate) lo = floor(lo), hi = ceil(hi);
    lo = fmax(lo, 0.0), hi = fmin(hi, HD - 1.0);
    if (lo == hi) hi += 0.001; /* transformers' guard against a zero-width ramp */
    for (int j = 0; j < HD / 2; j++) {
        const double ramp = fmin(fmax((j - lo) / (hi - lo), 0.0), 1.0);
        inv_freq[j] = inv_freq[j] / s->factor * ramp + inv_freq[j] * (1.0 - ramp);
    }
}

double lt_rope_attention_factor(const LtRopeScaling *s) {
    if (!s || s->type != LT_ROPE_SCALING_YARN) return 1.0;
    if (s->attention_factor > 0) return s->attention_factor;
    return s->factor <= 1 ? 1.0 : 0.1 * log(s->factor) + 1.0;
}

void lt_rope_inv_freq(double *inv_freq, int HD, double base, const LtRopeScaling *s) {
    const int H2 = HD / 2;
    const int llama3 = s && s->type == LT_ROPE_SCALING_LLAMA3;
    const double orig = llama3 ? (double)s->original_max_position : 0.0;
    for (int j = 0; j < H2; j++) {
        const double f = pow(base, -2.0 * j / HD);
        inv_freq[j] = f;
        if (!llama3) continue;
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen < orig / s->high_freq_factor) continue; /* high frequency: kept */
        if (wavelen > orig / s->low_freq_factor) {           /* low frequency: slowed */
            inv_freq[j] = f / s->factor;
            continue;
        }
        const double smooth =
            (orig / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
        inv_freq[j] = (1.0 - smooth) * f / s->factor + smooth * f;
    }
    if (s && s->type == LT_ROPE_SCALING_YARN) yarn_scale(inv_freq, HD, base, s);
}

void lt_rope_table(float *cs, int T, int HD, double base, const LtRopeScaling *s) {
    const int H2 = HD / 2;
    double *f = lt_malloc((size_t)(H2 > 0 ? H2 : 1) * sizeof(double));
    lt_rope_inv_freq(f, HD, base, s);
    const double mscale = lt_rope_attention_factor(s);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < H2; j++) {
            const double a = (double)t * f[j];
            cs[((size_t)t * H2 + j) * 2] = (float)(mscale * cos(a));
            cs[((size_t)t * H2 + j) * 2 + 1] = (float)(mscale * sin(a));
        }
    free(f);
}
