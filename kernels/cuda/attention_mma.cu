/* attention_mma.cu - bf16 causal flash attention on tensor cores
 * (mma.sync.m16n8k16, fp32 accumulation), HD in {32, 64, 80, 96, 128}.
 *
 * Design note. 4 warps per block, each warp owns 16 rows of a 64-row tile;
 * tiles are copied global -> shared with cp.async (16-byte chunks, rows past
 * T zero-filled by the copy itself) and double-buffered along the loop.
 * Shared rows are padded to HD+8 elements (a row stride of 16 bytes mod 128),
 * which makes the ldmatrix loads below bank-conflict-free: each 8x8 matrix's
 * eight 16-byte rows fall in distinct banks. Fragment layouts (PTX ISA,
 * m16n8k16, g = lane/4, c = lane%4): A regs {A[g][2c..], A[g+8][2c..],
 * A[g][2c+8..], A[g+8][2c+8..]}; B regs {B[2c..2c+1][g], B[2c+8..2c+9][g]};
 * C {C[g][2c..2c+1], C[g+8][2c..]}. Every operand comes from shared memory by
 * ldmatrix.x4: an A fragment in one instruction; the B fragments of two
 * 8-column blocks in one, plain when the K index runs along a shared row (K in
 * Q K^T, Q/dO in the dK/dV kernel's transposed scores) and .trans when it runs
 * down rows (V in P.V, K in dS.K, Q/dO in dV/dK += ... ): half an instruction
 * per MMA at most, against two 32-bit or four 16-bit loads per MMA before
 * (tests/test_attention_sass.sh counts them in the compiled code). Two
 * accumulator tiles of 8 columns form the
 * A operand of the next product directly (the FA2 register trick), rounded to
 * bf16. Scores are in the base-2 domain (attention.cuh).
 * Forward: grid (query tiles, G, B*NKV) (G = NH / NKV, below; one block
 * per query tile and query head), heaviest tiles first; online softmax on
 * quad shuffles; writes out and lse. Backward, deterministic: kernel dq owns
 * a query tile and loops over key tiles up to the diagonal; kernel dkdv owns
 * a key tile (warps own keys, so S^T = K Q^T comes out already transposed)
 * and loops over query tiles from the diagonal to T. No atomics.
 * Packed documents (kstart, backend.h): a query row also masks the keys
 * before its document's first token; the forward and dq start at the key
 * tile holding their first row's document start; in dkdv key ki is seen by
 * the queries up to its document's end, and the block stops at the first
 * query row whose document starts after its key tile (kstart is
 * non-decreasing along a sequence, so every later row's does too). A sample of
 * short documents thus costs about the sum of its documents' squares.
 * Grouped K/V (NKV < NH, G = NH / NKV query heads per K/V head): forward and
 * dq load the K/V tiles of their query head's group. dkdv's grid is
 * (key tiles, B*NKV): a block owns a key tile of one K/V head and walks the
 * (query head of the group, query tile) pairs head-major, as one flat loop,
 * so the cp.async double buffer runs on across head boundaries and the
 * group's dK/dV is summed in the same registers in a fixed order (head 0's
 * tiles, then head 1's, ...): deterministic, no partial buffers, no extra
 * pass, K/V tiles loaded once per group. The cost is G times fewer dkdv
 * blocks, each G times longer: B*NKV*T/64 blocks, at B 1, NKV 8, T 2048 that
 * is 256, about one wave at two blocks per SM on 132 SMs. Far fewer (one K/V
 * head per tensor-parallel rank at B 1: 128 blocks at T 8192) would leave SMs
 * idle; per-head fp32 partials plus a fixed-order sum would spread that
 * further, not done before a GPU measurement asks for it. G == 1 is the
 * multi-head kernel exactly (same loop, same order, same bits). Forward and
 * dq take the query head within the group from blockIdx.y and the (batch,
 * K/V head) from blockIdx.z, which spares the kernels an integer division
 * (that alone cost up to 47 registers in ptxas's allocation). */
#include "attention.cuh"

#define AM_THREADS 128
#define AM_BR 64 /* query rows per block (forward, dq) */
#define AM_BC 64 /* keys per tile (forward, dq) and per block (dkdv) */
/* Forward blocks per SM promised to ptxas (launch bounds; 0 = none). HD 32: 4,
 * i.e. up to 128 registers - left to its own heuristic, sm_90's ptxas keeps it
 * at 96 registers and spills (tests/test_resource_usage.sh); 117-121 fit. */
#define AM_FWD_MIN_BLOCKS(HD) ((HD) == 32 ? 4 : 0)

/* ======================= device helpers ======================= */

