/* test_config.c - config module: defaults, YAML loading, overrides, every
 * load error class, cross-key validation, and print -> load round trips. */
#include "config.h"
#include "optim.h"
#include "params.h"
#include "test.h"

#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64]; /* per-run temp dir (mkdtemp) */

/* Write `text` to g_dir/name; returns the path (static buffer for cfg.yaml). */
static const char *write_file(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}

/* Load `yaml` (NULL = no file) with the given overrides. */
static int load(LtConfig *c, const char *yaml, int nover, char **ov, char *err, size_t n) {
    const char *path = NULL;
    if (yaml)
        path = write_file("cfg.yaml", yaml);
    return lt_config_load(c, path, nover, ov, err, n);
}

static int has(const char *s, const char *sub) {
    return sub == NULL || strstr(s, sub) != NULL;
}

static void test_defaults(void) {
    LtConfig c;
    lt_config_defaults(&c);
    CHECK(c.model.num_layers == 12 && c.model.hidden_size == 768, "model dims");
    CHECK(c.model.num_attention_heads == 12 && c.model.ffn_hidden_size == 0, "heads/ffn");
    CHECK(c.model.seq_length == 1024 && c.model.max_position_embeddings == 1024, "seq");
    CHECK(c.model.vocab_size == 50257 && c.model.make_vocab_size_divisible_by == 128, "vocab");
    CHECK(c.model.attention == LT_ATTN_AUTO && c.model.attention_deterministic, "attention");
    CHECK(c.parallel.tensor_model_parallel_size == 1, "tp");
    CHECK(c.parallel.pipeline_model_parallel_size == 1, "pp");
    CHECK(c.parallel.virtual_pipeline_model_parallel_size == 1, "vpp");
    CHECK(!c.parallel.sequence_parallel, "sp");
    CHECK(c.train.micro_batch_size == 1 && c.train.global_batch_size == 8, "batch");
    CHECK(c.train.steps == 100 && c.train.seed == 1234 && c.train.threads == 0, "train");
    CHECK(c.train.precision == LT_PREC_FP32 && c.train.recompute == LT_RECOMPUTE_NONE, "enums");
    CHECK(c.train.device == LT_DEVICE_AUTO && c.comm.backend == LT_COMM_AUTO, "device/comm");
    CHECK(c.optimizer.lr == 6e-4 && c.optimizer.min_lr == 6e-5, "lr");
    CHECK(c.optimizer.warmup_steps == 0 && c.optimizer.decay_steps == 0, "schedule");
    CHECK(c.optimizer.lr_decay_style == LT_LR_COSINE && c.optimizer.lr_wsd_decay_steps == 0 &&
              c.optimizer.lr_wsd_decay_style == LT_WSD_EXPONENTIAL,
          "decay style");
    CHECK(c.model.init_method_std == 0.02, "init std %g", c.model.init_method_std);
    CHECK(c.optimizer.beta1 == 0.9 && c.optimizer.beta2 == 0.95 && c.optimizer.eps == 1e-8, "adam");
    CHECK(c.optimizer.weight_decay == 0.1 && c.optimizer.clip_grad == 1.0, "wd/clip");
    CHECK(c.optimizer.zero_stage == 0, "zero");
    CHECK(c.data.train_path[0] == 0 && c.data.valid_path[0] == 0, "paths");
    CHECK(c.data.shuffle && c.data.prefetch == 2, "data");
    CHECK(c.checkpoint.dir[0] == 0 && c.checkpoint.load[0] == 0, "ckpt paths");
    CHECK(c.checkpoint.save_interval == 0, "save_interval");
    CHECK(c.logging.metrics_file[0] == 0 && c.logging.log_interval == 1, "logging");
    CHECK(c.logging.peak_tflops == 0, "peak");
    CHECK(c.eval.interval == 0 && c.eval.iters == 1, "eval");
    CHECK(c.sample.num_tokens == 64 && c.sample.temperature == 0.8, "sample");
    CHECK(c.sample.top_k == 40 && c.sample.seed == 42, "sample2");

    /* NULL path and no overrides: defaults, byte for byte. */
    LtConfig d;
    char err[256];
    memset(&d, 0x5a, sizeof d);
    CHECK(lt_config_load(&d, NULL, 0, NULL, err, sizeof err) == 0, "load NULL: %s", err);
    CHECK(memcmp(&c, &d, sizeof c) == 0, "load(NULL) != defaults");

    /* Defaults are valid and resolve the derived fields. */
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "validate defaults: %s", err);
    CHECK(c.model.ffn_hidden_size == 3072, "ffn %d", c.model.ffn_hidden_size);
    CHECK(c.optimizer.decay_steps == 100, "decay %ld", c.optimizer.decay_steps);
    CHECK(c.model.padded_vocab_size == 50304, "padded %d", c.model.padded_vocab_size);

    CHECK(strcmp(lt_precision_name(LT_PREC_BF16), "bf16") == 0, "precision name");
    CHECK(strcmp(lt_recompute_name(LT_RECOMPUTE_SELECTIVE), "selective") == 0, "recompute");
    CHECK(strcmp(lt_device_name(LT_DEVICE_CUDA), "cuda") == 0, "device name");
    CHECK(strcmp(lt_comm_backend_name(LT_COMM_NCCL), "nccl") == 0, "comm name");
}

static const char *FULL_YAML = "# every key\n"
                               "model:\n"
                               "  num_layers: 24\n"
                               "  hidden_size: 1024\n"
                               "  num_attention_heads: 16\n"
                               "  ffn_hidden_size: 4096\n"
                               "  seq_length: 2048\n"
                               "  max_position_embeddings: 2048\n"
                               "  vocab_size: 32000\n"
                               "  make_vocab_size_divisible_by: 64\n"
                               "parallel:\n"
                               "  tensor_model_parallel_size: 2\n"
                               "  pipeline_model_parallel_size: 2\n"
                               "  virtual_pipeline_model_parallel_size: 2\n"
                               "  sequence_parallel: yes\n"
                               "train:\n"
                               "  micro_batch_size: 4\n"
                               "  global_batch_size: 64\n"
                               "  steps: 5000\n"
                               "  precision: bf16\n"
                               "  seed: 18446744073709551615\n"
                               "  recompute: SELECTIVE\n"
                               "  device: cpu\n"
                               "  threads: 8\n"
                               "optimizer:\n"
                               "  lr: 3e-4\n"
                               "  min_lr: 3.0E-5\n"
                               "  warmup_steps: 100\n"
                               "  decay_steps: 4000\n"
                               "  beta1: 0.85\n"
                               "  beta2: 0.999\n"
                               "  eps: 1e-6\n"
                               "  weight_decay: 0\n"
                               "  clip_grad: .5\n"
                               "  zero_stage: 1\n"
                               "data:\n"
                               "  train_path: /data/train.bin\n"
                               "  valid_path: \"dir with spaces/valid.bin\"\n"
                               "  shuffle: Off\n"
                               "  prefetch: 4\n"
                               "checkpoint:\n"
                               "  dir: 'ckpt: run #1'\n"
                               "  save_interval: 1000\n"
                               "  load: ~\n"
                               "logging:\n"
                               "  metrics_file: \"\"\n"
                               "  log_interval: 10\n"
                               "  peak_tflops: 989.5\n"
                               "eval: {interval: 500, iters: 2}\n"
                               "comm:\n"
                               "  backend: mpi\n"
                               "sample:\n"
                               "  num_tokens: 128\n"
                               "  temperature: 1\n"
                               "  top_k: 0\n"
                               "  seed: 7\n";

