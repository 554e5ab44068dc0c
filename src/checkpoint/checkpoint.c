/* checkpoint.c - training-state checkpoints (see checkpoint.h).
 *
 * A step directory <dir>/step_NNNNNNNN holds the state files (state.lt, or
 * state-tpT-ppP-dpD.lt per rank), meta.json (format versions 1-4, ending in
 * meta_crc32) and config.yaml; every byte of them, and of <dir>/latest, is
 * described in docs/formats.md ("Checkpoints"). meta.json is written after
 * every state file is durable, so a step directory with a meta.json that
 * matches its files is whole.
 *
 * Saving: the files are written into <dir>/.tmp-step_NNNNNNNN/ (by one
 * process, or by every rank in parallel: lt_ckpt_begin, then each rank
 * lt_state_write, then lt_ckpt_commit on one rank), which is fsynced and
 * renamed to step_NNNNNNNN (swapping atomically with an existing one of that
 * step); then <dir>/latest is replaced through latest.tmp. `latest` always
 * names the step directory saved last. One run writes a checkpoint directory.
 *
 * Loading (lt_ckpt_load_local) reads, for each tensor a rank needs, only the
 * blocks of the pieces that overlap its part, from whichever files hold them:
 * any layout loads a checkpoint of any other. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_state.h"
#include "common.h"
#include "fileio.h"
#include "json.h"

/* 3: state files listed with their layout; 4: and an uneven pipeline layer
 * split (written only then, so that builds reading 3 refuse what they would
 * misplace, and read every other checkpoint); 1 to 3 still read */
#define META_VERSION 4
#define META_MAX_BYTES (64u << 20)

/* out = a/b; -1 with err when it does not fit in PATH_MAX. */
static int join(char out[PATH_MAX], const char *a, const char *b, char *err, size_t errlen) {
    if (snprintf(out, PATH_MAX, "%s/%s", a, b) >= PATH_MAX)
        return lt_errorf(err, errlen, "path too long: %s/%s", a, b);
    return 0;
}

/* ---- meta.json ----------------------------------------------------------- */

void lt_ckpt_state_name(const LtCkptLayout *l, int tp, int pp, int dp, char *out, size_t len) {
    if (l->tp * l->pp * l->dp == 1) snprintf(out, len, "state.lt");
    else snprintf(out, len, "state-tp%d-pp%d-dp%d.lt", tp, pp, dp);
}

/* Append to a growing text buffer. */
typedef struct {
    char *s;
    size_t n, cap;
} Text;

static void __attribute__((format(printf, 2, 3))) text_add(Text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) lt_fatal("formatting checkpoint metadata");
        if (t->s && t->n + (size_t)k < t->cap) {
            t->n += (size_t)k;
            return;
        }
        t->cap = (t->cap + (size_t)k + 1) * 2;
        t->s = realloc(t->s, t->cap);
        if (!t->s) lt_fatal("out of host memory formatting checkpoint metadata");
    }
}

/* The state files of layout l with their sizes and header CRCs (read from
 * their headers, which lt_state_open checks) into a JSON array. */
static int list_files(Text *js, const char *tmp, const LtCkptLayout *l, char *err, size_t errlen) {
    text_add(js, "  \"files\": [");
    int first = 1;
    for (int pp = 0; pp < l->pp; pp++)
        for (int tp = 0; tp < l->tp; tp++)
            for (int dp = 0; dp < l->dp; dp++) {
                char name[96], path[PATH_MAX];
                lt_ckpt_state_name(l, tp, pp, dp, name, sizeof name);
                if (join(path, tmp, name, err, errlen)) return -1;
                uint64_t bytes;
                uint32_t crc;
                if (lt_state_header(path, &bytes, &crc, err, errlen)) return -1;
                text_add(js, "%s\n    {\"name\": \"%s\", \"tp\": %d, \"pp\": %d, \"dp\": %d, "
                             "\"bytes\": %lld, \"crc32\": %u}",
                         first ? "" : ",", name, tp, pp, dp, (long long)bytes, (unsigned)crc);
                first = 0;
            }
    text_add(js, "\n  ],\n");
    return 0;
}

/* The mixture-of-experts shape, for an MoE model only (a dense model's
 * meta.json has none of these keys). */
static void write_meta_moe(Text *js, const LtModelDims *d) {
    if (d->moe.experts == 0) return;
    text_add(js, "  \"num_experts\": %d,\n  \"moe_router_topk\": %d,\n"
                 "  \"moe_ffn_hidden_size\": %d,\n  \"moe_shared_expert_intermediate_size\": %d,\n"
                 "  \"moe_layer_pattern\": [",
             d->moe.experts, d->moe.topk, d->moe.ffn, d->moe.shared_ffn);
    for (int l = 0; l < d->num_layers && l < LT_MOE_MAX_LAYERS; l++)
        text_add(js, "%s%d", l ? ", " : "", d->moe.layer[l] ? 1 : 0);
    text_add(js, "],\n");
    if (d->moe.shared_gate) /* (absent: false, as before the key) */
        text_add(js, "  \"moe_shared_expert_gate\": true,\n");
}

