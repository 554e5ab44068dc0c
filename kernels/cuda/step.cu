/* step.cu - the small device-side pieces that keep a training step free of
 * host round trips: the gradient-clipping coefficient from the device sum of
 * squares (or the mark of a step to skip when it is not finite), a non-finite
 * loss folded into that sum, and vocab-parallel ownership of uploaded token
 * ids.
 *
 * Design note. Both are tiny (one scalar; one pass over a micro batch of ids)
 * and exist so that the host never has to read a value back in the middle of
 * a step: the optimizer reads the coefficient from device memory, and the
 * embedding reads ids that were uploaded asynchronously and localized here. */
#include "common.cuh"

/* ======================= kernels ======================= */

// coef[0] from sumsq[0]; thread 0 of one warp.
__global__ void clip_coef_kernel(float *coef, const double *sumsq, float clip) {
    if (threadIdx.x != 0) return;
    const double ss = sumsq[0];
    if (!isfinite(ss)) {
        coef[0] = -1.f; /* skip the step */
        return;
    }
    const double c = clip > 0.f ? (double)clip / (sqrt(ss) + 1e-6) : 1.0;
    coef[0] = (float)(c < 1.0 ? c : 1.0);
}

// acc[0] += NaN when x[0] is not finite; thread 0 of one warp.
__global__ void flag_nonfinite_kernel(double *acc, const double *x) {
    if (threadIdx.x == 0 && !isfinite(x[0])) acc[0] += (double)NAN;
}

// ids (n) -> local ids in [0, count), or -1 outside [start, start + count).
__global__ void localize_ids_kernel(int32_t *ids, size_t n, int start, int count) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int32_t v = ids[i] - start;
        ids[i] = v >= 0 && v < count ? v : -1;
    }
}

/* ======================= op entries ======================= */

void cu_clip_coef(LtBackend *be, float *coef, const double *sumsq, float clip) {
    clip_coef_kernel<<<1, 32, 0, cu_stream(be)>>>(coef, sumsq, clip);
    CU_CHECK_LAUNCH();
}

void cu_flag_nonfinite(LtBackend *be, double *acc, const double *x) {
    flag_nonfinite_kernel<<<1, 32, 0, cu_stream(be)>>>(acc, x);
    CU_CHECK_LAUNCH();
}

void cu_localize_ids(LtBackend *be, int32_t *ids, size_t n, int start, int count) {
    if (!n) return;
    unsigned g = cu_blocks(n, 256);
    if (g > 1024u) g = 1024u;
    localize_ids_kernel<<<g, 256, 0, cu_stream(be)>>>(ids, n, start, count);
    CU_CHECK_LAUNCH();
}
