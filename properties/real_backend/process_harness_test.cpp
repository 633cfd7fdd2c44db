// The real backend's process harness (real_backend/launcher.cpp, store_dir,
// signal_cleanup, rank_failure): store directories never leak, whatever ends
// the process; a slow rank is told from a dead one and named; the launch's
// environment is checked.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>

#include <iostream>

#include "model/vocab/source_error.hpp"
#include "properties/real_backend/harness_util.hpp"
#include "properties/test_util.hpp"
#include "real_backend/launcher.hpp"
#include "real_backend/store_dir.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

const char* kSeed000 = "eval\nmerge\nset_adapter other\ntrain_step\ntrain_step\ntrain_step\n";

// Runs `body` in a forked child and returns its wait status.
template <class Body>
int in_child(Body body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// A pool of `world` process ranks (300 ms timeout) runs seed 000 once; then
// rank `stopped` gets SIGSTOP and the pool runs it again: that run's result.
real::RealResult run_with_a_stopped_rank(int world, int stopped) {
  real::RealRanks ranks(world, real::RankMode::Processes, std::chrono::milliseconds(300));
  SeqFile f = parse_seq(seed000_header(world) + kSeed000);
  real::RealResult first = ranks.run(f);
  EXPECT_FALSE(first.infra_failure) << first.infra_message;
  std::vector<pid_t> kids = child_pids();
  EXPECT_EQ(kids.size(), static_cast<size_t>(world));
  if (kids.size() == static_cast<size_t>(world)) ::kill(kids[stopped], SIGSTOP);
  return ranks.run(f);
}

}  // namespace

