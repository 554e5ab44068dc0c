/* backend_cuda.cu - the CUDA backend object: vtable, device memory, streams
 * and events, per-stream scratch arenas, act <-> fp32 conversion.
 *
 * Design note. LtStream is a small struct (common.cuh) wrapping a
 * non-blocking cudaStream_t plus that stream's scratch arena and cuBLASLt
 * workspace; the backend's default stream is one such struct embedded in the
 * impl. LtEvent* is a cudaEvent_t created with timing disabled. Memory
 * transfers run on the current stream; upload/download synchronize it before
 * returning (the host buffer may be reused at once), copy/zero do not.
 * alloc zeroes and synchronizes the device so that later work on any stream
 * sees zeros. Attention runs on lattice's kernels until
 * lt_cuda_attention_configure resolves model.attention (a cuDNN handle and
 * plan cache when it picks cuDNN; attention_cudnn.cu). Nothing here aborts
 * the process when no GPU is present:
 * lt_cuda_device_count() returns 0 and lt_backend_cuda_create() returns NULL
 * with a message. */
#include <cudnn.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.cuh" /* the cuDNN attention state (model.attention) */
#include "common.cuh"

/* ======================= kernels ======================= */

// (n) act -> fp32
template <typename T>
__global__ void act_to_f32_kernel(float *dst, const T *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = to_f(src[i]);
}

// (n) fp32 -> act (round to nearest even)
template <typename T>
__global__ void act_from_f32_kernel(T *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = from_f<T>(src[i]);
}

/* ======================= launchers ======================= */

static unsigned grid_for(size_t n) {
    unsigned g = cu_blocks(n, 256);
    return g > 65535u * 16u ? 65535u * 16u : g;
}

static void launch_act_to_f32_bf16(float *dst, const bf16 *src, size_t n, cudaStream_t st) {
    act_to_f32_kernel<bf16><<<grid_for(n), 256, 0, st>>>(dst, src, n);
    CU_CHECK_LAUNCH();
}

static void launch_act_from_f32_bf16(bf16 *dst, const float *src, size_t n, cudaStream_t st) {
    act_from_f32_kernel<bf16><<<grid_for(n), 256, 0, st>>>(dst, src, n);
    CU_CHECK_LAUNCH();
}

/* ======================= arena / workspace ======================= */

static void stream_release(LtStream *st) {
    if (st->scratch) CU_CHECK(cudaFree(st->scratch));
    if (st->ws) CU_CHECK(cudaFree(st->ws));
    st->scratch = st->ws = NULL;
    st->scratch_bytes = st->ws_bytes = 0;
}

void *cu_scratch(LtBackend *be, size_t bytes) {
    LtStream *st = cu_impl(be)->cur;
    if (bytes == 0) bytes = 256;
    if (bytes > st->scratch_bytes) {
        if (cu_impl(be)->graphs_live)
            lt_fatal("CUDA backend: an op needs %zu bytes of scratch after a CUDA graph captured "
                     "the arena at %zu bytes (run with train.cuda_graph=false)",
                     bytes, st->scratch_bytes);
        size_t nb = cu_align_up(bytes > 2 * st->scratch_bytes ? bytes : 2 * st->scratch_bytes,
                                (size_t)1 << 20);
        CU_CHECK(cudaStreamSynchronize(st->s)); /* earlier ops may still read it */
        if (st->scratch) CU_CHECK(cudaFree(st->scratch));
        st->scratch = NULL;
        CU_CHECK(cudaMalloc(&st->scratch, nb));
        st->scratch_bytes = nb;
    }
    return st->scratch;
}

#define LT_GEMM_WORKSPACE ((size_t)32 << 20)
void *cu_workspace(LtBackend *be, size_t *bytes) {
    LtStream *st = cu_impl(be)->cur;
    if (!st->ws) {
        CU_CHECK(cudaMalloc(&st->ws, LT_GEMM_WORKSPACE));
        st->ws_bytes = LT_GEMM_WORKSPACE;
    }
    *bytes = st->ws_bytes;
    return st->ws;
}

/* ======================= vtable: memory ======================= */

