#!/usr/bin/env bash
# Prints the version of the installed clang that has a libFuzzer runtime
# (14 on Debian 12, 19 on Debian 13); prints nothing when none is installed.
for v in 14 19 18 17 16 15; do
  if [ -x "/usr/bin/clang++-$v" ] && dpkg-query -W -f='${Status}' "libclang-rt-$v-dev" 2>/dev/null | grep -q "install ok installed"; then
    echo "$v"; exit 0
  fi
done
exit 1
