#include "real_backend/launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "model/vocab/source_error.hpp"
#include "real_backend/child_signal.hpp"
#include "real_backend/comm.hpp"
#include "real_backend/fork_guard.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/observer.hpp"
#include "real_backend/rank_failure.hpp"
#include "real_backend/rank_progress.hpp"
#include "real_backend/real_rank.hpp"
#include "real_backend/signal_cleanup.hpp"
#include "real_backend/store_dir.hpp"

namespace fsdpsim::real {

namespace {
bool g_in_worker = false;  // set in forked worker processes
int g_crash_rank = -1;     // FSDPSIM_CRASH_RANK, read by the parent before it forks
RankProbe g_probe;         // a forked worker's slot in its pool's progress table

// A decimal number of at most 9 digits and nothing else, or -1.
long parse_count(const char* v) {
  if (!v || !*v) return -1;
  long n = 0;
  for (const char* c = v; *c; ++c) {
    if (*c < '0' || *c > '9' || c - v >= 9) return -1;
    n = n * 10 + (*c - '0');
  }
  return n;
}

[[noreturn]] void bad_environment(const std::string& what) { throw SourceError("<environment>", {}, what); }

std::string quoted_env(const char* v) {
  std::string s = v ? v : "";
  return "'" + (s.size() > 40 ? s.substr(0, 40) + "..." : s) + "'";
}

}  // namespace

void run_rank(const SeqFile& f, Comm& comm, std::vector<RankReport>& out) {
  comm.begin_sequence();  // names this sequence's files (Comm::write_rank0_file)
  Layout layout = make_layout(f);
  RealRank rank(layout, f.scenario.seed, &comm);
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    if (!op.runs_on(comm.rank())) continue;
    if (g_in_worker) {
      g_probe.running("step " + std::to_string(i + 1) + " (" + op_name(op.kind) + ")");
      // Test hook: FSDPSIM_CRASH_RANK=R makes worker process R die at its first
      // op, as a crashed rank would (process mode only).
      if (g_crash_rank == comm.rank()) _exit(9);
    }
    try {
      out.push_back(rank.apply(op, static_cast<int>(i) + 1));
    } catch (const CollectiveFailure& e) {
      out.push_back(rank.failed_report(op, static_cast<int>(i) + 1, e.status, e.what()));
      return;  // this rank is stuck in that collective
    }
  }
  if (g_in_worker) g_probe.running("the end of the sequence");
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
                              int out, pid_t parent, RankProgress* progress) {
  g_in_worker = true;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a parent that dies takes its ranks with it
  if (::getppid() != parent) _exit(3);
  // The parent's handlers would clean up its pool from here: a rank just dies
  // (Ctrl-C reaches the whole process group; the parent reports the rest).
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
  g_probe.progress = progress;
  g_probe.rank = rank;
  g_probe.set(RankPhase::Joining, "");
  at::set_num_threads(1);
  std::unique_ptr<Comm> comm;
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(store_path, world);
    store->setTimeout(timeout);
    comm = std::make_unique<Comm>(store, rank, world, c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"), timeout);
  } catch (const std::exception& e) {
    write_frame(out, "Ecould not join the process group within " + std::to_string(timeout.count()) + " ms: " + e.what());
    _exit(3);
  }
  comm->set_probe(&g_probe);
  g_probe.set(RankPhase::Idle, "");
  std::string job;
  while (read_frame(in, &job) && !job.empty()) {
    std::string reply = "R";
    try {
      SeqFile f = parse_seq(job, "<job>");
      std::vector<RankReport> reports;
      run_rank(f, *comm, reports);
      for (const auto& r : reports) write_report(reply, r);
    } catch (const std::exception& e) {
      write_frame(out, std::string("E") + e.what());
      _exit(3);  // the process group is dead after any gloo error
    }
    g_probe.set(RankPhase::Idle, "");
    if (!write_frame(out, reply)) _exit(3);
  }
  _exit(0);
}

}  // namespace

struct RealRanks::Impl {
  virtual ~Impl() = default;
  virtual RealResult run(const SeqFile& f) = 0;
};

