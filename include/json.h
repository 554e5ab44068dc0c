/* json.h - a small JSON reader for untrusted files (safetensors headers,
 * Hugging Face config.json and model.safetensors.index.json).
 *
 * lt_json_parse builds a tree of the whole text. It is strict RFC 8259 JSON
 * (no comments, trailing commas, NaN or bare words), nests at most
 * LT_JSON_MAX_DEPTH levels, refuses a key that appears twice in one object
 * and any string holding a NUL (\u0000) or an unpaired surrogate. Numbers keep
 * their literal text, so a 64-bit integer (a safetensors data offset) is read
 * exactly (lt_json_u64) and a float as the text says (lt_json_double). */
#ifndef LT_JSON_H
#define LT_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LT_JSON_MAX_DEPTH 64

typedef enum {
    LT_JSON_NULL = 0,
    LT_JSON_BOOL,
    LT_JSON_NUMBER,
    LT_JSON_STRING,
    LT_JSON_ARRAY,
    LT_JSON_OBJECT,
} LtJsonType;

typedef struct LtJson LtJson;
struct LtJson {
    LtJsonType type;
    char *key;      /* the member's name when this value sits in an object, else NULL */
    char *text;     /* STRING: the decoded UTF-8; NUMBER: the literal as written */
    int boolean;    /* BOOL: 0 or 1 */
    LtJson *kids;   /* ARRAY, OBJECT: the elements / members in file order */
    int n;
};

/* Parse text[0, len) (need not be NUL-terminated) as one JSON value with only
 * white space around it. Returns the tree (free with lt_json_free), or NULL
 * with a message naming `what` (a file name) and the byte offset in err. */
LtJson *lt_json_parse(const char *text, size_t len, const char *what, char *err, size_t errlen);
void lt_json_free(LtJson *v);

/* Member `key` of an object; NULL when v is not an object or has no such key. */
const LtJson *lt_json_get(const LtJson *v, const char *key);

/* The value of a NUMBER written as a non-negative integer literal (no sign,
 * fraction or exponent) that fits in 64 bits: 0, or -1 otherwise. */
int lt_json_u64(const LtJson *v, uint64_t *out);
/* Any finite NUMBER as a double: 0, or -1 (not a number, or out of range). */
int lt_json_double(const LtJson *v, double *out);

/* The JSON type's name, for messages ("a string", "an object", ...). */
const char *lt_json_type_name(LtJsonType t);

#ifdef __cplusplus
}
#endif

#endif