__device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* (lo, hi) -> bf16x2 with lo in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
/* ldmatrix.m8n8.x4: four 8x8 b16 matrices from shared memory, lanes 8i..8i+7 giving the
 * row addresses of matrix i (16 bytes each); lane l receives row l/4, columns 2(l%4),
 * 2(l%4)+1 of matrix i in r[i] (.trans: column l/4, rows 2(l%4), 2(l%4)+1). */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16 *row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0; /* 0 source bytes: 16 zero bytes written */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Async copy of rows [t0, t0+rows) of a (T, HD) slice (row stride rs) into dst (rows, HD+8).
template <int HD>
__device__ __forceinline__ void am_load(bf16 *dst, const bf16 *base, size_t rs, int t0, int T_,
                                        int rows) {
    constexpr int CPR = HD / 8, SD = HD + 8;
    for (int i = threadIdx.x; i < rows * CPR; i += AM_THREADS) {
        const int r = i / CPR, cc = i - r * CPR, t = t0 + r;
        const bool ok = t < T_;
        cp_async16(dst + r * SD + cc * 8, base + (size_t)(ok ? t : 0) * rs + cc * 8, ok);
    }
}

// First key query row qi may see: its document's first token (0 without documents; rows
// past T read the last row's, as they store nothing).
__device__ __forceinline__ int am_row_start(const int32_t *ksb, int qi, int T_) {
    return ksb ? ksb[qi < T_ ? qi : T_ - 1] : 0;
}

// Fragments from a row-major (., SD) shared tile by ldmatrix, one instruction each
// (lane = threadIdx.x & 31; r0, k0, n0 multiples of 16, 16 and 8):
// the A fragment of rows [r0, r0+16) x columns [k0, k0+16) (m0..m3: rows lo/hi x cols lo/hi).
template <int SD>
__device__ __forceinline__ void ldsm_a(uint32_t a[4], const bf16 *s, int r0, int k0, int lane) {
    ldsm_x4(a, s + (r0 + (lane & 15)) * SD + k0 + (lane >> 4) * 8);
}
// The B fragments of n-blocks n0/8 and n0/8 + 1 (b[0..1], b[2..3]) over k [k0, k0+16) when
// the tile holds B transposed, row = n, column = k (K in Q K^T): no transpose.
template <int SD>
__device__ __forceinline__ void ldsm_bt(uint32_t b[4], const bf16 *s, int n0, int k0, int lane) {
    ldsm_x4(b, s + (n0 + (lane >> 4) * 8 + (lane & 7)) * SD + k0 + ((lane >> 3) & 1) * 8);
}
// The same when the tile holds B itself, row = k, column = n (V in P V): .trans.
template <int SD>
__device__ __forceinline__ void ldsm_b(uint32_t b[4], const bf16 *s, int k0, int n0, int lane) {
    ldsm_x4_t(b, s + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * SD + n0 + (lane >> 4) * 8);
}

// x += A1 B1^T and y += A2 B2^T over the whole head dim (K index): A1, A2 rows
// [r0, r0+16) of (., HD+8) tiles, B1, B2 rows [0, 8 NB) (the scores and dP of a
// backward kernel: Q, dO against K, V, or K, V against Q, dO); x, y NB 8-column blocks.
template <int HD, int NB>
__device__ __forceinline__ void am_two_products(float x[][4], float y[][4], const bf16 *A1,
                                                const bf16 *A2, const bf16 *B1, const bf16 *B2,
                                                int r0, int lane) {
    constexpr int SD = HD + 8;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t a1[4], a2[4];
        ldsm_a<SD>(a1, A1, r0, kk * 16, lane);
        ldsm_a<SD>(a2, A2, r0, kk * 16, lane);
#pragma unroll
        for (int n = 0; n < NB; n += 2) {
            uint32_t b1[4], b2[4];
            ldsm_bt<SD>(b1, B1, n * 8, kk * 16, lane);
            ldsm_bt<SD>(b2, B2, n * 8, kk * 16, lane);
            mma_bf16(x[n], a1[0], a1[1], a1[2], a1[3], b1[0], b1[1]);
            mma_bf16(x[n + 1], a1[0], a1[1], a1[2], a1[3], b1[2], b1[3]);
            mma_bf16(y[n], a2[0], a2[1], a2[2], a2[3], b2[0], b2[1]);
            mma_bf16(y[n + 1], a2[0], a2[1], a2[2], a2[3], b2[2], b2[3]);
        }
    }
}

