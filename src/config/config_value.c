/* config_value.c - one key's value: text (from YAML or a section.key=value
 * override) converted by the key's type (integers, unsigned 64-bit, finite
 * numbers, booleans, enum spellings, strings), stored in LtConfig and held to
 * the key's range (lt_cfg_set_value, lt_cfg_check_range). See
 * config_internal.h. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "config_internal.h"

static void *field(LtConfig *c, const KeyDesc *k) {
    return (char *)c + k->off;
}

/* Parse a whole decimal integer (optional sign). 0 ok, -1 not an integer,
 * -2 out of long long range. */
static int parse_ll(const char *s, long long *out) {
    if (!(isdigit((unsigned char)s[0]) ||
          ((s[0] == '-' || s[0] == '+') && isdigit((unsigned char)s[1]))))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0')
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = v;
    return 0;
}

/* Same for an unsigned 64-bit value (no minus sign). */
static int parse_u64(const char *s, uint64_t *out) {
    if (!(isdigit((unsigned char)s[0]) || (s[0] == '+' && isdigit((unsigned char)s[1]))))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = (uint64_t)v;
    return 0;
}

/* A finite number in C/YAML notation ("6e-4", "0.1", "3"). */
static int parse_double(const char *s, double *out) {
    if (s[0] == '\0' || isspace((unsigned char)s[0]))
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !isfinite(v))
        return -1;
    *out = v; /* underflow to 0 or a denormal is accepted; range checks follow */
    return 0;
}

static int parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = false, 0;
    }
    return -1;
}

/* "a|b|c" listing of an enum's spellings. */
static void enum_list(const char *const *names, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; names[i]; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, "%s%s", i ? "|" : "", names[i]);
    }
}

/* Range check of one key's current value in c. `where` is appended to the
 * message (may be ""). Returns 0 or -1 with err set. */
int lt_cfg_check_range(const LtConfig *c, const KeyDesc *k, const char *where, char *err,
                       size_t errlen) {
    char name[LT_CFG_NAME_MAX];
    lt_cfg_full_name(k, name, sizeof name);
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        long long v = k->type == KT_INT ? *(const int *)lt_cfg_cfield(c, k)
                                        : *(const long *)lt_cfg_cfield(c, k);
        long long type_max = k->type == KT_INT ? INT_MAX : LONG_MAX;
        if (v >= k->imin && v <= k->imax)
            return 0;
        if (k->imax == type_max)
            return lt_cfg_fail(err, errlen, "%s must be >= %lld, got %lld%s", name, k->imin, v,
                               where);
        return lt_cfg_fail(err, errlen, "%s must be in [%lld, %lld], got %lld%s", name, k->imin,
                           k->imax, v, where);
    }
    case KT_DOUBLE: {
        double v = *(const double *)lt_cfg_cfield(c, k);
        bool lo_ok = (k->dflags & D_MIN_OPEN) ? v > k->dmin : v >= k->dmin;
        bool hi_ok =
            (k->dflags & D_NO_MAX) || ((k->dflags & D_MAX_OPEN) ? v < k->dmax : v <= k->dmax);
        if (!isfinite(v))
            return lt_cfg_fail(err, errlen, "%s must be a finite number%s", name, where);
        /* the engine computes with these in fp32 (AdamW's arguments, sampling):
         * a value fp32 cannot hold would become inf or 0 there */
        if (fabs(v) > FLT_MAX || (v != 0.0 && (float)v == 0.0f))
            return lt_cfg_fail(err, errlen,
                               "%s = %g does not fit in fp32 (magnitude up to %g, and not below "
                               "%g unless 0)%s",
                               name, v, (double)FLT_MAX, (double)FLT_TRUE_MIN, where);
        if (lo_ok && hi_ok)
            return 0;
        if (k->dflags & D_NO_MAX)
            return lt_cfg_fail(err, errlen, "%s must be %s %g, got %g%s", name,
                               (k->dflags & D_MIN_OPEN) ? ">" : ">=", k->dmin, v, where);
        return lt_cfg_fail(err, errlen, "%s must be in %c%g, %g%c, got %g%s", name,
                           (k->dflags & D_MIN_OPEN) ? '(' : '[', k->dmin, k->dmax,
                           (k->dflags & D_MAX_OPEN) ? ')' : ']', v, where);
    }
    case KT_ENUM: {
        int v = *(const int *)lt_cfg_cfield(c, k);
        if (v >= 0 && v < lt_cfg_enum_count(k->enums))
            return 0;
        char list[64];
        enum_list(k->enums, list, sizeof list);
        return lt_cfg_fail(err, errlen, "%s has invalid value %d (allowed: %s)%s", name, v, list,
                           where);
    }
    case KT_STR: {
        const char *s = lt_cfg_cfield(c, k);
        if (memchr(s, '\0', LT_PATH_MAX))
            return 0;
        return lt_cfg_fail(err, errlen, "%s is not NUL-terminated%s", name, where);
    }
    case KT_BOOL:
    case KT_U64: return 0;
    }
    return 0;
}

