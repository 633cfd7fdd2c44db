#include "real_backend/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "real_backend/comm.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/observer.hpp"
#include "real_backend/real_rank.hpp"

namespace fsdpsim::real {

namespace {
bool g_in_worker = false;  // set in forked worker processes
}  // namespace

void run_rank(const SeqFile& f, Comm& comm, std::vector<RankReport>& out) {
  Layout layout = make_layout(f);
  RealRank rank(layout, f.scenario.seed, &comm);
  // Test hook: FSDPSIM_CRASH_RANK=R makes worker process R die at its first op,
  // as a crashed rank would (process mode only).
  const char* crash = g_in_worker ? std::getenv("FSDPSIM_CRASH_RANK") : nullptr;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    if (!op.runs_on(comm.rank())) continue;
    if (crash && std::atoi(crash) == comm.rank()) _exit(9);
    try {
      out.push_back(rank.apply(op, static_cast<int>(i) + 1));
    } catch (const CollectiveFailure& e) {
      out.push_back(rank.failed_report(op, static_cast<int>(i) + 1, e.status, e.what()));
      return;  // this rank is stuck in that collective
    }
  }
  try {
    comm.finish(static_cast<int>(f.ops.size()) + 1);
  } catch (const CollectiveFailure&) {
    // A peer is stuck in a collective; its own report says so.
  }
}

namespace {

// ---- framing over pipes: u64 length, bytes ----
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool write_frame(int fd, const std::string& s) {
  uint64_t n = s.size();
  return write_all(fd, reinterpret_cast<const char*>(&n), sizeof n) && write_all(fd, s.data(), s.size());
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool read_frame(int fd, std::string* s) {
  uint64_t n = 0;
  if (!read_all(fd, reinterpret_cast<char*>(&n), sizeof n)) return false;
  s->resize(n);
  return read_all(fd, s->data(), n);
}

// A worker's answer: 'R' + reports, or 'E' + what broke.
[[noreturn]] void worker_main(int rank, int world, const std::string& store_path, std::chrono::milliseconds timeout, int in,
                              int out) {
  g_in_worker = true;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a parent that dies takes its ranks with it
  if (::getppid() == 1) _exit(3);
  at::set_num_threads(1);
  std::unique_ptr<Comm> comm;
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(store_path, world);
    store->setTimeout(timeout);
    comm = std::make_unique<Comm>(store, rank, world, c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"), timeout);
  } catch (const std::exception& e) {
    write_frame(out, std::string("E") + "rank " + std::to_string(rank) + " could not join the process group: " + e.what());
    _exit(3);
  }
  std::string job;
  while (read_frame(in, &job) && !job.empty()) {
    std::string reply = "R";
    try {
      SeqFile f = parse_seq(job, "<job>");
      std::vector<RankReport> reports;
      run_rank(f, *comm, reports);
      for (const auto& r : reports) write_report(reply, r);
    } catch (const std::exception& e) {
      write_frame(out, std::string("E") + "rank " + std::to_string(rank) + ": " + e.what());
      _exit(3);  // the process group is dead after any gloo error
    }
    if (!write_frame(out, reply)) _exit(3);
  }
  _exit(0);
}

// SIGINT/SIGTERM: kill every live worker and remove the stores, then leave.
// Only async-signal-safe calls; the table is written before workers start.
constexpr int kMaxLive = 64;
volatile sig_atomic_t g_live_pids[kMaxLive];
char g_live_dirs[4][64];

void on_signal(int sig) {
  for (int i = 0; i < kMaxLive; ++i)
    if (g_live_pids[i] > 0) ::kill(g_live_pids[i], SIGKILL);
  for (auto& d : g_live_dirs) {
    if (!d[0]) continue;
    char store[80];
    size_t n = std::strlen(d);
    std::memcpy(store, d, n);
    std::memcpy(store + n, "/store", 7);
    ::unlink(store);
    ::rmdir(d);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void track(pid_t pid, bool add) {
  for (int i = 0; i < kMaxLive; ++i)
    if (add ? g_live_pids[i] == 0 : g_live_pids[i] == pid) {
      g_live_pids[i] = add ? pid : 0;
      return;
    }
}

void track_dir(const std::string& dir, bool add) {
  for (auto& d : g_live_dirs)
    if (add ? !d[0] : dir == d) {
      if (add) std::snprintf(d, sizeof d, "%s", dir.c_str());
      else d[0] = 0;
      return;
    }
}

void install_signal_handlers() {
  static bool done = false;
  if (done) return;
  done = true;
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  ::signal(SIGPIPE, SIG_IGN);  // a dead worker's pipe answers EPIPE instead of killing us
}

}  // namespace

struct RealRanks::Impl {
  virtual ~Impl() = default;
  virtual RealResult run(const SeqFile& f) = 0;
};

namespace {

std::vector<std::vector<RankReport>> parse_replies(const std::vector<std::string>& replies) {
  std::vector<std::vector<RankReport>> out(replies.size());
  for (size_t r = 0; r < replies.size(); ++r) {
    size_t pos = 1;
    RankReport rep;
    while (pos < replies[r].size() && read_report(replies[r], &pos, &rep)) out[r].push_back(rep);
  }
  return out;
}

class ProcessPool : public RealRanks::Impl {
 public:
  ProcessPool(int world, std::chrono::milliseconds timeout) : world_(world), timeout_(timeout) {}
  ~ProcessPool() override { stop(); }

  RealResult run(const SeqFile& f) override {
    RealResult res;
    if (pids_.empty()) start();
    std::string job = print_seq(f);
    for (int r = 0; r < world_; ++r) write_frame(to_[r], job);
    // Every collective times out after `timeout`; allow a few of them, plus the ops' own time.
    auto deadline = std::chrono::steady_clock::now() + 3 * timeout_ + std::chrono::milliseconds(2000 + 20 * f.ops.size());
    std::vector<std::string> replies(world_);
    std::vector<bool> done(world_, false);
    int remaining = world_;
    std::vector<std::string> buffers(world_);
    while (remaining > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return fail(res, "a rank did not answer within the timeout; all ranks killed");
      std::vector<pollfd> fds;
      std::vector<int> who;
      for (int r = 0; r < world_; ++r)
        if (!done[r]) fds.push_back({from_[r], POLLIN, 0}), who.push_back(r);
      int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 1000)));
      if (n < 0 && errno != EINTR) return fail(res, std::string("poll: ") + std::strerror(errno));
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int r = who[i];
        char buf[65536];
        ssize_t got = ::read(from_[r], buf, sizeof buf);
        if (got <= 0) return fail(res, "rank " + std::to_string(r) + " died (exit " + exit_text(r) + ")");
        buffers[r].append(buf, static_cast<size_t>(got));
        if (buffers[r].size() >= 8) {
          uint64_t len = 0;
          std::memcpy(&len, buffers[r].data(), 8);
          if (buffers[r].size() >= 8 + len) {
            replies[r] = buffers[r].substr(8, len);
            done[r] = true;
            --remaining;
            if (replies[r].empty() || replies[r][0] != 'R') {
              // A peer that died makes the others' collectives fail too: name the cause.
              std::string why = replies[r].empty() ? "empty reply" : replies[r].substr(1);
              int dead = dead_peer(r);
              if (dead >= 0) why = "rank " + std::to_string(dead) + " died (exit " + exit_text(dead) + "); " + why;
              return fail(res, why);
            }
          }
        }
      }
    }
    Layout layout = make_layout(f);
    res.observations = observe(layout, f.scenario.seed, parse_replies(replies));
    return res;
  }

