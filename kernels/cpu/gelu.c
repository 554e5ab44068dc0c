/* gelu.c - elementwise tanh-approximation GeLU (formulas in cpu_ops.h). */
#include "cpu_ops.h"

void cpu_gelu_fwd(LtBackend *be, void *out_, const void *inp_, size_t n) {
    float *out = out_;
    const float *inp = inp_;
    const int bf16 = cpu_is_bf16(be);
    long long nn = (long long)n;
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be))
    for (long long i = 0; i < nn; i++) out[i] = cpu_store(bf16, cpu_gelu1(inp[i]));
}

void cpu_gelu_bwd(LtBackend *be, void *dinp_, const void *inp_, const void *dout_, size_t n) {
    float *dinp = dinp_;
    const float *inp = inp_, *dout = dout_;
    const int bf16 = cpu_is_bf16(be);
    long long nn = (long long)n;
#pragma omp parallel for simd schedule(static) num_threads(cpu_nthreads(be))
    for (long long i = 0; i < nn; i++)
        dinp[i] = cpu_store(bf16, dout[i] * cpu_gelu_grad1(inp[i]));
}
