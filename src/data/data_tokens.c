/* data_tokens.c - token file readers (lattice shard, llm.c .bin, Megatron-LM
 * indexed dataset) and the streaming lattice shard writer. See data.h.
 *
 * The formats (lattice shard ".ltok" version 1: a 64-byte header, zstd
 * blocks of B tokens, an index with a CRC-32 per block; llm.c .bin; Megatron
 * .bin/.idx) are described byte by byte in docs/formats.md ("Token files").
 *
 * Validation at open: magic, version, dtype (2 or 4, consistent with the
 * vocab), header CRC, block count vs token count, file size vs index, index
 * CRC, and the index entries being contiguous and inside [64, index_offset).
 * On read: block CRC, decompressed size, token ids < the limit.
 *
 * Random access decompresses only the blocks a read touches. Each reader
 * keeps the last decoded (and validated) block; the cache, the compressed
 * buffer and the zstd context are guarded by a mutex so the loader thread and
 * the main thread may read concurrently. llm.c and Megatron files are read
 * with pread and keep no mutable state.
 *
 * Token id limit: ids must be < vocab_size (the open argument). A vocab_size
 * <= 0 means "no external vocabulary": the limit is then the header vocab
 * (lattice), 65536 (llm.c), or the dtype range capped at 2^31-1 (Megatron). */
#include "data.h"

#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define SHARD_MAGIC "LTSHARD\x1a"
#define SHARD_VERSION 1u
#define SHARD_HEADER_BYTES 64
#define SHARD_INDEX_ENTRY 16
#define SHARD_DEFAULT_BLOCK 65536
#define SHARD_MAX_BLOCK (1 << 24)
#define SHARD_DEFAULT_LEVEL 3

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_BYTES 1024

#define MEGATRON_MAGIC "MMIDIDX\x00\x00"
#define MEGATRON_HEADER_BYTES 34 /* magic 9, version 8, dtype 1, counts 8 + 8 */

/* Files up to this size have all token ids checked at open (uncompressed formats). */
#define SCAN_AT_OPEN_BYTES (64ull << 20)

typedef enum { FMT_LATTICE, FMT_LLMC, FMT_MEGATRON } Format;

struct LtTokenFile {
    Format fmt;
    char *path; /* as given to lt_tokens_open */
    int fd;     /* lattice / llm.c: the file; Megatron: the .bin */
    uint64_t ntokens;
    int64_t limit;    /* token ids must be < limit */
    int header_vocab; /* lattice: header vocab_size; others: 0 */

    /* lattice */
    uint32_t width, block_tokens;
    uint64_t nblocks;
    uint64_t *blk_off;
    uint32_t *blk_csize, *blk_crc;
    pthread_mutex_t lock; /* guards everything below */
    ZSTD_DCtx *dctx;
    void *cbuf;
    size_t cbuf_cap;
    uint8_t *dbuf;        /* decompressed bytes of one block */
    int32_t *cache;       /* decoded tokens of block cached_block */
    int64_t cached_block; /* -1: none */

    /* Megatron */
    char *bin_path;
    int elem; /* bytes per token */
    int dtype_code;
    uint64_t nseq;
    uint64_t *seq_start; /* [nseq+1] prefix sums of sequence sizes (token positions) */
    uint64_t *seq_ptr;   /* [nseq] byte offsets into the .bin */
    uint64_t ndoc;       /* documents (the index's document entries less one) */
    uint64_t *doc_start; /* [ndoc+1] token position where each document starts, then the end */
};

/* ---- small helpers ------------------------------------------------------- */

