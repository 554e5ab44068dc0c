# deps_env.sh [DEPS_DIR] - source it (". scripts/deps_env.sh build/deps") to use
# the libraries and the Open MPI runtime that scripts/bundle_deps.sh bundled:
# pkg-config files and mpirun (relocated with OPAL_PREFIX, its PMIx plugins
# with PMIX_PREFIX). The libraries need no LD_LIBRARY_PATH (RUNPATHs relative
# to themselves; lattice links with an rpath to them); only a bundle made
# before that (no DEPS_DIR/relocatable) gets it. It changes nothing that
# other programs load, so a script may source it for itself;
# scripts/gpu_check.sh still sets it only for the commands that run lattice.
_lt_deps=${1:-${LT_DEPS:-build/deps}}
if [ -d "$_lt_deps/lib" ]; then
  _lt_deps=$(cd "$_lt_deps" && pwd)
  export PKG_CONFIG_PATH="$_lt_deps/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  [ -f "$_lt_deps/relocatable" ] ||
    export LD_LIBRARY_PATH="$_lt_deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [ -x "$_lt_deps/ompi/bin/orterun" ]; then
    export OPAL_PREFIX="$_lt_deps/ompi" PATH="$_lt_deps/ompi/bin:$PATH"
    [ -d "$_lt_deps/ompi/pmix" ] && export PMIX_PREFIX="$_lt_deps/ompi/pmix"
    # no ssh/rsh: Open MPI's default launcher would refuse even local ranks
    command -v ssh >/dev/null 2>&1 || command -v rsh >/dev/null 2>&1 || export OMPI_MCA_plm=isolated
  fi
else
  echo "deps_env.sh: no bundle at $_lt_deps (scripts/bundle_deps.sh makes one)" >&2
fi
unset _lt_deps
