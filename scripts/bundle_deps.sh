#!/usr/bin/env bash
# bundle_deps.sh [--no-blas] [OUT_DIR] - copy the headers, shared libraries and pkg-config
# files of libyaml, zstd, OpenBLAS and Open MPI (plus the libraries they load)
# into OUT_DIR (default build/deps), so a machine that lacks them - such as a
# lent GPU machine with only CUDA - can build and run the full lattice binary:
# the Makefile takes build/deps by itself when pkg-config does not find the
# packages (make DEPS=DIR for another place) and links with an rpath to it.
# The bundle is relocatable and needs no LD_LIBRARY_PATH: every library and
# program in it gets a RUNPATH relative to itself ($ORIGIN, set with
# patchelf), and the pkg-config files name ${pcfiledir}.
# It also carries Open MPI's runtime (mpirun, its plugins and help files) under
# OUT_DIR/ompi, laid out as under the installation prefix, so multi-rank runs
# work there too (tests/gpu/parallel_gpu.sh: several ranks sharing one GPU
# through MPI staging): `. scripts/deps_env.sh OUT_DIR` sets OPAL_PREFIX,
# PMIX_PREFIX and PATH for it (scripts/gpu_check.sh sets them only for the
# commands that run lattice). Plugins for InfiniBand / UCX / OFI / PSM are
# left out (one node, shared memory and TCP).
# --no-blas (first argument) leaves OpenBLAS out (37 of its 54 MB): a machine
# with numpy's wheel has one (the Makefile links numpy.libs' OpenBLAS when the
# bundle has none; kernels/cpu/blas.h).
set -euo pipefail
PKGS="yaml-0.1 libzstd openblas ompi-c"
if [ "${1:-}" = --no-blas ]; then PKGS="yaml-0.1 libzstd ompi-c"; shift; fi
OUT=${1:-build/deps}
command -v pkg-config >/dev/null || { echo "bundle_deps: pkg-config not found" >&2; exit 1; }
if ! command -v patchelf >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bundle_deps: installing patchelf"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null; }
  fi
  command -v patchelf >/dev/null || { echo "bundle_deps: patchelf not found (apt-get install patchelf)" >&2; exit 1; }
fi
for p in $PKGS; do
  pkg-config --exists "$p" || { echo "bundle_deps: $p not installed (scripts/setup.sh)" >&2; exit 1; }
done
rm -rf "$OUT"
mkdir -p "$OUT/include" "$OUT/lib" "$OUT/pkgconfig"
OUT=$(cd "$OUT" && pwd)

