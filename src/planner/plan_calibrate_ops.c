/* plan_calibrate_ops.c - `lattice plan --calibrate`'s measurements of what
 * the step-time model charges outside the GEMMs (see plan_calibrate.h): the
 * memory-bound ops and the attention core, through the backend's own entries
 * at shapes like a layer's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_select.h"
#include "common.h"
#include "plan_calibrate.h"

/* ---- memory-bound ops --------------------------------------------------------- */

/* Buffers of one memory-bound measurement: rows x cols act tensors a, b, out,
 * resid (and their fp32 statistics / parameter-sized state). */
typedef struct {
    int rows, cols;
    void *a, *b, *out, *resid, *w, *bias;
    float *mean, *rstd, *dw, *db, *losses, *master, *m, *v, *grad;
    int32_t *targets;
    int which; /* the op (MemOp) */
} MemJob;

enum { LN_FWD, LN_BWD, GELU_FWD, GELU_BWD, XENT, ADAMW, NMEMOPS };
static const char *const MEM_NAMES[] = {"layernorm fwd", "layernorm bwd", "gelu fwd",
                                        "gelu bwd", "cross-entropy", "adamw"};

static void run_mem(Cal *c, const void *arg) {
    const MemJob *j = arg;
    LtBackend *be = c->be;
    const size_t n = (size_t)j->rows * j->cols;
    const LtAdamArgs adam = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f, NULL};
    switch (j->which) {
    case LN_FWD:
        be->ops->layernorm_fwd(be, j->resid, j->out, j->mean, j->rstd, j->a, j->b, j->w, j->bias,
                               j->rows, j->cols);
        break;
    case LN_BWD:
        be->ops->layernorm_bwd(be, j->b, j->dw, j->db, j->out, j->a, j->w, j->mean, j->rstd,
                               j->rows, j->cols);
        break;
    case GELU_FWD: be->ops->gelu_fwd(be, j->out, j->a, n); break;
    case GELU_BWD: be->ops->gelu_bwd(be, j->b, j->a, j->out, n); break;
    case XENT:
        be->ops->xent_fwd_bwd(be, j->losses, j->a, j->targets, j->rows, j->cols, j->cols, 1e-3f);
        break;
    default: be->ops->adamw(be, j->a, j->master, j->grad, j->m, j->v, n, &adam); break;
    }
}

/* Bytes op `which` moves per element as the CUDA kernels' notes count them
 * (s bytes per activation): LayerNorm with its residual add 4s each way, GeLU
 * 2s forward and 3s backward, the cross-entropy with its gradient 3s per
 * logit, AdamW 28 + s per parameter. */
static double mem_bytes_per_element(int which, double s) {
    static const double per_s[] = {4, 4, 2, 3, 3, 1};
    return per_s[which] * s + (which == ADAMW ? 28.0 : 0.0);
}

/* (the kept buffers' ids: lt_cal_buffer) */
static void mem_alloc(Cal *c, MemJob *j) {
    const size_t n = (size_t)j->rows * j->cols, R = (size_t)j->rows, C = (size_t)j->cols;
    j->a = lt_cal_random_act(c, n, 11);
    j->b = lt_cal_random_act(c, n, 12);
    j->out = lt_cal_random_act(c, n, 13);
    j->resid = lt_cal_buffer(c, 11, lt_act_bytes(c->be, n));
    j->w = lt_cal_random_act(c, C, 14);
    j->bias = lt_cal_random_act(c, C, 15);
    j->mean = lt_cal_buffer(c, 12, R * sizeof(float));
    j->rstd = lt_cal_buffer(c, 13, R * sizeof(float));
    j->dw = lt_cal_buffer(c, 14, C * sizeof(float));
    j->db = lt_cal_buffer(c, 15, C * sizeof(float));
    j->losses = lt_cal_buffer(c, 16, R * sizeof(float));
    j->targets = lt_cal_buffer(c, 17, R * sizeof(int32_t)); /* zeros: a valid target */
}

/* GB/s of op `which` on rows x cols (for AdamW: that many parameters). */
static double time_mem(Cal *c, MemJob *j, int which, double slot) {
    const double s = (double)lt_act_bytes(c->be, 1);
    j->which = which;
    const double t = lt_cal_time_median(c, run_mem, j, slot);
    const double bytes = mem_bytes_per_element(which, s) * j->rows * (double)j->cols;
    printf("%-14s %8d %8d %10.3f %10.2f\n", MEM_NAMES[which], j->rows, j->cols, t * 1e3,
           bytes / t / 1e9);
    return t;
}

