/* config_internal.h - shared by the files of src/config/ only (not a public API).
 *
 * The key table: one entry per YAML key (section, name, type, offset of the
 * field in LtConfig, allowed range). Defined in config_keys.c; the YAML
 * reader (config_yaml.c), the overrides (config.c), validation
 * (config_validate.c) and printing (config_print.c) walk it. The rest is
 * what those files share: error messages (config_error.c), storing one
 * key's value (config_value.c) and the YAML reader's entry point. */
#ifndef LT_CONFIG_INTERNAL_H
#define LT_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

typedef enum { KT_INT, KT_LONG, KT_U64, KT_DOUBLE, KT_BOOL, KT_STR, KT_ENUM } KeyType;

/* Flags for double ranges: lower bound exclusive, upper bound exclusive,
 * no upper bound. */
enum { D_MIN_OPEN = 1, D_MAX_OPEN = 2, D_NO_MAX = 4 };

typedef struct {
    const char *section;
    const char *name;
    KeyType type;
    size_t off;           /* offset of the field in LtConfig */
    long long imin, imax; /* KT_INT / KT_LONG: allowed closed range */
    double dmin, dmax;    /* KT_DOUBLE: range, open/closed per dflags */
    int dflags;
    const char *const *enums; /* KT_ENUM: YAML spellings, index = value, NULL-terminated */
} KeyDesc;

/* In print order; the keys of a section are contiguous. */
extern const KeyDesc lt_cfg_keys[];
extern const int lt_cfg_nkeys;
extern const char *const lt_cfg_sections[]; /* the section names, in print order */
extern const int lt_cfg_nsections;

/* Longest dotted key name plus slack; longer names are never valid. */
#define LT_CFG_NAME_MAX 128
/* Bounds on lt_cfg_nkeys and lt_cfg_nsections for arrays with one entry per
 * key or section (config_keys.c asserts that the table fits). */
#define LT_CFG_MAX_KEYS 256
#define LT_CFG_MAX_SECTIONS 16

static inline const void *lt_cfg_cfield(const LtConfig *c, const KeyDesc *k) {
    return (const char *)c + k->off;
}

/* "section.name" into buf. */
void lt_cfg_full_name(const KeyDesc *k, char *buf, size_t n);
/* Index in lt_cfg_keys of the key with dotted name `name`, or -1. */
int lt_cfg_find_key(const char *name);
/* Index in lt_cfg_sections of the section `name`, or -1. */
int lt_cfg_find_section(const char *name);
/* Best known name for the unknown dotted key or section q (config_suggest.c):
 * writes it to out and returns 1, or 0 when nothing is reasonably close. */
int lt_cfg_suggest(const char *q, char *out, size_t n);

/* Number of spellings in a NULL-terminated enum name list. */
int lt_cfg_enum_count(const char *const *names);

/* Format a message into err (when errlen > 0), flattened to one line.
 * Always returns -1. */
int lt_cfg_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A printable excerpt of the user's text v (len bytes) into buf: control
 * characters shown as '?', at most 40 characters and "..." when longer. */
void lt_cfg_show_value(const char *v, size_t len, char *buf, size_t n);
/* Where a value came from, to end a message: " at FILE:LINE" when file is
 * set (YAML), else " on the command line". */
void lt_cfg_where(char *buf, size_t n, const char *file, size_t line);
/* The error for an unknown section (is_section) or dotted key `name` found at
 * `where`, with a did-you-mean hint when one is close. Always returns -1. */
int lt_cfg_fail_unknown(char *err, size_t errlen, bool is_section, const char *name,
                        const char *where);

/* Range check of key k's current value in c; `where` (" at f.yaml:3", " on
 * the command line" or "") ends the message. Returns 0, or -1 with err set. */
int lt_cfg_check_range(const LtConfig *c, const KeyDesc *k, const char *where, char *err,
                       size_t errlen);
/* true for the words a plain YAML scalar writes null with: "", "~", "null",
 * "Null", "NULL". */
bool lt_cfg_is_null_word(const char *s);
/* Store the text v (len bytes, NUL-terminated) into key k of c by the key's
 * type, then range check it (config_value.c). yaml_null_ok: a plain YAML null
 * means "" for a string key; command-line values are taken verbatim. `where`
 * ends any message. Returns 0, or -1 with err set and the key's field possibly
 * already overwritten (callers work on a copy). */
int lt_cfg_set_value(LtConfig *c, const KeyDesc *k, const char *v, size_t len,
                     bool yaml_null_ok, const char *where, char *err, size_t errlen);

/* Read the YAML config file at path into c (config_yaml.c): the keys it sets
 * overwrite c's, the rest are left. Returns 0, or -1 with err naming the
 * file (and line, where there is one); c may then be partly written. */
int lt_cfg_load_yaml(LtConfig *c, const char *path, char *err, size_t errlen);

/* The mixture-of-experts part of validation (config_moe.c). lt_cfg_moe_derive
 * resolves model.moe_ffn_hidden_size (0 -> model.ffn_hidden_size, which must
 * be resolved already) and fills model.moe_layer[] from model.moe_layer_freq
 * (all 0 for a dense model): 0, or -1 with err. lt_cfg_moe_rules checks the
 * cross-key rules of the model.moe_* and parallel.expert_* keys on a config
 * with its derived fields (dp: the data-parallel size, <= 0 when the world is
 * not known): 0, or -1 with a message naming the keys. */
int lt_cfg_moe_derive(LtConfig *t, char *err, size_t errlen);
int lt_cfg_moe_rules(const LtConfig *c, long long dp, char *err, size_t errlen);

#endif
