/* test_model.c - the whole GPT on the CPU backend: initial loss, gradient
 * check by finite differences, micro-batch accumulation, padded vocabulary,
 * bf16 agreement, layout-independent init, and that training fits a batch. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "model.h"
#include "model/moe.h"
#include "optim.h"
#include "test.h"

static LtModelDims tiny_dims(void) {
    LtModelDims d = {.num_layers = 2, .hidden = 16, .heads = 2, .ffn = 64, .seq_len = 8,
                     .max_pos = 12, .vocab = 37, .padded_vocab = 128};
    return d;
}

/* A tiny Llama: grouped-query attention (4 query heads over 2 key/value
 * heads), SwiGLU of width 48, RoPE with Llama 3.1's scaling (original
 * context 4 < seq 8, so all three frequency bands occur), untied LM head. */
static LtModelDims tiny_llama_dims(void) {
    LtModelDims d = {.num_layers = 2, .hidden = 32, .heads = 4, .ffn = 48, .seq_len = 8,
                     .max_pos = 8, .vocab = 37, .padded_vocab = 128, .arch = LT_ARCH_LLAMA,
                     .kv_heads = 2, .untied = 1, .norm_eps = 1e-5f, .rope_base = 10000,
                     .rope = {LT_ROPE_SCALING_LLAMA3, 8, 1, 4, 4, 0, 0, 0, 0}};
    return d;
}

static void random_tokens(int32_t *x, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) x[i] = (int32_t)(lt_uniform_at(seed, 7, (uint64_t)i) * V);
}

/* Sum of token losses for the given host parameters. */
static double loss_with(LtModel *m, const float *host, const int32_t *in, const int32_t *tgt) {
    lt_model_set_params(m, host);
    return lt_model_step(m, in, tgt, 0.0f);
}

/* The MoE layers' aux and z losses since the last call (their weight in the
 * objective included); 0 for a dense model. */
static double moe_terms(LtModel *m) {
    const int n = lt_model_moe_layers(m);
    LtMoeStats st[8];
    LT_CHECK(n <= 8);
    lt_model_moe_take(m, st);
    double sum = 0.0;
    for (int k = 0; k < n; k++) sum += st[k].aux + st[k].z;
    return sum;
}

/* A hash of the routing of slot 0 (every MoE layer's experts and kept rows):
 * finite differences are only valid while it holds. */
static uint64_t routing_hash(const LtModel *m) {
    uint64_t h = 1469598103934665603ull;
    const int N = m->B * m->T, K = m->d.moe.topk;
    for (int j = 0; j < m->max_chunk_layers && m->d.moe.experts > 0; j++) {
        const LtMoeActs *a = m->slot[0].layer[j].moe;
        for (int i = 0; i < N * K; i++)
            h = (h ^ (uint64_t)(a->idx[i] * 7919 + a->pos[i])) * 1099511628211ull;
    }
    return h;
}

static void initial_loss(LtModelDims d) {
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *m = lt_model_create(be, &d, 2, d.seq_len, NULL);
    float *host = malloc(m->table.total * sizeof(float));
    lt_params_init(&m->table, 1234, host);
    int N = 2 * d.seq_len;
    int32_t in[16], tgt[16];
    random_tokens(in, N, d.vocab, 1);
    random_tokens(tgt, N, d.vocab, 2);
    double loss = loss_with(m, host, in, tgt) / N;
    CHECK(fabs(loss - log((double)d.vocab)) < 0.05, "%s: initial loss %.4f vs ln V %.4f",
          lt_arch_name((LtArch)d.arch), loss, log((double)d.vocab));
    free(host);
    lt_model_destroy(m);
    lt_backend_destroy(be);
}

static void test_initial_loss(void) {
    initial_loss(tiny_dims());
    initial_loss(tiny_llama_dims());
}

static void test_init_layout_independent(void) {
    /* element values depend on (seed, name, index) only: a different layer
     * count leaves the shared tensors identical, another seed changes them */
    LtModelDims a = tiny_dims(), b = tiny_dims();
    b.num_layers = 3;
    LtParamTable ta, tb;
    lt_params_build(&ta, &a);
    lt_params_build(&tb, &b);
    const LtParam *pa = lt_params_find(&ta, "h.1.mlp.fc.weight");
    const LtParam *pb = lt_params_find(&tb, "h.1.mlp.fc.weight");
    REQUIRE(pa && pb, "parameter missing");
    int same = 1, diff_seed = 0;
    for (size_t i = 0; i < pa->numel; i++) {
        same &= lt_param_init_value(pa, 5, i) == lt_param_init_value(pb, 5, i);
        diff_seed |= lt_param_init_value(pa, 5, i) != lt_param_init_value(pa, 6, i);
    }
    CHECK(same, "init differs between layouts");
    CHECK(diff_seed, "seed does not change init");
    /* std of a normal-initialized matrix and the scaled residual projections */
    const LtParam *fc = lt_params_find(&ta, "h.0.mlp.fc.weight");
    const LtParam *pr = lt_params_find(&ta, "h.0.mlp.proj.weight");
    CHECK(fabsf(fc->init_std - 0.02f) < 1e-7f && fabsf(pr->init_std - 0.01f) < 1e-7f,
          "init std %g %g", fc->init_std, pr->init_std);
    const LtParam *wte = lt_params_find(&ta, "wte");
    CHECK(lt_param_init_value(wte, 5, (size_t)a.vocab * a.hidden) == 0.0f, "padded row not zero");
    lt_params_free(&ta);
    lt_params_free(&tb);
}

/* The whole model's gradient by central finite differences of the mean token
 * loss, three entries of every parameter (wte: rows the inputs use; an untied
 * lm_head: rows the targets use). */
static void gradient_check(LtModelDims d) {
    const int B = 2, N = B * d.seq_len;
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *m = lt_model_create(be, &d, B, d.seq_len, NULL);
    const LtParamTable *t = &m->table;
    float *host = malloc(t->total * sizeof(float));
    lt_params_init(t, 99, host);
    /* larger weights than the init so every path carries real gradient */
    for (size_t i = 0; i < t->total; i++) host[i] += 0.3f * lt_normal_at(3, 3, i);
    for (int i = 0; i < t->n; i++) /* keep padded vocab rows zero */
        if (!strcmp(t->p[i].name, "wte") || !strcmp(t->p[i].name, "lm_head.weight"))
            memset(host + t->p[i].offset + (size_t)d.vocab * d.hidden, 0,
                   (size_t)(d.padded_vocab - d.vocab) * d.hidden * sizeof(float));
    int32_t in[16], tgt[16];
    random_tokens(in, N, d.vocab, 11);
    random_tokens(tgt, N, d.vocab, 12);
    lt_model_set_params(m, host);
    lt_model_zero_grads(m);
    lt_model_step(m, in, tgt, 1.0f / N);
    const double terms = moe_terms(m);
    CHECK(d.moe.experts == 0 || d.moe.aux_coeff + d.moe.z_coeff == 0 || terms > 0,
          "MoE aux and z losses %g", terms);
    const uint64_t routing = routing_hash(m);
    int flipped = 0;
    float *g = malloc(t->total * sizeof(float));
    be->ops->download(be, g, m->grads, t->total * sizeof(float));
    int checked = 0, bad = 0;
    const float h = 1e-2f;
    for (int pi = 0; pi < t->n; pi++) {
        const LtParam *p = &t->p[pi];
        for (int k = 0; k < 3; k++) {
            size_t j = (size_t)(lt_uniform_at(77, (uint64_t)pi, (uint64_t)k) * (double)p->numel);
            if (!strcmp(p->name, "wte")) j = (size_t)in[k] * d.hidden + (size_t)k; /* used rows */
            if (!strcmp(p->name, "lm_head.weight")) j = (size_t)tgt[k] * d.hidden + (size_t)k;
            size_t at = p->offset + j;
            float keep = host[at];
            host[at] = keep + h;
            double lp = loss_with(m, host, in, tgt) / N + moe_terms(m);
            int same = routing_hash(m) == routing;
            host[at] = keep - h;
            double lm = loss_with(m, host, in, tgt) / N + moe_terms(m);
            same &= routing_hash(m) == routing;
            host[at] = keep;
            if (!same) { /* a step across a routing decision: no derivative there */
                flipped++;
                continue;
            }
            double fd = (lp - lm) / (2.0 * h);
            double err = fabs(fd - g[at]);
            checked++;
            if (err > 3e-2 * fabs(fd) + 2e-4) {
                bad++;
                printf("  %s[%zu]: analytic %.6g, finite difference %.6g\n", p->name, j, g[at], fd);
            }
        }
    }
    CHECK(bad == 0, "%s: %d of %d gradient entries disagree with finite differences",
          lt_arch_name((LtArch)d.arch), bad, checked);
    CHECK(flipped * 10 < checked, "%s: %d of %d steps changed the routing",
          lt_arch_name((LtArch)d.arch), flipped, checked + flipped);
    /* padded vocabulary rows never receive gradient */
    const LtParam *head = &t->p[t->idx_head >= 0 ? t->idx_head : t->idx_wte];
    double padsum = 0.0;
    for (size_t j = (size_t)d.vocab * d.hidden; j < head->numel; j++)
        padsum += fabs(g[head->offset + j]);
    CHECK(padsum == 0.0, "padded vocab rows of %s got gradient %g", head->name, padsum);
    free(g);
    free(host);
    lt_model_destroy(m);
    lt_backend_destroy(be);
}

