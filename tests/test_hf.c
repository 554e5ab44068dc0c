/* test_hf.c - Hugging Face export and import (hf.h): export -> import ->
 * export is bit-identical for a grouped-query Llama and for GPT-2 tied and
 * untied; the name/layout mapping checked element by element against hand
 * written indices; BF16/F16 and sharded inputs; every refusal; an imported
 * checkpoint resharded for tensor parallelism 2. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "common.h"
#include "config.h"
#include "hf.h"
#include "params.h"
#include "safetensors.h"
#include "test.h"

/* ---- helpers -------------------------------------------------------------- */


/* Whole file into a malloc'd buffer (NUL-terminated); *n its length. */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    buf[got] = '\0';
    if (n) *n = got;
    return buf;
}

static void spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    const int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The tiny Llama of the brief: hidden 32, 4 heads in 2 key/value groups, ffn
 * 48, vocab 37 (padded to 128), untied, llama3 rope scaling. */
static void llama_config(LtConfig *c) {
    lt_config_defaults(c);
    c->model.arch = LT_ARCH_LLAMA;
    c->model.num_layers = 2;
    c->model.hidden_size = 32;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 48;
    c->model.seq_length = 16;
    c->model.max_position_embeddings = 64;
    c->model.vocab_size = 37;
    c->model.norm_epsilon = 1e-5;
    c->model.rotary_base = 500000;
    c->model.rope_scaling = LT_ROPE_LLAMA3;
    c->model.rope_scaling_factor = 8;
    c->model.rope_low_freq_factor = 1;
    c->model.rope_high_freq_factor = 4;
    c->model.rope_original_max_position = 32;
    c->model.untie_embeddings_and_output_weights = true;
}

static void gpt_config(LtConfig *c, int untied) {
    lt_config_defaults(c);
    c->model.num_layers = 2;
    c->model.hidden_size = 16;
    c->model.num_attention_heads = 2;
    c->model.seq_length = 16;
    c->model.max_position_embeddings = 24;
    c->model.vocab_size = 50;
    c->model.untie_embeddings_and_output_weights = untied;
}

typedef struct {
    LtConfig cfg;
    LtParamTable t;
    float *master;
} Model;

/* Validate c, build the tp = 1 table, init with seed (non-zero biases and
 * norm weights too, so that every tensor's placement is visible) and save a
 * checkpoint in dir. */
static int model_save(Model *m, const char *dir, uint64_t seed, char *err) {
    if (lt_config_validate(&m->cfg, 1, err, 512)) return -1;
    LtModelDims d = lt_dims_from_config(&m->cfg);
    lt_params_build(&m->t, &d);
    m->master = calloc(m->t.total, sizeof(float));
    lt_params_init(&m->t, seed, m->master);
    for (int i = 0; i < m->t.n; i++) {
        const LtParam *p = &m->t.p[i];
        if (p->init == LT_INIT_NORMAL) continue;
        for (size_t j = 0; j < p->numel; j++)
            m->master[p->offset + j] += 0.01f * lt_normal_at(seed, (uint64_t)i, j);
    }
    LtCkptState s = {m->master, NULL, NULL};
    LtCkptMeta meta = {.step = 5, .seed = seed};
    return lt_ckpt_save(dir, &m->t, &s, &meta, &m->cfg, err, 512);
}

static void model_free(Model *m) {
    free(m->master);
    lt_params_free(&m->t);
}

/* The master weights of checkpoint dir, read with table t. */
static float *load_master(const char *dir, const LtParamTable *t, char *err) {
    char stepdir[4096];
    LtCkptState s = {calloc(t->total, sizeof(float)), NULL, NULL};
    if (lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, 512) ||
        lt_ckpt_load(stepdir, t, &s, NULL, err, 512)) {
        free(s.master);
        return NULL;
    }
    return s.master;
}

/* Tensor `name` of dir/model.safetensors with the expected shape (cols 0: 1-D). */
static float *hf_get(const char *dir, const char *name, int64_t rows, int64_t cols) {
    char file[4200], err[512] = "";
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    int nd = 0;
    int64_t shape[4] = {0};
    float *x = lt_safetensors_read(file, name, &nd, shape, err, sizeof err);
    if (!x) {
        printf("  %s: %s\n", name, err);
        return NULL;
    }
    if (nd != (cols ? 2 : 1) || shape[0] != rows || (cols && shape[1] != cols)) {
        printf("  %s: shape %d dims (%lld, %lld), want (%lld, %lld)\n", name, nd,
               (long long)shape[0], (long long)shape[1], (long long)rows, (long long)cols);
        free(x);
        return NULL;
    }
    return x;
}

/* Element (r, c) of parameter `name` of the table. */
static float at(const Model *m, const float *master, const char *name, int64_t r, int64_t c) {
    const LtParam *p = lt_params_find(&m->t, name);
    return master[p->offset + (size_t)(r * p->gshape[1] + c)];
}

