/* ckpt_state.h - the state files of a checkpoint: each rank writes the
 * pieces it owns, each piece a rectangle of a global tensor under the
 * tensor's global name; a reader at any layout reads the byte ranges of the
 * pieces that overlap what it needs. The file format: docs/formats.md
 * ("Checkpoint state files").
 *
 * Used by src/checkpoint/checkpoint.c (one writer with the whole state: lattice import,
 * tests), src/checkpoint/ckpt_save.c (every rank its state file) and the loaders. */
#ifndef LT_CKPT_STATE_H
#define LT_CKPT_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The state kinds a checkpoint holds, in file order, and their name prefixes. */
enum { LT_CKPT_MASTER = 0, LT_CKPT_ADAM_M, LT_CKPT_ADAM_V, LT_CKPT_KINDS };
extern const char *const lt_ckpt_kind_name[LT_CKPT_KINDS]; /* "param", "adam_m", "adam_v" */

/* What one writer saves: of the local table t, the flat range [lo, hi) of
 * each array (arr[k][i] holds element lo + i; NULL: kind not saved); tensors
 * replicated over tensor-parallel ranks only when with_replicated, tied
 * copies never (their owner saves them); then what `next` says, if anything
 * (the experts' table of a rank under expert parallelism, model.h), in the
 * same file. */
typedef struct LtStateSrc {
    const LtParamTable *t;
    size_t lo, hi;
    int with_replicated;
    const float *arr[LT_CKPT_KINDS];
    const struct LtStateSrc *next;
} LtStateSrc;

/* Write the pieces of src to `path` (created, fsynced, closed), converting
 * through an I/O buffer of io_bytes. *bytes = the file's size, *crc = the CRC
 * of its header (which covers the record table, which holds the CRC of every
 * 1 MiB block of data): meta.json lists both. 0, or -1 with err naming path. */
int lt_state_write(const char *path, const LtStateSrc *src, size_t io_bytes, uint64_t *bytes,
                   uint32_t *crc, char *err, size_t errlen);

/* An opened state file: its pieces, sorted by name. */
typedef struct LtStateFile LtStateFile;

/* Open `path` and read and check its header and record table (format 1, 2 or
 * 3). want_bytes/want_crc: what meta.json says (want_bytes 0: not checked).
 * NULL with err naming the file. */
LtStateFile *lt_state_open(const char *path, uint64_t want_bytes, uint32_t want_crc, char *err,
                           size_t errlen);
void lt_state_close(LtStateFile *f);
/* The size of state file `path` and its header CRC (what meta.json lists),
 * from its header alone, checked. 0, or -1 with err naming the file. */
int lt_state_header(const char *path, uint64_t *bytes, uint32_t *crc, char *err, size_t errlen);

/* The global shape recorded for tensor `name` ("param/h.0.attn.qkv.weight");
 * 0 and shape[0..2) (a 1-D tensor has shape[1] = 1), or -1 when the file has
 * no piece of it. */
int lt_state_shape(const LtStateFile *f, const char *name, int64_t shape[2]);

/* Copy into dst the elements of rectangle `want` of tensor `name` that the
 * file's pieces cover (dst holds want row-major), reading only the 1 MiB
 * blocks that hold them, each checked against its CRC, through `buf`
 * (buf_bytes, at least 1 MiB). *covered += the elements copied. 0, or -1 with
 * err naming the file and tensor. */
int lt_state_read(const LtStateFile *f, const char *name, const LtRect *want, float *dst,
                  unsigned char *buf, size_t buf_bytes, uint64_t *covered, char *err,
                  size_t errlen);

/* Host memory the checkpoint code holds for state copies, I/O buffers and
 * record tables (lt_ckpt_mem_*: counted allocations); the peak since the last
 * reset, for the log and the memory test. */
void *lt_ckpt_mem_alloc(size_t n);
void lt_ckpt_mem_count(size_t n);   /* memory allocated elsewhere (page-locked copies) */
void lt_ckpt_mem_uncount(size_t n);
void lt_ckpt_mem_free(void *p, size_t n);
void lt_ckpt_mem_reset_peak(void);
size_t lt_ckpt_mem_peak(void);

#ifdef __cplusplus
}
#endif

#endif
