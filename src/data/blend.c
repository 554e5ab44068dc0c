/* blend.c - dataset blends: parsing data.train_path's weighted list, opening
 * its files, and the order in which a blend takes its samples. See data.h.
 *
 * The order is Megatron-LM's BlendedDataset (build_blending_indices in
 * megatron/core/datasets/helpers.cpp): global sample i goes to the dataset d
 * whose error w_d * max(i, 1) - taken_d is largest (the first such d on a
 * tie), and is that dataset's sample number taken_d. After n samples every
 * dataset has taken within one of w_d * n. Weights are normalised by their
 * sum, as Megatron does before building the index.
 *
 * The order is a pure function of the weights, but sample i depends on every
 * choice before it. Megatron stores the whole index; here a table of the
 * counts at every SNAP_EVERY-th position (n_datasets words each, grown on
 * demand under a mutex) lets any range be found by replaying at most
 * SNAP_EVERY choices from the nearest entry: about 0.1 MB per 10^8 samples
 * of a 3-dataset blend, and a resume at sample 10^8 replays the choices once
 * (about a second). */
#include "data.h"

#include "common.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SNAP_EVERY 4096

/* ---- parsing and opening ----------------------------------------------------- */

/* 1 when s is a whole finite number. */
static int parse_weight(const char *s, double *w) {
    char *end;
    *w = strtod(s, &end);
    return end != s && *end == '\0' && isfinite(*w);
}

