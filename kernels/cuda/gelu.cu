/* gelu.cu - elementwise tanh-GeLU forward/backward, plus the two elementwise
 * epilogues used when cuBLASLt cannot fuse them (bias + GeLU, dGeLU).
 *
 * Design note. Each op is a functor run by vec.cuh's map_kernel: 16-byte packs
 * (bf16 x 8, fp32 x 4) when every pointer is 16-byte aligned (and, with a
 * bias, OC is a multiple of the pack so no pack straddles two rows), one
 * element per access otherwise; the n % 8 tail element by element. Values are
 * widened to fp32, computed with the sigmoid form of the tanh approximation
 * (device.cuh, accurate expf, no cancellation for negative x) and rounded once
 * on store. In-place use (dinp == dout, pre_gelu == pre) is safe: every
 * element is read and written by the same thread.
 *
 * Bytes moved per element (s = sizeof(act): 2 bf16, 4 fp32), which is also
 * the floor for each op: gelu_fwd 2s (read inp, write out), gelu_bwd 3s (read
 * inp, dout; write dinp), bias_gelu 3s with GeLU (read pre, write pre_gelu and
 * out; the OC bias values come from cache) or 2s without. Before the packs:
 * the same bytes, but as 2- or 4-byte scalar accesses. */
#include "common.cuh"

/* ======================= kernels (map_kernel functors) ======================= */

// out (n) = gelu(inp (n))
template <typename T> struct GeluFwd {
    T *out;
    const T *inp;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        float x[K];
        ld_f<K>(inp + i, x);
#pragma unroll
        for (int k = 0; k < K; k++) x[k] = gelu_f(x[k]);
        st_f<K>(out + i, x);
    }
};

// dinp (n) = dout (n) * gelu'(inp (n))   (dinp may alias dout)
template <typename T> struct GeluBwd {
    T *dinp;
    const T *inp, *dout;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        float x[K], d[K];
        ld_f<K>(inp + i, x);
        ld_f<K>(dout + i, d);
#pragma unroll
        for (int k = 0; k < K; k++) d[k] *= gelu_grad_f(x[k]);
        st_f<K>(dinp + i, d);
    }
};

// pre (N, OC) + bias (OC) -> pre_gelu (N, OC) and out = gelu(pre_gelu); or out = pre + bias.
template <typename T> struct BiasGelu {
    T *out, *pre_gelu;
    const T *pre, *bias; /* bias may be NULL */
    size_t OC;
    int do_gelu;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        float x[K];
        ld_f<K>(pre + i, x);
        if (bias) add_f<K>(x, bias + i % OC); /* K divides OC: the pack stays in one row */
        const Pack<T, K> xr = pack_f<T, K>(x);
        if (!do_gelu) {
            st_pack<K>(out + i, xr);
            return;
        }
        st_pack<K>(pre_gelu + i, xr);
#pragma unroll
        for (int k = 0; k < K; k++) x[k] = gelu_f(to_f(xr.v[k])); /* of the stored value */
        st_f<K>(out + i, x);
    }
};

/* ======================= launchers ======================= */

template <typename T>
static void launch_gelu_fwd(T *out, const T *inp, size_t n, cudaStream_t st) {
    launch_map<LT_VEC(T)>(GeluFwd<T>{out, inp}, n, cu_aligned16(out, inp), st);
}

template <typename T>
static void launch_gelu_bwd(T *dinp, const T *inp, const T *dout, size_t n, cudaStream_t st) {
    launch_map<LT_VEC(T)>(GeluBwd<T>{dinp, inp, dout}, n, cu_aligned16(dinp, inp, dout), st);
}

template <typename T>
static void launch_bias_gelu(T *out, T *pre_gelu, const T *pre, const T *bias, int N, int OC,
                             int do_gelu, cudaStream_t st) {
    const int vec = cu_aligned16(out, pre_gelu, pre, bias) && OC % LT_VEC(T) == 0;
    const BiasGelu<T> op{out, pre_gelu, pre, bias, (size_t)OC, do_gelu};
    launch_map<LT_VEC(T)>(op, (size_t)N * OC, vec, st);
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
    if (N <= 0 || OC <= 0 || (!bias && !do_gelu && out == pre)) return;
    if (cu_is_bf16(be))
        launch_bias_gelu<bf16>((bf16 *)out, (bf16 *)pre_gelu, (const bf16 *)pre,
                               (const bf16 *)bias, N, OC, do_gelu, cu_stream(be));
    else
        launch_bias_gelu<float>((float *)out, (float *)pre_gelu, (const float *)pre,
                                (const float *)bias, N, OC, do_gelu, cu_stream(be));
}

void cu_dgelu_inplace(LtBackend *be, void *dinp, const void *gelu_pre, size_t n) {
    cu_gelu_bwd(be, dinp, gelu_pre, dinp, n);
}
