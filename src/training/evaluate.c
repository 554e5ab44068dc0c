/* evaluate.c - the validation loss (see evaluate.h) and `lattice eval`. */
#include "evaluate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "metrics.h"
#include "trace.h"
#include "commands.h"

void lt_split_rows(const int32_t *rows, int n, int S, int32_t *in, int32_t *tgt) {
    for (int i = 0; i < n; i++) {
        memcpy(in + (size_t)i * S, rows + (size_t)i * (S + 1), (size_t)S * sizeof(int32_t));
        memcpy(tgt + (size_t)i * S, rows + (size_t)i * (S + 1) + 1, (size_t)S * sizeof(int32_t));
    }
}

/* Validation samples first .. first+count-1 (positions in the blend's order)
 * into rows (count rows of S+1 tokens): each that dataset's next sample in
 * file order, from its token range. ds and qs: scratch of count entries. */
static void read_valid_samples(LtRun *r, uint64_t first, int count, int32_t *rows, int *ds,
                               uint64_t *qs) {
    const LtBlend *b = r->valid_blend;
    const uint64_t S = (uint64_t)r->cfg->model.seq_length;
    lt_blend_order_range(r->valid_order, first, count, ds, qs);
    for (int i = 0; i < count; i++) {
        char err[1024];
        if (lt_tokens_read(b->file[ds[i]], b->tok0[ds[i]] + qs[i] * S, S + 1,
                           rows + (size_t)i * (S + 1), err, sizeof err))
            lt_input_error("data.valid_path: %s", err);
    }
}

double lt_evaluate(LtRun *r, long *samples_out) {
    LT_TRACE_BEGIN("evaluate", NULL);
    const LtConfig *c = r->cfg;
    const int S = c->model.seq_length, mbs = c->train.micro_batch_size;
    enum { BLOCK = 16 }; /* micro batches per pipelined forward pass */
    const uint64_t n = (uint64_t)r->eval_samples;
    int32_t *rows = lt_malloc((size_t)BLOCK * mbs * (S + 1) * sizeof(int32_t));
    int32_t *in = lt_malloc((size_t)BLOCK * mbs * S * sizeof(int32_t));
    int32_t *tgt = lt_malloc((size_t)BLOCK * mbs * S * sizeof(int32_t));
    int *ds = lt_malloc((size_t)mbs * sizeof(int));
    uint64_t *qs = lt_malloc((size_t)mbs * sizeof(uint64_t));
    double sum = 0.0;   /* on the last pipeline stage */
    double counted = 0; /* targets with loss (data.eod_mask_loss leaves out the EOD ones) */
    const int32_t eod = c->data.eod_mask_loss ? c->data.eod_token : -1;
    lt_model_loss_reset(r->model); /* (the trainer's accumulator holds the last step's loss) */
    /* data-parallel ranks take every dp-th micro batch; the sums are added up.
     * Up to BLOCK micro batches go through the pipeline together, so its
     * stages work at once. */
    const uint64_t stride = (uint64_t)mbs * (uint64_t)r->topo.dp;
    uint64_t s = (uint64_t)r->coords.dp * (uint64_t)mbs, done = 0;
    while (s < n) {
        int k = 0;
        for (; k < BLOCK && s < n; k++, s += stride)
            read_valid_samples(r, s, mbs, rows + (size_t)k * mbs * (S + 1), ds, qs);
        lt_split_rows(rows, k * mbs, S, in, tgt);
        counted += (double)lt_count_unmasked(in, (size_t)k * mbs * S, eod);
        lt_pipeline_forward(r->pipe, in, tgt, k); /* (in, tgt: pageable, reusable at once) */
        done += (uint64_t)k;
    }
    sum = lt_model_loss_take(r->model);
    /* expert (tensor) parallelism over data-parallel ranks exchanges tokens in
     * every forward: a rank short of a micro batch runs one more, not counted */
    const uint64_t most = (n / mbs + (uint64_t)r->topo.dp - 1) / (uint64_t)r->topo.dp;
    if ((r->ep || r->etp) && done < most) {
        read_valid_samples(r, 0, mbs, rows, ds, qs);
        lt_split_rows(rows, mbs, S, in, tgt);
        for (; done < most; done++) lt_pipeline_forward(r->pipe, in, tgt, 1);
        lt_model_loss_take(r->model);
    }
    free(rows);
    free(in);
    free(tgt);
    free(ds);
    free(qs);
    lt_comm_all_reduce(lt_comm_host(r->dp), &sum, 1, LT_COMM_F64, LT_COMM_SUM);
    lt_comm_all_reduce(lt_comm_host(r->pp), &sum, 1, LT_COMM_F64, LT_COMM_SUM);
    lt_comm_all_reduce(lt_comm_host(r->dp), &counted, 1, LT_COMM_F64, LT_COMM_SUM);
    *samples_out = (long)n;
    LT_TRACE_END();
    return counted > 0 ? sum / counted : NAN;
}

