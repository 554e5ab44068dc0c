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

void lt_tp_gather_scatter_in_order(const LtComm *tp, void *in_full, size_t in_count,
                                   size_t in_bytes, void *out_full, void *out_shard,
                                   size_t out_count, size_t out_bytes, LtCommType t,
                                   LtRowBlockFn fn, void *ctx) {
    const LtComm *bg = lt_comm_background(tp);
    const int n = lt_comm_size(tp), me = lt_comm_rank(tp);
    LT_CHECK(out_count <= (size_t)0x7fffffff);
    LtCommRequest *g = lt_calloc((size_t)n * sizeof *g), *r = lt_calloc((size_t)n * sizeof *r);
    int *counts = lt_calloc((size_t)n * (size_t)n * sizeof *counts);
    for (int k = 0; k < n; k++)
        g[k] = lt_comm_broadcast_start(bg, block_at(in_full, in_bytes, k), in_count, t, k);
    for (int k = 0; k < n; k++) {
        /* this rank's block is in place already (its broadcast only reads it) */
        if (k != me) lt_comm_finish(&g[k]);
        fn(ctx, k);
        if (out_full) {
            int *ck = counts + (size_t)k * (size_t)n;
            ck[k] = (int)out_count;
            r[k] = lt_comm_reduce_scatter_v_start(bg, block_at(out_full, out_bytes, k), out_shard,
                                                  ck, t);
        }
    }
    lt_comm_finish(&g[me]);
    if (out_full)
        for (int k = 0; k < n; k++) lt_comm_finish(&r[k]);
    free(counts);
    free(g);
    free(r);
}
