/* config_print.c - lt_config_print: the config as YAML that lt_config_load
 * reads back to the same struct. See config.h. */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "config_internal.h"

/* Length of a well-formed UTF-8 sequence at s and its code point; 0 if not. */
static int utf8_decode(const unsigned char *s, uint32_t *cp) {
    int len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || s[0] > 0xF4)
        return 0;
    uint32_t v = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

/* A YAML double-quoted scalar that reads back byte-identical for any valid
 * UTF-8 string: quotes, backslashes, control characters and the characters
 * YAML treats as line breaks or forbids raw are escaped. (Bytes that are not
 * valid UTF-8 are written raw; a YAML reader will then refuse the file rather
 * than silently load a different path.) */
static void print_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned char ch = *p;
        if (ch < 0x80) {
            if (ch == '"' || ch == '\\')
                fprintf(f, "\\%c", ch);
            else if (ch == '\n')
                fputs("\\n", f);
            else if (ch == '\t')
                fputs("\\t", f);
            else if (ch < 0x20 || ch == 0x7F)
                fprintf(f, "\\x%02x", ch);
            else
                fputc(ch, f);
            p++;
            continue;
        }
        uint32_t cp = 0;
        int len = utf8_decode(p, &cp);
        if (len == 0) {
            fputc(ch, f);
            p++;
        } else if (cp <= 0x9F) {
            fprintf(f, "\\x%02x", (unsigned)cp);
            p += len;
        } else if (cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF || cp == 0xFFFE || cp == 0xFFFF) {
            fprintf(f, "\\u%04x", (unsigned)cp);
            p += len;
        } else {
            fwrite(p, 1, (size_t)len, f);
            p += len;
        }
    }
    fputc('"', f);
}

void lt_config_print(const LtConfig *c, FILE *f) {
    const char *section = NULL;
    char num[64];
    fprintf(f, "# lattice configuration\n");
    for (int i = 0; i < lt_cfg_nkeys; i++) {
        const KeyDesc *k = &lt_cfg_keys[i];
        if (!section || strcmp(section, k->section) != 0) {
            section = k->section;
            fprintf(f, "%s:\n", section);
        }
        fprintf(f, "  %s: ", k->name);
        const void *v = lt_cfg_cfield(c, k);
        switch (k->type) {
        case KT_INT: fprintf(f, "%d", *(const int *)v); break;
        case KT_LONG: fprintf(f, "%ld", *(const long *)v); break;
        case KT_U64: fprintf(f, "%" PRIu64, *(const uint64_t *)v); break;
        case KT_DOUBLE:
            lt_format_double(*(const double *)v, num, sizeof num);
            fputs(num, f);
            break;
        case KT_BOOL: fputs(*(const bool *)v ? "true" : "false", f); break;
        case KT_ENUM: {
            int e = *(const int *)v;
            fputs(e >= 0 && e < lt_cfg_enum_count(k->enums) ? k->enums[e] : "?", f);
            break;
        }
        case KT_STR: print_quoted(f, (const char *)v); break;
        }
        fputc('\n', f);
        if (k->off == offsetof(LtConfig, model.make_vocab_size_divisible_by) &&
            c->model.padded_vocab_size > 0)
            fprintf(f, "  # padded_vocab_size: %d (derived, not a key)\n",
                    c->model.padded_vocab_size);
    }
}
