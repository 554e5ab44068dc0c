/* embedding.cu - token + position embedding forward and deterministic backward.
 *
 * Design note (determinism without sorting). The op does not know V, so the
 * wte gradient uses hash buckets: G blocks, block g owns every token id with
 * id % G == g. Each block scans the whole token array in order, compacts its
 * matches stably (warp ballot + prefix popcount + per-warp offsets) into a
 * shared list, then for each match in token order thread j adds column
 * j, j+blockDim, ... of dout[n] into dwte[token]. Every (row, column) of dwte
 * is therefore touched by exactly one thread, in increasing n: the result is
 * the plain sequential sum dwte[tok[n]] += dout[n] for n = 0..N-1, bitwise
 * reproducible and independent of G. The scan costs N*G int reads, served
 * from L2. dwpe[t] accumulates over the batch b = 0..B-1 in order, one thread
 * per (t, c); with per-token positions (pos, data.reset_position_ids) dwpe is
 * the same bucketed sum as dwte with pos in place of the token ids. Token ids >= 0 are trusted to lie in [0, V); a negative id is a
 * row owned by another tensor-parallel rank: no wte term in the forward, no
 * wte gradient (never matched by any bucket). wpe == NULL (forward) drops the
 * position term; dwte / dwpe == NULL skip that gradient.
 * Rows move in 16-byte packs (bf16 x 8, fp32 x 4; the fp32 gradient rows as
 * one or two 16-byte accesses per pack) when C is a multiple of the pack and
 * every tensor is 16-byte aligned, else one element per access (the same
 * kernels with VEC = 1); a pack covers the same columns in every row, so the
 * per-element order of the sums (and the result) is the same on both paths.
 *
 * Bytes per element of a (B*T, C) activation (s = sizeof(act)): forward 3s
 * (read the wte and wpe rows, write out; wpe rows are shared by the batch and
 * mostly cached, so 2s + s/B from DRAM - the floor); dwpe 4 * 2 / B + s (read
 * and write the fp32 dwpe once, read dout), dwte 8 + s per token (read and
 * write the fp32 row of dwte, read dout; the floor for rows that repeat
 * within a batch is lower, as the sequential sum keeps them in L2), plus the
 * bucket scan's N * G token reads from L2. Before: the same bytes, as 2- or
 * 4-byte scalar accesses. */
#include "common.cuh"

#define EMB_THREADS 256

/* ======================= kernels ======================= */

// out (B*T, C) = wte[tokens] (V, C) + wpe[t] (T, C), t = n % T or pos[n]; one block per
// token row. A negative token id contributes no wte term; wpe == NULL, no position term.
template <typename T, int VEC>
__global__ void embedding_fwd_kernel(T *out, const int32_t *tokens, const T *wte, const T *wpe,
                                     const int32_t *pos, int T_, int C) {
    const size_t n = blockIdx.x;
    const int t = pos ? pos[n] : (int)(n % (size_t)T_);
    const int32_t tok = tokens[n];
    const T *e = tok >= 0 ? wte + (size_t)tok * C : nullptr;
    const T *p = wpe ? wpe + (size_t)t * C : nullptr;
    T *o = out + n * C;
    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float v[VEC] = {};
        if (e) ld_f<VEC>(e + c, v);
        if (p) add_f<VEC>(v, p + c);
        st_f<VEC>(o + c, v);
    }
}

// dwpe (T, C) += sum over b of dout (B, T, C), b ascending (map_kernel functor over T*C).
template <typename T> struct WpeBwd {
    float *dwpe;
    const T *dout;
    int B;
    size_t TC;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        float acc[K];
        ld_f<K>(dwpe + i, acc);
        for (int b = 0; b < B; b++) add_f<K>(acc, dout + (size_t)b * TC + i);
        st_f<K>(dwpe + i, acc);
    }
};

