/* test_schedule.c - pipeline schedules (no pipelining, 1F1B, interleaved 1F1B),
 * the discrete-event simulator and `lattice schedule`. */
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline.h"
#include "test.h"

/* Compact text of a list: "F3" / "B3.1" for computes (".c" when chunk > 0);
 * with comm, also "SA(c,m)>p", "RA(c,m)<p", "SG(c,m)>p", "RG(c,m)<p". */
static void format_actions(char *buf, size_t len, const LtAction *a, int n, int with_comm,
                           int limit) {
    size_t o = 0;
    buf[0] = 0;
    int shown = 0;
    for (int i = 0; i < n && shown < limit && o < len; i++) {
        const LtAction *x = &a[i];
        int w;
        const char *sep = shown ? " " : "";
        if (x->kind == LT_ACT_FORWARD || x->kind == LT_ACT_BACKWARD) {
            char k = x->kind == LT_ACT_FORWARD ? 'F' : 'B';
            if (with_comm) w = snprintf(buf + o, len - o, "%s%c(%d,%d)", sep, k, x->chunk, x->mb);
            else if (x->chunk) w = snprintf(buf + o, len - o, "%s%c%d.%d", sep, k, x->mb, x->chunk);
            else w = snprintf(buf + o, len - o, "%s%c%d", sep, k, x->mb);
        } else if (with_comm) {
            static const char *tag[] = {"", "", "SA", "RA", "SG", "RG"};
            int send = x->kind == LT_ACT_SEND_ACT || x->kind == LT_ACT_SEND_GRAD;
            w = snprintf(buf + o, len - o, "%s%s(%d,%d)%c%d", sep, tag[x->kind], x->chunk, x->mb,
                         send ? '>' : '<', x->peer);
        } else {
            continue;
        }
        if (w < 0) break;
        o += (size_t)w;
        shown++;
    }
}

static int build(int pp, int vpp, int mbs, int rank, LtAction *buf, size_t cap) {
    char err[256];
    int n = lt_schedule_rank(pp, vpp, mbs, rank, buf, cap, err, sizeof err);
    if (n < 0) printf("  lt_schedule_rank(%d, %d, %d, %d): %s\n", pp, vpp, mbs, rank, err);
    return n;
}

static void test_check_errors(void) {
    char err[256];
    CHECK(lt_schedule_check(4, 1, 7, err, sizeof err) == 0, "1F1B with M=7: %s", err);
    CHECK(lt_schedule_check(1, 1, 1, err, sizeof err) == 0, "P=1: %s", err);
    err[0] = 0;
    CHECK(lt_schedule_check(4, 2, 6, err, sizeof err) == -1, "M=6, P=4, V=2 accepted");
    CHECK(strstr(err, "multiple") && strstr(err, "6") && strstr(err, "4"), "message: %s", err);
    err[0] = 0;
    CHECK(lt_schedule_check(1, 2, 4, err, sizeof err) == -1, "V=2 with P=1 accepted");
    CHECK(strstr(err, "virtual") != NULL, "message: %s", err);
    CHECK(lt_schedule_check(0, 1, 4, err, sizeof err) == -1, "P=0 accepted");
    CHECK(lt_schedule_check(2, 0, 4, err, sizeof err) == -1, "V=0 accepted");
    CHECK(lt_schedule_check(2, 1, 0, err, sizeof err) == -1, "M=0 accepted");
    CHECK(lt_schedule_check(2, 1, -3, NULL, 0) == -1, "M=-3 accepted (NULL err)");
    CHECK(lt_schedule_check(1024, 64, 1024, err, sizeof err) == -1, "huge work accepted");
    LtAction buf[64];
    err[0] = 0;
    CHECK(lt_schedule_rank(4, 1, 8, 4, buf, 64, err, sizeof err) == -1, "rank 4 of 4 accepted");
    CHECK(strstr(err, "rank 4") != NULL, "message: %s", err);
    CHECK(lt_schedule_rank(4, 1, 8, -1, buf, 64, err, sizeof err) == -1, "rank -1 accepted");
    CHECK(lt_schedule_capacity(4, 1, 8) == 48, "capacity %zu", lt_schedule_capacity(4, 1, 8));
    err[0] = 0;
    CHECK(lt_schedule_rank(4, 1, 8, 0, buf, 47, err, sizeof err) == -1, "short buffer accepted");
    CHECK(strstr(err, "too small") != NULL, "message: %s", err);
    CHECK(lt_schedule_warmup(4, 2, 6, 0) == -1, "warm-up of an invalid schedule");
    CHECK(strcmp(lt_action_kind_name(LT_ACT_RECV_GRAD), "RECV_GRAD") == 0, "kind name");
}