/* Like lt_errorf, but returns NULL: for the many validation exits of open. */
static void *err_null(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void *err_null(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return NULL;
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = lt_malloc(n);
    memcpy(d, s, n);
    return d;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Read exactly n bytes at off. Returns 0; -1 with errno set on an I/O error;
 * -2 when the file ends first. */
static int pread_full(int fd, void *buf, size_t n, uint64_t off) {
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) return -2;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Message for a failed pread_full of `what`. */
static void read_fail(const char *path, int rc, const char *what, uint64_t off, char *err,
                      size_t errlen) {
    if (rc == -2)
        lt_errorf(err, errlen, "'%s': unexpected end of file reading %s at offset %llu (truncated?)",
                path, what, (unsigned long long)off);
    else
        lt_errorf(err, errlen, "'%s': read error on %s at offset %llu: %s", path, what,
                (unsigned long long)off, strerror(errno));
}

static LtTokenFile *file_new(Format fmt, const char *path) {
    LtTokenFile *f = lt_calloc(sizeof *f);
    f->fmt = fmt;
    f->path = dup_str(path);
    f->fd = -1;
    f->cached_block = -1;
    return f;
}

void lt_tokens_close(LtTokenFile *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->fmt == FMT_LATTICE) {
        pthread_mutex_destroy(&f->lock);
        ZSTD_freeDCtx(f->dctx);
    }
    free(f->blk_off);
    free(f->blk_csize);
    free(f->doc_start);
    free(f->blk_crc);
    free(f->cbuf);
    free(f->dbuf);
    free(f->cache);
    free(f->seq_start);
    free(f->seq_ptr);
    free(f->bin_path);
    free(f->path);
    free(f);
}

uint64_t lt_tokens_count(const LtTokenFile *f) { return f->ntokens; }

int lt_tokens_documents(LtTokenFile *f, int32_t eod, uint64_t **starts, uint64_t *ndocs,
                        char *err, size_t errlen) {
    if (f->fmt == FMT_MEGATRON) {
        *ndocs = f->ndoc;
        *starts = lt_malloc((f->ndoc + 1) * sizeof **starts);
        memcpy(*starts, f->doc_start, (f->ndoc + 1) * sizeof **starts);
        return 0;
    }
    if (eod < 0)
        return lt_errorf(err, errlen, "'%s' (%s format) keeps no document index: documents are "
                         "told apart by data.eod_token, which is not set", f->path,
                         lt_tokens_format(f));
    enum { CHUNK = 1 << 20 };
    int32_t *buf = lt_malloc(CHUNK * sizeof *buf);
    size_t cap = 1024, n = 0;
    uint64_t *s = lt_malloc(cap * sizeof *s);
    s[n++] = 0;
    for (uint64_t at = 0; at < f->ntokens; at += CHUNK) {
        const uint64_t k = f->ntokens - at < CHUNK ? f->ntokens - at : CHUNK;
        if (lt_tokens_read(f, at, k, buf, err, errlen)) {
            free(buf), free(s);
            return -1;
        }
        for (uint64_t i = 0; i < k; i++) {
            if (buf[i] != eod || at + i + 1 == f->ntokens) continue;
            if (n == cap) {
                uint64_t *grown = lt_malloc(2 * cap * sizeof *grown);
                memcpy(grown, s, cap * sizeof *s);
                free(s);
                s = grown;
                cap *= 2;
            }
            s[n++] = at + i + 1; /* the next document starts after the EOD */
        }
    }
    free(buf);
    if (n == cap) {
        uint64_t *grown = lt_malloc((cap + 1) * sizeof *grown);
        memcpy(grown, s, cap * sizeof *s);
        free(s);
        s = grown;
    }
    s[n] = f->ntokens;
    *starts = s;
    *ndocs = f->ntokens ? n : 0;
    return 0;
}
const char *lt_tokens_path(const LtTokenFile *f) { return f->path; }
int lt_tokens_vocab_size(const LtTokenFile *f) { return f->header_vocab; }

const char *lt_tokens_format(const LtTokenFile *f) {
    switch (f->fmt) {
    case FMT_LATTICE: return "lattice";
    case FMT_LLMC: return "llm.c";
    case FMT_MEGATRON: return "megatron";
    }
    return "?";
}

/* Check ids[0..n) against the limit; `pos` is the stream position of ids[0]. */
static int check_ids(const LtTokenFile *f, const int64_t *ids, size_t n, uint64_t pos, char *err,
                     size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= f->limit)
            return lt_errorf(
                err, errlen, "'%s': token id %lld at position %llu is out of range [0, %lld)",
                f->path, (long long)ids[i], (unsigned long long)(pos + i), (long long)f->limit);
    }
    return 0;
}

/* ---- lattice shards ------------------------------------------------------- */

/* Decode block b into f->cache (caller holds f->lock). */
static int lattice_load_block(LtTokenFile *f, uint64_t b, char *err, size_t errlen) {
    uint64_t first = b * f->block_tokens;
    uint64_t ntok = f->ntokens - first < f->block_tokens ? f->ntokens - first : f->block_tokens;
    size_t raw = (size_t)ntok * f->width, csize = f->blk_csize[b];
    f->cached_block = -1;
    if (csize > f->cbuf_cap) {
        free(f->cbuf);
        f->cbuf = lt_malloc(csize);
        f->cbuf_cap = csize;
    }
    int rc = pread_full(f->fd, f->cbuf, csize, f->blk_off[b]);
    if (rc) {
        read_fail(f->path, rc, "a block", f->blk_off[b], err, errlen);
        return -1;
    }
    size_t got = ZSTD_decompressDCtx(f->dctx, f->dbuf, raw, f->cbuf, csize);
    if (ZSTD_isError(got))
        return lt_errorf(err, errlen, "'%s': block %llu does not decompress: %s", f->path,
                       (unsigned long long)b, ZSTD_getErrorName(got));
    if (got != raw)
        return lt_errorf(err, errlen, "'%s': block %llu decompressed to %zu bytes, expected %zu",
                       f->path, (unsigned long long)b, got, raw);
    uint32_t crc = lt_crc32(0, f->dbuf, raw);
    if (crc != f->blk_crc[b])
        return lt_errorf(err, errlen,
                       "'%s': block %llu checksum mismatch (stored %08x, computed %08x)", f->path,
                       (unsigned long long)b, f->blk_crc[b], crc);
    for (uint64_t i = 0; i < ntok; i++) {
        const uint8_t *p = f->dbuf + i * f->width;
        int64_t id = f->width == 2 ? (int64_t)(p[0] | p[1] << 8) : (int64_t)get_u32(p);
        if (id >= f->limit)
            return lt_errorf(
                err, errlen, "'%s': token id %lld at position %llu is out of range [0, %lld)",
                f->path, (long long)id, (unsigned long long)(first + i), (long long)f->limit);
        f->cache[i] = (int32_t)id;
    }
    f->cached_block = (int64_t)b;
    return 0;
}

