/* config_window.c - sliding-window attention's keys as Megatron-Core reads
 * them: model.window_size (its (left, right) tuple; a causal model's right
 * side is 0) and model.window_attn_skip_freq (utils.is_layer_window_attention:
 * an integer N makes every N-th layer, 1-based, full attention; a list marks
 * the windowed layers with 1). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"

/* "W", "W,R", "[W, R]" or "(W, R)" into *left, *right: 0, or -1. */
static int parse_pair(const char *s, long *left, long *right) {
    char buf[LT_PATH_MAX];
    size_t n = 0;
    for (const char *p = s; *p && n + 1 < sizeof buf; p++)
        if (!isspace((unsigned char)*p)) buf[n++] = *p;
    buf[n] = '\0';
    char *p = buf;
    const char close = *p == '[' ? ']' : *p == '(' ? ')' : '\0';
    if (close) {
        if (n < 2 || buf[n - 1] != close) return -1;
        buf[n - 1] = '\0', p++;
    }
    char *end;
    *left = strtol(p, &end, 10);
    if (end == p) return -1;
    *right = 0;
    if (*end == ',') {
        p = end + 1;
        *right = strtol(p, &end, 10);
        if (end == p) return -1;
    }
    return *end ? -1 : 0;
}

/* window_attn_skip_freq into layer[0 .. L): an integer N >= 1 (layer l,
 * 0-based, windowed iff (l + 1) % N != 0), or a list pattern (1 = windowed),
 * read as model.moe_layer_freq's list is. */
static int skip_pattern(const char *freq, int L, unsigned char *layer, char *err, size_t errlen) {
    const char *p = freq;
    while (isspace((unsigned char)*p)) p++;
    if (*p != '[' && *p != '(') {
        char *end;
        const long n = strtol(p, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        if (end == p || *end || n < 1)
            return lt_cfg_fail(err, errlen, "model.window_attn_skip_freq '%s': expected an integer "
                               ">= 1 (every N-th layer full attention) or a list of %d 0s and 1s "
                               "(1 = sliding window)", freq, L);
        for (int l = 0; l < L; l++) layer[l] = (unsigned char)((l + 1) % n != 0);
        return 0;
    }
    char inner[512];
    if (lt_moe_layer_pattern(freq, L, layer, inner, sizeof inner) == 0) return 0;
    const char *what = strstr(inner, "' ");
    return lt_cfg_fail(err, errlen, "model.window_attn_skip_freq '%s'%s", freq,
                       what ? what + 1 : ": not a list of 0s and 1s");
}

int lt_window_derive(LtConfig *c, char *err, size_t errlen) {
    memset(c->model.window_layer, 0, sizeof c->model.window_layer);
    c->model.window_left = -1;
    const char *ws = c->model.window_size;
    if (!ws[0]) {
        if (c->model.window_attn_skip_freq[0])
            return lt_cfg_fail(err, errlen, "model.window_attn_skip_freq is set but "
                               "model.window_size is not: set model.window_size (e.g. [128, 0])");
        return 0;
    }
    long left, right;
    if (parse_pair(ws, &left, &right))
        return lt_cfg_fail(err, errlen, "model.window_size '%s': expected W or [W, 0] (W >= 0 "
                           "tokens before each query, or -1 for no window)", ws);
    if (right != 0)
        return lt_cfg_fail(err, errlen, "model.window_size '%s': the right side must be 0 (a "
                           "causal language model sees no later token)", ws);
    if (left < -1 || left > 1L << 30)
        return lt_cfg_fail(err, errlen, "model.window_size '%s': the left side must be -1 "
                           "(no window) or in [0, 2^30]", ws);
    if (left == -1) return 0; /* Megatron's "infinite" side: full attention */
    const int L = c->model.num_layers;
    if (L > LT_MOE_MAX_LAYERS)
        return lt_cfg_fail(err, errlen, "model.window_size: a windowed model has at most %d "
                           "layers, model.num_layers is %d", LT_MOE_MAX_LAYERS, L);
    c->model.window_left = (int)left;
    if (!c->model.window_attn_skip_freq[0]) {
        memset(c->model.window_layer, 1, (size_t)L);
        return 0;
    }
    return skip_pattern(c->model.window_attn_skip_freq, L, c->model.window_layer, err, errlen);
}
