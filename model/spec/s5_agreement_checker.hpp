// S5: no hang, mismatch or cross-paired collective, and after an op every rank ran, the ranks agree on
// the adapter state (adapters, merges, stored weights, requires_grad, dtypes).
// It remembers whether each is already reported, so a lasting disagreement is
// one finding, not one a step.
#pragma once
#include <vector>

#include "model/spec/checker.hpp"

namespace fsdpsim::spec {

class S5AgreementChecker : public Checker {
 public:
  // It judges the collectives themselves, so it sees a stuck rank too.
  static constexpr bool kSeesStuckRanks = true;
  // A rank stuck in a hang or mismatch (rank_stuck), or one whose collective
  // was cross-paired: the first of these is reported.
  void observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out);
  // Every observation of one step, in rank order.
  void after_step(const SpecContext& ctx, const Observation* obs, size_t n, std::vector<Finding>& out);
  // One word: bit 0 a collective is reported, bit 1 a disagreement is.
  void pack_key(const SpecContext& ctx, KeyWriter& key) const;

 private:
  bool collective_reported_ = false, disagreement_reported_ = false, replica_reported_ = false;
};

// True only when each field S5 compares holds the same value in `a` and `b`,
// position by position (compared in place, no text built).
bool same_agreement_fields(const Observation& a, const Observation& b);

}  // namespace fsdpsim::spec