# headers: every -I directory of the packages, plus the top-level headers they
# name (MPI: only the C headers at the top; its subfolders serve C++/Fortran)
for p in $PKGS; do
  for dir in $(pkg-config --cflags-only-I "$p" | tr ' ' '\n' | sed -n 's/^-I//p'); do
    if [ "$p" = ompi-c ]; then
      cp -L "$dir"/*.h "$OUT/include/" 2>/dev/null || true
    else
      cp -rL "$dir"/. "$OUT/include/" 2>/dev/null || true
    fi
  done
done
for h in yaml.h zstd.h zstd_errors.h zdict.h; do
  [ -f "/usr/include/$h" ] && cp -L "/usr/include/$h" "$OUT/include/"
done

# libraries: the packages' .so files and everything they load outside libc
libs=""
for p in $PKGS; do
  for name in $(pkg-config --libs-only-l "$p" | tr ' ' '\n' | sed -n 's/^-l//p'); do
    for dir in $(pkg-config --libs-only-L "$p" | tr ' ' '\n' | sed -n 's/^-L//p') \
               /usr/lib/x86_64-linux-gnu /usr/lib; do
      if [ -e "$dir/lib$name.so" ]; then libs="$libs $name:$(readlink -f "$dir/lib$name.so")"; break; fi
    done
  done
done
copy_lib() { # real path -> OUT/lib under its soname and the linker name
  local real=$1 soname base
  soname=$(objdump -p "$real" 2>/dev/null | sed -n 's/^ *SONAME *//p')
  base=$(basename "$real")
  cp -L "$real" "$OUT/lib/$base"
  [ -n "$soname" ] && [ "$soname" != "$base" ] && ln -sf "$base" "$OUT/lib/$soname"
  return 0
}
copy_deps() { # every library FILE loads, outside libc and the compiler's runtime
  local dep
  for dep in $(ldd "$1" | awk '/=> \// {print $3}'); do
    case $(basename "$dep") in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
      *) [ -e "$OUT/lib/$(basename "$dep")" ] || copy_lib "$(readlink -f "$dep")" ;;
    esac
  done
}
for entry in $libs; do
  name=${entry%%:*} real=${entry#*:}
  copy_lib "$real"
  ln -sf "$(basename "$real")" "$OUT/lib/lib$name.so"   # the linker name (-l$name)
  copy_deps "$real"
done

# Open MPI's runtime, relocated with OPAL_PREFIX: the launcher, the plugin and
# data folders at their places relative to the prefix, PMIx's plugins likewise
# (PMIX_PREFIX), and the libraries all of them load.
ompi_path() { ompi_info --path all 2>/dev/null | sed -n "s/^ *$1: //p" | head -1; }
skip_plugin() { # plugins for fabrics a single GPU machine does not have
  ldd "$1" 2>/dev/null | grep -Eq 'lib(uc[mpst]|fabric|psm|infinipath|ibverbs|rdmacm|efa)'
}
if command -v ompi_info >/dev/null && command -v orterun >/dev/null; then
  prefix=$(ompi_path Prefix) pkglib=$(ompi_path Pkglibdir) pkgdata=$(ompi_path Pkgdatadir)
  R=$OUT/ompi
  mkdir -p "$R/bin" "$R${pkglib#$prefix}" "$R${pkgdata#$prefix}"
  for b in orterun orted ompi_info; do cp -L "$(command -v $b)" "$R/bin/"; done
  ln -sf orterun "$R/bin/mpirun"
  cp -rL "$pkgdata"/. "$R${pkgdata#$prefix}/"
  for so in "$pkglib"/*.so; do
    skip_plugin "$so" && continue
    cp -L "$so" "$R${pkglib#$prefix}/"
    copy_deps "$so"
  done
  for b in orterun orted ompi_info; do copy_deps "$(command -v $b)"; done
  # PMIx (Open MPI 4 uses the system's): its plugins under its own prefix
  pmix=$(ldd "$pkglib"/mca_pmix_ext*.so 2>/dev/null | awk '/libpmix/ {print $3; exit}')
  if [ -n "$pmix" ]; then
    copy_lib "$(readlink -f "$pmix")"
    pdir=$(dirname "$(readlink -f "$pmix")")
    if [ -d "$pdir/pmix" ]; then
      mkdir -p "$R/pmix/lib/pmix"
      cp -L "$pdir"/pmix/*.so "$R/pmix/lib/pmix/" 2>/dev/null || true
    fi
    [ -d "$(dirname "$pdir")/share/pmix" ] && mkdir -p "$R/pmix/share" &&
      cp -rL "$(dirname "$pdir")/share/pmix" "$R/pmix/share/"
  fi
else
  echo "bundle_deps: no Open MPI runtime (ompi_info / orterun) found: multi-rank runs" \
       "will need MPI on the target machine" >&2
fi

# RUNPATHs relative to each file, so that the bundle's libraries find each
# other wherever it is unpacked, without LD_LIBRARY_PATH
relpath() { # from DIR to DIR -> a relative path
  python3 -c 'import os, sys; print(os.path.relpath(sys.argv[2], sys.argv[1]))' "$1" "$2" 2>/dev/null ||
    realpath --relative-to="$1" "$2"
}
patched=0
while IFS= read -r f; do
  [ -L "$f" ] && continue
  head -c 4 "$f" | grep -q 'ELF' || continue
  rel=$(relpath "$(dirname "$f")" "$OUT/lib")
  if [ "$rel" = . ]; then patchelf --set-rpath '$ORIGIN' "$f"; else patchelf --set-rpath "\$ORIGIN/$rel" "$f"; fi
  patched=$((patched + 1))
done < <(find "$OUT/lib" "$OUT/ompi" -type f 2>/dev/null)
echo "runpath: $patched files point at their libraries relative to themselves" >"$OUT/relocatable"

# pkg-config files pointing at the bundle, wherever it lies
for p in $PKGS; do
  cat > "$OUT/pkgconfig/$p.pc" <<PC
prefix=\${pcfiledir}/..
Name: $p
Description: $p bundled for lattice
Version: $(pkg-config --modversion "$p")
Cflags: -I\${prefix}/include
Libs: -L\${prefix}/lib $(pkg-config --libs-only-l "$p")
PC
done
echo "bundle_deps: $(du -sh "$OUT" | cut -f1) in $OUT ($(ls "$OUT/lib" | wc -l) library files)"
