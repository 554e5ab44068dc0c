/* attention_simt.cu - generic causal flash attention on CUDA cores.
 *
 * Design note. Used for fp32 acts, for head dims the tensor-core path does
 * not cover (any HD <= 256), for unaligned tensors, and on request
 * (LT_CUDA_ATTN=simt). Tiles of 32 queries x 32 keys live in shared memory as
 * fp32 (rows padded to an odd stride so that lane-per-key reads of K/V rows
 * are conflict-free); 8 warps per block, each owning 4 query rows (or 4 keys
 * in the dK/dV accumulation).
 * Forward: lane j computes the score of key j for the warp's 4 rows, the
 * online softmax runs on warp shuffles, P goes through shared memory to the
 * P.V product where lanes own head-dim columns. Writes out and lse.
 * Backward (no atomics, deterministic): P = exp2(s2 - lse2) is recomputed;
 * dS = P * (dP - D) with D = rowsum(dO * O) precomputed. Kernel dkdv: a block
 * owns a key tile and loops over the query tiles at or after it,
 * accumulating dK, dV in registers. Kernel dq: a block owns a query tile and
 * loops over the key tiles up to the diagonal. Each output element is
 * written by exactly one thread.
 * Grouped K/V (G = NH / NKV query heads per K/V head): forward and dq load
 * their query head's group's K/V tiles; dkdv's grid is (key tiles, B*NKV)
 * and its block walks the group's query heads in order, each over its query
 * tiles, adding into the same register accumulators: the group's sum in a
 * fixed order, no atomics, no partial buffers (G == 1: the multi-head
 * kernel, same order, same bits). Forward and dq keep the (tiles, B*NH)
 * grid and divide for the K/V head: the tensor-core path's (tiles, G, B*NKV)
 * grid made ptxas spill this file's dq kernel on sm_90.
 * Packed documents (kstart): each row also masks keys before its document's
 * first token; forward and dq start at the key tile of their first row's
 * document, dkdv stops at the first query tile whose first row's document
 * starts after its key tile (kstart is non-decreasing along a sequence). */
#include "attention.cuh"

#define AS_TILE 32
#define AS_THREADS 256
#define AS_ROWS 4 /* rows (or keys) per warp */
#define AS_PS 33  /* padded stride of the P / dS tiles */
/* Blocks per SM promised to ptxas: none (its own choice, 80 registers or fewer) without
 * documents; 2 (up to 128 registers) for the document variants, which it otherwise held
 * near 80 registers with a few bytes spilled (tests/test_resource_usage.sh). The
 * forward without documents promises 3 (up to 80): left to itself, ptxas held the fp32
 * HD <= 64 variant at 64 registers with 4 bytes spilled once the attention sink joined
 * its epilogue. */
#define AS_MIN_BLOCKS(DOCS) ((DOCS) ? 2 : 0)
#define AS_FWD_MIN_BLOCKS(DOCS) ((DOCS) ? 2 : 3)

/* ======================= kernels ======================= */

// Load rows [t0, t0+32) of one q/k/v slice (or of dout when which < 0) into dst (32, stride)
// fp32; h is a query head for q and dout, a key/value head for k and v.
template <typename T>
__device__ __forceinline__ void simt_load_tile(float *dst, int stride, const T *src, int b, int h,
                                               int which, int t0, int T_, int NH, int NKV, int HD) {
    for (int i = threadIdx.x; i < AS_TILE * HD; i += AS_THREADS) {
        const int r = i / HD, d = i - r * HD, t = t0 + r;
        float v = 0.f;
        if (t < T_) {
            size_t o = which < 0 ? out_off(b, t, h, T_, NH, HD)
                                 : qkv_off(b, t, h, which, T_, NH, NKV, HD);
            v = to_f(src[o + d]);
        }
        dst[r * stride + d] = v;
    }
}

// Scores of the warp's rows (AS_ROWS) against key `lane`, and (if dOs) dP likewise.
// Writes P (masked, normalized by lse) and dS = P (dP - D) to Ps / dSs rows of this warp.
// S_s: the rows' document starts (simt_load_rowstats; read only with DOCS).
template <bool DOCS>
__device__ __forceinline__ void simt_bwd_phase1(const float *Qs, const float *dOs, const float *Ks,
                                                const float *Vs, int KS, int HD,
                                                const float *lse_s, const float *D_s,
                                                const int *S_s, int q0, int kt0, int T_,
                                                float sl2, float *Ps, float *dSs) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float s[AS_ROWS], dp[AS_ROWS];
