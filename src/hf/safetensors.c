/* safetensors.c - writer (F32) and reader (F32, BF16, F16) of the
 * safetensors format.
 *
 * Layout: u64 little-endian N, then N bytes of UTF-8 JSON (padded with
 * spaces so the data starts at a multiple of 8), then the data section.
 * The JSON object maps each tensor name to
 *   {"dtype":"F32","shape":[d0,...],"data_offsets":[begin,end]}
 * with offsets relative to the data section, plus "__metadata__" (a map of
 * strings). The writer emits tensors back to back in the order given. */
#include "safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fileio.h"
#include "json.h"

#define MAX_HEADER (100u << 20) /* same bound the reference implementation uses */


/* ---- growable text buffer for the header ---------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
} Buf;

static void buf_add(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_add(Buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = 2 * b->cap + (size_t)k + 64;
        char *s = lt_malloc(cap);
        memcpy(s, b->s, b->n);
        free(b->s);
        b->s = s;
        b->cap = cap;
    }
}

/* Append name as a JSON string literal. */
static void buf_add_json_str(Buf *b, const char *name) {
    buf_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (*p == '"' || *p == '\\') buf_add(b, "\\%c", *p);
        else if (*p < 0x20) buf_add(b, "\\u%04x", *p);
        else buf_add(b, "%c", *p);
    }
    buf_add(b, "\"");
}

static uint64_t numel_of(const LtStTensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* ---- writer ------------------------------------------------------------- */

static int write_data(FILE *f, const float *x, uint64_t n, const char *path, char *err, size_t errlen) {
    unsigned char buf[1 << 16];
    const uint64_t per = sizeof buf / 4;
    for (uint64_t i = 0; i < n; i += per) {
        size_t k = (size_t)(n - i < per ? n - i : per);
        for (size_t j = 0; j < k; j++) {
            uint32_t u;
            memcpy(&u, &x[i + j], 4);
            for (int b = 0; b < 4; b++) buf[4 * j + (size_t)b] = (unsigned char)(u >> (8 * b));
        }
        if (fwrite(buf, 1, 4 * k, f) != 4 * k)
            return lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
    }
    return 0;
}

int lt_safetensors_write(const char *file, const LtStTensor *tensors, int n, char *err,
                         size_t errlen) {
    for (int i = 0; i < n; i++) {
        const LtStTensor *t = &tensors[i];
        if (t->ndim < 0 || t->ndim > 4 || !t->name || !t->name[0] || (!t->data && numel_of(t)))
            return lt_errorf(err, errlen, "safetensors: bad tensor description #%d", i);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0) return lt_errorf(err, errlen, "safetensors: negative dim in '%s'", t->name);
    }
    Buf h = {lt_malloc(4096), 0, 4096};
    uint64_t off = 0;
    buf_add(&h, "{");
    for (int i = 0; i < n; i++) {
        const LtStTensor *t = &tensors[i];
        buf_add_json_str(&h, t->name);
        buf_add(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) buf_add(&h, "%s%" PRId64, d ? "," : "", t->shape[d]);
        const uint64_t end = off + 4 * numel_of(t);
        buf_add(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]},", off, end);
        off = end;
    }
    buf_add(&h, "\"__metadata__\":{\"format\":\"pt\"}}");
    while (h.n % 8) buf_add(&h, " ");

    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", file, (long)getpid()) >= (int)sizeof tmp) {
        free(h.s);
        return lt_errorf(err, errlen, "path too long: %s", file);
    }
    int rc = -1;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        lt_errorf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        goto done;
    }
    unsigned char len[8];
    for (int b = 0; b < 8; b++) len[b] = (unsigned char)((uint64_t)h.n >> (8 * b));
    if (fwrite(len, 1, 8, f) != 8 || fwrite(h.s, 1, h.n, f) != h.n) {
        lt_errorf(err, errlen, "error writing %s: %s", tmp, strerror(errno));
        fclose(f);
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (write_data(f, tensors[i].data, numel_of(&tensors[i]), tmp, err, errlen)) {
            fclose(f);
            goto done;
        }
    if (lt_file_commit(f, tmp, err, errlen) == 0) rc = lt_rename_durable(tmp, file, err, errlen);
done:
    if (rc) remove(tmp);
    free(h.s);
    return rc;
}

/* ---- reader ----------------------------------------------------------------- */

static int dtype_size(const char *d) {
    static const struct { const char *name; int size; } tab[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1},
        {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(tab[i].name, d) == 0) return tab[i].size;
    return 0;
}

/* One header entry (key `name`, value v) into e; the data section has
 * data_len bytes. */
