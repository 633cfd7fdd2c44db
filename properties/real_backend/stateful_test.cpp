// RapidCheck stateful properties: one command per op. The model (the
// simulator) is the Model, the real backend on persistent thread ranks is the
// Sut; after every command both must have observed the same thing. Plus: the
// spec holds under `patched` for the ops whose bugs have known fixes, and
// RapidCheck finds seed 000 under `upstream` and shrinks it.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include "properties/test_util.hpp"
#include "sim/crosscheck.hpp"

using namespace fsdpsim;

namespace {

const char* const kAdapters[] = {"default", "other"};

// The seed 000 topology: the scenario every command sequence runs on.
std::string header(int world, const std::string& profile) { return test::seed000_header(world, profile); }

struct SeqState {
  std::vector<Op> ops;
  bool pending_forward = false;  // a grad-enabled forward awaits its backward
  bool disabled = false;
  bool saved_optimizer = false;
};

// What each command checks after it ran: model == real, or the spec (all of
// it, or only S1) on the model.
enum class Judge { CrossCheck, NoFinding, NoS1 };

struct Backends {
  SeqFile file;
  RealPools* pools;
  Judge judge;
};

// The last command sequence that failed a NoS1 check: after shrinking, the
// minimal counterexample (RapidCheck only accepts failing shrinks).
std::vector<Op> g_last_s1_failure;

using Cmd = rc::state::Command<SeqState, Backends>;

// A uniform choice whatever the current size (sized generators start at the minimum).
int pick(int n) { return *rc::gen::resize(100, rc::gen::inRange(0, n)); }

// One command per op kind; K picks it, the constructor draws its arguments.
template <OpKind K>
struct OpCommand : Cmd {
  Op op;
  OpCommand() {
    op.kind = K;
    if (K == OpKind::SetAdapter || K == OpKind::Merge) {
      bool with_name = K == OpKind::SetAdapter || pick(2) == 1;
      if (with_name) op.names = {kAdapters[pick(2)]};
    }
    if (K == OpKind::Reshard) {
      int which = pick(3);
      if (which > 0) op.names = {which == 1 ? "root" : "lin0"};
    }
    if (K == OpKind::DeltaWeight) op.names = {pick(2) ? "lin1" : "lin0"};
  }
  void checkPreconditions(const SeqState& s) const override {
    if (K == OpKind::Backward) RC_PRE(s.pending_forward);
    if (K == OpKind::DisableEnter) RC_PRE(!s.disabled);
    if (K == OpKind::DisableExit) RC_PRE(s.disabled);
    if (K == OpKind::LoadOptimizer) RC_PRE(s.saved_optimizer);
  }
  void apply(SeqState& s) const override {
    s.ops.push_back(op);
    if (K == OpKind::Forward) s.pending_forward = true;
    if (K == OpKind::Backward || K == OpKind::TrainStep || K == OpKind::Eval) s.pending_forward = false;
    if (K == OpKind::DisableEnter) s.disabled = true;
    if (K == OpKind::DisableExit) s.disabled = false;
    if (K == OpKind::SaveOptimizer) s.saved_optimizer = true;
  }
  void run(const SeqState& s, Backends& b) const override {
    SeqFile f = b.file;
    f.ops = s.ops;
    f.ops.push_back(op);
    if (b.judge == Judge::CrossCheck) {
      BackendRun r = run_backend(f, kModelAndReal, *b.pools, false);
      RC_ASSERT(!r.infra_failure);
      RC_ASSERT(r.divergences == std::vector<std::string>{});
      return;
    }
    RunResult r = run_checked(f);
    std::vector<std::string> texts;
    for (const auto& fd : r.findings)
      if (b.judge == Judge::NoFinding || fd.spec == "S1") texts.push_back(fd.text);
    if (b.judge == Judge::NoS1 && !texts.empty()) g_last_s1_failure = f.ops;
    RC_ASSERT(texts == std::vector<std::string>{});
  }
  void show(std::ostream& os) const override { os << op_text(op); }
};

auto all_commands() {
  return rc::state::gen::execOneOfWithArgs<
      OpCommand<OpKind::Forward>, OpCommand<OpKind::Eval>, OpCommand<OpKind::Backward>, OpCommand<OpKind::Step>,
      OpCommand<OpKind::TrainStep>, OpCommand<OpKind::ZeroGrad>, OpCommand<OpKind::Merge>, OpCommand<OpKind::Unmerge>,
      OpCommand<OpKind::SetAdapter>, OpCommand<OpKind::DisableEnter>, OpCommand<OpKind::DisableExit>,
      OpCommand<OpKind::Reshard>, OpCommand<OpKind::Unshard>, OpCommand<OpKind::StateDict>,
      OpCommand<OpKind::SaveOptimizer>, OpCommand<OpKind::LoadOptimizer>, OpCommand<OpKind::DeltaWeight>>();
}

// The ops whose FSDP2 hazards have a known fix (set_adapter, optimizer
// checkpoints): under `patched` the spec must hold for any sequence of them.
auto fixed_commands() {
  return rc::state::gen::execOneOfWithArgs<
      OpCommand<OpKind::Forward>, OpCommand<OpKind::Eval>, OpCommand<OpKind::Backward>, OpCommand<OpKind::Step>,
      OpCommand<OpKind::TrainStep>, OpCommand<OpKind::ZeroGrad>, OpCommand<OpKind::SetAdapter>, OpCommand<OpKind::Reshard>,
      OpCommand<OpKind::StateDict>, OpCommand<OpKind::SaveOptimizer>, OpCommand<OpKind::LoadOptimizer>>();
}

RealPools& pools() {
  static RealPools p(real::RankMode::Threads, std::chrono::milliseconds(5000));
  return p;
}

}  // namespace

