// The driver: every observation goes to each checker in the order S5 (stuck
// ranks), intent, S1, S2, S3, S4, S6, S7, then S5's agreement once a step's
// ranks are all seen; findings come out in that order.
#include "model/spec/spec_checks.hpp"

#include <algorithm>

#include "model/spec/intent_tracker.hpp"
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

// The checkers side by side with what each remembers between steps.
class Checkers {
 public:
  // `borrow`: the observations outlive the checkers (see S3ReshardChecker).
  Checkers(std::shared_ptr<const Scenario> s, bool borrow)
      : ctx_(std::move(s)),
        intent_(ctx_),
        s1_(ctx_.world()),
        s2_(ctx_.world(), ctx_.layer_count()),
        s3_(ctx_.world(), borrow) {}

  void step(const Op& op, const Observation* obs, size_t n, std::vector<Finding>& out) {
    for (size_t k = 0; k < n; ++k) observe(op, obs[k], out);
    s5_.after_step(ctx_, obs, n, out);
  }

  // Every field the checks read on a later step, in one fixed layout: S5's
  // latches, then per rank one word of intent (bits 0-23), S1 (24-25) and S3
  // (26) flags, S2's per-layer words, S3's previous observation.
  void append_key(std::vector<uint32_t>& out) const {
    out.push_back(0x5bec0000u | s5_.key_bits());
    for (int r = 0; r < ctx_.world(); ++r) {
      out.push_back(intent_.key_bits(r) | s1_.key_bits(r) | s3_.key_bits(r));
      s2_.append_key(r, out);
      s3_.append_key(ctx_, r, out);
    }
  }

 private:
  void observe(const Op& op, const Observation& o, std::vector<Finding>& out) {
    if (s5_.stuck(o, out)) return;  // the rank is stuck in the op: nothing more is observable
    intent_.observe(ctx_, op, o);
    s1_.observe(ctx_, op, o, intent_.intended(o.rank), out);
    s2_.observe(o, out);
    s3_.observe(ctx_, op, o, out);
    check_optimizer_checkpoint(op, o, out);
    check_saved_adapters(ctx_, op, o, out);
    check_delta_weight(op, o, out);
  }

  SpecContext ctx_;
  IntentTracker intent_;
  S1GradsChecker s1_;
  S2HeldWeightChecker s2_;
  S3ReshardChecker s3_;
  S5AgreementChecker s5_;
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
