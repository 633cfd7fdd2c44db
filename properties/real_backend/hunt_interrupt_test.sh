#!/usr/bin/env bash
# SIGINT and SIGTERM to a `fsdpsim hunt` while it confirms on the real backend
# and upstream (issue 54, item 1): fsdpsim must signal only its own children.
# It once ended in kill(0, SIGKILL) (a pool's table entry zeroed by the thread
# that reaped it, read by the signal handler in between), killing its whole
# process group: the calling shell and everything beside it. Each try runs the
# hunt from a shell, in a process group of its own, beside a sibling `sleep`;
# the signal goes to fsdpsim at a different moment of the confirmation each
# time. Asserts, every try: the shell and the sibling survive, the exit code is
# 130 (SIGINT) or 143 (SIGTERM), the partial catalogue was printed, and no
# process of the run and nothing in TMPDIR is left.
#   hunt_interrupt_test.sh FSDPSIM [TRIES]
set -u
fsdpsim=$1
tries=${2:-8}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$root/.venv/bin/python" ] || exit 77  # upstream confirmation needs .venv
work=$(mktemp -d)
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"
callers=""
cleanup() {
  for p in $callers; do kill -KILL -- "-$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL (try $try, --seconds $secs, SIG$sig +$delay s after triage): $*"; fail=1; }
# Alive and not a zombie (a killed sibling whose parent died too waits for init to reap it).
alive() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null)
  [ -n "$st" ] && [ "${st#Z}" = "$st" ]
}
# The processes that carry this test's TMPDIR in their environment: every process of a run
# (fsdpsim, its ranks, the pool's coordinator and ranks) and nothing of anyone else's.
ours() {
  local f
  for f in /proc/[0-9]*/environ; do
    tr '\0' '\n' 2>/dev/null < "$f" | grep -qxF "TMPDIR=$TMPDIR" && { f=${f#/proc/}; echo "${f%/environ}"; }
  done
}
# Seconds after the triage line (the confirmations begin then): at once, while the
# first runs start, and later while classes are confirmed on both backends. The first two
# tries have a 12 s budget (4 s of model: the upstream pools are often still starting), the
# rest 24 s (8 s: the pools are ready, and upstream confirms while the signal comes).
delays=(0.5 1.5 0 0.3 0.7 1.2 2 3.5)
for ((try = 0; try < tries; try++)); do
  sig=$([ $((try % 2)) = 0 ] && echo INT || echo TERM)
  delay=${delays[$((try % ${#delays[@]}))]}
  secs=$([ $((try % 8)) -lt 2 ] && echo 12 || echo 24)
  d=$work/try$try
  mkdir -p "$d"
  # The caller: a shell script that runs the hunt in the foreground beside a sibling,
  # then says it lived on. setsid: its own process group, as a CI job's script has.
  setsid bash -c '
    d=$1; fsdpsim=$2
    sleep 600 & echo $! > "$d/sibling"
    "$fsdpsim" hunt --seconds '"$secs"' --seed '"$((try + 1))"' --out "$d/out" > "$d/stdout" 2> "$d/stderr"
    echo $? > "$d/rc"
  ' caller "$d" "$fsdpsim" &
  caller=$!
  callers="$callers $caller"
  pid=""
  for _ in $(seq 600); do  # up to 60 s for the model's third of the budget
    [ -z "$pid" ] && pid=$(ps -o pid=,comm= --ppid "$caller" 2>/dev/null | awk '$2 == "fsdpsim" {print $1}')
    grep -q '^hunt: triage: ' "$d/stderr" 2>/dev/null && break
    kill -0 "$caller" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$pid" ] || ! grep -q '^hunt: triage: ' "$d/stderr" 2>/dev/null; then
    bad "the hunt did not reach its confirmation: $(tail -c 400 "$d/stderr" 2>/dev/null)"
    continue
  fi
  sleep "$delay"
  kill -"$sig" "$pid" 2>/dev/null || bad "fsdpsim had already ended: $(tail -c 300 "$d/stderr")"
  for _ in $(seq 300); do kill -0 "$caller" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$caller" 2>/dev/null; then
    bad "still running 30 s after the signal: $(tail -c 300 "$d/stderr")"
    kill -KILL -- "-$caller"
  fi
  wait "$caller" 2>/dev/null
  sibling=$(cat "$d/sibling" 2>/dev/null)
  if [ ! -f "$d/rc" ]; then
    bad "the calling shell was killed (it never wrote the exit code)"
  else
    rc=$(cat "$d/rc")
    want=$([ "$sig" = INT ] && echo 130 || echo 143)
    [ "$rc" = "$want" ] || bad "exit $rc, want $want: $(tail -c 400 "$d/stderr")"
    grep -q '^interrupted: a partial catalogue' "$d/stdout" || bad "no partial catalogue: $(tail -c 400 "$d/stdout")"
    grep -q "^fsdpsim: hunt interrupted by signal" "$d/stderr" || bad "the interruption is not said on stderr: $(tail -c 300 "$d/stderr")"
  fi
  if [ -n "$sibling" ] && alive "$sibling"; then
    kill -KILL "$sibling"
  else
    bad "the sibling process ($sibling) beside fsdpsim was killed"
  fi
  left=""
  for _ in $(seq 50); do
    left=$(ours)
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ -z "$left" ] || bad "processes left: $(for p in $left; do ps -o pid=,args= -p "$p"; done)"
  [ -z "$(ls -A "$TMPDIR")" ] || bad "left in TMPDIR: $(ls -A "$TMPDIR")"
  rm -rf "${TMPDIR:?}"/*
  [ $fail = 0 ] && echo "try $try: --seconds $secs, SIG$sig +$delay s after triage (upstream pools $(grep -q '^upstream: torch' "$d/stdout" && echo ready || echo starting)):" \
    "exit $rc, shell and sibling alive, nothing left"
done
exit $fail
