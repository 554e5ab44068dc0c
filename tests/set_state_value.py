#!/usr/bin/env python3
"""set_state_value.py STEP_DIR TENSOR VALUE - write VALUE (a float: nan, inf,
1.5, ...) into the first element of every piece of TENSOR (`adam_m/wte`,
`param/ln_f.weight`, ...) in the state files of a lattice checkpoint step
directory, and recompute the whole chain of CRCs docs/formats.md describes
(block CRC, the records' CRC at offset 32, the header CRC, its copy in
meta.json, meta_crc32), so the checkpoint is intact but for the value: what a
model that had diverged would have saved. Exits 1 when no piece of TENSOR is
found. Written from the format's description, as tests/read_state.py."""
import json
import struct
import sys
import zlib


def set_in_file(path, tensor, value):
    """Rewrite path; returns its new header CRC and how many pieces changed."""
    raw = bytearray(open(path, 'rb').read())
    count, data_start = struct.unpack_from('<IQ', raw, 12)
    hits = 0
    for i in range(count):
        rec = 64 + 256 * i
        if raw[rec:rec + 128].rstrip(b'\0').decode() != tensor:
            continue
        off, nbytes, crc_off, block = struct.unpack_from('<QQQI', raw, rec + 184)
        struct.pack_into('<f', raw, off, value)
        struct.pack_into('<I', raw, crc_off, zlib.crc32(raw[off:off + min(block, nbytes)]))
        hits += 1
    struct.pack_into('<I', raw, 32, zlib.crc32(raw[64:data_start]))
    struct.pack_into('<I', raw, 36, zlib.crc32(raw[:36]))
    open(path, 'wb').write(raw)
    return struct.unpack_from('<I', raw, 36)[0], hits


def main(step_dir, tensor, value):
    meta_path = step_dir + '/meta.json'
    text = open(meta_path).read()
    meta = json.loads(text)
    hits = 0
    for f in meta['files']:
        crc, n = set_in_file(f"{step_dir}/{f['name']}", tensor, value)
        hits += n
        old = f'"name": "{f["name"]}", "tp": {f["tp"]}, "pp": {f["pp"]}, "dp": {f["dp"]}, ' \
              f'"bytes": {f["bytes"]}, "crc32": {f["crc32"]}'
        text = text.replace(old, old[:old.rindex(' ') + 1] + str(crc))
    if hits == 0:
        sys.exit(f'set_state_value: no piece of {tensor} in {step_dir}')
    cut = text.rindex('  "meta_crc32"')
    text = text[:cut] + f'  "meta_crc32": {zlib.crc32(text[:cut].encode())}\n}}\n'
    open(meta_path, 'w').write(text)


if __name__ == '__main__':
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
