/* rope.c - rotary embedding frequencies and their cos/sin table. */
#include "rope.h"

#include <math.h>
#include <stdlib.h>

#include "common.h"

void lt_rope_inv_freq(double *inv_freq, int HD, double base, const LtRopeScaling *s) {
    const double two_pi = 6.283185307179586;
    for (int j = 0; j < HD / 2; j++) {
        double f = pow(base, -2.0 * j / HD);
        if (s && s->type == LT_ROPE_SCALING_LLAMA3) {
            const double orig = s->original_max_position, wavelen = two_pi / f;
            const double low_wavelen = orig / s->low_freq_factor;
            const double high_wavelen = orig / s->high_freq_factor;
            if (wavelen > low_wavelen) {
                f /= s->factor;
            } else if (wavelen >= high_wavelen) {
                const double smooth = (orig / wavelen - s->low_freq_factor) /
                                      (s->high_freq_factor - s->low_freq_factor);
                f = (1.0 - smooth) * f / s->factor + smooth * f;
            }
        }
        inv_freq[j] = f;
    }
}

void lt_rope_table(float *cs, int T, int HD, double base, const LtRopeScaling *s) {
    const int half = HD / 2;
    double *f = lt_malloc(sizeof(double) * (size_t)(half > 0 ? half : 1));
    lt_rope_inv_freq(f, HD, base, s);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < half; j++) {
            const double a = (double)t * f[j];
            cs[((size_t)t * half + j) * 2] = (float)cos(a);
            cs[((size_t)t * half + j) * 2 + 1] = (float)sin(a);
        }
    free(f);
}
