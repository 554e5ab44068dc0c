/* test_comm_mpi.c - the MPI communication layer under 4 ranks.
 *
 * Started without a launcher (as tests/run.sh does), it first checks the
 * one-rank world of a plain process, then re-executes itself as
 * `timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 <self>`, which
 * relays the output and the exit code. Under mpirun every rank runs every test;
 * the failure flag is reduced over the world and rank 0 prints PASS/FAIL.
 * Every result is compared with values computed locally from the known
 * rank-dependent inputs; the staged path (device buffers through host
 * memory, what GPU buffers take over MPI) runs on the CPU backend and is
 * compared byte for byte with the host path.
 *
 * Built a second time as test_comm_nccl_emu (-DLT_NCCL_EMU, Makefile), with
 * the CUDA backend's emulation as one GPU per rank and NCCL's calls carried out
 * over MPI (tests/emu/nccl_mpi.c, strict about buffers and in-place
 * placement): then NCCL groups (src/comm/comm_nccl.c) run the same cases and
 * are compared byte for byte with the host path. */
#include "comm.h"

#include <mpi.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "dist.h"
#include "test.h"
#include "topology.h"
#include "tp_overlap.h"

#define NP 4

static LtWorld W;

/* Input element i of (group or world) rank r: exact in fp32 sums. */
static double val(int r, int i) { return (double)((r + 1) * 3 + i % 11) + 0.25 * (i % 4); }
static double vmax(int r, int i) { return (double)((r * 7 + i * 3) % 5) - 0.5 * r; }

static void fill_f32(float *x, int n, int r) {
    for (int i = 0; i < n; i++) x[i] = (float)val(r, i);
}

/* ---- one-rank world without MPI (runs before re-launching) ---------------- */
static void test_world_without_launcher(void) {
    LtComm *w = lt_comm_world("world");
    CHECK(lt_comm_size(w) == 1 && lt_comm_rank(w) == 0, "size %d rank %d", lt_comm_size(w),
          lt_comm_rank(w));
    CHECK(strcmp(lt_comm_name(w), "world") == 0, "name %s", lt_comm_name(w));
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {0};
    LtCommRequest r = lt_comm_all_reduce_start(w, x, 5, LT_COMM_F32, LT_COMM_SUM);
    CHECK(!r.active, "one-rank all_reduce is active");
    lt_comm_finish(&r);
    CHECK(x[0] == 1 && x[4] == 5, "all_reduce changed data");
    lt_comm_reduce_scatter(w, x, y, 5, LT_COMM_F32);
    CHECK(y[2] == 3, "reduce_scatter copy %g", y[2]);
    memset(y, 0, sizeof y);
    lt_comm_all_gather(w, x, y, 5, LT_COMM_F32);
    CHECK(y[4] == 5, "all_gather copy %g", y[4]);
    lt_comm_broadcast(w, x, 5, LT_COMM_F32, 0);
    lt_comm_barrier(w);
    int m[1] = {0};
    LtComm *g = lt_comm_split_members(m, 1, "tp");
    CHECK(lt_comm_size(g) == 1 && lt_comm_global_rank(g, 0) == 0, "split one-rank");
    lt_comm_free(g);
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtCommOptions opt = {.lib = LT_COMM_LIB_MPI, .device = 1, .be = be};
    g = lt_comm_split_members_ex(m, 1, "dp", &opt);
    memset(y, 0, sizeof y);
    lt_comm_reduce_scatter(g, x, y, 5, LT_COMM_F32);
    CHECK(y[3] == 4 && lt_comm_size(lt_comm_host(g)) == 1, "one-rank device-buffer group");
    uint16_t b[2] = {0x3f80, 0x4000}; /* 1, 2 */
    lt_comm_all_reduce(g, b, 2, LT_COMM_BF16, LT_COMM_SUM);
    CHECK(b[0] == 0x3f80 && b[1] == 0x4000, "one-rank bf16 untouched");
    lt_comm_free(g);
    lt_backend_destroy(be);
    lt_comm_free(w);
}

/* ---- world collectives ---------------------------------------------------- */
static void test_all_reduce_world(void) {
    LtComm *w = lt_comm_world("world");
    CHECK(lt_comm_size(w) == NP && lt_comm_rank(w) == W.rank, "world shape");
    enum { N = 1000 };
    static float f[N], fm[N];
    static double d[N], dm[N];
    int me = W.rank;
    for (int i = 0; i < N; i++) {
        f[i] = (float)val(me, i);
        d[i] = val(me, i) * 1e-3 + 1e9;
        fm[i] = (float)vmax(me, i);
        dm[i] = vmax(me, i) * 1e10;
    }
    lt_comm_all_reduce(w, f, N, LT_COMM_F32, LT_COMM_SUM);
    lt_comm_all_reduce(w, d, N, LT_COMM_F64, LT_COMM_SUM);
    lt_comm_all_reduce(w, fm, N, LT_COMM_F32, LT_COMM_MAX);
    lt_comm_all_reduce(w, dm, N, LT_COMM_F64, LT_COMM_MAX);
    int bad = 0;
    for (int i = 0; i < N && bad < 5; i++) {
        double s = 0, sd = 0, mx = -1e300;
        for (int r = 0; r < NP; r++) {
            s += val(r, i);
            sd += val(r, i) * 1e-3 + 1e9;
            if (vmax(r, i) > mx) mx = vmax(r, i);
        }
        if (f[i] != (float)s) {
            bad++;
            CHECK(0, "f32 sum [%d] %g != %g", i, f[i], s);
        }
        if (test_relerr(d[i], sd, 1e-30) > 1e-15) {
            bad++;
            CHECK(0, "f64 sum [%d] %.17g", i, d[i]);
        }
        if (fm[i] != (float)mx) {
            bad++;
            CHECK(0, "f32 max [%d] %g != %g", i, fm[i], mx);
        }
        if (dm[i] != mx * 1e10) {
            bad++;
            CHECK(0, "f64 max [%d] %g", i, dm[i]);
        }
    }
    /* count 0 is allowed and does nothing */
    lt_comm_all_reduce(w, f, 0, LT_COMM_F32, LT_COMM_SUM);
    lt_comm_free(w);
}

static void test_reduce_scatter_world(void) {
    LtComm *w = lt_comm_world("world");
    enum { C = 37 };
    float send[NP * C], recv[C], inplace[NP * C];
    int me = W.rank;
    for (int k = 0; k < NP; k++)
        for (int j = 0; j < C; j++) send[k * C + j] = (float)val(me, k * 100 + j);
    memcpy(inplace, send, sizeof send);
    lt_comm_reduce_scatter(w, send, recv, C, LT_COMM_F32);
    lt_comm_reduce_scatter(w, inplace, inplace, C, LT_COMM_F32);
    for (int j = 0; j < C; j++) {
        double s = 0;
        for (int r = 0; r < NP; r++) s += val(r, me * 100 + j);
        CHECK(recv[j] == (float)s, "[%d] %g != %g", j, recv[j], s);
        CHECK(inplace[j] == (float)s, "in place [%d] %g != %g", j, inplace[j], s);
        if (test_cur_failed) break;
    }
    lt_comm_free(w);
}

