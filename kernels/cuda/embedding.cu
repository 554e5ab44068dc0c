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
 * per (t, c). Token ids >= 0 are trusted to lie in [0, V); a negative id is a
 * row owned by another tensor-parallel rank: no wte term in the forward, no
 * wte gradient (never matched by any bucket). wpe == NULL (forward) drops the
 * position term; dwte / dwpe == NULL skip that gradient. */
#include "common.cuh"

#define EMB_THREADS 256

/* ======================= kernels ======================= */

// out (B*T, C) = wte[tokens] (V, C) + wpe[t] (T, C); one block per token row.
// A negative token id contributes no wte term; wpe == NULL, no position term.
template <typename T>
__global__ void embedding_fwd_kernel(T *out, const int32_t *tokens, const T *wte, const T *wpe,
                                     int T_, int C) {
    const size_t n = blockIdx.x;
    const int t = (int)(n % (size_t)T_);
    const int32_t tok = tokens[n];
    const T *e = tok >= 0 ? wte + (size_t)tok * C : nullptr;
    const T *p = wpe ? wpe + (size_t)t * C : nullptr;
    T *o = out + n * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = 0.f;
        if (e) v = to_f(e[c]);
        if (p) v += to_f(p[c]);
        o[c] = from_f<T>(v);
    }
}

// dwpe (T, C) += sum over b of dout (B, T, C); one thread per (t, c), b ascending.
template <typename T>
__global__ void wpe_bwd_kernel(float *dwpe, const T *dout, int B, int T_, int C) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t TC = (size_t)T_ * C;
    if (i >= TC) return;
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += to_f(dout[(size_t)b * TC + i]);
    dwpe[i] = acc;
}

// dwte (V, C) += dout (N, C) rows gathered by tokens; block g owns ids with id % G == g.
template <typename T>
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
            for (int c = tid; c < C; c += EMB_THREADS) dst[c] += to_f(src[c]);
        }
        __syncthreads(); /* list and wcount are rewritten next round */
    }
}

/* ======================= launchers ======================= */

template <typename T>
static void launch_embedding_fwd(T *out, const int32_t *tokens, const T *wte, const T *wpe, int B,
                                 int T_, int C, cudaStream_t st) {
    const int threads = C >= 256 ? 256 : ((C + 31) / 32) * 32;
    embedding_fwd_kernel<T><<<(unsigned)((size_t)B * T_), threads, 0, st>>>(out, tokens, wte, wpe,
                                                                           T_, C);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_embedding_bwd(float *dwte, float *dwpe, const T *dout, const int32_t *tokens,
                                 int B, int T_, int C, cudaStream_t st) {
    const int N = B * T_;
    if (dwpe) {
        wpe_bwd_kernel<T><<<cu_blocks((size_t)T_ * C, 256), 256, 0, st>>>(dwpe, dout, B, T_, C);
        CU_CHECK_LAUNCH();
    }
    if (dwte) {
        unsigned G = (unsigned)(N / 16);
        if (G < 1) G = 1;
        if (G > 1024) G = 1024;
        wte_bwd_kernel<T><<<G, EMB_THREADS, 0, st>>>(dwte, dout, tokens, N, C, G);
        CU_CHECK_LAUNCH();
    }
}

/* ======================= op entries ======================= */

void cu_embedding_fwd(LtBackend *be, void *out, const int32_t *tokens, const void *wte,
                      const void *wpe, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    if (cu_is_bf16(be))
        launch_embedding_fwd<bf16>((bf16 *)out, tokens, (const bf16 *)wte, (const bf16 *)wpe, B,
                                   T, C, cu_stream(be));
    else
        launch_embedding_fwd<float>((float *)out, tokens, (const float *)wte, (const float *)wpe,
                                    B, T, C, cu_stream(be));
}

void cu_embedding_bwd(LtBackend *be, float *dwte, float *dwpe, const void *dout,
                      const int32_t *tokens, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    if (cu_is_bf16(be))
        launch_embedding_bwd<bf16>(dwte, dwpe, (const bf16 *)dout, tokens, B, T, C,
                                   cu_stream(be));
    else
        launch_embedding_bwd<float>(dwte, dwpe, (const float *)dout, tokens, B, T, C,
                                    cu_stream(be));
}
