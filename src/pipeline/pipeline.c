/* pipeline.c - the pipeline executor (see pipeline.h). */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "devclock.h"
#include "schedule.h"
#include "trace.h"

typedef struct {
    void *buf;         /* one boundary tensor */
    LtCommRequest req; /* its send */
    int busy;          /* written or being sent */
    long batch;        /* the communication batch its send started in (msg_take) */
} Msg;

struct LtPipeline {
    LtModel *m;
    const LtComm *pp; /* NULL without pipelining */
    int P, V, M, rank;
    LtAction *acts;   /* this rank's training schedule */
    int nacts;
    LtAction *fwd;    /* forward-only list of the last lt_pipeline_forward */
    const float *mb_scale, *mb_weight; /* lt_pipeline_set_micro_batch_scales (NULL: off) */
    size_t fwd_cap;
    LtCommRequest *recvs; /* receives of one batch */
    int recv_cap;
    int *slot_of;     /* [V * M]: slot of (chunk, micro batch), -1 when none */
    int *free_slots;  /* stack of free slot indices */
    int nfree;
    Msg *msgs;
    int nmsgs, cap;
    int planned;      /* message buffers made at creation (lt_pipeline_messages) */
    long batches;     /* communication batches started (the latest: batches - 1) */
    LtCommType type;  /* of boundary tensors */
    int post_ahead;   /* parallel.overlap_p2p_comm: receives posted a run ahead, waited
                       * for by the pass that reads them */
    LtCommRequest *pend_act, *pend_grad; /* [slot]: its input / output gradient in flight */
    double fwd_s, bwd_s; /* host seconds in forward / backward passes (lt_pipeline_take_times) */
    double bubble_s;     /* host seconds blocked in training's receive waits (the same) */
};

/* The most activation slots list a[0..n) of pipeline rank `rank` holds at
 * once: a slot is taken by a chunk input's receive (or, on the first stage,
 * by the forward) and given back after the backward, as the executor does. */
static int peak_slots(const LtAction *a, int n, int rank) {
    int live = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        int first = a[i].chunk == 0 && rank == 0;
        if ((a[i].kind == LT_ACT_RECV_ACT || (a[i].kind == LT_ACT_FORWARD && first)) &&
            ++live > peak)
            peak = live;
        if (a[i].kind == LT_ACT_BACKWARD) live--;
    }
    return peak;
}

int lt_pipeline_slots(int pp, int vpp, int micro_batches, int rank, int post_ahead) {
    if (pp == 1 && vpp == 1 && micro_batches >= 1 && rank == 0)
        return 1; /* F0 B0 F1 B1 ...: no list needed (M may be huge) */
    char err[256];
    if (lt_schedule_check(pp, vpp, micro_batches, err, sizeof err) || rank < 0 || rank >= pp)
        return -1;
    size_t cap = lt_schedule_capacity(pp, vpp, micro_batches);
    LtAction *a = lt_malloc(sizeof(LtAction) * cap);
    int n = lt_schedule_rank(pp, vpp, micro_batches, rank, a, cap, err, sizeof err);
    if (n >= 0 && post_ahead) lt_schedule_post_ahead(a, n);
    const int peak = n < 0 ? -1 : peak_slots(a, n, rank);
    free(a);
    return peak;
}

/* A forward (but the model's last chunk's) or a backward (but its first
 * chunk's) takes a buffer for what it produces, sent by the next batch. Over
 * MPI a send is finished, at the latest, when a pass needs a buffer after the
 * batch following its own has started (msg_take); in stream order (NCCL) its
 * buffer is free for the next pass, whose work the stream runs after it. */