static void test_all_gather_world(void) {
    LtComm *w = lt_comm_world("world");
    enum { C = 29 };
    double send[C], recv[NP * C], inplace[NP * C];
    int me = W.rank;
    for (int j = 0; j < C; j++) send[j] = val(me, j) + 1e-9 * me;
    for (int i = 0; i < NP * C; i++) recv[i] = inplace[i] = -1;
    memcpy(inplace + me * C, send, sizeof send);
    lt_comm_all_gather(w, send, recv, C, LT_COMM_F64);
    lt_comm_all_gather(w, inplace + me * C, inplace, C, LT_COMM_F64);
    for (int r = 0; r < NP && !test_cur_failed; r++)
        for (int j = 0; j < C && !test_cur_failed; j++) {
            double want = val(r, j) + 1e-9 * r;
            CHECK(recv[r * C + j] == want, "[%d,%d] %.17g", r, j, recv[r * C + j]);
            CHECK(inplace[r * C + j] == want, "in place [%d,%d]", r, j);
        }
    lt_comm_free(w);
}

static void test_broadcast_world(void) {
    LtComm *w = lt_comm_world("world");
    for (int root = 0; root < NP; root++) {
        float f[64];
        int iv[3];
        if (W.rank == root) {
            fill_f32(f, 64, root + 10);
            iv[0] = root, iv[1] = 7, iv[2] = -root;
        } else {
            memset(f, 0, sizeof f);
            memset(iv, 0, sizeof iv);
        }
        lt_comm_broadcast(w, f, 64, LT_COMM_F32, root);
        lt_comm_broadcast(w, iv, 3, LT_COMM_I32, root);
        for (int i = 0; i < 64; i++)
            CHECK(f[i] == (float)val(root + 10, i), "root %d [%d] %g", root, i, f[i]);
        CHECK(iv[0] == root && iv[1] == 7 && iv[2] == -root, "root %d ints", root);
    }
    lt_comm_free(w);
}

static void test_send_recv_ring(void) {
    LtComm *w = lt_comm_world("world");
    enum { N = 4096 }; /* large enough to leave the eager path of small messages */
    static float out[N], in[N];
    int me = W.rank, next = (me + 1) % NP, prev = (me + NP - 1) % NP;
    fill_f32(out, N, me);
    memset(in, 0, sizeof in);
    LtCommRequest rr = lt_comm_recv_start(w, in, N, LT_COMM_F32, prev, 5);
    LtCommRequest rs = lt_comm_send_start(w, out, N, LT_COMM_F32, next, 5);
    CHECK(rr.active && rs.active, "requests not active");
    lt_comm_finish(&rs);
    lt_comm_finish(&rr);
    CHECK(!rr.active && !rs.active, "requests still active after finish");
    for (int i = 0; i < N; i++)
        if (in[i] != (float)val(prev, i)) {
            CHECK(0, "[%d] %g from %d", i, in[i], prev);
            break;
        }
    /* Blocking forms, even ranks send first. */
    double x = me * 1.5, y = -1;
    if (me % 2 == 0) {
        lt_comm_send(w, &x, 1, LT_COMM_F64, next, 9);
        lt_comm_recv(w, &y, 1, LT_COMM_F64, prev, 9);
    } else {
        lt_comm_recv(w, &y, 1, LT_COMM_F64, prev, 9);
        lt_comm_send(w, &x, 1, LT_COMM_F64, next, 9);
    }
    CHECK(y == prev * 1.5, "blocking got %g from %d", y, prev);
    lt_comm_free(w);
}

/* A batch in which every rank sends to both neighbours and receives from
 * both (the interleaved pipeline's steady-state exchange): all started, then
 * finished after the batch ends. */
static void test_batch_exchange(void) {
    LtComm *w = lt_comm_world("world");
    enum { N = 4096 };
    static float to_next[N], to_prev[N], from_prev[N], from_next[N];
    int me = W.rank, next = (me + 1) % NP, prev = (me + NP - 1) % NP;
    fill_f32(to_next, N, me);
    fill_f32(to_prev, N, me + 100);
    memset(from_prev, 0, sizeof from_prev);
    memset(from_next, 0, sizeof from_next);
    LtCommRequest r[4];
    lt_comm_batch_begin(w);
    r[0] = lt_comm_send_start(w, to_next, N, LT_COMM_F32, next, 1);
    r[1] = lt_comm_send_start(w, to_prev, N, LT_COMM_F32, prev, 2);
    r[2] = lt_comm_recv_start(w, from_prev, N, LT_COMM_F32, prev, 1);
    r[3] = lt_comm_recv_start(w, from_next, N, LT_COMM_F32, next, 2);
    lt_comm_batch_end(w);
    for (int k = 0; k < 4; k++) lt_comm_finish(&r[k]);
    int bad = 0;
    for (int i = 0; i < N && !bad; i++)
        bad = from_prev[i] != (float)val(prev, i) || from_next[i] != (float)val(next + 100, i);
    CHECK(!bad, "batch exchange: wrong data from a neighbour");
    lt_comm_free(w);
}

/* ---- groups from the topology -------------------------------------------- */
static LtComm *make_group(const LtTopology *t, LtGroupKind k) {
    int m[NP];
    int n = lt_topology_group(t, W.rank, k, m);
    LtComm *c = lt_comm_split_members(m, n, lt_group_kind_name(k));
    int member = lt_topology_in_group(t, W.rank, k);
    CHECK(lt_comm_member(c) == member, "%s member %d", lt_group_kind_name(k), member);
    if (!member) return c;
    CHECK(lt_comm_size(c) == n, "%s size %d != %d", lt_group_kind_name(k), lt_comm_size(c), n);
    for (int i = 0; i < n; i++)
        CHECK(lt_comm_global_rank(c, i) == m[i], "%s rank %d -> %d, want %d",
              lt_group_kind_name(k), i, lt_comm_global_rank(c, i), m[i]);
    CHECK(lt_comm_global_rank(c, lt_comm_rank(c)) == W.rank, "%s own rank",
          lt_group_kind_name(k));
    CHECK(strcmp(lt_comm_name(c), lt_group_kind_name(k)) == 0, "name %s", lt_comm_name(c));
    return c;
}

/* TP=2, DP=2 (PP=1): tp groups [0,1],[2,3]; dp groups [0,2],[1,3]; pp and
 * embedding groups are one rank. */
