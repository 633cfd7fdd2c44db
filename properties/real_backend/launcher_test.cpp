// The real backend's ranks (real_backend/launcher.cpp): thread and process
// ranks agree bit for bit, failures are reported, crashed ranks are cleaned up.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <set>

#include "properties/real_backend/harness_util.hpp"
#include "properties/test_util.hpp"
#include "sim/core/crosscheck.hpp"
#include "sim/core/generator.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

const std::chrono::milliseconds kTimeout(5000);

// "ag root; rs lin0; ...": the collectives' ops and groups, in issue order.
std::string names(const Observation& o) {
  std::string out;
  for (const auto& c : o.collectives) out += std::string(c.op == CollOp::AllGather ? "ag " : "rs ") + c.group + "; ";
  return out;
}

const char* kSeed000 = "eval\nmerge\nset_adapter other\ntrain_step\ntrain_step\ntrain_step\n";

}  // namespace

TEST(RealRanks, Seed000OnRealTensors) {
  for (int world : {1, 2}) {
    SeqFile f = parse_seq(seed000_header(world) + kSeed000);
    real::RealResult r = real::run_real(f, real::RankMode::Processes, kTimeout);
    ASSERT_FALSE(r.infra_failure) << r.infra_message;
    for (int rank = 0; rank < world; ++rank) {
      const Observation& s1 = obs_at(r.observations, 4, rank);
      ASSERT_EQ(s1.status, Status::Ok) << s1.message;
      EXPECT_EQ(*s1.grads, std::vector<std::string>{"other"});
      const Observation& s2 = obs_at(r.observations, 5, rank);
      EXPECT_EQ(s2.status, Status::NoGradFn);
      EXPECT_EQ(s2.message, "element 0 of tensors does not require grad and does not have a grad_fn");  // libtorch's own
    }
    // torch 2.13 issues no collective at world 1 (eval, merge, set_adapter, train_step alike).
    for (const auto& o : r.observations)
      if (world == 1 || o.step == 1) EXPECT_EQ(o.collectives.empty(), world == 1) << "step " << o.step;
  }
}

// torch 2.13 FSDPParamGroup._backward_prefetch on real ranks: the previous
// group's all-gather comes before this group's reduce-scatter (seed 004's
// topology, as measured upstream); a prefetch aimed by an earlier eval's order
// at a group that already reduced is gathered but leaves it SHARDED; the hook order.
TEST(RealRanks, BackwardPrefetchOrderAndStaleTargets) {
  SeqFile f = parse_seq(
      "world 2\nlayer vis 8 8\nlayer lin0 8 16\nlayer lin1 16 2\nadapter default r=4 alpha=8 targets=vis,lin0,lin1\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard lin1 reshard_after_forward=true\n"
      "fully_shard root reshard_after_forward=none\n---\ntrain_step\n");
  real::RealResult r = real::run_real(f, real::RankMode::Threads, kTimeout);
  ASSERT_FALSE(r.infra_failure) << r.infra_message;
  for (int rank : {0, 1})
    EXPECT_EQ(names(obs_at(r.observations, 1, rank)), "ag root; ag lin0; ag lin1; ag lin1; ag lin0; rs lin1; rs lin0; rs root; ");
  SeqFile g = parse_seq(
      "world 2\nlayer lin0 8 8\nlayer lin1 8 4\nadapter default r=4 alpha=8 targets=lin0,lin1\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard lin1 reshard_after_forward=true\n"
      "fully_shard root reshard_after_forward=true\n---\neval\ntrain_step\n");
  r = real::run_real(g, real::RankMode::Threads, kTimeout);
  ASSERT_FALSE(r.infra_failure) << r.infra_message;
  for (int rank : {0, 1}) {
    const Observation& o = obs_at(r.observations, 2, rank);
    EXPECT_EQ(names(o), "ag lin0; ag lin1; ag lin1; ag lin0; rs lin1; ag lin1; rs lin0; ");
    for (const auto& gs : o.groups) EXPECT_EQ(gs.state, ShardedState::Sharded) << gs.name;
  }
  // torch 2.13 FSDPState._register_pre_backward_hook: libtorch fires the hooks on the
  // model's output in registration order, so a child group holding the last layer
  // pre-backwards before the root (seed 002's topology, measured upstream).
  r = real::run_real(parse_seq("world 2\nlayer lin0 8 8\nlayer moe 8 4\nadapter default r=3 alpha=6 targets=lin0,moe\n"
                               "fully_shard moe reshard_after_forward=true\nfully_shard root reshard_after_forward=true\n"
                               "---\ntrain_step\n"),
                     real::RankMode::Threads, kTimeout);
  ASSERT_FALSE(r.infra_failure) << r.infra_message;
  for (int rank : {0, 1}) EXPECT_EQ(names(obs_at(r.observations, 1, rank)), "ag root; ag moe; ag moe; ag root; rs moe; rs root; ");
}