void lt_cal_memory_bound(Cal *c, LtPlanDevice *dev, double budget) {
    LtBackend *be = c->be;
    const double s = (double)lt_act_bytes(be, 1), slot = budget / NMEMOPS;
    printf("\nmemory-bound ops through the backend (bytes as the kernels' notes count them)\n"
           "%-14s %8s %8s %10s %10s\n", "op", "rows", "cols", "ms", "GB/s");
    /* a layer's element-wise ops: N tokens x hidden C */
    MemJob j = {.rows = c->cuda ? 16384 : 1024, .cols = c->cuda ? 2048 : 1024};
    mem_alloc(c, &j);
    double bytes = 0, t = 0;
    for (int op = LN_FWD; op <= GELU_BWD; op++) {
        t += time_mem(c, &j, op, slot);
        bytes += mem_bytes_per_element(op, s) * j.rows * (double)j.cols;
    }
    dev->elem_gbs = bytes / t / 1e9;
    /* the loss head's block: rows x a GPT-2-sized vocabulary */
    MemJob x = {.rows = c->cuda ? 4096 : 256, .cols = c->cuda ? 50304 : 32768};
    mem_alloc(c, &x);
    dev->xent_gbs = mem_bytes_per_element(XENT, s) * x.rows * (double)x.cols /
                    time_mem(c, &x, XENT, slot) / 1e9;
    /* AdamW over a model's worth of parameters */
    const size_t n = c->cuda ? (size_t)128 << 20 : (size_t)8 << 20;
    MemJob o = {.rows = 1, .cols = (int)n, .a = lt_cal_random_act(c, n, 16)};
    o.master = lt_cal_buffer(c, 18, n * sizeof(float));
    o.grad = lt_cal_buffer(c, 19, n * sizeof(float));
    o.m = lt_cal_buffer(c, 20, n * sizeof(float));
    o.v = lt_cal_buffer(c, 21, n * sizeof(float));
    dev->optim_gbs = mem_bytes_per_element(ADAMW, s) * (double)n / time_mem(c, &o, ADAMW, slot) / 1e9;
    printf("elem_gbs %.2f (the four element-wise ops' bytes over their time), xent_gbs %.2f, "
           "optim_gbs %.2f\n", dev->elem_gbs, dev->xent_gbs, dev->optim_gbs);
}

/* ---- the attention core -------------------------------------------------------- */

typedef struct {
    int B, T, NH, HD, bwd;
    void *qkv, *out, *dout, *dqkv;
    float *lse;
    int W;          /* a sliding window of W keys before each query (-1: causal) */
    int32_t *ks;    /* its first keys, max(0, t - W) (NULL: causal) */
} AttnJob;

static void run_attn(Cal *c, const void *arg) {
    const AttnJob *j = arg;
    if (j->bwd)
        c->be->ops->attention_bwd(c->be, j->dqkv, NULL, j->dout, j->qkv, j->out, j->lse, NULL,
                                  j->ks, j->W, j->B, j->T, j->NH, j->NH, j->HD);
    else
        c->be->ops->attention_fwd(c->be, j->out, j->lse, j->qkv, NULL, j->ks, j->W, j->B, j->T,
                                  j->NH, j->NH, j->HD);
}

/* Median seconds of the job. Every round configures the implementation again
 * (lt_cal_attention), which drops cuDNN's plans, so every round warms up: a
 * later round's first call would otherwise time a plan's build (35-45 ms on
 * the fifth H200 draw, against a 0.2-1.6 ms call). */
static double attn_time(Cal *c, const AttnJob *j, double slot) {
    if (c->round > 0) run_attn(c, j); /* (round 0: lt_cal_time_median warms up) */
    return lt_cal_time_median(c, run_attn, j, slot);
}

/* The job's buffers for B x T x NH x HD (and with W >= 0 the window's first keys). */
static void attn_job_alloc(Cal *c, AttnJob *j) {
    LtBackend *be = c->be;
    const size_t n = (size_t)j->B * j->T * j->NH * j->HD;
    j->qkv = lt_cal_random_act(c, 3 * n, 21);
    j->out = lt_cal_buffer(c, 31, lt_act_bytes(be, n));
    j->dout = lt_cal_random_act(c, n, 22);
    j->dqkv = lt_cal_buffer(c, 32, lt_act_bytes(be, 3 * n));
    j->lse = lt_cal_buffer(c, 33, (size_t)j->B * j->NH * j->T * sizeof(float));
    j->ks = NULL;
    if (j->W < 0) return;
    const size_t nt = (size_t)j->B * j->T;
    int32_t *h = lt_malloc(nt * sizeof(int32_t));
    for (size_t i = 0; i < nt; i++) {
        const int t = (int)(i % (size_t)j->T);
        h[i] = t > j->W ? t - j->W : 0;
    }
    j->ks = lt_cal_buffer(c, 34, nt * sizeof(int32_t));
    be->ops->upload(be, j->ks, h, nt * sizeof(int32_t));
    free(h);
}

/* TFLOP/s forward (*fwd) and backward (*bwd) over the shapes, in the model's
 * count; name: the implementation, for the table. On a GPU each shape's time
 * is taken to the reference shape (T 2048, HD 128) by the planner's shape
 * factors (lt_plan_attn_shape), so the figures are the rates the planner
 * scales from, whatever the mix of sequence lengths measured; the table
 * shows each shape's own rate. */