static int write_meta(const char *path, const char *tmp, const LtParamTable *g, const LtCkptMeta *m,
                      const LtCkptLayout *l, int optimizer_state, char *err, size_t errlen) {
    const LtModelDims *d = &g->dims;
    Text js = {0};
    text_add(&js,
             "{\n  \"format\": \"lattice-checkpoint\",\n  \"format_version\": %d,\n"
             "  \"step\": %ld,\n  \"samples_consumed\": %" PRIu64 ",\n  \"seed\": %" PRIu64 ",\n"
             "  \"data_seed\": %" PRIu64 ",\n  \"rng_state\": %" PRIu64 ",\n"
             "  \"optimizer_steps\": %ld,\n"
             "  \"arch\": \"%s\",\n  \"num_query_groups\": %d,\n"
             "  \"untie_embeddings_and_output_weights\": %s,\n"
             "  \"num_layers\": %d,\n  \"hidden_size\": %d,\n  \"num_attention_heads\": %d,\n"
             "  \"ffn_hidden_size\": %d,\n  \"seq_length\": %d,\n  \"max_position_embeddings\": %d,\n"
             "  \"vocab_size\": %d,\n  \"padded_vocab_size\": %d,\n  \"num_parameters\": %zu,\n"
             "  \"optimizer_state\": %s,\n"
             "  \"tensor_model_parallel_size\": %d,\n  \"pipeline_model_parallel_size\": %d,\n"
             "  \"virtual_pipeline_model_parallel_size\": %d,\n  \"data_parallel_size\": %d,\n"
             "  \"zero_stage\": %d,\n  \"num_layers_in_first_pipeline_stage\": %d,\n"
             "  \"num_layers_in_last_pipeline_stage\": %d,\n"
             "  \"account_for_embedding_in_pipeline_split\": %s,\n"
             "  \"account_for_loss_in_pipeline_split\": %s,\n",
             lt_layer_split_even(&l->split) ? 3 : META_VERSION, m->step, m->samples_consumed,
             m->seed, m->data_seed, m->rng_state,
             m->optimizer_steps >= 0 && m->optimizer_steps <= m->step ? m->optimizer_steps : m->step,
             lt_arch_name((LtArch)d->arch), lt_dims_kv_heads(d), d->untied ? "true" : "false",
             d->num_layers, d->hidden, d->heads, d->ffn, d->seq_len, d->max_pos, d->vocab,
             d->padded_vocab, g->total, optimizer_state ? "true" : "false", l->tp, l->pp, l->vpp,
             l->dp, l->zero_stage, l->split.first, l->split.last,
             l->split.embedding ? "true" : "false", l->split.loss ? "true" : "false");
    write_meta_moe(&js, d);
    if (list_files(&js, tmp, l, err, errlen)) {
        free(js.s);
        return -1;
    }
    /* the last key guards every byte before its line: an edited step (which
     * moves the data position and the LR schedule) is refused at load */
    text_add(&js, "  \"meta_crc32\": %u\n}\n", (unsigned)lt_crc32(0, js.s, js.n));
    int rc;
    FILE *f = fopen(path, "w");
    if (!f) rc = lt_errorf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    else if (fwrite(js.s, 1, js.n, f) != js.n) {
        fclose(f);
        rc = lt_errorf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    } else rc = lt_file_commit(f, path, err, errlen);
    free(js.s);
    return rc;
}

/* meta.json, read and checked. */
typedef struct {
    LtCkptMeta m;
    int version;
    LtModelDims d;          /* the dims it records (arch, groups, tying default to GPT-2's) */
    LtCkptLayout layout;    /* version 3; else one process */
    struct MetaFile {
        char name[96];
        int pp;             /* its pipeline rank (0 before version 3) */
        uint64_t bytes;     /* 0: not recorded (versions 1 and 2) */
        uint32_t crc;
    } *files;
    int nfiles;
} MetaInfo;

static void meta_info_free(MetaInfo *mi) { free(mi->files); }

/* An unsigned integer member of meta.json; `need` 0 makes it optional (*out unchanged). */
static int meta_u64(const LtJson *o, const char *key, uint64_t *out, int need, const char *path,
                    char *err, size_t errlen) {
    const LtJson *v = lt_json_get(o, key);
    if (!v) return need ? lt_errorf(err, errlen, "%s has no key '%s'", path, key) : 0;
    if (lt_json_u64(v, out))
        return lt_errorf(err, errlen, "%s: '%s' is not an unsigned integer", path, key);
    return 0;
}

static int meta_int(const LtJson *o, const char *key, int *out, int need, const char *path,
                    char *err, size_t errlen) {
    uint64_t v = (uint64_t)*out;
    if (meta_u64(o, key, &v, need, path, err, errlen)) return -1;
    if (v > INT_MAX) return lt_errorf(err, errlen, "%s: '%s' is out of range", path, key);
    *out = (int)v;
    return 0;
}

/* An optional boolean: absent is false. */
static int meta_flag(const LtJson *o, const char *key, int *out, const char *path, char *err,
                     size_t errlen) {
    const LtJson *v = lt_json_get(o, key);
    *out = 0;
    if (!v) return 0;
    if (v->type != LT_JSON_BOOL) return lt_errorf(err, errlen, "%s: '%s' is not true or false", path, key);
    *out = v->boolean;
    return 0;
}

