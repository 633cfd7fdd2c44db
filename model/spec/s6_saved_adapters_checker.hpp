// S6: saved adapters hold every selected adapter, full size, and reload equal.
// Judged on the one observation; nothing is remembered between steps.
#pragma once
#include <vector>

#include "model/spec/checker.hpp"

namespace fsdpsim::spec {

class S6SavedAdaptersChecker : public Checker {
 public:
  void observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out);
};

}  // namespace fsdpsim::spec
