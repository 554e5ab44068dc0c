/* attention_cudnn_graph.cu - cuDNN's fused flash attention as operation
 * graphs of the C backend API, and their execution plans.
 *
 * Design note. cuDNN 9 runs scaled dot-product attention as one fused
 * (runtime-compiled) kernel when the operation graph it is given matches its
 * SDPA pattern: matmuls, pointwise ops and reductions spelled the way
 * cudnn-frontend's composite SDPA nodes spell them. That graph form is the
 * one every cuDNN 9.x accepts; the native SDPA operation descriptors (cuDNN
 * 9.13.1+) express a causal mask only from 9.21 on, and the frontend builds
 * the backward from the graph form on every version. So both directions are
 * graphs here, the same for all 9.x:
 *  forward:  S = (Q K^T) * scale; causal mask (GEN_INDEX row >= col, else
 *            -inf by BINARY_SELECT); with a sliding window of W keys before
 *            the query also a band mask (col + (W + 1) > row, the ADD of a
 *            by-value fp32 scalar W + 1 and a CMP_GT: cudnn-frontend's left
 *            bound W + 1, as Transformer Engine passes its (W, 0) windows;
 *            cuDNN 9.2.0+) as a second GEN_INDEX pair and BINARY_SELECT
 *            after the causal one, ordered as cudnn-frontend orders them
 *            (whose note says cuDNN's performance depends on it); softmax
 *            as MAX, SUB, EXP, ADD-reduce, DIV, with Stats = max + LOG(sum)
 *            (fp32, B,H,S,1: exactly lattice's lse); O = P V with P in bf16.
 *  backward: sums = rowsum(dO * O) (fp32, in the workspace); P recomputed
 *            as EXP(mask(S * scale - Stats)), mask the forward's (causal,
 *            and the window's band); dV = P^T dO; dS = P * (dO V^T - sums)
 *            * scale; dK = dS^T Q; dQ = dS K.
 * The backward's dQ decides determinism: written straight from the matmul,
 * cuDNN computes it with a dP workspace, which is deterministic on Hopper;
 * routed through a non-virtual fp32 accumulator and an IDENTITY into dQ it
 * uses atomic accumulation (faster, not bitwise repeatable; zeroed by us
 * before cuDNN 9.6). lattice's layouts are strided views, no copies: with
 * W = (NH + 2*NKV) * HD the row width of qkv, Q (B, NH, T, HD), K and V
 * (B, NKV, T, HD) at qkv + {0, NH, NH + NKV} * HD with strides {T*W, HD, W, 1}
 * (K^T and V^T swap the last two), O/dO {T*C, HD, C, 1}, Stats
 * {NH*T, T, 1, 1}; every tensor declared 16-byte aligned (the caller checks
 * the pointers). Grouped-query attention (NKV < NH) is spelled as
 * cudnn-frontend spells it: the matmuls with K and V take their NKV-head
 * tensors as they are (cuDNN maps query head h to K/V head h / (NH / NKV)),
 * and dK, dV are matmuls into virtual (B, NH, T, HD) tensors that an ADD
 * reduction sums over each group of NH / NKV consecutive heads into the
 * real dK, dV; the fused kernel does that reduction itself. The engine is
 * the first of cuDNN's heuristics list (mode A, then fallback) whose plan
 * finalizes.
 * Packed documents (key ragged_batch > 0) are cuDNN's ragged (THD) batch, as
 * cudnn-frontend builds it for a padding mask: the batch dim is the ragged
 * batch (every document a sequence, the bucket's spare entries empty), each
 * tensor the same strided view placed by an int64 ragged offset tensor
 * (qkv's views and dQ, dK, dV: token * W; out and dout: token * C; lse and
 * the backward's row sums: b * NH * T + t, lse's own layout), one int32
 * length per sequence (bound as both seq_len_q and seq_len_kv) overriding
 * the matmuls' M, N or K, the forward's Q K^T padded with zeros, and the
 * padding mask (row < seq_len_q and col < seq_len_kv) after the scaling,
 * before the causal and band masks: within a document these are the plain
 * causal attention and sliding window. The non-deterministic backward's dQ
 * accumulator takes out's layout and offsets. lse in lattice's (B, NH, T)
 * layout through ragged offsets (cudnn-frontend's users give THD stats a
 * token-major layout instead) lets either direction fall back to lattice's
 * kernels; whether cuDNN's kernels honour these strides has not been seen on
 * a GPU (the GPU test's attention_docs compares lse and dqkv with the CPU). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_cudnn.cuh"

/* ======================= graph builder ======================= */

typedef struct {
    int64_t dim[4], str[4];
} Dims;

/* Record the first failing call, "call(object number): status"; later
 * builder calls are skipped. */