/* The mixture-of-experts shape (write_meta_moe); absent: a dense model. */
static int meta_moe(const LtJson *o, LtModelDims *d, const char *path, char *err, size_t errlen) {
    LtMoeDims *e = &d->moe;
    memset(e, 0, sizeof *e);
    if (meta_int(o, "num_experts", &e->experts, 0, path, err, errlen)) return -1;
    if (e->experts == 0) return 0;
    if (meta_int(o, "moe_router_topk", &e->topk, 1, path, err, errlen) ||
        meta_int(o, "moe_ffn_hidden_size", &e->ffn, 1, path, err, errlen) ||
        meta_int(o, "moe_shared_expert_intermediate_size", &e->shared_ffn, 0, path, err, errlen) ||
        meta_flag(o, "moe_shared_expert_gate", &e->shared_gate, path, err, errlen))
        return -1;
    const LtJson *p = lt_json_get(o, "moe_layer_pattern");
    if (!p || p->type != LT_JSON_ARRAY || p->n != d->num_layers || p->n > LT_MOE_MAX_LAYERS)
        return lt_errorf(err, errlen, "%s: 'moe_layer_pattern' is not a list of num_layers (%d) "
                         "0s and 1s", path, d->num_layers);
    for (int l = 0; l < p->n; l++) {
        uint64_t v;
        if (lt_json_u64(&p->kids[l], &v) || v > 1)
            return lt_errorf(err, errlen, "%s: 'moe_layer_pattern' entry %d is not 0 or 1", path, l);
        e->layer[l] = (unsigned char)v;
    }
    return 0;
}

static int meta_dims(const LtJson *o, MetaInfo *mi, const char *path, char *err, size_t errlen) {
    LtModelDims *d = &mi->d;
    const LtJson *arch = lt_json_get(o, "arch"), *untied = lt_json_get(o, "untie_embeddings_and_output_weights");
    d->arch = LT_ARCH_GPT;
    if (arch && arch->type == LT_JSON_STRING && !strcmp(arch->text, "llama")) d->arch = LT_ARCH_LLAMA;
    else if (arch && !(arch->type == LT_JSON_STRING && !strcmp(arch->text, "gpt")))
        return lt_errorf(err, errlen, "%s: 'arch' is neither \"gpt\" nor \"llama\"", path);
    d->untied = untied && untied->type == LT_JSON_BOOL && untied->boolean;
    if (meta_int(o, "num_layers", &d->num_layers, 1, path, err, errlen) ||
        meta_int(o, "hidden_size", &d->hidden, 1, path, err, errlen) ||
        meta_int(o, "num_attention_heads", &d->heads, 1, path, err, errlen) ||
        meta_int(o, "ffn_hidden_size", &d->ffn, 0, path, err, errlen) ||
        meta_int(o, "seq_length", &d->seq_len, 0, path, err, errlen) ||
        meta_int(o, "max_position_embeddings", &d->max_pos, 0, path, err, errlen) ||
        meta_int(o, "vocab_size", &d->vocab, 1, path, err, errlen) ||
        meta_int(o, "padded_vocab_size", &d->padded_vocab, 0, path, err, errlen))
        return -1;
    d->kv_heads = d->heads;
    if (meta_int(o, "num_query_groups", &d->kv_heads, 0, path, err, errlen)) return -1;
    return meta_moe(o, d, path, err, errlen);
}

static int meta_files(const LtJson *o, MetaInfo *mi, const char *path, char *err, size_t errlen) {
    LtCkptLayout *l = &mi->layout;
    *l = (LtCkptLayout){1, 1, 1, 1, 0, {0}};
    if (mi->version < 3) { /* one state.lt, its size and CRC not recorded */
        mi->nfiles = 1;
        mi->files = lt_calloc(sizeof *mi->files);
        snprintf(mi->files[0].name, sizeof mi->files[0].name, "state.lt");
        return 0;
    }
    if (meta_int(o, "tensor_model_parallel_size", &l->tp, 1, path, err, errlen) ||
        meta_int(o, "pipeline_model_parallel_size", &l->pp, 1, path, err, errlen) ||
        meta_int(o, "virtual_pipeline_model_parallel_size", &l->vpp, 1, path, err, errlen) ||
        meta_int(o, "data_parallel_size", &l->dp, 1, path, err, errlen) ||
        meta_int(o, "zero_stage", &l->zero_stage, 1, path, err, errlen) ||
        meta_int(o, "num_layers_in_first_pipeline_stage", &l->split.first, 0, path, err, errlen) ||
        meta_int(o, "num_layers_in_last_pipeline_stage", &l->split.last, 0, path, err, errlen) ||
        meta_flag(o, "account_for_embedding_in_pipeline_split", &l->split.embedding, path, err,
                  errlen) ||
        meta_flag(o, "account_for_loss_in_pipeline_split", &l->split.loss, path, err, errlen))
        return -1;
    if (l->tp < 1 || l->pp < 1 || l->vpp < 1 || l->dp < 1)
        return lt_errorf(err, errlen, "%s: a parallel size is zero", path);
    char why[512];
    if (lt_layer_split_check(&l->split, mi->d.num_layers, l->pp, l->vpp, why, sizeof why))
        return lt_errorf(err, errlen, "%s: its pipeline layout does not cut the model: %s", path, why);
    const LtJson *fs = lt_json_get(o, "files");
    if (!fs || fs->type != LT_JSON_ARRAY || fs->n < 1)
        return lt_errorf(err, errlen, "%s: 'files' is not a non-empty array", path);
    if ((uint64_t)l->tp * (uint64_t)l->pp * (uint64_t)l->dp != (uint64_t)fs->n)
        return lt_errorf(err, errlen, "%s lists %d state files for a layout of tp %d x pp %d x dp %d",
                         path, fs->n, l->tp, l->pp, l->dp);
    mi->nfiles = fs->n;
    mi->files = lt_calloc(sizeof *mi->files * (size_t)fs->n);
    for (int i = 0; i < fs->n; i++) {
        const LtJson *e = &fs->kids[i], *name = lt_json_get(e, "name");
        struct MetaFile *mf = &mi->files[i];
        uint64_t crc = 0;
        if (!name || name->type != LT_JSON_STRING || !name->text[0] || strchr(name->text, '/') ||
            name->text[0] == '.' || strlen(name->text) >= sizeof mf->name)
            return lt_errorf(err, errlen, "%s: files[%d] has no valid 'name'", path, i);
        snprintf(mf->name, sizeof mf->name, "%s", name->text);
        if (meta_u64(e, "bytes", &mf->bytes, 1, path, err, errlen) ||
            meta_u64(e, "crc32", &crc, 1, path, err, errlen) ||
            meta_int(e, "pp", &mf->pp, 1, path, err, errlen))
            return -1;
        if (crc > UINT32_MAX || mf->bytes < 64 || mf->pp >= l->pp)
            return lt_errorf(err, errlen, "%s: files[%d] ('%s') has an invalid size or CRC", path, i,
                             mf->name);
        mf->crc = (uint32_t)crc;
    }
    return 0;
}