static const char *const part_name[3] = {"training", "validation", "test"};

/* Dataset d of b (data.train_path, its files open) under data.split's
 * shares v: part p (0 train, 1 validation, 2 test) is tokens [tok0[p],
 * tok0[p] + ntok[p]), whole documents, Megatron's split of that dataset
 * alone (ntok 0: no documents); logged with log. Exits 2 on a file without
 * documents. */
static void split_dataset(const LtConfig *c, const LtBlend *b, int d, const double v[3], int log,
                          uint64_t tok0[3], uint64_t ntok[3]) {
    char err[1024], which[LT_PATH_MAX + 32] = "";
    uint64_t *starts, ndocs, beg[3], end[3];
    if (lt_tokens_documents(b->file[d], c->data.eod_token, &starts, &ndocs, err, sizeof err))
        lt_input_error("data.split: %s", err);
    lt_split_docs(v, ndocs, beg, end);
    if (b->n > 1)
        snprintf(which, sizeof which, " (dataset %d, %s)", d + 1, lt_tokens_path(b->file[d]));
    static const char *const tag[3] = {"train", "valid", "test"};
    for (int p = 0; p < 3; p++) {
        tok0[p] = starts[beg[p]];
        ntok[p] = starts[end[p]] - starts[beg[p]];
        if (log)
            lt_log("data split %s%s: documents [%llu, %llu) of %llu, tokens [%llu, %llu)\n",
                   tag[p], which, (unsigned long long)beg[p], (unsigned long long)end[p],
                   (unsigned long long)ndocs, (unsigned long long)tok0[p],
                   (unsigned long long)(tok0[p] + ntok[p]));
    }
    free(starts);
}

void lt_split_refuse_empty(const LtConfig *c, const LtBlend *b, int d, int p) {
    if (b->n == 1)
        lt_input_error("data.split '%s' leaves no %s documents in '%s' (its documents are listed "
                       "in the 'data split' lines above): give the %s part a larger share, or "
                       "the file more documents", c->data.split, part_name[p],
                       lt_tokens_path(b->file[d]), part_name[p]);
    lt_input_error("data.split '%s' leaves no %s documents in dataset %d of data.train_path, "
                   "'%s' (each dataset is split by its own documents; see the 'data split' lines "
                   "above), and a blend takes every part from every dataset: give the %s part a "
                   "larger share, or that dataset more documents", c->data.split, part_name[p],
                   d + 1, lt_tokens_path(b->file[d]), part_name[p]);
}

/* data.split: the three parts of every data.train_path dataset (into
 * r->split_tok0/ntok, for the trainer too), then the validation parts (with
 * eval.split=test the test parts) as r->valid_blend, weighted as the blend
 * (Megatron blends each part of a split blend by the same normalised
 * weights); left NULL when the split gives that part no share. key names
 * the part in messages. Exits 2 on a bad split, a file without documents or
 * a dataset whose evaluated part holds none. */
static void open_split_parts(LtRun *r, char *key, size_t keylen) {
    const LtConfig *c = r->cfg;
    char err[1024];
    double v[3];
    if (c->data.valid_path[0])
        lt_input_error("data.split carves validation and test from data.train_path; "
                       "data.valid_path ('%s') must be empty with it", c->data.valid_path);
    if (lt_split_parse(c->data.split, v, err, sizeof err)) lt_input_error("data.split: %s", err);
    LtBlend *b = lt_calloc(sizeof *b);
    if (lt_blend_open(b, c->data.train_path, c->model.vocab_size, err, sizeof err))
        lt_input_error("data.split: data.train_path: %s", err);
    const int p = c->eval.split == LT_SPLIT_TEST ? 2 : 1;
    snprintf(key, keylen, "data.split's %s part", part_name[p]);
    for (int d = 0; d < b->n; d++)
        split_dataset(c, b, d, v, r->world->rank == 0, r->split_tok0[d], r->split_ntok[d]);
    if (v[p] == 0.0) {
        lt_blend_close(b);
        free(b);
        return;
    }
    for (int d = 0; d < b->n; d++) {
        if (!r->split_ntok[d][p]) lt_split_refuse_empty(c, b, d, p);
        b->tok0[d] = r->split_tok0[d][p];
        b->ntok[d] = r->split_ntok[d][p];
    }
    r->valid_blend = b;
}

