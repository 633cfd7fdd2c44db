// S7: get_delta_weight (the delta_weight op, and every merge or unmerge) works
// on sharded parameters and gives the delta of the full A and B. Judged on the
// one observation; nothing is remembered between steps.
#pragma once
#include <vector>

#include "model/spec/checker.hpp"

namespace fsdpsim::spec {

class S7DeltaWeightChecker : public Checker {
 public:
  void observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out);
};

}  // namespace fsdpsim::spec
