/* config_yaml.c - reading a YAML config file into LtConfig with libyaml's
 * event parser (lt_cfg_load_yaml): one document whose root maps sections to
 * mappings of keys, each key once, values as scalars or, for the few keys
 * that take one, a list joined into the key's string form; every error names
 * file:line. See config_internal.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "config.h"
#include "config_internal.h"

typedef struct {
    yaml_parser_t parser;
    const char *file;
    LtConfig *cfg;
    char *err;
    size_t errlen;
    bool section_seen[LT_CFG_MAX_SECTIONS];
    size_t section_line[LT_CFG_MAX_SECTIONS];
    bool key_seen[LT_CFG_MAX_KEYS];
    size_t key_line[LT_CFG_MAX_KEYS];
} YamlIn;

static size_t line_of(const yaml_event_t *ev) {
    return ev->start_mark.line + 1;
}

static const char *node_kind(const yaml_event_t *ev) {
    switch (ev->type) {
    case YAML_SCALAR_EVENT: return "a scalar";
    case YAML_SEQUENCE_START_EVENT: return "a sequence";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_ALIAS_EVENT: return "an alias (aliases are not supported)";
    default: return "something else";
    }
}

static bool is_null_scalar(const yaml_event_t *ev) {
    return ev->type == YAML_SCALAR_EVENT && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           lt_cfg_is_null_word((const char *)ev->data.scalar.value);
}

/* Next event, or -1 with libyaml's diagnosis in err. */
static int next_event(YamlIn *in, yaml_event_t *ev) {
    if (yaml_parser_parse(&in->parser, ev))
        return 0;
    const yaml_parser_t *p = &in->parser;
    const char *problem = p->problem ? p->problem : "unknown error";
    switch (p->error) {
    case YAML_MEMORY_ERROR:
        return lt_cfg_fail(in->err, in->errlen, "%s: out of memory while parsing YAML", in->file);
    case YAML_READER_ERROR:
        return lt_cfg_fail(in->err, in->errlen, "%s: cannot read YAML: %s (at byte %zu)", in->file,
                           problem, p->problem_offset);
    default:
        if (p->context)
            return lt_cfg_fail(in->err, in->errlen,
                               "%s:%zu:%zu: YAML syntax error: %s (%s at line %zu)", in->file,
                               p->problem_mark.line + 1, p->problem_mark.column + 1, problem,
                               p->context, p->context_mark.line + 1);
        return lt_cfg_fail(in->err, in->errlen, "%s:%zu:%zu: YAML syntax error: %s", in->file,
                           p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
    }
}

/* Copy a mapping key scalar into buf for lookups; NULs become '?' so a
 * quoted "\0" cannot match a real name. */
static void scalar_text(const yaml_event_t *ev, char *buf, size_t n) {
    size_t len = ev->data.scalar.length;
    if (len >= n)
        len = n - 1;
    for (size_t i = 0; i < len; i++) {
        char ch = (char)ev->data.scalar.value[i];
        buf[i] = ch ? ch : '?';
    }
    buf[len] = '\0';
}

/* An explicit YAML tag on a value must agree with the key's type: `!!str 5`
 * for an integer key is a string in YAML, not the number 5, and is refused
 * (as is any tag outside YAML's core schema); untagged values are read by the
 * key's type. Returns 0 when the tag (or its absence) is acceptable. */
static int check_tag(const KeyDesc *k, const yaml_event_t *ev, const char *dotted,
                     const char *where, char *err, size_t errlen) {
    const char *tag = (const char *)ev->data.scalar.tag;
    if (!tag || !strcmp(tag, "!")) /* "!" is the non-specific tag of a quoted scalar */
        return 0;
    static const char core[] = "tag:yaml.org,2002:";
    const char *want = NULL;
    switch (k->type) {
    case KT_INT:
    case KT_LONG:
    case KT_U64: want = "int"; break;
    case KT_DOUBLE: want = "float"; break;
    case KT_BOOL: want = "bool"; break;
    case KT_STR:
    case KT_ENUM: want = "str"; break;
    }
    if (strncmp(tag, core, sizeof core - 1) == 0) {
        const char *t = tag + sizeof core - 1;
        if (!strcmp(t, want) || (k->type == KT_DOUBLE && !strcmp(t, "int")) ||
            (!strcmp(t, "null") && (k->type == KT_STR || k->type == KT_ENUM)))
            return 0;
        return lt_cfg_fail(err, errlen, "%s: the value is tagged !!%s, but the key takes %s %s%s",
                           dotted, t, !strcmp(want, "int") ? "an" : "a",
                           !strcmp(want, "str") ? "string" : !strcmp(want, "int") ? "integer" : want,
                           where);
    }
    return lt_cfg_fail(err, errlen, "%s: unsupported YAML tag '%s' (write the value untagged)%s",
                       dotted, tag, where);
}

/* Keys that also take a YAML list, stored as one string: data.train_path and
 * data.valid_path take a dataset blend written [W1, PATH1, W2, PATH2, ...]
 * (or [PATH] alone), stored joined by spaces as Megatron's string form, which
 * data/blend.c parses; model.moe_layer_freq and model.window_attn_skip_freq
 * take a pattern [1, 0, 1, 1], stored as the string "[1,0,1,1]"
 * (lt_moe_layer_pattern), model.window_size its pair [128, 0] as "[128,0]";
 * train.rampup_batch_size [START, INCREMENT, SAMPLES] as Megatron's three
 * numbers, "START INCREMENT SAMPLES". */
typedef struct {
    const char *key;
    char sep;
    const char *open, *close; /* around the joined items */
    const char *what;         /* the items, for messages */
    const char *no_space;     /* why an item cannot hold a space */
} ListKey;
static const ListKey LIST_KEYS[] = {
    {"data.train_path", ' ', "", "", "a blend list holds weights and paths",
     "paths in a blend cannot have spaces"},
    {"data.valid_path", ' ', "", "", "a blend list holds weights and paths",
     "paths in a blend cannot have spaces"},
    {"model.moe_layer_freq", ',', "[", "]", "a layer pattern holds 0s and 1s",
     "each item is one 0 or 1"},
    {"model.window_size", ',', "[", "]", "a window holds two numbers", "each item is one number"},
    {"model.window_attn_skip_freq", ',', "[", "]", "a layer pattern holds 0s and 1s",
     "each item is one 0 or 1"},
    {"train.rampup_batch_size", ' ', "", "", "a ramp-up holds three numbers",
     "each item is one number"},
};

static const ListKey *list_key(const char *dotted) {
    for (size_t i = 0; i < sizeof LIST_KEYS / sizeof LIST_KEYS[0]; i++)
        if (!strcmp(dotted, LIST_KEYS[i].key)) return &LIST_KEYS[i];
    return NULL;
}

/* The list's items up to its SEQUENCE-END (its START consumed) into k. */
static int parse_list(YamlIn *in, const KeyDesc *k, const ListKey *lk, const char *where) {
    char joined[LT_PATH_MAX];
    size_t len = strlen(lk->open);
    memcpy(joined, lk->open, len);
    yaml_event_t ev;
    for (int items = 0;; items++) {
        if (next_event(in, &ev))
            return -1;
        if (ev.type == YAML_SEQUENCE_END_EVENT)
            break;
        if (ev.type != YAML_SCALAR_EVENT) {
            const char *kind = node_kind(&ev);
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen, "%s: %s, got %s%s", lk->key, lk->what, kind,
                               where);
        }
        const size_t n = ev.data.scalar.length;
        if (memchr(ev.data.scalar.value, ' ', n) || memchr(ev.data.scalar.value, '\t', n) || !n) {
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen,
                               "%s: a list item is empty or holds a space (%s)%s", lk->key,
                               lk->no_space, where);
        }
        if (len + n + 1 + strlen(lk->close) >= sizeof joined) {
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen, "%s: the list is too long (at most %d "
                               "bytes joined)%s", lk->key, LT_PATH_MAX - 1, where);
        }
        if (items) joined[len++] = lk->sep;
        memcpy(joined + len, ev.data.scalar.value, n);
        len += n;
        yaml_event_delete(&ev);
    }
    yaml_event_delete(&ev);
    memcpy(joined + len, lk->close, strlen(lk->close));
    len += strlen(lk->close);
    return lt_cfg_set_value(in->cfg, k, joined, len, false, where, in->err, in->errlen);
}

