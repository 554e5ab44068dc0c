/* adamw.cu - one fused AdamW pass over a flat parameter range.
 *
 * Design note. One read of grad/m/v/master and one write of m/v/master/param
 * per element; fp32 master weights are the source of truth and the compute
 * copy (bf16 or fp32) is rewritten from them. The arithmetic follows the
 * formula in backend.h literally (same operation order as the CPU backend's
 * reading of it), so fp32 results agree to a few ulps. The gradient
 * multiplier may also come from device memory (grad_scale_dev: the clip
 * coefficient computed on the device), read once per pack. The step is a functor
 * run by vec.cuh's map_kernel over packs of 4 elements (16-byte fp32 accesses;
 * the bf16 param as one 8-byte store) when every pointer is 16-byte aligned,
 * one element per access otherwise; the n % 4 tail element by element.
 *
 * Bytes per element: 16 read (grad, m, v, master) + 12 written (m, v, master)
 * + s for param (2 bf16, 4 fp32): 30 / 32 - the floor. Before: the same
 * bytes as 4- and 2-byte scalar accesses. */
#include "common.cuh"

#define ADAM_VEC 4 /* fp32 x 4: one 16-byte access per fp32 array */

/* ======================= kernels (map_kernel functor) ======================= */

// param, master, grad, m, v: (n); param may be NULL (no compute copy).
template <typename T> struct AdamStep {
    T *param;
    float *master;
    const float *grad;
    float *m, *v;
    LtAdamArgs a;
    float ibc1, ibc2; /* 1 / bias corrections: multiplied, as the CPU does */
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        float g[K], mi[K], vi[K], w[K];
        ld_f<K>(grad + i, g);
        ld_f<K>(m + i, mi);
        ld_f<K>(v + i, vi);
        ld_f<K>(master + i, w);
        const float dev = a.grad_scale_dev ? *a.grad_scale_dev : 1.f;
        if (dev < 0.f) return; /* a skipped step: nothing changes */
        const float scale = a.grad_scale * dev;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const float gs = g[k] * scale;
            mi[k] = a.beta1 * mi[k] + (1.f - a.beta1) * gs;
            vi[k] = a.beta2 * vi[k] + (1.f - a.beta2) * gs * gs;
            const float mhat = mi[k] * ibc1, vhat = vi[k] * ibc2;
            w[k] -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weight_decay * w[k]);
        }
        st_f<K>(m + i, mi);
        st_f<K>(v + i, vi);
        st_f<K>(master + i, w);
        if (param) st_f<K>(param + i, w);
    }
};

/* ======================= launchers ======================= */

template <typename T>
static void launch_adamw(T *param, float *master, const float *grad, float *m, float *v, size_t n,
                         const LtAdamArgs *a, cudaStream_t st) {
    const AdamStep<T> op{param, master, grad, m, v, *a, 1.f / a->bc1, 1.f / a->bc2};
    launch_map<ADAM_VEC>(op, n, cu_aligned16(param, master, grad, m, v), st);
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