static void cg_note(CuGraph *g, cudnnStatus_t st, const char *call, const char *object,
                    long num) {
    if (st == CUDNN_STATUS_SUCCESS || g->st != CUDNN_STATUS_SUCCESS) return;
    g->st = st;
    snprintf(g->what, sizeof g->what, "%s(%s %ld): %s", call, object, num,
             cudnnGetErrorString(st));
}

static CuDesc cg_new(CuGraph *g, cudnnBackendDescriptorType_t type) {
    CuDesc d = NULL;
    if (g->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (g->nall == CG_MAX_DESCS) {
        cg_note(g, CUDNN_STATUS_INTERNAL_ERROR, "descriptor table full", "type", (long)type);
        return NULL;
    }
    cg_note(g, cudnnBackendCreateDescriptor(type, &d), "cudnnBackendCreateDescriptor", "type",
            (long)type);
    if (g->st == CUDNN_STATUS_SUCCESS) g->all[g->nall++] = d;
    return d;
}

static void cg_set(CuGraph *g, CuDesc d, cudnnBackendAttributeName_t attr,
                   cudnnBackendAttributeType_t type, int64_t n, const void *val) {
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    cg_note(g, cudnnBackendSetAttribute(d, attr, type, n, val), "cudnnBackendSetAttribute",
            "attribute", (long)attr);
}

static void cg_desc(CuGraph *g, CuDesc d, cudnnBackendAttributeName_t attr, CuDesc val) {
    cg_set(g, d, attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &val);
}

/* Finalize d, named in a failure as "what num" (e.g. "pointwise mode 2"). */
static void cg_finalize(CuGraph *g, CuDesc d, const char *what, long num) {
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    cg_note(g, cudnnBackendFinalize(d), "cudnnBackendFinalize", what, num);
}

static void cg_add_op(CuGraph *g, CuDesc op, const char *what, long num) {
    cg_finalize(g, op, what, num);
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    if (g->nops == CG_MAX_OPS) {
        cg_note(g, CUDNN_STATUS_INTERNAL_ERROR, "operation table full", what, num);
        return;
    }
    g->ops[g->nops++] = op;
}

/* A tensor: uid, element type, shape; virtual (intermediate) or by value
 * (a host scalar read at execute); with ragged (an int64 tensor of batch + 1
 * element offsets) each batch entry starts at its offset from the base,
 * whatever the batch stride says. */
static CuDesc cg_tensor_at(CuGraph *g, int64_t uid, cudnnDataType_t dt, const Dims *x, bool virt,
                           bool by_value, CuDesc ragged) {
    const int64_t align = 16;
    CuDesc t = cg_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cg_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    cg_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, x->dim);
    cg_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, x->str);
    cg_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cg_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    cg_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (by_value) cg_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    if (ragged) cg_desc(g, t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged);
    cg_finalize(g, t, "tensor uid", (long)uid);
    return t;
}

static CuDesc cg_tensor(CuGraph *g, int64_t uid, cudnnDataType_t dt, const Dims *x, bool virt,
                        bool by_value) {
    return cg_tensor_at(g, uid, dt, x, virt, by_value, NULL);
}

static CuDesc cg_virtual(CuGraph *g, cudnnDataType_t dt, const Dims *x) {
    return cg_tensor(g, g->next_uid++, dt, x, true, false);
}

/* An fp32 scalar passed by value. */
static CuDesc cg_scalar(CuGraph *g, int64_t uid) {
    const Dims one = {{1, 1, 1, 1}, {1, 1, 1, 1}};
    return cg_tensor(g, uid, CUDNN_DATA_FLOAT, &one, false, true);
}

/* y = mode(x [, b [, t]]) computed in prec; axis >= 0 for GEN_INDEX. */
static void cg_pointwise(CuGraph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                         int64_t axis, CuDesc x, CuDesc b, CuDesc t, CuDesc y) {
    const float alpha = 1.0f;
    CuDesc pw = cg_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cg_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    cg_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) cg_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    cg_finalize(g, pw, "pointwise descriptor, mode", (long)mode);
    CuDesc op = cg_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) cg_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) cg_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    cg_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha);
    cg_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha);
    cg_add_op(g, op, "pointwise operation, mode", (long)mode);
}

/* The common fp32 pointwise op y = mode(x, b) (b may be NULL). */
static void cg_pw(CuGraph *g, cudnnPointwiseMode_t mode, CuDesc x, CuDesc b, CuDesc y) {
    cg_pointwise(g, mode, CUDNN_DATA_FLOAT, -1, x, b, NULL, y);
}

/* y = reduction of x over the dims where y has extent 1, in fp32 (or, for
 * grouped K/V gradients, where y's head dim is a divisor of x's: sums over
 * groups of consecutive heads). */
