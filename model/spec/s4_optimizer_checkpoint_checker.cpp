#include "model/spec/s4_optimizer_checkpoint_checker.hpp"

#include <fmt/format.h>

namespace fsdpsim::spec {

void S4OptimizerCheckpointChecker::observe(const SpecContext&, const Op& op, const Observation& o, std::vector<Finding>& out) {
  if ((op.kind != OpKind::SaveOptimizer && op.kind != OpKind::LoadOptimizer) || o.status != Status::KeyError) return;
  const std::string first = o.opt_unregistered.empty() ? "?" : param_detail(o, o.opt_unregistered[0]);
  out.push_back(finding("S4", o.step, o.rank,
                        fmt::format("{} raised {} ({}/{} optimizer parameters not registered; first: {})", op_name(op.kind),
                                    o.message, o.opt_missing, o.opt_total, first)));
}

}  // namespace fsdpsim::spec
