/* test_topology.c - rank <-> (tp, dp, pp) mapping and the derived groups. */
#include "topology.h"

#include <string.h>

#include "test.h"

#define MAXW 256

static int list_eq(const int *a, int na, const int *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void format_list(char *buf, size_t len, const int *a, int n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "", a[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

static void test_init_errors(void) {
    LtTopology t;
    char err[256];
    CHECK(lt_topology_init(&t, 16, 2, 4, 0, err, sizeof err) == 0, "%s", err);
    CHECK(t.dp == 2 && t.world == 16, "dp %d world %d", t.dp, t.world);
    CHECK(lt_topology_init(&t, 16, 2, 4, 2, err, sizeof err) == 0, "%s", err);
    err[0] = 0;
    CHECK(lt_topology_init(&t, 16, 2, 4, 3, err, sizeof err) == -1, "24 != 16 accepted");
    CHECK(strstr(err, "world size 16") != NULL, "message: %s", err);
    err[0] = 0;
    CHECK(lt_topology_init(&t, 12, 8, 1, 0, err, sizeof err) == -1, "12 / 8 accepted");
    CHECK(strstr(err, "not divisible") != NULL, "message: %s", err);
    CHECK(lt_topology_init(&t, 8, 2, 2, 1, err, sizeof err) == -1, "4 != 8 accepted");
    CHECK(lt_topology_init(&t, 8, 0, 2, 0, err, sizeof err) == -1, "tp 0 accepted");
    CHECK(lt_topology_init(&t, 8, 2, -1, 0, err, sizeof err) == -1, "pp -1 accepted");
    CHECK(lt_topology_init(&t, 0, 1, 1, 0, err, sizeof err) == -1, "world 0 accepted");
    CHECK(lt_topology_init(&t, 1, 1, 1, 1, NULL, 0) == 0, "1x1x1 rejected");
    CHECK(lt_topology_init(&t, 1, 2, 1, 1, NULL, 0) == -1, "NULL err buffer");
}

/* Golden coordinates: Megatron's worked example and a couple of others. */
static void test_coords_golden(void) {
    static const struct {
        int world, tp, pp, rank, ctp, cdp, cpp;
    } cases[] = {
        {16, 2, 4, 0, 0, 0, 0},  {16, 2, 4, 1, 1, 0, 0},  {16, 2, 4, 2, 0, 1, 0},
        {16, 2, 4, 3, 1, 1, 0},  {16, 2, 4, 4, 0, 0, 1},  {16, 2, 4, 7, 1, 1, 1},
        {16, 2, 4, 12, 0, 0, 3}, {16, 2, 4, 13, 1, 0, 3}, {16, 2, 4, 15, 1, 1, 3},
        {8, 8, 1, 5, 5, 0, 0},   {8, 1, 8, 5, 0, 0, 5},   {8, 1, 1, 5, 0, 5, 0},
        {24, 2, 3, 11, 1, 1, 1}, /* DP=4: 11 = 1 + 2*(1 + 4*1) */
        {24, 3, 2, 20, 2, 2, 1}, /* DP=4: 20 = 2 + 3*(2 + 4*1) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        LtTopology t;
        REQUIRE(lt_topology_init(&t, cases[i].world, cases[i].tp, cases[i].pp, 0, NULL, 0) == 0,
                "case %zu", i);
        LtCoords c;
        REQUIRE(lt_topology_coords(&t, cases[i].rank, &c) == 0, "case %zu", i);
        CHECK(c.tp == cases[i].ctp && c.dp == cases[i].cdp && c.pp == cases[i].cpp,
              "case %zu: rank %d -> (%d,%d,%d)", i, cases[i].rank, c.tp, c.dp, c.pp);
        CHECK(lt_topology_rank(&t, c) == cases[i].rank, "case %zu: back", i);
    }
    LtTopology t;
    lt_topology_init(&t, 16, 2, 4, 0, NULL, 0);
    LtCoords c;
    CHECK(lt_topology_coords(&t, 16, &c) == -1, "rank 16 of 16 accepted");
    CHECK(lt_topology_coords(&t, -1, &c) == -1, "rank -1 accepted");
    CHECK(lt_topology_rank(&t, (LtCoords){2, 0, 0}) == -1, "tp 2 of 2 accepted");
    CHECK(lt_topology_rank(&t, (LtCoords){0, 0, 4}) == -1, "pp 4 of 4 accepted");
    CHECK(lt_topology_rank(&t, (LtCoords){0, -1, 0}) == -1, "dp -1 accepted");
}

/* Megatron's 16 GPUs, TP=2, PP=4, DP=2: every group of every kind. */
static void test_megatron_example_groups(void) {
    LtTopology t;
    REQUIRE(lt_topology_init(&t, 16, 2, 4, 0, NULL, 0) == 0, "init");
    static const int tpg[8][2] = {{0, 1},  {2, 3},   {4, 5},   {6, 7},
                                  {8, 9},  {10, 11}, {12, 13}, {14, 15}};
    static const int dpg[8][2] = {{0, 2},  {1, 3},   {4, 6},   {5, 7},
                                  {8, 10}, {9, 11},  {12, 14}, {13, 15}};
    static const int ppg[4][4] = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
    static const int emb[4][2] = {{0, 12}, {1, 13}, {2, 14}, {3, 15}};
    int m[MAXW];
    char got[128];
    for (int r = 0; r < 16; r++) {
        const int *want;
        int n = lt_topology_group(&t, r, LT_GROUP_TP, m);
        want = tpg[r / 2];
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, want, 2), "rank %d tp group %s", r, got);
        n = lt_topology_group(&t, r, LT_GROUP_DP, m);
        want = dpg[(r / 4) * 2 + r % 2];
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, want, 2), "rank %d dp group %s", r, got);
        n = lt_topology_group(&t, r, LT_GROUP_PP, m);
        want = ppg[r % 4];
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, want, 4), "rank %d pp group %s", r, got);
        n = lt_topology_group(&t, r, LT_GROUP_EMBEDDING, m);
        want = emb[r % 4];
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, want, 2), "rank %d embedding group %s", r, got);
        LtPlace p;
        REQUIRE(lt_topology_place(&t, r, &p) == 0, "place %d", r);
        CHECK(p.first_stage == (r < 4), "rank %d first_stage %d", r, p.first_stage);
        CHECK(p.last_stage == (r >= 12), "rank %d last_stage %d", r, p.last_stage);
        CHECK(p.in_embedding == (r < 4 || r >= 12), "rank %d in_embedding", r);
        CHECK(lt_topology_in_group(&t, r, LT_GROUP_EMBEDDING) == p.in_embedding, "rank %d", r);
        CHECK(lt_topology_in_group(&t, r, LT_GROUP_TP), "rank %d not in its tp group", r);
    }
    CHECK(lt_topology_group_size(&t, LT_GROUP_TP) == 2, "tp size");
    CHECK(lt_topology_group_size(&t, LT_GROUP_DP) == 2, "dp size");
    CHECK(lt_topology_group_size(&t, LT_GROUP_PP) == 4, "pp size");
    CHECK(lt_topology_group_size(&t, LT_GROUP_EMBEDDING) == 2, "embedding size");
    CHECK(lt_topology_group(&t, 16, LT_GROUP_TP, m) == -1, "rank 16 group");
    CHECK(lt_topology_group(&t, 0, LT_GROUP_COUNT, m) == -1, "bad kind");
}