static void cg_reduce(CuGraph *g, cudnnReduceTensorOp_t mode, CuDesc x, CuDesc y) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    CuDesc rd = cg_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cg_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    cg_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    cg_finalize(g, rd, "reduction descriptor, mode", (long)mode);
    CuDesc op = cg_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    cg_add_op(g, op, "reduction operation, mode", (long)mode);
}

/* A ragged batch's per-sequence extents of a matmul's M, N and K (int32
 * tensors of one value per batch entry; NULL: the full dim), and whether the
 * rows and columns past them are written as zeros. */
typedef struct {
    CuDesc m, n, k;
    bool padded;
} Extents;

/* c = a b over the last two dims (batched over B, H), fp32 accumulation;
 * ext (NULL: none) limits each batch entry to its own extents. */
static void cg_matmul_in(CuGraph *g, CuDesc a, CuDesc b, CuDesc c, const Extents *ext) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const double zero = 0.0;
    CuDesc mm = cg_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cg_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    if (ext && ext->padded)
        cg_set(g, mm, CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &zero);
    cg_finalize(g, mm, "matmul descriptor", g->nops);
    CuDesc op = cg_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    if (ext && ext->m) cg_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, ext->m);
    if (ext && ext->n) cg_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, ext->n);
    if (ext && ext->k) cg_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, ext->k);
    cg_add_op(g, op, "matmul operation", g->nops);
}


/* y = x seen through y's dims and strides (no data movement). */
static void cg_reshape(CuGraph *g, CuDesc x, CuDesc y) {
    CuDesc op = cg_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    cg_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    cg_add_op(g, op, "reshape operation", g->nops);
}

/* ======================= SDPA graphs ======================= */

/* Packed documents as a ragged batch: the tensors that describe it (all NULL
 * for B plain sequences). Each batch entry is one document; its length is
 * both its query and its key count. */
typedef struct {
    CuDesc seq_q, seq_kv;             /* (n, 1, 1, 1) int32 lengths (one buffer, two uids) */
    CuDesc qkv_off, o_off, stats_off; /* (n + 1, 1, 1, 1) int64 element offsets */
} Ragged;

/* The shapes of one (B, NH, NKV, T, HD) attention, in lattice's layouts; the
 * batch dim is the ragged batch's for packed documents (offsets then place
 * each entry, and the batch strides only bound it). */
typedef struct {
    Dims q, kt, o, stats;    /* qkv views, out / dout, lse */
    Dims ss, ss_t, s1, sd;   /* virtual: scores, transposed scores, row stats, (B,H,T,HD) */
    Dims k;                  /* K and V, (B, NKV, T, HD) views of qkv */
    int grouped;             /* NKV < NH */
    Ragged rg;
} Shapes;

static Dims dims(int64_t a, int64_t b, int64_t c, int64_t d, int64_t sa, int64_t sb, int64_t sc,
                 int64_t sd) {
    Dims x = {{a, b, c, d}, {sa, sb, sc, sd}};
    return x;
}

static Shapes shapes_of(const LtAttnPlanKey *k) {
    const int64_t B = k->ragged_batch ? k->ragged_batch : k->B, H = k->NH, HK = k->NKV, T = k->T,
                  D = k->HD, C = H * D;
    const int64_t W = (H + 2 * HK) * D; /* qkv's row */
    Shapes s = {};
    s.q = dims(B, H, T, D, T * W, D, W, 1);
    s.kt = dims(B, HK, D, T, T * W, D, 1, W);
    s.k = dims(B, HK, T, D, T * W, D, W, 1);
    s.grouped = HK != H;
    s.o = dims(B, H, T, D, T * C, D, C, 1);
    s.stats = dims(B, H, T, 1, H * T, T, 1, 1);
    s.ss = dims(B, H, T, T, H * T * T, T * T, T, 1);
    s.ss_t = dims(B, H, T, T, H * T * T, T * T, 1, T);
    s.s1 = s.stats;
    s.sd = dims(B, H, T, D, H * T * D, T * D, D, 1);
    return s;
}

/* The ragged batch's tensors of packed documents, into s->rg. */
static void ragged_tensors(CuGraph *g, Shapes *s) {
    const int64_t n = s->q.dim[0];
    const Dims lens = dims(n, 1, 1, 1, 1, 1, 1, 1), offs = dims(n + 1, 1, 1, 1, 1, 1, 1, 1);
    s->rg.seq_q = cg_tensor(g, UID_SEQ_Q, CUDNN_DATA_INT32, &lens, false, false);
    s->rg.seq_kv = cg_tensor(g, UID_SEQ_KV, CUDNN_DATA_INT32, &lens, false, false);
    s->rg.qkv_off = cg_tensor(g, UID_QKV_OFF, CUDNN_DATA_INT64, &offs, false, false);
    s->rg.o_off = cg_tensor(g, UID_O_OFF, CUDNN_DATA_INT64, &offs, false, false);
    s->rg.stats_off = cg_tensor(g, UID_STATS_OFF, CUDNN_DATA_INT64, &offs, false, false);
}

