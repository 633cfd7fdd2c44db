// What SIGINT, SIGTERM or SIGHUP must not leave behind: forked rank processes
// (killed, and waited for so that none writes a file after it is removed),
// the upstream pool's coordinators (asked to stop, their groups killed) and
// temporary files and directories (removed). Any number of registrations and
// paths of any length: the handler reads an immutable snapshot that normal code
// replaces whole, so it never sees a half-written table. After cleaning up it
// calls the handler installed before it (the CLI's, which may print partial
// results) or, where there was none, dies of the signal as it would have.
// A signal that is ignored when the first registration is made (nohup) stays ignored.
// The one handler of the process for its children: it signals only pids and
// groups registered here, through child_signal.hpp, and nothing in a forked
// child that inherited it.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fsdpsim::real {

class SignalCleanup {
 public:
  SignalCleanup();  // installs the handlers on first use
  ~SignalCleanup();
  SignalCleanup(const SignalCleanup&) = delete;
  SignalCleanup& operator=(const SignalCleanup&) = delete;

  // A child the handler kills (SIGKILL) and waits for.
  void add_pid(pid_t pid);
  // Before the pid is reaped: on return no handler holds it any more, so none
  // signals it once it is reaped and its pid reused.
  void remove_pid(pid_t pid);
  // A child leading its own process group (the upstream pool's coordinator):
  // the handler sends it SIGTERM, and where the process is about to die of the
  // signal (no handler to chain to) waits up to cleanup_ms for it to exit, then
  // kills its group. remove_group: before it is reaped, as remove_pid.
  void add_group(pid_t leader, int cleanup_ms);
  void remove_group(pid_t leader);
  // Files unlinked, then the directory removed (empty: none).
  void set_paths(std::vector<std::string> files, std::string dir);
  void clear_paths() { set_paths({}, {}); }

 private:
  uint64_t id_;
};

// How many signals the handler has caught in this process, and the last one
// (0: none), for reports of the runs they cut short.
int interrupt_count();
int interrupting_signal();

}  // namespace fsdpsim::real
