/* backend_cpu.c - the CPU backend's op table and constructor.
 * Ops live in one file per family (memory.c, embedding.c, layernorm.c,
 * rmsnorm.c, linear.c, gelu.c, swiglu.c, rope.c, qknorm.c, attention.c, xent.c,
 * adamw.c, moe.c); see cpu_ops.h for the storage and threading conventions. */
#include "blas.h"
#include <omp.h>
#include <stdlib.h>

#include "cpu_ops.h"

static void cpu_destroy(LtBackend *be) {
    free(((CpuImpl *)be->impl)->scratch);
    free(be->impl);
    free(be);
}

static const LtBackendOps cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_memcpy,
    .synchronize = cpu_synchronize,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .upload_async = cpu_memcpy, /* synchronous here, which the contract allows */
    .download_async = cpu_memcpy,
    .act_from_f32 = cpu_act_from_f32,
    .act_to_f32 = cpu_act_to_f32,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .set_stream = cpu_set_stream,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .current_stream = cpu_current_stream,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .add_act = cpu_add_act,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .rope = cpu_rope,
    .qk_norm_fwd = cpu_qk_norm_fwd,
    .qk_norm_bwd = cpu_qk_norm_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .xent_fwd_bwd = cpu_xent_fwd_bwd,
    .xent_tp_stats = cpu_xent_tp_stats,
    .xent_tp_finish = cpu_xent_tp_finish,
    .adamw = cpu_adamw,
    .sum_f64 = cpu_sum_f64,
    .clip_coef = cpu_clip_coef,
    .flag_nonfinite = cpu_flag_nonfinite,
    .localize_ids = cpu_localize_ids,
    .scale_f32 = cpu_scale_f32,
    .add_f32 = cpu_add_f32,
    .moe_router_fwd = cpu_moe_router_fwd,
    .moe_router_bwd = cpu_moe_router_bwd,
    .moe_topk = cpu_moe_topk,
    .moe_topk_bwd = cpu_moe_topk_bwd,
    .moe_aux_stats = cpu_moe_aux_stats,
    .moe_aux_bwd = cpu_moe_aux_bwd,
    .moe_dispatch = cpu_moe_dispatch,
    .moe_permute = cpu_moe_permute,
    .moe_permute_bwd = cpu_moe_permute_bwd,
    .moe_unpermute = cpu_moe_unpermute,
    .moe_unpermute_bwd = cpu_moe_unpermute_bwd,
    .moe_gate_fwd = cpu_moe_gate_fwd,
    .moe_gate_bwd = cpu_moe_gate_bwd,
    .linear_group_fwd = cpu_linear_group_fwd,
    .linear_group_bwd = cpu_linear_group_bwd,
};

/* Test hook: with LT_CPU_DEVICE_TIMERS=1 the backend has timers (host
 * timestamps), so the step's device-timed breakdown (devclock.h), which a GPU
 * uses, runs on the CPU too. Unset in normal runs: the host clocks time the
 * CPU directly. */
static LtBackendOps cpu_ops_timed;

LtBackend *lt_backend_cpu_create(LtDtype dtype, int threads) {
    if (dtype != LT_F32 && dtype != LT_BF16) lt_fatal("cpu backend: unknown dtype %d", (int)dtype);
    if (threads < 0) lt_fatal("cpu backend: negative thread count %d", threads);
    CpuImpl *impl = lt_calloc(sizeof *impl);
    impl->nthreads = threads > 0 ? threads : omp_get_num_procs();
    if (impl->nthreads < 1) impl->nthreads = 1;
    /* Process-wide setting: the last CPU backend created decides for OpenBLAS. */
    openblas_set_num_threads(impl->nthreads);

    LtBackend *be = lt_calloc(sizeof *be);
    be->ops = &cpu_ops;
    const char *timers = getenv("LT_CPU_DEVICE_TIMERS");
    if (timers && timers[0] == '1') {
        cpu_ops_timed = cpu_ops;
        cpu_ops_timed.timer_create = cpu_timer_create;
        cpu_ops_timed.timer_record = cpu_timer_record;
        cpu_ops_timed.timer_elapsed = cpu_timer_elapsed;
        be->ops = &cpu_ops_timed;
    }
    be->dtype = dtype;
    be->act_size = sizeof(float); /* bf16 values are held in floats on the CPU */
    be->device_name = dtype == LT_BF16 ? "cpu (bf16 rounding)" : "cpu";
    be->device_id = -1;
    be->impl = impl;
    return be;
}
