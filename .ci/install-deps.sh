#!/usr/bin/env bash
# Installs the Debian packages fsdpsim needs. Idempotent, and quiet when
# everything is already there.
set -euo pipefail
pkgs=(cmake make g++ clang-14 libtorch-dev libgloo-dev librapidcheck-dev libgtest-dev libgmock-dev
      libfmt-dev libboost-graph-dev libfuzzer-14-dev libclang-rt-14-dev graphviz)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
