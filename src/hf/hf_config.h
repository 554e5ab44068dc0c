/* hf_config.h - reading a Hugging Face directory's JSON files for `lattice
 * import` (src/hf/hf_config.c; used by hf_import.c). */
#ifndef LT_HF_CONFIG_H
#define LT_HF_CONFIG_H

#include <stddef.h>

#include "config.h"
#include "json.h"

/* The JSON object in the file at path (at most 64 MiB: config.json, a shard
 * index); NULL with err naming the file. Free with lt_json_free. */
LtJson *lt_hf_read_json(const char *path, char *err, size_t errlen);

/* dir/config.json as the lattice config cfg (defaults, then the model keys it
 * names, each checked to be one lattice computes), then the section.key=value
 * overrides (refused where they change what config.json fixes), validated for
 * one data-parallel replica of the layout. 0, or -1 with err naming the file
 * and the key. */
int lt_hf_read_config(const char *dir, int nover, char **overrides, LtConfig *cfg, char *err,
                      size_t errlen);

#endif