/* A two-layer model whose layer 1 is an MoE layer of 4 experts, top-2,
 * Megatron-Core's aux loss and z-loss on. */
static LtModelDims moe_dims(LtModelDims d) {
    d.moe = (LtMoeDims){.experts = 4, .topk = 2, .ffn = 24, .score = LT_MOE_SOFTMAX,
                        .topk_scale = 1.0f, .balance = LT_MOE_AUX_LOSS, .aux_coeff = 0.1f,
                        .z_coeff = 0.01f};
    d.moe.layer[1] = 1;
    return d;
}

static void test_moe_gradient_check(void) {
    LtModelDims gpt = moe_dims(tiny_dims()); /* softmax over the top-k, a shared expert */
    gpt.moe.shared_ffn = 32;
    gradient_check(gpt);
    LtModelDims sig = moe_dims(tiny_llama_dims()); /* sigmoid, scaled, per-sequence loss */
    sig.moe.score = LT_MOE_SIGMOID, sig.moe.topk_scale = 2.5f, sig.moe.balance = LT_MOE_SEQ_AUX_LOSS;
    sig.moe.expert_bias = 1; /* its table entry shifts the experts' (its value: random here) */
    gradient_check(sig);
    LtModelDims pre = moe_dims(tiny_llama_dims()); /* softmax first; capacity, dropping */
    pre.moe.pre_softmax = 1, pre.moe.capacity = 1.0f, pre.moe.pad = 1, pre.moe.shared_ffn = 16;
    gradient_check(pre);
    LtModelDims gate = moe_dims(tiny_llama_dims()); /* Qwen2-MoE's gated shared expert */
    gate.moe.shared_ffn = 16, gate.moe.shared_gate = 1, gate.moe.layer[0] = 1;
    gradient_check(gate);
    LtModelDims ggpt = moe_dims(tiny_dims()); /* the gate on a GPT block's shared expert */
    ggpt.moe.shared_ffn = 32, ggpt.moe.shared_gate = 1;
    gradient_check(ggpt);
    LtModelDims pos = moe_dims(tiny_dims()); /* every layer MoE, drops by position, top-3 */
    pos.moe.layer[0] = 1, pos.moe.topk = 3, pos.moe.capacity = 0.5f;
    pos.moe.drop_policy = LT_MOE_DROP_POSITION;
    gradient_check(pos);
}

/* Index of the parameter named `name` in t; -1 when absent. */
static int param_index(const LtParamTable *t, const char *name) {
    const LtParam *p = lt_params_find(t, name);
    return p ? (int)(p - t->p) : -1;
}

/* One place of lt_params_build_split: over the ep ranks, the dense tables are
 * the stage table without its routed experts (the same on every rank), the
 * experts tables hold each expert of each held MoE layer exactly once, at the
 * rank's expert range, and every entry keeps its shape, split, gidx and
 * initial values. */
static void split_place(const LtModelDims *d, int tp, int tp_rank, LtStagePlace place, int ep) {
    LtParamTable s, g;
    lt_params_build_stage(&s, d, tp, tp_rank, place);
    lt_params_build(&g, d);
    float *sv = malloc(s.total * sizeof(float));
    lt_params_init(&s, 7, sv);
    int *seen = calloc((size_t)s.n, sizeof(int));
    const int El = d->moe.experts / ep;
    for (int r = 0; r < ep; r++) {
        LtParamTable t[2];
        lt_params_build_split(&t[0], &t[1], d, tp, tp_rank, place, ep, r, 1, 0);
        CHECK(t[0].idx_wte == param_index(&t[0], "wte") &&
                  t[0].idx_lnf == param_index(&t[0], "ln_f.weight") &&
                  (t[0].idx_head == param_index(&t[0], "lm_head.weight")) &&
                  t[0].first_stage == s.first_stage && t[0].last_stage == s.last_stage,
              "ep %d rank %d: dense table's indices", ep, r);
        for (int h = 0; h < 2; h++) {
            float *v = malloc((t[h].total + 1) * sizeof(float));
            lt_params_init(&t[h], 7, v);
            size_t off = 0;
            for (int k = 0; k < t[h].n; k++) {
                const LtParam *p = &t[h].p[k];
                const int i = param_index(&s, p->name);
                int e = -1;
                sscanf(strstr(p->name, ".mlp.experts.") ? strstr(p->name, ".mlp.experts.") : "",
                       ".mlp.experts.%d", &e);
                REQUIRE(i >= 0, "ep %d rank %d: %s not in the stage table", ep, r, p->name);
                seen[i]++;
                CHECK(h == (e >= 0) && (h == 0 || e / El == r), "ep %d rank %d: %s in table %d",
                      ep, r, p->name, h);
                CHECK(p->offset == off && p->numel == s.p[i].numel &&
                          p->split == s.p[i].split && p->gidx == s.p[i].gidx &&
                          !strcmp(g.p[p->gidx].name, p->name) &&
                          !memcmp(v + p->offset, sv + s.p[i].offset, p->numel * sizeof(float)),
                      "ep %d rank %d: %s differs from the stage table's", ep, r, p->name);
                off += p->numel;
            }
            CHECK(off == t[h].total, "table %d total", h);
            for (int ll = 0; ll < s.layers; ll++) { /* layer_first: the layer's own entries */
                char pre[32];
                snprintf(pre, sizeof pre, "h.%d.", lt_params_global_layer(&s, ll));
                for (int k = t[h].layer_first[ll]; k < t[h].layer_first[ll + 1]; k++)
                    CHECK(!strncmp(t[h].p[k].name, pre, strlen(pre)), "%s in layer %s",
                          t[h].p[k].name, pre);
            }
            free(v);
        }
        lt_params_free(&t[0]);
        lt_params_free(&t[1]);
    }
    for (int i = 0; i < s.n; i++) {
        const int want = strstr(s.p[i].name, ".mlp.experts.") ? 1 : ep; /* dense on every rank */
        CHECK(seen[i] == want, "ep %d: %s held %d times, want %d", ep, s.p[i].name, seen[i], want);
    }
    free(seen);
    free(sv);
    lt_params_free(&s);
    lt_params_free(&g);
}

static void test_params_split(void) {
    LtModelDims gpt = moe_dims(tiny_dims());
    gpt.num_layers = 4, gpt.moe.layer[3] = 1;
    gpt.moe.shared_ffn = 32, gpt.moe.expert_bias = 1;
    LtModelDims llama = moe_dims(tiny_llama_dims());
    llama.moe.layer[0] = 1;
    const LtModelDims *dims[2] = {&gpt, &llama};
    for (int m = 0; m < 2; m++)
        for (int tp = 1; tp <= 2; tp++)
            for (int pp = 1; pp <= 2; pp++)
                for (int ep = 1; ep <= 4; ep *= 2)
                    for (int q = 0; q < tp * pp; q++)
                        split_place(dims[m], tp, q % tp, (LtStagePlace){pp, q / tp, 1, {0}}, ep);
    LtModelDims dense = tiny_dims(); /* no experts: all in the dense table */
    split_place(&dense, 1, 0, (LtStagePlace){1, 0, 1, {0}}, 2);
}