#pragma unroll
    for (int i = 0; i < AS_ROWS; i++) s[i] = dp[i] = 0.f;
    for (int d = 0; d < HD; d++) {
        const float kv = Ks[lane * KS + d], vv = Vs[lane * KS + d];
#pragma unroll
        for (int i = 0; i < AS_ROWS; i++) {
            s[i] += Qs[(w * AS_ROWS + i) * KS + d] * kv;
            dp[i] += dOs[(w * AS_ROWS + i) * KS + d] * vv;
        }
    }
    const int kj = kt0 + lane;
#pragma unroll
    for (int i = 0; i < AS_ROWS; i++) {
        const int r = w * AS_ROWS + i, qi = q0 + r;
        const bool masked = kj > qi || qi >= T_ || kj >= T_ || (DOCS && kj < S_s[r]);
        const float p = masked ? 0.f : exp2f(s[i] * sl2 - lse_s[r]);
        if (Ps) Ps[r * AS_PS + lane] = p;
        dSs[r * AS_PS + lane] = p * (dp[i] - D_s[r]);
    }
}

// qkv (B,T,NH+2*NKV,HD) -> out (B,T,NH,HD), lse (B,NH,T). grid (ceil(T/32), B*NH); query
// head h uses K/V head h / G.
template <typename T, int NCH, bool DOCS>
__global__ void __launch_bounds__(AS_THREADS, AS_FWD_MIN_BLOCKS(DOCS))
    attn_simt_fwd_kernel(T *out, float *lse, const T *qkv, const T *sink, const int32_t *kstart,
                         int T_, int NKV, int G, int HD, float sl2) {
    extern __shared__ float as_sm[];
    const int KS = HD | 1;
    float *Qs = as_sm, *Ks = Qs + AS_TILE * KS, *Vs = Ks + AS_TILE * KS, *Ps = Vs + AS_TILE * HD;
    const int NH = NKV * G, bh = blockIdx.y, b = bh / NH, h = bh - b * NH, hk = h / G;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * AS_TILE; /* heaviest tiles first */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    simt_load_tile(Qs, KS, qkv, b, h, 0, q0, T_, NH, NKV, HD);
    float o[AS_ROWS][NCH], m[AS_ROWS], l[AS_ROWS];
#pragma unroll
    for (int i = 0; i < AS_ROWS; i++) {
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int k = 0; k < NCH; k++) o[i][k] = 0.f;
    }
    const int qlast = min(q0 + AS_TILE - 1, T_ - 1);
    const int32_t *ksb = DOCS ? kstart + (size_t)b * T_ : nullptr;
    int *S_s = (int *)(Ps + AS_TILE * AS_PS); /* documents: each row's first visible key */
    if (DOCS)
        for (int r = threadIdx.x; r < AS_TILE; r += AS_THREADS) S_s[r] = ksb[min(q0 + r, T_ - 1)];
    for (int kt0 = DOCS ? ksb[q0] / AS_TILE * AS_TILE : 0; kt0 <= qlast; kt0 += AS_TILE) {
        __syncthreads(); /* previous K/V tile fully consumed */
        simt_load_tile(Ks, KS, qkv, b, hk, 1, kt0, T_, NH, NKV, HD);
        simt_load_tile(Vs, HD, qkv, b, hk, 2, kt0, T_, NH, NKV, HD);
        __syncthreads();
        float s[AS_ROWS];
#pragma unroll
        for (int i = 0; i < AS_ROWS; i++) s[i] = 0.f;
        for (int d = 0; d < HD; d++) {
            const float kv = Ks[lane * KS + d];
#pragma unroll
            for (int i = 0; i < AS_ROWS; i++) s[i] += Qs[(w * AS_ROWS + i) * KS + d] * kv;
        }
        const int kj = kt0 + lane;
#pragma unroll
        for (int i = 0; i < AS_ROWS; i++) {
            const int r = w * AS_ROWS + i, qi = q0 + r;
            const float v = kj > qi || (DOCS && kj < S_s[r]) ? -INFINITY : s[i] * sl2; /* kj>=T: >qi */
            const float mn = fmaxf(m[i], warp_max(v));
            const float mref = mn == -INFINITY ? 0.f : mn;
            const float alpha = exp2f(m[i] - mref);
            const float p = exp2f(v - mref);
            l[i] = l[i] * alpha + warp_sum(p);
            m[i] = mn;
            Ps[r * AS_PS + lane] = p;
#pragma unroll
            for (int k = 0; k < NCH; k++) o[i][k] *= alpha;
        }
        __syncwarp();
        for (int c = 0; c < AS_TILE; c++) {
            float pc[AS_ROWS];
#pragma unroll
            for (int i = 0; i < AS_ROWS; i++) pc[i] = Ps[(w * AS_ROWS + i) * AS_PS + c];
#pragma unroll
            for (int k = 0; k < NCH; k++) {
                const int d = lane + 32 * k;
                if (d < HD) {
                    const float vv = Vs[c * HD + d];
#pragma unroll
                    for (int i = 0; i < AS_ROWS; i++) o[i][k] += pc[i] * vv;
                }
            }
        }
    }
    /* the sink's logit read once, before the rows' epilogue (the rows' o stay live) */
    const float slogit = sink ? to_f(sink[h]) : 0.f;