/* The extents of a matmul with M and N or K per sequence: rows (queries or
 * keys) and cols/inner (keys or queries) as cudnn-frontend sets them for its
 * padding mask (padded: the forward's Q K^T). All NULL for a dense batch. */
static Extents ext_qk(const Shapes *s, bool padded) { /* (queries, keys) scores */
    Extents e = {s->rg.seq_q, s->rg.seq_kv, NULL, padded && s->rg.seq_q};
    return e;
}
static Extents ext_q_by_kv(const Shapes *s) { /* queries out, summed over keys */
    Extents e = {s->rg.seq_q, NULL, s->rg.seq_kv, false};
    return e;
}
static Extents ext_kv_by_q(const Shapes *s) { /* keys out, summed over queries */
    Extents e = {s->rg.seq_kv, NULL, s->rg.seq_q, false};
    return e;
}

/* Result-returning forms: the output is a new fp32 virtual tensor of d. */
static CuDesc pw_to(CuGraph *g, cudnnPointwiseMode_t mode, CuDesc x, CuDesc b, const Dims *d) {
    CuDesc y = cg_virtual(g, CUDNN_DATA_FLOAT, d);
    cg_pw(g, mode, x, b, y);
    return y;
}
static CuDesc reduce_to(CuGraph *g, cudnnReduceTensorOp_t mode, CuDesc x, const Dims *d) {
    CuDesc y = cg_virtual(g, CUDNN_DATA_FLOAT, d);
    cg_reduce(g, mode, x, y);
    return y;
}
static CuDesc matmul_to(CuGraph *g, CuDesc a, CuDesc b, const Dims *d, const Extents *ext) {
    CuDesc y = cg_virtual(g, CUDNN_DATA_FLOAT, d);
    cg_matmul_in(g, a, b, y, ext);
    return y;
}

/* The row (query) and column (key) index of every score of x, int32. */
static void score_indices(CuGraph *g, const Shapes *s, CuDesc x, CuDesc *row, CuDesc *col) {
    *row = cg_virtual(g, CUDNN_DATA_INT32, &s->ss);
    *col = cg_virtual(g, CUDNN_DATA_INT32, &s->ss);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2, x, NULL, NULL, *row);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 3, x, NULL, NULL, *col);
}

/* mode(a, b) as a boolean tensor. */
static CuDesc bool_of(CuGraph *g, const Shapes *s, cudnnPointwiseMode_t mode, CuDesc a, CuDesc b) {
    CuDesc y = cg_virtual(g, CUDNN_DATA_BOOLEAN, &s->ss);
    cg_pointwise(g, mode, CUDNN_DATA_BOOLEAN, -1, a, b, NULL, y);
    return y;
}

/* x where keep is true, else neg. */
static CuDesc select_kept(CuGraph *g, const Shapes *s, CuDesc keep, CuDesc x, CuDesc neg) {
    CuDesc y = cg_virtual(g, CUDNN_DATA_FLOAT, &s->ss);
    cg_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, x, neg, keep, y);
    return y;
}

/* mode(a, b) as a boolean tensor; where it is true x is kept, else neg. */
static CuDesc keep_where(CuGraph *g, const Shapes *s, cudnnPointwiseMode_t mode, CuDesc a,
                         CuDesc b, CuDesc x, CuDesc neg) {
    return select_kept(g, s, bool_of(g, s, mode, a, b), x, neg);
}

/* A ragged batch's padding mask (cudnn-frontend's, in its order): scores of
 * rows below the sequence's query count and columns below its key count are
 * kept, the rest become neg. x as it is for a dense batch. */
static CuDesc padding_mask(CuGraph *g, const Shapes *s, CuDesc x, CuDesc neg) {
    if (!s->rg.seq_q) return x;
    CuDesc row, col;
    score_indices(g, s, x, &row, &col);
    CuDesc rows_in = bool_of(g, s, CUDNN_POINTWISE_CMP_LT, row, s->rg.seq_q);
    CuDesc cols_in = bool_of(g, s, CUDNN_POINTWISE_CMP_LT, col, s->rg.seq_kv);
    return select_kept(g, s, bool_of(g, s, CUDNN_POINTWISE_LOGICAL_AND, rows_in, cols_in), x, neg);
}