static void cu_destroy(LtBackend *be) {
    CudaImpl *im = cu_impl(be);
    cudaDeviceSynchronize();
    cudnn_attn_destroy(im->cudnn);
    stream_release(&im->def);
    cudaStreamDestroy(im->def.s);
    CUBLAS(cublasLtDestroy)(im->lt);
    if (im->blas) CUBLAS(cublasDestroy)(im->blas);
    free(im);
    free(be);
}

static void *cu_alloc(LtBackend *be, size_t bytes) {
    void *p = NULL;
    size_t nb = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, nb);
    if (e != cudaSuccess || !p) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        lt_fatal("out of GPU memory allocating %zu bytes (%s; %zu of %zu bytes free)", bytes,
                 cudaGetErrorString(e), fr, tot);
    }
    CU_CHECK(cudaMemsetAsync(p, 0, nb, cu_stream(be)));
    CU_CHECK(cudaStreamSynchronize(cu_stream(be)));
    return p;
}

static void cu_free(LtBackend *be, void *p) {
    cudnn_attn_forget(cu_impl(be)->cudnn, p); /* a kstart array's declared documents */
    if (p) CU_CHECK(cudaFree(p));
}

static void cu_attention_documents(LtBackend *be, const int32_t *kstart, const int32_t *doc,
                                   int window, int B, int T) {
    cudnn_attn_documents(cu_impl(be)->cudnn, kstart, doc, window, B, T);
}

static void cu_zero(LtBackend *be, void *p, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemsetAsync(p, 0, bytes, cu_stream(be)));
}

static void cu_upload(LtBackend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    be->host_waits++;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_stream(be)));
    CU_CHECK(cudaStreamSynchronize(cu_stream(be)));
}

static void cu_download(LtBackend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    be->host_waits++;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu_stream(be)));
    CU_CHECK(cudaStreamSynchronize(cu_stream(be)));
}

/* Page-locked host memory: copies from and to it run without the host waiting. */
static void *cu_host_alloc(LtBackend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    size_t nb = bytes ? bytes : 1;
    cudaError_t e = cudaHostAlloc(&p, nb, cudaHostAllocPortable);
    if (e != cudaSuccess || !p)
        lt_fatal("cannot allocate %zu bytes of page-locked host memory (%s)", bytes,
                 cudaGetErrorString(e));
    memset(p, 0, nb);
    return p;
}

static void cu_host_free(LtBackend *be, void *p) {
    (void)be;
    if (p) CU_CHECK(cudaFreeHost(p));
}

static void cu_upload_async(LtBackend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_stream(be)));
}

static void cu_download_async(LtBackend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu_stream(be)));
}

static void cu_copy(LtBackend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream(be)));
}

static void cu_synchronize(LtBackend *be) {
    be->host_waits++;
    CU_CHECK(cudaDeviceSynchronize());
}

void cu_act_from_f32(LtBackend *be, void *dst, const float *src, size_t n) {
    if (!n) return;
    if (cu_is_bf16(be))
        launch_act_from_f32_bf16((bf16 *)dst, src, n, cu_stream(be));
    else
        cu_copy(be, dst, src, n * sizeof(float));
}

void cu_act_to_f32(LtBackend *be, float *dst, const void *src, size_t n) {
    if (!n) return;
    if (cu_is_bf16(be))
        launch_act_to_f32_bf16(dst, (const bf16 *)src, n, cu_stream(be));
    else
        cu_copy(be, dst, src, n * sizeof(float));
}

/* ======================= vtable: streams / events ======================= */

static LtStream *cu_stream_create(LtBackend *be) {
    (void)be;
    LtStream *s = (LtStream *)calloc(1, sizeof(LtStream));
    if (!s) lt_fatal("out of host memory");
    CU_CHECK(cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking));
    return s;
}

static void cu_stream_destroy(LtBackend *be, LtStream *s) {
    CudaImpl *im = cu_impl(be);
    if (!s || s == &im->def) return;
    if (im->cur == s) im->cur = &im->def;
    CU_CHECK(cudaStreamSynchronize(s->s));
    stream_release(s);
    CU_CHECK(cudaStreamDestroy(s->s));
    free(s);
}

