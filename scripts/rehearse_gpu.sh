#!/usr/bin/env bash
# rehearse_gpu.sh - rehearse the GPU machine's whole flow on a machine without
# a GPU (make rehearse-gpu), so that a lent GPU's minutes go to the GPU.
#
# The lent GPU machine has no network and no system CUDA libraries: CUDA comes
# from pip wheels (PyTorch 2.11 cu130's: nvidia/cu13, nvidia/cudnn,
# nvidia/nccl under /opt/torch/.venv, whose python3 is first on PATH), and it
# has no MPI, libyaml, zstd or OpenBLAS. This script builds such a machine as
# a Debian chroot: debootstrap (minbase, plus python3, a venv, gcc, g++, make,
# binutils: nvcc needs g++) and, in the venv, the CUDA 13.0 wheels PyTorch 2.11
# pins (cuda-toolkit 13.0.2: runtime, cuBLAS, nvJitLink; cuDNN 9.19, NCCL
# 2.28) plus nvcc and compute-sanitizer of the same release; cuobjdump
# (outside the venv) only inspects the result. Then, as a device call would:
# it bundles build/deps here (scripts/bundle_deps.sh --no-blas: the venv's numpy
# has the BLAS), packs what the device
# tool sends (tracked and untracked-not-ignored files, plus build/deps) and
# checks it is under the tool's 64 MiB, unpacks it at another path inside the
# chroot and runs scripts/gpu_check.sh with every phase, in the device's
# environment. Without a GPU every GPU phase fails; the checks below make
# sure each fails only for that reason and that everything else works:
#   the build (nvcc from the wheel, libraries from the wheels and the bundle),
#   ldd of every binary, --version, mpirun from the bundle (4 ranks of
#   test_comm_mpi), CPU training through numpy's OpenBLAS, no library
#   path exported, SASS sm_80/sm_90 and PTX compute_90 in the binary, the
#   Makefile's probe with the venv off PATH, a phase's own timeout, the
#   budget, and the summary written when the script is stopped.
# Prints PASS/FAIL lines, "N passed, N failed" and a verdict.
#
# Needs root (debootstrap, chroot, mounts in a private mount namespace),
# debootstrap (installed when missing), Debian's mirror as apt uses it here and
# PyPI (pip download), and about 6 GiB under REHEARSE_DIR (default
# .cache/rehearse-gpu: git-ignored, never carried). The chroot and wheels are
# cached there (rebuilt when the package lists below change, or with
# REHEARSE_REBUILD=1). Measured on the 2-core CI machine: see docs/gpu.md.
# Environment: REHEARSE_DIR, REHEARSE_REBUILD=1, REHEARSE_MIRROR (Debian
#   mirror URL; default: the one apt uses here).
# Exit status: 0 when every check passed, 1 otherwise, 2 cannot run.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
CACHE=${REHEARSE_DIR:-$ROOT/.cache/rehearse-gpu}
RFS=$CACHE/rootfs
SUITE=bookworm
BASE_PKGS=python3,python3-venv,gcc,g++,make,binutils,ca-certificates
VENV=/opt/torch/.venv
# PyTorch 2.11.0's CUDA (cuda-toolkit 13.0.2's pins for cudart, cublas,
# nvjitlink; its cuDNN and NCCL), with nvcc (+ crt, nvvm), CCCL (nv/target:
# cuda_fp16.h includes it) and compute-sanitizer of the same toolkit release
WHEELS=(nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.1.0.3 nvidia-nvjitlink==13.0.88
        nvidia-cudnn-cu13==9.19.0.56 nvidia-nccl-cu13==2.28.9
        nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
        nvidia-cuda-cccl==13.0.85 nvidia-cuda-sanitizer-api==13.0.85
        numpy==2.3.5)   # numpy (the image has 2.5.2 for its Python 3.12; bookworm has 3.11): its OpenBLAS is the CPU backend's BLAS
# inspection only (the oldest cuobjdump wheel there is), unpacked outside the venv
TOOLS=(nvidia-cuda-cuobjdump==13.2.51)
DEVROOT=/srv/lattice      # where the carried tree lies (not this checkout's path)
DEV_PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CARRY_LIMIT=$((64 * 1024 * 1024))
T_START=$(date +%s)

