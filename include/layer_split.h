/* layer_split.h - how the transformer's layers are cut into pipeline chunks.
 *
 * With pp pipeline ranks of vpp chunks each there are pp * vpp virtual
 * stages, in model order: chunk c of rank r is virtual stage c * pp + r, and
 * each holds consecutive layers. By default every stage gets
 * num_layers / (pp * vpp). Like Megatron-LM, two ways to unbalance it:
 * - first / last: the first (last) pipeline rank holds that many layers over
 *   its chunks (a multiple of vpp), the middle ranks share the rest evenly;
 * - embedding / loss: the embedding (the final norm, LM head and loss) counts
 *   as one layer in an even split of num_layers + embedding + loss, so the
 *   model's first (last) chunk builds one layer less - possibly none.
 * The two ways are exclusive; the first needs pp > 1 (the second holds every
 * layer on one stage). Pure functions (errors through common.h's lt_errorf). */
#ifndef LT_LAYER_SPLIT_H
#define LT_LAYER_SPLIT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int first, last;     /* layers of the first / last pipeline rank (all its chunks); 0: even */
    int embedding, loss; /* 1: the embedding / the loss counts as a layer in an even split */
} LtLayerSplit;

/* 0 when split cuts num_layers into pp x vpp chunks (every chunk but the
 * model's first and last holding at least one layer); otherwise -1 with the
 * reason in err, naming the parallel.* keys. */
int lt_layer_split_check(const LtLayerSplit *s, int num_layers, int pp, int vpp, char *err,
                         size_t errlen);

/* 1 when split is the plain even one (all fields zero). */
int lt_layer_split_even(const LtLayerSplit *s);

/* Layers of chunk c of pipeline rank r, and the global index of its first
 * layer (split checked). */
int lt_layer_split_count(const LtLayerSplit *s, int num_layers, int pp, int vpp, int r, int c);
int lt_layer_split_start(const LtLayerSplit *s, int num_layers, int pp, int vpp, int r, int c);

/* The layers of each stage's chunks, stage by stage: "6, 2", "0+1+1, 1+1+0"
 * (cut with " ..." where buf would overflow; len >= 64). */
const char *lt_layer_split_words(const LtLayerSplit *s, int num_layers, int pp, int vpp, char *buf,
                                 size_t len);

/* "even", or the split in the config's words (for logs and errors). */
const char *lt_layer_split_describe(const LtLayerSplit *s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
