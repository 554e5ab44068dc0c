#!/usr/bin/env bash
# bundle_deps.sh [OUT_DIR] - copy the headers, shared libraries and pkg-config
# files of libyaml, zstd, OpenBLAS and Open MPI (plus the libraries they load)
# into OUT_DIR (default build/deps), so a machine that lacks them - such as a
# lent GPU machine with only CUDA - can build and run the full lattice binary:
#   scripts/gpu_check.sh picks build/deps up by itself (PKG_CONFIG_PATH and
#   LD_LIBRARY_PATH); elsewhere:
#   PKG_CONFIG_PATH=build/deps/pkgconfig LD_LIBRARY_PATH=build/deps/lib make
# Single-process runs need no MPI runtime (lattice only initializes MPI under
# a launcher), so the MPI plugins are not bundled.
set -euo pipefail
OUT=${1:-build/deps}
PKGS="yaml-0.1 libzstd openblas ompi-c"
command -v pkg-config >/dev/null || { echo "bundle_deps: pkg-config not found" >&2; exit 1; }
for p in $PKGS; do
  pkg-config --exists "$p" || { echo "bundle_deps: $p not installed (scripts/setup.sh)" >&2; exit 1; }
done
rm -rf "$OUT"
mkdir -p "$OUT/include" "$OUT/lib" "$OUT/pkgconfig"
OUT=$(cd "$OUT" && pwd)

# headers: every -I directory of the packages, plus the top-level headers they name
for p in $PKGS; do
  for dir in $(pkg-config --cflags-only-I "$p" | tr ' ' '\n' | sed -n 's/^-I//p'); do
    cp -rL "$dir"/. "$OUT/include/" 2>/dev/null || true
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
for entry in $libs; do
  name=${entry%%:*} real=${entry#*:}
  copy_lib "$real"
  ln -sf "$(basename "$real")" "$OUT/lib/lib$name.so"   # the linker name (-l$name)
  for dep in $(ldd "$real" | awk '/=> \// {print $3}'); do
    case $(basename "$dep") in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
      *) copy_lib "$(readlink -f "$dep")" ;;
    esac
  done
done

# pkg-config files pointing at the bundle
for p in $PKGS; do
  cat > "$OUT/pkgconfig/$p.pc" <<PC
Name: $p
Description: $p bundled for lattice
Version: $(pkg-config --modversion "$p")
Cflags: -I$OUT/include
Libs: -L$OUT/lib $(pkg-config --libs-only-l "$p")
PC
done
echo "bundle_deps: $(du -sh "$OUT" | cut -f1) in $OUT ($(ls "$OUT/lib" | wc -l) library files)"
