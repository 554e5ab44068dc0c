/* rope.c - RoPE inverse frequencies (with Llama 3.1's scaling) and the cos/sin
 * table. See rope.h. */
#include "rope.h"

#include <math.h>
#include <stdlib.h>

#include "common.h"

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
}

void lt_rope_table(float *cs, int T, int HD, double base, const LtRopeScaling *s) {
    const int H2 = HD / 2;
    double *f = lt_malloc((size_t)(H2 > 0 ? H2 : 1) * sizeof(double));
    lt_rope_inv_freq(f, HD, base, s);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < H2; j++) {
            const double a = (double)t * f[j];
            cs[((size_t)t * H2 + j) * 2] = (float)cos(a);
            cs[((size_t)t * H2 + j) * 2 + 1] = (float)sin(a);
        }
    free(f);
}
