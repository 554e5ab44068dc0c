/* topology.c - see topology.h. */
#include "topology.h"

#include "common.h"

int lt_topology_init(LtTopology *t, int world, int tp, int pp, int dp, char *err,
                     size_t errlen) {
    if (world < 1) return lt_errorf(err, errlen, "world size %d must be >= 1", world);
    if (tp < 1) return lt_errorf(err, errlen, "tensor-parallel size %d must be >= 1", tp);
    if (pp < 1) return lt_errorf(err, errlen, "pipeline-parallel size %d must be >= 1", pp);
    if (dp <= 0) {
        if (world % ((long long)tp * pp) != 0)
            return lt_errorf(err, errlen,
                             "world size %d is not divisible by tensor-parallel size %d "
                             "x pipeline-parallel size %d",
                             world, tp, pp);
        dp = (int)(world / ((long long)tp * pp));
    }
    if ((long long)tp * pp * dp != world)
        return lt_errorf(err, errlen,
                         "world size %d != tensor-parallel %d x pipeline-parallel %d x "
                         "data-parallel %d",
                         world, tp, pp, dp);
    t->tp = tp;
    t->dp = dp;
    t->pp = pp;
    t->world = world;
    t->ep = 1;
    t->etp = 1;
    return 0;
}

int lt_topology_set_ep(LtTopology *t, int ep, char *err, size_t errlen) {
    return lt_topology_set_experts(t, ep, 1, err, errlen);
}

int lt_topology_set_experts(LtTopology *t, int ep, int etp, char *err, size_t errlen) {
    if (etp < 1 || (t->tp * t->dp) % etp != 0)
        return lt_errorf(err, errlen,
                         "expert-tensor-parallel size %d must be >= 1 and divide tensor-parallel "
                         "%d x data-parallel %d (experts are spread over a stage's TP x DP ranks)",
                         etp, t->tp, t->dp);
    if (ep < 1 || (t->tp * t->dp / etp) % ep != 0)
        return lt_errorf(err, errlen,
                         "expert-parallel size %d must be >= 1 and divide tensor-parallel %d x "
                         "data-parallel %d / expert-tensor-parallel %d (experts are spread over "
                         "a stage's TP x DP ranks)",
                         ep, t->tp, t->dp, etp);
    t->ep = ep;
    t->etp = etp;
    return 0;
}

int lt_topology_coords(const LtTopology *t, int rank, LtCoords *c) {
    if (rank < 0 || rank >= t->world) return -1;
    c->tp = rank % t->tp;
    c->dp = (rank / t->tp) % t->dp;
    c->pp = rank / (t->tp * t->dp);
    return 0;
}

int lt_topology_rank(const LtTopology *t, LtCoords c) {
    if (c.tp < 0 || c.tp >= t->tp || c.dp < 0 || c.dp >= t->dp || c.pp < 0 || c.pp >= t->pp)
        return -1;
    return c.tp + t->tp * (c.dp + t->dp * c.pp);
}

int lt_topology_place(const LtTopology *t, int rank, LtPlace *p) {
    if (lt_topology_coords(t, rank, &p->c) != 0) return -1;
    p->rank = rank;
    p->first_stage = p->c.pp == 0;
    p->last_stage = p->c.pp == t->pp - 1;
    p->in_embedding = p->first_stage || p->last_stage;
    return 0;
}

int lt_topology_group_size(const LtTopology *t, LtGroupKind kind) {
    switch (kind) {
    case LT_GROUP_TP: return t->tp;
    case LT_GROUP_DP: return t->dp;
    case LT_GROUP_PP: return t->pp;
    case LT_GROUP_EMBEDDING: return t->pp == 1 ? 1 : 2;
    case LT_GROUP_EP: return t->ep;
    case LT_GROUP_EDP: return t->tp * t->dp / (t->ep * t->etp);
    case LT_GROUP_ETP: return t->etp;
    default: return -1;
    }
}

int lt_topology_group(const LtTopology *t, int rank, LtGroupKind kind, int *members) {
    LtCoords c;
    if (lt_topology_coords(t, rank, &c) != 0) return -1;
    int n = 0;
    LtCoords m = c;
    switch (kind) {
    case LT_GROUP_TP:
        for (m.tp = 0; m.tp < t->tp; m.tp++) members[n++] = lt_topology_rank(t, m);
        break;
    case LT_GROUP_DP:
        for (m.dp = 0; m.dp < t->dp; m.dp++) members[n++] = lt_topology_rank(t, m);
        break;
    case LT_GROUP_PP:
        for (m.pp = 0; m.pp < t->pp; m.pp++) members[n++] = lt_topology_rank(t, m);
        break;
    case LT_GROUP_EMBEDDING:
        m.pp = 0;
        members[n++] = lt_topology_rank(t, m);
        if (t->pp > 1) {
            m.pp = t->pp - 1;
            members[n++] = lt_topology_rank(t, m);
        }
        break;
    case LT_GROUP_ETP:
    case LT_GROUP_EP:
    case LT_GROUP_EDP: { /* one coordinate of etp + ETP * (ep + EP * edp) walked */
        const int stage = t->tp * t->dp, i = rank % stage, base = rank - i;
        const int stride = kind == LT_GROUP_ETP ? 1 : kind == LT_GROUP_EP ? t->etp : t->etp * t->ep;
        const int size = lt_topology_group_size(t, kind);
        /* i less its coordinate of this kind times stride: the group's first */
        const int first = base + i - i / stride % size * stride;
        for (int k = 0; k < size; k++) members[n++] = first + k * stride;
        break;
    }
    default: return -1;
    }
    /* Each loop walks one coordinate upward, and rank is increasing in every
     * coordinate, so the lists come out sorted. */
    return n;
}

int lt_topology_in_group(const LtTopology *t, int rank, LtGroupKind kind) {
    LtPlace p;
    if (lt_topology_place(t, rank, &p) != 0) return 0;
    if (kind == LT_GROUP_EMBEDDING) return p.in_embedding;
    return kind >= LT_GROUP_TP && kind < LT_GROUP_COUNT;
}

const char *lt_group_kind_name(LtGroupKind kind) {
    switch (kind) {
    case LT_GROUP_TP: return "tp";
    case LT_GROUP_DP: return "dp";
    case LT_GROUP_PP: return "pp";
    case LT_GROUP_EMBEDDING: return "embedding";
    case LT_GROUP_EP: return "ep";
    case LT_GROUP_EDP: return "edp";
    case LT_GROUP_ETP: return "etp";
    default: return "?";
    }
}
