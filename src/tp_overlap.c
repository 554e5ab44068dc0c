/* tp_overlap.c - sequence-parallel all-gather / reduce-scatter in row blocks
 * behind the GEMMs (tp_overlap.h). */
#include "tp_overlap.h"

#include <stdlib.h>

#include "common.h"

static void *block_at(void *full, size_t bytes, int k) { return (char *)full + bytes * (size_t)k; }

void lt_tp_gather_blocks(const LtComm *tp, void *full, size_t count, size_t bytes,
                         LtCommType t, LtRowBlockFn fn, void *ctx) {
    const LtComm *bg = lt_comm_background(tp);
    const int n = lt_comm_size(tp), me = lt_comm_rank(tp);
    LtCommRequest *req = lt_calloc((size_t)n * sizeof *req);
    /* every block's broadcast is queued at once, in rank order on every rank;
     * the background runs them one by one while fn works on what is here */
    for (int k = 0; k < n; k++)
        req[k] = lt_comm_broadcast_start(bg, block_at(full, bytes, k), count, t, k);
    fn(ctx, me);
    for (int k = 0; k < n; k++) {
        lt_comm_finish(&req[k]);
        if (k != me) fn(ctx, k);
    }
    free(req);
}

void lt_tp_scatter_blocks(const LtComm *tp, void *full, void *shard, size_t count, size_t bytes,
                          LtCommType t, LtRowBlockFn fn, LtRowBlockFn tail, void *ctx) {
    const LtComm *bg = lt_comm_background(tp);
    const int n = lt_comm_size(tp);
    LT_CHECK(count <= (size_t)0x7fffffff);
    LtCommRequest *req = lt_calloc((size_t)n * sizeof *req);
    int *counts = lt_calloc((size_t)n * (size_t)n * sizeof *counts); /* row k: block k's counts */
    for (int k = 0; k < n; k++) {
        fn(ctx, k);
        int *ck = counts + (size_t)k * (size_t)n;
        ck[k] = (int)count;
        /* the send buffer starts at block k: with counts 0 before k, rank k's
         * share is exactly block k */
        req[k] = lt_comm_reduce_scatter_v_start(bg, block_at(full, bytes, k), shard, ck, t);
    }
    if (tail) tail(ctx, -1);
    for (int k = 0; k < n; k++) lt_comm_finish(&req[k]);
    free(counts);
    free(req);
}
