/* gemm.cu - linear layers through cuBLASLt.
 *
 * Design note. cuBLASLt is column-major; a row-major (R, K) matrix is read
 * as a column-major (K, R) one with ld = K, so every product below is
 * written for the transposed problem:
 *   forward  out^T(OC,N)  = w^T-stored(C,OC)^T . inp^T(C,N)   m=OC n=N  k=C  (A op T)
 *   dinp     dinp^T(C,N)  = w-stored(C,OC) . dout^T(OC,N)     m=C  n=N  k=OC (A op N)
 *   dweight  dw^T(C,OC) += inp^T(C,N) . dout^T-stored(OC,N)^T m=C  n=OC k=N  (B op T)
 * Epilogues: BIAS / GELU_AUX_BIAS (aux = pre-GeLU, ld = OC) in the forward,
 * DGELU (aux = gelu_pre, ld = C) for dinp; the GeLU ones in bf16 only (fp32,
 * the precision compared with the CPU at 1e-5, applies GeLU / dGeLU with our
 * own kernel, since the epilogue's tanh may be coarser). The dweight GEMM takes bf16 A/B
 * and an fp32 C = D with beta = 1 (CUBLAS_COMPUTE_32F, scale fp32; a listed
 * cuBLASLt type combination), so weight gradients accumulate in fp32 in
 * place. fp32 mode uses CUBLAS_COMPUTE_32F with fp32 data, which never uses
 * TF32 (that needs CUBLAS_COMPUTE_32F_FAST_TF32).
 * dbias: in bf16 the dweight GEMM also produces the column sums of dout with
 * the BGRADB epilogue (reduction over k = N; the bias gradient has the C type,
 * fp32). The epilogue overwrites its vector while lattice's dbias accumulates
 * (+=) over micro batches, so it writes into the stream's scratch and add_f32
 * adds that into dbias (4 * OC bytes each way instead of a second read of
 * dout, 2 * N * OC bytes). fp32 (compared with the CPU at 1e-5), a NULL dw,
 * LT_CUDA_GEMM=plain, or no algorithm for the epilogue take the column-sum
 * kernel of reduce.cu (one read of dout, deterministic). UNVERIFIED without a
 * GPU: the host emulation has no cuBLASLt, so the BGRADB path (its support for
 * this type combination and op(B) = T, its result and its bitwise
 * reproducibility) is first checked by tests/gpu/test_gpu_ops' linear case
 * (dbias against the CPU, and a second run bit for bit).
 * When cuBLASLt has no algorithm for an epilogue (aux ld not a multiple of 8,
 * bias not 16-byte aligned, or the heuristic returns nothing) we run the
 * plain GEMM and apply bias / GeLU / dGeLU with an elementwise kernel.
 * Heuristic results are cached per (shape, types, epilogue, alignment). */
#include <string.h>

#include "common.cuh"

typedef struct {
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A; /* stored (ta==N ? m : k) x (ta==N ? k : m), column-major */
    int lda;
    const void *B; /* stored (tb==N ? k : n) x (tb==N ? n : k) */
    int ldb;
    void *D; /* m x n; also C when beta != 0 */
    int ldd;
    cudaDataType_t ab_type, d_type;
    float beta;
    cublasLtEpilogue_t epi;
    const void *bias; /* length m, type d_type; BGRADB: length n, written */
    const void *aux;  /* m x n, ld = ldd, type d_type */
} GemmArgs;

/* Largest power of two (<= 256) dividing both the address and the ld in bytes. */
static uint32_t align_of(const void *p, int ld, int esize) {
    uint64_t v = (uint64_t)(uintptr_t)p | (ld > 0 ? (uint64_t)ld * (uint64_t)esize : 0) | 256u;
    return (uint32_t)(v & (~v + 1));
}
static int type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
static int lg2(uint32_t a) {
    int r = 0;
    while (a > 1) a >>= 1, r++;
    return r;
}

static GemmCacheEntry *cache_find(CudaImpl *im, const uint64_t key[4]) {
    for (int i = 0; i < LT_GEMM_CACHE; i++)
        if (memcmp(im->cache[i].key, key, sizeof(uint64_t) * 4) == 0) return &im->cache[i];
    return NULL;
}

