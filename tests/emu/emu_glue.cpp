/* emu_glue.cpp - the host side of the CUDA emulation (tests/emu/common.cuh):
 * block-by-block launches, shared memory, and an "emulated CUDA backend" - an
 * LtBackend whose memory is host memory and whose ops are the CUDA backend's
 * own op entries (the kernels/cuda sources, rewritten by transform.py)
 * running in the emulation. GEMMs go to cuBLASLt on a GPU; here
 * emu_gemm.cpp stands in for them. */
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>

#include "attention.cuh" /* and through it the emulation's common.cuh */

dim3 threadIdx;
dim3 blockIdx, gridDim, blockDim;
unsigned char *g_smem;
size_t g_smem_bytes;
EmuBlock *g_eb;

/* Static __shared__ variables of the running block: a NaN-filled arena and
 * each declaration's offset in it (assigned by the first thread asking). */
alignas(16) static unsigned char g_static[48 * 1024];
static size_t g_static_used;
static std::map<std::string, size_t> g_static_at;

void *emu_static_smem(const char *key, size_t bytes) {
    auto it = g_static_at.find(key);
    if (it != g_static_at.end()) return g_static + it->second;
    size_t at = (g_static_used + 15) / 16 * 16;
    if (at + bytes > sizeof g_static) lt_fatal("emulation: static shared memory over 48 KiB");
    g_static_at[key] = at;
    g_static_used = at + bytes;
    return g_static + at;
}

/* ---- fibers ------------------------------------------------------------------
 * One block after another; the threads of a block are fibers on this host
 * thread, each with its own stack. The scheduler resumes the live ones in
 * turn (in thread order on even launches, in reverse on odd ones, so that a
 * kernel whose result depends on the order of two threads' work between
 * barriers fails the tests' run-twice determinism checks); a thread runs
 * until it waits at a barrier (emu_yield) or finishes. A switch saves and
 * restores the callee-saved registers only (x86-64; elsewhere ucontext): the
 * operating system's thread switches and futex wake-ups of one host thread
 * per CUDA thread made the emulation spend most of its time in the kernel. */
#define EMU_STACK (256 * 1024) /* per thread, above a guard page */

#if defined(__x86_64__)
/* Saves rbp, rbx, r12-r15 on the current stack, stores the stack pointer in
 * *from, switches to `to` and pops the same registers from there. */
extern "C" void emu_ctx_switch(void **from, void *to);
asm(".text\n"
    ".globl emu_ctx_switch\n"
    ".type emu_ctx_switch,@function\n"
    "emu_ctx_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_ctx_switch,.-emu_ctx_switch\n");
struct EmuCtx {
    void *sp;
};
static EmuCtx g_sched;
static void ctx_switch(EmuCtx *from, EmuCtx *to) { emu_ctx_switch(&from->sp, to->sp); }
/* A fresh context entering f on the stack [lo, lo + bytes): as if called
 * (the return address slot 16-byte aligned + 8), under six zero registers. */
static void ctx_make(EmuCtx *c, unsigned char *lo, size_t bytes, void (*f)()) {
    uintptr_t top = ((uintptr_t)(lo + bytes)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;     /* f's return address: f never returns */
    *--sp = (void *)f;   /* emu_ctx_switch's ret goes to f */
    for (int i = 0; i < 6; i++) *--sp = nullptr;
    c->sp = sp;
}
#else
#include <ucontext.h>
struct EmuCtx {
    ucontext_t uc;
};
static EmuCtx g_sched;
static void ctx_switch(EmuCtx *from, EmuCtx *to) { swapcontext(&from->uc, &to->uc); }
static void ctx_make(EmuCtx *c, unsigned char *lo, size_t bytes, void (*f)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = lo;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, f, 0);
}
#endif

struct EmuFiber {
    EmuCtx ctx;
    unsigned char *stack; /* EMU_STACK usable bytes above a PROT_NONE page */
    bool done;
};
static std::vector<EmuFiber> g_fibers;
static unsigned g_cur;              /* the running fiber */
static unsigned g_live;             /* of the block's fibers, not finished */
static unsigned long g_seen;        /* g_emu_progress at the last yield's check */
static unsigned long g_stalls;      /* yields since progress was last made */
static const std::function<void()> *g_fn;
unsigned long g_emu_progress;

static void fiber_main() {
    (*g_fn)();
    g_fibers[g_cur].done = true;
    g_live--;
    g_emu_progress++;
    ctx_switch(&g_fibers[g_cur].ctx, &g_sched); /* never resumed */
    __builtin_unreachable();
}