namespace {

// A reply that does not read back to its end is an infrastructure failure (*error names the rank
// and where), never a shorter run: the reports past it would be missing without a word.
std::vector<std::vector<RankReport>> parse_replies(const std::vector<std::string>& replies, std::string* error) {
  std::vector<std::vector<RankReport>> out(replies.size());
  for (size_t r = 0; r < replies.size(); ++r) {
    size_t pos = 1;
    RankReport rep;
    while (pos < replies[r].size() && read_report(replies[r], &pos, &rep)) out[r].push_back(rep);
    if (pos < replies[r].size() && error->empty())
      *error = "rank " + std::to_string(r) + "'s report " + std::to_string(out[r].size() + 1) + " could not be read back (byte " +
               std::to_string(pos) + " of " + std::to_string(replies[r].size()) + ")";
  }
  return out;
}

// FSDPSIM_CRASH_RANK (the crash test hook): unset or empty is none; anything
// but a rank number is bad input naming the variable.
int crash_rank_from_env() {
  const char* v = std::getenv("FSDPSIM_CRASH_RANK");
  if (!v || !*v) return -1;
  long n = parse_count(v);
  if (n < 0) bad_environment("FSDPSIM_CRASH_RANK expects a rank number, got " + quoted_env(v));
  return static_cast<int>(n);
}

// How long beyond --timeout a rank may wait for a peer that is still working:
// joining (a full mesh of connections over the FileStore: grows with the world)
// or running an op (every op reads every parameter, and its report copies
// them: grows with the elements a rank holds, world times that for a gathered
// layer). The coefficients are measured on one loaded core with room to spare
// (docs/design/cpp-backend.md, "How ranks fail and are reported").
std::chrono::milliseconds work_allowance(const SeqFile& f) {
  int64_t elements = 0;
  for (const auto& p : make_layout(f).params) elements += p.rows * p.cols;
  const int64_t world = f.scenario.world;
  const int64_t join_ms = 40 * world + world * world / 2;
  const int64_t work_ms = elements * (2 + world) / 4000;  // 4000 elements per ms per copy
  return std::chrono::milliseconds(join_ms + work_ms);
}

using Clock = std::chrono::steady_clock;

class ProcessPool : public RealRanks::Impl {
 public:
  ProcessPool(int world, std::chrono::milliseconds timeout) : world_(world), timeout_(timeout) {}
  ~ProcessPool() override { stop(); }

  RealResult run(const SeqFile& f) override {
    RealResult res;
    const std::chrono::milliseconds limit = timeout_ + work_allowance(f);
    if (!pids_.empty() && limit > limit_) stop();  // ranks built for less work: rebuild them with a longer timeout
    if (pids_.empty()) start(limit);
    const int interrupts = interrupt_count();
    std::string job = print_seq(f);
    for (int r = 0; r < world_; ++r) write_frame(to_[r], job);  // a dead rank's pipe: EPIPE; its EOF tells
    std::vector<RankState> states(world_);
    std::vector<std::string> replies(world_), buffers(world_);
    std::vector<bool> open(world_, true), closed(world_, false);
    int remaining = world_;
    // The ranks time out in their own collectives after limit_; the parent steps
    // in only when no rank has moved for longer than that. Once a rank broke, it
    // waits a moment for the others' own errors (a dead peer resets their sockets).
    const auto grace = std::chrono::milliseconds(2000), settle = std::chrono::milliseconds(1000);
    int64_t seen = progress_->total_changes();
    Clock::time_point moved = Clock::now(), broken_at{};
    bool broken = false;
    Verdict verdict = Verdict::Broken;
    while (remaining > 0) {
      const auto now = Clock::now();
      if (interrupt_count() != interrupts) {
        verdict = Verdict::Interrupted;
        broken = true;
        break;
      }
      if (int64_t c = progress_->total_changes(); c != seen) seen = c, moved = now;
      if (broken && now - broken_at > settle) break;
      if (!broken && now - moved > limit_ + grace) {
        verdict = Verdict::Stalled;
        broken = true;
        break;
      }
      std::vector<pollfd> fds;
      std::vector<int> who;
      for (int r = 0; r < world_; ++r)
        if (open[r]) fds.push_back({from_[r], POLLIN, 0}), who.push_back(r);
      int n = ::poll(fds.data(), fds.size(), 100);
      if (n < 0 && errno != EINTR) return fail(res, std::string("poll: ") + std::strerror(errno));
      for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int r = who[i];
        char buf[65536];
        ssize_t got = ::read(from_[r], buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
          open[r] = false, closed[r] = true, --remaining;
          if (!broken) broken = true, broken_at = Clock::now();
          continue;
        }
        buffers[r].append(buf, static_cast<size_t>(got));
        uint64_t len = 0;
        if (buffers[r].size() < 8 || (std::memcpy(&len, buffers[r].data(), 8), buffers[r].size() < 8 + len)) continue;
        std::string frame = buffers[r].substr(8, len);
        open[r] = false, --remaining;
        if (!frame.empty() && frame[0] == 'R') {
          replies[r] = std::move(frame);
          states[r].answered = true;
        } else {
          states[r].error = frame.empty() ? "empty reply" : frame.substr(1);
          if (!broken) broken = true, broken_at = Clock::now();
        }
      }
    }
    if (broken) {
      const double stalled = std::chrono::duration<double>(Clock::now() - moved).count();
      return fail(res, describe_failure(collect(states, closed), verdict, stalled, interrupting_signal()));
    }
    Layout layout = make_layout(f);
    std::string unreadable;
    std::vector<std::vector<RankReport>> reports = parse_replies(replies, &unreadable);
    if (!unreadable.empty()) return fail(res, unreadable);
    res.observations = observe(layout, f.scenario.seed, reports);
    return res;
  }

