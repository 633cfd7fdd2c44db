// `fsdpsim record [--out FILE.seq] [--steps N] [--seconds T] -- COMMAND...`: runs the user's own
// command (python train.py, torchrun ... train.py) with the tracer of
// real_backend/upstream/fsdpsim_upstream/record/inject on PYTHONPATH (its sitecustomize.py; torchrun
// passes the environment on to the ranks), activated by FSDPSIM_RECORD_DIR naming this run's event
// folder under $TMPDIR; then the writer (fsdpsim_upstream.record.write) merges the ranks' logs into a
// `.seq`, which is parsed here before it is written out. The folder is removed on every path; on
// the time limit or Ctrl-C every process holding this run's FSDPSIM_RECORD_DIR (torchrun starts its
// ranks in their own sessions, so the process group alone does not reach them) is killed.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "real_backend/child_signal.hpp"
#include "real_backend/fork_guard.hpp"
#include "real_backend/store_dir.hpp"
#include "real_backend/upstream/pool_client.hpp"
#include "sim/cli/commands.hpp"
#include "sim/cli/interrupt.hpp"
#include "sim/cli/output.hpp"

namespace fsdpsim::cli {
namespace {

namespace fs = std::filesystem;

// The run's folder under $TMPDIR, removed when the command ends, whatever the path.
struct RunDir {
  std::string path;
  RunDir() {
    path = real::temp_base() + "/fsdpsim-record-XXXXXX";
    if (!::mkdtemp(path.data())) throw InfraError("record: cannot create a folder in " + real::temp_base());
    fs::create_directory(path + "/events");
    fs::create_directory(path + "/tmp");
  }
  ~RunDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// Every process whose environment holds this run's marker: torchrun, its ranks, their children
// (descendants of the command, signalled by pid through child_signal.hpp; never this process).
std::vector<pid_t> run_processes(const std::string& marker) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(marker + '\0') != std::string::npos || (env.size() >= marker.size() && env.compare(env.size() - marker.size(), marker.size(), marker) == 0))
      if (const pid_t pid = static_cast<pid_t>(std::stol(name)); pid != ::getpid()) out.push_back(pid);
  }
  return out;
}

