#!/usr/bin/env bash
# The nightly loop: fuzz, triage every finding into its class (the hunt's
# triage: `fsdpsim triage`), confirm it on the real backend (and upstream when
# .venv is installed), deduplicate by class signature, promote one file per
# new class to corpus/regressions/, print a summary and write JUnit XML
# (--junit FILE, default DIR/junit.xml: a testcase per fuzzer, failing on crash
# artifacts, and one per confirmed class, failing with the divergences).
#
#   fuzz/nightly.sh [--budget SECONDS] [--jobs N] [--out DIR] [--junit FILE] [--no-promote]
#
# Exits non-zero when `fsdpsim coverage` finds a feature the generator never draws, when a fuzzer crashes (the parser, or a spec finding under
# `patched`: a bug of the model or a new upstream problem), or when the model
# and the real backend disagree on a finding. Findings under `upstream` are
# the product, not a failure.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
budget=600 jobs=1 out="$root/nightly-out" promote=1 junit=""
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --junit) junit=$2; shift 2 ;;
    --no-promote) promote=0; shift ;;
    *) echo "usage: fuzz/nightly.sh [--budget SECONDS] [--jobs N] [--out DIR] [--junit FILE] [--no-promote]" >&2; exit 3 ;;
  esac
done
[ -n "$junit" ] || junit="$out/junit.xml"
bash .ci/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j2 --target fsdpsim >/dev/null || exit 4
cmake -S . -B build-fuzz -DFSDPSIM_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build-fuzz -j2 >/dev/null || exit 4
fsdpsim="$root/build/fsdpsim"
mkdir -p "$out"/{findings,artifacts,shrunk}
date=$(date -u +%Y-%m-%d)
failed=0
declare -A execs crashes
# JUnit testcases, one tab-separated line each (fuzz/junit_xml.py): class, name, seconds, outcome, message, text.
junit_cases=""
junit_case() { junit_cases+=$(printf '%s\t%s\t%s\t%s\t%s\t%s' "$@" | tr '\n' ' ')$'\n'; }
per=$((budget / 2))
for name in seq_parser lifecycle; do
  fuzzer="$root/build-fuzz/${name}_fuzzer"
  corpus="$out/corpus/$name"
  mkdir -p "$corpus" "$out/artifacts/$name"
  echo "== ${name}_fuzzer for ${per} s"
  fork=""
  [ "$jobs" -gt 1 ] && fork="-fork=$jobs"
  # The target's .options (OSS-Fuzz's file; libFuzzer itself does not read it) as flags:
  # without entropic=0 libFuzzer's feature bookkeeping takes 2/3 of lifecycle_fuzzer's time.
  opts=$(sed -n 's/^\([a-z_]*\) = \(.*\)$/-\1=\2/p' "$root/fuzz/${name}_fuzzer.options" | grep -v '^-dict=')
  started=$SECONDS
  FSDPSIM_FINDINGS_DIR="$out/findings" "$fuzzer" $fork $opts -max_total_time="$per" -dict="$root/fuzz/${name}_fuzzer.dict" \
    -artifact_prefix="$out/artifacts/$name/" "$corpus" "$root/corpus/${name}_fuzzer" > "$out/${name}.log" 2>&1
  execs[$name]=$(grep -oE "Done [0-9]+ runs|stat::number_of_executed_units: [0-9]+" "$out/${name}.log" | grep -oE "[0-9]+" | tail -1)
  crashes[$name]=$(ls "$out/artifacts/$name" 2>/dev/null | wc -l)
  if [ "${crashes[$name]}" -gt 0 ]; then
    failed=1
    junit_case fuzz "${name}_fuzzer" $((SECONDS - started)) failure "${crashes[$name]} crash artifacts" \
      "$(ls "$out/artifacts/$name" | head -20 | sed "s|^|$out/artifacts/$name/|" | sed ':a;N;$!ba;s/\n/\\n/g')"
  else
    junit_case fuzz "${name}_fuzzer" $((SECONDS - started)) pass "" ""
    echo "   crash artifacts in $out/artifacts/$name/ (each prints as .seq text for the lifecycle fuzzer)"
  fi
  # Keep what the run learned: merge the new inputs into the seed corpus.
  "$fuzzer" -merge=1 "$root/corpus/${name}_fuzzer" "$corpus" > /dev/null 2>&1
done