/* Runs the GEMM; returns 0 (and does nothing) when cuBLASLt offers no algorithm. */
static int gemm_run(LtBackend *be, const GemmArgs *g) {
    CudaImpl *im = cu_impl(be);
    const int ab = type_size(g->ab_type), ds = type_size(g->d_type);
    uint32_t alA = align_of(g->A, g->lda, ab), alB = align_of(g->B, g->ldb, ab);
    uint32_t alD = align_of(g->D, g->ldd, ds);
    uint32_t alBias = g->bias ? align_of(g->bias, 0, ds) : 256;
    uint32_t alAux = g->aux ? align_of(g->aux, g->ldd, ds) : 256;
    uint64_t key[4];
    key[0] = (uint64_t)(uint32_t)g->m | ((uint64_t)(uint32_t)g->n << 32);
    key[1] = (uint64_t)(uint32_t)g->k | ((uint64_t)g->ta << 32) | ((uint64_t)g->tb << 34) |
             ((uint64_t)(g->ab_type == CUDA_R_32F) << 36) |
             ((uint64_t)(g->d_type == CUDA_R_32F) << 37) | ((uint64_t)(g->beta != 0.f) << 38) |
             ((uint64_t)g->epi << 40);
    key[2] = (uint64_t)(uint32_t)g->lda | ((uint64_t)(uint32_t)g->ldb << 32);
    key[3] = (uint64_t)(uint32_t)g->ldd |
             ((uint64_t)(lg2(alA) | lg2(alB) << 4 | lg2(alD) << 8 | lg2(alBias) << 12 |
                         lg2(alAux) << 16)
              << 32) |
             ((uint64_t)1 << 63); /* never all-zero: empty slots do not match */

    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(CUBLAS(cublasLtMatmulDescCreate)(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = g->ta, tb = g->tb;
    CUBLAS_CHECK(CUBLAS(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(CUBLAS(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = g->epi;
    CUBLAS_CHECK(CUBLAS(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->bias)
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &g->bias, sizeof(void *)));
    if (g->aux) {
        int64_t ldaux = g->ldd;
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &g->aux, sizeof(void *)));
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &ldaux, sizeof ldaux));
    }
    const int arows = g->ta == CUBLAS_OP_N ? g->m : g->k, acols = g->ta == CUBLAS_OP_N ? g->k : g->m;
    const int brows = g->tb == CUBLAS_OP_N ? g->k : g->n, bcols = g->tb == CUBLAS_OP_N ? g->n : g->k;
    CUBLAS_CHECK(CUBLAS(cublasLtMatrixLayoutCreate)(&la, g->ab_type, arows, acols, g->lda));
    CUBLAS_CHECK(CUBLAS(cublasLtMatrixLayoutCreate)(&lb, g->ab_type, brows, bcols, g->ldb));
    CUBLAS_CHECK(CUBLAS(cublasLtMatrixLayoutCreate)(&ld, g->d_type, g->m, g->n, g->ldd));

    size_t ws_bytes = 0;
    void *ws = cu_workspace(be, &ws_bytes);
    GemmCacheEntry *ce = cache_find(im, key);
    if (!ce) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulPreferenceCreate)(&pref));
        uint64_t wsb = ws_bytes;
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulPreferenceSetAttribute)(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulPreferenceSetAttribute)(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alA, sizeof alA));
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulPreferenceSetAttribute)(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alB, sizeof alB));
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulPreferenceSetAttribute)(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alD, sizeof alD));
        CUBLAS_CHECK(CUBLAS(cublasLtMatmulPreferenceSetAttribute)(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alD, sizeof alD));
        cublasLtMatmulHeuristicResult_t res;
        memset(&res, 0, sizeof res);
        int nres = 0;
        cublasStatus_t st = CUBLAS(cublasLtMatmulAlgoGetHeuristic)(im->lt, desc, la, lb, ld, ld, pref, 1,
                                                           &res, &nres);
        CUBLAS(cublasLtMatmulPreferenceDestroy)(pref);
        ce = &im->cache[im->cache_next];
        im->cache_next = (im->cache_next + 1) % LT_GEMM_CACHE;
        memcpy(ce->key, key, sizeof key);
        if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
            lt_fatal("cublasLtMatmulAlgoGetHeuristic failed with status %d (%dx%dx%d, epilogue %d)",
                     (int)st, g->m, g->n, g->k, (int)g->epi);
        ce->valid = st == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS;
        if (ce->valid) ce->algo = res.algo;
    }
    int ran = 0;
    if (ce->valid) {
        const float alpha = 1.f, beta = g->beta;
        cublasStatus_t st = CUBLAS(cublasLtMatmul)(im->lt, desc, &alpha, g->A, la, g->B, lb, &beta, g->D,
                                           ld, g->D, ld, &ce->algo, ws, ws_bytes, cu_stream(be));
        if (st == CUBLAS_STATUS_SUCCESS) {
            ran = 1;
        } else if (g->epi != CUBLASLT_EPILOGUE_DEFAULT &&
                   (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)) {
            ce->valid = 0; /* refused at launch: use the plain GEMM + kernel from now on */
        } else {
            lt_fatal("cublasLtMatmul failed with status %d (%dx%dx%d, epilogue %d)", (int)st,
                     g->m, g->n, g->k, (int)g->epi);
        }
    }
    CUBLAS(cublasLtMatrixLayoutDestroy)(la);
    CUBLAS(cublasLtMatrixLayoutDestroy)(lb);
    CUBLAS(cublasLtMatrixLayoutDestroy)(ld);
    CUBLAS(cublasLtMatmulDescDestroy)(desc);
    return ran;
}

