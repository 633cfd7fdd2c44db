// S2: the weight a module holds equals W0 + its merged deltas. Reported when
// a layer turns bad, so per rank it remembers which layers are bad already.
#pragma once
#include <vector>

#include "model/spec/spec_context.hpp"

namespace fsdpsim::spec {

class S2HeldWeightChecker {
 public:
  S2HeldWeightChecker(int world, size_t layers) : layers_(layers), reported_(world, 0) {}
  void observe(const Observation& o, std::vector<Finding>& out);
  // One word per layer: 1 while its bad weight is reported (SpecChecker::append_key).
  void append_key(int rank, std::vector<uint32_t>& out) const;

 private:
  size_t layers_;
  std::vector<uint32_t> reported_;  // per rank, bit l: layer l's bad weight is reported
  static_assert(kMaxLayers <= 32, "a rank's reported layers are one uint32_t");
};

}  // namespace fsdpsim::spec