/* PP == 1: embedding group is the rank itself, every rank first and last. */
/* Expert parallelism folded into TP x DP: TP 2, DP 4, PP 2, EP 4 (16 ranks,
 * 8 per stage) -> [0..3], [4..7], [8..11], [12..15]; EP must divide TP x DP. */
static void test_ep_groups(void) {
    LtTopology t;
    char err[200];
    REQUIRE(lt_topology_init(&t, 16, 2, 2, 4, NULL, 0) == 0, "init");
    CHECK(lt_topology_group_size(&t, LT_GROUP_EP) == 1, "ep defaults to 1");
    CHECK(lt_topology_set_ep(&t, 3, err, sizeof err) == -1 && strstr(err, "divide"),
          "ep 3 of tp x dp 8 refused: %s", err);
    CHECK(lt_topology_set_ep(&t, 16, err, sizeof err) == -1, "ep 16 > tp x dp refused");
    REQUIRE(lt_topology_set_ep(&t, 4, err, sizeof err) == 0, "ep 4: %s", err);
    int m[4];
    for (int r = 0; r < 16; r++) {
        const int n = lt_topology_group(&t, r, LT_GROUP_EP, m);
        CHECK(n == 4 && m[0] == r / 4 * 4 && m[3] == r / 4 * 4 + 3, "rank %d: ep group n=%d "
              "from %d", r, n, m[0]);
    }
    CHECK(strcmp(lt_group_kind_name(LT_GROUP_EP), "ep") == 0, "name");
}

