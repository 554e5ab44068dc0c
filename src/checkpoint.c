/* checkpoint.c - training-state checkpoints (see checkpoint.h).
 *
 * A step directory <dir>/step_NNNNNNNN holds three files:
 *
 * state.lt, format version 2 (version 1 is read too); every integer
 * little-endian:
 *
 *   offset  bytes  field
 *   0       8      magic "LTSTATE\0"
 *   8       4      u32 format version (1)
 *   12      4      u32 record count R
 *   16      8      u64 data_start: file offset of the first tensor's data
 *   24      8      u64 file_size: total length of the file in bytes
 *   32      4      u32 CRC-32 of the record table (bytes [64, 64 + 192 R))
 *   36      4      u32 CRC-32 of header bytes [0, 36) (version 2; zero in version 1)
 *   40      24     zero (checked)
 *   64      192 R  record table, one record per tensor:
 *                    +0    128  name, NUL-padded: "param/<name>", "adam_m/<name>",
 *                               "adam_v/<name>" (<name> from the LtParamTable)
 *                    +128  4    u32 dtype (1 = fp32)
 *                    +132  4    u32 ndim (1..4)
 *                    +136  32   i64 shape[4] (dims past ndim are 0)
 *                    +168  8    u64 file offset of the data
 *                    +176  8    u64 data length in bytes (4 * product of shape)
 *                    +184  4    u32 CRC-32 of the data bytes as stored
 *                    +188  4    zero
 *   data_start ... tensor data: fp32 little-endian, row-major, each tensor at a
 *                  multiple of 64 bytes (zero padding between tensors).
 *
 * Records are written in table order (all param/, then adam_m/, then adam_v/;
 * the moment records are absent when the state has none), but a reader finds
 * them by name, so order and extra non-"param/" records do not matter.
 *
 * meta.json: one flat JSON object (format, format_version, step,
 * samples_consumed, seed, data_seed, rng_state, the model dims,
 * num_parameters, optimizer_state). config.yaml: lt_config_print output.
 *
 * Saving writes <dir>/.tmp-step_NNNNNNNN-<pid>/, fsyncs it, renames it to
 * step_NNNNNNNN (swapping atomically with an existing one of that step), then
 * replaces <dir>/latest through latest.tmp. `latest` always names the step
 * directory saved last. One process writes a given checkpoint directory. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define STATE_MAGIC "LTSTATE" /* 8 bytes with its NUL */
#define STATE_VERSION 2u /* 2: header CRC; 1 still read */
#define META_VERSION 2   /* 2: meta_crc32; 1 still read */
#define HDR_BYTES 64
#define REC_BYTES 192
#define REC_NAME 128
#define DATA_ALIGN 64
#define DTYPE_F32 1u
#define MAX_RECORDS (1u << 22)

static const char *const KIND[3] = {"param", "adam_m", "adam_v"};

typedef struct {
    char name[REC_NAME];
    uint32_t dtype, ndim;
    int64_t shape[4];
    uint64_t offset, nbytes;
    uint32_t crc;
} Rec;


/* out = a/b; -1 with err when it does not fit in PATH_MAX. */
static int join(char out[PATH_MAX], const char *a, const char *b, char *err, size_t errlen) {
    if (snprintf(out, PATH_MAX, "%s/%s", a, b) >= PATH_MAX)
        return lt_errorf(err, errlen, "path too long: %s/%s", a, b);
    return 0;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t align_up(uint64_t x) { return (x + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN; }

/* ---- filesystem helpers -------------------------------------------------- */

int lt_mkdir_p(const char *path, char *err, size_t errlen) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return lt_errorf(err, errlen, "path too long: %s", path);
    /* Create each prefix ending before a '/', then the whole path. */
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return lt_errorf(err, errlen, "cannot create directory %s: %s", buf, strerror(errno));
        *p = saved;
        if (saved == '\0') break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return lt_errorf(err, errlen, "%s exists and is not a directory", path);
    return 0;
}

int lt_file_commit(FILE *f, const char *path, char *err, size_t errlen) {
    int rc = 0;
    if (ferror(f))
        rc = lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
    else if (fflush(f) != 0)
        rc = lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
    else if (fsync(fileno(f)) != 0)
        rc = lt_errorf(err, errlen, "cannot sync %s: %s", path, strerror(errno));
    if (fclose(f) != 0 && rc == 0)
        rc = lt_errorf(err, errlen, "error closing %s: %s", path, strerror(errno));
    return rc;
}

static int fsync_dir(const char *dir, char *err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return lt_errorf(err, errlen, "cannot open directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* Some filesystems cannot fsync directories; that is not a write failure. */
    if (rc != 0 && e != EINVAL && e != ENOTSUP)
        return lt_errorf(err, errlen, "cannot sync directory %s: %s", dir, strerror(e));
    return 0;
}

/* Directory part of path ("." when none) into out[PATH_MAX]. */
static void dir_of(const char *path, char out[PATH_MAX]) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, PATH_MAX, ".");
    else if (slash == path) snprintf(out, PATH_MAX, "/");
    else snprintf(out, PATH_MAX, "%.*s", (int)(slash - path), path);
}

