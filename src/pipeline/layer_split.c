/* layer_split.c - layers per pipeline chunk (see layer_split.h). */
#include "layer_split.h"

#include <stdio.h>

#include "common.h"

int lt_layer_split_even(const LtLayerSplit *s) {
    return !s || (s->first == 0 && s->last == 0 && !s->embedding && !s->loss);
}

int lt_layer_split_check(const LtLayerSplit *s, int L, int pp, int vpp, char *err, size_t errlen) {
    if (L < 1 || pp < 1 || vpp < 1) return lt_errorf(err, errlen, "no layers or no pipeline stages");
    const long long chunks = (long long)pp * vpp; /* (sizes up to INT_MAX each) */
    if (lt_layer_split_even(s)) {
        if (L % chunks)
            return lt_errorf(err, errlen,
                        "model.num_layers (%d) must be divisible by "
                        "parallel.pipeline_model_parallel_size (%d) * "
                        "parallel.virtual_pipeline_model_parallel_size (%d) = %lld (or set "
                        "parallel.num_layers_in_first/last_pipeline_stage or "
                        "parallel.account_for_embedding/loss_in_pipeline_split)",
                        L, pp, vpp, chunks);
        return 0;
    }
    /* every chunk but the model's first and last holds a layer: past this
     * bound nothing fits, and below it the sums below stay small */
    if (chunks > (long long)L + 2)
        return lt_errorf(err, errlen,
                         "parallel.pipeline_model_parallel_size (%d) * "
                         "parallel.virtual_pipeline_model_parallel_size (%d) = %lld chunks for "
                         "model.num_layers (%d): every chunk but the two at the model's ends needs "
                         "a layer",
                         pp, vpp, chunks, L);
    const int uneven = s->first || s->last, account = s->embedding || s->loss;
    if (s->first < 0 || s->last < 0)
        return lt_errorf(err, errlen, "parallel.num_layers_in_first/last_pipeline_stage must be >= 0");
    if (uneven && account)
        return lt_errorf(err, errlen,
                    "parallel.num_layers_in_first/last_pipeline_stage and "
                    "parallel.account_for_embedding/loss_in_pipeline_split are exclusive: set one "
                    "way of unbalancing the pipeline");
    /* (counting the ends as layers is well defined on one stage too: its one
     * chunk holds every layer, as in Megatron-LM) */
    if (uneven && pp < 2)
        return lt_errorf(err, errlen,
                    "an uneven layer split (parallel.%s) needs "
                    "parallel.pipeline_model_parallel_size > 1",
                    s->first ? "num_layers_in_first_pipeline_stage"
                             : "num_layers_in_last_pipeline_stage");
    if (account) {
        const long long n = (long long)L + !!s->embedding + !!s->loss;
        if (n % chunks)
            return lt_errorf(err, errlen,
                        "model.num_layers (%d) + %d (the %s counted as a layer) = %lld must be "
                        "divisible by parallel.pipeline_model_parallel_size (%d) * "
                        "parallel.virtual_pipeline_model_parallel_size (%d) = %lld",
                        L, (int)(n - L),
                        s->embedding && s->loss ? "embedding and the loss"
                        : s->embedding          ? "embedding"
                                                : "loss",
                        n, pp, vpp, chunks);
        return 0; /* each chunk holds n / (pp vpp) >= 1, the ends one less (>= 0) */
    }
    if (s->first % vpp || s->last % vpp)
        return lt_errorf(err, errlen,
                    "parallel.num_layers_in_%s_pipeline_stage (%d) must be divisible by "
                    "parallel.virtual_pipeline_model_parallel_size (%d): the rank's chunks share "
                    "its layers evenly",
                    s->first % vpp ? "first" : "last", s->first % vpp ? s->first : s->last, vpp);
    if (s->first > L || s->last > L - s->first)
        return lt_errorf(err, errlen,
                         "parallel.num_layers_in_first/last_pipeline_stage (%d, %d) exceed "
                         "model.num_layers (%d)",
                         s->first, s->last, L);
    const int rest = L - s->first - s->last, mid = pp - (s->first > 0) - (s->last > 0);
    if (rest < 0 || (mid == 0 && rest != 0) || (mid > 0 && rest < mid * vpp))
        return lt_errorf(err, errlen,
                    "parallel.num_layers_in_first/last_pipeline_stage (%d, %d) leave %d of "
                    "model.num_layers (%d) for the %d middle pipeline stage(s) of %d chunk(s) "
                    "each: every chunk needs at least one layer and every layer a stage",
                    s->first, s->last, rest, L, mid, vpp);
    if (mid > 0 && rest % (mid * vpp))
        return lt_errorf(err, errlen,
                    "the %d layers left by parallel.num_layers_in_first/last_pipeline_stage "
                    "(%d, %d) must be divisible by the %d middle pipeline stage(s) * "
                    "parallel.virtual_pipeline_model_parallel_size (%d) = %d",
                    rest, s->first, s->last, mid, vpp, mid * vpp);
    return 0;
}

int lt_layer_split_count(const LtLayerSplit *s, int L, int pp, int vpp, int r, int c) {
    if (lt_layer_split_even(s)) return L / (pp * vpp);
    if (s->embedding || s->loss) {
        const int q = (int)(((long long)L + !!s->embedding + !!s->loss) / ((long long)pp * vpp));
        return q - (s->embedding && r == 0 && c == 0) - (s->loss && r == pp - 1 && c == vpp - 1);
    }
    if (r == 0 && s->first) return s->first / vpp;
    if (r == pp - 1 && s->last) return s->last / vpp;
    const int mid = pp - (s->first > 0) - (s->last > 0);
    return (L - s->first - s->last) / mid / vpp;
}

int lt_layer_split_start(const LtLayerSplit *s, int L, int pp, int vpp, int r, int c) {
    int start = 0;
    for (int v = 0; v < c * pp + r; v++) start += lt_layer_split_count(s, L, pp, vpp, v % pp, v / pp);
    return start;
}

const char *lt_layer_split_words(const LtLayerSplit *s, int L, int pp, int vpp, char *buf,
                                 size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int v = 0; v < pp * vpp; v++) {
        const int q = v / vpp, k = v % vpp;
        if (used + 32 >= len) { /* room for one more count and the cut mark */
            snprintf(buf + used, len - used, " ...");
            break;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%d", k ? "+" : q ? ", " : "",
                                 lt_layer_split_count(s, L, pp, vpp, q, k));
    }
    return buf;
}

const char *lt_layer_split_describe(const LtLayerSplit *s, char *buf, size_t len) {
    if (lt_layer_split_even(s)) snprintf(buf, len, "even");
    else if (s->embedding || s->loss)
        snprintf(buf, len, "%s counted as a layer",
                 s->embedding && s->loss ? "embedding and loss" : s->embedding ? "embedding" : "loss");
    else if (s->first && s->last) snprintf(buf, len, "first stage %d, last stage %d layers", s->first, s->last);
    else if (s->first) snprintf(buf, len, "first stage %d layers", s->first);
    else snprintf(buf, len, "last stage %d layers", s->last);
    return buf;
}
