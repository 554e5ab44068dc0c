/* batches.c - `lattice batches`: write the token rows `lattice train` would
 * read for its first train.steps optimizer steps, so that another trainer
 * (scripts/bench_peer.py) can train on exactly the same batches.
 *
 * The rows come from the same loader, configured by the same function
 * (lt_train_loader_config) as in lt_cmd_train, over the whole global batch
 * (data-parallel rank d of a run reads rows d*G/DP .. of each step). So the
 * order follows the config's data.shuffle / train.seed and every token file
 * format the trainer reads.
 *
 * The file: the magic "LTBATCH1", a header with the sizes and the resolved
 * config, then the int32 token rows step by step; byte layout in
 * docs/formats.md ("Batches file"). */
#include "commands.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "data.h"
#include "fileio.h"

LtLoaderConfig lt_train_loader_config(const LtConfig *cfg, int first, int count) {
    LtLoaderConfig lc = {.seq_len = cfg->model.seq_length,
                         .samples_per_step = cfg->train.global_batch_size,
                         .first = first,
                         .count = count,
                         .shuffle = cfg->data.shuffle,
                         .seed = cfg->train.seed,
                         .prefetch = cfg->data.prefetch,
                         .ramp = cfg->train.rampup};
    return lc;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

int lt_cmd_batches(const LtConfig *cfg, const char *out_path) {
    if (!cfg->data.train_path[0]) lt_input_error("data.train_path is not set");
    if (cfg->train.rampup_batch_size[0])
        lt_input_error("batches: the file holds train.global_batch_size rows per step; "
                       "train.rampup_batch_size ('%s') changes them from step to step: leave it "
                       "out for `lattice batches`", cfg->train.rampup_batch_size);
    if (cfg->train.steps < 1 || cfg->train.steps > UINT32_MAX)
        lt_input_error("batches: train.steps (%ld) must be in [1, %u]", cfg->train.steps,
                       UINT32_MAX);
    char err[1024];
    LtBlend *blend = lt_calloc(sizeof *blend);
    if (lt_blend_open(blend, cfg->data.train_path, cfg->model.vocab_size, err, sizeof err))
        lt_input_error("data.train_path: %s", err);
    const int S = cfg->model.seq_length, G = cfg->train.global_batch_size;
    const size_t row = (size_t)S + 1, per_step = (size_t)G * row;
    LtLoaderConfig lc = lt_train_loader_config(cfg, 0, G);
    LtLoader *l = lt_loader_create_blend(blend, &lc, err, sizeof err);
    if (!l) lt_input_error("data.train_path: %s", err);

    char *text = NULL;
    size_t text_len = 0;
    FILE *ms = open_memstream(&text, &text_len);
    if (!ms) lt_fatal("batches: open_memstream failed");
    lt_config_print(cfg, ms);
    fclose(ms);
    if (text_len > UINT32_MAX - 128) lt_fatal("batches: config text too long");
    const size_t hdr = (32 + text_len + 63) / 64 * 64;
    unsigned char *head = lt_calloc(hdr);
    memcpy(head, "LTBATCH1", 8);
    put_u32(head + 8, (uint32_t)hdr);
    put_u32(head + 12, (uint32_t)cfg->train.steps);
    put_u32(head + 16, (uint32_t)G);
    put_u32(head + 20, (uint32_t)row);
    put_u32(head + 24, (uint32_t)cfg->model.vocab_size);
    put_u32(head + 28, (uint32_t)text_len);
    memcpy(head + 32, text, text_len);
    free(text);

    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out_path, (long)getpid()) >= (int)sizeof tmp)
        lt_input_error("batches: path too long: %s", out_path);
    FILE *o = fopen(tmp, "wb");
    if (!o) lt_input_error("batches: cannot create %s", tmp);
    int32_t *rows = lt_malloc(per_step * sizeof(int32_t));
    unsigned char *bytes = lt_malloc(per_step * 4);
    int ok = fwrite(head, 1, hdr, o) == hdr;
    for (long s = 0; ok && s < cfg->train.steps; s++) {
        if (lt_loader_get(l, s, rows, err, sizeof err)) {
            fclose(o);
            remove(tmp);
            lt_input_error("data.train_path: step %ld: %s", s + 1, err);
        }
        for (size_t i = 0; i < per_step; i++) put_u32(bytes + 4 * i, (uint32_t)rows[i]);
        ok = fwrite(bytes, 4, per_step, o) == per_step;
    }
    free(rows);
    free(bytes);
    free(head);
    lt_loader_destroy(l);
    lt_blend_close(blend);
    free(blend);
    if (!ok) {
        fclose(o);
        remove(tmp);
        lt_fatal("batches: writing %s failed", tmp);
    }
    if (lt_file_commit(o, tmp, err, sizeof err) || lt_rename_durable(tmp, out_path, err, sizeof err)) {
        remove(tmp);
        lt_fatal("batches: %s", err);
    }
    printf("wrote %ld steps x %d samples x %zu tokens (%s order, seed %llu) to %s\n",
           cfg->train.steps, G, row, cfg->data.shuffle ? "shuffled" : "sequential",
           (unsigned long long)cfg->train.seed, out_path);
    return 0;
}
