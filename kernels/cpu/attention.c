/* attention.c - causal self-attention with grouped K/V, flash-style on the CPU.
 *
 * Layouts: qkv (B,T,NH+2*NKV,HD): per token q (NH heads) | k (NKV) | v (NKV);
 * out and dout (B,T,NH,HD), lse (B,NH,T). Query head h uses key/value head
 * h / G, G = NH / NKV (NKV == NH: multi-head, 1: multi-query).
 * Scores s_ij = scale * (q_i . k_j), scale = 1/sqrt(HD), keys j <= i, and with
 * per-token key starts (kstart: packed documents, a sliding window, or both) only
 * keys j >= kstart_i: key blocks wholly before a query block's first visible key
 * are never visited. The window argument is only checked against kstart (the
 * op's promise, backend.h), so a caller that gets it wrong fails here.
 * Work is done on tiles of ATT_BQ query rows x ATT_BK keys; no (T,T) matrix
 * ever exists.
 *
 * Forward: tasks are (batch, head, query block), run in parallel. A task walks
 * the key blocks up to its diagonal keeping, per query row, a running max m,
 * running sum l and an unnormalized output row o (online softmax): for a new
 * block with row max mb,
 *   m' = max(m, mb), l' = l e^(m-m') + sum_j e^(s_j-m'), o' = o e^(m-m') + sum_j e^(s_j-m') v_j.
 * Only out = o/l and lse = m + log l are stored. K and V are packed once per
 * key/value head and shared by the G query heads of its group. An attention
 * sink (offsets: the head's logit o_h, no value) joins after the last key
 * block as one more score: m' = max(m, o_h), l' = l e^(m-m') + e^(o_h-m'),
 * o' = o e^(m-m'), so lse counts it and the backward below is unchanged.
 *
 * Backward: one task per (batch, head), so a head's dq, dk, dv are summed by
 * one thread in a fixed order (deterministic, no atomics, independent of the
 * thread count). With D_i = dout_i . out_i, per key block and per query block
 * at or below the diagonal, probabilities are recomputed from lse:
 *   p_ij = exp(s_ij - lse_i), dp_ij = dout_i . v_j, ds_ij = scale p_ij (dp_ij - D_i),
 *   dv_j += sum_i p_ij dout_i,  dk_j += sum_i ds_ij q_i,  dq_i += sum_j ds_ij k_j.
 * Grouped K/V (G > 1): a (batch, query head) task writes its dK, dV as fp32
 * partials (B, NH, T, HD) into the backend's scratch instead of dqkv, and a
 * second parallel pass sums each group's G partials in head order and stores
 * them: as deterministic as G == 1 and as parallel (B*NH tasks), never a copy
 * of K/V per query head. G == 1 stores straight into dqkv as before.
 * The sink's gradient d o_h = -sum_i exp(o_h - lse_i) D_i: each (batch, head)
 * task sums its rows in order, then the batch's sums are added in batch order.
 *
 * Kernels: tile_abt (a tile of dot products against a transposed, (HD, ATT_BK)
 * gathered K or V block, one ATT_BK-wide accumulator row held in registers)
 * and tile_acc (row += scalar * row updates over HD padded to a multiple of
 * ATT_CH, ATT_CH-wide accumulators in registers). */
#include <math.h>
#include <stdlib.h>

#include "cpu_ops.h"

#define ATT_BQ 64
#define ATT_BK 64
#define ATT_CH 32 /* head-dim chunk of tile_acc; HD is padded to a multiple of it */

static int padded_hd(int HD) { return (HD + ATT_CH - 1) / ATT_CH * ATT_CH; }

/* dst (HD, ATT_BK) = rows [j0, j0+nj) of src (row stride `stride`) transposed;
 * columns nj..ATT_BK-1 are zero. */
static void gather_t(float *dst, const float *src, size_t stride, int j0, int nj, int HD) {
    for (int d = 0; d < HD; d++) memset(dst + (size_t)d * ATT_BK + nj, 0, sizeof(float) * (ATT_BK - nj));
    for (int j = 0; j < nj; j++) {
        const float *row = src + (size_t)(j0 + j) * stride;
        for (int d = 0; d < HD; d++) dst[(size_t)d * ATT_BK + j] = row[d];
    }
}