/* The next name of a mapping (a section's or a key's) into buf, its line in
 * *line and where: 1; 0 at the mapping's end; -1 with the error "MUST, got
 * <what it got>" when the name is not a scalar. */
static int next_name(YamlIn *in, char *buf, size_t n, size_t *line, char *where, size_t wn,
                     const char *must) {
    yaml_event_t ev;
    if (next_event(in, &ev))
        return -1;
    if (ev.type == YAML_MAPPING_END_EVENT) {
        yaml_event_delete(&ev);
        return 0;
    }
    *line = line_of(&ev);
    lt_cfg_where(where, wn, in->file, *line);
    if (ev.type != YAML_SCALAR_EVENT) {
        const char *kind = node_kind(&ev);
        yaml_event_delete(&ev);
        return lt_cfg_fail(in->err, in->errlen, "%s, got %s%s", must, kind, where);
    }
    scalar_text(&ev, buf, n);
    yaml_event_delete(&ev);
    return 1;
}

/* Keys of one section; the section's MAPPING-START has been consumed. */
static int parse_keys(YamlIn *in, int sec) {
    yaml_event_t ev;
    char key[LT_CFG_NAME_MAX], dotted[2 * LT_CFG_NAME_MAX], where[LT_PATH_MAX + 64];
    char must[LT_CFG_NAME_MAX + 48];
    snprintf(must, sizeof must, "section '%s': keys must be plain names", lt_cfg_sections[sec]);
    for (;;) {
        size_t line;
        const int got = next_name(in, key, sizeof key, &line, where, sizeof where, must);
        if (got <= 0)
            return got;
        snprintf(dotted, sizeof dotted, "%s.%s", lt_cfg_sections[sec], key);
        int ki = lt_cfg_find_key(dotted);
        if (ki < 0)
            return lt_cfg_fail_unknown(in->err, in->errlen, false, dotted, where);
        if (in->key_seen[ki])
            return lt_cfg_fail(in->err, in->errlen, "duplicate key '%s'%s (first set at line %zu)",
                               dotted, where, in->key_line[ki]);
        in->key_seen[ki] = true;
        in->key_line[ki] = line;

        if (next_event(in, &ev))
            return -1;
        lt_cfg_where(where, sizeof where, in->file, line_of(&ev));
        if (ev.type == YAML_SEQUENCE_START_EVENT && list_key(dotted)) {
            yaml_event_delete(&ev);
            if (parse_list(in, &lt_cfg_keys[ki], list_key(dotted), where))
                return -1;
            continue;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            const char *kind = node_kind(&ev);
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen, "%s: expected a single value, got %s%s", dotted,
                               kind, where);
        }
        if (check_tag(&lt_cfg_keys[ki], &ev, dotted, where, in->err, in->errlen)) {
            yaml_event_delete(&ev);
            return -1;
        }
        int rc = lt_cfg_set_value(in->cfg, &lt_cfg_keys[ki], (const char *)ev.data.scalar.value,
                                  ev.data.scalar.length,
                                  ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE, where, in->err,
                                  in->errlen);
        yaml_event_delete(&ev);
        if (rc)
            return -1;
    }
}

