/* fuzz_import.c - libFuzzer target for `lattice import` (src/hf/hf_import.c,
 * src/base/json.c, src/hf/safetensors.c): a Hugging Face directory of config.json
 * and model.safetensors imported into a fresh checkpoint directory. Input:
 * two bytes little-endian L, then L bytes of config.json, then
 * model.safetensors. With LT_FUZZ_WRITE_SEED=DIR the binary instead exports
 * a tiny Llama (grouped-query, untied), the same with 3 experts top 2 (Mixtral)
 * and a tiny GPT-2 (untied) and writes each as one such input, DIR/tiny_llama,
 * DIR/tiny_mixtral and DIR/tiny_gpt2 (make_corpus.sh). */
#include <ftw.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "common.h"
#include "config.h"
#include "fuzz_util.h"
#include "hf.h"
#include "params.h"

static int rm_cb(const char *p, const struct stat *st, int fl, struct FTW *ftw) {
    (void)st, (void)fl, (void)ftw;
    return remove(p);
}

/* Export the model of c (values i % 89 / 100) and write it to `out` as an input. */
static void write_one(LtConfig *c, const char *tag, const char *out) {
    char err[512], ck[300], hf[300];
    if (lt_config_validate(c, 1, err, sizeof err)) {
        fprintf(stderr, "seed %s: %s\n", tag, err);
        exit(1);
    }
    LtModelDims d = lt_dims_from_config(c);
    LtParamTable t;
    lt_params_build(&t, &d);
    float *x = malloc(t.total * sizeof(float));
    for (size_t i = 0; i < t.total; i++) x[i] = 0.01f * (float)(i % 89);
    LtCkptState s = {x, NULL, NULL};
    LtCkptMeta m = {.step = 0};
    snprintf(ck, sizeof ck, "%s/seed-%s", fuzz_dir(), tag);
    snprintf(hf, sizeof hf, "%s/seed-%s-hf", fuzz_dir(), tag);
    if (lt_ckpt_save(ck, &t, &s, &m, c, err, sizeof err) || lt_hf_export(ck, hf, err, sizeof err)) {
        fprintf(stderr, "seed %s: %s\n", tag, err);
        exit(1);
    }
    fuzz_write_pair(out, hf, "config.json", "model.safetensors");
    free(x);
    lt_params_free(&t);
}

static void write_seeds(const char *dir) {
    char out[400];
    LtConfig c;
    lt_config_defaults(&c);
    c.model.arch = LT_ARCH_LLAMA;
    c.model.num_layers = 1, c.model.hidden_size = 4, c.model.num_attention_heads = 2;
    c.model.num_query_groups = 1, c.model.ffn_hidden_size = 6, c.model.seq_length = 4;
    c.model.max_position_embeddings = 8, c.model.vocab_size = 5, c.model.make_vocab_size_divisible_by = 8;
    c.model.rope_scaling = LT_ROPE_LLAMA3, c.model.rope_original_max_position = 4;
    c.model.untie_embeddings_and_output_weights = true;
    snprintf(out, sizeof out, "%s/tiny_llama", dir);
    write_one(&c, "llama", out);
    c.model.num_experts = 3, c.model.moe_router_topk = 2, c.model.moe_ffn_hidden_size = 2;
    c.model.moe_aux_loss_coeff = 0.01;
    snprintf(out, sizeof out, "%s/tiny_mixtral", dir);
    write_one(&c, "mixtral", out);
    lt_config_defaults(&c);
    c.model.num_layers = 1, c.model.hidden_size = 4, c.model.num_attention_heads = 2;
    c.model.ffn_hidden_size = 4, c.model.seq_length = 4, c.model.max_position_embeddings = 6;
    c.model.vocab_size = 7, c.model.make_vocab_size_divisible_by = 8;
    c.model.untie_embeddings_and_output_weights = true;
    snprintf(out, sizeof out, "%s/tiny_gpt2", dir);
    write_one(&c, "gpt2", out);
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *seed = getenv("LT_FUZZ_WRITE_SEED");
    if (seed && *seed) write_seeds(seed);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t L;
    if (fuzz_split_pair(&data, &size, &L)) return 0;
    char hf[300], out[300];
    snprintf(hf, sizeof hf, "%s/hf", fuzz_dir());
    snprintf(out, sizeof out, "%s/out", fuzz_dir());
    mkdir(hf, 0777);
    fuzz_file(0, "hf/config.json", data, L);
    fuzz_file(1, "hf/model.safetensors", data + L, size - L);
    char err[2048];
    if (lt_hf_import(hf, out, 0, NULL, err, sizeof err) == 0) {
        /* what was written must load as a checkpoint of the model it names */
        char stepdir[400];
        LtConfig *c = calloc(1, sizeof *c);
        if (lt_ckpt_resolve(out, stepdir, sizeof stepdir, err, sizeof err) ||
            lt_ckpt_load_config(stepdir, c, err, sizeof err) || lt_config_validate(c, 1, err, sizeof err))
            abort();
        LtModelDims d = lt_dims_from_config(c);
        LtParamTable t;
        lt_params_build(&t, &d);
        LtCkptState s = {calloc(t.total, sizeof(float)), NULL, NULL};
        if (lt_ckpt_load(stepdir, &t, &s, NULL, err, sizeof err)) abort();
        free(s.master);
        lt_params_free(&t);
        free(c);
    }
    nftw(out, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