static void cu_set_stream(LtBackend *be, LtStream *s) {
    CudaImpl *im = cu_impl(be);
    im->cur = s ? s : &im->def;
}

static LtEvent *cu_event_create(LtBackend *be) {
    (void)be;
    cudaEvent_t e;
    CU_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return (LtEvent *)e;
}

static void cu_event_destroy(LtBackend *be, LtEvent *e) {
    (void)be;
    if (e) CU_CHECK(cudaEventDestroy((cudaEvent_t)e));
}

static cudaStream_t resolve(LtBackend *be, LtStream *s) {
    return s ? s->s : cu_impl(be)->def.s;
}

static void cu_event_record(LtBackend *be, LtEvent *e, LtStream *s) {
    CU_CHECK(cudaEventRecord((cudaEvent_t)e, resolve(be, s)));
}

static void cu_stream_wait_event(LtBackend *be, LtStream *s, LtEvent *e) {
    CU_CHECK(cudaStreamWaitEvent(resolve(be, s), (cudaEvent_t)e, 0));
}

/* ======================= vtable: timers ======================= */

static LtEvent *cu_timer_create(LtBackend *be) {
    (void)be;
    cudaEvent_t e;
    CU_CHECK(cudaEventCreate(&e)); /* with timing, unlike cu_event_create's */
    return (LtEvent *)e;
}

/* While the compute stream is being captured, an external record: a node of
 * the graph that takes the timestamp at each launch (a plain record would only
 * order). A capture already invalidated (capture_end will say why) records
 * nothing: the timer then never reads, and the capture's error is reported. */
static void cu_timer_record(LtBackend *be, LtEvent *e, LtStream *s) {
    cudaStream_t st = resolve(be, s);
    if (cu_impl(be)->capturing && st == cu_stream(be)) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        CU_CHECK(cudaStreamIsCapturing(st, &cs));
        if (cs == cudaStreamCaptureStatusActive)
            CU_CHECK(cudaEventRecordWithFlags((cudaEvent_t)e, st, cudaEventRecordExternal));
        if (cs != cudaStreamCaptureStatusNone) return;
    }
    CU_CHECK(cudaEventRecord((cudaEvent_t)e, st));
}

static int cu_timer_elapsed(LtBackend *be, LtEvent *a, LtEvent *b, double *seconds) {
    (void)be;
    float ms = 0.f;
    const cudaError_t r = cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b);
    if (r != cudaSuccess) {
        cudaGetLastError(); /* clear it (not ready too) so no later check reports it */
        return r == cudaErrorNotReady ? 0 : -1;
    }
    *seconds = (double)ms * 1e-3;
    return 1;
}

/* ======================= vtable: graphs ======================= */

struct LtGraph {
    cudaGraphExec_t exec;
};

/* Thread-local capture: the loader's thread may go on using the runtime. */
static void cu_capture_begin(LtBackend *be) {
    CU_CHECK(cudaStreamBeginCapture(cu_stream(be), cudaStreamCaptureModeThreadLocal));
    cu_impl(be)->capturing = 1;
}

static LtGraph *cu_capture_end(LtBackend *be, char *err, size_t errlen) {
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(cu_stream(be), &g);
    cu_impl(be)->capturing = 0;
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "%s (%d)", cudaGetErrorString(e), (int)e);
        cudaGetLastError();
        return NULL;
    }
    LtGraph *r = (LtGraph *)calloc(1, sizeof *r);
    if (!r) lt_fatal("out of host memory");
    r->exec = exec;
    cu_impl(be)->graphs_live++; /* the arenas it points into must not move now */
    return r;
}

static void cu_graph_launch(LtBackend *be, LtGraph *g) {
    CU_CHECK(cudaGraphLaunch(g->exec, cu_stream(be)));
}

static void cu_graph_destroy(LtBackend *be, LtGraph *g) {
    if (!g) return;
    CU_CHECK(cudaGraphExecDestroy(g->exec));
    free(g);
    cu_impl(be)->graphs_live--;
}

static LtStream *cu_current_stream(LtBackend *be) {
    CudaImpl *im = cu_impl(be);
    return im->cur == &im->def ? NULL : im->cur;
}

