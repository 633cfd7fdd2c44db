// S7: get_delta_weight (the delta_weight op, and every merge or unmerge) works
// on sharded parameters and gives the delta of the full A and B. Judged on the
// one observation; nothing is remembered between steps.
#pragma once
#include <vector>

#include "model/spec/spec_context.hpp"

namespace fsdpsim::spec {

void check_delta_weight(const Op& op, const Observation& o, std::vector<Finding>& out);

}  // namespace fsdpsim::spec
