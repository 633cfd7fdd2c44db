#!/usr/bin/env bash
# Runs .clusterfuzzlite/build.sh as ClusterFuzzLite / OSS-Fuzz would: their
# environment variables pointed at the installed clang and libFuzzer, sources
# under $SRC/fsdpsim, then checks that $OUT holds both fuzzers, their .dict,
# .options and _seed_corpus.zip (every seed file in it), and that each fuzzer
# is a working libFuzzer binary (it replays part of its seed corpus).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
ver=$(bash "$root/.ci/clang-version.sh") || { echo "FAIL: no clang with libFuzzer: run bash .ci/install-deps.sh"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/work" "$tmp/out"
ln -s "$root" "$tmp/src/fsdpsim"
export CC="clang-$ver" CXX="clang++-$ver" SRC="$tmp/src" WORK="$tmp/work" OUT="$tmp/out"
# What the address-sanitizer build of OSS-Fuzz sets.
export CFLAGS="-O1 -fno-omit-frame-pointer -gline-tables-only -fsanitize=address -fsanitize-address-use-after-scope -fsanitize=fuzzer-no-link"
export CXXFLAGS="$CFLAGS" LIB_FUZZING_ENGINE="-fsanitize=fuzzer" SANITIZER=address FUZZING_ENGINE=libfuzzer ARCHITECTURE=x86_64
(cd "$SRC/fsdpsim" && bash "$root/.clusterfuzzlite/build.sh") > "$tmp/build.log" 2>&1 ||
  { tail -40 "$tmp/build.log"; echo "FAIL: build.sh failed"; exit 1; }
status=0
for fuzzer in seq_parser_fuzzer lifecycle_fuzzer; do
  for f in "$fuzzer" "$fuzzer.dict" "$fuzzer.options" "${fuzzer}_seed_corpus.zip"; do
    [ -s "$OUT/$f" ] || { echo "FAIL: \$OUT lacks $f"; status=1; }
  done
  [ -x "$OUT/$fuzzer" ] || { echo "FAIL: \$OUT/$fuzzer is not executable"; status=1; continue; }
  # Built with the engine's $CXXFLAGS (ASan for this build).
  nm "$OUT/$fuzzer" | grep -q "__asan_init" || { echo "FAIL: $fuzzer is not built with \$CXXFLAGS' AddressSanitizer"; status=1; }
  grep -q "^dict = $fuzzer.dict$" "$OUT/$fuzzer.options" || { echo "FAIL: $fuzzer.options does not name $fuzzer.dict"; status=1; }
  want=$(find "$root/corpus/$fuzzer" -type f | wc -l)
  got=$(unzip -Z1 "$OUT/${fuzzer}_seed_corpus.zip" | grep -cv '/$')
  [ "$want" = "$got" ] || { echo "FAIL: ${fuzzer}_seed_corpus.zip holds $got files, corpus/$fuzzer has $want"; status=1; }
  mkdir -p "$tmp/seeds/$fuzzer"
  unzip -q "$OUT/${fuzzer}_seed_corpus.zip" -d "$tmp/seeds/$fuzzer"
  ls "$tmp/seeds/$fuzzer" | head -50 | sed "s|^|$tmp/seeds/$fuzzer/|" > "$tmp/list"
  "$OUT/$fuzzer" -dict="$OUT/$fuzzer.dict" -runs=0 $(cat "$tmp/list") > "$tmp/$fuzzer.log" 2>&1 ||
    { tail -20 "$tmp/$fuzzer.log"; echo "FAIL: $fuzzer does not replay its seeds"; status=1; }
  grep -q "INFO: Seed:" "$tmp/$fuzzer.log" || { echo "FAIL: $fuzzer is not a libFuzzer binary"; status=1; }
done
[ $status = 0 ] && echo "ok: \$OUT holds $(ls "$OUT" | tr '\n' ' ')"
exit $status
