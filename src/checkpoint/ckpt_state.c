/* ckpt_state.c - checkpoint state files (see ckpt_state.h).
 *
 * A state file (format version 3; versions 1 and 2, whole tensors with one
 * CRC each, are still read) is a 64-byte header "LTSTATE\0", 256-byte records
 * (one per piece), the block CRCs and the fp32 data: the byte layout is in
 * docs/formats.md ("Checkpoint state files"), the one description of it.
 *
 * A piece is a rectangle of the global tensor; the pieces of all files of a
 * checkpoint cover every element of every tensor exactly once (rows of the
 * padded vocabulary beyond the true vocabulary may be absent and read as
 * zero). A reader needing part of a tensor reads just the blocks that hold
 * it, each checked against its CRC. */
#include "ckpt_state.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fileio.h"

#define STATE_MAGIC "LTSTATE" /* 8 bytes with its NUL */
#define STATE_VERSION 3u
#define HDR_BYTES 64
#define REC2_BYTES 192 /* versions 1 and 2 */
#define REC_BYTES 256
#define REC_NAME 128
#define DATA_ALIGN 64
#define DTYPE_F32 1u
#define CRC_BLOCK (1u << 20)
#define MAX_RECORDS (1u << 22)

const char *const lt_ckpt_kind_name[LT_CKPT_KINDS] = {"param", "adam_m", "adam_v"};

typedef struct {
    char name[REC_NAME];
    uint32_t ndim;
    int64_t gshape[2], start[2], count[2];
    uint64_t offset, nbytes;
    uint64_t crc_offset;  /* version 3: the block CRCs */
    uint64_t block;       /* bytes per CRC block; version <= 2: one block of nbytes, CRC in crc1 */
    uint32_t nblocks;
    uint32_t crc1;
    uint32_t *crcs;       /* nblocks CRCs (points into the file's crc table, or at crc1) */
} Piece;

struct LtStateFile {
    char path[PATH_MAX];
    Piece *pc;  /* sorted by name, then first row, then first column */
    uint32_t n;
    uint32_t *crcs;
    size_t crc_bytes;   /* of crcs */
    size_t index_bytes; /* pc and crcs */
};

/* ---- counted host memory ------------------------------------------------- */

static size_t g_mem_cur, g_mem_peak;

