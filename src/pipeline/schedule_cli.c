/* schedule_cli.c - `lattice schedule`: simulate a pipeline schedule and draw
 * its timeline as text (and optionally SVG). See schedule.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "schedule.h"

#define TOOL "lattice schedule"
#define MAX_COST 1000

static void usage(FILE *f) {
    fprintf(f,
            "usage: " TOOL " --pp P [--vpp V] --micro-batches M [--fwd-cost F] [--bwd-cost B]\n"
            "       " TOOL " CONFIG.yaml [--world N] [section.key=value ...] [options]\n"
            "                        [--latency L] [--svg FILE] [--full]\n"
            "  Simulates the pipeline schedule of P stages (V virtual chunks per stage,\n"
            "  interleaved 1F1B when V > 1; M must then be a multiple of P) and prints one\n"
            "  row per rank, time flowing right: F<mb> / B<mb> (F<mb>.<chunk> for chunks\n"
            "  > 0), '=' while a compute continues, '.' idle. Then the bubble fraction\n"
            "  and the peak number of in-flight (chunk, micro batch) activations per rank.\n"
            "  Costs are integer time units per chunk: forward F (default 1), backward B\n"
            "  (default 2), message latency L (default 0). --svg FILE also writes the\n"
            "  timeline as an SVG picture. Rows wider than 200 characters give a summary\n"
            "  by rank instead (busy and idle time) unless --full.\n");
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

static void label(char *buf, size_t len, const LtSimEvent *e) {
    char kind = e->kind == LT_ACT_FORWARD ? 'F' : 'B';
    if (e->chunk > 0) snprintf(buf, len, "%c%d.%d", kind, e->mb, e->chunk);
    else snprintf(buf, len, "%c%d", kind, e->mb);
}

static int rank_events(const LtSimResult *res, int r, const LtSimEvent **ev) {
    *ev = res->events + res->event_off[r];
    return res->event_off[r + 1] - res->event_off[r];
}

/* The longest timeline printed as text, in time units (wider ones only in --svg). */
#define MAX_TEXT_UNITS 2000
/* The widest row printed without --full: past it, a summary by rank. */
#define MAX_ROW_CHARS 200

/* Cell width of a time unit: the longest label + 1. */
static int cell_width(const LtSimResult *res) {
    int width = 0;
    for (int i = 0; i < res->event_off[res->pp]; i++) {
        char buf[32];
        label(buf, sizeof buf, &res->events[i]);
        const int l = (int)strlen(buf) + 1;
        if (l > width) width = l;
    }
    return width;
}

/* The time ruler: the unit number every 10 units, into row (units x width). */
static void ruler(char *row, int units, int width) {
    memset(row, ' ', (size_t)units * (size_t)width);
    for (int t = 0; t < units; t += 10) {
        char num[16];
        int l = snprintf(num, sizeof num, "%d", t);
        if (t * width + l <= units * width) memcpy(row + (size_t)t * width, num, (size_t)l);
    }
    row[(size_t)units * width] = 0;
}

/* Rank r's row of the timeline into row (units x width). */
static void rank_row(const LtSimResult *res, int r, char *row, int units, int width) {
    memset(row, ' ', (size_t)units * (size_t)width);
    for (int t = 0; t < units; t++) row[(size_t)t * width] = '.';
    const LtSimEvent *ev;
    int n = rank_events(res, r, &ev);
    for (int i = 0; i < n; i++) {
        int s = (int)(ev[i].start + 0.5), e = (int)(ev[i].end + 0.5);
        if (e <= s) continue;
        size_t a = (size_t)s * width, b = (size_t)e * width - 1;
        for (size_t k = a; k < b; k++) row[k] = '=';
        row[b] = ' ';
        char buf[32];
        label(buf, sizeof buf, &ev[i]);
        size_t l = strlen(buf);
        memcpy(row + a, buf, l);
        if (a + l < b && e - s == 1) memset(row + a + l, ' ', b - a - l);
    }
}

/* Each rank's time in a line: busy, and idle before its first compute,
 * between computes and after its last (for timelines too wide to draw). */
static void print_rank_summary(const LtSimResult *res) {
    for (int r = 0; r < res->pp; r++) {
        const LtSimEvent *ev;
        const int n = rank_events(res, r, &ev);
        double busy = 0, first = res->makespan, last = 0;
        for (int i = 0; i < n; i++) {
            busy += ev[i].end - ev[i].start;
            if (ev[i].start < first) first = ev[i].start;
            if (ev[i].end > last) last = ev[i].end;
        }
        if (n == 0) first = last = 0;
        const double between = last - first - busy;
        printf("rank %-3d busy %g of %g (%.0f%%); idle %g before its first compute, %g between "
               "computes, %g after its last\n",
               r, busy, res->makespan, 100.0 * busy / res->makespan, first,
               between > 0 ? between : 0, res->makespan - last);
    }
}

