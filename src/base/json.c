/* json.c - the JSON reader of json.h: recursive descent over a bounded
 * buffer, one node per value. Allocation failures are reported as errors
 * (the input may be hostile and large), never as an exit. */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef struct {
    const char *s, *p, *end;
    const char *what;
    char *err;
    size_t errlen;
    int failed;
} Parser;

static int fail(Parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Parser *ps, const char *fmt, ...) {
    if (ps->failed) return -1; /* keep the first, innermost message */
    ps->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lt_errorf(ps->err, ps->errlen, "%s: invalid JSON at byte %zu: %s", ps->what,
                     (size_t)(ps->p - ps->s), msg);
}

static void skip_ws(Parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(Parser *ps, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        if (ps->p >= ps->end) return fail(ps, "unterminated \\u escape");
        char c = *ps->p++;
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return fail(ps, "bad hex digit in \\u escape");
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* A string at ps->p (its opening quote) decoded into a new NUL-terminated
 * buffer. The decoded form is never longer than the literal. */
static char *parse_string(Parser *ps) {
    const char *start = ++ps->p;
    const char *q = start;
    while (q < ps->end && *q != '"') q += *q == '\\' && q + 1 < ps->end ? 2 : 1;
    if (q >= ps->end) {
        fail(ps, "unterminated string");
        return NULL;
    }
    char *out = malloc((size_t)(q - start) + 1);
    if (!out) {
        fail(ps, "out of memory for a string of %zu bytes", (size_t)(q - start));
        return NULL;
    }
    size_t n = 0;
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p++;
        if (c < 0x20) {
            fail(ps, "control character in a string");
            goto bad;
        }
        if (c != '\\') {
            out[n++] = (char)c; /* UTF-8 passes through as bytes */
            continue;
        }
        char e = *ps->p++;
        unsigned cp = 0;
        switch (e) {
        case '"': case '\\': case '/': out[n++] = e; continue;
        case 'b': out[n++] = '\b'; continue;
        case 'f': out[n++] = '\f'; continue;
        case 'n': out[n++] = '\n'; continue;
        case 'r': out[n++] = '\r'; continue;
        case 't': out[n++] = '\t'; continue;
        case 'u': break;
        default: fail(ps, "bad escape \\%c", e); goto bad;
        }
        if (hex4(ps, &cp)) goto bad;
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail(ps, "unpaired low surrogate \\u%04x", cp);
            goto bad;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* must be followed by its low half */
            unsigned lo = 0;
            if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                fail(ps, "unpaired high surrogate \\u%04x", cp);
                goto bad;
            }
            ps->p += 2;
            if (hex4(ps, &lo)) goto bad;
            if (lo < 0xDC00 || lo > 0xDFFF) {
                fail(ps, "unpaired high surrogate \\u%04x", cp);
                goto bad;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) {
            fail(ps, "\\u0000 in a string");
            goto bad;
        }
        /* 6 or 12 escape bytes always cover the 1..4 UTF-8 bytes */
        if (cp < 0x80) {
            out[n++] = (char)cp;
        } else if (cp < 0x800) {
            out[n++] = (char)(0xC0 | cp >> 6);
            out[n++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[n++] = (char)(0xE0 | cp >> 12);
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[n++] = (char)(0xF0 | cp >> 18);
            out[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    ps->p++; /* the closing quote */
    out[n] = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

static int digits(Parser *ps) {
    const char *s = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    return ps->p > s ? 0 : fail(ps, "digit expected in a number");
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, kept as text */
static int parse_number(Parser *ps, LtJson *v) {
    const char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p < ps->end && *ps->p == '0') ps->p++;
    else if (digits(ps)) return -1;
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (digits(ps)) return -1;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (digits(ps)) return -1;
    }
    v->type = LT_JSON_NUMBER;
    v->text = malloc((size_t)(ps->p - s) + 1);
    if (!v->text) return fail(ps, "out of memory");
    memcpy(v->text, s, (size_t)(ps->p - s));
    v->text[ps->p - s] = '\0';
    return 0;
}

static int parse_value(Parser *ps, LtJson *v, int depth);

static int by_key(const void *a, const void *b) {
    return strcmp((*(const LtJson *const *)a)->key, (*(const LtJson *const *)b)->key);
}

/* The first key that appears twice in object v, or NULL. O(n log n). */
static const char *duplicate_key(const LtJson *v, Parser *ps) {
    if (v->n < 2) return NULL;
    const LtJson **sorted = malloc(sizeof *sorted * (size_t)v->n);
    if (!sorted) {
        fail(ps, "out of memory");
        return "";
    }
    for (int i = 0; i < v->n; i++) sorted[i] = &v->kids[i];
    qsort(sorted, (size_t)v->n, sizeof *sorted, by_key);
    const char *dup = NULL;
    for (int i = 1; i < v->n && !dup; i++)
        if (strcmp(sorted[i - 1]->key, sorted[i]->key) == 0) dup = sorted[i]->key;
    free(sorted);
    return dup;
}

/* An array or object: elements until `close`. */
static int parse_container(Parser *ps, LtJson *v, int depth) {
    const int object = *ps->p == '{';
    const char close = object ? '}' : ']';
    v->type = object ? LT_JSON_OBJECT : LT_JSON_ARRAY;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    int cap = 0;
    for (;;) {
        if (v->n == cap) {
            cap = cap ? 2 * cap : 4;
            LtJson *k = realloc(v->kids, sizeof *k * (size_t)cap);
            if (!k) return fail(ps, "out of memory for %d elements", cap);
            v->kids = k;
        }
        LtJson *kid = &v->kids[v->n];
        memset(kid, 0, sizeof *kid);
        v->n++;
        skip_ws(ps);
        if (object) {
            if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "object key (a string) expected");
            if (!(kid->key = parse_string(ps))) return -1;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "':' expected after a key");
            ps->p++;
        }
        if (parse_value(ps, kid, depth + 1)) return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            break;
        }
        return fail(ps, "',' or '%c' expected", close);
    }
    if (object) {
        const char *dup = duplicate_key(v, ps);
        if (dup) return fail(ps, "key \"%.100s\" appears twice in one object", dup);
    }
    return 0;
}

static int literal(Parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "unexpected character '%c'", *ps->p);
    ps->p += n;
    return 0;
}