static int read_meta_info(const char *stepdir, MetaInfo *mi, char *err, size_t errlen) {
    memset(mi, 0, sizeof *mi);
    char path[PATH_MAX];
    if (join(path, stepdir, "meta.json", err, errlen)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return lt_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    char *js = lt_malloc(META_MAX_BYTES + 1);
    size_t n = fread(js, 1, META_MAX_BYTES, f);
    int toolong = n == META_MAX_BYTES && fgetc(f) != EOF;
    fclose(f);
    js[n] = '\0';
    LtJson *o = NULL;
    int rc = -1;
    uint64_t version = 0, step = 0, os;
    if (toolong) {
        lt_errorf(err, errlen, "%s is unexpectedly large", path);
        goto out;
    }
    if (!(o = lt_json_parse(js, n, path, err, errlen))) goto out;
    if (o->type != LT_JSON_OBJECT) {
        lt_errorf(err, errlen, "%s is not a JSON object", path);
        goto out;
    }
    if (meta_u64(o, "format_version", &version, 1, path, err, errlen)) goto out;
    if (version < 1 || version > META_VERSION) {
        lt_errorf(err, errlen, "%s has format version %" PRIu64 "; this build reads versions 1 to %d",
                  path, version, META_VERSION);
        goto out;
    }
    mi->version = (int)version;
    if (version >= 2) { /* the CRC of every byte before the meta_crc32 line */
        uint64_t want;
        const char *key = strstr(js, "\"meta_crc32\"");
        if (meta_u64(o, "meta_crc32", &want, 1, path, err, errlen)) goto out;
        const char *line = key;
        while (line && line > js && line[-1] != '\n') line--;
        if (!key || lt_crc32(0, js, (size_t)(line - js)) != want) {
            lt_errorf(err, errlen, "%s was modified after it was written (meta_crc32 mismatch): "
                      "refusing to resume from edited metadata", path);
            goto out;
        }
    }
    LtCkptMeta *m = &mi->m;
    if (meta_u64(o, "step", &step, 1, path, err, errlen) ||
        meta_u64(o, "samples_consumed", &m->samples_consumed, 1, path, err, errlen) ||
        meta_u64(o, "seed", &m->seed, 1, path, err, errlen) ||
        meta_u64(o, "data_seed", &m->data_seed, 1, path, err, errlen) ||
        meta_u64(o, "rng_state", &m->rng_state, 1, path, err, errlen))
        goto out;
    if (step > LONG_MAX) {
        lt_errorf(err, errlen, "%s: step out of range", path);
        goto out;
    }
    m->step = (long)step;
    os = step; /* written since skipped steps exist; older files: = step */
    if (meta_u64(o, "optimizer_steps", &os, 0, path, err, errlen)) goto out;
    if (os > step) {
        lt_errorf(err, errlen, "%s: optimizer_steps %" PRIu64 " exceeds step %" PRIu64, path, os, step);
        goto out;
    }
    m->optimizer_steps = (long)os;
    const LtJson *opt = lt_json_get(o, "optimizer_state");
    m->weights_only = opt && opt->type == LT_JSON_BOOL && !opt->boolean;
    rc = meta_dims(o, mi, path, err, errlen) || meta_files(o, mi, path, err, errlen) ? -1 : 0;
    m->padded_vocab = mi->d.padded_vocab;
out:
    lt_json_free(o);
    free(js);
    if (rc) meta_info_free(mi);
    return rc;
}

int lt_ckpt_read_meta(const char *stepdir, LtCkptMeta *meta, char *err, size_t errlen) {
    MetaInfo mi;
    if (read_meta_info(stepdir, &mi, err, errlen)) return -1;
    *meta = mi.m;
    meta_info_free(&mi);
    return 0;
}

/* ---- saving -------------------------------------------------------------- */

/* <dir>/<name> for the names of one step's save. */
typedef struct {
    char name[64], tmp[PATH_MAX], final[PATH_MAX], aside[PATH_MAX], latest[PATH_MAX],
        latest_tmp[PATH_MAX];
} SavePaths;

static int save_paths(const char *dir, long step, SavePaths *sp, char *err, size_t errlen) {
    char tmpname[96], asidename[96];
    snprintf(sp->name, sizeof sp->name, "step_%08ld", step);
    snprintf(tmpname, sizeof tmpname, ".tmp-%s", sp->name);
    snprintf(asidename, sizeof asidename, ".old-%s", sp->name);
    return join(sp->tmp, dir, tmpname, err, errlen) || join(sp->final, dir, sp->name, err, errlen) ||
                   join(sp->aside, dir, asidename, err, errlen) ||
                   join(sp->latest, dir, "latest", err, errlen) ||
                   join(sp->latest_tmp, dir, "latest.tmp", err, errlen)
               ? -1
               : 0;
}

int lt_ckpt_begin(const char *dir, long step, int create, char *tmp, size_t len, char *err,
                  size_t errlen) {
    if (step < 0) return lt_errorf(err, errlen, "checkpoint save: negative step %ld", step);
    SavePaths sp;
    if (save_paths(dir, step, &sp, err, errlen)) return -1;
    if (snprintf(tmp, len, "%s", sp.tmp) >= (int)len) return lt_errorf(err, errlen, "path too long: %s", sp.tmp);
    if (!create) return 0;
    if (lt_mkdir_p(dir, err, errlen)) return -1;
    lt_remove_tree(sp.tmp); /* left by a save of this step that did not finish */
    if (mkdir(sp.tmp, 0777) != 0)
        return lt_errorf(err, errlen, "cannot create directory %s: %s", sp.tmp, strerror(errno));
    return 0;
}

void lt_ckpt_abort(const char *tmp) { lt_remove_tree(tmp); }

/* Move the complete directory tmp to final. An existing final (same step
 * saved again) is swapped out atomically where the filesystem supports
 * RENAME_EXCHANGE, else moved aside first; the old contents are removed. */
static int install_dir(const char *tmp, const char *final, const char *aside, char *err, size_t errlen) {
    if (rename(tmp, final) == 0) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST)
        return lt_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        lt_remove_tree(tmp); /* now holds the replaced checkpoint */
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS)
        return lt_errorf(err, errlen, "cannot replace %s: %s", final, strerror(errno));
    if (lt_remove_tree(aside) != 0 || rename(final, aside) != 0)
        return lt_errorf(err, errlen, "cannot move %s aside to %s: %s", final, aside, strerror(errno));
    if (rename(tmp, final) != 0) {
        int e = errno;
        rename(aside, final);
        return lt_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(e));
    }
    lt_remove_tree(aside);
    return 0;
}

