/* test_cuda_emu.c - the GPU op tests (tests/gpu/test_gpu_ops.c, quick shapes)
 * run without a GPU: the CUDA backend's op entries and kernels
 * (the kernels/cuda sources except the cuBLASLt GEMMs and the runtime glue) execute
 * in the host emulation of tests/emu (every CUDA thread a host thread,
 * mma.sync from the PTX fragment tables, shared memory NaN-poisoned, 16-byte
 * packs checked for alignment) on host memory, against the CPU backend, with
 * the same tolerances and the same poisoned outputs and determinism checks,
 * including the runs with every buffer off the 16-byte grid (the scalar
 * fallbacks; attention's misaligned run is left to the GPU: misaligned tensors
 * take its generic path, which the alternative pairs run here already). The
 * linear case needs cuBLASLt and runs only on a GPU; its bias-gradient column
 * sum, which needs no GEMM, is checked here against a host sum (colsum), and so
 * is the MoE router's dx update (act_add_f32; the router's GEMMs are GPU-only). */
#pragma GCC diagnostic ignored "-Wunused-function"
#define main test_gpu_ops_main
#include "../gpu/test_gpu_ops.c"
#undef main

LtBackend *emu_cuda_backend_create(LtDtype dtype, int attn_simt);
void emu_colsum_add(LtBackend *be, float *dbias, const void *dout, int N, int OC);
void emu_act_add_f32(LtBackend *be, void *dx, const float *t, size_t n);

/* dbias (OC) += column sums of dout (N, OC) on the device against the host's
 * sum in double (inputs identical, so fp32 accuracy in both dtypes): one
 * chunk added straight in (N <= 64), partial rows then their sum, OC not a
 * multiple of the pack; bitwise equal when run twice. */
static void t_colsum(const Pair *P) {
    static const int shapes[][2] = {{7, 24}, {100, 40}, {300, 37}, {130, 1000}};
    LtBackend *be = P->dut;
    for (int s = 0; s < 4; s++) {
        const int N = shapes[s][0], OC = shapes[s][1];
        float *dout = hrand((size_t)N * OC, 1.f, P->bf16), *db0 = hrand(OC, 1.f, 0);
        float *want = hzeros(OC), *got = hzeros(OC);
        for (int c = 0; c < OC; c++) {
            double t = db0[c];
            for (int n = 0; n < N; n++) t += dout[(size_t)n * OC + c];
            want[c] = (float)t;
        }
        void *d = act_up(be, dout, (size_t)N * OC);
        float *g = f32_up(be, db0, OC);
        emu_colsum_add(be, g, d, N, OC);
        f32_down(be, got, g, OC);
        char nm[64];
        snprintf(nm, sizeof nm, "colsum N%d OC%d", N, OC);
        cmp(P, nm, got, want, OC, 1e-5);
        be->ops->upload(be, g, db0, (size_t)OC * 4);
        emu_colsum_add(be, g, d, N, OC);
        void *bits = raw_down(be, g, (size_t)OC * 4);
        same_bits(P, "colsum", bits, got, (size_t)OC * 4);
        dfree(be, d), dfree(be, g);
        free(bits), free(dout), free(db0), free(want), free(got);
    }
}

/* dx (act) += t (fp32), one rounding, against the host's float sum rounded to the
 * act dtype (bitwise): n under one pack, packs and a tail. */
static void t_act_add_f32(const Pair *P) {
    static const size_t sizes[] = {3, 37, 1000};
    LtBackend *be = P->dut;
    for (int s = 0; s < 3; s++) {
        const size_t n = sizes[s];
        float *dx = hrand(n, 1.f, P->bf16), *t = hrand(n, 1.f, 0), *want = hzeros(n);
        float *got = hzeros(n);
        for (size_t i = 0; i < n; i++)
            want[i] = P->bf16 ? lt_bf16_round(dx[i] + t[i]) : dx[i] + t[i];
        void *d = act_up(be, dx, n);
        float *g = f32_up(be, t, n);
        emu_act_add_f32(be, d, g, n);
        act_down(be, got, d, n);
        char nm[64];
        snprintf(nm, sizeof nm, "act_add_f32 n%zu", n);
        cmp(P, nm, got, want, n, 0.0);
        dfree(be, d), dfree(be, g);
        free(dx), free(t), free(want), free(got);
    }
}

int main(void) {
    g_quick = 1;
    LtBackend *c32 = lt_backend_cpu_create(LT_F32, 1), *c16 = lt_backend_cpu_create(LT_BF16, 1);
    LtBackend *e32 = emu_cuda_backend_create(LT_F32, 0), *e16 = emu_cuda_backend_create(LT_BF16, 0);
    LtBackend *a32 = emu_cuda_backend_create(LT_F32, 1), *a16 = emu_cuda_backend_create(LT_BF16, 1);
    printf("lattice GPU op tests on the emulated CUDA backend (%s), quick shapes\n",
           e32->device_name);
    Pair pairs[] = {
        {.ref = c32, .dut = e32, .tag = "f32", .tol = 1e-5},
        {.ref = c32, .dut = a32, .tag = "f32a", .tol = 1e-5},
        {.ref = c16, .dut = e16, .tag = "bf16", .tol = 1e-2, .bf16 = 1},
        {.ref = c16, .dut = a16, .tag = "bf16a", .tol = 1e-2, .bf16 = 1},
    };
    const int npairs = (int)(sizeof pairs / sizeof pairs[0]);
    const char *only = getenv("LT_EMU_ONLY"); /* CASE[,CASE...]: just these (iterating) */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (only && !listed(only, cases[c].name)) continue;
        if (!strcmp(cases[c].name, "linear") || !strcmp(cases[c].name, "moe_router") ||
            !strcmp(cases[c].name, "linear_group"))
            continue; /* cuBLASLt and cuBLAS: GPU only */
        const int attn = !strncmp(cases[c].name, "attention", 9); /* and attention_docs */
        /* routing and dispatch have no act tensors: the bf16 pairs would repeat f32 */
        const int no_act = !strcmp(cases[c].name, "moe_topk") || !strcmp(cases[c].name, "moe_aux") ||
                           !strcmp(cases[c].name, "moe_dispatch");
        for (int p = 0; p < npairs; p++) {
            /* the alternative backends differ only in the attention path */
            if (pairs[p].tag[strlen(pairs[p].tag) - 1] == 'a' && !attn) continue;
            if (no_act && pairs[p].bf16) continue;
            run_case(&cases[c], &pairs[p]);
            if (cases[c].misalign && !attn) run_case_misaligned(&cases[c], &pairs[p]);
        }
    }
    const Case colsum = {"colsum", t_colsum, 1};
    for (int p = 0; p < npairs && (!only || listed(only, "colsum")); p += 2) { /* f32, bf16 */
        run_case(&colsum, &pairs[p]);
        run_case_misaligned(&colsum, &pairs[p]);
    }
    const Case act_add = {"act_add_f32", t_act_add_f32, 1};
    for (int p = 0; p < npairs && (!only || listed(only, "act_add_f32")); p += 2) {
        run_case(&act_add, &pairs[p]);
        run_case_misaligned(&act_add, &pairs[p]);
    }
    lt_backend_destroy(e32), lt_backend_destroy(e16), lt_backend_destroy(a32);
    lt_backend_destroy(a16), lt_backend_destroy(c32), lt_backend_destroy(c16);
    return test_summary();
}
