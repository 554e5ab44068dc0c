/* checkpoint.h - saving and loading training state.
 *
 * Layout: <dir>/step_<NNNNNNNN>/ holding the state files (one per saving
 * rank: fp32 pieces of the master weights and Adam moments, each a rectangle
 * of a global tensor), meta.json and config.yaml; <dir>/latest names the
 * newest complete step directory. Every file, byte by byte: docs/formats.md. A step directory is
 * written under a temporary name and renamed when complete, then `latest` is
 * replaced atomically: a crash never leaves a half checkpoint that load uses. */
#ifndef LT_CHECKPOINT_H
#define LT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    long step;                 /* training steps completed */
    long optimizer_steps;      /* Adam updates applied: step minus the skipped (non-finite) steps;
                                * -1 when reading a checkpoint that predates the field (= step) */
    uint64_t samples_consumed; /* global training samples consumed */
    uint64_t seed;             /* train.seed of the run */
    uint64_t data_seed;        /* seed of the shuffle permutation */
    uint64_t rng_state;        /* sampler/dropout RNG state (reserved) */
    int weights_only;          /* set by the readers: the checkpoint holds no Adam moments
                                * (meta.json "optimizer_state": false); ignored by save */
    int padded_vocab;          /* set by the readers: the vocabulary padding of the saving
                                * run (0 when meta.json does not say); ignored by save */
} LtCkptMeta;

/* Host copies of the full (unsharded) state, each t->total fp32 elements.
 * m and v may be NULL (weights-only). */
typedef struct {
    float *master, *m, *v;
} LtCkptState;

/* Save step directory for meta->step under dir; cfg is written as config.yaml.
 * Returns 0, or -1 with a message in err. */
int lt_ckpt_save(const char *dir, const LtParamTable *t, const LtCkptState *s,
                 const LtCkptMeta *meta, const LtConfig *cfg, char *err, size_t errlen);

/* The parallel layout that saved a checkpoint (any layout loads any). */
typedef struct {
    int tp, pp, vpp, dp, zero_stage;
    LtLayerSplit split; /* the pipeline's layers per chunk (zero: even) */
} LtCkptLayout;

/* The state file of rank (tp, pp, dp) of layout l: state.lt for one
 * process, else state-tpT-ppP-dpD.lt. */
void lt_ckpt_state_name(const LtCkptLayout *l, int tp, int pp, int dp, char *out, size_t len);

/* A parallel save: every rank calls lt_ckpt_begin for the path of the
 * temporary directory <dir>/.tmp-step_NNNNNNNN (in tmp), one of them with
 * create = 1, which makes it afresh (before the others write); then every rank writes its state
 * file there (lt_state_write); once all have, one rank calls lt_ckpt_commit:
 * it checks every file the layout names, writes config.yaml and meta.json
 * (last), installs the directory as step_NNNNNNNN and points latest at it
 * (on failure the temporary directory is removed). lt_ckpt_abort removes the
 * temporary directory of a failed save. optimizer_state: the files hold Adam
 * moments. g: the whole model's table (dims, parameter count). 0 or -1. */
int lt_ckpt_begin(const char *dir, long step, int create, char *tmp, size_t len, char *err,
                  size_t errlen);
int lt_ckpt_commit(const char *dir, const char *tmp, const LtParamTable *g, const LtCkptMeta *meta,
                   const LtCkptLayout *l, int optimizer_state, const LtConfig *cfg, char *err,
                   size_t errlen);
void lt_ckpt_abort(const char *tmp);

/* Load this rank's part at its own layout (t: its table): master[t->total]
 * gets every parameter it holds; m and v (NULL: skipped) the elements
 * [lo, hi) of its flat index space, m[0] being element lo. Reads only the
 * blocks of the state files that hold those elements, through an I/O buffer
 * of io_bytes; moments not asked for are still read over [lo, hi), through a
 * 4 MiB scratch buffer, to be checked. Refuses a checkpoint whose dims differ
 * from t's (naming the field), whose files do not match meta.json, or that
 * holds a non-finite weight or moment. 0, or -1 with a message naming the
 * file and tensor. */
int lt_ckpt_load_local(const char *stepdir, const LtParamTable *t, float *master, size_t lo,
                       size_t hi, float *m, float *v, size_t io_bytes, LtCkptMeta *meta, char *err,
                       size_t errlen);

/* Before a run's first save: `dir` exists (created if needed) and a file can
 * be created, written, synced and removed in it; entries left by a writer
 * killed mid-save (.tmp-step_*, .old-step_*, latest.tmp) are removed - one run
 * writes a checkpoint directory at a time. *removed = how many. 0 or -1. */
int lt_ckpt_prepare_dir(const char *dir, int *removed, char *err, size_t errlen);
/* After a save is complete: keep the newest `keep` step directories (and the
 * one `latest` names), remove older ones; keep <= 0 keeps all. 0 or -1. */
int lt_ckpt_prune(const char *dir, int keep, int *removed, char *err, size_t errlen);
/* checkpoint.load=auto: 1 and the newest complete checkpoint's step directory
 * when `dir` has a `latest`; 0 when `dir` does not exist or has none (start
 * fresh); -1 when `latest` is there but does not name a checkpoint. */
int lt_ckpt_find_latest(const char *dir, char *stepdir, size_t len, char *err, size_t errlen);

/* Resolve `path` (a checkpoint.dir with a `latest` file, or one step
 * directory) to a step directory. Returns 0 or -1 with err. */
int lt_ckpt_resolve(const char *path, char *stepdir, size_t len, char *err, size_t errlen);

/* Read and check only meta.json of a step directory (before deciding what to
 * load). Returns 0 or -1 with a message naming the file. */
int lt_ckpt_read_meta(const char *stepdir, LtCkptMeta *meta, char *err, size_t errlen);

/* Load the config stored in a step directory (for export). */
int lt_ckpt_load_config(const char *stepdir, LtConfig *cfg, char *err, size_t errlen);

/* Load into s (arrays of t->total, allocated by the caller; m/v may be NULL
 * not to keep them, they are checked all the same). Every tensor of t must be present with the same shape; checksums are
 * verified. Returns 0 or -1 with a message naming the file and tensor. */
int lt_ckpt_load(const char *stepdir, const LtParamTable *t, LtCkptState *s, LtCkptMeta *meta,
                 char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