static void test_tp_dp_groups(void) {
    LtTopology t;
    char err[128];
    CHECK(lt_topology_init(&t, W.world, 2, 1, 2, err, sizeof err) == 0, "%s", err);
    LtComm *g[LT_GROUP_COUNT];
    for (int k = 0; k < LT_GROUP_COUNT; k++) g[k] = make_group(&t, (LtGroupKind)k);
    int m[NP];
    for (int k = LT_GROUP_TP; k <= LT_GROUP_DP; k++) {
        int n = lt_topology_group(&t, W.rank, (LtGroupKind)k, m);
        const LtComm *c = g[k];
        int gr = lt_comm_rank(c);
        /* all_reduce sum and max of world-rank-dependent values */
        double x[3] = {W.rank, val(W.rank, 1), -W.rank}, s1 = 0, s2 = 0, mx = -1e9;
        for (int i = 0; i < n; i++) s1 += m[i], s2 += val(m[i], 1), mx = -m[i] > mx ? -m[i] : mx;
        lt_comm_all_reduce(c, x, 2, LT_COMM_F64, LT_COMM_SUM);
        lt_comm_all_reduce(c, x + 2, 1, LT_COMM_F64, LT_COMM_MAX);
        CHECK(x[0] == s1 && x[1] == s2 && x[2] == mx, "%s all_reduce %g %g %g",
              lt_comm_name(c), x[0], x[1], x[2]);
        /* reduce_scatter: chunk k of member m is val(m, 10k + j) */
        float send[2 * 5], recv[5];
        for (int q = 0; q < 2; q++)
            for (int j = 0; j < 5; j++) send[q * 5 + j] = (float)val(W.rank, 10 * q + j);
        lt_comm_reduce_scatter(c, send, recv, 5, LT_COMM_F32);
        for (int j = 0; j < 5; j++) {
            double want = 0;
            for (int i = 0; i < n; i++) want += val(m[i], 10 * gr + j);
            CHECK(recv[j] == (float)want, "%s reduce_scatter [%d] %g != %g", lt_comm_name(c),
                  j, recv[j], want);
        }
        /* all_gather: member i contributes val(m[i], j) */
        float mine[3], all[2 * 3];
        fill_f32(mine, 3, W.rank);
        lt_comm_all_gather(c, mine, all, 3, LT_COMM_F32);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < 3; j++)
                CHECK(all[i * 3 + j] == (float)val(m[i], j), "%s all_gather [%d,%d]",
                      lt_comm_name(c), i, j);
        /* broadcast from group rank 1 */
        int b = W.rank * 100;
        lt_comm_broadcast(c, &b, 1, LT_COMM_I32, 1);
        CHECK(b == m[1] * 100, "%s broadcast %d", lt_comm_name(c), b);
    }
    /* one-rank groups: nothing moves, nothing is active */
    for (int k = LT_GROUP_PP; k <= LT_GROUP_EMBEDDING; k++) {
        const LtComm *c = g[k];
        CHECK(lt_comm_size(c) == 1 && lt_comm_global_rank(c, 0) == W.rank, "%s one rank",
              lt_comm_name(c));
        float x[4] = {1, 2, 3, (float)W.rank}, y[4] = {0};
        LtCommRequest r1 = lt_comm_all_reduce_start(c, x, 4, LT_COMM_F32, LT_COMM_SUM);
        LtCommRequest r2 = lt_comm_broadcast_start(c, x, 4, LT_COMM_F32, 0);
        LtCommRequest r3 = lt_comm_send_start(c, x, 4, LT_COMM_F32, 0, 0);
        LtCommRequest r4 = lt_comm_recv_start(c, y, 4, LT_COMM_F32, 0, 0);
        CHECK(!r1.active && !r2.active && !r3.active && !r4.active, "%s: active request",
              lt_comm_name(c));
        lt_comm_finish(&r1), lt_comm_finish(&r2), lt_comm_finish(&r3), lt_comm_finish(&r4);
        CHECK(x[0] == 1 && x[3] == (float)W.rank && y[0] == 0, "%s: data changed",
              lt_comm_name(c));
        lt_comm_all_gather(c, x, y, 4, LT_COMM_F32);
        CHECK(y[3] == (float)W.rank, "%s: all_gather copy", lt_comm_name(c));
        lt_comm_barrier(c);
    }
    for (int k = 0; k < LT_GROUP_COUNT; k++) lt_comm_free(g[k]);
}

/* TP=1, PP=4: one pipeline [0,1,2,3]; embedding group [0,3] with ranks 1 and 2
 * not members. Activations flow stage to stage with send/recv. */
static void test_pipeline_groups(void) {
    LtTopology t;
    CHECK(lt_topology_init(&t, W.world, 1, 4, 0, NULL, 0) == 0, "init");
    LtComm *pp = make_group(&t, LT_GROUP_PP);
    LtComm *emb = make_group(&t, LT_GROUP_EMBEDDING);
    LtPlace p;
    lt_topology_place(&t, W.rank, &p);
    CHECK(lt_comm_rank(pp) == p.c.pp, "pp rank %d stage %d", lt_comm_rank(pp), p.c.pp);
    float act[8];
    if (p.first_stage) {
        fill_f32(act, 8, 0);
    } else {
        lt_comm_recv(pp, act, 8, LT_COMM_F32, p.c.pp - 1, 1);
        for (int i = 0; i < 8; i++) act[i] += 1.0f;
    }
    if (!p.last_stage) lt_comm_send(pp, act, 8, LT_COMM_F32, p.c.pp + 1, 1);
    for (int i = 0; i < 8; i++)
        CHECK(act[i] == (float)(val(0, i) + p.c.pp), "stage %d act[%d] %g", p.c.pp, i, act[i]);
    CHECK(lt_comm_member(emb) == p.in_embedding, "embedding membership");
    if (p.in_embedding) {
        double gsum = 10.0 * (W.rank + 1);
        lt_comm_all_reduce(emb, &gsum, 1, LT_COMM_F64, LT_COMM_SUM);
        CHECK(gsum == 10.0 * 1 + 10.0 * 4, "embedding grad sum %g", gsum);
        CHECK(lt_comm_size(emb) == 2, "embedding size %d", lt_comm_size(emb));
    } else {
        CHECK(lt_comm_size(emb) == 0 && lt_comm_rank(emb) == -1, "non-member shape");
    }
    lt_comm_free(emb);
    lt_comm_free(pp);
}

/* Two requests in flight at once: on two groups and on one group, finished in
 * the reverse order of starting. */
static void test_two_in_flight(void) {
    LtTopology t;
    CHECK(lt_topology_init(&t, W.world, 2, 1, 2, NULL, 0) == 0, "init");
    LtComm *tp = make_group(&t, LT_GROUP_TP), *dp = make_group(&t, LT_GROUP_DP);
    LtComm *w = lt_comm_world("world");
    int mt[2], md[2];
    lt_topology_group(&t, W.rank, LT_GROUP_TP, mt);
    lt_topology_group(&t, W.rank, LT_GROUP_DP, md);
    enum { N = 2048 };
    static float a[N], gathered[2 * N], b[N], c2[N];
    fill_f32(a, N, W.rank);
    fill_f32(b, N, W.rank + 1);
    fill_f32(c2, N, W.rank + 2);
    LtCommRequest ra = lt_comm_all_reduce_start(tp, a, N, LT_COMM_F32, LT_COMM_SUM);
    LtCommRequest rg = lt_comm_all_gather_start(dp, b, gathered, N, LT_COMM_F32);
    CHECK(ra.active && rg.active, "not active");
    lt_comm_finish(&rg);
    lt_comm_finish(&ra);
    for (int i = 0; i < N; i++) {
        if (a[i] != (float)(val(mt[0], i) + val(mt[1], i))) {
            CHECK(0, "tp all_reduce [%d] %g", i, a[i]);
            break;
        }
        if (gathered[i] != (float)val(md[0] + 1, i) ||
            gathered[N + i] != (float)val(md[1] + 1, i)) {
            CHECK(0, "dp all_gather [%d]", i);
            break;
        }
    }
    /* same group, two all_reduces (sum then max) in flight */
    fill_f32(b, N, W.rank + 1);
    LtCommRequest r1 = lt_comm_all_reduce_start(w, b, N, LT_COMM_F32, LT_COMM_SUM);
    LtCommRequest r2 = lt_comm_all_reduce_start(w, c2, N, LT_COMM_F32, LT_COMM_MAX);
    lt_comm_finish(&r2);
    lt_comm_finish(&r1);
    lt_comm_finish(&r1); /* finishing twice is harmless */
    for (int i = 0; i < N; i++) {
        double s = 0, mx = -1e300;
        for (int r = 0; r < NP; r++) {
            s += val(r + 1, i);
            mx = val(r + 2, i) > mx ? val(r + 2, i) : mx;
        }
        if (b[i] != (float)s || c2[i] != (float)mx) {
            CHECK(0, "world [%d] sum %g max %g", i, b[i], c2[i]);
            break;
        }
    }
    lt_comm_free(w);
    lt_comm_free(dp);
    lt_comm_free(tp);
}

