/* fuzz_checkpoint.c - libFuzzer target for the checkpoint readers
 * (src/checkpoint/checkpoint.c, src/checkpoint/ckpt_state.c): meta.json and state.lt (header,
 * record table, block CRCs, tensor pieces) loaded into a tiny model's table with moments, as a
 * resume would. Input: two bytes little-endian L, then L bytes of meta.json,
 * then state.lt. With LT_FUZZ_WRITE_SEED=FILE the binary instead saves a real
 * checkpoint of that model and writes it as one such input (make_corpus.sh). */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "common.h"
#include "config.h"
#include "fuzz_util.h"
#include "params.h"

static LtModelDims dims(void) {
    LtModelDims d = {.num_layers = 1, .hidden = 4, .heads = 1, .ffn = 8, .seq_len = 4,
                     .max_pos = 4, .vocab = 6, .padded_vocab = 8};
    return d;
}

static void write_seed(const char *out) {
    LtParamTable t;
    LtModelDims d = dims();
    lt_params_build(&t, &d);
    float *x[3];
    for (int k = 0; k < 3; k++) {
        x[k] = malloc(t.total * sizeof(float));
        for (size_t i = 0; i < t.total; i++) x[k][i] = 0.01f * (float)(i % 97) * (k ? 0.5f : 1.0f);
    }
    LtCkptState s = {x[0], x[1], x[2]};
    LtCkptMeta m = {.step = 3, .optimizer_steps = 3, .samples_consumed = 24, .seed = 1, .data_seed = 1};
    LtConfig c;
    lt_config_defaults(&c);
    c.model.num_layers = 1, c.model.hidden_size = 4, c.model.num_attention_heads = 1;
    c.model.ffn_hidden_size = 8, c.model.seq_length = 4, c.model.max_position_embeddings = 4;
    c.model.vocab_size = 6, c.model.make_vocab_size_divisible_by = 8;
    char err[512], dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/seed", fuzz_dir());
    if (lt_ckpt_save(dir, &t, &s, &m, &c, err, sizeof err)) {
        fprintf(stderr, "seed: %s\n", err);
        exit(1);
    }
    snprintf(path, sizeof path, "%s/step_00000003", dir);
    fuzz_write_pair(out, path, "meta.json", "state.lt");
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *seed = getenv("LT_FUZZ_WRITE_SEED");
    if (seed && *seed) write_seed(seed);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t L;
    if (fuzz_split_pair(&data, &size, &L)) return 0;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/step", fuzz_dir());
    mkdir(dir, 0777);
    fuzz_file(0, "step/meta.json", data, L);
    fuzz_file(1, "step/state.lt", data + L, size - L);
    static LtParamTable t;
    static int built;
    if (!built) {
        LtModelDims d = dims();
        lt_params_build(&t, &d);
        built = 1;
    }
    float *x[3];
    for (int k = 0; k < 3; k++) x[k] = calloc(t.total, sizeof(float));
    LtCkptState s = {x[0], x[1], x[2]};
    LtCkptMeta m;
    char err[1024];
    if (lt_ckpt_load(dir, &t, &s, &m, err, sizeof err) == 0 &&
        (m.optimizer_steps < 0 || m.optimizer_steps > m.step))
        abort(); /* a loaded meta must be consistent */
    for (int k = 0; k < 3; k++) free(x[k]);
    return 0;
}