int lt_rename_durable(const char *from, const char *to, char *err, size_t errlen) {
    if (rename(from, to) != 0)
        return lt_errorf(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
    char dir[PATH_MAX];
    dir_of(to, dir);
    return fsync_dir(dir, err, errlen);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* rm -rf of a directory this module created; a missing path is success. */
static int remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- state.lt ------------------------------------------------------------ */

static void encode_rec(unsigned char *b, const Rec *r) {
    memset(b, 0, REC_BYTES);
    memcpy(b, r->name, strlen(r->name));
    put_u32(b + 128, r->dtype);
    put_u32(b + 132, r->ndim);
    for (int i = 0; i < 4; i++) put_u64(b + 136 + 8 * i, (uint64_t)r->shape[i]);
    put_u64(b + 168, r->offset);
    put_u64(b + 176, r->nbytes);
    put_u32(b + 184, r->crc);
}

static void decode_rec(const unsigned char *b, Rec *r) {
    memcpy(r->name, b, REC_NAME);
    r->name[REC_NAME - 1] = '\0';
    r->dtype = get_u32(b + 128);
    r->ndim = get_u32(b + 132);
    for (int i = 0; i < 4; i++) r->shape[i] = (int64_t)get_u64(b + 136 + 8 * i);
    r->offset = get_u64(b + 168);
    r->nbytes = get_u64(b + 176);
    r->crc = get_u32(b + 184);
}

/* Write n floats little-endian, updating *crc over the bytes written. */
static int write_floats(FILE *f, const float *x, size_t n, uint32_t *crc, const char *path,
                        char *err, size_t errlen) {
    unsigned char buf[1 << 16];
    const size_t per = sizeof buf / 4;
    for (size_t i = 0; i < n; i += per) {
        size_t k = n - i < per ? n - i : per;
        for (size_t j = 0; j < k; j++) {
            uint32_t u;
            memcpy(&u, &x[i + j], 4);
            put_u32(buf + 4 * j, u);
        }
        *crc = lt_crc32(*crc, buf, 4 * k);
        if (fwrite(buf, 1, 4 * k, f) != 4 * k)
            return lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
    }
    return 0;
}

static int write_zeros(FILE *f, uint64_t n, const char *path, char *err, size_t errlen) {
    static const unsigned char zeros[4096];
    while (n > 0) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k)
            return lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
        n -= k;
    }
    return 0;
}

static int write_state(const char *path, const LtParamTable *t, const LtCkptState *s, char *err,
                       size_t errlen) {
    const float *arr[3] = {s->master, s->m, s->v};
    uint32_t nrec = 0;
    for (int k = 0; k < 3; k++) nrec += arr[k] ? (uint32_t)t->n : 0;
    Rec *recs = lt_calloc(sizeof(Rec) * nrec);
    const uint64_t data_start = align_up(HDR_BYTES + (uint64_t)REC_BYTES * nrec);
    uint64_t off = data_start, end = data_start;
    uint32_t r = 0;
    for (int k = 0; k < 3; k++) {
        if (!arr[k]) continue;
        for (int i = 0; i < t->n; i++, r++) {
            const LtParam *p = &t->p[i];
            Rec *rc = &recs[r];
            snprintf(rc->name, sizeof rc->name, "%s/%s", KIND[k], p->name);
            rc->dtype = DTYPE_F32;
            rc->ndim = (uint32_t)p->ndim;
            for (int d = 0; d < p->ndim; d++) rc->shape[d] = p->shape[d];
            rc->offset = off;
            rc->nbytes = 4 * (uint64_t)p->numel;
            end = off + rc->nbytes;
            off = align_up(end);
        }
    }

    int rc = -1;
    unsigned char *head = lt_calloc((size_t)data_start);
    FILE *f = fopen(path, "wb");
    if (!f) {
        lt_errorf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        goto done;
    }
    /* Zeros stand in for the header and table until the CRCs are known. */
    uint64_t pos = data_start;
    if (write_zeros(f, data_start, path, err, errlen)) goto close;
    r = 0;
    for (int k = 0; k < 3; k++) {
        if (!arr[k]) continue;
        for (int i = 0; i < t->n; i++, r++) {
            if (write_zeros(f, recs[r].offset - pos, path, err, errlen)) goto close;
            recs[r].crc = 0;
            if (write_floats(f, arr[k] + t->p[i].offset, t->p[i].numel, &recs[r].crc, path, err,
                             errlen))
                goto close;
            pos = recs[r].offset + recs[r].nbytes;
        }
    }
    for (uint32_t i = 0; i < nrec; i++) encode_rec(head + HDR_BYTES + (size_t)REC_BYTES * i, &recs[i]);
    memcpy(head, STATE_MAGIC, 8);
    put_u32(head + 8, STATE_VERSION);
    put_u32(head + 12, nrec);
    put_u64(head + 16, data_start);
    put_u64(head + 24, end);
    put_u32(head + 32, lt_crc32(0, head + HDR_BYTES, (size_t)REC_BYTES * nrec));
    put_u32(head + 36, lt_crc32(0, head, 36));
    if (fseeko(f, 0, SEEK_SET) != 0 || fwrite(head, 1, (size_t)data_start, f) != data_start) {
        lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
        goto close;
    }
    rc = lt_file_commit(f, path, err, errlen);
    f = NULL;
close:
    if (f) fclose(f);
done:
    free(head);
    free(recs);
    return rc;
}

