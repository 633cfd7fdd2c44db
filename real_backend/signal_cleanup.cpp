#include "real_backend/signal_cleanup.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>

#include "real_backend/child_signal.hpp"

namespace fsdpsim::real {
namespace {

struct Group {
  pid_t leader = 0;  // a child that leads its own process group
  int cleanup_ms = 0;
};

struct Entry {
  uint64_t id = 0;
  std::vector<pid_t> pids;
  std::vector<Group> groups;
  std::vector<std::string> files;
  std::string dir;
};
using Snapshot = std::vector<Entry>;

// Normal code copies the snapshot, edits the copy and publishes it; the old one
// is freed once no handler can be reading it. A handler announces itself in
// g_readers before loading g_current, so an updater that sees g_readers == 0
// after its store knows no handler holds the old snapshot (sequentially
// consistent atomics); otherwise the old one waits in retired() for an update
// that sees no reader.
std::atomic<Snapshot*> g_current{nullptr};
std::atomic<int> g_readers{0};
volatile sig_atomic_t g_caught = 0;
std::atomic<int> g_caught_count{0};
std::mutex g_mu;  // updaters only, never the handler
uint64_t g_next_id = 1;
// The process that installed the handler: a child forked from it inherits the
// handler until it resets its own, and must not signal its parent's children.
std::atomic<pid_t> g_owner{0};

std::vector<std::unique_ptr<Snapshot>>& retired() {
  static auto* r = new std::vector<std::unique_ptr<Snapshot>>();  // outlives static destructors: a handler may run then
  return *r;
}

const int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

// Up to `ms` for the group leader to exit, left unreaped (WNOWAIT): a zombie
// keeps its pid, so its group id cannot be reused meanwhile. False when it is
// not (or no longer) a child of ours to wait for.
bool wait_leader_exit(pid_t leader, int ms) {
  for (int t = 0; t <= ms / 10; ++t) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(leader), &info, WEXITED | WNOHANG | WNOWAIT) < 0) return errno == EINTR;
    if (info.si_pid == leader) return true;
    struct timespec ten_ms {0, 10000000};
    ::nanosleep(&ten_ms, nullptr);
  }
  return true;  // still running: its group is killed all the same
}

// The handler installed before ours for `sig`, when it is a function to call.
const struct sigaction* chained_handler(int sig) {
  for (int i = 0; i < 3; ++i) {
    if (kSignals[i] != sig) continue;
    const struct sigaction& prev = g_previous[i];
    if ((prev.sa_flags & SA_SIGINFO) ? prev.sa_sigaction != nullptr : prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN)
      return &prev;
  }
  return nullptr;
}

void on_signal(int sig) {
  const int saved_errno = errno;
  if (::getpid() != g_owner.load()) {  // a forked child before it reset its handlers: the default action, nothing else
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    errno = saved_errno;
    return;
  }
  g_caught = sig;
  g_caught_count.fetch_add(1);
  g_readers.fetch_add(1);
  const struct sigaction* prev = chained_handler(sig);
  if (const Snapshot* s = g_current.load()) {
    // Group leaders first: they clean up after themselves (their children,
    // their directory) while the ranks below are killed.
    for (const Entry& e : *s)
      for (const Group& g : e.groups) signal_child(g.leader, SIGTERM);
    for (const Entry& e : *s)
      for (pid_t p : e.pids) signal_child(p, SIGKILL);
    // Dead before their files go: a rank inside a store call could recreate one.
    // WNOWAIT leaves them to be reaped (and their status read) by normal code.
    for (const Entry& e : *s)
      for (pid_t p : e.pids) {
        siginfo_t info;
        while (signallable_pid(p) && ::waitid(P_PID, static_cast<id_t>(p), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
        }
      }
    for (const Entry& e : *s) {
      for (const std::string& f : e.files) ::unlink(f.c_str());
      if (!e.dir.empty()) ::rmdir(e.dir.c_str());
    }
    // No handler to return to: the process dies of the signal next. Each leader
    // gets its cleanup time, then whatever is left of its group is killed.
    if (!prev)
      for (const Entry& e : *s)
        for (const Group& g : e.groups)
          if (signallable_pid(g.leader) && wait_leader_exit(g.leader, g.cleanup_ms)) signal_child_group(g.leader, SIGKILL);
  }
  g_readers.fetch_sub(1);
  if (prev) {
    if (prev->sa_flags & SA_SIGINFO) {
      siginfo_t info{};
      info.si_signo = sig;
      prev->sa_sigaction(sig, &info, nullptr);
    } else {
      prev->sa_handler(sig);
    }
    errno = saved_errno;
    return;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  errno = saved_errno;
}

// Installs the handler where it is not the current one (another part of the
// program may have installed its own since: it becomes the one chained to).
void install_handlers() {
  g_owner.store(::getpid());
  for (int i = 0; i < 3; ++i) {
    struct sigaction cur {};
    ::sigaction(kSignals[i], nullptr, &cur);
    if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == on_signal || cur.sa_handler == SIG_IGN)) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int s : kSignals) sigaddset(&sa.sa_mask, s);  // one cleanup at a time
    ::sigaction(kSignals[i], &sa, &g_previous[i]);
  }
  ::signal(SIGPIPE, SIG_IGN);  // a dead rank's pipe answers EPIPE instead of killing us
}