/* The mask of scores x: causal (row >= col keeps x, else neg), then, with
 * band (the by-value scalar window + 1, fp32) a sliding window: col + band >
 * row keeps it. Each mask has its own index pair, as cudnn-frontend's
 * diagonal band nodes build them. */
static CuDesc score_mask(CuGraph *g, const Shapes *s, CuDesc x, CuDesc neg, CuDesc band) {
    CuDesc row, col;
    score_indices(g, s, x, &row, &col);
    CuDesc y = keep_where(g, s, CUDNN_POINTWISE_CMP_GE, row, col, x, neg);
    if (!band) return y;
    score_indices(g, s, y, &row, &col);
    CuDesc reach = pw_to(g, CUDNN_POINTWISE_ADD, col, band, &s->ss); /* col + band, fp32 */
    return keep_where(g, s, CUDNN_POINTWISE_CMP_GT, reach, row, y, neg);
}

/* (Q K^T) * scale, fp32 (padded: rows and columns past a ragged batch
 * entry's extents zero, as the forward's). */
static CuDesc scaled_scores(CuGraph *g, const Shapes *s, CuDesc q, CuDesc kt, CuDesc scale,
                            bool padded) {
    const Extents e = ext_qk(s, padded);
    return pw_to(g, CUDNN_POINTWISE_MUL, matmul_to(g, q, kt, &s->ss, &e), scale, &s->ss);
}

/* Softmax of masked scores x, returned as bf16 P, and stats = its lse. */
static CuDesc softmax_with_stats(CuGraph *g, const Shapes *s, CuDesc x, CuDesc stats) {
    CuDesc mx = reduce_to(g, CUDNN_REDUCE_TENSOR_MAX, x, &s->s1);
    CuDesc e = pw_to(g, CUDNN_POINTWISE_EXP, pw_to(g, CUDNN_POINTWISE_SUB, x, mx, &s->ss), NULL,
                     &s->ss);
    CuDesc sum = reduce_to(g, CUDNN_REDUCE_TENSOR_ADD, e, &s->s1);
    cg_pw(g, CUDNN_POINTWISE_ADD, mx, pw_to(g, CUDNN_POINTWISE_LOG, sum, NULL, &s->s1), stats);
    CuDesc p = cg_virtual(g, CUDNN_DATA_BFLOAT16, &s->ss);
    cg_pw(g, CUDNN_POINTWISE_DIV, e, sum, p);
    return p;
}

/* A non-virtual bf16 tensor of lattice's, placed by ragged (NULL: dense). */
static CuDesc bf16_at(CuGraph *g, int64_t uid, const Dims *x, CuDesc ragged) {
    return cg_tensor_at(g, uid, CUDNN_DATA_BFLOAT16, x, false, false, ragged);
}

/* The three non-virtual views of a (B, T, NH + 2*NKV, HD) buffer, uids
 * first, first + 1, first + 2: Q, K^T, V (transpose_v: V^T). */
static void qkv_views(CuGraph *g, const Shapes *s, int64_t first, bool transpose_v, CuDesc out[3]) {
    out[0] = bf16_at(g, first, &s->q, s->rg.qkv_off);
    out[1] = bf16_at(g, first + 1, &s->kt, s->rg.qkv_off);
    out[2] = bf16_at(g, first + 2, transpose_v ? &s->kt : &s->k, s->rg.qkv_off);
}

/* lse (or the backward's row sums, uid): fp32 in lse's layout, placed by the
 * stats offsets in a ragged batch. */
static CuDesc stats_tensor(CuGraph *g, const Shapes *s, int64_t uid) {
    return cg_tensor_at(g, uid, CUDNN_DATA_FLOAT, &s->stats, false, false, s->rg.stats_off);
}

/* The by-value window scalar of a windowed graph, else NULL. */
static CuDesc band_scalar(CuGraph *g, int windowed) {
    return windowed ? cg_scalar(g, UID_BAND) : NULL;
}

static void fwd_graph(CuGraph *g, const Shapes *s, int windowed) {
    CuDesc qkv[3];
    qkv_views(g, s, UID_Q, false, qkv);
    CuDesc o = bf16_at(g, UID_O, &s->o, s->rg.o_off);
    CuDesc stats = stats_tensor(g, s, UID_STATS);
    CuDesc scale = cg_scalar(g, UID_SCALE), neg = cg_scalar(g, UID_NEG_INF);
    CuDesc scores = padding_mask(g, s, scaled_scores(g, s, qkv[0], qkv[1], scale, true), neg);
    CuDesc masked = score_mask(g, s, scores, neg, band_scalar(g, windowed));
    const Extents e = ext_q_by_kv(s);
    cg_matmul_in(g, softmax_with_stats(g, s, masked, stats), qkv[2], o, &e);
}

/* sums = rowsum(dO * O) * 1, fp32, a non-virtual tensor in the workspace
 * (returned). */