static int rec_cmp(const void *a, const void *b) {
    return strcmp(((const Rec *)a)->name, ((const Rec *)b)->name);
}

static const Rec *rec_find(const Rec *recs, uint32_t n, const char *name) {
    Rec key;
    snprintf(key.name, sizeof key.name, "%s", name);
    return bsearch(&key, recs, n, sizeof(Rec), rec_cmp);
}

static void shape_str(char *out, size_t n, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(out, n, "(");
    for (int d = 0; d < ndim && used < n; d++)
        used += (size_t)snprintf(out + used, n - used, "%s%" PRId64, d ? "," : "", shape[d]);
    if (used < n) snprintf(out + used, n - used, ")");
}

/* Read, check and decode the header and record table of an open state.lt;
 * *recs (sorted by name) is malloc'd. */
static int read_table(FILE *f, const char *path, Rec **recs_out, uint32_t *n_out, char *err,
                      size_t errlen) {
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return lt_errorf(err, errlen, "cannot stat %s: %s", path, strerror(errno));
    const uint64_t size = (uint64_t)st.st_size;
    unsigned char h[HDR_BYTES];
    if (fread(h, 1, HDR_BYTES, f) != HDR_BYTES)
        return lt_errorf(err, errlen, "%s is truncated (%" PRIu64 " bytes, shorter than its header)", path, size);
    if (memcmp(h, STATE_MAGIC, 8) != 0)
        return lt_errorf(err, errlen, "%s is not a lattice state file (bad magic)", path);
    const uint32_t version = get_u32(h + 8), n = get_u32(h + 12);
    const uint64_t data_start = get_u64(h + 16), file_size = get_u64(h + 24);
    if (version != STATE_VERSION && version != 1)
        return lt_errorf(err, errlen, "%s has format version %u; this build reads versions 1 and %u",
                         path, version, STATE_VERSION);
    static const unsigned char zero[HDR_BYTES];
    if ((version >= 2 && get_u32(h + 36) != lt_crc32(0, h, 36)) ||
        memcmp(h + (version >= 2 ? 40 : 36), zero, HDR_BYTES - (version >= 2 ? 40 : 36)) != 0)
        return lt_errorf(err, errlen, "%s has a corrupt header (CRC mismatch or reserved bytes set)",
                         path);
    if (n > MAX_RECORDS || data_start < HDR_BYTES + (uint64_t)REC_BYTES * n || file_size < data_start)
        return lt_errorf(err, errlen, "%s has a corrupt header", path);
    if (size < file_size)
        return lt_errorf(err, errlen, "%s is truncated: %" PRIu64 " bytes, the header says %" PRIu64, path,
                    size, file_size);
    if (size > file_size)
        return lt_errorf(err, errlen, "%s is %" PRIu64 " bytes, the header says %" PRIu64 " (corrupt)", path,
                    size, file_size);
    unsigned char *tab = lt_malloc((size_t)REC_BYTES * n);
    if (fread(tab, 1, (size_t)REC_BYTES * n, f) != (size_t)REC_BYTES * n) {
        free(tab);
        return lt_errorf(err, errlen, "error reading %s: %s", path, strerror(errno));
    }
    if (lt_crc32(0, tab, (size_t)REC_BYTES * n) != get_u32(h + 32)) {
        free(tab);
        return lt_errorf(err, errlen, "record table of %s is corrupt (CRC mismatch)", path);
    }
    Rec *recs = lt_malloc(sizeof(Rec) * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++) decode_rec(tab + (size_t)REC_BYTES * i, &recs[i]);
    free(tab);
    for (uint32_t i = 0; i < n; i++) {
        const Rec *r = &recs[i];
        uint64_t numel = 1;
        int bad = r->dtype != DTYPE_F32 || r->ndim < 1 || r->ndim > 4;
        for (uint32_t d = 0; !bad && d < r->ndim; d++) {
            bad = r->shape[d] < 0 || (r->shape[d] > 0 && numel > UINT64_MAX / 4 / (uint64_t)r->shape[d]);
            numel *= (uint64_t)r->shape[d];
        }
        if (bad || r->nbytes != 4 * numel || r->offset < data_start || r->offset > file_size ||
            r->nbytes > file_size - r->offset) {
            lt_errorf(err, errlen, "%s: record '%s' is corrupt", path, r->name);
            free(recs);
            return -1;
        }
    }
    qsort(recs, n, sizeof(Rec), rec_cmp);
    for (uint32_t i = 1; i < n; i++)
        if (strcmp(recs[i - 1].name, recs[i].name) == 0) {
            lt_errorf(err, errlen, "%s: tensor '%s' appears twice", path, recs[i].name);
            free(recs);
            return -1;
        }
    *recs_out = recs;
    *n_out = n;
    return 0;
}