/* m->cfg saved as a checkpoint in dir/ck (model_save) and exported to dir/hf. */
static int exported(Model *m, const char *dir, uint64_t seed, char *err) {
    char src[4200], hf[4200];
    snprintf(src, sizeof src, "%s/ck", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    if (model_save(m, src, seed, err)) return -1;
    return lt_hf_export(src, hf, err, 512);
}

/* An exported tiny Llama (untied, GQA): exported() of llama_config. */
static int llama_hf(Model *m, const char *dir, char *err) {
    llama_config(&m->cfg);
    return exported(m, dir, 9, err);
}

/* llama_hf, then hf = dir/hf and its model.safetensors moved to orig =
 * dir/orig.safetensors, for a test to write its own variants from. */
static int llama_hf_aside(Model *m, const char *dir, char hf[4200], char orig[4300], char *err) {
    char model[4300];
    if (llama_hf(m, dir, err)) return -1;
    snprintf(hf, 4200, "%s/hf", dir);
    snprintf(model, sizeof model, "%s/model.safetensors", hf);
    snprintf(orig, 4300, "%s/orig.safetensors", dir);
    return rename(model, orig);
}

/* ---- round trips ------------------------------------------------------------ */

/* export -> import -> export: the two model.safetensors and config.json are
 * byte-identical, and the imported weights are the saved ones bit for bit. */
static void roundtrip(Model *m) {
    char *dir = test_tmpdir("lt_hf_test"), err[512] = "", src[4200], hf1[4200], ck2[4200], hf2[4200], a[4300],
         b[4300];
    REQUIRE(dir, "mkdtemp");
    snprintf(src, sizeof src, "%s/ck", dir);
    snprintf(hf1, sizeof hf1, "%s/hf1", dir);
    snprintf(ck2, sizeof ck2, "%s/ck2", dir);
    snprintf(hf2, sizeof hf2, "%s/hf2", dir);
    REQUIRE(model_save(m, src, 77, err) == 0, "save: %s", err);
    REQUIRE(lt_hf_export(src, hf1, err, sizeof err) == 0, "export: %s", err);
    REQUIRE(lt_hf_import(hf1, ck2, 0, NULL, err, sizeof err) == 0, "import: %s", err);
    REQUIRE(lt_hf_export(ck2, hf2, err, sizeof err) == 0, "export again: %s", err);
    snprintf(a, sizeof a, "%s/model.safetensors", hf1);
    snprintf(b, sizeof b, "%s/model.safetensors", hf2);
    CHECK(same_file(a, b), "model.safetensors differs after export -> import -> export");
    snprintf(a, sizeof a, "%s/config.json", hf1);
    snprintf(b, sizeof b, "%s/config.json", hf2);
    CHECK(same_file(a, b), "config.json differs after export -> import -> export");
    float *got = load_master(ck2, &m->t, err);
    CHECK(got && memcmp(got, m->master, sizeof(float) * m->t.total) == 0,
          "imported weights differ from the saved ones (%s)", err);
    free(got);
    /* step 0, weights only */
    char stepdir[4096];
    LtCkptMeta meta;
    CHECK(lt_ckpt_resolve(ck2, stepdir, sizeof stepdir, err, sizeof err) == 0 &&
              lt_ckpt_read_meta(stepdir, &meta, err, sizeof err) == 0 && meta.step == 0 &&
              meta.weights_only == 1,
          "imported meta: step %ld weights_only %d (%s)", meta.step, meta.weights_only, err);
    test_rm_rf(dir);
    free(dir);
}

static void test_roundtrip_llama_gqa(void) {
    Model m = {0};
    llama_config(&m.cfg);
    roundtrip(&m);
    model_free(&m);
}

static void test_roundtrip_llama_tied_no_scaling(void) {
    Model m = {0};
    llama_config(&m.cfg);
    m.cfg.model.untie_embeddings_and_output_weights = false;
    m.cfg.model.rope_scaling = LT_ROPE_NONE;
    m.cfg.model.num_query_groups = 1; /* multi-query */
    roundtrip(&m);
    model_free(&m);
}

static void test_roundtrip_gpt2_tied(void) {
    Model m = {0};
    gpt_config(&m.cfg, 0);
    roundtrip(&m);
    model_free(&m);
}

static void test_roundtrip_gpt2_untied(void) {
    Model m = {0};
    gpt_config(&m.cfg, 1);
    roundtrip(&m);
    model_free(&m);
}

/* ---- the mapping, element by element ------------------------------------------- */

static void test_llama_mapping(void) {
    char *dir = test_tmpdir("lt_hf_test"), err[512] = "", hf[4200], file[4300];
    REQUIRE(dir, "mkdtemp");
    snprintf(hf, sizeof hf, "%s/hf", dir);
    Model m = {0};
    REQUIRE(llama_hf(&m, dir, err) == 0, "export: %s", err);
    const float *w = m.master;
    enum { C = 32, NH = 4, NKV = 2, HD = 8, F = 48, V = 37 };
    /* q rows 0..31, k rows 32..47, v rows 48..63 of qkv */
    float *q = hf_get(hf, "model.layers.1.self_attn.q_proj.weight", NH * HD, C);
    float *k = hf_get(hf, "model.layers.1.self_attn.k_proj.weight", NKV * HD, C);
    float *v = hf_get(hf, "model.layers.1.self_attn.v_proj.weight", NKV * HD, C);
    REQUIRE(q && k && v, "q/k/v missing");
    CHECK(q[5 * C + 7] == at(&m, w, "h.1.attn.qkv.weight", 5, 7), "q_proj[5][7]");
    CHECK(k[0] == at(&m, w, "h.1.attn.qkv.weight", 32, 0), "k_proj[0][0] != qkv[32][0]");
    CHECK(k[11 * C + 30] == at(&m, w, "h.1.attn.qkv.weight", 32 + 11, 30), "k_proj[11][30]");
    CHECK(v[15 * C + 31] == at(&m, w, "h.1.attn.qkv.weight", 48 + 15, 31), "v_proj[15][31]");
    CHECK(v[2 * C + 3] != at(&m, w, "h.1.attn.qkv.weight", 32 + 2, 3), "v_proj equals k_proj");
    free(q), free(k), free(v);
    float *g = hf_get(hf, "model.layers.0.mlp.gate_proj.weight", F, C);
    float *u = hf_get(hf, "model.layers.0.mlp.up_proj.weight", F, C);
    float *dn = hf_get(hf, "model.layers.0.mlp.down_proj.weight", C, F);
    float *o = hf_get(hf, "model.layers.0.self_attn.o_proj.weight", C, C);
    REQUIRE(g && u && dn && o, "mlp/o missing");
    CHECK(g[47 * C + 1] == at(&m, w, "h.0.mlp.gate_up.weight", 47, 1), "gate_proj[47][1]");
    CHECK(u[0 * C + 9] == at(&m, w, "h.0.mlp.gate_up.weight", F + 0, 9), "up_proj[0][9] != gate_up[48][9]");
    CHECK(u[20 * C + 2] == at(&m, w, "h.0.mlp.gate_up.weight", F + 20, 2), "up_proj[20][2]");
    CHECK(dn[3 * F + 40] == at(&m, w, "h.0.mlp.down.weight", 3, 40), "down_proj[3][40] (not transposed)");
    CHECK(o[31 * C + 0] == at(&m, w, "h.0.attn.proj.weight", 31, 0), "o_proj[31][0]");
    free(g), free(u), free(dn), free(o);
    float *e = hf_get(hf, "model.embed_tokens.weight", V, C);
    float *h = hf_get(hf, "lm_head.weight", V, C);
    float *n1 = hf_get(hf, "model.layers.1.input_layernorm.weight", C, 0);
    float *n2 = hf_get(hf, "model.layers.1.post_attention_layernorm.weight", C, 0);
    float *nf = hf_get(hf, "model.norm.weight", C, 0);
    REQUIRE(e && h && n1 && n2 && nf, "embeddings/norms missing");
    CHECK(e[36 * C + 31] == at(&m, w, "wte", 36, 31), "embed_tokens[36][31]");
    CHECK(h[36 * C + 31] == at(&m, w, "lm_head.weight", 36, 31) && h[0] != e[0], "lm_head");
    CHECK(n1[4] == at(&m, w, "h.1.ln_1.weight", 4, 0) && n2[4] == at(&m, w, "h.1.ln_2.weight", 4, 0) &&
              nf[31] == at(&m, w, "ln_f.weight", 31, 0), "norm weights");
    free(e), free(h), free(n1), free(n2), free(nf);
    /* nothing else: 1 + 9 per layer + 2 tensors */
    snprintf(file, sizeof file, "%s/model.safetensors", hf);
    LtStFile st;
    CHECK(lt_st_open(&st, file, err, sizeof err) == 0 && st.n == 1 + 9 * 2 + 2, "%d tensors (%s)", st.n, err);
    lt_st_close(&st);
    snprintf(file, sizeof file, "%s/config.json", hf);
    char *js = slurp(file, NULL);
    const char *want[] = {"\"architectures\": [\"LlamaForCausalLM\"]", "\"model_type\": \"llama\"",
                          "\"hidden_size\": 32", "\"intermediate_size\": 48", "\"num_hidden_layers\": 2",
                          "\"num_attention_heads\": 4", "\"num_key_value_heads\": 2", "\"head_dim\": 8",
                          "\"max_position_embeddings\": 64", "\"vocab_size\": 37",
                          "\"rms_norm_eps\": 1e-05", "\"rope_theta\": 500000.0", "\"rope_type\": \"llama3\"",
                          "\"factor\": 8.0", "\"low_freq_factor\": 1.0", "\"high_freq_factor\": 4.0",
                          "\"original_max_position_embeddings\": 32", "\"tie_word_embeddings\": false",
                          "\"hidden_act\": \"silu\"", "\"attention_bias\": false", "\"mlp_bias\": false",
                          "\"torch_dtype\": \"float32\""};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(js && strstr(js, want[i]), "config.json lacks %s", want[i]);
    free(js);
    model_free(&m);
    test_rm_rf(dir);
    free(dir);
}

static void test_gpt2_untied_mapping(void) {
    char *dir = test_tmpdir("lt_hf_test"), err[512] = "", hf[4200], file[4300];
    REQUIRE(dir, "mkdtemp");
    snprintf(hf, sizeof hf, "%s/hf", dir);
    Model m = {0};
    gpt_config(&m.cfg, 1);
    REQUIRE(exported(&m, dir, 6, err) == 0, "export: %s", err);
    enum { C = 16, F = 64, V = 50 };
    float *ca = hf_get(hf, "transformer.h.1.attn.c_attn.weight", C, 3 * C);
    float *fc = hf_get(hf, "transformer.h.0.mlp.c_fc.weight", C, F);
    float *mp = hf_get(hf, "transformer.h.0.mlp.c_proj.weight", F, C);
    float *h = hf_get(hf, "lm_head.weight", V, C);
    REQUIRE(ca && fc && mp && h, "tensors missing");
    /* Conv1D (in, out): HF [i][o] = ours [o][i] */
    CHECK(ca[3 * (3 * C) + 40] == at(&m, m.master, "h.1.attn.qkv.weight", 40, 3), "c_attn[3][40] != qkv[40][3]");
    CHECK(fc[15 * F + 63] == at(&m, m.master, "h.0.mlp.fc.weight", 63, 15), "c_fc[15][63]");
    CHECK(mp[63 * C + 2] == at(&m, m.master, "h.0.mlp.proj.weight", 2, 63), "mlp c_proj[63][2]");
    CHECK(h[49 * C + 15] == at(&m, m.master, "lm_head.weight", 49, 15), "lm_head[49][15]");
    free(ca), free(fc), free(mp), free(h);
    snprintf(file, sizeof file, "%s/config.json", hf);
    char *js = slurp(file, NULL);
    CHECK(js && strstr(js, "\"tie_word_embeddings\": false") && strstr(js, "\"GPT2LMHeadModel\""),
          "config.json: %s", js ? js : "(missing)");
    free(js);
    model_free(&m);
    test_rm_rf(dir);
    free(dir);
}

/* ---- inputs that are not lattice's own export --------------------------------- */

/* A safetensors file of the tensors of `src` (a lattice export), rewritten:
 * dtype "BF16" or "F16" (values converted: bf16 by truncation, f16 exactly
 * for the values used), names through rename() (NULL: dropped), and extra
 * raw JSON entries. Returns 0 when written. */
typedef const char *(*Rename)(const char *name, void *ctx);

static uint16_t to_f16(float x) { /* normal-range values only (the tests' weights) */
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int e = (int)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)sign; /* tiny: zero */
    return (uint16_t)(sign | (uint32_t)e << 10 | ((u >> 13) & 0x3ffu));
}

