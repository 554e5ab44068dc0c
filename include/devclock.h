/* devclock.h - where a training step's time went, measured on the device.
 *
 * On a GPU the host runs ahead of the device: the host's clock around a
 * forward pass times its launches, and an NCCL collective returns at once
 * however long the device then waits for it. The step's breakdown (metrics.h)
 * is therefore taken from pairs of device timers: a span begins and ends with
 * a timestamp taken when a stream reaches that point, and the seconds between
 * them are added to each kind the span counts for once the step's work is
 * done. Spans on the compute stream measure what the compute waited for
 * (exposed communication, the pipeline bubble: a wait the compute stream had
 * already reached costs its whole length, one still behind queued work costs
 * nothing); spans on a communication stream measure its work (busy).
 *
 * One clock per process, used by the training thread only. It runs only where
 * the backend has timers (backend.h; not the CPU, whose ops the host's clock
 * times directly, unless LT_CPU_DEVICE_TIMERS=1 for tests), and records spans
 * only while active: the trainer activates it for each step's forward,
 * backward, gradient reduction and optimizer, not for evaluation. Spans begun
 * while a stream is captured into a graph belong to the graph: the graph's
 * every launch takes their timestamps again, and each collect counts them. */
#ifndef LT_DEVCLOCK_H
#define LT_DEVCLOCK_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LT_CLK_FORWARD,
    LT_CLK_BACKWARD,
    LT_CLK_GRADS,
    LT_CLK_OPTIMIZER,
    LT_CLK_BUBBLE,
    LT_CLK_TP, /* exposed communication per kind: the compute stream waited */
    LT_CLK_DP,
    LT_CLK_PP,
    LT_CLK_TP_BUSY, /* communication under way, hidden or not */
    LT_CLK_DP_BUSY,
    LT_CLK_PP_BUSY,
    /* parts of the passes (lt_devclock_part_begin): inside forward and backward */
    LT_CLK_ATTN,    /* the attention core, forward and backward (recomputed included) */
    LT_CLK_HEAD,    /* the loss head: logits, cross-entropy, their gradient */
    LT_CLK_MOE,     /* whole MoE layers: router, dispatch, experts, combine */
    LT_CLK_EXPERTS, /* of those, the experts' GEMMs (grouped or per expert) */
    LT_CLK_KINDS
} LtClockKind;

#define LT_CLK_FIRST_PART LT_CLK_ATTN
#define LT_CLK_PARTS (LT_CLK_KINDS - LT_CLK_FIRST_PART)

#define LT_CLK(k) (1u << (k))
/* The busy kind of exposed kind k (LT_CLK_TP, _DP or _PP). */
#define LT_CLK_BUSY_OF(k) ((k) + (LT_CLK_TP_BUSY - LT_CLK_TP))

/* Start the clock on be: 1 when be has timers (the clock runs), else 0 and
 * every call below does nothing. */
int lt_devclock_start(LtBackend *be);
/* Frees the timers: after any graph captured with spans is destroyed. */
void lt_devclock_stop(void);
int lt_devclock_running(void);
void lt_devclock_set_active(int active);
/* Spans begun from now until capture(0) are the graph's (see above). */
void lt_devclock_capture(int on);

/* Begin a span on stream s (NULL: the backend's current stream); returns its
 * handle, or -1 when the clock is not running or not active. */
int lt_devclock_begin(LtStream *s);
/* End span h on the same stream, counting it for every kind in mask (0: for
 * none). h = -1 does nothing. */
void lt_devclock_end(int h, unsigned mask, LtStream *s);

/* After the device has done the step's work: add each kind's seconds over the
 * spans ended since the last collect (and the graph's) to sec[LT_CLK_KINDS].
 * A span whose end is still pending on the device (a gather behind the next
 * step's forward) is kept for the next collect. Returns 1 when sec holds
 * device times, 0 when the clock is not running (or stopped itself because the
 * device could not tell a span's time: it says so once, and the host's clocks
 * take over). */
int lt_devclock_collect(double sec[LT_CLK_KINDS]);

/* Parts of the passes (kinds from LT_CLK_FIRST_PART): a span on the current
 * stream where the clock runs, counted by lt_devclock_collect; elsewhere
 * (the CPU backend, whose ops are done when they return) the host's clock,
 * counted while the clock is active, which lt_devclock_parts_take hands over.
 * Parts nest (an MoE layer's experts inside it) up to 8 deep. Returns a
 * handle for lt_devclock_part_end; -1 when nothing is timed. */
int lt_devclock_part_begin(void);
void lt_devclock_part_end(int h, LtClockKind k);
/* The host-timed parts' seconds since the last call, added to
 * sec[LT_CLK_PARTS] (index k - LT_CLK_FIRST_PART), and reset. */
void lt_devclock_parts_take(double sec[LT_CLK_PARTS]);
#ifdef __cplusplus
}
#endif

#endif