/* Read record r into dst (r->nbytes / 4 floats), verify its CRC, decode. */
static int read_tensor(FILE *f, const char *path, const Rec *r, float *dst, char *err, size_t errlen) {
    unsigned char *bytes = (unsigned char *)dst;
    if (fseeko(f, (off_t)r->offset, SEEK_SET) != 0 || fread(bytes, 1, r->nbytes, f) != r->nbytes)
        return lt_errorf(err, errlen, "error reading tensor '%s' from %s", r->name, path);
    if (lt_crc32(0, bytes, r->nbytes) != r->crc)
        return lt_errorf(err, errlen, "checksum mismatch for tensor '%s' in %s (file corrupt)", r->name, path);
    for (uint64_t i = 0; i < r->nbytes / 4; i++) {
        uint32_t u = get_u32(bytes + 4 * i);
        memcpy(&dst[i], &u, 4);
    }
    return 0;
}

static int load_state(const char *stepdir, const LtParamTable *t, LtCkptState *s, char *err,
                      size_t errlen) {
    char path[PATH_MAX];
    if (join(path, stepdir, "state.lt", err, errlen)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return lt_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    Rec *recs = NULL;
    uint32_t n = 0;
    int rc = read_table(f, path, &recs, &n, err, errlen);
    /* A parameter the model lacks means a different architecture. */
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        if (strncmp(recs[i].name, "param/", 6) == 0 && !lt_params_find(t, recs[i].name + 6))
            rc = lt_errorf(err, errlen, "checkpoint %s has tensor '%s' that the model does not have",
                      stepdir, recs[i].name + 6);
    float *dst[3] = {s->master, s->m, s->v};
    for (int k = 0; rc == 0 && k < 3; k++) {
        if (!dst[k]) continue;
        for (int i = 0; rc == 0 && i < t->n; i++) {
            const LtParam *p = &t->p[i];
            char name[REC_NAME];
            snprintf(name, sizeof name, "%s/%s", KIND[k], p->name);
            const Rec *r = rec_find(recs, n, name);
            if (!r) {
                if (k == 0) rc = lt_errorf(err, errlen, "checkpoint %s has no tensor '%s'", stepdir, p->name);
                else rc = lt_errorf(err, errlen, "checkpoint %s has no optimizer state tensor '%s'", stepdir, name);
                break;
            }
            int same = r->ndim == (uint32_t)p->ndim;
            for (int d = 0; same && d < p->ndim; d++) same = r->shape[d] == p->shape[d];
            if (!same) {
                char a[96], b[96];
                shape_str(a, sizeof a, (int)r->ndim, r->shape);
                shape_str(b, sizeof b, p->ndim, p->shape);
                rc = lt_errorf(err, errlen, "%s: shape mismatch for '%s': checkpoint %s, model %s", stepdir,
                          name + strlen(KIND[k]) + 1, a, b);
                break;
            }
            rc = read_tensor(f, path, r, dst[k] + p->offset, err, errlen);
            /* a diverged model is not resumed, evaluated or exported */
            for (size_t j = 0; rc == 0 && j < p->numel; j++)
                if (!isfinite(dst[k][p->offset + j]))
                    rc = lt_errorf(err, errlen,
                                   "checkpoint %s: tensor '%s' holds a non-finite value (%g at "
                                   "element %zu): the model it saved had diverged",
                                   stepdir, name, (double)dst[k][p->offset + j], j);
        }
    }
    free(recs);
    fclose(f);
    return rc;
}

/* ---- meta.json ----------------------------------------------------------- */

static int write_meta(const char *path, const LtParamTable *t, const LtCkptState *s,
                      const LtCkptMeta *m, char *err, size_t errlen) {
    const LtModelDims *d = &t->dims;
    char js[4096];
    int n = snprintf(
        js, sizeof js,
        "{\n  \"format\": \"lattice-checkpoint\",\n  \"format_version\": %d,\n"
        "  \"step\": %ld,\n  \"samples_consumed\": %" PRIu64 ",\n  \"seed\": %" PRIu64 ",\n"
        "  \"data_seed\": %" PRIu64 ",\n  \"rng_state\": %" PRIu64 ",\n"
        "  \"optimizer_steps\": %ld,\n"
        "  \"arch\": \"%s\",\n  \"num_query_groups\": %d,\n"
        "  \"untie_embeddings_and_output_weights\": %s,\n"
        "  \"num_layers\": %d,\n  \"hidden_size\": %d,\n  \"num_attention_heads\": %d,\n"
        "  \"ffn_hidden_size\": %d,\n  \"seq_length\": %d,\n  \"max_position_embeddings\": %d,\n"
        "  \"vocab_size\": %d,\n  \"padded_vocab_size\": %d,\n  \"num_parameters\": %zu,\n"
        "  \"optimizer_state\": %s,\n",
        META_VERSION, m->step, m->samples_consumed, m->seed, m->data_seed, m->rng_state,
        m->optimizer_steps >= 0 && m->optimizer_steps <= m->step ? m->optimizer_steps : m->step,
        lt_arch_name((LtArch)d->arch), lt_dims_kv_heads(d), d->untied ? "true" : "false",
        d->num_layers, d->hidden, d->heads, d->ffn, d->seq_len, d->max_pos, d->vocab,
        d->padded_vocab, t->total, s->m && s->v ? "true" : "false");
    if (n < 0 || (size_t)n >= sizeof js - 64) return lt_errorf(err, errlen, "%s: metadata too long", path);
    /* the last key guards every byte before its line: an edited step (which
     * moves the data position and the LR schedule) is refused at load */
    snprintf(js + n, sizeof js - (size_t)n, "  \"meta_crc32\": %u\n}\n",
             (unsigned)lt_crc32(0, js, (size_t)n));
    FILE *f = fopen(path, "w");
    if (!f) return lt_errorf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    if (fputs(js, f) < 0) {
        fclose(f);
        return lt_errorf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    }
    return lt_file_commit(f, path, err, errlen);
}

static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* Parse a JSON string at p (at its '"') into out (escapes reduced to the
 * escaped character; \u sequences kept verbatim). Returns the position after
 * the closing quote, NULL when malformed. */
static const char *json_str(const char *p, char *out, size_t cap) {
    size_t n = 0;
    if (*p++ != '"') return NULL;
    for (; *p && *p != '"'; p++) {
        if (*p == '\\' && *++p == '\0') return NULL;
        if (n + 1 < cap) out[n++] = *p;
    }
    if (cap) out[n] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

/* Value of top-level `key` of the flat JSON object `js`: a string without its
 * quotes, or the raw token of a number/true/false/null. Nested values are
 * skipped. Returns 1 found, 0 absent, -1 malformed. */
static int json_flat_get(const char *js, const char *key, char *val, size_t cap) {
    char k[128];
    const char *p = json_ws(js);
    if (*p++ != '{') return -1;
    for (;;) {
        p = json_ws(p);
        if (*p == '}') return 0;
        if (!(p = json_str(p, k, sizeof k))) return -1;
        p = json_ws(p);
        if (*p++ != ':') return -1;
        p = json_ws(p);
        int hit = strcmp(k, key) == 0;
        if (*p == '"') {
            if (!(p = json_str(p, hit ? val : k, hit ? cap : sizeof k))) return -1;
            if (hit) return 1;
        } else if (*p == '{' || *p == '[') {
            int depth = 0;
            do {
                if (*p == '"') {
                    if (!(p = json_str(p, k, sizeof k))) return -1;
                    continue;
                }
                if (*p == '{' || *p == '[') depth++;
                if (*p == '}' || *p == ']') depth--;
                if (*p++ == '\0') return -1;
            } while (depth > 0);
        } else {
            size_t n = strcspn(p, ",} \t\r\n");
            if (n == 0) return -1;
            if (hit) {
                snprintf(val, cap, "%.*s", (int)n, p);
                return 1;
            }
            p += n;
        }
        p = json_ws(p);
        if (*p == ',') p++;
        else if (*p != '}') return -1;
    }
}

static int meta_u64(const char *js, const char *key, uint64_t *out, const char *path, char *err,
                    size_t errlen) {
    char val[64], *end;
    int found = json_flat_get(js, key, val, sizeof val);
    if (found < 0) return lt_errorf(err, errlen, "%s is not valid JSON", path);
    if (found == 0) return lt_errorf(err, errlen, "%s has no key '%s'", path, key);
    errno = 0;
    *out = strtoull(val, &end, 10);
    if (errno || *end || val[0] == '-' || !val[0])
        return lt_errorf(err, errlen, "%s: '%s' is not an unsigned integer: %s", path, key, val);
    return 0;
}

static int read_meta(const char *stepdir, LtCkptMeta *m, char *err, size_t errlen) {
    char path[PATH_MAX];
    if (join(path, stepdir, "meta.json", err, errlen)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return lt_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    char js[8192];
    size_t n = fread(js, 1, sizeof js - 1, f);
    int toolong = n == sizeof js - 1 && fgetc(f) != EOF;
    fclose(f);
    if (toolong) return lt_errorf(err, errlen, "%s is unexpectedly large", path);
    js[n] = '\0';
    uint64_t version, step;
    if (meta_u64(js, "format_version", &version, path, err, errlen)) return -1;
    if (version != META_VERSION && version != 1)
        return lt_errorf(err, errlen, "%s has format version %" PRIu64 "; this build reads versions 1 and %d",
                         path, version, META_VERSION);
    if (version >= 2) { /* the CRC of every byte before the meta_crc32 line */
        uint64_t want;
        const char *key = strstr(js, "\"meta_crc32\"");
        if (meta_u64(js, "meta_crc32", &want, path, err, errlen)) return -1;
        const char *line = key;
        while (line > js && line[-1] != '\n') line--;
        if (!key || lt_crc32(0, js, (size_t)(line - js)) != want)
            return lt_errorf(err, errlen,
                             "%s was modified after it was written (meta_crc32 mismatch): "
                             "refusing to resume from edited metadata",
                             path);
    }
    if (meta_u64(js, "step", &step, path, err, errlen) ||
        meta_u64(js, "samples_consumed", &m->samples_consumed, path, err, errlen) ||
        meta_u64(js, "seed", &m->seed, path, err, errlen) ||
        meta_u64(js, "data_seed", &m->data_seed, path, err, errlen) ||
        meta_u64(js, "rng_state", &m->rng_state, path, err, errlen))
        return -1;
    if (step > LONG_MAX) return lt_errorf(err, errlen, "%s: step out of range", path);
    m->step = (long)step;
    m->optimizer_steps = m->step; /* written since skipped steps exist; older files: = step */
    char val[64];
    if (json_flat_get(js, "optimizer_steps", val, sizeof val) == 1) {
        uint64_t os;
        if (meta_u64(js, "optimizer_steps", &os, path, err, errlen)) return -1;
        if (os > step)
            return lt_errorf(err, errlen, "%s: optimizer_steps %" PRIu64 " exceeds step %" PRIu64,
                             path, os, step);
        m->optimizer_steps = (long)os;
    }
    m->weights_only = json_flat_get(js, "optimizer_state", val, sizeof val) == 1 && !strcmp(val, "false");
    return 0;
}

int lt_ckpt_read_meta(const char *stepdir, LtCkptMeta *meta, char *err, size_t errlen) {
    return read_meta(stepdir, meta, err, errlen);
}

/* ---- public API ---------------------------------------------------------- */

static int write_step_files(const char *tmp, const LtParamTable *t, const LtCkptState *s,
                            const LtCkptMeta *meta, const LtConfig *cfg, char *err, size_t errlen) {
    char path[PATH_MAX];
    if (join(path, tmp, "state.lt", err, errlen) || write_state(path, t, s, err, errlen)) return -1;
    if (join(path, tmp, "meta.json", err, errlen) || write_meta(path, t, s, meta, err, errlen)) return -1;
    if (join(path, tmp, "config.yaml", err, errlen)) return -1;
    FILE *f = fopen(path, "w");
    if (!f) return lt_errorf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    lt_config_print(cfg, f);
    if (lt_file_commit(f, path, err, errlen)) return -1;
    return fsync_dir(tmp, err, errlen);
}

/* Move the complete directory tmp to final. An existing final (same step
 * saved again) is swapped out atomically where the filesystem supports
 * RENAME_EXCHANGE, else moved aside first; the old contents are removed. */
static int install_dir(const char *tmp, const char *final, const char *aside, char *err, size_t errlen) {
    if (rename(tmp, final) == 0) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST)
        return lt_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        remove_tree(tmp); /* now holds the replaced checkpoint */
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS)
        return lt_errorf(err, errlen, "cannot replace %s: %s", final, strerror(errno));
    if (remove_tree(aside) != 0 || rename(final, aside) != 0)
        return lt_errorf(err, errlen, "cannot move %s aside to %s: %s", final, aside, strerror(errno));
    if (rename(tmp, final) != 0) {
        int e = errno;
        rename(aside, final);
        return lt_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(e));
    }
    remove_tree(aside);
    return 0;
}

