// RapidCheck stateful property of the real backend: two persistent systems
// under test, the model (a stepped simulator) and the real backend's thread
// ranks (real::SteppedRanks), each extended by one op per command; after every
// command both must have observed the same thing. The model-only stateful
// properties are in properties/sim/core/stateful_model_test.cpp.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include "properties/rc_vocab.hpp"
#include "properties/stepped_model.hpp"
#include "properties/test_util.hpp"
#include "real_backend/stepped_ranks.hpp"
#include "sim/core/crosscheck.hpp"

using namespace fsdpsim;

namespace {

// Kept across test cases: the gloo group is built once.
real::SteppedRanks& stepped_ranks() {
  static real::SteppedRanks r(2, std::chrono::milliseconds(5000));
  return r;
}

struct ModelAndReal {
  test::SteppedModel model;
  real::SteppedRanks* real;
  void run(const Op& op) {
    if (model.stuck() || real->stuck()) return;  // both were stuck at the same step: its observations agreed
    const RunResult m = model.step(op);
    const real::RealResult r = real->step(op);
    RC_ASSERT(!r.infra_failure);
    RC_ASSERT(compare_observations(m.observations, r.observations) == std::vector<std::string>{});
  }
};

}  // namespace

// Seed 000's topology under either profile; every op kind its adapters and
// layers allow (no deferred adapters: no add/load; no adapter checkpoints).
RC_GTEST_PROP(Stateful, ModelAndRealBackendAgreeAfterEveryCommand, ()) {
  const std::string profile = *rc::gen::element<std::string>("upstream", "patched");
  const SeqFile f = parse_seq(test::seed000_header(2, profile));
  const real::RealResult begun = stepped_ranks().begin(f);
  RC_ASSERT(!begun.infra_failure);
  const rcgen::KindMask ks = rcgen::after_prepare_kinds() &
                             ~rcgen::kinds({OpKind::DeleteAdapter, OpKind::SaveAdapters, OpKind::LoadAdapters});
  ModelAndReal sut{test::SteppedModel(f), &stepped_ranks()};
  rcgen::run_commands(rcgen::OpModel(f, ks, false), sut, 0.12);
}
