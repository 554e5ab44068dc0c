/* backend.c - backend selection helpers shared by every build. When the CUDA
 * backend is not compiled in, its entry points report that clearly. */
#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "attn_select.h"

#ifndef LT_HAVE_CUDA
LtBackend *lt_backend_cuda_create(LtDtype dtype, int device, char *err, size_t errlen) {
    (void)dtype;
    (void)device;
    snprintf(err, errlen, "this lattice binary was built without the CUDA backend (make CUDA=0 or no nvcc)");
    return NULL;
}
int lt_cuda_device_count(void) { return 0; }
int lt_cuda_compiled(void) { return 0; }
void lt_cuda_version_info(char *targets, size_t tlen, char *libs, size_t llen, char *driver,
                          size_t dlen) {
    if (tlen) targets[0] = 0;
    if (llen) libs[0] = 0;
    if (dlen) driver[0] = 0;
}
int lt_cuda_device_uuid(int device, unsigned char uuid[16]) {
    (void)device;
    (void)uuid;
    return -1;
}
int lt_cuda_attention_configure(LtBackend *be, LtAttnImpl want, int deterministic, int head_dim,
                                LtAttnChoice *out) {
    (void)be, (void)want, (void)deterministic, (void)head_dim;
    memset(out, 0, sizeof *out);
    snprintf(out->reason, sizeof out->reason, "model.attention: no CUDA backend in this build");
    return -1;
}
int lt_cuda_attention_info(LtBackend *be, LtAttnInfo *info) {
    (void)be;
    memset(info, 0, sizeof *info);
    return -1;
}
long lt_cudnn_version(void) { return 0; }
int lt_cudnn_graph_check(const LtAttnPlanKey *key, char *why, size_t whylen) {
    (void)key;
    snprintf(why, whylen, "no CUDA backend in this build");
    return -1;
}
#endif
