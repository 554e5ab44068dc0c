#!/usr/bin/env python3
"""read_state.py [--digest] STEP_DIR - read a lattice checkpoint step directory with
nothing but the format docs/formats.md documents (section "Checkpoints"),
checking every CRC the way it says (zlib's CRC-32), assembling each
global tensor from the pieces of every state file meta.json lists, and print
one line per tensor: name, shape, and the sum of its values (with --digest,
the SHA-256 of its fp32 values instead, padding rows past the vocabulary
left out, so checkpoints of different layouts compare equal). Exits 1 naming
the first inconsistency. Written from the format's description, not from lattice's sources:
it checks that the documentation is enough for another tool."""
import hashlib
import json
import struct
import sys
import zlib


def fail(msg):
    sys.exit(f"read_state: {msg}")


def read_meta(step_dir):
    text = open(step_dir + '/meta.json', 'rb').read()
    cut = text.rindex(b'  "meta_crc32"')
    meta = json.loads(text)
    if zlib.crc32(text[:cut]) != meta['meta_crc32']:
        fail('meta.json CRC')
    # 4 only with an uneven pipeline split, which the layout keys then say
    uneven = (meta.get('num_layers_in_first_pipeline_stage', 0) or
              meta.get('num_layers_in_last_pipeline_stage', 0) or
              meta.get('account_for_embedding_in_pipeline_split', False) or
              meta.get('account_for_loss_in_pipeline_split', False))
    if meta['format_version'] != (4 if uneven else 3):
        fail(f"meta.json format_version {meta['format_version']}")
    return meta


def read_file(path, want_bytes, want_crc, tensors):
    raw = open(path, 'rb').read()
    magic, version, count, data_start, size, table_crc, hdr_crc = struct.unpack_from(
        '<8sIIQQII', raw, 0)
    if magic != b'LTSTATE\0' or version != 3:
        fail(f'{path}: magic {magic!r} version {version}')
    if zlib.crc32(raw[:36]) != hdr_crc or any(raw[40:64]):
        fail(f'{path}: header CRC or reserved bytes')
    if size != len(raw) or size != want_bytes or hdr_crc != want_crc:
        fail(f'{path}: {len(raw)} bytes, header CRC {hdr_crc}; meta.json says {want_bytes}, {want_crc}')
    if zlib.crc32(raw[64:data_start]) != table_crc:
        fail(f'{path}: table CRC')
    for i in range(count):
        rec = raw[64 + 256 * i:64 + 256 * (i + 1)]
        name = rec[:128].rstrip(b'\0').decode()
        dtype, ndim = struct.unpack_from('<II', rec, 128)
        rows, cols, r0, c0, nr, nc = struct.unpack_from('<6q', rec, 136)
        off, nbytes, crc_off, block, nblocks = struct.unpack_from('<QQQII', rec, 184)
        if dtype != 1 or nbytes != 4 * nr * nc or off % 64 or off < data_start or \
                nblocks != (nbytes + block - 1) // block or any(rec[216:]):
            fail(f'{path}: record {name}')
        data = raw[off:off + nbytes]
        crcs = struct.unpack_from('<%dI' % nblocks, raw, crc_off)
        for b in range(nblocks):
            if zlib.crc32(data[b * block:(b + 1) * block]) != crcs[b]:
                fail(f'{path}: tensor {name}: data CRC of block {b}')
        vals = struct.unpack('<%df' % (nr * nc), data)
        shape = (rows, cols) if ndim == 2 else (rows,)
        t = tensors.setdefault(name, {'shape': shape, 'v': [0.0] * (rows * cols),
                                      'seen': bytearray(rows * cols)})
        if t['shape'] != shape:
            fail(f'{name}: shape {shape} in {path}, {t["shape"]} elsewhere')
        for r in range(nr):
            for c in range(nc):
                k = (r0 + r) * cols + c0 + c
                if t['seen'][k]:
                    fail(f'{name}: element ({r0 + r}, {c0 + c}) in two pieces')
                t['seen'][k] = 1
                t['v'][k] = vals[r * nc + c]


def main(step_dir, digest):
    meta = read_meta(step_dir)
    tensors = {}
    for f in meta['files']:
        read_file(f"{step_dir}/{f['name']}", f['bytes'], f['crc32'], tensors)
    for name in sorted(tensors):
        t = tensors[name]
        cols = t['shape'][1] if len(t['shape']) == 2 else 1
        # rows past the true vocabulary (padding) may be absent: they are zero
        padded = name.endswith('/wte') or name.endswith('/lm_head.weight')
        need = meta['vocab_size'] * cols if padded else len(t['seen'])
        if not all(t['seen'][:need]):
            fail(f'{name}: some elements are in no piece')
        if digest:
            rows = meta['vocab_size'] if padded else t['shape'][0]
            h = hashlib.sha256(struct.pack('<%df' % (rows * cols), *t['v'][:rows * cols]))
            print(f"{name} {h.hexdigest()}")
        else:
            print(f"{name} {'x'.join(map(str, t['shape']))} {sum(t['v']):.9g}")
    if not digest:
        print(f"meta step {meta['step']} arch {meta['arch']} "
              f"optimizer_state {str(meta['optimizer_state']).lower()} files {len(meta['files'])}")


if __name__ == '__main__':
    args = sys.argv[1:]
    main(args[-1], '--digest' in args[:-1])
