/* reduce.cu - deterministic reductions: column sums (bias gradients, the
 * LayerNorm dw/db partials), fp32 sums and sums of squares into a device
 * double (losses, gradient norm),
 * scale_f32, add_f32.
 *
 * Design note. No floating-point atomics anywhere. A column sum is one read
 * of its matrix: a block covers a strip of 32 packs of columns (16-byte packs
 * of bf16 x 8 / fp32 x 4 when the matrix, its row stride and the output are
 * aligned; single columns otherwise) and a chunk of rows; its 8 warps are row
 * phases (warp w sums rows r0 + w, r0 + w + 8, ... in order, several loads in
 * flight) whose sums are added in the order w = 0..7. A matrix of at most
 * CS_ROWS_MIN rows is one chunk, added straight into the destination; a
 * taller one writes one partial row per chunk to the stream's scratch arena
 * and a second launch of the same kernel sums the partials (fp32, in the same
 * fixed order) into the destination. sum_f64 writes one double per block, then
 * one block adds them in a fixed order. The partition depends only on the
 * problem size, so results are bitwise reproducible run to run.
 *
 * Bytes moved per element (s = sizeof(act)): column sum s (one read; the
 * partials add 4 * OC * chunks, under 1/64 of the matrix's bytes for the
 * (N, OC) dout of a bias gradient with N > 64); sum_f64 4 (one fp32 read);
 * scale_f32 8 (read, write); add_f32 12 (read both, write dst). These are
 * the floors. Before: the same bytes, as scalar accesses (the sum was already
 * 16-byte), and the column sum's partial rows were 256+ rows of dout each. */
#include "common.cuh"

#define CS_PHASES 8 /* warps (row phases) per column-sum block */
#define CS_THREADS (32 * CS_PHASES)
#define CS_ROWS_MIN 64 /* rows per chunk (at least) */
#define CS_CHUNKS_MAX 128
#define SUMSQ_THREADS 256
#define SUMSQ_MAX_BLOCKS 1024

/* ======================= kernels ======================= */

// x (N, ld) -> column sums of its first ncols columns over the rows of chunk
// blockIdx.y ([y * rows, min(N, (y + 1) * rows))): out (ncols) += sums when add
// (one chunk), else out (chunks, ncols) row y = sums. ncols % VEC == 0.
template <typename T, int VEC>
__global__ void __launch_bounds__(CS_THREADS)
    colsum_kernel(float *out, const T *x, size_t ld, int N, int ncols, int rows, int add) {
    __shared__ __align__(16) float sh[CS_PHASES][32 * VEC];
    const int lane = threadIdx.x & 31, ph = threadIdx.x >> 5;
    const int c = (blockIdx.x * 32 + lane) * VEC;
    const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) s[k] = 0.f;
    if (c < ncols) {
#pragma unroll 4
        for (int r = r0 + ph; r < r1; r += CS_PHASES) add_f<VEC>(s, x + (size_t)r * ld + c);
    }
    st_f<VEC>(&sh[ph][lane * VEC], s);
    __syncthreads();
    if (ph != 0 || c >= ncols) return;
    for (int w = 1; w < CS_PHASES; w++) add_f<VEC>(s, &sh[w][lane * VEC]);
    float *o = out + (add ? 0 : (size_t)blockIdx.y * ncols) + c;
    if (add) add_f<VEC>(s, o);
    st_f<VEC>(o, s);
}

__device__ __forceinline__ double block_sum_d(double v, double *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    double r = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(r);
}

// x (n) -> part (gridDim.x): per-block sums of x (SQ = false) or x^2 (SQ = true) in
// double; packs of VEC, then the tail.
template <bool SQ>
__device__ __forceinline__ double sum_term(float x) {
    return SQ ? (double)x * x : (double)x;
}

template <bool SQ, int VEC>
__global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_partial_kernel(double *part, const float *x, size_t n) {
    __shared__ double sh[32];
    const size_t stride = (size_t)gridDim.x * blockDim.x, nv = n / VEC;
    const size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    double s = 0.0;
    for (size_t i = i0; i < nv; i += stride) {
        float v[VEC];
        ld_f<VEC>(x + i * VEC, v);
#pragma unroll
        for (int k = 0; k < VEC; k++) s += sum_term<SQ>(v[k]);
    }
    if (VEC > 1 && nv * VEC + i0 < n) s += sum_term<SQ>(x[nv * VEC + i0]);
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// acc[0] += sum of part (P) in a fixed order; one block.
__global__ void __launch_bounds__(1024) sum_final_kernel(double *acc, const double *part, int P) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < P; i += blockDim.x) s += part[i];
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) acc[0] += s;
}

