#!/usr/bin/env bash
# `fsdpsim record`'s usage and its run control (no torch needed): exit 3 on bad usage and on a
# command the tracer saw nothing of, exit 4 at the time limit with every process of the run gone,
# and nothing left in TMPDIR on any of these paths.
# Usage: record_usage_test.sh FSDPSIM
set -u
FSDPSIM=$1
export TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/record_usage.XXXXXX")
trap 'rm -rf "$TMPDIR"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/expect_rc.sh"
cd "$TMPDIR" || exit 1
expect_rc 3 "no command" "$FSDPSIM" record --out x.seq
grep -q "record expects the command to run after \`--\`" err.txt || fail "no-command message"
expect_rc 3 "--steps 0" "$FSDPSIM" record --steps 0 -- true
expect_rc 3 "a word before --" "$FSDPSIM" record train.py -- python3 train.py
expect_rc 3 "-- on another command" "$FSDPSIM" scenario -- x
expect_rc 3 "a missing program" "$FSDPSIM" record -- no-such-program-fsdpsim
grep -q "record could not run 'no-such-program-fsdpsim'" err.txt || fail "missing-program message"
expect_rc 3 "nothing traced" "$FSDPSIM" record -- python3 -c "print('hello')"
grep -q "no get_peft_model, no fully_shard" err.txt || fail "nothing-traced message"
grep -q hello err.txt || fail "the command's stdout goes to stderr when the .seq is printed"
start=$(date +%s)
expect_rc 4 "the time limit" "$FSDPSIM" record --seconds 1 -- python3 -c "import time; time.sleep(61.25)"
[ $(( $(date +%s) - start )) -lt 20 ] || fail "the time limit took too long"
grep -q "ran past the 1 s limit" err.txt || fail "time-limit message"
sleep 0.5
pgrep -f "time.sleep\(61.25\)" > /dev/null && fail "a process of the run is left"
left=$(ls -A "$TMPDIR" | grep -v '^out.txt$\|^err.txt$')
[ -z "$left" ] || fail "left in TMPDIR: $left"
echo "record_usage_test: ok"
