/* test_config_moe.c - the mixture-of-experts keys (model.moe_*,
 * parallel.expert_*): defaults, loading, model.moe_layer_freq against
 * Megatron-LM's own reading (tests/data/megatron_moe_pattern.txt) and lattice's
 * own refusals, every cross-key refusal and its message, the derived fields,
 * the model dims and the print -> load round trip. */
#include "config.h"
#include "params.h"
#include "test.h"

#include <string.h>

static char g_dir[256]; /* per-run temp dir (test_tmpdir) */

static int has(const char *s, const char *sub) {
    return sub == NULL || strstr(s, sub) != NULL;
}

static int nov(const char *const *ov, int most) {
    int n = 0;
    while (n < most && ov[n]) n++;
    return n;
}

/* lt_moe_layer_pattern on every case Megatron-LM's code decided
 * (tests/megatron_moe_pattern_fixture.py): the same layers, or an error. */
static void test_pattern_megatron(void) {
    FILE *f = fopen("tests/data/megatron_moe_pattern.txt", "r");
    REQUIRE(f, "cannot open tests/data/megatron_moe_pattern.txt (run from the repository root)");
    char line[4096], err[512];
    int cases = 0, errors = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = '\0';
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        REQUIRE(t1 && t2, "bad fixture line: %s", line);
        *t1 = *t2 = '\0';
        const int layers = atoi(line);
        const char *want = t1 + 1, *text = t2 + 1;
        unsigned char got[LT_MOE_MAX_LAYERS];
        memset(got, 7, sizeof got);
        const int rc = lt_moe_layer_pattern(text, layers, got, err, sizeof err);
        cases++;
        if (!strcmp(want, "error")) {
            errors++;
            CHECK(rc == -1 && has(err, "model.moe_layer_freq"), "'%s' (%d layers) accepted; "
                  "Megatron refuses it", text, layers);
            CHECK(got[0] == 7, "'%s': layers written on error", text);
            continue;
        }
        CHECK(rc == 0, "'%s' (%d layers) refused: %s", text, layers, err);
        if (rc) continue;
        char mine[LT_MOE_MAX_LAYERS + 1];
        for (int l = 0; l < layers; l++) mine[l] = (char)('0' + got[l]);
        mine[layers] = '\0';
        CHECK(!strcmp(mine, want), "'%s': lattice %s, Megatron %s", text, mine, want);
    }
    fclose(f);
    CHECK(cases >= 40 && errors >= 15, "%d cases, %d errors", cases, errors);
    printf("  %d patterns compared with Megatron's (%d refused by both)\n", cases, errors);
}

