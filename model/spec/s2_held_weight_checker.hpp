// S2: the weight a module holds equals W0 + its merged deltas. Reported when
// a layer turns bad, so per rank it remembers which layers are bad already.
#pragma once
#include <vector>

#include "model/spec/checker.hpp"

namespace fsdpsim::spec {

class S2HeldWeightChecker : public Checker {
 public:
  explicit S2HeldWeightChecker(const SpecContext& ctx) : layers_(ctx.layer_count()), reported_(ctx.world(), 0) {}
  void observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out);
  // Per rank one word: bit l set while layer l's bad weight is reported, and kUnloaded.
  void pack_key(const SpecContext& ctx, KeyWriter& key) const;

 private:
  size_t layers_;
  // per rank, bit l: layer l's bad weight is reported; kUnloaded: a merge_and_unload ran
  std::vector<uint32_t> reported_;
  static constexpr uint32_t kUnloaded = 1u << 31;
  static_assert(kMaxLayers < 31, "a rank's reported layers and its unloaded bit are one uint32_t");
};

}  // namespace fsdpsim::spec