int lt_ckpt_save(const char *dir, const LtParamTable *t, const LtCkptState *s,
                 const LtCkptMeta *meta, const LtConfig *cfg, char *err, size_t errlen) {
    if (!s || !s->master || !meta || !cfg)
        return lt_errorf(err, errlen, "checkpoint save: master weights, meta and config are required");
    if (meta->step < 0) return lt_errorf(err, errlen, "checkpoint save: negative step %ld", meta->step);
    if (lt_mkdir_p(dir, err, errlen)) return -1;
    char name[64], tmpname[96], asidename[96];
    snprintf(name, sizeof name, "step_%08ld", meta->step);
    snprintf(tmpname, sizeof tmpname, ".tmp-%s-%ld", name, (long)getpid());
    snprintf(asidename, sizeof asidename, ".old-%s-%ld", name, (long)getpid());
    char tmp[PATH_MAX], final[PATH_MAX], aside[PATH_MAX], latest[PATH_MAX], latest_tmp[PATH_MAX];
    if (join(tmp, dir, tmpname, err, errlen) || join(final, dir, name, err, errlen) ||
        join(aside, dir, asidename, err, errlen) || join(latest, dir, "latest", err, errlen) ||
        join(latest_tmp, dir, "latest.tmp", err, errlen))
        return -1;

    remove_tree(tmp); /* left by an earlier process that had our pid */
    if (mkdir(tmp, 0777) != 0)
        return lt_errorf(err, errlen, "cannot create directory %s: %s", tmp, strerror(errno));
    if (write_step_files(tmp, t, s, meta, cfg, err, errlen) ||
        install_dir(tmp, final, aside, err, errlen)) {
        remove_tree(tmp);
        return -1;
    }
    if (fsync_dir(dir, err, errlen)) return -1;

    FILE *f = fopen(latest_tmp, "w");
    if (!f) return lt_errorf(err, errlen, "cannot create %s: %s", latest_tmp, strerror(errno));
    fprintf(f, "%s\n", name);
    if (lt_file_commit(f, latest_tmp, err, errlen) ||
        lt_rename_durable(latest_tmp, latest, err, errlen)) {
        remove(latest_tmp);
        return -1;
    }
    return 0;
}