static void gemm_plain(LtBackend *be, GemmArgs *g) {
    g->epi = CUBLASLT_EPILOGUE_DEFAULT;
    g->bias = NULL;
    g->aux = NULL;
    if (!gemm_run(be, g))
        lt_fatal("cuBLASLt has no algorithm for a %dx%dx%d GEMM (op %d/%d, types %d/%d)", g->m,
                 g->n, g->k, (int)g->ta, (int)g->tb, (int)g->ab_type, (int)g->d_type);
}

static int ptr_aligned(const void *p, uintptr_t a) { return ((uintptr_t)p % a) == 0; }

/* ======================= op entries ======================= */

// out (N, OC) = inp (N, C) . w (OC, C)^T + bias (OC); optional GeLU with pre_gelu (N, OC).
void cu_linear_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp, const void *w,
                   const void *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    const cudaDataType_t at = cu_is_bf16(be) ? CUDA_R_16BF : CUDA_R_32F;
    GemmArgs g;
    memset(&g, 0, sizeof g);
    g.ta = CUBLAS_OP_T;
    g.tb = CUBLAS_OP_N;
    g.m = OC;
    g.n = N;
    g.k = C;
    g.A = w;
    g.lda = C;
    g.B = inp;
    g.ldb = C;
    g.ldd = OC;
    g.ab_type = at;
    g.d_type = at;
    g.beta = 0.f;
    if (C <= 0) { /* empty reduction: out = bias (or 0) */
        be->ops->zero(be, pre_gelu ? pre_gelu : out, (size_t)N * OC * be->act_size);
        cu_bias_gelu(be, out, pre_gelu, pre_gelu ? pre_gelu : out, bias, N, OC, pre_gelu != NULL);
        return;
    }
    /* cuBLASLt's GELU epilogues may round tanh more coarsely than fp32's
     * tolerance against the CPU allows: fp32 (the reference precision) takes
     * the plain GEMM + our kernel, bf16 (the fast path) the epilogue */
    const int try_epi = !cu_impl(be)->gemm_no_epilogue && (!bias || ptr_aligned(bias, 16)) &&
                        (!pre_gelu || (cu_is_bf16(be) && OC % 8 == 0 && ptr_aligned(pre_gelu, 16)));
    if (pre_gelu) {
        g.D = out;
        g.aux = pre_gelu;
        g.bias = bias;
        g.epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        if (try_epi && gemm_run(be, &g)) return;
        g.D = pre_gelu;
        gemm_plain(be, &g);
        cu_bias_gelu(be, out, pre_gelu, pre_gelu, bias, N, OC, 1);
        return;
    }
    g.D = out;
    if (bias) {
        g.bias = bias;
        g.epi = CUBLASLT_EPILOGUE_BIAS;
        if (try_epi && gemm_run(be, &g)) return;
        gemm_plain(be, &g);
        cu_bias_gelu(be, out, NULL, out, bias, N, OC, 0);
        return;
    }
    gemm_plain(be, &g);
}

