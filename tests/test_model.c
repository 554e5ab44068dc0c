/* test_model.c - the whole GPT on the CPU backend: initial loss, gradient
 * check by finite differences, micro-batch accumulation, padded vocabulary,
 * bf16 agreement, layout-independent init, and that training fits a batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "model.h"
#include "optim.h"
#include "test.h"

static LtModelDims tiny_dims(void) {
    LtModelDims d = {.num_layers = 2, .hidden = 16, .heads = 2, .ffn = 64, .seq_len = 8,
                     .max_pos = 12, .vocab = 37, .padded_vocab = 128};
    return d;
}

static void random_tokens(int32_t *x, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) x[i] = (int32_t)(lt_uniform_at(seed, 7, (uint64_t)i) * V);
}

/* Sum of token losses for the given host parameters. */
static double loss_with(LtModel *m, const float *host, const int32_t *in, const int32_t *tgt) {
    lt_model_set_params(m, host);
    return lt_model_step(m, in, tgt, 0.0f);
}

static void test_initial_loss(void) {
    LtModelDims d = tiny_dims();
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *m = lt_model_create(be, &d, 2, d.seq_len, NULL);
    float *host = malloc(m->table.total * sizeof(float));
    lt_params_init(&m->table, 1234, host);
    int N = 2 * d.seq_len;
    int32_t in[16], tgt[16];
    random_tokens(in, N, d.vocab, 1);
    random_tokens(tgt, N, d.vocab, 2);
    double loss = loss_with(m, host, in, tgt) / N;
    CHECK(fabs(loss - log((double)d.vocab)) < 0.05, "initial loss %.4f vs ln V %.4f", loss,
          log((double)d.vocab));
    free(host);
    lt_model_destroy(m);
    lt_backend_destroy(be);
}

static void test_init_layout_independent(void) {
    /* element values depend on (seed, name, index) only: a different layer
     * count leaves the shared tensors identical, another seed changes them */
    LtModelDims a = tiny_dims(), b = tiny_dims();
    b.num_layers = 3;
    LtParamTable ta, tb;
    lt_params_build(&ta, &a);
    lt_params_build(&tb, &b);
    const LtParam *pa = lt_params_find(&ta, "h.1.mlp.fc.weight");
    const LtParam *pb = lt_params_find(&tb, "h.1.mlp.fc.weight");
    REQUIRE(pa && pb, "parameter missing");
    int same = 1, diff_seed = 0;
    for (size_t i = 0; i < pa->numel; i++) {
        same &= lt_param_init_value(pa, 5, i) == lt_param_init_value(pb, 5, i);
        diff_seed |= lt_param_init_value(pa, 5, i) != lt_param_init_value(pa, 6, i);
    }
    CHECK(same, "init differs between layouts");
    CHECK(diff_seed, "seed does not change init");
    /* std of a normal-initialized matrix and the scaled residual projections */
    const LtParam *fc = lt_params_find(&ta, "h.0.mlp.fc.weight");
    const LtParam *pr = lt_params_find(&ta, "h.0.mlp.proj.weight");
    CHECK(fabsf(fc->init_std - 0.02f) < 1e-7f && fabsf(pr->init_std - 0.01f) < 1e-7f,
          "init std %g %g", fc->init_std, pr->init_std);
    const LtParam *wte = lt_params_find(&ta, "wte");
    CHECK(lt_param_init_value(wte, 5, (size_t)a.vocab * a.hidden) == 0.0f, "padded row not zero");
    lt_params_free(&ta);
    lt_params_free(&tb);
}