/* The timeline, one row per rank, and its legend; rows wider than
 * MAX_ROW_CHARS (unless full) give a summary by rank instead. */
static void print_text(const LtSimResult *res, int full) {
    const int pp = res->pp;
    if (res->makespan + 0.5 > MAX_TEXT_UNITS) {
        printf("(the timeline, %.0f time units, is too long to print; --svg draws it)\n",
               res->makespan);
        print_rank_summary(res);
        return;
    }
    const int units = (int)(res->makespan + 0.5), width = cell_width(res);
    if (!full && units * width > MAX_ROW_CHARS) {
        printf("(the timeline is %d characters wide per rank: a summary by rank instead; "
               "--full prints it, --svg draws it)\n",
               units * width);
        print_rank_summary(res);
        return;
    }
    char *row = lt_malloc((size_t)units * (size_t)width + 1);
    ruler(row, units, width);
    printf("%-8s %s\n", "time", row);
    for (int r = 0; r < pp; r++) {
        rank_row(res, r, row, units, width);
        printf("rank %-3d %s\n", r, row);
    }
    free(row);
    printf("legend: one time unit per %d characters; F<mb> the forward of micro batch <mb>, "
           "B<mb> its backward\n(F<mb>.<c>, B<mb>.<c>: of virtual chunk <c> > 0); '=' the "
           "compute goes on; '.' the rank is idle\n",
           width);
}

/* Costs, makespan, bubble, in-flight peaks and the deadlock check's verdict. */
static void print_summary(const LtSimResult *res, int fwd, int bwd, int latency, int uneven) {
    const int pp = res->pp, total = res->vpp * res->micro_batches;
    printf("\npipeline %d, virtual chunks %d, micro batches %d; cost per chunk%s: forward %d, "
           "backward %d, latency %d\n",
           pp, res->vpp, res->micro_batches, uneven ? " (per unit of layers)" : "", fwd, bwd,
           latency);
    printf("makespan: %g  busy: %g  bubble fraction: %.4f", res->makespan, res->busy_total,
           res->bubble);
    if (latency == 0 && !uneven)
        printf("  (= (P-1)/(V*M+P-1) = %d/%d)", pp - 1, total + pp - 1);
    printf("\npeak in-flight micro batches (per chunk) by rank:");
    for (int r = 0; r < pp; r++) printf(" %d", res->peak_inflight[r]);
    printf("\nwarm-up forwards by rank:");
    for (int r = 0; r < pp; r++)
        printf(" %d", lt_schedule_warmup(pp, res->vpp, res->micro_batches, r));
    printf("\nmessages matched: %d (deadlock-free with buffered, tagged sends (MPI) and with "
           "ordered, rendezvous sends (NCCL))\n",
           res->messages);
}

/* Writes the picture to f (opened by the caller before any work) and closes it. */
static int write_svg(FILE *f, const char *path, const LtSimResult *res) {
    static const char *fcol[] = {"#4c78a8", "#72b7b2", "#9ecae9", "#54a24b"};
    static const char *bcol[] = {"#e45756", "#f58518", "#ff9da6", "#b279a2"};
    const double unit = 24, rowh = 28, left = 64, top = 36;
    double w = left + res->makespan * unit + 16, h = top + res->pp * rowh + 40;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"monospace\" font-size=\"10\">\n",
            w, h);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f,
            "<text x=\"%.0f\" y=\"20\" font-size=\"13\">pipeline %d, virtual chunks %d, micro "
            "batches %d: bubble fraction %.4f</text>\n",
            left, res->pp, res->vpp, res->micro_batches, res->bubble);
    for (int r = 0; r < res->pp; r++) {
        double y = top + r * rowh;
        fprintf(f, "<text x=\"4\" y=\"%.1f\" font-size=\"12\">rank %d</text>\n", y + rowh / 2 + 4,
                r);
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f2f2f2\"/>\n",
                left, y + 2, res->makespan * unit, rowh - 4);
        const LtSimEvent *ev;
        int n = rank_events(res, r, &ev);
        for (int i = 0; i < n; i++) {
            const char *col = ev[i].kind == LT_ACT_FORWARD ? fcol[ev[i].chunk % 4]
                                                           : bcol[ev[i].chunk % 4];
            double x = left + ev[i].start * unit, ww = (ev[i].end - ev[i].start) * unit;
            char buf[32];
            label(buf, sizeof buf, &ev[i]);
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
                    "stroke=\"white\"><title>rank %d %s chunk %d micro batch %d [%g, %g)"
                    "</title></rect>\n",
                    x, y + 2, ww, rowh - 4, col, r,
                    ev[i].kind == LT_ACT_FORWARD ? "forward" : "backward", ev[i].chunk,
                    ev[i].mb, ev[i].start, ev[i].end);
            fprintf(f,
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"white\">%s</text>\n",
                    x + ww / 2, y + rowh / 2 + 3, buf);
        }
    }
    double ya = top + res->pp * rowh + 14;
    for (int t = 0; t <= (int)(res->makespan + 0.5); t += 10)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n",
                left + t * unit, ya, t);
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        fprintf(stderr, TOOL ": error: writing '%s' failed\n", path);
        return 1;
    }
    return 0;
}

