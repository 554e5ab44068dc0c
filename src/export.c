/* export.c - `lattice export`: a checkpoint as a Hugging Face GPT-2 model.
 *
 * Our linear weights are stored (out, in) and applied as x W^T; HF GPT-2 uses
 * Conv1D modules whose weights are (in, out) and applied as x W, so every
 * attention/MLP weight matrix is transposed. Embedding, LayerNorm and bias
 * tensors copy over unchanged, except wte, whose padded rows (zero, never
 * seen by the tokenizer) are dropped: (padded_vocab, C) -> (vocab, C).
 * The output is fp32; lm_head is tied to wte (tie_word_embeddings). */
#include "checkpoint.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"


/* The tensors to export: names are stored alongside, transposed copies are
 * owned (freed by list_free). */
typedef struct {
    LtStTensor *t;
    char (*names)[128];
    float **owned;
    int n, cap;
} HfList;

static void list_free(HfList *l) {
    for (int i = 0; i < l->n; i++) free(l->owned[i]);
    free(l->t);
    free(l->names);
    free(l->owned);
}

/* Add tensor `hf` from parameter `ours` of the table. transpose: our (R, C)
 * matrix becomes (C, R). rows > 0 keeps only the first `rows` rows. */
static int add(HfList *l, const LtParamTable *t, const float *master, const char *hf,
               const char *ours, int transpose, int64_t rows, char *err, size_t errlen) {
    const LtParam *p = lt_params_find(t, ours);
    if (!p) return lt_errorf(err, errlen, "export: model has no parameter '%s'", ours);
    if (l->n == l->cap) return lt_errorf(err, errlen, "export: too many tensors");
    LtStTensor *o = &l->t[l->n];
    snprintf(l->names[l->n], sizeof l->names[0], "%s", hf);
    o->name = l->names[l->n];
    o->ndim = p->ndim;
    o->shape[0] = p->shape[0];
    o->shape[1] = p->ndim == 2 ? p->shape[1] : 0;
    o->data = master + p->offset;
    l->owned[l->n] = NULL;
    if (rows > 0) o->shape[0] = rows; /* a prefix of rows is contiguous: no copy */
    if (transpose) {
        const int64_t R = p->shape[0], C = p->shape[1];
        float *tr = lt_malloc(sizeof(float) * (size_t)(R * C));
        const float *src = master + p->offset;
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) tr[j * R + i] = src[i * C + j];
        o->shape[0] = C;
        o->shape[1] = R;
        o->data = tr;
        l->owned[l->n] = tr;
    }
    l->n++;
    return 0;
}

static int build_list(HfList *l, const LtParamTable *t, const float *m, char *err, size_t errlen) {
    const LtModelDims *d = &t->dims;
    l->cap = 4 + 12 * d->num_layers;
    l->t = lt_calloc(sizeof(LtStTensor) * (size_t)l->cap);
    l->names = lt_calloc(sizeof(l->names[0]) * (size_t)l->cap);
    l->owned = lt_calloc(sizeof(float *) * (size_t)l->cap);
    if (add(l, t, m, "transformer.wte.weight", "wte", 0, d->vocab, err, errlen) ||
        add(l, t, m, "transformer.wpe.weight", "wpe", 0, 0, err, errlen))
        return -1;
    /* HF suffix, our suffix, transposed */
    static const struct { const char *hf, *ours; int tr; } layer[] = {
        {"ln_1.weight", "ln_1.weight", 0},          {"ln_1.bias", "ln_1.bias", 0},
        {"attn.c_attn.weight", "attn.qkv.weight", 1}, {"attn.c_attn.bias", "attn.qkv.bias", 0},
        {"attn.c_proj.weight", "attn.proj.weight", 1}, {"attn.c_proj.bias", "attn.proj.bias", 0},
        {"ln_2.weight", "ln_2.weight", 0},          {"ln_2.bias", "ln_2.bias", 0},
        {"mlp.c_fc.weight", "mlp.fc.weight", 1},    {"mlp.c_fc.bias", "mlp.fc.bias", 0},
        {"mlp.c_proj.weight", "mlp.proj.weight", 1}, {"mlp.c_proj.bias", "mlp.proj.bias", 0},
    };
    for (int i = 0; i < d->num_layers; i++)
        for (size_t k = 0; k < sizeof layer / sizeof layer[0]; k++) {
            char hf[128], ours[96];
            snprintf(hf, sizeof hf, "transformer.h.%d.%s", i, layer[k].hf);
            snprintf(ours, sizeof ours, "h.%d.%s", i, layer[k].ours);
            if (add(l, t, m, hf, ours, layer[k].tr, 0, err, errlen)) return -1;
        }
    if (add(l, t, m, "transformer.ln_f.weight", "ln_f.weight", 0, 0, err, errlen) ||
        add(l, t, m, "transformer.ln_f.bias", "ln_f.bias", 0, 0, err, errlen))
        return -1;
    return 0;
}