// dinp (N, C) = dout (N, OC) . w (OC, C) [* gelu'(gelu_pre)]; dw (OC, C) += dout^T . inp;
// dbias (OC) += colsum(dout).
void cu_linear_bwd(LtBackend *be, void *dinp, float *dw, float *dbias, const void *dout,
                   const void *inp, const void *w, const void *gelu_pre, int N, int C, int OC) {
    const cudaDataType_t at = cu_is_bf16(be) ? CUDA_R_16BF : CUDA_R_32F;
    if (dinp && N > 0 && C > 0) {
        if (OC <= 0) {
            be->ops->zero(be, dinp, (size_t)N * C * be->act_size);
        } else {
            GemmArgs g;
            memset(&g, 0, sizeof g);
            g.ta = CUBLAS_OP_N;
            g.tb = CUBLAS_OP_N;
            g.m = C;
            g.n = N;
            g.k = OC;
            g.A = w;
            g.lda = C;
            g.B = dout;
            g.ldb = OC;
            g.D = dinp;
            g.ldd = C;
            g.ab_type = at;
            g.d_type = at;
            int done = 0;
            if (gelu_pre && cu_is_bf16(be) && !cu_impl(be)->gemm_no_epilogue && C % 8 == 0 &&
                ptr_aligned(gelu_pre, 16)) { /* (fp32: see cu_linear_fwd) */
                g.epi = CUBLASLT_EPILOGUE_DGELU;
                g.aux = gelu_pre;
                done = gemm_run(be, &g);
            }
            if (!done) {
                gemm_plain(be, &g);
                if (gelu_pre) cu_dgelu_inplace(be, dinp, gelu_pre, (size_t)N * C);
            }
        }
    }
    int dbias_done = 0;
    if (dw && N > 0 && C > 0 && OC > 0) {
        GemmArgs g;
        memset(&g, 0, sizeof g);
        g.ta = CUBLAS_OP_N;
        g.tb = CUBLAS_OP_T;
        g.m = C;
        g.n = OC;
        g.k = N;
        g.A = inp;
        g.lda = C;
        g.B = dout;
        g.ldb = OC;
        g.D = dw;
        g.ldd = C;
        g.ab_type = at;
        g.d_type = CUDA_R_32F;
        g.beta = 1.f;
        if (dbias && cu_is_bf16(be) && !cu_impl(be)->gemm_no_epilogue) {
            float *bgrad = (float *)cu_scratch(be, (size_t)OC * sizeof(float));
            g.epi = CUBLASLT_EPILOGUE_BGRADB;
            g.bias = bgrad;
            dbias_done = gemm_run(be, &g);
            if (dbias_done) cu_add_f32(be, dbias, bgrad, (size_t)OC);
        }
        if (!dbias_done) gemm_plain(be, &g);
    }
    if (dbias && !dbias_done && N > 0 && OC > 0) cu_colsum_add(be, dbias, dout, N, OC);
}

