#include "model/spec/s2_held_weight_checker.hpp"

#include <fmt/format.h>

#include "model/vocab/text.hpp"

namespace fsdpsim::spec {

void S2HeldWeightChecker::observe(const SpecContext&, const Op& op, const Observation& o, std::vector<Finding>& out) {
  uint32_t& reported = reported_[o.rank];
  // merge_and_unload (peft tuners_utils.py::BaseTuner._unload_and_optionally_merge) leaves each
  // base weight holding the deltas it merged, on purpose, and no LoRA layer whose merged flags
  // could name them: from then on this rank's weights have no W0 + merged deltas to be judged by.
  if (op.kind == OpKind::MergeAndUnload && o.status == Status::Ok) reported |= kUnloaded;
  if (reported & kUnloaded) return;
  for (size_t l = 0; l < o.layers.size() && l < layers_; ++l) {
    const LayerObs& lo = o.layers[l];
    const uint32_t bit = 1u << l;
    if (lo.registered == WeightClass::Unjudged) continue;  // no opinion
    if (lo.registered == WeightClass::Exact) {
      reported &= ~bit;
      continue;
    }
    if (reported & bit) continue;
    reported |= bit;
    out.push_back(finding("S2", o.step, o.rank,
                          fmt::format("layer {} merged=[{}] but its {} is {} (stored shard {})", lo.name.str(), join(lo.merged),
                                      unsharded(o, lo.group) ? "unsharded copy" : "shard", weight_class_name(lo.registered),
                                      weight_class_name(lo.stored))));
  }
}

void S2HeldWeightChecker::pack_key(const SpecContext& ctx, KeyWriter& key) const {
  for (int r = 0; r < ctx.world(); ++r) key.word(reported_[r]);  // only bits below layers_ are ever set
}

}  // namespace fsdpsim::spec