static int lattice_read(LtTokenFile *f, uint64_t start, uint64_t n, int32_t *out, char *err,
                        size_t errlen) {
    int rc = 0;
    pthread_mutex_lock(&f->lock);
    while (n > 0) {
        uint64_t b = start / f->block_tokens, in = start % f->block_tokens;
        if (f->cached_block != (int64_t)b && lattice_load_block(f, b, err, errlen)) {
            rc = -1;
            break;
        }
        uint64_t first = b * f->block_tokens;
        uint64_t blen = f->ntokens - first < f->block_tokens ? f->ntokens - first : f->block_tokens;
        uint64_t take = blen - in < n ? blen - in : n;
        memcpy(out, f->cache + in, (size_t)take * sizeof *out);
        out += take;
        start += take;
        n -= take;
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static LtTokenFile *open_lattice(int fd, const char *path, uint64_t fsize, int vocab_size,
                                 char *err, size_t errlen) {
    uint8_t h[SHARD_HEADER_BYTES];
    if (fsize < SHARD_HEADER_BYTES)
        return err_null(
            err, errlen,
            "'%s': truncated lattice shard: %llu bytes, shorter than the %d-byte header", path,
            (unsigned long long)fsize, SHARD_HEADER_BYTES);
    int rc = pread_full(fd, h, sizeof h, 0);
    if (rc) {
        read_fail(path, rc, "the header", 0, err, errlen);
        return NULL;
    }
    uint32_t version = get_u32(h + 8), width = get_u32(h + 12), vocab = get_u32(h + 16);
    uint32_t block_tokens = get_u32(h + 20), index_crc = get_u32(h + 48);
    uint64_t ntokens = get_u64(h + 24), nblocks = get_u64(h + 32), index_off = get_u64(h + 40);
    if (version != SHARD_VERSION)
        return err_null(err, errlen,
                        "'%s': unsupported lattice shard version %u (this build reads version %u)",
                        path, version, SHARD_VERSION);
    uint32_t crc = lt_crc32(0, h, 60);
    if (crc != get_u32(h + 60))
        return err_null(err, errlen, "'%s': header checksum mismatch (stored %08x, computed %08x)",
                        path, get_u32(h + 60), crc);
    if (width != 2 && width != 4)
        return err_null(err, errlen,
                        "'%s': invalid dtype %u in header (token width must be 2 or 4 bytes)", path,
                        width);
    if (vocab == 0 || vocab > INT_MAX || (width == 2 && vocab > 65536))
        return err_null(err, errlen, "'%s': invalid vocab size %u for %u-byte tokens", path, vocab,
                        width);
    if (vocab_size > 0 && vocab > (uint32_t)vocab_size) {
        lt_errorf(
            err, errlen,
            "'%s': shard was tokenized with vocab size %u, larger than the model's vocab size %d",
            path, vocab, vocab_size);
        return NULL;
    }
    if (block_tokens == 0 || block_tokens > SHARD_MAX_BLOCK)
        return err_null(err, errlen, "'%s': invalid block size %u tokens", path, block_tokens);
    if (nblocks != (ntokens + block_tokens - 1) / block_tokens)
        return err_null(err, errlen,
                        "'%s': block count %llu does not match %llu tokens in blocks of %u", path,
                        (unsigned long long)nblocks, (unsigned long long)ntokens, block_tokens);
    /* nblocks <= 2^64 / 1 but a sane index must fit in the file: bound it first. */
    if (index_off < SHARD_HEADER_BYTES || index_off > fsize ||
        nblocks > (fsize - index_off) / SHARD_INDEX_ENTRY ||
        fsize != index_off + nblocks * SHARD_INDEX_ENTRY) {
        lt_errorf(err, errlen,
                "'%s': file size %llu does not match the header (index at %llu with %llu entries "
                "needs %llu bytes; truncated or corrupt?)",
                path, (unsigned long long)fsize, (unsigned long long)index_off,
                (unsigned long long)nblocks,
                (unsigned long long)(index_off + nblocks * SHARD_INDEX_ENTRY));
        return NULL;
    }
    size_t ibytes = (size_t)nblocks * SHARD_INDEX_ENTRY;
    uint8_t *idx = lt_malloc(ibytes);
    rc = pread_full(fd, idx, ibytes, index_off);
    if (rc) {
        read_fail(path, rc, "the block index", index_off, err, errlen);
        free(idx);
        return NULL;
    }
    crc = lt_crc32(0, idx, ibytes);
    if (crc != index_crc) {
        lt_errorf(err, errlen, "'%s': block index checksum mismatch (stored %08x, computed %08x)",
                path, index_crc, crc);
        free(idx);
        return NULL;
    }
    LtTokenFile *f = file_new(FMT_LATTICE, path);
    f->fd = fd;
    f->ntokens = ntokens;
    f->width = width;
    f->block_tokens = block_tokens;
    f->nblocks = nblocks;
    f->header_vocab = (int)vocab;
    f->limit = vocab_size > 0 && (uint32_t)vocab_size < vocab ? vocab_size : (int64_t)vocab;
    pthread_mutex_init(&f->lock, NULL);
    f->blk_off = lt_malloc(nblocks * sizeof *f->blk_off);
    f->blk_csize = lt_malloc(nblocks * sizeof *f->blk_csize);
    f->blk_crc = lt_malloc(nblocks * sizeof *f->blk_crc);
    uint64_t expect = SHARD_HEADER_BYTES;
    for (uint64_t b = 0; b < nblocks; b++) {
        const uint8_t *e = idx + b * SHARD_INDEX_ENTRY;
        f->blk_off[b] = get_u64(e);
        f->blk_csize[b] = get_u32(e + 8);
        f->blk_crc[b] = get_u32(e + 12);
        if (f->blk_off[b] != expect || f->blk_csize[b] == 0 ||
            f->blk_csize[b] > index_off - f->blk_off[b]) {
            lt_errorf(err, errlen,
                    "'%s': index entry %llu out of bounds (offset %llu, size %u; expected offset "
                    "%llu, blocks end at %llu)",
                    path, (unsigned long long)b, (unsigned long long)f->blk_off[b], f->blk_csize[b],
                    (unsigned long long)expect, (unsigned long long)index_off);
            free(idx);
            f->fd = -1; /* the caller closes fd */
            lt_tokens_close(f);
            return NULL;
        }
        expect += f->blk_csize[b];
    }
    free(idx);
    if (expect != index_off) {
        lt_errorf(err, errlen, "'%s': blocks end at %llu but the index starts at %llu", path,
                (unsigned long long)expect, (unsigned long long)index_off);
        f->fd = -1;
        lt_tokens_close(f);
        return NULL;
    }
    f->dctx = ZSTD_createDCtx();
    if (!f->dctx) lt_fatal("ZSTD_createDCtx failed");
    f->dbuf = lt_malloc((size_t)block_tokens * width);
    f->cache = lt_malloc((size_t)block_tokens * sizeof(int32_t));
    return f;
}

/* ---- uncompressed token streams ---------------------------------------------- */

/* Element size for a Megatron dtype code; 0 for float or unknown codes. */
static int megatron_elem(int code) {
    switch (code) {
    case 1:
    case 2: return 1; /* uint8, int8 */
    case 3:
    case 8: return 2; /* int16, uint16 */
    case 4: return 4; /* int32 */
    case 5: return 8; /* int64 */
    default: return 0;
    }
}

static int64_t megatron_decode(int code, const uint8_t *p) {
    switch (code) {
    case 1: return p[0];
    case 2: return (int8_t)p[0];
    case 3: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case 8: return (uint16_t)(p[0] | p[1] << 8);
    case 4: return (int32_t)get_u32(p);
    default: return (int64_t)get_u64(p);
    }
}

/* Uncompressed readers (Megatron, and llm.c as a single sequence): tokens of
 * sequence s are at byte seq_ptr[s] of fd, dtype_code-encoded. */
static int raw_read(LtTokenFile *f, uint64_t start, uint64_t n, int32_t *out, char *err,
                    size_t errlen) {
    enum { READ_CHUNK = 8192 }; /* tokens per pread */
    uint8_t buf[READ_CHUNK * 8];
    int64_t ids[READ_CHUNK];
    /* Sequence holding `start`: the last s with seq_start[s] <= start. */
    uint64_t lo = 0, hi = f->nseq;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (f->seq_start[mid] <= start)
            lo = mid;
        else
            hi = mid;
    }
    uint64_t s = lo;
    while (n > 0) {
        while (f->seq_start[s + 1] <= start) s++; /* skip empty / finished sequences */
        uint64_t in = start - f->seq_start[s], left = f->seq_start[s + 1] - start;
        size_t m = (size_t)(left < n ? left : n);
        if (m > READ_CHUNK) m = READ_CHUNK;
        uint64_t off = f->seq_ptr[s] + in * (uint64_t)f->elem;
        int rc = pread_full(f->fd, buf, m * (size_t)f->elem, off);
        if (rc) {
            read_fail(f->bin_path ? f->bin_path : f->path, rc, "tokens", off, err, errlen);
            return -1;
        }
        for (size_t i = 0; i < m; i++) ids[i] = megatron_decode(f->dtype_code, buf + i * f->elem);
        if (check_ids(f, ids, m, start, err, errlen)) return -1;
        for (size_t i = 0; i < m; i++) out[i] = (int32_t)ids[i];
        out += m;
        start += m;
        n -= m;
    }
    return 0;
}

/* ---- llm.c .bin ------------------------------------------------------------ */

static LtTokenFile *open_llmc(int fd, const char *path, uint64_t fsize, int vocab_size, char *err,
                              size_t errlen) {
    uint8_t h[LLMC_HEADER_BYTES];
    if (fsize < LLMC_HEADER_BYTES)
        return err_null(err, errlen,
                        "'%s': truncated llm.c file: %llu bytes, shorter than the %d-byte header",
                        path, (unsigned long long)fsize, LLMC_HEADER_BYTES);
    int rc = pread_full(fd, h, sizeof h, 0);
    if (rc) {
        read_fail(path, rc, "the header", 0, err, errlen);
        return NULL;
    }
    int32_t version = (int32_t)get_u32(h + 4), count = (int32_t)get_u32(h + 8);
    if (version != 1)
        return err_null(err, errlen, "'%s': unsupported llm.c token file version %d (expected 1)",
                        path, version);
    if (count < 0)
        return err_null(err, errlen, "'%s': negative token count %d in header", path, count);
    uint64_t want = LLMC_HEADER_BYTES + 2ull * (uint64_t)count;
    if (fsize != want) {
        lt_errorf(
            err, errlen,
            "'%s': size mismatch: header says %d tokens (%llu bytes) but the file has %llu bytes",
            path, count, (unsigned long long)want, (unsigned long long)fsize);
        return NULL;
    }
    /* Read as one uint16 sequence starting after the header (see raw_read). */
    LtTokenFile *f = file_new(FMT_LLMC, path);
    f->fd = fd;
    f->ntokens = (uint64_t)count;
    f->limit = vocab_size > 0 && vocab_size < 65536 ? vocab_size : 65536;
    f->elem = 2;
    f->dtype_code = 8;
    f->nseq = 1;
    f->seq_start = lt_malloc(2 * sizeof *f->seq_start);
    f->seq_ptr = lt_malloc(sizeof *f->seq_ptr);
    f->seq_start[0] = 0;
    f->seq_start[1] = f->ntokens;
    f->seq_ptr[0] = LLMC_HEADER_BYTES;
    return f;
}

/* ---- Megatron-LM indexed dataset ------------------------------------------- */

/* Derive the .idx and .bin paths from a prefix, prefix.bin or prefix.idx. */
static void megatron_paths(const char *path, char **idx, char **bin) {
    size_t n = strlen(path);
    size_t base = ends_with(path, ".idx") || ends_with(path, ".bin") ? n - 4 : n;
    *idx = lt_malloc(base + 5);
    *bin = lt_malloc(base + 5);
    memcpy(*idx, path, base);
    memcpy(*bin, path, base);
    memcpy(*idx + base, ".idx", 5);
    memcpy(*bin + base, ".bin", 5);
}

static LtTokenFile *open_megatron(const char *path, int vocab_size, char *err, size_t errlen) {
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        lt_errorf(err, errlen, __VA_ARGS__);                                                         \
        goto fail;                                                                                 \
    } while (0)
    char *idx_path, *bin_path;
    megatron_paths(path, &idx_path, &bin_path);
    LtTokenFile *f = NULL;
    uint8_t *idx = NULL;
    int ifd = open(idx_path, O_RDONLY | O_CLOEXEC);
    int bfd = open(bin_path, O_RDONLY | O_CLOEXEC);
    struct stat ist, bst;
    if (ifd < 0 || fstat(ifd, &ist) != 0) FAIL("cannot open '%s': %s", idx_path, strerror(errno));
    if (bfd < 0 || fstat(bfd, &bst) != 0) FAIL("cannot open '%s': %s", bin_path, strerror(errno));
    uint64_t isize = (uint64_t)ist.st_size, bsize = (uint64_t)bst.st_size;
    if (isize < MEGATRON_HEADER_BYTES)
        FAIL("'%s': truncated Megatron index: %llu bytes, shorter than the %d-byte header",
             idx_path, (unsigned long long)isize, MEGATRON_HEADER_BYTES);
    idx = lt_malloc(isize);
    int rc = pread_full(ifd, idx, isize, 0);
    if (rc) {
        read_fail(idx_path, rc, "the index", 0, err, errlen);
        goto fail;
    }
    if (memcmp(idx, MEGATRON_MAGIC, 9) != 0)
        FAIL("'%s': not a Megatron index (bad magic, expected \"MMIDIDX\")", idx_path);
    uint64_t version = get_u64(idx + 9);
    int code = idx[17];
    uint64_t nseq = get_u64(idx + 18), ndoc = get_u64(idx + 26);
    if (version != 1)
        FAIL("'%s': unsupported Megatron index version %llu (expected 1)", idx_path,
             (unsigned long long)version);
    int elem = megatron_elem(code);
    if (elem == 0)
        FAIL("'%s': unsupported token dtype code %d (%s)", idx_path, code,
             code == 6 || code == 7 ? "floating point tokens are refused" : "unknown code");
    uint64_t body = isize - MEGATRON_HEADER_BYTES;
    if (nseq > body / 12 || ndoc > (body - 12 * nseq) / 8 || body != 12 * nseq + 8 * ndoc)
        FAIL("'%s': size mismatch: the header declares %llu sequences and %llu documents, "
             "which do not fit the file's %llu bytes (truncated or corrupt?)",
             idx_path, (unsigned long long)nseq, (unsigned long long)ndoc,
             (unsigned long long)isize);
    f = file_new(FMT_MEGATRON, path);
    f->fd = bfd;
    bfd = -1;
    f->bin_path = bin_path;
    bin_path = NULL;
    f->elem = elem;
    f->dtype_code = code;
    f->nseq = nseq;
    f->seq_start = lt_malloc((nseq + 1) * sizeof *f->seq_start);
    f->seq_ptr = lt_malloc((nseq ? nseq : 1) * sizeof *f->seq_ptr);
    const uint8_t *sizes = idx + MEGATRON_HEADER_BYTES, *ptrs = sizes + 4 * nseq;
    const uint8_t *docs = ptrs + 8 * nseq;
    uint64_t tokens = 0, expect_ptr = 0;
    for (uint64_t s = 0; s < nseq; s++) {
        int32_t size = (int32_t)get_u32(sizes + 4 * s);
        int64_t ptr = (int64_t)get_u64(ptrs + 8 * s);
        if (size < 0 || ptr < 0 || (uint64_t)ptr != expect_ptr ||
            (uint64_t)size > (bsize - expect_ptr) / (uint64_t)elem)
            FAIL("'%s': sequence %llu (pointer %lld, %d tokens) is inconsistent with the index "
                 "(expected pointer %llu) or outside '%s' (%llu bytes)",
                 idx_path, (unsigned long long)s, (long long)ptr, size,
                 (unsigned long long)expect_ptr, f->bin_path, (unsigned long long)bsize);
        f->seq_start[s] = tokens;
        f->seq_ptr[s] = (uint64_t)ptr;
        tokens += (uint64_t)size;
        expect_ptr += (uint64_t)size * (uint64_t)elem;
    }
    f->seq_start[nseq] = tokens;
    if (expect_ptr != bsize)
        FAIL(
            "'%s' does not match '%s': the index describes %llu bytes of tokens, the .bin has %llu",
            idx_path, f->bin_path, (unsigned long long)expect_ptr, (unsigned long long)bsize);
    for (uint64_t d = 0; d < ndoc; d++) {
        int64_t v = (int64_t)get_u64(docs + 8 * d);
        int64_t prev = d ? (int64_t)get_u64(docs + 8 * (d - 1)) : 0;
        if (v < prev || (uint64_t)v > nseq)
            FAIL("'%s': document index entry %llu (%lld) is not in order within [0, %llu]",
                 idx_path, (unsigned long long)d, (long long)v, (unsigned long long)nseq);
    }
    f->ndoc = ndoc ? ndoc - 1 : 0;
    f->doc_start = lt_malloc((f->ndoc + 1) * sizeof *f->doc_start);
    for (uint64_t d = 0; d <= f->ndoc && ndoc; d++)
        f->doc_start[d] = f->seq_start[get_u64(docs + 8 * d)];
    if (!ndoc) f->doc_start[0] = 0;
    f->ntokens = tokens;
    if (vocab_size > 0)
        f->limit = vocab_size;
    else
        f->limit = elem == 1   ? (code == 1 ? 256 : 128)
                   : elem == 2 ? (code == 8 ? 65536 : 32768)
                               : (int64_t)INT32_MAX;
    free(idx);
    free(idx_path);
    close(ifd);
    return f;
fail:
    free(idx);
    free(idx_path);
    free(bin_path);
    if (ifd >= 0) close(ifd);
    if (bfd >= 0) close(bfd);
    lt_tokens_close(f);
    return NULL;
#undef FAIL
}

