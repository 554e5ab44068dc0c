/* data.h - token files and the training sample loader.
 *
 * Three on-disk formats, detected from their first bytes:
 *  - lattice shards (".ltok"): header, zstd-compressed blocks, block index
 *    with offsets and a CRC-32 per block, random access by token position;
 *  - llm.c ".bin" shards: 256 int32 header (magic 20240520, version 1,
 *    token count) followed by uint16 tokens;
 *  - Megatron-LM indexed datasets: "<prefix>.bin" + "<prefix>.idx" (MMIDIDX
 *    header); the path given may be the prefix, the .bin or the .idx; all
 *    sequences are read as one stream in order.
 * A file is one token stream. Sample i of a stream with sequence length S is
 * tokens [i*S, i*S + S + 1): inputs are the first S, targets the last S. */
#ifndef LT_DATA_H
#define LT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rampup.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LtTokenFile LtTokenFile;

/* Open and validate (magic, version, sizes, file length vs header, dtype).
 * Token ids are checked against vocab_size as they are read (and for the
 * uncompressed formats also at open when the file is small, <= 64 MiB).
 * A lattice shard whose header vocab exceeds vocab_size is refused at open.
 * vocab_size <= 0 checks ids only against the file's own limit (header vocab,
 * 65536 for llm.c, the dtype range for Megatron): for inspection tools.
 * Returns NULL with a message naming the file and the problem in err. */
LtTokenFile *lt_tokens_open(const char *path, int vocab_size, char *err, size_t errlen);
/* Vocab size recorded in a lattice shard header; 0 for the other formats. */
int lt_tokens_vocab_size(const LtTokenFile *f);
void lt_tokens_close(LtTokenFile *f);
uint64_t lt_tokens_count(const LtTokenFile *f);
const char *lt_tokens_format(const LtTokenFile *f); /* "lattice", "llm.c", "megatron" */
const char *lt_tokens_path(const LtTokenFile *f);
/* Read tokens [start, start+n) into out. Thread-safe for distinct callers
 * (uses pread). Returns 0, or -1 with a message (checksum mismatch, id out of
 * range, short read, out of bounds) in err. */
int lt_tokens_read(LtTokenFile *f, uint64_t start, uint64_t n, int32_t *out, char *err,
                   size_t errlen);
/* The file's documents: *ndocs of them, (*starts)[d] the token position
 * where document d starts and (*starts)[*ndocs] the end of the stream (an
 * array the caller frees). Megatron files: the index's documents. The other
 * formats: a document ends with each eod token (read through the whole
 * file; the tokens after the last one make the last document); eod < 0 is
 * an error there. 0, or -1 with the problem in err. */
int lt_tokens_documents(LtTokenFile *f, int32_t eod, uint64_t **starts, uint64_t *ndocs,
                        char *err, size_t errlen);
/* Read every token once: each lattice block's CRC and size, and every id
 * against the limit. 0, or -1 with the first problem (file, offset) in err. */
int lt_tokens_validate(LtTokenFile *f, char *err, size_t errlen);

/* Streaming writer of the lattice shard format. block_tokens 0 = default
 * (65536); zstd_level 0 = default (3). Token width is 2 bytes when
 * vocab_size <= 65536, else 4. An append with an id outside [0, vocab_size)
 * fails and appends nothing (the writer stays usable); after an I/O error,
 * abort. Nothing appears at `path` before a successful close. */
typedef struct LtShardWriter LtShardWriter;
LtShardWriter *lt_shard_writer_open(const char *path, int vocab_size, int block_tokens,
                                    int zstd_level, char *err, size_t errlen);
int lt_shard_writer_append(LtShardWriter *w, const int32_t *tokens, size_t n, char *err,
                           size_t errlen);
/* Finishes the file (index, header) atomically (written to path.tmp then renamed). */
int lt_shard_writer_close(LtShardWriter *w, char *err, size_t errlen);
/* Discards the partial file (path.tmp) and frees the writer. */
void lt_shard_writer_abort(LtShardWriter *w);

/* Number of whole samples a stream of `ntokens` holds at sequence length S. */
static inline uint64_t lt_num_samples(uint64_t ntokens, int S) {
    return ntokens > (uint64_t)S ? (ntokens - 1) / (uint64_t)S : 0;
}

/* ---- blends ----------------------------------------------------------------
 * data.train_path names one file, or a blend in Megatron-LM's form
 * "W1 PATH1 W2 PATH2 ..." (a YAML list is stored joined so): each dataset is
 * a token file (any format) with a positive weight; weights are normalised
 * by their sum. A string whose first word is not a number is one path. */
#define LT_BLEND_MAX 64
typedef struct {
    int n;                           /* datasets */
    double weight[LT_BLEND_MAX];     /* normalised: they sum to 1 */
    char *path[LT_BLEND_MAX];        /* into text */
    LtTokenFile *file[LT_BLEND_MAX]; /* after lt_blend_open */
    uint64_t tok0[LT_BLEND_MAX];     /* each dataset's token range (data.split): from tok0, */
    uint64_t ntok[LT_BLEND_MAX];     /* ntok tokens; ntok 0 = the whole file */
    char text[1024];                 /* the paths, cut apart */
    char spec[1024];                 /* the blend as given (trimmed), for messages */
} LtBlend;