static void test_load_file(void) {
    LtConfig c;
    char err[512] = "";
    REQUIRE(load(&c, FULL_YAML, 0, NULL, err, sizeof err) == 0, "load: %s", err);
    CHECK(c.model.num_layers == 24 && c.model.hidden_size == 1024, "model");
    CHECK(c.model.num_attention_heads == 16 && c.model.ffn_hidden_size == 4096, "model2");
    CHECK(c.model.seq_length == 2048 && c.model.max_position_embeddings == 2048, "seq");
    CHECK(c.model.vocab_size == 32000 && c.model.make_vocab_size_divisible_by == 64, "vocab");
    CHECK(c.model.padded_vocab_size == 0, "padded is only set by validate");
    CHECK(c.parallel.tensor_model_parallel_size == 2, "tp");
    CHECK(c.parallel.pipeline_model_parallel_size == 2, "pp");
    CHECK(c.parallel.virtual_pipeline_model_parallel_size == 2, "vpp");
    CHECK(c.parallel.sequence_parallel, "sp yes");
    CHECK(c.train.micro_batch_size == 4 && c.train.global_batch_size == 64, "batch");
    CHECK(c.train.steps == 5000 && c.train.threads == 8, "steps/threads");
    CHECK(c.train.precision == LT_PREC_BF16, "bf16");
    CHECK(c.train.seed == UINT64_MAX, "seed %" PRIu64, c.train.seed);
    CHECK(c.train.recompute == LT_RECOMPUTE_SELECTIVE, "enum case-insensitive");
    CHECK(c.train.device == LT_DEVICE_CPU, "cpu");
    CHECK(c.optimizer.lr == 3e-4 && c.optimizer.min_lr == 3e-5, "lr");
    CHECK(c.optimizer.warmup_steps == 100 && c.optimizer.decay_steps == 4000, "sched");
    CHECK(c.optimizer.beta1 == 0.85 && c.optimizer.beta2 == 0.999, "betas");
    CHECK(c.optimizer.eps == 1e-6 && c.optimizer.weight_decay == 0, "eps/wd");
    CHECK(c.optimizer.clip_grad == 0.5 && c.optimizer.zero_stage == 1, "clip/zero");
    CHECK(strcmp(c.data.train_path, "/data/train.bin") == 0, "train_path '%s'", c.data.train_path);
    CHECK(strcmp(c.data.valid_path, "dir with spaces/valid.bin") == 0, "valid_path");
    CHECK(!c.data.shuffle && c.data.prefetch == 4, "data");
    CHECK(strcmp(c.checkpoint.dir, "ckpt: run #1") == 0, "dir '%s'", c.checkpoint.dir);
    CHECK(c.checkpoint.save_interval == 1000 && c.checkpoint.load[0] == 0, "ckpt");
    CHECK(c.logging.metrics_file[0] == 0 && c.logging.log_interval == 10, "logging");
    CHECK(c.logging.peak_tflops == 989.5, "peak");
    CHECK(c.eval.interval == 500 && c.eval.iters == 2, "flow-style eval");
    CHECK(c.comm.backend == LT_COMM_MPI, "mpi");
    CHECK(c.sample.num_tokens == 128 && c.sample.temperature == 1.0, "sample");
    CHECK(c.sample.top_k == 0 && c.sample.seed == 7, "sample2");
    REQUIRE(lt_config_validate(&c, 8, err, sizeof err) == 0, "validate: %s", err);
    CHECK(c.model.padded_vocab_size == 32000, "32000 is a multiple of 64*2");
    CHECK(c.model.ffn_hidden_size == 4096 && c.optimizer.decay_steps == 4000, "kept");
}

/* Files that hold no keys at all load as defaults. */
static void test_empty_files(void) {
    static const char *const texts[] = {
        "", "# only a comment\n", "---\n", "---\n...\n", "train:\n", "train: ~\nmodel:\n", "{}\n",
    };
    LtConfig d, c;
    char err[512];
    lt_config_defaults(&d);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        err[0] = 0;
        int rc = load(&c, texts[i], 0, NULL, err, sizeof err);
        CHECK(rc == 0, "case %zu: %s", i, err);
        CHECK(rc != 0 || memcmp(&c, &d, sizeof c) == 0, "case %zu not defaults", i);
    }
    /* A plain null string value means "", a quoted one is the word. */
    REQUIRE(load(&c, "data:\n  train_path:\n  valid_path: \"null\"\ncheckpoint:\n  dir: null\n", 0,
                 NULL, err, sizeof err) == 0,
            "%s", err);
    CHECK(c.data.train_path[0] == 0, "empty plain -> ''");
    CHECK(strcmp(c.data.valid_path, "null") == 0, "quoted null kept");
    CHECK(c.checkpoint.dir[0] == 0, "null -> ''");
}

