#!/usr/bin/env bash
# The three examples/ scripts (label upstream): recording each gives its checked-in .seq byte for
# byte (so the op lists in them are what the scripts do today), and checking the three on the model
# and on upstream gives the findings docs/guide/record.md shows, the two backends agreeing.
# Usage: record_examples_test.sh FSDPSIM SOURCE_DIR
set -u
. "$(dirname "$0")/record_env.sh" "$1" "$2" record_examples
for ex in sft_two_adapters dpo_policy_reference rl_merge_generate; do
  (cd "$SRC" && "$FSDPSIM" record --out "$T/$ex.seq" -- $RUN "examples/$ex.py" > /dev/null 2> "$T/$ex.err") ||
    { cat "$T/$ex.err"; fail "record $ex"; }
  cmp "$T/$ex.seq" "$SRC/examples/$ex.seq" ||
    { diff "$T/$ex.seq" "$SRC/examples/$ex.seq"; fail "examples/$ex.seq is stale: re-record it (docs/guide/record.md)"; }
done
(cd "$SRC" && "$FSDPSIM" check examples/*.seq --backend model,upstream) > "$T/check.out" 2>&1
grep -q '^0 passed, 3 failed expectations, 0 diverged, 0 broken runs, 0 bad input$' "$T/check.out" ||
  { cat "$T/check.out"; fail "the examples' check summary"; }
# Rank 0's findings (where, spec, step), the same on both backends, as the guide shows them.
got=$(grep -o '^  \[[a-z]*\] examples/[a-z_]*\.seq:[0-9]*:1: unexpected finding: S[0-9] step [0-9]* rank 0' "$T/check.out" | sort -u)
want=$(for b in model upstream; do printf "  [$b] examples/%s: unexpected finding: %s rank 0\n" \
  "dpo_policy_reference.seq:20:1" "S3 step 8" "dpo_policy_reference.seq:29:1" "S3 step 17" \
  "dpo_policy_reference.seq:38:1" "S3 step 26" "rl_merge_generate.seq:15:1" "S2 step 4" \
  "rl_merge_generate.seq:15:1" "S3 step 4" "sft_two_adapters.seq:21:1" "S3 step 9"; done | sort -u)
[ "$got" = "$want" ] || { cat "$T/check.out"; fail "the examples' findings differ from the guide's"; }
left_in_tmpdir
echo "record_examples_test: ok"
