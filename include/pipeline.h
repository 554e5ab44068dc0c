/* pipeline.h - the pipeline executor: runs a step's micro batches through
 * this rank's chunks of the model by walking its action list from
 * schedule.h (forwards, backwards, and the sends/receives of activations and
 * their gradients over the pipeline group). Without pipelining (pp = 1) the
 * same walk is plain gradient accumulation, F0 B0 F1 B1 ...
 *
 * Messages: each run of consecutive sends and receives in the list is one
 * batch (lt_schedule_comm_run, lt_comm_batch_begin/end: one NCCL group): all
 * of its operations are started together, then its receives are waited for,
 * into the activation slot (chunk input, or output gradient). A send goes
 * from a message buffer of its own, which completes in the background: a
 * pass that needs a buffer takes one whose send has completed, else finishes
 * the sends started before the latest batch (later than NCCL's semantics
 * would wait for them), so the pool made at creation, at most four boundary
 * tensors, suffices (lt_pipeline_messages; with NCCL, whose stream orders a
 * buffer's reuse after its send, fewer). Deadlock freedom: every operation
 * is posted no later and waited for no earlier than in the plain list under
 * NCCL's semantics (ordered, rendezvous sends; a batch completes as a
 * whole), which lt_schedule_check_ordered proves for every schedule the
 * suite sweeps; MPI's tagged sends match the same partners. Tags name (kind, receiving
 * chunk, micro batch). An activation slot is taken when a (chunk, micro
 * batch) receives its input (the first stage: starts its forward) and given
 * back after its backward: the model needs as many slots as
 * lt_pipeline_slots says. Evaluation walks lt_schedule_forward_rank's list
 * the same way. With logging.trace each pass is a span ("forward",
 * "backward", "forward (no grad)" with micro batch, chunk and stage), each
 * batch's receive wait one ("pipeline wait"), and a pass's wait for earlier
 * sends to free a buffer one ("pipeline send wait"). */
#ifndef LT_PIPELINE_H
#define LT_PIPELINE_H

#include <stdint.h>

#include "comm.h"
#include "model.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LtPipeline LtPipeline;

/* Activation slots pipeline rank `rank` needs to run (pp, vpp, micro_batches)
 * with training: the most (chunk, micro batch) pairs holding one at once
 * (input received or forward begun, backward not yet done) over its action
 * list; -1 when the sizes are invalid. */
int lt_pipeline_slots(int pp, int vpp, int micro_batches, int rank, int post_ahead);

/* How stage-to-stage messages travel: MPI (a send completes in the
 * background), MPI with receives posted ahead (parallel.overlap_p2p_comm), or
 * in a stream's order (NCCL: a sent buffer is free for the next pass). */
typedef enum { LT_P2P_MPI, LT_P2P_MPI_AHEAD, LT_P2P_STREAM } LtP2pKind;

/* Message buffers (boundary tensors) pipeline rank `rank` needs for
 * training with micro_batches (0: forward passes only) and for forward
 * passes of any number of micro batches: the most it holds at once under
 * the executor's reuse rule; 0 without pipelining, -1 when the sizes are
 * invalid. */
int lt_pipeline_messages(int pp, int vpp, int micro_batches, int rank, LtP2pKind kind);
/* The same for one action list a[0..n) of pipeline rank `rank` of pp x vpp;
 * stream: NCCL's stream order (else MPI's). */
int lt_pipeline_messages_in(const LtAction *a, int n, int pp, int vpp, int rank, int stream);

/* Executor for model m (its place: pp, pp_rank, vpp) on pipeline group pp
 * (members in stage order; NULL or one rank without pipelining), running
 * micro_batches per training step (0: forward passes only). lt_fatal when
 * the schedule is invalid or the model has fewer slots than it needs. */
LtPipeline *lt_pipeline_create(LtModel *m, const LtComm *pp, int micro_batches);
void lt_pipeline_destroy(LtPipeline *p);
/* parallel.overlap_p2p_comm (training with pp > 1; a no-op otherwise): every
 * receive is waited for only by the forward or backward that reads it, and on
 * MPI it is also posted one communication run ahead (lt_schedule_post_ahead),
 * so a stage computes while its neighbours' messages travel (sends already
 * complete in the background). NCCL keeps the plain list's issue order (its
 * receives block their stream where issued). On MPI the model needs
 * lt_pipeline_slots(..., 1) slots. */
void lt_pipeline_set_p2p_overlap(LtPipeline *p, int on);

/* The micro batches of the next training steps (batch-size ramp-up): the
 * schedule is rebuilt for them when they change. The model must have the
 * activation slots that count needs (lt_pipeline_slots; they grow with it,
 * so a model made for the largest count suffices); message buffers are added
 * as needed. lt_fatal for a pipeline made for forward passes only, or a
 * count the schedule refuses. */
void lt_pipeline_set_micro_batches(LtPipeline *p, int micro_batches);
/* One training step: micro batch j's host ids are tokens/targets + j*B*T
 * (B x T each; uploaded asynchronously, see lt_model_chunk_forward). The
 * gradients of grad_scale * (sum of token losses) accumulate into the model's
 * gradients (and go through its bucket hook). The sum of token losses is
 * added to the model's device loss accumulator on the rank holding the last
 * stage (lt_model_loss_take reads it). */
void lt_pipeline_train(LtPipeline *p, const int32_t *tokens, const int32_t *targets,
                       float grad_scale);
/* For the next lt_pipeline_train only (NULL: off): micro batch j (of this
 * rank's) uses grad_scale[j] instead of the step's, and its sum of token
 * losses is added to the accumulator times loss_weight[j]
 * (train.calculate_per_token_loss=false: each micro batch's mean). The
 * arrays must stay valid through that call. */
void lt_pipeline_set_micro_batch_scales(LtPipeline *p, const float *grad_scale,
                                        const float *loss_weight);

/* Forward only (evaluation) over n micro batches (any n >= 0), micro batch
 * by micro batch: the sum of token losses is added to the model's loss
 * accumulator on the last stage. */
void lt_pipeline_forward(LtPipeline *p, const int32_t *tokens, const int32_t *targets, int n);

/* Message buffers allocated so far (each one stage boundary tensor), those
 * made at creation (lt_pipeline_messages), and the bytes of the former. */
int lt_pipeline_message_buffers(const LtPipeline *p);
int lt_pipeline_message_buffers_planned(const LtPipeline *p);
size_t lt_pipeline_message_bytes(const LtPipeline *p);
/* Host seconds spent in forward and in backward passes of training since the
 * last call (forward includes the last stage's loss head and its gradient;
 * both include the tensor-parallel communication inside the layers), and in
 * the bubble: blocked in the receive waits of training's schedule (inside
 * the pipeline group's operations, between the passes; 0 without
 * pipelining); resets. */
void lt_pipeline_take_times(LtPipeline *p, double *fwd_s, double *bwd_s, double *bubble_s);

#ifdef __cplusplus
}
#endif

#endif