/* Expert tensor parallelism's slices (lt_params_build_split with etp 2, ep 2,
 * GPT, Llama, and Llama with the linear biases): fc by rows, gate | up (weight
 * and bias) as two blocks, proj / down weights by columns, proj.bias and
 * down.bias whole; each element of a rank's slice initialised as the global
 * tensor's element it maps to, and over the ETP ranks every element of every
 * expert tensor held exactly once (the whole biases once per rank). */
static void test_params_split_etp(void) {
    LtModelDims gpt = moe_dims(tiny_dims());
    LtModelDims llama = moe_dims(tiny_llama_dims());
    llama.moe.layer[0] = 1;
    LtModelDims biased = llama;
    biased.linear_bias = 1;
    const LtModelDims *dims[3] = {&gpt, &llama, &biased};
    const int ep = 2, etp = 2;
    for (int m = 0; m < 3; m++) {
        const LtModelDims *d = dims[m];
        LtParamTable g;
        lt_params_build(&g, d);
        float *gv = malloc(g.total * sizeof(float));
        lt_params_init(&g, 7, gv);
        int *hits = calloc(g.total, sizeof(int));
        for (int r = 0; r < ep * etp; r++) {
            LtParamTable t[2];
            lt_params_build_split(&t[0], &t[1], d, 1, 0, (LtStagePlace){1, 0, 1, {0}}, ep,
                                  r / etp, etp, r % etp);
            CHECK(t[1].tp == etp && t[1].tp_rank == r % etp, "experts table's split");
            float *v = malloc((t[1].total + 1) * sizeof(float));
            lt_params_init(&t[1], 7, v);
            for (int k = 0; k < t[1].n; k++) {
                const LtParam *p = &t[1].p[k];
                const LtSplit want = strstr(p->name, ".gate_up.") ? LT_SPLIT_BLOCKS
                                     : strstr(p->name, ".fc.")    ? LT_SPLIT_ROWS
                                     : strstr(p->name, ".proj.bias") ||
                                               strstr(p->name, ".down.bias")
                                         ? LT_SPLIT_NONE
                                         : LT_SPLIT_COLS;
                CHECK(p->split == want && p->numel * (want == LT_SPLIT_NONE ? 1 : etp) ==
                                              g.p[p->gidx].numel,
                      "%s: split %d, %zu elements", p->name, (int)p->split, p->numel);
                for (size_t e = 0; e < p->numel; e++) {
                    const size_t gi = lt_param_global_index(&t[1], p, e);
                    REQUIRE(gi < g.p[p->gidx].numel, "%s: element %zu maps outside", p->name, e);
                    hits[g.p[p->gidx].offset + gi]++;
                    CHECK(v[p->offset + e] == gv[g.p[p->gidx].offset + gi],
                          "%s element %zu: %g, the global tensor's %g", p->name, e,
                          (double)v[p->offset + e], (double)gv[g.p[p->gidx].offset + gi]);
                }
            }
            free(v);
            lt_params_free(&t[0]);
            lt_params_free(&t[1]);
        }
        for (int k = 0; k < g.n; k++) {
            const LtParam *p = &g.p[k];
            if (!strstr(p->name, ".mlp.experts.")) continue;
            const int want = strstr(p->name, ".proj.bias") || strstr(p->name, ".down.bias") ? etp : 1;
            for (size_t e = 0; e < p->numel; e++)
                if (hits[p->offset + e] != want) {
                    CHECK(0, "%s element %zu held %d times, want %d", p->name, e,
                          hits[p->offset + e], want);
                    break;
                }
        }
        free(hits);
        free(gv);
        lt_params_free(&g);
    }
}

/* The aux and z losses' values against Megatron-Core's formulas computed
 * here from the router logits the forward left: aux = coeff E / (K T^2) sum_e
 * (sum over tokens of softmax p_e) (tokens whose top-k holds e), per sequence
 * with seq_aux_loss and averaged over the sequences; z = coeff mean lse^2. */
static void moe_aux_values(LtModelDims d) {
    const int B = 2, T = d.seq_len, N = B * T, E = d.moe.experts, K = d.moe.topk;
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *m = lt_model_create(be, &d, B, T, NULL);
    float *host = malloc(m->table.total * sizeof(float));
    lt_params_init(&m->table, 5, host);
    for (size_t i = 0; i < m->table.total; i++) host[i] += 0.3f * lt_normal_at(4, 4, i);
    int32_t in[16], tgt[16];
    random_tokens(in, N, d.vocab, 21);
    random_tokens(tgt, N, d.vocab, 22);
    moe_terms(m);
    loss_with(m, host, in, tgt);
    const double got = moe_terms(m);
    const int seq = d.moe.balance == LT_MOE_SEQ_AUX_LOSS, G = seq ? B : 1, Tg = seq ? T : N;
    double want = 0.0;
    for (int j = 0; j < m->max_chunk_layers; j++) {
        if (!m->slot[0].layer[j].moe || !lt_dims_moe_layer(&d, j)) continue;
        const float *lg = m->slot[0].layer[j].moe->logits;
        double psum[2][8] = {{0}}, cnt[2][8] = {{0}}, z = 0.0;
        for (int i = 0; i < N; i++) {
            const float *x = lg + (size_t)i * E;
            double mx = x[0], se = 0.0, p[8];
            for (int e = 1; e < E; e++) mx = x[e] > mx ? x[e] : mx;
            for (int e = 0; e < E; e++) se += exp(x[e] - mx);
            z += pow(mx + log(se), 2);
            for (int e = 0; e < E; e++) psum[i / Tg][e] += p[e] = exp(x[e] - mx) / se;
            for (int e = 0; e < E; e++) { /* e is in the top-k: fewer than K beat it */
                int above = 0;
                for (int f = 0; f < E; f++) above += p[f] > p[e] || (p[f] == p[e] && f < e);
                cnt[i / Tg][e] += above < K;
            }
        }
        double aux = 0.0;
        for (int g = 0; g < G; g++)
            for (int e = 0; e < E; e++) aux += psum[g][e] * cnt[g][e];
        want += d.moe.aux_coeff * E / ((double)K * Tg * Tg) * aux / G + d.moe.z_coeff * z / N;
    }
    CHECK(want > 0 && fabs(got - want) <= 1e-5 * want, "%s: aux + z losses %.8g, formula %.8g",
          lt_arch_name((LtArch)d.arch), got, want);
    free(host);
    lt_model_destroy(m);
    lt_backend_destroy(be);
}

static void test_moe_aux_values(void) {
    moe_aux_values(moe_dims(tiny_dims()));
    LtModelDims seq = moe_dims(tiny_llama_dims());
    seq.moe.balance = LT_MOE_SEQ_AUX_LOSS, seq.moe.layer[0] = 1;
    moe_aux_values(seq);
}

static void test_gradient_check(void) {
    gradient_check(tiny_dims());
    LtModelDims gpt_untied = tiny_dims();
    gpt_untied.untied = 1;
    gradient_check(gpt_untied);
    gradient_check(tiny_llama_dims());
    LtModelDims mqa = tiny_llama_dims(); /* multi-query, tied, no RoPE scaling */
    mqa.kv_heads = 1, mqa.untied = 0, mqa.rope.type = LT_ROPE_SCALING_NONE;
    gradient_check(mqa);
}

/* Largest |difference| between two models' gradients, relative to the
 * largest |gradient| of the first. */
static double grad_diff(LtBackend *be, const LtModel *a, const LtModel *b) {
    size_t n = a->table.total;
    float *ga = malloc(n * sizeof(float)), *gb = malloc(n * sizeof(float));
    be->ops->download(be, ga, a->grads, n * sizeof(float));
    be->ops->download(be, gb, b->grads, n * sizeof(float));
    double maxd = 0, maxg = 0;
    for (size_t i = 0; i < n; i++) {
        maxd = fmax(maxd, fabs(ga[i] - gb[i]));
        maxg = fmax(maxg, fabs(ga[i]));
    }
    free(ga);
    free(gb);
    return maxg > 0 ? maxd / maxg : maxd;
}

/* Same initial parameters (from seed) in both models; 32 random inputs and
 * targets drawn from seed + 1, seed + 2. */
static void init_pair(LtModel *a, LtModel *b, uint64_t seed, int32_t in[32], int32_t tgt[32]) {
    float *host = malloc(a->table.total * sizeof(float));
    lt_params_init(&a->table, seed, host);
    lt_model_set_params(a, host);
    lt_model_set_params(b, host);
    free(host);
    random_tokens(in, 32, a->d.vocab, seed + 1);
    random_tokens(tgt, 32, a->d.vocab, seed + 2);
}