/* dst (n, HDP) = rows [r0, r0+n) of src (row stride `stride`), zero padded. */
static void gather_rows(float *dst, const float *src, size_t stride, int r0, int n, int HD, int HDP) {
    for (int r = 0; r < n; r++) {
        memcpy(dst + (size_t)r * HDP, src + (size_t)(r0 + r) * stride, sizeof(float) * HD);
        memset(dst + (size_t)r * HDP + HD, 0, sizeof(float) * (HDP - HD));
    }
}

/* 8-float vectors (GCC/Clang vector extension): used only in the two tile
 * kernels below so that their accumulators provably stay in registers; the
 * auto-vectorizer spills them. Loads and stores go through memcpy (unaligned). */
typedef float v8f __attribute__((vector_size(32)));
static inline v8f v8_load(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v8_store(float *p, v8f v) { memcpy(p, &v, sizeof v); }

/* s[i][j] = mul * sum_d a_i[d] bt[d][j] for i < ni and all ATT_BK (= 64)
 * columns j; a_i = a + i*lda; bt is (HD, ATT_BK); s has row stride ATT_BK. */
static void tile_abt(float *restrict s, const float *restrict a, size_t lda,
                     const float *restrict bt, int ni, int HD, float mul) {
    for (int i = 0; i < ni; i++) {
        v8f c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0}, c5 = {0}, c6 = {0}, c7 = {0};
        const float *ai = a + (size_t)i * lda;
        for (int d = 0; d < HD; d++) {
            const float x = ai[d];
            const float *b = bt + (size_t)d * ATT_BK;
            c0 += x * v8_load(b), c1 += x * v8_load(b + 8);
            c2 += x * v8_load(b + 16), c3 += x * v8_load(b + 24);
            c4 += x * v8_load(b + 32), c5 += x * v8_load(b + 40);
            c6 += x * v8_load(b + 48), c7 += x * v8_load(b + 56);
        }
        float *si = s + (size_t)i * ATT_BK;
        v8_store(si, c0 * mul), v8_store(si + 8, c1 * mul);
        v8_store(si + 16, c2 * mul), v8_store(si + 24, c3 * mul);
        v8_store(si + 32, c4 * mul), v8_store(si + 40, c5 * mul);
        v8_store(si + 48, c6 * mul), v8_store(si + 56, c7 * mul);
    }
}

/* c_r[:] += sum_{t<k} a[r*ar + t*at] * b_t[:] for r < m, over HDP columns;
 * c and b have row stride HDP (a multiple of ATT_CH = 32). The strides of the
 * scalar matrix a let it be read transposed. */
static void tile_acc(float *restrict c, const float *restrict a, size_t ar, size_t at,
                     const float *restrict b, int m, int k, int HDP) {
    for (int r = 0; r < m; r++) {
        float *cr = c + (size_t)r * HDP;
        for (int d0 = 0; d0 < HDP; d0 += ATT_CH) {
            v8f c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
            const float *bt = b + d0;
            for (int t = 0; t < k; t++, bt += HDP) {
                const float x = a[r * ar + t * at];
                c0 += x * v8_load(bt), c1 += x * v8_load(bt + 8);
                c2 += x * v8_load(bt + 16), c3 += x * v8_load(bt + 24);
            }
            float *o = cr + d0;
            v8_store(o, v8_load(o) + c0), v8_store(o + 8, v8_load(o + 8) + c1);
            v8_store(o + 16, v8_load(o + 16) + c2), v8_store(o + 24, v8_load(o + 24) + c3);
        }
    }
}

/* Refuse a head split the layout cannot express, and a window that is not
 * what kstart holds. */
