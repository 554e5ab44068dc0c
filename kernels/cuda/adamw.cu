/* adamw.cu - one fused AdamW pass over a flat parameter range.
 *
 * Design note. One read of grad/m/v/master and one write of m/v/master/param
 * per element; fp32 master weights are the source of truth and the compute
 * copy (bf16 or fp32) is rewritten from them. The arithmetic follows the
 * formula in backend.h literally (same operation order as the CPU backend's
 * reading of it), so fp32 results agree to a few ulps. The gradient
 * multiplier may also come from device memory (grad_scale_dev: the clip
 * coefficient computed on the device), read once per thread. */
#include "common.cuh"

/* ======================= kernels ======================= */

// param, master, grad, m, v: (n)
template <typename T>
__global__ void adamw_kernel(T *param, float *master, const float *grad, float *m, float *v,
                             size_t n, LtAdamArgs a) {
    const float ibc1 = 1.f / a.bc1, ibc2 = 1.f / a.bc2; /* as the CPU: multiply by reciprocals */
    const float gs = a.grad_scale * (a.grad_scale_dev ? *a.grad_scale_dev : 1.f);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = grad[i] * gs;
        float mi = a.beta1 * m[i] + (1.f - a.beta1) * g;
        float vi = a.beta2 * v[i] + (1.f - a.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * ibc1, vhat = vi * ibc2;
        float w = master[i];
        w -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weight_decay * w);
        master[i] = w;
        if (param) param[i] = from_f<T>(w);
    }
}

/* ======================= launchers ======================= */

template <typename T>
static void launch_adamw(T *param, float *master, const float *grad, float *m, float *v, size_t n,
                         const LtAdamArgs *a, cudaStream_t st) {
    unsigned g = cu_blocks(n, 256);
    if (g > 65535u * 8u) g = 65535u * 8u;
    adamw_kernel<T><<<g, 256, 0, st>>>(param, master, grad, m, v, n, *a);
    CU_CHECK_LAUNCH();
}

/* ======================= op entries ======================= */

void cu_adamw(LtBackend *be, void *param, float *master, const float *grad, float *m, float *v,
              size_t n, const LtAdamArgs *a) {
    if (!n) return;
    if (cu_is_bf16(be))
        launch_adamw<bf16>((bf16 *)param, master, grad, m, v, n, a, cu_stream(be));
    else
        launch_adamw<float>((float *)param, master, grad, m, v, n, a, cu_stream(be));
}
