#include "real_backend/upstream/pool_client.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <sstream>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/vocab/json_reader.hpp"
#include "model/vocab/observation_json.hpp"
#include "real_backend/child_signal.hpp"
#include "real_backend/fork_guard.hpp"
#include "real_backend/store_dir.hpp"

extern char** environ;

namespace fsdpsim::upstream {
namespace {

const char* const kInstallHint = "; run `bash .ci/install-deps.sh` to create .venv";

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// A command name without '/' is looked up in PATH, like execvp would.
std::string resolve(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return cmd;
  std::stringstream path(env_or("PATH", "/usr/bin:/bin"));
  for (std::string dir; std::getline(path, dir, ':');) {
    std::string p = (dir.empty() ? "." : dir) + "/" + cmd;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return cmd;
}

bool write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string clip(const std::string& s, size_t n = 200) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

// The ops of a canonical .seq text: non-blank, non-comment lines after `---`.
int count_ops(const std::string& text) {
  std::stringstream in(text);
  bool ops = false;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    if (!ops) ops = line.compare(b, 3, "---") == 0;
    else ++n;
  }
  return n;
}

}  // namespace

bool diff_field_in(const std::string& diff, const std::vector<std::string>& fields) {
  std::string name = diff.substr(0, diff.find(':'));
  std::string base = name.substr(0, name.find('['));
  for (const auto& f : fields)
    if (f == name || f == base) return true;
  return false;
}

UpstreamPool::UpstreamPool(UpstreamOptions opt) : opt_(std::move(opt)) {}

UpstreamPool::~UpstreamPool() { stop(); }

std::string UpstreamPool::versions_line() const {
  std::string out = "upstream:";
  const char* names[] = {"torch", "peft", "accelerate", "transformers"};
  for (size_t i = 0; i < 4; ++i) {
    auto it = versions_.find(names[i]);
    out += std::string(i ? ", " : " ") + names[i] + " " + (it == versions_.end() ? "?" : it->second);
  }
  return out;
}

std::string UpstreamPool::stderr_tail() const {
  if (err_fd_ < 0) return "";
  struct stat st {};
  if (::fstat(err_fd_, &st) != 0 || st.st_size == 0) return "";
  off_t from = st.st_size > 4096 ? st.st_size - 4096 : 0;
  std::string text(static_cast<size_t>(st.st_size - from), '\0');
  ssize_t n = ::pread(err_fd_, text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::stringstream in(text);
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return clip(last, 300);
}

bool UpstreamPool::leader_exited() const {
  siginfo_t info{};
  return pid_ > 0 && ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
}

bool UpstreamPool::wait_exit(int ms) const {
  for (int i = 0; i < ms / 10 && !leader_exited(); ++i) ::usleep(10000);
  return leader_exited();
}

std::string UpstreamPool::reap(int grace_ms, int term_ms) {
  if (pid_ <= 0) return "";
  // A coordinator still running gets SIGTERM and time to stop its ranks and
  // remove its directory; its group is killed after that whatever it did.
  if (!wait_exit(grace_ms) && real::signal_child(pid_, SIGTERM)) wait_exit(term_ms < 0 ? static_cast<int>(opt_.cleanup.count()) : term_ms);
  real::signal_child_group(pid_, SIGKILL);  // before the leader is reaped, so its id cannot have been reused
  cleanup_.remove_group(pid_);               // and out of the signal handler's table before that, too
  int status = 0;
  real::wait_child(pid_, &status);
  pid_ = -1;
  return exit_text(status);
}

void UpstreamPool::stop() {
  if (pid_ > 0) {
    write_all(in_fd_, "{\"cmd\":\"quit\"}\n");
    ::close(in_fd_);
    in_fd_ = -1;
    // A loaded machine's ranks take seconds to leave (the coordinator bounds its
    // wait for them); killing it sooner would leave its directory behind.
    reap(static_cast<int>(opt_.cleanup.count()), 2000);
  }
  for (int* fd : {&in_fd_, &out_fd_, &err_fd_})
    if (*fd >= 0) ::close(*fd), *fd = -1;
  buf_.clear();
}

std::string UpstreamPool::fail(const std::string& what) {
  std::string tail = stderr_tail();
  std::string msg = "upstream backend: " + what;
  if (!tail.empty() && what.find(tail) == std::string::npos) msg += " (pool stderr: " + tail + ")";
  reap(0);  // SIGTERM at once: the coordinator removes its directory
  stop();
  return msg;
}

UpstreamPool::Read UpstreamPool::read_line(std::chrono::steady_clock::time_point deadline, std::string* line) {
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      *line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return Read::Line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return Read::Timeout;
    // The coordinator's children may hold its stdout open after it dies: no
    // EOF then, so its exit is looked for too (once nothing is left to read).
    bool exited = leader_exited();
    pollfd p{out_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, exited ? 0 : static_cast<int>(std::min<long long>(left, 100)));
    if (r < 0 && errno != EINTR) return Read::Eof;
    if (r == 0 && exited) return Read::Eof;
    if (r <= 0) continue;
    char chunk[65536];
    ssize_t n = ::read(out_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Read::Eof;
    buf_.append(chunk, static_cast<size_t>(n));
  }
}

// Whether a failed start is the Python environment's fault (reinstalling
// .venv may help), not the machine's or the network's.
bool environment_cause(const std::string& message) {
  for (const char* s : {"no Python at", "exec of the upstream pool", "No module named", "ImportError", "ModuleNotFoundError",
                        "cannot import name", "undefined symbol"})
    if (message.find(s) != std::string::npos) return true;
  return false;
}

// What to try after a failed start, when the message points at a cause the user set.
std::string start_hint(const std::string& message) {
  if (environment_cause(message)) return kInstallHint;
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname && message.find(ifname) != std::string::npos)
    return std::string("; GLOO_SOCKET_IFNAME=") + ifname + " is set: unset it or name an existing interface";
  return "";
}

bool UpstreamPool::spawn(int world, std::string* error) {
  auto fail_start = [&](const std::string& what) {
    std::string msg = fail(what);
    if (error) *error = msg + start_hint(msg);
    return false;
  };
  std::string python = resolve(opt_.python.empty() ? env_or("FSDPSIM_PYTHON", std::string(FSDPSIM_SOURCE_DIR) + "/.venv/bin/python")
                                                   : opt_.python);
  std::string module = opt_.module.empty() ? env_or("FSDPSIM_UPSTREAM_MODULE", "fsdpsim_upstream.pool") : opt_.module;
  if (::access(python.c_str(), X_OK) != 0) return fail_start("no Python at " + python);

  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::string pythonpath = std::string(FSDPSIM_SOURCE_DIR) + "/real_backend/upstream";
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonpath += std::string(":") + old;
  std::vector<std::string> env_s = {"PYTHONPATH=" + pythonpath, "PYTHONUNBUFFERED=1"};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0 && std::strncmp(*e, "PYTHONUNBUFFERED=", 17) != 0) env_s.push_back(*e);
  std::vector<std::string> argv_s = {python, "-u", "-m", module, "--world", std::to_string(world), "--timeout-ms",
                                     std::to_string(opt_.rank_timeout_ms)};
  std::vector<char*> envp, argv;
  for (auto& s : env_s) envp.push_back(s.data());
  for (auto& s : argv_s) argv.push_back(s.data());
  envp.push_back(nullptr);
  argv.push_back(nullptr);

