/* test_devclock.c - the device-timed step breakdown (devclock.h) over a fake
 * backend whose timers take a timestamp of a clock the test moves, and become
 * readable only when the test lets "the device" run: spans per kind, the
 * inactive clock, spans still pending on the device kept for the next
 * collect, a graph's spans counted at every collect, timers reused from step
 * to step, a span open across a collect, and a device that cannot time a
 * span (the clock stops itself, keeping the timers a graph still records
 * until it is stopped). */
#include "devclock.h"

#include "common.h"
#include "test.h"

typedef struct {
    double t;
    int taken; /* the device passed it */
    int broken;
} FakeTimer;

static double fake_now;
static int fake_created, fake_destroyed, fake_break_next;
#define FAKE_MAX 4096
static FakeTimer *fake_recorded[FAKE_MAX];
static int fake_nrec;

static LtEvent *fake_timer_create(LtBackend *be) {
    (void)be;
    fake_created++;
    return (LtEvent *)lt_calloc(sizeof(FakeTimer));
}

static void fake_event_destroy(LtBackend *be, LtEvent *e) {
    (void)be;
    fake_destroyed++;
    free(e);
}

static void fake_timer_record(LtBackend *be, LtEvent *e, LtStream *s) {
    (void)be, (void)s;
    FakeTimer *t = (FakeTimer *)e;
    t->t = fake_now;
    t->taken = 0;
    t->broken = fake_break_next;
    fake_break_next = 0;
    if (fake_nrec < FAKE_MAX) fake_recorded[fake_nrec++] = t;
}

static int fake_timer_elapsed(LtBackend *be, LtEvent *a, LtEvent *b, double *sec) {
    (void)be;
    const FakeTimer *x = (const FakeTimer *)a, *y = (const FakeTimer *)b;
    if (x->broken || y->broken) return -1;
    if (!x->taken || !y->taken) return 0;
    *sec = y->t - x->t;
    return 1;
}

static LtStream *fake_current_stream(LtBackend *be) {
    (void)be;
    return NULL;
}

/* The device runs everything recorded so far. */
static void device_run(void) {
    for (int i = 0; i < fake_nrec; i++) fake_recorded[i]->taken = 1;
    fake_nrec = 0;
}

static LtBackendOps fake_ops = {
    .name = "fake",
    .event_destroy = fake_event_destroy,
    .current_stream = fake_current_stream,
    .timer_create = fake_timer_create,
    .timer_record = fake_timer_record,
    .timer_elapsed = fake_timer_elapsed,
};
static LtBackend fake_be = {.ops = &fake_ops};

/* A span of `len` seconds of the fake clock counted for mask. */
static void span(double len, unsigned mask) {
    const int h = lt_devclock_begin(NULL);
    fake_now += len;
    lt_devclock_end(h, mask, NULL);
}

static void start(void) {
    fake_now = 0.0;
    fake_nrec = 0;
    lt_devclock_start(&fake_be);
    lt_devclock_set_active(1);
}

static void test_no_timers_no_clock(void) {
    static LtBackendOps none = {.name = "none"};
    LtBackend be = {.ops = &none};
    CHECK(lt_devclock_start(&be) == 0, "a backend without timers started the clock");
    lt_devclock_set_active(1);
    CHECK(lt_devclock_begin(NULL) == -1, "a span began without a clock");
    double sec[LT_CLK_KINDS] = {0};
    CHECK(lt_devclock_collect(sec) == 0, "collect without a clock said it timed the step");
    lt_devclock_stop();
}

static void test_spans_per_kind(void) {
    start();
    REQUIRE(lt_devclock_running(), "the clock did not start");
    span(2.0, LT_CLK(LT_CLK_FORWARD) | LT_CLK(LT_CLK_BUBBLE));
    span(3.0, LT_CLK(LT_CLK_BACKWARD));
    span(7.0, 0); /* counted for nothing */
    span(0.5, LT_CLK(LT_CLK_DP) | LT_CLK(LT_CLK_BUSY_OF(LT_CLK_DP)));
    device_run();
    double sec[LT_CLK_KINDS] = {0};
    REQUIRE(lt_devclock_collect(sec), "collect did not time the step");
    CHECK(sec[LT_CLK_FORWARD] == 2.0 && sec[LT_CLK_BUBBLE] == 2.0, "forward %g bubble %g",
          sec[LT_CLK_FORWARD], sec[LT_CLK_BUBBLE]);
    CHECK(sec[LT_CLK_BACKWARD] == 3.0, "backward %g", sec[LT_CLK_BACKWARD]);
    CHECK(sec[LT_CLK_DP] == 0.5 && sec[LT_CLK_DP_BUSY] == 0.5, "dp %g busy %g", sec[LT_CLK_DP],
          sec[LT_CLK_DP_BUSY]);
    CHECK(sec[LT_CLK_TP] == 0.0 && sec[LT_CLK_OPTIMIZER] == 0.0, "uncounted kinds got time");
    double again[LT_CLK_KINDS] = {0};
    lt_devclock_collect(again);
    for (int k = 0; k < LT_CLK_KINDS; k++) CHECK(again[k] == 0.0, "kind %d counted twice", k);
    lt_devclock_stop();
}