/* The expert-data-parallel groups of the same layout (TP 2, DP 4, PP 2, EP 4):
 * the ranks at one position of the stage's EP groups, [0,4], [1,5], [2,6],
 * [3,7] in stage 0 and [8,12], ..., [11,15] in stage 1. EP 2 over TP 2 x DP 2
 * gives [0,2], [1,3] (each rank's DP group: EP folds over TP there); EP 1
 * gives the whole stage. */
static void test_edp_groups(void) {
    LtTopology t;
    REQUIRE(lt_topology_init(&t, 16, 2, 2, 4, NULL, 0) == 0, "init");
    REQUIRE(lt_topology_set_ep(&t, 4, NULL, 0) == 0, "ep 4");
    CHECK(lt_topology_group_size(&t, LT_GROUP_EDP) == 2, "edp size %d",
          lt_topology_group_size(&t, LT_GROUP_EDP));
    static const int want16[16][2] = {{0, 4},  {1, 5},  {2, 6},   {3, 7},   {0, 4},  {1, 5},
                                      {2, 6},  {3, 7},  {8, 12},  {9, 13},  {10, 14}, {11, 15},
                                      {8, 12}, {9, 13}, {10, 14}, {11, 15}};
    int m[16];
    char got[128];
    for (int r = 0; r < 16; r++) {
        const int n = lt_topology_group(&t, r, LT_GROUP_EDP, m);
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, want16[r], 2), "rank %d edp group %s", r, got);
    }
    REQUIRE(lt_topology_init(&t, 4, 2, 1, 2, NULL, 0) == 0, "init 2x2");
    REQUIRE(lt_topology_set_ep(&t, 2, NULL, 0) == 0, "ep 2");
    static const int want4[4][2] = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    for (int r = 0; r < 4; r++) {
        const int n = lt_topology_group(&t, r, LT_GROUP_EDP, m);
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, want4[r], 2), "ep 2 over tp 2 x dp 2: rank %d edp group %s", r, got);
    }
    REQUIRE(lt_topology_set_ep(&t, 1, NULL, 0) == 0, "ep 1");
    const int n = lt_topology_group(&t, 3, LT_GROUP_EDP, m);
    CHECK(n == 4 && m[0] == 0 && m[3] == 3, "ep 1: edp is the stage, n=%d", n);
    CHECK(strcmp(lt_group_kind_name(LT_GROUP_EDP), "edp") == 0, "name");
}

/* Megatron-Core's folding with expert tensor parallelism: TP 2, DP 4, PP 2,
 * ETP 2, EP 2 reads stage-local index i as etp + 2 (ep + 2 edp): ETP groups
 * [0,1], [2,3], ...; EP groups [0,2], [1,3], [4,6], [5,7]; EDP groups [0,4],
 * [1,5], [2,6], [3,7]; stage 1 the same plus 8. Refused: ETP 3 (does not
 * divide 8), ETP 2 x EP 8 (16 > 8). */
static void test_etp_groups(void) {
    LtTopology t;
    char err[256];
    REQUIRE(lt_topology_init(&t, 16, 2, 2, 4, NULL, 0) == 0, "init");
    CHECK(lt_topology_group_size(&t, LT_GROUP_ETP) == 1, "etp defaults to 1");
    CHECK(lt_topology_set_experts(&t, 1, 3, err, sizeof err) == -1 &&
              strstr(err, "expert-tensor-parallel size 3"),
          "etp 3 refused: %s", err);
    CHECK(lt_topology_set_experts(&t, 8, 2, err, sizeof err) == -1 &&
              strstr(err, "expert-parallel size 8"),
          "etp 2 x ep 8 refused: %s", err);
    REQUIRE(lt_topology_set_experts(&t, 2, 2, err, sizeof err) == 0, "etp 2 ep 2: %s", err);
    CHECK(lt_topology_group_size(&t, LT_GROUP_ETP) == 2 &&
              lt_topology_group_size(&t, LT_GROUP_EP) == 2 &&
              lt_topology_group_size(&t, LT_GROUP_EDP) == 2,
          "sizes");
    int m[16];
    char got[128];
    for (int r = 0; r < 16; r++) {
        const int base = r / 8 * 8, i = r % 8;
        const int etp[2] = {base + i / 2 * 2, base + i / 2 * 2 + 1},
                  ep[2] = {base + i / 4 * 4 + i % 2, base + i / 4 * 4 + i % 2 + 2},
                  edp[2] = {base + i % 4, base + i % 4 + 4};
        int n = lt_topology_group(&t, r, LT_GROUP_ETP, m);
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, etp, 2), "rank %d etp group %s", r, got);
        n = lt_topology_group(&t, r, LT_GROUP_EP, m);
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, ep, 2), "rank %d ep group %s", r, got);
        n = lt_topology_group(&t, r, LT_GROUP_EDP, m);
        format_list(got, sizeof got, m, n);
        CHECK(list_eq(m, n, edp, 2), "rank %d edp group %s", r, got);
    }
    CHECK(strcmp(lt_group_kind_name(LT_GROUP_ETP), "etp") == 0, "name");
}