static void test_split_color(void) {
    /* even and odd ranks, ordered by descending world rank */
    LtComm *c = lt_comm_split_color(W.rank % 2, -W.rank, "parity");
    CHECK(lt_comm_size(c) == 2, "size %d", lt_comm_size(c));
    int hi = W.rank % 2 + 2, lo = W.rank % 2;
    CHECK(lt_comm_global_rank(c, 0) == hi && lt_comm_global_rank(c, 1) == lo, "order %d %d",
          lt_comm_global_rank(c, 0), lt_comm_global_rank(c, 1));
    int x = W.rank;
    lt_comm_all_reduce(c, &x, 1, LT_COMM_I32, LT_COMM_SUM);
    CHECK(x == hi + lo, "parity sum %d", x);
    lt_comm_free(c);
    /* color < 0: rank 3 opts out */
    LtComm *d = lt_comm_split_color(W.rank == 3 ? -1 : 0, W.rank, "three");
    CHECK(lt_comm_member(d) == (W.rank != 3), "membership");
    if (W.rank != 3) {
        int y = 1;
        lt_comm_all_reduce(d, &y, 1, LT_COMM_I32, LT_COMM_SUM);
        CHECK(y == 3 && lt_comm_size(d) == 3, "sum %d", y);
    }
    lt_comm_free(d);
}

/* ---- bf16 over MPI (fp32 on the host, rounded to nearest even) ---------- */
static uint16_t bf(float f) { /* exact for the small integers used here */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}
static float fb(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_bf16_world(void) {
    LtComm *w = lt_comm_world("world");
    enum { C = 13 };
    int me = W.rank;
    uint16_t x[NP * C], mx[C], rs[C], inplace[NP * C], g[NP * C];
    for (int i = 0; i < NP * C; i++) x[i] = bf((float)((me + 1) * 3 + i % 11));
    for (int i = 0; i < C; i++) mx[i] = bf((float)((me * 7 + i * 3) % 5));
    memcpy(inplace, x, sizeof x);
    uint16_t sum[C];
    memcpy(sum, x, sizeof sum);
    lt_comm_all_reduce(w, sum, C, LT_COMM_BF16, LT_COMM_SUM);
    lt_comm_all_reduce(w, mx, C, LT_COMM_BF16, LT_COMM_MAX);
    lt_comm_reduce_scatter(w, x, rs, C, LT_COMM_BF16);
    lt_comm_reduce_scatter(w, inplace, inplace, C, LT_COMM_BF16);
    for (int i = 0; i < C; i++) {
        double s = 0, m = -1e9, q = 0;
        for (int r = 0; r < NP; r++) {
            s += (r + 1) * 3 + i % 11;
            double v = (r * 7 + i * 3) % 5;
            m = v > m ? v : m;
            q += (r + 1) * 3 + (me * C + i) % 11;
        }
        CHECK(fb(sum[i]) == (float)s, "sum[%d] %g != %g", i, fb(sum[i]), s);
        CHECK(fb(mx[i]) == (float)m, "max[%d] %g != %g", i, fb(mx[i]), m);
        CHECK(fb(rs[i]) == (float)q && fb(inplace[i]) == (float)q, "reduce_scatter[%d] %g %g != %g",
              i, fb(rs[i]), fb(inplace[i]), q);
        if (test_cur_failed) break;
    }
    /* rounding: 64+64+64+65 = 257 -> 256 (tie to even), 64+64+64+67 = 259 -> 260 */
    uint16_t t[2] = {bf(me == NP - 1 ? 65.f : 64.f), bf(me == NP - 1 ? 67.f : 64.f)};
    lt_comm_all_reduce(w, t, 2, LT_COMM_BF16, LT_COMM_SUM);
    CHECK(fb(t[0]) == 256.f && fb(t[1]) == 260.f, "rounding %g %g", fb(t[0]), fb(t[1]));
    /* all_gather moves the 16-bit words unchanged */
    lt_comm_all_gather(w, x, g, C, LT_COMM_BF16);
    for (int r = 0; r < NP && !test_cur_failed; r++)
        for (int i = 0; i < C; i++)
            CHECK(fb(g[r * C + i]) == (float)((r + 1) * 3 + i % 11), "gather r%d [%d]", r, i);
    CHECK(lt_comm_type_size(LT_COMM_BF16) == 2, "bf16 size");
    lt_comm_free(w);
}

/* ---- reduce_scatter_v, including in place --------------------------------- */
static void test_reduce_scatter_v(void) {
    LtComm *w = lt_comm_world("world");
    int counts[NP] = {5, 0, 7, 3}, total = 15, me = W.rank;
    float send[15], recv[7], inplace[15];
    uint16_t bsend[15], brecv[7];
    for (int i = 0; i < total; i++) {
        send[i] = (float)val(me, i);
        bsend[i] = bf((float)((me + 1) * 3 + i % 11));
    }
    memcpy(inplace, send, sizeof send);
    lt_comm_reduce_scatter_v(w, send, recv, counts, LT_COMM_F32);
    lt_comm_reduce_scatter_v(w, inplace, inplace, counts, LT_COMM_F32);
    lt_comm_reduce_scatter_v(w, bsend, brecv, counts, LT_COMM_BF16);
    int off = 0;
    for (int r = 0; r < me; r++) off += counts[r];
    for (int j = 0; j < counts[me]; j++) {
        double s = 0, b = 0;
        for (int r = 0; r < NP; r++) {
            s += val(r, off + j);
            b += (r + 1) * 3 + (off + j) % 11;
        }
        CHECK(recv[j] == (float)s && inplace[j] == (float)s, "[%d] %g %g != %g", j, recv[j],
              inplace[j], s);
        CHECK(fb(brecv[j]) == (float)b, "bf16 [%d] %g != %g", j, fb(brecv[j]), b);
    }
    lt_comm_free(w);
}

/* Buffers of the variable-count checks: host memory, or the memory of g_buf_be
 * for groups that take a backend's buffers (NCCL's: the emulated GPU's, which
 * the host can write, as the CPU backend's). */
static LtBackend *g_buf_be;
static void *buf_new(size_t bytes) {
    if (!g_buf_be) return lt_calloc(bytes);
    void *p = g_buf_be->ops->alloc(g_buf_be, bytes);
    g_buf_be->ops->zero(g_buf_be, p, bytes);
    return p;
}
static void buf_free(void *p) {
    if (g_buf_be)
        g_buf_be->ops->free(g_buf_be, p);
    else
        free(p);
}

/* ---- all-to-all with variable counts ---------------------------------------- */
/* Rank r sends (r + 2 j) % 5 elements to rank j (some zero), valued by
 * sender, receiver and index; over MPI_Alltoallv (a host group) and over the
 * sends and receives of a staged group, bf16 words included. */
static void check_all_to_all(const LtComm *c, LtCommType t) {
    const int n = lt_comm_size(c), me = lt_comm_rank(c);
    size_t sc[NP], rc[NP], st = 0, rt = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = (size_t)((me + 2 * j) % 5), rc[j] = (size_t)((j + 2 * me) % 5);
        st += sc[j], rt += rc[j];
    }
    float *send = buf_new(NP * 5 * sizeof(float)), *recv = buf_new(NP * 5 * sizeof(float));
    uint16_t *bsend = buf_new(NP * 5 * 2), *brecv = buf_new(NP * 5 * 2);
    for (size_t j = 0, k = 0; j < (size_t)n; j++)
        for (size_t i = 0; i < sc[j]; i++, k++) {
            send[k] = (float)(100 * me + 10 * (int)j + (int)i);
            bsend[k] = bf(send[k]);
        }
    memset(recv, 0xff, NP * 5 * sizeof(float));
    lt_comm_all_to_all_v(c, t == LT_COMM_BF16 ? (void *)bsend : (void *)send, sc,
                         t == LT_COMM_BF16 ? (void *)brecv : (void *)recv, rc, t);
    int bad = 0;
    for (size_t j = 0, k = 0; j < (size_t)n; j++)
        for (size_t i = 0; i < rc[j]; i++, k++) {
            float want = (float)(100 * (int)j + 10 * me + (int)i);
            if (t == LT_COMM_BF16) want = fb(bf(want));
            const float got = t == LT_COMM_BF16 ? fb(brecv[k]) : recv[k];
            if (got != want && bad++ == 0)
                printf("  %s rank %d: element %zu from %zu: %g, expected %g\n", lt_comm_name(c), me, i, j, got, want);
        }
    CHECK(bad == 0 && rt <= NP * 5, "%s: %d of %zu elements wrong", lt_comm_name(c), bad, rt);
    buf_free(send), buf_free(recv), buf_free(bsend), buf_free(brecv);
}

