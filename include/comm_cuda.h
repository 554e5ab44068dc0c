/* comm_cuda.h - internal: the CUDA helpers of the communication layer,
 * defined in kernels/cuda/comm_staging.cu (only in builds with LT_HAVE_CUDA)
 * and used by src/comm_mpi.c (staging) and src/comm_nccl.c. Plain C
 * declarations; every function ends in lt_fatal on a CUDA error. */
#ifndef LT_COMM_CUDA_H
#define LT_COMM_CUDA_H

#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Page-locked host memory (cudaMallocHost / cudaFreeHost). */
void *lt_cuda_pinned_alloc(size_t bytes);
void lt_cuda_pinned_free(void *p);
/* The cudaStream_t the backend's ops currently run on (set_stream). */
void *lt_cuda_current_stream(LtBackend *be);
/* cudaSetDevice(be->device_id). */
void lt_cuda_set_device(LtBackend *be);
/* A new event recorded on the current stream (returned as cudaEvent_t). */
void *lt_cuda_event_record_current(LtBackend *be);
/* The current stream waits for the event (no host blocking); the event is destroyed. */
void lt_cuda_event_wait_release(LtBackend *be, void *event);
/* Device-to-device copy enqueued on the current stream. */
void lt_cuda_copy_async(LtBackend *be, void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