log() { echo "rehearse: $*"; }
die() { echo "rehearse: $*" >&2; exit 2; }
secs() { echo $(( $(date +%s) - $1 )); }

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap"
  { apt-get install -y -qq debootstrap || { apt-get update -qq && apt-get install -y -qq debootstrap; }; } \
    >/dev/null 2>&1 || die "cannot install debootstrap"
fi
for t in unshare chroot mount git tar python3; do
  command -v $t >/dev/null || die "$t not found"
done
python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip not found (pip downloads the wheels)"
mkdir -p "$CACHE/wheels" "$CACHE/tools" || die "cannot create $CACHE"
free_kb=$(df -Pk "$CACHE" | awk 'NR == 2 {print $4}')
[ -f "$RFS/.rehearsal-key" ] || [ "${free_kb:-0}" -gt $((6 * 1024 * 1024)) ] ||
  die "about 6 GiB of free disk needed under $CACHE ($((free_kb / 1024)) MiB free)"

# the Debian mirror apt uses here (deb822 .sources or a one-line "deb" entry)
mirror() {
  [ -n "${REHEARSE_MIRROR:-}" ] && { echo "$REHEARSE_MIRROR"; return; }
  local m
  m=$(awk -v s="$SUITE" 'BEGIN { RS = ""; FS = "\n" }
        { u = ""; ok = 0
          for (i = 1; i <= NF; i++) {
            if ($i ~ /^URIs:/) { u = $i; sub(/^URIs: */, "", u); sub(/ .*/, "", u) }
            if ($i ~ /^Suites:/ && (" " $i " ") ~ (" " s " ")) ok = 1 }
          if (ok && u != "") { print u; exit } }' /etc/apt/sources.list.d/*.sources 2>/dev/null)
  [ -z "$m" ] && m=$(grep -hE "^deb +(\[[^]]*\] +)?[a-z]+://[^ ]+ +$SUITE +.*main" \
                       /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
                     sed -E 's/^deb +(\[[^]]*\] +)?//; s/ .*//' | head -1)
  echo "$m"
}

# in_root CMD... : CMD inside the chroot with /proc, /sys, /dev and a fresh
# /dev/shm, in a private mount namespace (the mounts vanish with it), in the
# device's environment
in_root() {
  unshare --mount --propagation private -- bash -c '
    r=$1; shift
    mount -t proc proc "$r/proc" && mount -t sysfs sys "$r/sys" && mount --bind /dev "$r/dev" &&
      mount -t tmpfs -o size=4g shm "$r/dev/shm" || { echo "rehearse: mounts failed" >&2; exit 2; }
    exec chroot "$r" "$@"' bash "$RFS" \
    env -i PATH="$DEV_PATH" HOME=/root LANG=C.UTF-8 OUT=/out TERM=dumb "$@"
}

# ---------------------------------------------------------------- wheels
t0=$(date +%s)
want_wheels() { # dir spec... -> the specs not yet downloaded into dir
  local d=$1 spec name ver
  shift
  for spec in "$@"; do
    name=${spec%%==*} ver=${spec#*==}
    ls "$d/${name//-/_}-$ver-"*.whl >/dev/null 2>&1 || echo "$spec"
  done
}
for pair in "wheels:${WHEELS[*]}" "tools:${TOOLS[*]}"; do
  d=$CACHE/${pair%%:*}
  # shellcheck disable=SC2046
  missing=$(want_wheels "$d" ${pair#*:})
  if [ -n "$missing" ]; then
    log "downloading wheels into $d: $(echo $missing)"
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$d" $missing ||
      die "pip download failed"
  fi
done
log "wheels ready ($(du -sh "$CACHE/wheels" | cut -f1)) in $(secs $t0) s"

# ---------------------------------------------------------------- chroot
# two cached stages: the Debian system (debootstrap), then the venv's wheels
t0=$(date +%s)
BASE_KEY=$(echo "v1 $SUITE $BASE_PKGS" | cksum | cut -d' ' -f1)
KEY=$(echo "v1 $BASE_KEY ${WHEELS[*]} ${TOOLS[*]} $VENV" | cksum | cut -d' ' -f1)
[ "${REHEARSE_REBUILD:-0}" = 1 ] && rm -f "$RFS/.base-key"
if [ "$(cat "$RFS/.base-key" 2>/dev/null)" != "$BASE_KEY" ]; then
  M=$(mirror)
  [ -n "$M" ] || die "no Debian mirror for $SUITE in apt's sources here (set REHEARSE_MIRROR)"
  log "building the chroot: debootstrap $SUITE (minbase + $BASE_PKGS) from $M"
  rm -rf "$RFS"
  debootstrap --variant=minbase --include="$BASE_PKGS" "$SUITE" "$RFS" "$M" \
    >"$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log"; die "debootstrap failed"; }
  rm -rf "$RFS"/var/cache/apt/archives/*.deb
  echo "$BASE_KEY" >"$RFS/.base-key"
  log "Debian $SUITE chroot built in $(secs $t0) s"
fi
if [ "$(cat "$RFS/.rehearsal-key" 2>/dev/null)" != "$KEY" ]; then
  t1=$(date +%s)
  log "the CUDA wheels into $VENV"
  rm -rf "$RFS/tmp/wheels" "$RFS$VENV" "$RFS/opt/inspect" && mkdir -p "$RFS/tmp/wheels" &&
    cp "$CACHE"/wheels/*.whl "$RFS/tmp/wheels/" || die "copying the wheels failed"
  in_root python3 -m venv "$VENV" || die "python3 -m venv failed"
  in_root bash -c "$VENV/bin/pip install -q --no-index --no-deps --no-compile \
    --disable-pip-version-check /tmp/wheels/*.whl" || die "pip install of the wheels failed"
  rm -rf "$RFS/tmp/wheels"
  mkdir -p "$RFS/opt/inspect/bin"
  python3 - "$RFS/opt/inspect/bin" "$CACHE"/tools/*.whl <<'PY' || die "unpacking cuobjdump failed"
import os, sys, zipfile
out = sys.argv[1]
for w in sys.argv[2:]:
    z = zipfile.ZipFile(w)
    for n in z.namelist():
        if n.endswith('/bin/cuobjdump'):
            p = os.path.join(out, 'cuobjdump')
            open(p, 'wb').write(z.read(n))
            os.chmod(p, 0o755)
PY
  echo "$KEY" >"$RFS/.rehearsal-key"
  log "wheels installed in $(secs $t1) s"
fi
log "chroot ready: $RFS ($(du -sh "$RFS" | cut -f1)) in $(secs $t0) s"

# ---------------------------------------------------------------- what travels
t0=$(date +%s)
log "bundling build/deps here (scripts/bundle_deps.sh)"
scripts/setup.sh >/dev/null || die "scripts/setup.sh failed (the bundle needs the Debian packages here)"
scripts/bundle_deps.sh --no-blas build/deps >"$CACHE/bundle.log" 2>&1 || { cat "$CACHE/bundle.log"; die "bundle_deps.sh failed"; }
PAYLOAD=$CACHE/payload.tar
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
  [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"
done >"$CACHE/files.list"
tar --null -T "$CACHE/files.list" -cf "$PAYLOAD" && tar -rf "$PAYLOAD" build/deps || die "packing failed"
TREE_BYTES=$(xargs -0 stat -L -c %s -- <"$CACHE/files.list" 2>/dev/null | awk '{s += $1} END {print s + 0}')
DEPS_BYTES=$(du -sb build/deps | cut -f1)
CARRIED=$((TREE_BYTES + DEPS_BYTES))
log "payload: tree $((TREE_BYTES / 1024)) KiB + build/deps $((DEPS_BYTES / 1024 / 1024)) MiB = $((CARRIED / 1024 / 1024)) MiB (limit 64 MiB) in $(secs $t0) s"
rm -rf "${RFS:?}$DEVROOT" "$RFS/out" && mkdir -p "$RFS$DEVROOT" "$RFS/out" &&
  tar -xf "$PAYLOAD" -C "$RFS$DEVROOT" || die "unpacking into the chroot failed"

# ---------------------------------------------------------------- the device call
log "running scripts/gpu_check.sh in the chroot (every phase; the build under its timeout)"
t0=$(date +%s)
# this 2-core machine builds far slower than the device's 16 cores: the build's
# own limit is raised and the budget left off here (both are checked below)
in_root bash -c "cd $DEVROOT && GPU_CHECK_PHASES=all GPU_CHECK_BUILD_TIMEOUT=1800 GPU_CHECK_BUDGET=0 \
  scripts/gpu_check.sh /out/report.txt" >"$CACHE/gpu_check.out" 2>&1
GC_RC=$?
GC_SECS=$(secs $t0)
cp "$RFS/out/report.txt" "$CACHE/report.txt" 2>/dev/null
log "gpu_check.sh exit status $GC_RC after $GC_SECS s; report: $CACHE/report.txt"

# ---------------------------------------------------------------- checks
log "checks"
cat >"$RFS/tmp/checks.sh" <<'CHECKS'
# run inside the chroot, in the device's environment, from the carried tree
cd "$1" || exit 2
VENV=$2 R=/out/report.txt W=build/gpu_check
passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
check() { # name why cmd...
  local n=$1 why=$2; shift 2
  if "$@" >/dev/null 2>&1; then pass "$n"; else fail "$n" "$why"; fi
}
summary_has() { sed -n '/^== summary/,$p' "$R" | grep -Eq "$1"; }

# the machine mirrors the GPU image
check image_no_system_deps "pkg-config, mpirun, yaml.h, zstd.h, libopenblas or libmpi present" \
  bash -c '! command -v pkg-config && ! command -v mpirun && [ ! -e /usr/include/yaml.h ] &&
           [ ! -e /usr/include/zstd.h ] && ! ls /usr/lib/x86_64-linux-gnu/libopenblas* /usr/lib/x86_64-linux-gnu/libmpi* /usr/lib/x86_64-linux-gnu/libyaml*'
check image_no_system_cuda "a CUDA library or nvcc outside the venv" \
  bash -c '[ ! -e /usr/local/cuda ] && ! ls /usr/lib/x86_64-linux-gnu/libcudart* && [ "$(command -v nvcc)" = "" ]'
check image_python_is_venv "python3 on PATH is not the venv's" test "$(command -v python3)" = "$VENV/bin/python3"

# gpu_check's build, from the wheels and the bundle
check build_ok "the build phase did not pass (see the report)" summary_has '^build +ok'
check probe_nvcc_from_wheel "make did not take nvcc from the wheel" \
  grep -q "^lattice: CUDA backend: yes; nvcc $VENV/.*/nvidia/cu13/bin/nvcc (13.0) from pip wheels" "$R"
for l in cudart cublasLt cublas cudnn nccl; do
  check "probe_lib$l" "lib$l not taken from the wheels" grep -Eq "^lattice: lib$l: $VENV/.*/nvidia/[a-z0-9]+/lib/lib$l\.so\.[0-9]+$" "$R"
done
check probe_cccl "CCCL's nv/target not taken from the wheel" \
  grep -Eq "^lattice: CCCL headers \(nv/target\): $VENV/.*/nvidia/cu13/include" "$R"
check probe_deps_from_bundle "libyaml/zstd/MPI not taken from the bundle, or BLAS not from the venv's numpy" \
  grep -Eq "^lattice: yaml-0.1 libzstd openblas ompi-c: from the bundle $PWD/build/deps, BLAS from numpy \\($VENV/.*/numpy.libs/libscipy_openblas64_" "$R"
for b in build/lattice build/tests/gpu/test_gpu_ops build/tests/gpu/bench_attention build/tests/gpu/bench_kernels build/tests/test_comm_mpi \
         build/deps/ompi/bin/orterun build/deps/ompi/bin/orted; do
  check "ldd_$(basename "$b")" "$(ldd "$b" 2>&1 | grep -m3 'not found' | tr '\n' ' ')" \
    bash -c "[ -x $b ] && ldd $b && ! ldd $b | grep -q 'not found'"
done
# (cuBLASLt and cuBLAS are not linked: opened on first use; --version below
# opens them and names the files)
check ldd_cuda_from_venv "a CUDA library of build/lattice resolves outside the venv" \
  bash -c "[ \$(ldd build/lattice | grep -E 'lib(cudart|cudnn|nccl)\.so' | grep -c '$VENV/') = 3 ]"
check ldd_cublas_not_linked "build/lattice links cuBLAS (its start-up cost in every process)" \
  bash -c "! ldd build/lattice | grep -q 'libcublas'"
check ldd_deps_from_bundle "a bundled library of build/lattice resolves outside build/deps" \
  bash -c "[ \$(ldd build/lattice | grep -E 'lib(yaml-0|zstd|mpi)\.so' | grep -c '$PWD/build/deps/lib/') = 3 ]"
check ldd_blas_from_numpy "build/lattice's BLAS does not resolve to the venv's numpy" \
  bash -c "ldd build/lattice | grep -E 'libscipy_openblas64_' | grep -q '$VENV/'"
build/lattice --version >/tmp/version.txt 2>&1; rc=$?
sed 's/^/  | /' /tmp/version.txt
check version_runs "exit status $rc" test $rc = 0
for w in "cudart|cuda libraries loaded: cudart 13.0 ($VENV/" "cublasLt|cuBLASLt 13.1.0 ($VENV/" \
         "cudnn|cuDNN 9.19.0 ($VENV/" "nccl|NCCL 2.28.9 ($VENV/" "targets|SASS sm_90, PTX compute_90" \
         "driver|cuda driver: none"; do
  check "version_${w%%|*}" "--version lacks '${w#*|}'" grep -qF "${w#*|}" /tmp/version.txt
done
if [ -x /opt/inspect/bin/cuobjdump ]; then
  /opt/inspect/bin/cuobjdump --list-elf build/lattice >/tmp/elf.txt 2>&1
  /opt/inspect/bin/cuobjdump --list-ptx build/lattice >/tmp/ptx.txt 2>&1
  echo "  | cuobjdump: $(grep -c 'sm_80' /tmp/elf.txt) sm_80 and $(grep -c 'sm_90' /tmp/elf.txt) sm_90 ELF images;" \
       "$(grep -c 'sm_90' /tmp/ptx.txt) sm_90 and $(grep -c 'sm_80' /tmp/ptx.txt) sm_80 PTX files"
  check fatbin_sass "no sm_90 SASS in build/lattice (or sm_80: gpu_check builds for the device's Hopper only)" bash -c '! grep -q sm_80 /tmp/elf.txt && grep -q sm_90 /tmp/elf.txt'
  check fatbin_ptx "PTX: not compute_90 alone" bash -c 'grep -q sm_90 /tmp/ptx.txt && ! grep -q sm_80 /tmp/ptx.txt'
else
  fail fatbin "cuobjdump missing in the chroot"
fi

# library paths stay out of the script's own environment
check no_ld_library_path "gpu_check exported LD_LIBRARY_PATH, or set it for lattice's commands" \
  bash -c "grep -q 'LD_LIBRARY_PATH here: unset' $R && ! grep '^environment of lattice' $R | cut -d';' -f1 | grep -q LD_LIBRARY_PATH"

# each phase fails only for want of a GPU
loader='error while loading shared libraries|cannot open shared object|symbol lookup error|undefined symbol|command not found'
check no_loader_errors "$(grep -lE "$loader" $W/*.log 2>/dev/null | tr '\n' ' ')" bash -c "! grep -qE '$loader' $W/*.log"
check phase_mpi "4 ranks of test_comm_mpi under the bundle's mpirun did not pass" summary_has '^mpi +ok'
check phase_tests_no_gpu "test_gpu_ops did not fail with no_cuda_device alone" \
  bash -c "grep -q '^FAIL no_cuda_device' $W/tests.log && [ \$(grep -c '^FAIL' $W/tests.log) = 1 ] && grep -q '0 CUDA device(s), compiled=1' $W/tests.log"
for t in memcheck racecheck; do
  check "phase_${t}_ran" "compute-sanitizer not found, or $t did not run test_gpu_ops" \
    bash -c "[ -s $W/$t.log ] && ! grep -q 'compute-sanitizer not found' $R"
done
check phase_attention_no_gpu "bench_attention did not stop for want of a GPU" grep -qiE 'no usable CUDA device|no CUDA device' $W/attention.log
check phase_kernels_no_gpu "bench_kernels did not stop for want of a GPU" grep -qiE 'no usable CUDA device|no CUDA device' $W/kernels.log
check phase_train_cpu_runs "train_compare.sh's CPU runs did not train (numpy's OpenBLAS at run time)" \
  bash -c "grep -q 'cpu-fp32: backend' $W/train.log && grep -q 'cpu-bf16: backend' $W/train.log"
check phase_train_no_gpu "train_compare.sh's CUDA runs failed for another reason" \
  bash -c "[ \$(grep '^FAIL' $W/train.log | grep -vc 'no CUDA device is visible') = 0 ] && grep -q '^FAIL run_tiny-cuda-fp32' $W/train.log"
check phase_parallel_no_gpu "parallel_gpu.sh did not get as far as looking for a GPU" grep -q 'FAIL setup: no GPU visible' $W/parallel.log
check phase_bench_no_gpu "bench.sh did not make its shard (python3 + lattice shard) or failed for another reason" \
  bash -c "grep -q 'making data/bench/random' $W/bench.log && grep -q 'no CUDA device is visible' $W/bench.log"
check report_summary "no summary with every phase" \
  bash -c "for p in build tests train attention moe memcheck bench bench15 racecheck mpi kernels parallel peer calibrate; do sed -n '/^== summary/,\$p' $R | grep -q \"^\$p \" || exit 1; done"

# the Makefile's probe also finds the wheels with Debian's python3 first on PATH
# (all five libraries: cudart, cuBLASLt, cuBLAS, cuDNN, NCCL)
p=$(PATH=/usr/bin:/bin make -s --no-print-directory print-CUDA_LIB_FILES 2>/dev/null | tail -1)
check probe_without_venv_on_path "found: $p" bash -c "[ \$(echo '$p' | tr ' ' '\n' | grep -c '^$VENV/') = 5 ]"
p=$(PATH=/usr/bin:/bin make -s --no-print-directory print-CUDA_LIB_FILES CUDA_WHEELS=$(dirname $(dirname $(ls -d $VENV/lib/python3*/site-packages/nvidia/cu13)))/nvidia 2>/dev/null | tail -1)
check probe_cuda_wheels "CUDA_WHEELS=...: found: $p" bash -c "[ \$(echo '$p' | tr ' ' '\n' | grep -c '^$VENV/') = 5 ]"

# ... and with a wheel's nvcc on PATH (through a link, as an image may put it)
mkdir -p /tmp/pathbin && ln -sf "$(ls $VENV/lib/python3*/site-packages/nvidia/cu13/bin/nvcc)" /tmp/pathbin/nvcc
p=$(PATH=/tmp/pathbin:/usr/bin:/bin make -s --no-print-directory print-CUDA_LIB_FILES 2>/dev/null | tail -1)
check probe_nvcc_link_on_path "found: $p" bash -c "[ \$(echo '$p' | tr ' ' '\n' | grep -c '^$VENV/') = 5 ]"

# CCCL's headers missing from the wheels: make says so, gpu_check finds a copy
# elsewhere and builds with it (make -n here: the real build would be the same)
inc=$(ls -d $VENV/lib/python3*/site-packages/nvidia/cu13/include)
mkdir -p /opt/cccl-copy && mv "$inc/nv" "$inc/cccl" /opt/cccl-copy/
# (make's output goes through a file: it holds quotes, e.g. "logging.trace's")
make -n gpu-build > /out/cccl.txt 2>&1
check cccl_missing_named "make did not name the missing CCCL headers" \
  bash -c "grep -q 'CCCL headers (nv/target): NOT FOUND' /out/cccl.txt && grep -q 'a CUDA library or header is missing' /out/cccl.txt"
rm -f /out/c.txt
GPU_CHECK_MAKE_ARGS=-n GPU_CHECK_PHASES=mpi GPU_CHECK_BUDGET=0 scripts/gpu_check.sh /out/c.txt >/dev/null 2>&1
check cccl_found_elsewhere "gpu_check did not build again with the copy in /opt/cccl-copy" \
  bash -c "grep -q 'building again with CUDA_CCCL=/opt/cccl-copy' /out/c.txt && grep -q '^lattice: CCCL headers (nv/target): /opt/cccl-copy' /out/c.txt && grep -q '^build  *ok' /out/c.txt"
mv /opt/cccl-copy/nv /opt/cccl-copy/cccl "$inc/" && rmdir /opt/cccl-copy

# a phase over its own timeout is stopped (with its processes), the next runs
# (train_compare.sh made long: 100000 CPU steps)
rm -f /out/t.txt
TRAIN_COMPARE_STEPS=100000 GPU_CHECK_PHASES=train,parallel GPU_CHECK_CAP=5 GPU_CHECK_BUDGET=0 \
  scripts/gpu_check.sh /out/t.txt >/dev/null 2>&1
check phase_timeout "train not TIMED OUT, or parallel not run after it" \
  bash -c "sed -n '/^== summary/,\$p' /out/t.txt | grep -q '^train .*TIMED OUT' && sed -n '/^== summary/,\$p' /out/t.txt | grep -q '^parallel .*FAILED'"
sleep 12   # timeout's SIGKILL follows 10 s after its SIGTERM
left=$(for p in /proc/[0-9]*; do readlink "$p/exe"; done 2>/dev/null | grep -c "^$PWD/build/")
check phase_timeout_stops_processes "$left lattice processes left running" test "$left" = 0

# the budget: a phase gets what is left of it (less 15 s for the summary), one
# that would get less than its least useful time is not started
rm -f /out/b.txt
t0=$(date +%s)
TRAIN_COMPARE_STEPS=100000 GPU_CHECK_PHASES=train,parallel GPU_CHECK_BUDGET=100 \
  scripts/gpu_check.sh /out/b.txt >/dev/null 2>&1
check budget "the budget did not cut train short and hold back parallel (or took over 100 s)" \
  bash -c "sed -n '/^== summary/,\$p' /out/b.txt | grep -q '^train .*TIMED OUT' &&
           sed -n '/^== summary/,\$p' /out/b.txt | grep -q '^parallel .*NOT RUN (budget' && [ \$(( \$(date +%s) - $t0 )) -le 100 ]"

# stopped from outside: the summary is still written
rm -f /out/s.txt
GPU_CHECK_PHASES=train GPU_CHECK_BUDGET=0 scripts/gpu_check.sh /out/s.txt >/dev/null 2>&1 &
gc=$!
for i in $(seq 1 120); do grep -q '^== train' /out/s.txt 2>/dev/null && break; sleep 0.5; done
sleep 1; kill -TERM $gc; wait $gc
check stopped_writes_summary "no summary after SIGTERM" \
  bash -c "grep -q '^train .*INTERRUPTED' /out/s.txt && grep -q '^RESULT' /out/s.txt"

# the one-call plan: every phase's expected time within the budget
GPU_CHECK_DRY=1 scripts/gpu_check.sh /out/plan.txt >/out/plan.out 2>&1; rc=$?
sed 's/^/  | /' /out/plan.out
check plan_fits_budget "the first call's expected phase times exceed its budget" test $rc = 0

# continue: the phases an earlier run finished are left out, the build kept
printf 'tests\ntrain\n' >$W/done
rm -f /out/c2.txt
GPU_CHECK_PHASES=continue GPU_CHECK_CAP=5 GPU_CHECK_BUDGET=0 scripts/gpu_check.sh /out/c2.txt >/dev/null 2>&1
check continue_skips_done "continue ran a finished phase, skipped none, or rebuilt" \
  bash -c "grep -q '^phases: attention moe memcheck bench bench15 calibrate parallel kernels mpi peer racecheck;' /out/c2.txt &&
           grep -q '^== build: skipped' /out/c2.txt && ! grep -q '^== tests' /out/c2.txt"

echo "$passed passed, $failed failed"
[ $failed = 0 ]
CHECKS
in_root bash /tmp/checks.sh "$DEVROOT" "$VENV" | tee "$CACHE/checks.out"
CK_RC=${PIPESTATUS[0]}

# host side: what travels fits the device tool's limit
if [ "$CARRIED" -le "$CARRY_LIMIT" ]; then echo "PASS carry_size ($((CARRIED / 1024 / 1024)) MiB <= 64 MiB)"
else echo "FAIL carry_size: $((CARRIED / 1024 / 1024)) MiB > 64 MiB"; CK_RC=1; fi

build_secs=$(sed -n 's/^RESULT build *ok (\([0-9]*\) s)$/\1/p' "$CACHE/report.txt" | head -1)
echo ""
echo "== rehearsal =="
echo "gpu_check.sh (all phases) took $GC_SECS s here, the build ${build_secs:-?} s of it (2 shared cores; the device has 16)"
sed -n '/^== summary/,$p' "$CACHE/report.txt" | sed 's/^/  /'
echo "disk: $(du -sh "$CACHE" | cut -f1) in $CACHE; total time $(secs "$T_START") s"
if [ "$CK_RC" = 0 ]; then
  echo "VERDICT: READY - the GPU flow ran as far as it can without a GPU; every GPU phase failed only for want of one"
  exit 0
fi
echo "VERDICT: NOT READY - see the FAIL lines above, $CACHE/report.txt and $RFS$DEVROOT/build/gpu_check/*.log"
exit 1