/* check on the world (f32, bf16), a pair, a staged world (f32, bf16) and one rank. */
static void on_groups(void (*check)(const LtComm *, LtCommType)) {
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtCommOptions stage = {.lib = LT_COMM_LIB_MPI, .device = 1, .be = be, .stage = 1};
    int all[NP], pair[2] = {W.rank / 2 * 2, W.rank / 2 * 2 + 1};
    for (int i = 0; i < NP; i++) all[i] = i;
    LtComm *w = lt_comm_world("world"), *p = lt_comm_split_members(pair, 2, "pair");
    LtComm *sw = lt_comm_split_members_ex(all, NP, "staged-world", &stage);
    LtComm *self = lt_comm_split_members(&W.rank, 1, "self");
    check(w, LT_COMM_F32);
    check(w, LT_COMM_BF16);
    check(p, LT_COMM_F32);
    check(sw, LT_COMM_F32);
    check(sw, LT_COMM_BF16);
    check(self, LT_COMM_F32);
    lt_comm_free(self);
    lt_comm_free(sw);
    lt_comm_free(p);
    lt_comm_free(w);
    lt_backend_destroy(be);
}

static void test_all_to_all_v(void) { on_groups(check_all_to_all); }

/* ---- all_gather_v: per-rank counts, a zero among them ---------------------- */
/* Group rank j contributes counts[j] = 3 j + 2 elements (rank 1: none), element
 * i of it 100 j + i; every rank gets them all in rank order, on host groups,
 * a pair, a staged group and one rank. */
static void check_all_gather_v(const LtComm *c, LtCommType t) {
    const int n = lt_comm_size(c), me = lt_comm_rank(c);
    int counts[NP], total = 0;
    for (int j = 0; j < n; j++) total += counts[j] = j == 1 ? 0 : 3 * j + 2;
    const size_t es = lt_comm_type_size(t);
    char *send = buf_new((size_t)counts[me] * es + 1), *recv = buf_new((size_t)total * es);
    for (int i = 0; i < counts[me]; i++) {
        const float v = (float)(100 * me + i);
        if (t == LT_COMM_BF16) ((uint16_t *)send)[i] = bf(v);
        else ((float *)send)[i] = v;
    }
    lt_comm_all_gather_v(c, send, recv, counts, t);
    int bad = 0, at = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < counts[j]; i++, at++) {
            const float want = (float)(100 * j + i);
            const float got = t == LT_COMM_BF16 ? fb(((uint16_t *)recv)[at]) : ((float *)recv)[at];
            if (got != (t == LT_COMM_BF16 ? fb(bf(want)) : want) && bad++ == 0)
                printf("  %s rank %d: element %d of rank %d: %g, expected %g\n", lt_comm_name(c),
                       me, i, j, got, want);
        }
    CHECK(bad == 0, "%s: %d of %d elements wrong", lt_comm_name(c), bad, total);
    buf_free(send);
    buf_free(recv);
}

static void test_all_gather_v(void) { on_groups(check_all_gather_v); }

/* ---- background companion: a worker thread runs the collectives ---------- */
/* Operations started on lt_comm_background(w) give byte for byte what the same
 * calls on w give, also while the calling thread runs other operations on w,
 * and complete in start order; the worker's time is counted as busy. */
static void test_background_group(void) {
    LtComm *w = lt_comm_world("world");
    const LtComm *bg = lt_comm_background(w);
    CHECK(bg != w && lt_comm_size(bg) == NP && lt_comm_rank(bg) == W.rank, "companion");
    CHECK(lt_comm_background(w) == bg, "made once");
    enum { N = 4099 };
    const int me = W.rank;
    int counts[NP] = {1000, 0, 2000, 1099};
    float *a = lt_malloc(N * sizeof(float)), *a2 = lt_malloc(N * sizeof(float));
    float *rs = lt_malloc(2000 * sizeof(float)), *rs2 = lt_malloc(2000 * sizeof(float));
    float *g = lt_malloc(NP * 64 * sizeof(float)), *g2 = lt_malloc(NP * 64 * sizeof(float));
    float bc[33], bc2[33], side[N];
    fill_f32(a, N, me);
    memcpy(a2, a, N * sizeof(float));
    fill_f32(side, N, me + 1);
    fill_f32(bc, 33, me);
    memcpy(bc2, bc, sizeof bc);
    LtCommRequest r[4];
    r[0] = lt_comm_all_reduce_start(bg, a, N, LT_COMM_F32, LT_COMM_SUM);
    r[1] = lt_comm_reduce_scatter_v_start(bg, a2, rs, counts, LT_COMM_F32);
    r[2] = lt_comm_broadcast_start(bg, bc, 33, LT_COMM_F32, 2);
    r[3] = lt_comm_all_gather_start(bg, a2 + 7, g, 64, LT_COMM_F32);
    lt_comm_all_reduce(w, side, N, LT_COMM_F32, LT_COMM_MAX); /* meanwhile, on the group */
    lt_comm_finish(&r[3]); /* the last one: the others completed before it */
    for (int i = 0; i < 3; i++) CHECK(lt_comm_test(&r[i]), "request %d done before the last", i);
    /* the same calls on the group itself */
    float *ref = lt_malloc(N * sizeof(float));
    fill_f32(ref, N, me);
    lt_comm_reduce_scatter_v(w, ref, rs2, counts, LT_COMM_F32);
    lt_comm_all_gather(w, ref + 7, g2, 64, LT_COMM_F32);
    lt_comm_all_reduce(w, ref, N, LT_COMM_F32, LT_COMM_SUM);
    lt_comm_broadcast(w, bc2, 33, LT_COMM_F32, 2);
    CHECK(!memcmp(a, ref, N * sizeof(float)), "all_reduce differs");
    CHECK(!memcmp(rs, rs2, (size_t)counts[me] * sizeof(float)), "reduce_scatter_v differs");
    CHECK(!memcmp(bc, bc2, sizeof bc), "broadcast differs");
    CHECK(!memcmp(g, g2, NP * 64 * sizeof(float)), "all_gather differs");
    CHECK(lt_comm_work_seconds(w) > 0 && lt_comm_busy_seconds(w) > 0, "time not counted");
    free(a), free(a2), free(rs), free(rs2), free(g), free(g2), free(ref);
    lt_comm_free(w);
}

