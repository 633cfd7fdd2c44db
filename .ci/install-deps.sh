#!/usr/bin/env bash
# Installs what fsdpsim needs: Debian packages (C++ toolchain, gloo headers,
# test libraries, a clang with libFuzzer) and the Python environment in .venv
# (pinned torch, peft, accelerate from real_backend/upstream/requirements.txt),
# whose torch wheel is also the libtorch the C++ real backend links, so CMake
# needs .venv first. Idempotent, and quiet when everything is already there.
# Also chromium (draws the HTML report in its test), python3-yaml and zip
# (the CI-file tests), ccache (the test command reuses objects where it ran before). Works on Debian 12 and 13.
set -euo pipefail
cd "$(dirname "$0")/.."
# `--release SET` (after the rest is installed): the environment of one PEFT release set
# (peft==X[,accelerate==Y,transformers==Z]) in the per-user releases cache ($FSDPSIM_RELEASES_DIR,
# else $XDG_CACHE_HOME/fsdpsim/releases, else ~/.cache/fsdpsim/releases), sharing .venv's torch;
# fsdpsim makes it by itself on first use (--upstream, versions). Prints its Python.
release=""
if [ "${1:-}" = "--release" ]; then
  [ -n "${2:-}" ] || { echo "install-deps: --release expects a set, peft==X[,accelerate==Y,transformers==Z]" >&2; exit 3; }
  release="$2"
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
updated=0
apt_update() { [ $updated -eq 1 ] || { $sudo apt-get update -qq; updated=1; }; }

# The clang whose libFuzzer runtime exists: 14 on Debian 12; Debian 13 ships 19.
clang_ver="$(bash .ci/clang-version.sh 2>/dev/null || true)"
if [ -z "$clang_ver" ]; then
  apt_update
  for v in 14 19 18 17 16 15; do
    if apt-cache show "libclang-rt-$v-dev" >/dev/null 2>&1; then clang_ver=$v; break; fi
  done
fi
# libgloo-dev: headers only. The wheel ships ProcessGroupGloo.hpp, which
# includes <gloo/...>, but not gloo's headers (gloo is compiled into
# libtorch_cpu.so); nothing links Debian's libgloo (docs/guide/install-and-platforms.md).
pkgs=(cmake make g++ libgloo-dev librapidcheck-dev libgtest-dev libgmock-dev
      libfmt-dev libboost-graph-dev graphviz python3-venv
      chromium python3-yaml zip unzip ccache
      "clang-$clang_ver" "libfuzzer-$clang_ver-dev" "libclang-rt-$clang_ver-dev")
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt_update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The upstream backend's virtual environment. torch goes first, from the CPU
# wheel on disk: anything that pulls torch in before it would fetch a CUDA build.
req=real_backend/upstream/requirements.txt
stamp=.venv/.requirements.sha256
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "creating .venv from $req"
  py=python3
  command -v python3.11 >/dev/null 2>&1 && py=python3.11
  "$py" -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "$(grep '^torch==' "$req")" 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/pip install -q --disable-pip-version-check -r "$req" 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c "import torch, peft, accelerate, transformers" \
    || { echo "install-deps: the Python environment in .venv is broken" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
if [ -n "$release" ]; then
  PYTHONPATH=real_backend/upstream exec .venv/bin/python -m fsdpsim_upstream.release_env "$release"
fi
