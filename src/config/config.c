/* config.c - the public entry points of the config module: lt_config_load
 * (defaults, then the YAML file, then the overrides), lt_config_apply_overrides
 * (section.key=value from the command line) and the values derived on demand
 * (padded vocabulary, pipeline layer split). See config.h; the key table is in
 * config_keys.c, the YAML reader in config_yaml.c, value conversion in
 * config_value.c, validation in config_validate.c, printing in
 * config_print.c, and config_internal.h is what they share.
 *
 * Loading works on a private copy of the struct and only copies it back on
 * success, so a failed lt_config_load / lt_config_validate leaves *c as it
 * was. Every string field is zero-filled past its terminator and the struct
 * is memset before defaults are written, so two configs holding the same
 * values compare equal with memcmp. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_internal.h"

/* ---- command-line overrides ---------------------------------------------- */

static int apply_override(LtConfig *c, const char *ov, char *err, size_t errlen) {
    char shown[64], key[LT_CFG_NAME_MAX], where[64];
    const char *eq = strchr(ov, '=');
    size_t klen = eq ? (size_t)(eq - ov) : strlen(ov);
    lt_cfg_show_value(ov, strlen(ov), shown, sizeof shown);
    if (!eq || klen == 0 || !memchr(ov, '.', klen))
        return lt_cfg_fail(err, errlen, "malformed override '%s' (expected section.key=value)",
                           shown);
    lt_cfg_where(where, sizeof where, NULL, 0);
    if (klen >= sizeof key) {
        lt_cfg_show_value(ov, klen, shown, sizeof shown);
        return lt_cfg_fail(err, errlen, "unknown key '%s'%s", shown, where);
    }
    memcpy(key, ov, klen);
    key[klen] = '\0';
    int ki = lt_cfg_find_key(key);
    if (ki < 0)
        return lt_cfg_fail_unknown(err, errlen, false, key, where);
    return lt_cfg_set_value(c, &lt_cfg_keys[ki], eq + 1, strlen(eq + 1), false, where, err,
                            errlen);
}

/* ---- public API ---------------------------------------------------------- */

int lt_config_load(LtConfig *c, const char *path, int nover, char **overrides, char *err,
                   size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    LtConfig *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return lt_cfg_fail(err, errlen, "out of memory loading the configuration");
    lt_config_defaults(tmp);
    int rc = 0;
    if (path)
        rc = lt_cfg_load_yaml(tmp, path, err, errlen);
    if (rc == 0)
        rc = lt_config_apply_overrides(tmp, nover, overrides, err, errlen);
    if (rc == 0)
        memcpy(c, tmp, sizeof *c);
    free(tmp);
    return rc;
}

int lt_config_apply_overrides(LtConfig *c, int nover, char **overrides, char *err, size_t errlen) {
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (nover > 0 && !overrides)
        return lt_cfg_fail(err, errlen, "overrides array is NULL");
    LtConfig *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return lt_cfg_fail(err, errlen, "out of memory loading the configuration");
    memcpy(tmp, c, sizeof *tmp);
    int rc = 0;
    for (int i = 0; rc == 0 && i < nover; i++) {
        if (!overrides[i])
            rc = lt_cfg_fail(err, errlen, "override %d is NULL", i);
        else
            rc = apply_override(tmp, overrides[i], err, errlen);
    }
    if (rc == 0)
        memcpy(c, tmp, sizeof *c);
    free(tmp);
    return rc;
}

long long lt_config_padded_vocab(const LtConfig *c, int tp) {
    const long long mult = (long long)c->model.make_vocab_size_divisible_by * tp;
    return (c->model.vocab_size + mult - 1) / mult * mult;
}

LtLayerSplit lt_config_layer_split(const LtConfig *c) {
    return (LtLayerSplit){.first = c->parallel.num_layers_in_first_pipeline_stage,
                          .last = c->parallel.num_layers_in_last_pipeline_stage,
                          .embedding = c->parallel.account_for_embedding_in_pipeline_split,
                          .loss = c->parallel.account_for_loss_in_pipeline_split};
}
