/* topology.h - the rank topology of 3D parallelism (pure functions, no MPI).
 *
 * Megatron's order: tensor-parallel rank varies fastest, then data-parallel,
 * then pipeline stage:
 *     rank = tp + TP * (dp + DP * pp),   world = TP * DP * PP exactly.
 *
 * Groups of a rank (member lists are sorted global ranks):
 *   tp        ranks that differ only in tp        (size TP)
 *   dp        ranks that differ only in dp        (size DP)
 *   pp        ranks that differ only in pp        (size PP; the pipeline)
 *   embedding first and last stage of the rank's pipeline group (tied
 *             embedding/LM-head gradients); a single rank when PP == 1.
 *             Ranks of middle stages are not members of any embedding group.
 *   etp, ep, edp  the experts' regrouping of a stage's TP x DP ranks
 *             (Megatron-Core's MoE parallel folding): the stage-local index
 *             i = tp + TP * dp is read as etp + ETP * (ep + EP * edp), ETP
 *             fastest.
 *   etp       expert tensor parallelism: consecutive blocks of ETP stage-local
 *             indices (size ETP; 1 = none, the default). Its ranks hold the
 *             same experts, each a slice of their FFN width.
 *   ep        expert parallelism: the ranks of the stage that differ only in
 *             the ep coordinate, stage-local indices ETP apart (size EP; 1 =
 *             none, the default). With ETP 1, consecutive blocks of EP.
 *   edp       expert data parallelism: the ranks of the stage that hold the
 *             same expert shards, stage-local indices ETP x EP apart (size
 *             TP*DP/(ETP*EP)). Expert gradients are reduced and their
 *             optimizer state sharded over it. With EP = ETP = 1 it is the
 *             whole stage (TP x DP ranks).
 *
 * Example (Megatron's 16 GPUs, TP=2, PP=4, DP=2): tp groups [0,1],[2,3],...;
 * dp groups [0,2],[1,3],[4,6],[5,7],...; pp groups [0,4,8,12],[1,5,9,13],...;
 * embedding groups [0,12],[1,13],.... */
#ifndef LT_TOPOLOGY_H
#define LT_TOPOLOGY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int tp, dp, pp; /* group sizes */
    int world;      /* tp * dp * pp */
    int ep;         /* expert-parallel group size (lt_topology_set_ep; 1 after init) */
    int etp;        /* expert-tensor-parallel group size (lt_topology_set_experts; 1 after
                     * init) */
} LtTopology;

typedef struct {
    int tp, dp, pp; /* coordinates of one rank */
} LtCoords;

typedef enum {
    LT_GROUP_TP = 0,
    LT_GROUP_DP,
    LT_GROUP_PP,
    LT_GROUP_EMBEDDING,
    LT_GROUP_EP,
    LT_GROUP_EDP,
    LT_GROUP_ETP,
    LT_GROUP_COUNT
} LtGroupKind;

/* Everything a rank needs to know about its place (see lt_topology_place). */
typedef struct {
    int rank;
    LtCoords c;
    int first_stage, last_stage; /* 1 when pp == 0 / pp == PP-1 */
    int in_embedding;            /* 1 when first or last stage */
} LtPlace;

/* Set up for world ranks with sizes tp, pp, dp (each >= 1). dp <= 0 derives
 * dp = world / (tp * pp). Returns 0, or -1 with a message in err when a size
 * is not positive or world != tp * pp * dp. */
int lt_topology_init(LtTopology *t, int world, int tp, int pp, int dp, char *err,
                     size_t errlen);

/* The expert-parallel size: ep >= 1 dividing tp * dp (EP is folded into a
 * stage's TP x DP ranks). Returns 0, or -1 with a message in err. */
int lt_topology_set_ep(LtTopology *t, int ep, char *err, size_t errlen);
/* The expert-parallel and expert-tensor-parallel sizes: ep, etp >= 1 with
 * ep x etp dividing tp * dp. Returns 0, or -1 with a message in err.
 * lt_topology_set_ep(t, ep) is lt_topology_set_experts(t, ep, 1). */
int lt_topology_set_experts(LtTopology *t, int ep, int etp, char *err, size_t errlen);

/* rank -> coords; -1 when rank is outside [0, world). */
int lt_topology_coords(const LtTopology *t, int rank, LtCoords *c);
/* coords -> rank; -1 when a coordinate is out of range. */
int lt_topology_rank(const LtTopology *t, LtCoords c);
/* Coordinates and pipeline flags of rank; -1 when rank is out of range. */
int lt_topology_place(const LtTopology *t, int rank, LtPlace *p);

/* Size of every group of that kind (embedding: 1 when PP == 1, else 2). */
int lt_topology_group_size(const LtTopology *t, LtGroupKind kind);

/* The members of rank's group of that kind, sorted, written to members[]
 * (room for lt_topology_group_size entries). For the embedding group of a
 * middle-stage rank this is its pipeline's [first, last] pair, which does not
 * contain rank (check lt_topology_in_group). Returns the member count, or -1
 * when rank or kind is out of range. */
int lt_topology_group(const LtTopology *t, int rank, LtGroupKind kind, int *members);
/* 1 when rank belongs to its group of that kind (always, except embedding for
 * middle stages). */
int lt_topology_in_group(const LtTopology *t, int rank, LtGroupKind kind);

/* "tp", "dp", "pp", "embedding", "ep", "edp", "etp". */
const char *lt_group_kind_name(LtGroupKind kind);

#ifdef __cplusplus
}
#endif

#endif
