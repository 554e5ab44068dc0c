/* data_loader.c - the training sample loader with a prefetch thread. See data.h.
 *
 * Sample order. Global position p (step k covers positions k*G .. k*G+G-1)
 * lies in epoch e = p / N at index i = p % N (N = number of samples). Without
 * shuffle the sample is i. With shuffle it is perm_{seed,e}(i), where perm is
 * a keyed Feistel network over [0, 4^h) (the smallest even-bit power of two
 * >= N) restricted to [0, N) by cycle walking: apply the network repeatedly
 * until the value lands below N. A Feistel network is a bijection for any
 * round function, and cycle walking restricts a bijection of a superset to
 * a bijection of the subset, so every epoch visits every sample exactly
 * once. The round keys are derived from (seed, epoch, round) with splitmix64,
 * so the order is a pure function of (seed, epoch) and needs O(1) memory.
 * Since 4^h < 4N, the expected number of walks per lookup is below 4.
 *
 * Prefetching. One background thread fills a ring of `prefetch` slots; step s
 * goes to slot s % prefetch. Shared state (under `mu`): `want`, the next step
 * the trainer is expected to ask for, and `produce`, the next step the thread
 * will prepare; the thread works while produce < want + prefetch, so the
 * steps in flight map to distinct slots. lt_loader_get(step):
 *   - step == want: wait for the slot to hold that step (ready or failed),
 *     copy it out (or return its error), free the slot, advance want;
 *   - otherwise (resume, repeat, skip): bump the generation, drop prepared
 *     slots, set want = produce = step + 1 and read the step synchronously.
 * The thread tags each slot with the generation it was started under and
 * discards its result when the generation has changed meanwhile. */
#include "data.h"

#include "common.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define FEISTEL_ROUNDS 6
#define MAX_PREFETCH 64

enum { SLOT_FREE, SLOT_BUSY, SLOT_READY, SLOT_FAILED };

typedef struct {
    long step;
    uint64_t gen;
    int state;
    char err[512];
    int32_t *buf; /* count * (seq_len + 1) tokens */
} Slot;

/* One dataset of the loader's blend. */
typedef struct {
    LtTokenFile *f;
    uint64_t tok0;  /* its token range starts here (data.split) */
    uint64_t nsamples;
    uint64_t seed;  /* of its shuffle */
    int half_bits;  /* Feistel half width h: domain [0, 4^h) */
} Source;

struct LtLoader {
    int nsrc;
    Source *src;
    LtBlendOrder *order; /* NULL with one dataset */
    LtLoaderConfig cfg;
    size_t row; /* seq_len + 1 */
    int *pick_d;         /* a step's datasets and their positions (fill_step; the */
    uint64_t *pick_q;    /* prefetch thread's, or the caller's after a jump - see pick_mu) */
    pthread_mutex_t pick_mu;

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast on every state change, both directions */
    bool stop;
    uint64_t gen;
    long want, produce;
    Slot *slots;
};

/* ---- shuffle --------------------------------------------------------------- */

static uint64_t round_key(uint64_t seed, uint64_t epoch, int round) {
    return lt_mix64(lt_mix64(seed ^ 0x5851f42d4c957f2dull) ^
                    lt_mix64(epoch * FEISTEL_ROUNDS + (uint64_t)round));
}

/* One pass of the balanced Feistel network over [0, 4^h). */
static uint64_t feistel(uint64_t x, int h, const uint64_t *keys) {
    uint64_t mask = (1ull << h) - 1, left = x >> h, right = x & mask;
    for (int r = 0; r < FEISTEL_ROUNDS; r++) {
        uint64_t t = left ^ (lt_mix64(right ^ keys[r]) & mask);
        left = right;
        right = t;
    }
    return left << h | right;
}

/* Sample id of a dataset's own position q. */
static uint64_t source_sample(const LtLoader *l, const Source *s, uint64_t q) {
    uint64_t n = s->nsamples, epoch = q / n, i = q % n;
    if (!l->cfg.shuffle) return i;
    uint64_t keys[FEISTEL_ROUNDS];
    for (int r = 0; r < FEISTEL_ROUNDS; r++) keys[r] = round_key(s->seed, epoch, r);
    do i = feistel(i, s->half_bits, keys);
    while (i >= n);
    return i;
}

int lt_loader_locate(const LtLoader *l, uint64_t position, uint64_t *sample_id) {
    int d = 0;
    uint64_t q = position;
    if (l->order) lt_blend_order_range(l->order, position, 1, &d, &q);
    *sample_id = source_sample(l, &l->src[d], q);
    return d;
}

uint64_t lt_loader_sample_id(const LtLoader *l, uint64_t position) {
    uint64_t id;
    lt_loader_locate(l, position, &id);
    return id;
}

void lt_loader_taken(const LtLoader *l, uint64_t pos, uint64_t *taken) {
    if (l->order) lt_blend_order_taken(l->order, pos, taken);
    else taken[0] = pos;
}

