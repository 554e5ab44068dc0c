/* step_time.c - where a training step's time went (see step_time.h). */
#include "step_time.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

void lt_step_clock_start(LtRun *r) {
    if (!lt_devclock_start(r->be)) return;
    lt_comm_set_clock_kind(r->tp, LT_CLK_TP);
    lt_comm_set_clock_kind(r->dp, LT_CLK_DP);
    lt_comm_set_clock_kind(r->edp, LT_CLK_DP); /* the experts' data-parallel group */
    lt_comm_set_clock_kind(r->pp, LT_CLK_PP);
    lt_comm_set_clock_kind(r->emb, LT_CLK_PP);
    lt_log("time       the step breakdown is measured on the device (timers on its streams)\n");
}

/* Seconds so far of the TP, DP (with the expert-data-parallel group's) and
 * PP (with the embedding group's) communication: out[0..2] the training thread was blocked in it (exposed),
 * out[3..5] it was under way (busy: also what a worker ran behind compute),
 * out[6..8] the training thread was blocked in it on host buffers (what the
 * device timers do not see); out[9..11] the same three of the expert-parallel
 * and expert-tensor-parallel groups (0 without them). */
void lt_step_comm_mark(const LtRun *r, double out[LT_STEP_MARKS]) {
    out[0] = lt_comm_busy_seconds(r->tp);
    out[1] = lt_comm_busy_seconds(r->dp) + lt_comm_busy_seconds(r->edp);
    out[2] = lt_comm_busy_seconds(r->pp) + lt_comm_busy_seconds(r->emb);
    out[3] = lt_comm_work_seconds(r->tp);
    out[4] = lt_comm_work_seconds(r->dp) + lt_comm_work_seconds(r->edp);
    out[5] = lt_comm_work_seconds(r->pp) + lt_comm_work_seconds(r->emb);
    out[6] = lt_comm_host_busy_seconds(r->tp);
    out[7] = lt_comm_host_busy_seconds(r->dp) + lt_comm_host_busy_seconds(r->edp);
    out[8] = lt_comm_host_busy_seconds(r->pp) + lt_comm_host_busy_seconds(r->emb);
    out[9] = lt_comm_busy_seconds(r->ep) + lt_comm_busy_seconds(r->etp);
    out[10] = lt_comm_work_seconds(r->ep) + lt_comm_work_seconds(r->etp);
    out[11] = lt_comm_host_busy_seconds(r->ep) + lt_comm_host_busy_seconds(r->etp);
}

/* The step's times from the device timers (devclock.h; dev in seconds): the
 * passes, phases, bubble and device-buffer communication as the device ran
 * them, plus the host-buffer communication the host's clock timed (hb). */
static void device_times(LtStepTimes *st, const double dev[LT_CLK_KINDS], const double hb[3]) {
    st->forward = dev[LT_CLK_FORWARD] * 1e3;
    st->backward = dev[LT_CLK_BACKWARD] * 1e3;
    st->grads = dev[LT_CLK_GRADS] * 1e3;
    st->optimizer = dev[LT_CLK_OPTIMIZER] * 1e3;
    st->bubble = dev[LT_CLK_BUBBLE] * 1e3;
    st->comm_tp = (dev[LT_CLK_TP] + hb[0]) * 1e3;
    st->comm_dp = (dev[LT_CLK_DP] + hb[1]) * 1e3;
    st->comm_pp = (dev[LT_CLK_PP] + hb[2] - dev[LT_CLK_BUBBLE]) * 1e3;
    st->comm_tp_busy = (dev[LT_CLK_TP_BUSY] + hb[0]) * 1e3;
    st->comm_dp_busy = (dev[LT_CLK_DP_BUSY] + hb[1]) * 1e3;
    st->comm_pp_busy = (dev[LT_CLK_PP_BUSY] + hb[2]) * 1e3;
}

