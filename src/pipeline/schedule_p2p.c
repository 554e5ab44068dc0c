/* schedule_p2p.c - the schedule under ordered, rendezvous point-to-point
 * semantics (NCCL's): see lt_schedule_check_ordered in schedule.h. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "schedule.h"

int lt_action_is_comm(LtActKind k) { return k >= LT_ACT_SEND_ACT && k <= LT_ACT_RECV_GRAD; }
int lt_action_is_send(LtActKind k) { return k == LT_ACT_SEND_ACT || k == LT_ACT_SEND_GRAD; }
static int is_grad(LtActKind k) { return k == LT_ACT_SEND_GRAD || k == LT_ACT_RECV_GRAD; }

int lt_schedule_comm_run(const LtAction *acts, int n, int i) {
    if (i >= n || !lt_action_is_comm(acts[i].kind)) return i < n ? i + 1 : i;
    while (i < n && lt_action_is_comm(acts[i].kind)) i++;
    return i;
}

int lt_schedule_post_ahead(LtAction *acts, int n) {
    LtAction *out = lt_malloc(sizeof(LtAction) * (size_t)(n > 0 ? n : 1));
    unsigned char *moved = lt_calloc((size_t)(n > 0 ? n : 1));
    int k = 0, moves = 0;
    for (int i = 0; i < n;) {
        if (!lt_action_is_comm(acts[i].kind)) {
            out[k++] = acts[i++];
            continue;
        }
        const int end = lt_schedule_comm_run(acts, n, i);
        for (; i < end; i++)
            if (!moved[i]) out[k++] = acts[i];
        /* the next run's receives join this one (a gradient's only once its forward
         * has run: the slot it lands in exists from then on) */
        int nx = end;
        while (nx < n && !lt_action_is_comm(acts[nx].kind)) nx++;
        const int nend = lt_schedule_comm_run(acts, n, nx);
        for (int j = nx; j < nend && nx < n; j++) {
            const LtAction *a = &acts[j];
            if (lt_action_is_send(a->kind)) continue;
            int ok = a->kind == LT_ACT_RECV_ACT;
            for (int f = 0; f < k && !ok; f++)
                ok = out[f].kind == LT_ACT_FORWARD && out[f].chunk == a->chunk &&
                     out[f].mb == a->mb;
            if (!ok) continue;
            out[k++] = *a;
            moved[j] = 1;
            moves++;
        }
    }
    memcpy(acts, out, sizeof(LtAction) * (size_t)n);
    free(out);
    free(moved);
    return moves;
}

/* Stage that sent the message a send or receive of rank r moves. */
static int sender_stage(int pp, int r, const LtAction *a) {
    int st = a->chunk * pp + r;
    if (lt_action_is_send(a->kind)) return st;
    return a->kind == LT_ACT_RECV_ACT ? st - 1 : st + 1;
}

typedef struct {
    int pp, channels;
    LtAction *const *acts;
    const int *n;
    int *partner; /* [rank][action] flattened by off: the matching action on the peer */
    int *off;     /* [pp + 1] */
    char *err;
    size_t errlen;
} Ordered;

/* Channel of a message: with two channels activations and gradients are
 * ordered separately (as on two communicators), with one they share. */
static int channel(const Ordered *o, LtActKind kind) { return o->channels == 2 && is_grad(kind); }

static int describe(char *buf, size_t len, int r, int i, const LtAction *a) {
    return snprintf(buf, len, "rank %d action %d %s(chunk %d, mb %d, peer %d)", r, i,
                    lt_action_kind_name(a->kind), a->chunk, a->mb, a->peer);
}

/* Pair the k-th send of each (channel, sender, receiver) with the k-th
 * receive there, and check that both name the same message. Sends and
 * receives are bucketed by that key in list order (counting sort), so the
 * cost is linear in the actions plus channels * P^2. */
