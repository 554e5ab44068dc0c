/* rope.h - rotary position embedding tables (host side). */
#ifndef LT_ROPE_H
#define LT_ROPE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int type;                  /* LT_ROPE_SCALING_NONE or LT_ROPE_SCALING_LLAMA3 */
    double factor;             /* llama3: 8 */
    double low_freq_factor;    /* llama3: 1 */
    double high_freq_factor;   /* llama3: 4 */
    int original_max_position; /* llama3: 8192 */
} LtRopeScaling;
enum { LT_ROPE_SCALING_NONE = 0, LT_ROPE_SCALING_LLAMA3 = 1 };

void lt_rope_inv_freq(double *inv_freq, int HD, double base, const LtRopeScaling *s);
void lt_rope_table(float *cs, int T, int HD, double base, const LtRopeScaling *s);

#ifdef __cplusplus
}
#endif

#endif
