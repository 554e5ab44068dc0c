/* test_plan_time.c - the planner's step-time model by part (plan.h): the
 * memory-bound term (its bytes scale with the micro batch, sequence
 * parallelism divides the norms' by TP, full recomputation adds a forward's),
 * the attention core at its own rate (s^2, cuDNN or lattice's), the parts
 * adding up to the step; the calibration file's new fields round-trip, a
 * file from before them loads with the built-in row's, and the thread
 * scaling; the ranks' skew charged at TP's collectives and the all-to-alls;
 * an MoE layer's GEMM FLOPs (the router beside a dense MLP of the same
 * active width) and its all-to-alls (bytes by EP, recomputation, across
 * nodes); the GEMM, attention and head FLOPs adding up to the model's with
 * kv_channels and windows; the experts' expected load under EP. Figures only: nothing here is
 * timed. */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "model.h"
#include "plan_device.h"
#include "test.h"

/* A small GPT (2 layers, hidden 64, 4 heads, seq 32, vocab 256, fp32, micro
 * batch 2 of a global 4) with extra overrides, validated for `world` ranks. */
static int small_config(int world, int n, const char **extra, LtConfig *c) {
    const char *base[] = {"model.num_layers=2", "model.hidden_size=64",
                          "model.num_attention_heads=4", "model.seq_length=32",
                          "model.max_position_embeddings=128", "model.vocab_size=256",
                          "train.micro_batch_size=2", "train.global_batch_size=4",
                          "train.precision=fp32", "train.device=cpu"};
    char *ov[32], err[1024];
    int k = 0;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) ov[k++] = (char *)base[i];
    for (int i = 0; i < n; i++) ov[k++] = (char *)extra[i];
    lt_config_defaults(c);
    if (lt_config_load(c, NULL, k, ov, err, sizeof err) ||
        lt_config_validate(c, world, err, sizeof err)) {
        printf("  config: %s\n", err);
        return -1;
    }
    return 0;
}

/* The small GPT's step on `world` ranks, gpn per node, predicted on device dev. */
static int predict_on(int world, int gpn, const LtPlanDevice *dev, LtPlanStep *ps, int n,
                      const char **extra) {
    LtConfig c;
    char err[1024];
    if (small_config(world, n, extra, &c)) return -1;
    if (lt_plan_step(&c, world, gpn, dev, 4, 1, 1.0, ps, err, sizeof err)) {
        printf("  predict: %s\n", err);
        return -1;
    }
    return 0;
}
static int predict(int world, const LtPlanDevice *dev, LtPlanStep *ps, int n, const char **extra) {
    return predict_on(world, world, dev, ps, n, extra);
}

static LtPlanDevice cpu_row(void) {
    LtPlanDevice d;
    lt_plan_device("cpu", &d);
    return d;
}

/* The bytes of the small GPT's gradient zeroing on one rank (4 per fp32
 * parameter: its parameters' bytes in fp32), or -1. */
static double zero_bytes(int world, int n, const char **extra) {
    LtConfig c;
    LtPlanMemory m;
    char err[512];
    if (small_config(world, n, extra, &c) || lt_plan_memory(&c, world, 0, 4, 1, &m, err, sizeof err))
        return -1;
    return (double)m.params;
}

static void test_parts_add_up(void) {
    const LtPlanDevice d = cpu_row();
    LtPlanStep p;
    const char *pp[] = {"parallel.pipeline_model_parallel_size=2"};
    for (int world = 1; world <= 2; world++) {
        REQUIRE(predict(world, &d, &p, world - 1, pp) == 0, "world %d", world);
        CHECK(p.gemm > 0 && p.membound > 0 && p.attention > 0 && p.loss_head > 0 && p.optim > 0,
              "every part present: gemm %g mem %g attn %g head %g optim %g", p.gemm, p.membound,
              p.attention, p.loss_head, p.optim);
        CHECK(test_relerr(p.gemm + p.membound + p.attention + p.loss_head, p.compute, 1e-12) <
                  1e-9, "compute %g = the parts' sum", p.compute);
        const double sum =
            p.compute + p.bubble + p.tp_comm + p.pp_comm + p.dp_comm + p.ep_comm + p.optim;
        CHECK(test_relerr(sum, p.step, 1e-12) < 1e-9, "step %g = parts %g", p.step, sum);
        CHECK(!strcmp(p.attention_impl, "cpu"), "%s", p.attention_impl);
    }
}

/* per micro batch, the memory-bound bytes are linear in its size: with one
 * micro batch per step, doubling it doubles all but the gradient zeroing */
static void test_membound_scales_with_micro_batch(void) {
    const LtPlanDevice d = cpu_row();
    LtPlanStep a, b;
    const char *one[] = {"train.micro_batch_size=2", "train.global_batch_size=2"};
    const char *two[] = {"train.micro_batch_size=4", "train.global_batch_size=4"};
    REQUIRE(predict(1, &d, &a, 2, one) == 0 && predict(1, &d, &b, 2, two) == 0, "predict");
    const double z = zero_bytes(1, 2, one);
    REQUIRE(z > 0, "params");
    CHECK(test_relerr(b.mem_bytes - z, 2 * (a.mem_bytes - z), 1) < 1e-9,
          "bytes %g -> %g (zeroing %g)", a.mem_bytes, b.mem_bytes, z);
    CHECK(b.membound > 1.5 * a.membound, "time %g -> %g", a.membound, b.membound);
}

/* sequence parallelism: each TP rank normalizes N/tp rows - the layers' two
 * norms (4s R C each, each way) and the final norm (4.5s R C each way) */