int lt_pipeline_messages_in(const LtAction *a, int n, int P, int V, int rank, int stream) {
    int live = 0, peak = 0, sent_last = 0; /* sent_last: sends of the latest batch */
    for (int i = 0; i < n;) {
        const LtAction *x = &a[i];
        if (lt_action_is_comm(x->kind)) {
            const int end = lt_schedule_comm_run(a, n, i);
            live -= sent_last; /* the batch before's sends: free from here on */
            sent_last = 0;
            for (; i < end; i++)
                sent_last += lt_action_is_send(a[i].kind);
            if (stream) live -= sent_last, sent_last = 0;
            continue;
        }
        const int makes = (x->kind == LT_ACT_FORWARD && !(rank == P - 1 && x->chunk == V - 1)) ||
                          (x->kind == LT_ACT_BACKWARD && !(rank == 0 && x->chunk == 0));
        if (makes && ++live > peak) peak = live;
        i++;
    }
    return peak;
}

/* A forward-only list's batches hold one send each at most: its peak is
 * reached within this many micro batches and holds for any number
 * (test_schedule checks up to 64). */
enum { FORWARD_PEAK_MB = 4 };

int lt_pipeline_messages(int pp, int vpp, int micro_batches, int rank, LtP2pKind kind) {
    if (pp == 1) return 0; /* nothing to send */
    char err[256];
    if ((micro_batches > 0 && lt_schedule_check(pp, vpp, micro_batches, err, sizeof err)) ||
        micro_batches < 0 || rank < 0 || rank >= pp)
        return -1;
    const int nf = FORWARD_PEAK_MB, stream = kind == LT_P2P_STREAM;
    size_t cap = (size_t)3 * (size_t)vpp * (size_t)nf; /* a forward-only list (lt_pipeline_forward) */
    if (micro_batches > 0 && lt_schedule_capacity(pp, vpp, micro_batches) > cap)
        cap = lt_schedule_capacity(pp, vpp, micro_batches);
    LtAction *a = lt_malloc(sizeof(LtAction) * cap);
    int peak = 0, n;
    if (micro_batches > 0) {
        n = lt_schedule_rank(pp, vpp, micro_batches, rank, a, cap, err, sizeof err);
        if (n >= 0 && kind == LT_P2P_MPI_AHEAD) lt_schedule_post_ahead(a, n);
        peak = n < 0 ? -1 : lt_pipeline_messages_in(a, n, pp, vpp, rank, stream);
    }
    n = lt_schedule_forward_rank(pp, vpp, nf, rank, a, cap, err, sizeof err);
    const int fwd = n < 0 ? -1 : lt_pipeline_messages_in(a, n, pp, vpp, rank, stream);
    free(a);
    if (peak < 0 || fwd < 0) return -1;
    return peak > fwd ? peak : fwd;
}

/* How this pipeline's messages go (MPI, or NCCL's stream order). */
static LtP2pKind p2p_kind(const LtPipeline *p, int ahead) {
    if (lt_comm_lib(p->pp) != LT_COMM_LIB_MPI) return LT_P2P_STREAM;
    return ahead ? LT_P2P_MPI_AHEAD : LT_P2P_MPI;
}

static void msgs_reserve(LtPipeline *p, int n);

/* This rank's training schedule for p->M micro batches (receives posted
 * ahead with p->post_ahead on MPI); lt_fatal when it is invalid or needs
 * more activation slots than the model has. */
static void build_schedule(LtPipeline *p) {
    char err[256];
    const size_t cap = lt_schedule_capacity(p->P, p->V, p->M);
    free(p->acts);
    free(p->slot_of);
    p->acts = lt_malloc(sizeof(LtAction) * (cap ? cap : 1));
    p->nacts = lt_schedule_rank(p->P, p->V, p->M, p->rank, p->acts, cap, err, sizeof err);
    if (p->nacts < 0) lt_fatal("pipeline schedule: %s", err);
    if (p->post_ahead && lt_comm_lib(p->pp) == LT_COMM_LIB_MPI)
        lt_schedule_post_ahead(p->acts, p->nacts);
    const int need = peak_slots(p->acts, p->nacts, p->rank);
    if (need > p->m->nslots)
        lt_fatal("pipeline: the model has %d activation slots, the schedule of %d micro batches "
                 "needs %d", p->m->nslots, p->M, need);
    p->slot_of = lt_malloc(sizeof(int) * (size_t)p->V * (size_t)p->M);
}