static void test_overrides(void) {
    LtConfig c;
    char err[512] = "";
    char *ov[] = {
        "train.steps=42",                   /* overrides the file's 5000 */
        "parallel.sequence_parallel=FALSE", /* bool, case-insensitive */
        "data.shuffle=on",
        "train.precision=fp32", /* enum */
        "comm.backend=nccl",
        "optimizer.lr=6e-4", /* double */
        "optimizer.min_lr=0",
        "sample.seed=18446744073709551615", /* uint64 max */
        "train.seed=0",
        "data.train_path=a=b c.bin", /* split at the first '=' */
        "checkpoint.dir=",           /* empty string */
        "checkpoint.load=null",      /* verbatim on the command line */
        "model.num_layers=7",
        "model.num_layers=+8", /* later wins, sign allowed */
        "train.threads=-0",
    };
    int n = (int)(sizeof ov / sizeof ov[0]);
    REQUIRE(load(&c, FULL_YAML, n, ov, err, sizeof err) == 0, "load: %s", err);
    CHECK(c.train.steps == 42, "steps %ld", c.train.steps);
    CHECK(!c.parallel.sequence_parallel && c.data.shuffle, "bools");
    CHECK(c.train.precision == LT_PREC_FP32 && c.comm.backend == LT_COMM_NCCL, "enums");
    CHECK(c.optimizer.lr == 6e-4 && c.optimizer.min_lr == 0.0, "doubles");
    CHECK(c.sample.seed == UINT64_MAX && c.train.seed == 0, "u64");
    CHECK(strcmp(c.data.train_path, "a=b c.bin") == 0, "path '%s'", c.data.train_path);
    CHECK(c.checkpoint.dir[0] == 0, "dir emptied");
    CHECK(strcmp(c.checkpoint.load, "null") == 0, "load '%s'", c.checkpoint.load);
    CHECK(c.model.num_layers == 8 && c.train.threads == 0, "ints");
    CHECK(c.model.hidden_size == 1024, "file value kept where not overridden");

    /* Overrides without a file. */
    char *ov2[] = {"eval.iters=3", "optimizer.beta2=0.98"};
    REQUIRE(lt_config_load(&c, NULL, 2, ov2, err, sizeof err) == 0, "%s", err);
    CHECK(c.eval.iters == 3 && c.optimizer.beta2 == 0.98, "no-file overrides");
    CHECK(c.model.hidden_size == 768, "defaults underneath");

    /* A shorter string replacing a longer one leaves no stale bytes. */
    LtConfig a, b;
    char *ov3[] = {"data.train_path=a-very-long-path-name.bin", "data.train_path=x"};
    char *ov4[] = {"data.train_path=x"};
    REQUIRE(lt_config_load(&a, NULL, 2, ov3, err, sizeof err) == 0, "%s", err);
    REQUIRE(lt_config_load(&b, NULL, 1, ov4, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "string tails not zeroed");
}

typedef struct {
    const char *yaml;     /* file contents; NULL = no file */
    const char *ov;       /* one override; NULL = none */
    const char *want[4];  /* substrings the message must contain */
    const char *not_want; /* substring it must not contain */
} ErrCase;

static void run_err_cases(const ErrCase *cases, size_t n, const char *what) {
    char err[512];
    LtConfig c, before;
    for (size_t i = 0; i < n; i++) {
        const ErrCase *e = &cases[i];
        memset(&c, 0xab, sizeof c);
        memcpy(&before, &c, sizeof c);
        char *ov[1] = {(char *)e->ov};
        strcpy(err, "(unset)");
        int rc = load(&c, e->yaml, e->ov ? 1 : 0, ov, err, sizeof err);
        const char *label = e->ov ? e->ov : e->yaml;
        CHECK(rc == -1, "%s case %zu (%s): expected failure", what, i, label);
        if (rc != -1)
            continue;
        for (int w = 0; w < 4; w++)
            CHECK(has(err, e->want[w]), "%s case %zu: '%s' not in: %s", what, i, e->want[w], err);
        CHECK(!e->not_want || !has(err, e->not_want), "%s case %zu: '%s' in: %s", what, i,
              e->not_want, err);
        CHECK(strchr(err, '\n') == NULL, "%s case %zu: message not one line", what, i);
        CHECK(memcmp(&c, &before, sizeof c) == 0, "%s case %zu: config modified on error", what, i);
    }
}

static void test_load_errors(void) {
    static const ErrCase cases[] = {
        /* YAML syntax */
        {"model:\n  num_layers: 1\n  hidden_size: 2: 3\n",
         NULL,
         {"cfg.yaml:3:", "YAML syntax error", "mapping values"},
         NULL},
        {"model:\n  num_layers: \"abc\n", NULL, {"cfg.yaml:", "YAML syntax error", "quoted"}, NULL},
        {"model:\n\tnum_layers: 3\n", NULL, {"cfg.yaml:2:", "YAML syntax error"}, NULL},
        {"train: {steps: 1\n", NULL, {"cfg.yaml:", "YAML syntax error"}, NULL},
        {"model:\n  num_layers: \"\xff\xfe\"\n", NULL, {"cfg.yaml", "cannot read YAML"}, NULL},
        /* structure */
        {"hello\n", NULL, {"cfg.yaml:1", "top level must be a mapping", "scalar"}, NULL},
        {"- a\n- b\n", NULL, {"top level", "sequence"}, NULL},
        {"train: 5\n", NULL, {"section 'train'", "mapping", "cfg.yaml:1"}, NULL},
        {"model: {}\ntrain:\n  - steps\n",
         NULL,
         {"section 'train'", "sequence", "cfg.yaml:3"},
         NULL},
        {"train:\n  steps:\n    a: 1\n",
         NULL,
         {"train.steps", "got a mapping", "cfg.yaml:3"},
         NULL},
        {"train:\n  steps: [1, 2]\n", NULL, {"train.steps", "sequence", "cfg.yaml:2"}, NULL},
        {"train:\n  steps: &a 5\n  threads: *a\n", NULL, {"train.threads", "alias"}, NULL},
        {"? [a, b]\n: 1\n", NULL, {"section names", "sequence"}, NULL},
        {"train:\n  ? [a]\n  : 1\n", NULL, {"section 'train'", "keys must be plain"}, NULL},
        {"train: {}\n---\nmodel: {}\n", NULL, {"cfg.yaml:2", "one YAML document"}, NULL},
        /* unknown names and did-you-mean */
        {"train:\n  step: 10\n",
         NULL,
         {"unknown key 'train.step'", "cfg.yaml:2", "(did you mean 'train.steps'?)"},
         NULL},
        {"model: {}\ntrian:\n  steps: 1\n",
         NULL,
         {"unknown section 'trian'", "cfg.yaml:2", "did you mean 'train'?"},
         NULL},
        {"train:\n  lr: 0.1\n", NULL, {"train.lr", "did you mean 'optimizer.lr'?"}, NULL},
        {"steps: 10\n", NULL, {"unknown section 'steps'", "did you mean 'train.steps'?"}, NULL},
        {"Model:\n  num_layers: 2\n", NULL, {"'Model'", "did you mean 'model'?"}, NULL},
        {"model:\n  hidden: 10\n",
         NULL,
         {"model.hidden'", "did you mean 'model.hidden_size'?"},
         NULL},
        {"sample:\n  topk: 5\n", NULL, {"sample.topk", "did you mean 'sample.top_k'?"}, NULL},
        {"train:\n  frobnicate: 1\n",
         NULL,
         {"unknown key 'train.frobnicate'", "cfg.yaml:2"},
         "did you mean"},
        {"zzzzzz: {}\n", NULL, {"unknown section 'zzzzzz'", "sections: model"}, "did you mean"},
        {"model:\n  padded_vocab_size: 50304\n",
         NULL,
         {"model.padded_vocab_size", "derived"},
         NULL},
        /* duplicates */
        {"train:\n  steps: 1\n  steps: 2\n",
         NULL,
         {"duplicate key 'train.steps'", "cfg.yaml:3", "line 2"},
         NULL},
        {"train:\n  steps: 1\nmodel: {}\ntrain:\n  seed: 2\n",
         NULL,
         {"duplicate section 'train'", "cfg.yaml:4"},
         NULL},
        /* types */
        {"train:\n  steps: ten\n",
         NULL,
         {"train.steps: expected an integer, got 'ten' at ", "cfg.yaml:2"},
         NULL},
        {"model:\n  num_layers: 1.5\n", NULL, {"model.num_layers", "integer", "'1.5'"}, NULL},
        {"model:\n  num_layers: 12abc\n", NULL, {"model.num_layers", "integer"}, NULL},
        {"model:\n  num_layers: 0x10\n", NULL, {"model.num_layers", "integer"}, NULL},
        {"model:\n  num_layers:\n", NULL, {"model.num_layers", "integer", "got ''"}, NULL},
        {"model:\n  num_layers: \" 3\"\n", NULL, {"model.num_layers", "integer"}, NULL},
        {"model:\n  num_layers: 99999999999\n", NULL, {"model.num_layers", "out of range"}, NULL},
        {"train:\n  steps: 99999999999999999999\n", NULL, {"train.steps", "out of range"}, NULL},
        {"train:\n  seed: -1\n", NULL, {"train.seed", "unsigned 64-bit"}, NULL},
        {"train:\n  seed: 18446744073709551616\n", NULL, {"train.seed", "out of range"}, NULL},
        {"sample:\n  seed: 1e3\n", NULL, {"sample.seed", "unsigned"}, NULL},
        {"optimizer:\n  lr: fast\n",
         NULL,
         {"optimizer.lr: expected a finite number, got 'fast'", "cfg.yaml:2"},
         NULL},
        {"optimizer:\n  lr: nan\n", NULL, {"optimizer.lr", "finite"}, NULL},
        {"optimizer:\n  lr: .inf\n", NULL, {"optimizer.lr", "finite"}, NULL},
        {"optimizer:\n  lr: 1e999\n", NULL, {"optimizer.lr", "finite"}, NULL},
        {"optimizer:\n  lr: 1e-3x\n", NULL, {"optimizer.lr", "finite"}, NULL},
        {"data:\n  shuffle: maybe\n", NULL, {"data.shuffle", "true/false", "'maybe'"}, NULL},
        {"data:\n  shuffle: 1\n", NULL, {"data.shuffle", "boolean"}, NULL},
        {"train:\n  precision: fp16\n", NULL, {"train.precision", "fp32|bf16", "'fp16'"}, NULL},
        {"train:\n  recompute: partial\n", NULL, {"train.recompute", "none|selective|full"}, NULL},
        {"train:\n  device: gpu\n", NULL, {"train.device", "auto|cpu|cuda"}, NULL},
        {"comm:\n  backend: gloo\n", NULL, {"comm.backend", "auto|nccl|mpi"}, NULL},
        {"data:\n  train_path: \"a\\0b\"\n", NULL, {"data.train_path", "NUL"}, NULL},
        /* per-key ranges in a file carry the location */
        {"model: {}\noptimizer:\n  beta2: 1.5\n",
         NULL,
         {"optimizer.beta2 must be in [0, 1), got 1.5", "cfg.yaml:3"},
         NULL},
        {"data:\n  prefetch: 0\n",
         NULL,
         {"data.prefetch must be in [1, 64], got 0", "cfg.yaml:2"},
         NULL},
        /* overrides */
        {NULL, "train.steps", {"malformed override 'train.steps'", "section.key=value"}, NULL},
        {NULL, "steps=5", {"malformed override 'steps=5'"}, NULL},
        {NULL, "=5", {"malformed override"}, NULL},
        {NULL, "train.steps=ten", {"train.steps", "'ten'", "command line"}, NULL},
        {NULL, "train.precision=fp8", {"train.precision", "fp32|bf16", "command line"}, NULL},
        {NULL, "a.b.c=1", {"unknown key 'a.b.c'", "command line"}, NULL},
        {NULL,
         "train.step=1",
         {"unknown key 'train.step'", "command line", "did you mean 'train.steps'?"},
         NULL},
        {NULL, "optimizer.beta=0.9", {"did you mean 'optimizer.beta1'?"}, NULL},
        {NULL, "trian.seed=5", {"did you mean 'train.seed'?"}, NULL},
        {NULL, "model.padded_vocab_size=5", {"derived"}, NULL},
        {NULL,
         "optimizer.zero_stage=3",
         {"optimizer.zero_stage must be in [0, 2], got 3", "command line"},
         NULL},
        {NULL, "train.steps=", {"train.steps", "integer"}, NULL},
        /* doubles the engine uses as fp32 must fit fp32 */
        {NULL, "optimizer.lr=1e39", {"optimizer.lr", "does not fit in fp32", "command line"}, NULL},
        {"optimizer:\n  weight_decay: 1e39\n", NULL, {"optimizer.weight_decay", "fp32", "cfg.yaml:2"},
         NULL},
        {NULL, "optimizer.eps=1e-50", {"optimizer.eps", "does not fit in fp32"}, NULL},
        /* explicit tags must agree with the key's type (!!str 5 is a string in YAML) */
        {"train:\n  steps: !!str 5\n", NULL, {"train.steps", "tagged !!str", "integer", "cfg.yaml:2"},
         NULL},
        {"optimizer:\n  lr: !!bool true\n", NULL, {"optimizer.lr", "tagged !!bool"}, NULL},
        {"model:\n  attention: !!int 1\n", NULL, {"model.attention", "tagged !!int", "string"}, NULL},
        {"train:\n  steps: !custom 5\n", NULL, {"train.steps", "unsupported YAML tag '!custom'"}, NULL},
        /* a file error wins over later overrides */
        {"train:\n  steps: x\n", "train.steps=5", {"train.steps", "cfg.yaml:2"}, NULL},
    };
    run_err_cases(cases, sizeof cases / sizeof cases[0], "load");

    /* Missing file, directory, over-long string, tiny/NULL error buffers. */
    char err[512];
    LtConfig c;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/does_not_exist.yaml", g_dir);
    CHECK(lt_config_load(&c, missing, 0, NULL, err, sizeof err) == -1, "missing file");
    CHECK(has(err, "does_not_exist.yaml") && has(err, "cannot open"), "msg: %s", err);
    CHECK(lt_config_load(&c, g_dir, 0, NULL, err, sizeof err) == -1, "directory");
    CHECK(has(err, "is a directory") && has(err, g_dir), "msg: %s", err);

    char *big = malloc(LT_PATH_MAX + 64);
    REQUIRE(big, "malloc");
    int o = snprintf(big, LT_PATH_MAX + 64, "data.valid_path=");
    memset(big + o, 'p', LT_PATH_MAX);
    big[o + LT_PATH_MAX] = 0;
    CHECK(lt_config_load(&c, NULL, 1, &big, err, sizeof err) == -1, "long path");
    CHECK(has(err, "data.valid_path") && has(err, "too long"), "msg: %s", err);
    big[o + LT_PATH_MAX - 1] = 0; /* exactly LT_PATH_MAX-1 bytes fits */
    CHECK(lt_config_load(&c, NULL, 1, &big, err, sizeof err) == 0, "max path: %s", err);
    CHECK(strlen(c.data.valid_path) == LT_PATH_MAX - 1, "stored length");
    free(big);

    char small[12];
    char *bad[] = {"train.steps=ten"};
    CHECK(lt_config_load(&c, NULL, 1, bad, small, sizeof small) == -1, "small buffer");
    CHECK(strlen(small) < sizeof small, "truncated message");
    CHECK(lt_config_load(&c, NULL, 1, bad, NULL, 0) == -1, "NULL err buffer");
    CHECK(lt_config_load(&c, NULL, 1, NULL, err, sizeof err) == -1, "NULL overrides array");

    /* tags that agree with the key's type are accepted */
    CHECK(load(&c, "train:\n  steps: !!int 7\noptimizer:\n  lr: !!float 0.5\n  min_lr: !!int 0\n"
                   "data:\n  train_path: !!str 5\n",
               0, NULL, err, sizeof err) == 0,
          "agreeing tags: %s", err);
    CHECK(c.train.steps == 7 && c.optimizer.lr == 0.5 && !strcmp(c.data.train_path, "5"),
          "tagged values");
}

/* Every per-key range: the first value is refused, the second (the boundary)
 * accepted. */
static void test_ranges(void) {
    static const struct {
        const char *bad, *good, *want;
    } r[] = {
        {"model.num_layers=0", "model.num_layers=1", ">= 1"},
        {"model.hidden_size=0", "model.hidden_size=1", ">= 1"},
        {"model.num_attention_heads=0", "model.num_attention_heads=1", ">= 1"},
        {"model.ffn_hidden_size=-1", "model.ffn_hidden_size=0", ">= 0"},
        {"model.seq_length=0", "model.seq_length=1", ">= 1"},
        {"model.max_position_embeddings=0", "model.max_position_embeddings=1", ">= 1"},
        {"model.vocab_size=1", "model.vocab_size=2", ">= 2"},
        {"model.make_vocab_size_divisible_by=0", "model.make_vocab_size_divisible_by=1", ">= 1"},
        {"parallel.tensor_model_parallel_size=0", "parallel.tensor_model_parallel_size=1", ">= 1"},
        {"parallel.pipeline_model_parallel_size=0", "parallel.pipeline_model_parallel_size=1",
         ">= 1"},
        {"parallel.virtual_pipeline_model_parallel_size=0",
         "parallel.virtual_pipeline_model_parallel_size=1", ">= 1"},
        {"train.micro_batch_size=0", "train.micro_batch_size=1", ">= 1"},
        {"train.global_batch_size=0", "train.global_batch_size=1", ">= 1"},
        {"train.steps=-1", "train.steps=0", ">= 0"},
        {"train.threads=-1", "train.threads=0", ">= 0"},
        {"optimizer.lr=-0.1", "optimizer.lr=0", ">= 0"},
        {"optimizer.min_lr=-1e-9", "optimizer.min_lr=0", ">= 0"},
        {"optimizer.warmup_steps=-1", "optimizer.warmup_steps=0", ">= 0"},
        {"optimizer.decay_steps=-1", "optimizer.decay_steps=0", ">= 0"},
        {"optimizer.beta1=1", "optimizer.beta1=0", "[0, 1)"},
        {"optimizer.beta1=-0.5", "optimizer.beta1=0.999", "[0, 1)"},
        {"optimizer.beta2=1.0", "optimizer.beta2=0.0", "[0, 1)"},
        {"optimizer.eps=0", "optimizer.eps=1e-40", "> 0"},
        {"optimizer.weight_decay=-1", "optimizer.weight_decay=0", ">= 0"},
        {"optimizer.clip_grad=-1", "optimizer.clip_grad=0", ">= 0"},
        {"optimizer.zero_stage=3", "optimizer.zero_stage=2", "[0, 2]"},
        {"optimizer.zero_stage=-1", "optimizer.zero_stage=0", "[0, 2]"},
        {"data.prefetch=0", "data.prefetch=1", "[1, 64]"},
        {"data.prefetch=65", "data.prefetch=64", "[1, 64]"},
        {"checkpoint.save_interval=-1", "checkpoint.save_interval=0", ">= 0"},
        {"logging.log_interval=0", "logging.log_interval=1", ">= 1"},
        {"logging.peak_tflops=-1", "logging.peak_tflops=0", ">= 0"},
        {"eval.interval=-1", "eval.interval=0", ">= 0"},
        {"eval.iters=0", "eval.iters=1", ">= 1"},
        {"sample.num_tokens=0", "sample.num_tokens=1", ">= 1"},
        {"sample.temperature=0", "sample.temperature=0.01", "> 0"},
        {"sample.temperature=-1", "sample.temperature=100", "> 0"},
        {"sample.top_k=-1", "sample.top_k=0", ">= 0"},
    };
    char err[512], key[128];
    LtConfig c;
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        char *bad[] = {(char *)r[i].bad}, *good[] = {(char *)r[i].good};
        size_t klen = strcspn(r[i].bad, "=");
        memcpy(key, r[i].bad, klen);
        key[klen] = 0;
        err[0] = 0;
        CHECK(lt_config_load(&c, NULL, 1, bad, err, sizeof err) == -1, "%s accepted", r[i].bad);
        CHECK(has(err, key) && has(err, r[i].want) && has(err, "command line"), "%s: message '%s'",
              r[i].bad, err);
        CHECK(lt_config_load(&c, NULL, 1, good, err, sizeof err) == 0, "%s refused: %s", r[i].good,
              err);
    }
}

