/* schedule.c - see schedule.h. */
#include "schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

const char *lt_action_kind_name(LtActKind kind) {
    static const char *names[LT_ACT_COUNT] = {"FORWARD",  "BACKWARD",  "SEND_ACT",
                                              "RECV_ACT", "SEND_GRAD", "RECV_GRAD"};
    return (int)kind >= 0 && kind < LT_ACT_COUNT ? names[kind] : "?";
}

int lt_schedule_check(int pp, int vpp, int micro_batches, char *err, size_t errlen) {
    if (pp < 1 || pp > LT_SCHED_MAX_PP)
        return lt_errorf(err, errlen, "pipeline-parallel size %d must be in [1, %d]", pp,
                         LT_SCHED_MAX_PP);
    if (vpp < 1 || vpp > LT_SCHED_MAX_VPP)
        return lt_errorf(err, errlen, "virtual pipeline size %d must be in [1, %d]", vpp,
                         LT_SCHED_MAX_VPP);
    if (micro_batches < 1)
        return lt_errorf(err, errlen, "number of micro batches %d must be >= 1", micro_batches);
    if ((long long)pp * vpp * micro_batches > LT_SCHED_MAX_WORK)
        return lt_errorf(err, errlen,
                         "pipeline %d x virtual %d x micro batches %d exceeds the limit %d", pp,
                         vpp, micro_batches, LT_SCHED_MAX_WORK);
    if (vpp > 1 && pp == 1)
        return lt_errorf(err, errlen,
                         "virtual pipeline size %d needs a pipeline-parallel size > 1", vpp);
    if (vpp > 1 && micro_batches % pp != 0)
        return lt_errorf(err, errlen,
                         "interleaved schedule: number of micro batches %d must be a multiple "
                         "of the pipeline-parallel size %d",
                         micro_batches, pp);
    return 0;
}

int lt_schedule_layout_check(const LtLayerSplit *split, int num_layers, int pp, int vpp,
                             int micro_batches, char *err, size_t errlen) {
    if (lt_layer_split_check(split, num_layers, pp, vpp, err, errlen)) return -1;
    if (pp == 1) return 0; /* no schedule: the steps run one after the other */
    char why[256];
    if (lt_schedule_check(pp, vpp, micro_batches, why, sizeof why))
        return lt_errorf(err, errlen,
                         "parallel.pipeline_model_parallel_size (%d) x "
                         "parallel.virtual_pipeline_model_parallel_size (%d) with %d micro "
                         "batches per step: %s",
                         pp, vpp, micro_batches, why);
    return 0;
}

size_t lt_schedule_capacity(int pp, int vpp, int micro_batches) {
    if (lt_schedule_check(pp, vpp, micro_batches, NULL, 0)) return 0;
    return (size_t)6 * (size_t)vpp * (size_t)micro_batches;
}

int lt_schedule_warmup(int pp, int vpp, int micro_batches, int rank) {
    if (lt_schedule_check(pp, vpp, micro_batches, NULL, 0) || rank < 0 || rank >= pp) return -1;
    int total = vpp * micro_batches;
    long long w = vpp == 1 ? pp - rank - 1 : 2LL * (pp - rank - 1) + (long long)(vpp - 1) * pp;
    return w < total ? (int)w : total;
}

/* Virtual step k -> (chunk, micro batch); backward mirrors the chunk. For
 * V == 1 this is (0, k). */
static void virtual_step(int pp, int vpp, int k, int backward, int *chunk, int *mb) {
    int group = pp * vpp;
    int c = (k % group) / pp;
    *chunk = backward ? vpp - 1 - c : c;
    *mb = pp * (k / group) + k % pp;
}

typedef struct {
    int pp, vpp, rank, n;
    LtAction *out;
} Emit;

static void push(Emit *e, LtActKind kind, int chunk, int mb, int peer) {
    e->out[e->n++] = (LtAction){.kind = kind, .chunk = chunk, .mb = mb, .peer = peer};
}

/* Stage of rank e->rank's virtual step k (forward or backward). */
static void step_at(const Emit *e, int k, int backward, int *chunk, int *mb, int *stage) {
    virtual_step(e->pp, e->vpp, k, backward, chunk, mb);
    *stage = *chunk * e->pp + e->rank;
}

/* The receive that virtual step k needs (none on the first stage for a
 * forward, on the last for a backward, or when k is past the end). */