static void test_inactive_records_nothing(void) {
    start();
    lt_devclock_set_active(0);
    CHECK(lt_devclock_begin(NULL) == -1, "an inactive clock began a span");
    lt_devclock_end(-1, LT_CLK(LT_CLK_FORWARD), NULL); /* a no-op */
    lt_devclock_set_active(1);
    span(1.0, LT_CLK(LT_CLK_FORWARD));
    device_run();
    double sec[LT_CLK_KINDS] = {0};
    lt_devclock_collect(sec);
    CHECK(sec[LT_CLK_FORWARD] == 1.0, "forward %g", sec[LT_CLK_FORWARD]);
    lt_devclock_stop();
}

static void test_pending_kept_for_next_collect(void) {
    start();
    span(1.0, LT_CLK(LT_CLK_FORWARD));
    device_run();
    span(4.0, LT_CLK(LT_CLK_DP_BUSY)); /* a gather the device has not finished */
    double sec[LT_CLK_KINDS] = {0};
    lt_devclock_collect(sec);
    CHECK(sec[LT_CLK_FORWARD] == 1.0 && sec[LT_CLK_DP_BUSY] == 0.0, "forward %g dp busy %g",
          sec[LT_CLK_FORWARD], sec[LT_CLK_DP_BUSY]);
    span(2.0, LT_CLK(LT_CLK_FORWARD));
    device_run();
    double next[LT_CLK_KINDS] = {0};
    lt_devclock_collect(next);
    CHECK(next[LT_CLK_DP_BUSY] == 4.0, "the pending span counted %g, not 4", next[LT_CLK_DP_BUSY]);
    CHECK(next[LT_CLK_FORWARD] == 2.0, "forward %g", next[LT_CLK_FORWARD]);
    double third[LT_CLK_KINDS] = {0};
    lt_devclock_collect(third);
    CHECK(third[LT_CLK_DP_BUSY] == 0.0, "the pending span counted again (%g)", third[LT_CLK_DP_BUSY]);
    lt_devclock_stop();
}

static void test_graph_spans_every_collect(void) {
    start();
    span(1.0, LT_CLK(LT_CLK_FORWARD)); /* the first step, not captured */
    lt_devclock_capture(1);
    span(5.0, LT_CLK(LT_CLK_FORWARD));
    span(6.0, LT_CLK(LT_CLK_BACKWARD));
    lt_devclock_capture(0);
    device_run(); /* the capture step's launch */
    double sec[LT_CLK_KINDS] = {0};
    lt_devclock_collect(sec);
    CHECK(sec[LT_CLK_FORWARD] == 6.0 && sec[LT_CLK_BACKWARD] == 6.0, "forward %g backward %g",
          sec[LT_CLK_FORWARD], sec[LT_CLK_BACKWARD]);
    for (int step = 0; step < 3; step++) { /* replays: the graph's timers are taken again */
        double r[LT_CLK_KINDS] = {0};
        span(0.25, LT_CLK(LT_CLK_OPTIMIZER));
        device_run();
        lt_devclock_collect(r);
        CHECK(r[LT_CLK_FORWARD] == 5.0 && r[LT_CLK_BACKWARD] == 6.0 && r[LT_CLK_OPTIMIZER] == 0.25,
              "replay %d: forward %g backward %g optimizer %g", step, r[LT_CLK_FORWARD],
              r[LT_CLK_BACKWARD], r[LT_CLK_OPTIMIZER]);
    }
    lt_devclock_capture(1); /* a new graph replaces the old one's spans */
    lt_devclock_capture(0);
    double none[LT_CLK_KINDS] = {0};
    lt_devclock_collect(none);
    CHECK(none[LT_CLK_FORWARD] == 0.0, "the old graph's spans counted (%g)", none[LT_CLK_FORWARD]);
    lt_devclock_stop();
}

static void test_timers_reused(void) {
    start();
    fake_created = 0;
    for (int step = 0; step < 200; step++) {
        for (int i = 0; i < 10; i++) span(0.001, LT_CLK(LT_CLK_TP));
        device_run();
        double sec[LT_CLK_KINDS] = {0};
        lt_devclock_collect(sec);
        if (step == 199) CHECK(fabs(sec[LT_CLK_TP] - 0.01) < 1e-12, "tp %g", sec[LT_CLK_TP]);
    }
    CHECK(fake_created == 20, "%d timers created for 10 spans a step", fake_created);
    fake_destroyed = 0;
    lt_devclock_stop();
    CHECK(fake_destroyed == fake_created, "%d of %d timers destroyed", fake_destroyed,
          fake_created);
}