static void test_sp_divides_norm_bytes(void) {
    const LtPlanDevice d = cpu_row();
    LtPlanStep no, sp;
    const char *tp[] = {"parallel.tensor_model_parallel_size=2"};
    const char *tp_sp[] = {"parallel.tensor_model_parallel_size=2",
                           "parallel.sequence_parallel=true"};
    REQUIRE(predict(2, &d, &no, 1, tp) == 0 && predict(2, &d, &sp, 2, tp_sp) == 0, "predict");
    const double s = 4, N = 2 * 32, C = 64, L = 2, M = 2; /* micro batches per step: 4 / 2 */
    const double norms = M * (L * 16 + 9) * s * N * C;  /* without SP, per step */
    CHECK(test_relerr(no.mem_bytes - sp.mem_bytes, norms / 2, 1) < 1e-9,
          "SP saves %g bytes, the norms' half is %g", no.mem_bytes - sp.mem_bytes, norms / 2);
}

/* full recomputation repeats a forward's memory-bound work (GPT: the two
 * norms 8s R C, GeLU 3s N F) and attention; selective the attention only */
static void test_recompute_adds_forward(void) {
    const LtPlanDevice d = cpu_row();
    LtPlanStep none, full, sel;
    const char *f[] = {"train.recompute=full"}, *s_[] = {"train.recompute=selective"};
    REQUIRE(predict(1, &d, &none, 0, NULL) == 0 && predict(1, &d, &full, 1, f) == 0 &&
                predict(1, &d, &sel, 1, s_) == 0,
            "predict");
    const double s = 4, N = 64, C = 64, F = 256, L = 2, M = 2;
    const double fwd = M * L * (8 * s * N * C + 3 * s * N * F);
    CHECK(test_relerr(full.mem_bytes - none.mem_bytes, fwd, 1) < 1e-9, "full adds %g, want %g",
          full.mem_bytes - none.mem_bytes, fwd);
    CHECK(sel.mem_bytes == none.mem_bytes, "selective adds no memory-bound bytes");
    CHECK(test_relerr(sel.attn_flops, none.attn_flops * 4 / 3, 1) < 1e-12 &&
              test_relerr(full.attn_flops, sel.attn_flops, 1) < 1e-12,
          "attention FLOPs %g, %g, %g", none.attn_flops, sel.attn_flops, full.attn_flops);
    CHECK(full.gemm > none.gemm && sel.gemm == none.gemm, "recomputed GEMMs: full only");
}

/* the attention core: FLOPs and time go with s^2 at a fixed micro batch (4 B
 * s^2 h forward, twice backward); cuDNN's rate where bf16 lets auto pick it */
static void test_attention_scales(void) {
    const LtPlanDevice d = cpu_row();
    LtPlanStep a, b;
    const char *s64[] = {"model.seq_length=64"}, *s128[] = {"model.seq_length=128"};
    REQUIRE(predict(1, &d, &a, 1, s64) == 0 && predict(1, &d, &b, 1, s128) == 0, "predict");
    const double want = 2 /* micro batches */ * 2 /* layers */ * 3 * 4.0 * 2 * 64 * 64 * 64;
    CHECK(test_relerr(a.attn_flops, want, 1) < 1e-12, "FLOPs %g, want %g", a.attn_flops, want);
    CHECK(test_relerr(b.attn_flops, 4 * a.attn_flops, 1) < 1e-12, "x4 FLOPs");
    CHECK(test_relerr(b.attention, 4 * a.attention, 1e-30) < 1e-9, "x4 time: %g, %g",
          a.attention, b.attention);
    LtPlanDevice h;
    REQUIRE(lt_plan_device("h100", &h) == 0, "h100 row");
    const char *bf[] = {"train.precision=bf16", "train.device=auto"},
               *lat[] = {"train.precision=bf16", "train.device=auto", "model.attention=lattice"};
    LtPlanStep cu, la;
    REQUIRE(predict(1, &h, &cu, 2, bf) == 0 && predict(1, &h, &la, 3, lat) == 0, "predict bf16");
    CHECK(!strcmp(cu.attention_impl, "cudnn") && !strcmp(la.attention_impl, "lattice"), "%s %s",
          cu.attention_impl, la.attention_impl);
    /* (at the small GPT's T 32, HD 16: the shape factors' corner T 1024, HD 64) */
    const double want_ratio =
        (1 / (h.attn_fwd_tflops * lt_plan_attn_shape(&h, LT_PLAN_ATTN_LATTICE, 0, 32, 16)) +
         2 / (h.attn_bwd_tflops * lt_plan_attn_shape(&h, LT_PLAN_ATTN_LATTICE, 1, 32, 16))) /
        (1 / (h.cudnn_fwd_tflops * lt_plan_attn_shape(&h, LT_PLAN_ATTN_CUDNN, 0, 32, 16)) +
         2 / (h.cudnn_bwd_tflops * lt_plan_attn_shape(&h, LT_PLAN_ATTN_CUDNN, 1, 32, 16)));
    CHECK(test_relerr(la.attention / cu.attention, want_ratio, 1) < 1e-9,
          "lattice / cudnn %g, rates say %g", la.attention / cu.attention, want_ratio);
}

/* a sliding window on every other layer: that layer's band share of the
 * FLOPs, at the window's rates as the engine runs it - under auto with a
 * deterministic backward cuDNN's forward and lattice's backward, under
 * model.attention=cudnn both cuDNN's, without window figures the causal
 * rates of the same implementations; a window reaching every key is causal */
