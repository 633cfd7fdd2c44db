// RapidCheck stateful properties of the model: the Sut is a persistent
// simulator (stepped_model.hpp) that each command extends by one op; the
// Model is the op rules (properties/rc_vocab.hpp). RapidCheck draws the
// scenario and the commands, and shrinks a failing sequence itself.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <iostream>

#include "properties/rc_vocab.hpp"
#include "properties/stepped_model.hpp"
#include "properties/test_util.hpp"

namespace fsdpsim {
namespace {

using rcgen::OpModel;

// After every op: the twin simulator saw the same (S8), one rank never hangs
// or mismatches, and the stepped run is the run of the whole sequence so far
// (observations and findings): the premise of the explorer's one-op extensions.
struct SteppedEqualsWhole {
  test::SteppedModel model;
  void run(const Op& op) {
    if (model.stuck()) return;  // a rank waits in a collective: the next op no longer extends one run
    const RunResult r = model.step(op);
    RC_ASSERT(r.observations == model.twin().observations);
    RC_ASSERT(r.trace_hash == model.twin().trace_hash);
    if (model.topology().world == 1) RC_ASSERT(!r.hang && !r.mismatch);
    Simulator whole(model.topology());
    const RunResult w = whole.run(model.file().ops);
    RC_ASSERT(w.observations == model.observations());
    RC_ASSERT(check_spec(model.file(), w.observations) == model.findings());
  }
};

RC_GTEST_PROP(StatefulModel, SteppedRunIsDeterministicAndTheWholeRun, ()) {
  const int world = *rc::gen::inRange(1, 4);
  SeqFile f;
  f.scenario = *rcgen::scenario(world);
  f.ops = *rcgen::preamble(f.scenario);
  SteppedEqualsWhole sut{test::SteppedModel(f)};
  // Only ops every rank runs: an `@R` op's collectives pair with a later op's.
  rcgen::run_commands(OpModel(f, rcgen::after_prepare_kinds(), false), sut, 0.3);
}

// No finding of `spec` ("" for any) after any op.
struct KeepsTheSpec {
  test::SteppedModel model;
  std::string spec;
  std::vector<Op>* failure = nullptr;  // where to record the ops of a failing run
  void run(const Op& op) {
    std::vector<Finding> fresh;
    model.step(op, &fresh);
    std::vector<std::string> texts;
    for (const auto& fd : fresh)
      if (spec.empty() || fd.spec == spec) texts.push_back(fd.text);
    if (!texts.empty() && failure) *failure = model.file().ops;
    RC_ASSERT(texts == std::vector<std::string>{});
  }
};

// The ops whose FSDP2 hazards have a known fix (set_adapter, optimizer
// checkpoints; OpRules::has_known_fix): under `patched` the spec
// must hold for any sequence of them.
RC_GTEST_PROP(StatefulModel, PatchedKeepsTheSpecForFixedOps, ()) {
  const int world = *rc::gen::inRange(1, 3);
  const std::string raf = *rc::gen::element<std::string>("true", "false", "none");
  const SeqFile f = parse_seq(test::seed000_header(world, "patched", raf));
  rcgen::KindMask fixed = 0;
  for (int k = 0; k < kOpKindCount; ++k)
    if (OpRules::has_known_fix(static_cast<OpKind>(k))) fixed |= rcgen::kind_bit(static_cast<OpKind>(k));
  fixed &= rcgen::after_prepare_kinds();
  KeepsTheSpec sut{test::SteppedModel(f), ""};
  OpModel rules(f, fixed, false);
  rules.list_set_adapter = false;
  rcgen::run_commands(rules, sut, 0.3);
}

// The shrunk S1 counterexample RapidCheck finds under `profile` on seed 000's
// topology (rc::check: RC_PARAMS sets its seed and budget), whether it kept a
// merge and a set_adapter.
struct Shrunk {
  std::vector<Op> ops;
  std::string shown;
  bool merge = false, set_adapter = false;
};
Shrunk shrunk_seed000(const std::string& profile) {
  Shrunk out;
  const bool held = rc::check("S1 holds on seed 000's topology under " + profile, [&] {
    const SeqFile f = parse_seq(test::seed000_header(2, profile));
    const rcgen::KindMask ks = rcgen::kinds({OpKind::Eval, OpKind::Forward, OpKind::TrainStep, OpKind::Merge,
                                             OpKind::Unmerge, OpKind::SetAdapter, OpKind::Reshard});
    // RapidCheck accepts only failing shrinks: the last failure recorded is the minimal one.
    KeepsTheSpec sut{test::SteppedModel(f), "S1", &out.ops};
    OpModel rules(f, ks, false);
    rules.list_set_adapter = false;  // PeftModel.set_adapter, seed 000's call
    rcgen::run_commands(rules, sut, 1.0);
  });
  EXPECT_FALSE(held) << "no counterexample found";
  for (const auto& op : out.ops) {
    out.shown += op_text(op) + "; ";
    out.merge = out.merge || op.kind == OpKind::Merge;
    out.set_adapter = out.set_adapter || op.kind == OpKind::SetAdapter;
  }
  EXPECT_LE(out.ops.size(), 6u) << out.shown;
  std::cout << profile << ": shrunk counterexample: " << out.shown << "\n";
  return out;
}

// Under the pinned versions (peft 0.21.2: set_adapter never reshards) a
// set_adapter after a no_grad forward is enough: the merge shrinks away.
TEST(StatefulModel, RapidCheckFindsAndShrinksSeed000UnderUpstream) {
  Shrunk r = shrunk_seed000("upstream");
  EXPECT_TRUE(r.set_adapter && !r.merge) << r.shown;
}

// Under PEFT main as #3872 describes it (skip_merged) the bug needs a merge.
TEST(StatefulModel, RapidCheckFindsAndShrinksSeed000UnderPeftMain3872) {
  Shrunk r = shrunk_seed000("peft-main-3872");
  EXPECT_TRUE(r.set_adapter && r.merge) << r.shown;
}

}  // namespace
}  // namespace fsdpsim