/* ---- open / read ----------------------------------------------------------- */

/* Finish an open: check every token id of a small uncompressed file. */
int lt_tokens_validate(LtTokenFile *f, char *err, size_t errlen) {
    enum { CHUNK = 1 << 16 };
    int32_t *buf = lt_malloc(CHUNK * sizeof *buf);
    int rc = 0;
    for (uint64_t pos = 0; pos < f->ntokens && rc == 0; pos += CHUNK) {
        uint64_t n = f->ntokens - pos < CHUNK ? f->ntokens - pos : CHUNK;
        rc = lt_tokens_read(f, pos, n, buf, err, errlen);
    }
    free(buf);
    return rc;
}

/* llm.c and Megatron files without checksums, up to SCAN_AT_OPEN_BYTES: every
 * token id checked at open (lattice shards have their index checked at open
 * and each block's CRC and ids when it is read). */
static LtTokenFile *scan_small(LtTokenFile *f, char *err, size_t errlen) {
    if (!f || f->fmt == FMT_LATTICE || f->ntokens * (uint64_t)f->elem > SCAN_AT_OPEN_BYTES)
        return f;
    if (lt_tokens_validate(f, err, errlen) == 0) return f;
    lt_tokens_close(f);
    return NULL;
}

/* Whether the Megatron index for a prefix / .bin / .idx path exists. */
static bool megatron_idx_exists(const char *path) {
    char *idx_path, *bin_path;
    megatron_paths(path, &idx_path, &bin_path);
    bool found = access(idx_path, F_OK) == 0;
    free(idx_path);
    free(bin_path);
    return found;
}