static void emit_recv(Emit *e, int k, int backward, int total) {
    if (k < 0 || k >= total) return;
    int chunk, mb, stage, last = e->pp * e->vpp - 1;
    step_at(e, k, backward, &chunk, &mb, &stage);
    int next = (e->rank + 1) % e->pp, prev = (e->rank + e->pp - 1) % e->pp;
    if (!backward && stage > 0) push(e, LT_ACT_RECV_ACT, chunk, mb, prev);
    if (backward && stage < last) push(e, LT_ACT_RECV_GRAD, chunk, mb, next);
}

/* The compute of virtual step k alone. */
static void emit_run(Emit *e, int k, int backward) {
    int chunk, mb, stage;
    step_at(e, k, backward, &chunk, &mb, &stage);
    push(e, backward ? LT_ACT_BACKWARD : LT_ACT_FORWARD, chunk, mb, -1);
}

/* The send of what virtual step k produced (none from the last stage's
 * forward or the first stage's backward). */
static void emit_send(Emit *e, int k, int backward) {
    int chunk, mb, stage, last = e->pp * e->vpp - 1;
    step_at(e, k, backward, &chunk, &mb, &stage);
    int next = (e->rank + 1) % e->pp, prev = (e->rank + e->pp - 1) % e->pp;
    if (!backward && stage < last) push(e, LT_ACT_SEND_ACT, chunk, mb, next);
    if (backward && stage > 0) push(e, LT_ACT_SEND_GRAD, chunk, mb, prev);
}

/* Virtual step k with its receive right before it and its send right after. */
static void emit_compute(Emit *e, int k, int backward, int total) {
    emit_recv(e, k, backward, total);
    emit_run(e, k, backward);
    emit_send(e, k, backward);
}

/* 1F1B and no pipelining: every compute as emit_compute. Neighbours'
 * adjacent send + receive pairs ("send activation, receive gradient" against
 * "send gradient, receive activation") match, so the schedule also runs with
 * rendezvous sends. */
static void emit_1f1b(Emit *e, int total, int warm) {
    for (int k = 0; k < warm; k++) emit_compute(e, k, 0, total);
    for (int i = 0; i < total - warm; i++) {
        emit_compute(e, warm + i, 0, total);
        emit_compute(e, i, 1, total);
    }
    for (int k = total - warm; k < total; k++) emit_compute(e, k, 1, total);
}

/* Interleaved 1F1B in Megatron's batched form: the receive for the next
 * compute is posted together with the sends of the current one, and in the
 * steady state one batch after each forward + backward pair carries both
 * sends and both next receives. Every rank's batches then meet its
 * neighbours' batches in lockstep, which rendezvous sends (NCCL) need. */
static void emit_interleaved(Emit *e, int total, int warm) {
    emit_recv(e, 0, 0, total);
    for (int k = 0; k < warm; k++) {
        emit_run(e, k, 0);
        emit_send(e, k, 0);
        emit_recv(e, k + 1, 0, total);
        if (k == warm - 1) emit_recv(e, 0, 1, total); /* the first backward's gradient */
    }
    for (int i = 0; i < total - warm; i++) {
        emit_run(e, warm + i, 0);
        emit_run(e, i, 1);
        emit_send(e, warm + i, 0);
        emit_send(e, i, 1);
        emit_recv(e, warm + i + 1, 0, total);
        emit_recv(e, i + 1, 1, total);
    }
    for (int b = total - warm; b < total; b++) {
        emit_run(e, b, 1);
        emit_send(e, b, 1);
        emit_recv(e, b + 1, 1, total);
    }
}

int lt_schedule_rank(int pp, int vpp, int micro_batches, int rank, LtAction *out, size_t cap,
                     char *err, size_t errlen) {
    if (lt_schedule_check(pp, vpp, micro_batches, err, errlen)) return -1;
    if (rank < 0 || rank >= pp)
        return lt_errorf(err, errlen, "rank %d is outside the pipeline [0, %d)", rank, pp);
    size_t need = lt_schedule_capacity(pp, vpp, micro_batches);
    if (cap < need)
        return lt_errorf(err, errlen, "action buffer of %zu entries is too small (need %zu)",
                         cap, need);
    int total = vpp * micro_batches;
    int warm = lt_schedule_warmup(pp, vpp, micro_batches, rank);
    Emit e = {.pp = pp, .vpp = vpp, .rank = rank, .n = 0, .out = out};
    if (vpp == 1)
        emit_1f1b(&e, total, warm);
    else
        emit_interleaved(&e, total, warm);
    return e.n;
}

