#include "model/spec/s7_delta_weight_checker.hpp"

#include <fmt/format.h>

namespace fsdpsim::spec {

void S7DeltaWeightChecker::observe(const SpecContext&, const Op& op, const Observation& o, std::vector<Finding>& out) {
  if (o.status == Status::ShapeError && op.kind != OpKind::LoadAdapters) {
    out.push_back(finding("S7", o.step, o.rank, fmt::format("get_delta_weight raised: {}", o.message)));
    return;
  }
  for (const auto& d : o.deltas)
    if (d.value != WeightClass::Exact && d.value != WeightClass::Unjudged) {  // unjudged: no opinion
      out.push_back(finding("S7", o.step, o.rank,
                            fmt::format("delta of {} is {} (not the delta of the full A and B)", d.adapter.str(),
                                        weight_class_name(d.value))));
      return;
    }
}

}  // namespace fsdpsim::spec
