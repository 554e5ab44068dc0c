/* fuzz_tokens.c - libFuzzer target for the token-file readers (src/data/data_tokens.c):
 * lattice shards, llm.c .bin files and Megatron .idx/.bin pairs, opened and
 * then read completely (at most 1M tokens), as the loader would.
 *
 * Input: byte 0 selects the format and options, the rest is the file:
 *   bits 0-1: 0 lattice shard (t.ltok), 1 llm.c (t.bin), 2 Megatron pair (m.idx
 *             from the first L bytes, L = the next two bytes little-endian,
 *             m.bin from the rest), 3 like 0;
 *   bit 2:    vocabulary 50257 instead of none (the header's own limit);
 *   bit 3:    lattice: rewrite the header and index CRCs so that mutations
 *             reach the checks behind them. */
#include "data.h"
#include "common.h"
#include "fuzz_util.h"

static void fix_lattice_crcs(uint8_t *d, size_t n) {
    if (n < 64) return;
    uint64_t blocks = 0, off = 0;
    for (int i = 7; i >= 0; i--) blocks = blocks << 8 | d[32 + i];
    for (int i = 7; i >= 0; i--) off = off << 8 | d[40 + i];
    if (off <= n && blocks <= (n - off) / 16) {
        const uint32_t c = lt_crc32(0, d + off, (size_t)(16 * blocks));
        for (int i = 0; i < 4; i++) d[48 + i] = (uint8_t)(c >> (8 * i));
    }
    const uint32_t h = lt_crc32(0, d, 60);
    for (int i = 0; i < 4; i++) d[60 + i] = (uint8_t)(h >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] & 3, vocab = data[0] & 4 ? 50257 : 0;
    data++, size--;
    const char *path;
    if (mode == 2) {
        if (size < 2) return 0;
        size_t L = (size_t)data[0] | (size_t)data[1] << 8;
        data += 2, size -= 2;
        if (L > size) L = size;
        fuzz_file(1, "m.idx", data, L);
        path = fuzz_file(0, "m.bin", data + L, size - L);
    } else if (mode == 1) {
        path = fuzz_file(0, "t.bin", data, size);
    } else {
        uint8_t *copy = malloc(size ? size : 1);
        memcpy(copy, data, size);
        if (data[-1] & 8) fix_lattice_crcs(copy, size);
        path = fuzz_file(0, "t.ltok", copy, size);
        free(copy);
    }
    char err[512];
    LtTokenFile *f = lt_tokens_open(path, vocab, err, sizeof err);
    if (f) {
        enum { CHUNK = 4096, MAX = 1 << 20 };
        static int32_t buf[CHUNK];
        const uint64_t n = lt_tokens_count(f) < MAX ? lt_tokens_count(f) : MAX;
        for (uint64_t pos = 0; pos < n; pos += CHUNK) {
            const uint64_t k = n - pos < CHUNK ? n - pos : CHUNK;
            if (lt_tokens_read(f, pos, k, buf, err, sizeof err) != 0) break;
            for (uint64_t i = 0; i < k; i++)
                if (buf[i] < 0 || (vocab && buf[i] >= vocab)) abort(); /* validated ids only */
        }
        lt_tokens_close(f);
    }
    fuzz_unlink("m.idx"), fuzz_unlink("m.bin"), fuzz_unlink("t.bin"), fuzz_unlink("t.ltok");
    return 0;
}