// x (n) *= s (map_kernel functor)
struct ScaleF32 {
    float *x;
    float s;
    template <int K> __device__ __forceinline__ void apply(size_t i) const {
        float v[K];
        ld_f<K>(x + i, v);
#pragma unroll
        for (int k = 0; k < K; k++) v[k] *= s;
        st_f<K>(x + i, v);
    }
};

/* ======================= launchers ======================= */

// out as colsum_kernel; packs when vec (x, out 16-byte aligned, ld and ncols multiples of VEC).
template <typename T>
static void launch_colsum(float *out, const T *x, size_t ld, int N, int ncols, int rows, int R,
                          int add, cudaStream_t st) {
    constexpr int PK = LT_VEC(T);
    const int vec = cu_aligned16(out, x) && ld % PK == 0 && ncols % PK == 0;
    if (vec)
        colsum_kernel<T, PK><<<dim3((ncols + 32 * PK - 1) / (32 * PK), R), CS_THREADS, 0, st>>>(
            out, x, ld, N, ncols, rows, add);
    else
        colsum_kernel<T, 1><<<dim3((ncols + 31) / 32, R), CS_THREADS, 0, st>>>(out, x, ld, N,
                                                                               ncols, rows, add);
    CU_CHECK_LAUNCH();
}

// dst (ncols) += column sums of x (N, ld), fp32, in one launch (ops.cuh).
void launch_colsum_f32_add(float *dst, const float *x, size_t ld, int N, int ncols,
                           cudaStream_t st) {
    launch_colsum<float>(dst, x, ld, N, ncols, N, 1, 1, st);
}

// dbias (OC) += column sums of dout (N, OC): one chunk straight in, else chunks -> part -> dbias.
template <typename T>
static void launch_colsum_add(float *dbias, const T *dout, int N, int OC, float *part, int rows,
                              int R, cudaStream_t st) {
    if (R == 1) {
        launch_colsum<T>(dbias, dout, (size_t)OC, N, OC, N, 1, 1, st);
        return;
    }
    launch_colsum<T>(part, dout, (size_t)OC, N, OC, rows, R, 0, st);
    launch_colsum_f32_add(dbias, part, (size_t)OC, R, OC, st);
}

static int sumsq_grid(size_t n) {
    size_t g = (n + 2048 - 1) / 2048;
    return (int)(g < 1 ? 1 : (g > SUMSQ_MAX_BLOCKS ? SUMSQ_MAX_BLOCKS : g));
}

static void launch_sum(double *acc, double *part, const float *x, size_t n, int squares,
                       cudaStream_t st) {
    const int G = sumsq_grid(n), vec = cu_aligned16(x);
    if (squares && vec)
        sum_partial_kernel<true, 4><<<G, SUMSQ_THREADS, 0, st>>>(part, x, n);
    else if (squares)
        sum_partial_kernel<true, 1><<<G, SUMSQ_THREADS, 0, st>>>(part, x, n);
    else if (vec)
        sum_partial_kernel<false, 4><<<G, SUMSQ_THREADS, 0, st>>>(part, x, n);
    else
        sum_partial_kernel<false, 1><<<G, SUMSQ_THREADS, 0, st>>>(part, x, n);
    CU_CHECK_LAUNCH();
    sum_final_kernel<<<1, 1024, 0, st>>>(acc, part, G);
    CU_CHECK_LAUNCH();
}

/* ======================= op entries ======================= */

void cu_colsum_add(LtBackend *be, float *dbias, const void *dout, int N, int OC) {
    if (N <= 0 || OC <= 0) return;
    int rows = (N + CS_CHUNKS_MAX - 1) / CS_CHUNKS_MAX;
    if (rows < CS_ROWS_MIN) rows = CS_ROWS_MIN;
    const int R = (N + rows - 1) / rows;
    float *part = R > 1 ? (float *)cu_scratch(be, (size_t)R * OC * sizeof(float)) : NULL;
    if (cu_is_bf16(be))
        launch_colsum_add<bf16>(dbias, (const bf16 *)dout, N, OC, part, rows, R, cu_stream(be));
    else
        launch_colsum_add<float>(dbias, (const float *)dout, N, OC, part, rows, R, cu_stream(be));
}

void cu_sum_f64(LtBackend *be, double *acc, const float *x, size_t n, int squares) {
    if (n == 0) return;
    double *part = (double *)cu_scratch(be, SUMSQ_MAX_BLOCKS * sizeof(double));
    launch_sum(acc, part, x, n, squares, cu_stream(be));
}

void cu_scale_f32(LtBackend *be, float *x, float s, size_t n) {
    if (n) launch_map<4>(ScaleF32{x, s}, n, cu_aligned16(x), cu_stream(be));
}

void cu_add_f32(LtBackend *be, float *dst, const float *src, size_t n) {
    if (n) launch_map<4>(AddMap<float>{dst, dst, src}, n, cu_aligned16(dst, src), cu_stream(be));
}
