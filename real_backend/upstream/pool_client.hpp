// The client side of the upstream pool (protocol.md): one Python coordinator
// process owning W rank processes that run sequences on real PyTorch FSDP2 +
// PEFT + accelerate. No torch here: the pool speaks observation JSON lines.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

#include "model/vocab/observation.hpp"
#include "real_backend/signal_cleanup.hpp"

namespace fsdpsim {
// --timeout's default, for the real backend's ranks and the upstream pool
// alike (pool.py's DEFAULT_TIMEOUT_MS; docs/design/upstream-backend.md's "5 s").
constexpr int kDefaultTimeoutMs = 5000;
}  // namespace fsdpsim

namespace fsdpsim::upstream {

struct UpstreamResult {
  std::vector<Observation> obs;  // sorted by (step, rank), as the pool sends them
  bool ok = false;
  std::string error;  // one line, "upstream backend: ..." when !ok (infrastructure)
  bool restarted = false;  // the pool restarted its ranks during the sequence (a hang)
  // Which path the ranks' `prepare` took (prepare.py::run): "accelerate", a fallback's reason
  // key ("ram_efficient", ...), "mixed" where ranks differ, "" where none prepared.
  std::string prepared_by;
};

struct UpstreamOptions {
  // Empty: $FSDPSIM_PYTHON, else <source dir>/.venv/bin/python.
  std::string python;
  // Empty: $FSDPSIM_UPSTREAM_MODULE, else fsdpsim_upstream.pool.
  std::string module;
  std::chrono::milliseconds startup{120000};  // until the ready line
  std::chrono::milliseconds per_run{30000};   // a run's deadline: this ...
  std::chrono::milliseconds per_op{10000};    // ... plus this per op
  std::chrono::milliseconds cleanup{15000};   // the coordinator's time to stop its ranks and remove its directory
  int rank_timeout_ms = kDefaultTimeoutMs;    // --timeout-ms: no message from any rank this long: look at their processes
};

class UpstreamPool {
 public:
  explicit UpstreamPool(UpstreamOptions opt = {});
  ~UpstreamPool();  // {"cmd":"quit"}, stdin closed, up to opt.cleanup for it to leave, SIGTERM, 2 s, SIGKILL to the group
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // Starts the pool for `world` ranks; a no-op when it runs at that world
  // already, a restart at another. False with *error (one line) on failure.
  bool start(int world, std::string* error = nullptr);
  // One canonical .seq text (its world equals the pool's). Starts the pool
  // again first when an earlier failure killed it. Any failure kills the pool.
  // `switches_json`: the effective profile (switches_json in model/vocab/profile.hpp);
  // empty lets the pool resolve the file's profile itself.
  UpstreamResult run(const std::string& canonical_seq_text, const std::string& switches_json = "");
  void stop();
  // A start whose ready line has not come by `t` is given up (the pool killed, start false):
  // a caller with a deadline of its own (hunt --seconds) does not wait out a slow import.
  void give_up_start_at(std::chrono::steady_clock::time_point t) { give_up_ = t; }

  bool running() const { return pid_ > 0; }
  int world() const { return world_; }
  pid_t pid() const { return pid_; }
  // From the ready line: name -> version ("torch" -> "2.13.0+cpu").
  const std::map<std::string, std::string>& versions() const { return versions_; }
  // Observation fields the pool cannot observe (observation_diff's names).
  const std::vector<std::string>& unobserved() const { return unobserved_; }
  // Coordinators spawned so far (a restart after a failure counts), and the seconds
  // the ones that got ready took from spawn to their ready line.
  int starts() const { return starts_; }
  double start_seconds() const { return start_seconds_; }
  // "upstream: torch X, peft Y, accelerate Z, transformers W"
  std::string versions_line() const;

 private:
  enum class Read { Line, Eof, Timeout };
  Read read_line(std::chrono::steady_clock::time_point deadline, std::string* line);
  bool spawn(int world, std::string* error);
  std::string fail(const std::string& what);  // kills the pool, returns "upstream backend: what[: last stderr]"
  std::string stderr_tail() const;            // the last non-empty line the pool wrote to stderr
  bool leader_exited() const;       // the coordinator has exited (not reaped yet)
  bool wait_exit(int ms) const;     // up to `ms` for it to exit; whether it did
  // Waits up to grace_ms for the coordinator to exit, then SIGTERM and up to
  // term_ms (< 0: opt_.cleanup) for its cleanup (ranks, directory), then kills
  // its group and reaps it: "exit 1".
  std::string reap(int grace_ms = 2000, int term_ms = -1);

  UpstreamOptions opt_;
  int world_ = 0;
  pid_t pid_ = -1;  // the coordinator, leader of its own process group
  real::SignalCleanup cleanup_;  // SIGINT/SIGTERM/SIGHUP: the coordinator asked to stop (its group killed if we die)
  int in_fd_ = -1;   // its stdin
  int out_fd_ = -1;  // its stdout
  int err_fd_ = -1;  // an unlinked temp file holding its stderr
  std::string buf_;  // stdout read but not yet split into lines
  std::map<std::string, std::string> versions_;
  std::vector<std::string> unobserved_;
  int starts_ = 0;
  double start_seconds_ = 0;
  std::chrono::steady_clock::time_point give_up_ = std::chrono::steady_clock::time_point::max();
};

// True when `diff` (one observation_diff line, "param[3]: ...") is about one
// of the `fields` ("param" matches "param[3]").
bool diff_field_in(const std::string& diff, const std::vector<std::string>& fields);

// Runs `<python> -m MODULE ARGS...` (the pool's Python, the package on
// PYTHONPATH) with the caller's stdin, stdout and stderr, and returns its exit
// status; -1 with *error (naming the install command) when Python is missing.
int run_python_module(const std::string& module, const std::vector<std::string>& args, std::string* error);

// The Python of a release set's environment (release_env.py builds it on first
// use, kept in the per-user releases cache, release_env.py::releases_dir): 0
// with *python (empty for the pinned set: the default Python, $FSDPSIM_PYTHON or .venv's); 3 (a malformed set) or 1
// (cannot be installed or imported: "cannot run: ...") with *message; -1 when
// .venv's Python is missing.
int release_python(const std::string& set, std::string* python, std::string* message);
// The package's final releases on PyPI, oldest first (release_env.py --list,
// cached a day in the releases cache): 0, or 4 with *message when PyPI cannot be
// reached and nothing is cached; -1 when .venv's Python is missing.
int release_list(const std::string& package, std::vector<std::string>* versions, std::string* message);

}  // namespace fsdpsim::upstream
