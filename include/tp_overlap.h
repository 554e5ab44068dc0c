/* tp_overlap.h - sequence-parallel communication in row blocks behind the
 * GEMMs that consume or produce them (parallel.tp_comm_overlap; Megatron's
 * TP communication overlap).
 *
 * A sequence-parallel activation (N, C) is tp row blocks of `count` elements
 * (`bytes` bytes), block k belonging to group rank k. A GEMM over a row block
 * of its input gives exactly those rows of its output, so a GEMM can start
 * on the blocks that are here while the others are on their way, and a
 * row-parallel GEMM can hand each finished block to its reduction while it
 * computes the next.
 *
 * Both run their communication on tp's background companion
 * (lt_comm_background: an MPI worker thread, or a second NCCL communicator
 * on its own stream), one operation per block, started in block order on
 * every rank. Every member must call them at the same point. */
#ifndef LT_TP_OVERLAP_H
#define LT_TP_OVERLAP_H

#include <stddef.h>

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The work on row block k (0 <= k < tp); k = -1 for work on all rows. */
typedef void (*LtRowBlockFn)(void *ctx, int k);

/* All-gather of full (this rank's block already in place) with fn(ctx, k)
 * called on each block as soon as it has arrived: this rank's block first
 * (while the others move), then the others in rank order. Each block travels
 * as a broadcast from its owner, so the copy is exact. On return every block
 * is in full. */
void lt_tp_gather_blocks(const LtComm *tp, void *full, size_t count, size_t bytes,
                         LtCommType t, LtRowBlockFn fn, void *ctx);

/* Reduce-scatter of full, produced block by block: fn(ctx, k) writes block k
 * (this rank's partial sums), whose sum over tp is then started towards rank
 * k (a reduce-scatter whose counts are 0 except k's) and runs behind
 * fn(ctx, k + 1). tail, if not NULL, is called as tail(ctx, -1) after the
 * last block's reduction started, behind it. On return shard (count
 * elements) holds the sum of this rank's block over tp (unrounded: the
 * caller rounds it like a plain reduce-scatter's result). */
void lt_tp_scatter_blocks(const LtComm *tp, void *full, void *shard, size_t count, size_t bytes,
                          LtCommType t, LtRowBlockFn fn, LtRowBlockFn tail, void *ctx);

/* Both around work that must see the same rows on every rank at once (the
 * vocab-parallel loss sums per-row statistics over tp): every block's
 * broadcast of in_full (in_count elements, in_bytes bytes per block) is
 * queued, then for k = 0 .. tp-1 in that order on every rank fn(ctx, k) runs
 * once block k of in_full is here (this rank's at once); when out_full is
 * not NULL, block k of out_full (written by fn: partial sums) then starts its
 * sum over tp towards rank k, behind the next blocks' work. On return in_full
 * holds every block and, with out_full, out_shard (out_count elements) the
 * sum of this rank's block (unrounded, as lt_tp_scatter_blocks). */
void lt_tp_gather_scatter_in_order(const LtComm *tp, void *in_full, size_t in_count,
                                   size_t in_bytes, void *out_full, void *out_shard,
                                   size_t out_count, size_t out_bytes, LtCommType t,
                                   LtRowBlockFn fn, void *ctx);

#ifdef __cplusplus
}
#endif

#endif
