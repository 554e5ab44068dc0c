/* test_checkpoint.c - checkpoint save/load/resolve, safetensors, HF export. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "common.h"
#include "config.h"
#include "hf.h"
#include "json.h"
#include "params.h"
#include "safetensors.h"
#include "test.h"

/* ---- helpers -------------------------------------------------------------- */


static LtModelDims tiny_dims(int layers, int padded_vocab) {
    LtModelDims d = {.num_layers = layers, .hidden = 8, .heads = 2, .ffn = 32, .seq_len = 16,
                     .max_pos = 16, .vocab = 50, .padded_vocab = padded_vocab};
    return d;
}

/* A config describing the tiny model (valid for world size 1). */
static void tiny_config(LtConfig *c, int layers) {
    lt_config_defaults(c);
    c->model.num_layers = layers;
    c->model.hidden_size = 8;
    c->model.num_attention_heads = 2;
    c->model.ffn_hidden_size = 32;
    c->model.seq_length = 16;
    c->model.max_position_embeddings = 16;
    c->model.vocab_size = 50;
    c->model.make_vocab_size_divisible_by = 128;
}

/* Random values plus a few bit patterns that must survive exactly (-0, the
 * smallest denormal, the largest finite float, a denormal; non-finite values
 * are refused at load, see test_nonfinite_refused). */
static float *random_array(size_t n, uint64_t seed) {
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = lt_normal_at(seed, 7, i);
    const uint32_t specials[] = {0x80000000u, 0x00000001u, 0x7f7fffffu, 0x00012345u};
    for (size_t i = 0; i < 4 && i < n; i++) memcpy(&x[i * 97 % n], &specials[i], 4);
    return x;
}

typedef struct {
    LtParamTable t;
    LtCkptState s;
    LtCkptMeta meta;
    LtConfig cfg;
} Fixture;

static void fixture_init(Fixture *f, int layers, int padded_vocab, int with_moments, uint64_t seed) {
    LtModelDims d = tiny_dims(layers, padded_vocab);
    lt_params_build(&f->t, &d);
    f->s.master = random_array(f->t.total, seed);
    f->s.m = with_moments ? random_array(f->t.total, seed + 1) : NULL;
    f->s.v = with_moments ? random_array(f->t.total, seed + 2) : NULL;
    f->meta = (LtCkptMeta){.step = 7, .samples_consumed = 1234567, .seed = 42, .data_seed = 99,
                           .rng_state = 0xfedcba9876543210ull};
    tiny_config(&f->cfg, layers);
}

static void fixture_free(Fixture *f) {
    free(f->s.master);
    free(f->s.m);
    free(f->s.v);
    lt_params_free(&f->t);
}

static int save_step(const char *dir, Fixture *f, long step, char *err) {
    f->meta.step = step;
    return lt_ckpt_save(dir, &f->t, &f->s, &f->meta, &f->cfg, err, 512);
}

/* Load stepdir with table t into fresh buffers (moments when asked). */
static int load_fresh(const char *stepdir, const LtParamTable *t, int moments, LtCkptState *out,
                      LtCkptMeta *meta, char *err) {
    out->master = calloc(t->total, sizeof(float));
    out->m = moments ? calloc(t->total, sizeof(float)) : NULL;
    out->v = moments ? calloc(t->total, sizeof(float)) : NULL;
    return lt_ckpt_load(stepdir, t, out, meta, err, 512);
}

static void state_free(LtCkptState *s) {
    free(s->master);
    free(s->m);
    free(s->v);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* XOR byte `off` of a file with `mask`. */
static int poke(const char *path, long off, unsigned char mask) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ mask, f);
    fclose(f);
    return 0;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Number of entries of dir whose name starts with prefix. */
static int count_prefix(const char *dir, const char *prefix) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s'", dir, prefix);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

/* ---- save / load ---------------------------------------------------------- */

static void test_roundtrip_bit_identical(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096];
    REQUIRE(dir, "mkdtemp");
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/a/b/ckpt", dir); /* created with mkdir -p */
    Fixture f;
    fixture_init(&f, 2, 128, 1, 11);
    CHECK(save_step(sub, &f, 7, err) == 0, "save: %s", err);
    CHECK(lt_ckpt_resolve(sub, stepdir, sizeof stepdir, err, sizeof err) == 0, "resolve: %s", err);
    LtCkptState got;
    LtCkptMeta meta;
    memset(&meta, 0, sizeof meta);
    CHECK(load_fresh(stepdir, &f.t, 1, &got, &meta, err) == 0, "load: %s", err);
    size_t bytes = sizeof(float) * f.t.total;
    CHECK(memcmp(got.master, f.s.master, bytes) == 0, "master differs");
    CHECK(memcmp(got.m, f.s.m, bytes) == 0, "adam m differs");
    CHECK(memcmp(got.v, f.s.v, bytes) == 0, "adam v differs");
    CHECK(meta.step == 7 && meta.samples_consumed == 1234567 && meta.seed == 42 &&
              meta.data_seed == 99 && meta.rng_state == 0xfedcba9876543210ull,
          "meta differs: step %ld samples %llu rng %llx", meta.step,
          (unsigned long long)meta.samples_consumed, (unsigned long long)meta.rng_state);
    /* meta.json carries the dims and the parameter count. */
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", stepdir);
    char *js = read_text(path), want[64];
    snprintf(want, sizeof want, "\"num_parameters\": %zu", f.t.total);
    CHECK(js && strstr(js, want) && strstr(js, "\"hidden_size\": 8") &&
              strstr(js, "\"padded_vocab_size\": 128"), "meta.json: %s", js ? js : "(missing)");
    free(js);
    /* Weights-only load of a full checkpoint is fine. */
    LtCkptState w;
    CHECK(load_fresh(stepdir, &f.t, 0, &w, NULL, err) == 0, "weights-only load: %s", err);
    CHECK(memcmp(w.master, f.s.master, bytes) == 0, "weights-only master differs");
    state_free(&w);
    state_free(&got);
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