// Bases (token 0 of batch b) of the Q of query head h and of the K and V of
// key/value head kvh in qkv (B, T, NH + 2*NKV, HD); returns the row stride.
__device__ __forceinline__ size_t am_head_ptrs(const bf16 *qkv, int b, int h, int kvh, int T_,
                                               int NH, int NKV, int HD, const bf16 **q,
                                               const bf16 **k, const bf16 **v) {
    const size_t rs = (size_t)(NH + 2 * NKV) * HD;
    const bf16 *row = qkv + (size_t)b * T_ * rs;
    *q = row + (size_t)h * HD;
    *k = row + (size_t)(NH + kvh) * HD;
    *v = *k + (size_t)NKV * HD;
    return rs;
}

/* ======================= kernels ======================= */

// qkv (B,T,NH+2*NKV,HD) -> out (B,T,NH,HD), lse (B,NH,T). grid (ceil(T/64), G, B*NKV):
// query head kvh*G + blockIdx.y of K/V head kvh; 128 threads.
template <int HD, bool DOCS>
__global__ void __launch_bounds__(AM_THREADS, AM_FWD_MIN_BLOCKS(HD))
    attn_mma_fwd_kernel(bf16 *out, float *lse, const bf16 *qkv, const bf16 *sink,
                        const int32_t *kstart, int T_, int NKV, int G, float sl2) {
    constexpr int SD = HD + 8, KD = HD / 16, ND = HD / 8;
    extern __shared__ __align__(16) unsigned char am_raw[];
    bf16 *Qs = (bf16 *)am_raw, *Ks = Qs + AM_BR * SD, *Vs = Ks + 2 * AM_BC * SD;
    const int b = blockIdx.z / NKV, kvh = blockIdx.z - b * NKV, NH = NKV * G;
    const int h = kvh * G + blockIdx.y, bh = b * NH + h;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * AM_BR;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c2 = (lane & 3) * 2;
    const bf16 *qb, *kb, *vb;
    const size_t rs = am_head_ptrs(qkv, b, h, kvh, T_, NH, NKV, HD, &qb, &kb, &vb);
    const int32_t *ksb = DOCS ? kstart + (size_t)b * T_ : nullptr;
    const int j0 = DOCS ? ksb[q0] / AM_BC : 0; /* first key tile of the first row's document */
    am_load<HD>(Qs, qb, rs, q0, T_, AM_BR);
    cp_async_commit();
    am_load<HD>(Ks, kb, rs, j0 * AM_BC, T_, AM_BC);
    am_load<HD>(Vs, vb, rs, j0 * AM_BC, T_, AM_BC);
    cp_async_commit();
    const int nkt = min(q0 + AM_BR - 1, T_ - 1) / AM_BC + 1;
    const int qi0 = q0 + w * 16 + g, qi1 = qi0 + 8;
    const int lo0 = am_row_start(ksb, qi0, T_), lo1 = am_row_start(ksb, qi1, T_);
    uint32_t qf[KD][4];
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    for (int j = j0; j < nkt; j++) {
        const int buf = (j - j0) & 1;
        if (j + 1 < nkt) {
            am_load<HD>(Ks + (buf ^ 1) * AM_BC * SD, kb, rs, (j + 1) * AM_BC, T_, AM_BC);
            am_load<HD>(Vs + (buf ^ 1) * AM_BC * SD, vb, rs, (j + 1) * AM_BC, T_, AM_BC);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == j0) {
#pragma unroll
            for (int kk = 0; kk < KD; kk++) ldsm_a<SD>(qf[kk], Qs, w * 16, kk * 16, lane);
        }
        const bf16 *Kt = Ks + buf * AM_BC * SD, *Vt = Vs + buf * AM_BC * SD;
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++)
#pragma unroll
            for (int n = 0; n < 8; n += 2) {
                uint32_t kf[4];
                ldsm_bt<SD>(kf, Kt, n * 8, kk * 16, lane);
                mma_bf16(s[n], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], kf[0], kf[1]);
                mma_bf16(s[n + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], kf[2], kf[3]);
            }
        /* mask + online softmax; rows qi0 (regs 0,1) and qi1 (regs 2,3) */
        const int kt0 = j * AM_BC;
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int kj = kt0 + n * 8 + c2 + e;
                s[n][e] = kj > qi0 || (DOCS && kj < lo0) ? -INFINITY : s[n][e] * sl2;
                s[n][2 + e] = kj > qi1 || (DOCS && kj < lo1) ? -INFINITY : s[n][2 + e] * sl2;
                mx0 = fmaxf(mx0, s[n][e]);
                mx1 = fmaxf(mx1, s[n][2 + e]);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float r0 = mn0 == -INFINITY ? 0.f : mn0, r1 = mn1 == -INFINITY ? 0.f : mn1;
        const float al0 = exp2f(m0 - r0), al1 = exp2f(m1 - r1);
        m0 = mn0;
        m1 = mn1;
        l0 *= al0;
        l1 *= al1;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            o[n][0] *= al0;
            o[n][1] *= al0;
            o[n][2] *= al1;
            o[n][3] *= al1;
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[n][e] = exp2f(s[n][e] - r0);
                s[n][2 + e] = exp2f(s[n][2 + e] - r1);
                l0 += s[n][e];
                l1 += s[n][2 + e];
            }
        /* O += P V: K index = key (16 per step), N index = head dim */
