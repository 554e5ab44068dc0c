/* main.c - the lattice command line.
 *
 *   lattice train  CONFIG.yaml [key.path=value ...]
 *   lattice eval   CONFIG.yaml [key.path=value ...]
 *   lattice sample CONFIG.yaml [key.path=value ...]   token ids to stdout
 *   lattice logits CONFIG.yaml [key.path=value ...]   next-token logits to stdout
 *   lattice export CHECKPOINT OUT_DIR                 Hugging Face model directory
 *   lattice import HF_DIR OUT_DIR [--step N] [key.path=value ...] weights-only checkpoint from an HF dir
 *   lattice batches CONFIG.yaml [key.path=value ...] --out FILE   batches train reads
 *   lattice shard  ...                                 (see lattice shard --help)
 *   lattice schedule --pp P [--vpp V] --micro-batches M [--svg FILE]
 *   lattice plan   CONFIG.yaml [...] | --calibrate [...]     (see lattice plan --help)
 *   lattice --version
 * Exit codes: 0 success, 2 bad input (config, data, checkpoint), 1 internal
 * failure, 128+N stopped by signal N (after saving a checkpoint when set). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_select.h"
#include "backend.h"
#include "comm.h"
#include "common.h"
#include "config.h"
#include "data.h"
#include "dist.h"
#include "hf.h"
#include "plan.h"
#include "schedule.h"
#include "trainer.h"
#include "watchdog.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: lattice train  CONFIG.yaml [section.key=value ...]\n"
            "       lattice eval   CONFIG.yaml [section.key=value ...]\n"
            "       lattice sample CONFIG.yaml [section.key=value ...]\n"
            "       lattice logits CONFIG.yaml [section.key=value ...]\n"
            "       lattice export CHECKPOINT OUT_DIR\n"
            "       lattice import HF_DIR OUT_CHECKPOINT_DIR [--step N] [section.key=value ...]\n"
            "       lattice batches CONFIG.yaml [section.key=value ...] --out FILE\n"
            "       lattice shard  --vocab-size V [--format lattice|llmc] [--input FILE] OUT\n"
            "       lattice schedule --pp P [--vpp V] --micro-batches M [--fwd-cost F] "
            "[--bwd-cost B] [--latency L] [--svg FILE]\n"
            "       lattice schedule CONFIG.yaml [--world N] [section.key=value ...] [--svg FILE]\n"
            "       lattice plan   CONFIG.yaml [--gpus N] [--gpus-per-node G] [--gpu h100|h200|a100|cpu]\n"
            "                      [--gpu-mem-gib M] [--calibration FILE] [--top K] [--show TPxPP[xVPP]]\n"
            "                      [--layout] [--overlap config|all|none]\n"
            "                      [section.key=value ...]\n"
            "       lattice plan   --calibrate [--device auto|cpu|cuda] [--precision fp32|bf16]\n"
            "                      [--seconds S] [--out FILE]\n"
            "       lattice --version\n");
}

static void print_version(void) {
    const long cudnn = lt_cudnn_version();
    char cudnn_text[48] = "no cuDNN";
    if (cudnn > 0)
        snprintf(cudnn_text, sizeof cudnn_text, "cuDNN %ld.%ld.%ld", cudnn / 10000,
                 cudnn / 100 % 100, cudnn % 100);
    printf("lattice %s\n", LT_VERSION);
    if (!lt_cuda_compiled()) {
        printf("backends: cpu (OpenBLAS + OpenMP)\n");
    } else {
        char targets[256], libs[2048], driver[128];
        lt_cuda_version_info(targets, sizeof targets, libs, sizeof libs, driver, sizeof driver);
        printf("backends: cpu (OpenBLAS + OpenMP), cuda (kernels + cuBLASLt GEMMs, attention: lattice + %s; %s)\n",
               cudnn > 0 ? cudnn_text : "no cuDNN", targets);
        printf("cuda libraries loaded: %s\n", libs);
        printf("cuda driver: %s\n", driver);
    }
    printf("communication: mpi (OpenMPI%s)%s\n",
           lt_cuda_compiled() ? "; GPU buffers staged through pinned host memory" : "",
           lt_comm_nccl_compiled() ? ", nccl" : "");
}

/* Load, override and validate the config; every problem exits with code 2. */
static void load_config(LtConfig *cfg, int argc, char **argv, const LtWorld *w) {
    char err[2048];
    lt_config_defaults(cfg);
    if (lt_config_load(cfg, argv[0], argc - 1, argv + 1, err, sizeof err)) lt_input_error("%s", err);
    if (lt_config_validate(cfg, w->world, err, sizeof err)) lt_input_error("%s", err);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return LT_EXIT_INPUT;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        print_version();
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "shard")) return lt_cmd_shard(argc - 1, argv + 1);
    if (!strcmp(cmd, "schedule")) return lt_cmd_schedule(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return lt_cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "export")) {
        if (argc != 4) {
            usage(stderr);
            return LT_EXIT_INPUT;
        }
        char err[2048];
        if (lt_hf_export(argv[2], argv[3], err, sizeof err)) lt_input_error("export: %s", err);
        printf("exported %s to %s (model.safetensors, config.json)\n", argv[2], argv[3]);
        return 0;
    }
    if (!strcmp(cmd, "import")) {
        /* lattice import HF_DIR OUT_CHECKPOINT_DIR [overrides] */
        if (argc < 4) {
            fprintf(stderr, "lattice: error: import needs HF_DIR and OUT_CHECKPOINT_DIR\n");
            usage(stderr);
            return LT_EXIT_INPUT;
        }
        /* --step N (anywhere after the two paths): the checkpoint's step */
        char err[2048], **over = argv + 4, *end;
        int nover = 0;
        long step = 0;
        for (int i = 4; i < argc; i++) {
            if (strcmp(argv[i], "--step")) {
                over[nover++] = argv[i];
                continue;
            }
            errno = 0;
            step = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || errno || end == argv[i + 1] || *end || step < 0)
                lt_input_error("import: --step needs an integer >= 0");
            i++;
        }
        if (lt_hf_import_at(argv[2], argv[3], step, nover, over, err, sizeof err))
            lt_input_error("import: %s", err);
        printf("imported %s to %s (weights only, step %ld)\n", argv[2], argv[3], step);
        return 0;
    }
    if (!strcmp(cmd, "batches")) {
        /* lattice batches CONFIG.yaml [overrides] --out FILE */
        const char *out = NULL;
        char **over = argv + 3;
        int nover = 0;
        for (int i = 3; i < argc; i++) {
            if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
            else over[nover++] = argv[i];
        }
        if (argc < 3 || !out || !out[0]) {
            fprintf(stderr, "lattice: error: batches needs a CONFIG.yaml and --out FILE\n");
            usage(stderr);
            return LT_EXIT_INPUT;
        }
        /* one process; validated for the smallest world of the layout (one
         * data-parallel replica): the global batch does not depend on it */
        static LtConfig bcfg;
        char err[2048];
        if (lt_config_load(&bcfg, argv[2], nover, over, err, sizeof err)) lt_input_error("%s", err);
        const int world = bcfg.parallel.tensor_model_parallel_size *
                          bcfg.parallel.pipeline_model_parallel_size;
        if (lt_config_validate(&bcfg, world > 0 ? world : 1, err, sizeof err))
            lt_input_error("%s", err);
        return lt_cmd_batches(&bcfg, out);
    }
    int (*run)(LtConfig *, const LtWorld *) = NULL;
    if (!strcmp(cmd, "train")) run = lt_cmd_train;
    else if (!strcmp(cmd, "eval")) run = lt_cmd_eval;
    else if (!strcmp(cmd, "sample")) run = lt_cmd_sample;
    else if (!strcmp(cmd, "logits")) run = lt_cmd_logits;
    if (!run) {
        fprintf(stderr, "lattice: error: unknown command '%s'\n", cmd);
        usage(stderr);
        return LT_EXIT_INPUT;
    }
    if (argc < 3) {
        fprintf(stderr, "lattice: error: %s needs a CONFIG.yaml\n", cmd);
        usage(stderr);
        return LT_EXIT_INPUT;
    }
    if (run == lt_cmd_sample || run == lt_cmd_logits) lt_log_to_stderr(1);
    LtWorld w;
    lt_world_init(&w, &argc, &argv);
    static LtConfig cfg;
    lt_world_collective_errors(&w, 1); /* ends after the layout checks (trainer) */
    load_config(&cfg, argc - 2, argv + 2, &w);
    if (w.rank == 0) {
        FILE *out = run == lt_cmd_sample || run == lt_cmd_logits ? stderr : stdout;
        fprintf(out, "lattice %s %s: resolved config\n", LT_VERSION, cmd);
        lt_config_print(&cfg, out);
        fflush(out);
    }
    if (w.world > 1) lt_watchdog_start(cfg.comm.timeout_s, w.rank);
    int rc = run(&cfg, &w);
    lt_watchdog_stop();
    lt_world_finalize(&w);
    return rc;
}