/* Loss sum and gradients (accumulated into m) of one sample of T tokens. */
static double sample_step(LtModel *m, const int32_t *in, const int32_t *tgt) {
    return lt_model_step(m, in, tgt, 1.0f);
}

/* Megatron's reset_position_ids / reset_attention_mask: one sample packing
 * document A (5 tokens ending in the EOD id 0) and document B (the other 7)
 * gives the loss sum and the gradients of A and B each run alone at the
 * start of a sample, the rest filled with EOD (whose predictions, like A's
 * EOD's, data.eod_mask_loss drops; causal attention keeps the fill from the
 * documents). Without the resets the packed sample differs (the test's
 * control). GPT: learned positions; Llama: RoPE and grouped K/V. */
static void packed_documents(LtModelDims d) {
    enum { T = 12, LA = 5, EOD = 0 };
    d.seq_len = T, d.max_pos = T;
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *pk = lt_model_create(be, &d, 1, T, NULL), *sep = lt_model_create(be, &d, 1, T, NULL);
    LtModel *plain = lt_model_create(be, &d, 1, T, NULL);
    float *host = malloc(pk->table.total * sizeof(float));
    lt_params_init(&pk->table, 77, host);
    LtModel *ms[] = {pk, sep, plain};
    for (int i = 0; i < 3; i++) lt_model_set_params(ms[i], host), lt_model_set_eod_mask(ms[i], EOD);
    lt_model_set_documents(pk, EOD, 1, 1);
    int32_t in[T], tgt[T], a_in[T], a_tgt[T], b_in[T], b_tgt[T];
    random_tokens(in, T, d.vocab - 1, 3);
    random_tokens(tgt, T, d.vocab, 4);
    for (int t = 0; t < T; t++) in[t] += 1; /* no EOD inside the documents */
    in[LA - 1] = EOD;
    for (int t = 0; t < T; t++) {
        a_in[t] = t < LA ? in[t] : EOD, a_tgt[t] = t < LA ? tgt[t] : 1;
        b_in[t] = t < T - LA ? in[LA + t] : EOD, b_tgt[t] = t < T - LA ? tgt[LA + t] : 1;
    }
    const double lp = sample_step(pk, in, tgt);
    const double ls = sample_step(sep, a_in, a_tgt) + sample_step(sep, b_in, b_tgt);
    const double lplain = sample_step(plain, in, tgt);
    const char *arch = lt_arch_name((LtArch)d.arch);
    CHECK(test_relerr(lp, ls, 1e-9) < 1e-5, "%s: packed loss %.9g vs separate %.9g", arch, lp, ls);
    const double rel = grad_diff(be, sep, pk);
    CHECK(rel <= 1e-5, "%s: packed vs separate gradients differ by %g of the largest", arch, rel);
    CHECK(test_relerr(lplain, ls, 1e-9) > 1e-4 && grad_diff(be, sep, plain) > 1e-3,
          "%s: without resets the packed sample should differ (%.9g vs %.9g)", arch, lplain, ls);
    free(host);
    for (int i = 0; i < 3; i++) lt_model_destroy(ms[i]);
    lt_backend_destroy(be);
}

/* lt_doc_layout: positions restart after each EOD (the EOD ends its own
 * document), per sequence; eod < 0 leaves one document per sequence. */
static void test_doc_layout(void) {
    const int32_t tok[12] = {5, 9, 0, 4, 0, 0, 7, 8, /* row 2: */ 0, 3, 3, 0};
    const int32_t want_pos[12] = {0, 1, 2, 0, 1, 0, 0, 1, 0, 0, 1, 2};
    const int32_t want_ks[12] = {0, 0, 0, 3, 3, 5, 6, 6, 0, 1, 1, 1};
    int32_t pos[12], ks[12];
    lt_doc_layout(tok, 1, 8, 0, pos, ks);
    lt_doc_layout(tok + 8, 1, 4, 0, pos + 8, ks + 8);
    CHECK(!memcmp(pos, want_pos, sizeof pos) && !memcmp(ks, want_ks, sizeof ks),
          "document positions and starts");
    int32_t pos2[8], ks2[8];
    lt_doc_layout(tok, 2, 4, 0, pos2, ks2); /* two rows of 4: row 1 starts afresh */
    const int32_t w2p[8] = {0, 1, 2, 0, 0, 0, 0, 1}, w2k[8] = {0, 0, 0, 3, 0, 1, 2, 2};
    CHECK(!memcmp(pos2, w2p, sizeof pos2) && !memcmp(ks2, w2k, sizeof ks2), "per-row layout");
    lt_doc_layout(tok, 1, 8, -1, pos, ks);
    for (int t = 0; t < 8; t++) CHECK(pos[t] == t && ks[t] == 0, "no eod: position %d", t);
}

static void test_packed_documents(void) {
    packed_documents(tiny_dims());
    packed_documents(tiny_llama_dims());
}

static void test_accumulation(void) {
    /* one micro batch of 4 == two micro batches of 2, gradients summed */
    LtModelDims d = tiny_dims();
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *m4 = lt_model_create(be, &d, 4, d.seq_len, NULL), *m2 = lt_model_create(be, &d, 2, d.seq_len, NULL);
    int32_t in[32], tgt[32];
    init_pair(m4, m2, 5, in, tgt);
    double l4 = lt_model_step(m4, in, tgt, 1.0f / 32);
    double l2 = lt_model_step(m2, in, tgt, 1.0f / 32) + lt_model_step(m2, in + 16, tgt + 16, 1.0f / 32);
    CHECK(test_relerr(l2, l4, 1e-9) < 1e-6, "loss %g vs %g", l2, l4);
    double rel = grad_diff(be, m4, m2);
    CHECK(rel <= 1e-5, "max grad difference %g of the largest gradient", rel);
    lt_model_destroy(m4);
    lt_model_destroy(m2);
    lt_backend_destroy(be);
}

/* The LM head in chunks (uneven: 32 tokens in chunks of 5) gives the loss and
 * gradients of the whole micro batch at once; and the auto chunk rule. */
static void test_lm_head_chunks(void) {
    CHECK(lt_model_lm_head_chunk(16384, 50304, 2, 0) == 8192, "124M auto chunk %d",
          lt_model_lm_head_chunk(16384, 50304, 2, 0));
    CHECK(lt_model_lm_head_chunk(2048, 4096, 4, 0) == 2048, "small model: whole micro batch");
    CHECK(lt_model_lm_head_chunk(100000, 1 << 20, 2, 0) == 4096, "floor at 4096 rows: %d",
          lt_model_lm_head_chunk(100000, 1 << 20, 2, 0));
    CHECK(lt_model_lm_head_chunk(64, 50304, 2, 100) == 64, "request capped at the micro batch");
    CHECK(lt_model_lm_head_chunk(64, 50304, 2, 5) == 5, "request taken");
    LtModelDims d = tiny_dims();
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModelOptions whole = {.lm_head_chunk = 0}, five = {.lm_head_chunk = 5};
    LtModel *a = lt_model_create(be, &d, 4, d.seq_len, &whole);
    LtModel *b = lt_model_create(be, &d, 4, d.seq_len, &five);
    CHECK(a->xent_chunk == 32 && b->xent_chunk == 5, "chunks %d, %d", a->xent_chunk, b->xent_chunk);
    int32_t in[32], tgt[32];
    init_pair(a, b, 9, in, tgt);
    double la = lt_model_step(a, in, tgt, 1.0f / 32), lb = lt_model_step(b, in, tgt, 1.0f / 32);
    CHECK(test_relerr(lb, la, 1e-9) < 1e-6, "loss %g vs %g", lb, la);
    double rel = grad_diff(be, a, b);
    CHECK(rel <= 1e-5, "max grad difference %g of the largest gradient", rel);
    lt_model_destroy(a);
    lt_model_destroy(b);
    lt_backend_destroy(be);
}