template <class Edit>
void publish(Edit edit) {
  std::lock_guard<std::mutex> lock(g_mu);
  Snapshot* old = g_current.load();
  auto next = std::make_unique<Snapshot>(old ? *old : Snapshot{});
  edit(*next);
  g_current.store(next.release());
  if (g_readers.load() == 0) {
    delete old;
    retired().clear();
  } else if (old) {
    retired().emplace_back(old);
  }
}

template <class Edit>
void update(uint64_t id, Edit edit) {
  publish([&](Snapshot& s) {
    for (auto it = s.begin(); it != s.end(); ++it)
      if (it->id == id) return edit(s, it);
  });
}

// Until no handler reads a snapshot: one that loaded the old one may still
// signal a pid just removed, so the caller reaps it (and frees the pid for
// reuse) only after this.
void wait_for_handlers() {
  while (g_readers.load() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// A child registered after the CLI put its own handler back (check, crosscheck: before each
// sequence) is covered again, as at the first registration.
void reinstall_handlers() {
  std::lock_guard<std::mutex> lock(g_mu);
  install_handlers();
}

}  // namespace

SignalCleanup::SignalCleanup() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    id_ = g_next_id++;
    install_handlers();
  }
  publish([this](Snapshot& s) { s.push_back(Entry{id_, {}, {}, {}, {}}); });
}

SignalCleanup::~SignalCleanup() {
  update(id_, [](Snapshot& s, Snapshot::iterator it) { s.erase(it); });
}

void SignalCleanup::add_pid(pid_t pid) {
  reinstall_handlers();
  update(id_, [pid](Snapshot&, Snapshot::iterator it) { it->pids.push_back(pid); });
}

void SignalCleanup::remove_pid(pid_t pid) {
  update(id_, [pid](Snapshot&, Snapshot::iterator it) {
    for (auto p = it->pids.begin(); p != it->pids.end(); ++p)
      if (*p == pid) {
        it->pids.erase(p);
        return;
      }
  });
  wait_for_handlers();
}

void SignalCleanup::add_group(pid_t leader, int cleanup_ms) {
  reinstall_handlers();
  update(id_, [&](Snapshot&, Snapshot::iterator it) { it->groups.push_back({leader, cleanup_ms}); });
}

void SignalCleanup::remove_group(pid_t leader) {
  update(id_, [leader](Snapshot&, Snapshot::iterator it) {
    for (auto g = it->groups.begin(); g != it->groups.end(); ++g)
      if (g->leader == leader) {
        it->groups.erase(g);
        return;
      }
  });
  wait_for_handlers();
}

void SignalCleanup::set_paths(std::vector<std::string> files, std::string dir) {
  update(id_, [&](Snapshot&, Snapshot::iterator it) {
    it->files = std::move(files);
    it->dir = std::move(dir);
  });
}

int interrupt_count() { return g_caught_count.load(); }
int interrupting_signal() { return g_caught; }

}  // namespace fsdpsim::real