static void test_weights_only_checkpoint(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096];
    REQUIRE(dir, "mkdtemp");
    Fixture f;
    fixture_init(&f, 2, 128, 0, 12);
    CHECK(save_step(dir, &f, 3, err) == 0, "save: %s", err);
    CHECK(lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, sizeof err) == 0, "resolve: %s", err);
    LtCkptState got;
    CHECK(load_fresh(stepdir, &f.t, 0, &got, NULL, err) == 0, "load: %s", err);
    CHECK(memcmp(got.master, f.s.master, sizeof(float) * f.t.total) == 0, "master differs");
    state_free(&got);
    /* The trainer asks for moments: they are missing, and the error says which. */
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0, "load with m/v succeeded");
    CHECK(strstr(err, "no optimizer state") && strstr(err, stepdir), "err: %s", err);
    state_free(&got);
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

static void test_latest_and_resolve(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], want[4200], path[4200];
    REQUIRE(dir, "mkdtemp");
    Fixture f;
    fixture_init(&f, 2, 128, 1, 13);
    CHECK(save_step(dir, &f, 100, err) == 0, "save 100: %s", err);
    CHECK(save_step(dir, &f, 200, err) == 0, "save 200: %s", err);
    snprintf(path, sizeof path, "%s/latest", dir);
    char *latest = read_text(path);
    CHECK(latest && strcmp(latest, "step_00000200\n") == 0, "latest = %s", latest ? latest : "?");
    free(latest);

    snprintf(want, sizeof want, "%s/step_00000200", dir);
    CHECK(lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, sizeof err) == 0, "resolve: %s", err);
    CHECK(strcmp(stepdir, want) == 0, "resolved %s", stepdir);
    snprintf(path, sizeof path, "%s/", dir); /* trailing slash */
    CHECK(lt_ckpt_resolve(path, stepdir, sizeof stepdir, err, sizeof err) == 0 &&
              strcmp(stepdir, want) == 0, "resolve with slash: %s", err);
    snprintf(want, sizeof want, "%s/step_00000100", dir);
    CHECK(lt_ckpt_resolve(want, stepdir, sizeof stepdir, err, sizeof err) == 0 &&
              strcmp(stepdir, want) == 0, "resolve step dir: %s", err);

    /* A crashed save's leftover temporary directory is ignored. */
    snprintf(path, sizeof path, "%s/.tmp-step_00000300-999999", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/.tmp-step_00000300-999999/state.lt", dir);
    write_text(path, "partial");
    snprintf(want, sizeof want, "%s/step_00000200", dir);
    CHECK(lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, sizeof err) == 0 &&
              strcmp(stepdir, want) == 0, "resolve with leftover tmp: %s -> %s", err, stepdir);
    LtCkptState got;
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) == 0, "load: %s", err);
    state_free(&got);
    /* A successful save leaves no temporary directory of its own. */
    CHECK(count_prefix(dir, ".tmp-step_00000200") == 0 && count_prefix(dir, ".old-") == 0,
          "temporary directories left behind");
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

/* The directory's housekeeping: a run's first save finds it writable (checked
 * before step 1) and clears what killed writers left; keep_last prunes only
 * older complete checkpoints; load=auto finds the newest or none. */
static void test_dir_housekeeping(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], path[4200];
    REQUIRE(dir, "mkdtemp");
    int n = -1;
    /* leftovers of a writer killed mid-save */
    snprintf(path, sizeof path, "%s/.tmp-step_00000300-999999", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/.tmp-step_00000300-999999/state.lt", dir);
    write_text(path, "partial");
    snprintf(path, sizeof path, "%s/.old-step_00000200-999999", dir);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/latest.tmp", dir);
    write_text(path, "step_00000300\n");
    snprintf(path, sizeof path, "%s/notes.txt", dir); /* not ours: kept */
    write_text(path, "x");
    CHECK(lt_ckpt_find_latest(dir, stepdir, sizeof stepdir, err, sizeof err) == 0,
          "no latest yet: %s", err);
    CHECK(lt_ckpt_prepare_dir(dir, &n, err, sizeof err) == 0 && n == 3, "prepare: %d %s", n, err);
    CHECK(count_prefix(dir, ".tmp-") == 0 && count_prefix(dir, ".old-") == 0 &&
              count_prefix(dir, "latest.tmp") == 0 && count_prefix(dir, "notes.txt") == 1 &&
              count_prefix(dir, ".probe-") == 0,
          "stale entries left, or others removed");
    /* keep_last: the newest N complete checkpoints stay */
    Fixture f;
    fixture_init(&f, 2, 128, 1, 13);
    for (long step = 1; step <= 5; step++) CHECK(save_step(dir, &f, step, err) == 0, "save: %s", err);
    CHECK(lt_ckpt_prune(dir, 0, &n, err, sizeof err) == 0 && n == 0 && count_prefix(dir, "step_") == 5,
          "keep 0 keeps all");
    CHECK(lt_ckpt_prune(dir, 2, &n, err, sizeof err) == 0 && n == 3, "prune: %d %s", n, err);
    CHECK(count_prefix(dir, "step_") == 2 && count_prefix(dir, "step_00000004") == 1 &&
              count_prefix(dir, "step_00000005") == 1,
          "keep_last 2 must leave steps 4 and 5");
    /* an older step saved again (latest names it) is never pruned */
    CHECK(save_step(dir, &f, 3, err) == 0, "save 3: %s", err);
    CHECK(lt_ckpt_prune(dir, 1, &n, err, sizeof err) == 0, "prune: %s", err);
    CHECK(count_prefix(dir, "step_00000003") == 1 && count_prefix(dir, "step_00000005") == 1 &&
              count_prefix(dir, "step_") == 2,
          "latest (step 3) and the newest (step 5) stay");
    snprintf(path, sizeof path, "%s/step_00000003", dir);
    CHECK(lt_ckpt_find_latest(dir, stepdir, sizeof stepdir, err, sizeof err) == 1 &&
              strcmp(stepdir, path) == 0,
          "find_latest: %s", stepdir);
    snprintf(path, sizeof path, "%s/missing", dir);
    CHECK(lt_ckpt_find_latest(path, stepdir, sizeof stepdir, err, sizeof err) == 0,
          "a directory not created yet: start fresh");
    snprintf(path, sizeof path, "%s/latest", dir);
    write_text(path, "step_00000009\n");
    CHECK(lt_ckpt_find_latest(dir, stepdir, sizeof stepdir, err, sizeof err) == -1 &&
              strstr(err, "step_00000009"),
          "latest naming nothing: %s", err);
    /* unusable directories are found before any training */
    CHECK(lt_ckpt_prepare_dir("/proc/lattice-x", &n, err, sizeof err) == -1, "/proc refused");
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    CHECK(lt_ckpt_prepare_dir(path, &n, err, sizeof err) == -1 && strstr(err, "notes.txt"),
          "a file as the directory: %s", err);
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

/* A checkpoint holding a non-finite weight or moment (a model that had
 * diverged) is refused at load - resume, eval, sample, export - naming it:
 * also by a reader that keeps no moments (eval, sample, export load with
 * m = v = NULL), which still reads and checks them. */
static void test_nonfinite_refused(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096];
    REQUIRE(dir, "mkdtemp");
    Fixture f;
    fixture_init(&f, 2, 128, 1, 13);
    static const char *const kind[] = {"param/", "adam_m/", "adam_v/"};
    for (int k = 0; k < 3; k++) {
        float *x = k == 0 ? f.s.master : k == 1 ? f.s.m : f.s.v, keep = x[f.t.total - 3];
        x[f.t.total - 3] = k == 1 ? INFINITY : NAN;
        CHECK(save_step(dir, &f, 10 + k, err) == 0, "save: %s", err);
        x[f.t.total - 3] = keep;
        snprintf(stepdir, sizeof stepdir, "%s/step_%08d", dir, 10 + k);
        for (int moments = 1; moments >= 0; moments--) {
            LtCkptState got;
            err[0] = 0;
            CHECK(load_fresh(stepdir, &f.t, moments, &got, NULL, err) == -1 &&
                      strstr(err, "non-finite") && strstr(err, kind[k]) && strstr(err, "diverged"),
                  "load (moments %s) of a non-finite %s: %s", moments ? "kept" : "not kept", kind[k],
                  err);
            state_free(&got);
        }
    }
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

static void test_resave_same_step_replaces(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096];
    REQUIRE(dir, "mkdtemp");
    Fixture a, b;
    fixture_init(&a, 2, 128, 1, 14);
    fixture_init(&b, 2, 128, 1, 15);
    CHECK(save_step(dir, &a, 5, err) == 0, "save a: %s", err);
    b.meta.samples_consumed = 777;
    CHECK(save_step(dir, &b, 5, err) == 0, "save b over a: %s", err);
    CHECK(lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, sizeof err) == 0, "resolve: %s", err);
    LtCkptState got;
    LtCkptMeta meta;
    CHECK(load_fresh(stepdir, &b.t, 1, &got, &meta, err) == 0, "load: %s", err);
    CHECK(memcmp(got.master, b.s.master, sizeof(float) * b.t.total) == 0, "not the second save");
    CHECK(meta.samples_consumed == 777, "meta of the first save: %llu",
          (unsigned long long)meta.samples_consumed);
    CHECK(count_prefix(dir, ".tmp-") == 0 && count_prefix(dir, ".old-") == 0,
          "replaced directory left behind");
    state_free(&got);
    fixture_free(&a);
    fixture_free(&b);
    test_rm_rf(dir);
    free(dir);
}

