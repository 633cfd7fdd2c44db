// What SIGINT, SIGTERM or SIGHUP must not leave behind: forked rank processes
// (killed, and waited for so that none writes a file after it is removed) and
// temporary files and directories (removed). Any number of registrations and
// paths of any length: the handler reads an immutable snapshot that normal code
// replaces whole, so it never sees a half-written table. After cleaning up it
// calls the handler installed before it (the CLI's, which may print partial
// results) or, where there was none, dies of the signal as it would have.
// A signal that is ignored when the first registration is made (nohup) stays ignored.
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

  void add_pid(pid_t pid);
  // Before the pid is reaped, so the handler never signals a reused pid.
  void remove_pid(pid_t pid);
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