int lt_schedule_forward_rank(int pp, int vpp, int micro_batches, int rank, LtAction *out,
                             size_t cap, char *err, size_t errlen) {
    if (pp < 1 || pp > LT_SCHED_MAX_PP || vpp < 1 || vpp > LT_SCHED_MAX_VPP || micro_batches < 0 ||
        (long long)pp * vpp * micro_batches > LT_SCHED_MAX_WORK)
        return lt_errorf(err, errlen, "forward-only schedule: bad sizes P=%d V=%d M=%d", pp, vpp,
                         micro_batches);
    if (rank < 0 || rank >= pp)
        return lt_errorf(err, errlen, "rank %d is outside the pipeline [0, %d)", rank, pp);
    if (cap < (size_t)3 * (size_t)vpp * (size_t)micro_batches)
        return lt_errorf(err, errlen, "action buffer of %zu entries is too small (need %zu)",
                         cap, (size_t)3 * (size_t)vpp * (size_t)micro_batches);
    Emit e = {.pp = pp, .vpp = vpp, .rank = rank, .n = 0, .out = out};
    for (int mb = 0; mb < micro_batches; mb++)
        for (int c = 0; c < vpp; c++) {
            int stage = c * pp + rank, last = pp * vpp - 1;
            if (stage > 0) push(&e, LT_ACT_RECV_ACT, c, mb, (rank + pp - 1) % pp);
            push(&e, LT_ACT_FORWARD, c, mb, -1);
            if (stage < last) push(&e, LT_ACT_SEND_ACT, c, mb, (rank + 1) % pp);
        }
    return e.n;
}

/* ---- simulator ------------------------------------------------------------ */

typedef struct {
    unsigned char sent, received;
    double time;
} Msg;

typedef struct {
    int pp, vpp, mbs, stages;
    LtAction *const *acts;
    const int *n;
    LtSimCost cost;
    Msg *msg;                   /* [2][stages][mbs]: 0 activation, 1 gradient; by sender */
    unsigned char *fdone, *bdone; /* [stages][mbs] */
    int *pc, *inflight, *nev;
    double *clock;
    LtSimResult *res;
    char *err;
    size_t errlen;
} Sim;

static Msg *msg_at(Sim *s, int grad, int stage, int mb) {
    return &s->msg[((size_t)grad * s->stages + (size_t)stage) * s->mbs + (size_t)mb];
}

static int stage_rank(const Sim *s, int stage) { return stage % s->pp; }

static int act_error(Sim *s, int r, int i, const LtAction *a, const char *what) {
    return lt_errorf(s->err, s->errlen, "rank %d action %d %s(chunk %d, mb %d, peer %d): %s", r,
                     i, lt_action_kind_name(a->kind), a->chunk, a->mb, a->peer, what);
}

/* Execute rank r's next action. Returns 1 when done, 0 when blocked on a
 * receive whose message has not been sent, -1 on an invalid action. */
