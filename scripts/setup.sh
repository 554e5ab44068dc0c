#!/usr/bin/env bash
# setup.sh - make sure the Debian packages lattice needs are present.
#   scripts/setup.sh          install what is missing (apt-get, when run as root)
#   scripts/setup.sh --check  only report; exit 1 when something is missing
set -u
# package : what it provides
PKGS=(
  "gcc:C compiler"
  "make:build"
  "pkg-config:dependency probing"
  "libyaml-dev:YAML config parsing (libyaml)"
  "libzstd-dev:compressed token shards (zstd)"
  "libopenblas-dev:CPU GEMM (OpenBLAS cblas)"
  "libopenmpi-dev:multi-rank runs (OpenMPI)"
  "openmpi-bin:mpirun"
  "sentencepiece:tokenizer training and encoding (spm_train, spm_encode, spm_decode)"
  "python3:data preparation helpers"
  "python3-matplotlib:scripts/plot_metrics.py (plots of a metrics file)"
  "clang:fuzz targets (libFuzzer, tests/fuzz)"
  "libclang-rt-14-dev:clang's sanitizer and libFuzzer runtimes"
)
missing=()
for entry in "${PKGS[@]}"; do
  pkg=${entry%%:*}
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ "${1:-}" = "--check" ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    echo "lattice: missing Debian packages: ${missing[*]}" >&2
    echo "lattice: run 'make deps' as root (or: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  exit 0
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "lattice: missing Debian packages: ${missing[*]}" >&2
  echo "lattice: not root, cannot install them; run: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "lattice: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null || {
  echo "lattice: apt-get install failed for: ${missing[*]}" >&2; exit 1; }
echo "lattice: installed ${missing[*]}"