LtTokenFile *lt_tokens_open(const char *path, int vocab_size, char *err, size_t errlen) {
    LtTokenFile *f = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT && !ends_with(path, ".bin") && megatron_idx_exists(path))
            return scan_small(open_megatron(path, vocab_size, err, errlen), err, errlen);
        return err_null(err, errlen, "cannot open '%s': %s", path, strerror(e));
    }
    struct stat st;
    uint8_t head[9] = {0};
    uint64_t fsize = 0;
    bool megatron = false; /* open as Megatron once fd is closed */
    int rc;
    if (fstat(fd, &st) != 0)
        lt_errorf(err, errlen, "cannot stat '%s': %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        lt_errorf(err, errlen, "'%s': not a regular file", path);
    else if ((fsize = (uint64_t)st.st_size) == 0)
        lt_errorf(err, errlen, "'%s': file is empty", path);
    else if ((rc = pread_full(fd, head, fsize < sizeof head ? fsize : sizeof head, 0)) != 0)
        read_fail(path, rc, "the header", 0, err, errlen);
    else if (fsize >= 8 && memcmp(head, SHARD_MAGIC, 8) == 0)
        f = open_lattice(fd, path, fsize, vocab_size, err, errlen);
    else if (fsize >= 9 && memcmp(head, MEGATRON_MAGIC, 9) == 0 && ends_with(path, ".idx"))
        megatron = true;
    else if (fsize >= 9 && memcmp(head, MEGATRON_MAGIC, 9) == 0)
        lt_errorf(err, errlen, "'%s': is a Megatron index but its name does not end in .idx", path);
    else if (fsize >= 4 && get_u32(head) == LLMC_MAGIC)
        f = open_llmc(fd, path, fsize, vocab_size, err, errlen);
    else if (ends_with(path, ".bin") && megatron_idx_exists(path))
        megatron = true;
    else if (ends_with(path, ".bin"))
        lt_errorf(err, errlen,
                "'%s': not an llm.c token file (bad magic %u, expected %d) and no Megatron .idx "
                "next to it",
                path, get_u32(head), LLMC_MAGIC);
    else if (fsize < 8 && memcmp(head, SHARD_MAGIC, (size_t)fsize) == 0)
        lt_errorf(err, errlen, "'%s': truncated lattice shard (%llu bytes)", path,
                (unsigned long long)fsize);
    else
        lt_errorf(err, errlen,
                "'%s': unrecognized token file format (bad magic %02x %02x %02x %02x; expected a "
                "lattice shard, an llm.c .bin or a Megatron .idx/.bin pair)",
                path, head[0], head[1], head[2], head[3]);
    if (!f) close(fd); /* on success the reader owns fd */
    if (megatron) f = open_megatron(path, vocab_size, err, errlen);
    return scan_small(f, err, errlen);
}

