#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build of both libFuzzer targets. The engine runs
# it with $CC, $CXX, $CXXFLAGS (the sanitizer and coverage flags it chose),
# $LIB_FUZZING_ENGINE, $SRC (sources: $SRC/fsdpsim), $WORK (scratch) and $OUT
# (where the fuzzers, their .dict, .options and _seed_corpus.zip must land).
# The targets come from the project's own CMake fuzz build (-DFSDPSIM_FUZZ=ON),
# so whatever fuzz/CMakeLists.txt compiles and links is what gets fuzzed;
# FSDPSIM_FUZZ_ENGINE hands it the engine's flags instead of its own sanitizers.
root="$SRC/fsdpsim"
build="$WORK/fsdpsim-fuzz"
# Build type None: only $CXXFLAGS, as the engine chose them.
cmake -S "$root" -B "$build" -DFSDPSIM_FUZZ=ON -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_CXX_FLAGS="$CXXFLAGS" -DFSDPSIM_FUZZ_ENGINE="$LIB_FUZZING_ENGINE"
cmake --build "$build" -j"$(nproc)" --target seq_parser_fuzzer lifecycle_fuzzer
for fuzzer in seq_parser_fuzzer lifecycle_fuzzer; do
  cp "$build/$fuzzer" "$root/fuzz/$fuzzer.dict" "$root/fuzz/$fuzzer.options" "$OUT/"
  rm -f "$OUT/${fuzzer}_seed_corpus.zip"
  (cd "$root/corpus/$fuzzer" && zip -q -r "$OUT/${fuzzer}_seed_corpus.zip" .)
done
