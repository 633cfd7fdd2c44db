#!/usr/bin/env bash
# `fsdpsim record` end to end (label upstream): seed 000's reproduction script recorded as its
# users ran it (torchrun, 2 ranks, gloo on CPU) gives the expected ops, the same bytes twice, and
# a .seq whose check shows S1 (flag-on-copy) on the model and on upstream; the script prints the
# same under the tracer as without it; unsupported calls are listed in the header; a
# transformers model, built by hand or prepared by accelerate, is a `model` line. The examples:
# record_examples_test.sh.
# Usage: record_test.sh FSDPSIM SOURCE_DIR
set -u
. "$(dirname "$0")/record_env.sh" "$1" "$2" record_test
HERE="$SRC/properties/real_backend/upstream/record"
cd "$T" || exit 1
cp "$HERE/seed000_repro.py" "$HERE/unsupported.py" "$HERE/tiny_llama.py" "$HERE/accelerate_llama.py" .

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
         "adapter default: lora_dropout=0.1" "get_peft_model_state_dict outside save_pretrained at unsupported.py:32"; do
  grep -q "^# not recorded: $n" u.seq || { cat u.seq; fail "header lacks: $n"; }
done
grep -q '^merge_and_unload  *# unsupported.py:33$' u.seq || { cat u.seq; fail "merge_and_unload is not an op"; }
# A transformers model of a known family is recorded as a `model` line from its config, with module
# paths for names, PEFT's target_modules as written, and seq_len from the token ids it was called on.
"$FSDPSIM" record --out l.seq -- $RUN tiny_llama.py > /dev/null 2> l.err || { cat l.err; fail "record tiny_llama"; }
for l in "model llama hidden=32 intermediate=64 layers=2 heads=4 kv_heads=2 vocab=64 tie_embeddings=false seq_len=12" \
         "adapter policy r=4 alpha=8 targets=q_proj,v_proj init=zero" "adapter reference r=4 alpha=8 targets=q_proj,v_proj init=zero" \
         "fully_shard model.layers.0 reshard_after_forward=none" "fully_shard model.layers.1 reshard_after_forward=none" \
         "fully_shard root reshard_after_forward=none"; do
  grep -qx "$l" l.seq || { cat l.seq; fail "tiny_llama: no line '$l'"; }
done
ops=$(sed -n '/^---$/,$p' l.seq | sed 1d | sed 's/ *#.*//' | tr '\n' ';')
[ "$ops" = "$(printf '%s;' "set_adapter policy" forward backward step zero_grad "set_adapter reference" eval \
  "set_adapter policy" forward backward step zero_grad "set_adapter reference" eval "set_adapter policy" "generate 3" "save_model full" "load_model full")" ] ||
  { cat l.seq; fail "tiny_llama ops: $ops"; }
grep -q '^# not recorded' l.seq && { cat l.seq; fail "tiny_llama: nothing should go unrecorded"; }

# Accelerator.prepare's FSDP2 path is recorded as the fully_shard calls it makes: each decoder layer
# (transformer_based_wrap), the untied input embedding, the output head with reshard_after_forward=False
# (accelerate utils/fsdp_utils.py::fsdp2_prepare_model), then the root.
"$FSDPSIM" record --out acc.seq -- $RUN accelerate_llama.py > /dev/null 2> acc.err || { cat acc.err; fail "record accelerate_llama"; }
want=$(printf '%s\n' "fully_shard model.layers.0 reshard_after_forward=true" "fully_shard model.layers.1 reshard_after_forward=true" \
  "fully_shard model.embed_tokens reshard_after_forward=true" "fully_shard lm_head reshard_after_forward=false" \
  "fully_shard root reshard_after_forward=none")
[ "$(grep '^fully_shard' acc.seq)" = "$want" ] || { cat acc.seq; fail "accelerate_llama: prepare's fully_shard calls"; }
ops=$(sed -n '/^---$/,$p' acc.seq | sed 1d | sed 's/ *#.*//' | tr '\n' ';')
[ "$ops" = "forward;backward;step;train_step;train_step;zero_grad;" ] || { cat acc.seq; fail "accelerate_llama ops: $ops"; }
# Both transformers recordings run on the model and on upstream, which agree.
"$FSDPSIM" check l.seq acc.seq --backend model,upstream > mcheck.out ||
  { cat mcheck.out; fail "the transformers recordings do not check on the model and upstream"; }
grep -q '^2 passed, 0 failed expectations, 0 diverged' mcheck.out || { cat mcheck.out; fail "the transformers recordings diverge"; }

left_in_tmpdir
echo "record_test: ok"
