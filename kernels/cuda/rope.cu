/* rope.cu - rotary position embedding in place on the query and key heads of
 * qkv (B, T, NH + 2*NKV, HD), "rotate half" pairs (j, j + HD/2), forward or
 * inverse (the backward, applied to dq and dk).
 *
 * Design note. One functor run by vec.cuh's map_kernel over the pairs
 * (N, NH + NKV, HD/2): the q and k heads of a token are contiguous at the
 * start of its row, so pair i of head r = i / (HD/2) (r = token * (NH + NKV)
 * + head) sits at element n * (NH + 2*NKV) * HD + head * HD + j of qkv, with
 * its position t = n % T (or pos[n], positions restarting at each document)
 * giving the table row; the three divisions are 32-bit
 * (idx_div) whenever the pair count is below 2^32. A pack of K pairs moves
 * x[j .. j+K) and x[j+HD/2 .. j+HD/2+K) as two 16-byte accesses (bf16 x 8,
 * fp32 x 4) and its 2K cos/sin values (fp32, from cache: the table is shared
 * by every head and batch element) as 16-byte loads, when qkv and cs are
 * 16-byte aligned and HD/2 is a multiple of the pack (so no pack crosses the
 * half or the head); one pair per access otherwise. fp32 arithmetic, one
 * rounding per stored element. Each element is read and written by one
 * thread, so the op is in place and deterministic; v heads are never touched.
 *
 * Bytes per rotated element (s = sizeof(act)), also the floor: 2s (read and
 * write x), plus the table's 4 bytes per element from L2 / L1. */
#include "common.cuh"

/* ======================= kernels (map_kernel functor) ======================= */

// qkv (N, NH + 2 NKV, HD) in place: pair i of (N, NQK = NH + NKV, H2 = HD / 2) rotated by
// cs (T, H2, 2) at t = token % T or pos[token]; sgn -1 rotates backwards.
template <typename T> struct RopeMap {
    T *qkv;
    const float *cs;
    const int32_t *pos;
    size_t H2, NQK, seq, row; /* row: elements of one token, (NH + 2 NKV) * HD */
    float sgn;
    int idx32;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        const size_t r = idx_div(i, H2, idx32), j = i - r * H2; /* head r, pair j */
        const size_t n = idx_div(r, NQK, idx32), h = r - n * NQK;
        const size_t t = pos ? (size_t)pos[n] : n - idx_div(n, seq, idx32) * seq;
        T *x = qkv + n * row + h * 2 * H2 + j;
        const float *ct = cs + (t * H2 + j) * 2;
        float x0[K], x1[K], c[2 * K];
        ld_f<K>(x, x0);
        ld_f<K>(x + H2, x1);
        if constexpr (K > 1) /* 16-byte packs of the table */
            ld_f<2 * K>(ct, c);
        else /* the scalar path promises no 8-byte alignment of cs */
            c[0] = ct[0], c[1] = ct[1];
#pragma unroll
        for (int k = 0; k < K; k++) {
            const float cc = c[2 * k], sn = sgn * c[2 * k + 1], a = x0[k], b = x1[k];
            x0[k] = a * cc - b * sn;
            x1[k] = b * cc + a * sn;
        }
        st_f<K>(x, x0);
        st_f<K>(x + H2, x1);
    }
};

/* ======================= launchers ======================= */

template <typename T>
static void launch_rope(T *qkv, const float *cs, const int32_t *pos, int B, int T_, int NH,
                        int NKV, int HD, int inverse, cudaStream_t st) {
    const size_t H2 = (size_t)(HD / 2), NQK = (size_t)(NH + NKV);
    const size_t n = (size_t)B * T_ * NQK * H2;
    const int vec = cu_aligned16(qkv, cs) && H2 % LT_VEC(T) == 0;
    const RopeMap<T> op{qkv, cs, pos, H2, NQK, (size_t)T_, (size_t)(NH + 2 * NKV) * HD,
                        inverse ? -1.f : 1.f, n <= 0xffffffffu};
    launch_map<LT_VEC(T)>(op, n, vec, st);
}

/* ======================= op entries ======================= */

void cu_rope(LtBackend *be, void *qkv, const float *cs, const int32_t *pos, int B, int T, int NH,
             int NKV, int HD, int inverse) {
    if (B <= 0 || T <= 0 || NH + NKV <= 0 || HD < 2) return;
    if (HD % 2) lt_fatal("rope: head dim %d is odd", HD);
    if (cu_is_bf16(be))
        launch_rope<bf16>((bf16 *)qkv, cs, pos, B, T, NH, NKV, HD, inverse, cu_stream(be));
    else
        launch_rope<float>((float *)qkv, cs, pos, B, T, NH, NKV, HD, inverse, cu_stream(be));
}