static CuDesc bwd_row_sums(CuGraph *g, const Shapes *s, CuDesc dO, CuDesc o, CuDesc one) {
    const int64_t B = s->o.dim[0], H = s->o.dim[1], T = s->o.dim[2], D = s->o.dim[3];
    const Dims prod = dims(B, H, T, D, H * T * D, T * D, H * D, 1);
    CuDesc rows = reduce_to(g, CUDNN_REDUCE_TENSOR_ADD, pw_to(g, CUDNN_POINTWISE_MUL, dO, o, &prod),
                            &s->s1);
    CuDesc sums = stats_tensor(g, s, UID_SUMS); /* s1 is stats' shape */
    cg_pw(g, CUDNN_POINTWISE_MUL, rows, one, sums);
    return sums;
}

/* The backward's probabilities P = exp(mask(S * scale - stats)), fp32 (a
 * ragged batch's padding mask before the subtraction, as cudnn-frontend). */
static CuDesc bwd_probs(CuGraph *g, const Shapes *s, CuDesc q, CuDesc kt, CuDesc stats,
                        CuDesc scale, CuDesc neg, CuDesc band) {
    CuDesc scores = padding_mask(g, s, scaled_scores(g, s, q, kt, scale, false), neg);
    CuDesc shifted = pw_to(g, CUDNN_POINTWISE_SUB, scores, stats, &s->ss);
    return pw_to(g, CUDNN_POINTWISE_EXP, score_mask(g, s, shifted, neg, band), NULL, &s->ss);
}

/* dS = P * (dO V^T - sums) * scale, fp32. */
static CuDesc bwd_dscores(CuGraph *g, const Shapes *s, CuDesc p, CuDesc dO, CuDesc vt,
                          CuDesc sums, CuDesc scale) {
    const Extents e = ext_qk(s, false);
    CuDesc centered = pw_to(g, CUDNN_POINTWISE_SUB, matmul_to(g, dO, vt, &s->ss, &e), sums, &s->ss);
    CuDesc weighted = pw_to(g, CUDNN_POINTWISE_MUL, centered, p, &s->ss);
    return pw_to(g, CUDNN_POINTWISE_MUL, weighted, scale, &s->ss);
}

/* out = x^T y, with x (B,H,T,T) fp32 seen transposed in bf16: a key per
 * row, summed over the queries. */
static void matmul_transposed(CuGraph *g, const Shapes *s, CuDesc x, CuDesc y, CuDesc out) {
    CuDesc xt = cg_virtual(g, CUDNN_DATA_BFLOAT16, &s->ss_t);
    cg_reshape(g, x, xt);
    const Extents e = ext_kv_by_q(s);
    cg_matmul_in(g, xt, y, out, &e);
}

/* A K/V gradient kv = x^T y: straight into kv (NKV == NH), or per query head
 * into a virtual (B, NH, T, HD) tensor summed over each group into kv. */
static void kv_grad(CuGraph *g, const Shapes *s, CuDesc x, CuDesc y, CuDesc kv) {
    if (!s->grouped) {
        matmul_transposed(g, s, x, y, kv);
        return;
    }
    CuDesc per_head = cg_virtual(g, CUDNN_DATA_BFLOAT16, &s->sd); /* as cudnn-frontend types it */
    matmul_transposed(g, s, x, y, per_head);
    cg_reduce(g, CUDNN_REDUCE_TENSOR_ADD, per_head, kv);
}

/* dQ = dS K: straight into dQ (deterministic), or through an fp32
 * accumulator in the workspace and an IDENTITY copy. In a ragged batch the
 * reshaped K keeps its offsets (as cudnn-frontend's) and the accumulator
 * takes out's layout and offsets (the dense one's size, B*T*NH*HD floats). */
static void bwd_dq(CuGraph *g, const Shapes *s, CuDesc ds, CuDesc kt, CuDesc dq, int accum) {
    CuDesc k = cg_tensor_at(g, g->next_uid++, CUDNN_DATA_FLOAT, &s->k, true, false, s->rg.qkv_off);
    cg_reshape(g, kt, k);
    const Extents e = ext_q_by_kv(s);
    if (!accum) {
        cg_matmul_in(g, ds, k, dq, &e);
        return;
    }
    CuDesc acc = cg_tensor_at(g, UID_DQ_ACCUM, CUDNN_DATA_FLOAT, s->rg.o_off ? &s->o : &s->sd,
                              false, false, s->rg.o_off);
    cg_matmul_in(g, ds, k, acc, &e);
    cg_pw(g, CUDNN_POINTWISE_IDENTITY, acc, NULL, dq);
}

