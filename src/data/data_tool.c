/* data_tool.c - the `lattice shard` subcommand: write token shards from text
 * token ids, and inspect / validate existing token files.
 *
 *   lattice shard --vocab-size V [--format lattice|llmc] [--block-tokens N]
 *                 [--zstd-level L] [--eot ID] [--input FILE] OUT
 *   lattice shard --info FILE [--vocab-size V] [--head N]
 *
 * Input: whitespace-separated decimal token ids, one document per line;
 * documents are concatenated in order, with --eot ID appended after each
 * non-empty line (blank lines are not documents and get no EOT).
 * Exit codes: 0 ok, 2 bad input or arguments (nothing is left at OUT),
 * 1 I/O failure. */
#include "common.h"
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOOL "lattice shard"
#define FLUSH_TOKENS 65536

static void usage(FILE *out) {
    fprintf(out,
            "usage: lattice shard --vocab-size V [--format lattice|llmc] [--block-tokens N]\n"
            "                     [--zstd-level L] [--eot ID] [--input FILE] OUT\n"
            "       lattice shard --info FILE [--vocab-size V] [--head N]\n"
            "\n"
            "Writes a token file from whitespace-separated token ids (one document per line,\n"
            "read from FILE or stdin), or with --info validates every block and token of an\n"
            "existing lattice / llm.c / Megatron token file and prints its summary.\n"
            "  --vocab-size V    token ids must be < V (llmc: V <= 65536)\n"
            "  --format F        lattice (zstd blocks with checksums, default) or llmc (.bin)\n"
            "  --block-tokens N  tokens per compressed block (lattice; default 65536)\n"
            "  --zstd-level L    zstd compression level (lattice; default 3)\n"
            "  --eot ID          token appended after each non-empty input line\n"
            "  --head N          with --info: also print the first N token ids\n");
}