bool lt_cfg_is_null_word(const char *s) {
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* Store text `v` (len bytes, NUL-terminated) into key k of c, then range
 * check it. `yaml_null_ok`: a plain YAML null (empty, ~, null) means "" for
 * string keys; command-line values are taken verbatim. */
int lt_cfg_set_value(LtConfig *c, const KeyDesc *k, const char *v, size_t len,
                     bool yaml_null_ok, const char *where, char *err, size_t errlen) {
    char name[LT_CFG_NAME_MAX], shown[64];
    lt_cfg_full_name(k, name, sizeof name);
    lt_cfg_show_value(v, len, shown, sizeof shown);
    if (memchr(v, '\0', len))
        return lt_cfg_fail(err, errlen, "%s: value contains a NUL character%s", name, where);
    switch (k->type) {
    case KT_INT:
    case KT_LONG: {
        long long x = 0;
        long long tmin = k->type == KT_INT ? INT_MIN : LONG_MIN;
        long long tmax = k->type == KT_INT ? INT_MAX : LONG_MAX;
        int rc = parse_ll(v, &x);
        if (rc == -1)
            return lt_cfg_fail(err, errlen, "%s: expected an integer, got '%s'%s", name, shown,
                               where);
        if (rc == -2 || x < tmin || x > tmax) {
            if (k->imax == tmax)
                return lt_cfg_fail(err, errlen,
                                   "%s: %s is out of range (must be >= %lld and <= %lld)%s", name,
                                   shown, k->imin, tmax, where);
            return lt_cfg_fail(err, errlen, "%s: %s is out of range (must be in [%lld, %lld])%s",
                               name, shown, k->imin, k->imax, where);
        }
        if (k->type == KT_INT)
            *(int *)field(c, k) = (int)x;
        else
            *(long *)field(c, k) = (long)x;
        break;
    }
    case KT_U64: {
        uint64_t x = 0;
        int rc = parse_u64(v, &x);
        if (rc == -1)
            return lt_cfg_fail(err, errlen, "%s: expected an unsigned 64-bit integer, got '%s'%s",
                               name, shown, where);
        if (rc == -2)
            return lt_cfg_fail(err, errlen,
                               "%s: %s is out of range (must be in [0, %" PRIu64 "])%s", name,
                               shown, UINT64_MAX, where);
        *(uint64_t *)field(c, k) = x;
        break;
    }
    case KT_DOUBLE: {
        double x = 0;
        if (parse_double(v, &x))
            return lt_cfg_fail(err, errlen, "%s: expected a finite number, got '%s'%s", name, shown,
                               where);
        *(double *)field(c, k) = x;
        break;
    }
    case KT_BOOL: {
        bool x = false;
        if (parse_bool(v, &x))
            return lt_cfg_fail(err, errlen, "%s: expected a boolean (true/false), got '%s'%s", name,
                               shown, where);
        *(bool *)field(c, k) = x;
        break;
    }
    case KT_ENUM: {
        int n = lt_cfg_enum_count(k->enums), found = -1;
        for (int i = 0; i < n; i++)
            if (strcasecmp(v, k->enums[i]) == 0)
                found = i;
        if (found < 0) {
            char list[64];
            enum_list(k->enums, list, sizeof list);
            return lt_cfg_fail(err, errlen, "%s: expected one of %s, got '%s'%s", name, list, shown,
                               where);
        }
        *(int *)field(c, k) = found;
        break;
    }
    case KT_STR: {
        char *dst = field(c, k);
        if (yaml_null_ok && lt_cfg_is_null_word(v))
            len = 0;
        if (len >= LT_PATH_MAX)
            return lt_cfg_fail(err, errlen, "%s: value is too long (%zu bytes, at most %d)%s", name,
                               len, LT_PATH_MAX - 1, where);
        memset(dst, 0, LT_PATH_MAX);
        memcpy(dst, v, len);
        break;
    }
    }
    return lt_cfg_check_range(c, k, where, err, errlen);
}