/* What lattice adds (spaces) and the messages of its refusals. */
static void test_pattern_lattice(void) {
    unsigned char got[LT_MOE_MAX_LAYERS];
    char err[512];
    REQUIRE(lt_moe_layer_pattern(" ( [0] * 3 + [1]\t* 29 ) ", 32, got, err, sizeof err) == 0, "%s",
            err);
    CHECK(got[0] == 0 && got[2] == 0 && got[3] == 1 && got[31] == 1, "spaces");
    REQUIRE(lt_moe_layer_pattern(" 3 ", 7, got, err, sizeof err) == 0, "%s", err);
    CHECK(got[0] && !got[1] && !got[2] && got[3] && got[6], "k = 3 with spaces");
    REQUIRE(lt_moe_layer_pattern("[1, 0, 1, 1]", 4, got, err, sizeof err) == 0, "%s", err);
    CHECK(got[0] && !got[1] && got[2] && got[3], "list with spaces");
    REQUIRE(lt_moe_layer_pattern("[1]*1024", 1024, got, err, sizeof err) == 0, "%s", err);
    CHECK(got[1023] == 1, "the largest pattern");

    char deep[300] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "(");
    strcat(deep, "[1]");
    for (int i = 0; i < 100; i++) strcat(deep, ")");
    static const struct {
        const char *text;
        int layers;
        const char *want[3];
    } bad[] = {
        {"[1,0,1]", 4, {"model.moe_layer_freq '[1,0,1]'", "lists 3 layers",
                        "model.num_layers is 4"}},
        {"[1,0,1,1,1]", 4, {"lists 5 layers", "model.num_layers is 4"}},
        {"[1,0,2,1]", 4, {"'[1,0,2,1]'", "the entry of layer 2 is a number, not 0 or 1"}},
        {"abc", 4, {"model.moe_layer_freq 'abc'", "expected an integer"}},
        {"", 4, {"model.moe_layer_freq ''", "expected an integer"}},
        {"   ", 4, {"expected an integer"}},
        {"0", 4, {"model.moe_layer_freq '0'", "k must be >= 1"}},
        {"2x", 4, {"unexpected text after the integer"}},
        {"[]", 4, {"lists 0 layers"}},
        {"[1,0", 2, {"expected ',' or ']'"}},
        {"[1,", 2, {"the text ends where a value is expected"}},
        {"[1,0]]", 2, {"unexpected text"}},
        {"[1]*[1]", 1, {"a list times a list"}},
        {"[1]+1", 1, {"a list plus a number"}},
        {"[[1]]", 1, {"the entry of layer 0 is a list"}},
        {"[01]", 1, {"leading zero"}},
        {"[1]*2000", 1024, {"past 1024 entries"}},
        {"[1]*99999999999", 4, {"a number too large"}},
        {"[1]*2*0+2", 4, {"a list plus a number"}},
        {"[-1,0]", 2, {"expected a number, '(' or '['"}},
        {"[1,0]", 1025, {"model.num_layers (1025) must be in [1, 1024]"}},
        {"2", 0, {"model.num_layers (0)"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(got, 7, sizeof got);
        strcpy(err, "(unset)");
        CHECK(lt_moe_layer_pattern(bad[i].text, bad[i].layers, got, err, sizeof err) == -1,
              "'%s' accepted", bad[i].text);
        for (int w = 0; w < 3; w++)
            CHECK(has(err, bad[i].want[w]), "'%s': '%s' not in: %s", bad[i].text, bad[i].want[w],
                  err);
        CHECK(got[0] == 7, "'%s': layers written on error", bad[i].text);
    }
    CHECK(lt_moe_layer_pattern(deep, 1, got, err, sizeof err) == -1 && has(err, "nested too deep"),
          "deep: %s", err);
}

static void test_defaults_and_load(void) {
    LtConfig c;
    char err[512];
    lt_config_defaults(&c);
    CHECK(c.model.num_experts == 0 && c.model.moe_router_topk == 2 &&
              c.model.moe_ffn_hidden_size == 0 && !strcmp(c.model.moe_layer_freq, "1") &&
              c.model.moe_shared_expert_intermediate_size == 0,
          "shape defaults");
    CHECK(c.model.moe_router_score_function == LT_MOE_SOFTMAX && !c.model.moe_router_pre_softmax &&
              c.model.moe_router_topk_scaling_factor == 0 &&
              c.model.moe_router_load_balancing_type == LT_MOE_AUX_LOSS,
          "router defaults");
    CHECK(c.model.moe_aux_loss_coeff == 0 && c.model.moe_z_loss_coeff == 0 &&
              !c.model.moe_router_enable_expert_bias && c.model.moe_router_bias_update_rate == 1e-3,
          "balancing defaults");
    CHECK(c.model.moe_expert_capacity_factor == 0 &&
              c.model.moe_token_drop_policy == LT_MOE_DROP_PROBS &&
              !c.model.moe_pad_expert_input_to_capacity,
          "capacity defaults");
    CHECK(c.parallel.expert_model_parallel_size == 1 && c.parallel.expert_tensor_parallel_size == 1,
          "expert parallel defaults");
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "dense defaults: %s", err);
    for (int l = 0; l < LT_MOE_MAX_LAYERS; l++) REQUIRE(!c.model.moe_layer[l], "dense layer %d", l);
    CHECK(c.model.moe_ffn_hidden_size == 0, "dense: moe_ffn_hidden_size stays 0");

    const char *path = "cfg.yaml";
    char full[300];
    snprintf(full, sizeof full, "%s/%s", g_dir, path);
    FILE *f = fopen(full, "w");
    REQUIRE(f, "open %s", full);
    fputs("model:\n  num_layers: 4\n  num_experts: 8\n  moe_router_topk: 2\n"
          "  moe_ffn_hidden_size: 1536\n  moe_layer_freq: [0, 1, 1, 1]\n"
          "  moe_shared_expert_intermediate_size: 2048\n  moe_router_score_function: sigmoid\n"
          "  moe_router_topk_scaling_factor: 2.5\n  moe_router_load_balancing_type: seq_aux_loss\n"
          "  moe_aux_loss_coeff: 0.01\n  moe_z_loss_coeff: 0.001\n"
          "  moe_expert_capacity_factor: 1.25\n  moe_token_drop_policy: position\n"
          "  moe_pad_expert_input_to_capacity: true\n"
          "parallel:\n  expert_model_parallel_size: 1\n  expert_tensor_parallel_size: 1\n", f);
    fclose(f);
    REQUIRE(lt_config_load(&c, full, 0, NULL, err, sizeof err) == 0, "load: %s", err);
    CHECK(!strcmp(c.model.moe_layer_freq, "[0,1,1,1]"), "YAML list stored as '%s'",
          c.model.moe_layer_freq);
    CHECK(c.model.moe_router_score_function == LT_MOE_SIGMOID &&
              c.model.moe_router_load_balancing_type == LT_MOE_SEQ_AUX_LOSS &&
              c.model.moe_token_drop_policy == LT_MOE_DROP_POSITION &&
              c.model.moe_pad_expert_input_to_capacity,
          "enums and bools");
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "validate: %s", err);
    CHECK(!c.model.moe_layer[0] && c.model.moe_layer[1] && c.model.moe_layer[3], "pattern");
    CHECK(c.model.moe_ffn_hidden_size == 1536, "explicit expert width kept");

    /* the other YAML spellings of model.moe_layer_freq */
    static const struct {
        const char *yaml, *stored; /* stored NULL: refused at load, *want in err */
        const char *want;
    } freq[] = {
        {"model:\n  moe_layer_freq: 2\n", "2", NULL},
        {"model:\n  moe_layer_freq: \"([0]*3+[1]*1)\"\n", "([0]*3+[1]*1)", NULL},
        {"model:\n  moe_layer_freq: [1]\n", "[1]", NULL},
        {"model:\n  moe_layer_freq: [1, [0]]\n", NULL, "a layer pattern holds 0s and 1s"},
        {"model:\n  moe_layer_freq: [1, \"0 1\"]\n", NULL, "each item is one 0 or 1"},
        {"model:\n  moe_layer_freq: {a: 1}\n", NULL, "expected a single value"},
    };
    for (size_t i = 0; i < sizeof freq / sizeof freq[0]; i++) {
        f = fopen(full, "w");
        REQUIRE(f, "open %s", full);
        fputs(freq[i].yaml, f);
        fclose(f);
        strcpy(err, "(unset)");
        const int rc = lt_config_load(&c, full, 0, NULL, err, sizeof err);
        if (freq[i].stored)
            CHECK(rc == 0 && !strcmp(c.model.moe_layer_freq, freq[i].stored), "yaml %zu: %s", i,
                  rc ? err : c.model.moe_layer_freq);
        else
            CHECK(rc == -1 && has(err, freq[i].want) && has(err, "model.moe_layer_freq"),
                  "yaml %zu: %s", i, err);
    }

    static const struct {
        const char *ov;
        const char *want[2];
    } bad[] = {
        {"model.num_experts=-1", {"model.num_experts", ">= 0"}},
        {"model.moe_router_topk=0", {"model.moe_router_topk", "1"}},
        {"model.moe_ffn_hidden_size=-5", {"model.moe_ffn_hidden_size", NULL}},
        {"model.moe_router_score_function=sqrtsoftplus", {"softmax", "sigmoid"}},
        {"model.moe_router_load_balancing_type=sinkhorn", {"aux_loss", "seq_aux_loss"}},
        {"model.moe_token_drop_policy=random", {"probs", "position"}},
        {"model.moe_aux_loss_coeff=-0.1", {"model.moe_aux_loss_coeff", NULL}},
        {"model.moe_expert_capacity_factor=-1", {"model.moe_expert_capacity_factor", NULL}},
        {"model.moe_router_pre_softmax=maybe", {"model.moe_router_pre_softmax", NULL}},
        {"parallel.expert_model_parallel_size=0", {"parallel.expert_model_parallel_size", NULL}},
        {"parallel.expert_tensor_parallel_size=0", {"parallel.expert_tensor_parallel_size", NULL}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *ov[] = {(char *)bad[i].ov};
        strcpy(err, "(unset)");
        CHECK(lt_config_load(&c, NULL, 1, ov, err, sizeof err) == -1, "'%s' loaded", bad[i].ov);
        for (int w = 0; w < 2; w++)
            CHECK(has(err, bad[i].want[w]), "'%s': '%s' not in: %s", bad[i].ov, bad[i].want[w],
                  err);
    }
}

