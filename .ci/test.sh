#!/usr/bin/env bash
# Installs, builds and runs the whole test suite through ctest: the main build
# (labels unit and real), the sanitizer build (ASan + UBSan, label unit: parser,
# model, spec, simulator, CLI with the bad-input corpus, the corpus replay),
# then the clang fuzzing build (label fuzz_smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFSDPSIM_SANITIZE=ON >/dev/null
cmake --build build-asan -j2  # every target: `-L unit` below runs each unit-labelled test binary
# Any report fails the test it ran in (halt_on_error; exit code 99 is no code of ours).
ASAN_OPTIONS=halt_on_error=1:exitcode=99:detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=99 \
  ctest --test-dir build-asan -L unit --output-on-failure -j2
cmake -S . -B build-fuzz -DFSDPSIM_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-"$(bash .ci/clang-version.sh)" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-fuzz -j2
ctest --test-dir build-fuzz --output-on-failure