static void test_gradient_check(void) {
    LtModelDims d = tiny_dims();
    const int B = 2, N = B * d.seq_len;
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *m = lt_model_create(be, &d, B, d.seq_len, NULL);
    const LtParamTable *t = &m->table;
    float *host = malloc(t->total * sizeof(float));
    lt_params_init(t, 99, host);
    /* larger weights than the init so every path carries real gradient */
    for (size_t i = 0; i < t->total; i++) host[i] += 0.3f * lt_normal_at(3, 3, i);
    for (int i = 0; i < t->n; i++) /* keep padded vocab rows zero */
        if (!strcmp(t->p[i].name, "wte"))
            memset(host + t->p[i].offset + (size_t)d.vocab * d.hidden, 0,
                   (size_t)(d.padded_vocab - d.vocab) * d.hidden * sizeof(float));
    int32_t in[16], tgt[16];
    random_tokens(in, N, d.vocab, 11);
    random_tokens(tgt, N, d.vocab, 12);
    lt_model_set_params(m, host);
    lt_model_zero_grads(m);
    lt_model_step(m, in, tgt, 1.0f / N);
    float *g = malloc(t->total * sizeof(float));
    be->ops->download(be, g, m->grads, t->total * sizeof(float));
    int checked = 0, bad = 0;
    const float h = 1e-2f;
    for (int pi = 0; pi < t->n; pi++) {
        const LtParam *p = &t->p[pi];
        for (int k = 0; k < 3; k++) {
            size_t j = (size_t)(lt_uniform_at(77, (uint64_t)pi, (uint64_t)k) * (double)p->numel);
            if (!strcmp(p->name, "wte")) j = (size_t)in[k] * d.hidden + (size_t)k; /* used rows */
            size_t at = p->offset + j;
            float keep = host[at];
            host[at] = keep + h;
            double lp = loss_with(m, host, in, tgt) / N;
            host[at] = keep - h;
            double lm = loss_with(m, host, in, tgt) / N;
            host[at] = keep;
            double fd = (lp - lm) / (2.0 * h);
            double err = fabs(fd - g[at]);
            checked++;
            if (err > 3e-2 * fabs(fd) + 2e-4) {
                bad++;
                printf("  %s[%zu]: analytic %.6g, finite difference %.6g\n", p->name, j, g[at], fd);
            }
        }
    }
    CHECK(bad == 0, "%d of %d gradient entries disagree with finite differences", bad, checked);
    /* padded vocabulary rows never receive gradient */
    const LtParam *wte = &t->p[0];
    double padsum = 0.0;
    for (size_t j = (size_t)d.vocab * d.hidden; j < wte->numel; j++) padsum += fabs(g[wte->offset + j]);
    CHECK(padsum == 0.0, "padded vocab rows got gradient %g", padsum);
    free(g);
    free(host);
    lt_model_destroy(m);
    lt_backend_destroy(be);
}

/* Largest |difference| between two models' gradients, relative to the
 * largest |gradient| of the first. */
static double grad_diff(LtBackend *be, const LtModel *a, const LtModel *b) {
    size_t n = a->table.total;
    float *ga = malloc(n * sizeof(float)), *gb = malloc(n * sizeof(float));
    be->ops->download(be, ga, a->grads, n * sizeof(float));
    be->ops->download(be, gb, b->grads, n * sizeof(float));
    double maxd = 0, maxg = 0;
    for (size_t i = 0; i < n; i++) {
        maxd = fmax(maxd, fabs(ga[i] - gb[i]));
        maxg = fmax(maxg, fabs(ga[i]));
    }
    free(ga);
    free(gb);
    return maxg > 0 ? maxd / maxg : maxd;
}

/* Same initial parameters (from seed) in both models; 32 random inputs and
 * targets drawn from seed + 1, seed + 2. */
static void init_pair(LtModel *a, LtModel *b, uint64_t seed, int32_t in[32], int32_t tgt[32]) {
    float *host = malloc(a->table.total * sizeof(float));
    lt_params_init(&a->table, seed, host);
    lt_model_set_params(a, host);
    lt_model_set_params(b, host);
    free(host);
    random_tokens(in, 32, a->d.vocab, seed + 1);
    random_tokens(tgt, 32, a->d.vocab, seed + 2);
}