static void check_call(const int32_t *kstart, int window, int B, int T, int NH, int NKV) {
    if (NKV <= 0 || NH % NKV)
        lt_fatal("attention: %d query heads do not split into %d key/value heads", NH, NKV);
    if (window < 0) return;
    if (!kstart) lt_fatal("attention: window %d given without kstart", window);
    for (int i = 0; i < B * T; i++) {
        const int t = i % T, want = t > window ? t - window : 0;
        if (kstart[i] != want)
            lt_fatal("attention: window %d promises kstart[%d] = %d, kstart holds %d (documents "
                     "with a window must pass window -1)", window, i, want, kstart[i]);
    }
}

void cpu_attention_fwd(LtBackend *be, void *out_, float *lse, const void *qkv_,
                       const void *offsets, const int32_t *kstart, int window, int B, int T,
                       int NH, int NKV, int HD) {
    float *out = out_;
    const float *qkv = qkv_, *sink = offsets;
    check_call(kstart, window, B, T, NH, NKV);
    const int bf16 = cpu_is_bf16(be), nt = cpu_nthreads(be), G = NH / NKV;
    const int HDP = padded_hd(HD);
    const size_t C = (size_t)NH * HD, W = (size_t)(NH + 2 * NKV) * HD, KVC = (size_t)NKV * HD;
    const float scale = 1.0f / sqrtf((float)HD);
    const int nqb = (T + ATT_BQ - 1) / ATT_BQ, nkb = (T + ATT_BK - 1) / ATT_BK;
    /* Pack every key/value head's K transposed, (nkb, HD, ATT_BK), and V rows,
     * (nkb*ATT_BK, HDP), once, so the query-block tasks below (of all G query
     * heads of the group) do not each gather them again. */
    const size_t kt_len = (size_t)nkb * HD * ATT_BK, head_len = kt_len + (size_t)nkb * ATT_BK * HDP;
    float *pack = cpu_scratch(be, (size_t)B * NKV * head_len);
    const long long npack = (long long)B * NKV * nkb;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (long long task = 0; task < npack; task++) {
        const int kb = (int)(task % nkb), bg = (int)(task / nkb), b = bg / NKV, g = bg % NKV;
        const float *kh = qkv + (size_t)b * T * W + C + (size_t)g * HD;
        const int j0 = kb * ATT_BK, nj = T - j0 < ATT_BK ? T - j0 : ATT_BK;
        float *hp = pack + (size_t)bg * head_len;
        float *vb = hp + kt_len + (size_t)j0 * HDP;
        gather_t(hp + (size_t)kb * HD * ATT_BK, kh, W, j0, nj, HD);
        gather_rows(vb, kh + KVC, W, j0, nj, HD, HDP);
        memset(vb + (size_t)nj * HDP, 0, sizeof(float) * (size_t)(ATT_BK - nj) * HDP);
    }
    const long long ntask = (long long)B * NH * nqb;
#pragma omp parallel num_threads(nt)
    {
        float *st = lt_malloc(sizeof(float) * ATT_BQ * ATT_BK);
        float *o = lt_malloc(sizeof(float) * (size_t)ATT_BQ * HDP);
        float m[ATT_BQ], l[ATT_BQ];
        /* later query blocks cost more: hand them out first, dynamically */
#pragma omp for schedule(dynamic, 1)
        for (long long task = 0; task < ntask; task++) {
            const int qb = nqb - 1 - (int)(task % nqb), bh = (int)(task / nqb);
            const int b = bh / NH, h = bh % NH;
            const float *qh = qkv + (size_t)b * T * W + (size_t)h * HD;
            const float *hp = pack + ((size_t)b * NKV + h / G) * head_len;
            const int i0 = qb * ATT_BQ, ni = T - i0 < ATT_BQ ? T - i0 : ATT_BQ;
            const int kend = i0 + ni; /* keys visible to this block */
            const int32_t *ks = kstart ? kstart + (size_t)b * T : NULL;
            for (int i = 0; i < ni; i++) m[i] = -INFINITY, l[i] = 0.0f;
            memset(o, 0, sizeof(float) * (size_t)ni * HDP);
            for (int j0 = ks ? ks[i0] / ATT_BK * ATT_BK : 0; j0 < kend; j0 += ATT_BK) {
                const int nj = kend - j0 < ATT_BK ? kend - j0 : ATT_BK;
                const float *kt = hp + (size_t)(j0 / ATT_BK) * HD * ATT_BK;
                const float *vb = hp + kt_len + (size_t)j0 * HDP;
                tile_abt(st, qh + (size_t)i0 * W, W, kt, ni, HD, scale);
                for (int i = 0; i < ni; i++) {
                    float *s = st + (size_t)i * ATT_BK, *oi = o + (size_t)i * HDP;
                    const int jl = i0 + i - j0 + 1 < nj ? i0 + i - j0 + 1 : nj; /* causal limit */
                    const int jlo = ks && ks[i0 + i] > j0 ? ks[i0 + i] - j0 : 0; /* document */
                    if (jl <= jlo) { /* row sees no key of this block */
                        memset(s, 0, sizeof(float) * nj);
                        continue;
                    }
                    float mb = s[jlo];
#pragma omp simd reduction(max : mb)
                    for (int j = jlo + 1; j < jl; j++) mb = s[j] > mb ? s[j] : mb;
                    const float mnew = mb > m[i] ? mb : m[i];
                    const float corr = cpu_expf(m[i] - mnew); /* 0 while m = -inf */
                    float psum = 0.0f;
#pragma omp simd reduction(+ : psum)
                    for (int j = jlo; j < jl; j++) {
                        float p = cpu_expf(s[j] - mnew);
                        s[j] = p;
                        psum += p;
                    }
                    for (int j = 0; j < jlo; j++) s[j] = 0.0f;
                    for (int j = jl; j < nj; j++) s[j] = 0.0f;
                    l[i] = l[i] * corr + psum;
                    m[i] = mnew;
                    for (int d = 0; d < HD; d++) oi[d] *= corr;
                }
                tile_acc(o, st, ATT_BK, 1, vb, ni, nj, HDP); /* o += P . V */
            }
            for (int i = 0; i < ni; i++) {
                float corr = 1.0f;
                if (sink) { /* the sink's logit: one more term of the sum, no value */
                    const float mnew = sink[h] > m[i] ? sink[h] : m[i];
                    corr = cpu_expf(m[i] - mnew);
                    l[i] = l[i] * corr + cpu_expf(sink[h] - mnew);
                    m[i] = mnew;
                }
                const float inv = corr / l[i];
                float *dst = out + ((size_t)b * T + i0 + i) * C + (size_t)h * HD;
                const float *oi = o + (size_t)i * HDP;
                for (int d = 0; d < HD; d++) dst[d] = cpu_store(bf16, oi[d] * inv);
                lse[(size_t)bh * T + i0 + i] = m[i] + logf(l[i]);
            }
        }
        free(st), free(o);
    }
}