typedef struct {
    const char *ov[6];
    int world;
    const char *want[4];
} ValCase;

static void test_validate_errors(void) {
    static const ValCase cases[] = {
        {{"model.hidden_size=770"},
         1,
         {"model.hidden_size (770)", "model.num_attention_heads (12)"}},
        {{"model.seq_length=2048"},
         1,
         {"model.seq_length (2048)", "model.max_position_embeddings (1024)"}},
        {{"parallel.tensor_model_parallel_size=4"},
         6,
         {"world size 6", "parallel.tensor_model_parallel_size (4)",
          "parallel.pipeline_model_parallel_size (1)"}},
        {{"parallel.pipeline_model_parallel_size=4", "model.num_layers=12"},
         2,
         {"world size 2", "pipeline_model_parallel_size (4)"}},
        {{"train.global_batch_size=10", "train.micro_batch_size=4"},
         1,
         {"train.global_batch_size (10)", "train.micro_batch_size (4)", "data-parallel size (1)"}},
        {{"train.global_batch_size=6"},
         4,
         {"train.global_batch_size (6)", "train.micro_batch_size (1)", "data-parallel size (4)"}},
        {{"model.hidden_size=100", "model.num_attention_heads=4",
          "parallel.tensor_model_parallel_size=8"},
         8,
         {"model.hidden_size (100)", "parallel.tensor_model_parallel_size (8)"}},
        {{"model.num_attention_heads=6", "parallel.tensor_model_parallel_size=4"},
         4,
         {"model.num_attention_heads (6)", "parallel.tensor_model_parallel_size (4)"}},
        {{"model.ffn_hidden_size=1001", "parallel.tensor_model_parallel_size=2"},
         2,
         {"model.ffn_hidden_size (1001)", "parallel.tensor_model_parallel_size (2)"}},
        {{"parallel.pipeline_model_parallel_size=5"},
         5,
         {"model.num_layers (12)", "parallel.pipeline_model_parallel_size (5)"}},
        {{"parallel.pipeline_model_parallel_size=2",
          "parallel.virtual_pipeline_model_parallel_size=4"},
         2,
         {"model.num_layers (12)", "parallel.virtual_pipeline_model_parallel_size (4)"}},
        {{"parallel.virtual_pipeline_model_parallel_size=2"},
         1,
         {"parallel.virtual_pipeline_model_parallel_size", "pipeline_model_parallel_size > 1"}},
        {{"parallel.sequence_parallel=true"},
         1,
         {"parallel.sequence_parallel needs parallel.tensor_model_parallel_size > 1"}},
        {{"parallel.sequence_parallel=true", "parallel.tensor_model_parallel_size=8",
          "model.hidden_size=1024", "model.num_attention_heads=16", "model.seq_length=1020"},
         8,
         {"parallel.sequence_parallel", "model.seq_length (1020)"}},
        {{"parallel.tp_comm_overlap=true"},
         1,
         {"parallel.tp_comm_overlap", "needs parallel.sequence_parallel: true"}},
        {{"parallel.tp_comm_overlap=true", "parallel.tensor_model_parallel_size=2"},
         2,
         {"parallel.tp_comm_overlap", "needs parallel.sequence_parallel: true"}},
        {{"optimizer.lr=1e-4", "optimizer.min_lr=1e-3"},
         1,
         {"optimizer.min_lr (0.001)", "optimizer.lr (0.0001)"}},
        {{"optimizer.warmup_steps=200"},
         1,
         {"optimizer.warmup_steps (200)", "optimizer.decay_steps (100", "train.steps"}},
        {{"optimizer.warmup_steps=60", "optimizer.decay_steps=50"},
         1,
         {"optimizer.warmup_steps (60)", "optimizer.decay_steps (50)"}},
        {{"optimizer.lr_decay_style=wsd"},
         1,
         {"optimizer.lr_decay_style=wsd needs optimizer.lr_wsd_decay_steps"}},
        {{"optimizer.lr_decay_style=wsd", "optimizer.warmup_steps=10",
          "optimizer.lr_wsd_decay_steps=91"},
         1,
         {"optimizer.lr_wsd_decay_steps (91)", "optimizer.decay_steps (100, from train.steps)",
          "optimizer.warmup_steps (10) = 90"}},
        {{"optimizer.lr_decay_style=wsd", "optimizer.decay_steps=40",
          "optimizer.warmup_steps=40", "optimizer.lr_wsd_decay_steps=1"},
         1,
         {"optimizer.lr_decay_style=wsd needs optimizer.decay_steps (40) > "
          "optimizer.warmup_steps (40)"}},
        {{"optimizer.lr_wsd_decay_steps=10"},
         1,
         {"optimizer.lr_wsd_decay_steps", "needs optimizer.lr_decay_style=wsd",
          "optimizer.lr_decay_style is cosine"}},
        {{"optimizer.lr_decay_style=linear", "optimizer.lr_wsd_decay_style=minus_sqrt"},
         1,
         {"optimizer.lr_wsd_decay_style", "needs optimizer.lr_decay_style=wsd",
          "optimizer.lr_decay_style is linear"}},
        {{"model.vocab_size=2147483000", "model.make_vocab_size_divisible_by=1024"},
         1,
         {"model.vocab_size", "too large"}},
        {{"model.hidden_size=600000000", "model.num_attention_heads=1"},
         1,
         {"model.ffn_hidden_size", "model.hidden_size"}},
        {{"train.global_batch_size=16", "train.rampup_batch_size=4 4"},
         1,
         {"train.rampup_batch_size '4 4'", "three integers"}},
        {{"train.global_batch_size=16", "train.rampup_batch_size=16 4 100"},
         1,
         {"train.rampup_batch_size", "START (16) must be below", "train.global_batch_size (16)"}},
        {{"train.global_batch_size=16", "train.rampup_batch_size=4 5 100"},
         1,
         {"train.rampup_batch_size", "16 - 4 = 12", "INCREMENT (5)"}},
        {{"train.global_batch_size=16", "train.rampup_batch_size=4 4 0"},
         1,
         {"train.rampup_batch_size", "SAMPLES (0)", "positive"}},
        {{"train.global_batch_size=16", "train.rampup_batch_size=2 2 100"},
         4,
         {"train.rampup_batch_size '2 2 100'", "START (2)", "train.micro_batch_size (1)",
          "data-parallel size (4)"}},
        {{"train.global_batch_size=16", "train.rampup_batch_size=1 1 100",
          "parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=2"},
         2,
         {"train.rampup_batch_size", "INCREMENT (1)", "parallel.pipeline_model_parallel_size (2"}},
        {{"train.global_batch_size=16", "train.rampup_batch_size=4 4 100", "train.cuda_graph=true"},
         1,
         {"train.cuda_graph", "train.rampup_batch_size"}},
        {{NULL}, 0, {"world size"}},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const ValCase *v = &cases[i];
        int n = 0;
        while (n < 6 && v->ov[n])
            n++;
        LtConfig c, before;
        int rc = lt_config_load(&c, NULL, n, (char **)v->ov, err, sizeof err);
        CHECK(rc == 0, "case %zu: load failed: %s", i, err);
        if (rc)
            continue;
        memcpy(&before, &c, sizeof c);
        strcpy(err, "(unset)");
        CHECK(lt_config_validate(&c, v->world, err, sizeof err) == -1, "case %zu passed", i);
        for (int w = 0; w < 4; w++)
            CHECK(has(err, v->want[w]), "case %zu: '%s' not in: %s", i, v->want[w], err);
        CHECK(memcmp(&c, &before, sizeof c) == 0, "case %zu: validate modified *c", i);
    }

    /* Structs filled in code get the per-key range checks too. */
    LtConfig c;
    lt_config_defaults(&c);
    c.model.num_layers = 0;
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == -1 && has(err, "model.num_layers"),
          "range in validate: %s", err);
    lt_config_defaults(&c);
    c.train.precision = (LtPrecision)7;
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == -1 && has(err, "train.precision"),
          "enum in validate: %s", err);
    lt_config_defaults(&c);
    c.optimizer.beta1 = NAN;
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == -1 && has(err, "optimizer.beta1"),
          "nan in validate: %s", err);
}