/* A valid MoE config: the derived fields, the dims, idempotence, the print
 * -> load round trip. */
static void test_validate_ok(void) {
    LtConfig c;
    char err[512];
    char *ov[] = {"model.num_experts=8", "model.moe_layer_freq=([0]*2+[1]*10)",
                  "model.moe_shared_expert_intermediate_size=512", "model.moe_aux_loss_coeff=0.01",
                  "parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true"};
    REQUIRE(lt_config_load(&c, NULL, 6, ov, err, sizeof err) == 0, "load: %s", err);
    REQUIRE(lt_config_validate(&c, 2, err, sizeof err) == 0, "validate: %s", err);
    CHECK(c.model.moe_ffn_hidden_size == c.model.ffn_hidden_size && c.model.ffn_hidden_size == 3072,
          "moe_ffn_hidden_size resolved to %d", c.model.moe_ffn_hidden_size);
    CHECK(!c.model.moe_layer[0] && !c.model.moe_layer[1] && c.model.moe_layer[2] &&
              c.model.moe_layer[11] && !c.model.moe_layer[12],
          "pattern");
    LtConfig again = c;
    REQUIRE(lt_config_validate(&again, 2, err, sizeof err) == 0, "again: %s", err);
    /* EP folded over TP (2 x 1 ranks), and over TP x DP (2 x 2) */
    LtConfig ep = c;
    ep.parallel.expert_model_parallel_size = 2;
    CHECK(lt_config_validate(&ep, 2, err, sizeof err) == 0, "EP 2 over TP 2: %s", err);
    ep = c;
    ep.parallel.expert_model_parallel_size = 4;
    CHECK(lt_config_validate(&ep, 4, err, sizeof err) == 0, "EP 4 over TP 2 x DP 2: %s", err);
    CHECK(memcmp(&again, &c, sizeof c) == 0, "validate is not idempotent");

    const LtModelDims d = lt_dims_from_config(&c);
    CHECK(d.moe.experts == 8 && d.moe.topk == 2 && d.moe.ffn == 3072 && d.moe.shared_ffn == 512,
          "dims shape");
    CHECK(d.moe.score == LT_MOE_SOFTMAX && !d.moe.pre_softmax && d.moe.topk_scale == 1.0f &&
              d.moe.balance == LT_MOE_AUX_LOSS && d.moe.aux_coeff == 0.01f && d.moe.z_coeff == 0 &&
              d.moe.capacity == 0 && d.moe.drop_policy == LT_MOE_DROP_PROBS && !d.moe.pad,
          "dims routing");
    CHECK(memcmp(d.moe.layer, c.model.moe_layer, sizeof d.moe.layer) == 0, "dims layers");
    CHECK(!lt_dims_moe_layer(&d, 1) && lt_dims_moe_layer(&d, 2), "lt_dims_moe_layer");
    c.model.moe_router_topk_scaling_factor = 2.5;
    CHECK(lt_dims_from_config(&c).moe.topk_scale == 2.5f, "topk scale");
    c.model.moe_router_topk_scaling_factor = 0;

    char printed[300];
    snprintf(printed, sizeof printed, "%s/printed.yaml", g_dir);
    FILE *f = fopen(printed, "w");
    REQUIRE(f, "open %s", printed);
    lt_config_print(&c, f);
    fclose(f);
    LtConfig back;
    REQUIRE(lt_config_load(&back, printed, 0, NULL, err, sizeof err) == 0, "reload: %s", err);
    REQUIRE(lt_config_validate(&back, 2, err, sizeof err) == 0, "revalidate: %s", err);
    CHECK(memcmp(&back, &c, sizeof c) == 0, "print -> load round trip differs");

    /* every-k-th layer, with capacity and padding, top-1 with pre-softmax */
    char *ov2[] = {"model.num_experts=4", "model.moe_layer_freq=3", "model.moe_router_topk=1",
                   "model.moe_router_pre_softmax=true", "model.moe_expert_capacity_factor=1.5",
                   "model.moe_pad_expert_input_to_capacity=true"};
    REQUIRE(lt_config_load(&c, NULL, 6, ov2, err, sizeof err) == 0, "load: %s", err);
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "validate: %s", err);
    for (int l = 0; l < 12; l++) CHECK(c.model.moe_layer[l] == (l % 3 == 0), "layer %d", l);
    const LtModelDims d2 = lt_dims_from_config(&c);
    CHECK(d2.moe.topk == 1 && d2.moe.pre_softmax && d2.moe.capacity == 1.5f && d2.moe.pad,
          "dims of the second config");
}