#pragma unroll
    for (int i = 0; i < AS_ROWS; i++) {
        const int qi = q0 + w * AS_ROWS + i;
        if (qi >= T_) continue;
        const float corr = sink ? att_sink_join(slogit, &m[i], &l[i]) : 1.f;
        const float inv = corr / l[i];
        T *orow = out + out_off(b, qi, h, T_, NH, HD);
#pragma unroll
        for (int k = 0; k < NCH; k++) {
            const int d = lane + 32 * k;
            if (d < HD) orow[d] = from_f<T>(o[i][k] * inv);
        }
        if (lane == 0) lse[(size_t)bh * T_ + qi] = (m[i] + log2f(l[i])) * ATT_LN2;
    }
}

// Shared-memory layout of both backward kernels: Q, dO, K, V (32, KS) | P, dS (32, 33) |
// lse2, D, document starts (32).
#define AS_BWD_SMEM(HD) ((size_t)(4 * AS_TILE * ((HD) | 1) + 2 * AS_TILE * AS_PS + 3 * AS_TILE) * 4)

// Load lse * log2(e), D and the document start (0 without documents: ksb NULL) of query
// rows [q0, q0+32) (zeros past T).
__device__ __forceinline__ void simt_load_rowstats(float *lse_s, float *D_s, int *S_s,
                                                   const float *lse, const float *Dbuf,
                                                   const int32_t *ksb, size_t bh, int q0,
                                                   int T_) {
    for (int r = threadIdx.x; r < AS_TILE; r += AS_THREADS) {
        const int qi = q0 + r;
        lse_s[r] = qi < T_ ? lse[bh * T_ + qi] * ATT_LOG2E : 0.f;
        D_s[r] = qi < T_ ? Dbuf[bh * T_ + qi] : 0.f;
        if (ksb) S_s[r] = qi < T_ ? ksb[qi] : 0;
    }
}