static int pair_in_order(Ordered *o) {
    const int pp = o->pp;
    const size_t keys = (size_t)o->channels * pp * pp, total = (size_t)o->off[pp];
    size_t *start[2], *fill[2];
    int *at[2];
    for (int side = 0; side < 2; side++) { /* 0: sends, 1: receives */
        start[side] = lt_calloc((keys + 1) * sizeof *start[side]);
        fill[side] = lt_calloc((keys ? keys : 1) * sizeof *fill[side]);
        at[side] = lt_malloc((total ? total : 1) * sizeof *at[side]);
    }
    for (int pass = 0; pass < 2; pass++) { /* count, then place */
        for (int r = 0; r < pp; r++)
            for (int i = 0; i < o->n[r]; i++) {
                const LtAction *a = &o->acts[r][i];
                if (!lt_action_is_comm(a->kind)) continue;
                int side = !lt_action_is_send(a->kind);
                int src = side ? a->peer : r, dst = side ? r : a->peer;
                size_t key = ((size_t)channel(o, a->kind) * pp + src) * pp + dst;
                if (pass == 0) start[side][key + 1]++;
                else at[side][start[side][key] + fill[side][key]++] = o->off[r] + i;
            }
        if (pass == 0)
            for (int side = 0; side < 2; side++)
                for (size_t k = 0; k < keys; k++) start[side][k + 1] += start[side][k];
    }
    int rc = 0;
    for (size_t key = 0; key < keys && !rc; key++) {
        size_t ns = start[0][key + 1] - start[0][key], nr = start[1][key + 1] - start[1][key];
        int src = (int)(key / pp % pp), dst = (int)(key % pp);
        for (size_t k = 0; k < (ns > nr ? ns : nr) && !rc; k++) {
            char a[160], b[160];
            if (k >= ns || k >= nr) {
                int side = k >= ns, r = side ? dst : src;
                int i = at[side][start[side][key] + k] - o->off[r];
                describe(a, sizeof a, r, i, &o->acts[r][i]);
                rc = lt_errorf(o->err, o->errlen, "%s has no partner in order", a);
                break;
            }
            int is = at[0][start[0][key] + k] - o->off[src];
            int ir = at[1][start[1][key] + k] - o->off[dst];
            const LtAction *sa = &o->acts[src][is], *ra = &o->acts[dst][ir];
            if (is_grad(sa->kind) != is_grad(ra->kind) || sa->mb != ra->mb ||
                sender_stage(pp, src, sa) != sender_stage(pp, dst, ra)) {
                describe(a, sizeof a, src, is, sa);
                describe(b, sizeof b, dst, ir, ra);
                rc = lt_errorf(o->err, o->errlen,
                               "out of order: %s meets %s (messages between two ranks match in "
                               "issue order)",
                               a, b);
                break;
            }
            o->partner[o->off[src] + is] = o->off[dst] + ir;
            o->partner[o->off[dst] + ir] = o->off[src] + is;
        }
    }
    for (int side = 0; side < 2; side++) free(start[side]), free(fill[side]), free(at[side]);
    return rc;
}

/* Rendezvous execution: each rank issues a run of consecutive communication
 * actions as one group, which completes when every operation in it has met
 * its partner in the partner rank's current group. */
static int rendezvous(Ordered *o) {
    const int pp = o->pp;
    int *pc = lt_calloc((size_t)pp * sizeof *pc);
    int *end = lt_calloc((size_t)pp * sizeof *end);
    unsigned char *met = lt_calloc((size_t)o->off[pp]);
    int rc = 0;
    for (int r = 0; r < pp; r++) end[r] = lt_schedule_comm_run(o->acts[r], o->n[r], 0);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < pp; r++) {
            while (pc[r] < o->n[r]) {
                int done = 1;
                for (int i = pc[r]; i < end[r]; i++) {
                    const LtAction *a = &o->acts[r][i];
                    if (!lt_action_is_comm(a->kind) || met[o->off[r] + i]) continue;
                    int j = o->partner[o->off[r] + i] - o->off[a->peer];
                    if (pc[a->peer] <= j && j < end[a->peer])
                        met[o->off[r] + i] = met[o->off[a->peer] + j] = 1;
                    else
                        done = 0;
                }
                if (!done) break;
                pc[r] = end[r];
                end[r] = lt_schedule_comm_run(o->acts[r], o->n[r], pc[r]);
                progress = 1;
            }
        }
    }
    char buf[768];
    size_t at = 0;
    for (int r = 0; r < pp && at < sizeof buf - 200; r++) {
        if (pc[r] >= o->n[r]) continue;
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s", at ? "; " : "");
        at += (size_t)describe(buf + at, sizeof buf - at, r, pc[r], &o->acts[r][pc[r]]);
    }
    if (at) rc = lt_errorf(o->err, o->errlen, "deadlock with rendezvous sends: %s", buf);
    free(pc);
    free(end);
    free(met);
    return rc;
}

int lt_schedule_check_ordered(int pp, int vpp, LtAction *const *acts, const int *n,
                              int channels, char *err, size_t errlen) {
    if (pp < 1 || pp > LT_SCHED_MAX_PP || vpp < 1 || vpp > LT_SCHED_MAX_VPP)
        return lt_errorf(err, errlen, "bad pipeline sizes P=%d V=%d", pp, vpp);
    if (channels != 1 && channels != 2)
        return lt_errorf(err, errlen, "channels must be 1 or 2, not %d", channels);
    Ordered o = {.pp = pp, .channels = channels, .acts = acts, .n = n, .err = err,
                 .errlen = errlen};
    o.off = lt_malloc((size_t)(pp + 1) * sizeof *o.off);
    o.off[0] = 0;
    for (int r = 0; r < pp; r++) {
        for (int i = 0; i < n[r]; i++)
            if (lt_action_is_comm(acts[r][i].kind) && (acts[r][i].peer < 0 || acts[r][i].peer >= pp)) {
                char a[160];
                describe(a, sizeof a, r, i, &acts[r][i]);
                free(o.off);
                return lt_errorf(err, errlen, "%s: peer outside the pipeline", a);
            }
        if (n[r] < 0) {
            free(o.off);
            return lt_errorf(err, errlen, "rank %d: negative action count", r);
        }
        o.off[r + 1] = o.off[r] + n[r];
    }
    o.partner = lt_malloc((size_t)o.off[pp] * sizeof *o.partner);
    int rc = pair_in_order(&o);
    if (!rc) rc = rendezvous(&o);
    free(o.partner);
    free(o.off);
    return rc;
}
