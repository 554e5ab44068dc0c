/* schedule.h - pipeline-parallel schedules as data, and a simulator for them
 * (pure functions, no MPI).
 *
 * A schedule is, for each pipeline rank r of P, an ordered list of actions.
 * With V virtual chunks per rank the model is cut into S = P * V stages;
 * chunk c of rank r holds stage s = c * P + r. Stage s sends its activation
 * to stage s + 1 (rank (r + 1) % P; from rank P-1 it wraps to chunk c + 1 of
 * rank 0) and its input gradient to stage s - 1. Every RECV comes before the
 * compute that needs it, every SEND after the compute that produced it (1F1B:
 * directly before / after; interleaved: batched, see below). In a
 * communication action `chunk` is the chunk of the rank that
 * performs it (the chunk of the compute it belongs to), so a send and its
 * receive name the same micro batch and kind but neighbouring stages; `peer`
 * is the other rank.
 *
 * Compute order (T = V * M forwards and T backwards per rank):
 *   warm-up   W_r forwards f_0 .. f_{W_r - 1}
 *   steady    T - W_r rounds: forward f_{W_r + i}, then backward b_i
 *   cool-down backwards b_{T - W_r} .. b_{T - 1}
 * - P == 1 (no pipelining; V must be 1): W = 0, i.e. F0 B0 F1 B1 ... - the
 *   forward and backward of each micro batch back to back, gradients
 *   accumulating, as Megatron's forward_backward_no_pipelining; at most one
 *   micro batch's activations are alive.
 * - V == 1 (1F1B): W_r = min(P - r - 1, M), f_k = b_k = (chunk 0, mb k).
 * - V > 1 (Megatron's interleaved 1F1B; needs P > 1 and M % P == 0):
 *   W_r = min(T, 2 (P - r - 1) + (V - 1) P); virtual step k runs
 *   micro batch P * (k / (P V)) + k % P on chunk (k % (P V)) / P for the
 *   forward and on chunk V - 1 - (k % (P V)) / P for the backward.
 *   Communication is batched as in Megatron: the receive of the next forward
 *   (and, after the last warm-up forward, of the first backward's gradient)
 *   follows the sends of each forward; each steady round is F, B, then one
 *   run {send activation, send gradient, receive next activation, receive
 *   next gradient}. Consecutive sends and receives form one batch for the
 *   executor; so neighbours' batches meet and the schedule also runs with
 *   NCCL's rendezvous sends (lt_schedule_check_ordered). */
#ifndef LT_SCHEDULE_H
#define LT_SCHEDULE_H

#include <stddef.h>

#include "layer_split.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LT_ACT_FORWARD = 0,
    LT_ACT_BACKWARD,
    LT_ACT_SEND_ACT,  /* activation of (chunk, mb) to the next stage */
    LT_ACT_RECV_ACT,  /* activation for (chunk, mb) from the previous stage */
    LT_ACT_SEND_GRAD, /* input gradient of (chunk, mb) to the previous stage */
    LT_ACT_RECV_GRAD, /* output gradient for (chunk, mb) from the next stage */
    LT_ACT_COUNT
} LtActKind;

typedef struct {
    LtActKind kind;
    int chunk; /* local chunk, 0 .. V-1 */
    int mb;    /* micro batch, 0 .. M-1 */
    int peer;  /* other rank of a SEND/RECV; -1 for compute */
} LtAction;

/* Limits checked by lt_schedule_check. */
#define LT_SCHED_MAX_PP 1024
#define LT_SCHED_MAX_VPP 64
#define LT_SCHED_MAX_WORK (1 << 22) /* P * V * M */

/* "FORWARD", "BACKWARD", "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD". */
const char *lt_action_kind_name(LtActKind kind);
/* 1 for a send or a receive (of either kind); 1 for a send. */
int lt_action_is_comm(LtActKind kind);
int lt_action_is_send(LtActKind kind);

/* 0 when (pp, vpp, micro_batches) make a valid schedule, else -1 with a
 * message in err: sizes must be >= 1 and within the limits, vpp > 1 needs
 * pp > 1 and micro_batches a multiple of pp. */
int lt_schedule_check(int pp, int vpp, int micro_batches, char *err, size_t errlen);

/* The pipeline layout a config asks for, in one answer for config
 * validation: 0 when split cuts num_layers into pp x vpp chunks
 * (lt_layer_split_check) and, with a pipeline (pp > 1), micro_batches per step
 * make a valid schedule (lt_schedule_check); else -1 with the reason in err,
 * naming the parallel.* keys. */
int lt_schedule_layout_check(const LtLayerSplit *split, int num_layers, int pp, int vpp,
                             int micro_batches, char *err, size_t errlen);

/* Room lt_schedule_rank needs: 6 * vpp * micro_batches (each compute with at
 * most one receive and one send). */
size_t lt_schedule_capacity(int pp, int vpp, int micro_batches);

/* Warm-up forwards W_r of rank (see the top of this file); -1 when invalid. */
int lt_schedule_warmup(int pp, int vpp, int micro_batches, int rank);

/* Rank's ordered action list written to out (room for cap actions). Returns
 * the number of actions, or -1 with a message in err when the sizes are
 * invalid, rank is outside [0, pp) or cap is too small. */
int lt_schedule_rank(int pp, int vpp, int micro_batches, int rank, LtAction *out, size_t cap,
                     char *err, size_t errlen);