int lt_tokens_read(LtTokenFile *f, uint64_t start, uint64_t n, int32_t *out, char *err,
                   size_t errlen) {
    if (start > f->ntokens || n > f->ntokens - start)
        return lt_errorf(err, errlen,
                       "'%s': read of tokens [%llu, %llu) is out of bounds (%llu tokens)", f->path,
                       (unsigned long long)start, (unsigned long long)(start + n),
                       (unsigned long long)f->ntokens);
    switch (f->fmt) {
    case FMT_LATTICE: return lattice_read(f, start, n, out, err, errlen);
    case FMT_LLMC:
    case FMT_MEGATRON: return raw_read(f, start, n, out, err, errlen);
    }
    return -1;
}

/* ---- shard writer ------------------------------------------------------------ */

struct LtShardWriter {
    char *path, *tmp;
    int fd;
    uint32_t vocab, width, block_tokens;
    int level;
    ZSTD_CCtx *cctx;
    uint8_t *block;   /* pending tokens, already little-endian encoded */
    uint32_t pending; /* tokens in `block` */
    void *cbuf;
    size_t cbuf_cap;
    uint64_t ntokens, offset; /* offset: where the next block goes */
    uint8_t *index;           /* SHARD_INDEX_ENTRY bytes per block */
    uint64_t nblocks, index_cap;
};