static float from_half(const char *dtype, float x) {
    if (!strcmp(dtype, "BF16")) return lt_bf16_to_f32((uint16_t)(((union { float f; uint32_t u; }){x}).u >> 16));
    uint16_t h = to_f16(x);
    if (!(h & 0x7fffu)) return (h & 0x8000u) ? -0.0f : 0.0f;
    const int e = (h >> 10) & 0x1f;
    return ldexpf(1.0f + (float)(h & 0x3ff) / 1024.0f, e - 15) * ((h & 0x8000u) ? -1.0f : 1.0f);
}

static int rewrite(const char *src, const char *dst, const char *dtype, Rename rename, void *ctx,
                   const char *extra_json, const void *extra_data, size_t extra_bytes) {
    LtStFile st;
    char err[512];
    if (lt_st_open(&st, src, err, sizeof err)) return -1;
    char *hdr = calloc(1, 1 << 20);
    unsigned char *data = malloc(st.file_size * 2 + extra_bytes + 1);
    size_t off = 0, at_ = 0;
    at_ += (size_t)sprintf(hdr, "{");
    const int half = strcmp(dtype, "F32") != 0;
    for (int i = 0; i < st.n; i++) {
        const LtStEntry *e = &st.e[i];
        const char *name = rename ? rename(e->name, ctx) : e->name;
        if (!name) continue;
        float *x = malloc(sizeof(float) * e->numel);
        lt_st_read_f32(&st, e, x, err, sizeof err);
        const size_t bytes = e->numel * (half ? 2 : 4);
        at_ += (size_t)sprintf(hdr + at_, "\"%s\":{\"dtype\":\"%s\",\"shape\":[", name, dtype);
        for (int d = 0; d < e->ndim; d++) at_ += (size_t)sprintf(hdr + at_, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        at_ += (size_t)sprintf(hdr + at_, "],\"data_offsets\":[%zu,%zu]},", off, off + bytes);
        for (uint64_t j = 0; j < e->numel; j++) {
            if (!half) {
                memcpy(data + off + 4 * j, &x[j], 4);
                continue;
            }
            uint32_t u;
            memcpy(&u, &x[j], 4);
            const uint16_t h = !strcmp(dtype, "BF16") ? (uint16_t)(u >> 16) : to_f16(x[j]);
            data[off + 2 * j] = (unsigned char)h, data[off + 2 * j + 1] = (unsigned char)(h >> 8);
        }
        off += bytes;
        free(x);
    }
    if (extra_json) {
        at_ += (size_t)sprintf(hdr + at_, extra_json, off, off + extra_bytes);
        memcpy(data + off, extra_data, extra_bytes);
        off += extra_bytes;
    } else if (at_ > 1) {
        at_--; /* the last comma */
    }
    at_ += (size_t)sprintf(hdr + at_, "}");
    FILE *f = fopen(dst, "wb");
    uint64_t n = at_;
    unsigned char lb[8];
    for (int b = 0; b < 8; b++) lb[b] = (unsigned char)(n >> (8 * b));
    fwrite(lb, 1, 8, f);
    fwrite(hdr, 1, at_, f);
    fwrite(data, 1, off, f);
    fclose(f);
    free(hdr);
    free(data);
    lt_st_close(&st);
    return 0;
}

/* BF16 and F16 files import as the fp32 of their values. */
static void test_import_half_dtypes(void) {
    char *dir = test_tmpdir("lt_hf_test"), err[512] = "", hf[4200], file[4300], orig[4300], out[4200];
    REQUIRE(dir, "mkdtemp");
    Model m = {0};
    REQUIRE(llama_hf_aside(&m, dir, hf, orig, err) == 0, "export: %s", err);
    snprintf(file, sizeof file, "%s/model.safetensors", hf);
    const char *dtypes[] = {"BF16", "F16"};
    for (int t = 0; t < 2; t++) {
        REQUIRE(rewrite(orig, file, dtypes[t], NULL, NULL, NULL, NULL, 0) == 0, "rewrite");
        snprintf(out, sizeof out, "%s/ck_%s", dir, dtypes[t]);
        CHECK(lt_hf_import(hf, out, 0, NULL, err, sizeof err) == 0, "import %s: %s", dtypes[t], err);
        float *got = load_master(out, &m.t, err);
        REQUIRE(got, "load: %s", err);
        int bad = 0;
        for (size_t i = 0; i < m.t.total && !bad; i++) bad = got[i] != from_half(dtypes[t], m.master[i]);
        CHECK(!bad, "%s import differs from the converted values", dtypes[t]);
        free(got);
    }
    model_free(&m);
    test_rm_rf(dir);
    free(dir);
}

/* Tensors of layer 1 go to the second shard. */
static const char *shard_a(const char *name, void *ctx) {
    (void)ctx;
    return strstr(name, "layers.1.") ? NULL : name;
}
static const char *shard_b(const char *name, void *ctx) {
    (void)ctx;
    return strstr(name, "layers.1.") ? name : NULL;
}

/* model.safetensors.index.json and its shard files, with ix the index text. */
static void write_sharded(const char *hf, const char *orig, const char *ix) {
    char path[4300];
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", hf);
    rewrite(orig, path, "BF16", shard_a, NULL, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", hf);
    rewrite(orig, path, "BF16", shard_b, NULL, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", hf);
    spit(path, ix, strlen(ix));
}

/* The index text for the shards above; `swap` names one tensor's shard wrongly. */
static char *index_json(const char *orig, const char *wrong_name) {
    LtStFile st;
    char err[512];
    char *ix = calloc(1, 1 << 16);
    if (lt_st_open(&st, orig, err, sizeof err)) return ix;
    size_t n = (size_t)sprintf(ix, "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {");
    for (int i = 0; i < st.n; i++) {
        const char *name = st.e[i].name;
        int second = strstr(name, "layers.1.") != NULL;
        if (wrong_name && !strcmp(name, wrong_name)) second = !second;
        n += (size_t)sprintf(ix + n, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                             name, second ? 2 : 1);
    }
    sprintf(ix + n, "}}");
    lt_st_close(&st);
    return ix;
}

static void test_import_sharded(void) {
    char *dir = test_tmpdir("lt_hf_test"), err[512] = "", hf[4200], file[4300], orig[4300], out[4200];
    REQUIRE(dir, "mkdtemp");
    Model m = {0};
    REQUIRE(llama_hf_aside(&m, dir, hf, orig, err) == 0, "export: %s", err);
    char *ix = index_json(orig, NULL);
    write_sharded(hf, orig, ix);
    free(ix);
    snprintf(out, sizeof out, "%s/ck_sharded", dir);
    CHECK(lt_hf_import(hf, out, 0, NULL, err, sizeof err) == 0, "sharded import: %s", err);
    float *got = load_master(out, &m.t, err);
    int bad = !got;
    for (size_t i = 0; got && i < m.t.total && !bad; i++) bad = got[i] != from_half("BF16", m.master[i]);
    CHECK(!bad, "sharded import differs (%s)", err);
    free(got);
    /* an index that puts a tensor in the wrong shard */
    ix = index_json(orig, "model.layers.1.mlp.up_proj.weight");
    snprintf(file, sizeof file, "%s/model.safetensors.index.json", hf);
    spit(file, ix, strlen(ix));
    free(ix);
    snprintf(out, sizeof out, "%s/ck_bad1", dir);
    CHECK(lt_hf_import(hf, out, 0, NULL, err, sizeof err) != 0 &&
              strstr(err, "model.layers.1.mlp.up_proj.weight") && strstr(err, "which does not hold it"),
          "err: %s", err);
    /* an index naming a shard that is not there, or a path outside the directory */
    const char *bad_ix[] = {"{\"weight_map\": {\"model.norm.weight\": \"model-00009-of-00009.safetensors\"}}",
                            "{\"weight_map\": {\"model.norm.weight\": \"../model.safetensors\"}}",
                            "{\"weight_map\": {}}", "{\"weight_map\": [1]}"};
    const char *want[] = {"model-00009-of-00009.safetensors", "is not a file name", "weight_map",
                          "weight_map"};
    for (int i = 0; i < 4; i++) {
        spit(file, bad_ix[i], strlen(bad_ix[i]));
        snprintf(out, sizeof out, "%s/ck_bad_ix%d", dir, i);
        CHECK(lt_hf_import(hf, out, 0, NULL, err, sizeof err) != 0 && strstr(err, want[i]),
              "index %d: err: %s", i, err);
    }
    model_free(&m);
    test_rm_rf(dir);
    free(dir);
}

/* ---- refusals ------------------------------------------------------------------ */

typedef struct {
    const char *drop, *from, *to; /* a tensor left out; a name changed */
} Edit;

static const char *edit_name(const char *name, void *ctx) {
    const Edit *e = ctx;
    if (e->drop && !strcmp(name, e->drop)) return NULL;
    if (e->from && !strcmp(name, e->from)) return e->to;
    return name;
}

/* Replace the first occurrence of `from` in the text of path by `to`. */
static void edit_text(const char *path, const char *from, const char *to) {
    char *s = slurp(path, NULL);
    char *p = s ? strstr(s, from) : NULL;
    if (!p) {
        printf("  edit_text: '%s' not in %s\n", from, path);
        free(s);
        return;
    }
    char *t = malloc(strlen(s) + strlen(to) + 1);
    sprintf(t, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from));
    spit(path, t, strlen(t));
    free(s);
    free(t);
}

/* Import must fail with a message holding `want`, writing nothing. */
static int refused(const char *hf, const char *out, const char *want, int nover, char **over) {
    char err[2048] = "";
    const int rc = lt_hf_import(hf, out, nover, over, err, sizeof err);
    char latest[4400];
    snprintf(latest, sizeof latest, "%s/latest", out);
    if (rc == 0 || !strstr(err, want) || exists(latest)) {
        printf("  want an error with \"%s\", got rc %d: %s\n", want, rc, err);
        return 0;
    }
    return 1;
}

typedef struct {
    const char *from, *to, *want;
} CfgCase;

/* For each case, config.json of hf is the current one with `from` replaced by
 * `to`, and the import must be refused with `want`; config.json is restored. */
static void config_cases(const char *hf, const char *dir, const CfgCase *cases, size_t n) {
    char cfgp[4300], out[4300];
    size_t len = 0;
    snprintf(cfgp, sizeof cfgp, "%s/config.json", hf);
    char *orig = slurp(cfgp, &len);
    for (size_t i = 0; orig && i < n; i++) {
        spit(cfgp, orig, len);
        edit_text(cfgp, cases[i].from, cases[i].to);
        snprintf(out, sizeof out, "%s/cfg_case%zu", dir, i);
        CHECK(refused(hf, out, cases[i].want, 0, NULL), "config case %zu (%s -> %s)", i, cases[i].from,
              cases[i].to);
    }
    if (orig) spit(cfgp, orig, len);
    free(orig);
}

static void test_import_refusals(void) {
    char *dir = test_tmpdir("lt_hf_test"), err[512] = "", hf[4200], model[4300], cfgp[4300], orig[4300],
         origcfg[4300], out[4200];
    REQUIRE(dir, "mkdtemp");
    Model m = {0};
    REQUIRE(llama_hf_aside(&m, dir, hf, orig, err) == 0, "export: %s", err);
    snprintf(model, sizeof model, "%s/model.safetensors", hf);
    snprintf(cfgp, sizeof cfgp, "%s/config.json", hf);
    snprintf(origcfg, sizeof origcfg, "%s/orig.json", dir);
    rename(cfgp, origcfg);
    snprintf(out, sizeof out, "%s/out", dir);
    size_t cfg_len = 0;
    char *cfg_text = slurp(origcfg, &cfg_len);
    const float nan_bits = NAN;

    /* tensor edits, with the config as exported */
    spit(cfgp, cfg_text, cfg_len);
    struct {
        Edit e;
        const char *dtype, *extra;
        const void *extra_data;
        size_t extra_bytes;
        const char *want;
    } tens[] = {
        {{"model.layers.1.self_attn.k_proj.weight", NULL, NULL}, "F32", NULL, NULL, 0,
         "has no tensor 'model.layers.1.self_attn.k_proj.weight'"},
        {{"lm_head.weight", NULL, NULL}, "F32", NULL, NULL, 0, "has no tensor 'lm_head.weight'"},
        {{NULL, NULL, NULL}, "F32", "\"model.layers.0.mlp.extra.weight\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[%zu,%zu]}", "\0\0\0\0", 4, "tensor 'model.layers.0.mlp.extra.weight' is not part of"},
        {{"model.norm.weight", NULL, NULL}, "F32", "\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[%zu,%zu]}", "\0\0\0\0", 4, "'model.norm.weight' has shape (1); config.json implies (32)"},
        {{"model.norm.weight", NULL, NULL}, "F32", "\"model.norm.weight\":{\"dtype\":\"I32\",\"shape\":[32],"
         "\"data_offsets\":[%zu,%zu]}", cfg_text, 128, "'model.norm.weight' is I32; lattice imports F32, BF16 and F16"},
        {{"model.norm.weight", NULL, NULL}, "F32", "\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[%zu,%zu]}", &nan_bits, 4, "has shape"},
        {{"model.layers.0.input_layernorm.weight", NULL, NULL}, "F32",
         "\"model.layers.0.input_layernorm.weight\":{\"dtype\":\"F32\",\"shape\":[32],\"data_offsets\":[%zu,%zu]}",
         NULL, 128, "non-finite value"},
        {{NULL, "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.upp_proj.weight"}, "F32", NULL, NULL, 0,
         "has no tensor 'model.layers.0.mlp.up_proj.weight'"},
    };
    float nans[32];
    for (int i = 0; i < 32; i++) nans[i] = i == 7 ? NAN : 1.0f;
    tens[6].extra_data = nans;
    for (size_t i = 0; i < sizeof tens / sizeof tens[0]; i++) {
        rewrite(orig, model, tens[i].dtype, edit_name, &tens[i].e, tens[i].extra, tens[i].extra_data,
                tens[i].extra_bytes);
        CHECK(refused(hf, out, tens[i].want, 0, NULL), "tensor case %zu", i);
    }

    /* config.json edits, with the tensors as exported */
    rewrite(orig, model, "F32", NULL, NULL, NULL, NULL, 0);
    spit(cfgp, cfg_text, cfg_len);
    static const CfgCase cfgs[] = {
        {"\"LlamaForCausalLM\"", "\"MistralForCausalLM\"", "architecture 'MistralForCausalLM' is not one"},
        {"\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"", "model_type 'gpt2' is not llama"},
        {"\"attention_bias\": false", "\"attention_bias\": true", "'attention_bias' is true"},
        {"\"mlp_bias\": false", "\"mlp_bias\": true", "'mlp_bias' is true"},
        {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "'hidden_act' is 'gelu'"},
        {"\"rope_type\": \"llama3\"", "\"rope_type\": \"longrope\"", "'rope_scaling.rope_type' is 'longrope'"},
        {"\"factor\": 8.0,", "", "'rope_scaling.factor' is missing"},
        {"\"head_dim\": 8", "\"head_dim\": 16", "q_proj.weight' has shape (32, 32); config.json implies (64, 32)"},
        {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "model.num_query_groups (3) must divide"},
        {"\"hidden_size\": 32", "\"hidden_size\": 3.5", "'hidden_size' must be an integer"},
        {"\"hidden_size\": 32", "\"hidden_size\": 1000000000000", "'hidden_size' is 1000000000000; lattice holds"},
        {"\"hidden_size\": 32", "\"hidden_size\": -32", "'hidden_size' must be an integer"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 2000000000", "2000000000 layers, but"},
        {"\"vocab_size\": 37", "\"vocab_size\": 2000000000", "'model.embed_tokens.weight' has shape (37, 32); "
                                                              "config.json implies (2000000000, 32)"},
        {"\"intermediate_size\": 48", "\"intermediate_size\": \"48\"", "'intermediate_size' must be an integer"},
        {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true", "tensor 'lm_head.weight' differs from the embedding"},
        {"\"hidden_size\": 32,", "", "'hidden_size' is missing"},
        {"{", "{,", "invalid JSON at byte 1"},
        {"\"vocab_size\": 37", "\"vocab_size\": 37, \"vocab_size\": 38", "appears twice"},
        {"{", "[{", "invalid JSON"},
    };
    config_cases(hf, dir, cfgs, sizeof cfgs / sizeof cfgs[0]);
    spit(cfgp, "[]", 2);
    CHECK(refused(hf, out, "the top level is an array", 0, NULL), "array config");
    remove(cfgp);
    CHECK(refused(hf, out, "config.json", 0, NULL), "missing config.json");

    /* overrides may not change the model config.json describes; others pass */
    spit(cfgp, cfg_text, cfg_len);
    char *over1[] = {"model.rotary_base=10000"}, *over2[] = {"model.nonsense=1"},
         *over3[] = {"parallel.tensor_model_parallel_size=3"};
    CHECK(refused(hf, out, "model.rotary_base comes from", 1, over1), "override of rotary_base");
    CHECK(refused(hf, out, "nonsense", 1, over2), "unknown override");
    CHECK(refused(hf, out, "must be divisible by parallel.tensor_model_parallel_size", 1, over3), "tp 3");

    /* truncated safetensors: in the length, in the header, in the data */
    rewrite(orig, model, "F32", NULL, NULL, NULL, NULL, 0);
    size_t len = 0;
    char *whole = slurp(model, &len);
    const size_t cuts[] = {5, 40, len - 4};
    const char *cut_want[] = {"truncated (no header length)", "exceeds the file", "outside the data section"};
    for (int i = 0; i < 3; i++) {
        spit(model, whole, cuts[i]);
        CHECK(refused(hf, out, cut_want[i], 0, NULL), "truncated to %zu", cuts[i]);
    }
    free(whole);
    remove(model);
    CHECK(refused(hf, out, "has no model.safetensors or model.safetensors.index.json", 0, NULL), "no weights");

    /* a non-empty output directory */
    rewrite(orig, model, "F32", NULL, NULL, NULL, NULL, 0);
    mkdir(out, 0777);
    char junk[4300];
    snprintf(junk, sizeof junk, "%s/junk", out);
    spit(junk, "x", 1);
    CHECK(refused(hf, out, "is not empty", 0, NULL), "non-empty out");
    remove(junk);
    CHECK(lt_hf_import(hf, out, 0, NULL, err, sizeof err) == 0, "the same import into an empty dir: %s", err);
    free(cfg_text);
    model_free(&m);
    test_rm_rf(dir);
    free(dir);
}

static const char *strip_prefix(const char *name, void *ctx) {
    (void)ctx;
    return strncmp(name, "transformer.", 12) ? name : name + 12;
}

/* GPT-2 files as transformers' hub has them: no "transformer." prefix, a
 * causal-mask buffer, a tied lm_head saved anyway; GPT-2 config refusals. */
static void test_import_gpt2_variants(void) {
    char *dir = test_tmpdir("lt_hf_test"), err[512] = "", hf[4200], model[4300], orig[4300], cfgp[4300],
         out[4200];
    REQUIRE(dir, "mkdtemp");
    snprintf(hf, sizeof hf, "%s/hf", dir);
    Model m = {0};
    gpt_config(&m.cfg, 0);
    REQUIRE(exported(&m, dir, 8, err) == 0, "export: %s", err);
    snprintf(model, sizeof model, "%s/model.safetensors", hf);
    snprintf(orig, sizeof orig, "%s/orig.safetensors", dir);
    snprintf(cfgp, sizeof cfgp, "%s/config.json", hf);
    rename(model, orig);
    const float mask[4] = {1, 0, 1, 1};
    const char *buffer = "\"h.1.attn.bias\":{\"dtype\":\"F32\",\"shape\":[1,1,2,2],\"data_offsets\":[%zu,%zu]}";
    /* unprefixed names and a mask buffer: accepted, the same weights */
    rewrite(orig, model, "F32", strip_prefix, NULL, buffer, mask, sizeof mask);
    snprintf(out, sizeof out, "%s/ck_hub", dir);
    CHECK(lt_hf_import(hf, out, 0, NULL, err, sizeof err) == 0, "hub-style GPT-2: %s", err);
    float *got = load_master(out, &m.t, err);
    CHECK(got && memcmp(got, m.master, sizeof(float) * m.t.total) == 0, "hub-style import differs (%s)", err);
    free(got);
    /* the same buffer among prefixed names is not one of them */
    rewrite(orig, model, "F32", NULL, NULL, buffer, mask, sizeof mask);
    snprintf(out, sizeof out, "%s/ck_mixed", dir);
    CHECK(refused(hf, out, "tensor 'h.1.attn.bias' is not part of the GPT2LMHeadModel", 0, NULL),
          "unprefixed buffer among prefixed names");
    /* a tied lm_head.weight saved anyway: accepted when it is the embedding */
    int nd;
    int64_t shape[4];
    float *wte = lt_safetensors_read(orig, "transformer.wte.weight", &nd, shape, err, sizeof err);
    REQUIRE(wte, "wte: %s", err);
    const size_t wbytes = sizeof(float) * (size_t)(shape[0] * shape[1]);
    const char *head = "\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[50,16],\"data_offsets\":[%zu,%zu]}";
    rewrite(orig, model, "F32", NULL, NULL, head, wte, wbytes);
    snprintf(out, sizeof out, "%s/ck_head", dir);
    CHECK(lt_hf_import(hf, out, 0, NULL, err, sizeof err) == 0, "tied lm_head equal to wte: %s", err);
    wte[17] += 1.0f;
    rewrite(orig, model, "F32", NULL, NULL, head, wte, wbytes);
    snprintf(out, sizeof out, "%s/ck_head2", dir);
    CHECK(refused(hf, out, "'lm_head.weight' differs from the embedding", 0, NULL), "tied lm_head differing");
    free(wte);
    /* GPT-2 settings lattice does not compute */
    rewrite(orig, model, "F32", NULL, NULL, NULL, NULL, 0);
    static const CfgCase cfgs[] = {
        {"\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e-06", "'layer_norm_epsilon' is 1e-06"},
        {"\"gelu_new\"", "\"relu\"", "'activation_function' is 'relu'"},
        {"\"scale_attn_weights\": true", "\"scale_attn_weights\": false", "'scale_attn_weights' is false"},
        {"\"n_inner\": 64", "\"n_inner\": null, \"scale_attn_by_inverse_layer_idx\": true",
         "'scale_attn_by_inverse_layer_idx' is true"},
        {"\"n_embd\": 16", "\"n_embd\": 16.0, \"add_cross_attention\": true", "'add_cross_attention' is true"},
        {"\"GPT2LMHeadModel\"", "\"GPT2Model\"", "architecture 'GPT2Model' is not one"},
        {"\"n_layer\": 2", "\"n_layer\": 3", "has no tensor 'transformer.h.2.ln_1.weight'"},
    };
    config_cases(hf, dir, cfgs, sizeof cfgs / sizeof cfgs[0]);
    model_free(&m);
    test_rm_rf(dir);
    free(dir);
}

/* ---- an imported checkpoint in a tensor-parallel layout --------------------------- */

/* Loading the imported Llama for tp = 2 (vocabulary re-padded to 256 as the
 * trainer does) gives each rank the blocks of q, k, v, gate and up it owns,
 * compared with the HF tensors directly. */
static void test_imported_tp2_shards(void) {
    char *dir = test_tmpdir("lt_hf_test"), err[512] = "", hf[4200], out[4200];
    REQUIRE(dir, "mkdtemp");
    Model m = {0};
    REQUIRE(llama_hf(&m, dir, err) == 0, "export: %s", err);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(out, sizeof out, "%s/ck2", dir);
    REQUIRE(lt_hf_import(hf, out, 0, NULL, err, sizeof err) == 0, "import: %s", err);
    float *g1 = load_master(out, &m.t, err);
    REQUIRE(g1, "load: %s", err);
    LtModelDims d2 = m.t.dims;
    d2.padded_vocab = 256; /* 128 x tp */
    LtParamTable g2;
    lt_params_build(&g2, &d2);
    float *glob = calloc(g2.total, sizeof(float));
    CHECK(lt_params_copy_rows(&m.t, g1, &g2, glob, err, sizeof err) == 0, "re-pad: %s", err);
    enum { C = 32, Q = 32, KV = 16, F = 48, V = 37 };
    float *q = hf_get(hf, "model.layers.0.self_attn.q_proj.weight", Q, C);
    float *k = hf_get(hf, "model.layers.0.self_attn.k_proj.weight", KV, C);
    float *v = hf_get(hf, "model.layers.0.self_attn.v_proj.weight", KV, C);
    float *gt = hf_get(hf, "model.layers.0.mlp.gate_proj.weight", F, C);
    float *up = hf_get(hf, "model.layers.0.mlp.up_proj.weight", F, C);
    float *dn = hf_get(hf, "model.layers.0.mlp.down_proj.weight", C, F);
    float *o = hf_get(hf, "model.layers.0.self_attn.o_proj.weight", C, C);
    float *hd = hf_get(hf, "lm_head.weight", V, C);
    REQUIRE(q && k && v && gt && up && dn && o && hd, "HF tensors");
    for (int r = 0; r < 2; r++) {
        LtParamTable t;
        lt_params_build_tp(&t, &d2, 2, r);
        float *loc = calloc(t.total, sizeof(float));
        lt_params_from_global(&t, loc, &g2, glob);
        const LtParam *qkv = lt_params_find(&t, "h.0.attn.qkv.weight"),
                      *gu = lt_params_find(&t, "h.0.mlp.gate_up.weight"),
                      *down = lt_params_find(&t, "h.0.mlp.down.weight"),
                      *proj = lt_params_find(&t, "h.0.attn.proj.weight"),
                      *head = lt_params_find(&t, "lm_head.weight");
        const float *a = loc + qkv->offset, *b = loc + gu->offset, *c = loc + down->offset,
                    *p = loc + proj->offset, *h = loc + head->offset;
        int bad = qkv->shape[0] != (Q + 2 * KV) / 2 || gu->shape[0] != F || down->shape[1] != F / 2;
        /* rank r: q rows [r Q/2, ...), then k rows [r KV/2, ...), then v */
        for (int i = 0; i < Q / 2 && !bad; i++)
            for (int j = 0; j < C; j++) bad |= a[i * C + j] != q[(r * Q / 2 + i) * C + j];
        for (int i = 0; i < KV / 2 && !bad; i++)
            for (int j = 0; j < C; j++)
                bad |= a[(Q / 2 + i) * C + j] != k[(r * KV / 2 + i) * C + j] ||
                       a[(Q / 2 + KV / 2 + i) * C + j] != v[(r * KV / 2 + i) * C + j];
        CHECK(!bad, "rank %d: qkv shard is not its q | k | v blocks", r);
        bad = 0;
        for (int i = 0; i < F / 2 && !bad; i++)
            for (int j = 0; j < C; j++)
                bad |= b[i * C + j] != gt[(r * F / 2 + i) * C + j] ||
                       b[(F / 2 + i) * C + j] != up[(r * F / 2 + i) * C + j];
        CHECK(!bad, "rank %d: gate_up shard is not its gate | up blocks", r);
        bad = 0;
        for (int i = 0; i < C && !bad; i++) {
            for (int j = 0; j < F / 2; j++) bad |= c[i * (F / 2) + j] != dn[i * F + r * F / 2 + j];
            for (int j = 0; j < C / 2; j++) bad |= p[i * (C / 2) + j] != o[i * C + r * C / 2 + j];
        }
        CHECK(!bad, "rank %d: down/o_proj column shards", r);
        /* lm_head rows: rank 0 rows 0..127 (37 real, then zero), rank 1 all padding */
        bad = head->shape[0] != 128;
        for (int i = 0; i < 128 && !bad; i++)
            for (int j = 0; j < C; j++) {
                const float want = r == 0 && i < V ? hd[i * C + j] : 0.0f;
                bad |= h[i * C + j] != want;
            }
        CHECK(!bad, "rank %d: lm_head rows", r);
        free(loc);
        lt_params_free(&t);
    }
    free(q), free(k), free(v), free(gt), free(up), free(dn), free(o), free(hd);
    free(glob);
    free(g1);
    lt_params_free(&g2);
    model_free(&m);
    test_rm_rf(dir);
    free(dir);
}

int main(void) {
    RUN(test_roundtrip_llama_gqa);
    RUN(test_roundtrip_llama_tied_no_scaling);
    RUN(test_roundtrip_gpt2_tied);
    RUN(test_roundtrip_gpt2_untied);
    RUN(test_llama_mapping);
    RUN(test_gpt2_untied_mapping);
    RUN(test_import_half_dtypes);
    RUN(test_import_sharded);
    RUN(test_import_refusals);
    RUN(test_import_gpt2_variants);
    RUN(test_imported_tp2_shards);
    return test_summary();
}