/* ======================= grouped linears (MoE experts) ======================= */
/* Design note. The experts' GEMMs of one MoE layer go to cuBLAS's
 * cublasGemmGroupedBatchedEx (cuBLAS >= 12.5): one call runs every non-empty
 * group's GEMM, each its own cuBLAS group (the row counts differ), with the
 * shapes of the design note above. Host arrays hold the per-group sizes; the
 * A, B, C pointer arrays must be device memory: built on the host and copied
 * into the stream's scratch ahead of the call on the same stream (from pageable
 * memory: the copy may wait until the source is staged).
 * Type combinations: cuBLAS's documentation lists, for CUBLAS_COMPUTE_32F, A = B
 * = C = bf16 and A = B = C = fp32 (and fp16), not bf16 A/B with an fp32 C. So
 * the forward and dinp GEMMs are grouped in both precisions, the weight
 * gradients (fp32, accumulated in place) only in fp32; in bf16 they run one
 * cuBLASLt GEMM per group (cu_linear_bwd), said once in the log.
 * Biases and GeLU: groups with either (the GPT architecture's experts) run
 * per group through cu_linear_fwd / cu_linear_bwd, whose cuBLASLt epilogues
 * fuse them into the GEMM; grouped, they would need a second pass over the
 * (rows, F) activations and the bias gradient's column sums. The bias-free
 * SwiGLU experts (Llama, Mixtral, the models MoE is trained with) take the
 * grouped call. The per-group path is also taken for an empty reduction (C
 * or OC 0), and, each said once in the log, for bf16 rows off the 16-byte
 * grid and when cuBLAS refuses the call; model.moe_grouped_gemm=false (the
 * default; be->moe_gemm_per_expert) sends every group there: cuBLASLt picks
 * its kernel per shape, and on an H200 GPT-OSS's 4-layer slice took 1.25x as
 * long in forward and backward with the grouped call as per expert
 * (bench/2026-11-28-h200-fourth-draw.md; gpu_check's moe phase times both).
 * Both paths are checked against each other and the CPU by
 * tests/gpu/test_gpu_ops' linear_group case (passing on the H200 draws). */

/* One log line per reason per process, for the paths that leave the grouped
 * call. */
static void group_note(int *said, const char *why) {
    if (*said) return;
    *said = 1;
    lt_log("cuda: MoE experts' GEMMs: %s; those run one cuBLASLt GEMM per expert\n", why);
}

/* bf16 matrices in a grouped call must be aligned as cuBLAS asks: 16 bytes
 * ideally, and otherwise by a rule on k. We take only the 16-byte case (what
 * the experts' rows have when C and F are multiples of 8) and leave the rest to
 * the per-group path, whose cuBLASLt calls take any alignment; an unaligned
 * grouped call would fail on the device, not with a status. */
static int group_aligned(LtBackend *be, const void *A, const void *B, const void *C) {
    static int said;
    if (!cu_is_bf16(be) || (ptr_aligned(A, 16) && ptr_aligned(B, 16) && ptr_aligned(C, 16)))
        return 1;
    group_note(&said, "bf16 rows off cuBLAS's grouped-GEMM alignment");
    return 0;
}

/* The groups' problems for one grouped call: C_p (m, n_p) = op(A_p) op(B_p) +
 * beta C_p, column-major, sizes per problem; np of at most cap problems. A, B
 * and C are one block of 3 cap pointers, uploaded as it is. */
typedef struct {
    int np, cap;
    cublasOperation_t *ta, *tb;
    int *m, *n, *k, *lda, *ldb, *ldc, *size;
    float *alpha, *beta;
    const void **A, **B;
    void **C;
} GroupCall;

static GroupCall group_call_new(int G) {
    const size_t g = (size_t)(G > 0 ? G : 1);
    GroupCall c;
    memset(&c, 0, sizeof c);
    c.cap = (int)g;
    c.ta = (cublasOperation_t *)lt_malloc(sizeof(cublasOperation_t) * 2 * g);
    c.tb = c.ta + g;
    c.m = (int *)lt_malloc(sizeof(int) * 7 * g);
    c.n = c.m + g, c.k = c.n + g, c.lda = c.k + g, c.ldb = c.lda + g, c.ldc = c.ldb + g;
    c.size = c.ldc + g;
    c.alpha = (float *)lt_malloc(sizeof(float) * 2 * g);
    c.beta = c.alpha + g;
    c.A = (const void **)lt_malloc(sizeof(void *) * 3 * g);
    c.B = c.A + g;
    c.C = (void **)(c.B + g);
    return c;
}
static void group_call_free(GroupCall *c) {
    free(c->ta), free(c->m), free(c->alpha), free((void *)c->A);
}
static void group_add(GroupCall *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                      int k, const void *A, int lda, const void *B, int ldb, void *C, int ldc,
                      float beta) {
    const int p = c->np++;
    c->ta[p] = ta, c->tb[p] = tb, c->m[p] = m, c->n[p] = n, c->k[p] = k;
    c->A[p] = A, c->lda[p] = lda, c->B[p] = B, c->ldb[p] = ldb, c->C[p] = C, c->ldc[p] = ldc;
    c->size[p] = 1, c->alpha[p] = 1.f, c->beta[p] = beta;
}

