/* rope.c - rotary position embedding in place on the q and k heads of qkv
 * (B, T, NH + 2*NKV, HD), "rotate half" pairs (j, j + HD/2), angles from the
 * (T, HD/2, 2) cos/sin table (rope.h builds it). fp32 arithmetic, one rounding
 * to the act dtype per stored element. Each element is read and written by one
 * iteration, so the op is elementwise over tokens and deterministic. */
#include "cpu_ops.h"

void cpu_rope(LtBackend *be, void *qkv_, const float *cs, const int32_t *pos, int B, int T, int NH,
              int NKV, int HD, int inverse) {
    float *qkv = qkv_;
    const int bf16 = cpu_is_bf16(be);
    const int H2 = HD / 2, NQK = NH + NKV;       /* rotated heads: q then k */
    const size_t row = (size_t)(NH + 2 * NKV) * HD; /* one token's q | k | v */
    const float sgn = inverse ? -1.0f : 1.0f;
    const int N = B * T;
    if (HD % 2) lt_fatal("rope: head dim %d is odd", HD);
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (int i = 0; i < N; i++) {
        const int t = pos ? pos[i] : i % T;
        const float *ct = cs + (size_t)t * H2 * 2;
        for (int h = 0; h < NQK; h++) {
            float *x = qkv + (size_t)i * row + (size_t)h * HD, *y = x + H2;
#pragma omp simd
            for (int j = 0; j < H2; j++) {
                const float c = ct[2 * j], s = sgn * ct[2 * j + 1], x0 = x[j], x1 = y[j];
                x[j] = cpu_store(bf16, x0 * c - x1 * s);
                y[j] = cpu_store(bf16, x1 * c + x0 * s);
            }
        }
    }
}
