/* config_suggest.c - "did you mean" for unknown config keys and sections:
 * the closest known name by edit distance (see lt_cfg_suggest). */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"

/* Case-insensitive optimal-string-alignment distance (edits and adjacent
 * transpositions). Both strings must be shorter than LT_CFG_NAME_MAX. Keeps the
 * last three rows of the dynamic-programming table. */
static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    int rows[3][LT_CFG_NAME_MAX + 1];
    int *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (int j = 0; j <= lb; j++)
        prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        int ca = tolower((unsigned char)a[i - 1]);
        for (int j = 1; j <= lb; j++) {
            int cb = tolower((unsigned char)b[j - 1]);
            int best = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < best)
                best = prev[j] + 1;
            if (cur[j - 1] + 1 < best)
                best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                cb == tolower((unsigned char)a[i - 2]) && prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
        int *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[lb];
}

/* Best known name for the unknown dotted key or section `q`; writes it to out
 * and returns 1, or returns 0 when nothing is reasonably close. In order:
 * 1. the same key name in another section ("train.lr" -> "optimizer.lr");
 * 2. the closest full key or section name within a small edit distance;
 * 3. the only key of q's section that starts with q's key name. */
int lt_cfg_suggest(const char *q, char *out, size_t n) {
    size_t ql = strlen(q);
    if (ql == 0 || ql >= LT_CFG_NAME_MAX)
        return 0;
    const char *dot = strrchr(q, '.');
    const char *leaf = dot ? dot + 1 : q;
    char name[LT_CFG_NAME_MAX];
    int best = INT_MAX;

    for (int i = 0; i < lt_cfg_nkeys; i++) {
        if (strcasecmp(lt_cfg_keys[i].name, leaf) != 0)
            continue;
        lt_cfg_full_name(&lt_cfg_keys[i], name, sizeof name);
        int d = edit_distance(q, name);
        if (d > 0 && d < best) {
            best = d;
            snprintf(out, n, "%s", name);
        }
    }
    if (best != INT_MAX)
        return 1;

    int limit = ql <= 4 ? 1 : ql <= 8 ? 2 : 3;
    for (int i = 0; i < lt_cfg_nkeys + lt_cfg_nsections; i++) {
        if (i < lt_cfg_nkeys)
            lt_cfg_full_name(&lt_cfg_keys[i], name, sizeof name);
        else
            snprintf(name, sizeof name, "%s", lt_cfg_sections[i - lt_cfg_nkeys]);
        int d = edit_distance(q, name);
        if (d <= limit && d < best) {
            best = d;
            snprintf(out, n, "%s", name);
        }
    }
    if (best != INT_MAX)
        return 1;

    if (dot && strlen(leaf) >= 3) {
        int found = -1, count = 0;
        for (int i = 0; i < lt_cfg_nkeys; i++) {
            if (strlen(lt_cfg_keys[i].section) == (size_t)(dot - q) &&
                strncasecmp(lt_cfg_keys[i].section, q, (size_t)(dot - q)) == 0 &&
                strncasecmp(lt_cfg_keys[i].name, leaf, strlen(leaf)) == 0) {
                found = i;
                count++;
            }
        }
        if (count == 1) {
            lt_cfg_full_name(&lt_cfg_keys[found], out, n);
            return 1;
        }
    }
    return 0;
}

