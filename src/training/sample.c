/* sample.c - the subcommands that run a trained model forward one sequence
 * at a time: sample (generated token ids) and logits (next-token logits, to
 * check a checkpoint against another implementation). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "engine.h"
#include "commands.h"

/* Draw from softmax(logits / temperature) restricted to the top_k largest. */
static int sample_token(float *logits, int V, double temperature, int top_k, double u) {
    float maxv = logits[0];
    for (int i = 1; i < V; i++) maxv = logits[i] > maxv ? logits[i] : maxv;
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) {
        /* threshold = k-th largest logit (simple selection, V is small enough) */
        float *tmp = lt_malloc((size_t)V * sizeof(float));
        memcpy(tmp, logits, (size_t)V * sizeof(float));
        for (int k = 0; k < top_k; k++) {
            int best = k;
            for (int i = k + 1; i < V; i++) best = tmp[i] > tmp[best] ? i : best;
            float x = tmp[k];
            tmp[k] = tmp[best];
            tmp[best] = x;
        }
        kth = tmp[top_k - 1];
        free(tmp);
    }
    double total = 0.0;
    for (int i = 0; i < V; i++) total += logits[i] >= kth ? exp((logits[i] - maxv) / temperature) : 0.0;
    double target = u * total, acc = 0.0;
    for (int i = 0; i < V; i++) {
        if (logits[i] < kth) continue;
        acc += exp((logits[i] - maxv) / temperature);
        if (acc >= target) return i;
    }
    return V - 1;
}

/* The first tokens of the validation (else training) data, of a blend its
 * first dataset, into seq: n of them, at most `max` (0 when there is no
 * data). */
static int read_prompt(const LtConfig *cfg, int32_t *seq, int max) {
    const char *key = cfg->data.valid_path[0] ? "data.valid_path" : "data.train_path";
    const char *spec = cfg->data.valid_path[0] ? cfg->data.valid_path : cfg->data.train_path;
    if (!spec[0] || max <= 0) return 0;
    LtBlend *b = lt_calloc(sizeof *b);
    char err[1024];
    if (lt_blend_parse(spec, b, err, sizeof err)) lt_input_error("%s: %s", key, err);
    const char *ppath = b->path[0];
    LtTokenFile *f = lt_run_open_tokens(key, ppath, cfg->model.vocab_size);
    int n = max;
    if ((uint64_t)n > lt_tokens_count(f)) n = (int)lt_tokens_count(f);
    if (n > 0 && lt_tokens_read(f, 0, (uint64_t)n, seq, err, sizeof err))
        lt_input_error("%s: %s", ppath, err);
    lt_tokens_close(f);
    free(b);
    return n;
}

/* One line: prefix, then x[0, n) separated by spaces. */
static void print_ints(const char *prefix, const int32_t *x, int n) {
    fputs(prefix, stdout);
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", x[i]);
    putchar('\n');
}

int lt_cmd_sample(LtConfig *cfg, const LtWorld *w) {
    if (w->world != 1) lt_input_error("sample runs as a single process (got %d ranks)", w->world);
    cfg->train.micro_batch_size = 1;
    LtRun r;
    lt_run_setup(&r, cfg, w, 0);
    if (!cfg->checkpoint.load[0])
        lt_log("note: checkpoint.load is not set: sampling from the untrained initial model\n");
    const int S = cfg->model.seq_length, V = cfg->model.vocab_size;
    int total = cfg->sample.num_tokens;
    int32_t *seq = lt_calloc((size_t)(total + S) * sizeof(int32_t));
    /* prompt: the first tokens of the validation (else training) data */
    int plen = read_prompt(cfg, seq, S / 8 < 8 ? (S < 8 ? S - 1 : S / 8) : 8);
    if (plen == 0) plen = 1; /* token 0 as the prompt */
    float *logits = lt_malloc((size_t)V * sizeof(float));
    int len = plen;
    for (int i = 0; i < total; i++) {
        int ctx = len < S ? len : S;
        lt_model_next_logits(r.model, seq + len - ctx, ctx, logits);
        double u = lt_uniform_at(cfg->sample.seed, 0x5a3b1e, (uint64_t)i);
        seq[len++] = sample_token(logits, V, cfg->sample.temperature, cfg->sample.top_k, u);
    }
    print_ints("", seq, len);
    fflush(stdout);
    free(logits);
    free(seq);
    lt_run_teardown(&r);
    return 0;
}

int lt_cmd_logits(LtConfig *cfg, const LtWorld *w) {
    if (w->world != 1) lt_input_error("logits runs as a single process (got %d ranks)", w->world);
    cfg->train.micro_batch_size = 1;
    LtRun r;
    lt_run_setup(&r, cfg, w, 0);
    const int S = cfg->model.seq_length, V = cfg->model.vocab_size;
    int32_t *seq = lt_calloc((size_t)S * sizeof(int32_t));
    const int n = read_prompt(cfg, seq, S);
    if (n == 0) lt_input_error("logits: data.valid_path or data.train_path must hold tokens");
    float *logits = lt_malloc((size_t)V * sizeof(float));
    print_ints("tokens ", seq, n);
    for (int len = 1; len <= n; len++) { /* the prediction after each prefix */
        lt_model_next_logits(r.model, seq, len, logits);
        for (int v = 0; v < V; v++) printf(v ? " %.9g" : "%.9g", logits[v]);
        printf("\n");
    }
    fflush(stdout);
    free(logits);
    free(seq);
    lt_run_teardown(&r);
    return 0;
}