void emu_yield() {
    if (g_emu_progress != g_seen) g_seen = g_emu_progress, g_stalls = 0;
    /* every live thread has yielded twice since a barrier last opened: they
     * wait at barriers that cannot open (a __syncthreads some threads skip) */
    if (++g_stalls > 2 * (unsigned long)g_live + 2)
        lt_fatal("emulation: the threads of block (%u, %u, %u) wait at different barriers "
                 "(a __syncthreads or __syncwarp not reached by every thread): on a GPU a hang",
                 blockIdx.x, blockIdx.y, blockIdx.z);
    ctx_switch(&g_fibers[g_cur].ctx, &g_sched);
}

static void fibers_reserve(unsigned n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    while (g_fibers.size() < n) {
        unsigned char *m = (unsigned char *)mmap(nullptr, EMU_STACK + page, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) lt_fatal("emulation: no memory for a thread's stack");
        if (mprotect(m, page, PROT_NONE) != 0) lt_fatal("emulation: mprotect of a stack guard");
        g_fibers.push_back(EmuFiber{{}, m + page, false});
    }
}

void emu_run(dim3 grid, dim3 block, size_t smem, std::function<void()> fn) {
    if (grid.y > 65535 || grid.z > 65535 || block.y != 1 || block.z != 1 ||
        block.x > 32 * EMU_MAX_WARPS || block.x % 32 || block.x == 0)
        lt_fatal("emulation: unsupported launch shape (%u x %u x %u blocks of %u x %u x %u)",
                 grid.x, grid.y, grid.z, block.x, block.y, block.z);
    static unsigned long launches;
    const bool reverse = launches++ & 1;
    gridDim = grid;
    blockDim = block;
    const size_t smem_alloc = (smem + 15) / 16 * 16 + 16;
    g_smem_bytes = smem;
    g_smem = (unsigned char *)aligned_alloc(16, smem_alloc);
    EmuBlock *eb = new EmuBlock();
    eb->blk.count = block.x;
    for (unsigned w = 0; w < block.x / 32; w++) eb->warp[w].count = 32;
    g_eb = eb;
    g_fn = &fn;
    const unsigned n = block.x;
    fibers_reserve(n);
    const size_t nblocks = (size_t)grid.x * grid.y * grid.z;
    for (size_t k = 0; k < nblocks; k++) {
        blockIdx = dim3((unsigned)(k % grid.x), (unsigned)(k / grid.x % grid.y),
                        (unsigned)(k / grid.x / grid.y));
        memset(g_smem, 0xff, smem); /* NaN in every float and bf16 */
        memset(g_static, 0xff, sizeof g_static);
        g_static_used = 0;
        g_static_at.clear();
        for (unsigned t = 0; t < n; t++) {
            g_fibers[t].done = false;
            ctx_make(&g_fibers[t].ctx, g_fibers[t].stack, EMU_STACK, fiber_main);
        }
        g_live = n;
        g_stalls = 0;
        while (g_live > 0)
            for (unsigned i = 0; i < n; i++) {
                const unsigned t = reverse ? n - 1 - i : i;
                if (g_fibers[t].done) continue;
                g_cur = t;
                threadIdx = dim3(t, 0, 0);
                ctx_switch(&g_sched, &g_fibers[t].ctx);
            }
    }
    delete eb;
    free(g_smem);
}

static const int kSmem = 227 * 1024; /* an H100's opt-in shared memory per block */

/* ---- the emulated CUDA backend -------------------------------------------- */

void *cu_scratch(LtBackend *be, size_t bytes) {
    CudaImpl *im = cu_impl(be);
    if (bytes > im->scratch_bytes) {
        free(im->scratch);
        im->scratch = aligned_alloc(256, (bytes + 255) / 256 * 256);
        im->scratch_bytes = bytes;
    }
    return im->scratch;
}

/* Elementwise conversions (backend_cuda.cu launches reduce.cu's kernels). */
void cu_act_from_f32(LtBackend *be, void *dst, const float *src, size_t n) {
    if (cu_is_bf16(be))
        for (size_t i = 0; i < n; i++) ((bf16 *)dst)[i] = from_f<bf16>(src[i]);
    else if (dst != src)
        memcpy(dst, src, n * sizeof(float));
}
void cu_act_to_f32(LtBackend *be, float *dst, const void *src, size_t n) {
    if (cu_is_bf16(be))
        for (size_t i = 0; i < n; i++) dst[i] = to_f(((const bf16 *)src)[i]);
    else if (dst != src)
        memcpy(dst, src, n * sizeof(float));
}
static void emu_destroy(LtBackend *be) {
    free(cu_impl(be)->scratch);
    free(be->impl);
    free(be);
}
/* Live allocations (base -> bytes asked for): a host<->device copy must lie
 * within one, as cudaMemcpy requires (a copy past the end is "invalid
 * argument" on a GPU; the emulation's padding would hide it). */