/* The refusals a first multi-rank run meets suggest values that work, and
 * each suggestion, applied, passes that rule. */
static void test_validate_suggestions(void) {
    static const struct {
        const char *ov[4];
        int world;
        const char *want;  /* the suggestion in the message */
        const char *fixed; /* the suggested value as an override */
    } cases[] = {
        {{"train.global_batch_size=16", "train.micro_batch_size=8"},
         4,
         "try train.micro_batch_size=4 (or train.global_batch_size=32)",
         "train.micro_batch_size=4"},
        {{"train.global_batch_size=16", "train.micro_batch_size=8"},
         4,
         "try train.micro_batch_size=4 (or train.global_batch_size=32)",
         "train.global_batch_size=32"},
        {{"train.global_batch_size=6", "train.micro_batch_size=2"},
         4,
         "try train.global_batch_size=8",
         "train.global_batch_size=8"},
        {{"train.steps=10", "optimizer.warmup_steps=20"},
         1,
         "try optimizer.warmup_steps=10 or less (or train.steps=20)",
         "optimizer.warmup_steps=10"},
        {{"optimizer.decay_steps=50", "optimizer.warmup_steps=60"},
         1,
         "try optimizer.warmup_steps=50 or less (or optimizer.decay_steps=60)",
         "optimizer.decay_steps=60"},
        {{"model.hidden_size=770"}, 1, "try model.num_attention_heads=11",
         "model.num_attention_heads=11"},
        {{"parallel.tensor_model_parallel_size=4", "model.num_attention_heads=6"},
         4,
         "try parallel.tensor_model_parallel_size=2",
         "parallel.tensor_model_parallel_size=2"},
        {{"parallel.tensor_model_parallel_size=4"}, 6, "run on 4 or 8 ranks", NULL},
        {{"parallel.pipeline_model_parallel_size=4",
          "parallel.virtual_pipeline_model_parallel_size=3", "train.global_batch_size=6"},
         4,
         "try train.global_batch_size=8",
         "train.global_batch_size=8"},
        {{"eval.samples=5", "train.micro_batch_size=2", "train.global_batch_size=2"},
         1,
         "try eval.samples=6",
         "eval.samples=6"},
        {{"optimizer.lr_decay_style=wsd", "optimizer.warmup_steps=20"},
         1,
         "e.g. optimizer.lr_wsd_decay_steps=8",
         "optimizer.lr_wsd_decay_steps=8"},
        {{"optimizer.lr_decay_style=wsd", "optimizer.decay_steps=50",
          "optimizer.lr_wsd_decay_steps=60"},
         1,
         "try optimizer.lr_wsd_decay_steps=50 or less",
         "optimizer.lr_wsd_decay_steps=50"},
    };
    char err[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = 0;
        const char *ov[5];
        while (n < 4 && cases[i].ov[n]) ov[n] = cases[i].ov[n], n++;
        LtConfig c;
        CHECK(lt_config_load(&c, NULL, n, (char **)ov, err, sizeof err) == 0, "case %zu: %s", i,
              err);
        CHECK(lt_config_validate(&c, cases[i].world, err, sizeof err) == -1 &&
                  has(err, cases[i].want),
              "case %zu: '%s' not in: %s", i, cases[i].want, err);
        if (!cases[i].fixed) continue;
        ov[n++] = cases[i].fixed;
        CHECK(lt_config_load(&c, NULL, n, (char **)ov, err, sizeof err) == 0, "case %zu: %s", i,
              err);
        CHECK(lt_config_validate(&c, cases[i].world, err, sizeof err) == 0,
              "case %zu: the suggestion %s refused: %s", i, cases[i].fixed, err);
    }
}

/* model.attention and model.attention_deterministic: parsing, the bad-input
 * messages, and the cross-key refusals of an explicit cudnn. */