/* AdamW on one fixed batch must drive the loss down (and bf16 must track fp32). */
static double fit_batch(LtDtype dt, int steps, double *first) {
    LtModelDims d = tiny_dims();
    LtBackend *be = lt_backend_cpu_create(dt, 1);
    LtModel *m = lt_model_create(be, &d, 2, d.seq_len, NULL);
    float *host = malloc(m->table.total * sizeof(float));
    lt_params_init(&m->table, 8, host);
    lt_model_set_params(m, host);
    LtConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.optimizer.lr = 1e-2;
    cfg.optimizer.min_lr = 1e-2;
    cfg.optimizer.decay_steps = steps;
    cfg.optimizer.beta1 = 0.9;
    cfg.optimizer.beta2 = 0.95;
    cfg.optimizer.eps = 1e-8;
    cfg.optimizer.weight_decay = 0.1;
    LtComm *dp = lt_comm_world("dp"); /* one rank: no MPI in this test */
    LtOptimizer *o = lt_optim_create(be, &m->table, &cfg, dp, m->flat, host);
    int32_t in[16], tgt[16];
    random_tokens(in, 16, d.vocab, 31);
    random_tokens(tgt, 16, d.vocab, 32);
    double loss = 0;
    for (int s = 0; s < steps; s++) {
        lt_model_zero_grads(m);
        loss = lt_model_step(m, in, tgt, 1.0f / 16) / 16;
        if (s == 0) *first = loss;
        lt_optim_reduce_grads(o, m->grads);
        double norm = lt_optim_grad_norm(o, m->grads);
        lt_optim_step(o, m->params, m->grads, lt_lr_at(&cfg, s), lt_clip_coef(1.0, norm), NULL);
    }
    if (dt == LT_BF16) { /* parameters stay bf16-representable */
        float *p = malloc(m->table.total * sizeof(float));
        be->ops->download(be, p, m->params, m->table.total * sizeof(float));
        int ok = 1;
        for (size_t i = 0; i < m->table.total; i++) ok &= lt_bf16_round(p[i]) == p[i];
        CHECK(ok, "bf16 parameters are not bf16-representable");
        free(p);
    }
    free(host);
    lt_optim_destroy(o);
    lt_comm_free(dp);
    lt_model_destroy(m);
    lt_backend_destroy(be);
    return loss;
}

static void test_fit_batch(void) {
    double f32_first, bf_first;
    double f32 = fit_batch(LT_F32, 40, &f32_first);
    double bf = fit_batch(LT_BF16, 40, &bf_first);
    CHECK(f32 < 0.5 * f32_first, "fp32 loss %.4f -> %.4f did not halve", f32_first, f32);
    CHECK(bf < 0.5 * bf_first, "bf16 loss %.4f -> %.4f did not halve", bf_first, bf);
    CHECK(fabs(bf_first - f32_first) < 1e-2 * f32_first, "bf16 first loss %.5f vs fp32 %.5f",
          bf_first, f32_first);
}

static void test_lr_schedule(void) {
    LtConfig c;
    memset(&c, 0, sizeof c);
    c.optimizer.lr = 1.0;
    c.optimizer.min_lr = 0.1;
    c.optimizer.warmup_steps = 4;
    c.optimizer.decay_steps = 14;
    CHECK(fabs(lt_lr_at(&c, 0) - 0.25) < 1e-12, "warmup start %g", lt_lr_at(&c, 0));
    CHECK(fabs(lt_lr_at(&c, 3) - 1.0) < 1e-12, "warmup end %g", lt_lr_at(&c, 3));
    CHECK(fabs(lt_lr_at(&c, 4) - 1.0) < 1e-12, "cosine start %g", lt_lr_at(&c, 4));
    CHECK(fabs(lt_lr_at(&c, 9) - 0.55) < 1e-12, "cosine middle %g", lt_lr_at(&c, 9));
    CHECK(fabs(lt_lr_at(&c, 14) - 0.1) < 1e-12 && fabs(lt_lr_at(&c, 100) - 0.1) < 1e-12,
          "after decay %g", lt_lr_at(&c, 14));
    CHECK(lt_clip_coef(1.0, 4.0) < 0.25 && lt_clip_coef(1.0, 4.0) > 0.2499, "clip");
    CHECK(lt_clip_coef(1.0, 0.5) == 1.0 && lt_clip_coef(0.0, 100.0) == 1.0, "no clip");
}

/* The overrides that set c's schedule to a fixture case's styles. */
static int set_styles(LtConfig *c, const char *style, const char *wsd, long span) {
    char o1[64], o2[64], o3[64], err[256];
    char *ov[] = {o1, o2, o3};
    snprintf(o1, sizeof o1, "optimizer.lr_decay_style=%s", style);
    snprintf(o2, sizeof o2, "optimizer.lr_wsd_decay_style=%s", wsd);
    snprintf(o3, sizeof o3, "optimizer.lr_wsd_decay_steps=%ld", span);
    const int n = strcmp(style, "wsd") == 0 ? 3 : 1;
    if (lt_config_apply_overrides(c, n, ov, err, sizeof err) == 0) return 0;
    printf("  %s\n", err);
    return -1;
}

/* lt_lr_at against Megatron-LM's own OptimizerParamScheduler: every case of
 * tests/data/megatron_lr.txt (tests/megatron_lr_fixture.py: each decay style,
 * each WSD decay style, with and without a warm-up), every update up to past
 * decay_steps. Update s is Megatron's num_steps s + 1 during the warm-up and
 * s after it (optim.h). The cases also pass lt_config_validate. */
static void test_lr_megatron(void) {
    FILE *f = fopen("tests/data/megatron_lr.txt", "r");
    REQUIRE(f, "cannot open tests/data/megatron_lr.txt (run from the repository root)");
    char line[256], style[32], wsd[32], err[256];
    int cases = 0, bad = 0;
    long compared = 0;
    double lr, min_lr, meg[128];
    long warm, decay, span;
    int n;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        const int got_case = sscanf(line, "case %31s %31s %lf %lf %ld %ld %ld %d", style, wsd,
                                    &lr, &min_lr, &warm, &decay, &span, &n);
        REQUIRE(got_case == 8 && n >= 0 && n < 128, "not a case line: %s", line);
        for (int i = 0, k = -1; i <= n; i++) {
            const int ok = fgets(line, sizeof line, f) && sscanf(line, "%d %lf", &k, &meg[i]) == 2;
            REQUIRE(ok && k == i, "%s case %d: num_steps %d: %s", style, cases, i, line);
        }
        LtConfig c;
        lt_config_defaults(&c);
        c.optimizer.lr = lr, c.optimizer.min_lr = min_lr;
        c.optimizer.warmup_steps = warm, c.optimizer.decay_steps = decay;
        c.train.steps = n;
        REQUIRE(set_styles(&c, style, strcmp(wsd, "-") ? wsd : "exponential", span) == 0,
                "%s/%s", style, wsd);
        CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "%s/%s: %s", style, wsd, err);
        for (long s = 0; s <= n; s++) {
            const long k = s < warm ? s + 1 : s;
            if (k > n) break;
            const double got = lt_lr_at(&c, s), rel = test_relerr(got, meg[k], 1e-30);
            compared++;
            if (rel <= 1e-12 || ++bad > 10) continue;
            CHECK(0, "%s/%s lr %g min_lr %g warmup %ld decay %ld wsd %ld: update %ld (num_steps "
                  "%ld): lattice %.17g, Megatron %.17g",
                  style, wsd, lr, min_lr, warm, decay, span, s, k, got, meg[k]);
        }
        cases++;
    }
    fclose(f);
    CHECK(bad == 0, "%d of %ld learning rates differ", bad, compared);
    CHECK(cases == 28, "%d cases (4 styles x 3 settings + 4 WSD styles x 4 settings)", cases);
    printf("  %d cases, %ld learning rates compared with Megatron's\n", cases, compared);
}