static std::map<uintptr_t, size_t> g_allocs;
static std::set<uintptr_t> g_host_allocs; /* host_alloc's (pinned host memory on a GPU) */
static void *emu_alloc(LtBackend *, size_t bytes) {
    size_t nb = (bytes + 255) / 256 * 256 + 256;
    void *p = aligned_alloc(256, nb);
    if (!p) lt_fatal("emulated CUDA backend: out of memory (%zu bytes)", bytes);
    memset(p, 0, nb);
    g_allocs[(uintptr_t)p] = bytes;
    return p;
}
static void emu_free(LtBackend *, void *p) {
    if (p) g_allocs.erase((uintptr_t)p), g_host_allocs.erase((uintptr_t)p);
    free(p);
}
static void emu_check_range(const char *what, const void *d, size_t bytes) {
    const uintptr_t a = (uintptr_t)d;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin() || a + bytes > (--it)->first + it->second)
        lt_fatal("emulated CUDA backend: %s of %zu bytes at %p is not within one device "
                 "allocation (a GPU answers: invalid argument)", what, bytes, d);
}
/* 1 when [d, d + bytes) lies within one live device allocation of the
 * emulated backend, not a host_alloc one (tests/emu/nccl_mpi.c checks NCCL's
 * buffers with it). */
extern "C" int emu_device_range(const void *d, size_t bytes) {
    const uintptr_t a = (uintptr_t)d;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return 0;
    --it;
    return a + bytes <= it->first + it->second && !g_host_allocs.count(it->first);
}
static void emu_zero(LtBackend *, void *p, size_t bytes) { memset(p, 0, bytes); }
static void emu_copy(LtBackend *, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
}
static void emu_sync(LtBackend *be) { be->host_waits++; }
static LtStream *emu_stream_create(LtBackend *) { return (LtStream *)malloc(1); }
static void emu_stream_destroy(LtBackend *, LtStream *s) { free(s); }
/* Ops run at once whatever the stream; the current one is kept only so that
 * current_stream and native_stream answer as on a GPU. */
static void emu_set_stream(LtBackend *be, LtStream *s) { cu_impl(be)->cur = s; }
static LtEvent *emu_event_create(LtBackend *) { return (LtEvent *)malloc(1); }
static void emu_event_destroy(LtBackend *, LtEvent *e) { free(e); }
static void emu_event_record(LtBackend *, LtEvent *, LtStream *) {}
static void emu_stream_wait_event(LtBackend *, LtStream *, LtEvent *) {}
static LtStream *emu_current_stream(LtBackend *be) { return cu_impl(be)->cur; }
/* the "cudaStream_t" that code of its own (NCCL; here tests/emu/nccl_mpi.c,
 * which ignores it) enqueues on: the LtStream itself, NULL the default one */
static void *emu_native_stream(LtBackend *, LtStream *s) { return s; }

static void *emu_host_alloc(LtBackend *be, size_t bytes) {
    void *p = emu_alloc(be, bytes);
    g_host_allocs.insert((uintptr_t)p);
    return p;
}
/* A host<->device copy that waits, its device side checked (dev: dst or src). */
static void emu_host_copy(LtBackend *be, const char *what, const void *dev, void *dst,
                          const void *src, size_t bytes) {
    be->host_waits++;
    if (bytes) emu_check_range(what, dev, bytes);
    emu_copy(be, dst, src, bytes);
}
static void emu_upload(LtBackend *be, void *dst, const void *src, size_t bytes) {
    emu_host_copy(be, "upload", dst, dst, src, bytes);
}
static void emu_download(LtBackend *be, void *dst, const void *src, size_t bytes) {
    emu_host_copy(be, "download", src, dst, src, bytes);
}

/* Designated initializers (C++20: in declaration order, so reordering
 * backend.h fails to compile instead of silently swapping entries). */