/* Parse spec into b (no file opened). 0, or -1 with what is wrong in err. */
int lt_blend_parse(const char *spec, LtBlend *b, char *err, size_t errlen);
/* Parse and open every file (lt_tokens_open with vocab). 0, or -1 with the
 * problem (naming the file) in err and nothing left open. */
int lt_blend_open(LtBlend *b, const char *spec, int vocab, char *err, size_t errlen);
void lt_blend_close(LtBlend *b);
/* Tokens of opened dataset d: its range (ntok), or the whole file. */
uint64_t lt_blend_tokens(const LtBlend *b, int d);

/* The order in which a blend takes its samples: Megatron-LM's BlendedDataset
 * (global sample i from the dataset furthest below its share w_d * i, as that
 * dataset's next sample). Thread-safe. */
typedef struct LtBlendOrder LtBlendOrder;
LtBlendOrder *lt_blend_order_create(const double *weights, int n);
void lt_blend_order_destroy(LtBlendOrder *o);
/* Global samples first .. first+count-1: dataset[k] and that dataset's own
 * sample number index[k] (how many it had taken before). */
void lt_blend_order_range(LtBlendOrder *o, uint64_t first, int count, int *dataset,
                          uint64_t *index);
/* Samples each dataset took before global sample pos, into taken[n]. */
void lt_blend_order_taken(LtBlendOrder *o, uint64_t pos, uint64_t *taken);

/* data.split ("969,30,1"): Megatron's parse_and_normalize_split - the
 * numbers in text (up to three: train, validation, test; missing ones 0),
 * normalised by their sum. 0, or -1 with the problem in err. */
int lt_split_parse(const char *text, double v[3], char *err, size_t errlen);
/* Megatron's split of ndocs documents: split i is documents [beg[i], end[i])
 * with beg = round(edge_i * ndocs), end = round(edge_i+1 * ndocs) over the
 * cumulative proportions (Python's round: halves to even); an empty share
 * gives beg = end = 0. */
void lt_split_docs(const double v[3], uint64_t ndocs, uint64_t beg[3], uint64_t end[3]);

/* ---- loader ---------------------------------------------------------------
 * Produces, for optimizer step k, the samples this rank uses: global sample
 * positions k*G + first .. k*G + first + count - 1 (G = samples_per_step).
 * With a batch-size ramp-up (ramp.start > 0, ramp.global = G) step k takes
 * batch B_k = lt_rampup_batch at the c_k = lt_rampup_consumed samples before
 * it, and the slice scales with it: positions c_k + first*B_k/G .. +
 * count*B_k/G - 1 (so first and count must make those whole).
 * With a blend, position p first goes to a dataset d and its own position q
 * (LtBlendOrder); with one file, d = 0 and q = p. Position q maps to sample
 * id q mod num_samples of d without shuffle; with shuffle, epoch
 * e = q / num_samples uses a permutation that is a pure function of
 * (seed_d, e), where seed_0 = seed and the other datasets' seeds are
 * derived from (seed, d). A background thread prepares up to `prefetch` steps
 * ahead, so the training loop never waits on storage in steady state. */
typedef struct LtLoader LtLoader;
typedef struct {
    int seq_len;
    int samples_per_step;  /* G: global batch */
    int first, count;      /* this rank's slice of each step's samples */
    bool shuffle;
    uint64_t seed;
    int prefetch;          /* >= 1 */
    LtRampup ramp;         /* batch-size ramp-up (zero: none) */
} LtLoaderConfig;

/* The loader does not own f; f must stay open until lt_loader_destroy. */
LtLoader *lt_loader_create(LtTokenFile *f, const LtLoaderConfig *cfg, char *err, size_t errlen);
/* The same over an opened blend (b's files stay open until lt_loader_destroy;
 * b itself may go). */
LtLoader *lt_loader_create_blend(const LtBlend *b, const LtLoaderConfig *cfg, char *err,
                                 size_t errlen);
/* Samples each dataset of the loader's blend took before global position pos
 * (taken[n]); with one file, taken[0] = pos. */
void lt_loader_taken(const LtLoader *l, uint64_t pos, uint64_t *taken);
/* Copy step `step`'s tokens into out[count * (S+1)] (row i = sample i of the
 * slice, S+1 tokens; with a ramp-up the step's count*B_k/G rows). Steps are normally requested in increasing order (which
 * the prefetcher predicts); any step may be asked for (resume). Returns 0, or
 * -1 with a message (a read or validation error) in err. */
int lt_loader_get(LtLoader *l, long step, int32_t *out, char *err, size_t errlen);
/* The dataset of global position p and the sample id read from it (exposed
 * for tests). */
int lt_loader_locate(const LtLoader *l, uint64_t position, uint64_t *sample_id);
/* The sample id of global position p (of whichever dataset holds it). */
uint64_t lt_loader_sample_id(const LtLoader *l, uint64_t position);
void lt_loader_destroy(LtLoader *l);

/* `lattice shard ...` subcommand (argv[0] is "shard"); returns the exit code. */
int lt_cmd_shard(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