/* ---- the checkpoint directory: preparing, pruning, finding the newest ---------- */

/* Whether name is a step directory's name (step_ and 8+ digits); its step. */
static int step_name(const char *name, long *step) {
    if (strncmp(name, "step_", 5) != 0 || strlen(name) < 13) return 0;
    char *end;
    errno = 0;
    long v = strtol(name + 5, &end, 10);
    if (*end || errno || v < 0 || !(name[5] >= '0' && name[5] <= '9')) return 0;
    *step = v;
    return 1;
}

/* Left behind by a writer that died mid-save: its temporary step directory,
 * the previous checkpoint it had moved aside, its half-written latest. */
static int stale_name(const char *name) {
    return strncmp(name, ".tmp-step_", 10) == 0 || strncmp(name, ".old-step_", 10) == 0 ||
           strcmp(name, "latest.tmp") == 0;
}

int lt_ckpt_prepare_dir(const char *dir, int *removed, char *err, size_t errlen) {
    *removed = 0;
    if (lt_mkdir_p(dir, err, errlen)) return -1;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return lt_errorf(err, errlen, "%s is not a directory", dir);
    char probe[PATH_MAX], name[64];
    snprintf(name, sizeof name, ".probe-%ld", (long)getpid());
    if (join(probe, dir, name, err, errlen)) return -1;
    FILE *f = fopen(probe, "w");
    if (!f) return lt_errorf(err, errlen, "cannot create a file in %s: %s", dir, strerror(errno));
    const int wrote = fputs("lattice\n", f) >= 0;
    if (lt_file_commit(f, probe, err, errlen) || !wrote) {
        remove(probe);
        return wrote ? -1 : lt_errorf(err, errlen, "cannot write to %s", probe);
    }
    if (remove(probe) != 0)
        return lt_errorf(err, errlen, "cannot remove %s: %s", probe, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return lt_errorf(err, errlen, "cannot list %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (!stale_name(e->d_name)) continue;
        char path[PATH_MAX];
        if (join(path, dir, e->d_name, err, errlen)) {
            rc = -1;
            break;
        }
        if (remove_tree(path) != 0) {
            rc = lt_errorf(err, errlen, "cannot remove the stale %s: %s", path, strerror(errno));
            break;
        }
        (*removed)++;
    }
    closedir(d);
    return rc;
}

typedef struct {
    long step;
    char name[NAME_MAX + 1];
} StepEntry;

static int step_cmp(const void *a, const void *b) {
    long x = ((const StepEntry *)a)->step, y = ((const StepEntry *)b)->step;
    return (x > y) - (x < y);
}

/* The name latest holds ("" when there is none or it cannot be read). */
static void read_latest(const char *dir, char *name, size_t cap) {
    char path[PATH_MAX], e[64];
    name[0] = '\0';
    if (join(path, dir, "latest", e, sizeof e)) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(name, 1, cap - 1, f);
    fclose(f);
    name[n] = '\0';
    name[strcspn(name, "\r\n")] = '\0';
}

int lt_ckpt_prune(const char *dir, int keep, int *removed, char *err, size_t errlen) {
    *removed = 0;
    if (keep <= 0) return 0;
    DIR *d = opendir(dir);
    if (!d) return lt_errorf(err, errlen, "cannot list %s: %s", dir, strerror(errno));
    StepEntry *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long step;
        if (!step_name(e->d_name, &step)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            StepEntry *g = realloc(v, cap * sizeof *v);
            if (!g) lt_fatal("out of host memory listing %s", dir);
            v = g;
        }
        v[n].step = step;
        snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
        n++;
    }
    closedir(d);
    char latest[256];
    read_latest(dir, latest, sizeof latest);
    qsort(v, n, sizeof *v, step_cmp);
    int rc = 0;
    /* step directories exist only complete (renamed into place after an fsync):
     * the newest `keep` stay, and so does the one latest names */
    for (size_t i = 0; i + (size_t)keep < n; i++) {
        if (!strcmp(v[i].name, latest)) continue;
        char path[PATH_MAX];
        if (join(path, dir, v[i].name, err, errlen)) {
            rc = -1;
            break;
        }
        if (remove_tree(path) != 0) {
            rc = lt_errorf(err, errlen, "cannot remove the old checkpoint %s: %s", path,
                           strerror(errno));
            break;
        }
        (*removed)++;
    }
    free(v);
    return rc;
}