static void test_flops(void) {
    /* Megatron's 72*s*L*h^2*(1 + s/(6h) + V/(12Lh)) with ffn = 4h */
    LtModelDims d = {.num_layers = 12, .hidden = 768, .heads = 12, .ffn = 3072, .seq_len = 1024,
                     .max_pos = 1024, .vocab = 50257, .padded_vocab = 50304};
    double s = 1024, L = 12, h = 768, V = 50304;
    double ref = 72.0 * s * L * h * h * (1.0 + s / (6 * h) + V / (12 * L * h));
    CHECK(test_relerr(lt_model_flops_per_sample(&d, 0), ref, 1) < 1e-12, "flops %g vs %g",
          lt_model_flops_per_sample(&d, 0), ref);
    CHECK(lt_model_flops_per_sample(&d, 1) < ref, "causal count not smaller");
    /* a 127-token window in every other layer: those layers count 128 keys per
     * query past the first 128 positions, sum min(t + 1, 128) = 128*129/2 +
     * 896*128 of the causal 1024*1025/2 pairs */
    d.window = 127;
    for (int l = 0; l < 12; l += 2) d.window_layer[l] = 1;
    const double band = (128.0 * 129 / 2 + 896.0 * 128) / (1024.0 * 1025 / 2);
    const double attn = 3.0 * s * 4.0 * s * h; /* one full layer's, non-causal count */
    const double want = ref - 6 * attn * (1.0 - band);
    CHECK(test_relerr(lt_model_flops_per_sample(&d, 0), want, 1) < 1e-12,
          "windowed flops %g vs %g", lt_model_flops_per_sample(&d, 0), want);
    d.window = 1023; /* the whole sequence: no saving */
    CHECK(test_relerr(lt_model_flops_per_sample(&d, 0), ref, 1) < 1e-12, "1023-token window");
}

/* Sliding-window attention: with every layer windowed (W = 1, two layers) the
 * last position's logits see the tokens of the W L = 2 positions before it
 * and not the one before those; gradients by finite differences with a
 * window alternating with full layers. */
static void test_sliding_window(void) {
    LtModelDims d = tiny_llama_dims();
    d.window = 1, d.window_layer[0] = d.window_layer[1] = 1;
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *m = lt_model_create(be, &d, 2, d.seq_len, NULL);
    float *host = malloc(m->table.total * sizeof(float));
    lt_params_init(&m->table, 8, host);
    lt_model_set_params(m, host);
    int32_t tok[8];
    random_tokens(tok, 8, d.vocab, 31);
    float base[37], other[37];
    lt_model_next_logits(m, tok, 8, base);
    int32_t far[8], near[8];
    memcpy(far, tok, sizeof tok), memcpy(near, tok, sizeof tok);
    far[4] = (tok[4] + 1) % d.vocab, near[5] = (tok[5] + 1) % d.vocab;
    double dfar = 0.0, dnear = 0.0;
    lt_model_next_logits(m, far, 8, other);
    for (int v = 0; v < 37; v++) dfar += fabs(other[v] - base[v]);
    lt_model_next_logits(m, near, 8, other);
    for (int v = 0; v < 37; v++) dnear += fabs(other[v] - base[v]);
    CHECK(dfar == 0.0 && dnear > 1e-6, "token 4 moved the logits by %g, token 5 by %g", dfar,
          dnear);
    free(host);
    lt_model_destroy(m);
    lt_backend_destroy(be);
    LtModelDims g = tiny_dims(); /* GPT: layer 0 windowed (3 tokens back), layer 1 full */
    g.window = 3, g.window_layer[0] = 1;
    gradient_check(g);
}

/* model.kv_channels: heads narrower (GPT, 2 x 6 < hidden 16) and wider (Llama,
 * 4 x 12 > hidden 32) than hidden / heads, by finite differences; the table's
 * projections take the query width. */
static void test_kv_channels(void) {
    LtModelDims g = tiny_dims(), l = tiny_llama_dims();
    g.head_dim = 6, l.head_dim = 12;
    gradient_check(g);
    gradient_check(l);
    LtParamTable t;
    lt_params_build(&t, &l);
    const LtParam *qkv = lt_params_find(&t, "h.0.attn.qkv.weight"),
                  *proj = lt_params_find(&t, "h.0.attn.proj.weight");
    CHECK(qkv->gshape[0] == (4 + 2 * 2) * 12 && qkv->gshape[1] == 32 && proj->gshape[0] == 32 &&
              proj->gshape[1] == 48,
          "qkv %lld x %lld, proj %lld x %lld", (long long)qkv->gshape[0],
          (long long)qkv->gshape[1], (long long)proj->gshape[0], (long long)proj->gshape[1]);
    lt_params_free(&t);
}

/* model.qk_layernorm: finite differences through the per-head q/k RMSNorm (Llama, GQA 4
 * over 2, head dim 12 != hidden / heads, and an MoE layer); the table's two HD weights
 * per layer (ones, replicated over TP, no decay) after qkv; full and selective
 * recomputation give the same loss and gradients bitwise; and the norm changes the
 * loss (off vs on with the same shared weights). */
static void test_qk_layernorm(void) {
    LtModelDims d = tiny_llama_dims();
    d.head_dim = 12, d.qk_norm = 1;
    gradient_check(d);
    gradient_check(moe_dims(d));
    LtParamTable t;
    lt_params_build_tp(&t, &d, 2, 1);
    const LtParam *q = lt_params_find(&t, "h.1.attn.q_norm.weight"),
                  *k = lt_params_find(&t, "h.1.attn.k_norm.weight");
    REQUIRE(q && k, "q_norm / k_norm missing from the table");
    CHECK(q == lt_params_find(&t, "h.1.attn.qkv.weight") + 1 && k == q + 1, "not after qkv");
    CHECK(q->numel == 12 && k->numel == 12 && q->split == LT_SPLIT_NONE &&
              k->split == LT_SPLIT_NONE && !q->decay && !k->decay && q->init == LT_INIT_ONES &&
              k->init == LT_INIT_ONES,
          "q_norm %zu elements, split %d, decay %d, init %d", q->numel, (int)q->split, q->decay,
          (int)q->init);
    lt_params_free(&t);
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModel *ms[3];
    for (int r = 0; r < 3; r++) {
        LtModelOptions o = {.recompute = r};
        ms[r] = lt_model_create(be, &d, 2, d.seq_len, &o);
    }
    int32_t in[32], tgt[32];
    init_pair(ms[0], ms[1], 5, in, tgt);
    init_pair(ms[0], ms[2], 5, in, tgt);
    double loss[3];
    for (int r = 0; r < 3; r++) lt_model_zero_grads(ms[r]), loss[r] = sample_step(ms[r], in, tgt);
    CHECK(loss[1] == loss[0] && loss[2] == loss[0] && grad_diff(be, ms[0], ms[1]) == 0.0 &&
              grad_diff(be, ms[0], ms[2]) == 0.0,
          "recomputation changed the loss (%.9g, %.9g, %.9g) or the gradients", loss[0],
          loss[1], loss[2]);
    LtModelDims off = d;
    off.qk_norm = 0;
    LtModel *mo = lt_model_create(be, &off, 2, d.seq_len, NULL);
    float *host = malloc(mo->table.total * sizeof(float));
    lt_params_init(&mo->table, 5, host);
    lt_model_set_params(mo, host);
    const double lo = sample_step(mo, in, tgt);
    CHECK(test_relerr(lo, loss[0], 1e-9) > 1e-4, "qk_layernorm on %.9g vs off %.9g", loss[0], lo);
    free(host);
    lt_model_destroy(mo);
    for (int r = 0; r < 3; r++) lt_model_destroy(ms[r]);
    lt_backend_destroy(be);
}

/* model.add_bias_linear / add_qkv_bias on the Llama block: finite differences
 * through every bias (dense; an MoE layer with a shared expert and the router
 * bias; the qkv bias alone with the q/k norms); the table's order (each bias
 * after its weight, the qkv bias before the norms), inits (zeros; the router's
 * normal), no decay, TP splits (qkv by heads, gate | up by blocks, proj and
 * down whole); and the biases change the loss (the router's from the start). */
