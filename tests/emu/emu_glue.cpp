/* emu_glue.cpp - runs the emulated attention kernels (tests/emu/common.cuh)
 * for tests/emu/test_attention_emu.c through a plain C interface: float
 * arrays in and out, converted to the kernels' element type. */
#include "attention.cuh"

thread_local dim3 threadIdx;
dim3 blockIdx, gridDim, blockDim;
unsigned char *g_smem;
size_t g_smem_bytes;
EmuBlock *g_eb;

/* One block after another; the threads of a block run concurrently. */
void emu_run(dim3 grid, dim3 block, size_t smem, std::function<void()> fn) {
    if (grid.y > 65535 || grid.z != 1 || block.y != 1 || block.z != 1 || block.x > 256 ||
        block.x % 32)
        lt_fatal("emu_run: unsupported launch shape");
    gridDim = grid;
    blockDim = block;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            blockIdx = dim3(bx, by, 0);
            g_smem_bytes = smem;
            g_smem = (unsigned char *)aligned_alloc(16, (smem + 15) / 16 * 16 + 16);
            memset(g_smem, 0xff, smem); /* NaN in every float and bf16 */
            EmuBlock *eb = new EmuBlock;
            eb->blk = new std::barrier<>(block.x);
            for (int w = 0; w < 8; w++) eb->warp[w] = new std::barrier<>(32);
            g_eb = eb;
            std::vector<std::thread> th;
            for (unsigned t = 0; t < block.x; t++)
                th.emplace_back([t, &fn] {
                    threadIdx = dim3(t, 0, 0);
                    fn();
                });
            for (auto &x : th) x.join();
            delete eb->blk;
            for (int w = 0; w < 8; w++) delete eb->warp[w];
            delete eb;
            free(g_smem);
        }
}

enum { EMU_SIMT_F32 = 0, EMU_SIMT_BF16 = 1, EMU_MMA_BF16 = 2 };
static const int kSmem = 227 * 1024; /* an H100's opt-in shared memory per block */

template <typename T> static T *to_dev(const float *x, size_t n) {
    T *d = (T *)aligned_alloc(16, (n * sizeof(T) + 15) / 16 * 16 + 16);
    for (size_t i = 0; i < n; i++) d[i] = from_f<T>(x[i]);
    return d;
}
template <typename T> static T *poisoned(size_t n) {
    T *d = (T *)aligned_alloc(16, (n * sizeof(T) + 15) / 16 * 16 + 16);
    memset(d, 0xff, n * sizeof(T));
    return d;
}
template <typename T> static void to_host(float *x, const T *d, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = to_f(d[i]);
}

template <typename T>
static void fwd(int path, float *out, float *lse, const float *qkv, int B, int T_, int NH, int HD) {
    const size_t nq = (size_t)B * T_ * 3 * NH * HD, no = (size_t)B * T_ * NH * HD;
    T *q = to_dev<T>(qkv, nq), *o = poisoned<T>(no);
    memset(lse, 0xff, (size_t)B * NH * T_ * sizeof(float));
    if (path == EMU_MMA_BF16)
        launch_attention_mma_fwd((bf16 *)o, lse, (const bf16 *)q, B, T_, NH, HD, kSmem, 0);
    else
        launch_attention_simt_fwd(path == EMU_SIMT_BF16, o, lse, q, B, T_, NH, HD, kSmem, 0);
    to_host(out, o, no);
    free(q), free(o);
}

template <typename T>
static void bwd(int path, float *dqkv, const float *dout, const float *qkv, const float *out,
                const float *lse, int B, int T_, int NH, int HD) {
    const size_t nq = (size_t)B * T_ * 3 * NH * HD, no = (size_t)B * T_ * NH * HD;
    T *q = to_dev<T>(qkv, nq), *dy = to_dev<T>(dout, no), *o = to_dev<T>(out, no);
    T *dq = poisoned<T>(nq);
    /* D = rowsum(dout * out) per (b, h, t), as attention.cu's pre-pass */
    std::vector<float> D((size_t)B * NH * T_);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T_; t++)
            for (int h = 0; h < NH; h++) {
                const size_t row = ((size_t)b * T_ + t) * NH + h;
                float s = 0.f;
                for (int k = 0; k < HD; k++) s += to_f(dy[row * HD + k]) * to_f(o[row * HD + k]);
                D[((size_t)b * NH + h) * T_ + t] = s;
            }
    if (path == EMU_MMA_BF16)
        launch_attention_mma_bwd((bf16 *)dq, (const bf16 *)dy, (const bf16 *)q, lse, D.data(), B,
                                 T_, NH, HD, kSmem, 0);
    else
        launch_attention_simt_bwd(path == EMU_SIMT_BF16, dq, dy, q, lse, D.data(), B, T_, NH, HD,
                                  kSmem, 0);
    to_host(dqkv, dq, nq);
    free(q), free(dy), free(o), free(dq);
}

extern "C" int emu_attention_supported(int path, int HD) {
    return path == EMU_MMA_BF16 ? attention_mma_supported(HD) : HD <= ATT_SIMT_MAX_HD;
}

extern "C" void emu_attention_fwd(int path, float *out, float *lse, const float *qkv, int B, int T,
                                  int NH, int HD) {
    if (path == EMU_SIMT_F32) fwd<float>(path, out, lse, qkv, B, T, NH, HD);
    else fwd<bf16>(path, out, lse, qkv, B, T, NH, HD);
}

extern "C" void emu_attention_bwd(int path, float *dqkv, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int B, int T, int NH,
                                  int HD) {
    if (path == EMU_SIMT_F32) bwd<float>(path, dqkv, dout, qkv, out, lse, B, T, NH, HD);
    else bwd<bf16>(path, dqkv, dout, qkv, out, lse, B, T, NH, HD);
}
