#!/usr/bin/env bash
# lifecycle_fuzzer_seeds: FUZZER REGRESSIONS_DIR. Runs the fuzzer once over one
# regression file per seed thread and checks that it recognises each seed's
# finding (the `SEED NNN REACHED` lines its time-to-finding figures count).
set -u
fuzzer=$1 dir=$2
declare -A file=(
  [000]=seed000_merged_set_adapter_w2.seq [001]=seed001_ram_efficient_upstream.seq
  [002]=seed002_one_expert_upstream.seq [003]=seed003_save_adapters_upstream.seq
  [004]=seed004_eval_then_save_optimizer.seq)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail=0
for seed in 000 001 002 003 004; do
  "$fuzzer" "$dir/${file[$seed]}" >"$log" 2>&1 || { echo "FAIL: the fuzzer failed on ${file[$seed]}"; tail -20 "$log"; exit 1; }
  if grep -q "^SEED $seed REACHED" "$log"; then
    echo "seed $seed: $(grep "^SEED $seed REACHED" "$log")"
  else
    echo "FAIL: ${file[$seed]} does not count as seed $seed; the fuzzer's findings:"
    grep "^NEW FINDING" "$log" | cut -c1-160
    fail=1
  fi
done
exit $fail
