// S5: no hang, mismatch or cross-paired collective, and after an op every rank ran, the ranks agree on
// the adapter state (adapters, merges, stored weights, requires_grad, dtypes).
// It remembers whether each is already reported, so a lasting disagreement is
// one finding, not one a step.
#pragma once
#include <vector>

#include "model/spec/spec_context.hpp"

namespace fsdpsim::spec {

class S5AgreementChecker {
 public:
  // A rank stuck in a hang or mismatch: true when `o` is one (nothing more of
  // it is observable); the first is reported.
  bool stuck(const Observation& o, std::vector<Finding>& out);
  // Every observation of one step, in rank order.
  void after_step(const SpecContext& ctx, const Observation* obs, size_t n, std::vector<Finding>& out);
  // Bits 0-1 of the checker's first key word (SpecChecker::append_key).
  uint32_t key_bits() const { return (collective_reported_ ? 1 : 0) | (disagreement_reported_ ? 2 : 0); }

 private:
  bool collective_reported_ = false, disagreement_reported_ = false, replica_reported_ = false;
};

// True only when each field S5 compares holds the same value in `a` and `b`,
// position by position (compared in place, no text built).
bool same_agreement_fields(const Observation& a, const Observation& b);

}  // namespace fsdpsim::spec