int lt_blend_parse(const char *spec, LtBlend *b, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    while (isspace((unsigned char)*spec)) spec++;
    if (strlen(spec) >= sizeof b->text)
        return lt_errorf(err, errlen, "the blend is longer than %zu bytes", sizeof b->text - 1);
    snprintf(b->text, sizeof b->text, "%s", spec);
    size_t len = strlen(b->text);
    while (len && isspace((unsigned char)b->text[len - 1])) b->text[--len] = '\0';
    memcpy(b->spec, b->text, len + 1);
    if (!len) return lt_errorf(err, errlen, "no path given");
    char *items[2 * LT_BLEND_MAX + 1];
    int n = 0;
    double w0;
    char *first_end = b->text + strcspn(b->text, " \t");
    char saved = *first_end;
    *first_end = '\0';
    const int weighted = parse_weight(b->text, &w0) && saved != '\0';
    *first_end = saved;
    if (!weighted) { /* one path (spaces and all) */
        b->n = 1;
        b->weight[0] = 1.0;
        b->path[0] = b->text;
        return 0;
    }
    for (char *save = NULL, *t = strtok_r(b->text, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
        if (n == 2 * LT_BLEND_MAX)
            return lt_errorf(err, errlen, "more than %d datasets in the blend", LT_BLEND_MAX);
        items[n++] = t;
    }
    if (n % 2)
        return lt_errorf(err, errlen, "a blend is 'WEIGHT PATH WEIGHT PATH ...': %d items is an odd "
                         "number (the last weight, '%s', has no path)", n, items[n - 1]);
    double sum = 0.0;
    for (int i = 0; i < n / 2; i++) {
        double w;
        if (!parse_weight(items[2 * i], &w) || !(w > 0))
            return lt_errorf(err, errlen, "item %d of the blend, '%s', should be a positive weight "
                             "(the blend is 'WEIGHT PATH WEIGHT PATH ...')", 2 * i + 1, items[2 * i]);
        b->weight[i] = w;
        b->path[i] = items[2 * i + 1];
        sum += w;
    }
    b->n = n / 2;
    for (int i = 0; i < b->n; i++) b->weight[i] /= sum;
    return 0;
}

int lt_blend_open(LtBlend *b, const char *spec, int vocab, char *err, size_t errlen) {
    char inner[900];
    if (lt_blend_parse(spec, b, inner, sizeof inner)) return lt_errorf(err, errlen, "%s", inner);
    for (int i = 0; i < b->n; i++) {
        b->file[i] = lt_tokens_open(b->path[i], vocab, inner, sizeof inner);
        if (!b->file[i]) {
            lt_blend_close(b);
            return lt_errorf(err, errlen, "%s", inner);
        }
    }
    return 0;
}

void lt_blend_close(LtBlend *b) {
    for (int i = 0; i < b->n; i++) {
        if (b->file[i]) lt_tokens_close(b->file[i]);
        b->file[i] = NULL;
    }
}

uint64_t lt_blend_tokens(const LtBlend *b, int d) {
    return b->ntok[d] ? b->ntok[d] : lt_tokens_count(b->file[d]);
}

/* ---- the order ----------------------------------------------------------------- */

struct LtBlendOrder {
    int n;
    double w[LT_BLEND_MAX];
    pthread_mutex_t mu;
    uint64_t *snap;  /* snap[k * n + d]: samples dataset d took before position k * SNAP_EVERY */
    size_t nsnap, cap;
};

/* w * x rounded to a double before anything else uses it: the build's
 * -ffp-contract=fast would otherwise fuse it with the subtraction into a
 * multiply-add, which rounds once and so breaks Megatron's ties differently. */
static double product(double w, double x) {
    volatile double p = w * x;
    return p;
}

/* Megatron's choice for global sample i given the counts taken before it
 * (each error a rounded product, then a difference, as its build computes). */
static int choose(const LtBlendOrder *o, uint64_t i, const uint64_t *taken) {
    const double x = i > 1 ? (double)i : 1.0;
    int best = 0;
    double best_err = product(o->w[0], x) - (double)taken[0];
    for (int d = 1; d < o->n; d++) {
        const double e = product(o->w[d], x) - (double)taken[d];
        if (e > best_err) best_err = e, best = d;
    }
    return best;
}

LtBlendOrder *lt_blend_order_create(const double *weights, int n) {
    LtBlendOrder *o = lt_calloc(sizeof *o);
    o->n = n;
    memcpy(o->w, weights, sizeof(double) * (size_t)n);
    pthread_mutex_init(&o->mu, NULL);
    o->cap = 16;
    o->snap = lt_calloc(o->cap * (size_t)n * sizeof(uint64_t));
    o->nsnap = 1; /* position 0: nothing taken */
    return o;
}

void lt_blend_order_destroy(LtBlendOrder *o) {
    if (!o) return;
    pthread_mutex_destroy(&o->mu);
    free(o->snap);
    free(o);
}

/* Copy the counts at the last table position <= pos into taken; returns
 * that position. Grows the table as far as pos. */
static uint64_t nearest_snapshot(LtBlendOrder *o, uint64_t pos, uint64_t *taken) {
    const size_t want = (size_t)(pos / SNAP_EVERY);
    const int n = o->n;
    pthread_mutex_lock(&o->mu);
    while (o->nsnap <= want) {
        if (o->nsnap == o->cap) {
            uint64_t *grown = lt_malloc(2 * o->cap * (size_t)n * sizeof(uint64_t));
            memcpy(grown, o->snap, o->cap * (size_t)n * sizeof(uint64_t));
            free(o->snap);
            o->snap = grown;
            o->cap *= 2;
        }
        uint64_t *next = o->snap + o->nsnap * (size_t)n;
        memcpy(next, next - n, sizeof(uint64_t) * (size_t)n);
        const uint64_t start = (uint64_t)(o->nsnap - 1) * SNAP_EVERY;
        for (uint64_t i = start; i < start + SNAP_EVERY; i++) next[choose(o, i, next)]++;
        o->nsnap++;
    }
    memcpy(taken, o->snap + want * (size_t)n, sizeof(uint64_t) * (size_t)n);
    pthread_mutex_unlock(&o->mu);
    return (uint64_t)want * SNAP_EVERY;
}

void lt_blend_order_range(LtBlendOrder *o, uint64_t first, int count, int *dataset,
                          uint64_t *index) {
    uint64_t taken[LT_BLEND_MAX];
    uint64_t i = nearest_snapshot(o, first, taken);
    for (; i < first; i++) taken[choose(o, i, taken)]++;
    for (int k = 0; k < count; k++, i++) {
        const int d = choose(o, i, taken);
        dataset[k] = d;
        index[k] = taken[d]++;
    }
}

void lt_blend_order_taken(LtBlendOrder *o, uint64_t pos, uint64_t *taken) {
    uint64_t i = nearest_snapshot(o, pos, taken);
    for (; i < pos; i++) taken[choose(o, i, taken)]++;
}

/* ---- train/validation/test splits ------------------------------------------------ */

int lt_split_parse(const char *text, double v[3], char *err, size_t errlen) {
    int n = 0;
    for (const char *p = text; *p;) {
        const size_t len = strspn(p, ".0123456789"); /* Megatron's r"[.0-9]+" */
        if (!len) {
            p++;
            continue;
        }
        if (n == 3)
            return lt_errorf(err, errlen, "'%s' has more than three parts (train, validation, "
                             "test)", text);
        char num[64];
        snprintf(num, sizeof num, "%.*s", (int)(len < 63 ? len : 63), p);
        char *end;
        v[n] = strtod(num, &end);
        if (*end || !isfinite(v[n]))
            return lt_errorf(err, errlen, "'%s': '%s' is not a number", text, num);
        n++;
        p += len;
    }
    if (n == 0) return lt_errorf(err, errlen, "'%s' holds no numbers (e.g. \"969,30,1\")", text);
    for (; n < 3; n++) v[n] = 0.0;
    const double sum = v[0] + v[1] + v[2];
    if (!(sum > 0)) return lt_errorf(err, errlen, "'%s' sums to 0", text);
    for (int i = 0; i < 3; i++) v[i] /= sum;
    return 0;
}

void lt_split_docs(const double v[3], uint64_t ndocs, uint64_t beg[3], uint64_t end[3]) {
    double edge[4] = {0.0};
    for (int i = 0; i < 3; i++) edge[i + 1] = edge[i] + v[i];
    for (int i = 0; i < 3; i++) {
        if (edge[i + 1] <= edge[i]) { /* Megatron: no such split */
            beg[i] = end[i] = 0;
            continue;
        }
        /* Python's round(): halves to even, as rint in the default rounding mode */
        beg[i] = (uint64_t)rint(edge[i] * (double)ndocs);
        end[i] = (uint64_t)rint(edge[i + 1] * (double)ndocs);
    }
}
