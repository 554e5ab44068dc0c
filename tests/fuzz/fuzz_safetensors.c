/* fuzz_safetensors.c - libFuzzer target for the safetensors reader
 * (src/hf/safetensors.c): the input is the file; a few tensor names are looked
 * up (those of the seed corpus and absent ones). */
#include "safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, "t.safetensors", data, size);
    static const char *names[] = {"a", "b", "wte.weight", "h.0.ln_1.weight", ""};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char err[512];
        int ndim = 0;
        int64_t shape[4];
        float *x = lt_safetensors_read(path, names[i], &ndim, shape, err, sizeof err);
        if (x) {
            if (ndim < 0 || ndim > 4) abort();
            size_t n = 1;
            for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
            volatile float s = 0.f;
            for (size_t j = 0; j < n; j++) s += x[j]; /* every element readable (ASan) */
            free(x);
        }
    }
    return 0;
}
