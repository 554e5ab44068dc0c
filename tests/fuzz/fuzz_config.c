/* fuzz_config.c - libFuzzer target for the config loader (src/config/): the
 * input is a YAML file, loaded with no overrides and validated for 1 and 8
 * ranks. */
#include "config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, "c.yaml", data, size);
    for (int world = 1; world <= 8; world *= 8) {
        LtConfig c;
        char err[1024];
        lt_config_defaults(&c);
        if (lt_config_load(&c, path, 0, NULL, err, sizeof err) == 0)
            (void)lt_config_validate(&c, world, err, sizeof err);
    }
    return 0;
}