int lt_ckpt_commit(const char *dir, const char *tmp, const LtParamTable *g, const LtCkptMeta *meta,
                   const LtCkptLayout *l, int optimizer_state, const LtConfig *cfg, char *err,
                   size_t errlen) {
    SavePaths sp;
    char path[PATH_MAX];
    if (save_paths(dir, meta->step, &sp, err, errlen)) return -1;
    if (strcmp(tmp, sp.tmp) != 0) return lt_errorf(err, errlen, "checkpoint commit: %s is not %s", tmp, sp.tmp);
    int rc = join(path, tmp, "config.yaml", err, errlen);
    if (rc == 0) {
        FILE *f = fopen(path, "w");
        if (!f) rc = lt_errorf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        else {
            lt_config_print(cfg, f);
            rc = lt_file_commit(f, path, err, errlen);
        }
    }
    /* meta.json last: the state files are durable (each writer synced its own) */
    if (rc == 0) rc = join(path, tmp, "meta.json", err, errlen) ||
                      write_meta(path, tmp, g, meta, l, optimizer_state, err, errlen) ||
                      lt_fsync_dir(tmp, err, errlen) || install_dir(tmp, sp.final, sp.aside, err, errlen)
                          ? -1 : 0;
    if (rc) {
        lt_remove_tree(tmp);
        return -1;
    }
    if (lt_fsync_dir(dir, err, errlen)) return -1;
    FILE *f = fopen(sp.latest_tmp, "w");
    if (!f) return lt_errorf(err, errlen, "cannot create %s: %s", sp.latest_tmp, strerror(errno));
    fprintf(f, "%s\n", sp.name);
    if (lt_file_commit(f, sp.latest_tmp, err, errlen) ||
        lt_rename_durable(sp.latest_tmp, sp.latest, err, errlen)) {
        remove(sp.latest_tmp);
        return -1;
    }
    return 0;
}

/* ---- loading ------------------------------------------------------------- */

/* The mixture-of-experts shape of a checkpoint and a model (num_layers
 * already agree): num_experts, and for MoE models the router's top-k, the
 * expert widths and which layers are MoE layers. */