/* Whole samples of validation dataset d (of its range, if any). */
static uint64_t valid_samples(const LtRun *r, int d) {
    return lt_num_samples(lt_blend_tokens(r->valid_blend, d), r->cfg->model.seq_length);
}

/* The longest prefix, at most want samples, of the validation order that
 * takes no dataset beyond its samples; *short_of = the first dataset that
 * want samples would take too many of (-1 when none). */
static uint64_t fitting_prefix(const LtRun *r, uint64_t want, int *short_of) {
    const int n = r->valid_blend->n;
    uint64_t taken[LT_BLEND_MAX], lo = 0, hi = want;
    *short_of = -1;
    lt_blend_order_taken(r->valid_order, want, taken);
    for (int d = 0; d < n && *short_of < 0; d++)
        if (taken[d] > valid_samples(r, d)) *short_of = d;
    if (*short_of < 0) return want;
    while (hi - lo > 1) { /* lo fits, hi does not: the counts grow with the prefix */
        const uint64_t mid = lo + (hi - lo) / 2;
        int fits = 1;
        lt_blend_order_taken(r->valid_order, mid, taken);
        for (int d = 0; d < n && fits; d++) fits = taken[d] <= valid_samples(r, d);
        *(fits ? &lo : &hi) = mid;
    }
    return lo;
}

/* Every validation dataset read whole now (each evaluation reads it anyway:
 * a damaged block stops the run before step 1, not at its final evaluation),
 * and holding at least one sample; key names the data in messages. */
static void check_valid_files(const LtRun *r, const char *key) {
    const LtBlend *b = r->valid_blend;
    const int S = r->cfg->model.seq_length;
    for (int d = 0; d < b->n; d++) {
        char err[LT_PATH_MAX + 256];
        if (lt_tokens_validate(b->file[d], err, sizeof err)) lt_input_error("%s: %s", key, err);
        if (b->n > 1 && valid_samples(r, d) == 0)
            lt_input_error("%s: dataset %d of the blend, '%s', holds %llu tokens, not one "
                           "sample of %d+1 tokens", key, d + 1, lt_tokens_path(b->file[d]),
                           (unsigned long long)lt_blend_tokens(b, d), S);
    }
}

/* Refuse `want` validation samples, which the data cannot give without
 * reading a sample twice (dataset d runs out): eval.samples when promised,
 * else one micro batch. */
static void refuse_eval_size(const LtRun *r, const char *key, uint64_t want, int promised,
                             int d) {
    const LtConfig *c = r->cfg;
    const LtBlend *b = r->valid_blend;
    const int S = c->model.seq_length;
    const unsigned long long ntok = lt_blend_tokens(b, d), ns = valid_samples(r, d);
    const char *path = lt_tokens_path(b->file[d]);
    if (b->n == 1 && promised)
        lt_input_error("eval.samples (%ld) is more than %s '%s' holds: %llu tokens make %llu "
                       "sequences of %d+1 tokens", c->eval.samples, key, path, ntok, ns, S);
    if (b->n == 1)
        lt_input_error("%s: '%s' holds %llu tokens, fewer than one micro batch of %d samples "
                       "of %d+1 tokens", key, path, ntok, c->train.micro_batch_size, S);
    uint64_t taken[LT_BLEND_MAX];
    lt_blend_order_taken(r->valid_order, want, taken);
    lt_input_error("%s: %llu samples (%s) take %llu from dataset %d of the blend, '%s' "
                   "(weight %.4g), which holds %llu (%llu tokens in sequences of %d+1), and an "
                   "evaluation reads each sample once: lower %s or give that dataset more data",
                   key, (unsigned long long)want, promised ? "eval.samples" : "one micro batch",
                   (unsigned long long)taken[d], d + 1, path, b->weight[d], ns, ntok, S,
                   promised ? "eval.samples" : "train.micro_batch_size");
}

/* Validation samples per evaluation: eval.samples (a promise: refused when
 * the data cannot give it), else eval.iters global batches capped to whole
 * micro batches of what the data gives, each sample read at most once. */
static long eval_size(const LtRun *r, const char *key) {
    const LtConfig *c = r->cfg;
    const uint64_t mbs = (uint64_t)c->train.micro_batch_size;
    int d;
    if (fitting_prefix(r, mbs, &d) < mbs) refuse_eval_size(r, key, mbs, 0, d);
    uint64_t n = c->eval.samples > 0 ? (uint64_t)c->eval.samples
                                      : (uint64_t)c->eval.iters * (uint64_t)c->train.global_batch_size;
    const uint64_t fit = fitting_prefix(r, n, &d);
    if (fit < n && c->eval.samples > 0) refuse_eval_size(r, key, n, 1, d);
    if (fit < n) n = fit / mbs * mbs;
    return (long)n;
}

