/* cublas_load.cu - cuBLASLt and cuBLAS opened with dlopen when the CUDA
 * backend first creates a device, not linked (why: common.cuh, LtCublasApi).
 *
 * Where from: the file the build found (LT_CUBLASLT_LIB and LT_CUBLAS_LIB,
 * full paths from the Makefile's library search), else the soname of the
 * headers' major version through the loader's usual search (LD_LIBRARY_PATH,
 * the binary's RUNPATH, ld.so.cache) - for a binary carried to another
 * machine. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common.cuh"

#define SONAME2(x) #x
#define SONAME(x) SONAME2(x)
#define CUBLASLT_SONAME "libcublasLt.so." SONAME(CUBLAS_VER_MAJOR)
#define CUBLAS_SONAME "libcublas.so." SONAME(CUBLAS_VER_MAJOR)
#ifndef LT_CUBLASLT_LIB
#define LT_CUBLASLT_LIB CUBLASLT_SONAME
#endif
#ifndef LT_CUBLAS_LIB
#define LT_CUBLAS_LIB CUBLAS_SONAME
#endif

LtCublasApi lt_cublas_api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char why[1024];

/* dlopen(path), else dlopen(soname) when that is another name; appends each
 * failure to why */
static void *open_lib(const char *path, const char *soname) {
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (h) return h;
    size_t n = strlen(why);
    snprintf(why + n, sizeof why - n, "%s%s", n ? "; " : "", dlerror());
    if (strcmp(path, soname) == 0) return NULL;
    h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
    if (h) return h;
    n = strlen(why);
    snprintf(why + n, sizeof why - n, "; %s", dlerror());
    return NULL;
}

static void load(void) {
    /* cuBLASLt first: libcublas needs it, and finds it loaded */
    void *lt = open_lib(LT_CUBLASLT_LIB, CUBLASLT_SONAME);
    void *blas = lt ? open_lib(LT_CUBLAS_LIB, CUBLAS_SONAME) : NULL;
    if (!lt || !blas) {
        if (lt) dlclose(lt);
        return;
    }
    LtCublasApi api;
#define LT_CUBLAS_SYM(f)                                                                   \
    {                                                                                      \
        void *p = dlsym(strncmp(#f, "cublasLt", 8) == 0 ? lt : blas, #f);                  \
        if (!p) {                                                                          \
            snprintf(why, sizeof why, "%s has no %s (lattice was built with cuBLAS %d.%d)", \
                     strncmp(#f, "cublasLt", 8) == 0 ? LT_CUBLASLT_LIB : LT_CUBLAS_LIB,    \
                     #f, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);                              \
            return;                                                                        \
        }                                                                                  \
        memcpy(&api.f, &p, sizeof p);                                                      \
    }
    LT_CUBLAS_FUNCS(LT_CUBLAS_SYM)
#undef LT_CUBLAS_SYM
    lt_cublas_api = api;
    loaded = 1;
}

const LtCublasApi *lt_cublas(char *err, size_t errlen) {
    pthread_once(&once, load);
    if (loaded) return &lt_cublas_api;
    if (err && errlen) snprintf(err, errlen, "cannot open cuBLAS: %s", why);
    return NULL;
}
