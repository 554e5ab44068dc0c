/* backend.c - backend selection helpers shared by every build. When the CUDA
 * backend is not compiled in, its entry points report that clearly. */
#include "backend.h"

#include <stdio.h>
#include <string.h>

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
#endif