static int step(Sim *s, int r) {
    int i = s->pc[r];
    const LtAction *a = &s->acts[r][i];
    if ((int)a->kind < 0 || a->kind >= LT_ACT_COUNT) return act_error(s, r, i, a, "bad kind");
    if (a->chunk < 0 || a->chunk >= s->vpp) return act_error(s, r, i, a, "chunk out of range");
    if (a->mb < 0 || a->mb >= s->mbs) return act_error(s, r, i, a, "micro batch out of range");
    int st = a->chunk * s->pp + r, last = s->stages - 1;
    size_t at = (size_t)st * s->mbs + (size_t)a->mb;
    Msg *m;
    switch (a->kind) {
    case LT_ACT_FORWARD:
    case LT_ACT_BACKWARD: {
        int fwd = a->kind == LT_ACT_FORWARD;
        if (fwd && s->fdone[at]) return act_error(s, r, i, a, "forward runs twice");
        if (!fwd && s->bdone[at]) return act_error(s, r, i, a, "backward runs twice");
        if (fwd && st > 0 && !msg_at(s, 0, st - 1, a->mb)->received)
            return act_error(s, r, i, a, "forward before its activation was received");
        if (!fwd && !s->fdone[at]) return act_error(s, r, i, a, "backward before its forward");
        if (!fwd && st < last && !msg_at(s, 1, st + 1, a->mb)->received)
            return act_error(s, r, i, a, "backward before its gradient was received");
        double t0 = s->clock[r], dur = fwd ? s->cost.fwd : s->cost.bwd;
        if (s->cost.stage_scale) dur *= s->cost.stage_scale[st];
        s->clock[r] = t0 + dur;
        s->res->busy[r] += dur;
        LtSimEvent *ev = &s->res->events[s->res->event_off[r] + s->nev[r]++];
        *ev = (LtSimEvent){.kind = a->kind, .chunk = a->chunk, .mb = a->mb, .start = t0,
                           .end = t0 + dur};
        if (fwd) {
            s->fdone[at] = 1;
            if (++s->inflight[r] > s->res->peak_inflight[r])
                s->res->peak_inflight[r] = s->inflight[r];
        } else {
            s->bdone[at] = 1;
            s->inflight[r]--;
        }
        break;
    }
    case LT_ACT_SEND_ACT:
    case LT_ACT_SEND_GRAD: {
        int grad = a->kind == LT_ACT_SEND_GRAD;
        if (!grad && st == last) return act_error(s, r, i, a, "the last stage has no next stage");
        if (grad && st == 0) return act_error(s, r, i, a, "the first stage has no previous stage");
        if (a->peer != stage_rank(s, grad ? st - 1 : st + 1))
            return act_error(s, r, i, a, "wrong peer for the neighbouring stage");
        if (!(grad ? s->bdone[at] : s->fdone[at]))
            return act_error(s, r, i, a, "sent before the compute that produces it");
        m = msg_at(s, grad, st, a->mb);
        if (m->sent) return act_error(s, r, i, a, "sent twice");
        m->sent = 1;
        m->time = s->clock[r];
        break;
    }
    case LT_ACT_RECV_ACT:
    case LT_ACT_RECV_GRAD: {
        int grad = a->kind == LT_ACT_RECV_GRAD;
        if (!grad && st == 0) return act_error(s, r, i, a, "the first stage receives no activation");
        if (grad && st == last) return act_error(s, r, i, a, "the last stage receives no gradient");
        int from = grad ? st + 1 : st - 1;
        if (a->peer != stage_rank(s, from))
            return act_error(s, r, i, a, "wrong peer for the neighbouring stage");
        m = msg_at(s, grad, from, a->mb);
        if (m->received) return act_error(s, r, i, a, "received twice");
        if (!m->sent) return 0;
        m->received = 1;
        double arrive = m->time + s->cost.latency;
        if (arrive > s->clock[r]) s->clock[r] = arrive;
        break;
    }
    default: return act_error(s, r, i, a, "bad kind");
    }
    s->pc[r]++;
    return 1;
}

static int deadlock_error(Sim *s) {
    char buf[1024];
    size_t o = 0;
    int shown = 0;
    for (int r = 0; r < s->pp && shown < 8; r++) {
        if (s->pc[r] >= s->n[r]) continue;
        const LtAction *a = &s->acts[r][s->pc[r]];
        int w = snprintf(buf + o, sizeof buf - o, "%srank %d waits at action %d %s(chunk %d, mb %d) from rank %d",
                         shown ? "; " : "", r, s->pc[r], lt_action_kind_name(a->kind), a->chunk,
                         a->mb, a->peer);
        if (w < 0 || (size_t)w >= sizeof buf - o) break;
        o += (size_t)w;
        shown++;
    }
    return lt_errorf(s->err, s->errlen, "deadlock: no rank can progress: %s", buf);
}

static int finish_checks(Sim *s) {
    for (int st = 0; st < s->stages; st++) {
        for (int mb = 0; mb < s->mbs; mb++) {
            size_t at = (size_t)st * s->mbs + (size_t)mb;
            int r = stage_rank(s, st), c = st / s->pp;
            if (!s->fdone[at] || !s->bdone[at])
                return lt_errorf(s->err, s->errlen,
                                 "rank %d never runs the %s of chunk %d, micro batch %d", r,
                                 s->fdone[at] ? "backward" : "forward", c, mb);
            for (int grad = 0; grad < 2; grad++) {
                Msg *m = msg_at(s, grad, st, mb);
                if (m->sent && !m->received)
                    return lt_errorf(s->err, s->errlen,
                                     "rank %d's SEND_%s(chunk %d, mb %d) is never received", r,
                                     grad ? "GRAD" : "ACT", c, mb);
                s->res->messages += m->sent;
            }
        }
    }
    return 0;
}

void lt_sim_free(LtSimResult *res) {
    if (!res) return;
    free(res->peak_inflight);
    free(res->busy);
    free(res->events);
    free(res->event_off);
    memset(res, 0, sizeof *res);
}