/* Forward passes only (evaluation): micro batch by micro batch, each chunk
 * in turn, its receive right before and its send right after (the form
 * lt_schedule_check_ordered accepts). Any micro_batches >= 0; room for
 * 3 * vpp * micro_batches actions. Returns the count or -1 with err. */
int lt_schedule_forward_rank(int pp, int vpp, int micro_batches, int rank, LtAction *out,
                             size_t cap, char *err, size_t errlen);

/* ---- simulator ------------------------------------------------------------ */

/* Cost model: every forward of one chunk takes fwd, every backward bwd
 * (times stage_scale[c * pp + r] for chunk c of rank r, when given: stages
 * of unequal work), a message arrives latency after its send (sends never
 * block, a receive waits for the arrival); communication takes no rank time. */
typedef struct {
    double fwd, bwd, latency;
    const double *stage_scale; /* (optional) pp * vpp factors >= 0, in model order */
} LtSimCost;

/* One executed compute action. */
typedef struct {
    LtActKind kind; /* LT_ACT_FORWARD or LT_ACT_BACKWARD */
    int chunk, mb;
    double start, end;
} LtSimEvent;

typedef struct {
    int pp, vpp, micro_batches;
    double makespan;   /* time when the last rank finishes */
    double busy_total; /* sum over ranks of compute time */
    double bubble;     /* 1 - busy_total / (pp * makespan) */
    int *peak_inflight; /* [pp]: max over time of forwards done whose backward
                           is not, counted per (chunk, mb) */
    double *busy;       /* [pp] compute time of each rank */
    LtSimEvent *events; /* compute events of rank r: events + event_off[r] */
    int *event_off;     /* [pp + 1] */
    int messages;       /* sends matched with exactly one receive */
} LtSimResult;

/* Run the ranks' lists (acts[r] with n[r] actions) against each other. Every
 * rank executes its list in order; a RECV blocks until the matching SEND
 * (same kind and micro batch, from the neighbouring stage, right peers) has
 * arrived. Checks: peers are the neighbouring stages' ranks, every message is
 * sent once and received once, a forward of stage s > 0 has received its
 * activation, a backward has run its forward and (below the last stage)
 * received its gradient, no compute runs twice, every rank runs all V * M
 * forwards and backwards, and some rank can always progress (otherwise:
 * deadlock, naming the blocked actions). Returns 0 with res filled (free with
 * lt_sim_free), or -1 with a message in err (res then holds nothing to free). */
int lt_schedule_simulate(int pp, int vpp, int micro_batches, LtAction *const *acts, const int *n,
                         LtSimCost cost, LtSimResult *res, char *err, size_t errlen);

/* Build every rank's schedule, simulate it, and check it under NCCL's
 * ordered, rendezvous semantics (lt_schedule_check_ordered, one channel):
 * a schedule that passes runs on MPI and on NCCL. */
int lt_schedule_simulate_all(int pp, int vpp, int micro_batches, LtSimCost cost,
                             LtSimResult *res, char *err, size_t errlen);

void lt_sim_free(LtSimResult *res);

/* ---- ordered, rendezvous point-to-point (NCCL) ------------------------------ */

/* End of the group that starts at action i: a maximal run of consecutive
 * SEND/RECV actions (issued together, as one NCCL group), or i + 1 for a
 * compute action. The executor and lt_schedule_check_ordered both group
 * actions this way. */
int lt_schedule_comm_run(const LtAction *acts, int n, int i);

/* parallel.overlap_p2p_comm over MPI: post receives one communication run
 * ahead. Each run's receives move to the end of the run before it (across
 * the compute in between), so the message travels while that compute runs; a
 * gradient's receive moves only when its forward precedes the earlier run.
 * Only receives move, and only earlier: sends, compute and the receives from
 * each peer keep their order. Posting an MPI receive never blocks and the
 * executor waits for it only at the pass that reads it (at or after where the
 * plain list waits), so the plain list's deadlock freedom carries over. Not
 * for NCCL, whose receives block their stream where they are issued (there
 * the plain list runs; lt_schedule_check_ordered proves it). In place (same
 * actions, same count); returns the number of receives moved. */
int lt_schedule_post_ahead(LtAction *acts, int n);

/* Check the ranks' lists under NCCL's point-to-point semantics, which are
 * stricter than the simulator's (tags, sends that never block):
 *   - ordered: messages from one rank to another on one channel match in
 *     issue order, without tags. channels = 1: every message between two
 *     ranks shares one order; 2: activations and gradients are ordered
 *     separately (each kind on its own communicator). The k-th send must be
 *     the message the receiver's k-th receive expects.
 *   - rendezvous: a group of operations (lt_schedule_comm_run) completes only
 *     when each of them has met its partner in the partner rank's current
 *     group; compute waits for the group before it. No rank may be stuck.
 * Works for training and forward-only lists. Returns 0, or -1 with the first
 * out-of-order pair or the blocked actions in err. */
int lt_schedule_check_ordered(int pp, int vpp, LtAction *const *acts, const int *n,
                              int channels, char *err, size_t errlen);

/* `lattice schedule --pp P [--vpp V] --micro-batches M [--fwd-cost F]
 * [--bwd-cost B] [--latency L] [--svg FILE]`: text timeline, bubble fraction
 * and peak in-flight per rank; 0 on success, 2 on bad arguments. argv[0] is
 * "schedule". */
int lt_cmd_schedule(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
