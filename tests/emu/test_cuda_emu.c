/* test_cuda_emu.c - the GPU op tests (tests/gpu/test_gpu_ops.c; quick shapes, or the GPU's
 * with LT_TEST_FULL=1)
 * run without a GPU: the CUDA backend's op entries and kernels
 * (the kernels/cuda sources except the cuBLASLt GEMMs and the runtime glue) execute
 * in the host emulation of tests/emu (every CUDA thread a fiber,
 * mma.sync from the PTX fragment tables, shared memory NaN-poisoned, 16-byte
 * packs checked for alignment) on host memory, against the CPU backend, with
 * the same tolerances and the same poisoned outputs and determinism checks,
 * including the runs with every buffer off the 16-byte grid (the scalar
 * fallbacks; attention's misaligned run is left to the GPU: misaligned tensors
 * take its generic path, which the alternative pairs run here already). The
 * GEMMs (cuBLASLt on a GPU) are host loops here (emu_gemm.cpp), so the linear,
 * router and linear_group (group by group) cases check the backend's own
 * epilogue kernels and the ops' contracts, not cuBLASLt; the bias gradient's
 * column sum (colsum) and the router's dx update (act_add_f32) also have cases
 * of their own. The `model` case runs whole models (GPT, Llama, an MoE Llama
 * without and with the linear biases, that MoE Llama with gpt-oss's gated
 * activation, Llama with attention sinks) forward and backward on the emulated
 * backend against the CPU backend. */
#pragma GCC diagnostic ignored "-Wunused-function"
#define main test_gpu_ops_main
#include "../gpu/test_gpu_ops.c"
#undef main

#include "model.h"
#include "params.h"

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

/* ---- whole models on the emulated backend ----------------------------------- */

/* The models of the `model` case: GPT; Llama with grouped-query attention,
 * Llama 3.1's RoPE scaling and an untied head; the same Llama with an MoE
 * second layer (4 experts of 32, top-2, aux and z losses); that one with the
 * linear biases (model.add_bias_linear: the router's too); that MoE Llama with
 * gpt-oss's gated activation in the dense and the expert MLPs (quick_gelu,
 * offset 1) clamped at 0.1, which its gates and ups (about 0.16) cross; the
 * dense Llama with learnable attention sinks (model.softmax_type). */
static LtModelDims emu_gpt_dims(void) {
    return (LtModelDims){.num_layers = 2, .hidden = 64, .heads = 2, .ffn = 256, .seq_len = 32,
                         .max_pos = 32, .vocab = 100, .padded_vocab = 128};
}
static LtModelDims emu_llama_dims(void) {
    return (LtModelDims){.num_layers = 2, .hidden = 64, .heads = 4, .ffn = 96, .seq_len = 32,
                         .max_pos = 32, .vocab = 100, .padded_vocab = 128,
                         .arch = LT_ARCH_LLAMA, .kv_heads = 2, .untied = 1, .norm_eps = 1e-5f,
                         .rope_base = 10000, .rope = {LT_ROPE_SCALING_LLAMA3, 8, 1, 4, 8, 0, 0, 0, 0}};
}
static LtModelDims emu_moe_dims(void) {
    LtModelDims d = emu_llama_dims();
    d.moe = (LtMoeDims){.experts = 4, .topk = 2, .ffn = 32, .score = LT_MOE_SOFTMAX,
                        .topk_scale = 1.0f, .balance = LT_MOE_AUX_LOSS, .aux_coeff = 0.1f,
                        .z_coeff = 0.01f};
    d.moe.layer[1] = 1;
    return d;
}
static LtModelDims emu_moe_bias_dims(void) {
    LtModelDims d = emu_moe_dims();
    d.linear_bias = 1;
    return d;
}
static LtModelDims emu_glu_dims(void) {
    LtModelDims d = emu_moe_dims();
    d.glu = (LtGlu){.quick = 1, .offset = 1.0f, .clamp = 0.1f};
    return d;
}
static LtModelDims emu_sinks_dims(void) {
    LtModelDims d = emu_llama_dims();
    d.softmax_type = LT_SOFTMAX_LEARNABLE;
    return d;
}

/* One forward and backward of model d (batch 2) on backend be from the same
 * parameters and tokens: the summed token loss, and the gradients in g. */