static int check_moe_dims(const char *stepdir, const LtModelDims *c, const LtModelDims *m,
                          char *err, size_t errlen) {
    const LtMoeDims *a = &c->moe, *b = &m->moe;
    struct { const char *field; long ckpt, model; } f[] = {
        {"num_experts", a->experts, b->experts},
        {"moe_router_topk", a->topk, b->topk},
        {"moe_ffn_hidden_size", a->ffn, b->ffn},
        {"moe_shared_expert_intermediate_size", a->shared_ffn, b->shared_ffn},
        {"moe_shared_expert_gate", a->shared_gate, b->shared_gate},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0] && (i == 0 || b->experts); i++)
        if (f[i].ckpt != f[i].model)
            return lt_errorf(err, errlen, "checkpoint %s does not fit this model: %s is %ld in "
                             "the checkpoint, %ld in the model", stepdir, f[i].field, f[i].ckpt,
                             f[i].model);
    for (int l = 0; b->experts && l < m->num_layers && l < LT_MOE_MAX_LAYERS; l++)
        if (!a->layer[l] != !b->layer[l])
            return lt_errorf(err, errlen, "checkpoint %s does not fit this model: layer %d is %s "
                             "in the checkpoint and %s in the model (model.moe_layer_freq)",
                             stepdir, l, a->layer[l] ? "an MoE layer" : "dense",
                             b->layer[l] ? "an MoE layer" : "dense");
    return 0;
}

/* 1 when some layer of d has the dense FFN (model.ffn_hidden_size wide): a
 * model with experts in every layer has no parameter of that width. */
static int has_dense_ffn(const LtModelDims *d) {
    for (int l = 0; l < d->num_layers; l++)
        if (!lt_dims_moe_layer(d, l)) return 1;
    return 0;
}

/* The model-shape fields of a checkpoint and a model must agree (the padded
 * vocabulary may differ: it depends on the TP size; the dense FFN width only
 * matters where both have a dense FFN layer). */
static int check_dims(const char *stepdir, const LtModelDims *c, const LtModelDims *m, char *err,
                      size_t errlen) {
    const int dense = has_dense_ffn(c) && has_dense_ffn(m);
    struct { const char *field; long ckpt, model; } f[] = {
        {"arch (0 gpt, 1 llama)", c->arch, m->arch},
        {"num_layers", c->num_layers, m->num_layers},
        {"hidden_size", c->hidden, m->hidden},
        {"num_attention_heads", c->heads, m->heads},
        {"num_query_groups", c->kv_heads, lt_dims_kv_heads(m)},
        {"ffn_hidden_size", dense ? c->ffn : 0, dense ? m->ffn : 0},
        {"vocab_size", c->vocab, m->vocab},
        {"untie_embeddings_and_output_weights", c->untied, m->untied},
        {"max_position_embeddings", m->arch == LT_ARCH_GPT ? c->max_pos : 0,
         m->arch == LT_ARCH_GPT ? m->max_pos : 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].ckpt != f[i].model)
            return lt_errorf(err, errlen,
                             "checkpoint %s does not fit this model: %s is %ld in the checkpoint, "
                             "%ld in the model",
                             stepdir, f[i].field, f[i].ckpt, f[i].model);
    return check_moe_dims(stepdir, c, m, err, errlen);
}

static void shape_str(char *out, size_t n, const int64_t s[2], int ndim) {
    if (ndim == 1) snprintf(out, n, "(%lld)", (long long)s[0]);
    else snprintf(out, n, "(%lld,%lld)", (long long)s[0], (long long)s[1]);
}

/* The opened state files of a step directory. */
typedef struct {
    LtStateFile **f;
    int n;
} StateFiles;

static void state_files_close(StateFiles *s) {
    for (int i = 0; i < s->n; i++) lt_state_close(s->f[i]);
    free(s->f);
}

/* Which pipeline ranks of the saving layout own (not as a tied copy) a
 * parameter of t: need[q] = 1. Only their state files are opened. */
static void pp_needed(const MetaInfo *mi, const LtParamTable *t, unsigned char *need) {
    const LtCkptLayout *l = &mi->layout;
    for (int q = 0; q < l->pp; q++) {
        need[q] = 0;
        /* (check_dims made the other dims the model's own, so they build a table) */
        if (l->pp == 1 || mi->d.padded_vocab < mi->d.vocab) {
            need[q] = 1; /* no pipeline, or dims that do not build a table: open everything */
            continue;
        }
        LtParamTable st; /* (meta_files checked the split) */
        lt_params_build_stage(&st, &mi->d, 1, 0, (LtStagePlace){l->pp, q, l->vpp, l->split});
        for (int i = 0; i < st.n && !need[q]; i++)
            if (!st.p[i].tied_copy && lt_params_find(t, st.p[i].name)) need[q] = 1;
        lt_params_free(&st);
    }
}

static int state_files_open(const char *stepdir, const MetaInfo *mi, const LtParamTable *t, StateFiles *s,
                       char *err, size_t errlen) {
    s->f = lt_calloc(sizeof *s->f * (size_t)mi->nfiles);
    s->n = 0;
    unsigned char *need = lt_calloc((size_t)mi->layout.pp);
    pp_needed(mi, t, need);
    int rc = 0;
    for (int i = 0; rc == 0 && i < mi->nfiles; i++) {
        char path[PATH_MAX];
        const struct MetaFile *mf = &mi->files[i];
        uint64_t bytes;
        uint32_t crc;
        if (join(path, stepdir, mf->name, err, errlen)) {
            rc = -1;
        } else if (mf->pp >= mi->layout.pp || !need[mf->pp]) {
            /* not read, but there and as listed: a checkpoint is loaded whole or not at all */
            if (lt_state_header(path, &bytes, &crc, err, errlen)) rc = -1;
            else if (bytes != mf->bytes || crc != mf->crc)
                rc = lt_errorf(err, errlen, "%s is %llu bytes with header CRC %u, meta.json says "
                               "%llu and %u (truncated or replaced)", path, (unsigned long long)bytes,
                               (unsigned)crc, (unsigned long long)mf->bytes, (unsigned)mf->crc);
        } else if (!(s->f[s->n] = lt_state_open(path, mf->bytes, mf->crc, err, errlen))) {
            rc = -1;
        } else {
            s->n++;
        }
    }
    free(need);
    if (rc) state_files_close(s);
    return rc;
}

