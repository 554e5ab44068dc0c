/* comm_staging.cu - the CUDA pieces the communication layer (src/comm_mpi.c,
 * src/comm_nccl.c, plain C) needs, exported as C functions (declared in
 * src/comm_internal.h):
 *   - pinned host memory for staging device buffers through MPI;
 *   - the backend's CURRENT stream (the one its ops run on), so NCCL work is
 *     enqueued in order with them;
 *   - one event per NCCL operation: recorded on the current stream at start,
 *     waited for by the current stream at finish (device-side ordering; the
 *     host does not block), then released.
 * CUDA errors end in lt_fatal through CU_CHECK like the rest of the backend. */
#include "comm_cuda.h"
#include "common.cuh"

extern "C" void *lt_cuda_pinned_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess || !p) {
        cudaGetLastError();
        lt_fatal("communication: cannot allocate %zu bytes of pinned host memory for staging: %s",
                 bytes, cudaGetErrorString(e));
    }
    return p;
}

extern "C" void lt_cuda_pinned_free(void *p) {
    if (p) CU_CHECK(cudaFreeHost(p));
}

extern "C" void *lt_cuda_current_stream(LtBackend *be) { return (void *)cu_stream(be); }

extern "C" void lt_cuda_set_device(LtBackend *be) { CU_CHECK(cudaSetDevice(be->device_id)); }

extern "C" void *lt_cuda_event_record_current(LtBackend *be) {
    cudaEvent_t e;
    CU_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CU_CHECK(cudaEventRecord(e, cu_stream(be)));
    return (void *)e;
}

extern "C" void lt_cuda_event_wait_release(LtBackend *be, void *event) {
    cudaEvent_t e = (cudaEvent_t)event;
    CU_CHECK(cudaStreamWaitEvent(cu_stream(be), e, 0));
    /* safe while pending: resources are released once the event completes */
    CU_CHECK(cudaEventDestroy(e));
}

extern "C" void lt_cuda_copy_async(LtBackend *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream(be)));
}
