// S4: an optimizer checkpoint can be saved and loaded at any point. Judged on
// the one observation; nothing is remembered between steps.
#pragma once
#include <vector>

#include "model/spec/spec_context.hpp"

namespace fsdpsim::spec {

void check_optimizer_checkpoint(const Op& op, const Observation& o, std::vector<Finding>& out);

}  // namespace fsdpsim::spec