/* Megatron's 1F1B example: P=4, M=8. */
static void test_golden_1f1b(void) {
    LtAction buf[64];
    char s[1024];
    int n = build(4, 1, 8, 0, buf, 64);
    REQUIRE(n > 0, "build");
    format_actions(s, sizeof s, buf, n, 0, 1000);
    CHECK(strcmp(s, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7") == 0, "rank 0: %s", s);
    n = build(4, 1, 8, 3, buf, 64);
    format_actions(s, sizeof s, buf, n, 0, 1000);
    CHECK(strcmp(s, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7") == 0, "rank 3: %s", s);
    n = build(4, 1, 8, 1, buf, 64);
    format_actions(s, sizeof s, buf, n, 0, 1000);
    CHECK(strcmp(s, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7") == 0, "rank 1: %s", s);
    /* Fewer micro batches than the warm-up: all forwards, then all backwards. */
    n = build(4, 1, 2, 0, buf, 64);
    format_actions(s, sizeof s, buf, n, 0, 1000);
    CHECK(strcmp(s, "F0 F1 B0 B1") == 0, "rank 0, M=2: %s", s);
    for (int r = 0; r < 4; r++)
        CHECK(lt_schedule_warmup(4, 1, 8, r) == 3 - r, "warm-up rank %d", r);
    /* No pipelining: forward and backward of each micro batch back to back. */
    n = build(1, 1, 3, 0, buf, 64);
    format_actions(s, sizeof s, buf, n, 1, 1000);
    CHECK(strcmp(s, "F(0,0) B(0,0) F(0,1) B(0,1) F(0,2) B(0,2)") == 0, "P=1: %s", s);
    /* With communication: receives right before, sends right after. */
    n = build(2, 1, 2, 0, buf, 64);
    format_actions(s, sizeof s, buf, n, 1, 1000);
    CHECK(strcmp(s, "F(0,0) SA(0,0)>1 F(0,1) SA(0,1)>1 RG(0,0)<1 B(0,0) RG(0,1)<1 B(0,1)") == 0,
          "P=2 rank 0: %s", s);
    n = build(2, 1, 2, 1, buf, 64);
    format_actions(s, sizeof s, buf, n, 1, 1000);
    CHECK(strcmp(s, "RA(0,0)<0 F(0,0) B(0,0) SG(0,0)>0 RA(0,1)<0 F(0,1) B(0,1) SG(0,1)>0") == 0,
          "P=2 rank 1: %s", s);
}

/* Megatron's interleaved example: P=4, V=2, M=8; and the chunk wrap-around. */
static void test_golden_interleaved(void) {
    LtAction buf[128];
    char s[2048];
    static const int warm[4] = {10, 8, 6, 4};
    for (int r = 0; r < 4; r++)
        CHECK(lt_schedule_warmup(4, 2, 8, r) == warm[r], "rank %d warm-up %d", r,
              lt_schedule_warmup(4, 2, 8, r));
    int n = build(4, 2, 8, 0, buf, 128);
    REQUIRE(n > 0, "build");
    format_actions(s, sizeof s, buf, n, 0, 16);
    CHECK(strcmp(s, "F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 F5 F6 B0.1 F7 B1.1 F4.1 B2.1") == 0,
          "rank 0: %s", s);
    format_actions(s, sizeof s, buf, n, 0, 1000);
    CHECK(strstr(s, "B4 B5 B6 B7") == s + strlen(s) - strlen("B4 B5 B6 B7"), "rank 0 tail: %s",
          s);
    /* P=2, V=2: stage 2 (rank 0, chunk 1) receives from stage 1 (rank 1,
     * chunk 0); stage 3 (rank 1, chunk 1) sends no activation. */
    n = build(2, 2, 2, 0, buf, 128);
    format_actions(s, sizeof s, buf, n, 1, 1000);
    CHECK(strcmp(s, "F(0,0) SA(0,0)>1 F(0,1) SA(0,1)>1 RA(1,0)<1 F(1,0) SA(1,0)>1 RA(1,1)<1 "
                    "F(1,1) SA(1,1)>1 RG(1,0)<1 B(1,0) SG(1,0)>1 RG(1,1)<1 B(1,1) SG(1,1)>1 "
                    "RG(0,0)<1 B(0,0) RG(0,1)<1 B(0,1)") == 0,
          "P=2 V=2 rank 0: %s", s);
    n = build(2, 2, 2, 1, buf, 128);
    format_actions(s, sizeof s, buf, n, 1, 1000);
    CHECK(strcmp(s, "RA(0,0)<0 F(0,0) SA(0,0)>0 RA(0,1)<0 F(0,1) SA(0,1)>0 RA(1,0)<0 F(1,0) "
                    "B(1,0) SG(1,0)>0 RA(1,1)<0 F(1,1) B(1,1) SG(1,1)>0 RG(0,0)<0 B(0,0) "
                    "SG(0,0)>0 RG(0,1)<0 B(0,1) SG(0,1)>0") == 0,
          "P=2 V=2 rank 1: %s", s);
    /* Steady state in the batched form: forward, backward, then one batch with
     * both sends and the receives of the next forward and backward. */
    n = build(2, 2, 4, 1, buf, 128);
    format_actions(s, sizeof s, buf, n, 1, 1000);
    CHECK(strstr(s, "F(0,2) B(0,0) SA(0,2)>0 SG(0,0)>0 RA(0,3)<0 RG(0,1)<0 F(0,3) B(0,1)") != NULL,
          "P=2 V=2 M=4 rank 1: %s", s);
}

/* Every compute exactly once; each RECV before the compute that uses it and
 * each SEND after the compute that produced it, with the neighbouring rank as
 * peer (1F1B: directly before / after; interleaved: batched, so only the
 * order is required); every message exactly once. */
static int check_list(int pp, int vpp, int mbs, int r, const LtAction *a, int n,
                      unsigned char *seen) {
    int total = vpp * mbs, ok = 1;
    int *pos = malloc(sizeof(int) * 2 * (size_t)total);
    unsigned char *msgs = calloc(4 * (size_t)total, 1);
    memset(seen, 0, (size_t)2 * total);
    for (int i = 0; i < n; i++) {
        const LtAction *x = &a[i];
        if (x->kind == LT_ACT_FORWARD || x->kind == LT_ACT_BACKWARD) {
            int at = (x->kind == LT_ACT_BACKWARD) * total + x->chunk * mbs + x->mb;
            if (seen[at]++) ok = 0;
            pos[at] = i;
        }
    }
    for (int k = 0; k < 2 * total; k++)
        if (seen[k] != 1) ok = 0;
    for (int i = 0; i < n && ok; i++) {
        const LtAction *x = &a[i];
        if (x->kind == LT_ACT_FORWARD || x->kind == LT_ACT_BACKWARD) continue;
        int recv = x->kind == LT_ACT_RECV_ACT || x->kind == LT_ACT_RECV_GRAD;
        int grad = x->kind == LT_ACT_SEND_GRAD || x->kind == LT_ACT_RECV_GRAD;
        int c = pos[grad * total + x->chunk * mbs + x->mb];
        int peer = (recv != grad) ? (r + pp - 1) % pp : (r + 1) % pp;
        if (x->peer != peer || (recv ? c <= i : c >= i)) ok = 0;
        if (vpp == 1 && c != (recv ? i + 1 : i - 1)) ok = 0;
        if (msgs[(size_t)(2 * recv + grad) * total + x->chunk * mbs + x->mb]++) ok = 0;
    }
    free(pos);
    free(msgs);
    return ok;
}

typedef struct {
    double fs, fe, bs, be;
} StageTimes;

static int check_dependencies(const LtSimResult *res, StageTimes *t) {
    int pp = res->pp, mbs = res->micro_batches, stages = pp * res->vpp;
    for (int r = 0; r < pp; r++)
        for (int i = res->event_off[r]; i < res->event_off[r + 1]; i++) {
            const LtSimEvent *e = &res->events[i];
            StageTimes *st = &t[(e->chunk * pp + r) * mbs + e->mb];
            if (e->kind == LT_ACT_FORWARD) st->fs = e->start, st->fe = e->end;
            else st->bs = e->start, st->be = e->end;
        }
    for (int s = 0; s < stages; s++)
        for (int m = 0; m < mbs; m++) {
            const StageTimes *x = &t[s * mbs + m];
            if (x->bs < x->fe) return 0;
            if (s + 1 < stages && (t[(s + 1) * mbs + m].fs < x->fe || x->bs < t[(s + 1) * mbs + m].be))
                return 0;
        }
    return 1;
}

/* All P <= 8, V <= 4, M <= 64: lists, simulation, dependencies, peak
 * in-flight = min(W_r + 1, V*M), and with zero latency makespan =
 * (V*M + P - 1) * (fwd + bwd), i.e. bubble = (P - 1) / (V*M + P - 1). */
static void test_sweep(void) {
    static const LtSimCost costs[] = {{1, 2, 0, NULL}, {1, 1, 0, NULL}, {3, 1, 0, NULL}};
    LtAction *buf = malloc(6 * 4 * 64 * sizeof *buf * 8);
    LtAction *acts[8];
    int n[8];
    unsigned char seen[2 * 4 * 64];
    StageTimes *times = malloc(8 * 4 * 64 * sizeof *times);
    char err[1024];
    int combos = 0, failures = 0;
    for (int pp = 1; pp <= 8; pp++)
        for (int vpp = 1; vpp <= 4; vpp++)
            for (int mbs = 1; mbs <= 64; mbs++) {
                if (lt_schedule_check(pp, vpp, mbs, NULL, 0)) continue;
                combos++;
                size_t cap = lt_schedule_capacity(pp, vpp, mbs);
                for (int r = 0; r < pp; r++) {
                    acts[r] = buf + (size_t)r * cap;
                    n[r] = build(pp, vpp, mbs, r, acts[r], cap);
                    if (n[r] < 0 || !check_list(pp, vpp, mbs, r, acts[r], n[r], seen)) {
                        CHECK(0, "P=%d V=%d M=%d rank %d: bad list", pp, vpp, mbs, r);
                        failures++;
                    }
                }
                int total = vpp * mbs;
                /* NCCL semantics: one order for all messages between two ranks (and
                 * so also per kind), rendezvous sends, consecutive operations batched */
                if (lt_schedule_check_ordered(pp, vpp, acts, n, 1, err, sizeof err) ||
                    lt_schedule_check_ordered(pp, vpp, acts, n, 2, err, sizeof err)) {
                    CHECK(0, "P=%d V=%d M=%d ordered/rendezvous: %s", pp, vpp, mbs, err);
                    failures++;
                }
                for (size_t ci = 0; ci < sizeof costs / sizeof costs[0] && failures < 5; ci++) {
                    LtSimCost c = costs[ci];
                    LtSimResult res;
                    if (lt_schedule_simulate(pp, vpp, mbs, acts, n, c, &res, err, sizeof err)) {
                        CHECK(0, "P=%d V=%d M=%d: %s", pp, vpp, mbs, err);
                        failures++;
                        continue;
                    }
                    double span = (double)(total + pp - 1) * (c.fwd + c.bwd);
                    double bubble = (double)(pp - 1) / (total + pp - 1);
                    /* the same in Megatron's form: idle time per rank over its compute
                     * time, (P - 1) / (V * M) */
                    double busy = (double)total * (c.fwd + c.bwd);
                    double idle_ratio = (res.makespan - busy) / busy;
                    int ok = res.makespan == span && fabs(res.bubble - bubble) < 1e-12 &&
                             fabs(idle_ratio - (double)(pp - 1) / total) < 1e-12 &&
                             res.messages == 2 * mbs * (pp * vpp - 1);
                    CHECK(ok, "P=%d V=%d M=%d cost %g/%g: makespan %g (want %g) bubble %g (want "
                          "%g) messages %d", pp, vpp, mbs, c.fwd, c.bwd, res.makespan, span,
                          res.bubble, bubble, res.messages);
                    for (int r = 0; r < pp; r++) {
                        int w = lt_schedule_warmup(pp, vpp, mbs, r);
                        int peak = w + 1 < total ? w + 1 : total;
                        if (vpp == 1) CHECK(peak == (pp - r < mbs ? pp - r : mbs), "1F1B form");
                        CHECK(res.peak_inflight[r] == peak, "P=%d V=%d M=%d rank %d: peak %d, want %d",
                              pp, vpp, mbs, r, res.peak_inflight[r], peak);
                        CHECK(res.busy[r] == total * (c.fwd + c.bwd), "busy rank %d", r);
                        CHECK(res.event_off[r + 1] - res.event_off[r] == 2 * total, "events");
                    }
                    memset(times, 0, (size_t)pp * vpp * mbs * sizeof *times);
                    CHECK(check_dependencies(&res, times), "P=%d V=%d M=%d: dependency violated",
                          pp, vpp, mbs);
                    failures += test_cur_failed;
                    lt_sim_free(&res);
                }
            }
    /* V=1: 8 * 64; V=2..4: M a multiple of P=2..8 (32+21+16+12+10+9+8 each). */
    CHECK(combos == 8 * 64 + 3 * 108, "combos %d", combos);
    printf("  %d (P, V, M) combinations simulated\n", combos);
    free(buf);
    free(times);
}

/* Latency only delays: makespan grows, nothing deadlocks, P=1 unaffected. */
static void test_latency(void) {
    char err[512];
    LtSimResult a, b;
    REQUIRE(lt_schedule_simulate_all(4, 2, 8, (LtSimCost){1, 2, 0, NULL}, &a, err, sizeof err) == 0,
            "%s", err);
    REQUIRE(lt_schedule_simulate_all(4, 2, 8, (LtSimCost){1, 2, 1, NULL}, &b, err, sizeof err) == 0,
            "%s", err);
    CHECK(b.makespan > a.makespan && b.bubble > a.bubble, "latency: %g vs %g", b.makespan,
          a.makespan);
    CHECK(b.busy_total == a.busy_total, "busy %g vs %g", b.busy_total, a.busy_total);
    lt_sim_free(&a);
    lt_sim_free(&b);
    REQUIRE(lt_schedule_simulate_all(1, 1, 5, (LtSimCost){1, 2, 7, NULL}, &a, err, sizeof err) == 0,
            "%s", err);
    CHECK(a.makespan == 15 && a.bubble == 0 && a.messages == 0, "P=1: %g %g", a.makespan,
          a.bubble);
    lt_sim_free(&a);
    CHECK(lt_schedule_simulate_all(2, 1, 2, (LtSimCost){1, -1, 0, NULL}, &a, err, sizeof err) == -1,
          "negative cost accepted");
}

/* Stages of unequal work: the slower stage paces 1F1B; a factor for all
 * scales the makespan; a negative one is refused. */
static void test_stage_scale(void) {
    char err[512];
    LtSimResult a, b;
    const double slow1[2] = {1, 2}, twice[8] = {2, 2, 2, 2, 2, 2, 2, 2}, bad[2] = {1, -1};
    /* P=2, M=4, f=1, b=2, stage 1 at twice the cost: it is busy 4 x (2 + 4) = 24
     * after stage 0's first forward (1) and before stage 0's last backward (2) */
    REQUIRE(lt_schedule_simulate_all(2, 1, 4, (LtSimCost){1, 2, 0, slow1}, &a, err, sizeof err) == 0,
            "%s", err);
    CHECK(a.makespan == 27 && a.busy[0] == 12 && a.busy[1] == 24, "makespan %g, busy %g %g",
          a.makespan, a.busy[0], a.busy[1]);
    lt_sim_free(&a);
    REQUIRE(lt_schedule_simulate_all(4, 2, 8, (LtSimCost){1, 2, 0, NULL}, &a, err, sizeof err) == 0,
            "%s", err);
    REQUIRE(lt_schedule_simulate_all(4, 2, 8, (LtSimCost){1, 2, 0, twice}, &b, err, sizeof err) == 0,
            "%s", err);
    CHECK(b.makespan == 2 * a.makespan && b.bubble == a.bubble, "x2: %g vs %g", b.makespan, a.makespan);
    lt_sim_free(&a);
    lt_sim_free(&b);
    CHECK(lt_schedule_simulate_all(2, 1, 2, (LtSimCost){1, 1, 0, bad}, &a, err, sizeof err) == -1 &&
              strstr(err, "cost factor"),
          "negative factor accepted");
}

typedef struct {
    LtAction buf[8][6 * 4 * 16];
    LtAction *acts[8];
    int n[8];
} Lists;

static void make_lists(Lists *l, int pp, int vpp, int mbs) {
    for (int r = 0; r < pp; r++) {
        l->acts[r] = l->buf[r];
        l->n[r] = build(pp, vpp, mbs, r, l->buf[r], sizeof l->buf[r] / sizeof l->buf[r][0]);
    }
}

static int find(const Lists *l, int r, LtActKind kind, int from) {
    for (int i = from; i < l->n[r]; i++)
        if (l->acts[r][i].kind == kind) return i;
    return -1;
}

static int simulate(Lists *l, int pp, int vpp, int mbs, char *err, size_t errlen) {
    LtSimResult res;
    int rc = lt_schedule_simulate(pp, vpp, mbs, l->acts, l->n, (LtSimCost){1, 2, 0, NULL}, &res, err,
                                  errlen);
    if (rc == 0) lt_sim_free(&res);
    return rc;
}

static void test_deadlock_detected(void) {
    static const int cases[][3] = {{4, 1, 8}, {2, 1, 2}, {4, 2, 8}, {3, 4, 6}};
    static Lists l;
    char err[1024];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int pp = cases[k][0], vpp = cases[k][1], mbs = cases[k][2];
        make_lists(&l, pp, vpp, mbs);
        CHECK(simulate(&l, pp, vpp, mbs, err, sizeof err) == 0, "intact list: %s", err);
        /* Rank 0 waits for a gradient before sending its first activation. */
        int i = find(&l, 0, LT_ACT_SEND_ACT, 0), j = find(&l, 0, LT_ACT_RECV_GRAD, 0);
        REQUIRE(i >= 0 && j > i, "case %zu: send %d recv %d", k, i, j);
        LtAction t = l.acts[0][i];
        l.acts[0][i] = l.acts[0][j];
        l.acts[0][j] = t;
        err[0] = 0;
        CHECK(simulate(&l, pp, vpp, mbs, err, sizeof err) == -1, "case %zu: swap not caught", k);
        CHECK(strstr(err, "deadlock") && strstr(err, "rank 0 waits"), "case %zu: %s", k, err);
    }
}

/* The same computes with every receive moved right before its compute and
 * every send right after (the form 1F1B uses). */
static void unbatch(Lists *l, int pp) {
    static LtAction out[6 * 4 * 64];
    for (int r = 0; r < pp; r++) {
        int k = 0;
        for (int i = 0; i < l->n[r]; i++) {
            const LtAction *x = &l->acts[r][i];
            if (x->kind != LT_ACT_FORWARD && x->kind != LT_ACT_BACKWARD) continue;
            int fwd = x->kind == LT_ACT_FORWARD;
            for (int pass = 0; pass < 3; pass++) {
                LtActKind want = pass == 1 ? x->kind
                                 : pass == 0 ? (fwd ? LT_ACT_RECV_ACT : LT_ACT_RECV_GRAD)
                                             : (fwd ? LT_ACT_SEND_ACT : LT_ACT_SEND_GRAD);
                for (int j = 0; j < l->n[r]; j++) {
                    const LtAction *y = &l->acts[r][j];
                    if (y->kind == want && y->chunk == x->chunk && y->mb == x->mb) out[k++] = *y;
                }
            }
        }
        REQUIRE(k == l->n[r], "rank %d: %d of %d actions", r, k, l->n[r]);
        memcpy(l->acts[r], out, (size_t)k * sizeof *out);
    }
}

/* The ordered/rendezvous check can fail: interleaved with each receive right
 * before its compute runs with buffered sends (MPI) but deadlocks when sends
 * wait for their receive (NCCL); and a send out of order is named. */
static void test_rendezvous_and_order(void) {
    static Lists l;
    char err[1024];
    make_lists(&l, 4, 2, 8);
    CHECK(lt_schedule_check_ordered(4, 2, l.acts, l.n, 1, err, sizeof err) == 0, "%s", err);
    unbatch(&l, 4);
    CHECK(simulate(&l, 4, 2, 8, err, sizeof err) == 0, "unbatched, buffered sends: %s", err);
    err[0] = 0;
    CHECK(lt_schedule_check_ordered(4, 2, l.acts, l.n, 2, err, sizeof err) == -1 &&
              strstr(err, "deadlock with rendezvous sends"),
          "unbatched interleaved passed the rendezvous check: %s", err);
    /* P=2, 1F1B: rank 0 sends micro batch 1's activation before micro batch 0's */
    make_lists(&l, 2, 1, 2); /* rank 0: F SA F SA RG B RG B */
    LtAction t = l.acts[0][1];
    l.acts[0][1] = l.acts[0][3];
    l.acts[0][3] = t;
    err[0] = 0;
    CHECK(lt_schedule_check_ordered(2, 1, l.acts, l.n, 1, err, sizeof err) == -1 &&
              strstr(err, "out of order") && strstr(err, "SEND_ACT(chunk 0, mb 1"),
          "swapped sends: %s", err);
}

/* Forward passes only (evaluation): every forward once per rank, and the
 * lists pass the ordered/rendezvous check for any micro batch count. */
/* parallel.overlap_p2p_comm's lists (receives posted one run ahead on MPI):
 * receives only move earlier - sends, compute and each kind of receive from
 * one peer keep their order, so tags and NCCL-style issue order match the
 * plain list's, which the sweep proves deadlock-free - every receive still
 * comes before the pass that reads it (where the executor waits for it, at
 * or after the plain list's wait), and receives actually moved. */
static void same_subsequence(const LtAction *a, int na, const LtAction *b, int nb, int recv,
                             int pp, int vpp, int mbs, int r) {
    int i = 0, j = 0;
    for (;;) {
        while (i < na && ((a[i].kind == LT_ACT_RECV_ACT || a[i].kind == LT_ACT_RECV_GRAD) != recv))
            i++;
        while (j < nb && ((b[j].kind == LT_ACT_RECV_ACT || b[j].kind == LT_ACT_RECV_GRAD) != recv))
            j++;
        if (i == na || j == nb) break;
        if (memcmp(&a[i], &b[j], sizeof a[i])) break;
        i++, j++;
    }
    CHECK(i == na && j == nb, "P=%d V=%d M=%d rank %d: %s order changed at %d/%d", pp, vpp, mbs, r,
          recv ? "receive" : "send/compute", i, j);
}

static void test_post_ahead(void) {
    static Lists l, orig;
    int combos = 0;
    for (int pp = 2; pp <= 8; pp++)
        for (int vpp = 1; vpp <= 4; vpp++)
            for (int mbs = 2; mbs <= 16; mbs++) {
                if (lt_schedule_check(pp, vpp, mbs, NULL, 0) ||
                    lt_schedule_capacity(pp, vpp, mbs) > sizeof l.buf[0] / sizeof l.buf[0][0])
                    continue;
                make_lists(&l, pp, vpp, mbs);
                make_lists(&orig, pp, vpp, mbs);
                int moved = 0;
                for (int r = 0; r < pp; r++) moved += lt_schedule_post_ahead(l.acts[r], l.n[r]);
                combos++;
                CHECK(moved > 0, "P=%d V=%d M=%d: no receive moved", pp, vpp, mbs);
                for (int r = 0; r < pp; r++) {
                    same_subsequence(orig.acts[r], orig.n[r], l.acts[r], l.n[r], 0, pp, vpp, mbs, r);
                    same_subsequence(orig.acts[r], orig.n[r], l.acts[r], l.n[r], 1, pp, vpp, mbs, r);
                    for (int i = 0; i < l.n[r]; i++) {
                        const LtAction *a = &l.acts[r][i];
                        if (a->kind != LT_ACT_RECV_ACT && a->kind != LT_ACT_RECV_GRAD) continue;
                        const LtActKind use =
                            a->kind == LT_ACT_RECV_ACT ? LT_ACT_FORWARD : LT_ACT_BACKWARD;
                        int later = 0;
                        for (int j = i + 1; j < l.n[r] && !later; j++)
                            later = l.acts[r][j].kind == use && l.acts[r][j].chunk == a->chunk &&
                                    l.acts[r][j].mb == a->mb;
                        CHECK(later, "P=%d V=%d M=%d rank %d: receive %d after its pass", pp, vpp,
                              mbs, r, i);
                    }
                }
            }
    CHECK(combos > 50, "only %d combinations", combos);
}

static void test_forward_only(void) {
    static LtAction buf[8][3 * 4 * 17];
    LtAction *acts[8];
    int n[8];
    char err[1024];
    static const int counts[] = {0, 1, 3, 17};
    for (int pp = 1; pp <= 8; pp++)
        for (int vpp = 1; vpp <= 4; vpp++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
                int mbs = counts[k];
                for (int r = 0; r < pp; r++) {
                    acts[r] = buf[r];
                    n[r] = lt_schedule_forward_rank(pp, vpp, mbs, r, buf[r], 3 * 4 * 17, err,
                                                    sizeof err);
                    int fwd = 0;
                    for (int i = 0; i < n[r]; i++) fwd += buf[r][i].kind == LT_ACT_FORWARD;
                    CHECK(n[r] >= 0 && fwd == vpp * mbs, "P=%d V=%d M=%d rank %d: %d forwards",
                          pp, vpp, mbs, r, fwd);
                }
                CHECK(lt_schedule_check_ordered(pp, vpp, acts, n, 1, err, sizeof err) == 0,
                      "P=%d V=%d M=%d: %s", pp, vpp, mbs, err);
            }
    CHECK(lt_schedule_forward_rank(2, 1, 4, 0, buf[0], 11, err, sizeof err) == -1 &&
              strstr(err, "too small"),
          "%s", err);
}

static void test_broken_lists(void) {
    static Lists l;
    char err[1024];
    make_lists(&l, 2, 1, 2); /* rank 1: RA F B SG RA F B SG */
    l.acts[1][0].peer = 1;
    CHECK(simulate(&l, 2, 1, 2, err, sizeof err) == -1 && strstr(err, "wrong peer"), "%s", err);
    make_lists(&l, 2, 1, 2);
    memmove(&l.acts[1][0], &l.acts[1][1], (size_t)(l.n[1] - 1) * sizeof(LtAction));
    l.n[1]--; /* drop the first receive */
    CHECK(simulate(&l, 2, 1, 2, err, sizeof err) == -1 && strstr(err, "activation was received"),
          "%s", err);
    make_lists(&l, 2, 1, 2);
    l.n[0]--; /* rank 0 never runs its last backward */
    CHECK(simulate(&l, 2, 1, 2, err, sizeof err) == -1 && strstr(err, "never runs the backward"),
          "%s", err);
    make_lists(&l, 2, 1, 2);
    l.acts[1][6] = l.acts[1][5]; /* second F(0,1) instead of B(0,1) */
    CHECK(simulate(&l, 2, 1, 2, err, sizeof err) == -1 && strstr(err, "forward runs twice"),
          "%s", err);
    make_lists(&l, 2, 1, 2);
    l.acts[1][2].kind = LT_ACT_FORWARD; /* rank 1: B(0,0) before F(0,0) */
    l.acts[1][1].kind = LT_ACT_BACKWARD;
    CHECK(simulate(&l, 2, 1, 2, err, sizeof err) == -1 && strstr(err, "backward before its forward"),
          "%s", err);
    make_lists(&l, 2, 1, 2);
    l.acts[1][1].mb = 5;
    CHECK(simulate(&l, 2, 1, 2, err, sizeof err) == -1 && strstr(err, "out of range"), "%s", err);
}

static int cli(int argc, const char **argv) {
    fflush(stdout);
    return lt_cmd_schedule(argc, (char **)argv);
}

static int count(const char *hay, const char *needle) {
    int c = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) c++;
    return c;
}

static void test_cli(void) {
    char svg[] = "/tmp/lt_schedule_XXXXXX";
    int fd = mkstemp(svg);
    REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    const char *ok[] = {"schedule", "--pp", "4", "--vpp", "2", "--micro-batches", "8", "--svg", svg};
    CHECK(cli(9, ok) == 0, "valid arguments failed");
    FILE *f = fopen(svg, "r");
    REQUIRE(f, "no svg");
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    CHECK(strstr(text, "<svg") && strstr(text, "</svg>"), "not an svg");
    /* Background + one row rect per rank + one rect per compute. */
    CHECK(count(text, "<rect") == 1 + 4 + 4 * 2 * 16, "%d rects", count(text, "<rect"));
    CHECK(strstr(text, ">F3.1<") && strstr(text, ">B7<"), "labels missing");
    unlink(svg);
    const char *one[] = {"schedule", "--pp", "1", "--micro-batches", "3", "--fwd-cost", "2"};
    CHECK(cli(7, one) == 0, "P=1 failed");
    const char *help[] = {"schedule", "--help"};
    CHECK(cli(2, help) == 0, "--help");
    const char *bad[][8] = {
        {"schedule", "--micro-batches", "8"},
        {"schedule", "--pp", "4"},
        {"schedule", "--pp", "4", "--vpp", "2", "--micro-batches", "6"},
        {"schedule", "--pp", "1", "--vpp", "2", "--micro-batches", "4"},
        {"schedule", "--pp", "0", "--micro-batches", "4"},
        {"schedule", "--pp", "2x", "--micro-batches", "4"},
        {"schedule", "--pp", "2", "--micro-batches", "4", "--fwd-cost", "0"},
        {"schedule", "--pp", "2", "--micro-batches", "4", "--bogus", "1"},
        {"schedule", "--pp", "2", "--micro-batches", "4", "extra"},
        {"schedule", "--pp", "2", "--micro-batches"},
        {"schedule", "--pp", "2", "--micro-batches", "4", "--svg", "/nonexistent/dir/x.svg"},
    };
    static const int argcs[] = {3, 3, 7, 7, 5, 5, 7, 7, 6, 4, 7};
    for (size_t i = 0; i < sizeof argcs / sizeof argcs[0]; i++)
        CHECK(cli(argcs[i], bad[i]) == 2, "bad case %zu not rejected with 2", i);
}

/* lattice schedule's stdout for argv into out[len] (NUL-terminated): its status. */
static int cli_output(int argc, const char **argv, char *out, size_t len) {
    char path[] = "/tmp/lt_schedule_out_XXXXXX";
    const int fd = mkstemp(path), saved = dup(STDOUT_FILENO);
    out[0] = 0;
    if (fd < 0 || saved < 0) return -1;
    fflush(stdout);
    dup2(fd, STDOUT_FILENO);
    const int rc = lt_cmd_schedule(argc, (char **)argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    const ssize_t n = pread(fd, out, len - 1, 0);
    out[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    return rc;
}

/* The timeline's legend under a narrow one; past 200 characters a row, a
 * summary by rank instead (unless --full). */
static void test_cli_legend_and_summary(void) {
    static char out[1 << 16];
    const char *narrow[] = {"schedule", "--pp", "4", "--micro-batches", "8"};
    CHECK(cli_output(5, narrow, out, sizeof out) == 0, "narrow failed");
    CHECK(strstr(out, "rank 3   .  .  .  F0 B0===") && strstr(out, "legend: one time unit per 3 "
                                                                  "characters; F<mb> the forward"),
          "narrow: %s", out);
    CHECK(strstr(out, "'=' the compute goes on; '.' the rank is idle"), "legend: %s", out);
    const char *wide[] = {"schedule", "--pp", "8", "--vpp", "2", "--micro-batches", "16"};
    CHECK(cli_output(7, wide, out, sizeof out) == 0, "wide failed");
    CHECK(strstr(out, "characters wide per rank: a summary by rank instead") &&
              !strstr(out, "legend:") && !strstr(out, "F0.1"),
          "wide: %s", out);
    /* rank 7 starts last (7 units late) and has no bubble in between */
    CHECK(strstr(out, "rank 0   busy 96 of 117 (82%); idle 0 before") &&
              strstr(out, "rank 7   busy 96 of 117 (82%); idle 7 before its first compute, 0 "
                          "between computes, 14 after its last"),
          "summary: %s", out);
    char *line = out;
    for (char *nl; (nl = strchr(line, '\n')); line = nl + 1)
        CHECK(nl - line <= 200, "a line of %d characters", (int)(nl - line));
    const char *full[] = {"schedule", "--pp", "8", "--vpp", "2", "--micro-batches", "16", "--full"};
    CHECK(cli_output(8, full, out, sizeof out) == 0, "--full failed");
    CHECK(strstr(out, "F0.1") && strstr(out, "legend:") && !strstr(out, "summary by rank"),
          "--full: %.300s", out);
}

/* Message buffers the executor holds (pipeline.c's reuse rule): worked
 * lists, and over all P <= 8, V <= 4, M <= 64 between one and four over MPI
 * (receives posted ahead too), one and two in NCCL's stream order;
 * forward-only lists of up to 64 micro batches within the figure for
 * forward passes. */
static void test_message_buffers(void) {
    /* P=2 M=2 rank 0: F(0,0) takes a buffer, its send goes in the next batch;
     * F(0,1) takes a second (that send may be in flight); the batch
     * "SA(0,1) RG(0,0)" lets the first go; B(0,0) and B(0,1), the model's
     * first chunk, send nothing: 2. Rank 1 (the last stage): backwards
     * only, one gradient a batch: after "SG(0,0) RA(0,1)" B(0,1) may find
     * SG(0,0) still in flight: 2. */
    CHECK(lt_pipeline_messages(2, 1, 2, 0, LT_P2P_MPI) == 2, "P2 M2 rank 0: %d", lt_pipeline_messages(2, 1, 2, 0, LT_P2P_MPI));
    CHECK(lt_pipeline_messages(2, 1, 2, 1, LT_P2P_MPI) == 2, "P2 M2 rank 1: %d", lt_pipeline_messages(2, 1, 2, 1, LT_P2P_MPI));
    /* in NCCL's stream order a sent buffer is free for the next pass: only
     * the output not yet sent and the one being made */
    CHECK(lt_pipeline_messages(2, 1, 2, 0, LT_P2P_STREAM) == 1, "P2 M2 rank 0, NCCL: %d",
          lt_pipeline_messages(2, 1, 2, 0, LT_P2P_STREAM));
    CHECK(lt_pipeline_messages(1, 1, 4, 0, LT_P2P_MPI) == 0, "no pipelining");
    CHECK(lt_pipeline_messages(4, 2, 6, 0, LT_P2P_MPI) == -1, "invalid interleaving accepted");
    CHECK(lt_pipeline_messages(4, 1, 8, 4, LT_P2P_MPI) == -1, "rank 4 of 4 accepted");
    int bad = 0;
    LtAction *buf = malloc(sizeof *buf * 6 * 4 * 64);
    char err[256];
    for (int pp = 2; pp <= 8; pp++)
        for (int vpp = 1; vpp <= 4; vpp++) {
            for (int r = 0; r < pp; r++) {
                for (int stream = 0; stream < 2; stream++) {
                    const int fwd = lt_pipeline_messages(pp, vpp, 0, r,
                                                         stream ? LT_P2P_STREAM : LT_P2P_MPI);
                    for (int n = 1; n <= 64 && bad < 5; n++) {
                        int k = lt_schedule_forward_rank(pp, vpp, n, r, buf, 6 * 4 * 64, err,
                                                         sizeof err);
                        int need = k < 0 ? -1 : lt_pipeline_messages_in(buf, k, pp, vpp, r, stream);
                        if (need < 0 || need > fwd) {
                            CHECK(0, "P=%d V=%d rank %d stream %d: %d forward micro batches need "
                                  "%d buffers, planned %d", pp, vpp, r, stream, n, need, fwd);
                            bad++;
                        }
                    }
                }
            }
            for (int mbs = 1; mbs <= 64; mbs++) {
                if (lt_schedule_check(pp, vpp, mbs, NULL, 0)) continue;
                for (int r = 0; r < pp && bad < 5; r++)
                    for (int kind = LT_P2P_MPI; kind <= LT_P2P_STREAM; kind++) {
                        int k = lt_pipeline_messages(pp, vpp, mbs, r, (LtP2pKind)kind);
                        int most = kind == LT_P2P_STREAM ? 2 : 4;
                        if (k < 1 || k > most) {
                            CHECK(0, "P=%d V=%d M=%d rank %d kind %d: %d buffers", pp, vpp, mbs, r,
                                  kind, k);
                            bad++;
                        }
                    }
            }
        }
    free(buf);
    CHECK(bad == 0, "%d bad", bad);
}

int main(void) {
    RUN(test_message_buffers);
    RUN(test_check_errors);
    RUN(test_golden_1f1b);
    RUN(test_golden_interleaved);
    RUN(test_sweep);
    RUN(test_latency);
    RUN(test_stage_scale);
    RUN(test_deadlock_detected);
    RUN(test_rendezvous_and_order);
    RUN(test_post_ahead);
    RUN(test_forward_only);
    RUN(test_broken_lists);
    RUN(test_cli);
    RUN(test_cli_legend_and_summary);
    return test_summary();
}
