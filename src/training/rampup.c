/* rampup.c - batch-size ramp-up (see rampup.h). */
#include "rampup.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "common.h"

#define KEY "train.rampup_batch_size"

/* Three non-negative decimal integers separated by white space; 0 or -1. */
static int parse_three(const char *s, long v[3]) {
    const char *p = s;
    for (int i = 0; i < 3; i++) {
        while (isspace((unsigned char)*p)) p++;
        if (!isdigit((unsigned char)*p)) return -1;
        char *end;
        errno = 0;
        v[i] = strtol(p, &end, 10);
        if (errno || (*end && !isspace((unsigned char)*end))) return -1;
        p = end;
    }
    while (isspace((unsigned char)*p)) p++;
    return *p ? -1 : 0;
}

int lt_rampup_parse(const char *s, long global, LtRampup *r, char *err, size_t errlen) {
    *r = (LtRampup){.global = global};
    const char *p = s;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return 0;
    long v[3];
    if (parse_three(s, v))
        return lt_errorf(err, errlen, KEY " '%s': expected three integers, \"START INCREMENT "
                         "SAMPLES\" (e.g. \"16 16 300000\")", s);
    const long start = v[0], inc = v[1], samples = v[2];
    if (start < 1 || inc < 1 || samples < 1)
        return lt_errorf(err, errlen, KEY " '%s': START (%ld), INCREMENT (%ld) and SAMPLES (%ld) "
                         "must all be positive", s, start, inc, samples);
    if (start >= global)
        return lt_errorf(err, errlen, KEY " '%s': START (%ld) must be below "
                         "train.global_batch_size (%ld), the batch the ramp ends at (without a "
                         "ramp, leave the key empty)", s, start, global);
    if ((global - start) % inc)
        return lt_errorf(err, errlen, KEY " '%s': train.global_batch_size - START = %ld - %ld = "
                         "%ld must be a multiple of INCREMENT (%ld)", s, global, start,
                         global - start, inc);
    *r = (LtRampup){.start = start, .increment = inc, .samples = samples, .global = global};
    return 0;
}

long lt_rampup_batch(const LtRampup *r, uint64_t consumed) {
    if (!r->start || consumed > (uint64_t)r->samples) return r->global;
    /* Megatron's rampup_samples_per_increment and int(consumed / it), in doubles */
    const double per = (double)r->samples / (double)((r->global - r->start) / r->increment);
    return r->start + (long)((double)consumed / per) * r->increment;
}

uint64_t lt_rampup_consumed(const LtRampup *r, long step) {
    uint64_t n = 0;
    long k = 0;
    if (r->start)
        for (; k < step && n <= (uint64_t)r->samples; k++) n += (uint64_t)lt_rampup_batch(r, n);
    return n + (uint64_t)(step - k) * (uint64_t)r->global;
}

long lt_rampup_steps(const LtRampup *r, uint64_t train_samples) {
    uint64_t n = 0;
    long k = 0;
    if (r->start)
        for (; n <= (uint64_t)r->samples && n <= train_samples; k++)
            n += (uint64_t)lt_rampup_batch(r, n);
    if (train_samples > n) k += (long)((train_samples - n) / (uint64_t)r->global);
    return k;
}