static void test_linear_bias(void) {
    LtModelDims d = tiny_llama_dims();
    d.linear_bias = 1;
    gradient_check(d);
    LtModelDims moe = moe_dims(d);
    moe.moe.shared_ffn = 16;
    gradient_check(moe);
    LtModelDims qkv = tiny_llama_dims();
    qkv.qkv_bias = 1, qkv.qk_norm = 1;
    gradient_check(qkv);
    LtParamTable t;
    lt_params_build_tp(&t, &moe, 2, 1);
    static const char *const order[][2] = {
        {"h.1.attn.qkv.weight", "h.1.attn.qkv.bias"},
        {"h.1.attn.proj.weight", "h.1.attn.proj.bias"},
        {"h.1.mlp.shared.gate_up.weight", "h.1.mlp.shared.gate_up.bias"},
        {"h.1.mlp.shared.down.weight", "h.1.mlp.shared.down.bias"},
        {"h.1.mlp.router.weight", "h.1.mlp.router.bias"},
        {"h.1.mlp.experts.3.gate_up.weight", "h.1.mlp.experts.3.gate_up.bias"},
        {"h.1.mlp.experts.3.down.weight", "h.1.mlp.experts.3.down.bias"},
        {"h.0.mlp.gate_up.weight", "h.0.mlp.gate_up.bias"},
        {"h.0.mlp.down.weight", "h.0.mlp.down.bias"}};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const LtParam *w = lt_params_find(&t, order[i][0]), *b = lt_params_find(&t, order[i][1]);
        REQUIRE(w && b, "%s or %s missing", order[i][0], order[i][1]);
        const int router = strstr(b->name, "router") != NULL;
        CHECK(b == w + 1 && b->ndim == 1 && b->gshape[0] == w->gshape[0] && !b->decay &&
                  b->init == (router ? LT_INIT_NORMAL : LT_INIT_ZEROS),
              "%s: after %s, %lld rows, decay %d, init %d", b->name, w->name,
              (long long)b->gshape[0], b->decay, (int)b->init);
        const int whole = strstr(b->name, "proj.") || strstr(b->name, "down.") || router ||
                          strstr(b->name, ".experts.");
        CHECK(b->split == (whole ? LT_SPLIT_NONE : LT_SPLIT_BLOCKS) &&
                  b->numel * (whole ? 1 : 2) == (size_t)b->gshape[0],
              "%s: split %d, %zu elements", b->name, (int)b->split, b->numel);
    }
    lt_params_free(&t);
    lt_params_build(&t, &qkv);
    const LtParam *qb = lt_params_find(&t, "h.0.attn.qkv.bias");
    CHECK(qb && qb == lt_params_find(&t, "h.0.attn.qkv.weight") + 1 &&
              qb + 1 == lt_params_find(&t, "h.0.attn.q_norm.weight") &&
              !lt_params_find(&t, "h.0.attn.proj.bias") && !lt_params_find(&t, "h.0.mlp.down.bias"),
          "the qkv bias alone: not between qkv.weight and q_norm, or other biases");
    lt_params_free(&t);
    /* the biases (zeros) leave the first loss as it was; the router's (normal) does not */
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModelDims moe0 = moe;
    moe0.linear_bias = 0;
    const LtModelDims pairs[2][2] = {{tiny_llama_dims(), d}, {moe0, moe}};
    double loss[2][2];
    int32_t in[32], tgt[32];
    random_tokens(in, 2 * d.seq_len, d.vocab, 5);
    random_tokens(tgt, 2 * d.seq_len, d.vocab, 6);
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 2; b++) {
            LtModel *m = lt_model_create(be, &pairs[k][b], 2, d.seq_len, NULL);
            float *host = malloc(m->table.total * sizeof(float));
            lt_params_init(&m->table, 5, host);
            loss[k][b] = loss_with(m, host, in, tgt);
            free(host);
            lt_model_destroy(m);
        }
    CHECK(test_relerr(loss[0][1], loss[0][0], 1e-9) < 1e-7,
          "zero biases changed the loss: %.9g vs %.9g", loss[0][0], loss[0][1]);
    CHECK(test_relerr(loss[1][1], loss[1][0], 1e-9) > 1e-6, "the router bias changed nothing");
}

/* model.softmax_type: finite differences through learnable softmax offsets (GPT; Llama
 * with GQA, a sliding window, q/k norms and an MoE layer) and off-by-one's zero logits;
 * the offsets' table entry (heads elements before attn.proj.weight, split over TP by
 * heads like the q rows, normal init, no decay; TP rank 1 of 2 holds heads 2 and 3);
 * off-by-one and learnable offsets of zero give the same loss (the same softmax). */
static void test_softmax_offsets(void) {
    LtModelDims g = tiny_dims(), l = tiny_llama_dims();
    g.softmax_type = LT_SOFTMAX_LEARNABLE;
    gradient_check(g);
    l.softmax_type = LT_SOFTMAX_LEARNABLE, l.head_dim = 12, l.qk_norm = 1;
    l.window = 3, l.window_layer[1] = 1;
    gradient_check(moe_dims(l));
    l.softmax_type = LT_SOFTMAX_OFF_BY_ONE;
    gradient_check(l);
    l.softmax_type = LT_SOFTMAX_LEARNABLE;
    LtParamTable t;
    lt_params_build_tp(&t, &l, 2, 1);
    const LtParam *o = lt_params_find(&t, "h.1.attn.softmax_offset");
    REQUIRE(o != NULL, "h.1.attn.softmax_offset missing from the table");
    CHECK(o + 1 == lt_params_find(&t, "h.1.attn.proj.weight"), "not before attn.proj.weight");
    CHECK(o->gshape[0] == 4 && o->numel == 2 && o->split == LT_SPLIT_ROWS && !o->decay &&
              o->init == LT_INIT_NORMAL && lt_param_global_index(&t, o, 0) == 2,
          "softmax_offset %lld global, %zu here, split %d, decay %d, init %d",
          (long long)o->gshape[0], o->numel, (int)o->split, o->decay, (int)o->init);
    lt_params_free(&t);
    /* zero offsets: off-by-one's softmax */
    LtBackend *be = lt_backend_cpu_create(LT_F32, 1);
    LtModelDims z = tiny_llama_dims(), f = z;
    z.softmax_type = LT_SOFTMAX_LEARNABLE, f.softmax_type = LT_SOFTMAX_OFF_BY_ONE;
    LtModel *mz = lt_model_create(be, &z, 2, z.seq_len, NULL),
            *mf = lt_model_create(be, &f, 2, f.seq_len, NULL);
    int32_t in[32], tgt[32];
    init_pair(mf, mf, 5, in, tgt);
    float *host = malloc(mz->table.total * sizeof(float));
    lt_params_init(&mz->table, 5, host);
    for (int i = 0; i < mz->table.n; i++)
        if (strstr(mz->table.p[i].name, ".softmax_offset"))
            memset(host + mz->table.p[i].offset, 0, mz->table.p[i].numel * sizeof(float));
    lt_model_set_params(mz, host);
    const double lz = sample_step(mz, in, tgt), lf = sample_step(mf, in, tgt);
    CHECK(test_relerr(lz, lf, 1e-9) < 1e-6, "zero offsets %.9g vs off-by-one %.9g", lz, lf);
    free(host);
    lt_model_destroy(mz), lt_model_destroy(mf);
    lt_backend_destroy(be);
}

/* The Llama table: names and shapes, and tensor-parallel shards that hold
 * their query heads, key/value heads and gate/up rows (each block split) and
 * put every global element back exactly once. */
static void test_llama_table(void) {
    LtModelDims d = tiny_llama_dims(); /* C 32, NH 4, NKV 2, HD 8, F 48 */
    LtParamTable g;
    lt_params_build(&g, &d);
    CHECK(g.n == 1 + 6 * d.num_layers + 2 && g.idx_wpe < 0 && g.idx_head == g.n - 1,
          "%d parameters, wpe %d, lm_head %d", g.n, g.idx_wpe, g.idx_head);
    const LtParam *qkv = lt_params_find(&g, "h.1.attn.qkv.weight");
    const LtParam *gu = lt_params_find(&g, "h.1.mlp.gate_up.weight");
    const LtParam *dn = lt_params_find(&g, "h.1.mlp.down.weight");
    REQUIRE(qkv && gu && dn && lt_params_find(&g, "ln_f.weight") &&
                !lt_params_find(&g, "ln_f.bias") && !lt_params_find(&g, "h.0.attn.qkv.bias"),
            "llama parameter names");
    CHECK(qkv->gshape[0] == (4 + 2 * 2) * 8 && qkv->gshape[1] == 32 && gu->gshape[0] == 96 &&
              dn->gshape[0] == 32 && dn->gshape[1] == 48,
          "shapes qkv %lldx%lld gate_up %lld down %lldx%lld", (long long)qkv->gshape[0],
          (long long)qkv->gshape[1], (long long)gu->gshape[0], (long long)dn->gshape[0],
          (long long)dn->gshape[1]);
    float *G = malloc(g.total * sizeof(float)), *back = malloc(g.total * sizeof(float));
    for (size_t i = 0; i < g.total; i++) G[i] = (float)i, back[i] = -1.0f;
    int rows_ok = 1;
    for (int r = 0; r < 2; r++) {
        LtParamTable t;
        lt_params_build_tp(&t, &d, 2, r);
        float *shard = malloc(t.total * sizeof(float));
        lt_params_from_global(&t, shard, &g, G);
        /* local qkv rows: q heads 2r, 2r+1 (16 rows), k head r, v head r (8 rows each) */
        const LtParam *q = lt_params_find(&t, "h.1.attn.qkv.weight");
        for (int i = 0; i < 32; i++) {
            const int want = i < 16 ? 16 * r + i : i < 24 ? 32 + 8 * r + (i - 16)
                                                           : 48 + 8 * r + (i - 24);
            rows_ok &= shard[q->offset + (size_t)i * 32] == G[qkv->offset + (size_t)want * 32];
        }
        const LtParam *u = lt_params_find(&t, "h.1.mlp.gate_up.weight"); /* gate 24 | up 24 */
        for (int i = 0; i < 48; i++) {
            const int want = i < 24 ? 24 * r + i : 48 + 24 * r + (i - 24);
            rows_ok &= shard[u->offset + (size_t)i * 32] == G[gu->offset + (size_t)want * 32];
        }
        lt_params_to_global(&t, shard, &g, back, r == 0);
        free(shard);
        lt_params_free(&t);
    }
    CHECK(rows_ok, "tensor-parallel shards hold the wrong rows of qkv or gate_up");
    CHECK(memcmp(G, back, g.total * sizeof(float)) == 0, "shards do not rebuild the model");
    free(G);
    free(back);
    lt_params_free(&g);
}

