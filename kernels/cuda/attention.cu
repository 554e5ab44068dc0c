/* attention.cu - causal self-attention op entries: path selection and the
 * D = rowsum(dO * O) pre-pass of lattice's backward.
 *
 * Design note. Three implementations share one contract (attention.cuh):
 *  - cuDNN's fused flash attention (attention_cudnn*.cu), when the backend's
 *    model.attention resolved to it and the call's shape allows it, for
 *    causal attention with or without a sliding window (window >= 0: cuDNN
 *    masks the band itself, kstart unread), and packed documents (kstart
 *    with window -1) whose layout the model declared (attention_documents):
 *    a ragged (THD) batch of per-document sequences with a padding mask,
 *    kstart again unread. Undeclared documents, and those cuDNN's rules
 *    refuse, run lattice's kernels, which mask them through kstart;
 *  - attention_mma.cu: bf16 tensor cores, HD in {32, 64, 80, 96, 128}, needs
 *    qkv/dout 16-byte aligned and out/dqkv 4-byte aligned;
 *  - attention_simt.cu: fp32 CUDA cores, fp32 or bf16 acts, any HD <= 256.
 * lattice's tensor-core path is taken whenever it applies, unless the
 * backend was created with LT_CUDA_ATTN=simt (the GPU tests use that to
 * check one path against the other). lattice's backward passes are
 * deterministic (no atomics); every path overwrites each element of dqkv.
 * D lives in the stream's scratch. Attention sinks (offsets) take lattice's
 * kernels always: the forward's last step adds the sink to each row's sum,
 * and the backward adds d offsets, a reduction of lse and D, to the rest.
 * Grouped K/V (NKV < NH): every kernel indexes the group's K/V head in qkv,
 * never a per-query-head copy; lattice's dK/dV kernels own a key tile of one
 * key/value head and loop over the G query heads of its group in head order
 * inside the block, so a group's dK/dV is summed in registers in a fixed
 * order (the kernel files' design notes say more). */
#include "attention.cuh"

#define AD_ROWS 8 /* warps (rows) per block of the D pre-pass */
#define AS_SINK_THREADS 256 /* threads per head of the sink gradient's reduction */

/* ======================= kernels ======================= */

// D (B, NH, T) = sum over HD of dout * out, both (B, T, NH, HD); one warp per (b, t, h).
template <typename T>
__global__ void attn_rowdot_kernel(float *D, const T *dout, const T *out, int B, int T_, int NH,
                                   int HD) {
    const size_t row = (size_t)blockIdx.x * AD_ROWS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= (size_t)B * T_ * NH) return;
    const int h = (int)(row % NH);
    const size_t bt = row / NH;
    const int b = (int)(bt / T_), t = (int)(bt % T_);
    const T *o = out + row * HD, *d = dout + row * HD; /* (b, t, h) rows are contiguous */
    float s = 0.f;
    for (int i = lane; i < HD; i += 32) s += to_f(d[i]) * to_f(o[i]);
    s = warp_sum(s);
    if (lane == 0) D[((size_t)b * NH + h) * T_ + t] = s;
}

// doffsets (NH) += -sum over (b, t) of exp(offsets[h] - lse[b, h, t]) * D[b, h, t]; one block
// per head h, each thread's rows in a fixed stride, then a fixed-order block sum
// (deterministic).
template <typename T>
__global__ void attn_sink_grad_kernel(float *doffsets, const T *offsets, const float *lse,
                                      const float *D, int B, int T_, int NH) {
    __shared__ float sh[32];
    const int h = blockIdx.x;
    const float o = to_f(offsets[h]);
    float s = 0.f;
    for (size_t r = threadIdx.x; r < (size_t)B * T_; r += AS_SINK_THREADS) {
        const size_t i = ((r / T_) * NH + h) * T_ + r % T_; /* (b, h, t) */
        s += expf(o - lse[i]) * D[i];
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) doffsets[h] -= s;
}

/* ======================= launchers ======================= */

template <typename T>
static void launch_rowdot(float *D, const T *dout, const T *out, int B, int T_, int NH, int HD,
                          cudaStream_t st) {
    const size_t rows = (size_t)B * T_ * NH;
    attn_rowdot_kernel<T><<<(unsigned)((rows + AD_ROWS - 1) / AD_ROWS), AD_ROWS * 32, 0, st>>>(
        D, dout, out, B, T_, NH, HD);
    CU_CHECK_LAUNCH();
}

