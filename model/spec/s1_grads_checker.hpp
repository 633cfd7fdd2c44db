// S1: after set_adapter(X) every training step sends gradients to exactly X's
// shards. Per rank it remembers what the pending forward's output can train.
#pragma once
#include <vector>

#include "model/spec/spec_context.hpp"

namespace fsdpsim::spec {

class S1GradsChecker {
 public:
  explicit S1GradsChecker(int world) : ranks_(world) {}
  // After `op` ran on the observation's rank; `intended` is what the user asked to train.
  void observe(const SpecContext& ctx, const Op& op, const Observation& o, Mask intended, std::vector<Finding>& out);
  // Key bits 24, 25 and 27 of the rank's word (SpecChecker::append_key).
  uint32_t key_bits(int rank) const;

 private:
  void check(const SpecContext& ctx, const Observation& o, Mask intended, bool from_eval, std::vector<Finding>& out) const;
  struct RankOutput {
    bool eval_output = false;          // the pending output came from an eval (no_grad)
    bool flags_since_forward = false;  // a flag-setting op ran between the forward and this backward
    bool sync_off = false;             // `gradient_sync off`: a micro-batch that keeps its gradients unsent
  };
  std::vector<RankOutput> ranks_;
};

}  // namespace fsdpsim::spec