#pragma unroll
        for (int kk = 0; kk < AM_BC / 16; kk++) {
            const uint32_t a0 = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
            const uint32_t a1 = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            const uint32_t a2 = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            const uint32_t a3 = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                uint32_t vf[4];
                ldsm_b<SD>(vf, Vt, kk * 16, n * 8, lane);
                mma_bf16(o[n], a0, a1, a2, a3, vf[0], vf[1]);
                mma_bf16(o[n + 1], a0, a1, a2, a3, vf[2], vf[3]);
            }
        }
        __syncthreads(); /* buffer `buf` is refilled two iterations on */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float c0 = 1.f, c1 = 1.f; /* the sink joins each row's sum (whole over the quad now) */
    if (sink) {
        const float logit = __bfloat162float(sink[h]);
        c0 = att_sink_join(logit, &m0, &l0);
        c1 = att_sink_join(logit, &m1, &l1);
    }
    const float inv0 = c0 / l0, inv1 = c1 / l1;
    if (qi0 < T_) {
        bf16 *op = out + out_off(b, qi0, h, T_, NH, HD) + c2;
#pragma unroll
        for (int n = 0; n < ND; n++)
            *reinterpret_cast<uint32_t *>(op + n * 8) = pack_bf16(o[n][0] * inv0, o[n][1] * inv0);
        if ((lane & 3) == 0) lse[(size_t)bh * T_ + qi0] = (m0 + log2f(l0)) * ATT_LN2;
    }
    if (qi1 < T_) {
        bf16 *op = out + out_off(b, qi1, h, T_, NH, HD) + c2;
#pragma unroll
        for (int n = 0; n < ND; n++)
            *reinterpret_cast<uint32_t *>(op + n * 8) = pack_bf16(o[n][2] * inv1, o[n][3] * inv1);
        if ((lane & 3) == 0) lse[(size_t)bh * T_ + qi1] = (m1 + log2f(l1)) * ATT_LN2;
    }
}