typedef struct {
    const char *ov[6];
    int world;
    const char *want[3];
} Refusal;

static void test_refusals(void) {
    static const Refusal cases[] = {
        /* MoE keys without experts */
        {{"model.moe_router_topk=4"}, 1,
         {"model.moe_router_topk is set but model.num_experts is 0"}},
        {{"model.moe_layer_freq=2"}, 1, {"model.moe_layer_freq is set but model.num_experts is 0"}},
        {{"model.moe_ffn_hidden_size=128"}, 1, {"model.moe_ffn_hidden_size is set"}},
        {{"model.moe_aux_loss_coeff=0.01"}, 1, {"model.moe_aux_loss_coeff is set"}},
        {{"model.moe_router_score_function=sigmoid"}, 1, {"model.moe_router_score_function is set"}},
        {{"parallel.expert_model_parallel_size=2"}, 2,
         {"parallel.expert_model_parallel_size is set but model.num_experts is 0"}},
        {{"parallel.expert_tensor_parallel_size=2"}, 2,
         {"parallel.expert_tensor_parallel_size is set"}},
        /* the router */
        {{"model.num_experts=4", "model.moe_router_topk=5"}, 1,
         {"model.moe_router_topk (5) must be <= model.num_experts (4)",
          "try model.moe_router_topk=2"}},
        {{"model.num_experts=4", "model.moe_router_score_function=sigmoid",
          "model.moe_router_pre_softmax=true"}, 1,
         {"model.moe_router_pre_softmax", "model.moe_router_pre_softmax=false"}},
        {{"model.num_experts=4", "model.moe_router_topk=1"}, 1,
         {"model.moe_router_topk=1", "model.moe_router_pre_softmax=true"}},
        {{"model.num_experts=4", "model.moe_router_enable_expert_bias=true"}, 1,
         {"model.moe_router_enable_expert_bias", "model.moe_router_score_function=sigmoid"}},
        /* group-limited routing */
        {{"model.num_experts=8", "model.moe_router_num_groups=4"}, 1,
         {"needs both model.moe_router_num_groups and model.moe_router_group_topk", "got 4 and 0"}},
        {{"model.num_experts=8", "model.moe_router_group_topk=2"}, 1,
         {"needs both model.moe_router_num_groups", "got 0 and 2"}},
        {{"model.num_experts=8", "model.moe_router_num_groups=3", "model.moe_router_group_topk=1"}, 1,
         {"model.moe_router_num_groups (3) must divide model.num_experts (8)"}},
        {{"model.num_experts=128", "model.moe_router_num_groups=128", "model.moe_router_group_topk=2"},
         1, {"model.moe_router_num_groups (128)", "at most 64"}},
        {{"model.num_experts=8", "model.moe_router_num_groups=4", "model.moe_router_group_topk=5"}, 1,
         {"model.moe_router_group_topk (5) must be <= model.moe_router_num_groups (4)"}},
        {{"model.num_experts=8", "model.moe_router_num_groups=4", "model.moe_router_group_topk=3"}, 1,
         {"model.moe_router_topk (2) must be >= model.moe_router_group_topk (3"}},
        {{"model.num_experts=8", "model.moe_router_num_groups=4", "model.moe_router_group_topk=1",
          "model.moe_router_topk=3"}, 1,
         {"model.moe_router_topk (3)", "<= the 2 experts of the chosen groups"}},
        {{"model.num_experts=4", "model.moe_router_bias_update_rate=0.01"}, 1,
         {"model.moe_router_bias_update_rate (0.01)", "model.moe_router_enable_expert_bias=true"}},
        {{"model.num_experts=4", "model.moe_router_load_balancing_type=none",
          "model.moe_aux_loss_coeff=0.01"}, 1,
         {"model.moe_aux_loss_coeff (0.01)", "none", "model.moe_router_load_balancing_type="}},
        /* capacity and the pattern */
        {{"model.num_experts=4", "model.moe_pad_expert_input_to_capacity=true"}, 1,
         {"model.moe_pad_expert_input_to_capacity", "model.moe_expert_capacity_factor > 0"}},
        {{"model.num_experts=4", "model.moe_token_drop_policy=position"}, 1,
         {"model.moe_token_drop_policy", "model.moe_expert_capacity_factor > 0"}},
        {{"model.num_experts=4", "model.moe_layer_freq=[0]*12"}, 1,
         {"model.moe_layer_freq '[0]*12' makes no layer an MoE layer", "model.num_experts=0"}},
        {{"model.num_experts=4", "model.moe_layer_freq=[1,0]"}, 1,
         {"model.moe_layer_freq '[1,0]' lists 2 layers", "model.num_layers is 12"}},
        {{"model.num_experts=4", "model.moe_layer_freq=every"}, 1,
         {"model.moe_layer_freq 'every'", "expected an integer"}},
        {{"model.num_experts=4", "model.num_layers=1025", "model.hidden_size=64",
          "model.num_attention_heads=4"}, 1,
         {"at most 1024 layers", "model.num_layers is 1025"}},
        /* the layout */
        {{"model.num_experts=4", "parallel.tensor_model_parallel_size=2"}, 2,
         {"model.num_experts (4)", "parallel.tensor_model_parallel_size 2",
          "parallel.sequence_parallel=true"}},
        {{"model.num_experts=4", "parallel.tensor_model_parallel_size=2",
          "parallel.sequence_parallel=true", "model.moe_shared_expert_intermediate_size=1001"}, 2,
         {"model.moe_shared_expert_intermediate_size (1001)",
          "parallel.tensor_model_parallel_size (2)",
          "try model.moe_shared_expert_intermediate_size=1002"}},
        {{"model.num_experts=4", "train.cuda_graph=true"}, 1,
         {"train.cuda_graph", "set train.cuda_graph=false"}},
        {{"model.num_experts=4", "model.moe_shared_expert_gate=true"}, 1,
         {"model.moe_shared_expert_gate", "set model.moe_shared_expert_intermediate_size"}},
        {{"model.moe_shared_expert_gate=true"}, 1,
         {"model.moe_shared_expert_gate is set but model.num_experts is 0"}},
        /* expert parallelism's shape */
        {{"model.num_experts=4", "parallel.expert_model_parallel_size=3",
          "train.global_batch_size=9"}, 3,
         {"parallel.expert_model_parallel_size (3) must divide model.num_experts (4)"}},
        {{"model.num_experts=4", "parallel.expert_model_parallel_size=4"}, 2,
         {"parallel.expert_model_parallel_size (4) must divide the ranks of a pipeline stage",
          "1 x 2"}},
        {{"model.num_experts=8", "parallel.expert_model_parallel_size=4",
          "parallel.pipeline_model_parallel_size=2"}, 4,
         {"(4) must divide the ranks of a pipeline stage", "1 x 2"}},
        /* expert tensor parallelism's shape */
        {{"model.num_experts=4", "model.moe_ffn_hidden_size=30",
          "parallel.expert_tensor_parallel_size=4"}, 4,
         {"parallel.expert_tensor_parallel_size (4) must divide model.moe_ffn_hidden_size (30)"}},
        {{"model.num_experts=4", "parallel.expert_tensor_parallel_size=2",
          "parallel.expert_model_parallel_size=2"}, 2,
         {"parallel.expert_model_parallel_size (2) x parallel.expert_tensor_parallel_size (2) "
          "must divide the ranks of a pipeline stage", "1 x 2"}},
        {{"model.num_experts=4", "parallel.expert_tensor_parallel_size=4"}, 2,
         {"parallel.expert_model_parallel_size (1) x parallel.expert_tensor_parallel_size (4)"}},
        {{"model.num_experts=4", "model.moe_router_enable_expert_bias=true",
          "model.moe_router_score_function=sigmoid", "model.moe_expert_capacity_factor=1",
          "model.moe_pad_expert_input_to_capacity=true"}, 1,
         {"model.moe_router_enable_expert_bias with model.moe_pad_expert_input_to_capacity",
          "never move", "model.moe_pad_expert_input_to_capacity=false"}},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const Refusal *v = &cases[i];
        LtConfig c, before;
        const int rc = lt_config_load(&c, NULL, nov(v->ov, 6), (char **)v->ov, err, sizeof err);
        CHECK(rc == 0, "case %zu: load failed: %s", i, err);
        if (rc) continue;
        before = c;
        strcpy(err, "(unset)");
        CHECK(lt_config_validate(&c, v->world, err, sizeof err) == -1, "case %zu (%s) passed", i,
              v->ov[0]);
        for (int w = 0; w < 3; w++)
            CHECK(has(err, v->want[w]), "case %zu: '%s' not in: %s", i, v->want[w], err);
        CHECK(memcmp(&c, &before, sizeof c) == 0, "case %zu: validate modified *c", i);
    }
}

int main(void) {
    char *dir = test_tmpdir("lt_test_config_moe");
    if (!dir) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(g_dir, sizeof g_dir, "%s", dir);
    RUN(test_pattern_megatron);
    RUN(test_pattern_lattice);
    RUN(test_defaults_and_load);
    RUN(test_validate_ok);
    RUN(test_refusals);
    test_rm_rf(dir);
    free(dir);
    return test_summary();
}