/* A save that fails (file size limit standing in for a full disk; a file in
 * the way of the step directory) reports the path and leaves `latest` on the
 * previous complete checkpoint. */
static void test_failed_save_keeps_latest(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], want[4200], path[4200];
    REQUIRE(dir, "mkdtemp");
    Fixture f;
    fixture_init(&f, 2, 128, 1, 16);
    CHECK(save_step(dir, &f, 1, err) == 0, "save 1: %s", err);

    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    int rc = save_step(dir, &f, 2, err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc != 0, "save past the file size limit succeeded");
    CHECK(strstr(err, "state.lt") && strstr(err, dir), "err: %s", err);

    snprintf(path, sizeof path, "%s/step_00000003", dir);
    write_text(path, "not a directory");
    CHECK(save_step(dir, &f, 3, err) != 0, "save onto a file succeeded");
    CHECK(strstr(err, "step_00000003") != NULL, "err: %s", err);

    snprintf(want, sizeof want, "%s/step_00000001", dir);
    CHECK(lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, sizeof err) == 0 &&
              strcmp(stepdir, want) == 0, "latest moved: %s (%s)", stepdir, err);
    CHECK(count_prefix(dir, ".tmp-") == 0, "temporary directory left behind");

    /* dir itself cannot be created: it is below a regular file. */
    snprintf(path, sizeof path, "%s/step_00000003/sub", dir);
    CHECK(lt_ckpt_save(path, &f.t, &f.s, &f.meta, &f.cfg, err, sizeof err) != 0, "save succeeded");
    CHECK(strstr(err, "step_00000003") != NULL, "err: %s", err);
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

/* Save a fixture, return the step directory path in stepdir. */
static int saved(char *dir, Fixture *f, char *stepdir, char *err) {
    if (save_step(dir, f, 1, err)) return -1;
    snprintf(stepdir, 4096, "%s/step_00000001", dir);
    return 0;
}