static void writer_free(LtShardWriter *w, bool remove_tmp) {
    if (w->fd >= 0) close(w->fd);
    if (remove_tmp) unlink(w->tmp);
    ZSTD_freeCCtx(w->cctx);
    free(w->block);
    free(w->cbuf);
    free(w->index);
    free(w->path);
    free(w->tmp);
    free(w);
}

LtShardWriter *lt_shard_writer_open(const char *path, int vocab_size, int block_tokens,
                                    int zstd_level, char *err, size_t errlen) {
    if (vocab_size <= 0)
        return err_null(err, errlen, "'%s': invalid vocab size %d", path, vocab_size);
    if (block_tokens == 0) block_tokens = SHARD_DEFAULT_BLOCK;
    if (block_tokens < 0 || block_tokens > SHARD_MAX_BLOCK)
        return err_null(err, errlen, "'%s': block size %d tokens is outside [1, %d]", path,
                        block_tokens, SHARD_MAX_BLOCK);
    if (zstd_level == 0) zstd_level = SHARD_DEFAULT_LEVEL;
    if (zstd_level < ZSTD_minCLevel() || zstd_level > ZSTD_maxCLevel())
        return err_null(err, errlen, "zstd level %d is outside [%d, %d]", zstd_level,
                        ZSTD_minCLevel(), ZSTD_maxCLevel());
    LtShardWriter *w = lt_calloc(sizeof *w);
    w->path = dup_str(path);
    size_t n = strlen(path);
    w->tmp = lt_malloc(n + 5);
    memcpy(w->tmp, path, n);
    memcpy(w->tmp + n, ".tmp", 5);
    w->vocab = (uint32_t)vocab_size;
    w->width = vocab_size <= 65536 ? 2 : 4;
    w->block_tokens = (uint32_t)block_tokens;
    w->level = zstd_level;
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        lt_errorf(err, errlen, "cannot create '%s': %s", w->tmp, strerror(errno));
        writer_free(w, false);
        return NULL;
    }
    uint8_t zero[SHARD_HEADER_BYTES] = {0}; /* the real header is written at close */
    if (write_full(w->fd, zero, sizeof zero) != 0) {
        lt_errorf(err, errlen, "cannot write '%s': %s", w->tmp, strerror(errno));
        writer_free(w, true);
        return NULL;
    }
    w->offset = SHARD_HEADER_BYTES;
    w->cctx = ZSTD_createCCtx();
    if (!w->cctx) lt_fatal("ZSTD_createCCtx failed");
    w->block = lt_malloc((size_t)w->block_tokens * w->width);
    w->cbuf_cap = ZSTD_compressBound((size_t)w->block_tokens * w->width);
    w->cbuf = lt_malloc(w->cbuf_cap);
    return w;
}

