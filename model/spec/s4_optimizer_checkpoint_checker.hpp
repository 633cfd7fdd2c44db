// S4: an optimizer checkpoint can be saved and loaded at any point. Judged on
// the one observation; nothing is remembered between steps.
#pragma once
#include <vector>

#include "model/spec/checker.hpp"

namespace fsdpsim::spec {

class S4OptimizerCheckpointChecker : public Checker {
 public:
  void observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out);
};

}  // namespace fsdpsim::spec