static int parse_value(Parser *ps, LtJson *v, int depth) {
    if (depth > LT_JSON_MAX_DEPTH) return fail(ps, "nested deeper than %d levels", LT_JSON_MAX_DEPTH);
    skip_ws(ps);
    if (ps->p >= ps->end) return fail(ps, "value expected, found the end");
    switch (*ps->p) {
    case '{': case '[': return parse_container(ps, v, depth);
    case '"':
        v->type = LT_JSON_STRING;
        return (v->text = parse_string(ps)) ? 0 : -1;
    case 't': v->type = LT_JSON_BOOL, v->boolean = 1; return literal(ps, "true");
    case 'f': v->type = LT_JSON_BOOL; return literal(ps, "false");
    case 'n': v->type = LT_JSON_NULL; return literal(ps, "null");
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps, v);
        return fail(ps, "unexpected character '%c'", *ps->p);
    }
}

static void free_kids(LtJson *v) {
    for (int i = 0; i < v->n; i++) {
        free_kids(&v->kids[i]);
        free(v->kids[i].key);
        free(v->kids[i].text);
    }
    free(v->kids);
}

void lt_json_free(LtJson *v) {
    if (!v) return;
    free_kids(v);
    free(v->text);
    free(v);
}

LtJson *lt_json_parse(const char *text, size_t len, const char *what, char *err, size_t errlen) {
    Parser ps = {text, text, text + len, what ? what : "JSON", err, errlen, 0};
    LtJson *v = calloc(1, sizeof *v);
    if (!v) {
        lt_errorf(err, errlen, "%s: out of memory", ps.what);
        return NULL;
    }
    if (parse_value(&ps, v, 1) == 0) {
        skip_ws(&ps);
        if (ps.p == ps.end) return v;
        fail(&ps, "trailing characters after the value");
    }
    lt_json_free(v);
    return NULL;
}

const LtJson *lt_json_get(const LtJson *v, const char *key) {
    if (!v || v->type != LT_JSON_OBJECT) return NULL;
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->kids[i].key, key) == 0) return &v->kids[i];
    return NULL;
}

int lt_json_u64(const LtJson *v, uint64_t *out) {
    if (!v || v->type != LT_JSON_NUMBER) return -1;
    uint64_t x = 0;
    for (const char *p = v->text; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        const unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10) return -1;
        x = x * 10 + d;
    }
    *out = x;
    return 0;
}

int lt_json_double(const LtJson *v, double *out) {
    if (!v || v->type != LT_JSON_NUMBER) return -1;
    errno = 0;
    char *end;
    double x = strtod(v->text, &end);
    if (*end || !isfinite(x) || (errno == ERANGE && x != 0)) return -1;
    *out = x;
    return 0;
}

const char *lt_json_type_name(LtJsonType t) {
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array",
                                        "an object"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}
