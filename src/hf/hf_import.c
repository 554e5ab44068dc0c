/* hf_import.c - `lattice import`: a Hugging Face LlamaForCausalLM,
 * Qwen2ForCausalLM (a Llama with model.add_qkv_bias), Qwen3ForCausalLM (a
 * Llama with model.qk_layernorm), Qwen2MoeForCausalLM, Qwen3MoeForCausalLM,
 * MixtralForCausalLM, GptOssForCausalLM or GPT2LMHeadModel directory as a
 * weights-only lattice checkpoint (hf.h).
 *
 * Order of work, so that nothing is allocated from a size that has not been
 * checked: config.json becomes a lattice config (every setting the model's
 * function depends on is checked to be one lattice computes; absent keys take
 * the defaults transformers gives them), the command-line overrides are
 * applied, the config is validated; then the safetensors headers are read
 * (model.safetensors, or model.safetensors.index.json and every shard it
 * names) and every tensor the model needs is matched by name, dtype and
 * shape, and every tensor in the files must be one of them (or a known
 * non-learned buffer). Only then is the fp32 output allocated - its size is
 * bounded by the data the files hold plus the padded vocabulary rows - and
 * filled tensor by tensor: a tensor that is a block of rows of ours is read
 * straight into its place in 1 MiB chunks, a GPT-2 Conv1D weight through one
 * temporary copy for the transpose. So the memory is the output plus at most
 * one tensor, whatever the size of the model and its dtype (bf16 included).
 * The checkpoint is written by lt_ckpt_save at step 0 without Adam moments. */
#include "hf.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "common.h"
#include "config.h"
#include "fileio.h"
#include "hf/hf_config.h"
#include "json.h"
#include "safetensors.h"

/* ---- the weights: one file or the shards of an index -------------------------- */

typedef struct {
    LtStFile *files;
    unsigned char **used; /* per file, per entry: matched to a parameter or a known buffer */
    int n;
    int ntensors;
    char what[PATH_MAX];  /* for messages: the file, or the index */
} Weights;

static void weights_free(Weights *w) {
    for (int i = 0; i < w->n; i++) {
        lt_st_close(&w->files[i]);
        free(w->used[i]);
    }
    free(w->files);
    free(w->used);
    memset(w, 0, sizeof *w);
}

static int add_file(Weights *w, const char *path, char *err, size_t errlen) {
    LtStFile *f = &w->files[w->n];
    if (lt_st_open(f, path, err, errlen)) return -1;
    w->used[w->n] = lt_calloc((size_t)f->n + 1);
    w->ntensors += f->n;
    w->n++;
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp((*(const LtJson *const *)a)->key, (*(const LtJson *const *)b)->key);
}
static int str_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* model.safetensors.index.json: open each shard once and check that the index
 * and the shards agree tensor by tensor. */
static int open_sharded(Weights *w, const char *dir, const char *index, char *err, size_t errlen) {
    LtJson *js = lt_hf_read_json(index, err, errlen);
    if (!js) return -1;
    const LtJson *map = lt_json_get(js, "weight_map");
    const LtJson **byname = NULL;
    const char **shards = NULL;
    int rc = -1, ns = 0;
    if (!map || map->type != LT_JSON_OBJECT || map->n == 0) {
        lt_errorf(err, errlen, "%s has no 'weight_map' object naming the shard of each tensor", index);
        goto out;
    }
    shards = lt_malloc(sizeof *shards * (size_t)map->n);
    for (int i = 0; i < map->n; i++) {
        const LtJson *v = &map->kids[i];
        if (v->type != LT_JSON_STRING || !v->text[0] || strchr(v->text, '/') ||
            !strcmp(v->text, ".") || !strcmp(v->text, "..") || strlen(v->text) > NAME_MAX) {
            lt_errorf(err, errlen, "%s: the shard of '%s' is not a file name in %s", index, v->key, dir);
            goto out;
        }
        shards[i] = v->text;
    }
    qsort(shards, (size_t)map->n, sizeof *shards, str_cmp);
    for (int i = 0; i < map->n; i++)
        if (i == 0 || strcmp(shards[i], shards[i - 1])) shards[ns++] = shards[i];
    w->files = lt_calloc(sizeof *w->files * (size_t)ns);
    w->used = lt_calloc(sizeof *w->used * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, shards[i]) >= (int)sizeof path) {
            lt_errorf(err, errlen, "path too long: %s/%s", dir, shards[i]);
            goto out;
        }
        if (add_file(w, path, err, errlen)) goto out;
    }
    /* every listed tensor is in its shard; every tensor of a shard is listed there */
    byname = lt_malloc(sizeof *byname * (size_t)map->n);
    for (int i = 0; i < map->n; i++) byname[i] = &map->kids[i];
    qsort(byname, (size_t)map->n, sizeof *byname, name_cmp);
    for (int i = 0; i < map->n; i++) {
        const LtJson *v = byname[i];
        const LtStFile *f = NULL;
        for (int k = 0; k < w->n; k++)
            if (!strcmp(w->files[k].path + strlen(dir) + 1, v->text)) f = &w->files[k];
        if (!f || !lt_st_find(f, v->key)) {
            lt_errorf(err, errlen, "%s maps tensor '%s' to %s, which does not hold it", index, v->key,
                      v->text);
            goto out;
        }
    }
    for (int k = 0; k < w->n; k++)
        for (int e = 0; e < w->files[k].n; e++) {
            LtJson key = {.key = w->files[k].e[e].name};
            const LtJson *pk = &key, **hit = bsearch(&pk, byname, (size_t)map->n, sizeof *byname, name_cmp);
            const char *shard = w->files[k].path + strlen(dir) + 1;
            if (!hit || strcmp((*hit)->text, shard)) {
                lt_errorf(err, errlen, "%s holds tensor '%s', which %s %s", w->files[k].path,
                          key.key, index, hit ? "assigns to another shard" : "does not list");
                goto out;
            }
        }
    rc = 0;
