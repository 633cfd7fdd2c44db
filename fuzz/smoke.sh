#!/usr/bin/env bash
# fuzz_smoke: FUZZER SEED_CORPUS DICT. Fuzzes for 10 s from the seed corpus into
# a scratch corpus, then replays every crash artifact kept in SEED_CORPUS_crashes/.
set -u
fuzzer=$1 seeds=$2 dict=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The target's .options as flags (entropic=0 triples lifecycle_fuzzer's speed).
opts=$(sed -n 's/^\([a-z_]*\) = \(.*\)$/-\1=\2/p' "${dict%.dict}.options" | grep -v '^-dict=')
"$fuzzer" $opts -max_total_time=10 -dict="$dict" -artifact_prefix="$scratch/" "$scratch" "$seeds" 2>"$scratch/log" || {
  tail -40 "$scratch/log"; echo "FAIL: $(basename "$fuzzer") crashed; artifact: $(ls "$scratch"/crash-* 2>/dev/null | head -1)"; exit 1; }
grep -E "^Done|stat::number_of_executed_units|#[0-9]+.*DONE" "$scratch/log" | tail -2
crashes="${seeds}_crashes"
if [ -d "$crashes" ] && [ -n "$(ls -A "$crashes" 2>/dev/null)" ]; then
  for a in "$crashes"/*; do
    "$fuzzer" "$a" >/dev/null 2>&1 || { echo "FAIL: kept crash artifact $a crashes again"; exit 1; }
  done
fi
echo "$(basename "$fuzzer"): 10 s clean"