/* ---- tp_overlap: row blocks on the background companion ------------------- */
enum { RB = 5 }; /* elements per row block */
typedef struct {
    const LtComm *w; /* a collective on the group itself inside the work, as the loss's */
    float *in, *out;
    int order[2 * NP], calls, me, bad_block;
} Blocks;
/* Records the call, checks block k of in arrived, writes block k of out
 * (partial sums (me + 1) * (k + 1) + i); with w, first agrees on k with
 * the other ranks over w (the vocab-parallel loss's statistics run so). */
static void block_fn(void *ctx, int k) {
    Blocks *b = ctx;
    if (b->w) {
        int kk[1] = {k};
        lt_comm_all_reduce(b->w, kk, 1, LT_COMM_I32, LT_COMM_MAX);
        if (kk[0] != k) b->bad_block = 1;
    }
    if (b->calls < 2 * NP) b->order[b->calls] = k;
    b->calls++;
    for (int i = 0; i < RB; i++)
        if (b->in[k * RB + i] != (float)val(k, i)) b->bad_block = 1;
    if (b->out)
        for (int i = 0; i < RB; i++) b->out[k * RB + i] = (float)((b->me + 1) * (k + 1) + i);
}
static void fill_own_block(float *in, int me) {
    for (int i = 0; i < NP * RB; i++) in[i] = -1.0f;
    for (int i = 0; i < RB; i++) in[me * RB + i] = (float)val(me, i);
}
/* lt_tp_gather_blocks calls fn on this rank's block first, then the others in
 * rank order, each once it arrived; lt_tp_scatter_blocks and the in-order
 * gather + scatter (the LM head's) take the blocks in rank order on every
 * rank and leave each rank the sum of its block; every call sees its block. */
static void test_tp_row_blocks(void) {
    LtComm *w = lt_comm_world("tp");
    const int me = W.rank;
    float in[NP * RB], out[NP * RB], shard[RB];
    Blocks b = {.in = in, .me = me};
    fill_own_block(in, me);
    lt_tp_gather_blocks(w, in, RB, RB * sizeof(float), LT_COMM_F32, block_fn, &b);
    CHECK(b.calls == NP && b.order[0] == me && !b.bad_block, "gather: %d calls, first %d, bad %d",
          b.calls, b.order[0], b.bad_block);
    for (int j = 1, want = 0; j < NP; j++, want++) {
        if (want == me) want++;
        CHECK(b.order[j] == want, "gather call %d on block %d, not %d", j, b.order[j], want);
    }
    for (int i = 0; i < NP * RB; i++)
        CHECK(in[i] == (float)val(i / RB, i % RB), "gathered [%d] %g", i, in[i]);
    /* the in-order gather with the scatter of what each block's work wrote */
    for (int with_out = 0; with_out < 2; with_out++) {
        Blocks c = {.w = w, .in = in, .out = with_out ? out : NULL, .me = me};
        fill_own_block(in, me);
        for (int i = 0; i < RB; i++) shard[i] = -7.0f;
        lt_tp_gather_scatter_in_order(w, in, RB, RB * sizeof(float), c.out, shard, RB,
                                      RB * sizeof(float), LT_COMM_F32, block_fn, &c);
        CHECK(c.calls == NP && !c.bad_block, "in order (out %d): %d calls, bad %d", with_out,
              c.calls, c.bad_block);
        for (int j = 0; j < NP && j < c.calls; j++)
            CHECK(c.order[j] == j, "in order (out %d): call %d on block %d", with_out, j, c.order[j]);
        for (int i = 0; i < NP * RB; i++)
            CHECK(in[i] == (float)val(i / RB, i % RB), "in order gathered [%d] %g", i, in[i]);
        for (int i = 0; i < RB; i++) {
            /* sum over ranks r of (r + 1) * (me + 1) + i */
            float want = with_out ? (float)((NP * (NP + 1) / 2) * (me + 1) + NP * i) : -7.0f;
            CHECK(shard[i] == want, "in order (out %d): shard [%d] %g != %g", with_out, i,
                  shard[i], want);
        }
    }
    /* the reduce-scatter alone, produced block by block */
    Blocks d = {.in = in, .out = out, .me = me};
    lt_tp_scatter_blocks(w, out, shard, RB, RB * sizeof(float), LT_COMM_F32, block_fn, NULL, &d);
    for (int j = 0; j < NP; j++) CHECK(d.order[j] == j, "scatter call %d on block %d", j, d.order[j]);
    for (int i = 0; i < RB; i++)
        CHECK(shard[i] == (float)((NP * (NP + 1) / 2) * (me + 1) + NP * i), "scatter [%d] %g", i,
              shard[i]);
    lt_comm_free(w);
}

/* ---- groups with options: CPU backend device buffers = host path ---------- */
static void test_split_ex_cpu(void) {
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    int all[NP];
    for (int i = 0; i < NP; i++) all[i] = i;
    LtComm *h = lt_comm_split_members_ex(all, NP, "plain", NULL);
    CHECK(lt_comm_host(h) == h && lt_comm_lib(h) == LT_COMM_LIB_MPI && !lt_comm_device_buffers(h),
          "NULL options give a host MPI group");
    LtCommOptions opt = {.lib = LT_COMM_LIB_MPI, .device = 1, .be = be};
    LtComm *d = lt_comm_split_members_ex(all, NP, "dev", &opt);
    const LtComm *dh = lt_comm_host(d);
    CHECK(lt_comm_device_buffers(d) && dh != d && !lt_comm_device_buffers(dh), "companion");
    CHECK(lt_comm_size(dh) == NP && lt_comm_rank(dh) == W.rank &&
              strcmp(lt_comm_name(dh), "dev") == 0 && lt_comm_global_rank(dh, 2) == 2,
          "companion ranks");
    enum { C = 9 };
    float *x = be->ops->alloc(be, C * NP * sizeof(float)), y[C];
    for (int i = 0; i < C; i++) x[i] = (float)val(W.rank, i);
    lt_comm_all_reduce(d, x, C, LT_COMM_F32, LT_COMM_SUM);
    for (int i = 0; i < C; i++) y[i] = (float)val(W.rank, i);
    lt_comm_all_reduce(dh, y, C, LT_COMM_F32, LT_COMM_SUM);
    for (int i = 0; i < C; i++) {
        double s = 0;
        for (int r = 0; r < NP; r++) s += val(r, i);
        CHECK(x[i] == (float)s && y[i] == (float)s, "[%d] %g %g != %g", i, x[i], y[i], s);
    }
    lt_comm_all_gather(d, x + (size_t)W.rank * C, x, C, LT_COMM_F32); /* in place */
    CHECK(x[0] == y[0], "gather in place");
    lt_comm_barrier(d);
    lt_comm_barrier(dh);
    lt_comm_free(d);
    lt_comm_free(h);
    be->ops->free(be, x);
    lt_backend_destroy(be);
    CHECK(lt_comm_nccl_compiled() == lt_cuda_compiled(), "NCCL compiled iff CUDA");
    CHECK(strcmp(lt_comm_lib_name(LT_COMM_LIB_NCCL), "nccl") == 0, "lib name");
}

/* ---- the staged path on the CPU backend ----------------------------------- */
/* A group asked to stage (LtCommOptions.stage) moves CPU-backend buffers
 * through host_alloc memory with download/upload, the path GPU buffers take
 * over MPI; every operation must give the host path's bytes. */
enum { SC = 37 }; /* elements of one rank's chunk */
enum { S_SUM, S_MAX, S_RS, S_RS_IN_PLACE, S_RSV, S_RSV_IN_PLACE, S_AG, S_AG_IN_PLACE, S_BCAST,
       S_RING, S_BATCH, S_CASES };
