#!/usr/bin/env bash
# Installs, builds and runs the main job: the hunt over the built-in scenarios
# (catalogue on stdout, progress on stderr, files and summary.json in out/hunt/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target fsdpsim
exec build/fsdpsim "$@"