static void test_corruption_detected(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], path[4200];
    REQUIRE(dir, "mkdtemp");
    Fixture f;
    fixture_init(&f, 2, 128, 1, 17);
    REQUIRE(saved(dir, &f, stepdir, err) == 0, "save: %s", err);
    snprintf(path, sizeof path, "%s/state.lt", stepdir);
    LtCkptState got;

    /* A byte of the last tensor's data (adam_v/ln_f.bias ends the file). */
    long size = file_size(path);
    poke(path, size - 5, 0x10);
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0, "corrupt data loaded");
    CHECK(strstr(err, "checksum") && strstr(err, "adam_v/ln_f.bias"), "err: %s", err);
    state_free(&got);
    poke(path, size - 5, 0x10);
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) == 0, "restored file: %s", err);
    state_free(&got);

    /* A byte of the record table (inside the first record's shape). */
    poke(path, 64 + 140, 0x01);
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0, "corrupt table loaded");
    CHECK(strstr(err, "record table") != NULL, "err: %s", err);
    state_free(&got);
    poke(path, 64 + 140, 0x01);

    /* Bad magic, then an unknown version. */
    poke(path, 0, 0x20);
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0, "bad magic loaded");
    CHECK(strstr(err, "magic") != NULL, "err: %s", err);
    state_free(&got);
    poke(path, 0, 0x20);
    poke(path, 8, 0x07);
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0, "version 4 loaded");
    CHECK(strstr(err, "version 4") != NULL, "err: %s", err);
    state_free(&got);
    poke(path, 8, 0x07);
    /* a reserved header byte, and a header field the CRC covers (the record count) */
    static const long hdr_bytes[] = {50, 12};
    for (int i = 0; i < 2; i++) {
        poke(path, hdr_bytes[i], 0x04);
        CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0 && strstr(err, "corrupt header"),
              "header byte %ld: %s", hdr_bytes[i], err);
        state_free(&got);
        poke(path, hdr_bytes[i], 0x04);
    }
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) == 0, "restored header: %s", err);
    state_free(&got);
    /* meta.json edited by hand (its step, which sets the data position and the LR) */
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/meta.json", stepdir);
    char *js = read_text(mpath), *at = js ? strstr(js, "\"step\": 1,") : NULL;
    REQUIRE(at, "meta.json has no step");
    at[8] = '7';
    write_text(mpath, js);
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0 && strstr(err, "meta_crc32") &&
              strstr(err, "meta.json"),
          "edited meta.json: %s", err);
    state_free(&got);
    at[8] = '1';
    write_text(mpath, js);
    free(js);
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) == 0, "restored meta.json: %s", err);
    state_free(&got);

    /* Truncation, near the end and inside the header. */
    CHECK(truncate(path, size - 100) == 0, "truncate");
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0, "truncated file loaded");
    CHECK(strstr(err, "truncated") && strstr(err, "state.lt"), "err: %s", err);
    state_free(&got);
    CHECK(truncate(path, 20) == 0, "truncate");
    CHECK(load_fresh(stepdir, &f.t, 1, &got, NULL, err) != 0, "20-byte file loaded");
    CHECK(strstr(err, "truncated") != NULL, "err: %s", err);
    state_free(&got);

    /* Missing state and missing meta. */
    remove(path);
    CHECK(load_fresh(stepdir, &f.t, 0, &got, NULL, err) != 0 && strstr(err, "state.lt"), "err: %s", err);
    state_free(&got);
    snprintf(path, sizeof path, "%s/meta.json", stepdir);
    remove(path);
    CHECK(load_fresh(stepdir, &f.t, 0, &got, NULL, err) != 0 && strstr(err, "meta.json"), "err: %s", err);
    state_free(&got);
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

static void test_architecture_mismatch(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096];
    REQUIRE(dir, "mkdtemp");
    Fixture one, two;
    fixture_init(&one, 1, 128, 1, 18);
    fixture_init(&two, 2, 128, 1, 19);
    REQUIRE(saved(dir, &one, stepdir, err) == 0, "save: %s", err);
    LtCkptState got;
    /* a model-shape difference is refused naming the field */
    CHECK(load_fresh(stepdir, &two.t, 0, &got, NULL, err) != 0, "1-layer loaded into 2-layer");
    CHECK(strstr(err, "num_layers is 1 in the checkpoint, 2 in the model") && strstr(err, stepdir),
          "err: %s", err);
    state_free(&got);

    REQUIRE(saved(dir, &two, stepdir, err) == 0, "save: %s", err);
    CHECK(load_fresh(stepdir, &one.t, 0, &got, NULL, err) != 0, "2-layer loaded into 1-layer");
    CHECK(strstr(err, "num_layers is 2 in the checkpoint, 1 in the model"), "err: %s", err);
    state_free(&got);

    /* another padding of the same vocabulary (another TP size) is re-padded:
     * the rows both have are read, the extra ones are zero */
    Fixture wide;
    fixture_init(&wide, 2, 256, 1, 20);
    CHECK(load_fresh(stepdir, &wide.t, 1, &got, NULL, err) == 0, "padding 128 into 256: %s", err);
    const LtParam *w0 = lt_params_find(&two.t, "wte"), *w1 = lt_params_find(&wide.t, "wte");
    REQUIRE(w0 && w1, "wte");
    const size_t C = (size_t)w0->shape[1];
    int same = memcmp(got.master + w1->offset, two.s.master + w0->offset, 128 * C * 4) == 0 &&
               memcmp(got.v + w1->offset, two.s.v + w0->offset, 128 * C * 4) == 0;
    for (size_t i = 128 * C; i < 256 * C; i++) same &= got.master[w1->offset + i] == 0.0f;
    for (int i = 0; i < two.t.n; i++) {
        const LtParam *p = &two.t.p[i], *q = lt_params_find(&wide.t, p->name);
        if (q != w1) same &= memcmp(got.m + q->offset, two.s.m + p->offset, p->numel * 4) == 0;
    }
    CHECK(same, "re-padded state differs");
    state_free(&got);
    /* a different vocabulary is refused */
    Fixture other;
    fixture_init(&other, 2, 128, 1, 21);
    other.t.dims.vocab = 60;
    CHECK(load_fresh(stepdir, &other.t, 0, &got, NULL, err) != 0 &&
              strstr(err, "vocab_size is 50 in the checkpoint, 60 in the model"),
          "vocab 50 into 60: %s", err);
    state_free(&got);
    fixture_free(&other);
    fixture_free(&one);
    fixture_free(&two);
    fixture_free(&wide);
    test_rm_rf(dir);
    free(dir);
}

/* A fixture of the tiny model with MoE layers (layer[l] 1: an MoE layer);
 * experts 0 leaves it dense. */
static int g_shared_gate; /* fixture_init_moe's shared expert gated (model.moe_shared_expert_gate) */
static void fixture_init_moe(Fixture *f, int experts, int topk, int ffn, int shared,
                             const unsigned char *layer, uint64_t seed) {
    LtModelDims d = tiny_dims(2, 128);
    d.moe = (LtMoeDims){.experts = experts, .topk = topk, .ffn = ffn, .shared_ffn = shared,
                        .shared_gate = g_shared_gate, .topk_scale = 1};
    memcpy(d.moe.layer, layer, 2);
    lt_params_build(&f->t, &d);
    f->s.master = random_array(f->t.total, seed);
    f->s.m = random_array(f->t.total, seed + 1);
    f->s.v = random_array(f->t.total, seed + 2);
    f->meta = (LtCkptMeta){.step = 7, .samples_consumed = 1234567, .seed = 42, .data_seed = 99};
    tiny_config(&f->cfg, 2);
}