  std::string err_path = real::temp_base() + "/fsdpsim-upstream-stderr-XXXXXX";
  int err_fd = ::mkstemp(err_path.data());
  if (err_fd < 0) return fail_start("cannot create a temp file for its stderr in " + real::temp_base() + ": " + std::strerror(errno));
  ::unlink(err_path.c_str());
  int to_child[2], from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
    ::close(err_fd);
    return fail_start(std::string("pipe: ") + std::strerror(errno));
  }
  // Signals wait until the child is registered (or has reset its handlers): the
  // handler then asks it to stop, and never runs in it.
  sigset_t block, saved;
  sigemptyset(&block);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, s);
  ::pthread_sigmask(SIG_BLOCK, &block, &saved);
  pid_t parent = ::getpid();
  std::unique_lock<std::mutex> no_threads_mid_work(real::fork_mutex());  // fork_guard.hpp
  pid_t pid = ::fork();
  no_threads_mid_work.unlock();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the pool cleans up and leaves when fsdpsim dies
    if (::getppid() != parent) _exit(127);
    ::dup2(to_child[0], 0);
    ::dup2(from_child[1], 1);
    ::dup2(err_fd, 2);  // dup2 clears O_CLOEXEC on the copies
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(s, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &saved, nullptr);  // a signal pending since the fork: the default action, here
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "fsdpsim: exec of the upstream pool's python failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  const int fork_errno = errno;
  ::close(to_child[0]);
  ::close(from_child[1]);
  if (pid > 0) {
    ::setpgid(pid, pid);  // also here: whichever runs first
    // When the process dies of a signal, the coordinator's time to stop its ranks and remove
    // its directory before its group is killed (the handler's bound, signal_cleanup.hpp).
    cleanup_.add_group(pid, static_cast<int>(opt_.cleanup.count()));
  }
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    ::close(to_child[1]), ::close(from_child[0]), ::close(err_fd);
    return fail_start(std::string("fork: ") + std::strerror(fork_errno));
  }
  pid_ = pid;
  in_fd_ = to_child[1];
  out_fd_ = from_child[0];
  err_fd_ = err_fd;
  world_ = world;
  buf_.clear();
  versions_.clear();
  unobserved_.clear();

  std::string line;
  const auto spawned = std::chrono::steady_clock::now();
  ++starts_;
  auto deadline = std::min(spawned + opt_.startup, give_up_);
  Read r = read_line(deadline, &line);
  if (r == Read::Timeout && deadline == give_up_) return fail_start("start given up at the caller's deadline");
  if (r == Read::Timeout)
    return fail_start("no ready line from `" + python + " -m " + module + "` within " +
                      std::to_string(opt_.startup.count() / 1000) + " s");
  if (r == Read::Eof) {
    std::string status = reap();
    std::string tail = stderr_tail();
    return fail_start("`" + python + " -m " + module + "` exited before it was ready (" + status + ")" +
                      (tail.empty() ? "" : ": " + tail));
  }
  JsonValue v;
  std::string err;
  if (!parse_json(line, &v, &err) || v.kind != JsonValue::Kind::Object)
    return fail_start("expected the ready line, got '" + clip(line) + "'");
  const JsonValue* event = v.find("event");
  std::string ev = event && event->kind == JsonValue::Kind::String ? event->text : "";
  if (ev == "error") {
    const JsonValue* m = v.find("message");
    return fail_start("the pool could not start: " + (m && m->kind == JsonValue::Kind::String ? m->text : clip(line)));
  }
  const JsonValue* w = v.find("world");
  if (ev != "ready" || !w || !w->integral || w->integer != world)
    return fail_start("expected {\"event\":\"ready\",\"world\":" + std::to_string(world) + ",...}, got '" + clip(line) + "'");
  if (const JsonValue* vs = v.find("versions"))
    for (const auto& [k, x] : vs->members)
      if (x.kind == JsonValue::Kind::String) versions_[k] = x.text;
  if (const JsonValue* u = v.find("unobserved"))
    for (const auto& x : u->items)
      if (x.kind == JsonValue::Kind::String) unobserved_.push_back(x.text);
  start_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - spawned).count();
  return true;
}