/* Sections of the root mapping; its MAPPING-START has been consumed. */
static int parse_sections(YamlIn *in) {
    yaml_event_t ev;
    char name[LT_CFG_NAME_MAX], where[LT_PATH_MAX + 64];
    for (;;) {
        size_t line;
        const int got = next_name(in, name, sizeof name, &line, where, sizeof where,
                                  "section names must be plain words");
        if (got <= 0)
            return got;
        int si = lt_cfg_find_section(name);
        if (si < 0)
            return lt_cfg_fail_unknown(in->err, in->errlen, true, name, where);
        if (in->section_seen[si])
            return lt_cfg_fail(in->err, in->errlen, "duplicate section '%s'%s (first at line %zu)",
                               name, where, in->section_line[si]);
        in->section_seen[si] = true;
        in->section_line[si] = line;

        if (next_event(in, &ev))
            return -1;
        if (ev.type == YAML_MAPPING_START_EVENT) {
            yaml_event_delete(&ev);
            if (parse_keys(in, si))
                return -1;
        } else if (is_null_scalar(&ev)) { /* "train:" with every key commented out */
            yaml_event_delete(&ev);
        } else {
            const char *kind = node_kind(&ev);
            lt_cfg_where(where, sizeof where, in->file, line_of(&ev));
            yaml_event_delete(&ev);
            return lt_cfg_fail(in->err, in->errlen,
                               "section '%s' must be a mapping of keys, got %s%s", name, kind,
                               where);
        }
    }
}

