/* memory.c - CPU backend memory ops, act conversions, and the trivial
 * stream/event objects.
 *
 * Streams and events: every CPU op runs synchronously on the calling thread
 * (with OpenMP inside), so there is nothing to order. stream_create and
 * event_create return small heap objects (valid, distinct, to be passed to the
 * matching destroy) so that callers written for asynchronous backends work
 * unchanged; set_stream, event_record and stream_wait_event do nothing, and
 * current_stream is always the default (NULL). */
#include <stdlib.h>

#include "cpu_ops.h"

void cpu_round_act(const LtBackend *be, float *x, size_t n) {
    if (!cpu_is_bf16(be)) return;
    long long nn = (long long)n;
#pragma omp parallel for schedule(static) num_threads(cpu_nthreads(be)) if (n > 65536)
    for (long long i = 0; i < nn; i++) x[i] = cpu_bf16_round(x[i]);
}

float *cpu_scratch(LtBackend *be, size_t n) {
    CpuImpl *impl = be->impl;
    if (n > impl->scratch_len) {
        free(impl->scratch);
        impl->scratch = lt_malloc(n * sizeof(float));
        impl->scratch_len = n;
    }
    return impl->scratch;
}

void *cpu_alloc(LtBackend *be, size_t bytes) { return lt_calloc(bytes); }

void cpu_free(LtBackend *be, void *p) { free(p); }

void cpu_zero(LtBackend *be, void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

/* upload, download and copy are all plain memcpy on the host. */
void cpu_memcpy(LtBackend *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memcpy(dst, src, bytes);
}

/* The blocking entries count as host waits (LtBackend.host_waits), as the
 * CUDA backend's do, so that the CPU runs show what a GPU would wait for. */
void cpu_upload(LtBackend *be, void *dst, const void *src, size_t bytes) {
    be->host_waits++;
    cpu_memcpy(be, dst, src, bytes);
}

void cpu_download(LtBackend *be, void *dst, const void *src, size_t bytes) {
    be->host_waits++;
    cpu_memcpy(be, dst, src, bytes);
}

void cpu_synchronize(LtBackend *be) { be->host_waits++; }

void *cpu_host_alloc(LtBackend *be, size_t bytes) { return lt_calloc(bytes ? bytes : 1); }

/* ids are host memory here; OpenMP is not worth it for a micro batch of ids. */
void cpu_localize_ids(LtBackend *be, int32_t *ids, size_t n, int start, int count) {
    for (size_t i = 0; i < n; i++) {
        int32_t v = ids[i] - start;
        ids[i] = v >= 0 && v < count ? v : -1;
    }
}

void cpu_act_from_f32(LtBackend *be, void *dst, const float *src, size_t n) {
    cpu_memcpy(be, dst, src, n * sizeof(float));
    cpu_round_act(be, dst, n);
}

/* act tensors are already float (bf16-representable in bf16 mode). */
void cpu_act_to_f32(LtBackend *be, float *dst, const void *src, size_t n) {
    cpu_memcpy(be, dst, src, n * sizeof(float));
}

/* Dummy objects: a tag makes them distinct, non-NULL allocations. */
typedef struct {
    int tag;
} CpuSyncObject;

LtStream *cpu_stream_create(LtBackend *be) {
    CpuSyncObject *o = lt_calloc(sizeof *o);
    o->tag = 1;
    return (LtStream *)(void *)o;
}

void cpu_stream_destroy(LtBackend *be, LtStream *s) { free(s); }

void cpu_set_stream(LtBackend *be, LtStream *s) {}

LtEvent *cpu_event_create(LtBackend *be) {
    CpuSyncObject *o = lt_calloc(sizeof *o);
    o->tag = 2;
    return (LtEvent *)(void *)o;
}

void cpu_event_destroy(LtBackend *be, LtEvent *e) { free(e); }

void cpu_event_record(LtBackend *be, LtEvent *e, LtStream *s) {}

void cpu_stream_wait_event(LtBackend *be, LtStream *s, LtEvent *e) {}

LtStream *cpu_current_stream(LtBackend *be) { return NULL; }

/* Timers (only with LT_CPU_DEVICE_TIMERS, backend_cpu.c): the host's clock
 * when recorded, which is when the CPU ran everything before. */
typedef struct {
    double t; /* -1: not recorded */
} CpuTimer;

LtEvent *cpu_timer_create(LtBackend *be) {
    CpuTimer *o = lt_calloc(sizeof *o);
    o->t = -1.0;
    return (LtEvent *)(void *)o;
}

void cpu_timer_record(LtBackend *be, LtEvent *e, LtStream *s) { ((CpuTimer *)(void *)e)->t = lt_now(); }

int cpu_timer_elapsed(LtBackend *be, LtEvent *a, LtEvent *b, double *seconds) {
    const CpuTimer *x = (const CpuTimer *)(void *)a, *y = (const CpuTimer *)(void *)b;
    if (x->t < 0 || y->t < 0) return 0;
    *seconds = y->t - x->t;
    return 1;
}
