#!/usr/bin/env bash
# Installs, builds and runs the whole test suite through ctest: the main build
# (labels unit and real), then the clang fuzzing build (label fuzz_smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
cmake -S . -B build-fuzz -DFSDPSIM_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-"$(bash .ci/clang-version.sh)" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-fuzz -j2
ctest --test-dir build-fuzz --output-on-failure