template <typename T>
static void launch_sink_grad(float *doffsets, const T *offsets, const float *lse, const float *D,
                             int B, int T_, int NH, cudaStream_t st) {
    attn_sink_grad_kernel<T><<<NH, AS_SINK_THREADS, 0, st>>>(doffsets, offsets, lse, D, B, T_, NH);
    CU_CHECK_LAUNCH();
}

static int aligned(const void *p, uintptr_t a) { return ((uintptr_t)p % a) == 0; }

static int use_mma(LtBackend *be, int HD) {
    return cu_is_bf16(be) && !cu_impl(be)->attn_simt && attention_mma_supported(HD);
}

/* 0 for an empty call; fatal for a head split the layout cannot express or a
 * window without the kstart lattice's kernels read; else 1. */
static int attn_check(const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD) {
    if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0) return 0;
    if (NKV <= 0 || NH % NKV)
        lt_fatal("attention: %d query heads do not split into %d key/value heads", NH, NKV);
    if (window >= 0 && !kstart) lt_fatal("attention: window %d given without kstart", window);
    return 1;
}

/* lattice's kernels have a grid row per (batch, query head). */
static void grid_check(int B, int NH) {
    if (B * NH > 65535) lt_fatal("attention: B*NH = %d exceeds the grid limit 65535", B * NH);
}

/* ======================= op entries ======================= */

// qkv (B, T, NH + 2*NKV, HD) -> out (B, T, NH, HD), lse (B, NH, T)
// cuDNN's graph has no sink logit: calls with offsets run lattice's kernels.
void cu_attention_fwd(LtBackend *be, void *out, float *lse, const void *qkv, const void *offsets,
                      const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD) {
    if (!attn_check(kstart, window, B, T, NH, NKV, HD)) return;
    if (cu_impl(be)->cudnn && !offsets &&
        cudnn_attention_fwd(be, out, lse, qkv, kstart, window, B, T, NH, NKV, HD))
        return;
    grid_check(B, NH);
    const int optin = cu_impl(be)->smem_optin;
    if (use_mma(be, HD) && aligned(qkv, 16) && aligned(out, 4))
        launch_attention_mma_fwd((bf16 *)out, lse, (const bf16 *)qkv, (const bf16 *)offsets,
                                 kstart, B, T, NH, NKV, HD, optin, cu_stream(be));
    else
        launch_attention_simt_fwd(cu_is_bf16(be), out, lse, qkv, offsets, kstart, B, T, NH, NKV,
                                  HD, optin, cu_stream(be));
}

// dout (B, T, NH, HD), qkv, out, lse -> dqkv (qkv's layout), overwritten
void cu_attention_bwd(LtBackend *be, void *dqkv, float *doffsets, const void *dout,
                      const void *qkv, const void *out, const float *lse, const void *offsets,
                      const int32_t *kstart, int window, int B, int T, int NH, int NKV, int HD) {
    if (!attn_check(kstart, window, B, T, NH, NKV, HD)) return;
    if (cu_impl(be)->cudnn && !offsets &&
        cudnn_attention_bwd(be, dqkv, dout, qkv, out, lse, kstart, window, B, T, NH, NKV, HD))
        return;
    grid_check(B, NH);
    const int optin = cu_impl(be)->smem_optin;
    float *D = (float *)cu_scratch(be, (size_t)B * NH * T * sizeof(float));
    if (cu_is_bf16(be))
        launch_rowdot<bf16>(D, (const bf16 *)dout, (const bf16 *)out, B, T, NH, HD,
                            cu_stream(be));
    else
        launch_rowdot<float>(D, (const float *)dout, (const float *)out, B, T, NH, HD,
                             cu_stream(be));
    if (doffsets && cu_is_bf16(be))
        launch_sink_grad<bf16>(doffsets, (const bf16 *)offsets, lse, D, B, T, NH, cu_stream(be));
    else if (doffsets)
        launch_sink_grad<float>(doffsets, (const float *)offsets, lse, D, B, T, NH, cu_stream(be));
    if (use_mma(be, HD) && aligned(qkv, 16) && aligned(dout, 16) && aligned(dqkv, 4))
        launch_attention_mma_bwd((bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv, lse, D,
                                 kstart, B, T, NH, NKV, HD, optin, cu_stream(be));
    else
        launch_attention_simt_bwd(cu_is_bf16(be), dqkv, dout, qkv, lse, D, kstart, B, T, NH, NKV,
                                  HD, optin, cu_stream(be));
}