/* Per-thread scratch of the backward. */
typedef struct {
    float *q, *dout, *k, *dq; /* whole head, (T, HDP) */
    float *kt, *vt;           /* key block transposed, (HD, ATT_BK) */
    float *dk, *dv;           /* key block accumulators, (ATT_BK, HDP) */
    float *p, *ds;            /* (ATT_BQ, ATT_BK) tiles */
    float *dd;                /* D_i, (T) */
} AttBwdScratch;

/* dst (B, T, NKV, HD) rows of stride W = sum over the G query heads of each
 * group, in head order, of part (B, NH, T, HD) fp32; rounded like act stores. */
static void sum_groups(LtBackend *be, float *dst, const float *part, int B, int T, int NH, int NKV,
                       int HD, size_t W) {
    const int G = NH / NKV, bf16 = cpu_is_bf16(be);
    const long long rows = (long long)B * T;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be))
    for (long long r = 0; r < rows; r++) {
        const int b = (int)(r / T), t = (int)(r % T);
        for (int g = 0; g < NKV; g++) {
            const float *src = part + (((size_t)b * NH + (size_t)g * G) * T + t) * HD;
            float *o = dst + (size_t)r * W + (size_t)g * HD;
            for (int d = 0; d < HD; d++) {
                float s = src[d];
                for (int i = 1; i < G; i++) s += src[(size_t)i * T * HD + d];
                o[d] = cpu_store(bf16, s);
            }
        }
    }
}