/* a gated shared expert is in meta.json (absent when ungated), and a checkpoint
 * loads only into a model gated as it was */
static void test_moe_shared_gate(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], path[4200];
    REQUIRE(dir, "mkdtemp");
    static const unsigned char both[2] = {1, 1};
    Fixture gated, plain;
    g_shared_gate = 1;
    fixture_init_moe(&gated, 4, 2, 16, 8, both, 51);
    g_shared_gate = 0;
    fixture_init_moe(&plain, 4, 2, 16, 8, both, 52);
    CHECK(gated.t.n == plain.t.n + 2 && lt_params_find(&gated.t, "h.1.mlp.shared_gate.weight"),
          "a gate per MoE layer: %d vs %d tensors", gated.t.n, plain.t.n);
    snprintf(path, sizeof path, "%s/meta.json", stepdir);
    LtCkptState got;
    for (int k = 0; k < 2; k++) {
        Fixture *f = k ? &plain : &gated, *o = k ? &gated : &plain;
        REQUIRE(saved(dir, f, stepdir, err) == 0, "save: %s", err);
        snprintf(path, sizeof path, "%s/meta.json", stepdir);
        char *js = read_text(path);
        CHECK(js && (strstr(js, "\"moe_shared_expert_gate\": true") != NULL) == !k, "meta.json %d: %s", k,
              js ? js : "(unreadable)");
        free(js);
        CHECK(load_fresh(stepdir, &f->t, 1, &got, NULL, err) == 0, "same model %d: %s", k, err);
        CHECK(memcmp(got.master, f->s.master, f->t.total * 4) == 0, "weights differ (%d)", k);
        state_free(&got);
        strcpy(err, "(unset)");
        CHECK(load_fresh(stepdir, &o->t, 1, &got, NULL, err) != 0 &&
                  strstr(err, k ? "moe_shared_expert_gate is 0 in the checkpoint, 1 in the model"
                                : "moe_shared_expert_gate is 1 in the checkpoint, 0 in the model"),
              "case %d: %s", k, err);
        state_free(&got);
    }
    fixture_free(&gated);
    fixture_free(&plain);
    test_rm_rf(dir);
    free(dir);
}

/* meta.json records an MoE model's shape, and a load into another MoE shape,
 * a dense checkpoint into an MoE model and the reverse are refused naming the
 * field or layer; a dense meta.json has no MoE key. */
static void test_moe_shape_mismatch(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], path[4200];
    REQUIRE(dir, "mkdtemp");
    static const unsigned char both[2] = {1, 1}, first[2] = {1, 0};
    Fixture moe, dense;
    fixture_init_moe(&moe, 4, 2, 16, 8, both, 31);
    fixture_init_moe(&dense, 0, 0, 0, 0, (const unsigned char[2]){0, 0}, 32);
    REQUIRE(saved(dir, &moe, stepdir, err) == 0, "save: %s", err);
    snprintf(path, sizeof path, "%s/meta.json", stepdir);
    char *js = read_text(path);
    CHECK(js && strstr(js, "\"num_experts\": 4") && strstr(js, "\"moe_router_topk\": 2") &&
              strstr(js, "\"moe_ffn_hidden_size\": 16") &&
              strstr(js, "\"moe_shared_expert_intermediate_size\": 8") &&
              strstr(js, "\"moe_layer_pattern\": [1, 1]"),
          "meta.json: %s", js ? js : "(unreadable)");
    free(js);
    LtCkptState got;
    CHECK(load_fresh(stepdir, &moe.t, 1, &got, NULL, err) == 0, "same MoE shape: %s", err);
    CHECK(memcmp(got.master, moe.s.master, moe.t.total * 4) == 0, "MoE weights differ");
    state_free(&got);
    static const struct {
        int experts, topk, ffn, shared;
        const unsigned char *layer;
        const char *want;
    } other[] = {
        {8, 2, 16, 8, both, "num_experts is 4 in the checkpoint, 8 in the model"},
        {0, 0, 0, 0, both, "num_experts is 4 in the checkpoint, 0 in the model"},
        {4, 1, 16, 8, both, "moe_router_topk is 2 in the checkpoint, 1 in the model"},
        {4, 2, 32, 8, both, "moe_ffn_hidden_size is 16 in the checkpoint, 32 in the model"},
        {4, 2, 16, 0, both, "moe_shared_expert_intermediate_size is 8 in the checkpoint, 0"},
        {4, 2, 16, 8, first, "layer 1 is an MoE layer in the checkpoint and dense in the model"},
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        Fixture o;
        fixture_init_moe(&o, other[i].experts, other[i].topk, other[i].ffn, other[i].shared,
                         other[i].layer, 40 + i);
        strcpy(err, "(unset)");
        CHECK(load_fresh(stepdir, &o.t, 1, &got, NULL, err) != 0, "case %zu loaded", i);
        CHECK(strstr(err, other[i].want) && strstr(err, stepdir), "case %zu: %s", i, err);
        state_free(&got);
        fixture_free(&o);
    }

    REQUIRE(saved(dir, &dense, stepdir, err) == 0, "save dense: %s", err);
    js = read_text(path);
    CHECK(js && !strstr(js, "num_experts") && !strstr(js, "moe_"), "dense meta.json has MoE keys");
    free(js);
    CHECK(load_fresh(stepdir, &dense.t, 1, &got, NULL, err) == 0, "dense: %s", err);
    state_free(&got);
    CHECK(load_fresh(stepdir, &moe.t, 1, &got, NULL, err) != 0 &&
              strstr(err, "num_experts is 0 in the checkpoint, 4 in the model"),
          "dense into MoE: %s", err);
    state_free(&got);
    fixture_free(&moe);
    fixture_free(&dense);
    test_rm_rf(dir);
    free(dir);
}

/* The dense FFN width (model.ffn_hidden_size) of a model whose every layer is
 * an MoE layer is no parameter's: a checkpoint loads whatever width the model
 * names (a Mixtral import under any training config); with a dense layer it
 * must agree. */