/* The parts of the passes in sec (index kind - LT_CLK_FIRST_PART), in ms. */
static void part_times(LtStepTimes *st, const double *sec) {
    st->attention = sec[LT_CLK_ATTN - LT_CLK_FIRST_PART] * 1e3;
    st->loss_head = sec[LT_CLK_HEAD - LT_CLK_FIRST_PART] * 1e3;
    st->moe = sec[LT_CLK_MOE - LT_CLK_FIRST_PART] * 1e3;
    st->moe_experts = sec[LT_CLK_EXPERTS - LT_CLK_FIRST_PART] * 1e3;
}

/* Where the step of dt seconds went (metrics.h), from the pipeline's pass
 * times, the phases the loop timed and the groups' time since busy0 - or,
 * where dev is not NULL, from the device timers. */
LtStepTimes lt_step_times(LtRun *r, const double busy0[LT_STEP_MARKS], double dt, double data_s,
                          double grads_s, double optim_s, const double *dev) {
    double fwd, bwd, bubble, busy[LT_STEP_MARKS];
    lt_pipeline_take_times(r->pipe, &fwd, &bwd, &bubble);
    lt_step_comm_mark(r, busy);
    LtStepTimes st = {.forward = fwd * 1e3, .backward = bwd * 1e3, .grads = grads_s * 1e3,
                      .optimizer = optim_s * 1e3, .data = data_s * 1e3, .bubble = bubble * 1e3,
                      .comm_tp = (busy[0] - busy0[0]) * 1e3, .comm_dp = (busy[1] - busy0[1]) * 1e3,
                      .comm_pp = (busy[2] - busy0[2] - bubble) * 1e3,
                      .comm_tp_busy = (busy[3] - busy0[3]) * 1e3,
                      .comm_dp_busy = (busy[4] - busy0[4]) * 1e3,
                      .comm_pp_busy = (busy[5] - busy0[5]) * 1e3,
                      /* the expert dispatch runs on the training thread (blocking, not
                       * timed on the device): exposed = busy */
                      .comm_ep = (busy[9] - busy0[9]) * 1e3,
                      .comm_ep_busy = (busy[10] - busy0[10]) * 1e3};
    /* the bubble is pipeline-group time, between the passes: out of comm_pp and other
     * (comm_pp_busy keeps it: the receives were under way) */
    double host_parts[LT_CLK_PARTS] = {0};
    lt_devclock_parts_take(host_parts); /* (taken every step: none where the device timed them) */
    part_times(&st, host_parts);
    if (dev) {
        const double hb[3] = {busy[6] - busy0[6], busy[7] - busy0[7], busy[8] - busy0[8]};
        device_times(&st, dev, hb);
        part_times(&st, dev + LT_CLK_FIRST_PART);
    }
    if (st.comm_pp < 0) st.comm_pp = 0;
    st.other = dt * 1e3 - st.forward - st.backward - st.grads - st.optimizer - st.data - st.bubble;
    if (st.other < 0) st.other = 0; /* clock granularity */
    return st;
}

void lt_sorted_insert(double *x, int n, double v) {
    int lo = 0, hi = n; /* the first element greater than v */
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (x[mid] <= v) lo = mid + 1;
        else hi = mid;
    }
    memmove(x + lo + 1, x + lo, sizeof(double) * (size_t)(n - lo));
    x[lo] = v;
}

/* A duration as "4.2s" (under 10 s), "42s", "1m23s" or "2h05m". */
static void duration_words(double s, char *buf, size_t len) {
    if (!(s >= 0)) s = 0;
    const long k = (long)(s + 0.5);
    if (s < 9.95) snprintf(buf, len, "%.1fs", s);
    else if (k < 60) snprintf(buf, len, "%lds", k);
    else if (k < 3600) snprintf(buf, len, "%ldm%02lds", k / 60, k % 60);
    else snprintf(buf, len, "%ldh%02ldm", k / 3600, k / 60 % 60);
}

void lt_step_progress(double elapsed_s, const double *sorted, int n, long remaining, char *buf,
                      size_t len) {
    char el[32], eta[32];
    duration_words(elapsed_s, el, sizeof el);
    if (n < 2) {
        snprintf(buf, len, "elapsed %s", el);
        return;
    }
    const double med = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    duration_words(med * (double)remaining, eta, sizeof eta);
    snprintf(buf, len, "elapsed %s eta %s", el, eta);
}