out:
    free(byname);
    free(shards);
    lt_json_free(js);
    return rc;
}

/* The safetensors of dir: model.safetensors if present (as transformers
 * prefers it), else the sharded index. */
static int open_weights(Weights *w, const char *dir, char *err, size_t errlen) {
    char single[PATH_MAX], index[PATH_MAX], bin[PATH_MAX];
    memset(w, 0, sizeof *w);
    if (snprintf(single, sizeof single, "%s/model.safetensors", dir) >= (int)sizeof single ||
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir) >= (int)sizeof index ||
        snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir) >= (int)sizeof bin)
        return lt_errorf(err, errlen, "path too long: %s", dir);
    if (lt_file_exists(single)) {
        snprintf(w->what, sizeof w->what, "%s", single);
        w->files = lt_calloc(sizeof *w->files);
        w->used = lt_calloc(sizeof *w->used);
        return add_file(w, single, err, errlen);
    }
    if (lt_file_exists(index)) {
        snprintf(w->what, sizeof w->what, "%s", index);
        return open_sharded(w, dir, index, err, errlen);
    }
    return lt_errorf(err, errlen,
                     "%s has no model.safetensors or model.safetensors.index.json%s", dir,
                     lt_file_exists(bin) ? " (pytorch_model.bin is not read: save the model with "
                                        "safe_serialization=True)" : "");
}

/* The tensor `name` (NULL when absent); *file its file, *idx its entry. */
static const LtStEntry *weights_find(const Weights *w, const char *name, int *file, int *idx) {
    for (int k = 0; k < w->n; k++) {
        const LtStEntry *e = lt_st_find(&w->files[k], name);
        if (e) {
            *file = k;
            *idx = (int)(e - w->files[k].e);
            return e;
        }
    }
    return NULL;
}

/* Non-learned buffers some files carry: GPT-2's causal masks
 * ("<prefix>h.L.attn.bias", "...attn.masked_bias", prefix "transformer." or
 * none as the file's other names) and old Llama files' rotary tables
 * ("model.layers.L.self_attn.rotary_emb.inv_freq"). */
static int is_buffer(const char *name, LtArch arch, const char *gpt_prefix, int layers) {
    static const char *const gpt[] = {"attn.bias", "attn.masked_bias", NULL},
                             *llama[] = {"self_attn.rotary_emb.inv_freq", NULL};
    const char *p = name;
    if (arch == LT_ARCH_LLAMA) {
        if (strncmp(p, "model.layers.", 13)) return 0;
        p += 13;
    } else {
        if (strncmp(p, gpt_prefix, strlen(gpt_prefix))) return 0;
        p += strlen(gpt_prefix);
        if (strncmp(p, "h.", 2)) return 0;
        p += 2;
    }
    char *end;
    errno = 0;
    const long l = strtol(p, &end, 10);
    if (end == p || *p < '0' || *p > '9' || errno || l >= layers || *end != '.') return 0;
    for (const char *const *s = arch == LT_ARCH_LLAMA ? llama : gpt; *s; s++)
        if (!strcmp(end + 1, *s)) return 1;
    return 0;
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < n) snprintf(buf + at, n - at, ")");
}