// dwte (V, C) += dout (N, C) rows gathered by tokens; block g owns ids with id % G == g.
template <typename T, int VEC>
__global__ void __launch_bounds__(EMB_THREADS)
    wte_bwd_kernel(float *dwte, const T *dout, const int32_t *tokens, int N, int C, unsigned G) {
    __shared__ int list[EMB_THREADS];
    __shared__ int wcount[EMB_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    const unsigned g = blockIdx.x;
    for (int base = 0; base < N; base += EMB_THREADS) {
        const int i = base + tid;
        const int tok = i < N ? tokens[i] : -1;
        const int match = tok >= 0 && ((unsigned)tok % G) == g; /* negative: not owned */
        const unsigned bal = __ballot_sync(0xffffffffu, match);
        if (lane == 0) wcount[wid] = __popc(bal);
        __syncthreads();
        int off = 0, total = 0;
        for (int w = 0; w < EMB_THREADS / 32; w++) {
            if (w < wid) off += wcount[w];
            total += wcount[w];
        }
        if (match) list[off + __popc(bal & ((1u << lane) - 1u))] = i;
        __syncthreads();
        for (int j = 0; j < total; j++) {
            const int n = list[j];
            const T *src = dout + (size_t)n * C;
            float *dst = dwte + (size_t)tokens[n] * C;
            for (int c = tid * VEC; c < C; c += EMB_THREADS * VEC) {
                float a[VEC];
                ld_f<VEC>(dst + c, a);
                add_f<VEC>(a, src + c);
                st_f<VEC>(dst + c, a);
            }
        }
        __syncthreads(); /* list and wcount are rewritten next round */
    }
}

/* ======================= launchers ======================= */

template <typename T, int VEC>
static void emb_fwd_launch(T *out, const int32_t *tokens, const T *wte, const T *wpe,
                           const int32_t *pos, int B, int T_, int C, cudaStream_t st) {
    const int packs = C / VEC, threads = packs >= 256 ? 256 : ((packs + 31) / 32) * 32;
    embedding_fwd_kernel<T, VEC><<<(unsigned)((size_t)B * T_), threads, 0, st>>>(out, tokens, wte,
                                                                               wpe, pos, T_, C);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_embedding_fwd(T *out, const int32_t *tokens, const T *wte, const T *wpe,
                                 const int32_t *pos, int B, int T_, int C, cudaStream_t st) {
    if (cu_aligned16(out, wte, wpe) && C % LT_VEC(T) == 0)
        emb_fwd_launch<T, LT_VEC(T)>(out, tokens, wte, wpe, pos, B, T_, C, st);
    else
        emb_fwd_launch<T, 1>(out, tokens, wte, wpe, pos, B, T_, C, st);
}

// grad (rows, C) += dout (N, C) gathered by ids (dwte by tokens, dwpe by positions).
template <typename T>
static void rows_bwd(float *grad, const T *dout, const int32_t *ids, int N, int C, int vec,
                     cudaStream_t st) {
    constexpr int PK = LT_VEC(T);
    unsigned G = (unsigned)(N / 16);
    G = G < 1 ? 1 : (G > 1024 ? 1024 : G);
    if (vec)
        wte_bwd_kernel<T, PK><<<G, EMB_THREADS, 0, st>>>(grad, dout, ids, N, C, G);
    else
        wte_bwd_kernel<T, 1><<<G, EMB_THREADS, 0, st>>>(grad, dout, ids, N, C, G);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_embedding_bwd(float *dwte, float *dwpe, const T *dout, const int32_t *tokens,
                                 const int32_t *pos, int B, int T_, int C, cudaStream_t st) {
    constexpr int PK = LT_VEC(T);
    const int N = B * T_, vec = cu_aligned16(dwte, dwpe, dout) && C % PK == 0;
    const size_t TC = (size_t)T_ * C;
    if (dwpe && pos) rows_bwd<T>(dwpe, dout, pos, N, C, vec, st);
    else if (dwpe) launch_map<PK>(WpeBwd<T>{dwpe, dout, B, TC}, TC, vec, st);
    if (dwte) rows_bwd<T>(dwte, dout, tokens, N, C, vec, st);
}

/* ======================= op entries ======================= */

void cu_embedding_fwd(LtBackend *be, void *out, const int32_t *tokens, const void *wte,
                      const void *wpe, const int32_t *pos, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    if (cu_is_bf16(be))
        launch_embedding_fwd<bf16>((bf16 *)out, tokens, (const bf16 *)wte, (const bf16 *)wpe, pos,
                                   B, T, C, cu_stream(be));
    else
        launch_embedding_fwd<float>((float *)out, tokens, (const float *)wte, (const float *)wpe,
                                    pos, B, T, C, cu_stream(be));
}

void cu_embedding_bwd(LtBackend *be, float *dwte, float *dwpe, const void *dout,
                      const int32_t *tokens, const int32_t *pos, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    if (cu_is_bf16(be))
        launch_embedding_bwd<bf16>(dwte, dwpe, (const bf16 *)dout, tokens, pos, B, T, C,
                                   cu_stream(be));
    else
        launch_embedding_bwd<float>(dwte, dwpe, (const float *)dout, tokens, pos, B, T, C,
                                    cu_stream(be));
}