// dK, dV for one key tile of one (b, key/value head), summed over the group's query heads:
// dqkv k and v slices. grid (ceil(T/32), B*NKV).
template <typename T, int NCH, bool DOCS>
__global__ void __launch_bounds__(AS_THREADS, AS_MIN_BLOCKS(DOCS))
    attn_simt_dkdv_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse,
                          const float *Dbuf, const int32_t *kstart, int T_, int NKV, int G, int HD,
                          float sl2, float scale) {
    extern __shared__ float as_sm[];
    const int KS = HD | 1;
    float *Qs = as_sm, *dOs = Qs + AS_TILE * KS, *Ks = dOs + AS_TILE * KS, *Vs = Ks + AS_TILE * KS;
    float *Ps = Vs + AS_TILE * KS, *dSs = Ps + AS_TILE * AS_PS, *lse_s = dSs + AS_TILE * AS_PS;
    float *D_s = lse_s + AS_TILE;
    int *S_s = (int *)(D_s + AS_TILE);
    const int bg = blockIdx.y, b = bg / NKV, hk = bg - b * NKV, NH = NKV * G;
    const int kt0 = blockIdx.x * AS_TILE;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    simt_load_tile(Ks, KS, qkv, b, hk, 1, kt0, T_, NH, NKV, HD);
    simt_load_tile(Vs, KS, qkv, b, hk, 2, kt0, T_, NH, NKV, HD);
    float dk[AS_ROWS][NCH], dv[AS_ROWS][NCH];
#pragma unroll
    for (int j = 0; j < AS_ROWS; j++)
#pragma unroll
        for (int k = 0; k < NCH; k++) dk[j][k] = dv[j][k] = 0.f;
    const int32_t *ksb = DOCS ? kstart + (size_t)b * T_ : nullptr;
    __shared__ int qend_s; /* later rows: later documents (shared: a register less) */
    if (DOCS && threadIdx.x == 0) qend_s = att_rows_from(ksb, kt0, T_, kt0 + AS_TILE);
    if (DOCS) __syncthreads();
    for (int h = hk * G; h < (hk + 1) * G; h++) /* the group's query heads, in order */
    for (int q0 = kt0; q0 < (DOCS ? qend_s : T_); q0 += AS_TILE) {
        __syncthreads(); /* previous Q/dO/P/dS tiles fully consumed */
        simt_load_tile(Qs, KS, qkv, b, h, 0, q0, T_, NH, NKV, HD);
        simt_load_tile(dOs, KS, dout, b, h, -1, q0, T_, NH, NKV, HD);
        simt_load_rowstats(lse_s, D_s, S_s, lse, Dbuf, ksb, (size_t)b * NH + h, q0, T_);
        __syncthreads();
        simt_bwd_phase1<DOCS>(Qs, dOs, Ks, Vs, KS, HD, lse_s, D_s, S_s, q0, kt0, T_, sl2, Ps, dSs);
        __syncthreads();
        for (int r = 0; r < AS_TILE; r++) {
#pragma unroll
            for (int k = 0; k < NCH; k++) {
                const int d = lane + 32 * k;
                if (d < HD) {
                    const float dov = dOs[r * KS + d], qv = Qs[r * KS + d];
#pragma unroll
                    for (int j = 0; j < AS_ROWS; j++) {
                        const int c = w * AS_ROWS + j;
                        dv[j][k] += Ps[r * AS_PS + c] * dov;
                        dk[j][k] += dSs[r * AS_PS + c] * qv;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < AS_ROWS; j++) {
        const int kj = kt0 + w * AS_ROWS + j;
        if (kj >= T_) continue;
        T *dkrow = dqkv + qkv_off(b, kj, hk, 1, T_, NH, NKV, HD);
        T *dvrow = dqkv + qkv_off(b, kj, hk, 2, T_, NH, NKV, HD);
#pragma unroll
        for (int k = 0; k < NCH; k++) {
            const int d = lane + 32 * k;
            if (d < HD) {
                dkrow[d] = from_f<T>(dk[j][k] * scale);
                dvrow[d] = from_f<T>(dv[j][k]);
            }
        }
    }
}

// dQ for one query tile of one (b, h): dqkv q slice. grid (ceil(T/32), B*NH).
template <typename T, int NCH, bool DOCS>
__global__ void __launch_bounds__(AS_THREADS, AS_MIN_BLOCKS(DOCS))
    attn_simt_dq_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dbuf,
                        const int32_t *kstart, int T_, int NKV, int G, int HD, float sl2,
                        float scale) {
    extern __shared__ float as_sm[];
    const int KS = HD | 1;
    float *Qs = as_sm, *dOs = Qs + AS_TILE * KS, *Ks = dOs + AS_TILE * KS, *Vs = Ks + AS_TILE * KS;
    float *dSs = Vs + AS_TILE * KS + AS_TILE * AS_PS, *lse_s = dSs + AS_TILE * AS_PS;
    float *D_s = lse_s + AS_TILE;
    int *S_s = (int *)(D_s + AS_TILE);
    const int NH = NKV * G, bh = blockIdx.y, b = bh / NH, h = bh - b * NH, hk = h / G;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * AS_TILE;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    simt_load_tile(Qs, KS, qkv, b, h, 0, q0, T_, NH, NKV, HD);
    simt_load_tile(dOs, KS, dout, b, h, -1, q0, T_, NH, NKV, HD);
    const int32_t *ksb = DOCS ? kstart + (size_t)b * T_ : nullptr;
    simt_load_rowstats(lse_s, D_s, S_s, lse, Dbuf, ksb, bh, q0, T_);
    const int kbeg = DOCS ? ksb[q0] / AS_TILE * AS_TILE : 0; /* the first row's document */
    float dq[AS_ROWS][NCH];
#pragma unroll
    for (int i = 0; i < AS_ROWS; i++)
#pragma unroll
        for (int k = 0; k < NCH; k++) dq[i][k] = 0.f;
    const int qlast = min(q0 + AS_TILE - 1, T_ - 1);
    for (int kt0 = kbeg; kt0 <= qlast; kt0 += AS_TILE) {
        __syncthreads(); /* previous K tile fully consumed */
        simt_load_tile(Ks, KS, qkv, b, hk, 1, kt0, T_, NH, NKV, HD);
        simt_load_tile(Vs, KS, qkv, b, hk, 2, kt0, T_, NH, NKV, HD);
        __syncthreads();
        simt_bwd_phase1<DOCS>(Qs, dOs, Ks, Vs, KS, HD, lse_s, D_s, S_s, q0, kt0, T_, sl2, NULL,
                              dSs);
        __syncwarp(); /* dS rows of this warp were written by this warp */
        for (int c = 0; c < AS_TILE; c++) {
            float dsc[AS_ROWS];
#pragma unroll
            for (int i = 0; i < AS_ROWS; i++) dsc[i] = dSs[(w * AS_ROWS + i) * AS_PS + c];
#pragma unroll
            for (int k = 0; k < NCH; k++) {
                const int d = lane + 32 * k;
                if (d < HD) {
                    const float kv = Ks[c * KS + d];
#pragma unroll
                    for (int i = 0; i < AS_ROWS; i++) dq[i][k] += dsc[i] * kv;
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < AS_ROWS; i++) {
        const int qi = q0 + w * AS_ROWS + i;
        if (qi >= T_) continue;
        T *dqrow = dqkv + qkv_off(b, qi, h, 0, T_, NH, NKV, HD);
#pragma unroll
        for (int k = 0; k < NCH; k++) {
            const int d = lane + 32 * k;
            if (d < HD) dqrow[d] = from_f<T>(dq[i][k] * scale);
        }
    }
}

/* ======================= launchers ======================= */

static void set_smem(const void *fn, size_t smem, int optin) {
    if (smem > (size_t)optin)
        lt_fatal("attention (SIMT): needs %zu bytes of shared memory, device allows %d", smem, optin);
    if (smem > 48 * 1024)
        CU_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

template <typename T, int NCH>
static void simt_fwd(T *out, float *lse, const T *qkv, const T *sink, const int32_t *kstart, int B,
                     int T_, int NH, int NKV, int HD, int optin, cudaStream_t st) {
    const size_t smem =
        (size_t)(2 * AS_TILE * (HD | 1) + AS_TILE * HD + AS_TILE * AS_PS + (kstart ? AS_TILE : 0)) * 4;
    const float sl2 = ATT_LOG2E / sqrtf((float)HD);
    dim3 grid((T_ + AS_TILE - 1) / AS_TILE, B * NH);
    if (kstart) {
        set_smem((const void *)attn_simt_fwd_kernel<T, NCH, true>, smem, optin);
        attn_simt_fwd_kernel<T, NCH, true><<<grid, AS_THREADS, smem, st>>>(
            out, lse, qkv, sink, kstart, T_, NKV, NH / NKV, HD, sl2);
    } else {
        set_smem((const void *)attn_simt_fwd_kernel<T, NCH, false>, smem, optin);
        attn_simt_fwd_kernel<T, NCH, false><<<grid, AS_THREADS, smem, st>>>(
            out, lse, qkv, sink, kstart, T_, NKV, NH / NKV, HD, sl2);
    }
    CU_CHECK_LAUNCH();
}

// The two backward kernels, with or without documents (DOCS: kstart != NULL).
template <typename T, int NCH, bool DOCS>
static void simt_bwd_run(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dbuf,
                         const int32_t *kstart, dim3 grid_kv, dim3 grid_q, size_t smem, int T_,
                         int NKV, int G, int HD, float sl2, float scale, int optin,
                         cudaStream_t st) {
    set_smem((const void *)attn_simt_dkdv_kernel<T, NCH, DOCS>, smem, optin);
    set_smem((const void *)attn_simt_dq_kernel<T, NCH, DOCS>, smem, optin);
    attn_simt_dkdv_kernel<T, NCH, DOCS><<<grid_kv, AS_THREADS, smem, st>>>(
        dqkv, dout, qkv, lse, Dbuf, kstart, T_, NKV, G, HD, sl2, scale);
    CU_CHECK_LAUNCH();
    attn_simt_dq_kernel<T, NCH, DOCS><<<grid_q, AS_THREADS, smem, st>>>(
        dqkv, dout, qkv, lse, Dbuf, kstart, T_, NKV, G, HD, sl2, scale);
}

template <typename T, int NCH>
static void simt_bwd(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dbuf,
                     const int32_t *kstart, int B, int T_, int NH, int NKV, int HD, int optin,
                     cudaStream_t st) {
    const size_t smem = AS_BWD_SMEM(HD);
    const float scale = 1.f / sqrtf((float)HD), sl2 = scale * ATT_LOG2E;
    const int G = NH / NKV, nt = (T_ + AS_TILE - 1) / AS_TILE;
    dim3 grid_kv(nt, B * NKV), grid_q(nt, B * NH);
    if (kstart)
        simt_bwd_run<T, NCH, true>(dqkv, dout, qkv, lse, Dbuf, kstart, grid_kv, grid_q, smem, T_,
                                   NKV, G, HD, sl2, scale, optin, st);
    else
        simt_bwd_run<T, NCH, false>(dqkv, dout, qkv, lse, Dbuf, kstart, grid_kv, grid_q, smem, T_,
                                    NKV, G, HD, sl2, scale, optin, st);
    CU_CHECK_LAUNCH();
}

#define AS_DISPATCH(FN, T, ...)                                                       \
    switch ((HD + 31) / 32) {                                                         \
    case 1: FN<T, 1>(__VA_ARGS__); break;                                             \
    case 2: FN<T, 2>(__VA_ARGS__); break;                                             \
    case 3: FN<T, 3>(__VA_ARGS__); break;                                             \
    case 4: FN<T, 4>(__VA_ARGS__); break;                                             \
    case 5: case 6: case 7: /* rare head dims share the widest variant */              \
    case 8: FN<T, 8>(__VA_ARGS__); break;                                             \
    default: lt_fatal("attention: head dim %d > %d is not supported", HD, ATT_SIMT_MAX_HD); \
    }

void launch_attention_simt_fwd(int is_bf16, void *out, float *lse, const void *qkv,
                               const void *sink, const int32_t *kstart, int B, int T, int NH,
                               int NKV, int HD, int smem_optin, cudaStream_t st) {
    if (is_bf16) {
        AS_DISPATCH(simt_fwd, bf16, (bf16 *)out, lse, (const bf16 *)qkv, (const bf16 *)sink,
                    kstart, B, T, NH, NKV, HD, smem_optin, st);
    } else {
        AS_DISPATCH(simt_fwd, float, (float *)out, lse, (const float *)qkv, (const float *)sink,
                    kstart, B, T, NH, NKV, HD, smem_optin, st);
    }
}

void launch_attention_simt_bwd(int is_bf16, void *dqkv, const void *dout, const void *qkv,
                               const float *lse, const float *Dbuf, const int32_t *kstart, int B,
                               int T, int NH, int NKV, int HD, int smem_optin, cudaStream_t st) {
    if (is_bf16) {
        AS_DISPATCH(simt_bwd, bf16, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv, lse,
                    Dbuf, kstart, B, T, NH, NKV, HD, smem_optin, st);
    } else {
        AS_DISPATCH(simt_bwd, float, (float *)dqkv, (const float *)dout, (const float *)qkv, lse,
                    Dbuf, kstart, B, T, NH, NKV, HD, smem_optin, st);
    }
}
