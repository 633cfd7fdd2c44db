// Shrinking a failing sequence to a minimal one with the same finding, and
// writing expectations from what a run observed.
#pragma once
#include <functional>
#include <string>

#include "model/vocab/seq.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {

// What a finding is, for shrinking and deduplication: the spec, the kind of
// op it fired on, and that op's status ("S1:train_step:no_grad_fn"); for S5
// only how the ranks part ("S5:hang", "S5:mismatch", "S5:disagree").
std::string finding_signature(const SeqFile& f, const RunResult& r, const Finding& fd);
// "S3:ok" of "S3:unshard:ok" or "S1:train_step:ok:extra"; "S5:disagree" as it is: what
// shrink's and triage's `prefer` names.
std::string spec_and_status(const std::string& finding_sig);

struct ShrinkResult {
  SeqFile minimal;        // with expectations filled in
  std::string signature;  // what was kept
  int runs = 0;           // candidate sequences tried
};

// Minimizes `f` while its first finding's signature stays: drops ops, then
// simplifies arguments (`@R`, names), then drops ranks, layers and adapters,
// then simplifies the scenario (experts, loading, dtype, groups,
// reshard_after_forward, optimizer, adapter options, overrides, seed).
// Returns false when `f` has no finding. `progress` is called now and then.
// With `canonical` (triage) ops that only bring groups into a state become
// `unshard` where that keeps the finding, so one root cause reached through
// different ops shrinks to one sequence; without it (`fsdpsim shrink`) the
// user's own ops stay.
// `prefer` ("S3:ok", a class signature's head) keeps the first finding of that spec and
// status instead, where `f` has one.
bool shrink(const SeqFile& f, ShrinkResult* out, const std::function<void(const std::string&)>& progress = {}, bool canonical = false,
            const std::string& prefer = "");

// The same minimization while `still_fails` holds for the candidate (a valid
// file); `f` must fail. out->signature is left to the caller.
void shrink_while(const SeqFile& f, ShrinkResult* out, const std::function<bool(const SeqFile&)>& still_fails,
                  const std::function<void(const std::string&)>& progress = {}, bool canonical = false);

// What a divergence is, for shrinking one: the op kind and the field that
// differ ("(train_step): grads"), or which backend alone found which spec
// ("finding on the real backend only: S1").
std::string divergence_signature(const std::string& divergence);

// Replaces every op's expectations by what `r` observed: status (and index,
// missing count for key_error), grads for training ops, and each finding.
void fill_expectations(SeqFile& f, const RunResult& r);

}  // namespace fsdpsim