static void *cu_native_stream(LtBackend *be, LtStream *s) { return (void *)resolve(be, s); }

/* ======================= creation ======================= */

/* Designated initializers: reordering backend.h cannot swap entries. */
static const LtBackendOps cuda_ops = {
    .name = "cuda",
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .free = cu_free,
    .zero = cu_zero,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .synchronize = cu_synchronize,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .upload_async = cu_upload_async,
    .download_async = cu_download_async,
    .act_from_f32 = cu_act_from_f32,
    .act_to_f32 = cu_act_to_f32,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .set_stream = cu_set_stream,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .stream_wait_event = cu_stream_wait_event,
    .current_stream = cu_current_stream,
    .native_stream = cu_native_stream,
    .timer_create = cu_timer_create,
    .timer_record = cu_timer_record,
    .timer_elapsed = cu_timer_elapsed,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch,
    .graph_destroy = cu_graph_destroy,
    .embedding_fwd = cu_embedding_fwd,
    .embedding_bwd = cu_embedding_bwd,
    .layernorm_fwd = cu_layernorm_fwd,
    .layernorm_bwd = cu_layernorm_bwd,
    .add_act = cu_add_act,
    .linear_fwd = cu_linear_fwd,
    .linear_bwd = cu_linear_bwd,
    .gelu_fwd = cu_gelu_fwd,
    .gelu_bwd = cu_gelu_bwd,
    .rmsnorm_fwd = cu_rmsnorm_fwd,
    .rmsnorm_bwd = cu_rmsnorm_bwd,
    .swiglu_fwd = cu_swiglu_fwd,
    .swiglu_bwd = cu_swiglu_bwd,
    .rope = cu_rope,
    .qk_norm_fwd = cu_qk_norm_fwd,
    .qk_norm_bwd = cu_qk_norm_bwd,
    .attention_fwd = cu_attention_fwd,
    .attention_bwd = cu_attention_bwd,
    .attention_documents = cu_attention_documents,
    .xent_fwd_bwd = cu_xent_fwd_bwd,
    .xent_tp_stats = cu_xent_tp_stats,
    .xent_tp_finish = cu_xent_tp_finish,
    .adamw = cu_adamw,
    .sum_f64 = cu_sum_f64,
    .clip_coef = cu_clip_coef,
    .flag_nonfinite = cu_flag_nonfinite,
    .localize_ids = cu_localize_ids,
    .scale_f32 = cu_scale_f32,
    .add_f32 = cu_add_f32,
    .moe_router_fwd = cu_moe_router_fwd,
    .moe_router_bwd = cu_moe_router_bwd,
    .moe_topk = cu_moe_topk,
    .moe_topk_bwd = cu_moe_topk_bwd,
    .moe_aux_stats = cu_moe_aux_stats,
    .moe_aux_bwd = cu_moe_aux_bwd,
    .moe_dispatch = cu_moe_dispatch,
    .moe_permute = cu_moe_permute,
    .moe_permute_bwd = cu_moe_permute_bwd,
    .moe_unpermute = cu_moe_unpermute,
    .moe_unpermute_bwd = cu_moe_unpermute_bwd,
    .moe_gate_fwd = cu_moe_gate_fwd,
    .moe_gate_bwd = cu_moe_gate_bwd,
    .linear_group_fwd = cu_linear_group_fwd,
    .linear_group_bwd = cu_linear_group_bwd,
};

extern "C" int lt_cuda_compiled(void) { return 1; }

/* ======================= linked libraries ======================= */

#define LT_STR2(...) #__VA_ARGS__
#define LT_STR(...) LT_STR2(__VA_ARGS__)

/* The file the dynamic loader took symbol fn from ("?" when unknown). */
static const char *loaded_from(const void *fn) {
    Dl_info di;
    return dladdr(fn, &di) && di.dli_fname ? di.dli_fname : "?";
}

