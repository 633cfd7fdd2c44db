#!/usr/bin/env bash
# Two `fsdpsim worker` processes rendezvous over MASTER_ADDR:MASTER_PORT like a
# torchrun launch; rank 0's observation table must equal `run --backend real`'s.
set -u
fsdpsim=$1
seq=$2
port=$((29600 + RANDOM % 2000))
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port FSDPSIM_HOST=127.0.0.1
RANK=1 timeout 60 "$fsdpsim" worker "$seq" > "$out/rank1" 2>&1 &
RANK=0 timeout 60 "$fsdpsim" worker "$seq" > "$out/rank0" 2>&1
rc0=$?
wait $!
rc1=$?
# --wide: the worker prints its table a row a line, as run did before it fitted 120 columns
"$fsdpsim" run "$seq" --backend real --wide > "$out/single" 2>&1
rc_single=$?
# Compare from the table header on, up to (not including) the trace hash line.
sed -n '/^step /,$p' "$out/rank0" > "$out/a"
sed -n '/^step /,$p' "$out/single" | grep -v '^trace hash' > "$out/b"
if ! diff "$out/a" "$out/b"; then echo "FAIL: torchrun launch differs from run --backend real"; exit 1; fi
if [ "$rc0" != "$rc_single" ] || [ "$rc1" != 0 ]; then echo "FAIL: exit codes rank0=$rc0 rank1=$rc1 single=$rc_single"; exit 1; fi
# Rank 1 reports through the store (how many ops it got through depends on the
# sequence: a collective mismatch stops it); rank 0's table above shows them.
grep -Eq "rank 1: [0-9]+ ops reported to rank 0" "$out/rank1" || { echo "FAIL: rank 1 said:"; cat "$out/rank1"; exit 1; }
echo "torchrun launch matches run --backend real (exit $rc0)"