void lt_eval_open_valid(LtRun *r) {
    const LtConfig *c = r->cfg;
    char key[64] = "data.valid_path";
    if (c->data.split[0]) { /* (refused beside data.valid_path) */
        open_split_parts(r, key, sizeof key);
        if (!r->valid_blend) {
            lt_log("data split: '%s' gives the %s part no share: no evaluations\n", c->data.split,
                   part_name[c->eval.split == LT_SPLIT_TEST ? 2 : 1]);
            return;
        }
    } else {
        if (!c->data.valid_path[0]) return;
        char err[1024];
        r->valid_blend = lt_calloc(sizeof *r->valid_blend);
        if (lt_blend_open(r->valid_blend, c->data.valid_path, c->model.vocab_size, err,
                          sizeof err))
            lt_input_error("data.valid_path: %s", err);
    }
    r->valid = r->valid_blend->file[0];
    r->valid_order = lt_blend_order_create(r->valid_blend->weight, r->valid_blend->n);
    check_valid_files(r, key);
    r->eval_samples = eval_size(r, key);
}

/* The file `lattice eval` appends its record to: logging.metrics_file with
 * ".eval" before its extension (run/metrics.jsonl -> run/metrics.eval.jsonl),
 * so that the training run's file holds what training wrote and nothing
 * else; "" when logging.metrics_file is unset. */
static void eval_metrics_path(const char *metrics, char *out, size_t len) {
    if (!metrics[0]) {
        out[0] = '\0';
        return;
    }
    const char *base = strrchr(metrics, '/');
    base = base ? base + 1 : metrics;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) dot = metrics + strlen(metrics); /* no extension */
    snprintf(out, len, "%.*s.eval%s", (int)(dot - metrics), metrics, dot);
}

/* Rank 0 says on stderr that no checkpoint was loaded: the score is a
 * randomly initialised model's. */
static void warn_no_checkpoint(const LtRun *r) {
    const LtConfig *c = r->cfg;
    if (r->resumed || r->world->rank != 0) return;
    fprintf(stderr,
            "lattice: warning: eval: no checkpoint loaded (%s): this scores a randomly "
            "initialised model (train.seed=%llu); set checkpoint.load to a checkpoint directory\n",
            c->checkpoint.load[0] ? "checkpoint.load=auto found none in checkpoint.dir"
                                  : "checkpoint.load is not set",
            (unsigned long long)c->train.seed);
}

int lt_cmd_eval(LtConfig *cfg, const LtWorld *w) {
    if (!cfg->data.valid_path[0] && !cfg->data.split[0])
        lt_input_error("data.valid_path is not set (eval needs it, or data.split)");
    LtRun r;
    lt_run_setup(&r, cfg, w, 0);
    lt_eval_open_valid(&r);
    if (!r.valid_blend)
        lt_input_error("data.split '%s' gives the %s part no share: nothing to evaluate",
                       cfg->data.split, cfg->eval.split == LT_SPLIT_TEST ? "test" : "validation");
    lt_run_print_summary(&r);
    warn_no_checkpoint(&r);
    long ns;
    const double t0 = lt_now();
    const double vl = lt_evaluate(&r, &ns);
    lt_log("eval step %ld | val loss %.4f | val log ppl %.4f | val ppl %.2f | %ld samples | "
           "%.2f s\n",
           r.start_step, vl, vl, exp(vl), ns, lt_now() - t0);
    char path[LT_PATH_MAX + 8];
    eval_metrics_path(cfg->logging.metrics_file, path, sizeof path);
    LtMetricsFile mf;
    lt_metrics_open(&mf, w->rank == 0 ? path : NULL);
    lt_metrics_eval(&mf, r.start_step, vl, ns);
    lt_metrics_close(&mf);
    if (path[0])
        lt_log("metrics    eval's record appended to %s (logging.metrics_file, the training "
               "run's, is left as it is)\n", path);
    else
        lt_log("metrics    none written (logging.metrics_file is not set)\n");
    char merr[LT_PATH_MAX + 128];
    int rc = 0;
    if (lt_trace_stop(merr, sizeof merr) || lt_metrics_status(&mf, merr, sizeof merr)) {
        lt_log("error: %s\n", merr);
        rc = LT_EXIT_INPUT;
    }
    lt_run_teardown(&r);
    return rc;
}
