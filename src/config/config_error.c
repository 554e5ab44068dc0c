/* config_error.c - the text of the config's error messages: lt_cfg_fail,
 * excerpts of user values, where the value came from (file:line or the
 * command line) and the unknown key or section message with its did-you-mean
 * hint. See config_internal.h. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"

/* Format into err (if any room) and flatten to one line. Always returns -1. */
int lt_cfg_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return -1;
}

/* A printable, bounded excerpt of a user value for error messages. */
void lt_cfg_show_value(const char *v, size_t len, char *buf, size_t n) {
    size_t limit = 40, o = 0;
    for (size_t i = 0; i < len && i < limit && o + 1 < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        buf[o++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    if (len > limit && o + 4 < n) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
}

/* " at FILE:LINE" for YAML input, " on the command line" for overrides,
 * "" when checking a struct built in code. */
void lt_cfg_where(char *buf, size_t n, const char *file, size_t line) {
    if (file)
        snprintf(buf, n, " at %s:%zu", file, line);
    else
        snprintf(buf, n, " on the command line");
}

/* Error for an unknown section (is_section) or dotted key at `where`. */
int lt_cfg_fail_unknown(char *err, size_t errlen, bool is_section, const char *name,
                        const char *where) {
    char shown[64], hint[LT_CFG_NAME_MAX + 32] = "";
    char sug[LT_CFG_NAME_MAX];
    lt_cfg_show_value(name, strlen(name), shown, sizeof shown);
    if (strcmp(name, "model.padded_vocab_size") == 0)
        return lt_cfg_fail(
            err, errlen,
            "model.padded_vocab_size%s is derived from model.vocab_size and cannot be set", where);
    if (lt_cfg_suggest(name, sug, sizeof sug))
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", sug);
    else if (is_section)
        snprintf(hint, sizeof hint,
                 " (sections: model, parallel, train, optimizer, data, "
                 "checkpoint, logging, eval, comm, sample)");
    return lt_cfg_fail(err, errlen, "unknown %s '%s'%s%s", is_section ? "section" : "key", shown,
                       where, hint);
}