// SIGTERM to the command's group and to every process of the run, 5 s to leave, then SIGKILL.
void stop_run(pid_t child, const std::string& marker) {
  real::signal_child_group(child, SIGTERM);
  for (pid_t p : run_processes(marker)) real::signal_child(p, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    int status = 0;
    const bool child_gone = real::wait_child(child, &status, WNOHANG) != 0;
    if (child_gone && run_processes(marker).empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  real::signal_child_group(child, SIGKILL);
  for (pid_t p : run_processes(marker)) real::signal_child(p, SIGKILL);
  int status = 0;
  real::wait_child(child, &status);
}

// Starts the command in its own process group with the tracer on PYTHONPATH and the project's
// .venv first on PATH; its stdout goes to ours, or to stderr when the .seq is printed.
pid_t start_command(const std::vector<std::string>& command, const RunDir& dir, bool stdout_to_stderr) {
  const std::string python = env_or("FSDPSIM_PYTHON", std::string(FSDPSIM_SOURCE_DIR) + "/.venv/bin/python");
  const std::string venv_bin = fs::path(python).parent_path().string();
  std::string path = venv_bin + ":" + env_or("PATH", "/usr/bin:/bin");
  std::string pythonpath = std::string(FSDPSIM_SOURCE_DIR) + "/real_backend/upstream/fsdpsim_upstream/record/inject";
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonpath += std::string(":") + old;
  const std::string events = dir.path + "/events", caches = dir.path + "/caches";
  std::vector<std::string> argv_s = command;
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::unique_lock<std::mutex> no_threads_mid_work(real::fork_mutex());  // fork_guard.hpp
  pid_t pid = ::fork();
  no_threads_mid_work.unlock();
  if (pid < 0) throw InfraError(std::string("record: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::setenv("PATH", path.c_str(), 1);
    ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
    ::setenv("FSDPSIM_RECORD_DIR", events.c_str(), 1);
    // torch's compile caches (importing PEFT makes one) inside the run's folder, removed with it.
    ::setenv("TORCHINDUCTOR_CACHE_DIR", (caches + "/inductor").c_str(), 0);
    ::setenv("TRITON_CACHE_DIR", (caches + "/triton").c_str(), 0);
    // The command's temporary files too: torchrun makes a torchelastic_* log folder under $TMPDIR
    // per launch and never removes it (torch/distributed/elastic/multiprocessing/api.py, DefaultLogsSpecs._make_log_dir).
    ::setenv("TMPDIR", (dir.path + "/tmp").c_str(), 1);
    if (stdout_to_stderr) ::dup2(2, 1);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "fsdpsim record: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  return pid;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + (w.find_first_of(" \t'\"") == std::string::npos ? w : "'" + w + "'");
  return out;
}

}  // namespace

int cmd_record(const Args& a, const RecordFlags& own) {
  if (a.command.empty())
    throw SourceError("<command line>", {}, "record expects the command to run after `--`: fsdpsim record [--out FILE.seq] -- torchrun --nproc_per_node=2 train.py");
  if (!a.positional.empty())
    throw SourceError("<command line>", {}, "record takes its command after `--`, got '" + a.positional[0] + "' before it");
  RunDir dir;
  arm_interrupts();
  const pid_t child = start_command(a.command, dir, a.out.empty());
  const int seconds = a.have_seconds ? static_cast<int>(a.seconds) : 900;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  const std::string marker = "FSDPSIM_RECORD_DIR=" + dir.path + "/events";
  int status = 0;
  std::vector<std::string> header;
  while (real::wait_child(child, &status, WNOHANG) == 0) {
    if (int sig = interrupted()) {
      stop_run(child, marker);
      std::cerr << "fsdpsim record: interrupted; the command was stopped and nothing was written\n";
      return interrupted_exit(sig);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      stop_run(child, marker);
      header.push_back("the command ran past the " + std::to_string(seconds) + " s limit (--seconds) and was stopped: the ops end there");
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t p : run_processes(marker)) real::signal_child(p, SIGKILL);  // a rank the launcher left behind
  if (status != -1 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 127) throw SourceError("<command line>", {}, "record could not run '" + a.command[0] + "' (not found on PATH, with the project's .venv/bin first)");
    header.push_back("the command exited with status " + std::to_string(code));
  }
  const std::string seq = dir.path + "/recorded.seq";
  std::vector<std::string> args = {dir.path + "/events", "--out", seq, "--steps", std::to_string(own.steps), "--command", joined(a.command)};
  for (const auto& h : header) args.insert(args.end(), {"--header", h});
  std::string error;
  const int rc = upstream::run_python_module("fsdpsim_upstream.record.write", args, &error);
  if (rc == 3) {  // the writer listed what it saw and cannot express
    for (const auto& h : header) std::cerr << "fsdpsim record: " << h << "\n";
    return status == -1 ? kInfra : kBadInput;
  }
  if (rc != 0) throw InfraError("record: the writer failed" + (error.empty() ? " (exit " + std::to_string(rc) + ")" : ": " + error));
  try {
    parse_seq_file(seq);  // the vocabulary's own check of what was written
  } catch (const SourceError& e) {  // the writer's mistake, not the user's input
    throw InfraError(std::string("record wrote a .seq the parser refuses: ") + e.what());
  }
  std::ifstream in(seq);
  std::stringstream text;
  text << in.rdbuf();
  if (a.out.empty()) {
    std::cout << text.str();
  } else {
    std::ofstream out(a.out);
    out << text.str();
    if (!out) throw WriteError(a.out, std::strerror(errno));
    std::cerr << "fsdpsim record: wrote " << a.out << "\n";
  }
  for (const auto& h : header) std::cerr << "fsdpsim record: " << h << "\n";
  return status == -1 ? kInfra : kClean;
}

}  // namespace fsdpsim::cli