/* Resolve every tensor of map against the files: ents[i] is map[i]'s entry
 * (in file files[i]), checked for dtype and shape; then no tensor may be left
 * over. *lm_head_tied: the file of an lm_head.weight that a tied model's
 * files hold too (to compare with the embedding), else -1. */
static int match_tensors(Weights *w, const LtHfMap *map, int n, const LtModelDims *d,
                         const LtStEntry **ents, int *files, int *lm_head_tied, char *err,
                         size_t errlen) {
    const LtArch arch = (LtArch)d->arch;
    const int layers = d->num_layers;
    const char *cls = lt_hf_class(d).cls;
    /* GPT-2 files written from GPT2Model lack the "transformer." prefix */
    int f, k;
    const int strip = arch == LT_ARCH_GPT && !weights_find(w, "transformer.wte.weight", &f, &k) &&
                      weights_find(w, "wte.weight", &f, &k) ? 12 : 0;
    for (int i = 0; i < n; i++) {
        const LtHfMap *m = &map[i];
        const char *name = m->hf + (strip && !strncmp(m->hf, "transformer.", 12) ? strip : 0);
        const LtStEntry *e = weights_find(w, name, &f, &k);
        if (!e) return lt_errorf(err, errlen, "%s has no tensor '%s'", w->what, name);
        if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "BF16") && strcmp(e->dtype, "F16"))
            return lt_errorf(err, errlen, "%s: tensor '%s' is %s; lattice imports F32, BF16 and F16",
                             w->files[f].path, name, e->dtype);
        int same = e->ndim == m->ndim;
        for (int d = 0; same && d < m->ndim; d++) same = e->shape[d] == m->shape[d];
        if (!same) {
            char a[128], b[128];
            shape_text(a, sizeof a, e->ndim, e->shape);
            shape_text(b, sizeof b, m->ndim, m->shape);
            return lt_errorf(err, errlen, "%s: tensor '%s' has shape %s; config.json implies %s",
                             w->files[f].path, name, a, b);
        }
        ents[i] = e;
        files[i] = f;
        w->used[f][k] = 1;
    }
    /* a tied head saved anyway must equal the embedding (checked after reading) */
    *lm_head_tied = -1;
    const LtStEntry *head = weights_find(w, "lm_head.weight", &f, &k);
    if (head && !w->used[f][k] && head->ndim == 2 && head->shape[0] == map[0].shape[0] &&
        head->shape[1] == map[0].shape[1]) {
        w->used[f][k] = 1;
        *lm_head_tied = f;
    }
    for (f = 0; f < w->n; f++)
        for (k = 0; k < w->files[f].n; k++)
            if (!w->used[f][k] && !is_buffer(w->files[f].e[k].name, arch, strip ? "" : "transformer.", layers))
                return lt_errorf(err, errlen,
                                 "%s: tensor '%s' is not part of the %s model config.json describes",
                                 w->files[f].path, w->files[f].e[k].name, cls);
    return 0;
}

/* Read map entry m (file entry e) into the parameter's rows in master. */
static int read_tensor(const LtStFile *file, const LtStEntry *e, const LtHfMap *m,
                       const LtParamTable *t, float *master, char *err, size_t errlen) {
    const LtParam *p = &t->p[m->param];
    const int64_t C = p->ndim == 2 ? p->gshape[1] : 1;
    float *dst = master + p->offset + (size_t)(m->row0 * C), *tmp = NULL;
    size_t n = (size_t)(m->rows * C);
    if (lt_hf_plain(m)) {
        if (lt_st_read_f32(file, e, dst, err, errlen)) return -1;
    } else { /* HF's order (transposed, interleaved, stacked) -> ours, through one copy */
        tmp = lt_malloc(sizeof(float) * (size_t)e->numel);
        if (lt_st_read_f32(file, e, tmp, err, errlen)) {
            free(tmp);
            return -1;
        }
        n = (size_t)e->numel;
    }
    const float *x = tmp ? tmp : dst;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            const double v = x[i];
            free(tmp);
            return lt_errorf(err, errlen, "%s: tensor '%s' holds a non-finite value (%g at element %zu)",
                             file->path, e->name, v, i);
        }
    if (tmp) lt_hf_copy(m, t, master, tmp, 0);
    free(tmp);
    return 0;
}