// dQ of one 64-row query tile: dqkv q slice. grid (ceil(T/64), G, B*NKV) as the forward's,
// 128 threads.
template <int HD, bool DOCS>
__global__ void __launch_bounds__(AM_THREADS)
    attn_mma_dq_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                       const float *Dbuf, const int32_t *kstart, int T_, int NKV, int G, float sl2,
                       float scale) {
    constexpr int SD = HD + 8, ND = HD / 8;
    extern __shared__ __align__(16) unsigned char am_raw[];
    bf16 *Qs = (bf16 *)am_raw, *dOs = Qs + AM_BR * SD, *Ks = dOs + AM_BR * SD;
    bf16 *Vs = Ks + 2 * AM_BC * SD;
    const int b = blockIdx.z / NKV, kvh = blockIdx.z - b * NKV, NH = NKV * G;
    const int h = kvh * G + blockIdx.y, bh = b * NH + h;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * AM_BR;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c2 = (lane & 3) * 2;
    const size_t C = (size_t)NH * HD;
    const bf16 *qb, *kb, *vb;
    const size_t rs = am_head_ptrs(qkv, b, h, kvh, T_, NH, NKV, HD, &qb, &kb, &vb);
    const bf16 *ob = dout + (size_t)b * T_ * C + (size_t)h * HD;
    const int32_t *ksb = DOCS ? kstart + (size_t)b * T_ : nullptr;
    const int j0 = DOCS ? ksb[q0] / AM_BC : 0; /* first key tile of the first row's document */
    am_load<HD>(Qs, qb, rs, q0, T_, AM_BR);
    am_load<HD>(dOs, ob, C, q0, T_, AM_BR);
    cp_async_commit();
    am_load<HD>(Ks, kb, rs, j0 * AM_BC, T_, AM_BC);
    am_load<HD>(Vs, vb, rs, j0 * AM_BC, T_, AM_BC);
    cp_async_commit();
    const int nkt = min(q0 + AM_BR - 1, T_ - 1) / AM_BC + 1;
    const int qi0 = q0 + w * 16 + g, qi1 = qi0 + 8;
    const int lo0 = am_row_start(ksb, qi0, T_), lo1 = am_row_start(ksb, qi1, T_);
    const float L0 = qi0 < T_ ? lse[(size_t)bh * T_ + qi0] * ATT_LOG2E : 0.f;
    const float L1 = qi1 < T_ ? lse[(size_t)bh * T_ + qi1] * ATT_LOG2E : 0.f;
    const float D0 = qi0 < T_ ? Dbuf[(size_t)bh * T_ + qi0] : 0.f;
    const float D1 = qi1 < T_ ? Dbuf[(size_t)bh * T_ + qi1] : 0.f;
    float dq[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;
    for (int j = j0; j < nkt; j++) {
        const int buf = (j - j0) & 1;
        if (j + 1 < nkt) {
            am_load<HD>(Ks + (buf ^ 1) * AM_BC * SD, kb, rs, (j + 1) * AM_BC, T_, AM_BC);
            am_load<HD>(Vs + (buf ^ 1) * AM_BC * SD, vb, rs, (j + 1) * AM_BC, T_, AM_BC);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16 *Kt = Ks + buf * AM_BC * SD, *Vt = Vs + buf * AM_BC * SD;
        float s[8][4], dp[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) s[n][r] = dp[n][r] = 0.f;
        am_two_products<HD, 8>(s, dp, Qs, dOs, Kt, Vt, w * 16, lane);
        const int kt0 = j * AM_BC;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int kj = kt0 + n * 8 + c2 + e;
                const float p0 = kj > qi0 || (DOCS && kj < lo0) ? 0.f : exp2f(s[n][e] * sl2 - L0);
                const float p1 =
                    kj > qi1 || (DOCS && kj < lo1) ? 0.f : exp2f(s[n][2 + e] * sl2 - L1);
                s[n][e] = p0 * (dp[n][e] - D0); /* s now holds dS */
                s[n][2 + e] = p1 * (dp[n][2 + e] - D1);
            }
        /* dQ += dS K: K index = key, N index = head dim */
#pragma unroll
        for (int kk = 0; kk < AM_BC / 16; kk++) {
            const uint32_t a0 = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
            const uint32_t a1 = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
            const uint32_t a2 = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            const uint32_t a3 = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                uint32_t kf[4];
                ldsm_b<SD>(kf, Kt, kk * 16, n * 8, lane);
                mma_bf16(dq[n], a0, a1, a2, a3, kf[0], kf[1]);
                mma_bf16(dq[n + 1], a0, a1, a2, a3, kf[2], kf[3]);
            }
        }
        __syncthreads();
    }
    if (qi0 < T_) {
        bf16 *dp0 = dqkv + qkv_off(b, qi0, h, 0, T_, NH, NKV, HD) + c2;
#pragma unroll
        for (int n = 0; n < ND; n++)
            *reinterpret_cast<uint32_t *>(dp0 + n * 8) = pack_bf16(dq[n][0] * scale, dq[n][1] * scale);
    }
    if (qi1 < T_) {
        bf16 *dp1 = dqkv + qkv_off(b, qi1, h, 0, T_, NH, NKV, HD) + c2;
#pragma unroll
        for (int n = 0; n < ND; n++)
            *reinterpret_cast<uint32_t *>(dp1 + n * 8) = pack_bf16(dq[n][2] * scale, dq[n][3] * scale);
    }
}

// Row statistics (lse * log2 e, D) of query rows [t0, t0+BR), zeros past T.
template <int BR>
__device__ __forceinline__ void am_load_stats(float *L, float *D, const float *lse,
                                              const float *Dbuf, size_t bh, int t0, int T_) {
    for (int r = threadIdx.x; r < BR; r += AM_THREADS) {
        const int t = t0 + r;
        L[r] = t < T_ ? lse[bh * T_ + t] * ATT_LOG2E : 0.f;
        D[r] = t < T_ ? Dbuf[bh * T_ + t] : 0.f;
    }
}