static const char *const s_case_name[S_CASES] = {
    "all_reduce(sum)", "all_reduce(max)", "reduce_scatter", "reduce_scatter in place",
    "reduce_scatter_v", "reduce_scatter_v in place", "all_gather", "all_gather in place",
    "broadcast", "send/recv ring", "batch exchange"};

/* Element i of group rank r: small numbers, exact in every type and in sums of
 * NP of them (u8 sums stay below 256). */
static void fill_typed(void *x, LtCommType t, size_t n, int r) {
    for (size_t i = 0; i < n; i++) {
        double v = (double)((r + 1) * 3 + (int)(i % 11)) + 0.5 * (double)((i + (size_t)r) % 3);
        switch (t) {
        case LT_COMM_F32: ((float *)x)[i] = (float)v; break;
        case LT_COMM_F64: ((double *)x)[i] = v * (i % 2 ? -1 : 1); break;
        case LT_COMM_I32: ((int32_t *)x)[i] = (int32_t)(v * 2) * (i % 3 ? 1 : -1); break;
        case LT_COMM_U8: ((uint8_t *)x)[i] = (uint8_t)((int)(v * 2) & 0x3f); break;
        case LT_COMM_BF16: ((uint16_t *)x)[i] = bf((float)v); break;
        }
    }
}

/* reduce_scatter_v's count of group rank q in the cases below: a zero, sum < n*SC */
static int rsv_count(int q) { return q == 1 ? 0 : SC - 5 + 3 * q; }

/* Case k of type t on group c: in holds this rank's size*SC elements, out gets
 * the result (size*SC elements; parts a case does not write stay zero). */
static void run_case(const LtComm *c, int k, LtCommType t, const void *in, void *out) {
    const int n = lt_comm_size(c), me = lt_comm_rank(c);
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    const size_t tsz = lt_comm_type_size(t), chunk = SC * tsz, all = (size_t)n * SC;
    char *o = out;
    const char *x = in;
    int counts[NP];
    for (int q = 0; q < n; q++) counts[q] = rsv_count(q);
    switch (k) {
    case S_SUM:
    case S_MAX:
        memcpy(o, x, all * tsz);
        lt_comm_all_reduce(c, o, all, t, k == S_SUM ? LT_COMM_SUM : LT_COMM_MAX);
        break;
    case S_RS: lt_comm_reduce_scatter(c, x, o, SC, t); break;
    case S_RS_IN_PLACE:
        memcpy(o, x, all * tsz);
        lt_comm_reduce_scatter(c, o, o, SC, t);
        break;
    case S_RSV: lt_comm_reduce_scatter_v(c, x, o, counts, t); break;
    case S_RSV_IN_PLACE:
        memcpy(o, x, all * tsz);
        lt_comm_reduce_scatter_v(c, o, o, counts, t);
        break;
    case S_AG: lt_comm_all_gather(c, x, o, SC, t); break;
    case S_AG_IN_PLACE:
        memcpy(o + (size_t)me * chunk, x, chunk);
        lt_comm_all_gather(c, o + (size_t)me * chunk, o, SC, t);
        break;
    case S_BCAST: /* chunk r of out comes from root r */
        for (int root = 0; root < n; root++) {
            if (me == root) memcpy(o + (size_t)root * chunk, x + (size_t)root * chunk, chunk);
            lt_comm_broadcast(c, o + (size_t)root * chunk, SC, t, root);
        }
        break;
    case S_RING: { /* the receive is polled with lt_comm_test */
        LtCommRequest rr = lt_comm_recv_start(c, o, all, t, prev, 3);
        LtCommRequest rs = lt_comm_send_start(c, x, all, t, next, 3);
        while (!lt_comm_test(&rr)) {
        }
        lt_comm_finish(&rs);
        break;
    }
    case S_BATCH: {
        LtCommRequest r[4];
        lt_comm_batch_begin(c);
        r[0] = lt_comm_send_start(c, x, SC, t, next, 1);
        r[1] = lt_comm_send_start(c, x + chunk, SC, t, prev, 2);
        r[2] = lt_comm_recv_start(c, o, SC, t, prev, 1);
        r[3] = lt_comm_recv_start(c, o + chunk, SC, t, next, 2);
        lt_comm_batch_end(c);
        for (int q = 3; q >= 0; q--) lt_comm_finish(&r[q]);
        break;
    }
    }
}

/* Every case and type on device-buffer group s (staged, or NCCL's) and host
 * group h over the same ranks. NCCL's groups leave out the ring of lone
 * sends and receives: NCCL runs them in stream order, a receive before the
 * send after it, which deadlocks a ring on GPUs; lattice issues NCCL's
 * point-to-point only in batches. */
static void compare_device(const LtComm *s, const LtComm *h, LtBackend *be) {
    const int nccl = lt_comm_lib(s) == LT_COMM_LIB_NCCL;
    const int n = lt_comm_size(h), me = lt_comm_rank(h);
    const size_t all = (size_t)n * SC;
    const LtCommType types[] = {LT_COMM_F32, LT_COMM_F64, LT_COMM_I32, LT_COMM_U8, LT_COMM_BF16};
    char *din = be->ops->alloc(be, all * 8), *dout = be->ops->alloc(be, all * 8);
    char *hin = lt_calloc(all * 8), *hout = lt_calloc(all * 8);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const LtCommType t = types[ti];
        const size_t bytes = all * lt_comm_type_size(t);
        fill_typed(hin, t, all, me);
        be->ops->upload(be, din, hin, bytes);
        for (int k = 0; k < S_CASES; k++) {
            if (nccl && k == S_RING) continue;
            memset(hout, 0, bytes);
            be->ops->zero(be, dout, bytes);
            unsigned long waits = be->host_waits;
            run_case(s, k, t, din, dout);
            CHECK(nccl || be->host_waits > waits, "%s: %s type %d did not stage", lt_comm_name(s),
                  s_case_name[k], (int)t);
            run_case(h, k, t, hin, hout);
            /* NCCL in place: the result is the first chunk (comm.h), the rest is
             * NCCL's; staging gives the host path's whole buffer */
            const size_t cmp = !nccl                 ? bytes
                               : k == S_RS_IN_PLACE  ? SC * lt_comm_type_size(t)
                               : k == S_RSV_IN_PLACE ? (size_t)rsv_count(me) * lt_comm_type_size(t)
                                                     : bytes;
            CHECK(memcmp(dout, hout, cmp) == 0, "%s (%d ranks): %s type %d differs from the "
                  "host path", lt_comm_name(s), n, s_case_name[k], (int)t);
        }
    }
    /* and the host path did reduce: f32 sums against local values */
    fill_typed(hin, LT_COMM_F32, all, me);
    lt_comm_all_reduce(h, hin, all, LT_COMM_F32, LT_COMM_SUM);
    float *want = lt_calloc(all * sizeof(float)), *part = lt_calloc(all * sizeof(float));
    for (int r = 0; r < n; r++) {
        fill_typed(part, LT_COMM_F32, all, r);
        for (size_t i = 0; i < all; i++) want[i] += part[i];
    }
    CHECK(memcmp(hin, want, all * sizeof(float)) == 0, "%s: host all_reduce sums",
          lt_comm_name(h));
    free(want), free(part), free(hin), free(hout);
    be->ops->free(be, din);
    be->ops->free(be, dout);
}