static double emu_model_step(LtBackend *be, const LtModelDims *d, float *g) {
    const int B = 2, T = d->seq_len, N = B * T;
    LtModel *m = lt_model_create(be, d, B, T, NULL);
    const LtParamTable *t = &m->table;
    float *host = malloc(t->total * sizeof(float));
    lt_params_init(t, 4242, host);
    int32_t *in = malloc(sizeof(int32_t) * 2 * (size_t)N), *tgt = in + N;
    for (int i = 0; i < 2 * N; i++) in[i] = (int32_t)(lt_uniform_at(17, 3, (uint64_t)i) * d->vocab);
    lt_model_set_params(m, host);
    lt_model_zero_grads(m);
    const double loss = lt_model_step(m, in, tgt, 1.0f / N);
    be->ops->download(be, g, m->grads, t->total * sizeof(float));
    free(host), free(in);
    lt_model_destroy(m);
    return loss;
}

/* Whole models through the CUDA backend's kernels (the GEMMs by emu_gemm.cpp)
 * against the CPU backend: the loss, and each parameter's gradient by the
 * norm of its difference over its norm; the emulated run twice, bitwise. */
static void t_model(const Pair *P) {
    static const char *const names[] = {"gpt",      "llama",   "llama-moe",
                                        "moe-bias", "oss-glu", "llama-sinks"};
    LtModelDims (*const dims[])(void) = {emu_gpt_dims,      emu_llama_dims, emu_moe_dims,
                                         emu_moe_bias_dims, emu_glu_dims,   emu_sinks_dims};
    /* fp32: summation order only; bf16: the CPU backend rounds the same
     * tensors to bf16 but not always at the same points */
    const double loss_tol = P->bf16 ? 1e-3 : 1e-6, grad_tol = P->bf16 ? 3e-2 : 1e-5;
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++) {
        const LtModelDims d = dims[k]();
        LtParamTable t;
        lt_params_build(&t, &d);
        float *gr = malloc(t.total * sizeof(float)), *ge = malloc(t.total * sizeof(float));
        float *ge2 = malloc(t.total * sizeof(float));
        const double lr = emu_model_step(P->ref, &d, gr), le = emu_model_step(P->dut, &d, ge);
        const double le2 = emu_model_step(P->dut, &d, ge2);
        const double lerr = fabs(le - lr) / fabs(lr);
        double worst = 0.0;
        const char *at = "";
        for (int i = 0; i < t.n; i++) {
            const LtParam *p = &t.p[i];
            double dn = 0.0, rn = 0.0;
            for (size_t j = p->offset; j < p->offset + p->numel; j++) {
                dn += ((double)ge[j] - gr[j]) * ((double)ge[j] - gr[j]);
                rn += (double)gr[j] * gr[j];
            }
            const double rel = rn > 0 ? sqrt(dn / rn) : sqrt(dn);
            if (!(rel <= worst)) worst = rel, at = p->name;
        }
        printf("  %-5s model %-9s loss %.6f vs %.6f (rel %.1e, tol %.0e); worst gradient %s "
               "rel %.1e (tol %.0e)\n", P->tag, names[k], le, lr, lerr, loss_tol, at, worst,
               grad_tol);
        CHECK(lerr <= loss_tol, "%s model %s: loss %.8g vs the CPU backend's %.8g", P->tag,
              names[k], le, lr);
        CHECK(worst <= grad_tol, "%s model %s: gradient of %s off by %.3g (relative)", P->tag,
              names[k], at, worst);
        CHECK(le2 == le && !memcmp(ge, ge2, t.total * sizeof(float)),
              "%s model %s: two runs differ", P->tag, names[k]);
        free(gr), free(ge), free(ge2);
        lt_params_free(&t);
    }
}

int main(void) {
    /* the GPU's shapes under make test-full (LT_TEST_FULL=1: about 5 minutes of
     * CPU), the quick ones otherwise (about 20 s) */
    const char *full = getenv("LT_TEST_FULL");
    g_quick = !(full && !strcmp(full, "1"));
    LtBackend *c32 = lt_backend_cpu_create(LT_F32, 1), *c16 = lt_backend_cpu_create(LT_BF16, 1);
    LtBackend *e32 = emu_cuda_backend_create(LT_F32, 0), *e16 = emu_cuda_backend_create(LT_BF16, 0);
    LtBackend *a32 = emu_cuda_backend_create(LT_F32, 1), *a16 = emu_cuda_backend_create(LT_BF16, 1);
    printf("lattice GPU op tests on the emulated CUDA backend (%s), %s shapes\n",
           e32->device_name, g_quick ? "quick" : "the GPU's (LT_TEST_FULL=1)");
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
    const Case model = {"model", t_model, 0};
    for (int p = 0; p < npairs && (!only || listed(only, "model")); p += 2) /* f32, bf16 */
        run_case(&model, &pairs[p]);
    lt_backend_destroy(e32), lt_backend_destroy(e16), lt_backend_destroy(a32);
    lt_backend_destroy(a16), lt_backend_destroy(c32), lt_backend_destroy(c16);
    return test_summary();
}
