// Per rank: which adapters the user asked to train, from the ops they called
// (never from the flags the model reports). S1 owns one and judges gradients
// against it.
#pragma once
#include <vector>

#include "model/spec/spec_context.hpp"

namespace fsdpsim::spec {

class IntentTracker {
 public:
  explicit IntentTracker(const SpecContext& ctx);
  // After `op` ran on the observation's rank (not for a stuck rank).
  void observe(const SpecContext& ctx, const Op& op, const Observation& o);
  Mask intended(int rank) const { return ranks_[rank].intended; }
  // Bits 0-23 of the rank's key word (S1GradsChecker::pack_key).
  uint32_t key_bits(int rank) const;

 private:
  struct RankIntent {
    Mask intended = 0;        // set_adapter's adapters, none inside disable_adapter()
    Mask before_disable = 0;  // restored by disable_exit
    Mask inference_mode = 0;  // per adapter config: loaded frozen
    Mask present = 0;         // in the model after the last op (not in the key: the state holds it)
  };
  std::vector<RankIntent> ranks_;
};

}  // namespace fsdpsim::spec