// dK, dV of one 64-key tile of one key/value head, summed over the query heads of its
// group: dqkv k and v slices. grid (ceil(T/64), B*NKV), 128 threads.
template <int HD, int BR, bool DOCS>
__global__ void __launch_bounds__(AM_THREADS)
    attn_mma_dkdv_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                         const float *Dbuf, const int32_t *kstart, int T_, int NKV, int G,
                         float sl2, float scale) {
    constexpr int SD = HD + 8, ND = HD / 8, NQ = BR / 8;
    extern __shared__ __align__(16) unsigned char am_raw[];
    bf16 *Ks = (bf16 *)am_raw, *Vs = Ks + AM_BC * SD, *Qs = Vs + AM_BC * SD;
    bf16 *dOs = Qs + 2 * BR * SD;
    float *Ls = (float *)(dOs + 2 * BR * SD), *Dsh = Ls + 2 * BR;
    const int bg = blockIdx.y, b = bg / NKV, kvh = bg - b * NKV, NH = NKV * G;
    const int kt0 = blockIdx.x * AM_BC;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c2 = (lane & 3) * 2;
    const size_t C = (size_t)NH * HD, bh0 = (size_t)b * NH + (size_t)kvh * G; /* group's head 0 */
    const bf16 *qb, *kb, *vb;
    const size_t rs = am_head_ptrs(qkv, b, kvh * G, kvh, T_, NH, NKV, HD, &qb, &kb, &vb);
    const bf16 *ob = dout + (size_t)b * T_ * C + (size_t)kvh * G * HD;
    am_load<HD>(Ks, kb, rs, kt0, T_, AM_BC);
    am_load<HD>(Vs, vb, rs, kt0, T_, AM_BC);
    am_load<HD>(Qs, qb, rs, kt0, T_, BR);
    am_load<HD>(dOs, ob, C, kt0, T_, BR);
    cp_async_commit();
    const int32_t *ksb = DOCS ? kstart + (size_t)b * T_ : nullptr;
    am_load_stats<BR>(Ls, Dsh, lse, Dbuf, bh0, kt0, T_);
    /* steps: (query head of the group, query tile) pairs, head-major, over the query rows
     * [kt0, qend) that see a key of this tile */
    /* documents: the query rows' end in shared memory, a register less across the loop */
    __shared__ int qend_s;
    if (DOCS && threadIdx.x == 0) qend_s = att_rows_from(ksb, kt0, T_, kt0 + AM_BC);
    if (DOCS) __syncthreads();
#define AM_QEND (DOCS ? qend_s : T_)
    const int nsteps = G * ((AM_QEND - kt0 + BR - 1) / BR);
    const int kr = w * 16 + g; /* local key rows kr, kr+8 */
    const int ki0 = kt0 + kr, ki1 = ki0 + 8;
    /* queries [ki, kend) see key ki: T without documents (and for keys past T) */
    const int kend0 = DOCS && ki0 < T_ ? att_rows_from(ksb, ki0 + 1, T_, ki0 + 1) : T_;
    const int kend1 = DOCS && ki1 < T_ ? att_rows_from(ksb, ki1 + 1, T_, ki1 + 1) : T_;
    float dk[ND][4], dv[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int r = 0; r < 4; r++) dk[n][r] = dv[n][r] = 0.f;
    int qt0 = kt0, hq = 0; /* this step's first query row and head within the group */
    for (int j = 0; j < nsteps; j++) {
        const int buf = j & 1;
        if (j + 1 < nsteps) {
            const bool wrap = qt0 + BR >= AM_QEND; /* the next step starts the next head */
            const int nq0 = wrap ? kt0 : qt0 + BR, nh = hq + wrap;
            am_load<HD>(Qs + (buf ^ 1) * BR * SD, qb + (size_t)nh * HD, rs, nq0, T_, BR);
            am_load<HD>(dOs + (buf ^ 1) * BR * SD, ob + (size_t)nh * HD, C, nq0, T_, BR);
            cp_async_commit();
            am_load_stats<BR>(Ls + (buf ^ 1) * BR, Dsh + (buf ^ 1) * BR, lse, Dbuf, bh0 + nh, nq0,
                              T_);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16 *Qt = Qs + buf * BR * SD, *Ot = dOs + buf * BR * SD;
        const float *Lt = Ls + buf * BR, *Dt = Dsh + buf * BR;
        /* S^T = K Q^T and dP^T = V dO^T: M = key, N = query, K index = head dim */
        float st[NQ][4], dpt[NQ][4];
#pragma unroll
        for (int n = 0; n < NQ; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) st[n][r] = dpt[n][r] = 0.f;
        am_two_products<HD, NQ>(st, dpt, Ks, Vs, Qt, Ot, w * 16, lane);
#pragma unroll
        for (int n = 0; n < NQ; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int ql = n * 8 + c2 + e, qj = qt0 + ql;
                const float Lq = Lt[ql], Dq = Dt[ql];
                const float p0 = (qj >= ki0 && qj < kend0) ? exp2f(st[n][e] * sl2 - Lq) : 0.f;
                const float p1 = (qj >= ki1 && qj < kend1) ? exp2f(st[n][2 + e] * sl2 - Lq) : 0.f;
                st[n][e] = p0;
                st[n][2 + e] = p1;
                dpt[n][e] = p0 * (dpt[n][e] - Dq); /* dpt now holds dS^T */
                dpt[n][2 + e] = p1 * (dpt[n][2 + e] - Dq);
            }
        /* dV += P^T dO and dK += dS^T Q: M = key, K index = query, N = head dim */
#pragma unroll
        for (int kq = 0; kq < BR / 16; kq++) {
            const uint32_t p0 = pack_bf16(st[2 * kq][0], st[2 * kq][1]);
            const uint32_t p1 = pack_bf16(st[2 * kq][2], st[2 * kq][3]);
            const uint32_t p2 = pack_bf16(st[2 * kq + 1][0], st[2 * kq + 1][1]);
            const uint32_t p3 = pack_bf16(st[2 * kq + 1][2], st[2 * kq + 1][3]);
            const uint32_t d0 = pack_bf16(dpt[2 * kq][0], dpt[2 * kq][1]);
            const uint32_t d1 = pack_bf16(dpt[2 * kq][2], dpt[2 * kq][3]);
            const uint32_t d2 = pack_bf16(dpt[2 * kq + 1][0], dpt[2 * kq + 1][1]);
            const uint32_t d3 = pack_bf16(dpt[2 * kq + 1][2], dpt[2 * kq + 1][3]);
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                uint32_t of[4], qf[4];
                ldsm_b<SD>(of, Ot, kq * 16, n * 8, lane);
                ldsm_b<SD>(qf, Qt, kq * 16, n * 8, lane);
                mma_bf16(dv[n], p0, p1, p2, p3, of[0], of[1]);
                mma_bf16(dv[n + 1], p0, p1, p2, p3, of[2], of[3]);
                mma_bf16(dk[n], d0, d1, d2, d3, qf[0], qf[1]);
                mma_bf16(dk[n + 1], d0, d1, d2, d3, qf[2], qf[3]);
            }
        }
        __syncthreads();
        const bool wrap = qt0 + BR >= AM_QEND;
        qt0 = wrap ? kt0 : qt0 + BR;
        hq += wrap;
    }
    if (ki0 < T_) {
        bf16 *kp = dqkv + qkv_off(b, ki0, kvh, 1, T_, NH, NKV, HD) + c2;
        bf16 *vp = dqkv + qkv_off(b, ki0, kvh, 2, T_, NH, NKV, HD) + c2;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            *reinterpret_cast<uint32_t *>(kp + n * 8) = pack_bf16(dk[n][0] * scale, dk[n][1] * scale);
            *reinterpret_cast<uint32_t *>(vp + n * 8) = pack_bf16(dv[n][0], dv[n][1]);
        }
    }
    if (ki1 < T_) {
        bf16 *kp = dqkv + qkv_off(b, ki1, kvh, 1, T_, NH, NKV, HD) + c2;
        bf16 *vp = dqkv + qkv_off(b, ki1, kvh, 2, T_, NH, NKV, HD) + c2;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            *reinterpret_cast<uint32_t *>(kp + n * 8) = pack_bf16(dk[n][2] * scale, dk[n][3] * scale);
            *reinterpret_cast<uint32_t *>(vp + n * 8) = pack_bf16(dv[n][2], dv[n][3]);
        }
    }
}

