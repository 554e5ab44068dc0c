#!/usr/bin/env python3
"""megatron_blend_fixture.py MEGATRON_LM_DIR OUT - the order in which
Megatron-LM's BlendedDataset takes samples, from Megatron's own code, as a
fixture for tests/test_data.c (which holds lattice's blend order to it).

Builds megatron/core/datasets/helpers.cpp (pybind11, as Megatron's Makefile
does) in a temporary directory, normalises each case's weights with
megatron/core/datasets/utils.py's normalize() and calls
build_blending_indices for N samples. Needs g++, numpy and pybind11
(pip install numpy pybind11); the fixture is committed, so the test needs
none of them.

Output: one case per line, "WEIGHTS|N|DATASETS": the raw weights (comma
separated, as written in a blend), the sample count and the dataset index of
every sample as one digit or letter (0-9 then a-z).
"""
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile

CASES = [
    ([0.3, 0.5, 0.2], 5000),
    ([1, 1], 2000),
    ([10, 1, 3], 5000),
    ([0.7, 0.3], 3000),
    ([1, 2, 3, 4, 5, 6, 7], 5000),
    ([0.001, 0.999], 3000),
    ([0.1] * 10, 4000),
    ([969, 30, 1], 5000),
]
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def build_helpers(repo, tmp):
    import pybind11
    src = os.path.join(repo, "megatron", "core", "datasets", "helpers.cpp")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = os.path.join(tmp, "helpers_cpp" + suffix)
    cmd = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-I" + pybind11.get_include(),
           "-I" + sysconfig.get_paths()["include"], src, "-o", out]
    subprocess.run(cmd, check=True)
    sys.path.insert(0, tmp)
    import helpers_cpp
    return helpers_cpp


def load_normalize(repo):
    """normalize() from Megatron's megatron/core/datasets/utils.py, loaded with
    stand-ins for its parent packages (megatron.core.utils imports torch; the
    function itself needs only numpy)."""
    import types
    for name in ("megatron", "megatron.core", "megatron.core.datasets"):
        pkg = types.ModuleType(name)
        pkg.__path__ = []
        sys.modules[name] = pkg
    stub = types.ModuleType("megatron.core.utils")
    stub.log_single_rank = lambda *a, **k: None
    sys.modules["megatron.core.utils"] = stub
    path = os.path.join(repo, "megatron", "core", "datasets", "utils.py")
    spec = importlib.util.spec_from_file_location("megatron.core.datasets.utils", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.normalize


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    repo, out = sys.argv[1], sys.argv[2]
    import numpy
    with tempfile.TemporaryDirectory() as tmp:
        helpers = build_helpers(repo, tmp)
        normalize = load_normalize(repo)
        lines = []
        for weights, n in CASES:
            w = numpy.array(normalize(weights), dtype=numpy.float64)
            dataset_index = numpy.zeros(n, dtype=numpy.int16)
            dataset_sample_index = numpy.zeros(n, dtype=numpy.int64)
            helpers.build_blending_indices(dataset_index, dataset_sample_index, w, len(w), n, False)
            lines.append("%s|%d|%s" % (",".join(repr(x) for x in weights), n,
                                       "".join(DIGITS[i] for i in dataset_index)))
    with open(out, "w") as f:
        f.write("# Megatron-LM BlendedDataset order (tests/megatron_blend_fixture.py)\n")
        for line in lines:
            f.write(line + "\n")
    print(f"wrote {len(lines)} cases to {out}")


if __name__ == "__main__":
    main()
