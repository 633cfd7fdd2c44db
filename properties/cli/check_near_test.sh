#!/usr/bin/env bash
# `fsdpsim check FILE --near K` (sim/cli/cmd_check_near.cpp). Model only (label unit): the exact
# classes and edit lines of examples/sft_two_adapters.seq one edit away, the same bytes twice, the
# --json records against the schema, exit 3 on a bad K or an option --near does not take, nothing
# left in TMPDIR. With `upstream` (label upstream): each class confirmed there.
# Usage: check_near_test.sh FSDPSIM SOURCE_DIR [upstream]
set -u
FSDPSIM=$1
SRC=$2
MODE=${3:-model}
[ "$MODE" = upstream ] && { [ -x "$SRC/.venv/bin/python" ] || exit 77; }
export TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/check_near.XXXXXX")
trap 'rm -rf "$TMPDIR"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect_rc.sh"
cd "$SRC" || exit 1
OUT=$TMPDIR/run
mkdir -p "$OUT"
if [ "$MODE" = upstream ]; then
  "$FSDPSIM" check examples/sft_two_adapters.seq --near 1 --backend model,upstream > "$OUT/up.txt" 2> "$OUT/up.err"
  [ $? = 1 ] || { cat "$OUT/up.txt" "$OUT/up.err"; fail "upstream run: exit not 1"; }
  [ "$(grep -c '  confirmed$' "$OUT/up.txt")" = 3 ] || { cat "$OUT/up.txt"; fail "not every class confirmed on upstream"; }
  grep -q 'near: 93/93 model, 3/3 upstream' "$OUT/up.err" || { cat "$OUT/up.err"; fail "no progress line"; }
  left=$(ls -A "$TMPDIR" | grep -v '^run$')
  [ -z "$left" ] || fail "left in TMPDIR: $left"
  echo "check_near_test upstream: ok"
  exit 0
fi

want='near examples/sft_two_adapters.seq: 14 ops, world 2, upstream; within 1 edit: 93 sequences, 0 refused by the .seq rules, 93 run on the model
now: 1 class; 2 more within 1 edit (model only: --backend model,upstream confirms them)
class                        edits  finding at                                                    sequences
S3 flag-on-copy/set_adapter  now    op 9 `train_step` (examples/sft_two_adapters.py:45,46,47,48)  64
S3 rank-divergent-op         1      op 9 `train_step` (examples/sft_two_adapters.py:45,46,47,48)  6
S5 rank-divergent-op         1      op 3 `train_step` (examples/sft_two_adapters.py:45,46,47,48)  26
- run `set_adapter task_a` at examples/sft_two_adapters.py:43 (op 1) on rank 0 only leads to S3 rank-divergent-op at op 9 `train_step` (examples/sft_two_adapters.py:45,46,47,48)
- run `train_step` at examples/sft_two_adapters.py:45,46,47,48 (op 2) on rank 0 only leads to S5 rank-divergent-op at op 3 `train_step` (examples/sft_two_adapters.py:45,46,47,48)
- remove `eval` at examples/sft_two_adapters.py:51 (op 7) leaves no finding (12 of the 93 sequences have none)'
"$FSDPSIM" check examples/sft_two_adapters.seq --near 1 --backend model > "$OUT/a.txt" 2> /dev/null
[ $? = 1 ] || fail "a file with findings near it: exit not 1"
[ "$(cat "$OUT/a.txt")" = "$want" ] || { diff <(echo "$want") "$OUT/a.txt"; fail "output differs"; }
"$FSDPSIM" check examples/sft_two_adapters.seq --near 1 > "$OUT/b.txt" 2> /dev/null
cmp -s "$OUT/a.txt" "$OUT/b.txt" || fail "two runs differ"

"$FSDPSIM" check examples/sft_two_adapters.seq --near 1 --json > "$OUT/j.json" 2> /dev/null
python3 "$SRC/properties/cli/json_schema_check.py" "$SRC/docs/cli-json.schema.json" "$OUT/j.json" || fail "--json against the schema"
[ "$(grep -c '"type":"near_class"' "$OUT/j.json")" = 3 ] || fail "not 3 near_class records"
grep -q '"edit_lines":\["examples/sft_two_adapters.py:43"\]' "$OUT/j.json" || fail "no edit line 43 in --json"
grep -q '"type":"near_summary","file":"examples/sft_two_adapters.seq","k":1,"ops":14,"sequences":93,"refused":0,"clean":12,"classes_now":1,"classes_near":2,"first_clean":\["remove `eval` at examples/sft_two_adapters.py:51 (op 7)"\]' "$OUT/j.json" || fail "near_summary"

cd "$OUT" || exit 1
S=$SRC/examples/sft_two_adapters.seq
expect_rc 3 "--near 0" "$FSDPSIM" check "$S" --near 0
expect_rc 3 "--near 3" "$FSDPSIM" check "$S" --near 3
grep -q -- "--near" err.txt || fail "--near 3 message"
expect_rc 3 "--near x" "$FSDPSIM" check "$S" --near x
expect_rc 3 "two files" "$FSDPSIM" check "$S" "$S" --near 1
grep -q "check --near K takes one .seq file, got 2" err.txt || fail "two-files message"
expect_rc 3 "--junit" "$FSDPSIM" check "$S" --near 1 --junit j.xml
grep -q "does not write --junit" err.txt || fail "--junit message"
expect_rc 3 "--backend upstream" "$FSDPSIM" check "$S" --near 1 --backend upstream
grep -q "explores on the model" err.txt || fail "--backend upstream message"
printf 'world 2\nlayer l 4 4\nadapter a r=2 alpha=2 targets=l\n---\nforward\nbogus_op\n' > bad.seq
expect_rc 3 "a bad file" "$FSDPSIM" check bad.seq --near 1
grep -q "bad.seq:6:1" err.txt || { cat err.txt; fail "bad file: no file:line:column"; }
left=$(ls -A "$TMPDIR" | grep -v '^run$')
[ -z "$left" ] || fail "left in TMPDIR: $left"
echo "check_near_test: ok"
