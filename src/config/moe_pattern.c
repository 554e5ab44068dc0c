/* moe_pattern.c - model.moe_layer_freq: which layers are MoE layers
 * (lt_moe_layer_pattern in config.h).
 *
 * Megatron-LM's --moe-layer-freq (arguments.py moe_freq_type, gpt_layer_specs.py)
 * takes an integer k (layer l is MoE iff l % k == 0) or, when the text holds a
 * '[', a Python list expression it evaluates: lists of numbers, '+' between
 * lists (concatenation) or numbers (sum), '*' between a list and a number
 * (repetition) or two numbers, parentheses; the result must hold num_layers
 * entries, each 0 or 1. This file evaluates that grammar without Python:
 *
 *   expr := term ('+' term)*      term := atom ('*' atom)*
 *   atom := NUMBER | '+' atom | '(' expr ')' | '[' [expr (',' expr)* [',']] ']'
 *
 * Values are numbers or lists. Every list is built in place at the end of the
 * output array: a list value is the segment from its start to the current
 * end (evaluation runs left to right, so nothing else is appended between),
 * concatenation is then a no-op and repetition copies the segment. An entry
 * other than 0 or 1 is refused only if it is still there at the end ("[2]*0"
 * is an empty list in Python too). Where lattice differs from Python: it also
 * allows spaces and tabs between tokens (Megatron's character check refuses
 * them), and refuses numbers above 10^9 and lists past LT_MOE_MAX_LAYERS
 * entries on the way, even ones a later "*0" would empty. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"

#define KEY "model.moe_layer_freq"
#define MAX_DEPTH 64          /* nested parentheses and lists */
#define MAX_NUMBER 1000000000 /* numbers and products above this are refused */
#define STR2(x) #x
#define STR(x) STR2(x)

typedef struct {
    const char *text, *p;
    unsigned char *out; /* LT_MOE_MAX_LAYERS entries */
    int len;            /* entries in out */
    int depth;
    char *err;
    size_t errlen;
} Parser;

/* A value: a number n, or the list out[n .. len). */
typedef struct {
    int is_list;
    long long n;
} Value;

static int expr(Parser *P, Value *v);

static int fail_at(Parser *P, const char *what) {
    return lt_cfg_fail(P->err, P->errlen, KEY " '%s': %s at character %d (write an integer k "
                       ">= 1, or a list such as \"[1,0,1,1]\" or \"([0]*3+[1]*29)\")",
                       P->text, what, (int)(P->p - P->text) + 1);
}

static void skip_space(Parser *P) {
    while (*P->p == ' ' || *P->p == '\t') P->p++;
}

/* A decimal number (Python's rule: no leading zero unless all zeros). */
static int number(Parser *P, Value *v) {
    const char *s = P->p;
    long long n = 0;
    while (*P->p >= '0' && *P->p <= '9') {
        n = n * 10 + (*P->p++ - '0');
        if (n > MAX_NUMBER) return fail_at(P, "a number too large");
    }
    if (s[0] == '0' && P->p - s > 1 && n != 0) {
        P->p = s;
        return fail_at(P, "a number with a leading zero");
    }
    *v = (Value){0, n};
    return 0;
}

/* Entries of out that no layer may hold; they are refused only if still
 * there at the end (Python builds "[2]*0" as [] without complaint). */
enum { ENTRY_OTHER_NUMBER = 2, ENTRY_LIST = 3 };

/* Append the entry v written at `at` to out: its 0 or 1, or a marker. */
static int append_entry(Parser *P, const Value *v, const char *at) {
    unsigned char e = v->n == 0 || v->n == 1 ? (unsigned char)v->n : ENTRY_OTHER_NUMBER;
    if (v->is_list) {
        P->len = (int)v->n; /* the nested list's own entries go */
        e = ENTRY_LIST;
    }
    if (P->len >= LT_MOE_MAX_LAYERS) {
        P->p = at;
        return fail_at(P, "more than " STR(LT_MOE_MAX_LAYERS) " entries");
    }
    P->out[P->len++] = e;
    return 0;
}

/* '[' consumed: the entries up to ']' appended to out; v is the list. */
static int list(Parser *P, Value *v) {
    *v = (Value){1, P->len};
    skip_space(P);
    while (*P->p != ']') {
        Value e;
        const char *at = P->p;
        if (expr(P, &e) || append_entry(P, &e, at)) return -1;
        skip_space(P);
        if (*P->p == ',') P->p++, skip_space(P);
        else if (*P->p != ']') return fail_at(P, "expected ',' or ']'");
        else break;
    }
    P->p++;
    return 0;
}

static int atom(Parser *P, Value *v);

/* '+' before a number (Python's unary plus; a list cannot take one). */
static int unary_plus(Parser *P, Value *v) {
    if (++P->depth > MAX_DEPTH) return fail_at(P, "brackets nested too deep");
    P->p++;
    const int rc = atom(P, v);
    P->depth--;
    if (rc == 0 && v->is_list) return fail_at(P, "'+' before a list");
    return rc;
}