LtPipeline *lt_pipeline_create(LtModel *m, const LtComm *pp, int micro_batches) {
    LtPipeline *p = lt_calloc(sizeof *p);
    p->m = m;
    p->P = m->pp;
    p->V = m->vpp;
    p->M = micro_batches;
    p->rank = m->pp_rank;
    p->pp = pp && lt_comm_size(pp) > 1 ? pp : NULL;
    if ((p->pp ? lt_comm_size(p->pp) : 1) != p->P || (p->pp && lt_comm_rank(p->pp) != p->rank))
        lt_fatal("pipeline: group of %d ranks (rank %d) does not match the model's place "
                 "(stage %d of %d)",
                 p->pp ? lt_comm_size(p->pp) : 1, p->pp ? lt_comm_rank(p->pp) : 0, p->rank, p->P);
    p->free_slots = lt_malloc(sizeof(int) * (size_t)m->nslots);
    if (m->nslots < p->V)
        lt_fatal("pipeline: the model has %d activation slots for %d chunks", m->nslots, p->V);
    if (p->M > 0 && p->P > 1) build_schedule(p); /* training (pp = 1: a plain loop) */
    p->type = lt_comm_act_type(m->be);
    if (p->P > 1) { /* every message buffer the schedules need, made now */
        const int k = lt_pipeline_messages(p->P, p->V, p->M, p->rank, p2p_kind(p, 0));
        if (k < 0) lt_fatal("pipeline: no valid schedule for pp %d, vpp %d, %d micro batches", p->P,
                            p->V, p->M);
        msgs_reserve(p, k);
    }
    return p;
}

void lt_pipeline_destroy(LtPipeline *p) {
    if (!p) return;
    for (int i = 0; i < p->nmsgs; i++) {
        lt_comm_finish(&p->msgs[i].req);
        p->m->be->ops->free(p->m->be, p->msgs[i].buf);
    }
    free(p->msgs);
    free(p->acts);
    free(p->fwd);
    free(p->recvs);
    free(p->slot_of);
    free(p->free_slots);
    free(p->pend_act);
    free(p->pend_grad);
    free(p);
}

void lt_pipeline_set_p2p_overlap(LtPipeline *p, int on) {
    if (!on || !p->acts || p->post_ahead) return;
    if (lt_comm_lib(p->pp) == LT_COMM_LIB_MPI) lt_schedule_post_ahead(p->acts, p->nacts);
    const int need = peak_slots(p->acts, p->nacts, p->rank);
    if (need > p->m->nslots)
        lt_fatal("pipeline: the model has %d activation slots, the schedule with receives "
                 "posted ahead needs %d",
                 p->m->nslots, need);
    const int k = lt_pipeline_messages(p->P, p->V, p->M, p->rank, p2p_kind(p, 1));
    if (k < 0) lt_fatal("pipeline: no valid schedule with receives posted ahead");
    msgs_reserve(p, k);
    p->pend_act = lt_calloc(sizeof(LtCommRequest) * (size_t)p->m->nslots);
    p->pend_grad = lt_calloc(sizeof(LtCommRequest) * (size_t)p->m->nslots);
    p->post_ahead = 1;
}

void lt_pipeline_set_micro_batches(LtPipeline *p, int micro_batches) {
    if (micro_batches == p->M) return;
    if (p->M == 0 || micro_batches < 1)
        lt_fatal("pipeline: %d micro batches for a pipeline made for %d", micro_batches, p->M);
    p->M = micro_batches;
    if (p->P == 1) return;
    build_schedule(p);
    const int k = lt_pipeline_messages(p->P, p->V, p->M, p->rank, p2p_kind(p, p->post_ahead));
    if (k < 0) lt_fatal("pipeline: no valid schedule for pp %d, vpp %d, %d micro batches", p->P,
                        p->V, p->M);
    msgs_reserve(p, k);
}