/* ---- reading a step ---------------------------------------------------------- */

/* Read step `step`'s slice into out[count * row]. Thread-safe: the pick
 * buffers are under pick_mu, the blend order and the token files lock for
 * themselves, the rest is immutable. */
static int fill_step(LtLoader *l, long step, int32_t *out, char *err, size_t errlen) {
    uint64_t G = (uint64_t)l->cfg.samples_per_step;
    uint64_t base = (uint64_t)step * G + (uint64_t)l->cfg.first;
    int count = l->cfg.count;
    if (l->cfg.ramp.start) { /* the step's batch B: the slice scaled by B / G */
        const uint64_t c = lt_rampup_consumed(&l->cfg.ramp, step);
        const uint64_t B = (uint64_t)lt_rampup_batch(&l->cfg.ramp, c);
        base = c + (uint64_t)l->cfg.first * B / G;
        count = (int)((uint64_t)count * B / G);
    }
    char inner[400];
    int rc = 0;
    pthread_mutex_lock(&l->pick_mu);
    if (l->order) lt_blend_order_range(l->order, base, count, l->pick_d, l->pick_q);
    else
        for (int i = 0; i < count; i++) l->pick_d[i] = 0, l->pick_q[i] = base + (uint64_t)i;
    for (int i = 0; i < count && rc == 0; i++) {
        const Source *s = &l->src[l->pick_d[i]];
        uint64_t id = source_sample(l, s, l->pick_q[i]);
        if (lt_tokens_read(s->f, s->tok0 + id * (uint64_t)l->cfg.seq_len, l->row,
                           out + (size_t)i * l->row,
                           inner, sizeof inner) != 0)
            rc = lt_errorf(err, errlen, "sample %llu (tokens from %llu): %s", /* inner names the file */
                           (unsigned long long)id,
                           (unsigned long long)(id * (uint64_t)l->cfg.seq_len), inner);
    }
    pthread_mutex_unlock(&l->pick_mu);
    return rc;
}

static void *prefetch_main(void *arg) {
    LtLoader *l = arg;
    long P = l->cfg.prefetch;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->produce >= l->want + P) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        long s = l->produce++;
        uint64_t g = l->gen;
        Slot *slot = &l->slots[s % P];
        slot->state = SLOT_BUSY;
        slot->step = s;
        slot->gen = g;
        pthread_mutex_unlock(&l->mu);
        int rc = fill_step(l, s, slot->buf, slot->err, sizeof slot->err);
        pthread_mutex_lock(&l->mu);
        if (g != l->gen) slot->state = SLOT_FREE; /* the trainer jumped elsewhere */
        else slot->state = rc == 0 ? SLOT_READY : SLOT_FAILED;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- public API ------------------------------------------------------------------ */

/* The configuration's own limits. 0, or -1 with the problem in err. */
static int check_config(const char *path, const LtLoaderConfig *cfg, char *err, size_t errlen) {
    if (cfg->seq_len < 1 || cfg->samples_per_step < 1)
        return lt_errorf(err, errlen, "loader for '%s': seq_len (%d) and samples_per_step (%d) "
                         "must be >= 1", path, cfg->seq_len, cfg->samples_per_step);
    if (cfg->first < 0 || cfg->count < 1 || cfg->first > cfg->samples_per_step - cfg->count)
        return lt_errorf(err, errlen, "loader for '%s': slice (first %d, count %d) is not inside "
                         "the %d samples of a step", path, cfg->first, cfg->count,
                         cfg->samples_per_step);
    if (cfg->ramp.start && (cfg->ramp.global != cfg->samples_per_step ||
                            (long)cfg->first * cfg->ramp.start % cfg->samples_per_step ||
                            (long)cfg->count * cfg->ramp.start % cfg->samples_per_step ||
                            (long)cfg->first * cfg->ramp.increment % cfg->samples_per_step ||
                            (long)cfg->count * cfg->ramp.increment % cfg->samples_per_step))
        return lt_errorf(err, errlen, "loader for '%s': the slice (first %d, count %d of %d) "
                         "does not scale to whole samples with the ramp-up from %ld by %ld",
                         path, cfg->first, cfg->count, cfg->samples_per_step, cfg->ramp.start,
                         cfg->ramp.increment);
    if (cfg->prefetch < 1 || cfg->prefetch > MAX_PREFETCH)
        return lt_errorf(err, errlen, "loader for '%s': prefetch %d is outside [1, %d]", path,
                         cfg->prefetch, MAX_PREFETCH);
    return 0;
}

