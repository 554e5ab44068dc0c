/* devclock.c - device-timed spans of a training step (see devclock.h).
 *
 * Spans live in two arrays whose timers are created once and reused: the
 * step's (recycled at each collect, except those still pending on the
 * device) and the graph's (kept until the next capture). A handle tells them
 * apart by its low bit: 2i for step span i, 2i + 1 for graph span i. */
#include "devclock.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { OPEN = 1, ENDED, COUNTED };

typedef struct {
    LtEvent *a, *b;
    unsigned mask;
    int state; /* OPEN: begun; ENDED: its time still to count; COUNTED (step spans) */
} Span;

typedef struct {
    Span *s;
    int n, cap;
} Spans;

static struct {
    LtBackend *be;
    int running, active, capturing;
    int open; /* spans begun and not ended, both arrays */
    Spans step, graph;
} g;

/* The host-timed parts (lt_devclock_part_begin without device timers),
 * counted while the clock is active (g.active, set whether it runs or not). */
static struct {
    double t0[8];
    int depth;
    double sec[LT_CLK_PARTS];
} hp;

int lt_devclock_start(LtBackend *be) {
    lt_devclock_stop();
    if (!be->ops->timer_create || !be->ops->timer_record || !be->ops->timer_elapsed) return 0;
    g.be = be;
    g.running = 1;
    return 1;
}

static void spans_free(Spans *a) {
    for (int i = 0; i < a->cap; i++) {
        if (a->s[i].a) g.be->ops->event_destroy(g.be, a->s[i].a);
        if (a->s[i].b) g.be->ops->event_destroy(g.be, a->s[i].b);
    }
    free(a->s);
    memset(a, 0, sizeof *a);
}

/* (after the graph whose spans it recorded is destroyed) */
void lt_devclock_stop(void) {
    if (g.be) {
        spans_free(&g.step);
        spans_free(&g.graph);
    }
    memset(&g, 0, sizeof g);
}

int lt_devclock_running(void) { return g.running; }
void lt_devclock_set_active(int active) { g.active = active; }

void lt_devclock_capture(int on) {
    if (!g.running) return;
    if (on) g.graph.n = 0; /* a new graph: the old one's spans are gone with it */
    g.capturing = on;
}

static LtStream *stream_or_current(LtStream *s) {
    return s ? s : g.be->ops->current_stream(g.be);
}

int lt_devclock_begin(LtStream *s) {
    if (!g.running || !g.active) return -1;
    Spans *a = g.capturing ? &g.graph : &g.step;
    if (a->n == a->cap) {
        const int cap = a->cap ? 2 * a->cap : 64;
        a->s = realloc(a->s, sizeof(Span) * (size_t)cap);
        if (!a->s) lt_fatal("out of host memory (device timers)");
        memset(a->s + a->cap, 0, sizeof(Span) * (size_t)(cap - a->cap));
        a->cap = cap;
    }
    const int i = a->n++;
    Span *sp = &a->s[i];
    if (!sp->a) sp->a = g.be->ops->timer_create(g.be);
    if (!sp->b) sp->b = g.be->ops->timer_create(g.be);
    sp->mask = 0;
    sp->state = OPEN;
    g.open++;
    g.be->ops->timer_record(g.be, sp->a, stream_or_current(s));
    return 2 * i + (g.capturing ? 1 : 0);
}

void lt_devclock_end(int h, unsigned mask, LtStream *s) {
    if (h < 0 || !g.running) return;
    Spans *a = h & 1 ? &g.graph : &g.step;
    const int i = h >> 1;
    if (i >= a->n || a->s[i].state != OPEN)
        lt_fatal("device timers: span %d ended twice or never begun", h);
    Span *sp = &a->s[i];
    g.be->ops->timer_record(g.be, sp->b, stream_or_current(s));
    sp->mask = mask;
    sp->state = ENDED;
    g.open--;
}

/* Span sp's seconds into sec: 1 counted, 0 pending (or open), -1 the device
 * cannot tell. */
static int add_span(const Span *sp, double sec[LT_CLK_KINDS]) {
    if (sp->state != ENDED) return 0;
    if (!sp->mask) return 1;
    double t = 0.0;
    const int r = g.be->ops->timer_elapsed(g.be, sp->a, sp->b, &t);
    if (r <= 0) return r;
    for (int k = 0; k < LT_CLK_KINDS; k++)
        if (sp->mask & LT_CLK(k)) sec[k] += t;
    return 1;
}

int lt_devclock_collect(double sec[LT_CLK_KINDS]) {
    if (!g.running) return 0;
    double add[LT_CLK_KINDS] = {0};
    int failed = 0;
    for (int i = 0; i < g.graph.n && !failed; i++) failed = add_span(&g.graph.s[i], add) < 0;
    for (int i = 0; i < g.step.n && !failed; i++) {
        const int r = add_span(&g.step.s[i], add);
        failed = r < 0;
        if (r > 0) g.step.s[i].state = COUNTED;
    }
    if (failed) {
        lt_log("device timers: the device could not time a span; the step breakdown is "
               "taken with the host's clocks from now on\n");
        /* not freed before lt_devclock_stop: a graph's record nodes still use theirs */
        g.running = 0;
        return 0;
    }
    /* recycle the counted step spans (they keep their timers), the pending ones
     * first; not while a span is open, whose handle must stay valid */
    if (g.open == 0) {
        int keep = 0;
        for (int i = 0; i < g.step.n; i++) {
            if (g.step.s[i].state == COUNTED) continue;
            const Span t = g.step.s[keep];
            g.step.s[keep++] = g.step.s[i];
            g.step.s[i] = t;
        }
        g.step.n = keep;
    }
    for (int k = 0; k < LT_CLK_KINDS; k++) sec[k] += add[k];
    return 1;
}

/* A part's handle: a device span's (>= 0), or -2 - depth for a host-timed one. */
int lt_devclock_part_begin(void) {
    if (g.running) return lt_devclock_begin(NULL);
    if (!g.active || hp.depth == (int)(sizeof hp.t0 / sizeof hp.t0[0])) return -1;
    hp.t0[hp.depth] = lt_now();
    return -2 - hp.depth++;
}

void lt_devclock_part_end(int h, LtClockKind k) {
    if (h == -1) return;
    if (k < LT_CLK_FIRST_PART || k >= LT_CLK_KINDS) lt_fatal("device timers: %d is no part", k);
    if (h >= 0) {
        lt_devclock_end(h, LT_CLK(k), NULL);
        return;
    }
    const int d = -2 - h;
    if (d != hp.depth - 1) lt_fatal("device timers: part %d ended out of order", h);
    hp.depth--;
    hp.sec[k - LT_CLK_FIRST_PART] += lt_now() - hp.t0[d];
}

void lt_devclock_parts_take(double sec[LT_CLK_PARTS]) {
    for (int k = 0; k < LT_CLK_PARTS; k++) sec[k] += hp.sec[k], hp.sec[k] = 0.0;
}
