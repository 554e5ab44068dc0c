/* safetensors.h - reading and writing Hugging Face safetensors files (fp32
 * out; F32, BF16 and F16 in), used by `lattice export` and `lattice import`. */
#ifndef LT_SAFETENSORS_H
#define LT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One fp32 tensor for lt_safetensors_write: `data` holds prod(shape) values,
 * row-major; ndim 0..4 (0 = scalar). */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    const float *data;
} LtStTensor;

/* Write tensors[0..n) (dtype F32, in that order) to `file` in the safetensors
 * format with __metadata__ {"format":"pt"}. Written to a temporary file in the
 * same directory, fsynced and renamed over `file`. Returns 0 or -1 with err. */
int lt_safetensors_write(const char *file, const LtStTensor *tensors, int n, char *err,
                         size_t errlen);

/* Read tensor `name` of a safetensors file (F32, or BF16/F16 converted
 * exactly to fp32; at most 4-D) into a newly malloc'd array; shape to
 * shape[0..*ndim). NULL on error. */
float *lt_safetensors_read(const char *file, const char *name, int *ndim, int64_t shape[4],
                           char *err, size_t errlen);

/* A safetensors file's header, read and checked without reading any data:
 * every entry has a known dtype, at most LT_ST_MAX_DIMS dims, and a byte
 * range inside the data section that its dtype and shape fill exactly; the
 * ranges end where the file ends. Entries are sorted by name (unique). */
#define LT_ST_MAX_DIMS 8
typedef struct {
    char *name;
    char dtype[16];      /* "F32", "BF16", "F16", ... as written */
    int ndim;
    int64_t shape[LT_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; /* byte range, relative to the data section */
} LtStEntry;

typedef struct {
    char path[4096];
    uint64_t data_start; /* file offset of the data section: 8 + header length */
    uint64_t file_size;
    LtStEntry *e;
    int n;
} LtStFile;

/* Open `file` and parse its header into st. 0, or -1 with err naming the
 * file (st is then empty; lt_st_close is still safe). */
int lt_st_open(LtStFile *st, const char *file, char *err, size_t errlen);
/* The entry named `name`, or NULL. */
const LtStEntry *lt_st_find(const LtStFile *st, const char *name);
/* Read entry e (F32, BF16 or F16) as fp32 into dst[0, e->numel), in chunks of
 * at most 1 MiB (no copy of the whole tensor besides dst). The file is
 * opened for this call only. 0, or -1 with err naming the file and tensor. */
int lt_st_read_f32(const LtStFile *st, const LtStEntry *e, float *dst, char *err, size_t errlen);
void lt_st_close(LtStFile *st);

#ifdef __cplusplus
}
#endif

#endif