/* With receives posted ahead: the pass about to read slot s waits for what
 * arrives there (its input before a forward, its output gradient before a
 * backward). */
static void slot_wait(LtPipeline *p, int s, int grad) {
    if (!p->post_ahead) return;
    /* training only (post_ahead): the time blocked here is bubble, as in recv_wait */
    LT_TRACE_BEGIN("pipeline wait", "\"receives\": %d, \"bytes\": %zu", 1,
                   lt_act_bytes(p->m->be, p->m->boundary));
    const double busy0 = lt_comm_busy_seconds(p->pp);
    const int clk = lt_devclock_begin(NULL);
    lt_comm_finish(grad ? &p->pend_grad[s] : &p->pend_act[s]);
    lt_devclock_end(clk, LT_CLK(LT_CLK_BUBBLE), NULL);
    p->bubble_s += lt_comm_busy_seconds(p->pp) - busy0;
    LT_TRACE_END();
}

int lt_pipeline_message_buffers(const LtPipeline *p) { return p->nmsgs; }
int lt_pipeline_message_buffers_planned(const LtPipeline *p) { return p->planned; }
size_t lt_pipeline_message_bytes(const LtPipeline *p) {
    return (size_t)p->nmsgs * lt_act_bytes(p->m->be, p->m->boundary);
}

/* One more message buffer (free). */
static int msg_new(LtPipeline *p) {
    if (p->nmsgs == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 4;
        Msg *n = lt_calloc(sizeof(Msg) * (size_t)p->cap);
        if (p->nmsgs) memcpy(n, p->msgs, sizeof(Msg) * (size_t)p->nmsgs);
        free(p->msgs);
        p->msgs = n;
    }
    Msg *g = &p->msgs[p->nmsgs];
    memset(g, 0, sizeof *g);
    g->buf = p->m->be->ops->alloc(p->m->be, lt_act_bytes(p->m->be, p->m->boundary));
    return p->nmsgs++;
}

/* At least n message buffers, made before the first step so that the run's
 * memory summary counts them (category comm). */
static void msgs_reserve(LtPipeline *p, int n) {
    while (p->nmsgs < n) msg_new(p);
    if (n > p->planned) p->planned = n;
}

/* A message buffer that is not in use: one never sent or whose send has
 * completed; failing that, the sends started before the latest batch are
 * finished (their receivers posted them in that batch's partners or earlier,
 * so this wait comes after the point where NCCL's semantics would have
 * waited, and cannot deadlock) and one of theirs is taken. With that rule the
 * pool made at creation suffices (lt_pipeline_messages); one more is made
 * only if it did not, which the suite's LT_PLAN_CHECK runs refuse. */
static int msg_take(LtPipeline *p) {
    for (int i = 0; i < p->nmsgs; i++) {
        Msg *g = &p->msgs[i];
        if (!g->busy || (g->req.active && lt_comm_test(&g->req))) {
            g->busy = 1;
            return i;
        }
    }
    int freed = -1;
    LT_TRACE_BEGIN("pipeline send wait", NULL);
    for (int i = 0; i < p->nmsgs; i++) {
        Msg *g = &p->msgs[i];
        if (g->busy && g->req.active && g->batch < p->batches - 1) {
            lt_comm_finish(&g->req);
            g->busy = 0;
            if (freed < 0) freed = i;
        }
    }
    LT_TRACE_END();
    if (freed >= 0) {
        p->msgs[freed].busy = 1;
        return freed;
    }
    const int i = msg_new(p);
    p->msgs[i].busy = 1;
    return i;
}

/* Wait for every send of the step; all buffers become free. */
static void msgs_drain(LtPipeline *p) {
    for (int i = 0; i < p->nmsgs; i++) {
        lt_comm_finish(&p->msgs[i].req);
        p->msgs[i].busy = 0;
    }
}