// The model and the real backend observe the same thing after every command.
RC_GTEST_PROP(Stateful, ModelAndRealBackendAgreeAfterEveryCommand, ()) {
  const std::string profile = *rc::gen::element<std::string>("upstream", "patched");
  Backends sut{parse_seq(header(2, profile)), &pools(), Judge::CrossCheck};
  SeqState s0;
  auto cmds = *rc::gen::scale(0.12, rc::state::gen::commands(s0, all_commands()));
  rc::state::runAll(cmds, s0, sut);
}

// Under `patched` no spec check fires for the ops with known fixes.
RC_GTEST_PROP(Stateful, PatchedKeepsTheSpecForFixedOps, ()) {
  const int world = *rc::gen::inRange(1, 3);
  const std::string raf = *rc::gen::element<std::string>("true", "false", "none");
  Backends sut{parse_seq(test::seed000_header(world, "patched", raf)), &pools(), Judge::NoFinding};
  SeqState s0;
  auto cmds = *rc::gen::scale(0.3, rc::state::gen::commands(s0, fixed_commands()));
  rc::state::runAll(cmds, s0, sut);
}

// The harness finds things: under `upstream`, RapidCheck reaches seed 000 (the
// wrong adapter trains after set_adapter on a merged model) and shrinks it to
// at most 6 commands.
// The shrunk S1 counterexample RapidCheck finds under `profile`: at most 6
// ops, whether it kept a merge and a set_adapter.
struct Shrunk {
  std::string shown;
  bool merge = false, set_adapter = false;
};
Shrunk shrunk_seed000(const std::string& profile) {
  g_last_s1_failure.clear();
  rc::detail::TestParams params;
  params.seed = 7;
  params.maxSuccess = 2000;
  params.maxSize = 40;
  auto result = rc::detail::checkTestable([&] {
    Backends sut{parse_seq(header(2, profile)), &pools(), Judge::NoS1};
    SeqState s0;
    auto cmds = *rc::state::gen::commands(
        s0, rc::state::gen::execOneOfWithArgs<OpCommand<OpKind::Eval>, OpCommand<OpKind::Forward>, OpCommand<OpKind::TrainStep>,
                                              OpCommand<OpKind::Merge>, OpCommand<OpKind::Unmerge>, OpCommand<OpKind::SetAdapter>,
                                              OpCommand<OpKind::Reshard>>());
    rc::state::runAll(cmds, s0, sut);
  }, rc::detail::TestMetadata{}, params);
  EXPECT_TRUE(result.template is<rc::detail::FailureResult>()) << "no counterexample found";
  Shrunk out;
  for (const auto& op : g_last_s1_failure) {
    out.shown += op_text(op) + "; ";
    out.merge = out.merge || op.kind == OpKind::Merge;
    out.set_adapter = out.set_adapter || op.kind == OpKind::SetAdapter;
  }
  EXPECT_LE(g_last_s1_failure.size(), 6u) << out.shown;
  std::cout << profile << ": shrunk counterexample: " << out.shown << "\n";
  return out;
}

// Under the pinned versions (peft 0.21.2: set_adapter never reshards) a
// set_adapter after a no_grad forward is enough: the merge shrinks away.
TEST(Stateful, RapidCheckFindsAndShrinksSeed000UnderUpstream) {
  Shrunk r = shrunk_seed000("upstream");
  EXPECT_TRUE(r.set_adapter && !r.merge) << r.shown;
}

// Under PEFT main as #3872 describes it (skip_merged) the bug needs a merge.
TEST(Stateful, RapidCheckFindsAndShrinksSeed000UnderPeftMain3872) {
  Shrunk r = shrunk_seed000("peft-main-3872");
  EXPECT_TRUE(r.set_adapter && r.merge) << r.shown;
}