/* Compress and write the pending block; record its index entry. */
static int writer_flush(LtShardWriter *w, char *err, size_t errlen) {
    if (w->pending == 0) return 0;
    size_t raw = (size_t)w->pending * w->width;
    size_t csize = ZSTD_compressCCtx(w->cctx, w->cbuf, w->cbuf_cap, w->block, raw, w->level);
    if (ZSTD_isError(csize))
        return lt_errorf(err, errlen, "'%s': zstd compression failed: %s", w->tmp,
                       ZSTD_getErrorName(csize));
    if (write_full(w->fd, w->cbuf, csize) != 0)
        return lt_errorf(err, errlen, "cannot write '%s': %s", w->tmp, strerror(errno));
    if (w->nblocks == w->index_cap) {
        w->index_cap = w->index_cap ? 2 * w->index_cap : 64;
        uint8_t *grown = realloc(w->index, w->index_cap * SHARD_INDEX_ENTRY);
        if (!grown) lt_fatal("out of host memory growing the shard index");
        w->index = grown;
    }
    uint8_t *e = w->index + w->nblocks * SHARD_INDEX_ENTRY;
    put_u64(e, w->offset);
    put_u32(e + 8, (uint32_t)csize);
    put_u32(e + 12, lt_crc32(0, w->block, raw));
    w->nblocks++;
    w->offset += csize;
    w->pending = 0;
    return 0;
}

int lt_shard_writer_append(LtShardWriter *w, const int32_t *tokens, size_t n, char *err,
                           size_t errlen) {
    for (size_t i = 0; i < n; i++) { /* validate all first: a failed append adds nothing */
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= w->vocab)
            return lt_errorf(err, errlen,
                           "'%s': token id %d (appended token %llu) is out of range [0, %u)",
                           w->path, tokens[i], (unsigned long long)(w->ntokens + i), w->vocab);
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = w->block + (size_t)w->pending * w->width;
        if (w->width == 2) {
            p[0] = (uint8_t)tokens[i];
            p[1] = (uint8_t)(tokens[i] >> 8);
        } else {
            put_u32(p, (uint32_t)tokens[i]);
        }
        w->ntokens++;
        if (++w->pending == w->block_tokens && writer_flush(w, err, errlen) != 0) return -1;
    }
    return 0;
}

void lt_shard_writer_abort(LtShardWriter *w) {
    if (w) writer_free(w, true);
}

int lt_shard_writer_close(LtShardWriter *w, char *err, size_t errlen) {
    if (writer_flush(w, err, errlen) != 0) goto fail;
    size_t ibytes = (size_t)w->nblocks * SHARD_INDEX_ENTRY;
    if (ibytes && write_full(w->fd, w->index, ibytes) != 0) {
        lt_errorf(err, errlen, "cannot write '%s': %s", w->tmp, strerror(errno));
        goto fail;
    }
    uint8_t h[SHARD_HEADER_BYTES] = {0};
    memcpy(h, SHARD_MAGIC, 8);
    put_u32(h + 8, SHARD_VERSION);
    put_u32(h + 12, w->width);
    put_u32(h + 16, w->vocab);
    put_u32(h + 20, w->block_tokens);
    put_u64(h + 24, w->ntokens);
    put_u64(h + 32, w->nblocks);
    put_u64(h + 40, w->offset);
    put_u32(h + 48, lt_crc32(0, w->index, ibytes));
    put_u32(h + 52, (uint32_t)w->level);
    put_u32(h + 60, lt_crc32(0, h, 60));
    if (pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h || fsync(w->fd) != 0) {
        lt_errorf(err, errlen, "cannot write '%s': %s", w->tmp, strerror(errno));
        goto fail;
    }
    int rc = close(w->fd);
    w->fd = -1;
    if (rc != 0 || rename(w->tmp, w->path) != 0) {
        lt_errorf(err, errlen, "cannot finish '%s': %s", w->path, strerror(errno));
        goto fail;
    }
    writer_free(w, false);
    return 0;
fail:
    writer_free(w, true);
    return -1;
}