static void test_single_stage(void) {
    LtTopology t;
    REQUIRE(lt_topology_init(&t, 4, 2, 1, 0, NULL, 0) == 0, "init");
    int m[4];
    for (int r = 0; r < 4; r++) {
        int n = lt_topology_group(&t, r, LT_GROUP_EMBEDDING, m);
        CHECK(n == 1 && m[0] == r, "rank %d embedding n=%d m0=%d", r, n, m[0]);
        n = lt_topology_group(&t, r, LT_GROUP_PP, m);
        CHECK(n == 1 && m[0] == r, "rank %d pp n=%d", r, n);
        LtPlace p;
        lt_topology_place(&t, r, &p);
        CHECK(p.first_stage && p.last_stage && p.in_embedding, "rank %d flags", r);
    }
    CHECK(lt_topology_group_size(&t, LT_GROUP_EMBEDDING) == 1, "embedding size");
    CHECK(strcmp(lt_group_kind_name(LT_GROUP_EMBEDDING), "embedding") == 0, "name");
    CHECK(strcmp(lt_group_kind_name(LT_GROUP_DP), "dp") == 0, "name");
}

/* Property over many (TP, PP, DP): bijection, groups partition the world (the
 * embedding groups partition the first and last stages), sizes, sortedness,
 * and each member differs from the rank only in the group's coordinate. */