#undef AM_QEND

/* ======================= launchers ======================= */

static void am_set_smem(const void *fn, size_t smem, int optin) {
    if (smem > (size_t)optin)
        lt_fatal("attention (mma): needs %zu bytes of shared memory, device allows %d", smem, optin);
    if (smem > 48 * 1024)
        CU_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

template <int HD>
static void mma_fwd(bf16 *out, float *lse, const bf16 *qkv, const bf16 *sink,
                    const int32_t *kstart, int B, int T_, int NH, int NKV, int optin,
                    cudaStream_t st) {
    const size_t smem = (size_t)(AM_BR + 4 * AM_BC) * (HD + 8) * sizeof(bf16);
    const float sl2 = ATT_LOG2E / sqrtf((float)HD);
    dim3 grid((T_ + AM_BR - 1) / AM_BR, NH / NKV, B * NKV);
    if (kstart) {
        am_set_smem((const void *)attn_mma_fwd_kernel<HD, true>, smem, optin);
        attn_mma_fwd_kernel<HD, true><<<grid, AM_THREADS, smem, st>>>(out, lse, qkv, sink, kstart,
                                                                      T_, NKV, NH / NKV, sl2);
    } else {
        am_set_smem((const void *)attn_mma_fwd_kernel<HD, false>, smem, optin);
        attn_mma_fwd_kernel<HD, false><<<grid, AM_THREADS, smem, st>>>(
            out, lse, qkv, sink, kstart, T_, NKV, NH / NKV, sl2);
    }
    CU_CHECK_LAUNCH();
}

// The two backward kernels, with or without documents (DOCS: kstart != NULL).
template <int HD, int BR, bool DOCS>
static void mma_bwd_run(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                        const float *Dbuf, const int32_t *kstart, dim3 grid_kv, dim3 grid_q,
                        size_t smem_kv, size_t smem_q, int T_, int NKV, int G, float sl2,
                        float scale, int optin, cudaStream_t st) {
    am_set_smem((const void *)attn_mma_dkdv_kernel<HD, BR, DOCS>, smem_kv, optin);
    am_set_smem((const void *)attn_mma_dq_kernel<HD, DOCS>, smem_q, optin);
    attn_mma_dkdv_kernel<HD, BR, DOCS><<<grid_kv, AM_THREADS, smem_kv, st>>>(
        dqkv, dout, qkv, lse, Dbuf, kstart, T_, NKV, G, sl2, scale);
    CU_CHECK_LAUNCH();
    attn_mma_dq_kernel<HD, DOCS><<<grid_q, AM_THREADS, smem_q, st>>>(dqkv, dout, qkv, lse, Dbuf,
                                                                     kstart, T_, NKV, G, sl2, scale);
}

template <int HD>
static void mma_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                    const float *Dbuf, const int32_t *kstart, int B, int T_, int NH, int NKV,
                    int optin, cudaStream_t st) {
    constexpr int BR = HD <= 64 ? 64 : 32;
    const float scale = 1.f / sqrtf((float)HD), sl2 = scale * ATT_LOG2E;
    const size_t smem_kv =
        (size_t)(2 * AM_BC + 4 * BR) * (HD + 8) * sizeof(bf16) + (size_t)4 * BR * sizeof(float);
    const size_t smem_q = (size_t)(2 * AM_BR + 4 * AM_BC) * (HD + 8) * sizeof(bf16);
    const int G = NH / NKV;
    dim3 grid_kv((T_ + AM_BC - 1) / AM_BC, B * NKV), grid_q((T_ + AM_BR - 1) / AM_BR, G, B * NKV);
    if (kstart)
        mma_bwd_run<HD, BR, true>(dqkv, dout, qkv, lse, Dbuf, kstart, grid_kv, grid_q, smem_kv,
                                  smem_q, T_, NKV, G, sl2, scale, optin, st);
    else
        mma_bwd_run<HD, BR, false>(dqkv, dout, qkv, lse, Dbuf, kstart, grid_kv, grid_q, smem_kv,
                                   smem_q, T_, NKV, G, sl2, scale, optin, st);
    CU_CHECK_LAUNCH();
}