 private:
  RealResult& fail(RealResult& res, const std::string& why) {
    res.infra_failure = true;
    res.infra_message = why;
    stop();
    return res;
  }

  // A rank other than `except` that has exited, waiting up to 500 ms for one
  // (a crash reaches the peers' sockets before its parent sees it exit).
  int dead_peer(int except) {
    for (int i = 0; i < 500; ++i) {
      for (int r = 0; r < world_; ++r) {
        if (r == except || pids_.empty() || pids_[r] <= 0) continue;
        siginfo_t info{};
        if (::waitid(P_PID, static_cast<id_t>(pids_[r]), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) return r;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return -1;
  }

  std::string exit_text(int r) {
    int status = 0;
    if (pids_.empty() || pids_[r] <= 0) return "unknown";
    // Its pipe closed: it is exiting; give it a moment to become reapable.
    pid_t got = 0;
    for (int i = 0; i < 2000 && (got = ::waitpid(pids_[r], &status, WNOHANG)) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (got <= 0) return "unknown";
    track(pids_[r], false);
    pids_[r] = -1;
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return std::to_string(WEXITSTATUS(status));
  }

  void start() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/fsdpsim-XXXXXX";
    if (tmpl.size() >= sizeof g_live_dirs[0] || !::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a store directory " + tmpl);
    dir_ = tmpl;
    install_signal_handlers();
    track_dir(dir_, true);
    std::string store = dir_ + "/store";
    for (int r = 0; r < world_; ++r) {
      int a[2], b[2];
      if (::pipe(a) != 0 || ::pipe(b) != 0) throw std::runtime_error("pipe failed");
      pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("fork failed");
      if (pid == 0) {
        ::close(a[1]);
        ::close(b[0]);
        for (int fd : to_) ::close(fd);
        for (int fd : from_) ::close(fd);
        worker_main(r, world_, store, timeout_, a[0], b[1]);
      }
      ::close(a[0]);
      ::close(b[1]);
      ::fcntl(a[1], F_SETFD, FD_CLOEXEC);
      ::fcntl(b[0], F_SETFD, FD_CLOEXEC);
      pids_.push_back(pid);
      track(pid, true);
      to_.push_back(a[1]);
      from_.push_back(b[0]);
    }
  }

  // Asks the workers to leave, kills whoever does not, reaps all, removes the store.
  void stop() {
    for (int fd : to_) {
      write_frame(fd, "");
      ::close(fd);
    }
    for (int fd : from_) ::close(fd);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    for (pid_t pid : pids_) {
      if (pid <= 0) continue;
      track(pid, false);
      int status;
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > until) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    pids_.clear();
    to_.clear();
    from_.clear();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      track_dir(dir_, false);
      dir_.clear();
    }
  }

  int world_;
  std::chrono::milliseconds timeout_;
  std::vector<pid_t> pids_;
  std::vector<int> to_, from_;
  std::string dir_;
};

class ThreadPool : public RealRanks::Impl {
 public:
  ThreadPool(int world, std::chrono::milliseconds timeout) : world_(world), timeout_(timeout) {}

  RealResult run(const SeqFile& f) override {
    RealResult res;
    if (comms_.empty() && !build(res)) return res;
    std::vector<std::vector<RankReport>> reports(world_);
    std::vector<std::string> broken(world_);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_; ++r)
      threads.emplace_back([&, r] {
        try {
          run_rank(f, *comms_[r], reports[r]);
        } catch (const std::exception& e) {
          broken[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world_; ++r)
      if (!broken[r].empty()) {
        res.infra_failure = true;
        res.infra_message = "rank " + std::to_string(r) + ": " + broken[r];
        comms_.clear();  // the group is dead; build a new one next time
        return res;
      }
    Layout layout = make_layout(f);
    res.observations = observe(layout, f.scenario.seed, reports);
    return res;
  }

 private:
  bool build(RealResult& res) {
    at::set_num_threads(1);
    auto store = c10::make_intrusive<c10d::HashStore>();
    store->setTimeout(timeout_);
    comms_.resize(world_);
    std::vector<std::string> errors(world_);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_; ++r)
      threads.emplace_back([&, r] {
        try {
          comms_[r] = std::make_unique<Comm>(store, r, world_, loopback_device(), timeout_);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world_; ++r)
      if (!errors[r].empty()) {
        comms_.clear();
        res.infra_failure = true;
        res.infra_message = "rank " + std::to_string(r) + " could not join the process group: " + errors[r];
        return false;
      }
    return true;
  }

  int world_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Comm>> comms_;
};

}  // namespace

RealRanks::RealRanks(int world, RankMode mode, std::chrono::milliseconds timeout) : world_(world) {
  if (mode == RankMode::Processes) impl_ = std::make_unique<ProcessPool>(world, timeout);
  else impl_ = std::make_unique<ThreadPool>(world, timeout);
}

RealRanks::~RealRanks() = default;

RealResult RealRanks::run(const SeqFile& f) {
  if (f.scenario.world != world_) throw std::invalid_argument("sequence world differs from the rank pool's");
  return impl_->run(f);
}

TorchrunResult run_torchrun_rank(const SeqFile& f, std::chrono::milliseconds timeout) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) throw std::runtime_error(std::string("torchrun launch: ") + name + " is not set");
    return std::string(v);
  };
  TorchrunResult out;
  out.rank = std::stoi(env("RANK"));
  out.world = std::stoi(env("WORLD_SIZE"));
  if (out.world != f.scenario.world)
    throw std::runtime_error("torchrun launch: WORLD_SIZE " + std::to_string(out.world) + " but the file says world " +
                             std::to_string(f.scenario.world));
  at::set_num_threads(1);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(std::stoi(env("MASTER_PORT")));
  opts.isServer = out.rank == 0;
  opts.numWorkers = out.world;
  opts.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(env("MASTER_ADDR"), opts);
  const char* host = std::getenv("FSDPSIM_HOST");
  auto device = host ? c10d::ProcessGroupGloo::createDeviceForHostname(host) : c10d::ProcessGroupGloo::createDefaultDevice();
  Comm comm(store, out.rank, out.world, device, timeout);
  std::vector<RankReport> mine;
  run_rank(f, comm, mine);
  std::string blob;
  for (const auto& r : mine) write_report(blob, r);
  store->set("fsdpsim/reports/" + std::to_string(out.rank), std::vector<uint8_t>(blob.begin(), blob.end()));
  out.reports.resize(out.world);
  if (out.rank != 0) {
    out.reports[out.rank] = mine;
    return out;
  }
  for (int r = 0; r < out.world; ++r) {
    std::vector<uint8_t> bytes = store->get("fsdpsim/reports/" + std::to_string(r));
    std::string s(bytes.begin(), bytes.end());
    size_t pos = 0;
    RankReport rep;
    while (pos < s.size() && read_report(s, &pos, &rep)) out.reports[r].push_back(rep);
  }
  return out;
}

RealResult run_real(const SeqFile& f, RankMode mode, std::chrono::milliseconds timeout) {
  RealRanks ranks(f.scenario.world, mode, timeout);
  return ranks.run(f);
}

}  // namespace fsdpsim::real