static void test_attention_window(void) {
    LtPlanDevice h;
    REQUIRE(lt_plan_device("h100", &h) == 0, "h100 row");
    REQUIRE(h.attn_win_bwd_tflops > 0 && h.cudnn_win_fwd_tflops > 0, "the row's window rates");
    const char *base[] = {"train.precision=bf16", "train.device=auto", "model.seq_length=128",
                          "model.window_attn_skip_freq=2", "model.window_size=[8, 0]",
                          "model.attention=cudnn"};
    LtPlanStep none, au, cu, wide, plain;
    REQUIRE(predict(1, &h, &none, 3, base) == 0 && predict(1, &h, &au, 5, base) == 0 &&
                predict(1, &h, &cu, 6, base) == 0,
            "predict");
    const char *w127[] = {"train.precision=bf16", "train.device=auto", "model.seq_length=128",
                          "model.window_attn_skip_freq=2", "model.window_size=[127, 0]"};
    REQUIRE(predict(1, &h, &wide, 5, w127) == 0, "predict W 127");
    const double W = 9.0, S = 128.0, fr = (W * (W + 1) / 2 + (S - W) * W) / (S * (S + 1) / 2);
    CHECK(test_relerr(au.attn_flops, none.attn_flops * (1 + fr) / 2, 1) < 1e-12,
          "FLOPs %g, want %g", au.attn_flops, none.attn_flops * (1 + fr) / 2);
    /* the causal layers at their shape's rates (T 128, HD 16); the band's rates are
     * measured at a window's own shape and taken as they are */
    const double c =
        1 / (h.cudnn_fwd_tflops * lt_plan_attn_shape(&h, LT_PLAN_ATTN_CUDNN, 0, 128, 16)) +
        2 / (h.cudnn_bwd_tflops * lt_plan_attn_shape(&h, LT_PLAN_ATTN_CUDNN, 1, 128, 16));
    const double wa = fr * (1 / h.cudnn_win_fwd_tflops + 2 / h.attn_win_bwd_tflops),
                 wc = fr * (1 / h.cudnn_win_fwd_tflops + 2 / h.cudnn_win_bwd_tflops);
    CHECK(test_relerr(au.attention / none.attention, (c + wa) / (2 * c), 1) < 1e-9,
          "auto: %g of the causal time, rates say %g", au.attention / none.attention,
          (c + wa) / (2 * c));
    CHECK(test_relerr(cu.attention / none.attention, (c + wc) / (2 * c), 1) < 1e-9,
          "cudnn: %g of the causal time, rates say %g", cu.attention / none.attention,
          (c + wc) / (2 * c));
    CHECK(wide.attention == none.attention && wide.attn_flops == none.attn_flops,
          "a window reaching key 0 is causal: %g vs %g", wide.attention, none.attention);
    h.attn_win_fwd_tflops = h.attn_win_bwd_tflops = h.cudnn_win_fwd_tflops = 0;
    h.cudnn_win_bwd_tflops = 0;
    REQUIRE(predict(1, &h, &plain, 5, base) == 0, "predict without window figures");
    const double wp =
        fr * (1 / (h.cudnn_fwd_tflops * lt_plan_attn_shape(&h, LT_PLAN_ATTN_CUDNN, 0, 128, 16)) +
              2 / (h.attn_bwd_tflops * lt_plan_attn_shape(&h, LT_PLAN_ATTN_LATTICE, 1, 128, 16)));
    CHECK(test_relerr(plain.attention / none.attention, (c + wp) / (2 * c), 1) < 1e-9,
          "no window figures (auto: the backward at lattice's causal rate): %g of the causal "
          "time, want %g", plain.attention / none.attention, (c + wp) / (2 * c));
}

/* The attention core's rate by shape on a GPU: 1 at the reference (T 2048, HD
 * 128) and on a CPU, the table's H200 figures at its points (cuDNN at GPT-2's
 * T 1024, HD 64: 0.611 forward, 0.582 backward), log-linear between them,
 * the edge's outside; the planner's attention time follows (equal FLOPs at
 * HD 64 and HD 128 take the factors' ratio), and a non-deterministic cuDNN
 * backward its own figures. */
static void test_attention_shape(void) {
    LtPlanDevice h, cpu = cpu_row();
    REQUIRE(lt_plan_device("h200", &h) == 0, "h200 row");
    const int C = LT_PLAN_ATTN_CUDNN, N = LT_PLAN_ATTN_CUDNN_NONDET, L = LT_PLAN_ATTN_LATTICE;
    CHECK(lt_plan_attn_shape(&h, C, 0, 2048, 128) == 1.0 &&
              lt_plan_attn_shape(&h, C, 1, 2048, 128) == 1.0 &&
              lt_plan_attn_shape(&h, L, 1, 2048, 128) == 1.0,
          "reference");
    CHECK(lt_plan_attn_shape(&cpu, C, 0, 1024, 64) == 1.0, "a CPU has no factors");
    CHECK(test_relerr(lt_plan_attn_shape(&h, C, 0, 1024, 64), 0.611, 1) < 1e-12 &&
              test_relerr(lt_plan_attn_shape(&h, C, 1, 1024, 64), 0.582, 1) < 1e-12 &&
              test_relerr(lt_plan_attn_shape(&h, N, 1, 2048, 64), 0.837, 1) < 1e-12,
          "table points");
    /* T 1448 ~ 2^10.5: halfway in log2 between 0.874 and 1 */
    CHECK(test_relerr(lt_plan_attn_shape(&h, C, 0, 1448, 128), 0.874 + 0.126 * log2(1448 / 1024.0),
                      1) < 1e-12,
          "between T 1024 and 2048: %g", lt_plan_attn_shape(&h, C, 0, 1448, 128));
    /* HD 96 ~ 2^6.585: the same fraction between HD 64 and 128 at T 2048 */
    const double fh = log2(96 / 64.0);
    CHECK(test_relerr(lt_plan_attn_shape(&h, C, 1, 2048, 96), 0.687 + fh * (1 - 0.687), 1) < 1e-12,
          "between HD 64 and 128: %g", lt_plan_attn_shape(&h, C, 1, 2048, 96));
    CHECK(lt_plan_attn_shape(&h, C, 0, 128, 16) == lt_plan_attn_shape(&h, C, 0, 1024, 64) &&
              lt_plan_attn_shape(&h, C, 0, 32768, 256) == lt_plan_attn_shape(&h, C, 0, 4096, 128),
          "clamped at the edges");
    /* equal attention FLOPs (the same width, 4 heads of 64 or 2 of 128) at T 1024 */
    const char *hd64[] = {"train.precision=bf16", "train.device=auto", "model.hidden_size=256",
                          "model.seq_length=1024", "model.max_position_embeddings=1024"},
               *hd128[] = {"train.precision=bf16", "train.device=auto", "model.hidden_size=256",
                           "model.seq_length=1024", "model.max_position_embeddings=1024",
                           "model.num_attention_heads=2"},
               *nd[] = {"train.precision=bf16", "train.device=auto", "model.hidden_size=256",
                        "model.seq_length=1024", "model.max_position_embeddings=1024",
                        "model.attention_deterministic=false"};
    LtPlanStep a, b, n;
    REQUIRE(predict(1, &h, &a, 5, hd64) == 0 && predict(1, &h, &b, 6, hd128) == 0 &&
                predict(1, &h, &n, 6, nd) == 0,
            "predict");
    CHECK(a.attn_flops == b.attn_flops, "FLOPs %g %g", a.attn_flops, b.attn_flops);
    const double r64 = 1 / (h.cudnn_fwd_tflops * 0.611) + 2 / (h.cudnn_bwd_tflops * 0.582),
                 r128 = 1 / (h.cudnn_fwd_tflops * 0.874) + 2 / (h.cudnn_bwd_tflops * 0.835),
                 rnd = 1 / (h.cudnn_fwd_tflops * 0.611) + 2 / (h.cudnn_bwd_tflops * 0.636);
    CHECK(test_relerr(a.attention / b.attention, r64 / r128, 1) < 1e-9,
          "HD 64 / HD 128: %g, factors say %g", a.attention / b.attention, r64 / r128);
    CHECK(test_relerr(n.attention / a.attention, rnd / r64, 1) < 1e-9,
          "non-deterministic / deterministic: %g, factors say %g", n.attention / a.attention,
          rnd / r64);
}