/* Runs c's problems in one grouped call, A and B of type ab and C of type ct;
 * 0 (nothing run) when cuBLAS lacks the call or refuses it. */
static int group_run(LtBackend *be, const GroupCall *c, cudaDataType_t ab, cudaDataType_t ct) {
#if CUBLAS_VERSION >= 120500
    CudaImpl *im = cu_impl(be);
    if (c->np == 0) return 1;
    /* not while capturing: a graph would copy the pointer arrays again from
     * host memory freed by then (and creating the handle allocates) */
    if (im->capturing) return 0;
    if (!im->blas) CUBLAS_CHECK(CUBLAS(cublasCreate)(&im->blas));
    size_t ws_bytes = 0;
    void *ws = cu_workspace(be, &ws_bytes);
    CUBLAS_CHECK(CUBLAS(cublasSetStream)(im->blas, cu_stream(be))); /* (resets the workspace) */
    CUBLAS_CHECK(CUBLAS(cublasSetWorkspace)(im->blas, ws, ws_bytes));
    const size_t bytes = sizeof(void *) * 3 * (size_t)c->cap;
    void **dp = (void **)cu_scratch(be, bytes);
    CU_CHECK(cudaMemcpyAsync(dp, c->A, bytes, cudaMemcpyHostToDevice, cu_stream(be)));
    const cublasStatus_t st = CUBLAS(cublasGemmGroupedBatchedEx)(
        im->blas, c->ta, c->tb, c->m, c->n, c->k, c->alpha, (const void *const *)dp, ab, c->lda,
        (const void *const *)(dp + c->cap), ab, c->ldb, c->beta, dp + 2 * c->cap, ct, c->ldc,
        c->np, c->size, CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_SUCCESS) return 1;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
        lt_fatal("cublasGemmGroupedBatchedEx failed with status %d (%d groups)", (int)st, c->np);
    static int said_refused;
    group_note(&said_refused, "cuBLAS refused the grouped GEMM");
    return 0;
#else
    static int said_old;
    group_note(&said_old, "this build's cuBLAS has no grouped GEMM (12.5 or later has)");
    return 0;
#endif
}

/* Group g's first row in a (rows, cols) act buffer. */
static const void *grow(LtBackend *be, const void *p, const int *off, int g, int cols) {
    return (const char *)p + (size_t)off[g] * (size_t)cols * be->act_size;
}
static int any_set(const void *const *p, int G) {
    for (int g = 0; p && g < G; g++)
        if (p[g]) return 1;
    return 0;
}

// Group g: out rows off[g].. (n_g, OC) = inp rows (n_g, C) . w[g] (OC, C)^T [+ bias[g]] [GeLU].
void cu_linear_group_fwd(LtBackend *be, void *out, void *pre_gelu, const void *inp,
                         const void *const *w, const void *const *bias, const int *off, int G,
                         int C, int OC) {
    const cudaDataType_t at = cu_is_bf16(be) ? CUDA_R_16BF : CUDA_R_32F;
    int grouped = !be->moe_gemm_per_expert && /* model.moe_grouped_gemm */
                  !pre_gelu && !any_set(bias, G) && C > 0 && OC > 0;
    GroupCall c = group_call_new(G);
    for (int g = 0; grouped && g < G; g++) {
        const int n = off[g + 1] - off[g];
        if (n <= 0) continue;
        const void *x = grow(be, inp, off, g, C);
        void *y = (void *)grow(be, out, off, g, OC);
        if (!(grouped = group_aligned(be, w[g], x, y))) break;
        group_add(&c, CUBLAS_OP_T, CUBLAS_OP_N, OC, n, C, w[g], C, x, C, y, OC, 0.f);
    }
    if (!grouped || !group_run(be, &c, at, at)) {
        for (int g = 0; g < G; g++) {
            const int n = off[g + 1] - off[g];
            if (n <= 0) continue;
            void *pre = pre_gelu ? (void *)grow(be, pre_gelu, off, g, OC) : NULL;
            cu_linear_fwd(be, (void *)grow(be, out, off, g, OC), pre, grow(be, inp, off, g, C),
                          w[g], bias ? bias[g] : NULL, n, C, OC);
        }
    }
    group_call_free(&c);
}