static void bwd_graph(CuGraph *g, const Shapes *s, int accum, int windowed) {
    CuDesc in[3], grad[3];
    qkv_views(g, s, UID_Q, true, in); /* Q, K^T, V^T */
    CuDesc o = bf16_at(g, UID_O, &s->o, s->rg.o_off);
    CuDesc dO = bf16_at(g, UID_DO, &s->o, s->rg.o_off);
    CuDesc stats = stats_tensor(g, s, UID_STATS);
    for (int i = 0; i < 3; i++) /* dQ, dK, dV: all in qkv's own layout */
        grad[i] = bf16_at(g, UID_DQ + i, i ? &s->k : &s->q, s->rg.qkv_off);
    CuDesc scale = cg_scalar(g, UID_SCALE), neg = cg_scalar(g, UID_NEG_INF);
    CuDesc one = cg_scalar(g, UID_ONE), band = band_scalar(g, windowed);
    CuDesc sums = bwd_row_sums(g, s, dO, o, one);
    CuDesc p = bwd_probs(g, s, in[0], in[1], stats, scale, neg, band);
    kv_grad(g, s, p, dO, grad[2]);
    CuDesc ds = bwd_dscores(g, s, p, dO, in[2], sums, scale);
    kv_grad(g, s, ds, in[0], grad[1]);
    bwd_dq(g, s, ds, in[1], grad[0], accum);
}

/* ======================= execution plans ======================= */

#define HEUR_MAX_CONFIGS 16

/* The operation graph over g's operations, on handle h (NULL: none, which
 * lt_cudnn_graph_check uses; an engine needs one). */
static CuDesc op_graph(CuGraph *g, cudnnHandle_t h) {
    CuDesc og = cg_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (h) cg_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    cg_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    cg_finalize(g, og, "operation graph, operations:", g->nops);
    return og;
}

/* Up to max engine configs for og from cuDNN's heuristics in mode, best
 * first, into cfg; returns how many (0 on failure, recorded in g). */
static int heuristic_configs(CuGraph *g, CuDesc og, cudnnBackendHeurMode_t mode, CuDesc *cfg,
                             int max) {
    CuDesc heur = cg_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cg_desc(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og);
    cg_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    cg_finalize(g, heur, "engine heuristics, mode", (long)mode);
    int64_t avail = 0, got = 0;
    if (g->st != CUDNN_STATUS_SUCCESS) return 0;
    cg_note(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &avail, NULL),
            "cudnnBackendGetAttribute", "attribute", (long)CUDNN_ATTR_ENGINEHEUR_RESULTS);
    const int n = avail < max ? (int)avail : max;
    for (int i = 0; i < n; i++) cfg[i] = cg_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (g->st != CUDNN_STATUS_SUCCESS || n == 0) return 0;
    cg_note(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfg),
            "cudnnBackendGetAttribute", "attribute", (long)CUDNN_ATTR_ENGINEHEUR_RESULTS);
    return g->st == CUDNN_STATUS_SUCCESS ? (int)got : 0;
}

/* The engine behind cfg: its global index and whether cuDNN notes it as
 * non-deterministic (for the log; the graph form decides determinism). A
 * failing query only leaves the fields unknown (-1 / 0). */
static void engine_info(CuGraph *g, CuDesc cfg, CuAttnPlan *p) {
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0;
    p->engine = -1;
    CuDesc eng = cg_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    if (!eng || cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                         &eng) != CUDNN_STATUS_SUCCESS)
        return;
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                 &p->engine) != CUDNN_STATUS_SUCCESS)
        p->engine = -1;
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                                 notes) != CUDNN_STATUS_SUCCESS)
        return;
    for (int64_t i = 0; i < n; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) p->engine_nondet = 1;
}

/* One execution plan for cfg on h, or NULL with the failing status in *st. */
static CuDesc try_plan(cudnnHandle_t h, CuDesc cfg, cudnnStatus_t *st) {
    CuDesc plan = NULL;
    *st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (*st == CUDNN_STATUS_SUCCESS)
        *st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                       &h);
    if (*st == CUDNN_STATUS_SUCCESS)
        *st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (*st == CUDNN_STATUS_SUCCESS) *st = cudnnBackendFinalize(plan);
    if (*st == CUDNN_STATUS_SUCCESS) return plan;
    if (plan) CUDNN_CHECK(cudnnBackendDestroyDescriptor(plan));
    return NULL;
}

/* The first of n configs whose plan finalizes becomes p->plan (owned by
 * p->g); 0, or -1 with the reason in why. */
