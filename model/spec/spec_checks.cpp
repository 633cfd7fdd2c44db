// The driver: every checker sees each observation in the list's order (S5
// first, as it reports stuck ranks, which the others do not see), then each
// sees the step once its ranks are all seen; findings come out in that order.
#include "model/spec/spec_checks.hpp"

#include <algorithm>
#include <tuple>

#include "model/spec/s1_grads_checker.hpp"
#include "model/spec/s2_held_weight_checker.hpp"
#include "model/spec/s3_reshard_checker.hpp"
#include "model/spec/s4_optimizer_checkpoint_checker.hpp"
#include "model/spec/s5_agreement_checker.hpp"
#include "model/spec/s6_saved_adapters_checker.hpp"
#include "model/spec/s7_delta_weight_checker.hpp"
#include "model/spec/spec_context.hpp"

namespace fsdpsim {
namespace spec {
namespace {

// The checkers side by side, each holding what it remembers between steps;
// copying them copies every checker's state (the explorer's states).
class Checkers {
 public:
  // `borrow`: the observations outlive the checkers (see S3ReshardChecker).
  Checkers(std::shared_ptr<const Scenario> s, bool borrow)
      : ctx_(std::move(s)), list_(S5AgreementChecker(), S1GradsChecker(ctx_), S2HeldWeightChecker(ctx_),
                                  S3ReshardChecker(ctx_, borrow), S4OptimizerCheckpointChecker(), S6SavedAdaptersChecker(),
                                  S7DeltaWeightChecker()) {}

  void step(const Op& op, const Observation* obs, size_t n, std::vector<Finding>& out) {
    for (size_t k = 0; k < n; ++k) {
      const bool stuck = rank_stuck(obs[k]);
      each([&](auto& c) {
        if (!stuck || c.kSeesStuckRanks) c.observe(ctx_, op, obs[k], out);
      });
    }
    each([&](auto& c) { c.after_step(ctx_, obs, n, out); });
  }

  // Each checker's words in the list's order.
  void append_key(std::vector<uint32_t>& out) const {
    KeyWriter key(out);
    each([&](const auto& c) { c.pack_key(ctx_, key); });
  }

 private:
  template <typename F>
  void each(F f) {
    std::apply([&](auto&... c) { (f(c), ...); }, list_);
  }
  template <typename F>
  void each(F f) const {
    std::apply([&](const auto&... c) { (f(c), ...); }, list_);
  }

  SpecContext ctx_;
  std::tuple<S5AgreementChecker, S1GradsChecker, S2HeldWeightChecker, S3ReshardChecker, S4OptimizerCheckpointChecker,
             S6SavedAdaptersChecker, S7DeltaWeightChecker>
      list_;
};

}  // namespace
}  // namespace spec

class SpecChecker::Impl : public spec::Checkers {
 public:
  explicit Impl(const Scenario& s) : Checkers(std::make_shared<const Scenario>(s), false) {}
};

SpecChecker::SpecChecker(const Scenario& s) : impl_(std::make_unique<Impl>(s)) {}
SpecChecker::SpecChecker(const SpecChecker& o) : impl_(std::make_unique<Impl>(*o.impl_)) {}
SpecChecker& SpecChecker::operator=(const SpecChecker& o) {
  impl_ = std::make_unique<Impl>(*o.impl_);
  return *this;
}
SpecChecker::SpecChecker(SpecChecker&& o) noexcept = default;
SpecChecker& SpecChecker::operator=(SpecChecker&& o) noexcept = default;
SpecChecker::~SpecChecker() = default;
void SpecChecker::step(const Op& op, const Observation* obs, size_t n, std::vector<Finding>& out) {
  impl_->step(op, obs, n, out);
}
void SpecChecker::append_key(std::vector<uint32_t>& out) const { impl_->append_key(out); }

std::vector<Finding> check_spec(const SeqFile& f, const std::vector<Observation>& obs) {
  std::vector<Finding> out;
  // `f` and `obs` outlive the checkers: they borrow both instead of copying.
  spec::Checkers checkers(std::shared_ptr<const Scenario>(std::shared_ptr<const Scenario>(), &f.scenario), true);
  size_t i = 0;
  while (i < obs.size()) {
    size_t j = i;
    while (j < obs.size() && obs[j].step == obs[i].step) ++j;
    checkers.step(f.ops[obs[i].step - 1], obs.data() + i, j - i, out);
    i = j;
  }
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return a.step != b.step ? a.step < b.step : a.rank < b.rank;
  });
  return out;
}

}  // namespace fsdpsim