static void test_accumulation(void) {
    /* one micro batch of 4 == two micro batches of 2, gradients summed */
    LtModelDims d = tiny_dims();
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *m4 = lt_model_create(be, &d, 4, d.seq_len, NULL), *m2 = lt_model_create(be, &d, 2, d.seq_len, NULL);
    int32_t in[32], tgt[32];
    init_pair(m4, m2, 5, in, tgt);
    double l4 = lt_model_step(m4, in, tgt, 1.0f / 32);
    double l2 = lt_model_step(m2, in, tgt, 1.0f / 32) + lt_model_step(m2, in + 16, tgt + 16, 1.0f / 32);
    CHECK(test_relerr(l2, l4, 1e-9) < 1e-6, "loss %g vs %g", l2, l4);
    double rel = grad_diff(be, m4, m2);
    CHECK(rel <= 1e-5, "max grad difference %g of the largest gradient", rel);
    lt_model_destroy(m4);
    lt_model_destroy(m2);
    lt_backend_destroy(be);
}

/* The LM head in chunks (uneven: 32 tokens in chunks of 5) gives the loss and
 * gradients of the whole micro batch at once; and the auto chunk rule. */
static void test_lm_head_chunks(void) {
    CHECK(lt_model_lm_head_chunk(16384, 50304, 2, 0) == 8192, "124M auto chunk %d",
          lt_model_lm_head_chunk(16384, 50304, 2, 0));
    CHECK(lt_model_lm_head_chunk(2048, 4096, 4, 0) == 2048, "small model: whole micro batch");
    CHECK(lt_model_lm_head_chunk(100000, 1 << 20, 2, 0) == 4096, "floor at 4096 rows: %d",
          lt_model_lm_head_chunk(100000, 1 << 20, 2, 0));
    CHECK(lt_model_lm_head_chunk(64, 50304, 2, 100) == 64, "request capped at the micro batch");
    CHECK(lt_model_lm_head_chunk(64, 50304, 2, 5) == 5, "request taken");
    LtModelDims d = tiny_dims();
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModelOptions whole = {.lm_head_chunk = 0}, five = {.lm_head_chunk = 5};
    LtModel *a = lt_model_create(be, &d, 4, d.seq_len, &whole);
    LtModel *b = lt_model_create(be, &d, 4, d.seq_len, &five);
    CHECK(a->xent_chunk == 32 && b->xent_chunk == 5, "chunks %d, %d", a->xent_chunk, b->xent_chunk);
    int32_t in[32], tgt[32];
    init_pair(a, b, 9, in, tgt);
    double la = lt_model_step(a, in, tgt, 1.0f / 32), lb = lt_model_step(b, in, tgt, 1.0f / 32);
    CHECK(test_relerr(lb, la, 1e-9) < 1e-6, "loss %g vs %g", lb, la);
    double rel = grad_diff(be, a, b);
    CHECK(rel <= 1e-5, "max grad difference %g of the largest gradient", rel);
    lt_model_destroy(a);
    lt_model_destroy(b);
    lt_backend_destroy(be);
}

/* AdamW on one fixed batch must drive the loss down (and bf16 must track fp32). */
static double fit_batch(LtDtype dt, int steps, double *first) {
    LtModelDims d = tiny_dims();
    LtBackend *be = lt_backend_cpu_create(dt, 1);
    LtModel *m = lt_model_create(be, &d, 2, d.seq_len, NULL);
    float *host = malloc(m->table.total * sizeof(float));
    lt_params_init(&m->table, 8, host);
    lt_model_set_params(m, host);
    LtConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.optimizer.lr = 1e-2;
    cfg.optimizer.min_lr = 1e-2;
    cfg.optimizer.decay_steps = steps;
    cfg.optimizer.beta1 = 0.9;
    cfg.optimizer.beta2 = 0.95;
    cfg.optimizer.eps = 1e-8;
    cfg.optimizer.weight_decay = 0.1;
    LtComm *dp = lt_comm_world("dp"); /* one rank: no MPI in this test */
    LtOptimizer *o = lt_optim_create(be, &m->table, &cfg, dp, m->flat, host);
    int32_t in[16], tgt[16];
    random_tokens(in, 16, d.vocab, 31);
    random_tokens(tgt, 16, d.vocab, 32);
    double loss = 0;
    for (int s = 0; s < steps; s++) {
        lt_model_zero_grads(m);
        loss = lt_model_step(m, in, tgt, 1.0f / 16) / 16;
        if (s == 0) *first = loss;
        lt_optim_reduce_grads(o, m->grads);
        double norm = lt_optim_grad_norm(o, m->grads);
        lt_optim_step(o, m->params, m->grads, lt_lr_at(&cfg, s), lt_clip_coef(1.0, norm), NULL);
    }
    if (dt == LT_BF16) { /* parameters stay bf16-representable */
        float *p = malloc(m->table.total * sizeof(float));
        be->ops->download(be, p, m->params, m->table.total * sizeof(float));
        int ok = 1;
        for (size_t i = 0; i < m->table.total; i++) ok &= lt_bf16_round(p[i]) == p[i];
        CHECK(ok, "bf16 parameters are not bf16-representable");
        free(p);
    }
    free(host);
    lt_optim_destroy(o);
    lt_comm_free(dp);
    lt_model_destroy(m);
    lt_backend_destroy(be);
    return loss;
}