static int first_plan(CuAttnPlan *p, cudnnHandle_t h, CuDesc *cfg, int n, char *why,
                      size_t whylen) {
    cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < n && p->g.nall < CG_MAX_DESCS; i++) {
        CuDesc plan = try_plan(h, cfg[i], &st);
        if (!plan) continue;
        p->g.all[p->g.nall++] = plan;
        p->plan = plan;
        engine_info(&p->g, cfg[i], p);
        return 0;
    }
    snprintf(why, whylen, "none of %d engine configs from cuDNN's heuristics gave a plan (last: %s)",
             n, cudnnGetErrorString(st));
    return -1;
}

/* Plan for p's graph: heuristics mode A, then the fallback list. */
static int choose_plan(CuAttnPlan *p, cudnnHandle_t h, char *why, size_t whylen) {
    static const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    CuDesc og = op_graph(&p->g, h), cfg[HEUR_MAX_CONFIGS];
    snprintf(why, whylen, "cuDNN's heuristics offered no engine for this graph");
    for (int m = 0; m < 2 && p->g.st == CUDNN_STATUS_SUCCESS; m++) {
        const int n = heuristic_configs(&p->g, og, modes[m], cfg, HEUR_MAX_CONFIGS);
        if (n > 0 && first_plan(p, h, cfg, n, why, whylen) == 0) return 0;
    }
    if (p->g.st != CUDNN_STATUS_SUCCESS) snprintf(why, whylen, "%s", p->g.what);
    return -1;
}

/* Workspace layout and by-value scalars of a built plan. */
static void plan_sizes(CuAttnPlan *p, const LtAttnPlanKey *key, long version, int accum) {
    const size_t rows = (size_t)key->B * key->NH * key->T;
    int64_t ws = 0, n = 0;
    cg_note(&p->g, cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &n, &ws),
            "cudnnBackendGetAttribute", "attribute",
            (long)CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
    p->engine_bytes = ws > 0 ? (size_t)ws : 0;
    p->sums_bytes = key->dir == LT_ATTN_BWD ? align256(rows * sizeof(float)) : 0;
    p->accum_bytes = accum ? align256(rows * key->HD * sizeof(float)) : 0;
    p->zero_accum = accum && version < 90600;
}

/* A plan object holding key's graph (operations built, nothing chosen yet). */
static CuAttnPlan *plan_with_graph(const LtAttnPlanKey *key, long version) {
    CuAttnPlan *p = (CuAttnPlan *)calloc(1, sizeof(CuAttnPlan));
    if (!p) lt_fatal("out of host memory");
    p->dir = key->dir;
    p->g.next_uid = UID_VIRTUAL;
    p->scale = 1.0f / sqrtf((float)key->HD);
    p->neg_inf = version < 91000 ? -FLT_MAX : -INFINITY; /* as cudnn-frontend masks */
    p->one = 1.0f;
    p->windowed = key->window >= 0;
    p->band = (float)(key->window + 1);
    p->ragged = key->ragged_batch > 0;
    Shapes s = shapes_of(key);
    if (p->ragged) ragged_tensors(&p->g, &s);
    if (key->dir == LT_ATTN_FWD) fwd_graph(&p->g, &s, p->windowed);
    else bwd_graph(&p->g, &s, !key->deterministic, p->windowed);
    return p;
}

CuAttnPlan *cudnn_plan_build(cudnnHandle_t h, const LtAttnPlanKey *key, long version, char *why,
                             size_t whylen) {
    CuAttnPlan *p = plan_with_graph(key, version);
    const int accum = key->dir == LT_ATTN_BWD && !key->deterministic;
    if (choose_plan(p, h, why, whylen) == 0) plan_sizes(p, key, version, accum);
    if (!p->plan || p->g.st != CUDNN_STATUS_SUCCESS) {
        if (p->g.st != CUDNN_STATUS_SUCCESS) snprintf(why, whylen, "%s", p->g.what);
        cudnn_plan_destroy(p);
        return NULL;
    }
    return p;
}

extern "C" int lt_cudnn_graph_check(const LtAttnPlanKey *key, char *why, size_t whylen) {
    CuAttnPlan *p = plan_with_graph(key, lt_cudnn_version());
    int rc = p->g.st == CUDNN_STATUS_SUCCESS ? 0 : -1;
    if (rc == 0) {
        op_graph(&p->g, NULL);
        if (p->g.st != CUDNN_STATUS_SUCCESS) rc = -2;
    }
    snprintf(why, whylen, "%s", rc ? p->g.what : "");
    cudnn_plan_destroy(p);
    return rc;
}

void cudnn_plan_destroy(CuAttnPlan *p) {
    if (!p) return;
    for (int i = p->g.nall - 1; i >= 0; i--) CUDNN_CHECK(cudnnBackendDestroyDescriptor(p->g.all[i]));
    free(p);
}

size_t cudnn_plan_workspace(const CuAttnPlan *p) {
    return p->sums_bytes + p->accum_bytes + p->engine_bytes;
}