/* Tag of a message to local chunk `chunk` of its receiver, micro batch mb. */
static int msg_tag(const LtPipeline *p, int grad, int chunk, int mb) {
    return grad + 2 * (int)(((long)mb * p->V + chunk) % 16384);
}

static void send_start(LtPipeline *p, int msg, int grad, int chunk, int mb, int peer) {
    LT_CHECK(msg >= 0 && p->pp);
    /* the receiver's chunk: the stage after (activation) or before (gradient)
     * wraps around from the last rank to chunk + 1 of the first, and back */
    int rc = chunk;
    if (!grad && p->rank == p->P - 1) rc = chunk + 1;
    if (grad && p->rank == 0) rc = chunk - 1;
    Msg *g = &p->msgs[msg];
    g->batch = p->batches - 1;
    g->req = lt_comm_send_start(p->pp, g->buf, p->m->boundary, p->type, peer,
                                msg_tag(p, grad, rc, mb));
}

static LtCommRequest recv_start(LtPipeline *p, void *buf, int grad, int chunk, int mb,
                                int peer) {
    LT_CHECK(p->pp != NULL);
    return lt_comm_recv_start(p->pp, buf, p->m->boundary, p->type, peer,
                              msg_tag(p, grad, chunk, mb));
}

static int slot_take(LtPipeline *p, int chunk, int mb) {
    int *so = &p->slot_of[chunk * p->M + mb];
    if (*so < 0) {
        if (p->nfree == 0) lt_fatal("pipeline: out of activation slots (schedule bug)");
        *so = p->free_slots[--p->nfree];
    }
    return *so;
}

/* ---- passes: timed, and spans with logging.trace ---- */
#define PASS_ARGS "\"micro_batch\": %d, \"chunk\": %d, \"stage\": %d"

/* Forward of (chunk c, micro batch mb) in slot s; returns its host seconds.
 * name: "forward", or "forward (no grad)" for evaluation and sampling. */
static double pass_forward(LtPipeline *p, const char *name, int c, int s, int mb,
                           const int32_t *tokens, const int32_t *targets, float grad_scale,
                           void *out) {
    LT_TRACE_BEGIN(name, PASS_ARGS, mb, c, p->rank);
    const double t0 = lt_now();
    const int clk = lt_devclock_begin(NULL);
    lt_model_chunk_forward(p->m, c, s, tokens, targets, grad_scale, out);
    lt_devclock_end(clk, LT_CLK(LT_CLK_FORWARD), NULL);
    const double dt = lt_now() - t0;
    LT_TRACE_END();
    return dt;
}

static double pass_backward(LtPipeline *p, int c, int s, int mb, void *din) {
    LT_TRACE_BEGIN("backward", PASS_ARGS, mb, c, p->rank);
    const double t0 = lt_now();
    const int clk = lt_devclock_begin(NULL);
    lt_model_chunk_backward(p->m, c, s, din);
    lt_devclock_end(clk, LT_CLK(LT_CLK_BACKWARD), NULL);
    const double dt = lt_now() - t0;
    LT_TRACE_END();
    return dt;
}

/* Wait for the batch's nr receives: the time blocked here, charged to the
 * pipeline group, is the bubble of a training step (lt_pipeline_take_times). */
static void recv_wait(LtPipeline *p, int nr, int eval) {
    if (nr == 0) return;
    LT_TRACE_BEGIN("pipeline wait", "\"receives\": %d, \"bytes\": %zu", nr,
                   (size_t)nr * lt_act_bytes(p->m->be, p->m->boundary));
    const double busy0 = lt_comm_busy_seconds(p->pp);
    for (int k = 0; k < nr; k++) lt_comm_finish(&p->recvs[k]);
    if (!eval) p->bubble_s += lt_comm_busy_seconds(p->pp) - busy0;
    LT_TRACE_END();
}

/* The run of sends and receives acts[i, end) (lt_schedule_comm_run), as
 * one batch: all started together, then the receives waited for. A send
 * carries what the last forward (out_msg) or backward (din_msg) produced.
 * Training takes slots from the pool; forward passes only (eval != 0) keep
 * chunk c's input in slot c. */