/* Load kind k of parameter p, local elements [a, b), into dst (dst[0] is
 * element a). */
static int load_param(const char *stepdir, const StateFiles *s, const LtParamTable *t, const LtParam *p,
                      int k, size_t a, size_t b, float *dst, unsigned char *buf, size_t buf_bytes,
                      char *err, size_t errlen) {
    char name[160];
    snprintf(name, sizeof name, "%s/%s", lt_ckpt_kind_name[k], p->name);
    int64_t cs[2] = {0, 0}, ms[2] = {p->gshape[0], p->ndim == 2 ? p->gshape[1] : 1};
    int found = 0;
    for (int i = 0; i < s->n && !found; i++) found = lt_state_shape(s->f[i], name, cs) == 0;
    if (!found) {
        if (k == 0) return lt_errorf(err, errlen, "checkpoint %s has no tensor '%s'", stepdir, p->name);
        return lt_errorf(err, errlen, "checkpoint %s has no optimizer state tensor '%s'", stepdir, name);
    }
    /* rows past the true vocabulary are padding (zero): their count may differ */
    const int vocab_rows = (int)(p - t->p) == t->idx_wte || (int)(p - t->p) == t->idx_head;
    if (cs[1] != ms[1] || (cs[0] != ms[0] && !(vocab_rows && cs[0] >= t->dims.vocab))) {
        char x[64], y[64];
        shape_str(x, sizeof x, cs, p->ndim);
        shape_str(y, sizeof y, ms, p->ndim);
        return lt_errorf(err, errlen, "%s: shape mismatch for '%s': checkpoint %s, model %s", stepdir,
                         p->name, x, y);
    }
    const int64_t rows = cs[0] < ms[0] ? cs[0] : ms[0];
    LtRect rc[LT_MAX_RECTS];
    const int nr = lt_param_rects(t, p, a - p->offset, b - p->offset, rc);
    for (int j = 0; j < nr; j++) {
        float *d = dst + (p->offset + rc[j].local - a);
        memset(d, 0, sizeof(float) * (size_t)(rc[j].nr * rc[j].nc));
        LtRect want = rc[j];
        if (want.r0 + want.nr > rows) want.nr = rows > want.r0 ? rows - want.r0 : 0;
        if (want.nr == 0) continue; /* padding rows only */
        uint64_t covered = 0;
        for (int i = 0; i < s->n; i++)
            if (lt_state_read(s->f[i], name, &want, d, buf, buf_bytes, &covered, err, errlen)) return -1;
        const uint64_t need = (uint64_t)(want.nr * want.nc);
        if (covered != need)
            return lt_errorf(err, errlen,
                             "checkpoint %s: its files hold %" PRIu64 " of the %" PRIu64
                             " elements of '%s' rows %lld..%lld columns %lld..%lld that this rank "
                             "needs (%s)",
                             stepdir, covered, need, name, (long long)want.r0,
                             (long long)(want.r0 + want.nr - 1), (long long)want.c0,
                             (long long)(want.c0 + want.nc - 1),
                             covered < need ? "a state file is missing pieces" : "pieces overlap");
    }
    /* a diverged model is not resumed, evaluated or exported */
    for (size_t e = 0; e < b - a; e++)
        if (!isfinite(dst[e]))
            return lt_errorf(err, errlen,
                             "checkpoint %s: tensor '%s' holds a non-finite value (%g at element %zu "
                             "of this rank's part): the model it saved had diverged",
                             stepdir, name, (double)dst[e], a - p->offset + e);
    return 0;
}

/* For a reader that keeps no moments (eval, sample, export): kind k over the
 * elements [lo, hi) read in pieces through a scratch buffer, only so that
 * load_param checks them (CRC, shape, finite): a diverged optimizer state is
 * refused by every reader, not only by resume. */
static int check_kind(const char *stepdir, const StateFiles *s, const LtParamTable *t, int k,
                      size_t lo, size_t hi, unsigned char *buf, size_t buf_bytes, char *err,
                      size_t errlen) {
    const size_t piece = (size_t)1 << 20;
    float *tmp = lt_ckpt_mem_alloc(sizeof(float) * piece);
    int rc = 0;
    for (int i = 0; rc == 0 && i < t->n; i++) {
        const LtParam *p = &t->p[i];
        const size_t a = p->offset > lo ? p->offset : lo;
        const size_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        for (size_t x = a; rc == 0 && x < b; x += piece)
            rc = load_param(stepdir, s, t, p, k, x, b - x < piece ? b : x + piece, tmp, buf,
                            buf_bytes, err, errlen);
    }
    lt_ckpt_mem_free(tmp, sizeof(float) * piece);
    return rc;
}

