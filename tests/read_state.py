#!/usr/bin/env python3
"""read_state.py STEP_DIR - read a lattice checkpoint step directory with
nothing but the format the README documents (section "The checkpoint
format"), checking every CRC the way it says (zlib's CRC-32), and print one
line per tensor: name, shape, and the sum of its values. Exits 1 naming the
first inconsistency. Written from the README, not from src/checkpoint.c: it
checks that the documentation is enough for another tool."""
import json
import struct
import sys
import zlib


def fail(msg):
    sys.exit(f"read_state: {msg}")


def main(step_dir):
    raw = open(step_dir + '/state.lt', 'rb').read()
    magic, version, count, data_start, size, table_crc, hdr_crc = struct.unpack_from(
        '<8sIIQQII', raw, 0)
    if magic != b'LTSTATE\0' or version != 2:
        fail(f'magic {magic!r} version {version}')
    if zlib.crc32(raw[:36]) != hdr_crc or any(raw[40:64]):
        fail('header CRC or reserved bytes')
    if size != len(raw):
        fail(f'file is {len(raw)} bytes, header says {size}')
    table = raw[64:64 + 192 * count]
    if zlib.crc32(table) != table_crc:
        fail('record table CRC')
    out = []
    for i in range(count):
        rec = table[192 * i:192 * (i + 1)]
        name = rec[:128].rstrip(b'\0').decode()
        dtype, ndim = struct.unpack_from('<II', rec, 128)
        shape = struct.unpack_from('<4q', rec, 136)[:ndim]
        off, nbytes, crc = struct.unpack_from('<QQI', rec, 168)
        n = 1
        for d in shape:
            n *= d
        if dtype != 1 or nbytes != 4 * n or off % 64 or off < data_start:
            fail(f'record {name}: dtype {dtype}, {nbytes} bytes for shape {shape}, offset {off}')
        data = raw[off:off + nbytes]
        if zlib.crc32(data) != crc:
            fail(f'tensor {name}: data CRC')
        vals = struct.unpack('<%df' % n, data)
        out.append((name, shape, sum(vals)))
    text = open(step_dir + '/meta.json', 'rb').read()
    cut = text.rindex(b'  "meta_crc32"')
    meta = json.loads(text)
    if zlib.crc32(text[:cut]) != meta['meta_crc32']:
        fail('meta.json CRC')
    for name, shape, s in out:
        print(f"{name} {'x'.join(map(str, shape))} {s:.9g}")
    print(f"meta step {meta['step']} arch {meta.get('arch', 'gpt')} "
          f"optimizer_state {str(meta['optimizer_state']).lower()}")


if __name__ == '__main__':
    main(sys.argv[1])
