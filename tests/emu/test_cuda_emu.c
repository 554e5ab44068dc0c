/* test_cuda_emu.c - the GPU op tests (tests/gpu/test_gpu_ops.c, quick shapes)
 * run without a GPU: the CUDA backend's op entries and kernels
 * (the kernels/cuda sources except the cuBLASLt GEMMs and the runtime glue) execute
 * in the host emulation of tests/emu (every CUDA thread a host thread,
 * mma.sync from the PTX fragment tables, shared memory NaN-poisoned) on host
 * memory, against the CPU backend, with the same tolerances and the same
 * poisoned outputs and determinism checks. The linear case needs cuBLASLt
 * and runs only on a GPU. */
#pragma GCC diagnostic ignored "-Wunused-function"
#define main test_gpu_ops_main
#include "../gpu/test_gpu_ops.c"
#undef main

LtBackend *emu_cuda_backend_create(LtDtype dtype, int attn_simt);

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
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (!strcmp(cases[c].name, "linear")) continue; /* cuBLASLt: GPU only */
        for (int p = 0; p < npairs; p++) {
            /* the alternative backends differ only in the attention path */
            if (pairs[p].tag[strlen(pairs[p].tag) - 1] == 'a' && strcmp(cases[c].name, "attention"))
                continue;
            run_case(&cases[c], &pairs[p]);
        }
    }
    lt_backend_destroy(e32), lt_backend_destroy(e16), lt_backend_destroy(a32);
    lt_backend_destroy(a16), lt_backend_destroy(c32), lt_backend_destroy(c16);
    return test_summary();
}
