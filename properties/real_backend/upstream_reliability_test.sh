#!/usr/bin/env bash
# The upstream path under signals, stopped ranks and big inputs (issue 37),
# one case per ctest: upstream_reliability_test.sh FSDPSIM CASE. Each case
# runs in its own TMPDIR, so the pool directories it checks for are its own.
#   sigstop      a rank stopped (SIGSTOP) for 4 s mid-sequence, --timeout 1000:
#                the run waits for it; no hang, no finding, no divergence
#   start_signal SIGINT while the pool starts: exit 130, the file INTERRUPTED
#                (not BROKE), no pool directory and no process left
#   failed_start GLOO_SOCKET_IFNAME=bogus0: the rank's own error, no .venv
#                hint, no directory left
#   memory       a legal file over the memory budget: exit 3 with both figures
#                at file:line:column, before any pool starts
#   paths        a bad --results / --junit path: exit 3 before any work
set -u
fsdpsim=$1
case_=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
venv_needed() { [ -x "$root/.venv/bin/python" ] || exit 77; }
work=$(mktemp -d)
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"
pids_to_kill=""
cleanup() {
  for p in $pids_to_kill; do kill -KILL -- "-$p" 2>/dev/null; kill -CONT "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL ($case_): $*"; fail=1; }
pool_dirs() { ls -d "$TMPDIR"/fsdpsim-pool-* 2>/dev/null; }
seed000=$root/corpus/regressions/seed000_merged_set_adapter_w2.seq
set -m  # each background run in its own process group, SIGINT not ignored

case $case_ in
sigstop)
  venv_needed
  # long enough (40 training steps, seconds per run) for the stop to land mid-sequence
  { printf 'world 2\nseed 0\nprofile upstream\nlayer lin0 64 64\nlayer lin1 64 64\n'
    printf 'adapter default r=4 alpha=8 targets=lin0,lin1\nfully_shard lin0 reshard_after_forward=true\n'
    printf 'fully_shard root reshard_after_forward=true\noptimizer trainable\n---\n'
    for _ in $(seq 40); do echo train_step; done; } > "$work/long.seq"
  want=$("$fsdpsim" run "$work/long.seq" --backend model > /dev/null; echo $?)
  "$fsdpsim" run "$work/long.seq" --backend model,upstream --timeout 1000 > "$work/out" 2>&1 &
  pid=$!
  pids_to_kill=$pid
  rank=""
  for _ in $(seq 1800); do  # up to 3 min for the pool to start and the run to begin
    kill -0 "$pid" 2>/dev/null || break
    coord=$(pgrep -P "$pid" | head -1)
    [ -n "$coord" ] && [ -n "$(ls -d "$TMPDIR"/fsdpsim-pool-*/run-* 2>/dev/null)" ] && rank=$(pgrep -P "$coord" | sed -n 2p)
    [ -n "$rank" ] && break
    sleep 0.1
  done
  [ -n "$rank" ] || bad "no run began"
  if [ -n "$rank" ]; then
    kill -STOP "$rank"
    pids_to_kill="$pid $rank"
    sleep 4  # four times --timeout
    kill -CONT "$rank"
  fi
  wait "$pid"
  rc=$?
  [ "$rc" = "$want" ] || bad "exit $rc, want $want (as on the model alone): $(tail -c 600 "$work/out")"
  grep -Eqw 'hang|divergences|slow rank|stuck rank' "$work/out" && bad "a stopped rank was reported: $(grep -Ewm3 'hang|divergences|slow rank|stuck rank' "$work/out")"
  ;;