int lt_ckpt_load_local(const char *stepdir, const LtParamTable *t, float *master, size_t lo,
                       size_t hi, float *m, float *v, size_t io_bytes, LtCkptMeta *meta, char *err,
                       size_t errlen) {
    if (!master) return lt_errorf(err, errlen, "checkpoint load: no master weight buffer");
    MetaInfo mi;
    if (read_meta_info(stepdir, &mi, err, errlen)) return -1;
    if (check_dims(stepdir, &mi.d, &t->dims, err, errlen) ||
        ((m || v) && mi.m.weights_only &&
         lt_errorf(err, errlen, "checkpoint %s holds no optimizer state (weights only)", stepdir))) {
        meta_info_free(&mi);
        return -1;
    }
    StateFiles s;
    if (state_files_open(stepdir, &mi, t, &s, err, errlen)) {
        meta_info_free(&mi);
        return -1;
    }
    /* (a rank reads at most its own elements plus the rest of their CRC blocks) */
    size_t buf_bytes = io_bytes < 4096 ? 4096 : io_bytes / 4 * 4;
    const size_t enough = 4 * t->total > ((size_t)1 << 20) ? 4 * t->total : ((size_t)1 << 20);
    if (buf_bytes > enough) buf_bytes = enough;
    unsigned char *buf = lt_ckpt_mem_alloc(buf_bytes);
    float *arr[LT_CKPT_KINDS] = {master, m, v};
    int rc = 0;
    for (int k = 0; rc == 0 && k < LT_CKPT_KINDS; k++) {
        if (!arr[k]) continue;
        const size_t r0 = k == 0 ? 0 : lo, r1 = k == 0 ? t->total : hi;
        for (int i = 0; rc == 0 && i < t->n; i++) {
            const LtParam *p = &t->p[i];
            size_t a = p->offset > r0 ? p->offset : r0;
            size_t b = p->offset + p->numel < r1 ? p->offset + p->numel : r1;
            if (a < b)
                rc = load_param(stepdir, &s, t, p, k, a, b, arr[k] + (a - r0), buf, buf_bytes, err,
                                errlen);
        }
    }
    for (int k = 1; rc == 0 && !mi.m.weights_only && k < LT_CKPT_KINDS; k++)
        if (!arr[k]) rc = check_kind(stepdir, &s, t, k, lo, hi, buf, buf_bytes, err, errlen);
    lt_ckpt_mem_free(buf, buf_bytes);
    state_files_close(&s);
    if (rc == 0 && meta) *meta = mi.m;
    meta_info_free(&mi);
    return rc;
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
        if (lt_remove_tree(path) != 0) {
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
        if (lt_remove_tree(path) != 0) {
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
    if (!lt_file_exists(probe)) return 0;
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
    if (lt_file_exists(probe)) {
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
        if (join(dir, base, name, err, errlen) || join(state, dir, "meta.json", err, errlen)) return -1;
        if (!lt_file_exists(state))
            return lt_errorf(err, errlen, "%s names %s, which has no meta.json", probe, dir);
        if (snprintf(stepdir, len, "%s", dir) >= (int)len) return lt_errorf(err, errlen, "path too long: %s", dir);
        return 0;
    }
    if (join(probe, base, "meta.json", err, errlen)) return -1;
    if (lt_file_exists(probe)) {
        if (snprintf(stepdir, len, "%s", base) >= (int)len) return lt_errorf(err, errlen, "path too long: %s", base);
        return 0;
    }
    return lt_errorf(err, errlen,
                "%s is not a checkpoint: neither a checkpoint directory (no 'latest') "
                "nor a step directory (no 'meta.json')",
                base);
}

int lt_ckpt_load_config(const char *stepdir, LtConfig *cfg, char *err, size_t errlen) {
    char path[PATH_MAX];
    if (join(path, stepdir, "config.yaml", err, errlen)) return -1;
    if (!lt_file_exists(path)) return lt_errorf(err, errlen, "checkpoint %s has no config.yaml", stepdir);
    lt_config_defaults(cfg);
    return lt_config_load(cfg, path, 0, NULL, err, errlen);
}

int lt_ckpt_save(const char *dir, const LtParamTable *t, const LtCkptState *s,
                 const LtCkptMeta *meta, const LtConfig *cfg, char *err, size_t errlen) {
    if (!s || !s->master || !meta || !cfg)
        return lt_errorf(err, errlen, "checkpoint save: master weights, meta and config are required");
    const LtCkptLayout one = {1, 1, 1, 1, 0, {0}};
    char tmp[PATH_MAX], path[PATH_MAX], name[96];
    if (lt_ckpt_begin(dir, meta->step, 1, tmp, sizeof tmp, err, errlen)) return -1;
    lt_ckpt_state_name(&one, 0, 0, 0, name, sizeof name);
    const int moments = s->m && s->v;
    LtStateSrc src = {t, 0, t->total, 1, {s->master, moments ? s->m : NULL, moments ? s->v : NULL}, NULL};
    uint64_t bytes;
    uint32_t crc;
    if (join(path, tmp, name, err, errlen) ||
        lt_state_write(path, &src, (size_t)cfg->checkpoint.io_buffer_mib << 20, &bytes, &crc, err,
                       errlen)) {
        lt_ckpt_abort(tmp);
        return -1;
    }
    return lt_ckpt_commit(dir, tmp, t, meta, &one, moments, cfg, err, errlen);
}

int lt_ckpt_load(const char *stepdir, const LtParamTable *t, LtCkptState *s, LtCkptMeta *meta,
                 char *err, size_t errlen) {
    if (!s || !s->master) return lt_errorf(err, errlen, "checkpoint load: no master weight buffer");
    return lt_ckpt_load_local(stepdir, t, s->master, 0, t->total, s->m, s->v, (size_t)4 << 20, meta,
                              err, errlen);
}