/* The out directory must be new or empty: import never mixes with a run's checkpoints. */
static int check_out_dir(const char *out, char *err, size_t errlen) {
    DIR *d = opendir(out);
    if (!d) return errno == ENOENT ? 0 : lt_errorf(err, errlen, "%s: %s", out, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            rc = lt_errorf(err, errlen, "%s is not empty (it holds '%s'): import writes a new checkpoint "
                           "directory", out, e->d_name);
            break;
        }
    closedir(d);
    return rc;
}

int lt_hf_import(const char *hf_dir, const char *out_dir, int nover, char **overrides, char *err,
                 size_t errlen) {
    return lt_hf_import_at(hf_dir, out_dir, 0, nover, overrides, err, errlen);
}

int lt_hf_import_at(const char *hf_dir, const char *out_dir, long step, int nover, char **overrides,
                    char *err, size_t errlen) {
    if (step < 0) return lt_errorf(err, errlen, "--step %ld: must be >= 0", step);
    LtConfig *cfg = lt_calloc(sizeof *cfg);
    Weights w = {0};
    LtParamTable t = {0};
    LtHfMap *map = NULL;
    const LtStEntry **ents = NULL;
    int *files = NULL, n = 0, rc = -1, head_file = -1;
    float *master = NULL;
    if (check_out_dir(out_dir, err, errlen) || lt_hf_read_config(hf_dir, nover, overrides, cfg, err, errlen) ||
        open_weights(&w, hf_dir, err, errlen))
        goto done;
    const LtModelDims dims = lt_dims_from_config(cfg);
    /* the table is built from the config's sizes: bound its length by the files first
     * (gpt-oss stacks its experts: each of a layer's experts holds 2 bytes at least;
     * the others' MoE layers hold a router and 3 tensors per expert, the Qwens' dense
     * layers none) */
    uint64_t bytes = 0;
    int64_t moe_layers = 0;
    for (int i = 0; i < w.n; i++) bytes += w.files[i].file_size;
    for (int l = 0; l < dims.num_layers && dims.moe.experts > 0; l++)
        moe_layers += lt_dims_moe_layer(&dims, l);
    if (dims.num_layers > w.ntensors ||
        (lt_hf_gptoss(&dims) ? (uint64_t)moe_layers * (uint64_t)dims.moe.experts > bytes / 2
                             : moe_layers * (1 + 3 * (int64_t)dims.moe.experts) > w.ntensors)) {
        lt_errorf(err, errlen, "%s/config.json: %d layers%s, but %s holds only %d tensors", hf_dir,
                  dims.num_layers, dims.moe.experts > 0 ? " of experts" : "", w.what, w.ntensors);
        goto done;
    }
    lt_params_build(&t, &dims);
    if ((n = lt_hf_map(&t, &map, err, errlen)) < 0) goto done;
    ents = lt_calloc(sizeof *ents * (size_t)n);
    files = lt_calloc(sizeof *files * (size_t)n);
    if (match_tensors(&w, map, n, &dims, ents, files, &head_file, err, errlen))
        goto done;
    /* every tensor matched one in the files: the output is bounded by their data */
    master = lt_calloc(sizeof(float) * t.total); /* padded vocabulary rows stay zero */
    for (int i = 0; i < n; i++)
        if (read_tensor(&w.files[files[i]], ents[i], &map[i], &t, master, err, errlen)) goto done;
    if (head_file >= 0) {
        int f, k;
        const LtStEntry *e = weights_find(&w, "lm_head.weight", &f, &k);
        float *head = lt_malloc(sizeof(float) * (size_t)e->numel);
        const int same = lt_st_read_f32(&w.files[f], e, head, err, errlen) == 0 &&
                         memcmp(head, master + t.p[map[0].param].offset, sizeof(float) * e->numel) == 0;
        free(head);
        if (!same) {
            lt_errorf(err, errlen,
                      "%s: tensor 'lm_head.weight' differs from the embedding, but config.json "
                      "ties them (tie_word_embeddings)", w.files[f].path);
            goto done;
        }
    }
    LtCkptState s = {master, NULL, NULL};
    LtCkptMeta meta = {.step = step, .optimizer_steps = 0, .seed = cfg->train.seed,
                       .data_seed = cfg->train.seed};
    if (lt_ckpt_save(out_dir, &t, &s, &meta, cfg, err, errlen)) goto done;
    rc = 0;
done:
    free(master);
    free(files);
    free(ents);
    free(map);
    lt_params_free(&t);
    weights_free(&w);
    free(cfg);
    return rc;
}