static void test_moe_dense_width(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096];
    REQUIRE(dir, "mkdtemp");
    static const unsigned char both[2] = {1, 1}, first[2] = {1, 0};
    const unsigned char *layers[2] = {both, first};
    for (int k = 0; k < 2; k++) {
        Fixture f;
        fixture_init_moe(&f, 4, 2, 16, 0, layers[k], 61 + k);
        REQUIRE(saved(dir, &f, stepdir, err) == 0, "save: %s", err);
        LtModelDims d = f.t.dims;
        d.ffn *= 2;
        LtParamTable wide;
        lt_params_build(&wide, &d);
        LtCkptState got;
        const int rc = load_fresh(stepdir, &wide, 1, &got, NULL, err);
        if (k == 0)
            CHECK(rc == 0 && memcmp(got.master, f.s.master, f.t.total * 4) == 0,
                  "all-MoE checkpoint into a model of another dense width: %s", err);
        else
            CHECK(rc != 0 && strstr(err, "ffn_hidden_size is"), "with a dense layer: %s", err);
        state_free(&got);
        lt_params_free(&wide);
        fixture_free(&f);
    }
    test_rm_rf(dir);
    free(dir);
}

static void test_resolve_errors(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], path[4200];
    REQUIRE(dir, "mkdtemp");
    snprintf(path, sizeof path, "%s/nope", dir);
    CHECK(lt_ckpt_resolve(path, stepdir, sizeof stepdir, err, sizeof err) != 0, "missing path resolved");
    CHECK(strstr(err, path) != NULL, "err: %s", err);
    CHECK(lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, sizeof err) != 0, "empty dir resolved");
    CHECK(strstr(err, "not a checkpoint") != NULL, "err: %s", err);
    snprintf(path, sizeof path, "%s/latest", dir);
    write_text(path, "step_00000042\n");
    CHECK(lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, sizeof err) != 0, "dangling latest resolved");
    CHECK(strstr(err, "step_00000042") != NULL, "err: %s", err);
    write_text(path, "../elsewhere\n");
    CHECK(lt_ckpt_resolve(dir, stepdir, sizeof stepdir, err, sizeof err) != 0, "latest escaping dir resolved");
    test_rm_rf(dir);
    free(dir);
}

static void test_load_config_roundtrip(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096];
    REQUIRE(dir, "mkdtemp");
    Fixture f;
    fixture_init(&f, 2, 128, 0, 21);
    f.cfg.train.seed = 987654321987ull;
    f.cfg.optimizer.lr = 3.25e-4;
    f.cfg.parallel.tensor_model_parallel_size = 2;
    snprintf(f.cfg.data.train_path, sizeof f.cfg.data.train_path, "/data/my corpus: \"x\".bin");
    REQUIRE(saved(dir, &f, stepdir, err) == 0, "save: %s", err);
    LtConfig back;
    CHECK(lt_ckpt_load_config(stepdir, &back, err, sizeof err) == 0, "load_config: %s", err);
    CHECK(memcmp(&back, &f.cfg, sizeof back) == 0, "config differs (seed %llu lr %g path %s)",
          (unsigned long long)back.train.seed, back.optimizer.lr, back.data.train_path);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.yaml", stepdir);
    remove(path);
    CHECK(lt_ckpt_load_config(stepdir, &back, err, sizeof err) != 0 && strstr(err, "config.yaml"),
          "err: %s", err);
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

/* ---- export --------------------------------------------------------------- */

static float *st_get(const char *file, const char *name, int ndim, int64_t r, int64_t c) {
    char err[512] = "";
    int nd = -1;
    int64_t shape[4] = {0};
    float *x = lt_safetensors_read(file, name, &nd, shape, err, sizeof err);
    if (!x) {
        printf("  %s: %s\n", name, err);
        return NULL;
    }
    if (nd != ndim || shape[0] != r || (ndim == 2 && shape[1] != c)) {
        printf("  %s: shape (%d dims) %lld,%lld, want %lld,%lld\n", name, nd, (long long)shape[0],
               (long long)shape[1], (long long)r, (long long)c);
        free(x);
        return NULL;
    }
    return x;
}

