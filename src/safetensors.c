/* safetensors.c - writer and reader for the safetensors format (F32 only).
 *
 * Layout: u64 little-endian N, then N bytes of UTF-8 JSON (padded with
 * spaces so the data starts at a multiple of 8), then the data section.
 * The JSON object maps each tensor name to
 *   {"dtype":"F32","shape":[d0,...],"data_offsets":[begin,end]}
 * with offsets relative to the data section, plus "__metadata__" (a map of
 * strings). The writer emits tensors back to back in the order given. */
#include "checkpoint.h"

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

/* ---- reader: a small JSON scanner over the header ------------------------- */

typedef struct {
    const char *p, *end;
} Js;

static void js_ws(Js *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int js_peek(Js *j) {
    js_ws(j);
    return j->p < j->end ? (unsigned char)*j->p : -1;
}

static int js_expect(Js *j, char c) {
    if (js_peek(j) != (unsigned char)c) return -1;
    j->p++;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode a JSON string into out (NUL-terminated, UTF-8). -1 when malformed
 * or longer than cap-1 bytes. \u escapes outside the BMP are kept as two
 * 3-byte sequences (names never need them). */
static int js_string(Js *j, char *out, size_t cap) {
    size_t n = 0;
    if (js_expect(j, '"')) return -1;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        unsigned cp = c;
        if (c == '\\') {
            if (j->p >= j->end) return -1;
            char e = *j->p++;
            switch (e) {
            case '"': case '\\': case '/': cp = (unsigned char)e; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                cp = 0;
                for (int i = 0; i < 4; i++) {
                    int h = j->p < j->end ? hexval(*j->p++) : -1;
                    if (h < 0) return -1;
                    cp = cp * 16 + (unsigned)h;
                }
                break;
            default: return -1;
            }
        } else if (c < 0x20) {
            return -1;
        }
        /* Raw bytes (already UTF-8) pass through; escapes are encoded. */
        unsigned char enc[3];
        size_t k = 0;
        if (cp < 0x80 || c != '\\') {
            enc[k++] = (unsigned char)cp;
        } else if (cp < 0x800) {
            enc[k++] = (unsigned char)(0xc0 | cp >> 6);
            enc[k++] = (unsigned char)(0x80 | (cp & 0x3f));
        } else {
            enc[k++] = (unsigned char)(0xe0 | cp >> 12);
            enc[k++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
            enc[k++] = (unsigned char)(0x80 | (cp & 0x3f));
        }
        if (n + k >= cap) return -1;
        memcpy(out + n, enc, k);
        n += k;
    }
    if (j->p >= j->end) return -1;
    j->p++;
    out[n] = '\0';
    return 0;
}

static int js_u64(Js *j, uint64_t *v) {
    js_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return -1;
    uint64_t x = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        unsigned dgt = (unsigned)(*j->p++ - '0');
        if (x > (UINT64_MAX - dgt) / 10) return -1;
        x = x * 10 + dgt;
    }
    *v = x;
    return 0;
}

/* Skip one JSON value of any kind. */
static int js_skip(Js *j, int depth) {
    int c = js_peek(j);
    if (depth > 64 || c < 0) return -1;
    if (c == '"') {
        char tmp[1024];
        return js_string(j, tmp, sizeof tmp);
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (js_peek(j) == close) return j->p++, 0;
        for (;;) {
            if (c == '{') {
                char key[1024];
                if (js_string(j, key, sizeof key) || js_expect(j, ':')) return -1;
            }
            if (js_skip(j, depth + 1)) return -1;
            if (js_peek(j) == ',') j->p++;
            else return js_expect(j, close);
        }
    }
    /* number, true, false, null */
    const char *start = j->p;
    while (j->p < j->end && strchr("+-.0123456789eEtruefalsn", *j->p)) j->p++;
    return j->p > start ? 0 : -1;
}

/* Parse a JSON array of unsigned integers into v[0..*n), at most max. */
static int js_u64_array(Js *j, uint64_t *v, int max, int *n) {
    *n = 0;
    if (js_expect(j, '[')) return -1;
    if (js_peek(j) == ']') return j->p++, 0;
    for (;;) {
        if (*n == max || js_u64(j, &v[*n])) return -1;
        (*n)++;
        if (js_peek(j) == ',') j->p++;
        else return js_expect(j, ']');
    }
}

typedef struct {
    char dtype[16];
    uint64_t shape[8];
    int ndim;
    uint64_t begin, end;
    int have_dtype, have_shape, have_offsets;
} TensorInfo;

static int js_tensor_info(Js *j, TensorInfo *ti) {
    memset(ti, 0, sizeof *ti);
    if (js_expect(j, '{')) return -1;
    if (js_peek(j) == '}') return j->p++, 0;
    for (;;) {
        char key[64];
        if (js_string(j, key, sizeof key) || js_expect(j, ':')) return -1;
        if (strcmp(key, "dtype") == 0) {
            if (js_string(j, ti->dtype, sizeof ti->dtype)) return -1;
            ti->have_dtype = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (js_u64_array(j, ti->shape, 8, &ti->ndim)) return -1;
            ti->have_shape = 1;
        } else if (strcmp(key, "data_offsets") == 0) {
            uint64_t o[2];
            int k;
            if (js_u64_array(j, o, 2, &k) || k != 2) return -1;
            ti->begin = o[0], ti->end = o[1];
            ti->have_offsets = 1;
        } else if (js_skip(j, 1)) {
            return -1;
        }
        if (js_peek(j) == ',') j->p++;
        else return js_expect(j, '}');
    }
}

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

/* Parse the whole header, validating every entry against the data section
 * of data_len bytes; the entry named `want` goes to *found (found->ndim = -1
 * when absent). */
static int parse_header(const char *hdr, size_t n, uint64_t data_len, const char *want,
                        TensorInfo *found, const char *file, char *err, size_t errlen) {
    Js j = {hdr, hdr + n};
    uint64_t max_end = 0;
    found->ndim = -1;
    if (js_expect(&j, '{')) return lt_errorf(err, errlen, "%s: header is not a JSON object", file);
    if (js_peek(&j) != '}') {
        for (;;) {
            char key[1024];
            TensorInfo ti;
            if (js_string(&j, key, sizeof key) || js_expect(&j, ':'))
                return lt_errorf(err, errlen, "%s: malformed header JSON", file);
            if (strcmp(key, "__metadata__") == 0) {
                if (js_skip(&j, 1)) return lt_errorf(err, errlen, "%s: malformed __metadata__", file);
            } else {
                if (js_tensor_info(&j, &ti) || !ti.have_dtype || !ti.have_shape || !ti.have_offsets)
                    return lt_errorf(err, errlen, "%s: malformed header entry for '%s'", file, key);
                int es = dtype_size(ti.dtype);
                if (!es) return lt_errorf(err, errlen, "%s: unknown dtype '%s' for '%s'", file, ti.dtype, key);
                uint64_t bytes = (uint64_t)es;
                for (int d = 0; d < ti.ndim; d++) {
                    if (ti.shape[d] && bytes > UINT64_MAX / ti.shape[d])
                        return lt_errorf(err, errlen, "%s: shape of '%s' overflows", file, key);
                    bytes *= ti.shape[d];
                }
                if (ti.begin > ti.end || ti.end > data_len)
                    return lt_errorf(err, errlen,
                                "%s: data_offsets [%" PRIu64 ",%" PRIu64 "] of '%s' lie outside the "
                                "data section (%" PRIu64 " bytes): truncated or corrupt file",
                                file, ti.begin, ti.end, key, data_len);
                if (ti.end - ti.begin != bytes)
                    return lt_errorf(err, errlen, "%s: '%s' has %" PRIu64 " data bytes, its shape needs %" PRIu64,
                                file, key, ti.end - ti.begin, bytes);
                if (ti.end > max_end) max_end = ti.end;
                if (strcmp(key, want) == 0) *found = ti;
            }
            if (js_peek(&j) == ',') {
                j.p++;
                continue;
            }
            if (js_expect(&j, '}')) return lt_errorf(err, errlen, "%s: malformed header JSON", file);
            break;
        }
    } else {
        j.p++;
    }
    if (js_peek(&j) != -1) return lt_errorf(err, errlen, "%s: trailing bytes after the header JSON", file);
    if (max_end != data_len)
        return lt_errorf(err, errlen, "%s: data section is %" PRIu64 " bytes, the header describes %" PRIu64,
                    file, data_len, max_end);
    return 0;
}

float *lt_safetensors_read(const char *file, const char *name, int *ndim, int64_t shape[4],
                           char *err, size_t errlen) {
    FILE *f = fopen(file, "rb");
    if (!f) {
        lt_errorf(err, errlen, "cannot open %s: %s", file, strerror(errno));
        return NULL;
    }
    char *hdr = NULL;
    float *out = NULL;
    struct stat st;
    unsigned char lenb[8];
    if (fstat(fileno(f), &st) != 0 || st.st_size < 8 || fread(lenb, 1, 8, f) != 8) {
        lt_errorf(err, errlen, "%s is truncated (no header length)", file);
        goto done;
    }
    const uint64_t size = (uint64_t)st.st_size;
    uint64_t n = 0;
    for (int b = 7; b >= 0; b--) n = (n << 8) | lenb[b];
    if (n > size - 8 || n > MAX_HEADER) {
        lt_errorf(err, errlen, "%s: header length %" PRIu64 " exceeds the file (%" PRIu64 " bytes)", file, n, size);
        goto done;
    }
    hdr = lt_malloc((size_t)n + 1);
    if (fread(hdr, 1, (size_t)n, f) != n) {
        lt_errorf(err, errlen, "error reading %s", file);
        goto done;
    }
    hdr[n] = '\0';
    TensorInfo ti;
    if (parse_header(hdr, (size_t)n, size - 8 - n, name, &ti, file, err, errlen)) goto done;
    if (ti.ndim < 0) {
        lt_errorf(err, errlen, "%s has no tensor '%s'", file, name);
        goto done;
    }
    if (strcmp(ti.dtype, "F32") != 0 || ti.ndim > 4) {
        lt_errorf(err, errlen, "%s: tensor '%s' is %s with %d dims; only F32 up to 4-D is supported", file,
             name, ti.dtype, ti.ndim);
        goto done;
    }
    const uint64_t bytes = ti.end - ti.begin;
    unsigned char *raw = lt_malloc((size_t)bytes);
    if (fseeko(f, (off_t)(8 + n + ti.begin), SEEK_SET) != 0 || fread(raw, 1, (size_t)bytes, f) != bytes) {
        free(raw);
        lt_errorf(err, errlen, "error reading tensor '%s' from %s", name, file);
        goto done;
    }
    out = (float *)raw;
    for (uint64_t i = 0; i < bytes / 4; i++) {
        const unsigned char *q = raw + 4 * i;
        uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        memcpy(&out[i], &u, 4);
    }
    *ndim = ti.ndim;
    for (int d = 0; d < 4; d++) shape[d] = d < ti.ndim ? (int64_t)ti.shape[d] : 0;
done:
    free(hdr);
    fclose(f);
    return out;
}
