#include "real_backend/signal_cleanup.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <memory>
#include <mutex>

namespace fsdpsim::real {
namespace {

struct Entry {
  uint64_t id = 0;
  std::vector<pid_t> pids;
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

std::vector<std::unique_ptr<Snapshot>>& retired() {
  static auto* r = new std::vector<std::unique_ptr<Snapshot>>();  // outlives static destructors: a handler may run then
  return *r;
}

const int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

void on_signal(int sig) {
  const int saved_errno = errno;
  g_caught = sig;
  g_caught_count.fetch_add(1);
  g_readers.fetch_add(1);
  if (const Snapshot* s = g_current.load()) {
    for (const Entry& e : *s)
      for (pid_t p : e.pids) ::kill(p, SIGKILL);
    // Dead before their files go: a rank inside a store call could recreate one.
    // WNOWAIT leaves them to be reaped (and their status read) by normal code.
    for (const Entry& e : *s)
      for (pid_t p : e.pids) {
        siginfo_t info;
        while (::waitid(P_PID, static_cast<id_t>(p), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
        }
      }
    for (const Entry& e : *s) {
      for (const std::string& f : e.files) ::unlink(f.c_str());
      if (!e.dir.empty()) ::rmdir(e.dir.c_str());
    }
  }
  g_readers.fetch_sub(1);
  for (int i = 0; i < 3; ++i) {
    if (kSignals[i] != sig) continue;
    const struct sigaction& prev = g_previous[i];
    if (prev.sa_flags & SA_SIGINFO) {
      if (prev.sa_sigaction) {
        siginfo_t info{};
        info.si_signo = sig;
        prev.sa_sigaction(sig, &info, nullptr);
        errno = saved_errno;
        return;
      }
    } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
      prev.sa_handler(sig);
      errno = saved_errno;
      return;
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  errno = saved_errno;
}

// Installs the handler where it is not the current one (another part of the
// program may have installed its own since: it becomes the one chained to).
void install_handlers() {
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

}  // namespace

SignalCleanup::SignalCleanup() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    id_ = g_next_id++;
    install_handlers();
  }
  publish([this](Snapshot& s) { s.push_back(Entry{id_, {}, {}, {}}); });
}

SignalCleanup::~SignalCleanup() {
  update(id_, [](Snapshot& s, Snapshot::iterator it) { s.erase(it); });
}

void SignalCleanup::add_pid(pid_t pid) {
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