static int write_config_json(const char *path, const LtModelDims *d, char *err, size_t errlen) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return lt_errorf(err, errlen, "path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return lt_errorf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    fprintf(f,
            "{\n"
            "  \"model_type\": \"gpt2\",\n"
            "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
            "  \"n_embd\": %d,\n"
            "  \"n_layer\": %d,\n"
            "  \"n_head\": %d,\n"
            "  \"n_positions\": %d,\n"
            "  \"n_ctx\": %d,\n"
            "  \"n_inner\": %d,\n"
            "  \"vocab_size\": %d,\n"
            "  \"layer_norm_epsilon\": 1e-05,\n"
            "  \"activation_function\": \"gelu_new\",\n"
            "  \"tie_word_embeddings\": true,\n"
            "  \"initializer_range\": 0.02,\n"
            "  \"resid_pdrop\": 0.0,\n"
            "  \"embd_pdrop\": 0.0,\n"
            "  \"attn_pdrop\": 0.0,\n"
            "  \"scale_attn_weights\": true,\n"
            "  \"torch_dtype\": \"float32\"\n"
            "}\n",
            d->hidden, d->num_layers, d->heads, d->max_pos, d->max_pos, d->ffn, d->vocab);
    if (lt_file_commit(f, tmp, err, errlen) || lt_rename_durable(tmp, path, err, errlen)) {
        remove(tmp);
        return -1;
    }
    return 0;
}

int lt_export_hf(const char *ckpt_path, const char *out_dir, char *err, size_t errlen) {
    char stepdir[PATH_MAX], emsg[512];
    LtConfig *cfg = lt_malloc(sizeof *cfg);
    if (lt_ckpt_resolve(ckpt_path, stepdir, sizeof stepdir, err, errlen) ||
        lt_ckpt_load_config(stepdir, cfg, err, errlen)) {
        free(cfg);
        return -1;
    }
    /* Validate for the smallest world of the saved layout (one data-parallel
     * replica): the padded vocabulary depends on the tensor-parallel size and
     * must match the stored wte. */
    const int world = cfg->parallel.tensor_model_parallel_size * cfg->parallel.pipeline_model_parallel_size;
    if (lt_config_validate(cfg, world > 0 ? world : 1, emsg, sizeof emsg)) {
        lt_errorf(err, errlen, "%s/config.yaml: %s", stepdir, emsg);
        free(cfg);
        return -1;
    }
    const LtModelDims dims = lt_dims_from_config(cfg);
    free(cfg);
    if (dims.arch != LT_ARCH_GPT || dims.untied)
        return lt_errorf(err, errlen,
                         "%s: lattice export writes GPT-2 checkpoints with a tied LM head; this "
                         "one is model.arch=%s%s",
                         stepdir, lt_arch_name((LtArch)dims.arch),
                         dims.untied ? " with an untied LM head" : "");

    LtParamTable t;
    lt_params_build(&t, &dims);
    float *master = lt_malloc(sizeof(float) * t.total);
    LtCkptState s = {master, NULL, NULL};
    HfList list = {0};
    char model[PATH_MAX], config[PATH_MAX];
    int rc = -1;
    if (snprintf(model, sizeof model, "%s/model.safetensors", out_dir) >= (int)sizeof model ||
        snprintf(config, sizeof config, "%s/config.json", out_dir) >= (int)sizeof config) {
        lt_errorf(err, errlen, "path too long: %s", out_dir);
        goto done;
    }
    if (lt_ckpt_load(stepdir, &t, &s, NULL, err, errlen) || build_list(&list, &t, master, err, errlen) ||
        lt_mkdir_p(out_dir, err, errlen) ||
        lt_safetensors_write(model, list.t, list.n, err, errlen) ||
        write_config_json(config, &dims, err, errlen))
        goto done;
    rc = 0;
done:
    list_free(&list);
    free(master);
    lt_params_free(&t);
    return rc;
}