/* pp, vpp and micro batches per step from a config: M = global batch /
 * (micro batch x DP), DP = world / (TP x PP); world defaults to TP x PP. */
static int from_config(const char *path, int nover, char **over, int world, int *pp, int *vpp,
                       int *mbs, LtLayerSplit *split, int *layers) {
    char err[2048];
    LtConfig *c = calloc(1, sizeof *c);
    if (!c) return 1;
    lt_config_defaults(c);
    int rc = 0;
    if (lt_config_load(c, path, nover, over, err, sizeof err) == 0) {
        if (!world)
            world = c->parallel.tensor_model_parallel_size * c->parallel.pipeline_model_parallel_size;
        if (lt_config_validate(c, world, err, sizeof err) == 0) {
            int dp = world / (c->parallel.tensor_model_parallel_size *
                              c->parallel.pipeline_model_parallel_size);
            *pp = c->parallel.pipeline_model_parallel_size;
            *vpp = c->parallel.virtual_pipeline_model_parallel_size;
            *mbs = c->train.global_batch_size / (c->train.micro_batch_size * dp);
            *split = lt_config_layer_split(c);
            *layers = c->model.num_layers;
            printf("%s: world %d = tp %d x pp %d x dp %d; %d micro batches of %d per step\n", path,
                   world, c->parallel.tensor_model_parallel_size, *pp, dp, *mbs,
                   c->train.micro_batch_size);
        } else {
            rc = 2;
        }
    } else {
        rc = 2;
    }
    if (rc) fprintf(stderr, TOOL ": error: %s\n", err);
    free(c);
    return rc;
}

/* An uneven layer split of a config (layer_split.h): each chunk's cost factor,
 * its layers over g, the greatest common divisor of the chunks' layer counts
 * (so times stay whole units); printed stage by stage. NULL for an even split. */
static double *chunk_factors(const LtLayerSplit *s, int L, int pp, int vpp) {
    if (lt_layer_split_even(s)) return NULL;
    int g = 0, same = 1;
    for (int v = 0; v < pp * vpp; v++) {
        int a = lt_layer_split_count(s, L, pp, vpp, v % pp, v / pp), b = g;
        same &= a == lt_layer_split_count(s, L, pp, vpp, 0, 0);
        while (b) { /* gcd(a, g) */
            const int t = a % b;
            a = b;
            b = t;
        }
        g = a;
    }
    if (same) return NULL; /* (an uneven setting that comes out even) */
    double *f = lt_malloc(sizeof(double) * (size_t)(pp * vpp));
    for (int v = 0; v < pp * vpp; v++)
        f[v] = g ? (double)lt_layer_split_count(s, L, pp, vpp, v % pp, v / pp) / g : 0.0;
    char words[1024];
    printf("layers per chunk, stage by stage: %s; a chunk's forward and backward cost its layers "
           "/ %d times the costs below\n",
           lt_layer_split_words(s, L, pp, vpp, words, sizeof words), g);
    return f;
}

typedef struct {
    int pp, vpp, mbs, fwd, bwd, latency, world, full;
    const char *svg, *config;
    char **over; /* section.key=value overrides of the config (argv's strings) */
    int nover;
} SchedArgs;

/* Option opt with its value v into a: 0, or 2 after the message. */
static int parse_option(SchedArgs *a, const char *opt, const char *v) {
    int ok = 1;
    if (!strcmp(opt, "--pp")) ok = parse_int(v, 1, LT_SCHED_MAX_PP, &a->pp);
    else if (!strcmp(opt, "--vpp")) ok = parse_int(v, 1, LT_SCHED_MAX_VPP, &a->vpp);
    else if (!strcmp(opt, "--micro-batches")) ok = parse_int(v, 1, INT_MAX, &a->mbs);
    else if (!strcmp(opt, "--fwd-cost")) ok = parse_int(v, 1, MAX_COST, &a->fwd);
    else if (!strcmp(opt, "--bwd-cost")) ok = parse_int(v, 1, MAX_COST, &a->bwd);
    else if (!strcmp(opt, "--latency")) ok = parse_int(v, 0, MAX_COST, &a->latency);
    else if (!strcmp(opt, "--world")) ok = parse_int(v, 1, 1 << 20, &a->world);
    else if (!strcmp(opt, "--svg")) a->svg = v;
    else {
        fprintf(stderr, TOOL ": error: unknown option '%s'\n", opt);
        usage(stderr);
        return 2;
    }
    if (ok) return 0;
    const char *want = !strcmp(opt, "--pp")                ? "an integer in [1, 1024]"
                       : !strcmp(opt, "--vpp")             ? "an integer in [1, 64]"
                       : !strcmp(opt, "--latency")         ? "an integer in [0, 1000]"
                       : !strcmp(opt, "--micro-batches")   ? "a positive integer"
                                                           : "an integer in [1, 1000]";
    fprintf(stderr, TOOL ": error: invalid value '%s' for %s (want %s)\n", v, opt, want);
    return 2;
}

