#!/usr/bin/env python3
"""compare_runs.py REF RUN LOSS_TOL WEIGHT_TOL [--steps N] [--evals N]
compare_runs.py --resumed REF_METRICS RUN_METRICS FIRST LAST TOL

Two training runs of the layout tests agree: the per-step loss and gradient
norm of RUN/m.jsonl within LOSS_TOL (relative) of REF's, the same number of
steps (N, default 10); with --evals N also N evaluation records each; and the
exported weights (RUN/hf/model.safetensors, fp32; without it the
parameters of RUN/ck's newest checkpoint) within WEIGHT_TOL (absolute). With --resumed: a run resumed from a checkpoint logged exactly
steps FIRST..LAST, and each step's loss and gradient norm is within TOL of
the same step of the reference metrics file. Exits 1 with the first
disagreement on stderr."""
import glob
import json
import os
import struct
import sys


def records(d, ev):
    return [r for r in map(json.loads, open(d + '/m.jsonl')) if bool(r.get('eval')) == ev]


def checkpoint_tensors(d):
    """The parameters of RUN/ck's newest step (a model Hugging Face export does
    not take), read as tests/read_state.py reads the format."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import read_state
    step = sorted(glob.glob(d + '/ck/step_*'))[-1]
    found = {}
    for f in read_state.read_meta(step)['files']:
        read_state.read_file(f"{step}/{f['name']}", f['bytes'], f['crc32'], found)
    return {k: t['v'] for k, t in found.items() if not k.startswith('adam_')}


def tensors(d):
    if not os.path.exists(d + '/hf/model.safetensors'):
        return checkpoint_tensors(d)
    raw = open(d + '/hf/model.safetensors', 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k == '__metadata__':
            continue
        s, e = v['data_offsets']
        out[k] = struct.unpack('<%df' % ((e - s) // 4), raw[8 + n + s:8 + n + e])
    return out


def resumed(ref_path, run_path, first, last, tol):
    ref = {r['step']: r for r in map(json.loads, open(ref_path)) if not r.get('eval')}
    got = [r for r in map(json.loads, open(run_path)) if not r.get('eval')]
    assert [r['step'] for r in got] == list(range(first, last + 1)), [r['step'] for r in got]
    for r in got:
        for k in ('loss', 'grad_norm'):
            rel = abs(r[k] - ref[r['step']][k]) / abs(ref[r['step']][k])
            assert rel <= tol, f"step {r['step']} {k}: {r[k]} vs {ref[r['step']][k]}"


def main(argv):
    if argv[1] == '--resumed':
        return resumed(argv[2], argv[3], int(argv[4]), int(argv[5]), float(argv[6]))
    a, b, tol, wtol = argv[1], argv[2], float(argv[3]), float(argv[4])
    opts = dict(zip(argv[5::2], map(int, argv[6::2])))
    steps, evals = opts.get('--steps', 10), opts.get('--evals')
    ra, rb = records(a, False), records(b, False)
    assert len(ra) == len(rb) == steps, ('step records', len(ra), len(rb))
    for x, y in zip(ra, rb):
        for k in ('loss', 'grad_norm'):
            rel = abs(x[k] - y[k]) / max(abs(x[k]), 1e-12)
            assert rel <= tol, f"step {x['step']} {k}: {x[k]} vs {y[k]} (rel {rel:.2e})"
    if evals is not None:
        ea, eb = records(a, True), records(b, True)
        assert len(ea) == len(eb) == evals, ('eval records', len(ea), len(eb))
        for x, y in zip(ea, eb):
            k = 'val_loss' if 'val_loss' in x else 'loss'
            rel = abs(x[k] - y[k]) / abs(x[k])
            assert rel <= tol, f"eval at step {x['step']}: {x[k]} vs {y[k]} (rel {rel:.2e})"
    ta, tb = tensors(a), tensors(b)
    assert ta.keys() == tb.keys(), ('tensor names', sorted(ta.keys() ^ tb.keys()))
    worst = max(max(abs(p - q) for p, q in zip(ta[k], tb[k])) for k in ta)
    assert worst <= wtol, f"exported weights differ by {worst:.3e}"


if __name__ == '__main__':
    try:
        main(sys.argv)
    except AssertionError as e:
        sys.exit(f"runs differ: {e}")