static void test_staged_cpu(void) {
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtCommOptions stage = {.lib = LT_COMM_LIB_MPI, .device = 1, .be = be, .stage = 1};
    LtCommOptions plain = {.lib = LT_COMM_LIB_MPI, .device = 1, .be = be};
    int all[NP], pair[2] = {W.rank / 2 * 2, W.rank / 2 * 2 + 1}, self[1] = {W.rank};
    for (int i = 0; i < NP; i++) all[i] = i;
    /* without the option, CPU-backend buffers take the host path: no copies */
    LtComm *d = lt_comm_split_members_ex(all, NP, "dev", &plain);
    float x[4] = {1, 2, 3, 4};
    unsigned long waits = be->host_waits;
    lt_comm_all_reduce(d, x, 4, LT_COMM_F32, LT_COMM_SUM);
    CHECK(be->host_waits == waits && x[3] == 4 * NP, "device buffers of the CPU backend staged");
    lt_comm_free(d);
    /* the world and two pairs {0,1}, {2,3} */
    LtComm *sw = lt_comm_split_members_ex(all, NP, "staged-world", &stage);
    LtComm *sp = lt_comm_split_members_ex(pair, 2, "staged-pair", &stage);
    LtComm *hw = lt_comm_split_members(all, NP, "world"), *hp = lt_comm_split_members(pair, 2, "pair");
    CHECK(lt_comm_lib(sw) == LT_COMM_LIB_MPI && lt_comm_device_buffers(sw) &&
              lt_comm_host(sw) != sw && lt_comm_size(sp) == 2,
          "staged group shape");
    compare_device(sw, hw, be);
    compare_device(sp, hp, be);
    /* a staged collective runs on the host companion inside the group's own
     * operation: its time is counted once (not also as the companion's) */
    const size_t n = 1 << 18;
    float *big = lt_calloc(n * sizeof(float));
    const double busy0 = lt_comm_busy_seconds(sw), host0 = lt_comm_host_busy_seconds(sw),
                 t0 = lt_now();
    for (int i = 0; i < 10; i++) lt_comm_all_reduce(sw, big, n, LT_COMM_F32, LT_COMM_SUM);
    const double wall = lt_now() - t0, busy = lt_comm_busy_seconds(sw) - busy0;
    CHECK(busy > 0 && busy <= wall * 1.01 + 1e-4, "staged time counted %.4f s in %.4f s", busy,
          wall);
    CHECK(lt_comm_host_busy_seconds(sw) - host0 < 1e-9,
          "a staged collective counted as host-buffer communication (%.4f s)",
          lt_comm_host_busy_seconds(sw) - host0);
    free(big);
    /* one rank: the shortcuts, nothing staged */
    LtComm *s1 = lt_comm_split_members_ex(self, 1, "staged-one", &stage);
    float y[4] = {0};
    waits = be->host_waits;
    lt_comm_all_reduce(s1, x, 4, LT_COMM_F32, LT_COMM_SUM);
    lt_comm_reduce_scatter(s1, x, y, 4, LT_COMM_F32);
    CHECK(be->host_waits == waits && y[3] == 4 * NP, "one-rank staged group");
    lt_comm_free(s1);
    lt_comm_free(hp);
    lt_comm_free(hw);
    lt_comm_free(sp);
    lt_comm_free(sw);
    lt_backend_destroy(be);
}

#ifdef LT_NCCL_EMU
/* ---- NCCL groups on emulated GPUs ------------------------------------------- */
/* The world and the pairs {0,1}, {2,3} as NCCL groups, each rank on an
 * emulated GPU of its own: every case and type of the staged test, and the
 * variable-count all-to-all and all-gather, against the host path. */
static void test_nccl_emulated(void) {
    char err[256] = "";
    LtBackend *be = lt_backend_cuda_create(LT_F32, W.rank, err, sizeof err);
    CHECK(be != NULL, "emulated GPU: %s", err);
    if (!be) return;
    LtCommOptions nccl = {.lib = LT_COMM_LIB_NCCL, .device = 1, .be = be};
    int all[NP], pair[2] = {W.rank / 2 * 2, W.rank / 2 * 2 + 1};
    for (int i = 0; i < NP; i++) all[i] = i;
    LtComm *nw = lt_comm_split_members_ex(all, NP, "nccl-world", &nccl);
    LtComm *np = lt_comm_split_members_ex(pair, 2, "nccl-pair", &nccl);
    LtComm *hw = lt_comm_split_members(all, NP, "world"), *hp = lt_comm_split_members(pair, 2, "pair");
    CHECK(lt_comm_lib(nw) == LT_COMM_LIB_NCCL && lt_comm_device_buffers(nw) &&
              lt_comm_size(np) == 2,
          "NCCL group shape");
    compare_device(nw, hw, be);
    compare_device(np, hp, be);
    g_buf_be = be;
    check_all_to_all(nw, LT_COMM_F32);
    check_all_to_all(nw, LT_COMM_BF16);
    check_all_to_all(np, LT_COMM_F32);
    check_all_gather_v(nw, LT_COMM_F32);
    check_all_gather_v(nw, LT_COMM_BF16);
    g_buf_be = NULL;
    lt_comm_free(hp);
    lt_comm_free(hw);
    lt_comm_free(np);
    lt_comm_free(nw);
    lt_backend_destroy(be);
}
#endif

#define MRUN(fn)                                                                   \
    do {                                                                           \
        test_cur_failed = 0;                                                       \
        fn();                                                                      \
        fflush(stdout);                                                            \
        int f_ = test_cur_failed;                                                  \
        MPI_Allreduce(MPI_IN_PLACE, &f_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);     \
        if (f_) test_n_fail++;                                                     \
        else test_n_pass++;                                                        \
        if (W.rank == 0) printf("%s %s\n", f_ ? "FAIL" : "PASS", #fn);             \
        fflush(stdout);                                                            \
    } while (0)

int main(int argc, char **argv) {
    if (!lt_world_launched()) {
#ifndef LT_NCCL_EMU
        RUN(test_world_without_launcher);
#endif
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) {
            printf("FAIL test_comm_mpi_launch: cannot find own executable\n");
            return 1;
        }
        self[n] = 0;
        printf("launching: mpirun -np %d %s\n", NP, self);
        fflush(stdout);
        char np[16];
        snprintf(np, sizeof np, "%d", NP);
        char *args[] = {"timeout", "120", "mpirun", "--allow-run-as-root", "--oversubscribe",
                        "-np", np, self, NULL};
        execvp("timeout", args);
        printf("FAIL test_comm_mpi_launch: cannot exec timeout/mpirun\n");
        return 1;
    }
    lt_world_init(&W, &argc, &argv);
    if (W.world != NP) {
        if (W.rank == 0) printf("FAIL test_comm_mpi: needs %d ranks, got %d\n", NP, W.world);
        lt_world_finalize(&W);
        return 1;
    }
#ifdef LT_NCCL_EMU
    MRUN(test_nccl_emulated);
#else
    MRUN(test_all_reduce_world);
    MRUN(test_reduce_scatter_world);
    MRUN(test_all_gather_world);
    MRUN(test_broadcast_world);
    MRUN(test_send_recv_ring);
    MRUN(test_batch_exchange);
    MRUN(test_tp_dp_groups);
    MRUN(test_pipeline_groups);
    MRUN(test_two_in_flight);
    MRUN(test_split_color);
    MRUN(test_bf16_world);
    MRUN(test_reduce_scatter_v);
    MRUN(test_all_to_all_v);
    MRUN(test_all_gather_v);
    MRUN(test_background_group);
    MRUN(test_tp_row_blocks);
    MRUN(test_split_ex_cpu);
    MRUN(test_staged_cpu);
#endif
    int rc = test_n_fail ? 1 : 0;
    if (W.rank == 0) rc = test_summary();
    lt_world_finalize(&W);
    return rc;
}