/* Appends "name VERSION (file)" to buf at offset at; returns the new end. */
static size_t put_lib(char *buf, size_t len, size_t at, const char *name, const char *version,
                      const void *fn) {
    if (at >= len) return at;
    int k = snprintf(buf + at, len - at, "%s%s %s (%s)", at ? ", " : "", name, version,
                     loaded_from(fn));
    return k < 0 ? at : at + (size_t)k;
}

/* "X.Y.Z" of a version coded as X*10000 + Y*100 + Z (cuBLASLt, cuDNN 9, NCCL). */
static const char *xyz(char *s, size_t n, long v) {
    snprintf(s, n, "%ld.%ld.%ld", v / 10000, v / 100 % 100, v % 100);
    return s;
}

extern "C" void lt_cuda_version_info(char *targets, size_t tlen, char *libs, size_t llen,
                                     char *driver, size_t dlen) {
#ifdef LT_CUDA_TARGETS
    /* "sm_80+sm_90+compute_90" from the Makefile -> "SASS sm_80 sm_90, PTX compute_90" */
    enum { CAP = 256 };
    char list[CAP], sass[CAP] = "", ptx[CAP] = "";
    snprintf(list, sizeof list, "%s", LT_STR(LT_CUDA_TARGETS));
    for (char *save = NULL, *t = strtok_r(list, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        char *dst = strncmp(t, "sm_", 3) == 0 ? sass : ptx;
        size_t n = strlen(dst);
        snprintf(dst + n, CAP - n, "%s%s", n ? " " : "", t);
    }
    snprintf(targets, tlen, "SASS %s, PTX %s", sass[0] ? sass : "none", ptx[0] ? ptx : "none");
#else
    snprintf(targets, tlen, "targets not recorded");
#endif
    int rt = 0, nccl = 0, drv = 0;
    char v[32];
    cudaRuntimeGetVersion(&rt); /* major*1000 + minor*10 */
    ncclGetVersion(&nccl);
    size_t at = 0;
    libs[0] = 0;
    snprintf(v, sizeof v, "%d.%d", rt / 1000, rt % 1000 / 10);
    at = put_lib(libs, llen, at, "cudart", v, (const void *)&cudaRuntimeGetVersion);
    char why[512];
    if (lt_cublas(why, sizeof why)) {
        void *fn;
        memcpy(&fn, &CUBLAS(cublasLtGetVersion), sizeof fn);
        at = put_lib(libs, llen, at, "cuBLASLt",
                     xyz(v, sizeof v, (long)CUBLAS(cublasLtGetVersion)()), fn);
    } else if (at < llen) {
        int k = snprintf(libs + at, llen - at, ", cuBLASLt none (%s)", why);
        at = k < 0 ? at : at + (size_t)k;
    }
    at = put_lib(libs, llen, at, "cuDNN", xyz(v, sizeof v, (long)cudnnGetVersion()),
                 (const void *)&cudnnGetVersion);
    put_lib(libs, llen, at, "NCCL", xyz(v, sizeof v, nccl), (const void *)&ncclGetVersion);
    if (cudaDriverGetVersion(&drv) != cudaSuccess || drv == 0)
        snprintf(driver, dlen, "none (no NVIDIA driver loaded)");
    else
        snprintf(driver, dlen, "CUDA %d.%d", drv / 1000, drv % 1000 / 10);
    cudaGetLastError();
}

extern "C" int lt_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" state */
        return 0;
    }
    return n;
}

extern "C" int lt_cuda_device_uuid(int device, unsigned char uuid[16]) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    memcpy(uuid, p.uuid.bytes, 16);
    return 0;
}

static int env_is(const char *name, const char *val) {
    const char *e = getenv(name);
    return e && strcmp(e, val) == 0;
}