/* Llama 3.1 8B's training FLOPs per sample from its parameter count: 6 FLOPs
 * per matmul parameter and token plus attention's 12 L s^2 h. */
static void test_llama_flops(void) {
    LtModelDims d = {.num_layers = 32, .hidden = 4096, .heads = 32, .ffn = 14336,
                     .seq_len = 8192, .max_pos = 8192, .vocab = 128256, .padded_vocab = 128256,
                     .arch = LT_ARCH_LLAMA, .kv_heads = 8, .untied = 1};
    const double h = 4096, L = 32, s = 8192, V = 128256, kv = 8 * 128, F = 14336;
    const double matmul = L * (h * (h + 2 * kv) + h * h + 3 * h * F) + h * V;
    const double ref = 6 * s * matmul + 12 * L * s * s * h;
    CHECK(test_relerr(lt_model_flops_per_sample(&d, 0), ref, 1) < 1e-12, "llama flops %g vs %g",
          lt_model_flops_per_sample(&d, 0), ref);
    CHECK(fabs(matmul / 7.5e9 - 1) < 0.01, "8B matmul parameters %g", matmul);
}

/* Pipeline layer splits (layer_split.h) against worked examples in
 * Megatron-LM's terms, and every valid split's stage tables: each global
 * layer held exactly once, chunks in model order (virtual stage c * pp + r),
 * names following lt_params_global_layer. */
static void test_layer_split(void) {
    static const struct {
        int L, pp, vpp;
        LtLayerSplit s;
        const char *want; /* layers per virtual stage in model order; NULL: refused */
    } cases[] = {
        {8, 2, 2, {0}, "2 2 2 2"},
        {10, 4, 1, {.first = 1, .last = 3}, "1 3 3 3"},
        {8, 3, 1, {.first = 2, .last = 2}, "2 4 2"},
        {8, 4, 1, {.last = 5}, "1 1 1 5"},
        {8, 2, 2, {.first = 2}, "1 3 1 3"},
        {4, 2, 2, {.first = 2, .last = 2}, "1 1 1 1"}, /* (no middle stage) */
        {126, 8, 8, {.embedding = 1, .loss = 1}, NULL}, /* (128 / 64 = 2 a chunk, checked below) */
        {8, 2, 5, {.embedding = 1, .loss = 1}, "0 1 1 1 1 1 1 1 1 0"},
        {8, 3, 1, {.embedding = 1}, "2 3 3"},
        {7, 2, 1, {.loss = 1}, "4 3"},
        /* refused (but the one-stage case above): */
        {8, 3, 1, {0}, NULL},
        {8, 1, 1, {.embedding = 1, .loss = 1}, "8"}, /* one stage: every layer */
        {8, 1, 1, {.first = 8}, NULL},
        {8, 2, 1, {.first = 2, .loss = 1}, NULL},
        {8, 2, 2, {.first = 3}, NULL},
        {8, 3, 1, {.first = 4, .last = 4}, NULL},
        {8, 2, 1, {.first = 4, .last = 3}, NULL},
        {8, 4, 1, {.first = 1, .last = 2}, NULL},
        {8, 4, 1, {.embedding = 1, .loss = 1}, NULL},
        {8, 2, 1, {.first = -1}, NULL},
        /* sizes whose products or sums overflow an int */
        {8, 3, 1, {.first = INT_MAX, .last = INT_MAX}, NULL},
        {8, 4, 1073741824, {0}, NULL},
        {8, 3, 1431655766, {.loss = 1}, NULL},
        {8, 2, 1073741824, {.first = 2}, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int L = cases[i].L, pp = cases[i].pp, vpp = cases[i].vpp;
        const LtLayerSplit *s = &cases[i].s;
        char err[512] = "";
        const int ok = lt_layer_split_check(s, L, pp, vpp, err, sizeof err) == 0;
        if (cases[i].L == 126) { /* Llama 3.1 405B, PP 8 x VPP 8: a layer less at each end */
            CHECK(ok && lt_layer_split_count(s, L, pp, vpp, 0, 0) == 1 &&
                      lt_layer_split_count(s, L, pp, vpp, 3, 4) == 2 &&
                      lt_layer_split_count(s, L, pp, vpp, 7, 7) == 1 &&
                      lt_layer_split_start(s, L, pp, vpp, 7, 7) == 125,
                  "405B split: %s", err);
            continue;
        }
        if (!cases[i].want) {
            CHECK(!ok && err[0], "case %zu: a bad split accepted", i);
            continue;
        }
        REQUIRE(ok, "case %zu refused: %s", i, err);
        char got[256] = "";
        size_t used = 0;
        int next = 0; /* the next virtual stage starts where the previous ended */
        for (int v = 0; v < pp * vpp; v++) {
            const int n = lt_layer_split_count(s, L, pp, vpp, v % pp, v / pp);
            CHECK(lt_layer_split_start(s, L, pp, vpp, v % pp, v / pp) == next, "case %zu stage %d", i, v);
            next += n;
            used += (size_t)snprintf(got + used, sizeof got - used, "%s%d", v ? " " : "", n);
        }
        CHECK(next == L && !strcmp(got, cases[i].want), "case %zu: %s, want %s", i, got, cases[i].want);
        /* the stage tables hold each layer once, under its global name */
        LtModelDims d = tiny_dims();
        d.num_layers = L;
        int *seen = calloc((size_t)L, sizeof(int));
        for (int r = 0; r < pp; r++) {
            LtParamTable t;
            lt_params_build_stage(&t, &d, 1, 0, (LtStagePlace){pp, r, vpp, *s});
            for (int l = 0; l < t.layers; l++) {
                const int g = lt_params_global_layer(&t, l);
                char name[64];
                snprintf(name, sizeof name, "h.%d.ln_1.weight", g);
                CHECK(g >= 0 && g < L && !strcmp(t.p[t.layer_first[l]].name, name),
                      "case %zu rank %d layer %d: global %d", i, r, l, g);
                if (g >= 0 && g < L) seen[g]++;
            }
            lt_params_free(&t);
        }
        for (int g = 0; g < L; g++) CHECK(seen[g] == 1, "case %zu: layer %d held %d times", i, g, seen[g]);
        free(seen);
    }
}

int main(void) {
    RUN(test_initial_loss);
    RUN(test_init_layout_independent);
    RUN(test_gradient_check);
    RUN(test_moe_gradient_check);
    RUN(test_moe_aux_values);
    RUN(test_params_split);
    RUN(test_params_split_etp);
    RUN(test_accumulation);
    RUN(test_doc_layout);
    RUN(test_packed_documents);
    RUN(test_lm_head_chunks);
    RUN(test_fit_batch);
    RUN(test_lr_schedule);
    RUN(test_lr_megatron);
    RUN(test_flops);
    RUN(test_sliding_window);
    RUN(test_kv_channels);
    RUN(test_qk_layernorm);
    RUN(test_linear_bias);
    RUN(test_softmax_offsets);
    RUN(test_llama_table);
    RUN(test_llama_flops);
    RUN(test_layer_split);
    return test_summary();
}
