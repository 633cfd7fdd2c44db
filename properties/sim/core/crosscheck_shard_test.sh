#!/usr/bin/env bash
# crosscheck --shard I/N: the shards of a seed range, merged by merge-results,
# give byte for byte the results file of one unsharded run (2 and 3 shards),
# and their divergent sequences are the unsharded run's.
# Usage: crosscheck_shard_test.sh FSDPSIM
set -u
fsdpsim=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(crosscheck --seed 7100 --count 30 --world 2 --ranks threads)
"$fsdpsim" "${args[@]}" --results "$tmp/whole.json" --out "$tmp/whole" > "$tmp/whole.log" 2>&1
whole_rc=$?
[ "$whole_rc" = 0 ] || [ "$whole_rc" = 2 ] || { cat "$tmp/whole.log"; echo "FAIL: unsharded crosscheck exit $whole_rc"; exit 1; }
grep -q '"findings":{"S' "$tmp/whole.json" || { cat "$tmp/whole.json"; echo "FAIL: no findings in 30 sequences: the comparison would be empty"; exit 1; }
status=0
for n in 2 3; do
  files=()
  for ((i = n - 1; i >= 0; i--)); do  # last shard first: merging does not depend on order
    "$fsdpsim" "${args[@]}" --shard "$i/$n" --results "$tmp/s$i-$n.json" --out "$tmp/div-$n" > "$tmp/s$i-$n.log" 2>&1
    rc=$?
    { [ "$rc" = 0 ] || [ "$rc" = 2 ]; } || { cat "$tmp/s$i-$n.log"; echo "FAIL: shard $i/$n exit $rc"; status=1; }
    grep -q "shard $i/$n" "$tmp/s$i-$n.log" || { echo "FAIL: shard $i/$n does not say which shard it ran"; status=1; }
    files+=("$tmp/s$i-$n.json")
  done
  "$fsdpsim" merge-results "${files[@]}" --results "$tmp/merged-$n.json" > "$tmp/merge-$n.log" 2>&1
  rc=$?
  [ "$rc" = "$whole_rc" ] || { cat "$tmp/merge-$n.log"; echo "FAIL: merge-results of $n shards exit $rc, unsharded run $whole_rc"; status=1; }
  cmp -s "$tmp/merged-$n.json" "$tmp/whole.json" ||
    { echo "FAIL: $n shards merged differ from one run:"; cat "$tmp/merged-$n.json" "$tmp/whole.json"; status=1; }
  [ "$(ls "$tmp/div-$n" 2>/dev/null)" = "$(ls "$tmp/whole" 2>/dev/null)" ] ||
    { echo "FAIL: the divergent sequences of $n shards are not the unsharded run's"; status=1; }
  # A missing shard is bad input, named.
  if [ "$n" = 3 ]; then
    "$fsdpsim" merge-results "$tmp/s0-3.json" "$tmp/s2-3.json" > "$tmp/gap.log" 2>&1
    rc=$?
    [ "$rc" = 3 ] && grep -q "a shard is missing" "$tmp/gap.log" || { cat "$tmp/gap.log"; echo "FAIL: a gap is not exit 3 (got $rc)"; status=1; }
  fi
done
[ $status = 0 ] && echo "ok: 2 and 3 shards merge into the unsharded results: $(cat "$tmp/whole.json")"
exit $status