/* Parse a whole decimal integer in [lo, hi]. */
static bool parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static void fmt_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fmt_err(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- output sinks ------------------------------------------------------------ */

/* Either a lattice shard writer or an llm.c .bin being written to path.tmp. */
typedef struct {
    bool llmc;
    LtShardWriter *shard;
    const char *path;
    char tmp[PATH_MAX];
    FILE *fp;
    uint64_t ntokens;
} Sink;

static int sink_open(Sink *s, const char *path, bool llmc, int vocab, int block_tokens,
                     int level, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->llmc = llmc;
    s->path = path;
    if (!llmc) {
        s->shard = lt_shard_writer_open(path, vocab, block_tokens, level, err, errlen);
        return s->shard ? 0 : -1;
    }
    if (snprintf(s->tmp, sizeof s->tmp, "%s.tmp", path) >= (int)sizeof s->tmp) {
        fmt_err(err, errlen, "output path too long: '%s'", path);
        return -1;
    }
    s->fp = fopen(s->tmp, "wb");
    if (!s->fp) {
        fmt_err(err, errlen, "cannot create '%s': %s", s->tmp, strerror(errno));
        return -1;
    }
    static const uint8_t zero[1024];
    if (fwrite(zero, 1, sizeof zero, s->fp) != sizeof zero) { /* header written at close */
        fmt_err(err, errlen, "cannot write '%s': %s", s->tmp, strerror(errno));
        return -1;
    }
    return 0;
}

static int sink_append(Sink *s, const int32_t *tok, size_t n, char *err, size_t errlen) {
    if (!s->llmc) {
        if (lt_shard_writer_append(s->shard, tok, n, err, errlen) != 0) return -1;
        s->ntokens += n;
        return 0;
    }
    uint8_t buf[2 * FLUSH_TOKENS];
    for (size_t i = 0; i < n; i++) {
        buf[2 * i] = (uint8_t)tok[i];
        buf[2 * i + 1] = (uint8_t)(tok[i] >> 8);
    }
    if (s->ntokens + n > INT32_MAX) {
        fmt_err(err, errlen, "llm.c files hold at most %d tokens", INT32_MAX);
        return -1;
    }
    if (fwrite(buf, 2, n, s->fp) != n) {
        fmt_err(err, errlen, "cannot write '%s': %s", s->tmp, strerror(errno));
        return -1;
    }
    s->ntokens += n;
    return 0;
}

static void sink_abort(Sink *s) {
    if (!s->llmc) {
        lt_shard_writer_abort(s->shard);
        return;
    }
    if (s->fp) fclose(s->fp);
    unlink(s->tmp);
}

static int sink_close(Sink *s, char *err, size_t errlen) {
    if (!s->llmc) return lt_shard_writer_close(s->shard, err, errlen);
    uint8_t h[12];
    int32_t vals[3] = {20240520, 1, (int32_t)s->ntokens};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++) h[4 * i + b] = (uint8_t)((uint32_t)vals[i] >> (8 * b));
    bool ok = fflush(s->fp) == 0 && fseek(s->fp, 0, SEEK_SET) == 0 &&
              fwrite(h, 1, sizeof h, s->fp) == sizeof h && fflush(s->fp) == 0 &&
              fsync(fileno(s->fp)) == 0;
    ok = fclose(s->fp) == 0 && ok;
    s->fp = NULL;
    if (!ok || rename(s->tmp, s->path) != 0) {
        fmt_err(err, errlen, "cannot finish '%s': %s", s->path, strerror(errno));
        unlink(s->tmp);
        return -1;
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------------- */

typedef struct {
    long vocab, eot; /* eot < 0: none */
    const char *format, *input, *out;
    long block_tokens, level;
} WriteArgs;

/* Parse one whitespace-free word as a token id below vocab. Returns 0, or 2
 * with a message naming the input and line. */
static int parse_word(const WriteArgs *a, const char *word, size_t len, bool truncated,
                      uint64_t line, int32_t *id) {
    const char *src = a->input ? a->input : "stdin";
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (word[i] < '0' || word[i] > '9') {
            fprintf(stderr, TOOL ": error: %s: line %llu: '%s%s' is not a token id (expected a "
                            "non-negative integer)\n",
                    src, (unsigned long long)line, word, truncated ? "..." : "");
            return 2;
        }
        if (v <= (uint64_t)INT32_MAX) v = v * 10 + (uint64_t)(word[i] - '0');
    }
    if (truncated || v >= (uint64_t)a->vocab) {
        fprintf(stderr, TOOL ": error: %s: line %llu: token id %s%s >= vocab size %ld\n", src,
                (unsigned long long)line, word, truncated ? "..." : "", a->vocab);
        return 2;
    }
    *id = (int32_t)v;
    return 0;
}

/* Tokenize `in` into the sink; counts non-empty lines in *ndocs.
 * Returns 0, 2 (bad input) or 1 (I/O). */
static int write_tokens(const WriteArgs *a, FILE *in, Sink *sink, uint64_t *ndocs) {
    char err[600], word[24];
    int32_t *buf = lt_malloc(FLUSH_TOKENS * sizeof *buf);
    size_t nbuf = 0, len = 0;
    bool truncated = false, line_has_tokens = false;
    uint64_t line = 1;
    int rc = 0;
    *ndocs = 0;
    for (;;) {
        int c = getc_unlocked(in);
        bool space = c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
        if (c != EOF && !space) {
            if (len < sizeof word - 1) word[len++] = (char)c;
            else truncated = true;
            continue;
        }
        if (len > 0) { /* a word ended */
            word[len] = 0;
            if ((rc = parse_word(a, word, len, truncated, line, &buf[nbuf])) != 0) break;
            nbuf++;
            line_has_tokens = true;
            len = 0;
            truncated = false;
        }
        if ((c == '\n' || c == EOF) && line_has_tokens) {
            if (a->eot >= 0) buf[nbuf++] = (int32_t)a->eot;
            (*ndocs)++;
            line_has_tokens = false;
        }
        /* buf keeps room for one token plus an EOT. */
        if (nbuf >= FLUSH_TOKENS - 2 || (c == EOF && nbuf > 0)) {
            if (sink_append(sink, buf, nbuf, err, sizeof err) != 0) {
                fprintf(stderr, TOOL ": error: %s\n", err);
                rc = 1;
                break;
            }
            nbuf = 0;
        }
        if (c == '\n') line++;
        if (c == EOF) break;
    }
    if (rc == 0 && ferror(in)) {
        fprintf(stderr, TOOL ": error: reading %s: %s\n", a->input ? a->input : "stdin",
                strerror(errno));
        rc = 1;
    }
    free(buf);
    return rc;
}

static int cmd_write(const WriteArgs *a) {
    bool llmc = strcmp(a->format, "llmc") == 0;
    if (!llmc && strcmp(a->format, "lattice") != 0) {
        fprintf(stderr, TOOL ": error: unknown --format '%s' (use lattice or llmc)\n", a->format);
        return 2;
    }
    if (a->vocab <= 0) {
        fprintf(stderr, TOOL ": error: --vocab-size is required (a positive integer)\n");
        return 2;
    }
    if (llmc && a->vocab > 65536) {
        fprintf(stderr, TOOL ": error: --format llmc stores uint16 tokens: vocab size %ld > 65536\n",
                a->vocab);
        return 2;
    }
    if (a->eot >= a->vocab) {
        fprintf(stderr, TOOL ": error: --eot %ld is not below the vocab size %ld\n", a->eot, a->vocab);
        return 2;
    }
    FILE *in = stdin;
    if (a->input && !(in = fopen(a->input, "r"))) {
        fprintf(stderr, TOOL ": error: cannot open '%s': %s\n", a->input, strerror(errno));
        return 2;
    }
    char err[600];
    Sink sink;
    if (sink_open(&sink, a->out, llmc, (int)a->vocab, (int)a->block_tokens, (int)a->level, err,
                  sizeof err) != 0) {
        fprintf(stderr, TOOL ": error: %s\n", err);
        if (llmc) sink_abort(&sink);
        if (in != stdin) fclose(in);
        return 1;
    }
    uint64_t ndocs;
    int rc = write_tokens(a, in, &sink, &ndocs);
    if (in != stdin) fclose(in);
    if (rc != 0) {
        sink_abort(&sink);
        return rc;
    }
    if (sink_close(&sink, err, sizeof err) != 0) {
        fprintf(stderr, TOOL ": error: %s\n", err);
        return 1;
    }
    printf("wrote %llu tokens (%llu documents) to '%s' (format %s, vocab size %ld)\n",
           (unsigned long long)sink.ntokens, (unsigned long long)ndocs, a->out,
           llmc ? "llm.c" : "lattice", a->vocab);
    return 0;
}

/* ---- --info ------------------------------------------------------------------ */

/* Print the summary, validate every token, and print the first `head` ids. */
static int cmd_info(const char *path, long vocab, long head) {
    char err[600];
    LtTokenFile *f = lt_tokens_open(path, (int)vocab, err, sizeof err);
    if (!f) {
        fprintf(stderr, TOOL ": error: %s\n", err);
        return 2;
    }
    uint64_t n = lt_tokens_count(f);
    printf("file: %s\nformat: %s\ntokens: %llu\n", path, lt_tokens_format(f),
           (unsigned long long)n);
    if (lt_tokens_vocab_size(f) > 0) printf("vocab_size: %d\n", lt_tokens_vocab_size(f));
    enum { CHUNK = 1 << 20 };
    int32_t *buf = lt_malloc(CHUNK * sizeof *buf);
    int32_t max_id = -1;
    int rc = 0;
    for (uint64_t pos = 0; pos < n; pos += CHUNK) {
        uint64_t m = n - pos < CHUNK ? n - pos : CHUNK;
        if (lt_tokens_read(f, pos, m, buf, err, sizeof err) != 0) {
            fprintf(stderr, TOOL ": error: %s\n", err);
            rc = 2;
            break;
        }
        if (pos == 0 && head > 0) {
            printf("head:");
            for (uint64_t i = 0; i < m && i < (uint64_t)head; i++) printf(" %d", buf[i]);
            printf("\n");
        }
        for (uint64_t i = 0; i < m; i++)
            if (buf[i] > max_id) max_id = buf[i];
    }
    free(buf);
    lt_tokens_close(f);
    if (rc == 0) printf("max_id: %d\nstatus: ok (every block and token id validated)\n", max_id);
    return rc;
}

/* ---- entry ----------------------------------------------------------------------- */

int lt_cmd_shard(int argc, char **argv) {
    WriteArgs a = {.vocab = 0, .eot = -1, .format = "lattice", .block_tokens = 0, .level = 0};
    const char *info = NULL;
    long head = 0;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (opt[0] == '-' && opt[1] == '-') {
            if (i + 1 >= argc) {
                fprintf(stderr, TOOL ": error: %s needs a value\n", opt);
                return 2;
            }
            const char *v = argv[++i];
            bool ok = true;
            if (strcmp(opt, "--vocab-size") == 0) ok = parse_int(v, 1, INT_MAX, &a.vocab);
            else if (strcmp(opt, "--eot") == 0) ok = parse_int(v, 0, INT_MAX, &a.eot);
            else if (strcmp(opt, "--block-tokens") == 0) ok = parse_int(v, 1, 1 << 24, &a.block_tokens);
            else if (strcmp(opt, "--zstd-level") == 0) ok = parse_int(v, -131072, 22, &a.level);
            else if (strcmp(opt, "--format") == 0) a.format = v;
            else if (strcmp(opt, "--input") == 0) a.input = v;
            else if (strcmp(opt, "--info") == 0) info = v;
            else if (strcmp(opt, "--head") == 0) ok = parse_int(v, 0, 1 << 20, &head);
            else {
                fprintf(stderr, TOOL ": error: unknown option '%s'\n", opt);
                usage(stderr);
                return 2;
            }
            if (!ok) {
                fprintf(stderr, TOOL ": error: invalid value '%s' for %s\n", v, opt);
                return 2;
            }
        } else if (!a.out) {
            a.out = opt;
        } else {
            fprintf(stderr, TOOL ": error: unexpected argument '%s'\n", opt);
            return 2;
        }
    }
    if (info) {
        if (a.out) {
            fprintf(stderr, TOOL ": error: --info takes no output path ('%s')\n", a.out);
            return 2;
        }
        return cmd_info(info, a.vocab, head);
    }
    if (!a.out) {
        fprintf(stderr, TOOL ": error: missing output path\n");
        usage(stderr);
        return 2;
    }
    return cmd_write(&a);
}