static void test_fit_batch(void) {
    double f32_first, bf_first;
    double f32 = fit_batch(LT_F32, 40, &f32_first);
    double bf = fit_batch(LT_BF16, 40, &bf_first);
    CHECK(f32 < 0.5 * f32_first, "fp32 loss %.4f -> %.4f did not halve", f32_first, f32);
    CHECK(bf < 0.5 * bf_first, "bf16 loss %.4f -> %.4f did not halve", bf_first, bf);
    CHECK(fabs(bf_first - f32_first) < 1e-2 * f32_first, "bf16 first loss %.5f vs fp32 %.5f",
          bf_first, f32_first);
}

static void test_lr_schedule(void) {
    LtConfig c;
    memset(&c, 0, sizeof c);
    c.optimizer.lr = 1.0;
    c.optimizer.min_lr = 0.1;
    c.optimizer.warmup_steps = 4;
    c.optimizer.decay_steps = 14;
    CHECK(fabs(lt_lr_at(&c, 0) - 0.25) < 1e-12, "warmup start %g", lt_lr_at(&c, 0));
    CHECK(fabs(lt_lr_at(&c, 3) - 1.0) < 1e-12, "warmup end %g", lt_lr_at(&c, 3));
    CHECK(fabs(lt_lr_at(&c, 4) - 1.0) < 1e-12, "cosine start %g", lt_lr_at(&c, 4));
    CHECK(fabs(lt_lr_at(&c, 9) - 0.55) < 1e-12, "cosine middle %g", lt_lr_at(&c, 9));
    CHECK(fabs(lt_lr_at(&c, 14) - 0.1) < 1e-12 && fabs(lt_lr_at(&c, 100) - 0.1) < 1e-12,
          "after decay %g", lt_lr_at(&c, 14));
    CHECK(lt_clip_coef(1.0, 4.0) < 0.25 && lt_clip_coef(1.0, 4.0) > 0.2499, "clip");
    CHECK(lt_clip_coef(1.0, 0.5) == 1.0 && lt_clip_coef(0.0, 100.0) == 1.0, "no clip");
}

static void test_flops(void) {
    /* Megatron's 72*s*L*h^2*(1 + s/(6h) + V/(12Lh)) with ffn = 4h */
    LtModelDims d = {.num_layers = 12, .hidden = 768, .heads = 12, .ffn = 3072, .seq_len = 1024,
                     .max_pos = 1024, .vocab = 50257, .padded_vocab = 50304};
    double s = 1024, L = 12, h = 768, V = 50304;
    double ref = 72.0 * s * L * h * h * (1.0 + s / (6 * h) + V / (12 * L * h));
    CHECK(test_relerr(lt_model_flops_per_sample(&d, 0), ref, 1) < 1e-12, "flops %g vs %g",
          lt_model_flops_per_sample(&d, 0), ref);
    CHECK(lt_model_flops_per_sample(&d, 1) < ref, "causal count not smaller");
}

int main(void) {
    RUN(test_initial_loss);
    RUN(test_init_layout_independent);
    RUN(test_gradient_check);
    RUN(test_accumulation);
    RUN(test_lm_head_chunks);
    RUN(test_fit_batch);
    RUN(test_lr_schedule);
    RUN(test_flops);
    return test_summary();
}
