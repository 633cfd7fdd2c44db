#!/usr/bin/env bash
# The real backend's environment through the CLI (issue 11): `worker` with a
# bad launch variable exits 3 naming it (it died of std::stoi, exit 4, took a
# RANK beyond the world and wrapped MASTER_PORT=99999); FSDPSIM_CRASH_RANK
# empty is unset (it crashed rank 0), not a number is exit 3.
set -u
fsdpsim=$1
seq=$2
fail=0
expect() {  # expected-rc message-fragment -- env assignments... -- command...
  local rc_want=$1 frag=$2
  shift 2
  out=$(env "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$rc_want" ] || ! grep -qF -- "$frag" <<< "$out"; then
    echo "FAIL: $* -> exit $rc (want $rc_want, '$frag'):"
    echo "$out" | head -5
    fail=1
  fi
}
base=(WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555)
expect 3 "<environment>: RANK expects a rank 0..1 (below WORLD_SIZE 2), got 'abc'" "${base[@]}" RANK=abc "$fsdpsim" worker "$seq"
expect 3 "<environment>: RANK expects a rank 0..1 (below WORLD_SIZE 2), got '2'" "${base[@]}" RANK=2 "$fsdpsim" worker "$seq"
expect 3 "<environment>: MASTER_PORT expects a port 1..65535, got '99999'" WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=99999 RANK=0 "$fsdpsim" worker "$seq"
expect 3 "<environment>: RANK is not set" -u RANK "${base[@]}" "$fsdpsim" worker "$seq"
expect 3 "<environment>: WORLD_SIZE is 3 but the file says world 2" WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 RANK=0 "$fsdpsim" worker "$seq"
plain=$("$fsdpsim" run "$seq" --backend real 2>&1)
plain_rc=$?
empty=$(env FSDPSIM_CRASH_RANK= "$fsdpsim" run "$seq" --backend real 2>&1)
if [ "$?" != "$plain_rc" ] || [ "$empty" != "$plain" ]; then echo "FAIL: FSDPSIM_CRASH_RANK= changed the run:"; echo "$empty" | tail -3; fail=1; fi
expect 3 "<environment>: FSDPSIM_CRASH_RANK expects a rank number, got 'x'" FSDPSIM_CRASH_RANK=x "$fsdpsim" run "$seq" --backend real
[ $fail = 0 ] && echo "worker and crash-hook environment checked"
exit $fail