static int parse_entry(const LtJson *v, LtStEntry *e, uint64_t data_len, const char *file,
                       char *err, size_t errlen) {
    const char *name = v->key;
    const LtJson *dt = lt_json_get(v, "dtype"), *sh = lt_json_get(v, "shape"),
                 *off = lt_json_get(v, "data_offsets");
    if (v->type != LT_JSON_OBJECT || !dt || dt->type != LT_JSON_STRING || !sh ||
        sh->type != LT_JSON_ARRAY || !off || off->type != LT_JSON_ARRAY || off->n != 2)
        return lt_errorf(err, errlen,
                         "%s: malformed header entry for '%s' (needs \"dtype\", \"shape\" and "
                         "two \"data_offsets\")", file, name);
    const int es = dtype_size(dt->text);
    if (!es || strlen(dt->text) >= sizeof e->dtype)
        return lt_errorf(err, errlen, "%s: unknown dtype '%.32s' for '%s'", file, dt->text, name);
    if (sh->n > LT_ST_MAX_DIMS)
        return lt_errorf(err, errlen, "%s: '%s' has %d dims; at most %d are read", file, name,
                         sh->n, LT_ST_MAX_DIMS);
    snprintf(e->dtype, sizeof e->dtype, "%s", dt->text);
    e->ndim = sh->n;
    uint64_t numel = 1, bytes = (uint64_t)es;
    for (int d = 0; d < sh->n; d++) {
        uint64_t x;
        if (lt_json_u64(&sh->kids[d], &x) || x > (uint64_t)INT64_MAX)
            return lt_errorf(err, errlen, "%s: shape of '%s' is not a list of sizes", file, name);
        if (x && bytes > UINT64_MAX / x)
            return lt_errorf(err, errlen, "%s: shape of '%s' overflows", file, name);
        e->shape[d] = (int64_t)x;
        numel *= x;
        bytes *= x;
    }
    if (lt_json_u64(&off->kids[0], &e->begin) || lt_json_u64(&off->kids[1], &e->end))
        return lt_errorf(err, errlen, "%s: data_offsets of '%s' are not byte offsets", file, name);
    if (e->begin > e->end || e->end > data_len)
        return lt_errorf(err, errlen,
                         "%s: data_offsets [%" PRIu64 ",%" PRIu64 "] of '%s' lie outside the "
                         "data section (%" PRIu64 " bytes): truncated or corrupt file",
                         file, e->begin, e->end, name, data_len);
    if (e->end - e->begin != bytes)
        return lt_errorf(err, errlen, "%s: '%s' has %" PRIu64 " data bytes, its shape needs %" PRIu64,
                         file, name, e->end - e->begin, bytes);
    e->numel = numel;
    if (!(e->name = strdup(name))) return lt_errorf(err, errlen, "%s: out of memory", file);
    return 0;
}

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const LtStEntry *)a)->name, ((const LtStEntry *)b)->name);
}

void lt_st_close(LtStFile *st) {
    for (int i = 0; i < st->n; i++) free(st->e[i].name);
    free(st->e);
    st->e = NULL;
    st->n = 0;
}

/* Read the header bytes of an open file; *hdr malloc'd (NULL on error). */
static int read_header(FILE *f, LtStFile *st, char **hdr, uint64_t *len, char *err, size_t errlen) {
    struct stat sb;
    unsigned char lenb[8];
    *hdr = NULL;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size < 8 || fread(lenb, 1, 8, f) != 8)
        return lt_errorf(err, errlen, "%s is truncated (no header length)", st->path);
    st->file_size = (uint64_t)sb.st_size;
    uint64_t n = 0;
    for (int b = 7; b >= 0; b--) n = (n << 8) | lenb[b];
    if (n > st->file_size - 8 || n > MAX_HEADER)
        return lt_errorf(err, errlen, "%s: header length %" PRIu64 " exceeds the file (%" PRIu64 " bytes)",
                         st->path, n, st->file_size);
    if (!(*hdr = malloc((size_t)n + 1)))
        return lt_errorf(err, errlen, "%s: out of memory for a header of %" PRIu64 " bytes", st->path, n);
    if (fread(*hdr, 1, (size_t)n, f) != n) {
        free(*hdr);
        *hdr = NULL;
        return lt_errorf(err, errlen, "error reading %s", st->path);
    }
    *len = n;
    return 0;
}