static void test_export_hf(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], out[4200], file[4300];
    REQUIRE(dir, "mkdtemp");
    Fixture f;
    fixture_init(&f, 2, 128, 1, 22);
    REQUIRE(saved(dir, &f, stepdir, err) == 0, "save: %s", err);
    snprintf(out, sizeof out, "%s/hf/model", dir);
    REQUIRE(lt_hf_export(dir, out, err, sizeof err) == 0, "export: %s", err);
    snprintf(file, sizeof file, "%s/model.safetensors", out);

    const int64_t C = 8, F = 32, V = 50, P = 16;
    struct { const char *name; int ndim; int64_t r, c; } keys[] = {
        {"transformer.wte.weight", 2, V, C}, {"transformer.wpe.weight", 2, P, C},
        {"transformer.ln_f.weight", 1, C, 0}, {"transformer.ln_f.bias", 1, C, 0},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        float *x = st_get(file, keys[i].name, keys[i].ndim, keys[i].r, keys[i].c);
        CHECK(x != NULL, "bad tensor %s", keys[i].name);
        free(x);
    }
    struct { const char *suffix; int ndim; int64_t r, c; } layer[] = {
        {"ln_1.weight", 1, C, 0}, {"ln_1.bias", 1, C, 0}, {"attn.c_attn.weight", 2, C, 3 * C},
        {"attn.c_attn.bias", 1, 3 * C, 0}, {"attn.c_proj.weight", 2, C, C}, {"attn.c_proj.bias", 1, C, 0},
        {"ln_2.weight", 1, C, 0}, {"ln_2.bias", 1, C, 0}, {"mlp.c_fc.weight", 2, C, F},
        {"mlp.c_fc.bias", 1, F, 0}, {"mlp.c_proj.weight", 2, F, C}, {"mlp.c_proj.bias", 1, C, 0},
    };
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++) {
            char name[128];
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, layer[i].suffix);
            float *x = st_get(file, name, layer[i].ndim, layer[i].r, layer[i].c);
            CHECK(x != NULL, "bad tensor %s", name);
            free(x);
        }

    /* wte: the first V rows, bit for bit. */
    float *wte = st_get(file, "transformer.wte.weight", 2, V, C);
    const LtParam *p = lt_params_find(&f.t, "wte");
    CHECK(wte && memcmp(wte, f.s.master + p->offset, sizeof(float) * (size_t)(V * C)) == 0,
          "wte is not the unpadded rows");
    free(wte);
    /* c_fc (C, F) is the transpose of our fc (F, C); qkv likewise. */
    float *fc = st_get(file, "transformer.h.1.mlp.c_fc.weight", 2, C, F);
    p = lt_params_find(&f.t, "h.1.mlp.fc.weight");
    int same = fc != NULL;
    for (int64_t i = 0; same && i < C; i++)
        for (int64_t j = 0; j < F; j++)
            if (memcmp(&fc[i * F + j], &f.s.master[p->offset + (size_t)(j * C + i)], 4)) same = 0;
    CHECK(same, "c_fc.weight is not fc.weight transposed");
    free(fc);
    float *qkv = st_get(file, "transformer.h.0.attn.c_attn.weight", 2, C, 3 * C);
    p = lt_params_find(&f.t, "h.0.attn.qkv.weight");
    CHECK(qkv && qkv[2 * 3 * C + 17] == f.s.master[p->offset + 17 * C + 2], "c_attn[2][17] != qkv[17][2]");
    free(qkv);
    float *bias = st_get(file, "transformer.h.1.attn.c_attn.bias", 1, 3 * C, 0);
    p = lt_params_find(&f.t, "h.1.attn.qkv.bias");
    CHECK(bias && memcmp(bias, f.s.master + p->offset, sizeof(float) * 3 * C) == 0, "bias differs");
    free(bias);

    snprintf(file, sizeof file, "%s/config.json", out);
    char *js = read_text(file);
    const char *want[] = {"\"model_type\": \"gpt2\"", "\"GPT2LMHeadModel\"", "\"n_embd\": 8",
                          "\"n_layer\": 2", "\"n_head\": 2", "\"n_positions\": 16", "\"n_ctx\": 16",
                          "\"n_inner\": 32", "\"vocab_size\": 50", "\"layer_norm_epsilon\": 1e-05",
                          "\"activation_function\": \"gelu_new\"", "\"tie_word_embeddings\": true"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(js && strstr(js, want[i]), "config.json lacks %s", want[i]);
    free(js);
    CHECK(count_prefix(out, ".*tmp") == 0, "temporary files left in %s", out);

    /* Exporting something that is not a checkpoint fails cleanly. */
    CHECK(lt_hf_export(out, out, err, sizeof err) != 0 && strstr(err, "not a checkpoint"), "err: %s", err);
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

/* A run with tensor parallelism pads the vocabulary to a multiple of 128 * tp;
 * export must rebuild that padding to read wte, then slice it away. */
static void test_export_tensor_parallel_config(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", stepdir[4096], file[4300];
    REQUIRE(dir, "mkdtemp");
    Fixture f;
    fixture_init(&f, 2, 256, 0, 23);
    f.cfg.parallel.tensor_model_parallel_size = 2;
    REQUIRE(saved(dir, &f, stepdir, err) == 0, "save: %s", err);
    CHECK(lt_hf_export(stepdir, dir, err, sizeof err) == 0, "export: %s", err);
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    float *wte = st_get(file, "transformer.wte.weight", 2, 50, 8);
    const LtParam *p = lt_params_find(&f.t, "wte");
    CHECK(wte && memcmp(wte, f.s.master + p->offset, sizeof(float) * 50 * 8) == 0, "wte differs");
    free(wte);
    fixture_free(&f);
    test_rm_rf(dir);
    free(dir);
}

/* ---- safetensors ---------------------------------------------------------- */

/* Write a file with the given header JSON and data bytes. */
static void write_st(const char *path, const char *json, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    uint64_t len = strlen(json);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(len >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(json, 1, len, f);
    fwrite(data, 1, n, f);
    fclose(f);
}

static void test_safetensors_reader(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", path[4200];
    REQUIRE(dir, "mkdtemp");
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {-1.5f, 0.25f};
    LtStTensor ts[2] = {{"a.weight", 2, {2, 3}, a}, {"b \"q\"", 1, {2}, b}};
    REQUIRE(lt_safetensors_write(path, ts, 2, err, sizeof err) == 0, "write: %s", err);
    long size = file_size(path);
    FILE *fh = fopen(path, "rb");
    unsigned char lb[8] = {0};
    if (fh) {
        CHECK(fread(lb, 1, 8, fh) == 8, "read length");
        fclose(fh);
    }
    CHECK((8 + lb[0]) % 8 == 0 && size == 8 + lb[0] + 32, "layout: N %d, size %ld", lb[0], size);

    int nd = 0;
    int64_t shape[4];
    float *x = lt_safetensors_read(path, "b \"q\"", &nd, shape, err, sizeof err);
    CHECK(x && nd == 1 && shape[0] == 2 && x[0] == -1.5f && x[1] == 0.25f, "read b: %s", err);
    free(x);
    x = lt_safetensors_read(path, "missing", &nd, shape, err, sizeof err);
    CHECK(!x && strstr(err, "no tensor 'missing'"), "err: %s", err);
    free(x);

    /* Keys in another order, whitespace and escapes, metadata first. */
    float data[3] = {7, 8, 9};
    write_st(path,
             "{ \"__metadata__\" : { \"format\" : \"pt\" } ,\n"
             "  \"\\u0078\" : { \"data_offsets\" : [ 4 , 12 ], \"shape\" : [ 2 ] ,\"dtype\":\"F32\" },"
             "  \"y\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]} }  ",
             data, sizeof data);
    x = lt_safetensors_read(path, "x", &nd, shape, err, sizeof err);
    CHECK(x && nd == 1 && shape[0] == 2 && x[0] == 8 && x[1] == 9, "read x: %s", err);
    free(x);
    x = lt_safetensors_read(path, "y", &nd, shape, err, sizeof err);
    CHECK(x && nd == 0 && x[0] == 7, "read scalar y: %s", err);
    free(x);

    /* Offsets past the data section. */
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", data, sizeof data);
    x = lt_safetensors_read(path, "x", &nd, shape, err, sizeof err);
    CHECK(!x && strstr(err, "data_offsets"), "err: %s", err);
    free(x);
    /* Offsets that disagree with the shape. */
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", data, sizeof data);
    x = lt_safetensors_read(path, "x", &nd, shape, err, sizeof err);
    CHECK(!x, "size mismatch accepted");
    free(x);
    /* Malformed JSON. */
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]", data, sizeof data);
    x = lt_safetensors_read(path, "x", &nd, shape, err, sizeof err);
    CHECK(!x, "malformed header accepted");
    free(x);

    /* Truncation of a written file: in the data, in the header, in the length. */
    REQUIRE(lt_safetensors_write(path, ts, 2, err, sizeof err) == 0, "write: %s", err);
    long cut[] = {size - 4, 20, 5};
    for (int i = 0; i < 3; i++) {
        CHECK(truncate(path, cut[i]) == 0, "truncate");
        x = lt_safetensors_read(path, "a.weight", &nd, shape, err, sizeof err);
        CHECK(!x && err[0], "file truncated to %ld bytes accepted", cut[i]);
        free(x);
    }
    test_rm_rf(dir);
    free(dir);
}

/* BF16 and F16 tensors are converted to fp32 exactly. */
static void test_safetensors_half_dtypes(void) {
    char *dir = test_tmpdir("lt_ckpt_test"), err[512] = "", path[4200];
    REQUIRE(dir, "mkdtemp");
    snprintf(path, sizeof path, "%s/h.safetensors", dir);
    /* bf16: 1.0, -2.5, +inf; f16: 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal), -0 */
    const uint16_t raw[8] = {0x3f80, 0xc020, 0x7f80, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000};
    unsigned char bytes[16];
    for (int i = 0; i < 8; i++) bytes[2 * i] = (unsigned char)raw[i], bytes[2 * i + 1] = (unsigned char)(raw[i] >> 8);
    write_st(path,
             "{\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
             "\"h\":{\"dtype\":\"F16\",\"shape\":[5],\"data_offsets\":[6,16]}}",
             bytes, sizeof bytes);
    int nd = 0;
    int64_t shape[4];
    float *x = lt_safetensors_read(path, "b", &nd, shape, err, sizeof err);
    CHECK(x && nd == 1 && shape[0] == 3 && x[0] == 1.0f && x[1] == -2.5f && isinf(x[2]) && x[2] > 0,
          "bf16: %s", err);
    free(x);
    x = lt_safetensors_read(path, "h", &nd, shape, err, sizeof err);
    CHECK(x && shape[0] == 5 && x[0] == 1.0f && x[1] == -2.0f && x[2] == 65504.0f &&
              x[3] == ldexpf(1.0f, -24) && x[4] == 0.0f && signbit(x[4]),
          "f16: %s", err);
    free(x);
    /* other dtypes are listed but not read */
    write_st(path, "{\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", bytes, 4);
    x = lt_safetensors_read(path, "i", &nd, shape, err, sizeof err);
    CHECK(!x && strstr(err, "'i' is I32"), "err: %s", err);
    free(x);
    test_rm_rf(dir);
    free(dir);
}

static void test_json_reader(void) {
    char err[512] = "";
    const char *ok = " {\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\","
                     " \"o\": {\"big\": 18446744073709551615}} ";
    LtJson *v = lt_json_parse(ok, strlen(ok), "t.json", err, sizeof err);
    REQUIRE(v, "parse: %s", err);
    const LtJson *a = lt_json_get(v, "a"), *s = lt_json_get(v, "s"), *o = lt_json_get(v, "o");
    double d = 0;
    uint64_t u = 0;
    CHECK(a && a->type == LT_JSON_ARRAY && a->n == 5 && lt_json_double(&a->kids[1], &d) == 0 &&
              d == -2500 && lt_json_u64(&a->kids[1], &u) != 0 && a->kids[2].boolean == 1 &&
              a->kids[4].type == LT_JSON_NULL, "array");
    CHECK(s && s->type == LT_JSON_STRING && strcmp(s->text, "x\xc3\xa9\xf0\x9f\x98\x80\n") == 0,
          "string: %s", s ? s->text : "(none)");
    CHECK(o && lt_json_u64(lt_json_get(o, "big"), &u) == 0 && u == UINT64_MAX, "u64");
    CHECK(!lt_json_get(v, "missing") && !lt_json_get(a, "a"), "get");
    lt_json_free(v);
    /* refused, each with the file name and a byte offset */
    const char *bad[] = {"", "{", "{\"a\":1,}", "[1 2]", "{\"a\":1,\"a\":2}", "01", "1.", "-",
                         "\"\\ud800\"", "\"\\u0000\"", "\"a\x01\"", "nul", "{} x", "\"\\x\"",
                         "{1:2}", "[1e]", "\"abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        v = lt_json_parse(bad[i], strlen(bad[i]), "t.json", err, sizeof err);
        CHECK(!v && strstr(err, "t.json: invalid JSON at byte"), "'%s' accepted (%s)", bad[i], err);
        lt_json_free(v);
    }
    v = lt_json_parse("{\"a\":1,\"a\":2}", 13, "t.json", err, sizeof err);
    CHECK(!v && strstr(err, "\"a\" appears twice"), "err: %s", err);
    lt_json_free(v);
    /* nesting is bounded (no stack exhaustion) */
    char deep[400];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 200);
    v = lt_json_parse(deep, sizeof deep, "t.json", err, sizeof err);
    CHECK(!v && strstr(err, "nested deeper"), "err: %s", err);
    lt_json_free(v);
}

int main(void) {
    RUN(test_roundtrip_bit_identical);
    RUN(test_weights_only_checkpoint);
    RUN(test_latest_and_resolve);
    RUN(test_resave_same_step_replaces);
    RUN(test_failed_save_keeps_latest);
    RUN(test_corruption_detected);
    RUN(test_architecture_mismatch);
    RUN(test_moe_shape_mismatch);
    RUN(test_moe_shared_gate);
    RUN(test_moe_dense_width);
    RUN(test_resolve_errors);
    RUN(test_load_config_roundtrip);
    RUN(test_dir_housekeeping);
    RUN(test_nonfinite_refused);
    RUN(test_export_hf);
    RUN(test_export_tensor_parallel_config);
    RUN(test_safetensors_reader);
    RUN(test_safetensors_half_dtypes);
    RUN(test_json_reader);
    return test_summary();
}
