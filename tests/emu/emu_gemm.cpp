/* emu_gemm.cpp - the emulated CUDA backend's GEMMs: host loops in place of
 * cuBLASLt, so whole models run on the emulated backend (test_cuda_emu's
 * `model` case). Each op follows its kernels/cuda/gemm.cu entry on the path
 * without cuBLASLt epilogues (the path fp32 always takes): the plain GEMM in
 * fp32 arithmetic, its result rounded once to the output type, then the
 * backend's own epilogue kernels - bias and GeLU (cu_bias_gelu), GeLU's
 * backward (cu_dgelu_inplace), the bias gradient's column sum (cu_colsum_add),
 * the router's dx update (cu_act_add_f32) and bias (cu_moe_router_bias_fwd, _bwd) -
 * running in the emulation. What
 * this cannot check: cuBLASLt itself (its layouts, algorithms and epilogues),
 * which the GPU op tests compare against the CPU backend on a GPU. */
#include "attention.cuh" /* and through it the emulation's common.cuh */

/* Element i of an act tensor (bf16 or fp32), as fp32. */
static inline float act_at(const LtBackend *be, const void *p, size_t i) {
    return cu_is_bf16(be) ? to_f(((const bf16 *)p)[i]) : ((const float *)p)[i];
}
static inline void act_put(const LtBackend *be, void *p, size_t i, float v) {
    if (cu_is_bf16(be))
        ((bf16 *)p)[i] = from_f<bf16>(v);
    else
        ((float *)p)[i] = v;
}

/* D (I, J) = A (I, K) . B (K, J) in fp32 sums, through accessors: a(i, k),
 * b(k, j), put(i, j, sum). */
template <typename FA, typename FB, typename FD>
static void host_gemm(int I, int J, int K, FA a, FB b, FD put) {
    for (size_t i = 0; i < (size_t)(I > 0 ? I : 0); i++)
        for (size_t j = 0; j < (size_t)(J > 0 ? J : 0); j++) {
            float acc = 0.f;
            for (size_t k = 0; k < (size_t)(K > 0 ? K : 0); k++) acc += a(i, k) * b(k, j);
            put(i, j, acc);
        }
}

void cu_linear_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp, const void *w,
                   const void *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    void *d = pre_gelu ? pre_gelu : out; /* the GEMM's result, before bias and GeLU */
    host_gemm(N, OC, C, [&](size_t n, size_t c) { return act_at(be, inp, n * C + c); },
              [&](size_t c, size_t o) { return act_at(be, w, o * C + c); },
              [&](size_t n, size_t o, float v) { act_put(be, d, n * OC + o, v); });
    if (pre_gelu || bias) cu_bias_gelu(be, out, pre_gelu, d, bias, N, OC, pre_gelu != NULL);
}

void cu_linear_bwd(LtBackend *be, void *dinp, float *dw, float *dbias, const void *dout,
                   const void *inp, const void *w, const void *gelu_pre, int N, int C, int OC) {
    if (dinp && N > 0 && C > 0) {
        host_gemm(N, C, OC, [&](size_t n, size_t o) { return act_at(be, dout, n * OC + o); },
                  [&](size_t o, size_t c) { return act_at(be, w, o * C + c); },
                  [&](size_t n, size_t c, float v) { act_put(be, dinp, n * C + c, v); });
        if (gelu_pre && OC > 0) cu_dgelu_inplace(be, dinp, gelu_pre, (size_t)N * C);
    }
    if (dw && N > 0 && C > 0 && OC > 0)
        host_gemm(OC, C, N, [&](size_t o, size_t n) { return act_at(be, dout, n * OC + o); },
                  [&](size_t n, size_t c) { return act_at(be, inp, n * C + c); },
                  [&](size_t o, size_t c, float v) { dw[o * C + c] += v; });
    if (dbias && N > 0 && OC > 0) cu_colsum_add(be, dbias, dout, N, OC);
}

void cu_moe_router_fwd(LtBackend *be, float *logits, const void *x, const void *w,
                       const void *bias, int N, int C, int E) {
    host_gemm(N, E, C, [&](size_t n, size_t c) { return act_at(be, x, n * C + c); },
              [&](size_t c, size_t e) { return act_at(be, w, e * C + c); },
              [&](size_t n, size_t e, float v) { logits[n * E + e] = v; });
    if (bias) cu_moe_router_bias_fwd(be, logits, bias, N, E);
}

void cu_moe_router_bwd(LtBackend *be, void *dx, float *dw, float *dbias, const float *dlogits,
                       const void *x, const void *w, int N, int C, int E) {
    if (N <= 0 || E <= 0) return;
    if (dbias) cu_moe_router_bias_bwd(be, dbias, dlogits, N, E);
    if (C <= 0) return;
    if (dx) { /* the fp32 product, then added to dx with one rounding, as on a GPU */
        float *t = (float *)cu_scratch(be, (size_t)N * C * sizeof(float));
        host_gemm(N, C, E, [&](size_t n, size_t e) { return dlogits[n * E + e]; },
                  [&](size_t e, size_t c) { return act_at(be, w, e * C + c); },
                  [&](size_t n, size_t c, float v) { t[n * C + c] = v; });
        cu_act_add_f32(be, dx, t, (size_t)N * C);
    }
    if (dw)
        host_gemm(E, C, N, [&](size_t e, size_t n) { return dlogits[n * E + e]; },
                  [&](size_t n, size_t c) { return act_at(be, x, n * C + c); },
                  [&](size_t e, size_t c, float v) { dw[e * C + c] += v; });
}

/* The experts' grouped GEMMs (cuBLAS's grouped call on a GPU): group by
 * group through the two entries above, as gemm.cu does wherever the grouped
 * call is not taken. */
static const void *group_rows(const LtBackend *be, const void *p, const int *off, int g,
                              int cols) {
    return p ? (const char *)p + (size_t)off[g] * (size_t)cols * be->act_size : NULL;
}

void cu_linear_group_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp,
                         const void *const *w, const void *const *bias, const int *off, int G,
                         int C, int OC) {
    for (int g = 0; g < G; g++)
        if (off[g + 1] > off[g])
            cu_linear_fwd(be, (void *)group_rows(be, out, off, g, OC),
                          (void *)group_rows(be, pre_gelu, off, g, OC),
                          group_rows(be, inp, off, g, C), w[g], bias ? bias[g] : NULL,
                          off[g + 1] - off[g], C, OC);
}

void cu_linear_group_bwd(LtBackend *be, void *dinp, float *const *dw, float *const *dbias,
                         const void *dout, const void *inp, const void *const *w,
                         const void *gelu_pre, const int *off, int G, int C, int OC) {
    for (int g = 0; g < G; g++)
        if (off[g + 1] > off[g])
            cu_linear_bwd(be, (void *)group_rows(be, dinp, off, g, C), dw ? dw[g] : NULL,
                          dbias ? dbias[g] : NULL, group_rows(be, dout, off, g, OC),
                          group_rows(be, inp, off, g, C), w[g],
                          dinp ? group_rows(be, gelu_pre, off, g, C) : NULL,
                          off[g + 1] - off[g], C, OC);
}
