/* reduce.cu - deterministic reductions: column sums for dbias, fp32 sums
 * and sums of squares into a device double (losses, gradient norm),
 * scale_f32, add_f32.
 *
 * Design note. No floating-point atomics anywhere: every reduction is two
 * passes. Pass 1 writes one partial per block to the stream's scratch arena
 * with a fixed in-block order; pass 2 sums the partials in index order. The
 * partition depends only on the problem size, so results are bitwise
 * reproducible run to run on the same GPU. */
#include "common.cuh"

#define CS_ROWS_MIN 256 /* rows per chunk in the column sum (at least) */
#define CS_CHUNKS_MAX 128

/* ======================= kernels ======================= */

// dout (N, OC) -> part (R, OC): part[r][c] = sum of rows [r*rows, (r+1)*rows) of column c.
// block (32, 8): x = column within a 32-wide strip, y = row phase.
template <typename T>
__global__ void colsum_partial_kernel(float *part, const T *dout, int N, int OC, int rows) {
    __shared__ float sh[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s = 0.f;
    if (c < OC)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) s += to_f(dout[(size_t)r * OC + c]);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        float t = 0.f;
        for (int i = 0; i < 8; i++) t += sh[i][threadIdx.x];
        part[(size_t)blockIdx.y * OC + c] = t;
    }
}

// dbias (OC) += sum over r of part (R, OC), r ascending.
__global__ void colsum_final_kernel(float *dbias, const float *part, int R, int OC) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    float t = 0.f;
    for (int r = 0; r < R; r++) t += part[(size_t)r * OC + c];
    dbias[c] += t;
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

// x (n) -> part (gridDim.x): per-block sums of x (SQ = false) or x^2 (SQ = true) in double.
template <bool SQ>
__device__ __forceinline__ double sum_term(float x) {
    return SQ ? (double)x * x : (double)x;
}

template <bool SQ>
__global__ void sum_partial_kernel(double *part, const float *x, size_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (((uintptr_t)x & 15) == 0) {
        const float4 *x4 = (const float4 *)x;
        const size_t n4 = n / 4;
        for (size_t i = i0; i < n4; i += stride) {
            float4 v = x4[i];
            s += sum_term<SQ>(v.x) + sum_term<SQ>(v.y) + sum_term<SQ>(v.z) + sum_term<SQ>(v.w);
        }
        for (size_t i = n4 * 4 + i0; i < n; i += stride) s += sum_term<SQ>(x[i]);
    } else {
        for (size_t i = i0; i < n; i += stride) s += sum_term<SQ>(x[i]);
    }
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// acc[0] += sum of part (P) in a fixed order; one block.
__global__ void sum_final_kernel(double *acc, const double *part, int P) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < P; i += blockDim.x) s += part[i];
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) acc[0] += s;
}

// x (n) *= s
__global__ void scale_kernel(float *x, float s, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

// dst (n) += src (n)
__global__ void add_kernel(float *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

/* ======================= launchers ======================= */

template <typename T>
static void launch_colsum(float *dbias, const T *dout, int N, int OC, float *part, int rows,
                          int R, cudaStream_t st) {
    dim3 grid((OC + 31) / 32, R), block(32, 8);
    colsum_partial_kernel<T><<<grid, block, 0, st>>>(part, dout, N, OC, rows);
    CU_CHECK_LAUNCH();
    colsum_final_kernel<<<cu_blocks(OC, 256), 256, 0, st>>>(dbias, part, R, OC);
    CU_CHECK_LAUNCH();
}

static int sumsq_grid(size_t n) {
    size_t g = (n + 2048 - 1) / 2048;
    return (int)(g < 1 ? 1 : (g > 1024 ? 1024 : g));
}

static void launch_sum(double *acc, double *part, const float *x, size_t n, int squares,
                       cudaStream_t st) {
    int G = sumsq_grid(n);
    if (squares)
        sum_partial_kernel<true><<<G, 256, 0, st>>>(part, x, n);
    else
        sum_partial_kernel<false><<<G, 256, 0, st>>>(part, x, n);
    CU_CHECK_LAUNCH();
    sum_final_kernel<<<1, 1024, 0, st>>>(acc, part, G);
    CU_CHECK_LAUNCH();
}

static void launch_scale(float *x, float s, size_t n, cudaStream_t st) {
    unsigned g = cu_blocks(n, 256);
    if (g > 65535u * 8u) g = 65535u * 8u;
    scale_kernel<<<g, 256, 0, st>>>(x, s, n);
    CU_CHECK_LAUNCH();
}

static void launch_add(float *dst, const float *src, size_t n, cudaStream_t st) {
    unsigned g = cu_blocks(n, 256);
    if (g > 65535u * 8u) g = 65535u * 8u;
    add_kernel<<<g, 256, 0, st>>>(dst, src, n);
    CU_CHECK_LAUNCH();
}

/* ======================= op entries ======================= */

void cu_colsum_add(LtBackend *be, float *dbias, const void *dout, int N, int OC) {
    if (N <= 0 || OC <= 0) return;
    int rows = (N + CS_CHUNKS_MAX - 1) / CS_CHUNKS_MAX;
    if (rows < CS_ROWS_MIN) rows = CS_ROWS_MIN;
    const int R = (N + rows - 1) / rows;
    float *part = (float *)cu_scratch(be, (size_t)R * OC * sizeof(float));
    if (cu_is_bf16(be))
        launch_colsum<bf16>(dbias, (const bf16 *)dout, N, OC, part, rows, R, cu_stream(be));
    else
        launch_colsum<float>(dbias, (const float *)dout, N, OC, part, rows, R, cu_stream(be));
}

void cu_sum_f64(LtBackend *be, double *acc, const float *x, size_t n, int squares) {
    if (n == 0) return;
    double *part = (double *)cu_scratch(be, 1024 * sizeof(double));
    launch_sum(acc, part, x, n, squares, cu_stream(be));
}

void cu_scale_f32(LtBackend *be, float *x, float s, size_t n) {
    if (n) launch_scale(x, s, n, cu_stream(be));
}

void cu_add_f32(LtBackend *be, float *dst, const float *src, size_t n) {
    if (n) launch_add(dst, src, n, cu_stream(be));
}