// Group g: dinp rows = dout rows . w[g] [* gelu'(gelu_pre rows)]; dw[g] += dout^T . inp;
// dbias[g] += colsum(dout rows).
void cu_linear_group_bwd(LtBackend *be, void *dinp, float *const *dw, float *const *dbias,
                         const void *dout, const void *inp, const void *const *w,
                         const void *gelu_pre, const int *off, int G, int C, int OC) {
    const int bf = cu_is_bf16(be);
    const cudaDataType_t at = bf ? CUDA_R_16BF : CUDA_R_32F;
    const int plain = !gelu_pre && !any_set((const void *const *)dbias, G) && C > 0 && OC > 0;
    const int group = plain && !be->moe_gemm_per_expert; /* model.moe_grouped_gemm */
    /* dinp (C, n_g) = w-stored (C, OC) . dout^T (OC, n_g) */
    int gi = group && dinp, gw = group && dw && !bf;
    GroupCall c = group_call_new(G);
    for (int g = 0; gi && g < G; g++) {
        const int n = off[g + 1] - off[g];
        if (n <= 0) continue;
        const void *dy = grow(be, dout, off, g, OC);
        void *dx = (void *)grow(be, dinp, off, g, C);
        if (!(gi = group_aligned(be, w[g], dy, dx))) break;
        group_add(&c, CUBLAS_OP_N, CUBLAS_OP_N, C, n, OC, w[g], C, dy, OC, dx, C, 0.f);
    }
    if (gi) gi = group_run(be, &c, at, at);
    /* dw^T (C, OC) += inp^T (C, n_g) . dout-stored (OC, n_g)^T: fp32 only (above) */
    static int said_bf16_dw;
    if (group && dw && bf && any_set((const void *const *)dw, G))
        group_note(&said_bf16_dw, "cuBLAS's grouped GEMM has no bf16 x bf16 -> fp32 "
                                  "(the weight gradients)");
    c.np = 0;
    for (int g = 0; gw && g < G; g++) {
        const int n = off[g + 1] - off[g];
        if (n <= 0 || !dw[g]) continue;
        group_add(&c, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, n, grow(be, inp, off, g, C), C,
                  grow(be, dout, off, g, OC), OC, dw[g], C, 1.f);
    }
    if (gw) gw = group_run(be, &c, CUDA_R_32F, CUDA_R_32F);
    /* what is left, per group (a bias gradient keeps every GEMM there) */
    const int left_dx = dinp && !gi, left_dw = dw && !gw, left_db = dbias && !plain;
    for (int g = 0; g < G && (left_dx || left_dw || left_db); g++) {
        const int n = off[g + 1] - off[g];
        if (n <= 0) continue;
        void *dx = left_dx ? (void *)grow(be, dinp, off, g, C) : NULL;
        const void *gp = dx && gelu_pre ? grow(be, gelu_pre, off, g, C) : NULL;
        cu_linear_bwd(be, dx, left_dw ? dw[g] : NULL, dbias ? dbias[g] : NULL,
                      grow(be, dout, off, g, OC), grow(be, inp, off, g, C), w[g], gp, n, C, OC);
    }
    group_call_free(&c);
}

