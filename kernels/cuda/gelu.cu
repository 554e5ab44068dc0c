/* gelu.cu - elementwise tanh-GeLU forward/backward, plus the two elementwise
 * epilogues used when cuBLASLt cannot fuse them (bias + GeLU, dGeLU).
 *
 * Design note. Grid-stride loops over flat indices; values are widened to
 * fp32, computed with the sigmoid form of the tanh approximation (common.cuh,
 * accurate expf, no cancellation for negative x) and rounded once on store. */
#include "common.cuh"

/* ======================= kernels ======================= */

// out (n) = gelu(inp (n))
template <typename T>
__global__ void gelu_fwd_kernel(T *out, const T *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<T>(gelu_f(to_f(inp[i])));
}

// dinp (n) = dout (n) * gelu'(inp (n))   (dinp may alias dout)
template <typename T>
__global__ void gelu_bwd_kernel(T *dinp, const T *inp, const T *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = from_f<T>(to_f(dout[i]) * gelu_grad_f(to_f(inp[i])));
}

// pre (N, OC) + bias (OC) -> pre_gelu (N, OC) and out = gelu(pre_gelu); or out = pre + bias.
template <typename T>
__global__ void bias_gelu_kernel(T *out, T *pre_gelu, const T *pre, const T *bias, size_t n,
                                 int OC, int do_gelu) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = to_f(pre[i]);
        if (bias) x += to_f(bias[i % (size_t)OC]);
        if (do_gelu) {
            T xr = from_f<T>(x);
            pre_gelu[i] = xr;
            out[i] = from_f<T>(gelu_f(to_f(xr)));
        } else {
            out[i] = from_f<T>(x);
        }
    }
}

/* ======================= launchers ======================= */

static unsigned ew_grid(size_t n) {
    unsigned g = cu_blocks(n, 256);
    return g > 65535u * 8u ? 65535u * 8u : g;
}

template <typename T>
static void launch_gelu_fwd(T *out, const T *inp, size_t n, cudaStream_t st) {
    gelu_fwd_kernel<T><<<ew_grid(n), 256, 0, st>>>(out, inp, n);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_gelu_bwd(T *dinp, const T *inp, const T *dout, size_t n, cudaStream_t st) {
    gelu_bwd_kernel<T><<<ew_grid(n), 256, 0, st>>>(dinp, inp, dout, n);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_bias_gelu(T *out, T *pre_gelu, const T *pre, const T *bias, size_t n, int OC,
                             int do_gelu, cudaStream_t st) {
    bias_gelu_kernel<T><<<ew_grid(n), 256, 0, st>>>(out, pre_gelu, pre, bias, n, OC, do_gelu);
    CU_CHECK_LAUNCH();
}

/* ======================= op entries ======================= */

void cu_gelu_fwd(LtBackend *be, void *out, const void *inp, size_t n) {
    if (!n) return;
    if (cu_is_bf16(be))
        launch_gelu_fwd<bf16>((bf16 *)out, (const bf16 *)inp, n, cu_stream(be));
    else
        launch_gelu_fwd<float>((float *)out, (const float *)inp, n, cu_stream(be));
}

void cu_gelu_bwd(LtBackend *be, void *dinp, const void *inp, const void *dout, size_t n) {
    if (!n) return;
    if (cu_is_bf16(be))
        launch_gelu_bwd<bf16>((bf16 *)dinp, (const bf16 *)inp, (const bf16 *)dout, n,
                              cu_stream(be));
    else
        launch_gelu_bwd<float>((float *)dinp, (const float *)inp, (const float *)dout, n,
                               cu_stream(be));
}

void cu_bias_gelu(LtBackend *be, void *out, void *pre_gelu, const void *pre, const void *bias,
                  int N, int OC, int do_gelu) {
    const size_t n = (size_t)N * OC;
    if (!n || (!bias && !do_gelu && out == pre)) return;
    if (cu_is_bf16(be))
        launch_bias_gelu<bf16>((bf16 *)out, (bf16 *)pre_gelu, (const bf16 *)pre,
                               (const bf16 *)bias, n, OC, do_gelu, cu_stream(be));
    else
        launch_bias_gelu<float>((float *)out, (float *)pre_gelu, (const float *)pre,
                                (const float *)bias, n, OC, do_gelu, cu_stream(be));
}

void cu_dgelu_inplace(LtBackend *be, void *dinp, const void *gelu_pre, size_t n) {
    cu_gelu_bwd(be, dinp, gelu_pre, dinp, n);
}
