#!/usr/bin/env bash
# Interrupts a running `fsdpsim crosscheck` (model against real process ranks)
# three ways (issue 11): SIGINT to its process group (Ctrl-C), SIGHUP to the
# parent (a closed terminal), SIGKILL of the parent. Checks that no process of
# it is left, that no store directory is left after the next start of a real
# run, and, for SIGINT and SIGHUP, that partial results were printed (exit
# 128 + signal, the summary's `sequences N of M` and `interrupted` rows).
set -u
fsdpsim=$1
seq=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"
fail=0
# Job control: each run gets its own process group (its ranks share it, so
# `ps -g` finds every process of the run), and SIGINT is not ignored in it as
# it is for a plain `&` in a script.
set -m
say() { echo "$*"; }
bad() { echo "FAIL ($sig): $*"; fail=1; }

for sig in INT HUP KILL; do
  rm -rf "${TMPDIR:?}"/* "$work/out"
  "$fsdpsim" crosscheck --seed 7 --count 1000000 --out "$work/out" > "$work/stdout" 2> "$work/stderr" &
  pid=$!
  for _ in $(seq 300); do ls "$TMPDIR" | grep -q '^fsdpsim-real-' && break; sleep 0.05; done
  ls "$TMPDIR" | grep -q '^fsdpsim-real-' || bad "no store directory appeared"
  sleep 3.5  # past the first progress line
  case $sig in
    INT) kill -INT -- "-$pid" ;;  # Ctrl-C: the whole foreground group
    HUP) kill -HUP "$pid" ;;
    KILL) kill -KILL "$pid" ;;
  esac
  for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { bad "still running 20 s after the signal"; kill -KILL "$pid"; }
  wait "$pid"
  rc=$?
  left=""
  for _ in $(seq 60); do
    left=$(ps -g "$pid" -o pid=,comm= 2>/dev/null)
    [ -z "$left" ] && break
    sleep 0.05
  done
  [ -z "$left" ] || { bad "processes left:"; echo "$left"; kill -KILL -- "-$pid"; }
  case $sig in
    INT) want=130 ;;
    HUP) want=129 ;;
    KILL) want=137 ;;
  esac
  [ "$rc" = "$want" ] || bad "exit $rc, want $want"
  if [ "$sig" != KILL ]; then
    # Removed before exit (by the harness's handler, or by the pools' destructors
    # after the CLI's summary); nothing waits for a later start.
    [ -z "$(ls "$TMPDIR")" ] || bad "left in TMPDIR: $(ls "$TMPDIR")"
    # Progress goes to stderr (once a second), the results to stdout.
    grep -q '^crosscheck: [0-9]*/1000000 sequences' "$work/stderr" || bad "no progress line before the signal: $(head -c 300 "$work/stderr")"
    # The partial summary is the CLI's part (sim/cli/interrupt.hpp, merged from h-rel).
    grep -Eq '^sequences +[0-9]+ of 1000000' "$work/stdout" || bad "no partial summary: $(tail -c 300 "$work/stdout")"
    num=$([ "$sig" = INT ] && echo 2 || echo 1)
    grep -Eq "^interrupted +by signal $num: partial results" "$work/stdout" || bad "no 'interrupted' row: $(tail -c 300 "$work/stdout")"
  else
    ls "$TMPDIR" | grep -q '^fsdpsim-real-' || bad "SIGKILL should leave the store directory for the next start"
    "$fsdpsim" run "$seq" --backend real > "$work/next" 2>&1 || true
    [ -z "$(ls "$TMPDIR")" ] || bad "left after the next start: $(ls "$TMPDIR")"
  fi
  [ $fail = 0 ] && say "SIG$sig: exit $rc, no process, no store directory left"
done
exit $fail