/* ======================= MoE router ======================= */
/* The router's GEMMs have fp32 outputs from act inputs (backend.h). cuBLASLt
 * takes A and B of one type, so the backward, whose products pair the fp32
 * dlogits with an act tensor, widens that tensor to fp32 first (bf16: w whole,
 * x in chunks of MOE_ROUTER_CHUNK floats) and runs fp32 GEMMs; dx gets its
 * fp32 product chunk by chunk through cu_act_add_f32 (one rounding). The
 * chunking depends only on the shapes, so the sums are reproducible. */
#define MOE_ROUTER_CHUNK ((size_t)16 << 20) /* floats of widened x / dx product per chunk */

/* D (m, n; fp32, column-major) = op(A) . op(B) [+ D when beta = 1] */
static void router_gemm(LtBackend *be, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                        int k, const void *A, int lda, const void *B, int ldb, float *D, int ldd,
                        cudaDataType_t ab, float beta) {
    GemmArgs g;
    memset(&g, 0, sizeof g);
    g.ta = ta;
    g.tb = tb;
    g.m = m, g.n = n, g.k = k;
    g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.D = D, g.ldd = ldd;
    g.ab_type = ab;
    g.d_type = CUDA_R_32F;
    g.beta = beta;
    gemm_plain(be, &g);
}

// logits (N, E) = x (N, C) . w (E, C)^T (+ bias), fp32 output.
void cu_moe_router_fwd(LtBackend *be, float *logits, const void *x, const void *w,
                       const void *bias, int N, int C, int E) {
    if (N <= 0 || E <= 0) return;
    if (C <= 0)
        CU_CHECK(cudaMemsetAsync(logits, 0, (size_t)N * E * sizeof(float), cu_stream(be)));
    else /* logits^T (E, N) = w-stored (C, E)^T . x^T (C, N) */
        router_gemm(be, CUBLAS_OP_T, CUBLAS_OP_N, E, N, C, w, C, x, C, logits, E,
                    cu_is_bf16(be) ? CUDA_R_16BF : CUDA_R_32F, 0.f);
    if (bias) cu_moe_router_bias_fwd(be, logits, bias, N, E);
}

// dx (N, C) += dlogits (N, E) . w (E, C); dw (E, C) += dlogits^T . x; dbias += colsum(dlogits).
void cu_moe_router_bwd(LtBackend *be, void *dx, float *dw, float *dbias, const float *dlogits,
                       const void *x, const void *w, int N, int C, int E) {
    if (N <= 0 || E <= 0) return;
    if (dbias) cu_moe_router_bias_bwd(be, dbias, dlogits, N, E);
    if (C <= 0 || (!dx && !dw)) return;
    const int bf = cu_is_bf16(be);
    size_t rows = MOE_ROUTER_CHUNK / (size_t)C;
    rows = rows < 1 ? 1 : rows > (size_t)N ? (size_t)N : rows;
    const size_t wn = bf && dx ? cu_align_up((size_t)E * C, 64) : 0;
    float *ws = (float *)cu_scratch(be, (wn + rows * C) * sizeof(float));
    float *w32 = ws, *t = ws + wn;
    if (wn) cu_act_to_f32(be, w32, w, (size_t)E * C);
    for (size_t r0 = 0; r0 < (size_t)N; r0 += rows) {
        const int n = (int)((size_t)N - r0 < rows ? (size_t)N - r0 : rows);
        if (dx) { /* t^T (C, n) = w-stored (C, E) . dlogits^T (E, n) */
            router_gemm(be, CUBLAS_OP_N, CUBLAS_OP_N, C, n, E, bf ? (const void *)w32 : w, C,
                        dlogits + r0 * E, E, t, C, CUDA_R_32F, 0.f);
            cu_act_add_f32(be, (char *)dx + r0 * C * be->act_size, t, (size_t)n * C);
        }
        if (dw) { /* dw^T (C, E) += x^T (C, n) . dlogits (n, E) */
            const void *xa = (const char *)x + r0 * C * be->act_size;
            if (bf) cu_act_to_f32(be, t, xa, (size_t)n * C);
            router_gemm(be, CUBLAS_OP_N, CUBLAS_OP_T, C, E, n, bf ? (const void *)t : xa, C,
                        dlogits + r0 * E, E, dw, C, CUDA_R_32F, 1.f);
        }
    }
}