int lt_ckpt_find_latest(const char *dir, char *stepdir, size_t len, char *err, size_t errlen) {
    char probe[PATH_MAX];
    struct stat st;
    if (stat(dir, &st) != 0) return errno == ENOENT ? 0 : lt_errorf(err, errlen, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return lt_errorf(err, errlen, "%s is not a directory", dir);
    if (join(probe, dir, "latest", err, errlen)) return -1;
    if (!file_exists(probe)) return 0;
    return lt_ckpt_resolve(dir, stepdir, len, err, errlen) ? -1 : 1;
}

int lt_ckpt_resolve(const char *path, char *stepdir, size_t len, char *err, size_t errlen) {
    char base[PATH_MAX], probe[PATH_MAX];
    if (!path || !*path) return lt_errorf(err, errlen, "empty checkpoint path");
    if (snprintf(base, sizeof base, "%s", path) >= (int)sizeof base)
        return lt_errorf(err, errlen, "path too long: %s", path);
    for (size_t n = strlen(base); n > 1 && base[n - 1] == '/'; n--) base[n - 1] = '\0';
    struct stat st;
    if (stat(base, &st) != 0)
        return lt_errorf(err, errlen, "checkpoint path %s: %s", base, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return lt_errorf(err, errlen, "checkpoint path %s is not a directory", base);

    if (join(probe, base, "latest", err, errlen)) return -1;
    if (file_exists(probe)) {
        char name[256];
        FILE *f = fopen(probe, "r");
        if (!f) return lt_errorf(err, errlen, "cannot open %s: %s", probe, strerror(errno));
        size_t n = fread(name, 1, sizeof name - 1, f);
        fclose(f);
        name[n] = '\0';
        name[strcspn(name, "\r\n")] = '\0';
        if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            return lt_errorf(err, errlen, "%s does not name a step directory", probe);
        char dir[PATH_MAX], state[PATH_MAX];
        if (join(dir, base, name, err, errlen) || join(state, dir, "state.lt", err, errlen)) return -1;
        if (!file_exists(state))
            return lt_errorf(err, errlen, "%s names %s, which has no state.lt", probe, dir);
        if (snprintf(stepdir, len, "%s", dir) >= (int)len) return lt_errorf(err, errlen, "path too long: %s", dir);
        return 0;
    }
    if (join(probe, base, "state.lt", err, errlen)) return -1;
    if (file_exists(probe)) {
        if (snprintf(stepdir, len, "%s", base) >= (int)len) return lt_errorf(err, errlen, "path too long: %s", base);
        return 0;
    }
    return lt_errorf(err, errlen,
                "%s is not a checkpoint: neither a checkpoint directory (no 'latest') "
                "nor a step directory (no 'state.lt')",
                base);
}

int lt_ckpt_load_config(const char *stepdir, LtConfig *cfg, char *err, size_t errlen) {
    char path[PATH_MAX];
    if (join(path, stepdir, "config.yaml", err, errlen)) return -1;
    if (!file_exists(path)) return lt_errorf(err, errlen, "checkpoint %s has no config.yaml", stepdir);
    lt_config_defaults(cfg);
    return lt_config_load(cfg, path, 0, NULL, err, errlen);
}

int lt_ckpt_load(const char *stepdir, const LtParamTable *t, LtCkptState *s, LtCkptMeta *meta,
                 char *err, size_t errlen) {
    if (!s || !s->master) return lt_errorf(err, errlen, "checkpoint load: no master weight buffer");
    LtCkptMeta m;
    if (read_meta(stepdir, &m, err, errlen)) return -1;
    if (load_state(stepdir, t, s, err, errlen)) return -1;
    if (meta) *meta = m;
    return 0;
}