static void check_tuple(int tp, int pp, int dp, int etp) {
    LtTopology t;
    int world = tp * pp * dp;
    REQUIRE(lt_topology_init(&t, world, tp, pp, dp, NULL, 0) == 0, "%d %d %d", tp, pp, dp);
    const int rest = tp * dp / etp; /* EP divides it */
    const int ep = rest % 4 == 0 ? 4 : rest % 2 == 0 ? 2 : 1;
    REQUIRE(lt_topology_set_experts(&t, ep, etp, NULL, 0) == 0, "ep %d etp %d", ep, etp);
    static int seen[MAXW];
    memset(seen, 0, sizeof seen);
    for (int r = 0; r < world; r++) {
        LtCoords c;
        REQUIRE(lt_topology_coords(&t, r, &c) == 0, "coords %d", r);
        int back = lt_topology_rank(&t, c);
        REQUIRE(back == r, "tp%d pp%d dp%d: %d -> %d", tp, pp, dp, r, back);
        int key = c.tp + tp * (c.dp + dp * c.pp);
        REQUIRE(key >= 0 && key < world && !seen[key], "coords of %d not unique", r);
        seen[key] = 1;
    }
    for (int k = 0; k < LT_GROUP_COUNT; k++) {
        int owner[MAXW]; /* first member of the group each rank was found in */
        for (int r = 0; r < world; r++) owner[r] = -1;
        int want_size = lt_topology_group_size(&t, (LtGroupKind)k);
        int covered = 0;
        for (int r = 0; r < world; r++) {
            int m[MAXW];
            int n = lt_topology_group(&t, r, (LtGroupKind)k, m);
            REQUIRE(n == want_size, "%s group of %d has %d members, want %d",
                    lt_group_kind_name((LtGroupKind)k), r, n, want_size);
            int self = 0;
            LtCoords c, cm;
            lt_topology_coords(&t, r, &c);
            for (int i = 0; i < n; i++) {
                REQUIRE(m[i] >= 0 && m[i] < world, "member %d out of range", m[i]);
                if (i) REQUIRE(m[i] > m[i - 1], "%s group of %d not sorted",
                               lt_group_kind_name((LtGroupKind)k), r);
                self |= m[i] == r;
                lt_topology_coords(&t, m[i], &cm);
                int same_tp = cm.tp == c.tp, same_dp = cm.dp == c.dp, same_pp = cm.pp == c.pp;
                if (k == LT_GROUP_TP) REQUIRE(same_dp && same_pp, "tp member differs");
                if (k == LT_GROUP_DP) REQUIRE(same_tp && same_pp, "dp member differs");
                if (k == LT_GROUP_PP || k == LT_GROUP_EMBEDDING)
                    REQUIRE(same_tp && same_dp, "pp member differs");
                if (k == LT_GROUP_EMBEDDING)
                    REQUIRE(cm.pp == 0 || cm.pp == pp - 1, "embedding member mid stage");
                if (k == LT_GROUP_ETP)
                    REQUIRE(same_pp && m[n - 1] - m[0] == n - 1, "etp members not one block");
                if (k == LT_GROUP_EP) /* one per ETP block, at the rank's position in it */
                    REQUIRE(same_pp && (m[i] - r) % etp == 0 &&
                                (i == 0 || m[i] - m[i - 1] == etp),
                            "ep member %d of rank %d (etp %d)", m[i], r, etp);
                if (k == LT_GROUP_EDP) /* one per ETP x EP block, at the rank's position in it */
                    REQUIRE(same_pp && (m[i] - r) % (ep * etp) == 0 &&
                                (i == 0 || m[i] - m[i - 1] == ep * etp),
                            "edp member %d of rank %d (ep %d, etp %d)", m[i], r, ep, etp);
            }
            int member = lt_topology_in_group(&t, r, (LtGroupKind)k);
            REQUIRE(self == member, "%s: rank %d self %d member %d",
                    lt_group_kind_name((LtGroupKind)k), r, self, member);
            if (!member) continue;
            covered++;
            /* Every member must report the same group (partition). */
            for (int i = 0; i < n; i++) {
                if (owner[m[i]] == -1) owner[m[i]] = m[0];
                REQUIRE(owner[m[i]] == m[0], "%s groups overlap at %d",
                        lt_group_kind_name((LtGroupKind)k), m[i]);
            }
        }
        if (k == LT_GROUP_EDP) /* the stage is the grid ETP x EP x EDP: any two of its
                                * groups through the rank meet only in it */
            for (int r = 0; r < world; r++) {
                int g[3][MAXW], ng[3];
                const LtGroupKind kinds[3] = {LT_GROUP_ETP, LT_GROUP_EP, LT_GROUP_EDP};
                for (int a = 0; a < 3; a++) ng[a] = lt_topology_group(&t, r, kinds[a], g[a]);
                for (int a = 0; a < 3; a++)
                    for (int b = a + 1; b < 3; b++) {
                        int common = 0;
                        for (int i = 0; i < ng[a]; i++)
                            for (int j = 0; j < ng[b]; j++) common += g[a][i] == g[b][j];
                        REQUIRE(common == 1, "rank %d: %s x %s meet in %d ranks", r,
                                lt_group_kind_name(kinds[a]), lt_group_kind_name(kinds[b]),
                                common);
                    }
                REQUIRE(ng[0] * ng[1] * ng[2] == tp * dp, "rank %d: etp x ep x edp", r);
            }
        int want_covered = k == LT_GROUP_EMBEDDING ? (pp == 1 ? 1 : 2) * tp * dp : world;
        CHECK(covered == want_covered, "%s covers %d ranks, want %d",
              lt_group_kind_name((LtGroupKind)k), covered, want_covered);
    }
}

static void test_roundtrip_property(void) {
    int tuples = 0;
    for (int tp = 1; tp <= 8; tp++)
        for (int pp = 1; pp <= 8; pp++)
            for (int dp = 1; dp <= 8; dp++) {
                if (tp * pp * dp > MAXW) continue;
                for (int etp = 1; etp <= 2; etp++) {
                    if (tp * dp % etp) continue;
                    int before = test_cur_failed;
                    check_tuple(tp, pp, dp, etp);
                    tuples++;
                    if (test_cur_failed && !before) {
                        printf("  (tuple tp=%d pp=%d dp=%d etp=%d)\n", tp, pp, dp, etp);
                        return;
                    }
                }
            }
    CHECK(tuples > 700, "only %d tuples", tuples);
}

int main(void) {
    RUN(test_init_errors);
    RUN(test_coords_golden);
    RUN(test_megatron_example_groups);
    RUN(test_ep_groups);
    RUN(test_edp_groups);
    RUN(test_etp_groups);
    RUN(test_single_stage);
    RUN(test_roundtrip_property);
    return test_summary();
}