/* A GPU calibration's attention figures hold T 2048, HD 128: --calibrate writes
 * attn_reference_t 2048 and they read back as written; a GPU file without it
 * (before 3e32dcb: the mix of T 1024, 2048, 4096 at FLOPs 1 : 2 : 4) is taken
 * to the reference on reading, the row's figures it lacks untouched; another
 * reference is refused; a CPU file is never scaled. */
static void test_calibration_attention_reference(void) {
    char *dir = test_tmpdir("plan_time_ref");
    REQUIRE(dir, "tmpdir");
    char path[512], old[512], bad[512], err[512];
    snprintf(path, sizeof path, "%s/new.json", dir);
    snprintf(old, sizeof old, "%s/old.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    LtPlanDevice row;
    REQUIRE(lt_plan_device("h200", &row) == 0, "h200 row");
    LtPlanCalibration cal = {.prec = LT_PREC_BF16, .ranks = 1, .ranks_per_node = 1, .seconds = 20,
                             .device_name = "NVIDIA H200", .peak_source = "datasheet"};
    cal.dev = row;
    cal.dev.cudnn_fwd_tflops = 1020, cal.dev.attn_bwd_tflops = 230;
    cal.has_cudnn = 1;
    REQUIRE(lt_plan_calibration_write(path, &cal, err, sizeof err) == 0, "%s", err);
    LtPlanDevice d;
    REQUIRE(lt_plan_calibration_load(path, LT_PREC_BF16, &d, err, sizeof err) == 0, "%s", err);
    CHECK(d.cudnn_fwd_tflops == 1020 && d.attn_bwd_tflops == 230, "written, read back: %g %g",
          d.cudnn_fwd_tflops, d.attn_bwd_tflops);
    FILE *f = fopen(old, "w");
    REQUIRE(f, "write %s", old);
    fputs("{\"format\": \"lattice-calibration/1\", \"device\": \"h200\", \"precision\": "
          "\"bf16\", \"threads\": 0, \"peak_tflops\": 989.4, \"gemm_eff\": 0.749, "
          "\"gemm_half_tokens\": 364, \"mem_gbs\": 4142, \"cudnn_fwd_tflops\": 1063, "
          "\"cudnn_bwd_tflops\": 627.2}\n", f);
    fclose(f);
    REQUIRE(lt_plan_calibration_load(old, LT_PREC_BF16, &d, err, sizeof err) == 0, "%s", err);
    /* the fifth draw's round 1: cuDNN 1063 / 627.2 over the mix; its T 2048 alone
     * measured 1029 / 605 */
    const double mf = 7.0 / (1 / 0.874 + 2 / 1.0 + 4 / 1.119),
                 mb = 7.0 / (1 / 0.835 + 2 / 1.0 + 4 / 1.132);
    CHECK(test_relerr(d.cudnn_fwd_tflops, 1063 / mf, 1) < 1e-12 &&
              test_relerr(d.cudnn_bwd_tflops, 627.2 / mb, 1) < 1e-12,
          "old GPU file to the reference: %g %g (want %g %g)", d.cudnn_fwd_tflops,
          d.cudnn_bwd_tflops, 1063 / mf, 627.2 / mb);
    CHECK(fabs(d.cudnn_fwd_tflops - 1029) < 15 && fabs(d.cudnn_bwd_tflops - 605) < 15,
          "near what T 2048 measured: %g %g", d.cudnn_fwd_tflops, d.cudnn_bwd_tflops);
    CHECK(d.attn_fwd_tflops == row.attn_fwd_tflops, "the row's figure untouched");
    f = fopen(bad, "w");
    REQUIRE(f, "write %s", bad);
    fputs("{\"format\": \"lattice-calibration/1\", \"device\": \"h200\", \"precision\": "
          "\"bf16\", \"peak_tflops\": 989.4, \"gemm_eff\": 0.749, \"gemm_half_tokens\": 364, "
          "\"mem_gbs\": 4142, \"attn_reference_t\": 1024}\n", f);
    fclose(f);
    CHECK(lt_plan_calibration_load(bad, LT_PREC_BF16, &d, err, sizeof err) != 0 &&
              strstr(err, "attn_reference_t"),
          "another reference refused: %s", err);
    LtPlanDevice cpu = cpu_row();
    CHECK(!lt_plan_device_is_gpu(&cpu) && lt_plan_device_is_gpu(&row), "cpu / gpu");
}

/* a calibration's figures are read back; a file from before the memory-bound
 * term takes the built-in row's; threads scale the rates linearly */
static void test_calibration_file(void) {
    char *dir = test_tmpdir("plan_time");
    REQUIRE(dir, "tmpdir");
    char path[512], old[512], err[512];
    snprintf(path, sizeof path, "%s/cal.json", dir);
    snprintf(old, sizeof old, "%s/old.json", dir);
    LtPlanCalibration cal = {.prec = LT_PREC_FP32, .ranks = 4, .ranks_per_node = 1, .threads = 2,
                             .seconds = 2,
                             .device_name = "cpu", .peak_source = "test"};
    cal.dev = (LtPlanDevice){.name = "cpu", .fp32_tflops = 0.03, .mem_gbs = 6, .gemm_eff = 0.9,
                             .gemm_half_tokens = 20, .elem_gbs = 1.25, .xent_gbs = 2.5,
                             .optim_gbs = 3.75, .attn_fwd_tflops = 0.007,
                             .attn_bwd_tflops = 0.013, .cudnn_fwd_tflops = 0.5,
                             .cudnn_bwd_tflops = 0.25, .attn_win_fwd_tflops = 0.004,
                             .attn_win_bwd_tflops = 0.006, .cudnn_win_fwd_tflops = 0.2,
                             .cudnn_win_bwd_tflops = 0.05, .intra_gbs = 1.5,
                             .latency_us = 2, .sync_skew = 0.0625};
    cal.has_cudnn = 1;
    cal.has_comm = 1;
    REQUIRE(lt_plan_calibration_write(path, &cal, err, sizeof err) == 0, "%s", err);
    LtPlanDevice d;
    REQUIRE(lt_plan_calibration_load(path, LT_PREC_FP32, &d, err, sizeof err) == 0, "%s", err);
    CHECK(d.elem_gbs == 1.25 && d.xent_gbs == 2.5 && d.optim_gbs == 3.75 &&
              d.attn_fwd_tflops == 0.007 && d.attn_bwd_tflops == 0.013,
          "read back: %g %g %g %g %g", d.elem_gbs, d.xent_gbs, d.optim_gbs, d.attn_fwd_tflops,
          d.attn_bwd_tflops);
    CHECK(d.cudnn_fwd_tflops == 0.5 && d.cudnn_bwd_tflops == 0.25, "cuDNN's: %g %g",
          d.cudnn_fwd_tflops, d.cudnn_bwd_tflops);
    CHECK(d.attn_win_fwd_tflops == 0.004 && d.attn_win_bwd_tflops == 0.006 &&
              d.cudnn_win_fwd_tflops == 0.2 && d.cudnn_win_bwd_tflops == 0.05,
          "window rates: %g %g %g %g", d.attn_win_fwd_tflops, d.attn_win_bwd_tflops,
          d.cudnn_win_fwd_tflops, d.cudnn_win_bwd_tflops);
    CHECK(d.threads == 2 && d.ranks == 1, "threads %d, ranks per node %d (of 4)", d.threads,
          d.ranks);
    CHECK(d.sync_skew == 0.0625 && d.intra_gbs == 1.5 && d.latency_us == 2,
          "skew and all-reduce: %g %g %g", d.sync_skew, d.intra_gbs, d.latency_us);
    /* a file as --calibrate wrote it before (bench/2026-11-24-cpu-calibrate.md) */
    FILE *f = fopen(old, "w");
    REQUIRE(f, "write %s", old);
    fputs("{\"format\": \"lattice-calibration/1\", \"device\": \"cpu\", \"device_name\": \"cpu\","
          " \"host\": \"vm\", \"date\": \"2026-11-24T10:00:00Z\", \"precision\": \"fp32\","
          " \"ranks\": 1, \"threads\": 2, \"seconds\": 60, \"peak_source\": \"measured\","
          " \"peak_tflops\": 0.0297, \"gemm_eff\": 1.0, \"gemm_half_tokens\": 25,"
          " \"mem_gbs\": 25.5, \"mem_gib\": 23.5}\n", f);
    fclose(f);
    LtPlanDevice o, row = cpu_row();
    REQUIRE(lt_plan_calibration_load(old, LT_PREC_FP32, &o, err, sizeof err) == 0, "%s", err);
    CHECK(o.elem_gbs == row.elem_gbs && o.attn_bwd_tflops == row.attn_bwd_tflops &&
              o.gemm_eff == 1.0,
          "old file: the row's memory-bound and attention figures, its own GEMMs");
    CHECK(o.sync_skew == 0 && row.sync_skew == 0, "old file: no skew (the row's %g)",
          row.sync_skew);
    /* 2 threads on 1 rank; 2 ranks on that machine have 1 each: rates halve */
    CHECK(lt_plan_device_run_threads(&d, 0, 2) == 1.0, "2 ranks: 1 thread each");
    CHECK(lt_plan_device_run_threads(&d, 1, 1) == 1.0, "train.threads=1 on 1 rank");
    CHECK(lt_plan_device_run_threads(&d, 0, 4) == 0.5, "4 ranks share 2 cores");
    LtPlanDevice h = d;
    CHECK(lt_plan_device_scale_threads(&h, 1.0) == 0.5 && h.fp32_tflops == 0.015 &&
              h.elem_gbs == 0.625 && h.attn_fwd_tflops == 0.0035,
          "halved: %g %g %g", h.fp32_tflops, h.elem_gbs, h.attn_fwd_tflops);
    LtPlanDevice g;
    lt_plan_device("h100", &g);
    CHECK(lt_plan_device_run_threads(&g, 0, 8) == 0 && lt_plan_device_scale_threads(&g, 4) == 1,
          "a GPU row is not scaled");
    test_rm_rf(dir);
    free(dir);
}

/* The ranks' skew: TP 2 waits sync_skew of its passes' compute at its
 * collectives, in the exposed TP communication and the step (the rest of
 * the step as without it), and sync_skew_us at each of them; EP 2 without
 * TP in the all-to-alls' part; one rank and DP 2 (no collective inside a
 * pass) are not charged */
static void test_sync_skew(void) {
    LtPlanDevice d = cpu_row(), s = cpu_row();
    s.sync_skew = 0.125;
    const char *tp[] = {"parallel.tensor_model_parallel_size=2",
                        "parallel.sequence_parallel=true", "parallel.tp_comm_overlap=true"};
    LtPlanStep a, b;
    REQUIRE(predict(2, &d, &a, 3, tp) == 0 && predict(2, &s, &b, 3, tp) == 0, "predict TP 2");
    const double z = zero_bytes(2, 3, tp);
    REQUIRE(z > 0, "params");
    const double busy = a.compute - z / (d.elem_gbs * 1e9); /* the passes' compute */
    CHECK(a.sync_wait == 0 && test_relerr(b.sync_wait, 0.125 * busy, 1e-30) < 1e-9,
          "TP 2: waits %g s, want 0.125 x %g s", b.sync_wait, busy);
    CHECK(test_relerr(b.tp_comm - a.tp_comm, b.sync_wait, 1e-30) < 1e-9 &&
              test_relerr(b.step - a.step, b.sync_wait, 1e-30) < 1e-9,
          "in the TP communication (+%g s) and the step (+%g s)", b.tp_comm - a.tp_comm,
          b.step - a.step);
    CHECK(b.compute == a.compute && test_relerr(b.hidden_tp, a.hidden_tp, 1e-30) < 1e-9 &&
              a.hidden_tp > 0 && b.ep_comm == 0,
          "compute %g, %g and what the overlap hides (%g, %g) unchanged", a.compute, b.compute,
          a.hidden_tp, b.hidden_tp);
    /* the wait per collective: SP doubles a layer's collectives (4 more per layer
     * each way) and adds the loss head's input gather (one per forward), over
     * 2 layers and 2 micro batches 18 more */
    LtPlanDevice u = cpu_row();
    u.sync_skew_us = 100;
    const char *tp2[] = {"parallel.tensor_model_parallel_size=2"};
    REQUIRE(predict(2, &u, &a, 1, tp2) == 0 && predict(2, &u, &b, 2, tp) == 0, "predict (SP)");
    CHECK(a.sync_wait > 0 && test_relerr(b.sync_wait - a.sync_wait, 18 * 100e-6, 1) < 1e-9,
          "SP waits %g s, without %g s: %g more collectives", b.sync_wait, a.sync_wait,
          (b.sync_wait - a.sync_wait) / 100e-6);
    const char *dp[] = {"train.global_batch_size=8"};
    for (int world = 1; world <= 2; world++) {
        REQUIRE(predict(world, &d, &a, 1, dp) == 0 && predict(world, &s, &b, 1, dp) == 0,
                "predict %d rank(s)", world);
        CHECK(b.step == a.step && b.sync_wait == 0, "%d rank(s): %g s, %g s", world, a.step,
              b.step);
    }
    const char *ep[] = {"model.num_experts=4", "train.global_batch_size=8",
                        "parallel.expert_model_parallel_size=2"};
    REQUIRE(predict(2, &d, &a, 3, ep) == 0 && predict(2, &s, &b, 3, ep) == 0, "predict EP 2");
    CHECK(b.sync_wait > 0 && test_relerr(b.ep_comm - a.ep_comm, b.sync_wait, 1e-30) < 1e-9 &&
              b.tp_comm == 0 && test_relerr(b.step - a.step, b.sync_wait, 1e-30) < 1e-9,
          "EP 2: waits %g s in the all-to-alls' %g s", b.sync_wait, b.ep_comm);
}

/* An MoE layer's GEMMs: with the active parameters fixed (top-2 of 64-wide
 * experts against a dense 128-wide MLP) the GEMM FLOPs differ by the router's
 * 2 h E per token alone, forward and backward; more experts of that width
 * add only router FLOPs, and each expert's fewer rows run its GEMMs slower */
static void test_moe_gemm_flops(void) {
    const LtPlanDevice d = cpu_row();
    const char *dense[] = {"model.ffn_hidden_size=128"},
               *e4[] = {"model.ffn_hidden_size=128", "model.num_experts=4",
                        "model.moe_ffn_hidden_size=64"},
               *e16[] = {"model.ffn_hidden_size=128", "model.num_experts=16",
                         "model.moe_ffn_hidden_size=64"};
    LtPlanStep pd, p4, p16;
    REQUIRE(predict(1, &d, &pd, 1, dense) == 0 && predict(1, &d, &p4, 3, e4) == 0 &&
                predict(1, &d, &p16, 3, e16) == 0,
            "predict");
    const double tokens = 4 * 32, L = 2, C = 64, router = 3 * 2 * C * tokens * L;
    CHECK(test_relerr(p4.gemm_flops - pd.gemm_flops, 4 * router, 1) < 1e-9,
          "E 4: %g GEMM FLOPs, dense %g: the router's %g apart", p4.gemm_flops, pd.gemm_flops,
          4 * router);
    CHECK(test_relerr(p16.gemm_flops - p4.gemm_flops, 12 * router, 1) < 1e-9,
          "E 16: %g, E 4: %g", p16.gemm_flops, p4.gemm_flops);
    CHECK(p16.gemm > p4.gemm && p4.gemm > pd.gemm, "GEMM time dense %g < E 4 %g < E 16 %g",
          pd.gemm, p4.gemm, p16.gemm);
    CHECK(p4.ep_comm == 0 && p4.a2a_bytes == 0, "no all-to-all without EP");
    /* the experts' part of the GEMM time: none dense; what E 16 adds is theirs */
    CHECK(pd.experts == 0 && p4.experts > 0 && p4.experts < p4.gemm,
          "experts' time dense %g, E 4 %g of %g", pd.experts, p4.experts, p4.gemm);
    CHECK(test_relerr(p16.gemm - p4.gemm, p16.experts - p4.experts, 1) < 1e-9,
          "E 16 - E 4: gemm %g, experts %g", p16.gemm - p4.gemm, p16.experts - p4.experts);
    /* MFU counts the same model FLOPs lt_model_flops_per_sample does */
    CHECK(test_relerr(p4.mfu * p4.step * d.fp32_tflops * 1e12, 4 * (
              3.0 * 32 * L * (8 * C * C + 4 * 32 * C + 4 * C * 128 + 2 * C * 4) +
              3.0 * 32 * 2 * C * 256), 1) < 1e-9, "MFU's FLOPs");
}

/* The planner's GEMM, attention-core and loss-head FLOPs of a step add up to
 * the model's count (lt_model_flops_per_sample) whatever the head dimension
 * (kv_channels: query heads 4 x 32 = 128 against hidden 64) and on windowed
 * layers, dense or MoE: the GEMMs were the model's count less 4 s h per
 * token, which on GPT-OSS's shape (64 x 64 heads, hidden 2880, windows on
 * every other layer) left its MoE layers' attention projections negative. */
static void test_flops_add_up(void) {
    const LtPlanDevice d = cpu_row();
    const char *cases[][6] = {
        {"model.kv_channels=32", NULL},
        {"model.window_size=[8, 0]", "model.window_attn_skip_freq=2", NULL},
        {"model.kv_channels=32", "model.window_size=[8, 0]", "model.window_attn_skip_freq=2",
         NULL},
        {"model.kv_channels=32", "model.window_size=[8, 0]", "model.window_attn_skip_freq=2",
         "model.num_experts=4", "model.moe_ffn_hidden_size=64", NULL},
        {"model.kv_channels=32", "model.window_size=[8, 0]", "model.num_experts=4",
         "model.moe_ffn_hidden_size=64", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = 0;
        while (cases[i][n]) n++;
        LtConfig c;
        LtPlanStep p;
        REQUIRE(small_config(1, n, cases[i], &c) == 0 && predict(1, &d, &p, n, cases[i]) == 0,
                "case %zu", i);
        const LtModelDims dims = lt_dims_from_config(&c);
        const double tokens = 4 * 32, head = 3 * 2 * 64.0 * dims.padded_vocab * tokens;
        const double model = 4 * lt_model_flops_per_sample(&dims, 0);
        CHECK(test_relerr(p.gemm_flops + p.attn_flops + head, model, 1) < 1e-9,
              "case %zu (%s ...): GEMMs %g + attention %g + head %g, the model %g", i,
              cases[i][0], p.gemm_flops, p.attn_flops, head, model);
        CHECK(p.experts <= p.gemm, "case %zu: the experts' GEMM time %g within the GEMMs' %g",
              i, p.experts, p.gemm);
    }
}

/* Expert parallelism: 4 all-to-alls of R K rows x h per MoE layer per micro
 * batch, (EP - 1) / EP of them off the rank; full recomputation repeats the
 * forward's two; across nodes they take the network */
static void test_moe_all_to_all(void) {
    const LtPlanDevice d = cpu_row();
    LtPlanStep p[3], full, far;
    const char *ep[3][4] = {{"model.num_experts=4", "train.global_batch_size=8",
                             "parallel.expert_model_parallel_size=1"},
                            {"model.num_experts=4", "train.global_batch_size=8",
                             "parallel.expert_model_parallel_size=2"},
                            {"model.num_experts=4", "train.global_batch_size=8",
                             "parallel.expert_model_parallel_size=4", "train.recompute=full"}};
    for (int i = 0; i < 3; i++) REQUIRE(predict(4, &d, &p[i], 3, ep[i]) == 0, "EP %d", 1 << i);
    LtPlanDevice h;
    LtPlanStep near;
    REQUIRE(lt_plan_device("h100", &h) == 0, "h100 row");
    REQUIRE(predict(4, &d, &full, 4, ep[2]) == 0 && predict_on(4, 4, &h, &near, 3, ep[2]) == 0 &&
                predict_on(4, 2, &h, &far, 3, ep[2]) == 0,
            "EP 4 full; on h100s in one node, over 2 nodes");
    const double s = 4, RK = 2 * 32 * 2, C = 64, L = 2; /* one micro batch per step */
    CHECK(p[0].a2a_bytes == 0 && p[0].ep_comm == 0, "EP 1: %g", p[0].a2a_bytes);
    for (int i = 1; i < 3; i++) {
        const double e = 1 << i, want = L * 4 * s * RK * C * (e - 1) / e;
        CHECK(test_relerr(p[i].a2a_bytes, want, 1) < 1e-12, "EP %g: %g bytes, want %g", e,
              p[i].a2a_bytes, want);
    }
    CHECK(p[2].ep_comm > p[1].ep_comm && p[1].ep_comm > 0, "EP 2 %g s < EP 4 %g s",
          p[1].ep_comm, p[2].ep_comm);
    CHECK(test_relerr(full.a2a_bytes, 1.5 * p[2].a2a_bytes, 1) < 1e-12,
          "full recomputation: %g bytes", full.a2a_bytes);
    const double extra = far.a2a_bytes * (1 / (h.net_gbs * 1e9) - 1 / (h.intra_gbs * 1e9));
    CHECK(test_relerr(far.ep_comm - near.ep_comm, extra, 1e-30) < 1e-6,
          "over the network %g s, in a node %g s: %g s more, want %g", far.ep_comm, near.ep_comm,
          far.ep_comm - near.ep_comm, extra);
    const double sum = far.compute + far.bubble + far.tp_comm + far.pp_comm + far.dp_comm +
                       far.ep_comm + far.optim;
    CHECK(test_relerr(sum, far.step, 1e-12) < 1e-9, "step %g = parts %g", far.step, sum);
    /* the same GEMM FLOPs on every rank: EP moves rows, not work */
    CHECK(test_relerr(p[2].gemm_flops, p[0].gemm_flops, 1) < 1e-12, "EP 4 %g, EP 1 %g FLOPs",
          p[2].gemm_flops, p[0].gemm_flops);
}

/* The experts' expected load (lt_plan_step's moe_load): under EP the most
 * loaded rank paces the MoE layers, (load + (e - 1) (E - load) / (E - 1)) / e
 * of the balanced rows with e = E / ep experts per rank; linear in the load,
 * at most E / top-k; no change without EP (one rank computes every expert);
 * the all-to-alls' bytes per rank stay the mean's. */
static void test_moe_load(void) {
    LtPlanDevice d = cpu_row();
    const char *ep2[] = {"model.num_experts=4", "model.moe_router_topk=2",
                         "train.global_batch_size=8", "parallel.expert_model_parallel_size=2"},
               *ep1[] = {"model.num_experts=4", "model.moe_router_topk=2",
                         "train.global_batch_size=8", "parallel.expert_model_parallel_size=1"};
    const double loads[] = {1.0, 1.5, 2.0, 3.0};
    LtPlanStep p[4], q[2];
    LtConfig c, c1;
    char err[512];
    REQUIRE(small_config(4, 4, ep2, &c) == 0 && small_config(4, 4, ep1, &c1) == 0, "configs");
    for (int i = 0; i < 4; i++)
        REQUIRE(lt_plan_step(&c, 4, 4, &d, 4, 1, loads[i], &p[i], err, sizeof err) == 0,
                "EP 2 at load %g: %s", loads[i], err);
    for (int i = 0; i < 2; i++)
        REQUIRE(lt_plan_step(&c1, 4, 4, &d, 4, 1, loads[2 * i], &q[i], err, sizeof err) == 0,
                "EP 1: %s", err);
    CHECK(q[1].step == q[0].step && q[1].experts == q[0].experts, "EP 1: %g s at load 2, %g balanced",
          q[1].step, q[0].step);
    /* E 4, ep 2: at load 1.5 the most loaded rank has 7/6 of the mean rows, at 2 4/3 */
    const double x1 = p[1].experts - p[0].experts, x2 = p[2].experts - p[0].experts;
    CHECK(x1 > 0 && test_relerr(x2, 2.0 * x1, 1e-30) < 1e-9, "linear: +%g s at 1.5, +%g at 2",
          x1, x2);
    CHECK(p[3].step == p[2].step, "load 3 read as the most there can be, 2: %g, %g", p[3].step,
          p[2].step);
    CHECK(p[2].step > p[0].step && p[2].ep_comm > p[0].ep_comm &&
              p[2].a2a_bytes == p[0].a2a_bytes,
          "step %g > %g, all-to-alls %g > %g s, bytes %g = %g", p[2].step, p[0].step,
          p[2].ep_comm, p[0].ep_comm, p[2].a2a_bytes, p[0].a2a_bytes);
    const double sum = p[2].compute + p[2].bubble + p[2].tp_comm + p[2].pp_comm + p[2].dp_comm +
                       p[2].ep_comm + p[2].optim;
    CHECK(test_relerr(sum, p[2].step, 1e-12) < 1e-9, "step %g = parts %g", p[2].step, sum);
}

/* Every device lt_plan_device_names lists has a row; a backend's device name
 * picks its row (the B200 by "B200", also inside "GB200"), and the MFU peak
 * table tells the GB200's 1200 W part from HGX B200's 1000 W one. */
static void test_device_rows(void) {
    char names[128], *save = NULL;
    snprintf(names, sizeof names, "%s", lt_plan_device_names());
    int n = 0;
    for (char *t = strtok_r(names, ", ", &save); t; t = strtok_r(NULL, ", ", &save), n++) {
        LtPlanDevice d;
        CHECK(lt_plan_device(t, &d) == 0 && d.bf16_tflops > 0, "row %s", t);
    }
    CHECK(n == 5, "%d device rows", n);
    char row[32] = "";
    CHECK(lt_plan_device_match("NVIDIA B200", row, sizeof row) == 0 && !strcmp(row, "b200"),
          "B200 -> %s", row);
    CHECK(lt_plan_device_match("NVIDIA GB200", row, sizeof row) == 0 && !strcmp(row, "b200"),
          "GB200 -> %s", row);
    LtPlanDevice b, h;
    lt_plan_device("b200", &b);
    lt_plan_device("h100", &h);
    CHECK(b.mem_gib == 180 && b.intra_gbs == 2 * h.intra_gbs && b.bf16_tflops == 2250.0,
          "b200 row %g GiB %g GB/s %g TFLOP/s", b.mem_gib, b.intra_gbs, b.bf16_tflops);
    CHECK(lt_peak_table("NVIDIA B200", LT_PREC_BF16) == 2250.0 &&
              lt_peak_table("NVIDIA GB200", LT_PREC_BF16) == 2500.0,
          "peaks %g %g", lt_peak_table("NVIDIA B200", LT_PREC_BF16),
          lt_peak_table("NVIDIA GB200", LT_PREC_BF16));
}

int main(void) {
    RUN(test_parts_add_up);
    RUN(test_membound_scales_with_micro_batch);
    RUN(test_sp_divides_norm_bytes);
    RUN(test_recompute_adds_forward);
    RUN(test_attention_scales);
    RUN(test_attention_window);
    RUN(test_attention_shape);
    RUN(test_calibration_file);
    RUN(test_calibration_attention_reference);
    RUN(test_sync_skew);
    RUN(test_moe_gemm_flops);
    RUN(test_flops_add_up);
    RUN(test_moe_all_to_all);
    RUN(test_moe_load);
    RUN(test_device_rows);
    return test_summary();
}