bool UpstreamPool::start(int world, std::string* error) {
  if (pid_ > 0 && world == world_) return true;
  stop();
  return spawn(world, error);
}

UpstreamResult UpstreamPool::run(const std::string& canonical_seq_text, const std::string& switches_json) {
  UpstreamResult res;
  if (pid_ <= 0 && !start(world_, &res.error)) return res;
  std::ostringstream req;
  req << "{\"cmd\":\"run\",\"seq\":";
  print_json_string(req, canonical_seq_text);
  if (!switches_json.empty()) req << ",\"switches\":" << switches_json;
  req << "}\n";
  if (!write_all(in_fd_, req.str())) {
    res.error = fail("the pool does not take requests (its stdin is closed)");
    return res;
  }
  auto limit = opt_.per_run + opt_.per_op * count_ops(canonical_seq_text);
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (std::string line;;) {
    Read r = read_line(deadline, &line);
    if (r == Read::Timeout) {
      res.error = fail("no answer from the pool within " + std::to_string(limit.count() / 1000) + " s; pool killed");
      return res;
    }
    if (r == Read::Eof) {
      std::string status = reap();
      std::string tail = stderr_tail();
      res.error = fail("the pool exited during a run (" + status + ")" + (tail.empty() ? "" : ": " + tail));
      return res;
    }
    JsonValue v;
    std::string err;
    if (!parse_json(line, &v, &err)) {
      res.error = fail("unreadable line from the pool (" + err + "): '" + clip(line) + "'");
      return res;
    }
    const JsonValue* event = v.find("event");
    if (!event) {
      Observation o;
      if (!observation_from_json(v, &o, &err)) {
        res.error = fail("bad observation from the pool (" + err + "): '" + clip(line) + "'");
        return res;
      }
      res.obs.push_back(std::move(o));
      continue;
    }
    if (event->text == "wait") {  // a rank is slow or stopped: the coordinator waits on, and so do we
      deadline = std::max(deadline, std::chrono::steady_clock::now() + opt_.per_run);
      continue;
    }
    if (event->text == "done") {
      const JsonValue* rs = v.find("restarted");
      res.restarted = rs && rs->kind == JsonValue::Kind::Bool && rs->boolean;
      const JsonValue* by = v.find("prepared_by");
      if (by && by->kind == JsonValue::Kind::String) res.prepared_by = by->text;
      res.ok = true;
      return res;
    }
    if (event->text == "error") {
      const JsonValue* m = v.find("message");
      res.error = fail(m && m->kind == JsonValue::Kind::String ? m->text : "error event without a message: '" + clip(line) + "'");
      return res;
    }
    res.error = fail("unexpected line from the pool: '" + clip(line) + "'");
    return res;
  }
}