TEST(RealRanks, ThreadAndProcessRanksGiveIdenticalObservations) {
  real::RealRanks threads(2, real::RankMode::Threads, kTimeout), procs(2, real::RankMode::Processes, kTimeout);
  std::vector<SeqFile> files = {parse_seq(seed000_header(2) + kSeed000)};
  for (uint64_t seed = 100; seed < 130; ++seed) {
    Prng rng(seed);
    files.push_back(generate_seq(rng, {}));
  }
  for (const auto& f : files) {
    real::RealResult a = threads.run(f), b = procs.run(f);
    ASSERT_FALSE(a.infra_failure || b.infra_failure) << a.infra_message << b.infra_message;
    EXPECT_EQ(observations_hash(a.observations), observations_hash(b.observations)) << print_seq(f);
  }
}

TEST(RealRanks, HangIsReportedLikeTheModelDoes) {
  SeqFile f = parse_seq(seed000_header(2) + "@0 unshard lin0\n");
  real::RealResult r = real::run_real(f, real::RankMode::Processes, kTimeout);
  ASSERT_FALSE(r.infra_failure) << r.infra_message;
  ASSERT_EQ(r.observations.size(), 1u);
  EXPECT_EQ(r.observations[0].status, Status::Hang);
  RunResult model = run_checked(f);
  EXPECT_EQ(r.observations[0].message, model.observations[0].message);
  EXPECT_NE(r.observations[0].message.find("rank 1 issues no matching collective"), std::string::npos);
}

TEST(RealRanks, DifferentParametersInEqualSizedCollectivesAreCrossPaired) {
  // Two adapters of the same shape: ranks training different ones reduce-scatter
  // the same number of elements; gloo pairs them by bytes and mixes them silently.
  SeqFile f = parse_seq(
      "world 2\nprofile patched\nlayer l 6 2\nadapter a r=1 alpha=1 targets=l\nadapter b r=1 alpha=1 targets=l\n"
      "fully_shard root\n---\n@1 set_adapter b\ntrain_step\n");
  real::RealResult r = real::run_real(f, real::RankMode::Threads, kTimeout);
  ASSERT_FALSE(r.infra_failure) << r.infra_message;
  RunResult model = run_checked(f);
  EXPECT_TRUE(compare_observations(model.observations, r.observations).empty());
  const Observation& o = obs_at(r.observations, 2, 0);
  EXPECT_EQ(o.status, Status::Ok);
  EXPECT_NE(o.message.find("cross-paired: rank 0 in reduce_scatter(root, 7) of l.lora_A.a,l.lora_B.a at step 2; "
                           "rank 1 in reduce_scatter(root, 7) of l.lora_A.b,l.lora_B.b at step 2"),
            std::string::npos)
      << o.message;
}

TEST(RealRanks, ACrashedRankIsReportedAndNothingIsLeftBehind) {
  // A private TMPDIR: the pool's store directory goes there and must be gone after.
  PrivateTmpdir tmp;
  const std::string tmpl = tmp.path();
  SeqFile f = parse_seq(seed000_header(2) + kSeed000);
  {
    real::RealRanks ranks(2, real::RankMode::Processes, std::chrono::milliseconds(2000));
    ::setenv("FSDPSIM_CRASH_RANK", "1", 1);
    real::RealResult r = ranks.run(f);
    ::unsetenv("FSDPSIM_CRASH_RANK");
    EXPECT_TRUE(r.infra_failure);
    EXPECT_NE(r.infra_message.find("rank 1 died (exit 9)"), std::string::npos) << r.infra_message;
    // No worker process is left: every child was reaped.
    EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_TRUE(dir_entries(tmpl).empty());
    // The pool starts fresh ranks for the next sequence.
    real::RealResult again = ranks.run(f);
    ASSERT_FALSE(again.infra_failure) << again.infra_message;
    EXPECT_EQ(again.observations.size(), 12u);
  }
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_TRUE(dir_entries(tmpl).empty());
}