start_signal)
  venv_needed
  "$fsdpsim" check "$seed000" --backend model,upstream > "$work/out" 2> "$work/err" &
  pid=$!
  pids_to_kill=$pid
  for _ in $(seq 600); do [ -n "$(pool_dirs)" ] && break; sleep 0.05; done
  [ -n "$(pool_dirs)" ] || bad "no pool directory appeared"
  coord=$(pgrep -P "$pid" | head -1)
  sleep 1  # its ranks are importing torch
  kill -INT -- "-$pid"  # Ctrl-C: the terminal's foreground group (the pool has its own)
  wait "$pid"
  rc=$?
  [ "$rc" = 130 ] || bad "exit $rc, want 130"
  grep -q '^INTERRUPTED ' "$work/out" || bad "the file is not reported interrupted: $(cat "$work/out")"
  grep -q 'BROKE\|install-deps' "$work/out" && bad "reported as broken: $(cat "$work/out")"
  grep -q ', 1 interrupted' "$work/out" || bad "the summary does not count it apart: $(tail -2 "$work/out")"
  [ -z "$(pool_dirs)" ] || bad "left: $(pool_dirs)"
  [ -z "$coord" ] || [ -z "$(ps -g "$coord" -o pid= 2>/dev/null)" ] || bad "processes left: $(ps -g "$coord" -o pid=,args=)"
  ;;
failed_start)
  venv_needed
  GLOO_SOCKET_IFNAME=bogus0 "$fsdpsim" run "$seed000" --backend upstream > "$work/out" 2>&1
  rc=$?
  [ "$rc" = 4 ] || bad "exit $rc, want 4"
  grep -q 'Unable to find address for: bogus0' "$work/out" || bad "the rank's error is not named: $(cat "$work/out")"
  grep -q 'install-deps' "$work/out" && bad "suggests reinstalling .venv: $(cat "$work/out")"
  [ -z "$(pool_dirs)" ] || bad "left: $(pool_dirs)"
  ;;
memory)
  cat > "$work/big.seq" <<'EOF'
world 2
seed 0
profile upstream
layer lin0 4096 4096 experts=64
adapter default r=8 alpha=16 targets=lin0
fully_shard root reshard_after_forward=true
optimizer trainable
---
train_step
EOF
  start=$(date +%s)
  "$fsdpsim" run "$work/big.seq" --backend model,upstream > "$work/out" 2>&1
  rc=$?
  [ "$rc" = 3 ] || bad "exit $rc, want 3: $(cat "$work/out")"
  grep -Eq "^$work/big.seq:4:[0-9]+: this sequence needs [0-9.]+ GB .* over the memory budget of [0-9.]+ GB" "$work/out" ||
    bad "no figures at file:line:column: $(cat "$work/out")"
  [ $(( $(date +%s) - start )) -lt 10 ] || bad "took $(( $(date +%s) - start )) s: it ran before refusing"
  [ -z "$(pool_dirs)" ] || bad "a pool started: $(pool_dirs)"
  "$fsdpsim" run "$work/big.seq" --backend model,upstream --memory-budget 1G > "$work/out" 2>&1
  grep -q 'over the memory budget of 1.0 GB' "$work/out" || bad "--memory-budget 1G not applied: $(cat "$work/out")"
  "$fsdpsim" run "$work/big.seq" --backend model > /dev/null 2>&1
  rc=$?
  [ "$rc" -le 1 ] || bad "the model alone (no tensors) was refused: exit $rc"
  ;;
paths)
  for flags in "--results $work/no/such/dir/r.json" "--junit $work" "--results $seed000/r.json"; do
    start=$(date +%s)
    "$fsdpsim" crosscheck --seed 1 --count 3 --against upstream $flags > "$work/out" 2>&1
    rc=$?
    [ "$rc" = 3 ] || bad "$flags: exit $rc, want 3: $(tail -c 300 "$work/out")"
    grep -q "^<command line>: --\(results\|junit\) " "$work/out" || bad "$flags: not named: $(tail -c 300 "$work/out")"
    [ $(( $(date +%s) - start )) -lt 5 ] || bad "$flags: checked after the run"
    [ -z "$(pool_dirs)" ] || bad "$flags: a pool started: $(pool_dirs)"
  done
  ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
exit $fail