extern "C" LtBackend *lt_backend_cuda_create(LtDtype dtype, int device, char *err,
                                             size_t errlen) {
    int n = lt_cuda_device_count();
    if (n <= 0) {
        snprintf(err, errlen, "no usable CUDA device (driver missing or no GPU visible)");
        return NULL;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "CUDA device %d requested but only %d visible", device, n);
        return NULL;
    }
    cudaError_t e = cudaSetDevice(device);
    cudaDeviceProp prop;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cannot open CUDA device %d: %s", device, cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    if (prop.major < 8) {
        snprintf(err, errlen,
                 "CUDA device %d (%s) has compute capability %d.%d; lattice needs >= 8.0", device,
                 prop.name, prop.major, prop.minor);
        return NULL;
    }
    CudaImpl *im = (CudaImpl *)calloc(1, sizeof(CudaImpl));
    LtBackend *be = (LtBackend *)calloc(1, sizeof(LtBackend));
    if (!im || !be) lt_fatal("out of host memory");
    im->device = device;
    snprintf(im->name, sizeof im->name, "%s", prop.name);
    im->sm_count = prop.multiProcessorCount;
    im->smem_optin = (int)prop.sharedMemPerBlockOptin;
    im->sm = prop.major * 10 + prop.minor;
    if (!lt_cublas(err, errlen)) {
        free(im);
        free(be);
        return NULL;
    }
    if (CUBLAS(cublasLtCreate)(&im->lt) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasLtCreate failed on device %d", device);
        free(im);
        free(be);
        return NULL;
    }
    e = cudaStreamCreateWithFlags(&im->def.s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaStreamCreate failed: %s", cudaGetErrorString(e));
        CUBLAS(cublasLtDestroy)(im->lt);
        free(im);
        free(be);
        return NULL;
    }
    im->cur = &im->def;
    im->attn_simt = env_is("LT_CUDA_ATTN", "simt");
    snprintf(im->attn.reason, sizeof im->attn.reason,
             "lattice's kernels (model.attention not configured on this backend)");
    im->gemm_no_epilogue = env_is("LT_CUDA_GEMM", "plain");
    be->ops = &cuda_ops;
    be->dtype = dtype;
    be->act_size = dtype == LT_BF16 ? 2 : 4;
    be->device_name = im->name;
    be->device_id = device;
    be->impl = im;
    return be;
}

/* ======================= attention implementation ======================= */

extern "C" int lt_cuda_attention_configure(LtBackend *be, LtAttnImpl want, int deterministic,
                                           int head_dim, int softmax_type, LtAttnChoice *out) {
    memset(out, 0, sizeof *out);
    if (!be || be->ops != &cuda_ops) {
        snprintf(out->reason, sizeof out->reason, "model.attention: not a CUDA backend");
        return -1;
    }
    CudaImpl *im = cu_impl(be);
    LtAttnEnv env = {want,     deterministic,      1,           cu_is_bf16(be), im->sm,
                     lt_cudnn_version(), head_dim, softmax_type};
    LtAttnChoice ch;
    if (im->attn_simt) {
        memset(&ch, 0, sizeof ch);
        snprintf(ch.reason, sizeof ch.reason, "LT_CUDA_ATTN=simt: lattice's generic kernel");
    } else if (lt_attn_resolve(&env, &ch)) {
        *out = ch;
        return -1;
    }
    struct CudnnAttn *ca = NULL;
    if (ch.cudnn) {
        char err[256];
        CU_CHECK(cudaSetDevice(im->device)); /* the handle belongs to the backend's device */
        ca = cudnn_attn_create(im->device, &env, err, sizeof err);
        if (!ca && want == LT_ATTN_CUDNN) {
            snprintf(out->reason, sizeof out->reason, "model.attention=cudnn: %s", err);
            return -1;
        }
        if (!ca) {
            ch.cudnn = 0;
            snprintf(ch.reason, sizeof ch.reason, "model.attention=auto: %s; lattice's kernels", err);
        }
    }
    CU_CHECK(cudaDeviceSynchronize()); /* no queued work may still use the old plans */
    cudnn_attn_destroy(im->cudnn);
    im->cudnn = ca;
    im->attn = ch;
    *out = ch;
    return 0;
}

extern "C" int lt_cuda_attention_info(LtBackend *be, LtAttnInfo *info) {
    memset(info, 0, sizeof *info);
    if (!be || be->ops != &cuda_ops) return -1;
    const CudaImpl *im = cu_impl(be);
    info->choice = im->attn;
    info->cudnn_version = lt_cudnn_version();
    info->sm = im->sm;
    cudnn_attn_counters(im->cudnn, info);
    return 0;
}