static void test_open_span_across_collect(void) {
    start();
    span(1.0, LT_CLK(LT_CLK_GRADS));
    const int h = lt_devclock_begin(NULL);
    device_run();
    double sec[LT_CLK_KINDS] = {0};
    lt_devclock_collect(sec);
    CHECK(sec[LT_CLK_GRADS] == 1.0, "grads %g", sec[LT_CLK_GRADS]);
    fake_now += 2.0;
    lt_devclock_end(h, LT_CLK(LT_CLK_PP), NULL);
    device_run();
    double next[LT_CLK_KINDS] = {0};
    lt_devclock_collect(next);
    CHECK(next[LT_CLK_PP] == 2.0 && next[LT_CLK_GRADS] == 0.0, "pp %g grads %g", next[LT_CLK_PP],
          next[LT_CLK_GRADS]);
    lt_devclock_stop();
}

static void test_device_cannot_tell(void) {
    start();
    fake_created = fake_destroyed = 0;
    lt_devclock_capture(1); /* a graph whose record nodes keep using their timers */
    span(1.0, LT_CLK(LT_CLK_FORWARD));
    lt_devclock_capture(0);
    fake_break_next = 1;
    span(1.0, LT_CLK(LT_CLK_BACKWARD));
    device_run();
    double sec[LT_CLK_KINDS] = {0};
    CHECK(lt_devclock_collect(sec) == 0, "collect with a broken timer said it timed the step");
    CHECK(!lt_devclock_running(), "the clock kept running");
    CHECK(lt_devclock_begin(NULL) == -1, "a stopped clock began a span");
    for (int k = 0; k < LT_CLK_KINDS; k++) CHECK(sec[k] == 0.0, "kind %d got %g", k, sec[k]);
    CHECK(fake_destroyed == 0, "%d timers freed while the graph may still record them",
          fake_destroyed);
    lt_devclock_stop();
    CHECK(fake_destroyed == fake_created, "%d of %d timers freed at stop", fake_destroyed,
          fake_created);
}

/* Parts of the passes: on the device timers where the clock runs (nested, each
 * counted for its own kind), on the host's clock where it does not (only while
 * active, handed over once by lt_devclock_parts_take). */
static void test_parts(void) {
    start();
    const int moe = lt_devclock_part_begin();
    fake_now += 1.0;
    const int ex = lt_devclock_part_begin();
    fake_now += 2.0;
    lt_devclock_part_end(ex, LT_CLK_EXPERTS);
    lt_devclock_part_end(moe, LT_CLK_MOE);
    device_run();
    double sec[LT_CLK_KINDS] = {0}, host[LT_CLK_PARTS] = {0};
    REQUIRE(lt_devclock_collect(sec), "collect did not time the step");
    CHECK(sec[LT_CLK_MOE] == 3.0 && sec[LT_CLK_EXPERTS] == 2.0, "moe %g experts %g",
          sec[LT_CLK_MOE], sec[LT_CLK_EXPERTS]);
    lt_devclock_parts_take(host);
    for (int k = 0; k < LT_CLK_PARTS; k++) CHECK(host[k] == 0.0, "part %d on the host too", k);
    lt_devclock_stop();
    /* no device timers: the host's clock */
    static LtBackendOps none = {.name = "none"};
    LtBackend be = {.ops = &none};
    lt_devclock_start(&be);
    lt_devclock_set_active(0);
    lt_devclock_part_end(lt_devclock_part_begin(), LT_CLK_ATTN); /* inactive: nothing */
    lt_devclock_set_active(1);
    const int head = lt_devclock_part_begin(), attn = lt_devclock_part_begin();
    CHECK(head < -1 && attn < -1 && head != attn, "host handles %d %d", head, attn);
    const double t0 = lt_now();
    while (lt_now() - t0 < 2e-3) {
    }
    lt_devclock_part_end(attn, LT_CLK_ATTN);
    lt_devclock_part_end(head, LT_CLK_HEAD);
    lt_devclock_set_active(0);
    lt_devclock_parts_take(host);
    const double a = host[LT_CLK_ATTN - LT_CLK_FIRST_PART], h = host[LT_CLK_HEAD - LT_CLK_FIRST_PART];
    CHECK(a >= 2e-3 && h >= a && h < 1.0, "attention %g inside the head %g", a, h);
    CHECK(host[LT_CLK_MOE - LT_CLK_FIRST_PART] == 0.0, "moe %g", host[LT_CLK_MOE - LT_CLK_FIRST_PART]);
    double again[LT_CLK_PARTS] = {0};
    lt_devclock_parts_take(again);
    for (int k = 0; k < LT_CLK_PARTS; k++) CHECK(again[k] == 0.0, "part %d taken twice", k);
    lt_devclock_stop();
}

int main(void) {
    RUN(test_no_timers_no_clock);
    RUN(test_parts);
    RUN(test_spans_per_kind);
    RUN(test_inactive_records_nothing);
    RUN(test_pending_kept_for_next_collect);
    RUN(test_graph_spans_every_collect);
    RUN(test_timers_reused);
    RUN(test_open_span_across_collect);
    RUN(test_device_cannot_tell);
    return test_summary();
}
