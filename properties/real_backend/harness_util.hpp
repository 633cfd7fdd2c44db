// Helpers for the real backend's process-harness tests: a private TMPDIR, this
// process's children, and reaping orphans as a child subreaper.
#pragma once
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fsdpsim::test {

inline std::set<std::string> dir_entries(const std::string& dir) {
  std::set<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.insert(e->d_name);
    ::closedir(d);
  }
  return out;
}

// A fresh directory set as TMPDIR for the scope; `extra` lengthens its path.
class PrivateTmpdir {
 public:
  explicit PrivateTmpdir(size_t min_length = 0) {
    const char* base = std::getenv("TMPDIR");  // made under the caller's TMPDIR, like everything
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/fsdpsim-harness-test-XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    root_ = tmpl;
    path_ = root_;
    while (path_.size() < min_length) path_ += "/" + std::string(std::min<size_t>(40, min_length - path_.size() + 1), 'd');
    std::filesystem::create_directories(path_);
    const char* old = std::getenv("TMPDIR");
    had_ = old != nullptr;
    if (had_) saved_ = old;
    ::setenv("TMPDIR", path_.c_str(), 1);
  }
  ~PrivateTmpdir() {
    if (had_) ::setenv("TMPDIR", saved_.c_str(), 1);
    else ::unsetenv("TMPDIR");
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  const std::string& path() const { return path_; }
  std::set<std::string> entries() const { return dir_entries(path_); }

 private:
  std::string root_, path_, saved_;
  bool had_ = false;
};

// This process's live children, ascending pids (the pool forks rank 0 first).
inline std::vector<pid_t> child_pids() {
  std::vector<pid_t> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "children");
    for (long pid; in >> pid;) out.push_back(static_cast<pid_t>(pid));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Orphaned grandchildren become this process's children (a subreaper), so a
// test can see that none is left: reaps until no child remains, or gives up
// after `wait` and returns the number still alive.
inline size_t reap_all_children(std::chrono::milliseconds wait = std::chrono::milliseconds(3000)) {
  auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    size_t alive = child_pids().size();
    if (alive == 0 || std::chrono::steady_clock::now() > until) return alive;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

}  // namespace fsdpsim::test