 private:
  RealResult& fail(RealResult& res, const std::string& why) {
    res.infra_failure = true;
    res.infra_message = why;
    stop();
    return res;
  }

  // What each rank that did not answer is doing, or how it ended. A rank whose
  // pipe closed is exiting: it gets a moment to become waitable.
  std::vector<RankState> collect(std::vector<RankState> states, const std::vector<bool>& closed) {
    const auto until = Clock::now() + std::chrono::milliseconds(500);
    for (int r = 0; r < world_; ++r) {
      if (states[r].answered) continue;
      RankState& s = states[r];
      s.progress = progress_->get(r);
      for (;;) {
        siginfo_t info{};
        if (::waitid(P_PID, static_cast<id_t>(pids_[r]), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pids_[r]) {
          s.wait_status = info.si_code == CLD_EXITED ? W_EXITCODE(info.si_status, 0) : info.si_status;
          break;
        }
        if (!closed[r] || Clock::now() > until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      s.stopped = !s.wait_status && process_stopped(pids_[r]);
    }
    return states;
  }

  void start(std::chrono::milliseconds limit) {
    const int crash = crash_rank_from_env();
    try {
      dir_ = std::make_unique<StoreDir>();
      progress_ = std::make_unique<RankProgress>(world_);
      limit_ = limit;
      g_crash_rank = crash;  // the forked ranks inherit it
      const std::string store = dir_->store_file();
      const pid_t parent = ::getpid();
      for (int r = 0; r < world_; ++r) {
        int a[2], b[2];
        if (::pipe(a) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
        if (::pipe(b) != 0) {
          ::close(a[0]), ::close(a[1]);
          throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
        }
        std::unique_lock<std::mutex> no_threads_mid_work(fork_mutex());  // fork_guard.hpp
        pid_t pid = ::fork();
        no_threads_mid_work.unlock();
        if (pid == 0) {
          ::close(a[1]);
          ::close(b[0]);
          for (int fd : to_) ::close(fd);
          for (int fd : from_) ::close(fd);
          worker_main(r, world_, store, limit_, a[0], b[1], parent, progress_.get());
        }
        ::close(a[0]);
        ::close(b[1]);
        ::fcntl(a[1], F_SETFD, FD_CLOEXEC);
        ::fcntl(b[0], F_SETFD, FD_CLOEXEC);
        to_.push_back(a[1]);
        from_.push_back(b[0]);
        if (pid < 0) {
          ::close(a[1]), ::close(b[0]);
          to_.pop_back(), from_.pop_back();
          throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
        }
        pids_.push_back(pid);
        cleanup_.add_pid(pid);
      }
    } catch (...) {
      stop();
      throw;
    }
  }

  // Asks the ranks to leave, kills whoever does not, reaps all, removes the store.
  void stop() {
    for (int fd : to_) {
      write_frame(fd, "");
      ::close(fd);
    }
    for (int fd : from_) ::close(fd);
    const auto until = Clock::now() + std::chrono::milliseconds(500);
    for (pid_t pid : pids_) {
      siginfo_t info{};
      while (!(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) &&
             Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      cleanup_.remove_pid(pid);  // out of the handler's table before it is reaped (its pid may be reused after)
      signal_child(pid, SIGKILL);  // not reaped yet, so still ours
      int status;
      wait_child(pid, &status);
    }
    pids_.clear();
    to_.clear();
    from_.clear();
    dir_.reset();
    progress_.reset();
  }

  int world_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds limit_{0};  // the ranks' collective and store timeout: timeout_ + the work's allowance
  std::vector<pid_t> pids_;
  std::vector<int> to_, from_;
  std::unique_ptr<StoreDir> dir_;
  std::unique_ptr<RankProgress> progress_;
  SignalCleanup cleanup_;
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
      if (!broken[r].empty()) res.infra_message += (res.infra_message.empty() ? "rank " : "; rank ") + std::to_string(r) + ": " + broken[r];
    if (!res.infra_message.empty()) {
      res.infra_failure = true;
      comms_.clear();  // the group is dead; build a new one next time
      return res;
    }
    Layout layout = make_layout(f);
    res.observations = observe(layout, f.scenario.seed, reports);
    return res;
  }

 private:
  bool build(RealResult& res) {
    try {
      comms_ = join_thread_ranks(world_, timeout_);
      // a progress slot per thread rank, as forked ranks have: Comm::read_rank0_file reads rank 0's
      progress_ = std::make_unique<RankProgress>(world_);
      probes_.assign(static_cast<size_t>(world_), RankProbe{});
      for (int r = 0; r < world_; ++r) {
        probes_[r].progress = progress_.get();
        probes_[r].rank = r;
        comms_[r]->set_probe(&probes_[r]);
      }
    } catch (const std::runtime_error& e) {
      comms_.clear();
      res.infra_failure = true;
      res.infra_message = e.what();
      return false;
    }
    return true;
  }

  int world_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<RankProgress> progress_;  // before comms_: the comms point at its probes
  std::vector<RankProbe> probes_;
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

TorchrunEnv torchrun_env(int file_world) {
  auto get = [](const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) bad_environment(std::string(name) + " is not set (a torchrun-style launch sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
    return v;
  };
  auto number = [&](const char* name, long lo, long hi, const std::string& range) {
    const char* v = get(name);
    long n = parse_count(v);
    if (n < lo || n > hi) bad_environment(std::string(name) + " expects " + range + ", got " + quoted_env(v));
    return static_cast<int>(n);
  };
  TorchrunEnv env;
  env.world = number("WORLD_SIZE", 1, 1 << 20, "a world size of at least 1");
  if (env.world != file_world)
    bad_environment("WORLD_SIZE is " + std::to_string(env.world) + " but the file says world " + std::to_string(file_world));
  env.rank = number("RANK", 0, env.world - 1, "a rank 0.." + std::to_string(env.world - 1) + " (below WORLD_SIZE " +
                                                  std::to_string(env.world) + ")");
  env.master_port = number("MASTER_PORT", 1, 65535, "a port 1..65535");
  env.master_addr = get("MASTER_ADDR");
  return env;
}

TorchrunResult run_torchrun_rank(const SeqFile& f, std::chrono::milliseconds timeout) {
  TorchrunEnv env = torchrun_env(f.scenario.world);
  TorchrunResult out;
  out.rank = env.rank;
  out.world = env.world;
  at::set_num_threads(1);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = out.rank == 0;
  opts.numWorkers = out.world;
  opts.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
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