static int atom(Parser *P, Value *v) {
    skip_space(P);
    const char c = *P->p;
    if (c >= '0' && c <= '9') return number(P, v);
    if (c == '+') return unary_plus(P, v);
    if (c != '(' && c != '[') return fail_at(P, c ? "expected a number, '(' or '['"
                                                   : "the text ends where a value is expected");
    if (++P->depth > MAX_DEPTH) return fail_at(P, "brackets nested too deep");
    P->p++;
    int rc;
    if (c == '[') {
        rc = list(P, v);
    } else {
        rc = expr(P, v);
        skip_space(P);
        if (!rc && *P->p != ')') rc = fail_at(P, "expected ')'");
        if (!rc) P->p++;
    }
    P->depth--;
    return rc;
}

/* a * b into a: numbers multiply, a list and a number repeat the list. */
static int times(Parser *P, Value *a, const Value *b) {
    if (a->is_list && b->is_list) return fail_at(P, "a list times a list");
    if (!a->is_list && !b->is_list) {
        if (a->n * b->n > MAX_NUMBER) return fail_at(P, "a number too large");
        a->n *= b->n;
        return 0;
    }
    const long long start = a->is_list ? a->n : b->n, reps = a->is_list ? b->n : a->n;
    const long long seg = P->len - start;
    if (seg > 0 && reps > (LT_MOE_MAX_LAYERS - start) / seg)
        return fail_at(P, "a repetition past " STR(LT_MOE_MAX_LAYERS) " entries");
    for (long long r = 1; r < reps; r++)
        memcpy(P->out + start + r * seg, P->out + start, (size_t)seg);
    P->len = (int)(start + seg * reps);
    *a = (Value){1, start};
    return 0;
}

static int term(Parser *P, Value *v) {
    if (atom(P, v)) return -1;
    for (skip_space(P); *P->p == '*'; skip_space(P)) {
        P->p++;
        Value w;
        if (atom(P, &w) || times(P, v, &w)) return -1;
    }
    return 0;
}

static int expr(Parser *P, Value *v) {
    if (term(P, v)) return -1;
    for (skip_space(P); *P->p == '+'; skip_space(P)) {
        P->p++;
        Value w;
        if (term(P, &w)) return -1;
        if (v->is_list != w.is_list) return fail_at(P, "a list plus a number");
        if (!v->is_list && v->n + w.n > MAX_NUMBER) return fail_at(P, "a number too large");
        if (!v->is_list) v->n += w.n; /* two lists: already adjacent in out */
    }
    return 0;
}

/* The integer form, as Python's int() reads it: spaces, an optional sign,
 * digits (leading zeros and single '_' between digits allowed), spaces. Layer
 * l is an MoE layer iff l % k == 0: k 0 is refused (Megatron divides by it),
 * -k means k, and a k past the last layer makes layer 0 alone one. */
static int every_kth(const char *freq, int num_layers, unsigned char *layer, char *err,
                     size_t errlen) {
    Parser P = {.text = freq, .p = freq, .err = err, .errlen = errlen};
    long long k = 0;
    skip_space(&P);
    if (*P.p == '+' || *P.p == '-') P.p++; /* -k: Python's l % -k == 0 as l % k == 0 */
    if (*P.p < '0' || *P.p > '9') return fail_at(&P, "expected an integer k >= 1");
    for (; (*P.p >= '0' && *P.p <= '9') || (*P.p == '_' && P.p[1] >= '0' && P.p[1] <= '9');
         P.p++) {
        if (*P.p == '_') continue;
        k = k * 10 + (*P.p - '0');
        if (k > LT_MOE_MAX_LAYERS) k = LT_MOE_MAX_LAYERS; /* the same layers: 0 only */
    }
    skip_space(&P);
    if (*P.p) return fail_at(&P, "unexpected text after the integer");
    if (k == 0)
        return lt_cfg_fail(err, errlen, KEY " '%s': k must be >= 1 (1: every layer is an MoE "
                           "layer, k: layers 0, k, 2k, ...)", freq);
    for (int l = 0; l < num_layers; l++) layer[l] = l % k == 0;
    return 0;
}

int lt_moe_layer_pattern(const char *freq, int num_layers, unsigned char *layer, char *err,
                         size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) err = dummy, errlen = sizeof dummy;
    if (num_layers < 1 || num_layers > LT_MOE_MAX_LAYERS)
        return lt_cfg_fail(err, errlen, KEY ": model.num_layers (%d) must be in [1, %d] for an "
                           "MoE model", num_layers, LT_MOE_MAX_LAYERS);
    if (!strchr(freq, '[')) return every_kth(freq, num_layers, layer, err, errlen);
    unsigned char out[LT_MOE_MAX_LAYERS];
    Parser P = {.text = freq, .p = freq, .out = out, .err = err, .errlen = errlen};
    Value v;
    if (expr(&P, &v)) return -1;
    if (*P.p) return fail_at(&P, "unexpected text");
    if (!v.is_list) return fail_at(&P, "the expression is a number, not a list");
    if (P.len != num_layers)
        return lt_cfg_fail(err, errlen, KEY " '%s' lists %d layers, but model.num_layers is %d "
                           "(the pattern has one 0 or 1 per layer)", freq, P.len, num_layers);
    for (int l = 0; l < num_layers; l++)
        if (out[l] > 1)
            return lt_cfg_fail(err, errlen, KEY " '%s': the entry of layer %d is %s, not 0 or 1",
                               freq, l, out[l] == ENTRY_LIST ? "a list" : "a number");
    memcpy(layer, out, (size_t)num_layers);
    return 0;
}