/* Dataset d of the blend: its sample count (0, or -1 when it holds none). */
static int init_source(Source *s, const LtBlend *b, int d, const LtLoaderConfig *cfg, char *err,
                       size_t errlen) {
    LtTokenFile *f = b->file[d];
    const uint64_t ntok = lt_blend_tokens(b, d);
    s->f = f;
    s->tok0 = b->ntok[d] ? b->tok0[d] : 0;
    s->nsamples = lt_num_samples(ntok, cfg->seq_len);
    if (s->nsamples == 0)
        return lt_errorf(err, errlen, "'%s' has %llu tokens, fewer than one sample needs "
                         "(seq_len + 1 = %d)", lt_tokens_path(f), (unsigned long long)ntok,
                         cfg->seq_len + 1);
    s->seed = d == 0 ? cfg->seed : lt_mix64(cfg->seed ^ lt_mix64(0xb1e5d00dull + (uint64_t)d));
    int bits = 0;
    while (bits < 64 && (1ull << bits) < s->nsamples) bits++;
    s->half_bits = bits < 2 ? 1 : (bits + 1) / 2;
    return 0;
}

LtLoader *lt_loader_create(LtTokenFile *f, const LtLoaderConfig *cfg, char *err, size_t errlen) {
    LtBlend one = {.n = 1, .weight = {1.0}, .file = {f}};
    return lt_loader_create_blend(&one, cfg, err, errlen);
}

LtLoader *lt_loader_create_blend(const LtBlend *b, const LtLoaderConfig *cfg, char *err,
                                 size_t errlen) {
    if (b->n < 1 || b->n > LT_BLEND_MAX)
        return lt_errorf(err, errlen, "a blend of %d datasets (1 to %d)", b->n, LT_BLEND_MAX),
               NULL;
    if (check_config(lt_tokens_path(b->file[0]), cfg, err, errlen)) return NULL;
    LtLoader *l = lt_calloc(sizeof *l);
    l->cfg = *cfg;
    l->row = (size_t)cfg->seq_len + 1;
    l->nsrc = b->n;
    l->src = lt_calloc(sizeof(Source) * (size_t)b->n);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_mutex_init(&l->pick_mu, NULL);
    l->pick_d = lt_calloc(sizeof(int) * (size_t)cfg->count);
    l->pick_q = lt_calloc(sizeof(uint64_t) * (size_t)cfg->count);
    l->slots = lt_calloc((size_t)cfg->prefetch * sizeof *l->slots);
    for (int i = 0; i < cfg->prefetch; i++) {
        l->slots[i].buf = lt_malloc((size_t)cfg->count * l->row * sizeof(int32_t));
        l->slots[i].step = -1;
    }
    for (int d = 0; d < b->n; d++)
        if (init_source(&l->src[d], b, d, cfg, err, errlen)) {
            lt_loader_destroy(l);
            return NULL;
        }
    if (b->n > 1) l->order = lt_blend_order_create(b->weight, b->n);
    if (pthread_create(&l->thread, NULL, prefetch_main, l) != 0) {
        lt_errorf(err, errlen, "loader for '%s': cannot start the prefetch thread",
                  lt_tokens_path(b->file[0]));
        lt_loader_destroy(l);
        return NULL;
    }
    l->thread_started = true;
    return l;
}

int lt_loader_get(LtLoader *l, long step, int32_t *out, char *err, size_t errlen) {
    /* Positions step*G + G - 1 must fit in 64 bits and want + prefetch in a long. */
    uint64_t G = (uint64_t)l->cfg.samples_per_step;
    if (step < 0 || step > LONG_MAX - 2 * MAX_PREFETCH || (uint64_t)step >= UINT64_MAX / G - 1) {
        lt_errorf(err, errlen, "step %ld is out of range", step);
        return -1;
    }
    long P = l->cfg.prefetch;
    size_t bytes = (size_t)l->cfg.count * l->row * sizeof(int32_t);
    pthread_mutex_lock(&l->mu);
    if (step == l->want) {
        Slot *slot = &l->slots[step % P];
        while (!(slot->step == step && slot->gen == l->gen &&
                 (slot->state == SLOT_READY || slot->state == SLOT_FAILED)))
            pthread_cond_wait(&l->cv, &l->mu);
        int rc = 0;
        if (slot->state == SLOT_READY) {
            memcpy(out, slot->buf, bytes);
        } else {
            lt_errorf(err, errlen, "%s", slot->err);
            rc = -1;
        }
        slot->state = SLOT_FREE;
        l->want++;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        return rc;
    }
    /* Out of order: restart the prefetcher after this step and read it here. */
    l->gen++;
    for (long i = 0; i < P; i++)
        if (l->slots[i].state == SLOT_READY || l->slots[i].state == SLOT_FAILED)
            l->slots[i].state = SLOT_FREE;
    l->want = l->produce = step + 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return fill_step(l, step, out, err, errlen);
}

void lt_loader_destroy(LtLoader *l) {
    if (!l) return;
    if (l->thread_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
    }
    for (int i = 0; i < l->cfg.prefetch; i++) free(l->slots[i].buf);
    free(l->slots);
    free(l->src);
    free(l->pick_d);
    free(l->pick_q);
    lt_blend_order_destroy(l->order);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->pick_mu);
    free(l);
}
