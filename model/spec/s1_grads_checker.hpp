// S1: after set_adapter(X) every training step sends gradients to exactly X's
// shards. Per rank it remembers what the user asked to train (IntentTracker)
// and what the pending forward's output can train.
#pragma once
#include <vector>

#include "model/spec/checker.hpp"
#include "model/spec/intent_tracker.hpp"

namespace fsdpsim::spec {

class S1GradsChecker : public Checker {
 public:
  explicit S1GradsChecker(const SpecContext& ctx) : intent_(ctx), ranks_(ctx.world()) {}
  // After `op` ran on the observation's rank: the intent follows the op, then the step is judged.
  void observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out);
  // The same with the intent given (`intended`: what the user asked to train), the tracker untouched.
  void judge(const SpecContext& ctx, const Op& op, const Observation& o, Mask intended, std::vector<Finding>& out);
  // Per rank one word: the intent (bits 0-23, IntentTracker::key_bits), then bits 24, 25 and 27.
  void pack_key(const SpecContext& ctx, KeyWriter& key) const;

 private:
  void check(const SpecContext& ctx, const Observation& o, Mask intended, bool from_eval, std::vector<Finding>& out) const;
  struct RankOutput {
    bool eval_output = false;          // the pending output came from an eval (no_grad)
    bool flags_since_forward = false;  // a flag-setting op ran between the forward and this backward
    bool sync_off = false;             // `gradient_sync off`: a micro-batch that keeps its gradients unsent
  };
  IntentTracker intent_;
  std::vector<RankOutput> ranks_;
};

}  // namespace fsdpsim::spec