static void exchange(LtPipeline *p, const LtAction *acts, int i, int end, int eval,
                     int *out_msg, int *din_msg) {
    LtModel *m = p->m;
    if (end - i > p->recv_cap) {
        p->recv_cap = end - i;
        free(p->recvs);
        p->recvs = lt_malloc(sizeof(LtCommRequest) * (size_t)p->recv_cap);
    }
    int nr = 0;
    const int defer = p->post_ahead && !eval; /* receives waited for where they are read */
    /* on the device, a batch's operations run together (NCCL): the compute
     * stream's wait through a batch that receives is the bubble there */
    const int clk = eval ? -1 : lt_devclock_begin(NULL);
    lt_comm_batch_begin(p->pp);
    p->batches++;
    for (; i < end; i++) {
        const LtAction *a = &acts[i];
        const int c = a->chunk, mb = a->mb;
        switch (a->kind) {
        case LT_ACT_RECV_ACT: {
            const int s = eval ? c : slot_take(p, c, mb);
            LtCommRequest *r = defer ? &p->pend_act[s] : &p->recvs[nr++];
            *r = recv_start(p, m->slot[s].x[0], 0, c, mb, a->peer);
            break;
        }
        case LT_ACT_RECV_GRAD: {
            int s = eval ? -1 : p->slot_of[c * p->M + mb];
            LT_CHECK(s >= 0);
            LtCommRequest *r = defer ? &p->pend_grad[s] : &p->recvs[nr++];
            *r = recv_start(p, m->slot[s].dout, 1, c, mb, a->peer);
            break;
        }
        case LT_ACT_SEND_ACT:
            send_start(p, *out_msg, 0, c, mb, a->peer);
            *out_msg = -1;
            break;
        case LT_ACT_SEND_GRAD:
            send_start(p, *din_msg, 1, c, mb, a->peer);
            *din_msg = -1;
            break;
        default:
            lt_fatal("pipeline: action %d in a communication batch", (int)a->kind);
        }
    }
    lt_comm_batch_end(p->pp);
    recv_wait(p, nr, eval);
    lt_devclock_end(clk, nr ? LT_CLK(LT_CLK_BUBBLE) : 0, NULL);
}

void lt_pipeline_set_micro_batch_scales(LtPipeline *p, const float *grad_scale,
                                        const float *loss_weight) {
    p->mb_scale = grad_scale;
    p->mb_weight = loss_weight;
}

/* Micro batch mb's gradient scale, its loss weight set on the model. */
static float mb_grad_scale(LtPipeline *p, int mb, float grad_scale) {
    if (!p->mb_scale) return grad_scale;
    lt_model_set_loss_weight(p->m, p->mb_weight[mb]);
    return p->mb_scale[mb];
}

/* After a step: the next passes (evaluation too) use plain sums again. */
static void end_train(LtPipeline *p) {
    if (p->mb_scale) lt_model_set_loss_weight(p->m, 1.0f);
    p->mb_scale = p->mb_weight = NULL;
}