# The generator must draw the whole vocabulary: a feature or compatible pair never drawn in
# 10 000 whole-vocabulary sequences per world (coverage's default `--draw all,mixed_precision=33,dora=33`) (a directive or op the parser learnt and the generator
# did not) fails the night.
started=$SECONDS
"$fsdpsim" coverage --count 10000 --worlds 1-4 --quiet > "$out/coverage.txt" 2>&1
rc=$?
if [ "$rc" = 0 ]; then
  junit_case coverage "draw all" $((SECONDS - started)) pass "" ""
else
  failed=1
  junit_case coverage "draw all" $((SECONDS - started)) failure "coverage exit $rc: never drawn ($out/coverage.txt)" \
    "$(grep -E "^never drawn|^fsdpsim" "$out/coverage.txt" | head -40 | sed ':a;N;$!ba;s/\n/\\n/g')"
fi
echo "== coverage: $(tail -1 "$out/coverage.txt")"

# Findings under upstream: triage (shrink over ops and scenario, name the
# class, attribute it to a patched switch), confirm, deduplicate by class
# signature against the `# signature:` lines under corpus/regressions/, promote
# one file per new class.
known=$(grep -rh --include="*.seq" "^# signature: " corpus/regressions 2>/dev/null | sed 's/^# signature: //' | sort -u)
backends=both
[ -x .venv/bin/python ] && backends=model,real,upstream
rows=()
seen_sigs=""
for f in "$out"/findings/*.seq; do
  [ -e "$f" ] || break
  base=$(basename "$f" .seq)
  line=$("$fsdpsim" triage "$f" --out "$out/shrunk" 2>/dev/null | head -1)
  IFS=$'\t' read -r _ stem _root verdict sig <<< "$line"
  if [ -z "${sig:-}" ] || [ "$sig" = "-" ]; then rows+=("$base|-|lost on triage|-"); continue; fi
  case "$seen_sigs" in *"|$sig|"*) continue ;; esac  # the same class reached twice
  seen_sigs="$seen_sigs|$sig|"
  min="$out/shrunk/$stem.seq"
  ops=$(sed -n '/^---$/,$p' "$min" | tail -n +2 | wc -l)
  # Confirm: the model and the real backend (and upstream when installed) must agree.
  started=$SECONDS
  "$fsdpsim" run "$min" --backend "$backends" > "$out/shrunk/$stem.confirm" 2>&1
  rc=$?
  if [ "$rc" = 2 ] || [ "$rc" = 4 ]; then
    failed=1
    rows+=("$stem|$ops|DIVERGED (exit $rc)|-")
    what="backend divergence"
    [ "$rc" = 4 ] && what="backend failure"
    # The divergence lines (or the failure message) of the confirming run, as the failure's text.
    detail=$(grep -E "^  |^fsdpsim: |^divergences" "$out/shrunk/$stem.confirm" | head -40 | sed ':a;N;$!ba;s/\n/\\n/g')
    junit_case confirm "$stem" $((SECONDS - started)) failure "$what (exit $rc, $backends): $sig" "$detail"
    continue
  fi
  junit_case confirm "$stem" $((SECONDS - started)) pass "" ""
  if echo "$known" | grep -qxF "$sig"; then rows+=("$stem|$ops|confirmed ($backends)|in the corpus ($verdict)"); continue; fi
  dest="corpus/regressions/fuzz_$stem.seq"
  if [ "$promote" = 1 ]; then
    { echo "# found by the nightly lifecycle_fuzzer on $date, triaged and confirmed on $backends"
      cat "$min"; } > "$dest"
    known=$(printf '%s\n%s' "$known" "$sig")
    rows+=("$stem|$ops|confirmed ($backends)|$verdict, promoted to $dest")
  else
    rows+=("$stem|$ops|confirmed ($backends)|$verdict (not promoted)")
  fi
done

echo
printf '%-22s %12s %8s\n' fuzzer execs crashes
for name in seq_parser lifecycle; do printf '%-22s %12s %8s\n' "${name}_fuzzer" "${execs[$name]:-0}" "${crashes[$name]:-0}"; done
echo
printf '%-44s %5s %-34s %s\n' class ops confirmation regression
for r in "${rows[@]+"${rows[@]}"}"; do IFS='|' read -r a b c d <<< "$r"; printf '%-44s %5s %-34s %s\n' "$a" "$b" "$c" "$d"; done
mkdir -p "$(dirname "$junit")"
printf '%s' "$junit_cases" | python3 "$root/fuzz/junit_xml.py" "$junit" "fsdpsim-nightly" || failed=1
echo "JUnit XML: $junit"
exit $failed