// Issue 11: only 4 store directories were tracked for signal cleanup, in
// 64-byte slots (a TMPDIR of 49+ characters broke every pool), and SIGHUP was
// not handled. Six pools under a 150-character TMPDIR, then SIGHUP: the process
// dies of it, no directory and no rank process is left.
TEST(ProcessHarness, SighupRemovesEveryPoolsStoreUnderALongTmpdir) {
  PrivateTmpdir tmp(150);
  become_subreaper();
  int status = in_child([] {
    std::vector<std::unique_ptr<real::RealRanks>> pools;
    for (int i = 0; i < 6; ++i) {
      pools.push_back(std::make_unique<real::RealRanks>(1, real::RankMode::Processes, std::chrono::milliseconds(5000)));
      real::RealResult r = pools.back()->run(parse_seq(seed000_header(1) + kSeed000));
      if (r.infra_failure) _exit(10);
    }
    if (dir_entries(std::getenv("TMPDIR")).size() != 6) _exit(11);
    ::raise(SIGHUP);
    _exit(12);  // not reached: the handler chains to the default action
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGHUP);
  EXPECT_TRUE(tmp.entries().empty()) << *tmp.entries().begin();
  EXPECT_EQ(reap_all_children(), 0u);
}

// A SIGKILLed owner cannot clean up: its ranks die with it (PR_SET_PDEATHSIG),
// and the next pool started by any process removes its directory.
TEST(ProcessHarness, ADeadOwnersDirectoryIsRemovedAtTheNextStart) {
  PrivateTmpdir tmp;
  become_subreaper();
  int status = in_child([] {
    real::RealRanks ranks(2, real::RankMode::Processes, std::chrono::milliseconds(5000));
    if (ranks.run(parse_seq(seed000_header(2) + kSeed000)).infra_failure) _exit(10);
    ::kill(::getpid(), SIGKILL);
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(reap_all_children(), 0u);
  std::set<std::string> left = tmp.entries();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(starts_with(*left.begin(), "fsdpsim-real-")) << *left.begin();
  {
    real::RealRanks ranks(1, real::RankMode::Processes, std::chrono::milliseconds(5000));
    ASSERT_FALSE(ranks.run(parse_seq(seed000_header(1) + kSeed000)).infra_failure);
    EXPECT_EQ(tmp.entries().size(), 1u);  // its own
    EXPECT_EQ(tmp.entries().count(*left.begin()), 0u);
  }
  EXPECT_TRUE(tmp.entries().empty());
}

// The sweep's rule: gone only when nobody holds owner.lock and the owner is dead
// (or the directory is old); other names are not touched.
TEST(ProcessHarness, StaleSweepKeepsLockedAndYoungDirectories) {
  PrivateTmpdir tmp;
  pid_t dead = ::fork();
  if (dead == 0) _exit(0);
  ::waitpid(dead, nullptr, 0);
  auto make = [&](const std::string& name, bool lock_file) {
    std::string d = tmp.path() + "/" + name;
    std::filesystem::create_directories(d);
    std::ofstream(d + "/store") << "x";
    if (lock_file) std::ofstream(d + "/owner.lock");
    return d;
  };
  const std::string dead_dir = make("fsdpsim-real-" + std::to_string(dead) + "-aaaaaa", true);
  const std::string held_dir = make("fsdpsim-real-" + std::to_string(dead) + "-bbbbbb", true);
  const std::string young_dir = make("fsdpsim-real-" + std::to_string(::getppid()) + "-cccccc", false);
  const std::string other = make("fsdpsim-realistic-1-x", false);
  // A surviving rank of the held directory's pool: it holds the lock.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t holder = ::fork();
  if (holder == 0) {
    int fd = ::open((held_dir + "/owner.lock").c_str(), O_RDWR);
    ::flock(fd, LOCK_EX);
    char c = 0;
    (void)!::write(fds[1], &c, 1);
    ::pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  std::vector<std::string> removed = real::remove_stale_store_dirs(tmp.path());
  EXPECT_EQ(removed, std::vector<std::string>{dead_dir});
  EXPECT_EQ(tmp.entries(), (std::set<std::string>{"fsdpsim-real-" + std::to_string(dead) + "-bbbbbb",
                                                  "fsdpsim-real-" + std::to_string(::getppid()) + "-cccccc",
                                                  "fsdpsim-realistic-1-x"}));
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  EXPECT_EQ(real::remove_stale_store_dirs(tmp.path()), std::vector<std::string>{held_dir});
  ::close(fds[0]), ::close(fds[1]);
  (void)young_dir, (void)other;
}

// Issue 11: a SIGSTOPped rank 1 was blamed on rank 0 (whose collective timed
// out waiting for it). The report names rank 1 first as too slow, and shows
// rank 0's own error and the collective it waited in.
TEST(ProcessHarness, AStoppedRankIsBlamedNotThePeerThatWaitedForIt) {
  PrivateTmpdir tmp;
  real::RealResult r = run_with_a_stopped_rank(2, 1);
  ASSERT_TRUE(r.infra_failure);
  EXPECT_TRUE(starts_with(r.infra_message, "rank 1 too slow: stopped (SIGSTOP or a debugger) while ")) << r.infra_message;
  EXPECT_NE(r.infra_message.find("; rank 0: gloo: "), std::string::npos) << r.infra_message;
  EXPECT_NE(r.infra_message.find("(in all_gather("), std::string::npos) << r.infra_message;
  EXPECT_EQ(r.infra_message.find("died"), std::string::npos) << r.infra_message;
  std::cout << "  reported: " << r.infra_message << "\n";
  EXPECT_EQ(child_pids().size(), 0u);  // killed and reaped, stopped or not
  EXPECT_TRUE(tmp.entries().empty());
}

// A rank that exits on its own is "died", with its exit status and where it was.
TEST(ProcessHarness, ACrashedRankDiedWithItsStatusAndStep) {
  PrivateTmpdir tmp;
  real::RealRanks ranks(2, real::RankMode::Processes, std::chrono::milliseconds(2000));
  ::setenv("FSDPSIM_CRASH_RANK", "1", 1);
  real::RealResult r = ranks.run(parse_seq(seed000_header(2) + kSeed000));
  ::unsetenv("FSDPSIM_CRASH_RANK");
  ASSERT_TRUE(r.infra_failure);
  EXPECT_TRUE(starts_with(r.infra_message, "rank 1 died (exit 9) while running step 1 (eval)")) << r.infra_message;
}

// Issue 11: FSDPSIM_CRASH_RANK= (empty) crashed rank 0 (atoi("") == 0); a value
// that is not a rank number is bad input naming the variable.
TEST(ProcessHarness, CrashRankHookIsParsedStrictly) {
  PrivateTmpdir tmp;
  SeqFile f = parse_seq(seed000_header(2) + kSeed000);
  ::setenv("FSDPSIM_CRASH_RANK", "", 1);
  real::RealResult r = real::run_real(f, real::RankMode::Processes, std::chrono::milliseconds(5000));
  EXPECT_FALSE(r.infra_failure) << r.infra_message;
  real::RealRanks fresh(2, real::RankMode::Processes, std::chrono::milliseconds(5000));
  ::setenv("FSDPSIM_CRASH_RANK", "one", 1);
  try {
    fresh.run(f);
    ADD_FAILURE() << "no error for FSDPSIM_CRASH_RANK=one";
  } catch (const SourceError& e) {
    EXPECT_EQ(std::string(e.what()), "<environment>: FSDPSIM_CRASH_RANK expects a rank number, got 'one'");
  }
  ::unsetenv("FSDPSIM_CRASH_RANK");
  EXPECT_TRUE(tmp.entries().empty());
}

// Issue 11: `worker` died of std::stoi (exit 4) on a bad variable, took a RANK
// beyond the world, and wrapped MASTER_PORT=99999 to 34463.
TEST(ProcessHarness, TorchrunEnvironmentIsValidated) {
  auto error_for = [](std::vector<std::pair<const char*, const char*>> vars) -> std::string {
    for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
    for (auto& [k, v] : vars) ::setenv(k, v, 1);
    std::string out = "ok";
    try {
      real::torchrun_env(2);
    } catch (const SourceError& e) {
      out = e.what();
    }
    for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
    return out;
  };
  std::vector<std::pair<const char*, const char*>> good = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  EXPECT_EQ(error_for(good), "ok");
  auto with = [&](const char* k, const char* v) {
    auto vars = good;
    for (auto& kv : vars)
      if (std::string(kv.first) == k) kv.second = v;
    return error_for(vars);
  };
  EXPECT_EQ(with("RANK", "abc"), "<environment>: RANK expects a rank 0..1 (below WORLD_SIZE 2), got 'abc'");
  EXPECT_EQ(with("RANK", "2"), "<environment>: RANK expects a rank 0..1 (below WORLD_SIZE 2), got '2'");
  EXPECT_EQ(with("RANK", "-1"), "<environment>: RANK expects a rank 0..1 (below WORLD_SIZE 2), got '-1'");
  EXPECT_EQ(with("MASTER_PORT", "99999"), "<environment>: MASTER_PORT expects a port 1..65535, got '99999'");
  EXPECT_EQ(with("WORLD_SIZE", "3"), "<environment>: WORLD_SIZE is 3 but the file says world 2");
  EXPECT_EQ(with("WORLD_SIZE", "2x"), "<environment>: WORLD_SIZE expects a world size of at least 1, got '2x'");
  EXPECT_EQ(with("MASTER_ADDR", ""),
            "<environment>: MASTER_ADDR is not set (a torchrun-style launch sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
}

// Issue 11: with nothing moving (here the only rank is stopped) the parent said
// "a rank did not answer", naming none. It waits while any rank makes
// progress, then names each rank and where it is.
TEST(ProcessHarness, ARunWhereNoRankMovesNamesEachRank) {
  PrivateTmpdir tmp;
  real::RealResult r = run_with_a_stopped_rank(1, 0);
  ASSERT_TRUE(r.infra_failure);
  EXPECT_TRUE(starts_with(r.infra_message, "no rank made progress for ")) << r.infra_message;
  EXPECT_NE(r.infra_message.find("; rank 0 too slow: stopped (SIGSTOP or a debugger) while waiting for its next sequence"),
            std::string::npos)
      << r.infra_message;
  EXPECT_TRUE(tmp.entries().empty());
}

// Issue 11: `--world 16 --timeout 100` said "rank 2 died (exit 3)" in half the
// runs: joining 16 ranks takes longer than 100 ms. The ranks' timeout grows
// with the world, so fresh pools join every time.
TEST(ProcessHarness, SixteenRanksJoinUnderAShortTimeout) {
  PrivateTmpdir tmp;
  SeqFile f = parse_seq(seed000_header(16) + kSeed000);
  for (int i = 0; i < 3; ++i) {
    real::RealResult r = real::run_real(f, real::RankMode::Processes, std::chrono::milliseconds(100));
    ASSERT_FALSE(r.infra_failure) << "pool " << i << ": " << r.infra_message;
  }
}

// Issue 11: a valid 4096x4096 layer timed out at the default timeout (the
// parent's deadline was a fixed formula of the timeout and the op count). The
// same at a quarter of the elements and a 100 ms timeout: the ranks' timeout
// grows with the elements, and the parent waits while they make progress.
TEST(ProcessHarness, ALargeLayerRunsUnderAShortTimeout) {
  PrivateTmpdir tmp;
  SeqFile f = parse_seq("world 2\nlayer big 2048 2048\nadapter a r=8 alpha=8 targets=big\nfully_shard root\n---\n"
                        "train_step\ntrain_step\ntrain_step\ntrain_step\ntrain_step\ntrain_step\nmerge\neval\neval\neval\n");
  real::RealResult r = real::run_real(f, real::RankMode::Processes, std::chrono::milliseconds(100));
  ASSERT_FALSE(r.infra_failure) << r.infra_message;
  EXPECT_EQ(r.observations.size(), 20u);
}

namespace {
volatile sig_atomic_t g_cli_saw_sigint = 0;
void cli_handler(int) { g_cli_saw_sigint = 1; }
}  // namespace

// A CLI that handles SIGINT itself (to print partial results) keeps its
// handler: the harness kills the ranks, removes the store, calls it, and the
// run that was cut short reports the interruption; the process lives on and the
// pool starts fresh ranks for the next sequence.
TEST(ProcessHarness, AnInterruptChainsToTheHandlerInstalledBefore) {
  PrivateTmpdir tmp;
  struct sigaction cli {}, saved {};
  cli.sa_handler = cli_handler;
  ::sigaction(SIGINT, &cli, &saved);
  {
    real::RealRanks ranks(2, real::RankMode::Processes, std::chrono::milliseconds(5000));
    std::string ops;
    for (int i = 0; i < 20; ++i) ops += "train_step\n";
    SeqFile big = parse_seq("world 2\nlayer big 2048 2048\nadapter a r=8 alpha=8 targets=big\nfully_shard root\n---\n" + ops);
    std::thread interrupter([] {  // once the ranks are up and busy
      while (child_pids().size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ::kill(::getpid(), SIGINT);
    });
    real::RealResult r = ranks.run(big);
    interrupter.join();
    EXPECT_EQ(g_cli_saw_sigint, 1);
    ASSERT_TRUE(r.infra_failure);
    EXPECT_TRUE(starts_with(r.infra_message, "interrupted by Interrupt; ranks killed")) << r.infra_message;
    EXPECT_TRUE(tmp.entries().empty());
    real::RealResult again = ranks.run(parse_seq(seed000_header(2) + kSeed000));
    EXPECT_FALSE(again.infra_failure) << again.infra_message;
  }
  EXPECT_TRUE(tmp.entries().empty());
  ::sigaction(SIGINT, &saved, nullptr);
}
