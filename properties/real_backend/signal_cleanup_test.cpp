// real_backend/signal_cleanup.hpp's group leaders (the upstream pool's
// coordinators): asked to stop by SIGTERM with the caller's handler run next;
// with none, killed with their group after their cleanup time; and never
// signalled from a forked child that inherited the handler. Each case runs in
// a forked process of its own, so the handlers it installs die with it.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <ctime>

#include "real_backend/signal_cleanup.hpp"

using fsdpsim::real::SignalCleanup;

namespace {

// Runs `body` in a forked process; its wait status (exit 0: every check in it held).
template <class Body>
int in_process(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) _exit(body() ? 0 : 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// A child leading its own group that waits for a signal; with `ignore_term` it
// ignores SIGTERM, and a child of its own in the group does too. Both inherit
// the caller's open descriptors (a pipe's write end: EOF once the group is gone).
// Returns once it is set up (a byte on a pipe), so no signal finds it half-way.
pid_t group_leader(bool ignore_term) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    ::setpgid(0, 0);
    ::signal(SIGTERM, ignore_term ? SIG_IGN : SIG_DFL);  // not the inherited handler
    if (ignore_term && ::fork() == 0)
      for (;;) ::pause();
    (void)!::write(ready[1], "r", 1);
    ::close(ready[1]);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  ::setpgid(pid, pid);
  char c;
  (void)!::read(ready[0], &c, 1);
  ::close(ready[0]);
  return pid;
}

volatile sig_atomic_t g_noted = 0;
void note(int) { g_noted = 1; }

// Whether the child `pid` died of `sig` within 5 s; reaped either way (killed when it did not die).
bool exited_of(pid_t pid, int sig) {
  int status = 0;
  for (int t = 0; t < 500; ++t) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFSIGNALED(status) && WTERMSIG(status) == sig;
    struct timespec ten_ms {0, 10000000};
    ::nanosleep(&ten_ms, nullptr);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return false;
}

}  // namespace

TEST(SignalCleanup, AGroupLeaderIsAskedToStopAndTheHandlerBeforeRuns) {
  const int status = in_process([] {
    ::signal(SIGINT, note);  // the CLI's noting handler, installed first
    SignalCleanup cleanup;
    const pid_t leader = group_leader(false);
    cleanup.add_group(leader, 1000);
    ::raise(SIGINT);
    const bool noted = g_noted == 1;
    cleanup.remove_group(leader);
    return noted && exited_of(leader, SIGTERM);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// No handler before: the process dies of the signal, after the leader's cleanup
// time its whole group is killed (the leader and its child ignore SIGTERM).
TEST(SignalCleanup, WithNoHandlerBeforeTheGroupIsKilledAndTheProcessDiesOfTheSignal) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    SignalCleanup cleanup;
    const pid_t leader = group_leader(true);
    (void)!::write(fds[1], &leader, sizeof leader);  // for the test's own cleanup, should the group outlive us
    ::close(fds[1]);
    cleanup.add_group(leader, 300);
    ::raise(SIGTERM);
    _exit(0);  // not reached: it dies of the signal
  }
  ::close(fds[1]);
  pid_t group = 0;  // the leader's pid, from the child
  const bool told = ::read(fds[0], &group, sizeof group) == static_cast<ssize_t>(sizeof group) && group > 1;
  EXPECT_TRUE(told);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  pollfd p{fds[0], POLLIN, 0};  // EOF once every holder is dead; none within 5 s: the group lives on
  char c;
  EXPECT_TRUE(::poll(&p, 1, 5000) == 1 && ::read(fds[0], &c, 1) == 0) << "a process of the group outlived it";
  ::close(fds[0]);
  if (told) ::kill(-group, SIGKILL);  // whatever the code under test left (never group 0: our own)
}

// A child forked from a process with registrations inherits its handler until
// it resets its own: a signal there kills that child alone, never the parent's children.
TEST(SignalCleanup, AForkedChildThatInheritedTheHandlerSignalsNobody) {
  const int status = in_process([] {
    SignalCleanup cleanup;
    const pid_t leader = group_leader(false);
    cleanup.add_group(leader, 1000);
    const pid_t child = ::fork();
    if (child == 0) {
      ::raise(SIGTERM);
      _exit(0);
    }
    const bool child_died = exited_of(child, SIGTERM);
    struct timespec pause_ms {0, 200000000};
    ::nanosleep(&pause_ms, nullptr);
    int leader_status = 0;
    const bool leader_alive = ::waitpid(leader, &leader_status, WNOHANG) == 0;
    cleanup.remove_group(leader);
    ::kill(leader, SIGKILL);
    ::waitpid(leader, nullptr, 0);
    return child_died && leader_alive;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}