void lt_ckpt_mem_count(size_t n) {
    size_t cur = __atomic_add_fetch(&g_mem_cur, n, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&g_mem_peak, __ATOMIC_RELAXED);
    while (cur > peak &&
           !__atomic_compare_exchange_n(&g_mem_peak, &peak, cur, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void lt_ckpt_mem_uncount(size_t n) { __atomic_sub_fetch(&g_mem_cur, n, __ATOMIC_RELAXED); }

void *lt_ckpt_mem_alloc(size_t n) {
    void *p = lt_malloc(n ? n : 1);
    lt_ckpt_mem_count(n);
    return p;
}

void lt_ckpt_mem_free(void *p, size_t n) {
    if (!p) return;
    lt_ckpt_mem_uncount(n);
    free(p);
}

void lt_ckpt_mem_reset_peak(void) {
    __atomic_store_n(&g_mem_peak, __atomic_load_n(&g_mem_cur, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

size_t lt_ckpt_mem_peak(void) { return __atomic_load_n(&g_mem_peak, __ATOMIC_RELAXED); }

/* ---- little-endian fields ------------------------------------------------ */

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

/* ---- writing ------------------------------------------------------------- */

static void encode_rec(unsigned char *b, const Piece *r) {
    memset(b, 0, REC_BYTES);
    memcpy(b, r->name, strlen(r->name));
    put_u32(b + 128, DTYPE_F32);
    put_u32(b + 132, r->ndim);
    for (int d = 0; d < 2; d++) {
        put_u64(b + 136 + 8 * d, (uint64_t)r->gshape[d]);
        put_u64(b + 152 + 8 * d, (uint64_t)r->start[d]);
        put_u64(b + 168 + 8 * d, (uint64_t)r->count[d]);
    }
    put_u64(b + 184, r->offset);
    put_u64(b + 192, r->nbytes);
    put_u64(b + 200, r->crc_offset);
    put_u32(b + 208, (uint32_t)r->block);
    put_u32(b + 212, r->nblocks);
}

/* A growing list of pieces and their data pointers. */
typedef struct {
    Piece *pc;
    const float **dp;
    uint32_t n, cap;
} PieceList;

/* Append the pieces of kind k of one source. */
static void add_pieces(PieceList *l, const LtStateSrc *src, int k) {
    const LtParamTable *t = src->t;
    for (int i = 0; i < t->n; i++) {
        const LtParam *p = &t->p[i];
        if (p->tied_copy || (p->split == LT_SPLIT_NONE && !src->with_replicated)) continue;
        size_t a = p->offset > src->lo ? p->offset : src->lo;
        size_t b = p->offset + p->numel < src->hi ? p->offset + p->numel : src->hi;
        if (a >= b) continue;
        LtRect rc[LT_MAX_RECTS];
        const int nr = lt_param_rects(t, p, a - p->offset, b - p->offset, rc);
        for (int j = 0; j < nr; j++) {
            if (l->n == l->cap) {
                l->cap *= 2;
                l->pc = realloc(l->pc, sizeof(Piece) * l->cap);
                l->dp = realloc(l->dp, sizeof(float *) * l->cap);
                if (!l->pc || !l->dp) lt_fatal("out of memory planning a checkpoint file");
            }
            Piece *q = &l->pc[l->n];
            memset(q, 0, sizeof *q);
            snprintf(q->name, sizeof q->name, "%s/%s", lt_ckpt_kind_name[k], p->name);
            q->ndim = (uint32_t)p->ndim;
            q->gshape[0] = p->gshape[0];
            q->gshape[1] = p->ndim == 2 ? p->gshape[1] : 1;
            q->start[0] = rc[j].r0, q->start[1] = rc[j].c0;
            q->count[0] = rc[j].nr, q->count[1] = rc[j].nc;
            q->nbytes = 4 * (uint64_t)(rc[j].nr * rc[j].nc);
            q->block = CRC_BLOCK;
            q->nblocks = (uint32_t)((q->nbytes + CRC_BLOCK - 1) / CRC_BLOCK);
            l->dp[l->n++] = src->arr[k] + (p->offset + rc[j].local - src->lo);
        }
    }
}

/* The pieces of src and the sources it chains, kind by kind, with their data
 * pointers; offsets assigned from the table's end. */
static Piece *plan_pieces(const LtStateSrc *src, const float ***data, uint32_t *np,
                          uint64_t *data_start) {
    PieceList l = {lt_calloc(sizeof(Piece) * 64), lt_calloc(sizeof(float *) * 64), 0, 64};
    for (int k = 0; k < LT_CKPT_KINDS; k++)
        for (const LtStateSrc *s = src; s; s = s->next)
            if (s->arr[k]) add_pieces(&l, s, k);
    Piece *pc = l.pc;
    const uint32_t n = l.n;
    uint64_t crc_off = HDR_BYTES + (uint64_t)REC_BYTES * n;
    for (uint32_t i = 0; i < n; i++) {
        pc[i].crc_offset = crc_off;
        crc_off += 4 * (uint64_t)pc[i].nblocks;
    }
    uint64_t off = align_up(crc_off);
    *data_start = off;
    for (uint32_t i = 0; i < n; i++) {
        pc[i].offset = off;
        off = align_up(off + pc[i].nbytes);
    }
    *data = l.dp;
    *np = n;
    return pc;
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

/* Write piece q's data x through buf (cap bytes, a multiple of CRC_BLOCK),
 * putting its block CRCs at crcs (little-endian u32s). */
static int write_piece(FILE *f, const Piece *q, const float *x, unsigned char *buf, size_t cap,
                       unsigned char *crcs, const char *path, char *err, size_t errlen) {
    for (uint64_t done = 0; done < q->nbytes;) {
        const size_t k = q->nbytes - done < cap ? (size_t)(q->nbytes - done) : cap;
        const float *s = x + done / 4;
        for (size_t j = 0; j < k / 4; j++) {
            uint32_t u;
            memcpy(&u, &s[j], 4);
            put_u32(buf + 4 * j, u);
        }
        for (size_t o = 0; o < k; o += CRC_BLOCK)
            put_u32(crcs + 4 * ((done + o) / CRC_BLOCK),
                    lt_crc32(0, buf + o, k - o < CRC_BLOCK ? k - o : CRC_BLOCK));
        if (fwrite(buf, 1, k, f) != k)
            return lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
        done += k;
    }
    return 0;
}

int lt_state_write(const char *path, const LtStateSrc *src, size_t io_bytes, uint64_t *bytes,
                   uint32_t *crc, char *err, size_t errlen) {
    const float **data;
    uint32_t n;
    uint64_t data_start;
    Piece *pc = plan_pieces(src, &data, &n, &data_start);
    /* a multiple of the CRC block, or (when smaller) a whole piece at a time */
    size_t cap = io_bytes < CRC_BLOCK ? CRC_BLOCK : io_bytes / CRC_BLOCK * CRC_BLOCK;
    uint64_t largest = 4;
    for (uint32_t i = 0; i < n; i++) largest = pc[i].nbytes > largest ? pc[i].nbytes : largest;
    if (largest < cap) cap = (size_t)largest;
    const size_t head_bytes = (size_t)data_start;
    unsigned char *buf = lt_ckpt_mem_alloc(cap), *head = lt_ckpt_mem_alloc(head_bytes);
    memset(head, 0, head_bytes);
    int rc = -1;
    uint64_t end = data_start;
    FILE *f = fopen(path, "wb");
    if (!f) {
        lt_errorf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        goto done;
    }
    /* zeros stand in for the header, the table and the CRCs until they are known */
    if (write_zeros(f, data_start, path, err, errlen)) goto close;
    for (uint32_t i = 0; i < n; i++) {
        if (write_zeros(f, pc[i].offset - end, path, err, errlen) ||
            write_piece(f, &pc[i], data[i], buf, cap, head + pc[i].crc_offset, path, err, errlen))
            goto close;
        end = pc[i].offset + pc[i].nbytes;
    }
    for (uint32_t i = 0; i < n; i++) encode_rec(head + HDR_BYTES + (size_t)REC_BYTES * i, &pc[i]);
    memcpy(head, STATE_MAGIC, 8);
    put_u32(head + 8, STATE_VERSION);
    put_u32(head + 12, n);
    put_u64(head + 16, data_start);
    put_u64(head + 24, end);
    put_u32(head + 32, lt_crc32(0, head + HDR_BYTES, head_bytes - HDR_BYTES));
    put_u32(head + 36, lt_crc32(0, head, 36));
    if (fseeko(f, 0, SEEK_SET) != 0 || fwrite(head, 1, head_bytes, f) != head_bytes) {
        lt_errorf(err, errlen, "error writing %s: %s", path, strerror(errno));
        goto close;
    }
    rc = lt_file_commit(f, path, err, errlen);
    f = NULL;
    if (rc == 0) {
        *bytes = end;
        *crc = get_u32(head + 36);
    }
close:
    if (f) fclose(f);
done:
    lt_ckpt_mem_free(buf, cap);
    lt_ckpt_mem_free(head, head_bytes);
    free(pc);
    free(data);
    return rc;
}

/* ---- reading ------------------------------------------------------------- */

static int piece_cmp(const void *a, const void *b) {
    const Piece *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if (x->start[0] != y->start[0]) return x->start[0] < y->start[0] ? -1 : 1;
    return x->start[1] < y->start[1] ? -1 : x->start[1] > y->start[1];
}

static void decode_rec(const unsigned char *b, uint32_t version, Piece *r) {
    memset(r, 0, sizeof *r);
    memcpy(r->name, b, REC_NAME);
    r->name[REC_NAME - 1] = '\0';
    r->ndim = get_u32(b + 132);
    if (version <= 2) { /* a whole tensor of up to 4 dims: viewed as rows x (the rest) */
        int64_t shape[4];
        for (int i = 0; i < 4; i++) shape[i] = (int64_t)get_u64(b + 136 + 8 * i);
        r->gshape[0] = shape[0];
        r->gshape[1] = 1;
        for (uint32_t d = 1; d < r->ndim && d < 4; d++) r->gshape[1] *= shape[d];
        r->count[0] = r->gshape[0], r->count[1] = r->gshape[1];
        r->offset = get_u64(b + 168);
        r->nbytes = get_u64(b + 176);
        r->crc1 = get_u32(b + 184);
        r->block = 0; /* one block: the whole tensor */
        r->nblocks = 1;
        return;
    }
    for (int d = 0; d < 2; d++) {
        r->gshape[d] = (int64_t)get_u64(b + 136 + 8 * d);
        r->start[d] = (int64_t)get_u64(b + 152 + 8 * d);
        r->count[d] = (int64_t)get_u64(b + 168 + 8 * d);
    }
    r->offset = get_u64(b + 184);
    r->nbytes = get_u64(b + 192);
    r->crc_offset = get_u64(b + 200);
    r->block = get_u32(b + 208);
    r->nblocks = get_u32(b + 212);
}

/* Whether a decoded record is consistent with itself and the file. */
static int rec_ok(const Piece *r, uint32_t version, const unsigned char *raw, uint64_t data_start,
                  uint64_t file_size, uint64_t crc_lo, uint64_t crc_hi) {
    static const unsigned char zero[40];
    if (get_u32(raw + 128) != DTYPE_F32) return 0;
    if (version <= 2) {
        if (r->ndim < 1 || r->ndim > 4) return 0;
        uint64_t numel = 1;
        for (uint32_t d = 0; d < r->ndim; d++) {
            int64_t s = (int64_t)get_u64(raw + 136 + 8 * d);
            if (s < 0 || (s > 0 && numel > UINT64_MAX / 4 / (uint64_t)s)) return 0;
            numel *= (uint64_t)s;
        }
        return r->nbytes == 4 * numel && r->offset >= data_start && r->offset <= file_size &&
               r->nbytes <= file_size - r->offset;
    }
    if (r->ndim < 1 || r->ndim > 2 || memcmp(raw + 216, zero, 40) != 0) return 0;
    for (int d = 0; d < 2; d++)
        if (r->gshape[d] < 1 || r->gshape[d] > (INT64_C(1) << 40) || r->start[d] < 0 ||
            r->count[d] < 1 || r->start[d] > r->gshape[d] - r->count[d])
            return 0;
    if (r->ndim == 1 && r->gshape[1] != 1) return 0;
    if ((uint64_t)r->count[0] > (UINT64_MAX / 4) / (uint64_t)r->count[1]) return 0;
    if (r->nbytes != 4 * (uint64_t)r->count[0] * (uint64_t)r->count[1]) return 0;
    if (r->block == 0 || r->block % 4 || r->nblocks != (r->nbytes + r->block - 1) / r->block) return 0;
    return r->offset >= data_start && r->offset <= file_size && r->nbytes <= file_size - r->offset &&
           r->crc_offset >= crc_lo && r->crc_offset <= crc_hi && (r->crc_offset - crc_lo) % 4 == 0 &&
           4 * (uint64_t)r->nblocks <= crc_hi - r->crc_offset;
}

LtStateFile *lt_state_open(const char *path, uint64_t want_bytes, uint32_t want_crc, char *err,
                           size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        lt_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    LtStateFile *sf = lt_calloc(sizeof *sf);
    snprintf(sf->path, sizeof sf->path, "%s", path);
    unsigned char h[HDR_BYTES], *tab = NULL;
    size_t tab_bytes = 0;
    struct stat st;
    int ok = 0;
    if (fstat(fileno(f), &st) != 0) {
        lt_errorf(err, errlen, "cannot stat %s: %s", path, strerror(errno));
        goto out;
    }
    const uint64_t size = (uint64_t)st.st_size;
    if (want_bytes && size != want_bytes) {
        lt_errorf(err, errlen, "%s is %" PRIu64 " bytes, meta.json says %" PRIu64
                  " (truncated or replaced)", path, size, want_bytes);
        goto out;
    }
    if (fread(h, 1, HDR_BYTES, f) != HDR_BYTES) {
        lt_errorf(err, errlen, "%s is truncated (%" PRIu64 " bytes, shorter than its header)", path, size);
        goto out;
    }
    if (memcmp(h, STATE_MAGIC, 8) != 0) {
        lt_errorf(err, errlen, "%s is not a lattice state file (bad magic)", path);
        goto out;
    }
    const uint32_t version = get_u32(h + 8), n = get_u32(h + 12);
    const uint64_t data_start = get_u64(h + 16), file_size = get_u64(h + 24);
    if (version < 1 || version > STATE_VERSION) {
        lt_errorf(err, errlen, "%s has format version %u; this build reads versions 1 to %u", path,
                  version, STATE_VERSION);
        goto out;
    }
    static const unsigned char zero[HDR_BYTES];
    const int hdr_end = version >= 2 ? 40 : 36;
    if ((version >= 2 && get_u32(h + 36) != lt_crc32(0, h, 36)) ||
        memcmp(h + hdr_end, zero, HDR_BYTES - hdr_end) != 0) {
        lt_errorf(err, errlen, "%s has a corrupt header (CRC mismatch or reserved bytes set)", path);
        goto out;
    }
    if (want_bytes && get_u32(h + 36) != want_crc) {
        lt_errorf(err, errlen, "%s does not match meta.json (header CRC %u, meta.json says %u): "
                  "a file of another save", path, (unsigned)get_u32(h + 36), (unsigned)want_crc);
        goto out;
    }
    const size_t rec = version <= 2 ? REC2_BYTES : REC_BYTES;
    const uint64_t tab_end = version <= 2 ? HDR_BYTES + (uint64_t)rec * n : data_start;
    if (n > MAX_RECORDS || data_start < HDR_BYTES + (uint64_t)rec * n || file_size < data_start ||
        data_start - HDR_BYTES > ((uint64_t)1 << 34)) {
        lt_errorf(err, errlen, "%s has a corrupt header", path);
        goto out;
    }
    if (size != file_size) {
        lt_errorf(err, errlen, "%s is %s: %" PRIu64 " bytes, the header says %" PRIu64, path,
                  size < file_size ? "truncated" : "corrupt", size, file_size);
        goto out;
    }
    tab_bytes = (size_t)(tab_end - HDR_BYTES);
    tab = lt_ckpt_mem_alloc(tab_bytes);
    if (fread(tab, 1, tab_bytes, f) != tab_bytes) {
        lt_errorf(err, errlen, "error reading %s: %s", path, strerror(errno));
        goto out;
    }
    if (lt_crc32(0, tab, tab_bytes) != get_u32(h + 32)) {
        lt_errorf(err, errlen, "record table of %s is corrupt (CRC mismatch)", path);
        goto out;
    }
    sf->n = n;
    sf->index_bytes = sizeof(Piece) * (n ? n : 1);
    sf->pc = lt_ckpt_mem_alloc(sf->index_bytes);
    memset(sf->pc, 0, sf->index_bytes);
    const uint64_t crc_lo = HDR_BYTES + (uint64_t)rec * n;
    for (uint32_t i = 0; i < n; i++) {
        Piece *r = &sf->pc[i];
        decode_rec(tab + rec * i, version, r);
        if (!rec_ok(r, version, tab + rec * i, data_start, file_size, crc_lo, tab_end)) {
            lt_errorf(err, errlen, "%s: record '%s' is corrupt", path, r->name);
            goto out;
        }
        if (version <= 2) {
            r->block = r->nbytes ? r->nbytes : 1;
            r->crcs = &r->crc1;
        }
    }
    if (version >= 3) { /* keep the block CRCs, decoded */
        const size_t ncrc = (size_t)(tab_end - crc_lo) / 4;
        sf->crc_bytes = 4 * (ncrc ? ncrc : 1);
        sf->crcs = lt_ckpt_mem_alloc(sf->crc_bytes);
        for (size_t i = 0; i < ncrc; i++) sf->crcs[i] = get_u32(tab + (crc_lo - HDR_BYTES) + 4 * i);
        sf->index_bytes += sf->crc_bytes;
        for (uint32_t i = 0; i < n; i++)
            sf->pc[i].crcs = sf->crcs + (sf->pc[i].crc_offset - crc_lo) / 4;
    }
    qsort(sf->pc, n, sizeof(Piece), piece_cmp);
    for (uint32_t i = 1; i < n; i++)
        if (piece_cmp(&sf->pc[i - 1], &sf->pc[i]) == 0) {
            lt_errorf(err, errlen, "%s: tensor '%s' appears twice", path, sf->pc[i].name);
            goto out;
        }
    ok = 1;
out:
    if (tab) lt_ckpt_mem_free(tab, tab_bytes);
    fclose(f);
    if (!ok) {
        lt_state_close(sf);
        return NULL;
    }
    return sf;
}

void lt_state_close(LtStateFile *f) {
    if (!f) return;
    if (f->pc) lt_ckpt_mem_free(f->pc, f->index_bytes - f->crc_bytes);
    lt_ckpt_mem_free(f->crcs, f->crc_bytes);
    free(f);
}

int lt_state_header(const char *path, uint64_t *bytes, uint32_t *crc, char *err, size_t errlen) {
    unsigned char h[HDR_BYTES];
    struct stat st;
    FILE *f = fopen(path, "rb");
    const int ok = f && fstat(fileno(f), &st) == 0 && fread(h, 1, HDR_BYTES, f) == HDR_BYTES;
    if (f) fclose(f);
    if (!ok) return lt_errorf(err, errlen, "state file %s is missing or unreadable", path);
    if (memcmp(h, STATE_MAGIC, 8) != 0 || get_u32(h + 36) != lt_crc32(0, h, 36) ||
        get_u64(h + 24) != (uint64_t)st.st_size)
        return lt_errorf(err, errlen, "state file %s has a corrupt header or is truncated", path);
    *bytes = (uint64_t)st.st_size;
    *crc = get_u32(h + 36);
    return 0;
}

/* The first piece of tensor `name` (pieces are sorted by name), or n. */
static uint32_t first_piece(const LtStateFile *f, const char *name) {
    uint32_t lo = 0, hi = f->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (strcmp(f->pc[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int lt_state_shape(const LtStateFile *f, const char *name, int64_t shape[2]) {
    uint32_t i = first_piece(f, name);
    if (i >= f->n || strcmp(f->pc[i].name, name) != 0) return -1;
    shape[0] = f->pc[i].gshape[0];
    shape[1] = f->pc[i].gshape[1];
    return 0;
}

/* Copy the elements of the intersection `in` that piece elements [e0, e1)
 * hold (their bytes at b) into dst, laid out as `want`. */
static void copy_out(const Piece *q, const LtRect *in, const LtRect *want, uint64_t e0, uint64_t e1,
                     const unsigned char *b, float *dst) {
    const int64_t pc = q->count[1];
    int64_t r_lo = q->start[0] + (int64_t)(e0 / (uint64_t)pc);
    int64_t r_hi = q->start[0] + (int64_t)((e1 - 1) / (uint64_t)pc) + 1;
    if (r_lo < in->r0) r_lo = in->r0;
    if (r_hi > in->r0 + in->nr) r_hi = in->r0 + in->nr;
    for (int64_t r = r_lo; r < r_hi; r++) {
        uint64_t s = (uint64_t)((r - q->start[0]) * pc + (in->c0 - q->start[1]));
        uint64_t e = s + (uint64_t)in->nc;
        const uint64_t s0 = s;
        if (s < e0) s = e0;
        if (e > e1) e = e1;
        float *d = dst + (r - want->r0) * want->nc + (in->c0 - want->c0) + (int64_t)(s - s0);
        for (uint64_t i = s; i < e; i++) {
            uint32_t u = get_u32(b + 4 * (i - e0));
            memcpy(d++, &u, 4);
        }
    }
}

/* Read the blocks of piece q that hold the intersection `in`, check them and
 * copy the intersection out. */
static int read_piece(const LtStateFile *f, FILE *fp, const Piece *q, const LtRect *in,
                      const LtRect *want, float *dst, unsigned char *buf, size_t cap, char *err,
                      size_t errlen) {
    const uint64_t pc = (uint64_t)q->count[1];
    const uint64_t first = ((uint64_t)(in->r0 - q->start[0]) * pc + (uint64_t)(in->c0 - q->start[1])) * 4;
    const uint64_t last = ((uint64_t)(in->r0 + in->nr - 1 - q->start[0]) * pc +
                           (uint64_t)(in->c0 + in->nc - q->start[1])) * 4; /* one past */
    cap = cap / 4 * 4;
    for (uint64_t blk = first / q->block; blk * q->block < last; blk++) {
        const uint64_t b0 = blk * q->block;
        const uint64_t b1 = b0 + q->block < q->nbytes ? b0 + q->block : q->nbytes;
        uint32_t crc = 0;
        for (uint64_t o = b0; o < b1;) {
            const size_t k = b1 - o < cap ? (size_t)(b1 - o) : cap;
            if (fseeko(fp, (off_t)(q->offset + o), SEEK_SET) != 0 || fread(buf, 1, k, fp) != k)
                return lt_errorf(err, errlen, "error reading tensor '%s' from %s", q->name, f->path);
            crc = lt_crc32(crc, buf, k);
            copy_out(q, in, want, o / 4, (o + k) / 4, buf, dst);
            o += k;
        }
        if (crc != q->crcs[blk])
            return lt_errorf(err, errlen, "checksum mismatch for tensor '%s' in %s at bytes %" PRIu64
                             "..%" PRIu64 " of its data (file corrupt)", q->name, f->path, b0, b1);
    }
    return 0;
}

int lt_state_read(const LtStateFile *f, const char *name, const LtRect *want, float *dst,
                  unsigned char *buf, size_t buf_bytes, uint64_t *covered, char *err,
                  size_t errlen) {
    FILE *fp = NULL;
    int rc = 0;
    for (uint32_t i = first_piece(f, name); rc == 0 && i < f->n && !strcmp(f->pc[i].name, name); i++) {
        const Piece *q = &f->pc[i];
        LtRect in;
        in.r0 = q->start[0] > want->r0 ? q->start[0] : want->r0;
        in.c0 = q->start[1] > want->c0 ? q->start[1] : want->c0;
        int64_t r1 = q->start[0] + q->count[0], c1 = q->start[1] + q->count[1];
        if (r1 > want->r0 + want->nr) r1 = want->r0 + want->nr;
        if (c1 > want->c0 + want->nc) c1 = want->c0 + want->nc;
        in.nr = r1 - in.r0;
        in.nc = c1 - in.c0;
        if (in.nr <= 0 || in.nc <= 0) continue;
        if (!fp && !(fp = fopen(f->path, "rb")))
            return lt_errorf(err, errlen, "cannot open %s: %s", f->path, strerror(errno));
        rc = read_piece(f, fp, q, &in, want, dst, buf, buf_bytes, err, errlen);
        *covered += (uint64_t)(in.nr * in.nc);
    }
    if (fp) fclose(fp);
    return rc;
}