int lt_schedule_simulate(int pp, int vpp, int micro_batches, LtAction *const *acts, const int *n,
                         LtSimCost cost, LtSimResult *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    if (lt_schedule_check(pp, vpp, micro_batches, err, errlen)) return -1;
    if (!(cost.fwd >= 0) || !(cost.bwd >= 0) || !(cost.latency >= 0))
        return lt_errorf(err, errlen, "costs must be >= 0 (forward %g, backward %g, latency %g)",
                         cost.fwd, cost.bwd, cost.latency);
    for (int v = 0; cost.stage_scale && v < pp * vpp; v++)
        if (!(cost.stage_scale[v] >= 0) || !isfinite(cost.stage_scale[v]))
            return lt_errorf(err, errlen, "stage %d's cost factor %g is not finite and >= 0", v,
                             cost.stage_scale[v]);
    int total = vpp * micro_batches;
    Sim s = {.pp = pp, .vpp = vpp, .mbs = micro_batches, .stages = pp * vpp, .acts = acts,
             .n = n, .cost = cost, .res = res, .err = err, .errlen = errlen};
    size_t cells = (size_t)s.stages * (size_t)micro_batches;
    s.msg = lt_calloc(2 * cells * sizeof *s.msg);
    s.fdone = lt_calloc(cells);
    s.bdone = lt_calloc(cells);
    s.pc = lt_calloc((size_t)pp * sizeof *s.pc);
    s.inflight = lt_calloc((size_t)pp * sizeof *s.inflight);
    s.nev = lt_calloc((size_t)pp * sizeof *s.nev);
    s.clock = lt_calloc((size_t)pp * sizeof *s.clock);
    res->pp = pp;
    res->vpp = vpp;
    res->micro_batches = micro_batches;
    res->peak_inflight = lt_calloc((size_t)pp * sizeof *res->peak_inflight);
    res->busy = lt_calloc((size_t)pp * sizeof *res->busy);
    res->event_off = lt_calloc((size_t)(pp + 1) * sizeof *res->event_off);
    for (int r = 0; r <= pp; r++) res->event_off[r] = 2 * total * r;
    res->events = lt_calloc((size_t)pp * 2 * (size_t)total * sizeof *res->events);

    int rc = 0;
    for (int r = 0; r < pp && !rc; r++) {
        if (n[r] < 0) rc = lt_errorf(err, errlen, "rank %d: negative action count", r);
        /* More computes than 2 * total would run something twice; step() says
         * which, so only guard the event buffer here. */
    }
    for (int progress = 1; progress && !rc;) {
        progress = 0;
        for (int r = 0; r < pp && !rc; r++) {
            while (s.pc[r] < n[r]) {
                int k = step(&s, r);
                if (k < 0) rc = -1;
                if (k <= 0) break;
                progress = 1;
            }
        }
    }
    if (!rc) {
        for (int r = 0; r < pp; r++)
            if (s.pc[r] < n[r]) {
                rc = deadlock_error(&s);
                break;
            }
    }
    if (!rc) rc = finish_checks(&s);
    if (!rc) {
        for (int r = 0; r < pp; r++) {
            if (s.clock[r] > res->makespan) res->makespan = s.clock[r];
            res->busy_total += res->busy[r];
        }
        res->bubble = res->makespan > 0 ? 1.0 - res->busy_total / (pp * res->makespan) : 0.0;
    }
    free(s.msg);
    free(s.fdone);
    free(s.bdone);
    free(s.pc);
    free(s.inflight);
    free(s.nev);
    free(s.clock);
    if (rc) lt_sim_free(res);
    return rc;
}

int lt_schedule_simulate_all(int pp, int vpp, int micro_batches, LtSimCost cost,
                             LtSimResult *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    if (lt_schedule_check(pp, vpp, micro_batches, err, errlen)) return -1;
    size_t cap = lt_schedule_capacity(pp, vpp, micro_batches);
    LtAction *buf = lt_malloc((size_t)pp * cap * sizeof *buf);
    LtAction **acts = lt_malloc((size_t)pp * sizeof *acts);
    int *n = lt_malloc((size_t)pp * sizeof *n);
    int rc = 0;
    for (int r = 0; r < pp && !rc; r++) {
        acts[r] = buf + (size_t)r * cap;
        n[r] = lt_schedule_rank(pp, vpp, micro_batches, r, acts[r], cap, err, errlen);
        if (n[r] < 0) rc = -1;
    }
    if (!rc) rc = lt_schedule_simulate(pp, vpp, micro_batches, acts, n, cost, res, err, errlen);
    if (!rc && lt_schedule_check_ordered(pp, vpp, acts, n, 1, err, errlen)) {
        lt_sim_free(res);
        rc = -1;
    }
    free(buf);
    free(acts);
    free(n);
    return rc;
}
