/* test_attention_emu.c - the CUDA attention kernels (kernels/cuda/attention_
 * mma.cu and attention_simt.cu, unmodified apart from tests/emu/transform.py's
 * rewrite of inline PTX and launches) run on the CPU in the host emulation of
 * tests/emu/common.cuh, against the CPU backend: so `make test` checks their
 * indexing, causal masking, tail tiles, fragment layouts, shared-memory use
 * and backward without a GPU. Shapes are small (non-multiples of the tiles
 * included); tolerances are those of tests/gpu/test_gpu_ops.c: fp32 1e-5,
 * bf16 by FlashAttention's rule (tests/gpu/attn_bound.h). */
#include <string.h>

#include "../gpu/attn_bound.h"
#include "../test.h"
#include "backend.h"
#include "common.h"

enum { EMU_SIMT_F32 = 0, EMU_SIMT_BF16 = 1, EMU_MMA_BF16 = 2 };
int emu_attention_supported(int path, int HD);
void emu_attention_fwd(int path, float *out, float *lse, const float *qkv, int B, int T, int NH,
                       int HD);
void emu_attention_bwd(int path, float *dqkv, const float *dout, const float *qkv,
                       const float *out, const float *lse, int B, int T, int NH, int HD);

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* Largest |got - ref| / max(|ref|, rms(ref)); NaN counts as infinite. */
static double max_err(const float *got, const float *ref, size_t n) {
    double ss = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)ref[i] * ref[i];
    double rms = n ? sqrt(ss / (double)n) : 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = isnan(got[i]) ? INFINITY : test_relerr(got[i], ref[i], rms > 1e-30 ? rms : 1e-30);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static void check_path(int path, const char *name) {
    static const int shapes[][4] = {{1, 1, 1, 64},  {2, 17, 3, 64}, {1, 100, 2, 32},
                                    {2, 129, 2, 80}, {1, 65, 1, 128}, {1, 70, 2, 40},
                                    {1, 33, 1, 24},  {1, 47, 1, 96}};
    const int bf = path != EMU_SIMT_F32;
    LtBackend *ref = lt_backend_cpu_create(bf ? LT_BF16 : LT_F32, 1);
    REQUIRE(ref && ref->act_size == sizeof(float), "CPU backend");
    int tested = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], HD = shapes[s][3];
        if (!emu_attention_supported(path, HD)) continue;
        tested++;
        const size_t nq = (size_t)B * T * 3 * NH * HD, no = (size_t)B * T * NH * HD;
        const size_t nl = (size_t)B * NH * T;
        float *qkv = lt_malloc(nq * 4), *dout = lt_malloc(no * 4);
        for (size_t i = 0; i < nq; i++) qkv[i] = 1.7f * frand();
        for (size_t i = 0; i < no; i++) dout[i] = frand();
        if (bf) {
            for (size_t i = 0; i < nq; i++) qkv[i] = lt_bf16_round(qkv[i]);
            for (size_t i = 0; i < no; i++) dout[i] = lt_bf16_round(dout[i]);
        }
        float *ro = lt_malloc(no * 4), *rl = lt_malloc(nl * 4), *rg = lt_malloc(nq * 4);
        float *eo = lt_malloc(no * 4), *el = lt_malloc(nl * 4), *eg = lt_malloc(nq * 4);
        /* both backward passes get the reference forward's output (bf16-rounded) */
        ref->ops->attention_fwd(ref, ro, rl, qkv, B, T, NH, HD);
        float *oin = lt_malloc(no * 4);
        for (size_t i = 0; i < no; i++) oin[i] = bf ? lt_bf16_round(ro[i]) : ro[i];
        ref->ops->attention_bwd(ref, rg, dout, qkv, oin, rl, B, T, NH, HD);
        emu_attention_fwd(path, eo, el, qkv, B, T, NH, HD);
        emu_attention_bwd(path, eg, dout, qkv, oin, rl, B, T, NH, HD);
        double tol = bf ? 1e-2 : 1e-5, tol_out = tol, tol_dqkv = tol;
        if (bf) attn_bf16_bounds(qkv, dout, B, T, NH, HD, tol, &tol_out, &tol_dqkv);
        double e_out = max_err(eo, ro, no), e_lse = max_err(el, rl, nl);
        double e_dq = max_err(eg, rg, nq);
        printf("  %-9s B%d T%-4d NH%d HD%-3d out %.2e (tol %.1e)  lse %.2e  dqkv %.2e (tol %.1e)\n",
               name, B, T, NH, HD, e_out, tol_out, e_lse, e_dq, tol_dqkv);
        CHECK(e_out <= tol_out, "%s B%d T%d NH%d HD%d: out error %.3e", name, B, T, NH, HD, e_out);
        CHECK(e_lse <= tol, "%s B%d T%d NH%d HD%d: lse error %.3e", name, B, T, NH, HD, e_lse);
        CHECK(e_dq <= tol_dqkv, "%s B%d T%d NH%d HD%d: dqkv error %.3e", name, B, T, NH, HD,
              e_dq);
        free(qkv), free(dout), free(ro), free(rl), free(rg), free(eo), free(el), free(eg);
        free(oin);
    }
    CHECK(tested >= 5, "%s: only %d shapes apply", name, tested);
    lt_backend_destroy(ref);
}

static void test_simt_fp32(void) { check_path(EMU_SIMT_F32, "simt-f32"); }
static void test_simt_bf16(void) { check_path(EMU_SIMT_BF16, "simt-bf16"); }
static void test_mma_bf16(void) { check_path(EMU_MMA_BF16, "mma-bf16"); }

int main(void) {
    RUN(test_simt_fp32);
    RUN(test_simt_bf16);
    RUN(test_mma_bf16);
    return test_summary();
}