void lt_pipeline_train(LtPipeline *p, const int32_t *tokens, const int32_t *targets,
                       float grad_scale) {
    LtModel *m = p->m;
    const size_t bt = (size_t)m->B * (size_t)m->T;
    if (p->M == 0) lt_fatal("pipeline: created for forward passes only");
    if (p->P == 1) { /* gradient accumulation: F0 B0 F1 B1 ... in slot 0 */
        for (int mb = 0; mb < p->M; mb++) {
            lt_model_set_final_pass(m, mb == p->M - 1);
            p->fwd_s += pass_forward(p, "forward", 0, 0, mb, tokens + (size_t)mb * bt,
                                     targets + (size_t)mb * bt, mb_grad_scale(p, mb, grad_scale),
                                     NULL);
            p->bwd_s += pass_backward(p, 0, 0, mb, NULL);
        }
        lt_model_set_final_pass(m, 0);
        end_train(p);
        return;
    }
    for (int i = 0; i < p->V * p->M; i++) p->slot_of[i] = -1;
    p->nfree = m->nslots;
    for (int i = 0; i < m->nslots; i++) p->free_slots[i] = m->nslots - 1 - i;
    int out_msg = -1, din_msg = -1; /* produced by the last forward / backward */
    for (int i = 0; i < p->nacts;) {
        const LtAction *a = &p->acts[i];
        const int c = a->chunk, mb = a->mb;
        if (a->kind == LT_ACT_FORWARD) {
            int s = slot_take(p, c, mb);
            out_msg = lt_model_chunk_last(m, c) ? -1 : msg_take(p);
            lt_model_set_final_pass(m, mb == p->M - 1);
            slot_wait(p, s, 0);
            p->fwd_s += pass_forward(p, "forward", c, s, mb, tokens + (size_t)mb * bt,
                                     targets + (size_t)mb * bt, mb_grad_scale(p, mb, grad_scale),
                                     out_msg >= 0 ? p->msgs[out_msg].buf : NULL);
            i++;
        } else if (a->kind == LT_ACT_BACKWARD) {
            int *so = &p->slot_of[c * p->M + mb];
            LT_CHECK(*so >= 0);
            din_msg = lt_model_chunk_first(m, c) ? -1 : msg_take(p);
            lt_model_set_final_pass(m, mb == p->M - 1);
            slot_wait(p, *so, 1);
            p->bwd_s += pass_backward(p, c, *so, mb, din_msg >= 0 ? p->msgs[din_msg].buf : NULL);
            p->free_slots[p->nfree++] = *so;
            *so = -1;
            i++;
        } else {
            int end = lt_schedule_comm_run(p->acts, p->nacts, i);
            exchange(p, p->acts, i, end, 0, &out_msg, &din_msg);
            i = end;
        }
    }
    lt_model_set_final_pass(m, 0);
    msgs_drain(p);
    LT_CHECK(p->nfree == m->nslots);
    end_train(p);
}

void lt_pipeline_forward(LtPipeline *p, const int32_t *tokens, const int32_t *targets, int n) {
    LtModel *m = p->m;
    const size_t bt = (size_t)m->B * (size_t)m->T;
    size_t need = (size_t)3 * (size_t)p->V * (size_t)(n > 0 ? n : 1);
    if (need > p->fwd_cap) {
        free(p->fwd);
        p->fwd = lt_malloc(sizeof(LtAction) * need);
        p->fwd_cap = need;
    }
    char err[256];
    int nacts = lt_schedule_forward_rank(p->P, p->V, n, p->rank, p->fwd, p->fwd_cap, err,
                                         sizeof err);
    if (nacts < 0) lt_fatal("pipeline forward: %s", err);
    int out_msg = -1, unused = -1;
    for (int i = 0; i < nacts;) {
        const LtAction *a = &p->fwd[i];
        if (a->kind == LT_ACT_FORWARD) { /* chunk c uses slot c */
            const int c = a->chunk;
            out_msg = lt_model_chunk_last(m, c) ? -1 : msg_take(p);
            pass_forward(p, "forward (no grad)", c, c, a->mb, tokens + (size_t)a->mb * bt,
                         targets + (size_t)a->mb * bt, 0.0f,
                         out_msg >= 0 ? p->msgs[out_msg].buf : NULL);
            i++;
        } else {
            int end = lt_schedule_comm_run(p->fwd, nacts, i);
            exchange(p, p->fwd, i, end, 1, &out_msg, &unused);
            i = end;
        }
    }
    msgs_drain(p);
}

void lt_pipeline_take_times(LtPipeline *p, double *fwd_s, double *bwd_s, double *bubble_s) {
    *fwd_s = p->fwd_s, *bwd_s = p->bwd_s, *bubble_s = p->bubble_s;
    p->fwd_s = p->bwd_s = p->bubble_s = 0.0;
}