void cpu_attention_bwd(LtBackend *be, void *dqkv_, float *doffsets, const void *dout_,
                       const void *qkv_, const void *out_, const float *lse, const void *offsets,
                       const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD) {
    float *dqkv = dqkv_;
    const float *dout = dout_, *qkv = qkv_, *out = out_, *sink = offsets;
    check_call(kstart, window, B, T, NH, NKV);
    const int bf16 = cpu_is_bf16(be), G = NH / NKV;
    const int HDP = padded_hd(HD);
    const size_t C = (size_t)NH * HD, W = (size_t)(NH + 2 * NKV) * HD, KVC = (size_t)NKV * HD;
    const size_t th = (size_t)(T > 0 ? T : 1) * HDP, nkv = (size_t)B * NH * T * HD;
    const float scale = 1.0f / sqrtf((float)HD);
    const int nhead = B * NH;
    /* G > 1: fp32 dK | dV partials per query head, (2, B, NH, T, HD) */
    float *part = G > 1 ? cpu_scratch(be, 2 * nkv + (size_t)nhead) : NULL;
    /* each (batch, head)'s share of d offsets, (B, NH); G == 1: part is not used */
    float *dsink = NULL;
    if (doffsets) dsink = part ? part + 2 * nkv : cpu_scratch(be, (size_t)nhead);
#pragma omp parallel num_threads(cpu_nthreads(be))
    {
        AttBwdScratch w;
        w.q = lt_malloc(sizeof(float) * th), w.dout = lt_malloc(sizeof(float) * th);
        w.k = lt_malloc(sizeof(float) * th), w.dq = lt_malloc(sizeof(float) * th);
        w.kt = lt_malloc(sizeof(float) * (size_t)HD * ATT_BK);
        w.vt = lt_malloc(sizeof(float) * (size_t)HD * ATT_BK);
        w.dk = lt_malloc(sizeof(float) * (size_t)ATT_BK * HDP);
        w.dv = lt_malloc(sizeof(float) * (size_t)ATT_BK * HDP);
        w.p = lt_malloc(sizeof(float) * ATT_BQ * ATT_BK);
        w.ds = lt_malloc(sizeof(float) * ATT_BQ * ATT_BK);
        w.dd = lt_malloc(sizeof(float) * (size_t)(T > 0 ? T : 1));
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < nhead; bh++) {
            const int b = bh / NH, h = bh % NH;
            const size_t qoff = (size_t)b * T * W + (size_t)h * HD;
            const size_t koff = (size_t)b * T * W + C + (size_t)(h / G) * HD;
            const size_t aoff = (size_t)b * T * C + (size_t)h * HD; /* into out / dout */
            const float *qh = qkv + qoff, *kh = qkv + koff, *vh = kh + KVC, *lh = lse + (size_t)bh * T;
            const int32_t *ks = kstart ? kstart + (size_t)b * T : NULL;
            /* this head's dK, dV rows: into dqkv (G == 1) or its fp32 partials */
            float *dkh = G > 1 ? part + (size_t)bh * T * HD : dqkv + koff;
            float *dvh = G > 1 ? dkh + nkv : dqkv + koff + KVC;
            const size_t dstride = G > 1 ? (size_t)HD : W;
            const int dround = G > 1 ? 0 : bf16;
            gather_rows(w.q, qh, W, 0, T, HD, HDP);
            gather_rows(w.k, kh, W, 0, T, HD, HDP);
            gather_rows(w.dout, dout + aoff, C, 0, T, HD, HDP);
            memset(w.dq, 0, sizeof(float) * th);
            for (int t = 0; t < T; t++) {
                const float *o = out + aoff + (size_t)t * C, *g = w.dout + (size_t)t * HDP;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int d = 0; d < HD; d++) s += g[d] * o[d];
                w.dd[t] = s;
            }
            if (dsink) {
                float ds = 0.0f;
                for (int t = 0; t < T; t++) ds -= cpu_expf(sink[h] - lh[t]) * w.dd[t];
                dsink[bh] = ds;
            }
            for (int j0 = 0; j0 < T; j0 += ATT_BK) {
                const int nj = T - j0 < ATT_BK ? T - j0 : ATT_BK;
                gather_t(w.kt, kh, W, j0, nj, HD);
                gather_t(w.vt, vh, W, j0, nj, HD);
                memset(w.dk, 0, sizeof(float) * (size_t)ATT_BK * HDP);
                memset(w.dv, 0, sizeof(float) * (size_t)ATT_BK * HDP);
                for (int i0 = j0 / ATT_BQ * ATT_BQ; i0 < T; i0 += ATT_BQ) {
                    if (ks && ks[i0] >= j0 + nj) break; /* later queries: later documents */
                    const int ni = T - i0 < ATT_BQ ? T - i0 : ATT_BQ;
                    tile_abt(w.p, qh + (size_t)i0 * W, W, w.kt, ni, HD, scale);         /* S */
                    tile_abt(w.ds, w.dout + (size_t)i0 * HDP, HDP, w.vt, ni, HD, 1.0f); /* dP */
                    for (int i = 0; i < ni; i++) {
                        float *p = w.p + (size_t)i * ATT_BK, *ds = w.ds + (size_t)i * ATT_BK;
                        int jl = i0 + i - j0 + 1 < nj ? i0 + i - j0 + 1 : nj;
                        jl = jl > 0 ? jl : 0;
                        int jlo = ks && ks[i0 + i] > j0 ? ks[i0 + i] - j0 : 0; /* document */
                        jlo = jlo < jl ? jlo : jl;
                        const float li = lh[i0 + i], di = w.dd[i0 + i];
#pragma omp simd
                        for (int j = jlo; j < jl; j++) {
                            p[j] = cpu_expf(p[j] - li);
                            ds[j] = scale * p[j] * (ds[j] - di);
                        }
                        for (int j = 0; j < jlo; j++) p[j] = ds[j] = 0.0f;
                        for (int j = jl; j < nj; j++) p[j] = ds[j] = 0.0f;
                    }
                    tile_acc(w.dv, w.p, 1, ATT_BK, w.dout + (size_t)i0 * HDP, nj, ni, HDP);
                    tile_acc(w.dk, w.ds, 1, ATT_BK, w.q + (size_t)i0 * HDP, nj, ni, HDP);
                    tile_acc(w.dq + (size_t)i0 * HDP, w.ds, ATT_BK, 1, w.k + (size_t)j0 * HDP, ni, nj, HDP);
                }
                for (int j = 0; j < nj; j++) {
                    float *dk = dkh + (size_t)(j0 + j) * dstride, *dv = dvh + (size_t)(j0 + j) * dstride;
                    for (int d = 0; d < HD; d++) {
                        dk[d] = cpu_store(dround, w.dk[(size_t)j * HDP + d]);
                        dv[d] = cpu_store(dround, w.dv[(size_t)j * HDP + d]);
                    }
                }
            }
            for (int t = 0; t < T; t++) {
                float *dst = dqkv + qoff + (size_t)t * W;
                for (int d = 0; d < HD; d++) dst[d] = cpu_store(bf16, w.dq[(size_t)t * HDP + d]);
            }
        }
        free(w.q), free(w.dout), free(w.k), free(w.dq), free(w.kt), free(w.vt);
        free(w.dk), free(w.dv), free(w.p), free(w.ds), free(w.dd);
    }
    if (G > 1) {
        sum_groups(be, dqkv + C, part, B, T, NH, NKV, HD, W);
        sum_groups(be, dqkv + C + KVC, part + nkv, B, T, NH, NKV, HD, W);
    }
    if (dsink)
        for (int h = 0; h < NH; h++) {
            float ds = 0.0f;
            for (int b = 0; b < B; b++) ds += dsink[(size_t)b * NH + h];
            doffsets[h] += ds;
        }
}
