#!/usr/bin/env bash
# `cmake` for clusterfuzzlite_build_test.sh --no-compile: configuring goes to the
# real CMake ($FSDPSIM_REAL_CMAKE); `cmake --build DIR ... --target T...` only
# checks that DIR's build system defines each T and leaves an empty executable
# file DIR/T in its place, so build.sh's copying and zipping run on real paths.
[ "${1:-}" = --build ] || exec "$FSDPSIM_REAL_CMAKE" "$@"
dir=$2
shift 2
targets=()
while [ $# -gt 0 ]; do
  if [ "$1" = --target ]; then
    shift
    while [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; do targets+=("$1"); shift; done
  else
    shift
  fi
done
[ ${#targets[@]} -gt 0 ] || { echo "cmake_no_compile: build.sh names no --target" >&2; exit 1; }
known=$("$FSDPSIM_REAL_CMAKE" --build "$dir" --target help) || exit 1
for t in "${targets[@]}"; do
  grep -qx "\.\.\. $t" <<<"$known" || { echo "cmake_no_compile: the fuzz build defines no target $t" >&2; exit 1; }
  : > "$dir/$t"
  chmod +x "$dir/$t"
done