/* The whole stream: nothing, or one document whose root is a mapping (or a
 * plain null, e.g. a file holding only "---"). */
static int parse_stream(YamlIn *in) {
    yaml_event_t ev;
    if (next_event(in, &ev))
        return -1; /* STREAM-START */
    yaml_event_delete(&ev);
    if (next_event(in, &ev))
        return -1;
    bool empty = ev.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&ev); /* STREAM-END or DOCUMENT-START */
    if (empty)
        return 0;

    if (next_event(in, &ev))
        return -1;
    if (ev.type == YAML_MAPPING_START_EVENT) {
        yaml_event_delete(&ev);
        if (parse_sections(in))
            return -1;
    } else if (is_null_scalar(&ev)) {
        yaml_event_delete(&ev);
    } else {
        const char *kind = node_kind(&ev);
        size_t line = line_of(&ev);
        yaml_event_delete(&ev);
        return lt_cfg_fail(
            in->err, in->errlen,
            "%s:%zu: the top level must be a mapping of sections (model, train, ...), "
            "got %s",
            in->file, line, kind);
    }
    if (next_event(in, &ev))
        return -1; /* DOCUMENT-END */
    yaml_event_delete(&ev);
    if (next_event(in, &ev))
        return -1;
    bool more = ev.type != YAML_STREAM_END_EVENT;
    size_t line = line_of(&ev);
    yaml_event_delete(&ev);
    if (more)
        return lt_cfg_fail(in->err, in->errlen, "%s:%zu: only one YAML document is allowed",
                           in->file, line);
    return 0;
}

int lt_cfg_load_yaml(LtConfig *c, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return lt_cfg_fail(err, errlen, "cannot open config file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return lt_cfg_fail(err, errlen, "config file '%s' is a directory", path);
    }
    YamlIn *in = calloc(1, sizeof *in);
    if (!in) {
        fclose(f);
        return lt_cfg_fail(err, errlen, "out of memory reading config file '%s'", path);
    }
    int rc = -1;
    if (!yaml_parser_initialize(&in->parser)) {
        lt_cfg_fail(err, errlen, "out of memory reading config file '%s'", path);
    } else {
        yaml_parser_set_input_file(&in->parser, f);
        in->file = path;
        in->cfg = c;
        in->err = err;
        in->errlen = errlen;
        rc = parse_stream(in);
        yaml_parser_delete(&in->parser);
    }
    free(in);
    fclose(f);
    return rc;
}