static const LtBackendOps emu_ops = {
    .name = "cuda-emulated",
    .destroy = emu_destroy,
    .alloc = emu_alloc,
    .free = emu_free,
    .zero = emu_zero,
    .upload = emu_upload,
    .download = emu_download,
    .copy = emu_copy,
    .synchronize = emu_sync,
    .host_alloc = emu_host_alloc,
    .host_free = emu_free,
    .upload_async = emu_copy,
    .download_async = emu_copy,
    .act_from_f32 = cu_act_from_f32,
    .act_to_f32 = cu_act_to_f32,
    .stream_create = emu_stream_create,
    .stream_destroy = emu_stream_destroy,
    .set_stream = emu_set_stream,
    .event_create = emu_event_create,
    .event_destroy = emu_event_destroy,
    .event_record = emu_event_record,
    .stream_wait_event = emu_stream_wait_event,
    .current_stream = emu_current_stream,
    .native_stream = emu_native_stream,
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

/* The bias-gradient column sum (reduce.cu), which linear_bwd uses where
 * cuBLASLt's BGRADB epilogue does not apply: tested on its own here, since
 * the GEMMs around it have no emulation. */
extern "C" void emu_colsum_add(LtBackend *be, float *dbias, const void *dout, int N, int OC) {
    cu_colsum_add(be, dbias, dout, N, OC);
}

/* The MoE router's dx update (moe.cu), which its backward applies to the
 * cuBLASLt product: tested on its own here, as the column sum is. */
extern "C" void emu_act_add_f32(LtBackend *be, void *dx, const float *t, size_t n) {
    cu_act_add_f32(be, dx, t, n);
}

extern "C" LtBackend *emu_cuda_backend_create(LtDtype dtype, int attn_simt);

#ifdef EMU_AS_CUDA
/* The training binary with the emulated backend as its GPUs
 * (build/tests/emu/lattice, tests/test_nccl_emu.sh): train.device=cuda gets
 * an emulated device of its own per rank (LT_EMU_GPUS of them, 8 unless set),
 * so that comm.backend=nccl runs lattice's NCCL code (src/comm/comm_nccl.c)
 * against tests/emu/nccl_mpi.c. */
extern "C" LtBackend *lt_backend_cuda_create(LtDtype dtype, int device, char *, size_t) {
    LtBackend *be = emu_cuda_backend_create(dtype, 0);
    be->device_id = device;
    return be;
}
extern "C" int lt_cuda_device_count(void) {
    const char *s = getenv("LT_EMU_GPUS");
    return s && *s ? atoi(s) : 8;
}
extern "C" int lt_cuda_compiled(void) { return 1; }
extern "C" void lt_cuda_version_info(char *targets, size_t tlen, char *libs, size_t llen,
                                     char *driver, size_t dlen) {
    snprintf(targets, tlen, "emulated on the CPU");
    snprintf(libs, llen, "NCCL's calls over MPI (tests/emu/nccl_mpi.c)");
    snprintf(driver, dlen, "none");
}
/* one emulated GPU per (host, device number), as a GPU's UUID names it */
extern "C" int lt_cuda_device_uuid(int device, unsigned char uuid[16]) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    memset(uuid, 0, 16);
    memcpy(uuid, &h, 8);
    memcpy(uuid + 8, &device, sizeof device);
    return 0;
}
#else
/* This binary has no real CUDA backend (the emulated one stands in). */
extern "C" LtBackend *lt_backend_cuda_create(LtDtype, int, char *err, size_t errlen) {
    snprintf(err, errlen, "the emulated CUDA backend has no GPU devices");
    return NULL;
}
extern "C" int lt_cuda_device_count(void) { return 0; }
extern "C" int lt_cuda_compiled(void) { return 0; }
#endif

/* cuDNN has no emulation: the emulated backend's model.attention always
 * resolves to lattice's kernels (cuDNN version 0), and attention.cu's calls
 * into the cuDNN path (made only when CudaImpl.cudnn is set, never here)
 * report "not run". */
extern "C" long lt_cudnn_version(void) { return 0; }
int cudnn_attention_fwd(LtBackend *, void *, float *, const void *, const int32_t *, int, int,
                        int, int, int, int) {
    return 0;
}
int cudnn_attention_bwd(LtBackend *, void *, const void *, const void *, const void *,
                        const float *, const int32_t *, int, int, int, int, int, int) {
    return 0;
}
extern "C" int lt_cuda_attention_configure(LtBackend *be, LtAttnImpl want, int deterministic,
                                           int head_dim, int softmax_type, LtAttnChoice *out) {
    const LtAttnEnv env = {want, deterministic, 1, cu_is_bf16(be), 90, 0, head_dim, softmax_type};
    return lt_attn_resolve(&env, out);
}
extern "C" int lt_cuda_attention_info(LtBackend *, LtAttnInfo *info) {
    memset(info, 0, sizeof *info);
    return -1;
}

/* The CUDA backend's ops on host memory in the emulation; attn_simt = 1
 * forces the generic attention path (as LT_CUDA_ATTN=simt does). */
extern "C" LtBackend *emu_cuda_backend_create(LtDtype dtype, int attn_simt) {
    CudaImpl *im = (CudaImpl *)calloc(1, sizeof(CudaImpl));
    LtBackend *be = (LtBackend *)calloc(1, sizeof(LtBackend));
    im->smem_optin = kSmem;
    im->attn_simt = attn_simt;
    be->ops = &emu_ops;
    be->dtype = dtype;
    be->act_size = dtype == LT_BF16 ? 2 : 4;
    be->device_name = "CUDA backend emulated on the CPU";
    be->device_id = 0;
    be->impl = im;
    return be;
}