int attention_mma_supported(int HD) {
    return HD == 32 || HD == 64 || HD == 80 || HD == 96 || HD == 128;
}

void launch_attention_mma_fwd(bf16 *out, float *lse, const bf16 *qkv, const bf16 *sink,
                              const int32_t *kstart, int B, int T, int NH, int NKV, int HD,
                              int smem_optin, cudaStream_t st) {
    switch (HD) {
    case 32: mma_fwd<32>(out, lse, qkv, sink, kstart, B, T, NH, NKV, smem_optin, st); break;
    case 64: mma_fwd<64>(out, lse, qkv, sink, kstart, B, T, NH, NKV, smem_optin, st); break;
    case 80: mma_fwd<80>(out, lse, qkv, sink, kstart, B, T, NH, NKV, smem_optin, st); break;
    case 96: mma_fwd<96>(out, lse, qkv, sink, kstart, B, T, NH, NKV, smem_optin, st); break;
    case 128: mma_fwd<128>(out, lse, qkv, sink, kstart, B, T, NH, NKV, smem_optin, st); break;
    default: lt_fatal("attention (mma): unsupported head dim %d", HD);
    }
}

void launch_attention_mma_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                              const float *Dbuf, const int32_t *kstart, int B, int T, int NH,
                              int NKV, int HD, int smem_optin, cudaStream_t st) {
    switch (HD) {
    case 32: mma_bwd<32>(dqkv, dout, qkv, lse, Dbuf, kstart, B, T, NH, NKV, smem_optin, st); break;
    case 64: mma_bwd<64>(dqkv, dout, qkv, lse, Dbuf, kstart, B, T, NH, NKV, smem_optin, st); break;
    case 80: mma_bwd<80>(dqkv, dout, qkv, lse, Dbuf, kstart, B, T, NH, NKV, smem_optin, st); break;
    case 96: mma_bwd<96>(dqkv, dout, qkv, lse, Dbuf, kstart, B, T, NH, NKV, smem_optin, st); break;
    case 128: mma_bwd<128>(dqkv, dout, qkv, lse, Dbuf, kstart, B, T, NH, NKV, smem_optin, st); break;
    default: lt_fatal("attention (mma): unsupported head dim %d", HD);
    }
}
