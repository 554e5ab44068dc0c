/* test_trace_events.c - logging.trace's recorder in one process (trace.h):
 * spans nest on their thread's row, threads get rows of their own under the
 * names they give, operations in flight together get separate rows of their
 * group (and a row is reused once free), spans deeper than the stack and
 * events beyond the cap are dropped and counted, the file is strict JSON
 * written atomically, and a file that cannot be written is reported. The
 * merged multi-rank file is tests/test_trace.sh's. */
#include <pthread.h>
#include <unistd.h>

#include "common.h"
#include "json.h"
#include "test.h"
#include "trace.h"
#include "trace_gather.h"

static char g_dir[200], g_path[256];

static void *worker(void *arg) {
    (void)arg;
    lt_trace_thread("worker");
    for (int i = 0; i < 100; i++) {
        LT_TRACE_BEGIN("work", "\"i\": %d", i);
        LT_TRACE_END();
    }
    return NULL;
}

/* Recorded: outer, inner, 2 x 100 work, 3 operations, 16 of 20 nested. */
enum { RECORDED = 2 + 200 + 3 + 16, TOO_DEEP = 4 };

static void test_rows_and_operations(void) {
    LT_TRACE_BEGIN("outer", NULL);
    LT_TRACE_BEGIN("inner", "\"k\": %d", 7);
    LT_TRACE_END();
    LT_TRACE_END();
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        const int rc = pthread_create(&th[i], NULL, worker, NULL); /* (REQUIRE evaluates twice) */
        REQUIRE(rc == 0, "pthread_create: %d", rc);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    LtTraceOp a, b, c;
    lt_trace_op_begin(&a, "g", "send", lt_trace_now());
    lt_trace_op_begin(&b, "g", "recv", lt_trace_now());
    CHECK(a.row > 0 && b.row > 0 && a.row != b.row, "in flight together: rows %d, %d", a.row, b.row);
    const int ra = a.row, rb = b.row;
    lt_trace_op_end(&a, "send", "\"bytes\": %d", 4);
    lt_trace_op_end(&b, "recv", NULL);
    CHECK(a.row == 0 && b.row == 0, "ended operations are cleared");
    lt_trace_op_begin(&c, "g", "all_gather", lt_trace_now());
    CHECK(c.row == ra || c.row == rb, "a free row is reused: %d (had %d, %d)", c.row, ra, rb);
    lt_trace_op_end(&c, "all_gather", NULL);
    for (int i = 0; i < 20; i++) LT_TRACE_BEGIN("deep", "\"level\": %d", i);
    for (int i = 0; i < 20; i++) LT_TRACE_END();
}

static void test_cap(void) {
    for (int i = 0; i < LT_TRACE_MAX_EVENTS; i++) {
        LT_TRACE_BEGIN("filler", NULL);
        LT_TRACE_END();
    }
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = lt_malloc(*n + 1);
    *n = fread(s, 1, *n, f);
    fclose(f);
    return s;
}

static int count_named(const LtJson *events, const char *ph, const char *name) {
    int k = 0;
    for (int i = 0; i < events->n; i++) {
        const LtJson *e = &events->kids[i];
        k += !strcmp(lt_json_get(e, "ph")->text, ph) && !strcmp(lt_json_get(e, "name")->text, name);
    }
    return k;
}

static int has_thread(const LtJson *events, const char *name) {
    for (int i = 0; i < events->n; i++) {
        const LtJson *e = &events->kids[i];
        if (!strcmp(lt_json_get(e, "name")->text, "thread_name") &&
            !strcmp(lt_json_get(lt_json_get(e, "args"), "name")->text, name))
            return 1;
    }
    return 0;
}

static void test_file(void) {
    char err[512] = "", tmp[300];
    REQUIRE(lt_trace_stop(err, sizeof err) == 0, "finish: %s", err);
    CHECK(lt_trace_stop(err, sizeof err) == 0, "a second finish is a no-op");
    snprintf(tmp, sizeof tmp, "%s.tmp", g_path);
    CHECK(access(tmp, F_OK) != 0, "%s left behind", tmp);
    size_t n = 0;
    char *text = slurp(g_path, &n);
    REQUIRE(text, "no file %s", g_path);
    LtJson *root = lt_json_parse(text, n, g_path, err, sizeof err);
    free(text);
    REQUIRE(root, "not strict JSON: %s", err);
    const LtJson *ev = lt_json_get(root, "traceEvents");
    CHECK(ev && ev->type == LT_JSON_ARRAY, "traceEvents");
    if (ev) {
        CHECK(count_named(ev, "X", "work") == 200, "work spans: %d", count_named(ev, "X", "work"));
        CHECK(count_named(ev, "X", "outer") == 1 && count_named(ev, "X", "inner") == 1, "nested");
        CHECK(count_named(ev, "X", "deep") == 16, "deep: %d", count_named(ev, "X", "deep"));
        CHECK(count_named(ev, "X", "filler") == LT_TRACE_MAX_EVENTS - RECORDED, "capped");
        CHECK(has_thread(ev, "main") && has_thread(ev, "worker") && has_thread(ev, "comm g") &&
                  has_thread(ev, "comm g 2"),
              "thread rows");
    }
    uint64_t dropped = 0;
    CHECK(lt_json_u64(lt_json_get(lt_json_get(root, "otherData"), "dropped_events"), &dropped) == 0 &&
              dropped == TOO_DEEP + RECORDED,
          "dropped_events %llu, want %d", (unsigned long long)dropped, TOO_DEEP + RECORDED);
    lt_json_free(root);
}

static void test_write_failure_reported(void) {
    char dir[300], path[400], err[512] = "";
    snprintf(dir, sizeof dir, "%s/gone", g_dir);
    snprintf(path, sizeof path, "%s/t.json", dir);
    REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    lt_trace_open(path, 0, 1, "rank 0");
    LT_TRACE_BEGIN("x", NULL);
    LT_TRACE_END();
    rmdir(dir); /* after the start-up check: the write at the end fails */
    CHECK(lt_trace_stop(err, sizeof err) == -1, "a failed write must be reported");
    CHECK(strstr(err, "logging.trace") && strstr(err, path), "message: %s", err);
}

int main(void) {
    char *dir = test_tmpdir("lt_test_trace");
    if (!dir) return 1;
    snprintf(g_dir, sizeof g_dir, "%s", dir);
    snprintf(g_path, sizeof g_path, "%s/t.json", dir);
    lt_trace_open(g_path, 0, 1, "rank 0 (tp 0, pp 0, dp 0)");
    RUN(test_rows_and_operations);
    RUN(test_cap);
    RUN(test_file);
    RUN(test_write_failure_reported);
    test_rm_rf(dir);
    free(dir);
    return test_summary();
}