static void test_attention_keys(void) {
    LtConfig c;
    char err[512];
    char *ov[] = {"model.attention=CUDNN", "model.attention_deterministic=off",
                  "train.precision=bf16"};
    REQUIRE(lt_config_load(&c, NULL, 3, ov, err, sizeof err) == 0, "load: %s", err);
    CHECK(c.model.attention == LT_ATTN_CUDNN && !c.model.attention_deterministic, "values");
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "cudnn + bf16 + auto device: %s", err);
    CHECK(!strcmp(lt_attention_name(c.model.attention), "cudnn") &&
              !strcmp(lt_attention_name((LtAttnImpl)9), "unknown"),
          "names");
    REQUIRE(load(&c, "model:\n  attention: lattice\n", 0, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(c.model.attention == LT_ATTN_LATTICE && c.model.attention_deterministic, "yaml");
    static const struct {
        const char *ov[3];
        int load_fails; /* 1: lt_config_load refuses, 0: lt_config_validate does */
        const char *want[2];
    } bad[] = {
        {{"model.attention=flash"}, 1, {"model.attention", "auto|cudnn|lattice"}},
        {{"model.attention_deterministic=maybe"}, 1, {"model.attention_deterministic", "boolean"}},
        {{"model.attention=cudnn"}, 0, {"model.attention=cudnn", "train.precision=bf16"}},
        {{"model.attention=cudnn", "train.precision=bf16", "train.device=cpu"},
         0,
         {"model.attention=cudnn", "train.device=cpu"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int n = 0;
        while (n < 3 && bad[i].ov[n]) n++;
        strcpy(err, "(unset)");
        int rc = lt_config_load(&c, NULL, n, (char **)bad[i].ov, err, sizeof err);
        if (!bad[i].load_fails && rc == 0) rc = lt_config_validate(&c, 1, err, sizeof err);
        CHECK(rc == -1, "case %zu accepted", i);
        for (int w = 0; w < 2; w++)
            CHECK(has(err, bad[i].want[w]), "case %zu: '%s' not in: %s", i, bad[i].want[w], err);
    }
    char *fine[] = {"model.attention=auto", "train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 2, fine, err, sizeof err) == 0, "%s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "auto on the CPU: %s", err);
}

/* c printed to a file and loaded back into *back: 1, or 0 (said why). */
static int print_and_reload(const LtConfig *c, LtConfig *back) {
    char err[512];
    const char *path = write_file("printed.yaml", "");
    FILE *f = fopen(path, "w");
    if (!f) return printf("  cannot open %s\n", path), 0;
    lt_config_print(c, f);
    fclose(f);
    if (lt_config_load(back, path, 0, NULL, err, sizeof err) == 0) return 1;
    printf("  reload: %s\n", err);
    return 0;
}

/* model.qk_layernorm: off by default, a Llama key (a GPT config carrying it is refused,
 * naming it), a boolean, printed and reloaded. */
static void test_qk_layernorm_key(void) {
    LtConfig c;
    char err[512];
    lt_config_defaults(&c);
    CHECK(!c.model.qk_layernorm, "default on");
    char *llama[] = {"model.arch=llama", "model.qk_layernorm=true", "model.kv_channels=16",
                     "model.ffn_hidden_size=2048", "train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 5, llama, err, sizeof err) == 0, "load: %s", err);
    CHECK(c.model.qk_layernorm, "llama: not set");
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "llama refused: %s", err);
    char *gpt[] = {"model.qk_layernorm=true", "train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 2, gpt, err, sizeof err) == 0, "load: %s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == -1, "gpt accepted it");
    CHECK(has(err, "model.qk_layernorm") && has(err, "model.arch=llama"), "gpt: %s", err);
    char *bad[] = {"model.qk_layernorm=sometimes"};
    CHECK(lt_config_load(&c, NULL, 1, bad, err, sizeof err) == -1, "a non-boolean accepted");
    CHECK(has(err, "model.qk_layernorm"), "non-boolean: %s", err);
    REQUIRE(lt_config_load(&c, NULL, 5, llama, err, sizeof err) == 0, "load: %s", err);
    LtConfig back;
    REQUIRE(print_and_reload(&c, &back), "print -> load failed");
    CHECK(back.model.qk_layernorm, "lost in print -> load");
}

/* model.add_bias_linear: auto until validate, then the arch's (gpt true, llama
 * false: every existing config keeps its model); llama takes either value and
 * model.add_qkv_bias; gpt without linear biases is refused naming the key;
 * the resolved value is printed and reloaded. */
static void test_linear_bias_keys(void) {
    LtConfig c;
    char err[512];
    lt_config_defaults(&c);
    CHECK(c.model.add_bias_linear == LT_BIAS_AUTO && !c.model.add_qkv_bias, "defaults");
    char *gpt[] = {"train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 1, gpt, err, sizeof err) == 0, "load: %s", err);
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "gpt: %s", err);
    CHECK(c.model.add_bias_linear == LT_BIAS_TRUE, "gpt resolved to %d", c.model.add_bias_linear);
    char *llama[] = {"model.arch=llama", "model.ffn_hidden_size=2048", "train.device=cpu",
                     "model.add_bias_linear=true", "model.add_qkv_bias=true"};
    REQUIRE(lt_config_load(&c, NULL, 3, llama, err, sizeof err) == 0, "load: %s", err);
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "llama: %s", err);
    CHECK(c.model.add_bias_linear == LT_BIAS_FALSE, "llama resolved to %d",
          c.model.add_bias_linear);
    REQUIRE(lt_config_load(&c, NULL, 5, llama, err, sizeof err) == 0, "load: %s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "llama with biases: %s", err);
    CHECK(c.model.add_bias_linear == LT_BIAS_TRUE && c.model.add_qkv_bias, "llama biases lost");
    char *nogpt[] = {"model.add_bias_linear=false", "train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 2, nogpt, err, sizeof err) == 0, "load: %s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == -1, "gpt without biases accepted");
    CHECK(has(err, "model.add_bias_linear") && has(err, "model.arch=gpt"), "gpt: %s", err);
    char *bad[] = {"model.add_bias_linear=sometimes"};
    CHECK(lt_config_load(&c, NULL, 1, bad, err, sizeof err) == -1, "a non-boolean accepted");
    CHECK(has(err, "model.add_bias_linear"), "non-boolean: %s", err);
    char *qkv[] = {"model.arch=llama", "model.ffn_hidden_size=2048", "train.device=cpu",
                   "model.add_qkv_bias=true"};
    REQUIRE(lt_config_load(&c, NULL, 4, qkv, err, sizeof err) == 0, "load: %s", err);
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "qkv bias: %s", err);
    LtConfig back;
    REQUIRE(print_and_reload(&c, &back), "print -> load failed");
    CHECK(back.model.add_bias_linear == LT_BIAS_FALSE && back.model.add_qkv_bias,
          "lost in print -> load (%d, %d)", back.model.add_bias_linear, back.model.add_qkv_bias);
}

/* model.softmax_type (Megatron-Core's): vanilla by default; off-by-one and learnable for
 * either block; any other value refused naming the key and the allowed ones; printed and
 * reloaded (the hyphen survives YAML); a config written before the key loads vanilla. */
static void test_softmax_type_key(void) {
    LtConfig c;
    char err[512];
    lt_config_defaults(&c);
    CHECK(c.model.softmax_type == LT_SOFTMAX_VANILLA, "default %d", c.model.softmax_type);
    char *gpt[] = {"model.softmax_type=off-by-one", "train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 2, gpt, err, sizeof err) == 0, "load: %s", err);
    CHECK(c.model.softmax_type == LT_SOFTMAX_OFF_BY_ONE, "gpt: %d", c.model.softmax_type);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "gpt refused: %s", err);
    char *llama[] = {"model.arch=llama", "model.softmax_type=learnable", "model.kv_channels=16",
                     "model.ffn_hidden_size=2048", "train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 5, llama, err, sizeof err) == 0, "load: %s", err);
    CHECK(c.model.softmax_type == LT_SOFTMAX_LEARNABLE, "llama: %d", c.model.softmax_type);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "llama refused: %s", err);
    CHECK(!strcmp(lt_softmax_type_name(c.model.softmax_type), "learnable"), "name");
    LtConfig back;
    REQUIRE(print_and_reload(&c, &back), "print -> load failed");
    CHECK(back.model.softmax_type == LT_SOFTMAX_LEARNABLE, "lost in print -> load");
    char *off[] = {"model.softmax_type=off-by-one"};
    REQUIRE(lt_config_load(&c, NULL, 1, off, err, sizeof err) == 0, "load: %s", err);
    REQUIRE(print_and_reload(&c, &back), "print -> load failed");
    CHECK(back.model.softmax_type == LT_SOFTMAX_OFF_BY_ONE, "off-by-one lost in print -> load");
    char *bad[] = {"model.softmax_type=sink"};
    CHECK(lt_config_load(&c, NULL, 1, bad, err, sizeof err) == -1, "an unknown value accepted");
    CHECK(has(err, "model.softmax_type") && has(err, "off-by-one"), "unknown value: %s", err);
    const char *old = write_file("old.yaml", "model:\n  num_layers: 2\n");
    REQUIRE(lt_config_load(&back, old, 0, NULL, err, sizeof err) == 0, "old config: %s", err);
    CHECK(back.model.softmax_type == LT_SOFTMAX_VANILLA, "a config without the key");
}

static void test_validate_ok(void) {
    char *ov[] = {
        "parallel.tensor_model_parallel_size=2",
        "parallel.pipeline_model_parallel_size=2",
        "parallel.virtual_pipeline_model_parallel_size=3",
        "parallel.sequence_parallel=true",
        "train.micro_batch_size=2",
        "train.global_batch_size=16",
        "train.steps=500",
        "optimizer.warmup_steps=10",
    };
    LtConfig c, again;
    char err[512];
    REQUIRE(lt_config_load(&c, NULL, 8, ov, err, sizeof err) == 0, "%s", err);
    REQUIRE(lt_config_validate(&c, 8, err, sizeof err) == 0, "validate: %s", err);
    CHECK(c.model.ffn_hidden_size == 3072, "ffn %d", c.model.ffn_hidden_size);
    CHECK(c.optimizer.decay_steps == 500, "decay %ld", c.optimizer.decay_steps);
    CHECK(c.model.padded_vocab_size == 50432, "padded %d (multiple of 256)",
          c.model.padded_vocab_size);
    memcpy(&again, &c, sizeof c);
    CHECK(lt_config_validate(&again, 8, err, sizeof err) == 0, "second validate: %s", err);
    CHECK(memcmp(&again, &c, sizeof c) == 0, "validate is not idempotent");

    /* steps 0 leaves decay 0 and any warmup passes; explicit ffn kept. */
    char *ov2[] = {"train.steps=0", "optimizer.warmup_steps=5", "model.ffn_hidden_size=1000",
                   "model.vocab_size=128", "optimizer.min_lr=6e-4"};
    REQUIRE(lt_config_load(&c, NULL, 5, ov2, err, sizeof err) == 0, "%s", err);
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "validate: %s", err);
    CHECK(c.optimizer.decay_steps == 0 && c.model.ffn_hidden_size == 1000, "resolution");
    CHECK(c.model.padded_vocab_size == 128, "exact multiple stays %d", c.model.padded_vocab_size);

    /* Data parallelism: world 16 = tp 2 * pp 2 * dp 4, global 8 = micro 2 * dp 4. */
    char *ov3[] = {"parallel.tensor_model_parallel_size=2",
                   "parallel.pipeline_model_parallel_size=2", "train.micro_batch_size=2",
                   "train.global_batch_size=8"};
    REQUIRE(lt_config_load(&c, NULL, 4, ov3, err, sizeof err) == 0, "%s", err);
    CHECK(lt_config_validate(&c, 16, err, sizeof err) == 0, "dp 4: %s", err);
    CHECK(lt_config_validate(&c, 32, err, sizeof err) == -1, "dp 8 needs global %% 16");
}

/* The schedule keys: any case, accepted at the edges of the rules (the whole
 * span after the warm-up, train.steps 0, inverse_square_root without a
 * warm-up as Megatron's max(warmup, 1) allows), misspellings refused with the
 * list; model.init_method_std must be > 0. */
static void test_schedule_keys(void) {
    LtConfig c;
    char err[512];
    char *wsd[] = {"optimizer.lr_decay_style=WSD", "optimizer.warmup_steps=10",
                   "optimizer.lr_wsd_decay_steps=90", "optimizer.lr_wsd_decay_style=Minus_Sqrt"};
    REQUIRE(lt_config_load(&c, NULL, 4, wsd, err, sizeof err) == 0, "%s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "the whole span: %s", err);
    CHECK(c.optimizer.lr_decay_style == LT_LR_WSD && c.optimizer.lr_wsd_decay_steps == 90 &&
              c.optimizer.lr_wsd_decay_style == LT_WSD_MINUS_SQRT,
          "parsed %d %ld %d", c.optimizer.lr_decay_style, c.optimizer.lr_wsd_decay_steps,
          c.optimizer.lr_wsd_decay_style);
    char *steps0[] = {"train.steps=0", "optimizer.lr_decay_style=wsd",
                      "optimizer.lr_wsd_decay_steps=5"};
    REQUIRE(lt_config_load(&c, NULL, 3, steps0, err, sizeof err) == 0, "%s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "train.steps=0: %s", err);
    char *isqrt[] = {"optimizer.lr_decay_style=inverse_square_root", "model.init_method_std=0.008"};
    REQUIRE(lt_config_load(&c, NULL, 2, isqrt, err, sizeof err) == 0, "%s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "no warm-up: %s", err);
    CHECK(c.optimizer.lr_decay_style == LT_LR_INVERSE_SQRT && c.model.init_method_std == 0.008,
          "parsed %d %g", c.optimizer.lr_decay_style, c.model.init_method_std);
    static const struct {
        char *ov;
        const char *want[2];
    } bad[] = {
        {"optimizer.lr_decay_style=inverse-square-root",
         {"optimizer.lr_decay_style", "cosine|linear|constant|inverse_square_root|wsd"}},
        {"optimizer.lr_wsd_decay_style=sqrt",
         {"optimizer.lr_wsd_decay_style", "exponential|linear|cosine|minus_sqrt"}},
        {"optimizer.lr_wsd_decay_steps=-1", {"optimizer.lr_wsd_decay_steps", ">= 0"}},
        {"model.init_method_std=0", {"model.init_method_std", "> 0"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *ov[] = {bad[i].ov};
        CHECK(lt_config_load(&c, NULL, 1, ov, err, sizeof err) == -1 &&
                  has(err, bad[i].want[0]) && has(err, bad[i].want[1]),
              "%s: %s", bad[i].ov, err);
    }
}

/* Print c (validated with `world`), load it back, validate, compare bytes. */
static void roundtrip(const LtConfig *c, int world, const char *label) {
    char err[512];
    const char *path = write_file("printed.yaml", "");
    REQUIRE(path, "%s: temp file", label);
    char saved[256];
    snprintf(saved, sizeof saved, "%s", path);
    FILE *f = fopen(saved, "wb");
    REQUIRE(f, "%s: open", label);
    lt_config_print(c, f);
    fclose(f);
    LtConfig back;
    REQUIRE(lt_config_load(&back, saved, 0, NULL, err, sizeof err) == 0, "%s: reload: %s", label,
            err);
    REQUIRE(lt_config_validate(&back, world, err, sizeof err) == 0, "%s: revalidate: %s", label,
            err);
    CHECK(memcmp(&back, c, sizeof back) == 0, "%s: round trip differs", label);
    CHECK(strcmp(back.data.train_path, c->data.train_path) == 0, "%s: train_path '%s'", label,
          back.data.train_path);
    CHECK(back.optimizer.lr == c->optimizer.lr && back.train.seed == c->train.seed, "%s: lr/seed",
          label);
}

/* model.quick_geglu, model.glu_linear_offset, model.activation_func_clamp_value: off by
 * default (SwiGLU), gpt-oss's values accepted for a Llama model and carried into its
 * dimensions, each refused for GPT (naming it), the clamp refused below 0 and when not
 * finite, printed and reloaded. */
static void test_glu_keys(void) {
    LtConfig c;
    char err[512];
    lt_config_defaults(&c);
    CHECK(!c.model.quick_geglu && c.model.glu_linear_offset == 0 &&
              c.model.activation_func_clamp_value == 0,
          "defaults: %d %g %g", c.model.quick_geglu, c.model.glu_linear_offset,
          c.model.activation_func_clamp_value);
    LtModelDims d = lt_dims_from_config(&c);
    CHECK(lt_glu_plain(&d.glu), "default dims not SwiGLU");
    char *oss[] = {"model.arch=llama", "model.ffn_hidden_size=2048", "model.quick_geglu=true",
                   "model.glu_linear_offset=1", "model.activation_func_clamp_value=7",
                   "train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 6, oss, err, sizeof err) == 0, "load: %s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "llama refused: %s", err);
    d = lt_dims_from_config(&c);
    CHECK(d.glu.quick == 1 && d.glu.offset == 1.0f && d.glu.clamp == 7.0f, "dims: %d %g %g",
          d.glu.quick, d.glu.offset, d.glu.clamp);
    roundtrip(&c, 1, "gpt-oss glu");
    char *neg[] = {"model.arch=llama", "model.ffn_hidden_size=2048", "model.glu_linear_offset=-0.5",
                   "train.device=cpu"};
    REQUIRE(lt_config_load(&c, NULL, 4, neg, err, sizeof err) == 0, "load: %s", err);
    CHECK(lt_config_validate(&c, 1, err, sizeof err) == 0, "a negative offset refused: %s", err);
    static const char *const gpt[] = {"model.quick_geglu=true", "model.glu_linear_offset=1",
                                      "model.activation_func_clamp_value=7"};
    for (int i = 0; i < 3; i++) {
        char *ov[] = {(char *)gpt[i], "train.device=cpu"};
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(strchr(gpt[i], '=') - gpt[i]), gpt[i]);
        REQUIRE(lt_config_load(&c, NULL, 2, ov, err, sizeof err) == 0, "load: %s", err);
        CHECK(lt_config_validate(&c, 1, err, sizeof err) == -1, "gpt accepted %s", gpt[i]);
        CHECK(has(err, key) && has(err, "model.arch=llama"), "gpt %s: %s", key, err);
    }
    static const char *const bad[] = {"model.activation_func_clamp_value=-1",
                                      "model.activation_func_clamp_value=inf",
                                      "model.activation_func_clamp_value=nan",
                                      "model.glu_linear_offset=inf"};
    for (int i = 0; i < 4; i++) {
        char *ov[] = {"model.arch=llama", "model.ffn_hidden_size=2048", (char *)bad[i],
                      "train.device=cpu"};
        const int rc = lt_config_load(&c, NULL, 4, ov, err, sizeof err) == -1 ||
                       lt_config_validate(&c, 1, err, sizeof err) == -1;
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(strchr(bad[i], '=') - bad[i]), bad[i]);
        CHECK(rc && has(err, key), "%s: accepted or unnamed: %s", bad[i], err);
    }
}

static void test_print_roundtrip(void) {
    LtConfig c;
    char err[512];
    lt_config_defaults(&c);
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "%s", err);
    roundtrip(&c, 1, "defaults");

    char *ov[] = {
        "data.train_path=\"quoted\" back\\slash\nnewline\ttab #hash: colon - dash é \xe2\x80\xa8"
        "ls \xc2\x85nel \x01"
        "ctl \x7f del ~",
        "data.valid_path=null",
        "checkpoint.dir= leading and trailing space ",
        "checkpoint.load=true",
        "logging.metrics_file=123",
        "train.seed=18446744073709551615",
        "sample.seed=0",
        "optimizer.lr=0.1",
        "optimizer.min_lr=1.0000000000000001e-30",
        "optimizer.weight_decay=0.30000000000000004",
        "optimizer.eps=1.0000000000000002e-40",
        "optimizer.beta2=0.99999999999999989",
        "sample.temperature=1e-7",
        "logging.peak_tflops=989.5",
        "train.precision=bf16",
        "train.recompute=full",
        "train.device=cuda",
        "comm.backend=nccl",
        "parallel.tensor_model_parallel_size=4",
        "parallel.sequence_parallel=true",
        "parallel.account_for_loss_in_pipeline_split=true",
        "data.shuffle=false",
        "train.steps=9000000000",
        "optimizer.decay_steps=123",
        "model.ffn_hidden_size=0",
        "model.attention=lattice",
        "model.attention_deterministic=false",
    };
    int n = (int)(sizeof ov / sizeof ov[0]);
    REQUIRE(lt_config_load(&c, NULL, n, ov, err, sizeof err) == 0, "load: %s", err);
    REQUIRE(lt_config_validate(&c, 4, err, sizeof err) == 0, "validate: %s", err);
    roundtrip(&c, 4, "unusual values");

    /* The printed text: every section, derived comment, readable numbers. */
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    REQUIRE(m, "open_memstream");
    lt_config_print(&c, m);
    fclose(m);
    static const char *const sections[] = {
        "model:\n",      "parallel:\n", "train:\n", "optimizer:\n", "data:\n",
        "checkpoint:\n", "logging:\n",  "eval:\n",  "comm:\n",      "sample:\n"};
    for (int i = 0; i < 10; i++)
        CHECK(has(text, sections[i]), "no section %s", sections[i]);
    CHECK(has(text, "# padded_vocab_size: 50688"), "derived comment missing");
    CHECK(has(text, "  lr: 0.1\n"), "lr printed as shortest form");
    CHECK(has(text, "  precision: bf16\n") && has(text, "  backend: nccl\n"), "enum spellings");
    CHECK(has(text, "  attention: lattice\n  attention_deterministic: false\n"), "attention keys");
    CHECK(has(text, "  valid_path: \"null\"\n"), "strings quoted");
    CHECK(has(text, "  seed: 18446744073709551615\n"), "u64");
    free(text);
}

/* One case of tests/data/megatron_rampup.txt against lattice: the config
 * validates, train.steps x global batch gives Megatron's iterations, and
 * every step's consumed samples, global batch, micro batches and learning
 * rate are Megatron's (the rate: its scheduler's at the consumed samples
 * after the warm-up; during it lattice's update reaches the rate at the
 * samples consumed with the step, min(consumed + batch, warm-up), the
 * scheduler's after the step's increment). Returns the mismatches. */
static int rampup_case(FILE *f, const char *line, long *compared) {
    char style[32], wsd[32], ov[8][96], err[512];
    long start, inc, samples, G, mbs, dp, steps, warm, decay, span, iters;
    double lr, min_lr;
    const int got = sscanf(line, "case %ld %ld %ld %ld %ld %ld %ld %31s %31s %lf %lf %ld %ld %ld %ld",
                           &start, &inc, &samples, &G, &mbs, &dp, &steps, style, wsd, &lr, &min_lr,
                           &warm, &decay, &span, &iters);
    if (got != 15) {
        printf("  not a case line: %s", line);
        return 1;
    }
    snprintf(ov[0], sizeof ov[0], "train.rampup_batch_size=%ld %ld %ld", start, inc, samples);
    snprintf(ov[1], sizeof ov[1], "train.global_batch_size=%ld", G);
    snprintf(ov[2], sizeof ov[2], "train.micro_batch_size=%ld", mbs);
    snprintf(ov[3], sizeof ov[3], "train.steps=%ld", steps);
    snprintf(ov[4], sizeof ov[4], "optimizer.lr_decay_style=%s", style);
    snprintf(ov[5], sizeof ov[5], "optimizer.warmup_steps=%ld", warm);
    snprintf(ov[6], sizeof ov[6], "optimizer.decay_steps=%ld", decay);
    if (strcmp(style, "wsd") == 0)
        snprintf(ov[7], sizeof ov[7], "optimizer.lr_wsd_decay_steps=%ld", span);
    else
        snprintf(ov[7], sizeof ov[7], "optimizer.lr_wsd_decay_steps=0");
    char *argv[10];
    for (int i = 0; i < 8; i++) argv[i] = ov[i];
    char wsd_ov[96];
    snprintf(wsd_ov, sizeof wsd_ov, "optimizer.lr_wsd_decay_style=%s", wsd);
    int n = 8;
    if (strcmp(wsd, "-") != 0) argv[n++] = wsd_ov;
    if (strcmp(style, "wsd") != 0) n = 7; /* (the wsd keys only with wsd) */
    LtConfig c;
    if (load(&c, NULL, n, argv, err, sizeof err) || lt_config_validate(&c, (int)dp, err, sizeof err)) {
        printf("  case %s: %s\n", ov[0], err);
        return 1;
    }
    c.optimizer.lr = lr, c.optimizer.min_lr = min_lr;
    const LtRampup *u = &c.train.rampup;
    int bad = lt_rampup_steps(u, (uint64_t)steps * (uint64_t)G) != iters;
    if (bad) printf("  %s: %ld steps, Megatron %ld\n", ov[0], lt_rampup_steps(u, steps * G), iters);
    const long W = warm * G;
    char row[256];
    for (long k = 0; k < iters; k++) {
        long kk, consumed, batch, nmb;
        double before, after;
        if (!fgets(row, sizeof row, f) || sscanf(row, "%ld %ld %ld %ld %lf %lf", &kk, &consumed,
                                                 &batch, &nmb, &before, &after) != 6 || kk != k) {
            printf("  %s: step %ld: bad line %s", ov[0], k, row);
            return bad + 1;
        }
        const uint64_t mine = lt_rampup_consumed(u, k);
        const long b = lt_rampup_batch(u, mine);
        const double want = consumed >= W ? before : consumed + batch <= W ? after : lr;
        const double got_lr = lt_lr_at_samples(&c, mine, b);
        (*compared)++;
        if (mine == (uint64_t)consumed && b == batch && b / (mbs * dp) == nmb &&
            test_relerr(got_lr, want, 1e-30) <= 1e-12)
            continue;
        if (++bad <= 5)
            printf("  %s: step %ld: lattice consumed %llu batch %ld micro batches %ld lr %.17g; "
                   "Megatron %ld %ld %ld %.17g\n", ov[0], k, (unsigned long long)mine, b,
                   b / (mbs * dp), got_lr, consumed, batch, nmb, want);
    }
    return bad;
}

/* lt_rampup_* and lt_lr_at_samples against Megatron-LM's own ramp-up
 * calculator, update_train_iters and scheduler: every step of every case of
 * tests/data/megatron_rampup.txt (tests/megatron_rampup_fixture.py). */
static void test_rampup_megatron(void) {
    FILE *f = fopen("tests/data/megatron_rampup.txt", "r");
    REQUIRE(f, "cannot open tests/data/megatron_rampup.txt (run from the repository root)");
    char line[256];
    int cases = 0, bad = 0;
    long compared = 0;
    while (fgets(line, sizeof line, f))
        if (line[0] != '#') bad += rampup_case(f, line, &compared), cases++;
    fclose(f);
    CHECK(bad == 0, "%d mismatches", bad);
    CHECK(cases == 10 && compared > 100, "%d cases, %ld steps", cases, compared);
    printf("  %d cases, %ld steps compared with Megatron's\n", cases, compared);
    /* without a ramp-up the sample count is the step count times the batch */
    LtConfig c;
    lt_config_defaults(&c);
    char err[256];
    REQUIRE(lt_config_validate(&c, 1, err, sizeof err) == 0, "%s", err);
    const long G = c.train.global_batch_size;
    for (long s = 0; s < c.train.steps + 3; s++)
        CHECK(test_relerr(lt_lr_at_samples(&c, (uint64_t)(s * G), G), lt_lr_at(&c, s), 1e-30) <
                  1e-14 && lt_rampup_consumed(&c.train.rampup, s) == (uint64_t)(s * G),
              "step %ld", s);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/lt_test_config_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_defaults);
    RUN(test_load_file);
    RUN(test_empty_files);
    RUN(test_overrides);
    RUN(test_load_errors);
    RUN(test_ranges);
    RUN(test_validate_errors);
    RUN(test_validate_suggestions);
    RUN(test_validate_ok);
    RUN(test_attention_keys);
    RUN(test_qk_layernorm_key);
    RUN(test_linear_bias_keys);
    RUN(test_glu_keys);
    RUN(test_softmax_type_key);
    RUN(test_schedule_keys);
    RUN(test_print_roundtrip);
    RUN(test_rampup_megatron);

    char path[256];
    snprintf(path, sizeof path, "%s/cfg.yaml", g_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/printed.yaml", g_dir);
    unlink(path);
    rmdir(g_dir);
    return test_summary();
}