namespace {

// `<python> -m MODULE ARGS...` with the package on PYTHONPATH; its stdout and
// stderr go to out_fd and err_fd when >= 0, else to the caller's.
int spawn_module(const std::string& module, const std::vector<std::string>& args, int out_fd, int err_fd, std::string* error) {
  std::string python = resolve(env_or("FSDPSIM_PYTHON", std::string(FSDPSIM_SOURCE_DIR) + "/.venv/bin/python"));
  if (::access(python.c_str(), X_OK) != 0) {
    *error = "upstream backend: no Python at " + python + kInstallHint;
    return -1;
  }
  std::string pythonpath = std::string(FSDPSIM_SOURCE_DIR) + "/real_backend/upstream";
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonpath += std::string(":") + old;
  std::vector<std::string> argv_s = {python, "-m", module};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  // torch's compile caches (importing accelerate or PEFT makes one) in a directory of ours, removed
  // after, not $TMPDIR/torchinductor_<user> left behind (the pool does the same: pool.py's RankProc);
  // a cache directory the caller set is kept.
  std::string caches = real::temp_base() + "/fsdpsim-torch-caches-XXXXXX";
  if (!::mkdtemp(caches.data())) caches.clear();
  const std::string inductor = caches + "/inductor", triton = caches + "/triton";
  auto remove_caches = [&caches] {
    std::error_code ec;
    if (!caches.empty()) std::filesystem::remove_all(caches, ec);
  };
  std::unique_lock<std::mutex> no_threads_mid_work(real::fork_mutex());  // fork_guard.hpp
  pid_t pid = ::fork();
  no_threads_mid_work.unlock();
  if (pid < 0) {
    *error = std::string("upstream backend: fork failed: ") + std::strerror(errno);
    remove_caches();
    return -1;
  }
  if (pid == 0) {
    ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
    if (!caches.empty()) {
      ::setenv("TORCHINDUCTOR_CACHE_DIR", inductor.c_str(), 0);
      ::setenv("TRITON_CACHE_DIR", triton.c_str(), 0);
    }
    if (out_fd >= 0) ::dup2(out_fd, 1);
    if (err_fd >= 0) ::dup2(err_fd, 2);
    ::execv(python.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  real::wait_child(pid, &status);
  remove_caches();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string last_line_of(FILE* f) {
  std::string text, line, last;
  std::rewind(f);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::istringstream in(text);
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

int run_python_module(const std::string& module, const std::vector<std::string>& args, std::string* error) {
  return spawn_module(module, args, -1, -1, error);
}

namespace {

// An unlinked temporary file under $TMPDIR (std::tmpfile ignores TMPDIR), or null.
FILE* temp_file() {
  std::string path = real::temp_base() + "/fsdpsim-release-env-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) return nullptr;
  ::unlink(path.c_str());
  FILE* f = ::fdopen(fd, "w+");
  if (!f) ::close(fd);
  return f;
}

// `python -m fsdpsim_upstream.release_env ARGS`: its exit status, its whole
// stdout, and its stderr's last line (the reason, on a failure).
int release_env(const std::vector<std::string>& args, std::string* out_text, std::string* message) {
  FILE* out = temp_file();
  FILE* err = temp_file();
  if (!out || !err) {
    if (out) std::fclose(out);
    if (err) std::fclose(err);
    *message = std::string("cannot create a temp file: ") + std::strerror(errno);
    return -1;
  }
  int rc = spawn_module("fsdpsim_upstream.release_env", args, fileno(out), fileno(err), message);
  if (rc >= 0) {
    std::rewind(out);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, out)) > 0) out_text->append(buf, n);
  }
  if (rc > 0) *message = last_line_of(err);
  std::fclose(out);
  std::fclose(err);
  return rc;
}

}  // namespace

int release_python(const std::string& set, std::string* python, std::string* message) {
  std::string text;
  int rc = release_env({set}, &text, message);
  if (rc == 0) {
    std::string line, last;
    std::istringstream in(text);
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    *python = last == "-" ? "" : last;  // "-": the pinned set, the default Python
  }
  return rc;
}

int release_list(const std::string& package, std::vector<std::string>* versions, std::string* message) {
  std::string text;
  int rc = release_env({"--list", package}, &text, message);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) versions->push_back(line);
  return rc;
}

}  // namespace fsdpsim::upstream
