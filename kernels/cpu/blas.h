/* blas.h - the one BLAS entry lattice's CPU backend uses (sgemm) and the
 * thread setting, from either of two OpenBLAS builds:
 *   - a system or bundled OpenBLAS (cblas.h, 32-bit integers): the default;
 *   - numpy's wheel build (numpy.libs/libscipy_openblas64_-*.so, as a GPU
 *     machine with PyTorch has it; `make BLAS=numpy`, or by itself when no
 *     other OpenBLAS is found): 64-bit integers, every symbol renamed with a
 *     scipy_ prefix and a 64_ suffix, and no header. LT_BLAS_SCIPY64 selects
 *     it; the declarations below follow OpenBLAS's cblas.h for that build
 *     (blasint = int64_t; the enums' values are the CBLAS standard's).
 * Callers use cblas_sgemm and openblas_set_num_threads as with cblas.h. */
#ifndef LT_KERNELS_CPU_BLAS_H
#define LT_KERNELS_CPU_BLAS_H

#ifndef LT_BLAS_SCIPY64
#include <cblas.h>
#else
#include <stdint.h>

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

void scipy_cblas_sgemm64_(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta,
                          enum CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                          float *c, int64_t ldc);
void scipy_openblas_set_num_threads64_(int n);

static inline void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta,
                               enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc) {
    scipy_cblas_sgemm64_(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static inline void openblas_set_num_threads(int n) { scipy_openblas_set_num_threads64_(n); }
#endif

#endif
