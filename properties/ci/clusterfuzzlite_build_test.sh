#!/usr/bin/env bash
# Runs .clusterfuzzlite/build.sh as ClusterFuzzLite / OSS-Fuzz would: their
# environment variables pointed at the installed clang and libFuzzer, sources
# under $SRC/fsdpsim, then checks that $OUT holds both fuzzers, their .dict,
# .options and _seed_corpus.zip (every seed file in it), and that each fuzzer
# is a working libFuzzer binary (it replays part of its seed corpus). About
# 4 minutes on 2 cores: a job of .github/workflows/ci.yml, not a ctest test.
#
# --no-compile (ctest clusterfuzzlite_files, seconds): the same run of build.sh,
# CMake configuring the engine build for real, but `cmake --build` only checks
# that the targets build.sh asks for exist (cmake_no_compile.sh); then the same
# checks of $OUT but the fuzzers' own (ASan symbols, seed replay), and the
# Dockerfile's CMake against cmake_minimum_required.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
compile=1
[ "${1:-}" = --no-compile ] && compile=0
ver=$(bash "$root/.ci/clang-version.sh") || { echo "FAIL: no clang with libFuzzer: run bash .ci/install-deps.sh"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/work" "$tmp/out" "$tmp/bin"
status=0
if [ $compile = 0 ]; then
  FSDPSIM_REAL_CMAKE=$(command -v cmake) || { echo "FAIL: no cmake"; exit 1; }
  export FSDPSIM_REAL_CMAKE PATH="$tmp/bin:$PATH"
  ln -s "$root/properties/ci/cmake_no_compile.sh" "$tmp/bin/cmake"
fi
# The image's pip CMake must be one CMakeLists.txt accepts (the image is built only by the engine).
need=$(sed -n 's/^cmake_minimum_required(VERSION \([0-9.]*\)).*/\1/p' "$root/CMakeLists.txt")
have=$(grep -o 'cmake==[0-9.]*' "$root/.clusterfuzzlite/Dockerfile" | cut -d= -f3)
[ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" = "$need" ] ||
  { echo "FAIL: .clusterfuzzlite/Dockerfile installs CMake '$have', CMakeLists.txt needs $need"; status=1; }
ln -s "$root" "$tmp/src/fsdpsim"
export CC="clang-$ver" CXX="clang++-$ver" SRC="$tmp/src" WORK="$tmp/work" OUT="$tmp/out"
# What the address-sanitizer build of OSS-Fuzz sets.
export CFLAGS="-O1 -fno-omit-frame-pointer -gline-tables-only -fsanitize=address -fsanitize-address-use-after-scope -fsanitize=fuzzer-no-link"
export CXXFLAGS="$CFLAGS" LIB_FUZZING_ENGINE="-fsanitize=fuzzer" SANITIZER=address FUZZING_ENGINE=libfuzzer ARCHITECTURE=x86_64
# -eu: the engine's compile script runs it as `bash -eux $SRC/build.sh` (a shebang is not read).
(cd "$SRC/fsdpsim" && bash -eu "$root/.clusterfuzzlite/build.sh") > "$tmp/build.log" 2>&1 ||
  { tail -40 "$tmp/build.log"; echo "FAIL: build.sh failed"; exit 1; }
for fuzzer in seq_parser_fuzzer lifecycle_fuzzer; do
  for f in "$fuzzer.dict" "$fuzzer.options" "${fuzzer}_seed_corpus.zip"; do
    [ -s "$OUT/$f" ] || { echo "FAIL: \$OUT lacks $f"; status=1; }
  done
  [ -x "$OUT/$fuzzer" ] || { echo "FAIL: \$OUT/$fuzzer is missing or not executable"; status=1; continue; }
  grep -q "^dict = $fuzzer.dict$" "$OUT/$fuzzer.options" || { echo "FAIL: $fuzzer.options does not name $fuzzer.dict"; status=1; }
  want=$(find "$root/corpus/$fuzzer" -type f | wc -l)
  got=$(unzip -Z1 "$OUT/${fuzzer}_seed_corpus.zip" | grep -cv '/$')
  [ "$want" = "$got" ] || { echo "FAIL: ${fuzzer}_seed_corpus.zip holds $got files, corpus/$fuzzer has $want"; status=1; }
  [ $compile = 1 ] || continue  # the fuzzers are empty files: nothing of theirs to check
  # Built with the engine's $CXXFLAGS (ASan for this build).
  [ -s "$OUT/$fuzzer" ] && nm "$OUT/$fuzzer" | grep -q "__asan_init" ||
    { echo "FAIL: $fuzzer is not built with \$CXXFLAGS' AddressSanitizer"; status=1; }
  mkdir -p "$tmp/seeds/$fuzzer"
  unzip -q "$OUT/${fuzzer}_seed_corpus.zip" -d "$tmp/seeds/$fuzzer"
  ls "$tmp/seeds/$fuzzer" | head -50 | sed "s|^|$tmp/seeds/$fuzzer/|" > "$tmp/list"
  "$OUT/$fuzzer" -dict="$OUT/$fuzzer.dict" -runs=0 $(cat "$tmp/list") > "$tmp/$fuzzer.log" 2>&1 ||
    { tail -20 "$tmp/$fuzzer.log"; echo "FAIL: $fuzzer does not replay its seeds"; status=1; }
  grep -q "INFO: Seed:" "$tmp/$fuzzer.log" || { echo "FAIL: $fuzzer is not a libFuzzer binary"; status=1; }
done
[ $status = 0 ] && echo "ok: \$OUT holds $(ls "$OUT" | tr '\n' ' ')$([ $compile = 1 ] || echo "(fuzzers not compiled: --no-compile)")"
exit $status