int lt_st_open(LtStFile *st, const char *file, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    if (snprintf(st->path, sizeof st->path, "%s", file) >= (int)sizeof st->path)
        return lt_errorf(err, errlen, "path too long: %s", file);
    FILE *f = fopen(file, "rb");
    if (!f) return lt_errorf(err, errlen, "cannot open %s: %s", file, strerror(errno));
    char *hdr;
    uint64_t n = 0;
    int rc = read_header(f, st, &hdr, &n, err, errlen);
    fclose(f);
    if (rc) return -1;
    st->data_start = 8 + n;
    const uint64_t data_len = st->file_size - st->data_start;
    LtJson *js = lt_json_parse(hdr, (size_t)n, file, err, errlen);
    free(hdr);
    if (!js) return -1;
    if (js->type != LT_JSON_OBJECT) {
        lt_json_free(js);
        return lt_errorf(err, errlen, "%s: header is not a JSON object", file);
    }
    st->e = calloc((size_t)js->n + 1, sizeof *st->e);
    if (!st->e) {
        lt_json_free(js);
        return lt_errorf(err, errlen, "%s: out of memory", file);
    }
    uint64_t max_end = 0;
    for (int i = 0; rc == 0 && i < js->n; i++) {
        const LtJson *v = &js->kids[i];
        if (strcmp(v->key, "__metadata__") == 0) {
            if (v->type != LT_JSON_OBJECT) rc = lt_errorf(err, errlen, "%s: malformed __metadata__", file);
            continue;
        }
        rc = parse_entry(v, &st->e[st->n], data_len, file, err, errlen);
        if (rc == 0 && st->e[st->n++].end > max_end) max_end = st->e[st->n - 1].end;
    }
    lt_json_free(js);
    if (rc == 0 && max_end != data_len)
        rc = lt_errorf(err, errlen, "%s: data section is %" PRIu64 " bytes, the header describes %" PRIu64,
                       file, data_len, max_end);
    if (rc) {
        lt_st_close(st);
        return -1;
    }
    qsort(st->e, (size_t)st->n, sizeof *st->e, entry_cmp); /* names are unique (lt_json_parse) */
    return 0;
}

const LtStEntry *lt_st_find(const LtStFile *st, const char *name) {
    LtStEntry key = {.name = (char *)name};
    return st->n ? bsearch(&key, st->e, (size_t)st->n, sizeof *st->e, entry_cmp) : NULL;
}

/* IEEE half to float, exactly (subnormals, infinities and NaN included). */
static float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | man << 13;
    } else if (exp) {
        u = sign | (exp + 112) << 23 | man << 13;
    } else if (!man) {
        u = sign;
    } else { /* subnormal: man * 2^-24, normalized */
        int e = 113;
        uint32_t m = man;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        u = sign | (uint32_t)e << 23 | (m & 0x3ffu) << 13;
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int lt_st_read_f32(const LtStFile *st, const LtStEntry *e, float *dst, char *err, size_t errlen) {
    const int es = strcmp(e->dtype, "F32") == 0 ? 4
                   : strcmp(e->dtype, "BF16") == 0 || strcmp(e->dtype, "F16") == 0 ? 2 : 0;
    if (!es)
        return lt_errorf(err, errlen, "%s: tensor '%s' is %s; only F32, BF16 and F16 are read",
                         st->path, e->name, e->dtype);
    const int bf16 = e->dtype[0] == 'B';
    FILE *f = fopen(st->path, "rb");
    if (!f) return lt_errorf(err, errlen, "cannot open %s: %s", st->path, strerror(errno));
    struct stat sb;
    int rc = 0;
    if (fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size != st->file_size)
        rc = lt_errorf(err, errlen, "%s changed size since its header was read", st->path);
    else if (fseeko(f, (off_t)(st->data_start + e->begin), SEEK_SET) != 0)
        rc = lt_errorf(err, errlen, "cannot seek to tensor '%s' in %s", e->name, st->path);
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = rc ? NULL : lt_malloc(CHUNK);
    for (uint64_t i = 0; rc == 0 && i < e->numel;) {
        const size_t k = (size_t)(e->numel - i < CHUNK / 4 ? e->numel - i : CHUNK / 4);
        if (fread(buf, (size_t)es, k, f) != k) {
            rc = lt_errorf(err, errlen, "error reading tensor '%s' from %s", e->name, st->path);
            break;
        }
        for (size_t j = 0; j < k; j++) {
            const unsigned char *q = buf + (size_t)es * j;
            if (es == 4) {
                const uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                                   (uint32_t)q[3] << 24;
                memcpy(&dst[i + j], &u, 4);
            } else {
                const uint16_t h = (uint16_t)(q[0] | q[1] << 8);
                dst[i + j] = bf16 ? lt_bf16_to_f32(h) : half_to_float(h);
            }
        }
        i += k;
    }
    free(buf);
    fclose(f);
    return rc;
}

float *lt_safetensors_read(const char *file, const char *name, int *ndim, int64_t shape[4],
                           char *err, size_t errlen) {
    LtStFile st;
    if (lt_st_open(&st, file, err, errlen)) return NULL;
    float *out = NULL;
    const LtStEntry *e = lt_st_find(&st, name);
    if (!e) {
        lt_errorf(err, errlen, "%s has no tensor '%s'", file, name);
    } else if (e->ndim > 4) {
        lt_errorf(err, errlen, "%s: tensor '%s' has %d dims; at most 4 are read here", file, name,
                  e->ndim);
    } else {
        out = lt_malloc(sizeof(float) * (size_t)e->numel);
        if (lt_st_read_f32(&st, e, out, err, errlen)) {
            free(out);
            out = NULL;
        } else {
            *ndim = e->ndim;
            for (int d = 0; d < 4; d++) shape[d] = d < e->ndim ? e->shape[d] : 0;
        }
    }
    lt_st_close(&st);
    return out;
}