static void attn_rates(Cal *c, const char *name, double budget, double *fwd, double *bwd) {
    static const int cpu_T[] = {128, 256, 512}, gpu_T[] = {1024, 2048, 4096};
    const int NH = c->cuda ? 16 : 8, HD = c->cuda ? 128 : 64, tokens = c->cuda ? 16384 : 512;
    double flops[2] = {0, 0}, secs[2] = {0, 0};
    for (int i = 0; i < 3; i++) {
        const int T = (c->cuda ? gpu_T : cpu_T)[i], B = tokens / T > 0 ? tokens / T : 1;
        AttnJob j = {.B = B, .T = T, .NH = NH, .HD = HD, .W = -1};
        attn_job_alloc(c, &j);
        const double f = 4.0 * B * (double)T * T * NH * HD; /* the model's count, forward */
        double t[2];
        LtPlanDevice shape = {.threads = 0}; /* (factors on a GPU only) */
        snprintf(shape.name, sizeof shape.name, "%s", c->cuda ? "gpu" : "cpu");
        const int kind = strcmp(name, "cudnn") ? LT_PLAN_ATTN_LATTICE : LT_PLAN_ATTN_CUDNN;
        for (j.bwd = 0; j.bwd < 2; j.bwd++) {
            t[j.bwd] = attn_time(c, &j, budget / 6);
            flops[j.bwd] += f * (1 + j.bwd);
            secs[j.bwd] += t[j.bwd] * lt_plan_attn_shape(&shape, kind, j.bwd, T, HD);
        }
        printf("%-8s %6d %6d %4d %4d %10.3f %10.4f %10.3f %10.4f\n", name, B, T, NH, HD,
               t[0] * 1e3, f / t[0] / 1e12, t[1] * 1e3, 2 * f / t[1] / 1e12);
    }
    *fwd = flops[0] / secs[0] / 1e12;
    *bwd = flops[1] / secs[1] / 1e12;
}

/* The same over a sliding window's band, at one shape (GPT-OSS's: 128 keys,
 * head dim 64, a long sequence; on the CPU 64 keys of 512), in the model's
 * count of the band's pairs (8 pairs h forward, twice that backward). */
static void attn_win_rates(Cal *c, const char *name, double budget, double *fwd, double *bwd) {
    const int T = c->cuda ? 4096 : 512, W = c->cuda ? 128 : 64, NH = c->cuda ? 16 : 8, HD = 64,
              B = c->cuda ? 4 : 1;
    AttnJob j = {.B = B, .T = T, .NH = NH, .HD = HD, .W = W};
    attn_job_alloc(c, &j);
    const double pairs = (double)W * (W + 1) / 2.0 + (double)(T - W) * (W + 1);
    const double f = 8.0 * B * pairs * NH * HD;
    double t[2];
    for (j.bwd = 0; j.bwd < 2; j.bwd++) t[j.bwd] = attn_time(c, &j, budget / 2);
    char what[32];
    snprintf(what, sizeof what, "%s W%d", name, W);
    printf("%-12s %2d %6d %4d %4d %10.3f %10.4f %10.3f %10.4f\n", what, B, T, NH, HD, t[0] * 1e3,
           f / t[0] / 1e12, t[1] * 1e3, 2 * f / t[1] / 1e12);
    *fwd = f / t[0] / 1e12;
    *bwd = 2 * f / t[1] / 1e12;
}

void lt_cal_attention(Cal *c, LtPlanDevice *dev, int *has_cudnn, double budget) {
    printf("\nattention core (TFLOP/s of the model's count: 4 B T^2 NH HD forward, twice that "
           "backward)\n%-8s %6s %6s %4s %4s %10s %10s %10s %10s\n", "impl", "B", "T", "NH", "HD",
           "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s");
    *has_cudnn = 0;
    LtAttnChoice ch;
    const int hd = c->cuda ? 128 : 64;
    if (c->cuda && lt_cuda_attention_configure(c->be, LT_ATTN_LATTICE, 1, hd, 0, &ch))
        lt_fatal("--calibrate: lattice's attention kernels refused: %s", ch.reason);
    attn_rates(c, c->cuda ? "lattice" : "cpu", 0.45 * budget, &dev->attn_fwd_tflops,
               &dev->attn_bwd_tflops);
    attn_win_rates(c, c->cuda ? "lattice" : "cpu", 0.15 * budget, &dev->attn_win_fwd_tflops,
                   &dev->attn_win_bwd_tflops);
    if (c->cuda && lt_cuda_attention_configure(c->be, LT_ATTN_CUDNN, 1, hd, 0, &ch) == 0 &&
        ch.cudnn) {
        attn_rates(c, "cudnn", 0.3 * budget, &dev->cudnn_fwd_tflops, &dev->cudnn_bwd_tflops);
        /* (the deterministic backward, as calibrated: a windowed one is far slower) */
        attn_win_rates(c, "cudnn", 0.1 * budget, &dev->cudnn_win_fwd_tflops,
                       &dev->cudnn_win_bwd_tflops);
        *has_cudnn = 1;
    } else if (c->cuda) {
        printf("cudnn: not measured (%s)\n", ch.reason);
    }
}
