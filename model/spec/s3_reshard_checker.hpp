// S3: nothing done on an unsharded copy is lost at reshard. A group that went
// from unsharded to sharded in an op that sets no flag must keep what its
// unsharded copy held (U's requires_grad, U's values), so per rank it
// remembers the previous observation.
#pragma once
#include <memory>
#include <vector>

#include "model/spec/checker.hpp"

namespace fsdpsim::spec {

class S3ReshardChecker : public Checker {
 public:
  // `borrow`: the observations outlive the checker (check_spec's run), so the
  // previous one is pointed to, not copied.
  S3ReshardChecker(const SpecContext& ctx, bool borrow) : borrow_(borrow), prev_(ctx.world()) {}
  void observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out);
  // Per rank: whether a previous observation is kept, then what S3 compares
  // with in it (group states, U's requires_grad, merged lists, registered class).
  void pack_key(const SpecContext& ctx, KeyWriter& key) const;

 private:
  void check(const SpecContext& ctx, const Observation& prev, const Observation& o, std::vector<Finding>& out) const;
  void remember(const Observation& o);

  bool borrow_;
  // Per rank; shared, as copies of the checker (the explorer's states) never change it.
  std::vector<std::shared_ptr<const Observation>> prev_;
};

}  // namespace fsdpsim::spec
