#!/usr/bin/env bash
# `fsdpsim record` end to end (label upstream): seed 000's reproduction script recorded as its
# users ran it (torchrun, 2 ranks, gloo on CPU) gives the expected ops, the same bytes twice, and
# a .seq whose check shows S1 (flag-on-copy) on the model and on upstream; the script prints the
# same under the tracer as without it; unsupported calls are listed in the header; the checked-in
# examples/sft_two_adapters.seq is current.
# Usage: record_test.sh FSDPSIM SOURCE_DIR
set -u
FSDPSIM=$1
SRC=$2
[ -x "$SRC/.venv/bin/python" ] || exit 77
T=$(mktemp -d "${TMPDIR:-/tmp}/record_test.XXXXXX")
trap 'rm -rf "$T"' EXIT
HERE="$SRC/properties/real_backend/upstream/record"
fail() { echo "FAIL: $*"; exit 1; }
cd "$T" || exit 1
cp "$HERE/seed000_repro.py" "$HERE/unsupported.py" .
RUN="torchrun --standalone --nproc_per_node=2"

"$FSDPSIM" record --out a.seq -- $RUN seed000_repro.py > traced.out 2> a.err || { cat a.err; fail "record seed000"; }
"$FSDPSIM" record --out b.seq -- $RUN seed000_repro.py > /dev/null 2>&1 || fail "record seed000 (second)"
cmp a.seq b.seq || fail "two recordings differ"
ops=$(sed -n '/^---$/,$p' a.seq | sed 1d | sed 's/ *#.*//')
want=$(printf '%s\n' eval merge "set_adapter other" forward backward forward "backward  expect error=no_grad_fn")
[ "$ops" = "$want" ] || { cat a.seq; fail "ops differ: $ops"; }
grep -q '^fully_shard lin0 reshard_after_forward=false$' a.seq || fail "no fully_shard lin0 line"
grep -q '^# not recorded: a second PEFT model built at seed000_repro.py:34' a.seq || fail "second model not named"
grep -q '^# not recorded: modules without parameters between the layers: relu (ReLU)' a.seq || fail "relu not named"
for backend in model upstream; do
  "$FSDPSIM" check a.seq --backend "$backend" --json > check.json
  grep -q 'a.seq:20:1: unexpected finding: S1 step 7 rank 0: expected gradients on {other}, got no_grad_fn' check.json ||
    { cat check.json; fail "no S1 on $backend"; }
done

# The script's own output is the same with and without the tracer.
# Its own TMPDIR: torchrun leaves a torchelastic_* folder per launch, torch a compile cache.
mkdir -p "$T/plain-tmp"
TMPDIR="$T/plain-tmp" TORCHINDUCTOR_CACHE_DIR="$T/plain-tmp/inductor" $SRC/.venv/bin/$RUN seed000_repro.py > plain.out 2> /dev/null || fail "plain run"
grep '^\[world' plain.out > p.txt; grep '^\[world' traced.out > t.txt
[ -s p.txt ] && cmp p.txt t.txt || fail "the script printed differently under the tracer"

"$FSDPSIM" record --out u.seq -- $RUN unsupported.py > /dev/null 2> u.err || { cat u.err; fail "record unsupported"; }
for n in "layer emb (Embedding): only nn.Linear layers are recorded" "layer norm (LayerNorm)" \
         "adapter default: lora_dropout=0.1" "merge_and_unload at unsupported.py:31"; do
  grep -q "^# not recorded: $n" u.seq || { cat u.seq; fail "header lacks: $n"; }
done
# The checked-in recording of examples/sft_two_adapters.py is what recording it gives today.
(cd "$SRC" && "$FSDPSIM" record --out "$T/sft.seq" -- $RUN examples/sft_two_adapters.py > /dev/null 2>&1) || fail "record sft example"
cmp "$T/sft.seq" "$SRC/examples/sft_two_adapters.seq" || fail "examples/sft_two_adapters.seq is stale: re-record it (docs/guide/record.md)"
# Nothing of the recordings is left under the TMPDIR this test was given (CI checks that too).
left=$(ls -A "${TMPDIR:-/tmp}" | grep -E '^(torchelastic_|torchinductor_|fsdpsim-record-)' || true)
[ -z "$left" ] || fail "left in TMPDIR: $left"
echo "record_test: ok"
