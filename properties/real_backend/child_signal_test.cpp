// real_backend/child_signal.hpp: the only way fsdpsim signals or waits for a
// process refuses pid and group ids <= 1 (kill(0) is the caller's own group,
// kill(-1) everyone; issue 54), and nothing else in the project calls kill,
// killpg or waitpid. Group ids are probed with signal 0 where a broken guard
// would reach beyond this test's own process group: a failure then is an
// assertion, never a kill.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "real_backend/child_signal.hpp"

using namespace fsdpsim::real;

namespace {

// Runs `body` in a forked child leading a process group of its own; its wait status.
template <class Body>
int in_own_group(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST(ChildSignal, RefusesZeroOneAndNegativeIds) {
  for (pid_t id : {0, 1, -1, -7}) {
    errno = 0;
    EXPECT_FALSE(signal_child(id, 0)) << id;
    EXPECT_EQ(errno, EINVAL) << id;
    errno = 0;
    EXPECT_FALSE(signal_child_group(id, 0)) << id;
    EXPECT_EQ(errno, EINVAL) << id;
    EXPECT_FALSE(process_exists(id)) << id;
    int status = 0;
    EXPECT_EQ(wait_child(id, &status, WNOHANG), -1) << id;
  }
}

// A zeroed table entry passed as a group id: kill(-0) would be kill(0), the
// whole group of the caller. Here the caller is alone in its group: it would die.
TEST(ChildSignal, AZeroGroupIdKillsNobody) {
  const int status = in_own_group([] {
    signal_child_group(0, SIGKILL);
    signal_child(0, SIGKILL);
    return true;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the caller's own group was signalled: status " << status;
}

TEST(ChildSignal, SignalsAndReapsItsOwnChildAndItsGroup) {
  const pid_t kid = ::fork();
  if (kid == 0) {
    ::setpgid(0, 0);
    ::pause();
    _exit(0);
  }
  ::setpgid(kid, kid);
  EXPECT_TRUE(process_exists(kid));
  EXPECT_TRUE(signal_child_group(kid, SIGTERM));
  int status = 0;
  EXPECT_EQ(wait_child(kid, &status), kid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_FALSE(signal_child(kid, 0));  // reaped: gone
}

// wait_child(0 or -1) would reap any child: one that another part of the program waits for.
TEST(ChildSignal, ARefusedWaitLeavesOtherChildrenToTheirOwner) {
  const pid_t kid = ::fork();
  if (kid == 0) _exit(3);
  int status = 0;
  siginfo_t info{};
  ::waitid(P_PID, static_cast<id_t>(kid), &info, WEXITED | WNOWAIT);  // it has exited
  EXPECT_EQ(wait_child(-1, &status), -1);
  EXPECT_EQ(wait_child(0, &status), -1);
  EXPECT_EQ(wait_child(kid, &status), kid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3);
}

// Structural: no source of the program but child_signal.cpp (C++) and
// fsdpsim_upstream/children.py (the pool) calls kill, killpg or waitpid itself.
TEST(ChildSignal, NothingElseSignalsOrReaps) {
  namespace fs = std::filesystem;
  const fs::path root = FSDPSIM_SOURCE_DIR;
  const std::regex cpp(R"((^|[^\w.>])(::)?(kill|killpg|waitpid|sigqueue|tgkill|pidfd_send_signal)\s*\()");
  const std::regex py(R"(\bos\.(kill|killpg|waitpid|wait4)\s*\(|\.send_signal\s*\()");
  std::vector<std::string> offenders;
  size_t scanned = 0;
  for (const char* dir : {"real_backend", "sim", "model", "fuzz"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      const bool is_cpp = ext == ".cpp" || ext == ".hpp", is_py = ext == ".py";
      if (!e.is_regular_file() || !(is_cpp || is_py)) continue;
      const std::string rel = fs::relative(e.path(), root).string();
      if (rel == "real_backend/child_signal.cpp" || rel == "real_backend/upstream/fsdpsim_upstream/children.py") continue;
      ++scanned;
      std::ifstream in(e.path());
      int n = 0;
      for (std::string line; std::getline(in, line);) {
        ++n;
        const size_t comment = line.find(is_cpp ? "//" : "#");
        const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
        if (std::regex_search(code, is_cpp ? cpp : py)) offenders.push_back(rel + ":" + std::to_string(n) + ": " + line);
      }
    }
  }
  EXPECT_GT(scanned, 100u);
  std::ostringstream all;
  for (const auto& o : offenders) all << "\n  " << o;
  EXPECT_TRUE(offenders.empty()) << "signal or reap through real_backend/child_signal.hpp (C++) or fsdpsim_upstream/children.py:"
                                 << all.str();
}
