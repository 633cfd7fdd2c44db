// Waiting (sim/cli/progress.hpp) runs a thread beside the real backend's and the
// upstream pool's forks: it must write nothing while a fork holds the fork lock
// (real_backend/fork_guard.hpp), or a child may inherit the allocator mid-call
// and hang in the sanitizer build. Its line comes once the lock is free.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <sstream>
#include <thread>

#include "real_backend/fork_guard.hpp"
#include "sim/cli/progress.hpp"

using namespace fsdpsim;

namespace {

struct CapturedStderr {
  std::ostringstream text;
  std::streambuf* saved = std::cerr.rdbuf(text.rdbuf());
  ~CapturedStderr() { std::cerr.rdbuf(saved); }
};

}  // namespace

TEST(Waiting, WritesNothingWhileAForkHoldsTheLockAndItsLineOnceFree) {
  CapturedStderr err;
  cli::Progress progress("tool", false);
  {
    std::unique_lock<std::mutex> fork_in_flight(real::fork_mutex());
    cli::Waiting waiting(progress, "waiting on the ranks");
    std::this_thread::sleep_for(cli::Waiting::kAfter + std::chrono::milliseconds(700));
    EXPECT_EQ(err.text.str(), "");
    fork_in_flight.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_NE(err.text.str().find("tool: waiting on the ranks (2 s)"), std::string::npos) << err.text.str();
  }
}

TEST(Waiting, QuietStartsNoThreadAndWritesNothing) {
  CapturedStderr err;
  cli::Progress progress("tool", true);
  {
    cli::Waiting waiting(progress, "waiting on the ranks");
    std::this_thread::sleep_for(cli::Waiting::kAfter + std::chrono::milliseconds(300));
  }
  EXPECT_EQ(err.text.str(), "");
}
