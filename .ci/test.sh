#!/usr/bin/env bash
# Installs, builds and runs the whole test suite through ctest: the main build
# (labels unit, real and upstream), the sanitizer build (ASan + UBSan, label
# unit: parser, model, spec, simulator, CLI with the bad-input corpus, the corpus
# replay), then the clang fuzzing build (label fuzz_smoke). ClusterFuzzLite's
# image build runs in its own job of .github/workflows/ci.yml, not here.
#
# Order (docs/testing.md, "Test tiers"): the
# sanitizer and fuzzing trees build at nice 19 while the main ctest runs; the
# tests keep the CPU whenever they want it. Each phase's wall
# time is printed in one table at the end, also when a phase fails.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=()      # "name|seconds|status", in the order they ended
phase=""       # the foreground phase running now
start=0
bg=""          # the background builds' process group (setsid), while they run
bg_log=build/asan-fuzz-build.log
bg_times=build/phase-times.txt
begin() { phase=$1; start=$SECONDS; }
end() { phases+=("$phase|$((SECONDS - start))|ok"); phase=""; }
table() {
  local rc=$1 total=$SECONDS line
  [ -n "$phase" ] && phases+=("$phase|$((SECONDS - start))|FAILED (exit $rc)")
  echo
  row "phase" "seconds" "m:ss" "status"
  for line in "${phases[@]}"; do
    row_of "$line"
    # The background builds ran from the end of "build main" on.
    if [ "${line%%|*}" = "build main" ] && [ -f "$bg_times" ]; then
      while IFS= read -r line; do row_of "$line"; done < "$bg_times"
    fi
  done
  row_of "total (wall)|$total|$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")"
}
row() { printf '%-34s %8s %7s  %s\n' "$@"; }
row_of() {
  local name secs status
  IFS='|' read -r name secs status <<<"$1"
  row "$name" "$secs" "$((secs / 60)):$(printf %02d $((secs % 60)))" "$status"
}
test_tmp=""   # the tests' private TMPDIR, from "ctest main" on
# What the tests left in their TMPDIR, named (two levels deep): the test command fails on any.
tmpdir_left() {
  local left
  left=$(cd "$1" && find . -mindepth 1 -maxdepth 2 | sed 's|^\./||' | sort | head -40)
  [ -z "$left" ] && return 0
  echo "the tests left in their TMPDIR ($1), which was empty when they began:" >&2
  echo "$left" | sed 's/^/  /' >&2
  return 1
}
on_exit() {
  local rc=$?
  # A failure while the background builds run: stop them (their own process group).
  [ -n "$bg" ] && { kill -TERM -- "-$bg" 2>/dev/null || true; wait "$bg" 2>/dev/null || true; }
  [ -n "$test_tmp" ] && rm -rf "$test_tmp"
  table "$rc"
  rm -f "$bg_times"
  exit "$rc"
}
trap on_exit EXIT
rm -f "$bg_times"

begin "install"
bash .ci/install-deps.sh
FSDPSIM_CLANG="clang++-$(bash .ci/clang-version.sh)"
end

# ccache where it is installed (install-deps installs it): a machine that ran this command before
# gets its objects back in all three trees whatever directory the clone is in (base_dir: the clone's
# root; no hash of the build directory, which -g1 in the sanitizer tree would otherwise add). A
# fresh machine pays only ccache's own bookkeeping. CMAKE_CXX_COMPILER_LAUNCHER set by the caller wins.
FSDPSIM_LAUNCHER=""
if command -v ccache >/dev/null 2>&1 && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
  FSDPSIM_LAUNCHER="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  ccache --zero-stats >/dev/null 2>&1 || true
fi

begin "build main"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release $FSDPSIM_LAUNCHER >/dev/null
cmake --build build -j2
end

# The sanitizer tree builds only what `ctest -L unit` runs there (target unit_tests:
# fsdpsim and the unit test binaries, not the real backend's test binaries),
# then the fuzzing tree; each records its wall time for the table.
side_builds() {
  set -euo pipefail
  cur="" s=0
  trap '[ -z "$cur" ] || echo "$cur (beside ctest main)|$((SECONDS - s))|FAILED" >> "$bg_times"' EXIT
  trap 'echo "$cur (beside ctest main)|$((SECONDS - s))|stopped (a phase failed)" >> "$bg_times"; cur=""; exit 143' TERM
  cur="build asan" s=$SECONDS
  # -O1 -g1 (line tables for the reports): a third of -O2 -g's compile time under the sanitizers
  # (sim/core/simulator.cpp: 12 s against 36 s), which made this build the test command's longest path
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DFSDPSIM_SANITIZE=ON $FSDPSIM_LAUNCHER >/dev/null
  cmake --build build-asan -j2 --target unit_tests
  echo "$cur (beside ctest main)|$((SECONDS - s))|ok" >> "$bg_times"
  cur="build fuzz" s=$SECONDS
  cmake -S . -B build-fuzz -DFSDPSIM_FUZZ=ON -DCMAKE_CXX_COMPILER="$FSDPSIM_CLANG" -DCMAKE_BUILD_TYPE=Release $FSDPSIM_LAUNCHER >/dev/null
  cmake --build build-fuzz -j2
  echo "$cur (beside ctest main)|$((SECONDS - s))|ok" >> "$bg_times"
  cur=""
}
export -f side_builds
export FSDPSIM_CLANG bg_times FSDPSIM_LAUNCHER
setsid nice -n 19 bash -c side_builds > "$bg_log" 2>&1 &
bg=$!

# Every test runs under a fresh private TMPDIR (the builds beside them keep the caller's); the
# command ends by checking the tests left it as empty as they found it (docs/testing.md).
test_tmp=$(mktemp -d "${TMPDIR:-/tmp}/fsdpsim-tests-XXXXXX")
export TMPDIR=$test_tmp

begin "ctest main"
# Every label but `slow` (the docs/findings repros, candidate patches and `hunt --scripts` under torchrun,
# about 45 minutes of the 2 cores: the nightly workflow's `slow-tests` job and `ctest -L slow` run them).
ctest --test-dir build --output-on-failure -j2 -LE slow
end

begin "wait for the asan, fuzz builds"
wait "$bg" || { rc=$?; bg=""; tail -60 "$bg_log"; echo "the sanitizer or fuzzing build failed (whole log: $bg_log)" >&2; exit "$rc"; }
bg=""
end

begin "ctest asan"
# Any report fails the test it ran in (halt_on_error; exit code 99 is no code of ours).
ASAN_OPTIONS=halt_on_error=1:exitcode=99:detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=99 \
  ctest --test-dir build-asan -L unit --output-on-failure -j2
end

begin "ctest fuzz"
ctest --test-dir build-fuzz --output-on-failure
end

begin "nothing left in TMPDIR"
tmpdir_left "$test_tmp"
end
[ -n "$FSDPSIM_LAUNCHER" ] && ccache --show-stats 2>/dev/null | grep -E '^ *(Hits|Misses):' | sed 's/^ */ccache: /' || true