/* argv into a: 0 to go on, or 1 with *status to exit with (--help, a
 * refusal). a->over is allocated; the caller frees it. */
static int parse_args(int argc, char **argv, SchedArgs *a, int *status) {
    *a = (SchedArgs){.vpp = 1, .fwd = 1, .bwd = 2};
    a->over = lt_malloc(((size_t)argc + 1) * sizeof(char *));
    *status = 0;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) return usage(stdout), 1;
        if (!strcmp(opt, "--full")) {
            a->full = 1;
            continue;
        }
        if (strncmp(opt, "--", 2) != 0) {
            if (!a->config && !strchr(opt, '=')) a->config = opt;
            else if (a->config && strchr(opt, '=')) a->over[a->nover++] = argv[i];
            else {
                fprintf(stderr, TOOL ": error: unexpected argument '%s'\n", opt);
                usage(stderr);
                return *status = 2, 1;
            }
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, TOOL ": error: %s needs a value\n", opt);
            return *status = 2, 1;
        }
        if ((*status = parse_option(a, opt, argv[++i]))) return 1;
    }
    return 0;
}

/* The schedule's sizes: from the config (with its layer split), or the
 * options as given, checked. 0, or the exit status after the message. */
static int resolve_sizes(SchedArgs *a, LtLayerSplit *split, int *layers) {
    if (a->config) {
        if (a->pp || a->mbs) {
            fprintf(stderr, TOOL ": error: give either CONFIG.yaml or --pp/--micro-batches\n");
            return 2;
        }
        a->vpp = 1;
        return from_config(a->config, a->nover, a->over, a->world, &a->pp, &a->vpp, &a->mbs,
                           split, layers);
    }
    if (a->world) {
        fprintf(stderr, TOOL ": error: --world needs a CONFIG.yaml\n");
        return 2;
    }
    if (!a->pp || !a->mbs) {
        fprintf(stderr, TOOL ": error: %s is required\n", !a->pp ? "--pp" : "--micro-batches");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Simulate the schedule of a, print it (and write the SVG): the exit status. */
static int simulate_and_print(const SchedArgs *a, const LtLayerSplit *split, int layers) {
    char err[1024];
    if (lt_schedule_check(a->pp, a->vpp, a->mbs, err, sizeof err)) {
        fprintf(stderr, TOOL ": error: %s\n", err);
        return 2;
    }
    FILE *svgf = NULL;
    if (a->svg && !(svgf = fopen(a->svg, "w"))) {
        fprintf(stderr, TOOL ": error: cannot write '%s': %s\n", a->svg, strerror(errno));
        return 2;
    }
    LtSimResult res;
    double *factors = chunk_factors(split, layers, a->pp, a->vpp);
    LtSimCost cost = {.fwd = a->fwd, .bwd = a->bwd, .latency = a->latency, .stage_scale = factors};
    if (lt_schedule_simulate_all(a->pp, a->vpp, a->mbs, cost, &res, err, sizeof err)) {
        fprintf(stderr, TOOL ": internal error: %s\n", err);
        free(factors);
        if (svgf) fclose(svgf);
        return 1;
    }
    print_text(&res, a->full);
    print_summary(&res, a->fwd, a->bwd, a->latency, factors != NULL);
    free(factors);
    int rc = svgf ? write_svg(svgf, a->svg, &res) : 0;
    if (a->svg && rc == 0) printf("wrote %s\n", a->svg);
    lt_sim_free(&res);
    return rc;
}

int lt_cmd_schedule(int argc, char **argv) {
    SchedArgs a;
    LtLayerSplit split = {0};
    int status, layers = 0;
    if (parse_args(argc, argv, &a, &status) == 0) status = resolve_sizes(&a, &split, &layers);
    else status = status ? status : -1; /* -1: --help, done */
    free(a.over);
    if (status) return status < 0 ? 0 : status;
    return simulate_and_print(&a, &split, layers);
}
