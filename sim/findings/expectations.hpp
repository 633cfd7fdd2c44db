// Compares a run's observations and findings with a file's `expect` lines.
#pragma once
#include <string>
#include <vector>

#include "model/vocab/seq.hpp"
#include "model/spec/spec_checks.hpp"

namespace fsdpsim {

// One failed expectation: "file:line:col: step 6 rank 0: expected grads={other}, got no_grad_fn".
struct ExpectFailure {
  std::string text;
};

// Every expectation must hold on every rank it names, and every finding must
// be announced by a `finding=SN` expectation on its step.
std::vector<ExpectFailure> check_expectations(const SeqFile& f, const std::vector<Observation>& obs,
                                              const std::vector<Finding>& findings, const std::string& file);

}  // namespace fsdpsim
